//! Software-owned ICM (SW ICM): the device memory mlx5 software steering writes its steering
//! entries and header-modify lists into, the SW_ICM general objects that hand pieces of it to
//! the driver, and the sparse storage behind it.
//!
//! The model offers three ranges at ICM addresses of its choosing (a ConnectX names its own in
//! the device-memory capability page): steering entries, header-modify action lists and
//! header-modify patterns. The driver allocates inside them itself (Linux's mlx5_core keeps a
//! bitmap per range, `mlx5_dm_sw_icm_alloc` in lib/dm.c) and tells the device with
//! CREATE_GENERAL_OBJECT of type SW_ICM, which the device only checks and records
//! (`fw::sw_icm`). The host then reaches the bytes through memory keys of access mode SW_ICM
//! (mlx5_ib's `mlx5_ib_get_dm_mr`) with RDMA WRITE and READ (rdma-core's dr_send.c), and the
//! steering engine reads them as entries ([`IcmStore::read_entry`]).
//!
//! A range is far larger than what software steering fills (the steering range alone is
//! 128 MiB), so the storage is sparse: a 4 KiB page is allocated on its first write and reads
//! of bytes never written give zero. At most [`MAX_BACKED_PAGES`] pages are backed at once; a
//! write that would need one more is refused ([`IcmError::Full`]). Destroying an object drops
//! its pages, so a later object over the same bytes starts zeroed.
//!
//! The data path reaches ICM at [`bus_address`]es of its own, as device memory (MEMIC) has:
//! `translate` turns an SW ICM key's address into one, and the function's DMA
//! (`Core::dma_read` / `dma_write`) sends those here instead of to the IOMMU. The storage is
//! written through `&Core` by the DMA path, so it has a lock of its own, taken last.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};

/// log2 of the unit SW ICM is allocated in, and of every object's smallest size and alignment:
/// 4 KiB (`log_sw_icm_alloc_granularity`; mlx5_core's `MLX5_LOG_SW_ICM_BLOCK_SIZE` reads it).
pub(crate) const LOG_ALLOC_GRANULARITY: u8 = 12;
/// log2 of the steering range's bytes: 128 MiB. rdma-core's `dr_domain_check_icm_memory_caps`
/// needs at least 2^26 (a 2^20-entry chunk of 64-byte entries).
pub(crate) const LOG_STEERING_SIZE: u8 = 27;
/// log2 of the header-modify range's bytes: 1 MiB (rdma-core needs at least 2^15; an action
/// list pointer counts 64-byte units from the range's start in 16 bits, so 4 MiB at most are
/// reachable).
pub(crate) const LOG_HEADER_MODIFY_SIZE: u8 = 20;
/// log2 of the header-modify pattern range's bytes: 1 MiB (rdma-core needs at least 2^15).
pub(crate) const LOG_PATTERN_SIZE: u8 = 20;
/// ICM address of the steering range: non-zero (mlx5_core skips a range at 0), aligned far
/// past its size, and below 2^40 so that a steering entry's 40-bit next and miss addresses
/// (rdma-core's `dr_ste_v1_set_miss_addr`, `_set_hit_addr`) reach all of it.
pub(crate) const STEERING_START: u64 = 0x10_0000_0000;
/// ICM address of the header-modify range (4 GiB past the steering range's start).
pub(crate) const HEADER_MODIFY_START: u64 = 0x11_0000_0000;
/// ICM address of the header-modify pattern range.
pub(crate) const PATTERN_START: u64 = 0x12_0000_0000;
/// Highest number of 4 KiB pages backed at once: 64 MiB (the model's bound; a software
/// steering domain with a few tables writes well under a megabyte).
pub(crate) const MAX_BACKED_PAGES: usize = 16 << 10;
/// Bytes of one steering entry (rdma-core's `DR_STE_SIZE`).
pub(crate) const ENTRY_SIZE: usize = 64;

const PAGE_SHIFT: u32 = 12;
const PAGE_SIZE: usize = 1 << PAGE_SHIFT;

