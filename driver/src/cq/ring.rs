//! Completion queues, driver side: the ring software reads by owner bit, with compressed
//! sessions unpacked into one CQE per completion.

use super::compressed::{ArrayRun, MiniRun, Session};
use super::cqe::Cqe;
use crate::backend::barrier::{dma_rmb, dma_wmb};
use crate::error::DriverError;
use crate::ring::{DoorbellRecord, SlotRing};
use cxdirect_dma::DmaRegion;
use cxdirect_hw::cqe::{self, op_own, CqeOpcode, CQE_SIZE, MINI_CQES_PER_SLOT};
use cxdirect_hw::doorbell::{cq_arm_cmd, CqArm};
use std::time::{Duration, Instant};

/// Empty polls after which a CQ looks ahead for an entry the device skipped.
const GAP_CHECK_POLLS: u32 = 256;

/// How many slots past the consumer index a compressed CQ looks for a later entry (see
/// [`CqRing::skipped_entry`]): room for a session of up to 127 completions (the model writes
/// at most 64, its `cqe_compression_max_num`) and the entry after it.
const COMPRESSED_LOOK_AHEAD: u32 = 128;

/// How long a compressed CQ sees the next slot written and the one at the consumer index not
/// before it calls that entry skipped (see [`CqRing::skipped_entry`]). Generous, because an
/// emulated device's thread may be descheduled between the two writes on a loaded machine.
const GAP_PATIENCE: Duration = Duration::from_millis(250);

#[cfg(test)]
mod tests;

/// [`CqRing::consume_run`]'s `n` slots from consumer index `ci` when they cross the ring's
/// end: two stretches, the second with the next pass's owner bit.
#[cold]
fn give_back_wrapping(region: &SlotRing<CQE_SIZE>, ci: u32, n: u32, log_size: u8) {
    let mask = (1u32 << log_size) - 1;
    let mut done = 0;
    while done < n {
        let index = ci.wrapping_add(done);
        let slot = index & mask;
        let count = (n - done).min(mask + 1 - slot);
        let invalid = op_own::with(CqeOpcode::Invalid as u8, ((index >> log_size) & 1) as u8);
        region.write_byte_each(slot, op_own::BYTE, count, invalid);
        done += count;
    }
}

/// A completion queue ring, driver side.
pub(crate) struct CqRing {
    pub(super) region: SlotRing<CQE_SIZE>,
    pub(super) dbr: DoorbellRecord,
    pub(super) log_size: u8,
    pub(super) ci: u32,
    pub(super) cqn: u32,
    /// Polls in a row that found nothing, for the skipped-entry check.
    pub(super) idle_polls: u32,
    /// Created with CQE compression (hash-format mini-CQEs): only then is a compressed
    /// session accepted.
    pub(super) compressed: bool,
    /// The compressed session being read, if any.
    session: Option<Session>,
    /// A compressed title was refused: where the device writes next is unknown, so only a new
    /// CQ puts the queue back in step (recovery re-creates it).
    pub(super) lost_place: bool,
    /// Completions taken from mini-CQEs so far.
    pub(super) mini_cqes: u64,
    /// When a compressed CQ first saw the gap [`CqRing::skipped_entry`] looks for.
    gap_since: Option<Instant>,
}

impl CqRing {
    /// A ring of `2^log_size` CQEs starting at consumer index 0; `compressed` when it was
    /// created with CQE compression in the hash mini-CQE format.
    ///
    /// # Errors
    ///
    /// [`DriverError::Internal`] when `region` cannot hold the CQEs.
    pub(crate) fn new(
        region: DmaRegion,
        dbr: DmaRegion,
        log_size: u8,
        cqn: u32,
        compressed: bool,
    ) -> Result<Self, DriverError> {
        Ok(Self {
            region: SlotRing::new(region, log_size)?,
            dbr: DoorbellRecord::new(dbr)?,
            log_size,
            ci: 0,
            cqn,
            idle_polls: 0,
            compressed,
            session: None,
            lost_place: false,
            mini_cqes: 0,
            gap_since: None,
        })
    }

    #[inline]
    fn slot_offset(&self, index: u32) -> usize {
        self.region.offset(index)
    }

