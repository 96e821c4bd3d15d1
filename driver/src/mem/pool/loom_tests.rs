//! The pool's lock-free stack model-checked with loom: every interleaving (up to a bound on
//! preemptions) of two threads taking and returning buffers, singly and in bulk, with the
//! stack's atomics replaced by loom's; the pool's buffer cache in [`cache`]. Run with
//! `RUSTFLAGS="--cfg loom" cargo test -p cxdirect --lib mem::pool::loom_tests`.
//!
//! Each buffer has an owner flag (as in the threaded stress test); at the end of every
//! interleaving the pool must hold each buffer exactly once.

mod cache;

use super::Mempool;
use crate::mem::{Mbuf, PacketBurst, HEADROOM};
use crate::test_support::pool;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;

/// Who holds each buffer of a pool (0: the pool). Plain atomics: loom runs one thread at a
/// time, and these only check what the pool hands out.
struct Owners {
    marks: Vec<AtomicU32>,
    buf_size: usize,
}

impl Owners {
    fn new(pool: &Mempool) -> Arc<Self> {
        Arc::new(Self {
            marks: (0..pool.capacity()).map(|_| AtomicU32::new(0)).collect(),
            buf_size: pool.buf_size() as usize,
        })
    }

    fn index_of(&self, m: &Mbuf) -> usize {
        (m.memory_offset() - usize::from(HEADROOM)) / self.buf_size
    }

    fn take(&self, m: &Mbuf, me: u32) {
        let index = self.index_of(m);
        let before = self.marks[index].swap(me, Ordering::Relaxed);
        assert_eq!(
            before, 0,
            "buffer {index} handed to {me} while {before} holds it"
        );
    }

    fn give(&self, m: &Mbuf, me: u32) {
        self.give_index(self.index_of(m), me);
    }

    /// [`Owners::give`] for a buffer held by index (detached from its `Mbuf`).
    fn give_index(&self, index: usize, me: u32) {
        let before = self.marks[index].swap(0, Ordering::Relaxed);
        assert_eq!(
            before, me,
            "buffer {index} given back by {me}, held by {before}"
        );
    }
}

/// Takes one buffer, or `None` when the pool is dry.
fn take_one(pool: &Mempool, owners: &Owners, me: u32) -> Option<Mbuf> {
    let m = pool.alloc()?;
    owners.take(&m, me);
    Some(m)
}

fn give_one(owners: &Owners, m: Mbuf, me: u32) {
    owners.give(&m, me);
    drop(m);
}

/// The pool holds every buffer once: taking them all gives each index once, then none.
fn assert_whole(pool: &Mempool, owners: &Owners) {
    assert_eq!(pool.available(), pool.capacity());
    let mut all = Vec::new();
    let count = pool.capacity() as usize;
    assert_eq!(pool.alloc_bulk(&mut all, count + 1), count);
    let mut seen = vec![false; count];
    for m in &all {
        let index = owners.index_of(m);
        assert!(!seen[index], "buffer {index} twice on the free stack");
        seen[index] = true;
    }
    assert!(pool.alloc().is_none());
}

/// The pool's free count, read while other threads take and return buffers, never reads
/// more than the pool holds (nor below zero, which would wrap).
fn assert_available_in_range(pool: &Mempool) {
    let available = pool.available();
    assert!(
        available <= pool.capacity(),
        "{available} available of {}",
        pool.capacity()
    );
}

/// Runs `f` under every interleaving loom explores and checks that it explored many.
fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    // Bugs of a two-thread stack show within a few preemptions; unbounded takes far longer.
    builder.preemption_bound = Some(3);
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    builder.check(move || {
        counted.fetch_add(1, Ordering::Relaxed);
        f();
    });
    let runs = runs.load(Ordering::Relaxed);
    eprintln!("loom explored {runs} interleavings");
    // One run would mean the threads' operations never raced: a model that tests nothing.
    assert!(runs > 100, "only {runs} interleavings explored");
}

#[test]
fn a_buffer_taken_and_returned_between_a_read_and_an_exchange_is_not_handed_out_twice() {
    // The ABA case: one thread reads the head and its successor, another takes both and
    // returns the head; the first thread's exchange must then fail.
    model(|| {
        let pool = pool(3, 256);
        let owners = Owners::new(&pool);
        let other = {
            let (pool, owners) = (pool.clone(), Arc::clone(&owners));
            loom::thread::spawn(move || {
                if let Some(m) = take_one(&pool, &owners, 2) {
                    give_one(&owners, m, 2);
                }
                assert_available_in_range(&pool);
            })
        };
        let first = take_one(&pool, &owners, 1);
        let second = take_one(&pool, &owners, 1);
        if let Some(m) = first {
            give_one(&owners, m, 1);
        }
        if let Some(m) = second {
            give_one(&owners, m, 1);
        }
        other.join().unwrap();
        assert_whole(&pool, &owners);
    });
}

#[test]
fn bulk_takes_and_chained_returns_against_single_ones() {
    model(|| {
        let pool = pool(4, 256);
        let owners = Owners::new(&pool);
        let other = {
            let (pool, owners) = (pool.clone(), Arc::clone(&owners));
            loom::thread::spawn(move || {
                let mut held = Vec::new();
                pool.alloc_bulk(&mut held, 2);
                let mut burst = PacketBurst::new();
                for m in held.iter() {
                    owners.take(m, 2);
                }
                for m in held.drain(..) {
                    owners.give(&m, 2);
                    assert!(burst.push(m).is_ok());
                }
                // Both back in one exchange.
                burst.clear();
                assert_available_in_range(&pool);
            })
        };
        if let Some(m) = take_one(&pool, &owners, 1) {
            give_one(&owners, m, 1);
        }
        other.join().unwrap();
        assert_whole(&pool, &owners);
    });
}

#[test]
fn buffers_taken_as_they_are_returned_keep_the_free_count_in_range() {
    // Both buffers returned, one at a time, by one thread while the other takes them. Were a
    // buffer counted only after the exchange that returns it, the taker could count it out
    // first, and the free count would wrap below zero.
    model(|| {
        let pool = pool(2, 256);
        let owners = Owners::new(&pool);
        let held: Vec<_> = (0..2).filter_map(|_| take_one(&pool, &owners, 1)).collect();
        assert_eq!(held.len(), 2);
        let other = {
            let (pool, owners) = (pool.clone(), Arc::clone(&owners));
            loom::thread::spawn(move || {
                let mut got = Vec::new();
                for _ in 0..2 {
                    got.extend(take_one(&pool, &owners, 2));
                    assert_available_in_range(&pool);
                }
                for m in got {
                    give_one(&owners, m, 2);
                }
            })
        };
        for m in held {
            give_one(&owners, m, 1);
            assert_available_in_range(&pool);
        }
        other.join().unwrap();
        assert_whole(&pool, &owners);
    });
}
