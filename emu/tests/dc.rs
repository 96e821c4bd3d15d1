//! The dynamically connected (DC) transport as Linux 6.12's mlx5_ib creates its objects and
//! rdma-core's libmlx5 drives them (the way perftest's `-c DC` does):
//!
//! - a DCT is created by `ibv_create_qp` with `MLX5DV_QP_INIT_ATTR_MASK_DC` and two
//!   `ibv_modify_qp` calls; mlx5_ib (`create_dct`, `mlx5_ib_modify_dct`) collects its context
//!   and sends CREATE_DCT at INIT to RTR; `ibv_destroy_qp` sends DRAIN_DCT, waits for the
//!   DCT_DRAINED event, then DESTROY_DCT (`_mlx5_core_destroy_dct`);
//! - a DCI is CREATE_QP with service type DCI and no receive queue, taken to RTS by the
//!   transitions `modify_dci_qp_is_ok` allows (INIT2RTR with the path MTU and no destination
//!   QP);
//! - each DCI send WQE carries, after its control segment, the 48-byte address vector
//!   libmlx5's `mlx5_send_wr_set_dc_addr` copies in: the DC access key in the Q_Key's place,
//!   the DCT number with `MLX5_EXTENDED_UD_AV`, the path; then the remote-address and data
//!   segments (`_mlx5_send_wr_rdma` puts the remote-address segment after the DC vector).

use cxdirect_emu::testkit::rc::{RemoteRights, GID_A, GID_B, MAC_A, MAC_B};
use cxdirect_emu::testkit::{CmdFail, Cq, Host, Rq, Sq};
use cxdirect_emu::wire::{PortId, Wire};
use cxdirect_emu::{Device, EmuConfig, Syndrome};
use cxdirect_hw::caps::CmdHcaCap;
use cxdirect_hw::cmd::{CmdStatus, Opcode};
use cxdirect_hw::dct::{
    self, CreateDctIn, CreateDctOut, DestroyDctIn, DrainDctIn, QueryDctIn, QueryDctOut,
};
use cxdirect_hw::eqe::{EventType, EQE_DCT_NUMBER_OFFSET};
use cxdirect_hw::hca::cap_type;
use cxdirect_hw::qp::{mtu, rq_type, service_type, CreateQpIn, CreateQpOut};
use cxdirect_hw::wqe::{opcode, CtrlSeg, DataSeg, DatagramSeg, RaddrSeg};
use std::sync::Arc;

const MEM: usize = 4 << 20;
/// perftest's DC access key (`DC_KEY` in perftest_resources.h).
const KEY: u64 = 0xffee_ddcc;
/// User index mlx5_ib gives the DCT (libmlx5 stores it to find the DCT from its CQEs).
const DCT_UIDX: u32 = 0x77;
/// Log2 of the RMP's WQEs.
const RMP_LOG: u8 = 4;

/// CREATE_DCT with the context as mlx5_ib has it once `mlx5_ib_modify_dct` took it to RTR:
/// PD, SRQ, CQ, access key and user index (`create_dct`); remote read, write and atomic
/// access, P_Key index 0, port 1 (RESET to INIT); RNR timer 12, MTU 1024, GID index 0, hop
/// limit 64 (INIT to RTR).
fn create_dct(h: &mut Host, cqn: u32, srqn: u32, key: u64) -> Result<u32, CmdFail> {
    let mut input = Host::input(Opcode::CreateDct, 0, 0x80);
    let mut cmd = CreateDctIn::new(&mut input[..]).unwrap();
    cmd.dct_context_entry_mut()
        .set_pd(h.pd)
        .set_srqn_xrqn(srqn)
        .set_cqn(cqn)
        .set_dc_access_key(key)
        .set_user_index(DCT_UIDX)
        .set_rre(true)
        .set_rwe(true)
        .set_rae(true)
        .set_atomic_mode(3)
        .set_pkey_index(0)
        .set_port(1)
        .set_min_rnr_nak(12)
        .set_mtu(mtu::MTU_1024)
        .set_my_addr_index(0)
        .set_hop_limit(64);
    let out = h.exec(&input, 0x10)?;
    Ok(CreateDctOut::new(&out[..]).unwrap().dctn())
}

