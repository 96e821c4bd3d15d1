//! The model's IOMMU: every access the device makes to host memory goes through an IOVA → host
//! memory map that the backend sets up (the in-process driver's DMA seam, or the guest-memory
//! regions a vfio-user client announces). An access outside every mapping, or one that spans a
//! hole, is a device-side fault that is counted and reported to the engine that made it — never
//! a host crash.
//!
//! This is the model's DMA room: the only place it touches memory through raw pointers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

mod error;
pub use error::{DmaError, MapError, RegionError};

/// Which direction a mapping allows the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// The device may only read.
    ReadOnly,
    /// The device may read and write.
    ReadWrite,
}

#[derive(Debug, Clone)]
struct Mapping {
    len: u64,
    host: usize,
    access: Access,
    /// Keeps an owned region alive while it is mapped.
    _owner: Option<Arc<HostRegion>>,
}

/// Host memory owned by the model's user and shared with the device: a zeroed, page-aligned
/// allocation that can be mapped into an [`Iommu`] safely (the mapping keeps it alive) and read
/// or written by copying. Tests, tools and the in-process backend use it as "host RAM".
pub struct HostRegion {
    ptr: std::ptr::NonNull<u8>,
    layout: std::alloc::Layout,
}

// SAFETY: the region is plain heap memory reached only through copies (`read`, `write`) and the
// IOMMU's copies; concurrent access is the shared-memory semantics device memory has.
unsafe impl Send for HostRegion {}
// SAFETY: as for `Send`: no references into the memory are ever handed out.
unsafe impl Sync for HostRegion {}

impl std::fmt::Debug for HostRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostRegion")
            .field("len", &self.layout.size())
            .finish()
    }
}

impl HostRegion {
    /// A zeroed region of `len` bytes (rounded up to 4 KiB), 4 KiB aligned. Fails (returns
    /// `None`) for a zero length or when the allocation fails.
    pub fn new(len: usize) -> Option<Arc<Self>> {
        let len = len.checked_add(4095)? & !4095;
        let layout = std::alloc::Layout::from_size_align(len, 4096).ok()?;
        if len == 0 {
            return None;
        }
        // SAFETY: `layout` has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        Some(Arc::new(Self {
            ptr: std::ptr::NonNull::new(ptr)?,
            layout,
        }))
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.layout.size()
    }

    /// Always false: regions are never empty.
    pub fn is_empty(&self) -> bool {
        false
    }

    fn range(&self, offset: usize, len: usize) -> Result<(), RegionError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len() => Ok(()),
            _ => Err(RegionError {
                offset,
                len,
                size: self.len(),
            }),
        }
    }

    /// Copies bytes out of the region.
    pub fn read(&self, offset: usize, buf: &mut [u8]) -> Result<(), RegionError> {
        self.range(offset, buf.len())?;
        // SAFETY: the range is inside the allocation (checked above) and `buf` is separate memory.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.ptr.as_ptr().add(offset),
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        Ok(())
    }

    /// Copies bytes into the region.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), RegionError> {
        self.range(offset, data.len())?;
        // SAFETY: the range is inside the allocation (checked above) and `data` is separate memory.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(offset), data.len())
        };
        Ok(())
    }
}

impl Drop for HostRegion {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

/// Totals of device accesses to host memory. Accesses that succeed are not counted here: two
/// atomic additions on every DMA cost the model more than any reader needs, and the data path
/// counts what it moves in the function's own counters (`Counters::payload_read_bytes`,
/// `payload_write_bytes`), under its lock.
#[derive(Debug, Default)]
pub struct DmaCounters {
    /// Accesses refused (unmapped, read-only, bus master off).
    pub faults: AtomicU64,
}

/// Mappings sorted by IOVA: a binary search per device access (a tree walk costs several
/// times more for the thousands of page-sized mappings firmware pages make).
#[derive(Debug, Default)]
struct MapTable {
    entries: Vec<(u64, Mapping)>,
}

impl MapTable {
    /// The mapping with the highest start `<= iova`.
    #[inline]
    fn covering_start(&self, iova: u64) -> Option<(u64, &Mapping)> {
        let after = self.entries.partition_point(|(start, _)| *start <= iova);
        let (start, m) = self.entries.get(after.checked_sub(1)?)?;
        Some((*start, m))
    }

