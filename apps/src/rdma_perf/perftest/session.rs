//! The order of perftest's exchanges for each test, over one TCP connection, as perftest
//! 25.01's `write_bw.c`, `read_bw.c`, `send_bw.c` and `write_lat.c` run them (no `-R`, no
//! `--dont_xchg_versions`, RC, one port):
//!
//! 1. versions (16 bytes each way), then the cycle buffer and cache line sizes (two 4-byte
//!    big-endian numbers, each side keeping the larger), then the MTU (an ASCII digit and a
//!    NUL, each side keeping the smaller);
//! 2. the key message of each queue pair (`ctx_hand_shake`; `ib_write_lat` trades queue pair
//!    0's once more first);
//! 3. the queue pairs go to RTR and RTS; `ib_send_bw` trades queue pair 0's keys once;
//! 4. every queue pair's keys again (perftest prints the remote ones then), and for all but
//!    `ib_send_bw` queue pair 0's once more ("after moving qp to RTR");
//! 5. the test: `ib_send_bw`'s server posts its receives, then both trade queue pair 0's keys
//!    and run; in `ib_write_bw` and `ib_read_bw` only the client runs, the server waits in a
//!    trade of keys for the client to finish; `ib_write_lat` runs both at once;
//! 6. `ib_write_bw` and `ib_read_bw` trade keys and the client's report (each field on its
//!    own), and all bandwidth tests trade keys a last time (`ctx_close_connection`).
//!
//! Every trade is the client writing then reading, the server reading then writing. The keys
//! traded after the first are read and checked but not used again, as perftest does.

use super::wire::{self, Keys, Version, WireError, WireReport, KEY_LEN_GID};
use crate::rdma_perf::{BwReport, LatReport};
use std::fmt;
use std::io::{ErrorKind, Read, Write};

/// The cycle buffer this side announces, in bytes: a page, perftest's default
/// (`sysconf(_SC_PAGESIZE)`).
pub const OUR_CYCLE_BUFFER: u32 = 4096;
/// The cache line this side announces, in bytes (`DEF_CACHE_LINE_SIZE`).
pub const OUR_CACHE_LINE: u32 = 64;
/// Largest cycle buffer accepted from a peer, in bytes: a page of any machine perftest runs on
/// is far smaller, and the buffers are sized from it.
pub const MAX_CYCLE_BUFFER: u32 = 1 << 24;
/// Largest cache line accepted from a peer, in bytes.
pub const MAX_CACHE_LINE: u32 = 4096;

/// The perftest program a session runs with (or as).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Test {
    /// `ib_write_bw`.
    WriteBw,
    /// `ib_read_bw`.
    ReadBw,
    /// `ib_send_bw`.
    SendBw,
    /// `ib_write_lat`.
    WriteLat,
}

impl Test {
    /// The perftest program's name.
    pub fn program(self) -> &'static str {
        match self {
            Self::WriteBw => "ib_write_bw",
            Self::ReadBw => "ib_read_bw",
            Self::SendBw => "ib_send_bw",
            Self::WriteLat => "ib_write_lat",
        }
    }
}

/// Which side of the TCP connection this is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Accepted the connection: reads first in every trade.
    Server,
    /// Made the connection (perftest given a server name): writes first in every trade.
    Client,
}

/// What the first trades settled.
#[derive(Clone, Debug, PartialEq)]
pub struct Agreed {
    /// The peer's version.
    pub peer_version: Version,
    /// Bytes of each cycle buffer: the larger of the two sides'.
    pub cycle_buffer: u32,
    /// Bytes of a cache line: the larger of the two sides'.
    pub cache_line: u32,
    /// The path MTU, as `ibv_mtu` (1 = 256 … 5 = 4096): the smaller of the two sides'.
    pub mtu: u8,
}

/// What a side measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Measured {
    /// A bandwidth run (the client's, or `ib_send_bw`'s server's).
    Bw(BwReport),
    /// A latency run.
    Lat(LatReport),
}

/// The device side of a session: what happens between the trades.
pub trait Local {
    /// Creates the queue pairs and the buffer for what was agreed; returns each queue pair's
    /// keys (with the GID: this side always trades the 108-byte message).
    fn prepare(&mut self, agreed: &Agreed) -> Result<Vec<Keys>, String>;
    /// Moves the queue pairs to RTR and RTS toward the peer's.
    fn connect(&mut self, remote: &[Keys], agreed: &Agreed) -> Result<(), String>;
    /// Posts the receives of `ib_send_bw`'s server, before the trade that starts the run.
    fn post_receives(&mut self) -> Result<(), String>;
    /// Runs the test's loop for this side.
    fn measure(&mut self, remote: &[Keys]) -> Result<Measured, String>;
}

