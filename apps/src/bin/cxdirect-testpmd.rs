//! cxdirect-testpmd: moves packets through one or two ports in a DPDK testpmd-like way and
//! reports port statistics periodically and at exit. With `--verify` every generated packet
//! carries a flow id, a sequence number and a pattern, and every received packet is checked.
//! Flow `f` is sent on send queue `f % txq`, so a flow leaves in order, as DPDK's testpmd pins a
//! flow to a queue; the checker still takes a packet that arrives late (within a window of
//! sequence numbers) as filling its gap, and counts as a duplicate only one that arrives twice.
//! Last line: `summary: tx=N rx=N lost=N corrupt=N duplicate=N oerrors=N imissed=N mpps=X`.

use clap::error::ErrorKind;
use clap::{Parser, ValueEnum};
use cxdirect::{Backend, Device, InlineMode, Mbuf, Options, Port, PortConfig, PortStats, Started};
use cxdirect_apps::cli::{self, BurstArgs, DeviceArgs, RunOnPorts, QUEUES, RUN, TRAFFIC};
use cxdirect_apps::testpmd::{self, ForwardMode, Generator, Verifier};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Moves packets through one or two ports as DPDK's testpmd does, and checks them with --verify
#[derive(Parser, Debug)]
#[command(name = "cxdirect-testpmd", version)]
#[command(
    after_help = "SPEC: emu (one port, loopback) | emu-pair (two ports back to back) | PCI address. \
The first port sends, the last (or only) one receives."
)]
struct Cli {
    #[command(flatten)]
    devices: DeviceArgs,
    #[command(flatten)]
    burst: BurstArgs,
    /// What the ports do: io, txonly, rxonly, macswap (forward with MACs swapped) or flowgen (many flows)
    #[arg(long, value_name = "MODE", value_enum, hide_possible_values = true, default_value_t = ForwardMode::TxOnly, help_heading = TRAFFIC)]
    forward_mode: ForwardMode,
    /// Frame sizes in bytes, no FCS, sent in turn (each 52..=9018)
    #[arg(long, value_name = "L[,L...]", value_delimiter = ',', default_value = "64", value_parser = cli::frame_size(cli::MAX_JUMBO_FRAME), help_heading = TRAFFIC)]
    txpkts: Vec<u16>,
    /// Flows (UDP source ports) the generator cycles through (1..=65535) [default: 64 with flowgen, else one per send queue]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..), help_heading = TRAFFIC)]
    flows: Option<u16>,
    /// What a send WQE carries inline: none, headers or full (the whole packet within --inline-max)
    #[arg(long, value_name = "MODE", value_enum, hide_possible_values = true, default_value_t = Inline::Headers, help_heading = TRAFFIC)]
    inline_mode: Inline,
    /// Largest packet sent inline with --inline-mode full, in bytes (18..=900)
    #[arg(long, value_name = "BYTES", default_value_t = 256, value_parser = clap::value_parser!(u16).range(18..=900), help_heading = TRAFFIC)]
    inline_max: u16,
    /// Send runs of packets in enhanced multi-packet WQEs
    #[arg(long, help_heading = TRAFFIC)]
    tx_multi_packet: bool,
    /// Generate TCP/IPv4 packets of the --txpkts sizes (which may exceed the 1500-byte MTU) and send them with TCP segmentation offload at this MSS (1..=1460); the receiver checks every segment
    #[arg(long, value_name = "MSS", value_parser = clap::value_parser!(u16).range(1..=1460), help_heading = TRAFFIC)]
    tso: Option<u16>,
    /// Receive queues per port (1..=64)
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = cli::queue_count(), help_heading = QUEUES)]
    rxq: u16,
    /// Send queues per port; flow f is sent on queue f % N (1..=64)
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = cli::queue_count(), help_heading = QUEUES)]
    txq: u16,
    /// Entries per queue ring (a power of two, 64..=32768)
    #[arg(long, value_name = "N", default_value = "1024", value_parser = cli::parse_ring, help_heading = QUEUES)]
    ring: u32,
    /// Receive into striding (multi-packet) receive queues
    #[arg(long, help_heading = QUEUES)]
    rx_striding: bool,
    /// How long to run, in seconds (above 0) [default: 5 unless --packets]
    #[arg(long, value_name = "S", value_parser = cli::parse_seconds, conflicts_with = "packets", help_heading = RUN)]
    duration: Option<Duration>,
    /// Packets to send (txonly, flowgen) or receive (other modes), then stop (1..)
    #[arg(long, value_name = "N", value_parser = cli::at_least_one(), help_heading = RUN)]
    packets: Option<u64>,
    /// Print port statistics every S seconds (0: only at the end)
    #[arg(long, value_name = "S", default_value_t = 0.0, value_parser = parse_period, help_heading = RUN)]
    stats_period: f64,
    /// Check every received packet's content, and each flow for duplicates and gaps; exit 1 on a fault
    #[arg(long, help_heading = RUN)]
    verify: bool,
}

