//! XRC QPs as Linux's mlx5_ib creates them and rdma-core's libmlx5 drives them, the way
//! `ibv_xsrq_pingpong` uses them: an XRC initiator (XRC_INI, `create_user_qp` with
//! `MLX5_QP_ST_XRC`: a send queue, `rq_type` SRQ naming the device's own XRC SRQ, the
//! device's XRC domain) on one function sends to an XRC target (XRC_TGT, `create_xrc_tgt_qp`:
//! no send queue, the device's PD and CQ, the user's XRC domain) on the other, each WQE's XRC
//! segment (libmlx5's `_mlx5_post_send`, IBV_QPT_XRC_SEND) naming the XRC SRQ the message
//! lands in. The target's receives complete on that SRQ's CQ carrying the SRQ's user index,
//! by which libmlx5 (`get_resp_ctx_v1`, MLX5_RSC_TYPE_XSRQ) finds the SRQ.

use cxdirect_emu::testkit::rc::{GID_A, GID_B, MAC_A, MAC_B};
use cxdirect_emu::testkit::CmdFail;
use cxdirect_emu::testkit::{Cq, Host, Sq};
use cxdirect_emu::wire::{PortId, Wire};
use cxdirect_emu::{Device, EmuConfig, Syndrome};
use cxdirect_hw::cmd::{CmdStatus, Opcode};
use cxdirect_hw::eqe::EventType;
use cxdirect_hw::hca::AllocXrcdOut;
use cxdirect_hw::qp::{
    mtu, rq_type, service_type, state, CreateQpIn, CreateQpOut, CreateXrcSrqIn, CreateXrcSrqOut,
    QueryQpIn, QueryQpOut,
};
use cxdirect_hw::srq::{ArmXrcSrqIn, QueryXrcSrqIn, QueryXrcSrqOut, ARM_XRC_SRQ_OP_MOD_XRC_SRQ};
use cxdirect_hw::wqe::{opcode, CtrlSeg, DataSeg, SrqNextSeg};
use std::sync::Arc;

const MEM: usize = 4 << 20;
/// Log2 of an XRC SRQ's WQEs.
const SRQ_LOG: u8 = 3;
/// Bytes of an XRC SRQ WQE: the next segment and one data segment (`log_rq_stride` 1).
const SRQ_STRIDE: u64 = 32;

/// An XRC SRQ made by [`create_xrc_srq`], its linked list built as libmlx5 builds it (each
/// WQE's next segment naming the one after it).
struct XrcSrq {
    srqn: u32,
    buf: u64,
    dbr: u64,
    posted: u16,
}

fn alloc_xrcd(h: &mut Host) -> u32 {
    let out = h.simple(Opcode::AllocXrcd, 0).expect("ALLOC_XRCD");
    AllocXrcdOut::new(&out[..]).unwrap().xrcd()
}

/// CREATE_XRC_SRQ as mlx5_ib's `create_xrc_srq_cmd` sends it: XRC domain, CQ, PD, user index,
/// a linked list of `2^SRQ_LOG` 32-byte WQEs.
fn create_xrc_srq(h: &mut Host, xrcd: u32, cqn: u32, user_index: u32) -> XrcSrq {
    let buf = h.alloc(4096, 4096);
    let dbr = h.alloc(8, 64);
    for i in 0..1u16 << SRQ_LOG {
        let mut next = [0u8; 16];
        SrqNextSeg::new(&mut next[..])
            .unwrap()
            .set_next_wqe_index((i + 1) & ((1 << SRQ_LOG) - 1));
        h.write(buf + u64::from(i) * SRQ_STRIDE, &next);
    }
    let mut input = Host::input(Opcode::CreateXrcSrq, 0, 0x110 + 8);
    let mut cmd = CreateXrcSrqIn::new(&mut input[..]).unwrap();
    cmd.xrc_srq_context_entry_mut()
        .set_log_xrc_srq_size(SRQ_LOG)
        .set_log_rq_stride(1)
        .set_log_page_size(0)
        .set_xrcd(xrcd)
        .set_cqn(cqn)
        .set_pd(h.pd)
        .set_user_index(user_index)
        .set_db_record_addr_h((dbr >> 32) as u32)
        .set_db_record_addr_l((dbr as u32) >> 2);
    cmd.set_pas(0, buf).unwrap();
    let out = h.exec(&input, 16).expect("CREATE_XRC_SRQ");
    XrcSrq {
        srqn: CreateXrcSrqOut::new(&out[..]).unwrap().xrc_srqn(),
        buf,
        dbr,
        posted: 0,
    }
}

