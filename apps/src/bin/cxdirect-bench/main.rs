//! cxdirect-bench: how close the fast path is to its floor, measured in one run on the emulated
//! pair so every ratio compares figures taken under the same load.
//!
//! - driver-side ns (and cycles at the CPU's reported clock) per packet inside `tx_burst` /
//!   `rx_burst` only, at bursts 1, 8, 32 and 64 and each inline mode (and for TX also with
//!   enhanced multi-packet WQEs: `mpw` by pointer, `mpw-full` inline), with the model on its own
//!   threads; beside a baseline measured in the same run (copying a 64-byte descriptor into a
//!   64-byte-aligned ring slot: the floor for building one WQE) and their ratio;
//! - PCIe transactions per packet from the model's counters;
//! - ping-pong round trips with and without inline + BlueFlame, beside a shared-memory ping-pong
//!   between two threads;
//! - the model's own throughput (inline and threaded execution) and bring-up time.
//!
//! `--rc-write` instead measures the model's RoCE v2 RC transport through its test kit (64-byte
//! RDMA WRITE messages per second, 1 MiB WRITE throughput) beside its Ethernet packet rate.
//!
//! `--devmem-tcp` instead times devmem TCP receive beside plain receive (`devmem_tcp`).
//!
//! `--device-threads` instead compares verified testpmd traffic with four queue pairs per port
//! on the model's pair run by one device thread and by two (`device_threads`).
//!
//! Each figure is also printed as `metric NAME=VALUE`. `--callgrind` instead runs io forwarding
//! between the two ports for a fixed packet count, for `valgrind --tool=callgrind`
//! (see `apps/scripts/callgrind-fwd`).

mod device_threads;
mod devmem_tcp;

use clap::{Parser, ValueEnum};
use cxdirect::{
    Backend, BackendError, Device, InlineMode, Interrupt, Mbuf, Options, PacketBurst, Port,
    PortConfig, Queues, RxQueue, Started, TxQueue,
};
use cxdirect_apps::cli::RUN;
use cxdirect_apps::emulated::EmuBackend;
use cxdirect_apps::poll_rx;
use cxdirect_apps::testpmd::build;
use cxdirect_dma::Iommu;
use cxdirect_emu::counters::CountersSnapshot;
use cxdirect_emu::testkit::rc::{rc_wqe, RcPath, RemoteRights, GID_A, MAC_A};
use cxdirect_emu::testkit::rc_pair::RcPair;
use cxdirect_emu::{Device as Model, EmuConfig, ExecMode};
use cxdirect_hw::doorbell::{UAR_BF_OFFSET, UAR_PAGE_SIZE};
use cxdirect_hw::qp::mtu;
use cxdirect_hw::wqe::{opcode, CtrlSeg};
use std::hint::black_box;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Help heading of the callgrind run's options.
const CALLGRIND: &str = "Callgrind run";

/// Measures how close the fast path is to its floor, on the emulated pair
#[derive(Parser, Debug)]
#[command(name = "cxdirect-bench", version)]
struct Cli {
    /// Timed rounds of 256 packets per configuration (5..)
    #[arg(long, value_name = "N", default_value_t = 200, value_parser = clap::value_parser!(u32).range(5..), help_heading = RUN)]
    rounds: u32,
    /// Ping-pong round trips per variant (100..)
    #[arg(long, value_name = "N", default_value_t = 5000, value_parser = clap::value_parser!(u32).range(100..), help_heading = RUN)]
    iterations: u32,
    /// Measure one path only, for profiling: all, tx, rx or model (the end-to-end runs)
    #[arg(long, value_name = "PATH", value_enum, hide_possible_values = true, default_value_t = Only::All, help_heading = RUN)]
    only: Only,
    /// Instead, the model's RoCE v2 RC speed: 64-byte RDMA WRITE messages per second and 1 MiB
    /// WRITE throughput between two functions (driven by the model's test kit, inline on one
    /// core), beside the model's Ethernet packet rate in the same run
    #[arg(long, conflicts_with = "callgrind", help_heading = RUN)]
    rc_write: bool,
    /// Instead, devmem TCP receive (a TCP stream into a dmabuf through the split queue and the
    /// TCP receiver) beside plain receive of frames of the same size, in the same run: ns per
    /// segment, throughput, CPU bytes copied per payload byte
    #[arg(long, conflicts_with_all = ["callgrind", "rc_write"], help_heading = RUN)]
    devmem_tcp: bool,
    /// Instead, verified testpmd traffic with 4 queue pairs per port on the emulated pair run by
    /// 1 and by 2 device threads, alternately in one run: Mpps of each and their ratio
    #[arg(long, conflicts_with_all = ["callgrind", "rc_write", "devmem_tcp"], help_heading = RUN)]
    device_threads: bool,
    /// Instead, io forwarding between the two ports for --packets, for valgrind --tool=callgrind; prints forwarded=N
    #[arg(long, help_heading = CALLGRIND)]
    callgrind: bool,
    /// Packets to forward with --callgrind (1..)
    #[arg(long, value_name = "N", default_value_t = 200_000, value_parser = clap::value_parser!(u64).range(1..), requires = "callgrind", help_heading = CALLGRIND)]
    packets: u64,
    /// With --callgrind: send runs in enhanced multi-packet WQEs
    #[arg(long, requires = "callgrind", help_heading = CALLGRIND)]
    multi_packet: bool,
    /// With --callgrind: receive into striding receive queues
    #[arg(long, requires = "callgrind", help_heading = CALLGRIND)]
    striding: bool,
    /// With --callgrind: forward through packet bursts (rx_burst, tx_burst with a PacketBurst), not vectors of Mbuf
    #[arg(long, requires = "callgrind", help_heading = CALLGRIND)]
    packet_bursts: bool,
}

/// Which path a run measures.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Only {
    /// Every figure.
    All,
    /// The send path.
    Tx,
    /// The receive path.
    Rx,
    /// The end-to-end model runs.
    Model,
}

impl Only {
    fn name(self) -> &'static str {
        match self {
            Self::All => "all",
            Self::Tx => "tx",
            Self::Rx => "rx",
            Self::Model => "model",
        }
    }
}

/// Packets per timed round: a quarter of the ring, so a round never waits for ring space.
const ROUND: usize = 256;
const RING: u32 = 1024;
const BURSTS: [usize; 4] = [1, 8, 32, 64];
/// A way of sending: what goes inline, and whether runs share enhanced multi-packet WQEs.
struct TxMode {
    inline: InlineMode,
    multi_packet: bool,
    name: &'static str,
}

