//! A port's shared receive ring: the RMP and the RQs drawing from it (created by
//! [`Port::start`] when [`crate::PortConfig::shared_rx`] is set), its low watermark, its state
//! and the states of its queues, and flushing its buffers back to the pool once the device can
//! no longer write them.

use crate::backend::Backend;
use crate::cmd::input;
use crate::device::RmpStatus;
use crate::error::DriverError;
use crate::port::{invalid, out_u32, Port, SharedQueues};
use crate::qcounter::QCounterSet;
use crate::shared::{SharedRing, SharedRxConfig, SharedRxQueue, SharedRxRing};
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::wq::{
    CreateRmpIn, CreateRqIn, ModifyRmpIn, QueryRqIn, QueryRqOut, RmpState, RqState,
};
use std::sync::Arc;

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
        let page = ring.page_size();
        let pages = ring.len().div_ceil(page);
        let mut cmd = input(Opcode::CreateRmp, 0, CreateRmpIn::<&[u8]>::SIZE + 8 * pages);
        {
            let mut c = CreateRmpIn::new(&mut cmd[..]).map_err(|_| invalid("RMP input"))?;
            let mut ctx = c.ctx_mut();
            ctx.set_state(RmpState::Rdy as u8)
                .set_basic_cyclic_rcv_wqe(true);
            ctx.wq_mut()
                .set_wq_type(1)
                .set_pd(pd)
                .set_dbr_addr(dbr.iova())
                .set_log_wq_stride(4)
                .set_log_wq_pg_sz((page.trailing_zeros() - 12) as u8)
                .set_log_wq_sz(log)
                .set_lwm(config.limit as u16);
            for i in 0..pages {
                let _ = c.set_pas(i, ring.iova() + (i * page) as u64);
            }
        }
        let rmpn = out_u32(&self.dev.exec(&cmd, 16)?);
        self.dev.register_shared_ring(rmpn, entries);
        let shared = Arc::new(SharedRing::new(rmpn, log, ring, dbr, self.pool.clone()));
        self.shared = Some(shared.clone());
        let (uar, _, _) = self.dev.resources();
        let mut queues = Vec::new();
        for index in 0..self.config().rx_queues {
            let (eqn, interrupt) = self.rx_interrupt(index, uar)?;
            // Each queue's CQ can hold every buffer of the ring: completions never overrun it.
            let cq = self.create_cq(entries, uar, eqn)?;
            let mut cmd = input(Opcode::CreateRq, 0, CreateRqIn::<&[u8]>::SIZE);
            {
                let mut c = CreateRqIn::new(&mut cmd[..]).map_err(|_| invalid("RQ input"))?;
                c.ctx_mut()
                    .set_cqn(cq.cqn)
                    .set_flush_in_error_en(true)
                    .set_mem_rq_type(1)
                    .set_rmpn(rmpn)
                    .set_counter_set_id(self.q_counter.as_ref().map_or(0, QCounterSet::id));
            }
            let rqn = out_u32(&self.dev.exec(&cmd, 16)?);
            self.rqs.push(rqn);
            self.modify_rq(rqn, RqState::Rst, RqState::Rdy)?;
            queues.push(SharedRxQueue {
                _backend: self.dev.backend_arc().clone(),
                ring: shared.clone(),
                cq,
                rqn,
                stats: Default::default(),
                published: Self::register_stats(&mut self.rx_stats),
                interrupt,
                in_error: false,
            });
        }
        shared.refill(u32::MAX);
        self.shared_handles = Some((
            SharedRxRing {
                _backend: self.dev.backend_arc().clone(),
                ring: shared,
            },
            queues,
        ));
        Ok(())
    }

    /// The shared ring's handles: the ring, to refill, and its queues, to receive from. `Some`
    /// once, for a port started with [`crate::PortConfig::shared_rx`].
    pub fn take_shared_rx(&mut self) -> Option<SharedQueues<B>> {
        self.shared_handles.take()
    }

    fn shared_ring(&self) -> Result<&Arc<SharedRing>, DriverError> {
        self.shared.as_ref().ok_or_else(|| {
            invalid("the port has no shared receive ring: set PortConfig::shared_rx")
        })
    }

    /// Arms the shared ring's low watermark (MODIFY_RMP `lwm`): when the device's posted
    /// buffers fall below `limit` it raises one [`crate::Event::SharedRingLow`]; the limit then
    /// reads 0 until armed again. `limit` is 1..ring size; 0 disarms.
    pub fn set_shared_limit(&mut self, limit: u32) -> Result<(), DriverError> {
        let ring = self.shared_ring()?.clone();
        let size = 1u32 << ring.log_size();
        if limit >= size {
            return Err(invalid(format!(
                "shared ring limit {limit} must be below the ring size {size}"
            )));
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
            let mut m = ModifyRmpIn::new(&mut cmd[..]).map_err(|_| invalid("RMP input"))?;
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
    /// posts nothing afterwards.
    pub fn flush_shared_ring(&mut self) -> Result<usize, DriverError> {
        let ring = self.shared_ring()?.clone();
        let status = self.dev.query_rmp(ring.rmpn())?;
        if status.state != RmpState::Err {
            return Err(invalid(format!(
                "shared ring {} is {:?}: the device may still write its buffers; stop it first \
                 (Port::stop_shared_ring)",
                ring.rmpn(),
                status.state
            )));
        }
        Ok(ring.flush())
    }

    /// The state of receive queue `rqn` as the device reports it (QUERY_RQ).
    pub fn rx_queue_state(&mut self, rqn: u32) -> Result<RqState, DriverError> {
        if !self.rqs.contains(&rqn) {
            return Err(invalid(format!("RQ {rqn} is not a queue of this port")));
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
