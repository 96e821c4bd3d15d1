//! The command line of `cxdirect-emu-server`.
//!
//! ```text
//! cxdirect-emu-server --socket PATH [--socket PATH2]
//!                     [--wire loopback | --wire none | --wire pair:OTHER.sock]
//!                     [--pcap FILE] [--mac XX:XX:XX:XX:XX:XX]... [--roce]
//!                     [--trace-commands FILE] [--blueflame-hold-us N]
//!                     [--fatal-trigger FILE] [-v|-vv]
//! ```
//!
//! One `--socket` serves one function; its port is a loopback plug unless `--wire` says
//! otherwise. Two `--socket` options serve two functions from one process, cabled back to back
//! (`--wire` must then be left out). `--wire pair:OTHER.sock` cables this process's function to
//! the one another `cxdirect-emu-server` process serves on `OTHER.sock`, through a side channel
//! (see the `bridge` module). Options take their value as the next argument or after `=`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;
use thiserror::Error;

/// The usage text printed by `--help`.
pub const USAGE: &str = "\
usage: cxdirect-emu-server --socket PATH [--socket PATH2] [--wire loopback|none|pair:OTHER.sock]
                           [--pcap FILE] [--mac XX:XX:XX:XX:XX:XX]... [--roce]
                           [--trace-commands FILE] [--blueflame-hold-us N]
                           [--fatal-trigger FILE] [-v|-vv]

Serves the cxdirect ConnectX-6 Dx device model to QEMU over vfio-user
(QEMU >= 10.1: -device '{\"driver\":\"vfio-user-pci\",\"x-msg-timeout\":60000,
\"socket\":{\"type\":\"unix\",\"path\":\"PATH\"}}'). BAR writes are posted and QEMU queues
them without limit when the model falls behind; a BAR read waits behind them, so a guest
posting at full rate needs a reply timeout (x-msg-timeout, ms) longer than QEMU's 5 s.

  --socket PATH      listen for one vfio-user client on PATH (a stale socket there is replaced);
                     give it twice to serve two functions cabled back to back in this process
  --wire loopback    the function's port receives its own frames (default with one socket)
  --wire none        no cable: the link stays down
  --wire pair:OTHER  cable this function to the one another cxdirect-emu-server serves on the
                     socket OTHER (each process names the other's socket)
  --pcap FILE        record every frame on the wire to FILE (classic pcap)
  --mac MAC          permanent MAC address of the next function (default 02:cd:00:00:00:01;
                     a second function gets the first's with the last bit flipped)
  --roce             offer RoCE v2 (general cap roce, the RoCE capability page, the GID table)
                     even where the model's default configuration does not
  --trace-commands FILE
                     record every command each function executes, one JSON object per line
                     (opcode, op_mod, decoded input, status, syndrome), written as each command
                     completes; with two sockets function 0 writes FILE.0 and function 1 FILE.1
  --blueflame-hold-us N
                     hold a BlueFlame copy's first 8-byte store up to N microseconds for the
                     rest (QEMU forwards a copy eight bytes at a time), so the model takes the
                     WQE from the copy and mlx5_core finds write combining; a doorbell nothing
                     follows reaches the model when the next message comes or N us later
                     (default 200; 0: no assembly, every store reaches the model at once)
  --fatal-trigger FILE
                     while serving, look for FILE every 200 ms; when it appears, remove it and
                     fail the function whose index it holds (0, or 1 with two sockets) with a
                     fatal firmware error asking for the recovery flow (health syndrome 0x1 with
                     rfr), as a ConnectX reports an internal error that a firmware reset clears:
                     for testing a driver's recovery (Linux's mlx5_core resets the firmware
                     through nic_interface and loads again)
  -v, -vv            more logging (per-request lines; vfio_user message traces)
  -h, --help         this text

Guest memory must be shareable: -object memory-backend-memfd,id=mem,size=...,share=on
-machine memory-backend=mem. The server exits (status 0) when its clients have disconnected.";

/// How the function's port is cabled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireSpec {
    /// Not given: loopback for one socket, back to back for two.
    Default,
    /// A loopback plug.
    Loopback,
    /// No cable.
    None,
    /// Cabled to the function another process serves on this socket.
    PairWith(PathBuf),
}

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Sockets to serve, one function each (one or two).
    pub sockets: Vec<PathBuf>,
    /// The cable.
    pub wire: WireSpec,
    /// Where to record the wire.
    pub pcap: Option<PathBuf>,
    /// MAC addresses, in socket order.
    pub macs: Vec<[u8; 6]>,
    /// 0, 1 (`-v`) or 2 (`-vv`).
    pub verbosity: u8,
    /// Whether the functions offer RoCE v2 whatever the model's default (`--roce`).
    pub roce: bool,
    /// Where to record the commands the functions execute (`--trace-commands`): see
    /// [`Options::trace_paths`].
    pub trace_commands: Option<PathBuf>,
    /// How long a BlueFlame copy's first store waits for the rest (`--blueflame-hold-us`,
    /// 0 to [`MAX_BLUEFLAME_HOLD_US`] µs; zero: no assembly): see
    /// [`crate::server::blueflame`].
    pub blueflame_hold: Duration,
    /// The file whose appearance fails a function with a fatal firmware error
    /// (`--fatal-trigger`).
    pub fatal_trigger: Option<PathBuf>,
}