/// First bus address of ICM as the data path sees it: ICM address `a` is at `ICM_BUS + a`.
/// Every ICM address is below 2^40, so ICM's bus addresses end where device memory's
/// (`objects::memic`) begin, and no IOVA reaches either (IOMMUs translate at most 57 bits).
const ICM_BUS: u64 = 0xffff_fe00_0000_0000;
/// ICM addresses are below this (the 40 bits a steering entry's addresses carry).
const ICM_LIMIT: u64 = 1 << 40;

/// The bus address of ICM address `icm`.
pub(crate) fn bus_address(icm: u64) -> u64 {
    ICM_BUS + (icm & (ICM_LIMIT - 1))
}

/// The ICM address of bus address `address`, when it is one.
pub(crate) fn icm_address(address: u64) -> Option<u64> {
    address.checked_sub(ICM_BUS).filter(|&icm| icm < ICM_LIMIT)
}

/// The three SW ICM ranges: (start, log2 of size), in the device-memory page's order.
pub(crate) const RANGES: [(u64, u8); 3] = [
    (STEERING_START, LOG_STEERING_SIZE),
    (HEADER_MODIFY_START, LOG_HEADER_MODIFY_SIZE),
    (PATTERN_START, LOG_PATTERN_SIZE),
];

/// Why an SW ICM command or access was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IcmError {
    /// The piece does not lie inside one range.
    OutOfRange,
    /// Smaller than the allocation granularity, or a size too large to be a piece.
    BadSize,
    /// The start is not a multiple of the granularity.
    Misaligned,
    /// The piece overlaps a live object.
    Overlap,
    /// No live object of that number.
    NoObject,
    /// The object table is full.
    TableFull,
    /// The access is not inside one live object.
    NotAllocated,
    /// Backing the write would take more than [`MAX_BACKED_PAGES`] pages.
    Full,
}

/// One SW_ICM object: `[start, start + 2^log_size)`. Who owns it is `fw::devx`'s, as for
/// every object (by its number).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IcmObject {
    /// ICM address of the first byte.
    pub start: u64,
    /// log2 of the bytes.
    pub log_size: u8,
}

impl IcmObject {
    fn end(&self) -> u64 {
        self.start + (1u64 << self.log_size)
    }
}

#[derive(Debug, Default)]
struct Inner {
    /// Live objects by number.
    objects: BTreeMap<u32, IcmObject>,
    /// Their numbers by start address (objects never overlap).
    by_start: BTreeMap<u64, u32>,
    /// Backed pages by ICM page number (address >> 12).
    pages: HashMap<u64, Box<[u8; PAGE_SIZE]>>,
    next_id: u32,
}

/// Most SW_ICM objects live at once (a steering domain makes a few dozen).
const MAX_OBJECTS: usize = 1 << 16;
/// Highest object number.
const MAX_ID: u32 = 0x00ff_ffff;

/// The function's SW ICM: its objects and its sparse bytes.
#[derive(Debug, Default)]
pub(crate) struct IcmStore {
    inner: Mutex<Inner>,
}

impl IcmStore {
    /// An empty store: no object, no byte written.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// CREATE_GENERAL_OBJECT of type SW_ICM: records `[start, start + 2^log_size)` after
    /// checking it lies in one range, is at least the granularity and aligned to
    /// it, and overlaps no live object; returns the object's number. No alignment to the
    /// piece's own size is asked: mlx5_core's `mlx5_dm_sw_icm_alloc` aligns a piece only to
    /// the caller's `log_alignment` in blocks of the granularity (and before Linux 5.8 not
    /// at all), and rdma-core's `dr_icm_allocate_aligned_dm` realigns inside what it gets.
    pub(crate) fn create(&self, start: u64, log_size: u8) -> Result<u32, IcmError> {
        if !(LOG_ALLOC_GRANULARITY..40).contains(&log_size) {
            return Err(IcmError::BadSize);
        }
        let size = 1u64 << log_size;
        let end = start.checked_add(size).ok_or(IcmError::OutOfRange)?;
        let inside = RANGES
            .iter()
            .any(|&(base, log)| start >= base && end <= base + (1u64 << log));
        if !inside {
            return Err(IcmError::OutOfRange);
        }
        if start % (1u64 << LOG_ALLOC_GRANULARITY) != 0 {
            return Err(IcmError::Misaligned);
        }
        let mut inner = self.lock();
        if Self::overlapping(&inner, start, end).is_some() {
            return Err(IcmError::Overlap);
        }
        if inner.objects.len() >= MAX_OBJECTS {
            return Err(IcmError::TableFull);
        }
        // Numbers from 1 to 2^24 - 1 (where every command keeps an object number, which
        // `fw::devx` reads for ownership), skipping any still live after a wrap.
        let mut id = inner.next_id;
        loop {
            id = (id + 1) & MAX_ID;
            id = id.max(1);
            if !inner.objects.contains_key(&id) {
                break;
            }
        }
        inner.next_id = id;
        let object = IcmObject { start, log_size };
        inner.objects.insert(id, object);
        inner.by_start.insert(start, id);
        Ok(id)
    }

