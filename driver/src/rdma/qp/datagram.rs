//! Datagram queue pairs (UD and the GSI QP) on the machinery of [`RcQueuePair`]: the walk
//! RST→INIT→RTR→RTS with what mlx5_ib's `__mlx5_ib_modify_qp` gives such QPs, and send WQEs
//! of a control segment, the 48-byte datagram segment and the data (`set_datagram_seg` in
//! mlx5_ib's `wr.c` and libmlx5's `mlx5_post_send`). Receives are posted as on RC.

use super::connect::PORT;
use super::post::{ctrl_words, WqeWords};
use super::{QpState, RcQueuePair, Transport};
use crate::backend::Backend;
use crate::control::Device;
use crate::error::DriverError;
use crate::rdma::ah::AV_LEN;
use crate::rdma::track::SentWqe;
use crate::rdma::wc::WcOpcode;
use crate::rdma::wr::{Payload, UdSendRequest};
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::qp::{pm_state, service_type};
use cxdirect_hw::wqe::{completion, opcode};

/// `MLX5_EXTENDED_UD_AV`: bit 31 of the datagram segment's `dqp_dct`, set by
/// `set_datagram_seg` for every RoCE address vector.
const EXTENDED_UD_AV: u32 = 0x8000_0000;
/// 16-byte segments of a send WQE before its data: control and datagram segments.
const HEADER_DS: u32 = 1 + (AV_LEN / 16) as u32;

/// A send request's WQE, checked.
struct DatagramShape {
    opcode: u8,
    /// 16-byte segments.
    ds: u32,
    /// Bytes sent.
    len: u32,
}

impl<B: Backend> RcQueuePair<B> {
    /// The path MTU code and log2 of the message size mlx5_ib writes into a datagram QP's
    /// context at every transition: 4096 bytes for UD, 256 for the GSI QP (`mlx5_ib_modify_qp`
    /// sets `IB_MTU_4096` for UD and `IB_MTU_256` for the special QPs, with `log_msg_max` 12
    /// and 8).
    fn datagram_mtu(&self) -> (u8, u8) {
        match self.transport {
            Transport::Gsi => (1, 8),
            _ => (5, 12),
        }
    }

    /// Largest datagram payload: the context's MTU, or the port's when smaller.
    pub(in crate::rdma) fn max_datagram(&self) -> u32 {
        let (mtu, _) = self.datagram_mtu();
        (128u32 << mtu).min(self.roce.max_path_mtu().bytes())
    }

    /// Moves a datagram QP from reset to RTS with Q_Key `q_key` at RST2INIT (P_Key index 0,
    /// the port, the MTU) and the first PSN at RTR2RTS (0 for the GSI QP, as
    /// `ib_mad_port_start` gives it: `IB_MAD_SEND_Q_PSN`). On a refused step the QP is reset.
    ///
    /// # Errors
    ///
    /// [`DriverError::WrongState`] unless in reset; [`DriverError::Command`] when the device
    /// refuses a step.
    pub(in crate::rdma) fn activate_datagram(
        &mut self,
        dev: &mut Device<B>,
        q_key: u32,
    ) -> Result<(), DriverError> {
        if self.state != QpState::Reset || self.transport == Transport::Rc {
            return Err(DriverError::WrongState {
                what: "the queue pair",
                state: format!("{:?}", self.state()),
                needed: "a datagram queue pair in reset",
            });
        }
        let walked = self.walk_datagram(dev, q_key);
        if walked.is_err() {
            let _ = self.modify_simple(dev, Opcode::Qp2rstQp);
            return walked;
        }
        self.state = QpState::ReadyToSend;
        Ok(())
    }

    fn walk_datagram(&mut self, dev: &mut Device<B>, q_key: u32) -> Result<(), DriverError> {
        let (mtu, log_msg) = self.datagram_mtu();
        let gsi = self.transport == Transport::Gsi;
        let psn = if gsi { 0 } else { self.psn };
        // __mlx5_ib_modify_qp writes the service type into every transition.
        let st = if gsi {
            service_type::QP1
        } else {
            service_type::UD
        };
        self.transition(dev, Opcode::Rst2initQp, |q| {
            q.set_st(st)
                .set_pm_state(pm_state::MIGRATED)
                .set_log_ack_req_freq(super::connect::LOG_ACK_REQ_FREQ)
                .set_mtu(mtu)
                .set_log_msg_max(log_msg)
                .set_q_key(q_key);
            q.primary_address_path_mut()
                .set_vhca_port_num(PORT)
                .set_pkey_index(0);
        })?;
        // mlx5_ib writes the port into the GSI QP's path at every transition (its
        // `qp->port` for the special QPs), not into a UD QP's after RST2INIT.
        // Like every transition of __mlx5_ib_modify_qp: migrated path state, the ACK frequency.
        self.transition(dev, Opcode::Init2rtrQp, |q| {
            q.set_st(st)
                .set_pm_state(pm_state::MIGRATED)
                .set_log_ack_req_freq(super::connect::LOG_ACK_REQ_FREQ)
                .set_mtu(mtu)
                .set_log_msg_max(log_msg);
            if gsi {
                q.primary_address_path_mut().set_vhca_port_num(PORT);
            }
        })?;
        self.transition(dev, Opcode::Rtr2rtsQp, |q| {
            q.set_st(st)
                .set_pm_state(pm_state::MIGRATED)
                .set_log_ack_req_freq(super::connect::LOG_ACK_REQ_FREQ)
                .set_mtu(mtu)
                .set_log_msg_max(log_msg)
                .set_next_send_psn(psn);
            if gsi {
                q.primary_address_path_mut().set_vhca_port_num(PORT);
            }
        })
    }

