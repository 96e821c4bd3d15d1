//! The driver against the in-process model: bring-up, teardown, page requests, command errors,
//! firmware that never starts, and health failures.

use cxdirect::{
    Backend, CmdFailure, ConfigError, Device, DriverError, Event, HealthFailure, Options, Port,
    PortConfig, SharedRxConfig,
};
use cxdirect_apps::emulated::EmuBackend;
use cxdirect_emu::{Device as Model, EmuConfig};
use cxdirect_hw::cmd::{CmdStatus, Opcode};
use cxdirect_hw::cq::CreateCqIn;
use std::time::Duration;

fn options() -> Options {
    Options {
        init_timeout: Duration::from_secs(2),
        cmd_timeout: Duration::from_secs(2),
        ..Options::default()
    }
}

fn input(opcode: Opcode, size: usize) -> Vec<u8> {
    let mut buf = vec![0u8; size];
    buf[0..2].copy_from_slice(&(opcode as u16).to_be_bytes());
    buf
}

#[test]
fn bring_up_and_teardown_a_hundred_times_leaks_nothing() {
    let model = Model::loopback(EmuConfig::default());
    for round in 0..100 {
        let dev =
            Device::bring_up(EmuBackend::new(model.clone(), "emu"), options()).expect("bring-up");
        let info = dev.info().clone();
        assert_eq!(info.cmdif_rev, 5);
        assert_eq!((info.pages_boot, info.pages_init), (16, 64));
        assert_eq!(model.firmware_pages_held(), 80, "round {round}");
        let report = dev.teardown().expect("teardown");
        assert_eq!(report.pages_reclaimed, 80);
        assert_eq!(report.pages_kept, 0);
        assert_eq!(
            model.firmware_pages_held(),
            0,
            "round {round}: every page reclaimed"
        );
        assert_eq!(
            model.iommu().mapping_count(),
            0,
            "round {round}: no DMA region left mapped"
        );
        assert_eq!(model.object_counts(), [0; 6]);
    }
    assert_eq!(model.firmware_pages_leaked(), 0);
}

#[test]
fn commands_complete_by_interrupt_once_the_async_eq_exists() {
    let model = Model::loopback(EmuConfig::default());
    let dev = Device::bring_up(EmuBackend::new(model.clone(), "emu"), options()).unwrap();
    assert!(
        dev.info().async_interrupts > 0,
        "the async EQ's vector fired"
    );
    assert!(
        dev.event_counts().cmd > 0,
        "command completion events arrived"
    );
    assert!(model.counters().interrupts > 0);
    dev.teardown().unwrap();
}

#[test]
fn a_failing_command_returns_a_typed_error() {
    let model = Model::loopback(EmuConfig::default());
    let mut dev = Device::bring_up(EmuBackend::new(model, "emu"), options()).unwrap();
    let mut destroy = input(Opcode::DestroyCq, 16);
    destroy[8..12].copy_from_slice(&0x00ab_cdefu32.to_be_bytes());
    let err = dev.exec(&destroy, 16).unwrap_err();
    let DriverError::Command(cmd) = &err else {
        panic!("not a command error: {err}")
    };
    assert_eq!(cmd.opcode, Opcode::DestroyCq as u16);
    assert_eq!(cmd.status(), Some(CmdStatus::BadResource));
    assert!(
        err.to_string()
            .starts_with("DESTROY_CQ failed: status BAD_RES (0x5), syndrome 0x"),
        "{err}"
    );
    // The device is still usable afterwards.
    dev.exec(&input(Opcode::Nop, 16), 16).unwrap();
    dev.teardown().unwrap();
}

