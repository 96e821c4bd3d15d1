//! What the receiver takes in: one TCP segment as parsed from its headers in host memory, with
//! its payload described by where it landed (linear bytes in the header buffer, the rest in a
//! dmabuf payload buffer), never by its bytes.

/// TCP header flags (RFC 793 / RFC 3168 bit positions in byte 13 of the header).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TcpFlags(pub u8);

impl TcpFlags {
    /// No more data from the sender.
    pub const FIN: TcpFlags = TcpFlags(0x01);
    /// Synchronise sequence numbers.
    pub const SYN: TcpFlags = TcpFlags(0x02);
    /// Reset the connection.
    pub const RST: TcpFlags = TcpFlags(0x04);
    /// Push.
    pub const PSH: TcpFlags = TcpFlags(0x08);
    /// The acknowledgment field is significant.
    pub const ACK: TcpFlags = TcpFlags(0x10);

    /// Whether every flag of `other` is set.
    pub fn has(self, other: TcpFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for TcpFlags {
    type Output = TcpFlags;
    fn bitor(self, rhs: TcpFlags) -> TcpFlags {
        TcpFlags(self.0 | rhs.0)
    }
}

/// One SACK block: sequence numbers `[left, right)` (RFC 2018 §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SackBlock {
    /// First sequence number of the block.
    pub left: u32,
    /// Sequence number just past the block.
    pub right: u32,
}

/// The SACK blocks a segment carries (RFC 2018 §3), up to four, as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PeerSack {
    blocks: [SackBlock; 4],
    len: u8,
}

impl PeerSack {
    /// The blocks, in the order the segment lists them.
    pub fn as_slice(&self) -> &[SackBlock] {
        &self.blocks[..usize::from(self.len)]
    }

    /// Adds a block; false (nothing kept) past four.
    pub fn push(&mut self, b: SackBlock) -> bool {
        let Some(slot) = self.blocks.get_mut(usize::from(self.len)) else {
            return false;
        };
        *slot = b;
        self.len += 1;
        true
    }
}

/// The TCP options of a segment that the receiver uses. Options that lay past the split point
/// (in dmabuf memory, unread) are absent and `truncated` says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TcpOptions {
    /// Maximum segment size (SYN only), bytes.
    pub mss: Option<u16>,
    /// Window scale shift (SYN only), 0..=14 (larger values are taken as 14, RFC 7323 §2.3).
    pub window_scale: Option<u8>,
    /// SACK permitted (SYN only).
    pub sack_permitted: bool,
    /// Timestamps: (TSval, TSecr).
    pub timestamp: Option<(u32, u32)>,
    /// Some option bytes lay past the split point and were not read.
    pub truncated: bool,
    /// SACK blocks (RFC 2018): what the peer holds past its ACK (the sender reads them).
    pub sack: PeerSack,
}

/// Where a segment's payload is: `linear` bytes in host memory (the header buffer, after the
/// headers) first in sequence order, then `dmabuf` bytes in one payload buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Payload {
    /// Payload bytes in host memory ahead of the dmabuf part (Linux's `SCM_DEVMEM_LINEAR`).
    pub linear: u32,
    /// The payload bytes in dmabuf memory, if any.
    pub dmabuf: Option<DmabufPart>,
}

impl Payload {
    /// Payload bytes in all.
    pub fn len(&self) -> u64 {
        u64::from(self.linear) + self.dmabuf.map_or(0, |d| u64::from(d.len))
    }

    /// Whether the segment carries no payload.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Payload bytes in a dmabuf payload buffer: `len` bytes at dmabuf offset `offset`, inside
/// payload buffer `buffer` (the split queue's buffer number).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DmabufPart {
    /// The payload buffer the device wrote, `0..RxConfig::buffers`.
    pub buffer: u32,
    /// Dmabuf offset of the first payload byte (inside the buffer: past any header bytes the
    /// split put there).
    pub offset: u64,
    /// Payload bytes (0 is allowed: the buffer held only header bytes or padding).
    pub len: u32,
}

/// One received TCP segment, parsed from its headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Segment {
    /// Sequence number of the first byte (of the SYN when SYN is set).
    pub seq: u32,
    /// Acknowledgment number (meaningful with ACK).
    pub ack: u32,
    /// Header flags.
    pub flags: TcpFlags,
    /// Window field, unscaled.
    pub window: u16,
    /// Options read.
    pub options: TcpOptions,
    /// Where the payload landed.
    pub payload: Payload,
    /// The device verified the IP and TCP checksums (the CQE's L3/L4 ok bits). The receiver
    /// never computes a checksum: it cannot read the payload.
    pub checksum_ok: bool,
}
