//! The firmware's liveness as the init segment shows it: bus mastering on, `initializing`
//! waited out, the command interface revision checked, and the health counter.

use crate::backend::registers::Registers;
use crate::backend::Backend;
use crate::error::{DriverError, HealthFailure};
use cxdirect_hw::init_seg::{self, CmdifRevFwSub, HealthCounter, Initializing};
use cxdirect_hw::mmio::Register;
use std::time::{Duration, Instant};

/// Bus mastering on, `initializing` waited out and the command interface revision checked, as
/// every bring-up (first, or after a reset) starts; returns the CMDIF_REV_FW_SUB register.
pub(crate) fn wake_firmware<B: Backend>(
    backend: &B,
    timeout: Duration,
) -> Result<CmdifRevFwSub, DriverError> {
    enable_bus_master(backend)?;
    wait_for_firmware(backend, timeout)?;
    let cmdif = Registers::init_seg(backend).read::<CmdifRevFwSub>();
    if cmdif.cmdif_rev() != init_seg::CMDIF_REV {
        return Err(DriverError::CmdifRevision(cmdif.cmdif_rev()));
    }
    Ok(cmdif)
}

/// The firmware's health counter as the init segment shows it (24 bits).
pub(crate) fn health_counter<B: Backend>(backend: &B) -> u32 {
    Registers::init_seg(backend)
        .read::<HealthCounter>()
        .counter()
}

/// Sets memory decoding and bus mastering in the Command register.
fn enable_bus_master<B: Backend>(backend: &B) -> Result<(), DriverError> {
    let mut cmd = [0u8; 2];
    backend.config_read(4, &mut cmd)?;
    let value = u16::from_le_bytes(cmd) | 0b110;
    backend.config_write(4, &value.to_le_bytes())?;
    Ok(())
}

/// Waits for `initializing` to clear.
fn wait_for_firmware<B: Backend>(backend: &B, timeout: Duration) -> Result<(), DriverError> {
    let start = Instant::now();
    loop {
        let word = Registers::init_seg(backend).read::<Initializing>();
        if word.to_raw() == init_seg::DEAD_READ {
            return Err(DriverError::Failed(HealthFailure::NotResponding));
        }
        if !word.initializing() {
            return Ok(());
        }
        if start.elapsed() > timeout {
            return Err(DriverError::InitTimeout(timeout));
        }
        std::thread::sleep(Duration::from_millis(1).min(timeout / 10 + Duration::from_micros(1)));
    }
}
