//! Shared receive rings through the driver and the model: four queues drawing from one ring, the
//! low-watermark event, drops on an empty ring, error propagation and flushing, and receive
//! interrupts.

use cxdirect::{
    Device, DriverError, Event, Mbuf, Options, Port, PortConfig, Queues, SharedQueues,
    SharedRxConfig, Started, TxQueue,
};
use cxdirect_apps::emulated::EmuBackend;
use cxdirect_emu::{Device as Model, EmuConfig, Fault};
use cxdirect_hw::cmd::{CmdStatus, Opcode};
use cxdirect_hw::cqe::CqeSyndrome;
use cxdirect_hw::wq::{RmpState, RqState};
use std::time::Duration;

const BASE_PORT: u16 = 9000;
const QUEUES: u16 = 4;

struct Rig {
    tx_port: Port<EmuBackend>,
    tx: TxQueue<EmuBackend>,
    rx_port: Port<EmuBackend>,
    ring: cxdirect::SharedRxRing<EmuBackend>,
    queues: Vec<cxdirect::SharedRxQueue<EmuBackend>>,
    rx_model: Model,
}

impl Rig {
    /// Buffers of the receive pool neither free nor posted on the ring.
    fn unaccounted(&self) -> u32 {
        let pool = self.rx_port.pool();
        pool.capacity() - pool.available() - self.ring.outstanding()
    }
}

fn rig(ring_size: u32, limit: u32, interrupts: bool) -> Rig {
    let (a, b) = Model::pair(EmuConfig::default(), EmuConfig::default());
    let opts = Options {
        cmd_timeout: Duration::from_secs(5),
        msix_vectors: 1 + QUEUES,
        ..Options::default()
    };
    let da = Device::bring_up(EmuBackend::new(a.clone(), "a"), opts.clone()).unwrap();
    let db = Device::bring_up(EmuBackend::new(b.clone(), "b"), opts).unwrap();
    let base = PortConfig {
        ring_size: 256,
        pool_buffers: 4096,
        ..PortConfig::default()
    };
    let Started {
        port: tx_port,
        queues: Queues { tx: mut txs, rx: _ },
    } = Port::start(da, base.clone()).unwrap();
    let Started {
        port: mut rx_port,
        queues: Queues { tx: _, rx },
    } = Port::start(
        db,
        PortConfig {
            rx_queues: QUEUES,
            shared_rx: Some(SharedRxConfig { ring_size, limit }),
            udp_port_queues: Some(BASE_PORT),
            rx_interrupts: interrupts,
            ..base
        },
    )
    .unwrap();
    assert!(
        rx.is_empty(),
        "a shared-ring port hands its queues out separately"
    );
    let SharedQueues { ring, rx: queues } = rx_port.take_shared_rx().expect("shared ring handles");
    assert!(rx_port.take_shared_rx().is_none(), "handed out once");
    Rig {
        tx_port,
        tx: txs.remove(0),
        rx_port,
        ring,
        queues,
        rx_model: b,
    }
}

use cxdirect_tests::udp_frame as frame;

impl Rig {
    /// Sends frames `first..first + count`, frame `i` to queue `i % 4`'s port.
    fn send(&mut self, first: u32, count: u32) {
        let mut batch: Vec<Mbuf> = Vec::new();
        for seq in first..first + count {
            let mut m = self.tx_port.pool().alloc().expect("tx buffer");
            m.set_data(&frame(seq, BASE_PORT + (seq % u32::from(QUEUES)) as u16))
                .unwrap();
            batch.push(m);
        }
        let mut spins = 0;
        while !batch.is_empty() {
            self.tx.tx_burst(&mut batch);
            spins += 1;
            assert!(spins < 100_000, "send stalled");
        }
    }

