//! Control of the function: bring-up and teardown, health, reset, the command queue, the
//! async event queue and its events, firmware pages, memory keys, Q counters, and opening a
//! VFIO device.

mod cmd;
mod device;
mod health;
mod mkey;
mod pages;
mod qcounter;

pub use device::{
    ClassSelection, ClassSettings, Device, DeviceInfo, DeviceRecovery, EventCounts, LinkSpeeds,
    Options, RmpStatus, TeardownReport, ASYNC_EVENTS,
};
pub use mkey::{KeyAccess, MemoryKey};

pub(crate) use cmd::{create_cq_input, destroy_input, input, output_too_short, rx_mini_cqe_format};
pub(crate) use qcounter::QCounterSet;
