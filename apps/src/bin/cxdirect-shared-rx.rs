//! cxdirect-shared-rx: four (or N) UDP flows steered to N receive queues that draw buffers from
//! one shared ring. The receiver sleeps in epoll on the async event vector and the queues'
//! completion vectors; it refills the ring only when the low-watermark event arrives, then
//! re-arms the limit. A sender thread on the other port (or the same port on a loopback) keeps
//! what it sends within the buffers the receiver has posted (receive credits), so a frame only
//! finds an empty ring when refills come too late. Every packet is verified (flow, order,
//! content, and that its flow arrived on its own queue).
//! Last line: `summary: rx=N drops=N limit_events=N refills=N`.

use clap::error::ErrorKind;
use clap::{Parser, ValueEnum};
use cxdirect::{
    Backend, Device, Event, Mbuf, Options, Port, PortConfig, Queues, SharedQueues, SharedRxConfig,
    Started, TxQueue,
};
use cxdirect_apps::cli::{self, BurstArgs, DeviceArgs, FrameSizeArgs, RunOnPorts, QUEUES, TRAFFIC};
use cxdirect_apps::testpmd::{self, Generator, Verifier};
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Flow `f` goes to UDP port `BASE_PORT + f`, steered to queue `f`.
const BASE_PORT: u16 = 7000;
/// The async event vector's token in epoll; queue `q` is `q + 1`.
const EVENT_TOKEN: u64 = 0;

/// Most receive queues on the shared ring: each takes its own completion vector.
const MAX_SHARED_QUEUES: u16 = 16;

/// Receives flows on queues that share one buffer ring, refilled on the low-watermark event
#[derive(Parser, Debug)]
#[command(name = "cxdirect-shared-rx", version)]
#[command(
    after_help = "SPEC: emu (one port, loopback) | emu-pair (two ports back to back) | PCI address. \
The last (or only) device receives; the first sends."
)]
struct Cli {
    #[command(flatten)]
    devices: DeviceArgs,
    #[command(flatten)]
    burst: BurstArgs,
    #[command(flatten)]
    size: FrameSizeArgs,
    /// Packets to send and receive (1..)
    #[arg(long, value_name = "N", default_value_t = 1_000_000, value_parser = cli::at_least_one(), help_heading = TRAFFIC)]
    packets: u64,
    /// How the sender is paced: credits (within the buffers the receiver posted) or none
    #[arg(long, value_name = "HOW", value_enum, hide_possible_values = true, default_value_t = Pace::Credits, help_heading = TRAFFIC)]
    pace: Pace,
    /// Receive queues on the shared ring, one flow each (1..=16)
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=i64::from(MAX_SHARED_QUEUES)), help_heading = QUEUES)]
    queues: u16,
    /// Buffers on the shared ring (a power of two, 64..=32768)
    #[arg(long, value_name = "N", default_value = "512", value_parser = cli::parse_ring, help_heading = QUEUES)]
    ring: u32,
    /// Low watermark: posted buffers left when the limit event asks for a refill (1..ring) [default: ring / 4]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..), help_heading = QUEUES)]
    lwm: Option<u32>,
}

/// How the sender is paced.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Pace {
    /// Within the buffers the receiver has posted.
    Credits,
    /// As fast as it can.
    None,
}

struct Settings {
    queues: u16,
    ring: u32,
    lwm: u32,
    packets: u64,
    burst: usize,
    size: usize,
    credits: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let lwm = cli.lwm.unwrap_or(cli.ring / 4);
    if lwm >= cli.ring {
        return cli::usage_error::<Cli>(
            ErrorKind::ValueValidation,
            format!("--lwm {lwm}: give 1..{} (below --ring)", cli.ring),
        );
    }
    let settings = Settings {
        queues: cli.queues,
        ring: cli.ring,
        lwm,
        packets: cli.packets,
        burst: cli.burst.packets(),
        size: cli.size.bytes(),
        credits: cli.pace == Pace::Credits,
    };
    cli::run_on_ports::<Cli>(&cli.devices, &settings)
}

