//! DMA memory for cxdirect: page- and hugepage-backed regions locked in memory, IOVA
//! allocation, and the [`Iommu`] seam through which a backend (VFIO type1, iommufd, no-IOMMU, or
//! the in-process device model) makes regions reachable by the device.
//!
//! This crate is one of the few rooms allowed `unsafe`: it owns raw host memory that the device
//! reads and writes concurrently. Nothing here hands out references into that memory; access is
//! through copies and volatile loads and stores on [`DmaRegion`].

pub mod cuda;
pub mod dmabuf;
pub mod export;
pub mod iommu;
pub mod iova;
pub mod region;

pub use dmabuf::{DmaBuf, DmaBufError, DmaBufKind, DmaBufMapping, DmaBufMode, PageList};
pub use iommu::{Iommu, IommuError, IovaRange};
pub use iova::{IovaAllocator, IovaError, IOVA_LOW_RESERVED, IOVA_PAGE};
pub use region::{live_regions, DmaError, DmaRegion, PageKind, HUGE_PAGE_SIZE};
