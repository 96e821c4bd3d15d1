//! Ethernet II headers and ARP for IPv4 over Ethernet (RFC 826): parse (never panicking, typed
//! errors) and build, on byte slices.

use super::error::FrameError;
use std::net::Ipv4Addr;

/// A 48-bit Ethernet (MAC) address.
pub type MacAddr = [u8; 6];

/// The broadcast MAC address.
pub const BROADCAST: MacAddr = [0xff; 6];
/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType of ARP.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// Bytes in an untagged Ethernet II header.
pub const ETH_HEADER_LEN: usize = 14;
/// Bytes of an ARP packet for IPv4 over Ethernet.
pub const ARP_LEN: usize = 28;
/// Bytes of an ARP frame before padding (the device pads to the 60-byte minimum).
pub const ARP_FRAME_LEN: usize = ETH_HEADER_LEN + ARP_LEN;

/// ARP hardware type Ethernet.
const HTYPE_ETHER: u16 = 1;
/// ARP hardware type IEEE 802, which Linux's `arp_process` takes as Ethernet too.
const HTYPE_IEEE802: u16 = 6;

/// True for a group (multicast or broadcast) MAC address.
pub fn is_group(mac: &MacAddr) -> bool {
    mac[0] & 1 != 0
}

/// An untagged Ethernet II header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EthernetHeader {
    /// Destination address.
    pub dst: MacAddr,
    /// Source address.
    pub src: MacAddr,
    /// EtherType (a VLAN tag's TPID when tagged: tagged frames are not read further).
    pub ethertype: u16,
}

impl EthernetHeader {
    /// Reads the first 14 bytes of `frame`.
    pub fn parse(frame: &[u8]) -> Result<Self, FrameError> {
        let h = frame.get(..ETH_HEADER_LEN).ok_or(FrameError::TooShort {
            need: ETH_HEADER_LEN,
            got: frame.len(),
        })?;
        let mut dst = [0; 6];
        let mut src = [0; 6];
        dst.copy_from_slice(&h[0..6]);
        src.copy_from_slice(&h[6..12]);
        Ok(Self {
            dst,
            src,
            ethertype: u16::from_be_bytes([h[12], h[13]]),
        })
    }

    /// Writes the header into the first 14 bytes of `out`.
    pub fn write(&self, out: &mut [u8]) -> Result<(), FrameError> {
        let got = out.len();
        let h = out.get_mut(..ETH_HEADER_LEN).ok_or(FrameError::TooShort {
            need: ETH_HEADER_LEN,
            got,
        })?;
        h[0..6].copy_from_slice(&self.dst);
        h[6..12].copy_from_slice(&self.src);
        h[12..14].copy_from_slice(&self.ethertype.to_be_bytes());
        Ok(())
    }
}

/// An ARP operation this driver reads or sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArpOp {
    /// Who has `target_ip`? (1)
    Request,
    /// `sender_ip` is at `sender_mac`. (2)
    Reply,
}

impl ArpOp {
    fn code(self) -> u16 {
        match self {
            ArpOp::Request => 1,
            ArpOp::Reply => 2,
        }
    }
}

/// An ARP packet for IPv4 over Ethernet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArpPacket {
    /// Request or reply.
    pub op: ArpOp,
    /// Sender hardware address.
    pub sender_mac: MacAddr,
    /// Sender protocol address.
    pub sender_ip: Ipv4Addr,
    /// Target hardware address (zero in a request).
    pub target_mac: MacAddr,
    /// Target protocol address.
    pub target_ip: Ipv4Addr,
}

impl ArpPacket {
    /// Reads an ARP packet (the bytes after the Ethernet header), with the checks Linux's
    /// `arp_rcv` and `arp_process` make before using one: address lengths 6 and 4, hardware
    /// type Ethernet or IEEE 802, protocol IPv4, operation request or reply. Trailing bytes
    /// (Ethernet padding) are ignored.
    pub fn parse(arp: &[u8]) -> Result<Self, FrameError> {
        let p = arp.get(..ARP_LEN).ok_or(FrameError::TooShort {
            need: ARP_LEN,
            got: arp.len(),
        })?;
        let be16 = |at: usize| u16::from_be_bytes([p[at], p[at + 1]]);
        let (htype, ptype, hln, pln, op) = (be16(0), be16(2), p[4], p[5], be16(6));
        if hln != 6 || pln != 4 {
            return Err(FrameError::WrongAddressLengths { hln, pln });
        }
        if htype != HTYPE_ETHER && htype != HTYPE_IEEE802 {
            return Err(FrameError::WrongHardwareType(htype));
        }
        if ptype != ETHERTYPE_IPV4 {
            return Err(FrameError::WrongProtocolType(ptype));
        }
        let op = match op {
            1 => ArpOp::Request,
            2 => ArpOp::Reply,
            other => return Err(FrameError::WrongOperation(other)),
        };
        let mac = |at: usize| {
            let mut m = [0; 6];
            m.copy_from_slice(&p[at..at + 6]);
            m
        };
        let ip = |at: usize| Ipv4Addr::new(p[at], p[at + 1], p[at + 2], p[at + 3]);
        Ok(Self {
            op,
            sender_mac: mac(8),
            sender_ip: ip(14),
            target_mac: mac(18),
            target_ip: ip(24),
        })
    }

