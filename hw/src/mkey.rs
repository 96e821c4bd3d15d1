//! Memory keys: the memory key context (MKC), CREATE_MKEY / QUERY_MKEY / DESTROY_MKEY, memory key
//! numbering, and MTT entries (the translation table of an MTT-mode key).
//!
//! A memory key is `index << 8 | variant`: the device allocates the 24-bit index at CREATE_MKEY
//! and software chooses the 8-bit variant (`mkey_7_0`), so a stale key with an old variant is
//! refused after the index is reused.

// `Mkc::len` is the header's field (the region's length), not a container length: an `is_empty`
// beside it would mean nothing.
#![allow(clippy::len_without_is_empty)]

use crate::layout;
use crate::layout::LayoutError;

/// Access mode: physical addresses, no translation (`MLX5_MKC_ACCESS_MODE_PA`).
pub const MKC_ACCESS_MODE_PA: u8 = 0x0;
/// Access mode: translated through a table of page addresses, MTT entries
/// (`MLX5_MKC_ACCESS_MODE_MTT`).
pub const MKC_ACCESS_MODE_MTT: u8 = 0x1;
/// Access mode: indirect through key/length/address entries (`MLX5_MKC_ACCESS_MODE_KLMS`).
pub const MKC_ACCESS_MODE_KLM: u8 = 0x2;
/// Access mode: indirect through fixed-size key/address entries (`MLX5_MKC_ACCESS_MODE_KSM`).
pub const MKC_ACCESS_MODE_KSM: u8 = 0x3;
/// Access mode: software-owned ICM (`MLX5_MKC_ACCESS_MODE_SW_ICM`, mlx5_ib's
/// `mlx5_ib_get_dm_mr`): `start_addr` is an ICM address; needs `access_mode_4_2`.
pub const MKC_ACCESS_MODE_SW_ICM: u8 = 0x4;
/// Access mode: device memory (`MLX5_MKC_ACCESS_MODE_MEMIC`); needs `access_mode_4_2`.
pub const MKC_ACCESS_MODE_MEMIC: u8 = 0x5;

/// MTT entry bit: reads through the page are allowed (`MLX5_MTT_READ`, `rd_en`).
///
/// The entry's access bits are access control only for a key created with
/// [`CreateMkeyIn::pg_access`] set (the page-access mode Linux's mlx5_ib asks for when the
/// device reports the `pg` capability: `reg_create` then fills entries with
/// `MLX5_IB_MTT_PRESENT`). Without it an entry is a bare page address and the bits are ignored.
pub const MTT_READ: u64 = 1 << 0;
/// MTT entry bit: writes through the page are allowed (`MLX5_MTT_WRITE`, `wr_en`); see
/// [`MTT_READ`] for when the device reads it.
pub const MTT_WRITE: u64 = 1 << 1;
/// Size in bytes of one MTT entry.
pub const MTT_ENTRY_SIZE: usize = 8;
/// Bits of a page address an MTT entry drops (`ptag` holds address bits 63:8).
pub const MTT_ADDR_MASK: u64 = !0xff;

/// The memory key of index `index` (24 bits) and variant `variant`: `index << 8 | variant`.
pub const fn mkey_from_index(index: u32, variant: u8) -> u32 {
    (index << 8) | variant as u32
}

/// The index of memory key `mkey` (as CREATE_MKEY returned it in `mkey_index`).
pub const fn mkey_to_index(mkey: u32) -> u32 {
    mkey >> 8
}

/// The variant (`mkey_7_0`) of memory key `mkey`.
pub const fn mkey_variant(mkey: u32) -> u8 {
    mkey as u8
}

/// An MTT entry as the 64-bit big-endian value stored in the table: the page address (bits 7:0
/// dropped) with `rd_en` in bit 0 and `wr_en` in bit 1, as in [`Mtt`]. A key created without
/// `pg_access` ignores both bits: Linux then writes the bare page address (`read` and `write`
/// false), see [`MTT_READ`].
pub const fn mtt_entry(addr: u64, read: bool, write: bool) -> u64 {
    (addr & MTT_ADDR_MASK) | (if read { MTT_READ } else { 0 }) | (if write { MTT_WRITE } else { 0 })
}

