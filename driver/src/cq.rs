//! Completion queues, driver side: the ring software reads by owner bit, compressed sessions
//! (a title CQE and mini-CQE arrays) unpacked into one CQE per completion, and [`Cqe`], a copy
//! of one 64-byte CQE whose fields are read from the copy only. The device writes CQEs on its own
//! schedule, so nothing here trusts what it reads: the queues check every field that selects
//! host state (WQE counter, queue number, byte count) against what they posted.

use crate::queue::{bytes_from_words, words_from_bytes};
use cxdirect_dma::DmaRegion;
use cxdirect_hw::cqe::{self, CqeOpcode, CQE_SIZE, MINI_CQES_PER_SLOT};
use std::sync::atomic::{fence, Ordering};
use std::time::{Duration, Instant};

/// A copy of one 64-byte CQE as the device wrote it, kept as the eight words it was read with
/// (memory order). Any bytes are a valid `Cqe`: accessors only decode, and callers check the
/// decoded values before using them.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Cqe {
    words: [u64; CQE_SIZE / 8],
}

impl std::fmt::Debug for Cqe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cqe")
            .field("opcode", &self.opcode())
            .field("wqe_counter", &self.wqe_counter())
            .field("qpn", &self.qpn())
            .field("byte_cnt", &self.byte_cnt())
            .finish()
    }
}

impl Cqe {
    /// A CQE from its 64 bytes as they sit in the ring.
    pub fn from_bytes(bytes: [u8; CQE_SIZE]) -> Self {
        Self {
            words: words_from_bytes(&bytes),
        }
    }

    /// A CQE from the eight words it was read with (memory order).
    #[inline]
    pub(crate) const fn from_words(words: [u64; CQE_SIZE / 8]) -> Self {
        Self { words }
    }

    /// The raw bytes.
    pub fn to_bytes(&self) -> [u8; CQE_SIZE] {
        let mut bytes = [0u8; CQE_SIZE];
        bytes_from_words(self.words, &mut bytes);
        bytes
    }

    /// The byte at offset `at` (0..64).
    #[inline]
    fn byte(&self, at: usize) -> u8 {
        self.words[at / 8].to_ne_bytes()[at % 8]
    }

    /// The big-endian 32-bit field at offset `at` (a multiple of 4).
    #[inline]
    fn be32(&self, at: usize) -> u32 {
        let word = self.words[at / 8].to_ne_bytes();
        let i = at % 8;
        u32::from_be_bytes([word[i], word[i + 1], word[i + 2], word[i + 3]])
    }

    /// Opcode, bits 7:4 of the last byte (0..=15; see [`CqeOpcode`]).
    #[inline]
    pub fn opcode(&self) -> u8 {
        self.byte(0x3f) >> 4
    }

    /// True for a send completion without error ([`CqeOpcode::Req`]).
    #[inline]
    pub fn is_send_ok(&self) -> bool {
        self.opcode() == CqeOpcode::Req as u8
    }

    /// True for a receive completion of a frame ([`CqeOpcode::RespSend`]).
    #[inline]
    pub fn is_receive_ok(&self) -> bool {
        self.opcode() == CqeOpcode::RespSend as u8
    }

    /// True for an error completion ([`CqeOpcode::ReqErr`] or [`CqeOpcode::RespErr`]).
    #[inline]
    pub fn is_error(&self) -> bool {
        let op = self.opcode();
        op == CqeOpcode::ReqErr as u8 || op == CqeOpcode::RespErr as u8
    }

    /// Index (16 bits, wrapping) of the WQE this CQE completes.
    #[inline]
    pub fn wqe_counter(&self) -> u16 {
        (self.be32(0x3c) >> 16) as u16
    }

    /// Striding receive queues: the WQE this completion's strides are in (16 bits, wrapping).
    #[inline]
    pub fn wqe_id(&self) -> u16 {
        self.be32(0) as u16
    }

    /// Send or receive queue number (24 bits).
    #[inline]
    pub fn qpn(&self) -> u32 {
        self.be32(0x38) & 0x00ff_ffff
    }

    /// Shared receive ring (RMP) number the buffer came from (24 bits; receive only).
    #[inline]
    pub fn srqn(&self) -> u32 {
        self.be32(0x20) & 0x00ff_ffff
    }

    /// Bytes received (receive only; the device's word, unchecked).
    #[inline]
    pub fn byte_cnt(&self) -> u32 {
        self.be32(0x2c)
    }

    /// Syndrome of an error CQE (`LOCAL_PROT_ERR` 0x04, `WR_FLUSH_ERR` 0x05, ...).
    #[inline]
    pub fn syndrome(&self) -> u8 {
        self.byte(ERR_CQE_SYNDROME)
    }

    /// L3 header type (0 none, 1 IPv6, 2 IPv4).
    pub fn l3_type(&self) -> u8 {
        (self.byte(0x1d) >> 2) & 0x3
    }

    /// L4 header type (0 none, 1 TCP, 2 UDP, 3-4 TCP with flags).
    pub fn l4_type(&self) -> u8 {
        (self.byte(0x1d) >> 4) & 0x7
    }

