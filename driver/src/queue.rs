//! Send and receive rings: the fast path. A [`TxQueue`] writes one WQE per packet and rings one
//! doorbell per burst (BlueFlame for a lone WQE); a [`RxQueue`] reads CQEs by owner bit and
//! refills its ring in batches. Neither allocates, locks or formats while moving packets; every
//! value the device writes (CQE owner, opcode, WQE counter, byte count) is checked before use.

use crate::backend::Backend;
use crate::burst::{BurstEntry, PacketBurst};
pub(crate) use crate::cq::CqRing;
use crate::cq::{Cqe, MiniRun};
use crate::error::DriverError;
use crate::inflight::{InFlight, Kept};
use crate::mempool::{Mbuf, Mempool, OffloadFlags, HEADROOM};
use crate::rxirq::{self, CompletionInterrupt};
use crate::stats::StatsHandle;
use crate::striding::StridingRx;
use crate::txsource::{BurstSource, SendPacket, TxSource, KEPT, REFUSED};
use cxdirect_dma::DmaRegion;
use cxdirect_hw::cqe::CqeOpcode;
use cxdirect_hw::doorbell::{UAR_BF_OFFSET, UAR_PAGE_SIZE};
use cxdirect_hw::wqe::{self, WQE_BB};
use std::os::fd::BorrowedFd;
use std::sync::atomic::{fence, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the send loop did with one packet.
enum Written {
    /// Its WQE is in the ring: basic blocks, packet bytes.
    Wqe(u16, usize),
    /// Not sendable by the port (shorter than an Ethernet header or longer than the frame).
    Refused,
    /// The ring has no room for its WQE now.
    NoRoom,
}

/// Where a received packet's data starts in a plain (not striding) ring's buffer.
const HEADROOM_U32: u32 = HEADROOM as u32;

/// Where a receive burst puts its packets: an [`Mbuf`] each onto a `Vec`, or by buffer index
/// into a [`PacketBurst`] (bound to the queue's pool beforehand).
pub(crate) trait RxSink {
    /// Takes the received packet of `len` bytes at `data_off` in `pool`'s buffer `index`
    /// (holding one reference to it), with `flags`.
    fn accept(&mut self, pool: &Mempool, index: u32, data_off: u32, len: u32, flags: OffloadFlags);
}

impl RxSink for Vec<Mbuf> {
    #[inline(always)]
    fn accept(&mut self, pool: &Mempool, index: u32, data_off: u32, len: u32, flags: OffloadFlags) {
        self.push(pool.adopt_part(index, data_off, len, flags));
    }
}

impl RxSink for PacketBurst {
    #[inline(always)]
    fn accept(&mut self, _: &Mempool, index: u32, data_off: u32, len: u32, flags: OffloadFlags) {
        PacketBurst::accept(
            self,
            BurstEntry {
                index,
                data_off,
                len,
                flags,
            },
        );
    }
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
    /// Send: enhanced multi-packet WQEs posted (each carrying two or more packets; see
    /// `PortConfig::tx_multi_packet`).
    pub multi_packet_wqes: u64,
    /// CQEs consumed.
    pub cqes: u64,
    /// CQEs with values the driver refused (counted; the queue stops until recovered).
    pub bad_cqes: u64,
    /// Receive: completions that arrived as mini-CQEs of a compressed session (also counted
    /// in `cqes`; see `PortConfig::rx_cqe_compression`).
    pub compressed_cqes: u64,
    /// Buffers given back to the pool by recovery without carrying a packet (send: also
    /// counted in `errors`).
    pub flushed: u64,
    /// Times the queue was recovered ([`crate::Port::recover_tx`] / `recover_rx`).
    pub recoveries: u64,
    /// Syndrome of the last error CQE (0 when none: 0x04 local protection, 0x05 flushed,
    /// 0x01 local length; the mlx5 error CQE's `syndrome` byte).
    pub last_error_syndrome: u8,
}

/// How far destroying and re-creating a queue and its failed CQ has got, so that a recovery
/// that failed partway resumes where it stopped instead of starting over.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Rebuild {
    /// Not being rebuilt.
    #[default]
    Idle,
    /// The work queue is destroyed and its buffers flushed; the failed CQ still exists.
    QueueDestroyed,
    /// The failed CQ is destroyed too.
    CqDestroyed,
    /// The new CQ exists; the work queue is to be created on it.
    CqCreated,
    /// Receive only: the new RQ exists; the port's steering is to be built around it.
    QueueCreated,
}