fn drain_dct(h: &mut Host, dctn: u32) -> Result<(), CmdFail> {
    let mut input = Host::input(Opcode::DrainDct, 0, 0x10);
    DrainDctIn::new(&mut input[..]).unwrap().set_dctn(dctn);
    h.exec(&input, 0x10).map(|_| ())
}

fn destroy_dct(h: &mut Host, dctn: u32) -> Result<(), CmdFail> {
    let mut input = Host::input(Opcode::DestroyDct, 0, 0x10);
    DestroyDctIn::new(&mut input[..]).unwrap().set_dctn(dctn);
    h.exec(&input, 0x10).map(|_| ())
}

/// QUERY_DCT as `mlx5_core_dct_query` sends it: the state and the key violation count.
fn query_dct(h: &mut Host, dctn: u32) -> Result<(u8, u32, u64), CmdFail> {
    let mut input = Host::input(Opcode::QueryDct, 0, 0x10);
    QueryDctIn::new(&mut input[..]).unwrap().set_dctn(dctn);
    let out = h.exec(&input, 0x80)?;
    let out = QueryDctOut::new(&out[..]).unwrap();
    let ctx = out.dct_context_entry();
    Ok((
        ctx.state(),
        ctx.dc_access_key_violation_count(),
        ctx.dc_access_key(),
    ))
}

/// CREATE_QP of a DCI as `create_user_qp` fills it for `MLX5_IB_QPT_DCI`: service type DCI, a
/// send ring, a zero-length receive queue (a DCI has none: `mlx5_ib_create_qp` refuses
/// `max_recv_wr`), then RST2INIT (port 1), INIT2RTR (path MTU, the address vector perftest
/// gives, no destination QP) and RTR2RTS (timeout, retries, PSN, `max_rd_atomic`).
fn create_dci(h: &mut Host, cq: &Cq, log_sq: u8) -> Sq {
    let size = (64u64 << log_sq).next_multiple_of(4096);
    let buf = h.alloc(size, 4096);
    let dbr = h.alloc(8, 64);
    let pages = (size / 4096) as usize;
    let mut input = Host::input(Opcode::CreateQp, 0, 0x110 + 8 * pages);
    let mut cmd = CreateQpIn::new(&mut input[..]).unwrap();
    let uidx = h.next_user_index;
    h.next_user_index += 1;
    cmd.qpc_mut()
        .set_st(service_type::DCI)
        .set_pm_state(3)
        .set_pd(h.pd)
        .set_uar_page(h.uar)
        .set_user_index(uidx)
        .set_ts_format(1)
        .set_rq_type(rq_type::ZERO_LEN)
        .set_log_sq_size(log_sq)
        .set_log_msg_max(30)
        .set_cqn_snd(cq.cqn)
        .set_cqn_rcv(cq.cqn)
        .set_dbr_addr(dbr);
    for i in 0..pages {
        cmd.set_pas(i, buf + i as u64 * 4096).unwrap();
    }
    let out = h.exec(&input, 16).expect("CREATE_QP DCI");
    let qpn = CreateQpOut::new(&out[..]).unwrap().qpn();
    h.modify_qp(Opcode::Rst2initQp, qpn, |c| {
        c.primary_address_path_mut().set_vhca_port_num(1);
    });
    h.modify_qp(Opcode::Init2rtrQp, qpn, |c| {
        c.set_mtu(mtu::MTU_1024).set_log_msg_max(30);
        c.primary_address_path_mut()
            .set_vhca_port_num(1)
            .set_src_addr_index(0)
            .set_rgid(GID_B)
            .set_rmac(MAC_B)
            .set_hop_limit(64);
    });
    h.modify_qp(Opcode::Rtr2rtsQp, qpn, |c| {
        c.set_next_send_psn(0x10)
            .set_retry_count(7)
            .set_rnr_retry(7)
            .set_log_sra_max(2);
        c.primary_address_path_mut()
            .set_vhca_port_num(1)
            .set_ack_timeout(14);
    });
    Sq {
        sqn: qpn,
        buf,
        dbr,
        log: log_sq,
        pi: 0,
        bf_toggle: false,
    }
}

