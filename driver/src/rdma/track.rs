//! What a queue pair (or shared receive queue) posted, shared with the completion queue that
//! retires it: per-slot work request ids, operations and lengths in atomics, and the producer
//! and consumer counters. The poster writes a slot before it publishes the producer counter
//! (release), the poller reads it after loading that counter (acquire), and the other way
//! round for the consumer counter, so neither side locks.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use super::wc::WcOpcode;

/// Bits of a send slot's `meta` word.
mod meta {
    /// WQEBBs the WQE takes (bits 7:0; 0 = no WQE starts here).
    pub const BBS: u32 = 0xff;
    /// The request asked for a completion.
    pub const SIGNALED: u32 = 1 << 8;
    /// The driver asked for a CQE of an unsignalled request, to reclaim the ring.
    pub const FORCED: u32 = 1 << 9;
    /// Shift of the [`super::WcOpcode`] code.
    pub const OP_SHIFT: u32 = 12;
}

/// A work request's operation as a small code, and back.
fn op_code(op: WcOpcode) -> u32 {
    match op {
        WcOpcode::Send => 0,
        WcOpcode::RdmaWrite => 1,
        WcOpcode::RdmaRead => 2,
        WcOpcode::CompSwap => 3,
        WcOpcode::FetchAdd => 4,
        WcOpcode::Recv => 5,
        WcOpcode::RecvRdmaWithImm => 6,
    }
}

fn op_from(code: u32) -> WcOpcode {
    match code {
        1 => WcOpcode::RdmaWrite,
        2 => WcOpcode::RdmaRead,
        3 => WcOpcode::CompSwap,
        4 => WcOpcode::FetchAdd,
        5 => WcOpcode::Recv,
        6 => WcOpcode::RecvRdmaWithImm,
        _ => WcOpcode::Send,
    }
}

/// The operation bits of a send slot's tracking word, worked out once for a prepared request.
#[inline]
pub(super) fn send_meta(op: WcOpcode) -> u32 {
    op_code(op) << meta::OP_SHIFT
}

/// A send slot's tracking word: the operation bits `op_meta` ([`send_meta`]), the WQE's
/// blocks, and whether it was signalled or its CQE forced.
#[inline(always)]
pub(super) fn send_meta_word(op_meta: u32, blocks: u32, signaled: bool, forced: bool) -> u32 {
    let signaled = if signaled { meta::SIGNALED } else { 0 };
    let forced = if forced { meta::FORCED } else { 0 };
    blocks & meta::BBS | signaled | forced | op_meta
}

/// A send WQE as posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SentWqe {
    pub wr_id: u64,
    pub op: WcOpcode,
    pub bbs: u16,
    pub signaled: bool,
    /// Unsignalled, but its WQE asks for a CQE so that the ring is reclaimed: the CQE retires
    /// it (and those before it) without a work completion.
    pub forced: bool,
    /// Bytes of the local list (what a READ may fill).
    pub len: u32,
}

/// What completion needs of one posted WQE, in one 16-byte record so that recording it is
/// one index into the ring.
#[derive(Default)]
struct Slot {
    wr_id: AtomicU64,
    /// Bytes of the local list (what a READ or a receive may fill).
    len: AtomicU32,
    /// Send: blocks, signalled and forced bits, operation ([`meta`]); receive: 1.
    meta: AtomicU32,
}

/// A ring of slots (send: one per WQEBB, the WQE's first; receive: one per WQE).
pub(super) struct SlotTrack {
    slots: Box<[Slot]>,
    mask: u32,
    /// Slots (WQEBBs or WQEs) posted, wrapping.
    pi: AtomicU32,
    /// Slots retired, wrapping.
    ci: AtomicU32,
}

impl SlotTrack {
    pub(super) fn new(entries: u32) -> Self {
        Self {
            slots: (0..entries.max(1)).map(|_| Slot::default()).collect(),
            mask: entries.max(1) - 1,
            pi: AtomicU32::new(0),
            ci: AtomicU32::new(0),
        }
    }

