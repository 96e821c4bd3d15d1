//! cxdirect-rdma-perf's command line.

use super::perftest::session::{Role, Test};
use super::{Mode, Op};
use crate::cli::{DeviceArgs, RUN, TRAFFIC};
use crate::rdma::endpoint::DEFAULT_PORT;
use clap::{Args, Parser};
use std::net::{IpAddr, Ipv4Addr};

/// perftest's default message size for bandwidth runs, in bytes (`DEF_SIZE_BW`).
pub const DEFAULT_BW_SIZE: u32 = 65536;
/// perftest's default message size for latency runs, in bytes (`DEF_SIZE_LAT`).
pub const DEFAULT_LAT_SIZE: u32 = 2;
/// perftest's default iterations for bandwidth runs (`DEF_ITERS_WB`).
pub const DEFAULT_BW_ITERS: u64 = 5000;
/// perftest's default iterations for latency runs (`DEF_ITERS`).
pub const DEFAULT_LAT_ITERS: u64 = 1000;
/// Fewest iterations perftest runs (`MIN_ITER`).
pub const MIN_ITERS: u64 = 5;
/// Largest message, in bytes (perftest's `MAX_SIZE`, 8 MiB).
pub const MAX_MESSAGE: u32 = 8 << 20;
/// Most inline bytes perftest asks for (`MAX_INLINE`).
pub const MAX_INLINE: u32 = 912;
/// Most queue pairs a run spreads its messages over.
pub const MAX_QPS: u16 = 16;

/// Measures RDMA WRITE, READ or SEND bandwidth or latency between two ports, as perftest does
#[derive(Parser, Debug)]
#[command(name = "cxdirect-rdma-perf", version)]
#[command(after_help = "\
SPEC: emu-pair, or two PCI addresses wired to each other: the first port is the requester, the \
second the responder, both in this process.

With --perftest the run speaks perftest's out-of-band exchange over TCP (port 18515; no -R), so \
that Linux's ib_write_bw, ib_read_bw, ib_send_bw (--mode bw) and ib_write_lat (--op write \
--mode lat) run against it, given -x GID_INDEX (RoCE v2 over IPv4) and the same -s, -n and -q: \
--server waits for perftest's client (`ib_write_bw -x 3 IP`), --client connects to perftest's \
server (`ib_write_bw -x 3`). One PCI address runs one side; the port's own IPv4 address (its \
GID) is --local-address; the port answers ARP and ICMP echo for it and finds the peer's MAC by \
ARP from the GID in its keys (--peer-mac gives it instead). The peer is told version 6.24. Give \
perftest --report_gbits: a bandwidth server prints the client's report in its units. With \
emu-pair, both sides run in this process, over loopback TCP.")]
pub struct Cli {
    /// The two ports.
    #[command(flatten)]
    pub devices: DeviceArgs,
    /// Operation to measure: write, read or send
    #[arg(long, value_name = "OP", value_enum, hide_possible_values = true, help_heading = TRAFFIC)]
    pub op: Op,
    /// What to measure: bw (bandwidth and message rate) or lat (latency)
    #[arg(long, value_name = "MODE", value_enum, hide_possible_values = true, help_heading = TRAFFIC)]
    pub mode: Mode,
    /// Message size in bytes (0..=8388608; default 65536 for bw, 2 for lat)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=i64::from(MAX_MESSAGE)), help_heading = TRAFFIC)]
    pub size: Option<u32>,
    /// Iterations (5..; default 5000 for bw, 1000 for lat)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(MIN_ITERS..), help_heading = RUN)]
    pub iters: Option<u64>,
    /// Send messages up to this many bytes inline in the WQE (0..=912; READ never inlines; default 220 for write, 236 for send, perftest's)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=i64::from(MAX_INLINE)), help_heading = TRAFFIC)]
    pub inline: Option<u32>,
    /// How requests are posted: prepared (checked once per run, as perftest prepares its work
    /// requests; the default) or general (each request built and checked whole by post_send)
    #[arg(long, value_name = "PATH", value_enum, default_value_t = PostPath::Prepared, hide_possible_values = true, help_heading = RUN)]
    pub post: PostPath,
    /// Queue pairs the messages are spread over (1..=16)
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=i64::from(MAX_QPS)), help_heading = TRAFFIC)]
    pub qps: u16,
    /// perftest's exchange and the side this process runs.
    #[command(flatten)]
    pub perftest: PerftestArgs,
}

