//! The fences that order the driver's accesses to device-visible memory and to the BAR, named
//! and placed as Linux names and places them (`dma_wmb`, `wmb`, `dma_rmb`, `rmb`; see Linux
//! `Documentation/memory-barriers.txt` and each architecture's `asm/barrier.h`).
//!
//! DMA memory and the BAR are reached only with volatile loads and stores, which the compiler
//! never reorders among themselves; what remains is the CPU's reordering, which these fences
//! stop. Each function says what it orders, what Linux emits for it, and what it emits here:
//! on x86_64 through Rust's `fence` (which also keeps the compiler from moving ordinary memory
//! accesses across it); on aarch64 through the same instruction Linux uses, since Rust's fences
//! there only reach the inner-shareable domain (`dmb ish*`) and a device may sit outside it.

#[cfg(not(target_arch = "aarch64"))]
use std::sync::atomic::{fence, Ordering};

/// `dma_wmb`: stores to DMA memory before it reach the device before stores to DMA memory
/// after it. For a WQE (or a given-back CQE slot) before the doorbell record that publishes it.
///
/// Linux: x86_64 `barrier()` (a compiler barrier: x86 keeps stores to write-back memory in
/// order), arm64 `dmb oshst`. Here: x86_64 `fence(Release)`, which emits no instruction;
/// aarch64 `dmb oshst`; other targets `fence(SeqCst)`.
#[inline(always)]
pub(crate) fn dma_wmb() {
    #[cfg(target_arch = "aarch64")]
    // SAFETY: a barrier instruction; it touches no memory, registers or flags and leaves the
    // stack alone. Without `nomem` the compiler also keeps memory accesses on their side of it.
    unsafe {
        std::arch::asm!("dmb oshst", options(nostack, preserves_flags));
    }
    #[cfg(target_arch = "x86_64")]
    fence(Ordering::Release);
    #[cfg(not(any(target_arch = "aarch64", target_arch = "x86_64")))]
    fence(Ordering::SeqCst);
}

/// `wmb`: stores to DMA memory before it reach the device before an MMIO store after it. For a
/// doorbell record (or a command entry) before the UAR (or command) doorbell that makes the
/// device read it.
///
/// Linux: x86_64 `sfence`, arm64 `dsb st`. Here: x86_64 `fence(SeqCst)` (`mfence`, which orders
/// everything `sfence` does, and loads too); aarch64 `dsb st`; other targets `fence(SeqCst)`.
#[inline(always)]
pub(crate) fn wmb() {
    #[cfg(target_arch = "aarch64")]
    // SAFETY: a barrier instruction; it touches no memory, registers or flags and leaves the
    // stack alone. Without `nomem` the compiler also keeps memory accesses on their side of it.
    unsafe {
        std::arch::asm!("dsb st", options(nostack, preserves_flags));
    }
    #[cfg(not(target_arch = "aarch64"))]
    fence(Ordering::SeqCst);
}

/// `dma_rmb`: loads of DMA memory after it return data at least as new as a load of DMA memory
/// before it. For the body of a CQE or EQE after the owner bit that says the device wrote it.
///
/// Linux: x86_64 `barrier()` (x86 keeps loads from write-back memory in order), arm64
/// `dmb oshld`. Here: x86_64 `fence(Acquire)`, which emits no instruction; aarch64 `dmb oshld`;
/// other targets `fence(SeqCst)`.
#[inline(always)]
pub(crate) fn dma_rmb() {
    #[cfg(target_arch = "aarch64")]
    // SAFETY: a barrier instruction; it touches no memory, registers or flags and leaves the
    // stack alone. Without `nomem` the compiler also keeps memory accesses on their side of it.
    unsafe {
        std::arch::asm!("dmb oshld", options(nostack, preserves_flags));
    }
    #[cfg(target_arch = "x86_64")]
    fence(Ordering::Acquire);
    #[cfg(not(any(target_arch = "aarch64", target_arch = "x86_64")))]
    fence(Ordering::SeqCst);
}

/// `rmb`: every load after it (DMA memory or MMIO) happens after every load before it. For a
/// command's entry and output mailboxes after the ownership bit hands the entry back, as Linux
/// `cmd.c` reads them.
///
/// Linux: x86_64 `lfence`, arm64 `dsb ld`. Here: x86_64 `fence(SeqCst)` (`mfence`, which orders
/// everything `lfence` does, and stores too); aarch64 `dsb ld`; other targets `fence(SeqCst)`.
#[inline(always)]
pub(crate) fn rmb() {
    #[cfg(target_arch = "aarch64")]
    // SAFETY: a barrier instruction; it touches no memory, registers or flags and leaves the
    // stack alone. Without `nomem` the compiler also keeps memory accesses on their side of it.
    unsafe {
        std::arch::asm!("dsb ld", options(nostack, preserves_flags));
    }
    #[cfg(not(target_arch = "aarch64"))]
    fence(Ordering::SeqCst);
}