layout! {
    /// Memory key context (MKC), given at CREATE_MKEY and returned by QUERY_MKEY.
    ///
    /// The access mode is split: [`Mkc::access_mode`] and [`Mkc::set_access_mode`] join
    /// `access_mode_4_2` and `access_mode_1_0`. (Older headers have a single 2-bit
    /// `access_mode` at the position of `access_mode_1_0`.)
    pub struct Mkc("mkc", 0x40) {
        /// The key is free (QUERY_MKEY only).
        free: bool @ 0x1 [0x1],
        /// Bits 4:2 of the access mode (0 for PA, MTT, KLM and KSM).
        access_mode_4_2: u8 @ 0x3 [0x3],
        /// Writes through the key may be relaxed ordered.
        relaxed_ordering_write: bool @ 0xd [0x1],
        /// Small fence on RDMA read responses.
        small_fence_on_rdma_read_response: bool @ 0xf [0x1],
        /// The key may be modified by UMR work requests.
        umr_en: bool @ 0x10 [0x1],
        /// Remote atomic access allowed.
        a: bool @ 0x11 [0x1],
        /// Remote write access allowed.
        rw: bool @ 0x12 [0x1],
        /// Remote read access allowed.
        rr: bool @ 0x13 [0x1],
        /// Local write access allowed.
        lw: bool @ 0x14 [0x1],
        /// Local read access allowed.
        lr: bool @ 0x15 [0x1],
        /// Bits 1:0 of the access mode: `MKC_ACCESS_MODE_*`.
        access_mode_1_0: u8 @ 0x16 [0x2],
        /// Memory access translation mode (1: addresses are translated by the PCIe ATS of
        /// the bus, as mlx5_ib asks for `mlx5_umem_needs_ats`); 0: by the IOMMU as usual.
        ma_translation_mode: u8 @ 0x1a [0x2],
        /// QP the key is bound to (0xffffff: not bound to a QP).
        qpn: u32 @ 0x20 [0x18],
        /// Variant: the low 8 bits of the memory key, chosen by software.
        mkey_7_0: u8 @ 0x38 [0x8],
        /// The region is 2^64 bytes long and `len` is ignored.
        length64: bool @ 0x60 [0x1],
        /// A BSF (signature) is attached.
        bsf_en: bool @ 0x61 [0x1],
        /// UMR on this key is synchronous.
        sync_umr: bool @ 0x62 [0x1],
        /// Expected signature error count (signature keys).
        expected_sigerr_count: bool @ 0x65 [0x1],
        /// The key may be invalidated remotely (send with invalidate).
        en_rinval: bool @ 0x67 [0x1],
        /// Protection domain of the key.
        pd: u32 @ 0x68 [0x18],
        /// Virtual address of the start of the region.
        start_addr: u64 @ 0x80 [0x40],
        /// Length of the region in bytes.
        len: u64 @ 0xc0 [0x40],
        /// Size of the BSF in 16-byte units.
        bsf_octword_size: u32 @ 0x100 [0x20],
        /// Size of the translation table in 16-byte units (two MTT entries each).
        translations_octword_size: u32 @ 0x1a0 [0x20],
        /// Reads through the key may be relaxed ordered.
        relaxed_ordering_read: bool @ 0x1d8 [0x1],
        /// Log2 of the page size of MTT translations, in bytes (12 for 4 KiB): absolute, not
        /// relative to 4 KiB as in the CQ and QP contexts. (Headers after Linux 6.12 widen it
        /// to six bits, the new high bit at 0x1da, for devices with `umr_log_entity_size_5`.)
        log_page_size: u8 @ 0x1db [0x5],
    }
}

