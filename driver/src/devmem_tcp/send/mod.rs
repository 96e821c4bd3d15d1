//! Devmem TCP send: a TCP sender whose payload stays in dmabuf memory. The application queues
//! dmabuf ranges ([`TcpSender::queue`]); the sender cuts them into segments of at most the MSS
//! (or several at once for the device to cut, LSO) and hands each out as a [`Transmit`] (header fields, and the payload as a dmabuf offset and
//! length) for the send path ([`DevmemTx`]) to post as a WQE that gathers the headers from host
//! memory and the payload by memory key from the dmabuf. Retransmissions name the same dmabuf
//! ranges again. A range completes ([`Completion`], devmem's zerocopy notice) only once every
//! byte of it is acknowledged.
//!
//! Like the receiver it is pure: segments and the clock in, transmits and completions out; it
//! allocates only when created, and never reads a payload byte. Peer-written values (ACK
//! numbers, windows, options, RST, SYN) are untrusted: an ACK of bytes never sent is answered
//! and ignored, a window is capped at 2^30 bytes (RFC 7323 §2.3), RST and SYN follow RFC 5961.
//!
//! Loss recovery: a retransmission timeout (RFC 6298, RTT from the timestamp echo, backoff
//! doubling up to 60 s) goes back to the oldest unacknowledged byte; three duplicate ACKs (or
//! one whose SACK blocks hold three segments past it) retransmit it at once and enter NewReno
//! recovery (RFC 6582: each partial ACK retransmits the
//! next hole); congestion control is Reno's (RFC 5681), capped at
//! [`TxConfig::cwnd_max_segments`]. A zero window is probed on the persist timer.
//!
//! - `types`: configuration, transmits, completions, outcomes, counters;
//! - `ack`: what a segment from the peer does;
//! - `transmit`: what goes out next;
//! - `path`: [`DevmemTx`], transmits as frames on a send queue.

mod ack;
mod error;
mod path;
mod transmit;
mod types;

#[cfg(test)]
mod tests;

pub use error::TcpTxError;
pub use path::{DevmemTx, PathStats, SendMemory};
pub use types::{Completion, Transmit, TxConfig, TxOutcome, TxState, TxStats};

use super::seq::Seq;
use std::collections::VecDeque;

/// The largest send window taken from the peer (RFC 7323 §2.3): more is taken as this, so
/// sequence comparisons over what is in flight stay within 2^31.
pub const MAX_SEND_WINDOW: u64 = 1 << 30;

/// The largest payload of one LSO transmit: an IPv4 packet of 65535 bytes behind 20 bytes of
/// IP header and 32 of TCP header with timestamps.
pub const MAX_LSO_PAYLOAD: u32 = 65535 - 20 - 32;

/// The longest retransmission timeout, microseconds (RFC 6298 §2.5 allows a cap of 60 s).
const RTO_MAX_US: u64 = 60_000_000;

/// A queued dmabuf range: `len` bytes at dmabuf `offset`, stream bytes from `start`.
#[derive(Debug, Clone, Copy)]
struct Range {
    offset: u64,
    len: u64,
    start: u64,
}

/// A devmem TCP sender for one connection (the active side). Stream offsets count payload
/// bytes from 0 (sequence number `iss + 1`); the FIN sits at the offset past the last byte.
#[derive(Debug)]
pub struct TcpSender {
    cfg: TxConfig,
    state: TxState,
    /// Our MSS after the handshake (the smaller of ours and the peer's).
    mss: u32,
    /// Window scale shift of the peer's windows (0 when not agreed).
    snd_shift: u8,
    sack_ok: bool,
    /// Timestamps agreed (the peer answered ours), with its last TSval.
    ts_recent: Option<u32>,
    /// The peer's next sequence number (our ACK field).
    rcv_nxt: Seq,
    peer_fin: bool,
    /// [`TcpSender::close`] was called: the FIN follows the last queued byte.
    fin_asked: bool,
    /// Oldest unacknowledged, next to send, highest sent (stream offsets; the FIN counts one).
    una: u64,
    nxt: u64,
    max: u64,
    /// Stream offset past the last queued byte.
    end: u64,
    /// The peer's window, bytes (scaled, capped at [`MAX_SEND_WINDOW`]).
    wnd: u64,
    wl1: Seq,
    wl2: Seq,
    cwnd: u64,
    ssthresh: u64,
    dupacks: u32,
    /// In NewReno recovery until `una` reaches this.
    recover: Option<u64>,
    /// The segment at `una` goes again at the next transmit.
    retransmit_una: bool,
    /// A bare ACK is owed (handshake, peer FIN, challenge, ACK of unsent bytes).
    ack_owed: bool,
    /// A zero-window probe goes at the next transmit.
    probe: bool,
    /// When the SYN was sent (microseconds), and how often.
    syn_sent_at: u64,
    syn_tries: u32,
    /// Retransmission (or persist) timer deadline, microseconds.
    deadline: Option<u64>,
    rto: u64,
    srtt: Option<u64>,
    rttvar: u64,
    ranges: VecDeque<Range>,
    done: VecDeque<Completion>,
    stats: TxStats,
}

