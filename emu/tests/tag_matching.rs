//! Hardware tag matching over RC, read as rdma-core's libmlx5 reads it: the XRQ mlx5_ib
//! creates for an `IBV_SRQT_TM` SRQ (`create_xrq_cmd`), the TAG_MATCHING WQEs
//! `mlx5_post_srq_ops` posts (`set_tm_seg`), and the CQEs `handle_tag_matching` and
//! `mlx5_cq_read_wc_opcode` / `_flags` / `_tm_info` read.

use cxdirect_emu::testkit::rc::{rc_wqe, RcPath, RcQp, RemoteRights, GID_A, GID_B, MAC_A, MAC_B};
use cxdirect_emu::testkit::rc_pair::RcPair;
use cxdirect_emu::testkit::{Cq, Host};
use cxdirect_emu::wire::{Impairments, PortId, Wire, WireConfig};
use cxdirect_emu::{Device, EmuConfig};
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::cqe::{Cqe64, CqeOpcode};
use cxdirect_hw::qp::{rq_type, service_type, CreateQpIn, CreateQpOut};
use cxdirect_hw::wq::WqType;
use cxdirect_hw::wqe::{opcode, CtrlSeg, DataSeg, SrqNextSeg, WQE_BB};
use cxdirect_hw::xrq::{
    cqe_app_op, tm_flags, tm_opcode, tmh_op, CreateXrqIn, CreateXrqOut, QueryXrqIn, QueryXrqOut,
    TmSeg, CQE_APP_TAG_MATCHING, QPC_OFFLOAD_TYPE_RNDV, TM_CQE_SUCCESS, WQE_OPCODE_TAG_MATCHING,
    XRQC_OFFLOAD_RNDV, XRQC_TOPOLOGY_TAG_MATCHING,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MEM: usize = 4 << 20;
/// Log2 of the matching list (mlx5_ib: `ilog2(max_num_tags) + 1`).
const LOG_LIST: u8 = 2;
const MSG: usize = 256;
/// ACK timeout code on a lossy wire: 4.096 us << 9, about 2 ms.
const LOSSY_ACK_TIMEOUT: u8 = 9;

struct Tm {
    p: RcPair,
    /// The XRQ's CQ on B.
    cq: Cq,
    xrqn: u32,
    /// The XRQ's ring (linked list of 32-byte WQEs) and doorbell record.
    ring: u64,
    dbr: u64,
    posted: u16,
    lkey_a: u32,
    lkey_b: u32,
    /// ACK timeout code of the QPs the tests connect.
    ack_timeout: u8,
}

/// CREATE_XRQ as `create_xrq_cmd` fills it for a TM SRQ: tag-matching topology, rendezvous
/// offload, list size, user index, CQ, a linked-list ring of `2^log` 32-byte WQEs.
fn create_xrq(h: &mut Host, cq: &Cq, log: u8) -> (u32, u64, u64) {
    let ring = h.alloc(4096, 4096);
    let dbr = h.alloc(8, 64);
    let mut input = Host::input(Opcode::CreateXrq, 0, 0x150 + 8);
    let mut cmd = CreateXrqIn::new(&mut input[..]).unwrap();
    {
        let mut ctx = cmd.xrq_context_mut();
        ctx.set_topology(XRQC_TOPOLOGY_TAG_MATCHING)
            .set_offload(XRQC_OFFLOAD_RNDV)
            .set_user_index(0x77)
            .set_cqn(cq.cqn);
        ctx.tag_matching_topology_context_mut()
            .set_log_matching_list_sz(LOG_LIST);
        ctx.wq_mut()
            .set_wq_type(WqType::LinkedList as u8)
            .set_pd(h.pd)
            .set_dbr_addr(dbr)
            .set_log_wq_stride(5)
            .set_log_wq_sz(log);
    }
    cmd.set_pas(0, ring).unwrap();
    let out = h.exec(&input, 16).expect("CREATE_XRQ");
    (CreateXrqOut::new(&out[..]).unwrap().xrqn(), ring, dbr)
}

fn setup() -> Tm {
    setup_on(None)
}

/// [`setup`] on a wire with `impairments` and a short ACK timeout, when given.
fn setup_on(impairments: Option<Impairments>) -> Tm {
    let impairments_given = impairments.is_some();
    let mut made = None;
    let make = |b: &mut Host| {
        let cq = b.create_cq(6);
        let (xrqn, ring, dbr) = create_xrq(b, &cq, 4);
        made = Some((cq, xrqn, ring, dbr));
        Some(xrqn)
    };
    let mut p = match impairments {
        None => RcPair::with_rmp_b(
            EmuConfig::default(),
            MEM,
            6,
            4,
            4,
            RcPath::to(GID_A, MAC_A, 0),
            make,
        ),
        Some(impairments) => {
            let cfg = |mac| EmuConfig {
                roce: true,
                mac,
                ..EmuConfig::default()
            };
            let (da, db) = (Device::new(cfg(MAC_A)), Device::new(cfg(MAC_B)));
            let wire = Arc::new(
                Wire::pair_with(WireConfig {
                    fifo_capacity: 4096,
                    impairments,
                })
                .unwrap(),
            );
            da.attach(wire.clone(), PortId::A, &[&db]);
            db.attach(wire.clone(), PortId::B, &[&da]);
            let path = RcPath {
                ack_timeout: LOSSY_ACK_TIMEOUT,
                ..RcPath::to(GID_A, MAC_A, 0)
            };
            let (a, b) = (Host::new(da, MEM), Host::new(db, MEM));
            RcPair::on_hosts_with_rmp_b(a, b, wire, 6, 4, 4, path, make)
        }
    };
    let (cq, xrqn, ring, dbr) = made.unwrap();
    let lkey_a = p.a.create_mkey(false, true);
    let lkey_b = p.b.create_mkey(false, true);
    let _ = &mut p;
    Tm {
        p,
        cq,
        xrqn,
        ring,
        dbr,
        posted: 0,
        lkey_a,
        lkey_b,
        ack_timeout: if impairments_given {
            LOSSY_ACK_TIMEOUT
        } else {
            RcPath::to(GID_A, MAC_A, 0).ack_timeout
        },
    }
}

impl Tm {
    /// `ibv_post_srq_recv`: an ordinary WQE (the list runs in ring order).
    fn post_recv(&mut self, buf: u64) {
        let i = self.posted;
        let mut w = [0u8; 32];
        SrqNextSeg::new(&mut w[..16])
            .unwrap()
            .set_next_wqe_index((i + 1) & 15);
        DataSeg::new(&mut w[16..])
            .unwrap()
            .set_byte_count(MSG as u32)
            .set_lkey(self.lkey_b)
            .set_addr(buf);
        self.p.b.write(self.ring + u64::from(i & 15) * 32, &w);
        self.posted += 1;
        self.p.b.write_be32(self.dbr, u32::from(self.posted));
    }

    /// A TAG_MATCHING WQE as `mlx5_post_srq_ops` builds it, on B's QP.
    fn list_op(
        &mut self,
        op: u8,
        flags: u8,
        index: u16,
        sw_cnt: u16,
        tag: Option<(u64, u64, u64)>,
    ) {
        let sq = &self.p.qp_b.sq;
        let mut w = [0u8; WQE_BB];
        let mut t = TmSeg::new(&mut w[16..48]).unwrap();
        t.set_opcode(op)
            .set_flags(flags)
            .set_index(index)
            .set_sw_cnt(sw_cnt);
        let mut ds = 3;
        if let Some((tag, mask, buf)) = tag {
            t.set_append_tag(tag).set_append_mask(mask);
            DataSeg::new(&mut w[48..64])
                .unwrap()
                .set_byte_count(MSG as u32)
                .set_lkey(self.lkey_b)
                .set_addr(buf);
            ds = 4;
        }
        CtrlSeg::new(&mut w[..16])
            .unwrap()
            .set_opcode(WQE_OPCODE_TAG_MATCHING)
            .set_wqe_index(sq.pi)
            .set_qpn_or_sqn(sq.sqn)
            .set_ds(ds);
        self.p.b.post(&mut self.p.qp_b.sq, &w, false);
    }

    /// A SEND of `data` from A's QP `qp`.
    fn send_on(&mut self, qp: &mut RcQp, data: &[u8]) {
        let buf = self.p.a.alloc(MSG as u64, 64);
        self.p.a.write(buf, data);
        let w = rc_wqe(
            &qp.sq,
            opcode::SEND,
            0,
            None,
            None,
            (buf, self.lkey_a, data.len() as u32),
        );
        self.p.a.post(&mut qp.sq, &w, false);
        self.p.settle();
    }

    /// A SEND of `data` from A.
    fn send(&mut self, data: &[u8]) {
        let buf = self.p.a.alloc(MSG as u64, 64);
        self.p.a.write(buf, data);
        let w = rc_wqe(
            &self.p.qp_a.sq,
            opcode::SEND,
            0,
            None,
            None,
            (buf, self.lkey_a, data.len() as u32),
        );
        self.p.a.post(&mut self.p.qp_a.sq, &w, false);
        self.p.settle();
    }

    fn cqes(&mut self) -> Vec<Vec<u8>> {
        std::iter::from_fn(|| self.p.b.poll_cq(&mut self.cq)).collect()
    }

    fn query(&mut self) -> (u16, u16, u16) {
        let mut input = Host::input(Opcode::QueryXrq, 0, 0x10);
        QueryXrqIn::new(&mut input[..]).unwrap().set_xrqn(self.xrqn);
        let out = self.p.b.exec(&input, 0x150).expect("QUERY_XRQ");
        let o = QueryXrqOut::new(&out[..]).unwrap();
        let ctx = o.xrq_context();
        let t = ctx.tag_matching_topology_context();
        (t.append_next_index(), t.sw_phase_cnt(), t.hw_phase_cnt())
    }
}

fn tmh(op: u8, tag: u64, payload: u8) -> Vec<u8> {
    let mut m = vec![payload; MSG];
    m[..16].fill(0);
    m[0] = op;
    m[4..8].copy_from_slice(&0xabcdu32.to_be_bytes());
    m[8..16].copy_from_slice(&tag.to_be_bytes());
    m
}

/// (opcode, app, app_op, app_info, tag in the TMH copy, wqe_counter, byte_cnt)
fn read(c: &[u8]) -> (u8, u8, u8, u16, u64, u16, u32) {
    let q = Cqe64::new(c).unwrap();
    (
        q.opcode(),
        q.app(),
        q.app_op(),
        q.app_info(),
        u64::from_be_bytes(c[8..16].try_into().unwrap()),
        q.wqe_counter(),
        q.byte_cnt(),
    )
}

const SIGNALED: u8 = tm_flags::CQE_REQ;
const NO_PACKET: u8 = CqeOpcode::NoPacket as u8;
const RESP_SEND: u8 = CqeOpcode::RespSend as u8;

#[test]
fn tags_are_appended_and_removed_with_their_completions() {
    let mut t = setup();
    let buf = t.p.b.alloc(MSG as u64, 64);
    // libmlx5's free list starts at entry 0 and names entry 1 next.
    t.list_op(tm_opcode::APPEND, SIGNALED, 1, 0, Some((5, 0xffff, buf)));
    t.list_op(tm_opcode::APPEND, SIGNALED, 2, 0, Some((6, 0xffff, buf)));
    t.list_op(tm_opcode::REMOVE, SIGNALED, 0, 0, None);
    t.list_op(tm_opcode::REMOVE, SIGNALED, 0, 0, None);
    t.list_op(tm_opcode::NOP, SIGNALED | tm_flags::SW_CNT, 0, 3, None);
    let cqes = t.cqes();
    let ops: Vec<_> = cqes
        .iter()
        .map(|c| (read(c).0, read(c).1, read(c).2))
        .collect();
    let tm = |op| (NO_PACKET, CQE_APP_TAG_MATCHING, op);
    assert_eq!(
        ops,
        [
            tm(cqe_app_op::APPEND),
            tm(cqe_app_op::APPEND),
            tm(cqe_app_op::REMOVE),
            tm(cqe_app_op::REMOVE),
            tm(cqe_app_op::NOOP)
        ]
    );
    let success = |c: &Vec<u8>| u32::from_be_bytes(c[..4].try_into().unwrap()) & TM_CQE_SUCCESS;
    assert_ne!(success(&cqes[2]), 0, "entry 0 held a tag");
    assert_eq!(success(&cqes[3]), 0, "entry 0 was removed already");
    assert_eq!(
        Cqe64::new(&cqes[0][..]).unwrap().srqn() & 0xff_ffff,
        0x77,
        "the XRQ's user index"
    );
    assert_eq!(
        t.query(),
        (2, 3, 0),
        "next entry, software and device phases"
    );
}

#[test]
fn an_expected_eager_message_lands_in_its_tag_without_the_header() {
    let mut t = setup();
    let (b1, b2) = (t.p.b.alloc(MSG as u64, 64), t.p.b.alloc(MSG as u64, 64));
    t.list_op(tm_opcode::APPEND, SIGNALED, 1, 0, Some((7, 0xffff, b1)));
    t.list_op(tm_opcode::APPEND, SIGNALED, 2, 0, Some((8, 0xffff, b2)));
    t.cqes();
    let msg = tmh(tmh_op::EAGER, 0x1_0008, b'c');
    t.send(&msg);
    let cqes = t.cqes();
    assert_eq!(cqes.len(), 1);
    let (op, app, app_op, info, tag, _, bytes) = read(&cqes[0]);
    assert_eq!(
        (op, app, app_op),
        (RESP_SEND, CQE_APP_TAG_MATCHING, cqe_app_op::CONSUMED_MSG)
    );
    assert_eq!(
        (info, tag),
        (1, 0x1_0008),
        "entry 1 (tag 8 under mask 0xffff)"
    );
    assert_eq!(bytes as usize, MSG - 16);
    assert_eq!(t.p.b.read(b2, MSG - 16), msg[16..]);
    // The entry was released: removing it fails.
    t.list_op(tm_opcode::REMOVE, SIGNALED, 1, 0, None);
    let c = t.cqes();
    assert_eq!(u32::from_be_bytes(c[0][..4].try_into().unwrap()), 0);
}

#[test]
fn unexpected_and_no_tag_messages_land_whole_in_ordinary_wqes() {
    let mut t = setup();
    let tagged = t.p.b.alloc(MSG as u64, 64);
    t.list_op(tm_opcode::APPEND, SIGNALED, 1, 0, Some((1, 0xffff, tagged)));
    t.cqes();
    let (r0, r1, r2) = (
        t.p.b.alloc(MSG as u64, 64),
        t.p.b.alloc(MSG as u64, 64),
        t.p.b.alloc(MSG as u64, 64),
    );
    t.post_recv(r0);
    t.post_recv(r1);
    t.post_recv(r2);
    let unexpected = tmh(tmh_op::EAGER, 0x1234, b'u');
    t.send(&unexpected);
    let c = t.cqes();
    let (op, app, app_op, _, tag, wqe, bytes) = read(&c[0]);
    assert_eq!(
        (op, app, app_op),
        (RESP_SEND, CQE_APP_TAG_MATCHING, cqe_app_op::UNEXPECTED)
    );
    assert_eq!((tag, wqe, bytes as usize), (0x1234, 0, MSG));
    assert_eq!(t.p.b.read(r0, MSG), unexpected, "headers and all");
    assert_eq!(t.query().2, 1, "counted in the device phase");
    // Out of step: even a tag the list holds is unexpected until software syncs.
    t.send(&tmh(tmh_op::EAGER, 1, b'v'));
    assert_eq!(read(&t.cqes()[0]).2, cqe_app_op::UNEXPECTED);
    t.list_op(tm_opcode::NOP, SIGNALED | tm_flags::SW_CNT, 0, 2, None);
    let sync = t.cqes();
    assert_eq!(
        u16::from_be_bytes([sync[0][4], sync[0][5]]),
        2,
        "hw_phase_cnt"
    );
    // In step again, and a no-tag message is no-tag whatever its tag says.
    let no_tag = tmh(tmh_op::NO_TAG, 1, b'n');
    t.send(&no_tag);
    let (_, _, app_op, _, tag, wqe, _) = read(&t.cqes()[0]);
    assert_eq!((app_op, tag, wqe), (cqe_app_op::NO_TAG, 0, 2));
    assert_eq!(t.p.b.read(r2, MSG), no_tag);
    t.send(&tmh(tmh_op::EAGER, 1, b'e'));
    assert_eq!(read(&t.cqes()[0]).2, cqe_app_op::CONSUMED_MSG);
}

#[test]
fn a_malformed_header_is_counted_and_delivered_as_no_tag() {
    let mut t = setup();
    let r = t.p.b.alloc(MSG as u64, 64);
    t.post_recv(r);
    t.post_recv(r);
    t.send(&[0xee; 8]);
    let mut bad = tmh(0x7f, 1, b'x');
    bad.truncate(40);
    t.send(&bad);
    let c = t.cqes();
    assert_eq!(c.len(), 2);
    for cqe in &c {
        assert_eq!(read(cqe).2, cqe_app_op::NO_TAG);
    }
    assert_eq!(t.p.b.dev.counters().tm_malformed, 2);
}

#[test]
fn an_append_into_a_held_entry_is_refused_with_an_error_cqe() {
    let mut t = setup();
    let buf = t.p.b.alloc(MSG as u64, 64);
    t.list_op(tm_opcode::APPEND, SIGNALED, 1, 0, Some((1, 0xffff, buf)));
    // Naming entry 0 (still held) as the next one, then appending there: the list is full.
    t.list_op(tm_opcode::APPEND, SIGNALED, 0, 0, Some((2, 0xffff, buf)));
    t.list_op(tm_opcode::APPEND, SIGNALED, 2, 0, Some((3, 0xffff, buf)));
    t.p.settle();
    let all: Vec<Vec<u8>> = t.cqes();
    assert_eq!(read(&all[0]).2, cqe_app_op::APPEND);
    assert_eq!(read(&all[1]).2, cqe_app_op::APPEND);
    // The refused WQE's error completes on B's QP CQ.
    let errs: Vec<Vec<u8>> = std::iter::from_fn(|| t.p.b.poll_cq(&mut t.p.cq_b)).collect();
    assert!(errs
        .iter()
        .any(|c| Cqe64::new(&c[..]).unwrap().opcode() == CqeOpcode::ReqErr as u8));
}

/// A rendezvous request as rdma-core's `test_tm_rndv` builds it: TMH (RNDV, tag), RVH (the
/// sender's buffer, its rkey, `len`), padded to the 64-byte `max_rndv_hdr_size`.
fn rndv(tag: u64, va: u64, rkey: u32, len: u32) -> Vec<u8> {
    let mut m = vec![0u8; 64];
    m[0] = tmh_op::RNDV;
    m[8..16].copy_from_slice(&tag.to_be_bytes());
    m[16..24].copy_from_slice(&va.to_be_bytes());
    m[24..28].copy_from_slice(&rkey.to_be_bytes());
    m[28..32].copy_from_slice(&len.to_be_bytes());
    m
}

/// The QP pair rdma-core's test connects over a TM SRQ: on B a QP without a send queue,
/// `offload_type` RNDV, its SRQ the XRQ (mlx5_ib's `create_qp_common` for `max_send_wr` 0 and
/// an `IBV_SRQT_TM` SRQ); on A an ordinary RC QP with its own receive ring. Returns (A's QP,
/// B's QPN).
fn rendezvous_pair(t: &mut Tm, offload: bool) -> (RcQp, u32) {
    let b = &mut t.p.b;
    let dbr = b.alloc(8, 64);
    let mut input = Host::input(Opcode::CreateQp, 0, 0x110);
    let mut cmd = CreateQpIn::new(&mut input[..]).unwrap();
    cmd.qpc_mut()
        .set_st(service_type::RC)
        .set_pm_state(3)
        .set_user_index(b.next_user_index)
        .set_pd(b.pd)
        .set_cqn_rcv(t.cq.cqn)
        .set_rq_type(rq_type::SRQ)
        .set_srqn_rmpn_xrqn(t.xrqn)
        .set_no_sq(true)
        .set_offload_type(if offload { QPC_OFFLOAD_TYPE_RNDV } else { 0 })
        .set_log_msg_max(30)
        .set_dbr_addr(dbr);
    b.next_user_index += 1;
    let out = b.exec(&input, 16).expect("CREATE_QP without a send queue");
    let server = CreateQpOut::new(&out[..]).unwrap().qpn();
    let client = t.p.a.create_rc_qp(&t.p.cq_a, 4, 4, None);
    let ack_timeout = t.ack_timeout;
    let path = RcPath {
        ack_timeout,
        ..RcPath::to(GID_A, MAC_A, client.qpn)
    };
    t.p.b.connect_rc(server, &path);
    let path = RcPath {
        ack_timeout,
        ..RcPath::to(GID_B, MAC_B, server)
    };
    t.p.a.connect_rc(client.qpn, &path);
    (client, server)
}

#[test]
fn a_matched_rendezvous_is_read_by_the_device_then_finished_with_a_fin() {
    let mut t = setup();
    let (mut client, _) = rendezvous_pair(&mut t, true);
    // The sender's payload behind a key the receiver may READ.
    let src = t.p.a.alloc(MSG as u64, 64);
    let payload: Vec<u8> = (0..MSG).map(|i| i as u8).collect();
    t.p.a.write(src, &payload);
    let pd_a = t.p.a.pd;
    let rights = RemoteRights {
        read: true,
        ..Default::default()
    };
    let rkey =
        t.p.a
            .create_remote_mkey(pd_a, src, MSG as u64, rights, 0x31);
    // The sender waits for the FIN in its own receive ring.
    let fin_buf = t.p.a.alloc(64, 64);
    let lkey_a = t.lkey_a;
    t.p.a.post_rc_recv(&mut client, fin_buf, 64, lkey_a);
    let dst = t.p.b.alloc(MSG as u64, 64);
    t.list_op(tm_opcode::APPEND, SIGNALED, 1, 0, Some((9, 0xffff, dst)));
    t.cqes();

    let request = rndv(9, src, rkey, MSG as u32);
    t.send_on(&mut client, &request);
    t.p.settle();
    let c = t.cqes();
    assert_eq!(c.len(), 2, "the match, then the data");
    let (op, app, app_op, info, tag, _, _) = read(&c[0]);
    assert_eq!(
        (op, app, app_op, info, tag),
        (RESP_SEND, 1, cqe_app_op::CONSUMED, 0, 9)
    );
    let (op, _, app_op, info, tag, _, bytes) = read(&c[1]);
    assert_eq!((op, app_op, info), (RESP_SEND, cqe_app_op::EXPECTED, 0));
    assert_eq!(
        (tag, bytes as usize),
        (0, MSG),
        "no TMH in the second completion"
    );
    assert_eq!(t.p.b.read(dst, MSG), payload);
    // A: its SEND's completion, then the FIN: the request's headers, operation FIN.
    let a: Vec<Vec<u8>> = std::iter::from_fn(|| t.p.a.poll_cq(&mut t.p.cq_a)).collect();
    let recv: Vec<_> = a
        .iter()
        .filter(|c| Cqe64::new(&c[..]).unwrap().opcode() == RESP_SEND)
        .collect();
    assert_eq!(recv.len(), 1, "one FIN");
    assert_eq!(Cqe64::new(&recv[0][..]).unwrap().byte_cnt(), 32);
    let mut fin = request[..32].to_vec();
    fin[0] = tmh_op::FIN;
    assert_eq!(t.p.a.read(fin_buf, 32), fin);
    // The entry is free again.
    t.list_op(tm_opcode::REMOVE, SIGNALED, 0, 0, None);
    assert_eq!(u32::from_be_bytes(t.cqes()[0][..4].try_into().unwrap()), 0);
}

#[test]
fn a_rendezvous_larger_than_its_tag_is_left_to_software() {
    let mut t = setup();
    let (mut client, _) = rendezvous_pair(&mut t, true);
    let dst = t.p.b.alloc(MSG as u64, 64);
    t.list_op(tm_opcode::APPEND, SIGNALED, 1, 0, Some((4, 0xffff, dst)));
    t.cqes();
    let request = rndv(4, 0x1000, 0x1234, MSG as u32 + 1);
    t.send_on(&mut client, &request);
    let c = t.cqes();
    assert_eq!(c.len(), 1);
    let (_, _, app_op, info, tag, _, _) = read(&c[0]);
    assert_eq!(
        (app_op, info, tag),
        (cqe_app_op::CONSUMED_MSG_SW_RNDV, 0, 4)
    );
    assert_eq!(t.p.b.read(dst, 64), request, "the headers land in the tag");
}

#[test]
fn a_rendezvous_on_a_qp_without_the_offload_is_unexpected() {
    let mut t = setup();
    let (mut client, _) = rendezvous_pair(&mut t, false);
    let dst = t.p.b.alloc(MSG as u64, 64);
    t.list_op(tm_opcode::APPEND, SIGNALED, 1, 0, Some((4, 0xffff, dst)));
    t.cqes();
    let r = t.p.b.alloc(MSG as u64, 64);
    t.post_recv(r);
    let request = rndv(4, 0x1000, 0x1234, 64);
    t.send_on(&mut client, &request);
    let c = t.cqes();
    let (_, _, app_op, _, tag, _, _) = read(&c[0]);
    assert_eq!((app_op, tag), (cqe_app_op::UNEXPECTED, 4));
    assert_eq!(t.p.b.read(r, 64), request);
}

#[test]
fn a_rendezvous_read_the_sender_refuses_cancels_the_tag() {
    let mut t = setup();
    let (mut client, _) = rendezvous_pair(&mut t, true);
    let dst = t.p.b.alloc(MSG as u64, 64);
    t.list_op(tm_opcode::APPEND, SIGNALED, 1, 0, Some((4, 0xffff, dst)));
    t.cqes();
    // An rkey the sender never made: its responder answers with a remote access NAK.
    t.send_on(&mut client, &rndv(4, 0x1000, 0xdead_0001, 64));
    t.p.settle();
    let c = t.cqes();
    let ops: Vec<u8> = c.iter().map(|c| read(c).2).collect();
    assert_eq!(
        ops,
        [cqe_app_op::CONSUMED, cqe_app_op::MSG_COMPLETION_CANCELED]
    );
    assert_eq!(read(&c[1]).3, 0, "the entry");
    // The entry was released.
    t.list_op(tm_opcode::REMOVE, SIGNALED, 0, 0, None);
    assert_eq!(u32::from_be_bytes(t.cqes()[0][..4].try_into().unwrap()), 0);
}

#[test]
fn xrq_commands_keep_to_xrqs() {
    let mut t = setup();
    // A QP draws from the XRQ: it stays.
    let mut destroy = Host::input(Opcode::DestroyXrq, 0, 0x10);
    cxdirect_hw::xrq::DestroyXrqIn::new(&mut destroy[..])
        .unwrap()
        .set_xrqn(t.xrqn);
    assert!(t.p.b.exec(&destroy, 16).is_err(), "XRQ in use");
    // It is no RMP.
    let mut query = Host::input(Opcode::QueryRmp, 0, 0x10);
    cxdirect_hw::wq::QueryRmpIn::new(&mut query[..])
        .unwrap()
        .set_rmpn(t.xrqn);
    assert!(t.p.b.exec(&query, 0x110).is_err(), "QUERY_RMP of an XRQ");
    // DC tag matching is not modelled.
    let cq = t.p.b.create_cq(4);
    let ring = t.p.b.alloc(4096, 4096);
    let dbr = t.p.b.alloc(8, 64);
    let mut input = Host::input(Opcode::CreateXrq, 0, 0x150 + 8);
    let mut cmd = CreateXrqIn::new(&mut input[..]).unwrap();
    {
        let pd = t.p.b.pd;
        let mut ctx = cmd.xrq_context_mut();
        ctx.set_topology(XRQC_TOPOLOGY_TAG_MATCHING)
            .set_dc(true)
            .set_cqn(cq.cqn);
        ctx.tag_matching_topology_context_mut()
            .set_log_matching_list_sz(LOG_LIST);
        ctx.wq_mut()
            .set_wq_type(WqType::LinkedList as u8)
            .set_pd(pd)
            .set_dbr_addr(dbr)
            .set_log_wq_stride(5)
            .set_log_wq_sz(4);
    }
    cmd.set_pas(0, ring).unwrap();
    assert!(t.p.b.exec(&input, 16).is_err(), "a DC XRQ");
    // Nor is a list past log_tag_matching_list_sz.
    let mut cmd = CreateXrqIn::new(&mut input[..]).unwrap();
    cmd.xrq_context_mut().set_dc(false);
    cmd.xrq_context_mut()
        .tag_matching_topology_context_mut()
        .set_log_matching_list_sz(11);
    assert!(t.p.b.exec(&input, 16).is_err(), "a list of 2^11");
}

#[test]
fn an_eager_message_over_several_packets_completes_its_match_then_its_data() {
    let mut t = setup();
    let big = 3000;
    let dst = t.p.b.alloc(4096, 64);
    // A tagged buffer of 4 KiB (the list operation's data segment carries MSG bytes: write
    // one by hand).
    let sq = &t.p.qp_b.sq;
    let mut w = [0u8; WQE_BB];
    TmSeg::new(&mut w[16..48])
        .unwrap()
        .set_opcode(tm_opcode::APPEND)
        .set_flags(SIGNALED)
        .set_index(1)
        .set_append_tag(0x55)
        .set_append_mask(u64::MAX);
    DataSeg::new(&mut w[48..64])
        .unwrap()
        .set_byte_count(4096)
        .set_lkey(t.lkey_b)
        .set_addr(dst);
    CtrlSeg::new(&mut w[..16])
        .unwrap()
        .set_opcode(WQE_OPCODE_TAG_MATCHING)
        .set_wqe_index(sq.pi)
        .set_qpn_or_sqn(sq.sqn)
        .set_ds(4);
    t.p.b.post(&mut t.p.qp_b.sq, &w, false);
    t.cqes();
    let mut msg: Vec<u8> = (0..big).map(|i| (i % 251) as u8).collect();
    msg[..16].copy_from_slice(&tmh(tmh_op::EAGER, 0x55, 0)[..16]);
    let src = t.p.a.alloc(4096, 64);
    t.p.a.write(src, &msg);
    let wqe = rc_wqe(
        &t.p.qp_a.sq,
        opcode::SEND,
        0,
        None,
        None,
        (src, t.lkey_a, big as u32),
    );
    t.p.a.post(&mut t.p.qp_a.sq, &wqe, false);
    t.p.settle();
    let c = t.cqes();
    let got: Vec<(u8, u16, u64)> = c
        .iter()
        .map(|c| (read(c).2, read(c).3, read(c).4))
        .collect();
    assert_eq!(
        got,
        [
            (cqe_app_op::CONSUMED, 0, 0x55),
            (cqe_app_op::EXPECTED, 0, 0)
        ],
        "the match at the first packet, the data at the last (MTU 1024)"
    );
    assert_eq!(read(&c[1]).6 as usize, big - 16);
    assert_eq!(t.p.b.read(dst, big - 16), msg[16..]);
}

#[test]
fn rendezvous_reads_and_fins_lost_on_the_wire_go_again() {
    let impairments = Impairments {
        seed: 0x7a6_0001,
        drop_probability: 0.2,
        ..Impairments::NONE
    };
    let mut t = setup_on(Some(impairments));
    let (mut client, _) = rendezvous_pair(&mut t, true);
    let src = t.p.a.alloc(MSG as u64, 64);
    let pd_a = t.p.a.pd;
    let rights = RemoteRights {
        read: true,
        ..Default::default()
    };
    let rkey =
        t.p.a
            .create_remote_mkey(pd_a, src, MSG as u64, rights, 0x32);
    let fin_buf = t.p.a.alloc(64, 64);
    let dst = t.p.b.alloc(MSG as u64, 64);
    let lkey_a = t.lkey_a;
    let mut next = 1u16;
    for round in 0..12u64 {
        let payload: Vec<u8> = (0..MSG).map(|i| (i as u64 + round) as u8).collect();
        t.p.a.write(src, &payload);
        t.p.a.post_rc_recv(&mut client, fin_buf, 64, lkey_a);
        next = (next + 1) % 4;
        t.list_op(
            tm_opcode::APPEND,
            SIGNALED,
            next,
            0,
            Some((round, u64::MAX, dst)),
        );
        assert_eq!(read(&t.cqes()[0]).2, cqe_app_op::APPEND);
        let request = rndv(round, src, rkey, MSG as u32);
        t.send_on(&mut client, &request);
        let deadline = Instant::now() + Duration::from_secs(20);
        let (mut got, mut fins) = (Vec::new(), 0);
        while (got.len() < 2 || fins < 1) && Instant::now() < deadline {
            t.p.b.dev.poll();
            t.p.a.dev.poll();
            got.extend(t.cqes().iter().map(|c| read(c).2));
            fins += std::iter::from_fn(|| t.p.a.poll_cq(&mut t.p.cq_a))
                .filter(|c| Cqe64::new(&c[..]).unwrap().opcode() == RESP_SEND)
                .count();
            std::thread::sleep(Duration::from_micros(200));
        }
        assert_eq!(
            got,
            [cqe_app_op::CONSUMED, cqe_app_op::EXPECTED],
            "round {round}"
        );
        assert_eq!(fins, 1, "round {round}: one FIN");
        assert_eq!(t.p.b.read(dst, MSG), payload, "round {round}");
    }
    assert!(
        t.p.b.dev.counters().roce_retransmits > 0,
        "something went again"
    );
}
