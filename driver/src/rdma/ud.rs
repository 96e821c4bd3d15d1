//! Unreliable datagram queue pairs (`IBV_QPT_UD`) over RoCE v2: CREATE_QP with service type
//! UD (0x2), made ready to send with [`UdQueuePair::activate`] (RST2INIT with the Q_Key,
//! INIT2RTR, RTR2RTS), then each send request one datagram to the address its
//! [`super::AddressHandle`] names.
//!
//! Every receive buffer starts with the 40-byte GRH area the device writes before the payload
//! (`ibv_post_recv` users of UD reserve it the same way): a receive's scatter list must hold
//! 40 bytes more than the largest datagram, and [`super::WorkCompletion::byte_len`] counts
//! them. [`super::Grh::parse`] reads the sender's address from that area.

use super::cq::CompletionQueue;
use super::pd::ProtectionDomain;
use super::qp::{QpCaps, QpState, QpStats, RcQueuePair, Transport};
use super::roce::Roce;
use super::srq::SharedReceiveQueue;
use super::wr::{RecvRequest, UdSendRequest};
use crate::backend::Backend;
use crate::control::Device;
use crate::error::DriverError;

/// Bytes of the GRH area in front of every datagram in a receive buffer
/// (`sizeof(struct ib_grh)`).
pub const GRH_AREA: usize = 40;

/// An unreliable datagram queue pair (`ibv_qp` of type `IBV_QPT_UD`) over RoCE v2.
///
/// Post from one thread at a time (it is `Send`); its completion queue may be polled on
/// another. Destroy it with [`UdQueuePair::destroy`]: one simply dropped stays in the device
/// until [`Device::teardown`], its rings leaked rather than freed under the device.
pub struct UdQueuePair<B: Backend> {
    qp: RcQueuePair<B>,
    q_key: u32,
}

impl<B: Backend> std::fmt::Debug for UdQueuePair<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdQueuePair")
            .field("qpn", &self.qp.qpn())
            .field("q_key", &self.q_key)
            .field("state", &self.qp.state())
            .finish()
    }
}

impl<B: Backend> UdQueuePair<B> {
    /// CREATE_QP of service type UD in `pd`, completing on `cq`, receiving from `srq` when
    /// given (the fields mlx5_ib's `create_qp_common` fills for a UD QP); RoCE must be enabled.
    /// The QP starts in [`QpState::Reset`]: post receives, then [`UdQueuePair::activate`].
    ///
    /// # Errors
    ///
    /// [`DriverError::Config`] for caps outside the limits ([`QpCaps`]; a datagram segment
    /// leaves one gather entry and 16 inline bytes fewer than RC: at most 28 and 444);
    /// [`DriverError::Command`] when the device refuses.
    pub fn create(
        dev: &mut Device<B>,
        pd: &ProtectionDomain,
        cq: &mut CompletionQueue,
        srq: Option<&SharedReceiveQueue<B>>,
        caps: QpCaps,
        roce: &Roce,
    ) -> Result<Self, DriverError> {
        let qp = RcQueuePair::create_as(dev, pd, cq, srq, caps, roce, Transport::Ud)?;
        Ok(Self { qp, q_key: 0 })
    }

    /// Moves the QP to RTS: RST2INIT with `q_key` (the Q_Key datagrams to this QP must carry,
    /// and what a send request with bit 31 of its Q_Key set sends with), P_Key index 0 and
    /// the port; INIT2RTR; RTR2RTS with the first PSN. Must be in [`QpState::Reset`].
    ///
    /// # Errors
    ///
    /// [`DriverError::WrongState`] unless in reset; [`DriverError::Command`] when the device
    /// refuses a step (the QP is then reset again).
    pub fn activate(&mut self, dev: &mut Device<B>, q_key: u32) -> Result<(), DriverError> {
        self.qp.activate_datagram(dev, q_key)?;
        self.q_key = q_key;
        Ok(())
    }

    /// Posts `wrs` on the send queue, in order, with one doorbell. Every request is checked
    /// first: on an error nothing is posted.
    ///
    /// # Errors
    ///
    /// [`DriverError::BadWorkRequest`] for a request past the QP's limits or a payload above
    /// [`UdQueuePair::max_message`]; [`DriverError::QueueFull`] when the ring lacks room (poll
    /// the CQ); [`DriverError::WrongState`] before [`UdQueuePair::activate`].
    #[inline]
    pub fn post_send(&mut self, wrs: &[UdSendRequest<'_>]) -> Result<(), DriverError> {
        self.qp.post_datagram(wrs)
    }

    /// Posts receives; each scatter list's first [`GRH_AREA`] bytes get the GRH area. May be
    /// called before [`UdQueuePair::activate`].
    ///
    /// # Errors
    ///
    /// As [`RcQueuePair::post_recv`].
    #[inline]
    pub fn post_recv(&mut self, wrs: &[RecvRequest<'_>]) -> Result<(), DriverError> {
        self.qp.post_recv(wrs)
    }

    /// The QP number.
    pub fn qpn(&self) -> u32 {
        self.qp.qpn()
    }

    /// The Q_Key given to [`UdQueuePair::activate`] (0 before).
    pub fn q_key(&self) -> u32 {
        self.q_key
    }

    /// The largest datagram payload in bytes: 4096, or the port's path MTU when smaller.
    pub fn max_message(&self) -> u32 {
        self.qp.max_datagram()
    }

    /// The sizes it was created with.
    pub fn caps(&self) -> QpCaps {
        self.qp.caps()
    }

    /// Its counters.
    pub fn stats(&self) -> QpStats {
        self.qp.stats()
    }

    /// The state: [`QpState::Error`] once an error completion of a send, or a flushed
    /// receive, was polled.
    pub fn state(&self) -> QpState {
        self.qp.state()
    }

    /// Send requests outstanding, in 64-byte blocks, and receives outstanding.
    pub fn outstanding(&self) -> (u32, u32) {
        self.qp.outstanding()
    }

    /// Moves the QP to error: everything posted completes flushed.
    ///
    /// # Errors
    ///
    /// [`DriverError::Command`] when the device refuses.
    pub fn to_error(&mut self, dev: &mut Device<B>) -> Result<(), DriverError> {
        self.qp.to_error(dev)
    }

    /// Moves the QP to error, takes its flush completions from `cq` (the next
    /// [`CompletionQueue::poll`] returns them), then resets it: [`UdQueuePair::activate`]
    /// again.
    ///
    /// # Errors
    ///
    /// As [`RcQueuePair::reset`].
    pub fn reset(
        &mut self,
        dev: &mut Device<B>,
        cq: &mut CompletionQueue,
    ) -> Result<(), DriverError> {
        self.qp.reset(dev, cq)?;
        self.q_key = 0;
        Ok(())
    }

    /// Returns every posted request through flush completions on `cq`, then DESTROY_QP.
    ///
    /// # Errors
    ///
    /// As [`RcQueuePair::destroy`].
    pub fn destroy(self, dev: &mut Device<B>, cq: &mut CompletionQueue) -> Result<(), DriverError> {
        self.qp.destroy(dev, cq)
    }

    /// The general services QP's inner queue pair, made the same way.
    pub(super) fn create_gsi(
        dev: &mut Device<B>,
        pd: &ProtectionDomain,
        cq: &mut CompletionQueue,
        caps: QpCaps,
        roce: &Roce,
    ) -> Result<Self, DriverError> {
        let qp = RcQueuePair::create_as(dev, pd, cq, None, caps, roce, Transport::Gsi)?;
        Ok(Self { qp, q_key: 0 })
    }
}
