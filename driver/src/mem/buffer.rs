//! Packet buffers: the shared state of a [`super::Mempool`], from which each [`super::Mbuf`] takes its
//! buffer and to which it returns it when dropped. Taking and returning buffers is lock-free
//! and does not allocate.
//!
//! Buffer memory is device-visible, so an `Mbuf` never hands out a reference to it: data goes in
//! and out by copy (volatile accesses underneath).

use super::cache::{BufferCache, Fill};
use crate::error::DriverError;
use cxdirect_dma::{DmaBufMapping, DmaRegion, PageList};
// The free stack's atomics are loom's when model-checked (`--cfg loom`; see the pool's tests).
#[cfg(loom)]
use loom::sync::atomic::{AtomicU32, AtomicU64};
use std::sync::atomic::Ordering;
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::sync::Arc;

/// Headroom kept before packet data in every buffer, in bytes (room to prepend headers).
pub const HEADROOM: u16 = 128;
pub(super) const NIL: u32 = u32::MAX;
/// Most buffers taken from the shared stack in one exchange.
pub(super) const BULK: usize = 64;

/// Where a pool's buffers live: memory the driver allocated, or an imported dmabuf range.
pub(crate) enum PoolMemory {
    Region(DmaRegion),
    DmaBuf(Arc<DmaBufMapping>),
}

impl PoolMemory {
    #[inline]
    pub(super) fn iova(&self) -> u64 {
        match self {
            PoolMemory::Region(r) => r.iova(),
            PoolMemory::DmaBuf(m) => m.iova(),
        }
    }

    #[inline]
    fn read(&self, offset: usize, buf: &mut [u8]) -> Result<(), DriverError> {
        match self {
            PoolMemory::Region(r) => Ok(r.read(offset, buf)?),
            PoolMemory::DmaBuf(m) => Ok(m.read(offset, buf)?),
        }
    }

    #[inline]
    pub(super) fn write(&self, offset: usize, data: &[u8]) -> Result<(), DriverError> {
        match self {
            PoolMemory::Region(r) => Ok(r.write(offset, data)?),
            PoolMemory::DmaBuf(m) => Ok(m.write(offset, data)?),
        }
    }

    /// `N` words at `offset` (8-byte aligned), as the bytes sit in memory. Inlined: a send
    /// reads a packet's first words through it, and a call costs more than the read.
    #[inline(always)]
    fn read_words<const N: usize>(&self, offset: usize) -> Option<[u64; N]> {
        match self {
            PoolMemory::Region(r) => r.read_words(offset).ok(),
            PoolMemory::DmaBuf(m) => Self::dmabuf_words(m, offset),
        }
    }

    /// [`PoolMemory::read_words`] from a dmabuf range, out of line: its error type is large,
    /// and handling it inline would cost the driver-memory path a stack frame.
    #[inline(never)]
    fn dmabuf_words<const N: usize>(m: &DmaBufMapping, offset: usize) -> Option<[u64; N]> {
        m.read_words(offset).ok()
    }

    /// The region, for memory the driver allocated; `None` for a dmabuf range.
    #[inline(always)]
    pub(crate) fn region(&self) -> Option<&DmaRegion> {
        match self {
            PoolMemory::Region(r) => Some(r),
            PoolMemory::DmaBuf(_) => None,
        }
    }

    /// The trimmed page list a memory key over the pool is programmed with.
    pub(crate) fn pages(&self) -> PageList {
        match self {
            PoolMemory::Region(r) => r.pages(),
            PoolMemory::DmaBuf(m) => m.pages(),
        }
    }

    pub(crate) fn dmabuf(&self) -> Option<&Arc<DmaBufMapping>> {
        match self {
            PoolMemory::Region(_) => None,
            PoolMemory::DmaBuf(m) => Some(m),
        }
    }

    /// CPU address of byte `offset` of driver-allocated memory; `None` for a dmabuf range
    /// (which the CPU may not map at all: device memory, another device's BAR).
    #[inline]
    pub(super) fn cpu_address(&self, offset: usize) -> Option<std::ptr::NonNull<u8>> {
        match self {
            // Address arithmetic only: nothing is read or written here.
            PoolMemory::Region(r) => std::ptr::NonNull::new(r.as_ptr().wrapping_add(offset)),
            PoolMemory::DmaBuf(_) => None,
        }
    }
}