const MODES: [TxMode; 5] = [
    TxMode {
        inline: InlineMode::None,
        multi_packet: false,
        name: "none",
    },
    TxMode {
        inline: InlineMode::Headers,
        multi_packet: false,
        name: "headers",
    },
    TxMode {
        inline: InlineMode::Full,
        multi_packet: false,
        name: "full",
    },
    TxMode {
        inline: InlineMode::None,
        multi_packet: true,
        name: "mpw",
    },
    TxMode {
        inline: InlineMode::Full,
        multi_packet: true,
        name: "mpw-full",
    },
];

type Side<B = EmuBackend> = Started<B>;

/// A send doorbell or BlueFlame write held back: BAR offset, bytes, whole 64 B or first 8 B.
type HeldDoorbell = (usize, [u8; 64], bool);

/// The emulated backend with send doorbells held back while a TX round is timed and replayed to
/// the model afterwards, so the timed region holds the driver's work only (the model is neither
/// woken nor running then). Holding a doorbell costs a lock and a 64-byte copy, which stays in
/// the figures. Doorbells passed on are timed: with inline execution that is the model's own
/// work (the send, and the peer's receive).
struct Deferred {
    inner: EmuBackend,
    holding: AtomicBool,
    held: Mutex<Vec<HeldDoorbell>>,
    /// Nanoseconds spent in doorbells passed on to the model.
    passed_ns: AtomicU64,
}

impl Deferred {
    fn new(inner: EmuBackend) -> Self {
        Self {
            inner,
            holding: AtomicBool::new(false),
            held: Mutex::new(Vec::with_capacity(2 * ROUND)),
            passed_ns: AtomicU64::new(0),
        }
    }

    /// Runs `write` (a doorbell passed on), adding its time to `passed_ns`.
    fn timed(&self, write: impl FnOnce()) {
        let start = Instant::now();
        write();
        self.passed_ns
            .fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }

    fn holds(&self, offset: usize) -> bool {
        self.holding.load(Ordering::Relaxed) && offset % UAR_PAGE_SIZE >= UAR_BF_OFFSET
    }

    fn hold(&self, offset: usize, bytes: &[u8], whole: bool) {
        let mut copy = [0u8; 64];
        copy[..bytes.len()].copy_from_slice(bytes);
        self.held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((offset, copy, whole));
    }

    /// Stops holding and hands every held doorbell to the model, in order.
    fn release(&self) {
        self.holding.store(false, Ordering::Relaxed);
        let held: Vec<HeldDoorbell> =
            std::mem::take(&mut *self.held.lock().unwrap_or_else(|e| e.into_inner()));
        for (offset, bytes, whole) in &held {
            if *whole {
                self.inner.write_bf(*offset, bytes);
            } else {
                let mut first = [0u8; 8];
                first.copy_from_slice(&bytes[..8]);
                self.inner.write64(*offset, first);
            }
        }
        let mut slot = self.held.lock().unwrap_or_else(|e| e.into_inner());
        *slot = held;
        slot.clear();
    }
}

impl Backend for Deferred {
    fn name(&self) -> String {
        self.inner.name()
    }
    fn bar0_len(&self) -> usize {
        self.inner.bar0_len()
    }
    fn read32(&self, offset: usize) -> [u8; 4] {
        self.inner.read32(offset)
    }
    fn write32(&self, offset: usize, bytes: [u8; 4]) {
        self.inner.write32(offset, bytes)
    }
    fn write64(&self, offset: usize, bytes: [u8; 8]) {
        if self.holds(offset) {
            self.hold(offset, &bytes, false);
        } else {
            self.timed(|| self.inner.write64(offset, bytes))
        }
    }
    fn write_bf(&self, offset: usize, wqe: &[u8; 64]) {
        if self.holds(offset) {
            self.hold(offset, wqe, true);
        } else {
            self.timed(|| self.inner.write_bf(offset, wqe))
        }
    }
    fn config_read(&self, offset: u16, buf: &mut [u8]) -> Result<(), BackendError> {
        self.inner.config_read(offset, buf)
    }
    fn config_write(&self, offset: u16, data: &[u8]) -> Result<(), BackendError> {
        self.inner.config_write(offset, data)
    }
    fn iommu(&self) -> Arc<dyn Iommu> {
        self.inner.iommu()
    }
    fn enable_msix(&self, vectors: u16) -> Result<Vec<Interrupt>, BackendError> {
        self.inner.enable_msix(vectors)
    }
    fn disable_msix(&self) -> Result<(), BackendError> {
        self.inner.disable_msix()
    }
    fn reset(&self) -> Result<(), BackendError> {
        self.inner.reset()
    }
}

fn main() -> ExitCode {
    match real_main() {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("cxdirect-bench: {msg}");
            ExitCode::FAILURE
        }
    }
}