/// What the device may still touch when a queue handle is dropped early (its buffers, its ring,
/// its CQ and their doorbell records): kept until the port has destroyed the hardware queue or
/// the function was reset.
pub(crate) type Quarantine = Arc<Mutex<Quarantined>>;

/// The contents of a [`Quarantine`].
#[derive(Default)]
pub(crate) struct Quarantined {
    buffers: Vec<Mbuf>,
    rings: Vec<DmaRegion>,
}

impl Quarantined {
    /// Keeps `buffers`, and the memory of `rings` and of `cq` (which are left empty).
    pub(crate) fn keep(
        &mut self,
        buffers: impl Iterator<Item = Mbuf>,
        rings: [&mut DmaRegion; 2],
        cq: &mut CqRing,
    ) {
        self.buffers.extend(buffers);
        self.keep_cq(cq);
        self.rings.extend(rings.into_iter().map(DmaRegion::take));
    }

    /// Keeps the memory of `cq` (which is left empty).
    pub(crate) fn keep_cq(&mut self, cq: &mut CqRing) {
        self.rings.push(cq.region.take());
        self.rings.push(cq.dbr.take());
    }

    /// Lets everything go (the device reaches none of it any more); returns how many buffers
    /// went back to the pool.
    pub(crate) fn release(&mut self) -> usize {
        let buffers = self.buffers.len();
        self.buffers.clear();
        self.rings.clear();
        buffers
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
    /// WQEBBs in the ring less one (`2^log_size - 1`), kept so the fast path does not shift.
    pub(crate) ring_mask: u16,
    pub(crate) uar: u32,
    pub(crate) pi: u16,
    pub(crate) ci: u16,
    /// Buffers in flight, by WQE index.
    pub(crate) inflight: InFlight,
    pub(crate) bf_half: bool,
    pub(crate) blueflame: bool,
    pub(crate) inline: InlineMode,
    pub(crate) inline_max: usize,
    /// Runs of packets go in enhanced multi-packet WQEs (the SQ allows them).
    pub(crate) multi_packet: bool,
    pub(crate) cqe_every: u16,
    pub(crate) since_cqe: u16,
    pub(crate) max_frame: usize,
    pub(crate) stats: QueueStats,
    pub(crate) published: StatsHandle,
    pub(crate) quarantine: Quarantine,
    pub(crate) in_error: bool,
    pub(crate) rebuild: Rebuild,
    pub(crate) scratch: Option<Box<TxScratch>>,
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
            if cqe.opcode() == CqeOpcode::ReqErr as u8 {
                self.stats.errors += 1;
                self.stats.last_error_syndrome = cqe.syndrome();
                self.in_error = true;
            } else if !cqe.is_send_ok() {
                self.stats.bad_cqes += 1;
                self.in_error = true;
                continue;
            }
            // Free every WQE up to and including the completed one.
            let done = done.wrapping_add(1);
            let mask = self.mask();
            let ci = self.ci;
            self.inflight
                .complete((0..done).map(|k| usize::from(ci.wrapping_add(k) & mask)));
            self.ci = ci.wrapping_add(done);
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

    /// As [`TxQueue::tx_burst`], from the front of `burst`: the packets taken (sent, or
    /// refused and freed) leave the burst, the rest stay in order. Each packet sent is kept in
    /// flight by its buffer index, with no [`Mbuf`] to empty and drop.
    #[inline(never)]
    pub fn tx_burst_from(&mut self, burst: &mut PacketBurst) -> usize {
        let taken = match BurstSource::new(burst, &mut self.inflight) {
            Some(mut source) => self.send(&mut source),
            // Nothing to send: completions are still taken, as `tx_burst` takes them.
            None => self.send(&mut Vec::new()),
        };
        burst.remove_front(taken);
        self.published.publish(&self.stats);
        taken
    }

    fn send<S: TxSource>(&mut self, pkts: &mut S) -> usize {
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
        while count < limit {
            if self.multi_packet {
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
                if len < ETH_HEADER || len > self.max_frame {
                    Written::Refused
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
                Written::Refused => {
                    self.stats.errors += 1;
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
            self.ring_doorbell(last_index, last_bbs, posted == 1);
        }
        self.scratch = Some(scratch);
        count
    }

    /// Writes `wqe` (whole basic blocks) at ring index `index`, wrapping block by block.
    fn write_wqe(&self, index: u16, wqe: &[u8]) {
        for (bb, block) in wqe.chunks_exact(WQE_BB).enumerate() {
            let at = usize::from(index.wrapping_add(bb as u16) & self.mask()) * WQE_BB;
            let _ = self.ring.write(at, block);
        }
    }

    /// Writes one basic block at ring index `index` (wrapped to the ring) with one bounds check.
    #[inline]
    fn write_bb(&self, index: u16, words: &[u64; WQE_BB / 8]) {
        let at = usize::from(index & self.mask()) * WQE_BB;
        let _ = self.ring.write_words(at, words);
    }

    /// Publishes the burst: doorbell record, then one UAR write carrying the first basic block
    /// of the burst's last WQE (at ring index `last_index`): all of it as BlueFlame when that
    /// WQE is alone and fits one basic block, else its first 8 bytes.
    fn ring_doorbell(&mut self, last_index: u16, last_bbs: u16, alone: bool) {
        let last_at = usize::from(last_index & self.mask()) * WQE_BB;
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
            let mut last = [0u8; WQE_BB];
            let _ = self.ring.read(last_at, &mut last);
            self.backend.write_bf(offset, &last);
            self.stats.blueflame += 1;
        } else {
            let first: [u64; 1] = self.ring.read_words(last_at).unwrap_or_default();
            self.backend.write64(offset, first[0].to_ne_bytes());
        }
    }

    /// Counters of this queue.
    pub fn stats(&self) -> QueueStats {
        self.stats
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
        self.cq.cqn
    }

    /// Recovery: takes every completion left on the CQ without acting on it (the ring is being
    /// reset and its buffers flushed); returns how many.
    pub(crate) fn drain_completions(&mut self) -> usize {
        drain(&mut self.cq)
    }

    /// Recovery, once the device can no longer read the ring: every in-flight buffer goes back
    /// to its pool; returns how many.
    pub(crate) fn flush_in_flight(&mut self) -> usize {
        let flushed = self.inflight.take_all().len();
        self.stats.errors += flushed as u64;
        self.stats.flushed += flushed as u64;
        self.published.publish(&self.stats);
        flushed
    }

    /// Recovery: the ring starts again at index 0, as the device does after RST.
    pub(crate) fn restart(&mut self) {
        self.pi = 0;
        self.ci = 0;
        self.since_cqe = 0;
        let _ = self.dbr.write_u32_be(4, 0);
        self.in_error = false;
        self.stats.recoveries += 1;
        self.published.publish(&self.stats);
    }
}

/// Takes every CQE software owns off `cq` without reading it; returns how many.
fn drain(cq: &mut CqRing) -> usize {
    let mut drained = 0;
    // Bounded by the ring: a device rewriting entries as fast as they are taken cannot hold
    // recovery here.
    while drained < 1usize << cq.log_size && cq.peek_or_skipped().is_some() {
        cq.consume();
        drained += 1;
    }
    if drained > 0 {
        cq.update_dbr();
    }
    drained
}

impl<B: Backend> Drop for TxQueue<B> {
    fn drop(&mut self) {
        // The device may still read these, and write the CQ, until the port destroys the SQ.
        let mut q = self.quarantine.lock().unwrap_or_else(|e| e.into_inner());
        q.keep(
            self.inflight.take_all().into_iter(),
            [&mut self.ring, &mut self.dbr],
            &mut self.cq,
        );
    }
}

/// The first `N * 8` bytes of `bytes` as `N` words in memory order (what a volatile word store
/// of each writes back); words past the end of a shorter `bytes` stay zero.
#[inline]
pub(crate) fn words_from_bytes<const N: usize, const M: usize>(bytes: &[u8; M]) -> [u64; N] {
    let mut words = [0u64; N];
    for (word, chunk) in words.iter_mut().zip(bytes.chunks_exact(8)) {
        let mut b = [0u8; 8];
        b.copy_from_slice(chunk);
        *word = u64::from_ne_bytes(b);
    }
    words
}

/// `words` laid out in memory order into the front of `out` (as many whole words as fit).
#[inline]
pub(crate) fn bytes_from_words<const N: usize, const M: usize>(words: [u64; N], out: &mut [u8; M]) {
    for (chunk, word) in out.chunks_exact_mut(8).zip(words) {
        chunk.copy_from_slice(&word.to_ne_bytes());
    }
}

/// Most packets one `tx_burst` or `rx_burst` call moves.
pub const MAX_BURST: usize = 256;
/// Largest send WQE the driver builds, in bytes.
pub(crate) const MAX_WQE: usize = 1024;
const BF_HALF: usize = 256;
/// Bytes of an Ethernet header: the shortest frame a send queue takes.
pub(crate) const ETH_HEADER: usize = 14;
/// Bytes of packet headers inlined in the Ethernet segment (Ethernet + VLAN).
pub(crate) const ETH_INLINE: usize = wqe::ETH_L2_INLINE_HEADER_SIZE;

/// A receive CQE's packet types, checksum results and RSS hash, as a buffer's flags.
#[inline]
pub(crate) fn rx_flags(c: &Cqe) -> OffloadFlags {
    OffloadFlags {
        rx_l3_type: c.l3_type(),
        rx_l4_type: c.l4_type(),
        rx_ip_csum_good: c.l3_ok(),
        rx_l4_csum_good: c.l4_ok(),
        rx_rss_hash: c.rss_hash(),
        ..OffloadFlags::default()
    }
}

/// What [`RxQueue::receive_run`] took: packets accepted and their bytes.
#[derive(Default)]
struct RunTaken {
    accepted: usize,
    bytes: u64,
}

/// A receive ring slot with no buffer posted in it.
pub(crate) const EMPTY_SLOT: u32 = u32::MAX;

/// Takes every buffer posted in `slots` (indexes of `pool`) as an [`Mbuf`], leaving the slots
/// empty; dropping one returns it to the pool.
fn posted_buffers<'a>(slots: &'a mut [u32], pool: &'a Mempool) -> impl Iterator<Item = Mbuf> + 'a {
    slots
        .iter_mut()
        .map(|slot| std::mem::replace(slot, EMPTY_SLOT))
        .filter(|&index| index != EMPTY_SLOT)
        .map(|index| pool.adopt_posted(index))
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
    /// WQEs in the ring less one (`2^log_size - 1`), kept so the fast path does not shift.
    pub(crate) ring_mask: u16,
    pub(crate) pi: u16,
    pub(crate) ci: u16,
    /// The pool index of the buffer posted in each ring slot, or [`EMPTY_SLOT`]. Posted
    /// buffers are kept as bare indexes of `pool` (the ring owns them) and become [`Mbuf`]s
    /// only when received.
    pub(crate) slots: Vec<u32>,
    pub(crate) pool: Mempool,
    pub(crate) stats: QueueStats,
    pub(crate) published: StatsHandle,
    pub(crate) quarantine: Quarantine,
    pub(crate) interrupt: Option<CompletionInterrupt<B>>,
    pub(crate) in_error: bool,
    pub(crate) rebuild: Rebuild,
    /// This RQ's position in the port's RQ list (RSS spreads by position), kept while it is
    /// rebuilt.
    pub(crate) rss_place: usize,
    /// A striding RQ's geometry and place (`None`: one buffer per packet).
    pub(crate) striding: Option<StridingRx>,
}

impl<B: Backend> RxQueue<B> {
    #[inline(always)]
    pub(crate) fn mask(&self) -> u16 {
        self.ring_mask
    }

    /// Posts fresh buffers into every empty slot, with one doorbell-record update.
    pub(crate) fn refill(&mut self) {
        let size = self.ring_mask.wrapping_add(1);
        let empty = usize::from(size.wrapping_sub(self.pi.wrapping_sub(self.ci)));
        if empty == 0 {
            return;
        }
        let mask = self.mask();
        let striding = self.striding;
        let Self {
            ring,
            slots,
            pi,
            pool,
            ..
        } = self;
        // One key for the whole pool, registered before the queue started.
        let lkey = pool.lkey();
        let room = pool.data_room();
        // The ring's kind is chosen once, outside the per-buffer loop.
        let posted = match &striding {
            None => pool.take_each(empty, |index| {
                let slot = usize::from(*pi & mask);
                let seg = wqe::encode_data(room, lkey, pool.data_iova(index));
                let _ = ring.write_words::<2>(slot * 16, &words_from_bytes(&seg));
                slots[slot] = index;
                *pi = pi.wrapping_add(1);
            }),
            Some(striding) => pool.take_each(empty, |index| {
                let slot = usize::from(*pi & mask);
                striding.post(ring, pool.shared(), slot, index, lkey);
                slots[slot] = index;
                *pi = pi.wrapping_add(1);
            }),
        };
        if posted < empty {
            self.stats.nombuf += 1;
        }
        if posted > 0 {
            fence(Ordering::SeqCst);
            let _ = self.dbr.write_u32_be(0, u32::from(self.pi));
        }
    }

    /// Receives up to `max` packets (at most [`MAX_BURST`]) onto the end of `out`; returns how
    /// many. Refills the ring from the pool afterwards.
    #[inline(never)]
    pub fn rx_burst(&mut self, out: &mut Vec<Mbuf>, max: usize) -> usize {
        let got = if self.striding.is_some() {
            self.receive_striding(out, max)
        } else {
            self.receive(out, max)
        };
        self.published.publish(&self.stats);
        got
    }

    /// As [`RxQueue::rx_burst`], onto the end of `burst`: up to `max` packets and the burst's
    /// room, each kept by buffer index rather than as an [`Mbuf`]. Fails, with nothing
    /// received, when `burst` holds packets of a pool other than this queue's.
    #[inline(never)]
    pub fn rx_burst_into(
        &mut self,
        burst: &mut PacketBurst,
        max: usize,
    ) -> Result<usize, DriverError> {
        burst.receive_from(&self.pool)?;
        let max = max.min(burst.room());
        let got = if self.striding.is_some() {
            self.receive_striding(burst, max)
        } else {
            self.receive(burst, max)
        };
        self.published.publish(&self.stats);
        Ok(got)
    }

    /// Takes the buffer posted at the consumer index (its ring slot and pool index) for the
    /// completion being read, moving the consumer index on; `None`, with the queue stopped,
    /// when the device completed a slot with no buffer posted.
    #[inline(always)]
    fn take_oldest(&mut self) -> Option<(usize, u32)> {
        let slot = usize::from(self.ci & self.mask());
        self.ci = self.ci.wrapping_add(1);
        let index = std::mem::replace(&mut self.slots[slot], EMPTY_SLOT);
        if index == EMPTY_SLOT {
            self.refuse();
            return None;
        }
        Some((slot, index))
    }

    /// Stops the queue on a completion it refuses, until recovery. On a compressed CQ the
    /// refused completion may belong to a session whose title lied about its size, so where the
    /// device writes next is unknown: recovery then creates the CQ again.
    #[cold]
    pub(crate) fn refuse(&mut self) {
        self.stats.bad_cqes += 1;
        self.in_error = true;
        if self.cq.compressed {
            self.cq.lost_place = true;
        }
    }

    fn receive(&mut self, out: &mut impl RxSink, max: usize) -> usize {
        if self.in_error {
            return 0;
        }
        let mut got = 0;
        let cqes_before = self.stats.cqes;
        let minis_before = self.cq.mini_cqes;
        let room = self.pool.data_room();
        let mut received_bytes = 0u64;
        let limit = max.min(MAX_BURST);
        while got < limit {
            if let Some(run) = self.cq.mini_run(limit - got) {
                let taken = self.receive_run(&run, room, out);
                got += taken.accepted;
                received_bytes += taken.bytes;
                if self.in_error {
                    break;
                }
                continue;
            }
            let Some(c) = self.cq.peek() else { break };
            self.cq.consume();
            self.stats.cqes += 1;
            // A cyclic RQ completes in order: the counter must name the oldest posted WQE.
            if c.wqe_counter() != self.ci || c.qpn() != self.rqn || self.pi == self.ci {
                // Out of step with the device: stop until recovery resets the ring.
                self.refuse();
                break;
            }
            let Some((slot, index)) = self.take_oldest() else {
                break;
            };
            if c.is_error() {
                // The device moved the RQ to error and is done with this WQE: the buffer goes
                // back to the pool; the queue waits for recovery.
                self.stats.errors += 1;
                self.stats.last_error_syndrome = c.syndrome();
                self.in_error = true;
                self.pool.give_back(index);
                break;
            }
            let bytes = c.byte_cnt();
            if !c.is_receive_ok() || bytes > room || bytes == 0 {
                // A completion the driver refuses says nothing it can trust about the buffer:
                // the device may still write it, so it stays posted until recovery has moved
                // the RQ to RST and flushes it.
                self.slots[slot] = index;
                self.refuse();
                break;
            }
            received_bytes += u64::from(bytes);
            out.accept(&self.pool, index, HEADROOM_U32, bytes, rx_flags(&c));
            got += 1;
        }
        self.finish_burst(got, received_bytes, cqes_before, minis_before);
        got
    }

    /// Ends a receive burst that took `got` packets of `bytes` in all: counts them, reports the
    /// consumer index when CQEs were consumed (`cqes_before`, `minis_before`: the counters when
    /// it began) and refills the ring unless the queue stopped.
    #[inline(always)]
    pub(crate) fn finish_burst(
        &mut self,
        got: usize,
        bytes: u64,
        cqes_before: u64,
        minis_before: u64,
    ) {
        self.stats.packets += got as u64;
        self.stats.bytes += bytes;
        self.stats.compressed_cqes += self.cq.mini_cqes - minis_before;
        // Only a burst that consumed CQEs has a consumer index to report.
        if self.stats.cqes != cqes_before {
            self.cq.update_dbr();
        }
        if !self.in_error {
            self.refill();
        }
    }

    /// Receives the completions of `run` (one mini-CQE array of a compressed session) onto
    /// `out`: what they share is checked once, on the first, as a plain CQE is checked; each
    /// one's byte count and buffer on its own. Consumes what it looked at; a refusal sets
    /// `in_error` as [`RxQueue::receive`] does.
    #[inline(always)]
    fn receive_run(&mut self, run: &MiniRun, room: u32, out: &mut impl RxSink) -> RunTaken {
        let mut taken = RunTaken::default();
        let first = &run.first;
        let posted = usize::from(self.pi.wrapping_sub(self.ci));
        if first.wqe_counter() != self.ci
            || first.qpn() != self.rqn
            || !first.is_receive_ok()
            || posted == 0
        {
            self.cq.consume_run(1);
            self.stats.cqes += 1;
            self.refuse();
            return taken;
        }
        let flags = rx_flags(first);
        let hashed = flags.rx_rss_hash.is_some();
        let mut looked = 0;
        // More completions than posted buffers: the ones past the last buffer are refused on
        // the next run, as the plain path refuses them one by one.
        for i in 0..run.len.min(posted) {
            looked += 1;
            let (bytes, hash) = run.byte_cnt_and_hash(i);
            let Some((slot, index)) = self.take_oldest() else {
                break;
            };
            if bytes > room || bytes == 0 {
                // As in `receive`: the buffer stays posted until recovery flushes it.
                self.slots[slot] = index;
                self.refuse();
                break;
            }
            taken.bytes += u64::from(bytes);
            let flags = OffloadFlags {
                rx_rss_hash: hashed.then_some(hash),
                ..flags
            };
            out.accept(&self.pool, index, HEADROOM_U32, bytes, flags);
            taken.accepted += 1;
        }
        self.cq.consume_run(looked as u32);
        self.stats.cqes += looked as u64;
        taken
    }

    /// True once the device completed a receive in error or wrote a completion the driver
    /// refused: nothing more is received until [`crate::Port::recover_rx`].
    pub fn in_error(&self) -> bool {
        self.in_error
    }

    /// True when this is a striding receive queue ([`crate::PortConfig::rx_striding`]).
    pub fn is_striding(&self) -> bool {
        self.striding.is_some()
    }

    /// The number of the CQ this queue completes on.
    pub fn cqn(&self) -> u32 {
        self.cq.cqn
    }

    /// Recovery: takes every completion left on the CQ without acting on it; returns how many.
    pub(crate) fn drain_completions(&mut self) -> usize {
        drain(&mut self.cq)
    }

    /// Recovery, once the device can no longer write the ring's buffers: every posted buffer
    /// goes back to the pool; returns how many.
    pub(crate) fn flush_posted(&mut self) -> usize {
        let flushed = posted_buffers(&mut self.slots, &self.pool).count();
        self.stats.flushed += flushed as u64;
        flushed
    }

    /// Moves the queue to `pool` (after its buffers were flushed: a buffer still posted goes
    /// back to the pool it came from first).
    pub(crate) fn set_pool(&mut self, pool: Mempool) {
        self.flush_posted();
        // A striding queue's buffers come from the port's striding pool, which stays.
        if self.striding.is_none() {
            self.pool = pool;
        }
    }

    /// Recovery: the ring starts again at index 0 (as the device does after RST) and is
    /// refilled.
    pub(crate) fn restart(&mut self) {
        self.pi = 0;
        self.ci = 0;
        if let Some(striding) = self.striding.as_mut() {
            striding.used = 0;
            striding.pending = 0;
        }
        let _ = self.dbr.write_u32_be(0, 0);
        self.in_error = false;
        self.stats.recoveries += 1;
        self.refill();
        self.published.publish(&self.stats);
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
        // The device may still write these, and read the ring, until the port destroys the RQ.
        let mut q = self.quarantine.lock().unwrap_or_else(|e| e.into_inner());
        q.keep(
            posted_buffers(&mut self.slots, &self.pool),
            [&mut self.ring, &mut self.dbr],
            &mut self.cq,
        );
    }
}
