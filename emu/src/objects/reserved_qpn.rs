//! Reserved QP numbers: the blocks RESERVED_QPN general objects hold.
//!
//! A block is `2^log` consecutive QP numbers, its first a multiple of its size, that no QP or
//! DCT is given while the object lives. The blocks come from a region of the 24-bit QP number
//! space of their own, past every number the QP, DCT and datagram QP tables hand out
//! ([`RESERVED_QPN_BASE`]), so a QP created at any time can never take a reserved number and a
//! reserved number never names a QP. The object's number is the block's first QP number, as
//! libmlx5 reads it (`reserved_qpn_blk_alloc`: `blk->first_qpn = obj->object_id`).

use super::limits::{LOG_MAX_DCT, LOG_MAX_NUM_RESERVED_QPN, LOG_MAX_QP, LOG_MAX_UD_QP};
use super::{DCT_NUMBER_BASE, UD_QPN_BASE};
use std::collections::BTreeMap;

/// First QP number of the reserved region: aligned to the region's size, so a block aligned
/// within the region is aligned as a QP number too.
pub(crate) const RESERVED_QPN_BASE: u32 = 0x80_0000;

/// Number of QP numbers in the reserved region.
const REGION: u32 = 1 << LOG_MAX_NUM_RESERVED_QPN;

// The region lies past every other QP number space and inside the 24-bit QP number.
const _: () = {
    assert!(0x4000 + (1u32 << LOG_MAX_QP) <= DCT_NUMBER_BASE);
    assert!(DCT_NUMBER_BASE + (1u32 << LOG_MAX_DCT) <= RESERVED_QPN_BASE);
    assert!(UD_QPN_BASE + (1u32 << LOG_MAX_UD_QP) <= RESERVED_QPN_BASE);
    assert!(RESERVED_QPN_BASE % REGION == 0);
    assert!(RESERVED_QPN_BASE + REGION <= 1 << 24);
};

/// One live block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Block {
    /// Log2 of the block's size in QP numbers.
    pub log: u8,
}

/// The live blocks, by first QP number.
#[derive(Debug, Default)]
pub(crate) struct ReservedQpns {
    blocks: BTreeMap<u32, Block>,
    /// Region offset where the next search starts: blocks are handed out moving forward, so a
    /// number just given back is not handed out again at once (libmlx5 also moves forward
    /// through its blocks, so a peer holding a stale number meets no new owner soon).
    cursor: u32,
}

impl ReservedQpns {
    /// Reserves a block of `2^log` QP numbers aligned to its size; returns its first QP
    /// number, or `None` when no such block is free. `log` must not exceed the region's log.
    pub fn reserve(&mut self, log: u8) -> Option<u32> {
        if log > LOG_MAX_NUM_RESERVED_QPN {
            return None;
        }
        let size = 1u32 << log;
        let start = self.cursor.next_multiple_of(size) % REGION;
        let slots = REGION / size;
        for step in 0..slots {
            let offset = (start + step * size) % REGION;
            let first = RESERVED_QPN_BASE + offset;
            if self.overlaps(first, size) {
                continue;
            }
            self.blocks.insert(first, Block { log });
            self.cursor = (offset + size) % REGION;
            return Some(first);
        }
        None
    }

    /// Whether `[first, first + size)` meets a live block.
    fn overlaps(&self, first: u32, size: u32) -> bool {
        let end = first + size;
        // The last block starting before `end` is the only one that can reach into the range
        // (blocks never overlap one another).
        self.blocks
            .range(..end)
            .next_back()
            .is_some_and(|(&at, b)| at + (1u32 << b.log) > first)
    }

    /// The live block whose first QP number is `first`.
    pub fn get(&self, first: u32) -> Option<Block> {
        self.blocks.get(&first).copied()
    }

    /// Gives the block whose first QP number is `first` back; `None` if there is none.
    pub fn release(&mut self, first: u32) -> Option<Block> {
        self.blocks.remove(&first)
    }

    /// Whether QP number `qpn` is reserved by a live block.
    #[cfg(test)]
    pub fn holds(&self, qpn: u32) -> bool {
        self.overlaps(qpn, 1)
    }

    /// Number of live blocks.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.blocks.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_aligned_disjoint_and_move_forward() {
        let mut r = ReservedQpns::default();
        let a = r.reserve(0).expect("one number");
        let b = r.reserve(4).expect("sixteen numbers");
        assert_eq!(a, RESERVED_QPN_BASE);
        assert_eq!(b % 16, 0);
        assert!(b > a);
        assert!(r.holds(b + 15) && !r.holds(b + 16));
        assert_eq!(r.release(a), Some(Block { log: 0 }));
        assert!(r.release(a).is_none());
        // The freed number is not handed out next.
        let c = r.reserve(0).expect("one number");
        assert_ne!(c, a);
        assert_eq!(r.len(), 2);
    }

    #[test]
    fn the_region_fills_and_wraps() {
        let mut r = ReservedQpns::default();
        let log = LOG_MAX_NUM_RESERVED_QPN - 2;
        let all: Vec<u32> = (0..4).map(|_| r.reserve(log).expect("a quarter")).collect();
        assert!(r.reserve(0).is_none(), "the region is full");
        r.release(all[1]);
        assert_eq!(
            r.reserve(log),
            Some(all[1]),
            "the search wraps to the freed quarter"
        );
        assert!(r.reserve(LOG_MAX_NUM_RESERVED_QPN + 1).is_none());
    }
}
