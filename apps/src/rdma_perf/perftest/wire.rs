//! What perftest puts on its TCP connection, byte for byte (perftest 25.01,
//! `src/perftest_communication.c`): the version (`exchange_versions`), the cycle buffer and
//! cache line sizes (`check_sys_data`), the path MTU (`check_mtu`), the key message of each
//! queue pair (`ethernet_write_keys` / `ethernet_read_keys`, `KEY_PRINT_FMT` and
//! `KEY_PRINT_FMT_GID` of `perftest_communication.h`) and the bandwidth report
//! (`xchg_bw_reports`).

use std::fmt;

/// Bytes of a version message (`MAX_VERSION`): the version's text, NUL-padded.
pub const VERSION_LEN: usize = 16;
/// Bytes of a key message without a GID (`KEY_MSG_SIZE`), its NUL included.
pub const KEY_LEN: usize = 59;
/// Bytes of a key message with a GID (`KEY_MSG_SIZE_GID`), its NUL included.
pub const KEY_LEN_GID: usize = 108;
/// Bytes of the MTU message between versions 5.31 and later: one ASCII digit and a NUL.
pub const MTU_LEN: usize = 2;
/// Bytes of each field of a bandwidth report between versions 5.33 and later.
pub const REPORT_FIELD_LEN: usize = 8;

/// The version this side announces: the one Debian's perftest 25.01 announces. Below 6.28, so
/// that no peer sends the binary parameter negotiation of later versions; at or above 5.70,
/// which every perftest since requires of its peer (`check_version_compatibility`).
pub const OUR_VERSION: &str = "6.24";
/// The oldest peer whose exchange this side speaks: perftest refuses anything older itself.
pub const OLDEST_PEER: f64 = 5.70;

/// Why a message from the peer was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The version message holds no version number.
    #[error("perftest version message `{0}` holds no version number")]
    Version(String),
    /// The peer's version is too old for this exchange.
    #[error("perftest version {0} is older than 5.70, the oldest whose exchange is spoken here")]
    TooOld(String),
    /// The key message does not end in its NUL, or holds bytes that are not text.
    #[error("key message: not NUL-terminated ASCII text of {0} bytes")]
    NotText(usize),
    /// The key message has the wrong number of `:`-separated fields.
    #[error("key message `{text}`: {got} fields where {expected} were expected")]
    Fields {
        /// What the peer sent.
        text: String,
        /// Fields found.
        got: usize,
        /// Fields the format has.
        expected: usize,
    },
    /// A field is not hexadecimal of its width.
    #[error("key message: {field} `{text}` is not {digits} hex digits")]
    Field {
        /// The field's name.
        field: &'static str,
        /// What the peer sent.
        text: String,
        /// How many hex digits the field has.
        digits: usize,
    },
    /// The MTU message is not an ASCII digit and a NUL.
    #[error("MTU message {0:02x?} is not a digit and a NUL")]
    Mtu([u8; MTU_LEN]),
}

/// A perftest version, as `atof` reads the version message.
#[derive(Clone, Debug, PartialEq)]
pub struct Version {
    /// The text before the first NUL.
    pub text: String,
    /// Its leading number.
    pub number: f64,
}

/// The version message this side sends: [`OUR_VERSION`], NUL-padded.
pub fn version_message() -> [u8; VERSION_LEN] {
    let mut out = [0u8; VERSION_LEN];
    out[..OUR_VERSION.len()].copy_from_slice(OUR_VERSION.as_bytes());
    out
}

/// Reads a peer's version message: its leading decimal number (as `atof` reads it) must be
/// there and at least [`OLDEST_PEER`].
pub fn parse_version(msg: &[u8; VERSION_LEN]) -> Result<Version, WireError> {
    let end = msg.iter().position(|&b| b == 0).unwrap_or(VERSION_LEN);
    let text: String = msg[..end]
        .iter()
        .map(|&b| if b.is_ascii_graphic() { b as char } else { '?' })
        .collect();
    let digits = text
        .bytes()
        .take_while(|b| b.is_ascii_digit() || *b == b'.')
        .count();
    let number: f64 = text[..digits]
        .parse()
        .map_err(|_| WireError::Version(text.clone()))?;
    if number < OLDEST_PEER {
        return Err(WireError::TooOld(text));
    }
    Ok(Version { text, number })
}

/// The MTU message: the `ibv_mtu` value (1 = 256 … 5 = 4096) as `sprintf("%d")` writes it,
/// of which the first two bytes go on the wire.
pub fn mtu_message(ibv_mtu: u8) -> [u8; MTU_LEN] {
    [b'0' + ibv_mtu.min(9), 0]
}

/// Reads the peer's MTU message; `None` when it names no valid MTU (perftest then keeps its
/// own, `valid_mtu_size`).
pub fn parse_mtu(msg: &[u8; MTU_LEN]) -> Result<Option<u8>, WireError> {
    match msg {
        [d @ b'0'..=b'9', 0] => Ok(Some(d - b'0').filter(|m| (1..=5).contains(m))),
        _ => Err(WireError::Mtu(*msg)),
    }
}

/// What a queue pair's key message carries (`struct pingpong_dest`'s fields on the wire).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Keys {
    /// The port's LID (0 on RoCE).
    pub lid: u16,
    /// RDMA READs this side serves at once, which the peer takes as its own outstanding
    /// READs.
    pub out_reads: u16,
    /// The queue pair's number (24 bits).
    pub qpn: u32,
    /// Its first packet sequence number (24 bits).
    pub psn: u32,
    /// The remote key of the buffer.
    pub rkey: u32,
    /// Where the peer's WRITEs land and its READs read from.
    pub vaddr: u64,
    /// The port's GID: present in the 108-byte message, absent in the 59-byte one.
    pub gid: Option<[u8; 16]>,
    /// The shared receive queue's number (0: none).
    pub srqn: u32,
}