    /// The owner bit a CQE written for consumer index `index` carries.
    #[inline]
    fn owner_for(&self, index: u32) -> u8 {
        ((index >> self.log_size) & 1) as u8
    }

    /// The `op_own` byte of the entry at `index`, read with one aligned word load.
    #[inline(always)]
    fn op_own_at(&self, index: u32) -> Option<u8> {
        const WORD: usize = op_own::BYTE / 8 * 8;
        const SHIFT: usize = 8 * (7 - op_own::BYTE % 8);
        let word = self
            .region
            .region()
            .read_u64_be(self.slot_offset(index) + WORD)
            .ok()?;
        Some((word >> SHIFT) as u8)
    }

    /// The next CQE software owns (copied), without consuming it.
    ///
    /// An entry whose owner bit says the device wrote it this pass but whose opcode is INVALID
    /// is returned as it is (opcode INVALID): the device never writes that, so the queue
    /// refuses it and stops for recovery instead of waiting on that slot for good. Every
    /// [`GAP_CHECK_POLLS`] empty polls the ring also looks ahead: a written entry there behind
    /// a slot that is still not written means the device skipped (or damaged the owner bit of)
    /// the one at the consumer index, which is then returned with its opcode set to INVALID
    /// for the same refusal (see [`CqRing::skipped_entry`]).
    ///
    /// A CQE in the compressed format opens a session: its completions are then returned one
    /// by one (see [`Session`]) until the session is consumed.
    #[inline(always)]
    pub(crate) fn peek(&mut self) -> Option<Cqe> {
        if let Some(session) = &self.session {
            return Some(session.current());
        }
        // One word load for the owner byte; the rest only once it is ours.
        let op_own = self.op_own_at(self.ci)?;
        if cqe::sw_owns(op_own, self.ci, self.log_size)
            || (op_own::owner(op_own) == self.owner_for(self.ci)
                && op_own::opcode(op_own) == CqeOpcode::Invalid as u8)
        {
            self.idle_polls = 0;
            if self.gap_since.is_some() {
                self.gap_since = None;
            }
            let cqe = self.copy(self.ci)?;
            if op_own::format(op_own) == cqe::cqe_format::COMPRESSED {
                return Some(self.open_session(cqe));
            }
            return Some(cqe);
        }
        self.idle_polls += 1;
        if self.idle_polls >= GAP_CHECK_POLLS {
            self.idle_polls = 0;
            return self.skipped_entry(true);
        }
        None
    }

    /// As [`CqRing::peek`], looking ahead for a skipped entry at once (recovery's drain, once
    /// the device has stopped writing).
    pub(crate) fn peek_or_skipped(&mut self) -> Option<Cqe> {
        self.peek().or_else(|| self.skipped_entry(false))
    }

    /// The entry at the consumer index, marked INVALID, when the device has written a later
    /// one but not this one: the next slot on a plain CQ; on a compressed CQ any of the next
    /// [`COMPRESSED_LOOK_AHEAD`] slots, because behind a title whose owner bit is damaged the
    /// device moves on past the whole session (and its mini-CQE array slots carry no owner
    /// bit of their own).
    ///
    /// On a compressed CQ that state is also legal for a moment: the device writes a session's
    /// mini-CQE arrays (the first one in the next slot) before its title, which publishes
    /// them. So when `patient`, the verdict there waits until the gap has lasted
    /// [`GAP_PATIENCE`], far longer than any device takes between those writes.
    #[cold]
    fn skipped_entry(&mut self, patient: bool) -> Option<Cqe> {
        let ahead = if self.compressed {
            COMPRESSED_LOOK_AHEAD.min((1 << self.log_size) - 1)
        } else {
            1
        };
        let written_ahead = (1..=ahead).any(|k| {
            let index = self.ci.wrapping_add(k);
            self.op_own_at(index)
                .is_some_and(|op_own| cqe::sw_owns(op_own, index, self.log_size))
        });
        if !written_ahead {
            self.gap_since = None;
            return None;
        }
        if patient && self.compressed {
            let now = Instant::now();
            let since = *self.gap_since.get_or_insert(now);
            if now.duration_since(since) < GAP_PATIENCE {
                return None;
            }
        }
        self.gap_since = None;
        // The device writes in order: this entry is read again only after the later one was seen.
        dma_rmb();
        if cqe::sw_owns(self.op_own_at(self.ci)?, self.ci, self.log_size) {
            return self.copy(self.ci);
        }
        // On a compressed CQ the skipped entry may have been a session's title: how many slots
        // the device moved past is unknown, so only a new CQ puts the queue back in step.
        if self.compressed {
            self.lost_place = true;
        }
        let invalid = op_own::with(CqeOpcode::Invalid as u8, self.owner_for(self.ci));
        let mut bytes = self.copy(self.ci)?.to_bytes();
        bytes[op_own::BYTE] = invalid;
        // The damaged owner bit is the next pass's: marked in the ring too, the slot cannot
        // pass for a later entry when the ring looks ahead from the end of this pass.
        self.region.write_bytes(self.ci, op_own::BYTE, &[invalid]);
        Some(Cqe::from_bytes(bytes))
    }