/// libmlx5's `mlx5_post_srq_recv`: the free list's head WQE takes one data segment, and the
/// doorbell record counts the WQEs posted.
fn post_srq_recv(h: &Host, srq: &mut XrcSrq, addr: u64, len: u32, lkey: u32) {
    let at = srq.buf + u64::from(srq.posted & ((1 << SRQ_LOG) - 1)) * SRQ_STRIDE + 16;
    let mut seg = [0u8; 16];
    DataSeg::new(&mut seg[..])
        .unwrap()
        .set_byte_count(len)
        .set_lkey(lkey)
        .set_addr(addr);
    h.write(at, &seg);
    srq.posted = srq.posted.wrapping_add(1);
    h.write_be32(srq.dbr, u32::from(srq.posted));
}

/// CREATE_QP of an XRC initiator as `create_user_qp` fills it: service type XRC, a send
/// ring and no receive ring, `rq_type` SRQ naming the device's XRC SRQ `s0`, the device's
/// XRC domain, the send CQ and the device's CQ as receive CQ.
fn create_xrc_ini(h: &mut Host, cq: &Cq, xrcd: u32, s0: u32, log_sq: u8) -> Sq {
    let size = (64u64 << log_sq).next_multiple_of(4096);
    let buf = h.alloc(size, 4096);
    let dbr = h.alloc(8, 64);
    let pages = (size / 4096) as usize;
    let mut input = Host::input(Opcode::CreateQp, 0, 0x110 + 8 * pages);
    let mut cmd = CreateQpIn::new(&mut input[..]).unwrap();
    let uidx = h.next_user_index;
    h.next_user_index += 1;
    cmd.qpc_mut()
        .set_st(service_type::XRC)
        .set_pm_state(3)
        .set_pd(h.pd)
        .set_uar_page(h.uar)
        .set_user_index(uidx)
        .set_ts_format(1)
        .set_rq_type(rq_type::SRQ)
        .set_srqn_rmpn_xrqn(s0)
        .set_xrcd(xrcd)
        .set_log_sq_size(log_sq)
        .set_cqn_snd(cq.cqn)
        .set_cqn_rcv(cq.cqn)
        .set_dbr_addr(dbr);
    for i in 0..pages {
        cmd.set_pas(i, buf + i as u64 * 4096).unwrap();
    }
    let out = h.exec(&input, 16).expect("CREATE_QP XRC_INI");
    let qpn = CreateQpOut::new(&out[..]).unwrap().qpn();
    Sq {
        sqn: qpn,
        buf,
        dbr,
        log: log_sq,
        pi: 0,
        bf_toggle: false,
    }
}

/// CREATE_QP of an XRC target as `create_xrc_tgt_qp` fills it: service type XRC, the
/// device's PD, `no_sq`, `rq_type` SRQ naming the device's XRC SRQ `s0`, send and receive
/// CQ the device's `c0`, the user's XRC domain, a kernel doorbell record and no buffer.
fn create_xrc_tgt(h: &mut Host, c0: &Cq, xrcd: u32, s0: u32) -> u32 {
    let dbr = h.alloc(8, 64);
    let mut input = Host::input(Opcode::CreateQp, 0, 0x110);
    let mut cmd = CreateQpIn::new(&mut input[..]).unwrap();
    cmd.qpc_mut()
        .set_st(service_type::XRC)
        .set_pm_state(3)
        .set_pd(h.pd)
        .set_ts_format(1)
        .set_rq_type(rq_type::SRQ)
        .set_no_sq(true)
        .set_cqn_rcv(c0.cqn)
        .set_cqn_snd(c0.cqn)
        .set_srqn_rmpn_xrqn(s0)
        .set_xrcd(xrcd)
        .set_dbr_addr(dbr)
        .set_user_index(0x00ff_ffff);
    let out = h.exec(&input, 16).expect("CREATE_QP XRC_TGT");
    CreateQpOut::new(&out[..]).unwrap().qpn()
}

