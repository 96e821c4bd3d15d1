//! VFIO access to real PCI functions.
//!
//! [`VfioDevice::open`] takes a ConnectX function away from the kernel's own driver and gives
//! the driver its BAR0, config space, MSI-X interrupts, reset, and an IOMMU to make DMA memory
//! reachable. Three kernel arrangements are supported ([`IommuMode`]):
//!
//! - **type1**: container `/dev/vfio/vfio` plus group `/dev/vfio/N`, DMA mapped with
//!   `VFIO_IOMMU_MAP_DMA` into the IOVA ranges `VFIO_IOMMU_GET_INFO` reports;
//! - **iommufd**: `/dev/iommu` plus the device cdev `/dev/vfio/devices/vfioN`, DMA mapped into
//!   an IO address space with `IOMMU_IOAS_MAP`;
//! - **no-IOMMU**: a `vfio-noiommu` group; the device sees physical addresses (read from
//!   `/proc/self/pagemap`) and can reach all memory, so it is used only when asked for.
//!
//! Everything the layer asks of the kernel goes through the [`VfioSys`] seam: [`RealSys`] on a
//! real host, `testing::FakeSys` in tests (built for the crate's own tests and with the
//! `testing` feature).
//!
//! This is one of the rooms where `unsafe` lives: ioctls, `mmap` of BAR0 and volatile register
//! accesses through raw pointers (never references).

mod bar;
mod device;
mod error;
mod iommufd;
mod noiommu;
pub mod pci;
mod peer;
mod real;
mod spec;
pub mod sys;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod type1;

use std::fmt;
use std::str::FromStr;

pub use bar::MmioAccess;
pub use device::{VfioDevice, MIN_BAR0_LEN, MIN_MEMLOCK_BYTES};
pub use error::VfioError;
pub use error::{GroupMember, PciAddress};
pub use peer::{export_hint, PeerBar, PeerBarError};
pub use real::RealSys;
pub use spec::DeviceSpec;
pub use sys::VfioSys;

/// Which kernel arrangement to reach the function through (`--iommu-mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IommuMode {
    /// iommufd when the kernel offers it (`/dev/iommu` and a `vfio-dev` cdev for the function)
    /// and its nodes can be opened, else type1. Never no-IOMMU.
    #[default]
    Auto,
    /// The container/group interface with the type1 IOMMU driver (type1v2 preferred).
    Type1,
    /// iommufd; an error when the kernel does not offer it.
    Iommufd,
    /// VFIO no-IOMMU: no protection of the host from the device. Only when asked for by name.
    NoIommu,
}

impl fmt::Display for IommuMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IommuMode::Auto => "auto",
            IommuMode::Type1 => "type1",
            IommuMode::Iommufd => "iommufd",
            IommuMode::NoIommu => "noiommu",
        })
    }
}

impl FromStr for IommuMode {
    type Err = VfioError;

    /// `auto`, `type1`, `iommufd` or `noiommu` (also `no-iommu`), any case.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(IommuMode::Auto),
            "type1" => Ok(IommuMode::Type1),
            "iommufd" => Ok(IommuMode::Iommufd),
            "noiommu" | "no-iommu" => Ok(IommuMode::NoIommu),
            _ => Err(VfioError::BadMode {
                input: s.to_string(),
            }),
        }
    }
}

/// The IOMMU arrangement a [`VfioDevice`] ended up with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IommuKind {
    /// Container/group, `VFIO_TYPE1v2_IOMMU`.
    Type1v2,
    /// Container/group, `VFIO_TYPE1_IOMMU` (older kernels).
    Type1,
    /// iommufd IO address space.
    Iommufd,
    /// No IOMMU: physical addresses.
    NoIommu,
}

impl fmt::Display for IommuKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IommuKind::Type1v2 => "type1v2",
            IommuKind::Type1 => "type1",
            IommuKind::Iommufd => "iommufd",
            IommuKind::NoIommu => "no-IOMMU",
        })
    }
}
