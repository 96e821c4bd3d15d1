//! Software steering on NIC receive, as rdma-core's `mlx5dv_dr` drives it on a ConnectX-6 Dx
//! (steering entry format 1): the capabilities `dr_domain_caps_init` reads; the entries written
//! into SW ICM by dr_send.c's self-connected ring (RDMA WRITE, then READ); a software-owned
//! table created as `dr_devx_create_flow_table` creates it (`sw_owner`, level
//! `max_ft_level - 1`, `sw_owner_icm_root_0` its anchor); a firmware table's entry forwarding
//! to it, as the root rule of a DR "go to table" action does; and frames from the wire walking
//! the entries to the TIR whose `icm_address` CREATE_TIR returned (mlx5_ib's
//! `create_raw_packet_qp` hands it to libmlx5 as `tir_icm_addr`), to the drop address, or to a
//! counted error.

use cxdirect_emu::testkit::dr::{domain, dr_caps};
use cxdirect_emu::testkit::dr_receive::{
    arrive_at, create_sw_table, flow_tag, forward_root_to, frame_from, plugged, query_root,
    receiver, smac_table, OTHER_SMAC, SMAC,
};
use cxdirect_emu::testkit::flow_tables::{
    alloc_counter, catch_all, create_table, query_counter, set_root,
};
use cxdirect_emu::testkit::ste as tb;
use cxdirect_emu::testkit::sw_icm::{create, ranges};
use cxdirect_emu::testkit::{refused, Host};
use cxdirect_emu::Syndrome;
use cxdirect_hw::cmd::{CmdStatus, Opcode};
use cxdirect_hw::flow;

#[test]
fn without_sw_steering_nothing_is_offered_and_sw_owner_tables_are_refused() {
    let mut h = plugged(false);
    let caps = dr_caps(&mut h);
    assert!(!caps.rx_sw_owner_v2);
    assert_eq!(caps.rx_drop, 0);
    refused(
        create_sw_table(&mut h, 1, 0x10_0000_0000),
        CmdStatus::BadParameter,
        Syndrome::BadSteeringParams,
    );
}

#[test]
fn dr_reads_a_connectx_6_dx_receive_domain() {
    let mut h = plugged(true);
    let caps = dr_caps(&mut h);
    // dr_domain_caps_init: sw_owner_v2 with a format up to ConnectX-8's; STEv1 for 1.
    assert_eq!(caps.format, 1);
    assert!(caps.rx_sw_owner_v2);
    assert!(
        caps.tx_sw_owner_v2,
        "transmit tables are software-owned too"
    );
    assert!(caps.tx_allow != caps.tx_drop && caps.tx_allow % 64 == 0 && caps.tx_allow < 1 << 40);
    assert!(caps.max_ft_level > 1);
    assert_ne!(caps.rx_drop, 0);
    assert!(caps.rx_drop < 1 << 40, "entries keep 40 address bits");
    assert_eq!(caps.rx_drop % 64, 0);
    // The TIR's address is a distinct whole entry below 2^40 too.
    let r = receiver(&mut h);
    assert_ne!(r.tir_icm, 0);
    assert_ne!(r.tir_icm, caps.rx_drop);
    assert!(r.tir_icm < 1 << 40 && r.tir_icm % 64 == 0);
    assert_ne!(receiver(&mut h).tir_icm, r.tir_icm);
}

#[test]
fn frames_walk_entries_written_by_rdma_write_to_the_tir_or_the_drop_address() {
    let mut h = plugged(true);
    let mut dr = domain(&mut h);
    let (caps, base) = (dr.caps, dr.base);
    let rx = receiver(&mut h);
    let counter = alloc_counter(&mut h);
    let gvmi = 0;
    dr.write(
        &mut h,
        smac_table(base, gvmi, counter, rx.tir_icm, caps.rx_drop),
    );
    let table = create_sw_table(&mut h, caps.max_ft_level - 1, base).expect("sw_owner table");
    forward_root_to(&mut h, table);

    let mut cq = rx.cq;
    let frames = [frame_from(SMAC), frame_from(OTHER_SMAC), frame_from(SMAC)];
    let got = arrive_at(&mut h, &mut cq, &frames);
    assert_eq!(
        got.cqes.len(),
        2,
        "the two frames from the rule's smac reach the TIR"
    );
    for cqe in &got.cqes {
        assert_eq!(flow_tag(cqe), 0x77, "the rule's FLOW_TAG action");
    }
    assert_eq!(got.steer_drops, 1, "the other smac missed to drop");
    assert_eq!(got.sw_steering_errors, 0);
    let (packets, octets) = query_counter(&mut h, counter);
    assert_eq!(packets, 2, "the rule's counter_id counts its hits");
    assert_eq!(octets, 2 * frame_from(SMAC).len() as u64);
    assert_ne!(rx.tirn, 0);
}

