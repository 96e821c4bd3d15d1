//! The command trace: every command a function executes, one JSON object per line, so that two
//! drivers' conversations with the model can be set side by side (`cxdirect-cmd-diff`).
//!
//! A line reads
//!
//! ```text
//! {"seq":7,"function":"02:cd:00:00:00:01","opcode":"CREATE_CQ","op_mod":0,"status":"OK","syndrome":0,"in":{"cq_context.log_cq_size":6,"pas":[4096]}}
//! ```
//!
//! `in` holds the input decoded through the `cxdirect-hw` layouts (see [`decode`]): every field
//! that is not zero, by its path, nested contexts as `ctx.field`; arrays as lists (byte arrays
//! as a hex string), trailing zeros left out; bits no layout declares as `PATH+0xBYTE`. Numbers
//! are plain JSON integers. A command refused before it ran (a delivery error) is not a command
//! the function executed and is not traced.
//!
//! Tracing is opt-in ([`crate::EmuConfig::command_trace`]); when off the model pays one branch
//! per command. Each line is written with one `write` call as the command completes, so a file
//! is complete up to the last command whenever the process stops.

pub mod decode;

use decode::{decode_input, FieldData};
use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Where trace lines go.
enum Sink {
    /// A writer (a file), one `write_all` per line.
    Writer(Box<dyn Write + Send>),
    /// Kept in memory, for tests and in-process tools.
    Memory(Vec<String>),
}

struct Inner {
    sink: Mutex<Sink>,
    seq: AtomicU64,
    write_errors: AtomicU64,
}