/// Why a session stopped.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The connection failed while trading `step`.
    #[error("perftest exchange: {step}: {source}")]
    Io {
        /// What was being traded.
        step: &'static str,
        /// The error.
        source: std::io::Error,
    },
    /// The peer closed the connection in the middle of `step`.
    #[error("perftest exchange: {0}: the peer closed the connection")]
    Closed(&'static str),
    /// The peer sent something malformed in `step`.
    #[error("perftest exchange: {step}: {source}")]
    Wire {
        /// What was being traded.
        step: &'static str,
        /// What was wrong with it.
        source: WireError,
    },
    /// The peer's cycle buffer or cache line size is out of range.
    #[error("perftest exchange: the peer's {what} of {value} bytes is out of range (1..={max})")]
    SysData {
        /// Which size.
        what: &'static str,
        /// What it sent.
        value: u32,
        /// The largest accepted.
        max: u32,
    },
    /// One side's GID is IPv4-mapped and the other's not (perftest's
    /// `ctx_check_gid_compatibility`).
    #[error(
        "perftest exchange: the GIDs are of different IP versions (local {local}, remote {remote})"
    )]
    GidMismatch {
        /// Ours.
        local: String,
        /// The peer's.
        remote: String,
    },
    /// The peer traded another number of queue pairs' keys, or keys without a GID.
    #[error("perftest exchange: {0}")]
    Keys(String),
    /// The device side failed.
    #[error("{0}")]
    Local(String),
}

/// What a session ended with.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// What the first trades settled.
    pub agreed: Agreed,
    /// This side's keys.
    pub local: Vec<Keys>,
    /// The peer's keys.
    pub remote: Vec<Keys>,
    /// What this side measured, if it ran a loop that measures.
    pub measured: Option<Measured>,
    /// The client's report, as `ib_write_bw` and `ib_read_bw` send it to their server.
    pub peer_report: Option<WireReport>,
}

/// One TCP connection to a perftest peer, and the side this is on it.
pub struct Channel<S> {
    stream: S,
    role: Role,
}

impl<S: Read + Write> Channel<S> {
    /// A channel over an open connection.
    pub fn new(stream: S, role: Role) -> Self {
        Self { stream, role }
    }

    /// Sends `mine` and receives as many bytes into `theirs`, the client first
    /// (`ctx_xchg_data_ethernet`). Each message goes out in one write, as perftest reads it
    /// in one read.
    pub fn trade(
        &mut self,
        step: &'static str,
        mine: &[u8],
        theirs: &mut [u8],
    ) -> Result<(), SessionError> {
        let io = |source: std::io::Error| {
            if source.kind() == ErrorKind::UnexpectedEof {
                SessionError::Closed(step)
            } else {
                SessionError::Io { step, source }
            }
        };
        match self.role {
            Role::Client => {
                self.stream.write_all(mine).map_err(io)?;
                self.stream.flush().map_err(io)?;
                self.stream.read_exact(theirs).map_err(io)
            }
            Role::Server => {
                self.stream.read_exact(theirs).map_err(io)?;
                self.stream.write_all(mine).map_err(io)?;
                self.stream.flush().map_err(io)
            }
        }
    }

    /// Trades key messages (`ctx_hand_shake`); the peer's must be of the same form as ours.
    pub fn keys(&mut self, step: &'static str, mine: &Keys) -> Result<Keys, SessionError> {
        let mut theirs = vec![0u8; mine.wire_len()];
        self.trade(step, &mine.to_wire(), &mut theirs)?;
        Keys::from_wire(&theirs).map_err(|source| SessionError::Wire { step, source })
    }

    /// The first trades: versions, sizes and MTU (`exchange_versions`, `check_sys_data`,
    /// `check_mtu`), with this side's MTU as `ibv_mtu`.
    pub fn greet(&mut self, our_mtu: u8) -> Result<Agreed, SessionError> {
        let mut theirs = [0u8; wire::VERSION_LEN];
        self.trade("version", &wire::version_message(), &mut theirs)?;
        let peer_version = wire::parse_version(&theirs).map_err(|source| SessionError::Wire {
            step: "version",
            source,
        })?;
        let mut size = |what: &'static str, ours: u32, max: u32| {
            let mut theirs = [0u8; 4];
            self.trade(what, &ours.to_be_bytes(), &mut theirs)?;
            match u32::from_be_bytes(theirs) {
                v @ 1.. if v <= max => Ok(v.max(ours)),
                value => Err(SessionError::SysData { what, value, max }),
            }
        };
        let cycle_buffer = size("cycle buffer", OUR_CYCLE_BUFFER, MAX_CYCLE_BUFFER)?;
        let cache_line = size("cache line", OUR_CACHE_LINE, MAX_CACHE_LINE)?;
        let mut theirs = [0u8; wire::MTU_LEN];
        self.trade("MTU", &wire::mtu_message(our_mtu), &mut theirs)?;
        let peer_mtu = wire::parse_mtu(&theirs).map_err(|source| SessionError::Wire {
            step: "MTU",
            source,
        })?;
        Ok(Agreed {
            peer_version,
            cycle_buffer,
            cache_line,
            mtu: peer_mtu.map_or(our_mtu, |m| m.min(our_mtu)),
        })
    }

    /// Trades a bandwidth report field by field (`xchg_bw_reports`, peers of 5.33 and later).
    pub fn report(&mut self, mine: &WireReport) -> Result<WireReport, SessionError> {
        let mut theirs = [[0u8; wire::REPORT_FIELD_LEN]; 5];
        for (m, t) in mine.fields().iter().zip(theirs.iter_mut()) {
            self.trade("report", m, t)?;
        }
        Ok(WireReport::from_fields(&theirs))
    }
}