/// Where a DC WQE goes: the DCT, its key, and its function's GID and MAC.
#[derive(Clone, Copy)]
struct DcAddr {
    dct: u32,
    key: u64,
    gid: [u8; 16],
    mac: [u8; 6],
}

/// A DCI send WQE as libmlx5 builds it (`ibv_wr_send` / `ibv_wr_rdma_write` /
/// `ibv_wr_rdma_read`, then `mlx5dv_wr_set_dc_addr` and `ibv_wr_set_sge`): control segment,
/// the address vector (`set_dc_addr`: the AH's vector, the DCT with `MLX5_EXTENDED_UD_AV`,
/// the key), the remote-address segment for RDMA, one data segment; two WQEBBs.
fn dc_wqe(
    sq: &Sq,
    op: u8,
    to: DcAddr,
    remote: Option<(u64, u32)>,
    local: (u64, u32, u32),
) -> [u8; 128] {
    let mut w = [0u8; 128];
    {
        let mut av = DatagramSeg::new(&mut w[16..64]).unwrap();
        av.set_dc_key(to.key)
            .set_extended(true)
            .set_dest_qpn(to.dct)
            .set_udp_sport(0xc0de)
            .set_hop_limit(64)
            .set_grh(true)
            .set_sgid_index(0)
            .set_rmac(to.mac)
            .set_dgid(to.gid);
    }
    let mut at = 64;
    if let Some((raddr, rkey)) = remote {
        RaddrSeg::new(&mut w[at..at + 16])
            .unwrap()
            .set_raddr(raddr)
            .set_rkey(rkey);
        at += 16;
    }
    DataSeg::new(&mut w[at..at + 16])
        .unwrap()
        .set_byte_count(local.2)
        .set_lkey(local.1)
        .set_addr(local.0);
    at += 16;
    CtrlSeg::new(&mut w[..16])
        .unwrap()
        .set_opcode(op)
        .set_wqe_index(sq.pi)
        .set_qpn_or_sqn(sq.sqn)
        .set_ds((at / 16) as u8)
        .set_ce(2);
    w
}

struct Rig {
    a: Host,
    b: Host,
    _wire: Arc<Wire>,
    /// A's CQ (the DCI's completions).
    cq_a: Cq,
    dci: Sq,
    /// B's CQ (the DCTs' receives), its RMP and two DCTs on it.
    cq_b: Cq,
    rmp: Rq,
    dcts: [u32; 2],
    lkey_a: u32,
    lkey_b: u32,
    /// B's memory open to remote read and write, and its key.
    remote: (u64, u32),
}

fn hosts() -> (Host, Host, Arc<Wire>) {
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
    (a, b, wire)
}

fn rig() -> Rig {
    let (mut a, mut b, wire) = hosts();
    let cq_a = a.create_cq(5);
    let dci = create_dci(&mut a, &cq_a, 5);
    let cq_b = b.create_cq(5);
    let (srqn, rmp) = b.create_rmp(RMP_LOG, 0);
    let dcts = [
        create_dct(&mut b, cq_b.cqn, srqn, KEY).expect("CREATE_DCT"),
        create_dct(&mut b, cq_b.cqn, srqn, KEY + 1).expect("CREATE_DCT"),
    ];
    let lkey_a = a.create_mkey(false, true);
    let lkey_b = b.create_mkey(false, true);
    let at = b.alloc(4096, 4096);
    let pd = b.pd;
    let rkey = b.create_remote_mkey(
        pd,
        at,
        4096,
        RemoteRights {
            read: true,
            write: true,
            atomic: false,
        },
        0x5a,
    );
    Rig {
        a,
        b,
        _wire: wire,
        cq_a,
        dci,
        cq_b,
        rmp,
        dcts,
        lkey_a,
        lkey_b,
        remote: (at, rkey),
    }
}

