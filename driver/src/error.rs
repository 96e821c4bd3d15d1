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
    /// The device's output failed a check (block number, length).
    BadOutput(&'static str),
    /// The entry was handed back (ownership bit clear) with another token than the command
    /// was posted with: another command's answer, or the entry written by someone else.
    TokenChanged {
        /// The token the command was posted with.
        sent: u8,
        /// The token the entry came back with.
        found: u8,
    },
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
            CmdFailure::TokenChanged { sent, found } => write!(
                f,
                "device output rejected: the entry came back with token {found:#04x}, not the \
                 {sent:#04x} it was posted with (another command's answer, or a write from \
                 elsewhere)"
            ),
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

/// A value the caller gave that is out of range: a field of [`crate::PortConfig`],
/// [`crate::SharedRxConfig`], [`crate::RxStriding`] or [`crate::Options`], or an argument
/// such as a pool's buffer size or a page list's page size. Checked before the device is
/// touched, so nothing was created.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{field} = {value}: {allowed}")]
pub struct ConfigError {
    /// The field or argument, as the caller names it: `"ring_size"`, `"rx_striding.ring_wqes"`,
    /// `"shared_rx.limit"`, `"msix_vectors"`, `"buf_size"`, `"page_size"`.
    pub field: &'static str,
    /// The value given (for a list, its length; for an address, the address).
    pub value: u64,
    /// What the field takes here and why, with the other values it depends on (the device's
    /// limits, other fields), written for a person to act on.
    pub allowed: String,
}

/// Which kind of queue a [`DriverError::NoSuchQueue`] names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueKind {
    /// A send queue (SQ).
    Send,
    /// A receive queue (RQ), plain, striding or drawing from a shared ring.
    Receive,
    /// A shared receive ring (RMP).
    SharedRing,
}

impl std::fmt::Display for QueueKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            QueueKind::Send => "send queue",
            QueueKind::Receive => "receive queue",
            QueueKind::SharedRing => "shared receive ring",
        })
    }
}

