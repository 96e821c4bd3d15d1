//! Memory regions: a memory key with remote rights over driver DMA memory, a pool's memory, or
//! an imported dmabuf range, in a protection domain.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::pd::ProtectionDomain;
use super::wr::{RemoteAddr, Sge};
use crate::backend::Backend;
use crate::control::{Device, KeyAccess, MemoryKey};
use crate::error::DriverError;
use crate::mem::Mempool;
use cxdirect_dma::{DmaBufMapping, DmaRegion, PageKind};

/// What a [`MemoryRegion`] is registered over.
pub enum MrSource<'a> {
    /// Driver DMA memory; the region owns it and frees it only after its key is destroyed.
    Region(DmaRegion),
    /// A pool's memory (the whole pool); the region keeps the pool alive.
    Pool(&'a Mempool),
    /// An imported dmabuf range (udmabuf, memfd, GPU); the key keeps the mapping alive.
    DmaBuf(&'a Arc<DmaBufMapping>),
}

/// The memory a region keeps alive while the device may reach it.
enum Backing {
    Region(DmaRegion),
    Pool(Mempool),
    DmaBuf(Arc<DmaBufMapping>),
}

/// A registered memory region (`ibv_mr`): [`MemoryRegion::lkey`] for local gather and scatter
/// lists, [`MemoryRegion::rkey`] and [`MemoryRegion::addr`] for a peer's RDMA.
///
/// Deregistered with [`MemoryRegion::deregister`]: the key is destroyed first, so a peer's
/// later access fails with a remote access error and never reaches the memory, which is freed
/// only then. A region simply dropped keeps its key in the device until
/// [`Device::teardown`], and its memory (which the device may still write) is leaked, never
/// freed.
pub struct MemoryRegion {
    key: Option<MemoryKey>,
    backing: Option<Backing>,
    pdn: u32,
    /// True while the key is registered: the handle a prepared request holds
    /// ([`super::PreparedSend`]), cleared before the key is destroyed or the region dropped.
    live: Arc<AtomicBool>,
}

impl std::fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("lkey", &self.lkey())
            .field("addr", &self.addr())
            .field("len", &self.len())
            .field("pdn", &self.pdn)
            .finish()
    }
}

impl MemoryRegion {
    /// Registers `source` in `pd` with `access` (CREATE_MKEY in MTT mode).
    ///
    /// # Errors
    ///
    /// [`DriverError::Config`] for remote write or atomic without local write (as
    /// `ibv_reg_mr` refuses), or memory the device's keys cannot cover;
    /// [`DriverError::DmaBuf`] for a revoked mapping; [`DriverError::Command`] when the device
    /// refuses.
    pub fn register<B: Backend>(
        dev: &mut Device<B>,
        pd: &ProtectionDomain,
        source: MrSource<'_>,
        access: KeyAccess,
    ) -> Result<Self, DriverError> {
        let pdn = Some(pd.pdn());
        let (key, backing) = match source {
            MrSource::Region(region) => {
                let key = MemoryKey::register_pages_in(dev, &region.pages(), access, pdn)?;
                (key, Backing::Region(region))
            }
            MrSource::Pool(pool) => {
                let key = match pool.dmabuf() {
                    Some(mapping) => MemoryKey::register_in(dev, mapping, access, pdn)?,
                    None => MemoryKey::register_pages_in(
                        dev,
                        &pool.shared().memory().pages(),
                        access,
                        pdn,
                    )?,
                };
                (key, Backing::Pool(pool.clone()))
            }
            MrSource::DmaBuf(mapping) => {
                let key = MemoryKey::register_in(dev, mapping, access, pdn)?;
                (key, Backing::DmaBuf(Arc::clone(mapping)))
            }
        };
        Ok(Self {
            key: Some(key),
            backing: Some(backing),
            pdn: pd.pdn(),
            live: Arc::new(AtomicBool::new(true)),
        })
    }

    /// Allocates `len` bytes of zeroed DMA memory for `dev` and registers them.
    ///
    /// # Errors
    ///
    /// As [`MemoryRegion::register`], and [`DriverError::Dma`] when the memory cannot be had.
    pub fn alloc<B: Backend>(
        dev: &mut Device<B>,
        pd: &ProtectionDomain,
        len: usize,
        access: KeyAccess,
    ) -> Result<Self, DriverError> {
        let (iommu, iovas) = dev.dma();
        let region = DmaRegion::new(iommu, &iovas, len.max(1), PageKind::Auto)?;
        Self::register(dev, pd, MrSource::Region(region), access)
    }

