//! A port's shared receive ring: the RMP and the RQs drawing from it (created by
//! [`Port::start`] when [`crate::PortConfig::shared_rx`] is set), its low watermark, its state
//! and the states of its queues, and flushing its buffers back to the pool once the device can
//! no longer write them.

use super::{Port, SharedQueues, NO_RQ};
use crate::backend::Backend;
use crate::control::{input, output_too_short, QCounterSet, RmpStatus};
use crate::error::{DriverError, QueueKind};
use crate::port::restart::{RestartStage, SharedRestart, SharedRingRestart};
use crate::port::wq::{fill_cyclic_wq, ring_pages};
use crate::rx::{SharedRing, SharedRxConfig, SharedRxQueue, SharedRxRing};
use cxdirect_dma::DmaRegion;
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::wq::{
    CreateRmpIn, CreateRmpOut, CreateRqIn, CreateRqOut, ModifyRmpIn, QueryRqIn, QueryRqOut,
    RmpState, RqState,
};
use std::sync::Arc;
use std::time::Instant;

impl<B: Backend> Port<B> {
    /// CREATE_RMP, then one CQ and RQ (on the RMP) per receive queue, then the first refill.
    pub(crate) fn create_shared_rx(
        &mut self,
        pd: u32,
        config: SharedRxConfig,
    ) -> Result<(), DriverError> {
        let entries = config.ring_size;
        let log = entries.trailing_zeros() as u8;
        let ring = self.dma(16 * entries as usize)?;
        let dbr = self.dma(64)?;
        let rmpn = self.create_rmp(pd, &ring, &dbr, log, config.limit)?;
        let shared = Arc::new(SharedRing::new(rmpn, log, ring, dbr, self.pool.clone())?);
        self.shared = Some(shared.clone());
        let (uar, _, _) = self.dev.resources();
        let mut queues = Vec::new();
        for index in 0..self.config().rx_queues {
            let (eqn, interrupt) = self.rx_interrupt(index, uar)?;
            // Each queue's CQ can hold every buffer of the ring: completions never overrun it.
            let cq = self.create_cq(entries, uar, eqn, false, false)?;
            let rqn = self.create_shared_rq(cq.cqn(), rmpn)?;
            self.rqs.push(rqn);
            queues.push(SharedRxQueue::new(
                self.dev.backend_arc().clone(),
                shared.clone(),
                cq,
                rqn,
                Self::register_stats(&mut self.rx_stats),
                interrupt,
                self.quarantine.clone(),
            ));
        }
        shared.refill(u32::MAX);
        self.shared_handles = Some(SharedQueues {
            ring: SharedRxRing::new(self.dev.backend_arc().clone(), shared),
            rx: queues,
        });
        Ok(())
    }

    /// CREATE_RMP (ready) over `ring` (16-byte WQEs, `2^log` of them) and its doorbell record,
    /// with low watermark `limit`; registers the ring for its events. Returns the RMP number.
    fn create_rmp(
        &mut self,
        pd: u32,
        ring: &DmaRegion,
        dbr: &DmaRegion,
        log: u8,
        limit: u32,
    ) -> Result<u32, DriverError> {
        let pages = ring_pages(ring);
        let mut cmd = input(
            Opcode::CreateRmp,
            0,
            CreateRmpIn::<&[u8]>::SIZE + 8 * pages.len(),
        );
        {
            let mut c = CreateRmpIn::new(&mut cmd[..])
                .map_err(|_| DriverError::layout(Opcode::CreateRmp, "input"))?;
            let mut ctx = c.ctx_mut();
            ctx.set_state(RmpState::Rdy as u8)
                .set_basic_cyclic_rcv_wqe(true);
            fill_cyclic_wq(ctx.wq_mut(), pd, ring, dbr, log);
            ctx.wq_mut().set_lwm(limit as u16);
            for (i, iova) in pages.enumerate() {
                let _ = c.set_pas(i, iova);
            }
        }
        let out = self.dev.exec(&cmd, CreateRmpOut::<&[u8]>::SIZE)?;
        let rmpn = CreateRmpOut::new(&out[..])
            .map_err(output_too_short)?
            .rmpn();
        self.dev.register_shared_ring(rmpn, 1 << log);
        Ok(rmpn)
    }