/// Buffers of one pool on their way back to it, linked through the pool's `next` so they
/// return together ([`PoolShared::push_chain`]).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct BufferChain {
    /// The index the pool will give out first.
    first: u32,
    /// The index the pool's current stack goes on after.
    last: u32,
    /// Buffers in the chain (0: empty, `first` and `last` mean nothing).
    count: u32,
}

impl BufferChain {
    /// Links `index` in front of the chain through `links`, the free-stack links of the pool
    /// the chain belongs to (from [`PoolShared::owned_links`]): [`PoolShared::link_owned`]
    /// with the pool looked up once for many buffers.
    #[inline(always)]
    pub(crate) fn link_in(&mut self, links: &[AtomicU32], index: u32) {
        links[index as usize].store(self.first, Ordering::Relaxed);
        if self.count == 0 {
            self.last = index;
        }
        self.first = index;
        self.count += 1;
    }

    fn one(index: u32) -> Self {
        Self {
            first: index,
            last: index,
            count: 1,
        }
    }
}

pub(crate) struct PoolShared {
    pub(super) region: PoolMemory,
    /// The device address of the pool's first byte (the region's, fixed for its life), kept
    /// here so the fast path computes a buffer's address without asking the region's kind.
    pub(super) base_iova: u64,
    pub(super) buf_size: u32,
    pub(super) count: u32,
    /// Treiber stack of free buffer indexes: tag in the high 32 bits against ABA.
    pub(super) head: AtomicU64,
    pub(super) next: Box<[AtomicU32]>,
    pub(super) available: AtomicU32,
    pub(super) lkey: AtomicU32,
    /// Free buffers one send queue's completions put for receive refills to take first: see
    /// [`BufferCache`]. Counted in `available`.
    pub(super) cache: BufferCache,
    /// Buffers several packets share (a striding receive ring's): the references to each.
    /// A buffer goes back on the stack when its last reference goes. `None`: each buffer has
    /// one owner.
    pub(super) shares: Option<Box<[AtomicU32]>>,
}

/// The references a striding receive ring holds on a posted buffer: more than the packets one
/// WQE can carry (at most 65,536), so the count cannot reach zero while the ring holds it.
pub(crate) const RING_HOLD: u32 = 1 << 24;

impl PoolShared {
    pub(super) fn pop(&self) -> Option<u32> {
        let mut one = [NIL];
        (self.pop_bulk(&mut one) == 1).then_some(one[0])
    }

    /// The pool's buffer cache: a send queue claims it and fills it from its completions.
    #[inline(always)]
    pub(crate) fn cache(&self) -> &BufferCache {
        &self.cache
    }

    /// Takes up to `out.len()` indexes: from the cache first (one compare-and-swap), then
    /// from the free stack for what the cache did not hold.
    #[inline]
    pub(super) fn pop_bulk(&self, out: &mut [u32]) -> usize {
        let cached = self.cache.take(out);
        if cached > 0 {
            self.available.fetch_sub(cached as u32, Ordering::Relaxed);
            if cached == out.len() {
                return cached;
            }
        }
        cached + self.pop_stack(&mut out[cached..])
    }

    /// Publishes the buffers a send queue's completion put in the cache ([`Fill`]): takers
    /// see them, and they count as available.
    #[inline]
    pub(crate) fn publish_fill(&self, fill: Fill) {
        if fill.put_count() > 0 {
            // Counted before takers can see them (see `push_chain`).
            self.available
                .fetch_add(fill.put_count(), Ordering::Relaxed);
            self.cache.publish(fill);
        }
    }

