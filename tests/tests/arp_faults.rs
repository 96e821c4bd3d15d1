//! The `arp_spoof` class of the fault matrix on the emulated pair (`cxdirect-faults --class
//! arp_spoof`): hostile ARP past the neighbour table's locktime never moves a resolved peer's
//! entry, and every hostile frame is taken and ignored or refused.

use cxdirect_apps::faults::{run_class, FaultClass};

#[test]
fn spoofed_and_garbage_arp_leave_a_resolved_entry_alone() {
    let r = run_class(FaultClass::ArpSpoof, 6).unwrap_or_else(|e| panic!("arp_spoof: {e}"));
    assert_eq!(r.injections, 6, "{r:?}");
    assert_eq!(r.recoveries, 6, "{r:?}");
    assert_eq!(r.corrupt, 0, "spoofs believed: {r:?}");
    assert_eq!(r.lost_beyond_flushed, 0, "{r:?}");
    assert_eq!(r.leaked, 0, "{r:?}");
    assert_eq!(r.received, r.sent, "{r:?}");
    // Every hostile frame was ignored by the table or refused as malformed.
    assert_eq!(r.evidence, r.sent, "{r:?}");
}
