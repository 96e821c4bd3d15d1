//! The buffers a send queue has handed to the device, by WQE index, until their completion.
//!
//! A single-segment packet from one of the first [`MAX_POOLS`] pools the queue sends from is
//! kept as its pool's buffer index alone: the packet's `Mbuf` is emptied at send time (its
//! drop then only lets go of its pool), and a completion returns the indexes it covers to
//! their pool in one exchange. Any other packet (chained, or from a further pool) is kept whole
//! and dropped on completion as usual. The queue holds each pool it keeps indexes of, so a
//! pool outlives its buffers in flight.
//!
//! The packets of a multi-packet WQE are kept the same way, in order, in a run queue beside the
//! slots; the WQE's slot holds how many of them it carries.

use crate::mem::{BufferChain, CacheSlots, Fill, Mbuf, OffloadFlags, PoolShared};
use std::sync::Arc;

/// Pools a queue keeps buffer indexes of; packets of any further pool are kept whole.
const MAX_POOLS: usize = 4;
/// A slot with nothing in flight.
const EMPTY: u64 = u64::MAX;
/// A slot whose packet is kept whole, in `whole`.
const WHOLE: u64 = u64::MAX - 1;
/// Marks a slot holding a multi-packet WQE; the low 32 bits count its packets in `runs`.
const RUN: u64 = 1 << 62;
/// Most packets one basic block of a multi-packet WQE carries (one 16-byte segment each).
const RUN_PACKETS_PER_BB: usize = 4;

#[cfg(test)]
mod tests;

