//! Large send offload (LSO WQE, opcode 0x0e), driven by hand: a 64 KiB TCP message over IPv4 and
//! over IPv6 leaves the port as MSS-sized frames whose headers, lengths, sequence numbers, flags
//! and checksums an independent parser (`etherparse`) accepts, and whose payloads put together
//! give the message back; malformed LSO WQEs end in error completions and send nothing.

use std::sync::Arc;

use cxdirect_emu::counters::QueueKind;
use cxdirect_emu::testkit::poll::settle_until;
use cxdirect_emu::testkit::{self as support, Host};
use cxdirect_emu::wire::{PortId, Wire};
use cxdirect_emu::{Device, EmuConfig};
use cxdirect_hw::caps::PerProtocolNetworkingOffloadCaps;
use cxdirect_hw::cqe::{Cqe64, CqeOpcode, CqeSyndrome, ErrCqe};
use cxdirect_hw::wqe::{opcode, CtrlSeg, DataSeg, EthSeg, INLINE_SEG};
use etherparse::{NetHeaders, PacketBuilder, PacketHeaders, TcpOptionElement, TransportHeader};

const MEM: usize = 64 << 20;
const MSS: usize = 1448;
const MESSAGE: usize = 64 << 10;
const SEQ: u32 = 0xffff_0000;
const IP_ID: u16 = 0xfff0;
const SRC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
const DST: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];

/// A brought-up function whose port is one end of a wire the test reads at the other end.
struct Rig {
    h: Host,
    wire: Arc<Wire>,
    key: u32,
    tisn: u32,
}

fn rig() -> Rig {
    rig_with(EmuConfig::default())
}

fn rig_with(config: EmuConfig) -> Rig {
    let dev = Device::new(config);
    let wire = Arc::new(Wire::pair());
    dev.attach(wire.clone(), PortId::A, &[]);
    let mut h = Host::new(dev, MEM);
    h.bring_up();
    let key = h.create_mkey(true, false);
    let tisn = h.create_tis();
    Rig { h, wire, key, tisn }
}

/// The frames waiting at the far end of the wire.
fn received(wire: &Wire) -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    let mut buf = Vec::new();
    while wire.receive(PortId::B, &mut buf).unwrap() {
        frames.push(std::mem::take(&mut buf));
    }
    frames
}

/// A message's payload: no two nearby 16-bit words alike, so a misplaced piece shows.
fn payload(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
}

/// Ethernet, IP and TCP headers (timestamps option, so 32 bytes of TCP) with ACK, PSH, FIN and
/// CWR set, as a stack hands them to the offload: lengths and checksums not filled in.
fn tcp_headers(ipv6: bool) -> Vec<u8> {
    let builder = PacketBuilder::ethernet2(SRC, DST);
    let builder = if ipv6 {
        builder.ipv6([0x20; 16], [0x21; 16], 64)
    } else {
        builder.ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
    };
    let builder = builder
        .tcp(40_000, 5201, SEQ, 512)
        .ack(0x0a0b_0c0d)
        .psh()
        .fin()
        .cwr()
        .options(&[
            TcpOptionElement::Noop,
            TcpOptionElement::Noop,
            TcpOptionElement::Timestamp(1, 2),
        ])
        .unwrap();
    let mut headers = Vec::new();
    builder.write(&mut headers, &[]).unwrap();
    if ipv6 {
        headers[18..20].fill(0);
    } else {
        headers[16..18].fill(0);
        headers[18..20].copy_from_slice(&IP_ID.to_be_bytes());
        headers[24..26].fill(0);
    }
    let l4 = headers.len() - 32;
    headers[l4 + 16..l4 + 18].fill(0);
    headers
}

/// An LSO WQE: `headers` inline (`inline_size` claimed), `mss`, checksum offload when
/// `checksums`, the payload by data segments of at most `piece` bytes written to host memory.
struct Lso<'a> {
    headers: &'a [u8],
    inline_size: usize,
    mss: u16,
    checksums: bool,
    payload: &'a [u8],
    piece: usize,
}

impl<'a> Lso<'a> {
    fn new(headers: &'a [u8], payload: &'a [u8]) -> Self {
        Self {
            headers,
            inline_size: headers.len(),
            mss: MSS as u16,
            checksums: true,
            payload,
            piece: 20_000,
        }
    }

