//! What the NIC model needs to know about an Ethernet frame: where its headers are, what they say,
//! whether its checksums are right, and how to fill in checksums and VLAN tags on transmit.
//!
//! Frames come from the wire or from a guest's send queue, so every byte is hostile: [`parse`]
//! never fails and never panics, it just stops at the first header it does not recognise or that
//! does not fit, and everything after that point reads as absent. Nothing here allocates; the
//! parse result is a small `Copy` value of offsets and a few copied fields.
//!
//! Recognised: Ethernet II, an optional 802.1ad service tag (TPID 0x88a8) followed by an optional
//! 802.1Q tag (TPID 0x8100), IPv4 with options, IPv6 without extension headers, TCP and UDP.
//! Multi-byte header fields are big-endian on the wire; the values stored in [`Parsed`] are host
//! integers.

use cxdirect_hw::cqe::{l3_hdr_type, l4_hdr_type};
use thiserror::Error;

/// Bytes in an untagged Ethernet II header (two MAC addresses and the ethertype).
pub const ETH_HEADER_LEN: usize = 14;
/// Bytes one VLAN tag (TPID and TCI) adds to the Ethernet header.
pub const VLAN_TAG_LEN: usize = 4;
/// Ethertype of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// Ethertype of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
/// Tag protocol identifier of an 802.1Q (customer) VLAN tag.
pub const TPID_8021Q: u16 = 0x8100;
/// Tag protocol identifier of an 802.1ad (service, "QinQ" outer) VLAN tag.
pub const TPID_8021AD: u16 = 0x88a8;
/// IP protocol number (IPv4 `protocol`, IPv6 `next header`) of TCP.
pub const IPPROTO_TCP: u8 = 6;
/// IP protocol number of UDP.
pub const IPPROTO_UDP: u8 = 17;
/// IPv6 `next header` value of the fragment extension header.
pub const IPPROTO_IPV6_FRAGMENT: u8 = 44;
/// Bytes in an IPv4 header without options (IHL 5).
pub const IPV4_MIN_HEADER_LEN: usize = 20;
/// Bytes in the fixed IPv6 header.
pub const IPV6_HEADER_LEN: usize = 40;
/// Bytes in a TCP header without options (data offset 5).
pub const TCP_MIN_HEADER_LEN: usize = 20;
/// Bytes in a UDP header.
pub const UDP_HEADER_LEN: usize = 8;

/// TCP flag bit (in [`Parsed::tcp_flags`]): FIN.
pub const TCP_FIN: u8 = 0x01;
/// TCP flag bit: SYN.
pub const TCP_SYN: u8 = 0x02;
/// TCP flag bit: RST.
pub const TCP_RST: u8 = 0x04;
/// TCP flag bit: PSH.
pub const TCP_PSH: u8 = 0x08;
/// TCP flag bit: ACK.
pub const TCP_ACK: u8 = 0x10;
/// TCP flag bit: URG.
pub const TCP_URG: u8 = 0x20;

/// Why a frame cannot be checksummed or tagged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum PacketError {
    /// The frame (or the IP packet inside it) ends before a header it needs is complete.
    #[error("packet ends inside its {header} ({len} bytes available); the frame is truncated")]
    Truncated {
        /// The header that does not fit, e.g. "IPv4 header", "TCP header", "IP packet".
        header: &'static str,
        /// Bytes that were available (the frame length, or the IP packet length where the IP
        /// length field is what cut the header short).
        len: usize,
    },
    /// A header field holds a value that makes the packet malformed.
    #[error("malformed packet: {field} is {value}")]
    BadField {
        /// The field, e.g. "IPv4 total length", "UDP length", "TCP data offset".
        field: &'static str,
        /// The value found in it (raw units of that field).
        value: usize,
    },
    /// Checksum offload was asked for a frame that carries neither IPv4 nor IPv6.
    #[error("frame is not IPv4 or IPv6 (ethertype {ethertype:#06x}); only IP packets can be checksummed")]
    NotIp {
        /// The frame's ethertype after any VLAN tags.
        ethertype: u16,
    },
    /// L4 checksum offload was asked for a packet that is not TCP or UDP.
    #[error(
        "IP protocol {protocol} is not TCP or UDP; only TCP and UDP checksums can be offloaded"
    )]
    NotTcpOrUdp {
        /// The IPv4 protocol or IPv6 next-header number.
        protocol: u8,
    },
    /// L4 checksum offload was asked for an IP fragment, whose checksum covers bytes that are in
    /// other fragments; send the datagram unfragmented or checksum it in software.
    #[error("packet is an IP fragment (offset {offset} x 8 bytes, more fragments: {more}); its L4 checksum cannot be computed from one fragment")]
    Fragment {
        /// Fragment offset in 8-byte units.
        offset: u16,
        /// The more-fragments flag.
        more: bool,
    },
    /// The buffer given for the VLAN-tagged frame is too small.
    #[error("output buffer holds {len} bytes but the tagged frame needs {needed}")]
    OutputTooSmall {
        /// Bytes in the output buffer.
        len: usize,
        /// Bytes the tagged frame needs (input length + 4).
        needed: usize,
    },
}

