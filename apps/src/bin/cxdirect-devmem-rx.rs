//! cxdirect-devmem-rx: receives a UDP flow like Linux's devmem TCP: the flow is steered to a
//! split receive queue whose WQEs put each frame's first `--header-bytes` into host memory and
//! the rest straight into memory another device exported as a dmabuf (a udmabuf, the system
//! dma-heap, a memfd, or GPU memory through CUDA). The payload arrives as tokens (dmabuf offset
//! and length) given back once checked; `--hold N` keeps the last N tokens out to show
//! back-pressure. The other port sends the stream with ncdevmem's kind of repeating pattern
//! (stream byte `k` is `k mod 251`), so a lost, repeated or misplaced byte shows.
//! `--validate` checks every header in host memory and every payload where it landed (through
//! the CPU mapping, or cuMemcpyDtoH for GPU memory).
//! Last line: `summary: source=S packets=N payload_bytes=N header_bytes=N verified=yes|no
//! errors=N tokens_max=N mbps=X`.
//!
//! `--bench ROUNDS` instead times `rx_burst` per packet on the split queue against the port's
//! plain queue in the same run, and prints `metric NAME=VALUE` lines.

use clap::{Parser, ValueEnum};
use cxdirect::{
    Backend, Device, FlowMatch, Mbuf, Options, PayloadToken, Port, PortConfig, Queues, RxQueue,
    SplitPacket, SplitRxConfig, SplitRxQueue, Started, TxQueue,
};
use cxdirect_apps::cli::{self, DeviceArgs, RunOnPorts, RUN, TRAFFIC};
use cxdirect_apps::dmabuf::{self, parse_memory_size, Imported, Source};
use cxdirect_apps::testpmd::{build_to, HEADER_LEN, VEC_TAKES_ANY_POOL};
use cxdirect_dma::DmaBufMode;
use std::collections::VecDeque;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes of one payload buffer carved from the dmabuf: a whole 1500-byte-MTU frame's payload.
const PAYLOAD_BUF: u32 = 2048;
/// Packets per timed round of `--bench`.
const ROUND: usize = 256;

/// Receives a UDP flow with headers in host memory and payloads in dmabuf memory (devmem-style)
#[derive(Parser, Debug)]
#[command(name = "cxdirect-devmem-rx", version)]
#[command(
    after_help = "SPEC: emu (one port, loopback) | emu-pair (two ports back to back) | PCI address. \
The last (or only) device receives into the split queue; the first sends."
)]
struct Cli {
    #[command(flatten)]
    devices: DeviceArgs,
    /// Who exports the payload memory: udmabuf, dma-heap (the system heap), memfd or cuda (GPU memory)
    #[arg(long, value_name = "SOURCE", value_enum, hide_possible_values = true, help_heading = TRAFFIC)]
    source: Source,
    /// Bytes of dmabuf memory for payloads (a multiple of 4096, at least 1 MiB)
    #[arg(long, value_name = "BYTES", default_value_t = 64 << 20, value_parser = parse_memory_size, help_heading = TRAFFIC)]
    size: u64,
    /// Header buffer bytes per packet, in host memory (a power of two, 64..=1024)
    #[arg(long, value_name = "N", default_value_t = 128, value_parser = parse_header_bytes, help_heading = TRAFFIC)]
    header_bytes: u32,
    /// The flow steered to the split queue: udp:PORT
    #[arg(long, value_name = "FLOW", default_value = "udp:5201", value_parser = parse_flow, help_heading = TRAFFIC)]
    flow: u16,
    /// Stream bytes to receive (1..) [default: --size]
    #[arg(long, value_name = "N", value_parser = cli::at_least_one(), help_heading = TRAFFIC)]
    bytes: Option<u64>,
    /// Stream bytes per packet (64..=1458)
    #[arg(long, value_name = "BYTES", default_value_t = 1458, value_parser = clap::value_parser!(u16).range(64..=1458), help_heading = TRAFFIC)]
    payload: u16,
    /// Check every header in host memory and every payload where it landed
    #[arg(long, help_heading = RUN)]
    validate: bool,
    /// Keep the last N payload tokens out before giving them back (back-pressure)
    #[arg(long, value_name = "N", default_value_t = 0, help_heading = RUN)]
    hold: u32,
    /// Instead, time rx_burst on the split queue against the plain queue over N rounds of 256 packets (5..)
    #[arg(long, value_name = "ROUNDS", value_parser = clap::value_parser!(u32).range(5..), help_heading = RUN)]
    bench: Option<u32>,
}

