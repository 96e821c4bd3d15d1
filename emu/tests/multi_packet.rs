//! Enhanced multi-packet send WQEs (opcode 0x29), driven by hand: one WQE, one completion, and
//! every packet of it on the wire in order; malformed ones end in error CQEs.

use cxdirect_emu::counters::QueueKind;
use cxdirect_emu::packet::insert_checksums;
use cxdirect_emu::testkit::poll::settle_until;
use cxdirect_emu::testkit::{self as support, udp_frame, CmdFail, Host, MultiPacket};
use cxdirect_emu::{Device, EmuConfig, Syndrome};
use cxdirect_hw::cmd::CmdStatus;
use cxdirect_hw::cqe::{Cqe64, CqeOpcode, CqeSyndrome, ErrCqe};

const MEM: usize = 64 << 20;

/// A brought-up loopback function with a read-write key and a receive queue that every frame
/// is steered to, its buffers posted.
struct Rig {
    h: Host,
    key: u32,
    tisn: u32,
    rx_cq: support::Cq,
    bufs: Vec<u64>,
}

fn rig(config: EmuConfig) -> Rig {
    let mut h = Host::new(Device::loopback(config), MEM);
    h.bring_up();
    let key = h.create_mkey(true, true);
    let tisn = h.create_tis();
    let rx_cq = h.create_cq(6);
    let mut rq = h.create_rq(rx_cq.cqn, 6, None);
    h.steer_all_to(rq.rqn);
    let bufs: Vec<u64> = (0..32).map(|_| h.alloc(2048, 64)).collect();
    for &b in &bufs {
        h.post_recv(&mut rq, b, 2048, key);
    }
    Rig {
        h,
        key,
        tisn,
        rx_cq,
        bufs,
    }
}

/// `frame` with its IPv4 and UDP checksums zeroed, as a driver asking for the offload leaves it.
fn without_checksums(frame: &[u8]) -> Vec<u8> {
    let mut f = frame.to_vec();
    f[24..26].copy_from_slice(&[0, 0]);
    f[40..42].copy_from_slice(&[0, 0]);
    f
}

#[test]
fn one_wqe_sends_each_of_its_packets_in_order_with_the_offloads_of_its_ethernet_segment() {
    let mut r = rig(EmuConfig::default());
    let mut tx_cq = r.h.create_cq(6);
    let mut sq = r.h.try_create_sq(tx_cq.cqn, r.tisn, 6, true).unwrap();
    let frames: Vec<Vec<u8>> = [100usize, 18, 1000, 60, 22]
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let mut f = udp_frame(n, i as u8);
            insert_checksums(&mut f, true, true).unwrap();
            f
        })
        .collect();
    let stripped: Vec<Vec<u8>> = frames.iter().map(|f| without_checksums(f)).collect();
    let packets = [
        MultiPacket::Pointer(&stripped[0]),
        MultiPacket::Inline(&stripped[1]),
        MultiPacket::Pointer(&stripped[2]),
        MultiPacket::Inline(&stripped[3]),
        MultiPacket::Pointer(&stripped[4]),
    ];
    let wqe = r.h.build_multi_packet(&sq, &packets, r.key, true);
    assert!(wqe.len() > 64, "the WQE spans basic blocks");
    let before = r.h.dev.counters();
    r.h.post(&mut sq, &wqe, false);
    let cqe = r.h.poll_cq(&mut tx_cq).expect("send completion");
    let c = Cqe64::new(&cqe[..]).unwrap();
    assert_eq!(c.opcode(), CqeOpcode::Req as u8);
    assert_eq!(c.wqe_counter(), 0, "the completion names the WQE");
    assert!(
        r.h.poll_cq(&mut tx_cq).is_none(),
        "one completion for the WQE"
    );
    for (i, frame) in frames.iter().enumerate() {
        let cqe = r.h.poll_cq(&mut r.rx_cq).expect("receive completion");
        let c = Cqe64::new(&cqe[..]).unwrap();
        assert_eq!(c.byte_cnt() as usize, frame.len(), "packet {i}");
        assert!(c.l3_ok() && c.l4_ok(), "packet {i}: checksums inserted");
        assert_eq!(&r.h.read(r.bufs[i], frame.len()), frame, "packet {i}");
    }
    let d = r.h.dev.counters().since(&before);
    assert_eq!(d.tx_frames, 5);
    assert_eq!(
        d.payload_read_bytes,
        [0, 2, 4]
            .iter()
            .map(|&i| frames[i].len() as u64)
            .sum::<u64>(),
        "the pointer packets gathered, the inline ones not"
    );
    let q = r.h.dev.queue_counters(QueueKind::Sq, sq.sqn).unwrap();
    assert_eq!((q.wqes, q.frames, q.cqes), (1, 5, 1));
    assert_eq!(q.bytes, frames.iter().map(|f| f.len() as u64).sum::<u64>());
}

