//! A threaded pair on two device threads (`EmuConfig::device_threads` = 2): each function's
//! work on a thread of its own. Every send queue's frames arrive complete and in order, the
//! counters of both functions and of the wire add up, an RC requester's RNR timer runs on its
//! function's thread while the responder's NAKs come from the other's, and a teardown with
//! traffic in flight neither hangs nor loses a frame without a counter saying where it went.

use cxdirect_emu::testkit::rc::{rc_wqe, RcPath, GID_B, MAC_B};
use cxdirect_emu::testkit::rc_pair::RcPair;
use cxdirect_emu::testkit::{udp_frame, Cq, Host, Rq, Sq};
use cxdirect_emu::{Device, EmuConfig, ExecMode};
use cxdirect_hw::cqe::CqeOpcode;
use cxdirect_hw::wqe::opcode;
use std::sync::mpsc;
use std::time::{Duration, Instant};

const MEM: usize = 32 << 20;
/// Send queues per function.
const QUEUES: usize = 4;
/// Receive buffer size: every test frame fits.
const BUF: u32 = 2048;

fn two_threads() -> EmuConfig {
    EmuConfig {
        exec: ExecMode::Threaded,
        poll_window: Duration::from_millis(1),
        device_threads: 2,
        ..EmuConfig::default()
    }
}

/// A frame of send queue `queue`, number `seq` of that queue: the two are written at the start
/// of the UDP payload, the rest is a pattern seeded by both; sizes vary with `seq`.
fn frame(queue: usize, seq: u32) -> Vec<u8> {
    let mut f = udp_frame(60 + (seq as usize * 37) % 700, (queue as u8) ^ (seq as u8));
    f[42] = queue as u8;
    f[43..47].copy_from_slice(&seq.to_be_bytes());
    f
}

/// One function's side of the test: `QUEUES` send queues, each with its own CQ, and one
/// receive queue every frame is steered to.
struct Side {
    host: Host,
    key: u32,
    sqs: Vec<(Sq, Cq)>,
    rq: Rq,
    rx_cq: Cq,
    /// Receive buffers by ring slot.
    bufs: Vec<u64>,
}

impl Side {
    fn new(dev: Device) -> Self {
        let mut host = Host::new(dev, MEM);
        host.bring_up();
        let key = host.create_mkey(false, true);
        let tisn = host.create_tis();
        let sqs = (0..QUEUES)
            .map(|_| {
                let cq = host.create_cq(10);
                (host.create_sq(cq.cqn, tisn, 10), cq)
            })
            .collect();
        let rx_cq = host.create_cq(12);
        let mut rq = host.create_rq(rx_cq.cqn, 10, None);
        host.steer_all_to(rq.rqn);
        let bufs: Vec<u64> = (0..1u32 << rq.log)
            .map(|_| host.alloc(u64::from(BUF), 64))
            .collect();
        for &buf in &bufs {
            host.post_recv(&mut rq, buf, BUF, key);
        }
        Self {
            host,
            key,
            sqs,
            rq,
            rx_cq,
            bufs,
        }
    }

    /// Posts `frame` on send queue `queue` with a completion.
    fn send(&mut self, queue: usize, frame: &[u8]) {
        let payload = self.host.alloc(frame.len() as u64, 64);
        let (sq, _) = &self.sqs[queue];
        let wqe = self.host.build_send(sq, frame, payload, self.key, true);
        let (sq, _) = &mut self.sqs[queue];
        self.host.post(sq, &wqe, queue % 2 == 0);
    }

    /// Send completions taken from every send CQ.
    fn reap_sends(&mut self) -> usize {
        let mut n = 0;
        for (_, cq) in &mut self.sqs {
            while let Some(cqe) = self.host.poll_cq(cq) {
                assert_eq!(cqe[63] >> 4, CqeOpcode::Req as u8, "a send completion");
                n += 1;
            }
        }
        n
    }

    /// The next received frame, its buffer posted again.
    fn receive(&mut self) -> Option<Vec<u8>> {
        let cqe = self.host.poll_cq(&mut self.rx_cq)?;
        assert_eq!(
            cqe[63] >> 4,
            CqeOpcode::RespSend as u8,
            "a receive completion"
        );
        let len = u32::from_be_bytes([cqe[44], cqe[45], cqe[46], cqe[47]]) as usize;
        let counter = u16::from_be_bytes([cqe[60], cqe[61]]);
        let buf = self.bufs[usize::from(counter) & (self.bufs.len() - 1)];
        let got = self.host.read(buf, len);
        self.host.post_recv(&mut self.rq, buf, BUF, self.key);
        Some(got)
    }
}

