//! What a walk's actions do to the frame, applied to a copy of it in walk order: the VLAN pop
//! (REMOVE_BY_SIZE from the first VLAN, `dr_ste_v1_set_pop_vlan`) and push (INSERT_INLINE after
//! the MAC addresses, `dr_ste_v1_set_push_vlan`) rdma-core writes, and header modification:
//! SET, ADD and COPY written into the entry (`dr_ste_v1_set_rewrite_actions` with one action)
//! or listed in the header-modify ICM (MODIFY_LIST: `num_of_modify_actions` 8-byte actions at
//! `modify_actions_ptr` × 64 bytes from the range's start, which rdma-core computes from
//! `header_modify_sw_icm_start_address` in `dr_ste_alloc_modify_hdr_chunk`), on the fields
//! [`super::modify`] places; encapsulation (INSERT_POINTER of a packet reformat context's
//! header, `dr_ste_v1_set_encap`, after REMOVE_HEADER_TO_HEADER of the Ethernet header for an
//! L3 tunnel, `dr_ste_v1_set_encap_l3`) and decapsulation (REMOVE_HEADER_TO_HEADER to the
//! inner Ethernet header, `dr_ste_v1_set_rx_decap`, or for an L3 tunnel the modify list
//! `dr_ste_v1_set_action_decap_l3_list` writes: removal to the inner IP header, the new
//! Ethernet header inserted four bytes at a time, two padding bytes removed). Anchors are the
//! positions rdma-core names (`enum dr_ste_v1_header_anchors`): the start of the outer headers
//! (0), the first VLAN tag (2, the byte after the MAC addresses when the frame carries one),
//! the outer IP header (7), and a tunnel's inner Ethernet (0x13) and IP (0x19) headers
//! ([`crate::tunnel`]). After an encapsulation the outer IPv4 header checksum is computed
//! (the context's header carries none); other anchors and actions are not modelled, and the
//! caller drops the frame and counts it.

use super::action::{self, Action};
use super::lookup::{Metadata, PacketView};
use super::modify::{ModifyError, Target};
use super::walk::WalkPacket;
use super::IcmRead;
use crate::objects::icm::HEADER_MODIFY_START;
use crate::packet::Parsed;
use cxdirect_hw::reformat::REFORMAT_TYPE_L3_TUNNEL_TO_L2;

/// `DR_STE_HEADER_ANCHOR_START_OUTER`.
const ANCHOR_START: u8 = 0x00;
/// `DR_STE_HEADER_ANCHOR_1ST_VLAN`.
const ANCHOR_FIRST_VLAN: u8 = 0x02;
/// `DR_STE_HEADER_ANCHOR_IPV6_IPV4`.
const ANCHOR_IP: u8 = 0x07;
/// `DR_STE_HEADER_ANCHOR_INNER_MAC`.
const ANCHOR_INNER_MAC: u8 = 0x13;
/// `DR_STE_HEADER_ANCHOR_INNER_IPV6_IPV4`.
const ANCHOR_INNER_IP: u8 = 0x19;
/// Bytes before the first VLAN tag: the destination and source MAC addresses.
const MACS: usize = 12;

/// Why a walk's actions could not be applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unsupported {
    /// An action the model does not apply on receive (modify header, reformat, decap).
    Action,
    /// An anchor other than the outer start or the first VLAN, or a range past the frame.
    Anchor,
    /// A modify action on a field the model does not place or the frame lacks.
    Modify(ModifyError),
    /// A modify list that cannot be read, or that names another list.
    List,
    /// An INSERT_POINTER naming no packet reformat context, or one whose data is not the size
    /// the action gives.
    Reformat,
}

impl From<ModifyError> for Unsupported {
    fn from(e: ModifyError) -> Self {
        Unsupported::Modify(e)
    }
}

/// A frame as a walk rewrites it: each entry that hits applies its actions before the next
/// lookup, which sees the rewritten frame (re-parsed) and the metadata registers as the
/// actions left them, as the device's re-parse does. The copy is made at the first action that
/// touches the frame.
pub(crate) struct Rewriting<'a, I: ?Sized> {
    original: &'a [u8],
    original_parsed: &'a Parsed,
    /// The rewritten frame and its parse.
    out: Option<(Vec<u8>, Parsed)>,
    meta: Metadata,
    l3_l4_changed: bool,
    flow_tag: Option<u32>,
    /// Where modify lists are read.
    icm: &'a I,
}