    /// CREATE_RQ drawing from RMP `rmpn` and completing on CQ `cqn`, moved to ready.
    fn create_shared_rq(&mut self, cqn: u32, rmpn: u32) -> Result<u32, DriverError> {
        let mut cmd = input(Opcode::CreateRq, 0, CreateRqIn::<&[u8]>::SIZE);
        {
            let mut c = CreateRqIn::new(&mut cmd[..])
                .map_err(|_| DriverError::layout(Opcode::CreateRq, "input"))?;
            // Frames arrive whole, VLAN tags in place (`vsd`), as on the port's own RQs.
            c.ctx_mut()
                .set_cqn(cqn)
                .set_flush_in_error_en(true)
                .set_vsd(true)
                .set_mem_rq_type(1)
                .set_rmpn(rmpn)
                .set_counter_set_id(self.q_counter.as_ref().map_or(0, QCounterSet::id));
        }
        let out = self.dev.exec(&cmd, CreateRqOut::<&[u8]>::SIZE)?;
        let rqn = CreateRqOut::new(&out[..]).map_err(output_too_short)?.rqn();
        if let Err(e) = self.modify_rq(rqn, RqState::Rst, RqState::Rdy) {
            let _ = self.destroy(Opcode::DestroyRq, rqn, 8);
            return Err(e);
        }
        Ok(rqn)
    }

    /// The shared ring's handles: the ring, to refill, and its queues, to receive from. `Some`
    /// once, for a port started with [`crate::PortConfig::shared_rx`].
    pub fn take_shared_rx(&mut self) -> Option<SharedQueues<B>> {
        self.shared_handles.take()
    }

    fn shared_ring(&self) -> Result<&Arc<SharedRing>, DriverError> {
        self.shared.as_ref().ok_or(DriverError::NotEnabled {
            what: "a shared receive ring on this port",
            how: "set PortConfig::shared_rx",
        })
    }

    /// Arms the shared ring's low watermark (MODIFY_RMP `lwm`): when the device's posted
    /// buffers fall below `limit` it raises one [`crate::Event::SharedRingLow`]; the limit then
    /// reads 0 until armed again. `limit` is 1..ring size; 0 disarms.
    pub fn set_shared_limit(&mut self, limit: u32) -> Result<(), DriverError> {
        let ring = self.shared_ring()?.clone();
        let size = 1u32 << ring.log_size();
        if limit >= size {
            return Err(DriverError::config(
                "limit",
                limit,
                format!("must be below the ring size {size}; 0 disarms"),
            ));
        }
        self.modify_rmp(ring.rmpn(), RmpState::Rdy, Some(limit as u16))
    }

    fn modify_rmp(
        &mut self,
        rmpn: u32,
        to: RmpState,
        limit: Option<u16>,
    ) -> Result<(), DriverError> {
        let mut cmd = input(Opcode::ModifyRmp, 0, ModifyRmpIn::<&[u8]>::SIZE);
        {
            let mut m = ModifyRmpIn::new(&mut cmd[..])
                .map_err(|_| DriverError::layout(Opcode::ModifyRmp, "input"))?;
            m.set_rmp_state(RmpState::Rdy as u8).set_rmpn(rmpn);
            m.bitmask_mut().set_lwm(limit.is_some());
            let mut ctx = m.ctx_mut();
            ctx.set_state(to as u8);
            ctx.wq_mut().set_lwm(limit.unwrap_or(0));
        }
        self.dev.exec(&cmd, 16).map(|_| ())
    }

    /// The shared ring as the device sees it: state, armed limit (0 after it fired), posted
    /// buffers. One firmware command.
    pub fn shared_ring_status(&mut self) -> Result<RmpStatus, DriverError> {
        let rmpn = self.shared_ring()?.rmpn();
        self.dev.query_rmp(rmpn)
    }

    /// Moves the shared ring to the error state (MODIFY_RMP RDY→ERR): the device stops taking
    /// its buffers and every queue drawing from it goes to error too. Then
    /// [`Port::flush_shared_ring`] returns the posted buffers to the pool.
    pub fn stop_shared_ring(&mut self) -> Result<(), DriverError> {
        let rmpn = self.shared_ring()?.rmpn();
        self.modify_rmp(rmpn, RmpState::Err, None)
    }

    /// Returns every buffer still posted on the shared ring to the pool, once the device says
    /// the ring is in error (it can no longer write them); returns how many. Take the queues'
    /// pending completions first: those not yet taken are flushed with the rest. The ring
    /// posts nothing afterwards until [`Port::restart_shared_ring`] creates it again.
    pub fn flush_shared_ring(&mut self) -> Result<usize, DriverError> {
        let ring = self.shared_ring()?.clone();
        let status = self.dev.query_rmp(ring.rmpn())?;
        if status.state != RmpState::Err {
            return Err(DriverError::WrongState {
                what: "the shared receive ring",
                state: format!(
                    "{:?} (the device may still write its buffers)",
                    status.state
                ),
                needed: "in error: stop it first (Port::stop_shared_ring)",
            });
        }
        Ok(ring.flush())
    }

