//! Send and receive rings: the fast path. A [`TxQueue`] writes one WQE per packet and rings one
//! doorbell per burst (BlueFlame for a lone WQE); a [`RxQueue`] reads CQEs by owner bit and
//! refills its ring in batches. Neither allocates, locks or formats while moving packets; every
//! value the device writes (CQE owner, opcode, WQE counter, byte count) is checked before use.

use crate::backend::Backend;
use crate::error::DriverError;
use crate::mempool::{Mbuf, Mempool};
use crate::rxirq::{self, CompletionInterrupt};
use crate::stats::StatsHandle;
use cxdirect_dma::DmaRegion;
use cxdirect_hw::cqe::{self, CqeOpcode};
use cxdirect_hw::doorbell::{UAR_BF_OFFSET, UAR_PAGE_SIZE};
use cxdirect_hw::wqe::{self, CtrlSeg, DataSeg, EthSeg, INLINE_SEG, WQE_BB, WQE_DS};
use std::os::fd::BorrowedFd;
use std::sync::atomic::{fence, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How much of each packet a send WQE carries inline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InlineMode {
    /// Nothing inline: the device reads the whole packet (where the device allows it).
    None,
    /// The first 18 bytes (Ethernet header with room for a VLAN tag) inline.
    Headers,
    /// The whole packet inline when it fits `inline_max`; longer ones fall back to headers.
    Full,
}

/// Byte of an error CQE that holds its syndrome.
pub(crate) const ERR_CQE_SYNDROME: usize = 0x37;

/// Per-queue counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Packets sent or received.
    pub packets: u64,
    /// Bytes sent or received.
    pub bytes: u64,
    /// Send: packets refused (too large, or the device reported an error). Receive: error CQEs.
    pub errors: u64,
    /// Receive: packets the device dropped for lack of a posted buffer is counted by the port;
    /// here: times the pool was empty when refilling.
    pub nombuf: u64,
    /// Doorbells rung.
    pub doorbells: u64,
    /// Doorbells that carried the WQE (BlueFlame).
    pub blueflame: u64,
    /// Packets sent fully inline.
    pub inline_packets: u64,
    /// CQEs consumed.
    pub cqes: u64,
    /// CQEs with values the driver refused (counted, queue left alone).
    pub bad_cqes: u64,
    /// Syndrome of the last error CQE (0 when none: 0x04 local protection, 0x05 flushed,
    /// 0x01 local length; the mlx5 error CQE's `syndrome` byte).
    pub last_error_syndrome: u8,
}

/// Buffers the device may still touch when a queue handle is dropped early: kept until the
/// port has destroyed the hardware queue.
pub(crate) type Quarantine = Arc<Mutex<Vec<Mbuf>>>;

/// A completion queue ring, driver side.
pub(crate) struct CqRing {
    pub region: DmaRegion,
    pub dbr: DmaRegion,
    pub log_size: u8,
    pub ci: u32,
    pub cqn: u32,
}

impl CqRing {
    /// The next CQE software owns (copied), without consuming it.
    pub(crate) fn peek(&self) -> Option<[u8; 64]> {
        let offset = (self.ci & ((1 << self.log_size) - 1)) as usize * 64;
        let mut op_own = [0u8; 1];
        self.region.read(offset + 63, &mut op_own).ok()?;
        if !cqe::sw_owns(op_own[0], self.ci, self.log_size) {
            return None;
        }
        fence(Ordering::Acquire);
        let mut cqe = [0u8; 64];
        self.region.read(offset, &mut cqe).ok()?;
        Some(cqe)
    }

    pub(crate) fn consume(&mut self) {
        self.ci = self.ci.wrapping_add(1);
    }

    /// Tells the device how far software has read (doorbell record word 0).
    pub(crate) fn update_dbr(&self) {
        let _ = self.dbr.write_u32_be(0, self.ci & 0x00ff_ffff);
    }
}

/// A send queue handle. `Send`: each queue may live on its own thread.
pub struct TxQueue<B: Backend> {
    pub(crate) backend: Arc<B>,
    pub(crate) ring: DmaRegion,
    pub(crate) dbr: DmaRegion,
    pub(crate) cq: CqRing,
    pub(crate) sqn: u32,
    pub(crate) log_size: u8,
    pub(crate) uar: u32,
    pub(crate) pi: u16,
    pub(crate) ci: u16,
    /// Buffers in flight, by WQE index.
    pub(crate) inflight: Vec<Option<Mbuf>>,
    pub(crate) bf_half: bool,
    pub(crate) blueflame: bool,
    pub(crate) inline: InlineMode,
    pub(crate) inline_max: usize,
    pub(crate) cqe_every: u16,
    pub(crate) since_cqe: u16,
    pub(crate) max_frame: usize,
    pub(crate) stats: QueueStats,
    pub(crate) published: StatsHandle,
    pub(crate) quarantine: Quarantine,
    pub(crate) in_error: bool,
}

