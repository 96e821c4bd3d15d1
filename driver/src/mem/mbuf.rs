//! The [`Mbuf`]: a packet in a pool buffer, which returns the buffer to its pool when dropped.
//!
//! Buffer memory is device-visible, so an `Mbuf` never hands out a reference to it: data goes in
//! and out by copy (volatile accesses underneath).

use super::buffer::{PoolShared, HEADROOM, NIL};
use super::flags::OffloadFlags;
use crate::error::DriverError;
use std::sync::Arc;

/// A packet in a pool buffer. Returns the buffer to its pool when dropped.
pub struct Mbuf {
    pub(super) pool: Arc<PoolShared>,
    pub(super) index: u32,
    pub(super) data_off: u32,
    pub(super) len: u32,
    /// The rest of a multi-segment packet.
    pub(super) next: Option<Box<Mbuf>>,
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
    /// The buffer at `index`, taken off `pool` and not returned, as a packet of `len` bytes
    /// (at most the data room) with `flags`; dropping it returns the buffer.
    #[inline]
    pub(crate) fn adopt(pool: &Arc<PoolShared>, index: u32, len: u32, flags: OffloadFlags) -> Mbuf {
        Mbuf {
            pool: Arc::clone(pool),
            index,
            data_off: u32::from(HEADROOM),
            len,
            next: None,
            flags,
        }
    }

    /// Part of `pool`'s shared buffer at `index` (one reference of it, taken by the caller), from
    /// byte `offset` on, as a packet of `len` bytes with `flags`.
    #[inline]
    pub(crate) fn adopt_part(
        pool: &Arc<PoolShared>,
        index: u32,
        offset: u32,
        len: u32,
        flags: OffloadFlags,
    ) -> Mbuf {
        Mbuf {
            pool: Arc::clone(pool),
            index,
            data_off: offset,
            len,
            next: None,
            flags,
        }
    }

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

    /// The index of the buffer (the first segment's) in its pool, `0..capacity`: what the
    /// pool's buffer number is, without the division `memory_offset() / buf_size`.
    #[inline]
    pub fn buffer_index(&self) -> u32 {
        self.index
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
