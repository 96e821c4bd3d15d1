//! How long a frame's headers are (Ethernet with up to two VLAN tags, IPv4 or IPv6, TCP or
//! UDP), read from the start of the frame: what of a split queue's header buffer is headers
//! and what is the start of the payload.

/// The length of the Ethernet, IP and TCP/UDP headers at the start of `frame`, or `None` when
/// they are not all there, or the frame is not TCP or UDP over IPv4 or IPv6 (IPv6 extension
/// headers are not followed). Every length read from the frame is checked against it.
pub(crate) fn headers_len(frame: &[u8]) -> Option<usize> {
    let be16 = |at: usize| -> Option<u16> {
        Some(u16::from_be_bytes([*frame.get(at)?, *frame.get(at + 1)?]))
    };
    let mut at = 12;
    let mut ethertype = be16(at)?;
    for _ in 0..2 {
        if ethertype == 0x8100 || ethertype == 0x88a8 {
            at += 4;
            ethertype = be16(at)?;
        }
    }
    at += 2;
    let proto = match ethertype {
        0x0800 => {
            let ihl = usize::from(frame.get(at)? & 0x0f) * 4;
            if ihl < 20 {
                return None;
            }
            let proto = *frame.get(at + 9)?;
            at += ihl;
            proto
        }
        0x86dd => {
            let proto = *frame.get(at + 6)?;
            at += 40;
            proto
        }
        _ => return None,
    };
    let l4 = match proto {
        6 => usize::from(frame.get(at + 12)? >> 4) * 4,
        17 => 8,
        _ => return None,
    };
    if l4 < 8 {
        return None;
    }
    let end = at + l4;
    (end <= frame.len()).then_some(end)
}

#[cfg(test)]
mod tests {
    use super::headers_len;

    fn eth(ethertype: u16) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&ethertype.to_be_bytes());
        f
    }

    #[test]
    fn udp_tcp_vlan_and_ipv6_headers_are_measured() {
        let mut udp4 = eth(0x0800);
        udp4.extend_from_slice(&[0x45, 0, 0, 0, 0, 0, 0, 0, 64, 17]);
        udp4.resize(14 + 20 + 8 + 5, 0);
        assert_eq!(headers_len(&udp4), Some(42));
        let mut tcp4 = eth(0x8100);
        tcp4.extend_from_slice(&[0, 1, 0x08, 0x00]);
        tcp4.extend_from_slice(&[0x46, 0, 0, 0, 0, 0, 0, 0, 64, 6]);
        tcp4.resize(18 + 24 + 12, 0);
        tcp4.push(0x80); // 32-byte TCP header
        tcp4.resize(18 + 24 + 32, 0);
        assert_eq!(headers_len(&tcp4), Some(74));
        tcp4.pop();
        assert_eq!(headers_len(&tcp4), None, "one byte short");
        let mut udp6 = eth(0x86dd);
        udp6.extend_from_slice(&[0x60, 0, 0, 0, 0, 8, 17, 64]);
        udp6.resize(14 + 40 + 8, 0);
        assert_eq!(headers_len(&udp6), Some(62));
        let mut icmp = eth(0x0800);
        icmp.extend_from_slice(&[0x45, 0, 0, 0, 0, 0, 0, 0, 64, 1]);
        icmp.resize(60, 0);
        assert_eq!(headers_len(&icmp), None);
        assert_eq!(headers_len(&[0u8; 5]), None);
    }
}
