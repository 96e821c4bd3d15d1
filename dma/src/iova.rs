//! IOVA allocation from the ranges an IOMMU offers.
//!
//! The device addresses host memory through I/O virtual addresses. Under VFIO type1 or iommufd
//! the driver chooses them, but only inside the windows the IOMMU reports (on x86 the MSI window
//! at `0xfee0_0000` is always cut out). [`IovaAllocator`] hands out page-aligned pieces of those
//! windows, first fit, and takes them back, merging neighbours so that large regions stay
//! possible after many small ones come and go.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use thiserror::Error;

use crate::iommu::{Iommu, IovaRange};

/// Smallest allocation granule and alignment: one 4 KiB page, in bytes.
pub const IOVA_PAGE: u64 = 0x1000;

/// IOVAs below this address (1 MiB) are kept out of use whenever the IOMMU offers anything above
/// it, so that a zero or small garbage address written by a buggy driver or device never lands on
/// a real buffer.
pub const IOVA_LOW_RESERVED: u64 = 0x10_0000;

/// Why an IOVA request or release failed.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum IovaError {
    /// The IOMMU reported no range with at least one usable page (after page 0, and the low
    /// 1 MiB where possible, were taken out).
    #[error(
        "the IOMMU offers no usable IOVA range (reported: {ranges:x?}); check that the device's \
         IOMMU group is set up and that the backend reports its IOVA ranges"
    )]
    NoUsableRange {
        /// The ranges as the IOMMU reported them.
        ranges: Vec<IovaRange>,
    },
    /// The alignment asked for is not a power of two of at least 4096.
    #[error("IOVA alignment {align:#x} is invalid: it must be a power of two of at least 0x1000")]
    BadAlignment {
        /// Alignment asked for, in bytes.
        align: u64,
    },
    /// The length asked for (or given back) is zero or not a whole number of 4 KiB pages.
    #[error("IOVA length {len:#x} is invalid: it must be a non-zero multiple of 0x1000")]
    BadLength {
        /// Length in bytes.
        len: u64,
    },
    /// No free run can hold the request.
    #[error(
        "out of IOVA space: no free run holds {len:#x} bytes aligned to {align:#x} (largest free \
         run: {largest_free:#x} bytes, {free_total:#x} bytes free in all); drop DMA regions that \
         are no longer needed, or ask for smaller ones"
    )]
    OutOfSpace {
        /// Length asked for, in bytes.
        len: u64,
        /// Alignment asked for, in bytes.
        align: u64,
        /// Largest free run at the time of the request, in bytes.
        largest_free: u64,
        /// All free IOVA space at the time of the request, in bytes.
        free_total: u64,
    },
    /// A range given back does not start where any allocation starts.
    #[error(
        "IOVA range {iova:#x}+{len:#x} is not allocated here: a double free, or an IOVA from \
         another allocator (a driver bug)"
    )]
    NotAllocated {
        /// Start of the range given back.
        iova: u64,
        /// Length given back, in bytes.
        len: u64,
    },
    /// A range given back starts at an allocation but with another length.
    #[error(
        "IOVA range {iova:#x}+{len:#x} does not match the allocation at {iova:#x}, which is \
         {allocated:#x} bytes long (a driver bug); give back exactly what was allocated"
    )]
    LengthMismatch {
        /// Start of the range given back.
        iova: u64,
        /// Length given back, in bytes.
        len: u64,
        /// Length actually allocated there, in bytes.
        allocated: u64,
    },
}

/// Free and allocated runs. Ends are inclusive so that a run may end at `u64::MAX` without
/// overflow.
#[derive(Debug, Default)]
struct State {
    /// Free runs: first IOVA -> last IOVA (inclusive). Never overlapping, never adjacent (adjacent
    /// runs are merged).
    free: BTreeMap<u64, u64>,
    /// Live allocations: first IOVA -> length in bytes.
    allocated: BTreeMap<u64, u64>,
}

impl State {
    fn largest_free(&self) -> u64 {
        self.free
            .iter()
            .map(|(&start, &last)| run_len(start, last))
            .max()
            .unwrap_or(0)
    }

