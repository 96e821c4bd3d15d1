//! NIC transmit steering: the frames an SQ sends walk the function's NIC transmit tables
//! before they leave. Firmware tables as fs_core builds them in its egress namespace (where
//! mlx5_ib puts the transmit rules of `mlx5dv_create_flow`, rdma-core's transmit root tables):
//! entries that drop, allow, forward and count, misses that let the frame out. Software-owned
//! transmit tables as rdma-core's `mlx5dv_dr` builds them (`dr_domain_caps_init` for
//! MLX5DV_DR_DOMAIN_TYPE_NIC_TX: misses and the default-miss action at the allow address, the
//! drop action at the drop address; `dr_ste_v1_set_actions_tx`: push VLAN inline, header
//! modification by a MODIFY_LIST in header-modify ICM), reached from the root by a "go to
//! table" entry. Every frame here goes out on a loopback plug and comes back to the function's
//! own receive queue, so what left is what arrives.

use cxdirect_emu::testkit::dr::{self, domain, dr_caps};
use cxdirect_emu::testkit::flow_tables::{create_table_of, set_root_of};
use cxdirect_emu::testkit::ste::{self as tb, Builder};
use cxdirect_emu::testkit::{self as support, refused, udp_frame, CmdFail, Host};
use cxdirect_emu::{Device, EmuConfig, Syndrome};
use cxdirect_hw::caps::FlowTableNicCap;
use cxdirect_hw::cmd::{CmdStatus, Opcode};
use cxdirect_hw::cqe::Cqe64;
use cxdirect_hw::flow::{self, FLOW_TABLE_TYPE_NIC_RX, FLOW_TABLE_TYPE_NIC_TX};
use cxdirect_hw::hca::cap_type;
use cxdirect_hw::vport::TrafficCounter;

const MEM: usize = 16 << 20;
const SMAC: [u8; 6] = [0x02, 0x5a, 0, 0, 0, 0x07];
const OTHER_SMAC: [u8; 6] = [0x02, 0x5a, 0, 0, 0, 0x08];
/// The lookup types of rdma-core's smac matcher (dr_ste_v1.h) and its byte mask.
const ETHL2_SRC_O: u16 = 0x0005;
const DONT_CARE: u16 = 0x000f;
/// `DR_STE_V1_LU_TYPE_MATCH | DONT_CARE`: an action-only entry.
const MATCH_DONT_CARE: u16 = 0x040f;
const SMAC_BYTE_MASK: u16 = 0x0fc0;

/// A function on a loopback plug: an SQ, and an RQ every received frame is steered to.
struct Plug {
    h: Host,
    tx_key: u32,
    tx_cq: support::Cq,
    sq: support::Sq,
    rx_cq: support::Cq,
    rx_bufs: Vec<u64>,
}

fn plug(sw_steering: bool) -> Plug {
    let mut h = Host::new(
        Device::loopback(EmuConfig {
            sw_steering,
            ..EmuConfig::default()
        }),
        MEM,
    );
    h.bring_up();
    let tx_key = h.create_mkey(true, true);
    let rx_key = h.create_mkey(false, true);
    let tx_cq = h.create_cq(6);
    let tisn = h.create_tis();
    let sq = h.create_sq(tx_cq.cqn, tisn, 6);
    let rx_cq = h.create_cq(6);
    let mut rq = h.create_rq(rx_cq.cqn, 6, None);
    let mut rx_bufs = Vec::new();
    for _ in 0..32 {
        let buf = h.alloc(2048, 64);
        h.post_recv(&mut rq, buf, 2048, rx_key);
        rx_bufs.push(buf);
    }
    h.steer_all_to(rq.rqn);
    Plug {
        h,
        tx_key,
        tx_cq,
        sq,
        rx_cq,
        rx_bufs,
    }
}

