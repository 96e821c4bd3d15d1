//! Completion queues, driver side: the ring software reads by owner bit, and [`Cqe`], a copy of
//! one 64-byte CQE whose fields are read from the copy only. The device writes CQEs on its own
//! schedule, so nothing here trusts what it reads: the queues check every field that selects
//! host state (WQE counter, queue number, byte count) against what they posted.

use crate::queue::{bytes_from_words, words_from_bytes};
use cxdirect_dma::DmaRegion;
use cxdirect_hw::cqe::{self, CqeOpcode, CQE_SIZE};
use std::sync::atomic::{fence, Ordering};

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

/// Byte of an error CQE that holds its syndrome.
pub(crate) const ERR_CQE_SYNDROME: usize = 0x37;

/// Empty polls after which a CQ looks one slot ahead for an entry the device skipped.
const GAP_CHECK_POLLS: u32 = 256;

/// A completion queue ring, driver side.
pub(crate) struct CqRing {
    pub region: DmaRegion,
    pub dbr: DmaRegion,
    pub log_size: u8,
    pub ci: u32,
    pub cqn: u32,
    /// Polls in a row that found nothing, for the skipped-entry check.
    pub idle_polls: u32,
}

impl CqRing {
    /// A ring of `2^log_size` CQEs starting at consumer index 0.
    pub(crate) fn new(region: DmaRegion, dbr: DmaRegion, log_size: u8, cqn: u32) -> Self {
        Self {
            region,
            dbr,
            log_size,
            ci: 0,
            cqn,
            idle_polls: 0,
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
    /// [`GAP_CHECK_POLLS`] empty polls the ring also looks one slot ahead: a written entry
    /// there behind a slot that is still not written means the device skipped (or damaged the
    /// owner bit of) the one at the consumer index, which is then returned with its opcode
    /// set to INVALID for the same refusal.
    #[inline(always)]
    pub(crate) fn peek(&mut self) -> Option<Cqe> {
        // One word load for the owner byte; the rest only once it is ours.
        let op_own = self.op_own_at(self.ci)?;
        if cqe::sw_owns(op_own, self.ci, self.log_size)
            || (op_own & 1 == self.owner_for(self.ci) && op_own >> 4 == CqeOpcode::Invalid as u8)
        {
            self.idle_polls = 0;
            return self.copy(self.ci);
        }
        self.idle_polls += 1;
        if self.idle_polls >= GAP_CHECK_POLLS {
            self.idle_polls = 0;
            return self.skipped_entry();
        }
        None
    }

    /// As [`CqRing::peek`], looking ahead for a skipped entry at once (recovery's drain).
    pub(crate) fn peek_or_skipped(&mut self) -> Option<Cqe> {
        self.peek().or_else(|| self.skipped_entry())
    }

    /// The entry at the consumer index, marked INVALID, when the device has written the next
    /// one but not this one.
    #[cold]
    fn skipped_entry(&self) -> Option<Cqe> {
        let next = self.ci.wrapping_add(1);
        if !cqe::sw_owns(self.op_own_at(next)?, next, self.log_size) {
            return None;
        }
        // The device writes in order: once the next entry is visible, this one is final.
        fence(Ordering::Acquire);
        if cqe::sw_owns(self.op_own_at(self.ci)?, self.ci, self.log_size) {
            return self.copy(self.ci);
        }
        let mut bytes = self.copy(self.ci)?.to_bytes();
        bytes[CQE_SIZE - 1] = (CqeOpcode::Invalid as u8) << 4 | self.owner_for(self.ci);
        Some(Cqe::from_bytes(bytes))
    }

    #[inline(always)]
    fn copy(&self, index: u32) -> Option<Cqe> {
        fence(Ordering::Acquire);
        let words = self.region.read_words(self.slot_offset(index)).ok()?;
        Some(Cqe::from_words(words))
    }

    #[inline]
    pub(crate) fn consume(&mut self) {
        self.ci = self.ci.wrapping_add(1);
    }

    /// Tells the device how far software has read (doorbell record word 0).
    #[inline]
    pub(crate) fn update_dbr(&self) {
        let _ = self.dbr.write_u32_be(0, self.ci & 0x00ff_ffff);
    }
}
