//! The receive burst of a striding ring ([`crate::PortConfig::rx_striding`]): completions
//! checked against the strides taken so far, packets handed out by stride offset, each
//! buffer let go once the device is done with it.

use super::{RxQueue, EMPTY_SLOT};
use crate::backend::Backend;
use crate::cq::{rx_flags, Cqe};
use crate::mem::{OffloadFlags, RING_HOLD};
use crate::ring::MAX_BURST;
use crate::rx::sink::RxSink;
use crate::rx::striding::StridingRx;
use cxdirect_hw::wq::striding::{FILLER, LEN_MASK, STRIDES_MASK, STRIDES_SHIFT};

/// What one striding completion was, once checked.
enum Taken {
    /// A packet: its `Mbuf` is on the output.
    Packet(u32),
    /// A filler: strides skipped, no packet.
    Filler,
}

impl<B: Backend> RxQueue<B> {
    /// [`RxQueue::rx_burst`] on a striding ring.
    pub(crate) fn receive_striding(&mut self, out: &mut impl RxSink, max: usize) -> usize {
        let Some(mut striding) = self.striding else {
            return 0;
        };
        let mut got = 0;
        let mut bytes = 0u64;
        let cqes_before = self.stats.cqes;
        let minis_before = self.cq.mini_cqes();
        let limit = max.min(MAX_BURST);
        while got < limit && !self.in_error {
            if let Some(run) = self.cq.mini_run(limit - got) {
                let first = &run.first;
                let mut looked = 0;
                if first.srqn() == self.cq.cqn() && first.is_receive_ok() {
                    // Checksum and stride index mini-CQEs: no RSS hash, the stride index
                    // instead.
                    let flags = OffloadFlags {
                        rx_rss_hash: None,
                        ..rx_flags(first)
                    };
                    for i in 0..run.len {
                        looked += 1;
                        let (word, carried) = run.byte_cnt_and_hash(i);
                        match self.take_strides(&mut striding, word, carried as u16, flags, out) {
                            Some(Taken::Packet(len)) => {
                                got += 1;
                                bytes += u64::from(len);
                            }
                            Some(Taken::Filler) => {}
                            None => break,
                        }
                    }
                } else {
                    looked = 1;
                    self.refuse();
                }
                self.cq.consume_run(looked as u32);
                self.stats.cqes += looked as u64;
                continue;
            }
            let Some(c) = self.cq.peek() else { break };
            self.cq.consume();
            self.stats.cqes += 1;
            if c.srqn() != self.cq.cqn() || self.pi == self.ci {
                self.refuse();
                break;
            }
            if c.is_error() {
                // The device moved the RQ to error; the buffers stay posted until recovery
                // flushes them.
                self.stats.errors += 1;
                self.stats.last_error_syndrome = c.syndrome();
                self.in_error = true;
                break;
            }
            if !c.is_receive_ok() || !self.names_oldest_wqe(&c) {
                self.refuse();
                break;
            }
            match self.take_strides(
                &mut striding,
                c.byte_cnt(),
                c.wqe_counter(),
                rx_flags(&c),
                out,
            ) {
                Some(Taken::Packet(len)) => {
                    got += 1;
                    bytes += u64::from(len);
                }
                Some(Taken::Filler) => {}
                None => break,
            }
        }
        // The packets handed out from the oldest buffer become references it counts.
        if striding.pending > 0 {
            if let Some(&index) = self.slots.get(usize::from(self.ci & self.mask())) {
                if index != EMPTY_SLOT {
                    self.pool.shared().add_references(index, striding.pending);
                }
            }
            striding.pending = 0;
        }
        self.striding = Some(striding);
        self.finish_burst(got, bytes, cqes_before, minis_before);
        got
    }

    /// A plain completion names the oldest posted WQE (its `wqe_id`, within the ring).
    fn names_oldest_wqe(&self, c: &Cqe) -> bool {
        let mask = self.mask();
        c.wqe_id() & mask == self.ci & mask
    }

    /// Takes one completion (`word`: its byte count word; `stride`: its first stride) of the
    /// oldest posted WQE: a packet onto `out`, or a filler. `None`, with the queue stopped,
    /// for a completion out of step with the strides taken so far.
    #[inline(always)]
    fn take_strides(
        &mut self,
        striding: &mut StridingRx,
        word: u32,
        stride: u16,
        flags: OffloadFlags,
        out: &mut impl RxSink,
    ) -> Option<Taken> {
        let strides = (word >> STRIDES_SHIFT) & STRIDES_MASK;
        let len = word & LEN_MASK;
        let filler = word & FILLER != 0;
        let slot = usize::from(self.ci & self.mask());
        let index = self.slots[slot];
        let in_step = u32::from(stride) == striding.used
            && strides != 0
            && strides <= striding.strides() - striding.used
            && (filler || (len != 0 && len <= strides << striding.log_stride_bytes))
            && index != EMPTY_SLOT;
        if !in_step {
            self.refuse();
            return None;
        }
        let taken = if filler {
            Taken::Filler
        } else {
            let offset = striding.used << striding.log_stride_bytes;
            out.accept(&self.pool, index, offset, len, flags);
            striding.pending += 1;
            Taken::Packet(len)
        };
        striding.used += strides;
        if striding.used == striding.strides() {
            // The device is done with this buffer: the ring lets go of it, less the references
            // of the packets not yet counted.
            self.slots[slot] = EMPTY_SLOT;
            self.pool
                .shared()
                .release(index, RING_HOLD - striding.pending);
            striding.pending = 0;
            striding.used = 0;
            self.ci = self.ci.wrapping_add(1);
        }
        Some(taken)
    }
}
