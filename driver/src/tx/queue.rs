//! The send queue: one WQE per packet, one doorbell per burst (BlueFlame for a lone WQE).
//! Nothing here allocates, locks or formats while sending; every value the device writes (CQE
//! owner, opcode, WQE counter) is checked before use.

use super::inflight::{InFlight, Kept};
use super::lso::TxRefusal;
use super::source::{PacketSource, SendPacket, KEPT, REFUSED};
use crate::backend::barrier::{dma_wmb, wmb};
use crate::backend::Backend;
use crate::cq::CqRing;
use crate::error::DriverError;
use crate::mem::{Mbuf, PacketBurst, Quarantine};
use crate::ring::{DoorbellRecord, QueueStats, Rebuild, SlotRing, StatsHandle, MAX_BURST};
use cxdirect_dma::DmaRegion;
use cxdirect_hw::cqe::{CqeOpcode, CqeSyndrome};
use cxdirect_hw::doorbell::bf_buffer_offset;
use cxdirect_hw::wqe::{ETH_L2_INLINE_HEADER_SIZE, WQE_BB};
use std::sync::Arc;

mod gather;
#[cfg(test)]
mod gather_tests;
mod recovery;
mod template;
#[cfg(test)]
mod tests;
mod wqe;

use template::{SendTemplate, CE_WORD};

/// What the send loop did with one packet.
enum Written {
    /// Its WQE is in the ring: basic blocks, packet bytes.
    Wqe(u16, usize),
    /// Not sendable by the port, for this reason.
    Refused(TxRefusal),
    /// The ring has no room for its WQE now.
    NoRoom,
}

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

/// A send queue handle. `Send`: each queue may live on its own thread.
pub struct TxQueue<B: Backend> {
    backend: Arc<B>,
    ring: SlotRing<WQE_BB>,
    dbr: DoorbellRecord,
    cq: CqRing,
    sqn: u32,
    /// What every one-basic-block SEND WQE of the queue shares, worked out once.
    template: SendTemplate,
    log_size: u8,
    /// WQEBBs in the ring less one (`2^log_size - 1`), kept so the fast path does not shift.
    ring_mask: u16,
    uar: u32,
    pi: u16,
    ci: u16,
    /// Buffers in flight, by WQE index.
    inflight: InFlight,
    bf_half: bool,
    blueflame: bool,
    inline: InlineMode,
    inline_max: usize,
    /// Runs of packets go in enhanced multi-packet WQEs (the SQ allows them).
    multi_packet: bool,
    cqe_every: u16,
    since_cqe: u16,
    max_frame: usize,
    /// Largest LSO message in bytes; 0 when the port sends without TSO.
    max_lso: usize,
    stats: QueueStats,
    published: StatsHandle,
    quarantine: Quarantine,
    in_error: bool,
    rebuild: Rebuild,
    scratch: Option<Box<TxScratch>>,
}

/// What [`TxQueue::tx_burst`] sends from: a `Vec<Mbuf>` (packets of any shape and pool) or a
/// [`PacketBurst`] (single-segment packets of one pool, kept by buffer index). The packets
/// sent, and those refused and freed, leave the front of the source; the rest stay, in order.
///
/// Sealed: the queue hands each packet's buffer to the device and keeps it in flight until the
/// device reports it sent, so a source must give up buffers it owns, exactly once, in a way the
/// queue can return to their pool. Only the driver's own types can promise that.
pub trait TxSource: sealed::SendFrom {}

impl TxSource for Vec<Mbuf> {}
impl TxSource for PacketBurst {}

mod sealed {
    use super::TxQueue;
    use crate::backend::Backend;
    use crate::mem::{Mbuf, PacketBurst};
    use crate::tx::source::BurstSource;

    /// How a [`super::TxSource`] is sent from (not nameable outside the crate).
    pub trait SendFrom {
        /// Sends from the front of the source on `queue`; returns the packets taken.
        fn send_on<B: Backend>(&mut self, queue: &mut TxQueue<B>) -> usize;
    }

    impl SendFrom for Vec<Mbuf> {
        #[inline(always)]
        fn send_on<B: Backend>(&mut self, queue: &mut TxQueue<B>) -> usize {
            queue.send(self)
        }
    }