    /// The device verified the IP header checksum.
    pub fn l3_ok(&self) -> bool {
        self.byte(0x1c) & 0x02 != 0
    }

    /// The device verified the TCP/UDP checksum.
    pub fn l4_ok(&self) -> bool {
        self.byte(0x1c) & 0x04 != 0
    }

    /// RSS hash, when the device computed one (non-zero hash type).
    pub fn rss_hash(&self) -> Option<u32> {
        (self.byte(0x10) != 0).then(|| self.be32(0x0c))
    }
}

/// A compressed session being read (CQE compression): the title CQE, the mini-CQE array in
/// use, and how far the queue has got. Each completion is handed out as the title with that
/// completion's fields put in, so the queues check it exactly as a plain CQE.
#[derive(Clone, Copy)]
struct Session {
    title: [u64; CQE_SIZE / 8],
    minis: [u64; MINI_CQES_PER_SLOT as usize],
    /// Consumer index of the title.
    start: u32,
    /// Completions in the session (2..=ring size, checked when it opened).
    count: u32,
    /// Completions handed out so far.
    taken: u32,
    /// The title's WQE counter: completion `taken` is for WQE `first_counter + taken`.
    first_counter: u16,
}

impl Session {
    /// A session of `count` completions whose title (at consumer index `start`) is `title`
    /// and first mini-CQE array `minis`.
    fn new(title: Cqe, minis: Cqe, start: u32, count: u32) -> Self {
        let mut words = title.words;
        // Every completion is handed out in the plain format.
        let tail = words[7].to_ne_bytes();
        words[7] = put_high_half(
            words[7],
            [tail[4], tail[5], tail[6], tail[7] & !FORMAT_MASK],
        );
        Self {
            title: words,
            minis: minis.words,
            start,
            count,
            taken: 0,
            first_counter: title.wqe_counter(),
        }
    }

    /// The completion `taken` as a plain CQE.
    #[inline(always)]
    fn current(&self) -> Cqe {
        let mini = self.minis[(self.taken % MINI_CQES_PER_SLOT) as usize].to_ne_bytes();
        let mut words = self.title;
        // Hash format: the mini-CQE's first four bytes are the RSS hash (CQE bytes 0x0c..0x10),
        // its last four the byte count (0x2c..0x30).
        words[1] = put_high_half(words[1], [mini[0], mini[1], mini[2], mini[3]]);
        words[5] = put_high_half(words[5], [mini[4], mini[5], mini[6], mini[7]]);
        let counter = self
            .first_counter
            .wrapping_add(self.taken as u16)
            .to_be_bytes();
        let tail = words[7].to_ne_bytes();
        words[7] = put_high_half(words[7], [counter[0], counter[1], tail[6], tail[7]]);
        Cqe::from_words(words)
    }
}

/// Completions of a compressed session that share one mini-CQE array
/// ([`CqRing::mini_run`]). They differ from [`MiniRun::first`] only in byte count, RSS hash
/// and WQE counter (consecutive), so a queue checks the first one in full and the rest by
/// their byte counts.
#[derive(Clone, Copy)]
pub(crate) struct MiniRun {
    /// The run's first completion as a plain CQE.
    pub first: Cqe,
    minis: [u64; MINI_CQES_PER_SLOT as usize],
    /// Where the run starts in `minis` (0..8).
    from: usize,
    /// Completions in the run (1..=8).
    pub len: usize,
}

impl MiniRun {
    /// Byte count (the device's word, unchecked) and RSS hash of completion `i` of the run
    /// (`i < len`; the hash means something only when the title's hash type is non-zero).
    #[inline(always)]
    pub fn byte_cnt_and_hash(&self, i: usize) -> (u32, u32) {
        let mini = self.minis[(self.from + i) % MINI_CQES_PER_SLOT as usize].to_ne_bytes();
        (
            u32::from_be_bytes([mini[4], mini[5], mini[6], mini[7]]),
            u32::from_be_bytes([mini[0], mini[1], mini[2], mini[3]]),
        )
    }
}

/// `word` (memory order) with its bytes 4..8 replaced.
#[inline(always)]
fn put_high_half(word: u64, half: [u8; 4]) -> u64 {
    let mut bytes = word.to_ne_bytes();
    bytes[4..].copy_from_slice(&half);
    u64::from_ne_bytes(bytes)
}

/// Bits 3:2 of `op_own`: the CQE format.
const FORMAT_MASK: u8 = 0x0c;

/// Byte of an error CQE that holds its syndrome.
pub(crate) const ERR_CQE_SYNDROME: usize = 0x37;

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

/// A completion queue ring, driver side.
pub(crate) struct CqRing {
    pub region: DmaRegion,
    pub dbr: DmaRegion,
    pub log_size: u8,
    pub ci: u32,
    pub cqn: u32,
    /// Polls in a row that found nothing, for the skipped-entry check.
    pub idle_polls: u32,
    /// Created with CQE compression (hash-format mini-CQEs): only then is a compressed
    /// session accepted.
    pub compressed: bool,
    /// The compressed session being read, if any.
    session: Option<Session>,
    /// A compressed title was refused: where the device writes next is unknown, so only a new
    /// CQ puts the queue back in step (recovery re-creates it).
    pub lost_place: bool,
    /// Completions taken from mini-CQEs so far.
    pub mini_cqes: u64,
    /// When a compressed CQ first saw the gap [`CqRing::skipped_entry`] looks for.
    gap_since: Option<Instant>,
}

