//! What a send burst takes its packets from: a `Vec<Mbuf>` (any shape, any pools) or a
//! [`PacketBurst`] (single-segment packets of one pool, held by buffer index), both
//! [`super::TxSource`]s. The send loop and the WQE builders are written once over [`PacketSource`]
//! and [`SendPacket`]; the burst's instance learns its pool's in-flight place once per burst
//! instead of once per packet, and hands buffers over by index with no `Mbuf` to empty and
//! drop.

use super::inflight::{InFlight, Kept};
use crate::mem::{
    release_entries, BurstEntry, BurstPacket, Mbuf, OffloadFlags, PacketBurst, PoolShared,
};
use std::sync::Arc;

/// Per packet of a send burst, what became of it: its ring slot when it is kept whole,
/// [`KEPT`] when it is kept by buffer index, [`REFUSED`] when it was dropped instead of sent.
pub(crate) const REFUSED: u32 = u32::MAX;
/// See [`REFUSED`].
pub(crate) const KEPT: u32 = u32::MAX - 1;

/// A packet the send path builds a WQE for.
pub(crate) trait SendPacket {
    /// Bytes in the first segment.
    fn head_len(&self) -> usize;
    /// Bytes in the whole packet.
    fn pkt_len(&self) -> usize;
    /// True when further segments follow the first.
    fn is_chained(&self) -> bool;
    /// The packet's offload requests.
    fn flags(&self) -> &OffloadFlags;
    /// The first `N * 8` bytes from the packet's first byte: see [`Mbuf::head_words`].
    fn head_words<const N: usize>(&self) -> Option<[u64; N]>;
    /// The memory key of the first segment's buffer.
    fn lkey(&self) -> u32;
    /// Device address of the packet's first byte.
    fn data_iova(&self) -> u64;
    /// Copies bytes of the first segment from `offset` into `out`; returns how many.
    fn read(&self, offset: usize, out: &mut [u8]) -> usize;
    /// The segments after the first, when chained.
    fn tail(&self) -> Option<&Mbuf>;
}

impl SendPacket for &Mbuf {
    #[inline(always)]
    fn head_len(&self) -> usize {
        self.len()
    }
    #[inline(always)]
    fn pkt_len(&self) -> usize {
        Mbuf::pkt_len(self)
    }
    #[inline(always)]
    fn is_chained(&self) -> bool {
        Mbuf::is_chained(self)
    }
    #[inline(always)]
    fn flags(&self) -> &OffloadFlags {
        &self.flags
    }
    #[inline(always)]
    fn head_words<const N: usize>(&self) -> Option<[u64; N]> {
        Mbuf::head_words(self)
    }
    #[inline(always)]
    fn lkey(&self) -> u32 {
        Mbuf::lkey(self)
    }
    #[inline(always)]
    fn data_iova(&self) -> u64 {
        Mbuf::data_iova(self)
    }
    #[inline(always)]
    fn read(&self, offset: usize, out: &mut [u8]) -> usize {
        Mbuf::read(self, offset, out)
    }
    #[inline(always)]
    fn tail(&self) -> Option<&Mbuf> {
        self.next_segment()
    }
}

impl SendPacket for BurstPacket<'_> {
    #[inline(always)]
    fn head_len(&self) -> usize {
        self.len()
    }
    #[inline(always)]
    fn pkt_len(&self) -> usize {
        self.len()
    }
    #[inline(always)]
    fn is_chained(&self) -> bool {
        false
    }
    #[inline(always)]
    fn flags(&self) -> &OffloadFlags {
        self.flags_ref()
    }
    #[inline(always)]
    fn head_words<const N: usize>(&self) -> Option<[u64; N]> {
        BurstPacket::head_words(self)
    }
    #[inline(always)]
    fn lkey(&self) -> u32 {
        BurstPacket::lkey(self)
    }
    #[inline(always)]
    fn data_iova(&self) -> u64 {
        BurstPacket::data_iova(self)
    }
    #[inline(always)]
    fn read(&self, offset: usize, out: &mut [u8]) -> usize {
        BurstPacket::read(self, offset, out)
    }
    #[inline(always)]
    fn tail(&self) -> Option<&Mbuf> {
        None
    }
}

