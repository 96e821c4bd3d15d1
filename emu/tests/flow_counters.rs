//! Flow counters on NIC receive entries: ALLOC_FLOW_COUNTER, DEALLOC_FLOW_COUNTER and
//! QUERY_FLOW_COUNTER as Linux 6.12's mlx5_core sends them (`mlx5_cmd_fc_alloc`,
//! `mlx5_cmd_fc_free`, `mlx5_cmd_fc_query`, `mlx5_cmd_fc_bulk_query`), rdma-core's DEVX test
//! allocates one (tests/test_mlx5_dr.py `create_counter`: bulk 0) and reads it back
//! (`query_counter_packets`), and `mlx5_cmd_set_fte` lists an entry's counters after its
//! destinations with `FLOW_CONTEXT_ACTION_COUNT` and `flow_counter_list_size`.

use cxdirect_emu::testkit::flow_tables::{create_group, create_table, delete_fte, set_root};
use cxdirect_emu::testkit::{udp_frame, CmdFail, Cq, Host};
use cxdirect_emu::{Device, EmuConfig, Syndrome};
use cxdirect_hw::caps::{CmdHcaCap, FlowTableNicCap};
use cxdirect_hw::cmd::{CmdStatus, Opcode};
use cxdirect_hw::flow;
use cxdirect_hw::hca::cap_type;
use cxdirect_hw::tir::{CreateTirIn, CreateTirOut};
use cxdirect_hw::vport::TrafficCounter;

const MEM: usize = 4 << 20;
const MAC_B: [u8; 6] = [0x02, 0xbb, 0, 0, 0, 2];
const MAC_C: [u8; 6] = [0x02, 0xcc, 0, 0, 0, 3];
const FRAME_PAYLOAD: usize = 100;

fn frame_to(dst: [u8; 6], seed: u8) -> Vec<u8> {
    let mut f = udp_frame(FRAME_PAYLOAD, seed);
    f[..6].copy_from_slice(&dst);
    f
}

fn mac(m: [u8; 6]) -> u64 {
    m.iter().fold(0u64, |acc, &b| (acc << 8) | u64::from(b))
}

fn bad(status: CmdStatus, syndrome: Syndrome) -> Result<(), CmdFail> {
    Err(CmdFail::status(status, syndrome))
}

/// `mlx5_cmd_fc_alloc` (bulk 0) or, with `bulk`, `mlx5_cmd_fc_bulk_alloc`'s bitmask.
fn alloc_counter(h: &mut Host, bulk: u8) -> Result<u32, CmdFail> {
    let mut input = Host::input(
        Opcode::AllocFlowCounter,
        0,
        flow::AllocFlowCounterIn::<&[u8]>::SIZE,
    );
    flow::AllocFlowCounterIn::new(&mut input[..])
        .unwrap()
        .set_flow_counter_bulk(bulk);
    let out = h.exec(&input, flow::AllocFlowCounterOut::<&[u8]>::SIZE)?;
    Ok(flow::AllocFlowCounterOut::new(&out[..])
        .unwrap()
        .flow_counter_id())
}

fn dealloc_counter(h: &mut Host, id: u32) -> Result<(), CmdFail> {
    let mut input = Host::input(Opcode::DeallocFlowCounter, 0, 0x10);
    flow::DeallocFlowCounterIn::new(&mut input[..])
        .unwrap()
        .set_flow_counter_id(id);
    h.exec(&input, 0x10).map(|_| ())
}

/// QUERY_FLOW_COUNTER of `n` counters from `id` (`num_of_counters` 0 when `n` is 1, as
/// `mlx5_cmd_fc_query` sends it): (packets, octets) of each.
fn query(h: &mut Host, id: u32, n: u16, clear: bool) -> Result<Vec<(u64, u64)>, CmdFail> {
    let mut input = Host::input(Opcode::QueryFlowCounter, 0, 0x20);
    flow::QueryFlowCounterIn::new(&mut input[..])
        .unwrap()
        .set_flow_counter_id(id)
        .set_num_of_counters(if n == 1 { 0 } else { n })
        .set_clear(clear);
    let out = h.exec(&input, 0x10 + 0x10 * usize::from(n))?;
    Ok((0..usize::from(n))
        .map(|i| {
            let at = flow::QUERY_FLOW_COUNTER_STATISTICS_BYTE + 0x10 * i;
            let c = TrafficCounter::new(&out[at..at + 0x10]).unwrap();
            (c.packets(), c.octets())
        })
        .collect())
}

/// A receive table made root: one group masking the destination MAC over entries 0..=3.
struct Steering {
    table: u32,
    group: u32,
    tirn: u32,
    cq: Cq,
}

