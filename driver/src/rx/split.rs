//! The split receive queue (devmem-style): each receive WQE has two data segments, a header
//! buffer of `header_bytes` from a host pool and a payload buffer carved from a dmabuf range,
//! each under its own memory key. The device fills the header buffer with the frame's first
//! bytes and the payload buffer with the rest; the application gets the header as an [`Mbuf`]
//! and the payload as a [`PayloadToken`], and a payload buffer is posted again only after its
//! token was given back. Nothing here allocates, locks or formats while receiving; the byte
//! count the device writes is checked against both buffers before use.

use crate::backend::barrier::dma_wmb;
use crate::backend::Backend;
use crate::cq::{rx_flags, CqRing};
use crate::error::DriverError;
use crate::mem::{Mbuf, Mempool, Quarantine};
use crate::ring::{words_from_bytes, DoorbellRecord, QueueStats, SlotRing, StatsHandle, MAX_BURST};
use cxdirect_dma::{DmaBufMapping, DmaRegion};
use cxdirect_hw::wqe;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

mod headers;
mod tokens;

use tokens::PayloadBuffers;
pub use tokens::PayloadToken;

/// Bytes of one split receive WQE: two 16-byte data segments.
pub(crate) const SPLIT_WQE_BYTES: usize = 32;

/// Header buffer sizes a split queue takes: any length in this range, from an Ethernet header
/// (14 bytes) up; the device splits each frame at exactly this many bytes.
pub const SPLIT_HEADER_BYTES: std::ops::RangeInclusive<u32> = 14..=1024;

/// A ring slot with nothing posted in it.
const EMPTY: u32 = u32::MAX;

/// Tags each split queue's tokens, so a token given to another queue is recognised.
static NEXT_QUEUE_TAG: AtomicU32 = AtomicU32::new(1);

/// One packet received on a split queue.
#[derive(Debug)]
pub struct SplitPacket {
    /// The frame's first bytes (up to the queue's `header_bytes`) in host memory: the headers,
    /// and the start of the payload when the headers are shorter
    /// ([`SplitPacket::payload_in_header`]). Dropping it returns the buffer to the header pool.
    pub header: Mbuf,
    /// The rest of the frame, in the dmabuf; `None` when the frame ended in the header buffer.
    pub payload: Option<PayloadToken>,
}

impl SplitPacket {
    /// The length of the frame's Ethernet, IP and TCP/UDP headers, read from the header
    /// buffer; `None` when they do not all fit it or the frame is not TCP/UDP over IP.
    pub fn headers_len(&self) -> Option<usize> {
        let mut bytes = [0u8; *SPLIT_HEADER_BYTES.end() as usize];
        let n = self.header.read(0, &mut bytes);
        headers::headers_len(&bytes[..n])
    }

    /// Payload bytes in the header buffer, after the headers (0 when the headers fill it, or
    /// cannot be measured: see [`SplitPacket::headers_len`]).
    pub fn payload_in_header(&self) -> usize {
        self.headers_len()
            .map_or(0, |h| self.header.len().saturating_sub(h))
    }

    /// Frame bytes in all: the header buffer's and the token's.
    pub fn frame_len(&self) -> usize {
        self.header.len() + self.payload.map_or(0, |t| t.len() as usize)
    }
}

/// Counters of a split receive queue.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SplitRxStats {
    /// Packets received.
    pub packets: u64,
    /// Packets that ended in the header buffer (no token).
    pub header_only: u64,
    /// Bytes received into host header buffers.
    pub header_bytes: u64,
    /// Bytes received into the dmabuf.
    pub payload_bytes: u64,
    /// Tokens lent and not yet given back.
    pub tokens_outstanding: u64,
    /// The most tokens out at once.
    pub tokens_highest: u64,
    /// Tokens given back.
    pub tokens_given_back: u64,
    /// Refills that found no header buffer or no payload buffer for every empty slot.
    pub nombuf: u64,
    /// Error completions (the device moved the RQ to error).
    pub errors: u64,
    /// Completions the driver refused (the queue stops).
    pub bad_cqes: u64,
    /// The syndrome of the last error completion.
    pub last_error_syndrome: u8,
}

