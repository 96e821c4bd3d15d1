//! The function's device memory (MEMIC): 256 KiB of storage inside BAR0, the pieces
//! ALLOC_MEMIC handed out, and the atomic-operation aliases MODIFY_MEMIC mapped for them.
//!
//! BAR0's last [`WINDOW_SIZE`] bytes hold it (the model's choice of place; a ConnectX names
//! its own in `memic_bar_start_addr`): the memory itself first, then one alias of the same
//! size per operation, in `MEMIC_OP_*` order. The host reaches the memory with MMIO (mlx5_ib
//! maps the pages of a piece to its user, `handle_alloc_dm_memic`, and libmlx5 copies with
//! 32-bit loads and stores, `mlx5_access_dm`); the data path reaches it through memory keys of
//! access mode MEMIC at [`bus_address`]es that no IOVA takes.
//!
//! The storage is shared between the function's command and data paths (under the function's
//! lock) and BAR0's MMIO (without it), so it has a lock of its own, always taken last.

use cxdirect_hw::memic::{
    MEMIC_BASE_ALIGN, MEMIC_OP_ATOMIC_INCREMENT, MEMIC_OP_ATOMIC_TEST_AND_SET,
};
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

/// Bytes of device memory: 256 KiB, a ConnectX-6 Dx's MEMIC (`max_memic_size` and
/// `memic_bar_size` alike, so one piece may take all of it).
pub(crate) const MEMIC_SIZE: u64 = 256 << 10;
/// Bytes of BAR0 the device memory and its operation aliases take, at the end of BAR0: the
/// memory, an alias per operation, and a spare quarter that reads as zero.
pub(crate) const WINDOW_SIZE: u64 = 4 * MEMIC_SIZE;
/// Smallest BAR0 that offers device memory: below it the UAR pages keep the whole BAR.
pub(crate) const MIN_BAR0_SIZE: u64 = 4 << 20;
/// Largest `log_memic_addr_alignment` ALLOC_MEMIC takes: pieces aligned up to 4 KiB (64 << 6),
/// a page (the model's choice; libmlx5 and the pyverbs tests ask for up to 2^6 bytes, which
/// mlx5_ib's `mlx5_cmd_alloc_memic` turns into 0).
pub(crate) const LOG_MAX_ADDR_ALIGNMENT: u8 = 6;
/// Operations with an alias: the atomic increment and test-and-set (`memic_operations`).
pub(crate) const OPERATIONS: u32 =
    1 << MEMIC_OP_ATOMIC_INCREMENT | 1 << MEMIC_OP_ATOMIC_TEST_AND_SET;
/// Widths the atomic operations take, one bit per size (bit 0: 1 byte): one byte only, what
/// rdma-core's `test_mlx5_dm_ops` needs (the model's choice; wider operations are not
/// modelled, and an access of another width to an alias is dropped, or reads as zero).
pub(crate) const ATOMIC_SIZES: u8 = 0x1;

/// First bus address of device memory as the data path sees it: a MEMIC key's bytes are at
/// `DEVICE_MEMORY_BUS + offset into the memory`. No IOVA reaches this high (IOMMUs translate at
/// most 57 bits), so the function's DMA tells the two apart by the address alone.
const DEVICE_MEMORY_BUS: u64 = 0xffff_ff00_0000_0000;

/// BAR0 offset of the window in a BAR0 of `bar0_size` bytes; `None` when the BAR is too small
/// to offer device memory.
pub(crate) fn window_start(bar0_size: u64) -> Option<u64> {
    (bar0_size >= MIN_BAR0_SIZE && bar0_size.is_power_of_two()).then(|| bar0_size - WINDOW_SIZE)
}

/// The bus address of byte `offset` of device memory.
pub(crate) fn bus_address(offset: u64) -> u64 {
    DEVICE_MEMORY_BUS + offset
}