/// RST2INIT and INIT2RTR as `__mlx5_ib_modify_qp` sends them for `ibv_modify_qp` on an XRC QP
/// (`ibv_xsrq_pingpong` then takes both its receive and send QPs on with [`to_rts`]).
fn to_rtr(h: &mut Host, qpn: u32, remote_qpn: u32, gid: [u8; 16], mac: [u8; 6], psn: u32) {
    h.modify_qp(Opcode::Rst2initQp, qpn, |c| {
        c.set_rwe(true).set_rre(true);
        c.primary_address_path_mut().set_vhca_port_num(1);
    });
    h.modify_qp(Opcode::Init2rtrQp, qpn, |c| {
        c.set_mtu(mtu::MTU_1024)
            .set_log_msg_max(30)
            .set_remote_qpn(remote_qpn)
            .set_min_rnr_nak(12)
            .set_log_rra_max(0)
            .set_next_rcv_psn(psn);
        c.primary_address_path_mut()
            .set_vhca_port_num(1)
            .set_src_addr_index(0)
            .set_rgid(gid)
            .set_rmac(mac)
            .set_udp_sport(0xc000)
            .set_hop_limit(64);
    });
}

fn to_rts(h: &mut Host, qpn: u32, psn: u32) {
    h.modify_qp(Opcode::Rtr2rtsQp, qpn, |c| {
        c.set_next_send_psn(psn)
            .set_retry_count(7)
            .set_rnr_retry(7)
            .set_log_sra_max(0);
        c.primary_address_path_mut()
            .set_vhca_port_num(1)
            .set_ack_timeout(14);
    });
}

/// An XRC SEND WQE as libmlx5 builds it: control segment, XRC segment (`xrc_srqn`), one data
/// segment.
fn xrc_send(sq: &Sq, srqn: u32, local: (u64, u32, u32)) -> [u8; 64] {
    let mut w = [0u8; 64];
    w[16..20].copy_from_slice(&srqn.to_be_bytes());
    DataSeg::new(&mut w[32..48])
        .unwrap()
        .set_byte_count(local.2)
        .set_lkey(local.1)
        .set_addr(local.0);
    CtrlSeg::new(&mut w[..16])
        .unwrap()
        .set_opcode(opcode::SEND)
        .set_wqe_index(sq.pi)
        .set_qpn_or_sqn(sq.sqn)
        .set_ds(3)
        .set_ce(2);
    w
}

struct Rig {
    a: Host,
    b: Host,
    wire: Arc<Wire>,
    /// A's send CQ.
    cq_a: Cq,
    ini: Sq,
    tgt: u32,
    /// B's XRC domain (the user's, `ibv_open_xrcd`) and two SRQs in it, on CQs 1 and 2.
    srqs: Vec<XrcSrq>,
    cqs_b: Vec<Cq>,
    /// An XRC SRQ of another XRC domain on B.
    foreign: XrcSrq,
    lkey_a: u32,
    lkey_b: u32,
}

const UIDX: [u32; 2] = [0x51, 0x52];

