//! Datagrams through the driver's `rdma` room against the model: UD queue pairs between two
//! functions and within one, the Q_Key rule, and MADs over the general services QP (QP1) of
//! each function, as Linux's ib_mad carries them on a RoCE port.

use std::net::IpAddr;

use cxdirect::rdma::mad::{MAD_SIZE, QP1_QKEY};
use cxdirect::rdma::{
    AddressHandle, AhAttr, CompletionQueue, Grh, GsiQueuePair, MadAddress, MadSource, MadTransport,
    MemoryRegion, NetworkHeader, Payload, ProtectionDomain, QpCaps, QpState, RecvRequest, Roce,
    UdQueuePair, UdSendRequest, WcOpcode, WcStatus, WorkCompletion, GRH_AREA, QKEY_FROM_QP,
};
use cxdirect::{Device, KeyAccess};
use cxdirect_apps::emulated::EmuBackend;
use cxdirect_emu::{Device as Model, EmuConfig, ExecMode};
use cxdirect_tests::setup::bring_up_patient;

type Ud = UdQueuePair<EmuBackend>;

/// The Q_Key the UD tests' queue pairs take.
const QKEY: u32 = 0x1111_1111;
/// Bytes of a receive slot: the GRH area and the largest payload the tests send.
const SLOT: usize = GRH_AREA + 1024;

struct Side {
    dev: Device<EmuBackend>,
    roce: Roce,
    pd: ProtectionDomain,
    cq: CompletionQueue,
    mr: MemoryRegion,
}

impl Side {
    fn new(model: &Model, name: &str, ip: &str) -> Self {
        let mut dev = bring_up_patient(model, name);
        let roce = Roce::enable(&mut dev, ip.parse().unwrap()).expect("RoCE");
        let pd = ProtectionDomain::alloc(&mut dev).expect("PD");
        let cq = CompletionQueue::create(&mut dev, 256).expect("CQ");
        let mr = MemoryRegion::alloc(&mut dev, &pd, 64 * SLOT, KeyAccess::READ_WRITE).expect("MR");
        Side {
            dev,
            roce,
            pd,
            cq,
            mr,
        }
    }

    /// An active UD QP with Q_Key [`QKEY`] and `recvs` receives posted in slots 0...
    fn ud(&mut self, recvs: u64, first_slot: u64) -> Ud {
        let mut qp = UdQueuePair::create(
            &mut self.dev,
            &self.pd,
            &mut self.cq,
            None,
            QpCaps::default(),
            &self.roce,
        )
        .expect("UD QP");
        for slot in first_slot..first_slot + recvs {
            let sge = [self.mr.sge(slot * SLOT as u64, SLOT as u32)];
            qp.post_recv(&[RecvRequest {
                wr_id: slot,
                sg_list: &sge,
            }])
            .expect("post_recv");
        }
        qp.activate(&mut self.dev, QKEY).expect("activate");
        assert_eq!(qp.state(), QpState::ReadyToSend);
        assert_eq!(
            qp.max_message(),
            1024,
            "the port's path MTU bounds a datagram"
        );
        qp
    }

    fn ah_to(&self, peer: &Roce) -> AddressHandle {
        AddressHandle::new(&self.roce, &AhAttr::to(peer.mac(), peer.gid())).expect("AH")
    }

    /// Polls until `n` completions came (20 s at most).
    fn wait(&mut self, n: usize) -> Vec<WorkCompletion> {
        cxdirect_tests::rdma_side::wait_for(&mut self.cq, n)
    }

