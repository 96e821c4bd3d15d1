//! cxdirect-devbind: list NVIDIA ConnectX PCI functions with their driver and IOMMU group, and
//! bind them to vfio-pci or unbind them. See [`cxdirect_apps::devbind`].
//!
//! Exit status: 0 on success, 1 on an error (message on stderr), 2 on a usage error.

use clap::{ArgGroup, Parser};
use cxdirect_apps::devbind::{Bdf, DevbindError, Sysfs, Warning, DEFAULT_SYSFS_ROOT};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// Help heading of the three things the program does.
const ACTIONS: &str = "Actions (one at most; --status is the default)";

/// Lists NVIDIA ConnectX PCI functions, or moves one between its kernel driver and vfio-pci
#[derive(Parser, Debug)]
#[command(name = "cxdirect-devbind", version)]
#[command(group(ArgGroup::new("action").args(["status", "bind", "unbind"])))]
#[command(group(ArgGroup::new("function").args(["bind", "unbind"])))]
#[command(after_help = "BDF is a PCI address such as 0000:06:00.0 or 06:00.0.")]
struct Cli {
    /// List ConnectX functions (address, model, driver, IOMMU group, interfaces), then whether the IOMMU is on
    #[arg(short, long, help_heading = ACTIONS)]
    status: bool,
    /// Bind the function to vfio-pci
    #[arg(short, long, value_name = "BDF", help_heading = ACTIONS)]
    bind: Option<Bdf>,
    /// Unbind the function from its driver and clear its driver_override
    #[arg(short, long, value_name = "BDF", help_heading = ACTIONS)]
    unbind: Option<Bdf>,
    /// With --bind or --unbind: go ahead although the function carries a network interface that is up
    #[arg(long, requires = "function")]
    force: bool,
    /// Where sysfs is mounted
    #[arg(long, value_name = "PATH", default_value = DEFAULT_SYSFS_ROOT)]
    sysfs: PathBuf,
}

/// Writes to stdout, ignoring a closed pipe (`cxdirect-devbind | head`).
fn say(text: &str) {
    let _ = writeln!(std::io::stdout().lock(), "{text}");
}

fn warn(warnings: &[Warning]) {
    for warning in warnings {
        eprintln!("cxdirect-devbind: warning: {warning}");
    }
}

fn fail(error: &DevbindError) -> ExitCode {
    eprintln!("cxdirect-devbind: error: {error}");
    ExitCode::from(1)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let sysfs = Sysfs::new(cli.sysfs);
    match (cli.bind, cli.unbind) {
        (None, None) => match sysfs.status() {
            Ok(status) => {
                say(&status.to_string());
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e),
        },
        (Some(bdf), _) => {
            let report = match sysfs.bind_vfio(bdf, cli.force) {
                Ok(report) => report,
                Err(e) => return fail(&e),
            };
            warn(&report.warnings);
            if report.is_bound() {
                say(&report.to_string());
                ExitCode::SUCCESS
            } else {
                eprintln!("cxdirect-devbind: error: {report}");
                ExitCode::from(1)
            }
        }
        (None, Some(bdf)) => match sysfs.unbind(bdf, cli.force) {
            Ok(report) => {
                warn(&report.warnings);
                say(&report.to_string());
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e),
        },
    }
}