fn rig() -> Rig {
    let cfg = |mac| EmuConfig {
        roce: true,
        mac,
        ..EmuConfig::default()
    };
    let (da, db) = (Device::new(cfg(MAC_A)), Device::new(cfg(MAC_B)));
    let wire = Arc::new(Wire::pair());
    da.attach(wire.clone(), PortId::A, &[&db]);
    db.attach(wire.clone(), PortId::B, &[&da]);
    let (mut a, mut b) = (Host::new(da, MEM), Host::new(db, MEM));
    a.bring_up();
    b.bring_up();
    a.enable_roce(GID_A, MAC_A);
    b.enable_roce(GID_B, MAC_B);
    // mlx5_ib_dev_res_init on both: the device's CQ c0, XRC domains, XRC SRQ s0.
    let c0_a = a.create_cq(4);
    let x_a = alloc_xrcd(&mut a);
    let s0_a = create_xrc_srq(&mut a, x_a, c0_a.cqn, 0x00ff_ffff).srqn;
    let c0_b = b.create_cq(4);
    let x_b = alloc_xrcd(&mut b);
    let s0_b = create_xrc_srq(&mut b, x_b, c0_b.cqn, 0x00ff_ffff).srqn;
    let cq_a = a.create_cq(5);
    let ini = create_xrc_ini(&mut a, &cq_a, x_a, s0_a, 5);
    let user_xrcd = alloc_xrcd(&mut b);
    let cqs_b: Vec<Cq> = (0..2).map(|_| b.create_cq(5)).collect();
    let srqs: Vec<XrcSrq> = (0..2)
        .map(|i| create_xrc_srq(&mut b, user_xrcd, cqs_b[i].cqn, UIDX[i]))
        .collect();
    let other_xrcd = alloc_xrcd(&mut b);
    let foreign = create_xrc_srq(&mut b, other_xrcd, cqs_b[0].cqn, 0x60);
    let tgt = create_xrc_tgt(&mut b, &c0_b, user_xrcd, s0_b);
    // `ibv_xsrq_pingpong`'s connect_qps: the receive (target) QP to RTR and RTS, then the
    // send (initiator) QP to RTR and RTS.
    to_rtr(&mut b, tgt, ini.sqn, GID_A, MAC_A, 0x100);
    to_rts(&mut b, tgt, 0x200);
    to_rtr(&mut a, ini.sqn, tgt, GID_B, MAC_B, 0x200);
    to_rts(&mut a, ini.sqn, 0x100);
    let lkey_a = a.create_mkey(false, true);
    let lkey_b = b.create_mkey(false, true);
    Rig {
        a,
        b,
        wire,
        cq_a,
        ini,
        tgt,
        srqs,
        cqs_b,
        foreign,
        lkey_a,
        lkey_b,
    }
}

fn settle(r: &Rig) {
    for _ in 0..6 {
        r.b.dev.poll();
        r.a.dev.poll();
    }
}

fn cqe_opcode(cqe: &[u8]) -> u8 {
    cqe[63] >> 4
}

fn byte_cnt(cqe: &[u8]) -> u32 {
    u32::from_be_bytes(cqe[0x2c..0x30].try_into().unwrap())
}

fn srqn_uidx(cqe: &[u8]) -> u32 {
    u32::from_be_bytes(cqe[0x20..0x24].try_into().unwrap()) & 0x00ff_ffff
}

fn cqe_qpn(cqe: &[u8]) -> u32 {
    u32::from_be_bytes(cqe[0x38..0x3c].try_into().unwrap()) & 0x00ff_ffff
}

fn wqe_counter(cqe: &[u8]) -> u16 {
    u16::from_be_bytes([cqe[0x3c], cqe[0x3d]])
}

fn qp_state(h: &mut Host, qpn: u32) -> u8 {
    let mut input = Host::input(Opcode::QueryQp, 0, 0x10);
    QueryQpIn::new(&mut input[..]).unwrap().set_qpn(qpn);
    let out = h.exec(&input, 0x110 + 0x800).expect("QUERY_QP");
    QueryQpOut::new(&out[..]).unwrap().qpc().state()
}

fn send(r: &mut Rig, srqn: u32, data: &[u8]) {
    let at = r.a.alloc(data.len() as u64, 64);
    r.a.write(at, data);
    let w = xrc_send(&r.ini, srqn, (at, r.lkey_a, data.len() as u32));
    r.a.post(&mut r.ini, &w, false);
}

