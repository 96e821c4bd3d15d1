//! Stopping a port: its objects destroyed in reverse order of creation, or forgotten after a
//! function reset.

use super::{Port, Queues, NO_RQ};
use crate::backend::Backend;
use crate::control::Device;
use crate::error::DriverError;
use cxdirect_hw::cmd::Opcode;

impl<B: Backend> Port<B> {
    pub(super) fn destroy_objects(&mut self) -> Result<(), DriverError> {
        let mut first_err = self.destroy_steering().err();
        // Flow rules' TIRs name split and plain RQs alike.
        if let Err(e) = self.flows.destroy_all(&mut self.dev) {
            first_err.get_or_insert(e);
        }
        if let Err(e) = self.destroy_splits() {
            first_err.get_or_insert(e);
        }
        let mut keep = |r: Result<(), DriverError>| {
            if let Err(e) = r {
                first_err.get_or_insert(e);
            }
        };
        for rqn in std::mem::take(&mut self.rqs)
            .into_iter()
            .filter(|&n| n != NO_RQ)
        {
            keep(self.destroy(Opcode::DestroyRq, rqn, 8));
        }
        // The shared ring after its queues (the device refuses it while they exist); its
        // buffers go back to the pool only once the device can no longer write them. An
        // unfinished restart may have destroyed it already (and flushed it).
        self.shared_handles = None;
        let rmp_destroyed = self
            .shared_restart
            .take()
            .is_some_and(|r| r.rmp_destroyed());
        if let Some(ring) = self.shared.take().filter(|_| !rmp_destroyed) {
            let rmpn = ring.rmpn();
            match self.destroy(Opcode::DestroyRmp, rmpn, 8) {
                Ok(()) => {
                    ring.flush();
                    self.dev.unregister_shared_ring(rmpn);
                }
                Err(e) => keep(Err(e)),
            }
        }
        if let Some(set) = self.q_counter.take() {
            keep(set.free(&mut self.dev));
        }
        for sqn in std::mem::take(&mut self.sqs) {
            keep(self.destroy(Opcode::DestroySq, sqn, 8));
        }
        for cqn in std::mem::take(&mut self.cqs) {
            keep(self.destroy(Opcode::DestroyCq, cqn, 8));
        }
        for eqn in std::mem::take(&mut self.eqs) {
            keep(self.dev.destroy_eq(eqn));
        }
        if self.tis != 0 {
            let tis = std::mem::take(&mut self.tis);
            keep(self.destroy(Opcode::DestroyTis, tis, 8));
        }
        for uar in std::mem::take(&mut self.uars) {
            keep(self.destroy(Opcode::DeallocUar, uar, 8));
        }
        if let Some(key) = self.pool_key.take() {
            keep(key.deregister(&mut self.dev));
        }
        if let Some(key) = self.stride_pool_key.take() {
            keep(key.deregister(&mut self.dev));
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// After a function reset: the device holds none of the port's objects any more, so their
    /// numbers are forgotten, and buffers the shared ring and the quarantine held go back to
    /// the pool; returns how many.
    pub(crate) fn forget_objects_after_reset(&mut self) -> usize {
        self.steering.forget();
        self.flows.forget();
        self.splits.clear();
        self.rqs.clear();
        self.shared_handles = None;
        let mut flushed = self.shared.take().map_or(0, |ring| ring.flush());
        self.q_counter = None;
        self.sqs.clear();
        self.cqs.clear();
        self.failed_cqs.clear();
        self.shared_failed = false;
        self.shared_restart = None;
        self.eqs.clear();
        self.tis = 0;
        self.uars.clear();
        self.pool_key = None;
        self.stride_pool_key = None;
        self.tx_stats.clear();
        self.rx_stats.clear();
        flushed += self
            .quarantine
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .release();
        flushed
    }

    /// Creates the port's objects again on a re-initialised device, as [`Port::start`] did;
    /// undoes what it created when a step fails.
    pub(crate) fn rebuild(&mut self) -> Result<Queues<B>, DriverError> {
        self.build().inspect_err(|_| {
            let _ = self.destroy_objects();
        })
    }

    /// Stops the port: destroys steering, queues, CQs, the TIS and the pool's memory key, in
    /// that order, then releases buffers queue handles left behind. Queue handles still held
    /// keep their rings until dropped (the device no longer uses them). Returns the device.
    pub fn close(mut self) -> Result<Device<B>, DriverError> {
        let result = self.destroy_objects();
        // Only now may buffers the device could have touched go back to the pool.
        self.quarantine
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .release();
        result?;
        Ok(self.dev)
    }
}
