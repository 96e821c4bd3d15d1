//! A [`PacketBurst`]: up to [`MAX_BURST`] single-segment packets of one pool, held by buffer
//! index with their lengths and offload flags in one array. Receiving into a burst and sending
//! from one moves no `Mbuf` per packet (no pool reference taken and let go, nothing dropped),
//! which is what an io-forwarding loop spends most of its driver time on besides the rings
//! themselves. Packets leave a burst as [`Mbuf`]s when they are wanted one by one; dropping or
//! clearing a burst returns its buffers to their pool in one exchange.

use super::buffer::{BufferChain, PoolShared};
use super::flags::OffloadFlags;
use super::mbuf::Mbuf;
use super::pool::Mempool;
use crate::error::DriverError;
use crate::ring::MAX_BURST;
use std::sync::Arc;

/// One packet of a [`PacketBurst`]: its buffer and where the packet lies in it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BurstEntry {
    /// The buffer's index in the burst's pool.
    index: u32,
    /// Offset of the packet's first byte in the buffer.
    data_off: u32,
    /// Packet length in bytes.
    len: u32,
    flags: OffloadFlags,
}

impl BurstEntry {
    /// The packet of `len` bytes at `data_off` in buffer `index`, with `flags`.
    #[inline(always)]
    pub(crate) fn new(index: u32, data_off: u32, len: u32, flags: OffloadFlags) -> Self {
        Self {
            index,
            data_off,
            len,
            flags,
        }
    }

    /// The buffer's index in the burst's pool.
    #[inline(always)]
    pub(crate) fn index(&self) -> u32 {
        self.index
    }

    /// Offset of the packet's first byte in the buffer.
    #[inline(always)]
    pub(crate) fn data_off(&self) -> u32 {
        self.data_off
    }

    /// Packet length in bytes.
    #[inline(always)]
    pub(crate) fn len(&self) -> u32 {
        self.len
    }

    /// Offload requests and results.
    #[inline(always)]
    pub(crate) fn flags(&self) -> &OffloadFlags {
        &self.flags
    }

    /// The packet as an [`Mbuf`] of `pool` (taking over the burst's reference to the buffer).
    #[inline]
    pub(crate) fn into_mbuf(self, pool: &Arc<PoolShared>) -> Mbuf {
        Mbuf::adopt_part(pool, self.index, self.data_off, self.len, self.flags)
    }
}

/// Up to [`MAX_BURST`] single-segment packets, all from one pool, in order: what
/// [`crate::RxQueue::rx_burst`] can receive into and [`crate::TxQueue::tx_burst`] send
/// from. A burst holds its packets' buffers; [`PacketBurst::clear`] or dropping it returns
/// them. It allocates once, when made.
pub struct PacketBurst {
    /// The pool of every packet held (kept after the burst empties, until another pool's
    /// packets arrive).
    pool: Option<Arc<PoolShared>>,
    entries: Vec<BurstEntry>,
}

impl Default for PacketBurst {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for PacketBurst {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PacketBurst")
            .field("len", &self.entries.len())
            .finish()
    }
}

/// One packet of a [`PacketBurst`], read-only: see [`PacketBurst::get`].
#[derive(Clone, Copy)]
pub struct BurstPacket<'a> {
    pool: &'a PoolShared,
    entry: &'a BurstEntry,
}

impl<'a> BurstPacket<'a> {
    /// The packet `entry` of a burst of `pool`.
    #[inline(always)]
    pub(crate) fn new(pool: &'a PoolShared, entry: &'a BurstEntry) -> Self {
        Self { pool, entry }
    }

    /// The first `N` words of the packet, as a send WQE inlines them.
    #[inline(always)]
    pub(crate) fn head_words<const N: usize>(&self) -> Option<[u64; N]> {
        self.pool.head_words(self.entry.index, self.entry.data_off)
    }

    /// The memory key the packet's pool is registered under.
    #[inline(always)]
    pub(crate) fn lkey(&self) -> u32 {
        self.pool.lkey()
    }

    /// The device address of the packet's first byte.
    #[inline(always)]
    pub(crate) fn data_iova(&self) -> u64 {
        self.pool.data_iova(self.entry.index, self.entry.data_off)
    }

    /// Offload requests, by reference (the send path reads them in place).
    #[inline(always)]
    pub(crate) fn flags_ref(&self) -> &'a OffloadFlags {
        &self.entry.flags
    }
    /// Packet length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.entry.len as usize
    }

    /// True for an empty packet.
    pub fn is_empty(&self) -> bool {
        self.entry.len == 0
    }

    /// Offload requests (send) and results (receive).
    #[inline]
    pub fn flags(&self) -> OffloadFlags {
        self.entry.flags
    }

    /// Copies packet bytes from `offset` into `out`; returns how many were copied.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> usize {
        let e = self.entry;
        self.pool
            .read_packet(e.index, e.data_off, e.len, offset, out)
    }

    /// The packet's bytes, copied.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0; self.len()];
        self.read(0, &mut v);
        v
    }
}

