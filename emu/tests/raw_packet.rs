//! Raw packet QPs (`IBV_QPT_RAW_PACKET`) as Linux's mlx5_ib builds and drives them: no QP
//! object in the device but a TIS, an SQ, an RQ and a direct TIR made from the QP's attributes
//! (`create_raw_packet_qp` and its `_tis`, `_sq`, `_rq`, `_tir` parts in
//! `drivers/infiniband/hw/mlx5/qp.c`), moved with the QP by MODIFY_SQ and MODIFY_RQ
//! (`modify_raw_packet_qp`, `modify_raw_packet_qp_sq`, `modify_raw_packet_qp_rq`), fed by a
//! flow rule in the NIC receive tables (`ibv_create_flow`, `drivers/infiniband/hw/mlx5/fs.c`),
//! and sending the WQEs rdma-core's libmlx5 builds (`_mlx5_post_send`, its
//! `IBV_QPT_RAW_PACKET` branch with `copy_eth_inline_headers`).

use cxdirect_emu::testkit::{udp_frame, Cq, Host, Rq, Sq};
use cxdirect_emu::{Device, EmuConfig};
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::counters::AllocQCounterOut;
use cxdirect_hw::flow;
use cxdirect_hw::tir::{CreateTirIn, CreateTirOut, CreateTisIn, CreateTisOut};
use cxdirect_hw::wq::{
    CreateRqIn, CreateRqOut, CreateSqIn, CreateSqOut, ModifyRqIn, ModifySqIn, QueryRqIn,
    QueryRqOut, QuerySqIn, QuerySqOut, MODIFY_RQ_BITMASK_RQ_COUNTER_SET_ID,
};
use cxdirect_hw::wqe::{CtrlSeg, DataSeg, EthSeg};

const MEM: usize = 4 << 20;
const MAC_A: [u8; 6] = [0x02, 0xaa, 0, 0, 0, 1];
const MAC_B: [u8; 6] = [0x02, 0xbb, 0, 0, 0, 2];
/// The user index libmlx5 gives the QP (`mlx5_store_uidx`), carried into the SQ and RQ.
const UIDX: u32 = 0x00_0042;

/// Queue states (`MLX5_SQC_STATE_*`, `MLX5_RQC_STATE_*`).
const RST: u8 = 0;
const RDY: u8 = 1;
const ERR: u8 = 3;

/// A raw packet QP's device objects.
struct RawQp {
    tisn: u32,
    tirn: u32,
    sq: Sq,
    rq: Rq,
    sq_state: u8,
    rq_state: u8,
}

fn hosts() -> (Host, Host) {
    let side = |mac| EmuConfig {
        mac,
        ..EmuConfig::default()
    };
    let (da, db) = Device::pair(side(MAC_A), side(MAC_B));
    let (mut a, mut b) = (Host::new(da, MEM), Host::new(db, MEM));
    a.bring_up();
    b.bring_up();
    (a, b)
}

/// mlx5_ib's per-port Q counter set (`mlx5_ib_alloc_counters`), which RST2INIT binds the RQ to.
fn q_counter(h: &mut Host) -> u8 {
    let out = h
        .exec(&Host::input(Opcode::AllocQCounter, 0, 16), 16)
        .expect("ALLOC_Q_COUNTER");
    AllocQCounterOut::new(&out[..]).unwrap().counter_set_id()
}