fn steering(h: &mut Host) -> Steering {
    let cq = h.create_cq(6);
    let mut rq = h.create_rq(cq.cqn, 6, None);
    let lkey = h.create_mkey(false, true);
    for _ in 0..32 {
        let buf = h.alloc(2048, 64);
        h.post_recv(&mut rq, buf, 2048, lkey);
    }
    let mut input = Host::input(Opcode::CreateTir, 0, 0x110);
    CreateTirIn::new(&mut input[..])
        .unwrap()
        .ctx_mut()
        .set_inline_rqn(rq.rqn)
        .set_transport_domain(h.td);
    let out = h.exec(&input, 16).expect("CREATE_TIR");
    let tirn = CreateTirOut::new(&out[..]).unwrap().tirn();
    let table = create_table(h, 0, 2, None).expect("CREATE_FLOW_TABLE");
    let group = create_group(h, table, 0, 3, true);
    set_root(h, table);
    Steering {
        table,
        group,
        tirn,
        cq,
    }
}

/// `mlx5_cmd_set_fte` for entry `index` matching `dmac`: `action`, forwarding to the TIR when
/// it forwards, then `counters` (with `list_size` as the list's length, normally theirs).
#[allow(clippy::too_many_arguments)]
fn set_fte(
    h: &mut Host,
    s: &Steering,
    op_mod: u16,
    mask: u8,
    index: u32,
    dmac: [u8; 6],
    action: u16,
    counters: &[u32],
    list_size: u32,
) -> Result<(), CmdFail> {
    let forwards = action & flow::FLOW_CONTEXT_ACTION_FWD_DEST != 0;
    let dests = usize::from(forwards);
    let mut input = Host::input(
        Opcode::SetFlowTableEntry,
        op_mod,
        0x340 + 8 * (dests + counters.len()),
    );
    {
        let mut cmd = flow::SetFteIn::new(&mut input[..]).unwrap();
        cmd.set_table_type(flow::FLOW_TABLE_TYPE_NIC_RX)
            .set_table_id(s.table)
            .set_flow_index(index)
            .set_modify_enable_mask(mask);
        let mut ctx = cmd.flow_context_all_mut();
        ctx.set_group_id(s.group)
            .set_action(action)
            .set_destination_list_size(dests as u32)
            .set_flow_counter_list_size(list_size);
        ctx.match_value_mut()
            .outer_headers_mut()
            .set_dmac(mac(dmac));
        if forwards {
            ctx.set_destination(
                0,
                flow::dest_format_entry(flow::FLOW_DESTINATION_TYPE_TIR, s.tirn),
            )
            .unwrap();
        }
        for (i, &id) in counters.iter().enumerate() {
            ctx.set_destination(dests + i, u64::from(id) << 32).unwrap();
        }
    }
    h.exec(&input, 16).map(|_| ())
}

fn received(h: &Host, s: &mut Steering) -> usize {
    let mut n = 0;
    while h.poll_cq(&mut s.cq).is_some() {
        n += 1;
    }
    n
}

fn host() -> Host {
    let mut h = Host::new(
        Device::loopback(EmuConfig {
            mac: MAC_B,
            ..EmuConfig::default()
        }),
        MEM,
    );
    h.bring_up();
    h
}

const FWD_COUNT: u16 = flow::FLOW_CONTEXT_ACTION_FWD_DEST | flow::FLOW_CONTEXT_ACTION_COUNT;

#[test]
fn the_caps_offer_counters_on_receive_entries() {
    let mut h = host();
    let out = h.query_cap(cap_type::FLOW_TABLE, true);
    let rx = FlowTableNicCap::new(&out[0x10..]).unwrap();
    let rx = rx.flow_table_properties_nic_receive();
    assert!(rx.flow_counter());
    assert!(
        rx.log_max_flow_counter() >= 1,
        "more than one counter per entry"
    );
    let out = h.query_cap(cap_type::GENERAL_DEVICE, true);
    let g = CmdHcaCap::new(&out[0x10..0x110]).unwrap();
    let max = u32::from(g.max_flow_counter_15_0()) | u32::from(g.max_flow_counter_31_16()) << 16;
    assert!(max > 0, "max_flow_counter");
}

#[test]
fn an_entry_counts_the_frames_it_matches_and_a_query_reads_and_clears_them() {
    let mut h = host();
    let mut s = steering(&mut h);
    let counter = alloc_counter(&mut h, 0).expect("ALLOC_FLOW_COUNTER");
    let dropped = alloc_counter(&mut h, 0).expect("ALLOC_FLOW_COUNTER");
    set_fte(&mut h, &s, 0, 0, 0, MAC_B, FWD_COUNT, &[counter], 1).expect("counted forward");
    let drop_count = flow::FLOW_CONTEXT_ACTION_DROP | flow::FLOW_CONTEXT_ACTION_COUNT;
    set_fte(&mut h, &s, 0, 0, 1, MAC_C, drop_count, &[dropped], 1).expect("counted drop");
    assert_eq!(query(&mut h, counter, 1, false), Ok(vec![(0, 0)]));
    let frames: Vec<Vec<u8>> = (0..3).map(|i| frame_to(MAC_B, i)).collect();
    let len = frames[0].len() as u64;
    h.arrive(&frames);
    h.arrive(&[frame_to(MAC_C, 9), frame_to(MAC_C, 10)]);
    assert_eq!(received(&h, &mut s), 3, "the forwarded frames arrive");
    assert_eq!(query(&mut h, counter, 1, false), Ok(vec![(3, 3 * len)]));
    assert_eq!(query(&mut h, dropped, 1, false), Ok(vec![(2, 2 * len)]));
    // A bulk query reads consecutive counters; `clear` zeroes what it read.
    assert_eq!(
        query(&mut h, counter, 2, true),
        Ok(vec![(3, 3 * len), (2, 2 * len)])
    );
    assert_eq!(query(&mut h, counter, 2, false), Ok(vec![(0, 0), (0, 0)]));
    h.arrive(&[frame_to(MAC_B, 11)]);
    assert_eq!(query(&mut h, counter, 1, false), Ok(vec![(1, len)]));
}

