//! A CQ the device put in error (it overran, or the device could not write it): the queue stops
//! without an error completion, the driver learns of it from the CQ error event
//! (`Port::failed_cqs`), and recovery destroys the queue and its CQ and creates both again —
//! for a receive queue with the port's steering rebuilt around the new RQ.

use cxdirect::{Device, DriverError, Mbuf, Options, Port, PortConfig, Recovery, Started};
use cxdirect_apps::emulated::EmuBackend;
use cxdirect_emu::{Device as Model, EmuConfig, Fault};
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::eqe::EventType;
use cxdirect_tests::udp_frame;
use std::time::Duration;

type Side = Started<EmuBackend>;

fn start(model: &Model, name: &str, config: PortConfig) -> Side {
    let options = Options {
        cmd_timeout: Duration::from_secs(5),
        ..Options::default()
    };
    let dev = Device::bring_up(EmuBackend::new(model.clone(), name), options).unwrap();
    Port::start(dev, config).unwrap()
}

/// Port a sends (one queue); port b receives on four queues, UDP port 9000 + i to queue i.
fn pair() -> (Side, Side, Model, Model) {
    let (ma, mb) = Model::pair(EmuConfig::default(), EmuConfig::default());
    let base = PortConfig {
        ring_size: 64,
        pool_buffers: 1024,
        ..PortConfig::default()
    };
    let a = start(&ma, "a", base.clone());
    let b = start(
        &mb,
        "b",
        PortConfig {
            rx_queues: 4,
            udp_port_queues: Some(9000),
            ..base
        },
    );
    (a, b, ma, mb)
}

/// Sends `count` frames to UDP port `dport` (sequence numbers from `first`).
fn send(a: &mut Side, first: u32, count: u32, dport: u16) {
    let mut batch: Vec<Mbuf> = (first..first + count)
        .map(|seq| {
            let mut m = a.port.pool().alloc().unwrap();
            m.set_data(&udp_frame(seq, dport)).unwrap();
            m
        })
        .collect();
    cxdirect_tests::send_all(&mut a.queues.tx[0], &mut batch);
}

fn receive_all(b: &mut Side, queue: usize) -> Vec<Mbuf> {
    let mut got = Vec::new();
    while b.queues.rx[queue].rx_burst(&mut got, 64).unwrap() > 0 {}
    got
}

/// Sends `count` frames (sequence numbers from `first`) to each of b's four queues, checks
/// that each queue receives its own intact, then closes both ports and checks that every
/// buffer of b's pool came back.
fn every_queue_receives_then_close(mut a: Side, mut b: Side, first: u32, count: u32) {
    for queue in 0..4u16 {
        send(&mut a, first, count, 9000 + queue);
        let got = receive_all(&mut b, usize::from(queue));
        assert_eq!(got.len(), count as usize, "queue {queue}");
        for (i, m) in got.iter().enumerate() {
            assert_eq!(m.to_vec(), udp_frame(first + i as u32, 9000 + queue));
        }
    }
    let pool = b.port.pool().clone();
    close(b);
    close(a);
    assert_eq!(
        pool.available(),
        pool.capacity(),
        "no buffer lost or doubled"
    );
}

fn close(side: Side) {
    let Started { port, queues } = side;
    drop(queues);
    port.close().unwrap().teardown().unwrap();
}

#[test]
fn a_receive_queue_whose_cq_overran_is_rebuilt_and_steering_reaches_it_again() {
    let (mut a, mut b, _ma, mb) = pair();
    let old_cq = b.queues.rx[2].cqn();
    let objects = mb.object_counts();
    mb.inject(Fault::CqOverrun { cqn: old_cq });
    send(&mut a, 0, 8, 9002);
    let seen = mb.counters();
    // The first completion overruns; with CQE compression it is the whole session of frames
    // the device took before it stopped the RQ.
    assert_eq!(seen.cq_overruns, 1, "{seen:?}");
    assert!(seen.completions_lost >= 1, "{seen:?}");
    assert_eq!(seen.completions_lost, seen.rx_delivered, "{seen:?}");
    assert!(receive_all(&mut b, 2).is_empty(), "no completion came");
    assert!(!b.queues.rx[2].in_error(), "no error CQE tells the queue");
    assert_eq!(b.port.failed_cqs(), vec![old_cq], "the CQ error event does");
    assert_eq!(b.port.device().event_counts().cq_errors, 1);

    let r = b.port.recover_rx(&mut b.queues.rx[2]).unwrap();
    assert!(r.cq_recreated, "{r:?}");
    assert_eq!(
        r.flushed, 64,
        "every posted buffer, the lost frame's included"
    );
    // (The device may hand the freed numbers out again: what matters is that the new CQ and
    // RQ work, and that nothing the port created is left over.)
    assert_eq!(b.queues.rx[2].posted(), 64, "refilled");
    assert_eq!(
        mb.object_counts(),
        objects,
        "one CQ and one RQ for one of each"
    );
    assert!(
        b.port.failed_cqs().is_empty(),
        "recovered CQs are forgotten"
    );

    // Steering was rebuilt around the new RQ: every queue gets its flow again.
    every_queue_receives_then_close(a, b, 100, 10);
}

