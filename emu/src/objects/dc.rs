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
/// WQE names one in its control segment (a 16-bit identifier the application picks; the
/// channel count bounds how many the device works on at once, not the identifiers, as
/// rdma-core's `test_dc_rdma_write_stream` posts identifiers past it); an error of one
/// stream fails that stream only, until it is reset, and the DCI itself once
/// `2^log_errored` distinct streams are in error (mlx5dv_dci_stream_id_reset(3)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DciStreams {
    /// Log2 of the stream channels (at most `LOG_MAX_DCI_STREAM_CHANNELS`).
    pub log_channels: u8,
    /// Log2 of the errored streams that move the DCI to error (at most
    /// `LOG_MAX_DCI_ERRORED_STREAMS`).
    pub log_errored: u8,
    /// The identifiers of the streams in error (the first `errored_count`).
    pub errored: [u16; MAX_ERRORED],
    /// How many of `errored` are in use.
    pub errored_count: u8,
}

/// Most streams a DCI holds in error: `2^LOG_MAX_DCI_ERRORED_STREAMS`.
pub(crate) const MAX_ERRORED: usize = 1 << super::limits::LOG_MAX_DCI_ERRORED_STREAMS;

impl DciStreams {
    /// Streams of `2^log_channels` channels and `2^log_errored` errored streams, none in
    /// error.
    pub fn new(log_channels: u8, log_errored: u8) -> Self {
        Self {
            log_channels,
            log_errored,
            errored: [0; MAX_ERRORED],
            errored_count: 0,
        }
    }

    fn in_error(&self) -> &[u16] {
        &self.errored[..usize::from(self.errored_count).min(MAX_ERRORED)]
    }

    /// Whether `stream` is in error.
    pub fn is_errored(&self, stream: u16) -> bool {
        self.in_error().contains(&stream)
    }

    /// Puts `stream` in error (once; a full table keeps what it has, the DCI then being at
    /// its limit).
    pub fn mark_errored(&mut self, stream: u16) {
        let n = usize::from(self.errored_count);
        if !self.is_errored(stream) && n < MAX_ERRORED {
            self.errored[n] = stream;
            self.errored_count += 1;
        }
    }

    /// Takes `stream` out of error; false when it was not in error.
    pub fn reset(&mut self, stream: u16) -> bool {
        let n = usize::from(self.errored_count).min(MAX_ERRORED);
        let Some(at) = self.errored[..n].iter().position(|&s| s == stream) else {
            return false;
        };
        self.errored.copy_within(at + 1..n, at);
        self.errored_count -= 1;
        true
    }

    /// Whether the streams in error have reached the DCI's limit.
    pub fn at_limit(&self) -> bool {
        usize::from(self.errored_count) >= 1usize << self.log_errored
    }
}
