//! cxdirect-krping's command line.

use super::protocol::Options;
use super::run::{CmSettings, Rendezvous, SideSetup, CLIENT_ADDRESS, SERVER_ADDRESS};
use super::srq::{DEFAULT_DEPTH, MAX_DEPTH};
use super::{DEFAULT_SIZE, MAX_SIZE, MIN_SIZE};
use crate::cli::{at_least_one, DeviceArgs, RUN, TRAFFIC};
use crate::rdma::cm_link::RPING_PORT;
use crate::rdma::endpoint::DEFAULT_PORT;
use crate::rdma::MemoryKind;
use clap::{Args, Parser, ValueEnum};
use std::net::{IpAddr, Ipv4Addr};

/// Runs krping's RDMA READ / RDMA WRITE ping between a server and a client
#[derive(Parser, Debug)]
#[command(name = "cxdirect-krping", version)]
#[command(after_help = "\
SPEC: emu-pair runs the server on one port and the client on the other, in this process (no \
--server or --client; with --connect-by cm they connect through the connection manager). A PCI \
address runs one side, --server or --client, in this process, connected as rping connects by \
default (--connect-by cm): the server listens on its own IP address (--address) and CM port \
(--port, 7174), the client (its own IP address given by --local-address) sends a CM REQ there, \
and each finds the other's MAC by ARP (each answers ARP and ICMP echo for its own address; --peer-mac gives the MAC instead). With --connect-by tcp the two sides trade their \
endpoints over TCP (--address, --port 18515) instead.")]
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
    /// How the sides connect: cm (the RDMA connection manager, as rping; the default on a PCI
    /// function) or tcp (endpoints traded over TCP)
    #[arg(long, value_name = "HOW", value_enum, hide_possible_values = true, help_heading = RUN)]
    pub connect_by: Option<ConnectBy>,
    /// The server's IP address: with cm, the server function's own (its GID; 192.168.77.1 on
    /// emu-pair), which the client connects to; with tcp, where the endpoint exchange listens
    /// (127.0.0.1 by default)
    #[arg(long, value_name = "IP", help_heading = RUN)]
    pub address: Option<IpAddr>,
    /// With cm: the client function's own IPv4 address (its GID; 192.168.77.2 on emu-pair)
    #[arg(long, value_name = "IP", help_heading = RUN)]
    pub local_address: Option<Ipv4Addr>,
    /// With cm: the peer function's MAC address (aa:bb:cc:dd:ee:ff), instead of resolving it
    /// by ARP (then this function does not serve its address: no ARP or ICMP answered)
    #[arg(long, value_name = "MAC", value_parser = parse_mac, help_heading = RUN)]
    pub peer_mac: Option<[u8; 6]>,
    /// The connection manager's port with cm (7174, rping's), the endpoint exchange's TCP port
    /// with tcp (18515)
    #[arg(long, value_name = "PORT", help_heading = RUN)]
    pub port: Option<u16>,
}

/// How the two sides find each other.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnectBy {
    /// The RDMA connection manager: CM MADs on QP1, as rdma_cm applications connect.
    Cm,
    /// An endpoint line traded over TCP, as `ibv_rc_pingpong` does.
    Tcp,
}