    /// Slots in the ring.
    #[inline]
    pub(super) fn entries(&self) -> u32 {
        self.mask + 1
    }

    /// Posted and not retired.
    #[inline]
    pub(super) fn outstanding(&self) -> u32 {
        self.pi
            .load(Ordering::Acquire)
            .wrapping_sub(self.ci.load(Ordering::Acquire))
    }

    /// The producer counter (poster only).
    #[inline]
    pub(super) fn pi(&self) -> u32 {
        self.pi.load(Ordering::Relaxed)
    }

    /// The consumer counter as the poller last published it.
    #[inline]
    pub(super) fn ci(&self) -> u32 {
        self.ci.load(Ordering::Acquire)
    }

    /// Records a send WQE at slot `index` (poster only; published by [`SlotTrack::publish`]).
    #[inline]
    pub(super) fn record_send(&self, index: u32, w: SentWqe) {
        let word = send_meta_word(send_meta(w.op), u32::from(w.bbs), w.signaled, w.forced);
        self.record_send_meta(index, w.wr_id, w.len, word);
    }

    /// Records a send WQE at slot `index` from its tracking word ([`send_meta_word`]), as
    /// [`SlotTrack::record_send`] does.
    #[inline(always)]
    pub(super) fn record_send_meta(&self, index: u32, wr_id: u64, len: u32, word: u32) {
        let slot = &self.slots[(index & self.mask) as usize];
        slot.wr_id.store(wr_id, Ordering::Relaxed);
        slot.len.store(len, Ordering::Relaxed);
        slot.meta.store(word, Ordering::Relaxed);
    }

    /// Records a receive at slot `index` (one slot per WQE).
    #[inline]
    pub(super) fn record_recv(&self, index: u32, wr_id: u64, len: u32) {
        let slot = &self.slots[(index & self.mask) as usize];
        slot.wr_id.store(wr_id, Ordering::Relaxed);
        slot.len.store(len, Ordering::Relaxed);
        slot.meta.store(1, Ordering::Relaxed);
    }

    /// Publishes the producer counter: every slot recorded before is visible to the poller.
    #[inline]
    pub(super) fn publish(&self, pi: u32) {
        self.pi.store(pi, Ordering::Release);
    }

    /// The send WQE at `index` as recorded.
    #[inline]
    pub(super) fn sent(&self, index: u32) -> SentWqe {
        let slot = &self.slots[(index & self.mask) as usize];
        let word = slot.meta.load(Ordering::Relaxed);
        SentWqe {
            wr_id: slot.wr_id.load(Ordering::Relaxed),
            op: op_from(word >> meta::OP_SHIFT & 0xf),
            bbs: (word & meta::BBS) as u16,
            signaled: word & meta::SIGNALED != 0,
            forced: word & meta::FORCED != 0,
            len: slot.len.load(Ordering::Relaxed),
        }
    }

    /// The receive at `index`: work request id and posted bytes.
    #[inline]
    pub(super) fn received(&self, index: u32) -> (u64, u32) {
        let slot = &self.slots[(index & self.mask) as usize];
        (
            slot.wr_id.load(Ordering::Relaxed),
            slot.len.load(Ordering::Relaxed),
        )
    }

    /// Retires up to consumer counter `ci` (poller only).
    #[inline]
    pub(super) fn retire(&self, ci: u32) {
        self.ci.store(ci, Ordering::Release);
    }

    /// Both counters back to 0 (the queue pair was reset, with nothing outstanding).
    pub(super) fn clear(&self) {
        self.pi.store(0, Ordering::Release);
        self.ci.store(0, Ordering::Release);
    }
}

/// What a completion queue knows of one of its queue pairs.
pub(super) struct QpTrack {
    pub qpn: u32,
    pub sq: SlotTrack,
    /// The QP's own receive ring (empty with an SRQ).
    pub rq: SlotTrack,
    /// The SRQ the QP receives from.
    pub srq: Option<std::sync::Arc<SrqTrack>>,
    /// Set by the poller at an error completion: the device moved the QP to error.
    pub failed: AtomicBool,
    /// A UD or GSI QP: its receive CQEs carry the source QP, the network header type and
    /// the P_Key, and its receive buffers start with the 40-byte GRH area.
    pub datagram: bool,
}

