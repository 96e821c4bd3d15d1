//! The in-flight table: buffers kept by slot (by index or whole, singly or in runs) go back to
//! their own pool exactly once when their slots complete.

use super::{InFlight, Kept, MAX_POOLS};
use crate::mem::{Mbuf, Mempool};
use crate::test_support::pool;

/// Keeps a fresh buffer of `pool` at `slot` as a send would, dropping what is left of it.
fn send_one(table: &mut InFlight, slot: usize, pool: &Mempool) -> Kept {
    let mut m = pool.alloc().expect("a free buffer");
    let kept = table.keep(slot, &mut m);
    match kept {
        Kept::Index => drop(m),
        Kept::Whole => table.keep_whole(slot, m),
    }
    kept
}

/// Keeps `n` fresh buffers of `pool` as the packets of one multi-packet WQE at `slot`.
fn send_run(table: &mut InFlight, slot: usize, pool: &Mempool, n: usize) {
    for _ in 0..n {
        let mut m = pool.alloc().expect("a free buffer");
        let place = table.run_place(&m).expect("a place for the pool");
        table.keep_in_run(place, &mut m);
    }
    table.close_run(slot);
}

#[test]
fn slots_hold_their_buffers_until_completed() {
    let p = pool(8, 256);
    let mut table = InFlight::new(8);
    for slot in 0..4 {
        assert!(send_one(&mut table, slot, &p) == Kept::Index);
    }
    // The emptied `Mbuf`s were dropped; the buffers stay taken.
    assert_eq!((table.count(), p.available()), (4, 4));
    table.complete(0, 2);
    assert_eq!((table.count(), p.available()), (2, 6));
    table.complete(2, 2);
    assert_eq!((table.count(), p.available()), (0, 8));
}

#[test]
fn a_completed_slot_gives_nothing_back_twice() {
    let p = pool(8, 256);
    let mut table = InFlight::new(8);
    send_one(&mut table, 3, &p);
    table.complete(3, 1);
    assert_eq!(p.available(), 8);
    // Empty slots, completed again (a stale or repeated completion): nothing returns.
    table.complete(0, 8);
    table.complete(3, 1);
    assert_eq!((table.count(), p.available()), (0, 8));
    // Each buffer is still handed out once.
    let mut taken: Vec<Mbuf> = Vec::new();
    assert_eq!(p.alloc_bulk(&mut taken, 16), 8);
}

#[test]
fn a_chained_packet_is_kept_whole_and_freed_on_completion() {
    let p = pool(8, 256);
    let mut table = InFlight::new(8);
    let mut head = p.alloc().unwrap();
    head.chain(p.alloc().unwrap());
    head.chain(p.alloc().unwrap());
    assert!(table.keep(5, &mut head) == Kept::Whole);
    table.keep_whole(5, head);
    assert_eq!((table.count(), p.available()), (1, 5));
    table.complete(5, 1);
    assert_eq!((table.count(), p.available()), (0, 8));
}

#[test]
fn buffers_of_several_pools_go_back_to_their_own() {
    let pools: Vec<Mempool> = (0..MAX_POOLS + 1).map(|_| pool(4, 256)).collect();
    let mut table = InFlight::new(16);
    // Interleaved, so a completion switches pools from one slot to the next.
    for round in 0..2 {
        for (k, p) in pools.iter().enumerate() {
            let slot = round * pools.len() + k;
            let kept = send_one(&mut table, slot, p);
            // The first pools are kept by index; a pool past them is kept whole.
            assert!(
                kept == if k < MAX_POOLS {
                    Kept::Index
                } else {
                    Kept::Whole
                }
            );
        }
    }
    assert_eq!(table.count(), 2 * pools.len());
    for p in &pools {
        assert_eq!(p.available(), 2);
    }
    // The first round completes: one buffer back to each pool.
    table.complete(0, pools.len());
    for p in &pools {
        assert_eq!(p.available(), 3);
    }
    table.complete(pools.len(), pools.len());
    for p in &pools {
        assert_eq!(p.available(), 4);
    }
    assert_eq!(table.count(), 0);
}

#[test]
fn runs_are_completed_by_the_slot_that_closed_them() {
    let p = pool(16, 256);
    let mut table = InFlight::new(8);
    send_one(&mut table, 0, &p);
    send_run(&mut table, 1, &p, 3);
    send_run(&mut table, 2, &p, 4);
    send_one(&mut table, 3, &p);
    assert_eq!((table.count(), p.available()), (9, 7));
    table.complete(0, 2);
    assert_eq!((table.count(), p.available()), (5, 11));
    table.complete(2, 2);
    assert_eq!((table.count(), p.available()), (0, 16));
}