/// `ibv_xsrq_pingpong`'s traffic: one XRC_TGT QP behind two XRC SRQs of its XRC domain, each
/// SEND naming one of them (alternately, two messages each, one of them three packets). Each
/// message lands in the named SRQ's next WQE and completes on that SRQ's CQ with its user
/// index and the target QP's number; the sender completes each SEND once it is acknowledged.
#[test]
fn xrc_sends_land_in_the_srq_their_xrceth_names_and_complete_on_its_cq() {
    let mut r = rig();
    let mut bufs = [Vec::new(), Vec::new()];
    for (i, srq) in r.srqs.iter_mut().enumerate() {
        for _ in 0..2 {
            let at = r.b.alloc(4096, 64);
            post_srq_recv(&r.b, srq, at, 4096, r.lkey_b);
            bufs[i].push(at);
        }
    }
    let messages: Vec<Vec<u8>> = (0..4)
        .map(|i| {
            let len = if i == 1 { 2500 } else { 64 + i * 10 };
            (0..len)
                .map(|j| (j as u8).wrapping_mul(7) ^ i as u8)
                .collect()
        })
        .collect();
    for (i, m) in messages.iter().enumerate() {
        let srqn = r.srqs[i % 2].srqn;
        send(&mut r, srqn, m);
    }
    settle(&r);
    for i in 0..4u16 {
        let cqe = r.a.poll_cq(&mut r.cq_a).expect("send completion");
        assert_eq!(
            cqe_opcode(&cqe),
            0,
            "requester CQE {i}: {:02x?}",
            &cqe[0x30..]
        );
        assert_eq!(wqe_counter(&cqe), i);
    }
    assert!(r.a.poll_cq(&mut r.cq_a).is_none());
    for (i, m) in messages.iter().enumerate() {
        let (srq, nth) = (i % 2, i / 2);
        let cqe = r.b.poll_cq(&mut r.cqs_b[srq]).expect("receive completion");
        assert_eq!(
            cqe_opcode(&cqe),
            2,
            "responder SEND CQE: {:02x?}",
            &cqe[0x20..]
        );
        assert_eq!(byte_cnt(&cqe) as usize, m.len());
        assert_eq!(srqn_uidx(&cqe), UIDX[srq], "the XRC SRQ's user index");
        assert_eq!(cqe_qpn(&cqe), r.tgt, "the target QP's number");
        assert_eq!(wqe_counter(&cqe), nth as u16, "the SRQ WQE taken");
        assert_eq!(r.b.read(bufs[srq][nth], m.len()), *m);
    }
    assert!(r.b.poll_cq(&mut r.cqs_b[0]).is_none());
    assert!(r.b.poll_cq(&mut r.cqs_b[1]).is_none());
    assert_eq!(qp_state(&mut r.b, r.tgt), state::RTS);
}

/// A request whose XRCETH names an XRC SRQ of another XRC domain is refused with an
/// invalid-request NAK: nothing is placed, nothing completes at the target, and the sender's
/// WQE completes in error (remote invalid request), taking the initiator to error.
#[test]
fn an_xrc_srq_of_another_domain_is_refused_with_an_invalid_request_nak() {
    let mut r = rig();
    let at = r.b.alloc(4096, 64);
    r.b.write(at, &[0xee; 64]);
    let mut foreign = std::mem::replace(
        &mut r.foreign,
        XrcSrq {
            srqn: 0,
            buf: 0,
            dbr: 0,
            posted: 0,
        },
    );
    post_srq_recv(&r.b, &mut foreign, at, 4096, r.lkey_b);
    let naks = r.b.dev.counters().roce_naks_sent;
    send(&mut r, foreign.srqn, &[0x11; 64]);
    settle(&r);
    assert_eq!(r.b.dev.counters().roce_naks_sent, naks + 1);
    assert_eq!(r.b.read(at, 64), vec![0xee; 64], "nothing placed");
    assert!(r.b.poll_cq(&mut r.cqs_b[0]).is_none());
    let cqe = r.a.poll_cq(&mut r.cq_a).expect("the sender's completion");
    assert_eq!(cqe_opcode(&cqe), 13, "requester error CQE");
    assert_eq!(cqe[0x37], 0x12, "remote invalid request syndrome");
    assert_eq!(qp_state(&mut r.a, r.ini.sqn), state::ERR);
    assert!(r.wire.counters(PortId::B).unwrap().tx_frames >= 1);
}