impl PacketBurst {
    /// An empty burst with room for [`MAX_BURST`] packets.
    pub fn new() -> Self {
        Self {
            pool: None,
            entries: Vec::with_capacity(MAX_BURST),
        }
    }

    /// Packets held.
    #[inline]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no packet is held.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Packets a burst holds at most ([`MAX_BURST`]).
    pub fn capacity(&self) -> usize {
        MAX_BURST
    }

    /// Room left, in packets.
    #[inline]
    pub(crate) fn room(&self) -> usize {
        MAX_BURST - self.entries.len()
    }

    /// Packet `i` (counting from the oldest), or `None` past the last.
    pub fn get(&self, i: usize) -> Option<BurstPacket<'_>> {
        let pool = self.pool.as_deref()?;
        Some(BurstPacket {
            pool,
            entry: self.entries.get(i)?,
        })
    }

    /// Overwrites bytes of packet `i` at `offset` (the write must end within the packet).
    pub fn write(&mut self, i: usize, offset: usize, data: &[u8]) -> Result<(), DriverError> {
        let (Some(pool), Some(e)) = (self.pool.as_deref(), self.entries.get(i)) else {
            return Err(DriverError::NoSuchPacket {
                index: i,
                len: self.entries.len(),
            });
        };
        pool.write_packet(e.index, e.data_off, e.len, offset, data)
    }

    /// The offload flags of packet `i`, to change (what to ask of the device when it is sent).
    pub fn flags_mut(&mut self, i: usize) -> Option<&mut OffloadFlags> {
        self.entries.get_mut(i).map(|e| &mut e.flags)
    }

    /// Appends `m` when it is a single-segment packet of the burst's pool (any pool when the
    /// burst is empty) and there is room; else gives it back unchanged.
    pub fn push(&mut self, mut m: Mbuf) -> Result<(), Mbuf> {
        if self.entries.len() == MAX_BURST || m.is_chained() {
            return Err(m);
        }
        if !self.entries.is_empty()
            && !self
                .pool
                .as_ref()
                .is_some_and(|p| Arc::ptr_eq(p, m.pool_shared()))
        {
            return Err(m);
        }
        let pool = Arc::clone(m.pool_shared());
        let (data_off, len, flags) = (m.data_off(), m.len() as u32, m.flags);
        let Some(index) = m.detach() else {
            return Err(m);
        };
        self.pool = Some(pool);
        self.entries.push(BurstEntry {
            index,
            data_off,
            len,
            flags,
        });
        Ok(())
    }

    /// Moves every packet held onto the end of `out` as [`Mbuf`]s, in order, leaving the
    /// burst empty.
    pub fn drain_into(&mut self, out: &mut Vec<Mbuf>) {
        let Some(pool) = &self.pool else {
            return;
        };
        out.extend(
            self.entries
                .drain(..)
                .map(|e| Mbuf::adopt_part(pool, e.index, e.data_off, e.len, e.flags)),
        );
    }

    /// Returns every packet's buffer to the pool (in one exchange), leaving the burst empty.
    pub fn clear(&mut self) {
        if let Some(pool) = &self.pool {
            release_entries(pool, self.entries.drain(..));
        }
    }

    /// Readies the burst to receive from `pool`: taken on when the burst is empty, refused
    /// when the burst holds another pool's packets.
    pub(crate) fn receive_from(&mut self, pool: &Mempool) -> Result<(), DriverError> {
        let shared = pool.shared_arc();
        match &self.pool {
            Some(p) if Arc::ptr_eq(p, shared) => Ok(()),
            Some(_) if !self.entries.is_empty() => Err(DriverError::PoolMismatch {
                held: self.entries.len(),
            }),
            _ => {
                self.pool = Some(Arc::clone(shared));
                Ok(())
            }
        }
    }

    /// Appends a received packet (the caller checked the room and the pool).
    #[inline(always)]
    pub(crate) fn accept(&mut self, entry: BurstEntry) {
        debug_assert!(self.entries.len() < MAX_BURST);
        self.entries.push(entry);
    }

    /// The pool and the packets, for the send path.
    #[inline]
    pub(crate) fn parts(&self) -> Option<(&Arc<PoolShared>, &[BurstEntry])> {
        Some((self.pool.as_ref()?, &self.entries))
    }

    /// Removes the first `count` packets, whose buffers the caller has taken over.
    #[inline]
    pub(crate) fn remove_front(&mut self, count: usize) {
        self.entries.drain(..count);
    }
}

/// Returns the buffers of `entries` (each holding one reference) to `pool` together.
pub(crate) fn release_entries(pool: &PoolShared, entries: impl Iterator<Item = BurstEntry>) {
    let mut chain = BufferChain::default();
    for e in entries {
        pool.link(&mut chain, e.index);
    }
    pool.push_chain(chain);
}

impl Drop for PacketBurst {
    fn drop(&mut self) {
        self.clear();
    }
}
