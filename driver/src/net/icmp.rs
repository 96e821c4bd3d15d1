//! IPv4 headers and ICMP echo (RFC 791, RFC 792): parse (never panicking, checksums verified,
//! typed errors) and build, on byte slices.

use super::arp::{EthernetHeader, MacAddr, ETHERTYPE_IPV4, ETH_HEADER_LEN};
use super::checksum::{checksum, Checksum};
use super::error::FrameError;
use std::net::Ipv4Addr;

/// IP protocol number of ICMP.
pub const IPPROTO_ICMP: u8 = 1;
/// Bytes of an IPv4 header without options.
pub const IPV4_HEADER_LEN: usize = 20;
/// Bytes of an ICMP echo header (type, code, checksum, identifier, sequence).
pub const ICMP_ECHO_HEADER_LEN: usize = 8;
/// ICMP type of an echo reply.
pub const ICMP_ECHO_REPLY: u8 = 0;
/// ICMP type of an echo request.
pub const ICMP_ECHO_REQUEST: u8 = 8;
/// The TTL replies leave with (Linux's default `ip_default_ttl`).
pub const DEFAULT_TTL: u8 = 64;

/// An IPv4 header whose lengths and checksum verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Header {
    /// Header length in bytes (20 to 60; more than 20 means options).
    pub header_len: usize,
    /// Total length of the packet in bytes (header and payload), at most the bytes given.
    pub total_len: u16,
    /// Identification.
    pub ident: u16,
    /// The flags and fragment offset word.
    pub flags_fragment: u16,
    /// Time to live.
    pub ttl: u8,
    /// Protocol of the payload.
    pub protocol: u8,
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
}

impl Ipv4Header {
    /// Reads the header at the start of `ip` (the bytes after the Ethernet header, padding
    /// included): version 4, a header length of 5 to 15 words within `ip`, a total length
    /// from the header's to `ip.len()`, and a header checksum that verifies.
    pub fn parse(ip: &[u8]) -> Result<Self, FrameError> {
        Self::parse_prefix(ip, ip.len())
    }

    /// As [`Ipv4Header::parse`], from `prefix`: the first bytes (the header at least) of an
    /// IP packet of `packet_len` bytes whose rest was not read.
    pub fn parse_prefix(prefix: &[u8], packet_len: usize) -> Result<Self, FrameError> {
        let ip = prefix;
        let h = ip.get(..IPV4_HEADER_LEN).ok_or(FrameError::TooShort {
            need: IPV4_HEADER_LEN,
            got: ip.len(),
        })?;
        let version = h[0] >> 4;
        if version != 4 {
            return Err(FrameError::NotIpv4(version));
        }
        let ihl = h[0] & 0xf;
        let header_len = usize::from(ihl) * 4;
        if ihl < 5 {
            return Err(FrameError::BadHeaderLength(ihl));
        }
        let header = ip.get(..header_len).ok_or(FrameError::TooShort {
            need: header_len,
            got: ip.len(),
        })?;
        let total_len = u16::from_be_bytes([h[2], h[3]]);
        if usize::from(total_len) < header_len || usize::from(total_len) > packet_len {
            return Err(FrameError::BadTotalLength {
                total: total_len,
                header: header_len,
                frame: packet_len,
            });
        }
        let mut sum = Checksum::new();
        sum.add(header);
        if !sum.verifies() {
            return Err(FrameError::HeaderChecksum);
        }
        Ok(Self {
            header_len,
            total_len,
            ident: u16::from_be_bytes([h[4], h[5]]),
            flags_fragment: u16::from_be_bytes([h[6], h[7]]),
            ttl: h[8],
            protocol: h[9],
            src: Ipv4Addr::new(h[12], h[13], h[14], h[15]),
            dst: Ipv4Addr::new(h[16], h[17], h[18], h[19]),
        })
    }

