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
use crate::ring::bytes_from_words;
use cxdirect_hw::doorbell::bf_buffer_offset;
use cxdirect_hw::wqe::{completion, fence_mode, opcode, INLINE_SEG, WQE_BB};

/// A WQE being laid out as words, one 64-byte block at a time, each block stored into its
/// ring slot as soon as it is full (one bounds check per block, so one for a WQE of one block).
/// Every word holds its eight bytes in the order the device reads them: a big-endian field is
/// stored as `value.to_be()`.
pub(super) struct WqeWords<'a, const SLOT: usize> {
    ring: &'a crate::ring::SlotRing<SLOT>,
    /// Ring index of the WQE's first block.
    first: u32,
    /// The block being filled.
    block: [u64; WQE_WORDS],
    /// Words of `block` filled.
    at: usize,
    /// Blocks written.
    blocks: u32,
}

/// Words in a basic block.
const WQE_WORDS: usize = WQE_BB / 8;

impl<'a, const SLOT: usize> WqeWords<'a, SLOT> {
    #[inline(always)]
    pub(super) fn new(ring: &'a crate::ring::SlotRing<SLOT>, first: u32) -> Self {
        Self {
            ring,
            first,
            block: [0; WQE_WORDS],
            at: 0,
            blocks: 0,
        }
    }

    /// Appends one word, in memory order.
    #[inline(always)]
    pub(super) fn push(&mut self, word: u64) {
        self.block[self.at] = word;
        self.at += 1;
        if self.at == WQE_WORDS {
            self.flush();
        }
    }

    /// Appends a 16-byte segment given as two big-endian 64-bit values.
    #[inline(always)]
    pub(super) fn push_segment(&mut self, high: u64, low: u64) {
        self.push(high.to_be());
        self.push(low.to_be());
    }

    /// Appends an inline-data segment: its 4-byte header, `bytes`, and zeros to the next
    /// 16-byte boundary. The bytes go in eight at a time, a block's worth per pass.
    #[inline(always)]
    pub(super) fn push_inline(&mut self, bytes: &[u8]) {
        let header = (bytes.len() as u32 | INLINE_SEG).to_be_bytes();
        let (head, rest) = bytes.split_at(bytes.len().min(4));
        let mut first = [0u8; 8];
        first[..4].copy_from_slice(&header);
        first[4..].copy_from_slice(&u64::to_ne_bytes(partial_word(head))[..4]);
        self.push(u64::from_ne_bytes(first));
        let mut chunks = rest.chunks_exact(8);
        loop {
            let mut filled = 0;
            for (word, chunk) in self.block[self.at..].iter_mut().zip(&mut chunks) {
                let mut b = [0u8; 8];
                b.copy_from_slice(chunk);
                *word = u64::from_ne_bytes(b);
                filled += 1;
            }
            self.at += filled;
            if self.at < WQE_WORDS {
                break;
            }
            self.flush();
        }
        let tail = chunks.remainder();
        if !tail.is_empty() {
            self.push(partial_word(tail));
        }
        if self.at % 2 == 1 {
            self.push(0);
        }
    }

    #[inline(always)]
    fn flush(&mut self) {
        self.ring
            .write_words(self.first.wrapping_add(self.blocks), &self.block);
        self.blocks += 1;
        self.at = 0;
        // The words a last, partial block leaves unwritten go out as zeros.
        self.block = [0; WQE_WORDS];
    }

    /// Zeroes the rest of the last, partial block and writes it; returns the WQE's block
    /// count.
    #[inline(always)]
    pub(super) fn finish(mut self) -> u32 {
        if self.at > 0 {
            self.flush();
        }
        self.blocks
    }
}

/// Up to eight bytes as a word in memory order, zeros after them.
#[inline(always)]
fn partial_word(bytes: &[u8]) -> u64 {
    // Byte `i` at bits `8 * i` of a little-endian value is byte `i` in memory. Shifts rather
    // than a copy of a variable length, which would be a call to `memcpy`.
    let mut value = 0u64;
    for (i, &byte) in bytes.iter().take(8).enumerate() {
        value |= u64::from(byte) << (8 * i);
    }
    value.to_le()
}

