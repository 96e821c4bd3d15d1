//! The receive queue's 16-bit producer and consumer counters across their wrap: completions are
//! taken in ring order from the buffer posted in each slot, the ring is refilled to its size,
//! and a completion out of order is refused.

use super::{ReceiveQueueParts, RecvRing, RxQueue};
use crate::cq::CqRing;
use crate::mem::{Mbuf, Mempool};
use crate::test_support::{pool, region, NoDevice};
use cxdirect_hw::cqe::{CqeOpcode, CQE_INITIAL_OP_OWN, CQE_SIZE};
use std::sync::Arc;

/// WQEs in the test ring, and CQEs in its CQ.
const LOG_SIZE: u8 = 4;
const ENTRIES: u16 = 1 << LOG_SIZE;
const RQN: u32 = 9;
/// The test CQ's number, which the RQ's user index is.
const CQN: u32 = 4;
/// Bytes of one receive WQE (a single data segment).
const RX_WQE: usize = 16;

/// A receive queue of [`ENTRIES`] WQEs posted from `pool`, its counters moved on to
/// `0xfff0..0x0000` (the same slots, one ring's length before the 16-bit wrap).
fn queue(pool: &Mempool) -> RxQueue<NoDevice> {
    let cq_memory = region(usize::from(ENTRIES) * CQE_SIZE);
    for slot in 0..usize::from(ENTRIES) {
        cq_memory
            .write(slot * CQE_SIZE + CQE_SIZE - 1, &[CQE_INITIAL_OP_OWN])
            .unwrap();
    }
    let mut queue = RxQueue::new(ReceiveQueueParts {
        backend: Arc::new(NoDevice),
        ring: region(usize::from(ENTRIES) * RX_WQE),
        dbr: region(64),
        log_size: LOG_SIZE,
        cq: CqRing::new(cq_memory, region(64), LOG_SIZE, CQN, false).expect("a CQ over its memory"),
        rqn: RQN,
        pool: pool.clone(),
        published: Arc::default(),
        quarantine: Arc::default(),
        interrupt: None,
        striding: None,
    })
    .expect("a receive queue over its memory");
    assert_eq!((queue.ci, queue.pi), (0, ENTRIES), "filled on creation");
    queue.ci = 0u16.wrapping_sub(ENTRIES);
    queue.pi = 0;
    queue
}

/// The device reports a frame of `byte_cnt` bytes in the WQE at `wqe_counter`, in CQ entry
/// `cq_index`: the RQ's user index (its CQ's number) in `srqn_uidx`, a flow tag in
/// `sop_drop_qpn`.
fn complete(queue: &RxQueue<NoDevice>, cq_index: u32, wqe_counter: u16, byte_cnt: u32) {
    complete_as(queue, cq_index, wqe_counter, byte_cnt, CQN);
}

/// [`complete`] with `user_index` in `srqn_uidx`.
fn complete_as(
    queue: &RxQueue<NoDevice>,
    cq_index: u32,
    wqe_counter: u16,
    byte_cnt: u32,
    user_index: u32,
) {
    let mut cqe = [0u8; CQE_SIZE];
    cqe[0x20..0x24].copy_from_slice(&user_index.to_be_bytes());
    cqe[0x2c..0x30].copy_from_slice(&byte_cnt.to_be_bytes());
    cqe[0x38..0x3c].copy_from_slice(&0x77u32.to_be_bytes());
    cqe[0x3c..0x3e].copy_from_slice(&wqe_counter.to_be_bytes());
    let owner = (cq_index >> LOG_SIZE & 1) as u8;
    cqe[0x3f] = (CqeOpcode::RespSend as u8) << 4 | owner;
    queue.cq.device_writes(cq_index, &cqe);
}

/// The device address the WQE at ring index `index` gives the device to write.
fn posted_address(queue: &RxQueue<NoDevice>, index: u16) -> u64 {
    let RecvRing::Plain(ring) = &queue.ring else {
        panic!("the test queue has a plain ring of {RX_WQE}-byte WQEs");
    };
    let mut address = [0u8; 8];
    ring.read_bytes(u32::from(index), 8, &mut address);
    u64::from_be_bytes(address)
}

