//! cxdirect-devmem-tcp: receives a TCP stream like Linux's devmem TCP (ncdevmem's server), in
//! userspace: the port serves `--address` (ARP, ICMP echo), TCP to `--listen` is steered to a
//! split receive queue (headers into host memory, payload into a dmabuf from `--memory`), the
//! driver's TCP receiver runs on the headers, and the payload is checked against ncdevmem's
//! `-v N` pattern by reading the dmabuf (the only CPU reads of it). On `emu-pair` the other
//! port sends `--bytes` of the pattern in-process (a self-test). `--emit-pattern BYTES` writes
//! the pattern to stdout instead, for a sender such as `nc` on a Linux host:
//! `cxdirect-devmem-tcp --emit-pattern 268435456 -v 7 | nc 192.168.77.1 5201`.
//!
//! `--connect IP:PORT` sends instead: `--bytes` (default `--size`) of the pattern from a
//! udmabuf or memfd dmabuf, written once by the CPU and then gathered by the device for every
//! segment (and retransmission). On `emu-pair` the other port listens in-process.
//! `--print-pattern-sha256 --bytes N [-v N]` prints the SHA-256 of the stream such a run
//! sends (no device), to compare with `sha256sum` on the receiving host.
//! Last line: see [`cxdirect_apps::devmem_tcp`] (`summary: bytes=N verified=yes|no|off ...`).

use clap::Parser;
use cxdirect_apps::cli::{self, DeviceArgs, RunOnPorts, RUN, TRAFFIC};
use cxdirect_apps::devmem_tcp::connect::{self, ConnectSettings};
use cxdirect_apps::devmem_tcp::{
    self, pattern, sha256, Handshake, Settings, DATA_HEADER_BYTES, DEFAULT_HEADER_BYTES,
};
use cxdirect_apps::dmabuf::parse_memory_size;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::process::ExitCode;
use std::time::Duration;

/// Receives a TCP stream with headers in host memory and payload in dmabuf memory (devmem TCP)
#[derive(Parser, Debug)]
#[command(name = "cxdirect-devmem-tcp", version)]
#[command(
    after_help = "SPEC: emu-pair (the first port sends a self-test stream) | PCI address (a Linux host sends). \
With --emit-pattern BYTES, only writes BYTES of the -v pattern to stdout (no device)."
)]
struct Cli {
    #[command(flatten)]
    devices: DeviceArgs,
    /// The TCP port to listen on
    #[arg(long, value_name = "PORT", value_parser = clap::value_parser!(u16).range(1..), required_unless_present = "connect", conflicts_with = "connect", help_heading = TRAFFIC)]
    listen: Option<u16>,
    /// Send to IP:PORT instead of listening: --bytes (default --size) of the -v pattern (default 7) from the dmabuf
    #[arg(long, value_name = "IP:PORT", help_heading = TRAFFIC)]
    connect: Option<SocketAddrV4>,
    /// --connect: the smallest retransmission timeout, milliseconds
    #[arg(long, value_name = "MS", default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=60000), help_heading = TRAFFIC)]
    rto_min_ms: u64,
    /// --connect: one MSS per send WQE, even where the port offers LSO
    #[arg(long, help_heading = TRAFFIC)]
    no_lso: bool,
    /// The IPv4 address to serve (ARP, ICMP echo, TCP)
    #[arg(long, value_name = "IP", help_heading = TRAFFIC)]
    address: Ipv4Addr,
    /// The self-test sender's IPv4 address on emu-pair [default: --address's last byte + 1]
    #[arg(long, value_name = "IP", help_heading = TRAFFIC)]
    sender_address: Option<Ipv4Addr>,
    /// Who exports the payload memory: udmabuf, memfd or cuda (GPU memory)
    #[arg(long, value_name = "KIND", default_value = "udmabuf", value_parser = ["udmabuf", "memfd", "cuda"], hide_possible_values = true, help_heading = TRAFFIC)]
    memory: String,
    /// Bytes of dmabuf memory for payloads (a multiple of 4096, at least 1 MiB)
    #[arg(long, value_name = "BYTES", default_value_t = 64 << 20, value_parser = parse_memory_size, help_heading = TRAFFIC)]
    size: u64,
    /// The split point: frame bytes into host memory (14..=1024) [default: 66 with the handshake on the plain queue, a data segment's headers; 74 on the split queue, a Linux SYN's]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(14..=1024), help_heading = TRAFFIC)]
    header_bytes: Option<u32>,
    /// Where the handshake is taken: plain (a plain queue, the flow moved to the split queue once established) or split (on the split queue)
    #[arg(long, value_name = "QUEUE", default_value = "plain", value_parser = ["plain", "split"], hide_possible_values = true, help_heading = TRAFFIC)]
    handshake: String,
    /// Receive WQEs of the split queue at most (a power of two, 64..=32768): as many as payload buffers of 2 KiB fit, or larger buffers past it
    #[arg(long, value_name = "N", default_value_t = 32768, value_parser = parse_ring, help_heading = TRAFFIC)]
    ring: u32,
    /// Check the payload against ncdevmem's pattern with this modulus (2..=255), as its -v
    #[arg(short = 'v', long = "validate", value_name = "N", value_parser = clap::value_parser!(u8).range(2..), help_heading = RUN)]
    validate: Option<u8>,
    /// Stream bytes the self-test sends (emu-pair; default 4 MiB), or expects (a PCI function):
    /// once they arrived, the receiver closes its side
    #[arg(long, value_name = "N", value_parser = cli::at_least_one(), help_heading = TRAFFIC)]
    bytes: Option<u64>,
    /// Seconds the run may take
    #[arg(long, value_name = "SECONDS", default_value_t = 300, help_heading = RUN)]
    timeout: u64,
    /// emu-pair: the self-test sender sends no FIN (a netcat that never shuts its side); the receiver closes once --bytes arrived
    #[arg(long, help_heading = RUN)]
    sender_keeps_open: bool,
}

