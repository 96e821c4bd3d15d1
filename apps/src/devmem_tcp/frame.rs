//! TCP/IPv4 frames as a Linux sender writes them, for the self-test's sender: the SYN with MSS,
//! SACK permitted, timestamps, NOP and window scale (20 option bytes, 74-byte headers), data
//! segments and bare ACKs with NOP, NOP, timestamps (12 option bytes, 66-byte headers), and
//! the IPv4 and TCP checksums computed.

use std::net::Ipv4Addr;

/// Ethernet + IPv4 + TCP header bytes of a segment with the timestamp option.
pub const DATA_HEADERS: usize = 14 + 20 + 32;

/// One end of the connection.
#[derive(Debug, Clone, Copy)]
pub struct End {
    /// MAC address.
    pub mac: [u8; 6],
    /// IPv4 address.
    pub ip: Ipv4Addr,
    /// TCP port.
    pub port: u16,
}

/// A segment's TCP fields.
#[derive(Debug, Clone, Copy)]
pub struct Fields {
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgment number.
    pub ack: u32,
    /// Flags (FIN 0x01, SYN 0x02, RST 0x04, PSH 0x08, ACK 0x10).
    pub flags: u8,
    /// Window field.
    pub window: u16,
    /// TSval.
    pub tsval: u32,
    /// TSecr.
    pub tsecr: u32,
}

/// Ones' complement sum of `data` added to `sum` (RFC 1071).
fn sum16(mut sum: u32, data: &[u8]) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u32::from(*last) << 8;
    }
    sum
}

fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Writes the frame from `from` to `to` with `f`, the SYN's options when `f.flags` has SYN
/// (announcing `mss` and window shift `wscale`), and `payload`, into `out` (cleared first).
pub fn write(
    from: &End,
    to: &End,
    f: &Fields,
    mss: u16,
    wscale: u8,
    payload: &[u8],
    out: &mut Vec<u8>,
) {
    let mut opts = [0u8; 20];
    let opt_len = if f.flags & 0x02 != 0 {
        let m = mss.to_be_bytes();
        opts[..4].copy_from_slice(&[2, 4, m[0], m[1]]);
        opts[4..6].copy_from_slice(&[4, 2]);
        opts[6..8].copy_from_slice(&[8, 10]);
        opts[8..12].copy_from_slice(&f.tsval.to_be_bytes());
        opts[12..16].copy_from_slice(&f.tsecr.to_be_bytes());
        opts[16..20].copy_from_slice(&[1, 3, 3, wscale]);
        20
    } else {
        opts[..4].copy_from_slice(&[1, 1, 8, 10]);
        opts[4..8].copy_from_slice(&f.tsval.to_be_bytes());
        opts[8..12].copy_from_slice(&f.tsecr.to_be_bytes());
        12
    };
    let tcp_len = 20 + opt_len;
    let ip_total = 20 + tcp_len + payload.len();
    out.clear();
    out.extend_from_slice(&to.mac);
    out.extend_from_slice(&from.mac);
    out.extend_from_slice(&0x0800u16.to_be_bytes());
    let ip = out.len();
    out.extend_from_slice(&[0x45, 0]);
    out.extend_from_slice(&(ip_total as u16).to_be_bytes());
    // Identification 0 with DF, as Linux sends TCP.
    out.extend_from_slice(&[0, 0, 0x40, 0, 64, 6, 0, 0]);
    out.extend_from_slice(&from.ip.octets());
    out.extend_from_slice(&to.ip.octets());
    let c = fold(sum16(0, &out[ip..ip + 20]));
    out[ip + 10..ip + 12].copy_from_slice(&c.to_be_bytes());
    let tcp = out.len();
    out.extend_from_slice(&from.port.to_be_bytes());
    out.extend_from_slice(&to.port.to_be_bytes());
    out.extend_from_slice(&f.seq.to_be_bytes());
    out.extend_from_slice(&f.ack.to_be_bytes());
    out.extend_from_slice(&[((tcp_len / 4) as u8) << 4, f.flags]);
    out.extend_from_slice(&f.window.to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(&opts[..opt_len]);
    out.extend_from_slice(payload);
    let mut pseudo = [0u8; 12];
    pseudo[..4].copy_from_slice(&from.ip.octets());
    pseudo[4..8].copy_from_slice(&to.ip.octets());
    pseudo[9] = 6;
    pseudo[10..12].copy_from_slice(&((tcp_len + payload.len()) as u16).to_be_bytes());
    let c = fold(sum16(sum16(0, &pseudo), &out[tcp..]));
    out[tcp + 16..tcp + 18].copy_from_slice(&c.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use cxdirect::devmem_tcp::parse_split;

    fn ends() -> (End, End) {
        let a = End {
            mac: [2, 0, 0, 0, 0, 1],
            ip: Ipv4Addr::new(10, 0, 0, 1),
            port: 40000,
        };
        let b = End {
            mac: [2, 0, 0, 0, 0, 2],
            ip: Ipv4Addr::new(10, 0, 0, 2),
            port: 5201,
        };
        (a, b)
    }

    #[test]
    fn a_syn_has_74_bytes_of_headers_and_a_data_segment_66_both_checksums_right() {
        let (a, b) = ends();
        let f = Fields {
            seq: 1,
            ack: 0,
            flags: 0x02,
            window: 64240,
            tsval: 5,
            tsecr: 0,
        };
        let mut out = Vec::new();
        write(&a, &b, &f, 1460, 7, &[], &mut out);
        assert_eq!(out.len(), 74);
        let mut check = out.clone();
        cxdirect_emu::packet::insert_checksums(&mut check, true, true).unwrap();
        assert_eq!(check, out, "the model computes the same checksums");
        let s = parse_split(&out, None, true).unwrap();
        assert_eq!(s.segment.options.mss, Some(1460));
        assert_eq!(s.segment.options.window_scale, Some(7));
        assert!(s.segment.options.sack_permitted);
        write(
            &a,
            &b,
            &Fields { flags: 0x18, ..f },
            0,
            0,
            b"hello",
            &mut out,
        );
        assert_eq!(out.len(), DATA_HEADERS + 5);
        let mut check = out.clone();
        cxdirect_emu::packet::insert_checksums(&mut check, true, true).unwrap();
        assert_eq!(check, out);
        let s = parse_split(&out, None, true).unwrap();
        assert_eq!(s.headers_len, DATA_HEADERS);
        assert_eq!(s.segment.options.timestamp.map(|t| t.0), Some(5));
    }
}