    /// The live object sharing a byte with `[start, end)`, if any.
    fn overlapping(inner: &Inner, start: u64, end: u64) -> Option<IcmObject> {
        let (_, &id) = inner.by_start.range(..end).next_back()?;
        let object = inner.objects[&id];
        (object.end() > start).then_some(object)
    }

    /// Object `id`, when it lives.
    pub(crate) fn get(&self, id: u32) -> Option<IcmObject> {
        self.lock().objects.get(&id).copied()
    }

    /// DESTROY_GENERAL_OBJECT: forgets object `id` and drops the pages it backed.
    pub(crate) fn destroy(&self, id: u32) -> Result<IcmObject, IcmError> {
        let mut inner = self.lock();
        let object = inner.objects.remove(&id).ok_or(IcmError::NoObject)?;
        inner.by_start.remove(&object.start);
        let (first, last) = (object.start >> PAGE_SHIFT, (object.end() - 1) >> PAGE_SHIFT);
        if inner.pages.len() as u64 > last - first {
            for page in first..=last {
                inner.pages.remove(&page);
            }
        } else {
            inner.pages.retain(|&p, _| p < first || p > last);
        }
        Ok(object)
    }

    /// Whether `[start, start + len)` lies inside one live object (an empty range: whether
    /// `start` is inside or at the end of one).
    pub(crate) fn covered(&self, start: u64, len: u64) -> bool {
        Self::covered_in(&self.lock(), start, len)
    }

    fn covered_in(inner: &Inner, start: u64, len: u64) -> bool {
        let Some(end) = start.checked_add(len) else {
            return false;
        };
        inner
            .by_start
            .range(..=start)
            .next_back()
            .is_some_and(|(_, id)| end <= inner.objects[id].end())
    }

    /// Reads `buf.len()` bytes at ICM address `icm`, which must lie inside one live object;
    /// bytes never written read as zero.
    pub(crate) fn read(&self, icm: u64, buf: &mut [u8]) -> Result<(), IcmError> {
        let inner = self.lock();
        if !Self::covered_in(&inner, icm, buf.len() as u64) {
            return Err(IcmError::NotAllocated);
        }
        let mut at = icm;
        for chunk in Self::pieces(icm, buf) {
            let (page, offset) = (at >> PAGE_SHIFT, (at as usize) & (PAGE_SIZE - 1));
            match inner.pages.get(&page) {
                Some(bytes) => chunk.copy_from_slice(&bytes[offset..offset + chunk.len()]),
                None => chunk.fill(0),
            }
            at += chunk.len() as u64;
        }
        Ok(())
    }

    /// The 64-byte steering entry at ICM address `icm` (as [`IcmStore::read`]).
    pub(crate) fn read_entry(&self, icm: u64) -> Result<[u8; ENTRY_SIZE], IcmError> {
        let mut entry = [0u8; ENTRY_SIZE];
        self.read(icm, &mut entry)?;
        Ok(entry)
    }