/// One VLAN tag as it appears on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct VlanTag {
    /// Tag protocol identifier: [`TPID_8021Q`] or [`TPID_8021AD`].
    pub tpid: u16,
    /// Tag control information: priority (bits 15:13), drop eligible (bit 12), VLAN id (11:0).
    pub tci: u16,
}

impl VlanTag {
    /// VLAN identifier, 0..=4095.
    pub fn vid(&self) -> u16 {
        self.tci & 0x0fff
    }

    /// Priority code point, 0..=7.
    pub fn pcp(&self) -> u8 {
        // The shift leaves three bits, which always fit in a u8.
        (self.tci >> 13) as u8
    }

    /// Drop eligible indicator.
    pub fn dei(&self) -> bool {
        self.tci & 0x1000 != 0
    }
}

/// The network-layer header the frame carries, as far as the parse recognised it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum L3Kind {
    /// No recognised L3 header (not IP, or a truncated or malformed IP header).
    #[default]
    None,
    /// IPv4 (version 4, IHL >= 5, whole header present).
    Ipv4,
    /// IPv6 (version 6, fixed header present).
    Ipv6,
}

/// The transport-layer header the packet carries, as far as the parse recognised it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum L4Kind {
    /// No L4 header: no IP header, an IPv4 fragment with a non-zero offset, a malformed IP length,
    /// or a TCP/UDP header that is truncated or malformed.
    #[default]
    None,
    /// TCP with its whole header (options included) present.
    Tcp,
    /// UDP with its whole 8-byte header present.
    Udp,
    /// Any other protocol, including IPv6 extension headers (which are not walked).
    Other,
}

/// Source and destination addresses of an IP header, in wire byte order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpAddrs {
    /// IPv4 addresses.
    V4 {
        /// Source address.
        src: [u8; 4],
        /// Destination address.
        dst: [u8; 4],
    },
    /// IPv6 addresses.
    V6 {
        /// Source address.
        src: [u8; 16],
        /// Destination address.
        dst: [u8; 16],
    },
}

