//! cxdirect-apps: DPDK-like programs built on cxdirect — info, devbind and, as they arrive,
//! testpmd, pingpong, shared-rx, dmabuf-rx and bench — plus what they share: device specs
//! (`emu`, `emu-pair`, PCI addresses) and the emulated backend.

pub mod args;
pub mod emulated;