    fn build(&self, h: &mut Host, sq: &support::Sq, lkey: u32) -> Vec<u8> {
        let inline_tail = self.headers.len().saturating_sub(2);
        let pieces = self.payload.len().div_ceil(self.piece);
        let ds = 2 + inline_tail.div_ceil(16) + pieces;
        let mut wqe = vec![0u8; ds.div_ceil(4) * 64];
        CtrlSeg::new(&mut wqe[..16])
            .unwrap()
            .set_opcode(opcode::LSO)
            .set_wqe_index(sq.pi)
            .set_qpn_or_sqn(sq.sqn)
            .set_ds(ds as u8)
            .set_ce(2);
        EthSeg::new(&mut wqe[16..32])
            .unwrap()
            .set_l3_csum(self.checksums)
            .set_l4_csum(self.checksums)
            .set_mss(self.mss)
            .set_inline_hdr_sz(self.inline_size as u16);
        let first = self.headers.len().min(2);
        wqe[30..30 + first].copy_from_slice(&self.headers[..first]);
        wqe[32..32 + inline_tail].copy_from_slice(&self.headers[first..]);
        let mut at = 32 + inline_tail.div_ceil(16) * 16;
        for piece in self.payload.chunks(self.piece) {
            let iova = h.alloc(piece.len() as u64, 64);
            h.write(iova, piece);
            DataSeg::new(&mut wqe[at..at + 16])
                .unwrap()
                .set_byte_count(piece.len() as u32)
                .set_lkey(lkey)
                .set_addr(iova);
            at += 16;
        }
        wqe
    }
}

/// Checks every segment of a message sent as `headers` + `message` and returns the payloads put
/// back together.
fn check_segments(frames: &[Vec<u8>], headers: &[u8], message: &[u8], ipv6: bool) -> Vec<u8> {
    let count = message.len().div_ceil(MSS);
    assert_eq!(frames.len(), count, "one frame per MSS of payload");
    let mut joined = Vec::new();
    for (i, frame) in frames.iter().enumerate() {
        let first = i == 0;
        let last = i + 1 == count;
        let expected_payload = MSS.min(message.len() - i * MSS);
        assert_eq!(frame.len(), headers.len() + expected_payload, "segment {i}");
        assert_eq!(&frame[..12], &headers[..12], "segment {i}: MAC addresses");
        let parsed = PacketHeaders::from_ethernet_slice(frame)
            .unwrap_or_else(|e| panic!("segment {i} does not parse: {e:?}"));
        let body = parsed.payload.slice();
        assert_eq!(body.len(), expected_payload, "segment {i} payload length");
        let Some(TransportHeader::Tcp(tcp)) = &parsed.transport else {
            panic!("segment {i}: no TCP header");
        };
        assert_eq!((tcp.source_port, tcp.destination_port), (40_000, 5201));
        assert_eq!(
            tcp.sequence_number,
            SEQ.wrapping_add((i * MSS) as u32),
            "segment {i} sequence number"
        );
        assert_eq!(tcp.acknowledgment_number, 0x0a0b_0c0d, "segment {i}");
        assert!(tcp.ack, "segment {i}: ACK on every segment");
        assert_eq!((tcp.fin, tcp.psh), (last, last), "segment {i}: FIN, PSH");
        assert_eq!(tcp.cwr, first, "segment {i}: CWR");
        assert_eq!(tcp.header_len(), 32, "segment {i}: options kept");
        match &parsed.net {
            Some(NetHeaders::Ipv4(ip, _)) if !ipv6 => {
                assert_eq!(usize::from(ip.total_len), frame.len() - 14, "segment {i}");
                assert_eq!(
                    ip.identification,
                    IP_ID.wrapping_add(i as u16),
                    "segment {i} IP ID"
                );
                assert_eq!(
                    ip.header_checksum,
                    ip.calc_header_checksum(),
                    "segment {i} IPv4 header checksum"
                );
                assert_eq!(
                    tcp.checksum,
                    tcp.calc_checksum_ipv4(ip, body).unwrap(),
                    "segment {i} TCP checksum"
                );
            }
            Some(NetHeaders::Ipv6(ip, _)) if ipv6 => {
                assert_eq!(
                    usize::from(ip.payload_length),
                    frame.len() - 54,
                    "segment {i}"
                );
                assert_eq!(
                    tcp.checksum,
                    tcp.calc_checksum_ipv6(ip, body).unwrap(),
                    "segment {i} TCP checksum"
                );
            }
            other => panic!("segment {i}: unexpected network header {other:?}"),
        }
        joined.extend_from_slice(body);
    }
    joined
}