    /// Receives everything pending on every queue: (queue, sequence number) per packet, each
    /// checked byte for byte.
    fn receive_all(&mut self) -> Vec<(usize, u32)> {
        let mut got = Vec::new();
        let mut burst = Vec::new();
        for (q, queue) in self.queues.iter_mut().enumerate() {
            while queue.rx_burst(&mut burst, 32).unwrap() > 0 {}
            for m in burst.drain(..) {
                let data = m.to_vec();
                let seq = u32::from_be_bytes([data[42], data[43], data[44], data[45]]);
                let dport = u16::from_be_bytes([data[36], data[37]]);
                assert_eq!(data, frame(seq, dport), "packet {seq} intact");
                got.push((q, seq));
            }
        }
        got
    }

    /// Sends 40 frames from `first` and checks that each of the four queues receives its 10.
    fn every_queue_receives(&mut self, first: u32, what: &str) {
        self.send(first, 40);
        let got = self.receive_all();
        for q in 0..usize::from(QUEUES) {
            assert_eq!(
                got.iter().filter(|&&(n, _)| n == q).count(),
                10,
                "{what}: queue {q} receives"
            );
        }
    }

    /// Closes both ports and tears both functions down, checking the receiver kept no page.
    fn close_clean(self, what: &str) {
        let dev = self.rx_port.close().unwrap();
        assert_eq!(dev.teardown().unwrap().pages_kept, 0, "{what}");
        self.tx_port.close().unwrap().teardown().unwrap();
    }

    /// The device breaks the ring (an SRQ catastrophic error); frames `first..first + 8` sent
    /// afterwards are not received, and the port learns of it from the event.
    fn break_ring(&mut self, first: u32, what: &str) {
        self.rx_model.inject(Fault::SharedRingError {
            rmpn: self.ring.id(),
        });
        self.send(first, 8);
        assert!(
            self.receive_all().is_empty(),
            "{what}: a broken ring receives nothing"
        );
        assert!(
            self.rx_port.shared_ring_failed(),
            "{what}: the event names the ring"
        );
    }

    fn limit_events(&mut self) -> Vec<(u32, u32)> {
        self.rx_port
            .device()
            .poll_events()
            .unwrap()
            .into_iter()
            .filter_map(|e| match e {
                Event::SharedRingLow { ring, posted } => Some((ring, posted)),
                _ => None,
            })
            .collect()
    }
}

#[test]
fn the_limit_fires_once_per_arm_never_above_it_and_can_be_rearmed() {
    let mut rig = rig(64, 16, false);
    let ring_id = rig.ring.id();
    assert_eq!(
        rig.ring.outstanding(),
        63,
        "the ring starts full (size - 1)"
    );
    assert_eq!(rig.rx_port.shared_ring_status().unwrap().limit, 16);

    // 63 → 23 posted: above the limit, no event.
    rig.send(0, 40);
    assert_eq!(rig.rx_port.device().wait_event(Duration::ZERO), 0);
    assert!(rig.limit_events().is_empty(), "no event above the limit");

    // 23 → 15: below 16, exactly one event, then the limit reads 0.
    rig.send(40, 8);
    assert!(
        rig.rx_port.device().wait_event(Duration::ZERO) > 0,
        "vector 0 fired"
    );
    assert_eq!(rig.limit_events(), vec![(ring_id, 15)]);
    let status = rig.rx_port.shared_ring_status().unwrap();
    assert_eq!((status.limit, status.posted), (0, 15));

    // Further below: nothing more until re-armed.
    rig.send(48, 5);
    assert!(rig.limit_events().is_empty(), "one-shot: no second event");
    assert_eq!(rig.receive_all().len(), 53);

    // Refill, re-arm, and it fires again exactly once.
    assert_eq!(rig.ring.refill(), 53);
    rig.rx_port.set_shared_limit(16).unwrap();
    rig.send(53, 47);
    assert!(
        rig.limit_events().is_empty(),
        "16 posted: not below the limit"
    );
    rig.send(100, 1);
    assert_eq!(rig.limit_events(), vec![(ring_id, 15)]);
    assert_eq!(rig.rx_port.device().event_counts().limits, 2);
    assert_eq!(rig.receive_all().len(), 48);
    assert!(matches!(
        rig.rx_port.set_shared_limit(64),
        Err(DriverError::Invalid(_))
    ));
    rig.rx_port.close().unwrap();
}