    /// As [`MapTable::covering_start`], trying the entry at `hint` first; also returns the
    /// index of the entry found.
    #[inline]
    fn covering_start_from(&self, iova: u64, hint: usize) -> Option<(usize, u64, &Mapping)> {
        if let Some((start, m)) = self.entries.get(hint) {
            if *start <= iova && iova - *start < m.len {
                return Some((hint, *start, m));
            }
        }
        let index = self
            .entries
            .partition_point(|(start, _)| *start <= iova)
            .checked_sub(1)?;
        let (start, m) = self.entries.get(index)?;
        Some((index, *start, m))
    }

    /// The mapping with the highest start `< end`.
    fn last_starting_before(&self, end: u64) -> Option<(u64, &Mapping)> {
        self.covering_start(end.checked_sub(1)?)
    }

    fn position(&self, iova: u64) -> Result<usize, usize> {
        self.entries
            .binary_search_by_key(&iova, |(start, _)| *start)
    }

    fn insert(&mut self, iova: u64, m: Mapping) {
        match self.position(iova) {
            Ok(i) => self.entries[i].1 = m,
            Err(i) => self.entries.insert(i, (iova, m)),
        }
    }

    fn get(&self, iova: u64) -> Option<&Mapping> {
        self.position(iova).ok().map(|i| &self.entries[i].1)
    }

    fn get_mut(&mut self, iova: u64) -> Option<&mut Mapping> {
        self.position(iova).ok().map(|i| &mut self.entries[i].1)
    }

    fn remove(&mut self, iova: u64) {
        if let Ok(i) = self.position(iova) {
            self.entries.remove(i);
        }
    }

    fn clear(&mut self) {
        self.entries.clear();
    }

    /// Keeps only the entries `keep` says yes to, in one pass.
    fn retain(&mut self, mut keep: impl FnMut(u64, &Mapping) -> bool) {
        self.entries.retain(|(start, m)| keep(*start, m));
    }

    fn len(&self) -> usize {
        self.entries.len()
    }
}

/// Entries of [`Iommu`]'s recent-mapping table.
const RECENT_SLOTS: usize = 32;

/// The recent-mapping slot of `iova`'s 4 KiB page (a multiplicative hash of the page number).
#[inline]
fn recent_slot(iova: u64) -> usize {
    ((iova >> 12).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 59) as usize
}

/// IOVA → host memory translation for one PCI function.
#[derive(Debug, Default)]
pub struct Iommu {
    maps: RwLock<MapTable>,
    /// Ranges whose device accesses are counted ([`Iommu::watch`]); `watching` says whether
    /// there are any, so unwatched accesses pay one load.
    watches: RwLock<Vec<(u64, u64, Arc<AtomicU64>)>>,
    /// Ranges whose written bytes are counted ([`Iommu::watch_written`]); also behind
    /// `watching`.
    byte_watches: RwLock<Vec<(u64, u64, Arc<AtomicU64>)>>,
    watching: std::sync::atomic::AtomicBool,
    /// Map-table index of the mapping each 4 KiB page last hit, in a small table indexed by
    /// a hash of the page number: a packet's accesses go to a few regions (ring, doorbell
    /// record, buffers, CQ) again and again, so the index is tried before the binary search.
    /// Only a hint, checked against the table on every use.
    recent: [std::sync::atomic::AtomicU32; RECENT_SLOTS],
    /// Device access totals.
    pub counters: DmaCounters,
}

impl Iommu {
    /// An IOMMU with no mappings.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes `len` bytes of host memory at `host` reachable by the device at `iova`.
    ///
    /// # Safety
    ///
    /// `host..host + len` must be valid for reads (and for writes when `access` is
    /// [`Access::ReadWrite`]) until [`Iommu::unmap`] removes the mapping or the `Iommu` is
    /// dropped. The memory may be read and written by other threads concurrently, as device
    /// memory is: the model copies bytes in and out and never forms references into it.
    pub unsafe fn map(
        &self,
        iova: u64,
        host: *mut u8,
        len: u64,
        access: Access,
    ) -> Result<(), MapError> {
        if len == 0 || iova.checked_add(len).is_none() {
            return Err(MapError::BadRange { iova, len });
        }
        let mut maps = self.maps.write().unwrap_or_else(|e| e.into_inner());
        let end = iova + len;
        if let Some((start, m)) = maps.last_starting_before(end) {
            if start + m.len > iova {
                return Err(MapError::Overlap { iova, len });
            }
        }
        maps.insert(
            iova,
            Mapping {
                len,
                host: host as usize,
                access,
                _owner: None,
            },
        );
        Ok(())
    }

