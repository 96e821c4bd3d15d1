//! What the device may still touch after a queue handle is dropped.

use super::mbuf::Mbuf;
use cxdirect_dma::DmaRegion;
use std::sync::{Arc, Mutex};

/// What the device may still touch when a queue handle is dropped early (its buffers, its ring,
/// its CQ and their doorbell records): kept until the port has destroyed the hardware queue or
/// the function was reset.
pub(crate) type Quarantine = Arc<Mutex<Quarantined>>;

/// The contents of a [`Quarantine`].
#[derive(Default)]
pub(crate) struct Quarantined {
    buffers: Vec<Mbuf>,
    rings: Vec<DmaRegion>,
}

impl Quarantined {
    /// Keeps `buffers`, a queue's ring and doorbell record (`rings`), and `cq_memory` (its
    /// CQ's, see [`crate::cq::CqRing::take_memory`]).
    pub(crate) fn keep(
        &mut self,
        buffers: impl Iterator<Item = Mbuf>,
        rings: [DmaRegion; 2],
        cq_memory: [DmaRegion; 2],
    ) {
        self.buffers.extend(buffers);
        self.keep_cq(cq_memory);
        self.rings.extend(rings);
    }

    /// Keeps a CQ's ring and doorbell record (see [`crate::cq::CqRing::take_memory`]).
    pub(crate) fn keep_cq(&mut self, cq_memory: [DmaRegion; 2]) {
        self.rings.extend(cq_memory);
    }

    /// Lets everything go (the device reaches none of it any more); returns how many buffers
    /// went back to the pool.
    pub(crate) fn release(&mut self) -> usize {
        let buffers = self.buffers.len();
        self.buffers.clear();
        self.rings.clear();
        buffers
    }
}