impl Plug {
    /// Sends `frame`; returns what came back, if anything. The send always completes.
    fn send(&mut self, frame: &[u8]) -> Option<Vec<u8>> {
        let buf = self.h.alloc(frame.len() as u64, 64);
        let wqe = self.h.build_send(&self.sq, frame, buf, self.tx_key, true);
        self.h.post(&mut self.sq, &wqe, false);
        self.h.poll_cq(&mut self.tx_cq).expect("send completion");
        self.h.dev.poll();
        let cqe = self.h.poll_cq(&mut self.rx_cq)?;
        let len = Cqe64::new(&cqe[..]).expect("layout").byte_cnt() as usize;
        let index = u16::from_be_bytes([cqe[0x3c], cqe[0x3d]]);
        Some(self.h.read(self.rx_bufs[usize::from(index) % 32], len))
    }
}

fn frame_from(smac: [u8; 6]) -> Vec<u8> {
    let mut f = udp_frame(64, 5);
    f[6..12].copy_from_slice(&smac);
    f
}

/// CREATE_FLOW_GROUP in a transmit table over `index..=index`, masking the source MAC (or
/// nothing).
fn smac_group(
    h: &mut Host,
    table_type: u8,
    table: u32,
    index: u32,
    smac: bool,
) -> Result<u32, CmdFail> {
    let mut input = Host::input(Opcode::CreateFlowGroup, 0, 0x400);
    {
        let mut cmd = flow::CreateFlowGroupIn::new(&mut input[..]).unwrap();
        cmd.set_table_type(table_type)
            .set_table_id(table)
            .set_start_flow_index(index)
            .set_end_flow_index(index);
        if smac {
            cmd.set_match_criteria_enable(flow::MATCH_OUTER_HEADERS);
            cmd.match_criteria_mut()
                .outer_headers_mut()
                .set_smac(0xffff_ffff_ffff);
        }
    }
    let out = h.exec(&input, 16)?;
    Ok(flow::CreateFlowGroupOut::new(&out[..]).unwrap().group_id())
}

/// SET_FLOW_TABLE_ENTRY as `mlx5_cmd_set_fte` writes it: `action`, at most one destination,
/// at most one counter, the source MAC matched when given.
#[allow(clippy::too_many_arguments)]
fn set_entry(
    h: &mut Host,
    table_type: u8,
    table: u32,
    (group, index): (u32, u32),
    smac: Option<[u8; 6]>,
    action: u16,
    dest: Option<(u8, u32)>,
    counter: Option<u32>,
) -> Result<(), CmdFail> {
    let mut input = Host::input(Opcode::SetFlowTableEntry, 0, 0x340 + 16);
    {
        let mut cmd = flow::SetFteIn::new(&mut input[..]).unwrap();
        cmd.set_table_type(table_type)
            .set_table_id(table)
            .set_flow_index(index);
        let mut ctx = cmd.flow_context_all_mut();
        ctx.set_group_id(group).set_action(action);
        if let Some(mac) = smac {
            let mut b = [0u8; 8];
            b[2..].copy_from_slice(&mac);
            ctx.match_value_mut()
                .outer_headers_mut()
                .set_smac(u64::from_be_bytes(b));
        }
        let mut n = 0;
        if let Some((kind, id)) = dest {
            ctx.set_destination(n, flow::dest_format_entry(kind, id))
                .unwrap();
            n += 1;
            ctx.set_destination_list_size(1);
        }
        if let Some(id) = counter {
            ctx.set_destination(n, u64::from(id) << 32).unwrap();
            ctx.set_flow_counter_list_size(1);
        }
    }
    h.exec(&input, 16).map(|_| ())
}

fn alloc_counter(h: &mut Host) -> u32 {
    let mut input = Host::input(
        Opcode::AllocFlowCounter,
        0,
        flow::AllocFlowCounterIn::<&[u8]>::SIZE,
    );
    flow::AllocFlowCounterIn::new(&mut input[..]).unwrap();
    let out = h
        .exec(&input, flow::AllocFlowCounterOut::<&[u8]>::SIZE)
        .expect("ALLOC_FLOW_COUNTER");
    flow::AllocFlowCounterOut::new(&out[..])
        .unwrap()
        .flow_counter_id()
}

