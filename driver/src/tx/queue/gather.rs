//! Send WQEs for [`GatheredFrame`]s: control segment, Ethernet segment (the first 18 header
//! bytes inline when the queue inlines headers), one data segment for the rest of the header
//! buffer and one for the payload stretch. The shape is Linux mlx5e's for an skb with a linear
//! part and one fragment (`mlx5e_txwqe_build_dsegs`: a data segment per fragment), which for a
//! devmem fragment carries the dmabuf's DMA address; mlx5e gives every segment the SQ's one key
//! (`sq->mkey_be`, over all DMA addresses), which userspace does not have, so each segment
//! names the key its memory is registered under, as DPDK's mlx5 PMD does per mbuf
//! (`mlx5_tx_mb2mr`): the device takes any key of the SQ's protection domain.

use super::{InlineMode, TxQueue, ETH_INLINE, MAX_WQE};
use crate::backend::Backend;
use crate::ring::MAX_BURST;
use crate::tx::gather::GatheredFrame;
use crate::tx::inflight::Kept;
use crate::tx::lso::{TxRefusal, MAX_TSO_HEADERS};
use crate::tx::source::REFUSED;
use cxdirect_hw::wqe::{self, WQE_BB, WQE_DS};

impl<B: Backend> TxQueue<B> {
    /// Sends frames from the front of `frames` (at most [`MAX_BURST`] per call, fewer when the
    /// ring is full) with one doorbell; returns how many were taken (sent, or refused, counted
    /// and dropped: a frame longer than the port's frame size, a header buffer shorter than
    /// the inlined headers, an empty payload, or an LSO frame the port cannot segment, see
    /// [`TxRefusal`]). A frame with an MSS goes as one LSO WQE: every header byte inline, the
    /// device cutting the payload into segments of at most the MSS. Each header buffer stays in flight until
    /// the device reports its WQE done. Completions are taken first.
    pub(crate) fn tx_burst_gathered(&mut self, frames: &mut Vec<GatheredFrame>) -> usize {
        self.reap();
        if self.in_error || frames.is_empty() {
            return 0;
        }
        let headers_inline = if self.inline == InlineMode::None {
            0
        } else {
            ETH_INLINE
        };
        let mut wqe = [0u8; MAX_WQE];
        let (mut taken, mut posted, mut bytes) = (0usize, 0usize, 0u64);
        let (mut last_index, mut last_bbs) = (0u16, 0u16);
        let limit = frames.len().min(MAX_BURST);
        // Per frame taken, its ring slot (REFUSED: dropped).
        let mut slots = [REFUSED; MAX_BURST];
        while taken < limit {
            let f = &frames[taken];
            let head = f.headers.len();
            let len = head + f.payload.len as usize;
            // An LSO WQE inlines every header byte (the device copies them before each
            // segment); a SEND inlines what the queue's inline mode asks.
            let (inline, refusal) = match f.mss {
                Some(mss) => (head, self.lso_refusal(head, len, mss)),
                None => (
                    headers_inline,
                    (len > self.max_frame).then_some(TxRefusal::Length),
                ),
            };
            let refusal = refusal.or((f.headers.is_chained()
                || head < headers_inline.max(super::ETH_HEADER)
                || f.payload.len == 0)
                .then_some(TxRefusal::Length));
            if let Some(refusal) = refusal {
                self.count_refusal(refusal);
                taken += 1;
                continue;
            }
            let rest = head - inline;
            let eth_extra = inline.saturating_sub(2).div_ceil(WQE_DS) * WQE_DS;
            let size = 32 + eth_extra + (usize::from(rest > 0) + 1) * WQE_DS;
            let bbs = size.div_ceil(WQE_BB);
            if bbs as u16 > self.free() {
                break;
            }
            let flags = f.headers.flags;
            let ds = (size / WQE_DS) as u8;
            match f.mss {
                Some(mss) => {
                    let ce = self.completion_request(bbs as u16, 1);
                    wqe[..16].copy_from_slice(&wqe::encode_ctrl(
                        wqe::opcode::LSO,
                        self.pi,
                        self.sqn,
                        ds,
                        ce,
                    ));
                    wqe[16..32].copy_from_slice(&wqe::encode_eth_lso(
                        flags.tx_ip_csum,
                        flags.tx_l4_csum,
                        mss,
                        inline as u16,
                        [0, 0],
                    ));
                    self.stats.tso_packets += 1;
                }
                None => {
                    wqe[..16].copy_from_slice(&self.send_ctrl(ds, bbs as u16));
                    wqe[16..32].copy_from_slice(&wqe::encode_eth(
                        flags.tx_ip_csum,
                        flags.tx_l4_csum,
                        None,
                        inline as u16,
                        [0, 0],
                    ));
                }
            }
            let mut at = 32;
            if inline > 0 {
                // Two header bytes end the Ethernet segment, the rest run on after it.
                wqe[32..32 + eth_extra].fill(0);
                f.headers.read(0, &mut wqe[30..30 + inline]);
                at += eth_extra;
            }
            if rest > 0 {
                wqe[at..at + WQE_DS].copy_from_slice(&wqe::encode_data(
                    rest as u32,
                    f.headers.lkey(),
                    f.headers.data_iova() + inline as u64,
                ));
                at += WQE_DS;
            }
            wqe[at..at + WQE_DS].copy_from_slice(&wqe::encode_data(
                f.payload.len,
                f.payload.lkey,
                f.payload.iova,
            ));
            at += WQE_DS;
            wqe[at..bbs * WQE_BB].fill(0);
            self.write_wqe(self.pi, &wqe[..bbs * WQE_BB]);
            slots[taken] = u32::from(self.pi & self.mask());
            last_index = self.pi;
            last_bbs = bbs as u16;
            self.pi = self.pi.wrapping_add(bbs as u16);
            bytes += len as u64;
            posted += 1;
            taken += 1;
        }
        for (f, &slot) in frames.drain(..taken).zip(&slots) {
            if slot == REFUSED {
                continue;
            }
            let (slot, mut headers) = (slot as usize, f.headers);
            if self.inflight.keep(slot, &mut headers) == Kept::Whole {
                self.inflight.keep_whole(slot, headers);
            }
        }
        if posted > 0 {
            self.stats.packets += posted as u64;
            self.stats.bytes += bytes;
            self.ring_doorbell(last_index, last_bbs, posted == 1);
        }
        self.published.publish(&self.stats);
        taken
    }

    /// Why an LSO frame of `head` header bytes and `len` bytes in all, cut at `mss`, cannot be
    /// sent on this queue, if it cannot (the checks [`TxQueue::lso_wqe`] makes).
    fn lso_refusal(&self, head: usize, len: usize, mss: u16) -> Option<TxRefusal> {
        if self.max_lso == 0 {
            Some(TxRefusal::TsoOff)
        } else if head > MAX_TSO_HEADERS {
            Some(TxRefusal::TsoHeaders)
        } else if mss == 0 || head + usize::from(mss) > self.max_frame {
            Some(TxRefusal::TsoMss)
        } else if len > self.max_lso {
            Some(TxRefusal::TsoTooLong)
        } else {
            None
        }
    }
}
