//! Typed register access: a register is read and written as its `hw` type (offset, width and
//! fields from one table in `cxdirect_hw::init_seg` and `cxdirect_hw::doorbell`), never as a raw
//! word with masks kept at the call site.

use super::Backend;
use cxdirect_hw::doorbell::UAR_PAGE_SIZE;
use cxdirect_hw::mmio::Register;

/// The registers of one block of BAR0 (the initialization segment, or one UAR page), reached
/// through backend `B`.
pub(crate) struct Registers<'a, B> {
    backend: &'a B,
    /// BAR0 offset of the block.
    base: usize,
}

impl<'a, B: Backend> Registers<'a, B> {
    /// The initialization segment (BAR0 offset 0).
    #[inline]
    pub(crate) fn init_seg(backend: &'a B) -> Self {
        Self { backend, base: 0 }
    }

    /// UAR page `page` (BAR0 offset `page * 4096`).
    #[inline]
    pub(crate) fn uar(backend: &'a B, page: u32) -> Self {
        Self {
            backend,
            base: page as usize * UAR_PAGE_SIZE,
        }
    }

    /// Loads 32-bit register `R`.
    #[inline]
    pub(crate) fn read<R: Register<Word = u32>>(&self) -> R {
        R::from_raw(u32::from_be_bytes(
            self.backend.read32(self.base + R::OFFSET),
        ))
    }

    /// Stores `value` into 32-bit register `R`.
    #[inline]
    pub(crate) fn write<R: Register<Word = u32>>(&self, value: R) {
        self.backend
            .write32(self.base + R::OFFSET, value.to_raw().to_be_bytes());
    }

    /// Stores `value` into 64-bit register `R` with a single 64-bit store.
    #[inline]
    pub(crate) fn write64<R: Register<Word = u64>>(&self, value: R) {
        self.backend
            .write64(self.base + R::OFFSET, value.to_raw().to_be_bytes());
    }
}
