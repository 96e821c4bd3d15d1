//! cxdirect-emu: a model of a ConnectX-6 Dx PCI function — config space, BAR0, the firmware's
//! command processing, object tables, queue engines, an IOMMU model, wires, PCIe transaction
//! counters and fault injection.
//!
//! It depends only on `cxdirect-hw`, never on the driver: the model and the driver are two
//! independent readings of the manual.

pub mod packet;
pub mod pcap;
pub mod pci;
pub mod rss;
pub mod wire;
