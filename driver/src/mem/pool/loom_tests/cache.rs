//! The pool's buffer cache model-checked with loom: one producer (the claim's holder) filling
//! and publishing while takers take, alone and through the pool, and the claim handed from one
//! producer to another. The cache is loom-sized ([`CACHE_SIZE`] is 4 under `--cfg loom`), so a
//! few puts fill the ring and wrap it.
//!
//! Each index put is marked when taken: at the end of every interleaving each was taken
//! exactly once (what is left in the cache is taken last), and none was taken that was never
//! put.

use super::{assert_available_in_range, give_one, model, take_one, Owners};
use crate::mem::cache::{BufferCache, CACHE_SIZE};
use crate::test_support::pool;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;

/// How often each index `1..=count` was taken. Plain atomics, as [`Owners`]'s.
struct Taken {
    marks: Vec<AtomicU32>,
}

impl Taken {
    fn new(count: u32) -> Arc<Self> {
        Arc::new(Self {
            marks: (0..=count).map(|_| AtomicU32::new(0)).collect(),
        })
    }

    /// Marks the indexes a take returned; an index never put (0 is never put) or taken
    /// before fails.
    fn mark(&self, taken: &[u32]) {
        for &index in taken {
            assert!(
                index != 0 && (index as usize) < self.marks.len(),
                "index {index} taken, never put"
            );
            let before = self.marks[index as usize].fetch_add(1, Ordering::Relaxed);
            assert_eq!(before, 0, "index {index} taken twice");
        }
    }

    /// Every index `1..=put` was taken once, and none after `put`.
    fn assert_each_once(&self, put: u32) {
        for (index, mark) in self.marks.iter().enumerate().skip(1) {
            let want = u32::from(index as u32 <= put);
            assert_eq!(
                mark.load(Ordering::Relaxed),
                want,
                "index {index} taken a wrong number of times ({put} put)"
            );
        }
    }
}

/// Takes up to `want` (at most 2) indexes from `cache` and marks them.
fn take_and_mark(cache: &BufferCache, taken: &Taken, want: usize) -> usize {
    let mut out = [0u32; 2];
    let n = cache.take(&mut out[..want]);
    assert!(n <= want, "a take of {want} returned {n}");
    taken.mark(&out[..n]);
    n
}

/// Puts `first..` into the cache, up to `count` or until it is full, and publishes them (the
/// caller holds the claim); returns the next index to put.
fn fill_and_publish(cache: &BufferCache, first: u32, count: u32) -> u32 {
    let mut fill = cache.begin_fill();
    let mut next = first;
    while next < first + count && fill.has_room() {
        fill.put(cache.slots(), next);
        next += 1;
    }
    assert!(fill.put_count() as usize <= CACHE_SIZE);
    cache.publish(fill);
    next
}

/// Takes what is left in `cache` and marks it: the bound holds, and nothing is left after.
fn drain(cache: &BufferCache, taken: &Taken) {
    let left = cache.len();
    assert!(
        left <= CACHE_SIZE,
        "{left} cached, more than the ring holds"
    );
    let mut out = [0u32; CACHE_SIZE + 1];
    let n = cache.take(&mut out);
    assert_eq!(n, left, "a take of everything got {n} of {left} cached");
    taken.mark(&out[..n]);
    assert_eq!(cache.take(&mut out), 0);
}

#[test]
fn a_producer_filling_past_the_ring_while_two_takers_take_hands_out_each_index_once() {
    // Two fills of up to 3: the second finds room only where the takers freed it, so the
    // producer writes slots a taker may be reading (its compare-and-swap must then fail).
    model(|| {
        let cache = Arc::new(BufferCache::default());
        let taken = Taken::new(6);
        let takers: Vec<_> = (0..2)
            .map(|_| {
                let (cache, taken) = (Arc::clone(&cache), Arc::clone(&taken));
                loom::thread::spawn(move || {
                    take_and_mark(&cache, &taken, 2);
                    take_and_mark(&cache, &taken, 2);
                })
            })
            .collect();
        assert!(cache.claim());
        let next = fill_and_publish(&cache, 1, 3);
        let next = fill_and_publish(&cache, next, 3);
        for t in takers {
            t.join().unwrap();
        }
        drain(&cache, &taken);
        taken.assert_each_once(next - 1);
        cache.release();
    });
}

#[test]
fn a_claim_handed_to_another_producer_while_a_taker_takes_loses_no_index() {
    // The second producer's fill starts where the first's published one ended only if the
    // claim's hand-over orders the first's tail before the second's read of it.
    model(|| {
        let cache = Arc::new(BufferCache::default());
        let taken = Taken::new(4);
        let holders = Arc::new(AtomicUsize::new(0));
        let produce = |cache: &BufferCache, holders: &AtomicUsize, first: u32| {
            while !cache.claim() {
                loom::thread::yield_now();
            }
            assert_eq!(
                holders.fetch_add(1, Ordering::Relaxed),
                0,
                "two claim holders"
            );
            let next = fill_and_publish(cache, first, 2);
            holders.fetch_sub(1, Ordering::Relaxed);
            cache.release();
            next - first
        };
        let first = {
            let (cache, holders) = (Arc::clone(&cache), Arc::clone(&holders));
            loom::thread::spawn(move || produce(&cache, &holders, 1))
        };
        let taker = {
            let (cache, taken) = (Arc::clone(&cache), Arc::clone(&taken));
            loom::thread::spawn(move || take_and_mark(&cache, &taken, 2))
        };
        let second = produce(&cache, &holders, 3);
        let first = first.join().unwrap();
        taker.join().unwrap();
        // Both fit whatever the order: 4 slots, 2 each.
        assert_eq!((first, second), (2, 2));
        drain(&cache, &taken);
        taken.assert_each_once(4);
    });
}

#[test]
fn a_claim_holder_returning_buffers_to_the_cache_while_another_thread_allocates() {
    // A send queue's completions: buffers it kept go into the cache (the pool's
    // `publish_fill`), one fill each, and its own receive refill takes one back, while another
    // thread allocates across the cache and the free stack and frees onto the stack.
    model(|| {
        let pool = pool(3, 256);
        let owners = Owners::new(&pool);
        let shared = pool.shared();
        assert!(shared.cache.claim());
        let mut kept = Vec::new();
        for _ in 0..2 {
            let mut m = take_one(&pool, &owners, 1).expect("a fresh pool has buffers");
            kept.push(m.detach().expect("a single buffer"));
        }
        let other = {
            let (pool, owners) = (pool.clone(), Arc::clone(&owners));
            loom::thread::spawn(move || {
                let mut held = Vec::new();
                pool.alloc_bulk(&mut held, 2);
                for m in &held {
                    owners.take(m, 2);
                }
                assert_available_in_range(&pool);
                if let Some(m) = held.pop() {
                    give_one(&owners, m, 2);
                }
                held.extend(take_one(&pool, &owners, 2));
                for m in held {
                    give_one(&owners, m, 2);
                }
            })
        };
        for &index in &kept {
            let mut fill = shared.cache.begin_fill();
            assert!(fill.has_room(), "the cache has room for two");
            owners.give_index(index as usize, 1);
            fill.put(shared.cache.slots(), index);
            shared.publish_fill(fill);
        }
        if let Some(m) = take_one(&pool, &owners, 1) {
            give_one(&owners, m, 1);
        }
        other.join().unwrap();
        shared.cache.release();
        super::assert_whole(&pool, &owners);
    });
}
