//! cxdirect-rdma-perf: RDMA WRITE, READ or SEND bandwidth or latency between two ports, in
//! perftest's columns, ending with a `summary:` line. Both ports in this process by default;
//! with `--perftest`, one side against Linux's perftest (`ib_write_bw`, `ib_read_bw`,
//! `ib_send_bw`, `ib_write_lat` run with `-x GID_INDEX`) over perftest's TCP exchange.

use clap::error::ErrorKind;
use clap::Parser;
use cxdirect_apps::cli::usage_error;
use cxdirect_apps::rdma_perf::cli::Cli;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let plan = match cli.plan() {
        Ok(plan) => plan,
        Err(msg) => return usage_error::<Cli>(ErrorKind::ArgumentConflict, msg),
    };
    match cxdirect_apps::rdma_perf::run::run(&cli, &plan) {
        Ok(lines) => {
            for line in lines {
                println!("{line}");
            }
            ExitCode::SUCCESS
        }
        Err(msg) => {
            eprintln!("cxdirect-rdma-perf: {msg}");
            ExitCode::FAILURE
        }
    }
}