/// A shared receive queue's WQEs: which are posted, their work request ids, and the indexes
/// the pollers hand back for the poster to link into the free list again.
pub(super) struct SrqTrack {
    pub srqn: u32,
    wr_id: Box<[AtomicU64]>,
    len: Box<[AtomicU32]>,
    posted: Box<[AtomicBool]>,
    /// Returned indexes, plus one (0: empty slot); a ring as large as the SRQ, so it never
    /// overflows: an index is in it at most once.
    returned: Box<[AtomicU32]>,
    ret_tail: AtomicU32,
    ret_head: AtomicU32,
}

impl SrqTrack {
    pub(super) fn new(srqn: u32, entries: u32) -> Self {
        Self {
            srqn,
            wr_id: (0..entries).map(|_| AtomicU64::new(0)).collect(),
            len: (0..entries).map(|_| AtomicU32::new(0)).collect(),
            posted: (0..entries).map(|_| AtomicBool::new(false)).collect(),
            returned: (0..entries).map(|_| AtomicU32::new(0)).collect(),
            ret_tail: AtomicU32::new(0),
            ret_head: AtomicU32::new(0),
        }
    }

    /// WQEs in the ring.
    #[inline]
    pub(super) fn entries(&self) -> u32 {
        self.posted.len() as u32
    }

    /// Records WQE `index` as posted with `wr_id` over `len` bytes (poster only).
    #[inline]
    pub(super) fn record(&self, index: u16, wr_id: u64, len: u32) {
        let i = usize::from(index);
        self.wr_id[i].store(wr_id, Ordering::Relaxed);
        self.len[i].store(len, Ordering::Relaxed);
        self.posted[i].store(true, Ordering::Release);
    }

    /// WQE `index` as posted (work request id and bytes), without taking it; `None` when it
    /// is out of range or not posted.
    #[inline]
    pub(super) fn posted(&self, index: u16) -> Option<(u64, u32)> {
        let i = usize::from(index);
        if !self.posted.get(i)?.load(Ordering::Acquire) {
            return None;
        }
        Some((
            self.wr_id[i].load(Ordering::Relaxed),
            self.len[i].load(Ordering::Relaxed),
        ))
    }

    /// Takes WQE `index` that a completion names: its work request id and posted bytes, or
    /// `None` when it is out of range or not posted (a completion for it came already).
    #[inline]
    pub(super) fn take(&self, index: u16) -> Option<(u64, u32)> {
        let i = usize::from(index);
        let posted = self.posted.get(i)?;
        if !posted.swap(false, Ordering::AcqRel) {
            return None;
        }
        let done = (
            self.wr_id[i].load(Ordering::Relaxed),
            self.len[i].load(Ordering::Relaxed),
        );
        let at = self.ret_tail.fetch_add(1, Ordering::AcqRel) % self.entries();
        self.returned[at as usize].store(u32::from(index) + 1, Ordering::Release);
        Some(done)
    }

    /// The next index a poller handed back, if any (poster only).
    #[inline]
    pub(super) fn next_returned(&self) -> Option<u16> {
        let head = self.ret_head.load(Ordering::Relaxed);
        let at = (head % self.entries()) as usize;
        let value = self.returned[at].load(Ordering::Acquire);
        if value == 0 {
            return None;
        }
        self.returned[at].store(0, Ordering::Relaxed);
        self.ret_head.store(head.wrapping_add(1), Ordering::Relaxed);
        Some((value - 1) as u16)
    }

    /// Work request ids of every WQE still posted, taken (the SRQ is being destroyed).
    pub(super) fn take_all_posted(&self) -> Vec<u64> {
        (0..self.posted.len())
            .filter(|&i| self.posted[i].swap(false, Ordering::AcqRel))
            .map(|i| self.wr_id[i].load(Ordering::Relaxed))
            .collect()
    }
}
