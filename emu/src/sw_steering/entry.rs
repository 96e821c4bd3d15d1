//! One 64-byte STEv1 entry as the device reads it from ICM (rdma-core mlx5_ifc.h
//! `ste_match_bwc_v1` and `ste_mask_and_match_v1`, written by dr_ste_v1.c's setters). Big-endian
//! double words; bit numbers below count from each word's least significant bit.
//!
//! | bytes | fields |
//! |---|---|
//! | 0..4 | `entry_format` 31:24, `counter_id` 23:0 |
//! | 4..8 | miss gvmi (`miss_address_63_48`) 31:16, `match_definer_ctx_idx` 15:8, `miss_address_39_32` 7:0 |
//! | 8..12 | `miss_address_31_6` 31:6, `match_polarity` 4, `reparse` 3 |
//! | 12..16 | hit gvmi (`next_table_base_63_48`) 31:16, `hash_definer_ctx_idx` 15:8, `next_table_base_39_32_size` 7:0 |
//! | 16..20 | `next_table_base_31_5_size` 31:5, `hash_type` 4:3, `hash_after_actions` 2 |
//! | 20..24 | BWC: `byte_mask` 31:16, `next_entry_format` 15, `mask_mode` 14, `gvmi` 13:0; MATCH: actions |
//! | 24..32 | actions (BWC: 8 bytes; MATCH: 12 bytes from byte 20) |
//! | 32..48 | BWC: bit mask (rdma-core swaps its tag and mask into this order before posting, `dr_ste_v1_prepare_for_postsend`) |
//! | 48..64 | BWC: tag |
//! | 32..64 | MATCH: the 32-byte tag compared through the entry's definer |
//!
//! Reserved bits, and control features rdma-core never sets (match polarity, a hash type other
//! than 0, hashing after actions, mask mode 1), are refused rather than guessed at.

use super::hash::TAG_SIZE;

/// Bytes in one steering entry (`DR_STE_SIZE`).
pub(crate) const STE_SIZE: usize = 64;

/// Largest hash table rdma-core allocates: `DR_CHUNK_SIZE_16384K`, the last chunk size before
/// `DR_CHUNK_SIZE_MAX` in mlx5dv_dr.h (2^24 entries).
pub(crate) const MAX_TABLE_ENTRIES: u32 = 1 << 24;

/// Addresses in an entry hold bits 39:0 of the ICM address (the gvmi fields stand for 63:48).
const ADDR_MASK: u64 = (1 << 40) - 1;

/// The entry format (`enum dr_ste_v1_entry_format`), which is also the high byte of the
/// entry's lookup type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EntryFormat {
    /// Bit-wise compare with byte-mask hashing (0): lookup types 0x00xx.
    BwcByte,
    /// The same layout with double-word hashing (1): lookup types 0x01xx.
    BwcDw,
    /// Mask-and-match over a definer, byte mode (2); rdma-core writes it only with definers.
    MatchAndMaskByte,
    /// Mask-and-match over a definer, double-word mode (3).
    MatchAndMaskDw,
    /// Match over a definer (4): with definer index 0x0f (`DR_STE_V1_LU_TYPE_MATCH |
    /// DONT_CARE`) the action-only extension entries rdma-core chains after a rule's last entry.
    Match,
}

impl EntryFormat {
    fn from_raw(raw: u8) -> Result<Self, EntryError> {
        Ok(match raw {
            0 => Self::BwcByte,
            1 => Self::BwcDw,
            2 => Self::MatchAndMaskByte,
            3 => Self::MatchAndMaskDw,
            4 => Self::Match,
            other => return Err(EntryError::UnknownFormat(other)),
        })
    }

    /// The entry has the BWC layout (byte mask, next entry format, bit mask and tag).
    pub(crate) fn is_bwc(self) -> bool {
        matches!(self, Self::BwcByte | Self::BwcDw)
    }
}

