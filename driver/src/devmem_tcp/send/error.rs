//! Why the sender refused a call. A refused call changes nothing.

use thiserror::Error;

/// A refused [`super::TcpSender`] or send-path call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum TcpTxError {
    /// A configuration value out of range.
    #[error("{what} = {value} is out of range: {hint}")]
    Config {
        /// The field.
        what: &'static str,
        /// The value given.
        value: u64,
        /// What is accepted.
        hint: &'static str,
    },
    /// The call does not fit the connection's state (queueing after close, connecting twice,
    /// anything after a reset).
    #[error("not possible in state {state}")]
    State {
        /// The state, as text.
        state: &'static str,
    },
    /// As many ranges queued and completions untaken as configured: take completions first.
    #[error("{most} ranges queued or completed and not taken: take completions first")]
    TooManyRanges {
        /// The configured bound.
        most: u32,
    },
    /// An empty range, or one whose stream would pass 2^62 bytes.
    #[error("range of {len} bytes refused")]
    BadRange {
        /// Bytes asked for.
        len: u64,
    },
    /// A payload range outside the registered send memory.
    #[error("payload of {len} bytes at dmabuf offset {offset} is outside the {size} registered")]
    OutsideMemory {
        /// Dmabuf offset.
        offset: u64,
        /// Bytes.
        len: u64,
        /// Bytes registered.
        size: u64,
    },
    /// A header frame could not be written or a buffer taken.
    #[error("frame not built: {why}")]
    Frame {
        /// Why.
        why: &'static str,
    },
}
