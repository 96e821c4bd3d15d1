//! RoCE v2 unreliable datagrams and the GSI QP (QP1) between the two functions of a pair:
//! UD SENDs land behind the 40-byte GRH area with the CQE fields libmlx5 and mlx5_ib read,
//! Q_Keys are checked, MADs go from QP1 to QP1, and hostile WQEs end in error CQEs.

use cxdirect_emu::pcap::PcapWriter;
use cxdirect_emu::testkit::rc::{GID_A, GID_B, MAC_A, MAC_B};
use cxdirect_emu::testkit::ud::{ud_wqe, UdAv, UdPair, QKEY_FROM_QP, QP1_QKEY, UD_QKEY};
use cxdirect_emu::testkit::{Cq, Host};
use cxdirect_emu::EmuConfig;
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::cqe::{Cqe64, CqeOpcode, CqeSyndrome, ErrCqe};
use cxdirect_hw::qp::{optpar, service_type, state, Qp2errIn, Qpc, Rst2initQpIn};
use cxdirect_hw::wqe::{opcode, CtrlSeg};
use std::io::Write;
use std::sync::{Arc, Mutex};

const MEM: usize = 4 << 20;

fn pair() -> UdPair {
    UdPair::new(EmuConfig::default(), MEM, 6, 4, 4)
}

fn drain(h: &Host, cq: &mut Cq) -> Vec<Vec<u8>> {
    std::iter::from_fn(|| h.poll_cq(cq)).collect()
}

fn cqe_opcode(cqe: &[u8]) -> u8 {
    cqe[63] >> 4
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(7) ^ seed).collect()
}

