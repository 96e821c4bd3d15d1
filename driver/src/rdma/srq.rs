//! Shared receive queues: a linked-list RMP (what Linux creates for a basic SRQ), shared by
//! any number of queue pairs, with a one-shot low-watermark event.
//!
//! Each WQE starts with a next segment naming the WQE after it. The free list runs from
//! `head` (the next WQE to fill) to `tail`, a WQE that is never posted; the device follows
//! the list from WQE 0 through the WQEs posted. A completed WQE comes back through the
//! completion queue's tracker and is linked in at the tail by the next `post_recv`, as
//! rdma-core's `mlx5_free_srq_wqe` does under its lock.

use std::sync::Arc;

use super::pd::ProtectionDomain;
use super::track::SrqTrack;
use super::wr::{write_scatter, RecvRequest};
use crate::backend::barrier::dma_wmb;
use crate::backend::Backend;
use crate::control::{destroy_input, input, output_too_short, Device};
use crate::error::DriverError;
use crate::ring::{DoorbellRecord, SlotRing};
use cxdirect_dma::{DmaRegion, PageKind};
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::wq::{CreateRmpIn, CreateRmpOut, ModifyRmpIn, RmpState, WqType};
use cxdirect_hw::wqe::WQE_DS;

/// Most scatter entries an SRQ WQE takes (with its next segment, a 512-byte stride).
const MAX_SGE: u32 = 31;

/// Sizes of a shared receive queue (`ibv_srq_attr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SrqCaps {
    /// Receives posted at once (1 or more; the ring holds the next power of two above).
    pub max_wr: u32,
    /// Scatter entries per receive (1 to 31).
    pub max_sge: u32,
}

impl Default for SrqCaps {
    fn default() -> Self {
        Self {
            max_wr: 255,
            max_sge: 1,
        }
    }
}

/// A shared receive queue (`ibv_srq`).
pub struct SharedReceiveQueue<B: Backend> {
    rmpn: u32,
    ring: SlotRing<WQE_DS>,
    dbr: DoorbellRecord,
    track: Arc<SrqTrack>,
    /// The next index of each WQE, as written into its next segment.
    next: Box<[u16]>,
    head: u16,
    tail: u16,
    /// WQEs that may be posted now (the free list less its tail).
    free: u32,
    /// WQEs ever posted (the doorbell record's counter).
    counter: u32,
    segs: u32,
    caps: SrqCaps,
    destroyed: bool,
    _backend: std::marker::PhantomData<B>,
}

impl<B: Backend> std::fmt::Debug for SharedReceiveQueue<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedReceiveQueue")
            .field("srqn", &self.rmpn)
            .field("free", &self.free)
            .finish()
    }
}

impl<B: Backend> SharedReceiveQueue<B> {
    /// CREATE_RMP (linked list, ready) in `pd`; its limit events are reported by
    /// [`Device::poll_events`] as [`crate::Event::SrqLimit`].
    ///
    /// # Errors
    ///
    /// [`DriverError::Config`] for sizes out of range; [`DriverError::Command`] when the
    /// device refuses.
    pub fn create(
        dev: &mut Device<B>,
        pd: &ProtectionDomain,
        caps: SrqCaps,
    ) -> Result<Self, DriverError> {
        if !(1..=MAX_SGE).contains(&caps.max_sge) {
            return Err(DriverError::config(
                "max_sge",
                caps.max_sge,
                format!("1 to {MAX_SGE}"),
            ));
        }
        // A device that reports no SRQ size limit is held to 2^15 WQEs.
        let log_max = match dev.caps().log_max_srq_sz() {
            0 => 15,
            log => log.min(15),
        };
        let entries = (caps.max_wr.max(1) + 1).next_power_of_two();
        if caps.max_wr == 0 || entries > 1 << log_max {
            return Err(DriverError::config(
                "max_wr",
                caps.max_wr,
                format!("1 to 2^{log_max} - 1"),
            ));
        }
        let segs = (caps.max_sge + 1).next_power_of_two();
        let stride = WQE_DS * segs as usize;
        let (iommu, iovas) = dev.dma();
        let bytes = (stride * entries as usize).max(4096);
        let region = DmaRegion::new(iommu.clone(), &iovas, bytes, PageKind::Small)?;
        let dbr = DmaRegion::new(iommu, &iovas, 64, PageKind::Small)?;
        let ring = SlotRing::new(region, (entries * segs).trailing_zeros() as u8)?;
        let next: Box<[u16]> = (0..entries).map(|i| ((i + 1) % entries) as u16).collect();
        for (i, &n) in next.iter().enumerate() {
            ring.write_bytes(i as u32 * segs, 0, &next_segment(n));
        }
        let page = ring.region().page_size();
        let pages = ring.region().len().div_ceil(page);
        let mut cmd = input(Opcode::CreateRmp, 0, CreateRmpIn::<&[u8]>::SIZE + 8 * pages);
        {
            let mut c = CreateRmpIn::new(&mut cmd[..])
                .map_err(|_| DriverError::layout(Opcode::CreateRmp, "input"))?;
            let mut ctx = c.ctx_mut();
            ctx.set_state(RmpState::Rdy as u8);
            ctx.wq_mut()
                .set_wq_type(WqType::LinkedList as u8)
                .set_pd(pd.pdn())
                .set_dbr_addr(dbr.iova())
                .set_log_wq_stride(stride.trailing_zeros() as u8)
                .set_log_wq_pg_sz((page.trailing_zeros() - 12) as u8)
                .set_log_wq_sz(entries.trailing_zeros() as u8);
            for i in 0..pages {
                c.set_pas(i, ring.region().iova() + (i * page) as u64)
                    .map_err(|_| DriverError::layout(Opcode::CreateRmp, "pas"))?;
            }
        }
        let out = dev.exec(&cmd, CreateRmpOut::<&[u8]>::SIZE)?;
        let rmpn = CreateRmpOut::new(&out[..])
            .map_err(output_too_short)?
            .rmpn();
        dev.register_srq(rmpn, entries);
        Ok(Self {
            rmpn,
            ring,
            dbr: DoorbellRecord::new(dbr)?,
            track: Arc::new(SrqTrack::new(rmpn, entries)),
            next,
            head: 0,
            tail: (entries - 1) as u16,
            free: entries - 1,
            counter: 0,
            segs,
            caps,
            destroyed: false,
            _backend: std::marker::PhantomData,
        })
    }