#[test]
fn a_walk_into_unwritten_icm_drops_and_counts_an_error() {
    let mut h = plugged(true);
    let caps = dr_caps(&mut h);
    let (base, _) = ranges(&mut h).steering;
    create(&mut h, 0, base, 20).expect("SW_ICM object");
    let rx = receiver(&mut h);
    // Unwritten ICM reads as zeros: lookup type 0, which no builder writes.
    let table = create_sw_table(&mut h, caps.max_ft_level - 1, base + 0x4000).expect("table");
    forward_root_to(&mut h, table);
    let before = h.dev.counters();
    h.arrive(&[frame_from(SMAC)]);
    let mut cq = rx.cq;
    assert!(h.poll_cq(&mut cq).is_none());
    let after = h.dev.counters();
    assert_eq!(
        after.rx_sw_steering_errors - before.rx_sw_steering_errors,
        1
    );
    assert_eq!(after.rx_steer_drops - before.rx_steer_drops, 1);
}

#[test]
fn sw_owner_tables_need_an_aligned_root_and_take_no_groups() {
    let mut h = plugged(true);
    let level = dr_caps(&mut h).max_ft_level - 1;
    for root in [0, 0x10_0000_0020] {
        refused(
            create_sw_table(&mut h, level, root),
            CmdStatus::BadParameter,
            Syndrome::BadSteeringParams,
        );
    }
    let table = create_sw_table(&mut h, level, 0x10_0000_0000).expect("table");
    let mut input = Host::input(Opcode::CreateFlowGroup, 0, 0x400);
    flow::CreateFlowGroupIn::new(&mut input[..])
        .expect("layout")
        .set_table_type(flow::FLOW_TABLE_TYPE_NIC_RX)
        .set_table_id(table)
        .set_start_flow_index(0)
        .set_end_flow_index(0);
    refused(
        h.exec(&input, 16),
        CmdStatus::BadParameter,
        Syndrome::BadSteeringParams,
    );
}

#[test]
fn a_firmware_entry_s_flow_tag_is_in_the_receive_cqe() {
    // mlx5_ib's `ibv_create_flow` with a tag action and test_root_tbl_qp_tag_rule: the entry's
    // `flow_tag`, not the RQ number, in sop_drop_qpn.
    let mut h = plugged(false);
    let rx = receiver(&mut h);
    let root = create_table(&mut h, 0, 2, None).expect("CREATE_FLOW_TABLE");
    catch_all(
        &mut h,
        root,
        flow::FLOW_DESTINATION_TYPE_TIR,
        rx.tirn,
        0x12_3456,
    );
    set_root(&mut h, root);
    h.arrive(&[frame_from(SMAC)]);
    let mut cq = rx.cq;
    let cqe = h.poll_cq(&mut cq).expect("received");
    assert_eq!(flow_tag(&cqe), 0x12_3456);
}

#[test]
fn an_entry_may_hand_frames_on_to_a_firmware_table_at_the_address_query_flow_table_gives() {
    // rdma-core's destination arrays and root-table actions: a firmware table built through
    // DEVX (dr_devx_create_always_hit_ft), its ICM address read back by QUERY_FLOW_TABLE, and
    // a rule entry hitting that address.
    let mut h = plugged(true);
    let mut dr = domain(&mut h);
    let (caps, base) = (dr.caps, dr.base);
    let rx = receiver(&mut h);
    let always_hit = create_table(&mut h, caps.max_ft_level - 1, 2, None).expect("FW table");
    catch_all(
        &mut h,
        always_hit,
        flow::FLOW_DESTINATION_TYPE_TIR,
        rx.tirn,
        0x55,
    );
    let fw_icm = query_root(&mut h, always_hit).expect("QUERY_FLOW_TABLE");
    assert!(fw_icm != 0 && fw_icm < 1 << 40 && fw_icm % 64 == 0);
    assert_ne!(fw_icm, rx.tir_icm);
    let counter = alloc_counter(&mut h);
    dr.write(&mut h, smac_table(base, 0, counter, fw_icm, caps.rx_drop));
    let table = create_sw_table(&mut h, caps.max_ft_level - 1, base).expect("sw_owner table");
    assert_eq!(
        query_root(&mut h, table).ok(),
        Some(base),
        "a software-owned table's own root"
    );
    forward_root_to(&mut h, table);
    h.arrive(&[frame_from(SMAC), frame_from(OTHER_SMAC)]);
    let mut cq = rx.cq;
    let got: Vec<Vec<u8>> = std::iter::from_fn(|| h.poll_cq(&mut cq)).collect();
    assert_eq!(got.len(), 1, "the rule's frame, through the firmware table");
    assert_eq!(flow_tag(&got[0]), 0x55, "the last entry's tag");
    assert_eq!(query_counter(&mut h, counter).0, 1);
}

