//! The locked-memory limit becomes `DmaError::Memlock`, and nothing is left behind.
//!
//! This is its own test binary (one process, one test) because it lowers RLIMIT_MEMLOCK for the
//! whole process and drops CAP_IPC_LOCK, which would disturb other tests.

use std::sync::Arc;

use cxdirect_dma::{
    live_regions, DmaError, DmaRegion, Iommu, IommuError, IovaAllocator, IovaRange, PageKind,
};

/// An IOMMU that accepts everything; the test fails before it is reached.
struct AcceptAll;

// SAFETY: the fake never touches the memory it is given.
unsafe impl Iommu for AcceptAll {
    fn iova_ranges(&self) -> Vec<IovaRange> {
        vec![IovaRange {
            start: 0,
            end: 0xffff_ffff,
        }]
    }

    unsafe fn map(&self, _iova: u64, _host: *mut u8, _len: usize) -> Result<(), IommuError> {
        Ok(())
    }

    fn unmap(&self, _iova: u64, _len: usize) -> Result<(), IommuError> {
        Ok(())
    }
}

/// Removes CAP_IPC_LOCK from this thread's effective set, so the memlock limit applies even when
/// the tests run as root.
#[path = "../capabilities.rs"]
mod capabilities;

fn set_memlock_soft_limit(bytes: u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit to a live local.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut limit) };
    assert_eq!(rc, 0);
    limit.rlim_cur = bytes.min(limit.rlim_max);
    // SAFETY: setrlimit reads one rlimit from a live local; lowering the soft limit is always
    // allowed.
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &limit) };
    assert_eq!(rc, 0);
}

#[test]
#[cfg_attr(
    not(memlock_limit_applies),
    ignore = "needs RLIMIT_MEMLOCK to bind: CAP_IPC_LOCK absent or droppable with capset"
)]
fn memlock_limit_is_a_clear_error_and_leaks_nothing() {
    assert!(
        capabilities::drop_ipc_lock(),
        "CAP_IPC_LOCK could not be dropped, though the build probe could drop it"
    );
    set_memlock_soft_limit(64 << 10);

    let iommu: Arc<dyn Iommu> = Arc::new(AcceptAll);
    let iovas = Arc::new(IovaAllocator::from_iommu(iommu.as_ref()).unwrap());
    let free_before = iovas.free_bytes();

    match DmaRegion::new(iommu, &iovas, 1 << 20, PageKind::Small) {
        Err(DmaError::Memlock { len, limit }) => {
            assert_eq!(len, 1 << 20);
            assert!(limit <= 64 << 10);
            let msg = DmaError::Memlock { len, limit }.to_string();
            assert!(msg.contains("ulimit -l"), "{msg}");
        }
        Err(other) => panic!("expected a memlock error, got: {other}"),
        Ok(region) => panic!("locked {} bytes past a 64 KiB limit", region.len()),
    }
    assert_eq!(live_regions(), 0);
    assert_eq!(iovas.free_bytes(), free_before);
    assert_eq!(iovas.allocation_count(), 0);
}
