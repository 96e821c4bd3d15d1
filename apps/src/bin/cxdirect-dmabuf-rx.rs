//! cxdirect-dmabuf-rx: receives a UDP stream from the other port straight into memory another
//! device exported as a dmabuf (a udmabuf, the system dma-heap, a memfd, GPU memory through
//! CUDA, or a BAR of another PCI function exported by vfio-pci) and checks the stream's
//! repeating pattern in that memory, like ncdevmem's validation mode: stream byte `k` is
//! `k mod 251`, so a lost, repeated or misplaced packet shows.
//! The receiving port's whole buffer pool is the imported range, registered as one memory key.
//! For a peer's BAR a `peer-cksum: CRC BYTES` line gives the POSIX `cksum` of the whole range as
//! read back through the BAR, to compare with what the device's memory holds elsewhere.
//! Last line: `summary: source=S bytes=N verified=yes|no errors=N mbps=X`.

use clap::Parser;
use cxdirect::backend::vfio::IommuMode;
use cxdirect::{
    Backend, Device, Mbuf, Options, Port, PortConfig, Queues, RxQueue, Started, TxQueue,
};
use cxdirect_apps::cli::{self, DeviceArgs, RunOnPorts, RUN, TRAFFIC};
use cxdirect_apps::dmabuf::{self, parse_memory_size, parse_source, Cksum, Imported, SourceSpec};
use cxdirect_apps::testpmd::{build_to, HEADER_LEN};
use cxdirect_dma::DmaBufMode;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Buffer size carved from the dmabuf, in bytes.
const BUF_SIZE: u32 = 2048;
/// UDP destination port of the stream.
const STREAM_PORT: u16 = 5201;

/// Receives a UDP stream straight into dmabuf memory and checks its pattern where it landed
#[derive(Parser, Debug)]
#[command(name = "cxdirect-dmabuf-rx", version)]
#[command(
    after_help = "SPEC: emu (one port, loopback) | emu-pair (two ports back to back) | PCI address. \
The last (or only) device receives into the dmabuf; the first sends."
)]
struct Cli {
    #[command(flatten)]
    devices: DeviceArgs,
    /// Who exports the memory: udmabuf, dma-heap (the system heap), memfd, cuda (GPU memory) or vfio-bar:BDF,bar=N (a BAR of another PCI function bound to vfio-pci, peer to peer)
    #[arg(long, value_name = "SOURCE", value_parser = parse_source, help_heading = TRAFFIC)]
    source: SourceSpec,
    /// Bytes of dmabuf memory, the receive pool (a multiple of 4096, at least 1 MiB)
    #[arg(long, value_name = "BYTES", default_value_t = 64 << 20, value_parser = parse_memory_size, help_heading = TRAFFIC)]
    size: u64,
    /// Bytes of stream to receive (1..) [default: --size]
    #[arg(long, value_name = "N", value_parser = cli::at_least_one(), help_heading = TRAFFIC)]
    bytes: Option<u64>,
    /// Stream bytes per packet (64..=1458)
    #[arg(long, value_name = "BYTES", default_value_t = 1458, value_parser = clap::value_parser!(u16).range(64..=1458), help_heading = TRAFFIC)]
    payload: u16,
    /// Check the stream's pattern in the memory it landed in
    #[arg(long, help_heading = RUN)]
    verify: bool,
}

struct Settings {
    source: String,
    spec: SourceSpec,
    iommu_mode: IommuMode,
    size: u64,
    bytes: u64,
    payload: usize,
    verify: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let iommu_mode = cli
        .devices
        .iommu_mode
        .as_str()
        .parse()
        .unwrap_or(IommuMode::Auto);
    let settings = Settings {
        source: cli.source.name(),
        spec: cli.source.clone(),
        iommu_mode,
        size: cli.size,
        bytes: cli.bytes.unwrap_or(cli.size),
        payload: usize::from(cli.payload),
        verify: cli.verify,
    };
    cli::run_on_ports::<Cli>(&cli.devices, &settings)
}

/// Stream byte `k`.
fn stream_byte(k: u64) -> u8 {
    (k % 251) as u8
}