/// `create_raw_packet_qp`: TIS, SQ (`_sq`), RQ (`_rq`), TIR (`_tir`), with the fields Linux
/// sets; SQ and RQ share the QP's doorbell record (receive counter first, send counter after).
fn create_raw_qp(h: &mut Host, cq: &Cq, log_sq: u8, log_rq: u8) -> RawQp {
    let dbr = h.alloc(8, 64);
    // create_raw_packet_qp_tis: the context's transport domain.
    let mut input = Host::input(Opcode::CreateTis, 0, 0xc0);
    CreateTisIn::new(&mut input[..])
        .unwrap()
        .ctx_mut()
        .set_transport_domain(h.td);
    let out = h.exec(&input, 16).expect("CREATE_TIS");
    let tisn = CreateTisOut::new(&out[..]).unwrap().tisn();

    // create_raw_packet_qp_sq: flush_in_error_en, RST, the QP's user index and send CQ, one
    // TIS; the ring in its own buffer (libmlx5's `sq_buf_addr`), 64-byte stride. No
    // multi-packet WQEs: the device reports `multi_pkt_send_wqe` 0.
    let sq_buf = h.alloc(64 << log_sq, 4096);
    let sq_pages = (64u64 << log_sq).div_ceil(4096) as usize;
    let mut input = Host::input(Opcode::CreateSq, 0, 0x110 + 8 * sq_pages);
    let mut cmd = CreateSqIn::new(&mut input[..]).unwrap();
    {
        let mut ctx = cmd.ctx_mut();
        ctx.set_flush_in_error_en(true)
            .set_state(RST)
            .set_user_index(UIDX)
            .set_cqn(cq.cqn)
            .set_tis_lst_sz(1)
            .set_tis_num_0(tisn);
        ctx.wq_mut()
            .set_wq_type(1)
            .set_pd(h.pd)
            .set_uar_page(h.uar)
            .set_dbr_addr(dbr)
            .set_log_wq_stride(6)
            .set_log_wq_sz(log_sq)
            .set_log_wq_pg_sz(0)
            .set_page_offset(0);
    }
    for i in 0..sq_pages {
        cmd.set_pas(i, sq_buf + i as u64 * 4096).unwrap();
    }
    let out = h.exec(&input, 16).expect("CREATE_SQ");
    let sqn = CreateSqOut::new(&out[..]).unwrap().sqn();

    // create_raw_packet_qp_rq: vsd, inline memory, RST, flush_in_error_en, user index and
    // receive CQ; the ring is the QP buffer's (its pas copied), stride from the QP's.
    let rq_buf = h.alloc(16 << log_rq, 4096);
    let rq_pages = (16u64 << log_rq).div_ceil(4096) as usize;
    let mut input = Host::input(Opcode::CreateRq, 0, 0x110 + 8 * rq_pages);
    let mut cmd = CreateRqIn::new(&mut input[..]).unwrap();
    {
        let mut ctx = cmd.ctx_mut();
        ctx.set_vsd(true)
            .set_mem_rq_type(0)
            .set_state(RST)
            .set_flush_in_error_en(true)
            .set_user_index(UIDX)
            .set_cqn(cq.cqn);
        ctx.wq_mut()
            .set_wq_type(1)
            .set_page_offset(0)
            .set_pd(h.pd)
            .set_dbr_addr(dbr)
            .set_log_wq_stride(4)
            .set_log_wq_pg_sz(0)
            .set_log_wq_sz(log_rq);
    }
    for i in 0..rq_pages {
        cmd.set_pas(i, rq_buf + i as u64 * 4096).unwrap();
    }
    let out = h.exec(&input, 16).expect("CREATE_RQ");
    let rqn = CreateRqOut::new(&out[..]).unwrap().rqn();

    // create_raw_packet_qp_tir: direct to the RQ, the context's transport domain, and the
    // self-loopback bits libmlx5 asked for (none here; `dev->is_rep` would allow unicast).
    let mut input = Host::input(Opcode::CreateTir, 0, 0x110);
    CreateTirIn::new(&mut input[..])
        .unwrap()
        .ctx_mut()
        .set_disp_type(0)
        .set_inline_rqn(rqn)
        .set_transport_domain(h.td)
        .set_self_lb_block(0);
    let out = h.exec(&input, 16).expect("CREATE_TIR");
    let tirn = CreateTirOut::new(&out[..]).unwrap().tirn();
    RawQp {
        tisn,
        tirn,
        sq: Sq {
            sqn,
            buf: sq_buf,
            dbr,
            log: log_sq,
            pi: 0,
            bf_toggle: false,
        },
        rq: Rq {
            rqn,
            buf: rq_buf,
            dbr,
            log: log_rq,
            pi: 0,
        },
        sq_state: RST,
        rq_state: RST,
    }
}