/// What a split queue is built from ([`crate::Port::create_split_rx`]): its memory and the
/// sizes the port checked.
pub(crate) struct SplitQueueParts<B: Backend> {
    pub(crate) backend: Arc<B>,
    pub(crate) ring: DmaRegion,
    pub(crate) dbr: DmaRegion,
    pub(crate) log_size: u8,
    pub(crate) cq: CqRing,
    pub(crate) rqn: u32,
    pub(crate) header_pool: Mempool,
    pub(crate) header_bytes: u32,
    pub(crate) payload: Arc<DmaBufMapping>,
    pub(crate) payload_lkey: u32,
    pub(crate) payload_bytes: u32,
    pub(crate) published: StatsHandle,
    pub(crate) quarantine: Quarantine,
}

/// A split receive queue handle (see the module documentation). `Send`: it may live on its
/// own thread.
pub struct SplitRxQueue<B: Backend> {
    _backend: Arc<B>,
    ring: SlotRing<SPLIT_WQE_BYTES>,
    dbr: DoorbellRecord,
    cq: CqRing,
    rqn: u32,
    mask: u16,
    pi: u16,
    ci: u16,
    /// Per ring slot: the header pool index and the payload buffer posted there.
    headers: Vec<u32>,
    payloads: Vec<u32>,
    header_pool: Mempool,
    header_bytes: u32,
    payload: Arc<DmaBufMapping>,
    payload_lkey: u32,
    buffers: PayloadBuffers,
    stats: SplitRxStats,
    queue_stats: QueueStats,
    published: StatsHandle,
    quarantine: Quarantine,
    in_error: bool,
}

impl<B: Backend> SplitRxQueue<B> {
    /// A split queue over what the port created, its ring filled.
    pub(crate) fn new(parts: SplitQueueParts<B>) -> Result<Self, DriverError> {
        let entries = 1usize << parts.log_size;
        let count = u32::try_from(parts.payload.len() / parts.payload_bytes as usize)
            .unwrap_or(u32::MAX - 1);
        let mut q = Self {
            _backend: parts.backend,
            ring: SlotRing::new(parts.ring, parts.log_size)?,
            dbr: DoorbellRecord::new(parts.dbr)?,
            cq: parts.cq,
            rqn: parts.rqn,
            mask: (entries - 1) as u16,
            pi: 0,
            ci: 0,
            headers: vec![EMPTY; entries],
            payloads: vec![EMPTY; entries],
            header_pool: parts.header_pool,
            header_bytes: parts.header_bytes,
            payload: parts.payload,
            payload_lkey: parts.payload_lkey,
            buffers: PayloadBuffers::new(
                NEXT_QUEUE_TAG.fetch_add(1, Ordering::Relaxed),
                count,
                parts.payload_bytes,
            ),
            stats: SplitRxStats::default(),
            queue_stats: QueueStats::default(),
            published: parts.published,
            quarantine: parts.quarantine,
            in_error: false,
        };
        q.refill();
        Ok(q)
    }

    /// Posts a header and a payload buffer into every empty slot it can, with one
    /// doorbell-record update; counts `nombuf` when either pool ran short.
    fn refill(&mut self) {
        let size = usize::from(self.mask) + 1;
        let empty = size - usize::from(self.pi.wrapping_sub(self.ci));
        if empty == 0 {
            return;
        }
        let can = empty.min(self.buffers.free());
        let Self {
            ring,
            headers,
            payloads,
            pi,
            header_pool,
            buffers,
            header_bytes,
            payload,
            payload_lkey,
            mask,
            ..
        } = self;
        let (hkey, plkey) = (header_pool.lkey(), *payload_lkey);
        let base = payload.iova();
        let room = buffers.buffer_bytes();
        let posted = header_pool.take_each(can, |h| {
            // `can` is at most the free payload buffers, so one is there.
            let Some(p) = buffers.take() else {
                header_pool.give_back(h);
                return;
            };
            let slot = usize::from(*pi & *mask);
            let mut seg = [0u8; SPLIT_WQE_BYTES];
            seg[..16].copy_from_slice(&wqe::encode_data(
                *header_bytes,
                hkey,
                header_pool.data_iova(h),
            ));
            seg[16..].copy_from_slice(&wqe::encode_data(room, plkey, base + buffers.offset(p)));
            ring.write_words::<4>(u32::from(*pi), &words_from_bytes(&seg));
            headers[slot] = h;
            payloads[slot] = p;
            *pi = pi.wrapping_add(1);
        });
        if posted < empty {
            self.stats.nombuf += 1;
            self.queue_stats.nombuf += 1;
        }
        if posted > 0 {
            // The receive WQEs must reach the device before the record that publishes them.
            dma_wmb();
            self.dbr.set(0, u32::from(self.pi));
        }
    }

