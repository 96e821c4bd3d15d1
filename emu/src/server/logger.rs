//! A small `log` backend that writes to stderr, so the server's own messages and the
//! `vfio_user` crate's warnings and errors (an unsupported command, a refused request) reach the
//! person running the rig.
//!
//! Verbosity: 0 shows the server's information messages and everyone's warnings and errors; 1
//! (`-v`) adds the `vfio_user` crate's information messages and the server's per-request debug
//! lines; 2 (`-vv`) adds the crate's per-message traces.

use log::{Level, LevelFilter, Log, Metadata, Record};
use std::io::Write;

/// The stderr logger.
#[derive(Debug)]
pub struct StderrLogger {
    verbosity: u8,
}

/// Name printed before every line.
pub const PROGRAM: &str = "cxdirect-emu-server";

impl StderrLogger {
    fn max_level(&self, target: &str) -> Level {
        let ours = target.starts_with("cxdirect") || target.starts_with("server");
        match (self.verbosity, ours) {
            (0, true) => Level::Info,
            (0, false) => Level::Warn,
            (1, true) => Level::Debug,
            (1, false) => Level::Info,
            _ => Level::Trace,
        }
    }
}

impl Log for StderrLogger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= self.max_level(metadata.target())
    }

    fn log(&self, record: &Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let level = match record.level() {
            Level::Error => "error: ",
            Level::Warn => "warning: ",
            _ => "",
        };
        let mut err = std::io::stderr().lock();
        let _ = if record.target().starts_with("vfio_user") {
            writeln!(err, "{PROGRAM}: {level}vfio_user: {}", record.args())
        } else {
            writeln!(err, "{PROGRAM}: {level}{}", record.args())
        };
    }

    fn flush(&self) {
        let _ = std::io::stderr().flush();
    }
}

/// Installs the logger (once per process; later calls change nothing).
pub fn install(verbosity: u8) {
    let logger: &'static StderrLogger = Box::leak(Box::new(StderrLogger { verbosity }));
    if log::set_logger(logger).is_ok() {
        log::set_max_level(LevelFilter::Trace);
    }
}
