//! The packet pacing rate table SET_PP_RATE_LIMIT writes: one entry per index, each a rate,
//! a burst bound, a typical packet size and the uid that owns it.
//!
//! An SQ naming an entry sends at most at its rate ([`Pacer`], `engine::pacing`): each SQ
//! has its own bucket, as Linux's per-queue `tx_maxrate` expects of it. Scheduling elements'
//! rate limits use the same buckets ([`Rate::from_mbps`]).

use super::devx::privileged;
use std::time::{Duration, Instant};

/// Entries in the rate table, index 0 (unlimited) included. ConnectX-6 Dx-like: mlx5_core's
/// `mlx5_init_rl_table` then offers 127 rates (index 0 is never handed out).
pub(crate) const RATE_TABLE_SIZE: u16 = 128;
/// Highest rate an entry may hold, in kb/s: 100 Gb/s, the model's port speed.
pub(crate) const MAX_RATE_KBPS: u32 = 100_000_000;
/// Lowest non-zero rate an entry may hold, in kb/s (rate 0 means "unused").
pub(crate) const MIN_RATE_KBPS: u32 = 1;

/// Bytes an SQ may send at once after idling, when its entry's `burst_upper_bound` is 0 (the
/// device's default, which no public source gives: the model's choice is one 64 KiB LSO
/// WQE's worth).
pub(crate) const DEFAULT_BURST_BYTES: u32 = 64 * 1024;

/// One entry in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RateEntry {
    /// The rate, in kb/s (never 0: a zero rate frees the entry).
    pub rate_kbps: u32,
    /// Largest burst, in bytes (0 = the device's default).
    pub burst_upper_bound: u32,
    /// Typical packet size, in bytes (0 = the device's default).
    pub typical_packet_size: u16,
    /// The uid that wrote it (0 or 0xffff: the function's own).
    pub uid: u16,
}

/// The rate table: entries 1 to [`RATE_TABLE_SIZE`] - 1 (entry 0 is "unlimited" and fixed).
#[derive(Debug)]
pub(crate) struct RateTable {
    entries: Vec<Option<RateEntry>>,
}

impl Default for RateTable {
    fn default() -> Self {
        Self {
            entries: vec![None; usize::from(RATE_TABLE_SIZE)],
        }
    }
}

impl RateTable {
    /// Whether `index` names a writable entry (1 to [`RATE_TABLE_SIZE`] - 1).
    pub fn writable(index: u16) -> bool {
        index != 0 && index < RATE_TABLE_SIZE
    }

    /// The entry at `index`, if in use.
    pub fn get(&self, index: u16) -> Option<&RateEntry> {
        self.entries.get(usize::from(index))?.as_ref()
    }

    /// Writes (or, with `None`, frees) a writable entry; other indexes are left alone.
    pub fn set(&mut self, index: u16, entry: Option<RateEntry>) {
        if Self::writable(index) {
            if let Some(slot) = self.entries.get_mut(usize::from(index)) {
                *slot = entry;
            }
        }
    }

    /// Hands a closed user context's entries to the driver (uid 0), as its other objects are.
    pub fn disown(&mut self, uid: u16) {
        if privileged(uid) {
            return;
        }
        for entry in self.entries.iter_mut().flatten() {
            if entry.uid == uid {
                entry.uid = 0;
            }
        }
    }
}

impl RateEntry {
    /// The entry's rate and burst.
    pub fn rate(&self) -> Rate {
        Rate {
            bytes_per_second: u64::from(self.rate_kbps) * 1000 / 8,
            burst_bytes: match self.burst_upper_bound {
                0 => DEFAULT_BURST_BYTES,
                bound => bound,
            },
        }
    }
}

/// What a bucket is filled at: a rate and the most it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rate {
    /// Bytes a second (at least 1 is used).
    pub bytes_per_second: u64,
    /// The bucket's depth, in bytes.
    pub burst_bytes: u32,
}

impl Rate {
    /// A scheduling element's `max_average_bw`, in Mb/s, with the default burst.
    pub fn from_mbps(mbps: u32) -> Rate {
        Rate {
            bytes_per_second: u64::from(mbps) * 1_000_000 / 8,
            burst_bytes: DEFAULT_BURST_BYTES,
        }
    }
}

/// One SQ's (or scheduling element's) token bucket: the bytes it may still send now. A frame
/// goes while the bucket is not in debt and is then charged whole, so a large frame may leave
/// it in debt; the SQ then waits (between WQEs, or between the frames of an LSO or
/// multi-packet WQE) until the rate has paid the debt back. Over time the SQ sends at the
/// entry's rate; idle, it saves at most the entry's burst.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Pacer {
    /// Bytes in the bucket; negative: the debt.
    tokens: i64,
    /// When the bucket was last filled (none before the first WQE: it starts full).
    filled_at: Option<Instant>,
}

impl Pacer {
    /// Fills the bucket for the time since it was last filled; `Ok` when the SQ may take its
    /// next WQE now, else `Err` with when it may.
    pub fn admit(&mut self, rate: Rate, now: Instant) -> Result<(), Instant> {
        let depth = i64::from(rate.burst_bytes);
        let rate = rate.bytes_per_second.max(1);
        match self.filled_at {
            None => self.tokens = depth,
            Some(at) => {
                let elapsed = now.saturating_duration_since(at);
                // Bytes earned, capped before multiplying so that a long idle cannot overflow.
                let nanos = elapsed.as_nanos().min(u128::from(u64::MAX / 2));
                let earned = (nanos * u128::from(rate) / 1_000_000_000).min(i64::MAX as u128);
                self.tokens = self.tokens.saturating_add(earned as i64).min(depth);
            }
        }
        self.filled_at = Some(now);
        if self.tokens >= 0 {
            return Ok(());
        }
        let debt = self.tokens.unsigned_abs();
        let wait = Duration::from_nanos(
            (u128::from(debt) * 1_000_000_000).div_ceil(u128::from(rate)) as u64,
        );
        Err(now + wait)
    }

    /// Bytes in the bucket as last filled (negative: the debt).
    pub fn tokens(&self) -> i64 {
        self.tokens
    }

    /// Charges `bytes` sent.
    pub fn charge(&mut self, bytes: usize) {
        self.tokens = self.tokens.saturating_sub(bytes as i64);
    }

    /// Forgets the bucket (the SQ's entry changed, or it was reset): it starts full again.
    pub fn reset(&mut self) {
        *self = Pacer::default();
    }
}
