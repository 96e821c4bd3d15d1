//! cxdirect-testpmd: moves packets through one or two ports in a DPDK testpmd-like way and
//! reports port statistics periodically and at exit. With `--verify` every generated packet
//! carries a flow id, a sequence number and a pattern, and every received packet is checked.
//! Last line: `summary: tx=N rx=N lost=N corrupt=N duplicate=N oerrors=N imissed=N mpps=X`.

use cxdirect::{Backend, Device, InlineMode, Mbuf, Options, Port, PortConfig, PortStats, Started};
use cxdirect_apps::args::Args;
use cxdirect_apps::cli::{Cli, RunOnPorts};
use cxdirect_apps::testpmd::{self, ForwardMode, Generator, Verifier};
use std::process::ExitCode;
use std::time::{Duration, Instant};

const USAGE: &str = "usage: cxdirect-testpmd --device SPEC [--device SPEC] [--forward-mode io|txonly|rxonly|macswap|flowgen]
       [--burst N] [--txpkts L[,L...]] [--inline-mode none|headers|full] [--inline-max N]
       [--tx-multi-packet] [--rx-striding]
       [--rxq N] [--txq N] [--ring N] [--duration S | --packets N] [--stats-period S] [--verify]
       [--flows N] [--emu-exec inline|threaded|polling] [--iommu-mode auto|type1|iommufd|noiommu]
  SPEC: emu (one port, loopback) | emu-pair (two ports back to back) | PCI address";

