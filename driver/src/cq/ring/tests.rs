//! The CQ ring as software reads it: the owner bit decides what is the driver's, the ring's
//! wrap flips the expected bit, and compressed sessions are unpacked, given back and checked.

use super::CqRing;
use crate::test_support::region;
use cxdirect_hw::cqe::{cqe_format, CqeOpcode, CQE_INITIAL_OP_OWN, CQE_SIZE, MINI_CQES_PER_SLOT};

/// A ring of `2^log_size` CQEs with every slot as the port leaves it before the device writes.
fn ring(log_size: u8, compressed: bool) -> CqRing {
    let entries = 1usize << log_size;
    let memory = region(entries * CQE_SIZE);
    for slot in 0..entries {
        memory
            .write(slot * CQE_SIZE + CQE_SIZE - 1, &[CQE_INITIAL_OP_OWN])
            .unwrap();
    }
    CqRing::new(memory, region(64), log_size, 7, compressed).expect("a ring over its memory")
}

/// A CQE's bytes: `opcode`, owner bit `owner`, `format`, WQE counter and byte count.
fn cqe(opcode: CqeOpcode, owner: u8, format: u8, wqe_counter: u16, byte_cnt: u32) -> [u8; 64] {
    let mut bytes = [0u8; CQE_SIZE];
    bytes[0x2c..0x30].copy_from_slice(&byte_cnt.to_be_bytes());
    bytes[0x38..0x3c].copy_from_slice(&0x0000_0123u32.to_be_bytes());
    bytes[0x3c..0x3e].copy_from_slice(&wqe_counter.to_be_bytes());
    bytes[0x3f] = (opcode as u8) << 4 | format << 2 | owner;
    bytes
}

/// The owner bit the device writes on the pass of consumer index `index`: 0 on the first
/// pass round a ring of `2^log_size` slots, 1 on the second, and so on.
fn pass_owner(ring: &CqRing, index: u32) -> u8 {
    (index / (1 << ring.log_size) % 2) as u8
}

/// A receive CQE for consumer index `index` of `ring`, written as the device writes it on
/// that pass.
fn write_receive(ring: &CqRing, index: u32, wqe_counter: u16, byte_cnt: u32) {
    let owner = pass_owner(ring, index);
    write_slot(
        ring,
        index,
        &cqe(CqeOpcode::RespSend, owner, 0, wqe_counter, byte_cnt),
    );
}

fn write_slot(ring: &CqRing, index: u32, bytes: &[u8; CQE_SIZE]) {
    ring.region.write_bytes(index, 0, bytes);
}

/// The `op_own` byte of the slot of consumer index `index`.
fn op_own(ring: &CqRing, index: u32) -> u8 {
    let mut byte = [0u8];
    ring.region.read_bytes(index, CQE_SIZE - 1, &mut byte);
    byte[0]
}

/// The consumer index as the doorbell record tells the device.
fn dbr_ci(ring: &CqRing) -> u32 {
    ring.dbr.word(0)
}

#[test]
fn a_slot_not_yet_written_is_not_taken() {
    let mut cq = ring(3, false);
    assert!(cq.peek().is_none());
    assert_eq!(cq.ci, 0);
}

#[test]
fn a_cqe_is_taken_when_its_owner_bit_matches_the_pass() {
    let mut cq = ring(3, false);
    write_receive(&cq, 0, 41, 60);
    let got = cq
        .peek()
        .expect("a CQE with the first pass's owner bit (0)");
    assert!(got.is_receive_ok());
    assert_eq!((got.wqe_counter(), got.byte_cnt()), (41, 60));
    // Peeking does not consume.
    assert_eq!(cq.peek(), Some(got));
    cq.consume();
    assert_eq!(cq.ci, 1);
    assert!(cq.peek().is_none());
}

#[test]
fn a_cqe_with_the_other_owner_bit_is_not_taken() {
    let mut cq = ring(3, false);
    // A valid opcode, but the next pass's owner bit.
    write_slot(&cq, 0, &cqe(CqeOpcode::RespSend, 1, 0, 0, 60));
    assert!(cq.peek().is_none());
    assert_eq!(cq.ci, 0);
}

