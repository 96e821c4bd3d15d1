//! The endpoint line two processes trade before they connect their RC queue pairs, as
//! `ibv_rc_pingpong` does over TCP port 18515: `LID:QPN:PSN:GID` (`%04x:%06x:%06x:` and the
//! GID's 16 bytes as 32 hex digits), to which RoCE adds the port's MAC (12 hex digits), since
//! there is no subnet manager to resolve it: `LID:QPN:PSN:GID:MAC`.
//!
//! The client writes its line first and reads the server's; the server reads the client's line,
//! connects its queue pair, and only then writes its own, so that a client that has read the
//! server's line knows the server is ready to receive.

use std::fmt;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::str::FromStr;
use std::time::{Duration, Instant};

/// The TCP port `ibv_rc_pingpong` and perftest trade their endpoints on.
pub const DEFAULT_PORT: u16 = 18515;

/// Longest line accepted from a peer, in bytes (a well-formed line is 64 with its newline).
const MAX_LINE: u64 = 128;

/// How long a client keeps trying to reach a server that is not listening yet.
pub const CONNECT_PATIENCE: Duration = Duration::from_secs(10);

/// What a peer needs to connect an RC queue pair to this one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Endpoint {
    /// The port's LID (0 on RoCE, where addressing is by GID).
    pub lid: u16,
    /// The queue pair's number (24 bits).
    pub qpn: u32,
    /// The first packet sequence number it sends (24 bits).
    pub psn: u32,
    /// The port's GID (for RoCE v2 over IPv4, the IPv4-mapped IPv6 address).
    pub gid: [u8; 16],
    /// The port's MAC address.
    pub mac: [u8; 6],
}

/// Why a peer's endpoint line was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum LineError {
    /// Not five fields separated by `:`.
    #[error("endpoint line `{0}`: expected LID:QPN:PSN:GID:MAC")]
    Fields(String),
    /// A field is not hexadecimal of its width.
    #[error("endpoint line: {field} `{text}` is not {digits} hex digits")]
    Field {
        /// The field's name.
        field: &'static str,
        /// What the peer sent.
        text: String,
        /// How many hex digits the field has.
        digits: usize,
    },
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04x}:{:06x}:{:06x}:", self.lid, self.qpn, self.psn)?;
        for b in self.gid {
            write!(f, "{b:02x}")?;
        }
        f.write_str(":")?;
        for b in self.mac {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// Parses exactly `N` bytes from `2 * N` hex digits.
fn hex_bytes<const N: usize>(field: &'static str, text: &str) -> Result<[u8; N], LineError> {
    let bad = || LineError::Field {
        field,
        text: text.to_string(),
        digits: 2 * N,
    };
    if text.len() != 2 * N || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad());
    }
    let mut out = [0u8; N];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    Ok(out)
}

/// Parses a number of exactly `digits` hex digits.
fn hex_number(field: &'static str, text: &str, digits: usize) -> Result<u32, LineError> {
    if text.len() == digits && text.bytes().all(|b| b.is_ascii_hexdigit()) {
        u32::from_str_radix(text, 16).map_err(|_| LineError::Field {
            field,
            text: text.to_string(),
            digits,
        })
    } else {
        Err(LineError::Field {
            field,
            text: text.to_string(),
            digits,
        })
    }
}

impl FromStr for Endpoint {
    type Err = LineError;

    fn from_str(line: &str) -> Result<Self, LineError> {
        let fields: Vec<&str> = line.trim_end_matches(['\r', '\n']).split(':').collect();
        let [lid, qpn, psn, gid, mac] = fields.as_slice() else {
            return Err(LineError::Fields(line.trim_end().to_string()));
        };
        Ok(Self {
            lid: hex_number("LID", lid, 4)? as u16,
            qpn: hex_number("QPN", qpn, 6)?,
            psn: hex_number("PSN", psn, 6)?,
            gid: hex_bytes("GID", gid)?,
            mac: hex_bytes("MAC", mac)?,
        })
    }
}

impl Endpoint {
    /// The line as `ibv_rc_pingpong` prints it: `LID 0x…, QPN 0x…, PSN 0x…, GID …`, with the MAC.
    pub fn describe(&self) -> String {
        let gid = std::net::Ipv6Addr::from(self.gid);
        let mac = self.mac.map(|b| format!("{b:02x}")).join(":");
        format!(
            "LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {gid}, MAC {mac}",
            self.lid, self.qpn, self.psn
        )
    }
}

/// Why the endpoint exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    /// The TCP connection failed or broke.
    #[error("endpoint exchange: {0}")]
    Io(#[from] std::io::Error),
    /// The peer closed the connection before sending its line.
    #[error("endpoint exchange: the peer closed the connection without sending its endpoint")]
    Closed,
    /// The peer's line is malformed.
    #[error(transparent)]
    Line(#[from] LineError),
    /// Connecting the local queue pair to the peer failed.
    #[error("connecting the queue pair to the peer's endpoint: {0}")]
    Connect(String),
}

/// Reads one line of at most [`MAX_LINE`] bytes.
fn read_line(stream: &TcpStream) -> Result<Endpoint, ExchangeError> {
    let mut reader = BufReader::new(std::io::Read::take(stream, MAX_LINE));
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(ExchangeError::Closed);
    }
    Ok(line.parse()?)
}