/// What [`parse`] learned about a frame. Offsets are byte offsets from the start of the frame.
///
/// Fields past the point where the parse stopped keep their default (zero, `None`,
/// [`L3Kind::None`], [`L4Kind::None`]); check [`Parsed::l3`] and [`Parsed::l4`] before reading the
/// fields that belong to them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Parsed {
    /// Length of the parsed frame in bytes.
    pub frame_len: usize,
    /// Destination MAC address (zero when the frame is shorter than [`ETH_HEADER_LEN`]).
    pub dst_mac: [u8; 6],
    /// Source MAC address (zero when the frame is shorter than [`ETH_HEADER_LEN`]).
    pub src_mac: [u8; 6],
    /// The 802.1ad service tag, when the frame has one right after the MAC addresses.
    pub outer_vlan: Option<VlanTag>,
    /// The 802.1Q tag, directly after the MAC addresses or after the service tag.
    pub vlan: Option<VlanTag>,
    /// The ethertype after the VLAN tags; `None` when the frame ends before it.
    pub ethertype: Option<u16>,
    /// The L3 header kind.
    pub l3: L3Kind,
    /// Offset of the L3 header: the Ethernet header length with its tags (14, 18 or 22). Set
    /// whenever [`Parsed::ethertype`] is.
    pub l3_offset: usize,
    /// L3 header length in bytes: IHL x 4 for IPv4 (20..=60), 40 for IPv6; 0 without L3.
    pub l3_len: usize,
    /// Offset one past the IP packet's last byte as its length field claims (IPv4 total length,
    /// IPv6 40 + payload length). May exceed [`Parsed::frame_len`] (truncated frame) or fall
    /// short of it (Ethernet padding); for IPv4 it may even fall inside the header (malformed).
    pub ip_end: usize,
    /// IPv4 protocol or IPv6 next-header number; `None` without L3.
    pub ip_proto: Option<u8>,
    /// Source and destination addresses; `None` without L3.
    pub addrs: Option<IpAddrs>,
    /// Fragment offset in 8-byte units (IPv4 header, or an IPv6 fragment header directly after
    /// the fixed header); 0 for unfragmented packets and first fragments.
    pub frag_offset: u16,
    /// The more-fragments flag.
    pub more_fragments: bool,
    /// The L4 header kind.
    pub l4: L4Kind,
    /// Offset of the L4 header (end of the IP header); 0 without L4.
    pub l4_offset: usize,
    /// L4 header length: TCP data offset x 4 (20..=60), 8 for UDP, 0 otherwise.
    pub l4_len: usize,
    /// TCP/UDP source port; 0 for other protocols.
    pub src_port: u16,
    /// TCP/UDP destination port; 0 for other protocols.
    pub dst_port: u16,
    /// TCP flags byte (`TCP_*` bits; CWR and ECE in bits 7:6); 0 unless TCP.
    pub tcp_flags: u8,
    /// Bytes after the L4 header up to [`Parsed::ip_end`] (so Ethernet padding is not counted);
    /// for [`L4Kind::Other`] the bytes after the IP header.
    pub l4_payload_len: usize,
}

impl Parsed {
    /// The CQE `l3_hdr_type` code: 0 none, 1 IPv6, 2 IPv4.
    pub fn l3_hdr_type(&self) -> u8 {
        match self.l3 {
            L3Kind::None => l3_hdr_type::NONE,
            L3Kind::Ipv6 => l3_hdr_type::IPV6,
            L3Kind::Ipv4 => l3_hdr_type::IPV4,
        }
    }

    /// The CQE `l4_hdr_type` code: 0 none (or a protocol other than TCP/UDP), 1 TCP without ACK,
    /// 2 UDP, 3 TCP ACK without data, 4 TCP ACK with data.
    pub fn l4_hdr_type(&self) -> u8 {
        match self.l4 {
            L4Kind::None | L4Kind::Other => l4_hdr_type::NONE,
            L4Kind::Udp => l4_hdr_type::UDP,
            L4Kind::Tcp if !self.tcp_ack() => l4_hdr_type::TCP_NO_ACK,
            L4Kind::Tcp if self.tcp_has_payload() => l4_hdr_type::TCP_ACK_AND_DATA,
            L4Kind::Tcp => l4_hdr_type::TCP_ACK_NO_DATA,
        }
    }

    /// A TCP segment with the ACK flag set.
    pub fn tcp_ack(&self) -> bool {
        self.l4 == L4Kind::Tcp && self.tcp_flags & TCP_ACK != 0
    }

    /// A TCP segment that carries data after its header (padding after the IP packet does not
    /// count).
    pub fn tcp_has_payload(&self) -> bool {
        self.l4 == L4Kind::Tcp && self.l4_payload_len > 0
    }

    /// The packet is an IP fragment (first, middle or last).
    pub fn is_fragment(&self) -> bool {
        self.frag_offset != 0 || self.more_fragments
    }

    /// The IP length field claims more bytes than the frame holds.
    pub fn ip_truncated(&self) -> bool {
        self.l3 != L3Kind::None && self.ip_end > self.frame_len
    }

    /// An IPv4 header with options (IHL > 5).
    pub fn ipv4_has_options(&self) -> bool {
        self.l3 == L3Kind::Ipv4 && self.l3_len > IPV4_MIN_HEADER_LEN
    }
}

