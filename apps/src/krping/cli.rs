//! cxdirect-krping's command line.

use super::protocol::Options;
use super::run::SideSetup;
use super::srq::{DEFAULT_DEPTH, MAX_DEPTH};
use super::{DEFAULT_SIZE, MAX_SIZE, MIN_SIZE};
use crate::cli::{at_least_one, DeviceArgs, RUN, TRAFFIC};
use crate::rdma::endpoint::DEFAULT_PORT;
use crate::rdma::MemoryKind;
use clap::{Args, Parser};
use std::net::IpAddr;

/// Runs krping's RDMA READ / RDMA WRITE ping between a server and a client
#[derive(Parser, Debug)]
#[command(name = "cxdirect-krping", version)]
#[command(after_help = "\
SPEC: emu-pair runs the server on one port and the client on the other, in this process (no \
--server or --client). A PCI address runs one side, --server or --client, in this process; the \
two sides trade their endpoints over TCP (--address, --port) before they connect.")]
pub struct Cli {
    /// Which side this process runs.
    #[command(flatten)]
    pub role: RoleArgs,
    /// The port or ports.
    #[command(flatten)]
    pub devices: DeviceArgs,
    /// Buffer size in bytes (16..=16777216)
    #[arg(long, value_name = "N", default_value_t = DEFAULT_SIZE, value_parser = clap::value_parser!(u32).range(i64::from(MIN_SIZE)..=i64::from(MAX_SIZE)), help_heading = TRAFFIC)]
    pub size: u32,
    /// Pings to run (1..)
    #[arg(long, value_name = "N", default_value_t = 1000, value_parser = at_least_one(), help_heading = TRAFFIC)]
    pub count: u64,
    /// Memory the buffers are registered from: host, memfd, udmabuf or cuda
    #[arg(long, value_name = "KIND", value_enum, hide_possible_values = true, default_value_t = MemoryKind::Host, help_heading = TRAFFIC)]
    pub memory: MemoryKind,
    /// Receives on the shared receive queue each side takes its messages from, refilled on its
    /// limit event (armed at DEPTH / 4, at least 1); 0 receives on the queue pair's own receive
    /// queue (0..=1024)
    #[arg(long, value_name = "DEPTH", default_value_t = DEFAULT_DEPTH, value_parser = clap::value_parser!(u32).range(0..=i64::from(MAX_DEPTH)), help_heading = TRAFFIC)]
    pub srq: u32,
    /// Compare each buffer the server wrote back with the one the client sent
    #[arg(long, help_heading = RUN)]
    pub validate: bool,
    /// Print each ping's data (its first 64 bytes)
    #[arg(long, help_heading = RUN)]
    pub verbose: bool,
    /// Address the server listens on, and the client connects to, for the endpoint exchange
    #[arg(long, value_name = "IP", default_value = "127.0.0.1", help_heading = RUN)]
    pub address: IpAddr,
    /// TCP port of the endpoint exchange
    #[arg(long, value_name = "PORT", default_value_t = DEFAULT_PORT, help_heading = RUN)]
    pub port: u16,
}

/// `--server` or `--client`: which side a process runs.
#[derive(Args, Debug, Clone, Copy)]
#[group(multiple = false)]
pub struct RoleArgs {
    /// Run the server side: READ each ping from the client, WRITE it back
    #[arg(long)]
    pub server: bool,
    /// Run the client side: send pings, check what comes back
    #[arg(long)]
    pub client: bool,
}

/// What a command line asks to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Both sides in one process on the two ports of `emu-pair`.
    Pair,
    /// The server on the PCI function `spec`.
    Server(String),
    /// The client on the PCI function `spec`.
    Client(String),
}