    impl SendFrom for PacketBurst {
        /// Each packet sent is kept in flight by its buffer index, with no [`Mbuf`] to empty
        /// and drop.
        #[inline(always)]
        fn send_on<B: Backend>(&mut self, queue: &mut TxQueue<B>) -> usize {
            let taken = match BurstSource::new(self, queue.inflight_mut()) {
                Some(mut source) => queue.send(&mut source),
                // Nothing to send: completions are still taken, as for a `Vec`.
                None => queue.send(&mut Vec::new()),
            };
            self.remove_front(taken);
            taken
        }
    }
}

/// What a port hands a new send queue: the objects it created for it and the settings it
/// sends with.
pub(crate) struct SendQueueParts<B: Backend> {
    pub(crate) backend: Arc<B>,
    /// The ring (`2^log_size` WQEBBs) and its doorbell record.
    pub(crate) ring: DmaRegion,
    pub(crate) dbr: DmaRegion,
    pub(crate) log_size: u8,
    pub(crate) cq: CqRing,
    pub(crate) sqn: u32,
    /// The UAR page the SQ rings its doorbell through.
    pub(crate) uar: u32,
    pub(crate) blueflame: bool,
    pub(crate) inline: InlineMode,
    /// Longest packet sent fully inline, in bytes.
    pub(crate) inline_max: usize,
    pub(crate) multi_packet: bool,
    /// Completions asked for every this many WQEs.
    pub(crate) cqe_every: u16,
    /// Longest frame sent, in bytes.
    pub(crate) max_frame: usize,
    /// Largest LSO (TSO) message in bytes; 0 when the port was started without TSO.
    pub(crate) max_lso: usize,
    pub(crate) published: StatsHandle,
    pub(crate) quarantine: Quarantine,
}

/// Where a burst is assembled, kept with the queue so a burst starts without zeroing anything.
pub(crate) struct TxScratch {
    /// The WQE being built.
    wqe: [u8; MAX_WQE],
    /// Per packet of the burst, what became of it (see [`REFUSED`]).
    fates: [u32; MAX_BURST],
}

impl Default for TxScratch {
    fn default() -> Self {
        Self {
            wqe: [0; MAX_WQE],
            fates: [REFUSED; MAX_BURST],
        }
    }
}

impl<B: Backend> TxQueue<B> {
    /// A send queue over what the port created, starting at ring index 0.
    ///
    /// # Errors
    ///
    /// [`DriverError::Internal`] when the ring's memory cannot hold its WQEBBs.
    pub(crate) fn new(parts: SendQueueParts<B>) -> Result<Self, DriverError> {
        let entries = 1u32 << parts.log_size;
        Ok(Self {
            backend: parts.backend,
            ring: SlotRing::new(parts.ring, parts.log_size)?,
            dbr: DoorbellRecord::new(parts.dbr)?,
            cq: parts.cq,
            sqn: parts.sqn,
            template: SendTemplate::new(parts.sqn),
            log_size: parts.log_size,
            ring_mask: (entries - 1) as u16,
            uar: parts.uar,
            pi: 0,
            ci: 0,
            inflight: InFlight::new(entries as usize),
            bf_half: false,
            blueflame: parts.blueflame,
            inline: parts.inline,
            inline_max: parts.inline_max,
            multi_packet: parts.multi_packet,
            cqe_every: parts.cqe_every,
            since_cqe: 0,
            max_frame: parts.max_frame,
            max_lso: parts.max_lso,
            stats: QueueStats::default(),
            published: parts.published,
            quarantine: parts.quarantine,
            in_error: false,
            rebuild: Rebuild::Idle,
            scratch: Some(Box::default()),
        })
    }

    #[inline(always)]
    pub(crate) fn mask(&self) -> u16 {
        self.ring_mask
    }

    /// WQEBBs free in the ring.
    #[inline(always)]
    pub(crate) fn free(&self) -> u16 {
        self.ring_mask
            .wrapping_add(1)
            .wrapping_sub(self.pi.wrapping_sub(self.ci))
    }