    #[inline(always)]
    fn copy(&self, index: u32) -> Option<Cqe> {
        // The entry's body is read only after its owner byte said the device wrote it.
        dma_rmb();
        let words = self
            .region
            .region()
            .read_words(self.slot_offset(index))
            .ok()?;
        Some(Cqe::from_words(words))
    }

    /// Starts reading the compressed session whose title is `title` (at the consumer index),
    /// after checking what the device wrote: compression must be on for this CQ, the title
    /// must be a receive completion, and the session must hold 2 to ring-size completions.
    /// Anything else is returned with its opcode set to INVALID, for the queue to refuse.
    #[inline(never)]
    fn open_session(&mut self, title: Cqe) -> Cqe {
        let count = title.byte_cnt();
        let plausible = self.compressed
            && title.is_receive_ok()
            && (2..=1u32 << self.log_size).contains(&count);
        let first_array = self.copy(self.ci.wrapping_add(cqe::mini_array_slot(0)));
        let (true, Some(minis)) = (plausible, first_array) else {
            self.lost_place = true;
            let mut bytes = title.to_bytes();
            bytes[op_own::BYTE] = op_own::with(CqeOpcode::Invalid as u8, self.owner_for(self.ci));
            return Cqe::from_bytes(bytes);
        };
        let session = Session::new(title, minis, self.ci, count);
        self.session = Some(session);
        session.current()
    }

    #[inline]
    pub(crate) fn consume(&mut self) {
        if self.session.is_some() {
            self.consume_run(1);
        } else {
            self.ci = self.ci.wrapping_add(1);
        }
    }

    /// The next completions of the open compressed session, at most `max` (at least 1) and
    /// never past the end of the mini-CQE array they are in; `None` when no session is open.
    /// They are consumed with [`CqRing::consume_run`].
    #[inline(always)]
    pub(crate) fn mini_run(&self, max: usize) -> Option<MiniRun> {
        let session = self.session.as_ref()?;
        let from = session.taken % MINI_CQES_PER_SLOT;
        let left_in_array = MINI_CQES_PER_SLOT - from;
        let len = left_in_array.min(session.count - session.taken) as usize;
        Some(MiniRun {
            first: session.current(),
            minis: session.minis,
            from: from as usize,
            len: len.min(max.max(1)),
        })
    }