#[test]
fn sync_steering_is_taken_with_software_steering_only() {
    let input = Host::input(Opcode::SyncSteering, 0, 0x10);
    let mut h = plugged(true);
    h.exec(&input, 0x10).expect("SYNC_STEERING");
    let mut h = plugged(false);
    refused(
        h.exec(&input, 0x10),
        CmdStatus::BadOpcode,
        Syndrome::UnknownOpcode,
    );
}

#[test]
fn a_destination_array_replicates_the_frame_to_each_tir_and_into_the_next_table() {
    // rdma-core's test_dest_array: a firmware table (dr_devx_create_always_hit_ft) whose one
    // entry lists QP TIRs and a software-owned table; every destination gets the frame.
    let mut h = plugged(true);
    let mut dr = domain(&mut h);
    let (caps, base) = (dr.caps, dr.base);
    let (a, b, last) = (receiver(&mut h), receiver(&mut h), receiver(&mut h));
    let counter = alloc_counter(&mut h);
    dr.write(
        &mut h,
        smac_table(base, 0, counter, last.tir_icm, caps.rx_drop),
    );
    let next = create_sw_table(&mut h, caps.max_ft_level - 1, base).expect("sw_owner table");
    let array = create_table(&mut h, caps.max_ft_level - 2, 2, None).expect("FW table");
    let group = cxdirect_emu::testkit::flow_tables::create_group(&mut h, array, 0, 0, false);
    let mut input = Host::input(Opcode::SetFlowTableEntry, 0, 0x340 + 3 * 8);
    {
        let mut cmd = flow::SetFteIn::new(&mut input[..]).expect("layout");
        cmd.set_table_type(flow::FLOW_TABLE_TYPE_NIC_RX)
            .set_table_id(array)
            .set_flow_index(0);
        let mut ctx = cmd.flow_context_all_mut();
        ctx.set_group_id(group)
            .set_action(flow::FLOW_CONTEXT_ACTION_FWD_DEST)
            .set_destination_list_size(3);
        let dests = [
            (flow::FLOW_DESTINATION_TYPE_TIR, a.tirn),
            (flow::FLOW_DESTINATION_TYPE_TIR, b.tirn),
            (flow::FLOW_DESTINATION_TYPE_FLOW_TABLE, next),
        ];
        for (i, (kind, id)) in dests.into_iter().enumerate() {
            ctx.set_destination(i, flow::dest_format_entry(kind, id))
                .expect("room");
        }
    }
    h.exec(&input, 16).expect("SET_FLOW_TABLE_ENTRY");
    let root = create_table(&mut h, 0, 2, None).expect("root");
    catch_all(
        &mut h,
        root,
        flow::FLOW_DESTINATION_TYPE_FLOW_TABLE,
        array,
        0,
    );
    set_root(&mut h, root);
    h.arrive(&[frame_from(SMAC), frame_from(OTHER_SMAC)]);
    for (name, r, expected) in [("a", a, 2), ("b", b, 2), ("the table's", last, 1)] {
        let mut cq = r.cq;
        let got = std::iter::from_fn(|| h.poll_cq(&mut cq)).count();
        assert_eq!(got, expected, "{name} TIR");
    }
}

#[test]
fn a_rule_s_vlan_pop_delivers_the_frame_without_its_tag() {
    // rdma-core's test_pop_vlan: the rule's last entry pops one VLAN tag (REMOVE_BY_SIZE from
    // the first VLAN, 2 words, and a re-parse: dr_ste_v1_set_pop_vlan) before the QP.
    let mut h = plugged(true);
    let mut dr = domain(&mut h);
    let (caps, base) = (dr.caps, dr.base);
    let rx = receiver(&mut h);
    let counter = alloc_counter(&mut h);
    let mut entries = smac_table(base, 0, counter, rx.tir_icm, caps.rx_drop);
    entries[1].1.action(4, &tb::pop_vlan(1)).reparse();
    dr.write(&mut h, entries);
    let table = create_sw_table(&mut h, caps.max_ft_level - 1, base).expect("sw_owner table");
    forward_root_to(&mut h, table);
    let plain = frame_from(SMAC);
    let mut tagged = plain[..12].to_vec();
    tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x07]);
    tagged.extend_from_slice(&plain[12..]);
    h.arrive(&[tagged]);
    let mut cq = rx.cq;
    let cqe = h.poll_cq(&mut cq).expect("received");
    let len = u32::from_be_bytes(cqe[0x2c..0x30].try_into().expect("4 bytes"));
    assert_eq!(len as usize, plain.len(), "4 bytes fewer: the tag is gone");
    let counters = h.dev.counters();
    assert_eq!(counters.rx_sw_steering_errors, 0);
}
