//! Bring-up shared by the tests and the fuzz targets: short timeouts, so a case that goes wrong
//! fails in seconds, a small port, and a pair of ports started back to back.

use cxdirect::{Device, Options, Port, PortConfig, Queues, RxQueue, Started, TxQueue};
use cxdirect_apps::emulated::EmuBackend;
use cxdirect_emu::{Device as Model, EmuConfig};
use std::time::Duration;

/// Driver options with a 2-second bring-up timeout and commands timing out after
/// `cmd_timeout`.
pub fn options(cmd_timeout: Duration) -> Options {
    Options {
        init_timeout: Duration::from_secs(2),
        cmd_timeout,
        ..Options::default()
    }
}

/// Brings the driver up on `model` (named `name` in errors) with 2-second timeouts; panics when
/// that fails, which a well-behaved model never makes it do.
pub fn bring_up(model: &Model, name: &str) -> Device<EmuBackend> {
    Device::bring_up(
        EmuBackend::new(model.clone(), name),
        options(Duration::from_secs(2)),
    )
    .expect("bring-up on a well-behaved model")
}

/// Brings the driver up on `model` (named `name` in errors) with the default bring-up timeout
/// and 10-second commands, room for tests that make many objects; panics when that fails.
pub fn bring_up_patient(model: &Model, name: &str) -> Device<EmuBackend> {
    let opts = Options {
        cmd_timeout: Duration::from_secs(10),
        ..Options::default()
    };
    Device::bring_up(EmuBackend::new(model.clone(), name), opts)
        .expect("bring-up on a well-behaved model")
}

/// A small port: one queue each way, 64-entry rings, 256 buffers.
pub fn small_port() -> PortConfig {
    PortConfig {
        ring_size: 64,
        pool_buffers: 256,
        ..PortConfig::default()
    }
}

/// A started port and its queues.
pub type Ports = Started<EmuBackend>;

/// A started port taken apart: the port, its send queues and its receive queues, so a test
/// names all three in one tuple pattern.
pub type Side = (
    Port<EmuBackend>,
    Vec<TxQueue<EmuBackend>>,
    Vec<RxQueue<EmuBackend>>,
);

/// Takes a started port apart into a [`Side`].
pub fn side(started: Ports) -> Side {
    let Started {
        port,
        queues: Queues { tx, rx },
    } = started;
    (port, tx, rx)
}

/// Two models wired back to back (both configured as `model`), the driver brought up on each
/// with 5-second command timeouts and a port started on each with `config`; the models come
/// last, in the ports' order. Panics when a step fails.
pub fn started_pair(model: EmuConfig, config: PortConfig) -> (Ports, Ports, [Model; 2]) {
    let (a, b) = Model::pair(model.clone(), model);
    let opts = Options {
        cmd_timeout: Duration::from_secs(5),
        ..Options::default()
    };
    let da = Device::bring_up(EmuBackend::new(a.clone(), "a"), opts.clone()).unwrap();
    let db = Device::bring_up(EmuBackend::new(b.clone(), "b"), opts).unwrap();
    let pa = Port::start(da, config.clone()).unwrap();
    let pb = Port::start(db, config).unwrap();
    (pa, pb, [a, b])
}

/// [`started_pair`] with both ports taken apart into [`Side`]s.
pub fn started_sides(model: EmuConfig, config: PortConfig) -> (Side, Side, [Model; 2]) {
    let (pa, pb, models) = started_pair(model, config);
    (side(pa), side(pb), models)
}
