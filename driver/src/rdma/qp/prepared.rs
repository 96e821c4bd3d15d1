//! Prepared send requests: what stays the same across a loop of requests (the operation, the
//! flags, the local memory region and the peer's key) checked once, against the region's rights
//! and the queue pair's limits, and the WQE's constant words composed once; a post then checks
//! and writes only what varies (remote address, local offset and length, work request id,
//! signalled or not) and the ring's room. perftest prepares its work requests the same way,
//! once per run. A bad per-post value is refused with a typed error and posts nothing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::post::{ctrl_words, WqeWords};
use super::{QpState, RcQueuePair};
use crate::backend::Backend;
use crate::error::DriverError;
use crate::rdma::mr::MemoryRegion;
use crate::rdma::track::{send_meta, send_meta_word};
use crate::rdma::wc::WcOpcode;
use crate::ring::{bytes_from_words, words_from_bytes};
use cxdirect_hw::wqe::{completion, fence_mode, opcode, INLINE_SEG, WQE_BB};

/// The operation of a prepared request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreparedOp {
    /// RDMA WRITE of the local bytes into the peer's memory under `rkey`.
    Write {
        /// The peer region's remote key.
        rkey: u32,
    },
    /// RDMA READ of the peer's memory under `rkey` into the local region.
    Read {
        /// The peer region's remote key.
        rkey: u32,
    },
    /// SEND of the local bytes (consumes a receive on the peer).
    Send,
}

/// Where a prepared request's bytes come from (or, for a READ, go).
#[derive(Debug, Clone, Copy)]
pub enum PreparedLocal<'a> {
    /// A range of `region`, named at each post by offset and length (one gather entry).
    Region(&'a MemoryRegion),
    /// Bytes given at each post and copied into the WQE (`IBV_SEND_INLINE`): WRITE and SEND
    /// only, at most the QP's `max_inline_data`.
    Inline,
}

/// Flags every post of a prepared request carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PreparedFlags {
    /// Wait for every earlier READ and atomic to finish first (`IBV_SEND_FENCE`).
    pub fence: bool,
    /// Set the solicited-event bit (`IBV_SEND_SOLICITED`).
    pub solicited: bool,
}

/// A send request checked once by [`RcQueuePair::prepare_send`] for one queue pair; posted any
/// number of times with [`RcQueuePair::post_prepared`] (region) or
/// [`RcQueuePair::post_prepared_inline`] (inline bytes).
///
/// It holds its region's handle, not a borrow, so that it can live beside the region and the
/// queue pair: once the region is deregistered (or dropped), posting it is refused.
#[derive(Debug, Clone)]
pub struct PreparedSend {
    /// The queue pair it was checked against.
    qpn: u32,
    /// Control word 0 without the WQE index (opcode, QPN, segment count with one data
    /// segment), host order.
    ctrl: u64,
    /// Control word 1 in memory order, without and with the completion request.
    ctrl1: [u64; 2],
    /// The remote address segment's second word (`rkey`) in memory order; unused by SEND.
    rkey_word: u64,
    /// Segments before the data: control, and remote address for WRITE and READ.
    head_ds: u32,
    /// The region's local key, start (device address) and length; `live` is the region's
    /// handle (`None` for inline requests).
    lkey: u32,
    base: u64,
    region_len: u64,
    live: Option<Arc<AtomicBool>>,
    /// Longest message: 2^log_max_msg, and for an inline request `max_inline_data`.
    max_len: u32,
    /// The tracking record's operation bits.
    meta: u32,
}

impl PreparedSend {
    /// The queue pair number it was prepared for.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// Whether its bytes go inline (posted with [`RcQueuePair::post_prepared_inline`]).
    pub fn is_inline(&self) -> bool {
        self.live.is_none()
    }

    /// Longest message a post may name, in bytes.
    pub fn max_len(&self) -> u32 {
        self.max_len
    }
}

#[cold]
#[inline(never)]
fn bad(why: &'static str) -> DriverError {
    DriverError::BadWorkRequest { index: 0, why }
}