fn real_main() -> Result<(), String> {
    let cli = Cli::parse();
    if cli.callgrind {
        return callgrind(
            cli.packets,
            cli.multi_packet,
            cli.striding,
            cli.packet_bursts,
        );
    }
    let rounds = cli.rounds as usize;
    let iterations = cli.iterations as usize;
    if cli.rc_write {
        return rc_write(rounds);
    }
    if cli.devmem_tcp {
        return devmem_tcp::devmem_tcp(rounds);
    }
    if cli.device_threads {
        return device_threads::device_threads();
    }
    let only = cli.only.name();
    if only == "model" {
        return end_to_end(rounds);
    }
    let mhz = cpu_mhz();
    println!("# cxdirect-bench: emulated pair, model threaded unless noted; CPU clock {mhz:.0} MHz (cycles = ns x clock)");
    let baseline = baseline_ns(rounds);
    println!(
        "baseline: 64-byte descriptor copy into a 64-byte-aligned ring slot: {baseline:.2} ns/pkt"
    );
    metric("baseline_desc_copy_ns", baseline);
    let shared_baseline = baseline_shared_ns(rounds);
    println!(
        "baseline: the same copy into a ring another thread reads after each round (as the model does): {shared_baseline:.2} ns/pkt"
    );
    metric("baseline_shared_ring_copy_ns", shared_baseline);

    println!("\n# TX: ns per packet inside tx_burst (median round of {ROUND} packets), and PCIe transactions per packet");
    println!("# ratio: median over the rounds of a round's ns over the descriptor-copy round timed right after it (base: median of those, ns)");
    println!(
        "{:<8} {:>5} {:>8} {:>8} {:>7} {:>6} | {:>6} {:>6} {:>8} {:>9} {:>8} {:>9} {:>6} {:>6}",
        "inline",
        "burst",
        "ns/pkt",
        "cycles",
        "ratio",
        "base",
        "dbell",
        "bf",
        "wqe_rd",
        "wqe_B",
        "pay_rd",
        "pay_B",
        "cqe",
        "irq"
    );
    let mut tx_ns = std::collections::HashMap::new();
    let modes: &[TxMode] = if only == "rx" { &[] } else { &MODES };
    for mode in modes {
        let name = mode.name;
        for burst in BURSTS {
            let r = tx_run(mode, burst, rounds)?;
            println!(
                "{name:<8} {burst:>5} {:>8.1} {:>8.0} {:>7.2} {:>6.2} | {:>6.4} {:>6.4} {:>8.4} {:>9.1} {:>8.4} {:>9.1} {:>6.4} {:>6.4}",
                r.ns, r.ns * mhz / 1000.0, r.ratio, r.baseline_ns,
                r.per(r.c.doorbells), r.per(r.c.bf_writes), r.per(r.c.wqe_fetch_reads),
                r.per(r.c.wqe_fetch_bytes), r.per(r.c.payload_reads), r.per(r.c.payload_read_bytes),
                r.per(r.c.cqes), r.per(r.c.interrupts)
            );
            let key = format!("tx_{name}_b{burst}");
            metric(&format!("{key}_ns"), r.ns);
            metric(&format!("{key}_ratio"), r.ratio);
            metric(&format!("{key}_baseline_ns"), r.baseline_ns);
            metric(&format!("{key}_doorbells_per_pkt"), r.per(r.c.doorbells));
            metric(
                &format!("{key}_wqe_dma_reads_per_pkt"),
                r.per(r.c.wqe_fetch_reads),
            );
            metric(
                &format!("{key}_payload_dma_reads_per_pkt"),
                r.per(r.c.payload_reads),
            );
            metric(&format!("{key}_cqes_per_pkt"), r.per(r.c.cqes));
            tx_ns.insert((name, burst), r);
        }
    }
    if only == "tx" {
        return Ok(());
    }
    if only == "rx" {
        rx_run(32, rounds * 10, true, false, 64)?;
        return Ok(());
    }
    let h32 = &tx_ns[&("headers", 32)];
    metric("tx_b32_headers_ratio", h32.ratio);
    metric("tx_b32_headers_over_shared_ring", h32.ns / shared_baseline);
    metric("tx_b1_over_b32", tx_ns[&("headers", 1)].ns / h32.ns);
    metric("doorbells_per_pkt_b32", h32.per(h32.c.doorbells));
    metric("tx_cqes_per_pkt_b32", h32.per(h32.c.cqes));
    let m32 = &tx_ns[&("mpw", 32)];
    metric("tx_b32_mpw_ratio", m32.ratio);
    metric("tx_b1_over_b32_mpw", tx_ns[&("mpw", 1)].ns / m32.ns);
    metric("wqe_bytes_per_pkt_b32_mpw", m32.per(m32.c.wqe_fetch_bytes));
    let lone = lone_packets(2000)?;
    println!(
        "lone packets (each sent after the previous one left): BlueFlame writes/pkt {:.4}, WQE DMA reads/pkt {:.4}, doorbells/pkt {:.4}",
        lone.per(lone.c.bf_writes),
        lone.per(lone.c.wqe_fetch_reads),
        lone.per(lone.c.doorbells)
    );
    metric("bf_wqe_dma_reads_per_pkt", lone.per(lone.c.wqe_fetch_reads));
    metric(
        "full_inline_payload_dma_reads_per_pkt",
        tx_ns[&("full", 32)].per(tx_ns[&("full", 32)].c.payload_reads),
    );

    println!(
        "\n# RX: ns per packet inside rx_burst (refill included), and PCIe transactions per packet"
    );
    println!("# ratio and base as for TX");
    println!("# cqe: completions per packet; cqe_ln: 64-byte CQE slots written per packet");
    println!("# (CQE compression: a title and one mini-CQE array per 8 completions)");
    println!(
        "{:>5} {:>8} {:>8} {:>7} {:>6} | {:>8} {:>9} {:>8} {:>6} {:>6} {:>8} {:>6}",
        "burst",
        "ns/pkt",
        "cycles",
        "ratio",
        "base",
        "pay_wr",
        "pay_B",
        "rxwqe_rd",
        "cqe",
        "cqe_ln",
        "dbrec_rd",
        "irq"
    );
    let rx_row = |label: &str, r: &Run| {
        println!(
            "{label:>5} {:>8.1} {:>8.0} {:>7.2} {:>6.2} | {:>8.4} {:>9.1} {:>8.4} {:>6.4} {:>6.4} {:>8.4} {:>6.4}",
            r.ns,
            r.ns * mhz / 1000.0,
            r.ratio,
            r.baseline_ns,
            r.per(r.c.payload_writes),
            r.per(r.c.payload_write_bytes),
            r.per(r.c.rx_wqe_reads),
            r.per(r.c.cqes),
            r.per(r.c.cqe_slot_writes),
            r.per(r.c.dbrec_reads),
            r.per(r.c.interrupts)
        );
    };
    let mut rx = std::collections::HashMap::new();
    for burst in BURSTS {
        let r = rx_run(burst, rounds, true, false, 64)?;
        rx_row(&burst.to_string(), &r);
        metric(&format!("rx_b{burst}_ns"), r.ns);
        metric(&format!("rx_b{burst}_ratio"), r.ratio);
        metric(&format!("rx_b{burst}_baseline_ns"), r.baseline_ns);
        rx.insert(burst, r);
    }
    // The same burst with one plain CQE per packet (PortConfig::rx_cqe_compression off).
    let plain = rx_run(32, rounds, false, false, 64)?;
    println!("with plain CQEs (rx_cqe_compression off):");
    rx_row("32", &plain);
    // Striding receive queues: one WQE (a buffer of 512 strides of 64 bytes) for many packets.
    let striding = rx_run(32, rounds, true, true, 64)?;
    println!("striding receive queues (rx_striding, 512 strides of 64 bytes per WQE):");
    rx_row("32", &striding);
    let r32 = &rx[&32];
    metric("rx_cqe_slots_per_pkt_b32", r32.per(r32.c.cqe_slot_writes));
    metric("rx_b32_plain_cqes_ns", plain.ns);
    metric("rx_b32_plain_cqes_ratio", plain.ratio);
    metric("rx_b32_plain_over_compressed", plain.ns / r32.ns);
    metric("rx_b32_striding_ns", striding.ns);
    metric("rx_b32_striding_ratio", striding.ratio);
    metric("rx_b32_over_striding", r32.ns / striding.ns);
    metric(
        "rx_wqe_reads_per_pkt_b32_striding",
        striding.per(striding.c.rx_wqe_reads),
    );
    metric("rx_b1_over_b32", rx[&1].ns / rx[&32].ns);
    metric("rx_b32_over_shared_ring", rx[&32].ns / shared_baseline);

    println!("\n# ping-pong round trip, 64 bytes ({iterations} iterations each)");
    let shm = shm_pingpong(iterations);
    println!(
        "shared memory between two threads: p50 {} ns, p99 {} ns",
        shm.0, shm.1
    );
    metric("shm_pingpong_p50_ns", shm.0 as f64);
    // The model's device thread either polls (as a real device's engines run all the time) or
    // sleeps until each doorbell wakes it; or the model runs inline in the driver's calls.
    for (exec, poll, exec_name) in [
        (ExecMode::Threaded, POLL_WINDOW, "polling"),
        (ExecMode::Threaded, Duration::ZERO, "threaded"),
        (ExecMode::Inline, Duration::ZERO, "inline"),
    ] {
        for (fast, label) in [
            (true, "inline+blueflame"),
            (false, "no inline, no blueflame"),
        ] {
            let model = EmuConfig {
                exec,
                poll_window: poll,
                ..EmuConfig::default()
            };
            let (p50, p99) = driver_pingpong(model, fast, true, iterations)?;
            println!(
                "driver, model {exec_name}, {label}: p50 {p50} ns, p99 {p99} ns, p50/shm {:.1}",
                p50 as f64 / shm.0.max(1) as f64
            );
            let key = format!(
                "pingpong_{exec_name}_{}",
                if fast { "fast" } else { "plain" }
            );
            metric(&format!("{key}_p50_ns"), p50 as f64);
            metric(&format!("{key}_p99_ns"), p99 as f64);
            if exec_name == "polling" && fast {
                metric("pingpong_p50_ratio", p50 as f64 / shm.0.max(1) as f64);
            }
        }
    }

    // A lone frame's completion is one plain CQE either way; this row shows what keeping
    // compression on costs a round trip, the two measured back to back.
    let polling = EmuConfig {
        exec: ExecMode::Threaded,
        poll_window: POLL_WINDOW,
        ..EmuConfig::default()
    };
    let compressed = driver_pingpong(polling.clone(), true, true, iterations)?;
    let plain = driver_pingpong(polling, true, false, iterations)?;
    println!(
        "driver, model polling, inline+blueflame, CQE compression on then off: p50 {} ns vs {} ns, on/off {:.2}",
        compressed.0,
        plain.0,
        compressed.0 as f64 / plain.0.max(1) as f64
    );
    metric("pingpong_polling_fast_plain_cqes_p50_ns", plain.0 as f64);
    metric(
        "pingpong_compressed_over_plain_cqes",
        compressed.0 as f64 / plain.0.max(1) as f64,
    );

    end_to_end(rounds)?;

    let bringup = bringup_ms()?;
    println!("\nbring-up of an emulated function: {bringup:.2} ms (median of 5; the model's firmware takes 2 ms)");
    metric("bringup_ms", bringup);
    Ok(())
}

