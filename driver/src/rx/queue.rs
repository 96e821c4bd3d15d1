//! The receive queue: reads CQEs by owner bit and refills its ring in batches. Nothing here
//! allocates, locks or formats while receiving; every value the device writes (CQE owner,
//! opcode, WQE counter, byte count) is checked before use.

use super::irq::{self, CompletionInterrupt};
use super::sink::RxSink;
use super::striding::{StridingRx, WQE_BYTES};
use crate::backend::barrier::dma_wmb;
use crate::backend::Backend;
use crate::cq::{rx_flags, CqRing};
use crate::error::DriverError;
use crate::mem::{Mbuf, Mempool, OffloadFlags, Quarantine, HEADROOM};
use crate::ring::{
    be_u64, be_word, DoorbellRecord, QueueStats, Rebuild, SlotRing, StatsHandle, MAX_BURST,
};
use cxdirect_dma::DmaRegion;
use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::time::Duration;

mod strides;
#[cfg(test)]
mod tests;

/// Where a received packet's data starts in a plain (not striding) ring's buffer.
const HEADROOM_U32: u32 = HEADROOM as u32;

/// What [`RxQueue::receive_run`] took: packets accepted and their bytes.
#[derive(Default)]
struct RunTaken {
    accepted: usize,
    bytes: u64,
}

/// A receive ring slot with no buffer posted in it.
pub(crate) const EMPTY_SLOT: u32 = u32::MAX;

/// Takes every buffer posted in `slots` (indexes of `pool`) as an [`Mbuf`], leaving the slots
/// empty; dropping one returns it to the pool.
fn posted_buffers<'a>(slots: &'a mut [u32], pool: &'a Mempool) -> impl Iterator<Item = Mbuf> + 'a {
    slots
        .iter_mut()
        .map(|slot| std::mem::replace(slot, EMPTY_SLOT))
        .filter(|&index| index != EMPTY_SLOT)
        .map(|index| pool.adopt_posted(index))
}

/// A receive queue's ring: 16-byte WQEs of one buffer each, or a striding ring's larger ones.
enum RecvRing {
    Plain(SlotRing<16>),
    Striding(SlotRing<WQE_BYTES>),
}

impl RecvRing {
    /// The ring's memory.
    fn region(&self) -> &DmaRegion {
        match self {
            RecvRing::Plain(ring) => ring.region(),
            RecvRing::Striding(ring) => ring.region(),
        }
    }

    /// The ring's memory, leaving the ring empty: for the quarantine.
    fn take_region(&mut self) -> DmaRegion {
        match self {
            RecvRing::Plain(ring) => ring.take_region(),
            RecvRing::Striding(ring) => ring.take_region(),
        }
    }
}

/// What a port hands a new receive queue: the objects it created for it and the pool it
/// posts from.
pub(crate) struct ReceiveQueueParts<B: Backend> {
    pub(crate) backend: Arc<B>,
    /// The ring (`2^log_size` WQEs) and its doorbell record.
    pub(crate) ring: DmaRegion,
    pub(crate) dbr: DmaRegion,
    pub(crate) log_size: u8,
    pub(crate) cq: CqRing,
    pub(crate) rqn: u32,
    pub(crate) pool: Mempool,
    pub(crate) published: StatsHandle,
    pub(crate) quarantine: Quarantine,
    pub(crate) interrupt: Option<CompletionInterrupt<B>>,
    /// A striding RQ's geometry (`None`: one buffer per packet).
    pub(crate) striding: Option<StridingRx>,
}

/// A receive queue handle. `Send`: each queue may live on its own thread.
pub struct RxQueue<B: Backend> {
    /// Keeps the function open as long as the ring exists (receive needs no MMIO).
    _backend: Arc<B>,
    ring: RecvRing,
    dbr: DoorbellRecord,
    cq: CqRing,
    rqn: u32,
    log_size: u8,
    /// WQEs in the ring less one (`2^log_size - 1`), kept so the fast path does not shift.
    ring_mask: u16,
    pi: u16,
    ci: u16,
    /// The pool index of the buffer posted in each ring slot, or [`EMPTY_SLOT`]. Posted
    /// buffers are kept as bare indexes of `pool` (the ring owns them) and become [`Mbuf`]s
    /// only when received.
    slots: Vec<u32>,
    pool: Mempool,
    stats: QueueStats,
    published: StatsHandle,
    quarantine: Quarantine,
    interrupt: Option<CompletionInterrupt<B>>,
    in_error: bool,
    rebuild: Rebuild,
    /// This RQ's position in the port's RQ list (RSS spreads by position), kept while it is
    /// rebuilt.
    rss_place: usize,
    /// A striding RQ's geometry and place (`None`: one buffer per packet).
    striding: Option<StridingRx>,
}