/// Reads a big-endian u16 at `off`, or `None` past the end of `buf`.
fn be16(buf: &[u8], off: usize) -> Option<u16> {
    let bytes = buf.get(off..off.checked_add(2)?)?;
    Some(u16::from_be_bytes(bytes.try_into().ok()?))
}

/// Copies `N` bytes at `off`, or `None` past the end of `buf`.
fn bytes<const N: usize>(buf: &[u8], off: usize) -> Option<[u8; N]> {
    buf.get(off..off.checked_add(N)?)?.try_into().ok()
}

/// Parses what the NIC needs from `frame`. Never fails: an unknown or short part stops the parse
/// and leaves the later fields at their defaults (see [`Parsed`]).
#[inline]
pub fn parse(frame: &[u8]) -> Parsed {
    let mut parsed = Parsed {
        frame_len: frame.len(),
        ..Parsed::default()
    };
    // `None` only means the parse stopped early; what was learned up to then is in `parsed`.
    let _ = parse_ethernet(frame, &mut parsed);
    parsed
}

/// Parses an IP packet without an Ethernet header (a tunnel's inner packet): the MACs stay
/// zero and the ethertype is the one the IP version implies; offsets are from `packet`'s
/// start.
pub fn parse_ip(packet: &[u8]) -> Parsed {
    let mut parsed = Parsed {
        frame_len: packet.len(),
        ..Parsed::default()
    };
    let _ = match packet.first().map(|b| b >> 4) {
        Some(4) => {
            parsed.ethertype = Some(ETHERTYPE_IPV4);
            parse_ipv4(packet, 0, &mut parsed)
        }
        Some(6) => {
            parsed.ethertype = Some(ETHERTYPE_IPV6);
            parse_ipv6(packet, 0, &mut parsed)
        }
        _ => None,
    };
    parsed
}

fn parse_ethernet(frame: &[u8], p: &mut Parsed) -> Option<()> {
    if frame.len() < ETH_HEADER_LEN {
        return None;
    }
    p.dst_mac = bytes(frame, 0)?;
    p.src_mac = bytes(frame, 6)?;
    let mut off = 12;
    let mut ty = be16(frame, off)?;
    if ty == TPID_8021AD {
        p.outer_vlan = Some(VlanTag {
            tpid: ty,
            tci: be16(frame, off + 2)?,
        });
        off += VLAN_TAG_LEN;
        ty = be16(frame, off)?;
    }
    if ty == TPID_8021Q {
        p.vlan = Some(VlanTag {
            tpid: ty,
            tci: be16(frame, off + 2)?,
        });
        off += VLAN_TAG_LEN;
        ty = be16(frame, off)?;
    }
    p.ethertype = Some(ty);
    p.l3_offset = off + 2;
    match ty {
        ETHERTYPE_IPV4 => parse_ipv4(frame, p.l3_offset, p),
        ETHERTYPE_IPV6 => parse_ipv6(frame, p.l3_offset, p),
        _ => None,
    }
}

fn parse_ipv4(frame: &[u8], off: usize, p: &mut Parsed) -> Option<()> {
    let ver_ihl = *frame.get(off)?;
    let hlen = usize::from(ver_ihl & 0x0f) * 4;
    if ver_ihl >> 4 != 4 || hlen < IPV4_MIN_HEADER_LEN || frame.len() < off + hlen {
        return None;
    }
    let total_len = usize::from(be16(frame, off + 2)?);
    let frag = be16(frame, off + 6)?;
    let proto = *frame.get(off + 9)?;
    p.l3 = L3Kind::Ipv4;
    p.l3_len = hlen;
    p.ip_end = off + total_len;
    p.ip_proto = Some(proto);
    p.addrs = Some(IpAddrs::V4 {
        src: bytes(frame, off + 12)?,
        dst: bytes(frame, off + 16)?,
    });
    p.more_fragments = frag & 0x2000 != 0;
    p.frag_offset = frag & 0x1fff;
    // A total length inside the header leaves no room for L4; a later fragment starts in the
    // middle of the datagram, so what follows its header is payload, not an L4 header.
    if total_len < hlen || p.frag_offset != 0 {
        return None;
    }
    parse_l4(frame, off + hlen, proto, p)
}

