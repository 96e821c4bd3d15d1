//! cxdirect: a userspace, poll-mode driver for NVIDIA ConnectX (mlx5) NICs reached through VFIO.
//!
//! The driver reaches a device through one seam, [`Backend`]: VFIO (type1, iommufd or
//! no-IOMMU) on real hardware, or the in-process device model in tests and emulated specs.
//! [`Device::bring_up`] takes a function from reset to initialized (command interface, firmware
//! pages, capabilities, async event queue on MSI-X vector 0) and [`Device::teardown`] returns it,
//! with every firmware page reclaimed.

pub mod backend;
pub mod burst;
mod cmd;
pub mod cq;
pub mod device;
pub mod eq;
pub mod error;
mod inflight;
pub mod mempool;
pub mod mkey;
mod open;
mod pages;
pub mod port;
mod port_shared;
mod qcounter;
pub mod queue;
mod recover;
mod revoke;
mod rxirq;
pub mod shared;
pub mod stats;
mod striding;
mod txsource;
mod txwqe;
pub mod vfio;

pub use backend::{Backend, BackendError, Interrupt};
pub use burst::{BurstPacket, PacketBurst};
pub use cq::Cqe;
pub use device::{
    Device, DeviceInfo, DeviceRecovery, EventCounts, Options, RmpStatus, TeardownReport,
};
pub use eq::Event;
pub use error::{CmdError, CmdFailure, DriverError, HealthFailure};
pub use mempool::{Mbuf, Mempool, OffloadFlags};
pub use mkey::{KeyAccess, MemoryKey};
pub use port::{Port, PortConfig, Queues, SharedQueues};
pub use port_shared::SharedRingRestart;
pub use queue::{InlineMode, QueueStats, RxQueue, TxQueue};
pub use recover::{PortRecovery, Recovery};
pub use revoke::PoolRevocation;
pub use shared::{SharedRingStats, SharedRxConfig, SharedRxQueue, SharedRxRing};
pub use stats::{PortStats, QueueXstats};
pub use striding::RxStriding;