/// `modify_raw_packet_qp_sq`: the SQ's current state as mlx5_ib tracks it, and the new one.
fn modify_sq(h: &mut Host, qp: &mut RawQp, to: u8) {
    let mut input = Host::input(Opcode::ModifySq, 0, 0x110);
    let mut m = ModifySqIn::new(&mut input[..]).unwrap();
    m.set_sq_state(qp.sq_state).set_sqn(qp.sq.sqn);
    m.ctx_mut().set_state(to);
    h.exec(&input, 16)
        .unwrap_or_else(|e| panic!("MODIFY_SQ {} -> {to}: {e:?}", qp.sq_state));
    qp.sq_state = to;
}

/// `modify_raw_packet_qp_rq`, binding Q counter set `counter` when given (RST2INIT).
fn modify_rq(h: &mut Host, qp: &mut RawQp, to: u8, counter: Option<u8>) {
    let mut input = Host::input(Opcode::ModifyRq, 0, 0x110);
    let mut m = ModifyRqIn::new(&mut input[..]).unwrap();
    m.set_rq_state(qp.rq_state).set_rqn(qp.rq.rqn);
    m.ctx_mut().set_state(to);
    if let Some(set) = counter {
        m.set_modify_bitmask(MODIFY_RQ_BITMASK_RQ_COUNTER_SET_ID);
        m.ctx_mut().set_counter_set_id(set);
    }
    h.exec(&input, 16)
        .unwrap_or_else(|e| panic!("MODIFY_RQ {} -> {to}: {e:?}", qp.rq_state));
    qp.rq_state = to;
}

/// The queue commands `modify_raw_packet_qp` sends for each QP transition: RST2INIT (RQ to
/// RDY with the port's counter set, SQ RST to RST), INIT2RTR (none), RTR2RTS (SQ to RDY; the
/// RQ is left alone), 2ERR (both to ERR), 2RST (both to RST).
fn rst2init(h: &mut Host, qp: &mut RawQp, counter: u8) {
    modify_rq(h, qp, RDY, Some(counter));
    modify_sq(h, qp, RST);
}

fn rtr2rts(h: &mut Host, qp: &mut RawQp) {
    modify_sq(h, qp, RDY);
}

fn to_err(h: &mut Host, qp: &mut RawQp) {
    modify_rq(h, qp, ERR, None);
    modify_sq(h, qp, ERR);
}

fn to_rst(h: &mut Host, qp: &mut RawQp) {
    modify_rq(h, qp, RST, None);
    modify_sq(h, qp, RST);
}

/// `destroy_raw_packet_qp`: TIR, RQ, then SQ and TIS.
fn destroy(h: &mut Host, qp: RawQp) {
    let destroy = |h: &mut Host, op: Opcode, n: u32| {
        let mut input = Host::input(op, 0, 0x40);
        input[8..12].copy_from_slice(&n.to_be_bytes());
        h.exec(&input, 16)
            .unwrap_or_else(|e| panic!("{op:?}: {e:?}"));
    };
    destroy(h, Opcode::DestroyTir, qp.tirn);
    destroy(h, Opcode::DestroyRq, qp.rq.rqn);
    destroy(h, Opcode::DestroySq, qp.sq.sqn);
    destroy(h, Opcode::DestroyTis, qp.tisn);
}

fn queue_states(h: &mut Host, qp: &RawQp) -> (u8, u8) {
    let mut input = Host::input(Opcode::QuerySq, 0, 16);
    QuerySqIn::new(&mut input[..]).unwrap().set_sqn(qp.sq.sqn);
    let out = h.exec(&input, 0x110).expect("QUERY_SQ");
    let sq = QuerySqOut::new(&out[..]).unwrap().sq_context().state();
    let mut input = Host::input(Opcode::QueryRq, 0, 16);
    QueryRqIn::new(&mut input[..]).unwrap().set_rqn(qp.rq.rqn);
    let out = h.exec(&input, 0x110).expect("QUERY_RQ");
    let rq = QueryRqOut::new(&out[..]).unwrap().rq_context().state();
    (sq, rq)
}