    /// Polls for a while and asserts nothing came.
    fn nothing_for_a_while(&mut self) {
        let mut batch = [WorkCompletion::default(); 4];
        for _ in 0..50 {
            assert_eq!(self.cq.poll(&mut batch).expect("poll"), 0, "{batch:?}");
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }

    fn read(&self, offset: usize, len: usize) -> Vec<u8> {
        let mut out = vec![0u8; len];
        self.mr.read(offset, &mut out).unwrap();
        out
    }
}

fn pair() -> (Side, Side, [Model; 2]) {
    let cfg = EmuConfig {
        roce: true,
        exec: ExecMode::Threaded,
        ..EmuConfig::default()
    };
    let (a, b) = Model::pair(cfg.clone(), cfg);
    let sa = Side::new(&a, "a", "10.0.0.1");
    let sb = Side::new(&b, "b", "10.0.0.2");
    (sa, sb, [a, b])
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(37).wrapping_add(seed))
        .collect()
}

/// Checks the receive `wc` of slot `slot` on `side`: `payload` after the GRH area, sent by
/// QP `src_qp` from `src_ip` to `dst_ip`.
fn check_received(
    side: &Side,
    wc: &WorkCompletion,
    slot: u64,
    payload: &[u8],
    src_qp: u32,
    (src_ip, dst_ip): (&str, &str),
) {
    assert_eq!(
        (wc.status, wc.opcode, wc.wr_id),
        (WcStatus::Success, WcOpcode::Recv, slot),
        "{wc:?}"
    );
    assert_eq!(wc.byte_len as usize, GRH_AREA + payload.len());
    let info = wc.datagram.expect("a datagram's sender");
    assert_eq!(info.src_qp, src_qp);
    assert_eq!(info.network, Some(NetworkHeader::Ipv4));
    // A SEND with immediate carries the immediate where the P_Key would be.
    assert_eq!(info.pkey, wc.imm.is_none().then_some(0xffff));
    let at = slot as usize * SLOT;
    let grh = Grh::parse(&side.read(at, GRH_AREA), NetworkHeader::Ipv4).expect("GRH");
    assert_eq!(grh.source_ip(), src_ip.parse::<IpAddr>().unwrap());
    assert_eq!(grh.dest_ip(), dst_ip.parse::<IpAddr>().unwrap());
    assert_eq!(grh.hop_limit, 64);
    assert_eq!(side.read(at + GRH_AREA, payload.len()), payload);
}

#[test]
fn ud_sends_reach_another_function_with_their_sender() {
    let (mut a, mut b, _models) = pair();
    let mut qa = a.ud(0, 0);
    let qb = b.ud(4, 0);
    let ah = a.ah_to(&b.roce);
    // A gathered datagram with the destination's Q_Key, then an inline one with immediate
    // data whose Q_Key is the sending QP's own (bit 31), the same here.
    let first = pattern(1000, 1);
    a.mr.write(10 * SLOT, &first).unwrap();
    let sge = [a.mr.sge(10 * SLOT as u64, 1000)];
    let second = pattern(60, 2);
    let mut inline = UdSendRequest::new(8, &ah, qb.qpn(), QKEY_FROM_QP, Payload::Inline(&second));
    inline.imm = Some(0xfeed_f00d);
    qa.post_send(&[
        UdSendRequest::new(7, &ah, qb.qpn(), QKEY, Payload::Gather(&sge)),
        inline,
    ])
    .expect("post_send");
    let sent = a.wait(2);
    assert!(sent
        .iter()
        .all(|wc| wc.status == WcStatus::Success && wc.opcode == WcOpcode::Send));
    assert_eq!([sent[0].wr_id, sent[1].wr_id], [7, 8]);
    let got = b.wait(2);
    let ips = ("10.0.0.1", "10.0.0.2");
    check_received(&b, &got[0], 0, &first, qa.qpn(), ips);
    check_received(&b, &got[1], 1, &second, qa.qpn(), ips);
    assert_eq!((got[0].imm, got[1].imm), (None, Some(0xfeed_f00d)));
    // A datagram above the path MTU is refused before anything is posted.
    let big = [a.mr.sge(0, 1025)];
    assert!(qa
        .post_send(&[UdSendRequest::new(
            9,
            &ah,
            qb.qpn(),
            QKEY,
            Payload::Gather(&big)
        )])
        .is_err());
    qa.destroy(&mut a.dev, &mut a.cq).expect("destroy a");
    qb.destroy(&mut b.dev, &mut b.cq).expect("destroy b");
    // The two receives never filled come back flushed.
    let flushed = b.wait(2);
    assert!(flushed.iter().all(|wc| wc.status == WcStatus::WrFlushErr));
}

