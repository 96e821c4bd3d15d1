//! Queue recovery after an error completion or a completion the driver refused, as Linux mlx5e
//! recovers its send and receive queues: stop the device using the ring (MODIFY to RST from
//! whichever state the device has it in), take whatever completions are left, give every buffer
//! the ring still held back to its pool (counted as flushed), start the ring from index 0 and
//! move it back to RDY. Nothing a queue held is lost or handed out twice: buffers are freed only
//! once the device can no longer reach them through the queue.

use super::{Port, Queues};
use crate::backend::Backend;
use crate::control::{input, DeviceRecovery};
use crate::cq::CqRing;
use crate::error::{DriverError, QueueKind};
use crate::ring::Rebuild;
use crate::rx::{RxQueue, SharedRxQueue};
use crate::tx::TxQueue;
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::wq::{ModifyRqIn, ModifySqIn, RqState};
use std::time::{Duration, Instant};

/// What recovering one queue did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recovery {
    /// Buffers the queue still held (sent but not completed, or posted for receive) that went
    /// back to the pool without carrying a packet; also added to the queue's `flushed` count.
    pub flushed: usize,
    /// Completions taken off the CQ while recovering (left after the error).
    pub drained_cqes: usize,
    /// The state the device had the queue in (`Err` after an error completion, `Rdy` when the
    /// driver refused a completion the device considered good).
    pub device_state: RqState,
    /// Wall time from the start of recovery to the queue being ready again.
    pub took: Duration,
    /// The queue's CQ was in error (a CQ error event: it overran, or the device could not
    /// write it), so the queue and its CQ were destroyed and created again rather than reset.
    pub cq_recreated: bool,
}

impl Recovery {
    /// A queue and its failed CQ created again, started at `start`.
    fn rebuilt(flushed: usize, drained_cqes: usize, start: Instant) -> Self {
        Self {
            flushed,
            drained_cqes,
            device_state: RqState::Err,
            took: start.elapsed(),
            cq_recreated: true,
        }
    }
}

/// What recovering a whole port ([`Port::recover`]) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRecovery {
    /// The function reset and re-initialisation.
    pub device: DeviceRecovery,
    /// Buffers the old queues (and the shared ring) held that went back to the pool without
    /// carrying a packet.
    pub flushed: usize,
    /// Wall time from the reset to the new queues being ready.
    pub took: Duration,
}

impl<B: Backend> Port<B> {
    /// Recovers a port whose device failed ([`crate::DriverError::Failed`]: a fatal health
    /// syndrome, a stalled health counter, a device that stopped answering), or any port: the
    /// function is reset ([`crate::Device::recover`]) and brought up again, and every object
    /// of the port is created again with the same configuration, so a long-running
    /// application resumes.
    ///
    /// `queues` holds the application's queue handles: the old ones are taken (their buffers
    /// go back to the pool once the reset returned, counted in `flushed`) and the new ones put
    /// in their place, in the same order. Queue counters start again from zero. A port with a
    /// shared receive ring hands out its new ring and queues through
    /// [`Port::take_shared_rx`] again; the old handles get nothing more. Buffers the
    /// application still holds stay valid (the pool's memory is not touched; its key is
    /// registered again). Memory keys the application registered itself are lost with the
    /// reset (see [`crate::DeviceRecovery::keys_lost`]).
    ///
    /// # Errors
    ///
    /// A backend error when the function cannot be reset: nothing changed, `queues` keeps the
    /// old handles. Otherwise the error of the failing step: `queues` is then empty, the port
    /// holds no device objects, and `recover` may be called again.
    pub fn recover(&mut self, queues: &mut Queues<B>) -> Result<PortRecovery, DriverError> {
        let start = Instant::now();
        let reset = self.dev.begin_recovery()?;
        // The device reaches no host memory any more: what the old queues held may go back.
        let mut flushed = 0;
        for mut q in queues.tx.drain(..) {
            flushed += q.flush_in_flight();
        }
        for mut q in queues.rx.drain(..) {
            flushed += q.flush_posted();
        }
        flushed += self.forget_objects_after_reset();
        let device = self.dev.finish_recovery(reset)?;
        *queues = self.rebuild()?;
        Ok(PortRecovery {
            device,
            flushed,
            took: start.elapsed(),
        })
    }

