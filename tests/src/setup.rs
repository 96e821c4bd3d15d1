//! Bring-up shared by the hostile-device tests and the fuzz targets: short timeouts, so a case
//! that goes wrong fails in seconds, and a small port.

use cxdirect::{Device, Options, PortConfig};
use cxdirect_apps::emulated::EmuBackend;
use cxdirect_emu::Device as Model;
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

/// A small port: one queue each way, 64-entry rings, 256 buffers.
pub fn small_port() -> PortConfig {
    PortConfig {
        ring_size: 64,
        pool_buffers: 256,
        ..PortConfig::default()
    }
}