fn sends_a_64_kib_message_as_mss_sized_segments(ipv6: bool) {
    let mut r = rig();
    if ipv6 {
        // 54 bytes of Ethernet and IPv6 header and 32 of TCP before each 1448-byte payload.
        r.h.set_port_mtu(1600);
    }
    let mut cq = r.h.create_cq(6);
    let mut sq = r.h.create_sq(cq.cqn, r.tisn, 6);
    let headers = tcp_headers(ipv6);
    let message = payload(MESSAGE);
    let wqe = Lso::new(&headers, &message).build(&mut r.h, &sq, r.key);
    let before = r.h.dev.counters();
    r.h.post(&mut sq, &wqe, false);
    let cqe = r.h.poll_cq(&mut cq).expect("send completion");
    let c = Cqe64::new(&cqe[..]).unwrap();
    assert_eq!(c.opcode(), CqeOpcode::Req as u8);
    assert_eq!(c.wqe_counter(), 0);
    assert!(r.h.poll_cq(&mut cq).is_none(), "one completion per WQE");
    let frames = received(&r.wire);
    let joined = check_segments(&frames, &headers, &message, ipv6);
    assert!(
        joined == message,
        "the segments put together give the message"
    );
    let wire_bytes: usize = frames.iter().map(Vec::len).sum();
    // What mlx5e counts for the WQE: the message plus the headers of every segment after the
    // first.
    assert_eq!(wire_bytes, MESSAGE + frames.len() * headers.len());
    assert_eq!(c.byte_cnt() as usize, wire_bytes, "CQE byte count");
    let d = r.h.dev.counters().since(&before);
    assert_eq!(
        (d.tx_frames, d.tx_bytes),
        (frames.len() as u64, wire_bytes as u64)
    );
    let q = r.h.dev.queue_counters(QueueKind::Sq, sq.sqn).unwrap();
    assert_eq!((q.wqes, q.frames, q.cqes), (1, frames.len() as u64, 1));
    assert_eq!(q.bytes, wire_bytes as u64);
}

#[test]
fn a_64_kib_ipv4_message_leaves_as_mss_sized_segments() {
    sends_a_64_kib_message_as_mss_sized_segments(false);
}

#[test]
fn a_64_kib_ipv6_message_leaves_as_mss_sized_segments() {
    sends_a_64_kib_message_as_mss_sized_segments(true);
}

/// The device schedules packets, not WQEs (the packet pacing of ConnectX-4 Lx and later lets
/// a flow send a burst, then schedules each next packet by its rate; mlx5_core's
/// `max_burst_sz` bounds the bursts "of packets" it schedules for an SQ): an SQ paced by a
/// rate table entry, as mlx5e's `tx_maxrate` paces one, sends a 64 KiB LSO message a frame at
/// a time as the rate pays for them, and completes it once, with every frame's bytes. 46
/// frames (68,572 bytes) at 4,000 kb/s (500,000 bytes a second) with a 4,000-byte burst: 3
/// at once (the third leaves the bucket in debt), the rest over at least 120 ms. Before, the
/// whole WQE went out at once and left the rate 130 ms in debt.
#[test]
fn a_paced_sq_sends_an_lso_message_frame_by_frame_at_its_rate() {
    let mut r = rig();
    let mut cq = r.h.create_cq(6);
    let mut sq = r.h.create_sq(cq.cqn, r.tisn, 6);
    r.h.set_pp_rate(0, 1, 4000, 4000)
        .expect("SET_PP_RATE_LIMIT");
    r.h.exec(&Host::sq_rate_input(sq.sqn, 1), 0x10)
        .expect("SQ paced by entry 1");
    let headers = tcp_headers(false);
    let message = payload(MESSAGE);
    let wqe = Lso::new(&headers, &message).build(&mut r.h, &sq, r.key);
    let start = std::time::Instant::now();
    r.h.post(&mut sq, &wqe, false);
    let mut frames = received(&r.wire);
    assert_eq!(frames.len(), 3, "the burst goes at once, the rest waits");
    assert!(
        r.h.poll_cq(&mut cq).is_none(),
        "no completion before the last frame"
    );
    let mut cqe = None;
    settle_until(
        &mut r,
        |r| {
            r.h.dev.poll();
            frames.extend(received(&r.wire));
        },
        |r| {
            cqe = r.h.poll_cq(&mut cq);
            cqe.is_some()
        },
    );
    let elapsed = start.elapsed();
    let cqe = cqe.expect("the message completes");
    assert!(r.h.poll_cq(&mut cq).is_none(), "one completion per WQE");
    let joined = check_segments(&frames, &headers, &message, false);
    assert!(joined == message, "every segment once, in order");
    let wire_bytes: usize = frames.iter().map(Vec::len).sum();
    assert_eq!(
        Cqe64::new(&cqe[..]).unwrap().byte_cnt() as usize,
        wire_bytes,
        "CQE byte count: every turn's frames"
    );
    assert!(
        elapsed >= std::time::Duration::from_millis(120),
        "43 frames past the burst take at least 120 ms at 500,000 bytes a second: {elapsed:?}"
    );
    let q = r.h.dev.queue_counters(QueueKind::Sq, sq.sqn).unwrap();
    assert_eq!((q.wqes, q.frames, q.cqes), (1, frames.len() as u64, 1));
}