#[test]
fn four_queues_never_over_consume_and_an_empty_ring_drops_and_counts() {
    let mut rig = rig(64, 0, false);
    let pool_total = rig.rx_port.pool().capacity();
    let before = rig.rx_model.counters();
    // Four flows at once, three times what the ring holds, no refill.
    rig.send(0, 200);
    let got = rig.receive_all();
    assert_eq!(got.len(), 63, "exactly the posted buffers were used");
    let mut seqs: Vec<u32> = got.iter().map(|&(_, s)| s).collect();
    seqs.sort_unstable();
    assert_eq!(
        seqs,
        (0..63).collect::<Vec<_>>(),
        "the first 63 frames, once each"
    );
    for &(q, seq) in &got {
        assert_eq!(
            q,
            (seq % 4) as usize,
            "frame {seq} steered to its flow's queue"
        );
    }
    for q in &rig.queues {
        assert!(q.stats().packets >= 15, "every queue drew from the ring");
        assert_eq!(q.stats().bad_cqes, 0);
    }
    let after = rig.rx_model.counters();
    assert_eq!(after.rx_delivered - before.rx_delivered, 63);
    assert_eq!(after.rx_out_of_buffer - before.rx_out_of_buffer, 137);
    assert_eq!(
        after.payload_writes - before.payload_writes,
        63,
        "dropped frames were written nowhere"
    );
    assert_eq!(
        rig.rx_port.stats().unwrap().imissed,
        137,
        "drops show in imissed"
    );
    assert_eq!(rig.ring.outstanding(), 0);
    // The received buffers went back to the pool when dropped: nothing was lost.
    assert_eq!(rig.rx_port.pool().available(), pool_total);

    // A refill brings the ring back; frames flow again.
    assert_eq!(rig.ring.refill(), 63);
    rig.send(200, 40);
    assert_eq!(rig.receive_all().len(), 40);
    assert_eq!(rig.ring.stats().refills, 2);
    rig.rx_port.close().unwrap();
}

#[test]
fn a_ring_in_error_takes_its_queues_with_it_and_flushes_every_buffer_to_the_pool() {
    let mut rig = rig(128, 0, false);
    let pool_total = rig.rx_port.pool().capacity();
    rig.send(0, 20);
    assert_eq!(rig.receive_all().len(), 20);
    rig.ring.refill();

    // Flushing a ring the device may still write is refused.
    let refused = rig.rx_port.flush_shared_ring().unwrap_err().to_string();
    assert!(refused.contains("stop it first"), "{refused}");

    // The device refuses to destroy a ring that still has queues.
    let mut destroy = vec![0u8; 16];
    destroy[0..2].copy_from_slice(&(Opcode::DestroyRmp as u16).to_be_bytes());
    destroy[8..12].copy_from_slice(&rig.ring.id().to_be_bytes());
    match rig.rx_port.device().exec(&destroy, 16) {
        Err(DriverError::Command(e)) => {
            assert_eq!(e.status(), Some(CmdStatus::BadResourceState));
            assert!(e.to_string().starts_with("DESTROY_RMP failed"), "{e}");
        }
        other => panic!("DESTROY_RMP with queues must fail: {other:?}"),
    }

    rig.rx_port.stop_shared_ring().unwrap();
    assert_eq!(
        rig.rx_port.shared_ring_status().unwrap().state,
        RmpState::Err
    );
    for q in &rig.queues {
        assert_eq!(rig.rx_port.rx_queue_state(q.rqn()).unwrap(), RqState::Err);
    }
    // Frames arriving now are not received.
    rig.send(20, 10);
    assert!(rig.receive_all().is_empty());

    assert_eq!(rig.rx_port.flush_shared_ring().unwrap(), 127);
    assert_eq!(rig.ring.stats().flushed, 127);
    assert_eq!(rig.ring.outstanding(), 0);
    assert_eq!(
        rig.rx_port.pool().available(),
        pool_total,
        "every buffer back"
    );
    assert_eq!(rig.ring.refill(), 0, "a flushed ring posts nothing more");

    // Created again, the ring takes buffers and every queue receives.
    let restart = rig
        .rx_port
        .restart_shared_ring(&rig.ring, &mut rig.queues)
        .unwrap();
    assert_eq!(restart.device_state, RmpState::Err, "{restart:?}");
    assert_eq!(restart.flushed, 0, "flushed before the restart");
    assert_eq!(rig.ring.outstanding(), 127);
    assert_eq!(rig.unaccounted(), 0);
    rig.send(30, 40);
    let got = rig.receive_all();
    assert_eq!(got.len(), 40, "received again after the restart");
    rig.close_clean("after the restart");
}