    /// Posts datagram send requests, in order, with one doorbell; every request is checked
    /// first, so that on an error nothing is posted. No allocation, lock or formatting.
    ///
    /// # Errors
    ///
    /// [`DriverError::BadWorkRequest`] for a request past the QP's limits (gather entries,
    /// inline bytes, a payload above [`RcQueuePair::max_datagram`], a QPN above 24 bits);
    /// [`DriverError::QueueFull`] when the ring lacks room; [`DriverError::WrongState`]
    /// before the QP is active.
    #[inline]
    pub(in crate::rdma) fn post_datagram(
        &mut self,
        wrs: &[UdSendRequest<'_>],
    ) -> Result<(), DriverError> {
        if self.state == QpState::Reset {
            return Err(self.not_connected());
        }
        if wrs.is_empty() {
            return Ok(());
        }
        let mut blocks = 0u32;
        for (index, wr) in wrs.iter().enumerate() {
            let shape = self
                .datagram_shape(wr)
                .map_err(|why| DriverError::BadWorkRequest { index, why })?;
            blocks += shape.ds.div_ceil(4);
        }
        self.check_send_room(blocks)?;
        let sq = &self.track.sq;
        let mut pi = sq.pi();
        let mut last_blocks = 0;
        let mut last_ctrl = 0u32;
        // As on RC: a CQE at least every half ring, so that the ring is always reclaimed.
        let half = sq.entries() / 2;
        for wr in wrs {
            let shape = self
                .datagram_shape(wr)
                .map_err(|_| DriverError::Internal("a checked work request changed"))?;
            let blocks = shape.ds.div_ceil(4);
            let forced = !wr.signaled && self.unsignaled_run + blocks >= half;
            last_ctrl = pi;
            last_blocks = self.write_datagram(pi, wr, &shape, wr.signaled || forced);
            let sent = SentWqe {
                wr_id: wr.wr_id,
                op: WcOpcode::Send,
                bbs: last_blocks as u16,
                signaled: wr.signaled,
                forced,
                len: shape.len,
            };
            pi = self.record_sent(pi, sent);
        }
        self.ring_posted(pi, last_ctrl, last_blocks, wrs.len());
        Ok(())
    }

    /// Checks `wr` against the QP's limits; its WQE's shape.
    #[inline]
    fn datagram_shape(&self, wr: &UdSendRequest<'_>) -> Result<DatagramShape, &'static str> {
        if wr.remote_qpn == 0 || wr.remote_qpn > 0x00ff_ffff {
            return Err("a destination QPN of 1 to 2^24-1");
        }
        let (data_ds, len) = match wr.payload {
            Payload::Gather(list) => {
                if list.len() > self.caps.max_send_sge as usize {
                    return Err("more gather entries than the QP's max_send_sge");
                }
                let mut len = 0u64;
                let mut ds = 0;
                for sge in list {
                    len += u64::from(sge.length);
                    if sge.length > 0 {
                        ds += 1;
                    }
                }
                (ds, len)
            }
            Payload::Inline(bytes) => {
                if bytes.len() > self.caps.max_inline_data as usize {
                    return Err("more inline bytes than the QP's max_inline_data");
                }
                ((4 + bytes.len() as u32).div_ceil(16), bytes.len() as u64)
            }
        };
        if len > u64::from(self.max_datagram()) {
            return Err("a datagram longer than the path MTU");
        }
        Ok(DatagramShape {
            opcode: if wr.imm.is_some() {
                opcode::SEND_IMM
            } else {
                opcode::SEND
            },
            ds: HEADER_DS + data_ds,
            len: len as u32,
        })
    }

    /// Writes the WQE of `wr` at block `pi`, asking for a CQE when `cqe`; its block count.
    #[inline]
    fn write_datagram(
        &self,
        pi: u32,
        wr: &UdSendRequest<'_>,
        shape: &DatagramShape,
        cqe: bool,
    ) -> u32 {
        let mut flags = if cqe { completion::ALWAYS << 2 } else { 0 };
        if wr.solicited {
            flags |= 1 << 1;
        }
        let mut w = WqeWords::new(&self.sq, pi);
        let (high, low) = ctrl_words(
            shape.opcode,
            pi as u16,
            self.qpn,
            shape.ds as u8,
            flags,
            wr.imm.unwrap_or(0),
        );
        w.push_segment(high, low);
        // The handle's vector with the Q_Key (bytes 0-3) and the destination QP (8-11) of
        // this request.
        let mut av = *wr.ah.av();
        av[..4].copy_from_slice(&wr.remote_qkey.to_be_bytes());
        av[8..12].copy_from_slice(&(wr.remote_qpn | EXTENDED_UD_AV).to_be_bytes());
        for chunk in av.chunks_exact(8) {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            w.push(u64::from_ne_bytes(word));
        }
        match wr.payload {
            Payload::Gather(list) => {
                for sge in list.iter().filter(|s| s.length > 0) {
                    w.push_segment(u64::from(sge.length) << 32 | u64::from(sge.lkey), sge.addr);
                }
            }
            Payload::Inline(bytes) => w.push_inline(bytes),
        }
        w.finish()
    }
}