fn parse_ipv6(frame: &[u8], off: usize, p: &mut Parsed) -> Option<()> {
    if *frame.get(off)? >> 4 != 6 || frame.len() < off + IPV6_HEADER_LEN {
        return None;
    }
    let payload_len = usize::from(be16(frame, off + 4)?);
    let next = *frame.get(off + 6)?;
    p.l3 = L3Kind::Ipv6;
    p.l3_len = IPV6_HEADER_LEN;
    p.ip_end = off + IPV6_HEADER_LEN + payload_len;
    p.ip_proto = Some(next);
    p.addrs = Some(IpAddrs::V6 {
        src: bytes(frame, off + 8)?,
        dst: bytes(frame, off + 24)?,
    });
    let l4_off = off + IPV6_HEADER_LEN;
    if next == IPPROTO_IPV6_FRAGMENT {
        // Only to flag the packet as a fragment; the header chain is not walked further, so
        // the packet's L4 stays "other" either way.
        if let Some(word) = be16(frame, l4_off + 2) {
            p.frag_offset = word >> 3;
            p.more_fragments = word & 1 != 0;
        }
    }
    parse_l4(frame, l4_off, next, p)
}

fn parse_l4(frame: &[u8], off: usize, proto: u8, p: &mut Parsed) -> Option<()> {
    if off > p.ip_end {
        return None;
    }
    // A header must fit both in the frame and inside the IP packet: bytes past `ip_end` are
    // padding or garbage, never part of the segment.
    let limit = p.ip_end.min(frame.len());
    match proto {
        IPPROTO_TCP => {
            let hlen = usize::from(*frame.get(off + 12)? >> 4) * 4;
            if hlen < TCP_MIN_HEADER_LEN || off + hlen > limit {
                return None;
            }
            let (src_port, dst_port) = (be16(frame, off)?, be16(frame, off + 2)?);
            p.tcp_flags = *frame.get(off + 13)?;
            p.l4 = L4Kind::Tcp;
            p.l4_len = hlen;
            (p.src_port, p.dst_port) = (src_port, dst_port);
        }
        IPPROTO_UDP => {
            if off + UDP_HEADER_LEN > limit {
                return None;
            }
            let (src_port, dst_port) = (be16(frame, off)?, be16(frame, off + 2)?);
            p.l4 = L4Kind::Udp;
            p.l4_len = UDP_HEADER_LEN;
            (p.src_port, p.dst_port) = (src_port, dst_port);
        }
        _ => p.l4 = L4Kind::Other,
    }
    p.l4_offset = off;
    p.l4_payload_len = p.ip_end - off - p.l4_len;
    Some(())
}

/// One's-complement sum (RFC 1071) of `data` read as big-endian 16-bit words, added to `initial`
/// and folded to 16 bits; not inverted. An odd trailing byte counts as the high byte of a word
/// whose low byte is zero, so sums can be chained only across even-length pieces.
///
/// A checksum field is the inverse (`!`) of this sum over the covered bytes with the field
/// zeroed; bytes that include a correct checksum sum to 0xffff.
pub fn ones_complement_sum(data: &[u8], initial: u16) -> u16 {
    // Eight bytes at a time with the end-around carry added back: 2^16 and 2^64 are both 1
    // modulo 0xffff, so the folded result equals the sum of 16-bit words, and the accumulator
    // stays non-zero once it is (0 and 0xffff keep their meanings).
    let add = |acc: u64, word: u64| {
        let (sum, carry) = acc.overflowing_add(word);
        sum + u64::from(carry)
    };
    let mut acc = u64::from(initial);
    let mut chunks = data.chunks_exact(8);
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        acc = add(acc, u64::from_be_bytes(word));
    }
    // The chunks end on an even offset, so zero padding keeps an odd last byte high in its word.
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut word = [0u8; 8];
        word[..rest.len()].copy_from_slice(rest);
        acc = add(acc, u64::from_be_bytes(word));
    }
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    // The loop above leaves at most 16 bits.
    acc as u16
}

