//! `cxdirect-emu-server`: the cxdirect ConnectX-6 Dx device model served to QEMU over vfio-user.
//!
//! ```text
//! cxdirect-emu-server --socket PATH [--socket PATH2] [--wire loopback|none|pair:OTHER.sock]
//!                     [--pcap FILE] [--mac XX:XX:XX:XX:XX:XX]... [--roce]
//!                     [--trace-commands FILE] [-v|-vv]
//! ```
//!
//! QEMU (10.1 or later) attaches a served function with
//! `-device '{"driver":"vfio-user-pci","x-msg-timeout":60000,"socket":{"type":"unix","path":"PATH"}}'`
//! (a BAR read waits behind the posted writes QEMU holds, longer than its default 5 s under a
//! guest posting at full rate); guest memory
//! must be a shared memory backend (`-object memory-backend-memfd,id=mem,size=512M,share=on
//! -machine q35,memory-backend=mem`) so that DMA regions arrive as file descriptors.
//!
//! Exit status: 0 when the clients disconnected, 1 when a session failed (a protocol error, a
//! socket that could not be served), 2 for a bad command line. See [`server`] for how the device
//! is served.

use cxdirect_emu::server;
use server::cli::{self, Command};
use server::logger::{self, PROGRAM};
use std::process::ExitCode;

fn main() -> ExitCode {
    let options = match cli::parse(std::env::args_os().skip(1)) {
        Ok(Command::Run(options)) => options,
        Ok(Command::Help) => {
            println!("{}", cli::USAGE);
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("{PROGRAM}: {e}\n{PROGRAM}: try --help");
            return ExitCode::from(2);
        }
    };
    logger::install(options.verbosity);
    // A panic (the vfio_user crate's, on malformed client input) is caught per session and
    // reported there; print it as one line rather than a backtrace.
    std::panic::set_hook(Box::new(|info| {
        let thread = std::thread::current();
        let name = thread.name().unwrap_or("?");
        let location = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!("{PROGRAM}: error: panic in thread {name}{location}");
    }));
    match server::app::run(&options) {
        Ok(summary) if summary.is_clean() => {
            log::info!("exiting: every client has disconnected");
            ExitCode::SUCCESS
        }
        Ok(_) => {
            log::error!("exiting: a session failed (see above)");
            ExitCode::from(1)
        }
        Err(e) => {
            log::error!("{e}");
            ExitCode::from(1)
        }
    }
}