/// Checks a received frame against what its queue sent next; returns its queue.
fn check(got: &[u8], next: &mut [u32; QUEUES], from: &str) -> usize {
    let queue = usize::from(got[42]);
    assert!(queue < QUEUES, "{from}: a frame of no send queue");
    let seq = u32::from_be_bytes([got[43], got[44], got[45], got[46]]);
    assert_eq!(
        seq, next[queue],
        "{from}: send queue {queue}'s frames arrive in the order sent"
    );
    assert_eq!(got, frame(queue, seq), "{from}: the frame arrives complete");
    next[queue] += 1;
    queue
}

#[test]
fn on_two_device_threads_every_queue_s_frames_arrive_complete_in_order_and_counted() {
    let (a, b) = Device::pair(two_threads(), two_threads());
    let wire = a.wire().expect("wired").0;
    let mut sa = Side::new(a.clone());
    let mut sb = Side::new(b.clone());
    // Both directions at once, so both device threads work together.
    let per_queue = 1500u32;
    let total = per_queue as usize * QUEUES;
    let (mut sent, mut received) = ([0u32; QUEUES], [[0u32; QUEUES]; 2]);
    let (mut got_a, mut got_b, mut done_a, mut done_b) = (0, 0, 0, 0);
    let deadline = Instant::now() + Duration::from_secs(60);
    while (got_a < total || got_b < total) && Instant::now() < deadline {
        for (q, seq) in sent.iter_mut().enumerate() {
            // In flight at most what the receiving ring holds, so nothing meets a full ring.
            let in_flight = (*seq as usize * QUEUES).saturating_sub(got_a.min(got_b));
            if *seq < per_queue && in_flight < 512 {
                let f = frame(q, *seq);
                sa.send(q, &f);
                sb.send(q, &f);
                *seq += 1;
            }
        }
        done_a += sa.reap_sends();
        done_b += sb.reap_sends();
        while let Some(f) = sb.receive() {
            check(&f, &mut received[0], "a to b");
            got_b += 1;
        }
        while let Some(f) = sa.receive() {
            check(&f, &mut received[1], "b to a");
            got_a += 1;
        }
        std::thread::yield_now();
    }
    while (done_a < total || done_b < total) && Instant::now() < deadline {
        done_a += sa.reap_sends();
        done_b += sb.reap_sends();
        std::thread::yield_now();
    }
    assert_eq!((got_a, got_b), (total, total), "every frame arrived");
    assert_eq!((done_a, done_b), (total, total), "every send completed");
    let (ca, cb) = (a.counters(), b.counters());
    let total = total as u64;
    assert_eq!((ca.tx_frames, ca.rx_frames), (total, total), "a's counters");
    assert_eq!((cb.tx_frames, cb.rx_frames), (total, total), "b's counters");
    for port in wire.ports() {
        let w = wire.counters(port).expect("port");
        assert_eq!((w.tx_frames, w.rx_frames, w.dropped), (total, total, 0));
    }
    assert_eq!(ca.tx_bytes, cb.rx_bytes, "every byte a sent, b took");
    assert_eq!(cb.tx_bytes, ca.rx_bytes, "every byte b sent, a took");
}

#[test]
fn a_teardown_with_frames_in_flight_on_two_device_threads_accounts_for_every_frame() {
    let (a, b) = Device::pair(two_threads(), two_threads());
    let wire = a.wire().expect("wired").0;
    let mut sa = Side::new(a.clone());
    let mut sb = Side::new(b.clone());
    // More than the receiving ring holds: some frames find no buffer and are counted dropped.
    let per_queue = 400u32;
    for seq in 0..per_queue {
        for q in 0..QUEUES {
            sa.send(q, &frame(q, seq));
        }
    }
    // The sender goes away while its device thread still works through the doorbells: what
    // it had not sent is never sent (its queues are gone), nothing panics.
    sa.host.teardown();
    let posted = u64::from(per_queue) * QUEUES as u64;
    let port_a = wire.ports().next().expect("port a");
    let port_b = wire.peer(port_a).expect("port b");
    // Whatever left a, b takes off the wire: received, or counted as a frame its queue had no
    // buffer for. b counts a frame as taken when it takes it off the wire, before it writes
    // its completion or counts its missing buffer, so "b took them all" is not yet "b is
    // done": wait until every frame is accounted for; the deadline only bounds a failure.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut next = [0u32; QUEUES];
    let mut delivered = 0u64;
    loop {
        while let Some(f) = sb.receive() {
            let q = check_after_gaps(&f, &mut next);
            assert!(q < QUEUES);
            delivered += 1;
        }
        let left = wire.counters(port_a).expect("port").tx_frames;
        let arrived = wire.counters(port_b).expect("port");
        let cb = b.counters();
        let settled = arrived.rx_frames + arrived.dropped == left
            && cb.rx_frames == arrived.rx_frames
            && delivered + cb.rx_out_of_buffer == cb.rx_frames;
        if settled || Instant::now() > deadline {
            break;
        }
        std::thread::yield_now();
    }
    let left = wire.counters(port_a).expect("port").tx_frames;
    let arrived = wire.counters(port_b).expect("port");
    assert!(left <= posted, "no frame sent twice: {left} of {posted}");
    assert_eq!(
        a.counters().tx_frames,
        left,
        "a counts what it put on the wire"
    );
    assert_eq!(
        arrived.rx_frames + arrived.dropped,
        left,
        "the wire lost nothing"
    );
    let cb = b.counters();
    assert_eq!(
        cb.rx_frames, arrived.rx_frames,
        "b took every frame that arrived"
    );
    let missed = cb.rx_out_of_buffer;
    // Poll once more: a completion after every frame was accounted for would be a frame
    // delivered twice.
    while sb.receive().is_some() {
        delivered += 1;
    }
    println!(
        "posted {posted}, sent {left}, delivered {delivered}, no buffer {missed}, bad doorbells {}",
        a.counters().bad_doorbells
    );
    assert_eq!(
        delivered + missed,
        cb.rx_frames,
        "every frame b took was delivered or counted as finding no buffer"
    );
    // Dropping every handle stops both device threads: it must return, traffic or not.
    for seq in 0..64 {
        sb.send(0, &frame(0, seq));
    }
    let (done, finished) = mpsc::channel();
    let dropper = std::thread::spawn(move || {
        drop((sa, sb, a, b, wire));
        let _ = done.send(());
    });
    assert!(
        finished.recv_timeout(Duration::from_secs(20)).is_ok(),
        "dropping the pair with traffic in flight hung"
    );
    dropper.join().expect("no panic while dropping");
}

