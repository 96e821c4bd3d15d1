//! Walks over entries laid out as rdma-core lays them out (see [`crate::testkit::ste`]).

use super::action::{self, Action, ActionError};
use super::entry::{self, EntryError, EntryFormat, STE_SIZE};
use super::lookup::{viewed, LookupError, LookupType, Metadata, PacketView};
use super::walk::{walk, Terminals, WalkError, WalkResult};
use super::IcmRead;
use crate::packet::{parse, Parsed};
use crate::testkit::ste::{self as tb, Builder};
use std::collections::HashMap;

const GVMI: u16 = 3;
const ROOT: u64 = 0x10_0000;
const MATCHER: u64 = 0x20_0000;
const END_ANCHOR: u64 = 0x30_0000;
const COLLISION: u64 = 0x40_0000;
const ACTION_TBL: u64 = 0x50_0000;
const DROP: u64 = 0xd0_0000;
const TIR_A: u64 = 0xe0_0040;
const TIR_B: u64 = 0xe0_0080;
const ETHL2_SRC_O: u16 = 0x0005;
const DONT_CARE: u16 = 0x000f;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Drop,
    Tir(u32),
}

#[derive(Default)]
struct Icm(HashMap<u64, [u8; 64]>);

impl IcmRead for Icm {
    fn read_entry(&self, icm_addr: u64) -> Option<[u8; STE_SIZE]> {
        self.0.get(&icm_addr).copied()
    }
}

impl Icm {
    fn put(&mut self, addr: u64, b: &Builder) {
        self.0.insert(addr, b.post());
    }
}

struct Ends;

impl Terminals for Ends {
    type Terminal = End;
    fn terminal(&self, addr: u64) -> Option<End> {
        match addr {
            DROP => Some(End::Drop),
            TIR_A => Some(End::Tir(1)),
            TIR_B => Some(End::Tir(2)),
            _ => None,
        }
    }
}

/// An Ethernet + IPv4 + UDP frame from `smac`.
fn frame(smac: [u8; 6]) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 0x01];
    f.extend_from_slice(&smac);
    f.extend_from_slice(&[0x08, 0x00]);
    f.extend_from_slice(&[0x45, 0xb8, 0, 28, 0, 1, 0, 0, 64, 17, 0, 0]);
    f.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
    f.extend_from_slice(&[0x04, 0xd2, 0x12, 0xb7, 0, 8, 0, 0]);
    f
}

fn run(icm: &Icm, smac: [u8; 6]) -> Result<WalkResult<End>, WalkError> {
    let f = frame(smac);
    let parsed: Parsed = parse(&f);
    let meta = Metadata::default();
    walk(
        icm,
        &Ends,
        ROOT,
        &mut PacketView {
            parsed: &parsed,
            frame: &f,
            meta: &meta,
        },
    )
}

fn smac_mask() -> [u8; 16] {
    let mut m = [0u8; 16];
    m[4..10].fill(0xff);
    m
}

fn smac_tag(smac: [u8; 6]) -> [u8; 16] {
    let mut t = [0u8; 16];
    t[4..10].copy_from_slice(&smac);
    t
}