    fn free_total(&self) -> u64 {
        self.free.iter().fold(0u64, |acc, (&start, &last)| {
            acc.saturating_add(run_len(start, last))
        })
    }
}

/// Length of the inclusive run `[start, last]`, saturating at `u64::MAX` for the one run that
/// covers the whole 64-bit space (which page 0 being reserved makes impossible anyway).
fn run_len(start: u64, last: u64) -> u64 {
    (last - start).saturating_add(1)
}

/// Hands out IOVA ranges from the windows an IOMMU reports, first fit.
///
/// Every allocation is a whole number of 4 KiB pages, aligned to a power of two of at least
/// 4 KiB, and lies inside one reported window (never across a hole such as the x86 MSI window).
/// Page 0 is never handed out, and neither is the low 1 MiB when the windows reach above it.
///
/// The allocator is shared between threads (`&self` methods, a mutex inside); it is not meant for
/// the fast path, where buffers come from pools carved out of regions allocated at setup.
#[derive(Debug)]
pub struct IovaAllocator {
    state: Mutex<State>,
}

impl IovaAllocator {
    /// Builds an allocator over `ranges` (inclusive `[start, end]` windows, in any order, possibly
    /// overlapping).
    ///
    /// Each window is trimmed inwards to whole 4 KiB pages, page 0 is removed, and if any window
    /// reaches at or above 1 MiB everything below 1 MiB is removed too.
    ///
    /// # Errors
    ///
    /// [`IovaError::NoUsableRange`] when nothing is left after trimming.
    pub fn new(ranges: &[IovaRange]) -> Result<Self, IovaError> {
        let mut pages: Vec<(u64, u64)> = ranges
            .iter()
            .filter_map(|r| trim_to_pages(r.start.max(IOVA_PAGE), r.end))
            .collect();
        pages.sort_unstable();

        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(pages.len());
        for (start, last) in pages {
            match merged.last_mut() {
                // Overlapping or touching windows are one contiguous window for the device.
                Some((_, prev_last)) if start <= prev_last.saturating_add(1) => {
                    *prev_last = (*prev_last).max(last);
                }
                _ => merged.push((start, last)),
            }
        }

        if merged.iter().any(|&(_, last)| last >= IOVA_LOW_RESERVED) {
            merged.retain(|&(_, last)| last >= IOVA_LOW_RESERVED);
            for (start, _) in &mut merged {
                *start = (*start).max(IOVA_LOW_RESERVED);
            }
        }

        if merged.is_empty() {
            return Err(IovaError::NoUsableRange {
                ranges: ranges.to_vec(),
            });
        }
        Ok(Self {
            state: Mutex::new(State {
                free: merged.into_iter().collect(),
                allocated: BTreeMap::new(),
            }),
        })
    }

    /// Builds an allocator over the windows `iommu` reports ([`Iommu::iova_ranges`]).
    ///
    /// # Errors
    ///
    /// As [`IovaAllocator::new`].
    pub fn from_iommu(iommu: &dyn Iommu) -> Result<Self, IovaError> {
        Self::new(&iommu.iova_ranges())
    }

    /// Allocates `len` bytes of IOVA space aligned to `align` and returns the first IOVA.
    ///
    /// `len` must be a non-zero multiple of 4096; `align` a power of two of at least 4096. The
    /// lowest fitting address is chosen (first fit).
    ///
    /// # Errors
    ///
    /// [`IovaError::BadLength`], [`IovaError::BadAlignment`] for invalid arguments;
    /// [`IovaError::OutOfSpace`] when no free run can hold the request.
    pub fn alloc(&self, len: u64, align: u64) -> Result<u64, IovaError> {
        check_len(len)?;
        if !align.is_power_of_two() || align < IOVA_PAGE {
            return Err(IovaError::BadAlignment { align });
        }
        let mut state = self.lock();

        let found = state.free.iter().find_map(|(&start, &last)| {
            let first = align_up(start, align)?;
            let alloc_last = first.checked_add(len - 1)?;
            (alloc_last <= last).then_some((start, last, first, alloc_last))
        });
        let Some((run_start, run_last, first, alloc_last)) = found else {
            return Err(IovaError::OutOfSpace {
                len,
                align,
                largest_free: state.largest_free(),
                free_total: state.free_total(),
            });
        };

        state.free.remove(&run_start);
        if first > run_start {
            state.free.insert(run_start, first - 1);
        }
        if alloc_last < run_last {
            state.free.insert(alloc_last + 1, run_last);
        }
        state.allocated.insert(first, len);
        Ok(first)
    }

