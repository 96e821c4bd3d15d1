//! cxdirect-devmem-tcp: a devmem TCP receiver in userspace. One port serves an IPv4 address
//! (ARP, ICMP echo), steers TCP to a listening port onto a split receive queue (headers into
//! host memory, payload into a dmabuf: udmabuf, memfd or GPU memory), runs the driver's
//! [`cxdirect::devmem_tcp::TcpReceiver`] on each segment, answers with SYN-ACK and ACKs
//! through a send queue, gives payload tokens back as the application finishes each fragment,
//! and checks the stream against ncdevmem's pattern (`-v N`) by reading the dmabuf, which only
//! the check does: delivery copies no payload byte.
//!
//! - [`server`]: the receiving side;
//! - [`client`], [`connect`]: the sending side (`--connect`), payload gathered by the device
//!   from the dmabuf, and its run (with a listener on the other port of an emulated pair);
//! - [`sha256`]: the pattern's digest, to compare with a Linux listener's `sha256sum`;
//! - [`sender`]: the self-test's sender on the other port of an emulated pair;
//! - [`frame`]: TCP/IPv4 frames as Linux writes them, for the sender;
//! - [`pattern`]: ncdevmem's `-v` pattern, its checker and `--emit-pattern`.
//!
//! The last line a run prints: `summary: bytes=N verified=yes|no|off linear_bytes=N
//! fragment_bytes=N options_in_dmabuf=N segments=N duplicates=N duplicate_bytes=N
//! out_of_order=N plain_dropped=N pattern_errors=N mbps=X cpu_payload_copied=0
//! validation_read_bytes=N tokens_outstanding=N rx_ns_per_segment=N receiver_ns_per_segment=N`:
//! the last two are the receiving side's whole turn per frame it took (queue polls, parse,
//! TCP, tokens, ACKs sent; with `-v`, the check's read of the dmabuf too) and the receiver's
//! share of it per split frame.

pub mod client;
pub mod connect;
pub mod frame;
pub mod pattern;
pub mod sender;
pub mod server;
pub mod sha256;

use crate::dmabuf::{self, Imported};
use cxdirect::devmem_tcp::RxStats;
use cxdirect::{Backend, Device};
use cxdirect_dma::DmaBufMode;
use sender::{Sender, SenderCounts};
pub use server::Handshake;
use server::{Server, ServerConfig, ServerCounts};
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The smallest payload buffer: a 1500-byte-MTU segment's payload fits.
pub const MIN_PAYLOAD_BUFFER: u32 = 2048;

/// The split queue's shape for `size` bytes of dmabuf and at most `max_ring` WQEs: the ring
/// and the payload buffer size, chosen so every buffer the receiver counts in its window can
/// be posted at once (a ring as large as the buffers, up to `max_ring`; larger buffers when
/// the memory holds more than that many of the smallest). Returns `(ring, payload_bytes)`.
pub fn split_shape(size: u64, max_ring: u32) -> (u32, u32) {
    let smallest = (size / u64::from(MIN_PAYLOAD_BUFFER)).clamp(2, u64::from(u32::MAX)) as u32;
    // The largest power of two not above `smallest`.
    let fit = 1u32 << (31 - smallest.leading_zeros());
    let ring = fit.min(max_ring).max(2);
    let bytes = (size / u64::from(ring)).min(65536) as u32 / 64 * 64;
    (ring, bytes.max(MIN_PAYLOAD_BUFFER))
}

/// The split point for a handshake on the split queue: a Linux SYN's 74 bytes of headers
/// (IPv4, MSS, SACK permitted, timestamps, window scale), so its options are all read.
pub const DEFAULT_HEADER_BYTES: u32 = 74;

/// The split point for a handshake on a plain queue: an IPv4 data segment's headers with
/// timestamps (14 + 20 + 32), so every payload byte lands in the dmabuf.
pub const DATA_HEADER_BYTES: u32 = 66;

/// What a run does.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The listening port.
    pub listen: u16,
    /// The address served.
    pub address: Ipv4Addr,
    /// The self-test sender's address (emulated pair only).
    pub sender_address: Ipv4Addr,
    /// Who exports the payload memory: `udmabuf`, `memfd` or `cuda`.
    pub memory: String,
    /// Bytes of dmabuf memory (a multiple of 4096).
    pub size: u64,
    /// The split point (14..=1024).
    pub header_bytes: u32,
    /// Where the handshake is taken: on the split queue (the split point must hold the SYN's
    /// headers for its options to count) or on a plain queue.
    pub handshake: Handshake,
    /// Receive WQEs of the split queue at most (a power of two): see [`split_shape`].
    pub ring: u32,
    /// ncdevmem's `-v`: the pattern's modulus, or no check.
    pub validate: Option<u8>,
    /// Stream bytes the self-test sends; on a PCI function, the bytes expected (if given).
    pub bytes: Option<u64>,
    /// The run's time limit.
    pub timeout: Duration,
    /// The self-test sender ends its stream with a FIN (false: it never shuts its side, and
    /// the receiver closes once the bytes arrived).
    pub sender_fin: bool,
}