    /// Writes the packet (hardware type Ethernet) into the first 28 bytes of `out`.
    pub fn write(&self, out: &mut [u8]) -> Result<(), FrameError> {
        let got = out.len();
        let p = out
            .get_mut(..ARP_LEN)
            .ok_or(FrameError::TooShort { need: ARP_LEN, got })?;
        p[0..2].copy_from_slice(&HTYPE_ETHER.to_be_bytes());
        p[2..4].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        p[4] = 6;
        p[5] = 4;
        p[6..8].copy_from_slice(&self.op.code().to_be_bytes());
        p[8..14].copy_from_slice(&self.sender_mac);
        p[14..18].copy_from_slice(&self.sender_ip.octets());
        p[18..24].copy_from_slice(&self.target_mac);
        p[24..28].copy_from_slice(&self.target_ip.octets());
        Ok(())
    }

    /// Reads a whole ARP frame: its Ethernet header (EtherType 0x0806) and the packet.
    pub fn parse_frame(frame: &[u8]) -> Result<(EthernetHeader, Self), FrameError> {
        let eth = EthernetHeader::parse(frame)?;
        if eth.ethertype != ETHERTYPE_ARP {
            return Err(FrameError::WrongEthertype(eth.ethertype));
        }
        Ok((eth, Self::parse(&frame[ETH_HEADER_LEN..])?))
    }

    /// Writes a whole ARP frame from `src` to `dst` into `out`: 42 bytes (no padding).
    pub fn write_frame(
        &self,
        dst: MacAddr,
        src: MacAddr,
        out: &mut [u8; ARP_FRAME_LEN],
    ) -> Result<(), FrameError> {
        EthernetHeader {
            dst,
            src,
            ethertype: ETHERTYPE_ARP,
        }
        .write(out)?;
        self.write(&mut out[ETH_HEADER_LEN..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> [u8; ARP_FRAME_LEN] {
        let mut f = [0u8; ARP_FRAME_LEN];
        ArpPacket {
            op: ArpOp::Request,
            sender_mac: [2, 0, 0, 0, 0, 1],
            sender_ip: Ipv4Addr::new(192, 168, 77, 1),
            target_mac: [0; 6],
            target_ip: Ipv4Addr::new(192, 168, 77, 3),
        }
        .write_frame(BROADCAST, [2, 0, 0, 0, 0, 1], &mut f)
        .unwrap();
        f
    }

    #[test]
    fn a_request_is_written_as_rfc826_lays_it_out() {
        let f = request();
        assert_eq!(
            f.to_vec(),
            [
                &[0xff; 6][..],
                &[2, 0, 0, 0, 0, 1],
                &[0x08, 0x06],
                &[0, 1, 0x08, 0, 6, 4, 0, 1],
                &[2, 0, 0, 0, 0, 1, 192, 168, 77, 1],
                &[0; 6],
                &[192, 168, 77, 3],
            ]
            .concat()
        );
        let (eth, arp) = ArpPacket::parse_frame(&f).unwrap();
        assert_eq!(eth.dst, BROADCAST);
        assert_eq!(arp.op, ArpOp::Request);
        assert_eq!(arp.target_ip, Ipv4Addr::new(192, 168, 77, 3));
    }

    #[test]
    fn every_malformed_field_is_a_typed_error() {
        let f = request();
        for len in 0..ARP_FRAME_LEN {
            assert!(matches!(
                ArpPacket::parse_frame(&f[..len]),
                Err(FrameError::TooShort { .. })
            ));
        }
        let with = |at: usize, v: u8| {
            let mut g = f;
            g[at] = v;
            ArpPacket::parse_frame(&g)
        };
        assert_eq!(with(15, 7), Err(FrameError::WrongHardwareType(7)));
        assert!(with(15, 6).is_ok(), "IEEE 802 is taken as Ethernet");
        assert_eq!(with(17, 0xdd), Err(FrameError::WrongProtocolType(0x08dd)));
        assert_eq!(
            with(18, 8),
            Err(FrameError::WrongAddressLengths { hln: 8, pln: 4 })
        );
        assert_eq!(
            with(19, 16),
            Err(FrameError::WrongAddressLengths { hln: 6, pln: 16 })
        );
        assert_eq!(with(21, 3), Err(FrameError::WrongOperation(3)));
        assert_eq!(with(13, 0x00), Err(FrameError::WrongEthertype(0x0800)));
    }

    #[test]
    fn parsing_any_bytes_never_panics() {
        crate::net::random_inputs(0x9e37_79b9, 80, |bytes| {
            let _ = ArpPacket::parse_frame(bytes);
            let _ = ArpPacket::parse(bytes);
        });
    }
}