/// Writes `local`'s line.
fn write_line(mut stream: &TcpStream, local: &Endpoint) -> Result<(), ExchangeError> {
    stream.write_all(format!("{local}\n").as_bytes())?;
    stream.flush()?;
    Ok(())
}

/// The server's half: accepts one client on `listener`, reads its endpoint, runs `connect` with
/// it (the queue pair goes to RTR and RTS there), then writes `local`. Returns the client's
/// endpoint and the open connection (kept until the run ends, so each side sees the other
/// leave).
pub fn serve(
    listener: &TcpListener,
    local: &Endpoint,
    connect: impl FnOnce(&Endpoint) -> Result<(), String>,
) -> Result<(Endpoint, TcpStream), ExchangeError> {
    let (stream, _) = listener.accept()?;
    let remote = read_line(&stream)?;
    connect(&remote).map_err(ExchangeError::Connect)?;
    write_line(&stream, local)?;
    Ok((remote, stream))
}

/// The client's half: connects to `server` (retrying for up to `patience` while nothing
/// listens there yet), writes `local`, reads the server's endpoint. The server's queue pair is
/// ready to receive once its line has arrived.
pub fn dial(
    server: impl ToSocketAddrs + Copy,
    local: &Endpoint,
    patience: Duration,
) -> Result<(Endpoint, TcpStream), ExchangeError> {
    let deadline = Instant::now() + patience;
    let stream = loop {
        match TcpStream::connect(server) {
            Ok(s) => break s,
            Err(e)
                if e.kind() == std::io::ErrorKind::ConnectionRefused
                    && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(e.into()),
        }
    };
    write_line(&stream, local)?;
    let remote = read_line(&stream)?;
    Ok((remote, stream))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Endpoint {
        Endpoint {
            lid: 0,
            qpn: 0x00_0123,
            psn: 0xab_cdef,
            gid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1],
            mac: [0x02, 0, 0, 0, 0, 0x01],
        }
    }

    #[test]
    fn the_line_is_rc_pingpongs_with_the_mac_added() {
        let line = sample().to_string();
        assert_eq!(
            line,
            "0000:000123:abcdef:00000000000000000000ffff0a000001:020000000001"
        );
        assert_eq!(line.parse::<Endpoint>(), Ok(sample()));
        assert_eq!(format!("{line}\n").parse::<Endpoint>(), Ok(sample()));
    }

    #[test]
    fn describe_prints_the_gid_as_an_address() {
        assert_eq!(
            sample().describe(),
            "LID 0x0000, QPN 0x000123, PSN 0xabcdef, GID ::ffff:10.0.0.1, MAC 02:00:00:00:00:01"
        );
    }

    #[test]
    fn malformed_lines_name_the_field() {
        let good = sample().to_string();
        assert!(matches!(
            "0000:000123:abcdef:00".parse::<Endpoint>(),
            Err(LineError::Fields(_))
        ));
        let cases = [
            (good.replacen("000123", "00123", 1), "QPN"),
            (good.replacen("abcdef", "abcdeg", 1), "PSN"),
            (good.replacen("0000:", "00000:", 1), "LID"),
            (good.replace(":020000000001", ":0200000000"), "MAC"),
            (good.replace("0a000001", "0a00001"), "GID"),
            (good.replace("0a000001", "0a00000+"), "GID"),
        ];
        for (line, field) in cases {
            match line.parse::<Endpoint>() {
                Err(LineError::Field { field: f, .. }) => assert_eq!(f, field, "{line}"),
                other => panic!("{line}: {other:?}"),
            }
        }
    }

    #[test]
    fn two_sides_trade_their_endpoints_over_loopback_tcp() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server_end = Endpoint {
            qpn: 0x42,
            psn: 0x10,
            ..sample()
        };
        let client_end = sample();
        let server = std::thread::spawn(move || {
            let mut seen = None;
            let (remote, _stream) = serve(&listener, &server_end, |remote| {
                seen = Some(*remote);
                Ok(())
            })
            .unwrap();
            assert_eq!(seen, Some(remote));
            remote
        });
        let (remote, _stream) = dial(addr, &client_end, CONNECT_PATIENCE).unwrap();
        assert_eq!(remote, server_end);
        assert_eq!(server.join().unwrap(), client_end);
    }

    #[test]
    fn a_failed_connect_is_reported_and_the_server_sends_nothing() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            serve(&listener, &sample(), |_| Err("no such QPN".into())).map(|_| ())
        });
        let outcome = dial(addr, &sample(), CONNECT_PATIENCE);
        assert!(matches!(outcome, Err(ExchangeError::Closed)), "{outcome:?}");
        let refused = server.join().unwrap().unwrap_err();
        assert!(refused.to_string().contains("no such QPN"), "{refused}");
    }

    #[test]
    fn a_garbage_line_from_the_peer_is_an_error() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let peer = std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(&[b'x'; 4096]).unwrap();
        });
        let outcome = serve(&listener, &sample(), |_| Ok(()));
        assert!(
            matches!(outcome, Err(ExchangeError::Line(_))),
            "{outcome:?}"
        );
        peer.join().unwrap();
    }
}