/// What a send queue has in flight, by WQE index (the slot of the packet's first WQEBB).
pub(crate) struct InFlight {
    /// Per slot: [`EMPTY`], [`WHOLE`], or the pool's place in `pools` (high 32 bits) and the
    /// buffer's index in it (low 32 bits).
    slots: Box<[u64]>,
    /// Packets kept whole, at their slot.
    whole: Box<[Option<Mbuf>]>,
    /// The pools whose buffer indexes `slots` and `runs` hold; kept until the queue is flushed.
    pools: Vec<Arc<PoolShared>>,
    /// Bit `place` set: this queue holds the buffer cache claim of the pool at `place`, and
    /// its completions put that pool's buffers in the cache (see `mem::cache`).
    claims: u8,
    /// The packets of multi-packet WQEs in flight, in posting order, as slot entries (pool
    /// place and buffer index); a ring of a power-of-two length, never more than full.
    runs: Box<[u64]>,
    /// Where the oldest packet of `runs` is (wrapping; masked to index).
    run_head: usize,
    /// Where the next packet of `runs` goes (wrapping; masked to index).
    run_tail: usize,
    /// Where the run being built started: `run_tail` as the last WQE's run was closed.
    run_open: usize,
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
        // Each basic block in flight carries at most four packets of a run.
        let runs = (entries * RUN_PACKETS_PER_BB).next_power_of_two();
        Self {
            slots: vec![EMPTY; entries].into_boxed_slice(),
            whole: (0..entries).map(|_| None).collect(),
            pools: Vec::new(),
            claims: 0,
            runs: vec![EMPTY; runs].into_boxed_slice(),
            run_head: 0,
            run_tail: 0,
            run_open: 0,
        }
    }

    /// Records `m` as sent from `slot` (less than the ring size).
    #[inline]
    pub(crate) fn keep(&mut self, slot: usize, m: &mut Mbuf) -> Kept {
        // A chained packet takes no pool place: it is kept whole whatever its pool.
        if !m.is_chained() {
            if let Some(place) = self.place_of(m.pool_shared()) {
                if let Some(index) = m.detach() {
                    self.keep_index(slot, place as u32, index);
                    return Kept::Index;
                }
            }
        }
        self.keep_whole_later(slot);
        Kept::Whole
    }

    /// Records the buffer at `index` of the pool at `place` (from [`InFlight::place_of`]) as
    /// sent from `slot`; the caller has handed it over.
    #[inline(always)]
    pub(crate) fn keep_index(&mut self, slot: usize, place: u32, index: u32) {
        self.slots[slot] = u64::from(place) << 32 | u64::from(index);
    }

    /// Marks `slot` as holding a packet the caller hands to [`InFlight::keep_whole`] next.
    #[inline]
    pub(crate) fn keep_whole_later(&mut self, slot: usize) {
        self.slots[slot] = WHOLE;
    }

    /// Keeps `m`, for which [`InFlight::keep`] answered [`Kept::Whole`] at `slot`.
    pub(crate) fn keep_whole(&mut self, slot: usize, m: Mbuf) {
        self.whole[slot] = Some(m);
    }

    /// The pool place `m` would be kept by in a run, for a single-segment packet whose pool
    /// has or gets a place; `None` when it cannot join a multi-packet WQE.
    #[inline]
    pub(crate) fn run_place(&mut self, m: &Mbuf) -> Option<u32> {
        if m.is_chained() {
            return None;
        }
        self.place_of(m.pool_shared()).map(|place| place as u32)
    }

    /// Adds `m`, a packet of the multi-packet WQE being built, to the runs by its buffer index
    /// (`place` from [`InFlight::run_place`]); the caller drops the emptied `Mbuf`. A packet
    /// with no index to give (chained, which `run_place` refuses) is not kept.
    #[inline]
    pub(crate) fn keep_in_run(&mut self, place: u32, m: &mut Mbuf) {
        if let Some(index) = m.detach() {
            self.keep_index_in_run(place, index);
        }
    }

    /// Adds the buffer at `index` of the pool at `place` to the runs (see
    /// [`InFlight::keep_in_run`]); the caller has handed it over.
    #[inline(always)]
    pub(crate) fn keep_index_in_run(&mut self, place: u32, index: u32) {
        let mask = self.runs.len() - 1;
        self.runs[self.run_tail & mask] = u64::from(place) << 32 | u64::from(index);
        self.run_tail = self.run_tail.wrapping_add(1);
    }

    /// Records at `slot` the multi-packet WQE whose packets [`InFlight::keep_in_run`] kept since
    /// the last run was closed (counted from the run queue itself, so the count a completion
    /// takes back is always what was kept).
    #[inline]
    pub(crate) fn close_run(&mut self, slot: usize) {
        let packets = self.run_tail.wrapping_sub(self.run_open) as u64;
        self.slots[slot] = RUN | packets;
        self.run_open = self.run_tail;
    }

    /// The place of `pool` in `pools`, added when there is room.
    #[inline]
    pub(crate) fn place_of(&mut self, pool: &Arc<PoolShared>) -> Option<usize> {
        if let Some(place) = self.pools.iter().position(|p| Arc::ptr_eq(p, pool)) {
            return Some(place);
        }
        if self.pools.len() == MAX_POOLS {
            return None;
        }
        // A pool whose buffers are shared goes back buffer by buffer, through its references.
        if !pool.shares_buffers() && pool.cache().claim() {
            self.claims |= 1 << self.pools.len();
        }
        self.pools.push(Arc::clone(pool));
        Some(self.pools.len() - 1)
    }

    /// Returns the buffers of the `count` slots from `first` (less than the ring size; they
    /// wrap at the ring's end), in order, to their pools: consecutive buffers of one pool go
    /// back together, with one exchange per pool per completion. The slots are walked as at
    /// most two contiguous stretches, and whether each pool's buffers are shared is asked
    /// once per pool, not per buffer.
    #[inline]
    pub(crate) fn complete(&mut self, first: usize, count: usize) {
        let size = self.slots.len();
        let end = size.min(first + count);
        let mut chain = Chain {
            claims: self.claims,
            ..Chain::default()
        };
        self.complete_stretch(first, end, &mut chain);
        self.complete_stretch(0, first + count - end, &mut chain);
        chain.finish(&self.pools);
    }

    /// [`InFlight::complete`] over the slots `from..to`, which do not wrap. A kept index of
    /// the pool being gathered for, whose buffers are not shared, is linked in place through
    /// that pool's links, looked up once per pool (the common case: a completion's buffers are
    /// mostly one pool's); anything else goes through [`complete_other`].
    #[inline(always)]
    fn complete_stretch(&mut self, from: usize, to: usize, chain: &mut Chain) {
        let Self {
            slots,
            whole,
            pools,
            runs,
            run_head,
            ..
        } = self;
        let mut buffers = chain.buffers;
        let mut links = pools.get(chain.place).and_then(|p| p.owned_links());
        let mut cache = chain.cache_slots(pools);
        let Some(stretch) = slots.get_mut(from..to) else {
            return;
        };
        let run_mask = runs.len() - 1;
        let mut next = 0;
        while next < stretch.len() {
            // The common case first: a row of buffers of the pool whose cache this queue
            // fills, while the cache has room. Each costs its slot's read and clear and one
            // store into the cache.
            if let Some(cache) = cache {
                let place = chain.place as u64;
                let mut fill = chain.fill;
                while let Some(kept) = stretch.get_mut(next) {
                    if *kept >> 32 != place || !fill.has_room() {
                        break;
                    }
                    fill.put(cache, *kept as u32);
                    *kept = EMPTY;
                    next += 1;
                }
                chain.fill = fill;
            }
            let k = next;
            let Some(kept) = stretch.get_mut(k) else {
                break;
            };
            next += 1;
            let entry = std::mem::replace(kept, EMPTY);
            // Runs, whole packets and empty slots have high words no pool place has.
            match links {
                // The cache, if any, is full here (the loop above took what fits).
                Some(links) if (entry >> 32) as usize == chain.place => {
                    buffers.link_in(links, entry as u32);
                    continue;
                }
                _ => {}
            }
            if entry & RUN == 0 || entry >= WHOLE {
                let place = chain.place;
                chain.buffers = buffers;
                complete_other(pools, whole, from + k, entry, chain);
                buffers = chain.buffers;
                if chain.place != place {
                    links = pools.get(chain.place).and_then(|p| p.owned_links());
                    cache = chain.cache_slots(pools);
                }
                continue;
            }
            // A multi-packet WQE: its packets, in order, from the run queue.
            for _ in 0..entry as u32 {
                let kept = std::mem::replace(&mut runs[*run_head & run_mask], EMPTY);
                *run_head = run_head.wrapping_add(1);
                match links {
                    Some(links) if (kept >> 32) as usize == chain.place => match cache {
                        Some(slots) if chain.fill.has_room() => {
                            chain.fill.put(slots, kept as u32);
                        }
                        _ => buffers.link_in(links, kept as u32),
                    },
                    _ => {
                        let place = chain.place;
                        chain.buffers = buffers;
                        complete_other(pools, whole, from + k, kept, chain);
                        buffers = chain.buffers;
                        if chain.place != place {
                            links = pools.get(chain.place).and_then(|p| p.owned_links());
                            cache = chain.cache_slots(pools);
                        }
                    }
                }
            }
        }
        chain.buffers = buffers;
    }

    /// Packets in flight.
    pub(crate) fn count(&self) -> usize {
        // Kept indexes sit below RUN; a whole packet's mark has the RUN bit set too.
        let single = self.slots.iter().filter(|&&e| e < RUN || e == WHOLE);
        single.count() + self.run_tail.wrapping_sub(self.run_head)
    }

    /// Takes every packet in flight, as `Mbuf`s (dropping one returns its buffer), leaving
    /// nothing; the pools are let go.
    pub(crate) fn take_all(&mut self) -> Vec<Mbuf> {
        let mut taken = Vec::new();
        let adopt = |pools: &[Arc<PoolShared>], kept: u64| {
            Mbuf::adopt(
                &pools[(kept >> 32) as usize],
                kept as u32,
                0,
                OffloadFlags::default(),
            )
        };
        for (entry, whole) in self.slots.iter_mut().zip(self.whole.iter_mut()) {
            match std::mem::replace(entry, EMPTY) {
                EMPTY => {}
                WHOLE => taken.extend(whole.take()),
                run if run & RUN != 0 => {}
                kept => taken.push(adopt(&self.pools, kept)),
            }
        }
        let mask = self.runs.len() - 1;
        while self.run_head != self.run_tail {
            let kept = std::mem::replace(&mut self.runs[self.run_head & mask], EMPTY);
            self.run_head = self.run_head.wrapping_add(1);
            taken.push(adopt(&self.pools, kept));
        }
        self.run_open = self.run_tail;
        self.release_claims();
        self.pools.clear();
        taken
    }

    /// Lets go of the buffer cache claims this queue holds.
    fn release_claims(&mut self) {
        for (place, pool) in self.pools.iter().enumerate() {
            if self.claims & (1 << place) != 0 {
                pool.cache().release();
            }
        }
        self.claims = 0;
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.release_claims();
    }
}