/// The device schedules packets, not WQEs: on an SQ paced by a rate table entry (mlx5e's
/// `tx_maxrate`) a multi-packet WQE's packets leave as the rate pays for them, each once and
/// in order, with one completion at the end. Four packets of 1,000 bytes and one of 142 at
/// 80 kb/s (10,000 bytes a second) with a 1,000-byte burst: 2 at once (the second leaves the
/// bucket in debt), the other 3 over at least 200 ms. Before, all five left at once.
#[test]
fn a_paced_sq_sends_a_multi_packet_wqe_packet_by_packet_at_its_rate() {
    let mut r = rig(EmuConfig::default());
    let mut tx_cq = r.h.create_cq(6);
    let mut sq = r.h.try_create_sq(tx_cq.cqn, r.tisn, 6, true).unwrap();
    r.h.set_pp_rate(0, 1, 80, 1000).expect("SET_PP_RATE_LIMIT");
    r.h.exec(&Host::sq_rate_input(sq.sqn, 1), 0x10)
        .expect("SQ paced by entry 1");
    // Gathered packets, and a short inline one last (a WQE holds at most 1,008 bytes).
    let frames: Vec<Vec<u8>> = (0..5)
        .map(|i| udp_frame(if i < 4 { 1000 - 42 } else { 100 }, i as u8))
        .collect();
    let packets: Vec<MultiPacket<'_>> = frames
        .iter()
        .enumerate()
        .map(|(i, f)| {
            if i < 4 {
                MultiPacket::Pointer(f)
            } else {
                MultiPacket::Inline(f)
            }
        })
        .collect();
    let wqe = r.h.build_multi_packet(&sq, &packets, r.key, false);
    let sent = |h: &Host| h.dev.counters().tx_frames;
    let before = sent(&r.h);
    let start = std::time::Instant::now();
    r.h.post(&mut sq, &wqe, false);
    assert_eq!(
        sent(&r.h) - before,
        2,
        "the burst goes at once, the rest waits"
    );
    assert!(
        r.h.poll_cq(&mut tx_cq).is_none(),
        "no completion before the last packet"
    );
    let mut cqe = None;
    settle_until(
        &mut r,
        |r| r.h.dev.poll(),
        |r| {
            cqe = r.h.poll_cq(&mut tx_cq);
            cqe.is_some()
        },
    );
    let elapsed = start.elapsed();
    let cqe = cqe.expect("the WQE completes");
    assert_eq!(Cqe64::new(&cqe[..]).unwrap().wqe_counter(), 0);
    assert!(
        elapsed >= std::time::Duration::from_millis(190),
        "3 packets past the burst take at least 200 ms at 10,000 bytes a second: {elapsed:?}"
    );
    for (i, frame) in frames.iter().enumerate() {
        let cqe = r.h.poll_cq(&mut r.rx_cq).expect("receive completion");
        let c = Cqe64::new(&cqe[..]).unwrap();
        assert_eq!(c.byte_cnt() as usize, frame.len(), "packet {i}");
        assert_eq!(&r.h.read(r.bufs[i], frame.len()), frame, "packet {i}");
    }
    assert!(r.h.poll_cq(&mut r.rx_cq).is_none(), "each packet once");
    let q = r.h.dev.queue_counters(QueueKind::Sq, sq.sqn).unwrap();
    assert_eq!((q.wqes, q.frames, q.cqes), (1, 5, 1));
}

/// Posts `wqe` on `sq` and returns the error CQE's syndrome and how many frames went out.
fn refused(r: &mut Rig, sq: &mut support::Sq, cq: &mut support::Cq, wqe: &[u8]) -> (u8, u64) {
    let before = r.h.dev.counters();
    r.h.post(sq, wqe, false);
    let cqe = r.h.poll_cq(cq).expect("error completion");
    let err = ErrCqe::new(&cqe[..]).unwrap();
    assert_eq!(err.opcode(), CqeOpcode::ReqErr as u8);
    assert_eq!(err.qpn(), sq.sqn);
    (err.syndrome(), r.h.dev.counters().since(&before).tx_frames)
}

