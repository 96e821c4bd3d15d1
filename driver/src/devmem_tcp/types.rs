//! What the receiver hands out: events (payload fragments and linear bytes in order, buffers
//! to post again, FIN, RST), the reply a segment calls for, and its counters.

use super::ooo::SackBlocks;
use super::segment::TcpFlags;

/// Connection state (RFC 793 §3.2), from the passive side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcpState {
    /// Waiting for a SYN.
    Listen,
    /// SYN received, SYN-ACK sent, waiting for its ACK.
    SynReceived,
    /// Data flows.
    Established,
    /// We sent FIN ([`super::TcpReceiver::close`]); data still flows in until the peer's FIN.
    FinWait,
    /// The peer's FIN arrived after all its data.
    CloseWait,
    /// Both FINs sent, ours not yet acknowledged.
    LastAck,
    /// Reset, or both directions finished.
    Closed,
}

/// Something for the caller to act on, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// In-order payload in dmabuf memory (devmem's `SCM_DEVMEM_DMABUF`): `len` bytes at dmabuf
    /// offset `offset`, stream bytes from sequence `seq`. Give `token` back when done
    /// ([`super::TcpReceiver::give_back`]).
    Fragment {
        /// Sequence number of the first byte.
        seq: u32,
        /// Dmabuf offset of the first byte.
        offset: u64,
        /// Bytes, at least 1.
        len: u32,
        /// The token to give back.
        token: u32,
    },
    /// In-order payload in host memory (devmem's `SCM_DEVMEM_LINEAR`): bytes `skip..skip +
    /// len` of the linear payload of the segment just passed (it follows the headers in the
    /// header buffer). Only the segment being processed produces it, so the caller copies the
    /// bytes before its header buffer goes.
    Linear {
        /// Sequence number of the first byte.
        seq: u32,
        /// Bytes of the segment's linear payload already received before.
        skip: u32,
        /// New bytes, at least 1.
        len: u32,
    },
    /// The caller may post payload buffer `buffer` to the device again.
    Release {
        /// The split queue's buffer number.
        buffer: u32,
    },
    /// The peer finished sending: every byte before its FIN was handed out.
    Fin,
    /// The peer reset the connection (an RST at exactly the next expected sequence number).
    Reset,
}

/// A segment to send in answer (the caller builds the frame, adds its own TSval when
/// `tsecr` is set, and fills addresses and ports).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    /// Flags: ACK, SYN|ACK, FIN|ACK or RST.
    pub flags: TcpFlags,
    /// Our sequence number.
    pub seq: u32,
    /// The acknowledgment number (`rcv_nxt`).
    pub ack: u32,
    /// The window field (scaled by our shift, except on a SYN-ACK).
    pub window: u16,
    /// MSS option (SYN-ACK only).
    pub mss: Option<u16>,
    /// Our window scale shift (SYN-ACK only, when the peer offered scaling).
    pub window_scale: Option<u8>,
    /// SACK permitted (SYN-ACK only, when the peer offered it).
    pub sack_permitted: bool,
    /// TSecr to echo when timestamps were agreed (`TS.Recent`).
    pub tsecr: Option<u32>,
    /// SACK blocks (when SACK was agreed and data is held out of order).
    pub sack: SackBlocks,
}

/// What became of one segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// SYN taken in LISTEN: SYN-ACK to send.
    SynAccepted,
    /// Retransmitted SYN in SYN-RECEIVED: the SYN-ACK again.
    SynRepeated,
    /// New bytes handed out in order (some may have been trimmed as already received).
    InOrder,
    /// Kept out of order (possibly trimmed).
    OutOfOrder,
    /// A segment with no new payload (pure ACK, window probe at `rcv_nxt`).
    NoData,
    /// Every payload byte was received before.
    Duplicate,
    /// Not acceptable for the receive window (RFC 793 §3.9).
    OutsideWindow,
    /// The device did not verify the checksums.
    BadChecksum,
    /// Out of order with the store full of nearer data.
    StoreFull,
    /// Out of order with payload only in host memory (linear bytes are handed out only in
    /// order): dropped. A segment with a dmabuf part too keeps that part ([`Outcome::OutOfOrder`]).
    LinearOutOfOrder,
    /// Timestamp older than `TS.Recent` (PAWS, RFC 7323 §5).
    Paws,
    /// RST at `rcv_nxt`: the connection is closed.
    Reset,
    /// RST in the window but not at `rcv_nxt`: challenge ACK (RFC 5961 §3.2).
    ResetChallenged,
    /// RST outside the window: ignored.
    ResetIgnored,
    /// SYN in a synchronised state: challenge ACK (RFC 5961 §4.2).
    SynChallenged,
    /// ACK of something never sent, or none where one is needed.
    BadAck,
    /// A segment other than SYN in LISTEN, or any segment after close.
    NotSynchronised,
    /// Payload past the peer's FIN.
    AfterFin,
}

/// What [`super::TcpReceiver::on_segment`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    /// What became of the segment.
    pub outcome: Outcome,
    /// The segment to send now, if any.
    pub reply: Option<Reply>,
}

/// Counters of one receiver.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RxStats {
    /// Segments taken (refused calls are not counted).
    pub segments: u64,
    /// Bytes handed out as dmabuf fragments.
    pub fragment_bytes: u64,
    /// Fragments handed out.
    pub fragments: u64,
    /// Bytes handed out as linear (host memory) payload.
    pub linear_bytes: u64,
    /// In-order segments that carried linear payload.
    pub linear_segments: u64,
    /// Linear payload bytes dropped because their segment came out of order.
    pub linear_dropped_bytes: u64,
    /// Segments whose options lay partly past the split point (unread).
    pub options_in_dmabuf: u64,
    /// Payload bytes dropped as already received (whole duplicates and trimmed overlaps).
    pub duplicate_bytes: u64,
    /// Segments kept out of order.
    pub ooo_stored: u64,
    /// Out-of-order pieces dropped: for room (the new one or one further ahead), or covered
    /// whole by a newer piece.
    pub ooo_dropped: u64,
    /// Segments outside the window.
    pub out_of_window: u64,
    /// Payload bytes cut off past the window's right edge.
    pub past_window_bytes: u64,
    /// Segments the device did not verify.
    pub bad_checksum: u64,
    /// Segments dropped by PAWS.
    pub paws: u64,
    /// RSTs accepted.
    pub resets: u64,
    /// RSTs answered with a challenge ACK, or ignored.
    pub resets_refused: u64,
    /// Challenge ACKs sent (RST, SYN or ACK past `snd_nxt`).
    pub challenge_acks: u64,
    /// Tokens given back.
    pub tokens_returned: u64,
    /// Give-backs refused (a token not lent).
    pub bad_token_returns: u64,
}
