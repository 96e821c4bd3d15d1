//! cxdirect-pingpong: round-trip latency between two ports. Port 0 sends one packet, port 1
//! echoes it back, port 0 times the round trip; repeated `--iterations` times. Prints min, p50,
//! p99 and max, and ends with `summary: iterations=N p50_ns=X p99_ns=X`.

use cxdirect::{Backend, Device, InlineMode, Mbuf, Options, Port, PortConfig, Started};
use cxdirect_apps::args::Args;
use cxdirect_apps::emulated::{open_emulated, Spec};
use cxdirect_apps::poll_rx;
use cxdirect_apps::testpmd::{build, HEADER_LEN, MIN_LEN};
use std::process::ExitCode;
use std::time::{Duration, Instant};

const USAGE: &str =
    "usage: cxdirect-pingpong --device SPEC [--device SPEC] [--size N] [--iterations N]
       [--inline on|off] [--blueflame on|off] [--emu-exec inline|threaded|polling] [--iommu-mode MODE]
  SPEC: emu-pair, or two PCI addresses wired to each other";

fn main() -> ExitCode {
    match real_main() {
        Ok(code) => code,
        Err(msg) => {
            eprintln!("cxdirect-pingpong: {msg}");
            ExitCode::FAILURE
        }
    }
}

fn on_off(args: &Args, name: &str) -> Result<bool, String> {
    match args.get(name).unwrap_or("on") {
        "on" => Ok(true),
        "off" => Ok(false),
        other => Err(format!("--{name} `{other}`: use on or off")),
    }
}

fn real_main() -> Result<ExitCode, String> {
    let args = Args::parse(std::env::args().skip(1), &["help"])?;
    if args.flag("help") {
        println!("{USAGE}");
        return Ok(ExitCode::SUCCESS);
    }
    let known = [
        "device",
        "size",
        "iterations",
        "inline",
        "blueflame",
        "emu-exec",
        "iommu-mode",
    ];
    if let Some(unknown) = args.unknown(&known, &["help"]).first() {
        eprintln!("cxdirect-pingpong: unknown option --{unknown}\n{USAGE}");
        return Ok(ExitCode::from(2));
    }
    let size: usize = args.parse_or("size", 64usize)?;
    if !(MIN_LEN..=1514).contains(&size) {
        return Err(format!("--size must be {MIN_LEN}..=1514 bytes"));
    }
    let iterations: usize = args.parse_or("iterations", 10_000usize)?;
    if iterations == 0 {
        return Err("--iterations must be at least 1".into());
    }
    let config = PortConfig {
        ring_size: 256,
        pool_buffers: 2048,
        inline: if on_off(&args, "inline")? {
            InlineMode::Full
        } else {
            InlineMode::None
        },
        blueflame: on_off(&args, "blueflame")?,
        cqe_every: 1,
        ..PortConfig::default()
    };
    let model = cxdirect_apps::emu_config(args.get("emu-exec").unwrap_or("threaded"))?;
    let specs: Vec<Spec> = args.all("device").iter().map(|s| Spec::parse(s)).collect();
    match specs.as_slice() {
        [Spec::EmuPair] => {
            let backends = open_emulated(&Spec::EmuPair, model);
            run(backends, &config, size, iterations)
        }
        [Spec::Pci(a), Spec::Pci(b)] => {
            let mode = args.get("iommu-mode").unwrap_or("auto");
            let backends = vec![
                cxdirect_apps::vfio_open(a, mode).map_err(|e| format!("{a}: {e}"))?,
                cxdirect_apps::vfio_open(b, mode).map_err(|e| format!("{b}: {e}"))?,
            ];
            run(backends, &config, size, iterations)
        }
        _ => Err(format!(
            "give --device emu-pair, or two PCI addresses\n{USAGE}"
        )),
    }
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
