//! The RoCE v2 RC transport over an impaired wire: with frames dropped, duplicated and
//! reordered, every SEND and RDMA WRITE still arrives exactly once, in order, its bytes
//! intact, with every completion on both sides and no error; every RDMA READ lands once,
//! intact, and every atomic is executed exactly once.

use cxdirect_emu::testkit::rc::{rc_wqe, RcPath, RemoteRights, GID_B, MAC_A, MAC_B};
use cxdirect_emu::testkit::rc_pair::RcPair;
use cxdirect_emu::testkit::{Host, IOVA_BASE};
use cxdirect_emu::wire::{ImpairmentCounters, Impairments, PortId, Wire, WireConfig};
use cxdirect_emu::{Device, EmuConfig, ExecMode};
use cxdirect_hw::wqe::opcode;
use std::sync::Arc;
use std::time::{Duration, Instant};

const MEM: usize = 8 << 20;
/// Receive WQEs of each QP's own ring.
const RQ_ENTRIES: u16 = 16;
const MTU: usize = 1024;
/// Messages each test moves, alternately SEND and RDMA WRITE.
const MESSAGES: u16 = 200;
/// The biggest message: sizes cycle through 1..=3 * MTU.
const MAX_LEN: usize = 3 * MTU;
/// Messages posted and not yet completed at the requester, at most.
const IN_FLIGHT: u16 = 12;
/// ACK timeout code: 4.096 us << 9, about 2 ms, so that a lost packet costs little time.
const ACK_TIMEOUT: u8 = 9;
/// How long a test may take to move everything before it fails.
const TIME_LIMIT: Duration = Duration::from_secs(60);
/// ACK timeout code on a perfect wire: 4.096 us << 24, about 69 s, past [`TIME_LIMIT`]. Nothing
/// is lost there, so no timer is needed; a 2 ms one runs out whenever the test's thread is
/// kept from running that long between a request and its ACK (a loaded machine), and sends
/// again what was not lost.
const CLEAN_ACK_TIMEOUT: u8 = 24;
/// ACK timeout code when each function runs on its own device thread: 4.096 us << 13, about
/// 34 ms. The requester's patience is its seven retries of this: a responder's thread kept
/// from running for seven 2 ms timeouts (a loaded machine) would fail the WQE with retry
/// exceeded.
const THREAD_ACK_TIMEOUT: u8 = 13;
const SEED: u64 = 0x5eed_0c10_55e5;
/// Log2 of the READs and atomics a QP may have outstanding, as requester and as responder.
const LOG_READS: u8 = 3;
/// Frames each port's receive FIFO holds.
const FIFO: usize = 4096;
/// A receive FIFO smaller than most messages: the requester sends as the far port takes them.
const TINY_FIFO: usize = 2;