impl<'a, I: IcmRead + ?Sized> Rewriting<'a, I> {
    /// `frame`, parsed as `parsed`, with the metadata registers `meta` the tables before set,
    /// before any action; modify lists read from `icm`.
    pub(crate) fn new(frame: &'a [u8], parsed: &'a Parsed, meta: Metadata, icm: &'a I) -> Self {
        Rewriting {
            original: frame,
            original_parsed: parsed,
            out: None,
            meta,
            l3_l4_changed: false,
            flow_tag: None,
            icm,
        }
    }

    /// The frame as the actions left it (`None` when none touched it), its checksums computed
    /// again where IP or TCP/UDP fields changed, the last flow tag among the actions, and the
    /// metadata registers as they left them.
    pub(crate) fn finish(self) -> (Option<Vec<u8>>, Option<u32>, Metadata) {
        let mut out = self.out.map(|(bytes, _)| bytes);
        let mut meta = self.meta;
        if let (Some(bytes), true) = (out.as_mut(), self.l3_l4_changed) {
            let mut target = Target::new(bytes, &mut meta);
            target.l3_l4_changed = true;
            target.finish();
        }
        (out, self.flow_tag, self.meta)
    }

    /// Applies one entry's actions, in order.
    fn apply_all(&mut self, actions: &[Action]) -> Result<(), Unsupported> {
        for action in actions {
            match *action {
                Action::FlowTag(tag) => self.flow_tag = Some(tag),
                Action::ModifyList { count, index } => {
                    let listed = read_list(self.icm, count, index).ok_or(Unsupported::List)?;
                    for listed in &listed {
                        if matches!(listed, Action::ModifyList { .. } | Action::FlowTag(_)) {
                            return Err(Unsupported::List);
                        }
                        self.one(listed)?;
                    }
                }
                ref other => self.one(other)?,
            }
        }
        Ok(())
    }

    /// The copy, made on first use.
    fn bytes(&mut self) -> &mut Vec<u8> {
        let (original, parsed) = (self.original, self.original_parsed);
        &mut self
            .out
            .get_or_insert_with(|| (original.to_vec(), *parsed))
            .0
    }

    fn target(&mut self) -> Target<'_> {
        let (original, parsed) = (self.original, self.original_parsed);
        let (bytes, _) = self.out.get_or_insert_with(|| (original.to_vec(), *parsed));
        Target::new(bytes, &mut self.meta)
    }

    /// Applies one action other than a flow tag or a list, and re-parses what it changed.
    fn one(&mut self, action: &Action) -> Result<(), Unsupported> {
        let changed = match *action {
            Action::Set { .. } | Action::Add { .. } | Action::Copy { .. } => {
                let mut t = self.target();
                t.act(action)?;
                t.l3_l4_changed
            }
            Action::RemoveBySize {
                anchor,
                offset_words,
                size_words,
                outer_l4_remove: false,
            } => {
                let bytes = self.bytes();
                // A frame without a VLAN tag has nothing at the first-VLAN anchor to remove
                // (inference: the entry rdma-core writes pops what is there).
                let Some(base) = anchor_offset(bytes, anchor)? else {
                    return Ok(());
                };
                let start = base + 2 * usize::from(offset_words);
                let end = start + 2 * usize::from(size_words);
                if end > bytes.len() {
                    return Err(Unsupported::Anchor);
                }
                bytes.drain(start..end);
                false
            }
            Action::InsertInline {
                anchor,
                offset_words,
                data,
            } => {
                let bytes = self.bytes();
                let Some(base) = anchor_offset(bytes, anchor)? else {
                    return Err(Unsupported::Anchor);
                };
                let at = base + 2 * usize::from(offset_words);
                if at > bytes.len() {
                    return Err(Unsupported::Anchor);
                }
                bytes.splice(at..at, data.to_be_bytes());
                false
            }
            Action::RemoveHeaderToHeader {
                start_anchor,
                end_anchor,
                ..
            } => {
                let bytes = self.bytes();
                let start = anchor_offset(bytes, start_anchor)?.ok_or(Unsupported::Anchor)?;
                let end = anchor_offset(bytes, end_anchor)?.ok_or(Unsupported::Anchor)?;
                if start > end || end > bytes.len() {
                    return Err(Unsupported::Anchor);
                }
                bytes.drain(start..end);
                false
            }
            Action::InsertPointer {
                anchor,
                offset_words,
                size_words,
                attributes: _,
                pointer,
            } => {
                let icm = self.icm;
                // An encapsulation's header: every tunnel type but the L3 decapsulation's
                // Ethernet header, of the size the action gives.
                let header = icm
                    .reformat(pointer)
                    .filter(|&(kind, h)| {
                        kind != REFORMAT_TYPE_L3_TUNNEL_TO_L2
                            && h.len() == 2 * usize::from(size_words)
                    })
                    .ok_or(Unsupported::Reformat)?
                    .1;
                let bytes = self.bytes();
                let Some(base) = anchor_offset(bytes, anchor)? else {
                    return Err(Unsupported::Anchor);
                };
                let at = base + 2 * usize::from(offset_words);
                if at > bytes.len() {
                    return Err(Unsupported::Anchor);
                }
                bytes.splice(at..at, header.iter().copied());
                // The new outer IPv4 header's checksum.
                true
            }
            _ => return Err(Unsupported::Action),
        };
        self.l3_l4_changed |= changed;
        if let Some((bytes, parsed)) = self.out.as_mut() {
            *parsed = crate::packet::parse(bytes);
        }
        Ok(())
    }
}

