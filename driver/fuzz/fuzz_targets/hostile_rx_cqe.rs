//! A hostile device's completions on the fast path: on an emulated pair (port A sends, port B
//! receives) one CQE is damaged (bytes overwritten, the owner bit kept) on B's receive CQ or A's
//! send CQ, among a few frames. The driver must refuse what it cannot use, stop the queue and
//! recover it; no buffer may be lost or handed out twice: with no buffer held by the
//! application, each pool's free buffers plus those its rings hold equal its capacity, and no
//! two packets handed out share a buffer.
//!
//! Input: byte 0: bit 0 picks the CQ (0: B's receive CQ, 1: A's send CQ), bits 3:1 the number
//! of frames (1..=8), bit 4 (receive CQ only) damages the next compressed session instead of the
//! next CQE, bit 5 then picks its slot (0: the title, 1: the mini-CQE array); byte 1: frames
//! sent before the fault is armed; then (offset, value) pairs (up to 8) overwriting CQE bytes
//! (offset mod 64). A session fault still armed after the probe (no session was written: the
//! frames came one at a time) goes with the pair, which is built again.
//!
//! A clean probe frame follows every input (polled for up to a second when it does not arrive
//! at once). A queue that neither delivers it nor reports an error has stalled without telling: that is printed (the first five, or all with
//! `CXDIRECT_FUZZ_STALL_LOG=1`; a crash with `CXDIRECT_FUZZ_STALL_PANICS=1`, to minimise it), and
//! the pair is built again.

#![no_main]

use cxdirect::{Device, Mbuf, Port, PortConfig, Queues, RxQueue, Started, TxQueue};
use cxdirect_apps::emulated::EmuBackend;
use cxdirect_emu::{Device as Model, EmuConfig, Fault};
use cxdirect_tests::setup;
use libfuzzer_sys::fuzz_target;
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

struct Pair {
    model_a: Model,
    model_b: Model,
    pa: Port<EmuBackend>,
    pb: Port<EmuBackend>,
    txa: TxQueue<EmuBackend>,
    rxa: RxQueue<EmuBackend>,
    rxb: RxQueue<EmuBackend>,
    /// B's send queue, kept so the port's queues stay whole (never used).
    _txb: TxQueue<EmuBackend>,
    seq: u32,
}

fn config() -> PortConfig {
    PortConfig {
        ring_size: 64,
        pool_buffers: 256,
        // A send completion every other WQE, so damaged send CQEs come often.
        cqe_every: 2,
        ..PortConfig::default()
    }
}

fn one(queues: Queues<EmuBackend>) -> (TxQueue<EmuBackend>, RxQueue<EmuBackend>) {
    let Queues { mut tx, mut rx } = queues;
    (tx.remove(0), rx.remove(0))
}

fn pair() -> Pair {
    let cfg = EmuConfig {
        init_delay: Some(Duration::ZERO),
        ..EmuConfig::default()
    };
    let (model_a, model_b) = Model::pair(cfg.clone(), cfg);
    let opts = setup::options(Duration::from_secs(2));
    let da = Device::bring_up(EmuBackend::new(model_a.clone(), "a"), opts.clone()).unwrap();
    let db = Device::bring_up(EmuBackend::new(model_b.clone(), "b"), opts).unwrap();
    let Started {
        port: pa,
        queues: qa,
    } = Port::start(da, config()).unwrap();
    let Started {
        port: pb,
        queues: qb,
    } = Port::start(db, config()).unwrap();
    let (txa, rxa) = one(qa);
    let (txb, rxb) = one(qb);
    Pair {
        model_a,
        model_b,
        pa,
        pb,
        txa,
        rxa,
        rxb,
        _txb: txb,
        seq: 0,
    }
}

fn state() -> &'static Mutex<Option<Pair>> {
    static STATE: OnceLock<Mutex<Option<Pair>>> = OnceLock::new();
    STATE.get_or_init(|| Mutex::new(None))
}

static STALLS: AtomicU64 = AtomicU64::new(0);

/// How long a probe that has not arrived is polled for: longer than the compressed CQ's wait
/// before it calls a slot skipped (250 ms).
const PATIENCE: Duration = Duration::from_secs(1);

impl Pair {
    /// Recovers whichever queue stopped; recovery of a queue whose only fault was a damaged
    /// completion must succeed.
    fn recover(&mut self) {
        if self.txa.in_error() {
            self.pa
                .recover_tx(&mut self.txa)
                .expect("send queue recovery");
        }
        if self.rxb.in_error() {
            self.pb
                .recover_rx(&mut self.rxb)
                .expect("receive queue recovery");
        }
        if self.rxa.in_error() {
            self.pa
                .recover_rx(&mut self.rxa)
                .expect("receive queue recovery");
        }
    }