fn metric(name: &str, value: f64) {
    println!("metric {name}={value:.4}");
}

/// The CPU clock /proc/cpuinfo reports (MHz), to express ns as cycles.
fn cpu_mhz() -> f64 {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("cpu MHz"))
                .and_then(|l| l.split(':').nth(1))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(1000.0)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    values[values.len() / 2]
}

/// A ring slot as the device reads it: 64 bytes, 64-byte aligned.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Slot([u8; 64]);

/// The floor for building one WQE: copy a 64-byte descriptor into the next ring slot, timed a
/// round of [`ROUND`] copies at a time so that a round can run beside each driver round.
struct Baseline {
    ring: Vec<Slot>,
    desc: Slot,
    pos: usize,
}

impl Baseline {
    fn new() -> Self {
        Self {
            ring: vec![Slot([0; 64]); RING as usize],
            desc: Slot([0x5a; 64]),
            pos: 0,
        }
    }

    /// One round: ns per copy.
    fn round(&mut self) -> f64 {
        self.desc.0[0] = self.desc.0[0].wrapping_add(1);
        let start = Instant::now();
        for i in 0..ROUND {
            let d = black_box(&self.desc);
            self.ring[(self.pos + i) & (RING as usize - 1)] = *d;
        }
        black_box(&self.ring);
        let ns = start.elapsed().as_nanos() as f64 / ROUND as f64;
        self.pos += ROUND;
        ns
    }
}

fn baseline_ns(rounds: usize) -> f64 {
    let mut baseline = Baseline::new();
    median((0..rounds).map(|_| baseline.round()).collect())
}

/// Per-round driver figures beside the baseline rounds timed right after each of them.
#[derive(Default)]
struct Rounds {
    ns: Vec<f64>,
    baseline_ns: Vec<f64>,
}

impl Rounds {
    fn push(&mut self, ns: f64, baseline_ns: f64) {
        self.ns.push(ns);
        self.baseline_ns.push(baseline_ns);
    }

    /// Medians of the driver's ns, of the baseline's ns, and of the per-round ratios.
    fn medians(self) -> (f64, f64, f64) {
        let ratios = self
            .ns
            .iter()
            .zip(&self.baseline_ns)
            .map(|(ns, base)| ns / base.max(f64::MIN_POSITIVE))
            .collect();
        (median(self.ns), median(self.baseline_ns), median(ratios))
    }
}

/// A ring slot written and read as eight 64-bit words, so two threads can share it.
#[repr(C, align(64))]
struct SharedSlot([AtomicU64; 8]);

/// The same copy into a ring that a second thread reads after every round, as the device
/// fetches WQEs: each slot the writer comes back to is then cached on the other core, and
/// taking it back costs a cache-line transfer. This is the floor for any ring the model reads
/// on its own thread; the gap between it and [`baseline_ns`] is coherence traffic, not work.
fn baseline_shared_ns(rounds: usize) -> f64 {
    let ring: Arc<Vec<SharedSlot>> = Arc::new(
        (0..RING)
            .map(|_| SharedSlot(std::array::from_fn(|_| AtomicU64::new(0))))
            .collect(),
    );
    // Rounds handed to the reader (odd: a round to read; even: read, writer's turn).
    let turn = Arc::new(AtomicU64::new(0));
    let reader = {
        let (ring, turn) = (ring.clone(), turn.clone());
        std::thread::spawn(move || {
            let mut sum = 0u64;
            let mut pos = 0usize;
            loop {
                let t = turn.load(Ordering::Acquire);
                if t == u64::MAX {
                    return sum;
                }
                if t % 2 == 0 {
                    std::hint::spin_loop();
                    continue;
                }
                for i in 0..ROUND {
                    let slot = &ring[(pos + i) & (RING as usize - 1)];
                    for word in &slot.0 {
                        sum = sum.wrapping_add(word.load(Ordering::Relaxed));
                    }
                }
                pos += ROUND;
                turn.store(t + 1, Ordering::Release);
            }
        })
    };
    let desc: [u64; 8] = [0x5a5a_5a5a_5a5a_5a5a; 8];
    let mut pos = 0usize;
    let mut per_round = Vec::with_capacity(rounds);
    for r in 0..=rounds {
        let start = Instant::now();
        for i in 0..ROUND {
            let d = black_box(&desc);
            let slot = &ring[(pos + i) & (RING as usize - 1)];
            for (word, value) in slot.0.iter().zip(d) {
                word.store(value ^ r as u64, Ordering::Relaxed);
            }
        }
        let elapsed = start.elapsed();
        pos += ROUND;
        if r > 0 {
            per_round.push(elapsed.as_nanos() as f64 / ROUND as f64);
        }
        turn.fetch_add(1, Ordering::AcqRel);
        while turn.load(Ordering::Acquire) % 2 == 1 {
            std::hint::spin_loop();
        }
    }
    turn.store(u64::MAX, Ordering::Release);
    black_box(reader.join().unwrap_or(0));
    median(per_round)
}