#[test]
fn a_counter_joins_an_entry_in_place_and_goes_only_when_no_entry_counts_in_it() {
    let mut h = host();
    let mut s = steering(&mut h);
    let counter = alloc_counter(&mut h, 0).expect("ALLOC_FLOW_COUNTER");
    set_fte(
        &mut h,
        &s,
        0,
        0,
        0,
        MAC_B,
        flow::FLOW_CONTEXT_ACTION_FWD_DEST,
        &[],
        0,
    )
    .expect("plain forward");
    h.arrive(&[frame_to(MAC_B, 1)]);
    // fs_core adds a counter to a live entry by SET_FTE op_mod 1 with the action and the
    // counter list selected (`mlx5_cmd_update_fte`).
    let mask = flow::SET_FTE_MODIFY_ACTION | flow::SET_FTE_MODIFY_FLOW_COUNTERS;
    set_fte(&mut h, &s, 1, mask, 0, MAC_B, FWD_COUNT, &[counter], 1).expect("counter added");
    h.arrive(&[frame_to(MAC_B, 2), frame_to(MAC_B, 3)]);
    assert_eq!(received(&h, &mut s), 3);
    assert_eq!(query(&mut h, counter, 1, false).unwrap()[0].0, 2);
    assert_eq!(
        dealloc_counter(&mut h, counter),
        bad(CmdStatus::BadResourceState, Syndrome::ObjectInUse),
        "a counter an entry counts in"
    );
    delete_fte(&mut h, s.table, 0);
    dealloc_counter(&mut h, counter).expect("DEALLOC_FLOW_COUNTER");
    assert_eq!(
        query(&mut h, counter, 1, false).map(|_| ()),
        bad(CmdStatus::BadResource, Syndrome::NoSuchObject)
    );
    assert_eq!(
        dealloc_counter(&mut h, counter),
        bad(CmdStatus::BadResource, Syndrome::NoSuchObject)
    );
}

#[test]
fn counter_lists_that_do_not_fit_the_action_or_name_nothing_are_refused() {
    let mut h = host();
    let s = steering(&mut h);
    let counter = alloc_counter(&mut h, 0).expect("ALLOC_FLOW_COUNTER");
    let steer = bad(CmdStatus::BadParameter, Syndrome::BadSteeringParams);
    // Counting with no counter, counters without counting, counting alone.
    assert_eq!(
        set_fte(&mut h, &s, 0, 0, 0, MAC_B, FWD_COUNT, &[], 0),
        steer
    );
    let fwd = flow::FLOW_CONTEXT_ACTION_FWD_DEST;
    assert_eq!(
        set_fte(&mut h, &s, 0, 0, 0, MAC_B, fwd, &[counter], 1),
        steer
    );
    let count = flow::FLOW_CONTEXT_ACTION_COUNT;
    assert_eq!(
        set_fte(&mut h, &s, 0, 0, 0, MAC_B, count, &[counter], 1),
        steer
    );
    // A counter no one allocated; a list longer than the input.
    assert_eq!(
        set_fte(&mut h, &s, 0, 0, 0, MAC_B, FWD_COUNT, &[counter + 100], 1),
        bad(CmdStatus::BadResource, Syndrome::NoSuchObject)
    );
    assert_eq!(
        set_fte(&mut h, &s, 0, 0, 0, MAC_B, FWD_COUNT, &[counter], 1 << 20),
        steer
    );
    // Bulks are not offered (`flow_counter_bulk_alloc` 0).
    assert_eq!(alloc_counter(&mut h, 1).map(|_| ()), steer);
    // A query whose output cannot hold what it asks for.
    let mut input = Host::input(Opcode::QueryFlowCounter, 0, 0x20);
    flow::QueryFlowCounterIn::new(&mut input[..])
        .unwrap()
        .set_flow_counter_id(counter)
        .set_num_of_counters(4);
    assert_eq!(
        h.exec(&input, 0x20).map(|_| ()),
        bad(CmdStatus::BadOutputLength, Syndrome::OutputTooShort)
    );
}