#[test]
fn a_datagram_with_the_wrong_q_key_is_dropped() {
    let (mut a, mut b, _models) = pair();
    let mut qa = a.ud(0, 0);
    let qb = b.ud(1, 0);
    let ah = a.ah_to(&b.roce);
    let payload = pattern(32, 3);
    let wrong = UdSendRequest::new(1, &ah, qb.qpn(), 0x2222_2222, Payload::Inline(&payload));
    qa.post_send(&[wrong]).expect("post_send");
    // The sender's completion says nothing of the receiver (UD has no acknowledgement).
    assert_eq!(a.wait(1)[0].status, WcStatus::Success);
    b.nothing_for_a_while();
    // The receive is still there for the right Q_Key.
    let right = UdSendRequest::new(2, &ah, qb.qpn(), QKEY, Payload::Inline(&payload));
    qa.post_send(&[right]).expect("post_send");
    a.wait(1);
    let got = b.wait(1);
    check_received(&b, &got[0], 0, &payload, qa.qpn(), ("10.0.0.1", "10.0.0.2"));
    assert_eq!(qb.state(), QpState::ReadyToSend);
}

#[test]
fn a_ud_send_to_the_function_itself_loops_back() {
    let (mut a, _b, _models) = pair();
    let mut q1 = a.ud(0, 0);
    let q2 = a.ud(2, 0);
    let ah = a.ah_to(&a.roce);
    let payload = pattern(200, 4);
    a.mr.write(10 * SLOT, &payload).unwrap();
    let sge = [a.mr.sge(10 * SLOT as u64, 200)];
    q1.post_send(&[UdSendRequest::new(
        5,
        &ah,
        q2.qpn(),
        QKEY,
        Payload::Gather(&sge),
    )])
    .expect("post_send");
    let got = a.wait(2);
    let recv = got
        .iter()
        .find(|wc| wc.opcode == WcOpcode::Recv)
        .expect("the receive");
    let send = got.iter().find(|wc| wc.opcode == WcOpcode::Send).unwrap();
    assert_eq!((send.wr_id, send.qpn), (5, q1.qpn()));
    assert_eq!(recv.qpn, q2.qpn());
    check_received(&a, recv, 0, &payload, q1.qpn(), ("10.0.0.1", "10.0.0.1"));
    q1.destroy(&mut a.dev, &mut a.cq).unwrap();
    q2.destroy(&mut a.dev, &mut a.cq).unwrap();
}

/// Polls `gsi` until a MAD came (20 s at most).
fn wait_mad(gsi: &mut GsiQueuePair<EmuBackend>) -> (MadSource, [u8; MAD_SIZE]) {
    let start = std::time::Instant::now();
    let mut got = None;
    while got.is_none() {
        let n = gsi
            .poll_mads(&mut |from, mad| got = Some((*from, *mad)))
            .expect("poll_mads");
        if n == 0 {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(20),
                "no MAD came"
            );
            std::thread::yield_now();
        }
    }
    got.unwrap()
}

/// A CM-like MAD: the common header (base version 1, class 0x07, version 2, method SEND),
/// then a pattern.
fn mad(seed: u8) -> [u8; MAD_SIZE] {
    let mut m = [0u8; MAD_SIZE];
    m.copy_from_slice(&pattern(MAD_SIZE, seed));
    m[..4].copy_from_slice(&[1, 0x07, 2, 0x03]);
    m
}