/// One completed packet's `entry` (from slot `slot`) other than a kept index of the pool
/// `chain` gathers for when that pool's buffers are not shared: a kept index of another pool
/// or of a shared one, a whole packet, or an empty slot. See [`InFlight::complete`].
#[inline(never)]
fn complete_other(
    pools: &[Arc<PoolShared>],
    whole: &mut [Option<Mbuf>],
    slot: usize,
    entry: u64,
    chain: &mut Chain,
) {
    // Kept indexes sit below RUN; whole packets and empty slots above it (runs were
    // unpacked by the caller).
    if entry < RUN {
        chain.add(pools, entry);
    } else if entry == WHOLE {
        whole[slot] = None;
    }
}

/// Buffers of one pool being gathered to go back to it together.
struct Chain {
    buffers: BufferChain,
    /// The place of the pool gathered for; `NO_PLACE` before the first buffer.
    place: usize,
    /// Whether that pool's buffers are shared (asked once, when its first buffer came).
    shared: bool,
    /// The buffer cache claims of the queue ([`InFlight::claims`]).
    claims: u8,
    /// What was put in the cache of the pool gathered for, when the queue holds its claim
    /// (no room otherwise).
    fill: Fill,
}

/// [`Chain::place`] before any buffer is gathered.
const NO_PLACE: usize = usize::MAX;