#[test]
fn a_blocked_receiver_wakes_on_the_completion_interrupt() {
    let mut rig = rig(256, 0, true);
    let mut queue = rig.queues.remove(1);
    let receiver = std::thread::spawn(move || {
        let mut got = Vec::new();
        queue.arm_interrupt().unwrap();
        // Nothing yet: the ring is idle, so sleep on the vector.
        assert_eq!(queue.rx_burst(&mut got, 32).unwrap(), 0);
        let woke = queue.wait_interrupt(Duration::from_secs(20)).unwrap();
        queue.rx_burst(&mut got, 32).unwrap();
        (woke, got.len(), queue.interrupts())
    });
    std::thread::sleep(Duration::from_millis(50));
    // Frame 1 goes to queue 1.
    rig.send(1, 1);
    let (woke, received, interrupts) = receiver.join().unwrap();
    assert!(woke, "the completion interrupt woke the receiver");
    assert_eq!((received, interrupts), (1, 1));

    // Without receive interrupts the calls say what to turn on.
    let mut plain = self::rig(64, 0, false);
    let err = plain.queues[0].arm_interrupt().unwrap_err().to_string();
    assert!(err.contains("PortConfig::rx_interrupts"), "{err}");
    assert!(plain.queues[0].interrupt_fd().is_none());
}

#[test]
fn a_plain_receive_queue_sleeps_on_its_interrupt_too() {
    let (a, b) = Model::pair(EmuConfig::default(), EmuConfig::default());
    let opts = Options {
        msix_vectors: 3,
        ..Options::default()
    };
    let da = Device::bring_up(EmuBackend::new(a, "a"), opts.clone()).unwrap();
    let db = Device::bring_up(EmuBackend::new(b, "b"), opts).unwrap();
    let config = PortConfig {
        ring_size: 64,
        pool_buffers: 1024,
        rx_queues: 2,
        rx_interrupts: true,
        udp_port_queues: Some(BASE_PORT),
        ..PortConfig::default()
    };
    let Started {
        port: pa,
        queues: Queues { tx: mut txa, rx: _ },
    } = Port::start(da, config.clone()).unwrap();
    let Started {
        port: _pb,
        queues: Queues { tx: _, rx: mut rxb },
    } = Port::start(db, config.clone()).unwrap();
    let mut queue = rxb.remove(1);
    let receiver = std::thread::spawn(move || {
        let mut got = Vec::new();
        queue.arm_interrupt().unwrap();
        assert_eq!(queue.rx_burst(&mut got, 32).unwrap(), 0);
        let woke = queue.wait_interrupt(Duration::from_secs(20)).unwrap();
        queue.rx_burst(&mut got, 32).unwrap();
        (woke, got.len())
    });
    std::thread::sleep(Duration::from_millis(50));
    let mut m = pa.pool().alloc().unwrap();
    m.set_data(&frame(7, BASE_PORT + 1)).unwrap();
    let mut batch = vec![m];
    while !batch.is_empty() {
        txa[0].tx_burst(&mut batch);
    }
    assert_eq!(receiver.join().unwrap(), (true, 1));

    // More queues than vectors is refused before anything is created.
    let (_, c) = Model::pair(EmuConfig::default(), EmuConfig::default());
    let dc = Device::bring_up(EmuBackend::new(c, "c"), Options::default()).unwrap();
    let err = Port::start(dc, config).err().expect("refused").to_string();
    assert!(err.contains("Options::msix_vectors"), "{err}");
}

