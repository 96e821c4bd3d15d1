//! Large send offload (TCP segmentation), as a ConnectX does it for an LSO WQE: the Ethernet
//! segment inlines the packet's Ethernet, IP and TCP headers and gives the MSS; the payload,
//! gathered from the data segments, is cut into pieces of at most MSS bytes, and each piece goes
//! out behind a copy of the headers with the per-segment fields rewritten:
//!
//! - IPv4: total length, and the identification advanced by one per segment (the header
//!   checksum is then recomputed by the checksum offload when the WQE asks for it);
//! - IPv6: payload length;
//! - TCP: sequence number advanced by the payload bytes sent before; FIN and PSH kept only on
//!   the last segment and CWR only on the first, as Linux's software segmentation (which the
//!   hardware matches) does.
//!
//! This module knows only the header bytes; the send engine gathers, checksums and transmits.

use crate::packet::{
    ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETH_HEADER_LEN, IPPROTO_TCP, IPV4_MIN_HEADER_LEN,
    IPV6_HEADER_LEN, TCP_FIN, TCP_MIN_HEADER_LEN, TCP_PSH, TPID_8021AD, TPID_8021Q, VLAN_TAG_LEN,
};

/// TCP's congestion window reduced flag.
const TCP_CWR: u8 = 0x80;

/// Why inlined headers cannot be segmented.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeaderError {
    /// Not Ethernet + IPv4 or IPv6 + TCP, or an IPv4 fragment.
    NotTcp,
    /// The TCP header does not end exactly where the inlined bytes end.
    Length,
}

/// The IP version of an LSO packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IpVersion {
    V4,
    V6,
}

/// Where the headers of an LSO packet sit in its inlined header bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HeaderLayout {
    /// IPv4 or IPv6.
    pub ip: IpVersion,
    /// Offset of the IP header, in bytes (after the Ethernet header and any VLAN tags).
    pub l3_offset: usize,
    /// Offset of the TCP header, in bytes.
    pub l4_offset: usize,
}

impl HeaderLayout {
    /// Reads the layout of `headers`, the inlined bytes of an LSO WQE: an Ethernet header (with
    /// up to an 802.1ad and an 802.1Q tag), an IPv4 header (options allowed, not a fragment) or
    /// an IPv6 header whose next header is TCP, and a TCP header (options allowed) ending exactly
    /// at the end of `headers`. Length fields are not trusted: the device rewrites them.
    pub(crate) fn parse(headers: &[u8]) -> Result<Self, HeaderError> {
        let be16 = |at: usize| -> Result<u16, HeaderError> {
            headers
                .get(at..at + 2)
                .map(|b| u16::from_be_bytes([b[0], b[1]]))
                .ok_or(HeaderError::Length)
        };
        if headers.len() < ETH_HEADER_LEN {
            return Err(HeaderError::Length);
        }
        let mut type_at = 12;
        let mut ethertype = be16(type_at)?;
        for tpid in [TPID_8021AD, TPID_8021Q] {
            if ethertype == tpid {
                type_at += VLAN_TAG_LEN;
                ethertype = be16(type_at)?;
            }
        }
        let l3_offset = type_at + 2;
        let (ip, l4_offset) = match ethertype {
            ETHERTYPE_IPV4 => {
                let ver_ihl = *headers.get(l3_offset).ok_or(HeaderError::Length)?;
                let ihl = usize::from(ver_ihl & 0x0f) * 4;
                if ver_ihl >> 4 != 4 || ihl < IPV4_MIN_HEADER_LEN {
                    return Err(HeaderError::NotTcp);
                }
                let frag = be16(l3_offset + 6)?;
                let proto = *headers.get(l3_offset + 9).ok_or(HeaderError::Length)?;
                // More fragments, or a fragment offset: not a TCP segment to cut.
                if frag & 0x3fff != 0 || proto != IPPROTO_TCP {
                    return Err(HeaderError::NotTcp);
                }
                (IpVersion::V4, l3_offset + ihl)
            }
            ETHERTYPE_IPV6 => {
                let version = *headers.get(l3_offset).ok_or(HeaderError::Length)? >> 4;
                let next = *headers.get(l3_offset + 6).ok_or(HeaderError::Length)?;
                if version != 6 || next != IPPROTO_TCP {
                    return Err(HeaderError::NotTcp);
                }
                (IpVersion::V6, l3_offset + IPV6_HEADER_LEN)
            }
            _ => return Err(HeaderError::NotTcp),
        };
        let data_offset = *headers.get(l4_offset + 12).ok_or(HeaderError::Length)? >> 4;
        let tcp_len = usize::from(data_offset) * 4;
        if tcp_len < TCP_MIN_HEADER_LEN {
            return Err(HeaderError::NotTcp);
        }
        if l4_offset + tcp_len != headers.len() {
            return Err(HeaderError::Length);
        }
        Ok(Self {
            ip,
            l3_offset,
            l4_offset,
        })
    }
}