#[test]
fn malformed_multi_packet_wqes_end_in_error_completions() {
    let mut r = rig(EmuConfig::default());
    let frame = udp_frame(100, 1);
    let packets = [MultiPacket::Pointer(&frame), MultiPacket::Inline(&frame)];

    // An inline segment claiming more bytes than the WQE holds.
    let mut cq = r.h.create_cq(6);
    let mut sq = r.h.try_create_sq(cq.cqn, r.tisn, 6, true).unwrap();
    let mut wqe = r.h.build_multi_packet(&sq, &packets, r.key, false);
    let inline_at = 48;
    wqe[inline_at..inline_at + 4].copy_from_slice(&(0x8000_0000u32 | 4000).to_be_bytes());
    assert_eq!(
        refused(&mut r, &mut sq, &mut cq, &wqe),
        (CqeSyndrome::LocalLength as u8, 1),
        "the packet before the bad segment went out"
    );

    // Headers inlined in the Ethernet segment, which a multi-packet WQE cannot use.
    let mut cq = r.h.create_cq(6);
    let mut sq = r.h.try_create_sq(cq.cqn, r.tisn, 6, true).unwrap();
    let mut wqe = r.h.build_multi_packet(&sq, &packets, r.key, false);
    wqe[28..30].copy_from_slice(&18u16.to_be_bytes());
    assert_eq!(
        refused(&mut r, &mut sq, &mut cq, &wqe),
        (CqeSyndrome::LocalQpOperation as u8, 0)
    );

    // A packet shorter than an Ethernet header after a good one.
    let mut cq = r.h.create_cq(6);
    let mut sq = r.h.try_create_sq(cq.cqn, r.tisn, 6, true).unwrap();
    let runt = [0u8; 10];
    let wqe = r.h.build_multi_packet(
        &sq,
        &[MultiPacket::Inline(&frame), MultiPacket::Pointer(&runt)],
        r.key,
        false,
    );
    assert_eq!(
        refused(&mut r, &mut sq, &mut cq, &wqe),
        (CqeSyndrome::LocalLength as u8, 1)
    );
    let q = r.h.dev.queue_counters(QueueKind::Sq, sq.sqn).unwrap();
    assert_eq!((q.wqes, q.frames, q.errors), (0, 1, 1));

    // No packet at all after the Ethernet segment.
    let mut cq = r.h.create_cq(6);
    let mut sq = r.h.try_create_sq(cq.cqn, r.tisn, 6, true).unwrap();
    let wqe = r.h.build_multi_packet(&sq, &[], r.key, false);
    assert_eq!(
        refused(&mut r, &mut sq, &mut cq, &wqe),
        (CqeSyndrome::LocalQpOperation as u8, 0)
    );
}

#[test]
fn a_device_without_multi_packet_wqes_refuses_sqs_that_allow_them() {
    let mut r = rig(EmuConfig {
        multi_packet_send: false,
        ..EmuConfig::default()
    });
    let cq = r.h.create_cq(6);
    let err = r.h.try_create_sq(cq.cqn, r.tisn, 6, true).err();
    assert_eq!(
        err,
        Some(CmdFail::Status {
            status: CmdStatus::BadParameter as u8,
            syndrome: Syndrome::BadWqParams as u32,
        })
    );
    let mut cq = cq;
    let mut sq =
        r.h.try_create_sq(cq.cqn, r.tisn, 6, false)
            .expect("an SQ without them is created");
    // And the WQE itself is refused: the device has no enhanced multi-packet send.
    let frame = udp_frame(100, 1);
    let wqe =
        r.h.build_multi_packet(&sq, &[MultiPacket::Pointer(&frame)], r.key, false);
    assert_eq!(
        refused(&mut r, &mut sq, &mut cq, &wqe),
        (CqeSyndrome::LocalQpOperation as u8, 0)
    );
}

#[test]
fn enhanced_multi_packet_wqes_need_no_sq_flag_where_the_device_offers_them() {
    // Linux's mlx5e sends enhanced multi-packet WQEs on SQs created without
    // allow_multi_pkt_send_wqe (that flag is for the legacy multi-packet WQE): the
    // enhanced_multi_pkt_send_wqe capability is what allows them.
    let mut r = rig(EmuConfig::default());
    let mut cq = r.h.create_cq(6);
    let mut sq = r.h.create_sq(cq.cqn, r.tisn, 6);
    let frame = udp_frame(100, 1);
    let wqe = r.h.build_multi_packet(
        &sq,
        &[MultiPacket::Pointer(&frame), MultiPacket::Inline(&frame)],
        r.key,
        true,
    );
    let before = r.h.dev.counters();
    r.h.post(&mut sq, &wqe, false);
    let cqe = r.h.poll_cq(&mut cq).expect("send completion");
    assert_eq!(Cqe64::new(&cqe[..]).unwrap().opcode(), CqeOpcode::Req as u8);
    assert_eq!(r.h.dev.counters().since(&before).tx_frames, 2);
}