    fn key(&self) -> &MemoryKey {
        self.key
            .as_ref()
            .expect("a region has its key until deregistered")
    }

    /// The local key (gather and scatter lists).
    pub fn lkey(&self) -> u32 {
        self.key().lkey()
    }

    /// The remote key a peer names (mlx5 uses one key for both).
    pub fn rkey(&self) -> u32 {
        self.key().lkey()
    }

    /// Device address (IOVA) of the region's first byte: what a peer's RDMA names, and what
    /// gather lists start from.
    pub fn addr(&self) -> u64 {
        self.key().start()
    }

    /// Bytes the region covers (whole pages of the source).
    pub fn len(&self) -> u64 {
        self.key().len()
    }

    /// Never true: registration refuses empty memory.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The rights the region grants.
    pub fn access(&self) -> KeyAccess {
        self.key().access()
    }

    /// The region's liveness handle, while it is registered.
    pub(super) fn handle(&self) -> Option<Arc<AtomicBool>> {
        self.live
            .load(Ordering::Relaxed)
            .then(|| Arc::clone(&self.live))
    }

    /// The region's protection domain number.
    pub fn pdn(&self) -> u32 {
        self.pdn
    }

    /// A gather or scatter entry for bytes `offset..offset + length` of the region.
    pub fn sge(&self, offset: u64, length: u32) -> Sge {
        Sge {
            addr: self.addr() + offset,
            length,
            lkey: self.lkey(),
        }
    }

    /// What a peer needs to reach byte `offset` of the region.
    pub fn remote(&self, offset: u64) -> RemoteAddr {
        RemoteAddr {
            addr: self.addr() + offset,
            rkey: self.rkey(),
        }
    }

    /// The driver DMA memory behind the region ([`MrSource::Region`] and
    /// [`MemoryRegion::alloc`] only).
    pub fn region(&self) -> Option<&DmaRegion> {
        match &self.backing {
            Some(Backing::Region(r)) => Some(r),
            _ => None,
        }
    }

    /// Copies `data` into the region at `offset` (driver memory or a host-accessible dmabuf).
    ///
    /// # Errors
    ///
    /// [`DriverError::Dma`] / [`DriverError::DmaBuf`] out of range or for memory the host
    /// cannot reach; [`DriverError::Unsupported`] for a pool region (use the pool's buffers).
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), DriverError> {
        match &self.backing {
            Some(Backing::Region(r)) => Ok(r.write(offset, data)?),
            Some(Backing::DmaBuf(m)) => Ok(m.write(offset, data)?),
            _ => Err(Self::no_host_access()),
        }
    }

    /// Copies bytes of the region at `offset` into `out`.
    ///
    /// # Errors
    ///
    /// As [`MemoryRegion::write`].
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), DriverError> {
        match &self.backing {
            Some(Backing::Region(r)) => Ok(r.read(offset, out)?),
            Some(Backing::DmaBuf(m)) => Ok(m.read(offset, out)?),
            _ => Err(Self::no_host_access()),
        }
    }

    fn no_host_access() -> DriverError {
        DriverError::Unsupported {
            what: "reading or writing a pool's region through the region",
            why: "a pool's memory is reached through its buffers",
        }
    }

    /// Destroys the key, then lets go of the memory. A peer's access through the key fails
    /// from then on.
    ///
    /// # Errors
    ///
    /// [`DriverError::Command`] when DESTROY_MKEY fails: the key stays in the device until
    /// teardown, so its memory is leaked rather than freed under it.
    pub fn deregister<B: Backend>(mut self, dev: &mut Device<B>) -> Result<(), DriverError> {
        // Prepared requests over the region are refused from now on.
        self.live.store(false, Ordering::Relaxed);
        let key = self
            .key
            .take()
            .expect("a region has its key until deregistered");
        let result = key.deregister(dev);
        if result.is_err() {
            self.leak();
        }
        self.backing = None;
        result
    }

    fn leak(&mut self) {
        match self.backing.take() {
            Some(Backing::Region(r)) => r.leak(),
            Some(Backing::Pool(p)) => std::mem::forget(p),
            Some(Backing::DmaBuf(m)) => std::mem::forget(m),
            None => {}
        }
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        self.live.store(false, Ordering::Relaxed);
        if self.key.is_some() {
            // The device may still translate through the key: never free what it reaches.
            self.leak();
        }
    }
}
