//! The driver's errors: what failed (command, status, syndrome, value the device wrote) and, where
//! there is something to do, what the user can do about it.

use crate::backend::BackendError;
use cxdirect_dma::{DmaBufError, DmaError, IommuError};
use cxdirect_hw::cmd::{CmdStatus, DeliveryStatus, Opcode};
use std::time::Duration;
use thiserror::Error;

/// How a command failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmdFailure {
    /// The device could not read the command (bits 7:1 of `status_own`).
    Delivery(Result<DeliveryStatus, u8>),
    /// The command ran and failed.
    Status {
        /// Command status (raw when the value names no known status).
        status: Result<CmdStatus, u8>,
        /// Firmware syndrome.
        syndrome: u32,
    },
    /// No completion within the command's timeout.
    Timeout(Duration),
    /// The device's output failed a check (token, block number, length).
    BadOutput(&'static str),
    /// Not posted: every command slot holds a command the device took but never answered
    /// (count of slots). Those slots, and the memory the commands named, stay the device's
    /// until it answers them or [`crate::Device::recover`] resets the function.
    NoFreeSlot(usize),
}

impl CmdFailure {
    /// True when the command reached the device, so it may have acted on it whatever the
    /// answer says (a status or output can be damaged, a timed-out command may still run):
    /// memory the command handed over must then be treated as the device's.
    pub fn reached_device(&self) -> bool {
        !matches!(self, CmdFailure::NoFreeSlot(_))
    }
}

impl std::fmt::Display for CmdFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CmdFailure::Delivery(Ok(s)) => write!(f, "delivery failed with {s}"),
            CmdFailure::Delivery(Err(raw)) => {
                write!(f, "delivery failed with unknown status {raw:#x}")
            }
            CmdFailure::Status {
                status: Ok(s),
                syndrome,
            } => write!(f, "status {s}, syndrome {syndrome:#010x}"),
            CmdFailure::Status {
                status: Err(raw),
                syndrome,
            } => {
                write!(f, "unknown status {raw:#x}, syndrome {syndrome:#010x}")
            }
            CmdFailure::Timeout(after) => write!(f, "no completion after {} ms", after.as_millis()),
            CmdFailure::BadOutput(what) => write!(f, "device output rejected: {what}"),
            CmdFailure::NoFreeSlot(slots) => write!(
                f,
                "not posted: all {slots} command slots hold commands the device never \
                 answered; Device::recover resets the function"
            ),
        }
    }
}

/// A failed command, named.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("{} failed: {failure}", opcode_name(*.opcode))]
pub struct CmdError {
    /// The command (raw when the driver sent an opcode it has no name for).
    pub opcode: u16,
    /// What went wrong.
    pub failure: CmdFailure,
}

fn opcode_name(op: u16) -> String {
    match Opcode::try_from(op) {
        Ok(op) => op.name().to_string(),
        Err(_) => format!("command {op:#x}"),
    }
}

impl CmdError {
    /// The command status, when the command ran and failed.
    pub fn status(&self) -> Option<CmdStatus> {
        match self.failure {
            CmdFailure::Status { status: Ok(s), .. } => Some(s),
            _ => None,
        }
    }
}

/// Why the device is considered failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthFailure {
    /// The health buffer reports a fatal syndrome.
    Syndrome(u8),
    /// The health counter stopped advancing.
    CounterStalled,
    /// Registers read all-ones: the function fell off the bus or is resetting.
    NotResponding,
}

impl std::fmt::Display for HealthFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HealthFailure::Syndrome(s) => {
                write!(f, "firmware reported fatal health syndrome {s:#x}")
            }
            HealthFailure::CounterStalled => write!(f, "firmware health counter stopped advancing"),
            HealthFailure::NotResponding => {
                write!(f, "device not responding (registers read 0xffffffff)")
            }
        }
    }
}

/// Errors of the driver layer.
#[derive(Debug, Error)]
pub enum DriverError {
    /// The backend (VFIO or the emulated device) failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// The PCI function could not be opened through VFIO.
    #[error(transparent)]
    Vfio(#[from] crate::backend::vfio::VfioError),
    /// DMA memory could not be had.
    #[error(transparent)]
    Dma(#[from] DmaError),
    /// Imported (dmabuf) memory could not be mapped or accessed.
    #[error(transparent)]
    DmaBuf(#[from] DmaBufError),
    /// The IOMMU refused a mapping.
    #[error(transparent)]
    Iommu(#[from] IommuError),
    /// A command failed.
    #[error(transparent)]
    Command(#[from] CmdError),
    /// Firmware did not finish initializing in time.
    #[error("firmware still initializing after {} ms: the device may need a reset or a firmware update", .0.as_millis())]
    InitTimeout(Duration),
    /// The command interface revision is not the one this driver speaks.
    #[error("command interface revision {0} is not supported (expected 5): update the firmware")]
    CmdifRevision(u16),
    /// The device is in the failed state; every call reports it until recovery.
    #[error("device failed: {0}; drop the device, reset the function (`Backend::reset`, a function-level reset) and bring it up again")]
    Failed(HealthFailure),
    /// The device wrote a value the driver refuses to act on.
    #[error("device wrote an invalid {what}: {value:#x}")]
    BadDeviceValue {
        /// Which field.
        what: &'static str,
        /// The value.
        value: u64,
    },
    /// A request the caller made that cannot be honoured.
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The configuration asks for a feature the device does not offer (named by the
    /// capability that says so).
    #[error("the device does not offer {0}")]
    Unsupported(&'static str),
}

/// A [`DriverError::Invalid`] saying `msg`.
pub(crate) fn invalid(msg: impl Into<String>) -> DriverError {
    DriverError::Invalid(msg.into())
}