impl<B: Backend> TxQueue<B> {
    fn mask(&self) -> u16 {
        (1u16 << self.log_size).wrapping_sub(1)
    }

    /// WQEBBs free in the ring.
    fn free(&self) -> u16 {
        (1u16 << self.log_size).wrapping_sub(self.pi.wrapping_sub(self.ci))
    }

    /// Takes completions: buffers up to each reported WQE go back to their pool.
    fn reap(&mut self) {
        let mut progressed = false;
        while let Some(cqe) = self.cq.peek() {
            self.cq.consume();
            progressed = true;
            self.stats.cqes += 1;
            let opcode = cqe[63] >> 4;
            let counter = u16::from_be_bytes([cqe[0x3c], cqe[0x3d]]);
            // The reported WQE must be one we posted and not yet completed.
            let outstanding = self.pi.wrapping_sub(self.ci);
            let done = counter.wrapping_sub(self.ci);
            if done >= outstanding {
                self.stats.bad_cqes += 1;
                continue;
            }
            if opcode == CqeOpcode::ReqErr as u8 {
                self.stats.errors += 1;
                self.stats.last_error_syndrome = cqe[ERR_CQE_SYNDROME];
                self.in_error = true;
            } else if opcode != CqeOpcode::Req as u8 {
                self.stats.bad_cqes += 1;
                continue;
            }
            // Free every WQE up to and including the completed one.
            let end = counter.wrapping_add(1);
            while self.ci != end {
                let slot = usize::from(self.ci & self.mask());
                self.inflight[slot] = None;
                self.ci = self.ci.wrapping_add(1);
            }
        }
        if progressed {
            self.cq.update_dbr();
        }
    }

    /// Sends packets from the front of `pkts` (up to [`MAX_BURST`] per call, fewer when the ring
    /// is full) and returns how many were taken; the rest stay in `pkts`. A packet the port
    /// cannot send (shorter than an Ethernet header or longer than the frame size) is dropped
    /// and counted in `errors`; it counts as taken.
    #[inline(never)]
    pub fn tx_burst(&mut self, pkts: &mut Vec<Mbuf>) -> usize {
        let taken = self.send(pkts);
        self.published.publish(&self.stats);
        taken
    }

    fn send(&mut self, pkts: &mut Vec<Mbuf>) -> usize {
        self.reap();
        if self.in_error || pkts.is_empty() {
            return 0;
        }
        // The WQE index each taken packet went to; `None` for a refused packet.
        let mut slots: [Option<u16>; MAX_BURST] = [None; MAX_BURST];
        let mut wqe = [0u8; MAX_WQE];
        let mut last = [0u8; WQE_BB];
        let mut last_bbs = 0u16;
        let mut posted = 0usize;
        let mut count = 0usize;
        while count < pkts.len().min(MAX_BURST) {
            let m = &pkts[count];
            let len = m.pkt_len();
            if len < ETH_HEADER || len > self.max_frame {
                self.stats.errors += 1;
                count += 1;
                continue;
            }
            let Some(size) = self.build(m, &mut wqe) else {
                // Does not fit the ring now: stop here, the rest stay queued.
                break;
            };
            let bbs = size.div_ceil(WQE_BB) as u16;
            let index = self.pi;
            for bb in 0..bbs {
                let at = usize::from(index.wrapping_add(bb) & self.mask()) * WQE_BB;
                let _ = self.ring.write(
                    at,
                    &wqe[usize::from(bb) * WQE_BB..usize::from(bb + 1) * WQE_BB],
                );
            }
            last.copy_from_slice(&wqe[..WQE_BB]);
            last_bbs = bbs;
            slots[count] = Some(index);
            // Later WQEs of the same packet's slot range hold no buffer.
            self.pi = self.pi.wrapping_add(bbs);
            self.stats.packets += 1;
            self.stats.bytes += len as u64;
            posted += 1;
            count += 1;
        }
        for (i, m) in pkts.drain(..count).enumerate() {
            if let Some(index) = slots[i] {
                let slot = usize::from(index & self.mask());
                self.inflight[slot] = Some(m);
            }
        }
        if posted > 0 {
            self.ring_doorbell(&last, last_bbs, posted == 1);
        }
        count
    }

