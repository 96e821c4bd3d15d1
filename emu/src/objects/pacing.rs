//! The packet pacing rate table SET_PP_RATE_LIMIT writes: one entry per index, each a rate,
//! a burst bound, a typical packet size and the uid that owns it.
//!
//! The model keeps the entries and answers for them; it does not shape a send queue's
//! traffic by them (an SQ naming an entry sends at the wire's pace).

use super::devx::privileged;

/// Entries in the rate table, index 0 (unlimited) included. ConnectX-6 Dx-like: mlx5_core's
/// `mlx5_init_rl_table` then offers 127 rates (index 0 is never handed out).
pub(crate) const RATE_TABLE_SIZE: u16 = 128;
/// Highest rate an entry may hold, in kb/s: 100 Gb/s, the model's port speed.
pub(crate) const MAX_RATE_KBPS: u32 = 100_000_000;
/// Lowest non-zero rate an entry may hold, in kb/s (rate 0 means "unused").
pub(crate) const MIN_RATE_KBPS: u32 = 1;

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