    /// Gives back a range obtained from [`IovaAllocator::alloc`]; `iova` and `len` must be exactly
    /// what was allocated. The range is merged with free neighbours.
    ///
    /// The caller must make sure the device can no longer reach the range (its IOMMU mapping is
    /// gone) before giving it back, or a later allocation could alias live device memory.
    ///
    /// # Errors
    ///
    /// [`IovaError::NotAllocated`] for a double free or a foreign range,
    /// [`IovaError::LengthMismatch`] when `len` is not the allocated length,
    /// [`IovaError::BadLength`] when `len` is not a non-zero multiple of 4096. Nothing changes on
    /// error.
    pub fn free(&self, iova: u64, len: u64) -> Result<(), IovaError> {
        check_len(len)?;
        let mut state = self.lock();
        match state.allocated.get(&iova) {
            None => return Err(IovaError::NotAllocated { iova, len }),
            Some(&allocated) if allocated != len => {
                return Err(IovaError::LengthMismatch {
                    iova,
                    len,
                    allocated,
                })
            }
            Some(_) => {}
        }
        state.allocated.remove(&iova);

        // `alloc` checked that `iova + len - 1` does not overflow.
        let mut start = iova;
        let mut last = iova + (len - 1);
        let before = state.free.range(..iova).next_back().map(|(&s, &l)| (s, l));
        if let Some((prev_start, prev_last)) = before {
            if prev_last.checked_add(1) == Some(start) {
                state.free.remove(&prev_start);
                start = prev_start;
            }
        }
        if let Some(next_start) = last.checked_add(1) {
            if let Some(next_last) = state.free.remove(&next_start) {
                last = next_last;
            }
        }
        state.free.insert(start, last);
        Ok(())
    }

    /// Free IOVA space in all, in bytes.
    pub fn free_bytes(&self) -> u64 {
        self.lock().free_total()
    }

    /// Length of the largest free run, in bytes: the largest request with 4 KiB alignment that
    /// can succeed now.
    pub fn largest_free_run(&self) -> u64 {
        self.lock().largest_free()
    }

    /// IOVA space currently allocated (including ranges kept out of use because their memory was
    /// leaked), in bytes.
    pub fn allocated_bytes(&self) -> u64 {
        self.lock()
            .allocated
            .values()
            .fold(0u64, |acc, &len| acc.saturating_add(len))
    }

    /// Number of live allocations.
    pub fn allocation_count(&self) -> usize {
        self.lock().allocated.len()
    }

