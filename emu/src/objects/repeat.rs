//! A KLM key's "repeated block" layout: instead of a list of pieces end to end, one cycle of
//! entries (each `bcount` bytes at `va` through a key, its address advancing `stride` bytes a
//! cycle), the cycle repeated `repeat_count` times. libmlx5 writes it with
//! `mlx5dv_wr_mr_interleaved` and `mlx5dv_wr_set_mkey_layout_interleaved`
//! (`umr_strided_seg_create` in `providers/mlx5/qp.c`: `struct mlx5_wqe_umr_repeat_block_seg`,
//! its `op` 0x400 where a KLM holds its key, then `struct mlx5_wqe_umr_repeat_ent_seg` entries;
//! mlx5_ib's `set_sig_data_segment` writes the same `mlx5_stride_block_ctrl_seg` for
//! signature keys). The key's address space is the cycles end to end.

use cxdirect_hw::sig::{StrideBlockCtrl, StrideBlockEntry, STRIDE_BLOCK_OP};
use cxdirect_hw::umr::OCTOWORD;

/// One entry of the cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    /// Bytes taken a cycle.
    pub bcount: u16,
    /// Bytes the address advances a cycle (at least `bcount`).
    pub stride: u16,
    /// The key the bytes are reached through.
    pub key: u32,
    /// Address of the first cycle's bytes.
    pub va: u64,
}

/// A repeated block layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RepeatBlock {
    /// Cycles.
    pub repeat: u32,
    /// Bytes of one cycle (the entries' `bcount` summed, never 0).
    pub per_cycle: u64,
    /// The cycle's entries, in order.
    pub entries: Vec<Entry>,
}

/// Whether the translation list `xlt` starts with a repeat block (its `op` where a KLM's key
/// lies).
pub(crate) fn is_repeat_block(xlt: &[u8]) -> bool {
    xlt.get(..OCTOWORD)
        .and_then(|head| StrideBlockCtrl::new(head).ok())
        .is_some_and(|head| head.op() == STRIDE_BLOCK_OP)
}

/// Parses the repeat block at the start of `xlt`. None when malformed: no entry, entries
/// past the list, a stride shorter than its entry, or a cycle byte count other than the
/// entries' sum.
pub(crate) fn parse(xlt: &[u8]) -> Option<RepeatBlock> {
    let head = StrideBlockCtrl::new(xlt.get(..OCTOWORD)?).ok()?;
    if head.op() != STRIDE_BLOCK_OP || head.num_entries() == 0 {
        return None;
    }
    let count = usize::from(head.num_entries());
    let mut entries = Vec::with_capacity(count);
    for i in 1..=count {
        let raw = xlt.get(i * OCTOWORD..(i + 1) * OCTOWORD)?;
        let e = StrideBlockEntry::new(raw).ok()?;
        if e.stride() < e.bcount() {
            return None;
        }
        entries.push(Entry {
            bcount: e.bcount(),
            stride: e.stride(),
            key: e.key(),
            va: e.va(),
        });
    }
    let per_cycle: u64 = entries.iter().map(|e| u64::from(e.bcount)).sum();
    if per_cycle == 0 || per_cycle != u64::from(head.bcount_per_cycle()) {
        return None;
    }
    Some(RepeatBlock {
        repeat: head.repeat_count(),
        per_cycle,
        entries,
    })
}

impl RepeatBlock {
    /// Where byte `offset` of the layout lies: (the entry's key, its address, bytes of the
    /// entry from there on in this cycle). None past the last cycle.
    pub fn locate(&self, offset: u64) -> Option<(u32, u64, u64)> {
        let cycle = offset / self.per_cycle;
        if cycle >= u64::from(self.repeat) {
            return None;
        }
        let mut within = offset % self.per_cycle;
        for e in &self.entries {
            let bytes = u64::from(e.bcount);
            if within < bytes {
                let at =
                    e.va.checked_add(cycle * u64::from(e.stride))?
                        .checked_add(within)?;
                return Some((e.key, at, bytes - within));
            }
            within -= bytes;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `reg_mr_interleaved` of test_mlx5_mkey.py: 8 bytes of every 10 at the MR's start and at
    /// 64, three cycles.
    fn interleaved() -> Vec<u8> {
        let mut xlt = vec![0u8; 64];
        xlt[0..4].copy_from_slice(&16u32.to_be_bytes());
        xlt[4..8].copy_from_slice(&STRIDE_BLOCK_OP.to_be_bytes());
        xlt[8..12].copy_from_slice(&3u32.to_be_bytes());
        xlt[14..16].copy_from_slice(&2u16.to_be_bytes());
        for (i, va) in [(1usize, 0x1000u64), (2, 0x1040)] {
            let e = &mut xlt[i * 16..(i + 1) * 16];
            e[0..2].copy_from_slice(&10u16.to_be_bytes());
            e[2..4].copy_from_slice(&8u16.to_be_bytes());
            e[4..8].copy_from_slice(&0x300u32.to_be_bytes());
            e[8..16].copy_from_slice(&va.to_be_bytes());
        }
        xlt
    }

    #[test]
    fn umr_strided_seg_create_cycles_through_its_entries() {
        let xlt = interleaved();
        assert!(is_repeat_block(&xlt));
        let rb = parse(&xlt).expect("repeat block");
        assert_eq!(rb.per_cycle * u64::from(rb.repeat), 48);
        assert_eq!(rb.locate(0), Some((0x300, 0x1000, 8)));
        assert_eq!(rb.locate(9), Some((0x300, 0x1041, 7)));
        assert_eq!(rb.locate(16), Some((0x300, 0x100a, 8)));
        assert_eq!(rb.locate(47), Some((0x300, 0x1040 + 20 + 7, 1)));
        assert_eq!(rb.locate(48), None);
    }

    #[test]
    fn a_cycle_count_other_than_its_entries_is_malformed() {
        let mut xlt = interleaved();
        xlt[0..4].copy_from_slice(&17u32.to_be_bytes());
        assert_eq!(parse(&xlt), None);
        let mut xlt = interleaved();
        xlt[16..18].copy_from_slice(&7u16.to_be_bytes());
        assert_eq!(parse(&xlt), None, "a stride shorter than its bytes");
        assert!(!is_repeat_block(&[0u8; 16]));
    }
}