impl<S> fmt::Debug for Channel<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Channel").field("role", &self.role).finish()
    }
}

/// Whether a GID is an IPv4-mapped IPv6 address (`ipv6_addr_v4mapped`).
fn v4_mapped(gid: &[u8; 16]) -> bool {
    gid[..10].iter().all(|&b| b == 0) && gid[10] == 0xff && gid[11] == 0xff
}

/// Runs `test` as `channel`'s side, `local` doing the device's part; `our_mtu` is this side's
/// path MTU as `ibv_mtu`.
pub fn run_session<S: Read + Write, L: Local>(
    channel: &mut Channel<S>,
    test: Test,
    our_mtu: u8,
    local: &mut L,
) -> Result<Outcome, SessionError> {
    let agreed = channel.greet(our_mtu)?;
    let mine = local.prepare(&agreed).map_err(SessionError::Local)?;
    let first = *mine
        .first()
        .ok_or_else(|| SessionError::Local("no queue pairs".into()))?;
    if first.wire_len() != KEY_LEN_GID {
        return Err(SessionError::Local(
            "keys without a GID: RoCE trades the GID".into(),
        ));
    }
    if test == Test::WriteLat {
        channel.keys("keys", &first)?;
    }
    let mut remote = Vec::with_capacity(mine.len());
    for k in &mine {
        remote.push(channel.keys("keys", k)?);
    }
    let (Some(l), Some(r)) = (first.gid, remote[0].gid) else {
        return Err(SessionError::Keys(format!(
            "the peer's keys carry no GID ({} bytes expected)",
            KEY_LEN_GID
        )));
    };
    if v4_mapped(&l) != v4_mapped(&r) {
        return Err(SessionError::GidMismatch {
            local: std::net::Ipv6Addr::from(l).to_string(),
            remote: std::net::Ipv6Addr::from(r).to_string(),
        });
    }
    local
        .connect(&remote, &agreed)
        .map_err(SessionError::Local)?;
    if test == Test::SendBw {
        channel.keys("barrier after RTS", &first)?;
    }
    for k in &mine {
        channel.keys("keys again", k)?;
    }
    if test != Test::SendBw {
        channel.keys("barrier after RTR", &first)?;
    }
    let role = channel.role;
    let mut outcome = Outcome {
        agreed,
        local: mine,
        remote,
        measured: None,
        peer_report: None,
    };
    match (test, role) {
        (Test::WriteLat, _) => {
            outcome.measured = Some(
                local
                    .measure(&outcome.remote)
                    .map_err(SessionError::Local)?,
            );
        }
        (Test::SendBw, _) => {
            if role == Role::Server {
                local.post_receives().map_err(SessionError::Local)?;
            }
            channel.keys("barrier before the run", &first)?;
            outcome.measured = Some(
                local
                    .measure(&outcome.remote)
                    .map_err(SessionError::Local)?,
            );
            channel.keys("closing", &first)?;
        }
        (Test::WriteBw | Test::ReadBw, Role::Server) => {
            channel.keys("waiting for the client", &first)?;
            outcome.peer_report = Some(channel.report(&WireReport::default())?);
            channel.keys("closing", &first)?;
        }
        (Test::WriteBw | Test::ReadBw, Role::Client) => {
            let measured = local
                .measure(&outcome.remote)
                .map_err(SessionError::Local)?;
            outcome.measured = Some(measured);
            let report = match measured {
                Measured::Bw(r) => WireReport {
                    size: r.size,
                    iters: r.iters,
                    bw_peak: r.peak_gbps,
                    bw_avg: r.avg_gbps,
                    msg_rate: r.msg_rate_mpps,
                },
                Measured::Lat(_) => WireReport::default(),
            };
            channel.keys("end of the run", &first)?;
            outcome.peer_report = Some(channel.report(&report)?);
            channel.keys("closing", &first)?;
        }
    }
    Ok(outcome)
}