    /// Takes completions: buffers up to each reported WQE go back to their pool.
    fn reap(&mut self) {
        let mut progressed = false;
        while let Some(cqe) = self.cq.peek() {
            self.cq.consume();
            progressed = true;
            self.stats.cqes += 1;
            let counter = cqe.wqe_counter();
            // The reported WQE must be one we posted and not yet completed.
            let outstanding = self.pi.wrapping_sub(self.ci);
            let done = counter.wrapping_sub(self.ci);
            if done >= outstanding {
                // Out of step with the device: stop until recovery resets the ring.
                self.stats.bad_cqes += 1;
                self.in_error = true;
                continue;
            }
            // Free every WQE up to and including the completed one.
            let done = done.wrapping_add(1);
            let mut flushed = false;
            if cqe.opcode() == CqeOpcode::ReqErr as u8 {
                // The SQ flushes what was posted past a failed WQE (`flush_in_error_en`): the
                // failure's syndrome stays the one reported.
                flushed = cqe.syndrome() == CqeSyndrome::WrFlushed as u8;
                if !flushed {
                    self.stats.errors += 1;
                    self.stats.last_error_syndrome = cqe.syndrome();
                }
                self.in_error = true;
            } else if !cqe.is_send_ok() {
                self.stats.bad_cqes += 1;
                self.in_error = true;
                continue;
            }
            let ci = self.ci;
            // Flushed packets count as errors and as flushed, as recovery counts what it finds
            // still in flight (an error path: the count walks the in-flight table).
            let before = if flushed { self.inflight.count() } else { 0 };
            self.inflight
                .complete(usize::from(ci & self.mask()), usize::from(done));
            if flushed {
                let freed = before.saturating_sub(self.inflight.count()) as u64;
                self.stats.errors += freed;
                self.stats.flushed += freed;
            }
            self.ci = ci.wrapping_add(done);
        }
        if progressed {
            self.cq.update_dbr();
        }
    }

    /// Sends packets from the front of `source` (up to [`MAX_BURST`] per call, fewer when the
    /// ring is full) and returns how many were taken; the rest stay in `source`, in order. A
    /// packet the port cannot send (shorter than an Ethernet header, longer than the frame
    /// size without TSO, or one TSO cannot take: see [`TxRefusal`]) is dropped and counted in
    /// `errors`, its reason kept in `last_refusal`; it counts as taken. Completions are taken
    /// first, also when `source` is empty.
    #[inline(never)]
    pub fn tx_burst(&mut self, source: &mut impl TxSource) -> usize {
        let taken = source.send_on(self);
        self.published.publish(&self.stats);
        taken
    }

    /// The buffers in flight, for a source to learn its pool's place in.
    #[inline(always)]
    fn inflight_mut(&mut self) -> &mut InFlight {
        &mut self.inflight
    }