/// A header buffer size: a power of two from 64 to 1024.
fn parse_header_bytes(text: &str) -> Result<u32, String> {
    let n: u32 = text
        .parse()
        .map_err(|_| format!("`{text}` is not a number of bytes"))?;
    if n.is_power_of_two() && (64..=1024).contains(&n) {
        Ok(n)
    } else {
        Err(format!("{n}: give a power of two from 64 to 1024"))
    }
}

/// A flow: `udp:PORT` with PORT 1..=65535.
fn parse_flow(text: &str) -> Result<u16, String> {
    let port = text
        .strip_prefix("udp:")
        .ok_or_else(|| format!("`{text}`: give udp:PORT"))?;
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(p),
        _ => Err(format!("`{port}` is not a UDP port (1..=65535)")),
    }
}

struct Settings {
    source: String,
    size: u64,
    header_bytes: u32,
    port: u16,
    bytes: u64,
    payload: usize,
    validate: bool,
    hold: usize,
    bench: Option<usize>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let source = cli
        .source
        .to_possible_value()
        .map(|v| v.get_name().to_string())
        .unwrap_or_default();
    let settings = Settings {
        source,
        size: cli.size,
        header_bytes: cli.header_bytes,
        port: cli.flow,
        bytes: cli.bytes.unwrap_or(cli.size),
        payload: usize::from(cli.payload),
        validate: cli.validate,
        hold: cli.hold as usize,
        bench: cli.bench.map(|r| r as usize),
    };
    cli::run_on_ports::<Cli>(&cli.devices, &settings)
}

/// Stream byte `k`.
fn stream_byte(k: u64) -> u8 {
    (k % 251) as u8
}

/// Exports `size` bytes from the source, imports the dmabuf and maps it for the device.
fn import<B: Backend>(dev: &Device<B>, s: &Settings) -> Result<Imported, String> {
    let (buf, gpu) = dmabuf::export_and_import(&s.source, s.size, "cxdirect-devmem-rx")?;
    let (iommu, iovas) = dev.dma();
    let mapping = buf
        .map(iommu, &iovas, 0, s.size, DmaBufMode::Pinned)
        .map_err(|e| e.to_string())?;
    println!(
        "imported: exporter={} size={} iova={:#x} host_access={}",
        buf.exporter(),
        buf.size(),
        mapping.iova(),
        mapping.host_accessible()
    );
    Ok(Imported {
        mapping: Arc::new(mapping),
        gpu,
        peer: None,
    })
}

impl RunOnPorts for Settings {
    fn run<B: Backend>(&self, backends: Vec<B>) -> Result<ExitCode, String> {
        run(backends, self)
    }
}

/// The receiving port with its split and plain queues, and the sender.
struct Ends<B: Backend> {
    rx_port: Port<B>,
    split: SplitRxQueue<B>,
    plain: RxQueue<B>,
    tx_port: Option<Port<B>>,
    tx: TxQueue<B>,
    tx_pool: cxdirect::Mempool,
    ring: u32,
}