/// The device-memory offset of bus address `address`, when it is one.
pub(crate) fn device_offset(address: u64) -> Option<u64> {
    address.checked_sub(DEVICE_MEMORY_BUS)
}

/// Why a device-memory command was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MemicError {
    /// A size of 0, not a multiple of 64 bytes, larger than the range, or an alignment above
    /// [`LOG_MAX_ADDR_ALIGNMENT`].
    BadSize,
    /// A range or address outside the device memory.
    OutOfRange,
    /// No free piece of that size and alignment in the range (mlx5_ib then tries the next page).
    NoSpace,
    /// No piece starts at that address with that size (never allocated, or freed already).
    NoPiece,
    /// An operation the memory does not offer.
    BadOperation,
    /// The operation's alias is not mapped for the piece.
    NotMapped,
    /// The alias was mapped under another user context.
    Owner,
}

/// One piece handed out.
#[derive(Debug, Clone, Copy)]
struct Piece {
    size: u64,
    /// The uid each operation's alias was mapped under, by operation.
    ops: [Option<u16>; 2],
}

#[derive(Debug)]
struct Inner {
    bytes: Vec<u8>,
    /// Pieces by their offset into the memory.
    pieces: BTreeMap<u64, Piece>,
}

/// Whether a command under `uid` may touch an alias mapped under `owner`: the DEVX rules (the
/// function's own uids touch anything, anything shared is touched by all, a user context
/// touches its own).
fn may_touch(owner: u16, uid: u16) -> bool {
    super::devx::privileged(uid) || owner == uid || owner == super::devx::SHARED_UID
}

/// The device memory of one function.
#[derive(Debug)]
pub(crate) struct DeviceMemory {
    /// BAR0 offset of the window.
    base: u64,
    inner: Mutex<Inner>,
}

