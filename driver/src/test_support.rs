//! What unit tests build queues from without a device: DMA regions and pools mapped through an
//! IOMMU with no device behind it, and a backend whose registers go nowhere. Tests write rings
//! as the device would leave them.

use crate::backend::{Backend, BackendError, Interrupt};
use crate::mem::Mempool;
use cxdirect_dma::{DmaRegion, Iommu, IommuError, IovaAllocator, IovaRange, PageKind};
use std::sync::{Arc, OnceLock};

/// An IOMMU with no device behind it: every mapping is accepted.
struct NoDeviceIommu;

// SAFETY: nothing ever reaches the memory it is given (there is no device), so every range is
// unreachable by a device at all times, before and after `unmap`.
unsafe impl Iommu for NoDeviceIommu {
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
        let iommu: Arc<dyn Iommu> = Arc::new(NoDeviceIommu);
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

/// A function whose registers take every store and read as zero: doorbells go nowhere.
pub(crate) struct NoDevice;

impl Backend for NoDevice {
    fn name(&self) -> String {
        "no device".into()
    }
    fn bar0_len(&self) -> usize {
        1 << 20
    }
    fn read32(&self, _offset: usize) -> [u8; 4] {
        [0; 4]
    }
    fn write32(&self, _offset: usize, _bytes: [u8; 4]) {}
    fn write64(&self, _offset: usize, _bytes: [u8; 8]) {}
    fn write_bf(&self, _offset: usize, _wqe: &[u8; 64]) {}
    fn config_read(&self, _offset: u16, buf: &mut [u8]) -> Result<(), BackendError> {
        buf.fill(0);
        Ok(())
    }
    fn config_write(&self, _offset: u16, _data: &[u8]) -> Result<(), BackendError> {
        Ok(())
    }
    fn iommu(&self) -> Arc<dyn Iommu> {
        iommu()
    }
    fn enable_msix(&self, _vectors: u16) -> Result<Vec<Interrupt>, BackendError> {
        Ok(Vec::new())
    }
    fn disable_msix(&self) -> Result<(), BackendError> {
        Ok(())
    }
    fn reset(&self) -> Result<(), BackendError> {
        Ok(())
    }
}