/// The packets of one send burst, in order; the send loop hands each one it sends to the
/// queue's [`InFlight`] and, at the end, [`PacketSource::finish`] removes the ones it took.
pub(crate) trait PacketSource {
    /// A packet, borrowed from the source.
    type Packet<'a>: SendPacket
    where
        Self: 'a;
    /// Packets waiting.
    fn count(&self) -> usize;
    /// Packet `i` (less than [`PacketSource::count`]).
    fn packet(&self, i: usize) -> Self::Packet<'_>;
    /// Hands packet `i`, sent from ring `slot`, to `inflight`: by buffer index, or (for
    /// [`Kept::Whole`]) whole in [`PacketSource::finish`].
    fn keep(&mut self, i: usize, slot: usize, inflight: &mut InFlight) -> Kept;
    /// The pool place packet `m` is kept by in a multi-packet WQE; `None` when it cannot ride
    /// in one.
    fn run_place(&self, m: &Self::Packet<'_>, inflight: &mut InFlight) -> Option<u32>;
    /// Hands packet `i` to `inflight`'s runs by buffer index (`place` from
    /// [`PacketSource::run_place`]).
    fn keep_in_run(&mut self, i: usize, place: u32, inflight: &mut InFlight);
    /// Removes the first `count` packets, whose fates `fates` holds ([`KEPT`], [`REFUSED`],
    /// or the ring slot to keep the packet whole at); `sorted`: some were not [`KEPT`].
    fn finish(&mut self, count: usize, fates: &[u32], sorted: bool, inflight: &mut InFlight);
    /// The packets as one pool's entries and that pool's in-flight place, when the source is
    /// held that way and each packet can be kept by its buffer index: what the send loop's
    /// template run takes ([`super::TxQueue`]'s `template_run`). `None` by default.
    #[inline(always)]
    fn entries(&self) -> Option<(&PoolShared, &[BurstEntry], u32)> {
        None
    }
}

impl PacketSource for Vec<Mbuf> {
    type Packet<'a> = &'a Mbuf;

    #[inline(always)]
    fn count(&self) -> usize {
        self.len()
    }
    #[inline(always)]
    fn packet(&self, i: usize) -> &Mbuf {
        &self[i]
    }
    #[inline(always)]
    fn keep(&mut self, i: usize, slot: usize, inflight: &mut InFlight) -> Kept {
        inflight.keep(slot, &mut self[i])
    }
    #[inline(always)]
    fn run_place(&self, m: &&Mbuf, inflight: &mut InFlight) -> Option<u32> {
        inflight.run_place(m)
    }
    #[inline(always)]
    fn keep_in_run(&mut self, i: usize, place: u32, inflight: &mut InFlight) {
        inflight.keep_in_run(place, &mut self[i]);
    }
    #[inline(always)]
    fn finish(&mut self, count: usize, fates: &[u32], sorted: bool, inflight: &mut InFlight) {
        if sorted {
            for (&fate, m) in fates[..count].iter().zip(self.drain(..count)) {
                if fate != REFUSED && fate != KEPT {
                    inflight.keep_whole(fate as usize, m);
                }
            }
        } else {
            // Kept by index (their emptied `Mbuf`s only let go of their pool).
            self.drain(..count);
        }
    }
}

/// A [`PacketBurst`] being sent, with its pool's place in the queue's [`InFlight`] (`None`
/// when the queue keeps indexes of as many pools as it can: its packets are then kept whole).
pub(super) struct BurstSource<'b> {
    pool: &'b Arc<PoolShared>,
    entries: &'b [BurstEntry],
    place: Option<u32>,
}

impl<'b> BurstSource<'b> {
    /// The packets of `burst`; `None` for an empty one (which then takes no pool place).
    #[inline]
    pub(super) fn new(burst: &'b PacketBurst, inflight: &mut InFlight) -> Option<Self> {
        let (pool, entries) = burst.parts().filter(|(_, entries)| !entries.is_empty())?;
        let place = inflight.place_of(pool).map(|p| p as u32);
        Some(Self {
            pool,
            entries,
            place,
        })
    }
}

impl PacketSource for BurstSource<'_> {
    type Packet<'a>
        = BurstPacket<'a>
    where
        Self: 'a;

    #[inline(always)]
    fn count(&self) -> usize {
        self.entries.len()
    }
    #[inline(always)]
    fn packet(&self, i: usize) -> BurstPacket<'_> {
        BurstPacket::new(self.pool, &self.entries[i])
    }
    #[inline(always)]
    fn keep(&mut self, i: usize, slot: usize, inflight: &mut InFlight) -> Kept {
        match self.place {
            Some(place) => {
                inflight.keep_index(slot, place, self.entries[i].index());
                Kept::Index
            }
            None => {
                inflight.keep_whole_later(slot);
                Kept::Whole
            }
        }
    }
    #[inline(always)]
    fn run_place(&self, _: &BurstPacket<'_>, _: &mut InFlight) -> Option<u32> {
        self.place
    }
    #[inline(always)]
    fn entries(&self) -> Option<(&PoolShared, &[BurstEntry], u32)> {
        Some((self.pool, self.entries, self.place?))
    }
    #[inline(always)]
    fn keep_in_run(&mut self, i: usize, place: u32, inflight: &mut InFlight) {
        inflight.keep_index_in_run(place, self.entries[i].index());
    }
    /// Leaves the burst itself alone: the caller removes the packets once the source is gone.
    #[inline(always)]
    fn finish(&mut self, count: usize, fates: &[u32], sorted: bool, inflight: &mut InFlight) {
        if !sorted {
            return;
        }
        let refused = fates[..count]
            .iter()
            .zip(&self.entries[..count])
            .filter(|(&fate, _)| fate == REFUSED)
            .map(|(_, &e)| e);
        release_entries(self.pool, refused);
        for (&fate, e) in fates[..count].iter().zip(&self.entries[..count]) {
            if fate != REFUSED && fate != KEPT {
                let whole = e.into_mbuf(self.pool);
                inflight.keep_whole(fate as usize, whole);
            }
        }
    }
}