impl<B: Backend> RcQueuePair<B> {
    /// Checks a request of `op` over `local` with `flags` once against this queue pair and
    /// the region, and composes its WQE's constant words. May be called in any state; posts
    /// check the state.
    ///
    /// Checked here: the region is in the QP's protection domain and grants local read
    /// (WRITE, SEND) or local write (READ); the QP takes a gather entry (`max_send_sge` ≥ 1)
    /// or inline bytes (`max_inline_data` ≥ 1, not on a READ).
    ///
    /// # Errors
    ///
    /// [`DriverError::BadWorkRequest`] (index 0) for a request the QP or region cannot take.
    pub fn prepare_send(
        &self,
        op: PreparedOp,
        local: PreparedLocal<'_>,
        flags: PreparedFlags,
    ) -> Result<PreparedSend, DriverError> {
        let (opc, wc, rkey) = match op {
            PreparedOp::Write { rkey } => (opcode::RDMA_WRITE, WcOpcode::RdmaWrite, Some(rkey)),
            PreparedOp::Read { rkey } => (opcode::RDMA_READ, WcOpcode::RdmaRead, Some(rkey)),
            PreparedOp::Send => (opcode::SEND, WcOpcode::Send, None),
        };
        // The largest message is 2^log_max_msg bytes (mlx5_ib's `max_msg_sz`), within the
        // 31 bits a gather entry's length takes.
        let max_msg = 1u32 << self.log_max_msg.min(31);
        let (lkey, base, region_len, live, max_len) = match local {
            PreparedLocal::Region(mr) => {
                if self.caps.max_send_sge == 0 {
                    return Err(bad("a gather entry on a QP whose max_send_sge is 0"));
                }
                if mr.pdn() != self.pdn {
                    return Err(bad("a region of another protection domain"));
                }
                let access = mr.access();
                if matches!(op, PreparedOp::Read { .. }) && !access.write {
                    return Err(bad("a READ into a region without local write"));
                }
                if !matches!(op, PreparedOp::Read { .. }) && !access.read {
                    return Err(bad("a region without local read to send from"));
                }
                let Some(live) = mr.handle() else {
                    return Err(bad("a deregistered region"));
                };
                (mr.lkey(), mr.addr(), mr.len(), Some(live), max_msg)
            }
            PreparedLocal::Inline => {
                if matches!(op, PreparedOp::Read { .. }) {
                    return Err(bad("inline data on a READ"));
                }
                if self.caps.max_inline_data == 0 {
                    return Err(bad("inline data on a QP whose max_inline_data is 0"));
                }
                (0, 0, 0, None, self.caps.max_inline_data.min(max_msg))
            }
        };
        let head_ds = 1 + u32::from(rkey.is_some());
        let mut flag_bits = 0u8;
        if flags.fence {
            flag_bits |= fence_mode::SMALL_AND_FENCE << 5;
        }
        if flags.solicited {
            flag_bits |= 1 << 1;
        }
        // Index 0 and one data segment; a post adds its index (and for inline or an empty
        // message, the segments it takes instead).
        let (ctrl, _) = ctrl_words(opc, 0, self.qpn, (head_ds + 1) as u8, 0, 0);
        let ctrl1 = |ce: u8| (u64::from(flag_bits | ce) << 32).to_be();
        Ok(PreparedSend {
            qpn: self.qpn,
            ctrl,
            ctrl1: [ctrl1(0), ctrl1(completion::ALWAYS << 2)],
            rkey_word: (u64::from(rkey.unwrap_or(0)) << 32).to_be(),
            head_ds,
            lkey,
            base,
            region_len,
            live,
            max_len,
            meta: send_meta(wc),
        })
    }