/// The longest `--blueflame-hold-us`: 10 ms, past which every plain doorbell would wait longer
/// than a guest's completion timers tolerate.
pub const MAX_BLUEFLAME_HOLD_US: u64 = 10_000;

impl Options {
    /// The command trace file of each function, in socket order: `FILE` for one function,
    /// `FILE.0` and `FILE.1` for two; empty without `--trace-commands`.
    pub fn trace_paths(&self) -> Vec<PathBuf> {
        let Some(file) = &self.trace_commands else {
            return Vec::new();
        };
        if self.sockets.len() < 2 {
            return vec![file.clone()];
        }
        (0..self.sockets.len())
            .map(|i| {
                let mut name = file.clone().into_os_string();
                name.push(format!(".{i}"));
                PathBuf::from(name)
            })
            .collect()
    }
}

/// What to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Serve.
    Run(Options),
    /// Print the usage text.
    Help,
}

/// A command line that cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CliError {
    /// An option that needs a value came last.
    #[error("{option} needs a value")]
    MissingValue {
        /// The option.
        option: String,
    },
    /// An argument that is not an option.
    #[error("unknown argument {0:?} (see --help)")]
    Unknown(String),
    /// An argument that is not valid UTF-8 where text is needed.
    #[error("argument {0:?} is not valid UTF-8")]
    NotUtf8(OsString),
    /// No `--socket`.
    #[error("--socket PATH is required")]
    NoSocket,
    /// More than two sockets.
    #[error("at most two --socket options (one function each, cabled back to back)")]
    TooManySockets,
    /// The same socket twice.
    #[error("--socket {0:?} is given twice")]
    DuplicateSocket(PathBuf),
    /// A `--wire` value that is not understood.
    #[error("--wire {0:?}: expected loopback, none or pair:OTHER.sock")]
    BadWire(String),
    /// `--wire` given twice.
    #[error("--wire is given twice")]
    WireTwice,
    /// `--wire` together with two sockets.
    #[error(
        "two --socket options already cable their functions back to back; leave out --wire {0}"
    )]
    WireWithTwoSockets(String),
    /// `--wire pair:` naming this process's own socket.
    #[error("--wire pair:{0:?} names this server's own socket; name the other server's socket")]
    PairWithSelf(PathBuf),
    /// A MAC address that does not parse.
    #[error("--mac {0:?}: expected six hexadecimal bytes separated by ':' (02:cd:00:00:00:01)")]
    BadMac(String),
    /// A multicast MAC address.
    #[error("--mac {0}: a multicast address cannot be a port's permanent address")]
    MulticastMac(String),
    /// More MACs than functions.
    #[error("{macs} --mac options for {sockets} function(s)")]
    TooManyMacs {
        /// MACs given.
        macs: usize,
        /// Sockets given.
        sockets: usize,
    },
    /// `--pcap` given twice.
    #[error("--pcap is given twice")]
    PcapTwice,
    /// `--trace-commands` given twice.
    #[error("--trace-commands is given twice")]
    TraceTwice,
    /// `--fatal-trigger` given twice.
    #[error("--fatal-trigger is given twice")]
    FatalTriggerTwice,
    /// A `--blueflame-hold-us` value that is not a number of microseconds in range.
    #[error(
        "--blueflame-hold-us {0:?}: expected microseconds from 0 (no assembly) to {MAX_BLUEFLAME_HOLD_US}"
    )]
    BadHold(String),
}