    /// True once the device reported the shared ring broken: an SRQ catastrophic error event
    /// named its RMP. The ring and every queue drawing from it are then in error and receive
    /// nothing until [`Port::restart_shared_ring`]. Takes no command (reads the async EQ), so
    /// it is cheap enough to call once per burst loop; stays true until the restart.
    pub fn shared_ring_failed(&mut self) -> bool {
        let failed = self.dev.take_failed_rings();
        if let Some(ring) = self.shared.as_ref() {
            if failed.contains(&ring.rmpn()) {
                self.shared_failed = true;
            }
        }
        self.shared_failed
    }

    /// Creates the shared ring again, for a ring the device moved to error on its own
    /// ([`Port::shared_ring_failed`]) or that [`Port::stop_shared_ring`] stopped (and
    /// [`Port::flush_shared_ring`] may have flushed): a ring in error cannot simply be moved
    /// back to ready, since which of its WQEs the device had consumed is not known.
    ///
    /// In order: steering is taken down (it names the queues' RQs), each RQ is destroyed (the
    /// device stops writing through it) and the completions left on its CQ are taken, returning
    /// the buffers they name; the RMP is destroyed and every buffer still posted goes back to
    /// the pool (counted in `flushed`). A new RMP is then created over the same ring memory,
    /// with the configured limit, new RQs on the queues' own CQs, the ring refilled and
    /// steering built again. `ring` and `queues` are the handles [`Port::take_shared_rx`] gave
    /// out, every queue of the ring; they stay valid (the queues' RQ numbers and the ring's id
    /// change). Frames arriving meanwhile are dropped by the device and counted there.
    ///
    /// A restart that fails at a step (the device refused a command) stays stopped there, with
    /// nothing lost: every buffer is either still posted on a ring the device may write, or
    /// back in the pool. Calling it again with the same handles resumes at that step; the
    /// figures it then reports cover the whole restart, and `took` runs from the first call.
    /// Until it has finished, [`Port::recover_shared_rx`] refuses the ring's queues.
    ///
    /// # Errors
    ///
    /// [`DriverError::NotEnabled`] when the port has no shared ring,
    /// [`DriverError::WrongHandles`] when `handles` are not its own or not every queue is given; the pool's dmabuf error when its memory was revoked;
    /// a command error when the device refuses a step (call again to resume; or
    /// [`Port::recover`] rebuilds the whole port).
    pub fn restart_shared_ring(
        &mut self,
        ring: &SharedRxRing<B>,
        queues: &mut [SharedRxQueue<B>],
    ) -> Result<SharedRingRestart, DriverError> {
        let shared = self.shared_ring()?.clone();
        let foreign = !Arc::ptr_eq(ring.shared_ring(), &shared)
            || queues.iter().any(|q| !q.draws_from(&shared));
        if foreign || queues.len() != usize::from(self.config().rx_queues) {
            return Err(DriverError::WrongHandles {
                needed: format!(
                    "restarting the shared ring takes its handle and all {} of its queues, as \
                     Port::take_shared_rx gave them",
                    self.config().rx_queues
                ),
            });
        }
        let places = self.shared_queue_places(queues)?;
        self.refuse_revoked_pool()?;
        if self.shared_restart.is_none() {
            let started = Instant::now();
            let device_state = self.dev.query_rmp(shared.rmpn())?.state;
            self.shared_restart = Some(SharedRestart {
                places: queues.iter().map(|q| q.cqn()).zip(places.clone()).collect(),
                stage: RestartStage::TearingDown,
                device_state,
                flushed: 0,
                drained_cqes: 0,
                started,
            });
        }
        self.resume_shared_restart(&shared, queues, &places)?;
        let done = self.shared_restart.take().ok_or(DriverError::Internal(
            "the shared ring's restart lost its progress",
        ))?;
        Ok(SharedRingRestart {
            flushed: done.flushed,
            drained_cqes: done.drained_cqes,
            device_state: done.device_state,
            took: done.started.elapsed(),
        })
    }

    /// Each queue's place in `rqs` (RSS spreads over the RQs by position): found by its RQ
    /// number, or, while a restart is unfinished, by its CQ number (which the restart keeps).
    fn shared_queue_places(&self, queues: &[SharedRxQueue<B>]) -> Result<Vec<usize>, DriverError> {
        queues
            .iter()
            .map(|q| {
                let at = match &self.shared_restart {
                    Some(progress) => progress.place_of(q.cqn()),
                    None => self.rqs.iter().position(|&n| n == q.rqn()),
                };
                at.ok_or(DriverError::NoSuchQueue {
                    kind: QueueKind::Receive,
                    number: q.rqn(),
                })
            })
            .collect()
    }

