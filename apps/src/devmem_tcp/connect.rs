//! A `--connect` run: the sending side ([`Client`]) on the first port; on an emulated pair the
//! last port runs the listener ([`Server`], handshake on a plain queue, 66-byte split, the
//! pattern checked), so cxdirect sends to cxdirect in one process. The last line:
//!
//! `summary: bytes=N acked=N segments=N retransmits=N retransmit_bytes=N timeouts=N
//! fast_retransmits=N completions=N lso_frames=N header_bytes=N cpu_payload_copied=0
//! pattern_fill_bytes=N mbps=X finished=yes|no`
//!
//! (`bytes`: stream bytes acknowledged; `segments`: data segments sent, retransmissions
//! included; `lso_frames`: sends the device segmented; `header_bytes`: bytes the CPU wrote into header buffers; `cpu_payload_copied`:
//! payload bytes the CPU copied or read to send them, 0; `pattern_fill_bytes`: bytes the CPU
//! wrote into the dmabuf once, before sending.)

use super::client::{Client, ClientConfig, ClientCounts};
use super::server::{Server, ServerConfig};
use super::{import, split_shape, Handshake, Report, DATA_HEADER_BYTES};
use cxdirect::devmem_tcp::{PathStats, TxStats};
use cxdirect::Backend;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

/// What a `--connect` run does.
#[derive(Debug, Clone)]
pub struct ConnectSettings {
    /// Where to connect.
    pub peer: SocketAddrV4,
    /// Our address.
    pub address: Ipv4Addr,
    /// Who exports the payload memory: `udmabuf` or `memfd` (the CPU writes the pattern).
    pub memory: String,
    /// Bytes of dmabuf memory (a multiple of 4096).
    pub size: u64,
    /// Stream bytes to send.
    pub bytes: u64,
    /// The pattern's modulus (ncdevmem's `-v`).
    pub modulus: u8,
    /// The run's time limit.
    pub timeout: Duration,
    /// Smallest retransmission timeout.
    pub rto_min: Duration,
    /// Let the device segment (LSO) where the port offers it.
    pub lso: bool,
}

/// What a `--connect` run found.
#[derive(Debug, Clone)]
pub struct ConnectReport {
    /// Stream bytes acknowledged.
    pub bytes: u64,
    /// The sender's counters.
    pub tx: TxStats,
    /// The send path's counters.
    pub path: PathStats,
    /// The sending side's counts.
    pub counts: ClientCounts,
    /// Megabits per second from the first segment to the last ACK.
    pub mbps: f64,
    /// Every byte and our FIN acknowledged.
    pub finished: bool,
    /// The run ended by its time limit.
    pub timed_out: bool,
    /// The in-process listener's report (emulated pair).
    pub listener: Option<Report>,
}

impl ConnectReport {
    /// The `summary:` line.
    pub fn summary(&self) -> String {
        format!(
            "summary: bytes={} acked={} segments={} retransmits={} retransmit_bytes={} timeouts={} fast_retransmits={} completions={} lso_frames={} header_bytes={} cpu_payload_copied={} pattern_fill_bytes={} mbps={:.1} finished={}",
            self.bytes,
            self.tx.acked_bytes,
            self.tx.data_segments,
            self.tx.retransmits,
            self.tx.retransmit_bytes,
            self.tx.timeouts,
            self.tx.fast_retransmits,
            self.counts.completions,
            self.path.lso_frames,
            self.path.header_bytes,
            self.counts.cpu_payload_copied,
            self.counts.pattern_fill_bytes,
            self.mbps,
            if self.finished { "yes" } else { "no" }
        )
    }
}

/// Runs the sending side on the first of `backends`; with two (an emulated pair), the last
/// listens at `s.peer` and checks the pattern. Prints progress and the summary line.
///
/// # Errors
///
/// Opening, a queue, or closing failed, or the peer reset the connection.
pub fn run<B: Backend>(mut backends: Vec<B>, s: &ConnectSettings) -> Result<ConnectReport, String> {
    let listener_backend = if backends.len() > 1 {
        backends.pop()
    } else {
        None
    };
    let client_backend = backends.into_iter().next().ok_or("no device")?;
    let mut server = match listener_backend {
        Some(b) => {
            let (ring, payload_bytes) = split_shape(s.size, 32768);
            Some(Server::open(
                b,
                ServerConfig {
                    ip: *s.peer.ip(),
                    port: s.peer.port(),
                    header_bytes: DATA_HEADER_BYTES,
                    payload_bytes,
                    ring,
                    validate: Some(s.modulus),
                    handshake: Handshake::Plain,
                    expect: Some(s.bytes),
                },
                |dev| import(dev, &s.memory, s.size),
            )?)
        }
        None => None,
    };
    let mut client = Client::open(
        client_backend,
        ClientConfig {
            ip: s.address,
            peer: s.peer,
            bytes: s.bytes,
            modulus: s.modulus,
            rto_min: s.rto_min,
            lso: s.lso,
        },
        |dev| import(dev, &s.memory, s.size),
    )?;
    let start = Instant::now();
    let mut timed_out = false;
    let outcome = loop {
        let now = Instant::now();
        if let Some(srv) = server.as_mut() {
            if let Err(e) = srv.turn(now) {
                break Err(e);
            }
        }
        if let Err(e) = client.turn(now) {
            break Err(e);
        }
        if client.done(now) && server.as_ref().is_none_or(|x| x.done(now)) {
            break Ok(());
        }
        if now.duration_since(start) > s.timeout {
            timed_out = true;
            break Ok(());
        }
    };
    if let Err(e) = &outcome {
        println!("error: {e}");
    }
    if timed_out {
        println!("timeout: the stream did not finish in {:?}", s.timeout);
    }
    let listener = match server {
        Some(srv) => {
            let r = listener_report(&srv, s.bytes, timed_out, outcome.is_ok());
            println!("listener {}", r.summary(true));
            srv.close()?;
            Some(r)
        }
        None => None,
    };
    let secs = client.data_seconds();
    let report = ConnectReport {
        bytes: client.acked(),
        tx: client.stats(),
        path: client.path_stats(),
        counts: client.counts().clone(),
        mbps: if secs > 0.0 {
            client.acked() as f64 * 8.0 / secs / 1e6
        } else {
            0.0
        },
        finished: client.acked() == s.bytes && !timed_out && outcome.is_ok(),
        timed_out,
        listener,
    };
    client.close()?;
    println!("{}", report.summary());
    outcome.map(|()| report)
}

/// The in-process listener's report, as a `--listen` run makes it.
fn listener_report<B: Backend>(srv: &Server<B>, expect: u64, timed_out: bool, ok: bool) -> Report {
    let counts = srv.counts().clone();
    let (checked, pattern_errors) = srv.checker().map_or((0, 0), |c| (c.checked(), c.errors()));
    let tokens_outstanding = srv.tokens_lent() + srv.queue_tokens_outstanding() as u32;
    let secs = srv.data_seconds();
    Report {
        bytes: counts.bytes,
        verified: ok
            && !timed_out
            && counts.bytes == expect
            && checked == expect
            && pattern_errors == 0
            && tokens_outstanding == 0,
        rx: srv.rx_stats(),
        sender: None,
        pattern_errors,
        mbps: if secs > 0.0 {
            counts.bytes as f64 * 8.0 / secs / 1e6
        } else {
            0.0
        },
        tokens_outstanding,
        timed_out,
        counts,
    }
}
