//! VLAN stripping on receive: an RQ created without `vsd` (VLAN strip disable) takes a frame's
//! first tag out when it is a customer tag (802.1Q, TPID 0x8100) and hands its tag control
//! information to the CQE (`has_vlan`, `vlan_info`), as mlx5e reads it (`cqe_has_vlan`,
//! `__vlan_hwaccel_put_tag(skb, htons(ETH_P_8021Q), cqe->vlan_info)` in en_rx.c) and libmlx5
//! for a raw packet QP with `IBV_QP_CREATE_CVLAN_STRIPPING` (`IBV_WC_EX_WITH_CVLAN`). A frame
//! whose first tag is a service tag (802.1ad) keeps it: Linux reports only 802.1Q stripping.
//! Steering and RSS have already seen the whole frame; the RQ gets the frame without the tag.

use crate::packet::{Parsed, VlanTag, TPID_8021Q, VLAN_TAG_LEN};

/// Offset of the first VLAN tag: right after the two MAC addresses.
const TAG_AT: usize = 12;

/// The frame's first VLAN tag when it is a customer tag.
fn first_customer_tag(parsed: &Parsed) -> Option<VlanTag> {
    match (parsed.outer_vlan, parsed.vlan) {
        (None, Some(tag)) if tag.tpid == TPID_8021Q => Some(tag),
        _ => None,
    }
}

/// Writes `frame` (parsed as `parsed`) without its first VLAN tag into `out` and returns the
/// tag's TCI, when that tag is a customer tag; `None`, with `out` untouched, otherwise.
pub(crate) fn strip_into(frame: &[u8], parsed: &Parsed, out: &mut Vec<u8>) -> Option<u16> {
    let tag = first_customer_tag(parsed)?;
    let rest = frame.get(TAG_AT + VLAN_TAG_LEN..)?;
    out.clear();
    out.extend_from_slice(&frame[..TAG_AT]);
    out.extend_from_slice(rest);
    Some(tag.tci)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::parse;

    fn frame(tags: &[(u16, u16)]) -> Vec<u8> {
        let mut f = vec![0xffu8; 6];
        f.extend_from_slice(&[2, 0, 0, 0, 0, 1]);
        for &(tpid, tci) in tags {
            f.extend_from_slice(&tpid.to_be_bytes());
            f.extend_from_slice(&tci.to_be_bytes());
        }
        f.extend_from_slice(&[0x08, 0x06]);
        f.extend_from_slice(&[0u8; 28]);
        f
    }

    #[test]
    fn a_customer_tag_is_taken_out_and_its_tci_returned() {
        let tagged = frame(&[(0x8100, 0x6005)]);
        let mut out = Vec::new();
        assert_eq!(strip_into(&tagged, &parse(&tagged), &mut out), Some(0x6005));
        assert_eq!(out, frame(&[]));
    }

    #[test]
    fn an_untagged_frame_and_a_service_tag_stay_as_they_are() {
        let mut out = vec![7];
        for f in [
            frame(&[]),
            frame(&[(0x88a8, 5)]),
            frame(&[(0x88a8, 5), (0x8100, 6)]),
        ] {
            assert_eq!(strip_into(&f, &parse(&f), &mut out), None);
            assert_eq!(out, [7]);
        }
    }
}