impl<T: AsRef<[u8]>> Mkc<T> {
    /// The 5-bit access mode: `access_mode_4_2 << 2 | access_mode_1_0`.
    pub fn access_mode(&self) -> u8 {
        (self.access_mode_4_2() << 2) | self.access_mode_1_0()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Mkc<T> {
    /// Sets the 5-bit access mode (`MKC_ACCESS_MODE_*`) across both of its fields.
    pub fn set_access_mode(&mut self, mode: u8) -> &mut Self {
        self.set_access_mode_1_0(mode & 0x3)
            .set_access_mode_4_2((mode >> 2) & 0x7)
    }
}

layout! {
    /// CREATE_MKEY input: the key's context, then its translation entries.
    pub struct CreateMkeyIn("create_mkey_in", 0x110) {
        /// Command opcode: [`Opcode::CreateMkey`](crate::cmd::Opcode::CreateMkey).
        opcode: u16 @ 0x0 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The translation entries may be changed later by UMR (page access).
        pg_access: bool @ 0x60 [0x1],
        /// An MTT key's translation is umem `mkey_umem_id` from `mkey_umem_offset` instead of
        /// `klm_pas_mtt` (mlx5_ib's `devx_handle_mkey_create` sets it on every DEVX MTT key;
        /// the bit from rdma-core's `mlx5_ifc.h`).
        mkey_umem_valid: bool @ 0x61 [0x1],
        /// Number of 16-byte units of translation entries actually supplied in `klm_pas_mtt`.
        translations_octword_actual_size: u32 @ 0x300 [0x20],
        /// The umem holding the key's pages (with `mkey_umem_valid`; offsets from rdma-core's
        /// `CreateMkeyIn` in `tests/mlx5_prm_structs.py`).
        mkey_umem_id: u32 @ 0x320 [0x20],
        /// Byte offset in the umem of the key's `start_addr` (with `mkey_umem_valid`).
        mkey_umem_offset: u64 @ 0x340 [0x40],
    }
    nested {
        /// The new key's context.
        memory_key_mkey_entry: Mkc @ 0x80,
    }
    arrays {
        /// Dword `index` of the translation entries (as the header declares it; see
        /// [`CreateMkeyIn::mtt`] for whole 64-bit MTT entries).
        klm_pas_mtt: u32 @ 0x880 [0x20],
    }
}

/// Byte offset of the translation entries in [`CreateMkeyIn`].
const CREATE_MKEY_TRANSLATIONS: usize = 0x880 / 8;

impl<T: AsRef<[u8]>> CreateMkeyIn<T> {
    /// MTT entry `index` (a 64-bit big-endian value: see [`mtt_entry`]); fails past the end of
    /// the buffer.
    pub fn mtt(&self, index: usize) -> Result<u64, LayoutError> {
        read_u64(
            self.buf.as_ref(),
            CREATE_MKEY_TRANSLATIONS,
            "create_mkey_in",
            "klm_pas_mtt",
            index,
        )
    }

    /// Number of whole MTT entries the buffer holds.
    pub fn mtt_capacity(&self) -> usize {
        self.buf
            .as_ref()
            .len()
            .saturating_sub(CREATE_MKEY_TRANSLATIONS)
            / MTT_ENTRY_SIZE
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> CreateMkeyIn<T> {
    /// Sets MTT entry `index` (see [`mtt_entry`]); fails past the end of the buffer.
    pub fn set_mtt(&mut self, index: usize, entry: u64) -> Result<&mut Self, LayoutError> {
        write_u64(
            self.buf.as_mut(),
            CREATE_MKEY_TRANSLATIONS,
            "create_mkey_in",
            "klm_pas_mtt",
            index,
            entry,
        )?;
        Ok(self)
    }
}

layout! {
    /// CREATE_MKEY output.
    pub struct CreateMkeyOut("create_mkey_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x0 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
        /// Index of the new key: the key is [`mkey_from_index`]`(mkey_index, mkey_7_0)`.
        mkey_index: u32 @ 0x48 [0x18],
    }
}

layout! {
    /// QUERY_MKEY input.
    pub struct QueryMkeyIn("query_mkey_in", 0x10) {
        /// Command opcode: [`Opcode::QueryMkey`](crate::cmd::Opcode::QueryMkey).
        opcode: u16 @ 0x0 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// Index of the key to query.
        mkey_index: u32 @ 0x48 [0x18],
        /// Also return the first translation entries.
        pg_access: bool @ 0x60 [0x1],
    }
}

layout! {
    /// QUERY_MKEY output: the key's context and (with `pg_access`) its first translation
    /// entries, 16 bytes in each of two slots.
    pub struct QueryMkeyOut("query_mkey_out", 0x130) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x0 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
    }
    nested {
        /// The key's context.
        memory_key_mkey_entry: Mkc @ 0x80,
    }
    arrays {
        /// Byte `index` of the first slot: BSF 0, KLM 0, or MTT entries 0 and 1 (index 0..16;
        /// see [`QueryMkeyOut::translation`] for whole 64-bit entries).
        bsf0_klm0_pas_mtt0_1: u8 @ 0x880 [0x8],
        /// Byte `index` of the second slot: BSF 1, KLM 1, or MTT entries 2 and 3 (index 0..16).
        bsf1_klm1_pas_mtt2_3: u8 @ 0x900 [0x8],
    }
}

/// Byte offset of the translation slots in [`QueryMkeyOut`].
const QUERY_MKEY_TRANSLATIONS: usize = 0x880 / 8;

impl<T: AsRef<[u8]>> QueryMkeyOut<T> {
    /// 64-bit translation entry `index` (0..4: MTT entries 0 to 3 across both slots); fails
    /// past the end of the buffer.
    pub fn translation(&self, index: usize) -> Result<u64, LayoutError> {
        read_u64(
            self.buf.as_ref(),
            QUERY_MKEY_TRANSLATIONS,
            "query_mkey_out",
            "bsf0_klm0_pas_mtt0_1",
            index,
        )
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> QueryMkeyOut<T> {
    /// Sets 64-bit translation entry `index`; fails past the end of the buffer.
    pub fn set_translation(&mut self, index: usize, entry: u64) -> Result<&mut Self, LayoutError> {
        write_u64(
            self.buf.as_mut(),
            QUERY_MKEY_TRANSLATIONS,
            "query_mkey_out",
            "bsf0_klm0_pas_mtt0_1",
            index,
            entry,
        )?;
        Ok(self)
    }
}

layout! {
    /// DESTROY_MKEY input.
    pub struct DestroyMkeyIn("destroy_mkey_in", 0x10) {
        /// Command opcode: [`Opcode::DestroyMkey`](crate::cmd::Opcode::DestroyMkey).
        opcode: u16 @ 0x0 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// Index of the key to destroy.
        mkey_index: u32 @ 0x48 [0x18],
    }
}

layout! {
    /// An MTT entry: the address of one page of an MTT-mode key and its access rights.
    pub struct Mtt("mtt", 0x8) {
        /// Page address bits 63:32.
        ptag_63_32: u32 @ 0x0 [0x20],
        /// Page address bits 31:8.
        ptag_31_8: u32 @ 0x20 [0x18],
        /// Writes through the page are allowed ([`MTT_WRITE`]).
        wr_en: bool @ 0x3e [0x1],
        /// Reads through the page are allowed ([`MTT_READ`]).
        rd_en: bool @ 0x3f [0x1],
    }
}

impl<T: AsRef<[u8]>> Mtt<T> {
    /// The page address (bits 7:0 zero).
    pub fn addr(&self) -> u64 {
        (u64::from(self.ptag_63_32()) << 32) | (u64::from(self.ptag_31_8()) << 8)
    }

    /// The whole entry as the 64-bit value [`mtt_entry`] builds.
    pub fn entry(&self) -> u64 {
        let mut raw = [0u8; 8];
        raw.copy_from_slice(&self.buf.as_ref()[..8]);
        u64::from_be_bytes(raw)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Mtt<T> {
    /// Sets the whole entry from the 64-bit value [`mtt_entry`] builds.
    pub fn set_entry(&mut self, entry: u64) -> &mut Self {
        self.buf.as_mut()[..8].copy_from_slice(&entry.to_be_bytes());
        self
    }
}

/// Reads 64-bit big-endian element `index` of an array starting at byte `start`.
fn read_u64(
    buf: &[u8],
    start: usize,
    layout: &'static str,
    field: &'static str,
    index: usize,
) -> Result<u64, LayoutError> {
    let at = start + index * 8;
    if at + 8 > buf.len() {
        return Err(LayoutError::IndexOutOfRange {
            layout,
            field,
            index,
            len: buf.len(),
        });
    }
    let mut raw = [0u8; 8];
    raw.copy_from_slice(&buf[at..at + 8]);
    Ok(u64::from_be_bytes(raw))
}

/// Writes 64-bit big-endian element `index` of an array starting at byte `start`.
fn write_u64(
    buf: &mut [u8],
    start: usize,
    layout: &'static str,
    field: &'static str,
    index: usize,
    value: u64,
) -> Result<(), LayoutError> {
    let at = start + index * 8;
    if at + 8 > buf.len() {
        return Err(LayoutError::IndexOutOfRange {
            layout,
            field,
            index,
            len: buf.len(),
        });
    }
    buf[at..at + 8].copy_from_slice(&value.to_be_bytes());
    Ok(())
}

layout! {
    /// QUERY_SPECIAL_CONTEXTS output: memory keys the device defines itself.
    pub struct QuerySpecialContextsOut("query_special_contexts_out", 0x20) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x0 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
        /// Key whose reads return a fill pattern (for padding dumps).
        dump_fill_mkey: u32 @ 0x40 [0x20],
        /// The reserved lkey: addresses through it are bus addresses (IOVAs), unchecked by any
        /// memory key, in every protection domain.
        resd_lkey: u32 @ 0x60 [0x20],
        /// Key whose accesses are dropped (reads as zero).
        null_mkey: u32 @ 0x80 [0x20],
    }
}
