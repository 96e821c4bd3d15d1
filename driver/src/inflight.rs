//! The buffers a send queue has handed to the device, by WQE index, until their completion.
//!
//! A single-segment packet from one of the first [`MAX_POOLS`] pools the queue sends from is
//! kept as its pool's buffer index alone: the packet's `Mbuf` is emptied at send time (its
//! drop then only lets go of its pool), and a completion returns the indexes it covers to
//! their pool in one exchange. Any other packet (chained, or from a further pool) is kept whole
//! and dropped on completion as usual. The queue holds each pool it keeps indexes of, so a
//! pool outlives its buffers in flight.

use crate::mempool::{BufferChain, Mbuf, OffloadFlags, PoolShared};
use std::sync::Arc;

/// Pools a queue keeps buffer indexes of; packets of any further pool are kept whole.
const MAX_POOLS: usize = 4;
/// A slot with nothing in flight.
const EMPTY: u64 = u64::MAX;
/// A slot whose packet is kept whole, in `whole`.
const WHOLE: u64 = u64::MAX - 1;

/// What a send queue has in flight, by WQE index (the slot of the packet's first WQEBB).
pub(crate) struct InFlight {
    /// Per slot: [`EMPTY`], [`WHOLE`], or the pool's place in `pools` (high 32 bits) and the
    /// buffer's index in it (low 32 bits).
    slots: Box<[u64]>,
    /// Packets kept whole, at their slot.
    whole: Box<[Option<Mbuf>]>,
    /// The pools whose buffer indexes `slots` holds; kept until the queue is flushed.
    pools: Vec<Arc<PoolShared>>,
}

/// How [`InFlight::keep`] kept a packet.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kept {
    /// By its buffer index: the caller drops the emptied `Mbuf`.
    Index,
    /// Not yet: the caller hands the packet itself to [`InFlight::keep_whole`].
    Whole,
}

impl InFlight {
    /// Room for a ring of `entries` WQEBBs.
    pub(crate) fn new(entries: usize) -> Self {
        Self {
            slots: vec![EMPTY; entries].into_boxed_slice(),
            whole: (0..entries).map(|_| None).collect(),
            pools: Vec::new(),
        }
    }

    /// Records `m` as sent from `slot` (less than the ring size).
    #[inline]
    pub(crate) fn keep(&mut self, slot: usize, m: &mut Mbuf) -> Kept {
        // A chained packet takes no pool place: it is kept whole whatever its pool.
        if !m.is_chained() {
            if let Some(place) = self.place_of(m.pool_shared()) {
                if let Some(index) = m.detach() {
                    self.slots[slot] = (place as u64) << 32 | u64::from(index);
                    return Kept::Index;
                }
            }
        }
        self.slots[slot] = WHOLE;
        Kept::Whole
    }

    /// Keeps `m`, for which [`InFlight::keep`] answered [`Kept::Whole`] at `slot`.
    pub(crate) fn keep_whole(&mut self, slot: usize, m: Mbuf) {
        self.whole[slot] = Some(m);
    }

    /// The place of `pool` in `pools`, added when there is room.
    #[inline]
    fn place_of(&mut self, pool: &Arc<PoolShared>) -> Option<usize> {
        if let Some(place) = self.pools.iter().position(|p| Arc::ptr_eq(p, pool)) {
            return Some(place);
        }
        if self.pools.len() == MAX_POOLS {
            return None;
        }
        self.pools.push(Arc::clone(pool));
        Some(self.pools.len() - 1)
    }

    /// Returns the buffers of `slots` (each less than the ring size), in order, to their pools:
    /// consecutive buffers of one pool go back together.
    #[inline]
    pub(crate) fn complete(&mut self, slots: impl Iterator<Item = usize>) {
        let mut chain = BufferChain::default();
        let mut chain_place = 0;
        for slot in slots {
            let entry = std::mem::replace(&mut self.slots[slot], EMPTY);
            if entry >= WHOLE {
                if entry == WHOLE {
                    self.whole[slot] = None;
                }
                continue;
            }
            let place = (entry >> 32) as usize;
            if place != chain_place {
                self.pools[chain_place].push_chain(std::mem::take(&mut chain));
                chain_place = place;
            }
            self.pools[place].link(&mut chain, entry as u32);
        }
        if let Some(pool) = self.pools.get(chain_place) {
            pool.push_chain(chain);
        }
    }

    /// Packets in flight.
    pub(crate) fn count(&self) -> usize {
        self.slots.iter().filter(|&&e| e != EMPTY).count()
    }

    /// Takes every packet in flight, as `Mbuf`s (dropping one returns its buffer), leaving
    /// nothing; the pools are let go.
    pub(crate) fn take_all(&mut self) -> Vec<Mbuf> {
        let mut taken = Vec::new();
        for (entry, whole) in self.slots.iter_mut().zip(self.whole.iter_mut()) {
            match std::mem::replace(entry, EMPTY) {
                EMPTY => {}
                WHOLE => taken.extend(whole.take()),
                kept => {
                    let pool = &self.pools[(kept >> 32) as usize];
                    taken.push(pool.adopt(kept as u32, 0, OffloadFlags::default()));
                }
            }
        }
        self.pools.clear();
        taken
    }
}
