//! Posting: send WQEs (control, remote address, atomic, data or inline segments) and receive
//! WQEs, checked first so that a call posts all of its requests or none, then one doorbell.
//! No allocation, lock or formatting.

use super::{QpState, RcQueuePair};
use crate::backend::barrier::{dma_wmb, wmb};
use crate::backend::Backend;
use crate::error::DriverError;
use crate::rdma::track::SentWqe;
use crate::rdma::wc::WcOpcode;
use crate::rdma::wr::{write_scatter, Payload, RecvRequest, SendOp, SendRequest};
use cxdirect_hw::doorbell::bf_buffer_offset;
use cxdirect_hw::wqe::{
    completion, encode_ctrl, encode_data, fence_mode, opcode, INLINE_SEG, WQE_BB, WQE_DS,
};

/// A WQE being laid out one 64-byte block at a time and written to the send ring.
struct BlockWriter<'a, const SLOT: usize> {
    ring: &'a crate::ring::SlotRing<SLOT>,
    first: u32,
    block: [u8; WQE_BB],
    /// The block written last (what BlueFlame copies for a one-block WQE).
    last: [u8; WQE_BB],
    blocks: u32,
    at: usize,
}

impl<const SLOT: usize> BlockWriter<'_, SLOT> {
    #[inline(always)]
    fn push(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let n = (WQE_BB - self.at).min(bytes.len());
            self.block[self.at..self.at + n].copy_from_slice(&bytes[..n]);
            self.at += n;
            bytes = &bytes[n..];
            if self.at == WQE_BB {
                self.flush();
            }
        }
    }

    /// Pads to the next 16-byte segment.
    #[inline(always)]
    fn pad_segment(&mut self) {
        let pad = self.at.next_multiple_of(WQE_DS) - self.at;
        if pad > 0 {
            self.push(&[0u8; WQE_DS][..pad]);
        }
    }

    #[inline(always)]
    fn flush(&mut self) {
        let mut words = [0u64; WQE_BB / 8];
        for (word, chunk) in words.iter_mut().zip(self.block.chunks_exact(8)) {
            let mut b = [0u8; 8];
            b.copy_from_slice(chunk);
            *word = u64::from_ne_bytes(b);
        }
        self.ring
            .write_words(self.first.wrapping_add(self.blocks), &words);
        self.blocks += 1;
        self.last = self.block;
        self.block = [0; WQE_BB];
        self.at = 0;
    }

    /// Writes the last, partial block; returns the last block written.
    #[inline(always)]
    fn finish(&mut self) -> [u8; WQE_BB] {
        if self.at > 0 {
            self.flush();
        }
        self.last
    }
}

/// What a send request needs, after checking.
struct Shape {
    opcode: u8,
    wc: WcOpcode,
    /// 16-byte segments.
    ds: u32,
    /// Bytes of the gather (or scatter) list.
    len: u32,
}