fn query_packets(h: &mut Host, id: u32) -> u64 {
    let mut input = Host::input(Opcode::QueryFlowCounter, 0, 0x20);
    flow::QueryFlowCounterIn::new(&mut input[..])
        .unwrap()
        .set_flow_counter_id(id);
    let out = h.exec(&input, 0x20).expect("QUERY_FLOW_COUNTER");
    let at = flow::QUERY_FLOW_COUNTER_STATISTICS_BYTE;
    TrafficCounter::new(&out[at..at + 0x10]).unwrap().packets()
}

#[test]
fn transmit_tables_are_offered_as_the_egress_namespace_needs_them() {
    let mut p = plug(false);
    let page = p.h.query_cap(cap_type::FLOW_TABLE, true);
    let f = FlowTableNicCap::new(&page[0x10..]).unwrap();
    let tx = f.flow_table_properties_nic_transmit();
    // init_egress_root_ns needs ft_support; its priorities FS_CHAINING_CAPS_EGRESS.
    assert!(tx.ft_support());
    assert!(tx.flow_modify_en() && tx.modify_root());
    assert!(tx.identified_miss_table_mode() && tx.flow_table_modify());
    assert!(tx.flow_counter() && tx.max_ft_level() > 1 && tx.log_max_ft_size() > 0);
    assert!(
        !tx.sw_owner_v2(),
        "software-owned only with software steering"
    );
    assert!(dr_caps(&mut plug(true).h).tx_sw_owner_v2);
}

#[test]
fn a_transmit_drop_entry_keeps_its_frames_in_and_counts_them() {
    let mut p = plug(false);
    let h = &mut p.h;
    let root = create_table_of(h, FLOW_TABLE_TYPE_NIC_TX, 0, 2, None).expect("TX table");
    let group = smac_group(h, FLOW_TABLE_TYPE_NIC_TX, root, 0, true).unwrap();
    let counter = alloc_counter(h);
    let drop = flow::FLOW_CONTEXT_ACTION_DROP | flow::FLOW_CONTEXT_ACTION_COUNT;
    set_entry(
        h,
        FLOW_TABLE_TYPE_NIC_TX,
        root,
        (group, 0),
        Some(SMAC),
        drop,
        None,
        Some(counter),
    )
    .expect("drop entry");
    // Nothing is steered before the table is the transmit root.
    assert!(p.send(&frame_from(SMAC)).is_some());
    set_root_of(&mut p.h, FLOW_TABLE_TYPE_NIC_TX, root).expect("transmit root");
    let before = p.h.dev.counters();
    assert_eq!(p.send(&frame_from(SMAC)), None, "dropped on its way out");
    assert_eq!(p.send(&frame_from(SMAC)), None);
    let other = frame_from(OTHER_SMAC);
    assert_eq!(p.send(&other), Some(other), "a miss lets the frame out");
    let after = p.h.dev.counters();
    assert_eq!(after.tx_steer_drops - before.tx_steer_drops, 2);
    assert_eq!(
        after.tx_frames - before.tx_frames,
        1,
        "only the other frame left"
    );
    assert_eq!(query_packets(&mut p.h, counter), 2);
}