/// Exports `size` bytes from the source, imports the dmabuf and maps it for the device.
fn import<B: Backend>(dev: &Device<B>, s: &Settings) -> Result<Imported, String> {
    let (buf, gpu, peer) = match &s.spec {
        SourceSpec::VfioBar { bdf, bar } => {
            let (buf, peer) = dmabuf::export_and_import_peer(bdf, *bar, s.size, s.iommu_mode)?;
            (buf, None, Some(peer))
        }
        SourceSpec::Exporter(_) => {
            let (buf, gpu) = dmabuf::export_and_import(&s.source, s.size, "cxdirect-dmabuf-rx")?;
            (buf, gpu, None)
        }
    };
    println!(
        "imported: exporter={} size={} kind={:?}",
        buf.exporter(),
        buf.size(),
        buf.kind()
    );
    let (iommu, iovas) = dev.dma();
    let mapping = buf
        .map(iommu, &iovas, 0, s.size, DmaBufMode::Pinned)
        .map_err(|e| e.to_string())?;
    let pages = mapping.pages();
    println!(
        "mapped: iova={:#x} pages={} attached_by={} host_access={}",
        mapping.iova(),
        pages.iovas.len(),
        mapping.attached_by(),
        mapping.host_accessible()
    );
    Ok(Imported {
        mapping: Arc::new(mapping),
        gpu,
        peer,
    })
}

impl RunOnPorts for Settings {
    fn run<B: Backend>(&self, backends: Vec<B>) -> Result<ExitCode, String> {
        run(backends, self)
    }
}