/// An XRC target takes the XRC rows of Linux's `opt_mask` (the RC rows): RTS2RTS may change
/// access flags, and an attribute outside the row is refused; QUERY_QP reports the XRC
/// domain and the SRQ the context names. DEALLOC_XRCD is refused while an XRC QP names the
/// domain.
#[test]
fn xrc_qps_take_the_xrc_rows_of_opt_mask_and_hold_their_domain() {
    use cxdirect_hw::hca::DeallocXrcdIn;
    use cxdirect_hw::qp::optpar;
    let mut r = rig();
    let mut input = Host::input(Opcode::QueryQp, 0, 0x10);
    QueryQpIn::new(&mut input[..]).unwrap().set_qpn(r.tgt);
    let out = r.b.exec(&input, 0x110 + 0x800).expect("QUERY_QP");
    let query = QueryQpOut::new(&out[..]).unwrap();
    let qpc = query.qpc();
    assert_eq!(qpc.st(), service_type::XRC);
    assert_eq!(qpc.rq_type(), rq_type::SRQ);
    let xrcd = qpc.xrcd();
    let mut free = Host::input(Opcode::DeallocXrcd, 0, 16);
    DeallocXrcdIn::new(&mut free[..]).unwrap().set_xrcd(xrcd);
    assert!(
        r.b.exec(&free, 16).is_err(),
        "domain held by the XRC target"
    );
    // RTS2RTS's optional attributes for XRC exclude the Q_Key.
    let mut bad = Host::input(Opcode::Rts2rtsQp, 0, 0x110);
    let mut cmd = cxdirect_hw::qp::Rst2initQpIn::new(&mut bad[..]).unwrap();
    cmd.set_qpn(r.ini.sqn).set_opt_param_mask(optpar::Q_KEY);
    assert_eq!(
        r.a.exec(&bad, 16).map(|_| ()),
        Err(CmdFail::status(
            CmdStatus::BadParameter,
            Syndrome::BadQpOptParam
        )),
        "Q_Key is no XRC attribute"
    );
    let mut ok = Host::input(Opcode::Rts2rtsQp, 0, 0x110);
    let mut cmd = cxdirect_hw::qp::Rst2initQpIn::new(&mut ok[..]).unwrap();
    cmd.set_qpn(r.ini.sqn).set_opt_param_mask(optpar::RWE);
    r.a.exec(&ok, 16).expect("RTS2RTS with access flags");
}

/// ARM_XRC_SRQ as mlx5_ib's `arm_xrc_srq_cmd` sends it for `ibv_modify_srq` (IBV_SRQ_LIMIT):
/// op_mod XRC_SRQ, the SRQ, the limit in `lwm`.
fn arm_xrc_srq_input(srqn: u32, lwm: u16, op_mod: u16) -> Vec<u8> {
    let mut input = Host::input(Opcode::ArmXrcSrq, op_mod, 0x10);
    ArmXrcSrqIn::new(&mut input[..])
        .unwrap()
        .set_xrc_srqn(srqn)
        .set_lwm(lwm);
    input
}

/// QUERY_XRC_SRQ as mlx5_ib's `query_xrc_srq_cmd` sends it (for `ibv_query_srq`); the whole
/// output, the context at 0x10.
fn query_xrc_srq(h: &mut Host, srqn: u32) -> Result<Vec<u8>, CmdFail> {
    let mut input = Host::input(Opcode::QueryXrcSrq, 0, 0x10);
    QueryXrcSrqIn::new(&mut input[..])
        .unwrap()
        .set_xrc_srqn(srqn);
    h.exec(&input, 0x110)
}

fn limit_events(h: &mut Host) -> Vec<u32> {
    h.drain_eq()
        .into_iter()
        .filter(|(t, _, _)| *t == EventType::SrqRqLimit as u8)
        .map(|(_, _, d)| u32::from_be_bytes([d[24], d[25], d[26], d[27]]))
        .collect()
}