/// Stream bytes the self-test sends when `--bytes` is not given.
pub const SELF_TEST_BYTES: u64 = 4 << 20;

/// What a run found.
#[derive(Debug, Clone)]
pub struct Report {
    /// Stream bytes delivered in order.
    pub bytes: u64,
    /// Every byte checked against the pattern and right, the connection closed in order, and
    /// every token back.
    pub verified: bool,
    /// The receiving side's counts.
    pub counts: ServerCounts,
    /// The TCP receiver's counters.
    pub rx: RxStats,
    /// The sender's counts (self-test only).
    pub sender: Option<SenderCounts>,
    /// Pattern mismatches.
    pub pattern_errors: u64,
    /// Megabits per second from the first payload byte to the last.
    pub mbps: f64,
    /// Payload buffers not back at the end: tokens the application holds, and buffers the split
    /// queue lent and never got back.
    pub tokens_outstanding: u32,
    /// The run ended by its time limit.
    pub timed_out: bool,
}

impl Report {
    /// Nanoseconds the receiving side spent per frame it took (split and plain queues: the
    /// queues' polls, the parse, the TCP receiver, tokens back and the ACKs sent), over its
    /// turns that took at least one frame ([`ServerCounts::turn_ns`]).
    pub fn receive_ns_per_segment(&self) -> f64 {
        self.counts.turn_ns as f64 / self.counts.turn_frames.max(1) as f64
    }

    /// Nanoseconds per split frame in the receiver alone ([`ServerCounts::receiver_ns`]).
    pub fn receiver_ns_per_frame(&self) -> f64 {
        self.counts.receiver_ns as f64 / self.counts.split_frames.max(1) as f64
    }

    /// The `summary:` line.
    pub fn summary(&self, validate: bool) -> String {
        let verified = match (validate, self.verified) {
            (false, _) => "off",
            (true, true) => "yes",
            (true, false) => "no",
        };
        let c = &self.counts;
        format!(
            "summary: bytes={} verified={verified} linear_bytes={} fragment_bytes={} options_in_dmabuf={} segments={} duplicates={} duplicate_bytes={} out_of_order={} plain_dropped={} pattern_errors={} mbps={:.1} cpu_payload_copied={} validation_read_bytes={} tokens_outstanding={} rx_ns_per_segment={:.0} receiver_ns_per_segment={:.0}",
            self.bytes,
            c.linear_bytes,
            c.fragment_bytes,
            self.rx.options_in_dmabuf,
            c.segments,
            c.duplicates,
            self.rx.duplicate_bytes,
            c.out_of_order,
            c.plain_dropped,
            self.pattern_errors,
            self.mbps,
            c.cpu_payload_copied,
            c.validation_read_bytes,
            self.tokens_outstanding,
            self.receive_ns_per_segment(),
            self.receiver_ns_per_frame()
        )
    }
}

/// Exports `size` bytes (a multiple of 4096) from `memory` (`udmabuf`, `memfd`, `cuda`),
/// imports the dmabuf and maps it, pinned, for `dev`.
///
/// # Errors
///
/// Exporting, importing or mapping failed (the message says which).
pub fn import<B: Backend>(dev: &Device<B>, memory: &str, size: u64) -> Result<Imported, String> {
    let (buf, gpu) = dmabuf::export_and_import(memory, size, "cxdirect-devmem-tcp")?;
    let (iommu, iovas) = dev.dma();
    let mapping = buf
        .map(iommu, &iovas, 0, size, DmaBufMode::Pinned)
        .map_err(|e| format!("mapping the dmabuf: {e}"))?;
    Ok(Imported {
        mapping: Arc::new(mapping),
        gpu,
        peer: None,
    })
}

