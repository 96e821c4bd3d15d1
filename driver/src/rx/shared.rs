//! Shared receive rings: many receive queues drawing buffers from one ring (an RMP, the Ethernet
//! form of the InfiniBand shared receive queue). The application posts buffers to the ring in
//! batches ([`SharedRxRing::refill`]); each queue ([`SharedRxQueue`]) reads its own CQ and takes
//! the buffer the completion names. The ring's low watermark raises one SRQ_RQ_LIMIT event per
//! arm ([`crate::Event::SharedRingLow`]), so the application can sleep until buffers run low.
//!
//! The ring is cyclic (`basic_cyclic_rcv_wqe`): the device consumes WQEs in posting order, but
//! completions reach the queues' CQs in any order, so a slot is posted again only once its
//! completion has been taken. Every completion is checked against the slot table (queue, ring,
//! WQE counter within the posted window, slot still posted with that counter) before a buffer
//! is handed out, so a bad or repeated CQE can never hand a buffer out twice.

use super::irq;
use super::irq::CompletionInterrupt;
use super::sink::RxSink;
use crate::backend::barrier::dma_wmb;
use crate::backend::Backend;
use crate::cq::{rx_flags, CqRing};
use crate::error::DriverError;
use crate::mem::{Mbuf, Mempool, Quarantine};
use crate::ring::{DoorbellRecord, QueueStats, SlotRing, StatsHandle, MAX_BURST};
use cxdirect_dma::DmaRegion;
use cxdirect_hw::wqe;
use std::os::fd::BorrowedFd;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// How a port's shared receive ring is set up ([`crate::PortConfig::shared_rx`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedRxConfig {
    /// Buffers the ring holds (a power of two, 64..=32768; one slot stays empty, so at most
    /// `ring_size - 1` are posted at once).
    pub ring_size: u32,
    /// Low watermark armed at start, in buffers (0 = not armed; below `ring_size`). When the
    /// posted buffers fall below it the device raises one limit event.
    pub limit: u32,
}

impl Default for SharedRxConfig {
    fn default() -> Self {
        Self {
            ring_size: 1024,
            limit: 256,
        }
    }
}

impl SharedRxConfig {
    pub(crate) fn validate(&self, log_max_wq: u8) -> Result<(), DriverError> {
        if !self.ring_size.is_power_of_two() || !(64..=32768).contains(&self.ring_size) {
            return Err(DriverError::config(
                "shared_rx.ring_size",
                self.ring_size,
                "give a power of two from 64 to 32768",
            ));
        }
        if self.ring_size.trailing_zeros() > u32::from(log_max_wq) {
            return Err(DriverError::config(
                "shared_rx.ring_size",
                self.ring_size,
                format!(
                    "exceeds the device's 2^{log_max_wq}; give at most {}",
                    1u32 << log_max_wq
                ),
            ));
        }
        if self.limit >= self.ring_size {
            return Err(DriverError::config(
                "shared_rx.limit",
                self.limit,
                format!("must be below the ring size {}", self.ring_size),
            ));
        }
        Ok(())
    }
}

/// Counters of a shared ring.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SharedRingStats {
    /// Calls to [`SharedRxRing::refill`] that posted at least one buffer.
    pub refills: u64,
    /// Buffers posted in all.
    pub posted: u64,
    /// Buffers handed to the application through the queues.
    pub completed: u64,
    /// Times the pool ran dry while refilling.
    pub nombuf: u64,
    /// Buffers returned to the pool by [`crate::Port::flush_shared_ring`] (never completed).
    pub flushed: u64,
    /// Completions that named no posted buffer (counted, ignored).
    pub bad_cqes: u64,
}

/// One posted buffer: the WQE counter it was posted at and the buffer.
type Slot = Option<(u16, Mbuf)>;

struct RingState {
    /// The device's RMP number: changes when [`crate::Port::restart_shared_ring`] creates the
    /// ring again.
    rmpn: u32,
    slots: Vec<Slot>,
    /// WQEs posted since creation (16-bit, as the doorbell record counts).
    pi: u16,
    /// Posted buffers whose completion has not been taken.
    outstanding: u32,
    /// Set once flushed: the device's WQEs point at returned buffers, so nothing is posted
    /// again on this ring.
    flushed: bool,
    stats: SharedRingStats,
}