#[test]
fn a_send_queue_whose_cq_overran_is_rebuilt_and_its_buffers_flushed_once() {
    let (mut a, mut b, ma, _mb) = pair();
    let old_cq = a.queues.tx[0].cqn();

    ma.inject(Fault::CqOverrun { cqn: old_cq });
    // The 32nd WQE asks for the first completion: it finds the CQ full and the SQ stops.
    send(&mut a, 0, 48, 9000);
    assert_eq!(
        ma.counters().tx_frames,
        32,
        "the SQ stopped at the lost completion"
    );
    assert_eq!(receive_all(&mut b, 0).len(), 32);
    assert_eq!(a.port.failed_cqs(), vec![old_cq]);
    assert_eq!(a.queues.tx[0].in_flight(), 48);

    let r = a.port.recover_tx(&mut a.queues.tx[0]).unwrap();
    assert!(r.cq_recreated, "{r:?}");
    assert_eq!(r.flushed, 48);
    let stats = a.queues.tx[0].stats();
    assert_eq!((stats.flushed, stats.errors), (48, 48), "{stats:?}");
    // Every buffer is free again but those port a's own receive ring holds.
    let posted = a.queues.rx[0].posted() as u32;
    assert_eq!(a.port.pool().available() + posted, a.port.pool().capacity());

    send(&mut a, 100, 40, 9000);
    assert_eq!(receive_all(&mut b, 0).len(), 40, "sending works again");
    close(b);
    close(a);
}

#[test]
fn a_cq_error_naming_a_cq_the_port_does_not_have_is_ignored() {
    let (mut a, mut b, ma, _mb) = pair();
    let mut data = [0u8; 28];
    data[..4].copy_from_slice(&0x00ff_fff0u32.to_be_bytes());
    data[11] = 1;
    ma.inject(Fault::RawEvent {
        event_type: EventType::CqError as u8,
        sub_type: 0,
        data,
    });
    assert!(a.port.failed_cqs().is_empty());
    assert_eq!(
        a.port.device().event_counts().cq_errors,
        1,
        "counted all the same"
    );
    send(&mut a, 0, 10, 9000);
    assert_eq!(receive_all(&mut b, 0).len(), 10);
    close(b);
    close(a);
}

/// Taking the steering down before a queue is rebuilt can fail on any of its commands (here
/// the device refuses one rule, one TIR or the RQ table): the objects it could not destroy are
/// kept and destroyed by the next attempt, so nothing is left on the device and the rebuild
/// completes.
#[test]
fn steering_the_device_refused_to_destroy_is_destroyed_by_the_next_attempt() {
    let (mut a, mut b, _ma, mb) = pair();
    let objects = mb.object_counts();
    for refused in [
        Opcode::DeleteFlowTableEntry,
        Opcode::DestroyTir,
        Opcode::DestroyRqt,
    ] {
        let old_cq = b.queues.rx[1].cqn();
        mb.inject(Fault::CqOverrun { cqn: old_cq });
        send(&mut a, 0, 4, 9001);
        assert_eq!(b.port.failed_cqs(), vec![old_cq], "{refused:?}");
        fails_on(&mb, refused, || b.port.recover_rx(&mut b.queues.rx[1]));
        assert!(
            b.queues.rx[1].in_error(),
            "{refused:?}: stopped until rebuilt"
        );
        let r = b.port.recover_rx(&mut b.queues.rx[1]).unwrap();
        assert!(r.cq_recreated, "{refused:?}");
        assert!(!b.queues.rx[1].in_error(), "{refused:?}");
        assert_eq!(
            mb.object_counts(),
            objects,
            "{refused:?}: nothing left over on the device"
        );
        assert!(b.port.failed_cqs().is_empty(), "{refused:?}");
    }
    every_queue_receives_then_close(a, b, 200, 6);
}