    /// Posts `p` once over bytes `offset..offset + len` of its region (for a READ, where the
    /// peer's bytes land), to (or from) the peer's `remote_addr`; `wr_id` comes back in the work
    /// completion, asked for when `signaled` (as [`super::super::SendRequest::signaled`]). One
    /// one-block WQE, sent by BlueFlame.
    ///
    /// # Errors
    ///
    /// [`DriverError::WrongState`] unless the QP is connected; [`DriverError::BadWorkRequest`]
    /// for a request prepared for another QP or inline, a deregistered region, a range past
    /// the region's end or a length past the device's `log_max_msg`;
    /// [`DriverError::QueueFull`] when the ring lacks room (poll the CQ). Nothing is posted
    /// then.
    #[inline]
    pub fn post_prepared(
        &mut self,
        p: &PreparedSend,
        wr_id: u64,
        remote_addr: u64,
        offset: u64,
        len: u32,
        signaled: bool,
    ) -> Result<(), DriverError> {
        self.check_prepared(p)?;
        let Some(live) = &p.live else {
            return Err(bad("an inline prepared request posted with a region range"));
        };
        if !live.load(Ordering::Relaxed) {
            return Err(bad("the prepared request's region was deregistered"));
        }
        if len > p.max_len {
            return Err(bad("a message longer than the device's log_max_msg"));
        }
        if p.region_len
            .checked_sub(u64::from(len))
            .is_none_or(|room| offset > room)
        {
            return Err(bad("a range past the end of the prepared request's region"));
        }
        let pi = self.prepared_room(1)?;
        let cqe = self.cqe_for(signaled, 1);
        // An empty message has no data segment, as rdma-core's libmlx5 skips an entry of 0
        // bytes (`set_data_ptr_seg` only for a nonzero length in `_mlx5_post_send`).
        let (ctrl, data0, data1) = if len == 0 {
            (p.ctrl - 1, 0, 0)
        } else {
            (
                p.ctrl,
                (u64::from(len) << 32 | u64::from(p.lkey)).to_be(),
                (p.base + offset).to_be(),
            )
        };
        let ctrl0 = (u64::from(pi as u16) << 40 | ctrl).to_be();
        let ctrl1 = p.ctrl1[usize::from(cqe)];
        let block = if p.head_ds == 2 {
            [
                ctrl0,
                ctrl1,
                remote_addr.to_be(),
                p.rkey_word,
                data0,
                data1,
                0,
                0,
            ]
        } else {
            [ctrl0, ctrl1, data0, data1, 0, 0, 0, 0]
        };
        self.sq.write_words(pi, &block);
        self.finish_prepared(p, pi, wr_id, len, 1, signaled, cqe);
        let mut bytes = [0u8; WQE_BB];
        bytes_from_words(block, &mut bytes);
        self.ring_blueflame(pi.wrapping_add(1), &bytes);
        Ok(())
    }

    /// Posts `p` (prepared with [`PreparedLocal::Inline`]) once with `bytes` copied into the
    /// WQE, to the peer's `remote_addr` (ignored by SEND); otherwise as
    /// [`RcQueuePair::post_prepared`].
    ///
    /// # Errors
    ///
    /// As [`RcQueuePair::post_prepared`], and [`DriverError::BadWorkRequest`] for more bytes
    /// than the QP's `max_inline_data` or a request prepared over a region.
    #[inline]
    pub fn post_prepared_inline(
        &mut self,
        p: &PreparedSend,
        wr_id: u64,
        remote_addr: u64,
        bytes: &[u8],
        signaled: bool,
    ) -> Result<(), DriverError> {
        self.check_prepared(p)?;
        if p.live.is_some() {
            return Err(bad("a prepared request over a region posted inline"));
        }
        if bytes.len() > p.max_len as usize {
            return Err(bad("more inline bytes than the QP's max_inline_data"));
        }
        let len = bytes.len() as u32;
        let ds = p.head_ds + (4 + len).div_ceil(16);
        let blocks = ds.div_ceil(4);
        let pi = self.prepared_room(blocks)?;
        let cqe = self.cqe_for(signaled, blocks);
        // The prepared word counts one 16-byte data segment; the inline segments replace it.
        let ctrl0 =
            (u64::from(pi as u16) << 40 | p.ctrl) - u64::from(p.head_ds + 1) + u64::from(ds);
        let ctrl1 = p.ctrl1[usize::from(cqe)];
        let head = if p.head_ds == 2 {
            [ctrl0.to_be(), ctrl1, remote_addr.to_be(), p.rkey_word]
        } else {
            [ctrl0.to_be(), ctrl1, 0, 0]
        };
        self.finish_prepared(p, pi, wr_id, len, blocks, signaled, cqe);
        let next = pi.wrapping_add(blocks);
        if blocks <= 2 {
            // Staged in place: an array returned by value would be copied once more.
            let mut staged = [0u8; 2 * WQE_BB];
            stage_inline(&mut staged, &head, 2 * p.head_ds as usize, bytes);
            // Each block by a constant index, not a loop over `blocks`: the loop kept its
            // counter and both blocks' addresses live and cost 16 instructions a post.
            let first = staged_block(&staged, 0);
            self.sq
                .write_words(pi, &words_from_bytes::<8, WQE_BB>(first));
            if blocks == 1 {
                self.ring_blueflame(next, first);
                return Ok(());
            }
            let second = staged_block(&staged, 1);
            self.sq
                .write_words(pi.wrapping_add(1), &words_from_bytes::<8, WQE_BB>(second));
        } else {
            let mut w = WqeWords::new(&self.sq, pi);
            for &word in &head[..2 * p.head_ds as usize] {
                w.push(word);
            }
            w.push_inline(bytes);
            w.finish();
        }
        self.ring_doorbell_word(next, head[0]);
        Ok(())
    }

