//! DMA regions: page- or hugepage-backed host memory, locked, zeroed, and mapped for the device.
//!
//! A [`DmaRegion`] owns an anonymous mapping, an IOVA range and an IOMMU mapping, and gives them
//! back in the opposite order when dropped. Its memory is shared with a device that reads and
//! writes it on its own schedule, so this module never hands out a reference into it: every
//! access is a bounds-checked copy or a volatile load or store through a raw pointer, in the
//! manner of `vm-memory`'s volatile slices.
//!
//! # A region cannot be freed while the device may still use it
//!
//! Dropping a region first asks the IOMMU to unmap it. Only when that succeeds (the backend's
//! promise that the device can no longer reach the memory) is the memory returned to the kernel
//! and the IOVA range to the allocator. When the unmap fails, the device may still write the
//! memory, so both are deliberately leaked: the memory stays allocated, the IOVA range is never
//! handed out again, and the leaked bytes are counted in [`DmaRegion::leaked_bytes`].

use std::fmt;
use std::io;
use std::num::NonZeroUsize;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use nix::errno::Errno;
use nix::sys::mman::{self, MapFlags, MmapAdvise, ProtFlags};
use thiserror::Error;

use crate::iommu::{Iommu, IommuError};
use crate::iova::{IovaAllocator, IovaError, IOVA_PAGE};

/// Size of a huge page as used by [`PageKind::Huge2M`], in bytes (2 MiB).
pub const HUGE_PAGE_SIZE: usize = 2 << 20;

/// Regions created and not yet dropped (leaked ones included: they were dropped).
static LIVE_REGIONS: AtomicUsize = AtomicUsize::new(0);

/// Bytes of memory left allocated, and IOVA space left reserved, because an unmap failed or
/// the device could still reach them ([`DmaRegion::leak`]).
static LEAKED_BYTES: AtomicU64 = AtomicU64::new(0);

/// Number of [`DmaRegion`]s created and not yet dropped, in this process.
///
/// Tests use it to check that nothing is left mapped after a device is torn down. A region whose
/// unmap failed counts as dropped here and shows in [`DmaRegion::leaked_bytes`] instead.
pub fn live_regions() -> usize {
    LIVE_REGIONS.load(Ordering::Relaxed)
}

/// Which pages back a region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PageKind {
    /// 2 MiB hugetlbfs pages (`MAP_HUGETLB | MAP_HUGE_2MB`); the length is rounded up to a
    /// multiple of 2 MiB. Needs hugepages reserved in `/proc/sys/vm/nr_hugepages`. Fewer,
    /// larger pages mean fewer IOMMU and device translation entries.
    Huge2M,
    /// The system's base pages (4 KiB on x86-64); the length is rounded up to a multiple of
    /// that page size.
    Small,
    /// [`PageKind::Huge2M`] when the request is at least 1 MiB (half a huge page, so rounding up
    /// wastes at most half) and 2 MiB pages are available; [`PageKind::Small`] otherwise.
    /// [`DmaRegion::page_kind`] tells which was used.
    Auto,
}

