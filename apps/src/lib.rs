//! cxdirect-apps: DPDK-like programs built on cxdirect — info, devbind and, as they arrive,
//! testpmd, pingpong, shared-rx, dmabuf-rx and bench — plus what they share: device specs
//! (`emu`, `emu-pair`, PCI addresses) and the emulated backend.

pub mod args;
pub mod devbind;
pub mod emulated;
pub mod testpmd;

/// Opens a PCI function through VFIO with the IOMMU mode named by `mode` (`auto`, `type1`,
/// `iommufd` or `noiommu`).
pub fn vfio_open(
    bdf: &str,
    mode: &str,
) -> Result<cxdirect::vfio::VfioDevice, cxdirect::vfio::VfioError> {
    let mode: cxdirect::vfio::IommuMode = mode.parse()?;
    cxdirect::vfio::VfioDevice::open(bdf, mode, cxdirect::vfio::RealSys)
}