impl<B: Backend> RxQueue<B> {
    #[inline(always)]
    pub(crate) fn mask(&self) -> u16 {
        self.ring_mask
    }

    /// A receive queue over what the port created, its ring filled from its pool.
    ///
    /// # Errors
    ///
    /// [`DriverError::Internal`] when the ring's memory cannot hold its WQEs.
    pub(crate) fn new(parts: ReceiveQueueParts<B>) -> Result<Self, DriverError> {
        let entries = 1u32 << parts.log_size;
        let mut queue = Self {
            _backend: parts.backend,
            ring: match parts.striding {
                Some(_) => RecvRing::Striding(SlotRing::new(parts.ring, parts.log_size)?),
                None => RecvRing::Plain(SlotRing::new(parts.ring, parts.log_size)?),
            },
            dbr: DoorbellRecord::new(parts.dbr)?,
            cq: parts.cq,
            rqn: parts.rqn,
            log_size: parts.log_size,
            ring_mask: (entries - 1) as u16,
            pi: 0,
            ci: 0,
            slots: vec![EMPTY_SLOT; entries as usize],
            pool: parts.pool,
            stats: QueueStats::default(),
            published: parts.published,
            quarantine: parts.quarantine,
            interrupt: parts.interrupt,
            in_error: false,
            rebuild: Rebuild::Idle,
            rss_place: 0,
            striding: parts.striding,
        };
        queue.refill();
        Ok(queue)
    }

    /// Posts fresh buffers into every empty slot, with one doorbell-record update.
    pub(crate) fn refill(&mut self) {
        let size = self.ring_mask.wrapping_add(1);
        let empty = usize::from(size.wrapping_sub(self.pi.wrapping_sub(self.ci)));
        if empty == 0 {
            return;
        }
        let mask = self.mask();
        let striding = self.striding;
        let Self {
            ring,
            slots,
            pi,
            pool,
            ..
        } = self;
        // One key for the whole pool, registered before the queue started.
        let lkey = pool.lkey();
        let room = pool.data_room();
        // The ring's kind is chosen once, outside the per-buffer loop, and so is the first word
        // of every plain receive WQE (byte count and key; what `wqe::encode_data` writes there):
        // a buffer costs only its address word.
        let head = be_word(room, lkey);
        let posted = match (&striding, &*ring) {
            (None, RecvRing::Plain(ring)) => {
                // What every buffer's address is computed from, and the producer index, held
                // in registers across the loop (the WQE stores are volatile, so fields read
                // through the queue or the pool would be read again after each).
                let (base, stride) = pool.buffer_geometry();
                let base = base + u64::from(HEADROOM_U32);
                let slots = &mut slots[..];
                let mut at = *pi;
                let posted = pool.take_each(empty, |index| {
                    let iova = base + u64::from(index) * stride;
                    ring.write_words::<2>(u32::from(at), &[head, be_u64(iova)]);
                    slots[usize::from(at & mask)] = index;
                    at = at.wrapping_add(1);
                });
                *pi = at;
                posted
            }
            (Some(striding), RecvRing::Striding(ring)) => pool.take_each(empty, |index| {
                let slot = usize::from(*pi & mask);
                striding.post(ring, pool.shared(), *pi, index, lkey);
                slots[slot] = index;
                *pi = pi.wrapping_add(1);
            }),
            // `new` gives a striding queue a striding ring and a plain one a plain ring.
            _ => 0,
        };
        if posted < empty {
            self.stats.nombuf += 1;
        }
        if posted > 0 {
            // The receive WQEs must reach the device before the record that publishes them.
            dma_wmb();
            self.dbr.set(0, u32::from(self.pi));
        }
    }