#[test]
fn mads_go_both_ways_between_the_gsi_queue_pairs_of_two_functions() {
    let (mut a, mut b, _models) = pair();
    let mut ga = GsiQueuePair::create(&mut a.dev, &a.pd, &a.roce, 8).expect("GSI a");
    let mut gb = GsiQueuePair::create(&mut b.dev, &b.pd, &b.roce, 8).expect("GSI b");
    assert_ne!(ga.qpn(), 1, "the firmware numbers QP1 like any QP");
    let request = mad(5);
    ga.send_mad(&MadAddress::gsi(b.roce.mac(), b.roce.gid()), &request)
        .expect("send_mad");
    let (from, got) = wait_mad(&mut gb);
    assert_eq!(got, request);
    assert_eq!(from.qpn, 1, "a MAD leaves from QP 1");
    assert_eq!(from.gid, a.roce.gid());
    assert_eq!(from.local_gid, b.roce.gid());
    assert_eq!(from.pkey, 0xffff);
    assert_eq!(from.source_ip(), "10.0.0.1".parse::<IpAddr>().unwrap());
    // The answer goes back to where the request came from, the MAC resolved apart.
    let reply = mad(6);
    gb.send_mad(&from.reply_to(a.roce.mac()), &reply)
        .expect("send_mad");
    let (back_from, back) = wait_mad(&mut ga);
    assert_eq!(back, reply);
    assert_eq!((back_from.qpn, back_from.gid), (1, b.roce.gid()));
    // Many more than the slots, each way: sends are reclaimed and receives posted again.
    for i in 0..40u8 {
        ga.send_mad(&MadAddress::gsi(b.roce.mac(), b.roce.gid()), &mad(i))
            .expect("send_mad");
        assert_eq!(wait_mad(&mut gb).1, mad(i));
        // The sender's poll reclaims its send slots (no MAD comes to it here).
        assert_eq!(ga.poll_mads(&mut |_, _| panic!("no MAD")).unwrap(), 0);
    }
    assert_eq!((ga.stats().sent, gb.stats().received), (41, 41));
    assert_eq!(ga.stats().dropped + gb.stats().dropped, 0);
    ga.destroy(&mut a.dev).expect("destroy a");
    gb.destroy(&mut b.dev).expect("destroy b");
}

#[test]
fn only_a_datagram_with_qp1s_q_key_reaches_the_gsi_queue_pair() {
    let (mut a, mut b, _models) = pair();
    let mut gb = GsiQueuePair::create(&mut b.dev, &b.pd, &b.roce, 4).expect("GSI b");
    let ah = a.ah_to(&b.roce);
    let m = mad(9);
    a.mr.write(0, &m).unwrap();
    let sge = [a.mr.sge(0, MAD_SIZE as u32)];
    // A UD QP with its own Q_Key: bit 31 of the request's Q_Key sends that one, not
    // IB_QP1_QKEY (IBA 10.2.5: a controlled Q_Key is only the QP's own), and QP1 drops it.
    let mut qa = a.ud(0, 0);
    qa.post_send(&[UdSendRequest::new(
        1,
        &ah,
        1,
        QP1_QKEY,
        Payload::Gather(&sge),
    )])
    .unwrap();
    a.wait(1);
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert_eq!(gb.poll_mads(&mut |_, _| panic!("dropped")).unwrap(), 0);
    // A UD QP whose own Q_Key is IB_QP1_QKEY reaches it.
    let mut q1 = UdQueuePair::create(
        &mut a.dev,
        &a.pd,
        &mut a.cq,
        None,
        QpCaps::default(),
        &a.roce,
    )
    .unwrap();
    q1.activate(&mut a.dev, QP1_QKEY).unwrap();
    q1.post_send(&[UdSendRequest::new(
        2,
        &ah,
        1,
        QKEY_FROM_QP,
        Payload::Gather(&sge),
    )])
    .unwrap();
    a.wait(1);
    let (from, got) = wait_mad(&mut gb);
    assert_eq!((got, from.qpn), (m, q1.qpn()));
    assert_eq!(gb.stats().received, 1);
    qa.destroy(&mut a.dev, &mut a.cq).unwrap();
    gb.destroy(&mut b.dev).unwrap();
}