/// An XRC SRQ's limit (`arm_xrc_srq_cmd`) is one-shot, as a basic SRQ's: the SEND that leaves
/// fewer WQEs posted than the limit raises one SRQ limit event naming the SRQ (what Linux's
/// `srq_event_notifier` looks up, and mlx5_ib reports as IB_EVENT_SRQ_LIMIT_REACHED), and the
/// limit then reads 0 in QUERY_XRC_SRQ, whose context (`get_srqc`) is the one created.
#[test]
fn arm_xrc_srq_raises_one_limit_event_and_query_xrc_srq_reads_the_context() {
    let mut r = rig();
    let srqn = r.srqs[0].srqn;
    for _ in 0..4 {
        let at = r.b.alloc(4096, 64);
        post_srq_recv(&r.b, &mut r.srqs[0], at, 4096, r.lkey_b);
    }
    r.b.exec(&arm_xrc_srq_input(srqn, 2, ARM_XRC_SRQ_OP_MOD_XRC_SRQ), 16)
        .expect("ARM_XRC_SRQ");
    r.b.drain_eq();
    let out = query_xrc_srq(&mut r.b, srqn).expect("QUERY_XRC_SRQ");
    let out = QueryXrcSrqOut::new(&out[..]).unwrap();
    let ctx = out.xrc_srq_context_entry();
    assert_eq!(ctx.state(), 0, "good");
    assert_eq!(ctx.lwm(), 2, "the armed limit");
    assert_eq!(ctx.log_xrc_srq_size(), SRQ_LOG);
    assert_eq!(ctx.log_rq_stride(), 1);
    assert_eq!(ctx.log_page_size(), 0);
    assert_eq!(ctx.page_offset(), 0);
    assert_eq!(ctx.pd(), r.b.pd);
    assert_eq!(ctx.cqn(), r.cqs_b[0].cqn);
    assert_eq!(ctx.user_index(), UIDX[0]);
    let dbr = (u64::from(ctx.db_record_addr_h()) << 32) | u64::from(ctx.db_record_addr_l() << 2);
    assert_eq!(dbr, r.srqs[0].dbr);
    // 4 posted, limit 2: the first two SENDs leave 3 and 2 posted, no event.
    for i in 0..2u8 {
        send(&mut r, srqn, &[i; 64]);
    }
    settle(&r);
    assert!(limit_events(&mut r.b).is_empty(), "at or above the limit");
    // The third leaves 1 < 2: one event, naming the XRC SRQ; the fourth raises nothing.
    send(&mut r, srqn, &[2; 64]);
    settle(&r);
    assert_eq!(limit_events(&mut r.b), vec![srqn]);
    send(&mut r, srqn, &[3; 64]);
    settle(&r);
    assert!(limit_events(&mut r.b).is_empty(), "disarmed after it fired");
    for _ in 0..4 {
        let cqe = r.b.poll_cq(&mut r.cqs_b[0]).expect("receive completion");
        assert_eq!(cqe_opcode(&cqe), 2);
    }
    let out = query_xrc_srq(&mut r.b, srqn).expect("QUERY_XRC_SRQ");
    let out = QueryXrcSrqOut::new(&out[..]).unwrap();
    assert_eq!(out.xrc_srq_context_entry().lwm(), 0, "one-shot limit");
    assert_eq!(out.xrc_srq_context_entry().wqe_cnt(), 4, "WQEs consumed");
    assert_eq!(r.b.dev.counters().limit_events, 1);
}

/// ARM_XRC_SRQ refuses another op_mod, a limit above the ring and an unknown SRQ; QUERY_XRC_SRQ
/// an unknown SRQ.
#[test]
fn arm_and_query_xrc_srq_refuse_what_linux_never_sends() {
    let mut r = rig();
    let srqn = r.srqs[1].srqn;
    assert_eq!(
        r.b.exec(&arm_xrc_srq_input(srqn, 1, 0), 16).map(|_| ()),
        Err(CmdFail::status(CmdStatus::BadParameter, Syndrome::BadOpMod))
    );
    assert_eq!(
        r.b.exec(
            &arm_xrc_srq_input(srqn, (1 << SRQ_LOG) + 1, ARM_XRC_SRQ_OP_MOD_XRC_SRQ),
            16
        )
        .map(|_| ()),
        Err(CmdFail::status(
            CmdStatus::BadParameter,
            Syndrome::BadWqParams
        ))
    );
    let gone = 0x00ab_cdef;
    assert_eq!(
        r.b.exec(&arm_xrc_srq_input(gone, 1, ARM_XRC_SRQ_OP_MOD_XRC_SRQ), 16)
            .map(|_| ()),
        Err(CmdFail::status(
            CmdStatus::BadResource,
            Syndrome::NoSuchObject
        ))
    );
    assert_eq!(
        query_xrc_srq(&mut r.b, gone).map(|_| ()),
        Err(CmdFail::status(
            CmdStatus::BadResource,
            Syndrome::NoSuchObject
        ))
    );
}