    /// Takes the CQ error events the device raised (a CQ that overran, or that the device could
    /// not write) and returns the CQs of this port's queues they named and that are not yet
    /// recovered ([`TxQueue::cqn`], [`RxQueue::cqn`]). Such a queue has stopped in the device
    /// without an error completion to tell it so: recover it with [`Port::recover_tx`] or
    /// [`Port::recover_rx`], which destroy the queue and its CQ and create both again. Events
    /// naming CQs this port does not have are ignored (counted in the device's event counts).
    /// A shared-ring queue whose CQ failed is not rebuilt on its own: recover the port with
    /// [`Port::recover`].
    /// Takes no command; cheap enough to call once per burst loop (no allocation when nothing
    /// failed).
    pub fn failed_cqs(&mut self) -> Vec<u32> {
        for (cqn, _syndrome) in self.dev.take_failed_cqs() {
            if self.cqs.contains(&cqn) && !self.failed_cqs.contains(&cqn) {
                self.failed_cqs.push(cqn);
            }
        }
        self.failed_cqs.clone()
    }

    /// Recovers a send queue that reports [`TxQueue::in_error`] (or any send queue of this
    /// port: a healthy one is reset the same way), or whose CQ [`Port::failed_cqs`] named (the
    /// SQ and its CQ are then destroyed and created again, the ring and UAR kept). In-flight
    /// buffers are returned to their pool and counted in the queue's `errors` (the port's
    /// `oerrors`) and `flushed`.
    ///
    /// # Errors
    ///
    /// [`DriverError::NoSuchQueue`] when the queue is not one of this port's; a command error
    /// when the device refuses the state changes (the queue then stays in error, its buffers
    /// held). When the queue and its CQ were being created again, the queue stays stopped at the
    /// step that failed (buffers already flushed stay flushed) and calling again resumes there;
    /// the [`Recovery`] of a resumed call counts only what that call flushed.
    pub fn recover_tx(&mut self, q: &mut TxQueue<B>) -> Result<Recovery, DriverError> {
        if self.failed_cqs.contains(&q.cqn())
            || q.rebuild_stage() != Rebuild::Idle
            || q.cq_lost_place()
        {
            return self.recreate_tx(q);
        }
        self.recover_queue(WorkQueue::Send(q.sqn()), q)
    }

    /// Recovers a receive queue that reports [`RxQueue::in_error`] (or any of this port's
    /// receive queues), or whose CQ [`Port::failed_cqs`] named: the RQ and its CQ are then
    /// destroyed and created again, with the port's steering taken down and rebuilt around
    /// the new RQ (frames arriving meanwhile are dropped by the device and counted there).
    /// Posted buffers return to the pool (counted in `flushed`); the ring is refilled. Frames
    /// the device received while the queue was in error were dropped by the device and show in
    /// the port's `imissed`/`ierrors`, not here.
    ///
    /// # Errors
    ///
    /// As [`Port::recover_tx`].
    pub fn recover_rx(&mut self, q: &mut RxQueue<B>) -> Result<Recovery, DriverError> {
        if self.failed_cqs.contains(&q.cqn())
            || q.rebuild_stage() != Rebuild::Idle
            || q.cq_lost_place()
        {
            return self.recreate_rx(q);
        }
        self.recover_queue(WorkQueue::Receive(q.rqn()), q)
    }

    /// Recovers a queue of the shared receive ring that reports
    /// [`SharedRxQueue::in_error`] (or any of this port's shared-ring queues): its RQ goes to
    /// RST and back to RDY; the completions left on its CQ are taken, and the buffers they name
    /// go back to the pool (counted in `flushed`). The ring itself stays ready: its other
    /// queues never stop, and its posted buffers stay posted. A ring the device moved to error
    /// ([`Port::shared_ring_failed`]) is created again with [`Port::restart_shared_ring`].
    ///
    /// # Errors
    ///
    /// As [`Port::recover_tx`].
    pub fn recover_shared_rx(&mut self, q: &mut SharedRxQueue<B>) -> Result<Recovery, DriverError> {
        self.refuse_unfinished_restart()?;
        self.recover_queue(WorkQueue::Receive(q.rqn()), q)
    }

    /// The one recovery sequence: RST (from ERR, or from RDY when the device says the queue
    /// is not in error), completions drained and buffers flushed once the device can no longer
    /// reach them, RDY, ring restarted.
    fn recover_queue(
        &mut self,
        wq: WorkQueue,
        q: &mut impl Recoverable,
    ) -> Result<Recovery, DriverError> {
        let start = Instant::now();
        let (owned, kind, number) = match wq {
            WorkQueue::Send(n) => (self.sqs.contains(&n), QueueKind::Send, n),
            WorkQueue::Receive(n) => (self.rqs.contains(&n), QueueKind::Receive, n),
        };
        if !owned {
            return Err(DriverError::NoSuchQueue { kind, number });
        }
        // Restarting would post buffers no key translates any more.
        self.refuse_revoked_pool()?;
        let device_state = self.stop_wq(wq)?;
        let (drained_cqes, flushed) = q.drain_and_flush();
        self.modify_wq(wq, RqState::Rst, RqState::Rdy)?;
        q.restart();
        Ok(Recovery {
            flushed,
            drained_cqes,
            device_state,
            took: start.elapsed(),
            cq_recreated: false,
        })
    }

