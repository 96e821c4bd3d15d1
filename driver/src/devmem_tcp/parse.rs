//! A split frame's headers to a [`Segment`]: the header buffer holds the frame's first `n`
//! bytes (the split point), the dmabuf payload buffer the rest. The true header length `h`
//! comes from the IP header and the TCP data offset; when `h < n` the first `n - h` payload
//! bytes are linear (host memory), when `h > n` the last `h - n` option bytes are in dmabuf
//! memory and stay unread (`docs/devmem-tcp.md` §3). No byte of the dmabuf part is read.

use super::segment::{DmabufPart, Payload, SackBlock, Segment, TcpFlags, TcpOptions};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use thiserror::Error;

/// Why a split frame's headers were not taken (the caller drops the frame, gives its buffer
/// back to the queue, and counts the reason).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum ParseError {
    /// The header buffer ends before the Ethernet/IP headers do.
    #[error("header buffer of {got} bytes ends inside the headers")]
    TooShort {
        /// Bytes in the header buffer.
        got: usize,
    },
    /// Not TCP over IPv4 or IPv6 (or IPv6 with extension headers).
    #[error("not TCP over IPv4/IPv6")]
    NotTcp,
    /// An IPv4 fragment.
    #[error("IPv4 fragment")]
    Fragment,
    /// The IP header or the TCP header's fixed 20 bytes lie past the split point: the headers
    /// cannot be read without reading dmabuf memory.
    #[error("headers need {need} bytes in host memory; the split put {have} there")]
    HeadersPastSplit {
        /// Bytes the IP and fixed TCP header need.
        need: usize,
        /// Bytes in the header buffer.
        have: usize,
    },
    /// A header length field out of range (IHL < 5, data offset < 5, TCP header longer than
    /// the IP payload).
    #[error("header length field out of range")]
    BadLength,
    /// The IP length names more bytes than the frame has.
    #[error("IP length names {need} frame bytes, the frame has {have}")]
    Truncated {
        /// Frame bytes the IP length needs.
        need: u64,
        /// Frame bytes received.
        have: u64,
    },
}

/// Where the split fell for one segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitFit {
    /// Headers exactly fill the header buffer (or the frame ended inside it with no payload).
    Exact,
    /// This many payload bytes landed in host memory.
    Linear(u32),
    /// This many option bytes landed in dmabuf memory (unread).
    OptionsInDmabuf(u32),
}

/// A parsed split frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SplitSegment {
    /// The segment for [`super::TcpReceiver::on_segment`].
    pub segment: Segment,
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Ethernet + IP + TCP header bytes (`h`).
    pub headers_len: usize,
    /// How the split met the headers.
    pub fit: SplitFit,
}

