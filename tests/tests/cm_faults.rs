//! The connection manager's classes of the fault matrix on the emulated pair
//! (`cxdirect-faults --class cm_unreachable`, `cm_peer_vanishes`): each fault met, recovered
//! from, and accounted for; nothing lost, duplicated or leaked.

use cxdirect_apps::faults::{run_class, ClassReport, FaultClass};

fn run(class: FaultClass, injections: u32) -> ClassReport {
    let r = run_class(class, injections).unwrap_or_else(|e| panic!("{}: {e}", class.name()));
    let n = u64::from(injections);
    assert_eq!(r.injections, n, "{r:?}");
    assert_eq!(r.recoveries, n, "{r:?}");
    assert_eq!(r.recover_us.len(), injections as usize, "{r:?}");
    assert_eq!(r.lost_beyond_flushed, 0, "{r:?}");
    assert_eq!(r.duplicates, 0, "{r:?}");
    assert_eq!(r.corrupt, 0, "{r:?}");
    assert_eq!(r.leaked, 0, "{r:?}");
    assert_eq!(r.received + r.accounted, r.sent, "{r:?}");
    r
}

#[test]
fn an_unreachable_peer_gets_every_req_retry_then_an_error_naming_it_and_a_later_connect_works() {
    // The class itself checks the error names the address and port and came after the REQ
    // and its 15 retries; each injection's 16 REQs were all dropped by the cut wire.
    let r = run(FaultClass::CmUnreachable, 3);
    assert_eq!(r.evidence, 3 * 16, "{r:?}");
    assert!(r.accounted >= 3 * 16, "{r:?}");
}

#[test]
fn a_peer_that_vanishes_by_dreq_or_silence_leaves_every_posted_request_flushed() {
    let r = run(FaultClass::CmPeerVanishes, 4);
    // Four receives per injection, and the SEND left retrying into a cut wire on the silent
    // ones, all completed flushed.
    assert_eq!(r.accounted, 4 * 4 + 2, "{r:?}");
    assert!(r.evidence >= r.accounted, "{r:?}");
}