/// A PA memory key over all host memory in the host's PD with remote read, write and
/// atomics.
fn remote_key(h: &mut Host) -> u32 {
    let all = RemoteRights {
        read: true,
        write: true,
        atomic: true,
    };
    h.create_remote_mkey(h.pd, IOVA_BASE, MEM as u64, all, 0x5a)
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

/// Message `i`: its length (1..=3 * MTU) and bytes, different for every message.
fn message(i: u16) -> Vec<u8> {
    let len = 1 + (usize::from(i) * 997) % MAX_LEN;
    (0..len)
        .map(|k| {
            (k as u8)
                .wrapping_mul(31)
                .wrapping_add(i as u8)
                .wrapping_add((i >> 8) as u8)
        })
        .collect()
}

fn is_send(i: u16) -> bool {
    i % 2 == 0
}

/// Two functions on a pair wire with `impairments` in both directions, each with an RC QP
/// connected to the other's.
fn link(impairments: Impairments) -> RcPair {
    link_on(
        impairments,
        ExecMode::Inline,
        FIFO,
        ack_timeout_for(&impairments),
    )
}

/// The ACK timeout code of a test on a wire with `impairments`, its functions run inline.
fn ack_timeout_for(impairments: &Impairments) -> u8 {
    if impairments.is_none() {
        CLEAN_ACK_TIMEOUT
    } else {
        ACK_TIMEOUT
    }
}

/// [`link`], the functions' work running as `exec` says, each port's receive FIFO holding
/// `fifo` frames, the QPs' ACK timeout code `ack_timeout`.
fn link_on(impairments: Impairments, exec: ExecMode, fifo: usize, ack_timeout: u8) -> RcPair {
    let cfg = |mac| EmuConfig {
        roce: true,
        mac,
        exec,
        ..EmuConfig::default()
    };
    let da = Device::new(cfg(MAC_A));
    let db = Device::new(cfg(MAC_B));
    let wire = Arc::new(
        Wire::pair_with(WireConfig {
            fifo_capacity: fifo,
            impairments,
        })
        .expect("valid impairments"),
    );
    da.attach(wire.clone(), PortId::A, &[&db]);
    db.attach(wire.clone(), PortId::B, &[&da]);
    let path = RcPath {
        send_psn: 0xff_ff00,
        ack_timeout,
        log_sra_max: LOG_READS,
        log_rra_max: LOG_READS,
        ..RcPath::to(GID_B, MAC_B, 0)
    };
    let (a, b) = (Host::new(da, MEM), Host::new(db, MEM));
    RcPair::on_hosts(a, b, wire, 8, 4, 4, path)
}

/// Lets whatever the wire still holds land, and checks that nothing completes twice.
fn quiesce(link: &mut RcPair) {
    link.wire.release_held(PortId::A).expect("port");
    link.wire.release_held(PortId::B).expect("port");
    std::thread::sleep(Duration::from_millis(20));
    for _ in 0..4 {
        link.a.dev.poll();
        link.b.dev.poll();
    }
    assert!(
        link.a.poll_cq(&mut link.cq_a).is_none(),
        "no requester completion twice"
    );
    assert!(
        link.b.poll_cq(&mut link.cq_b).is_none(),
        "no responder completion twice"
    );
}

/// What the wire did in both directions, and how many times A sent packets again; the QPs
/// and functions go.
fn finish(link: RcPair) -> (ImpairmentCounters, u64) {
    let mut done = link.wire.impairment_counters(PortId::A).expect("port");
    let back = link.wire.impairment_counters(PortId::B).expect("port");
    done.frames += back.frames;
    done.dropped += back.dropped;
    done.duplicated += back.duplicated;
    done.reordered += back.reordered;
    done.corrupted += back.corrupted;
    let retransmits = link.a.dev.counters().roce_retransmits;
    link.teardown();
    (done, retransmits)
}

/// Moves [`MESSAGES`] messages from A to B over a wire with `impairments` in both directions
/// and checks that each arrived once, in order, intact, with all completions and no error.
/// Returns what the wire did in both directions, and how many times A sent packets again.
fn run(impairments: Impairments) -> (ImpairmentCounters, u64) {
    run_through(impairments, FIFO)
}

/// [`run`] with each port's receive FIFO holding `fifo` frames.
fn run_through(impairments: Impairments, fifo: usize) -> (ImpairmentCounters, u64) {
    let RcPair {
        mut a,
        mut b,
        mut cq_a,
        mut cq_b,
        mut qp_a,
        mut qp_b,
        wire,
    } = link_on(
        impairments,
        ExecMode::Inline,
        fifo,
        ack_timeout_for(&impairments),
    );
    let lkey_a = a.create_mkey(false, true);
    let lkey_b = b.create_mkey(false, true);
    let rkey_b = remote_key(&mut b);
    let slot = MAX_LEN as u64;
    let src = a.alloc(slot * u64::from(MESSAGES), 4096);
    let dst = b.alloc(slot * u64::from(MESSAGES), 4096);
    b.write(dst, &vec![0xee; MAX_LEN * usize::from(MESSAGES)]);
    for i in 0..MESSAGES {
        a.write(src + slot * u64::from(i), &message(i));
    }
    // Receive WQE `r` takes the `r`th SEND, message `2 * r`.
    let sends = (0..MESSAGES).filter(|&i| is_send(i)).count() as u16;
    let mut posted = 0u16;
    let mut requester_done = 0u16;
    let mut receives_done = 0u16;
    let started = Instant::now();
    while requester_done < MESSAGES || receives_done < sends {
        assert!(
            started.elapsed() < TIME_LIMIT,
            "stuck: {requester_done} requester and {receives_done} responder completions; \
             {:?}",
            a.dev.counters()
        );
        while qp_b.rq_pi < sends && qp_b.rq_pi.wrapping_sub(receives_done) < RQ_ENTRIES {
            let i = 2 * qp_b.rq_pi;
            b.post_rc_recv(&mut qp_b, dst + slot * u64::from(i), MAX_LEN as u32, lkey_b);
        }
        while posted < MESSAGES && posted - requester_done < IN_FLIGHT {
            let i = posted;
            let len = message(i).len() as u32;
            let local = (src + slot * u64::from(i), lkey_a, len);
            let w = if is_send(i) {
                rc_wqe(&qp_a.sq, opcode::SEND, 0, None, None, local)
            } else {
                let remote = (dst + slot * u64::from(i), rkey_b);
                rc_wqe(&qp_a.sq, opcode::RDMA_WRITE, 0, Some(remote), None, local)
            };
            a.post(&mut qp_a.sq, &w, false);
            posted += 1;
        }
        a.dev.poll();
        b.dev.poll();
        let mut progressed = false;
        while let Some(c) = a.poll_cq(&mut cq_a) {
            let i = requester_done;
            assert_eq!(
                cqe_opcode(&c),
                0,
                "message {i}: a requester completion, no error"
            );
            assert_eq!(wqe_counter(&c), i, "requester completions in order");
            let op = if is_send(i) {
                opcode::SEND
            } else {
                opcode::RDMA_WRITE
            };
            assert_eq!(be32(&c, 56), (u32::from(op) << 24) | qp_a.qpn);
            requester_done += 1;
            progressed = true;
        }
        while let Some(c) = b.poll_cq(&mut cq_b) {
            let r = receives_done;
            let i = 2 * r;
            assert!(r < sends, "a responder completion for no SEND: {c:?}");
            assert_eq!(cqe_opcode(&c), 2, "message {i}: a SEND received, no error");
            assert_eq!(wqe_counter(&c), r, "receives completed in order");
            assert_eq!(
                be32(&c, 44),
                message(i).len() as u32,
                "message {i}: byte count"
            );
            let want = message(i);
            assert_eq!(
                b.read(dst + slot * u64::from(i), want.len()),
                want,
                "message {i}: delivered intact when completed"
            );
            receives_done += 1;
            progressed = true;
        }
        if !progressed {
            std::thread::sleep(Duration::from_micros(500));
        }
    }
    let mut link = RcPair {
        a,
        b,
        cq_a,
        cq_b,
        qp_a,
        qp_b,
        wire,
    };
    // Whatever is still held or retransmitted lands now; nothing may complete twice.
    quiesce(&mut link);
    let b = &link.b;
    for i in 0..MESSAGES {
        let want = message(i);
        let at = dst + slot * u64::from(i);
        assert_eq!(b.read(at, want.len()), want, "message {i}: bytes intact");
        assert_eq!(
            b.read(at + want.len() as u64, MAX_LEN - want.len()),
            vec![0xee; MAX_LEN - want.len()],
            "message {i}: nothing past its end"
        );
    }
    if impairments.corrupt_probability == 0.0 {
        assert_eq!(
            link.b.dev.counters().roce_icrc_drops,
            0,
            "no corruption asked for"
        );
        assert_eq!(
            link.a.dev.counters().roce_icrc_drops,
            0,
            "no corruption asked for"
        );
    }
    finish(link)
}

fn impaired(edit: impl FnOnce(&mut Impairments)) -> Impairments {
    let mut i = Impairments {
        seed: SEED,
        ..Impairments::NONE
    };
    edit(&mut i);
    i
}

#[test]
fn a_clean_wire_moves_every_message() {
    let (wire, retransmits) = run(Impairments::NONE);
    assert_eq!(wire.dropped + wire.duplicated + wire.reordered, 0);
    assert_eq!(retransmits, 0, "nothing lost, nothing sent again");
}

#[test]
fn a_two_frame_fifo_takes_every_message_without_a_drop() {
    // Messages of up to three packets, twelve in flight, into a FIFO of two frames: the
    // requester sends only what the far port has room for, so nothing is lost or sent again.
    let (wire, retransmits) = run_through(Impairments::NONE, TINY_FIFO);
    assert_eq!(wire.dropped + wire.duplicated + wire.reordered, 0);
    assert_eq!(
        retransmits, 0,
        "no frame overflowed the FIFO, nothing sent again"
    );
}

#[test]
fn five_percent_drop_through_a_two_frame_fifo() {
    // Go-back-N while the requester waits for room: a retransmission drops the unsent rest
    // and starts again from the first unacknowledged WQE.
    let impairments = impaired(|i| i.drop_probability = 0.05);
    let (wire, retransmits) = run_through(impairments, TINY_FIFO);
    assert!(wire.dropped > 10, "frames were dropped: {wire:?}");
    assert!(retransmits > 0, "lost packets were sent again");
}

#[test]
fn one_percent_drop() {
    let (wire, retransmits) = run(impaired(|i| i.drop_probability = 0.01));
    assert!(wire.dropped > 0, "frames were dropped: {wire:?}");
    assert!(retransmits > 0, "lost packets were sent again");
}

#[test]
fn five_percent_drop() {
    let (wire, retransmits) = run(impaired(|i| i.drop_probability = 0.05));
    assert!(wire.dropped > 10, "frames were dropped: {wire:?}");
    assert!(retransmits > 0, "lost packets were sent again");
}

#[test]
fn duplication() {
    let (wire, _) = run(impaired(|i| i.duplicate_probability = 0.05));
    assert!(wire.duplicated > 10, "frames were duplicated: {wire:?}");
}

#[test]
fn reordering_within_four_frames() {
    let (wire, _) = run(impaired(|i| {
        i.reorder_probability = 0.05;
        i.reorder_window = 4;
    }));
    assert!(wire.reordered > 10, "frames were reordered: {wire:?}");
}

#[test]
fn drop_duplication_and_reordering_together() {
    let (wire, retransmits) = run(impaired(|i| {
        i.drop_probability = 0.05;
        i.duplicate_probability = 0.05;
        i.reorder_probability = 0.05;
        i.reorder_window = 4;
    }));
    assert!(
        wire.dropped > 10 && wire.duplicated > 10 && wire.reordered > 10,
        "every impairment happened: {wire:?}"
    );
    assert!(retransmits > 0, "lost packets were sent again");
}

/// Corrupted and delayed frames as well: a flipped bit anywhere in a frame, the IP version
/// or header length included, costs that frame and nothing else.
#[test]
fn corruption_and_delay_with_everything_else() {
    let (wire, retransmits) = run(impaired(|i| {
        i.drop_probability = 0.05;
        i.duplicate_probability = 0.05;
        i.reorder_probability = 0.05;
        i.reorder_window = 4;
        i.corrupt_probability = 0.05;
        i.delay_frames = 1;
        i.delay_jitter_frames = 3;
    }));
    assert!(wire.corrupted > 10, "frames were corrupted: {wire:?}");
    assert!(retransmits > 0, "lost packets were sent again");
}

/// Operations each READ and atomic test runs: in turn an RDMA READ, a fetch-and-add and an
/// RDMA WRITE (whose ACKs may pass a READ or atomic whose response was lost).
const OPERATIONS: u16 = 240;
/// What each fetch-and-add adds.
const ADD: u64 = 3;

fn is_read(i: u16) -> bool {
    i % 3 == 0
}

fn is_atomic(i: u16) -> bool {
    i % 3 == 1
}

/// A runs [`OPERATIONS`] operations on B over a wire with `impairments` in both directions:
/// in turn an RDMA READ of message `i` (1..=3 * MTU bytes), a fetch-and-add of [`ADD`] to one
/// counter, and an RDMA WRITE of message `i`. Checks: every requester completion once, in
/// order, without error; every READ's and WRITE's bytes intact and nothing past them; the
/// `k`th fetch-and-add found exactly `k * ADD` (each executed once, in order) and the counter
/// ends at the number of them times [`ADD`]; nothing completes at B. Returns what the wire
/// did, A's retransmissions and A's implied NAKs.
fn run_reads_and_atomics(impairments: Impairments) -> (ImpairmentCounters, u64, u64) {
    let mut link = link(impairments);
    let lkey_a = link.a.create_mkey(false, true);
    let rkey_b = remote_key(&mut link.b);
    let slot = MAX_LEN as u64;
    let src = link.b.alloc(slot * u64::from(OPERATIONS), 4096);
    let dst = link.a.alloc(slot * u64::from(OPERATIONS), 4096);
    let counter = link.b.alloc(64, 64);
    link.b.write(counter, &0u64.to_be_bytes());
    link.a
        .write(dst, &vec![0xee; MAX_LEN * usize::from(OPERATIONS)]);
    link.b
        .write(src, &vec![0xee; MAX_LEN * usize::from(OPERATIONS)]);
    for i in 0..OPERATIONS {
        let at = slot * u64::from(i);
        if is_read(i) {
            link.b.write(src + at, &message(i));
        } else if !is_atomic(i) {
            link.a.write(dst + at, &message(i));
        }
    }
    let mut posted = 0u16;
    let mut done = 0u16;
    let started = Instant::now();
    while done < OPERATIONS {
        assert!(
            started.elapsed() < TIME_LIMIT,
            "stuck: {done} completions; {:?}",
            link.a.dev.counters()
        );
        while posted < OPERATIONS && posted - done < IN_FLIGHT {
            let i = posted;
            let at = dst + slot * u64::from(i);
            let len = message(i).len() as u32;
            let remote = (src + slot * u64::from(i), rkey_b);
            let w = if is_read(i) {
                rc_wqe(
                    &link.qp_a.sq,
                    opcode::RDMA_READ,
                    0,
                    Some(remote),
                    None,
                    (at, lkey_a, len),
                )
            } else if is_atomic(i) {
                rc_wqe(
                    &link.qp_a.sq,
                    opcode::ATOMIC_FA,
                    0,
                    Some((counter, rkey_b)),
                    Some((ADD, 0)),
                    (at, lkey_a, 8),
                )
            } else {
                rc_wqe(
                    &link.qp_a.sq,
                    opcode::RDMA_WRITE,
                    0,
                    Some(remote),
                    None,
                    (at, lkey_a, len),
                )
            };
            link.a.post(&mut link.qp_a.sq, &w, false);
            posted += 1;
        }
        link.a.dev.poll();
        link.b.dev.poll();
        let mut progressed = false;
        while let Some(c) = link.a.poll_cq(&mut link.cq_a) {
            let i = done;
            assert_eq!(cqe_opcode(&c), 0, "operation {i}: completed, no error");
            assert_eq!(wqe_counter(&c), i, "completions in order");
            let at = dst + slot * u64::from(i);
            if is_read(i) {
                let want = message(i);
                assert_eq!(be32(&c, 44), want.len() as u32, "READ {i}: byte count");
                assert_eq!(
                    be32(&c, 56),
                    (u32::from(opcode::RDMA_READ) << 24) | link.qp_a.qpn
                );
                assert_eq!(
                    link.a.read(at, want.len()),
                    want,
                    "READ {i}: intact when completed"
                );
            } else if is_atomic(i) {
                let k = u64::from(i / 3);
                assert_eq!(be32(&c, 44), 8, "atomic {i}: byte count");
                assert_eq!(
                    link.a.read(at, 8),
                    (k * ADD).to_be_bytes(),
                    "atomic {i}: the {k}th fetch-and-add found {k} adds before it"
                );
            } else {
                let want = message(i);
                assert_eq!(
                    link.b.read(src + slot * u64::from(i), want.len()),
                    want,
                    "WRITE {i}: intact when completed"
                );
            }
            done += 1;
            progressed = true;
        }
        assert!(
            link.b.poll_cq(&mut link.cq_b).is_none(),
            "READs and atomics complete nothing at the responder"
        );
        if !progressed {
            std::thread::sleep(Duration::from_micros(500));
        }
    }
    quiesce(&mut link);
    let atomics = u64::from(OPERATIONS / 3);
    assert_eq!(
        link.b.read(counter, 8),
        (atomics * ADD).to_be_bytes(),
        "every fetch-and-add executed exactly once"
    );
    for i in 0..OPERATIONS {
        let len = if is_atomic(i) { 8 } else { message(i).len() };
        // A READ lands at A, a WRITE at B; an atomic's result at A.
        let (h, at) = if is_read(i) || is_atomic(i) {
            (&link.a, dst + slot * u64::from(i))
        } else {
            (&link.b, src + slot * u64::from(i))
        };
        if !is_atomic(i) {
            assert_eq!(h.read(at, len), message(i), "operation {i}: intact");
        }
        assert_eq!(
            h.read(at + len as u64, MAX_LEN - len),
            vec![0xee; MAX_LEN - len],
            "operation {i}: nothing past its end"
        );
    }
    let implied = link.a.dev.counters().roce_implied_naks;
    let (wire, retransmits) = finish(link);
    (wire, retransmits, implied)
}

#[test]
fn reads_and_atomics_on_a_clean_wire() {
    let (wire, retransmits, _) = run_reads_and_atomics(Impairments::NONE);
    assert_eq!(wire.dropped + wire.duplicated + wire.reordered, 0);
    assert_eq!(retransmits, 0, "nothing lost, nothing sent again");
}

#[test]
fn reads_and_atomics_with_one_percent_drop() {
    let (wire, retransmits, _) = run_reads_and_atomics(impaired(|i| i.drop_probability = 0.01));
    assert!(wire.dropped > 0, "frames were dropped: {wire:?}");
    assert!(retransmits > 0, "lost packets were sent again");
}

#[test]
fn reads_and_atomics_with_five_percent_drop() {
    let (wire, retransmits, implied) =
        run_reads_and_atomics(impaired(|i| i.drop_probability = 0.05));
    assert!(wire.dropped > 10, "frames were dropped: {wire:?}");
    assert!(retransmits > 0, "lost packets were sent again");
    assert!(
        implied > 0,
        "ACKs past a lost READ response or atomic acknowledgement sent it again"
    );
}

#[test]
fn reads_and_atomics_with_duplication() {
    let (wire, _, _) = run_reads_and_atomics(impaired(|i| i.duplicate_probability = 0.05));
    assert!(wire.duplicated > 10, "frames were duplicated: {wire:?}");
}

#[test]
fn reads_and_atomics_with_reordering() {
    let (wire, _, _) = run_reads_and_atomics(impaired(|i| {
        i.reorder_probability = 0.05;
        i.reorder_window = 4;
    }));
    assert!(wire.reordered > 10, "frames were reordered: {wire:?}");
}

#[test]
fn reads_and_atomics_with_drop_duplication_and_reordering_together() {
    let (wire, retransmits, _) = run_reads_and_atomics(impaired(|i| {
        i.drop_probability = 0.05;
        i.duplicate_probability = 0.05;
        i.reorder_probability = 0.05;
        i.reorder_window = 4;
    }));
    assert!(
        wire.dropped > 10 && wire.duplicated > 10 && wire.reordered > 10,
        "every impairment happened: {wire:?}"
    );
    assert!(retransmits > 0, "lost packets were sent again");
}

/// Behind a device thread (as behind the vfio-user server) nobody calls `poll`: the thread
/// itself must send again what was lost, when the ACK timer runs out. Every second frame
/// each port sends is dropped, so SENDs and ACKs go missing with nothing after them to
/// reveal the gap; only the timer recovers them.
#[test]
fn the_device_thread_sends_lost_frames_again_without_a_poll() {
    let mut link = link_on(
        impaired(|i| i.drop_every = 2),
        ExecMode::Threaded,
        FIFO,
        THREAD_ACK_TIMEOUT,
    );
    let lkey_a = link.a.create_mkey(false, true);
    let lkey_b = link.b.create_mkey(false, true);
    let src = link.a.alloc(4096, 4096);
    let dst = link.b.alloc(4096 * 4, 4096);
    for i in 0..4u16 {
        // One packet each: a message of two would lose one of them every time it is sent.
        let mut want = message(i);
        want.truncate(MTU / 2);
        let at = dst + 4096 * u64::from(i);
        link.b.post_rc_recv(&mut link.qp_b, at, 4096, lkey_b);
        link.a.write(src, &want);
        let w = rc_wqe(
            &link.qp_a.sq,
            opcode::SEND,
            0,
            None,
            None,
            (src, lkey_a, want.len() as u32),
        );
        link.a.post(&mut link.qp_a.sq, &w, false);
        // Only memory is read here: the CQs, never the device.
        let started = Instant::now();
        let done = loop {
            if let Some(c) = link.a.poll_cq(&mut link.cq_a) {
                break c;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "message {i} never completed; {:?}",
                link.a.dev.counters()
            );
            std::thread::sleep(Duration::from_micros(200));
        };
        assert_eq!(cqe_opcode(&done), 0, "message {i}: completed, no error");
        assert_eq!(wqe_counter(&done), i);
        let received = loop {
            if let Some(c) = link.b.poll_cq(&mut link.cq_b) {
                break c;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "message {i} not received"
            );
            std::thread::sleep(Duration::from_micros(200));
        };
        assert_eq!(cqe_opcode(&received), 2, "message {i}: received");
        assert_eq!(link.b.read(at, want.len()), want, "message {i}: intact");
    }
    let wire = link.wire.impairment_counters(PortId::A).expect("port");
    assert!(wire.dropped > 0, "frames were lost: {wire:?}");
    let a = link.a.dev.counters();
    assert!(a.roce_retransmits > 0, "the timer sent them again");
    assert_eq!(
        a.roce_naks_sent + link.b.dev.counters().roce_naks_sent,
        0,
        "no NAK revealed a gap"
    );
    finish(link);
}
