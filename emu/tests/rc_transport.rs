//! The RoCE v2 RC transport on the wire: what an RC QP's send doorbell puts on the wire
//! (packets cut by path MTU, opcodes, PSNs, headers and ICRC, recomputed here with an
//! independent CRC-32).

use cxdirect_emu::pcap::PcapWriter;
use cxdirect_emu::testkit::rc::{
    lone_host, rc_wqe, take_frames, RcPath, RcQp, RemoteRights, UDP_SPORT,
};
use cxdirect_emu::testkit::rc_pair::RcPair;
use cxdirect_emu::testkit::{Cq, Host, Sq, IOVA_BASE};
use cxdirect_emu::wire::{PortId, Wire};
use cxdirect_emu::EmuConfig;
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::eqe::EventType;
use cxdirect_hw::qp::{mtu, state, Qpc};
use cxdirect_hw::wq::WqType;
use cxdirect_hw::wqe::{opcode, CtrlSeg, DataSeg};
use std::io::Write;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

const MEM: usize = 8 << 20;
const OWN_GID: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1];
const PEER_GID: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2];
const OWN_GID6: [u8; 16] = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
const PEER_GID6: [u8; 16] = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
const OWN_MAC: [u8; 6] = [0x02, 0xcd, 0, 0, 0, 1];
const PEER_MAC: [u8; 6] = [0x02, 0xcd, 0, 0, 0, 2];
const REMOTE_QPN: u32 = 0x4abc;

/// A function alone on port A of a pair wire ([`lone_host`]), RoCE on, GID index 0 at
/// [`OWN_GID`].
fn host() -> (Host, Arc<Wire>) {
    lone_host(EmuConfig::default(), MEM, OWN_GID, OWN_MAC)
}

/// The path every QP here takes: [`RcPath::to`] with the RNR timer [`MIN_RNR_NAK`].
fn path_to(peer_gid: [u8; 16], peer_mac: [u8; 6], remote_qpn: u32) -> RcPath {
    RcPath {
        min_rnr_nak: MIN_RNR_NAK,
        ..RcPath::to(peer_gid, peer_mac, remote_qpn)
    }
}

/// An RC QP (16-WQEBB send ring, 16-entry receive ring) in RTS over RoCE v2 (GID
/// `gid_index`, peer `peer_gid`), path MTU `mtu_code`, first PSN `psn`.
fn rc_qp(h: &mut Host, cq: &Cq, gid_index: u8, peer_gid: [u8; 16], mtu_code: u8, psn: u32) -> RcQp {
    let qp = h.create_rc_qp(cq, 4, 4, None);
    let path = RcPath {
        gid_index,
        mtu_code,
        send_psn: psn,
        ..path_to(peer_gid, PEER_MAC, REMOTE_QPN)
    };
    h.connect_rc(qp.qpn, &path);
    qp
}

/// A RoCE v2 packet taken apart.
#[derive(Debug)]
struct Roce {
    opcode: u8,
    pad: usize,
    dest_qpn: u32,
    ack_req: bool,
    psn: u32,
    /// Bytes after the BTH, before the pad and ICRC.
    rest: Vec<u8>,
}

/// The ICRC of RoCE v2 frame `frame` (IPv4 or IPv6, untagged), computed here from the IBA
/// rules with the crc32fast crate: eight bytes of ones for the LRH, then the IP, UDP and
/// transport headers with their variant fields set to ones, then the payload and pad.
fn expected_icrc(frame: &[u8]) -> [u8; 4] {
    let mut masked = vec![0xff; 8];
    let l4 = if frame[12..14] == [0x08, 0x00] {
        let mut m = frame[14..34].to_vec();
        m[1] = 0xff;
        m[8] = 0xff;
        m[10] = 0xff;
        m[11] = 0xff;
        masked.extend_from_slice(&m);
        34
    } else {
        let mut m = frame[14..54].to_vec();
        m[0] |= 0x0f;
        m[1] = 0xff;
        m[2] = 0xff;
        m[3] = 0xff;
        m[7] = 0xff;
        masked.extend_from_slice(&m);
        54
    };
    let mut m = frame[l4..frame.len() - 4].to_vec();
    m[6] = 0xff;
    m[7] = 0xff;
    m[8 + 4] = 0xff;
    masked.extend_from_slice(&m);
    crc32fast::hash(&masked).to_le_bytes()
}

