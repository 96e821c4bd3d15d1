//! What every queue ring shares: the burst bound, index and word helpers, the ring and
//! doorbell record handles every write goes through, per-queue counters and the state of a
//! rebuild.

use crate::error::DriverError;
use cxdirect_dma::DmaRegion;
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

/// The word whose first four bytes (memory order) are `first` and last four `second`, both
/// big-endian, as the device reads WQE fields: two fields composed in a register, for one
/// word store.
#[inline(always)]
pub(crate) fn be_word(first: u32, second: u32) -> u64 {
    let (a, b) = (first.to_be_bytes(), second.to_be_bytes());
    u64::from_ne_bytes([a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]])
}

/// `value` as a big-endian 64-bit field, as a word in memory order.
#[inline(always)]
pub(crate) fn be_u64(value: u64) -> u64 {
    u64::from_ne_bytes(value.to_be_bytes())
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
    /// Buffers given back to the pool without carrying a packet: flushed by the device after a
    /// failed send (`flush_in_error_en`) or by recovery (send: also counted in `errors`).
    pub flushed: u64,
    /// Times the queue was recovered ([`crate::Port::recover_tx`] / `recover_rx`).
    pub recoveries: u64,
    /// Syndrome of the last error CQE (0 when none: 0x04 local protection, 0x05 flushed,
    /// 0x01 local length; the mlx5 error CQE's `syndrome` byte).
    pub last_error_syndrome: u8,
    /// Send: packets sent with TCP segmentation offload (one LSO WQE each; counted once in
    /// `packets`, and by their bytes as handed over in `bytes`).
    pub tso_packets: u64,
    /// Send: why the last refused packet was refused (counted in `errors`), when one was.
    pub last_refusal: Option<crate::tx::TxRefusal>,
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
    tso_packets: AtomicU64,
    /// [`QueueStats::last_refusal`] as [`crate::tx::TxRefusal::code`] (0: none).
    last_refusal: std::sync::atomic::AtomicU8,
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
        self.tso_packets.store(s.tso_packets, Relaxed);
        self.last_refusal
            .store(s.last_refusal.map_or(0, |r| r.code()), Relaxed);
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
            tso_packets: self.tso_packets.load(Relaxed),
            last_refusal: crate::tx::TxRefusal::from_code(self.last_refusal.load(Relaxed)),
        }
    }
}

/// A queue's ring in DMA memory: `2^log_size` slots of `SLOT` bytes each (a power of two, at
/// least 8). It is built only over a region that holds every slot, and it masks every index it
/// is given, so an access within one slot is in bounds and aligned by construction and cannot
/// fail. (The region refuses accesses only once a dropped queue handed it to its quarantine;
/// that queue touches its ring no more.)
pub(crate) struct SlotRing<const SLOT: usize> {
    region: DmaRegion,
    /// Slots less one.
    mask: u32,
}

impl<const SLOT: usize> SlotRing<SLOT> {
    /// The ring of `2^log_size` slots over `region`.
    ///
    /// # Errors
    ///
    /// [`DriverError::Internal`] when `region` cannot hold every slot.
    pub(crate) fn new(region: DmaRegion, log_size: u8) -> Result<Self, DriverError> {
        const { assert!(SLOT.is_power_of_two() && SLOT >= 8) };
        if log_size >= 24 || (SLOT << log_size) > region.len() {
            return Err(DriverError::Internal(
                "a ring's slots do not fit the memory allocated for them",
            ));
        }
        Ok(Self {
            region,
            mask: (1u32 << log_size) - 1,
        })
    }

    /// The ring's memory, for the commands that create its queue and for reads that check
    /// what the device wrote.
    #[inline(always)]
    pub(crate) fn region(&self) -> &DmaRegion {
        &self.region
    }

    /// The ring's memory, leaving the ring empty: for a quarantine to keep while the device
    /// may still use it.
    pub(crate) fn take_region(&mut self) -> DmaRegion {
        self.region.take()
    }

    /// Where slot `index` (masked) starts in the region.
    #[inline(always)]
    pub(crate) fn offset(&self, index: u32) -> usize {
        (index & self.mask) as usize * SLOT
    }

