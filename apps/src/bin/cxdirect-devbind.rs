//! cxdirect-devbind: list NVIDIA ConnectX PCI functions with their driver and IOMMU group, and
//! bind them to vfio-pci or unbind them. See [`cxdirect_apps::devbind`].
//!
//! Exit status: 0 on success, 1 on an error (message on stderr), 2 on a usage error.

use cxdirect_apps::devbind::{Bdf, DevbindError, Sysfs, Warning, DEFAULT_SYSFS_ROOT};
use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "\
Usage: cxdirect-devbind [--status] [--sysfs PATH]
       cxdirect-devbind --bind BDF [--force] [--sysfs PATH]
       cxdirect-devbind --unbind BDF [--force] [--sysfs PATH]

List NVIDIA ConnectX PCI functions, or move one between its kernel driver and vfio-pci.

  -s, --status       list ConnectX functions: address, model, driver, IOMMU group,
                     network interfaces; then whether the IOMMU is on (the default)
  -b, --bind BDF     bind the function to vfio-pci
  -u, --unbind BDF   unbind the function from its driver and clear its driver_override
      --force        go ahead even though the function carries a network interface that is up
      --sysfs PATH   where sysfs is mounted (default /sys)
  -h, --help         show this text

BDF is a PCI address such as 0000:06:00.0 or 06:00.0.";

/// What to do.
enum Command {
    Status,
    Bind(String),
    Unbind(String),
}

/// The parsed command line.
struct Options {
    command: Command,
    force: bool,
    sysfs: PathBuf,
}

/// Parses the arguments (without the program name); `Ok(None)` asks for the help text.
fn parse_args(args: impl IntoIterator<Item = OsString>) -> Result<Option<Options>, String> {
    let mut args = args.into_iter();
    let mut command = None;
    let mut force = false;
    let mut sysfs = None;
    while let Some(arg) = args.next() {
        let Some(arg) = arg.to_str().map(str::to_string) else {
            return Err(format!("unexpected argument {arg:?}"));
        };
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => (flag.to_string(), Some(value)),
            _ => (arg.clone(), None),
        };
        let mut value = |name: &str| -> Result<OsString, String> {
            match inline {
                Some(v) => Ok(OsString::from(v)),
                None => match args.next() {
                    Some(v) if !v.to_string_lossy().starts_with('-') => Ok(v),
                    _ => Err(format!("{name} needs a value")),
                },
            }
        };
        let new_command = match flag.as_str() {
            "-h" | "--help" => return Ok(None),
            "-s" | "--status" if inline.is_none() => Some(Command::Status),
            "-b" | "--bind" => Some(Command::Bind(utf8(value("--bind")?, "--bind")?)),
            "-u" | "--unbind" => Some(Command::Unbind(utf8(value("--unbind")?, "--unbind")?)),
            "--force" if inline.is_none() => {
                force = true;
                None
            }
            "--sysfs" => {
                if sysfs.is_some() {
                    return Err("--sysfs given twice".to_string());
                }
                sysfs = Some(PathBuf::from(value("--sysfs")?));
                None
            }
            _ => return Err(format!("unexpected argument '{arg}'")),
        };
        if let Some(new_command) = new_command {
            if command.is_some() {
                return Err("give one of --status, --bind and --unbind".to_string());
            }
            command = Some(new_command);
        }
    }
    let command = command.unwrap_or(Command::Status);
    if force && matches!(command, Command::Status) {
        return Err("--force goes with --bind or --unbind".to_string());
    }
    Ok(Some(Options {
        command,
        force,
        sysfs: sysfs.unwrap_or_else(|| PathBuf::from(DEFAULT_SYSFS_ROOT)),
    }))
}

fn utf8(value: OsString, flag: &str) -> Result<String, String> {
    value
        .into_string()
        .map_err(|v| format!("{flag} value {v:?} is not a PCI address"))
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
    let options = match parse_args(std::env::args_os().skip(1)) {
        Ok(Some(options)) => options,
        Ok(None) => {
            say(USAGE);
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("cxdirect-devbind: {message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let sysfs = Sysfs::new(options.sysfs);
    match options.command {
        Command::Status => match sysfs.status() {
            Ok(status) => {
                say(&status.to_string());
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e),
        },
        Command::Bind(text) => {
            let report = match Bdf::parse(&text).and_then(|bdf| sysfs.bind_vfio(bdf, options.force))
            {
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
        Command::Unbind(text) => {
            match Bdf::parse(&text).and_then(|bdf| sysfs.unbind(bdf, options.force)) {
                Ok(report) => {
                    warn(&report.warnings);
                    say(&report.to_string());
                    ExitCode::SUCCESS
                }
                Err(e) => fail(&e),
            }
        }
    }
}