/// Parses the arguments after the program name.
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Command, CliError> {
    let mut args = args.into_iter();
    let mut sockets: Vec<PathBuf> = Vec::new();
    let mut wire: Option<(WireSpec, String)> = None;
    let mut pcap = None;
    let mut macs = Vec::new();
    let mut verbosity = 0u8;
    let mut roce = false;
    let mut trace_commands = None;
    let mut blueflame_hold = super::blueflame::DEFAULT_HOLD;
    let mut fatal_trigger = None;
    while let Some(arg) = args.next() {
        let text = arg.to_str().map(str::to_owned);
        let (name, inline) = match text.as_deref() {
            Some(t) if t.starts_with("--") => match t.split_once('=') {
                Some((n, v)) => (n.to_owned(), Some(OsString::from(v))),
                None => (t.to_owned(), None),
            },
            Some(t) => (t.to_owned(), None),
            None => return Err(CliError::Unknown(arg.to_string_lossy().into_owned())),
        };
        let mut value = |option: &str| -> Result<OsString, CliError> {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| CliError::MissingValue {
                    option: option.to_owned(),
                })
        };
        match name.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "-v" | "--verbose" => verbosity = verbosity.saturating_add(1),
            "-vv" => verbosity = verbosity.saturating_add(2),
            "--roce" => roce = true,
            "--socket" => {
                let path = PathBuf::from(value("--socket")?);
                if sockets.contains(&path) {
                    return Err(CliError::DuplicateSocket(path));
                }
                sockets.push(path);
            }
            "--wire" => {
                let raw = value("--wire")?;
                let text = raw.to_str().ok_or_else(|| CliError::NotUtf8(raw.clone()))?;
                let spec = match text {
                    "loopback" => WireSpec::Loopback,
                    "none" => WireSpec::None,
                    t => match t.strip_prefix("pair:") {
                        Some(other) if !other.is_empty() => WireSpec::PairWith(other.into()),
                        _ => return Err(CliError::BadWire(t.to_owned())),
                    },
                };
                if wire.replace((spec, text.to_owned())).is_some() {
                    return Err(CliError::WireTwice);
                }
            }
            "--pcap" => {
                if pcap.replace(PathBuf::from(value("--pcap")?)).is_some() {
                    return Err(CliError::PcapTwice);
                }
            }
            "--trace-commands" => {
                let path = PathBuf::from(value("--trace-commands")?);
                if trace_commands.replace(path).is_some() {
                    return Err(CliError::TraceTwice);
                }
            }
            "--fatal-trigger" => {
                let path = PathBuf::from(value("--fatal-trigger")?);
                if fatal_trigger.replace(path).is_some() {
                    return Err(CliError::FatalTriggerTwice);
                }
            }
            "--blueflame-hold-us" => {
                let raw = value("--blueflame-hold-us")?;
                let text = raw.to_str().ok_or_else(|| CliError::NotUtf8(raw.clone()))?;
                let us = text
                    .parse::<u64>()
                    .ok()
                    .filter(|us| *us <= MAX_BLUEFLAME_HOLD_US)
                    .ok_or_else(|| CliError::BadHold(text.to_owned()))?;
                blueflame_hold = Duration::from_micros(us);
            }
            "--mac" => {
                let raw = value("--mac")?;
                let text = raw.to_str().ok_or_else(|| CliError::NotUtf8(raw.clone()))?;
                macs.push(parse_mac(text)?);
            }
            other => return Err(CliError::Unknown(other.to_owned())),
        }
    }
    if sockets.is_empty() {
        return Err(CliError::NoSocket);
    }
    if sockets.len() > 2 {
        return Err(CliError::TooManySockets);
    }
    if macs.len() > sockets.len() {
        return Err(CliError::TooManyMacs {
            macs: macs.len(),
            sockets: sockets.len(),
        });
    }
    let wire = match wire {
        None => WireSpec::Default,
        Some((_, text)) if sockets.len() == 2 => return Err(CliError::WireWithTwoSockets(text)),
        Some((WireSpec::PairWith(other), _)) if sockets.contains(&other) => {
            return Err(CliError::PairWithSelf(other))
        }
        Some((spec, _)) => spec,
    };
    Ok(Command::Run(Options {
        sockets,
        wire,
        pcap,
        macs,
        verbosity,
        roce,
        trace_commands,
        blueflame_hold,
        fatal_trigger,
    }))
}

