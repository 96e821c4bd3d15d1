//! RoCE: the capability page (`roce_cap`), the per-port RoCE address (GID) table entries
//! (`roce_addr_layout`) and SET_ROCE_ADDRESS / QUERY_ROCE_ADDRESS (Linux `mlx5_ifc.h`; values
//! from `include/linux/mlx5/device.h` and `include/rdma/ib_verbs.h`).

use crate::layout;

/// Values of [`RoceAddrLayout::roce_version`] (`MLX5_ROCE_VERSION_*`).
pub mod roce_version {
    /// RoCE v1 (Ethernet, EtherType 0x8915).
    pub const V1: u8 = 0;
    /// RoCE v2 (UDP/IP, destination port [`super::ROCE_V2_UDP_DPORT`]).
    pub const V2: u8 = 2;
}

/// Bits of [`RoceCap::roce_version`]: the RoCE versions the device supports
/// (`MLX5_ROCE_VERSION_*_CAP`, one bit per [`roce_version`] value).
pub mod roce_version_cap {
    /// RoCE v1 supported.
    pub const V1: u8 = 1 << 0;
    /// RoCE v2 supported.
    pub const V2: u8 = 1 << 2;
}

/// Bits of [`RoceCap::l3_type`]: the L3 types of RoCE addresses the device supports
/// (`MLX5_ROCE_L3_TYPE_*_CAP`). Not one bit per [`l3_type`] value: bit 0 is not an L3 type,
/// and Linux's mlx5_ib treats a port without both bits as raw Ethernet, not RoCE.
pub mod l3_type_cap {
    /// IPv4 (IPv4-mapped GIDs) supported.
    pub const IPV4: u8 = 1 << 1;
    /// IPv6 supported.
    pub const IPV6: u8 = 1 << 2;
}

/// Values of [`RoceAddrLayout::roce_l3_type`] (`MLX5_ROCE_L3_TYPE_*`).
pub mod l3_type {
    /// IPv4 (the GID is IPv4-mapped: `::ffff:a.b.c.d`).
    pub const IPV4: u8 = 0;
    /// IPv6.
    pub const IPV6: u8 = 1;
}

/// The UDP destination port of RoCE v2 (`ROCE_V2_UDP_DPORT`).
pub const ROCE_V2_UDP_DPORT: u16 = 4791;

/// True when `gid` is an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`).
pub fn gid_is_ipv4_mapped(gid: &[u8; 16]) -> bool {
    gid[..10].iter().all(|&b| b == 0) && gid[10] == 0xff && gid[11] == 0xff
}

layout! {
    /// RoCE capabilities (`MLX5_CAP_ROCE`, QUERY_HCA_CAP op_mod 0x8 maximum / 0x9 current).
    pub struct RoceCap("roce_cap", 0x100) {
        /// Automatic path migration supported.
        roce_apm: bool @ 0x00 [0x1],
        /// Software may choose the UDP source port of a RoCE v2 QP (`ads.udp_sport`); settable
        /// by SET_HCA_CAP.
        sw_r_roce_src_udp_port: bool @ 0x04 [0x1],
        /// Force-loopback RC QPs may be created while RoCE is disabled on the vport.
        fl_rc_qp_when_roce_disabled: bool @ 0x05 [0x1],
        /// Force-loopback RC QPs may be created while RoCE is enabled on the vport.
        fl_rc_qp_when_roce_enabled: bool @ 0x06 [0x1],
        /// Congestion control general object supported.
        roce_cc_general: bool @ 0x07 [0x1],
        /// Out-of-order transmission by default.
        qp_ooo_transmit_default: bool @ 0x08 [0x1],
        /// Timestamp formats QPs support.
        qp_ts_format: u8 @ 0x1e [0x2],
        /// L3 types supported (see [`l3_type_cap`]).
        l3_type: u8 @ 0x8c [0x4],
        /// RoCE versions supported (see [`roce_version_cap`]).
        roce_version: u8 @ 0x98 [0x8],
        /// UDP destination port of RoCE v2 ([`ROCE_V2_UDP_DPORT`]).
        r_roce_dest_udp_port: u16 @ 0xb0 [0x10],
        /// Highest UDP source port of RoCE v2 packets.
        r_roce_max_src_udp_port: u16 @ 0xc0 [0x10],
        /// Lowest UDP source port of RoCE v2 packets.
        r_roce_min_src_udp_port: u16 @ 0xd0 [0x10],
        /// Entries in each port's RoCE address (GID) table.
        roce_address_table_size: u16 @ 0xf0 [0x10],
    }
}

