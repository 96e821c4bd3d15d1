//! cxdirect-apps: DPDK-like programs built on cxdirect — info, devbind and, as they arrive,
//! testpmd, pingpong, shared-rx, dmabuf-rx and bench — plus what they share: device specs
//! (`emu`, `emu-pair`, PCI addresses) and the emulated backend.

pub mod args;
pub mod devbind;
pub mod emulated;
pub mod testpmd;

/// `spec` with `,iommu=MODE` appended when it names no IOMMU mode itself: a program's
/// `--iommu-mode` is the default, a spec's own option wins.
pub fn with_iommu_mode(spec: &str, mode: &str) -> String {
    if spec.contains("iommu=") {
        spec.to_string()
    } else {
        format!("{spec},iommu={mode}")
    }
}

/// Opens the PCI function a spec names (`[pci:]DOMAIN:BUS:DEVICE.FUNCTION[,iommu=MODE]`)
/// through VFIO, with `mode` (`auto`, `type1`, `iommufd` or `noiommu`) unless the spec names
/// one; the device is not brought up (see [`cxdirect::Device::open`] for both at once).
pub fn vfio_open(
    spec: &str,
    mode: &str,
) -> Result<cxdirect::vfio::VfioDevice, cxdirect::vfio::VfioError> {
    let spec: cxdirect::vfio::DeviceSpec = with_iommu_mode(spec, mode).parse()?;
    cxdirect::vfio::VfioDevice::open(
        &spec.address.to_string(),
        spec.iommu,
        cxdirect::vfio::RealSys,
    )
}