    /// Builds the WQE for `m` at the producer index into `wqe`; returns its size in bytes, or
    /// `None` when the ring has no room for it.
    fn build(&mut self, m: &Mbuf, wqe: &mut [u8; MAX_WQE]) -> Option<usize> {
        let head = m.len();
        let chained = m.segment_count() > 1;
        let vlan = m.flags.tx_vlan;
        // Inlined bytes always come from the first segment.
        let headers = if vlan.is_some() {
            0
        } else {
            ETH_INLINE.min(head)
        };
        let (eth_inline, data_inline) = match self.inline {
            InlineMode::None => (0, 0),
            InlineMode::Headers => (headers, 0),
            InlineMode::Full if !chained && head <= self.inline_max && vlan.is_none() => {
                (headers, head - headers)
            }
            InlineMode::Full => (headers, 0),
        };
        let rest = head - eth_inline - data_inline;
        let mut ds = 2 + eth_inline.saturating_sub(2).div_ceil(WQE_DS);
        if data_inline > 0 {
            ds += (4 + data_inline).div_ceil(WQE_DS);
        }
        ds += usize::from(rest > 0) + m.segments().skip(1).filter(|s| !s.is_empty()).count();
        let size = ds * WQE_DS;
        let bbs = size.div_ceil(WQE_BB);
        if size > MAX_WQE || bbs as u16 > self.free() {
            return None;
        }
        wqe[..bbs * WQE_BB].fill(0);
        self.since_cqe += 1;
        let free_after = self.free().saturating_sub(bbs as u16);
        let completion =
            self.since_cqe >= self.cqe_every || free_after < 2 * (MAX_WQE / WQE_BB) as u16;
        if completion {
            self.since_cqe = 0;
        }
        if let Ok(mut ctrl) = CtrlSeg::new(&mut wqe[..16]) {
            ctrl.set_opcode(wqe::opcode::SEND)
                .set_wqe_index(self.pi)
                .set_qpn_or_sqn(self.sqn)
                .set_ds(ds as u8)
                .set_ce(if completion {
                    wqe::completion::ALWAYS
                } else {
                    0
                });
        }
        if let Ok(mut eth) = EthSeg::new(&mut wqe[16..32]) {
            eth.set_l3_csum(m.flags.tx_ip_csum)
                .set_l4_csum(m.flags.tx_l4_csum);
            match vlan {
                Some(tci) => {
                    eth.set_vlan_insert(tci);
                }
                None => {
                    eth.set_inline_hdr_sz(eth_inline as u16);
                }
            }
        }
        let mut at = 32;
        if eth_inline > 0 {
            // Two header bytes sit in the Ethernet segment, the rest run on after it.
            m.read(0, &mut wqe[30..30 + eth_inline.min(2)]);
            if eth_inline > 2 {
                m.read(2, &mut wqe[32..32 + eth_inline - 2]);
            }
            at += (eth_inline.saturating_sub(2)).div_ceil(WQE_DS) * WQE_DS;
        }
        if data_inline > 0 {
            wqe[at..at + 4].copy_from_slice(&(INLINE_SEG | data_inline as u32).to_be_bytes());
            m.read(eth_inline, &mut wqe[at + 4..at + 4 + data_inline]);
            at += (4 + data_inline).div_ceil(WQE_DS) * WQE_DS;
            self.stats.inline_packets += 1;
        }
        // One data segment per stretch of buffer: the first segment's remainder, then each
        // chained segment.
        let first = (rest > 0).then_some((m, eth_inline + data_inline, rest));
        let others = m
            .segments()
            .skip(1)
            .filter(|s| !s.is_empty())
            .map(|s| (s, 0, s.len()));
        for (seg, skip, len) in first.into_iter().chain(others) {
            if let Ok(mut d) = DataSeg::new(&mut wqe[at..at + 16]) {
                d.set_byte_count(len as u32)
                    .set_lkey(seg.lkey())
                    .set_addr(seg.data_iova() + skip as u64);
            }
            at += WQE_DS;
        }
        Some(size)
    }

