//! A [`Reply`] as a frame: Ethernet, IPv4 or IPv6, and a TCP header with the options the
//! handshake agreed (timestamps as `NOP NOP TS`, SACK blocks behind `NOP NOP`, the SYN-ACK's
//! MSS, SACK permitted and window scale in the order Linux's `tcp_options_write` uses). The
//! reply carries no payload, so both checksums are computed here. Written into the caller's
//! buffer: nothing allocates.

use super::types::Reply;
use crate::net::checksum::Checksum;
use std::net::IpAddr;
use thiserror::Error;

/// The longest reply frame: Ethernet 14 + IPv6 40 + TCP 60.
pub const MAX_REPLY_FRAME: usize = 114;

/// The two ends of the connection, as a reply goes (from us to the peer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoints {
    /// Our MAC address.
    pub local_mac: [u8; 6],
    /// The peer's (or its gateway's) MAC address.
    pub peer_mac: [u8; 6],
    /// Our address.
    pub local_ip: IpAddr,
    /// The peer's address (the same IP version as `local_ip`).
    pub peer_ip: IpAddr,
    /// Our port.
    pub local_port: u16,
    /// The peer's port.
    pub peer_port: u16,
}

/// Why a reply frame was not written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum ReplyError {
    /// The two addresses are of different IP versions.
    #[error("local and peer addresses are of different IP versions")]
    MixedVersions,
    /// The buffer is shorter than the frame.
    #[error("buffer of {got} bytes; the reply frame needs {need}")]
    BufferTooSmall {
        /// Bytes needed.
        need: usize,
        /// Bytes given.
        got: usize,
    },
}

/// Writes the TCP options of `r` (with our `tsval`) into `out`; returns their length (a
/// multiple of 4, at most 40).
fn options(r: &Reply, tsval: u32, out: &mut [u8; 40]) -> usize {
    let mut n = 0;
    let mut put = |n: &mut usize, bytes: &[u8]| {
        out[*n..*n + bytes.len()].copy_from_slice(bytes);
        *n += bytes.len();
    };
    if let Some(mss) = r.mss {
        let m = mss.to_be_bytes();
        put(&mut n, &[2, 4, m[0], m[1]]);
    }
    let ts = r.tsecr.map(|ecr| {
        let (v, e) = (tsval.to_be_bytes(), ecr.to_be_bytes());
        [8, 10, v[0], v[1], v[2], v[3], e[0], e[1], e[2], e[3]]
    });
    match (r.sack_permitted, ts) {
        (true, Some(ts)) => {
            put(&mut n, &[4, 2]);
            put(&mut n, &ts);
        }
        (false, Some(ts)) => {
            put(&mut n, &[1, 1]);
            put(&mut n, &ts);
        }
        (true, None) => put(&mut n, &[1, 1, 4, 2]),
        (false, None) => {}
    }
    if let Some(shift) = r.window_scale {
        put(&mut n, &[1, 3, 3, shift]);
    }
    let blocks = r.sack.as_slice();
    if !blocks.is_empty() {
        let room = (40 - n - 4) / 8;
        let blocks = &blocks[..blocks.len().min(room)];
        put(&mut n, &[1, 1, 5, 2 + 8 * blocks.len() as u8]);
        for b in blocks {
            put(&mut n, &b.left.to_be_bytes());
            put(&mut n, &b.right.to_be_bytes());
        }
    }
    n
}

