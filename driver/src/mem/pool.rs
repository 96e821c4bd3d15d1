//! A [`Mempool`]: fixed-size buffers carved from one DMA region and registered as one memory
//! key (MTT). Taking and returning buffers is lock-free and does not allocate.

use super::buffer::{PoolMemory, PoolShared, BULK, HEADROOM, NIL, RING_HOLD};
use super::cache::BufferCache;
use super::flags::OffloadFlags;
use super::mbuf::Mbuf;
use crate::error::DriverError;
use cxdirect_dma::{DmaBufMapping, DmaRegion, Iommu, IovaAllocator, PageKind};
#[cfg(loom)]
use loom::sync::atomic::{AtomicU32, AtomicU64};
use std::sync::atomic::Ordering;
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::sync::Arc;

#[cfg(all(test, loom))]
mod loom_tests;
#[cfg(all(test, not(loom)))]
mod tests;

/// A pool of `count` DMA buffers of `buf_size` bytes.
#[derive(Clone)]
pub struct Mempool {
    shared: Arc<PoolShared>,
}

impl std::fmt::Debug for Mempool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mempool")
            .field("count", &self.shared.count)
            .field("buf_size", &self.shared.buf_size)
            .field("available", &self.available())
            .finish()
    }
}

impl Mempool {
    /// Allocates the pool's memory (hugepages when available). It is registered with a device
    /// (a memory key, [`crate::MemoryKey`]) before queues use it: [`crate::Port::start`] does so.
    pub fn new(
        iommu: Arc<dyn Iommu>,
        iovas: &Arc<IovaAllocator>,
        count: u32,
        buf_size: u32,
    ) -> Result<Self, DriverError> {
        if count == 0 || count == NIL {
            return Err(DriverError::config(
                "count",
                count,
                "give 1..2^32-1 buffers",
            ));
        }
        Self::check_buf_size(buf_size)?;
        let len = count as usize * buf_size as usize;
        let region = DmaRegion::new(iommu, iovas, len, PageKind::Auto)?;
        Ok(Self::carve(PoolMemory::Region(region), count, buf_size))
    }

    /// A pool carved from an imported dmabuf range: as many `buf_size`-byte buffers as fit.
    /// Packet data then lands in (and is sent from) the exporter's memory. Register it with
    /// the device like any pool; CPU access to the packets works only when the mapping is
    /// host-accessible ([`DmaBufMapping::host_accessible`]).
    ///
    /// # Errors
    ///
    /// [`DriverError::Config`] for a buffer size out of range, [`DriverError::BufferTooSmall`]
    /// for a range too small for one buffer.
    pub fn from_dmabuf(mapping: Arc<DmaBufMapping>, buf_size: u32) -> Result<Self, DriverError> {
        Self::check_buf_size(buf_size)?;
        let count = u32::try_from(mapping.len() / buf_size as usize).unwrap_or(NIL - 1);
        if count == 0 {
            return Err(DriverError::BufferTooSmall {
                what: "a pool buffer in the dmabuf range",
                need: buf_size as usize,
                capacity: mapping.len(),
            });
        }
        Ok(Self::carve(PoolMemory::DmaBuf(mapping), count, buf_size))
    }

    fn check_buf_size(buf_size: u32) -> Result<(), DriverError> {
        if !(256..=65536).contains(&buf_size) || buf_size % 64 != 0 {
            return Err(DriverError::config(
                "buf_size",
                buf_size,
                "give a multiple of 64 from 256 to 65536 bytes",
            ));
        }
        Ok(())
    }

    /// A pool of `count` buffers of `buf_size` bytes that several packets share (a striding
    /// receive ring's): each buffer counts its references.
    pub(crate) fn new_shared(
        iommu: Arc<dyn Iommu>,
        iovas: &Arc<IovaAllocator>,
        count: u32,
        buf_size: u32,
    ) -> Result<Self, DriverError> {
        let Self { shared } = Self::new(iommu, iovas, count, buf_size)?;
        let shares = (0..count).map(|_| AtomicU32::new(0)).collect();
        // A pool just made has no other handle, so it is taken apart and made again shared.
        let shared = Arc::try_unwrap(shared).map(|mut pool| {
            pool.shares = Some(shares);
            pool
        });
        match shared {
            Ok(pool) => Ok(Self {
                shared: Arc::new(pool),
            }),
            Err(_) => Err(DriverError::Internal(
                "a new pool was shared before it was returned",
            )),
        }
    }

    fn carve(region: PoolMemory, count: u32, buf_size: u32) -> Self {
        let next: Box<[AtomicU32]> = (0..count)
            .map(|i| AtomicU32::new(if i + 1 < count { i + 1 } else { NIL }))
            .collect();
        Self {
            shared: Arc::new(PoolShared {
                base_iova: region.iova(),
                region,
                buf_size,
                count,
                head: AtomicU64::new(0),
                next,
                available: AtomicU32::new(count),
                lkey: AtomicU32::new(0),
                cache: BufferCache::default(),
                shares: None,
            }),
        }
    }

