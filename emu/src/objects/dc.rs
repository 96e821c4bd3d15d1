//! The dynamically connected (DC) transport's objects: DC targets (DCTs), and what a DC
//! initiator (a QP of service type DCI) and a DCT's responder contexts keep of the connection
//! they carry.
//!
//! A DC initiator sends each WQE to the DCT its address vector names; it carries one
//! connection at a time, and moves to another DCT once every WQE sent on the current one is
//! acknowledged. A DCT answers many initiators at once: each initiator it hears from gets one
//! of the DCT's responder contexts, an RC responder QP of the device's own that the driver
//! never sees, so the RC responder (PSN order, duplicates, READ and atomic resources, ACK
//! coalescing) runs unchanged per connection.

/// Responder contexts a DCT keeps: the initiators it can carry at once. Another initiator
/// takes the least recently used idle one; while none is idle its requests are dropped
/// (counted) and its retransmissions try again.
pub(crate) const DCT_RESPONDERS: usize = 8;

/// A DCT as CREATE_DCT made it.
#[derive(Debug)]
pub(crate) struct Dct {
    /// The context as given (`dctc`, 64 bytes): QUERY_DCT reads it back, with `state` and the
    /// violation count current.
    pub ctx: [u8; 0x40],
    /// `cxdirect_hw::dct::state`.
    pub state: u8,
    /// DC access key initiators must present.
    pub key: u64,
    pub cqn: u32,
    /// The RMP (SRQ) its SENDs take receive WQEs from.
    pub srqn: u32,
    /// Requests refused for a wrong key (`dc_access_key_violation_count`).
    pub key_violations: u32,
    /// Armed by ARM_DCT_FOR_KEY_VIOLATION: the next wrong key raises DCT_KEY_VIOLATION and
    /// disarms it.
    pub armed: bool,
    /// Responder contexts (RC QP numbers of the device's own), each carrying one initiator.
    pub responders: Vec<u32>,
}

/// The connection a DC initiator carries now: the DCT its requests go to, and the PSN the
/// connection began at (which every request's DC header repeats, so that the DCT tells a new
/// connection from the retransmission of an old one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DciConnection {
    pub dct: u32,
    pub rgid: [u8; 16],
    pub rmac: [u8; 6],
    pub key: u64,
    pub connect_psn: u32,
}

/// What one of a DCT's responder contexts carries: the initiator (its source GID and DCI
/// number) and the PSN its connection began at; when it was last used, for reassignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DcResponder {
    pub dct: u32,
    /// The initiator now assigned (`None`: free).
    pub peer: Option<DcPeer>,
    /// A counter value from the last request taken (larger: more recent).
    pub last_used: u64,
}

/// An initiator a DCT responder context carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DcPeer {
    pub rgid: [u8; 16],
    pub dci: u32,
    pub connect_psn: u32,
}

/// A DC initiator's streams (DCI streams, `log_num_dci_stream_channels` at CREATE_QP): each
/// WQE names one in its control segment; an error a responder reports on one stream fails
/// that stream only, until it is reset, and the DCI itself once `2^log_errored` streams are
/// in error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DciStreams {
    /// Log2 of the stream channels (at most `LOG_MAX_DCI_STREAM_CHANNELS`).
    pub log_channels: u8,
    /// Log2 of the errored streams that move the DCI to error (at most
    /// `LOG_MAX_DCI_ERRORED_STREAMS`).
    pub log_errored: u8,
    /// The streams in error, one bit each (bit `n`: stream `n`).
    pub errored: u32,
}

impl DciStreams {
    /// Whether `stream` is one of the DCI's channels.
    pub fn has(&self, stream: u16) -> bool {
        u32::from(stream) < (1u32 << self.log_channels)
    }

    /// Whether `stream` is in error.
    pub fn is_errored(&self, stream: u16) -> bool {
        self.has(stream) && self.errored & (1u32 << stream) != 0
    }

    /// Whether the streams in error have reached the DCI's limit.
    pub fn at_limit(&self) -> bool {
        self.errored.count_ones() >= (1u32 << self.log_errored)
    }
}
