//! A function that failed (fatal health syndrome, stalled health counter, registers reading
//! all-ones) is reset and brought up again by `Device::recover`, and a port on it by
//! `Port::recover`, which re-creates its queues: traffic resumes both ways, every buffer the
//! old queues held is back in the pool, and nothing the reset freed stays mapped.

use cxdirect::{Device, DriverError, HealthFailure, Options, Port, PortConfig, Started};
use cxdirect_apps::emulated::EmuBackend;
use cxdirect_emu::{Device as Model, EmuConfig};
use cxdirect_hw::init_seg::health_syndrome;
use cxdirect_hw::reg;
use cxdirect_tests::send_and_receive;
use std::time::{Duration, Instant};

type Side = Started<EmuBackend>;

fn options() -> Options {
    Options {
        init_timeout: Duration::from_secs(2),
        cmd_timeout: Duration::from_secs(2),
        health_stall: Duration::from_millis(20),
        ..Options::default()
    }
}

fn port(model: &Model, name: &str) -> Side {
    let dev = Device::bring_up(EmuBackend::new(model.clone(), name), options()).unwrap();
    let config = PortConfig {
        ring_size: 64,
        pool_buffers: 256,
        ..PortConfig::default()
    };
    Port::start(dev, config).unwrap()
}

fn pair() -> (Side, Side, Model, Model) {
    let (a, b) = Model::pair(EmuConfig::default(), EmuConfig::default());
    (port(&a, "a"), port(&b, "b"), a, b)
}