    /// Receives up to `max` packets (at most [`MAX_BURST`], and no more than a
    /// [`crate::PacketBurst`] has room for) onto the end of `sink`; returns how many. Refills the ring
    /// from the pool afterwards.
    ///
    /// # Errors
    ///
    /// [`DriverError::PoolMismatch`], with nothing received, when `sink` is a
    /// [`crate::PacketBurst`] holding packets of a pool other than this queue's.
    #[inline(never)]
    pub fn rx_burst(&mut self, sink: &mut impl RxSink, max: usize) -> Result<usize, DriverError> {
        let max = max.min(sink.bind(&self.pool)?);
        let got = if self.striding.is_some() {
            self.receive_striding(sink, max)
        } else {
            self.receive(sink, max)
        };
        self.published.publish(&self.stats);
        Ok(got)
    }

    /// Takes the buffer posted at the consumer index (its ring slot and pool index) for the
    /// completion being read, moving the consumer index on; `None`, with the queue stopped,
    /// when the device completed a slot with no buffer posted.
    #[inline(always)]
    fn take_oldest(&mut self) -> Option<(usize, u32)> {
        let slot = usize::from(self.ci & self.mask());
        self.ci = self.ci.wrapping_add(1);
        let index = std::mem::replace(&mut self.slots[slot], EMPTY_SLOT);
        if index == EMPTY_SLOT {
            self.refuse();
            return None;
        }
        Some((slot, index))
    }

    /// Stops the queue on a completion it refuses, until recovery. On a compressed CQ the
    /// refused completion may belong to a session whose title lied about its size, so where the
    /// device writes next is unknown: recovery then creates the CQ again.
    #[cold]
    pub(crate) fn refuse(&mut self) {
        self.stats.bad_cqes += 1;
        self.in_error = true;
        self.cq.lose_place();
    }

    fn receive(&mut self, out: &mut impl RxSink, max: usize) -> usize {
        if self.in_error {
            return 0;
        }
        let mut got = 0;
        let cqes_before = self.stats.cqes;
        let minis_before = self.cq.mini_cqes();
        let room = self.pool.data_room();
        let mut received_bytes = 0u64;
        let limit = max.min(MAX_BURST);
        while got < limit {
            if let Some(taken) = self.receive_run(limit - got, room, out) {
                got += taken.accepted;
                received_bytes += taken.bytes;
                if self.in_error {
                    break;
                }
                continue;
            }
            let Some(c) = self.cq.peek() else { break };
            self.cq.consume();
            self.stats.cqes += 1;
            // A cyclic RQ completes in order: the counter must name the oldest posted WQE.
            if c.wqe_counter() != self.ci || c.srqn() != self.cq.cqn() || self.pi == self.ci {
                // Out of step with the device: stop until recovery resets the ring.
                self.refuse();
                break;
            }
            let Some((slot, index)) = self.take_oldest() else {
                break;
            };
            if c.is_error() {
                // The device moved the RQ to error and is done with this WQE: the buffer goes
                // back to the pool; the queue waits for recovery.
                self.stats.errors += 1;
                self.stats.last_error_syndrome = c.syndrome();
                self.in_error = true;
                self.pool.give_back(index);
                break;
            }
            let bytes = c.byte_cnt();
            if !c.is_receive_ok() || bytes > room || bytes == 0 {
                // A completion the driver refuses says nothing it can trust about the buffer:
                // the device may still write it, so it stays posted until recovery has moved
                // the RQ to RST and flushes it.
                self.slots[slot] = index;
                self.refuse();
                break;
            }
            received_bytes += u64::from(bytes);
            out.accept(&self.pool, index, HEADROOM_U32, bytes, rx_flags(&c));
            got += 1;
        }
        self.finish_burst(got, received_bytes, cqes_before, minis_before);
        got
    }