    /// A snapshot of the free runs as inclusive ranges, lowest first (for diagnostics and tests).
    pub fn free_runs(&self) -> Vec<IovaRange> {
        self.lock()
            .free
            .iter()
            .map(|(&start, &end)| IovaRange { start, end })
            .collect()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // No code path panics while holding the lock with the state half-updated, so a poisoned
        // lock (a panic elsewhere in the holder's thread) still guards a consistent state.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

fn check_len(len: u64) -> Result<(), IovaError> {
    if len == 0 || len % IOVA_PAGE != 0 {
        return Err(IovaError::BadLength { len });
    }
    Ok(())
}

/// Rounds `value` up to a multiple of `align` (a power of two); `None` on overflow.
fn align_up(value: u64, align: u64) -> Option<u64> {
    Some(value.checked_add(align - 1)? & !(align - 1))
}

/// The whole 4 KiB pages inside `[start, end]`, as an inclusive range; `None` if there is none.
fn trim_to_pages(start: u64, end: u64) -> Option<(u64, u64)> {
    let first = align_up(start, IOVA_PAGE)?;
    let last = if end % IOVA_PAGE == IOVA_PAGE - 1 {
        end
    } else {
        (end & !(IOVA_PAGE - 1)).checked_sub(1)?
    };
    (first <= last).then_some((first, last))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn range(start: u64, end: u64) -> IovaRange {
        IovaRange { start, end }
    }

    /// The two windows VFIO type1 reports on a typical x86 host: everything below the MSI window
    /// and everything above it up to 48 bits.
    fn x86_ranges() -> Vec<IovaRange> {
        vec![range(0, 0xfedf_ffff), range(0xfef0_0000, 0xffff_ffff_ffff)]
    }

    /// A small deterministic PRNG so the randomised tests need no dependency and replay exactly.
    struct XorShift(u64);

    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    #[test]
    fn never_hands_out_page_zero_or_low_mib() {
        let a = IovaAllocator::new(&[range(0, 0xffff_ffff)]).unwrap();
        assert_eq!(a.alloc(0x1000, 0x1000).unwrap(), IOVA_LOW_RESERVED);
        assert_eq!(a.free_runs()[0].start, IOVA_LOW_RESERVED + 0x1000);
    }

    #[test]
    fn small_window_below_one_mib_keeps_everything_but_page_zero() {
        let a = IovaAllocator::new(&[range(0, 0x7_ffff)]).unwrap();
        assert_eq!(a.free_runs(), vec![range(0x1000, 0x7_ffff)]);
        assert_eq!(a.alloc(0x1000, 0x1000).unwrap(), 0x1000);
    }

    #[test]
    fn window_of_only_page_zero_is_unusable() {
        let err = IovaAllocator::new(&[range(0, 0xfff)]).unwrap_err();
        assert!(matches!(err, IovaError::NoUsableRange { .. }));
        let err = IovaAllocator::new(&[]).unwrap_err();
        assert!(err.to_string().contains("no usable IOVA range"));
        // Inverted and sub-page windows are ignored, not trusted.
        assert!(IovaAllocator::new(&[range(0x5000, 0x4000), range(0x2001, 0x2fff)]).is_err());
    }

    #[test]
    fn windows_are_trimmed_to_whole_pages() {
        let a = IovaAllocator::new(&[range(0x20_0800, 0x40_07ff)]).unwrap();
        assert_eq!(a.free_runs(), vec![range(0x20_1000, 0x3f_ffff)]);
    }

    #[test]
    fn windows_up_to_u64_max_work() {
        let a = IovaAllocator::new(&[range(u64::MAX - 0x1f_ffff, u64::MAX)]).unwrap();
        let iova = a.alloc(0x20_0000, 0x20_0000).unwrap();
        assert_eq!(iova, u64::MAX - 0x1f_ffff);
        assert!(matches!(
            a.alloc(0x1000, 0x1000),
            Err(IovaError::OutOfSpace { .. })
        ));
        a.free(iova, 0x20_0000).unwrap();
        assert_eq!(a.free_runs(), vec![range(u64::MAX - 0x1f_ffff, u64::MAX)]);
        // An alignment whose rounding would overflow simply does not fit.
        assert!(a.alloc(0x1000, 1 << 63).is_err());
    }

    #[test]
    fn overlapping_windows_are_merged() {
        let a = IovaAllocator::new(&[range(0x30_0000, 0x5f_ffff), range(0x20_0000, 0x3f_ffff)])
            .unwrap();
        assert_eq!(a.free_runs(), vec![range(0x20_0000, 0x5f_ffff)]);
    }

    #[test]
    fn alignment_is_honoured() {
        let a = IovaAllocator::new(&x86_ranges()).unwrap();
        // Disturb the start so later requests need padding.
        let first = a.alloc(0x1000, 0x1000).unwrap();
        assert_eq!(first, MIB);
        for shift in 12..=30 {
            let align = 1u64 << shift;
            let iova = a.alloc(0x1000, align).unwrap();
            assert_eq!(iova % align, 0, "align {align:#x} gave {iova:#x}");
        }
        for bad in [0, 1, 0x800, 0x1800, 0x3000] {
            assert_eq!(
                a.alloc(0x1000, bad),
                Err(IovaError::BadAlignment { align: bad })
            );
        }
        for bad in [0, 1, 0xfff, 0x1001] {
            assert_eq!(a.alloc(bad, 0x1000), Err(IovaError::BadLength { len: bad }));
        }
    }

    #[test]
    fn padding_before_an_aligned_allocation_stays_free() {
        let a = IovaAllocator::new(&[range(0x10_0000, 0x7f_ffff)]).unwrap();
        let small = a.alloc(0x1000, 0x1000).unwrap();
        let big = a.alloc(0x20_0000, 0x20_0000).unwrap();
        assert_eq!(big, 0x20_0000);
        // First fit: the gap left by the alignment is used next.
        assert_eq!(a.alloc(0x1000, 0x1000).unwrap(), small + 0x1000);
    }

    #[test]
    fn exhaustion_reports_request_and_largest_run() {
        let a = IovaAllocator::new(&[range(0x10_0000, 0x13_ffff)]).unwrap(); // 256 KiB
        let mut got = Vec::new();
        for _ in 0..64 {
            got.push(a.alloc(0x1000, 0x1000).unwrap());
        }
        assert_eq!(a.free_bytes(), 0);
        let err = a.alloc(0x1000, 0x1000).unwrap_err();
        assert_eq!(
            err,
            IovaError::OutOfSpace {
                len: 0x1000,
                align: 0x1000,
                largest_free: 0,
                free_total: 0
            }
        );
        // Free every other page: 32 pages free, but no two adjacent.
        for iova in got.iter().step_by(2) {
            a.free(*iova, 0x1000).unwrap();
        }
        let err = a.alloc(0x2000, 0x1000).unwrap_err();
        assert_eq!(
            err,
            IovaError::OutOfSpace {
                len: 0x2000,
                align: 0x1000,
                largest_free: 0x1000,
                free_total: 32 * 0x1000
            }
        );
        let msg = err.to_string();
        assert!(
            msg.contains("0x2000") && msg.contains("largest free run: 0x1000"),
            "{msg}"
        );
    }

    #[test]
    fn freeing_coalesces_neighbours() {
        let a = IovaAllocator::new(&[range(0x10_0000, 0x1f_ffff)]).unwrap();
        let x = a.alloc(0x1000, 0x1000).unwrap();
        let y = a.alloc(0x2000, 0x1000).unwrap();
        let z = a.alloc(0x1000, 0x1000).unwrap();
        assert_eq!((x, y, z), (0x10_0000, 0x10_1000, 0x10_3000));
        assert_eq!(a.free_runs(), vec![range(0x10_4000, 0x1f_ffff)]);

        a.free(x, 0x1000).unwrap(); // no free neighbour on either side
        assert_eq!(a.free_runs().len(), 2);
        a.free(z, 0x1000).unwrap(); // merges with the tail
        assert_eq!(
            a.free_runs(),
            vec![range(0x10_0000, 0x10_0fff), range(0x10_3000, 0x1f_ffff)]
        );
        a.free(y, 0x2000).unwrap(); // bridges both
        assert_eq!(a.free_runs(), vec![range(0x10_0000, 0x1f_ffff)]);
        assert_eq!(a.largest_free_run(), 0x10_0000);
        assert_eq!(a.allocation_count(), 0);
        assert_eq!(a.allocated_bytes(), 0);
    }

    #[test]
    fn double_and_foreign_frees_are_refused() {
        let a = IovaAllocator::new(&x86_ranges()).unwrap();
        let iova = a.alloc(0x4000, 0x1000).unwrap();
        assert_eq!(
            a.free(iova, 0x2000),
            Err(IovaError::LengthMismatch {
                iova,
                len: 0x2000,
                allocated: 0x4000
            })
        );
        assert_eq!(
            a.free(iova + 0x1000, 0x1000),
            Err(IovaError::NotAllocated {
                iova: iova + 0x1000,
                len: 0x1000
            })
        );
        a.free(iova, 0x4000).unwrap();
        let err = a.free(iova, 0x4000).unwrap_err();
        assert_eq!(err, IovaError::NotAllocated { iova, len: 0x4000 });
        assert!(err.to_string().contains("double free"));
        assert_eq!(a.free(iova, 0), Err(IovaError::BadLength { len: 0 }));
        // The refused frees changed nothing.
        assert_eq!(a.free_runs().len(), 2);
        assert_eq!(a.allocation_count(), 0);
    }

    #[test]
    fn allocations_never_straddle_the_msi_hole() {
        let a = IovaAllocator::new(&x86_ranges()).unwrap();
        // Fill the low window up to just below the hole, leaving 1 MiB there.
        let low_len = 0xfee0_0000 - MIB - MIB;
        let low = a.alloc(low_len, 0x1000).unwrap();
        assert_eq!(low, MIB);
        // 2 MiB does not fit in the 1 MiB left below the hole: it must come from above.
        let big = a.alloc(2 * MIB, 0x1000).unwrap();
        assert!(big >= 0xfef0_0000, "{big:#x}");
        // 1 MiB still fits below.
        let rest = a.alloc(MIB, 0x1000).unwrap();
        assert_eq!(rest + MIB - 1, 0xfedf_ffff);
        // Freeing everything does not merge across the hole.
        for (iova, len) in [(low, low_len), (big, 2 * MIB), (rest, MIB)] {
            a.free(iova, len).unwrap();
        }
        assert_eq!(
            a.free_runs(),
            vec![
                range(MIB, 0xfedf_ffff),
                range(0xfef0_0000, 0xffff_ffff_ffff)
            ]
        );
    }

    #[test]
    fn random_alloc_free_never_overlaps() {
        let a = IovaAllocator::new(&[
            range(0, 0x7f_ffff),
            range(0x90_0000, 0xbf_ffff),
            range(0x100_0000, 0x1ff_ffff),
        ])
        .unwrap();
        let total = a.free_bytes();
        let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
        let mut live: Vec<(u64, u64)> = Vec::new();
        for step in 0..20_000 {
            if live.is_empty() || rng.below(100) < 55 {
                let len = (1 + rng.below(64)) * 0x1000;
                let align = 0x1000 << rng.below(10);
                match a.alloc(len, align) {
                    Ok(iova) => {
                        assert_eq!(iova % align, 0);
                        assert!(iova >= MIB);
                        let in_window = a_window_holds(iova, len);
                        assert!(in_window, "step {step}: {iova:#x}+{len:#x} outside windows");
                        for &(other, other_len) in &live {
                            assert!(
                                iova + len <= other || other + other_len <= iova,
                                "step {step}: {iova:#x}+{len:#x} overlaps {other:#x}+{other_len:#x}"
                            );
                        }
                        live.push((iova, len));
                    }
                    Err(IovaError::OutOfSpace { .. }) => {}
                    Err(e) => panic!("step {step}: {e}"),
                }
            } else {
                let victim = live.swap_remove(rng.below(live.len() as u64) as usize);
                a.free(victim.0, victim.1).unwrap();
            }
            let used: u64 = live.iter().map(|&(_, l)| l).sum();
            assert_eq!(a.free_bytes() + used, total, "step {step}");
        }
        for (iova, len) in live.drain(..) {
            a.free(iova, len).unwrap();
        }
        assert_eq!(a.free_bytes(), total);
        assert_eq!(a.free_runs().len(), 3, "everything coalesced back");
    }

    fn a_window_holds(iova: u64, len: u64) -> bool {
        let last = iova + len - 1;
        [
            (MIB, 0x7f_ffff),
            (0x90_0000, 0xbf_ffff),
            (0x100_0000, 0x1ff_ffff),
        ]
        .iter()
        .any(|&(s, e)| s <= iova && last <= e)
    }

    #[test]
    fn concurrent_use_from_threads() {
        let a = std::sync::Arc::new(IovaAllocator::new(&x86_ranges()).unwrap());
        let handles: Vec<_> = (0..8)
            .map(|t| {
                let a = a.clone();
                std::thread::spawn(move || {
                    let mut mine = Vec::new();
                    for i in 0..500u64 {
                        let len = ((t + i) % 8 + 1) * 0x1000;
                        mine.push((a.alloc(len, 0x1000).unwrap(), len));
                    }
                    mine
                })
            })
            .collect();
        let mut all: Vec<(u64, u64)> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        all.sort_unstable();
        for pair in all.windows(2) {
            assert!(pair[0].0 + pair[0].1 <= pair[1].0);
        }
        for (iova, len) in all {
            a.free(iova, len).unwrap();
        }
        assert_eq!(a.free_runs().len(), 2);
    }
}