/// What `ibv_create_flow` with one Ethernet spec (destination MAC) becomes through mlx5_ib's
/// fs.c and mlx5_core's fs_core on a port with no other receive tables: an auto-grouped table
/// in the bypass priority, a group masking the destination MAC, an entry forwarding to the
/// QP's TIR with the default flow tag, and the table made root. Returns (table, group).
fn create_flow(h: &mut Host, tirn: u32, dmac: [u8; 6]) -> (u32, u32) {
    let mut input = Host::input(Opcode::CreateFlowTable, 0, 0x40);
    {
        let mut cmd = flow::CreateFlowTableIn::new(&mut input[..]).unwrap();
        cmd.set_table_type(flow::FLOW_TABLE_TYPE_NIC_RX);
        cmd.flow_table_context_mut().set_log_size(16).set_level(0);
    }
    let out = h.exec(&input, 16).expect("CREATE_FLOW_TABLE");
    let table = flow::CreateFlowTableOut::new(&out[..]).unwrap().table_id();
    let mac = dmac
        .iter()
        .fold(0u64, |acc, &byte| (acc << 8) | u64::from(byte));
    let mut input = Host::input(Opcode::CreateFlowGroup, 0, 0x400);
    {
        let mut cmd = flow::CreateFlowGroupIn::new(&mut input[..]).unwrap();
        cmd.set_table_type(flow::FLOW_TABLE_TYPE_NIC_RX)
            .set_table_id(table)
            .set_start_flow_index(0)
            .set_end_flow_index(4095)
            .set_match_criteria_enable(flow::MATCH_OUTER_HEADERS);
        cmd.match_criteria_mut()
            .outer_headers_mut()
            .set_dmac(0xffff_ffff_ffff);
    }
    let out = h.exec(&input, 16).expect("CREATE_FLOW_GROUP");
    let group = flow::CreateFlowGroupOut::new(&out[..]).unwrap().group_id();
    let mut input = Host::input(Opcode::SetFlowTableEntry, 0, 0x340 + 8);
    {
        let mut cmd = flow::SetFteIn::new(&mut input[..]).unwrap();
        cmd.set_table_type(flow::FLOW_TABLE_TYPE_NIC_RX)
            .set_table_id(table)
            .set_flow_index(0);
        let mut ctx = cmd.flow_context_all_mut();
        ctx.set_group_id(group)
            .set_flow_tag(0)
            .set_action(flow::FLOW_CONTEXT_ACTION_FWD_DEST)
            .set_destination_list_size(1);
        ctx.match_value_mut().outer_headers_mut().set_dmac(mac);
        ctx.set_destination(
            0,
            flow::dest_format_entry(flow::FLOW_DESTINATION_TYPE_TIR, tirn),
        )
        .unwrap();
    }
    h.exec(&input, 16).expect("SET_FLOW_TABLE_ENTRY");
    let mut input = Host::input(Opcode::SetFlowTableRoot, 0, 0x40);
    flow::SetFlowTableRootIn::new(&mut input[..])
        .unwrap()
        .set_table_type(flow::FLOW_TABLE_TYPE_NIC_RX)
        .set_table_id(table);
    h.exec(&input, 16).expect("SET_FLOW_TABLE_ROOT");
    (table, group)
}

