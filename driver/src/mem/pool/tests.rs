//! The pool's lock-free stack under several threads at once: no buffer is handed out twice,
//! and every buffer is back when the threads are done.
//!
//! Each buffer has an owner flag: a thread that takes a buffer swaps its own mark in and
//! expects none there, and swaps it out before giving the buffer back. Two threads holding one
//! buffer (an ABA on the stack's head, a chain linked wrong) trip the swap.

use super::Mempool;
use crate::mem::{Mbuf, PacketBurst, HEADROOM};
use crate::test_support::pool;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// Longest any one stress test runs, whatever its operation count.
const TIME_BOUND: Duration = Duration::from_secs(2);

/// Who holds each buffer of a pool (0: the pool).
struct BufferOwners {
    marks: Vec<AtomicU32>,
    buf_size: usize,
}

impl BufferOwners {
    fn new(pool: &Mempool) -> Self {
        Self {
            marks: (0..pool.capacity()).map(|_| AtomicU32::new(0)).collect(),
            buf_size: pool.buf_size() as usize,
        }
    }

    /// The pool index of the fresh buffer `m`.
    fn index_of(&self, m: &Mbuf) -> usize {
        (m.memory_offset() - usize::from(HEADROOM)) / self.buf_size
    }

    /// `me` now holds buffer `index`, which nobody else may.
    fn take(&self, index: usize, me: u32) {
        let before = self.marks[index].swap(me, Ordering::AcqRel);
        assert_eq!(
            before, 0,
            "buffer {index} handed to {me} while {before} holds it"
        );
    }

    /// `me` gives buffer `index` back (before the pool has it again).
    fn give(&self, index: usize, me: u32) {
        let before = self.marks[index].swap(0, Ordering::AcqRel);
        assert_eq!(
            before, me,
            "buffer {index} given back by {me}, held by {before}"
        );
    }
}

/// A small generator of choices, different per thread and deterministic.
struct Choices(u64);

