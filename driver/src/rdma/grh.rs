//! The GRH area of a received datagram: the 40 bytes the device writes in front of the
//! payload, read as Linux's `ib_get_rdma_header_version` and `ib_init_ah_attr_from_wc`
//! (`drivers/infiniband/core/verbs.c`) read them. RoCE v2 over IPv4: 20 bytes of no meaning,
//! then the IPv4 header; over IPv6: the IPv6 header; RoCE v1: the InfiniBand GRH. The bytes
//! come from the device (and, through it, from the peer): each field is checked.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::ud::GRH_AREA;
use super::wc::NetworkHeader;
use crate::error::DriverError;

/// IP protocol (IPv6 next header) of RoCE v2: UDP.
const IPPROTO_UDP: u8 = 17;
/// Next header of an InfiniBand GRH in front of a BTH (IBA 8.3: `IB_GRH_NEXT_HDR`).
const GRH_NEXT_HDR: u8 = 0x1b;

/// The sender's and receiver's addresses of a datagram, from its GRH area.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Grh {
    /// The sender's GID (an IPv4 source as `::ffff:a.b.c.d`).
    pub sgid: [u8; 16],
    /// The GID the datagram was sent to (this function's).
    pub dgid: [u8; 16],
    /// Hop limit (TTL) as received.
    pub hop_limit: u8,
    /// Traffic class (IPv4 TOS) as received.
    pub traffic_class: u8,
    /// Flow label (20 bits; 0 over IPv4).
    pub flow_label: u32,
}

impl Grh {
    /// Reads the first [`GRH_AREA`] bytes of a receive buffer as the network header its
    /// completion names.
    ///
    /// # Errors
    ///
    /// [`DriverError::BadDeviceValue`] for an area shorter than 40 bytes or a header that is
    /// not what `network` says: an IPv4 header without version 4 and a 20-byte header, with a
    /// wrong checksum or not carrying UDP; an IPv6 header without version 6 or not carrying
    /// UDP; a GRH without version 6 or not followed by a BTH.
    pub fn parse(area: &[u8], network: NetworkHeader) -> Result<Self, DriverError> {
        let bad = |what: &'static str, value: u64| DriverError::BadDeviceValue { what, value };
        let area: &[u8; GRH_AREA] = area
            .get(..GRH_AREA)
            .and_then(|a| a.try_into().ok())
            .ok_or(bad("GRH area length", area.len() as u64))?;
        match network {
            NetworkHeader::Ipv4 => {
                let ip = &area[20..];
                if ip[0] != 0x45 {
                    return Err(bad("GRH area IPv4 version and header length", ip[0].into()));
                }
                if ip[9] != IPPROTO_UDP {
                    return Err(bad("GRH area IPv4 protocol", ip[9].into()));
                }
                if ipv4_checksum(ip) != 0 {
                    let sum = u16::from_be_bytes([ip[10], ip[11]]);
                    return Err(bad("GRH area IPv4 header checksum", sum.into()));
                }
                let v4 = |at: usize| Ipv4Addr::new(ip[at], ip[at + 1], ip[at + 2], ip[at + 3]);
                Ok(Self {
                    sgid: v4(12).to_ipv6_mapped().octets(),
                    dgid: v4(16).to_ipv6_mapped().octets(),
                    hop_limit: ip[8],
                    traffic_class: ip[1],
                    flow_label: 0,
                })
            }
            NetworkHeader::Ipv6 | NetworkHeader::Grh => {
                let (next, what) = if network == NetworkHeader::Ipv6 {
                    (IPPROTO_UDP, "GRH area IPv6 next header")
                } else {
                    (GRH_NEXT_HDR, "GRH next header")
                };
                if area[0] >> 4 != 6 {
                    return Err(bad("GRH area IP version", (area[0] >> 4).into()));
                }
                if area[6] != next {
                    return Err(bad(what, area[6].into()));
                }
                let word = u32::from_be_bytes([area[0], area[1], area[2], area[3]]);
                let mut sgid = [0u8; 16];
                let mut dgid = [0u8; 16];
                sgid.copy_from_slice(&area[8..24]);
                dgid.copy_from_slice(&area[24..40]);
                Ok(Self {
                    sgid,
                    dgid,
                    hop_limit: area[7],
                    traffic_class: (word >> 20) as u8,
                    flow_label: word & 0xf_ffff,
                })
            }
        }
    }

    /// The sender's IP address: IPv4 for an IPv4-mapped GID.
    pub fn source_ip(&self) -> IpAddr {
        gid_ip(self.sgid)
    }

    /// The destination IP address: IPv4 for an IPv4-mapped GID.
    pub fn dest_ip(&self) -> IpAddr {
        gid_ip(self.dgid)
    }
}

/// A GID as an IP address (IPv4 when IPv4-mapped).
pub fn gid_ip(gid: [u8; 16]) -> IpAddr {
    let v6 = Ipv6Addr::from(gid);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

/// The one's complement sum of a 20-byte IPv4 header, folded: 0 when its checksum is right.
fn ipv4_checksum(header: &[u8]) -> u16 {
    let mut sum = 0u32;
    for pair in header[..20].chunks_exact(2) {
        sum += u32::from(u16::from_be_bytes([pair[0], pair[1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4_area() -> [u8; 40] {
        let mut a = [0u8; 40];
        let ip = [
            0x45, 0x02, 0, 0x3c, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        a[20..].copy_from_slice(&ip);
        // With the checksum field zero, the folded complement is the checksum itself.
        let sum = ipv4_checksum(&a[20..]);
        a[30..32].copy_from_slice(&sum.to_be_bytes());
        a
    }

    #[test]
    fn an_ipv4_area_gives_mapped_gids_and_a_bad_checksum_is_refused() {
        let a = v4_area();
        let grh = Grh::parse(&a, NetworkHeader::Ipv4).unwrap();
        assert_eq!(grh.source_ip(), IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)));
        assert_eq!(grh.dest_ip(), IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)));
        assert_eq!((grh.hop_limit, grh.traffic_class), (64, 2));
        let mut broken = a;
        broken[32] ^= 1;
        assert!(matches!(
            Grh::parse(&broken, NetworkHeader::Ipv4),
            Err(DriverError::BadDeviceValue { .. })
        ));
        assert!(Grh::parse(&a, NetworkHeader::Ipv6).is_err());
        assert!(Grh::parse(&a[..39], NetworkHeader::Ipv4).is_err());
    }

    #[test]
    fn an_ipv6_area_gives_its_addresses() {
        let mut a = [0u8; 40];
        a[..4].copy_from_slice(&0x6012_3456u32.to_be_bytes());
        a[6] = 17;
        a[7] = 9;
        a[8] = 0xfe;
        a[39] = 7;
        let grh = Grh::parse(&a, NetworkHeader::Ipv6).unwrap();
        assert_eq!(
            (grh.traffic_class, grh.flow_label, grh.hop_limit),
            (1, 0x23456, 9)
        );
        assert_eq!(grh.sgid[0], 0xfe);
        assert_eq!(grh.dgid[15], 7);
        a[6] = 6;
        assert!(Grh::parse(&a, NetworkHeader::Ipv6).is_err());
    }
}
