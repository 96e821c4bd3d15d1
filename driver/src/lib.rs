//! cxdirect: a userspace, poll-mode driver for NVIDIA ConnectX (mlx5) NICs reached through VFIO.
//!
//! The driver reaches a device through one seam, [`Backend`]: VFIO (type1, iommufd or
//! no-IOMMU) on real hardware, or the in-process device model in tests and emulated specs.
//! [`Device::bring_up`] takes a function from reset to initialized (command interface, firmware
//! pages, capabilities, async event queue on MSI-X vector 0) and [`Device::teardown`] returns it,
//! with every firmware page reclaimed.
//!
//! The modules follow a packet's path, and each imports only from those below it:
//!
//! - [`backend`]: the seam to the device (MMIO, DMA, interrupts), with [`backend::vfio`];
//! - [`control`]: the function's bring-up, teardown, commands, events, pages and keys;
//! - [`port`]: a port's objects, steering, shared rings, recovery and statistics;
//! - [`tx`] and [`rx`]: the send and receive queues, the fast path;
//! - [`cq`]: completion and event queue rings and CQE decoding;
//! - [`rdma`]: RoCE v2 verbs: protection domains, memory regions, completion queues, RC queue
//!   pairs and shared receive queues;
//! - [`cm`]: the InfiniBand connection manager (ib_cm / rdma_cm on the wire), pure protocol:
//!   MADs and time in, MADs and connection events out;
//! - [`devmem_tcp`]: a TCP receiver on a split queue's headers whose payload stays in dmabuf
//!   memory (pure protocol: parsed segments in, fragments, tokens and replies out);
//! - [`mem`]: buffer pools, [`Mbuf`] and [`PacketBurst`];
//! - [`net`]: the function's IPv4 address: ARP and ICMP echo answered, peers' MAC addresses
//!   resolved ([`net::Responder`], [`net::Neighbours`]);
//! - `smoltcp_phy` (feature `smoltcp`): smoltcp's TCP/IP stack on a port's queues;
//! - [`ring`]: what every work queue ring shares (burst bound, counters, word helpers).

pub mod backend;
pub mod cm;
pub mod control;
pub mod cq;
pub mod devmem_tcp;
pub mod error;
pub mod mem;
pub mod net;
pub mod port;
pub mod rdma;
pub mod ring;
pub mod rx;
#[cfg(feature = "smoltcp")]
pub mod smoltcp_phy;
pub mod tx;

#[cfg(test)]
mod test_rng;
#[cfg(test)]
mod test_support;

pub use backend::{Backend, BackendError, Interrupt};
pub use cm::{
    Cm, CmAddress, CmError, CmStats, ConnId, ConnectRequest, QpAttributes, QpParams,
    ReceiveError as CmReceiveError,
};
pub use control::{
    ClassSelection, ClassSettings, Device, DeviceInfo, DeviceRecovery, EventCounts, KeyAccess,
    LinkSpeeds, MemoryKey, Options, RmpStatus, TeardownReport,
};
pub use cq::{Cqe, Event};
pub use error::{CmdError, CmdFailure, ConfigError, DriverError, HealthFailure, QueueKind};
pub use mem::{BurstPacket, Mbuf, Mempool, OffloadFlags, PacketBurst};
pub use port::{
    FlowMatch, FlowProtocol, FlowRule, IpVersion, PoolRevocation, Port, PortConfig, PortRecovery,
    PortStats, QueueXstats, Queues, Recovery, SharedQueues, SharedRingRestart, SplitRxConfig,
    Started,
};
pub use ring::QueueStats;
pub use rx::{
    PayloadToken, RxQueue, RxSink, RxStriding, SharedRingStats, SharedRxConfig, SharedRxQueue,
    SharedRxRing, SplitPacket, SplitRxQueue, SplitRxStats,
};
pub use tx::{InlineMode, TxQueue, TxSource};