impl<I: IcmRead + ?Sized> WalkPacket for Rewriting<'_, I> {
    type Refused = Unsupported;

    fn view(&self) -> PacketView<'_> {
        let (frame, parsed) = match &self.out {
            Some((bytes, parsed)) => (&bytes[..], parsed),
            None => (self.original, self.original_parsed),
        };
        PacketView {
            parsed,
            frame,
            meta: &self.meta,
        }
    }

    fn apply(&mut self, actions: &[Action]) -> Result<(), Unsupported> {
        self.apply_all(actions)
    }
}

/// The frame as `actions` leave it, applied all at once (the walk applies them entry by
/// entry), and the last flow tag among them; modify lists are read from `icm`.
#[cfg(test)]
pub(crate) fn apply<I: IcmRead + ?Sized>(
    frame: &[u8],
    actions: &[Action],
    icm: &I,
) -> Result<(Option<Vec<u8>>, Option<u32>), Unsupported> {
    let parsed = crate::packet::parse(frame);
    let mut r = Rewriting::new(frame, &parsed, Metadata::default(), icm);
    r.apply_all(actions)?;
    let (out, flow_tag, _) = r.finish();
    Ok((out, flow_tag))
}

/// The `count` actions of the modify list at `index`.
fn read_list<I: IcmRead + ?Sized>(icm: &I, count: u8, index: u16) -> Option<Vec<Action>> {
    let start = HEADER_MODIFY_START + u64::from(index) * super::ENTRY_BYTES;
    let bytes = usize::from(count) * 8;
    let mut raw = Vec::with_capacity(bytes.next_multiple_of(64));
    let mut at = start;
    while raw.len() < bytes {
        raw.extend_from_slice(&icm.read_entry(at)?);
        at += super::ENTRY_BYTES;
    }
    let mut listed = Vec::with_capacity(usize::from(count));
    action::decode(&raw[..bytes], &mut listed).ok()?;
    Some(listed)
}

/// Where `anchor` lies in `frame`: `Some(offset)`, `None` when the frame has no such header
/// (a first-VLAN anchor on an untagged frame, an inner anchor on a frame without a tunnel).
fn anchor_offset(frame: &[u8], anchor: u8) -> Result<Option<usize>, Unsupported> {
    match anchor {
        ANCHOR_START => Ok(Some(0)),
        ANCHOR_FIRST_VLAN => {
            let ethertype = frame
                .get(MACS..MACS + 2)
                .map(|b| u16::from_be_bytes([b[0], b[1]]));
            Ok(matches!(ethertype, Some(0x8100 | 0x88a8)).then_some(MACS))
        }
        ANCHOR_IP => {
            let p = crate::packet::parse(frame);
            Ok((p.l3 != crate::packet::L3Kind::None).then_some(p.l3_offset))
        }
        ANCHOR_INNER_MAC | ANCHOR_INNER_IP => {
            let p = crate::packet::parse(frame);
            let inner = crate::tunnel::inner(frame, &p);
            Ok(inner.and_then(|i| {
                if anchor == ANCHOR_INNER_MAC {
                    i.mac
                } else {
                    i.ip
                }
            }))
        }
        _ => Err(Unsupported::Anchor),
    }
}