#[test]
fn without_checksum_flags_the_checksums_are_left_as_given() {
    let mut r = rig();
    let mut cq = r.h.create_cq(6);
    let mut sq = r.h.create_sq(cq.cqn, r.tisn, 6);
    let headers = tcp_headers(false);
    let message = payload(3000);
    let mut lso = Lso::new(&headers, &message);
    lso.checksums = false;
    let wqe = lso.build(&mut r.h, &sq, r.key);
    r.h.post(&mut sq, &wqe, false);
    r.h.poll_cq(&mut cq).expect("send completion");
    let frames = received(&r.wire);
    assert_eq!(
        frames.iter().map(Vec::len).collect::<Vec<_>>(),
        [66 + 1448, 66 + 1448, 66 + 104]
    );
    for f in &frames {
        assert_eq!(&f[24..26], &[0, 0], "IPv4 header checksum untouched");
        assert_eq!(&f[50..52], &[0, 0], "TCP checksum untouched");
    }
}

#[test]
fn the_ethernet_capabilities_report_max_lso_cap() {
    let mut r = rig();
    let out =
        r.h.query_cap(cxdirect_hw::hca::cap_type::ETHERNET_OFFLOADS, true);
    let caps = PerProtocolNetworkingOffloadCaps::new(&out[0x10..]).unwrap();
    assert_eq!(caps.max_lso_cap(), 18, "LSO messages up to 256 KiB");
}

#[test]
fn a_device_without_lso_reports_no_max_lso_cap_and_refuses_the_opcode() {
    let mut r = rig_with(EmuConfig {
        lso: false,
        ..EmuConfig::default()
    });
    let out =
        r.h.query_cap(cxdirect_hw::hca::cap_type::ETHERNET_OFFLOADS, true);
    let caps = PerProtocolNetworkingOffloadCaps::new(&out[0x10..]).unwrap();
    assert_eq!(caps.max_lso_cap(), 0);
    let headers = tcp_headers(false);
    let message = payload(3000);
    let syndrome = refused(&mut r, |h, sq, key| {
        Lso::new(&headers, &message).build(h, sq, key)
    });
    assert_eq!(syndrome, CqeSyndrome::LocalQpOperation as u8);
}

/// Posts `wqe` on a fresh SQ and returns the error CQE's syndrome; checks that nothing went on
/// the wire and nothing was counted as sent.
fn refused(r: &mut Rig, build: impl FnOnce(&mut Host, &support::Sq, u32) -> Vec<u8>) -> u8 {
    let mut cq = r.h.create_cq(6);
    let mut sq = r.h.create_sq(cq.cqn, r.tisn, 6);
    let wqe = build(&mut r.h, &sq, r.key);
    let before = r.h.dev.counters();
    r.h.post(&mut sq, &wqe, false);
    let cqe = r.h.poll_cq(&mut cq).expect("error completion");
    let err = ErrCqe::new(&cqe[..]).unwrap();
    assert_eq!(err.opcode(), CqeOpcode::ReqErr as u8);
    assert_eq!(err.s_wqe_opcode(), opcode::LSO);
    assert_eq!(err.qpn(), sq.sqn);
    assert!(r.h.poll_cq(&mut cq).is_none());
    assert!(received(&r.wire).is_empty(), "nothing on the wire");
    let d = r.h.dev.counters().since(&before);
    assert_eq!((d.tx_frames, d.tx_bytes, d.error_cqes), (0, 0, 1));
    let q = r.h.dev.queue_counters(QueueKind::Sq, sq.sqn).unwrap();
    assert_eq!((q.wqes, q.frames, q.bytes, q.errors), (0, 0, 0, 1));
    err.syndrome()
}