/// `--emit-pattern BYTES [-v N]`: the pattern to stdout, no device.
#[derive(Parser, Debug)]
#[command(name = "cxdirect-devmem-tcp")]
struct EmitCli {
    /// Write BYTES of the pattern to stdout
    #[arg(long, value_name = "BYTES")]
    emit_pattern: u64,
    /// The pattern's modulus (2..=255), as ncdevmem's -v
    #[arg(short = 'v', long = "validate", value_name = "N", default_value_t = 7, value_parser = clap::value_parser!(u8).range(2..))]
    validate: u8,
}

/// `--print-pattern-sha256 (--bytes N | --size N) [-v N]`: the stream's digest, no device.
#[derive(Parser, Debug)]
#[command(name = "cxdirect-devmem-tcp")]
struct DigestCli {
    /// Print the SHA-256 of the pattern stream a --connect run sends
    #[arg(long)]
    print_pattern_sha256: bool,
    /// Stream bytes
    #[arg(long, value_name = "N", required_unless_present = "size")]
    bytes: Option<u64>,
    /// Stream bytes when --bytes is not given (as --connect does)
    #[arg(long, value_name = "BYTES")]
    size: Option<u64>,
    /// The pattern's modulus (2..=255), as ncdevmem's -v
    #[arg(short = 'v', long = "validate", value_name = "N", default_value_t = 7, value_parser = clap::value_parser!(u8).range(2..))]
    validate: u8,
}

/// A split ring size: a power of two from 64 to 32768.
fn parse_ring(text: &str) -> Result<u32, String> {
    let n: u32 = text
        .parse()
        .map_err(|_| format!("`{text}` is not a number"))?;
    if n.is_power_of_two() && (64..=32768).contains(&n) {
        Ok(n)
    } else {
        Err(format!("{n}: give a power of two from 64 to 32768"))
    }
}

struct Program(Settings);

struct Connect(ConnectSettings);

impl RunOnPorts for Connect {
    fn run<B: cxdirect::Backend>(&self, backends: Vec<B>) -> Result<ExitCode, String> {
        let report = connect::run(backends, &self.0)?;
        let listener_ok = report.listener.as_ref().is_none_or(|l| l.verified);
        Ok(if report.finished && listener_ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        })
    }
}

impl RunOnPorts for Program {
    fn run<B: cxdirect::Backend>(&self, backends: Vec<B>) -> Result<ExitCode, String> {
        let report = devmem_tcp::run(backends, &self.0)?;
        let ok = report.verified || (self.0.validate.is_none() && !report.timed_out);
        Ok(if ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        })
    }
}

fn main() -> ExitCode {
    if std::env::args().any(|a| a == "--emit-pattern" || a.starts_with("--emit-pattern=")) {
        let e = EmitCli::parse();
        let mut out = std::io::stdout().lock();
        return match pattern::emit(e.validate, e.emit_pattern, &mut out) {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("cxdirect-devmem-tcp: writing the pattern: {err}");
                ExitCode::FAILURE
            }
        };
    }
    if std::env::args().any(|a| a == "--print-pattern-sha256") {
        let d = DigestCli::parse();
        let bytes = d.bytes.or(d.size).unwrap_or(0);
        println!(
            "{}",
            sha256::hex(&sha256::pattern_digest(d.validate, bytes))
        );
        return ExitCode::SUCCESS;
    }
    let c = Cli::parse();
    if let Some(peer) = c.connect {
        let settings = ConnectSettings {
            peer,
            address: c.address,
            memory: c.memory,
            size: c.size,
            bytes: c.bytes.unwrap_or(c.size),
            modulus: c.validate.unwrap_or(7),
            timeout: Duration::from_secs(c.timeout),
            rto_min: Duration::from_millis(c.rto_min_ms),
            lso: !c.no_lso,
        };
        return cli::run_on_ports::<Cli>(&c.devices, &Connect(settings));
    }
    let Some(listen) = c.listen else {
        eprintln!("cxdirect-devmem-tcp: give --listen PORT or --connect IP:PORT");
        return ExitCode::from(2);
    };
    let sender_address = c.sender_address.unwrap_or_else(|| {
        let mut o = c.address.octets();
        o[3] = if o[3] >= 254 { 1 } else { o[3] + 1 };
        Ipv4Addr::from(o)
    });
    let handshake = if c.handshake == "split" {
        Handshake::Split
    } else {
        Handshake::Plain
    };
    let settings = Settings {
        listen,
        address: c.address,
        sender_address,
        memory: c.memory,
        size: c.size,
        header_bytes: c.header_bytes.unwrap_or(match handshake {
            Handshake::Split => DEFAULT_HEADER_BYTES,
            Handshake::Plain => DATA_HEADER_BYTES,
        }),
        handshake,
        ring: c.ring,
        validate: c.validate,
        bytes: c.bytes,
        timeout: Duration::from_secs(c.timeout),
        sender_fin: !c.sender_keeps_open,
    };
    cli::run_on_ports::<Cli>(&c.devices, &Program(settings))
}
