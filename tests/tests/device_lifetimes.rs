//! Memory the device may still write, outside the packet path: a command answered after its
//! timeout, firmware pages given by a command whose answer cannot be believed, a device or
//! port dropped without a teardown, and queue handles dropped while their queues run. In each
//! case the memory must stay the device's until the device is done with it (or a function reset
//! ends everything), and nothing may be lost for good.

use cxdirect::{CmdFailure, Device, DriverError, Options, Port, PortConfig, Started};
use cxdirect_apps::emulated::EmuBackend;
use cxdirect_dma::DmaRegion;
use cxdirect_emu::{Device as Model, EmuConfig, Fault};
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::eqe::EventType;
use cxdirect_tests::udp_frame;
use std::time::{Duration, Instant};

fn bring_up(model: &Model, cmd_timeout: Duration) -> Device<EmuBackend> {
    let options = Options {
        init_timeout: Duration::from_secs(2),
        cmd_timeout,
        ..Options::default()
    };
    Device::bring_up(EmuBackend::new(model.clone(), "lifetimes"), options).expect("bring-up")
}

/// QUERY_HCA_CAP (current values) of capability `kind`: 4 KiB of output, so the answer comes
/// back through output mailboxes.
fn query_caps(
    dev: &mut Device<EmuBackend>,
    kind: u16,
    timeout: Duration,
) -> Result<Vec<u8>, DriverError> {
    let mut input = vec![0u8; 16];
    input[0..2].copy_from_slice(&(Opcode::QueryHcaCap as u16).to_be_bytes());
    input[6..8].copy_from_slice(&((kind << 1) | 1).to_be_bytes());
    dev.exec_with_timeout(&input, 16 + 0x1000, timeout)
}

/// QUERY_PAGES: a command carried inline both ways.
fn query_pages(dev: &mut Device<EmuBackend>, timeout: Duration) -> Result<Vec<u8>, DriverError> {
    let mut input = vec![0u8; 16];
    input[0..2].copy_from_slice(&(Opcode::QueryPages as u16).to_be_bytes());
    input[6..8].copy_from_slice(&3u16.to_be_bytes());
    dev.exec_with_timeout(&input, 16, timeout)
}

fn timed_out(result: Result<Vec<u8>, DriverError>) -> bool {
    matches!(result, Err(DriverError::Command(c)) if matches!(c.failure, CmdFailure::Timeout(_)))
}

/// The model holds nothing and no DMA region of this function is mapped.
fn assert_device_let_go(model: &Model) {
    assert_eq!(model.firmware_pages_held(), 0, "firmware pages still held");
    assert_eq!(model.object_counts(), [0; 6], "objects left on the device");
    assert_eq!(model.iommu().mapping_count(), 0, "DMA regions left mapped");
}

const GENERAL: u16 = 0;
const ETHERNET: u16 = 1;
const SHORT: Duration = Duration::from_millis(100);
const LONG: Duration = Duration::from_secs(5);

#[test]
fn a_command_answered_after_its_timeout_lands_where_nothing_else_is_kept() {
    let model = Model::loopback(EmuConfig::default());
    let mut dev = bring_up(&model, LONG);
    let general = query_caps(&mut dev, GENERAL, LONG).unwrap();
    let ethernet = query_caps(&mut dev, ETHERNET, LONG).unwrap();
    assert_ne!(general, ethernet);

    // The device runs this one but answers only when the next doorbell rings.
    model.inject(Fault::LateCommand);
    assert!(timed_out(query_caps(&mut dev, GENERAL, SHORT)));
    assert_eq!(dev.commands_unanswered(), 1);

    // The late answer (general caps, into the first command's slot and mailboxes) lands as
    // this command is posted: this command's own slot and output must be untouched by it.
    assert_eq!(query_caps(&mut dev, ETHERNET, LONG).unwrap(), ethernet);
    // The next command sees the slot handed back and takes it again.
    assert_eq!(query_caps(&mut dev, ETHERNET, LONG).unwrap(), ethernet);
    assert_eq!(dev.commands_unanswered(), 0);
    assert_eq!(dev.commands_answered_late(), 1);

    let report = dev.teardown().unwrap();
    assert_eq!(report.pages_kept, 0);
    assert_device_let_go(&model);
}