    /// The per-post checks common to both forms: the QP is connected and `p` is its own.
    #[inline(always)]
    fn check_prepared(&self, p: &PreparedSend) -> Result<(), DriverError> {
        if self.state != QpState::ReadyToSend {
            return Err(self.not_ready());
        }
        if p.qpn != self.qpn {
            return Err(bad("a request prepared for another queue pair"));
        }
        Ok(())
    }

    #[cold]
    #[inline(never)]
    fn not_ready(&self) -> DriverError {
        DriverError::WrongState {
            what: "the queue pair",
            state: format!("{:?}", self.state()),
            needed: "connected (ready to send): call connect() first",
        }
    }

    /// The producer index, when the send ring has room for `blocks` more blocks.
    #[inline(always)]
    fn prepared_room(&self, blocks: u32) -> Result<u32, DriverError> {
        let sq = &self.track.sq;
        let pi = sq.pi();
        if pi.wrapping_sub(sq.ci()) + blocks > self.sq_blocks {
            return Err(self.ring_full(blocks));
        }
        Ok(pi)
    }

    #[cold]
    #[inline(never)]
    fn ring_full(&self, blocks: u32) -> DriverError {
        match self.check_send_room(blocks) {
            Err(e) => e,
            Ok(()) => DriverError::Internal("the send ring had room after all"),
        }
    }

    /// Whether a request of `blocks` asks the device for a CQE: when signalled, or to keep a
    /// CQE coming at least every half ring (see [`RcQueuePair::post_send`]). Counts the
    /// blocks posted since the last CQE asked for.
    #[inline(always)]
    fn cqe_for(&mut self, signaled: bool, blocks: u32) -> bool {
        let run = self.unsignaled_run + blocks;
        let cqe = signaled || run >= self.sq_half;
        self.unsignaled_run = if cqe { 0 } else { run };
        cqe
    }

