//! cxdirect: a userspace, poll-mode driver for NVIDIA ConnectX (mlx5) NICs reached through VFIO.
//!
//! The driver reaches a device through one seam, [`Backend`]: VFIO (type1, iommufd or
//! no-IOMMU) on real hardware, or the in-process device model in tests and emulated specs.

pub mod backend;
pub mod vfio;

pub use backend::{Backend, BackendError, Interrupt};
