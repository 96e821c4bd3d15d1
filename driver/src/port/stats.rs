//! Port statistics as DPDK reports them (ipackets, opackets, ibytes, obytes, imissed, ierrors,
//! oerrors, rx_nombuf) and per-queue extended statistics. Each queue keeps plain counters on its
//! own thread and publishes a copy into a shared block at the end of every burst (relaxed
//! stores, no lock), so the port can read them while the queues run elsewhere.

use crate::ring::QueueStats;

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