/// The reference hash (bit by bit, apart from the module's table) of an smac rule's tag.
fn slot(smac: [u8; 6], n: u32) -> u64 {
    let mut crc = 0u32;
    for &b in &smac_tag(smac) {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    u64::from(crc.swap_bytes() % n)
}

/// A table (anchor -> matcher hash table of `n` slots on smac -> end anchor -> drop) with the
/// given slots filled by `rules`; every other slot formatted always-miss to the end anchor.
fn table(n: u64, rules: &[(u64, Builder)]) -> Icm {
    let mut icm = Icm::default();
    let bm = 0x0fc0; // smac bytes 4..=9
    icm.put(
        ROOT,
        Builder::init(DONT_CARE, GVMI).always_hit_htbl(bm, ETHL2_SRC_O, MATCHER, n),
    );
    for i in 0..n {
        let mut empty = Builder::init(ETHL2_SRC_O, GVMI);
        empty.always_miss(END_ANCHOR);
        icm.put(MATCHER + 64 * i, &empty);
    }
    icm.put(END_ANCHOR, Builder::init(DONT_CARE, GVMI).always_miss(DROP));
    for (addr, b) in rules {
        icm.put(*addr, b);
    }
    icm
}

/// An smac rule entry hitting `dest` with a flow tag and a counter, missing to `miss`.
fn smac_rule(smac: [u8; 6], dest: u64, tag: u32, counter: u32, miss: u64) -> Builder {
    let mut b = Builder::init(ETHL2_SRC_O, GVMI);
    b.bit_mask(smac_mask())
        .tag(smac_tag(smac))
        .action(0, &tb::flow_tag(tag))
        .counter(counter)
        .hit(dest, 1)
        .miss(miss);
    b
}

const MAC_A: [u8; 6] = [0x00, 0x11, 0x22, 0x33, 0x44, 0x55];
const MAC_B: [u8; 6] = [0x00, 0x11, 0x22, 0x33, 0x44, 0x66];

#[test]
fn smac_rule_hits_tir_with_tag_and_counter() {
    let icm = table(
        1,
        &[(MATCHER, smac_rule(MAC_A, TIR_A, 0xabc, 0x123, END_ANCHOR))],
    );
    let r = run(&icm, MAC_A).unwrap();
    assert_eq!(r.terminal, End::Tir(1));
    assert_eq!(r.flow_tag(), Some(0xabc));
    assert_eq!(r.counters, vec![0x123]);
    assert_eq!(r.visited, 2);
    assert!(!r.reparse);
}

#[test]
fn miss_falls_through_to_default_drop() {
    let icm = table(
        1,
        &[(MATCHER, smac_rule(MAC_A, TIR_A, 0xabc, 0x123, END_ANCHOR))],
    );
    let r = run(&icm, MAC_B).unwrap();
    assert_eq!(r.terminal, End::Drop);
    assert!(r.actions.is_empty() && r.counters.is_empty());
    assert_eq!(r.visited, 3); // anchor, rule, end anchor
}

#[test]
fn collision_chain_reaches_second_rule_by_miss_link() {
    let first = smac_rule(MAC_A, TIR_A, 1, 0, COLLISION);
    let second = smac_rule(MAC_B, TIR_B, 2, 7, END_ANCHOR);
    let icm = table(1, &[(MATCHER, first), (COLLISION, second)]);
    let r = run(&icm, MAC_B).unwrap();
    assert_eq!(
        (r.terminal, r.flow_tag(), r.visited),
        (End::Tir(2), Some(2), 3)
    );
    assert_eq!(r.counters, vec![7]);
    let r = run(&icm, MAC_A).unwrap();
    assert_eq!(
        (r.terminal, r.flow_tag(), r.visited),
        (End::Tir(1), Some(1), 2)
    );
    assert!(r.counters.is_empty(), "counter id 0 counts nothing");
    assert_eq!(run(&icm, [9; 6]).unwrap().terminal, End::Drop);
}

#[test]
fn hash_table_index_selects_the_slot() {
    const N: u32 = 64;
    // Two MACs in different, non-zero slots.
    let macs: Vec<[u8; 6]> = (0u8..=255)
        .map(|i| [0x00, 0x11, 0x22, 0x33, 0x44, i])
        .filter(|m| slot(*m, N) != 0)
        .collect();
    let a = macs[0];
    let b = *macs.iter().find(|m| slot(**m, N) != slot(a, N)).unwrap();
    let rules = [
        (
            MATCHER + 64 * slot(a, N),
            smac_rule(a, TIR_A, 10, 0, END_ANCHOR),
        ),
        (
            MATCHER + 64 * slot(b, N),
            smac_rule(b, TIR_B, 20, 0, END_ANCHOR),
        ),
    ];
    let icm = table(u64::from(N), &rules);
    assert_eq!(run(&icm, a).unwrap().terminal, End::Tir(1));
    assert_eq!(run(&icm, b).unwrap().terminal, End::Tir(2));
    // The same rule one slot off is not found: the index decides.
    let off = [(
        MATCHER + 64 * ((slot(a, N) + 1) % u64::from(N)),
        smac_rule(a, TIR_A, 10, 0, END_ANCHOR),
    )];
    assert_eq!(
        run(&table(u64::from(N), &off), a).unwrap().terminal,
        End::Drop
    );
}

#[test]
fn match_extension_entry_carries_the_actions() {
    // BWC rule: flow tag in its 8-byte area, then (no room for the SET) a MATCH entry in a
    // one-slot table with the inline SET of smac_47_16 and a pop VLAN, hitting the TIR.
    let mut rule = Builder::init(ETHL2_SRC_O, GVMI);
    rule.bit_mask(smac_mask())
        .tag(smac_tag(MAC_A))
        .action(0, &tb::flow_tag(5))
        .next_lu_type(0x040f)
        .hit(ACTION_TBL, 1)
        .miss(END_ANCHOR);
    let mut ext = Builder::init(0x040f, GVMI);
    ext.action(0, &tb::set_action(0x08, 0, 0, 0x0a0b_0c0d))
        .action(8, &tb::pop_vlan(1))
        .reparse()
        .hit(TIR_A, 1);
    let icm = table(1, &[(MATCHER, rule), (ACTION_TBL, ext)]);
    let r = run(&icm, MAC_A).unwrap();
    assert_eq!(r.terminal, End::Tir(1));
    assert_eq!(r.visited, 3);
    assert!(r.reparse);
    assert_eq!(
        r.actions,
        vec![
            Action::FlowTag(5),
            Action::Set {
                field: 0x08,
                shift: 0x20,
                len: 0,
                data: 0x0a0b_0c0d
            },
            Action::RemoveBySize {
                anchor: 2,
                offset_words: 0,
                size_words: 2,
                outer_l4_remove: false
            },
        ]
    );
}

#[test]
fn loop_is_bounded() {
    let mut icm = table(1, &[]);
    // The end anchor misses to itself.
    icm.put(
        END_ANCHOR,
        Builder::init(DONT_CARE, GVMI).always_miss(END_ANCHOR),
    );
    assert_eq!(run(&icm, MAC_A).unwrap_err(), WalkError::TooLong);
}

#[test]
fn bad_addresses_and_entries_are_typed_errors() {
    let mut icm = table(1, &[]);
    icm.put(
        END_ANCHOR,
        Builder::init(DONT_CARE, GVMI).always_miss(0x66_0000),
    );
    assert_eq!(
        run(&icm, MAC_A).unwrap_err(),
        WalkError::Unreadable(0x66_0000)
    );
    // A hit address with a stray bit 5 decodes as one slot at the 64-byte base below it
    // (the lowest set bit is the size): the walk reads there.
    let mut bad = smac_rule(MAC_A, TIR_A, 0, 0, END_ANCHOR);
    bad.hit(0x70_0020, 1);
    let icm = table(1, &[(MATCHER, bad)]);
    assert_eq!(
        run(&icm, MAC_A).unwrap_err(),
        WalkError::Unreadable(0x70_0000)
    );
    // Entry addresses come out of decode 64-byte aligned; only a start can be misaligned.
    let (f, meta) = (frame(MAC_A), Metadata::default());
    let parsed = parse(&f);
    let mut pkt = PacketView {
        parsed: &parsed,
        frame: &f,
        meta: &meta,
    };
    assert_eq!(
        walk(&icm, &Ends, ROOT + 8, &mut pkt).unwrap_err(),
        WalkError::Misaligned(ROOT + 8)
    );
    // A reserved control bit.
    let mut resv = smac_rule(MAC_A, TIR_A, 0, 0, END_ANCHOR);
    tb::devx_set(&mut resv.0, 0x5d, 1, 1);
    let icm = table(1, &[(MATCHER, resv)]);
    assert!(matches!(
        run(&icm, MAC_A),
        Err(WalkError::Entry {
            err: EntryError::ReservedBits(8),
            ..
        })
    ));
    // Unknown lookup type on the entry.
    let mut odd = smac_rule(MAC_A, TIR_A, 0, 0, END_ANCHOR);
    tb::devx_set(&mut odd.0, 0x30, 8, 0x17);
    let icm = table(1, &[(MATCHER, odd)]);
    assert!(matches!(
        run(&icm, MAC_A),
        Err(WalkError::Lookup {
            err: LookupError(0x0017),
            ..
        })
    ));
    // Unknown action id.
    let mut act = smac_rule(MAC_A, TIR_A, 0, 0, END_ANCHOR);
    act.action(4, &[0x12, 0, 0, 0]);
    let icm = table(1, &[(MATCHER, act)]);
    assert!(matches!(
        run(&icm, MAC_A),
        Err(WalkError::Action {
            err: ActionError::Unknown(0x12),
            ..
        })
    ));
}

#[test]
fn entry_decode_of_rdma_core_fields() {
    // dr_ste_v1_set_hit_addr with a 16-slot table, set_miss_addr, counters, the swap.
    let mut b = smac_rule(MAC_A, 0x12_3456_7800, 0, 0x00ab_cdef, 0x98_7654_3200);
    b.hit(0x12_3456_7800, 16)
        .byte_mask(0x0fc0)
        .next_lu_type(0x010f);
    let ste = entry::decode(&b.post()).unwrap();
    assert_eq!(ste.format, EntryFormat::BwcByte);
    assert_eq!(
        (ste.lookup_type, ste.next_lookup_type),
        (ETHL2_SRC_O, 0x010f)
    );
    assert_eq!(
        (ste.hit.base, ste.hit.entries, ste.hit.gvmi),
        (0x12_3456_7800, 16, GVMI)
    );
    assert_eq!(
        (ste.miss_addr, ste.miss_gvmi, ste.gvmi),
        (0x98_7654_3200, GVMI, GVMI)
    );
    assert_eq!((ste.counter_id, ste.byte_mask), (0x00ab_cdef, 0x0fc0));
    assert_eq!((ste.mask, ste.tag), (smac_mask(), smac_tag(MAC_A)));
    // Always-miss: all-ones hit field decodes as one slot, never followed.
    let mut m = Builder::init(DONT_CARE, GVMI);
    m.always_miss(DROP);
    let ste = entry::decode(&m.post()).unwrap();
    assert_eq!((ste.hit.entries, ste.miss_addr), (1, DROP));
    assert_eq!((ste.tag[0], ste.mask[0]), (0xdc, 0));
    // Malformed: format 5, zero hit field, an oversized table, mask mode.
    let mut raw = b.post();
    raw[0] = 5;
    assert_eq!(entry::decode(&raw), Err(EntryError::UnknownFormat(5)));
    let mut raw = b.post();
    raw[15] = 0;
    raw[16..20].fill(0);
    assert_eq!(entry::decode(&raw), Err(EntryError::NoTableSize));
    let mut big = b.clone_raw();
    big.hit(0, 1 << 25);
    assert_eq!(
        entry::decode(&big.post()),
        Err(EntryError::TableTooLarge(1 << 25))
    );
    let mut mm = b.clone_raw();
    tb::devx_set(&mut mm.0, 0xb1, 1, 1);
    assert!(matches!(
        entry::decode(&mm.post()),
        Err(EntryError::Unsupported(_))
    ));
}

#[test]
fn action_words_decode() {
    let mut area = [0u8; 12];
    area[..8].copy_from_slice(&tb::copy_action(0x90, 0, 0, 0x91, 0));
    area[8..].copy_from_slice(&tb::modify_list(3, 0x1234));
    let mut out = Vec::new();
    action::decode(&area, &mut out).unwrap();
    assert_eq!(
        out,
        vec![
            Action::Copy {
                dst_field: 0x90,
                dst_shift: 0x20,
                len: 0,
                src_field: 0x91,
                src_shift: 0x20
            },
            Action::ModifyList {
                count: 3,
                index: 0x1234
            },
        ]
    );
    let mut area = [0u8; 8];
    area.copy_from_slice(&tb::push_vlan(0x8100_0064));
    out.clear();
    action::decode(&area, &mut out).unwrap();
    assert_eq!(
        out,
        vec![Action::InsertInline {
            anchor: 0,
            offset_words: 6,
            data: 0x8100_0064
        }]
    );
    // A double action in the last 4 bytes runs past the area.
    let mut area = [0u8; 8];
    area[4..].copy_from_slice(&tb::set_action(0x90, 0, 0, 1)[..4]);
    assert_eq!(
        action::decode(&area, &mut out),
        Err(ActionError::Truncated(0x06))
    );
}

#[test]
fn lookup_tags_follow_the_ifc_layouts() {
    let f = frame(MAC_A);
    let mut meta = Metadata::default();
    meta.reg_c[..5].copy_from_slice(&[0x1111_2222, 0x3333_4444, 5, 6, 7]);
    let tag = |lu| viewed(&f, &meta, |pkt| LookupType::from_raw(lu).unwrap().tag(pkt));
    // ETHL2_SRC_O: l3_type IPv4 (1) in byte 1 bits 5:4, smac 4..10, ethertype 10..12.
    let t = tag(0x0005);
    assert_eq!(t[1], 0x1 << 4 | 0x2 << 2);
    assert_eq!(&t[4..10], &MAC_A);
    assert_eq!(&t[10..12], &[0x08, 0x00]);
    // ETHL2_O (destination MAC).
    assert_eq!(&tag(0x0003)[4..10], &[0x02, 0, 0, 0, 0, 0x01]);
    // ETHL2_SRC_DST_O: dmac_47_16, smac_47_16, dmac_15_0, l3_type, ..., smac_15_0.
    let t = tag(0x000b);
    assert_eq!(&t[0..4], &[0x02, 0, 0, 0]);
    assert_eq!(&t[4..8], &MAC_A[..4]);
    assert_eq!(&t[8..10], &[0, 0x01]);
    assert_eq!(t[11], 0x1 << 4);
    assert_eq!(&t[14..16], &MAC_A[4..]);
    // ETHL3_IPV4_5_TUPLE_O: addresses, ports, DSCP 46 / ECN 0, protocol 17.
    let t = tag(0x0007);
    assert_eq!(&t[0..8], &[10, 0, 0, 1, 10, 0, 0, 2]);
    assert_eq!(&t[8..12], &[0x04, 0xd2, 0x12, 0xb7]);
    assert_eq!((t[14], t[15]), (0xb8, 17));
    // ETHL4_O: version 4, TOS, TTL 64, protocol, ports.
    let t = tag(0x0009);
    assert_eq!(&t[0..8], &[0x40, 0xb8, 64, 17, 0x04, 0xd2, 0x12, 0xb7]);
    // STEERING_REGISTERS_0/1.
    let t = tag(0x010f);
    assert_eq!(&t[0..8], &[0x11, 0x11, 0x22, 0x22, 0x33, 0x33, 0x44, 0x44]);
    assert_eq!(&t[8..16], &[0, 0, 0, 5, 0, 0, 0, 6]);
    assert_eq!(&tag(0x0110)[0..4], &[0, 0, 0, 7]);
    // Inner lookups without a tunnel, DONT_CARE and the MATCH extension: zeros.
    for lu in [0x0006, 0x000f, 0x040f] {
        assert_eq!(tag(lu), [0; 16]);
    }
    assert_eq!(LookupType::from_raw(0x0103), Err(LookupError(0x0103)));
    // MPLS_O of a frame without MPLS: zeros.
    assert_eq!(tag(0x010b), [0; 16]);
}

#[test]
fn the_mpls_lookup_takes_the_first_label_stack_entry() {
    // `ste_mpls_v1`: mpls0_label, _exp, _s_bos, _ttl in bits 0x20..0x40, the entry's wire
    // layout (rdma-core's DR_STE_SET_MPLS).
    let entry: u32 = 0x12345 << 12 | 5 << 9 | 1 << 8 | 64;
    let mut f = frame(MAC_A);
    f[12..14].copy_from_slice(&0x8847u16.to_be_bytes());
    f[14..18].copy_from_slice(&entry.to_be_bytes());
    let meta = Metadata::default();
    let tag = |lu| viewed(&f, &meta, |pkt| LookupType::from_raw(lu).unwrap().tag(pkt));
    let mut want = [0u8; 16];
    want[4..8].copy_from_slice(&entry.to_be_bytes());
    assert_eq!(tag(0x010b), want);
    // MPLS_I: no tunnel here, so no inner entry.
    assert_eq!(tag(0x010c), [0; 16]);
}

#[test]
fn the_l4_misc_lookup_follows_the_packet_s_protocol() {
    let meta = Metadata::default();
    let tag = |f: &[u8]| {
        viewed(f, &meta, |pkt| {
            LookupType::from_raw(0x0113).unwrap().tag(pkt)
        })
    };
    // UDP: `ste_eth_l4_misc_v1`'s length and checksum (bytes 12..16).
    let udp = frame(MAC_A);
    let t = tag(&udp);
    assert_eq!(&t[12..14], &udp[38..40], "UDP length");
    assert_eq!(&t[14..16], &udp[40..42], "UDP checksum");
    assert_eq!(&t[..12], &[0; 12]);
    // TCP: window, urgent pointer, then acknowledgement and sequence numbers.
    let mut tcp = frame(MAC_A);
    tcp.resize(54, 0);
    tcp[16..18].copy_from_slice(&40u16.to_be_bytes());
    tcp[23] = 6;
    tcp[34..54].fill(0);
    tcp[38..42].copy_from_slice(&0x0102_0304u32.to_be_bytes());
    tcp[42..46].copy_from_slice(&0x0506_0708u32.to_be_bytes());
    tcp[46] = 5 << 4;
    tcp[48..50].copy_from_slice(&0x0a0bu16.to_be_bytes());
    let t = tag(&tcp);
    assert_eq!(&t[0..2], &[0x0a, 0x0b]);
    assert_eq!(&t[4..8], &[5, 6, 7, 8], "ack_num");
    assert_eq!(&t[8..12], &[1, 2, 3, 4], "seq_num");
    // ICMP: `ste_icmp_v1`: payload word, header data, type, code.
    let mut icmp = frame(MAC_A);
    icmp.resize(46, 0);
    icmp[16..18].copy_from_slice(&32u16.to_be_bytes());
    icmp[23] = 1;
    icmp[34..46].copy_from_slice(&[8, 0, 0, 0, 0x12, 0x34, 0, 7, 0xde, 0xad, 0xbe, 0xef]);
    let t = tag(&icmp);
    assert_eq!(&t[0..10], &[0xde, 0xad, 0xbe, 0xef, 0x12, 0x34, 0, 7, 8, 0]);
}