/// Runs on `backends`: the last receives; with two (an emulated pair), the first runs the
/// self-test's sender. Prints progress and the summary line; returns the report.
///
/// # Errors
///
/// Opening, a queue, or closing failed (a stalled stream is a report, not an error).
pub fn run<B: Backend>(mut backends: Vec<B>, s: &Settings) -> Result<Report, String> {
    let rx_backend = backends.pop().ok_or("no device")?;
    let (ring, payload_bytes) = split_shape(s.size, s.ring);
    let mut server = Server::open(
        rx_backend,
        ServerConfig {
            ip: s.address,
            port: s.listen,
            header_bytes: s.header_bytes,
            payload_bytes,
            ring,
            validate: s.validate,
            handshake: s.handshake,
            expect: if backends.is_empty() {
                s.bytes
            } else {
                Some(s.bytes.unwrap_or(SELF_TEST_BYTES))
            },
        },
        |dev| import(dev, &s.memory, s.size),
    )?;
    let mut sender = match backends.pop() {
        Some(b) => {
            let total = s.bytes.unwrap_or(SELF_TEST_BYTES);
            println!(
                "self-test: sending {total} bytes from {} to {}:{}",
                s.sender_address, s.address, s.listen
            );
            Some(Sender::open(
                b,
                s.sender_address,
                s.address,
                s.listen,
                total,
                s.validate.unwrap_or(7),
                s.sender_fin,
            )?)
        }
        None => None,
    };
    let start = Instant::now();
    let mut timed_out = false;
    let outcome = loop {
        let now = Instant::now();
        let taken = match server.turn(now) {
            Ok(n) => n,
            Err(e) => break Err(e),
        };
        if let Some(snd) = sender.as_mut() {
            if let Err(e) = snd.turn(now) {
                break Err(e);
            }
        }
        if server.done(now) && sender.as_ref().is_none_or(|x| x.done()) {
            break Ok(());
        }
        if now.duration_since(start) > s.timeout {
            timed_out = true;
            break Ok(());
        }
        if taken == 0 && sender.is_none() {
            // Nothing arrived: the sender may share this CPU (a one-CPU guest), let it run.
            std::thread::yield_now();
        }
    };
    if let Err(e) = &outcome {
        println!("error: {e}");
    }
    println!("{}", server.describe_address());
    if let Some(snd) = &sender {
        let c = snd.counts();
        println!(
            "sender: acked={} segments={} retransmitted={} timeouts={} fast_retransmits={}",
            snd.acked(),
            c.segments,
            c.retransmitted,
            c.timeouts,
            c.fast_retransmits
        );
    }
    let counts = server.counts().clone();
    let rx = server.rx_stats();
    let (checked, pattern_errors) = server
        .checker()
        .map_or((0, 0), |c| (c.checked(), c.errors()));
    if let Some(at) = server.checker().and_then(|c| c.first_error()) {
        println!("pattern: first wrong byte at stream offset {at}");
    }
    let secs = server.data_seconds();
    // Tokens the application holds, and the queue's buffers not back (a lost one shows here).
    let tokens_outstanding = server.tokens_lent() + server.queue_tokens_outstanding() as u32;
    let expected = sender
        .as_ref()
        .map(|_| s.bytes.unwrap_or(SELF_TEST_BYTES))
        .or(s.bytes);
    let verified = s.validate.is_some()
        && outcome.is_ok()
        && !timed_out
        && counts.bytes > 0
        && checked == counts.bytes
        && pattern_errors == 0
        && expected.is_none_or(|n| n == counts.bytes)
        && tokens_outstanding == 0;
    let report = Report {
        bytes: counts.bytes,
        verified,
        sender: sender.as_ref().map(|x| x.counts().clone()),
        pattern_errors,
        mbps: if secs > 0.0 {
            counts.bytes as f64 * 8.0 / secs / 1e6
        } else {
            0.0
        },
        tokens_outstanding,
        timed_out,
        counts,
        rx,
    };
    if timed_out {
        println!("timeout: the stream did not finish in {:?}", s.timeout);
    }
    server.close()?;
    if let Some(snd) = sender {
        snd.close()?;
    }
    println!("{}", report.summary(s.validate.is_some()));
    outcome.map(|()| report)
}

#[cfg(test)]
mod tests {
    use super::split_shape;

    #[test]
    fn the_ring_holds_every_payload_buffer_up_to_its_limit() {
        // 8 MiB: 4096 buffers of 2 KiB, all posted.
        assert_eq!(split_shape(8 << 20, 32768), (4096, 2048));
        // 256 MiB: 32768 buffers of 8 KiB.
        assert_eq!(split_shape(256 << 20, 32768), (32768, 8192));
        // A smaller ring limit: larger buffers.
        assert_eq!(split_shape(64 << 20, 4096), (4096, 16384));
        // Past 64 KiB buffers the ring cannot cover the memory: buffers stay 64 KiB.
        assert_eq!(split_shape(1 << 32, 64), (64, 65536));
        // 1 MiB: 512 buffers.
        assert_eq!(split_shape(1 << 20, 32768), (512, 2048));
    }
}