    /// Receives up to `max` packets (at most [`MAX_BURST`]) onto the end of `out`; returns how
    /// many. Refills the ring afterwards with the header and payload buffers that are free.
    /// Nothing is received once the queue stopped ([`SplitRxQueue::in_error`]).
    pub fn rx_burst(&mut self, out: &mut Vec<SplitPacket>, max: usize) -> usize {
        if self.in_error {
            return 0;
        }
        let limit = max.min(MAX_BURST);
        let cqes_before = self.queue_stats.cqes;
        let mut got = 0;
        let most = u64::from(self.header_bytes) + u64::from(self.buffers.buffer_bytes());
        while got < limit {
            let Some(c) = self.cq.peek() else { break };
            self.cq.consume();
            self.queue_stats.cqes += 1;
            if c.wqe_counter() != self.ci || c.srqn() != self.cq.cqn() || self.pi == self.ci {
                self.refuse();
                break;
            }
            let slot = usize::from(self.ci & self.mask);
            let (h, p) = (self.headers[slot], self.payloads[slot]);
            if h == EMPTY || p == EMPTY {
                self.refuse();
                break;
            }
            if c.is_error() {
                // The device is done with this WQE: both buffers are free again.
                self.take_slot(slot);
                self.header_pool.give_back(h);
                self.buffers.unpost(p);
                self.stats.errors += 1;
                self.queue_stats.errors += 1;
                self.stats.last_error_syndrome = c.syndrome();
                self.queue_stats.last_error_syndrome = c.syndrome();
                self.in_error = true;
                break;
            }
            let bytes = u64::from(c.byte_cnt());
            if !c.is_receive_ok() || bytes == 0 || bytes > most {
                // Both buffers stay posted until recovery flushes them.
                self.refuse();
                break;
            }
            self.take_slot(slot);
            let in_header = bytes.min(u64::from(self.header_bytes)) as u32;
            let in_payload = (bytes - u64::from(in_header)) as u32;
            let payload = if in_payload == 0 {
                self.buffers.unpost(p);
                self.stats.header_only += 1;
                None
            } else {
                Some(self.buffers.lend(p, in_payload))
            };
            self.stats.header_bytes += u64::from(in_header);
            self.stats.payload_bytes += u64::from(in_payload);
            out.push(SplitPacket {
                header: self.header_pool.adopt(h, in_header, rx_flags(&c)),
                payload,
            });
            got += 1;
        }
        self.stats.packets += got as u64;
        self.queue_stats.packets += got as u64;
        if self.queue_stats.cqes != cqes_before {
            self.cq.update_dbr();
        }
        if !self.in_error {
            self.refill();
        }
        self.publish();
        got
    }

    /// Empties slot `slot` and moves the consumer index on.
    #[inline(always)]
    fn take_slot(&mut self, slot: usize) {
        self.headers[slot] = EMPTY;
        self.payloads[slot] = EMPTY;
        self.ci = self.ci.wrapping_add(1);
    }

    #[cold]
    fn refuse(&mut self) {
        self.stats.bad_cqes += 1;
        self.queue_stats.bad_cqes += 1;
        self.in_error = true;
    }

    /// Publishes the queue's counters for [`crate::Port::xstats`].
    fn publish(&mut self) {
        self.queue_stats.bytes = self.stats.header_bytes + self.stats.payload_bytes;
        self.published.publish(&self.queue_stats);
    }

    /// Gives payload tokens back (devmem's `SO_DEVMEM_DONTNEED`): their buffers are posted
    /// again at the next refill (now, unless the queue stopped). Returns how many.
    ///
    /// # Errors
    ///
    /// [`DriverError::BadToken`] for a token this queue did not lend, or one already given
    /// back (also the same token twice in `tokens`); then none of `tokens` is taken back.
    pub fn give_back(&mut self, tokens: &[PayloadToken]) -> Result<usize, DriverError> {
        let n = self.buffers.give_back(tokens)?;
        if !self.in_error {
            self.refill();
        }
        self.publish();
        Ok(n)
    }

