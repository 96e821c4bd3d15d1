//! cxdirect-testpmd: moves packets through one or two ports in a DPDK testpmd-like way and
//! reports port statistics periodically and at exit. With `--verify` every generated packet
//! carries a flow id, a sequence number and a pattern, and every received packet is checked.
//! Flow `f` is sent on send queue `f % txq`, so a flow leaves in order, as DPDK's testpmd pins a
//! flow to a queue; the checker still takes a packet that arrives late (within a window of
//! sequence numbers) as filling its gap, and counts as a duplicate only one that arrives twice.
//! Last line: `summary: tx=N rx=N lost=N corrupt=N duplicate=N oerrors=N imissed=N mpps=X`.

use clap::error::ErrorKind;
use clap::{Parser, ValueEnum};
use cxdirect::{Backend, InlineMode};
use cxdirect_apps::cli::{self, BurstArgs, DeviceArgs, RunOnPorts, QUEUES, RUN, TRAFFIC};
use cxdirect_apps::testpmd::ForwardMode;
use cxdirect_apps::testpmd_run::{self, Settings};
use std::process::ExitCode;
use std::time::Duration;

/// Moves packets through one or two ports as DPDK's testpmd does, and checks them with --verify
#[derive(Parser, Debug)]
#[command(name = "cxdirect-testpmd", version)]
#[command(
    after_help = "SPEC: emu (one port, loopback) | emu-pair (two ports back to back) | PCI address. \
The first port sends, the last (or only) one receives."
)]
struct Cli {
    #[command(flatten)]
    devices: DeviceArgs,
    #[command(flatten)]
    burst: BurstArgs,
    /// What the ports do: io, txonly, rxonly, macswap (forward with MACs swapped) or flowgen (many flows)
    #[arg(long, value_name = "MODE", value_enum, hide_possible_values = true, default_value_t = ForwardMode::TxOnly, help_heading = TRAFFIC)]
    forward_mode: ForwardMode,
    /// Frame sizes in bytes, no FCS, sent in turn (each 52..=9018)
    #[arg(long, value_name = "L[,L...]", value_delimiter = ',', default_value = "64", value_parser = cli::frame_size(cli::MAX_JUMBO_FRAME), help_heading = TRAFFIC)]
    txpkts: Vec<u16>,
    /// Flows (UDP source ports) the generator cycles through (1..=65535) [default: 64 with flowgen, else one per send queue]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..), help_heading = TRAFFIC)]
    flows: Option<u16>,
    /// What a send WQE carries inline: none, headers or full (the whole packet within --inline-max)
    #[arg(long, value_name = "MODE", value_enum, hide_possible_values = true, default_value_t = Inline::Headers, help_heading = TRAFFIC)]
    inline_mode: Inline,
    /// Largest packet sent inline with --inline-mode full, in bytes (18..=900)
    #[arg(long, value_name = "BYTES", default_value_t = 256, value_parser = clap::value_parser!(u16).range(18..=900), help_heading = TRAFFIC)]
    inline_max: u16,
    /// Send runs of packets in enhanced multi-packet WQEs
    #[arg(long, help_heading = TRAFFIC)]
    tx_multi_packet: bool,
    /// Generate TCP/IPv4 packets of the --txpkts sizes (which may exceed the 1500-byte MTU) and send them with TCP segmentation offload at this MSS (1..=1460); the receiver checks every segment
    #[arg(long, value_name = "MSS", value_parser = clap::value_parser!(u16).range(1..=1460), help_heading = TRAFFIC)]
    tso: Option<u16>,
    /// Receive queues per port (1..=64)
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = cli::queue_count(), help_heading = QUEUES)]
    rxq: u16,
    /// Send queues per port; flow f is sent on queue f % N (1..=64)
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = cli::queue_count(), help_heading = QUEUES)]
    txq: u16,
    /// Entries per queue ring (a power of two, 64..=32768)
    #[arg(long, value_name = "N", default_value = "1024", value_parser = cli::parse_ring, help_heading = QUEUES)]
    ring: u32,
    /// Receive into striding (multi-packet) receive queues
    #[arg(long, help_heading = QUEUES)]
    rx_striding: bool,
    /// How long to run, in seconds (above 0) [default: 5 unless --packets]
    #[arg(long, value_name = "S", value_parser = cli::parse_seconds, conflicts_with = "packets", help_heading = RUN)]
    duration: Option<Duration>,
    /// Packets to send (txonly, flowgen) or receive (other modes), then stop (1..)
    #[arg(long, value_name = "N", value_parser = cli::at_least_one(), help_heading = RUN)]
    packets: Option<u64>,
    /// Print port statistics every S seconds (0: only at the end)
    #[arg(long, value_name = "S", default_value_t = 0.0, value_parser = parse_period, help_heading = RUN)]
    stats_period: f64,
    /// Check every received packet's content, and each flow for duplicates and gaps; exit 1 on a fault
    #[arg(long, help_heading = RUN)]
    verify: bool,
}

/// What a send WQE carries inline.
#[derive(ValueEnum, Clone, Copy, Debug)]
enum Inline {
    /// Nothing: the device reads the whole packet.
    None,
    /// The headers the device needs.
    Headers,
    /// The whole packet when within --inline-max.
    Full,
}

/// A statistics period: 0 (off) or a positive number of seconds.
fn parse_period(text: &str) -> Result<f64, String> {
    if text.parse::<f64>() == Ok(0.0) {
        return Ok(0.0);
    }
    cli::parse_seconds(text)
        .map(|d| d.as_secs_f64())
        .map_err(|e| format!("{e}, or 0 for none"))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let settings = Settings::from(&cli);
    if settings.verify && matches!(settings.mode, ForwardMode::Io | ForwardMode::MacSwap) {
        return cli::usage_error::<Cli>(
            ErrorKind::ArgumentConflict,
            "--verify checks generated traffic: use it with --forward-mode txonly, flowgen or rxonly",
        );
    }
    cli::run_on_ports::<Cli>(&cli.devices, &Program(settings))
}

impl From<&Cli> for Settings {
    fn from(cli: &Cli) -> Self {
        let flowgen = cli.forward_mode == ForwardMode::FlowGen;
        Settings {
            mode: cli.forward_mode,
            burst: cli.burst.packets(),
            sizes: cli.txpkts.iter().map(|&s| usize::from(s)).collect(),
            inline: match cli.inline_mode {
                Inline::None => InlineMode::None,
                Inline::Headers => InlineMode::Headers,
                Inline::Full => InlineMode::Full,
            },
            inline_max: cli.inline_max,
            multi_packet: cli.tx_multi_packet,
            tso: cli.tso,
            striding: cli.rx_striding,
            rxq: cli.rxq,
            txq: cli.txq,
            ring: cli.ring,
            duration: match cli.packets {
                Some(_) => None,
                None => Some(cli.duration.unwrap_or(Duration::from_secs(5))),
            },
            packets: cli.packets,
            stats_period: (cli.stats_period > 0.0)
                .then(|| Duration::from_secs_f64(cli.stats_period)),
            verify: cli.verify,
            flows: cli.flows.unwrap_or(if flowgen { 64 } else { cli.txq }),
        }
    }
}

/// The loop's settings, as a program run on the opened ports.
struct Program(Settings);

impl RunOnPorts for Program {
    fn run<B: Backend>(&self, backends: Vec<B>) -> Result<ExitCode, String> {
        let outcome = testpmd_run::run(backends, &self.0)?;
        println!("{}", outcome.summary());
        Ok(if !self.0.verify || outcome.clean() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        })
    }
}
