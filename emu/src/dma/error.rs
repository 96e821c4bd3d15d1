//! Why a device access to host memory, or a change to the IOMMU's mappings, failed, and why an access to a host region fell outside it.

use thiserror::Error;

/// Why a device access to host memory failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum DmaError {
    /// No mapping covers the whole range.
    #[error("DMA {kind} of {len} bytes at IOVA {iova:#x} is outside every IOMMU mapping")]
    Unmapped {
        /// "read" or "write".
        kind: &'static str,
        /// First IOVA of the access.
        iova: u64,
        /// Length of the access in bytes.
        len: usize,
    },
    /// The mapping exists but does not allow this direction.
    #[error("DMA write of {len} bytes at IOVA {iova:#x} hits a read-only mapping")]
    ReadOnly {
        /// First IOVA of the access.
        iova: u64,
        /// Length of the access in bytes.
        len: usize,
    },
    /// Bus mastering is disabled in the Command register: the function may not issue DMA.
    #[error("DMA attempted while bus mastering is disabled")]
    BusMasterDisabled,
    /// An access of the data path to SW ICM (through an SW ICM memory key) the ICM store
    /// refused: outside every live SW_ICM object, or a write that would back more pages than
    /// the store's bound.
    #[error("SW ICM {kind} of {len} bytes at ICM address {icm:#x} refused: {why}")]
    SwIcm {
        /// "read" or "write".
        kind: &'static str,
        /// First ICM address of the access.
        icm: u64,
        /// Length of the access in bytes.
        len: usize,
        /// Why: "outside every SW_ICM object" or "backed-page bound reached".
        why: &'static str,
    },
}

/// Why a mapping could not be added or removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum MapError {
    /// The new range overlaps an existing mapping.
    #[error("IOVA range {iova:#x}+{len:#x} overlaps an existing mapping")]
    Overlap {
        /// First IOVA of the rejected range.
        iova: u64,
        /// Length in bytes.
        len: u64,
    },
    /// Zero length, or the range wraps the 64-bit IOVA space.
    #[error("IOVA range {iova:#x}+{len:#x} is empty or wraps around")]
    BadRange {
        /// First IOVA of the rejected range.
        iova: u64,
        /// Length in bytes.
        len: u64,
    },
    /// Unmap of a range that is not exactly one existing mapping.
    #[error("no mapping starts at IOVA {iova:#x} with length {len:#x}")]
    NotMapped {
        /// First IOVA asked for.
        iova: u64,
        /// Length asked for.
        len: u64,
    },
}

/// Why a host region access failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error(
    "host region access of {len} bytes at offset {offset:#x} is outside the {size:#x}-byte region"
)]
pub struct RegionError {
    /// Offset of the access.
    pub offset: usize,
    /// Length of the access.
    pub len: usize,
    /// Size of the region.
    pub size: usize,
}