    /// Sends `count` frames (recovering the send queue when it stops) and takes what arrives
    /// at B into `got`.
    fn send(&mut self, count: usize, got: &mut Vec<Mbuf>) {
        let mut batch = Vec::with_capacity(count);
        for _ in 0..count {
            let Some(mut m) = self.pa.pool().alloc() else {
                break;
            };
            self.seq = self.seq.wrapping_add(1);
            m.set_data(&cxdirect_tests::udp_frame(self.seq, 9000))
                .unwrap();
            batch.push(m);
        }
        let mut spins = 0;
        while !batch.is_empty() && spins < 64 {
            self.txa.tx_burst(&mut batch);
            self.receive(got);
            self.recover();
            spins += 1;
        }
        // Frames the send queue would not take go back to the pool.
        drop(batch);
        self.receive(got);
    }

    fn receive(&mut self, got: &mut Vec<Mbuf>) {
        for _ in 0..4 {
            let before = got.len();
            self.rxb.rx_burst(got, 64).unwrap();
            self.rxa.rx_burst(got, 64).unwrap();
            if self.rxb.in_error() || self.rxa.in_error() {
                self.recover();
            } else if got.len() == before {
                break;
            }
        }
    }

    /// Each pool's free buffers plus those its rings hold make its capacity (nothing lost,
    /// nothing handed out twice), with no buffer held outside the rings.
    fn check_pools(&self) {
        let a = self.pa.pool();
        let b = self.pb.pool();
        assert!(a.available() <= a.capacity() && b.available() <= b.capacity());
        assert_eq!(
            a.available() as usize + self.txa.in_flight() + self.rxa.posted(),
            a.capacity() as usize,
            "pool A: free {} + in flight {} + posted {} != capacity {}",
            a.available(),
            self.txa.in_flight(),
            self.rxa.posted(),
            a.capacity()
        );
        assert_eq!(
            b.available() as usize + self.rxb.posted(),
            b.capacity() as usize,
            "pool B: free {} + posted {} != capacity {}",
            b.available(),
            self.rxb.posted(),
            b.capacity()
        );
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let on_send_cq = data[0] & 1 == 1;
    let frames = usize::from((data[0] >> 1) & 7) + 1;
    let before_fault = usize::from(data[1]) % frames;
    let patch: Vec<(u8, u8)> = data[2..]
        .chunks_exact(2)
        .take(8)
        .map(|c| (c[0] % 64, c[1]))
        .collect();

    let mut guard = state().lock().unwrap_or_else(|e| e.into_inner());
    let p = guard.get_or_insert_with(pair);
    let mut got = Vec::new();
    p.send(before_fault, &mut got);
    let fault = if on_send_cq {
        (p.model_a.clone(), p.txa.cqn())
    } else {
        (p.model_b.clone(), p.rxb.cqn())
    };
    let on_session = !on_send_cq && data[0] & 0x10 != 0;
    fault.0.inject(if on_session {
        Fault::CorruptSession {
            cqn: fault.1,
            slot: u32::from((data[0] >> 5) & 1),
            patch,
        }
    } else {
        Fault::CorruptCqe {
            cqn: fault.1,
            patch,
        }
    });
    p.send(frames - before_fault, &mut got);

    // No two packets handed out share a buffer.
    for m in &got {
        assert!(m.len() <= m.capacity());
        let _ = m.to_vec();
    }
    let distinct: HashSet<usize> = got.iter().map(|m| m.memory_offset()).collect();
    assert_eq!(distinct.len(), got.len(), "one buffer handed out twice");
    drop(got);
    p.check_pools();

    // A clean probe must arrive once the queues are ready again (a send fault not yet taken,
    // waiting for a completion, is left armed).
    let mut probe = Vec::new();
    p.send(1, &mut probe);
    if probe.is_empty() && !on_send_cq {
        // A slot that reads as not written with one written behind it is called skipped only
        // after the compressed CQ's patience (the device writes a session's arrays before its
        // title): poll past it, and probe again once the queue was recovered.
        let deadline = Instant::now() + PATIENCE;
        let recoveries = p.rxb.stats().recoveries;
        while probe.is_empty() && Instant::now() < deadline {
            p.receive(&mut probe);
            if probe.is_empty() && p.rxb.stats().recoveries != recoveries {
                p.send(1, &mut probe);
                break;
            }
        }
    }
    let arrived = !probe.is_empty();
    drop(probe);
    p.check_pools();
    let stuck_fault = !on_send_cq && !on_session && p.model_b.faults_pending() > 0;
    if !arrived || stuck_fault {
        let n = STALLS.fetch_add(1, Ordering::Relaxed) + 1;
        let what = format!(
            "stall #{n}: probe arrived {arrived}, fault pending {stuck_fault}; rx B {:?}, tx A \
             {:?}; input {data:02x?}",
            p.rxb.stats(),
            p.txa.stats()
        );
        if std::env::var_os("CXDIRECT_FUZZ_STALL_PANICS").is_some() {
            panic!("{what}");
        }
        if n <= 5 || std::env::var_os("CXDIRECT_FUZZ_STALL_LOG").is_some() {
            eprintln!("{what}");
        }
        *guard = None;
        return;
    }
    if on_session && p.model_b.faults_pending() > 0 {
        *guard = None;
    }
});
