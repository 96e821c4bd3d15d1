//! What the XRC tests share: XRC domains, XRC SRQs, initiator and target QPs as mlx5_ib and
//! libmlx5 make them, and two functions wired with one of each ([`Rig`]). Each test file uses
//! part of it.
#![allow(dead_code, unused_imports)]

pub use cxdirect_emu::testkit::rc::{GID_A, GID_B, MAC_A, MAC_B};
pub use cxdirect_emu::testkit::CmdFail;
pub use cxdirect_emu::testkit::{Cq, Host, Sq};
pub use cxdirect_emu::wire::{PortId, Wire};
pub use cxdirect_emu::{Device, EmuConfig, Syndrome};
pub use cxdirect_hw::cmd::{CmdStatus, Opcode};
pub use cxdirect_hw::eqe::EventType;
pub use cxdirect_hw::hca::AllocXrcdOut;
pub use cxdirect_hw::qp::{
    mtu, rq_type, service_type, state, CreateQpIn, CreateQpOut, CreateXrcSrqIn, CreateXrcSrqOut,
    QueryQpIn, QueryQpOut,
};
pub use cxdirect_hw::srq::{
    ArmXrcSrqIn, QueryXrcSrqIn, QueryXrcSrqOut, ARM_XRC_SRQ_OP_MOD_XRC_SRQ,
};
pub use cxdirect_hw::wqe::{opcode, CtrlSeg, DataSeg, SrqNextSeg};
pub use std::sync::Arc;

pub const MEM: usize = 4 << 20;
/// Log2 of an XRC SRQ's WQEs.
pub const SRQ_LOG: u8 = 3;
/// Bytes of an XRC SRQ WQE: the next segment and one data segment (`log_rq_stride` 1).
pub const SRQ_STRIDE: u64 = 32;

/// An XRC SRQ made by [`create_xrc_srq`], its linked list built as libmlx5 builds it (each
/// WQE's next segment naming the one after it).
pub struct XrcSrq {
    pub srqn: u32,
    pub buf: u64,
    pub dbr: u64,
    pub posted: u16,
}

pub fn alloc_xrcd(h: &mut Host) -> u32 {
    let out = h.simple(Opcode::AllocXrcd, 0).expect("ALLOC_XRCD");
    AllocXrcdOut::new(&out[..]).unwrap().xrcd()
}

/// CREATE_XRC_SRQ as mlx5_ib's `create_xrc_srq_cmd` sends it: XRC domain, CQ, PD, user index,
/// a linked list of `2^SRQ_LOG` 32-byte WQEs.
pub fn create_xrc_srq(h: &mut Host, xrcd: u32, cqn: u32, user_index: u32) -> XrcSrq {
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
pub fn post_srq_recv(h: &Host, srq: &mut XrcSrq, addr: u64, len: u32, lkey: u32) {
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
pub fn create_xrc_ini(h: &mut Host, cq: &Cq, xrcd: u32, s0: u32, log_sq: u8) -> Sq {
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
pub fn create_xrc_tgt(h: &mut Host, c0: &Cq, xrcd: u32, s0: u32) -> u32 {
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
pub fn to_rtr(h: &mut Host, qpn: u32, remote_qpn: u32, gid: [u8; 16], mac: [u8; 6], psn: u32) {
    h.modify_qp(Opcode::Rst2initQp, qpn, |c| {
        c.set_rwe(true).set_rre(true).set_rae(true);
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

pub fn to_rts(h: &mut Host, qpn: u32, psn: u32) {
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
pub fn xrc_send(sq: &Sq, srqn: u32, local: (u64, u32, u32)) -> [u8; 64] {
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

pub struct Rig {
    pub a: Host,
    pub b: Host,
    pub wire: Arc<Wire>,
    /// A's send CQ.
    pub cq_a: Cq,
    pub ini: Sq,
    pub tgt: u32,
    /// B's XRC domain (the user's, `ibv_open_xrcd`) and two SRQs in it, on CQs 1 and 2.
    pub srqs: Vec<XrcSrq>,
    pub cqs_b: Vec<Cq>,
    /// An XRC SRQ of another XRC domain on B.
    pub foreign: XrcSrq,
    pub lkey_a: u32,
    pub lkey_b: u32,
}

pub const UIDX: [u32; 2] = [0x51, 0x52];

pub fn rig() -> Rig {
    rig_with(false)
}

/// [`rig`], both functions reporting on-demand paging with `odp` (their async EQs taking
/// every event, page faults included).
pub fn rig_with(odp: bool) -> Rig {
    let cfg = |mac| EmuConfig {
        roce: true,
        odp,
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

pub fn settle(r: &Rig) {
    for _ in 0..6 {
        r.b.dev.poll();
        r.a.dev.poll();
    }
}

/// Runs both functions past the initiator's RNR timer until `done` holds (at most a second).
pub fn settle_until(r: &mut Rig, done: impl FnMut(&mut Rig) -> bool) -> bool {
    cxdirect_emu::testkit::poll::settle_until(r, |r| settle(r), done)
}

pub fn cqe_opcode(cqe: &[u8]) -> u8 {
    cqe[63] >> 4
}

pub fn byte_cnt(cqe: &[u8]) -> u32 {
    u32::from_be_bytes(cqe[0x2c..0x30].try_into().unwrap())
}

pub fn srqn_uidx(cqe: &[u8]) -> u32 {
    u32::from_be_bytes(cqe[0x20..0x24].try_into().unwrap()) & 0x00ff_ffff
}

pub fn cqe_qpn(cqe: &[u8]) -> u32 {
    u32::from_be_bytes(cqe[0x38..0x3c].try_into().unwrap()) & 0x00ff_ffff
}

pub fn wqe_counter(cqe: &[u8]) -> u16 {
    u16::from_be_bytes([cqe[0x3c], cqe[0x3d]])
}

pub fn qp_state(h: &mut Host, qpn: u32) -> u8 {
    let mut input = Host::input(Opcode::QueryQp, 0, 0x10);
    QueryQpIn::new(&mut input[..]).unwrap().set_qpn(qpn);
    let out = h.exec(&input, 0x110 + 0x800).expect("QUERY_QP");
    QueryQpOut::new(&out[..]).unwrap().qpc().state()
}

pub fn send(r: &mut Rig, srqn: u32, data: &[u8]) {
    let at = r.a.alloc(data.len() as u64, 64);
    r.a.write(at, data);
    let w = xrc_send(&r.ini, srqn, (at, r.lkey_a, data.len() as u32));
    r.a.post(&mut r.ini, &w, false);
}