impl Rig {
    fn to(&self, which: usize) -> DcAddr {
        DcAddr {
            dct: self.dcts[which],
            key: KEY + which as u64,
            gid: GID_B,
            mac: MAC_B,
        }
    }

    fn settle(&self) {
        for _ in 0..8 {
            self.b.dev.poll();
            self.a.dev.poll();
        }
    }

    /// Posts a receive of `len` bytes on B's RMP; returns where it lands.
    fn post_recv(&mut self, len: u32) -> u64 {
        let at = self.b.alloc(u64::from(len), 64);
        let lkey = self.lkey_b;
        self.b.post_recv(&mut self.rmp, at, len, lkey);
        at
    }

    /// Posts a DCI WQE of `op` to `to` with `data` (or room for `data.len()` bytes).
    fn post(&mut self, op: u8, to: DcAddr, remote: Option<(u64, u32)>, data: &[u8]) -> u64 {
        let at = self.a.alloc(data.len() as u64, 64);
        self.a.write(at, data);
        let w = dc_wqe(
            &self.dci,
            op,
            to,
            remote,
            (at, self.lkey_a, data.len() as u32),
        );
        self.a.post(&mut self.dci, &w, false);
        at
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

fn syndrome(cqe: &[u8]) -> u8 {
    cqe[0x37]
}

/// CQE opcodes (`MLX5_CQE_*`).
const REQ: u8 = 0x0;
const RESP_SEND: u8 = 0x2;
const REQ_ERR: u8 = 0xd;
/// `MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR`.
const REMOTE_ACCESS_ERR: u8 = 0x13;

#[test]
fn dc_is_advertised_with_roce_as_mlx5_ib_checks_it() {
    let (mut a, _b, _wire) = hosts();
    let general = a.query_cap(cap_type::GENERAL_DEVICE, true);
    let caps = CmdHcaCap::new(&general[0x10..]).unwrap();
    // `set_mlx_qp_type` / `check_qp_type` refuse DC without `dct`; `validate_rd_atomic`
    // bounds a DCI's READs and atomics in flight by the DC limits.
    assert!(caps.dct());
    assert_eq!(caps.log_max_ra_req_dc(), 4);
    assert_eq!(caps.log_max_ra_res_dc(), 4);
}

#[test]
fn dct_create_query_drain_destroy_as_mlx5_ib_sends_them() {
    let mut r = rig();
    let dctn = r.dcts[0];
    assert_eq!(
        query_dct(&mut r.b, dctn).unwrap(),
        (dct::state::ACTIVE, 0, KEY)
    );
    // `_mlx5_core_destroy_dct`: DRAIN_DCT, the DCT_DRAINED event naming it, DESTROY_DCT.
    r.b.drain_eq();
    drain_dct(&mut r.b, dctn).expect("DRAIN_DCT");
    let events: Vec<_> =
        r.b.drain_eq()
            .into_iter()
            .filter(|e| e.0 == EventType::DctDrained as u8)
            .collect();
    assert_eq!(events.len(), 1, "one DCT_DRAINED event");
    let (kind, _, data) = &events[0];
    assert_eq!(*kind, EventType::DctDrained as u8);
    let at = EQE_DCT_NUMBER_OFFSET;
    let named = u32::from_be_bytes(data[at..at + 4].try_into().unwrap()) & 0x00ff_ffff;
    assert_eq!(named, dctn);
    assert_eq!(query_dct(&mut r.b, dctn).unwrap().0, dct::state::DRAINED);
    assert!(drain_dct(&mut r.b, dctn).is_err(), "drained twice");
    destroy_dct(&mut r.b, dctn).expect("DESTROY_DCT");
    assert_eq!(
        query_dct(&mut r.b, dctn).unwrap_err(),
        CmdFail::status(CmdStatus::BadResource, Syndrome::NoSuchObject)
    );
    assert!(destroy_dct(&mut r.b, dctn).is_err(), "destroyed twice");
}

#[test]
fn create_dct_refuses_a_missing_srq_or_cq() {
    let (_a, mut b, _wire) = hosts();
    let cq = b.create_cq(4);
    let (srqn, _) = b.create_rmp(RMP_LOG, 0);
    assert!(create_dct(&mut b, cq.cqn, srqn + 7, KEY).is_err());
    assert!(create_dct(&mut b, cq.cqn + 9, srqn, KEY).is_err());
    create_dct(&mut b, cq.cqn, srqn, KEY).expect("a good one");
}

#[test]
fn dci_send_lands_in_the_dcts_srq_and_completes_on_its_cq() {
    let mut r = rig();
    let land = r.post_recv(64);
    let to = r.to(0);
    r.post(opcode::SEND, to, None, b"dynamically connected");
    r.settle();
    assert_eq!(r.b.read(land, 21), b"dynamically connected");
    let cqe = r.b.poll_cq(&mut r.cq_b).expect("the DCT's receive CQE");
    assert_eq!(cqe_opcode(&cqe), RESP_SEND);
    assert_eq!(byte_cnt(&cqe), 21);
    // libmlx5 finds the DCT by its user index, and the CQE names the DCT.
    assert_eq!(srqn_uidx(&cqe), DCT_UIDX);
    assert_eq!(cqe_qpn(&cqe), r.dcts[0]);
    let done = r.a.poll_cq(&mut r.cq_a).expect("the DCI's completion");
    assert_eq!(cqe_opcode(&done), REQ);
    assert_eq!(cqe_qpn(&done), r.dci.sqn);
}

#[test]
fn dci_rdma_write_and_read_through_a_dct() {
    let mut r = rig();
    let to = r.to(0);
    let (raddr, rkey) = r.remote;
    r.post(opcode::RDMA_WRITE, to, Some((raddr, rkey)), &[0xab; 300]);
    r.settle();
    assert_eq!(r.b.read(raddr, 300), vec![0xab; 300]);
    let w = r.a.poll_cq(&mut r.cq_a).expect("WRITE completion");
    assert_eq!((cqe_opcode(&w), syndrome(&w)), (REQ, 0));
    // A READ of 2,000 bytes: two responses at MTU 1024.
    r.b.write(raddr + 1000, &[0x5c; 2000]);
    let local = r.post(
        opcode::RDMA_READ,
        to,
        Some((raddr + 1000, rkey)),
        &[0; 2000],
    );
    r.settle();
    let rd = r.a.poll_cq(&mut r.cq_a).expect("READ completion");
    assert_eq!(cqe_opcode(&rd), REQ);
    assert_eq!(r.a.read(local, 2000), vec![0x5c; 2000]);
    assert!(r.b.poll_cq(&mut r.cq_b).is_none(), "RDMA takes no receive");
}

#[test]
fn a_wrong_access_key_is_refused_counted_and_places_nothing() {
    let mut r = rig();
    let land = r.post_recv(64);
    let mut to = r.to(0);
    to.key = KEY ^ 0xdead;
    let before = r.b.dev.counters();
    r.post(opcode::SEND, to, None, b"intruder");
    r.settle();
    assert_eq!(r.b.read(land, 8), vec![0; 8], "nothing placed");
    assert!(r.b.poll_cq(&mut r.cq_b).is_none(), "no receive completion");
    let after = r.b.dev.counters();
    assert_eq!(after.dc_key_violations, before.dc_key_violations + 1);
    assert_eq!(query_dct(&mut r.b, r.dcts[0]).unwrap().1, 1);
    let err = r.a.poll_cq(&mut r.cq_a).expect("the DCI's error CQE");
    assert_eq!(cqe_opcode(&err), REQ_ERR);
    assert_eq!(syndrome(&err), REMOTE_ACCESS_ERR);
}

#[test]
fn one_dci_talks_to_two_dcts_in_turn() {
    let mut r = rig();
    let lands: Vec<u64> = (0..4).map(|_| r.post_recv(64)).collect();
    // Posted back to back: the WQE for the second DCT waits for the first's ACK, then the
    // DCI connects there; then back to the first.
    for (i, which) in [0usize, 1, 1, 0].into_iter().enumerate() {
        let to = r.to(which);
        r.post(
            opcode::SEND,
            to,
            None,
            format!("message {i} to {which}").as_bytes(),
        );
    }
    r.settle();
    let mut seen = Vec::new();
    while let Some(cqe) = r.b.poll_cq(&mut r.cq_b) {
        assert_eq!(cqe_opcode(&cqe), RESP_SEND);
        seen.push(cqe_qpn(&cqe));
    }
    assert_eq!(seen, vec![r.dcts[0], r.dcts[1], r.dcts[1], r.dcts[0]]);
    for (i, (land, which)) in lands.iter().zip([0, 1, 1, 0]).enumerate() {
        let text = format!("message {i} to {which}");
        assert_eq!(r.b.read(*land, text.len()), text.as_bytes());
    }
    let mut done = 0;
    while let Some(cqe) = r.a.poll_cq(&mut r.cq_a) {
        assert_eq!(cqe_opcode(&cqe), REQ);
        done += 1;
    }
    assert_eq!(done, 4);
}

#[test]
fn a_drained_dct_takes_no_more_requests() {
    let mut r = rig();
    let land = r.post_recv(64);
    drain_dct(&mut r.b, r.dcts[0]).expect("DRAIN_DCT");
    let to = r.to(0);
    r.post(opcode::SEND, to, None, b"too late");
    r.settle();
    assert_eq!(r.b.read(land, 8), vec![0; 8]);
    assert!(r.b.poll_cq(&mut r.cq_b).is_none());
}

#[test]
fn a_dci_reaches_a_dct_on_its_own_function() {
    // Both ends on one function (perftest with server and client on one device): the DC
    // requests and their ACKs loop inside the device.
    let (mut a, _b, _wire) = hosts();
    let cq = a.create_cq(5);
    let mut dci = create_dci(&mut a, &cq, 5);
    let (srqn, mut rmp) = a.create_rmp(RMP_LOG, 0);
    let dctn = create_dct(&mut a, cq.cqn, srqn, KEY).expect("CREATE_DCT");
    let lkey = a.create_mkey(false, true);
    let land = a.alloc(64, 64);
    a.post_recv(&mut rmp, land, 64, lkey);
    let src = a.alloc(64, 64);
    a.write(src, b"to myself");
    let to = DcAddr {
        dct: dctn,
        key: KEY,
        gid: GID_A,
        mac: MAC_A,
    };
    let w = dc_wqe(&dci, opcode::SEND, to, None, (src, lkey, 9));
    a.post(&mut dci, &w, false);
    for _ in 0..8 {
        a.dev.poll();
    }
    assert_eq!(a.read(land, 9), b"to myself");
    let mut cq = cq;
    let mut seen = Vec::new();
    while let Some(cqe) = a.poll_cq(&mut cq) {
        seen.push((cqe_opcode(&cqe), cqe_qpn(&cqe)));
    }
    seen.sort();
    assert_eq!(seen, vec![(REQ, dci.sqn), (RESP_SEND, dctn)]);
}

/// The ICRC of RoCE v2 IPv4 frame `frame` (its last four bytes the ICRC's place), from the
/// IBA rules: eight bytes of ones for the LRH, the IP, UDP and transport headers with their
/// variant fields set to ones, then the rest.
fn icrc_v4(frame: &[u8]) -> [u8; 4] {
    let mut masked = vec![0xff; 8];
    let mut ip = frame[14..34].to_vec();
    ip[1] = 0xff;
    ip[8] = 0xff;
    ip[10] = 0xff;
    ip[11] = 0xff;
    masked.extend_from_slice(&ip);
    let mut rest = frame[34..frame.len() - 4].to_vec();
    rest[6] = 0xff;
    rest[7] = 0xff;
    rest[8 + 4] = 0xff;
    masked.extend_from_slice(&rest);
    crc32fast::hash(&masked).to_le_bytes()
}

#[test]
fn the_dc_wire_format_and_a_request_cut_inside_its_dceth() {
    // Each function alone on its own wire: A's frames wait at the far end of A's, and are
    // put on B's by hand.
    let cfg = |mac| EmuConfig {
        roce: true,
        mac,
        ..EmuConfig::default()
    };
    let (mut a, wire) = cxdirect_emu::testkit::rc::lone_host(cfg(MAC_A), MEM, GID_A, MAC_A);
    let (mut b, wire_b) = cxdirect_emu::testkit::rc::lone_host(cfg(MAC_B), MEM, GID_B, MAC_B);
    let mut cq_b = b.create_cq(5);
    let (srqn, mut rmp) = b.create_rmp(RMP_LOG, 0);
    let dctn = create_dct(&mut b, cq_b.cqn, srqn, KEY).expect("CREATE_DCT");
    let lkey_b = b.create_mkey(false, true);
    let land = b.alloc(64, 64);
    b.post_recv(&mut rmp, land, 64, lkey_b);
    let cq_a = a.create_cq(5);
    let mut dci = create_dci(&mut a, &cq_a, 5);
    let lkey_a = a.create_mkey(false, true);
    let src = a.alloc(64, 64);
    a.write(src, b"hello");
    let to = DcAddr {
        dct: dctn,
        key: KEY,
        gid: GID_B,
        mac: MAC_B,
    };
    let w = dc_wqe(&dci, opcode::SEND, to, None, (src, lkey_a, 5));
    a.post(&mut dci, &w, false);
    a.dev.poll();
    let frames = cxdirect_emu::testkit::rc::take_frames(&wire);
    assert_eq!(frames.len(), 1);
    let f = &frames[0];
    // IPv4 (the GIDs are IPv4-mapped): the BTH at 42, the DCETH after it.
    assert_eq!(f[42], 0xc0 | 0x04, "SEND ONLY under the DC prefix");
    assert_eq!(
        u32::from_be_bytes(f[46..50].try_into().unwrap()) & 0xff_ffff,
        dctn
    );
    assert_eq!(
        u32::from_be_bytes(f[50..54].try_into().unwrap()) & 0xff_ffff,
        0x10
    );
    assert_eq!(u64::from_be_bytes(f[54..62].try_into().unwrap()), KEY);
    assert_eq!(u32::from_be_bytes(f[62..66].try_into().unwrap()), dci.sqn);
    assert_eq!(
        u32::from_be_bytes(f[66..70].try_into().unwrap()),
        0x10,
        "connection PSN"
    );
    assert_eq!(&f[70..75], b"hello");
    // Cut inside the DCETH (eight of its sixteen bytes), lengths, checksum and ICRC redone:
    // dropped and counted, nothing placed.
    let mut cut = f[..62].to_vec();
    let total = (cut.len() + 4 - 14) as u16;
    cut[16..18].copy_from_slice(&total.to_be_bytes());
    cut[24..26].copy_from_slice(&[0, 0]);
    let sum = !cxdirect_emu::packet::ones_complement_sum(&cut[14..34], 0);
    cut[24..26].copy_from_slice(&sum.to_be_bytes());
    cut[38..40].copy_from_slice(&(total - 20).to_be_bytes());
    cut.extend_from_slice(&[0; 4]);
    let crc = icrc_v4(&cut);
    let n = cut.len();
    cut[n - 4..].copy_from_slice(&crc);
    let before = b.dev.counters();
    wire_b.transmit(PortId::B, &cut).unwrap();
    b.dev.poll();
    let after = b.dev.counters();
    assert_eq!(
        after.roce_icrc_drops, before.roce_icrc_drops,
        "the ICRC is good"
    );
    assert_eq!(after.roce_rx_drops, before.roce_rx_drops + 1);
    assert!(b.poll_cq(&mut cq_b).is_none());
    // The whole request is taken.
    wire_b.transmit(PortId::B, &frames[0]).unwrap();
    b.dev.poll();
    assert_eq!(b.read(land, 5), b"hello");
    let cqe = b.poll_cq(&mut cq_b).expect("the DCT's receive");
    assert_eq!((cqe_opcode(&cqe), cqe_qpn(&cqe)), (RESP_SEND, dctn));
}