impl CqRing {
    /// A ring of `2^log_size` CQEs starting at consumer index 0; `compressed` when it was
    /// created with CQE compression in the hash mini-CQE format.
    pub(crate) fn new(
        region: DmaRegion,
        dbr: DmaRegion,
        log_size: u8,
        cqn: u32,
        compressed: bool,
    ) -> Self {
        Self {
            region,
            dbr,
            log_size,
            ci: 0,
            cqn,
            idle_polls: 0,
            compressed,
            session: None,
            lost_place: false,
            mini_cqes: 0,
            gap_since: None,
        }
    }

    #[inline]
    fn slot_offset(&self, index: u32) -> usize {
        (index & ((1 << self.log_size) - 1)) as usize * CQE_SIZE
    }

    /// The owner bit a CQE written for consumer index `index` carries.
    #[inline]
    fn owner_for(&self, index: u32) -> u8 {
        ((index >> self.log_size) & 1) as u8
    }

    #[inline(always)]
    fn op_own_at(&self, index: u32) -> Option<u8> {
        let last = self
            .region
            .read_u64_be(self.slot_offset(index) + CQE_SIZE - 8)
            .ok()?;
        Some(last as u8)
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
            || (op_own & 1 == self.owner_for(self.ci) && op_own >> 4 == CqeOpcode::Invalid as u8)
        {
            self.idle_polls = 0;
            if self.gap_since.is_some() {
                self.gap_since = None;
            }
            let cqe = self.copy(self.ci)?;
            if op_own & FORMAT_MASK == cqe::cqe_format::COMPRESSED << 2 {
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
        // The device writes in order: once the next entry is visible, this one is final.
        fence(Ordering::Acquire);
        if cqe::sw_owns(self.op_own_at(self.ci)?, self.ci, self.log_size) {
            return self.copy(self.ci);
        }
        // On a compressed CQ the skipped entry may have been a session's title: how many slots
        // the device moved past is unknown, so only a new CQ puts the queue back in step.
        if self.compressed {
            self.lost_place = true;
        }
        let invalid = (CqeOpcode::Invalid as u8) << 4 | self.owner_for(self.ci);
        let mut bytes = self.copy(self.ci)?.to_bytes();
        bytes[CQE_SIZE - 1] = invalid;
        // The damaged owner bit is the next pass's: marked in the ring too, the slot cannot
        // pass for a later entry when the ring looks ahead from the end of this pass.
        let _ = self
            .region
            .write(self.slot_offset(self.ci) + CQE_SIZE - 1, &[invalid]);
        Some(Cqe::from_bytes(bytes))
    }

    #[inline(always)]
    fn copy(&self, index: u32) -> Option<Cqe> {
        fence(Ordering::Acquire);
        let words = self.region.read_words(self.slot_offset(index)).ok()?;
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
            bytes[CQE_SIZE - 1] = (CqeOpcode::Invalid as u8) << 4 | self.owner_for(self.ci);
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

    /// Consumes `n` completions of the open session (at most the length of the last
    /// [`CqRing::mini_run`]; 1 when the session's completion came from [`CqRing::peek`]).
    /// Their slots are given back for the device's next pass: the device writes only the title
    /// and the mini-CQE arrays, so every slot a session covered gets an INVALID opcode with
    /// this pass's owner bit, which the next pass (expecting the other owner) reads as not yet
    /// written. This happens before the doorbell record tells the device the slots are free.
    #[inline]
    pub(crate) fn consume_run(&mut self, n: u32) {
        let Some(session) = &mut self.session else {
            return;
        };
        let mask = (1u32 << self.log_size) - 1;
        // At most two stretches: up to the ring's end, then from its start with the owner bit
        // of the next pass.
        let mut done = 0;
        while done < n {
            let index = self.ci.wrapping_add(done);
            let slot = index & mask;
            let count = (n - done).min(mask + 1 - slot);
            let invalid = (CqeOpcode::Invalid as u8) << 4 | ((index >> self.log_size) & 1) as u8;
            let last_byte = slot as usize * CQE_SIZE + CQE_SIZE - 1;
            let _ = self
                .region
                .write_byte_strided(last_byte, CQE_SIZE, count as usize, invalid);
            done += count;
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
            session.minis = self
                .region
                .read_words((slot & mask) as usize * CQE_SIZE)
                .unwrap_or([0; MINI_CQES_PER_SLOT as usize]);
        }
    }

    /// Tells the device how far software has read (doorbell record word 0).
    #[inline]
    pub(crate) fn update_dbr(&self) {
        if self.compressed {
            // The slots a session covered were given back with stores to the ring: they
            // must be visible before the device may write there again.
            fence(Ordering::Release);
        }
        let _ = self.dbr.write_u32_be(0, self.ci & 0x00ff_ffff);
    }
}