    /// As [`CqRing::mini_run`], read in place and without a CQE built for the run's first
    /// completion: what the session's completions share was read from its title once.
    #[inline(always)]
    pub(crate) fn array_run(&self, max: usize) -> Option<ArrayRun<'_>> {
        let session = self.session.as_ref()?;
        let from = session.taken % MINI_CQES_PER_SLOT;
        let left_in_array = MINI_CQES_PER_SLOT - from;
        let len = left_in_array.min(session.count - session.taken) as usize;
        Some(ArrayRun {
            session,
            from: from as usize,
            len: len.min(max.max(1)),
        })
    }

    /// Consumes `n` completions of the open session (at most the length of the last
    /// [`CqRing::mini_run`]; 1 when the session's completion came from [`CqRing::peek`]).
    /// Their slots are given back for the device's next pass: the device writes only the title
    /// and the mini-CQE arrays, so every slot a session covered gets an INVALID opcode with
    /// this pass's owner bit, which the next pass (expecting the other owner) reads as not yet
    /// written. This happens before the doorbell record tells the device the slots are free.
    #[inline(always)]
    pub(crate) fn consume_run(&mut self, n: u32) {
        let Some(session) = &mut self.session else {
            return;
        };
        let mask = (1u32 << self.log_size) - 1;
        let slot = self.ci & mask;
        if slot + n <= mask + 1 {
            // One stretch (the common case: a run never crosses a mini-CQE array, and arrays
            // rarely the ring's end): one bounds check for its slots.
            let owner = ((self.ci >> self.log_size) & 1) as u8;
            let invalid = op_own::with(CqeOpcode::Invalid as u8, owner);
            self.region.write_byte_each(slot, op_own::BYTE, n, invalid);
        } else {
            give_back_wrapping(&self.region, self.ci, n, self.log_size);
        }
        self.ci = self.ci.wrapping_add(n);
        self.mini_cqes += u64::from(n);
        session.taken += n;
        if session.taken >= session.count {
            self.session = None;
            return;
        }
        if session.taken % MINI_CQES_PER_SLOT == 0 {
            // The next array sits in the slot of the completion it starts with, not consumed
            // yet; the device wrote it before the title, so it is complete.
            let slot = session
                .start
                .wrapping_add(cqe::mini_array_slot(session.taken));
            session.minis = self.region.read_words(slot);
        }
    }

    /// Tells the device how far software has read (doorbell record word 0).
    #[inline]
    pub(crate) fn update_dbr(&self) {
        if self.compressed {
            // The slots a session covered were given back with stores to the ring: they
            // must reach the device before the record that lets it write there again.
            dma_wmb();
        }
        self.dbr.set(0, self.ci & 0x00ff_ffff);
    }

    /// Takes every CQE software owns without reading it (the queue is being reset and its
    /// buffers flushed); returns how many.
    pub(crate) fn drain(&mut self) -> usize {
        let mut drained = 0;
        // Bounded by the ring: a device rewriting entries as fast as they are taken cannot
        // hold recovery here.
        while drained < 1usize << self.log_size && self.peek_or_skipped().is_some() {
            self.consume();
            drained += 1;
        }
        if drained > 0 {
            self.update_dbr();
        }
        drained
    }

    /// The ring's memory and doorbell record, leaving both empty: for a quarantine to keep
    /// while the device may still write them.
    pub(crate) fn take_memory(&mut self) -> [DmaRegion; 2] {
        [self.region.take_region(), self.dbr.take_region()]
    }

    /// The CQ's number.
    #[inline(always)]
    pub(crate) fn cqn(&self) -> u32 {
        self.cqn
    }

    /// The ring holds `2^log_size` CQEs.
    pub(crate) fn log_size(&self) -> u8 {
        self.log_size
    }

    /// Created with CQE compression.
    pub(crate) fn is_compressed(&self) -> bool {
        self.compressed
    }

    /// True once a compressed title was refused, or a consumer refused a completion of a
    /// compressed CQ ([`CqRing::lose_place`]): only a new CQ puts the queue back in step.
    pub(crate) fn lost_place(&self) -> bool {
        self.lost_place
    }

    /// A consumer refused a completion: on a compressed CQ it may belong to a session whose
    /// title lied about its size, so where the device writes next is unknown.
    #[cold]
    pub(crate) fn lose_place(&mut self) {
        if self.compressed {
            self.lost_place = true;
        }
    }

    /// Completions taken from mini-CQEs so far.
    #[inline(always)]
    pub(crate) fn mini_cqes(&self) -> u64 {
        self.mini_cqes
    }

    /// Writes the 64 bytes `cqe` into the slot of consumer index `index`, as the device does.
    #[cfg(test)]
    pub(crate) fn device_writes(&self, index: u32, cqe: &[u8; CQE_SIZE]) {
        self.region.write_bytes(index, 0, cqe);
    }

    /// Writes the arm word asking for one event at the next completion after the consumer
    /// index (doorbell record word 1, event sequence number `sn`) and returns it, for the UAR
    /// doorbell that must follow.
    pub(crate) fn write_arm(&self, sn: u8) -> CqArm {
        let word = CqArm::new()
            .with_ci(self.ci & 0x00ff_ffff)
            .with_cmd(cq_arm_cmd::NEXT)
            .with_sn(sn & 3);
        self.dbr.set(1, word.into_bits());
        word
    }
}
