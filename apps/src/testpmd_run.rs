//! The forwarding loop of `cxdirect-testpmd`, shared with `cxdirect-bench`: one thread drives
//! every queue of one or two ports, generating, sending, receiving and checking packets as
//! DPDK's testpmd does on one lcore.

use crate::testpmd::{self, ForwardMode, Generator, Verifier};
use cxdirect::{Backend, Device, InlineMode, Mbuf, Options, Port, PortConfig, PortStats, Started};
use std::time::{Duration, Instant};

/// What one run of the loop does (the options of `cxdirect-testpmd`).
#[derive(Debug, Clone)]
pub struct Settings {
    /// What the ports do.
    pub mode: ForwardMode,
    /// Packets per burst call.
    pub burst: usize,
    /// Frame sizes in bytes, no FCS, sent in turn.
    pub sizes: Vec<usize>,
    /// What a send WQE carries inline.
    pub inline: InlineMode,
    /// Largest packet sent inline with [`InlineMode::Full`], in bytes.
    pub inline_max: u16,
    /// Send runs of packets in enhanced multi-packet WQEs.
    pub multi_packet: bool,
    /// TCP segmentation offload at this MSS (the generator sends TCP packets).
    pub tso: Option<u16>,
    /// Receive into striding receive queues.
    pub striding: bool,
    /// Receive queues per port.
    pub rxq: u16,
    /// Send queues per port; flow f goes on queue f % txq.
    pub txq: u16,
    /// Entries per queue ring.
    pub ring: u32,
    /// How long to run (`None`: until `packets`).
    pub duration: Option<Duration>,
    /// Packets to send (generating modes) or receive, then stop.
    pub packets: Option<u64>,
    /// Print port statistics this often (`None`: only at the end).
    pub stats_period: Option<Duration>,
    /// Check every received packet.
    pub verify: bool,
    /// Flows the generator cycles through.
    pub flows: u16,
}

/// What a run did: the summary line's figures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outcome {
    /// Frames sent (generated frames on the wire; in forwarding modes, the ports' send count).
    pub sent: u64,
    /// Frames received at the receiving port.
    pub received: u64,
    /// Generated frames never received.
    pub lost: u64,
    /// Received packets whose content was wrong (with verification).
    pub corrupt: u64,
    /// Received packets that arrived twice (with verification).
    pub duplicate: u64,
    /// Packets too far out of their flow's order to be checked (with verification).
    pub out_of_window: u64,
    /// Send errors of the ports.
    pub oerrors: u64,
    /// Frames the receiving ports dropped for want of a buffer.
    pub imissed: u64,
    /// Received frames per second, in millions.
    pub mpps: f64,
    /// How long the run took.
    pub elapsed: Duration,
}

impl Outcome {
    /// Nothing lost, corrupt, duplicated or out of its window.
    pub fn clean(&self) -> bool {
        self.lost == 0 && self.corrupt == 0 && self.duplicate == 0 && self.out_of_window == 0
    }

    /// The summary line `cxdirect-testpmd` ends with.
    pub fn summary(&self) -> String {
        format!(
            "summary: tx={} rx={} lost={} corrupt={} duplicate={} oerrors={} imissed={} mpps={:.3}",
            self.sent,
            self.received,
            self.lost,
            self.corrupt,
            self.duplicate,
            self.oerrors,
            self.imissed,
            self.mpps
        )
    }
}

/// Runs the loop on `backends` (one or two ports; the first sends, the last receives),
/// printing each port's line at start, statistics every `stats_period` and at the end, and
/// the verifier's counts; returns what the summary line reports.
pub fn run<B: Backend>(backends: Vec<B>, s: &Settings) -> Result<Outcome, String> {
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
        // One ring's worth: receive-side scaling spreads flows by their hash, not evenly, so
        // every packet in flight may be bound for one queue (a burst of TCP segments likewise).
        let credit = u64::from(s.ring);
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
    Ok(Outcome {
        sent,
        received: rx,
        lost,
        corrupt: verifier.corrupt,
        duplicate: verifier.duplicate,
        out_of_window: verifier.out_of_window,
        oerrors: totals.oerrors,
        imissed,
        mpps,
        elapsed,
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