    /// Records the WQE at `pi` for its completion, publishes it and counts it.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn finish_prepared(
        &mut self,
        p: &PreparedSend,
        pi: u32,
        wr_id: u64,
        len: u32,
        blocks: u32,
        signaled: bool,
        cqe: bool,
    ) {
        let forced = cqe && !signaled;
        self.track.sq.record_send_meta(
            pi,
            wr_id,
            len,
            send_meta_word(p.meta, blocks, signaled, forced),
        );
        self.track.sq.publish(pi.wrapping_add(blocks));
        self.stats.sends += 1;
    }

    /// Rings the send doorbell for the ring up to `pi` with `ctrl0`, the first word (memory
    /// order) of the last WQE written, as `ring_send_doorbell` does without
    /// reading it back from the ring.
    #[inline(always)]
    fn ring_doorbell_word(&mut self, pi: u32, ctrl0: u64) {
        crate::backend::barrier::dma_wmb();
        self.dbr.set(1, pi & 0xffff);
        crate::backend::barrier::wmb();
        let offset = cxdirect_hw::doorbell::bf_buffer_offset(self.uar, self.bf_half);
        self.bf_half = !self.bf_half;
        self.backend.write64(offset, ctrl0.to_ne_bytes());
        self.stats.doorbells += 1;
    }

    /// Rings the send doorbell for the ring up to `pi` with `block`, the lone one-block WQE
    /// just written, carried whole (BlueFlame).
    #[inline(always)]
    fn ring_blueflame(&mut self, pi: u32, block: &[u8; WQE_BB]) {
        crate::backend::barrier::dma_wmb();
        self.dbr.set(1, pi & 0xffff);
        crate::backend::barrier::wmb();
        let offset = cxdirect_hw::doorbell::bf_buffer_offset(self.uar, self.bf_half);
        self.bf_half = !self.bf_half;
        self.backend.write_bf(offset, block);
        self.stats.doorbells += 1;
        self.stats.blueflame += 1;
    }
}

/// Lays a WQE of at most two blocks with an inline segment out in `staged` (zeroed by the
/// caller), in memory order: the first `head_words` of `head` (control, and remote address,
/// segments), then the segment's 4-byte big-endian header and `bytes`; the rest stays zero.
/// The caller checked that the WQE fits two blocks.
#[inline(always)]
fn stage_inline(staged: &mut [u8; 2 * WQE_BB], head: &[u64; 4], head_words: usize, bytes: &[u8]) {
    for (at, word) in staged.chunks_exact_mut(8).zip(head) {
        at.copy_from_slice(&word.to_ne_bytes());
    }
    let at = 8 * head_words;
    staged[at..at + 4].copy_from_slice(&(bytes.len() as u32 | INLINE_SEG).to_be_bytes());
    let data = at + 4;
    if let Some(room) = staged.get_mut(data..data + bytes.len()) {
        room.copy_from_slice(bytes);
    }
}

/// Block `b` (0 or 1) of a staged WQE.
#[inline(always)]
fn staged_block(staged: &[u8; 2 * WQE_BB], b: usize) -> &[u8; WQE_BB] {
    let (first, second) = staged.split_at(WQE_BB);
    let block = if b == 0 { first } else { second };
    block.try_into().unwrap_or(&[0; WQE_BB])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::SlotRing;

    /// The prepared path's staged inline WQE is word for word the general writer's (whose
    /// layout `post::tests` checks against the byte encoders), at every length that fits two
    /// blocks.
    #[test]
    fn staged_inline_wqes_match_the_general_writers_words() {
        let general = SlotRing::<WQE_BB>::new(crate::test_support::region(4 * WQE_BB), 2).unwrap();
        for head_ds in [1u32, 2] {
            let head = [0x0102_0304_0506_0708u64, 0x1112, 0x2122_2324, 0x3132];
            let mut staged_head = head;
            if head_ds == 1 {
                staged_head[2..].fill(0);
            }
            let head_words = 2 * head_ds as usize;
            for len in 0..=(2 * WQE_BB - 4 - 8 * head_words) {
                let bytes: Vec<u8> = (0..len).map(|i| (i * 13 + len) as u8 | 0x80).collect();
                let ds = head_ds + (4 + len as u32).div_ceil(16);
                for b in 0..4 {
                    general.write_words(b, &[u64::MAX; 8]);
                }
                let mut w = WqeWords::new(&general, 3);
                for &word in &head[..head_words] {
                    w.push(word);
                }
                w.push_inline(&bytes);
                let blocks = w.finish();
                assert_eq!(blocks, ds.div_ceil(4), "{len} bytes");
                let mut staged = [0u8; 2 * WQE_BB];
                stage_inline(&mut staged, &staged_head, head_words, &bytes);
                for b in 0..blocks {
                    assert_eq!(
                        words_from_bytes::<8, WQE_BB>(staged_block(&staged, b as usize)),
                        general.read_words::<8>(3u32.wrapping_add(b)),
                        "{len} bytes after {head_ds} segments, block {b}"
                    );
                }
            }
        }
    }
}