/// Parses `frame` as Ethernet/IPv4 or IPv6/UDP 4791/BTH, checking every header field the path
/// sets and the ICRC, recomputed here with the crc32fast crate.
fn parse(frame: &[u8], v4: bool) -> Roce {
    assert_eq!(&frame[..6], &PEER_MAC, "destination MAC");
    assert_eq!(&frame[6..12], &OWN_MAC, "source MAC");
    let l4 = if v4 {
        assert_eq!(&frame[12..14], &[0x08, 0x00]);
        let ip = &frame[14..34];
        assert_eq!(ip[0], 0x45);
        assert_eq!(ip[9], 17);
        assert_eq!(
            u16::from_be_bytes([ip[2], ip[3]]) as usize,
            frame.len() - 14
        );
        assert_eq!(&ip[12..16], &OWN_GID[12..]);
        assert_eq!(&ip[16..20], &PEER_GID[12..]);
        let sum: u32 = ip
            .chunks(2)
            .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
            .sum();
        assert_eq!((sum & 0xffff) + (sum >> 16), 0xffff, "IPv4 header checksum");
        34
    } else {
        assert_eq!(&frame[12..14], &[0x86, 0xdd]);
        let ip = &frame[14..54];
        assert_eq!(ip[0] >> 4, 6);
        assert_eq!(ip[6], 17);
        assert_eq!(
            u16::from_be_bytes([ip[4], ip[5]]) as usize,
            frame.len() - 54
        );
        assert_eq!(&ip[8..24], &OWN_GID6);
        assert_eq!(&ip[24..40], &PEER_GID6);
        54
    };
    let udp = &frame[l4..l4 + 8];
    assert_eq!(u16::from_be_bytes([udp[0], udp[1]]), UDP_SPORT);
    assert_eq!(u16::from_be_bytes([udp[2], udp[3]]), 4791);
    assert_eq!(
        u16::from_be_bytes([udp[4], udp[5]]) as usize,
        frame.len() - l4
    );
    let bth = &frame[l4 + 8..];
    assert_eq!(&frame[frame.len() - 4..], &expected_icrc(frame), "ICRC");
    assert_eq!(u16::from_be_bytes([bth[2], bth[3]]), 0xffff, "P_Key");
    assert_eq!(bth[1] & 0x0f, 0, "transport header version");
    let pad = usize::from((bth[1] >> 4) & 3);
    let qpn_word = u32::from_be_bytes([bth[4], bth[5], bth[6], bth[7]]);
    let psn_word = u32::from_be_bytes([bth[8], bth[9], bth[10], bth[11]]);
    let body = &bth[12..bth.len() - 4];
    assert!(
        body[body.len() - pad..].iter().all(|&b| b == 0),
        "pad bytes zero"
    );
    Roce {
        opcode: bth[0],
        pad,
        dest_qpn: qpn_word & 0xff_ffff,
        ack_req: psn_word & 0x8000_0000 != 0,
        psn: psn_word & 0xff_ffff,
        rest: body[..body.len() - pad].to_vec(),
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Posts one WQE of `op` carrying `len` bytes and returns the packets it sent, parsed; checks
/// that the payloads put together are the message.
fn send_one(
    h: &mut Host,
    wire: &Wire,
    sq: &mut Sq,
    op: u8,
    len: usize,
    v4: bool,
) -> (Vec<Roce>, Vec<u8>) {
    let lkey = h.create_mkey(false, true);
    let data = pattern(len, len as u8);
    let src = h.alloc(len.max(1) as u64, 64);
    h.write(src, &data);
    let remote = matches!(op, opcode::RDMA_WRITE | opcode::RDMA_WRITE_IMM)
        .then_some((0x1234_5678_9000u64, 0xabcdu32));
    let w = rc_wqe(sq, op, 0xfeed_f00d, remote, None, (src, lkey, len as u32));
    h.post(sq, &w, false);
    let packets: Vec<Roce> = take_frames(wire).iter().map(|f| parse(f, v4)).collect();
    (packets, data)
}

#[test]
fn sends_and_writes_are_cut_by_path_mtu_with_opcodes_psns_headers_and_icrc() {
    let (mut h, wire) = host();
    let cq = h.create_cq(6);
    let first_psn = 0xff_fffe;
    let mut sq = rc_qp(&mut h, &cq, 0, PEER_GID, mtu::MTU_1024, first_psn).sq;
    let mtu_bytes = 1024;
    let mut psn = first_psn;
    let cases = [
        (opcode::SEND, [0x04, 0x00, 0x01, 0x02]),
        (opcode::SEND_IMM, [0x05, 0x00, 0x01, 0x03]),
        (opcode::RDMA_WRITE, [0x0a, 0x06, 0x07, 0x08]),
        (opcode::RDMA_WRITE_IMM, [0x0b, 0x06, 0x07, 0x09]),
    ];
    for (op, [only, first, middle, last]) in cases {
        for len in [
            0,
            1,
            mtu_bytes - 1,
            mtu_bytes,
            mtu_bytes + 1,
            3 * mtu_bytes + 5,
        ] {
            let (packets, data) = send_one(&mut h, &wire, &mut sq, op, len, true);
            let count = len.div_ceil(mtu_bytes).max(1);
            assert_eq!(packets.len(), count, "op {op:#x} len {len}");
            let mut got = Vec::new();
            for (n, p) in packets.iter().enumerate() {
                let is_first = n == 0;
                let is_last = n + 1 == count;
                let want = match (is_first, is_last) {
                    (true, true) => only,
                    (true, false) => first,
                    (false, false) => middle,
                    (false, true) => last,
                };
                assert_eq!(p.opcode, want, "op {op:#x} len {len} packet {n}");
                assert_eq!(p.psn, psn, "PSN wraps at 2^24");
                psn = (psn + 1) & 0xff_ffff;
                assert_eq!(p.ack_req, is_last, "AckReq on the last packet only");
                assert_eq!(p.dest_qpn, REMOTE_QPN);
                let mut rest = &p.rest[..];
                let write = matches!(op, opcode::RDMA_WRITE | opcode::RDMA_WRITE_IMM);
                if write && is_first {
                    assert_eq!(&rest[..8], &0x1234_5678_9000u64.to_be_bytes(), "RETH va");
                    assert_eq!(&rest[8..12], &0xabcdu32.to_be_bytes(), "RETH rkey");
                    assert_eq!(&rest[12..16], &(len as u32).to_be_bytes(), "RETH length");
                    rest = &rest[16..];
                }
                let imm = matches!(op, opcode::SEND_IMM | opcode::RDMA_WRITE_IMM);
                if imm && is_last {
                    assert_eq!(&rest[..4], &0xfeed_f00du32.to_be_bytes(), "ImmDt");
                    rest = &rest[4..];
                }
                assert!(rest.len() <= mtu_bytes);
                assert_eq!(p.pad, (4 - rest.len() % 4) % 4);
                got.extend_from_slice(rest);
            }
            assert_eq!(got, data, "op {op:#x} len {len}: payload intact");
        }
    }
    assert!(psn < first_psn, "the PSN wrapped past 2^24");
    h.destroy_qp(sq.sqn);
    h.teardown();
}

#[test]
fn an_ipv6_path_sends_ipv6_packets_with_a_matching_icrc() {
    let (mut h, wire) = host();
    h.set_roce_gid(1, OWN_GID6, OWN_MAC);
    let cq = h.create_cq(6);
    let mut sq = rc_qp(&mut h, &cq, 1, PEER_GID6, mtu::MTU_256, 7).sq;
    let (packets, data) = send_one(&mut h, &wire, &mut sq, opcode::SEND, 600, false);
    let opcodes: Vec<u8> = packets.iter().map(|p| p.opcode).collect();
    assert_eq!(opcodes, [0x00, 0x01, 0x02]);
    let psns: Vec<u32> = packets.iter().map(|p| p.psn).collect();
    assert_eq!(psns, [7, 8, 9]);
    let got: Vec<u8> = packets.iter().flat_map(|p| p.rest.clone()).collect();
    assert_eq!(got, data);
    h.destroy_qp(sq.sqn);
    h.teardown();
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

/// Two functions back to back ([`RcPair`]: A at [`OWN_GID`], B at [`PEER_GID`]), each with
/// one RC QP connected to the other's, path MTU 1024, and every frame on the wire captured.
type Pair = (RcPair, Capture);

const MTU: usize = 1024;
/// The RNR timer code every QP asks for: 20.48 ms.
const MIN_RNR_NAK: u8 = 22;
/// Long enough for an RNR timer to run out.
const PAST_RNR: std::time::Duration = std::time::Duration::from_millis(50);
/// Bytes of the biggest message the tests move.
const BIG: usize = 1 << 20;

fn pair(send_psn: u32) -> Pair {
    pair_with(send_psn, |_| None)
}

/// [`pair`] with A's retry limits: `rnr_retry` RNR NAKs accepted.
fn pair_with_rnr_retry(send_psn: u32, rnr_retry: u8) -> Pair {
    pair_full(send_psn, rnr_retry, |_| None)
}

/// [`pair`], B's QP taking its receives from the RMP `make_rmp` creates on B, if any.
fn pair_with(send_psn: u32, make_rmp: impl FnOnce(&mut Host) -> Option<u32>) -> Pair {
    pair_full(send_psn, 7, make_rmp)
}

fn pair_full(
    send_psn: u32,
    rnr_retry: u8,
    make_rmp: impl FnOnce(&mut Host) -> Option<u32>,
) -> Pair {
    let path = RcPath {
        send_psn,
        rnr_retry,
        ..path_to(PEER_GID, PEER_MAC, 0)
    };
    let p = RcPair::with_rmp_b(EmuConfig::default(), MEM, 8, 4, 4, path, make_rmp);
    let capture = Capture::default();
    p.wire
        .set_pcap(PcapWriter::new(capture.clone()).expect("pcap header"))
        .expect("tap");
    (p, capture)
}

/// Every frame on the wire so far: each must be RoCE v2 with a correct ICRC.
fn check_captured_icrcs(wire: &Wire, capture: &Capture) -> usize {
    wire.flush_pcap().expect("flush");
    let bytes = capture.0.lock().expect("capture").clone();
    let capture = pcap_parser::PcapCapture::from_file(&bytes).expect("a pcap file");
    for (i, block) in capture.blocks.iter().enumerate() {
        let f = block.data;
        assert_eq!(block.caplen, block.origlen, "frame {i} captured whole");
        assert_eq!(&f[36..38], &4791u16.to_be_bytes(), "frame {i}: UDP 4791");
        assert_eq!(&f[f.len() - 4..], &expected_icrc(f), "frame {i}: ICRC");
    }
    capture.blocks.len()
}

/// A PA memory key over all host memory in `pd`: local rights, remote read and atomics, and
/// remote write when `remote_write`.
fn remote_key(h: &mut Host, remote_write: bool, pd: u32) -> u32 {
    let rights = RemoteRights {
        read: true,
        write: remote_write,
        atomic: true,
    };
    h.create_remote_mkey(pd, IOVA_BASE, MEM as u64, rights, 0x5a)
}

/// Every CQE waiting on `cq`.
fn drain(h: &Host, cq: &mut Cq) -> Vec<Vec<u8>> {
    std::iter::from_fn(|| h.poll_cq(cq)).collect()
}

fn cqe_opcode(cqe: &[u8]) -> u8 {
    cqe[63] >> 4
}

fn be32(bytes: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

fn wqe_counter(cqe: &[u8]) -> u16 {
    u16::from_be_bytes([cqe[60], cqe[61]])
}

#[test]
fn send_write_and_write_with_immediate_arrive_intact_with_completions_on_both_sides() {
    let (mut p, cap) = pair(0xff_fc00);
    let lkey_a = p.a.create_mkey(false, true);
    let lkey_b = p.b.create_mkey(false, true);
    let pd_b = p.b.pd;
    let rkey_b = remote_key(&mut p.b, true, pd_b);
    let src = p.a.alloc(BIG as u64, 4096);
    let dst = p.b.alloc(BIG as u64 + 64, 4096);
    let mut sent = 0u32;
    for op in [
        opcode::SEND,
        opcode::SEND_IMM,
        opcode::RDMA_WRITE,
        opcode::RDMA_WRITE_IMM,
    ] {
        for len in [0, 1, MTU - 1, MTU, MTU + 1, BIG] {
            let what = format!("op {op:#x} len {len}");
            let data = pattern(len, op ^ len as u8);
            p.a.write(src, &data);
            p.b.write(dst, &vec![0xee; len + 64]);
            let consumes_receive = op != opcode::RDMA_WRITE;
            if consumes_receive {
                p.b.post_rc_recv(&mut p.qp_b, dst, BIG as u32, lkey_b);
            }
            let remote =
                (op == opcode::RDMA_WRITE || op == opcode::RDMA_WRITE_IMM).then_some((dst, rkey_b));
            let index = p.qp_a.sq.pi;
            let w = rc_wqe(
                &p.qp_a.sq,
                op,
                0x1234_0000 | u32::from(index),
                remote,
                None,
                (src, lkey_a, len as u32),
            );
            p.a.post(&mut p.qp_a.sq, &w, false);
            p.settle();
            sent += 1;
            assert_eq!(p.b.read(dst, len), data, "{what}: bytes intact");
            assert_eq!(
                p.b.read(dst + len as u64, 64),
                vec![0xee; 64],
                "{what}: nothing past the end"
            );
            let resp = drain(&p.b, &mut p.cq_b);
            if consumes_receive {
                assert_eq!(resp.len(), 1, "{what}: one responder CQE");
                let c = &resp[0];
                let want = match op {
                    opcode::SEND => 2,
                    opcode::SEND_IMM => 3,
                    _ => 1,
                };
                assert_eq!(cqe_opcode(c), want, "{what}: responder CQE opcode");
                assert_eq!(be32(c, 44), len as u32, "{what}: byte count");
                assert_eq!(be32(c, 56) & 0xff_ffff, p.qp_b.qpn, "{what}: QPN");
                assert_eq!(
                    wqe_counter(c),
                    p.qp_b.rq_pi.wrapping_sub(1),
                    "{what}: receive WQE counter"
                );
                // cqe_version 1: the QP's user index, not an SRQ number.
                assert_eq!(
                    be32(c, 32) & 0xff_ffff,
                    p.b.next_user_index - 1,
                    "{what}: B's QP's user index"
                );
                if op != opcode::SEND {
                    assert_eq!(
                        be32(c, 36),
                        0x1234_0000 | u32::from(index),
                        "{what}: immediate"
                    );
                }
            } else {
                assert!(
                    resp.is_empty(),
                    "{what}: a plain WRITE completes nothing at the responder"
                );
            }
            let req = drain(&p.a, &mut p.cq_a);
            assert_eq!(req.len(), 1, "{what}: one requester CQE");
            assert_eq!(cqe_opcode(&req[0]), 0, "{what}: REQ");
            assert_eq!(wqe_counter(&req[0]), index, "{what}: requester WQE counter");
            assert_eq!(be32(&req[0], 56), (u32::from(op) << 24) | p.qp_a.qpn);
        }
    }
    let frames = check_captured_icrcs(&p.wire, &cap);
    assert!(
        frames > 4 * (BIG / MTU) + sent as usize,
        "every packet and ACK captured ({frames})"
    );
    let counters = p.b.dev.counters();
    assert_eq!(counters.roce_icrc_drops, 0);
    assert_eq!(counters.roce_rx_drops, 0);
    assert_eq!(
        counters.roce_acks_sent,
        u64::from(sent),
        "one coalesced ACK per message"
    );
    p.teardown();
}

fn qp_state(h: &mut Host, qpn: u32) -> u8 {
    let mut input = Host::input(Opcode::QueryQp, 0, 0x10);
    cxdirect_hw::qp::Qp2errIn::new(&mut input[..])
        .expect("layout")
        .set_qpn(qpn);
    let out = h.exec(&input, 0x1d0).expect("QUERY_QP");
    Qpc::new(&out[0x18..]).expect("layout").state()
}

/// The error CQE fields: (opcode, syndrome, WQE opcode, WQE counter).
fn err_fields(cqe: &[u8]) -> (u8, u8, u8, u16) {
    (cqe_opcode(cqe), cqe[55], cqe[56], wqe_counter(cqe))
}

#[test]
fn a_refused_remote_access_naks_fails_the_wqe_flushes_the_rest_and_writes_nothing() {
    for case in ["outside the key", "no remote write", "other PD"] {
        let (mut p, cap) = pair(100);
        let lkey_a = p.a.create_mkey(false, true);
        let lkey_b = p.b.create_mkey(false, true);
        let dst = p.b.alloc(4096, 4096);
        p.b.write(dst, &[0xee; 4096]);
        let (rkey, raddr) = match case {
            "outside the key" => {
                let pd = p.b.pd;
                (remote_key(&mut p.b, true, pd), IOVA_BASE + MEM as u64 - 100)
            }
            "no remote write" => {
                let pd = p.b.pd;
                (remote_key(&mut p.b, false, pd), dst)
            }
            _ => {
                let other = p.b.alloc_pd();
                (remote_key(&mut p.b, true, other), dst)
            }
        };
        p.b.post_rc_recv(&mut p.qp_b, dst, 4096, lkey_b);
        // Every device access to the receive buffer or to the range the WRITE names, counted
        // at the IOMMU.
        let touched = [
            p.b.dev.iommu().watch(dst, 4096),
            p.b.dev.iommu().watch(raddr, 2000),
        ];
        let src = p.a.alloc(4096, 4096);
        p.a.write(src, &pattern(2000, 9));
        let w = rc_wqe(
            &p.qp_a.sq,
            opcode::RDMA_WRITE,
            0,
            Some((raddr, rkey)),
            None,
            (src, lkey_a, 2000),
        );
        p.a.write_wqe(&mut p.qp_a.sq, &w);
        let s = rc_wqe(&p.qp_a.sq, opcode::SEND, 0, None, None, (src, lkey_a, 16));
        p.a.post(&mut p.qp_a.sq, &s, false);
        p.settle();
        let req = drain(&p.a, &mut p.cq_a);
        assert_eq!(req.len(), 2, "{case}: the failed WQE and the flushed one");
        assert_eq!(
            err_fields(&req[0]),
            (13, 0x13, opcode::RDMA_WRITE, 0),
            "{case}: REQ_ERR with REMOTE_ACCESS_ERR"
        );
        assert_eq!(
            err_fields(&req[1]),
            (13, 0x05, opcode::SEND, 1),
            "{case}: WR_FLUSH_ERR"
        );
        assert_eq!(
            qp_state(&mut p.a, p.qp_a.qpn),
            state::ERR,
            "{case}: QP in error"
        );
        assert_eq!(
            p.b.read(dst, 4096),
            vec![0xee; 4096],
            "{case}: target untouched"
        );
        assert_eq!(
            touched.each_ref().map(|w| w.load(Ordering::Relaxed)),
            [0, 0],
            "{case}: the IOMMU saw no access to either range"
        );
        // The refusal is fatal to B's QP too: its posted receive is flushed, never filled,
        // and B's driver hears of the access violation.
        let resp = drain(&p.b, &mut p.cq_b);
        assert_eq!(resp.len(), 1, "{case}: the posted receive only");
        assert_eq!(
            (cqe_opcode(&resp[0]), resp[0][55]),
            (14, 0x05),
            "{case}: flushed, nothing received"
        );
        assert_eq!(
            qp_state(&mut p.b, p.qp_b.qpn),
            state::ERR,
            "{case}: B in error"
        );
        assert_eq!(
            qp_events(&mut p.b),
            [(EventType::WqAccessError as u8, p.qp_b.qpn)],
            "{case}: an access violation event for B's QP"
        );
        assert!(p.b.dev.counters().roce_naks_sent >= 1, "{case}: NAK sent");
        // Later WQEs on the QP in error are flushed at once.
        let s = rc_wqe(&p.qp_a.sq, opcode::SEND, 0, None, None, (src, lkey_a, 16));
        p.a.post(&mut p.qp_a.sq, &s, false);
        let req = drain(&p.a, &mut p.cq_a);
        assert_eq!(req.len(), 1);
        assert_eq!(err_fields(&req[0]), (13, 0x05, opcode::SEND, 2), "{case}");
        check_captured_icrcs(&p.wire, &cap);
        p.teardown();
    }
}

#[test]
fn a_send_without_a_receive_wqe_gets_an_rnr_nak_and_completes_nothing() {
    let (mut p, cap) = pair(5);
    let lkey_a = p.a.create_mkey(false, true);
    let src = p.a.alloc(4096, 4096);
    let w = rc_wqe(&p.qp_a.sq, opcode::SEND, 0, None, None, (src, lkey_a, 64));
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    let counters = p.b.dev.counters();
    assert_eq!(counters.roce_rnr_naks_sent, 1);
    assert_eq!(counters.roce_acks_sent, 0);
    assert!(drain(&p.b, &mut p.cq_b).is_empty());
    assert!(
        drain(&p.a, &mut p.cq_a).is_empty(),
        "the WQE waits for a retry"
    );
    p.wire.flush_pcap().expect("flush");
    let bytes = cap.0.lock().expect("capture").clone();
    let capture = pcap_parser::PcapCapture::from_file(&bytes).expect("a pcap file");
    let nak = capture.blocks.last().expect("frames").data;
    assert_eq!(nak[42], 0x11, "an acknowledgement");
    assert_eq!(be32(nak, 50) & 0xff_ffff, 5, "for the SEND's PSN");
    assert_eq!(
        nak[54],
        0x20 | MIN_RNR_NAK,
        "RNR NAK with the QP's min_rnr_nak timer"
    );
    assert_eq!(&nak[nak.len() - 4..], &expected_icrc(nak));
    p.teardown();
}

/// A SEND_ONLY to `dest_qpn` built entirely here, ICRC included.
fn hand_built_send(dest_qpn: u32, psn: u32, payload: &[u8]) -> Vec<u8> {
    let pad = (4 - payload.len() % 4) % 4;
    let udp_len = 8 + 12 + payload.len() + pad + 4;
    let mut f = Vec::new();
    f.extend_from_slice(&PEER_MAC);
    f.extend_from_slice(&OWN_MAC);
    f.extend_from_slice(&[0x08, 0x00]);
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&((20 + udp_len) as u16).to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&OWN_GID[12..]);
    ip[16..20].copy_from_slice(&PEER_GID[12..]);
    let sum: u32 = ip
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    let sum = (sum & 0xffff) + (sum >> 16);
    ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&1234u16.to_be_bytes());
    f.extend_from_slice(&4791u16.to_be_bytes());
    f.extend_from_slice(&(udp_len as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(&[0x04, (pad as u8) << 4, 0xff, 0xff]);
    f.extend_from_slice(&dest_qpn.to_be_bytes());
    f.extend_from_slice(&(0x8000_0000 | psn).to_be_bytes());
    f.extend_from_slice(payload);
    f.extend(std::iter::repeat_n(0, pad));
    f.extend_from_slice(&[0; 4]);
    let crc = expected_icrc(&f);
    let n = f.len();
    f[n - 4..].copy_from_slice(&crc);
    f
}

#[test]
fn a_bad_icrc_is_dropped_and_counted_and_a_good_one_is_taken() {
    let (mut p, _) = pair(77);
    let lkey_b = p.b.create_mkey(false, true);
    let dst = p.b.alloc(4096, 4096);
    p.b.post_rc_recv(&mut p.qp_b, dst, 4096, lkey_b);
    let payload = pattern(101, 3);
    let good = hand_built_send(p.qp_b.qpn, 77, &payload);
    let mut bad = good.clone();
    bad[60] ^= 0x01;
    for frame in [&bad, &good] {
        p.wire.transmit(PortId::A, frame).expect("transmit");
        p.b.dev.poll();
        if std::ptr::eq(frame, &bad) {
            assert_eq!(
                p.b.dev.counters().roce_icrc_drops,
                1,
                "the bad ICRC counted"
            );
            assert!(drain(&p.b, &mut p.cq_b).is_empty(), "and dropped");
        }
    }
    let resp = drain(&p.b, &mut p.cq_b);
    assert_eq!(resp.len(), 1, "the good copy is received");
    assert_eq!(be32(&resp[0], 44), 101);
    assert_eq!(p.b.read(dst, 101), payload);
    assert_eq!(p.b.dev.counters().roce_icrc_drops, 1);
    assert_eq!(p.b.dev.counters().roce_acks_sent, 1);
    p.teardown();
}

#[test]
fn duplicates_are_acked_again_and_a_gap_gets_one_sequence_nak() {
    let (mut p, _) = pair(10);
    let lkey_b = p.b.create_mkey(false, true);
    let dst = p.b.alloc(4096, 4096);
    p.b.post_rc_recv(&mut p.qp_b, dst, 4096, lkey_b);
    let first = hand_built_send(p.qp_b.qpn, 10, &pattern(8, 1));
    let ahead = hand_built_send(p.qp_b.qpn, 12, &pattern(8, 2));
    for frame in [&first, &first, &ahead, &ahead] {
        p.wire.transmit(PortId::A, frame).expect("transmit");
    }
    p.b.dev.poll();
    let c = p.b.dev.counters();
    assert_eq!(c.roce_duplicates, 1, "the repeated PSN 10");
    assert_eq!(c.roce_acks_sent, 2, "the ACK and the re-ACK");
    assert_eq!(
        c.roce_naks_sent, 1,
        "one NAK for the gap, however many packets follow it"
    );
    assert_eq!(drain(&p.b, &mut p.cq_b).len(), 1, "one message received");
    p.teardown();
}

#[test]
fn sends_on_a_qp_with_a_linked_list_rmp_take_its_wqes_in_list_order() {
    let ring = std::cell::Cell::new(None);
    let (mut p, cap) = pair_with(300, |b| {
        let (rmpn, rmp) = b.create_rmp_of(WqType::LinkedList, 2, 5, 0);
        ring.set(Some(rmp));
        Some(rmpn)
    });
    let rmp = ring.take().expect("made");
    let dbr = rmp.dbr;
    let lkey_a = p.a.create_mkey(false, true);
    let lkey_b = p.b.create_mkey(false, true);
    // The list runs 0 → 2 → 1 → 3.
    let next = [2u16, 3, 1, 0];
    let bufs: Vec<u64> = (0..4).map(|_| p.b.alloc(4096, 64)).collect();
    for (index, &to) in next.iter().enumerate() {
        p.b.write_linked_recv(&rmp, index as u16, to, bufs[index], 4096, lkey_b);
    }
    p.b.write_be32(dbr, 3);
    let src = p.a.alloc(4096, 64);
    for (n, want_index) in [0u16, 2, 1].into_iter().enumerate() {
        let data = pattern(1500 + n, n as u8);
        p.a.write(src, &data);
        let w = rc_wqe(
            &p.qp_a.sq,
            opcode::SEND,
            0,
            None,
            None,
            (src, lkey_a, data.len() as u32),
        );
        p.a.post(&mut p.qp_a.sq, &w, false);
        p.settle();
        let resp = drain(&p.b, &mut p.cq_b);
        assert_eq!(resp.len(), 1, "message {n}");
        assert_eq!(wqe_counter(&resp[0]), want_index, "message {n}: list order");
        // cqe_version 1: the QP's user index (libmlx5 finds the SRQ through the QP).
        assert_eq!(
            be32(&resp[0], 32) & 0xff_ffff,
            p.b.next_user_index - 1,
            "message {n}: user index"
        );
        assert_eq!(be32(&resp[0], 44), data.len() as u32);
        assert_eq!(p.b.read(bufs[usize::from(want_index)], data.len()), data);
        assert_eq!(
            drain(&p.a, &mut p.cq_a).len(),
            1,
            "message {n}: requester CQE"
        );
    }
    // Three posted, three taken: the fourth SEND finds none.
    let w = rc_wqe(&p.qp_a.sq, opcode::SEND, 0, None, None, (src, lkey_a, 8));
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    assert_eq!(p.b.dev.counters().roce_rnr_naks_sent, 1);
    check_captured_icrcs(&p.wire, &cap);
    p.teardown();
}

#[test]
fn rdma_read_brings_remote_bytes_back_in_segmented_responses() {
    let (mut p, cap) = pair(0xff_ff00);
    let lkey_a = p.a.create_mkey(false, true);
    let pd_b = p.b.pd;
    let rkey_b = remote_key(&mut p.b, false, pd_b);
    let remote = p.b.alloc(BIG as u64, 4096);
    let local = p.a.alloc(BIG as u64 + 64, 4096);
    for len in [0, 1, MTU - 1, MTU, MTU + 1, BIG] {
        let data = pattern(len, 0x40 ^ len as u8);
        p.b.write(remote, &data);
        p.a.write(local, &vec![0xee; len + 64]);
        let index = p.qp_a.sq.pi;
        let w = rc_wqe(
            &p.qp_a.sq,
            opcode::RDMA_READ,
            0,
            Some((remote, rkey_b)),
            None,
            (local, lkey_a, len as u32),
        );
        p.a.post(&mut p.qp_a.sq, &w, false);
        p.settle();
        assert_eq!(p.a.read(local, len), data, "len {len}: bytes read");
        assert_eq!(
            p.a.read(local + len as u64, 64),
            vec![0xee; 64],
            "len {len}: nothing past"
        );
        let req = drain(&p.a, &mut p.cq_a);
        assert_eq!(req.len(), 1, "len {len}: one requester CQE");
        assert_eq!(cqe_opcode(&req[0]), 0);
        assert_eq!(wqe_counter(&req[0]), index);
        assert_eq!(be32(&req[0], 44), len as u32, "len {len}: byte count");
        assert_eq!(
            be32(&req[0], 56),
            (u32::from(opcode::RDMA_READ) << 24) | p.qp_a.qpn
        );
        assert!(
            drain(&p.b, &mut p.cq_b).is_empty(),
            "a READ completes nothing at the responder"
        );
    }
    // Responses, not ACKs: one response per MTU of every READ, one request each.
    let frames = check_captured_icrcs(&p.wire, &cap);
    assert_eq!(frames, 6 + (1 + 1 + 1 + 1 + 2 + BIG / MTU));
    p.teardown();
}

#[test]
fn atomics_compare_swap_and_fetch_add_return_the_original_value() {
    let (mut p, cap) = pair(1000);
    let lkey_a = p.a.create_mkey(false, true);
    let pd_b = p.b.pd;
    let rkey_b = remote_key(&mut p.b, false, pd_b);
    let target = p.b.alloc(64, 64);
    p.b.write(target, &100u64.to_be_bytes());
    let result = p.a.alloc(64, 64);
    let steps = [
        (opcode::ATOMIC_FA, 5, 0, 100u64, 105u64),
        (opcode::ATOMIC_CS, 7, 105, 105, 7),
        (opcode::ATOMIC_CS, 9, 1, 7, 7),
        (opcode::ATOMIC_FA, u64::MAX, 0, 7, 6),
    ];
    for (op, swap_add, compare, original, after) in steps {
        let index = p.qp_a.sq.pi;
        let w = rc_wqe(
            &p.qp_a.sq,
            op,
            0,
            Some((target, rkey_b)),
            Some((swap_add, compare)),
            (result, lkey_a, 8),
        );
        p.a.post(&mut p.qp_a.sq, &w, false);
        p.settle();
        assert_eq!(
            p.a.read(result, 8),
            original.to_be_bytes(),
            "op {op:#x}: original"
        );
        assert_eq!(
            p.b.read(target, 8),
            after.to_be_bytes(),
            "op {op:#x}: target after"
        );
        let req = drain(&p.a, &mut p.cq_a);
        assert_eq!(req.len(), 1);
        assert_eq!(cqe_opcode(&req[0]), 0);
        assert_eq!(wqe_counter(&req[0]), index);
        assert_eq!(be32(&req[0], 44), 8);
    }
    // An unaligned target is refused: remote access error.
    let w = rc_wqe(
        &p.qp_a.sq,
        opcode::ATOMIC_FA,
        0,
        Some((target + 4, rkey_b)),
        Some((1, 0)),
        (result, lkey_a, 8),
    );
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    let req = drain(&p.a, &mut p.cq_a);
    assert_eq!(req.len(), 1);
    assert_eq!(err_fields(&req[0]), (13, 0x13, opcode::ATOMIC_FA, 4));
    assert_eq!(p.b.read(target, 8), 6u64.to_be_bytes());
    check_captured_icrcs(&p.wire, &cap);
    p.teardown();
}

#[test]
fn an_rnr_nak_is_retried_after_the_rnr_timer_and_then_completes() {
    let (mut p, cap) = pair(40);
    let lkey_a = p.a.create_mkey(false, true);
    let lkey_b = p.b.create_mkey(false, true);
    let src = p.a.alloc(4096, 64);
    let dst = p.b.alloc(4096, 64);
    let data = pattern(300, 5);
    p.a.write(src, &data);
    let w = rc_wqe(&p.qp_a.sq, opcode::SEND, 0, None, None, (src, lkey_a, 300));
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    assert_eq!(p.b.dev.counters().roce_rnr_naks_sent, 1);
    assert!(drain(&p.a, &mut p.cq_a).is_empty());
    p.b.post_rc_recv(&mut p.qp_b, dst, 4096, lkey_b);
    std::thread::sleep(PAST_RNR);
    p.settle();
    assert!(p.a.dev.counters().roce_retransmits >= 1, "sent again");
    assert_eq!(p.b.read(dst, 300), data);
    assert_eq!(drain(&p.b, &mut p.cq_b).len(), 1);
    let req = drain(&p.a, &mut p.cq_a);
    assert_eq!(req.len(), 1);
    assert_eq!(cqe_opcode(&req[0]), 0, "completed after the retry");
    check_captured_icrcs(&p.wire, &cap);
    p.teardown();
}

#[test]
fn rnr_retries_exhausted_fail_the_wqe_and_the_qp() {
    let (mut p, _) = pair_with_rnr_retry(40, 1);
    let lkey_a = p.a.create_mkey(false, true);
    let src = p.a.alloc(4096, 64);
    let w = rc_wqe(&p.qp_a.sq, opcode::SEND, 0, None, None, (src, lkey_a, 16));
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    assert!(drain(&p.a, &mut p.cq_a).is_empty(), "one RNR retry left");
    std::thread::sleep(PAST_RNR);
    p.settle();
    assert_eq!(p.b.dev.counters().roce_rnr_naks_sent, 2);
    let req = drain(&p.a, &mut p.cq_a);
    assert_eq!(req.len(), 1);
    assert_eq!(
        err_fields(&req[0]),
        (13, 0x16, opcode::SEND, 0),
        "RNR retry exceeded"
    );
    assert_eq!(qp_state(&mut p.a, p.qp_a.qpn), state::ERR);
    p.teardown();
}

#[test]
fn an_unacknowledged_send_is_retransmitted_on_ack_timeout_until_retries_run_out() {
    let (mut h, wire) = host();
    let mut cq = h.create_cq(6);
    let mut sq = h.create_rc_qp(&cq, 4, 4, None).sq;
    let path = RcPath {
        send_psn: 0xff_ffff,
        retry_count: 2,
        // 4.096 us << 13: about 34 ms.
        ack_timeout: 13,
        ..path_to(PEER_GID, PEER_MAC, REMOTE_QPN)
    };
    h.connect_rc(sq.sqn, &path);
    let lkey = h.create_mkey(false, true);
    let src = h.alloc(4096, 64);
    h.write(src, &pattern(1500, 1));
    let w = rc_wqe(&sq, opcode::SEND, 0, None, None, (src, lkey, 1500));
    h.post(&mut sq, &w, false);
    let first = take_frames(&wire);
    assert_eq!(first.len(), 2, "FIRST and LAST");
    h.dev.poll();
    assert!(take_frames(&wire).is_empty(), "nothing before the timeout");
    for retry in 0..2 {
        std::thread::sleep(std::time::Duration::from_millis(80));
        h.dev.poll();
        let again = take_frames(&wire);
        assert_eq!(
            again, first,
            "retry {retry}: the same packets, the same PSNs"
        );
        assert!(
            drain(&h, &mut cq).is_empty(),
            "retry {retry}: not failed yet"
        );
    }
    std::thread::sleep(std::time::Duration::from_millis(80));
    h.dev.poll();
    assert!(take_frames(&wire).is_empty(), "no third retry");
    let req = drain(&h, &mut cq);
    assert_eq!(req.len(), 1);
    assert_eq!(
        err_fields(&req[0]),
        (13, 0x15, opcode::SEND, 0),
        "retry exceeded"
    );
    assert_eq!(qp_state(&mut h, sq.sqn), state::ERR);
    assert_eq!(h.dev.counters().roce_retransmits, 2);
    h.destroy_qp(sq.sqn);
    h.teardown();
}

fn to_error(h: &mut Host, qpn: u32) {
    let mut input = Host::input(Opcode::Qp2errQp, 0, 0x10);
    cxdirect_hw::qp::Qp2errIn::new(&mut input[..])
        .expect("layout")
        .set_qpn(qpn);
    h.exec(&input, 16).expect("2ERR_QP");
}

#[test]
fn qp_to_error_flushes_every_outstanding_and_posted_send_and_every_posted_receive() {
    let (mut h, wire) = host();
    let mut cq = h.create_cq(6);
    let mut qp = rc_qp(&mut h, &cq, 0, PEER_GID, mtu::MTU_1024, 100);
    let lkey = h.create_mkey(false, true);
    let src = h.alloc(4096, 64);
    for _ in 0..3 {
        h.post_rc_recv(&mut qp, src, 4096, lkey);
    }
    let ops = [
        opcode::SEND,
        opcode::RDMA_WRITE,
        opcode::SEND_IMM,
        opcode::SEND,
        opcode::RDMA_WRITE,
    ];
    // Three sent and never acknowledged (nobody answers on port B)...
    for &op in &ops[..3] {
        let remote = (op == opcode::RDMA_WRITE).then_some((0x1000, 0x77));
        let w = rc_wqe(&qp.sq, op, 0, remote, None, (src, lkey, 100));
        h.post(&mut qp.sq, &w, false);
    }
    assert_eq!(take_frames(&wire).len(), 3, "three messages sent");
    // ...and two posted in the ring and its doorbell record, the doorbell never rung.
    for &op in &ops[3..] {
        let remote = (op == opcode::RDMA_WRITE).then_some((0x1000, 0x77));
        let w = rc_wqe(&qp.sq, op, 0, remote, None, (src, lkey, 100));
        h.write(qp.sq.buf + u64::from(qp.sq.pi & 15) * 64, &w);
        qp.sq.pi = qp.sq.pi.wrapping_add(1);
    }
    h.write_be32(qp.sq.dbr + 4, u32::from(qp.sq.pi));
    assert!(drain(&h, &mut cq).is_empty(), "nothing completed yet");
    to_error(&mut h, qp.sq.sqn);
    assert_eq!(qp_state(&mut h, qp.sq.sqn), state::ERR);
    let cqes = drain(&h, &mut cq);
    let sends: Vec<_> = cqes.iter().filter(|c| cqe_opcode(c) == 13).collect();
    let receives: Vec<_> = cqes.iter().filter(|c| cqe_opcode(c) == 14).collect();
    assert_eq!(cqes.len(), 8, "five sends and three receives");
    assert_eq!(sends.len(), 5, "every send WQE flushed once");
    for (i, (c, &op)) in sends.iter().zip(&ops).enumerate() {
        assert_eq!(err_fields(c), (13, 0x5, op, i as u16), "send WQE {i}");
        assert_eq!(be32(c, 56) & 0xff_ffff, qp.sq.sqn, "send WQE {i}: QPN");
    }
    assert_eq!(receives.len(), 3, "every receive WQE flushed once");
    for (i, c) in receives.iter().enumerate() {
        assert_eq!(c[55], 0x5, "receive WQE {i}: flush syndrome");
        assert_eq!(wqe_counter(c), i as u16, "receive WQE {i}");
        assert_eq!(be32(c, 56) & 0xff_ffff, qp.sq.sqn, "receive WQE {i}: QPN");
    }
    std::thread::sleep(std::time::Duration::from_millis(10));
    h.dev.poll();
    to_error(&mut h, qp.sq.sqn);
    assert!(drain(&h, &mut cq).is_empty(), "nothing flushed twice");
    assert!(
        take_frames(&wire).is_empty(),
        "nothing sent after the error"
    );
    h.destroy_qp(qp.sq.sqn);
    h.teardown();
}

#[test]
fn a_failed_two_wqebb_wqe_is_skipped_whole_and_the_wqes_after_it_are_flushed() {
    let (mut h, wire) = host();
    let mut cq = h.create_cq(6);
    let mut sq = rc_qp(&mut h, &cq, 0, PEER_GID, mtu::MTU_1024, 100).sq;
    let lkey = h.create_mkey(false, true);
    let src = h.alloc(4096, 64);
    // A SEND of ctrl and four data segments (two WQEBBs), the last one's key unknown.
    let mut bad = vec![0u8; 128];
    CtrlSeg::new(&mut bad[..16])
        .expect("layout")
        .set_opcode(opcode::SEND)
        .set_wqe_index(sq.pi)
        .set_qpn_or_sqn(sq.sqn)
        .set_ds(5)
        .set_ce(2);
    for (i, key) in [lkey, lkey, lkey, lkey ^ 0x00ff_ff00]
        .into_iter()
        .enumerate()
    {
        let at = 16 + 16 * i;
        DataSeg::new(&mut bad[at..at + 16])
            .expect("layout")
            .set_byte_count(10)
            .set_lkey(key)
            .set_addr(src);
    }
    h.write_wqe(&mut sq, &bad);
    let send = rc_wqe(&sq, opcode::SEND, 0, None, None, (src, lkey, 10));
    h.write_wqe(&mut sq, &send);
    let write = rc_wqe(
        &sq,
        opcode::RDMA_WRITE,
        0,
        Some((0x1000, 0x77)),
        None,
        (src, lkey, 10),
    );
    h.write_wqe(&mut sq, &write);
    assert_eq!(sq.pi, 4, "two WQEBBs, then one and one");
    h.ring(&mut sq, &write, false);
    assert!(take_frames(&wire).is_empty(), "nothing sent");
    let cqes = drain(&h, &mut cq);
    assert_eq!(cqes.len(), 3, "one error, two flushes");
    let (op, syndrome, wqe_op, counter) = err_fields(&cqes[0]);
    assert_eq!(
        (op, wqe_op, counter),
        (13, opcode::SEND, 0),
        "the bad WQE fails"
    );
    assert_ne!(syndrome, 0x5, "failed, not flushed");
    assert_eq!(
        err_fields(&cqes[1]),
        (13, 0x5, opcode::SEND, 2),
        "after both its WQEBBs"
    );
    assert_eq!(err_fields(&cqes[2]), (13, 0x5, opcode::RDMA_WRITE, 3));
    assert_eq!(qp_state(&mut h, sq.sqn), state::ERR);
    to_error(&mut h, sq.sqn);
    assert!(drain(&h, &mut cq).is_empty(), "nothing flushed twice");
    h.destroy_qp(sq.sqn);
    h.teardown();
}

/// An acknowledgement (AETH `syndrome`, MSN `msn`) for `psn` to `dest_qpn`, built here: from
/// the peer to this function, so its MACs and IP addresses are the SEND's the other way round
/// (a ConnectX takes RoCE only for its own MAC and GIDs).
fn hand_built_ack(dest_qpn: u32, psn: u32, syndrome: u8, msn: u32) -> Vec<u8> {
    let mut f = hand_built_send(dest_qpn, psn, &[]);
    f[..6].copy_from_slice(&OWN_MAC);
    f[6..12].copy_from_slice(&PEER_MAC);
    f[26..30].copy_from_slice(&PEER_GID[12..]);
    f[30..34].copy_from_slice(&OWN_GID[12..]);
    // SEND_ONLY without payload becomes ACKNOWLEDGE with an AETH: 4 more bytes.
    let n = f.len();
    f.truncate(n - 4);
    f[42] = 0x11;
    f[50] &= 0x7f;
    f.extend_from_slice(&((u32::from(syndrome) << 24) | msn).to_be_bytes());
    f.extend_from_slice(&[0; 4]);
    let ip_len = (f.len() - 14) as u16;
    f[16..18].copy_from_slice(&ip_len.to_be_bytes());
    f[24..26].copy_from_slice(&[0, 0]);
    let sum: u32 = f[14..34]
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    let sum = (sum & 0xffff) + (sum >> 16);
    f[24..26].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    let udp_len = (f.len() - 34) as u16;
    f[38..40].copy_from_slice(&udp_len.to_be_bytes());
    let crc = expected_icrc(&f);
    let n = f.len();
    f[n - 4..].copy_from_slice(&crc);
    f
}

#[test]
fn a_sequence_nak_sends_every_unacknowledged_wqe_again_and_one_ack_retires_them_all() {
    let (mut h, wire) = host();
    let mut cq = h.create_cq(6);
    let mut sq = rc_qp(&mut h, &cq, 0, PEER_GID, mtu::MTU_1024, 0xff_fffe).sq;
    let lkey = h.create_mkey(false, true);
    let src = h.alloc(4096, 64);
    h.write(src, &pattern(64, 2));
    let mut sent = Vec::new();
    for _ in 0..3 {
        let w = rc_wqe(&sq, opcode::SEND, 0, None, None, (src, lkey, 64));
        h.post(&mut sq, &w, false);
        sent.extend(take_frames(&wire));
    }
    let psns: Vec<u32> = sent.iter().map(|f| parse(f, true).psn).collect();
    assert_eq!(psns, [0xff_fffe, 0xff_ffff, 0]);
    // The first arrived; the responder expects the second.
    let nak = hand_built_ack(sq.sqn, 0xff_ffff, 0x60, 1);
    wire.transmit(PortId::B, &nak).expect("transmit");
    h.dev.poll();
    let req = drain(&h, &mut cq);
    assert_eq!(req.len(), 1, "the NAK acknowledges the first WQE");
    assert_eq!((cqe_opcode(&req[0]), wqe_counter(&req[0])), (0, 0));
    assert_eq!(
        take_frames(&wire),
        sent[1..],
        "the second and third again, same PSNs"
    );
    let ack = hand_built_ack(sq.sqn, 0, 0x1f, 3);
    wire.transmit(PortId::B, &ack).expect("transmit");
    h.dev.poll();
    let req = drain(&h, &mut cq);
    let counters: Vec<u16> = req.iter().map(|c| wqe_counter(c)).collect();
    assert_eq!(counters, [1, 2], "one coalesced ACK retires both, in order");
    assert!(req.iter().all(|c| cqe_opcode(c) == 0));
    h.destroy_qp(sq.sqn);
    h.teardown();
}

/// Runs tshark over the pcap file `path`: per frame, its protocol stack, BTH opcode, PSN,
/// destination QP and ICRC as tshark decodes them.
fn tshark_roce_fields(path: &std::path::Path) -> Vec<Vec<String>> {
    let output = std::process::Command::new("tshark")
        .arg("-r")
        .arg(path)
        .args(["-T", "fields", "-E", "separator=/t"])
        .args(["-e", "frame.protocols", "-e", "infiniband.bth.opcode"])
        .args(["-e", "infiniband.bth.psn", "-e", "infiniband.bth.destqp"])
        .args(["-e", "infiniband.invariant.crc"])
        .output()
        .expect("tshark runs (install it with `apt-get install -y tshark`)");
    assert!(
        output.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .expect("tshark prints UTF-8")
        .lines()
        .map(|line| line.split('\t').map(str::to_owned).collect())
        .collect()
}

/// A number as tshark prints it: decimal, or hexadecimal after `0x`.
fn tshark_number(field: &str) -> u64 {
    match field.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => field.parse(),
    }
    .unwrap_or_else(|e| panic!("bad tshark number {field:?}: {e}"))
}

#[test]
#[cfg_attr(
    not(has_tshark),
    ignore = "needs tshark on PATH: apt-get install tshark"
)]
fn tshark_decodes_the_capture_as_infiniband_over_udp_4791() {
    let (mut p, cap) = pair(0xff_fffe);
    let lkey_a = p.a.create_mkey(false, true);
    let lkey_b = p.b.create_mkey(false, true);
    let pd_b = p.b.pd;
    let rkey_b = remote_key(&mut p.b, true, pd_b);
    let src = p.a.alloc(8192, 4096);
    let dst = p.b.alloc(8192, 4096);
    p.a.write(src, &pattern(3000, 7));
    p.b.post_rc_recv(&mut p.qp_b, dst, 8192, lkey_b);
    let posts = [
        rc_wqe(
            &p.qp_a.sq,
            opcode::SEND_IMM,
            5,
            None,
            None,
            (src, lkey_a, 3000),
        ),
        rc_wqe(
            &p.qp_a.sq,
            opcode::RDMA_WRITE,
            0,
            Some((dst, rkey_b)),
            None,
            (src, lkey_a, 2000),
        ),
        rc_wqe(
            &p.qp_a.sq,
            opcode::RDMA_READ,
            0,
            Some((dst, rkey_b)),
            None,
            (src, lkey_a, 1500),
        ),
    ];
    for (n, mut w) in posts.into_iter().enumerate() {
        CtrlSeg::new(&mut w[..16])
            .expect("layout")
            .set_wqe_index(n as u16);
        p.a.post(&mut p.qp_a.sq, &w, false);
        p.settle();
    }
    assert_eq!(drain(&p.a, &mut p.cq_a).len(), 3, "every WQE completed");
    p.wire.flush_pcap().expect("flush");
    let bytes = cap.0.lock().expect("capture").clone();
    let path = std::env::temp_dir().join(format!("cxdirect-rc-{}.pcap", std::process::id()));
    std::fs::write(&path, &bytes).expect("write the capture");
    let seen = tshark_roce_fields(&path);
    let _ = std::fs::remove_file(&path);
    let frames = pcap_parser::PcapCapture::from_file(&bytes).expect("a pcap file");
    assert_eq!(seen.len(), frames.blocks.len(), "tshark saw every frame");
    // SEND 3 packets and an ACK, WRITE 2 and an ACK, READ a request and 2 responses.
    assert_eq!(
        seen.len(),
        3 + 1 + 2 + 1 + 1 + 2,
        "requests, ACKs and responses"
    );
    for (i, (fields, block)) in seen.iter().zip(&frames.blocks).enumerate() {
        let f = block.data;
        assert!(
            fields[0].contains("udp:infiniband"),
            "frame {i}: decoded as InfiniBand over UDP: {}",
            fields[0]
        );
        assert_eq!(
            tshark_number(&fields[1]),
            u64::from(f[42]),
            "frame {i}: opcode"
        );
        assert_eq!(
            tshark_number(&fields[2]),
            u64::from(be32(f, 50) & 0xff_ffff),
            "frame {i}: PSN"
        );
        assert_eq!(
            tshark_number(&fields[3]),
            u64::from(be32(f, 46) & 0xff_ffff),
            "frame {i}: destination QP"
        );
        assert_eq!(
            tshark_number(&fields[4]),
            u64::from(be32(f, f.len() - 4)),
            "frame {i}: ICRC field"
        );
        assert_eq!(&f[f.len() - 4..], &expected_icrc(f), "frame {i}: ICRC");
    }
    p.teardown();
}

/// Every frame on the wire so far, in order, both directions.
fn captured(wire: &Wire, capture: &Capture) -> Vec<Vec<u8>> {
    wire.flush_pcap().expect("flush");
    let bytes = capture.0.lock().expect("capture").clone();
    let capture = pcap_parser::PcapCapture::from_file(&bytes).expect("a pcap file");
    capture.blocks.iter().map(|b| b.data.to_vec()).collect()
}

/// Opcode and PSN of an IPv4 RoCE v2 frame.
fn bth_of(frame: &[u8]) -> (u8, u32) {
    (frame[42], be32(frame, 50) & 0xff_ffff)
}

/// The payload of an IPv4 RoCE v2 frame after the BTH and `skip` header bytes, before the pad
/// and ICRC.
fn payload_of(frame: &[u8], skip: usize) -> Vec<u8> {
    let pad = usize::from((frame[43] >> 4) & 3);
    frame[54 + skip..frame.len() - 4 - pad].to_vec()
}

const READ_REQUEST: u8 = 0x0c;
const READ_RESPONSE_FIRST: u8 = 0x0d;
const READ_RESPONSE_LAST: u8 = 0x0f;
const ATOMIC_ACKNOWLEDGE: u8 = 0x12;
const FETCH_ADD: u8 = 0x14;

#[test]
fn a_duplicate_read_is_answered_again_from_memory_from_its_psn() {
    let (mut p, cap) = pair(500);
    let lkey_a = p.a.create_mkey(false, true);
    let pd_b = p.b.pd;
    let rkey_b = remote_key(&mut p.b, false, pd_b);
    let remote = p.b.alloc(4096, 4096);
    let local = p.a.alloc(4096, 4096);
    let len = MTU + 100;
    p.b.write(remote, &pattern(len, 1));
    let w = rc_wqe(
        &p.qp_a.sq,
        opcode::RDMA_READ,
        0,
        Some((remote, rkey_b)),
        None,
        (local, lkey_a, len as u32),
    );
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    assert_eq!(p.a.read(local, len), pattern(len, 1));
    assert_eq!(drain(&p.a, &mut p.cq_a).len(), 1, "the READ completed");
    let request = captured(&p.wire, &cap)
        .into_iter()
        .find(|f| bth_of(f).0 == READ_REQUEST)
        .expect("the READ request on the wire");
    assert_eq!(bth_of(&request).1, 500);
    let before = captured(&p.wire, &cap).len();
    // The memory changed since; the requester's copy of the request arrives again.
    p.b.write(remote, &pattern(len, 2));
    p.wire.transmit(PortId::A, &request).expect("transmit");
    p.settle();
    let c = p.b.dev.counters();
    assert_eq!(c.roce_duplicates, 1, "the repeated READ counted");
    let replay: Vec<_> = captured(&p.wire, &cap).split_off(before);
    let responses: Vec<_> = replay.iter().skip(1).map(|f| bth_of(f)).collect();
    assert_eq!(
        responses,
        [(READ_RESPONSE_FIRST, 500), (READ_RESPONSE_LAST, 501)],
        "answered again from the duplicate's PSN: {replay:?}"
    );
    let mut data = payload_of(&replay[1], 4);
    data.extend(payload_of(&replay[2], 4));
    assert_eq!(data, pattern(len, 2), "read again from memory");
    assert!(
        drain(&p.a, &mut p.cq_a).is_empty(),
        "the requester completed the READ once"
    );
    assert_eq!(
        p.a.read(local, len),
        pattern(len, 1),
        "a response to a WQE already completed lands nowhere"
    );
    // The responder still expects the PSN after the READ: a SEND there is taken.
    let lkey_b = p.b.create_mkey(false, true);
    let dst = p.b.alloc(4096, 4096);
    p.b.post_rc_recv(&mut p.qp_b, dst, 4096, lkey_b);
    let src = p.a.alloc(64, 64);
    p.a.write(src, &pattern(40, 3));
    let w = rc_wqe(&p.qp_a.sq, opcode::SEND, 0, None, None, (src, lkey_a, 40));
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    assert_eq!(p.b.read(dst, 40), pattern(40, 3));
    assert_eq!(drain(&p.b, &mut p.cq_b).len(), 1);
    assert_eq!(drain(&p.a, &mut p.cq_a).len(), 1);
    check_captured_icrcs(&p.wire, &cap);
    p.teardown();
}

#[test]
fn a_duplicate_atomic_is_answered_with_the_saved_result_and_never_executed_twice() {
    let (mut p, cap) = pair(900);
    let lkey_a = p.a.create_mkey(false, true);
    let pd_b = p.b.pd;
    let rkey_b = remote_key(&mut p.b, false, pd_b);
    let target = p.b.alloc(64, 64);
    p.b.write(target, &100u64.to_be_bytes());
    let result = p.a.alloc(64, 64);
    let w = rc_wqe(
        &p.qp_a.sq,
        opcode::ATOMIC_FA,
        0,
        Some((target, rkey_b)),
        Some((5, 0)),
        (result, lkey_a, 8),
    );
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    assert_eq!(p.b.read(target, 8), 105u64.to_be_bytes());
    assert_eq!(drain(&p.a, &mut p.cq_a).len(), 1);
    let request = captured(&p.wire, &cap)
        .into_iter()
        .find(|f| bth_of(f).0 == FETCH_ADD)
        .expect("the FETCH_ADD on the wire");
    for copy in 1..=3u64 {
        let before = captured(&p.wire, &cap).len();
        p.wire.transmit(PortId::A, &request).expect("transmit");
        p.settle();
        assert_eq!(
            p.b.read(target, 8),
            105u64.to_be_bytes(),
            "copy {copy}: not executed again"
        );
        let replay = captured(&p.wire, &cap).split_off(before);
        assert_eq!(replay.len(), 2, "copy {copy}: the request and one answer");
        assert_eq!(bth_of(&replay[1]), (ATOMIC_ACKNOWLEDGE, 900));
        assert_eq!(
            payload_of(&replay[1], 4),
            100u64.to_be_bytes(),
            "copy {copy}: the value the first execution found"
        );
        assert_eq!(p.b.dev.counters().roce_duplicates, copy);
    }
    // A duplicate PSN the responder answered no atomic at is dropped unanswered.
    let mut stranger = request.clone();
    stranger[50..54].copy_from_slice(&(0x8000_0000u32 | 899).to_be_bytes());
    let n = stranger.len();
    let crc = expected_icrc(&stranger);
    stranger[n - 4..].copy_from_slice(&crc);
    let before = captured(&p.wire, &cap).len();
    let drops = p.b.dev.counters().roce_rx_drops;
    p.wire.transmit(PortId::A, &stranger).expect("transmit");
    p.settle();
    assert_eq!(captured(&p.wire, &cap).len(), before + 1, "no answer");
    assert_eq!(p.b.dev.counters().roce_rx_drops, drops + 1);
    assert_eq!(p.b.read(target, 8), 105u64.to_be_bytes());
    assert!(drain(&p.a, &mut p.cq_a).is_empty());
    check_captured_icrcs(&p.wire, &cap);
    p.teardown();
}

#[test]
fn a_qp_reset_and_connected_again_starts_both_rings_from_wqe_zero() {
    // Linux's mlx5_ib, moving a QP to RESET, sets its send and receive heads and both
    // doorbell record counters back to 0: the device's rings must start again from WQE 0.
    let (mut p, _) = pair(0x100);
    let lkey_a = p.a.create_mkey(false, true);
    let lkey_b = p.b.create_mkey(false, true);
    let src = p.a.alloc(4096, 4096);
    let dst = p.b.alloc(4096, 4096);
    // Three SENDs, so that both rings have moved past WQE 0.
    for i in 0..3u8 {
        p.a.write(src, &pattern(100, i));
        p.b.post_rc_recv(&mut p.qp_b, dst, 4096, lkey_b);
        let w = rc_wqe(&p.qp_a.sq, opcode::SEND, 0, None, None, (src, lkey_a, 100));
        p.a.post(&mut p.qp_a.sq, &w, false);
        p.settle();
        assert_eq!(drain(&p.a, &mut p.cq_a).len(), 1);
        assert_eq!(drain(&p.b, &mut p.cq_b).len(), 1);
    }
    // Both QPs to RESET and connected again, rings and doorbell records back at 0.
    for (h, sq) in [(&mut p.a, &mut p.qp_a.sq), (&mut p.b, &mut p.qp_b.sq)] {
        let mut input = Host::input(Opcode::Qp2rstQp, 0, 0x10);
        input[8..12].copy_from_slice(&sq.sqn.to_be_bytes());
        h.exec(&input, 16).expect("2RST_QP");
        h.write_be32(sq.dbr, 0);
        h.write_be32(sq.dbr + 4, 0);
        sq.pi = 0;
    }
    p.qp_b.rq_pi = 0;
    let path_a = RcPath {
        send_psn: 0x500,
        ..path_to(PEER_GID, PEER_MAC, p.qp_b.qpn)
    };
    let path_b = RcPath {
        receive_psn: 0x500,
        ..path_to(OWN_GID, OWN_MAC, p.qp_a.qpn)
    };
    p.a.connect_rc(p.qp_a.qpn, &path_a);
    p.b.connect_rc(p.qp_b.qpn, &path_b);
    let data = pattern(300, 77);
    p.a.write(src, &data);
    p.b.post_rc_recv(&mut p.qp_b, dst, 4096, lkey_b);
    let w = rc_wqe(&p.qp_a.sq, opcode::SEND, 0, None, None, (src, lkey_a, 300));
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    let req = drain(&p.a, &mut p.cq_a);
    assert_eq!(req.len(), 1, "the first WQE after the reset is executed");
    assert_eq!((cqe_opcode(&req[0]), wqe_counter(&req[0])), (0, 0));
    let resp = drain(&p.b, &mut p.cq_b);
    assert_eq!(
        resp.len(),
        1,
        "the first receive WQE after the reset is taken"
    );
    assert_eq!((cqe_opcode(&resp[0]), wqe_counter(&resp[0])), (2, 0));
    assert_eq!(p.b.read(dst, 300), data);
    p.teardown();
}

#[test]
fn a_send_with_invalidate_frees_the_rkey_and_reports_it_in_the_cqe() {
    for len in [100, MTU + 500] {
        let (mut p, cap) = pair(300);
        let lkey_a = p.a.create_mkey(false, true);
        let lkey_b = p.b.create_mkey(false, true);
        let pd_b = p.b.pd;
        let rkey_b = remote_key(&mut p.b, true, pd_b);
        let dst = p.b.alloc(4096, 4096);
        let target = p.b.alloc(4096, 4096);
        p.b.write(target, &[0xee; 4096]);
        let src = p.a.alloc(4096, 4096);
        p.a.write(src, &pattern(len, 4));
        // The key works before.
        let w = rc_wqe(
            &p.qp_a.sq,
            opcode::RDMA_WRITE,
            0,
            Some((target, rkey_b)),
            None,
            (src, lkey_a, 64),
        );
        p.a.post(&mut p.qp_a.sq, &w, false);
        p.settle();
        assert_eq!(p.b.read(target, 64), pattern(64, 4), "len {len}: written");
        assert_eq!(drain(&p.a, &mut p.cq_a).len(), 1);
        p.b.post_rc_recv(&mut p.qp_b, dst, 4096, lkey_b);
        let w = rc_wqe(
            &p.qp_a.sq,
            opcode::SEND_INVAL,
            rkey_b,
            None,
            None,
            (src, lkey_a, len as u32),
        );
        p.a.post(&mut p.qp_a.sq, &w, false);
        p.settle();
        let resp = drain(&p.b, &mut p.cq_b);
        assert_eq!(resp.len(), 1, "len {len}: one receive");
        assert_eq!(cqe_opcode(&resp[0]), 4, "len {len}: RESP_SEND_INV");
        assert_eq!(
            be32(&resp[0], 36),
            rkey_b,
            "len {len}: the invalidated rkey"
        );
        assert_eq!(be32(&resp[0], 44), len as u32, "len {len}: byte count");
        assert_eq!(p.b.read(dst, len), pattern(len, 4), "len {len}: data");
        let req = drain(&p.a, &mut p.cq_a);
        assert_eq!(req.len(), 1);
        assert_eq!(cqe_opcode(&req[0]), 0, "len {len}: the SEND completed");
        assert_eq!(
            be32(&req[0], 56),
            (u32::from(opcode::SEND_INVAL) << 24) | p.qp_a.qpn
        );
        assert!(
            mkey_free(&mut p.b, rkey_b),
            "len {len}: QUERY_MKEY says free"
        );
        // The key is gone: a WRITE through it is refused, nothing lands.
        let index = p.qp_a.sq.pi;
        let w = rc_wqe(
            &p.qp_a.sq,
            opcode::RDMA_WRITE,
            0,
            Some((target + 1024, rkey_b)),
            None,
            (src, lkey_a, 64),
        );
        p.a.post(&mut p.qp_a.sq, &w, false);
        p.settle();
        let req = drain(&p.a, &mut p.cq_a);
        assert_eq!(req.len(), 1);
        assert_eq!(
            err_fields(&req[0]),
            (13, 0x13, opcode::RDMA_WRITE, index),
            "len {len}: remote access error through the invalidated key"
        );
        assert_eq!(p.b.read(target + 1024, 64), vec![0xee; 64]);
        check_captured_icrcs(&p.wire, &cap);
        p.teardown();
    }
}

#[test]
fn a_send_with_invalidate_of_a_key_in_another_pd_fails_both_sides() {
    let (mut p, _) = pair(300);
    let lkey_a = p.a.create_mkey(false, true);
    let lkey_b = p.b.create_mkey(false, true);
    let other = p.b.alloc_pd();
    let foreign = remote_key(&mut p.b, true, other);
    let dst = p.b.alloc(4096, 4096);
    p.b.post_rc_recv(&mut p.qp_b, dst, 4096, lkey_b);
    let src = p.a.alloc(4096, 4096);
    let w = rc_wqe(
        &p.qp_a.sq,
        opcode::SEND_INVAL,
        foreign,
        None,
        None,
        (src, lkey_a, 32),
    );
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    let resp = drain(&p.b, &mut p.cq_b);
    assert_eq!(resp.len(), 1);
    assert_eq!(
        (cqe_opcode(&resp[0]), resp[0][55]),
        (14, 0x12),
        "RESP_ERR with the remote invalid request syndrome"
    );
    assert_eq!(qp_state(&mut p.b, p.qp_b.qpn), state::ERR);
    let req = drain(&p.a, &mut p.cq_a);
    assert_eq!(req.len(), 1);
    assert_eq!(err_fields(&req[0]), (13, 0x12, opcode::SEND_INVAL, 0));
    assert_eq!(
        p.b.dev.counters().roce_naks_sent,
        1,
        "an invalid request NAK"
    );
    assert!(
        !mkey_free(&mut p.b, foreign),
        "a key of another PD stays valid"
    );
    p.teardown();
}

/// Whether QUERY_MKEY reports `key` free (invalidated).
fn mkey_free(h: &mut Host, key: u32) -> bool {
    let mut input = Host::input(Opcode::QueryMkey, 0, 0x10);
    cxdirect_hw::mkey::QueryMkeyIn::new(&mut input[..])
        .expect("layout")
        .set_mkey_index(key >> 8);
    let out = h.exec(&input, 0x130).expect("QUERY_MKEY");
    cxdirect_hw::mkey::QueryMkeyOut::new(&out[..])
        .expect("layout")
        .memory_key_mkey_entry()
        .free()
}

/// ALLOC_Q_COUNTER: a new counter set's id.
fn alloc_q_counter(h: &mut Host) -> u8 {
    let out = h
        .exec(&Host::input(Opcode::AllocQCounter, 0, 16), 16)
        .expect("ALLOC_Q_COUNTER");
    cxdirect_hw::counters::AllocQCounterOut::new(&out[..])
        .expect("layout")
        .counter_set_id()
}

/// QUERY_Q_COUNTER of set `id`, clearing it when `clear`: the raw output.
fn query_q_counter(h: &mut Host, id: u8, clear: bool) -> Vec<u8> {
    let mut input = Host::input(Opcode::QueryQCounter, 0, 0x20);
    cxdirect_hw::counters::QueryQCounterIn::new(&mut input[..])
        .expect("layout")
        .set_counter_set_id(id)
        .set_clear(clear);
    h.exec(&input, 0x100).expect("QUERY_Q_COUNTER")
}

/// RTS2RTS naming counter set `id` (the optional counter set attribute).
fn bind_counter_set(h: &mut Host, qpn: u32, id: u8) {
    let mut input = Host::input(Opcode::Rts2rtsQp, 0, 0x110);
    let mut cmd = cxdirect_hw::qp::Rts2rtsQpIn::new(&mut input[..]).expect("layout");
    cmd.set_qpn(qpn)
        .set_opt_param_mask(cxdirect_hw::qp::optpar::COUNTER_SET_ID);
    cmd.qpc_mut().set_counter_set_id(id);
    h.exec(&input, 16).expect("RTS2RTS with a counter set");
}

#[test]
fn the_rc_transport_counts_in_the_q_counter_set_each_qp_names() {
    use cxdirect_hw::counters::QueryQCounterOut;
    let (mut p, cap) = pair_with_rnr_retry(700, 7);
    let set_a = alloc_q_counter(&mut p.a);
    let set_b = alloc_q_counter(&mut p.b);
    bind_counter_set(&mut p.a, p.qp_a.qpn, set_a);
    bind_counter_set(&mut p.b, p.qp_b.qpn, set_b);
    let lkey_a = p.a.create_mkey(false, true);
    let lkey_b = p.b.create_mkey(false, true);
    let pd_b = p.b.pd;
    let rkey_b = remote_key(&mut p.b, true, pd_b);
    let read_only_b = remote_key(&mut p.b, false, pd_b);
    let src = p.a.alloc(4096, 4096);
    let dst = p.b.alloc(4096, 4096);
    let target = p.b.alloc(64, 64);
    // A SEND before any receive is posted: one RNR NAK, then success.
    let w = rc_wqe(&p.qp_a.sq, opcode::SEND, 0, None, None, (src, lkey_a, 64));
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    p.b.post_rc_recv(&mut p.qp_b, dst, 4096, lkey_b);
    std::thread::sleep(PAST_RNR);
    p.settle();
    // One WRITE, two READs, one atomic.
    let w = rc_wqe(
        &p.qp_a.sq,
        opcode::RDMA_WRITE,
        0,
        Some((dst, rkey_b)),
        None,
        (src, lkey_a, 2000),
    );
    p.a.post(&mut p.qp_a.sq, &w, false);
    for _ in 0..2 {
        let w = rc_wqe(
            &p.qp_a.sq,
            opcode::RDMA_READ,
            0,
            Some((dst, rkey_b)),
            None,
            (src, lkey_a, 100),
        );
        p.a.post(&mut p.qp_a.sq, &w, false);
        p.settle();
    }
    let w = rc_wqe(
        &p.qp_a.sq,
        opcode::ATOMIC_FA,
        0,
        Some((target, rkey_b)),
        Some((1, 0)),
        (src, lkey_a, 8),
    );
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    assert_eq!(drain(&p.a, &mut p.cq_a).len(), 5, "all completed");
    // A READ request again: a duplicate. A SEND far ahead: out of sequence, one NAK.
    let read = captured(&p.wire, &cap)
        .into_iter()
        .find(|f| bth_of(f).0 == READ_REQUEST)
        .expect("a READ request");
    p.wire.transmit(PortId::A, &read).expect("transmit");
    let ahead = hand_built_send(p.qp_b.qpn, 0x1000, &pattern(8, 1));
    p.wire.transmit(PortId::A, &ahead).expect("transmit");
    p.wire.transmit(PortId::A, &ahead).expect("transmit");
    p.settle();
    // A WRITE through a key without remote write: refused; the SEND after it is flushed.
    let w = rc_wqe(
        &p.qp_a.sq,
        opcode::RDMA_WRITE,
        0,
        Some((dst, read_only_b)),
        None,
        (src, lkey_a, 16),
    );
    p.a.write_wqe(&mut p.qp_a.sq, &w);
    let w = rc_wqe(&p.qp_a.sq, opcode::SEND, 0, None, None, (src, lkey_a, 16));
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    let errors = drain(&p.a, &mut p.cq_a);
    assert_eq!(errors.len(), 2, "the refused WRITE and the flushed SEND");

    let out = query_q_counter(&mut p.b, set_b, true);
    let b = QueryQCounterOut::new(&out[..]).expect("layout");
    assert_eq!(b.rx_write_requests(), 2, "B: WRITEs received");
    assert_eq!(b.rx_read_requests(), 2, "B: READs received (new ones)");
    assert_eq!(b.rx_atomic_requests(), 1, "B: atomics received");
    assert_eq!(b.duplicate_request(), 1, "B: the repeated READ");
    assert_eq!(b.out_of_sequence(), 2, "B: both packets past the gap");
    assert_eq!(b.resp_remote_access_errors(), 1, "B: the refused WRITE");
    assert_eq!(b.resp_cqe_error(), 0, "B: no receive failed");
    let out = query_q_counter(&mut p.a, set_a, false);
    let a = QueryQCounterOut::new(&out[..]).expect("layout");
    assert_eq!(a.rnr_nak_retry_err(), 1, "A: the RNR NAK");
    assert_eq!(a.packet_seq_err(), 1, "A: the sequence NAK");
    assert_eq!(a.req_remote_access_errors(), 1, "A: the remote access NAK");
    assert_eq!(a.req_cqe_error(), 1, "A: the refused WRITE's CQE");
    assert_eq!(a.req_cqe_flush_error(), 1, "A: the flushed SEND");
    assert_eq!(a.local_ack_timeout_err(), 0, "A: no ACK timeout");
    assert_eq!(a.duplicate_request(), 0, "A received no request");
    // Cleared by the first query; counting again from zero.
    let out = query_q_counter(&mut p.b, set_b, false);
    let b = QueryQCounterOut::new(&out[..]).expect("layout");
    assert_eq!(
        (
            b.rx_write_requests(),
            b.duplicate_request(),
            b.out_of_sequence()
        ),
        (0, 0, 0),
        "B: cleared"
    );
    p.teardown();
}

/// One 64-byte RDMA WRITE from A's QP into a region of B, posted and completed, as often as
/// it is called.
struct Writer {
    lkey_a: u32,
    rkey_b: u32,
    src: u64,
    dst: u64,
}

impl Writer {
    fn new(p: &mut RcPair) -> Self {
        let lkey_a = p.a.create_mkey(false, true);
        let pd_b = p.b.pd;
        let rkey_b = remote_key(&mut p.b, true, pd_b);
        let src = p.a.alloc(4096, 4096);
        let dst = p.b.alloc(4096, 4096);
        Self {
            lkey_a,
            rkey_b,
            src,
            dst,
        }
    }

    fn write(&self, p: &mut RcPair) {
        let w = rc_wqe(
            &p.qp_a.sq,
            opcode::RDMA_WRITE,
            0,
            Some((self.dst, self.rkey_b)),
            None,
            (self.src, self.lkey_a, 64),
        );
        p.a.post(&mut p.qp_a.sq, &w, false);
        p.settle();
        assert_eq!(drain(&p.a, &mut p.cq_a).len(), 1, "the WRITE completed");
    }
}

/// Set `id`'s `rx_write_requests` on B, not cleared.
fn writes_counted(p: &mut RcPair, id: u8) -> u32 {
    let out = query_q_counter(&mut p.b, id, false);
    cxdirect_hw::counters::QueryQCounterOut::new(&out[..])
        .expect("layout")
        .rx_write_requests()
}

/// At a QP's destruction Linux unbinds it from its counter (`rdma_counter_unbind_qp`, forced,
/// before DESTROY_QP); for a QP neither in RESET nor in RTS mlx5_ib sends nothing
/// (`mlx5_ib_qp_set_counter`) and then frees the counter (`mlx5_ib_counter_dealloc`) while
/// the QP still names it. The model refused that DEALLOC_Q_COUNTER (bad resource state) and
/// kept the set, which the kernel had forgotten; `rdma statistic qp` in auto mode showed it
/// at every perftest exit.
#[test]
fn a_set_freed_while_a_qp_names_it_goes_and_the_qp_counts_nowhere() {
    use cxdirect_hw::qp::{QueryQpIn, QueryQpOut};
    let (mut p, _cap) = pair_with_rnr_retry(700, 7);
    let set = alloc_q_counter(&mut p.b);
    bind_counter_set(&mut p.b, p.qp_b.qpn, set);
    let mut input = Host::input(Opcode::DeallocQCounter, 0, 16);
    input[11] = set;
    p.b.exec(&input, 16)
        .expect("DEALLOC_Q_COUNTER of a set a QP names");
    let mut input = Host::input(Opcode::QueryQp, 0, QueryQpIn::<&[u8]>::SIZE);
    QueryQpIn::new(&mut input[..])
        .expect("layout")
        .set_qpn(p.qp_b.qpn);
    let out =
        p.b.exec(&input, QueryQpOut::<&[u8]>::SIZE)
            .expect("QUERY_QP");
    let named = QueryQpOut::new(&out[..])
        .expect("layout")
        .qpc()
        .counter_set_id();
    assert_eq!(named, 0, "the QP names no set any more");
    // A set allocated later, whatever its number, counts none of the QP's traffic.
    let later = alloc_q_counter(&mut p.b);
    Writer::new(&mut p).write(&mut p);
    assert_eq!(
        writes_counted(&mut p, later),
        0,
        "set {later}: nothing of the QP's"
    );
    p.teardown();
}

/// `rdma statistic qp bind` and `unbind` of a running QP: mlx5_ib asks for
/// `rts2rts_qp_counters_set_id` first (`mlx5_ib_qp_set_counter`), then moves the QP with
/// RTS2RTS_QP naming the new set as its optional counter set attribute
/// (`__mlx5_ib_qp_set_counter`), back to the port's own set at unbind, and frees the bound set
/// (DEALLOC_Q_COUNTER). The model moved QPs so but did not report the cap: Linux refused every
/// bind of a QP past RESET (EOPNOTSUPP).
#[test]
fn a_running_qp_moves_between_counter_sets_as_rdma_statistic_binds_it() {
    use cxdirect_hw::caps::CmdHcaCap;
    use cxdirect_hw::hca::cap_type;
    let (mut p, _cap) = pair_with_rnr_retry(700, 7);
    let general = p.b.query_cap(cap_type::GENERAL_DEVICE, true);
    let general = CmdHcaCap::new(&general[0x10..0x110]).expect("layout");
    assert!(
        general.rts2rts_qp_counters_set_id(),
        "rts2rts_qp_counters_set_id reported"
    );
    let port_set = alloc_q_counter(&mut p.b);
    let bound = alloc_q_counter(&mut p.b);
    let writer = Writer::new(&mut p);
    let write = |p: &mut RcPair| writer.write(p);
    let writes = writes_counted;
    bind_counter_set(&mut p.b, p.qp_b.qpn, port_set);
    write(&mut p);
    bind_counter_set(&mut p.b, p.qp_b.qpn, bound);
    write(&mut p);
    write(&mut p);
    assert_eq!(
        (writes(&mut p, port_set), writes(&mut p, bound)),
        (1, 2),
        "bound: the WRITEs after the move count in the new set"
    );
    bind_counter_set(&mut p.b, p.qp_b.qpn, port_set);
    write(&mut p);
    assert_eq!(
        (writes(&mut p, port_set), writes(&mut p, bound)),
        (2, 2),
        "unbound: back in the port's set"
    );
    let mut input = Host::input(Opcode::DeallocQCounter, 0, 16);
    input[11] = bound;
    p.b.exec(&input, 16)
        .expect("the bound set goes once no QP names it");
    p.teardown();
}

#[test]
fn ack_timeouts_and_retries_exceeded_count_in_the_qps_set() {
    use cxdirect_hw::counters::QueryQCounterOut;
    let (mut h, wire) = host();
    let mut cq = h.create_cq(6);
    let mut sq = h.create_rc_qp(&cq, 4, 4, None).sq;
    let set = alloc_q_counter(&mut h);
    let path = RcPath {
        send_psn: 5,
        retry_count: 1,
        // 4.096 us << 12: about 17 ms.
        ack_timeout: 12,
        ..path_to(PEER_GID, PEER_MAC, REMOTE_QPN)
    };
    h.connect_rc(sq.sqn, &path);
    bind_counter_set(&mut h, sq.sqn, set);
    let lkey = h.create_mkey(false, true);
    let src = h.alloc(4096, 64);
    let w = rc_wqe(&sq, opcode::SEND, 0, None, None, (src, lkey, 100));
    h.post(&mut sq, &w, false);
    for _ in 0..3 {
        std::thread::sleep(std::time::Duration::from_millis(40));
        h.dev.poll();
    }
    take_frames(&wire);
    let req = drain(&h, &mut cq);
    assert_eq!(req.len(), 1);
    assert_eq!(err_fields(&req[0]), (13, 0x15, opcode::SEND, 0));
    let out = query_q_counter(&mut h, set, false);
    let c = QueryQCounterOut::new(&out[..]).expect("layout");
    assert_eq!(
        c.local_ack_timeout_err(),
        1,
        "one timeout with a retry left"
    );
    assert_eq!(c.req_transport_retries_exceeded(), 1);
    assert_eq!(c.req_cqe_error(), 1);
    h.destroy_qp(sq.sqn);
    h.teardown();
}

/// The QP events on the host's async EQ since the last look: (event type, QP number), the
/// queue kind checked to be a QP's.
fn qp_events(h: &mut Host) -> Vec<(u8, u32)> {
    h.drain_eq()
        .into_iter()
        .filter(|(kind, _, _)| {
            [
                EventType::WqCatastrophicError,
                EventType::WqInvalidRequestError,
                EventType::WqAccessError,
                EventType::SrqLastWqe,
            ]
            .iter()
            .any(|&e| e as u8 == *kind)
        })
        .map(|(kind, _, data)| {
            assert_eq!(data[20], 0, "event {kind:#x}: a QP's");
            (kind, be32(&data, 24) & 0xff_ffff)
        })
        .collect()
}

#[test]
fn a_malformed_request_takes_the_responder_to_error_with_an_invalid_request_event() {
    let (mut p, _) = pair(60);
    let lkey_b = p.b.create_mkey(false, true);
    let dst = p.b.alloc(4096, 4096);
    p.b.post_rc_recv(&mut p.qp_b, dst, 4096, lkey_b);
    p.b.post_rc_recv(&mut p.qp_b, dst, 4096, lkey_b);
    p.b.drain_eq();
    // A SEND_ONLY whose opcode says MIDDLE: no message is open, an invalid request.
    let mut middle = hand_built_send(p.qp_b.qpn, 60, &pattern(16, 1));
    middle[42] = 0x01;
    let n = middle.len();
    let crc = expected_icrc(&middle);
    middle[n - 4..].copy_from_slice(&crc);
    p.wire.transmit(PortId::A, &middle).expect("transmit");
    p.settle();
    assert_eq!(qp_state(&mut p.b, p.qp_b.qpn), state::ERR);
    assert_eq!(
        qp_events(&mut p.b),
        [(EventType::WqInvalidRequestError as u8, p.qp_b.qpn)]
    );
    let resp = drain(&p.b, &mut p.cq_b);
    assert_eq!(resp.len(), 2, "both posted receives flushed");
    assert!(resp.iter().all(|c| (cqe_opcode(c), c[55]) == (14, 0x05)));
    p.teardown();
}

#[test]
fn a_completion_the_cq_cannot_take_is_a_wq_catastrophic_error() {
    let (mut p, _) = pair(80);
    let lkey_a = p.a.create_mkey(false, true);
    let lkey_b = p.b.create_mkey(false, true);
    let dst = p.b.alloc(4096, 4096);
    p.b.post_rc_recv(&mut p.qp_b, dst, 4096, lkey_b);
    p.b.drain_eq();
    // B's CQ overruns: the receive's completion has nowhere to go.
    p.b.dev
        .inject(cxdirect_emu::Fault::CqOverrun { cqn: p.cq_b.cqn });
    let src = p.a.alloc(64, 64);
    let w = rc_wqe(&p.qp_a.sq, opcode::SEND, 0, None, None, (src, lkey_a, 32));
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    assert!(p.b.dev.counters().completions_lost >= 1);
    assert_eq!(qp_state(&mut p.b, p.qp_b.qpn), state::ERR);
    assert_eq!(
        qp_events(&mut p.b),
        [(EventType::WqCatastrophicError as u8, p.qp_b.qpn)]
    );
    p.teardown();
}

/// A cyclic RMP of four 32-byte WQEs on `b`, for a QP's receives.
fn cyclic_rmp(b: &mut Host) -> u32 {
    b.create_rmp_of(WqType::Cyclic, 2, 5, 0).0
}

#[test]
fn a_qp_on_an_srq_reports_its_last_wqe_reached_when_it_goes_to_error() {
    // By command.
    let (mut p, _) = pair_with(20, |b| Some(cyclic_rmp(b)));
    p.b.drain_eq();
    to_error(&mut p.b, p.qp_b.qpn);
    assert_eq!(
        qp_events(&mut p.b),
        [(EventType::SrqLastWqe as u8, p.qp_b.qpn)],
        "2ERR_QP"
    );
    // A QP with its own receive ring reports nothing of the kind.
    to_error(&mut p.a, p.qp_a.qpn);
    assert!(qp_events(&mut p.a).is_empty(), "no SRQ, no last WQE event");
    p.teardown();
    // On its own: a refused remote access.
    let (mut p, _) = pair_with(20, |b| Some(cyclic_rmp(b)));
    let lkey_a = p.a.create_mkey(false, true);
    let pd_b = p.b.pd;
    let read_only = remote_key(&mut p.b, false, pd_b);
    let dst = p.b.alloc(4096, 4096);
    let src = p.a.alloc(64, 64);
    p.b.drain_eq();
    let w = rc_wqe(
        &p.qp_a.sq,
        opcode::RDMA_WRITE,
        0,
        Some((dst, read_only)),
        None,
        (src, lkey_a, 16),
    );
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    assert_eq!(
        qp_events(&mut p.b),
        [
            (EventType::WqAccessError as u8, p.qp_b.qpn),
            (EventType::SrqLastWqe as u8, p.qp_b.qpn)
        ],
        "the access violation, then the last WQE reached"
    );
    p.teardown();
}

#[test]
fn a_qp_names_only_a_counter_set_that_exists_and_query_qp_reports_it() {
    use cxdirect_emu::testkit::CmdFail;
    let (mut p, _) = pair(30);
    let query_set = |h: &mut Host, qpn: u32| {
        let mut input = Host::input(Opcode::QueryQp, 0, 0x10);
        cxdirect_hw::qp::Qp2errIn::new(&mut input[..])
            .expect("layout")
            .set_qpn(qpn);
        let out = h.exec(&input, 0x1d0).expect("QUERY_QP");
        Qpc::new(&out[0x18..]).expect("layout").counter_set_id()
    };
    let set = alloc_q_counter(&mut p.a);
    let mut input = Host::input(Opcode::Rts2rtsQp, 0, 0x110);
    let mut cmd = cxdirect_hw::qp::Rts2rtsQpIn::new(&mut input[..]).expect("layout");
    cmd.set_qpn(p.qp_a.qpn)
        .set_opt_param_mask(cxdirect_hw::qp::optpar::COUNTER_SET_ID);
    cmd.qpc_mut().set_counter_set_id(set + 1);
    assert_eq!(
        p.a.exec(&input, 16).map(|_| ()),
        Err(CmdFail::status(
            cxdirect_hw::cmd::CmdStatus::BadResource,
            cxdirect_emu::Syndrome::NoSuchObject
        )),
        "a set that does not exist"
    );
    assert_eq!(query_set(&mut p.a, p.qp_a.qpn), 0, "nothing changed");
    assert_eq!(qp_state(&mut p.a, p.qp_a.qpn), state::RTS);
    bind_counter_set(&mut p.a, p.qp_a.qpn, set);
    assert_eq!(query_set(&mut p.a, p.qp_a.qpn), set);
    // Once the QP is gone, so is its hold on the set.
    p.a.destroy_qp(p.qp_a.qpn);
    let mut input = Host::input(Opcode::DeallocQCounter, 0, 16);
    input[11] = set;
    p.a.exec(&input, 16)
        .expect("DEALLOC_Q_COUNTER once no QP names it");
    p.b.destroy_qp(p.qp_b.qpn);
    p.a.teardown();
    p.b.teardown();
}