/// What a send WQE carries inline.
#[derive(ValueEnum, Clone, Copy, Debug)]
enum Inline {
    /// Nothing: the device reads the whole packet.
    None,
    /// The headers the device needs.
    Headers,
    /// The whole packet when within --inline-max.
    Full,
}

/// A statistics period: 0 (off) or a positive number of seconds.
fn parse_period(text: &str) -> Result<f64, String> {
    if text.parse::<f64>() == Ok(0.0) {
        return Ok(0.0);
    }
    cli::parse_seconds(text)
        .map(|d| d.as_secs_f64())
        .map_err(|e| format!("{e}, or 0 for none"))
}

struct Settings {
    mode: ForwardMode,
    burst: usize,
    sizes: Vec<usize>,
    inline: InlineMode,
    inline_max: u16,
    multi_packet: bool,
    tso: Option<u16>,
    striding: bool,
    rxq: u16,
    txq: u16,
    ring: u32,
    duration: Option<Duration>,
    packets: Option<u64>,
    stats_period: Option<Duration>,
    verify: bool,
    flows: u16,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let settings = Settings::from(&cli);
    if settings.verify && matches!(settings.mode, ForwardMode::Io | ForwardMode::MacSwap) {
        return cli::usage_error::<Cli>(
            ErrorKind::ArgumentConflict,
            "--verify checks generated traffic: use it with --forward-mode txonly, flowgen or rxonly",
        );
    }
    cli::run_on_ports::<Cli>(&cli.devices, &settings)
}

impl From<&Cli> for Settings {
    fn from(cli: &Cli) -> Self {
        let flowgen = cli.forward_mode == ForwardMode::FlowGen;
        Settings {
            mode: cli.forward_mode,
            burst: cli.burst.packets(),
            sizes: cli.txpkts.iter().map(|&s| usize::from(s)).collect(),
            inline: match cli.inline_mode {
                Inline::None => InlineMode::None,
                Inline::Headers => InlineMode::Headers,
                Inline::Full => InlineMode::Full,
            },
            inline_max: cli.inline_max,
            multi_packet: cli.tx_multi_packet,
            tso: cli.tso,
            striding: cli.rx_striding,
            rxq: cli.rxq,
            txq: cli.txq,
            ring: cli.ring,
            duration: match cli.packets {
                Some(_) => None,
                None => Some(cli.duration.unwrap_or(Duration::from_secs(5))),
            },
            packets: cli.packets,
            stats_period: (cli.stats_period > 0.0)
                .then(|| Duration::from_secs_f64(cli.stats_period)),
            verify: cli.verify,
            flows: cli.flows.unwrap_or(if flowgen { 64 } else { cli.txq }),
        }
    }
}

impl RunOnPorts for Settings {
    fn run<B: Backend>(&self, backends: Vec<B>) -> Result<ExitCode, String> {
        run(backends, self)
    }
}

