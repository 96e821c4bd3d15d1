//! DMA memory for cxdirect: page- and hugepage-backed regions locked in memory, IOVA allocation,
//! the `Iommu` seam through which regions are mapped for the device, buffer pools, and dmabuf
//! import into scatter lists.
//!
//! Nothing is implemented here yet; the driver bring-up work fills this crate.