    /// Ends a receive burst that took `got` packets of `bytes` in all: counts them, reports the
    /// consumer index when CQEs were consumed (`cqes_before`, `minis_before`: the counters when
    /// it began) and refills the ring unless the queue stopped.
    #[inline(always)]
    pub(crate) fn finish_burst(
        &mut self,
        got: usize,
        bytes: u64,
        cqes_before: u64,
        minis_before: u64,
    ) {
        self.stats.packets += got as u64;
        self.stats.bytes += bytes;
        self.stats.compressed_cqes += self.cq.mini_cqes() - minis_before;
        // Only a burst that consumed CQEs has a consumer index to report.
        if self.stats.cqes != cqes_before {
            self.cq.update_dbr();
        }
        if !self.in_error {
            self.refill();
        }
    }

    /// Receives the next completions of the open compressed session that share one mini-CQE
    /// array, at most `max`, onto `out`; `None` when no session is open. What they share is
    /// decided once for the run: the session's queue number and receive status (read from its
    /// title when it opened), the WQE counter of the run's first completion against the
    /// consumer index (the rest follow it one by one, as the ring's slots do), the posted
    /// buffers' count, the offload results. Each completion then costs its byte count's check,
    /// its slot's buffer and its burst entry. Consumes what it looked at; a refusal sets
    /// `in_error` as [`RxQueue::receive`] does.
    #[inline(always)]
    fn receive_run(&mut self, max: usize, room: u32, out: &mut impl RxSink) -> Option<RunTaken> {
        let mut taken = RunTaken::default();
        let Self {
            cq,
            slots,
            pool,
            ci,
            pi,
            ring_mask,
            ..
        } = self;
        let run = cq.array_run(max)?;
        let posted = usize::from(pi.wrapping_sub(*ci));
        if run.counter() != *ci
            || run.user_index() != cq.cqn()
            || !run.is_receive_ok()
            || posted == 0
        {
            cq.consume_run(1);
            self.stats.cqes += 1;
            self.refuse();
            return Some(taken);
        }
        let flags = run.flags();
        let hashed = flags.rx_rss_hash.is_some();
        let mask = usize::from(*ring_mask);
        let first = usize::from(*ci);
        // More completions than posted buffers: the ones past the last buffer are refused on
        // the next run, as the plain path refuses them one by one.
        let n = run.len.min(posted);
        let mut refused = false;
        for i in 0..n {
            let (bytes, hash) = run.byte_cnt_and_hash(i);
            let slot = &mut slots[(first + i) & mask];
            // As in `receive`: a refused completion's buffer stays posted until recovery
            // flushes it (and a slot with none stays empty).
            if bytes > room || bytes == 0 || *slot == EMPTY_SLOT {
                refused = true;
                break;
            }
            let index = std::mem::replace(slot, EMPTY_SLOT);
            taken.bytes += u64::from(bytes);
            let flags = OffloadFlags {
                rx_rss_hash: hashed.then_some(hash),
                ..flags
            };
            out.accept(pool, index, HEADROOM_U32, bytes, flags);
            taken.accepted += 1;
        }
        let looked = taken.accepted + usize::from(refused);
        *ci = ci.wrapping_add(looked as u16);
        cq.consume_run(looked as u32);
        self.stats.cqes += looked as u64;
        if refused {
            self.refuse();
        }
        Some(taken)
    }

    /// True once the device completed a receive in error or wrote a completion the driver
    /// refused: nothing more is received until [`crate::Port::recover_rx`].
    pub fn in_error(&self) -> bool {
        self.in_error
    }

    /// True when this is a striding receive queue ([`crate::PortConfig::rx_striding`]).
    pub fn is_striding(&self) -> bool {
        self.striding.is_some()
    }

    /// The number of the CQ this queue completes on.
    pub fn cqn(&self) -> u32 {
        self.cq.cqn()
    }

    /// Stops receiving until [`RxQueue::restart`] (the device is about to have the RQ in RST).
    pub(crate) fn stop(&mut self) {
        self.in_error = true;
    }

    /// Recovery: how far a rebuild of the RQ and its CQ has got.
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

    /// The ring, its doorbell record and its log2 size in WQEs: what an RQ is created over.
    pub(crate) fn ring_memory(&self) -> (&DmaRegion, &DmaRegion, u8) {
        (self.ring.region(), self.dbr.region(), self.log_size)
    }

    /// A striding RQ's geometry and place (`None`: one buffer per packet).
    pub(crate) fn striding(&self) -> Option<&StridingRx> {
        self.striding.as_ref()
    }

