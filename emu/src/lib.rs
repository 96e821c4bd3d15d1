//! cxdirect-emu: a model of a ConnectX-6 Dx PCI function — config space, BAR0, the firmware's
//! command processing, object tables, queue engines, an IOMMU model, wires, PCIe transaction
//! counters and fault injection.
//!
//! It depends only on `cxdirect-hw`, never on the driver: the model and the driver are two
//! independent readings of the manual. Start at [`Device`]: create one (or a wired pair), map
//! host memory into its [`Iommu`](dma::Iommu), enable memory decoding and bus mastering through
//! config space, and drive it with MMIO reads and writes at BAR0 offsets, as a driver would.

pub mod config;
pub mod counters;
pub mod device;
pub mod dma;
pub(crate) mod engine;
pub(crate) mod fw;
pub mod irq;
pub mod packet;
pub mod pcap;
pub mod pci;
pub mod rss;
pub mod testkit;
pub mod wire;

pub use config::{EmuConfig, ExecMode};
pub use device::Device;
pub use fw::{CmdError, Syndrome};