fn options() -> Options {
    Options {
        cmd_timeout: Duration::from_secs(10),
        ..Options::default()
    }
}

fn pair(exec: ExecMode, config: &PortConfig) -> Result<(Side, Side, Model, Model), String> {
    let cfg = EmuConfig {
        exec,
        ..EmuConfig::default()
    };
    pair_with(cfg, config)
}

/// How long a polling model thread keeps looking for work after its last piece of it.
const POLL_WINDOW: Duration = Duration::from_millis(50);

fn pair_with(cfg: EmuConfig, config: &PortConfig) -> Result<(Side, Side, Model, Model), String> {
    let (a, b) = Model::pair(cfg.clone(), cfg);
    let da =
        Device::bring_up(EmuBackend::new(a.clone(), "a"), options()).map_err(|e| e.to_string())?;
    let db =
        Device::bring_up(EmuBackend::new(b.clone(), "b"), options()).map_err(|e| e.to_string())?;
    let pa = Port::start(da, config.clone()).map_err(|e| e.to_string())?;
    let pb = Port::start(db, config.clone()).map_err(|e| e.to_string())?;
    Ok((pa, pb, a, b))
}

/// [`close`] for a port whose queues were taken out of its [`Started`].
fn close_parts<B: Backend>(
    port: Port<B>,
    tx: Vec<TxQueue<B>>,
    rx: Vec<RxQueue<B>>,
) -> Result<(), String> {
    close(Started {
        port,
        queues: Queues { tx, rx },
    })
}

fn close<B: Backend>(side: Side<B>) -> Result<(), String> {
    let Started { port, queues } = side;
    drop(queues);
    port.close()
        .and_then(|d| d.teardown())
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn config(inline: InlineMode) -> PortConfig {
    PortConfig {
        ring_size: RING,
        pool_buffers: 8 * RING,
        inline,
        ..PortConfig::default()
    }
}

fn tx_config(mode: &TxMode) -> PortConfig {
    PortConfig {
        tx_multi_packet: mode.multi_packet,
        ..config(mode.inline)
    }
}

/// Fills `out` with `n` 64-byte frames from `pool`.
fn frames(
    pool: &cxdirect::Mempool,
    out: &mut Vec<Mbuf>,
    n: usize,
    frame: &[u8],
) -> Result<(), String> {
    for _ in 0..n {
        let mut m = pool.alloc().ok_or("pool empty")?;
        m.set_data(frame).map_err(|e| e.to_string())?;
        out.push(m);
    }
    Ok(())
}

/// Waits (untimed) until `model` has counted `target` with `field`.
fn wait_for(model: &Model, target: u64, field: fn(&CountersSnapshot) -> u64) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while field(&model.counters()) < target {
        if Instant::now() > deadline {
            return Err("the model stopped moving packets".into());
        }
        std::thread::yield_now();
    }
    Ok(())
}

struct Run {
    ns: f64,
    /// Median of the baseline rounds timed beside the driver's rounds (ns per copy).
    baseline_ns: f64,
    /// Median over the rounds of the driver's ns over the baseline round timed beside it.
    ratio: f64,
    packets: u64,
    c: CountersSnapshot,
}

impl Run {
    fn per(&self, count: u64) -> f64 {
        count as f64 / self.packets.max(1) as f64
    }
}

fn tx_run(mode: &TxMode, burst: usize, rounds: usize) -> Result<Run, String> {
    let threaded = EmuConfig {
        exec: ExecMode::Threaded,
        ..EmuConfig::default()
    };
    let (a, b) = Model::pair(threaded.clone(), threaded);
    let da = Device::bring_up(Deferred::new(EmuBackend::new(a.clone(), "a")), options())
        .map_err(|e| e.to_string())?;
    let db =
        Device::bring_up(EmuBackend::new(b.clone(), "b"), options()).map_err(|e| e.to_string())?;
    let Started {
        port: mut pa,
        queues: Queues {
            tx: mut txa,
            rx: rxa,
        },
    } = Port::start(da, tx_config(mode)).map_err(|e| e.to_string())?;
    let pb = Port::start(db, tx_config(mode)).map_err(|e| e.to_string())?;
    let mut frame = Vec::new();
    build(&mut frame, 64, 0, 0);
    let mut batches: Vec<Vec<Mbuf>> = (0..ROUND / burst)
        .map(|_| Vec::with_capacity(burst))
        .collect();
    let mut per_round = Rounds::default();
    let mut baseline = Baseline::new();
    let mut sent = 0u64;
    // One warm-up round, then the measured ones.
    let mut before = a.counters();
    for r in 0..=rounds {
        if r == 1 {
            before = a.counters();
        }
        for batch in batches.iter_mut() {
            frames(pa.pool(), batch, burst, &frame)?;
        }
        let backend = pa.device().backend();
        backend.holding.store(true, Ordering::Relaxed);
        let start = Instant::now();
        for batch in batches.iter_mut() {
            while !batch.is_empty() {
                txa[0].tx_burst(batch);
            }
        }
        let elapsed = start.elapsed();
        backend.release();
        sent += (ROUND / burst * burst) as u64;
        let baseline_ns = baseline.round();
        if r > 0 {
            per_round.push(
                elapsed.as_nanos() as f64 / (ROUND / burst * burst) as f64,
                baseline_ns,
            );
        }
        // The next round starts with both models idle.
        wait_for(&a, sent, |c| c.tx_frames)?;
        wait_for(&b, sent, |c| c.rx_frames)?;
    }
    let c = a.counters().since(&before);
    let (ns, baseline_ns, ratio) = per_round.medians();
    let run = Run {
        ns,
        baseline_ns,
        ratio,
        packets: (rounds * (ROUND / burst * burst)) as u64,
        c,
    };
    close_parts(pa, txa, rxa)?;
    close(pb)?;
    Ok(run)
}