/// Adds a 16-bit one's-complement value to a folded sum.
fn add16(sum: u16, value: u16) -> u16 {
    let (s, carry) = sum.overflowing_add(value);
    s + u16::from(carry)
}

/// Bytes of a TCP/UDP segment whose checksum the checks below cover.
struct L4Span {
    start: usize,
    end: usize,
    /// Offset of the checksum field.
    csum_at: usize,
    udp: bool,
}

/// Checks that `p` (parsed from `frame`) is IPv4 with a sane length and returns the header range.
fn ipv4_header_span(frame: &[u8], p: &Parsed) -> Result<(usize, usize), PacketError> {
    let start = p.l3_offset;
    // `Parsed` has public fields, so these sums are saturating rather than trusted.
    let end = start.saturating_add(p.l3_len);
    if p.ip_end < end {
        return Err(PacketError::BadField {
            field: "IPv4 total length",
            value: p.ip_end.saturating_sub(start),
        });
    }
    if p.ip_end > frame.len() {
        return Err(PacketError::Truncated {
            header: "IP packet",
            len: frame.len(),
        });
    }
    Ok((start, end))
}

/// Explains why `p` has no recognised L3 header, for the offload error.
fn no_l3_error(frame: &[u8], p: &Parsed) -> PacketError {
    let Some(ethertype) = p.ethertype else {
        let header = if frame.len() < ETH_HEADER_LEN {
            "Ethernet header"
        } else {
            "VLAN tag"
        };
        return PacketError::Truncated {
            header,
            len: frame.len(),
        };
    };
    let (header, version, min) = match ethertype {
        ETHERTYPE_IPV4 => ("IPv4 header", 4, IPV4_MIN_HEADER_LEN),
        ETHERTYPE_IPV6 => ("IPv6 header", 6, IPV6_HEADER_LEN),
        _ => return PacketError::NotIp { ethertype },
    };
    let Some(&first) = frame.get(p.l3_offset) else {
        return PacketError::Truncated {
            header,
            len: frame.len(),
        };
    };
    if first >> 4 != version {
        return PacketError::BadField {
            field: "IP version",
            value: usize::from(first >> 4),
        };
    }
    let hlen = if version == 4 {
        usize::from(first & 0x0f) * 4
    } else {
        min
    };
    if hlen < min {
        return PacketError::BadField {
            field: "IPv4 header length (IHL x 4)",
            value: hlen,
        };
    }
    PacketError::Truncated {
        header,
        len: frame.len(),
    }
}

/// Checks that `p` (parsed from `frame`) holds a whole, unfragmented TCP or UDP segment whose
/// length fields agree with the frame, and returns where it lies.
fn l4_span(frame: &[u8], p: &Parsed) -> Result<L4Span, PacketError> {
    if p.l3 == L3Kind::None {
        return Err(no_l3_error(frame, p));
    }
    let protocol = p.ip_proto.unwrap_or(0);
    if protocol != IPPROTO_TCP && protocol != IPPROTO_UDP {
        return Err(PacketError::NotTcpOrUdp { protocol });
    }
    if p.is_fragment() {
        return Err(PacketError::Fragment {
            offset: p.frag_offset,
            more: p.more_fragments,
        });
    }
    if p.l3 == L3Kind::Ipv4 {
        ipv4_header_span(frame, p)?;
    }
    if p.ip_end > frame.len() {
        return Err(PacketError::Truncated {
            header: "IP packet",
            len: frame.len(),
        });
    }
    let start = p.l3_offset.saturating_add(p.l3_len);
    let Some(ip_payload) = p.ip_end.checked_sub(start) else {
        return Err(PacketError::BadField {
            field: "IP payload length",
            value: 0,
        });
    };
    match p.l4 {
        L4Kind::Tcp => Ok(L4Span {
            start,
            end: p.ip_end,
            csum_at: start.saturating_add(16),
            udp: false,
        }),
        L4Kind::Udp => {
            let udp_len = usize::from(be16(frame, start.saturating_add(4)).unwrap_or(0));
            // A UDP length shorter than the IP payload leaves trailing bytes outside the
            // datagram, which receivers tolerate; a longer one or one inside the header cannot
            // be right.
            if udp_len < UDP_HEADER_LEN || udp_len > ip_payload {
                return Err(PacketError::BadField {
                    field: "UDP length",
                    value: udp_len,
                });
            }
            Ok(L4Span {
                start,
                end: start + udp_len,
                csum_at: start.saturating_add(6),
                udp: true,
            })
        }
        L4Kind::None | L4Kind::Other => {
            if protocol == IPPROTO_TCP {
                if let Some(&doff) = frame.get(start.saturating_add(12)) {
                    let hlen = usize::from(doff >> 4) * 4;
                    if hlen < TCP_MIN_HEADER_LEN {
                        return Err(PacketError::BadField {
                            field: "TCP header length (data offset x 4)",
                            value: hlen,
                        });
                    }
                }
            }
            Err(PacketError::Truncated {
                header: if protocol == IPPROTO_TCP {
                    "TCP header"
                } else {
                    "UDP header"
                },
                len: ip_payload,
            })
        }
    }
}