#[test]
fn a_transmit_entry_forwards_to_a_deeper_table_and_an_allow_lets_the_frame_out() {
    let mut p = plug(false);
    let h = &mut p.h;
    let last = create_table_of(h, FLOW_TABLE_TYPE_NIC_TX, 2, 2, None).unwrap();
    let g = smac_group(h, FLOW_TABLE_TYPE_NIC_TX, last, 0, true).unwrap();
    set_entry(
        h,
        FLOW_TABLE_TYPE_NIC_TX,
        last,
        (g, 0),
        Some(OTHER_SMAC),
        flow::FLOW_CONTEXT_ACTION_DROP,
        None,
        None,
    )
    .unwrap();
    let g1 = smac_group(h, FLOW_TABLE_TYPE_NIC_TX, last, 1, false).unwrap();
    set_entry(
        h,
        FLOW_TABLE_TYPE_NIC_TX,
        last,
        (g1, 1),
        None,
        flow::FLOW_CONTEXT_ACTION_ALLOW,
        None,
        None,
    )
    .unwrap();
    let root = create_table_of(h, FLOW_TABLE_TYPE_NIC_TX, 0, 2, None).unwrap();
    let g = smac_group(h, FLOW_TABLE_TYPE_NIC_TX, root, 0, false).unwrap();
    let fwd = Some((flow::FLOW_DESTINATION_TYPE_FLOW_TABLE, last));
    set_entry(
        h,
        FLOW_TABLE_TYPE_NIC_TX,
        root,
        (g, 0),
        None,
        flow::FLOW_CONTEXT_ACTION_FWD_DEST,
        fwd,
        None,
    )
    .unwrap();
    set_root_of(h, FLOW_TABLE_TYPE_NIC_TX, root).unwrap();
    let mine = frame_from(SMAC);
    assert_eq!(p.send(&mine), Some(mine));
    assert_eq!(p.send(&frame_from(OTHER_SMAC)), None);
    // The receive root is untouched by the transmit one.
    let mine = frame_from(SMAC);
    assert_eq!(p.send(&mine), Some(mine));
}

#[test]
fn transmit_entries_name_no_tir_and_no_table_of_the_other_direction() {
    let mut p = plug(false);
    let h = &mut p.h;
    let tx = create_table_of(h, FLOW_TABLE_TYPE_NIC_TX, 0, 2, None).unwrap();
    let rx = create_table_of(h, FLOW_TABLE_TYPE_NIC_RX, 3, 2, None).unwrap();
    let g = smac_group(h, FLOW_TABLE_TYPE_NIC_TX, tx, 0, false).unwrap();
    let fwd = flow::FLOW_CONTEXT_ACTION_FWD_DEST;
    // Refused before the TIR is looked for: a transmit entry has no TIR to go to.
    let tirn = 1;
    refused(
        set_entry(
            h,
            FLOW_TABLE_TYPE_NIC_TX,
            tx,
            (g, 0),
            None,
            fwd,
            Some((flow::FLOW_DESTINATION_TYPE_TIR, tirn)),
            None,
        ),
        CmdStatus::BadParameter,
        Syndrome::BadSteeringParams,
    );
    refused(
        set_entry(
            h,
            FLOW_TABLE_TYPE_NIC_TX,
            tx,
            (g, 0),
            None,
            fwd,
            Some((flow::FLOW_DESTINATION_TYPE_FLOW_TABLE, rx)),
            None,
        ),
        CmdStatus::BadResource,
        Syndrome::NoSuchObject,
    );
    // A table is named with its own type, by every command.
    refused(
        smac_group(h, FLOW_TABLE_TYPE_NIC_RX, tx, 1, false),
        CmdStatus::BadResource,
        Syndrome::NoSuchObject,
    );
    refused(
        set_root_of(h, FLOW_TABLE_TYPE_NIC_TX, rx),
        CmdStatus::BadResource,
        Syndrome::NoSuchObject,
    );
    refused(
        create_table_of(h, FLOW_TABLE_TYPE_NIC_TX, 1, 2, Some(rx)),
        CmdStatus::BadResource,
        Syndrome::NoSuchObject,
    );
    refused(
        create_table_of(h, 2, 0, 2, None),
        CmdStatus::BadParameter,
        Syndrome::BadSteeringParams,
    );
}

