//! What the programs share on the command line, parsed with clap: the option groups flattened
//! into every program that takes them (devices, traffic, frame size), the value parsers that
//! refuse nonsense at parse time with the flag named, usage errors after parsing (exit status
//! 2, as clap's own), and opening the `--device` ports on whichever backend they are.

use crate::{open_ports, OpenError, Ports};
use clap::builder::TypedValueParser;
use clap::error::ErrorKind;
use clap::{Args, CommandFactory, ValueEnum};
use cxdirect::{Backend, Device, Options, Port, PortConfig, Queues, Started, TxQueue};
use std::process::ExitCode;
use std::time::Duration;

/// Help heading of the device options.
pub const DEVICES: &str = "Devices";
/// Help heading of the options that shape the traffic.
pub const TRAFFIC: &str = "Traffic";
/// Help heading of the port and queue options.
pub const QUEUES: &str = "Queues";
/// Help heading of the options that say how long a program runs and what it checks.
pub const RUN: &str = "Run";

/// Most packets one burst call moves, as the driver takes them.
pub const MAX_BURST: u16 = cxdirect::ring::MAX_BURST as u16;
/// Most send or receive queues a port takes (`PortConfig::rx_queues`, `tx_queues`).
pub const MAX_QUEUES: u16 = 64;
/// Smallest ring a queue takes, in entries (a power of two).
pub const MIN_RING: u32 = 64;
/// Largest ring a queue takes, in entries (a power of two).
pub const MAX_RING: u32 = 32768;
/// Smallest frame the generator builds, in bytes: headers and the verification stamp.
pub const MIN_FRAME: u16 = crate::testpmd::MIN_LEN as u16;
/// Largest standard frame, in bytes, without the frame check sequence.
pub const MAX_STANDARD_FRAME: u16 = 1514;
/// Largest jumbo frame the programs send, in bytes, without the frame check sequence.
pub const MAX_JUMBO_FRAME: u16 = 9018;

/// How the IOMMU maps a PCI function's DMA (the driver's `IommuMode`, by its spec name).
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum IommuMode {
    /// iommufd when the kernel offers it, else type1; never no-IOMMU.
    Auto,
    /// The VFIO container and group interface with the type1 IOMMU driver.
    Type1,
    /// iommufd; an error when the kernel does not offer it.
    Iommufd,
    /// VFIO no-IOMMU: no protection of the host from the device.
    Noiommu,
}

impl IommuMode {
    /// The name a device spec's `iommu=` option takes.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Type1 => "type1",
            Self::Iommufd => "iommufd",
            Self::Noiommu => "noiommu",
        }
    }
}

/// How long a polling model's device thread keeps looking for work after its last piece.
pub const EMU_POLL_WINDOW: Duration = Duration::from_millis(50);

/// How the device model executes the work a doorbell starts.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum EmuExec {
    /// Within the driver's doorbell write.
    Inline,
    /// On a device thread woken by each doorbell.
    Threaded,
    /// On a device thread that keeps polling for 50 ms after its last work.
    Polling,
}

impl EmuExec {
    /// The model configuration this mode names (polling: [`EMU_POLL_WINDOW`]).
    pub fn config(self) -> cxdirect_emu::EmuConfig {
        let (exec, poll_window) = match self {
            Self::Inline => (cxdirect_emu::ExecMode::Inline, Duration::ZERO),
            Self::Threaded => (cxdirect_emu::ExecMode::Threaded, Duration::ZERO),
            Self::Polling => (cxdirect_emu::ExecMode::Threaded, EMU_POLL_WINDOW),
        };
        cxdirect_emu::EmuConfig {
            exec,
            poll_window,
            ..cxdirect_emu::EmuConfig::default()
        }
    }
}

/// Which ports a program opens and how: the same three options in every program that opens
/// ports.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = DEVICES)]
pub struct DeviceArgs {
    /// Port to open (repeatable): emu (one port, looped back), emu-pair (two ports wired back to back) or a PCI address such as 0000:06:00.0 or 06:00.0,iommu=type1
    #[arg(long = "device", value_name = "SPEC", required = true, value_parser = parse_device_spec)]
    pub devices: Vec<String>,
    /// IOMMU interface for PCI devices: auto, type1, iommufd or noiommu (a spec's own iommu= wins)
    #[arg(long, value_name = "MODE", value_enum, hide_possible_values = true, default_value_t = IommuMode::Auto)]
    pub iommu_mode: IommuMode,
    /// How emulated devices execute: inline (in the doorbell write), threaded (a woken device thread) or polling (a thread polling 50 ms after work)
    #[arg(long, value_name = "MODE", value_enum, hide_possible_values = true, default_value_t = EmuExec::Threaded)]
    pub emu_exec: EmuExec,
    /// Device threads of an emulated pair run threaded or polling: 1 (one for both ports) or 2 (one per port)
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=i64::from(MAX_EMU_DEVICE_THREADS)))]
    pub emu_device_threads: u8,
}

