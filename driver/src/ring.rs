//! What every work queue ring shares: the burst bound, index and word helpers, per-queue
//! counters and the state of a rebuild.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// Most packets one `tx_burst` or `rx_burst` call moves.
pub const MAX_BURST: usize = 256;

#[cfg(test)]
mod tests;

/// The first `N * 8` bytes of `bytes` as `N` words in memory order (what a volatile word store
/// of each writes back); words past the end of a shorter `bytes` stay zero.
#[inline]
pub(crate) fn words_from_bytes<const N: usize, const M: usize>(bytes: &[u8; M]) -> [u64; N] {
    let mut words = [0u64; N];
    for (word, chunk) in words.iter_mut().zip(bytes.chunks_exact(8)) {
        let mut b = [0u8; 8];
        b.copy_from_slice(chunk);
        *word = u64::from_ne_bytes(b);
    }
    words
}

/// `words` laid out in memory order into the front of `out` (as many whole words as fit).
#[inline]
pub(crate) fn bytes_from_words<const N: usize, const M: usize>(words: [u64; N], out: &mut [u8; M]) {
    for (chunk, word) in out.chunks_exact_mut(8).zip(words) {
        chunk.copy_from_slice(&word.to_ne_bytes());
    }
}

/// Per-queue counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Packets sent or received.
    pub packets: u64,
    /// Bytes sent or received.
    pub bytes: u64,
    /// Send: packets refused (too large, or the device reported an error). Receive: error CQEs.
    pub errors: u64,
    /// Receive: packets the device dropped for lack of a posted buffer is counted by the port;
    /// here: times the pool was empty when refilling.
    pub nombuf: u64,
    /// Doorbells rung.
    pub doorbells: u64,
    /// Doorbells that carried the WQE (BlueFlame).
    pub blueflame: u64,
    /// Packets sent fully inline.
    pub inline_packets: u64,
    /// Send: enhanced multi-packet WQEs posted (each carrying two or more packets; see
    /// `PortConfig::tx_multi_packet`).
    pub multi_packet_wqes: u64,
    /// CQEs consumed.
    pub cqes: u64,
    /// CQEs with values the driver refused (counted; the queue stops until recovered).
    pub bad_cqes: u64,
    /// Receive: completions that arrived as mini-CQEs of a compressed session (also counted
    /// in `cqes`; see `PortConfig::rx_cqe_compression`).
    pub compressed_cqes: u64,
    /// Buffers given back to the pool by recovery without carrying a packet (send: also
    /// counted in `errors`).
    pub flushed: u64,
    /// Times the queue was recovered ([`crate::Port::recover_tx`] / `recover_rx`).
    pub recoveries: u64,
    /// Syndrome of the last error CQE (0 when none: 0x04 local protection, 0x05 flushed,
    /// 0x01 local length; the mlx5 error CQE's `syndrome` byte).
    pub last_error_syndrome: u8,
}

/// How far destroying and re-creating a queue and its failed CQ has got, so that a recovery
/// that failed partway resumes where it stopped instead of starting over.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Rebuild {
    /// Not being rebuilt.
    #[default]
    Idle,
    /// The work queue is destroyed and its buffers flushed; the failed CQ still exists.
    QueueDestroyed,
    /// The failed CQ is destroyed too.
    CqDestroyed,
    /// The new CQ exists; the work queue is to be created on it.
    CqCreated,
    /// Receive only: the new RQ exists; the port's steering is to be built around it.
    QueueCreated,
}

/// The published copy of one queue's counters.
#[derive(Debug, Default)]
pub(crate) struct SharedQueueStats {
    packets: AtomicU64,
    bytes: AtomicU64,
    errors: AtomicU64,
    nombuf: AtomicU64,
    doorbells: AtomicU64,
    blueflame: AtomicU64,
    inline_packets: AtomicU64,
    multi_packet_wqes: AtomicU64,
    cqes: AtomicU64,
    bad_cqes: AtomicU64,
    compressed_cqes: AtomicU64,
    flushed: AtomicU64,
    recoveries: AtomicU64,
    last_error_syndrome: std::sync::atomic::AtomicU8,
}

/// Shared handle the queue publishes into and the port reads from.
pub(crate) type StatsHandle = Arc<SharedQueueStats>;

impl SharedQueueStats {
    /// Stores the queue's current counters (called by the queue's owner only).
    #[inline]
    pub(crate) fn publish(&self, s: &QueueStats) {
        self.packets.store(s.packets, Relaxed);
        self.bytes.store(s.bytes, Relaxed);
        self.errors.store(s.errors, Relaxed);
        self.nombuf.store(s.nombuf, Relaxed);
        self.doorbells.store(s.doorbells, Relaxed);
        self.blueflame.store(s.blueflame, Relaxed);
        self.inline_packets.store(s.inline_packets, Relaxed);
        self.multi_packet_wqes.store(s.multi_packet_wqes, Relaxed);
        self.cqes.store(s.cqes, Relaxed);
        self.bad_cqes.store(s.bad_cqes, Relaxed);
        self.compressed_cqes.store(s.compressed_cqes, Relaxed);
        self.flushed.store(s.flushed, Relaxed);
        self.recoveries.store(s.recoveries, Relaxed);
        self.last_error_syndrome
            .store(s.last_error_syndrome, Relaxed);
    }

    /// The counters as last published (each field as of some burst end; fields may be from
    /// adjacent bursts).
    pub(crate) fn read(&self) -> QueueStats {
        QueueStats {
            packets: self.packets.load(Relaxed),
            bytes: self.bytes.load(Relaxed),
            errors: self.errors.load(Relaxed),
            nombuf: self.nombuf.load(Relaxed),
            doorbells: self.doorbells.load(Relaxed),
            blueflame: self.blueflame.load(Relaxed),
            inline_packets: self.inline_packets.load(Relaxed),
            multi_packet_wqes: self.multi_packet_wqes.load(Relaxed),
            cqes: self.cqes.load(Relaxed),
            bad_cqes: self.bad_cqes.load(Relaxed),
            compressed_cqes: self.compressed_cqes.load(Relaxed),
            flushed: self.flushed.load(Relaxed),
            recoveries: self.recoveries.load(Relaxed),
            last_error_syndrome: self.last_error_syndrome.load(Relaxed),
        }
    }
}