/// The device breaks the ring on its own (an SRQ catastrophic error): the port learns it from
/// the event, and `Port::restart_shared_ring` creates the ring and its queues again over the
/// same memory; every buffer is accounted for and all four queues receive again.
#[test]
fn a_ring_the_device_broke_is_created_again_and_every_queue_receives() {
    let mut rig = rig(128, 0, false);
    rig.send(0, 20);
    assert_eq!(rig.receive_all().len(), 20);
    rig.ring.refill();
    assert!(!rig.rx_port.shared_ring_failed());
    let old_rqs: Vec<u32> = rig.queues.iter().map(|q| q.rqn()).collect();
    rig.break_ring(20, "broken");
    assert!(rig.rx_port.shared_ring_failed(), "and it stays set");
    assert_eq!(
        rig.rx_port.shared_ring_status().unwrap().state,
        RmpState::Err
    );
    for &rqn in &old_rqs {
        assert_eq!(rig.rx_port.rx_queue_state(rqn).unwrap(), RqState::Err);
    }
    let posted = rig.ring.outstanding();
    assert_eq!(posted, 127);

    // Every queue of the ring is needed: a subset is refused and nothing changes.
    let refused = rig
        .rx_port
        .restart_shared_ring(&rig.ring, &mut rig.queues[..3])
        .unwrap_err()
        .to_string();
    assert!(refused.contains("all 4 of its queues"), "{refused}");
    assert_eq!(rig.ring.outstanding(), posted);

    let restart = rig
        .rx_port
        .restart_shared_ring(&rig.ring, &mut rig.queues)
        .unwrap();
    assert_eq!(restart.device_state, RmpState::Err, "{restart:?}");
    assert_eq!(restart.flushed, posted as usize, "every posted buffer back");
    assert!(!rig.rx_port.shared_ring_failed());
    let status = rig.rx_port.shared_ring_status().unwrap();
    assert_eq!(status.state, RmpState::Rdy);
    assert_eq!(status.posted, 127, "posted again");
    assert_eq!(rig.ring.outstanding(), 127);
    assert_eq!(rig.ring.stats().flushed, u64::from(posted));
    for q in &rig.queues {
        assert_eq!(rig.rx_port.rx_queue_state(q.rqn()).unwrap(), RqState::Rdy);
        assert!(!q.in_error());
        assert_eq!(q.stats().recoveries, 1);
        assert_eq!(q.ring_id(), rig.ring.id());
    }
    assert_eq!(rig.unaccounted(), 0, "no buffer lost or held twice");
    rig.every_queue_receives(28, "after the restart");
    rig.close_clean("after the restart");
}

