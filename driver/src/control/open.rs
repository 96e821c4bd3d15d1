//! Opening a real function by its spec: VFIO, then bring-up.

use super::device::{Device, Options};
use crate::backend::vfio::{DeviceSpec, RealSys, VfioDevice};
use crate::error::DriverError;

impl Device<VfioDevice> {
    /// Opens the PCI function `spec` names (`[pci:]DOMAIN:BUS:DEVICE.FUNCTION[,iommu=MODE]`, see
    /// [`DeviceSpec`]) through the kernel's VFIO and brings it up. The function must be bound to
    /// `vfio-pci` (`cxdirect-devbind --bind`); errors say what to do when it is not.
    pub fn open(spec: &str, options: Options) -> Result<Self, DriverError> {
        let spec: DeviceSpec = spec.parse()?;
        let backend = VfioDevice::open(&spec.address.to_string(), spec.iommu, RealSys)?;
        Device::bring_up(backend, options)
    }
}
