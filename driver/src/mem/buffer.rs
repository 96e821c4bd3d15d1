//! Packet buffers: the shared state of a [`super::Mempool`], and the [`Mbuf`] that carries a
//! packet and returns its buffer to the pool when dropped. Taking and returning buffers is
//! lock-free and does not allocate.
//!
//! Buffer memory is device-visible, so an `Mbuf` never hands out a reference to it: data goes in
//! and out by copy (volatile accesses underneath).

use super::flags::OffloadFlags;
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
    fn write(&self, offset: usize, data: &[u8]) -> Result<(), DriverError> {
        match self {
            PoolMemory::Region(r) => Ok(r.write(offset, data)?),
            PoolMemory::DmaBuf(m) => Ok(m.write(offset, data)?),
        }
    }

    /// `N` words at `offset` (8-byte aligned), as the bytes sit in memory.
    #[inline]
    fn read_words<const N: usize>(&self, offset: usize) -> Option<[u64; N]> {
        match self {
            PoolMemory::Region(r) => r.read_words(offset).ok(),
            PoolMemory::DmaBuf(m) => m.read_words(offset).ok(),
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
    fn cpu_address(&self, offset: usize) -> Option<std::ptr::NonNull<u8>> {
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

    /// Takes up to `out.len()` indexes with one compare-and-swap: the tag on the head proves
    /// that no other thread popped or pushed between reading the chain and taking it.
    pub(super) fn pop_bulk(&self, out: &mut [u32]) -> usize {
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

    /// Returns every buffer of `chain` (linked by [`PoolShared::link`]) with one
    /// compare-and-swap. Out of line: it keeps an `Mbuf`'s drop small.
    #[inline(never)]
    pub(crate) fn push_chain(&self, chain: BufferChain) {
        if chain.count == 0 {
            return;
        }
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
                Ok(_) => {
                    self.available.fetch_add(chain.count, Ordering::Relaxed);
                    return;
                }
                Err(seen) => head = seen,
            }
        }
    }

    /// The buffer at `index`, taken off this pool and not returned, as a packet of `len` bytes
    /// (at most the data room) with `flags`; dropping it returns the buffer.
    #[inline]
    pub(crate) fn adopt(self: &Arc<Self>, index: u32, len: u32, flags: OffloadFlags) -> Mbuf {
        Mbuf {
            pool: Arc::clone(self),
            index,
            data_off: u32::from(HEADROOM),
            len,
            next: None,
            flags,
        }
    }

    /// Part of the shared buffer at `index` (one reference of it, taken by the caller), from
    /// byte `offset` on, as a packet of `len` bytes with `flags`.
    #[inline]
    pub(crate) fn adopt_part(
        self: &Arc<Self>,
        index: u32,
        offset: u32,
        len: u32,
        flags: OffloadFlags,
    ) -> Mbuf {
        Mbuf {
            pool: Arc::clone(self),
            index,
            data_off: offset,
            len,
            next: None,
            flags,
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
    /// memory order: see [`Mbuf::head_words`].
    #[inline]
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

    pub(crate) fn memory(&self) -> &PoolMemory {
        &self.region
    }
}

/// A packet in a pool buffer. Returns the buffer to its pool when dropped.
pub struct Mbuf {
    pool: Arc<PoolShared>,
    index: u32,
    data_off: u32,
    len: u32,
    /// The rest of a multi-segment packet.
    next: Option<Box<Mbuf>>,
    /// Offload requests (send) and results (receive).
    pub flags: OffloadFlags,
}

impl std::fmt::Debug for Mbuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mbuf")
            .field("index", &self.index)
            .field("len", &self.len)
            .field("flags", &self.flags)
            .finish()
    }
}

impl Mbuf {
    /// Bytes in this segment (the whole packet unless segments are chained).
    #[inline]
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// True when this segment is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes in the whole packet: this segment and every chained one.
    #[inline]
    pub fn pkt_len(&self) -> usize {
        if self.next.is_none() {
            return self.len();
        }
        self.segments().map(Mbuf::len).sum()
    }

    /// Appends `tail` (with its own chain) after the last segment of this packet. Sending
    /// gathers the segments in order, one data segment each.
    pub fn chain(&mut self, tail: Mbuf) {
        match self.next.as_mut() {
            Some(next) => next.chain(tail),
            None => self.next = Some(Box::new(tail)),
        }
    }

    /// This segment and the chained ones, in order.
    pub fn segments(&self) -> impl Iterator<Item = &Mbuf> {
        std::iter::successors(Some(self), |m| m.next.as_deref())
    }

    /// The segment after this one, when chained.
    #[inline]
    pub(crate) fn next_segment(&self) -> Option<&Mbuf> {
        self.next.as_deref()
    }

    /// True when further segments follow this one.
    #[inline]
    pub fn is_chained(&self) -> bool {
        self.next.is_some()
    }

    /// Number of segments.
    pub fn segment_count(&self) -> usize {
        self.segments().count()
    }

    /// Largest packet this buffer holds. A packet received into a buffer it shares with
    /// others (a striding receive ring's) may shrink but not grow past its received length.
    #[inline]
    pub fn capacity(&self) -> usize {
        if self.pool.shares_buffers() {
            return self.len as usize;
        }
        self.readable()
    }

    /// Bytes of the buffer from the packet's first byte to its end.
    #[inline]
    fn readable(&self) -> usize {
        self.pool.readable(self.data_off)
    }

    /// Offset of the packet's first byte in its buffer.
    #[inline]
    pub(crate) fn data_off(&self) -> u32 {
        self.data_off
    }

    #[inline]
    fn data_offset(&self) -> usize {
        self.pool.offset(self.index) + self.data_off as usize
    }

    /// Replaces the packet with `data`; fails (leaving the packet unchanged) when it does not fit.
    pub fn set_data(&mut self, data: &[u8]) -> Result<(), DriverError> {
        if data.len() > self.capacity() {
            return Err(DriverError::BufferTooSmall {
                what: "the packet's data",
                need: data.len(),
                capacity: self.capacity(),
            });
        }
        self.pool.region.write(self.data_offset(), data)?;
        self.len = data.len() as u32;
        Ok(())
    }

    /// Copies packet bytes from `offset` into `out`; returns how many were copied.
    #[inline]
    pub fn read(&self, offset: usize, out: &mut [u8]) -> usize {
        self.pool
            .read_packet(self.index, self.data_off, self.len, offset, out)
    }

    /// The first `N * 8` bytes of the buffer from the packet's first byte, as `N` words in memory
    /// order, when the packet starts on an 8-byte boundary (the send path's inlined headers, read
    /// with `N` loads). Bytes past the packet's end are whatever the buffer holds; `None` when
    /// the words would leave the buffer or are not aligned.
    #[inline]
    pub(crate) fn head_words<const N: usize>(&self) -> Option<[u64; N]> {
        self.pool.head_words(self.index, self.data_off)
    }

    /// Overwrites packet bytes at `offset` (within the current length).
    pub fn write(&mut self, offset: usize, data: &[u8]) -> Result<(), DriverError> {
        self.pool
            .write_packet(self.index, self.data_off, self.len, offset, data)
    }

    /// The packet's bytes (every segment), copied.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.pkt_len());
        for seg in self.segments() {
            let start = v.len();
            v.resize(start + seg.len(), 0);
            seg.read(0, &mut v[start..]);
        }
        v
    }

    /// Offset of the packet's first byte in the pool's memory (for a pool in a dmabuf: in the
    /// mapped range), for reading packets through the exporter when the CPU cannot map them.
    pub fn memory_offset(&self) -> usize {
        self.data_offset()
    }

    #[inline]
    pub(crate) fn data_iova(&self) -> u64 {
        self.pool.data_iova(self.index, self.data_off)
    }

    /// The CPU address of the packet's first byte in this segment: the buffer's CPU mapping,
    /// for a program outside Rust (the C interface) to read and write the packet in place, as
    /// DPDK's `rte_pktmbuf_mtod` gives it. [`Mbuf::capacity`] bytes from it are this packet's.
    ///
    /// A raw address, never a reference: the driver itself still reaches packet memory only
    /// through copies. It is valid while this `Mbuf` is held, not after it is dropped or a send
    /// takes it; the device does not touch a held buffer (a received one is handed over after
    /// its completion, a send buffer reaches the device only when a send takes it), so plain
    /// loads and stores through it do not race the device. `None` for a pool in a dmabuf range,
    /// which the CPU may not map.
    #[inline]
    pub fn data_ptr(&self) -> Option<std::ptr::NonNull<u8>> {
        self.pool.region.cpu_address(self.data_offset())
    }

    /// Sets the packet's length to `len` bytes, for bytes written in place through
    /// [`Mbuf::data_ptr`]; fails (leaving it unchanged) past [`Mbuf::capacity`] or on a chained
    /// packet (whose length is its segments').
    pub fn set_len_within_capacity(&mut self, len: usize) -> Result<(), DriverError> {
        if len > self.capacity() || self.is_chained() {
            return Err(DriverError::BufferTooSmall {
                what: "the packet's length (one segment, within its capacity)",
                need: len,
                capacity: if self.is_chained() {
                    0
                } else {
                    self.capacity()
                },
            });
        }
        self.len = len as u32;
        Ok(())
    }

    pub(crate) fn set_len(&mut self, len: u32) {
        self.len = len;
    }

    #[inline]
    pub(crate) fn lkey(&self) -> u32 {
        self.pool.lkey()
    }

    /// The pool this buffer belongs to.
    #[inline]
    pub(crate) fn pool_shared(&self) -> &Arc<PoolShared> {
        &self.pool
    }

    /// Takes this single-segment buffer's index out: the caller now holds the buffer (and
    /// returns it with [`PoolShared::push_chain`] or turns it back into an `Mbuf` with
    /// [`PoolShared::adopt`]); what is left holds only its pool, and dropping it frees
    /// nothing. `None`, with nothing changed, for a chained packet.
    #[inline]
    pub(crate) fn detach(&mut self) -> Option<u32> {
        if self.next.is_some() || self.index == NIL {
            return None;
        }
        Some(std::mem::replace(&mut self.index, NIL))
    }
}

impl Drop for Mbuf {
    #[inline]
    fn drop(&mut self) {
        if self.index != NIL {
            self.pool.release(self.index, 1);
        }
    }
}