impl<B: Backend> RcQueuePair<B> {
    /// Posts `wrs` on the send queue, in order, with one doorbell (BlueFlame when the call
    /// posts one WQE of one block). Every request is checked first: on an error nothing is
    /// posted.
    ///
    /// # Errors
    ///
    /// [`DriverError::BadWorkRequest`] for a request past the QP's limits or an operation its
    /// payload does not fit; [`DriverError::QueueFull`] when the ring lacks room (poll the
    /// CQ); [`DriverError::WrongState`] before [`RcQueuePair::connect`].
    #[inline]
    pub fn post_send(&mut self, wrs: &[SendRequest<'_>]) -> Result<(), DriverError> {
        if self.state == QpState::Reset {
            return Err(self.not_connected());
        }
        if wrs.is_empty() {
            return Ok(());
        }
        let mut blocks = 0u32;
        for (index, wr) in wrs.iter().enumerate() {
            let shape = self
                .shape(wr)
                .map_err(|why| DriverError::BadWorkRequest { index, why })?;
            blocks += shape.ds.div_ceil(4);
        }
        let sq = &self.track.sq;
        let outstanding = sq.pi().wrapping_sub(sq.ci());
        if outstanding + blocks > sq.entries() {
            return Err(DriverError::QueueFull {
                what: "the send queue",
                outstanding,
                capacity: sq.entries(),
                asked: blocks,
            });
        }
        let mut pi = sq.pi();
        let mut last = [0u8; WQE_BB];
        let mut last_blocks = 0;
        let mut last_ctrl = 0u32;
        // However the application signals, a CQE comes at least every half ring, so that the
        // ring is always reclaimed (an unsignalled request's CQE makes no work completion).
        let half = sq.entries() / 2;
        for wr in wrs {
            // Checked above.
            let Ok(shape) = self.shape(wr) else {
                return Err(DriverError::Internal("a checked work request changed"));
            };
            let blocks = shape.ds.div_ceil(4);
            let forced = !wr.signaled && self.unsignaled_run + blocks >= half;
            last_ctrl = pi;
            (last, last_blocks) = self.write_send(pi, wr, &shape, wr.signaled || forced);
            self.track.sq.record_send(
                pi,
                SentWqe {
                    wr_id: wr.wr_id,
                    op: shape.wc,
                    bbs: last_blocks as u16,
                    signaled: wr.signaled,
                    forced,
                    len: shape.len,
                },
            );
            self.unsignaled_run = if wr.signaled || forced {
                0
            } else {
                self.unsignaled_run + last_blocks
            };
            pi = pi.wrapping_add(last_blocks);
        }
        self.track.sq.publish(pi);
        let blueflame = wrs.len() == 1 && last_blocks == 1;
        self.ring_send_doorbell(pi, last_ctrl, &last, blueflame);
        self.stats.sends += wrs.len() as u64;
        self.stats.doorbells += 1;
        self.stats.blueflame += u64::from(blueflame);
        Ok(())
    }

    fn not_connected(&self) -> DriverError {
        DriverError::WrongState {
            what: "the queue pair",
            state: "in reset".to_string(),
            needed: "connected: call connect() first",
        }
    }

    /// Checks `wr` against the QP's limits; its WQE's shape.
    #[inline]
    fn shape(&self, wr: &SendRequest<'_>) -> Result<Shape, &'static str> {
        let (opcode, wc, extra) = match wr.op {
            SendOp::Send => (opcode::SEND, WcOpcode::Send, 0),
            SendOp::SendImm(_) => (opcode::SEND_IMM, WcOpcode::Send, 0),
            SendOp::Write(_) => (opcode::RDMA_WRITE, WcOpcode::RdmaWrite, 1),
            SendOp::WriteImm(..) => (opcode::RDMA_WRITE_IMM, WcOpcode::RdmaWrite, 1),
            SendOp::Read(_) => (opcode::RDMA_READ, WcOpcode::RdmaRead, 1),
            SendOp::CompareSwap { .. } => (opcode::ATOMIC_CS, WcOpcode::CompSwap, 2),
            SendOp::FetchAdd { .. } => (opcode::ATOMIC_FA, WcOpcode::FetchAdd, 2),
        };
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
                if len >> self.log_max_msg.min(31) != 0 && len != 0 {
                    return Err("a message longer than the device's log_max_msg");
                }
                (ds, len as u32)
            }
            Payload::Inline(bytes) => {
                if extra != 0 && opcode != opcode::RDMA_WRITE && opcode != opcode::RDMA_WRITE_IMM {
                    return Err("inline data on a READ or an atomic");
                }
                if bytes.len() > self.caps.max_inline_data as usize {
                    return Err("more inline bytes than the QP's max_inline_data");
                }
                ((4 + bytes.len() as u32).div_ceil(16), bytes.len() as u32)
            }
        };
        if extra == 2 && len != 8 {
            return Err("an atomic needs one 8-byte local buffer");
        }
        Ok(Shape {
            opcode,
            wc,
            ds: 1 + extra + data_ds,
            len,
        })
    }