/// Most device threads an emulated pair takes: one per function, as a function's state is
/// one lock (a further thread would only wait for it).
pub const MAX_EMU_DEVICE_THREADS: u8 = 2;

impl DeviceArgs {
    /// The model configuration of emulated ports: how they execute, on how many device threads.
    pub fn emu_config(&self) -> cxdirect_emu::EmuConfig {
        cxdirect_emu::EmuConfig {
            device_threads: self.emu_device_threads,
            ..self.emu_exec.config()
        }
    }
}

/// A device spec: `emu`, `emu-pair`, or a PCI function the driver's spec parser accepts.
fn parse_device_spec(spec: &str) -> Result<String, String> {
    match spec {
        "emu" | "emu-pair" => Ok(spec.to_string()),
        pci => pci
            .parse::<cxdirect::backend::vfio::DeviceSpec>()
            .map(|_| spec.to_string())
            .map_err(|e| format!("{e}; or give emu or emu-pair")),
    }
}

/// Packets per burst call: the same option wherever a program moves packets in bursts.
#[derive(Args, Debug, Clone, Copy)]
#[command(next_help_heading = TRAFFIC)]
pub struct BurstArgs {
    /// Packets per burst call (1..=256)
    #[arg(long, value_name = "N", default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..=i64::from(MAX_BURST)))]
    pub burst: u16,
}

impl BurstArgs {
    /// The burst size as a count of packets.
    pub fn packets(self) -> usize {
        usize::from(self.burst)
    }
}

/// The size of every frame a program sends, for programs that send one size.
#[derive(Args, Debug, Clone, Copy)]
#[command(next_help_heading = TRAFFIC)]
pub struct FrameSizeArgs {
    /// Frame size in bytes, Ethernet header included, no FCS (52..=1514)
    #[arg(long, value_name = "BYTES", default_value_t = 64, value_parser = frame_size(MAX_STANDARD_FRAME))]
    pub size: u16,
}

impl FrameSizeArgs {
    /// The frame size in bytes.
    pub fn bytes(self) -> usize {
        usize::from(self.size)
    }
}

/// A parser of frame sizes from [`MIN_FRAME`] to `max` bytes.
pub fn frame_size(max: u16) -> impl TypedValueParser<Value = u16> {
    clap::value_parser!(u16).range(i64::from(MIN_FRAME)..=i64::from(max))
}

/// A parser of counts of at least one (packets, iterations, flows).
pub fn at_least_one() -> impl TypedValueParser<Value = u64> {
    clap::value_parser!(u64).range(1..)
}

/// A parser of queue counts, 1..=[`MAX_QUEUES`].
pub fn queue_count() -> impl TypedValueParser<Value = u16> {
    clap::value_parser!(u16).range(1..=i64::from(MAX_QUEUES))
}

/// Parses a ring size: a power of two from [`MIN_RING`] to [`MAX_RING`] entries.
pub fn parse_ring(text: &str) -> Result<u32, String> {
    let n: u32 = text
        .parse()
        .map_err(|_| format!("`{text}` is not a number of entries"))?;
    if n.is_power_of_two() && (MIN_RING..=MAX_RING).contains(&n) {
        Ok(n)
    } else {
        Err(format!(
            "{n} entries: give a power of two from {MIN_RING} to {MAX_RING}"
        ))
    }
}

/// Parses a time in seconds, above zero and finite.
pub fn parse_seconds(text: &str) -> Result<Duration, String> {
    let s: f64 = text
        .parse()
        .map_err(|_| format!("`{text}` is not a number of seconds"))?;
    if s.is_finite() && s > 0.0 && s <= 1e9 {
        Ok(Duration::from_secs_f64(s))
    } else {
        Err(format!("{text} s: give a time above 0 seconds"))
    }
}

/// Prints a usage error of program `C` the way clap prints its own (the message, the usage
/// line, a pointer to `--help`) and returns clap's exit status for it (2).
pub fn usage_error<C: CommandFactory>(
    kind: ErrorKind,
    message: impl std::fmt::Display,
) -> ExitCode {
    let error = C::command().error(kind, message);
    // A closed stderr leaves nothing to report to.
    let _ = error.print();
    ExitCode::from(u8::try_from(error.exit_code()).unwrap_or(2))
}

/// What a program does once its ports are open, on any backend.
pub trait RunOnPorts {
    /// Runs on the opened `backends` (one or two, receiving last).
    fn run<B: Backend>(&self, backends: Vec<B>) -> Result<ExitCode, String>;
}