/// Parses `XX:XX:XX:XX:XX:XX` (or with `-`), refusing multicast addresses.
pub fn parse_mac(text: &str) -> Result<[u8; 6], CliError> {
    let bad = || CliError::BadMac(text.to_owned());
    let mut mac = [0u8; 6];
    let mut parts = text.split([':', '-']);
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
    if mac[0] & 1 != 0 {
        return Err(CliError::MulticastMac(text.to_owned()));
    }
    Ok(mac)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Result<Command, CliError> {
        parse(args.iter().map(OsString::from))
    }

    #[test]
    fn one_socket_defaults() {
        let Ok(Command::Run(o)) = run(&["--socket", "/tmp/a.sock"]) else {
            panic!("parse failed")
        };
        assert_eq!(o.sockets, vec![PathBuf::from("/tmp/a.sock")]);
        assert_eq!(o.wire, WireSpec::Default);
        assert_eq!(o.pcap, None);
        assert_eq!(o.blueflame_hold, crate::server::blueflame::DEFAULT_HOLD);
    }

    #[test]
    fn blueflame_hold_takes_microseconds_within_range() {
        let hold = |v: &str| match run(&["--socket", "/a", "--blueflame-hold-us", v]) {
            Ok(Command::Run(o)) => Ok(o.blueflame_hold),
            Ok(Command::Help) => panic!("help"),
            Err(e) => Err(e),
        };
        assert_eq!(hold("0"), Ok(Duration::ZERO));
        assert_eq!(hold("50"), Ok(Duration::from_micros(50)));
        assert_eq!(hold("10000"), Ok(Duration::from_millis(10)));
        for bad in ["10001", "-1", "1ms", ""] {
            assert_eq!(hold(bad), Err(CliError::BadHold(bad.into())), "{bad:?}");
        }
    }

    #[test]
    fn options_and_errors() {
        let Ok(Command::Run(o)) = run(&[
            "--socket=/a",
            "--wire",
            "pair:/b",
            "--pcap",
            "w.pcap",
            "--mac",
            "02:00:00:00:00:07",
            "-v",
        ]) else {
            panic!("parse failed")
        };
        assert_eq!(o.wire, WireSpec::PairWith("/b".into()));
        assert_eq!(o.macs, vec![[2, 0, 0, 0, 0, 7]]);
        assert_eq!(o.verbosity, 1);
        assert!(!o.roce);
        let Ok(Command::Run(o)) = run(&["--socket", "/a", "--roce"]) else {
            panic!("parse failed")
        };
        assert!(o.roce);
        assert_eq!(run(&[]), Err(CliError::NoSocket));
        assert_eq!(
            run(&["--socket"]),
            Err(CliError::MissingValue {
                option: "--socket".into()
            })
        );
        assert!(matches!(
            run(&["--socket", "/a", "--socket", "/b", "--wire", "loopback"]),
            Err(CliError::WireWithTwoSockets(_))
        ));
        assert!(matches!(
            run(&["--socket", "/a", "--wire", "pair:/a"]),
            Err(CliError::PairWithSelf(_))
        ));
        assert!(matches!(
            run(&["--socket", "/a", "--mac", "01:00:00:00:00:00"]),
            Err(CliError::MulticastMac(_))
        ));
        assert!(matches!(
            run(&["--socket", "/a", "--mac", "2:0:0:0:0:0"]),
            Err(CliError::BadMac(_))
        ));
        assert_eq!(run(&["--help"]), Ok(Command::Help));
    }

    #[test]
    fn trace_commands_names_one_file_per_function() {
        let Ok(Command::Run(o)) = run(&["--socket", "/a"]) else {
            panic!("parse failed")
        };
        assert!(o.trace_paths().is_empty());
        let Ok(Command::Run(o)) = run(&["--socket", "/a", "--trace-commands", "/t/cmds.jsonl"])
        else {
            panic!("parse failed")
        };
        assert_eq!(o.trace_paths(), vec![PathBuf::from("/t/cmds.jsonl")]);
        let Ok(Command::Run(o)) = run(&[
            "--socket",
            "/a",
            "--socket",
            "/b",
            "--trace-commands=/t/cmds.jsonl",
        ]) else {
            panic!("parse failed")
        };
        assert_eq!(
            o.trace_paths(),
            vec![
                PathBuf::from("/t/cmds.jsonl.0"),
                PathBuf::from("/t/cmds.jsonl.1")
            ]
        );
        assert_eq!(
            run(&[
                "--socket",
                "/a",
                "--trace-commands",
                "x",
                "--trace-commands",
                "y"
            ]),
            Err(CliError::TraceTwice)
        );
    }

    #[test]
    fn a_fatal_trigger_names_one_file() {
        let Ok(Command::Run(o)) = run(&["--socket", "/a"]) else {
            panic!("parse failed")
        };
        assert_eq!(o.fatal_trigger, None);
        let Ok(Command::Run(o)) = run(&["--socket", "/a", "--fatal-trigger=/t/fatal"]) else {
            panic!("parse failed")
        };
        assert_eq!(o.fatal_trigger, Some(PathBuf::from("/t/fatal")));
        assert_eq!(
            run(&[
                "--socket",
                "/a",
                "--fatal-trigger",
                "x",
                "--fatal-trigger",
                "y"
            ]),
            Err(CliError::FatalTriggerTwice)
        );
    }
}
