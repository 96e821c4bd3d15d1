//! DMA memory for unit tests: regions mapped through an IOMMU with no device behind it, so
//! rings and pools can be built and written as the device would leave them.

use crate::mem::Mempool;
use cxdirect_dma::{DmaRegion, Iommu, IommuError, IovaAllocator, IovaRange, PageKind};
use std::sync::{Arc, OnceLock};

/// An IOMMU with no device behind it: every mapping is accepted.
struct NoDevice;

// SAFETY: nothing ever reaches the memory it is given (there is no device), so every range is
// unreachable by a device at all times, before and after `unmap`.
unsafe impl Iommu for NoDevice {
    fn iova_ranges(&self) -> Vec<IovaRange> {
        vec![IovaRange {
            start: 0,
            end: (1 << 40) - 1,
        }]
    }

    unsafe fn map(&self, _iova: u64, _host: *mut u8, _len: usize) -> Result<(), IommuError> {
        Ok(())
    }

    fn unmap(&self, _iova: u64, _len: usize) -> Result<(), IommuError> {
        Ok(())
    }
}

/// The IOMMU and IOVA space every test region shares.
fn space() -> &'static (Arc<dyn Iommu>, Arc<IovaAllocator>) {
    static SPACE: OnceLock<(Arc<dyn Iommu>, Arc<IovaAllocator>)> = OnceLock::new();
    SPACE.get_or_init(|| {
        let iommu: Arc<dyn Iommu> = Arc::new(NoDevice);
        let iovas = IovaAllocator::from_iommu(iommu.as_ref()).expect("IOVA space");
        (iommu, Arc::new(iovas))
    })
}

/// The IOMMU test regions are mapped through (no device behind it).
pub(crate) fn iommu() -> Arc<dyn Iommu> {
    Arc::clone(&space().0)
}

/// A zeroed region of at least `len` bytes in small pages (kept small: it is locked memory).
pub(crate) fn region(len: usize) -> DmaRegion {
    let (iommu, iovas) = space();
    DmaRegion::new(Arc::clone(iommu), iovas, len, PageKind::Small).expect("test DMA region")
}

/// A pool of `count` buffers of `buf_size` bytes.
pub(crate) fn pool(count: u32, buf_size: u32) -> Mempool {
    let (iommu, iovas) = space();
    Mempool::new(Arc::clone(iommu), iovas, count, buf_size).expect("test pool")
}
