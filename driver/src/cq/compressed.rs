//! Compressed sessions (CQE compression): a title CQE and mini-CQE arrays, unpacked into one
//! CQE per completion.

use super::cqe::Cqe;
use cxdirect_hw::cqe::{CQE_SIZE, MINI_CQES_PER_SLOT};

/// A compressed session being read (CQE compression): the title CQE, the mini-CQE array in
/// use, and how far the queue has got. Each completion is handed out as the title with that
/// completion's fields put in, so the queues check it exactly as a plain CQE.
#[derive(Clone, Copy)]
pub(super) struct Session {
    pub(super) title: [u64; CQE_SIZE / 8],
    pub(super) minis: [u64; MINI_CQES_PER_SLOT as usize],
    /// Consumer index of the title.
    pub(super) start: u32,
    /// Completions in the session (2..=ring size, checked when it opened).
    pub(super) count: u32,
    /// Completions handed out so far.
    pub(super) taken: u32,
    /// The title's WQE counter: completion `taken` is for WQE `first_counter + taken`.
    pub(super) first_counter: u16,
}

impl Session {
    /// A session of `count` completions whose title (at consumer index `start`) is `title`
    /// and first mini-CQE array `minis`.
    pub(super) fn new(title: Cqe, minis: Cqe, start: u32, count: u32) -> Self {
        let mut words = title.words;
        // Every completion is handed out in the plain format.
        let tail = words[7].to_ne_bytes();
        words[7] = put_high_half(
            words[7],
            [tail[4], tail[5], tail[6], tail[7] & !FORMAT_MASK],
        );
        Self {
            title: words,
            minis: minis.words,
            start,
            count,
            taken: 0,
            first_counter: title.wqe_counter(),
        }
    }

    /// The completion `taken` as a plain CQE.
    #[inline(always)]
    pub(super) fn current(&self) -> Cqe {
        let mini = self.minis[(self.taken % MINI_CQES_PER_SLOT) as usize].to_ne_bytes();
        let mut words = self.title;
        // Hash format: the mini-CQE's first four bytes are the RSS hash (CQE bytes 0x0c..0x10),
        // its last four the byte count (0x2c..0x30).
        words[1] = put_high_half(words[1], [mini[0], mini[1], mini[2], mini[3]]);
        words[5] = put_high_half(words[5], [mini[4], mini[5], mini[6], mini[7]]);
        let counter = self
            .first_counter
            .wrapping_add(self.taken as u16)
            .to_be_bytes();
        let tail = words[7].to_ne_bytes();
        words[7] = put_high_half(words[7], [counter[0], counter[1], tail[6], tail[7]]);
        Cqe::from_words(words)
    }
}

/// Completions of a compressed session that share one mini-CQE array
/// ([`CqRing::mini_run`]). They differ from [`MiniRun::first`] only in byte count, RSS hash
/// and WQE counter (consecutive), so a queue checks the first one in full and the rest by
/// their byte counts.
#[derive(Clone, Copy)]
pub(crate) struct MiniRun {
    /// The run's first completion as a plain CQE.
    pub first: Cqe,
    pub(super) minis: [u64; MINI_CQES_PER_SLOT as usize],
    /// Where the run starts in `minis` (0..8).
    pub(super) from: usize,
    /// Completions in the run (1..=8).
    pub len: usize,
}

impl MiniRun {
    /// Byte count (the device's word, unchecked) and RSS hash of completion `i` of the run
    /// (`i < len`; the hash means something only when the title's hash type is non-zero).
    #[inline(always)]
    pub fn byte_cnt_and_hash(&self, i: usize) -> (u32, u32) {
        let mini = self.minis[(self.from + i) % MINI_CQES_PER_SLOT as usize].to_ne_bytes();
        (
            u32::from_be_bytes([mini[4], mini[5], mini[6], mini[7]]),
            u32::from_be_bytes([mini[0], mini[1], mini[2], mini[3]]),
        )
    }
}

/// `word` (memory order) with its bytes 4..8 replaced.
#[inline(always)]
pub(super) fn put_high_half(word: u64, half: [u8; 4]) -> u64 {
    let mut bytes = word.to_ne_bytes();
    bytes[4..].copy_from_slice(&half);
    u64::from_ne_bytes(bytes)
}

/// Bits 3:2 of `op_own`: the CQE format.
pub(super) const FORMAT_MASK: u8 = 0x0c;