impl DeviceMemory {
    /// Device memory at BAR0 offset `base` (see [`window_start`]), all zero, nothing handed out.
    pub(crate) fn new(base: u64) -> Self {
        Self {
            base,
            inner: Mutex::new(Inner {
                bytes: vec![0; MEMIC_SIZE as usize],
                pieces: BTreeMap::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// BAR0 offset of the memory (`memic_bar_start_addr`).
    pub(crate) fn base(&self) -> u64 {
        self.base
    }

    /// Whether BAR0 offset `offset` is inside the window.
    pub(crate) fn in_window(&self, offset: u64) -> bool {
        offset
            .checked_sub(self.base)
            .is_some_and(|o| o < WINDOW_SIZE)
    }

    /// The memory's offset of BAR0 offset `addr`, when `[addr, addr + len)` is inside the
    /// memory.
    fn memory_offset(&self, addr: u64, len: u64) -> Option<u64> {
        let offset = addr.checked_sub(self.base)?;
        (offset.checked_add(len)? <= MEMIC_SIZE).then_some(offset)
    }

    /// ALLOC_MEMIC: the first free piece of `size` bytes aligned to `64 << log_align` in the
    /// BAR0 range `[range_start, range_start + range_size)`; returns its BAR0 offset. Its
    /// bytes start as zero (the model's choice: no user sees what the last one left).
    pub(crate) fn alloc(
        &self,
        range_start: u64,
        range_size: u64,
        size: u64,
        log_align: u8,
    ) -> Result<u64, MemicError> {
        let unit = 1u64 << MEMIC_BASE_ALIGN;
        if size == 0 || size % unit != 0 || size > range_size || log_align > LOG_MAX_ADDR_ALIGNMENT
        {
            return Err(MemicError::BadSize);
        }
        let first = self
            .memory_offset(range_start, range_size)
            .ok_or(MemicError::OutOfRange)?;
        let end = first + range_size;
        let align = unit << log_align;
        let mut inner = self.lock();
        let mut at = first.next_multiple_of(align);
        while at + size <= end {
            // The piece starting at or before `at + size` that ends past `at` is in the way.
            let blocking = inner
                .pieces
                .range(..at + size)
                .next_back()
                .filter(|(&start, p)| start + p.size > at)
                .map(|(&start, p)| start + p.size);
            match blocking {
                Some(past) => at = past.next_multiple_of(align),
                None => {
                    inner.pieces.insert(
                        at,
                        Piece {
                            size,
                            ops: [None; 2],
                        },
                    );
                    let bytes = &mut inner.bytes[at as usize..(at + size) as usize];
                    bytes.fill(0);
                    return Ok(self.base + at);
                }
            }
        }
        Err(MemicError::NoSpace)
    }

    /// DEALLOC_MEMIC of the piece at BAR0 offset `start` of `size` bytes, with its aliases.
    pub(crate) fn dealloc(&self, start: u64, size: u64) -> Result<(), MemicError> {
        let offset = self.memory_offset(start, 0).ok_or(MemicError::OutOfRange)?;
        let mut inner = self.lock();
        match inner.pieces.get(&offset) {
            Some(p) if p.size == size => {
                inner.pieces.remove(&offset);
                Ok(())
            }
            _ => Err(MemicError::NoPiece),
        }
    }

    fn op_index(op: u8) -> Result<usize, MemicError> {
        match op {
            MEMIC_OP_ATOMIC_INCREMENT => Ok(0),
            MEMIC_OP_ATOMIC_TEST_AND_SET => Ok(1),
            _ => Err(MemicError::BadOperation),
        }
    }

    /// MODIFY_MEMIC (alloc): maps operation `op` for the piece at BAR0 offset `start` under
    /// `uid`; returns the BAR0 offset of the piece's first byte in the operation's alias. A
    /// second map of the same operation returns the same address.
    pub(crate) fn map_op(&self, start: u64, op: u8, uid: u16) -> Result<u64, MemicError> {
        let index = Self::op_index(op)?;
        let offset = self.memory_offset(start, 0).ok_or(MemicError::OutOfRange)?;
        let mut inner = self.lock();
        let piece = inner.pieces.get_mut(&offset).ok_or(MemicError::NoPiece)?;
        match piece.ops[index] {
            Some(owner) if !may_touch(owner, uid) => return Err(MemicError::Owner),
            Some(_) => {}
            None => piece.ops[index] = Some(uid),
        }
        Ok(self.base + (index as u64 + 1) * MEMIC_SIZE + offset)
    }

    /// MODIFY_MEMIC (dealloc): unmaps operation `op` of the piece at BAR0 offset `start`.
    pub(crate) fn unmap_op(&self, start: u64, op: u8, uid: u16) -> Result<(), MemicError> {
        let index = Self::op_index(op)?;
        let offset = self.memory_offset(start, 0).ok_or(MemicError::OutOfRange)?;
        let mut inner = self.lock();
        let piece = inner.pieces.get_mut(&offset).ok_or(MemicError::NoPiece)?;
        match piece.ops[index] {
            None => Err(MemicError::NotMapped),
            Some(owner) if !may_touch(owner, uid) => Err(MemicError::Owner),
            Some(_) => {
                piece.ops[index] = None;
                Ok(())
            }
        }
    }

    /// Hands the aliases a closed user context mapped to the function (uid 0).
    pub(crate) fn disown(&self, uid: u16) {
        if super::devx::privileged(uid) {
            return;
        }
        for piece in self.lock().pieces.values_mut() {
            for op in piece.ops.iter_mut().flatten() {
                if *op == uid {
                    *op = 0;
                }
            }
        }
    }

    /// Forgets every piece and zeroes the memory (function reset).
    pub(crate) fn clear(&self) {
        let mut inner = self.lock();
        inner.pieces.clear();
        inner.bytes.fill(0);
    }

    /// The piece holding `offset` and which operations it mapped, if any.
    fn mapped(inner: &Inner, offset: u64, len: u64, index: usize) -> bool {
        inner
            .pieces
            .range(..=offset)
            .next_back()
            .is_some_and(|(&start, p)| offset + len <= start + p.size && p.ops[index].is_some())
    }

    /// An MMIO read of `buf.len()` bytes at BAR0 `offset` inside the window: the memory's
    /// bytes; in the test-and-set alias of a piece that mapped it, a 1-byte read returns the
    /// byte and sets it to 1. Anything else in the window reads as zero.
    pub(crate) fn mmio_read(&self, offset: u64, buf: &mut [u8]) {
        buf.fill(0);
        let Some(rel) = offset.checked_sub(self.base) else {
            return;
        };
        let len = buf.len() as u64;
        let (area, at) = (rel / MEMIC_SIZE, rel % MEMIC_SIZE);
        if at + len > MEMIC_SIZE {
            return;
        }
        let mut inner = self.lock();
        let range = at as usize..(at + len) as usize;
        match area {
            0 => buf.copy_from_slice(&inner.bytes[range]),
            2 if len == 1 && Self::mapped(&inner, at, len, 1) => {
                buf[0] = inner.bytes[at as usize];
                inner.bytes[at as usize] = 1;
            }
            _ => {}
        }
    }

    /// An MMIO write of `data` at BAR0 `offset` inside the window: into the memory; in the
    /// increment alias of a piece that mapped it, a 1-byte store adds its value to the byte
    /// (wrapping). Anything else in the window is dropped.
    pub(crate) fn mmio_write(&self, offset: u64, data: &[u8]) {
        let Some(rel) = offset.checked_sub(self.base) else {
            return;
        };
        let len = data.len() as u64;
        let (area, at) = (rel / MEMIC_SIZE, rel % MEMIC_SIZE);
        if at + len > MEMIC_SIZE {
            return;
        }
        let mut inner = self.lock();
        match area {
            0 => inner.bytes[at as usize..(at + len) as usize].copy_from_slice(data),
            1 if len == 1 && Self::mapped(&inner, at, len, 0) => {
                let byte = &mut inner.bytes[at as usize];
                *byte = byte.wrapping_add(data[0]);
            }
            _ => {}
        }
    }

    /// The data path's read of `buf.len()` bytes at `offset` into the memory; false when it
    /// runs past the end.
    pub(crate) fn read(&self, offset: u64, buf: &mut [u8]) -> bool {
        let inner = self.lock();
        let end = offset.checked_add(buf.len() as u64);
        match end {
            Some(end) if end <= MEMIC_SIZE => {
                buf.copy_from_slice(&inner.bytes[offset as usize..end as usize]);
                true
            }
            _ => false,
        }
    }

    /// The data path's write of `data` at `offset` into the memory; false when it runs past
    /// the end.
    pub(crate) fn write(&self, offset: u64, data: &[u8]) -> bool {
        let mut inner = self.lock();
        let end = offset.checked_add(data.len() as u64);
        match end {
            Some(end) if end <= MEMIC_SIZE => {
                inner.bytes[offset as usize..end as usize].copy_from_slice(data);
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cxdirect_hw::doorbell::UAR_PAGE_SIZE;

    /// The UAR pages ALLOC_UAR hands out end where the window starts: no UAR page is device
    /// memory, and the window fits in BAR0.
    #[test]
    fn uar_pages_end_below_the_window() {
        for bar in [MIN_BAR0_SIZE, 32 << 20, 1 << 30] {
            let start = window_start(bar).expect("large enough");
            let uars = u64::from(super::super::uar_page_count(bar));
            let last_uar_end = (u64::from(super::super::FIRST_UAR) + uars) * UAR_PAGE_SIZE as u64;
            assert_eq!(last_uar_end, start);
            assert_eq!(start + WINDOW_SIZE, bar);
        }
        assert_eq!(window_start(MIN_BAR0_SIZE / 2), None);
    }
}