/// Waits (checking health) until the device is marked failed; returns why.
fn wait_for_failure(dev: &mut Device<EmuBackend>) -> HealthFailure {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(2) {
        match dev.check_health() {
            Err(DriverError::Failed(why)) => return why,
            Err(e) => panic!("check_health: {e}"),
            Ok(()) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
    panic!("the failure was not noticed in 2 s");
}

/// Buffers of the side's pool that are neither free, posted nor in flight.
fn unaccounted(side: &Side) -> usize {
    let pool = side.port.pool();
    let posted: usize = side.queues.rx.iter().map(|q| q.posted()).sum();
    let in_flight: usize = side.queues.tx.iter().map(|q| q.in_flight()).sum();
    pool.capacity() as usize - pool.available() as usize - posted - in_flight
}

/// Closes the port and tears the function down: no page kept, nothing left mapped or created.
/// 64 frames each way between the two ports arrive.
fn assert_traffic_both_ways(a: &mut Side, b: &mut Side) {
    assert_eq!(
        send_and_receive(&mut a.queues.tx[0], a.port.pool(), &mut b.queues.rx[0], 64),
        64,
        "a to b"
    );
    assert_eq!(
        send_and_receive(&mut b.queues.tx[0], b.port.pool(), &mut a.queues.rx[0], 64),
        64,
        "b to a"
    );
}

fn close_clean(side: Side, model: &Model) {
    let Started { port, queues } = side;
    drop(queues);
    let dev = port.close().expect("close");
    let report = dev.teardown().expect("teardown");
    assert_eq!(report.pages_kept, 0, "{report:?}");
    assert_eq!(report.pages_released_by_reset, 0, "{report:?}");
    assert_eq!(model.firmware_pages_held(), 0);
    assert_eq!(model.object_counts(), [0; 6]);
    assert_eq!(model.iommu().mapping_count(), 0, "nothing left mapped");
}

/// Fails `model` in the way `fail` does, recovers `side`'s port, and checks what came back.
fn fail_and_recover(
    side: &mut Side,
    model: &Model,
    fail: impl FnOnce(&Model),
    expected: HealthFailure,
) {
    let objects = model.object_counts();
    let pages = model.firmware_pages_held();
    let held: usize = side.queues.rx.iter().map(|q| q.posted()).sum::<usize>()
        + side.queues.tx.iter().map(|q| q.in_flight()).sum::<usize>();
    fail(model);
    assert_eq!(wait_for_failure(side.port.device()), expected);
    // A failed device refuses commands with the failure, without touching it.
    match side.port.rx_missed() {
        Err(DriverError::Failed(why)) => assert_eq!(why, expected),
        other => panic!("a command on a failed device: {other:?}"),
    }
    let recovery = side.port.recover(&mut side.queues).expect("recover");
    assert_eq!(recovery.device.failure, Some(expected), "{recovery:?}");
    assert_eq!(recovery.device.keys_lost, 1, "the pool's key: {recovery:?}");
    assert_eq!(recovery.device.pages_released, pages, "{recovery:?}");
    assert_eq!(recovery.flushed, held, "every buffer the old queues held");
    assert_eq!(
        (side.queues.tx.len(), side.queues.rx.len()),
        (1, 1),
        "new queue handles"
    );
    side.port.device().check_health().expect("healthy again");
    assert_eq!(side.port.device().info().resets, 1);
    assert_eq!(
        model.object_counts(),
        objects,
        "the port's objects exist again"
    );
    assert_eq!(
        model.firmware_pages_held(),
        pages,
        "the pages are given again"
    );
    assert_eq!(unaccounted(side), 0, "no buffer lost in the reset");
}

#[test]
fn a_receiving_port_whose_firmware_reports_a_fatal_syndrome_is_reset_and_resumes() {
    let (mut a, mut b, model_a, model_b) = pair();
    assert_eq!(
        send_and_receive(&mut a.queues.tx[0], a.port.pool(), &mut b.queues.rx[0], 16),
        16
    );
    fail_and_recover(
        &mut b,
        &model_b,
        |m| m.inject_fatal(health_syndrome::ICM_PAGE_ERR),
        HealthFailure::Syndrome(health_syndrome::ICM_PAGE_ERR),
    );
    assert_traffic_both_ways(&mut a, &mut b);
    assert_eq!(unaccounted(&a) + unaccounted(&b), 0);
    close_clean(a, &model_a);
    close_clean(b, &model_b);
}

#[test]
fn a_sending_port_whose_health_counter_stops_is_reset_and_resumes() {
    let (mut a, mut b, model_a, model_b) = pair();
    // Frames in flight on the send ring when the firmware hangs.
    assert_eq!(
        send_and_receive(&mut a.queues.tx[0], a.port.pool(), &mut b.queues.rx[0], 40),
        40
    );
    fail_and_recover(
        &mut a,
        &model_a,
        Model::stall_health_counter,
        HealthFailure::CounterStalled,
    );
    assert_eq!(
        a.queues.tx[0].stats().packets,
        0,
        "the new queue counts from zero"
    );
    assert_traffic_both_ways(&mut a, &mut b);
    close_clean(a, &model_a);
    close_clean(b, &model_b);
}

#[test]
fn a_port_whose_registers_read_all_ones_is_reset_and_resumes() {
    let (mut a, mut b, model_a, model_b) = pair();
    fail_and_recover(
        &mut a,
        &model_a,
        Model::inject_unresponsive,
        HealthFailure::NotResponding,
    );
    assert_traffic_both_ways(&mut a, &mut b);
    close_clean(a, &model_a);
    close_clean(b, &model_b);
}

/// A bare function: `Device::recover` frees what the failed device held (pages, the async EQ,
/// the command queue) and brings it up again; teardown then leaves nothing behind.
#[test]
fn a_failed_function_recovers_without_a_port_and_tears_down_clean() {
    let model = Model::loopback(EmuConfig::default());
    let mut dev = Device::bring_up(EmuBackend::new(model.clone(), "bare"), options()).unwrap();
    let mappings = model.iommu().mapping_count();
    model.inject_fatal(health_syndrome::FW_INTERNAL_ERR);
    assert_eq!(
        wait_for_failure(&mut dev),
        HealthFailure::Syndrome(health_syndrome::FW_INTERNAL_ERR)
    );
    let recovery = dev.recover().expect("recover");
    assert_eq!(recovery.keys_lost, 0);
    assert!(recovery.pages_released > 0, "{recovery:?}");
    assert_eq!(
        model.iommu().mapping_count(),
        mappings,
        "what the old function held is unmapped, the new one maps as much"
    );
    dev.access_reg(reg::REG_PMTU, false, &[0; 16])
        .expect("the function answers commands again");
    let report = dev.teardown().expect("teardown");
    assert_eq!(report.pages_kept, 0);
    assert_eq!(model.firmware_pages_held(), 0);
    assert_eq!(model.iommu().mapping_count(), 0);
}
