//! NIC transmit steering by software-owned tables, as rdma-core's `mlx5dv_dr` builds them
//! (`dr_domain_caps_init` for MLX5DV_DR_DOMAIN_TYPE_NIC_TX: misses and the default-miss action
//! at the allow address, the drop action at the drop address; `dr_ste_v1_set_actions_tx`: push
//! VLAN inline, header modification by a MODIFY_LIST in header-modify ICM, encapsulation by an
//! INSERT_POINTER to a packet reformat context), reached from the transmit root by a "go to
//! table" entry; and packet reformat contexts applied by firmware entries, as mlx5_ib writes
//! rdma-core's root-level reformat actions (`packet_reformat_id`, DECAP). Every frame here
//! goes out on a loopback plug and comes back to the function's own receive queue, so what
//! left is what arrives.

use cxdirect_emu::testkit::dr::{self, domain};
use cxdirect_emu::testkit::flow_tables::{
    alloc_counter, create_table_of, query_counter, set_entry, set_root_of, smac_group,
};
use cxdirect_emu::testkit::plug::Plug;
use cxdirect_emu::testkit::ste::{self as tb, Builder};
use cxdirect_emu::testkit::{refused, udp_frame, CmdFail, Host};
use cxdirect_emu::{EmuConfig, Syndrome};
use cxdirect_hw::cmd::{CmdStatus, Opcode};
use cxdirect_hw::flow::{self, FLOW_TABLE_TYPE_NIC_RX, FLOW_TABLE_TYPE_NIC_TX};
use cxdirect_hw::reformat::{
    self as rf, AllocPacketReformatContextIn, AllocPacketReformatContextOut,
};

const SMAC: [u8; 6] = [0x02, 0x5a, 0, 0, 0, 0x07];
const OTHER_SMAC: [u8; 6] = [0x02, 0x5a, 0, 0, 0, 0x08];
/// The lookup types of rdma-core's smac matcher (dr_ste_v1.h) and its byte mask.
const ETHL2_SRC_O: u16 = 0x0005;
const DONT_CARE: u16 = 0x000f;
/// `DR_STE_V1_LU_TYPE_MATCH | DONT_CARE`: an action-only entry.
const MATCH_DONT_CARE: u16 = 0x040f;
const SMAC_BYTE_MASK: u16 = 0x0fc0;