/// The control segment's two words: opcode, WQE index, QP number, 16-byte segment count `ds`,
/// and `flags` (the fence, completion and solicited bits of byte 11), `imm` in bytes 12-15.
#[inline(always)]
pub(super) fn ctrl_words(
    opcode: u8,
    index: u16,
    qpn: u32,
    ds: u8,
    flags: u8,
    imm: u32,
) -> (u64, u64) {
    let first = (u64::from(index) << 8 | u64::from(opcode)) << 32
        | u64::from((qpn & 0x00ff_ffff) << 8 | u32::from(ds));
    (first, u64::from(flags) << 32 | u64::from(imm))
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
        // The first request's shape is kept for writing it (a call of one request, the usual
        // one, checks it once); the others' are worked out again, there being nowhere to keep
        // them without allocating.
        let mut first_shape = None;
        for (index, wr) in wrs.iter().enumerate() {
            let shape = self
                .shape(wr)
                .map_err(|why| DriverError::BadWorkRequest { index, why })?;
            blocks += shape.ds.div_ceil(4);
            if index == 0 {
                first_shape = Some(shape);
            }
        }
        self.check_send_room(blocks)?;
        let sq = &self.track.sq;
        let mut pi = sq.pi();
        let mut last_blocks = 0;
        let mut last_ctrl = 0u32;
        // However the application signals, a CQE comes at least every half ring, so that the
        // ring is always reclaimed (an unsignalled request's CQE makes no work completion).
        let half = sq.entries() / 2;
        for (index, wr) in wrs.iter().enumerate() {
            // Checked above.
            let shape = match (index, first_shape.take()) {
                (0, Some(shape)) => shape,
                _ => self
                    .shape(wr)
                    .map_err(|_| DriverError::Internal("a checked work request changed"))?,
            };
            let blocks = shape.ds.div_ceil(4);
            let forced = !wr.signaled && self.unsignaled_run + blocks >= half;
            last_ctrl = pi;
            last_blocks = self.write_send(pi, wr, &shape, wr.signaled || forced);
            let sent = SentWqe {
                wr_id: wr.wr_id,
                op: shape.wc,
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

    /// Whether the send ring has room for `blocks` more WQEBBs.
    ///
    /// # Errors
    ///
    /// [`DriverError::QueueFull`] when it does not.
    #[inline]
    pub(super) fn check_send_room(&self, blocks: u32) -> Result<(), DriverError> {
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
        Ok(())
    }

    /// Records the WQE written at `pi` for its completion and keeps count of the unsignalled
    /// blocks since the last CQE asked for; the index after it.
    #[inline]
    pub(super) fn record_sent(&mut self, pi: u32, sent: SentWqe) -> u32 {
        let blocks = u32::from(sent.bbs);
        self.unsignaled_run = if sent.signaled || sent.forced {
            0
        } else {
            self.unsignaled_run + blocks
        };
        self.track.sq.record_send(pi, sent);
        pi.wrapping_add(blocks)
    }

    /// Publishes the send queue up to `pi` and rings its doorbell for `posted` requests
    /// (BlueFlame for a lone one-block WQE, whose control segment is at `last_ctrl`).
    #[inline]
    pub(super) fn ring_posted(&mut self, pi: u32, last_ctrl: u32, last_blocks: u32, posted: usize) {
        self.track.sq.publish(pi);
        let blueflame = posted == 1 && last_blocks == 1;
        self.ring_send_doorbell(pi, last_ctrl, blueflame);
        self.stats.sends += posted as u64;
        self.stats.doorbells += 1;
        self.stats.blueflame += u64::from(blueflame);
    }

    pub(super) fn not_connected(&self) -> DriverError {
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

    /// Writes the WQE of `wr` at block `pi` straight into the ring as words, asking for a CQE
    /// when `cqe`; returns its block count.
    #[inline]
    fn write_send(&self, pi: u32, wr: &SendRequest<'_>, shape: &Shape, cqe: bool) -> u32 {
        let mut flags = if cqe { completion::ALWAYS << 2 } else { 0 };
        if wr.fence {
            flags |= fence_mode::SMALL_AND_FENCE << 5;
        }
        if wr.solicited {
            flags |= 1 << 1;
        }
        let imm = match wr.op {
            SendOp::SendImm(imm) | SendOp::WriteImm(_, imm) => imm,
            _ => 0,
        };
        let mut w = WqeWords::new(&self.sq, pi);
        let (high, low) = ctrl_words(
            shape.opcode,
            pi as u16,
            self.qpn,
            shape.ds as u8,
            flags,
            imm,
        );
        w.push_segment(high, low);
        let remote = match wr.op {
            SendOp::Write(r) | SendOp::WriteImm(r, _) | SendOp::Read(r) => Some(r),
            SendOp::CompareSwap { remote, .. } | SendOp::FetchAdd { remote, .. } => Some(remote),
            SendOp::Send | SendOp::SendImm(_) => None,
        };
        if let Some(r) = remote {
            w.push_segment(r.addr, u64::from(r.rkey) << 32);
        }
        match wr.op {
            SendOp::CompareSwap { compare, swap, .. } => w.push_segment(swap, compare),
            SendOp::FetchAdd { add, .. } => w.push_segment(add, 0),
            _ => {}
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

    /// Publishes the send ring up to `pi` and rings the doorbell with the WQE at block
    /// `last_ctrl` (all of its one block by BlueFlame when `blueflame`, else its first word).
    #[inline]
    pub(super) fn ring_send_doorbell(&mut self, pi: u32, last_ctrl: u32, blueflame: bool) {
        // The WQEs must reach memory before the record that publishes them.
        dma_wmb();
        self.dbr.set(1, pi & 0xffff);
        // The record must reach the device before the doorbell that makes it read the ring.
        wmb();
        let offset = bf_buffer_offset(self.uar, self.bf_half);
        self.bf_half = !self.bf_half;
        if blueflame {
            let mut bytes = [0u8; WQE_BB];
            bytes_from_words(self.sq.read_words::<WQE_WORDS>(last_ctrl), &mut bytes);
            self.backend.write_bf(offset, &bytes);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rdma::wr::data_seg_words;
    use crate::ring::{words_from_bytes, SlotRing};
    use cxdirect_hw::wqe::{encode_ctrl, encode_data};

    #[test]
    fn segment_words_hold_the_encoders_bytes() {
        let (high, low) = ctrl_words(
            opcode::RDMA_WRITE_IMM,
            0xbeef,
            0x12_3456,
            7,
            0x2a,
            0xdead_beef,
        );
        let mut ctrl = encode_ctrl(opcode::RDMA_WRITE_IMM, 0xbeef, 0x12_3456, 7, 0);
        ctrl[11] = 0x2a;
        ctrl[12..].copy_from_slice(&0xdead_beefu32.to_be_bytes());
        assert_eq!(
            [high.to_be(), low.to_be()],
            words_from_bytes::<2, 16>(&ctrl)
        );
        let data = encode_data(0x8765_4321, 0x0102_0304, 0x1122_3344_5566_7788);
        assert_eq!(
            data_seg_words(0x8765_4321, 0x0102_0304, 0x1122_3344_5566_7788),
            words_from_bytes::<2, 16>(&data)
        );
    }

    #[test]
    fn inline_segments_match_their_byte_layout_across_blocks() {
        let ring = SlotRing::<WQE_BB>::new(crate::test_support::region(4 * WQE_BB), 2).unwrap();
        for len in [0usize, 1, 3, 4, 5, 11, 12, 13, 44, 45, 60, 100, 150] {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8 | 1).collect();
            // The ring's last slot, so that a WQE of several blocks wraps to slot 0.
            let mut w = WqeWords::new(&ring, 3);
            w.push_segment(0x0102_0304_0506_0708, 0x090a_0b0c_0d0e_0f10);
            w.push_inline(&bytes);
            let blocks = w.finish();
            let mut want = vec![0u8; 16];
            want[..16].copy_from_slice(&(1u128..=16).map(|b| b as u8).collect::<Vec<_>>());
            want.extend_from_slice(&(len as u32 | INLINE_SEG).to_be_bytes());
            want.extend_from_slice(&bytes);
            want.resize(want.len().next_multiple_of(16), 0);
            assert_eq!(blocks as usize, want.len().div_ceil(WQE_BB), "{len} bytes");
            want.resize(blocks as usize * WQE_BB, 0);
            let mut got = vec![0u8; want.len()];
            for (b, block) in got.chunks_exact_mut(WQE_BB).enumerate() {
                ring.read_bytes(3u32.wrapping_add(b as u32), 0, block);
            }
            assert_eq!(got, want, "{len} bytes");
        }
    }
}
