//! Why the receiver refused a call. A refused call changes nothing: the segment's buffer (or
//! the returned tokens) stay where they were, and the caller still owns them.

use thiserror::Error;

/// A refused [`super::TcpReceiver`] call (configuration, a segment naming a buffer the
/// receiver does not think the device has, or tokens it did not lend).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum TcpRxError {
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
    /// A segment's payload names a buffer number past the configured count.
    #[error("payload buffer {buffer} is past the {count} buffers configured")]
    NoSuchBuffer {
        /// The buffer named.
        buffer: u32,
        /// Buffers configured.
        count: u32,
    },
    /// A segment's payload names a buffer the receiver holds or has lent (the device cannot
    /// have written it): taking it would hand out bytes twice.
    #[error("payload buffer {buffer} is not the device's: it is held or lent")]
    BufferNotPosted {
        /// The buffer named.
        buffer: u32,
    },
    /// A segment's dmabuf bytes do not lie inside the buffer they name.
    #[error("payload of {len} bytes at dmabuf offset {offset} is outside buffer {buffer}")]
    OutsideBuffer {
        /// The buffer named.
        buffer: u32,
        /// Dmabuf offset given.
        offset: u64,
        /// Length given.
        len: u32,
    },
    /// A segment carries more payload than one buffer plus one header buffer can hold.
    #[error("segment payload of {len} bytes is longer than the {most} a split frame holds")]
    SegmentTooLong {
        /// Payload bytes given.
        len: u64,
        /// The most accepted.
        most: u64,
    },
    /// A token given back was not lent, was lent in an earlier lap, or was given back already.
    #[error("token {token:#x} is not lent")]
    TokenNotLent {
        /// The token.
        token: u32,
    },
    /// More tokens in one call than [`super::MAX_TOKENS_PER_CALL`].
    #[error("{count} tokens in one call: at most {most}")]
    TooManyTokens {
        /// Tokens asked for.
        count: u32,
        /// The most in one call.
        most: u32,
    },
}
