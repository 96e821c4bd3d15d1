//! The L4 header fields a match reads beyond ports and TCP flags: TCP sequence and
//! acknowledgement numbers, window and urgent pointer; UDP length and checksum; ICMP and
//! ICMPv6 type, code, header data (bytes 4..8 of the ICMP header: an echo's identifier and
//! sequence number) and the first four payload bytes. Firmware entries read them in
//! `misc_parameters_3` (`crate::steering`), steering entries in the ETHL4_MISC lookups
//! (`crate::sw_steering::lookup`).

use crate::packet::{L3Kind, L4Kind, Parsed};

/// IP protocol number of ICMP.
const IPPROTO_ICMP: u8 = 1;
/// IPv6 next header number of ICMPv6.
const IPPROTO_ICMPV6: u8 = 58;

/// An ICMP header's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Icmp {
    /// ICMPv6 (next header 58 over IPv6) rather than ICMPv4 (protocol 1 over IPv4).
    pub(crate) v6: bool,
    /// Byte 0.
    pub(crate) icmp_type: u8,
    /// Byte 1.
    pub(crate) code: u8,
    /// Bytes 4..8, big-endian.
    pub(crate) header_data: u32,
    /// Bytes 8..12, big-endian; 0 past the frame's end.
    pub(crate) payload_data: u32,
}

/// The big-endian word at `at` of `frame`, if whole.
fn be32(frame: &[u8], at: usize) -> Option<u32> {
    let b = frame.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// The big-endian half-word at `at` of `frame`, if whole.
fn be16(frame: &[u8], at: usize) -> Option<u16> {
    let b = frame.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes([b[0], b[1]]))
}

/// The TCP sequence and acknowledgement numbers of a TCP packet.
pub(crate) fn tcp_seq_ack(frame: &[u8], p: &Parsed) -> Option<(u32, u32)> {
    if p.l4 != L4Kind::Tcp {
        return None;
    }
    Some((be32(frame, p.l4_offset + 4)?, be32(frame, p.l4_offset + 8)?))
}

/// The TCP window and urgent pointer of a TCP packet.
pub(crate) fn tcp_window_urgent(frame: &[u8], p: &Parsed) -> Option<(u16, u16)> {
    if p.l4 != L4Kind::Tcp {
        return None;
    }
    Some((
        be16(frame, p.l4_offset + 14)?,
        be16(frame, p.l4_offset + 18)?,
    ))
}

/// The UDP length and checksum fields of a UDP packet.
pub(crate) fn udp_length_checksum(frame: &[u8], p: &Parsed) -> Option<(u16, u16)> {
    if p.l4 != L4Kind::Udp {
        return None;
    }
    Some((be16(frame, p.l4_offset + 4)?, be16(frame, p.l4_offset + 6)?))
}

/// The ICMP header of an unfragmented (or first-fragment) ICMP or ICMPv6 packet, when its
/// first eight bytes are whole.
pub(crate) fn icmp(frame: &[u8], p: &Parsed) -> Option<Icmp> {
    let v6 = match (p.l3, p.ip_proto) {
        (L3Kind::Ipv4, Some(IPPROTO_ICMP)) => false,
        (L3Kind::Ipv6, Some(IPPROTO_ICMPV6)) => true,
        _ => return None,
    };
    if p.l4 != L4Kind::Other || p.frag_offset != 0 {
        return None;
    }
    let at = p.l4_offset;
    let header = frame.get(at..at.checked_add(8)?)?;
    Some(Icmp {
        v6,
        icmp_type: header[0],
        code: header[1],
        header_data: u32::from_be_bytes([header[4], header[5], header[6], header[7]]),
        payload_data: be32(frame, at + 8).unwrap_or(0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::parse;

    /// An Ethernet + IPv4 frame of protocol `proto` with `l4` after a 20-byte header.
    fn ipv4(proto: u8, l4: &[u8]) -> Vec<u8> {
        let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x08, 0x00];
        let total = (20 + l4.len()) as u16;
        f.extend_from_slice(&[0x45, 0, 0, 0, 0, 0, 0, 0, 64, proto, 0, 0]);
        f[16..18].copy_from_slice(&total.to_be_bytes());
        f.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
        f.extend_from_slice(l4);
        f
    }

    #[test]
    fn icmp_echo_fields() {
        // Echo request: type 8, code 0, checksum, identifier 0x1234, sequence 7, payload.
        let f = ipv4(1, &[8, 0, 0, 0, 0x12, 0x34, 0, 7, 0xde, 0xad, 0xbe, 0xef]);
        let fields = icmp(&f, &parse(&f)).expect("ICMP");
        assert_eq!(
            fields,
            Icmp {
                v6: false,
                icmp_type: 8,
                code: 0,
                header_data: 0x1234_0007,
                payload_data: 0xdead_beef,
            }
        );
        // Too short for the header: nothing.
        let f = ipv4(1, &[8, 0, 0, 0]);
        assert_eq!(icmp(&f, &parse(&f)), None);
    }

    #[test]
    fn tcp_and_udp_fields() {
        let mut tcp = [0u8; 20];
        tcp[4..8].copy_from_slice(&0x0102_0304u32.to_be_bytes());
        tcp[8..12].copy_from_slice(&0x0506_0708u32.to_be_bytes());
        tcp[12] = 5 << 4;
        tcp[14..16].copy_from_slice(&0xffffu16.to_be_bytes());
        tcp[18..20].copy_from_slice(&9u16.to_be_bytes());
        let f = ipv4(6, &tcp);
        let p = parse(&f);
        assert_eq!(tcp_seq_ack(&f, &p), Some((0x0102_0304, 0x0506_0708)));
        assert_eq!(tcp_window_urgent(&f, &p), Some((0xffff, 9)));
        assert_eq!(udp_length_checksum(&f, &p), None);
        let f = ipv4(17, &[0, 1, 0, 2, 0, 8, 0xab, 0xcd]);
        let p = parse(&f);
        assert_eq!(udp_length_checksum(&f, &p), Some((8, 0xabcd)));
        assert_eq!(tcp_seq_ack(&f, &p), None);
    }
}
