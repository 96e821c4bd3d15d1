//! The fault matrix end to end: every class injected under verified traffic on the emulated
//! pair, each fault detected and recovered from, every lost frame accounted for by a counter,
//! nothing duplicated, corrupted or leaked.

use cxdirect_apps::faults::{run_class, FaultClass};

#[test]
fn every_fault_class_is_recovered_without_unaccounted_loss() {
    // The RDMA classes account for messages, not frames: apps/tests/faults_rdma.rs.
    for class in FaultClass::ALL.into_iter().filter(|c| !c.is_rdma()) {
        // The command-timeout class waits out a 100 ms timeout per injection.
        let injections = if class == FaultClass::CommandTimeout {
            2
        } else {
            4
        };
        let r = run_class(class, injections).unwrap_or_else(|e| panic!("{}: {e}", class.name()));
        assert_eq!(
            r.injections,
            u64::from(injections),
            "{}: faults taken",
            r.name
        );
        assert_eq!(
            r.recoveries,
            u64::from(injections),
            "{}: recoveries",
            r.name
        );
        assert_eq!(r.lost_beyond_flushed, 0, "{}: {r:?}", r.name);
        assert_eq!(r.duplicates, 0, "{}: {r:?}", r.name);
        assert_eq!(r.corrupt, 0, "{}: {r:?}", r.name);
        assert_eq!(r.leaked, 0, "{}: {r:?}", r.name);
        assert_eq!(r.received + r.accounted, r.sent, "{}: {r:?}", r.name);
        match class {
            // A send or receive error loses the frame it hit and what the queue held.
            FaultClass::TxErrorCqe | FaultClass::RxErrorCqe | FaultClass::RxCorruptCqe => {
                assert!(r.accounted >= u64::from(injections), "{}: {r:?}", r.name)
            }
            // A refused send completion resets the ring: what it still held may or may not
            // have left, and is accounted either way.
            FaultClass::TxCorruptCqe => {}
            // Each injection overran a CQ once (the new CQ does not), lost the completion it
            // found no room for, and was recovered by a new CQ (only those count).
            FaultClass::CqOverrun => {
                assert_eq!(r.evidence, u64::from(injections), "{}: {r:?}", r.name);
                assert!(r.accounted >= u64::from(injections), "{}: {r:?}", r.name)
            }
            // Each injection is one access the IOMMU refused, and its frame is lost.
            FaultClass::DmaUnmapped => {
                assert_eq!(r.evidence, u64::from(injections), "{}: {r:?}", r.name);
                assert!(r.accounted >= u64::from(injections), "{}: {r:?}", r.name)
            }
            // One key (the pool's) destroyed per revocation; traffic resumed each time on the
            // new mapping, and no buffer of the revoked pools went missing (`leaked`).
            FaultClass::DmabufRevoked => {
                assert_eq!(r.evidence, u64::from(injections), "{}: {r:?}", r.name);
                assert_eq!(r.recover_us.len(), injections as usize, "{}: {r:?}", r.name);
                assert!(r.accounted > 0, "{}: {r:?}", r.name)
            }
            // An error completion loses the frame it hit; a ring the device broke loses the
            // frame that found it broken and what arrived until it was created again.
            FaultClass::SharedRingError => {
                assert!(r.accounted >= u64::from(injections), "{}: {r:?}", r.name)
            }
            // A function reset loses what its rings held and what arrived while it was down.
            FaultClass::HealthFatal | FaultClass::HealthStall | FaultClass::NotResponding => {
                assert_eq!(r.recover_us.len(), injections as usize, "{}: {r:?}", r.name)
            }
            // Faults outside the rings deliver every frame.
            _ => assert_eq!(r.received, r.sent, "{}: {r:?}", r.name),
        }
    }
}
