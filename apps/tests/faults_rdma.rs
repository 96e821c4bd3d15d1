//! The RDMA classes of the fault matrix: each fault met under krping-style traffic between two
//! emulated functions, recovered from, and every message delivered once and intact, or
//! accounted for as failed and sent again.

use cxdirect_apps::faults::{run_class, ClassReport, FaultClass};

/// Runs `class` with `injections` faults and checks what every class must show.
fn run(class: FaultClass, injections: u32) -> ClassReport {
    let r = run_class(class, injections).unwrap_or_else(|e| panic!("{}: {e}", class.name()));
    let n = u64::from(injections);
    assert!(r.injections >= n, "{}: faults met: {r:?}", r.name);
    assert_eq!(r.recoveries, r.injections, "{}: recoveries: {r:?}", r.name);
    assert_eq!(r.lost_beyond_flushed, 0, "{}: {r:?}", r.name);
    assert_eq!(r.duplicates, 0, "{}: {r:?}", r.name);
    assert_eq!(r.corrupt, 0, "{}: {r:?}", r.name);
    assert_eq!(r.leaked, 0, "{}: {r:?}", r.name);
    assert_eq!(r.received + r.accounted, r.sent, "{}: {r:?}", r.name);
    r
}

/// Faults the transport hides: nothing fails, nothing is sent again by the application.
fn hidden(r: &ClassReport) {
    assert_eq!(r.accounted, 0, "{}: {r:?}", r.name);
    assert_eq!(r.received, r.sent, "{}: {r:?}", r.name);
}

#[test]
fn lost_frames_are_sent_again_and_every_message_arrives_once() {
    let r = run(FaultClass::RdmaFrameLoss, 4);
    hidden(&r);
    // A lost ACK may be covered by a later one, a lost READ response by the requester going
    // back on the next: not every lost frame is a retransmission of its own.
    assert!(r.evidence > 0, "retransmissions: {r:?}");
}

#[test]
fn duplicated_frames_deliver_nothing_twice() {
    let r = run(FaultClass::RdmaDuplicate, 4);
    hidden(&r);
    assert!(r.evidence > 0, "repeated PSNs seen by a responder: {r:?}");
}

#[test]
fn reordered_frames_are_sent_again_and_every_message_arrives_in_order() {
    let r = run(FaultClass::RdmaReorder, 4);
    hidden(&r);
    assert!(r.evidence > 0, "retransmissions: {r:?}");
}

#[test]
fn corrupted_frames_are_dropped_on_their_icrc_and_sent_again() {
    let r = run(FaultClass::RdmaIcrcCorrupt, 4);
    hidden(&r);
    // A flipped bit in the Ethernet or UDP header misroutes the frame before any ICRC check;
    // one in a field the ICRC masks (TTL, traffic class, checksum) goes through unharmed.
    assert!(
        r.evidence > 0 && r.evidence <= r.injections,
        "ICRC drops: {r:?}"
    );
}

#[test]
fn a_receiver_without_receives_is_retried_until_one_is_posted() {
    let r = run(FaultClass::RdmaRnr, 4);
    hidden(&r);
    assert_eq!(r.injections, 4, "{r:?}");
    // Two holds of two RNR NAKs with finite retries, two of ten without limit.
    assert!(r.evidence >= 2 * 2 + 2 * 10, "RNR NAKs sent: {r:?}");
}

#[test]
fn retries_exhausted_under_a_cut_wire_reconnect_and_send_the_iteration_again() {
    // One cut before each of the six messages of an iteration.
    let r = run(FaultClass::RdmaRetryExceeded, 6);
    assert_eq!(r.injections, 6, "{r:?}");
    assert_eq!(r.recover_us.len(), 6, "{r:?}");
    assert!(
        r.accounted >= 6,
        "the failed messages were sent again: {r:?}"
    );
    assert!(r.evidence >= 6, "retry-exceeded completions: {r:?}");
}

#[test]
fn a_qp_fatal_error_is_seen_as_an_event_and_the_pair_reconnects() {
    // A fatal error at the doorbell of each of the six messages of an iteration.
    let r = run(FaultClass::RdmaQpFatal, 6);
    assert_eq!(r.injections, 6, "{r:?}");
    assert_eq!(r.recover_us.len(), 6, "{r:?}");
    assert!(
        r.accounted >= 6,
        "the failed messages were sent again: {r:?}"
    );
    assert_eq!(r.evidence, 6, "QP fatal events seen: {r:?}");
}
