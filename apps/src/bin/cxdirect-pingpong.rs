//! cxdirect-pingpong: round-trip latency between two ports. Port 0 sends one packet, port 1
//! echoes it back, port 0 times the round trip; repeated `--iterations` times. Prints min, p50,
//! p99 and max, and ends with `summary: iterations=N p50_ns=X p99_ns=X`.

use clap::error::ErrorKind;
use clap::{Parser, ValueEnum};
use cxdirect::{Backend, Device, InlineMode, Mbuf, Options, Port, PortConfig, Started};
use cxdirect_apps::cli::{self, DeviceArgs, FrameSizeArgs, RUN, TRAFFIC};
use cxdirect_apps::emulated::{open_emulated, Spec};
use cxdirect_apps::poll_rx;
use cxdirect_apps::testpmd::{build, HEADER_LEN};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Times round trips between two ports: port 0 sends, port 1 echoes, port 0 measures
#[derive(Parser, Debug)]
#[command(name = "cxdirect-pingpong", version)]
#[command(after_help = "SPEC: emu-pair, or two PCI addresses wired to each other.")]
struct Cli {
    #[command(flatten)]
    devices: DeviceArgs,
    #[command(flatten)]
    size: FrameSizeArgs,
    /// Send the whole packet inside the WQE: on or off
    #[arg(long, value_name = "ON|OFF", value_enum, hide_possible_values = true, default_value_t = Switch::On, help_heading = TRAFFIC)]
    inline: Switch,
    /// Write the WQE through the BlueFlame register: on or off
    #[arg(long, value_name = "ON|OFF", value_enum, hide_possible_values = true, default_value_t = Switch::On, help_heading = TRAFFIC)]
    blueflame: Switch,
    /// Round trips to time (1..)
    #[arg(long, value_name = "N", default_value_t = 10_000, value_parser = cli::at_least_one(), help_heading = RUN)]
    iterations: u64,
}

/// A feature switched on or off.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Switch {
    /// Switched on.
    On,
    /// Switched off.
    Off,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let config = PortConfig {
        ring_size: 256,
        pool_buffers: 2048,
        inline: match cli.inline {
            Switch::On => InlineMode::Full,
            Switch::Off => InlineMode::None,
        },
        blueflame: cli.blueflame == Switch::On,
        cqe_every: 1,
        ..PortConfig::default()
    };
    let (size, iterations) = (cli.size.bytes(), cli.iterations as usize);
    let mode = cli.devices.iommu_mode.as_str();
    let specs: Vec<Spec> = cli.devices.devices.iter().map(|s| Spec::parse(s)).collect();
    let outcome = match specs.as_slice() {
        [Spec::EmuPair] => {
            let backends = open_emulated(&Spec::EmuPair, cli.devices.emu_config());
            run(backends, &config, size, iterations)
        }
        [Spec::Pci(a), Spec::Pci(b)] => {
            let opened = cxdirect_apps::vfio_open(a, mode)
                .map_err(|e| format!("{a}: {e}"))
                .and_then(|first| {
                    let second =
                        cxdirect_apps::vfio_open(b, mode).map_err(|e| format!("{b}: {e}"))?;
                    Ok(vec![first, second])
                });
            opened.and_then(|backends| run(backends, &config, size, iterations))
        }
        _ => {
            return cli::usage_error::<Cli>(
                ErrorKind::ValueValidation,
                "--device: give emu-pair, or two PCI addresses wired to each other",
            )
        }
    };
    outcome.unwrap_or_else(|msg| {
        eprintln!("cxdirect-pingpong: {msg}");
        ExitCode::FAILURE
    })
}

fn run<B: Backend>(
    backends: Vec<B>,
    config: &PortConfig,
    size: usize,
    iterations: usize,
) -> Result<ExitCode, String> {
    let mut ports: Vec<Started<B>> = Vec::new();
    for b in backends {
        let name = b.name();
        let dev = Device::bring_up(b, Options::default()).map_err(|e| format!("{name}: {e}"))?;
        ports.push(Port::start(dev, config.clone()).map_err(|e| format!("{name}: {e}"))?);
    }
    let mut frame = Vec::new();
    let mut rtts = Vec::with_capacity(iterations);
    let mut batch: Vec<Mbuf> = Vec::with_capacity(4);
    let mut got: Vec<Mbuf> = Vec::with_capacity(4);
    let timeout = Duration::from_secs(2);
    for i in 0..iterations {
        build(&mut frame, size, 0, i as u32);
        let mut m = ports[0].port.pool().alloc().ok_or("port 0 pool empty")?;
        m.set_data(&frame).map_err(|e| e.to_string())?;
        batch.push(m);
        let start = Instant::now();
        while !batch.is_empty() {
            ports[0].queues.tx[0].tx_burst(&mut batch);
        }
        // Port 1 echoes.
        got.clear();
        if poll_rx(&mut ports[1].queues.rx[0], &mut got, 4, start + timeout).is_none() {
            return Err(format!(
                "iteration {i}: port 1 received nothing within {timeout:?}"
            ));
        }
        batch.append(&mut got);
        while !batch.is_empty() {
            ports[1].queues.tx[0].tx_burst(&mut batch);
        }
        got.clear();
        if poll_rx(&mut ports[0].queues.rx[0], &mut got, 4, start + timeout).is_none() {
            return Err(format!(
                "iteration {i}: the echo did not come back within {timeout:?}"
            ));
        }
        rtts.push(start.elapsed().as_nanos() as u64);
        let mut seq = [0u8; 4];
        got[0].read(HEADER_LEN + 6, &mut seq);
        if u32::from_be_bytes(seq) != i as u32 {
            return Err(format!(
                "iteration {i}: the echo carried sequence {}",
                u32::from_be_bytes(seq)
            ));
        }
        got.clear();
    }
    for Started { port, queues } in ports {
        drop(queues);
        port.close()
            .and_then(|d| d.teardown())
            .map_err(|e| e.to_string())?;
    }
    rtts.sort_unstable();
    let pct = |p: f64| rtts[((rtts.len() - 1) as f64 * p).round() as usize];
    println!(
        "round trip over {} iterations of {size} bytes: min {} ns, p50 {} ns, p99 {} ns, max {} ns",
        rtts.len(),
        rtts[0],
        pct(0.5),
        pct(0.99),
        rtts[rtts.len() - 1]
    );
    println!(
        "summary: iterations={} p50_ns={} p99_ns={}",
        rtts.len(),
        pct(0.5),
        pct(0.99)
    );
    Ok(ExitCode::SUCCESS)
}