/// Parses a MAC address written as six `:`-separated pairs of hex digits.
fn parse_mac(text: &str) -> Result<[u8; 6], String> {
    let bad = || format!("`{text}` is not a MAC address (aa:bb:cc:dd:ee:ff)");
    let mut mac = [0u8; 6];
    let mut parts = text.split(':');
    for byte in &mut mac {
        let part = parts.next().ok_or_else(bad)?;
        if part.len() != 2 {
            return Err(bad());
        }
        *byte = u8::from_str_radix(part, 16).map_err(|_| bad())?;
    }
    if parts.next().is_some() {
        return Err(bad());
    }
    Ok(mac)
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

    /// How the sides of `plan` meet: `None` on emu-pair without `--connect-by cm` (the process
    /// hands each side the other's endpoint), the TCP exchange, or the connection manager.
    pub fn rendezvous(&self, plan: &Plan) -> Result<Option<Rendezvous>, String> {
        let pair = *plan == Plan::Pair;
        let how = self
            .connect_by
            .unwrap_or(if pair { ConnectBy::Tcp } else { ConnectBy::Cm });
        match how {
            ConnectBy::Tcp => {
                if self.local_address.is_some() || self.peer_mac.is_some() {
                    return Err(
                        "--local-address and --peer-mac are for --connect-by cm".to_string()
                    );
                }
                if pair {
                    return Ok(None);
                }
                let address = self.address.unwrap_or(IpAddr::from([127, 0, 0, 1]));
                Ok(Some(Rendezvous::Tcp(
                    address,
                    self.port.unwrap_or(DEFAULT_PORT),
                )))
            }
            ConnectBy::Cm => {
                let v4 = |ip: IpAddr| match ip {
                    IpAddr::V4(v4) => Ok(v4),
                    IpAddr::V6(_) => Err(format!(
                        "--address {ip}: the connection manager connects to IPv4 addresses"
                    )),
                };
                let (server_default, client_default) = match (SERVER_ADDRESS, CLIENT_ADDRESS) {
                    (IpAddr::V4(s), IpAddr::V4(c)) => (s, c),
                    _ => unreachable!("the emu-pair addresses are IPv4"),
                };
                let server_ip = match (self.address, pair) {
                    (Some(ip), _) => v4(ip)?,
                    (None, true) => server_default,
                    (None, false) => {
                        return Err(
                            "--connect-by cm: give the server's IP address, --address".to_string()
                        )
                    }
                };
                let client_ip =
                    match (self.local_address, plan) {
                        (Some(ip), _) => ip,
                        (None, Plan::Client(_)) => return Err(
                            "--connect-by cm: give this client's own IP address, --local-address"
                                .to_string(),
                        ),
                        (None, _) => client_default,
                    };
                Ok(Some(Rendezvous::Cm(CmSettings {
                    server_ip,
                    client_ip,
                    port: self.port.unwrap_or(RPING_PORT),
                    peer_mac: self.peer_mac,
                })))
            }
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
        assert_eq!(cli.rendezvous(&Plan::Pair), Ok(None));
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
        let cli = parse(&[
            "--client",
            "--device",
            "06:00.1",
            "--port",
            "9999",
            "--connect-by",
            "tcp",
        ])
        .unwrap();
        let plan = cli.plan().unwrap();
        assert_eq!(plan, Plan::Client("06:00.1".into()));
        assert_eq!(
            cli.rendezvous(&plan),
            Ok(Some(Rendezvous::Tcp(IpAddr::from([127, 0, 0, 1]), 9999)))
        );
    }

    #[test]
    fn a_pci_function_connects_through_the_cm_on_rpings_port_by_default() {
        let cli = parse(&[
            "--client",
            "--device",
            "06:00.1",
            "--address",
            "10.0.0.1",
            "--local-address",
            "10.0.0.2",
            "--peer-mac",
            "02:aa:bb:cc:dd:0e",
        ])
        .unwrap();
        let plan = cli.plan().unwrap();
        assert_eq!(
            cli.rendezvous(&plan),
            Ok(Some(Rendezvous::Cm(CmSettings {
                server_ip: Ipv4Addr::new(10, 0, 0, 1),
                client_ip: Ipv4Addr::new(10, 0, 0, 2),
                port: 7174,
                peer_mac: Some([0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0x0e]),
            })))
        );
        let cli = parse(&["--server", "--device", "06:00.0", "--address", "10.0.0.1"]).unwrap();
        assert!(matches!(
            cli.rendezvous(&cli.plan().unwrap()),
            Ok(Some(Rendezvous::Cm(CmSettings {
                port: 7174,
                peer_mac: None,
                ..
            })))
        ));
        let cli = parse(&["--device", "emu-pair", "--connect-by", "cm", "--port", "9"]).unwrap();
        assert!(matches!(
            cli.rendezvous(&Plan::Pair),
            Ok(Some(Rendezvous::Cm(CmSettings {
                port: 9,
                peer_mac: None,
                ..
            })))
        ));
        for (args, says) in [
            (&["--server", "--device", "06:00.0"][..], "--address"),
            (
                &["--client", "--device", "06:00.0", "--address", "10.0.0.1"][..],
                "--local-address",
            ),
            (
                &[
                    "--server",
                    "--device",
                    "0:1.0",
                    "--address",
                    "::1",
                    "--peer-mac",
                    "02:00:00:00:00:01",
                ][..],
                "IPv4",
            ),
            (
                &["--device", "emu-pair", "--peer-mac", "02:00:00:00:00:01"][..],
                "--connect-by cm",
            ),
        ] {
            let cli = parse(args).unwrap();
            let msg = cli.rendezvous(&cli.plan().unwrap()).unwrap_err();
            assert!(msg.contains(says), "{args:?}: {msg}");
        }
        for mac in [
            "02:00:00:00:00",
            "02:00:00:00:00:01:02",
            "2:00:00:00:00:01",
            "zz:00:00:00:00:01",
        ] {
            assert!(
                parse(&["--device", "emu-pair", "--peer-mac", mac]).is_err(),
                "{mac}"
            );
        }
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
