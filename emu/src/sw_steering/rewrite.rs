//! What a receive walk's actions do to the frame: the VLAN pop (REMOVE_BY_SIZE from the first
//! VLAN, `dr_ste_v1_set_pop_vlan`) and push (INSERT_INLINE after the MAC addresses,
//! `dr_ste_v1_set_push_vlan`) rdma-core writes, applied to a copy of the frame in walk order.
//! Anchors are the positions rdma-core names (`enum dr_ste_v1_header_anchors`): the start of
//! the outer headers (0) and the first VLAN tag (2, the byte after the MAC addresses when the
//! frame carries one). Other anchors, and modify-header or reformat actions, are not modelled:
//! the caller drops the frame and counts it.

use super::action::Action;

/// `DR_STE_HEADER_ANCHOR_START_OUTER`.
const ANCHOR_START: u8 = 0x00;
/// `DR_STE_HEADER_ANCHOR_1ST_VLAN`.
const ANCHOR_FIRST_VLAN: u8 = 0x02;
/// Bytes before the first VLAN tag: the destination and source MAC addresses.
const MACS: usize = 12;

/// Why a walk's actions could not be applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unsupported {
    /// An action the model does not apply on receive (modify header, reformat, decap).
    Action,
    /// An anchor other than the outer start or the first VLAN, or a range past the frame.
    Anchor,
}

/// The frame as the walk's `actions` leave it (`None` when none touches it), and the last flow
/// tag among them.
pub(crate) fn apply(
    frame: &[u8],
    actions: &[Action],
) -> Result<(Option<Vec<u8>>, Option<u32>), Unsupported> {
    let mut out: Option<Vec<u8>> = None;
    let mut flow_tag = None;
    for action in actions {
        match *action {
            Action::FlowTag(tag) => flow_tag = Some(tag),
            Action::RemoveBySize {
                anchor,
                offset_words,
                size_words,
                outer_l4_remove: false,
            } => {
                let bytes = out.get_or_insert_with(|| frame.to_vec());
                // A frame without a VLAN tag has nothing at the first-VLAN anchor to remove
                // (inference: the entry rdma-core writes pops what is there).
                let Some(base) = anchor_offset(bytes, anchor)? else {
                    continue;
                };
                let start = base + 2 * usize::from(offset_words);
                let end = start + 2 * usize::from(size_words);
                if end > bytes.len() {
                    return Err(Unsupported::Anchor);
                }
                bytes.drain(start..end);
            }
            Action::InsertInline {
                anchor,
                offset_words,
                data,
            } => {
                let bytes = out.get_or_insert_with(|| frame.to_vec());
                let Some(base) = anchor_offset(bytes, anchor)? else {
                    return Err(Unsupported::Anchor);
                };
                let at = base + 2 * usize::from(offset_words);
                if at > bytes.len() {
                    return Err(Unsupported::Anchor);
                }
                bytes.splice(at..at, data.to_be_bytes());
            }
            _ => return Err(Unsupported::Action),
        }
    }
    Ok((out, flow_tag))
}

/// Where `anchor` lies in `frame`: `Some(offset)`, `None` for a first-VLAN anchor on a frame
/// without a VLAN tag.
fn anchor_offset(frame: &[u8], anchor: u8) -> Result<Option<usize>, Unsupported> {
    match anchor {
        ANCHOR_START => Ok(Some(0)),
        ANCHOR_FIRST_VLAN => {
            let ethertype = frame
                .get(MACS..MACS + 2)
                .map(|b| u16::from_be_bytes([b[0], b[1]]));
            Ok(matches!(ethertype, Some(0x8100 | 0x88a8)).then_some(MACS))
        }
        _ => Err(Unsupported::Anchor),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tagged() -> Vec<u8> {
        let mut f = vec![0xaa; 6];
        f.extend_from_slice(&[0xbb; 6]);
        f.extend_from_slice(&[0x81, 0x00, 0x00, 0x05]);
        f.extend_from_slice(&[0x08, 0x00, 0x45]);
        f
    }

    #[test]
    fn pop_vlan_removes_the_tag_after_the_macs_and_push_puts_one_back() {
        let pop = Action::RemoveBySize {
            anchor: ANCHOR_FIRST_VLAN,
            offset_words: 0,
            size_words: 2,
            outer_l4_remove: false,
        };
        let (popped, tag) = apply(&tagged(), &[pop, Action::FlowTag(7)]).unwrap();
        let popped = popped.unwrap();
        assert_eq!(&popped[12..], &[0x08, 0x00, 0x45]);
        assert_eq!(tag, Some(7));
        let push = Action::InsertInline {
            anchor: ANCHOR_START,
            offset_words: 6,
            data: 0x8100_0005,
        };
        assert_eq!(apply(&popped, &[push]).unwrap().0.unwrap(), tagged());
        // Nothing to pop on an untagged frame.
        assert_eq!(apply(&popped, &[pop]).unwrap().0.unwrap(), popped);
    }

    #[test]
    fn other_anchors_and_actions_are_refused() {
        let deep = Action::RemoveBySize {
            anchor: 0x07,
            offset_words: 0,
            size_words: 2,
            outer_l4_remove: false,
        };
        assert_eq!(apply(&tagged(), &[deep]), Err(Unsupported::Anchor));
        let past = Action::RemoveBySize {
            anchor: ANCHOR_START,
            offset_words: 6,
            size_words: 40,
            outer_l4_remove: false,
        };
        assert_eq!(apply(&tagged(), &[past]), Err(Unsupported::Anchor));
        let list = Action::ModifyList { count: 1, index: 0 };
        assert_eq!(apply(&tagged(), &[list]), Err(Unsupported::Action));
    }
}