#[test]
fn the_ring_wrap_flips_the_expected_owner_bit() {
    let mut cq = ring(3, false);
    for index in 0..8u32 {
        write_receive(&cq, index, index as u16, 100 + index);
        assert_eq!(cq.peek().map(|c| c.wqe_counter()), Some(index as u16));
        cq.consume();
    }
    // Second pass: slot 0 still holds the first pass's CQE (owner 0), which is not new.
    assert_eq!(cq.ci, 8);
    assert_eq!(cq.owner_for(cq.ci), 1);
    assert!(
        cq.peek().is_none(),
        "a CQE of the previous pass was taken again"
    );
    // The device writes slot 0 again with owner 1.
    write_slot(&cq, 8, &cqe(CqeOpcode::RespSend, 1, 0, 8, 108));
    assert_eq!(cq.peek().map(|c| c.wqe_counter()), Some(8));
    cq.consume();
    // Third pass expects owner 0 again: slot 0's second-pass CQE (owner 1) is old.
    for index in 9..16u32 {
        write_receive(&cq, index, index as u16, 0);
        cq.consume();
    }
    assert_eq!((cq.ci, cq.owner_for(cq.ci)), (16, 0));
    assert!(cq.peek().is_none());
}

#[test]
fn the_consumer_index_wraps_at_u32_and_the_owner_bit_follows() {
    let mut cq = ring(3, false);
    cq.ci = u32::MAX - 2;
    // Indexes MAX-2..=MAX are the last slots of an odd pass (owner 1); 0 and 1 start an even
    // one (owner 0) in slots 0 and 1.
    assert_eq!(cq.owner_for(u32::MAX), 1);
    assert_eq!(cq.owner_for(0), 0);
    assert_eq!(cq.slot_offset(u32::MAX), 7 * CQE_SIZE);
    let indexes = [u32::MAX - 2, u32::MAX - 1, u32::MAX, 0, 1];
    for (k, &index) in indexes.iter().enumerate() {
        write_receive(&cq, index, 0xfffe_u16.wrapping_add(k as u16), 64);
    }
    for (k, &index) in indexes.iter().enumerate() {
        assert_eq!(cq.ci, index);
        let got = cq.peek().expect("CQE across the u32 wrap");
        assert_eq!(got.wqe_counter(), 0xfffe_u16.wrapping_add(k as u16));
        cq.consume();
    }
    assert_eq!(cq.ci, 2);
    assert!(cq.peek().is_none());
    // The device is told the low 24 bits.
    cq.update_dbr();
    assert_eq!(dbr_ci(&cq), 2);
    cq.ci = 0x0123_4567;
    cq.update_dbr();
    assert_eq!(dbr_ci(&cq), 0x0023_4567);
}

#[test]
fn an_invalid_opcode_with_this_passes_owner_bit_is_handed_out_to_be_refused() {
    let mut cq = ring(3, false);
    write_slot(&cq, 0, &cqe(CqeOpcode::Invalid, 0, 0, 0, 0));
    let got = cq
        .peek()
        .expect("handed out rather than waited on for good");
    assert_eq!(got.opcode(), CqeOpcode::Invalid as u8);
    assert!(!got.is_receive_ok() && !got.is_send_ok() && !got.is_error());
}

#[test]
fn a_skipped_slot_behind_a_written_one_is_handed_out_as_invalid() {
    let mut cq = ring(3, false);
    // Slot 0 never written, slot 1 written this pass.
    write_receive(&cq, 1, 1, 60);
    let mut polls = 0;
    let got = loop {
        polls += 1;
        if let Some(got) = cq.peek() {
            break got;
        }
        assert!(
            polls <= super::GAP_CHECK_POLLS,
            "the gap was never reported"
        );
    };
    assert_eq!(polls, super::GAP_CHECK_POLLS);
    assert_eq!(got.opcode(), CqeOpcode::Invalid as u8);
    // Marked in the ring with this pass's owner, so a later pass does not take it either.
    assert_eq!(op_own(&cq, 0), (CqeOpcode::Invalid as u8) << 4);
}

