//! NIC transmit steering by firmware tables: the frames an SQ sends walk the function's NIC
//! transmit tables before they leave, as fs_core builds them in its egress namespace (where
//! mlx5_ib puts the transmit rules of `mlx5dv_create_flow`, rdma-core's transmit root tables):
//! entries that drop, allow, forward and count, misses that let the frame out. Every frame
//! here goes out on a loopback plug and comes back to the function's own receive queue, so
//! what left is what arrives.

use cxdirect_emu::testkit::dr::dr_caps;
use cxdirect_emu::testkit::flow_tables::{
    alloc_counter, create_table_of, entry_matching, group_matching, query_counter,
    root_forwarding_to, set_entry, set_root_of, smac_group,
};
use cxdirect_emu::testkit::plug::Plug;
use cxdirect_emu::testkit::{refused, udp_frame, CmdFail, Host};
use cxdirect_emu::{EmuConfig, Syndrome};
use cxdirect_hw::caps::FlowTableNicCap;
use cxdirect_hw::cmd::{CmdStatus, Opcode};
use cxdirect_hw::flow::{self, FLOW_TABLE_TYPE_NIC_RX, FLOW_TABLE_TYPE_NIC_TX};
use cxdirect_hw::hca::cap_type;
use cxdirect_hw::modify_header as mh;

const SMAC: [u8; 6] = [0x02, 0x5a, 0, 0, 0, 0x07];
const OTHER_SMAC: [u8; 6] = [0x02, 0x5a, 0, 0, 0, 0x08];

/// A plugged function without software steering: only firmware tables.
fn firmware_only() -> Plug {
    Plug::new(EmuConfig {
        sw_steering: false,
        ..EmuConfig::default()
    })
}

fn frame_from(smac: [u8; 6]) -> Vec<u8> {
    let mut f = udp_frame(64, 5);
    f[6..12].copy_from_slice(&smac);
    f
}

#[test]
fn transmit_tables_are_offered_as_the_egress_namespace_needs_them() {
    let mut p = firmware_only();
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
    assert!(dr_caps(&mut Plug::new(EmuConfig::default()).h).tx_sw_owner_v2);
}

#[test]
fn a_transmit_drop_entry_keeps_its_frames_in_and_counts_them() {
    let mut p = firmware_only();
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
    assert_eq!(query_counter(&mut p.h, counter).0, 2);
}

#[test]
fn a_transmit_entry_forwards_to_a_deeper_table_and_an_allow_lets_the_frame_out() {
    let mut p = firmware_only();
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
    root_forwarding_to(h, FLOW_TABLE_TYPE_NIC_TX, last);
    let mine = frame_from(SMAC);
    assert_eq!(p.send(&mine), Some(mine));
    assert_eq!(p.send(&frame_from(OTHER_SMAC)), None);
    // The receive root is untouched by the transmit one.
    let mine = frame_from(SMAC);
    assert_eq!(p.send(&mine), Some(mine));
}