/// A command trace: cheap to clone (clones share one sink and one sequence). Functions
/// configured with the same trace write to it in the order their commands complete; each line
/// names its function.
#[derive(Clone)]
pub struct CommandTrace {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for CommandTrace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommandTrace")
            .field("commands", &self.inner.seq.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl CommandTrace {
    fn with(sink: Sink) -> Self {
        Self {
            inner: Arc::new(Inner {
                sink: Mutex::new(sink),
                seq: AtomicU64::new(0),
                write_errors: AtomicU64::new(0),
            }),
        }
    }

    /// A trace written to a new file at `path` (an existing file is truncated).
    ///
    /// # Errors
    ///
    /// The file cannot be created.
    pub fn create(path: impl AsRef<Path>) -> io::Result<Self> {
        Ok(Self::to_writer(File::create(path)?))
    }

    /// A trace written to `writer`, one `write_all` per line (give it an unbuffered writer, or
    /// lines may wait in a buffer when the process stops).
    pub fn to_writer(writer: impl Write + Send + 'static) -> Self {
        Self::with(Sink::Writer(Box::new(writer)))
    }

    /// A trace kept in memory: read it with [`lines`](Self::lines).
    pub fn memory() -> Self {
        Self::with(Sink::Memory(Vec::new()))
    }

    /// The lines recorded so far, without their newlines (empty for a trace written out).
    pub fn lines(&self) -> Vec<String> {
        match &*self.inner.sink.lock().unwrap_or_else(|e| e.into_inner()) {
            Sink::Memory(lines) => lines.clone(),
            Sink::Writer(_) => Vec::new(),
        }
    }

    /// Commands recorded so far.
    pub fn commands(&self) -> u64 {
        self.inner.seq.load(Ordering::Relaxed)
    }

    /// Lines the writer refused (the disk filled, the pipe closed); those lines are lost.
    pub fn write_errors(&self) -> u64 {
        self.inner.write_errors.load(Ordering::Relaxed)
    }

    /// Flushes the writer (a no-op for a file, which is written line by line).
    ///
    /// # Errors
    ///
    /// The writer's flush failed.
    pub fn flush(&self) -> io::Result<()> {
        match &mut *self.inner.sink.lock().unwrap_or_else(|e| e.into_inner()) {
            Sink::Writer(w) => w.flush(),
            Sink::Memory(_) => Ok(()),
        }
    }

    /// Records one executed command: the function's name, the whole input, and the status and
    /// syndrome the function answered with.
    pub(crate) fn record(&self, function: &str, input: &[u8], status: u8, syndrome: u32) {
        let decoded = decode_input(input);
        let mut sink = self.inner.sink.lock().unwrap_or_else(|e| e.into_inner());
        // The sequence is taken under the lock, so lines appear in sequence order.
        let seq = self.inner.seq.fetch_add(1, Ordering::Relaxed);
        let line = format_line(seq, function, &decoded, status, syndrome);
        match &mut *sink {
            Sink::Memory(lines) => lines.push(line),
            Sink::Writer(w) => {
                let mut bytes = line.into_bytes();
                bytes.push(b'\n');
                if w.write_all(&bytes).is_err() {
                    self.inner.write_errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
}

/// Appends `s` as a JSON string.
fn push_json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn format_line(
    seq: u64,
    function: &str,
    decoded: &decode::DecodedInput,
    status: u8,
    syndrome: u32,
) -> String {
    use cxdirect_hw::cmd::{CmdStatus, Opcode};
    let mut out = String::with_capacity(256);
    let _ = write!(out, "{{\"seq\":{seq},\"function\":");
    push_json_string(&mut out, function);
    out.push_str(",\"opcode\":");
    match Opcode::try_from(decoded.opcode) {
        Ok(op) => push_json_string(&mut out, op.name()),
        Err(_) => push_json_string(&mut out, &format!("{:#x}", decoded.opcode)),
    }
    let _ = write!(out, ",\"op_mod\":{},\"status\":", decoded.op_mod);
    match CmdStatus::try_from(status) {
        Ok(st) => push_json_string(&mut out, st.name()),
        Err(_) => push_json_string(&mut out, &format!("{status:#x}")),
    }
    let _ = write!(out, ",\"syndrome\":{syndrome},\"in\":{{");
    for (i, (name, value)) in decoded.fields.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_json_string(&mut out, name);
        out.push(':');
        match value {
            FieldData::Scalar(v) => {
                let _ = write!(out, "{v}");
            }
            FieldData::Bytes(bytes) => {
                let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
                push_json_string(&mut out, &hex);
            }
            FieldData::Array(elements) => {
                out.push('[');
                for (j, e) in elements.iter().enumerate() {
                    if j > 0 {
                        out.push(',');
                    }
                    let _ = write!(out, "{e}");
                }
                out.push(']');
            }
        }
    }
    out.push_str("}}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use cxdirect_hw::cmd::Opcode;
    use cxdirect_hw::cq::CreateCqIn;

    #[test]
    fn a_line_names_function_opcode_status_and_set_fields() {
        let trace = CommandTrace::memory();
        let mut buf = vec![0u8; <CreateCqIn as cxdirect_hw::layout::Layout>::SIZE + 8];
        let mut cmd = CreateCqIn::new(&mut buf[..]).unwrap();
        cmd.set_opcode(Opcode::CreateCq as u16);
        cmd.cq_context_mut().set_log_cq_size(6);
        cmd.set_pas(0, 0x1000).unwrap();
        trace.record("02:cd:00:00:00:01", &buf, 0, 0);
        trace.record(
            "02:cd:00:00:00:01",
            &[0x01, 0x04, 0, 0, 0, 0, 0, 0],
            3,
            0x0c0d_0012,
        );
        assert_eq!(
            trace.lines(),
            vec![
                "{\"seq\":0,\"function\":\"02:cd:00:00:00:01\",\"opcode\":\"CREATE_CQ\",\"op_mod\":0,\
                 \"status\":\"OK\",\"syndrome\":0,\"in\":{\"cq_context.log_cq_size\":6,\"pas\":[4096]}}"
                    .to_string(),
                "{\"seq\":1,\"function\":\"02:cd:00:00:00:01\",\"opcode\":\"ENABLE_HCA\",\"op_mod\":0,\
                 \"status\":\"BAD_PARAM\",\"syndrome\":202178578,\"in\":{}}"
                    .to_string(),
            ]
        );
        assert_eq!(trace.commands(), 2);
    }
}
