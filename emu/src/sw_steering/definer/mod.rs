//! A packet seen through a match definer: its 32-byte tag in the definer's predefined format,
//! under the definer's mask. A MATCH entry naming the definer (`match_definer_ctx_idx`) hits
//! when that masked tag equals the entry's 32-byte tag; a hit into a table whose entries name
//! a definer (`hash_definer_ctx_idx`) picks its slot by the CRC of the masked tag, all 32
//! bytes, without a byte mask (rdma-core dr_ste.c `dr_ste_calc_hash_index` for
//! `DR_STE_HTBL_TYPE_MATCH`).
//!
//! Rooms: [`formats`] (the packet's tag in each predefined format), [`integrity_bits`] (the
//! checksum and `*_ok` bits some formats carry) and [`unprojected`] (the fields of each the
//! model does not project).

mod formats;
mod integrity_bits;
mod unprojected;

use super::hash::ste_crc32;
use super::lookup::PacketView;
use crate::objects::limits::FIRST_MATCH_DEFINER;
use crate::objects::MatchDefiner;
pub(crate) use formats::DefinerTag;

/// The number of the first definer; lower numbers are legacy lookup types.
const FIRST_INDEX: u16 = FIRST_MATCH_DEFINER as u16;

/// Whether the 8-bit definer index of an entry (`match_definer_ctx_idx`,
/// `hash_definer_ctx_idx`) names a match definer rather than a legacy lookup type: 0x20 and up,
/// save 0xff (`DR_STE_V1_LU_TYPE_INVALID`).
pub(crate) fn is_definer_index(index: u16) -> bool {
    (FIRST_INDEX..0xff).contains(&(index & 0xff))
}

/// Why a definer of `format` with `mask` cannot be created: the format is not projected, or
/// the mask selects a field the model does not project. `None` when it can.
pub(crate) fn unprojected_mask(format: u16, mask: &DefinerTag) -> Option<&'static str> {
    let Some((unprojected, why)) = unprojected::unprojected(format) else {
        return Some(
            "the model projects packets through definer formats 0, 2, 6, 16, 22, 24, 25, 26, 28 \
             and 33 only",
        );
    };
    let selects = mask.iter().zip(&unprojected).any(|(&m, &u)| m & u != 0);
    selects.then_some(why)
}

/// The packet's tag through `definer`: its format's projection under its mask. A format the
/// model does not project (never created) gives an all-zero tag.
pub(crate) fn masked_tag(definer: &MatchDefiner, pkt: &PacketView<'_>) -> DefinerTag {
    let mut t = formats::tag(definer.format, pkt);
    integrity_bits::put_integrity(definer.format, &mut t, pkt, &definer.mask);
    for (b, m) in t.iter_mut().zip(&definer.mask) {
        *b &= m;
    }
    t
}

/// The slot, in a table of `entries` slots whose entries name `definer`, of the packet: the
/// CRC of its masked tag modulo the size (0 for a table of one slot).
pub(crate) fn slot(definer: &MatchDefiner, pkt: &PacketView<'_>, entries: u32) -> u32 {
    if entries <= 1 {
        return 0;
    }
    ste_crc32(&masked_tag(definer, pkt)) % entries
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sw_steering::lookup::{viewed, Metadata};
    use cxdirect_hw::definer::{format, DEFINER_TAG_BYTES};

    fn frame() -> Vec<u8> {
        formats::test_frame()
    }

    #[test]
    fn the_mask_decides_what_is_compared_and_hashed() {
        let f = frame();
        let meta = Metadata::default();
        // Only the source MAC.
        let mut mask = [0u8; DEFINER_TAG_BYTES];
        mask[24..30].fill(0xff);
        let d = MatchDefiner {
            format: format::DEF22,
            mask,
        };
        let mut want = [0u8; DEFINER_TAG_BYTES];
        want[24..28].copy_from_slice(&[0x02, 0, 0, 0]);
        want[28..30].copy_from_slice(&[0, 0x02]);
        viewed(&f, &meta, |pkt| {
            assert_eq!(masked_tag(&d, pkt), want);
            assert_eq!(slot(&d, pkt, 64), ste_crc32(&want) % 64);
            assert_eq!(slot(&d, pkt, 1), 0);
        });
    }

    #[test]
    fn masks_on_fields_not_projected_are_refused() {
        let mut mask = [0u8; DEFINER_TAG_BYTES];
        mask[24..30].fill(0xff);
        assert_eq!(unprojected_mask(format::DEF22, &mask), None);
        // The fragment bit (0x63) is projected; qp_type (0x64) is not.
        mask[12] = 0x10;
        assert_eq!(unprojected_mask(format::DEF22, &mask), None);
        mask[12] = 0x08;
        assert!(unprojected_mask(format::DEF22, &mask).is_some());
        assert!(unprojected_mask(1, &[0; DEFINER_TAG_BYTES]).is_some());
    }

    #[test]
    fn each_format_refuses_masks_on_the_fields_it_does_not_project() {
        // (format, byte, bits, refused): a field the model does not project beside one it does.
        let cases = [
            (format::DEF24, 31, 0x01, true),
            (format::DEF24, 0, 0xff, false),
            // Format 6's `l4_ok` and `l3_ok` (0xe4, 0xe5), beside its TCP flags.
            (format::DEF6, 28, 0x0c, false),
            (format::DEF6, 28, 0x02, false),
            (format::DEF25, 20, 0x01, true),
            (format::DEF25, 0, 0xff, false),
            // DPDK's mlx5 PMD matches a VXLAN VNI in `tunnel_header_1`.
            (format::DEF25, 16, 0xff, false),
            (format::DEF28, 31, 0x01, true),
            // `flex_gtpu_teid`, which the model's flex parsers sample.
            (format::DEF28, 4, 0xff, false),
            (format::DEF28, 8, 0xff, false),
            (format::DEF0, 16, 0x20, true),
            (format::DEF0, 30, 0xff, false),
            (format::DEF2, 31, 0xff, false),
            (format::DEF0, 31, 0x02, false),
            (format::DEF2, 20, 0x80, true),
            (format::DEF2, 7, 0xff, false),
            (format::DEF16, 31, 0x01, true),
            (format::DEF16, 23, 0xff, false),
            (format::DEF33, 12, 0x08, true),
            (format::DEF33, 29, 0xff, false),
            (format::DEF33, 28, 0xff, false),
            (format::DEF26, 21, 0x10, true),
            (format::DEF26, 21, 0x0c, false),
            (format::DEF26, 0, 0xff, false),
        ];
        for (f, byte, bits, refused) in cases {
            let mut mask = [0u8; DEFINER_TAG_BYTES];
            mask[byte] = bits;
            assert_eq!(
                unprojected_mask(f, &mask).is_some(),
                refused,
                "format {f}, byte {byte}, bits {bits:#x}"
            );
        }
    }

    #[test]
    fn definer_indexes_sit_above_the_legacy_lookup_types() {
        assert!(!is_definer_index(0x0f));
        assert!(!is_definer_index(0x17));
        assert!(is_definer_index(0x20));
        assert!(is_definer_index(0x0420));
        assert!(!is_definer_index(0xff));
    }
}