/// Writes `r` as a frame from `ends.local` to `ends.peer` into `buf` (our timestamp clock
/// reads `tsval`); returns the frame's length.
///
/// # Errors
///
/// [`ReplyError`]: mixed IP versions, or `buf` too short (at most [`MAX_REPLY_FRAME`] bytes
/// are needed).
pub fn write_reply(
    r: &Reply,
    ends: &Endpoints,
    tsval: u32,
    buf: &mut [u8],
) -> Result<usize, ReplyError> {
    let mut opts = [0u8; 40];
    let olen = options(r, tsval, &mut opts);
    let tcp_len = 20 + olen;
    let (ip_len, ethertype) = match (ends.local_ip, ends.peer_ip) {
        (IpAddr::V4(_), IpAddr::V4(_)) => (20, 0x0800u16),
        (IpAddr::V6(_), IpAddr::V6(_)) => (40, 0x86dd),
        _ => return Err(ReplyError::MixedVersions),
    };
    let len = 14 + ip_len + tcp_len;
    if buf.len() < len {
        return Err(ReplyError::BufferTooSmall {
            need: len,
            got: buf.len(),
        });
    }
    let f = &mut buf[..len];
    f.fill(0);
    f[0..6].copy_from_slice(&ends.peer_mac);
    f[6..12].copy_from_slice(&ends.local_mac);
    f[12..14].copy_from_slice(&ethertype.to_be_bytes());
    let mut pseudo = Checksum::new();
    match (ends.local_ip, ends.peer_ip) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => {
            let ip = &mut f[14..34];
            ip[0] = 0x45;
            ip[2..4].copy_from_slice(&((20 + tcp_len) as u16).to_be_bytes());
            ip[6] = 0x40; // don't fragment
            ip[8] = 64;
            ip[9] = 6;
            ip[12..16].copy_from_slice(&src.octets());
            ip[16..20].copy_from_slice(&dst.octets());
            let mut c = Checksum::new();
            c.add(ip);
            ip[10..12].copy_from_slice(&c.finish().to_be_bytes());
            pseudo.add(&src.octets());
            pseudo.add(&dst.octets());
            pseudo.add(&[0, 6]);
            pseudo.add(&(tcp_len as u16).to_be_bytes());
        }
        (IpAddr::V6(src), IpAddr::V6(dst)) => {
            let ip = &mut f[14..54];
            ip[0] = 0x60;
            ip[4..6].copy_from_slice(&(tcp_len as u16).to_be_bytes());
            ip[6] = 6;
            ip[7] = 64;
            ip[8..24].copy_from_slice(&src.octets());
            ip[24..40].copy_from_slice(&dst.octets());
            pseudo.add(&src.octets());
            pseudo.add(&dst.octets());
            pseudo.add(&(tcp_len as u32).to_be_bytes());
            pseudo.add(&[0, 0, 0, 6]);
        }
        _ => return Err(ReplyError::MixedVersions),
    }
    let t = &mut f[14 + ip_len..];
    t[0..2].copy_from_slice(&ends.local_port.to_be_bytes());
    t[2..4].copy_from_slice(&ends.peer_port.to_be_bytes());
    t[4..8].copy_from_slice(&r.seq.to_be_bytes());
    t[8..12].copy_from_slice(&r.ack.to_be_bytes());
    t[12] = ((tcp_len / 4) as u8) << 4;
    t[13] = r.flags.0;
    t[14..16].copy_from_slice(&r.window.to_be_bytes());
    t[20..].copy_from_slice(&opts[..olen]);
    pseudo.add(t);
    let sum = pseudo.finish();
    t[16..18].copy_from_slice(&sum.to_be_bytes());
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devmem_tcp::ooo::SackBlocks;
    use crate::devmem_tcp::parse::parse_split;
    use crate::devmem_tcp::segment::TcpFlags;
    use crate::devmem_tcp::tests::{config, Harness};
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn ends(v6: bool) -> Endpoints {
        let (l, p) = if v6 {
            (
                IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2)),
                IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1)),
            )
        } else {
            (
                IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
                IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            )
        };
        Endpoints {
            local_mac: [2, 0, 0, 0, 0, 2],
            peer_mac: [2, 0, 0, 0, 0, 1],
            local_ip: l,
            peer_ip: p,
            local_port: 5201,
            peer_port: 40000,
        }
    }

    /// Both checksums of a written frame verify (summed here with the pseudo-header).
    fn checksums_verify(f: &[u8], v6: bool) {
        let ip_len = if v6 { 40 } else { 20 };
        let tcp = &f[14 + ip_len..];
        let mut c = Checksum::new();
        if v6 {
            c.add(&f[22..54]);
            c.add(&(tcp.len() as u32).to_be_bytes());
            c.add(&[0, 0, 0, 6]);
        } else {
            let mut ip = Checksum::new();
            ip.add(&f[14..34]);
            assert!(ip.verifies(), "IPv4 header checksum");
            c.add(&f[26..34]);
            c.add(&[0, 6]);
            c.add(&(tcp.len() as u16).to_be_bytes());
        }
        c.add(tcp);
        assert!(c.verifies(), "TCP checksum");
    }

    #[test]
    fn syn_ack_and_acks_read_back_as_written() {
        let mut h = Harness::established(config(8, 4), 1000);
        // The SYN-ACK the handshake produced, again through a fresh receiver.
        let mut fresh = Harness::new(config(8, 4));
        let syn = crate::devmem_tcp::Segment {
            seq: 1000,
            flags: TcpFlags::SYN,
            options: crate::devmem_tcp::TcpOptions {
                mss: Some(1460),
                window_scale: Some(7),
                sack_permitted: true,
                timestamp: Some((5, 0)),
                truncated: false,
                ..Default::default()
            },
            checksum_ok: true,
            ..Default::default()
        };
        let syn_ack = fresh.feed(&syn).unwrap().reply.unwrap();
        for v6 in [false, true] {
            let mut buf = [0u8; MAX_REPLY_FRAME];
            let n = write_reply(&syn_ack, &ends(v6), 42, &mut buf).unwrap();
            checksums_verify(&buf[..n], v6);
            let p = parse_split(&buf[..n], None, true).unwrap();
            let s = p.segment;
            assert_eq!(
                (s.seq, s.ack, s.flags),
                (syn_ack.seq, 1001, TcpFlags::SYN | TcpFlags::ACK)
            );
            assert_eq!(s.options.mss, Some(1448));
            assert_eq!(s.options.window_scale, Some(7));
            assert!(s.options.sack_permitted);
            assert_eq!(s.options.timestamp, Some((42, 5)));
            assert_eq!((p.src_port, p.dst_port), (5201, 40000));
        }
        // An ACK with three SACK blocks and timestamps: 40 option bytes.
        h.data(2001, 100).unwrap();
        h.data(3001, 100).unwrap();
        let ack = h.data(4001, 100).unwrap().reply.unwrap();
        assert_eq!(ack.sack.as_slice().len(), 3);
        let mut buf = [0u8; MAX_REPLY_FRAME];
        let n = write_reply(&ack, &ends(false), 43, &mut buf).unwrap();
        assert_eq!(n, 14 + 20 + 60);
        checksums_verify(&buf[..n], false);
        let s = parse_split(&buf[..n], None, true).unwrap().segment;
        assert_eq!((s.ack, s.window), (1001, ack.window));
        assert_eq!(s.options.timestamp, Some((43, 200)));
        assert_eq!(s.options.sack.as_slice(), ack.sack.as_slice());
        let opts = &buf[14 + 20 + 20 + 12..n];
        assert_eq!(&opts[..4], &[1, 1, 5, 26]);
        assert_eq!(u32::from_be_bytes(opts[4..8].try_into().unwrap()), 4001);
    }

    #[test]
    fn short_buffers_and_mixed_versions_are_refused() {
        let r = Reply {
            flags: TcpFlags::ACK,
            seq: 1,
            ack: 2,
            window: 3,
            mss: None,
            window_scale: None,
            sack_permitted: false,
            tsecr: None,
            sack: SackBlocks::default(),
        };
        let mut buf = [0u8; 53];
        assert_eq!(
            write_reply(&r, &ends(false), 0, &mut buf),
            Err(ReplyError::BufferTooSmall { need: 54, got: 53 })
        );
        let mut e = ends(false);
        e.peer_ip = ends(true).peer_ip;
        assert_eq!(
            write_reply(&r, &e, 0, &mut [0u8; 128]),
            Err(ReplyError::MixedVersions)
        );
    }
}