/// The IPv4 header checksum over `h` (0 when it is right).
fn ipv4_sum(h: &[u8]) -> u16 {
    let mut sum: u32 = h
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Sends `len` bytes of a pattern from A's UD QP with `av`, as `op` with `imm`; B has posted
/// one receive of `room` bytes. Returns A's and B's CQEs and B's buffer.
fn send_ud(
    p: &mut UdPair,
    op: u8,
    imm: u32,
    av: UdAv,
    len: u32,
    room: u32,
) -> (Vec<Vec<u8>>, Vec<Vec<u8>>, u64) {
    let lkey_a = p.a.create_mkey(false, true);
    let lkey_b = p.b.create_mkey(false, true);
    let src = p.a.alloc(8192, 4096);
    let dst = p.b.alloc(8192, 4096);
    p.a.write(src, &pattern(len as usize, 3));
    p.b.post_ud_recv(&mut p.ud_b, dst, room, lkey_b);
    let w = ud_wqe(&p.ud_a.sq, op, imm, &av, &[(src, lkey_a, len)]);
    p.a.post(&mut p.ud_a.sq, &w, false);
    p.settle();
    let a = drain(&p.a, &mut p.cq_a);
    let b = drain(&p.b, &mut p.cq_b);
    (a, b, dst)
}

fn av_to_b(p: &UdPair, q_key: u32) -> UdAv {
    UdAv::to(GID_B, MAC_B, p.ud_b.qpn, q_key)
}

/// libmlx5 (`handle_responder`, cq.c) and mlx5_ib (`handle_responder`, cq.c) read a UD
/// receive's CQE: byte count with the GRH area, source QP in `flags_rqpn` 23:0, GRH flag in
/// 29:28, RoCE network header type in 25:24 (2: IPv4), the P_Key where no immediate is; the
/// buffer starts with 20 zero bytes and the IPv4 header (`ib_get_rdma_header_version`).
#[test]
fn a_ud_send_lands_behind_the_grh_area_with_the_cqe_fields_linux_reads() {
    let mut p = pair();
    let av = av_to_b(&p, UD_QKEY);
    let (a, b, dst) = send_ud(&mut p, opcode::SEND, 0, av, 100, 1024);
    assert_eq!(a.len(), 1, "one requester CQE");
    let req = Cqe64::new(&a[0][..]).unwrap();
    assert_eq!(req.opcode(), CqeOpcode::Req as u8);
    assert_eq!(
        req.sop_drop(),
        opcode::SEND,
        "handle_good_req reads the WQE opcode"
    );
    assert_eq!(req.qpn(), p.ud_a.qpn);
    assert_eq!(req.wqe_counter(), 0);
    assert_eq!(b.len(), 1, "one responder CQE");
    let c = Cqe64::new(&b[0][..]).unwrap();
    assert_eq!(c.opcode(), CqeOpcode::RespSend as u8);
    assert_eq!(c.byte_cnt(), 140, "40 bytes of GRH area and the payload");
    assert_eq!(c.flags_rqpn() & 0xff_ffff, p.ud_a.qpn, "source QP");
    assert_eq!((c.flags_rqpn() >> 28) & 3, 1, "GRH in the buffer");
    assert_eq!((c.flags_rqpn() >> 24) & 3, 2, "RoCE v2 over IPv4");
    assert_eq!(c.imm_inval_pkey() & 0xffff, 0xffff, "the BTH P_Key");
    assert_eq!(c.qpn(), p.ud_b.qpn, "the local QP's own number");
    assert_eq!(c.wqe_counter(), 0);
    assert!(!c.has_vlan());
    assert!(c.l3_ok() && c.l4_ok());
    let got = p.b.read(dst, 140);
    assert_eq!(&got[..20], &[0u8; 20], "reserved part of the GRH area");
    let ip = &got[20..40];
    assert_eq!(ip[0], 0x45, "IPv4, five-word header");
    assert_eq!(ip[9], 17, "UDP");
    assert_eq!(&ip[12..16], &GID_A[12..], "source address");
    assert_eq!(&ip[16..20], &GID_B[12..], "destination address");
    assert_eq!(ipv4_sum(ip), 0, "a valid header checksum");
    assert_eq!(&got[40..], &pattern(100, 3)[..]);
    assert_eq!(p.b.dev.counters().ud_delivered, 1);
    p.teardown();
}

#[test]
fn immediate_data_reaches_the_receiver_cqe() {
    let mut p = pair();
    let av = av_to_b(&p, UD_QKEY);
    let (a, b, _) = send_ud(&mut p, opcode::SEND_IMM, 0xdead_beef, av, 8, 1024);
    assert_eq!(Cqe64::new(&a[0][..]).unwrap().sop_drop(), opcode::SEND_IMM);
    let c = Cqe64::new(&b[0][..]).unwrap();
    assert_eq!(c.opcode(), CqeOpcode::RespSendImm as u8);
    assert_eq!(
        &b[0][36..40],
        &0xdead_beefu32.to_be_bytes(),
        "immediate as sent"
    );
    assert_eq!(c.byte_cnt(), 48);
    p.teardown();
}

#[test]
fn a_wrong_q_key_is_dropped_and_counted_and_bit_31_sends_the_qp_s_own() {
    let mut p = pair();
    let av = av_to_b(&p, 0x2222_2222);
    let (a, b, _) = send_ud(&mut p, opcode::SEND, 0, av, 64, 1024);
    assert_eq!(
        a.len(),
        1,
        "the sender completes: UD has no acknowledgement"
    );
    assert!(b.is_empty(), "nothing delivered");
    assert_eq!(p.b.dev.counters().ud_qkey_drops, 1);
    // The receive WQE posted above is still there: the next datagram, with the QP's own
    // Q_Key (the same as B's), takes it.
    let lkey_a = p.a.create_mkey(false, true);
    let src = p.a.alloc(4096, 4096);
    let av = av_to_b(&p, QKEY_FROM_QP);
    let w = ud_wqe(&p.ud_a.sq, opcode::SEND, 0, &av, &[(src, lkey_a, 64)]);
    p.a.post(&mut p.ud_a.sq, &w, false);
    p.settle();
    let b = drain(&p.b, &mut p.cq_b);
    assert_eq!(b.len(), 1);
    assert_eq!(Cqe64::new(&b[0][..]).unwrap().byte_cnt(), 104);
    p.teardown();
}

#[test]
fn a_datagram_with_no_receive_posted_is_dropped_without_rnr() {
    let mut p = pair();
    let lkey_a = p.a.create_mkey(false, true);
    let src = p.a.alloc(4096, 4096);
    let av = av_to_b(&p, UD_QKEY);
    let w = ud_wqe(&p.ud_a.sq, opcode::SEND, 0, &av, &[(src, lkey_a, 64)]);
    p.a.post(&mut p.ud_a.sq, &w, false);
    p.settle();
    assert_eq!(drain(&p.a, &mut p.cq_a).len(), 1);
    assert!(drain(&p.b, &mut p.cq_b).is_empty());
    assert_eq!(p.b.dev.counters().ud_no_receive_drops, 1);
    assert_eq!(p.a.dev.counters().rx_frames, 0, "no NAK comes back");
    p.teardown();
}

#[test]
fn a_datagram_larger_than_the_receive_buffers_completes_with_a_local_length_error() {
    let mut p = pair();
    let av = av_to_b(&p, UD_QKEY);
    let (a, b, _) = send_ud(&mut p, opcode::SEND, 0, av, 100, 40 + 99);
    assert_eq!(cqe_opcode(&a[0]), CqeOpcode::Req as u8);
    assert_eq!(b.len(), 1);
    let e = ErrCqe::new(&b[0][..]).unwrap();
    assert_eq!(e.opcode(), CqeOpcode::RespErr as u8);
    assert_eq!(e.syndrome(), CqeSyndrome::LocalLength as u8);
    assert_eq!(e.qpn(), p.ud_b.qpn);
    // The QP keeps receiving.
    let (_, b, _) = send_ud(&mut p, opcode::SEND, 0, av, 100, 140);
    assert_eq!(cqe_opcode(&b[0]), CqeOpcode::RespSend as u8);
    p.teardown();
}

/// A datagram above the path MTU (the port's 1500 bytes carry 1024) cannot be sent.
#[test]
fn a_send_above_the_path_mtu_fails_with_a_local_length_error() {
    let mut p = pair();
    let av = av_to_b(&p, UD_QKEY);
    let (a, b, _) = send_ud(&mut p, opcode::SEND, 0, av, 1025, 4096);
    assert!(b.is_empty());
    let e = ErrCqe::new(&a[0][..]).unwrap();
    assert_eq!(e.opcode(), CqeOpcode::ReqErr as u8);
    assert_eq!(e.syndrome(), CqeSyndrome::LocalLength as u8);
    p.teardown();
}

/// ib_mad posts MADs with `remote_qkey = IB_QP_SET_QKEY` to QP 1 (core/mad.c); the packet
/// carries DestQP 1, SrcQP 1, the QP's Q_Key 0x80010000 and P_Key 0xffff, and lands in the
/// peer's GSI QP with source QP 1 and the firmware QPN in the CQE.
#[test]
fn a_mad_goes_from_qp1_to_qp1_with_the_well_known_q_key() {
    let mut p = pair();
    let cap = capture(&p);
    let lkey_a = p.a.create_mkey(false, true);
    let lkey_b = p.b.create_mkey(false, true);
    let mad = pattern(256, 9);
    let src = p.a.alloc(4096, 4096);
    let dst = p.b.alloc(4096, 4096);
    p.a.write(src, &mad);
    p.b.post_ud_recv(&mut p.gsi_b, dst, 296, lkey_b);
    let av = UdAv::to(GID_B, MAC_B, 1, QKEY_FROM_QP);
    // Two SGEs, as ib_mad sends a MAD: the 24-byte header, then the rest.
    let w = ud_wqe(
        &p.gsi_a.sq,
        opcode::SEND,
        0,
        &av,
        &[(src, lkey_a, 24), (src + 24, lkey_a, 232)],
    );
    p.a.post(&mut p.gsi_a.sq, &w, false);
    p.settle();
    let frames = frames_of(&p, &cap);
    assert_eq!(frames.len(), 1);
    let f = &frames[0];
    assert_eq!(f[42], 0x64, "UD SEND_ONLY");
    assert_eq!(&f[44..46], &[0xff, 0xff], "P_Key");
    assert_eq!(be32(f, 46) & 0xff_ffff, 1, "destination QP 1");
    assert_eq!(be32(f, 54), QP1_QKEY, "DETH Q_Key from the QP");
    assert_eq!(be32(f, 58) & 0xff_ffff, 1, "DETH source QP 1");
    assert_eq!(&f[62..62 + 256], &mad[..]);
    let a = drain(&p.a, &mut p.cq_a);
    assert_eq!(Cqe64::new(&a[0][..]).unwrap().qpn(), p.gsi_a.qpn);
    let b = drain(&p.b, &mut p.cq_b);
    let c = Cqe64::new(&b[0][..]).unwrap();
    assert_eq!(c.opcode(), CqeOpcode::RespSend as u8);
    assert_eq!(
        c.qpn(),
        p.gsi_b.qpn,
        "sop_drop_qpn: the firmware QPN, not 1"
    );
    assert_eq!(c.flags_rqpn() & 0xff_ffff, 1, "source QP 1");
    assert_eq!(c.byte_cnt(), 296);
    assert_eq!(c.imm_inval_pkey() & 0xffff, 0xffff);
    assert_eq!(p.b.read(dst + 40, 256), mad);
    // A MAD whose Q_Key is not the well-known one is dropped.
    p.b.post_ud_recv(&mut p.gsi_b, dst, 296, lkey_b);
    let av = UdAv::to(GID_B, MAC_B, 1, 0x8001_0001 & !QKEY_FROM_QP);
    let w = ud_wqe(&p.gsi_a.sq, opcode::SEND, 0, &av, &[(src, lkey_a, 256)]);
    p.a.post(&mut p.gsi_a.sq, &w, false);
    p.settle();
    assert!(drain(&p.b, &mut p.cq_b).is_empty());
    assert_eq!(p.b.dev.counters().ud_qkey_drops, 1);
    p.teardown();
}

/// An IPv6 source GID and destination: the packet is IPv6, the GRH area the IPv6 header and
/// the CQE's network header type 1.
#[test]
fn an_ipv6_datagram_carries_the_ipv6_header_in_the_grh_area() {
    let mut p = pair();
    let gid_a6 = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    let gid_b6 = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
    p.a.set_roce_gid(1, gid_a6, MAC_A);
    // The receiver takes RoCE only for a GID of its own table.
    p.b.set_roce_gid(1, gid_b6, MAC_B);
    let av = UdAv {
        sgid_index: 1,
        flow_label: 0x12345,
        tclass: 0x20,
        ..UdAv::to(gid_b6, MAC_B, p.ud_b.qpn, UD_QKEY)
    };
    let (_, b, dst) = send_ud(&mut p, opcode::SEND, 0, av, 30, 1024);
    let c = Cqe64::new(&b[0][..]).unwrap();
    assert_eq!((c.flags_rqpn() >> 24) & 3, 1, "RoCE v2 over IPv6");
    let grh = p.b.read(dst, 40);
    assert_eq!(grh[0] >> 4, 6);
    assert_eq!(be32(&grh, 0) & 0xf_ffff, 0x12345, "flow label");
    assert_eq!(&grh[8..24], &gid_a6);
    assert_eq!(&grh[24..40], &gid_b6);
    p.teardown();
}

fn qp_context(h: &mut Host, qpn: u32) -> Vec<u8> {
    let mut input = Host::input(Opcode::QueryQp, 0, 16);
    Qp2errIn::new(&mut input[..]).unwrap().set_qpn(qpn);
    let out = h.exec(&input, 0x1d0).expect("QUERY_QP");
    out[0x18..].to_vec()
}

/// The transitions take what mlx5_ib's `opt_mask` allows for UD: the P_Key index and Q_Key
/// at INIT2RTR, the Q_Key after; QUERY_QP answers them. Anything else is refused.
#[test]
fn ud_transitions_take_the_q_key_and_p_key_index_and_query_answers_them() {
    let mut p = pair();
    let ctx = qp_context(&mut p.b, p.ud_b.qpn);
    let c = Qpc::new(&ctx[..]).unwrap();
    assert_eq!(c.st(), service_type::UD);
    assert_eq!(c.state(), state::RTS);
    assert_eq!(c.q_key(), UD_QKEY);
    assert_eq!(c.mtu(), 5, "4096, as mlx5_ib writes for UD");
    assert_eq!(c.primary_address_path().vhca_port_num(), 1);
    let mut input = Host::input(Opcode::Rts2rtsQp, 0, 0x110);
    let mut cmd = Rst2initQpIn::new(&mut input[..]).unwrap();
    cmd.set_qpn(p.ud_b.qpn).set_opt_param_mask(optpar::Q_KEY);
    cmd.qpc_mut().set_q_key(0x4444);
    p.b.exec(&input, 16).expect("RTS2RTS with a new Q_Key");
    let ctx = qp_context(&mut p.b, p.ud_b.qpn);
    assert_eq!(Qpc::new(&ctx[..]).unwrap().q_key(), 0x4444);
    let mut input = Host::input(Opcode::Rts2rtsQp, 0, 0x110);
    Rst2initQpIn::new(&mut input[..])
        .unwrap()
        .set_qpn(p.ud_b.qpn)
        .set_opt_param_mask(optpar::RNR_TIMEOUT);
    assert!(p.b.exec(&input, 16).is_err(), "UD takes no RNR timer");
    // The GSI QP: QP1 in the context, the MAD Q_Key.
    let ctx = qp_context(&mut p.b, p.gsi_b.qpn);
    let c = Qpc::new(&ctx[..]).unwrap();
    assert_eq!(c.st(), service_type::QP1);
    assert_eq!(c.q_key(), QP1_QKEY);
    p.teardown();
}

/// Spoils a good WQE.
type Spoil<'a> = &'a dyn Fn(&mut Vec<u8>);

/// Hostile WQEs: one without a whole datagram segment, one of an opcode UD has not, one whose
/// key does not cover its data. Each completes in error (never a panic), the send queue goes
/// to the send queue error state and flushes what follows; SQERR2RTS brings it back.
#[test]
fn hostile_wqes_complete_in_error_and_the_send_queue_recovers() {
    let mut p = pair();
    let lkey_a = p.a.create_mkey(false, true);
    let src = p.a.alloc(4096, 4096);
    let av = av_to_b(&p, UD_QKEY);
    // The last case's `ds` runs past the producer index: the bad WQE spans everything posted,
    // so nothing is left to flush behind it.
    let cases: [(Spoil, CqeSyndrome, usize); 4] = [
        (
            &|w| {
                CtrlSeg::new(&mut w[..16]).unwrap().set_ds(2);
            },
            CqeSyndrome::LocalQpOperation,
            2,
        ),
        (
            &|w| {
                CtrlSeg::new(&mut w[..16])
                    .unwrap()
                    .set_opcode(opcode::RDMA_WRITE);
            },
            CqeSyndrome::LocalQpOperation,
            2,
        ),
        (
            &|w| {
                // The data segment's lkey names no key.
                w[68..72].copy_from_slice(&0x00ff_ff00u32.to_be_bytes());
            },
            CqeSyndrome::LocalProtection,
            2,
        ),
        (
            &|w| {
                // `ds` claims WQEBBs that were never posted.
                CtrlSeg::new(&mut w[..16]).unwrap().set_ds(60);
            },
            CqeSyndrome::LocalQpOperation,
            1,
        ),
    ];
    for (spoil, syndrome, completions) in cases {
        let mut bad = ud_wqe(&p.ud_a.sq, opcode::SEND, 0, &av, &[(src, lkey_a, 16)]);
        spoil(&mut bad);
        p.a.write_wqe(&mut p.ud_a.sq, &bad);
        let good = ud_wqe(&p.ud_a.sq, opcode::SEND, 0, &av, &[(src, lkey_a, 16)]);
        p.a.post(&mut p.ud_a.sq, &good, false);
        p.settle();
        let a = drain(&p.a, &mut p.cq_a);
        assert_eq!(
            a.len(),
            completions,
            "the bad WQE's error and the next one's flush"
        );
        let e = ErrCqe::new(&a[0][..]).unwrap();
        assert_eq!(e.opcode(), CqeOpcode::ReqErr as u8);
        assert_eq!(e.syndrome(), syndrome as u8);
        for flushed in &a[1..] {
            let e = ErrCqe::new(&flushed[..]).unwrap();
            assert_eq!(e.syndrome(), CqeSyndrome::WrFlushed as u8);
        }
        let ctx = qp_context(&mut p.a, p.ud_a.qpn);
        assert_eq!(Qpc::new(&ctx[..]).unwrap().state(), state::SQER);
        assert!(drain(&p.b, &mut p.cq_b).is_empty());
        p.a.modify_qp(Opcode::Sqerr2rtsQp, p.ud_a.qpn, |_| {});
    }
    // Back in RTS, a good datagram goes.
    let (a, b, _) = send_ud(&mut p, opcode::SEND, 0, av, 16, 1024);
    assert_eq!(cqe_opcode(&a[0]), CqeOpcode::Req as u8);
    assert_eq!(cqe_opcode(&b[0]), CqeOpcode::RespSend as u8);
    p.teardown();
}

/// 2ERR_QP flushes a UD QP's posted receives.
#[test]
fn a_ud_qp_moved_to_error_flushes_its_receives() {
    let mut p = pair();
    let lkey_b = p.b.create_mkey(false, true);
    let dst = p.b.alloc(4096, 4096);
    p.b.post_ud_recv(&mut p.ud_b, dst, 1024, lkey_b);
    p.b.post_ud_recv(&mut p.ud_b, dst, 1024, lkey_b);
    let mut input = Host::input(Opcode::Qp2errQp, 0, 16);
    Qp2errIn::new(&mut input[..]).unwrap().set_qpn(p.ud_b.qpn);
    p.b.exec(&input, 16).expect("2ERR_QP");
    let b = drain(&p.b, &mut p.cq_b);
    assert_eq!(b.len(), 2);
    for c in &b {
        let e = ErrCqe::new(&c[..]).unwrap();
        assert_eq!(e.opcode(), CqeOpcode::RespErr as u8);
        assert_eq!(e.syndrome(), CqeSyndrome::WrFlushed as u8);
    }
    p.teardown();
}

fn be32(bytes: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap())
}