/// A restart the device refuses partway (out of resources, at one command) stays stopped at
/// that step with every buffer either posted or in the pool, the ring's queues refuse a
/// single-queue recovery meanwhile, and calling the restart again resumes there: the same
/// objects exist afterwards as before, every queue receives, and the port tears down clean.
/// Each step in turn: two of the four RQs destroyed, the RMP destroyed, the RMP created, two
/// of the four RQs created, and the steering (its first TIR).
#[test]
fn a_restart_refused_partway_resumes_where_it_stopped() {
    for (refused, after) in [
        (Opcode::DestroyRq, 2),
        (Opcode::DestroyRmp, 0),
        (Opcode::CreateRmp, 0),
        (Opcode::CreateRq, 2),
        (Opcode::CreateTir, 0),
    ] {
        let step = format!("{refused:?} after {after}");
        let mut rig = rig(128, 0, false);
        rig.send(0, 8);
        assert_eq!(rig.receive_all().len(), 8);
        rig.ring.refill();
        let objects = rig.rx_model.object_counts();
        let old_rqs: Vec<u32> = rig.queues.iter().map(|q| q.rqn()).collect();
        rig.break_ring(8, &step);
        let posted = rig.ring.outstanding();
        assert_eq!(posted, 127, "{step}");

        rig.rx_model.inject(Fault::RefuseCommandAfter {
            opcode: refused as u16,
            after,
        });
        let err = rig
            .rx_port
            .restart_shared_ring(&rig.ring, &mut rig.queues)
            .unwrap_err();
        assert!(
            matches!(&err, DriverError::Command(c) if c.opcode == refused as u16),
            "{step}: {err}"
        );
        assert_eq!(rig.unaccounted(), 0, "{step}: nothing lost meanwhile");
        if refused == Opcode::DestroyRq {
            // The first two RQs are gone, the other two still there (in error).
            for (i, &rqn) in old_rqs.iter().enumerate() {
                let state = rig.rx_port.rx_queue_state(rqn);
                assert_eq!(state.is_ok(), i >= 2, "{step}: RQ {i}: {state:?}");
            }
        }
        let refused_recovery = rig
            .rx_port
            .recover_shared_rx(&mut rig.queues[3])
            .unwrap_err()
            .to_string();
        assert!(
            refused_recovery.contains("restart_shared_ring again"),
            "{step}: {refused_recovery}"
        );

        let restart = rig
            .rx_port
            .restart_shared_ring(&rig.ring, &mut rig.queues)
            .unwrap();
        assert_eq!(restart.device_state, RmpState::Err, "{step}: {restart:?}");
        assert_eq!(
            restart.flushed, posted as usize,
            "{step}: every posted buffer back once, over both calls"
        );
        assert!(!rig.rx_port.shared_ring_failed(), "{step}");
        let status = rig.rx_port.shared_ring_status().unwrap();
        assert_eq!(
            (status.state, status.posted),
            (RmpState::Rdy, 127),
            "{step}"
        );
        assert_eq!(
            rig.rx_model.object_counts(),
            objects,
            "{step}: nothing left over"
        );
        for q in &rig.queues {
            assert_eq!(rig.rx_port.rx_queue_state(q.rqn()).unwrap(), RqState::Rdy);
            assert_eq!(q.stats().recoveries, 1, "{step}: restarted once");
            assert_eq!(q.ring_id(), rig.ring.id());
        }
        assert_eq!(rig.unaccounted(), 0, "{step}");
        rig.every_queue_receives(12, &step);
        rig.close_clean(&step);
    }
}

/// A restart that fails with the old ring destroyed and no new one yet leaves nothing for
/// the port's close to destroy twice: the port closes clean without finishing it.
#[test]
fn a_port_closes_clean_with_its_ring_restart_unfinished() {
    let mut rig = rig(128, 0, false);
    rig.ring.refill();
    rig.rx_port.stop_shared_ring().unwrap();
    rig.rx_model.inject(Fault::RefuseCommand {
        opcode: Opcode::CreateRmp as u16,
    });
    rig.rx_port
        .restart_shared_ring(&rig.ring, &mut rig.queues)
        .unwrap_err();
    assert_eq!(rig.ring.outstanding(), 0, "flushed with the old ring");
    let Rig {
        tx_port,
        rx_port,
        rx_model,
        ..
    } = rig;
    let dev = rx_port.close().unwrap();
    assert_eq!(rx_model.object_counts()[3..5], [0, 0], "no RQ or RMP left");
    assert_eq!(dev.teardown().unwrap().pages_kept, 0);
    tx_port.close().unwrap().teardown().unwrap();
}