#[test]
fn a_ring_full_of_runs_of_four_is_kept_whole() {
    // Every slot a multi-packet WQE of four packets: the most a ring can have in flight.
    let p = pool(64, 256);
    let mut table = InFlight::new(8);
    for round in 0..3 {
        for slot in 0..8 {
            send_run(&mut table, slot, &p, 4);
        }
        assert_eq!((table.count(), p.available()), (32, 32), "round {round}");
        table.complete(0, 8);
        assert_eq!((table.count(), p.available()), (0, 64), "round {round}");
    }
}

#[test]
fn slots_and_runs_are_reused_across_the_wrap_of_the_queue_counters() {
    let p = pool(32, 256);
    let entries = 8usize;
    let mask = (entries - 1) as u16;
    let mut table = InFlight::new(entries);
    // The send queue's 16-bit producer and consumer counters, started just before they wrap.
    let (mut pi, mut ci) = (0xfff0_u16, 0xfff0_u16);
    for round in 0..40u16 {
        // Fill up to six slots, every third one a run of up to four packets.
        for k in 0..6u16 {
            let slot = usize::from(pi & mask);
            if (round + k) % 3 == 0 {
                send_run(&mut table, slot, &p, usize::from(1 + (round + k) % 4));
            } else {
                send_one(&mut table, slot, &p);
            }
            pi = pi.wrapping_add(1);
        }
        let outstanding = pi.wrapping_sub(ci);
        assert_eq!(outstanding, 6);
        let in_flight = table.count() as u32;
        assert_eq!(p.available(), 32 - in_flight);
        // Complete all but the last one or two, as completions arrive in any grouping.
        let done = outstanding - 1 - round % 2;
        let from = ci;
        table.complete(usize::from(from & mask), usize::from(done));
        ci = ci.wrapping_add(done);
        assert_eq!(p.available(), 32 - table.count() as u32);
        // Then the rest, so every round starts empty.
        let from = ci;
        let rest = pi.wrapping_sub(ci);
        table.complete(usize::from(from & mask), usize::from(rest));
        ci = pi;
        assert_eq!((table.count(), p.available()), (0, 32), "round {round}");
    }
    assert!(pi < 0xfff0, "the counters wrapped");
}

#[test]
fn take_all_hands_back_everything_in_flight() {
    let a = pool(8, 256);
    let b = pool(8, 256);
    let mut table = InFlight::new(8);
    send_one(&mut table, 0, &a);
    send_run(&mut table, 1, &b, 3);
    let mut chained = a.alloc().unwrap();
    chained.chain(b.alloc().unwrap());
    assert!(table.keep(2, &mut chained) == Kept::Whole);
    table.keep_whole(2, chained);
    send_one(&mut table, 3, &b);
    assert_eq!((a.available(), b.available()), (6, 3));

    let taken = table.take_all();
    // One `Mbuf` per packet: the single, the run's three, the chained one, the last single.
    assert_eq!(taken.len(), 6);
    assert_eq!(table.count(), 0);
    drop(taken);
    assert_eq!((a.available(), b.available()), (8, 8));
    // Nothing is left to complete.
    table.complete(0, 8);
    assert_eq!((a.available(), b.available()), (8, 8));
}

/// The pool's buffer cache: one send queue fills it from its completions, up to its bound, the
/// rest going to the free stack; a second queue sending from the same pool uses the stack; and
/// every buffer is handed out once, whichever way it came back.
#[test]
fn completions_fill_the_pool_cache_of_the_queue_holding_its_claim_and_no_more() {
    use crate::mem::CACHE_SIZE;
    let total = CACHE_SIZE + 64;
    let p = pool(total as u32 + 8, 256);
    let mut first = InFlight::new(total);
    let mut second = InFlight::new(8);
    for slot in 0..total {
        send_one(&mut first, slot, &p);
    }
    send_one(&mut second, 0, &p);
    assert!(
        !p.shared().cache().claim(),
        "the first queue holds the claim"
    );
    first.complete(0, total);
    second.complete(0, 1);
    assert_eq!(
        p.shared().cache().len(),
        CACHE_SIZE,
        "the cache holds no more than its size"
    );
    assert_eq!(
        p.available() as usize,
        total + 8,
        "cached buffers count as available"
    );
    let mut taken: Vec<Mbuf> = Vec::new();
    assert_eq!(p.alloc_bulk(&mut taken, total + 16), total + 8);
    let mut indexes: Vec<u64> = taken.iter().map(|m| m.data_iova()).collect();
    indexes.sort_unstable();
    indexes.dedup();
    assert_eq!(indexes.len(), total + 8, "each buffer handed out once");
    drop(taken);
    drop(first);
    assert!(
        p.shared().cache().claim(),
        "a dropped queue lets the claim go"
    );
}
