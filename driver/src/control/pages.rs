//! Firmware pages, driver side: 4 KiB pages lent to the device, carved from 2 MiB DMA chunks,
//! tracked one by one so that a page the device hands back is checked against what it was given.

use crate::error::DriverError;
use cxdirect_dma::{DmaRegion, Iommu, IovaAllocator, PageKind};
use std::collections::HashMap;
use std::sync::Arc;

/// Size of a firmware page in bytes.
pub const FW_PAGE: usize = 4096;
/// Pages per DMA chunk (2 MiB).
const CHUNK_PAGES: usize = 512;

struct Chunk {
    region: DmaRegion,
    free: Vec<bool>,
    used: usize,
}

/// Pages given to the device, and the memory behind them.
pub(crate) struct FwPages {
    iommu: Arc<dyn Iommu>,
    iovas: Arc<IovaAllocator>,
    chunks: Vec<Option<Chunk>>,
    given: HashMap<u64, (usize, usize)>,
}

impl FwPages {
    pub fn new(iommu: Arc<dyn Iommu>, iovas: Arc<IovaAllocator>) -> Self {
        Self {
            iommu,
            iovas,
            chunks: Vec::new(),
            given: HashMap::new(),
        }
    }

    /// Pages the device holds now.
    pub fn held(&self) -> usize {
        self.given.len()
    }

    /// Takes `count` free pages (allocating chunks as needed) and records them as given; returns
    /// their IOVAs. On failure nothing is recorded.
    pub fn alloc(&mut self, count: usize) -> Result<Vec<u64>, DriverError> {
        let mut out = Vec::with_capacity(count);
        while out.len() < count {
            let slot = self
                .chunks
                .iter()
                .position(|c| c.as_ref().is_some_and(|c| c.used < CHUNK_PAGES));
            let index = match slot {
                Some(i) => i,
                None => {
                    let region = match DmaRegion::new(
                        self.iommu.clone(),
                        &self.iovas,
                        CHUNK_PAGES * FW_PAGE,
                        PageKind::Auto,
                    ) {
                        Ok(r) => r,
                        Err(e) => {
                            self.release(&out);
                            return Err(e.into());
                        }
                    };
                    let chunk = Chunk {
                        region,
                        free: vec![true; CHUNK_PAGES],
                        used: 0,
                    };
                    match self.chunks.iter().position(Option::is_none) {
                        Some(i) => {
                            self.chunks[i] = Some(chunk);
                            i
                        }
                        None => {
                            self.chunks.push(Some(chunk));
                            self.chunks.len() - 1
                        }
                    }
                }
            };
            let Some(chunk) = self.chunks[index].as_mut() else {
                continue;
            };
            for page in 0..CHUNK_PAGES {
                if out.len() == count {
                    break;
                }
                if chunk.free[page] {
                    chunk.free[page] = false;
                    chunk.used += 1;
                    let iova = chunk.region.iova() + (page * FW_PAGE) as u64;
                    self.given.insert(iova, (index, page));
                    out.push(iova);
                }
            }
        }
        Ok(out)
    }

    /// Marks pages as back from the device (or never delivered). Unknown addresses are refused
    /// before anything changes: a device handing back a page it was never given is lying.
    pub fn release(&mut self, pages: &[u64]) {
        for iova in pages {
            if let Some((index, page)) = self.given.remove(iova) {
                if let Some(chunk) = self.chunks[index].as_mut() {
                    chunk.free[page] = true;
                    chunk.used -= 1;
                    if chunk.used == 0 {
                        // Unmapped and freed on drop; the device no longer owns any of it.
                        self.chunks[index] = None;
                    }
                }
            }
        }
    }

    /// Gives up every chunk for good, unmapped never: for when the device may still hold pages
    /// and no function reset could take them back.
    pub fn leak(&mut self) {
        self.given.clear();
        for chunk in self.chunks.drain(..).flatten() {
            chunk.region.leak();
        }
    }

    /// Checks that every address was given and is not repeated.
    pub fn check_returned(&self, pages: &[u64]) -> Result<(), DriverError> {
        let mut seen = std::collections::HashSet::with_capacity(pages.len());
        for &iova in pages {
            if !self.given.contains_key(&iova) || !seen.insert(iova) {
                return Err(DriverError::BadDeviceValue {
                    what: "returned firmware page",
                    value: iova,
                });
            }
        }
        Ok(())
    }
}