/// A DR transmit table's entries from `base`: its anchor (always hit into an smac matcher of
/// one slot), the rule for [`SMAC`] (its `actions`, hitting `dest`), and the matcher's end
/// anchor (always miss to the allow address, the transmit domain's default). `more` actions
/// go into an action-only MATCH entry the rule hits first, as `dr_ste_v1_arr_init_next_match`
/// adds one when the rule's own 8 bytes of actions are spent.
fn tx_table(
    base: u64,
    caps: dr::DrCaps,
    actions: &[&[u8]],
    more: &[&[u8]],
    dest: u64,
) -> Vec<(u64, Builder)> {
    let (anchor, matcher, end, extra) = (base, base + 0x1000, base + 0x2000, base + 0x3000);
    let mut a = Builder::init(DONT_CARE, 0);
    a.always_hit_htbl(SMAC_BYTE_MASK, ETHL2_SRC_O, matcher, 1);
    let mut tag = [0u8; 16];
    tag[4..10].copy_from_slice(&SMAC);
    let mut mask = [0u8; 16];
    mask[4..10].fill(0xff);
    let mut rule = Builder::init(ETHL2_SRC_O, 0);
    rule.bit_mask(mask).tag(tag).miss(end);
    put_actions(&mut rule, actions);
    let mut entries = vec![(anchor, a)];
    if more.is_empty() {
        rule.hit(dest, 1);
    } else {
        rule.hit(extra, 1);
        let mut m = Builder::init(MATCH_DONT_CARE, 0);
        m.hit(dest, 1).miss(end);
        put_actions(&mut m, more);
        entries.push((extra, m));
    }
    let mut e = Builder::init(DONT_CARE, 0);
    e.always_miss(caps.tx_allow);
    entries.extend([(matcher, rule), (end, e)]);
    entries
}

fn put_actions(entry: &mut Builder, actions: &[&[u8]]) {
    let mut at = 0;
    for action in actions {
        entry.action(at, action);
        at += action.len();
    }
}

/// A transmit root whose one catch-all entry goes on to software-owned table `table`, as
/// mlx5_ib's rule for a DR "go to table" action on the root level does.
fn tx_root_to(h: &mut Host, table: u32) {
    let root = create_table_of(h, FLOW_TABLE_TYPE_NIC_TX, 0, 2, None).unwrap();
    let g = smac_group(h, FLOW_TABLE_TYPE_NIC_TX, root, 0, false).unwrap();
    let fwd = Some((flow::FLOW_DESTINATION_TYPE_FLOW_TABLE, table));
    set_entry(
        h,
        FLOW_TABLE_TYPE_NIC_TX,
        root,
        (g, 0),
        None,
        flow::FLOW_CONTEXT_ACTION_FWD_DEST,
        fwd,
        None,
    )
    .unwrap();
    set_root_of(h, FLOW_TABLE_TYPE_NIC_TX, root).unwrap();
}

#[test]
fn software_transmit_entries_push_a_vlan_and_rewrite_the_source_mac() {
    let mut p = plug(true);
    let mut dom = domain(&mut p.h);
    let caps = dom.caps;
    // OUT_SMAC_47_16 and OUT_SMAC_15_0 set, as test_tbl_modify_header_rule asks.
    dom.write_modify_list(
        &mut p.h,
        2,
        &[
            tb::set_action(0x08, 0, 32, 0x8888_8888),
            tb::set_action(0x09, 16, 16, 0x8888),
        ],
    );
    let vlan = 0x8100_6005u32;
    let entries = tx_table(
        dom.base,
        caps,
        &[&tb::modify_list(2, 2)],
        &[&tb::push_vlan(vlan)],
        caps.tx_allow,
    );
    dom.write(&mut p.h, entries);
    let table = dr::create_sw_table(
        &mut p.h,
        FLOW_TABLE_TYPE_NIC_TX,
        caps.max_ft_level - 1,
        dom.base,
    )
    .expect("software-owned transmit table");
    tx_root_to(&mut p.h, table);
    let frame = frame_from(SMAC);
    let got = p.send(&frame).expect("rewritten and sent");
    let mut want = frame.clone();
    want[6..12].fill(0x88);
    want.splice(12..12, vlan.to_be_bytes());
    assert_eq!(got, want);
    // Another source MAC misses to the allow address untouched.
    let other = frame_from(OTHER_SMAC);
    assert_eq!(p.send(&other), Some(other));
    assert_eq!(p.h.dev.counters().tx_sw_steering_errors, 0);
}