layout! {
    /// One entry of a port's RoCE address table: the GID, its MAC and VLAN, its version.
    pub struct RoceAddrLayout("roce_addr_layout", 0x20) {
        /// The source MAC and VLAN below are valid with a VLAN tag.
        vlan_valid: bool @ 0x83 [0x1],
        /// VLAN id.
        vlan_id: u16 @ 0x84 [0xc],
        /// Source MAC address, bits 47:32.
        source_mac_47_32: u16 @ 0x90 [0x10],
        /// Source MAC address, bits 31:0.
        source_mac_31_0: u32 @ 0xa0 [0x20],
        /// L3 type of the GID (see [`l3_type`]).
        roce_l3_type: u8 @ 0xd4 [0x4],
        /// RoCE version (see [`roce_version`]).
        roce_version: u8 @ 0xd8 [0x8],
    }
    arrays {
        /// Byte `index` (0..16) of the GID (the source L3 address), in network order.
        source_l3_address: u8 @ 0x00 [0x8],
    }
}

impl<T: AsRef<[u8]>> RoceAddrLayout<T> {
    /// The 16 GID bytes in network order.
    pub fn gid(&self) -> [u8; 16] {
        let mut gid = [0; 16];
        gid.copy_from_slice(&self.as_bytes()[..16]);
        gid
    }

    /// The source MAC address.
    pub fn source_mac(&self) -> [u8; 6] {
        let mut mac = [0; 6];
        mac[..2].copy_from_slice(&self.source_mac_47_32().to_be_bytes());
        mac[2..].copy_from_slice(&self.source_mac_31_0().to_be_bytes());
        mac
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> RoceAddrLayout<T> {
    /// Sets the GID from its 16 bytes in network order.
    pub fn set_gid(&mut self, gid: [u8; 16]) -> &mut Self {
        self.as_bytes_mut()[..16].copy_from_slice(&gid);
        self
    }

    /// Sets the source MAC address.
    pub fn set_source_mac(&mut self, mac: [u8; 6]) -> &mut Self {
        self.set_source_mac_47_32(u16::from_be_bytes([mac[0], mac[1]]));
        self.set_source_mac_31_0(u32::from_be_bytes([mac[2], mac[3], mac[4], mac[5]]))
    }
}

layout! {
    /// SET_ROCE_ADDRESS input: writes one entry of a port's RoCE address table (an all-zero
    /// address deletes it).
    pub struct SetRoceAddressIn("set_roce_address_in", 0x30) {
        /// Command opcode: [`Opcode::SetRoceAddress`](crate::cmd::Opcode::SetRoceAddress).
        opcode: u16 @ 0x00 [0x10],
        /// Opcode modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// Table index (below [`RoceCap::roce_address_table_size`]).
        roce_address_index: u16 @ 0x40 [0x10],
        /// Port number (1-based; 0 on a device with one vHCA port).
        vhca_port_num: u8 @ 0x5c [0x4],
    }
    nested {
        /// The entry.
        roce_address: RoceAddrLayout @ 0x80,
    }
}

layout! {
    /// SET_ROCE_ADDRESS output.
    pub struct SetRoceAddressOut("set_roce_address_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Failure syndrome (0 on success).
        syndrome: u32 @ 0x20 [0x20],
    }
}

layout! {
    /// QUERY_ROCE_ADDRESS input.
    pub struct QueryRoceAddressIn("query_roce_address_in", 0x10) {
        /// Command opcode: [`Opcode::QueryRoceAddress`](crate::cmd::Opcode::QueryRoceAddress).
        opcode: u16 @ 0x00 [0x10],
        /// Opcode modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// Table index.
        roce_address_index: u16 @ 0x40 [0x10],
        /// Port number (1-based; 0 on a device with one vHCA port).
        vhca_port_num: u8 @ 0x5c [0x4],
    }
}

layout! {
    /// QUERY_ROCE_ADDRESS output.
    pub struct QueryRoceAddressOut("query_roce_address_out", 0x30) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Failure syndrome (0 on success).
        syndrome: u32 @ 0x20 [0x20],
    }
    nested {
        /// The entry (all zero when unset).
        roce_address: RoceAddrLayout @ 0x80,
    }
}