/// Where one segment sits in the LSO message.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SegmentPlace {
    /// Index of the segment (0 for the first).
    pub index: u16,
    /// Payload bytes sent in earlier segments.
    pub payload_before: u32,
    /// Whether this is the last segment.
    pub last: bool,
}

/// Rewrites the headers at the front of `frame` (headers laid out as `layout`, followed by this
/// segment's payload) for segment `place`: IP lengths to this frame, IPv4 identification,
/// TCP sequence number and flags. Checksums are left to the checksum offload. `frame` is at most
/// a port's largest frame, so its lengths fit 16 bits.
pub(crate) fn rewrite_segment(frame: &mut [u8], layout: HeaderLayout, place: SegmentPlace) {
    let l3 = layout.l3_offset;
    match layout.ip {
        IpVersion::V4 => {
            let total = (frame.len() - l3) as u16;
            frame[l3 + 2..l3 + 4].copy_from_slice(&total.to_be_bytes());
            let id = u16::from_be_bytes([frame[l3 + 4], frame[l3 + 5]]).wrapping_add(place.index);
            frame[l3 + 4..l3 + 6].copy_from_slice(&id.to_be_bytes());
        }
        IpVersion::V6 => {
            let payload = (frame.len() - l3 - IPV6_HEADER_LEN) as u16;
            frame[l3 + 4..l3 + 6].copy_from_slice(&payload.to_be_bytes());
        }
    }
    let l4 = layout.l4_offset;
    let seq = u32::from_be_bytes([frame[l4 + 4], frame[l4 + 5], frame[l4 + 6], frame[l4 + 7]])
        .wrapping_add(place.payload_before);
    frame[l4 + 4..l4 + 8].copy_from_slice(&seq.to_be_bytes());
    let mut flags = frame[l4 + 13];
    if !place.last {
        flags &= !(TCP_FIN | TCP_PSH);
    }
    if place.index != 0 {
        flags &= !TCP_CWR;
    }
    frame[l4 + 13] = flags;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ipv4_tcp_headers(tcp_options: usize) -> Vec<u8> {
        let mut h = vec![0u8; 14];
        h[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        let mut ip = [0u8; 20];
        ip[0] = 0x45;
        ip[4..6].copy_from_slice(&0xfffeu16.to_be_bytes());
        ip[6] = 0x40; // DF
        ip[9] = IPPROTO_TCP;
        h.extend_from_slice(&ip);
        let mut tcp = vec![0u8; 20 + tcp_options];
        tcp[4..8].copy_from_slice(&0xffff_fff0u32.to_be_bytes());
        tcp[12] = ((20 + tcp_options) as u8 / 4) << 4;
        tcp[13] = TCP_CWR | TCP_PSH | TCP_FIN | 0x10;
        h.extend_from_slice(&tcp);
        h
    }

    #[test]
    fn layouts_of_tagged_and_untagged_headers() {
        let h = ipv4_tcp_headers(12);
        let l = HeaderLayout::parse(&h).unwrap();
        assert_eq!((l.ip, l.l3_offset, l.l4_offset), (IpVersion::V4, 14, 34));
        let mut tagged = h[..12].to_vec();
        tagged.extend_from_slice(&TPID_8021Q.to_be_bytes());
        tagged.extend_from_slice(&[0, 5]);
        tagged.extend_from_slice(&h[12..]);
        let l = HeaderLayout::parse(&tagged).unwrap();
        assert_eq!((l.l3_offset, l.l4_offset), (18, 38));
        let mut udp = h.clone();
        udp[14 + 9] = 17;
        assert_eq!(HeaderLayout::parse(&udp), Err(HeaderError::NotTcp));
        let mut fragment = h.clone();
        fragment[14 + 6] = 0x20;
        assert_eq!(HeaderLayout::parse(&fragment), Err(HeaderError::NotTcp));
        assert_eq!(
            HeaderLayout::parse(&h[..h.len() - 4]),
            Err(HeaderError::Length)
        );
        let mut longer = h.clone();
        longer.push(0);
        assert_eq!(HeaderLayout::parse(&longer), Err(HeaderError::Length));
        assert_eq!(HeaderLayout::parse(&h[..10]), Err(HeaderError::Length));
    }

    #[test]
    fn segments_get_their_lengths_ids_sequence_numbers_and_flags() {
        let h = ipv4_tcp_headers(0);
        let layout = HeaderLayout::parse(&h).unwrap();
        let flags_of = |index: u16, last: bool| {
            let mut f = h.clone();
            f.extend_from_slice(&[0xaa; 100]);
            let place = SegmentPlace {
                index,
                payload_before: u32::from(index) * 100,
                last,
            };
            rewrite_segment(&mut f, layout, place);
            f
        };
        let first = flags_of(0, false);
        assert_eq!(u16::from_be_bytes([first[16], first[17]]), 140);
        assert_eq!(u16::from_be_bytes([first[18], first[19]]), 0xfffe);
        assert_eq!(first[34 + 13], TCP_CWR | 0x10);
        let third = flags_of(2, false);
        assert_eq!(
            u16::from_be_bytes([third[18], third[19]]),
            0,
            "the ID wraps"
        );
        assert_eq!(
            u32::from_be_bytes([third[38], third[39], third[40], third[41]]),
            0xffff_fff0u32.wrapping_add(200),
            "the sequence number wraps"
        );
        assert_eq!(third[34 + 13], 0x10);
        let last = flags_of(3, true);
        assert_eq!(last[34 + 13], TCP_PSH | TCP_FIN | 0x10);
        let only = flags_of(0, true);
        assert_eq!(only[34 + 13], TCP_CWR | TCP_PSH | TCP_FIN | 0x10);
    }

    #[test]
    fn mutated_headers_never_panic_and_parsed_ones_rewrite_in_bounds() {
        let base = ipv4_tcp_headers(12);
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut parsed = 0;
        for _ in 0..20_000 {
            let mut h = base.clone();
            // Half keep their length, so that many still parse and reach the rewrite.
            let len = if next() & 1 == 0 {
                base.len()
            } else {
                (next() % (base.len() as u64 + 8)) as usize
            };
            h.resize(len, 0);
            for _ in 0..(next() % 4) {
                if !h.is_empty() {
                    let at = (next() % h.len() as u64) as usize;
                    h[at] = next() as u8;
                }
            }
            if let Ok(layout) = HeaderLayout::parse(&h) {
                parsed += 1;
                assert!(layout.l4_offset + TCP_MIN_HEADER_LEN <= h.len());
                h.extend_from_slice(&[0x55; 9]);
                let place = SegmentPlace {
                    index: next() as u16,
                    payload_before: next() as u32,
                    last: next() & 1 == 0,
                };
                rewrite_segment(&mut h, layout, place);
            }
        }
        assert!(
            parsed > 1000,
            "mutations that still parse were exercised: {parsed}"
        );
    }
}
