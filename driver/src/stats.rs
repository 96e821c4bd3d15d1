//! Port statistics as DPDK reports them (ipackets, opackets, ibytes, obytes, imissed, ierrors,
//! oerrors, rx_nombuf) and per-queue extended statistics. Each queue keeps plain counters on its
//! own thread and publishes a copy into a shared block at the end of every burst (relaxed
//! stores, no lock), so the port can read them while the queues run elsewhere.

use crate::queue::QueueStats;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

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

/// A port's basic statistics, summed over its queues (as of each queue's last burst).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Packets received.
    pub ipackets: u64,
    /// Packets sent.
    pub opackets: u64,
    /// Bytes received (frame bytes, without the FCS).
    pub ibytes: u64,
    /// Bytes sent.
    pub obytes: u64,
    /// Frames the device dropped because a receive ring had no posted buffer (from the port's
    /// Q counter set; 0 when the device has none).
    pub imissed: u64,
    /// Receive completions with an error, or with values the driver refused.
    pub ierrors: u64,
    /// Packets the send side refused or the device completed with an error.
    pub oerrors: u64,
    /// Times a receive refill found the pool empty.
    pub rx_nombuf: u64,
}

impl PortStats {
    /// Sums per-queue counters; `imissed` (a device counter) is left at 0.
    pub fn from_xstats(x: &QueueXstats) -> Self {
        let mut p = PortStats::default();
        for q in &x.tx {
            p.opackets += q.packets;
            p.obytes += q.bytes;
            p.oerrors += q.errors;
        }
        for q in &x.rx {
            p.ipackets += q.packets;
            p.ibytes += q.bytes;
            p.ierrors += q.errors + q.bad_cqes;
            p.rx_nombuf += q.nombuf;
        }
        p
    }
}

/// Per-queue extended statistics, in queue order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueXstats {
    /// Send queues.
    pub tx: Vec<QueueStats>,
    /// Receive queues.
    pub rx: Vec<QueueStats>,
}