    /// Maps a whole [`HostRegion`] at `iova`; the mapping keeps the region alive until unmapped.
    pub fn map_region(
        &self,
        iova: u64,
        region: Arc<HostRegion>,
        access: Access,
    ) -> Result<(), MapError> {
        let len = region.len() as u64;
        let host = region.ptr.as_ptr();
        // SAFETY: the region's memory stays allocated while the mapping holds its `Arc` (set
        // below, before this function returns the region's last other owner), and it is only
        // ever accessed through copies.
        unsafe { self.map(iova, host, len, access) }?;
        let mut maps = self.maps.write().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = maps.get_mut(iova) {
            m._owner = Some(region);
        }
        Ok(())
    }

    /// Removes the mapping that starts at `iova` and is `len` bytes long.
    pub fn unmap(&self, iova: u64, len: u64) -> Result<(), MapError> {
        let mut maps = self.maps.write().unwrap_or_else(|e| e.into_inner());
        match maps.get(iova) {
            Some(m) if m.len == len => {
                maps.remove(iova);
                Ok(())
            }
            _ => Err(MapError::NotMapped { iova, len }),
        }
    }

    /// Removes every mapping of `mappings`, each given as its start and length, under one lock
    /// and in one pass over the table (where an [`Iommu::unmap`] each would shift the table once
    /// per mapping). Refused, removing nothing, when any of them is not exactly one mapping.
    pub fn unmap_many(&self, mappings: &[(u64, u64)]) -> Result<(), MapError> {
        let mut maps = self.maps.write().unwrap_or_else(|e| e.into_inner());
        for &(iova, len) in mappings {
            match maps.get(iova) {
                Some(m) if m.len == len => {}
                _ => return Err(MapError::NotMapped { iova, len }),
            }
        }
        if let [(iova, _)] = mappings {
            maps.remove(*iova);
            return Ok(());
        }
        let mut starts: Vec<u64> = mappings.iter().map(|&(iova, _)| iova).collect();
        starts.sort_unstable();
        maps.retain(|start, _| starts.binary_search(&start).is_err());
        Ok(())
    }

    /// Counts every device access (read or write, allowed or refused) that touches
    /// `[iova, iova + len)` from now on, in the returned counter: tests use it to prove the
    /// device left memory alone (after a revocation, for instance).
    pub fn watch(&self, iova: u64, len: u64) -> Arc<AtomicU64> {
        let counter = Arc::new(AtomicU64::new(0));
        self.watches
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push((iova, iova.saturating_add(len), counter.clone()));
        self.watching.store(true, Ordering::Release);
        counter
    }

    /// Counts the bytes every device write puts into `[iova, iova + len)` from now on (the
    /// part of each write that falls inside the range), in the returned counter: tests use it
    /// to prove which bytes of a frame landed where (headers in host memory, payload in a
    /// dmabuf).
    pub fn watch_written(&self, iova: u64, len: u64) -> Arc<AtomicU64> {
        let counter = Arc::new(AtomicU64::new(0));
        self.byte_watches
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push((iova, iova.saturating_add(len), counter.clone()));
        self.watching.store(true, Ordering::Release);
        counter
    }

    fn note_written(&self, iova: u64, len: usize) {
        if !self.watching.load(Ordering::Acquire) {
            return;
        }
        let end = iova.saturating_add(len as u64);
        for (start, stop, counter) in self
            .byte_watches
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            let (from, to) = (iova.max(*start), end.min(*stop));
            if from < to {
                counter.fetch_add(to - from, Ordering::Relaxed);
            }
        }
    }