#[cfg(test)]
mod tests {
    use super::super::entry::STE_SIZE;
    use super::*;

    /// ICM with nothing in it.
    struct NoIcm;

    impl IcmRead for NoIcm {
        fn read_entry(&self, _: u64) -> Option<[u8; STE_SIZE]> {
            None
        }
    }

    /// Header-modify ICM holding one list block at index 3.
    struct OneList([u8; STE_SIZE]);

    impl IcmRead for OneList {
        fn read_entry(&self, icm_addr: u64) -> Option<[u8; STE_SIZE]> {
            (icm_addr == HEADER_MODIFY_START + 3 * 64).then_some(self.0)
        }
    }

    /// Packet reformat context 9: a GRE-over-IPv4 outer header with a key, for an Ethernet
    /// frame (protocol TEB), as rdma-core's `gen_gre_tunnel_encap_header` builds it.
    struct Gre(Vec<u8>);

    impl Gre {
        fn new(inner_len: usize) -> Self {
            let mut h = vec![2, 0, 0, 0, 0, 0x0a, 2, 0, 0, 0, 0, 0x0b, 0x08, 0x00];
            let total = (20 + 8 + inner_len) as u16;
            h.extend_from_slice(&[0x45, 0, (total >> 8) as u8, total as u8, 0, 0, 0x40, 0]);
            h.extend_from_slice(&[64, 47, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]);
            h.extend_from_slice(&[0x20, 0, 0x65, 0x58, 0, 0, 0, 0x2a]);
            Gre(h)
        }
    }

    impl IcmRead for Gre {
        fn read_entry(&self, _: u64) -> Option<[u8; STE_SIZE]> {
            None
        }

        fn reformat(&self, id: u32) -> Option<(u8, &[u8])> {
            (id == 9).then_some((
                cxdirect_hw::reformat::REFORMAT_TYPE_L2_TO_L2_TUNNEL,
                &self.0[..],
            ))
        }
    }

    /// An untagged IPv4/UDP frame.
    fn plain() -> Vec<u8> {
        let mut f = tagged();
        f.drain(12..16);
        f.extend_from_slice(&[0; 19]);
        f
    }

    #[test]
    fn an_l2_tunnel_encapsulates_and_decapsulates_back_to_the_frame() {
        let frame = plain();
        let gre = Gre::new(frame.len());
        let insert = |size_words: usize, pointer| Action::InsertPointer {
            anchor: ANCHOR_START,
            offset_words: 0,
            size_words: size_words as u8,
            attributes: 1,
            pointer,
        };
        let encap = insert(gre.0.len() / 2, 9);
        let (out, _) = apply(&frame, &[encap], &gre).unwrap();
        let out = out.unwrap();
        assert_eq!(&out[gre.0.len()..], &frame[..]);
        assert_eq!(&out[..24], &gre.0[..24], "the header up to its checksum");
        let p = crate::packet::parse(&out);
        assert!(crate::packet::ipv4_header_checksum_ok(&out, &p), "computed");
        // rdma-core's receive decap: remove up to the inner Ethernet header.
        let decap = Action::RemoveHeaderToHeader {
            start_anchor: ANCHOR_START,
            end_anchor: ANCHOR_INNER_MAC,
            decap: true,
            vni_to_cqe: true,
        };
        assert_eq!(apply(&out, &[decap], &gre).unwrap().0.unwrap(), frame);
        // Nothing to decapsulate on a frame without a tunnel, and a pointer to no context.
        assert_eq!(apply(&frame, &[decap], &gre), Err(Unsupported::Anchor));
        let lost = insert(gre.0.len() / 2, 8);
        assert_eq!(apply(&frame, &[lost], &gre), Err(Unsupported::Reformat));
        let short = insert(4, 9);
        assert_eq!(apply(&frame, &[short], &gre), Err(Unsupported::Reformat));
    }

