//! BAR0 accesses from the client, cut into accesses the model's registers accept.
//!
//! A vfio-user client may send any length at any offset: QEMU forwards the guest's 1-, 2-, 4- and
//! 8-byte loads and stores one by one, and another client may write a whole BlueFlame WQE in one
//! message. The model's registers are narrower: the initialization segment takes 32-bit stores,
//! UAR doorbells take 32- or 64-bit stores, and a BlueFlame register takes a WQE written whole
//! (the model then uses the copy instead of fetching the WQE) or eight bytes at a time. The rules,
//! applied in order:
//!
//! **Writes**
//! 1. A write of a multiple of 64 bytes at a 64-byte aligned offset inside one half of a
//!    BlueFlame register goes to the model whole: it is a BlueFlame WQE copy.
//! 2. Anything else is cut into naturally aligned pieces, each the largest of 8, 4, 2 or 1 bytes
//!    that fits; inside the initialization segment (below the MSI-X table) pieces are at most 4
//!    bytes, since every register there is 32 bits wide.
//! 3. An 8-byte piece the model refuses for its width (an EQ doorbell, say) is retried as two
//!    4-byte stores, as a 64-bit store to 32-bit registers lands on a real bus.
//! 4. Pieces the model still refuses (a 1-byte store to a doorbell) are dropped and counted: a
//!    device does not fail posted writes.
//!
//! **Reads**: naturally aligned 4- and 8-byte reads go to the model as they are; any other read
//! is served from the naturally aligned 32-bit reads that cover it (register reads have no side
//! effects in the model). Reads of device memory (MEMIC) go to the model at the width they were
//! made, naturally aligned pieces of at most 8 bytes: a 1-byte load of a test-and-set alias is
//! the operation itself, and must not become a 4-byte one.
//!
//! An access that runs past the end of BAR0 is refused whole; the model never sees it. Nothing
//! here allocates: the pieces come from an iterator over offsets.

use crate::device::{MmioError, BF_REG_SIZE, MSIX_PBA_OFFSET, MSIX_TABLE_OFFSET};
use crate::Device;
use cxdirect_hw::doorbell::{UAR_BF_OFFSET, UAR_PAGE_SIZE};
use std::ops::Range;
use thiserror::Error;

/// BAR0 offset of the first UAR page: after the initialization segment, MSI-X table and PBA
/// pages.
pub const FIRST_UAR_OFFSET: u64 = MSIX_PBA_OFFSET + UAR_PAGE_SIZE as u64;

/// Size of a BlueFlame WQE chunk: BlueFlame copies come in multiples of 64 bytes.
pub const BF_CHUNK: usize = 64;

/// Where split BAR0 accesses go: the model's [`Device`], or a recording fake in tests.
pub trait MmioTarget {
    /// Size of BAR0 in bytes.
    fn bar_size(&self) -> u64;
    /// One MMIO read of `buf.len()` bytes at `offset`.
    fn mmio_read(&self, offset: u64, buf: &mut [u8]) -> Result<(), MmioError>;
    /// One MMIO write of `data` at `offset`.
    fn mmio_write(&self, offset: u64, data: &[u8]) -> Result<(), MmioError>;
    /// Whether `offset` is memory (device memory) rather than registers: reads there go to
    /// the target at the width the client made them.
    fn is_memory(&self, _offset: u64) -> bool {
        false
    }
}

impl MmioTarget for Device {
    fn bar_size(&self) -> u64 {
        self.bar0_size()
    }

    fn mmio_read(&self, offset: u64, buf: &mut [u8]) -> Result<(), MmioError> {
        Device::mmio_read(self, offset, buf)
    }

    fn mmio_write(&self, offset: u64, data: &[u8]) -> Result<(), MmioError> {
        Device::mmio_write(self, offset, data)
    }

    fn is_memory(&self, offset: u64) -> bool {
        Device::is_memory(self, offset)
    }
}

/// A BAR0 access refused as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum BarError {
    /// The access runs past the end of BAR0 (or wraps around).
    #[error(
        "BAR0 access of {len} bytes at offset {offset:#x} runs past the end of the \
         {bar_size:#x}-byte BAR"
    )]
    OutOfRange {
        /// Offset of the access.
        offset: u64,
        /// Length of the access in bytes.
        len: usize,
        /// Size of BAR0.
        bar_size: u64,
    },
    /// The model refused a read.
    #[error("the model refused a BAR0 read: {0}")]
    Model(#[from] MmioError),
}