    fn note_access(&self, iova: u64, len: usize) {
        if !self.watching.load(Ordering::Acquire) {
            return;
        }
        let end = iova.saturating_add(len as u64);
        for (start, stop, counter) in self
            .watches
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            if iova < *stop && *start < end {
                counter.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Removes every mapping (function reset keeps none).
    pub fn clear(&self) {
        self.maps.write().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// Number of live mappings.
    pub fn mapping_count(&self) -> usize {
        self.maps.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Walks `[iova, iova + len)` across consecutive mappings, calling `each(host, offset, n)`
    /// for every piece. Mappings that merely touch in IOVA space (as a guest's pages do when an
    /// IOMMU maps them one at a time) are walked across; a hole, or a read-only mapping for a
    /// write, is a fault reported before `each` runs at all, so a refused access changes nothing.
    fn walk(
        &self,
        maps: &MapTable,
        iova: u64,
        len: usize,
        write: bool,
        mut each: impl FnMut(usize, usize, usize),
    ) -> Result<(), DmaError> {
        let kind = if write { "write" } else { "read" };
        let unmapped = DmaError::Unmapped { kind, iova, len };
        let end = iova.checked_add(len as u64).ok_or(unmapped)?;
        let piece_at = |cur: u64| -> Result<(usize, u64), DmaError> {
            let slot = &self.recent[recent_slot(cur)];
            let hint = slot.load(Ordering::Relaxed) as usize;
            let (index, start, m) = maps.covering_start_from(cur, hint).ok_or(unmapped)?;
            if cur >= start + m.len {
                return Err(unmapped);
            }
            if index != hint {
                slot.store(index as u32, Ordering::Relaxed);
            }
            if write && m.access == Access::ReadOnly {
                return Err(DmaError::ReadOnly { iova, len });
            }
            Ok((
                m.host + (cur - start) as usize,
                (start + m.len).min(end) - cur,
            ))
        };
        // One mapping covering the whole range (the usual case): one lookup.
        let (host, n) = piece_at(iova)?;
        if n == len as u64 {
            each(host, 0, len);
            return Ok(());
        }
        // Check the whole range first, then copy.
        let mut cur = iova;
        while cur < end {
            cur += piece_at(cur)?.1;
        }
        let mut cur = iova;
        while cur < end {
            let (host, n) = piece_at(cur)?;
            each(host, (cur - iova) as usize, n as usize);
            cur += n;
        }
        Ok(())
    }

    /// True when every byte of `iova..iova+len` is mapped (writable when `write`).
    pub fn is_mapped(&self, iova: u64, len: u64, write: bool) -> bool {
        let maps = self.maps.read().unwrap_or_else(|e| e.into_inner());
        self.walk(&maps, iova, len as usize, write, |_, _, _| {})
            .is_ok()
    }

    /// Device read of `buf.len()` bytes at `iova`.
    pub fn read(&self, iova: u64, buf: &mut [u8]) -> Result<(), DmaError> {
        if buf.is_empty() {
            return Ok(());
        }
        self.note_access(iova, buf.len());
        let maps = self.maps.read().unwrap_or_else(|e| e.into_inner());
        let dst = buf.as_mut_ptr();
        let result = self.walk(&maps, iova, buf.len(), false, |host, offset, n| {
            // SAFETY: `walk` found a mapping covering `host..host + n`; `map`'s contract keeps
            // that memory valid for reads while it is mapped, and the read lock keeps the mapping
            // in place for the duration of the copy. `offset + n <= buf.len()` by construction,
            // and `buf` is our own memory, not device-visible memory handed to `map`.
            unsafe { std::ptr::copy_nonoverlapping(host as *const u8, dst.add(offset), n) };
        });
        result.inspect_err(|_| {
            self.counters.faults.fetch_add(1, Ordering::Relaxed);
        })
    }

    /// Device write of `data` at `iova`.
    pub fn write(&self, iova: u64, data: &[u8]) -> Result<(), DmaError> {
        if data.is_empty() {
            return Ok(());
        }
        self.note_access(iova, data.len());
        self.note_written(iova, data.len());
        let maps = self.maps.read().unwrap_or_else(|e| e.into_inner());
        let src = data.as_ptr();
        let result = self.walk(&maps, iova, data.len(), true, |host, offset, n| {
            // SAFETY: as in `read`, and every piece's mapping is writable (checked by `walk`).
            unsafe { std::ptr::copy_nonoverlapping(src.add(offset), host as *mut u8, n) };
        });
        result.inspect_err(|_| {
            self.counters.faults.fetch_add(1, Ordering::Relaxed);
        })
    }

    /// Reads a big-endian 32-bit word (a doorbell record, for instance).
    pub fn read_be32(&self, iova: u64) -> Result<u32, DmaError> {
        let mut word = [0u8; 4];
        self.read(iova, &mut word)?;
        Ok(u32::from_be_bytes(word))
    }
}
