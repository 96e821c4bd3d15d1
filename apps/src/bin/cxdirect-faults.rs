//! cxdirect-faults: the fault matrix on the emulated pair. Each class of fault (send and
//! receive completions in error, corrupted completions, lost doorbells, command timeouts and
//! damaged command outputs, bogus events, a fatal health syndrome, a stalled health counter,
//! registers reading all-ones, a CQ overrun, a buffer access to an unmapped IOVA, the receive
//! pool's dmabuf revoked, a shared receive ring's queue in error and the ring broken by the
//! device) is injected `--injections` times under one verified,
//! sequenced flow; the driver detects and recovers; every lost frame must be accounted for by a
//! counter (flushed, completed in error, dropped by the device, drained by recovery).
//! The RDMA classes (RoCE frames lost, duplicated, reordered or corrupted on the wire, a
//! receiver without receives, retries exhausted under a cut wire, a QP's fatal error) run
//! krping-style traffic over an RC queue pair instead and count messages: each delivered once
//! and intact, or failed, flushed and sent again after the application reconnects.
//! The connection manager's classes connect through QP1 on the emulated pair: a peer that never
//! answers (the REQ retried on rdma_cm's timers, then an error naming address and port, then a
//! connect that works), and a peer that vanishes by a DREQ or silently (the queue pair's posted
//! work all completed flushed, both sides connected again); `arp_spoof` sends spoofed and
//! garbage ARP at a resolved neighbour entry, which must keep the peer's MAC.
//! Per class: injections, recoveries, time to recover p50/p99, frames sent/received/accounted,
//! the three that must be 0, and the device's own count of the class's faults where it keeps
//! one (`evid`: CQ overruns, refused DMA, revoked keys; for RDMA, retransmissions, repeated
//! PSNs, ICRC drops, RNR NAKs, retry-exceeded completions, QP fatal events; REQs sent before
//! giving up, flushed work requests, ARP ignored or refused). Last line:
//! `summary: classes=N injections=N recovered=N lost_beyond_flushed=N duplicates=N leaked=N`.
//! Exits 1 when any of the last three is not 0 or a class cannot run.

use clap::Parser;
use cxdirect_apps::cli::RUN;
use cxdirect_apps::faults::{run_class, FaultClass};
use std::process::ExitCode;

/// Runs the fault matrix: every class of fault injected under verified traffic on the emulated pair
#[derive(Parser, Debug)]
#[command(name = "cxdirect-faults", version)]
struct Cli {
    /// Injections per fault class (1..)
    #[arg(long, value_name = "N", default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..), help_heading = RUN)]
    injections: u32,
    /// Run only this fault class [default: all]
    #[arg(long, value_name = "NAME", value_enum, help_heading = RUN)]
    class: Option<FaultClass>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let injections = cli.injections;
    let classes: Vec<FaultClass> = match cli.class {
        None => FaultClass::ALL.to_vec(),
        Some(class) => vec![class],
    };
    println!(
        "{:<24} {:>5} {:>5} {:>10} {:>10} {:>7} {:>7} {:>6} {:>5} {:>4} {:>4} {:>6} {:>5}",
        "class",
        "inj",
        "recov",
        "p50_us",
        "p99_us",
        "sent",
        "rcvd",
        "acct",
        "lost",
        "dup",
        "corr",
        "leaked",
        "evid"
    );
    let (mut injected, mut recovered, mut lost, mut duplicates, mut leaked) = (0, 0, 0, 0, 0);
    let mut failed = false;
    for &class in &classes {
        match run_class(class, injections) {
            Ok(r) => {
                let (p50, p99) = r.recover_p50_p99();
                println!(
                    "{:<24} {:>5} {:>5} {:>10.1} {:>10.1} {:>7} {:>7} {:>6} {:>5} {:>4} {:>4} {:>6} {:>5}",
                    r.name,
                    r.injections,
                    r.recoveries,
                    p50,
                    p99,
                    r.sent,
                    r.received,
                    r.accounted,
                    r.lost_beyond_flushed,
                    r.duplicates,
                    r.corrupt,
                    r.leaked,
                    r.evidence
                );
                injected += r.injections;
                recovered += r.recoveries;
                lost += r.lost_beyond_flushed;
                duplicates += r.duplicates + r.corrupt;
                leaked += r.leaked;
            }
            Err(e) => {
                eprintln!("cxdirect-faults: {}: {e}", class.name());
                failed = true;
            }
        }
    }
    println!(
        "summary: classes={} injections={injected} recovered={recovered} lost_beyond_flushed={lost} duplicates={duplicates} leaked={leaked}",
        classes.len()
    );
    if failed || lost + duplicates + leaked > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
