//! A send queue's recovery: its completions drained, its buffers flushed, its SQ and CQ
//! created again over the same ring, and the ring started again at index 0.

use super::template::SendTemplate;
use super::TxQueue;
use crate::backend::Backend;
use crate::cq::CqRing;
use crate::ring::Rebuild;
use cxdirect_dma::DmaRegion;

impl<B: Backend> TxQueue<B> {
    /// Recovery: takes every completion left on the CQ without acting on it (the ring is being
    /// reset and its buffers flushed); returns how many.
    pub(crate) fn drain_completions(&mut self) -> usize {
        self.cq.drain()
    }

    /// Recovery, once the device can no longer read the ring: every in-flight buffer goes back
    /// to its pool; returns how many.
    pub(crate) fn flush_in_flight(&mut self) -> usize {
        let flushed = self.inflight.take_all().len();
        self.stats.errors += flushed as u64;
        self.stats.flushed += flushed as u64;
        self.published.publish(&self.stats);
        flushed
    }

    /// Stops sending until [`TxQueue::restart`] (the device is about to have the SQ in RST).
    pub(crate) fn stop(&mut self) {
        self.in_error = true;
    }

    /// Recovery: how far a rebuild of the SQ and its CQ has got.
    pub(crate) fn rebuild_stage(&self) -> Rebuild {
        self.rebuild
    }

    /// Recovery: records how far a rebuild has got.
    pub(crate) fn set_rebuild_stage(&mut self, stage: Rebuild) {
        self.rebuild = stage;
    }

    /// Recovery: the CQ, with the rebuild stage its re-creation advances.
    pub(crate) fn cq_for_rebuild(&mut self) -> (&mut CqRing, &mut Rebuild) {
        (&mut self.cq, &mut self.rebuild)
    }

    /// True when the CQ lost its place ([`CqRing::lost_place`]): only a new CQ helps.
    pub(crate) fn cq_lost_place(&self) -> bool {
        self.cq.lost_place()
    }

    /// The UAR page the SQ rings its doorbell through.
    pub(crate) fn uar(&self) -> u32 {
        self.uar
    }

    /// The ring, its doorbell record and its log2 size in WQEBBs: what an SQ is created over.
    pub(crate) fn ring_memory(&self) -> (&DmaRegion, &DmaRegion, u8) {
        (self.ring.region(), self.dbr.region(), self.log_size)
    }

    /// Recovery: the SQ created again over the same ring.
    pub(crate) fn set_sqn(&mut self, sqn: u32) {
        self.sqn = sqn;
        self.template = SendTemplate::new(sqn);
    }

    /// Recovery: the ring starts again at index 0, as the device does after RST.
    pub(crate) fn restart(&mut self) {
        self.pi = 0;
        self.ci = 0;
        self.since_cqe = 0;
        self.dbr.set(1, 0);
        self.in_error = false;
        self.stats.recoveries += 1;
        self.published.publish(&self.stats);
    }
}