    /// The SRQ (RMP) number.
    pub fn srqn(&self) -> u32 {
        self.rmpn
    }

    /// The sizes it was created with.
    pub fn caps(&self) -> SrqCaps {
        self.caps
    }

    /// Receives that may be posted now (after the completions polled so far).
    pub fn room(&mut self) -> u32 {
        self.link_returned();
        self.free
    }

    pub(super) fn track(&self) -> &Arc<SrqTrack> {
        &self.track
    }

    /// Links every WQE the pollers handed back in at the tail of the free list.
    #[inline]
    fn link_returned(&mut self) {
        while let Some(index) = self.track.next_returned() {
            let tail = self.tail;
            self.next[usize::from(tail)] = index;
            self.ring
                .write_bytes(u32::from(tail) * self.segs, 0, &next_segment(index));
            self.tail = index;
            self.free += 1;
        }
    }

    /// Posts `wrs`, in order, with one doorbell record update. Every request is checked
    /// first: on an error nothing is posted.
    ///
    /// # Errors
    ///
    /// [`DriverError::BadWorkRequest`] for more entries than `max_sge`;
    /// [`DriverError::QueueFull`] when fewer WQEs are free than asked.
    #[inline]
    pub fn post_recv(&mut self, wrs: &[RecvRequest<'_>]) -> Result<(), DriverError> {
        for (index, wr) in wrs.iter().enumerate() {
            if wr.sg_list.len() > self.caps.max_sge as usize {
                return Err(DriverError::BadWorkRequest {
                    index,
                    why: "more scatter entries than the SRQ's max_sge",
                });
            }
        }
        self.link_returned();
        if wrs.len() as u32 > self.free {
            let capacity = self.track.entries() - 1;
            return Err(DriverError::QueueFull {
                what: "the shared receive queue",
                outstanding: capacity - self.free,
                capacity,
                asked: wrs.len() as u32,
            });
        }
        for wr in wrs {
            let index = self.head;
            let first = u32::from(index) * self.segs + 1;
            let len = write_scatter(&self.ring, first, self.segs - 1, wr.sg_list);
            self.track.record(index, wr.wr_id, len);
            self.head = self.next[usize::from(index)];
            self.free -= 1;
            self.counter = self.counter.wrapping_add(1);
        }
        dma_wmb();
        self.dbr.set(0, self.counter);
        Ok(())
    }

    /// Arms the limit (MODIFY_RMP `lwm`): once fewer than `limit` receives are posted the
    /// device raises one [`crate::Event::SrqLimit`], and the limit reads 0 until armed again.
    /// `limit` is 1 to `max_wr`; 0 disarms.
    ///
    /// # Errors
    ///
    /// [`DriverError::Config`] for a limit past the queue; [`DriverError::Command`] when the
    /// device refuses.
    pub fn arm_limit(&mut self, dev: &mut Device<B>, limit: u32) -> Result<(), DriverError> {
        let capacity = self.track.entries() - 1;
        if limit > capacity {
            return Err(DriverError::config(
                "limit",
                limit,
                format!("0 to {capacity} (the SRQ's WQEs)"),
            ));
        }
        let mut cmd = input(Opcode::ModifyRmp, 0, ModifyRmpIn::<&[u8]>::SIZE);
        {
            let mut m = ModifyRmpIn::new(&mut cmd[..])
                .map_err(|_| DriverError::layout(Opcode::ModifyRmp, "input"))?;
            m.set_rmp_state(RmpState::Rdy as u8).set_rmpn(self.rmpn);
            m.bitmask_mut().set_lwm(true);
            let mut ctx = m.ctx_mut();
            ctx.set_state(RmpState::Rdy as u8);
            ctx.wq_mut().set_lwm(limit as u16);
        }
        dev.exec(&cmd, 16).map(|_| ())
    }

    /// DESTROY_RMP once no queue pair uses it; returns the work request ids of the receives
    /// still posted (their buffers are the caller's again).
    ///
    /// # Errors
    ///
    /// [`DriverError::Command`] when the device refuses (queue pairs still use it); the SRQ
    /// is then kept, to destroy again.
    pub fn destroy(mut self, dev: &mut Device<B>) -> Result<Vec<u64>, DriverError> {
        dev.exec(&destroy_input(Opcode::DestroyRmp, self.rmpn, 8), 16)?;
        self.destroyed = true;
        dev.unregister_shared_ring(self.rmpn);
        Ok(self.track.take_all_posted())
    }
}

impl<B: Backend> Drop for SharedReceiveQueue<B> {
    fn drop(&mut self) {
        if !self.destroyed {
            // The device may still read the ring and write through its WQEs' keys.
            self.ring.take_region().leak();
            self.dbr.take_region().leak();
        }
    }
}

/// A WQE's next segment naming WQE `next`.
fn next_segment(next: u16) -> [u8; WQE_DS] {
    let mut seg = [0u8; WQE_DS];
    seg[2..4].copy_from_slice(&next.to_be_bytes());
    seg
}
