//! cxdirect-rdma-perf's command line.

use super::{Mode, Op};
use crate::cli::{DeviceArgs, RUN, TRAFFIC};
use clap::Parser;

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
second the responder, both in this process.")]
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
    /// Queue pairs the messages are spread over (1..=16)
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=i64::from(MAX_QPS)), help_heading = TRAFFIC)]
    pub qps: u16,
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
        match self.devices.devices.as_slice() {
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