#[test]
fn commands_never_answered_hold_every_slot_until_a_reset_and_then_commands_run_again() {
    let model = Model::loopback(EmuConfig::default());
    let mut dev = bring_up(&model, LONG);
    let slots = 32;
    let started = Instant::now();
    for n in 1..=slots {
        model.inject(Fault::SwallowCommand);
        assert!(
            timed_out(query_pages(&mut dev, Duration::from_millis(5))),
            "command {n}"
        );
        assert_eq!(dev.commands_unanswered(), n);
    }
    assert!(started.elapsed() < Duration::from_secs(60));
    // Nothing is posted over a slot the device still holds.
    let commands_before = model.counters().commands;
    let err = query_pages(&mut dev, LONG).unwrap_err();
    assert!(
        matches!(&err, DriverError::Command(c) if c.failure == CmdFailure::NoFreeSlot(slots)),
        "{err}"
    );
    let text = err.to_string();
    assert!(text.contains("Device::recover"), "{text}");
    assert_eq!(model.counters().commands, commands_before, "nothing posted");

    dev.recover().expect("a function reset ends every command");
    assert_eq!(dev.commands_unanswered(), 0);
    query_pages(&mut dev, LONG).expect("a command after the reset");
    let report = dev.teardown().unwrap();
    assert_eq!(report.pages_kept, 0);
    assert_device_let_go(&model);
}

/// Posts a page request for `pages` and serves it with `fault` armed for the MANAGE_PAGES give.
fn give_with(model: &Model, dev: &mut Device<EmuBackend>, pages: i32, fault: Fault) -> DriverError {
    let mut data = [0u8; 28];
    data[4..8].copy_from_slice(&pages.to_be_bytes());
    model.inject(fault);
    model.inject(Fault::RawEvent {
        event_type: EventType::PageRequest as u8,
        sub_type: 0,
        data,
    });
    dev.poll_events()
        .expect_err("the give's answer is damaged or missing")
}

#[test]
fn pages_given_by_a_command_whose_answer_cannot_be_believed_stay_the_devices() {
    let model = Model::loopback(EmuConfig::default());
    let mut dev = bring_up(&model, Duration::from_millis(300));
    let held = dev.pages_held();
    assert_eq!(model.firmware_pages_held(), held);

    // The device takes the pages but its answer says it failed.
    let err = give_with(
        &model,
        &mut dev,
        40,
        Fault::CorruptCommandOutput {
            patch: vec![(0, 0x05)],
        },
    );
    assert!(
        matches!(&err, DriverError::Command(c) if c.opcode == Opcode::ManagePages as u16),
        "{err}"
    );
    assert_eq!(
        model.firmware_pages_held(),
        held + 40,
        "the device took them"
    );
    assert_eq!(
        dev.pages_held(),
        held + 40,
        "so the driver keeps them given"
    );
    assert_eq!(dev.info().pages_in_doubt, 40);

    // The device takes them and answers after the driver gave up.
    let err = give_with(&model, &mut dev, 24, Fault::LateCommand);
    assert!(
        matches!(&err, DriverError::Command(c) if matches!(c.failure, CmdFailure::Timeout(_))),
        "{err}"
    );
    assert_eq!(model.firmware_pages_held(), held + 64);
    assert_eq!(dev.pages_held(), held + 64);
    assert_eq!(dev.info().pages_in_doubt, 64);

    // Every page comes back through MANAGE_PAGES (take): none was freed while the device held it.
    let report = dev.teardown().expect("teardown");
    assert_eq!(report.pages_reclaimed, held + 64, "{report:?}");
    assert_eq!(report.pages_released_by_reset, 0, "{report:?}");
    assert_eq!(report.pages_kept, 0, "{report:?}");
    assert_eq!(model.firmware_pages_leaked(), 0);
    assert_device_let_go(&model);
}