/// A queue of a shared ring whose RQ completes in error stops, the ring and the other queues
/// go on, and `Port::recover_shared_rx` brings that queue back without losing a buffer.
#[test]
fn a_shared_ring_queue_in_error_stops_alone_and_recovers() {
    let mut rig = rig(256, 0, false);
    rig.send(0, 40);
    assert_eq!(rig.receive_all().len(), 40);
    rig.ring.refill();
    let victim = rig.queues[1].rqn();
    rig.rx_model.inject(Fault::ReceiveError {
        rqn: victim,
        syndrome: CqeSyndrome::LocalLength,
    });
    // Frames 40.. go round the four queues; queue 1's first one completes in error.
    rig.send(40, 40);
    let got = rig.receive_all();
    assert!(rig.queues[1].in_error(), "{:?}", rig.queues[1].stats());
    assert_eq!(rig.queues[1].stats().errors, 1);
    for (q, queue) in rig.queues.iter().enumerate().filter(|&(q, _)| q != 1) {
        assert!(!queue.in_error(), "queue {q} stopped too");
    }
    assert_eq!(
        got.iter().filter(|&&(q, _)| q != 1).count(),
        30,
        "the other queues received every frame"
    );
    assert!(
        got.iter().all(|&(q, _)| q != 1),
        "nothing received after the error"
    );
    assert_eq!(rig.unaccounted(), 0, "the errored buffer went back");
    let recovery = rig.rx_port.recover_shared_rx(&mut rig.queues[1]).unwrap();
    assert_eq!(recovery.device_state, RqState::Err, "{recovery:?}");
    assert_eq!(rig.rx_port.rx_queue_state(victim).unwrap(), RqState::Rdy);
    assert!(!rig.queues[1].in_error());
    assert_eq!(rig.queues[1].stats().recoveries, 1);
    assert_eq!(rig.unaccounted(), 0, "every buffer back or posted");
    rig.ring.refill();
    rig.send(80, 40);
    let got = rig.receive_all();
    assert_eq!(got.len(), 40, "every queue receives again");
    assert_eq!(got.iter().filter(|&&(q, _)| q == 1).count(), 10);
}

#[test]
fn shared_ring_queues_receive_into_packet_bursts_and_refuse_a_burst_of_another_pool() {
    let mut rig = rig(256, 0, false);
    rig.send(0, 40);
    let mut bursts: Vec<cxdirect::PacketBurst> =
        (0..QUEUES).map(|_| cxdirect::PacketBurst::new()).collect();
    let mut spins = 0;
    while bursts.iter().map(cxdirect::PacketBurst::len).sum::<usize>() < 40 {
        for (queue, burst) in rig.queues.iter_mut().zip(bursts.iter_mut()) {
            queue.rx_burst(burst, 32).unwrap();
        }
        spins += 1;
        assert!(spins < 100_000, "receive stalled");
    }
    for (q, burst) in bursts.iter().enumerate() {
        assert_eq!(burst.len(), 10, "queue {q} receives its ten frames");
        for i in 0..burst.len() {
            let data = burst.get(i).unwrap().to_vec();
            let seq = u32::from_be_bytes([data[42], data[43], data[44], data[45]]);
            assert_eq!(
                seq % u32::from(QUEUES),
                q as u32,
                "frame {seq} on queue {q}"
            );
            assert_eq!(data, frame(seq, BASE_PORT + q as u16), "frame {seq} intact");
        }
    }
    assert_eq!(rig.unaccounted(), 40, "the bursts hold the forty buffers");

    // A burst holding packets of another pool takes nothing, and nothing is lost.
    let mut foreign = cxdirect::PacketBurst::new();
    foreign
        .push(rig.tx_port.pool().alloc().expect("tx buffer"))
        .unwrap();
    rig.send(40, 4);
    let err = rig.queues[0].rx_burst(&mut foreign, 32).unwrap_err();
    assert!(matches!(err, DriverError::Invalid(_)), "{err}");
    assert_eq!(foreign.len(), 1, "the foreign burst is left alone");
    foreign.clear();

    for burst in &mut bursts {
        burst.clear();
    }
    let mut got = Vec::new();
    let mut spins = 0;
    while got.len() < 4 {
        for queue in &mut rig.queues {
            queue.rx_burst(&mut got, 32).unwrap();
        }
        spins += 1;
        assert!(
            spins < 100_000,
            "the frames sent after the refusal stay receivable"
        );
    }
    drop(got);
    assert_eq!(
        rig.unaccounted(),
        0,
        "every buffer back in the pool or on the ring"
    );
    rig.close_clean("bursts");
}