impl TcpSender {
    /// A sender configured by `cfg`, not yet connecting.
    ///
    /// # Errors
    ///
    /// [`TcpTxError::Config`] for a value out of range.
    pub fn new(cfg: TxConfig) -> Result<Self, TcpTxError> {
        let bad = |what, value: u64, hint| Err(TcpTxError::Config { what, value, hint });
        if !(64..=9000).contains(&cfg.mss) {
            return bad("mss", cfg.mss.into(), "give 64..=9000 bytes");
        }
        if cfg.rto_min_us < 1000 || cfg.rto_min_us > RTO_MAX_US {
            return bad("rto_min_us", cfg.rto_min_us, "give 1 ms..=60 s");
        }
        if cfg.rto_initial_us < cfg.rto_min_us || cfg.rto_initial_us > RTO_MAX_US {
            return bad(
                "rto_initial_us",
                cfg.rto_initial_us,
                "give rto_min_us..=60 s",
            );
        }
        if !(1..=65536).contains(&cfg.cwnd_max_segments) {
            return bad(
                "cwnd_max_segments",
                cfg.cwnd_max_segments.into(),
                "give 1..=65536",
            );
        }
        if !(1..=cfg.cwnd_max_segments).contains(&cfg.cwnd_initial_segments) {
            return bad(
                "cwnd_initial_segments",
                cfg.cwnd_initial_segments.into(),
                "give 1..=cwnd_max_segments",
            );
        }
        if !(1..=65536).contains(&cfg.max_ranges) {
            return bad("max_ranges", cfg.max_ranges.into(), "give 1..=65536");
        }
        if cfg.lso_max_bytes > MAX_LSO_PAYLOAD {
            return bad("lso_max_bytes", cfg.lso_max_bytes.into(), "give 0..=65483");
        }
        let mss = u32::from(cfg.mss);
        Ok(Self {
            cfg,
            state: TxState::Idle,
            mss,
            snd_shift: 0,
            sack_ok: false,
            ts_recent: None,
            rcv_nxt: Seq(0),
            peer_fin: false,
            fin_asked: false,
            una: 0,
            nxt: 0,
            max: 0,
            end: 0,
            wnd: 0,
            wl1: Seq(0),
            wl2: Seq(0),
            cwnd: u64::from(cfg.cwnd_initial_segments) * u64::from(mss),
            ssthresh: MAX_SEND_WINDOW,
            dupacks: 0,
            recover: None,
            retransmit_una: false,
            ack_owed: false,
            probe: false,
            syn_sent_at: 0,
            syn_tries: 0,
            deadline: None,
            rto: cfg.rto_initial_us,
            srtt: None,
            rttvar: 0,
            ranges: VecDeque::with_capacity(cfg.max_ranges as usize),
            done: VecDeque::with_capacity(cfg.max_ranges as usize),
            stats: TxStats::default(),
        })
    }

    /// Starts connecting: the SYN goes at the next [`TcpSender::poll_transmit`].
    ///
    /// # Errors
    ///
    /// [`TcpTxError::State`] unless the sender is idle.
    pub fn connect(&mut self) -> Result<(), TcpTxError> {
        if self.state != TxState::Idle {
            return Err(self.state_error());
        }
        self.state = TxState::SynSent;
        self.syn_tries = 0;
        Ok(())
    }

