//! Queue recovery after an error completion or a completion the driver refused, as Linux mlx5e
//! recovers its send and receive queues: stop the device using the ring (MODIFY to RST from
//! whichever state the device has it in), take whatever completions are left, give every buffer
//! the ring still held back to its pool (counted as flushed), start the ring from index 0 and
//! move it back to RDY. Nothing a queue held is lost or handed out twice: buffers are freed only
//! once the device can no longer reach them through the queue.

use crate::backend::Backend;
use crate::cmd::input;
use crate::device::DeviceRecovery;
use crate::error::DriverError;
use crate::port::{Port, Queues};
use crate::queue::{RxQueue, TxQueue};
use crate::shared::SharedRxQueue;
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
        for mut q in queues.0.drain(..) {
            flushed += q.flush_in_flight();
        }
        for mut q in queues.1.drain(..) {
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

    /// Recovers a send queue that reports [`TxQueue::in_error`] (or any send queue of this
    /// port: a healthy one is reset the same way). In-flight buffers are returned to their
    /// pool and counted in the queue's `errors` (the port's `oerrors`) and `flushed`.
    ///
    /// # Errors
    ///
    /// [`DriverError::Invalid`] when the queue is not one of this port's; a command error when
    /// the device refuses the state changes (the queue then stays in error, its buffers held).
    pub fn recover_tx(&mut self, q: &mut TxQueue<B>) -> Result<Recovery, DriverError> {
        self.recover_queue(WorkQueue::Send(q.sqn), q)
    }

    /// Recovers a receive queue that reports [`RxQueue::in_error`] (or any of this port's
    /// receive queues). Posted buffers return to the pool (counted in `flushed`); the ring is
    /// refilled. Frames the device received while the queue was in error were dropped by the
    /// device and show in the port's `imissed`/`ierrors`, not here.
    ///
    /// # Errors
    ///
    /// As [`Port::recover_tx`].
    pub fn recover_rx(&mut self, q: &mut RxQueue<B>) -> Result<Recovery, DriverError> {
        self.recover_queue(WorkQueue::Receive(q.rqn), q)
    }

    /// Recovers a queue of the shared receive ring that reports
    /// [`SharedRxQueue::in_error`] (or any of this port's shared-ring queues): its RQ goes to
    /// RST and back to RDY; the completions left on its CQ are taken, and the buffers they name
    /// go back to the pool (counted in `flushed`). The ring itself stays ready: its other
    /// queues never stop, and its posted buffers stay posted. A ring the device moved to error
    /// is flushed with [`Port::flush_shared_ring`].
    ///
    /// # Errors
    ///
    /// As [`Port::recover_tx`].
    pub fn recover_shared_rx(&mut self, q: &mut SharedRxQueue<B>) -> Result<Recovery, DriverError> {
        self.recover_queue(WorkQueue::Receive(q.rqn), q)
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
        let (owned, what, number) = match wq {
            WorkQueue::Send(n) => (self.sqs.contains(&n), "send", n),
            WorkQueue::Receive(n) => (self.rqs.contains(&n), "receive", n),
        };
        if !owned {
            return Err(DriverError::Invalid(format!(
                "{what} queue {number:#x} is not one of this port's"
            )));
        }
        let device_state = match self.modify_wq(wq, RqState::Err, RqState::Rst) {
            Ok(()) => RqState::Err,
            Err(first) => match self.modify_wq(wq, RqState::Rdy, RqState::Rst) {
                Ok(()) => RqState::Rdy,
                Err(_) => return Err(first),
            },
        };
        let (drained_cqes, flushed) = q.drain_and_flush();
        self.modify_wq(wq, RqState::Rst, RqState::Rdy)?;
        q.restart();
        Ok(Recovery {
            flushed,
            drained_cqes,
            device_state,
            took: start.elapsed(),
        })
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
enum WorkQueue {
    Send(u32),
    Receive(u32),
}

/// What recovery does to the host side of a queue once the device has it in RST.
trait Recoverable {
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