    /// Takes up to `out.len()` indexes off the free stack with one compare-and-swap: the tag
    /// on the head proves that no other thread popped or pushed between reading the chain and
    /// taking it.
    #[inline(never)]
    fn pop_stack(&self, out: &mut [u32]) -> usize {
        let mut head = self.head.load(Ordering::Acquire);
        loop {
            let mut taken = 0;
            let mut index = head as u32;
            while taken < out.len() && index != NIL {
                out[taken] = index;
                taken += 1;
                index = self.next[index as usize].load(Ordering::Relaxed);
            }
            if taken == 0 {
                return 0;
            }
            let tag = (head >> 32).wrapping_add(1);
            match self.head.compare_exchange_weak(
                head,
                tag << 32 | u64::from(index),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    self.available.fetch_sub(taken as u32, Ordering::Relaxed);
                    return taken;
                }
                Err(seen) => head = seen,
            }
        }
    }

    #[inline]
    pub(super) fn push(&self, index: u32) {
        self.push_chain(BufferChain::one(index));
    }

    /// Lets go of `refs` references to the buffer at `index`; true when they were the last
    /// (always, in a pool whose buffers are not shared).
    #[inline(always)]
    pub(super) fn last_reference(&self, index: u32, refs: u32) -> bool {
        match &self.shares {
            None => true,
            Some(shares) => shares[index as usize].fetch_sub(refs, Ordering::AcqRel) == refs,
        }
    }

    /// Lets go of `refs` references to the buffer at `index`, returning it to the pool with
    /// the last.
    #[inline]
    pub(crate) fn release(&self, index: u32, refs: u32) {
        if self.shares.is_none() {
            self.push(index);
        } else {
            self.release_shared(index, refs);
        }
    }

    /// [`PoolShared::release`] in a pool whose buffers are shared. Out of line: it keeps an
    /// `Mbuf`'s drop, and the plain pools' path, small.
    #[inline(never)]
    pub(super) fn release_shared(&self, index: u32, refs: u32) {
        if self.last_reference(index, refs) {
            self.push(index);
        }
    }

    /// Lets go of one reference to the buffer at `index` of a pool whose buffers are shared;
    /// true when it was the last. Out of line, as [`PoolShared::release_shared`].
    #[inline(never)]
    pub(super) fn last_shared_reference(&self, index: u32) -> bool {
        self.last_reference(index, 1)
    }

    /// Sets the references to the buffer at `index`, just taken off the stack (only this
    /// caller holds it), to `refs`. Nothing to do in a pool whose buffers are not shared.
    #[inline]
    pub(crate) fn set_references(&self, index: u32, refs: u32) {
        if let Some(shares) = &self.shares {
            shares[index as usize].store(refs, Ordering::Relaxed);
        }
    }

    /// Adds `refs` references to the buffer at `index`, which the caller holds one of.
    #[inline]
    pub(crate) fn add_references(&self, index: u32, refs: u32) {
        if let Some(shares) = &self.shares {
            shares[index as usize].fetch_add(refs, Ordering::Relaxed);
        }
    }

    /// True when several packets may share one buffer (a striding receive ring's pool).
    #[inline]
    pub(crate) fn shares_buffers(&self) -> bool {
        self.shares.is_some()
    }

    /// Links `index` in front of `chain` (both taken off this pool, the chain not yet
    /// returned): the pool's stack will give `index` out before the chain's others.
    #[inline]
    pub(crate) fn link(&self, chain: &mut BufferChain, index: u32) {
        // A shared buffer joins the chain only with its last reference.
        if self.shares.is_some() && !self.last_shared_reference(index) {
            return;
        }
        if chain.count == 0 {
            *chain = BufferChain::one(index);
            return;
        }
        self.next[index as usize].store(chain.first, Ordering::Relaxed);
        chain.first = index;
        chain.count += 1;
    }

    /// The free-stack links a caller returning many buffers in a row links them through
    /// ([`BufferChain::link_in`]); `None` for a pool whose buffers are shared (each then goes
    /// through [`PoolShared::link`], which looks at its references).
    #[inline(always)]
    pub(crate) fn owned_links(&self) -> Option<&[AtomicU32]> {
        self.shares.is_none().then_some(&self.next[..])
    }

    /// [`PoolShared::link`] for a pool whose buffers are not shared (the caller asked
    /// [`PoolShared::shares_buffers`] once for all the buffers it links): no reference count to
    /// look at, and no test for an empty chain (the first buffer's `next` is written again when
    /// the chain is returned).
    #[inline(always)]
    pub(crate) fn link_owned(&self, chain: &mut BufferChain, index: u32) {
        debug_assert!(self.shares.is_none());
        self.next[index as usize].store(chain.first, Ordering::Relaxed);
        if chain.count == 0 {
            chain.last = index;
        }
        chain.first = index;
        chain.count += 1;
    }

    /// Returns every buffer of `chain` (linked by [`PoolShared::link`]) with one
    /// compare-and-swap. Out of line: it keeps an `Mbuf`'s drop small.
    #[inline(never)]
    pub(crate) fn push_chain(&self, chain: BufferChain) {
        if chain.count == 0 {
            return;
        }
        // Counted before another thread can take them: a taker subtracts what it took after
        // taking it, so were they counted after the exchange, a taker between the two would
        // drive the count below zero (it wraps, and `available` reads about 2^32). Counted
        // first, the count stays within 0..=count (it may include buffers on their way in or
        // just taken).
        self.available.fetch_add(chain.count, Ordering::Relaxed);
        let mut head = self.head.load(Ordering::Acquire);
        loop {
            self.next[chain.last as usize].store(head as u32, Ordering::Relaxed);
            let tag = (head >> 32).wrapping_add(1);
            match self.head.compare_exchange_weak(
                head,
                tag << 32 | u64::from(chain.first),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return,
                Err(seen) => head = seen,
            }
        }
    }

    #[inline]
    pub(crate) fn offset(&self, index: u32) -> usize {
        index as usize * self.buf_size as usize
    }

    /// Bytes of the buffer at `data_off` (within it) on: room for a packet starting there.
    #[inline]
    pub(crate) fn readable(&self, data_off: u32) -> usize {
        (self.buf_size - data_off) as usize
    }

    /// The first `N * 8` bytes of buffer `index` from byte `data_off` on, as `N` words in
    /// memory order: see [`super::Mbuf::head_words`].
    #[inline(always)]
    pub(crate) fn head_words<const N: usize>(&self, index: u32, data_off: u32) -> Option<[u64; N]> {
        if N * 8 > self.readable(data_off) {
            return None;
        }
        self.region
            .read_words(self.offset(index) + data_off as usize)
    }

    /// Copies bytes of the `len`-byte packet at `data_off` in buffer `index`, from `offset`
    /// on, into `out`; returns how many were copied (0 past the packet's end).
    #[inline]
    pub(crate) fn read_packet(
        &self,
        index: u32,
        data_off: u32,
        len: u32,
        offset: usize,
        out: &mut [u8],
    ) -> usize {
        let n = out.len().min((len as usize).saturating_sub(offset));
        let at = self.offset(index) + data_off as usize + offset;
        if n > 0 && self.region.read(at, &mut out[..n]).is_err() {
            return 0;
        }
        n
    }

    /// Overwrites bytes of the `len`-byte packet at `data_off` in buffer `index`, at `offset`
    /// (the write must end within the packet).
    pub(crate) fn write_packet(
        &self,
        index: u32,
        data_off: u32,
        len: u32,
        offset: usize,
        data: &[u8],
    ) -> Result<(), DriverError> {
        if offset
            .checked_add(data.len())
            .is_none_or(|end| end > len as usize)
        {
            return Err(DriverError::BufferTooSmall {
                what: "a write into the packet (its offset plus its length)",
                need: offset.saturating_add(data.len()),
                capacity: len as usize,
            });
        }
        self.region
            .write(self.offset(index) + data_off as usize + offset, data)
    }

    /// Device address of byte `data_off` of buffer `index`.
    #[inline]
    pub(crate) fn data_iova(&self, index: u32, data_off: u32) -> u64 {
        self.iova(index) + u64::from(data_off)
    }

    /// Records the memory key the pool was registered under (read by every send).
    pub(crate) fn set_lkey(&self, lkey: u32) {
        self.lkey.store(lkey, Ordering::Relaxed);
    }

    /// The memory key the pool is registered under (0 before registration).
    #[inline]
    pub(crate) fn lkey(&self) -> u32 {
        self.lkey.load(Ordering::Relaxed)
    }

    #[inline]
    pub(crate) fn iova(&self, index: u32) -> u64 {
        self.base_iova + self.offset(index) as u64
    }

    /// The device address of the pool's first byte.
    #[inline(always)]
    pub(crate) fn base_iova(&self) -> u64 {
        self.base_iova
    }

    /// Bytes per buffer.
    #[inline(always)]
    pub(crate) fn buf_size(&self) -> u32 {
        self.buf_size
    }

    pub(crate) fn memory(&self) -> &PoolMemory {
        &self.region
    }
}
