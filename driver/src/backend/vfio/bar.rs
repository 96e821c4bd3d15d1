//! BAR0 as the VFIO layer reaches it: mapped into the process, or through `pread`/`pwrite` on
//! the device file.

use std::ptr::NonNull;
use std::sync::Arc;

use super::sys::VfioSys;

/// How BAR0 is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MmioAccess {
    /// Mapped into the process: loads and stores go straight to the device.
    Mapped,
    /// Not mappable: each access is a `pread`/`pwrite` on the device file (a system call).
    ReadWrite,
}

/// BAR0 mapped into the process; unmapped on drop.
pub(super) struct MappedBar<S: VfioSys> {
    pub(super) sys: Arc<S>,
    pub(super) ptr: NonNull<u8>,
    pub(super) len: usize,
}

// SAFETY: the pointer is to device memory, not to Rust data; volatile loads and stores to it are
// valid from any thread (the device serialises them), and the mapping lives until drop.
unsafe impl<S: VfioSys> Send for MappedBar<S> {}
// SAFETY: as above: shared access is only ever volatile loads and stores through raw pointers.
unsafe impl<S: VfioSys> Sync for MappedBar<S> {}

impl<S: VfioSys> MappedBar<S> {
    /// The address of `width` bytes at `offset`, when inside the BAR and naturally aligned.
    #[inline]
    pub(super) fn at(&self, offset: usize, width: usize) -> Option<*mut u8> {
        let end = offset.checked_add(width)?;
        if end > self.len {
            return None;
        }
        let p = self.ptr.as_ptr().wrapping_add(offset);
        (p as usize % width == 0).then_some(p)
    }
}

impl<S: VfioSys> Drop for MappedBar<S> {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` came from `mmap` of this `sys`; the owner is being dropped, so no
        // access can follow.
        let _ = unsafe { self.sys.munmap(self.ptr, self.len) };
    }
}

/// BAR0: its size and where it sits in the device file, and the mapping if there is one.
pub(super) struct Bar0<S: VfioSys> {
    pub(super) len: usize,
    pub(super) offset: u64,
    pub(super) map: Option<MappedBar<S>>,
}
