//! krping's receives from a shared receive queue kept deliberately shallow: filled once, armed
//! with a limit, and refilled and re-armed only once the limit event has arrived. The event is
//! looked for on the async event vector's eventfd while the side waits for its peer, and waited
//! for on that eventfd when a receive is needed and none is left posted.
//!
//! The refill waits for the next receive the protocol needs: then every message that arrived
//! has been polled and none is in flight, so what the side counts as posted is what the device
//! holds. Refilled any earlier (when the event is seen), a receive the device had taken but
//! whose completion was not yet polled would be counted as posted, and the limit re-armed above
//! a queue already below it, where no event comes.

use crate::rdma::verbs::{RdmaBuffer, RdmaPort};
use crate::rdma::BUFFER_INFO_LEN;
use cxdirect::rdma::{RecvRequest, SharedReceiveQueue, SrqCaps};
use cxdirect::{Backend, Device, Event};
use std::fmt;
use std::time::{Duration, Instant};

/// The default `--srq`: receives the shared receive queue holds when full.
pub const DEFAULT_DEPTH: u32 = 16;
/// The largest `--srq`.
pub const MAX_DEPTH: u32 = 1024;
/// How long one wait on the eventfd lasts before the event queue is looked at anyway.
const WAIT_SLICE: Duration = Duration::from_millis(50);

/// The limit armed on an SRQ of `depth` receives: a quarter of it, at least 1, so that the
/// event comes while receives are still posted.
pub fn limit_for(depth: u32) -> u32 {
    (depth / 4).max(1)
}

/// What a side's shared receive queue went through.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SrqStats {
    /// Receives the SRQ holds when full.
    pub depth: u32,
    /// The limit armed each time.
    pub limit: u32,
    /// Limit events taken.
    pub limit_events: u64,
    /// Receives posted after the first fill.
    pub refilled: u64,
    /// Interrupts taken from the async event vector's eventfd.
    pub interrupts: u64,
    /// Times a receive was needed with none posted, and the side slept on the eventfd.
    pub dry_waits: u64,
}

impl fmt::Display for SrqStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "srq: depth={} limit={} limit_events={} refilled={} interrupts={} dry_waits={}",
            self.depth,
            self.limit,
            self.limit_events,
            self.refilled,
            self.interrupts,
            self.dry_waits
        )
    }
}

/// A side's shared receive queue and the receive slots of [`BUFFER_INFO_LEN`] bytes its
/// receives land in (slot `wr_id % depth`).
pub struct SrqReceives<B: Backend> {
    srq: SharedReceiveQueue<B>,
    slots: RdmaBuffer,
    /// Receives ever posted; the next one's work request id.
    posted: u64,
    /// Receive completions taken.
    taken: u64,
    /// Whether the limit is armed and its event not yet taken (a refill is due when not).
    armed: bool,
    stats: SrqStats,
}

impl<B: Backend> SrqReceives<B> {
    /// Creates an SRQ of `depth` receives (1..=[`MAX_DEPTH`]) on `port` with its slots, fills it
    /// and arms its limit.
    pub fn create(port: &mut RdmaPort<B>, depth: u32) -> Result<Self, String> {
        let name = port.name().to_string();
        if !(1..=MAX_DEPTH).contains(&depth) {
            return Err(format!(
                "{name}: an SRQ of {depth} receives: give 1 to {MAX_DEPTH}"
            ));
        }
        let slots = port.buffer(
            crate::rdma::MemoryKind::Host,
            depth as usize * BUFFER_INFO_LEN,
            cxdirect::control::KeyAccess::READ_WRITE,
        )?;
        let srq = SharedReceiveQueue::create(
            &mut port.dev,
            &port.pd,
            SrqCaps {
                max_wr: depth,
                max_sge: 1,
            },
        )
        .map_err(|e| format!("{name}: shared receive queue: {e}"))?;
        let mut receives = Self {
            srq,
            slots,
            posted: 0,
            taken: 0,
            armed: false,
            stats: SrqStats {
                depth,
                limit: limit_for(depth),
                ..SrqStats::default()
            },
        };
        receives.refill_and_arm(&mut port.dev)?;
        receives.stats.refilled = 0;
        Ok(receives)
    }

    /// The SRQ, for the queue pair that receives from it.
    pub fn srq(&self) -> &SharedReceiveQueue<B> {
        &self.srq
    }

    /// What it went through so far.
    pub fn stats(&self) -> SrqStats {
        self.stats
    }

    /// Receives posted whose completion has not been taken.
    fn outstanding(&self) -> u64 {
        self.posted - self.taken
    }

