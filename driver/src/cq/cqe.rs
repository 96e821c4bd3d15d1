//! [`Cqe`], a copy of one 64-byte CQE whose fields are read from the copy only. The device
//! writes CQEs on its own schedule, so nothing here trusts what it reads: the queues check every
//! field that selects host state (WQE counter, queue number, byte count) against what they
//! posted.

use crate::mem::OffloadFlags;
use crate::ring::{bytes_from_words, words_from_bytes};
use cxdirect_hw::cqe::{Cqe64, CqeOpcode, ErrCqe, CQE_SIZE};
use cxdirect_hw::layout::{field, FieldInfo};

/// Where each field the queues read sits in a CQE, taken from the `hw::cqe` tables when the
/// driver is compiled: the accessors below decode with these constant offsets, shifts and masks.
mod at {
    use super::{field, Cqe64, ErrCqe, FieldInfo};

    /// A field that lies in one byte (or one big-endian dword): where that byte (dword) is, the
    /// shift that brings the field to bit 0, and its mask.
    #[derive(Clone, Copy)]
    pub(super) struct Bits {
        pub(super) at: usize,
        pub(super) shift: u32,
        pub(super) mask: u32,
    }

    /// `f`, read from its byte.
    const fn in_byte(f: FieldInfo) -> Bits {
        assert!(f.in_one_byte());
        Bits {
            at: f.byte(),
            shift: f.byte_shift(),
            mask: f.mask() as u32,
        }
    }

    /// `f`, read from its dword.
    const fn in_dword(f: FieldInfo) -> Bits {
        assert!(f.in_one_dword());
        Bits {
            at: f.dword_byte(),
            shift: f.dword_shift(),
            mask: f.mask() as u32,
        }
    }

    pub(super) const OPCODE: Bits = in_byte(field::<Cqe64>("opcode"));
    pub(super) const SYNDROME: Bits = in_byte(field::<ErrCqe>("syndrome"));
    pub(super) const L3_HDR_TYPE: Bits = in_byte(field::<Cqe64>("l3_hdr_type"));
    pub(super) const L4_HDR_TYPE: Bits = in_byte(field::<Cqe64>("l4_hdr_type"));
    pub(super) const L3_OK: Bits = in_byte(field::<Cqe64>("l3_ok"));
    pub(super) const L4_OK: Bits = in_byte(field::<Cqe64>("l4_ok"));
    pub(super) const RSS_HASH_TYPE: Bits = in_byte(field::<Cqe64>("rss_hash_type"));
    pub(super) const WQE_COUNTER: Bits = in_dword(field::<Cqe64>("wqe_counter"));
    pub(super) const WQE_ID: Bits = in_dword(field::<Cqe64>("wqe_id"));
    pub(super) const QPN: Bits = in_dword(field::<Cqe64>("qpn"));
    pub(super) const SRQN: Bits = in_dword(field::<Cqe64>("srqn"));
    pub(super) const BYTE_CNT: Bits = in_dword(field::<Cqe64>("byte_cnt"));
    pub(super) const RSS_HASH_RESULT: Bits = in_dword(field::<Cqe64>("rss_hash_result"));
    pub(super) const IMM: Bits = in_dword(field::<Cqe64>("imm_inval_pkey"));
    pub(super) const FLAGS_RQPN: Bits = in_dword(field::<Cqe64>("flags_rqpn"));
    pub(super) const VENDOR_SYNDROME: Bits = in_byte(field::<ErrCqe>("vendor_err_synd"));
}

/// A copy of one 64-byte CQE as the device wrote it, kept as the eight words it was read with
/// (memory order). Any bytes are a valid `Cqe`: accessors only decode, and callers check the
/// decoded values before using them.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Cqe {
    pub(super) words: [u64; CQE_SIZE / 8],
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

    /// Field `f` (lying in one byte) of this CQE.
    #[inline(always)]
    fn byte_field(&self, f: at::Bits) -> u8 {
        (self.byte(f.at) >> f.shift) & f.mask as u8
    }

    /// Field `f` (lying in one dword) of this CQE.
    #[inline(always)]
    fn dword_field(&self, f: at::Bits) -> u32 {
        (self.be32(f.at) >> f.shift) & f.mask
    }

    /// Opcode, bits 7:4 of the last byte (0..=15; see [`CqeOpcode`]).
    #[inline]
    pub fn opcode(&self) -> u8 {
        self.byte_field(at::OPCODE)
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
        self.dword_field(at::WQE_COUNTER) as u16
    }

    /// Striding receive queues: the WQE this completion's strides are in (16 bits, wrapping).
    #[inline]
    pub fn wqe_id(&self) -> u16 {
        self.dword_field(at::WQE_ID) as u16
    }

    /// Send or receive queue number (24 bits).
    #[inline]
    pub fn qpn(&self) -> u32 {
        self.dword_field(at::QPN)
    }

    /// Shared receive ring (RMP) number the buffer came from (24 bits; receive only) on an
    /// Ethernet receive queue.
    #[inline]
    pub fn srqn(&self) -> u32 {
        self.dword_field(at::SRQN)
    }

    /// A QP's completion: the QP's `user_index` (24 bits), which a device reporting
    /// `cqe_version` 1 writes where Ethernet queues' CQEs carry the RMP number (`srqn_uidx`).
    #[inline]
    pub fn user_index(&self) -> u32 {
        self.dword_field(at::SRQN)
    }

    /// Bytes received (receive only; the device's word, unchecked).
    #[inline]
    pub fn byte_cnt(&self) -> u32 {
        self.dword_field(at::BYTE_CNT)
    }

    /// Syndrome of an error CQE (`LOCAL_PROT_ERR` 0x04, `WR_FLUSH_ERR` 0x05, ...).
    #[inline]
    pub fn syndrome(&self) -> u8 {
        self.byte_field(at::SYNDROME)
    }

    /// Immediate data of an RDMA receive completion with immediate (`imm_inval_pkey`, host
    /// order; the device's word, unchecked).
    #[inline]
    pub fn imm(&self) -> u32 {
        self.dword_field(at::IMM)
    }

    /// A datagram receive's `flags_rqpn` word: source QP (bits 23:0), RoCE L3 header type
    /// (bits 25:24) and where the GRH is (bits 29:28) (the device's word, unchecked).
    #[inline]
    pub fn flags_rqpn(&self) -> u32 {
        self.dword_field(at::FLAGS_RQPN)
    }

    /// Vendor syndrome of an error CQE.
    #[inline]
    pub fn vendor_syndrome(&self) -> u8 {
        self.byte_field(at::VENDOR_SYNDROME)
    }

    /// L3 header type (0 none, 1 IPv6, 2 IPv4).
    pub fn l3_type(&self) -> u8 {
        self.byte_field(at::L3_HDR_TYPE)
    }

    /// L4 header type (0 none, 1 TCP, 2 UDP, 3-4 TCP with flags).
    pub fn l4_type(&self) -> u8 {
        self.byte_field(at::L4_HDR_TYPE)
    }

    /// The device verified the IP header checksum.
    pub fn l3_ok(&self) -> bool {
        self.byte_field(at::L3_OK) != 0
    }

    /// The device verified the TCP/UDP checksum.
    pub fn l4_ok(&self) -> bool {
        self.byte_field(at::L4_OK) != 0
    }

    /// RSS hash, when the device computed one (non-zero hash type).
    pub fn rss_hash(&self) -> Option<u32> {
        (self.byte_field(at::RSS_HASH_TYPE) != 0).then(|| self.dword_field(at::RSS_HASH_RESULT))
    }
}

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