/// One's-complement sum of the TCP/UDP pseudo-header for a segment of `len` bytes.
fn pseudo_header_sum(p: &Parsed, protocol: u8, len: usize) -> u16 {
    match p.addrs {
        Some(IpAddrs::V4 { src, dst }) => {
            let sum = ones_complement_sum(&dst, ones_complement_sum(&src, 0));
            // IPv4 lengths come from a 16-bit field, so `len` fits; saturate rather than trust it.
            let len = u16::try_from(len).unwrap_or(u16::MAX);
            add16(add16(sum, u16::from(protocol)), len)
        }
        Some(IpAddrs::V6 { src, dst }) => {
            let sum = ones_complement_sum(&dst, ones_complement_sum(&src, 0));
            let len = u32::try_from(len).unwrap_or(u32::MAX);
            let len_words = ones_complement_sum(&len.to_be_bytes(), 0);
            add16(add16(sum, len_words), u16::from(protocol))
        }
        None => 0,
    }
}

/// The NIC's `l3_ok` for a received frame: `p` (from [`parse`] of this `frame`) is IPv4, its
/// header checksum is right, and its total length covers the header and fits in the frame.
/// IPv6 has no header checksum and is never `l3_ok` here.
pub fn ipv4_header_checksum_ok(frame: &[u8], p: &Parsed) -> bool {
    if p.l3 != L3Kind::Ipv4 || p.frame_len != frame.len() {
        return false;
    }
    match ipv4_header_span(frame, p) {
        Ok((start, end)) => frame
            .get(start..end)
            .is_some_and(|header| ones_complement_sum(header, 0) == 0xffff),
        Err(_) => false,
    }
}

/// Whether `p` (from [`parse`] of this `frame`) is an unfragmented TCP or UDP segment whose
/// length fields (the IP packet's, UDP's length, TCP's data offset) agree with the frame.
pub fn l4_lengths_ok(frame: &[u8], p: &Parsed) -> bool {
    l4_span(frame, p).is_ok()
}

/// The NIC's `l4_ok` for a received frame: `p` (from [`parse`] of this `frame`) is an
/// unfragmented TCP or UDP segment over IPv4 or IPv6 whose length fields agree with the frame and
/// whose checksum, pseudo-header included, is right. UDP over IPv4 with checksum 0 (none sent)
/// counts as right; over IPv6 a zero UDP checksum is invalid.
pub fn l4_checksum_ok(frame: &[u8], p: &Parsed) -> bool {
    if p.frame_len != frame.len() {
        return false;
    }
    let Ok(span) = l4_span(frame, p) else {
        return false;
    };
    let Some(segment) = frame.get(span.start..span.end) else {
        return false;
    };
    if span.udp && p.l3 == L3Kind::Ipv4 && be16(frame, span.csum_at) == Some(0) {
        return true;
    }
    let protocol = if span.udp { IPPROTO_UDP } else { IPPROTO_TCP };
    let sum = pseudo_header_sum(p, protocol, segment.len());
    ones_complement_sum(segment, sum) == 0xffff
}

