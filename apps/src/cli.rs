//! What the port programs (`cxdirect-testpmd`, `cxdirect-shared-rx`, `cxdirect-dmabuf-rx`)
//! share on the command line: parsing with `--help` and unknown-option checks, usage errors
//! (exit status 2), opening the `--device` ports and running on whichever backend they are.

use crate::args::Args;
use crate::{open_ports, OpenError, Ports};
use cxdirect::Backend;
use std::process::ExitCode;

/// A program's name and usage text.
#[derive(Debug, Clone, Copy)]
pub struct Cli {
    /// Program name, prefixed to its messages.
    pub name: &'static str,
    /// The usage text printed with `--help` and after a usage error.
    pub usage: &'static str,
}

/// What a program does once its ports are open, on any backend.
pub trait RunOnPorts {
    /// Runs on the opened `backends` (one or two, receiving last).
    fn run<B: Backend>(&self, backends: Vec<B>) -> Result<ExitCode, String>;
}

impl Cli {
    /// Prints `msg` and the usage; exit status 2.
    pub fn usage_error(&self, msg: &str) -> ExitCode {
        eprintln!("{}: {msg}\n{}", self.name, self.usage);
        ExitCode::from(2)
    }

    /// Parses the process arguments: `flags` take no value, `options` do. `Err` carries the
    /// exit status when the program should stop here (`--help`, or a usage error).
    pub fn parse(&self, flags: &[&str], options: &[&str]) -> Result<Args, ExitCode> {
        let args =
            Args::parse(std::env::args().skip(1), flags).map_err(|e| self.usage_error(&e))?;
        if args.flag("help") {
            println!("{}", self.usage);
            return Err(ExitCode::SUCCESS);
        }
        if let Some(unknown) = args.unknown(options, flags).first() {
            return Err(self.usage_error(&format!("unknown option --{unknown}")));
        }
        Ok(args)
    }

    /// Opens the `--device` ports (with `--emu-exec` and `--iommu-mode`) and runs `program`.
    pub fn run_on_ports(&self, args: &Args, program: &impl RunOnPorts) -> ExitCode {
        let opened = open_ports(
            args.all("device"),
            args.get("emu-exec").unwrap_or("threaded"),
            args.get("iommu-mode").unwrap_or("auto"),
        );
        let outcome = match opened {
            Ok(Ports::Emulated(backends)) => program.run(backends),
            Ok(Ports::Pci(backends)) => program.run(backends),
            Err(OpenError::Usage(msg)) => return self.usage_error(&msg),
            Err(OpenError::Open(msg)) => Err(msg),
        };
        outcome.unwrap_or_else(|msg| {
            eprintln!("{}: {msg}", self.name);
            ExitCode::FAILURE
        })
    }
}