    /// True when the packet is a fragment (more fragments follow, or its offset is not 0).
    pub fn is_fragment(&self) -> bool {
        self.flags_fragment & 0x3fff != 0
    }

    /// Writes a 20-byte header (no options, don't-fragment clear) with its checksum into
    /// the first 20 bytes of `out`.
    pub fn write(&self, out: &mut [u8]) -> Result<(), FrameError> {
        let got = out.len();
        let h = out.get_mut(..IPV4_HEADER_LEN).ok_or(FrameError::TooShort {
            need: IPV4_HEADER_LEN,
            got,
        })?;
        h[0] = 0x45;
        h[1] = 0;
        h[2..4].copy_from_slice(&self.total_len.to_be_bytes());
        h[4..6].copy_from_slice(&self.ident.to_be_bytes());
        h[6..8].copy_from_slice(&self.flags_fragment.to_be_bytes());
        h[8] = self.ttl;
        h[9] = self.protocol;
        h[10..12].fill(0);
        h[12..16].copy_from_slice(&self.src.octets());
        h[16..20].copy_from_slice(&self.dst.octets());
        let c = checksum(h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        Ok(())
    }
}

/// The header of an ICMP echo request or reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcmpEcho {
    /// [`ICMP_ECHO_REQUEST`] or [`ICMP_ECHO_REPLY`] (any other type parses too, for counting).
    pub icmp_type: u8,
    /// Code (0 for echo).
    pub code: u8,
    /// The checksum field as carried.
    pub checksum: u16,
    /// Identifier.
    pub ident: u16,
    /// Sequence number.
    pub seq: u16,
}

impl IcmpEcho {
    /// Reads the first 8 bytes of an ICMP message without verifying its checksum (for a
    /// message whose bytes are summed elsewhere, piece by piece).
    pub fn parse_header(icmp: &[u8]) -> Result<Self, FrameError> {
        let h = icmp
            .get(..ICMP_ECHO_HEADER_LEN)
            .ok_or(FrameError::TooShort {
                need: ICMP_ECHO_HEADER_LEN,
                got: icmp.len(),
            })?;
        let be16 = |at: usize| u16::from_be_bytes([h[at], h[at + 1]]);
        Ok(Self {
            icmp_type: h[0],
            code: h[1],
            checksum: be16(2),
            ident: be16(4),
            seq: be16(6),
        })
    }

    /// Reads a whole ICMP message (`icmp`: exactly the IP payload), verifying its checksum.
    pub fn parse(icmp: &[u8]) -> Result<Self, FrameError> {
        let header = Self::parse_header(icmp)?;
        let mut sum = Checksum::new();
        sum.add(icmp);
        if !sum.verifies() {
            return Err(FrameError::IcmpChecksum);
        }
        Ok(header)
    }
}

/// The addresses and identity of an ICMP echo frame [`write_echo_frame`] builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EchoFrame {
    /// Destination MAC.
    pub dst_mac: MacAddr,
    /// Source MAC.
    pub src_mac: MacAddr,
    /// Source IP.
    pub src_ip: Ipv4Addr,
    /// Destination IP.
    pub dst_ip: Ipv4Addr,
    /// [`ICMP_ECHO_REQUEST`] or [`ICMP_ECHO_REPLY`].
    pub icmp_type: u8,
    /// Identifier.
    pub ident: u16,
    /// Sequence number.
    pub seq: u16,
}

