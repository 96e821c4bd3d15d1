//! The whole server: build the functions and their cable, listen on every socket, serve each
//! client on its own thread, and stop when the clients are gone.
//!
//! **When it stops.** The process ends once every client that connected has disconnected (and
//! at least one did). A socket whose client never came is then abandoned rather than waited for,
//! so a rig whose QEMU died early does not leave the server hanging. With two sockets served by
//! one QEMU, QEMU connects both while it realizes its devices and closes both when it quits.
//!
//! **Threads.** One per socket runs the vfio-user connection (MMIO, config space, DMA maps and
//! command execution happen there); each function's device work (send doorbells, frames arriving)
//! runs on the model's own thread (`ExecMode::Threaded`). The main thread only watches: it logs
//! connections, flushes the pcap every [`PCAP_FLUSH`], and decides when to stop.

use super::backend::{BackendStats, EmuBackend};
use super::bridge::Bridge;
use super::cli::{Options, WireSpec};
use super::session::{self, BindError, Outcome};
use crate::pcap::{PcapError, PcapWriter};
use crate::wire::{PortId, Wire, WireError};
use crate::{CommandTrace, Device, EmuConfig, ExecMode};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;

/// How often the pcap tap is flushed while serving.
pub const PCAP_FLUSH: Duration = Duration::from_millis(200);