    /// [`Port::restart_shared_ring`]'s commands from the stage it had reached; an RQ destroyed
    /// and not yet replaced leaves [`NO_RQ`] at its place in `rqs`.
    fn resume_shared_restart(
        &mut self,
        ring: &Arc<SharedRing>,
        queues: &mut [SharedRxQueue<B>],
        places: &[usize],
    ) -> Result<(), DriverError> {
        if self.restart_stage() == Some(RestartStage::TearingDown) {
            self.destroy_steering()?;
            for (q, &at) in queues.iter_mut().zip(places) {
                if self.rqs[at] == NO_RQ {
                    continue; // destroyed by an earlier call
                }
                self.destroy(Opcode::DestroyRq, q.rqn(), 8)?;
                self.rqs[at] = NO_RQ;
                let (drained, returned) = q.drain_completions();
                self.restart_progress(|p| {
                    p.drained_cqes += drained;
                    p.flushed += returned;
                });
            }
            let old_rmpn = ring.rmpn();
            self.destroy(Opcode::DestroyRmp, old_rmpn, 8)?;
            self.dev.unregister_shared_ring(old_rmpn);
            let flushed = ring.flush();
            self.restart_progress(|p| {
                p.flushed += flushed;
                p.stage = RestartStage::RmpDestroyed;
            });
        }
        if self.restart_stage() == Some(RestartStage::RmpDestroyed) {
            let (_, pd, _) = self.dev.resources();
            let limit = self.config().shared_rx.map_or(0, |c| c.limit);
            let (memory, dbr) = ring.memory();
            let rmpn = self.create_rmp(pd, memory, dbr, ring.log_size(), limit)?;
            ring.reopen(rmpn);
            self.shared_failed = false;
            self.restart_progress(|p| p.stage = RestartStage::CreatingQueues);
        }
        if self.restart_stage() == Some(RestartStage::CreatingQueues) {
            let rmpn = ring.rmpn();
            for (q, &at) in queues.iter_mut().zip(places) {
                if self.rqs[at] != NO_RQ {
                    continue; // created by an earlier call
                }
                let rqn = self.create_shared_rq(q.cqn(), rmpn)?;
                q.set_rqn(rqn);
                self.rqs[at] = rqn;
                q.restart();
            }
            ring.refill(u32::MAX);
            self.restart_progress(|p| p.stage = RestartStage::Steering);
        }
        // A failed earlier attempt may have left part of the steering built.
        self.destroy_steering()?;
        let (_, _, td) = self.dev.resources();
        self.create_steering(td)
    }

    fn restart_stage(&self) -> Option<RestartStage> {
        self.shared_restart.as_ref().map(|p| p.stage)
    }

    fn restart_progress(&mut self, update: impl FnOnce(&mut SharedRestart)) {
        if let Some(progress) = self.shared_restart.as_mut() {
            update(progress);
        }
    }

    /// Refuses to touch a queue of the shared ring while its restart is unfinished (its RQ may
    /// be destroyed, or not yet created).
    pub(crate) fn refuse_unfinished_restart(&self) -> Result<(), DriverError> {
        match self.shared_restart {
            Some(_) => Err(DriverError::WrongState {
                what: "the shared receive ring",
                state: "partly restarted (a restart stopped partway)".into(),
                needed: "restarted: call Port::restart_shared_ring again with the ring's \
                         handles to finish it",
            }),
            None => Ok(()),
        }
    }

    /// The state of receive queue `rqn` as the device reports it (QUERY_RQ).
    pub fn rx_queue_state(&mut self, rqn: u32) -> Result<RqState, DriverError> {
        if rqn == NO_RQ || !self.rqs.contains(&rqn) {
            return Err(DriverError::NoSuchQueue {
                kind: QueueKind::Receive,
                number: rqn,
            });
        }
        let mut cmd = input(Opcode::QueryRq, 0, QueryRqIn::<&[u8]>::SIZE);
        QueryRqIn::new(&mut cmd[..])
            .map(|mut q| {
                q.set_rqn(rqn);
            })
            .ok();
        let out = self.dev.exec(&cmd, QueryRqOut::<&[u8]>::SIZE)?;
        let raw = QueryRqOut::new(&out[..])
            .map(|o| o.rq_context().state())
            .map_err(|_| DriverError::BadDeviceValue {
                what: "QUERY_RQ output length",
                value: out.len() as u64,
            })?;
        RqState::try_from(raw).map_err(|_| DriverError::BadDeviceValue {
            what: "RQ state (QUERY_RQ)",
            value: u64::from(raw),
        })
    }
}
