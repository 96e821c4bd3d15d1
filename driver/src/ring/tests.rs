//! Word and byte helpers (the memory order every ring and CQE copy relies on) and the
//! published copy of a queue's counters.

use super::{bytes_from_words, words_from_bytes, QueueStats, SharedQueueStats};

/// `len` bytes counting up from 1, so every byte of a word is told apart.
fn counting<const M: usize>() -> [u8; M] {
    std::array::from_fn(|i| i as u8 + 1)
}

#[test]
fn words_hold_the_bytes_in_memory_order() {
    let bytes: [u8; 16] = counting();
    let words: [u64; 2] = words_from_bytes(&bytes);
    assert_eq!(words[0].to_ne_bytes(), [1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(words[1].to_ne_bytes(), [9, 10, 11, 12, 13, 14, 15, 16]);
    // As a big-endian field reads them, whatever the host's order.
    assert_eq!(
        u64::from_be_bytes(words[0].to_ne_bytes()),
        0x0102_0304_0506_0708
    );
}

#[test]
fn a_cqe_survives_the_round_trip_through_words() {
    let bytes: [u8; 64] = counting();
    let words: [u64; 8] = words_from_bytes(&bytes);
    let mut back = [0u8; 64];
    bytes_from_words(words, &mut back);
    assert_eq!(back, bytes);
}

#[test]
fn words_past_the_bytes_stay_zero() {
    let bytes: [u8; 16] = counting();
    let words: [u64; 4] = words_from_bytes(&bytes);
    assert_ne!(words[1], 0);
    assert_eq!(words[2..], [0, 0]);
    // Only whole words are taken: a trailing part-word is not.
    let short: [u8; 12] = counting();
    let words: [u64; 2] = words_from_bytes(&short);
    assert_eq!(words[0].to_ne_bytes(), [1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(words[1], 0);
}

#[test]
fn only_whole_words_are_written_out() {
    let words: [u64; 2] = words_from_bytes(&counting::<16>());
    let mut out = [0xee_u8; 12];
    bytes_from_words(words, &mut out);
    assert_eq!(out[..8], [1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(out[8..], [0xee; 4], "a part-word at the end is left alone");
    // Fewer words than room: the rest of `out` is untouched.
    let mut out = [0xee_u8; 24];
    bytes_from_words(words, &mut out);
    assert_eq!(out[..16], counting::<16>());
    assert_eq!(out[16..], [0xee; 8]);
}

#[test]
fn published_counters_read_back_field_by_field() {
    // Every field different, so a field published into or read from another's place shows.
    let stats = QueueStats {
        packets: 1,
        bytes: 2,
        errors: 3,
        nombuf: 4,
        doorbells: 5,
        blueflame: 6,
        inline_packets: 7,
        multi_packet_wqes: 8,
        cqes: 9,
        bad_cqes: 10,
        compressed_cqes: 11,
        flushed: 12,
        recoveries: 13,
        last_error_syndrome: 14,
        tso_packets: 15,
        last_refusal: Some(crate::tx::TxRefusal::TsoMss),
    };
    let shared = SharedQueueStats::default();
    assert_eq!(shared.read(), QueueStats::default());
    shared.publish(&stats);
    assert_eq!(shared.read(), stats);
    let later = QueueStats {
        packets: u64::MAX,
        last_error_syndrome: 0x05,
        last_refusal: Some(crate::tx::TxRefusal::TsoTooLong),
        ..stats
    };
    shared.publish(&later);
    assert_eq!(shared.read(), later);
}
