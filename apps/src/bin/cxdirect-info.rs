//! cxdirect-info: brings a ConnectX function up, prints what it learned (firmware, command
//! interface, capabilities, port, firmware pages, bring-up time), tears it down, and ends with a
//! machine-readable `summary:` line per device.

use clap::Parser;
use cxdirect::{Backend, Device, DriverError, Options};
use cxdirect_apps::cli::{self, DeviceArgs, RUN};
use cxdirect_apps::emulated::{open_emulated, Spec};
use std::process::ExitCode;
use std::time::Duration;

/// Brings ConnectX functions up, reports what they offer, and tears them down
#[derive(Parser, Debug)]
#[command(name = "cxdirect-info", version)]
// Bring-up is timed: by default the model answers commands within the doorbell write.
#[command(mut_arg("emu_exec", |arg| arg.default_value("inline")))]
#[command(
    after_help = "SPEC: emu | emu-pair | PCI address such as 0000:06:00.0; give as many as wanted."
)]
struct Cli {
    #[command(flatten)]
    devices: DeviceArgs,
    /// How long the device may take to leave its initializing state, in milliseconds (1..)
    #[arg(long, value_name = "MS", default_value_t = 120_000, value_parser = cli::at_least_one(), help_heading = RUN)]
    init_timeout_ms: u64,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let options = Options {
        init_timeout: Duration::from_millis(cli.init_timeout_ms),
        ..Options::default()
    };
    let mut failed = false;
    for spec in &cli.devices.devices {
        let parsed = Spec::parse(spec);
        match &parsed {
            Spec::Emu | Spec::EmuPair => {
                for backend in open_emulated(&parsed, cli.devices.emu_config()) {
                    let name = backend.name();
                    failed |= report(&name, Device::bring_up(backend, options.clone())).is_err();
                }
            }
            Spec::Pci(pci) => {
                let spec = cxdirect_apps::with_iommu_mode(pci, cli.devices.iommu_mode.as_str());
                failed |= report(pci, Device::open(&spec, options.clone())).is_err();
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn report<B: Backend>(name: &str, opened: Result<Device<B>, DriverError>) -> Result<(), ()> {
    let mut dev = match opened {
        Ok(d) => d,
        Err(e) => {
            eprintln!("cxdirect-info: {name}: {e}");
            return Err(());
        }
    };
    // Bring-up polls the event queue as well as waiting on its vector, so it can finish with
    // command events taken while their MSI-X messages are still on their way (a loaded or
    // emulated machine): give the vector a moment to fire before reporting the count.
    if dev.info().async_interrupts == 0 && dev.event_counts().cmd > 0 && dev.msix_vectors() > 0 {
        dev.wait_event(Duration::from_secs(1));
    }
    let info = dev.info().clone();
    let caps = dev.caps();
    let eth = dev.eth_caps();
    let (fw_major, fw_minor, fw_sub) = info.fw_version;
    let mac = info
        .mac
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":");
    println!("device {name}");
    println!(
        "  firmware        {fw_major}.{fw_minor}.{fw_sub}, command interface revision {}",
        info.cmdif_rev
    );
    println!(
        "  queues          EQ 2^{} x 2^{}, CQ 2^{} x 2^{}, SQ 2^{}, RQ 2^{}, RMP 2^{}, WQ size 2^{}, mkeys 2^{}",
        caps.log_max_eq(),
        caps.log_max_eq_sz(),
        caps.log_max_cq(),
        caps.log_max_cq_sz(),
        caps.log_max_sq(),
        caps.log_max_rq(),
        caps.log_max_rmp(),
        caps.log_max_wq_sz(),
        caps.log_max_mkey()
    );
    println!(
        "  device          ports {}, CQE version {}, BlueFlame {} ({}-byte registers), max send WQE {} B",
        caps.num_ports(),
        caps.cqe_version(),
        if caps.bf() { "yes" } else { "no" },
        1u32 << caps.log_bf_reg_size(),
        caps.max_wqe_sz_sq()
    );
    println!(
        "  offloads        checksum {}, VLAN insert {}, LSO {}, inline mode {}",
        yes(eth.csum_cap()),
        yes(eth.wqe_vlan_insert()),
        if eth.max_lso_cap() > 0 { "yes" } else { "no" },
        match eth.wqe_inline_mode() {
            0 => "L2 required",
            1 => "per vport",
            _ => "not required",
        }
    );
    println!(
        "  port            MAC {mac}, link {}, MTU {}",
        if info.link_up { "up" } else { "down" },
        info.port_mtu
    );
    println!(
        "  firmware pages  boot {}, init {}, regular {}, held {}",
        info.pages_boot,
        info.pages_init,
        info.pages_regular,
        dev.pages_held()
    );
    let bringup_ms = info.bringup.as_secs_f64() * 1000.0;
    println!("  bring-up        {bringup_ms:.3} ms");
    let events = dev.event_counts();
    println!(
        "  interrupts      {} on the async vector ({} command events)",
        info.async_interrupts, events.cmd
    );
    match dev.teardown() {
        Ok(t) => println!(
            "  teardown        {} pages reclaimed, {} taken back by a function reset, {} kept by \
             the device",
            t.pages_reclaimed, t.pages_released_by_reset, t.pages_kept
        ),
        Err(e) => {
            eprintln!("cxdirect-info: {name}: teardown failed: {e}");
            return Err(());
        }
    }
    println!(
        "summary: fw={fw_major}.{fw_minor}.{fw_sub} cmdif={} pages_boot={} pages_init={} pages_regular={} bringup_ms={bringup_ms:.3} interrupts={}",
        info.cmdif_rev, info.pages_boot, info.pages_init, info.pages_regular, info.async_interrupts
    );
    Ok(())
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}