    /// Posts receives until the SRQ is full again, then arms the limit.
    fn refill_and_arm(&mut self, dev: &mut Device<B>) -> Result<(), String> {
        let depth = u64::from(self.stats.depth);
        let first = self.posted;
        let count = depth - self.outstanding();
        let sges: Vec<_> = (first..first + count)
            .map(|id| {
                [self.slots.mr.sge(
                    (id % depth) * BUFFER_INFO_LEN as u64,
                    BUFFER_INFO_LEN as u32,
                )]
            })
            .collect();
        let wrs: Vec<_> = sges
            .iter()
            .zip(first..)
            .map(|(sg_list, wr_id)| RecvRequest { wr_id, sg_list })
            .collect();
        self.srq
            .post_recv(&wrs)
            .map_err(|e| format!("refilling the SRQ: {e}"))?;
        self.posted += count;
        self.stats.refilled += count;
        self.srq
            .arm_limit(dev, self.stats.limit)
            .map_err(|e| format!("arming the SRQ's limit: {e}"))?;
        self.armed = true;
        Ok(())
    }

    /// Takes the receive completion of work request `wr_id` and copies its first `out.len()`
    /// bytes (at most [`BUFFER_INFO_LEN`]) into `out`. An id that names no receive
    /// outstanding is refused.
    pub fn take(&mut self, wr_id: u64, out: &mut [u8]) -> Result<(), String> {
        if wr_id < self.taken || wr_id >= self.posted {
            return Err(format!(
                "a receive completion for work request {wr_id}, not one of {}..{} posted",
                self.taken, self.posted
            ));
        }
        self.taken += 1;
        let slot = wr_id % u64::from(self.stats.depth);
        let len = out.len().min(BUFFER_INFO_LEN);
        self.slots
            .load(slot as usize * BUFFER_INFO_LEN, &mut out[..len])
    }

    /// While the side waits for its peer: takes the event vector's interrupt if it fired (or
    /// the events a command took meanwhile) and handles the events.
    pub fn look(&mut self, dev: &mut Device<B>, qpn: u32) -> Result<(), String> {
        let fired = dev.wait_event(Duration::ZERO);
        self.stats.interrupts += fired;
        if fired > 0 || dev.events_pending() {
            self.handle_events(dev, qpn)?;
        }
        Ok(())
    }

    /// Before a message is expected (every message that arrived polled, none in flight):
    /// refills the SRQ and re-arms its limit when the limit event came; with none posted and the
    /// event not yet seen, first sleeps on the eventfd until it comes (the SRQ fell below its
    /// limit, so it must), for at most `patience`.
    pub fn ensure_posted(
        &mut self,
        dev: &mut Device<B>,
        qpn: u32,
        patience: Duration,
    ) -> Result<(), String> {
        if self.armed && self.outstanding() == 0 {
            self.wait_for_limit(dev, qpn, patience)?;
        }
        if !self.armed {
            self.refill_and_arm(dev)?;
        }
        Ok(())
    }

    fn wait_for_limit(
        &mut self,
        dev: &mut Device<B>,
        qpn: u32,
        patience: Duration,
    ) -> Result<(), String> {
        self.stats.dry_waits += 1;
        let began = Instant::now();
        while self.armed {
            if began.elapsed() > patience {
                return Err(format!(
                    "the SRQ is empty and no limit event came in {patience:?}"
                ));
            }
            if !dev.events_pending() {
                self.stats.interrupts += dev.wait_event(WAIT_SLICE);
            }
            // The event queue is read even without an interrupt: one a command took was
            // consumed with it.
            self.handle_events(dev, qpn)?;
        }
        Ok(())
    }

    /// Handles the async events: the SRQ's limit event makes a refill due; an error event for
    /// queue pair `qpn` ends the run.
    fn handle_events(&mut self, dev: &mut Device<B>, qpn: u32) -> Result<(), String> {
        // Handling may run commands, which may take further events off the queue.
        loop {
            let events = dev.poll_events().map_err(|e| format!("events: {e}"))?;
            for event in events {
                match event {
                    Event::SrqLimit { srq } if srq == self.srq.srqn() => {
                        self.stats.limit_events += 1;
                        self.armed = false;
                    }
                    Event::QueueError { kind, number } if number == qpn => {
                        return Err(format!("queue pair {qpn:#x}: async error {kind:?}"));
                    }
                    _ => {}
                }
            }
            if !dev.events_pending() {
                return Ok(());
            }
        }
    }

    /// Destroys the SRQ (after its queue pairs) and deregisters its slots.
    pub fn destroy(self, dev: &mut Device<B>) -> Result<(), String> {
        let destroyed = self
            .srq
            .destroy(dev)
            .map(|_| ())
            .map_err(|e| format!("shared receive queue: {e}"));
        let deregistered = self
            .slots
            .mr
            .deregister(dev)
            .map_err(|e| format!("SRQ slots: {e}"));
        destroyed.and(deregistered)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_is_a_quarter_of_the_depth_and_at_least_one() {
        assert_eq!(limit_for(16), 4);
        assert_eq!(limit_for(1024), 256);
        assert_eq!(limit_for(7), 1);
        assert_eq!(limit_for(1), 1);
    }

    #[test]
    fn the_stats_line() {
        let s = SrqStats {
            depth: 16,
            limit: 4,
            limit_events: 3,
            refilled: 39,
            interrupts: 5,
            dry_waits: 1,
        };
        assert_eq!(
            s.to_string(),
            "srq: depth=16 limit=4 limit_events=3 refilled=39 interrupts=5 dry_waits=1"
        );
    }
}