/// `ibv_destroy_flow`: the entry, the emptied group, then the table (fs_core finds no next
/// table to make root, so it sends no SET_FLOW_TABLE_ROOT).
fn destroy_flow(h: &mut Host, table: u32, group: u32) {
    let mut input = Host::input(Opcode::DeleteFlowTableEntry, 0, 0x40);
    flow::DeleteFteIn::new(&mut input[..])
        .unwrap()
        .set_table_type(flow::FLOW_TABLE_TYPE_NIC_RX)
        .set_table_id(table)
        .set_flow_index(0);
    h.exec(&input, 16).expect("DELETE_FLOW_TABLE_ENTRY");
    let mut input = Host::input(Opcode::DestroyFlowGroup, 0, 0x40);
    flow::DestroyFlowGroupIn::new(&mut input[..])
        .unwrap()
        .set_table_type(flow::FLOW_TABLE_TYPE_NIC_RX)
        .set_table_id(table)
        .set_group_id(group);
    h.exec(&input, 16).expect("DESTROY_FLOW_GROUP");
    let mut input = Host::input(Opcode::DestroyFlowTable, 0, 0x40);
    flow::DestroyFlowTableIn::new(&mut input[..])
        .unwrap()
        .set_table_type(flow::FLOW_TABLE_TYPE_NIC_RX)
        .set_table_id(table);
    h.exec(&input, 16).expect("DESTROY_FLOW_TABLE");
}

/// The WQE libmlx5 builds for a signaled `IBV_WR_SEND` on a raw packet QP when the device
/// requires no inline headers (`eth_min_inline_size` 0, from `wqe_inline_mode` = not
/// required): control segment, an Ethernet segment with no inline bytes, one data segment
/// with the whole frame.
fn libmlx5_send_no_inline(sq: &Sq, frame_iova: u64, len: u32, lkey: u32) -> Vec<u8> {
    let mut wqe = vec![0u8; 64];
    CtrlSeg::new(&mut wqe[..16])
        .unwrap()
        .set_opcode(cxdirect_hw::wqe::opcode::SEND)
        .set_wqe_index(sq.pi)
        .set_qpn_or_sqn(sq.sqn)
        .set_ds(3)
        .set_ce(2);
    EthSeg::new(&mut wqe[16..32]).unwrap().set_inline_hdr_sz(0);
    DataSeg::new(&mut wqe[32..48])
        .unwrap()
        .set_byte_count(len)
        .set_lkey(lkey)
        .set_addr(frame_iova);
    wqe
}

/// A frame from A to B's MAC.
fn frame_to_b(payload: usize, seed: u8) -> Vec<u8> {
    let mut f = udp_frame(payload, seed);
    f[..6].copy_from_slice(&MAC_B);
    f[6..12].copy_from_slice(&MAC_A);
    f
}

fn user_index(cqe: &[u8]) -> u32 {
    u32::from_be_bytes([0, cqe[0x21], cqe[0x22], cqe[0x23]])
}

