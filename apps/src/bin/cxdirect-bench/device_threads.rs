//! `--device-threads`: verified testpmd traffic on the emulated pair with four queue pairs per
//! port, the model's threaded pair on one device thread and on two (one per function), in one
//! run: Mpps of each, and their ratio.
//!
//! Each configuration runs `cxdirect-testpmd`'s loop (txonly, 64-byte frames, flow f on send
//! queue f % 4, every packet checked) for `SECONDS`, alternately, `ROUNDS` times; the figure
//! of each is the median of its rounds, so a load that comes and goes on the machine weighs on
//! both alike. A round that loses, corrupts or duplicates a packet fails the run.

use super::metric;
use cxdirect::InlineMode;
use cxdirect_apps::cli::EmuExec;
use cxdirect_apps::emulated::{open_emulated, Spec};
use cxdirect_apps::testpmd::ForwardMode;
use cxdirect_apps::testpmd_run::{self, Settings};
use cxdirect_emu::EmuConfig;
use std::time::Duration;

/// Queue pairs per port.
const QUEUES: u16 = 4;
/// Seconds per round.
const SECONDS: u64 = 2;
/// Rounds per configuration.
const ROUNDS: usize = 3;
/// The device-thread counts compared.
const THREADS: [u8; 2] = [1, 2];

/// Runs both configurations and prints the figures and their ratio.
pub(super) fn device_threads() -> Result<(), String> {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "# verified txonly traffic, emu-pair, {QUEUES} queue pairs per port, 1 and 2 device threads, {ROUNDS} alternating rounds of {SECONDS} s, {cpus} CPUs"
    );
    let settings = Settings {
        mode: ForwardMode::TxOnly,
        burst: 32,
        sizes: vec![64],
        inline: InlineMode::Headers,
        inline_max: 256,
        multi_packet: false,
        tso: None,
        striding: false,
        rxq: QUEUES,
        txq: QUEUES,
        ring: 1024,
        duration: Some(Duration::from_secs(SECONDS)),
        packets: None,
        stats_period: None,
        verify: true,
        flows: QUEUES,
    };
    let mut mpps: Vec<Vec<f64>> = vec![Vec::new(); THREADS.len()];
    for round in 0..ROUNDS {
        for (i, &threads) in THREADS.iter().enumerate() {
            let cfg = EmuConfig {
                device_threads: threads,
                ..EmuExec::Threaded.config()
            };
            let outcome = testpmd_run::run(open_emulated(&Spec::EmuPair, cfg), &settings)?;
            println!(
                "# round {round}, {threads} device thread(s): {}",
                outcome.summary()
            );
            if !outcome.clean() || outcome.received != outcome.sent || outcome.received == 0 {
                return Err(format!(
                    "{threads} device thread(s): traffic not verified clean: {}",
                    outcome.summary()
                ));
            }
            mpps[i].push(outcome.mpps);
        }
    }
    let medians: Vec<f64> = mpps.into_iter().map(super::median).collect();
    metric("device_threads_cpus", cpus as f64);
    for (&threads, &m) in THREADS.iter().zip(&medians) {
        metric(&format!("device_threads_{threads}_q{QUEUES}_mpps"), m);
    }
    metric(
        "device_threads_2_over_1",
        medians[1] / medians[0].max(f64::MIN_POSITIVE),
    );
    Ok(())
}