    /// Reads `out.len()` payload bytes of `token` from `at` through the CPU mapping of the
    /// dmabuf (host-accessible mappings only: memfd, udmabuf, dma-heap). The token stays lent.
    ///
    /// # Errors
    ///
    /// [`DriverError::BufferTooSmall`] when the read passes the token's end;
    /// [`DriverError::DmaBuf`] when the memory has no CPU mapping or was revoked.
    pub fn read_payload(
        &self,
        token: &PayloadToken,
        at: usize,
        out: &mut [u8],
    ) -> Result<(), DriverError> {
        if at + out.len() > token.len() as usize {
            return Err(DriverError::BufferTooSmall {
                what: "a payload read",
                need: at + out.len(),
                capacity: token.len() as usize,
            });
        }
        self.payload
            .read(token.offset() as usize + at, out)
            .map_err(DriverError::from)
    }

    /// The queue's counters.
    pub fn stats(&self) -> SplitRxStats {
        let c = self.buffers.counts();
        SplitRxStats {
            tokens_outstanding: c.outstanding,
            tokens_highest: c.highest,
            tokens_given_back: c.given_back,
            ..self.stats
        }
    }

    /// The queue's RQ number (what [`crate::Port::steer`] takes).
    pub fn rqn(&self) -> u32 {
        self.rqn
    }

    /// The number of the CQ this queue completes on.
    pub fn cqn(&self) -> u32 {
        self.cq.cqn()
    }

    /// WQEs posted and not yet completed.
    pub fn posted(&self) -> usize {
        usize::from(self.pi.wrapping_sub(self.ci))
    }

    /// The header buffer size, in bytes (a power of two in [`SPLIT_HEADER_BYTES`]).
    pub fn header_bytes(&self) -> u32 {
        self.header_bytes
    }

    /// The payload buffer size, in bytes.
    pub fn payload_bytes(&self) -> u32 {
        self.buffers.buffer_bytes()
    }

    /// The dmabuf range payloads land in.
    pub fn payload_memory(&self) -> &Arc<DmaBufMapping> {
        &self.payload
    }

    /// The header pool.
    pub fn header_pool(&self) -> &Mempool {
        &self.header_pool
    }

    /// True once the device completed a receive in error, wrote a completion the driver
    /// refused, or the payload memory was revoked: nothing more is received.
    pub fn in_error(&self) -> bool {
        self.in_error
    }

    /// Stops receiving (the device is about to have, or has, the RQ in RST).
    pub(crate) fn stop(&mut self) {
        self.in_error = true;
    }

    /// Recovery, with the RQ back in RDY after [`SplitRxQueue::drain_and_flush`]: the ring
    /// starts again at index 0 (as the device does after RST) and is refilled.
    pub(crate) fn restart(&mut self) {
        self.pi = 0;
        self.ci = 0;
        self.dbr.set(0, 0);
        self.in_error = false;
        self.queue_stats.recoveries += 1;
        self.refill();
        self.publish();
    }

    /// Once the device can no longer write the ring's buffers: completions left on the CQ are
    /// taken without delivery, and every posted buffer is freed (header buffers back to their
    /// pool, payload buffers free); returns (completions, WQEs flushed).
    pub(crate) fn drain_and_flush(&mut self) -> (usize, usize) {
        let drained = self.cq.drain();
        let mut flushed = 0;
        for slot in 0..self.headers.len() {
            let h = std::mem::replace(&mut self.headers[slot], EMPTY);
            let p = std::mem::replace(&mut self.payloads[slot], EMPTY);
            if h != EMPTY {
                self.header_pool.give_back(h);
                flushed += 1;
            }
            if p != EMPTY {
                self.buffers.unpost(p);
            }
        }
        self.ci = self.pi;
        self.queue_stats.flushed += flushed as u64;
        (drained, flushed)
    }
}

impl<B: Backend> Drop for SplitRxQueue<B> {
    fn drop(&mut self) {
        // The device may still write the posted buffers, and read the ring, until the port
        // destroys the RQ; the payload memory stays mapped while the port holds its key.
        let mut q = self.quarantine.lock().unwrap_or_else(|e| e.into_inner());
        let pool = &self.header_pool;
        let posted = self
            .headers
            .iter_mut()
            .map(|slot| std::mem::replace(slot, EMPTY))
            .filter(|&h| h != EMPTY)
            .map(|h| pool.adopt_posted(h));
        q.keep(
            posted,
            [self.ring.take_region(), self.dbr.take_region()],
            self.cq.take_memory(),
        );
    }
}