/// Like [`check`], but a queue's frames may stop short (the sender went away) and frames that
/// found no buffer leave gaps: each still arrives complete and after those sent before it.
fn check_after_gaps(got: &[u8], next: &mut [u32; QUEUES]) -> usize {
    let queue = usize::from(got[42]);
    assert!(queue < QUEUES, "a frame of no send queue");
    let seq = u32::from_be_bytes([got[43], got[44], got[45], got[46]]);
    assert!(
        seq >= next[queue],
        "queue {queue}: {seq} after {}",
        next[queue]
    );
    assert_eq!(got, frame(queue, seq), "the frame arrives complete");
    next[queue] = seq + 1;
    queue
}

/// Polls `cq` of `host` (memory only, never the device) until a completion arrives.
fn wait_cqe(host: &Host, cq: &mut Cq, what: &str) -> Vec<u8> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(cqe) = host.poll_cq(cq) {
            return cqe;
        }
        assert!(Instant::now() < deadline, "{what}: no completion");
        std::thread::sleep(Duration::from_micros(200));
    }
}

#[test]
fn on_two_device_threads_an_rc_send_waits_out_rnr_naks_by_its_timer_and_lands() {
    // Each function's RC work on its own thread: B's responder answers on B's, A's RNR wait
    // runs out on A's, and nothing here polls a device.
    let mut link = RcPair::new(two_threads(), MEM, 8, 4, 4, RcPath::to(GID_B, MAC_B, 0));
    let lkey_a = link.a.create_mkey(false, true);
    let lkey_b = link.b.create_mkey(false, true);
    for i in 0..8u16 {
        // Three packets at the path MTU of 1024.
        let msg: Vec<u8> = (0..3000u32).map(|k| (k * 7 + u32::from(i)) as u8).collect();
        let src = link.a.alloc(4096, 4096);
        let dst = link.b.alloc(4096, 4096);
        link.a.write(src, &msg);
        let w = rc_wqe(
            &link.qp_a.sq,
            opcode::SEND,
            0,
            None,
            None,
            (src, lkey_a, msg.len() as u32),
        );
        link.a.post(&mut link.qp_a.sq, &w, false);
        if i % 2 == 0 {
            // No receive posted yet: B answers with an RNR NAK, and A sends again when its
            // timer says, until the receive is there.
            let naks = link.b.dev.counters().roce_rnr_naks_sent;
            let deadline = Instant::now() + Duration::from_secs(20);
            while link.b.dev.counters().roce_rnr_naks_sent == naks {
                assert!(Instant::now() < deadline, "message {i}: no RNR NAK");
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        link.b.post_rc_recv(&mut link.qp_b, dst, 4096, lkey_b);
        let sent = wait_cqe(&link.a, &mut link.cq_a, "send");
        assert_eq!(sent[63] >> 4, CqeOpcode::Req as u8, "message {i}: sent");
        let got = wait_cqe(&link.b, &mut link.cq_b, "receive");
        assert_eq!(
            got[63] >> 4,
            CqeOpcode::RespSend as u8,
            "message {i}: received"
        );
        assert_eq!(link.b.read(dst, msg.len()), msg, "message {i}: intact");
    }
    let (a, b) = (link.a.dev.counters(), link.b.dev.counters());
    assert!(b.roce_rnr_naks_sent >= 4, "{b:?}");
    assert!(a.roce_retransmits > 0, "A's timer sent again: {a:?}");
}
