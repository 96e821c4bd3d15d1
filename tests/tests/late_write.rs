//! Lifetimes with a device that writes late: a receive buffer the device may still write must
//! not go back to the pool before the device is done with the queue. The model holds one
//! receive's payload write in flight (`Fault::LateReceive`) and lands it later; the buffer it
//! lands in must be one nobody else holds.

use cxdirect::{Device, Mbuf, Options, Port, PortConfig, Started};
use cxdirect_apps::emulated::EmuBackend;
use cxdirect_emu::{Device as Model, EmuConfig, Fault};
use cxdirect_tests::udp_frame;
use std::time::Duration;

type Side = Started<EmuBackend>;

fn start(model: &Model, name: &str) -> Side {
    let options = Options {
        cmd_timeout: Duration::from_secs(5),
        ..Options::default()
    };
    let dev = Device::bring_up(EmuBackend::new(model.clone(), name), options).unwrap();
    let config = PortConfig {
        ring_size: 64,
        pool_buffers: 256,
        ..PortConfig::default()
    };
    Port::start(dev, config).unwrap()
}

fn send_one(a: &mut Side, seq: u32) {
    let mut m = a.port.pool().alloc().unwrap();
    m.set_data(&udp_frame(seq, 9000)).unwrap();
    let mut batch = vec![m];
    a.queues.tx[0].tx_burst(&mut batch);
    assert!(batch.is_empty());
}

/// The pair with one frame sent from a to b whose payload write the model holds in flight.
struct LateWrite {
    a: Side,
    b: Side,
    model_b: Model,
    /// The model's payload-write count before the frame.
    writes: u64,
}

fn late_write_in_flight() -> LateWrite {
    let (model_a, model_b) = Model::pair(EmuConfig::default(), EmuConfig::default());
    let mut a = start(&model_a, "a");
    let b = start(&model_b, "b");
    model_b.inject(Fault::LateReceive {
        rqn: b.queues.rx[0].rqn(),
    });
    let writes = model_b.counters().payload_writes;
    send_one(&mut a, 7);
    LateWrite {
        a,
        b,
        model_b,
        writes,
    }
}

/// Takes every free buffer of `b`'s pool and fills it with a pattern.
fn take_every_free_buffer(b: &Side) -> Vec<Mbuf> {
    let pool = b.port.pool();
    let fill = vec![0xa5u8; pool.data_room() as usize];
    let mut held = Vec::new();
    while let Some(mut m) = pool.alloc() {
        m.set_data(&fill).unwrap();
        held.push(m);
    }
    held
}

fn untouched(held: &[Mbuf]) -> bool {
    held.iter().all(|m| m.to_vec().iter().all(|&b| b == 0xa5))
}

#[test]
fn a_late_write_lands_in_a_quarantined_buffer_after_its_queue_handle_is_dropped() {
    let LateWrite {
        a,
        mut b,
        model_b: mb,
        writes,
    } = late_write_in_flight();
    assert_eq!(mb.faults_taken(), 1, "the device took the WQE");
    assert_eq!(
        mb.counters().payload_writes,
        writes,
        "and has not written yet"
    );

    // The application drops its receive queue while the write is in flight: the ring's
    // buffers stay out of the pool until the port has destroyed the RQ.
    b.queues.rx.clear();
    assert_eq!(b.port.pool().available(), 256 - 64);
    let held = take_every_free_buffer(&b);
    assert_eq!(held.len(), 192);

    assert_eq!(mb.land_late_writes(), 1);
    assert_eq!(mb.counters().payload_writes, writes + 1, "the write landed");
    assert!(untouched(&held), "in a buffer nobody holds");
    drop(held);

    let pool = b.port.pool().clone();
    let Started { port, queues } = b;
    drop(queues);
    port.close().unwrap().teardown().unwrap();
    assert_eq!(
        pool.available(),
        pool.capacity(),
        "the quarantine came back whole"
    );
    let Started { port, queues } = a;
    drop(queues);
    port.close().unwrap().teardown().unwrap();
}

#[test]
fn recovery_takes_back_buffers_only_after_a_late_write_landed() {
    let LateWrite {
        mut a,
        mut b,
        model_b: mb,
        writes,
    } = late_write_in_flight();
    let mut got = Vec::new();
    assert_eq!(
        b.queues.rx[0].rx_burst(&mut got, 32).unwrap(),
        0,
        "nothing completed yet"
    );

    // Reset the queue while the write is in flight: the device finishes it before the RQ
    // leaves RDY, so its completion is among those recovery drains, and every buffer the
    // pool gets back is one the device is done with.
    let r = b.port.recover_rx(&mut b.queues.rx[0]).unwrap();
    assert_eq!(mb.counters().payload_writes, writes + 1);
    assert_eq!(r.drained_cqes, 1, "{r:?}");
    assert_eq!(r.flushed, 64, "{r:?}");
    let held = take_every_free_buffer(&b);
    assert_eq!(mb.land_late_writes(), 0, "nothing left in flight");
    assert!(untouched(&held));
    drop(held);

    // The queue works again.
    send_one(&mut a, 8);
    assert_eq!(b.queues.rx[0].rx_burst(&mut got, 32).unwrap(), 1);
    assert_eq!(got[0].to_vec(), udp_frame(8, 9000));
    drop(got);
    for Started { port, queues } in [b, a] {
        drop(queues);
        port.close().unwrap().teardown().unwrap();
    }
}