/// A compressed session's title for consumer index `index` of `ring`: `count` completions,
/// the first for WQE `first_counter`.
fn write_title(ring: &CqRing, index: u32, opcode: CqeOpcode, count: u32, first_counter: u16) {
    let owner = pass_owner(ring, index);
    let title = cqe(opcode, owner, cqe_format::COMPRESSED, first_counter, count);
    write_slot(ring, index, &title);
}

/// Byte count of completion `i` of a test session (all different).
fn mini_byte_cnt(i: u32) -> u32 {
    1000 + i
}

/// RSS hash of completion `i` of a test session.
fn mini_hash(i: u32) -> u32 {
    0xa5a5_0000 | i
}

/// Writes the mini-CQE arrays of a `count`-completion session whose title is at `start`, where
/// the device puts them (array `k` in the slot of completion `8k`, the first after the title).
fn write_minis(ring: &CqRing, start: u32, count: u32) {
    let per_slot = MINI_CQES_PER_SLOT;
    for array in 0..count.div_ceil(per_slot) {
        let mut bytes = [0u8; CQE_SIZE];
        for j in 0..per_slot.min(count - array * per_slot) {
            let i = array * per_slot + j;
            let at = j as usize * 8;
            bytes[at..at + 4].copy_from_slice(&mini_hash(i).to_be_bytes());
            bytes[at + 4..at + 8].copy_from_slice(&mini_byte_cnt(i).to_be_bytes());
        }
        let slot = start.wrapping_add(cxdirect_hw::cqe::mini_array_slot(array * per_slot));
        write_slot(ring, slot, &bytes);
    }
}

fn write_session(ring: &CqRing, start: u32, count: u32, first_counter: u16) {
    write_minis(ring, start, count);
    write_title(ring, start, CqeOpcode::RespSend, count, first_counter);
}

#[test]
fn a_compressed_session_hands_out_every_completion_in_order() {
    let mut cq = ring(4, true);
    // 10 completions: two mini-CQE arrays (8 + 2), WQE counters across the u16 wrap.
    write_session(&cq, 0, 10, 0xfffc);
    let first = cq.peek().expect("the session's first completion");
    assert!(first.is_receive_ok(), "handed out in the plain format");
    assert_eq!(first.wqe_counter(), 0xfffc);
    assert_eq!(first.byte_cnt(), mini_byte_cnt(0));
    assert_eq!(first.rss_hash(), None, "the title computed no hash");
    assert_eq!(first.qpn(), 0x123, "other fields come from the title");

    let run = cq.mini_run(64).expect("a session is open");
    assert_eq!(run.len, 8, "a run stops at the end of its mini-CQE array");
    assert_eq!(run.first, first);
    for i in 0..8 {
        let expected = (mini_byte_cnt(i as u32), mini_hash(i as u32));
        assert_eq!(run.byte_cnt_and_hash(i), expected);
    }
    cq.consume_run(8);
    assert_eq!(cq.ci, 8);

    // The second array, read from the slot of completion 8.
    let run = cq.mini_run(64).expect("two completions left");
    assert_eq!(run.len, 2);
    assert_eq!(run.first.wqe_counter(), 0xfffc_u16.wrapping_add(8));
    assert_eq!(run.first.byte_cnt(), mini_byte_cnt(8));
    assert_eq!(run.byte_cnt_and_hash(1), (mini_byte_cnt(9), mini_hash(9)));
    cq.consume_run(2);

    assert!(
        cq.session.is_none(),
        "the session ends with its last completion"
    );
    assert_eq!((cq.ci, cq.mini_cqes()), (10, 10));
    assert!(cq.peek().is_none(), "nothing after the session yet");
    assert!(!cq.lost_place());
}

#[test]
fn completions_taken_one_at_a_time_count_the_wqe_counter_up() {
    let mut cq = ring(4, true);
    write_session(&cq, 0, 3, 0xffff);
    for (k, counter) in [0xffff_u16, 0, 1].into_iter().enumerate() {
        let got = cq.peek().expect("a completion of the session");
        assert_eq!(got.wqe_counter(), counter);
        assert_eq!(got.byte_cnt(), mini_byte_cnt(k as u32));
        cq.consume();
    }
    assert!(cq.session.is_none());
    assert_eq!((cq.ci, cq.mini_cqes()), (3, 3));
    assert!(cq.peek().is_none());
}

