//! A pool's buffer cache: a bounded ring of free buffer indexes that one send queue fills from
//! its completions and receive refills (and any other taker) empty, so that a forwarding loop's
//! buffers go from send completions to receive refills without the shared free stack's links
//! being written and walked for each. The free stack is used only when the cache is full (a
//! completion's surplus) or empty (a refill's shortfall).
//!
//! One producer at a time: the send queue that holds the cache's claim ([`BufferCache::claim`],
//! taken when the queue first keeps a buffer of the pool in flight and let go when it lets the
//! pool go). Any number of takers: each takes a stretch with one compare-and-swap on the head,
//! after reading it, so a taker that lost the race reads again. Buffers in the cache count as
//! available, and a pool's `alloc` finds them there, so a cache never strands a buffer.

// The cache's atomics are loom's when model-checked, as the free stack's are.
#[cfg(loom)]
use loom::sync::atomic::{AtomicBool, AtomicU32};
use std::sync::atomic::Ordering;
#[cfg(not(loom))]
use std::sync::atomic::{AtomicBool, AtomicU32};

/// Buffers a pool's cache holds at most: room for the completions of a few bursts.
#[cfg(not(loom))]
pub(crate) const CACHE_SIZE: usize = 256;
/// Loom-sized: a model's few puts fill the ring and wrap it (`--cfg loom` builds only).
#[cfg(loom)]
pub(crate) const CACHE_SIZE: usize = 4;

/// A cache's slots, as its producer puts buffers in them ([`Fill::put`]).
pub(crate) type CacheSlots = [AtomicU32; CACHE_SIZE];

/// See the module documentation.
pub(crate) struct BufferCache {
    slots: Box<CacheSlots>,
    /// Index (wrapping) of the oldest cached buffer; moved by takers, with compare-and-swap.
    head: AtomicU32,
    /// Index (wrapping) past the newest cached buffer; moved only by the producer.
    tail: AtomicU32,
    /// A send queue holds the producer's claim.
    claimed: AtomicBool,
}

/// A producer's fill in progress: buffers put since [`BufferCache::begin_fill`], published
/// together by [`BufferCache::publish`].
#[derive(Clone, Copy, Default)]
pub(crate) struct Fill {
    /// Where the fill started (wrapping).
    start: u32,
    /// Where the next buffer goes (wrapping).
    tail: u32,
    /// Where the room ends (wrapping): `tail == end` when the cache is full.
    end: u32,
}

impl Fill {
    /// True while another buffer fits.
    #[inline(always)]
    pub(crate) fn has_room(&self) -> bool {
        self.tail != self.end
    }

    /// Buffers put so far.
    #[inline(always)]
    pub(crate) fn put_count(&self) -> u32 {
        self.tail.wrapping_sub(self.start)
    }

    /// Puts `index` in the cache's `slots` (the caller saw room left).
    #[inline(always)]
    pub(crate) fn put(&mut self, slots: &CacheSlots, index: u32) {
        slots[self.tail as usize % CACHE_SIZE].store(index, Ordering::Relaxed);
        self.tail = self.tail.wrapping_add(1);
    }
}

impl Default for BufferCache {
    fn default() -> Self {
        Self {
            slots: Box::new(std::array::from_fn(|_| AtomicU32::new(0))),
            head: AtomicU32::new(0),
            tail: AtomicU32::new(0),
            claimed: AtomicBool::new(false),
        }
    }
}

impl BufferCache {
    /// Takes the producer's claim; false when another send queue holds it.
    pub(crate) fn claim(&self) -> bool {
        self.claimed
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }

    /// Lets go of the producer's claim (held by the caller).
    pub(crate) fn release(&self) {
        self.claimed.store(false, Ordering::Release);
    }

    /// The slots the producer puts buffers in.
    #[inline(always)]
    pub(crate) fn slots(&self) -> &CacheSlots {
        &self.slots
    }

    /// Starts a fill (by the claim's holder): the room left now.
    #[inline(always)]
    pub(crate) fn begin_fill(&self) -> Fill {
        let tail = self.tail.load(Ordering::Relaxed);
        let head = self.head.load(Ordering::Acquire);
        Fill {
            start: tail,
            tail,
            end: head.wrapping_add(CACHE_SIZE as u32),
        }
    }

    /// Publishes the buffers `fill` put: takers see them from here on.
    #[inline(always)]
    pub(crate) fn publish(&self, fill: Fill) {
        if fill.put_count() > 0 {
            self.tail.store(fill.tail, Ordering::Release);
        }
    }

    /// Takes up to `out.len()` buffers, oldest first, into `out`; returns how many.
    #[inline]
    pub(crate) fn take(&self, out: &mut [u32]) -> usize {
        // The head is read with Acquire (here and when a compare-and-swap fails), never
        // Relaxed: the taker that moved it to `head` had read a tail at or past `head`, and
        // acquiring its move orders that tail before the tail read below. A relaxed head could
        // be newer than the tail then read (the two loads reorder, on weak-memory machines and
        // in the compiler), and the taker would take slots past the tail, indexes never put
        // or already taken, and move the head past the tail (the loom model
        // `mem::pool::loom_tests::cache` finds it).
        let mut head = self.head.load(Ordering::Acquire);
        loop {
            let tail = self.tail.load(Ordering::Acquire);
            let n = (tail.wrapping_sub(head) as usize).min(out.len());
            if n == 0 {
                return 0;
            }
            for (k, slot) in out[..n].iter_mut().enumerate() {
                *slot = self.slots[head.wrapping_add(k as u32) as usize % CACHE_SIZE]
                    .load(Ordering::Relaxed);
            }
            // The slots read are ours only if no other taker moved the head meanwhile; the
            // producer writes a slot only once the head has passed it.
            match self.head.compare_exchange_weak(
                head,
                head.wrapping_add(n as u32),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return n,
                Err(seen) => head = seen,
            }
        }
    }

    /// Buffers cached now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        let tail = self.tail.load(Ordering::Acquire);
        tail.wrapping_sub(self.head.load(Ordering::Acquire)) as usize
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn one_producer_claims_and_takers_get_the_oldest_first_up_to_the_bound() {
        let cache = BufferCache::default();
        assert!(cache.claim());
        assert!(!cache.claim(), "a second send queue is refused the claim");
        let mut fill = cache.begin_fill();
        let mut put = 0;
        while fill.has_room() {
            fill.put(cache.slots(), put);
            put += 1;
        }
        assert_eq!(
            put as usize, CACHE_SIZE,
            "the fill stops at the cache's size"
        );
        assert_eq!(cache.len(), 0, "nothing is seen before it is published");
        cache.publish(fill);
        assert_eq!(cache.len(), CACHE_SIZE);
        let mut out = [0; 3];
        assert_eq!(cache.take(&mut out), 3);
        assert_eq!(out, [0, 1, 2]);
        let fill = cache.begin_fill();
        assert_eq!(
            fill.end.wrapping_sub(fill.tail),
            3,
            "room is what takers freed"
        );
        cache.release();
        assert!(cache.claim(), "a released claim can be taken again");
    }
}