#[test]
fn transmit_entries_name_no_tir_and_no_table_of_the_other_direction() {
    let mut p = firmware_only();
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

/// ALLOC_MODIFY_HEADER_CONTEXT as `mlx5_cmd_modify_header_alloc` sends it.
fn alloc_modify_header(h: &mut Host, table_type: u8, actions: &[[u8; 8]]) -> Result<u32, CmdFail> {
    let mut input = Host::input(
        Opcode::AllocModifyHeaderContext,
        0,
        mh::ACTIONS_BYTE + actions.len() * mh::ACTION_SIZE,
    );
    mh::AllocModifyHeaderContextIn::new(&mut input[..])
        .unwrap()
        .set_table_type(table_type)
        .set_num_of_actions(actions.len() as u8);
    for (i, a) in actions.iter().enumerate() {
        let at = mh::ACTIONS_BYTE + i * mh::ACTION_SIZE;
        input[at..at + 8].copy_from_slice(a);
    }
    let out = h.exec(&input, 16)?;
    Ok(mh::AllocModifyHeaderContextOut::new(&out[..])
        .unwrap()
        .modify_header_id())
}

/// A SET action (`set_action_in`).
fn set_action(field: u16, length: u8, data: u32) -> [u8; 8] {
    let mut a = [0u8; 8];
    mh::SetActionIn::new(&mut a[..])
        .unwrap()
        .set_action_type(mh::ACTION_TYPE_SET)
        .set_field(field)
        .set_length(length)
        .set_data(data);
    a
}

/// SET_FLOW_TABLE_ENTRY of entry 0 in `group`: ALLOW and MOD_HDR with `modify_header_id`, as
/// mlx5_ib's transmit rule with a modify-header flow action and no destination is written.
fn allow_modified(
    h: &mut Host,
    table: u32,
    group: u32,
    modify_header_id: u32,
) -> Result<(), CmdFail> {
    let mut input = Host::input(Opcode::SetFlowTableEntry, 0, 0x340);
    {
        let mut cmd = flow::SetFteIn::new(&mut input[..]).unwrap();
        cmd.set_table_type(FLOW_TABLE_TYPE_NIC_TX)
            .set_table_id(table)
            .set_flow_index(0);
        cmd.flow_context_all_mut()
            .set_group_id(group)
            .set_action(flow::FLOW_CONTEXT_ACTION_ALLOW | flow::FLOW_CONTEXT_ACTION_MOD_HDR)
            .set_modify_header_id(modify_header_id);
    }
    h.exec(&input, 16).map(|_| ())
}

#[test]
fn a_transmit_entry_s_modify_header_context_rewrites_the_source_mac() {
    // test_root_tbl_modify_header_rule: OUT_SMAC_47_16 and OUT_SMAC_15_0 set on the transmit
    // root.
    let mut p = Plug::new(EmuConfig::default());
    let h = &mut p.h;
    let page = h.query_cap(cap_type::FLOW_TABLE, true);
    let f = FlowTableNicCap::new(&page[0x10..]).unwrap();
    assert!(
        f.flow_table_properties_nic_transmit()
            .max_modify_header_actions()
            >= 2
    );
    let actions = [
        set_action(mh::field::SMAC_47_16, 0, 0x8888_8888),
        set_action(mh::field::SMAC_15_0, 16, 0x8888),
    ];
    let id = alloc_modify_header(h, FLOW_TABLE_TYPE_NIC_TX, &actions).unwrap();
    let root = create_table_of(h, FLOW_TABLE_TYPE_NIC_TX, 0, 2, None).unwrap();
    let g = smac_group(h, FLOW_TABLE_TYPE_NIC_TX, root, 0, false).unwrap();
    allow_modified(h, root, g, id).unwrap();
    set_root_of(h, FLOW_TABLE_TYPE_NIC_TX, root).unwrap();
    let frame = frame_from(SMAC);
    let mut want = frame.clone();
    want[6..12].fill(0x88);
    assert_eq!(p.send(&frame), Some(want));
    // In use by the entry: not released.
    let mut input = Host::input(Opcode::DeallocModifyHeaderContext, 0, 16);
    mh::DeallocModifyHeaderContextIn::new(&mut input[..])
        .unwrap()
        .set_modify_header_id(id);
    refused(
        p.h.exec(&input, 16),
        CmdStatus::BadResourceState,
        Syndrome::ObjectInUse,
    );
}

#[test]
fn modify_header_contexts_take_placed_fields_of_their_table_type_only() {
    let mut p = Plug::new(EmuConfig::default());
    let h = &mut p.h;
    let smac = set_action(mh::field::SMAC_47_16, 0, 1);
    // GTP-U's TEID needs a flex parser; a 16-bit field written with 32 bits; no actions.
    for actions in [
        vec![set_action(0x6e, 0, 1)],
        vec![set_action(mh::field::SMAC_15_0, 0, 1)],
        vec![],
    ] {
        refused(
            alloc_modify_header(h, FLOW_TABLE_TYPE_NIC_TX, &actions),
            CmdStatus::BadParameter,
            Syndrome::BadSteeringParams,
        );
    }
    // A receive context is no transmit entry's.
    let rx = alloc_modify_header(h, FLOW_TABLE_TYPE_NIC_RX, &[smac]).unwrap();
    let root = create_table_of(h, FLOW_TABLE_TYPE_NIC_TX, 0, 2, None).unwrap();
    let g = smac_group(h, FLOW_TABLE_TYPE_NIC_TX, root, 0, false).unwrap();
    refused(
        allow_modified(h, root, g, rx),
        CmdStatus::BadResource,
        Syndrome::NoSuchObject,
    );
}

/// A transmit root whose one entry sets reg_c_0 to `reg` (MOD_HDR) and forwards to a table
/// whose entry drops the frames carrying reg_c_0 = 0x1234 (`misc_parameters_2`), as mlx5e's
/// and mlx5_ib's rules mark packets in one table and match the mark in the next.
fn mark_then_match(p: &mut Plug, reg: u32) {
    let h = &mut p.h;
    let next = create_table_of(h, FLOW_TABLE_TYPE_NIC_TX, 1, 2, None).unwrap();
    let at = (FLOW_TABLE_TYPE_NIC_TX, next, 0);
    let group = group_matching(h, at, flow::MATCH_MISC_PARAMETERS_2, |c| {
        c.misc_parameters_2_mut().set_metadata_reg_c_0(0xffff_ffff);
    })
    .unwrap();
    entry_matching(h, at, group, flow::FLOW_CONTEXT_ACTION_DROP, |v| {
        v.misc_parameters_2_mut().set_metadata_reg_c_0(0x1234);
    })
    .unwrap();
    mark_and_forward(h, reg, next);
}

/// The transmit root table: frames from [`SMAC`] get `reg` in reg_c_0 (a modify-header
/// context) and go on to table `next`.
fn mark_and_forward(h: &mut Host, reg: u32, next: u32) {
    let mark = alloc_modify_header(
        h,
        FLOW_TABLE_TYPE_NIC_TX,
        &[set_action(mh::field::METADATA_REGC_0, 0, reg)],
    )
    .unwrap();
    let root = create_table_of(h, FLOW_TABLE_TYPE_NIC_TX, 0, 2, None).unwrap();
    let g = smac_group(h, FLOW_TABLE_TYPE_NIC_TX, root, 0, false).unwrap();
    let mut input = Host::input(Opcode::SetFlowTableEntry, 0, 0x340 + 8);
    {
        let mut cmd = flow::SetFteIn::new(&mut input[..]).unwrap();
        cmd.set_table_type(FLOW_TABLE_TYPE_NIC_TX)
            .set_table_id(root)
            .set_flow_index(0);
        let mut ctx = cmd.flow_context_all_mut();
        ctx.set_group_id(g)
            .set_action(flow::FLOW_CONTEXT_ACTION_FWD_DEST | flow::FLOW_CONTEXT_ACTION_MOD_HDR)
            .set_modify_header_id(mark)
            .set_destination_list_size(1);
        ctx.set_destination(
            0,
            flow::dest_format_entry(flow::FLOW_DESTINATION_TYPE_FLOW_TABLE, next),
        )
        .unwrap();
    }
    h.exec(&input, 16).unwrap();
    set_root_of(h, FLOW_TABLE_TYPE_NIC_TX, root).unwrap();
}

#[test]
fn a_register_a_firmware_entry_sets_is_what_the_next_table_matches() {
    let frame = frame_from(SMAC);
    let mut p = firmware_only();
    mark_then_match(&mut p, 0x1234);
    assert_eq!(
        p.send(&frame),
        None,
        "marked 0x1234: dropped by the next table"
    );
    let mut p = firmware_only();
    mark_then_match(&mut p, 0x1235);
    assert_eq!(p.send(&frame), Some(frame.clone()), "another mark passes");
}

#[test]
fn criteria_the_model_does_not_match_are_refused_not_ignored() {
    let mut p = firmware_only();
    let h = &mut p.h;
    let table = create_table_of(h, FLOW_TABLE_TYPE_NIC_TX, 0, 4, None).unwrap();
    // An MPLS label over GRE in misc_parameters_2, GENEVE option data in misc_parameters_3 (a
    // ConnectX's flex parser reads both when configured for them; the model's parsers sample
    // GTP-U), a reserved byte of misc_parameters_3, then a bit of misc_parameters_4, each with
    // its part enabled.
    for (i, (enable, byte)) in [
        (flow::MATCH_MISC_PARAMETERS_2, 0xc8),
        (flow::MATCH_MISC_PARAMETERS_3, 0x124),
        (flow::MATCH_MISC_PARAMETERS_3, 0x12e),
        (1 << 5, 0x140),
    ]
    .into_iter()
    .enumerate()
    {
        let mut input = Host::input(Opcode::CreateFlowGroup, 0, 0x400);
        {
            let mut cmd = flow::CreateFlowGroupIn::new(&mut input[..]).unwrap();
            cmd.set_table_type(FLOW_TABLE_TYPE_NIC_TX)
                .set_table_id(table)
                .set_start_flow_index(i as u32)
                .set_end_flow_index(i as u32)
                .set_match_criteria_enable(enable);
        }
        // match_criteria starts at byte 0x40 of the input.
        input[0x40 + byte] = 0xff;
        refused(
            h.exec(&input, 16),
            CmdStatus::BadParameter,
            Syndrome::BadSteeringParams,
        );
    }
}

/// An MPLS frame: Ethernet with ethertype 0x8847, the label stack entry of `label` (exp 0,
/// bottom of stack, TTL 64), then zeros to 64 bytes.
fn mpls_frame(label: u32) -> Vec<u8> {
    let mut f = frame_from(SMAC);
    f.truncate(12);
    f.extend_from_slice(&0x8847u16.to_be_bytes());
    f.extend_from_slice(&(label << 12 | 1 << 8 | 64).to_be_bytes());
    f.resize(64, 0);
    f
}

/// The transmit root table with one entry dropping frames whose first MPLS label is `label`
/// (`misc_parameters_2.outer_first_mpls`, label bits only), as mlx5_ib's `parse_flow_attr`
/// writes an `IB_FLOW_SPEC_MPLS` rule.
fn drop_mpls_label(p: &mut Plug, label: u32) {
    let h = &mut p.h;
    let root = create_table_of(h, FLOW_TABLE_TYPE_NIC_TX, 0, 2, None).unwrap();
    let at = (FLOW_TABLE_TYPE_NIC_TX, root, 0);
    let group = group_matching(h, at, flow::MATCH_MISC_PARAMETERS_2, |c| {
        c.misc_parameters_2_mut().set_outer_first_mpls(0xffff_f000);
    })
    .unwrap();
    entry_matching(h, at, group, flow::FLOW_CONTEXT_ACTION_DROP, |v| {
        v.misc_parameters_2_mut().set_outer_first_mpls(label << 12);
    })
    .unwrap();
    set_root_of(h, FLOW_TABLE_TYPE_NIC_TX, root).unwrap();
}

#[test]
fn mpls_fields_are_offered_both_ways_and_over_tunnels_not() {
    let mut p = firmware_only();
    let page = p.h.query_cap(cap_type::FLOW_TABLE, true);
    let caps = FlowTableNicCap::new(&page[0x10..]).unwrap();
    for props in [
        caps.flow_table_properties_nic_receive(),
        caps.flow_table_properties_nic_transmit(),
    ] {
        let fields = props.ft_field_support();
        // Label, exp, bottom of stack and TTL (mlx5_ib's check_mpls_supp_fields).
        assert_eq!(fields.outer_first_mpls(), 0xf);
        assert_eq!(fields.inner_first_mpls(), 0xf);
    }
}

#[test]
fn a_firmware_entry_matches_the_first_mpls_label() {
    let mut p = firmware_only();
    drop_mpls_label(&mut p, 100);
    assert_eq!(p.send(&mpls_frame(100)), None, "label 100 is dropped");
    let other = mpls_frame(101);
    assert_eq!(p.send(&other), Some(other.clone()), "label 101 passes");
    let ip = frame_from(SMAC);
    assert_eq!(p.send(&ip), Some(ip.clone()), "a frame without MPLS passes");
}

#[test]
fn a_register_set_upstream_and_the_mpls_label_are_matched_together() {
    // The registers a modify-header context writes leave the frame's MPLS entry in the
    // match words: the next table matches both.
    let mut p = firmware_only();
    let h = &mut p.h;
    let next = create_table_of(h, FLOW_TABLE_TYPE_NIC_TX, 1, 2, None).unwrap();
    let at = (FLOW_TABLE_TYPE_NIC_TX, next, 0);
    let group = group_matching(h, at, flow::MATCH_MISC_PARAMETERS_2, |c| {
        c.misc_parameters_2_mut()
            .set_outer_first_mpls(0xffff_f000)
            .set_metadata_reg_c_0(0xffff_ffff);
    })
    .unwrap();
    entry_matching(h, at, group, flow::FLOW_CONTEXT_ACTION_DROP, |v| {
        v.misc_parameters_2_mut()
            .set_outer_first_mpls(200 << 12)
            .set_metadata_reg_c_0(0x77);
    })
    .unwrap();
    mark_and_forward(h, 0x77, next);
    assert_eq!(p.send(&mpls_frame(200)), None, "marked, label 200: dropped");
    let other = mpls_frame(201);
    assert_eq!(
        p.send(&other),
        Some(other.clone()),
        "marked, label 201: passes"
    );
}

/// A TCP frame from [`SMAC`] with sequence number `seq` (the UDP test frame with protocol 6
/// and a 20-byte TCP header, ACK set).
fn tcp_frame(seq: u32) -> Vec<u8> {
    let mut f = frame_from(SMAC);
    f[23] = 6;
    f[38..42].copy_from_slice(&seq.to_be_bytes());
    f[42..46].copy_from_slice(&0x5000u32.to_be_bytes());
    f[46] = 5 << 4;
    f[47] = 0x10;
    f
}

/// An ICMP frame from [`SMAC`]: type `icmp_type`, code 0, identifier 0x1234, sequence 1.
fn icmp_frame(icmp_type: u8) -> Vec<u8> {
    let mut f = frame_from(SMAC);
    f[23] = 1;
    f[34..42].copy_from_slice(&[icmp_type, 0, 0, 0, 0x12, 0x34, 0, 1]);
    f
}

/// The transmit root table with one entry dropping what `value` matches under `criteria`, in
/// `misc_parameters_3`.
fn drop_on_misc3(
    p: &mut Plug,
    criteria: impl FnOnce(&mut flow::FteMatchSetMisc3<&mut [u8]>),
    value: impl FnOnce(&mut flow::FteMatchSetMisc3<&mut [u8]>),
) {
    let h = &mut p.h;
    let root = create_table_of(h, FLOW_TABLE_TYPE_NIC_TX, 0, 2, None).unwrap();
    let at = (FLOW_TABLE_TYPE_NIC_TX, root, 0);
    let group = group_matching(h, at, flow::MATCH_MISC_PARAMETERS_3, |c| {
        criteria(&mut c.misc_parameters_3_mut())
    })
    .unwrap();
    entry_matching(h, at, group, flow::FLOW_CONTEXT_ACTION_DROP, |v| {
        value(&mut v.misc_parameters_3_mut())
    })
    .unwrap();
    set_root_of(h, FLOW_TABLE_TYPE_NIC_TX, root).unwrap();
}

#[test]
fn a_firmware_entry_matches_the_tcp_sequence_number() {
    let mut p = firmware_only();
    drop_on_misc3(
        &mut p,
        |c| {
            c.set_outer_tcp_seq_num(0xffff_ffff);
        },
        |v| {
            v.set_outer_tcp_seq_num(0x1000);
        },
    );
    assert_eq!(
        p.send(&tcp_frame(0x1000)),
        None,
        "sequence 0x1000 is dropped"
    );
    let other = tcp_frame(0x1001);
    assert_eq!(p.send(&other), Some(other.clone()), "0x1001 passes");
}

#[test]
fn a_firmware_entry_matches_the_icmp_type_and_header_data() {
    let mut p = firmware_only();
    drop_on_misc3(
        &mut p,
        |c| {
            c.set_icmp_type(0xff).set_icmp_header_data(0xffff_0000);
        },
        |v| {
            v.set_icmp_type(8).set_icmp_header_data(0x1234_0000);
        },
    );
    assert_eq!(
        p.send(&icmp_frame(8)),
        None,
        "an echo request from 0x1234 is dropped"
    );
    let reply = icmp_frame(0);
    assert_eq!(p.send(&reply), Some(reply.clone()), "an echo reply passes");
    let udp = frame_from(SMAC);
    assert_eq!(p.send(&udp), Some(udp.clone()), "UDP passes");
}