/// How the in-process run posts its send requests.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PostPath {
    /// A request prepared once per queue pair (`RcQueuePair::prepare_send`), then posted with
    /// only what varies (`RcQueuePair::post_prepared`).
    #[default]
    Prepared,
    /// Every request built and checked whole (`RcQueuePair::post_send`).
    General,
}

/// The options of a run against perftest.
#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "Against perftest")]
pub struct PerftestArgs {
    /// Speak perftest's out-of-band exchange (version, keys with the GID, barriers, reports)
    /// instead of running both ports in this process
    #[arg(long)]
    pub perftest: bool,
    /// Wait for perftest's client (perftest run without a server name)
    #[arg(long, conflicts_with = "client")]
    pub server: bool,
    /// Connect to perftest's server at --address
    #[arg(long)]
    pub client: bool,
    /// With --client, the perftest server's TCP address; with --server, the address to listen
    /// on (all by default)
    #[arg(long, value_name = "IP")]
    pub address: Option<IpAddr>,
    /// The TCP port of the exchange
    #[arg(long, value_name = "PORT", default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// The port's own IPv4 address, its GID (192.168.78.1 client, .2 server on emu-pair)
    #[arg(long, value_name = "IP")]
    pub local_address: Option<Ipv4Addr>,
    /// The peer port's MAC address (aa:bb:cc:dd:ee:ff), instead of resolving it by ARP from
    /// the GID perftest's keys carry
    #[arg(long, value_name = "MAC", value_parser = parse_mac)]
    pub peer_mac: Option<[u8; 6]>,
}

/// Parses a MAC address written as six `:`-separated pairs of hex digits.
pub fn parse_mac(text: &str) -> Result<[u8; 6], String> {
    let bad = || format!("`{text}` is not a MAC address (aa:bb:cc:dd:ee:ff)");
    let parts: Vec<&str> = text.split(':').collect();
    if parts.len() != 6 {
        return Err(bad());
    }
    let mut mac = [0u8; 6];
    for (byte, part) in mac.iter_mut().zip(parts) {
        if part.len() != 2 || !part.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad());
        }
        *byte = u8::from_str_radix(part, 16).map_err(|_| bad())?;
    }
    Ok(mac)
}

/// Where the sides of a perftest-exchange run are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PerftestSides {
    /// Both, on emu-pair's two ports, over loopback TCP.
    Pair,
    /// One, on a PCI function, in `role`.
    One(Role),
}

/// A run against perftest, with every default settled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PerftestPlan {
    /// The perftest program of the other side.
    pub test: Test,
    /// Where the sides are.
    pub sides: PerftestSides,
    /// The TCP address: the server's (client), the one listened on (server).
    pub address: IpAddr,
    /// The TCP port.
    pub port: u16,
    /// The port's own address, on a PCI function.
    pub local_address: Option<Ipv4Addr>,
    /// The peer's MAC, on a PCI function.
    pub peer_mac: Option<[u8; 6]>,
}

/// A run, with every default settled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The operation.
    pub op: Op,
    /// Bandwidth or latency.
    pub mode: Mode,
    /// Message size in bytes.
    pub size: u32,
    /// Iterations (per queue pair in bandwidth runs).
    pub iters: u64,
    /// Largest message sent inline, in bytes (0: none).
    pub inline: u32,
    /// Queue pairs.
    pub qps: u16,
}

impl Cli {
    /// The run the options ask for, or why they do not fit together (a usage error).
    pub fn plan(&self) -> Result<Plan, String> {
        if self.perftest.perftest {
            self.perftest_plan()?;
        } else {
            let p = &self.perftest;
            if p.server
                || p.client
                || p.address.is_some()
                || p.local_address.is_some()
                || p.peer_mac.is_some()
                || p.port != DEFAULT_PORT
            {
                return Err(
                    "--server, --client, --address, --port, --local-address and \
                     --peer-mac are for --perftest"
                        .into(),
                );
            }
        }
        match self.devices.devices.as_slice() {
            [one] if self.perftest.perftest && one != "emu" => {}
            [one] if one == "emu-pair" => {}
            [a, b] if a != "emu" && a != "emu-pair" && b != "emu" && b != "emu-pair" => {}
            _ => {
                return Err(
                    "--device: give emu-pair, or two PCI addresses wired to each other".into(),
                )
            }
        }
        if self.mode == Mode::Lat && self.qps > 1 {
            return Err("--qps: a latency run times one queue pair".into());
        }
        let inline = match (self.op, self.inline) {
            (Op::Read, Some(n)) if n > 0 => {
                return Err("--inline: an RDMA READ carries no data to inline".into())
            }
            (Op::Read, _) => 0,
            (_, Some(n)) => n,
            (Op::Write, None) => 220,
            (Op::Send, None) => 236,
        };
        let (size, iters) = match self.mode {
            Mode::Bw => (DEFAULT_BW_SIZE, DEFAULT_BW_ITERS),
            Mode::Lat => (DEFAULT_LAT_SIZE, DEFAULT_LAT_ITERS),
        };
        Ok(Plan {
            op: self.op,
            mode: self.mode,
            size: self.size.unwrap_or(size),
            iters: self.iters.unwrap_or(iters),
            inline,
            qps: self.qps,
        })
    }