    /// The send loop, over any packet source.
    fn send<S: PacketSource>(&mut self, pkts: &mut S) -> usize {
        self.reap();
        if self.in_error || pkts.count() == 0 {
            return 0;
        }
        let mut last_bbs = 0u16;
        let mut last_index = 0u16;
        let mut posted = 0usize;
        let mut bytes = 0u64;
        let mut count = 0usize;
        let mut sorted = false;
        // Taken out for the burst so `build` can borrow the queue; put back at the end.
        let Some(mut scratch) = self.scratch.take() else {
            return 0;
        };
        let limit = pkts.count().min(MAX_BURST);
        // Decided once per burst, not per packet: whether runs go in multi-packet WQEs, and
        // the template shape plain packets take.
        let multi_packet = self.multi_packet;
        let shape = self.bb_shape();
        // Packets held by buffer index start with the template run, which sends as many as
        // fit the queue's template in a row; the loop below takes the rest, if any.
        if let Some((pool, entries, place)) = pkts.entries().filter(|_| !multi_packet) {
            let run = (pool, &entries[..limit], place);
            count = self.template_run(shape, run, &mut scratch.fates, &mut bytes);
            if count > 0 {
                posted = count;
                last_bbs = 1;
                last_index = self.pi.wrapping_sub(1);
            }
        }
        while count < limit {
            if multi_packet {
                if let Some((taken, run_bytes, size)) =
                    self.multi_packet_wqe(pkts, count, limit, &mut scratch.wqe)
                {
                    let bbs = size.div_ceil(WQE_BB) as u16;
                    self.write_wqe(self.pi, &scratch.wqe[..usize::from(bbs) * WQE_BB]);
                    self.inflight.close_run(usize::from(self.pi & self.mask()));
                    scratch.fates[count..count + taken].fill(KEPT);
                    last_bbs = bbs;
                    last_index = self.pi;
                    self.pi = self.pi.wrapping_add(bbs);
                    bytes += run_bytes;
                    posted += taken;
                    count += taken;
                    continue;
                }
            }
            let index = self.pi;
            let written = {
                let m = pkts.packet(count);
                let len = m.pkt_len();
                if let Some(mss) = m.flags().tx_tso_mss {
                    // Rare next to plain sends: built out of line, keeping the loop small.
                    self.write_lso(&m, mss, len, &mut scratch.wqe)
                } else if len < ETH_HEADER || len > self.max_frame {
                    Written::Refused(TxRefusal::Length)
                } else if self.template_bb(shape, &m, len) {
                    Written::Wqe(1, len)
                } else if let Some(words) = self.single_bb_wqe(&m, len) {
                    self.write_bb(index, &words);
                    Written::Wqe(1, len)
                } else if let Some((blocks, bbs)) = self.full_inline_wqe(&m, len) {
                    for (bb, block) in blocks.iter().take(usize::from(bbs)).enumerate() {
                        self.write_bb(index.wrapping_add(bb as u16), block);
                    }
                    Written::Wqe(bbs, len)
                } else if let Some(size) = self.build(&m, &mut scratch.wqe) {
                    let bbs = size.div_ceil(WQE_BB) as u16;
                    self.write_wqe(index, &scratch.wqe[..usize::from(bbs) * WQE_BB]);
                    Written::Wqe(bbs, len)
                } else {
                    Written::NoRoom
                }
            };
            let (bbs, len) = match written {
                Written::Wqe(bbs, len) => (bbs, len),
                Written::Refused(refusal) => {
                    self.count_refusal(refusal);
                    scratch.fates[count] = REFUSED;
                    sorted = true;
                    count += 1;
                    continue;
                }
                // Does not fit the ring now: stop here, the rest stay queued.
                Written::NoRoom => break,
            };
            last_bbs = bbs;
            last_index = index;
            let slot = usize::from(index & self.mask());
            scratch.fates[count] = match pkts.keep(count, slot, &mut self.inflight) {
                Kept::Index => KEPT,
                Kept::Whole => slot as u32,
            };
            sorted |= scratch.fates[count] != KEPT;
            // Later WQEs of the same packet's slot range hold no buffer.
            self.pi = self.pi.wrapping_add(bbs);
            bytes += len as u64;
            posted += 1;
            count += 1;
        }
        pkts.finish(count, &scratch.fates, sorted, &mut self.inflight);
        if posted > 0 {
            self.stats.packets += posted as u64;
            self.stats.bytes += bytes;
            self.request_completion_if_low(last_index);
            self.ring_doorbell(last_index, last_bbs, posted == 1);
        }
        self.scratch = Some(scratch);
        count
    }

    /// Writes the LSO WQE of `m` (`len` bytes, TSO with `mss`) at the producer index, or says
    /// why it is refused or that the ring has no room for it. Out of line so that the loop
    /// sending everything else stays small.
    #[cold]
    #[inline(never)]
    fn write_lso(
        &mut self,
        m: &impl SendPacket,
        mss: u16,
        len: usize,
        wqe: &mut [u8; MAX_WQE],
    ) -> Written {
        match self.lso_wqe(m, mss, wqe) {
            Ok(Some(size)) => {
                let bbs = size.div_ceil(WQE_BB) as u16;
                self.write_wqe(self.pi, &wqe[..usize::from(bbs) * WQE_BB]);
                Written::Wqe(bbs, len)
            }
            Ok(None) => Written::NoRoom,
            Err(refusal) => Written::Refused(refusal),
        }
    }

    /// Counts a refused packet and keeps why (refusals are rare: out of the loop's way).
    #[cold]
    #[inline(never)]
    fn count_refusal(&mut self, refusal: TxRefusal) {
        self.stats.errors += 1;
        self.stats.last_refusal = Some(refusal);
    }

    /// Writes `wqe` (whole basic blocks) at ring index `index`, wrapping block by block.
    fn write_wqe(&self, index: u16, wqe: &[u8]) {
        for (bb, block) in wqe.chunks_exact(WQE_BB).enumerate() {
            self.ring
                .write_bytes(u32::from(index.wrapping_add(bb as u16)), 0, block);
        }
    }