#[test]
fn a_run_is_no_longer_than_asked() {
    let mut cq = ring(4, true);
    write_session(&cq, 0, 6, 0);
    assert!(
        cq.mini_run(4).is_none(),
        "a session opens when its title is peeked"
    );
    assert!(cq.peek().is_some());
    assert_eq!(cq.mini_run(4).map(|run| run.len), Some(4));
    // At least one, whatever is asked.
    assert_eq!(cq.mini_run(0).map(|run| run.len), Some(1));
    cq.consume_run(4);
    assert_eq!(cq.mini_run(64).map(|run| run.len), Some(2));
    assert_eq!(cq.mini_run(64).map(|run| run.first.wqe_counter()), Some(4));
}

#[test]
fn the_slots_of_a_session_are_given_back_for_the_next_pass() {
    let mut cq = ring(4, true);
    // A session of 6 starting 4 slots before the end of the ring: it covers slots 12..16 of
    // pass 0 and slots 0..2 of pass 1.
    for index in 0..12 {
        write_receive(&cq, index, index as u16, 60);
        cq.consume();
    }
    write_session(&cq, 12, 6, 12);
    assert!(cq.peek().is_some());
    let run = cq.mini_run(64).expect("the session");
    assert_eq!(run.len, 6);
    cq.consume_run(6);
    assert_eq!(cq.ci, 18);
    let invalid = (CqeOpcode::Invalid as u8) << 4;
    for index in 12..16 {
        assert_eq!(op_own(&cq, index), invalid, "slot of index {index}");
    }
    for index in 16..18 {
        assert_eq!(op_own(&cq, index), invalid | 1, "slot of index {index}");
    }
    // Not given back: the slot after the session (a first-pass CQE, owner 0).
    assert_eq!(op_own(&cq, 18), (CqeOpcode::RespSend as u8) << 4);
    // The next time round, a given-back slot reads as not yet written.
    cq.ci = 28;
    assert_eq!(cq.owner_for(28), 1);
    assert!(cq.peek().is_none());
    cq.ci = 32;
    assert_eq!(cq.owner_for(32), 0);
    assert!(cq.peek().is_none());
}

/// Opens a session whose title says `count` completions with opcode `opcode` on `cq` and
/// checks that it is refused: handed out as INVALID, no session open, the place lost.
fn assert_title_refused(mut cq: CqRing, opcode: CqeOpcode, count: u32) {
    write_minis(&cq, 0, count.min(8));
    write_title(&cq, 0, opcode, count, 0);
    let got = cq.peek().expect("a refused title is still handed out");
    assert_eq!(got.opcode(), CqeOpcode::Invalid as u8, "title of {count}");
    assert!(cq.session.is_none());
    assert!(cq.lost_place());
    assert_eq!(cq.mini_cqes(), 0);
}

#[test]
fn a_title_of_fewer_than_two_completions_is_refused() {
    assert_title_refused(ring(4, true), CqeOpcode::RespSend, 1);
    assert_title_refused(ring(4, true), CqeOpcode::RespSend, 0);
}

#[test]
fn a_title_of_more_completions_than_the_ring_holds_is_refused() {
    assert_title_refused(ring(4, true), CqeOpcode::RespSend, 17);
    assert_title_refused(ring(4, true), CqeOpcode::RespSend, u32::MAX);
}

#[test]
fn a_title_of_exactly_the_ring_size_is_accepted() {
    let mut cq = ring(4, true);
    write_session(&cq, 0, 16, 0);
    assert!(cq.peek().is_some_and(|c| c.is_receive_ok()));
    assert_eq!(cq.session.map(|s| s.count), Some(16));
    assert!(!cq.lost_place());
}

#[test]
fn a_title_that_is_not_a_receive_completion_is_refused() {
    assert_title_refused(ring(4, true), CqeOpcode::Req, 4);
    assert_title_refused(ring(4, true), CqeOpcode::RespErr, 4);
}

#[test]
fn a_title_on_a_cq_without_compression_is_refused() {
    assert_title_refused(ring(4, false), CqeOpcode::RespSend, 4);
}
