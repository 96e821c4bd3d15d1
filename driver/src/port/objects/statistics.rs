//! A port's statistics: the queues' counters as of their last bursts, and the device's drop
//! counter read through the port's Q counter set.

use super::Port;
use crate::backend::Backend;
use crate::error::DriverError;
use crate::port::stats::{PortStats, QueueXstats};

impl<B: Backend> Port<B> {
    /// Frames the device dropped since the port started because a receive ring had no posted
    /// buffer (DPDK's `imissed`), summed over every receive queue; `None` when the device has no
    /// Q counter sets. One firmware command per call: read it from the control path (at least
    /// once per 2^32 drops), not per burst.
    pub fn rx_missed(&mut self) -> Result<Option<u64>, DriverError> {
        match self.q_counter.as_mut() {
            Some(set) => set.out_of_buffer(&mut self.dev).map(Some),
            None => Ok(None),
        }
    }

    /// The port's statistics: every queue's counters as of its last burst, and `imissed` read
    /// from the device (one firmware command; call it from the control path, not per burst).
    pub fn stats(&mut self) -> Result<PortStats, DriverError> {
        let mut stats = PortStats::from_xstats(&self.xstats());
        stats.imissed = self.rx_missed()?.unwrap_or(0);
        Ok(stats)
    }

    /// Per-queue extended statistics (doorbells, BlueFlame writes, inline packets, CQEs, ...)
    /// as of each queue's last burst. Needs no device access.
    pub fn xstats(&self) -> QueueXstats {
        QueueXstats {
            tx: self.tx_stats.iter().map(|s| s.read()).collect(),
            rx: self.rx_stats.iter().map(|s| s.read()).collect(),
        }
    }
}