impl Default for Chain {
    fn default() -> Self {
        Self {
            buffers: BufferChain::default(),
            place: NO_PLACE,
            shared: false,
            claims: 0,
            fill: Fill::default(),
        }
    }
}

impl Chain {
    /// Adds the kept buffer `entry` (pool place and index), first sending back what was
    /// gathered for another pool.
    #[inline(always)]
    fn add(&mut self, pools: &[Arc<PoolShared>], entry: u64) {
        let place = (entry >> 32) as usize;
        if place != self.place {
            self.switch(pools, place);
        }
        let pool = &pools[place];
        if self.shared {
            pool.link(&mut self.buffers, entry as u32);
        } else {
            pool.link_owned(&mut self.buffers, entry as u32);
        }
    }

    /// The slots of the buffer cache of the pool gathered for, when the queue holds its
    /// claim.
    #[inline(always)]
    fn cache_slots<'p>(&self, pools: &'p [Arc<PoolShared>]) -> Option<&'p CacheSlots> {
        let pool = pools.get(self.place)?;
        (self.claims & (1u8 << (self.place & 7)) != 0).then(|| pool.cache().slots())
    }

    /// Sends back what was gathered and starts gathering for the pool at `place`.
    #[inline(never)]
    fn switch(&mut self, pools: &[Arc<PoolShared>], place: usize) {
        if let Some(pool) = pools.get(self.place) {
            pool.publish_fill(std::mem::take(&mut self.fill));
            pool.push_chain(std::mem::take(&mut self.buffers));
        }
        self.place = place;
        let pool = &pools[place];
        self.shared = pool.shares_buffers();
        if self.claims & (1u8 << (place & 7)) != 0 {
            self.fill = pool.cache().begin_fill();
        }
    }

    /// Sends back what was gathered.
    #[inline]
    fn finish(self, pools: &[Arc<PoolShared>]) {
        if let Some(pool) = pools.get(self.place) {
            pool.publish_fill(self.fill);
            pool.push_chain(self.buffers);
        }
    }
}