/// Errors of the driver layer.
#[derive(Debug, Error)]
#[non_exhaustive]
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
    /// A configuration value or argument is out of range; nothing was created.
    #[error("invalid configuration: {0}")]
    Config(#[from] ConfigError),
    /// The device, or the driver, does not do what was asked (a device capability or port
    /// type the driver needs, or a combination of features the driver does not support).
    #[error("{what} is not supported: {why}")]
    Unsupported {
        /// What was asked.
        what: &'static str,
        /// Why it cannot be done, and what to do instead.
        why: &'static str,
    },
    /// The call needs a feature the port or queue was started without.
    #[error("{what} is not enabled: {how}")]
    NotEnabled {
        /// The feature.
        what: &'static str,
        /// How to enable it (the configuration field to set).
        how: &'static str,
    },
    /// The object is not in the state the call needs; nothing was changed.
    #[error("{what} is {state}; it must be {needed}")]
    WrongState {
        /// The object.
        what: &'static str,
        /// The state it is in.
        state: String,
        /// The state the call needs, and how to get there.
        needed: &'static str,
    },
    /// A queue or ring number that names none of this port's (or device's) own.
    #[error("{kind} {number:#x} is not one of this port's")]
    NoSuchQueue {
        /// What kind of queue was named.
        kind: QueueKind,
        /// The number given (SQ, RQ or RMP number).
        number: u32,
    },
    /// Handles given to a call are not those the call needs (another port's, or not all of
    /// them); nothing was changed.
    #[error("wrong handles: {needed}")]
    WrongHandles {
        /// Which handles the call takes.
        needed: String,
    },
    /// A [`crate::PacketBurst`] holding packets of one pool was given to a queue that
    /// receives into another; the burst is left as it was.
    #[error("the burst holds {held} packets of another pool: send, clear or drain it before receiving from this queue")]
    PoolMismatch {
        /// Packets the burst holds.
        held: usize,
    },
    /// Data does not fit the room it was meant for; nothing was written.
    #[error("{what} needs {need} bytes, {capacity} available")]
    BufferTooSmall {
        /// What was to be placed.
        what: &'static str,
        /// Bytes needed (for a write, its offset plus its length).
        need: usize,
        /// Bytes of room.
        capacity: usize,
    },
    /// A work request refused before anything of its call was posted (RDMA `post_send`,
    /// `post_recv`): more gather entries or inline bytes than the queue takes, an operation
    /// the payload does not fit, a receive on a queue pair that uses a shared receive queue.
    #[error("work request {index} of the call refused, nothing posted: {why}")]
    BadWorkRequest {
        /// The request's place in the call's slice.
        index: usize,
        /// What is wrong, and the limit it broke.
        why: &'static str,
    },
    /// A work queue has no room for the call's requests; nothing was posted. Poll the
    /// completion queue and post again.
    #[error("{what} is full: {outstanding} outstanding of {capacity}, {asked} more asked")]
    QueueFull {
        /// The queue.
        what: &'static str,
        /// Entries (send: 64-byte blocks) outstanding.
        outstanding: u32,
        /// Entries the queue holds.
        capacity: u32,
        /// Entries the call needed.
        asked: u32,
    },
    /// A payload token given to a split receive queue ([`crate::SplitRxQueue::give_back`])
    /// that the queue did not lend, or that was given back already; no token of the call was
    /// taken back.
    #[error("payload token of buffer {buffer} (queue tag {queue}) refused: {why}")]
    BadToken {
        /// The tag of the queue that lent the token.
        queue: u32,
        /// The token's payload buffer.
        buffer: u32,
        /// Why it was refused.
        why: &'static str,
    },
    /// A packet index past the end of a [`crate::PacketBurst`].
    #[error("no packet {index} in a burst of {len}")]
    NoSuchPacket {
        /// The index given.
        index: usize,
        /// Packets the burst holds.
        len: usize,
    },
    /// A command's input or output buffer is too short for the layout written or read in it.
    /// Built by the driver, so this is a fault in the driver (or in a caller of
    /// [`crate::Device::exec`]), not in the device or the configuration.
    #[error("{} {what} is too short for its layout: an internal fault in the code that built the command (the driver's, or a caller's of Device::exec)", opcode_name(*.opcode))]
    CommandLayout {
        /// The command.
        opcode: u16,
        /// Which buffer or part of it (`"input"`, `"output"`, `"MTT"`).
        what: &'static str,
    },
    /// The driver's own bookkeeping broke an invariant: an internal fault, not a device or
    /// caller error.
    #[error("internal fault: {0}; please report it")]
    Internal(&'static str),
}

impl DriverError {
    /// A [`DriverError::Config`] for `field` holding `value`, saying what it takes.
    pub(crate) fn config(
        field: &'static str,
        value: impl Into<u64>,
        allowed: impl Into<String>,
    ) -> Self {
        DriverError::Config(ConfigError {
            field,
            value: value.into(),
            allowed: allowed.into(),
        })
    }

    /// A [`DriverError::CommandLayout`] for command `opcode`.
    pub(crate) fn layout(opcode: Opcode, what: &'static str) -> Self {
        DriverError::CommandLayout {
            opcode: opcode as u16,
            what,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{RxStriding, SharedRxConfig};

    #[test]
    fn a_caller_matches_a_config_error_by_field_and_reads_what_to_give() {
        let shared = SharedRxConfig {
            ring_size: 64,
            limit: 64,
        };
        let err = shared.validate(15).unwrap_err();
        let DriverError::Config(ConfigError {
            field: "shared_rx.limit",
            value: 64,
            allowed,
        }) = &err
        else {
            panic!("not the limit's config error: {err:?}");
        };
        assert!(allowed.contains("below the ring size 64"), "{allowed}");
        assert_eq!(
            err.to_string(),
            "invalid configuration: shared_rx.limit = 64: must be below the ring size 64"
        );

        // The device's limit is part of what the message says.
        let big = SharedRxConfig {
            ring_size: 1 << 12,
            limit: 16,
        };
        let err = big.validate(10).unwrap_err();
        assert!(
            matches!(
                &err,
                DriverError::Config(ConfigError {
                    field: "shared_rx.ring_size",
                    value: 4096,
                    ..
                })
            ),
            "{err}"
        );
        assert!(err.to_string().contains("2^10"), "{err}");
    }

    #[test]
    fn each_striding_field_is_named_on_its_own() {
        let cases = [
            (
                "rx_striding.log_strides",
                RxStriding {
                    log_strides: 17,
                    ..RxStriding::default()
                },
            ),
            (
                "rx_striding.log_stride_bytes",
                RxStriding {
                    log_stride_bytes: 5,
                    ..RxStriding::default()
                },
            ),
            (
                "rx_striding.ring_wqes",
                RxStriding {
                    ring_wqes: 3,
                    ..RxStriding::default()
                },
            ),
        ];
        for (field, striding) in cases {
            match striding.validate(1, 22) {
                Err(DriverError::Config(e)) => assert_eq!(e.field, field, "{e}"),
                other => panic!("{field}: {other:?}"),
            }
        }
        assert!(RxStriding::default().validate(1, 22).is_ok());
    }

    #[test]
    fn internal_faults_say_so() {
        let layout = DriverError::layout(Opcode::CreateCq, "input");
        assert_eq!(
            layout.to_string(),
            "CREATE_CQ input is too short for its layout: an internal fault in the code that \
             built the command (the driver's, or a caller's of Device::exec)"
        );
        let internal = DriverError::Internal("a new pool was shared before it was returned");
        assert!(internal.to_string().starts_with("internal fault: "));
    }
}