    #[test]
    fn an_l3_tunnel_decap_list_puts_the_new_ethernet_header_before_the_inner_ip() {
        // dr_ste_v1_set_action_decap_l3_list for a 14-byte header: removal to the inner IP,
        // four 4-byte inserts at the start (last word first, the header padded by two bytes in
        // front), removal of the two padding bytes.
        let frame = plain();
        let mut tunnelled = Gre::new(frame.len()).0;
        tunnelled[36..38].copy_from_slice(&[0x08, 0x00]);
        tunnelled.extend_from_slice(&frame[14..]);
        let l2: [u8; 14] = [2, 0, 0, 0, 0, 0x0c, 2, 0, 0, 0, 0, 0x0d, 0x08, 0x00];
        let mut padded = vec![0, 0];
        padded.extend_from_slice(&l2);
        let mut actions = vec![Action::RemoveHeaderToHeader {
            start_anchor: ANCHOR_START,
            end_anchor: ANCHOR_INNER_IP,
            decap: true,
            vni_to_cqe: true,
        }];
        for word in padded.chunks(4).rev() {
            actions.push(Action::InsertInline {
                anchor: ANCHOR_START,
                offset_words: 0,
                data: u32::from_be_bytes([word[0], word[1], word[2], word[3]]),
            });
        }
        actions.push(Action::RemoveBySize {
            anchor: ANCHOR_START,
            offset_words: 0,
            size_words: 1,
            outer_l4_remove: false,
        });
        let out = apply(&tunnelled, &actions, &NoIcm).unwrap().0.unwrap();
        assert_eq!(&out[..14], &l2);
        assert_eq!(&out[14..], &frame[14..]);
    }

    #[test]
    fn a_modify_list_sets_both_halves_of_the_source_mac() {
        // Two SET actions as dr_ste_v1_set_action_set writes them: field, shifter + 0x20,
        // length, data.
        let mut block = [0u8; STE_SIZE];
        block[..8].copy_from_slice(&[0x06, 0x08, 0x20, 0x20, 0x88, 0x88, 0x88, 0x88]);
        block[8..16].copy_from_slice(&[0x06, 0x09, 0x30, 0x10, 0x00, 0x00, 0x77, 0x77]);
        let list = Action::ModifyList { count: 2, index: 3 };
        let (out, _) = apply(&tagged(), &[list], &OneList(block)).unwrap();
        let out = out.unwrap();
        assert_eq!(&out[6..12], &[0x88, 0x88, 0x88, 0x88, 0x77, 0x77]);
        assert_eq!(&out[..6], &tagged()[..6]);
        // A list past what is backed is refused, never half applied.
        let far = Action::ModifyList { count: 9, index: 3 };
        assert_eq!(
            apply(&tagged(), &[far], &OneList(block)),
            Err(Unsupported::List)
        );
    }

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
        let (popped, tag) = apply(&tagged(), &[pop, Action::FlowTag(7)], &NoIcm).unwrap();
        let popped = popped.unwrap();
        assert_eq!(&popped[12..], &[0x08, 0x00, 0x45]);
        assert_eq!(tag, Some(7));
        let push = Action::InsertInline {
            anchor: ANCHOR_START,
            offset_words: 6,
            data: 0x8100_0005,
        };
        assert_eq!(
            apply(&popped, &[push], &NoIcm).unwrap().0.unwrap(),
            tagged()
        );
        // Nothing to pop on an untagged frame.
        assert_eq!(apply(&popped, &[pop], &NoIcm).unwrap().0.unwrap(), popped);
    }

    #[test]
    fn other_anchors_and_actions_are_refused() {
        let deep = Action::RemoveBySize {
            anchor: 0x05,
            offset_words: 0,
            size_words: 2,
            outer_l4_remove: false,
        };
        assert_eq!(apply(&tagged(), &[deep], &NoIcm), Err(Unsupported::Anchor));
        let past = Action::RemoveBySize {
            anchor: ANCHOR_START,
            offset_words: 6,
            size_words: 40,
            outer_l4_remove: false,
        };
        assert_eq!(apply(&tagged(), &[past], &NoIcm), Err(Unsupported::Anchor));
        let list = Action::ModifyList { count: 1, index: 0 };
        assert_eq!(apply(&tagged(), &[list], &NoIcm), Err(Unsupported::List));
        let encap = Action::InsertPointer {
            anchor: ANCHOR_START,
            offset_words: 0,
            size_words: 25,
            attributes: 1,
            pointer: 7,
        };
        assert_eq!(
            apply(&tagged(), &[encap], &NoIcm),
            Err(Unsupported::Reformat)
        );
        let l4_too = Action::RemoveBySize {
            anchor: ANCHOR_START,
            offset_words: 0,
            size_words: 2,
            outer_l4_remove: true,
        };
        assert_eq!(
            apply(&tagged(), &[l4_too], &NoIcm),
            Err(Unsupported::Action)
        );
    }
}