/// One piece of a split access: `len` bytes at BAR0 `offset`, taken from `start` in the
/// client's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// BAR0 offset of the piece.
    pub offset: u64,
    /// Offset of the piece inside the client's buffer.
    pub start: usize,
    /// Length of the piece in bytes.
    pub len: usize,
}

impl Piece {
    /// The piece's bytes inside the client's buffer.
    pub fn range(&self) -> Range<usize> {
        self.start..self.start + self.len
    }
}

/// The pieces of a write of `len` bytes at BAR0 `offset` (see the module documentation).
#[derive(Debug, Clone)]
pub struct WritePlan {
    offset: u64,
    len: usize,
    done: usize,
    whole: bool,
}

impl Iterator for WritePlan {
    type Item = Piece;

    fn next(&mut self) -> Option<Piece> {
        if self.done >= self.len {
            return None;
        }
        let offset = self.offset.checked_add(self.done as u64)?;
        let rest = self.len - self.done;
        let len = if self.whole {
            rest
        } else {
            let widest = if offset < MSIX_TABLE_OFFSET { 4 } else { 8 };
            natural_piece(offset, rest, widest)
        };
        let piece = Piece {
            offset,
            start: self.done,
            len,
        };
        self.done += len;
        Some(piece)
    }
}

/// Plans a write of `len` bytes at BAR0 `offset`.
pub fn write_plan(offset: u64, len: usize) -> WritePlan {
    WritePlan {
        offset,
        len,
        done: 0,
        whole: is_blueflame_copy(offset, len),
    }
}

/// Whether a write of `len` bytes at `offset` is a BlueFlame WQE copy the model takes whole: a
/// multiple of 64 bytes, 64-byte aligned, inside one half of one BlueFlame register of a UAR
/// page.
pub fn is_blueflame_copy(offset: u64, len: usize) -> bool {
    if len <= 8 || len % BF_CHUNK != 0 || offset % BF_CHUNK as u64 != 0 {
        return false;
    }
    if offset < FIRST_UAR_OFFSET {
        return false;
    }
    let in_page = (offset % UAR_PAGE_SIZE as u64) as usize;
    if in_page < UAR_BF_OFFSET {
        return false;
    }
    let half = BF_REG_SIZE / 2;
    let within = (in_page - UAR_BF_OFFSET) % half;
    within + len <= half
}

/// Length of the naturally aligned piece at `offset`: the largest power of two up to `widest`
/// that divides `offset` and fits in `rest` (at least 1 byte).
fn natural_piece(offset: u64, rest: usize, widest: usize) -> usize {
    let mut size = widest;
    while size > 1 && (offset % size as u64 != 0 || size > rest) {
        size /= 2;
    }
    size
}

/// What a split write did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct WriteOutcome {
    /// Accesses handed to the model (retries included).
    pub pieces: u32,
    /// Accesses the model refused; they were dropped.
    pub refused: u32,
    /// The first refusal, for the log.
    pub first_refusal: Option<MmioError>,
}

impl WriteOutcome {
    /// Both outcomes together: pieces and refusals summed, the earlier first refusal kept.
    pub fn and(self, other: WriteOutcome) -> WriteOutcome {
        WriteOutcome {
            pieces: self.pieces + other.pieces,
            refused: self.refused + other.refused,
            first_refusal: self.first_refusal.or(other.first_refusal),
        }
    }

    fn refuse(&mut self, error: MmioError) {
        self.refused += 1;
        self.first_refusal.get_or_insert(error);
    }
}

fn check_range(bar_size: u64, offset: u64, len: usize) -> Result<(), BarError> {
    match offset.checked_add(len as u64) {
        Some(end) if end <= bar_size => Ok(()),
        _ => Err(BarError::OutOfRange {
            offset,
            len,
            bar_size,
        }),
    }
}

