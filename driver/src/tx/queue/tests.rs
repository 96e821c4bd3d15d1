//! The send queue's 16-bit producer and consumer counters across their wrap: the ring fills to
//! its size, completions free exactly the WQEs up to the one reported, and a completion for a
//! WQE not in flight is refused.

use super::{SendQueueParts, TxQueue};
use crate::cq::CqRing;
use crate::mem::{Mbuf, Mempool};
use crate::test_support::{pool, region, NoDevice};
use crate::tx::InlineMode;
use cxdirect_hw::cqe::{CqeOpcode, CQE_INITIAL_OP_OWN, CQE_SIZE};
use cxdirect_hw::wqe::WQE_BB;
use std::sync::Arc;

/// WQEBBs in the test ring.
const LOG_SIZE: u8 = 4;
const ENTRIES: u16 = 1 << LOG_SIZE;

/// A send queue of [`ENTRIES`] WQEBBs whose producer and consumer counters start at `start`,
/// with a CQ of as many entries.
fn queue(start: u16) -> TxQueue<NoDevice> {
    queue_with(start, InlineMode::Headers, 0)
}

/// As [`queue`], with the queue's inline mode and largest LSO message (0: no TSO).
pub(super) fn queue_with(start: u16, inline: InlineMode, max_lso: usize) -> TxQueue<NoDevice> {
    let cq_memory = region(usize::from(ENTRIES) * CQE_SIZE);
    for slot in 0..usize::from(ENTRIES) {
        cq_memory
            .write(slot * CQE_SIZE + CQE_SIZE - 1, &[CQE_INITIAL_OP_OWN])
            .unwrap();
    }
    let mut queue = TxQueue::new(SendQueueParts {
        backend: Arc::new(NoDevice),
        ring: region(usize::from(ENTRIES) * WQE_BB),
        dbr: region(64),
        log_size: LOG_SIZE,
        cq: CqRing::new(cq_memory, region(64), LOG_SIZE, 3, false).expect("a CQ over its memory"),
        sqn: 5,
        uar: 0,
        blueflame: false,
        inline,
        inline_max: 0,
        multi_packet: false,
        cqe_every: 4,
        max_frame: 1514,
        max_lso,
        published: Arc::default(),
        quarantine: Arc::default(),
    })
    .expect("a send queue over its memory");
    queue.pi = start;
    queue.ci = start;
    queue
}

/// A 60-byte frame in a fresh buffer of `pool`.
fn frame(pool: &Mempool) -> Mbuf {
    let mut m = pool.alloc().expect("a free buffer");
    m.set_data(&[0x5a; 60]).unwrap();
    m
}

/// The device reports the WQE at `wqe_counter` sent, in CQ entry `cq_index`.
fn complete(queue: &TxQueue<NoDevice>, cq_index: u32, opcode: CqeOpcode, wqe_counter: u16) {
    let mut cqe = [0u8; CQE_SIZE];
    cqe[0x3c..0x3e].copy_from_slice(&wqe_counter.to_be_bytes());
    let owner = (cq_index >> LOG_SIZE & 1) as u8;
    cqe[0x3f] = (opcode as u8) << 4 | owner;
    queue.cq.device_writes(cq_index, &cqe);
}

/// Takes completions (a burst of nothing to send).
fn reap(queue: &mut TxQueue<NoDevice>) {
    assert_eq!(queue.tx_burst(&mut Vec::<Mbuf>::new()), 0);
}

/// The WQE index the control segment in ring slot `slot` carries.
fn wqe_index_in_slot(queue: &TxQueue<NoDevice>, slot: u16) -> u16 {
    let mut ctrl = [0u8; 4];
    queue.ring.read_bytes(u32::from(slot), 0, &mut ctrl);
    (u32::from_be_bytes(ctrl) >> 8) as u16
}

#[test]
fn the_ring_fills_to_its_size_across_the_counter_wrap() {
    let p = pool(32, 256);
    let start = 0xfffa;
    let mut tx = queue(start);
    assert_eq!(tx.free(), ENTRIES);
    let mut burst: Vec<Mbuf> = (0..ENTRIES + 4).map(|_| frame(&p)).collect();
    // One basic block per packet: the ring takes exactly its size, the rest stay queued.
    assert_eq!(tx.tx_burst(&mut burst), usize::from(ENTRIES));
    assert_eq!(burst.len(), 4);
    assert_eq!((tx.free(), tx.in_flight()), (0, usize::from(ENTRIES)));
    assert_eq!(tx.pi, start.wrapping_add(ENTRIES));
    assert_eq!(tx.tx_burst(&mut burst), 0, "a full ring takes nothing");
    // Each WQE sits in the slot of its index, whichever side of the wrap.
    for k in 0..ENTRIES {
        let index = start.wrapping_add(k);
        assert_eq!(wqe_index_in_slot(&tx, index & (ENTRIES - 1)), index);
    }
    // The device tells the ring's producer index in 16 bits.
    assert_eq!(tx.dbr.word(1), u32::from(start.wrapping_add(ENTRIES)));
    assert_eq!(p.available(), 32 - u32::from(ENTRIES) - 4);
}

