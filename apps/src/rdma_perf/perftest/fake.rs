//! A stand-in for a perftest 25.01 process's out-of-band exchange, for tests: what
//! `write_bw.c`, `read_bw.c`, `send_bw.c` and `write_lat.c` put on the TCP connection and in
//! which order, with the messages laid out as `perftest_communication.c` lays them out. It
//! formats its own messages (it does not use [`super::wire`]) and keeps what it received.

use super::session::Test;
use std::io::{Read, Write};

/// What the fake announces and does.
#[derive(Clone, Debug)]
pub struct FakeSpec {
    /// The perftest program it plays.
    pub test: Test,
    /// Whether it was given a server name (writes first in each trade).
    pub client: bool,
    /// Its version message's text.
    pub version: &'static [u8],
    /// Its cycle buffer and cache line sizes.
    pub cycle_buffer: u32,
    /// Its cache line size.
    pub cache_line: u32,
    /// Its MTU message (an `ibv_mtu` digit and a NUL).
    pub mtu: [u8; 2],
    /// Queue pairs.
    pub qps: usize,
    /// The report a WRITE or READ client sends: size, iters, peak, average, message rate.
    pub report: (u64, u64, f64, f64, f64),
    /// Replaces its key messages with these bytes when set (a hostile peer).
    pub keys_override: Option<Vec<u8>>,
}

impl FakeSpec {
    /// A well-behaved perftest 6.24 playing `test`.
    pub fn new(test: Test, client: bool) -> Self {
        Self {
            test,
            client,
            version: b"6.24",
            cycle_buffer: 4096,
            cache_line: 64,
            mtu: *b"3\0",
            qps: 1,
            report: (65536, 5000, 11.5, 11.25, 0.021),
            keys_override: None,
        }
    }
}

/// What the fake received.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Transcript {
    /// The peer's 16-byte version message.
    pub version: Vec<u8>,
    /// The peer's cycle buffer and cache line, as sent (big-endian).
    pub sizes: [[u8; 4]; 2],
    /// The peer's MTU message.
    pub mtu: [u8; 2],
    /// Every key message received, in order.
    pub keys: Vec<Vec<u8>>,
    /// The report fields received (WRITE and READ tests).
    pub report: Vec<[u8; 8]>,
    /// Bytes that came after the last trade, before the peer closed.
    pub trailing: usize,
}

/// The fake's key message for queue pair `i`: lid 0, out_reads 16, QPN 0x100 + i, PSN
/// 0x5a5a00 + i, rkey 0x1234, vaddr 0x7f00_0000_1000 + i * 0x1000, GID ::ffff:192.168.78.9,
/// no SRQ; `KEY_PRINT_FMT_GID`, 107 characters and a NUL.
pub fn fake_keys(i: usize) -> Vec<u8> {
    let gid = [0u8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 168, 78, 9];
    let mut s = format!(
        "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
        0,
        16,
        0x100 + i,
        0x5a_5a00 + i,
        0x1234,
        0x7f00_0000_1000u64 + i as u64 * 0x1000
    );
    for b in gid {
        s.push_str(&format!("{b:02x}:"));
    }
    s.push_str("00000000:");
    let mut v = s.into_bytes();
    v.push(0);
    assert_eq!(v.len(), 108);
    v
}

struct Fake<S> {
    s: S,
    client: bool,
    t: Transcript,
}

impl<S: Read + Write> Fake<S> {
    /// `ctx_xchg_data_ethernet`: the client writes then reads, the server reads then writes.
    fn xchg(&mut self, mine: &[u8], n: usize) -> Result<Vec<u8>, String> {
        let mut theirs = vec![0u8; n];
        if self.client {
            self.s.write_all(mine).map_err(|e| e.to_string())?;
            self.s.read_exact(&mut theirs).map_err(|e| e.to_string())?;
        } else {
            self.s.read_exact(&mut theirs).map_err(|e| e.to_string())?;
            self.s.write_all(mine).map_err(|e| e.to_string())?;
        }
        Ok(theirs)
    }

    /// `ctx_hand_shake` with queue pair `i`'s keys.
    fn keys(&mut self, spec: &FakeSpec, i: usize) -> Result<(), String> {
        let mine = spec.keys_override.clone().unwrap_or_else(|| fake_keys(i));
        let theirs = self.xchg(&mine, 108)?;
        self.t.keys.push(theirs);
        Ok(())
    }
}

/// Plays `spec` over `stream` until its program would exit; `before_run` is called where
/// the fake's own loop would run (after the trade that starts it).
pub fn play<S: Read + Write>(
    stream: S,
    spec: &FakeSpec,
    mut before_run: impl FnMut(&Transcript),
) -> Result<Transcript, String> {
    let mut f = Fake {
        s: stream,
        client: spec.client,
        t: Transcript::default(),
    };
    // exchange_versions: `char version[16]`, strncpy'd (NUL-padded).
    let mut version = [0u8; 16];
    version[..spec.version.len()].copy_from_slice(spec.version);
    f.t.version = f.xchg(&version, 16)?;
    // check_sys_data (peer >= 5.32): two network-order ints.
    let a = f.xchg(&spec.cycle_buffer.to_be_bytes(), 4)?;
    let b = f.xchg(&spec.cache_line.to_be_bytes(), 4)?;
    f.t.sizes = [[a[0], a[1], a[2], a[3]], [b[0], b[1], b[2], b[3]]];
    // check_mtu (peer >= 5.31): two bytes of sprintf("%d").
    let m = f.xchg(&spec.mtu, 2)?;
    f.t.mtu = [m[0], m[1]];
    let q = spec.qps;
    if spec.test == Test::WriteLat {
        f.keys(spec, 0)?;
    }
    for i in 0..q {
        f.keys(spec, i)?;
    }
    // ctx_connect here.
    if spec.test == Test::SendBw {
        f.keys(spec, 0)?;
    }
    for i in 0..q {
        f.keys(spec, i)?;
    }
    match spec.test {
        Test::SendBw => {
            // The server posts its receives, then both trade once more and run.
            f.keys(spec, 0)?;
            before_run(&f.t);
            f.keys(spec, 0)?;
        }
        Test::WriteLat => {
            f.keys(spec, 0)?;
            before_run(&f.t);
        }
        Test::WriteBw | Test::ReadBw => {
            f.keys(spec, 0)?;
            if spec.client {
                before_run(&f.t);
            }
            f.keys(spec, 0)?;
            // xchg_bw_reports (peer >= 5.33): five 8-byte big-endian fields, one by one.
            let (size, iters, peak, avg, rate) = if spec.client {
                spec.report
            } else {
                (0, 0, 0.0, 0.0, 0.0)
            };
            for field in [
                size.to_be_bytes(),
                iters.to_be_bytes(),
                peak.to_bits().to_be_bytes(),
                avg.to_bits().to_be_bytes(),
                rate.to_bits().to_be_bytes(),
            ] {
                let got = f.xchg(&field, 8)?;
                f.t.report.push(got.try_into().map_err(|_| "short field")?);
            }
            // ctx_close_connection.
            f.keys(spec, 0)?;
        }
    }
    let mut rest = Vec::new();
    f.s.read_to_end(&mut rest).map_err(|e| e.to_string())?;
    f.t.trailing = rest.len();
    Ok(f.t)
}