/// Arms the device to refuse `refused` and checks that `attempt` fails on that command.
fn fails_on(
    model: &Model,
    refused: Opcode,
    attempt: impl FnOnce() -> Result<Recovery, DriverError>,
) {
    model.inject(Fault::RefuseCommand {
        opcode: refused as u16,
    });
    let err = attempt().unwrap_err();
    assert!(
        matches!(&err, DriverError::Command(c) if c.opcode == refused as u16),
        "{err}"
    );
}

/// Re-creating a queue can fail at any of its steps (here the device refuses, out of
/// resources, the command that step sends): the queue stays stopped, nothing is lost or left
/// over, and calling recovery again resumes at the step that failed.
#[test]
fn a_receive_queue_rebuild_that_fails_partway_resumes_where_it_stopped() {
    let (mut a, mut b, _ma, mb) = pair();
    let objects = mb.object_counts();
    let old_cq = b.queues.rx[1].cqn();
    mb.inject(Fault::CqOverrun { cqn: old_cq });
    send(&mut a, 0, 4, 9001);
    assert_eq!(b.port.failed_cqs(), vec![old_cq]);

    // Each attempt fails one step further on: the CQ, the RQ, then the steering (its TIR).
    for refused in [Opcode::CreateCq, Opcode::CreateRq, Opcode::CreateTir] {
        fails_on(&mb, refused, || b.port.recover_rx(&mut b.queues.rx[1]));
        assert!(b.queues.rx[1].in_error(), "stopped until rebuilt");
        let mut got = Vec::new();
        assert_eq!(b.queues.rx[1].rx_burst(&mut got, 64).unwrap(), 0);
        assert_eq!(
            b.queues.rx[1].stats().flushed,
            64,
            "the posted buffers are flushed once, by the first attempt"
        );
    }
    let r = b.port.recover_rx(&mut b.queues.rx[1]).unwrap();
    assert!(r.cq_recreated);
    assert_eq!(r.flushed, 0, "nothing left to flush when it resumed");
    assert!(!b.queues.rx[1].in_error());
    assert_eq!(b.queues.rx[1].posted(), 64);
    assert_eq!(
        mb.object_counts(),
        objects,
        "nothing created twice or left over"
    );
    assert!(b.port.failed_cqs().is_empty());

    every_queue_receives_then_close(a, b, 200, 6);
}

#[test]
fn a_send_queue_rebuild_that_fails_partway_resumes_where_it_stopped() {
    let (mut a, mut b, ma, _mb) = pair();
    let objects = ma.object_counts();
    let old_cq = a.queues.tx[0].cqn();
    ma.inject(Fault::CqOverrun { cqn: old_cq });
    send(&mut a, 0, 40, 9000);
    assert_eq!(receive_all(&mut b, 0).len(), 32);
    assert_eq!(a.port.failed_cqs(), vec![old_cq]);

    for refused in [Opcode::DestroyCq, Opcode::CreateCq, Opcode::CreateSq] {
        fails_on(&ma, refused, || a.port.recover_tx(&mut a.queues.tx[0]));
        assert!(a.queues.tx[0].in_error());
        let mut batch = vec![a.port.pool().alloc().unwrap()];
        assert_eq!(
            a.queues.tx[0].tx_burst(&mut batch),
            0,
            "refused while stopped"
        );
        assert_eq!(batch.len(), 1, "and handed back");
    }
    assert_eq!(a.queues.tx[0].stats().flushed, 40, "flushed once");
    a.port.recover_tx(&mut a.queues.tx[0]).unwrap();
    assert!(!a.queues.tx[0].in_error());
    assert_eq!(ma.object_counts(), objects);
    send(&mut a, 100, 40, 9000);
    assert_eq!(receive_all(&mut b, 0).len(), 40, "sending works again");
    let pool = a.port.pool().clone();
    close(b);
    close(a);
    assert_eq!(
        pool.available(),
        pool.capacity(),
        "no buffer lost or doubled"
    );
}