#[test]
fn completions_across_the_counter_wrap_take_each_slots_buffer_in_order() {
    let p = pool(48, 256);
    let mut rx = queue(&p);
    let mut cq_index = 0u32;
    let mut received = 0u32;
    for round in 0..12u16 {
        let n = 1 + (round * 5) % ENTRIES;
        let first = rx.ci;
        let addresses: Vec<u64> = (0..n)
            .map(|k| posted_address(&rx, first.wrapping_add(k)))
            .collect();
        for k in 0..n {
            complete(&rx, cq_index, first.wrapping_add(k), 60 + u32::from(k));
            cq_index += 1;
        }
        let mut out: Vec<Mbuf> = Vec::new();
        assert_eq!(rx.rx_burst(&mut out, 64).unwrap(), usize::from(n));
        for (k, m) in out.iter().enumerate() {
            assert_eq!(m.len(), 60 + k, "round {round}");
            assert_eq!(
                m.data_iova(),
                addresses[k],
                "round {round}: packet {k}'s buffer"
            );
        }
        assert_eq!(rx.ci, first.wrapping_add(n));
        // Refilled to the ring's size, and the device told the producer index.
        assert_eq!(rx.posted(), usize::from(ENTRIES));
        assert_eq!(rx.pi, rx.ci.wrapping_add(ENTRIES));
        assert_eq!(rx.dbr.word(0), u32::from(rx.pi));
        received += u32::from(n);
        drop(out);
        assert_eq!(p.available(), 48 - u32::from(ENTRIES));
    }
    assert!(rx.ci < 0xfff0, "the counters wrapped");
    let stats = rx.stats();
    assert_eq!(
        (stats.packets, stats.bad_cqes, stats.nombuf),
        (u64::from(received), 0, 0)
    );
}

#[test]
fn a_dry_pool_leaves_slots_empty_until_buffers_return() {
    // Exactly one ring's worth: every buffer is posted.
    let p = pool(u32::from(ENTRIES), 256);
    let mut rx = queue(&p);
    assert_eq!(p.available(), 0);
    for k in 0..6 {
        complete(&rx, k, rx.ci.wrapping_add(k as u16), 64);
    }
    let mut out: Vec<Mbuf> = Vec::new();
    assert_eq!(rx.rx_burst(&mut out, 64).unwrap(), 6);
    assert_eq!(rx.posted(), usize::from(ENTRIES) - 6);
    assert_eq!(rx.stats().nombuf, 1);
    drop(out);
    // Nothing to receive, but the ring is refilled from what came back.
    assert_eq!(rx.rx_burst(&mut Vec::new(), 64).unwrap(), 0);
    assert_eq!(rx.posted(), usize::from(ENTRIES));
    assert_eq!(rx.pi, rx.ci.wrapping_add(ENTRIES));
    assert_eq!(p.available(), 0);
}

#[test]
fn a_completion_for_a_wqe_not_the_oldest_is_refused() {
    // Past the oldest, before it, and the next one to post (when the ring is full).
    for skew in [1u16, 0xffff, ENTRIES] {
        let p = pool(32, 256);
        let mut rx = queue(&p);
        complete(&rx, 0, rx.ci.wrapping_add(skew), 64);
        let mut out: Vec<Mbuf> = Vec::new();
        assert_eq!(rx.rx_burst(&mut out, 64).unwrap(), 0, "skew {skew}");
        assert!(rx.in_error());
        assert_eq!(rx.stats().bad_cqes, 1);
        assert_eq!((rx.ci, rx.posted()), (0xfff0, usize::from(ENTRIES)));
        assert_eq!(p.available(), 32 - u32::from(ENTRIES));
    }
}

#[test]
fn a_completion_naming_another_queue_s_user_index_is_refused() {
    // The device writes the RQ's user index into `srqn_uidx`; a completion naming another
    // (a corrupt or misdirected CQE) is refused whatever flow tag it carries.
    let p = pool(32, 256);
    let mut rx = queue(&p);
    complete_as(&rx, 0, rx.ci, 64, CQN + 1);
    let mut out: Vec<Mbuf> = Vec::new();
    assert_eq!(rx.rx_burst(&mut out, 64).unwrap(), 0);
    assert!(rx.in_error());
    assert_eq!(rx.stats().bad_cqes, 1);
    assert_eq!(p.available(), 32 - u32::from(ENTRIES), "no buffer lost");
}