#[test]
fn a_queue_pair_with_more_receives_than_a_poll_batch_is_destroyed_with_all_flushed() {
    // Destroy collects flush completions in batches of 16; more of them than that must not
    // keep it handing back what it already collected.
    let (mut a, _b, _models) = pair();
    let qp = a.ud(40, 0);
    qp.destroy(&mut a.dev, &mut a.cq).expect("destroy");
    let flushed = a.wait(40);
    assert!(flushed.iter().all(|wc| wc.status == WcStatus::WrFlushErr));
    let mut slots: Vec<u64> = flushed.iter().map(|wc| wc.wr_id).collect();
    slots.sort_unstable();
    assert_eq!(slots, (0..40).collect::<Vec<_>>());
}

/// A datagram's SL puts it in that priority's traffic class: with priority 3's class on A
/// limited to 100 Mb/s (`Device::set_priority_class`, `Device::set_class_rate_limit`), 640
/// datagrams of 1,000 bytes (1,066 on the wire) through an address handle at SL 3 take at
/// least what passes the class's 64 KiB burst at 12.5 MB/s, about 49 ms; the same through
/// a handle at SL 0 (class 0, unlimited) go faster. An SL above 7 is refused.
#[test]
fn a_datagrams_sl_puts_it_in_that_prioritys_class() {
    const BATCH: usize = 16;
    const BATCHES: usize = 40;
    let (mut a, mut b, _models) = pair();
    cxdirect_tests::traffic_class::limit_priority(&mut a.dev, 3, 5);
    let mut qa = a.ud(0, 0);
    let qb = b.ud(0, 0);
    a.mr.write(0, &pattern(1000, 5)).unwrap();
    let sge = [a.mr.sge(0, 1000)];
    let mut send_all = |sl: u8| {
        let attr = AhAttr {
            sl,
            ..AhAttr::to(b.roce.mac(), b.roce.gid())
        };
        let ah = AddressHandle::new(&a.roce, &attr).expect("AH");
        let start = std::time::Instant::now();
        for batch in 0..BATCHES {
            let requests: Vec<_> = (0..BATCH)
                .map(|i| {
                    let id = (batch * BATCH + i) as u64;
                    UdSendRequest::new(id, &ah, qb.qpn(), QKEY, Payload::Gather(&sge))
                })
                .collect();
            qa.post_send(&requests).expect("post_send");
            let sent = a.wait(BATCH);
            assert!(sent.iter().all(|wc| wc.status == WcStatus::Success));
        }
        start.elapsed()
    };
    let held = send_all(3);
    // Ethernet, IPv4, UDP, BTH, DETH, the payload and the ICRC.
    let bytes = (BATCH * BATCHES) as f64 * 1066.0;
    let least = std::time::Duration::from_secs_f64(
        (bytes - 66.0 * 1024.0) / cxdirect_tests::traffic_class::LIMIT_BYTES_PER_SECOND,
    );
    assert!(
        held >= least,
        "SL 3: {bytes} bytes at 100 Mb/s take at least {least:?}: {held:?}"
    );
    let free = send_all(0);
    assert!(free < held, "SL 0 is not held: {free:?} against {held:?}");

    let bad = AhAttr {
        sl: 8,
        ..AhAttr::to(b.roce.mac(), b.roce.gid())
    };
    let refused = AddressHandle::new(&a.roce, &bad);
    assert!(
        matches!(&refused, Err(cxdirect::DriverError::Config(e)) if e.field == "sl" && e.value == 8),
        "{refused:?}"
    );
}
