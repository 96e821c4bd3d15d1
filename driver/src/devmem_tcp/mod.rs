//! Devmem TCP receive: a TCP receiver whose payload bytes stay in dmabuf memory. The split
//! receive queue ([`crate::SplitRxQueue`]) puts each frame's first bytes (the headers) in host
//! memory and the rest in a dmabuf payload buffer; [`parse`] reads the headers and says where
//! the payload is (how a ConnectX-6 Dx's fixed-offset split meets headers of another length is
//! in `docs/devmem-tcp.md`); [`TcpReceiver`] runs TCP on the headers alone.
//!
//! The receiver is pure: [`Segment`]s in, [`Event`]s and [`Reply`]s out. It hands in-order
//! payload out as dmabuf fragments (offset, length, token) and linear (host memory) bytes apart,
//! keeps out-of-order pieces in a bounded store and reports them in SACK blocks, trims
//! duplicates and overlaps by moving offsets, computes the window from free payload buffers,
//! takes tokens back in ranges, and follows RFC 5961 for RST and SYN. It never reads or copies a
//! payload byte, and allocates only when created.
//!
//! - [`seq`]: sequence number arithmetic modulo 2^32;
//! - [`segment`]: the parsed segment it takes;
//! - [`parse`]: a split frame's headers to a [`Segment`];
//! - [`reply`]: a [`Reply`] as a frame (headers only, checksums computed);
//! - `receiver`, `ooo`, `buffers`: the state machine, the out-of-order store, the payload
//!   buffers and tokens;
//! - [`send`]: the sending side, [`TcpSender`], whose payload the device gathers from the
//!   dmabuf by memory key ([`DevmemTx`]) and whose ranges complete only once acknowledged.

mod buffers;
mod error;
mod ooo;
pub mod parse;
mod receiver;
pub mod reply;
pub mod segment;
pub mod send;
pub mod seq;
mod types;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_hostile;

pub use buffers::BUFFER_BITS;
pub use error::TcpRxError;
pub use ooo::SackBlocks;
pub use parse::{parse_split, FrameTail, ParseError, SplitFit, SplitSegment};
pub use receiver::{RxConfig, TcpReceiver, MAX_LINEAR, MAX_TOKENS_PER_CALL};
pub use reply::{write_reply, Endpoints, ReplyError, MAX_REPLY_FRAME};
pub use segment::{DmabufPart, Payload, PeerSack, SackBlock, Segment, TcpFlags, TcpOptions};
pub use send::{
    Completion, DevmemTx, PathStats, SendMemory, TcpSender, TcpTxError, Transmit, TxConfig,
    TxOutcome, TxState, TxStats, MAX_LSO_PAYLOAD, MAX_SEND_WINDOW,
};
pub use types::{Event, Outcome, Reply, RxStats, TcpState, Verdict};