    /// Writes `words` at the start of slot `index` (masked); `words` fits one slot.
    #[inline(always)]
    pub(crate) fn write_words<const N: usize>(&self, index: u32, words: &[u64; N]) {
        const { assert!(N * 8 <= SLOT) };
        let written = self.region.write_words(self.offset(index), words);
        debug_assert!(written.is_ok(), "a slot write left its ring: {written:?}");
    }

    /// Writes `bytes` at byte `at` of slot `index` (masked); they end within the slot.
    #[inline(always)]
    pub(crate) fn write_bytes(&self, index: u32, at: usize, bytes: &[u8]) {
        debug_assert!(at + bytes.len() <= SLOT, "a write spans slots");
        let written = self.region.write(self.offset(index) + at, bytes);
        debug_assert!(written.is_ok(), "a slot write left its ring: {written:?}");
    }

    /// Writes `byte` at byte `at` of `count` consecutive slots from `first` (masked), which do
    /// not wrap past the ring's end.
    #[inline]
    pub(crate) fn write_byte_each(&self, first: u32, at: usize, count: u32, byte: u8) {
        debug_assert!(
            (first & self.mask) + count <= self.mask + 1,
            "the slots wrap"
        );
        debug_assert!(at < SLOT, "the byte lies past its slot");
        let written =
            self.region
                .write_byte_strided(self.offset(first) + at, SLOT, count as usize, byte);
        debug_assert!(written.is_ok(), "a slot write left its ring: {written:?}");
    }

    /// Copies bytes from byte `at` of slot `index` (masked) into `out`; they end within the
    /// slot.
    #[inline(always)]
    pub(crate) fn read_bytes(&self, index: u32, at: usize, out: &mut [u8]) {
        debug_assert!(at + out.len() <= SLOT, "a read spans slots");
        let read = self.region.read(self.offset(index) + at, out);
        debug_assert!(read.is_ok(), "a slot read left its ring: {read:?}");
    }

    /// The first `N` words of slot `index` (masked).
    #[inline(always)]
    pub(crate) fn read_words<const N: usize>(&self, index: u32) -> [u64; N] {
        const { assert!(N * 8 <= SLOT) };
        // In bounds by construction; zeros only from a quarantined ring, which nothing reads.
        self.region.read_words(self.offset(index)).unwrap_or([0; N])
    }
}

/// A queue's doorbell record: two big-endian 32-bit words in DMA memory that the device reads
/// (a receive queue's counter in word 0, a send queue's in word 1; a CQ's consumer index in
/// word 0 and its arm word in word 1). Built only over at least 8 bytes, and the word number is
/// masked, so setting a word cannot fail.
pub(crate) struct DoorbellRecord {
    region: DmaRegion,
}

impl DoorbellRecord {
    /// The record at the start of `region`.
    ///
    /// # Errors
    ///
    /// [`DriverError::Internal`] when `region` is shorter than the record.
    pub(crate) fn new(region: DmaRegion) -> Result<Self, DriverError> {
        if region.len() < 8 {
            return Err(DriverError::Internal(
                "a doorbell record does not fit the memory allocated for it",
            ));
        }
        Ok(Self { region })
    }

    /// The record's memory, for the commands that name its address.
    pub(crate) fn region(&self) -> &DmaRegion {
        &self.region
    }

    /// The record's memory, leaving the record empty: for a quarantine to keep.
    pub(crate) fn take_region(&mut self) -> DmaRegion {
        self.region.take()
    }

    /// Word `word` (0 or 1) as the device reads it (big-endian), for tests that check what
    /// the driver told the device.
    #[cfg(test)]
    pub(crate) fn word(&self, word: usize) -> u32 {
        self.region
            .read_u32_be((word & 1) * 4)
            .expect("a doorbell record word")
    }

    /// Sets word `word` (0 or 1) to `value`, big-endian, with one store.
    #[inline(always)]
    pub(crate) fn set(&self, word: usize, value: u32) {
        let written = self.region.write_u32_be((word & 1) * 4, value);
        debug_assert!(
            written.is_ok(),
            "a doorbell record write failed: {written:?}"
        );
    }
}