    /// The run against perftest the options ask for (`None` without `--perftest`), or why
    /// they do not fit together.
    pub fn perftest_plan(&self) -> Result<Option<PerftestPlan>, String> {
        let p = &self.perftest;
        if !p.perftest {
            return Ok(None);
        }
        let test = match (self.op, self.mode) {
            (Op::Write, Mode::Bw) => Test::WriteBw,
            (Op::Read, Mode::Bw) => Test::ReadBw,
            (Op::Send, Mode::Bw) => Test::SendBw,
            (Op::Write, Mode::Lat) => Test::WriteLat,
            _ => {
                return Err(
                    "--perftest: ib_write_bw, ib_read_bw, ib_send_bw (--mode bw) or \
                     ib_write_lat (--op write --mode lat)"
                        .into(),
                )
            }
        };
        let sides = match (self.devices.devices.as_slice(), p.server, p.client) {
            ([one], false, false) if one == "emu-pair" => PerftestSides::Pair,
            ([one], _, _) if one == "emu-pair" => {
                return Err(
                    "--perftest on emu-pair runs both sides: no --server or --client".into(),
                )
            }
            ([one], true, false) if one != "emu" => PerftestSides::One(Role::Server),
            ([one], false, true) if one != "emu" => PerftestSides::One(Role::Client),
            ([one], false, false) if one != "emu" => {
                return Err("--perftest on a PCI function: give --server or --client".into())
            }
            _ => {
                return Err(
                    "--perftest: give emu-pair, or one PCI address with --server or \
                     --client"
                        .into(),
                )
            }
        };
        let address = match (sides, p.address) {
            (PerftestSides::One(Role::Client), None) => {
                return Err("--perftest --client: give the perftest server's --address".into())
            }
            (PerftestSides::Pair, _) => IpAddr::V4(Ipv4Addr::LOCALHOST),
            (_, Some(a)) => a,
            (_, None) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        };
        if let PerftestSides::One(_) = sides {
            if p.local_address.is_none() {
                return Err("--perftest on a PCI function: give the port's --local-address".into());
            }
        }
        if test == Test::WriteLat && self.size == Some(0) {
            return Err("--size: a WRITE latency run needs a message of a byte or more".into());
        }
        Ok(Some(PerftestPlan {
            test,
            sides,
            address,
            port: p.port,
            local_address: p.local_address,
            peer_mac: p.peer_mac,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("cxdirect-rdma-perf").chain(args.iter().copied()))
    }

    #[test]
    fn defaults_are_perftests_for_the_mode_and_op() {
        let bw = parse(&["--device", "emu-pair", "--op", "write", "--mode", "bw"]).unwrap();
        assert_eq!(
            bw.plan(),
            Ok(Plan {
                op: Op::Write,
                mode: Mode::Bw,
                size: 65536,
                iters: 5000,
                inline: 220,
                qps: 1
            })
        );
        let lat = parse(&["--device", "emu-pair", "--op", "send", "--mode", "lat"]).unwrap();
        let plan = lat.plan().unwrap();
        assert_eq!((plan.size, plan.iters, plan.inline), (2, 1000, 236));
        let read = parse(&["--device", "emu-pair", "--op", "read", "--mode", "lat"]).unwrap();
        assert_eq!(read.plan().unwrap().inline, 0);
    }

    #[test]
    fn every_option_is_taken() {
        let cli = parse(&[
            "--device", "06:00.0", "--device", "06:00.1", "--op", "send", "--mode", "bw", "--size",
            "64", "--iters", "100000", "--inline", "0", "--qps", "4",
        ])
        .unwrap();
        assert_eq!(
            cli.plan(),
            Ok(Plan {
                op: Op::Send,
                mode: Mode::Bw,
                size: 64,
                iters: 100000,
                inline: 0,
                qps: 4
            })
        );
    }

    #[test]
    fn combinations_that_cannot_run_are_usage_errors() {
        for (args, says) in [
            (&["--device", "emu"][..], "emu-pair, or two PCI"),
            (&["--device", "06:00.0"][..], "emu-pair, or two PCI"),
            (
                &["--device", "emu-pair", "--device", "06:00.0"][..],
                "emu-pair, or two PCI",
            ),
            (
                &["--device", "emu-pair", "--qps", "2"][..],
                "latency run times one",
            ),
        ] {
            let mut argv = args.to_vec();
            argv.extend(["--op", "write", "--mode", "lat"]);
            let msg = parse(&argv).unwrap().plan().unwrap_err();
            assert!(msg.contains(says), "{args:?}: {msg}");
        }
        let read_inline = parse(&[
            "--device", "emu-pair", "--op", "read", "--mode", "bw", "--inline", "64",
        ])
        .unwrap();
        assert!(read_inline
            .plan()
            .unwrap_err()
            .contains("no data to inline"));
    }

    #[test]
    fn perftest_sides_and_their_addresses() {
        let server = parse(&[
            "--device",
            "06:00.0",
            "--perftest",
            "--server",
            "--op",
            "read",
            "--mode",
            "bw",
            "--local-address",
            "192.168.77.1",
            "--peer-mac",
            "02:00:00:00:00:0b",
        ])
        .unwrap();
        assert!(server.plan().is_ok());
        assert_eq!(
            server.perftest_plan(),
            Ok(Some(PerftestPlan {
                test: Test::ReadBw,
                sides: PerftestSides::One(Role::Server),
                address: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                port: 18515,
                local_address: Some(Ipv4Addr::new(192, 168, 77, 1)),
                peer_mac: Some([2, 0, 0, 0, 0, 0x0b]),
            }))
        );
        let client = parse(&[
            "--device",
            "06:00.0",
            "--perftest",
            "--client",
            "--address",
            "10.0.0.2",
            "--port",
            "5000",
            "--op",
            "write",
            "--mode",
            "lat",
            "--local-address",
            "192.168.77.1",
            "--peer-mac",
            "02:00:00:00:00:0b",
        ])
        .unwrap();
        let p = client.perftest_plan().unwrap().unwrap();
        assert_eq!(
            (p.test, p.sides, p.address, p.port),
            (
                Test::WriteLat,
                PerftestSides::One(Role::Client),
                "10.0.0.2".parse().unwrap(),
                5000
            )
        );
        let pair = parse(&[
            "--device",
            "emu-pair",
            "--perftest",
            "--op",
            "send",
            "--mode",
            "bw",
        ])
        .unwrap();
        let p = pair.perftest_plan().unwrap().unwrap();
        assert_eq!((p.test, p.sides), (Test::SendBw, PerftestSides::Pair));
        assert_eq!(
            parse(&["--device", "emu-pair", "--op", "send", "--mode", "bw"])
                .unwrap()
                .perftest_plan(),
            Ok(None)
        );
        for bad in [
            "02:00:00:00:00",
            "02:00:00:00:00:0g",
            "02:00:00:00:00:00:00",
            "0200.0000.0000",
        ] {
            assert!(parse_mac(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn out_of_range_values_name_the_flag() {
        for (args, flag) in [
            (&["--iters", "4"][..], "--iters"),
            (&["--size", "8388609"][..], "--size"),
            (&["--inline", "913"][..], "--inline"),
            (&["--qps", "0"][..], "--qps"),
            (&["--qps", "17"][..], "--qps"),
        ] {
            let mut argv = vec!["--device", "emu-pair", "--op", "write", "--mode", "bw"];
            argv.extend(args);
            let e = parse(&argv).unwrap_err();
            assert_eq!(e.exit_code(), 2);
            assert!(e.to_string().contains(flag), "{args:?}: {e}");
        }
        let e = parse(&["--device", "emu-pair", "--mode", "bw"]).unwrap_err();
        assert!(e.to_string().contains("--op"), "{e}");
    }
}