/// Packets sent one at a time, each after the model has sent the previous one: the BlueFlame
/// case (headers inline, BlueFlame on).
fn lone_packets(count: u64) -> Result<Run, String> {
    let (
        Started {
            port: pa,
            queues: Queues {
                tx: mut txa,
                rx: rxa,
            },
        },
        pb,
        a,
        _b,
    ) = pair(ExecMode::Threaded, &config(InlineMode::Headers))?;
    let mut frame = Vec::new();
    build(&mut frame, 64, 0, 0);
    let mut batch = Vec::with_capacity(1);
    let before = a.counters();
    let start_frames = before.tx_frames;
    for i in 1..=count {
        frames(pa.pool(), &mut batch, 1, &frame)?;
        while !batch.is_empty() {
            txa[0].tx_burst(&mut batch);
        }
        wait_for(&a, start_frames + i, |c| c.tx_frames)?;
    }
    let run = Run {
        ns: 0.0,
        baseline_ns: 0.0,
        ratio: 0.0,
        packets: count,
        c: a.counters().since(&before),
    };
    close_parts(pa, txa, rxa)?;
    close(pb)?;
    Ok(run)
}

/// Times `rx_burst` at `burst` on frames of `frame_len` bytes (60..=1514).
fn rx_run(
    burst: usize,
    rounds: usize,
    compression: bool,
    striding: bool,
    frame_len: usize,
) -> Result<Run, String> {
    let config = PortConfig {
        rx_cqe_compression: compression,
        rx_striding: striding.then(cxdirect::RxStriding::default),
        ..config(InlineMode::Headers)
    };
    let (
        Started {
            port: pa,
            queues: Queues {
                tx: mut txa,
                rx: rxa,
            },
        },
        Started {
            port: pb,
            queues: Queues {
                tx: txb,
                rx: mut rxb,
            },
        },
        _a,
        b,
    ) = pair(ExecMode::Threaded, &config)?;
    let mut frame = Vec::new();
    build(&mut frame, frame_len, 0, 0);
    let mut batch = Vec::with_capacity(ROUND);
    let mut got: Vec<Mbuf> = Vec::with_capacity(ROUND + cxdirect::ring::MAX_BURST);
    let mut per_round = Rounds::default();
    let mut baseline = Baseline::new();
    let mut delivered = 0u64;
    let mut before = b.counters();
    for r in 0..=rounds {
        if r == 1 {
            before = b.counters();
        }
        frames(pa.pool(), &mut batch, ROUND, &frame)?;
        while !batch.is_empty() {
            txa[0].tx_burst(&mut batch);
        }
        delivered += ROUND as u64;
        wait_for(&b, delivered, |c| c.rx_delivered)?;
        let start = Instant::now();
        while got.len() < ROUND {
            rxb[0]
                .rx_burst(&mut got, burst)
                .expect(cxdirect_apps::testpmd::VEC_TAKES_ANY_POOL);
        }
        let elapsed = start.elapsed();
        let baseline_ns = baseline.round();
        if r > 0 {
            per_round.push(elapsed.as_nanos() as f64 / ROUND as f64, baseline_ns);
        }
        got.clear();
    }
    let c = b.counters().since(&before);
    let (ns, baseline_ns, ratio) = per_round.medians();
    let run = Run {
        ns,
        baseline_ns,
        ratio,
        packets: (rounds * ROUND) as u64,
        c,
    };
    close_parts(pa, txa, rxa)?;
    close_parts(pb, txb, rxb)?;
    Ok(run)
}

/// Wall time per packet sending on port 0 and receiving on port 1 from one thread, and the time
/// per packet spent inside port 0's doorbells (with inline execution: the model's own work, its
/// send and the receive on port 1); medians over the rounds.
/// The end-to-end section: both directions through the model, inline and on its own thread.
fn end_to_end(rounds: usize) -> Result<(), String> {
    println!(
        "\n# end to end (tx on port 0, rx on port 1, one driver thread, burst 32, headers inline)"
    );
    let (inline_e2e, model_ns) = e2e_ns(ExecMode::Inline, rounds)?;
    let (threaded_e2e, _) = e2e_ns(ExecMode::Threaded, rounds)?;
    // With inline execution the model runs inside the driver's doorbells, timed there.
    println!(
        "model inline: {:.3} Mpps end to end, the model's own share {model_ns:.0} ns/pkt = {:.3} Mpps; model threaded: {:.3} Mpps end to end",
        1e3 / inline_e2e,
        1e3 / model_ns,
        1e3 / threaded_e2e
    );
    metric("model_mpps", 1e3 / model_ns);
    metric("e2e_inline_mpps", 1e3 / inline_e2e);
    metric("e2e_threaded_mpps", 1e3 / threaded_e2e);
    Ok(())
}

fn e2e_ns(exec: ExecMode, rounds: usize) -> Result<(f64, f64), String> {
    let cfg = EmuConfig {
        exec,
        ..EmuConfig::default()
    };
    let (a, b) = Model::pair(cfg.clone(), cfg);
    let da = Device::bring_up(Deferred::new(EmuBackend::new(a, "a")), options())
        .map_err(|e| e.to_string())?;
    let db = Device::bring_up(EmuBackend::new(b, "b"), options()).map_err(|e| e.to_string())?;
    let config = config(InlineMode::Headers);
    let Started {
        port: mut pa,
        queues: Queues {
            tx: mut txa,
            rx: rxa,
        },
    } = Port::start(da, config.clone()).map_err(|e| e.to_string())?;
    let Started {
        port: pb,
        queues: Queues {
            tx: txb,
            rx: mut rxb,
        },
    } = Port::start(db, config).map_err(|e| e.to_string())?;
    let mut frame = Vec::new();
    build(&mut frame, 64, 0, 0);
    let mut batch = Vec::with_capacity(32);
    let mut got: Vec<Mbuf> = Vec::with_capacity(ROUND + cxdirect::ring::MAX_BURST);
    let mut per_round = Vec::with_capacity(rounds);
    let mut doorbell_per_round = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let passed_before = pa.device().backend().passed_ns.load(Ordering::Relaxed);
        let start = Instant::now();
        let mut sent = 0;
        let deadline = start + Duration::from_secs(10);
        while got.len() < ROUND {
            if sent < ROUND && batch.is_empty() {
                frames(pa.pool(), &mut batch, 32, &frame)?;
                sent += 32;
            }
            txa[0].tx_burst(&mut batch);
            rxb[0]
                .rx_burst(&mut got, 32)
                .expect(cxdirect_apps::testpmd::VEC_TAKES_ANY_POOL);
            if Instant::now() > deadline {
                return Err("end-to-end run stalled".into());
            }
        }
        per_round.push(start.elapsed().as_nanos() as f64 / ROUND as f64);
        let passed = pa.device().backend().passed_ns.load(Ordering::Relaxed) - passed_before;
        doorbell_per_round.push(passed as f64 / ROUND as f64);
        got.clear();
    }
    close_parts(pa, txa, rxa)?;
    close_parts(pb, txb, rxb)?;
    Ok((median(per_round), median(doorbell_per_round)))
}

