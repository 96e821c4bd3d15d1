//! cxdirect-krping: krping's RDMA READ / RDMA WRITE ping between a server and a client, on two
//! emulated ports in one process (`--device emu-pair`) or one side per process on PCI functions
//! that trade their endpoints over TCP. Each side takes its messages from a shallow shared
//! receive queue refilled on its limit event (`--srq DEPTH`; `--srq 0`: the queue pair's own
//! receive queue). Ends with `summary: count=N size=N validated=yes|no errors=N
//! usec_per_iter=X srq_limit_events=N`; exits 1 on any error or mismatch.

use clap::error::ErrorKind;
use clap::Parser;
use cxdirect_apps::cli::usage_error;
use cxdirect_apps::krping::cli::Cli;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let plan = match cli.plan() {
        Ok(plan) => plan,
        Err(msg) => return usage_error::<Cli>(ErrorKind::ArgumentConflict, msg),
    };
    match cxdirect_apps::krping::run::run(&cli, &plan) {
        Ok(summary) => {
            println!("{summary}");
            if summary.errors == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(msg) => {
            eprintln!("cxdirect-krping: {msg}");
            ExitCode::FAILURE
        }
    }
}