/// Opens the ports `devices` names (one or two) and runs `program` on them. A wrong device
/// list is a usage error of program `C` (exit status 2); a failure to open or run, a message
/// prefixed with the program's name and exit status 1.
pub fn run_on_ports<C: CommandFactory>(
    devices: &DeviceArgs,
    program: &impl RunOnPorts,
) -> ExitCode {
    let opened = open_ports(&devices.devices, devices.emu_config(), devices.iommu_mode);
    let outcome = match opened {
        Ok(Ports::Emulated(backends)) => program.run(backends),
        Ok(Ports::Pci(backends)) => program.run(backends),
        Err(OpenError::Usage(msg)) => return usage_error::<C>(ErrorKind::ValueValidation, msg),
        Err(OpenError::Open(msg)) => Err(msg),
    };
    outcome.unwrap_or_else(|msg| {
        eprintln!("{}: {msg}", C::command().get_name());
        ExitCode::FAILURE
    })
}

/// Brings the driver up on `backend` with default options and starts a port with `config`,
/// for a program's sending side: the port and its first send queue (its receive queues are
/// dropped). An error names the port.
pub fn start_sender<B: Backend>(
    backend: B,
    config: PortConfig,
) -> Result<(Port<B>, TxQueue<B>), String> {
    let name = backend.name();
    let dev = Device::bring_up(backend, Options::default())
        .map_err(|e| format!("{name}: bring-up failed: {e}"))?;
    let Started {
        port,
        queues: Queues { tx: mut txqs, .. },
    } = Port::start(dev, config).map_err(|e| format!("{name}: port start failed: {e}"))?;
    Ok((port, txqs.remove(0)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    #[command(name = "probe")]
    struct Probe {
        #[command(flatten)]
        devices: DeviceArgs,
        #[command(flatten)]
        burst: BurstArgs,
        #[command(flatten)]
        size: FrameSizeArgs,
        #[arg(long, value_parser = parse_ring, default_value = "1024")]
        ring: u32,
    }

    fn parse(args: &[&str]) -> Result<Probe, clap::Error> {
        Probe::try_parse_from(std::iter::once("probe").chain(args.iter().copied()))
    }

    #[test]
    fn the_shared_groups_take_their_defaults() {
        let p = parse(&["--device", "emu"]).unwrap();
        assert_eq!(p.devices.devices, ["emu"]);
        assert_eq!(p.devices.iommu_mode, IommuMode::Auto);
        assert_eq!(p.devices.emu_exec, EmuExec::Threaded);
        assert_eq!((p.burst.packets(), p.size.bytes(), p.ring), (32, 64, 1024));
    }

    #[test]
    fn device_is_repeatable_and_checked() {
        let p = parse(&[
            "--device",
            "0000:06:00.0",
            "--device",
            "06:00.1,iommu=type1",
        ])
        .unwrap();
        assert_eq!(p.devices.devices, ["0000:06:00.0", "06:00.1,iommu=type1"]);
        let e = parse(&["--device", "emu-trio"]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ValueValidation);
        assert!(e.to_string().contains("--device <SPEC>"), "{e}");
        assert_eq!(
            parse(&[]).unwrap_err().kind(),
            ErrorKind::MissingRequiredArgument
        );
    }

    #[test]
    fn out_of_range_values_name_the_flag_and_the_range() {
        for (args, flag, range) in [
            (["--burst", "0"], "--burst", "1..=256"),
            (["--burst", "257"], "--burst", "1..=256"),
            (["--size", "51"], "--size", "52..=1514"),
            (["--ring", "1000"], "--ring", "power of two"),
            (["--ring", "32"], "--ring", "power of two"),
        ] {
            let mut argv = vec!["--device", "emu"];
            argv.extend(args);
            let e = parse(&argv).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::ValueValidation, "{args:?}");
            assert_eq!(e.exit_code(), 2);
            let text = e.to_string();
            assert!(
                text.contains(flag) && text.contains(range),
                "{args:?}: {text}"
            );
        }
        let e = parse(&["--device", "emu", "--emu-exec", "lazy"]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidValue);
        assert!(e.to_string().contains("inline, threaded, polling"), "{e}");
    }

    #[test]
    fn seconds_must_be_positive_and_finite() {
        assert_eq!(parse_seconds("0.5"), Ok(Duration::from_millis(500)));
        for bad in ["0", "-1", "inf", "NaN", "soon"] {
            assert!(parse_seconds(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn emu_exec_names_its_model() {
        assert_eq!(
            EmuExec::Inline.config().exec,
            cxdirect_emu::ExecMode::Inline
        );
        assert_eq!(EmuExec::Polling.config().poll_window, EMU_POLL_WINDOW);
        assert_eq!(EmuExec::Threaded.config().poll_window, Duration::ZERO);
    }
}