#[test]
fn page_requests_are_served_while_objects_exist() {
    let model = Model::loopback(EmuConfig::default());
    let mut dev = Device::bring_up(EmuBackend::new(model.clone(), "emu"), options()).unwrap();
    let (uar, _, _) = dev.resources();
    // CQs keep their contexts in firmware pages; make enough of them that the firmware asks
    // for more. Each CQ needs a buffer and a doorbell record the device can reach.
    let iommu = dev.backend().iommu();
    let iovas = std::sync::Arc::new(
        cxdirect_dma::IovaAllocator::new(&[cxdirect_dma::IovaRange {
            start: 1 << 40,
            end: (1 << 41) - 1,
        }])
        .unwrap(),
    );
    let buffer =
        cxdirect_dma::DmaRegion::new(iommu, &iovas, 4096, cxdirect_dma::PageKind::Small).unwrap();
    let eqn = 0u8;
    let mut cqns = Vec::new();
    let mut requests = 0;
    while requests == 0 && cqns.len() < 4000 {
        let mut cmd = input(Opcode::CreateCq, 0x118);
        {
            let mut c = CreateCqIn::new(&mut cmd[..]).unwrap();
            c.cq_context_mut()
                .set_log_cq_size(0)
                .set_uar_page(uar)
                .set_c_eqn(eqn)
                .set_dbr_addr(buffer.iova() + 0x800);
            c.set_pas(0, buffer.iova()).unwrap();
        }
        let out = dev.exec(&cmd, 16).expect("CREATE_CQ");
        cqns.push(u32::from_be_bytes([out[8], out[9], out[10], out[11]]) & 0xff_ffff);
        requests = dev
            .poll_events()
            .unwrap()
            .iter()
            .filter(|e| matches!(e, Event::PageRequest { .. }))
            .count();
    }
    assert!(requests > 0, "the firmware asked for pages");
    assert!(dev.info().pages_regular > 0, "and the driver gave them");
    assert_eq!(model.firmware_pages_held(), dev.pages_held());
    // Destroying the objects empties pages: the firmware offers some back and the driver takes them.
    for cqn in cqns {
        let mut d = input(Opcode::DestroyCq, 16);
        d[8..12].copy_from_slice(&cqn.to_be_bytes());
        dev.exec(&d, 16).unwrap();
        dev.poll_events().unwrap();
    }
    assert!(
        dev.info().pages_returned > 0,
        "pages offered back were taken back"
    );
    assert_eq!(model.firmware_pages_held(), dev.pages_held());
    drop(buffer);
    dev.teardown().unwrap();
    assert_eq!(model.firmware_pages_held(), 0);
}

#[test]
fn firmware_that_never_initializes_times_out() {
    let model = Model::new(EmuConfig {
        init_delay: None,
        ..EmuConfig::default()
    });
    let opts = Options {
        init_timeout: Duration::from_millis(50),
        ..options()
    };
    let err = Device::bring_up(EmuBackend::new(model, "emu"), opts)
        .err()
        .expect("must fail");
    assert!(matches!(err, DriverError::InitTimeout(_)), "{err}");
    assert!(err.to_string().contains("still initializing after 50 ms"));
}

#[test]
fn a_stalled_health_counter_marks_the_device_failed() {
    let model = Model::loopback(EmuConfig::default());
    let opts = Options {
        health_stall: Duration::from_millis(20),
        ..options()
    };
    let mut dev = Device::bring_up(EmuBackend::new(model.clone(), "emu"), opts).unwrap();
    dev.check_health().unwrap();
    model.stall_health_counter();
    dev.check_health().unwrap();
    std::thread::sleep(Duration::from_millis(40));
    let err = dev.check_health().unwrap_err();
    assert!(
        matches!(err, DriverError::Failed(HealthFailure::CounterStalled)),
        "{err}"
    );
    // Every call reports the failure from now on.
    let err = dev.exec(&input(Opcode::Nop, 16), 16).unwrap_err();
    assert!(
        matches!(err, DriverError::Failed(HealthFailure::CounterStalled)),
        "{err}"
    );
}

#[test]
fn a_fatal_syndrome_fails_the_device_and_commands_time_out_into_it() {
    let model = Model::loopback(EmuConfig::default());
    let opts = Options {
        cmd_timeout: Duration::from_millis(50),
        ..options()
    };
    let mut dev = Device::bring_up(EmuBackend::new(model.clone(), "emu"), opts).unwrap();
    model.inject_fatal(cxdirect_hw::init_seg::health_syndrome::FW_INTERNAL_ERR);
    // The firmware stops answering: the command times out, and the health check says why.
    let err = dev.exec(&input(Opcode::Nop, 16), 16).unwrap_err();
    assert!(
        matches!(err, DriverError::Failed(HealthFailure::Syndrome(1))),
        "{err}"
    );
    let err = dev.exec(&input(Opcode::Nop, 16), 16).unwrap_err();
    assert!(
        err.to_string().contains("fatal health syndrome 0x1"),
        "{err}"
    );
}

#[test]
fn a_command_that_never_completes_names_itself() {
    let model = Model::loopback(EmuConfig::default());
    let opts = Options {
        cmd_timeout: Duration::from_millis(30),
        ..options()
    };
    let mut dev = Device::bring_up(EmuBackend::new(model.clone(), "emu"), opts).unwrap();
    // Bus mastering off: the device cannot fetch the command, but stays healthy.
    dev.backend()
        .config_write(4, &0b010u16.to_le_bytes())
        .unwrap();
    let err = dev.exec(&input(Opcode::QueryIssi, 16), 0x70).unwrap_err();
    let DriverError::Command(cmd) = &err else {
        panic!("{err}")
    };
    assert_eq!(cmd.failure, CmdFailure::Timeout(Duration::from_millis(30)));
    assert_eq!(
        err.to_string(),
        "QUERY_ISSI failed: no completion after 30 ms"
    );
}