/// Transmit checksum offload: computes and writes the IPv4 header checksum (`l3`) and/or the TCP
/// or UDP checksum (`l4`) of `frame` in place, as the NIC does for a WQE with those `cs_flags`.
///
/// `l3` on an IPv6 packet is accepted and does nothing (IPv6 has no header checksum). A computed
/// UDP checksum of 0 is written as 0xffff, since 0 means "no checksum". Everything is checked
/// before anything is written, so on error `frame` is unchanged.
///
/// # Errors
/// [`PacketError::NotIp`], [`PacketError::NotTcpOrUdp`] or [`PacketError::Fragment`] when the
/// frame cannot be offloaded; [`PacketError::Truncated`] or [`PacketError::BadField`] when its
/// headers or length fields do not fit the frame.
pub fn insert_checksums(frame: &mut [u8], l3: bool, l4: bool) -> Result<(), PacketError> {
    if !l3 && !l4 {
        return Ok(());
    }
    let p = parse(frame);
    if p.l3 == L3Kind::None {
        return Err(no_l3_error(frame, &p));
    }
    let ipv4_header = if l3 && p.l3 == L3Kind::Ipv4 {
        Some(ipv4_header_span(frame, &p)?)
    } else {
        None
    };
    let l4_span = if l4 { Some(l4_span(frame, &p)?) } else { None };

    if let Some((start, end)) = ipv4_header {
        write_checksum(frame, start, end, start + 10, 0, false);
    }
    if let Some(span) = l4_span {
        let protocol = if span.udp { IPPROTO_UDP } else { IPPROTO_TCP };
        let pseudo = pseudo_header_sum(&p, protocol, span.end - span.start);
        write_checksum(frame, span.start, span.end, span.csum_at, pseudo, span.udp);
    }
    Ok(())
}

/// Zeroes the checksum field at `at`, sums `frame[start..end]` onto `initial` and stores the
/// inverted sum there. Ranges were validated by the caller; out-of-range ones are skipped.
fn write_checksum(frame: &mut [u8], start: usize, end: usize, at: usize, initial: u16, udp: bool) {
    let Some(field_end) = at.checked_add(2) else {
        return;
    };
    let Some(field) = frame.get_mut(at..field_end) else {
        return;
    };
    field.fill(0);
    let Some(covered) = frame.get(start..end) else {
        return;
    };
    let mut csum = !ones_complement_sum(covered, initial);
    if udp && csum == 0 {
        csum = 0xffff;
    }
    if let Some(field) = frame.get_mut(at..field_end) {
        field.copy_from_slice(&csum.to_be_bytes());
    }
}

/// Writes `frame` with an 802.1Q tag (TPID 0x8100, `tci`) inserted after the MAC addresses into
/// `out`, as the NIC's VLAN insertion offload does, and returns the tagged length
/// (`frame.len() + 4`). Bytes of `out` past that length are left alone.
///
/// # Errors
/// [`PacketError::Truncated`] when `frame` is shorter than [`ETH_HEADER_LEN`];
/// [`PacketError::OutputTooSmall`] when `out` cannot hold the tagged frame.
pub fn insert_vlan(frame: &[u8], tci: u16, out: &mut [u8]) -> Result<usize, PacketError> {
    if frame.len() < ETH_HEADER_LEN {
        return Err(PacketError::Truncated {
            header: "Ethernet header",
            len: frame.len(),
        });
    }
    let needed = frame.len() + VLAN_TAG_LEN;
    let out_len = out.len();
    let too_small = PacketError::OutputTooSmall {
        len: out_len,
        needed,
    };
    let out = out.get_mut(..needed).ok_or(too_small)?;
    let (macs, rest) = frame.split_at(12);
    let (out_macs, out_rest) = out.split_at_mut(12);
    out_macs.copy_from_slice(macs);
    let (tag, out_tail) = out_rest.split_at_mut(VLAN_TAG_LEN);
    tag[..2].copy_from_slice(&TPID_8021Q.to_be_bytes());
    tag[2..].copy_from_slice(&tci.to_be_bytes());
    out_tail.copy_from_slice(rest);
    Ok(needed)
}