    /// Publishes the burst: doorbell record, then one UAR write (the whole WQE as BlueFlame when
    /// it is alone and fits one basic block).
    fn ring_doorbell(&mut self, last: &[u8; WQE_BB], last_bbs: u16, alone: bool) {
        // WQEs before the record, the record before the doorbell.
        fence(Ordering::SeqCst);
        let _ = self.dbr.write_u32_be(4, u32::from(self.pi));
        fence(Ordering::SeqCst);
        let offset = self.uar as usize * UAR_PAGE_SIZE
            + UAR_BF_OFFSET
            + if self.bf_half { BF_HALF } else { 0 };
        self.bf_half = !self.bf_half;
        self.stats.doorbells += 1;
        if self.blueflame && alone && last_bbs == 1 {
            self.backend.write_bf(offset, last);
            self.stats.blueflame += 1;
        } else {
            let mut first = [0u8; 8];
            first.copy_from_slice(&last[..8]);
            self.backend.write64(offset, first);
        }
    }

    /// Counters of this queue.
    pub fn stats(&self) -> QueueStats {
        self.stats
    }

    /// Buffers the device has not yet reported sent.
    pub fn in_flight(&self) -> usize {
        self.inflight.iter().filter(|m| m.is_some()).count()
    }

    /// True once the device reported an error on this queue (no more sends until recovery).
    pub fn in_error(&self) -> bool {
        self.in_error
    }
}

impl<B: Backend> Drop for TxQueue<B> {
    fn drop(&mut self) {
        // The device may still read these until the port destroys the SQ.
        let mut q = self.quarantine.lock().unwrap_or_else(|e| e.into_inner());
        q.extend(self.inflight.iter_mut().filter_map(Option::take));
    }
}

/// Most packets one `tx_burst` or `rx_burst` call moves.
pub const MAX_BURST: usize = 256;
/// Largest send WQE the driver builds, in bytes.
const MAX_WQE: usize = 1024;
const BF_HALF: usize = 256;
const ETH_HEADER: usize = 14;
/// Bytes of packet headers inlined in the Ethernet segment (Ethernet + VLAN).
const ETH_INLINE: usize = wqe::ETH_L2_INLINE_HEADER_SIZE;

/// Copies a receive CQE's packet types, checksum results and RSS hash into the buffer's flags.
pub(crate) fn fill_rx_flags(m: &mut Mbuf, c: &[u8; 64]) {
    if let Ok(cqe) = cqe::Cqe64::new(&c[..]) {
        m.flags.rx_l3_type = cqe.l3_hdr_type();
        m.flags.rx_l4_type = cqe.l4_hdr_type();
        m.flags.rx_ip_csum_good = cqe.l3_ok();
        m.flags.rx_l4_csum_good = cqe.l4_ok();
        m.flags.rx_rss_hash = (cqe.rss_hash_type() != 0).then(|| cqe.rss_hash_result());
    }
}

/// A receive queue handle. `Send`: each queue may live on its own thread.
pub struct RxQueue<B: Backend> {
    /// Keeps the function open as long as the ring exists (receive needs no MMIO).
    pub(crate) _backend: Arc<B>,
    pub(crate) ring: DmaRegion,
    pub(crate) dbr: DmaRegion,
    pub(crate) cq: CqRing,
    pub(crate) rqn: u32,
    pub(crate) log_size: u8,
    pub(crate) pi: u16,
    pub(crate) ci: u16,
    pub(crate) slots: Vec<Option<Mbuf>>,
    pub(crate) pool: Mempool,
    pub(crate) stats: QueueStats,
    pub(crate) published: StatsHandle,
    pub(crate) quarantine: Quarantine,
    pub(crate) interrupt: Option<CompletionInterrupt<B>>,
}

impl<B: Backend> RxQueue<B> {
    fn mask(&self) -> u16 {
        (1u16 << self.log_size).wrapping_sub(1)
    }

    /// Posts fresh buffers into every empty slot, with one doorbell-record update.
    pub(crate) fn refill(&mut self) {
        let size = 1u16 << self.log_size;
        let mut posted = false;
        while self.pi.wrapping_sub(self.ci) < size {
            let Some(m) = self.pool.alloc() else {
                self.stats.nombuf += 1;
                break;
            };
            let slot = self.pi & self.mask();
            let mut seg = [0u8; 16];
            if let Ok(mut d) = DataSeg::new(&mut seg[..]) {
                d.set_byte_count(m.capacity() as u32)
                    .set_lkey(m.lkey())
                    .set_addr(m.data_iova());
            }
            let _ = self.ring.write(usize::from(slot) * 16, &seg);
            self.slots[usize::from(slot)] = Some(m);
            self.pi = self.pi.wrapping_add(1);
            posted = true;
        }
        if posted {
            fence(Ordering::SeqCst);
            let _ = self.dbr.write_u32_be(0, u32::from(self.pi));
        }
    }