/// Why the server could not start (or stop cleanly).
#[derive(Debug, Error)]
pub enum AppError {
    /// A socket could not be listened on.
    #[error(transparent)]
    Bind(#[from] BindError),
    /// The pcap file could not be created.
    #[error("--pcap: {0}")]
    Pcap(#[from] PcapError),
    /// The wire refused the pcap tap or its final flush.
    #[error("pcap tap: {0}")]
    Wire(#[from] WireError),
    /// The cross-process cable could not be set up.
    #[error("--wire pair: {0}")]
    Bridge(#[from] super::bridge::BridgeError),
    /// A command trace file could not be created.
    #[error("--trace-commands {path}: {source}")]
    Trace {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A thread could not be started.
    #[error("cannot start a thread: {0}")]
    Thread(#[source] std::io::Error),
}

/// One function and the socket it is served on.
#[derive(Debug)]
pub struct Function {
    /// The socket path.
    pub socket: PathBuf,
    /// The modelled function.
    pub device: Device,
    /// Its MAC address.
    pub mac: [u8; 6],
    /// Its command trace and the file it goes to (`--trace-commands`).
    pub trace: Option<(PathBuf, CommandTrace)>,
}

/// The functions and their cable.
#[derive(Debug)]
pub struct Build {
    /// One function per socket, in order.
    pub functions: Vec<Function>,
    /// The wire all functions sit on (none for `--wire none`).
    pub wire: Option<Arc<Wire>>,
    /// The cross-process cable, for `--wire pair:`.
    pub bridge: Option<Bridge>,
    /// What the cable is, in words.
    pub cable: String,
}

/// Default MAC of the first function (the model's default).
fn default_mac() -> [u8; 6] {
    EmuConfig::default().mac
}

/// The functions' configuration: `roce` turns RoCE on; it never turns off what the model's
/// default configuration offers. `trace` records the function's commands.
/// Pages a served function asks for before INIT_HCA (16 MiB): a ConnectX's firmware sizes its
/// context memory for its object limits up front, and Linux's mlx5_ib creates thousands of
/// memory keys at probe (its mkey cache, filled by asynchronous CREATE_MKEYs faster than page
/// requests are answered). The in-process default stays small for tests.
const SERVED_INIT_PAGES: u32 = 4096;

fn config(mac: [u8; 6], roce: bool, trace: Option<CommandTrace>) -> EmuConfig {
    EmuConfig {
        mac,
        roce: roce || EmuConfig::default().roce,
        // On-demand paging as a ConnectX-6 Dx reports it (`pg`, the ODP page).
        odp: true,
        init_pages: SERVED_INIT_PAGES,
        exec: ExecMode::Threaded,
        command_trace: trace,
        ..EmuConfig::default()
    }
}

/// Creates the command trace files `opts` asks for, one per function in socket order.
fn traces(opts: &Options) -> Result<Vec<(PathBuf, CommandTrace)>, AppError> {
    opts.trace_paths()
        .into_iter()
        .map(|path| match CommandTrace::create(&path) {
            Ok(trace) => Ok((path, trace)),
            Err(source) => Err(AppError::Trace {
                path: path.display().to_string(),
                source,
            }),
        })
        .collect()
}

/// Builds the functions `opts` asks for, each running its work on its own device thread.
pub fn build(opts: &Options) -> Result<Build, AppError> {
    let mut traces = traces(opts)?.into_iter();
    let first_mac = opts.macs.first().copied().unwrap_or_else(default_mac);
    if let [a, b] = opts.sockets.as_slice() {
        let mut second_mac = opts.macs.get(1).copied().unwrap_or(first_mac);
        if second_mac == first_mac {
            second_mac[5] ^= 1;
        }
        let (ta, tb) = (traces.next(), traces.next());
        let (da, db) = Device::pair(
            config(first_mac, opts.roce, ta.as_ref().map(|(_, t)| t.clone())),
            config(second_mac, opts.roce, tb.as_ref().map(|(_, t)| t.clone())),
        );
        let wire = da.wire().map(|(w, _)| w);
        return Ok(Build {
            functions: vec![
                Function {
                    socket: a.clone(),
                    device: da,
                    mac: first_mac,
                    trace: ta,
                },
                Function {
                    socket: b.clone(),
                    device: db,
                    mac: second_mac,
                    trace: tb,
                },
            ],
            wire,
            bridge: None,
            cable: "back to back".into(),
        });
    }
    let socket = opts.sockets.first().cloned().unwrap_or_default();
    let trace = traces.next();
    let cfg = config(first_mac, opts.roce, trace.as_ref().map(|(_, t)| t.clone()));
    let (device, bridge, cable) = match &opts.wire {
        WireSpec::Default | WireSpec::Loopback => {
            (Device::loopback(cfg), None, "loopback".to_string())
        }
        WireSpec::None => (Device::new(cfg), None, "no cable".to_string()),
        WireSpec::PairWith(other) => {
            let wire = Arc::new(Wire::pair());
            let device = Device::new(cfg);
            device.attach(wire.clone(), PortId::A, &[]);
            let bridge = Bridge::start(wire, PortId::B, &socket, other)?;
            let cable = format!("cabled to the function on {}", other.display());
            (device, Some(bridge), cable)
        }
    };
    let wire = device.wire().map(|(w, _)| w);
    Ok(Build {
        functions: vec![Function {
            socket,
            device,
            mac: first_mac,
            trace,
        }],
        wire,
        bridge,
        cable,
    })
}

/// How the server ended.
#[derive(Debug)]
pub struct Summary {
    /// Per socket: how its session ended and what it served.
    pub sessions: Vec<(PathBuf, Outcome, BackendStats)>,
}

impl Summary {
    /// Whether every session ended normally (exit status 0).
    pub fn is_clean(&self) -> bool {
        self.sessions.iter().all(|(_, o, _)| o.is_clean())
    }
}

enum Event {
    Connected(usize),
    Ended(usize, Outcome, BackendStats),
}

fn mac_text(mac: [u8; 6]) -> String {
    mac.map(|b| format!("{b:02x}")).join(":")
}

/// Serves `opts` until the clients are gone.
pub fn run(opts: &Options) -> Result<Summary, AppError> {
    let build = build(opts)?;
    if let (Some(path), Some(wire)) = (&opts.pcap, &build.wire) {
        wire.set_pcap(PcapWriter::create(path)?)?;
        log::info!("recording the wire to {}", path.display());
    } else if let Some(path) = &opts.pcap {
        log::warn!(
            "--pcap {}: --wire none has no wire to record",
            path.display()
        );
    }
    let mut listeners: Vec<UnixListener> = Vec::new();
    for f in &build.functions {
        match session::bind(&f.socket) {
            Ok(l) => listeners.push(l),
            Err(e) => {
                remove_sockets(&build.functions[..listeners.len()]);
                return Err(e.into());
            }
        }
    }
    log::info!(
        "serving {} function(s), {}:",
        build.functions.len(),
        build.cable
    );
    for (i, f) in build.functions.iter().enumerate() {
        log::info!(
            "  function {i}: ConnectX-6 Dx 15b3:101d, MAC {}, BAR0 {} MiB, on {}",
            mac_text(f.mac),
            f.device.bar0_size() >> 20,
            f.socket.display()
        );
    }

    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let mut threads = Vec::new();
    for (i, (f, listener)) in build.functions.iter().zip(listeners).enumerate() {
        let tx = tx.clone();
        let thread_stop = stop.clone();
        let device = f.device.clone();
        let name = f.socket.display().to_string();
        let hold = opts.blueflame_hold;
        let spawned = std::thread::Builder::new()
            .name(format!("vfio-user-{i}"))
            .spawn(move || {
                let mut backend = EmuBackend::with_blueflame_hold(name, device, hold);
                let connect_tx = tx.clone();
                let outcome = session::serve(listener, &mut backend, &thread_stop, move || {
                    let _ = connect_tx.send(Event::Connected(i));
                });
                let stats = backend.stats();
                // Unmap the client's memory before saying we are done.
                drop(backend);
                let _ = tx.send(Event::Ended(i, outcome, stats));
            });
        match spawned {
            Ok(handle) => threads.push(handle),
            Err(e) => {
                stop.store(true, Ordering::Relaxed);
                for t in threads {
                    let _ = t.join();
                }
                remove_sockets(&build.functions);
                return Err(AppError::Thread(e));
            }
        }
    }
    drop(tx);

    let mut sessions: Vec<Option<(Outcome, BackendStats)>> =
        build.functions.iter().map(|_| None).collect();
    let mut active = 0usize;
    let mut connected = 0usize;
    loop {
        match rx.recv_timeout(PCAP_FLUSH) {
            Ok(Event::Connected(i)) => {
                active += 1;
                connected += 1;
                log::info!("function {i}: client connected on {}", socket_of(&build, i));
            }
            Ok(Event::Ended(i, outcome, stats)) => {
                if !matches!(outcome, Outcome::Abandoned) {
                    active = active.saturating_sub(1);
                    let line = format!(
                        "function {i}: {outcome} on {}; served {} config and {} BAR0 accesses, {} DMA maps, {} SET_IRQS, {} resets, {} refused; {} interrupts signalled, {} left pending, {} without eventfd; BlueFlame copies: {} assembled (longest gap between stores {} us), {} rung as doorbells when another message came, {} after the hold",
                        socket_of(&build, i),
                        stats.config_reads + stats.config_writes,
                        stats.bar_reads + stats.bar_writes,
                        stats.dma_maps,
                        stats.set_irqs,
                        stats.resets,
                        stats.refused,
                        stats.irq_signalled,
                        stats.irq_held_pending,
                        stats.irq_dropped,
                        stats.blueflame.assembled,
                        stats.blueflame.longest_gap_ns / 1000,
                        stats.blueflame.interrupted,
                        stats.blueflame.expired
                    );
                    if outcome.is_clean() {
                        log::info!("{line}");
                    } else {
                        log::error!("{line}");
                    }
                }
                if let Some(slot) = sessions.get_mut(i) {
                    *slot = Some((outcome, stats));
                }
                if connected > 0 && active == 0 {
                    break;
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if let Some(path) = &opts.fatal_trigger {
                    fatal_if_triggered(path, &build.functions);
                }
                if let Some(wire) = &build.wire {
                    if let Err(e) = wire.flush_pcap() {
                        log::error!("pcap: {e}; recording stopped");
                    }
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }

    stop.store(true, Ordering::Relaxed);
    for t in threads {
        let _ = t.join();
    }
    while let Ok(event) = rx.try_recv() {
        if let Event::Ended(i, outcome, stats) = event {
            if let Some(slot) = sessions.get_mut(i) {
                slot.get_or_insert((outcome, stats));
            }
        }
    }
    if let Some(bridge) = build.bridge {
        bridge.stop();
    }
    remove_sockets(&build.functions);
    for (i, f) in build.functions.iter().enumerate() {
        let c = f.device.counters();
        log::info!(
            "function {i}: {} commands ({} doorbells on entries not owned), {} doorbells, {} interrupts, {} frames sent, {} received, {} DMA faults",
            c.commands,
            c.idle_command_doorbells,
            c.doorbells,
            c.interrupts,
            c.tx_frames,
            c.rx_delivered,
            c.dma_faults
        );
    }
    for (i, f) in build.functions.iter().enumerate() {
        if let Some((path, trace)) = &f.trace {
            if let Err(e) = trace.flush() {
                log::error!("function {i}: command trace {}: {e}", path.display());
            }
            if trace.write_errors() > 0 {
                log::error!(
                    "function {i}: {} command trace lines could not be written to {}",
                    trace.write_errors(),
                    path.display()
                );
            }
            log::info!(
                "function {i}: {} commands traced to {}",
                trace.commands(),
                path.display()
            );
        }
    }
    if let Some(wire) = &build.wire {
        match wire.clear_pcap() {
            Ok(true) => {
                if let Some(path) = &opts.pcap {
                    log::info!("wire recorded to {}", path.display());
                }
            }
            Ok(false) => {}
            Err(e) => log::error!("pcap: {e}"),
        }
    }
    let sessions = build
        .functions
        .iter()
        .zip(sessions)
        .map(|(f, s)| {
            let (outcome, stats) = s.unwrap_or((Outcome::Abandoned, BackendStats::default()));
            (f.socket.clone(), outcome, stats)
        })
        .collect();
    Ok(Summary { sessions })
}

/// `--fatal-trigger`: when `path` exists, removes it and fails the function whose index it
/// holds with a fatal firmware error asking for the recovery flow. A file that names no
/// function is removed and said so.
fn fatal_if_triggered(path: &std::path::Path, functions: &[Function]) {
    let Ok(text) = std::fs::read_to_string(path) else {
        return;
    };
    if let Err(e) = std::fs::remove_file(path) {
        log::error!("--fatal-trigger {}: cannot remove it: {e}", path.display());
    }
    let index = text.trim().parse::<usize>().ok();
    match index.and_then(|i| functions.get(i).map(|f| (i, f))) {
        Some((i, f)) => {
            f.device.inject_fatal_reset_required(
                cxdirect_hw::init_seg::health_syndrome::FW_INTERNAL_ERR,
            );
            log::warn!(
                "function {i}: fatal firmware error injected (--fatal-trigger): health syndrome 0x1, recovery flow required"
            );
        }
        None => log::error!(
            "--fatal-trigger {}: {:?} names no function (0..{})",
            path.display(),
            text.trim(),
            functions.len()
        ),
    }
}

fn socket_of(build: &Build, i: usize) -> String {
    build
        .functions
        .get(i)
        .map(|f| f.socket.display().to_string())
        .unwrap_or_default()
}

fn remove_sockets(functions: &[Function]) {
    for f in functions {
        let _ = std::fs::remove_file(&f.socket);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fatal_trigger_fails_the_function_it_names_once() {
        let opts = Options {
            sockets: vec!["/nonexistent/a.sock".into(), "/nonexistent/b.sock".into()],
            wire: WireSpec::Default,
            pcap: None,
            macs: Vec::new(),
            verbosity: 0,
            roce: false,
            trace_commands: None,
            blueflame_hold: Duration::ZERO,
            fatal_trigger: None,
        };
        let build = build(&opts).expect("two functions");
        let dir = std::env::temp_dir().join(format!("cxdirect-fatal-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let trigger = dir.join("fatal");
        // No file: nothing happens.
        fatal_if_triggered(&trigger, &build.functions);
        assert_eq!(build.functions[1].device.health_syndrome(), 0);
        // A file naming no function is taken away and fails nothing.
        std::fs::write(&trigger, "7\n").unwrap();
        fatal_if_triggered(&trigger, &build.functions);
        assert!(!trigger.exists());
        assert_eq!(build.functions[0].device.health_syndrome(), 0);
        assert_eq!(build.functions[1].device.health_syndrome(), 0);
        std::fs::write(&trigger, "1\n").unwrap();
        fatal_if_triggered(&trigger, &build.functions);
        assert!(!trigger.exists());
        assert_eq!(build.functions[0].device.health_syndrome(), 0);
        assert_eq!(
            build.functions[1].device.health_syndrome(),
            cxdirect_hw::init_seg::health_syndrome::FW_INTERNAL_ERR
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