    /// A send queue whose CQ failed: the SQ is destroyed first (the device stops reading the
    /// ring and its buffers), then what the CQ holds is taken and the in-flight buffers
    /// flushed, then the CQ is destroyed; a new CQ and SQ are created over the same ring. A
    /// step that fails leaves the queue stopped at that step ([`Rebuild`]); calling again
    /// resumes there.
    fn recreate_tx(&mut self, q: &mut TxQueue<B>) -> Result<Recovery, DriverError> {
        let start = Instant::now();
        let (mut drained_cqes, mut flushed) = (0, 0);
        if q.rebuild_stage() == Rebuild::Idle {
            let old_sq = q.sqn();
            if !self.sqs.contains(&old_sq) {
                return Err(DriverError::NoSuchQueue {
                    kind: QueueKind::Send,
                    number: old_sq,
                });
            }
            q.stop();
            self.destroy(Opcode::DestroySq, old_sq, 8)?;
            self.sqs.retain(|&n| n != old_sq);
            (drained_cqes, flushed) = q.drain_and_flush();
            q.set_rebuild_stage(Rebuild::QueueDestroyed);
        }
        let uar = q.uar();
        let (cq, stage) = q.cq_for_rebuild();
        self.rebuild_cq(cq, stage, uar, 0, false)?;
        if q.rebuild_stage() == Rebuild::CqCreated {
            let (_, pd, _) = self.dev.resources();
            let (ring, dbr, log_size) = q.ring_memory();
            let sqn = self.create_sq(pd, ring, dbr, uar, q.cqn(), log_size)?;
            q.set_sqn(sqn);
            q.set_rebuild_stage(Rebuild::Idle);
        }
        q.restart();
        Ok(Recovery::rebuilt(flushed, drained_cqes, start))
    }

    /// A receive queue whose CQ failed: steering goes first (it names the RQ, and the device
    /// refuses to destroy an RQ a TIR or RQ table uses), then the RQ (the device stops writing
    /// its buffers), then the leftover completions are taken and the posted buffers flushed,
    /// then the CQ; a new CQ and RQ are created over the same ring and steering is built again
    /// around the new RQ number. Resumes like [`Port::recreate_tx`] after a failed step.
    fn recreate_rx(&mut self, q: &mut RxQueue<B>) -> Result<Recovery, DriverError> {
        let start = Instant::now();
        let (mut drained_cqes, mut flushed) = (0, 0);
        let (uar, pd, td) = self.dev.resources();
        if q.rebuild_stage() == Rebuild::Idle {
            let old_rq = q.rqn();
            let Some(at) = self.rqs.iter().position(|&n| n == old_rq) else {
                return Err(DriverError::NoSuchQueue {
                    kind: QueueKind::Receive,
                    number: old_rq,
                });
            };
            q.stop();
            self.destroy_steering()?;
            // Flow rules to this queue hold it through their TIRs: those go too, and come
            // back, to the new RQ, when the steering is built again.
            self.flows.release_tirs(&mut self.dev, old_rq)?;
            self.destroy(Opcode::DestroyRq, old_rq, 8)?;
            self.rqs.remove(at);
            // Its place, which RSS spreads by, is kept for the new RQ.
            q.set_rss_place(at);
            (drained_cqes, flushed) = q.drain_and_flush();
            q.set_rebuild_stage(Rebuild::QueueDestroyed);
        }
        let eqn = q.interrupt_eqn();
        let striding = q.striding().is_some();
        let (cq, stage) = q.cq_for_rebuild();
        self.rebuild_cq(cq, stage, uar, eqn, striding)?;
        if q.rebuild_stage() == Rebuild::CqCreated {
            let (ring, dbr, log_size) = q.ring_memory();
            let rqn = self.create_rq(pd, ring, dbr, q.cqn(), log_size, q.striding())?;
            // Keep the RQs in their order: RSS spreads over them by position.
            self.rqs.pop();
            self.rqs.insert(q.rss_place().min(self.rqs.len()), rqn);
            self.flows.retarget(q.rqn(), rqn);
            q.set_rqn(rqn);
            q.set_rebuild_stage(Rebuild::QueueCreated);
        }
        if q.rebuild_stage() == Rebuild::QueueCreated {
            // Whatever a failed attempt built is taken down first.
            self.destroy_steering()?;
            self.create_steering(td)?;
            q.set_rebuild_stage(Rebuild::Idle);
        }
        q.restart();
        Ok(Recovery::rebuilt(flushed, drained_cqes, start))
    }

