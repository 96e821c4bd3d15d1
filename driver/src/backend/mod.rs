//! The one seam between the driver and a device: BAR0 access, config space, the IOMMU, MSI-X
//! interrupts and function reset. Real hardware is reached through VFIO ([`vfio`]); tests and
//! the emulated device specs plug in the in-process model. The driver is generic over [`Backend`], so the hardware path is monomorphised and pays nothing for it.
//!
//! MMIO is expressed as the bytes a CPU load or store moves at a BAR0 offset; the rest of the
//! driver reads and writes registers as their `hw` types through `registers::Registers`, and
//! orders its accesses with the fences in `barrier`.

pub(crate) mod barrier;
pub(crate) mod registers;
pub mod vfio;

use cxdirect_dma::Iommu;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;

/// Why a backend operation failed.
#[derive(Debug, Error)]
pub enum BackendError {
    /// A config space access was refused or failed.
    #[error("config space {op} of {len} bytes at offset {offset:#x} failed: {reason}")]
    Config {
        /// "read" or "write".
        op: &'static str,
        /// Config space offset.
        offset: u16,
        /// Access length.
        len: usize,
        /// What failed.
        reason: String,
    },
    /// Interrupts could not be set up.
    #[error("cannot set up {vectors} MSI-X vectors: {reason}")]
    Interrupts {
        /// Vectors asked for.
        vectors: u16,
        /// What failed.
        reason: String,
    },
    /// The function could not be reset.
    #[error("function reset failed: {0}")]
    Reset(String),
    /// An operating-system call failed.
    #[error("{what}: {source}")]
    Os {
        /// What was being done.
        what: &'static str,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// An MSI-X vector's notification: an eventfd the backend signals when the vector fires.
/// Readable (pollable) while a message is pending.
#[derive(Debug)]
pub struct Interrupt {
    fd: OwnedFd,
}

impl Interrupt {
    /// A fresh, non-blocking eventfd.
    pub fn new() -> Result<Self, BackendError> {
        let fd = nix::sys::eventfd::EventFd::from_flags(
            nix::sys::eventfd::EfdFlags::EFD_NONBLOCK | nix::sys::eventfd::EfdFlags::EFD_CLOEXEC,
        )
        .map_err(|e| BackendError::Os {
            what: "eventfd",
            source: e.into(),
        })?;
        Ok(Self { fd: fd.into() })
    }

    /// A second handle on the same eventfd (for the side that signals it).
    pub fn try_clone(&self) -> Result<Self, BackendError> {
        let fd = self.fd.try_clone().map_err(|source| BackendError::Os {
            what: "dup eventfd",
            source,
        })?;
        Ok(Self { fd })
    }

    /// Signals the vector (what the device side does).
    pub fn signal(&self) {
        let one = 1u64.to_ne_bytes();
        // An eventfd write only fails when the counter would overflow: already signalled.
        let _ = nix::unistd::write(&self.fd, &one);
    }

    /// Takes the pending count (0 when nothing fired) without blocking.
    pub fn take(&self) -> u64 {
        let mut buf = [0u8; 8];
        match nix::unistd::read(&self.fd, &mut buf) {
            Ok(8) => u64::from_ne_bytes(buf),
            _ => 0,
        }
    }

    /// Waits up to `timeout` for the vector to fire; returns the count taken (0 on timeout).
    pub fn wait(&self, timeout: Duration) -> u64 {
        let mut fds = [nix::poll::PollFd::new(
            self.fd.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        let ms = timeout.as_millis().min(u128::from(u16::MAX)) as u16;
        match nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(ms)) {
            Ok(n) if n > 0 => self.take(),
            _ => 0,
        }
    }
}

impl AsRawFd for Interrupt {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl AsFd for Interrupt {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// How the driver reaches one PCI function.
pub trait Backend: Send + Sync + 'static {
    /// A human-readable name: the PCI address and access method, or the emulated spec.
    fn name(&self) -> String;

    /// Size of BAR0 in bytes.
    fn bar0_len(&self) -> usize;

    /// A 32-bit load from BAR0 at `offset` (4-byte aligned, inside BAR0).
    fn read32(&self, offset: usize) -> [u8; 4];

    /// A 32-bit store to BAR0 at `offset`.
    fn write32(&self, offset: usize, bytes: [u8; 4]);

    /// A single 64-bit store to BAR0 at `offset` (8-byte aligned): doorbells.
    fn write64(&self, offset: usize, bytes: [u8; 8]);

    /// A 64-byte BlueFlame store of a whole WQE to BAR0 at `offset` (64-byte aligned). Where
    /// the mapping is uncached this is eight 8-byte stores, in order.
    fn write_bf(&self, offset: usize, wqe: &[u8; 64]);

    /// Reads PCI configuration space.
    fn config_read(&self, offset: u16, buf: &mut [u8]) -> Result<(), BackendError>;

    /// Writes PCI configuration space.
    fn config_write(&self, offset: u16, data: &[u8]) -> Result<(), BackendError>;

    /// The IOMMU through which DMA regions are made reachable by this function.
    fn iommu(&self) -> Arc<dyn Iommu>;

    /// Enables `vectors` MSI-X vectors, each signalling its own [`Interrupt`].
    fn enable_msix(&self, vectors: u16) -> Result<Vec<Interrupt>, BackendError>;

    /// Disables MSI-X.
    fn disable_msix(&self) -> Result<(), BackendError>;

    /// Function-level reset.
    fn reset(&self) -> Result<(), BackendError>;
}