#[test]
fn software_transmit_entries_drop_and_count_and_a_bad_walk_drops_too() {
    let mut p = plug(true);
    let mut dom = domain(&mut p.h);
    let caps = dom.caps;
    let counter = alloc_counter(&mut p.h);
    let mut entries = tx_table(dom.base, caps, &[], &[], caps.tx_drop);
    entries[1].1.counter(counter);
    assert_eq!(entries[1].0, dom.base + 0x1000, "the rule");
    dom.write(&mut p.h, entries);
    let table = dr::create_sw_table(
        &mut p.h,
        FLOW_TABLE_TYPE_NIC_TX,
        caps.max_ft_level - 1,
        dom.base,
    )
    .unwrap();
    tx_root_to(&mut p.h, table);
    let before = p.h.dev.counters();
    assert_eq!(p.send(&frame_from(SMAC)), None);
    let other = frame_from(OTHER_SMAC);
    assert_eq!(p.send(&other), Some(other));
    assert_eq!(query_packets(&mut p.h, counter), 1);
    // An encapsulation (not applied) drops the frame rather than send it unmodified.
    let encap = {
        let mut a = [0u8; 8];
        tb::devx_set(&mut a, 0, 8, 0x0b);
        tb::devx_set(&mut a, 0x17, 6, 25);
        tb::devx_set(&mut a, 0x1d, 3, 1);
        a
    };
    dom.write(
        &mut p.h,
        tx_table(dom.base, caps, &[&encap], &[], caps.tx_allow),
    );
    assert_eq!(p.send(&frame_from(SMAC)), None);
    let after = p.h.dev.counters();
    assert_eq!(after.tx_steer_drops - before.tx_steer_drops, 2);
    assert_eq!(
        after.tx_sw_steering_errors - before.tx_sw_steering_errors,
        1
    );
}

#[test]
fn a_register_an_entry_sets_is_what_the_next_lookup_matches() {
    // test_metadata_modify_action_set_copy_match's shape: an always-hit entry sets reg_c_0
    // (one SET inline, as `dr_ste_v1_set_rewrite_actions` writes a single action) and goes on
    // to a matcher on reg_c_0 (STEERING_REGISTERS_0), whose rule drops.
    const REGISTERS_0: u16 = 0x010f;
    const REG_C_0_BYTES: u16 = 0xf000;
    const REGISTER_0_0: u8 = 0x90;
    let mut p = plug(true);
    let mut dom = domain(&mut p.h);
    let caps = dom.caps;
    let (anchor, matcher, end) = (dom.base, dom.base + 0x1000, dom.base + 0x2000);
    let mut a = Builder::init(DONT_CARE, 0);
    a.always_hit_htbl(REG_C_0_BYTES, REGISTERS_0, matcher, 1)
        .action(0, &tb::set_action(REGISTER_0_0, 0, 32, 0x1234))
        .reparse();
    let mut rule = Builder::init(REGISTERS_0, 0);
    let mut tag = [0u8; 16];
    tag[..4].copy_from_slice(&0x1234u32.to_be_bytes());
    let mut mask = [0u8; 16];
    mask[..4].fill(0xff);
    rule.bit_mask(mask).tag(tag).hit(caps.tx_drop, 1).miss(end);
    let mut e = Builder::init(DONT_CARE, 0);
    e.always_miss(caps.tx_allow);
    dom.write(&mut p.h, vec![(anchor, a), (matcher, rule), (end, e)]);
    let table = dr::create_sw_table(
        &mut p.h,
        FLOW_TABLE_TYPE_NIC_TX,
        caps.max_ft_level - 1,
        dom.base,
    )
    .unwrap();
    tx_root_to(&mut p.h, table);
    let before = p.h.dev.counters();
    assert_eq!(
        p.send(&frame_from(SMAC)),
        None,
        "reg_c_0 matched after the SET"
    );
    let after = p.h.dev.counters();
    assert_eq!(after.tx_steer_drops - before.tx_steer_drops, 1);
    assert_eq!(after.tx_sw_steering_errors, before.tx_sw_steering_errors);
}