fn run<B: Backend>(mut backends: Vec<B>, s: &Settings) -> Result<ExitCode, String> {
    let rx_backend = backends.pop().ok_or("no device")?;
    let rx_name = rx_backend.name();
    let rx_dev = Device::bring_up(rx_backend, Options::default())
        .map_err(|e| format!("{rx_name}: bring-up failed: {e}"))?;
    let imported = import(&rx_dev, s)?;
    let buffers = (s.size / u64::from(BUF_SIZE)) as u32;
    // The largest power of two the pool holds twice over, as the port requires.
    let ring_size = (1u32 << (31 - (buffers / 2).max(1).leading_zeros())).clamp(64, 4096);
    let rx_config = PortConfig {
        ring_size,
        buf_size: BUF_SIZE,
        pool_memory: Some(imported.mapping.clone()),
        ..PortConfig::default()
    };
    let Started {
        port: mut rx_port,
        queues: Queues {
            tx: mut rx_txqs,
            rx: mut rxqs,
        },
    } = Port::start(rx_dev, rx_config).map_err(|e| format!("{rx_name}: port start failed: {e}"))?;
    println!(
        "port rx ({rx_name}): pool of {} buffers in the dmabuf, key {:#x}, ring {ring_size}",
        rx_port.pool().capacity(),
        rx_port.pool().lkey()
    );
    let tx_side = match backends.pop() {
        Some(b) => {
            let config = PortConfig {
                ring_size: 1024,
                pool_buffers: 4096,
                ..PortConfig::default()
            };
            Some(cli::start_sender(b, config)?)
        }
        None => None,
    };
    let (tx_port, tx_pool, mut tx) = match tx_side {
        Some((port, tx)) => {
            let pool = port.pool().clone();
            (Some(port), pool, tx)
        }
        None => (None, rx_port.pool().clone(), rx_txqs.remove(0)),
    };
    let mut rx = rxqs.remove(0);
    let window = u64::from(ring_size / 2);
    let started = Instant::now();
    let outcome = stream(&mut tx, &tx_pool, &mut rx, &imported, s, window);
    let elapsed = started.elapsed();
    let stats = rx_port.stats().map_err(|e| format!("port stats: {e}"))?;
    drop((tx, rx));
    let (received, errors, detail) = match outcome {
        Ok(r) => (r.bytes, r.errors, r.detail),
        Err(e) => (0, 1, Some(e)),
    };
    if let Some(d) = &detail {
        println!("first error: {d}");
    }
    println!(
        "rx: packets={} imissed={} queue_errors={}",
        stats.ipackets, stats.imissed, stats.ierrors
    );
    let rx_dev = rx_port
        .close()
        .map_err(|e| format!("{rx_name}: close failed: {e}"))?;
    let teardown = rx_dev
        .teardown()
        .map_err(|e| format!("{rx_name}: teardown failed: {e}"))?;
    if let Some(port) = tx_port {
        port.close()
            .and_then(|d| d.teardown())
            .map_err(|e| format!("sender: close failed: {e}"))?;
    }
    if imported.peer.is_some() {
        let (crc, len) = range_cksum(&imported, s.size)?;
        println!("peer-cksum: {crc} {len}");
    }
    drop(imported);
    let verified = s.verify && errors == 0 && received == s.bytes && teardown.pages_kept == 0;
    println!(
        "summary: source={} bytes={received} verified={} errors={errors} mbps={:.1}",
        s.source,
        if verified { "yes" } else { "no" },
        received as f64 * 8.0 / elapsed.as_secs_f64() / 1e6
    );
    let ok = errors == 0 && received == s.bytes && (verified || !s.verify);
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

struct StreamReport {
    bytes: u64,
    errors: u64,
    detail: Option<String>,
}

/// Sends the stream (at most `window` packets in flight) and checks each packet where it
/// landed in the imported memory.
fn stream<B: Backend>(
    tx: &mut TxQueue<B>,
    tx_pool: &cxdirect::Mempool,
    rx: &mut RxQueue<B>,
    imported: &Imported,
    s: &Settings,
    window: u64,
) -> Result<StreamReport, String> {
    let mut report = StreamReport {
        bytes: 0,
        errors: 0,
        detail: None,
    };
    let mut frame = Vec::with_capacity(HEADER_LEN + s.payload);
    let mut landed = vec![0u8; HEADER_LEN + s.payload];
    let (mut sent_bytes, mut seq, mut in_flight) = (0u64, 0u32, 0u64);
    let mut batch: Vec<Mbuf> = Vec::with_capacity(32);
    let mut got: Vec<Mbuf> = Vec::with_capacity(64);
    let mut idle_since = Instant::now();
    while report.bytes < s.bytes {
        while batch.len() < 32 && sent_bytes < s.bytes && in_flight + (batch.len() as u64) < window
        {
            let n = (s.bytes - sent_bytes).min(s.payload as u64) as usize;
            build_to(&mut frame, HEADER_LEN + n, 0, seq, STREAM_PORT);
            for (i, b) in frame[HEADER_LEN..].iter_mut().enumerate() {
                *b = stream_byte(sent_bytes + i as u64);
            }
            let Some(mut m) = tx_pool.alloc() else { break };
            m.set_data(&frame).map_err(|e| e.to_string())?;
            batch.push(m);
            sent_bytes += n as u64;
            seq = seq.wrapping_add(1);
        }
        let before = batch.len();
        tx.tx_burst(&mut batch);
        in_flight += (before - batch.len()) as u64;
        got.clear();
        let n = rx
            .rx_burst(&mut got, 64)
            .expect(cxdirect_apps::testpmd::VEC_TAKES_ANY_POOL);
        if n > 0 {
            idle_since = Instant::now();
        } else if idle_since.elapsed() > Duration::from_secs(5) {
            report.errors += 1;
            report.detail.get_or_insert_with(|| {
                format!(
                    "nothing received for 5 s after {} of {} bytes (receive error CQEs {}, last \
                     syndrome {:#04x})",
                    report.bytes,
                    s.bytes,
                    rx.stats().errors,
                    rx.stats().last_error_syndrome
                )
            });
            break;
        }
        in_flight = in_flight.saturating_sub(n as u64);
        for m in got.drain(..) {
            let len = m.len();
            // The length comes from the device: a frame that cannot be one of the stream's is
            // an error, never a slice bound.
            if !(HEADER_LEN + 1..=HEADER_LEN + s.payload).contains(&len) {
                report.errors += 1;
                report.detail.get_or_insert_with(|| {
                    format!("a {len}-byte frame is not one of the stream's")
                });
                continue;
            }
            let payload = len - HEADER_LEN;
            if s.verify {
                let seen = &mut landed[..len];
                imported.read(m.memory_offset(), seen)?;
                let start = report.bytes;
                let bad = seen[HEADER_LEN..]
                    .iter()
                    .enumerate()
                    .position(|(i, &b)| b != stream_byte(start + i as u64));
                if let Some(at) = bad {
                    report.errors += 1;
                    report.detail.get_or_insert_with(|| {
                        format!(
                            "stream byte {} read {:#04x} from the dmabuf, expected {:#04x}",
                            start + at as u64,
                            seen[HEADER_LEN + at],
                            stream_byte(start + at as u64)
                        )
                    });
                }
            }
            report.bytes += payload as u64;
        }
        if report.errors >= 16 {
            break;
        }
    }
    Ok(report)
}

/// POSIX `cksum` of the first `size` bytes of the imported range, read back by the CPU.
fn range_cksum(imported: &Imported, size: u64) -> Result<(u32, u64), String> {
    let mut sum = Cksum::new();
    let mut chunk = vec![0u8; 1 << 20];
    let mut at = 0u64;
    while at < size {
        let n = (size - at).min(chunk.len() as u64) as usize;
        imported.read(at as usize, &mut chunk[..n])?;
        sum.update(&chunk[..n]);
        at += n as u64;
    }
    Ok(sum.finish())
}