#[test]
fn opening_by_spec_reports_bad_specs_and_missing_functions_clearly() {
    let Err(missing) = Device::open("0000:7f:1f.7", Options::default()) else {
        panic!("no function 0000:7f:1f.7 exists here");
    };
    assert!(matches!(missing, DriverError::Vfio(_)), "{missing:?}");
    let text = missing.to_string();
    assert!(
        text.contains("0000:7f:1f.7") && text.contains("lspci"),
        "names the function and how to list real ones: {text}"
    );
    let Err(bad) = Device::open("0000:7f:1f.7,rings=4", Options::default()) else {
        panic!("the spec is invalid");
    };
    assert!(
        bad.to_string().contains("unknown option \"rings\""),
        "{bad}"
    );
}

#[test]
fn a_page_request_past_the_limit_is_refused_and_counted() {
    let model = Model::loopback(EmuConfig::default());
    let opts = Options {
        max_firmware_pages: 1000,
        ..options()
    };
    let mut dev = Device::bring_up(EmuBackend::new(model.clone(), "emu"), opts).expect("bring-up");
    let before = dev.pages_held();
    // Three PAGE_REQUESTs (0x0b) of 300,000 pages each (1.2 GiB apiece, each within what one
    // event may ask), and one past what any single event may ask (ignored as invalid).
    for pages in [300_000i32, 300_000, 300_000, 10_000_000] {
        let mut data = [0u8; 28];
        data[4..8].copy_from_slice(&pages.to_be_bytes());
        model.inject(cxdirect_emu::Fault::RawEvent {
            event_type: 0x0b,
            sub_type: 0,
            data,
        });
    }
    dev.poll_events().expect("events");
    assert_eq!(dev.pages_held(), 1000, "given up to the limit");
    assert_eq!(model.firmware_pages_held(), 1000);
    assert_eq!(dev.info().pages_refused, 900_000 - (1000 - before));
    let report = dev.teardown().expect("teardown");
    assert_eq!(report.pages_kept, 0);
    assert_eq!(model.firmware_pages_held(), 0);
}

#[test]
fn a_port_config_out_of_range_is_refused_naming_the_field_and_value() {
    let model = Model::loopback(EmuConfig::default());
    let cases = [
        (
            PortConfig {
                ring_size: 100,
                ..PortConfig::default()
            },
            "ring_size",
            100,
            "power of two",
        ),
        (
            PortConfig {
                rx_queues: 0,
                ..PortConfig::default()
            },
            "rx_queues",
            0,
            "1..=64",
        ),
        (
            PortConfig {
                mtu: 9961,
                ..PortConfig::default()
            },
            "mtu",
            9961,
            "68..=9960",
        ),
        (
            PortConfig {
                mtu: 9000,
                ..PortConfig::default()
            },
            "buf_size",
            2048,
            "MTU 9000",
        ),
        (
            PortConfig {
                cqe_every: 0,
                ..PortConfig::default()
            },
            "cqe_every",
            0,
            "give 1..=",
        ),
        (
            PortConfig {
                shared_rx: Some(SharedRxConfig {
                    ring_size: 64,
                    limit: 64,
                }),
                ..PortConfig::default()
            },
            "shared_rx.limit",
            64,
            "below the ring size",
        ),
    ];
    for (config, field, value, says) in cases {
        let dev = Device::bring_up(EmuBackend::new(model.clone(), "emu"), options()).unwrap();
        let err = Port::start(dev, config).err().expect("refused");
        match &err {
            DriverError::Config(ConfigError {
                field: f,
                value: v,
                allowed,
            }) => {
                assert_eq!((*f, *v), (field, value), "{err}");
                assert!(allowed.contains(says), "{field}: {allowed}");
            }
            other => panic!("{field}: not a config error: {other}"),
        }
    }
}

#[test]
fn a_command_buffer_shorter_than_its_layout_is_an_internal_fault() {
    let model = Model::loopback(EmuConfig::default());
    let mut dev = Device::bring_up(EmuBackend::new(model, "emu"), options()).unwrap();
    // A whole header in, but room for only half the output header.
    let err = dev.exec(&input(Opcode::Nop, 16), 8).unwrap_err();
    assert!(
        matches!(err, DriverError::CommandLayout { opcode, .. } if opcode == Opcode::Nop as u16),
        "{err}"
    );
    assert!(err.to_string().contains("internal fault"), "{err}");
}