/// Why a DMA region could not be created or accessed.
#[derive(Debug, Error)]
pub enum DmaError {
    /// A region of zero bytes, or one too large to round up to whole pages, was asked for.
    #[error("cannot create a DMA region of {len:#x} bytes: the length must be non-zero and fit the address space once rounded up to whole pages")]
    InvalidLength {
        /// Length asked for, in bytes.
        len: usize,
    },
    /// 2 MiB hugepages were asked for ([`PageKind::Huge2M`]) and could not be had.
    #[error("cannot get {len:#x} bytes of 2 MiB hugepages for DMA: {source}; reserve hugepages (e.g. `echo 512 > /proc/sys/vm/nr_hugepages`, or `hugepages=` on the kernel command line) or ask for PageKind::Auto or PageKind::Small")]
    HugePages {
        /// Bytes asked for, rounded up to 2 MiB.
        len: usize,
        /// What `mmap` said.
        #[source]
        source: io::Error,
    },
    /// Anonymous memory for the region could not be mapped.
    #[error("cannot map {len:#x} bytes of memory for DMA: {source}; the host is short of memory or the address-space limit (`ulimit -v`) is too low")]
    Mmap {
        /// Bytes asked for, rounded up to whole pages.
        len: usize,
        /// What `mmap` said.
        #[source]
        source: io::Error,
    },
    /// Locking the region in memory failed because of the locked-memory limit.
    #[error("cannot lock {len:#x} bytes of DMA memory: the locked-memory limit (RLIMIT_MEMLOCK) is {limit} bytes, counting what this process has locked already; raise it with `ulimit -l unlimited`, in /etc/security/limits.conf, or with `LimitMEMLOCK=infinity` for a systemd service, or grant CAP_IPC_LOCK")]
    Memlock {
        /// Bytes that could not be locked.
        len: usize,
        /// The soft RLIMIT_MEMLOCK at the time, in bytes.
        limit: u64,
    },
    /// Locking the region in memory failed for another reason.
    #[error("cannot lock {len:#x} bytes of DMA memory: {source}")]
    Lock {
        /// Bytes that could not be locked.
        len: usize,
        /// What `mlock` said.
        #[source]
        source: io::Error,
    },
    /// No IOVA range could be allocated for the region.
    #[error("cannot give the DMA region an IOVA: {0}")]
    Iova(#[from] IovaError),
    /// The IOMMU backend refused to map the region, or could not name its identity IOVA.
    #[error("cannot make the DMA region reachable by the device: {0}")]
    Iommu(#[from] IommuError),
    /// An access reaches outside the region.
    #[error("access of {len:#x} bytes at offset {offset:#x} is outside the DMA region of {region_len:#x} bytes (a driver bug, or a device-written index that should have been checked)")]
    OutOfBounds {
        /// Offset of the access, in bytes from the region's start.
        offset: usize,
        /// Length of the access, in bytes.
        len: usize,
        /// Length of the region, in bytes.
        region_len: usize,
    },
    /// A word access is not naturally aligned.
    #[error("{align}-byte access at offset {offset:#x} of a DMA region is not {align}-byte aligned (a driver bug)")]
    Misaligned {
        /// Offset of the access, in bytes from the region's start.
        offset: usize,
        /// Alignment the access needs (its size), in bytes.
        align: usize,
    },
}

/// An anonymous mapping that is unmapped when dropped, so that every early return while a
/// region is being built gives the memory back.
struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

impl Mapping {
    fn new(len: usize, huge: bool) -> Result<Self, io::Error> {
        let size = NonZeroUsize::new(len).ok_or_else(|| io::Error::from(Errno::EINVAL))?;
        let mut flags = MapFlags::MAP_PRIVATE | MapFlags::MAP_ANONYMOUS | MapFlags::MAP_POPULATE;
        if huge {
            // MAP_HUGE_2MB picks the 2 MiB pool even where the default huge page size is 1 GiB.
            flags |= MapFlags::MAP_HUGETLB | MapFlags::MAP_HUGE_2MB;
        }
        // SAFETY: an anonymous mapping at an address the kernel chooses overlaps nothing this
        // process already uses; the pointer is only kept while the mapping exists.
        let ptr = unsafe {
            mman::mmap_anonymous(
                None,
                size,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                flags,
            )
        }?;
        let mapping = Self {
            ptr: ptr.cast(),
            len,
        };
        // A child created by fork() would otherwise share these pages copy-on-write, and the
        // parent's next store would move it to a new page the device does not see. Failure is
        // tolerated: recent kernels copy pinned pages at fork time instead.
        // SAFETY: the range is exactly the mapping just created; the advice changes only what a
        // future fork inherits.
        let _ = unsafe { mman::madvise(ptr, len, MmapAdvise::MADV_DONTFORK) };
        Ok(mapping)
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr..ptr + len` is a mapping this value created and still owns; no IOMMU
        // mapping of it exists (the owner forgets the `Mapping` once one does), so nothing can
        // reach it after this.
        // An munmap of our own whole mapping cannot fail short of a kernel bug, and a drop path
        // has nobody to tell.
        let _ = unsafe { mman::munmap(self.ptr.cast(), self.len) };
    }
}

/// Page-aligned host memory the device may read and write, locked and reachable at an IOVA.
///
/// Created by [`DmaRegion::new`]; the memory starts zeroed. The device sees `len()` bytes at
/// `iova()..iova() + len()`. All host access goes through bounds-checked copies and volatile word
/// accessors (`&self` everywhere), so the region can be shared between threads; which bytes
/// each party (a thread, the device) may write at a given time is the driver's protocol to keep,
/// as it is for the device. Word accessors are big-endian, as the device's structures are.
///
/// Dropping the region unmaps it from the device, then frees it; see the
/// [module documentation](self) for what happens when the unmap fails.
pub struct DmaRegion {
    ptr: NonNull<u8>,
    len: usize,
    iova: u64,
    kind: PageKind,
    iommu: Arc<dyn Iommu>,
    /// `None` when the backend chose the IOVA (no-IOMMU mode): nothing to give back.
    iovas: Option<Arc<IovaAllocator>>,
}

// SAFETY: `DmaRegion` owns its mapping outright (the raw pointer is not shared with any other
// Rust value), its other fields are `Send`, and mappings are process-wide, so it may be dropped
// or used from any thread.
unsafe impl Send for DmaRegion {}

// SAFETY: no reference into the memory is ever handed out; every `&self` access is a volatile
// load or store through the raw pointer, bounds-checked against a mapping that lives as long as
// `self`. Concurrent accesses therefore behave as they do against the device, which writes the
// same memory without Rust's knowledge: values may interleave, but no aliasing assumption is
// made or broken. `Arc<dyn Iommu>` and `Arc<IovaAllocator>` are `Sync`.
unsafe impl Sync for DmaRegion {}

impl DmaRegion {
    /// Allocates a region of at least `len` bytes backed by `kind` pages, locks and zeroes it,
    /// gives it an IOVA from `iovas` (or the backend's identity IOVA in no-IOMMU mode), and maps
    /// it with `iommu`.
    ///
    /// `len` is rounded up to whole pages (4 KiB, or 2 MiB for huge pages); [`DmaRegion::len`]
    /// reports the rounded length, all of which is usable. The IOVA is aligned to the page size.
    /// Huge pages are not `mlock`ed: hugetlbfs pages are never swapped, and locking them would
    /// only charge RLIMIT_MEMLOCK for nothing.
    ///
    /// In no-IOMMU mode the backend's [`Iommu::identity_iova`] must fail for a range that is not
    /// physically contiguous (more than one small page, in general).
    ///
    /// # Errors
    ///
    /// [`DmaError::InvalidLength`], [`DmaError::HugePages`], [`DmaError::Mmap`],
    /// [`DmaError::Memlock`] / [`DmaError::Lock`], [`DmaError::Iova`], [`DmaError::Iommu`].
    /// Everything taken before the failure is given back.
    pub fn new(
        iommu: Arc<dyn Iommu>,
        iovas: &Arc<IovaAllocator>,
        len: usize,
        kind: PageKind,
    ) -> Result<Self, DmaError> {
        if len == 0 {
            return Err(DmaError::InvalidLength { len });
        }
        let (mapping, kind) = match kind {
            PageKind::Huge2M => (map_huge(len)?, PageKind::Huge2M),
            PageKind::Small => (map_small(len)?, PageKind::Small),
            PageKind::Auto if len >= HUGE_PAGE_SIZE / 2 => match map_huge(len) {
                Ok(mapping) => (mapping, PageKind::Huge2M),
                Err(_) => (map_small(len)?, PageKind::Small),
            },
            PageKind::Auto => (map_small(len)?, PageKind::Small),
        };
        let page = if kind == PageKind::Huge2M {
            HUGE_PAGE_SIZE
        } else {
            small_page_size()
        };
        if kind == PageKind::Small {
            lock(&mapping)?;
        }
        // MAP_POPULATE is best effort and says nothing when it falls short; storing to every
        // byte now makes each page present before the device is told about it, and makes the
        // zero contents explicit rather than a property of how the memory was obtained.
        // SAFETY: the mapping is `len` writable bytes that no one else can reach yet.
        unsafe { mapping.ptr.as_ptr().write_bytes(0, mapping.len) };

        let (iova, owner) = match iommu.identity_iova(mapping.ptr.as_ptr(), mapping.len) {
            Some(identity) => (identity?, None),
            None => {
                let iova = iovas.alloc(mapping.len as u64, page as u64)?;
                (iova, Some(Arc::clone(iovas)))
            }
        };

        // SAFETY: the memory stays mapped, unmoved, until `unmap` of this same range returns
        // `Ok`: on success the mapping is forgotten into the region, whose `Drop` only unmaps
        // memory after a successful `unmap` and leaks it otherwise.
        let mapped = unsafe { iommu.map(iova, mapping.ptr.as_ptr(), mapping.len) };
        if let Err(err) = mapped {
            if let Some(allocator) = &owner {
                // Cannot fail: the range was allocated just above and the device never got it.
                let _ = allocator.free(iova, mapping.len as u64);
            }
            return Err(err.into()); // `mapping` is unmapped as it drops.
        }

        let (ptr, len) = (mapping.ptr, mapping.len);
        std::mem::forget(mapping);
        LIVE_REGIONS.fetch_add(1, Ordering::Relaxed);
        Ok(Self {
            ptr,
            len,
            iova,
            kind,
            iommu,
            iovas: owner,
        })
    }

    /// Length of the region in bytes (the requested length rounded up to whole pages).
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: regions are never empty. Present because `len` is.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// IOVA of the first byte, as the device addresses it; aligned to the page size.
    #[inline]
    pub fn iova(&self) -> u64 {
        self.iova
    }

    /// The pages actually backing the region: [`PageKind::Huge2M`] or [`PageKind::Small`], never
    /// [`PageKind::Auto`].
    pub fn page_kind(&self) -> PageKind {
        self.kind
    }

    /// Size in bytes of the pages backing the region (2 MiB or the base page size), the
    /// granularity of the device's address translation for it.
    pub fn page_size(&self) -> usize {
        match self.kind {
            PageKind::Huge2M => HUGE_PAGE_SIZE,
            _ => small_page_size(),
        }
    }

    /// The region's pages (page-aligned IOVAs, untrimmed): what a memory key over the whole
    /// region is programmed with.
    pub fn pages(&self) -> crate::PageList {
        let page = self.page_size();
        crate::PageList {
            page_size: page,
            iovas: (0..self.len / page)
                .map(|i| self.iova + (i * page) as u64)
                .collect(),
            first_offset: 0,
            last_tail: 0,
        }
    }

    /// IOVA of the byte at `offset`, or `None` when `offset >= len()`.
    pub fn iova_of(&self, offset: usize) -> Option<u64> {
        (offset < self.len).then(|| self.iova + offset as u64)
    }

    /// Host address of the first byte, for the driver's MMIO and DMA rooms only (BlueFlame copies,
    /// buffer pools): `len()` bytes are valid while the region lives. Callers must not make
    /// references from it and must access it with volatile or raw-pointer operations, as the
    /// device writes it concurrently.
    #[inline]
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Copies `buf.len()` bytes starting at `offset` into `buf`.
    ///
    /// # Errors
    ///
    /// [`DmaError::OutOfBounds`] when the range leaves the region; `buf` is untouched then.
    #[inline]
    pub fn read(&self, offset: usize, buf: &mut [u8]) -> Result<(), DmaError> {
        self.check(offset, buf.len(), 1)?;
        // SAFETY: `check` proved `offset..offset + buf.len()` lies inside the live mapping.
        unsafe { volatile_copy_out(self.ptr.as_ptr().add(offset), buf) };
        Ok(())
    }

    /// Copies `data` into the region starting at `offset`.
    ///
    /// # Errors
    ///
    /// [`DmaError::OutOfBounds`] when the range leaves the region; nothing is written then.
    #[inline]
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), DmaError> {
        self.check(offset, data.len(), 1)?;
        // SAFETY: `check` proved `offset..offset + data.len()` lies inside the live mapping.
        unsafe { volatile_copy_in(self.ptr.as_ptr().add(offset), data) };
        Ok(())
    }

    /// Sets `len` bytes starting at `offset` to `byte`.
    ///
    /// # Errors
    ///
    /// [`DmaError::OutOfBounds`] when the range leaves the region; nothing is written then.
    #[inline]
    pub fn fill(&self, offset: usize, len: usize, byte: u8) -> Result<(), DmaError> {
        self.check(offset, len, 1)?;
        // SAFETY: `check` proved `offset..offset + len` lies inside the live mapping.
        unsafe { volatile_fill(self.ptr.as_ptr().add(offset), len, byte) };
        Ok(())
    }

    /// Writes `byte` at `offset` and at each `stride` bytes after it, `count` times in all
    /// (the ownership byte of consecutive CQE slots, say), with one bounds check.
    ///
    /// # Errors
    ///
    /// [`DmaError::OutOfBounds`] when the last byte written would leave the region (or
    /// `stride` is 0 with `count` above 1); nothing is written then.
    #[inline]
    pub fn write_byte_strided(
        &self,
        offset: usize,
        stride: usize,
        count: usize,
        byte: u8,
    ) -> Result<(), DmaError> {
        if count == 0 {
            return Ok(());
        }
        let span = stride
            .checked_mul(count - 1)
            .filter(|_| stride > 0 || count == 1)
            .and_then(|last| last.checked_add(1));
        let Some(span) = span else {
            return Err(DmaError::OutOfBounds {
                offset,
                len: usize::MAX,
                region_len: self.len,
            });
        };
        self.check(offset, span, 1)?;
        let base = self.ptr.as_ptr();
        for k in 0..count {
            // SAFETY: `check` proved `offset..offset + stride * (count - 1) + 1` lies inside the
            // live mapping, and `offset + stride * k` for `k < count` is inside that range.
            unsafe { base.add(offset + stride * k).write_volatile(byte) };
        }
        Ok(())
    }

    /// Reads the big-endian 32-bit word at `offset` with one volatile load (doorbell records,
    /// CQE/EQE fields).
    ///
    /// # Errors
    ///
    /// [`DmaError::OutOfBounds`], or [`DmaError::Misaligned`] unless `offset` is a multiple of 4.
    #[inline]
    pub fn read_u32_be(&self, offset: usize) -> Result<u32, DmaError> {
        self.check(offset, 4, 4)?;
        // SAFETY: `check` proved the 4 bytes lie inside the live mapping and, the base being
        // page-aligned, that the address is 4-byte aligned.
        let raw = unsafe { self.ptr.as_ptr().add(offset).cast::<u32>().read_volatile() };
        Ok(u32::from_be(raw))
    }

    /// Writes `value` big-endian as the 32-bit word at `offset` with one volatile store.
    ///
    /// # Errors
    ///
    /// [`DmaError::OutOfBounds`], or [`DmaError::Misaligned`] unless `offset` is a multiple of 4.
    #[inline]
    pub fn write_u32_be(&self, offset: usize, value: u32) -> Result<(), DmaError> {
        self.check(offset, 4, 4)?;
        // SAFETY: `check` proved the 4 bytes lie inside the live mapping and, the base being
        // page-aligned, that the address is 4-byte aligned.
        unsafe {
            self.ptr
                .as_ptr()
                .add(offset)
                .cast::<u32>()
                .write_volatile(value.to_be())
        };
        Ok(())
    }

    /// Reads the big-endian 64-bit word at `offset` with one volatile load.
    ///
    /// # Errors
    ///
    /// [`DmaError::OutOfBounds`], or [`DmaError::Misaligned`] unless `offset` is a multiple of 8.
    #[inline]
    pub fn read_u64_be(&self, offset: usize) -> Result<u64, DmaError> {
        self.check(offset, 8, 8)?;
        // SAFETY: `check` proved the 8 bytes lie inside the live mapping and, the base being
        // page-aligned, that the address is 8-byte aligned.
        let raw = unsafe { self.ptr.as_ptr().add(offset).cast::<u64>().read_volatile() };
        Ok(u64::from_be(raw))
    }

    /// Writes `value` big-endian as the 64-bit word at `offset` with one volatile store.
    ///
    /// # Errors
    ///
    /// [`DmaError::OutOfBounds`], or [`DmaError::Misaligned`] unless `offset` is a multiple of 8.
    #[inline]
    pub fn write_u64_be(&self, offset: usize, value: u64) -> Result<(), DmaError> {
        self.check(offset, 8, 8)?;
        // SAFETY: `check` proved the 8 bytes lie inside the live mapping and, the base being
        // page-aligned, that the address is 8-byte aligned.
        unsafe {
            self.ptr
                .as_ptr()
                .add(offset)
                .cast::<u64>()
                .write_volatile(value.to_be())
        };
        Ok(())
    }

    /// Reads `N` consecutive 64-bit words starting at `offset`, one volatile load each, as the
    /// bytes sit in memory (each word is `u64::from_ne_bytes` of its 8 bytes). For fixed-size
    /// device structures (CQEs, WQE segments, packet headers) on the fast path: one bounds check
    /// and no loop over bytes.
    ///
    /// # Errors
    ///
    /// [`DmaError::OutOfBounds`], or [`DmaError::Misaligned`] unless `offset` is a multiple of 8.
    #[inline(always)]
    pub fn read_words<const N: usize>(&self, offset: usize) -> Result<[u64; N], DmaError> {
        self.check(offset, N * 8, 8)?;
        // SAFETY: `check` proved the `N * 8` bytes lie inside the live mapping and, the base
        // being page-aligned, that the address is 8-byte aligned.
        Ok(unsafe { volatile_read_words(self.ptr.as_ptr().add(offset)) })
    }

    /// Writes `words` as `N` consecutive 64-bit words starting at `offset`, one volatile store
    /// each, in memory order (each word's bytes as `u64::to_ne_bytes` gives them).
    ///
    /// # Errors
    ///
    /// As [`read_words`](Self::read_words); nothing is written then.
    #[inline(always)]
    pub fn write_words<const N: usize>(
        &self,
        offset: usize,
        words: &[u64; N],
    ) -> Result<(), DmaError> {
        self.check(offset, N * 8, 8)?;
        // SAFETY: `check` proved the `N * 8` bytes lie inside the live mapping and, the base
        // being page-aligned, that the address is 8-byte aligned.
        unsafe { volatile_write_words(self.ptr.as_ptr().add(offset), words) };
        Ok(())
    }

    /// Moves the mapping out into the returned region and leaves `self` empty: zero bytes long,
    /// refusing every access, and dropping without touching any mapping. This is how memory the
    /// device may still reach is handed to a longer-lived owner (a quarantine) from a `Drop`
    /// that only has `&mut self`.
    pub fn take(&mut self) -> DmaRegion {
        let empty = DmaRegion {
            ptr: NonNull::dangling(),
            len: 0,
            iova: 0,
            kind: PageKind::Small,
            iommu: Arc::clone(&self.iommu),
            iovas: None,
        };
        std::mem::replace(self, empty)
    }

    /// Gives up the region for good without unmapping or freeing it: for memory the device may
    /// still write when nothing (no queue destroy, no function reset) can make it stop. The
    /// bytes count in [`DmaRegion::leaked_bytes`].
    pub fn leak(self) {
        if self.len == 0 {
            return;
        }
        LIVE_REGIONS.fetch_sub(1, Ordering::Relaxed);
        LEAKED_BYTES.fetch_add(self.len as u64, Ordering::Relaxed);
        std::mem::forget(self);
    }

    /// Bytes of DMA memory leaked in this process because the IOMMU refused to unmap them
    /// (see the [module documentation](self)) or the device could still reach them
    /// ([`DmaRegion::leak`]). Non-zero means the backend or device misbehaved.
    pub fn leaked_bytes() -> u64 {
        LEAKED_BYTES.load(Ordering::Relaxed)
    }

    /// `offset..offset + len` inside the region and `offset` a multiple of `align` (a power of
    /// two; the base is page-aligned, so this aligns the address too).
    #[inline]
    fn check(&self, offset: usize, len: usize, align: usize) -> Result<(), DmaError> {
        let inside = offset.checked_add(len).is_some_and(|end| end <= self.len);
        if !inside || offset % align != 0 {
            return Err(self.refused(offset, len, align));
        }
        Ok(())
    }

    /// The error for an access `check` refused; kept out of line so the accessors stay small.
    #[cold]
    #[inline(never)]
    fn refused(&self, offset: usize, len: usize, align: usize) -> DmaError {
        if offset.checked_add(len).is_none_or(|end| end > self.len) {
            DmaError::OutOfBounds {
                offset,
                len,
                region_len: self.len,
            }
        } else {
            DmaError::Misaligned { offset, align }
        }
    }
}

impl fmt::Debug for DmaRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DmaRegion")
            .field("host", &self.ptr)
            .field("len", &format_args!("{:#x}", self.len))
            .field("iova", &format_args!("{:#x}", self.iova))
            .field("kind", &self.kind)
            .field("identity", &self.iovas.is_none())
            .finish()
    }
}

impl Drop for DmaRegion {
    fn drop(&mut self) {
        if self.len == 0 {
            // Emptied by `take`: the mapping lives on in the region it was moved to.
            return;
        }
        LIVE_REGIONS.fetch_sub(1, Ordering::Relaxed);
        if self.iommu.unmap(self.iova, self.len).is_err() {
            // The device may still reach the memory: freeing it, or reusing its IOVA, could let
            // the device corrupt whatever is put there next.
            LEAKED_BYTES.fetch_add(self.len as u64, Ordering::Relaxed);
            return;
        }
        if let Some(allocator) = &self.iovas {
            // Cannot fail: the range was allocated in `new` and is given back only here.
            let _ = allocator.free(self.iova, self.len as u64);
        }
        drop(Mapping {
            ptr: self.ptr,
            len: self.len,
        });
    }
}

fn map_huge(len: usize) -> Result<Mapping, DmaError> {
    let rounded = len
        .checked_next_multiple_of(HUGE_PAGE_SIZE)
        .ok_or(DmaError::InvalidLength { len })?;
    Mapping::new(rounded, true).map_err(|source| DmaError::HugePages {
        len: rounded,
        source,
    })
}

fn map_small(len: usize) -> Result<Mapping, DmaError> {
    let rounded = len
        .checked_next_multiple_of(small_page_size())
        .ok_or(DmaError::InvalidLength { len })?;
    Mapping::new(rounded, false).map_err(|source| DmaError::Mmap {
        len: rounded,
        source,
    })
}

fn lock(mapping: &Mapping) -> Result<(), DmaError> {
    let len = mapping.len;
    // SAFETY: locking a range of our own mapping changes only whether it may be swapped.
    let Err(errno) = (unsafe { mman::mlock(mapping.ptr.cast(), len) }) else {
        return Ok(());
    };
    // mlock says ENOMEM (or EPERM when the limit is 0) for a locked-memory limit too low, as
    // well as for real shortage; a finite limit is by far the likeliest cause, and the one the
    // user can fix.
    match (errno, memlock_limit()) {
        (Errno::ENOMEM | Errno::EPERM, Some(limit)) => Err(DmaError::Memlock { len, limit }),
        _ => Err(DmaError::Lock {
            len,
            source: errno.into(),
        }),
    }
}

/// The soft RLIMIT_MEMLOCK in bytes, or `None` when unlimited or unknown.
fn memlock_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `getrlimit` writes one `rlimit` through a pointer to a live local.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut limit) };
    (rc == 0 && limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur)
}

/// The base page size, at least 4 KiB (the IOVA granule).
pub(crate) fn small_page_size() -> usize {
    // SAFETY: `sysconf` reads a constant of the running system.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size)
        .ok()
        .filter(|s| s.is_power_of_two())
        .unwrap_or(0)
        .max(IOVA_PAGE as usize)
}

/// Copies from device-visible memory at `src` into `dst`, eight bytes per volatile load where
/// `src` allows it, so that naturally aligned device-written words are not torn by the copy.
///
/// # Safety
///
/// `src..src + dst.len()` must be inside a live mapping.
#[inline]
pub(crate) unsafe fn volatile_copy_out(src: *const u8, dst: &mut [u8]) {
    let len = dst.len();
    let mut i = 0;
    while i < len && (src as usize + i) % 8 != 0 {
        // SAFETY: `i < len`, inside the mapping by the caller's promise.
        dst[i] = unsafe { src.add(i).read_volatile() };
        i += 1;
    }
    while len - i >= 8 {
        // SAFETY: `i + 8 <= len`, inside the mapping; `src + i` is 8-byte aligned.
        let word = unsafe { src.add(i).cast::<u64>().read_volatile() };
        dst[i..i + 8].copy_from_slice(&word.to_ne_bytes());
        i += 8;
    }
    while i < len {
        // SAFETY: `i < len`, inside the mapping.
        dst[i] = unsafe { src.add(i).read_volatile() };
        i += 1;
    }
}

/// Reads `N` 64-bit words from device-visible memory at `src`, one volatile load each.
///
/// # Safety
///
/// `src..src + N * 8` must be inside a live mapping and `src` 8-byte aligned.
#[inline]
pub(crate) unsafe fn volatile_read_words<const N: usize>(src: *const u8) -> [u64; N] {
    let mut words = [0u64; N];
    for (i, word) in words.iter_mut().enumerate() {
        // SAFETY: word `i < N` lies inside the mapping and is aligned, by the caller's promise.
        *word = unsafe { src.cast::<u64>().add(i).read_volatile() };
    }
    words
}

/// Writes `N` 64-bit words to device-visible memory at `dst`, one volatile store each.
///
/// # Safety
///
/// `dst..dst + N * 8` must be inside a live, writable mapping and `dst` 8-byte aligned.
#[inline]
pub(crate) unsafe fn volatile_write_words<const N: usize>(dst: *mut u8, words: &[u64; N]) {
    for (i, &word) in words.iter().enumerate() {
        // SAFETY: word `i < N` lies inside the mapping and is aligned, by the caller's promise.
        unsafe { dst.cast::<u64>().add(i).write_volatile(word) };
    }
}

/// Copies `src` into device-visible memory at `dst`, eight bytes per volatile store where `dst`
/// allows it.
///
/// # Safety
///
/// `dst..dst + src.len()` must be inside a live, writable mapping.
#[inline]
pub(crate) unsafe fn volatile_copy_in(dst: *mut u8, src: &[u8]) {
    let len = src.len();
    let mut i = 0;
    while i < len && (dst as usize + i) % 8 != 0 {
        // SAFETY: `i < len`, inside the mapping by the caller's promise.
        unsafe { dst.add(i).write_volatile(src[i]) };
        i += 1;
    }
    while len - i >= 8 {
        let mut word = [0u8; 8];
        word.copy_from_slice(&src[i..i + 8]);
        // SAFETY: `i + 8 <= len`, inside the mapping; `dst + i` is 8-byte aligned.
        unsafe {
            dst.add(i)
                .cast::<u64>()
                .write_volatile(u64::from_ne_bytes(word))
        };
        i += 8;
    }
    while i < len {
        // SAFETY: `i < len`, inside the mapping.
        unsafe { dst.add(i).write_volatile(src[i]) };
        i += 1;
    }
}

/// Sets `len` bytes of device-visible memory at `dst` to `byte` with volatile stores.
///
/// # Safety
///
/// `dst..dst + len` must be inside a live, writable mapping.
#[inline]
pub(crate) unsafe fn volatile_fill(dst: *mut u8, len: usize, byte: u8) {
    let mut i = 0;
    while i < len && (dst as usize + i) % 8 != 0 {
        // SAFETY: `i < len`, inside the mapping by the caller's promise.
        unsafe { dst.add(i).write_volatile(byte) };
        i += 1;
    }
    let word = u64::from_ne_bytes([byte; 8]);
    while len - i >= 8 {
        // SAFETY: `i + 8 <= len`, inside the mapping; `dst + i` is 8-byte aligned.
        unsafe { dst.add(i).cast::<u64>().write_volatile(word) };
        i += 8;
    }
    while i < len {
        // SAFETY: `i < len`, inside the mapping.
        unsafe { dst.add(i).write_volatile(byte) };
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volatile_copies_handle_every_alignment_and_length() {
        let mut backing = vec![0u64; 8];
        let base = backing.as_mut_ptr().cast::<u8>();
        for start in 0..9 {
            for len in 0..(64 - start) {
                let pattern: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(7) ^ 0x5a).collect();
                // SAFETY: `start + len <= 64`, inside the 64-byte local buffer.
                unsafe { volatile_fill(base, 64, 0xee) };
                // SAFETY: as above.
                unsafe { volatile_copy_in(base.add(start), &pattern) };
                let mut back = vec![0u8; len];
                // SAFETY: as above.
                unsafe { volatile_copy_out(base.add(start), &mut back) };
                assert_eq!(back, pattern, "start {start} len {len}");
                let mut all = [0u8; 64];
                // SAFETY: the whole 64-byte buffer.
                unsafe { volatile_copy_out(base, &mut all) };
                assert!(all[..start].iter().all(|&b| b == 0xee));
                assert!(all[start + len..].iter().all(|&b| b == 0xee));
            }
        }
    }

    #[test]
    fn memlock_error_says_what_to_do() {
        let msg = DmaError::Memlock {
            len: 0x40_0000,
            limit: 65536,
        }
        .to_string();
        assert!(msg.contains("0x400000"), "{msg}");
        assert!(msg.contains("65536 bytes"), "{msg}");
        assert!(msg.contains("ulimit -l"), "{msg}");
    }
}