    /// Writes `data` at ICM address `icm`, which must lie inside one live object, backing
    /// the pages it touches; refused whole, with nothing written, when it would back more
    /// than [`MAX_BACKED_PAGES`] pages.
    pub(crate) fn write(&self, icm: u64, data: &[u8]) -> Result<(), IcmError> {
        let mut inner = self.lock();
        if !Self::covered_in(&inner, icm, data.len() as u64) {
            return Err(IcmError::NotAllocated);
        }
        if data.is_empty() {
            return Ok(());
        }
        let (first, last) = (
            icm >> PAGE_SHIFT,
            (icm + data.len() as u64 - 1) >> PAGE_SHIFT,
        );
        let new = (first..=last)
            .filter(|p| !inner.pages.contains_key(p))
            .count();
        if inner.pages.len() + new > MAX_BACKED_PAGES {
            return Err(IcmError::Full);
        }
        let mut at = icm;
        let mut rest = data;
        while !rest.is_empty() {
            let offset = (at as usize) & (PAGE_SIZE - 1);
            let n = rest.len().min(PAGE_SIZE - offset);
            let page = inner
                .pages
                .entry(at >> PAGE_SHIFT)
                .or_insert_with(|| Box::new([0u8; PAGE_SIZE]));
            page[offset..offset + n].copy_from_slice(&rest[..n]);
            at += n as u64;
            rest = &rest[n..];
        }
        Ok(())
    }

    /// `buf` cut at the 4 KiB page boundaries of ICM addresses from `icm`.
    fn pieces(icm: u64, buf: &mut [u8]) -> impl Iterator<Item = &mut [u8]> {
        let head = (PAGE_SIZE - (icm as usize & (PAGE_SIZE - 1))).min(buf.len());
        let (first, rest) = buf.split_at_mut(head);
        std::iter::once(first)
            .chain(rest.chunks_mut(PAGE_SIZE))
            .filter(|c| !c.is_empty())
    }

    /// Pages backed now.
    pub(crate) fn backed_pages(&self) -> usize {
        self.lock().pages.len()
    }

    /// Forgets every object and byte (function reset).
    pub(crate) fn clear(&self) {
        let mut inner = self.lock();
        inner.objects.clear();
        inner.by_start.clear();
        inner.pages.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_bytes_read_zero_until_written_and_drop_with_their_object() {
        let s = IcmStore::new();
        let id = s.create(STEERING_START, 16).expect("create");
        let at = STEERING_START + 4096 - 8;
        let data: Vec<u8> = (0..24u8).collect();
        assert_eq!(s.read_entry(at - 56).expect("read"), [0u8; 64]);
        s.write(at, &data).expect("write across a page boundary");
        assert_eq!(s.backed_pages(), 2);
        let mut back = [0u8; 24];
        s.read(at, &mut back).expect("read");
        assert_eq!(&back[..], &data[..]);
        assert_eq!(
            s.write(STEERING_START + (1 << 16) - 4, &[1; 8]),
            Err(IcmError::NotAllocated)
        );
        s.destroy(id).expect("destroy");
        assert_eq!(s.backed_pages(), 0);
        assert_eq!(s.read(at, &mut back), Err(IcmError::NotAllocated));
    }

    #[test]
    fn the_page_bound_refuses_a_write_whole() {
        let s = IcmStore::new();
        s.create(STEERING_START, LOG_STEERING_SIZE).expect("create");
        for page in 0..MAX_BACKED_PAGES as u64 {
            s.write(STEERING_START + (page << 12), &[1])
                .expect("within the bound");
        }
        let past = STEERING_START + ((MAX_BACKED_PAGES as u64) << 12);
        assert_eq!(s.write(past, &[1]), Err(IcmError::Full));
        assert_eq!(s.read_entry(past).expect("read"), [0u8; 64]);
        // Pages already backed still take writes.
        s.write(STEERING_START, &[2; 64]).expect("backed page");
    }

    #[test]
    fn bus_addresses_sit_below_device_memory_and_round_trip() {
        for &(start, log) in &RANGES {
            let end = start + (1u64 << log) - 1;
            assert_eq!(icm_address(bus_address(end)), Some(end));
            assert_eq!(super::super::memic::device_offset(bus_address(end)), None);
        }
        assert_eq!(icm_address(super::super::memic::bus_address(0)), None);
        assert_eq!(icm_address(0x1000), None);
    }
}