    /// The dmabuf range the pool lives in, when it was made by [`Mempool::from_dmabuf`].
    pub fn dmabuf(&self) -> Option<&Arc<DmaBufMapping>> {
        self.shared.region.dmabuf()
    }

    /// Buffers free now.
    pub fn available(&self) -> u32 {
        self.shared.available.load(Ordering::Relaxed)
    }

    /// Buffers in the pool.
    pub fn capacity(&self) -> u32 {
        self.shared.count
    }

    /// Bytes per buffer (headroom included).
    pub fn buf_size(&self) -> u32 {
        self.shared.buf_size
    }

    /// Largest packet a buffer holds, in bytes.
    pub fn data_room(&self) -> u32 {
        self.shared.buf_size - u32::from(HEADROOM)
    }

    /// The memory key the pool is registered under (0 before registration).
    pub fn lkey(&self) -> u32 {
        self.shared.lkey.load(Ordering::Relaxed)
    }

    /// Takes a buffer, empty, or `None` when the pool is exhausted.
    pub fn alloc(&self) -> Option<Mbuf> {
        let index = self.shared.pop()?;
        Some(self.wrap(index))
    }

    /// Appends up to `count` fresh buffers to `out`, taking them from the pool in batches of
    /// up to 64 (one atomic exchange each); returns how many it got (fewer when the pool runs
    /// dry).
    pub fn alloc_bulk(&self, out: &mut Vec<Mbuf>, count: usize) -> usize {
        let mut got = 0;
        let mut batch = [0u32; BULK];
        while got < count {
            let want = (count - got).min(BULK);
            let n = self.shared.pop_bulk(&mut batch[..want]);
            out.extend(batch[..n].iter().map(|&index| self.wrap(index)));
            got += n;
            if n < want {
                break;
            }
        }
        got
    }

    /// Takes up to `count` buffers for a receive ring without wrapping them in [`Mbuf`]s: calls
    /// `post` with each buffer's index (in pool order), taking them in batches of up to 64 (one
    /// atomic exchange each); returns how many it handed out. Each index is the caller's until
    /// it goes back through [`Mempool::adopt`] or [`Mempool::give_back`].
    #[inline]
    pub(crate) fn take_each(&self, count: usize, mut post: impl FnMut(u32)) -> usize {
        let mut got = 0;
        let mut batch = [0u32; BULK];
        while got < count {
            let want = (count - got).min(BULK);
            let n = self.shared.pop_bulk(&mut batch[..want]);
            for &index in &batch[..n] {
                post(index);
            }
            got += n;
            if n < want {
                break;
            }
        }
        got
    }

    /// The buffer at `index`, taken by [`Mempool::take_each`], as a received packet of `len`
    /// bytes (at most [`Mempool::data_room`]) with `flags`.
    #[inline]
    pub(crate) fn adopt(&self, index: u32, len: u32, flags: OffloadFlags) -> Mbuf {
        Mbuf::adopt(&self.shared, index, len, flags)
    }

    /// Part of the shared buffer at `index`: see [`Mbuf::adopt_part`].
    #[inline]
    pub(crate) fn adopt_part(
        &self,
        index: u32,
        offset: u32,
        len: u32,
        flags: OffloadFlags,
    ) -> Mbuf {
        Mbuf::adopt_part(&self.shared, index, offset, len, flags)
    }

    /// Returns the buffer at `index`, taken by [`Mempool::take_each`], to the pool unused.
    pub(crate) fn give_back(&self, index: u32) {
        self.shared.push(index);
    }

    /// The buffer at `index`, posted to a receive ring, as an empty [`Mbuf`] whose drop lets
    /// go of the ring's hold on it (a shared buffer then waits for its packets' references).
    pub(crate) fn adopt_posted(&self, index: u32) -> Mbuf {
        if self.shared.shares_buffers() {
            // The ring's hold becomes the one reference the `Mbuf` holds.
            let _ = self.shared.last_reference(index, RING_HOLD - 1);
        }
        self.adopt(index, 0, OffloadFlags::default())
    }

    /// The device address of the pool's first buffer and the bytes from one buffer to the
    /// next: buffer `index` starts at `base + index * stride`.
    #[inline(always)]
    pub(crate) fn buffer_geometry(&self) -> (u64, u64) {
        (self.shared.base_iova, u64::from(self.shared.buf_size))
    }

    /// Device address of the first data byte of the buffer at `index` (after the headroom).
    #[inline]
    pub(crate) fn data_iova(&self, index: u32) -> u64 {
        self.shared.iova(index) + u64::from(HEADROOM)
    }

    #[inline]
    fn wrap(&self, index: u32) -> Mbuf {
        self.shared.set_references(index, 1);
        self.adopt(index, 0, OffloadFlags::default())
    }

    pub(crate) fn shared(&self) -> &PoolShared {
        &self.shared
    }

    /// The pool's shared part, to hold on to.
    pub(crate) fn shared_arc(&self) -> &Arc<PoolShared> {
        &self.shared
    }
}