    /// Queues `len` bytes at dmabuf offset `offset` behind what is queued. The bytes must stay
    /// as they are until the range's [`Completion`]. Queueing may start before the handshake
    /// ends.
    ///
    /// # Errors
    ///
    /// [`TcpTxError::State`] after [`TcpSender::close`] or a reset;
    /// [`TcpTxError::TooManyRanges`] when [`TxConfig::max_ranges`] ranges and untaken
    /// completions are held; [`TcpTxError::BadRange`] for an empty range or a stream past 2^62.
    pub fn queue(&mut self, offset: u64, len: u64) -> Result<(), TcpTxError> {
        if self.fin_asked
            || !matches!(
                self.state,
                TxState::Idle | TxState::SynSent | TxState::Established
            )
        {
            return Err(self.state_error());
        }
        if self.ranges.len() + self.done.len() >= self.cfg.max_ranges as usize {
            return Err(TcpTxError::TooManyRanges {
                most: self.cfg.max_ranges,
            });
        }
        let stream_end = self.end.checked_add(len);
        if len == 0 || offset.checked_add(len).is_none() || stream_end.is_none_or(|e| e > 1 << 62) {
            return Err(TcpTxError::BadRange { len });
        }
        self.ranges.push_back(Range {
            offset,
            len,
            start: self.end,
        });
        self.end += len;
        Ok(())
    }

    /// Ends our side: the FIN follows the last queued byte.
    ///
    /// # Errors
    ///
    /// [`TcpTxError::State`] before [`TcpSender::connect`] or after a reset or an earlier close.
    pub fn close(&mut self) -> Result<(), TcpTxError> {
        if self.fin_asked || !matches!(self.state, TxState::SynSent | TxState::Established) {
            return Err(self.state_error());
        }
        self.fin_asked = true;
        if self.state == TxState::Established {
            self.state = TxState::Closing;
        }
        Ok(())
    }

    /// The oldest completion not yet taken.
    pub fn take_completion(&mut self) -> Option<Completion> {
        self.done.pop_front()
    }

    /// The state.
    pub fn state(&self) -> TxState {
        self.state
    }

    /// True once our FIN was acknowledged and the peer's FIN came, or the peer reset.
    pub fn finished(&self) -> bool {
        (self.state == TxState::FinAcked && self.peer_fin) || self.state == TxState::Reset
    }

    /// True once the handshake completed (the connection may since have closed).
    pub fn synchronised(&self) -> bool {
        !matches!(self.state, TxState::Idle | TxState::SynSent)
    }

    /// Payload bytes acknowledged.
    pub fn acked(&self) -> u64 {
        self.una.min(self.end)
    }

    /// Payload bytes queued in all.
    pub fn queued(&self) -> u64 {
        self.end
    }

    /// The MSS in use, bytes.
    pub fn mss(&self) -> u32 {
        self.mss
    }

    /// The peer's window, bytes.
    pub fn window(&self) -> u64 {
        self.wnd
    }

    /// The congestion window, bytes.
    pub fn cwnd(&self) -> u64 {
        self.cwnd
    }

    /// The retransmission timeout, microseconds.
    pub fn rto_us(&self) -> u64 {
        self.rto
    }

    /// When the sender wants [`TcpSender::poll_transmit`] called again at the latest
    /// (microseconds), if a timer runs.
    pub fn deadline(&self) -> Option<u64> {
        self.deadline
    }

    /// Counters.
    pub fn stats(&self) -> TxStats {
        self.stats
    }

    /// The sequence number of stream offset `off`.
    fn seq(&self, off: u64) -> Seq {
        Seq(self.cfg.iss).plus(1).plus(off as u32)
    }

    /// The stream offset past the FIN, when close was asked.
    fn fin_end(&self) -> Option<u64> {
        self.fin_asked.then_some(self.end + 1)
    }

    fn state_error(&self) -> TcpTxError {
        TcpTxError::State {
            state: match self.state {
                TxState::Idle => "idle",
                TxState::SynSent => "SYN-SENT",
                TxState::Established => "ESTABLISHED",
                TxState::Closing => "closing",
                TxState::FinAcked => "FIN acknowledged",
                TxState::Reset => "reset",
            },
        }
    }

    /// Pops every range the peer acknowledged whole into the completions.
    fn complete_acked(&mut self) {
        while let Some(r) = self.ranges.front() {
            if r.start + r.len > self.una {
                break;
            }
            self.done.push_back(Completion {
                offset: r.offset,
                len: r.len,
            });
            self.stats.completions += 1;
            self.ranges.pop_front();
        }
    }

    /// The range holding stream offset `off` (queued, not yet completed).
    fn range_at(&self, off: u64) -> Option<&Range> {
        let i = self.ranges.partition_point(|r| r.start + r.len <= off);
        self.ranges.get(i).filter(|r| r.start <= off)
    }
}