/// The dmabuf part of a split frame: payload buffer `buffer`, whose first frame byte is at
/// dmabuf offset `offset`, with `len` frame bytes (a split queue's [`crate::PayloadToken`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameTail {
    /// The split queue's buffer number.
    pub buffer: u32,
    /// Dmabuf offset of the frame's first byte past the header buffer.
    pub offset: u64,
    /// Frame bytes in the buffer.
    pub len: u32,
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// Parses a split frame: `header` is the header buffer's bytes (the frame's first bytes),
/// `tail` the rest in dmabuf memory (`None` when the frame ended in the header buffer),
/// `checksum_ok` the CQE's verdict on the L3 and L4 checksums.
///
/// # Errors
///
/// [`ParseError`]: the frame is not a TCP segment whose IP and fixed TCP headers are in host
/// memory, or its lengths do not add up.
pub fn parse_split(
    header: &[u8],
    tail: Option<FrameTail>,
    checksum_ok: bool,
) -> Result<SplitSegment, ParseError> {
    let n = header.len();
    let short = ParseError::TooShort { got: n };
    let past = |need: usize| ParseError::HeadersPastSplit { need, have: n };
    let mut at = 12;
    let mut ethertype = be16(header, at).ok_or(short)?;
    for _ in 0..2 {
        if ethertype == 0x8100 || ethertype == 0x88a8 {
            at += 4;
            ethertype = be16(header, at).ok_or(short)?;
        }
    }
    let l3 = at + 2;
    let (src, dst, l4, ip_end) = match ethertype {
        0x0800 => {
            let ihl = usize::from(header.get(l3).ok_or(short)? & 0x0f) * 4;
            if header.get(l3).ok_or(short)? >> 4 != 4 {
                return Err(ParseError::NotTcp);
            }
            if ihl < 20 {
                return Err(ParseError::BadLength);
            }
            if l3 + ihl > n {
                return Err(past(l3 + ihl));
            }
            if header[l3 + 9] != 6 {
                return Err(ParseError::NotTcp);
            }
            let frag = be16(header, l3 + 6).ok_or(short)?;
            if frag & 0x3fff != 0 {
                return Err(ParseError::Fragment);
            }
            let total = usize::from(be16(header, l3 + 2).ok_or(short)?);
            if total < ihl {
                return Err(ParseError::BadLength);
            }
            let ip = |o: usize| {
                IpAddr::V4(Ipv4Addr::new(
                    header[o],
                    header[o + 1],
                    header[o + 2],
                    header[o + 3],
                ))
            };
            (ip(l3 + 12), ip(l3 + 16), l3 + ihl, l3 + total)
        }
        0x86dd => {
            if l3 + 40 > n {
                return Err(past(l3 + 40));
            }
            if header[l3] >> 4 != 6 || header[l3 + 6] != 6 {
                return Err(ParseError::NotTcp);
            }
            let payload = usize::from(be16(header, l3 + 4).ok_or(short)?);
            let ip = |o: usize| {
                let b: [u8; 16] = header[o..o + 16].try_into().unwrap_or([0; 16]);
                IpAddr::V6(Ipv6Addr::from(b))
            };
            (ip(l3 + 8), ip(l3 + 24), l3 + 40, l3 + 40 + payload)
        }
        _ => return Err(ParseError::NotTcp),
    };
    if l4 + 20 > n {
        return Err(past(l4 + 20));
    }
    let doff = usize::from(header[l4 + 12] >> 4) * 4;
    if doff < 20 || l4 + doff > ip_end {
        return Err(ParseError::BadLength);
    }
    let h = l4 + doff;
    let have = n as u64 + tail.map_or(0, |t| u64::from(t.len));
    if ip_end as u64 > have {
        return Err(ParseError::Truncated {
            need: ip_end as u64,
            have,
        });
    }
    let options = parse_options(&header[l4 + 20..h.min(n)], h > n);
    // The payload is frame bytes h..ip_end (Ethernet padding past ip_end is ignored).
    let linear = ip_end.min(n).saturating_sub(h) as u32;
    let dmabuf = tail.map(|t| {
        let from = h.max(n);
        let len = ip_end.saturating_sub(from) as u32;
        DmabufPart {
            buffer: t.buffer,
            offset: t.offset + (from - n) as u64,
            len,
        }
    });
    let fit = if h > n {
        SplitFit::OptionsInDmabuf((h - n) as u32)
    } else if linear > 0 {
        SplitFit::Linear(linear)
    } else {
        SplitFit::Exact
    };
    let segment = Segment {
        seq: be32(header, l4 + 4).ok_or(short)?,
        ack: be32(header, l4 + 8).ok_or(short)?,
        flags: TcpFlags(header[l4 + 13] & 0x1f),
        window: be16(header, l4 + 14).ok_or(short)?,
        options,
        payload: Payload { linear, dmabuf },
        checksum_ok,
    };
    Ok(SplitSegment {
        segment,
        src,
        dst,
        src_port: be16(header, l4).ok_or(short)?,
        dst_port: be16(header, l4 + 2).ok_or(short)?,
        headers_len: h,
        fit,
    })
}

/// Reads the options in `bytes` (those in host memory); stops at End, at an option that runs
/// past `bytes` or has a bad length, as Linux's `tcp_parse_options` does.
fn parse_options(bytes: &[u8], truncated: bool) -> TcpOptions {
    let mut o = TcpOptions {
        truncated,
        ..TcpOptions::default()
    };
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            0 => break,
            1 => {
                i += 1;
                continue;
            }
            kind => {
                let Some(&len) = bytes.get(i + 1) else {
                    o.truncated |= truncated;
                    break;
                };
                let len = usize::from(len);
                if len < 2 || i + len > bytes.len() {
                    break;
                }
                let body = &bytes[i + 2..i + len];
                match (kind, len) {
                    (2, 4) => o.mss = be16(body, 0),
                    (3, 3) => o.window_scale = Some(body[0].min(14)),
                    (4, 2) => o.sack_permitted = true,
                    (8, 10) => o.timestamp = be32(body, 0).zip(be32(body, 4)),
                    (5, _) if len >= 10 && (len - 2) % 8 == 0 => {
                        for b in body.chunks_exact(8) {
                            if let (Some(left), Some(right)) = (be32(b, 0), be32(b, 4)) {
                                o.sack.push(SackBlock { left, right });
                            }
                        }
                    }
                    _ => {}
                }
                i += len;
            }
        }
    }
    o
}