#[test]
fn malformed_lso_wqes_end_in_error_completions_and_send_nothing() {
    let mut r = rig();
    let headers = tcp_headers(false);
    let message = payload(10_000);
    let qp_op = CqeSyndrome::LocalQpOperation as u8;
    let length = CqeSyndrome::LocalLength as u8;

    let zero_mss = |h: &mut Host, sq: &support::Sq, key| {
        let mut lso = Lso::new(&headers, &message);
        lso.mss = 0;
        lso.build(h, sq, key)
    };
    assert_eq!(refused(&mut r, zero_mss), qp_op, "MSS 0");

    let mut udp = headers.clone();
    udp[23] = 17;
    let not_tcp = |h: &mut Host, sq: &support::Sq, key| Lso::new(&udp, &message).build(h, sq, key);
    assert_eq!(refused(&mut r, not_tcp), qp_op, "UDP headers");

    let mut arp = headers.clone();
    arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
    let not_ip = |h: &mut Host, sq: &support::Sq, key| Lso::new(&arp, &message).build(h, sq, key);
    assert_eq!(refused(&mut r, not_ip), qp_op, "not IP");

    let beyond_wqe = |h: &mut Host, sq: &support::Sq, key| {
        let mut lso = Lso::new(&headers, &message);
        lso.inline_size = 900;
        lso.build(h, sq, key)
    };
    assert_eq!(
        refused(&mut r, beyond_wqe),
        length,
        "inline size past the WQE"
    );

    let short_of_tcp = |h: &mut Host, sq: &support::Sq, key| {
        let mut lso = Lso::new(&headers, &message);
        lso.inline_size = headers.len() - 12;
        lso.build(h, sq, key)
    };
    assert_eq!(
        refused(&mut r, short_of_tcp),
        length,
        "inline size short of the TCP header's end"
    );

    let huge = payload(256 << 10);
    let over_max_lso = |h: &mut Host, sq: &support::Sq, key| {
        let mut lso = Lso::new(&headers, &huge);
        lso.piece = 128 << 10;
        lso.build(h, sq, key)
    };
    assert_eq!(
        refused(&mut r, over_max_lso),
        length,
        "message over 2^max_lso_cap"
    );

    let over_mtu = |h: &mut Host, sq: &support::Sq, key| {
        let mut lso = Lso::new(&headers, &message);
        lso.mss = 2000;
        lso.build(h, sq, key)
    };
    assert_eq!(refused(&mut r, over_mtu), length, "segments over the MTU");

    // An inline data segment after the headers carries payload like a data segment does; one
    // claiming more bytes than the WQE holds is refused.
    let bad_inline = |h: &mut Host, sq: &support::Sq, key| {
        let mut wqe = Lso::new(&headers, &message[..100]).build(h, sq, key);
        let at = 32 + (headers.len() - 2).div_ceil(16) * 16;
        wqe[at..at + 4].copy_from_slice(&(INLINE_SEG | 4000).to_be_bytes());
        wqe
    };
    assert_eq!(
        refused(&mut r, bad_inline),
        length,
        "inline segment overrun"
    );

    // Still a working function: a good WQE on a new SQ goes out.
    let mut cq = r.h.create_cq(6);
    let mut sq = r.h.create_sq(cq.cqn, r.tisn, 6);
    let wqe = Lso::new(&headers, &message).build(&mut r.h, &sq, r.key);
    r.h.post(&mut sq, &wqe, false);
    let cqe = r.h.poll_cq(&mut cq).expect("send completion");
    assert_eq!(Cqe64::new(&cqe[..]).unwrap().opcode(), CqeOpcode::Req as u8);
    assert_eq!(received(&r.wire).len(), 10_000usize.div_ceil(MSS));
}
