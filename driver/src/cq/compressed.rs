//! Compressed sessions (CQE compression): a title CQE and mini-CQE arrays, unpacked into one
//! CQE per completion.

use super::cqe::{rx_flags, Cqe};
use crate::mem::OffloadFlags;
use cxdirect_hw::cqe::{op_own, Cqe64, MiniCqe8, CQE_SIZE, MINI_CQES_PER_SLOT};
use cxdirect_hw::layout::{field, FieldInfo};

/// Where a session's completion differs from its title, from the `hw::cqe` tables: each
/// mini-CQE field replaces the title's field of the same meaning, a dword in the high half of one
/// of the CQE's eight words (as [`put_high_half`] writes it).
const TITLE_HASH: FieldInfo = field::<Cqe64>("rss_hash_result");
const TITLE_BYTE_CNT: FieldInfo = field::<Cqe64>("byte_cnt");
const TITLE_WQE_COUNTER: FieldInfo = field::<Cqe64>("wqe_counter");
const MINI_HASH: usize = field::<MiniCqe8>("rx_hash_result").dword_byte();
const MINI_BYTE_CNT: usize = field::<MiniCqe8>("byte_cnt").dword_byte();
const _: () = assert!(
    TITLE_HASH.dword_byte() % 8 == 4
        && TITLE_BYTE_CNT.dword_byte() % 8 == 4
        && TITLE_WQE_COUNTER.dword_byte() % 8 == 4
        && TITLE_HASH.width == 32
        && TITLE_BYTE_CNT.width == 32
        && TITLE_WQE_COUNTER.width == 16
        && TITLE_WQE_COUNTER.dword_shift() == 16
        && op_own::BYTE == CQE_SIZE - 1
        && MINI_HASH + 4 <= 8
        && MINI_BYTE_CNT + 4 <= 8
);
/// The CQE word that holds `op_own` (its last byte).
const OP_OWN_WORD: usize = op_own::BYTE / 8;
/// The CQE words whose high halves hold the hash, the byte count and the WQE counter.
const HASH_WORD: usize = TITLE_HASH.dword_byte() / 8;
const BYTE_CNT_WORD: usize = TITLE_BYTE_CNT.dword_byte() / 8;
const WQE_COUNTER_WORD: usize = TITLE_WQE_COUNTER.dword_byte() / 8;

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
    /// What every completion of the session shares, read from the title once when it opened:
    /// its queue's user index (`srqn_uidx`), whether it is a successful receive, and its
    /// offload results (the RSS hash aside, which each mini-CQE carries).
    pub(super) user_index: u32,
    pub(super) receive_ok: bool,
    pub(super) flags: OffloadFlags,
}

impl Session {
    /// A session of `count` completions whose title (at consumer index `start`) is `title`
    /// and first mini-CQE array `minis`.
    pub(super) fn new(title: Cqe, minis: Cqe, start: u32, count: u32) -> Self {
        let mut words = title.words;
        // Every completion is handed out in the plain format.
        let tail = words[OP_OWN_WORD].to_ne_bytes();
        words[OP_OWN_WORD] = put_high_half(
            words[OP_OWN_WORD],
            [tail[4], tail[5], tail[6], tail[7] & !op_own::FORMAT_MASK],
        );
        Self {
            title: words,
            minis: minis.words,
            start,
            count,
            taken: 0,
            first_counter: title.wqe_counter(),
            user_index: title.srqn(),
            receive_ok: title.is_receive_ok(),
            flags: rx_flags(&title),
        }
    }

    /// The completion `taken` as a plain CQE.
    #[inline(always)]
    pub(super) fn current(&self) -> Cqe {
        let mini = self.minis[(self.taken % MINI_CQES_PER_SLOT) as usize].to_ne_bytes();
        let mut words = self.title;
        // Hash format: the mini-CQE carries the RSS hash and the byte count.
        words[HASH_WORD] = put_high_half(words[HASH_WORD], mini_dword(&mini, MINI_HASH));
        words[BYTE_CNT_WORD] =
            put_high_half(words[BYTE_CNT_WORD], mini_dword(&mini, MINI_BYTE_CNT));
        let counter = self
            .first_counter
            .wrapping_add(self.taken as u16)
            .to_be_bytes();
        let tail = words[WQE_COUNTER_WORD].to_ne_bytes();
        words[WQE_COUNTER_WORD] = put_high_half(
            words[WQE_COUNTER_WORD],
            [counter[0], counter[1], tail[6], tail[7]],
        );
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
            u32::from_be_bytes(mini_dword(&mini, MINI_BYTE_CNT)),
            u32::from_be_bytes(mini_dword(&mini, MINI_HASH)),
        )
    }
}

/// The next completions of a compressed session that share one mini-CQE array, read in place
/// ([`CqRing::array_run`]): what they share (queue number, receive status, offload results)
/// was read from the title once, when the session opened, and their WQE counters are
/// consecutive from [`ArrayRun::counter`], so a queue checks the run once and each completion
/// only by its byte count (and takes its RSS hash).
///
/// [`CqRing::array_run`]: super::CqRing::array_run
pub(crate) struct ArrayRun<'a> {
    pub(super) session: &'a Session,
    /// Where the run starts in the array (0..8).
    pub(super) from: usize,
    /// Completions in the run (1..=8).
    pub len: usize,
}

impl ArrayRun<'_> {
    /// The WQE counter of the run's first completion (the title's, plus the completions
    /// taken before it).
    #[inline(always)]
    pub fn counter(&self) -> u16 {
        self.session
            .first_counter
            .wrapping_add(self.session.taken as u16)
    }

    /// The receive queue's user index (or RMP number) every completion of the session
    /// carries in `srqn_uidx`.
    #[inline(always)]
    pub fn user_index(&self) -> u32 {
        self.session.user_index
    }

    /// True when the session's title is a successful receive completion.
    #[inline(always)]
    pub fn is_receive_ok(&self) -> bool {
        self.session.receive_ok
    }

    /// The offload results every completion of the session shares (RSS hash as the title's).
    #[inline(always)]
    pub fn flags(&self) -> OffloadFlags {
        self.session.flags
    }

    /// Byte count (the device's word, unchecked) and RSS hash of completion `i` of the run
    /// (`i < len`).
    #[inline(always)]
    pub fn byte_cnt_and_hash(&self, i: usize) -> (u32, u32) {
        let mini = self.session.minis[(self.from + i) % MINI_CQES_PER_SLOT as usize].to_ne_bytes();
        (
            u32::from_be_bytes(mini_dword(&mini, MINI_BYTE_CNT)),
            u32::from_be_bytes(mini_dword(&mini, MINI_HASH)),
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

/// The four bytes of a mini-CQE (memory order) at byte `at` (0 or 4).
#[inline(always)]
fn mini_dword(mini: &[u8; 8], at: usize) -> [u8; 4] {
    [mini[at], mini[at + 1], mini[at + 2], mini[at + 3]]
}