/// Where an entry's hit leads (`dr_ste_v1_set_hit_addr`): a table of `entries` slots at `base`.
/// rdma-core stores `(address >> 5) | entries`; the table is aligned to its size, so the lowest
/// set bit is the size. Terminals (drop, wire, TIR, table roots) are written with one entry;
/// always-miss entries store all ones (decoded as one entry at the top of the 40-bit space).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HitAddr {
    /// ICM address bits 39:5 of the table's first entry (bits 63:40 zero).
    pub(crate) base: u64,
    /// Slots in the table, a power of two, 1..=[`MAX_TABLE_ENTRIES`].
    pub(crate) entries: u32,
    /// The gvmi written for address bits 63:48 (`next_table_base_63_48`).
    pub(crate) gvmi: u16,
}

/// A decoded, validated entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ste {
    /// The entry format.
    pub(crate) format: EntryFormat,
    /// Lookup type: `entry_format << 8 | match_definer_ctx_idx` (`dr_ste_v1_set_lu_type`).
    pub(crate) lookup_type: u16,
    /// Lookup type of the table the hit address names: `next_entry_format << 8 |
    /// hash_definer_ctx_idx`; a MATCH entry has no `next_entry_format` bit, so only the index.
    pub(crate) next_lookup_type: u16,
    /// Flow counter to count a hit in; 0 for none (inferred: rdma-core writes
    /// `object_id + offset`, and counter objects are never 0).
    pub(crate) counter_id: u32,
    /// ICM address bits 39:6 of the single entry a miss goes to (bits 63:40 zero).
    pub(crate) miss_addr: u64,
    /// The gvmi written for the miss address's bits 63:48.
    pub(crate) miss_gvmi: u16,
    /// Where a hit goes.
    pub(crate) hit: HitAddr,
    /// Re-parse the packet after this entry's actions changed it.
    pub(crate) reparse: bool,
    /// Byte mask of the next table's hashing (bit 15 - i: tag byte i); 0 for MATCH entries.
    pub(crate) byte_mask: u16,
    /// The entry's own gvmi (14 bits); 0 for MATCH entries.
    pub(crate) gvmi: u16,
    /// The action area: 8 bytes in BWC entries, 12 in MATCH entries.
    actions: [u8; 12],
    /// Bytes of `actions` in use (8 or 12).
    action_len: usize,
    /// The 16-byte bit mask (BWC entries; zero otherwise).
    pub(crate) mask: [u8; TAG_SIZE],
    /// The 16-byte tag (BWC entries; zero otherwise).
    pub(crate) tag: [u8; TAG_SIZE],
    /// The 32-byte match area of a non-BWC entry is all zero.
    pub(crate) match_area_zero: bool,
    /// The 32-byte tag of a MATCH entry (bytes 32..64; zero otherwise): compared with the
    /// packet's tag through the entry's definer.
    pub(crate) match_tag: [u8; 32],
}

impl Ste {
    /// The entry's action words, 8 or 12 bytes.
    pub(crate) fn action_area(&self) -> &[u8] {
        &self.actions[..self.action_len]
    }
}

/// Why an entry could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum EntryError {
    /// `entry_format` is not one of the five formats.
    #[error("unknown STE entry format {0:#x}")]
    UnknownFormat(u8),
    /// A reserved control bit is set (byte offset of its double word given).
    #[error("reserved bits set in the STE control word at byte {0}")]
    ReservedBits(usize),
    /// A control feature rdma-core never writes and the model does not implement.
    #[error("unsupported STE control feature: {0}")]
    Unsupported(&'static str),
    /// The hit address field is zero: no table size bit.
    #[error("STE hit address holds no table size")]
    NoTableSize,
    /// The hit address names a table larger than [`MAX_TABLE_ENTRIES`].
    #[error("STE hit table of {0} entries is larger than the largest chunk")]
    TableTooLarge(u64),
}