fn percentiles(mut v: Vec<u64>) -> (u64, u64) {
    v.sort_unstable();
    let at = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
    (at(0.5), at(0.99))
}

/// Round trips of a counter between this thread and another, through one shared cache line.
fn shm_pingpong(iterations: usize) -> (u64, u64) {
    let ping = Arc::new(AtomicU32::new(0));
    let pong = Arc::new(AtomicU32::new(0));
    let echo = {
        let (ping, pong) = (ping.clone(), pong.clone());
        std::thread::spawn(move || {
            for i in 1..=iterations as u32 {
                while ping.load(Ordering::Acquire) != i {
                    std::hint::spin_loop();
                }
                pong.store(i, Ordering::Release);
            }
        })
    };
    let mut rtts = Vec::with_capacity(iterations);
    for i in 1..=iterations as u32 {
        let start = Instant::now();
        ping.store(i, Ordering::Release);
        while pong.load(Ordering::Acquire) != i {
            std::hint::spin_loop();
        }
        rtts.push(start.elapsed().as_nanos() as u64);
    }
    let _ = echo.join();
    percentiles(rtts)
}

/// Port 0 sends one packet, port 1 echoes it, port 0 times the round trip; `fast`: full inline
/// and BlueFlame; `compression`: receive CQs with CQE compression.
fn driver_pingpong(
    model: EmuConfig,
    fast: bool,
    compression: bool,
    iterations: usize,
) -> Result<(u64, u64), String> {
    let config = PortConfig {
        rx_cqe_compression: compression,
        ring_size: 256,
        pool_buffers: 2048,
        inline: if fast {
            InlineMode::Full
        } else {
            InlineMode::None
        },
        blueflame: fast,
        cqe_every: 1,
        ..PortConfig::default()
    };
    let (
        Started {
            port: pa,
            queues: Queues {
                tx: mut txa,
                rx: mut rxa,
            },
        },
        Started {
            port: pb,
            queues: Queues {
                tx: mut txb,
                rx: mut rxb,
            },
        },
        _a,
        _b,
    ) = pair_with(model, &config)?;
    let mut frame = Vec::new();
    let mut batch: Vec<Mbuf> = Vec::with_capacity(4);
    let mut got: Vec<Mbuf> = Vec::with_capacity(4);
    let mut rtts = Vec::with_capacity(iterations);
    for i in 0..iterations {
        build(&mut frame, 64, 0, i as u32);
        frames(pa.pool(), &mut batch, 1, &frame)?;
        let start = Instant::now();
        let deadline = start + Duration::from_secs(2);
        while !batch.is_empty() {
            txa[0].tx_burst(&mut batch);
        }
        if poll_rx(&mut rxb[0], &mut got, 4, deadline).is_none() {
            return Err(format!("ping-pong iteration {i}: nothing arrived"));
        }
        batch.append(&mut got);
        while !batch.is_empty() {
            txb[0].tx_burst(&mut batch);
        }
        if poll_rx(&mut rxa[0], &mut got, 4, deadline).is_none() {
            return Err(format!("ping-pong iteration {i}: no echo"));
        }
        rtts.push(start.elapsed().as_nanos() as u64);
        got.clear();
    }
    close_parts(pa, txa, rxa)?;
    close_parts(pb, txb, rxb)?;
    Ok(percentiles(rtts))
}

fn bringup_ms() -> Result<f64, String> {
    let mut times = Vec::new();
    for _ in 0..5 {
        let model = Model::new(EmuConfig::default());
        let dev = Device::bring_up(EmuBackend::new(model, "emu"), options())
            .map_err(|e| e.to_string())?;
        times.push(dev.info().bringup.as_secs_f64() * 1e3);
        dev.teardown().map_err(|e| e.to_string())?;
    }
    Ok(median(times))
}

/// io forwarding between the two ports, model executing inline: each port sends back out what
/// it receives (its own pool's buffers), so packets bounce between the two; `packets` forwards,
/// then `forwarded=N`. Run under callgrind with collection toggled on in the driver's burst
/// calls and off inside the model (see `apps/scripts/callgrind-fwd`).
fn callgrind(packets: u64, multi_packet: bool, striding: bool, burst: bool) -> Result<(), String> {
    let config = PortConfig {
        tx_multi_packet: multi_packet,
        rx_striding: striding.then(cxdirect::RxStriding::default),
        ..config(InlineMode::Headers)
    };
    let (
        Started {
            port: pa,
            queues: Queues { tx: txa, rx: rxa },
        },
        Started {
            port: pb,
            queues: Queues { tx: txb, rx: rxb },
        },
        _a,
        _b,
    ) = pair(ExecMode::Inline, &config)?;
    let mut frame = Vec::new();
    build(&mut frame, 64, 0, 0);
    let mut pending: [Vec<Mbuf>; 2] = [Vec::with_capacity(1024), Vec::with_capacity(1024)];
    frames(pa.pool(), &mut pending[0], 256, &frame)?;
    let mut sides = [(txa, rxa), (txb, rxb)];
    let mut forwarded = 0u64;
    let deadline = Instant::now() + Duration::from_secs(1200);
    let mut bursts = [PacketBurst::new(), PacketBurst::new()];
    if burst {
        for m in pending[0].drain(..) {
            bursts[0]
                .push(m)
                .map_err(|_| "a packet did not fit the burst".to_string())?;
        }
    }
    while forwarded < packets {
        for (side, (tx, rx)) in sides.iter_mut().enumerate() {
            if burst {
                tx[0].tx_burst(&mut bursts[side]);
                forwarded += rx[0]
                    .rx_burst(&mut bursts[side], 32)
                    .map_err(|e| e.to_string())? as u64;
            } else {
                tx[0].tx_burst(&mut pending[side]);
                forwarded += rx[0]
                    .rx_burst(&mut pending[side], 32)
                    .expect(cxdirect_apps::testpmd::VEC_TAKES_ANY_POOL)
                    as u64;
            }
        }
        if Instant::now() > deadline {
            return Err("forwarding stalled".into());
        }
    }
    println!("forwarded={forwarded}");
    drop((pending, bursts));
    let [(txa, rxa), (txb, rxb)] = sides;
    close_parts(pa, txa, rxa)?;
    close_parts(pb, txb, rxb)?;
    Ok(())
}

