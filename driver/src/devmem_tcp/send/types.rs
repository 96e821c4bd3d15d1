//! What the sender takes and hands out: its configuration, the segments to transmit (headers
//! described, payload named by dmabuf offset), completions, outcomes and counters.

use crate::devmem_tcp::types::Reply;

/// How a [`super::TcpSender`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxConfig {
    /// Our initial sequence number.
    pub iss: u32,
    /// Largest payload per segment we offer (our MSS option, and the most we send before the
    /// peer's MSS lowers it), bytes: 64..=9000.
    pub mss: u16,
    /// Smallest retransmission timeout, microseconds (RFC 6298 §2.4 says 1 s; Linux uses
    /// 200 ms), at least 1000.
    pub rto_min_us: u64,
    /// Retransmission timeout before the first RTT sample, microseconds (RFC 6298 §2.1: 1 s).
    pub rto_initial_us: u64,
    /// Largest congestion window, segments (1..=65536).
    pub cwnd_max_segments: u32,
    /// Initial congestion window, segments (RFC 6928: 10).
    pub cwnd_initial_segments: u32,
    /// Dmabuf ranges queued and completions not yet taken, together, at most (1..=65536).
    pub max_ranges: u32,
    /// Largest payload of one transmit the device cuts into MSS-sized segments (LSO), bytes,
    /// 0..=65483 (an IPv4 packet of 65535 bytes with timestamps); 0: one segment per transmit.
    /// New data goes in whole MSS multiples up to it; retransmissions stay one segment.
    pub lso_max_bytes: u32,
}

impl Default for TxConfig {
    fn default() -> Self {
        Self {
            iss: 0x1000_0000,
            mss: 1448,
            rto_min_us: 200_000,
            rto_initial_us: 1_000_000,
            cwnd_max_segments: 1024,
            cwnd_initial_segments: 10,
            max_ranges: 1024,
            lso_max_bytes: 0,
        }
    }
}

/// Connection state of the active side (RFC 793 §3.2, folded to what a one-way sender needs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxState {
    /// Not yet connecting ([`super::TcpSender::connect`]).
    Idle,
    /// SYN sent, waiting for the SYN-ACK.
    SynSent,
    /// Data flows; [`super::TcpSender::close`] not called.
    Established,
    /// Close asked: the FIN follows the last queued byte.
    Closing,
    /// Every byte and our FIN acknowledged (the peer's FIN may still come).
    FinAcked,
    /// The peer reset the connection.
    Reset,
}

/// A segment to transmit: its header fields as a [`Reply`] (written with
/// [`crate::devmem_tcp::write_reply`] and the payload's length), and its payload, if any, as a
/// dmabuf range the device gathers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// Flags, sequence and acknowledgment numbers, window, options.
    pub header: Reply,
    /// Our timestamp (TSval) for this segment, when timestamps are in use.
    pub tsval: u32,
    /// Payload: `len` bytes at dmabuf offset `offset` (`len` 0: no payload).
    pub offset: u64,
    /// Payload bytes: at most `mss`, or more for the device to segment (LSO).
    pub len: u32,
    /// The MSS in use: a payload longer than it is cut by the device into segments of it.
    pub mss: u16,
    /// The segment carries bytes sent before (a retransmission).
    pub retransmit: bool,
}

/// A dmabuf range queued with [`super::TcpSender::queue`] whose every byte the peer
/// acknowledged: the application may write it again (devmem's `SO_EE_ORIGIN_ZEROCOPY`
/// notice, given only once the data is acknowledged).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// Dmabuf offset of the range.
    pub offset: u64,
    /// Bytes.
    pub len: u64,
}

/// What became of a segment from the peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxOutcome {
    /// The SYN-ACK: the connection is established.
    Established,
    /// New bytes (or our SYN or FIN) acknowledged.
    Acked,
    /// A duplicate ACK (counted towards fast retransmit).
    Duplicate,
    /// The third duplicate ACK: the oldest unacknowledged segment goes again.
    FastRetransmit,
    /// An ACK older than the oldest unacknowledged byte, or a window update: nothing acked.
    Old,
    /// An ACK of bytes never sent: answered with an ACK and otherwise ignored (RFC 793
    /// §3.9, RFC 5961 §5).
    AckBeyondSent,
    /// The peer's FIN (at its next sequence number): acknowledged.
    PeerFin,
    /// RST at the peer's next sequence number: the connection is reset.
    Reset,
    /// RST in the window but not at its next sequence number: challenge ACK (RFC 5961 §3).
    ResetChallenged,
    /// RST elsewhere (or not acknowledging our SYN): ignored.
    ResetIgnored,
    /// SYN in a synchronised state: challenge ACK (RFC 5961 §4).
    SynChallenged,
    /// Payload from the peer: this side receives nothing, the bytes are not acknowledged.
    DataRefused,
    /// The device did not verify the checksums: dropped.
    BadChecksum,
    /// A segment the state does not take (before the SYN-ACK, after a reset).
    Ignored,
}

/// Counters of one sender.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TxStats {
    /// Segments from the peer taken.
    pub segments_in: u64,
    /// Data segments handed out (on the wire: an LSO transmit counts its segments),
    /// retransmissions included.
    pub data_segments: u64,
    /// Payload bytes handed out, retransmissions included.
    pub data_bytes: u64,
    /// Data segments handed out again.
    pub retransmits: u64,
    /// Payload bytes handed out again.
    pub retransmit_bytes: u64,
    /// Retransmission timeouts.
    pub timeouts: u64,
    /// Fast retransmissions (third duplicate ACK).
    pub fast_retransmits: u64,
    /// Retransmissions on a partial ACK in recovery (RFC 6582).
    pub partial_ack_retransmits: u64,
    /// Duplicate ACKs.
    pub duplicate_acks: u64,
    /// ACKs of bytes never sent.
    pub acks_beyond_sent: u64,
    /// Zero-window probes.
    pub window_probes: u64,
    /// Bytes acknowledged (SYN and FIN not counted).
    pub acked_bytes: u64,
    /// Completions handed out.
    pub completions: u64,
    /// Challenge ACKs sent.
    pub challenge_acks: u64,
    /// Segments dropped for a bad checksum.
    pub bad_checksum: u64,
}