/// Bits `hi..=lo` of the big-endian double word at byte `off`.
fn bits(raw: &[u8; STE_SIZE], off: usize, hi: u32, lo: u32) -> u32 {
    let dw = u32::from_be_bytes([raw[off], raw[off + 1], raw[off + 2], raw[off + 3]]);
    let width = hi - lo + 1;
    let mask = if width == 32 {
        u32::MAX
    } else {
        (1u32 << width) - 1
    };
    (dw >> lo) & mask
}

/// Decodes and validates one entry. Never panics: whatever the bytes, an [`Ste`] or an error.
pub(crate) fn decode(raw: &[u8; STE_SIZE]) -> Result<Ste, EntryError> {
    let format = EntryFormat::from_raw(bits(raw, 0, 31, 24) as u8)?;
    // dr_ste_v1 never writes these: reserved_at_5a (bit 5), reserved_at_5d (2:0) of DW 2,
    // reserved_at_9e (1:0) of DW 4.
    if bits(raw, 8, 5, 5) != 0 || bits(raw, 8, 2, 0) != 0 {
        return Err(EntryError::ReservedBits(8));
    }
    if bits(raw, 16, 1, 0) != 0 {
        return Err(EntryError::ReservedBits(16));
    }
    if bits(raw, 8, 4, 4) != 0 {
        return Err(EntryError::Unsupported("match polarity"));
    }
    if bits(raw, 16, 4, 3) != 0 {
        return Err(EntryError::Unsupported("hash type"));
    }
    if bits(raw, 16, 2, 2) != 0 {
        return Err(EntryError::Unsupported("hash after actions"));
    }

    let counter_id = bits(raw, 0, 23, 0);
    let miss_gvmi = bits(raw, 4, 31, 16) as u16;
    let match_definer = bits(raw, 4, 15, 8);
    let miss_index = u64::from(bits(raw, 4, 7, 0)) << 26 | u64::from(bits(raw, 8, 31, 6));
    let reparse = bits(raw, 8, 3, 3) != 0;
    let hit_gvmi = bits(raw, 12, 31, 16) as u16;
    let hash_definer = bits(raw, 12, 15, 8);
    let hit_value = u64::from(bits(raw, 12, 7, 0)) << 27 | u64::from(bits(raw, 16, 31, 5));
    if hit_value == 0 {
        return Err(EntryError::NoTableSize);
    }
    let entries = hit_value & hit_value.wrapping_neg();
    if entries > u64::from(MAX_TABLE_ENTRIES) {
        return Err(EntryError::TableTooLarge(entries));
    }
    let hit = HitAddr {
        base: ((hit_value ^ entries) << 5) & ADDR_MASK,
        entries: entries as u32,
        gvmi: hit_gvmi,
    };

    let fmt_byte = bits(raw, 0, 31, 24) as u16;
    let mut ste = Ste {
        format,
        lookup_type: fmt_byte << 8 | match_definer as u16,
        next_lookup_type: hash_definer as u16,
        counter_id,
        miss_addr: (miss_index << 6) & ADDR_MASK,
        miss_gvmi,
        hit,
        reparse,
        byte_mask: 0,
        gvmi: 0,
        actions: [0; 12],
        action_len: 8,
        mask: [0; TAG_SIZE],
        tag: [0; TAG_SIZE],
        match_area_zero: raw[32..].iter().all(|&b| b == 0),
        match_tag: [0; 32],
    };
    if format.is_bwc() {
        if bits(raw, 20, 14, 14) != 0 {
            return Err(EntryError::Unsupported("mask mode"));
        }
        ste.byte_mask = bits(raw, 20, 31, 16) as u16;
        ste.next_lookup_type |= (bits(raw, 20, 15, 15) as u16) << 8;
        ste.gvmi = bits(raw, 20, 13, 0) as u16;
        ste.actions[..8].copy_from_slice(&raw[24..32]);
        ste.mask.copy_from_slice(&raw[32..48]);
        ste.tag.copy_from_slice(&raw[48..64]);
    } else {
        ste.actions.copy_from_slice(&raw[20..32]);
        ste.action_len = 12;
        ste.match_tag.copy_from_slice(&raw[32..]);
    }
    Ok(ste)
}