    /// The CQ steps of a rebuild: the failed CQ destroyed, then its replacement (of its size,
    /// on `uar`, reporting to EQ `eqn`, compressed in the checksum and stride index format when `striding`)
    /// created into `cq`; each step recorded in `stage` as it completes.
    fn rebuild_cq(
        &mut self,
        cq: &mut CqRing,
        stage: &mut Rebuild,
        uar: u32,
        eqn: u32,
        striding: bool,
    ) -> Result<(), DriverError> {
        if *stage == Rebuild::QueueDestroyed {
            let old = cq.cqn();
            self.destroy(Opcode::DestroyCq, old, 8)?;
            self.cqs.retain(|&n| n != old);
            self.failed_cqs.retain(|&n| n != old);
            *stage = Rebuild::CqDestroyed;
        }
        if *stage == Rebuild::CqDestroyed {
            let compressed = cq.is_compressed();
            *cq = self.create_cq(1 << cq.log_size(), uar, eqn, compressed, striding)?;
            *stage = Rebuild::CqCreated;
        }
        Ok(())
    }

    /// Moves a queue to RST from whichever state the device has it in (ERR after an error,
    /// RDY otherwise); returns that state.
    pub(crate) fn stop_wq(&mut self, wq: WorkQueue) -> Result<RqState, DriverError> {
        match self.modify_wq(wq, RqState::Err, RqState::Rst) {
            Ok(()) => Ok(RqState::Err),
            Err(first) => match self.modify_wq(wq, RqState::Rdy, RqState::Rst) {
                Ok(()) => Ok(RqState::Rdy),
                Err(_) => Err(first),
            },
        }
    }

    fn modify_wq(&mut self, wq: WorkQueue, from: RqState, to: RqState) -> Result<(), DriverError> {
        match wq {
            WorkQueue::Send(sqn) => self.modify_sq(sqn, from, to),
            WorkQueue::Receive(rqn) => self.modify_rq(rqn, from, to),
        }
    }

    pub(crate) fn modify_sq(
        &mut self,
        sqn: u32,
        from: RqState,
        to: RqState,
    ) -> Result<(), DriverError> {
        let mut modify = input(Opcode::ModifySq, 0, ModifySqIn::<&[u8]>::SIZE);
        if let Ok(mut m) = ModifySqIn::new(&mut modify[..]) {
            m.set_sq_state(from as u8).set_sqn(sqn);
            m.ctx_mut().set_state(to as u8);
        }
        self.dev.exec(&modify, 16).map(|_| ())
    }

    pub(crate) fn modify_rq(
        &mut self,
        rqn: u32,
        from: RqState,
        to: RqState,
    ) -> Result<(), DriverError> {
        let mut modify = input(Opcode::ModifyRq, 0, ModifyRqIn::<&[u8]>::SIZE);
        if let Ok(mut m) = ModifyRqIn::new(&mut modify[..]) {
            m.set_rq_state(from as u8).set_rqn(rqn);
            m.ctx_mut().set_state(to as u8);
        }
        self.dev.exec(&modify, 16).map(|_| ())
    }
}

/// A queue named by its device object.
#[derive(Clone, Copy)]
pub(crate) enum WorkQueue {
    Send(u32),
    Receive(u32),
}

/// What recovery does to the host side of a queue once the device has it in RST.
pub(crate) trait Recoverable {
    /// Takes the completions left on the CQ and returns the buffers the ring held to the
    /// pool; returns (completions taken, buffers flushed).
    fn drain_and_flush(&mut self) -> (usize, usize);
    /// Starts the ring again.
    fn restart(&mut self);
}

impl<B: Backend> Recoverable for TxQueue<B> {
    fn drain_and_flush(&mut self) -> (usize, usize) {
        (self.drain_completions(), self.flush_in_flight())
    }

    fn restart(&mut self) {
        TxQueue::restart(self);
    }
}

impl<B: Backend> Recoverable for RxQueue<B> {
    fn drain_and_flush(&mut self) -> (usize, usize) {
        (self.drain_completions(), self.flush_posted())
    }

    fn restart(&mut self) {
        RxQueue::restart(self);
    }
}

impl<B: Backend> Recoverable for SharedRxQueue<B> {
    fn drain_and_flush(&mut self) -> (usize, usize) {
        self.drain_completions()
    }

    fn restart(&mut self) {
        SharedRxQueue::restart(self);
    }
}
