//! cxdirect-faults: the fault matrix on the emulated pair. Each class of fault (send and
//! receive completions in error, corrupted completions, lost doorbells, command timeouts and
//! damaged command outputs, bogus events, a fatal health syndrome, a stalled health counter,
//! registers reading all-ones, a CQ overrun, a buffer access to an unmapped IOVA, the receive
//! pool's dmabuf revoked, a shared receive ring's queue in error and the ring broken by the
//! device) is injected `--injections` times under one verified,
//! sequenced flow; the driver detects and recovers; every lost frame must be accounted for by a
//! counter (flushed, completed in error, dropped by the device, drained by recovery).
//! Per class: injections, recoveries, time to recover p50/p99, frames sent/received/accounted,
//! and the three that must be 0. Last line:
//! `summary: classes=N injections=N recovered=N lost_beyond_flushed=N duplicates=N leaked=N`.
//! Exits 1 when any of the last three is not 0 or a class cannot run.

use cxdirect_apps::cli::Cli;
use cxdirect_apps::faults::{run_class, FaultClass};
use std::process::ExitCode;

const USAGE: &str = "usage: cxdirect-faults [--injections N] [--class NAME]
  Runs every fault class (or only NAME) on the built-in emulated pair.
  classes: tx_error_cqe rx_error_cqe tx_corrupt_cqe rx_corrupt_cqe dropped_doorbell
           command_timeout corrupt_command_output bogus_event health_fatal
           health_stall not_responding cq_overrun dma_unmapped dmabuf_revoked
           shared_ring_error";

const CLI: Cli = Cli {
    name: "cxdirect-faults",
    usage: USAGE,
};

fn main() -> ExitCode {
    let args = match CLI.parse(&["help"], &["injections", "class"]) {
        Ok(args) => args,
        Err(code) => return code,
    };
    let injections: u32 = match args.parse_or("injections", 20) {
        Ok(n) if n > 0 => n,
        Ok(_) => return CLI.usage_error("--injections must be at least 1"),
        Err(e) => return CLI.usage_error(&e),
    };
    let classes: Vec<FaultClass> = match args.get("class") {
        None => FaultClass::ALL.to_vec(),
        Some(name) => match FaultClass::ALL.iter().find(|c| c.name() == name) {
            Some(&c) => vec![c],
            None => return CLI.usage_error(&format!("unknown fault class {name:?}")),
        },
    };
    println!(
        "{:<24} {:>5} {:>5} {:>10} {:>10} {:>7} {:>7} {:>6} {:>5} {:>4} {:>4} {:>6}",
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
        "leaked"
    );
    let (mut injected, mut recovered, mut lost, mut duplicates, mut leaked) = (0, 0, 0, 0, 0);
    let mut failed = false;
    for &class in &classes {
        match run_class(class, injections) {
            Ok(r) => {
                let (p50, p99) = r.recover_p50_p99();
                println!(
                    "{:<24} {:>5} {:>5} {:>10.1} {:>10.1} {:>7} {:>7} {:>6} {:>5} {:>4} {:>4} {:>6}",
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
                    r.leaked
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