/// Writes an Ethernet/IPv4/ICMP echo frame carrying `payload` into `out`, both checksums
/// computed; returns its length (42 + payload bytes).
pub fn write_echo_frame(
    echo: &EchoFrame,
    payload: &[u8],
    out: &mut [u8],
) -> Result<usize, FrameError> {
    let icmp_len = ICMP_ECHO_HEADER_LEN + payload.len();
    let ip_len = IPV4_HEADER_LEN + icmp_len;
    let total = ETH_HEADER_LEN + ip_len;
    let total_len = u16::try_from(ip_len).map_err(|_| FrameError::BadTotalLength {
        total: u16::MAX,
        header: IPV4_HEADER_LEN,
        frame: ip_len,
    })?;
    if out.len() < total {
        return Err(FrameError::TooShort {
            need: total,
            got: out.len(),
        });
    }
    EthernetHeader {
        dst: echo.dst_mac,
        src: echo.src_mac,
        ethertype: ETHERTYPE_IPV4,
    }
    .write(out)?;
    Ipv4Header {
        header_len: IPV4_HEADER_LEN,
        total_len,
        ident: echo.seq,
        flags_fragment: 0,
        ttl: DEFAULT_TTL,
        protocol: IPPROTO_ICMP,
        src: echo.src_ip,
        dst: echo.dst_ip,
    }
    .write(&mut out[ETH_HEADER_LEN..])?;
    let icmp = &mut out[ETH_HEADER_LEN + IPV4_HEADER_LEN..total];
    icmp[0] = echo.icmp_type;
    icmp[1] = 0;
    icmp[2..4].fill(0);
    icmp[4..6].copy_from_slice(&echo.ident.to_be_bytes());
    icmp[6..8].copy_from_slice(&echo.seq.to_be_bytes());
    icmp[8..].copy_from_slice(payload);
    let c = checksum(icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame() -> Vec<u8> {
        let mut out = vec![0u8; 128];
        let n = write_echo_frame(
            &EchoFrame {
                dst_mac: [2, 0, 0, 0, 0, 3],
                src_mac: [2, 0, 0, 0, 0, 1],
                src_ip: Ipv4Addr::new(192, 168, 77, 1),
                dst_ip: Ipv4Addr::new(192, 168, 77, 3),
                icmp_type: ICMP_ECHO_REQUEST,
                ident: 0x1234,
                seq: 7,
            },
            b"hello, echo!",
            &mut out,
        )
        .unwrap();
        out.truncate(n);
        out
    }

    #[test]
    fn a_built_echo_parses_back_with_both_checksums_verified() {
        let f = frame();
        let ip = Ipv4Header::parse(&f[14..]).unwrap();
        assert_eq!(ip.protocol, IPPROTO_ICMP);
        assert_eq!(usize::from(ip.total_len), f.len() - 14);
        assert!(!ip.is_fragment());
        let e = IcmpEcho::parse(&f[34..]).unwrap();
        assert_eq!(
            (e.icmp_type, e.ident, e.seq),
            (ICMP_ECHO_REQUEST, 0x1234, 7)
        );
    }

    #[test]
    fn each_bad_field_is_its_typed_error() {
        let f = frame();
        let with = |at: usize, v: u8| {
            let mut g = f.clone();
            g[at] = v;
            g
        };
        assert_eq!(
            Ipv4Header::parse(&with(14, 0x65)[14..]),
            Err(FrameError::NotIpv4(6))
        );
        assert_eq!(
            Ipv4Header::parse(&with(14, 0x44)[14..]),
            Err(FrameError::BadHeaderLength(4))
        );
        assert!(matches!(
            Ipv4Header::parse(&with(14, 0x4f)[14..]),
            Err(FrameError::TooShort { .. } | FrameError::BadTotalLength { .. })
        ));
        assert!(matches!(
            Ipv4Header::parse(&with(16, 0x7f)[14..]),
            Err(FrameError::BadTotalLength { .. })
        ));
        assert_eq!(
            Ipv4Header::parse(&with(22, 3)[14..]),
            Err(FrameError::HeaderChecksum)
        );
        assert_eq!(
            IcmpEcho::parse(&with(45, b'X')[34..]),
            Err(FrameError::IcmpChecksum)
        );
    }

    #[test]
    fn parsing_any_bytes_never_panics() {
        crate::net::random_inputs(0x1234_5678, 100, |bytes| {
            let _ = Ipv4Header::parse(bytes);
            let _ = IcmpEcho::parse(bytes);
        });
    }
}
