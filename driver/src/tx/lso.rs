//! TCP segmentation offload on the send side: why a packet is refused, and where its headers
//! end. The device cuts an LSO WQE's payload into MSS-sized frames behind copies of the headers
//! the WQE carries inline, so the driver must find exactly where the TCP header ends.

/// Why a send queue refused a packet instead of sending it (counted in
/// [`QueueStats::errors`](crate::QueueStats::errors), the last one kept in
/// [`QueueStats::last_refusal`](crate::QueueStats::last_refusal)). The ring is untouched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TxRefusal {
    /// Shorter than an Ethernet header, or (without TSO) longer than the port's frame.
    #[error("packet shorter than an Ethernet header or longer than the port's frame")]
    Length,
    /// TSO asked for on a port started without `PortConfig::tx_tso`.
    #[error("TSO asked for on a port started without tx_tso")]
    TsoOff,
    /// TSO asked for on a packet that is not Ethernet (with at most two VLAN tags), IPv4 (not
    /// a fragment) or IPv6 (no extension headers), then TCP.
    #[error("TSO asked for on a packet that is not TCP over IPv4 or IPv6")]
    TsoNotTcp,
    /// TSO headers not wholly in the packet's first segment, or longer than
    /// [`MAX_TSO_HEADERS`] bytes.
    #[error("TSO headers not in the first segment or longer than {MAX_TSO_HEADERS} bytes")]
    TsoHeaders,
    /// An MSS of 0, or one whose frames (headers plus MSS) exceed the port's frame.
    #[error("TSO MSS of 0, or too large for the port's frame")]
    TsoMss,
    /// Longer than the device's largest LSO message (`2^max_lso_cap` bytes), or in more
    /// buffers than one WQE can point at.
    #[error("TSO packet longer than the device's LSO limit or in too many buffers")]
    TsoTooLong,
}

impl TxRefusal {
    const ALL: [TxRefusal; 6] = [
        TxRefusal::Length,
        TxRefusal::TsoOff,
        TxRefusal::TsoNotTcp,
        TxRefusal::TsoHeaders,
        TxRefusal::TsoMss,
        TxRefusal::TsoTooLong,
    ];

    /// A one-byte code for the published counters (1..=6; 0 means none).
    pub(crate) fn code(self) -> u8 {
        self as u8 + 1
    }

    /// The refusal [`TxRefusal::code`] gave `code`; `None` for 0 or an unknown code.
    pub(crate) fn from_code(code: u8) -> Option<Self> {
        Self::ALL.get(usize::from(code).checked_sub(1)?).copied()
    }
}

/// Longest headers (Ethernet to TCP) a TSO packet may have, in bytes: enough for two VLAN tags,
/// IPv4 and TCP each with 40 bytes of options.
pub const MAX_TSO_HEADERS: usize = 192;

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const TPID_8021Q: u16 = 0x8100;
const TPID_8021AD: u16 = 0x88a8;
const IPPROTO_TCP: u8 = 6;

