//! The seam between DMA memory and whatever gives the device its view of host memory.

use std::os::fd::BorrowedFd;

use thiserror::Error;

/// A range of I/O virtual addresses the device may be given, `[start, end]` inclusive (as VFIO
/// reports them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IovaRange {
    /// First usable IOVA.
    pub start: u64,
    /// Last usable IOVA (inclusive).
    pub end: u64,
}

/// Why a mapping request failed.
#[derive(Debug, Error)]
pub enum IommuError {
    /// The IOMMU refused the mapping (overlap, out of range, out of IOMMU resources...).
    #[error("IOMMU refused to map {len:#x} bytes at IOVA {iova:#x}: {reason}")]
    MapRefused {
        /// IOVA asked for.
        iova: u64,
        /// Length in bytes.
        len: u64,
        /// What the backend said.
        reason: String,
    },
    /// The IOMMU refused to unmap a range (not mapped, or partially mapped).
    #[error("IOMMU refused to unmap {len:#x} bytes at IOVA {iova:#x}: {reason}")]
    UnmapRefused {
        /// IOVA asked for.
        iova: u64,
        /// Length in bytes.
        len: u64,
        /// What the backend said.
        reason: String,
    },
    /// The pinned-memory limit (RLIMIT_MEMLOCK) is too low for the mapping.
    #[error("cannot pin {len:#x} bytes for DMA: the memlock limit is too low (raise it with `ulimit -l unlimited` or in /etc/security/limits.conf)")]
    MemlockLimit {
        /// Bytes that could not be pinned.
        len: u64,
    },
    /// The backend cannot map a file (or dmabuf) by descriptor.
    #[error("cannot map a file descriptor for DMA: {reason}")]
    FileMapUnsupported {
        /// What is missing: the backend, or the kernel feature.
        reason: String,
    },
    /// In no-IOMMU mode the physical address of a page could not be found.
    #[error("cannot find the physical address of {addr:#x} in /proc/self/pagemap ({reason}); no-IOMMU mode needs CAP_SYS_ADMIN")]
    NoPhysicalAddress {
        /// Virtual address.
        addr: usize,
        /// Why.
        reason: String,
    },
}

/// What a backend provides so host memory can be made reachable by the device.
///
/// # Safety
///
/// Implementations must make `[host, host + len)` reachable by the device at `iova` on `map`,
/// and unreachable again before `unmap` returns `Ok`. A successful `unmap` is the promise that the
/// device can no longer touch the memory, on which [`DmaRegion`](crate::DmaRegion) relies before
/// freeing it.
pub unsafe trait Iommu: Send + Sync {
    /// IOVA ranges the device may use (from VFIO_IOMMU_GET_INFO or iommufd, or the whole space).
    fn iova_ranges(&self) -> Vec<IovaRange>;

    /// Makes `len` bytes of host memory at `host` reachable at `iova`.
    ///
    /// # Safety
    ///
    /// `host..host + len` must stay allocated (and not be moved) until [`Iommu::unmap`] of the
    /// same range returns `Ok`.
    unsafe fn map(&self, iova: u64, host: *mut u8, len: usize) -> Result<(), IommuError>;

    /// Makes the range unreachable again.
    fn unmap(&self, iova: u64, len: usize) -> Result<(), IommuError>;

    /// Makes `len` bytes of the file `fd` from byte `offset` reachable at `iova`, without a host
    /// mapping (iommufd's `IOMMU_IOAS_MAP_FILE`: memfds and hugetlbfs files from Linux 6.13,
    /// dmabufs where the kernel's iommufd accepts them). `offset` and `len` are page multiples.
    /// Backends without such a path say so with [`IommuError::FileMapUnsupported`].
    fn map_file(
        &self,
        iova: u64,
        fd: BorrowedFd<'_>,
        offset: u64,
        len: usize,
    ) -> Result<(), IommuError> {
        let _ = (iova, fd, offset, len);
        Err(IommuError::FileMapUnsupported {
            reason:
                "this backend maps host memory only (IOMMU_IOAS_MAP_FILE needs the iommufd backend)"
                    .into(),
        })
    }

    /// In no-IOMMU mode the device sees physical addresses: the backend chooses the IOVA
    /// (`Some(physical address)`) instead of the allocator. `None` everywhere else.
    fn identity_iova(&self, _host: *mut u8, _len: usize) -> Option<Result<u64, IommuError>> {
        None
    }
}