    /// The EQ the CQ reports to (0: none, no interrupt mode).
    pub(crate) fn interrupt_eqn(&self) -> u32 {
        self.interrupt.as_ref().map_or(0, |i| i.eqn())
    }

    /// This RQ's position in the port's RQ list (RSS spreads by position).
    pub(crate) fn rss_place(&self) -> usize {
        self.rss_place
    }

    /// Recovery: the RQ destroyed from `place` of the port's RQ list, kept for its successor.
    pub(crate) fn set_rss_place(&mut self, place: usize) {
        self.rss_place = place;
    }

    /// Recovery: the RQ created again over the same ring.
    pub(crate) fn set_rqn(&mut self, rqn: u32) {
        self.rqn = rqn;
    }

    /// Recovery: takes every completion left on the CQ without acting on it; returns how many.
    pub(crate) fn drain_completions(&mut self) -> usize {
        self.cq.drain()
    }

    /// Recovery, once the device can no longer write the ring's buffers: every posted buffer
    /// goes back to the pool; returns how many.
    pub(crate) fn flush_posted(&mut self) -> usize {
        let flushed = posted_buffers(&mut self.slots, &self.pool).count();
        self.stats.flushed += flushed as u64;
        flushed
    }

    /// Moves the queue to `pool` (after its buffers were flushed: a buffer still posted goes
    /// back to the pool it came from first).
    pub(crate) fn set_pool(&mut self, pool: Mempool) {
        self.flush_posted();
        // A striding queue's buffers come from the port's striding pool, which stays.
        if self.striding.is_none() {
            self.pool = pool;
        }
    }

    /// Recovery: the ring starts again at index 0 (as the device does after RST) and is
    /// refilled.
    pub(crate) fn restart(&mut self) {
        self.pi = 0;
        self.ci = 0;
        if let Some(striding) = self.striding.as_mut() {
            striding.used = 0;
            striding.pending = 0;
        }
        self.dbr.set(0, 0);
        self.in_error = false;
        self.stats.recoveries += 1;
        self.refill();
        self.published.publish(&self.stats);
    }

    /// Counters of this queue.
    pub fn stats(&self) -> QueueStats {
        self.stats
    }

    /// Buffers posted and not yet completed.
    pub fn posted(&self) -> usize {
        usize::from(self.pi.wrapping_sub(self.ci))
    }

    /// The queue's RQ number.
    pub fn rqn(&self) -> u32 {
        self.rqn
    }

    /// Arms the completion interrupt (DPDK's `rte_eth_dev_rx_intr_enable`): the queue's vector
    /// fires at the next packet. Receive once more after arming before sleeping: a packet that
    /// came in between fires at once.
    pub fn arm_interrupt(&mut self) -> Result<(), DriverError> {
        let irq = self.interrupt.as_mut().ok_or_else(irq::not_enabled)?;
        irq.arm(&self.cq);
        Ok(())
    }

    /// Sleeps until the armed completion interrupt fires or `timeout` passes (zero: only takes
    /// what is pending, after epoll reported the fd readable). Returns true when it fired.
    pub fn wait_interrupt(&mut self, timeout: Duration) -> Result<bool, DriverError> {
        let irq = self.interrupt.as_mut().ok_or_else(irq::not_enabled)?;
        Ok(irq.wait(self.cq.cqn(), timeout))
    }

    /// The completion interrupt's eventfd, for poll/epoll (`None` without receive interrupts).
    pub fn interrupt_fd(&self) -> Option<BorrowedFd<'_>> {
        self.interrupt.as_ref().map(|i| i.fd())
    }

    /// Completion interrupts taken so far.
    pub fn interrupts(&self) -> u64 {
        self.interrupt.as_ref().map_or(0, |i| i.events())
    }
}

impl<B: Backend> Drop for RxQueue<B> {
    fn drop(&mut self) {
        // The device may still write these, and read the ring, until the port destroys the RQ.
        let mut q = self.quarantine.lock().unwrap_or_else(|e| e.into_inner());
        q.keep(
            posted_buffers(&mut self.slots, &self.pool),
            [self.ring.take_region(), self.dbr.take_region()],
            self.cq.take_memory(),
        );
    }
}