/// 64-byte RDMA WRITE messages timed per run of the RC section.
const RC_SMALL_MESSAGES: u32 = 200_000;
/// Bytes of the big RDMA WRITE messages, and how many are timed.
const RC_BIG_BYTES: u32 = 1 << 20;
const RC_BIG_MESSAGES: u32 = 200;
/// WQEs posted per doorbell for small messages; only the last asks for a completion (RC
/// completes in order).
const RC_BATCH: u16 = 32;
/// Log2 of the send ring (WQEBBs): room for a round.
const RC_LOG_SQ: u8 = 6;

/// The RC section: the model's Ethernet rate (as `--only model` measures it), then RDMA WRITE
/// between two functions, each alone on one core (inline execution).
fn rc_write(rounds: usize) -> Result<(), String> {
    println!("# the model's RoCE v2 RC speed beside its Ethernet rate, one run, inline execution (one core)");
    let (_, model_ns) = e2e_ns(ExecMode::Inline, rounds)?;
    println!(
        "Ethernet: 64-byte packets, tx on port 0, rx on port 1: the model's own share {model_ns:.0} ns/pkt = {:.3} Mpps",
        1e3 / model_ns
    );
    metric("model_mpps", 1e3 / model_ns);
    let small = rc_write_run(64, RC_SMALL_MESSAGES, mtu::MTU_1024)?;
    println!(
        "RC RDMA WRITE 64 B, path MTU 1024: {:.3} M messages/s ({:.0} ns per message, WQE written to completion read; median round of {RC_BATCH}), the model's own share {:.0} ns = {:.3} M messages/s",
        1e3 / small.wall_ns,
        small.wall_ns,
        small.model_ns,
        1e3 / small.model_ns
    );
    metric("rc_write_64_mmsgs", 1e3 / small.wall_ns);
    metric("rc_write_64_model_mmsgs", 1e3 / small.model_ns);
    for (code, bytes) in [(mtu::MTU_1024, 1024), (mtu::MTU_4096, 4096)] {
        let big = rc_write_run(RC_BIG_BYTES, RC_BIG_MESSAGES, code)?;
        let gbps = |ns: f64| f64::from(RC_BIG_BYTES) * 8.0 / ns;
        println!(
            "RC RDMA WRITE 1 MiB, path MTU {bytes}: {:.2} Gbit/s ({:.0} us per message, median of {RC_BIG_MESSAGES}), the model's own share {:.2} Gbit/s",
            gbps(big.wall_ns),
            big.wall_ns / 1e3,
            gbps(big.model_ns)
        );
        metric(&format!("rc_write_1m_mtu{bytes}_gbps"), gbps(big.wall_ns));
        metric(
            &format!("rc_write_1m_mtu{bytes}_model_gbps"),
            gbps(big.model_ns),
        );
    }
    Ok(())
}

/// Nanoseconds per message of an RC run (medians over its rounds): the whole round, and the
/// part spent inside the model (the doorbell and the polls that deliver frames and
/// acknowledgements; not the test kit's writing of WQEs and reading of CQEs).
struct RcRun {
    wall_ns: f64,
    model_ns: f64,
}

/// `messages` RDMA WRITEs of `bytes` each from A to B over a path of MTU `mtu_code`, in rounds
/// of [`RC_BATCH`] WQEs (one for messages over 4 KiB) behind one doorbell, only the last
/// asking for a completion; a round ends when that completion is read. Every completion is
/// checked, and the last message's bytes at B.
fn rc_write_run(bytes: u32, messages: u32, mtu_code: u8) -> Result<RcRun, String> {
    let message_bytes = u64::from(bytes);
    let mem = (2 * message_bytes + (16 << 20)) as usize;
    let path = RcPath {
        mtu_code,
        ..RcPath::to(GID_A, MAC_A, 0)
    };
    let mut p = RcPair::new(EmuConfig::default(), mem, 12, RC_LOG_SQ, 4, path);
    let lkey = p.a.create_mkey(false, false);
    let src = p.a.alloc(message_bytes, 4096);
    let pattern: Vec<u8> = (0..bytes).map(|i| (i * 7 + 1) as u8).collect();
    p.a.write(src, &pattern);
    let dst = p.b.alloc(message_bytes, 4096);
    let pd_b = p.b.pd;
    let rights = RemoteRights {
        write: true,
        ..RemoteRights::default()
    };
    let rkey =
        p.b.create_remote_mkey(pd_b, dst, message_bytes, rights, 0x3c);
    let batch = if bytes > 4096 { 1 } else { RC_BATCH };
    let rounds = messages.div_ceil(u32::from(batch));
    let mut wall = Vec::with_capacity(rounds as usize);
    let mut model = Vec::with_capacity(rounds as usize);
    for round in 0..rounds {
        let start = Instant::now();
        let mut last = [0u8; 64];
        for i in 0..batch {
            let mut w = rc_wqe(
                &p.qp_a.sq,
                opcode::RDMA_WRITE,
                0,
                Some((dst, rkey)),
                None,
                (src, lkey, bytes),
            );
            if i + 1 < batch {
                CtrlSeg::new(&mut w[..16])
                    .map_err(|e| e.to_string())?
                    .set_ce(0);
            }
            p.a.write_wqe(&mut p.qp_a.sq, &w);
            last = w;
        }
        let mut inside = Duration::ZERO;
        let t = Instant::now();
        p.a.ring(&mut p.qp_a.sq, &last, false);
        inside += t.elapsed();
        let deadline = start + Duration::from_secs(10);
        let cqe = loop {
            let t = Instant::now();
            p.b.dev.poll();
            p.a.dev.poll();
            inside += t.elapsed();
            if let Some(cqe) = p.a.poll_cq(&mut p.cq_a) {
                break cqe;
            }
            if Instant::now() > deadline {
                return Err(format!("RC round {round} of {rounds} stalled"));
            }
        };
        if cqe[63] >> 4 != 0 {
            return Err(format!("RDMA WRITE completed in error: {cqe:02x?}"));
        }
        wall.push(start.elapsed().as_nanos() as f64 / f64::from(batch));
        model.push(inside.as_nanos() as f64 / f64::from(batch));
    }
    if p.b.read(dst, bytes as usize) != pattern {
        return Err("the written bytes differ from the source".into());
    }
    p.teardown();
    Ok(RcRun {
        wall_ns: median(wall),
        model_ns: median(model),
    })
}