/// The ring itself, shared by the application's handle, the queues and the port (which keeps
/// the buffers alive until the device can no longer write them).
pub(crate) struct SharedRing {
    log_size: u8,
    ring: SlotRing<16>,
    dbr: DoorbellRecord,
    pool: Mempool,
    state: Mutex<RingState>,
}

impl SharedRing {
    /// The ring of RMP `rmpn`: `2^log_size` 16-byte WQEs in `ring`, doorbell record `dbr`,
    /// buffers from `pool`; nothing posted yet.
    ///
    /// # Errors
    ///
    /// [`DriverError::Internal`] when `ring` cannot hold its WQEs.
    pub(crate) fn new(
        rmpn: u32,
        log_size: u8,
        ring: DmaRegion,
        dbr: DmaRegion,
        pool: Mempool,
    ) -> Result<Self, DriverError> {
        Ok(Self {
            log_size,
            ring: SlotRing::new(ring, log_size)?,
            dbr: DoorbellRecord::new(dbr)?,
            pool,
            state: Mutex::new(RingState {
                rmpn,
                slots: (0..1u32 << log_size).map(|_| None).collect(),
                pi: 0,
                outstanding: 0,
                flushed: false,
                stats: SharedRingStats::default(),
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, RingState> {
        // A queue thread that panicked mid-burst leaves consistent slots behind: every update is
        // a single take or put.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn mask(&self) -> u16 {
        (1u16 << self.log_size).wrapping_sub(1)
    }

    /// The pool the ring posts buffers from.
    pub(crate) fn pool(&self) -> &Mempool {
        &self.pool
    }

    pub(crate) fn rmpn(&self) -> u32 {
        self.lock().rmpn
    }

    /// The ring's memory and doorbell record, for creating its RMP again.
    pub(crate) fn memory(&self) -> (&DmaRegion, &DmaRegion) {
        (self.ring.region(), self.dbr.region())
    }

    /// After [`SharedRing::flush`], with the device's RMP created again over the same memory
    /// as `rmpn`: posting starts over at WQE 0, as a new RMP consumes from there.
    pub(crate) fn reopen(&self, rmpn: u32) {
        let mut st = self.lock();
        st.rmpn = rmpn;
        st.pi = 0;
        st.outstanding = 0;
        st.flushed = false;
        self.dbr.set(0, 0);
    }

    pub(crate) fn log_size(&self) -> u8 {
        self.log_size
    }

    /// Posts up to `max` buffers from the pool into free slots, in posting order, with one
    /// doorbell-record update. Returns how many.
    pub(crate) fn refill(&self, max: u32) -> u32 {
        let mut st = self.lock();
        if st.flushed {
            return 0;
        }
        // One slot stays empty so a full ring and an empty one differ.
        let capacity = (1u32 << self.log_size) - 1;
        let mut posted = 0;
        while posted < max && st.outstanding < capacity {
            let slot = usize::from(st.pi & self.mask());
            if st.slots[slot].is_some() {
                // That slot's completion has not been taken yet: the ring is posted in order.
                break;
            }
            let Some(m) = self.pool.alloc() else {
                st.stats.nombuf += 1;
                break;
            };
            let seg = wqe::encode_data(m.capacity() as u32, m.lkey(), m.data_iova());
            self.ring
                .write_words::<2>(u32::from(st.pi), &crate::ring::words_from_bytes(&seg));
            let counter = st.pi;
            st.slots[slot] = Some((counter, m));
            st.pi = st.pi.wrapping_add(1);
            st.outstanding += 1;
            posted += 1;
        }
        if posted > 0 {
            // The receive WQEs must reach the device before the record that publishes them.
            dma_wmb();
            self.dbr.set(0, u32::from(st.pi));
            st.stats.refills += 1;
            st.stats.posted += u64::from(posted);
        }
        posted
    }

    /// Returns every posted buffer to the pool; nothing is posted on the ring afterwards. Only
    /// for a ring the device can no longer write (in error, or destroyed).
    pub(crate) fn flush(&self) -> usize {
        let mut st = self.lock();
        st.flushed = true;
        let count = st.slots.iter_mut().filter_map(Option::take).count();
        st.outstanding = 0;
        st.stats.flushed += count as u64;
        count
    }
}

/// The application's handle on a shared receive ring: posts buffers. `Send`; one per ring.
pub struct SharedRxRing<B: Backend> {
    pub(super) _backend: Arc<B>,
    pub(super) ring: Arc<SharedRing>,
}

impl<B: Backend> SharedRxRing<B> {
    /// The application's handle on `ring`.
    pub(crate) fn new(backend: Arc<B>, ring: Arc<SharedRing>) -> Self {
        Self {
            _backend: backend,
            ring,
        }
    }

    /// The ring this handle posts to.
    pub(crate) fn shared_ring(&self) -> &Arc<SharedRing> {
        &self.ring
    }

    /// Posts buffers from the pool until the ring is full (or the pool is empty), with one
    /// doorbell-record update. Returns how many were posted.
    pub fn refill(&mut self) -> u32 {
        self.ring.refill(u32::MAX)
    }

    /// Posts at most `max` buffers. Returns how many were posted.
    pub fn refill_up_to(&mut self, max: u32) -> u32 {
        self.ring.refill(max)
    }

    /// Buffers posted whose completion no queue has taken yet (the driver's view; the device's
    /// count of unconsumed buffers is in [`crate::Port::shared_ring_status`]).
    pub fn outstanding(&self) -> u32 {
        self.ring.lock().outstanding
    }

    /// Buffers the ring holds at most at once (ring size - 1).
    pub fn capacity(&self) -> u32 {
        (1u32 << self.ring.log_size) - 1
    }

    /// The ring's identity as events name it (its RMP number).
    pub fn id(&self) -> u32 {
        self.ring.rmpn()
    }

    /// The ring's counters.
    pub fn stats(&self) -> SharedRingStats {
        self.ring.lock().stats
    }
}

/// A receive queue drawing from a shared ring: its own RQ and CQ. `Send`: each queue may live
/// on its own thread; queues of one ring take the ring's lock once per burst.
pub struct SharedRxQueue<B: Backend> {
    pub(super) _backend: Arc<B>,
    pub(super) ring: Arc<SharedRing>,
    pub(super) cq: CqRing,
    pub(super) rqn: u32,
    pub(super) stats: QueueStats,
    pub(super) published: StatsHandle,
    pub(super) interrupt: Option<CompletionInterrupt<B>>,
    /// Set by an error completion or a completion the driver refused: nothing is received
    /// until [`crate::Port::recover_shared_rx`].
    pub(super) in_error: bool,
    pub(super) quarantine: Quarantine,
}

impl<B: Backend> Drop for SharedRxQueue<B> {
    fn drop(&mut self) {
        // The device may still write the CQ until the port destroys the RQ.
        self.quarantine
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keep_cq(self.cq.take_memory());
    }
}

impl<B: Backend> SharedRxQueue<B> {
    /// A queue drawing from `ring` through RQ `rqn`, completing on `cq`.
    pub(crate) fn new(
        backend: Arc<B>,
        ring: Arc<SharedRing>,
        cq: CqRing,
        rqn: u32,
        published: StatsHandle,
        interrupt: Option<CompletionInterrupt<B>>,
        quarantine: Quarantine,
    ) -> Self {
        Self {
            _backend: backend,
            ring,
            cq,
            rqn,
            stats: QueueStats::default(),
            published,
            interrupt,
            in_error: false,
            quarantine,
        }
    }

    /// True when this queue draws from `ring`.
    pub(crate) fn draws_from(&self, ring: &Arc<SharedRing>) -> bool {
        Arc::ptr_eq(&self.ring, ring)
    }

    /// The number of the CQ this queue completes on.
    pub(crate) fn cqn(&self) -> u32 {
        self.cq.cqn()
    }

    /// The RQ created again on a new ring.
    pub(crate) fn set_rqn(&mut self, rqn: u32) {
        self.rqn = rqn;
    }

    /// Receives up to `max` packets (at most [`MAX_BURST`], and no more than a
    /// [`crate::PacketBurst`] has room for) onto the end of `sink`; returns how many. Does not
    /// refill the ring: that is [`SharedRxRing::refill`]'s job.
    ///
    /// # Errors
    ///
    /// [`DriverError::PoolMismatch`], with nothing received, when `sink` is a
    /// [`crate::PacketBurst`] holding packets of a pool other than the ring's.
    #[inline(never)]
    pub fn rx_burst(&mut self, sink: &mut impl RxSink, max: usize) -> Result<usize, DriverError> {
        let max = max.min(sink.bind(self.ring.pool())?);
        let got = self.receive(sink, max);
        self.published.publish(&self.stats);
        Ok(got)
    }

    fn receive(&mut self, out: &mut impl RxSink, max: usize) -> usize {
        if self.in_error {
            return 0;
        }
        let Some(first) = self.cq.peek() else {
            return 0;
        };
        let Self {
            ring,
            cq,
            stats,
            in_error,
            ..
        } = self;
        let mut st = ring.lock();
        let mask = ring.mask();
        let size = 1u16 << ring.log_size;
        let mut got = 0;
        let mut next = Some(first);
        while let Some(c) = next {
            cq.consume();
            stats.cqes += 1;
            let counter = c.wqe_counter();
            let srqn = c.srqn();
            // The counter must name a WQE posted on this ring and not yet completed.
            let age = st.pi.wrapping_sub(counter);
            let slot = usize::from(counter & mask);
            let matches = srqn == st.rmpn
                && age != 0
                && age <= size
                && st.slots[slot].as_ref().is_some_and(|(c, _)| *c == counter);
            if !matches {
                // Which buffer the device used is unknown: it stays posted until the ring is
                // flushed, and the queue stops for recovery.
                stats.bad_cqes += 1;
                st.stats.bad_cqes += 1;
                *in_error = true;
                break;
            }
            // The counter names a WQE this ring posted: the device is done with its buffer,
            // whatever else the completion says.
            let Some((_, mut m)) = st.slots[slot].take() else {
                break;
            };
            st.outstanding -= 1;
            st.stats.completed += 1;
            let bytes = c.byte_cnt();
            if c.is_error() {
                // The device moved the RQ to error: the buffer goes back to the pool.
                stats.errors += 1;
                stats.last_error_syndrome = c.syndrome();
                *in_error = true;
                break;
            } else if !c.is_receive_ok() || bytes as usize > m.capacity() || bytes == 0 {
                stats.bad_cqes += 1;
                *in_error = true;
                break;
            }
            m.set_len(bytes);
            m.flags = rx_flags(&c);
            stats.packets += 1;
            stats.bytes += u64::from(bytes);
            out.accept_mbuf(m);
            got += 1;
            if got >= max.min(MAX_BURST) {
                break;
            }
            next = cq.peek();
        }
        drop(st);
        cq.update_dbr();
        got
    }

    /// Arms the completion interrupt: the queue's vector fires at the next packet. Receive
    /// once more after arming before sleeping: a packet that came in between fires at once.
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

    /// Counters of this queue.
    pub fn stats(&self) -> QueueStats {
        self.stats
    }

    /// True once the device completed a receive in error or wrote a completion the driver
    /// refused: nothing more is received until [`crate::Port::recover_shared_rx`].
    pub fn in_error(&self) -> bool {
        self.in_error
    }

    /// Recovery, once the device no longer writes through this RQ: takes the completions
    /// left on its CQ, returning the buffers they name to the pool (the device is done with
    /// them); returns (completions taken, buffers returned).
    pub(crate) fn drain_completions(&mut self) -> (usize, usize) {
        let mut st = self.ring.lock();
        let mask = self.ring.mask();
        let (mut drained, mut returned) = (0, 0);
        while drained < 1usize << self.cq.log_size() {
            let Some(c) = self.cq.peek_or_skipped() else {
                break;
            };
            self.cq.consume();
            drained += 1;
            let counter = c.wqe_counter();
            let slot = usize::from(counter & mask);
            let ours =
                c.srqn() == st.rmpn && st.slots[slot].as_ref().is_some_and(|(n, _)| *n == counter);
            if ours && st.slots[slot].take().is_some() {
                st.outstanding -= 1;
                st.stats.completed += 1;
                st.stats.flushed += 1;
                returned += 1;
            }
        }
        drop(st);
        if drained > 0 {
            self.cq.update_dbr();
        }
        self.stats.flushed += returned as u64;
        (drained, returned)
    }

    /// Recovery: the queue receives again.
    pub(crate) fn restart(&mut self) {
        self.in_error = false;
        self.stats.recoveries += 1;
        self.published.publish(&self.stats);
    }

    /// The queue's RQ number.
    pub fn rqn(&self) -> u32 {
        self.rqn
    }

    /// The ring this queue draws from (its RMP number).
    pub fn ring_id(&self) -> u32 {
        self.ring.rmpn()
    }
}
