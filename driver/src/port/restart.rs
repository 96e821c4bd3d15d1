//! The state of a shared receive ring's restart ([`super::Port::restart_shared_ring`]): how
//! far an unfinished one has got, and what a finished one did.

use cxdirect_hw::wq::RmpState;
use std::time::{Duration, Instant};

/// What creating a shared ring again ([`crate::Port::restart_shared_ring`]) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedRingRestart {
    /// Buffers returned to the pool without carrying a packet: those the queues' leftover
    /// completions named and those still posted.
    pub flushed: usize,
    /// Completions taken off the queues' CQs without being delivered.
    pub drained_cqes: usize,
    /// The state the device had the old ring in (error after a failure, ready otherwise).
    pub device_state: RmpState,
    /// Wall time from the first command to the new ring being posted and steered to.
    pub took: Duration,
}

/// How far an unfinished [`Port::restart_shared_ring`] has got.
pub(crate) struct SharedRestart {
    /// Each queue's place in the port's RQ list, by the queue's CQ number.
    pub(super) places: Vec<(u32, usize)>,
    pub(super) stage: RestartStage,
    pub(super) device_state: RmpState,
    pub(super) flushed: usize,
    pub(super) drained_cqes: usize,
    pub(super) started: Instant,
}

impl SharedRestart {
    pub(super) fn place_of(&self, cqn: u32) -> Option<usize> {
        self.places
            .iter()
            .find(|&&(c, _)| c == cqn)
            .map(|&(_, at)| at)
    }

    /// True when the old RMP is destroyed (and its buffers flushed) and no new one exists.
    pub(crate) fn rmp_destroyed(&self) -> bool {
        self.stage == RestartStage::RmpDestroyed
    }
}

/// The steps of a shared-ring restart, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RestartStage {
    /// Steering is down; the queues' RQs are being destroyed, then the RMP.
    TearingDown,
    /// The old RMP is destroyed and its buffers are back in the pool; a new one is next.
    RmpDestroyed,
    /// The new RMP exists; the queues' RQs are being created on it.
    CreatingQueues,
    /// The queues receive from the new ring; steering is being built around them.
    Steering,
}
