//! Address handles: where a datagram goes, laid out once as the 48-byte address vector every
//! UD and GSI send WQE carries (`struct mlx5_av`, filled as mlx5_ib's `create_ib_ah` in
//! `drivers/infiniband/hw/mlx5/ah.c` fills it for a RoCE v2 GID).

use super::roce::Roce;
use crate::error::DriverError;
use cxdirect_hw::wqe::DatagramSeg;

/// Bytes of the address vector (`struct mlx5_wqe_datagram_seg`).
pub(super) const AV_LEN: usize = 48;
/// ECN-capable transport on every RoCE v2 datagram (`MLX5_ECN_ENABLED`, bit 1 of `tclass`).
const ECN_ENABLED: u8 = 1 << 1;
/// The UDP source port of a datagram without a flow label: the bottom of the RoCE range, as
/// `mlx5_get_roce_udp_sport_min` gives it.
const UDP_SPORT_MIN: u16 = 0xc000;

/// Where a datagram goes (`struct ibv_ah_attr` on a RoCE port: the GRH's fields and the
/// destination MAC, which RoCE needs and the application resolves, by ARP for an IPv4 GID).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AhAttr {
    /// The destination's MAC address.
    pub mac: [u8; 6],
    /// The destination's GID (16 bytes, network order; an IPv4 address as `::ffff:a.b.c.d`).
    pub gid: [u8; 16],
    /// IP hop limit (TTL), 1 to 255.
    pub hop_limit: u8,
    /// IP traffic class (DSCP in bits 7:2; the ECN bits are the device's).
    pub traffic_class: u8,
    /// Flow label (20 bits); nonzero picks the UDP source port (`rdma_flow_label_to_udp_sport`).
    pub flow_label: u32,
    /// Service level: the datagrams' Ethernet priority, 0 to 7 (`stat_rate_sl` bits 3:1, as
    /// mlx5_ib's `create_ib_ah` and libmlx5's `mlx5_create_ah` write it on an Ethernet port):
    /// the port sends them in that priority's traffic class.
    pub sl: u8,
}

impl AhAttr {
    /// To `mac` and `gid`, hop limit 64, traffic class 0, no flow label, SL 0.
    pub fn to(mac: [u8; 6], gid: [u8; 16]) -> Self {
        Self {
            mac,
            gid,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
            sl: 0,
        }
    }
}

/// An address handle (`ibv_ah`): the address vector of [`AhAttr`] from this function's RoCE
/// v2 GID, ready to be copied into send WQEs. Building it is the only work; posting with it
/// only copies its 48 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddressHandle {
    av: [u8; AV_LEN],
    attr: AhAttr,
}

impl AddressHandle {
    /// The handle to `attr` from `roce`'s GID.
    ///
    /// # Errors
    ///
    /// [`DriverError::Config`] for an all-zero GID, a hop limit of 0, a flow label above 20
    /// bits, or an SL above 7.
    pub fn new(roce: &Roce, attr: &AhAttr) -> Result<Self, DriverError> {
        if attr.gid.iter().all(|&b| b == 0) {
            return Err(DriverError::config("gid", 0u64, "a GID (not all zero)"));
        }
        if attr.hop_limit == 0 {
            return Err(DriverError::config("hop_limit", 0u64, "1 to 255"));
        }
        if attr.flow_label > 0xf_ffff {
            return Err(DriverError::config(
                "flow_label",
                attr.flow_label,
                "at most 20 bits",
            ));
        }
        if attr.sl > 7 {
            return Err(DriverError::config(
                "sl",
                attr.sl,
                "0 to 7 (an Ethernet priority)",
            ));
        }
        let mut av = [0u8; AV_LEN];
        {
            let mut seg = DatagramSeg::new(&mut av[..])
                .map_err(|_| DriverError::Internal("the address vector's layout"))?;
            let sport = if attr.flow_label != 0 {
                flow_label_to_udp_sport(attr.flow_label)
            } else {
                UDP_SPORT_MIN
            };
            seg.set_udp_sport(sport)
                .set_rmac(attr.mac)
                .set_tclass(attr.traffic_class | ECN_ENABLED)
                .set_hop_limit(attr.hop_limit)
                .set_stat_rate_sl(attr.sl << 1)
                .set_grh(true)
                .set_sgid_index(roce.gid_index())
                .set_flow_label(attr.flow_label)
                .set_dgid(attr.gid);
        }
        Ok(Self { av, attr: *attr })
    }

    /// What it was made from.
    pub fn attr(&self) -> &AhAttr {
        &self.attr
    }

    /// The address vector, Q_Key and destination QP still zero.
    #[inline(always)]
    pub(super) fn av(&self) -> &[u8; AV_LEN] {
        &self.av
    }
}

/// The RoCE v2 UDP source port of flow label `fl` (Linux `rdma_flow_label_to_udp_sport`):
/// 0xc000 to 0xffff.
fn flow_label_to_udp_sport(fl: u32) -> u16 {
    let mut low = fl & 0x3fff;
    low ^= (fl & 0xf_c000) >> 14;
    (low | 0xc000) as u16
}

#[cfg(test)]
mod tests {
    use super::flow_label_to_udp_sport;

    #[test]
    fn flow_labels_pick_ports_in_the_roce_range() {
        assert_eq!(flow_label_to_udp_sport(1), 0xc001);
        assert_eq!(flow_label_to_udp_sport(0x4000), 0xc001);
        assert!(flow_label_to_udp_sport(0xf_ffff) >= 0xc000);
    }
}