/// What the receiver tells the sender.
#[derive(Default)]
struct Credits {
    /// Buffers posted on the shared ring so far (the initial fill and every refill).
    posted: AtomicU64,
    /// Set when the receiver gives up: the sender stops.
    stop: AtomicBool,
}

impl RunOnPorts for Settings {
    fn run<B: Backend>(&self, backends: Vec<B>) -> Result<ExitCode, String> {
        run(backends, self)
    }
}

fn run<B: Backend>(mut backends: Vec<B>, s: &Settings) -> Result<ExitCode, String> {
    let options = Options {
        msix_vectors: 1 + s.queues,
        ..Options::default()
    };
    let rx_config = PortConfig {
        rx_queues: s.queues,
        tx_queues: 1,
        ring_size: 256,
        pool_buffers: (2 * s.ring).max(1024) + 1024,
        shared_rx: Some(SharedRxConfig {
            ring_size: s.ring,
            limit: s.lwm,
        }),
        udp_port_queues: Some(BASE_PORT),
        rx_interrupts: true,
        ..PortConfig::default()
    };
    let rx_backend = backends.pop().ok_or("no device")?;
    let rx_name = rx_backend.name();
    let rx_dev = Device::bring_up(rx_backend, options.clone())
        .map_err(|e| format!("{rx_name}: bring-up failed: {e}"))?;
    let Started {
        port: mut rx_port,
        queues: Queues {
            tx: mut rx_txqs,
            rx: _,
        },
    } = Port::start(rx_dev, rx_config).map_err(|e| format!("{rx_name}: port start failed: {e}"))?;
    let SharedQueues { ring, rx: queues } = rx_port
        .take_shared_rx()
        .ok_or("the port gave no shared ring")?;
    println!(
        "port rx ({rx_name}): {} queues on shared ring {} of {} buffers, limit {}",
        s.queues,
        ring.id(),
        s.ring,
        s.lwm
    );
    // The sender: the other port, or this one's own send queue on a loopback.
    let (tx_port, tx_queue) = match backends.pop() {
        Some(b) => {
            let name = b.name();
            let config = PortConfig {
                ring_size: 256,
                pool_buffers: 1024,
                ..PortConfig::default()
            };
            let (port, tx) = cli::start_sender(b, config)?;
            println!("port tx ({name})");
            (Some(port), tx)
        }
        None => (None, rx_txqs.remove(0)),
    };
    let tx_pool = match &tx_port {
        Some(p) => p.pool().clone(),
        None => rx_port.pool().clone(),
    };
    let credits = Arc::new(Credits::default());
    credits
        .posted
        .store(u64::from(ring.outstanding()), Ordering::Release);
    let sender = {
        let credits = credits.clone();
        let (packets, burst, size, queues, paced) =
            (s.packets, s.burst, s.size, s.queues, s.credits);
        std::thread::spawn(move || {
            send(
                tx_queue, &tx_pool, &credits, packets, burst, size, queues, paced,
            )
        })
    };
    let started = Instant::now();
    let outcome = receive(&mut rx_port, SharedQueues { ring, rx: queues }, &credits, s);
    credits.stop.store(true, Ordering::Release);
    let sent = sender.join().map_err(|_| "the sender thread panicked")??;
    let elapsed = started.elapsed();
    let report = outcome?;
    let stats = rx_port.stats().map_err(|e| format!("port stats: {e}"))?;
    for (q, n) in report.per_queue.iter().enumerate() {
        println!("queue {q}: rx={n} interrupts={}", report.interrupts[q]);
    }
    let v = &report.verifier;
    let lost = sent.saturating_sub(v.good + v.duplicate);
    println!(
        "sent={sent} verified={} corrupt={} duplicate={} misrouted={} lost={lost} \
         async_interrupts={} sleeps={} mpps={:.3}",
        v.good,
        v.corrupt,
        v.duplicate,
        report.misrouted,
        report.async_interrupts,
        report.sleeps,
        report.received as f64 / elapsed.as_secs_f64() / 1e6
    );
    let rx_dev = rx_port
        .close()
        .map_err(|e| format!("{rx_name}: close failed: {e}"))?;
    let teardown = rx_dev
        .teardown()
        .map_err(|e| format!("{rx_name}: teardown failed: {e}"))?;
    if let Some(p) = tx_port {
        p.close()
            .and_then(|d| d.teardown())
            .map_err(|e| format!("sender: close failed: {e}"))?;
    }
    if report.recovered > 0 {
        println!("recovered queues: {}", report.recovered);
    }
    println!(
        "summary: rx={} drops={} limit_events={} refills={}",
        report.received, stats.imissed, report.limit_events, report.refills
    );
    let clean = v.corrupt == 0
        && v.duplicate == 0
        && report.misrouted == 0
        && lost == 0
        && report.received == s.packets
        && teardown.pages_kept == 0;
    Ok(if clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Sends `packets` over `queues` flows, never more than the receiver has posted when paced.
#[allow(clippy::too_many_arguments)]
fn send<B: Backend>(
    mut tx: TxQueue<B>,
    pool: &cxdirect::Mempool,
    credits: &Credits,
    packets: u64,
    burst: usize,
    size: usize,
    queues: u16,
    paced: bool,
) -> Result<u64, String> {
    let mut generator = Generator::new(vec![size], queues)?.with_dst_port_base(BASE_PORT);
    let mut batch: Vec<Mbuf> = Vec::with_capacity(burst);
    let mut sent = 0u64;
    while sent < packets && !credits.stop.load(Ordering::Acquire) {
        if batch.is_empty() {
            let allowed = if paced {
                credits.posted.load(Ordering::Acquire).saturating_sub(sent)
            } else {
                u64::MAX
            };
            let want = (burst as u64).min(packets - sent).min(allowed) as usize;
            if want == 0 {
                // Waiting for the receiver's next refill.
                std::thread::yield_now();
                continue;
            }
            testpmd::generate(&mut generator, pool, &mut batch, want, Some(packets));
            if batch.is_empty() {
                std::thread::yield_now();
                continue;
            }
        }
        let before = batch.len();
        tx.tx_burst(&mut batch);
        sent += (before - batch.len()) as u64;
    }
    // Let the last completions come back before the queue is dropped.
    let deadline = Instant::now() + Duration::from_secs(1);
    while tx.in_flight() > 0 && Instant::now() < deadline {
        tx.tx_burst(&mut batch);
        std::thread::yield_now();
    }
    Ok(sent)
}

/// Receives everything pending on every queue, verifying each packet; returns how many.
fn drain<B: Backend>(
    queues: &mut [cxdirect::SharedRxQueue<B>],
    burst: &mut Vec<Mbuf>,
    max: usize,
    report: &mut Report,
) -> u64 {
    let mut got = 0u64;
    for (q, queue) in queues.iter_mut().enumerate() {
        while queue
            .rx_burst(burst, max)
            .expect(cxdirect_apps::testpmd::VEC_TAKES_ANY_POOL)
            > 0
        {
            for m in burst.drain(..) {
                if report.verifier.check(&m) != Some(q as u16) {
                    report.misrouted += 1;
                }
                got += 1;
                report.per_queue[q] += 1;
            }
        }
    }
    report.received += got;
    got
}

struct Report {
    received: u64,
    per_queue: Vec<u64>,
    /// Completion interrupts each queue took.
    interrupts: Vec<u64>,
    misrouted: u64,
    limit_events: u64,
    refills: u64,
    sleeps: u64,
    async_interrupts: u64,
    /// Queues reset after the device stopped them.
    recovered: u64,
    verifier: Verifier,
}

fn receive<B: Backend>(
    port: &mut Port<B>,
    SharedQueues {
        mut ring,
        rx: mut queues,
    }: SharedQueues<B>,
    credits: &Credits,
    s: &Settings,
) -> Result<Report, String> {
    let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map_err(|e| format!("epoll: {e}"))?;
    let event_fd = port
        .device()
        .event_fd()
        .ok_or("the device has no event vector")?;
    epoll
        .add(event_fd, EpollEvent::new(EpollFlags::EPOLLIN, EVENT_TOKEN))
        .map_err(|e| format!("epoll add: {e}"))?;
    for (q, queue) in queues.iter().enumerate() {
        let fd = queue
            .interrupt_fd()
            .ok_or("receive interrupts are not enabled")?;
        epoll
            .add(fd, EpollEvent::new(EpollFlags::EPOLLIN, q as u64 + 1))
            .map_err(|e| format!("epoll add: {e}"))?;
    }
    let mut report = Report {
        received: 0,
        per_queue: vec![0; queues.len()],
        interrupts: Vec::new(),
        misrouted: 0,
        limit_events: 0,
        refills: 0,
        sleeps: 0,
        async_interrupts: 0,
        recovered: 0,
        verifier: Verifier::default(),
    };
    let mut burst = Vec::with_capacity(s.burst);
    let mut ready = [EpollEvent::empty(); 17];
    let mut last_progress = Instant::now();
    while report.received < s.packets {
        let got = drain(&mut queues, &mut burst, s.burst, &mut report);
        if got > 0 {
            last_progress = Instant::now();
        }
        // A queue the device stopped (error completion, or one the driver refused) is reset;
        // its frames since then were dropped by the device and show in imissed/ierrors.
        for queue in queues.iter_mut().filter(|q| q.in_error()) {
            port.recover_shared_rx(queue)
                .map_err(|e| format!("recovering queue {}: {e}", queue.rqn()))?;
            report.recovered += 1;
        }
        // Events a command took off the EQ have had their interrupt consumed already.
        let events_waiting = port.device().events_pending();
        let timeout = if got > 0 || events_waiting {
            EpollTimeout::ZERO
        } else {
            if last_progress.elapsed() > Duration::from_secs(5) {
                eprintln!(
                    "cxdirect-shared-rx: no packet for 5 s with {} of {} received: stopping",
                    report.received, s.packets
                );
                break;
            }
            // Idle: arm every queue, look once more (a packet between the last look and the
            // arm fires at once anyway), then sleep.
            for queue in queues.iter_mut() {
                queue.arm_interrupt().map_err(|e| e.to_string())?;
            }
            report.sleeps += 1;
            EpollTimeout::from(200u16)
        };
        let n = epoll
            .wait(&mut ready, timeout)
            .map_err(|e| format!("epoll wait: {e}"))?;
        let async_fired = ready[..n].iter().any(|ev| ev.data() == EVENT_TOKEN);
        if async_fired || events_waiting {
            report.async_interrupts += port.device().wait_event(Duration::ZERO);
            // Handling runs commands, which may take further events off the EQ: go on until
            // none is left unreported.
            loop {
                let events = port
                    .device()
                    .poll_events()
                    .map_err(|e| format!("events: {e}"))?;
                for ev in events {
                    if let Event::SharedRingLow { ring: id, posted } = ev {
                        if id != ring.id() {
                            continue;
                        }
                        report.limit_events += 1;
                        // Take what completed first: a slot is posted again only once its
                        // completion has been taken.
                        let mut refilled = 0;
                        loop {
                            let drained = drain(&mut queues, &mut burst, s.burst, &mut report);
                            let posted_now = ring.refill();
                            refilled += posted_now;
                            if ring.outstanding() >= s.lwm || (drained == 0 && posted_now == 0) {
                                break;
                            }
                        }
                        report.refills += 1;
                        // Re-arm before the sender may use the new buffers, so the dip they
                        // cause is seen.
                        port.set_shared_limit(s.lwm)
                            .map_err(|e| format!("re-arming the limit: {e}"))?;
                        credits
                            .posted
                            .fetch_add(u64::from(refilled), Ordering::AcqRel);
                        if report.limit_events <= 3 || report.limit_events % 1000 == 0 {
                            println!(
                                "event {}: ring {id} low ({posted} posted), refilled {refilled}",
                                report.limit_events
                            );
                        }
                    }
                }
                if !port.device().events_pending() {
                    break;
                }
            }
        }
        for ev in &ready[..n] {
            let token = ev.data();
            if token == EVENT_TOKEN {
                continue;
            }
            if let Some(queue) = queues.get_mut((token - 1) as usize) {
                queue
                    .wait_interrupt(Duration::ZERO)
                    .map_err(|e| e.to_string())?;
            }
        }
    }
    report.interrupts = queues.iter().map(|q| q.interrupts()).collect();
    Ok(report)
}
