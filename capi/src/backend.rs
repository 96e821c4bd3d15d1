//! The two ways a C program reaches a function, behind one backend type so that every port
//! and queue the interface hands out has one concrete type: a modelled function (emulated
//! specs) or a PCI function through VFIO.

use cxdirect_apps::emulated::EmuBackend;
use driver::backend::vfio::VfioDevice;
use driver::{Backend, BackendError, Interrupt};
use std::sync::Arc;

/// A function the interface opened.
pub(crate) enum AnyBackend {
    /// A modelled ConnectX function (`cxd_open_emulated_pair`).
    Emulated(EmuBackend),
    /// A PCI function through VFIO (`cxd_open_pci`).
    Pci(VfioDevice),
}

/// Forwards a call to whichever backend this is (one predictable branch per MMIO access).
macro_rules! each {
    ($self:ident, $b:ident => $call:expr) => {
        match $self {
            AnyBackend::Emulated($b) => $call,
            AnyBackend::Pci($b) => $call,
        }
    };
}

impl Backend for AnyBackend {
    fn name(&self) -> String {
        each!(self, b => b.name())
    }
    fn bar0_len(&self) -> usize {
        each!(self, b => b.bar0_len())
    }
    #[inline]
    fn read32(&self, offset: usize) -> [u8; 4] {
        each!(self, b => b.read32(offset))
    }
    #[inline]
    fn write32(&self, offset: usize, bytes: [u8; 4]) {
        each!(self, b => b.write32(offset, bytes))
    }
    #[inline]
    fn write64(&self, offset: usize, bytes: [u8; 8]) {
        each!(self, b => b.write64(offset, bytes))
    }
    #[inline]
    fn write_bf(&self, offset: usize, wqe: &[u8; 64]) {
        each!(self, b => b.write_bf(offset, wqe))
    }
    fn config_read(&self, offset: u16, buf: &mut [u8]) -> Result<(), BackendError> {
        each!(self, b => b.config_read(offset, buf))
    }
    fn config_write(&self, offset: u16, data: &[u8]) -> Result<(), BackendError> {
        each!(self, b => b.config_write(offset, data))
    }
    fn iommu(&self) -> Arc<dyn cxdirect_dma::Iommu> {
        each!(self, b => b.iommu())
    }
    fn enable_msix(&self, vectors: u16) -> Result<Vec<Interrupt>, BackendError> {
        each!(self, b => b.enable_msix(vectors))
    }
    fn disable_msix(&self) -> Result<(), BackendError> {
        each!(self, b => b.disable_msix())
    }
    fn reset(&self) -> Result<(), BackendError> {
        each!(self, b => b.reset())
    }
}