fn frame_from(smac: [u8; 6]) -> Vec<u8> {
    let mut f = udp_frame(64, 5);
    f[6..12].copy_from_slice(&smac);
    f
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

#[test]
fn software_transmit_entries_push_a_vlan_and_rewrite_the_source_mac() {
    let mut p = Plug::new(EmuConfig::default());
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
    dom.transmit_table(&mut p.h);
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
    let mut p = Plug::new(EmuConfig::default());
    let mut dom = domain(&mut p.h);
    let caps = dom.caps;
    let counter = alloc_counter(&mut p.h);
    let mut entries = tx_table(dom.base, caps, &[], &[], caps.tx_drop);
    entries[1].1.counter(counter);
    assert_eq!(entries[1].0, dom.base + 0x1000, "the rule");
    dom.write(&mut p.h, entries);
    dom.transmit_table(&mut p.h);
    let before = p.h.dev.counters();
    assert_eq!(p.send(&frame_from(SMAC)), None);
    let other = frame_from(OTHER_SMAC);
    assert_eq!(p.send(&other), Some(other));
    assert_eq!(query_counter(&mut p.h, counter).0, 1);
    // An encapsulation naming no packet reformat context drops the frame rather than send it
    // unmodified.
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
    let mut p = Plug::new(EmuConfig::default());
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
    dom.transmit_table(&mut p.h);
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

/// ALLOC_PACKET_REFORMAT_CONTEXT as `dr_devx_create_reformat_ctx` sends it.
fn alloc_reformat(h: &mut Host, reformat_type: u8, data: &[u8]) -> Result<u32, CmdFail> {
    let size = AllocPacketReformatContextIn::<&[u8]>::SIZE;
    let mut input = Host::input(
        Opcode::AllocPacketReformatContext,
        0,
        (size + data.len().saturating_sub(2)).next_multiple_of(4),
    );
    AllocPacketReformatContextIn::new(&mut input[..])
        .unwrap()
        .packet_reformat_context_mut()
        .set_reformat_type(reformat_type)
        .set_reformat_data_size(data.len() as u16);
    let at = rf::REFORMAT_DATA_BYTE;
    input[at..at + data.len()].copy_from_slice(data);
    let out = h.exec(&input, 16)?;
    Ok(AllocPacketReformatContextOut::new(&out[..])
        .unwrap()
        .packet_reformat_id())
}

/// The outer header of rdma-core's `gen_gre_tunnel_encap_header` for an Ethernet frame of
/// `inner_len` bytes: Ethernet, IPv4 (protocol GRE, checksum 0), GRE with a key (protocol
/// 0x6558).
fn gre_header(inner_len: usize) -> Vec<u8> {
    let mut h = vec![
        0x00, 0x01, 0x01, 0x01, 0x01, 0x01, 0x02, 0x5a, 0, 0, 0, 0x07, 0x08, 0x00,
    ];
    let total = (20 + 8 + inner_len) as u16;
    h.extend_from_slice(&[0x45, 0, (total >> 8) as u8, total as u8, 0, 0, 0x40, 0]);
    h.extend_from_slice(&[64, 47, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]);
    h.extend_from_slice(&[0x20, 0, 0x65, 0x58, 0, 0, 0, 0x2a]);
    h
}

/// `dr_ste_v1_set_encap`: INSERT_POINTER at the start, size in words, attribute ENCAP.
fn encap_action(reformat_id: u32, size: usize) -> [u8; 8] {
    let mut a = [0u8; 8];
    tb::devx_set(&mut a, 0, 8, 0x0b);
    tb::devx_set(&mut a, 0x17, 6, (size / 2) as u64);
    tb::devx_set(&mut a, 0x1d, 3, 1);
    tb::devx_set(&mut a, 0x20, 32, u64::from(reformat_id));
    a
}

#[test]
fn a_software_transmit_entry_encapsulates_with_a_reformat_context_s_header() {
    let mut p = Plug::new(EmuConfig::default());
    let mut dom = domain(&mut p.h);
    let caps = dom.caps;
    let frame = frame_from(SMAC);
    let header = gre_header(frame.len());
    let id = alloc_reformat(&mut p.h, rf::REFORMAT_TYPE_L2_TO_L2_TUNNEL, &header)
        .expect("ALLOC_PACKET_REFORMAT_CONTEXT");
    let encap = encap_action(id, header.len());
    dom.write(
        &mut p.h,
        tx_table(dom.base, caps, &[&encap], &[], caps.tx_allow),
    );
    dom.transmit_table(&mut p.h);
    let got = p.send(&frame).expect("encapsulated and sent");
    assert_eq!(&got[header.len()..], &frame[..], "the frame, whole, inside");
    assert_eq!(&got[..24], &header[..24]);
    assert_ne!(&got[24..26], &[0, 0], "the outer IPv4 checksum computed");
    assert_eq!(&got[26..header.len()], &header[26..]);
    assert_eq!(p.h.dev.counters().tx_sw_steering_errors, 0);
}

#[test]
fn reformat_contexts_take_the_tunnel_types_and_sizes_only() {
    let mut p = Plug::new(EmuConfig::default());
    let h = &mut p.h;
    let header = gre_header(64);
    // IPsec (5) and the anchor-relative INSERT_HDR (0xf) are not modelled.
    for kind in [5, 0xf] {
        refused(
            alloc_reformat(h, kind, &header),
            CmdStatus::BadParameter,
            Syndrome::BadSteeringParams,
        );
    }
    refused(
        alloc_reformat(h, rf::REFORMAT_TYPE_L2_TO_L2_TUNNEL, &[0; 200]),
        CmdStatus::BadParameter,
        Syndrome::BadSteeringParams,
    );
    let id = alloc_reformat(h, rf::REFORMAT_TYPE_L2_TO_L3_TUNNEL, &header).unwrap();
    let mut input = Host::input(Opcode::DeallocPacketReformatContext, 0, 16);
    rf::DeallocPacketReformatContextIn::new(&mut input[..])
        .unwrap()
        .set_packet_reformat_id(id);
    h.exec(&input, 16).expect("DEALLOC_PACKET_REFORMAT_CONTEXT");
    refused(
        h.exec(&input, 16),
        CmdStatus::BadResource,
        Syndrome::NoSuchObject,
    );
}

/// SET_FLOW_TABLE_ENTRY 0 of a catch-all group in a new root of `table_type`: `action` with
/// `packet_reformat_id` `reformat` (0 for none) and, on receive, the plug's TIR.
fn reformat_root(p: &mut Plug, table_type: u8, action: u16, reformat: u32) {
    let tirn = p.tirn;
    let h = &mut p.h;
    let root = create_table_of(h, table_type, 0, 2, None).unwrap();
    let g = smac_group(h, table_type, root, 0, false).unwrap();
    let mut input = Host::input(Opcode::SetFlowTableEntry, 0, 0x340 + 8);
    {
        let mut cmd = flow::SetFteIn::new(&mut input[..]).unwrap();
        cmd.set_table_type(table_type)
            .set_table_id(root)
            .set_flow_index(0);
        let mut ctx = cmd.flow_context_all_mut();
        ctx.set_group_id(g)
            .set_action(action)
            .set_encap_id(reformat);
        if table_type == FLOW_TABLE_TYPE_NIC_RX {
            ctx.set_destination_list_size(1);
            ctx.set_destination(
                0,
                flow::dest_format_entry(flow::FLOW_DESTINATION_TYPE_TIR, tirn),
            )
            .unwrap();
        }
    }
    h.exec(&input, 16).expect("SET_FLOW_TABLE_ENTRY");
    set_root_of(h, table_type, root).unwrap();
}

#[test]
fn firmware_entries_encapsulate_on_transmit_and_decapsulate_on_receive() {
    // rdma-core's test_packet_reformat_root_l2_gre: a transmit root rule with an
    // L2_TO_L2_TUNNEL context, a receive root rule decapsulating (DECAP) to the QP's TIR.
    let mut p = Plug::new(EmuConfig::default());
    let frame = frame_from(SMAC);
    let header = gre_header(frame.len());
    let id = alloc_reformat(&mut p.h, rf::REFORMAT_TYPE_L2_TO_L2_TUNNEL, &header).unwrap();
    let encap = flow::FLOW_CONTEXT_ACTION_ALLOW | flow::FLOW_CONTEXT_ACTION_ENCAP;
    reformat_root(&mut p, FLOW_TABLE_TYPE_NIC_TX, encap, id);
    let got = p.send(&frame).expect("encapsulated");
    assert_eq!(&got[header.len()..], &frame[..]);
    let decap = flow::FLOW_CONTEXT_ACTION_FWD_DEST | flow::FLOW_CONTEXT_ACTION_DECAP;
    reformat_root(&mut p, FLOW_TABLE_TYPE_NIC_RX, decap, 0);
    assert_eq!(
        p.send(&frame),
        Some(frame.clone()),
        "out in GRE, back out of it"
    );
    // In use: the context stays.
    let mut input = Host::input(Opcode::DeallocPacketReformatContext, 0, 16);
    rf::DeallocPacketReformatContextIn::new(&mut input[..])
        .unwrap()
        .set_packet_reformat_id(id);
    refused(
        p.h.exec(&input, 16),
        CmdStatus::BadResourceState,
        Syndrome::ObjectInUse,
    );
}

#[test]
fn firmware_entries_carry_an_ip_packet_through_an_l3_tunnel() {
    // test_packet_reformat_root_l3_gre: L2_TO_L3_TUNNEL on transmit, L3_TUNNEL_TO_L2 with the
    // Ethernet header to put back on receive.
    let mut p = Plug::new(EmuConfig::default());
    let frame = frame_from(SMAC);
    let mut header = gre_header(frame.len() - 14);
    header[36..38].copy_from_slice(&[0x08, 0x00]);
    let tx = alloc_reformat(&mut p.h, rf::REFORMAT_TYPE_L2_TO_L3_TUNNEL, &header).unwrap();
    let rx = alloc_reformat(&mut p.h, rf::REFORMAT_TYPE_L3_TUNNEL_TO_L2, &frame[..14]).unwrap();
    // A receive entry takes no encapsulation, a transmit entry no decapsulation.
    let h = &mut p.h;
    let root = create_table_of(h, FLOW_TABLE_TYPE_NIC_TX, 0, 2, None).unwrap();
    let g = smac_group(h, FLOW_TABLE_TYPE_NIC_TX, root, 0, false).unwrap();
    let bad = set_entry(
        h,
        FLOW_TABLE_TYPE_NIC_TX,
        root,
        (g, 0),
        None,
        flow::FLOW_CONTEXT_ACTION_ALLOW | flow::FLOW_CONTEXT_ACTION_DECAP,
        None,
        None,
    );
    refused(bad, CmdStatus::BadParameter, Syndrome::BadSteeringParams);
    let encap = flow::FLOW_CONTEXT_ACTION_ALLOW | flow::FLOW_CONTEXT_ACTION_ENCAP;
    reformat_root(&mut p, FLOW_TABLE_TYPE_NIC_TX, encap, tx);
    reformat_root(
        &mut p,
        FLOW_TABLE_TYPE_NIC_RX,
        flow::FLOW_CONTEXT_ACTION_FWD_DEST | flow::FLOW_CONTEXT_ACTION_ENCAP,
        rx,
    );
    assert_eq!(p.send(&frame), Some(frame.clone()));
}