#[test]
fn pages_offered_by_a_command_never_answered_are_freed_only_by_the_teardown_reset() {
    let model = Model::loopback(EmuConfig::default());
    let mut dev = bring_up(&model, LONG);
    let held = dev.pages_held();
    // The give never reaches the device (it is swallowed, as by a firmware hang) and the
    // driver cannot tell: the pages stay counted until the teardown finds them missing.
    let err = give_with(&model, &mut dev, 16, Fault::SwallowCommand);
    assert!(
        matches!(&err, DriverError::Command(c) if matches!(c.failure, CmdFailure::Timeout(_))),
        "{err}"
    );
    assert_eq!(model.firmware_pages_held(), held);
    assert_eq!(dev.pages_held(), held + 16);
    let report = dev.teardown().expect("teardown");
    assert_eq!(report.pages_reclaimed, held, "{report:?}");
    assert_eq!(report.pages_released_by_reset, 16, "{report:?}");
    assert_eq!(report.commands_unanswered, 1, "{report:?}");
    assert_eq!(report.pages_kept, 0, "{report:?}");
    assert_device_let_go(&model);
}

fn port_config() -> PortConfig {
    PortConfig {
        ring_size: 64,
        pool_buffers: 256,
        ..PortConfig::default()
    }
}

#[test]
fn a_device_dropped_without_teardown_resets_the_function_before_freeing_its_memory() {
    let model = Model::loopback(EmuConfig::default());
    let mut dev = bring_up(&model, LONG);
    model.inject(Fault::SwallowCommand);
    assert!(timed_out(query_pages(&mut dev, SHORT)));
    assert!(model.firmware_pages_held() > 0);
    let leaked = DmaRegion::leaked_bytes();
    drop(dev);
    assert_device_let_go(&model);
    assert_eq!(
        DmaRegion::leaked_bytes(),
        leaked,
        "the reset made leaking needless"
    );
    // The function comes up again afterwards.
    let again = bring_up(&model, LONG);
    again.teardown().unwrap();
    assert_device_let_go(&model);
}

#[test]
fn a_port_and_its_queues_dropped_without_close_leave_nothing_behind() {
    let model = Model::loopback(EmuConfig::default());
    let dev = bring_up(&model, LONG);
    let Started { port, queues } = Port::start(dev, port_config()).unwrap();
    assert!(model.object_counts().iter().sum::<usize>() > 0);
    drop(port);
    assert_eq!(model.firmware_pages_held(), 0);
    assert_eq!(model.object_counts(), [0; 6]);
    drop(queues);
    assert_eq!(model.iommu().mapping_count(), 0);
}

#[test]
fn a_receive_queue_handle_dropped_while_its_queue_runs_keeps_its_rings_until_close() {
    let (model_a, model_b) = Model::pair(EmuConfig::default(), EmuConfig::default());
    let Started {
        port: port_a,
        queues: mut queues_a,
    } = Port::start(bring_up(&model_a, LONG), port_config()).unwrap();
    let Started {
        port: port_b,
        queues: mut queues_b,
    } = Port::start(bring_up(&model_b, LONG), port_config()).unwrap();
    let mapped = model_b.iommu().mapping_count();
    // The receive queue stays in the device: frames for it are still received into its
    // buffers and completed into its CQ.
    drop(queues_b.rx.pop().expect("one receive queue"));
    assert_eq!(model_b.iommu().mapping_count(), mapped, "rings kept mapped");
    let before = model_b.counters();
    for seq in 0..8 {
        let mut m = port_a.pool().alloc().unwrap();
        m.set_data(&udp_frame(seq, 9000)).unwrap();
        let mut batch = vec![m];
        queues_a.tx[0].tx_burst(&mut batch);
        assert!(batch.is_empty());
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while model_b.counters().cqes < before.cqes + 8 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    let after = model_b.counters();
    assert_eq!(after.rx_frames - before.rx_frames, 8);
    assert_eq!(after.cqes - before.cqes, 8, "completions written");
    assert_eq!(
        after.dma_faults, before.dma_faults,
        "into memory still mapped"
    );
    drop(queues_b);
    let dev_b = port_b.close().unwrap();
    dev_b.teardown().unwrap();
    assert_device_let_go(&model_b);
    drop(queues_a);
    port_a.close().unwrap().teardown().unwrap();
    assert_device_let_go(&model_a);
}