/// Writes `data` at BAR0 `offset` through `target`, split as the module documentation says.
pub fn write<T: MmioTarget + ?Sized>(
    target: &T,
    offset: u64,
    data: &[u8],
) -> Result<WriteOutcome, BarError> {
    check_range(target.bar_size(), offset, data.len())?;
    let mut outcome = WriteOutcome::default();
    for piece in write_plan(offset, data.len()) {
        let Some(bytes) = data.get(piece.range()) else {
            break;
        };
        outcome.pieces += 1;
        match target.mmio_write(piece.offset, bytes) {
            Ok(()) => {}
            Err(MmioError::BadWidth { .. }) if bytes.len() == 8 => {
                for (i, dword) in bytes.chunks_exact(4).enumerate() {
                    outcome.pieces += 1;
                    if let Err(e) = target.mmio_write(piece.offset + 4 * i as u64, dword) {
                        outcome.refuse(e);
                    }
                }
            }
            Err(e) => outcome.refuse(e),
        }
    }
    Ok(outcome)
}

/// Reads `buf.len()` bytes at BAR0 `offset` through `target` (see the module documentation).
pub fn read<T: MmioTarget + ?Sized>(
    target: &T,
    offset: u64,
    buf: &mut [u8],
) -> Result<(), BarError> {
    check_range(target.bar_size(), offset, buf.len())?;
    buf.fill(0);
    let len = buf.len();
    if len == 0 {
        return Ok(());
    }
    if (len == 4 || len == 8) && offset % len as u64 == 0 {
        target.mmio_read(offset, buf)?;
        return Ok(());
    }
    if target.is_memory(offset) {
        for piece in write_plan(offset, len) {
            if let Some(part) = buf.get_mut(piece.range()) {
                target.mmio_read(piece.offset, part)?;
            }
        }
        return Ok(());
    }
    let end = offset + len as u64;
    let mut dword = offset & !3;
    while dword < end {
        let mut word = [0u8; 4];
        // BAR0 sizes are powers of two of at least 4 KiB, so a dword that starts inside the BAR
        // ends inside it; check anyway rather than trust that.
        if dword + 4 <= target.bar_size() {
            target.mmio_read(dword, &mut word)?;
        }
        let from = dword.max(offset);
        let to = (dword + 4).min(end);
        let src = (from - dword) as usize..(to - dword) as usize;
        let dst = (from - offset) as usize..(to - offset) as usize;
        if let (Some(d), Some(s)) = (buf.get_mut(dst), word.get(src)) {
            d.copy_from_slice(s);
        }
        dword += 4;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(offset: u64, len: usize) -> Vec<(u64, usize)> {
        write_plan(offset, len).map(|p| (p.offset, p.len)).collect()
    }

    #[test]
    fn aligned_small_writes_pass_whole() {
        for len in [1usize, 2, 4, 8] {
            assert_eq!(
                plan(0x4000 + 8 * len as u64, len),
                vec![(0x4000 + 8 * len as u64, len)]
            );
        }
    }

    #[test]
    fn init_segment_writes_are_dwords() {
        assert_eq!(plan(0x10, 8), vec![(0x10, 4), (0x14, 4)]);
        assert_eq!(plan(0x18, 4), vec![(0x18, 4)]);
        assert_eq!(plan(0x1ffc, 8), vec![(0x1ffc, 4), (0x2000, 4)]);
    }

    #[test]
    fn misaligned_writes_are_natural_pieces() {
        assert_eq!(
            plan(0x4001, 9),
            vec![(0x4001, 1), (0x4002, 2), (0x4004, 4), (0x4008, 2)]
        );
    }

    #[test]
    fn blueflame_copies_pass_whole_or_split() {
        let bf = FIRST_UAR_OFFSET + UAR_BF_OFFSET as u64;
        assert!(is_blueflame_copy(bf, 64));
        assert!(is_blueflame_copy(bf + 256, 256));
        assert_eq!(plan(bf, 128), vec![(bf, 128)]);
        // Crossing into the other half, unaligned, or outside the BlueFlame area: 8 bytes at a time.
        assert!(!is_blueflame_copy(bf + 192, 128));
        assert!(!is_blueflame_copy(bf + 8, 64));
        assert!(!is_blueflame_copy(FIRST_UAR_OFFSET, 64));
        assert!(!is_blueflame_copy(MSIX_TABLE_OFFSET, 64));
        assert_eq!(
            plan(bf + 8, 24),
            vec![(bf + 8, 8), (bf + 16, 8), (bf + 24, 8)]
        );
        assert_eq!(plan(bf + 192, 128).len(), 16);
    }
}