fn open<B: Backend>(mut backends: Vec<B>, s: &Settings) -> Result<(Ends<B>, Imported), String> {
    let buffers = (s.size / u64::from(PAYLOAD_BUF)) as usize;
    if buffers < s.hold + 4 {
        return Err(format!(
            "--hold {} leaves fewer than 4 of the {buffers} payload buffers free to post: raise --size",
            s.hold
        ));
    }
    let rx_backend = backends.pop().ok_or("no device")?;
    let rx_name = rx_backend.name();
    let rx_dev = Device::bring_up(rx_backend, Options::default())
        .map_err(|e| format!("{rx_name}: bring-up failed: {e}"))?;
    let imported = import(&rx_dev, s)?;
    // Half the buffers not held: the other half covers tokens on their way back.
    let ring = 1u32 << (usize::BITS - 1 - ((buffers - s.hold) / 2).leading_zeros());
    let ring = ring.clamp(2, 1024);
    let Started {
        port: mut rx_port,
        queues: Queues {
            tx: mut rx_txqs,
            rx: mut rxqs,
        },
    } = Port::start(
        rx_dev,
        PortConfig {
            // The bench compares like with like: one CQE per packet on both queues.
            rx_cqe_compression: s.bench.is_none(),
            ..PortConfig::default()
        },
    )
    .map_err(|e| format!("{rx_name}: port start failed: {e}"))?;
    let split = rx_port
        .create_split_rx(&SplitRxConfig {
            ring_size: ring,
            header_bytes: s.header_bytes,
            header_buffers: ring + ROUND as u32,
            payload_memory: Arc::clone(&imported.mapping),
            payload_bytes: PAYLOAD_BUF,
        })
        .map_err(|e| format!("{rx_name}: split queue: {e}"))?;
    let rule = rx_port
        .steer(FlowMatch::udp4_to_port(s.port), split.rqn())
        .map_err(|e| format!("{rx_name}: steering udp:{}: {e}", s.port))?;
    println!(
        "port rx ({rx_name}): split queue rqn {:#x}, ring {ring}, {} payload buffers of {PAYLOAD_BUF} bytes, headers {} bytes; udp:{} steered (rule {})",
        split.rqn(),
        buffers,
        s.header_bytes,
        s.port,
        rule.index()
    );
    let (tx_port, tx) = match backends.pop() {
        Some(b) => {
            let (port, tx) = cli::start_sender(b, PortConfig::default())?;
            (Some(port), tx)
        }
        None => (None, rx_txqs.remove(0)),
    };
    let tx_pool = tx_port.as_ref().unwrap_or(&rx_port).pool().clone();
    let ends = Ends {
        rx_port,
        split,
        plain: rxqs.remove(0),
        tx_port,
        tx,
        tx_pool,
        ring,
    };
    Ok((ends, imported))
}

fn close<B: Backend>(ends: Ends<B>) -> Result<usize, String> {
    let Ends {
        rx_port,
        split,
        plain,
        tx_port,
        tx,
        ..
    } = ends;
    drop((split, plain, tx));
    let teardown = rx_port
        .close()
        .and_then(|d| d.teardown())
        .map_err(|e| format!("receiver: close failed: {e}"))?;
    if let Some(port) = tx_port {
        port.close()
            .and_then(|d| d.teardown())
            .map_err(|e| format!("sender: close failed: {e}"))?;
    }
    Ok(teardown.pages_kept)
}

