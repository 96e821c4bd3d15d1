//! cxdirect-emu: a model of a ConnectX-6 Dx PCI function — config space, BAR0, the firmware's
//! command processing, object tables, queue engines, an IOMMU model, wires, PCIe transaction
//! counters and fault injection — plus the vfio-user server that puts it behind QEMU.
//!
//! It depends only on `cxdirect-hw`, never on the driver. Nothing is implemented here yet.