    /// Writes one basic block at ring index `index` (wrapped to the ring) with one bounds check.
    #[inline]
    fn write_bb(&self, index: u16, words: &[u64; WQE_BB / 8]) {
        self.ring.write_words(u32::from(index), words);
    }

    /// Once per burst, before the doorbell: when the ring is running low and the burst's last
    /// WQE (at ring index `last_index`) asks for no completion, it is made to ask for one, so
    /// the space comes back before the driver runs out of it. The WQEs written from the
    /// queue's template leave this to the burst's end instead of checking the ring's room per
    /// packet.
    #[inline]
    fn request_completion_if_low(&mut self, last_index: u16) {
        if self.free() >= LOW_RING_BBS {
            return;
        }
        let [_, word]: [u64; 2] = self.ring.read_words(u32::from(last_index));
        if word & CE_WORD == 0 {
            self.ring
                .write_bytes(u32::from(last_index), 8, &(word | CE_WORD).to_ne_bytes());
            self.since_cqe = 0;
        }
    }

    /// Publishes the burst: doorbell record, then one UAR write carrying the first basic block
    /// of the burst's last WQE (at ring index `last_index`): all of it as BlueFlame when that
    /// WQE is alone and fits one basic block, else its first 8 bytes.
    fn ring_doorbell(&mut self, last_index: u16, last_bbs: u16, alone: bool) {
        // The burst's WQEs must reach the device before the record that publishes them.
        dma_wmb();
        self.dbr.set(1, u32::from(self.pi));
        // The record must reach the device before the doorbell that makes it read the ring.
        wmb();
        let offset = bf_buffer_offset(self.uar, self.bf_half);
        self.bf_half = !self.bf_half;
        self.stats.doorbells += 1;
        if self.blueflame && alone && last_bbs == 1 {
            let mut last = [0u8; WQE_BB];
            self.ring.read_bytes(u32::from(last_index), 0, &mut last);
            self.backend.write_bf(offset, &last);
            self.stats.blueflame += 1;
        } else {
            let first: [u64; 1] = self.ring.read_words(u32::from(last_index));
            self.backend.write64(offset, first[0].to_ne_bytes());
        }
    }

    /// Counters of this queue.
    pub fn stats(&self) -> QueueStats {
        self.stats
    }

    /// Largest LSO (TSO) message in bytes; 0 when the port was started without TSO.
    pub fn max_lso(&self) -> usize {
        self.max_lso
    }

    /// Buffers the device has not yet reported sent.
    pub fn in_flight(&self) -> usize {
        self.inflight.count()
    }

    /// True once the device reported an error on this queue, or wrote a completion the driver
    /// refused: no more sends until [`crate::Port::recover_tx`].
    pub fn in_error(&self) -> bool {
        self.in_error
    }

    /// The send queue's number.
    pub fn sqn(&self) -> u32 {
        self.sqn
    }

    /// The number of the CQ this queue completes on.
    pub fn cqn(&self) -> u32 {
        self.cq.cqn()
    }
}

impl<B: Backend> Drop for TxQueue<B> {
    fn drop(&mut self) {
        // The device may still read these, and write the CQ, until the port destroys the SQ.
        let mut q = self.quarantine.lock().unwrap_or_else(|e| e.into_inner());
        q.keep(
            self.inflight.take_all().into_iter(),
            [self.ring.take_region(), self.dbr.take_region()],
            self.cq.take_memory(),
        );
    }
}

/// Largest send WQE the driver builds, in bytes.
pub(crate) const MAX_WQE: usize = 1024;
/// Free WQEBBs below which a completion is requested at once: room for two of the largest
/// WQEs.
pub(crate) const LOW_RING_BBS: u16 = 2 * (MAX_WQE / WQE_BB) as u16;
/// Bytes of an Ethernet header: the shortest frame a send queue takes.
pub(crate) const ETH_HEADER: usize = 14;
/// Bytes of packet headers inlined in the Ethernet segment (Ethernet + VLAN).
pub(crate) const ETH_INLINE: usize = ETH_L2_INLINE_HEADER_SIZE;