/// The length of `packet`'s Ethernet, IP and TCP headers, read from its first bytes (as many
/// as were read; fewer than the headers is [`TxRefusal::TsoHeaders`]).
pub(crate) fn tcp_headers_len(packet: &[u8]) -> Result<usize, TxRefusal> {
    let byte = |at: usize| packet.get(at).copied().ok_or(TxRefusal::TsoHeaders);
    let be16 = |at: usize| Ok(u16::from(byte(at)?) << 8 | u16::from(byte(at + 1)?));
    let mut type_at = 12;
    let mut ethertype = be16(type_at)?;
    for tpid in [TPID_8021AD, TPID_8021Q] {
        if ethertype == tpid {
            type_at += 4;
            ethertype = be16(type_at)?;
        }
    }
    let l3 = type_at + 2;
    let l4 = match ethertype {
        ETHERTYPE_IPV4 => {
            let ver_ihl = byte(l3)?;
            let ihl = usize::from(ver_ihl & 0x0f) * 4;
            // More fragments or a fragment offset: not a whole TCP segment to cut.
            let fragment = be16(l3 + 6)? & 0x3fff != 0;
            if ver_ihl >> 4 != 4 || ihl < 20 || fragment || byte(l3 + 9)? != IPPROTO_TCP {
                return Err(TxRefusal::TsoNotTcp);
            }
            l3 + ihl
        }
        ETHERTYPE_IPV6 => {
            if byte(l3)? >> 4 != 6 || byte(l3 + 6)? != IPPROTO_TCP {
                return Err(TxRefusal::TsoNotTcp);
            }
            l3 + 40
        }
        _ => return Err(TxRefusal::TsoNotTcp),
    };
    let tcp_len = usize::from(byte(l4 + 12)? >> 4) * 4;
    if tcp_len < 20 {
        return Err(TxRefusal::TsoNotTcp);
    }
    let end = l4 + tcp_len;
    if end > packet.len() {
        return Err(TxRefusal::TsoHeaders);
    }
    Ok(end)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(ethertype: u16, ip: &[u8], tcp_len: usize) -> Vec<u8> {
        let mut h = vec![0u8; 12];
        h.extend_from_slice(&ethertype.to_be_bytes());
        h.extend_from_slice(ip);
        let mut tcp = vec![0u8; tcp_len];
        tcp[12] = ((tcp_len / 4) as u8) << 4;
        h.extend_from_slice(&tcp);
        h
    }

    fn ipv4(ihl_words: u8, proto: u8) -> Vec<u8> {
        let mut ip = vec![0u8; usize::from(ihl_words) * 4];
        ip[0] = 0x40 | ihl_words;
        ip[6] = 0x40;
        ip[9] = proto;
        ip
    }

    fn ipv6(next: u8) -> Vec<u8> {
        let mut ip = vec![0u8; 40];
        ip[0] = 0x60;
        ip[6] = next;
        ip
    }

    #[test]
    fn header_lengths_of_tcp_over_ipv4_and_ipv6() {
        assert_eq!(
            tcp_headers_len(&headers(ETHERTYPE_IPV4, &ipv4(5, 6), 32)),
            Ok(66)
        );
        assert_eq!(
            tcp_headers_len(&headers(ETHERTYPE_IPV4, &ipv4(7, 6), 20)),
            Ok(62)
        );
        let v6 = headers(ETHERTYPE_IPV6, &ipv6(6), 20);
        assert_eq!(tcp_headers_len(&v6), Ok(74));
        let mut with_payload = v6.clone();
        with_payload.extend_from_slice(&[0xee; 100]);
        assert_eq!(tcp_headers_len(&with_payload), Ok(74), "payload after them");
        let mut tagged = v6[..12].to_vec();
        tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x07]);
        tagged.extend_from_slice(&v6[12..]);
        assert_eq!(tcp_headers_len(&tagged), Ok(78));
    }

    #[test]
    fn what_is_not_tcp_and_what_is_cut_short() {
        let udp = headers(ETHERTYPE_IPV4, &ipv4(5, 17), 20);
        assert_eq!(tcp_headers_len(&udp), Err(TxRefusal::TsoNotTcp));
        let mut fragment = headers(ETHERTYPE_IPV4, &ipv4(5, 6), 20);
        fragment[20] = 0x20;
        assert_eq!(tcp_headers_len(&fragment), Err(TxRefusal::TsoNotTcp));
        let extension = headers(ETHERTYPE_IPV6, &ipv6(0), 20);
        assert_eq!(tcp_headers_len(&extension), Err(TxRefusal::TsoNotTcp));
        let arp = headers(0x0806, &ipv4(5, 6), 20);
        assert_eq!(tcp_headers_len(&arp), Err(TxRefusal::TsoNotTcp));
        let mut bad_offset = headers(ETHERTYPE_IPV4, &ipv4(5, 6), 20);
        bad_offset[14 + 20 + 12] = 0x40;
        assert_eq!(tcp_headers_len(&bad_offset), Err(TxRefusal::TsoNotTcp));
        let whole = headers(ETHERTYPE_IPV4, &ipv4(5, 6), 32);
        for cut in 0..whole.len() {
            assert_eq!(
                tcp_headers_len(&whole[..cut]),
                Err(TxRefusal::TsoHeaders),
                "{cut} bytes"
            );
        }
    }

    #[test]
    fn refusal_codes_round_trip() {
        for r in TxRefusal::ALL {
            assert_eq!(TxRefusal::from_code(r.code()), Some(r));
        }
        assert_eq!(TxRefusal::from_code(0), None);
        assert_eq!(TxRefusal::from_code(7), None);
    }
}