impl Choices {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// What a stress thread holds: whole `Mbuf`s and bare indexes (as a receive ring does).
#[derive(Default)]
struct Held {
    mbufs: Vec<Mbuf>,
    indexes: Vec<u32>,
}

impl Held {
    fn len(&self) -> usize {
        self.mbufs.len() + self.indexes.len()
    }
}

/// One thread's work: `ops` operations (or until `deadline`), each taking or returning buffers
/// one at a time or in bulk, never holding more than `max_held`; returns how many buffers it
/// took.
fn churn(
    pool: &Mempool,
    owners: &BufferOwners,
    me: u32,
    ops: u32,
    max_held: usize,
    deadline: Instant,
) -> u64 {
    let mut choose = Choices(0x9e37_79b9_7f4a_7c15 ^ u64::from(me) << 32 | 1);
    let mut held = Held::default();
    let mut taken = 0u64;
    for op in 0..ops {
        if op % 256 == 0 && Instant::now() > deadline {
            break;
        }
        let room = max_held - held.len();
        match choose.below(6) {
            // One buffer, as an `Mbuf`.
            0 if room > 0 => {
                if let Some(m) = pool.alloc() {
                    owners.take(owners.index_of(&m), me);
                    held.mbufs.push(m);
                    taken += 1;
                }
            }
            // Several, as `Mbuf`s.
            1 if room > 0 => {
                let want = 1 + choose.below(room.min(80) as u64) as usize;
                let from = held.mbufs.len();
                let got = pool.alloc_bulk(&mut held.mbufs, want);
                assert_eq!(held.mbufs.len() - from, got);
                for m in &held.mbufs[from..] {
                    owners.take(owners.index_of(m), me);
                }
                taken += got as u64;
            }
            // Several, as bare indexes.
            2 if room > 0 => {
                let want = 1 + choose.below(room.min(80) as u64) as usize;
                let got = pool.take_each(want, |index| {
                    owners.take(index as usize, me);
                    held.indexes.push(index);
                });
                taken += got as u64;
            }
            // One `Mbuf` back (its drop returns it).
            3 => {
                if let Some(m) = held.mbufs.pop() {
                    owners.give(owners.index_of(&m), me);
                    drop(m);
                }
            }
            // Several `Mbuf`s back in one exchange.
            4 => {
                let n = 1 + choose.below(64) as usize;
                let mut burst = PacketBurst::new();
                for m in held.mbufs.drain(held.mbufs.len().saturating_sub(n)..) {
                    owners.give(owners.index_of(&m), me);
                    assert!(burst.push(m).is_ok(), "a burst takes one pool's packets");
                }
                burst.clear();
            }
            // Bare indexes back, one at a time.
            _ => {
                let n = 1 + choose.below(8) as usize;
                for index in held.indexes.drain(held.indexes.len().saturating_sub(n)..) {
                    owners.give(index as usize, me);
                    pool.give_back(index);
                }
            }
        }
    }
    for m in held.mbufs.drain(..) {
        owners.give(owners.index_of(&m), me);
    }
    for index in held.indexes.drain(..) {
        owners.give(index as usize, me);
        pool.give_back(index);
    }
    taken
}

/// Runs `threads` churning threads on `pool` at once and checks that the pool ends whole.
fn stress(pool: &Mempool, threads: u32, ops: u32, max_held: usize) {
    let owners = BufferOwners::new(pool);
    let start = Barrier::new(threads as usize);
    let taken: u64 = std::thread::scope(|s| {
        let workers: Vec<_> = (1..=threads)
            .map(|me| {
                let (owners, start) = (&owners, &start);
                s.spawn(move || {
                    start.wait();
                    // From the start line, not from before the threads were spawned: on a
                    // loaded machine spawning alone can take most of the bound.
                    let deadline = Instant::now() + TIME_BOUND;
                    churn(pool, owners, me, ops, max_held, deadline)
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().expect("worker")).sum()
    });
    // Enough traffic for the test to mean something: many times round the pool.
    assert!(
        taken >= 8 * u64::from(pool.capacity()),
        "only {taken} buffers taken"
    );
    assert!(owners.marks.iter().all(|m| m.load(Ordering::Relaxed) == 0));
    assert_eq!(pool.available(), pool.capacity());
    // The free stack holds every buffer exactly once: taking them all gives each index once,
    // and then the pool is dry.
    let mut all = Vec::new();
    assert_eq!(
        pool.alloc_bulk(&mut all, pool.capacity() as usize + 1),
        pool.capacity() as usize
    );
    let mut seen = vec![false; pool.capacity() as usize];
    for m in &all {
        let index = owners.index_of(m);
        assert!(!seen[index], "buffer {index} twice on the free stack");
        seen[index] = true;
    }
    assert!(pool.alloc().is_none());
    drop(all);
    assert_eq!(pool.available(), pool.capacity());
}

#[test]
fn threads_taking_and_returning_in_bulk_never_share_a_buffer() {
    // Room for each thread to hold a share, so the pool runs dry now and then.
    let p = pool(256, 256);
    stress(&p, 8, 100_000, 48);
}

#[test]
fn a_small_pool_contended_by_many_threads_never_shares_a_buffer() {
    // Few buffers and short holds: the stack's head changes hands constantly (where an
    // untagged head would be fooled by a buffer taken and returned in between).
    let p = pool(16, 256);
    stress(&p, 6, 150_000, 4);
}

#[test]
fn one_thread_gets_every_buffer_once() {
    let p = pool(100, 256);
    stress(&p, 1, 5_000, 100);
}

#[test]
fn the_data_address_follows_the_buffer_and_the_length_stays_within_capacity() {
    let p = pool(4, 256);
    let mut a = p.alloc().expect("a buffer");
    let b = p.alloc().expect("a second buffer");
    let (pa, pb) = (
        a.data_ptr().expect("driver memory has a CPU address"),
        b.data_ptr().expect("driver memory has a CPU address"),
    );
    // The addresses are as far apart as the packets are in the pool's memory.
    assert_eq!(
        pb.as_ptr() as isize - pa.as_ptr() as isize,
        b.memory_offset() as isize - a.memory_offset() as isize
    );
    a.set_data(&[1, 2, 3, 4]).unwrap();
    a.set_len_within_capacity(a.capacity()).unwrap();
    assert_eq!(a.len(), a.capacity());
    assert!(a.set_len_within_capacity(a.capacity() + 1).is_err());
    assert_eq!(
        a.len(),
        a.capacity(),
        "a refused length leaves it unchanged"
    );
    a.set_len_within_capacity(2).unwrap();
    let mut out = [0u8; 4];
    assert_eq!(a.read(0, &mut out), 2);
    assert_eq!(out[..2], [1, 2]);
}