/// The whole life of a raw packet QP pair as mlx5_ib drives it (`create_raw_packet_qp`,
/// `modify_raw_packet_qp` through RST2INIT, INIT2RTR, RTR2RTS, 2RST; `destroy_raw_packet_qp`),
/// sending frames as libmlx5 builds them from A and receiving them on B through an
/// `ibv_create_flow` rule, each completion carrying the QP's user index as libmlx5 needs
/// (`get_req_ctx_v1`, `get_resp_ctx_v1`).
#[test]
fn raw_packet_qp_through_mlx5_ib_transitions_sends_and_receives_through_a_flow_rule() {
    let (mut a, mut b) = hosts();
    let set_a = q_counter(&mut a);
    let set_b = q_counter(&mut b);
    let mut cq_a = a.create_cq(6);
    let mut cq_b = b.create_cq(6);
    let lkey_a = a.create_mkey(false, true);
    let lkey_b = b.create_mkey(false, true);
    let mut qa = create_raw_qp(&mut a, &cq_a, 4, 4);
    let mut qb = create_raw_qp(&mut b, &cq_b, 4, 4);
    for (h, q, set) in [(&mut a, &mut qa, set_a), (&mut b, &mut qb, set_b)] {
        rst2init(h, q, set);
        assert_eq!(queue_states(h, q), (RST, RDY));
        // INIT2RTR sends nothing for a raw packet QP.
        rtr2rts(h, q);
        assert_eq!(queue_states(h, q), (RDY, RDY));
    }
    let (table, group) = create_flow(&mut b, qb.tirn, MAC_B);
    let bufs: Vec<u64> = (0..2).map(|_| b.alloc(2048, 64)).collect();
    for &buf in &bufs {
        b.post_recv(&mut qb.rq, buf, 2048, lkey_b);
    }

    // libmlx5 with no inline headers, then with the 18 L2 bytes inline (older libmlx5, or a
    // device asking for L2 inline).
    let f1 = frame_to_b(200, 1);
    let iova = a.alloc(f1.len() as u64, 64);
    a.write(iova, &f1);
    let wqe = libmlx5_send_no_inline(&qa.sq, iova, f1.len() as u32, lkey_a);
    a.post(&mut qa.sq, &wqe, false);
    let f2 = frame_to_b(300, 2);
    let payload = a.alloc(f2.len() as u64, 64);
    let wqe = a.build_send(&qa.sq, &f2, payload, lkey_a, true);
    a.post(&mut qa.sq, &wqe, true);
    for _ in 0..4 {
        a.dev.poll();
        b.dev.poll();
    }
    for expected in [0u16, 1] {
        let cqe = a.poll_cq(&mut cq_a).expect("send completion");
        assert_eq!(cqe[0x3f] >> 4, 0, "requester CQE: {:02x?}", &cqe[0x30..]);
        assert_eq!(u16::from_be_bytes([cqe[0x3c], cqe[0x3d]]), expected);
        assert_eq!(user_index(&cqe), UIDX, "SQ CQE carries the QP's user index");
    }
    for (i, sent) in [&f1, &f2].into_iter().enumerate() {
        let cqe = b.poll_cq(&mut cq_b).expect("receive completion");
        assert_eq!(
            cqe[0x3f] >> 4,
            2,
            "responder SEND CQE: {:02x?}",
            &cqe[0x30..]
        );
        assert_eq!(
            u32::from_be_bytes(cqe[0x2c..0x30].try_into().unwrap()) as usize,
            sent.len()
        );
        assert_eq!(user_index(&cqe), UIDX, "RQ CQE carries the QP's user index");
        assert_eq!(&b.read(bufs[i], sent.len()), sent);
    }
    // A frame for another MAC misses the rule.
    let mut other = frame_to_b(100, 3);
    other[..6].copy_from_slice(&[0x02, 0xcc, 0, 0, 0, 9]);
    b.post_recv(&mut qb.rq, bufs[0], 2048, lkey_b);
    b.arrive(&[other]);
    assert!(b.poll_cq(&mut cq_b).is_none());

    destroy_flow(&mut b, table, group);
    for (h, mut q) in [(&mut a, qa), (&mut b, qb)] {
        to_rst(h, &mut q);
        assert_eq!(queue_states(h, &q), (RST, RST));
        destroy(h, q);
    }
    a.teardown();
    b.teardown();
}

/// 2ERR from INIT moves the RQ from RDY and the SQ, still in RST from RST2INIT, to ERR
/// (`modify_raw_packet_qp` with `MLX5_CMD_OP_2ERR_QP`); 2ERR again asks for ERR from ERR; 2RST
/// then resets both; RST2INIT works again after.
#[test]
fn raw_packet_qp_goes_to_error_from_init_and_back_to_reset() {
    let (mut a, _b) = hosts();
    let set = q_counter(&mut a);
    let cq = a.create_cq(6);
    let mut q = create_raw_qp(&mut a, &cq, 4, 4);
    rst2init(&mut a, &mut q, set);
    to_err(&mut a, &mut q);
    assert_eq!(queue_states(&mut a, &q), (ERR, ERR));
    to_err(&mut a, &mut q);
    to_rst(&mut a, &mut q);
    assert_eq!(queue_states(&mut a, &q), (RST, RST));
    // Straight from RST to ERR too (ibv_modify_qp to IBV_QPS_ERR on a fresh QP).
    to_err(&mut a, &mut q);
    to_rst(&mut a, &mut q);
    rst2init(&mut a, &mut q, set);
    rtr2rts(&mut a, &mut q);
    to_rst(&mut a, &mut q);
    destroy(&mut a, q);
    a.teardown();
}