impl Keys {
    /// Bytes of this message on the wire.
    pub fn wire_len(&self) -> usize {
        if self.gid.is_some() {
            KEY_LEN_GID
        } else {
            KEY_LEN
        }
    }

    /// The message as perftest's `sprintf` writes it, with its NUL.
    pub fn to_wire(&self) -> Vec<u8> {
        let mut out = self.to_string().into_bytes();
        out.push(0);
        out
    }

    /// Reads a key message of [`KEY_LEN`] or [`KEY_LEN_GID`] bytes (which of the two is told by
    /// its length, as each side knows it from its own GID index).
    pub fn from_wire(msg: &[u8]) -> Result<Self, WireError> {
        let gid = match msg.len() {
            KEY_LEN => false,
            KEY_LEN_GID => true,
            n => return Err(WireError::NotText(n)),
        };
        let (&last, body) = msg.split_last().ok_or(WireError::NotText(0))?;
        if last != 0 || !body.iter().all(|b| b.is_ascii_graphic()) {
            return Err(WireError::NotText(msg.len()));
        }
        // All ASCII: the bytes are a str.
        let text = String::from_utf8_lossy(body);
        let fields: Vec<&str> = text.split(':').collect();
        // With a GID the message ends in `:`, which leaves an empty last field.
        let expected = if gid { 24 } else { 7 };
        if fields.len() != expected || (gid && !fields[23].is_empty()) {
            return Err(WireError::Fields {
                text: text.to_string(),
                got: fields.len(),
                expected,
            });
        }
        let srqn_at = if gid { 22 } else { 6 };
        let gid = if gid {
            let mut g = [0u8; 16];
            for (i, byte) in g.iter_mut().enumerate() {
                *byte = hex("GID byte", fields[6 + i], 2)? as u8;
            }
            Some(g)
        } else {
            None
        };
        Ok(Self {
            lid: hex("LID", fields[0], 4)? as u16,
            out_reads: hex("out_reads", fields[1], 4)? as u16,
            qpn: hex("QPN", fields[2], 6)? as u32,
            psn: hex("PSN", fields[3], 6)? as u32,
            rkey: hex("RKey", fields[4], 8)? as u32,
            vaddr: hex("VAddr", fields[5], 16)?,
            gid,
            srqn: hex("SRQN", fields[srqn_at], 8)? as u32,
        })
    }

    /// The line perftest prints for an address (`ctx_print_pingpong_data`'s fields; it prints
    /// the GID's bytes in decimal).
    pub fn describe(&self) -> String {
        let gid = self.gid.map_or("none".to_string(), |g| {
            g.iter()
                .map(|b| format!("{b:02}"))
                .collect::<Vec<_>>()
                .join(":")
        });
        format!(
            "LID {:#06x} QPN {:#08x} PSN {:#08x} RKey {:#010x} VAddr {:#018x} GID {gid}",
            self.lid, self.qpn, self.psn, self.rkey, self.vaddr
        )
    }
}

/// A field of exactly `digits` hex digits.
fn hex(field: &'static str, text: &str, digits: usize) -> Result<u64, WireError> {
    let bad = || WireError::Field {
        field,
        text: text.to_string(),
        digits,
    };
    if text.len() != digits || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad());
    }
    u64::from_str_radix(text, 16).map_err(|_| bad())
}

impl fmt::Display for Keys {
    /// `KEY_PRINT_FMT_GID` with a GID, `KEY_PRINT_FMT` without (no NUL).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
            self.lid,
            self.out_reads,
            self.qpn & 0xff_ffff,
            self.psn & 0xff_ffff,
            self.rkey,
            self.vaddr
        )?;
        match self.gid {
            Some(gid) => {
                for b in gid {
                    write!(f, "{b:02x}:")?;
                }
                write!(f, "{:08x}:", self.srqn)
            }
            None => write!(f, "{:08x}", self.srqn),
        }
    }
}

/// A bandwidth report as `xchg_bw_reports` trades it (peers of 5.33 and later): five fields of
/// eight bytes, each big-endian, each traded on its own.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct WireReport {
    /// Message size in bytes.
    pub size: u64,
    /// Iterations.
    pub iters: u64,
    /// Peak bandwidth, in the sender's unit (Gb/s with `--report_gbits`, else MiB/s).
    pub bw_peak: f64,
    /// Average bandwidth, in the same unit.
    pub bw_avg: f64,
    /// Average message rate, in millions per second.
    pub msg_rate: f64,
}

impl WireReport {
    /// The five fields in the order they are traded.
    pub fn fields(&self) -> [[u8; REPORT_FIELD_LEN]; 5] {
        [
            self.size.to_be_bytes(),
            self.iters.to_be_bytes(),
            self.bw_peak.to_bits().to_be_bytes(),
            self.bw_avg.to_bits().to_be_bytes(),
            self.msg_rate.to_bits().to_be_bytes(),
        ]
    }

    /// The report from its five fields.
    pub fn from_fields(f: &[[u8; REPORT_FIELD_LEN]; 5]) -> Self {
        let float = |b: [u8; 8]| f64::from_bits(u64::from_be_bytes(b));
        Self {
            size: u64::from_be_bytes(f[0]),
            iters: u64::from_be_bytes(f[1]),
            bw_peak: float(f[2]),
            bw_avg: float(f[3]),
            msg_rate: float(f[4]),
        }
    }
}

#[cfg(test)]
mod tests;