struct Settings {
    mode: ForwardMode,
    burst: usize,
    sizes: Vec<usize>,
    inline: InlineMode,
    inline_max: u16,
    multi_packet: bool,
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

const CLI: Cli = Cli {
    name: "cxdirect-testpmd",
    usage: USAGE,
};

fn main() -> ExitCode {
    let flags = ["verify", "help", "tx-multi-packet", "rx-striding"];
    let known = [
        "device",
        "forward-mode",
        "burst",
        "txpkts",
        "inline-mode",
        "inline-max",
        "rxq",
        "txq",
        "ring",
        "duration",
        "packets",
        "stats-period",
        "flows",
        "emu-exec",
        "iommu-mode",
    ];
    let args = match CLI.parse(&flags, &known) {
        Ok(args) => args,
        Err(code) => return code,
    };
    match settings(&args) {
        Ok(settings) => CLI.run_on_ports(&args, &settings),
        Err(e) => CLI.usage_error(&e),
    }
}

fn settings(args: &Args) -> Result<Settings, String> {
    let sizes: Vec<usize> = match args.get("txpkts") {
        None => vec![64],
        Some(list) => list
            .split(',')
            .map(|s| {
                s.trim()
                    .parse::<usize>()
                    .map_err(|_| format!("--txpkts: `{s}` is not a size"))
            })
            .collect::<Result<_, _>>()?,
    };
    let max = *sizes.iter().max().unwrap_or(&64);
    if max > 9018 {
        return Err(format!(
            "--txpkts: {max} bytes exceeds the largest frame (9018)"
        ));
    }
    let sizes = sizes.into_iter().map(|s| s.max(testpmd::MIN_LEN)).collect();
    let inline = match args.get("inline-mode").unwrap_or("headers") {
        "none" => InlineMode::None,
        "headers" => InlineMode::Headers,
        "full" => InlineMode::Full,
        other => {
            return Err(format!(
                "--inline-mode `{other}`: use none, headers or full"
            ))
        }
    };
    let duration = args
        .get("duration")
        .map(|v| v.parse::<f64>().map_err(|_| format!("--duration `{v}`")))
        .transpose()?;
    let packets = args
        .get("packets")
        .map(|v| v.parse::<u64>().map_err(|_| format!("--packets `{v}`")))
        .transpose()?;
    if duration.is_some() && packets.is_some() {
        return Err("give --duration or --packets, not both".into());
    }
    let stats = args
        .get("stats-period")
        .map(|v| {
            v.parse::<f64>()
                .map_err(|_| format!("--stats-period `{v}`"))
        })
        .transpose()?;
    let burst = args.parse_or("burst", 32usize)?;
    if !(1..=cxdirect::ring::MAX_BURST).contains(&burst) {
        return Err(format!("--burst must be 1..={}", cxdirect::ring::MAX_BURST));
    }
    Ok(Settings {
        mode: args.parse_or("forward-mode", ForwardMode::TxOnly)?,
        burst,
        sizes,
        inline,
        inline_max: args.parse_or("inline-max", 256u16)?,
        multi_packet: args.flag("tx-multi-packet"),
        striding: args.flag("rx-striding"),
        rxq: args.parse_or("rxq", 1u16)?,
        txq: args.parse_or("txq", 1u16)?,
        ring: args.parse_or("ring", 1024u32)?,
        duration: Some(
            duration
                .map(Duration::from_secs_f64)
                .unwrap_or(Duration::from_secs(5)),
        )
        .filter(|_| packets.is_none()),
        packets,
        stats_period: stats.filter(|s| *s > 0.0).map(Duration::from_secs_f64),
        verify: args.flag("verify"),
        flows: args.parse_or(
            "flows",
            if args.get("forward-mode") == Some("flowgen") {
                64u16
            } else {
                1
            },
        )?,
    })
}

impl RunOnPorts for Settings {
    fn run<B: Backend>(&self, backends: Vec<B>) -> Result<ExitCode, String> {
        run(backends, self)
    }
}

fn run<B: Backend>(backends: Vec<B>, s: &Settings) -> Result<ExitCode, String> {
    let max_len = *s.sizes.iter().max().unwrap_or(&64);
    let mtu = (max_len.saturating_sub(18)).max(1500) as u16;
    let buf_size =
        ((u32::from(mtu) + 18 + u32::from(cxdirect::mem::HEADROOM)).div_ceil(64) * 64).max(2048);
    let config = PortConfig {
        rx_queues: s.rxq,
        tx_queues: s.txq,
        ring_size: s.ring,
        mtu,
        inline: s.inline,
        inline_max: s.inline_max,
        tx_multi_packet: s.multi_packet,
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
    let mut verifier = Verifier::default();
    let tx_port = 0;
    let rx_port = ports.len() - 1;
    let mut received: Vec<Mbuf> = Vec::with_capacity(cxdirect::ring::MAX_BURST);
    let mut pending: Vec<Vec<Mbuf>> = (0..ports.len())
        .map(|_| Vec::with_capacity(cxdirect::ring::MAX_BURST * 2))
        .collect();
    let mut turn = 0usize;
    let start = Instant::now();
    let mut last_stats = start;
    let mut rx_count = vec![0u64; ports.len()];
    let generating = matches!(s.mode, ForwardMode::TxOnly | ForwardMode::FlowGen);
    let forwarding = matches!(s.mode, ForwardMode::Io | ForwardMode::MacSwap);
    if forwarding {
        // Start the loop with traffic, as testpmd's --tx-first does.
        let pool = ports[tx_port].port.pool().clone();
        testpmd::generate(
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
        let all_in = generator.generated() <= rx_count[rx_port];
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
        let in_flight = generator.generated().saturating_sub(rx_count[rx_port]);
        let credit = u64::from(s.ring) * u64::from(s.rxq);
        if generating
            && !stop_generating
            && in_flight + s.burst as u64 <= credit
            && s.packets.is_none_or(|n| generator.generated() < n)
        {
            let pool = ports[tx_port].port.pool().clone();
            testpmd::generate(
                &mut generator,
                &pool,
                &mut pending[tx_port],
                s.burst,
                s.packets,
            );
        }
        for p in 0..ports.len() {
            // Send what is waiting for this port.
            if !pending[p].is_empty() {
                let before = pending[p].len();
                let tx = &mut ports[p].queues.tx;
                testpmd::send_some(tx, &mut pending[p], &mut turn);
                progress |= pending[p].len() != before;
            }
            // A queue stopped by an error completion is recovered before it is used again.
            let Started { port, queues } = &mut ports[p];
            recoveries += testpmd::recover_stopped(port, queues)
                .map_err(|e| format!("queue recovery: {e}"))?
                .len() as u64;
            // Receive.
            received.clear();
            let rx = &mut ports[p].queues.rx;
            let got = testpmd::receive_all(rx, &mut received, s.burst);
            if got == 0 {
                continue;
            }
            progress = true;
            rx_count[p] += got as u64;
            let out = if ports.len() == 2 { 1 - p } else { p };
            for mut m in received.drain(..) {
                if s.verify && !forwarding {
                    verifier.check(&m);
                }
                match s.mode {
                    ForwardMode::Io => pending[out].push(m),
                    ForwardMode::MacSwap => {
                        testpmd::mac_swap(&mut m);
                        pending[out].push(m);
                    }
                    _ => drop(m),
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
        generator.generated()
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
            "verify: good {} corrupt {} duplicate {} gaps {}",
            verifier.good, verifier.corrupt, verifier.duplicate, verifier.gaps
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
    let clean = lost == 0 && verifier.corrupt == 0 && verifier.duplicate == 0;
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