fn run<B: Backend>(backends: Vec<B>, s: &Settings) -> Result<ExitCode, String> {
    let max_len = *s.sizes.iter().max().unwrap_or(&64);
    // With TSO the packets handed over may exceed the MTU: the device cuts them to it.
    let mtu = if s.tso.is_some() {
        1500
    } else {
        (max_len.saturating_sub(18)).max(1500) as u16
    };
    // A buffer holds a whole packet as handed over.
    let largest = max_len.max(usize::from(mtu) + 18) as u32;
    let buf_size = ((largest + u32::from(cxdirect::mem::HEADROOM)).div_ceil(64) * 64).max(2048);
    let config = PortConfig {
        rx_queues: s.rxq,
        tx_queues: s.txq,
        ring_size: s.ring,
        mtu,
        inline: s.inline,
        inline_max: s.inline_max,
        tx_multi_packet: s.multi_packet,
        tx_tso: s.tso.is_some(),
        // Enough buffers for every queue's ring twice over.
        rx_striding: s.striding.then(|| cxdirect::RxStriding {
            buffers: 16 * u32::from(s.rxq) * cxdirect::RxStriding::default().ring_wqes,
            ..cxdirect::RxStriding::default()
        }),
        pool_buffers: s.ring * 2 * (u32::from(s.rxq) + u32::from(s.txq)) + 8 * s.burst as u32,
        buf_size,
        ..PortConfig::default()
    };
    let options = Options {
        msix_vectors: 1,
        ..Options::default()
    };
    let mut ports: Vec<Started<B>> = Vec::new();
    for b in backends {
        let name = b.name();
        let dev = Device::bring_up(b, options.clone())
            .map_err(|e| format!("{name}: bring-up failed: {e}"))?;
        let Started { port, queues } = Port::start(dev, config.clone())
            .map_err(|e| format!("{name}: port start failed: {e}"))?;
        println!(
            "port {} ({name}): {} rx queues, {} tx queues, ring {}, MTU {mtu}",
            ports.len(),
            s.rxq,
            s.txq,
            s.ring
        );
        ports.push(Started { port, queues });
    }
    let mut generator = Generator::new(s.sizes.clone(), s.flows)?;
    if let Some(mss) = s.tso {
        generator = generator.with_tso(mss)?;
    }
    // Frames a burst of generated packets can put on the wire (segments, with TSO).
    let burst_frames = s.burst as u64
        * s.sizes
            .iter()
            .map(|&len| s.tso.map_or(1, |mss| testpmd::segments(len, mss)))
            .max()
            .unwrap_or(1);
    let mut verifier = Verifier::default();
    let tx_port = 0;
    let rx_port = ports.len() - 1;
    let mut received: Vec<Mbuf> = Vec::with_capacity(cxdirect::ring::MAX_BURST);
    // Packets waiting to be sent, per port and send queue: a generated packet on its flow's
    // queue, a forwarded one on the queue numbered as the one it arrived on.
    let mut pending: Vec<Vec<Vec<Mbuf>>> = (0..ports.len())
        .map(|_| {
            (0..s.txq)
                .map(|_| Vec::with_capacity(cxdirect::ring::MAX_BURST * 2))
                .collect()
        })
        .collect();
    let start = Instant::now();
    let mut last_stats = start;
    let mut rx_count = vec![0u64; ports.len()];
    let generating = matches!(s.mode, ForwardMode::TxOnly | ForwardMode::FlowGen);
    let forwarding = matches!(s.mode, ForwardMode::Io | ForwardMode::MacSwap);
    if forwarding {
        // Start the loop with traffic, as testpmd's --tx-first does.
        let pool = ports[tx_port].port.pool().clone();
        testpmd::generate_pinned(
            &mut generator,
            &pool,
            &mut pending[tx_port],
            s.burst,
            s.packets,
        );
    }
    // When the time is up the generator stops and what is in flight is drained.
    let mut stop_generating = false;
    let mut recoveries = 0u64;
    let mut idle_since: Option<Instant> = None;
    loop {
        let now = Instant::now();
        let time_up = s.duration.is_some_and(|d| now.duration_since(start) >= d);
        // Counted in frames on the wire: with TSO a packet arrives as several.
        let all_in = generator.wire_frames() <= rx_count[rx_port];
        match (s.packets, time_up) {
            (Some(n), _)
                if (generating && generator.generated() >= n && all_in)
                    || (!generating && rx_count[rx_port] >= n) =>
            {
                break
            }
            (None, true) if !generating || all_in => break,
            (None, true) => stop_generating = true,
            _ => {}
        }
        let mut progress = false;
        // Both ends are in this process: keep no more packets in flight than the receiving
        // rings hold, so a slower receiver is paced instead of overrun.
        let in_flight = generator.wire_frames().saturating_sub(rx_count[rx_port]);
        // A burst of TCP segments is large and its flows may crowd one queue: count one ring.
        let queues_filled = if s.tso.is_some() { 1 } else { s.rxq };
        let credit = u64::from(s.ring) * u64::from(queues_filled);
        if generating
            && !stop_generating
            && in_flight + burst_frames <= credit
            && s.packets.is_none_or(|n| generator.generated() < n)
        {
            let pool = ports[tx_port].port.pool().clone();
            testpmd::generate_pinned(
                &mut generator,
                &pool,
                &mut pending[tx_port],
                s.burst,
                s.packets,
            );
        }
        for p in 0..ports.len() {
            // Send what is waiting for this port.
            let tx = &mut ports[p].queues.tx;
            progress |= testpmd::send_batches(tx, &mut pending[p]) > 0;
            // A queue stopped by an error completion is recovered before it is used again.
            let Started { port, queues } = &mut ports[p];
            recoveries += testpmd::recover_stopped(port, queues)
                .map_err(|e| format!("queue recovery: {e}"))?
                .len() as u64;
            // Receive, queue by queue.
            let out = if ports.len() == 2 { 1 - p } else { p };
            for q in 0..usize::from(s.rxq) {
                received.clear();
                let got = ports[p].queues.rx[q]
                    .rx_burst(&mut received, s.burst)
                    .expect(testpmd::VEC_TAKES_ANY_POOL);
                if got == 0 {
                    continue;
                }
                progress = true;
                rx_count[p] += got as u64;
                let to = &mut pending[out][q % usize::from(s.txq)];
                for mut m in received.drain(..) {
                    if s.verify && !forwarding {
                        if s.tso.is_some() {
                            verifier.check_segment(&m);
                        } else {
                            verifier.check(&m);
                        }
                    }
                    match s.mode {
                        ForwardMode::Io => to.push(m),
                        ForwardMode::MacSwap => {
                            testpmd::mac_swap(&mut m);
                            to.push(m);
                        }
                        _ => drop(m),
                    }
                }
            }
        }
        if progress {
            idle_since = None;
        } else {
            let since = *idle_since.get_or_insert(now);
            // Nothing moves any more: whatever is missing is lost.
            let finished_sending =
                stop_generating || s.packets.is_some_and(|n| generator.generated() >= n);
            if (finished_sending || !generating) && since.elapsed() > Duration::from_millis(500) {
                break;
            }
            std::thread::yield_now();
        }
        if let Some(period) = s.stats_period {
            if now.duration_since(last_stats) >= period {
                last_stats = now;
                print_stats(&mut ports, start.elapsed());
            }
        }
    }
    let elapsed = start.elapsed();
    let mut totals = PortStats::default();
    for st in print_stats(&mut ports, elapsed) {
        totals.opackets += st.opackets;
        totals.oerrors += st.oerrors;
        totals.ipackets += st.ipackets;
        totals.ierrors += st.ierrors;
        totals.rx_nombuf += st.rx_nombuf;
        totals.imissed += st.imissed;
    }
    let imissed = totals.imissed;
    drop(pending);
    for Started { port, queues } in ports {
        drop(queues);
        let dev = port
            .close()
            .map_err(|e| format!("port close failed: {e}"))?;
        dev.teardown()
            .map_err(|e| format!("teardown failed: {e}"))?;
    }
    let rx = rx_count[rx_port];
    let sent = if generating {
        generator.wire_frames()
    } else {
        totals.opackets
    };
    let lost = if generating {
        sent.saturating_sub(rx)
    } else {
        0
    };
    let mpps = rx as f64 / elapsed.as_secs_f64() / 1e6;
    if s.verify && !forwarding {
        println!(
            "verify: good {} corrupt {} duplicate {} gaps {} reordered {} out-of-window {}",
            verifier.good,
            verifier.corrupt,
            verifier.duplicate,
            verifier.gaps,
            verifier.reordered,
            verifier.out_of_window
        );
    }
    if let (Some(mss), true) = (s.tso, generating) {
        println!(
            "tso: {} packets handed over as {} segments of MSS {mss} (tx and rx below count segments)",
            generator.generated(),
            generator.wire_frames()
        );
    }
    if recoveries > 0 {
        println!(
            "recovered queues: {recoveries} (each after an error completion; its buffers flushed)"
        );
    }
    println!(
        "summary: tx={sent} rx={rx} lost={lost} corrupt={} duplicate={} oerrors={} imissed={imissed} mpps={mpps:.3}",
        verifier.corrupt, verifier.duplicate, totals.oerrors
    );
    let clean = lost == 0
        && verifier.corrupt == 0
        && verifier.duplicate == 0
        && verifier.out_of_window == 0;
    Ok(if !s.verify || clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Prints each port's statistics and returns them.
fn print_stats<B: Backend>(ports: &mut [Started<B>], elapsed: Duration) -> Vec<PortStats> {
    let mut all = Vec::with_capacity(ports.len());
    for (i, Started { port, .. }) in ports.iter_mut().enumerate() {
        let st = port.stats().unwrap_or_else(|e| {
            eprintln!("port {i}: reading the device's drop counter failed: {e}");
            PortStats::from_xstats(&port.xstats())
        });
        let x = port.xstats();
        let db: u64 = x.tx.iter().map(|q| q.doorbells).sum();
        let bf: u64 = x.tx.iter().map(|q| q.blueflame).sum();
        let mpw: u64 = x.tx.iter().map(|q| q.multi_packet_wqes).sum();
        println!(
            "port {i} [{:.1}s]: rx {} pkts {} bytes (imissed {}, ierrors {}, rx_nombuf {}) | tx {} pkts {} bytes (oerrors {}, doorbells {db}, blueflame {bf}, multi-packet WQEs {mpw})",
            elapsed.as_secs_f64(),
            st.ipackets, st.ibytes, st.imissed, st.ierrors, st.rx_nombuf,
            st.opackets, st.obytes, st.oerrors,
        );
        all.push(st);
    }
    all
}