    /// Writes the WQE of `wr` at block `pi`, asking for a CQE when `cqe`; returns its last
    /// block and its block count.
    #[inline]
    fn write_send(
        &self,
        pi: u32,
        wr: &SendRequest<'_>,
        shape: &Shape,
        cqe: bool,
    ) -> ([u8; WQE_BB], u32) {
        let ce = if cqe { completion::ALWAYS } else { 0 };
        let mut ctrl = encode_ctrl(shape.opcode, pi as u16, self.qpn, shape.ds as u8, ce);
        if wr.fence {
            ctrl[11] |= fence_mode::SMALL_AND_FENCE << 5;
        }
        if wr.solicited {
            ctrl[11] |= 1 << 1;
        }
        let imm = match wr.op {
            SendOp::SendImm(imm) | SendOp::WriteImm(_, imm) => imm,
            _ => 0,
        };
        ctrl[12..16].copy_from_slice(&imm.to_be_bytes());
        let mut w = BlockWriter {
            ring: &self.sq,
            first: pi,
            block: [0; WQE_BB],
            last: [0; WQE_BB],
            blocks: 0,
            at: 0,
        };
        w.push(&ctrl);
        let remote = match wr.op {
            SendOp::Write(r) | SendOp::WriteImm(r, _) | SendOp::Read(r) => Some(r),
            SendOp::CompareSwap { remote, .. } | SendOp::FetchAdd { remote, .. } => Some(remote),
            SendOp::Send | SendOp::SendImm(_) => None,
        };
        if let Some(r) = remote {
            let mut seg = [0u8; WQE_DS];
            seg[..8].copy_from_slice(&r.addr.to_be_bytes());
            seg[8..12].copy_from_slice(&r.rkey.to_be_bytes());
            w.push(&seg);
        }
        let atomic = match wr.op {
            SendOp::CompareSwap { compare, swap, .. } => Some((swap, compare)),
            SendOp::FetchAdd { add, .. } => Some((add, 0)),
            _ => None,
        };
        if let Some((swap_add, compare)) = atomic {
            let mut seg = [0u8; WQE_DS];
            seg[..8].copy_from_slice(&swap_add.to_be_bytes());
            seg[8..].copy_from_slice(&compare.to_be_bytes());
            w.push(&seg);
        }
        match wr.payload {
            Payload::Gather(list) => {
                for sge in list.iter().filter(|s| s.length > 0) {
                    w.push(&encode_data(sge.length, sge.lkey, sge.addr));
                }
            }
            Payload::Inline(bytes) => {
                w.push(&(bytes.len() as u32 | INLINE_SEG).to_be_bytes());
                w.push(bytes);
                w.pad_segment();
            }
        }
        let last = w.finish();
        (last, w.blocks)
    }

    /// Publishes the send ring up to `pi` and rings the doorbell with the WQE at block
    /// `last_ctrl` (all of it, `last`, by BlueFlame when `blueflame`).
    #[inline]
    fn ring_send_doorbell(
        &mut self,
        pi: u32,
        last_ctrl: u32,
        last: &[u8; WQE_BB],
        blueflame: bool,
    ) {
        // The WQEs must reach memory before the record that publishes them.
        dma_wmb();
        self.dbr.set(1, pi & 0xffff);
        // The record must reach the device before the doorbell that makes it read the ring.
        wmb();
        let offset = bf_buffer_offset(self.uar, self.bf_half);
        self.bf_half = !self.bf_half;
        if blueflame {
            self.backend.write_bf(offset, last);
        } else {
            let first: [u64; 1] = self.sq.read_words(last_ctrl);
            self.backend.write64(offset, first[0].to_ne_bytes());
        }
    }

    /// Posts `wrs` on the QP's own receive ring (one doorbell record update). Every request is
    /// checked first: on an error nothing is posted. Receives may be posted before
    /// [`RcQueuePair::connect`] (as krping and rping post theirs), so that the peer's first
    /// SEND finds one.
    ///
    /// # Errors
    ///
    /// [`DriverError::BadWorkRequest`] for a QP that receives from an SRQ (post to the SRQ)
    /// or more entries than `max_recv_sge`; [`DriverError::QueueFull`] when the ring lacks
    /// room.
    #[inline]
    pub fn post_recv(&mut self, wrs: &[RecvRequest<'_>]) -> Result<(), DriverError> {
        let Some(ring) = &self.rq else {
            return Err(DriverError::BadWorkRequest {
                index: 0,
                why: "the QP receives from a shared receive queue: post there",
            });
        };
        for (index, wr) in wrs.iter().enumerate() {
            if wr.sg_list.len() > self.caps.max_recv_sge as usize {
                return Err(DriverError::BadWorkRequest {
                    index,
                    why: "more scatter entries than the QP's max_recv_sge",
                });
            }
        }
        let rq = &self.track.rq;
        let outstanding = rq.pi().wrapping_sub(rq.ci());
        if outstanding + wrs.len() as u32 > rq.entries() {
            return Err(DriverError::QueueFull {
                what: "the receive queue",
                outstanding,
                capacity: rq.entries(),
                asked: wrs.len() as u32,
            });
        }
        let mut pi = rq.pi();
        for wr in wrs {
            let len = write_scatter(
                ring,
                pi.wrapping_mul(self.rq_segs),
                self.rq_segs,
                wr.sg_list,
            );
            rq.record_recv(pi, wr.wr_id, len);
            pi = pi.wrapping_add(1);
        }
        rq.publish(pi);
        dma_wmb();
        self.dbr.set(0, pi & 0xffff);
        self.stats.recvs += wrs.len() as u64;
        Ok(())
    }
}