    /// Receives up to `max` packets (at most [`MAX_BURST`]) onto the end of `out`; returns how
    /// many. Refills the ring from the pool afterwards.
    #[inline(never)]
    pub fn rx_burst(&mut self, out: &mut Vec<Mbuf>, max: usize) -> usize {
        let got = self.receive(out, max);
        self.published.publish(&self.stats);
        got
    }

    fn receive(&mut self, out: &mut Vec<Mbuf>, max: usize) -> usize {
        let mut got = 0;
        let cqes_before = self.stats.cqes;
        while got < max.min(MAX_BURST) {
            let Some(c) = self.cq.peek() else { break };
            self.cq.consume();
            self.stats.cqes += 1;
            let op_own = c[63];
            let counter = u16::from_be_bytes([c[0x3c], c[0x3d]]);
            let qpn = u32::from_be_bytes([c[0x38], c[0x39], c[0x3a], c[0x3b]]) & 0x00ff_ffff;
            // A cyclic RQ completes in order: the counter must name the oldest posted WQE.
            if counter != self.ci || qpn != self.rqn || self.pi == self.ci {
                self.stats.bad_cqes += 1;
                continue;
            }
            let slot = usize::from(self.ci & self.mask());
            self.ci = self.ci.wrapping_add(1);
            let Some(mut m) = self.slots[slot].take() else {
                self.stats.bad_cqes += 1;
                continue;
            };
            if op_own >> 4 != CqeOpcode::RespSend as u8 {
                // Error or unknown completion: the buffer is done with; drop it back to the pool.
                self.stats.errors += 1;
                self.stats.last_error_syndrome = c[ERR_CQE_SYNDROME];
                drop(m);
                continue;
            }
            let bytes = u32::from_be_bytes([c[0x2c], c[0x2d], c[0x2e], c[0x2f]]);
            if bytes as usize > m.capacity() || bytes == 0 {
                self.stats.bad_cqes += 1;
                continue;
            }
            m.set_len(bytes);
            fill_rx_flags(&mut m, &c);
            self.stats.packets += 1;
            self.stats.bytes += u64::from(bytes);
            out.push(m);
            got += 1;
        }
        // Only a burst that consumed CQEs has a consumer index to report.
        if self.stats.cqes != cqes_before {
            self.cq.update_dbr();
        }
        self.refill();
        got
    }

    /// Counters of this queue.
    pub fn stats(&self) -> QueueStats {
        self.stats
    }

    /// Buffers posted and not yet completed.
    pub fn posted(&self) -> usize {
        usize::from(self.pi.wrapping_sub(self.ci))
    }

    /// The queue's RQ number.
    pub fn rqn(&self) -> u32 {
        self.rqn
    }

    /// Arms the completion interrupt (DPDK's `rte_eth_dev_rx_intr_enable`): the queue's vector
    /// fires at the next packet. Receive once more after arming before sleeping: a packet that
    /// came in between fires at once.
    pub fn arm_interrupt(&mut self) -> Result<(), DriverError> {
        let irq = self.interrupt.as_mut().ok_or_else(rxirq::not_enabled)?;
        irq.arm(&self.cq);
        Ok(())
    }

    /// Sleeps until the armed completion interrupt fires or `timeout` passes (zero: only takes
    /// what is pending, after epoll reported the fd readable). Returns true when it fired.
    pub fn wait_interrupt(&mut self, timeout: Duration) -> Result<bool, DriverError> {
        let irq = self.interrupt.as_mut().ok_or_else(rxirq::not_enabled)?;
        Ok(irq.wait(self.cq.cqn, timeout))
    }

    /// The completion interrupt's eventfd, for poll/epoll (`None` without receive interrupts).
    pub fn interrupt_fd(&self) -> Option<BorrowedFd<'_>> {
        self.interrupt.as_ref().map(|i| i.fd())
    }

    /// Completion interrupts taken so far.
    pub fn interrupts(&self) -> u64 {
        self.interrupt.as_ref().map_or(0, |i| i.events())
    }
}

impl<B: Backend> Drop for RxQueue<B> {
    fn drop(&mut self) {
        // The device may still write these until the port destroys the RQ.
        let mut q = self.quarantine.lock().unwrap_or_else(|e| e.into_inner());
        q.extend(self.slots.iter_mut().filter_map(Option::take));
    }
}