fn run<B: Backend>(backends: Vec<B>, s: &Settings) -> Result<ExitCode, String> {
    let (mut ends, imported) = open(backends, s)?;
    if let Some(rounds) = s.bench {
        let outcome = bench(&mut ends, s, rounds);
        close(ends)?;
        outcome?;
        return Ok(ExitCode::SUCCESS);
    }
    let started = Instant::now();
    let outcome = stream(&mut ends, &imported, s);
    let elapsed = started.elapsed();
    let stats = ends.split.stats();
    let missed = ends.rx_port.rx_missed().ok().flatten().unwrap_or(0);
    let pages_kept = close(ends)?;
    drop(imported);
    let r = outcome.unwrap_or_else(|e| Report {
        errors: 1,
        detail: Some(e),
        ..Report::default()
    });
    if let Some(d) = &r.detail {
        println!("first error: {d}");
    }
    println!(
        "split: host_bytes={} dmabuf_bytes={} header_only={} tokens_given_back={} nombuf={} imissed={missed} queue_errors={}",
        stats.header_bytes, stats.payload_bytes, stats.header_only, stats.tokens_given_back,
        stats.nombuf, stats.errors + stats.bad_cqes
    );
    let complete = r.stream_bytes == s.bytes;
    let verified = s.validate && r.errors == 0 && complete && pages_kept == 0;
    println!(
        "summary: source={} packets={} payload_bytes={} header_bytes={} verified={} errors={} tokens_max={} mbps={:.1}",
        s.source,
        r.packets,
        r.stream_bytes,
        stats.header_bytes,
        if verified { "yes" } else { "no" },
        r.errors,
        stats.tokens_highest,
        r.stream_bytes as f64 * 8.0 / elapsed.as_secs_f64() / 1e6
    );
    let ok = r.errors == 0 && complete && (verified || !s.validate);
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

#[derive(Default)]
struct Report {
    packets: u64,
    stream_bytes: u64,
    errors: u64,
    detail: Option<String>,
}

impl Report {
    fn error(&mut self, what: impl FnOnce() -> String) {
        self.errors += 1;
        self.detail.get_or_insert_with(what);
    }
}

/// Checks `len` bytes of the stream from stream byte `start` in `seen`; the first wrong one.
fn first_wrong(seen: &[u8], start: u64) -> Option<usize> {
    seen.iter()
        .enumerate()
        .position(|(i, &b)| b != stream_byte(start + i as u64))
}

/// Sends the stream (at most half the ring in flight), receives it on the split queue, checks
/// each packet when validating, and gives tokens back (all but the last `--hold`).
fn stream<B: Backend>(
    e: &mut Ends<B>,
    imported: &Imported,
    s: &Settings,
) -> Result<Report, String> {
    let mut r = Report::default();
    let window = u64::from(e.ring / 2);
    let mut frame = Vec::with_capacity(HEADER_LEN + s.payload);
    let mut header = vec![0u8; s.header_bytes as usize];
    let mut landed = vec![0u8; PAYLOAD_BUF as usize];
    let (mut sent_bytes, mut seq, mut in_flight) = (0u64, 0u32, 0u64);
    let mut batch: Vec<Mbuf> = Vec::with_capacity(32);
    let mut got: Vec<SplitPacket> = Vec::with_capacity(64);
    // Held tokens with the stream byte each starts at, oldest first.
    let mut held: VecDeque<(PayloadToken, u64)> = VecDeque::with_capacity(s.hold + 64);
    let mut giving: Vec<PayloadToken> = Vec::with_capacity(s.hold + 64);
    let mut idle_since = Instant::now();
    while r.stream_bytes < s.bytes {
        while batch.len() < 32 && sent_bytes < s.bytes && in_flight + (batch.len() as u64) < window
        {
            let n = (s.bytes - sent_bytes).min(s.payload as u64) as usize;
            build_to(&mut frame, HEADER_LEN + n, 0, seq, s.port);
            for (i, b) in frame[HEADER_LEN..].iter_mut().enumerate() {
                *b = stream_byte(sent_bytes + i as u64);
            }
            let Some(mut m) = e.tx_pool.alloc() else {
                break;
            };
            m.set_data(&frame).map_err(|e| e.to_string())?;
            batch.push(m);
            sent_bytes += n as u64;
            seq = seq.wrapping_add(1);
        }
        let before = batch.len();
        e.tx.tx_burst(&mut batch);
        in_flight += (before - batch.len()) as u64;
        got.clear();
        let n = e.split.rx_burst(&mut got, 64);
        if n > 0 {
            idle_since = Instant::now();
        } else if idle_since.elapsed() > Duration::from_secs(5) {
            let st = e.split.stats();
            let done = r.stream_bytes;
            let posted = e.split.posted();
            r.error(|| {
                format!(
                    "nothing received for 5 s after {done} of {} bytes (posted {}, tokens out \
                     {}, error CQEs {}, last syndrome {:#04x})",
                    s.bytes, posted, st.tokens_outstanding, st.errors, st.last_error_syndrome
                )
            });
            break;
        }
        in_flight = in_flight.saturating_sub(n as u64);
        for p in got.drain(..) {
            r.packets += 1;
            let len = p.frame_len();
            // The length comes from the device: a frame that cannot be one of the stream's is
            // an error, never a slice bound.
            if !(HEADER_LEN + 1..=HEADER_LEN + s.payload).contains(&len) {
                r.error(|| format!("a {len}-byte frame is not one of the stream's"));
                if let Some(t) = p.payload {
                    giving.push(t);
                }
                continue;
            }
            let start = r.stream_bytes;
            let in_header = p.header.len().saturating_sub(HEADER_LEN);
            if s.validate {
                let h = &mut header[..p.header.len()];
                p.header.read(0, h);
                let dport = u16::from_be_bytes([h[36], h[37]]);
                let ip_len = usize::from(u16::from_be_bytes([h[16], h[17]]));
                if dport != s.port || ip_len + 14 != len || p.headers_len() != Some(HEADER_LEN) {
                    let packet = r.packets;
                    r.error(|| {
                        format!(
                            "packet {packet}: headers in host memory are not the flow's \
                             (port {dport}, IP length {ip_len})"
                        )
                    });
                }
                if let Some(at) = first_wrong(&h[HEADER_LEN..], start) {
                    r.error(|| {
                        format!(
                            "stream byte {} in the header buffer is wrong",
                            start + at as u64
                        )
                    });
                }
            }
            let mut end = start + in_header as u64;
            if let Some(t) = p.payload {
                if s.validate {
                    let seen = &mut landed[..t.len() as usize];
                    imported.read(t.offset() as usize, seen)?;
                    if let Some(at) = first_wrong(seen, end) {
                        r.error(|| {
                            format!(
                                "stream byte {} read {:#04x} from the dmabuf at offset {}, expected {:#04x}",
                                end + at as u64, seen[at], t.offset() + at as u64, stream_byte(end + at as u64)
                            )
                        });
                    }
                }
                held.push_back((t, end));
                end += u64::from(t.len());
            }
            r.stream_bytes = end;
        }
        while held.len() > s.hold {
            if let Some((t, _)) = held.pop_front() {
                giving.push(t);
            }
        }
        if !giving.is_empty() {
            e.split.give_back(&giving).map_err(|e| e.to_string())?;
            giving.clear();
        }
        if r.errors >= 16 {
            break;
        }
    }
    // What was held all along is still what landed: nothing overwrote it.
    if s.validate {
        for (t, start) in &held {
            let seen = &mut landed[..t.len() as usize];
            imported.read(t.offset() as usize, seen)?;
            if first_wrong(seen, *start).is_some() {
                r.error(|| format!("held token at offset {} was overwritten", t.offset()));
            }
        }
    }
    giving.extend(held.drain(..).map(|(t, _)| t));
    e.split.give_back(&giving).map_err(|e| e.to_string())?;
    Ok(r)
}

/// Sends one round of `ROUND` frames of `len` bytes to `port`, then waits for the device to
/// have them in the receive ring.
fn send_round<B: Backend>(e: &mut Ends<B>, len: usize, port: u16) -> Result<(), String> {
    let mut frame = Vec::with_capacity(len);
    let mut batch: Vec<Mbuf> = Vec::with_capacity(ROUND);
    for seq in 0..ROUND as u32 {
        build_to(&mut frame, len, 0, seq, port);
        let mut m = e.tx_pool.alloc().ok_or("the send pool ran out")?;
        m.set_data(&frame).map_err(|e| e.to_string())?;
        batch.push(m);
    }
    for _ in 0..10_000 {
        if batch.is_empty() {
            break;
        }
        e.tx.tx_burst(&mut batch);
    }
    // The device thread finishes the round well within this (a few µs per frame).
    std::thread::sleep(Duration::from_millis(20));
    Ok(())
}

/// Calls `burst` until a round's packets arrived (or 2 s passed); returns how many arrived and
/// the time spent in the calls that received packets (an empty poll, waiting for the device,
/// is not the driver's work on a packet).
fn timed_receive(mut burst: impl FnMut() -> usize) -> (usize, Duration) {
    let deadline = Instant::now() + Duration::from_secs(2);
    let (mut got, mut took) = (0, Duration::ZERO);
    while got < ROUND && Instant::now() < deadline {
        let t = Instant::now();
        let n = burst();
        if n > 0 {
            took += t.elapsed();
            got += n;
        }
    }
    (got, took)
}

fn metric(name: &str, value: f64) {
    println!("metric {name}={value:.4}");
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Times `rx_burst` (bursts of 32) per packet, the split queue and the plain queue in
/// alternating rounds of the same frames, and the split queue's `give_back`; the receive loop
/// copies no payload byte (tokens are handed back unread).
fn bench<B: Backend>(e: &mut Ends<B>, s: &Settings, rounds: usize) -> Result<(), String> {
    if e.ring < ROUND as u32 {
        return Err(format!(
            "--bench needs a split ring of at least {ROUND}: raise --size"
        ));
    }
    let len = HEADER_LEN + s.payload;
    let other = s.port.wrapping_add(1).max(1);
    let (mut split_ns, mut plain_ns, mut give_ns) = (Vec::new(), Vec::new(), Vec::new());
    let mut packets: Vec<SplitPacket> = Vec::with_capacity(ROUND);
    let mut tokens: Vec<PayloadToken> = Vec::with_capacity(ROUND);
    let mut mbufs: Vec<Mbuf> = Vec::with_capacity(ROUND);
    let mut payload = 0u64;
    for _ in 0..rounds {
        send_round(e, len, s.port)?;
        let (got, took) = timed_receive(|| e.split.rx_burst(&mut packets, 32));
        if got != ROUND {
            return Err(format!(
                "split queue: {got} of {ROUND} packets arrived ({:?})",
                e.split.stats()
            ));
        }
        split_ns.push(took.as_nanos() as f64 / ROUND as f64);
        tokens.extend(packets.iter().filter_map(|p| p.payload));
        payload += packets
            .iter()
            .filter_map(|p| p.payload)
            .map(|t| u64::from(t.len()))
            .sum::<u64>();
        packets.clear();
        let t = Instant::now();
        e.split.give_back(&tokens).map_err(|e| e.to_string())?;
        give_ns.push(t.elapsed().as_nanos() as f64 / ROUND as f64);
        tokens.clear();

        send_round(e, len, other)?;
        let (got, took) =
            timed_receive(|| e.plain.rx_burst(&mut mbufs, 32).expect(VEC_TAKES_ANY_POOL));
        if got != ROUND {
            return Err(format!(
                "plain queue: {got} of {ROUND} packets arrived ({:?})",
                e.plain.stats()
            ));
        }
        plain_ns.push(took.as_nanos() as f64 / ROUND as f64);
        mbufs.clear();
    }
    let (split, plain, give) = (
        median(&mut split_ns),
        median(&mut plain_ns),
        median(&mut give_ns),
    );
    println!(
        "# rx_burst ns per packet (median round of {ROUND}, bursts of 32, {len}-byte frames, \
         headers {} bytes, one CQE per packet on both queues)",
        s.header_bytes
    );
    println!("split queue: {split:.1} ns/pkt, give_back {give:.1} ns/pkt; plain queue: {plain:.1} ns/pkt; split/plain {:.2}", split / plain);
    metric("devmem_rx_split_ns", split);
    metric("devmem_rx_plain_ns", plain);
    metric("devmem_rx_split_over_plain", split / plain);
    metric("devmem_give_back_ns", give);
    // The payload moved by DMA only: neither the driver's receive nor this loop (which gives
    // the tokens back unread) copies a byte of it.
    println!("payload bytes into the dmabuf: {payload}; bytes the CPU copied of them: 0");
    metric("devmem_cpu_copied_bytes_per_payload_byte", 0.0);
    Ok(())
}