#[test]
fn a_completion_frees_every_wqe_up_to_the_one_it_reports() {
    let p = pool(32, 256);
    let start = 0xfffc;
    let mut tx = queue(start);
    let mut burst: Vec<Mbuf> = (0..10).map(|_| frame(&p)).collect();
    assert_eq!(tx.tx_burst(&mut burst), 10);
    assert_eq!(p.available(), 22);
    // WQEs 0xfffc..=0x0001 (six, across the wrap) reported sent by one CQE.
    complete(&tx, 0, CqeOpcode::Req, 0x0001);
    reap(&mut tx);
    assert_eq!(tx.ci, 0x0002);
    assert_eq!((tx.in_flight(), tx.free()), (4, ENTRIES - 4));
    assert_eq!(p.available(), 28);
    // The rest.
    complete(&tx, 1, CqeOpcode::Req, 0x0005);
    reap(&mut tx);
    assert_eq!((tx.ci, tx.pi), (0x0006, 0x0006));
    assert_eq!((tx.in_flight(), tx.free()), (0, ENTRIES));
    assert_eq!(p.available(), 32);
    let stats = tx.stats();
    assert_eq!((stats.cqes, stats.bad_cqes, stats.packets), (2, 0, 10));
    assert!(!tx.in_error());
}

#[test]
fn sending_and_completing_goes_on_round_the_counter_many_times() {
    let p = pool(32, 256);
    let start = 0xff00;
    let mut tx = queue(start);
    let mut cq_index = 0;
    // Bursts of 5..=11 against a ring of 16, each completed in two CQEs; 0x180 WQEs in all.
    let mut sent = 0u32;
    while sent < 0x180 {
        let n = 5 + sent as usize % 7;
        let mut burst: Vec<Mbuf> = (0..n).map(|_| frame(&p)).collect();
        let first = tx.pi;
        assert_eq!(tx.tx_burst(&mut burst), n);
        let last = first.wrapping_add(n as u16 - 1);
        complete(&tx, cq_index, CqeOpcode::Req, first.wrapping_add(1));
        complete(&tx, cq_index + 1, CqeOpcode::Req, last);
        cq_index += 2;
        reap(&mut tx);
        assert_eq!((tx.in_flight(), tx.free()), (0, ENTRIES), "after {sent}");
        sent += n as u32;
    }
    assert_eq!(tx.pi, start.wrapping_add(sent as u16));
    assert!(tx.pi < start, "the counters wrapped");
    assert_eq!(p.available(), 32);
    assert_eq!(tx.stats().bad_cqes, 0);
}

#[test]
fn a_completion_for_a_wqe_not_in_flight_is_refused() {
    // Just before the oldest, just past the newest (the next to be posted), far off.
    for reported in [0xfffd_u16, 0x0002, 0x0003, 0x8000] {
        let p = pool(32, 256);
        let mut tx = queue(0xfffe);
        let mut burst: Vec<Mbuf> = (0..4).map(|_| frame(&p)).collect();
        // WQEs 0xfffe..=0x0001 are in flight; `reported` is before or past them.
        assert_eq!(tx.tx_burst(&mut burst), 4);
        complete(&tx, 0, CqeOpcode::Req, reported);
        reap(&mut tx);
        assert!(tx.in_error(), "completion of {reported:#x}");
        assert_eq!(tx.stats().bad_cqes, 1);
        assert_eq!((tx.ci, tx.in_flight()), (0xfffe, 4), "nothing freed");
        assert_eq!(p.available(), 28);
    }
}

#[test]
fn the_template_writes_what_the_byte_builder_writes() {
    // Headers inline and nothing inline, every checksum request, two WQE indexes: the words
    // composed from the queue's template are the bytes the general builder lays out (the
    // completion request aside: the builder also asks whenever this small ring is low).
    let p = pool(8, 256);
    let mut m = p.alloc().expect("a free buffer");
    let bytes: Vec<u8> = (0..60u8).map(|b| b.wrapping_mul(37)).collect();
    m.set_data(&bytes).unwrap();
    for inline in [InlineMode::Headers, InlineMode::None] {
        for (ip, l4) in [(false, false), (true, false), (false, true), (true, true)] {
            for start in [0x0000, 0xabcd] {
                m.flags.tx_ip_csum = ip;
                m.flags.tx_l4_csum = l4;
                let mut tx = queue(start);
                tx.inline = inline;
                let shape = tx.bb_shape();
                assert!(tx.template_bb(shape, &&m, m.len()), "the template fits");
                let template: [u64; WQE_BB / 8] = tx.ring.read_words(u32::from(start));
                let built = tx.single_bb_wqe(&&m, m.len()).expect("one basic block");
                assert_eq!(template[0], built[0], "{inline:?} {ip} {l4} {start:#x}");
                assert_eq!(template[2..], built[2..], "{inline:?} {ip} {l4} {start:#x}");
            }
        }
    }
    // Full inline mode takes no template: a packet's length decides its shape.
    let mut tx = queue(0);
    tx.inline = InlineMode::Full;
    let shape = tx.bb_shape();
    assert!(!tx.template_bb(shape, &&m, m.len()));
}

#[test]
fn a_burst_that_leaves_the_ring_low_asks_for_a_completion_on_its_last_wqe() {
    // The ring of 16 is below the low mark after any burst; with `cqe_every` 4, a burst of 3
    // asks for none on its own, so the burst's end asks on its last WQE.
    let p = pool(32, 256);
    let mut tx = queue(0);
    let mut burst: Vec<Mbuf> = (0..3).map(|_| frame(&p)).collect();
    assert_eq!(tx.tx_burst(&mut burst), 3);
    let ce = |tx: &TxQueue<NoDevice>, slot: u16| {
        let mut byte = [0u8; 1];
        tx.ring.read_bytes(u32::from(slot), 11, &mut byte);
        byte[0] >> 2 & 3
    };
    assert_eq!(
        [ce(&tx, 0), ce(&tx, 1), ce(&tx, 2)],
        [0, 0, cxdirect_hw::wqe::completion::ALWAYS]
    );
    assert_eq!(tx.since_cqe, 0);
}
