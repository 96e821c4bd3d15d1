//! Sequences of hostile MADs against a connected pair ([`crate::cm::script`]), the same
//! invariants the `cm_sequence` fuzz target checks: pseudo-random scripts, and scripts written
//! to reach one abuse each (replays, wrong IDs, REJ storms, MRA abuse, a listener gone).

use super::*;
use crate::cm::script::{self, run};

fn check(script: &[u8]) -> script::Outcome {
    run(script).unwrap_or_else(|v| panic!("{v}\nscript: {script:02x?}"))
}

#[test]
fn random_scripts_keep_every_invariant() {
    let mut rng = Rng(0x5eed_cafe);
    let mut total = script::Outcome::default();
    for len in [8usize, 32, 128, 512] {
        for _ in 0..150 {
            let script: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            let o = check(&script);
            total.established += o.established;
            total.disconnected += o.disconnected;
            total.rejected += o.rejected;
            total.timed_out += o.timed_out;
            total.refused += o.refused;
        }
    }
    // The scripts reached every kind of outcome, not only refusals.
    assert!(total.established > 600, "{total:?}");
    assert!(total.disconnected > 0, "{total:?}");
    assert!(total.rejected > 0, "{total:?}");
    assert!(total.refused > 0, "{total:?}");
}

/// Operation bytes (see `script::Pair::step`): low nibble the operation, bit 4 to the client,
/// bits 5-6 from the genuine peer (else a third party).
const TO_SERVER_FROM_CLIENT: u8 = 0x20;
const TO_CLIENT_FROM_SERVER: u8 = 0x30;

#[test]
fn replays_of_every_recorded_mad_to_both_sides_from_anyone() {
    // The setup recorded REQ, REP, RTU; a disconnect adds DREQ and DREP.
    let mut s = vec![6, 0, 12, 0];
    for k in 0..8u8 {
        for who in [0x00, 0x10, TO_SERVER_FROM_CLIENT, TO_CLIENT_FROM_SERVER] {
            s.extend([who | 2, k]);
        }
    }
    s.extend([12, 0, 5, 12, 0]);
    for k in 0..8u8 {
        s.extend([TO_SERVER_FROM_CLIENT | 2, k, 12, 0]);
    }
    let o = check(&s);
    assert!(o.disconnected >= 2, "{o:?}");
}

#[test]
fn messages_with_wrong_communication_ids() {
    let mut s = Vec::new();
    for k in 0..8u8 {
        for (local, remote) in [(0, 1), (1, 0), (2, 2), (3, 0), (0, 0)] {
            for who in [TO_SERVER_FROM_CLIENT, TO_CLIENT_FROM_SERVER] {
                // A recorded message `k` with IDs picked from the issued ones, 0, or any.
                s.extend([who | 3, k, local, remote, 0xde, 0xad, 0xbe, 0xef, 12, 0]);
            }
        }
    }
    check(&s);
}

#[test]
fn rej_and_mra_storms_and_dreqs_for_other_qps() {
    let mut s = vec![8, 0, 12, 0];
    for i in 0..40u8 {
        s.extend([0x10 | 14, 31]);
        s.extend((0..31 * 10).map(|j| (j as u8).wrapping_mul(i | 1)));
        s.extend([0x10 | 13, i, i + 1, i % 3, 0, 0, 0, 0]);
        s.extend([15, i, i + 2, 0, i, 0, 0, 0, 0]);
        s.extend([4, 20, 12, 0]);
    }
    check(&s);
}

#[test]
fn req_for_a_listener_that_is_gone_and_comes_back() {
    // Unlisten, a new connect (refused with INVALID_SERVICE_ID), the old REQ replayed, the
    // listener back, connect again and accept.
    let s = [
        11,
        8,
        1,
        12,
        0,
        4,
        1,
        TO_SERVER_FROM_CLIENT | 2,
        0,
        12,
        0,
        11,
        8,
        1,
        12,
        0,
        9,
        0,
        12,
        0,
        12,
        0,
    ];
    let o = check(&s);
    assert!(o.rejected >= 1, "{o:?}");
    assert!(o.established >= 4, "{o:?}");
}

#[test]
fn lossy_wire_and_timers_running_out() {
    let mut s = Vec::new();
    for i in 0..30u8 {
        s.extend([
            8,
            1,
            12,
            0x55 ^ i,
            9,
            0,
            12,
            0xaa,
            4,
            40,
            12,
            i,
            6,
            0,
            7,
            1,
            4,
            255,
            12,
            0,
        ]);
    }
    let o = check(&s);
    assert!(o.disconnected > 0, "{o:?}");
}

#[test]
fn unanswered_req_and_dreq_time_out_and_free_their_slots() {
    // A REQ whose every send is lost: an hour between polls, the wire never delivered.
    let mut s = vec![8, 1];
    s.extend([5; 20]);
    // A DREQ into the same silence.
    s.extend([6, 0]);
    s.extend([5; 20]);
    let o = check(&s);
    assert_eq!(o.timed_out, 1, "{o:?}");
    // The client's DREQ given up; the server hears it when the wire delivers at the end.
    assert_eq!(o.disconnected, 2, "{o:?}");
}
