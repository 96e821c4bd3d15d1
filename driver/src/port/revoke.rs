//! Taking a port's pool memory away from the device when the exporter of its dmabuf asks for
//! it back, and giving the port new memory afterwards. The order keeps the device off the
//! memory: queues stopped, completions taken, buffers returned, and only then keys destroyed
//! and the range unmapped.

use super::create::{Port, Queues};
use super::recover::{Recoverable, WorkQueue};
use crate::backend::Backend;
use crate::error::DriverError;
use crate::mem::Mempool;
use cxdirect_dma::DmaBufMapping;
use cxdirect_hw::wq::RqState;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What taking a port's pool memory away from the device ([`Port::revoke_pool`]) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolRevocation {
    /// Memory keys over the memory that were destroyed.
    pub keys: usize,
    /// Buffers the stopped queues held (posted for receive, or in flight) that went back to
    /// the pool without carrying a packet.
    pub flushed: usize,
    /// Completions taken off the queues' CQs without being delivered.
    pub drained_cqes: usize,
    /// Wall time from the first queue stopped to the memory unmapped.
    pub took: Duration,
}

impl<B: Backend> Port<B> {
    /// True when the pool lives in a dmabuf that was revoked ([`Port::revoke_pool`], or
    /// [`crate::Device::revoke_memory`] directly): the queues cannot restart until
    /// [`Port::replace_pool_memory`].
    pub fn pool_revoked(&self) -> bool {
        self.pool.dmabuf().is_some_and(|m| m.is_revoked())
    }

    /// True when the exporter of the pool's dmabuf asked for its memory back
    /// ([`cxdirect_dma::DmaBufMapping::request_revoke`]) and the port still uses it: call
    /// [`Port::revoke_pool`]. Cheap (one atomic load): meant for the burst loop.
    pub fn pool_revoke_requested(&self) -> bool {
        self.pool
            .dmabuf()
            .is_some_and(|m| m.revoke_requested() && !m.is_revoked())
    }

    pub(crate) fn refuse_revoked_pool(&self) -> Result<(), DriverError> {
        match self.pool.dmabuf() {
            Some(m) if m.is_revoked() => Err(cxdirect_dma::DmaBufError::Revoked {
                exporter: m.dmabuf().exporter().to_string(),
            }
            .into()),
            _ => Ok(()),
        }
    }

    /// Takes the pool's dmabuf away from the device, as the exporter asked
    /// ([`Port::pool_revoke_requested`]) or on the application's own initiative, in the order
    /// that keeps the device off the memory: every queue is stopped first (MODIFY to RST), the
    /// completions left on its CQ are taken without being delivered (their packets were in
    /// the memory going away; counted in `drained_cqes`), every buffer the queues held goes
    /// back to the pool once (counted in `flushed`; send buffers also in `errors`), and only
    /// then are the keys over the memory destroyed and the range unmapped
    /// ([`crate::Device::revoke_memory`]). The queues stay stopped (`in_error`; bursts move
    /// nothing, and [`Port::recover_tx`]/[`Port::recover_rx`] refuse) until
    /// [`Port::replace_pool_memory`] gives the port new memory.
    ///
    /// # Errors
    ///
    /// [`DriverError::Invalid`] when the pool is not in a dmabuf or the port runs a shared
    /// receive ring (recover that one with [`Port::recover`] after the revocation);
    /// [`DriverError::DmaBuf`] when it was already revoked or is pinned (nothing stopped); a
    /// command error when a queue cannot be stopped or a key destroyed (the memory then stays
    /// mapped).
    pub fn revoke_pool(&mut self, queues: &mut Queues<B>) -> Result<PoolRevocation, DriverError> {
        let start = Instant::now();
        let Some(mapping) = self.pool.dmabuf().cloned() else {
            return Err(DriverError::Invalid(
                "the port's pool is not in a dmabuf: nothing to revoke".into(),
            ));
        };
        if self.shared.is_some() {
            return Err(DriverError::Invalid(
                "revoking the pool of a port with a shared receive ring is not supported".into(),
            ));
        }
        self.refuse_revoked_pool()?;
        if mapping.mode() == cxdirect_dma::DmaBufMode::Pinned {
            return Err(cxdirect_dma::DmaBufError::Pinned.into());
        }
        let (mut drained_cqes, mut flushed) = (0, 0);
        for q in queues.tx.iter_mut() {
            self.stop_wq(WorkQueue::Send(q.sqn()))?;
            let (d, f) = q.drain_and_flush();
            (drained_cqes, flushed) = (drained_cqes + d, flushed + f);
            q.stop();
        }
        for q in queues.rx.iter_mut() {
            self.stop_wq(WorkQueue::Receive(q.rqn()))?;
            let (d, f) = q.drain_and_flush();
            (drained_cqes, flushed) = (drained_cqes + d, flushed + f);
            q.stop();
        }
        let keys = self.dev.revoke_memory(&mapping)?;
        // The pool's key went with the revocation.
        self.pool_key = None;
        Ok(PoolRevocation {
            keys,
            flushed,
            drained_cqes,
            took: start.elapsed(),
        })
    }

    /// Gives a port whose pool memory was revoked new memory: `mapping` (the dmabuf imported
    /// and mapped again, or another one) becomes the pool, carved into buffers of the same
    /// size and registered under a new key, and every queue restarts from index 0 (receive
    /// rings refilled from the new pool). Buffers of the old pool the application still
    /// holds stay valid objects whose memory is gone (reads fail); they return to the old pool
    /// when dropped. Queue counters carry on. Returns the time it took.
    ///
    /// # Errors
    ///
    /// [`DriverError::Invalid`] when the pool was not revoked (use [`Port::revoke_pool`]
    /// first) or `mapping` holds no buffer; [`DriverError::DmaBuf`] for a revoked `mapping`;
    /// a command error when the key or a queue's state change fails (the queues then stay
    /// stopped; call again).
    pub fn replace_pool_memory(
        &mut self,
        queues: &mut Queues<B>,
        mapping: Arc<DmaBufMapping>,
    ) -> Result<Duration, DriverError> {
        let start = Instant::now();
        if !self.pool_revoked() {
            return Err(DriverError::Invalid(
                "the pool's memory was not revoked: revoke it with Port::revoke_pool first".into(),
            ));
        }
        if mapping.is_revoked() {
            return Err(cxdirect_dma::DmaBufError::Revoked {
                exporter: mapping.dmabuf().exporter().to_string(),
            }
            .into());
        }
        let pool = Mempool::from_dmabuf(Arc::clone(&mapping), self.config.buf_size)?;
        let old = std::mem::replace(&mut self.pool, pool);
        let old_memory = self.config.pool_memory.replace(mapping);
        if let Err(e) = self.register_pool() {
            // Back to the revoked pool: the port stays as it was, waiting for memory.
            self.pool = old;
            self.config.pool_memory = old_memory;
            return Err(e);
        }
        for q in queues.tx.iter_mut() {
            self.modify_sq(q.sqn(), RqState::Rst, RqState::Rdy)?;
            q.restart();
        }
        for q in queues.rx.iter_mut() {
            q.set_pool(self.pool.clone());
            self.modify_rq(q.rqn(), RqState::Rst, RqState::Rdy)?;
            q.restart();
        }
        Ok(start.elapsed())
    }
}