/// A pcap sink the test reads back.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("capture").extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn capture(p: &UdPair) -> Capture {
    let cap = Capture::default();
    p.wire
        .set_pcap(PcapWriter::new(cap.clone()).expect("pcap header"))
        .expect("tap");
    cap
}

fn pcap_bytes(p: &UdPair, cap: &Capture) -> Vec<u8> {
    p.wire.flush_pcap().expect("flush");
    cap.0.lock().expect("capture").clone()
}

fn frames_of(p: &UdPair, cap: &Capture) -> Vec<Vec<u8>> {
    let bytes = pcap_bytes(p, cap);
    let capture = pcap_parser::PcapCapture::from_file(&bytes).expect("a pcap file");
    capture.blocks.iter().map(|b| b.data.to_vec()).collect()
}

/// tshark's InfiniBand dissector reads UD and MAD traffic over UDP 4791: every frame is BTH
/// and DETH with the right opcode, destination QP, Q_Key and source QP, the ICRC is right,
/// and nothing is malformed.
#[test]
#[cfg_attr(
    not(has_tshark),
    ignore = "needs tshark on PATH: apt-get install tshark"
)]
fn tshark_decodes_ud_and_mad_traffic_with_good_icrcs() {
    let mut p = pair();
    let cap = capture(&p);
    let av = av_to_b(&p, UD_QKEY);
    send_ud(&mut p, opcode::SEND, 0, av, 200, 1024);
    send_ud(&mut p, opcode::SEND_IMM, 7, av, 33, 1024);
    let lkey_a = p.a.create_mkey(false, true);
    let src = p.a.alloc(4096, 4096);
    // A well-formed MAD for the dissector: base version 1, the CM class (0x07) version 2,
    // method GET, attribute ClassPortInfo (0x0001), transaction 0x1234; the rest zero.
    let mut mad = [0u8; 256];
    mad[..4].copy_from_slice(&[1, 0x07, 2, 0x01]);
    mad[8..16].copy_from_slice(&0x1234u64.to_be_bytes());
    mad[16..18].copy_from_slice(&1u16.to_be_bytes());
    p.a.write(src, &mad);
    let mad = UdAv::to(GID_B, MAC_B, 1, QKEY_FROM_QP);
    let w = ud_wqe(&p.gsi_a.sq, opcode::SEND, 0, &mad, &[(src, lkey_a, 256)]);
    p.a.post(&mut p.gsi_a.sq, &w, false);
    p.settle();
    let bytes = pcap_bytes(&p, &cap);
    let path = std::env::temp_dir().join(format!("cxdirect-ud-{}.pcap", std::process::id()));
    std::fs::write(&path, &bytes).expect("write the capture");
    let output = std::process::Command::new("tshark")
        .arg("-r")
        .arg(&path)
        .args(["-T", "fields", "-E", "separator=/t"])
        .args(["-e", "frame.protocols", "-e", "infiniband.bth.opcode"])
        .args(["-e", "infiniband.bth.destqp", "-e", "infiniband.deth.q_key"])
        .args([
            "-e",
            "infiniband.deth.srcqp",
            "-e",
            "infiniband.invariant.crc",
        ])
        .args(["-e", "_ws.malformed", "-e", "_ws.expert"])
        .output()
        .expect("tshark runs");
    let _ = std::fs::remove_file(&path);
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "tshark: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(rows.len(), 3, "{text}");
    let num = |s: &str| match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).unwrap(),
        None => s.parse().unwrap(),
    };
    let expect = [
        (
            0x64,
            u64::from(p.ud_b.qpn),
            u64::from(UD_QKEY),
            u64::from(p.ud_a.qpn),
        ),
        (
            0x65,
            u64::from(p.ud_b.qpn),
            u64::from(UD_QKEY),
            u64::from(p.ud_a.qpn),
        ),
        (0x64, 1, u64::from(QP1_QKEY), 1),
    ];
    let frames = frames_of(&p, &cap);
    for (i, (row, want)) in rows.iter().zip(expect).enumerate() {
        assert!(row[0].contains("udp:infiniband"), "frame {i}: {}", row[0]);
        assert!(
            !row[0].contains("malformed"),
            "frame {i} malformed: {}",
            row[0]
        );
        assert_eq!(row.get(6).copied().unwrap_or(""), "", "frame {i}: {row:?}");
        assert_eq!(num(row[1]), want.0, "frame {i}: opcode");
        assert_eq!(num(row[2]), want.1, "frame {i}: destination QP");
        assert_eq!(num(row[3]), want.2, "frame {i}: Q_Key");
        assert_eq!(num(row[4]), want.3, "frame {i}: source QP");
        let f = &frames[i];
        assert_eq!(
            num(row[5]),
            u64::from(be32(f, f.len() - 4)),
            "frame {i}: ICRC"
        );
    }
    p.teardown();
}