impl Cli {
    /// What the options ask for, or why they do not fit together (a usage error).
    pub fn plan(&self) -> Result<Plan, String> {
        let [spec] = self.devices.devices.as_slice() else {
            return Err("--device: give one device (emu-pair, or a PCI address)".into());
        };
        match (spec.as_str(), self.role.server, self.role.client) {
            ("emu-pair", false, false) => Ok(Plan::Pair),
            ("emu-pair", _, _) => Err(
                "--device emu-pair runs both sides in this process: leave out --server and --client"
                    .into(),
            ),
            ("emu", _, _) => Err(
                "--device emu is one port looped back: give emu-pair, or a PCI address with \
                 --server or --client"
                    .into(),
            ),
            (_, true, false) => Ok(Plan::Server(spec.clone())),
            (_, false, true) => Ok(Plan::Client(spec.clone())),
            _ => Err(format!(
                "--device {spec}: say which side this process runs, --server or --client"
            )),
        }
    }

    /// How each side is set up: memory and receive queue.
    pub fn setup(&self) -> SideSetup {
        SideSetup {
            memory: self.memory,
            srq_depth: self.srq,
        }
    }

    /// The protocol options.
    pub fn options(&self) -> Options {
        Options {
            size: self.size,
            count: self.count,
            validate: self.validate,
            verbose: self.verbose,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::error::ErrorKind;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("cxdirect-krping").chain(args.iter().copied()))
    }

    #[test]
    fn emu_pair_runs_both_sides_with_rpings_defaults() {
        let cli = parse(&["--device", "emu-pair"]).unwrap();
        assert_eq!(cli.plan(), Ok(Plan::Pair));
        assert_eq!(
            cli.options(),
            Options {
                size: 64,
                count: 1000,
                validate: false,
                verbose: false
            }
        );
        assert_eq!(
            cli.setup(),
            SideSetup {
                memory: MemoryKind::Host,
                srq_depth: 16
            }
        );
        assert_eq!(cli.port, 18515);
        assert_eq!(cli.address.to_string(), "127.0.0.1");
    }

    #[test]
    fn a_pci_function_runs_the_side_it_is_told() {
        let cli = parse(&[
            "--server",
            "--device",
            "0000:06:00.0",
            "--size",
            "4096",
            "--count",
            "10000",
            "--validate",
            "--verbose",
            "--memory",
            "udmabuf",
            "--srq",
            "0",
        ])
        .unwrap();
        assert_eq!(cli.plan(), Ok(Plan::Server("0000:06:00.0".into())));
        assert_eq!(
            cli.options(),
            Options {
                size: 4096,
                count: 10000,
                validate: true,
                verbose: true
            }
        );
        assert_eq!(
            cli.setup(),
            SideSetup {
                memory: MemoryKind::Udmabuf,
                srq_depth: 0
            }
        );
        let cli = parse(&["--client", "--device", "06:00.1", "--port", "9999"]).unwrap();
        assert_eq!(cli.plan(), Ok(Plan::Client("06:00.1".into())));
        assert_eq!(cli.port, 9999);
    }

    #[test]
    fn roles_and_devices_that_do_not_fit_are_usage_errors() {
        let both = parse(&["--server", "--client", "--device", "emu-pair"]).unwrap_err();
        assert_eq!(both.kind(), ErrorKind::ArgumentConflict);
        for (args, says) in [
            (
                &["--server", "--device", "emu-pair"][..],
                "leave out --server",
            ),
            (&["--device", "06:00.0"][..], "--server or --client"),
            (&["--client", "--device", "emu"][..], "one port looped back"),
            (
                &["--device", "06:00.0", "--device", "06:00.1", "--server"][..],
                "give one device",
            ),
        ] {
            let msg = parse(args).unwrap().plan().unwrap_err();
            assert!(msg.contains(says), "{args:?}: {msg}");
        }
    }

    #[test]
    fn out_of_range_values_name_the_flag() {
        for (args, flag) in [
            (["--size", "15"], "--size"),
            (["--size", "16777217"], "--size"),
            (["--count", "0"], "--count"),
            (["--memory", "gpu"], "--memory"),
            (["--srq", "1025"], "--srq"),
        ] {
            let mut argv = vec!["--device", "emu-pair"];
            argv.extend(args);
            let e = parse(&argv).unwrap_err();
            assert_eq!(e.exit_code(), 2);
            assert!(e.to_string().contains(flag), "{args:?}: {e}");
        }
    }
}
