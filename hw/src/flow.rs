//! Flow steering: match criteria and values, flow tables, flow groups, flow table entries and
//! their destinations, and the commands that create, fill, root and destroy them.
//!
//! A flow table of a given type (NIC receive, NIC transmit, ...) holds flow groups; each group
//! owns a range of entry indices and a mask ([`FteMatchParam`] under `match_criteria_enable`)
//! that every entry of the group matches on. An entry (FTE, [`FlowContext`]) carries the values
//! to match and an action: allow, drop, or forward to a list of destinations
//! ([`DestFormatStruct`], 64 bits each, appended to the context).

use crate::layout;
use crate::layout::LayoutError;

/// Flow table type: NIC receive (`FS_FT_NIC_RX`; Linux `MLX5_FLOW_TABLE_TYPE_NIC_RCV`).
pub const FLOW_TABLE_TYPE_NIC_RX: u8 = 0x0;
/// Flow table type: NIC transmit (`FS_FT_NIC_TX`).
pub const FLOW_TABLE_TYPE_NIC_TX: u8 = 0x1;
/// Flow table type: e-switch egress ACL (`FS_FT_ESW_EGRESS_ACL`).
pub const FLOW_TABLE_TYPE_ESW_EGRESS_ACL: u8 = 0x2;
/// Flow table type: e-switch ingress ACL (`FS_FT_ESW_INGRESS_ACL`).
pub const FLOW_TABLE_TYPE_ESW_INGRESS_ACL: u8 = 0x3;
/// Flow table type: e-switch forwarding database (`FS_FT_FDB`; Linux
/// `MLX5_FLOW_TABLE_TYPE_ESWITCH`).
pub const FLOW_TABLE_TYPE_FDB: u8 = 0x4;
/// Flow table type: receive sniffer (`FS_FT_SNIFFER_RX`).
pub const FLOW_TABLE_TYPE_SNIFFER_RX: u8 = 0x5;
/// Flow table type: transmit sniffer (`FS_FT_SNIFFER_TX`).
pub const FLOW_TABLE_TYPE_SNIFFER_TX: u8 = 0x6;

/// `table_miss_action`: the default miss behaviour (continue to the next level's table, or the
/// table type's default when there is none) (`MLX5_FLOW_TABLE_MISS_ACTION_DEF`).
pub const FLOW_TABLE_MISS_ACTION_DEFAULT: u8 = 0x0;
/// `table_miss_action`: forward misses to the table named in `table_miss_id`
/// (`MLX5_FLOW_TABLE_MISS_ACTION_FWD`).
pub const FLOW_TABLE_MISS_ACTION_FWD: u8 = 0x1;

/// Flow context `action` bit: allow the packet (`MLX5_FLOW_CONTEXT_ACTION_ALLOW`).
pub const FLOW_CONTEXT_ACTION_ALLOW: u16 = 0x1;
/// Flow context `action` bit: drop the packet (`MLX5_FLOW_CONTEXT_ACTION_DROP`).
pub const FLOW_CONTEXT_ACTION_DROP: u16 = 0x2;
/// Flow context `action` bit: forward to the destination list
/// (`MLX5_FLOW_CONTEXT_ACTION_FWD_DEST`).
pub const FLOW_CONTEXT_ACTION_FWD_DEST: u16 = 0x4;
/// Flow context `action` bit: count in the flow counters of the list
/// (`MLX5_FLOW_CONTEXT_ACTION_COUNT`).
pub const FLOW_CONTEXT_ACTION_COUNT: u16 = 0x8;
/// Flow context `action` bit: encapsulate with `encap_id` (`MLX5_FLOW_CONTEXT_ACTION_ENCAP`).
pub const FLOW_CONTEXT_ACTION_ENCAP: u16 = 0x10;
/// Flow context `action` bit: decapsulate (`MLX5_FLOW_CONTEXT_ACTION_DECAP`).
pub const FLOW_CONTEXT_ACTION_DECAP: u16 = 0x20;
/// Flow context `action` bit: apply header modification `modify_header_id`
/// (`MLX5_FLOW_CONTEXT_ACTION_MOD_HDR`).
pub const FLOW_CONTEXT_ACTION_MOD_HDR: u16 = 0x40;
/// Flow context `action` bit: pop the outer VLAN (`MLX5_FLOW_CONTEXT_ACTION_POP_VLAN`).
pub const FLOW_CONTEXT_ACTION_POP_VLAN: u16 = 0x80;
/// Flow context `action` bit: push a VLAN from `tpid`/`vlan_*`
/// (`MLX5_FLOW_CONTEXT_ACTION_PUSH_VLAN`).
pub const FLOW_CONTEXT_ACTION_PUSH_VLAN: u16 = 0x100;

/// Destination type: a vport (`MLX5_FLOW_DESTINATION_TYPE_VPORT`).
pub const FLOW_DESTINATION_TYPE_VPORT: u8 = 0x0;
/// Destination type: another flow table (`MLX5_FLOW_DESTINATION_TYPE_FLOW_TABLE`).
pub const FLOW_DESTINATION_TYPE_FLOW_TABLE: u8 = 0x1;
/// Destination type: a TIR (`MLX5_FLOW_DESTINATION_TYPE_TIR`).
pub const FLOW_DESTINATION_TYPE_TIR: u8 = 0x2;
/// Destination list entry type for a flow counter (`MLX5_FLOW_DESTINATION_TYPE_COUNTER`): a
/// driver-side tag, not written to `destination_type` (counters go in the counter list, whose
/// entries are [`FlowCounterList`]).
pub const FLOW_DESTINATION_TYPE_COUNTER: u16 = 0x100;

/// `match_criteria_enable` bit: match on the outer headers (`MLX5_MATCH_OUTER_HEADERS`).
pub const MATCH_OUTER_HEADERS: u8 = 1 << 0;
/// `match_criteria_enable` bit: match on the misc parameters (`MLX5_MATCH_MISC_PARAMETERS`).
pub const MATCH_MISC_PARAMETERS: u8 = 1 << 1;
/// `match_criteria_enable` bit: match on the inner headers (`MLX5_MATCH_INNER_HEADERS`).
pub const MATCH_INNER_HEADERS: u8 = 1 << 2;
/// `match_criteria_enable` bit: match on the second misc parameters, the metadata registers
/// among them (`MLX5_MATCH_MISC_PARAMETERS_2`).
pub const MATCH_MISC_PARAMETERS_2: u8 = 1 << 3;
/// `match_criteria_enable` bit: match on the third set of miscellaneous parameters
/// (`MLX5_MATCH_MISC_PARAMETERS_3`: TCP sequence and acknowledgement numbers, ICMP, and the
/// flex parser's VXLAN-GPE, GENEVE option and GTP-U fields).
pub const MATCH_MISC_PARAMETERS_3: u8 = 1 << 4;

/// `set_fte_in.modify_enable_mask` bit: update the action. The header's
/// `MLX5_SET_FTE_MODIFY_ENABLE_MASK_*` values (0..=3) are bit positions; these are the masks.
pub const SET_FTE_MODIFY_ACTION: u8 = 1 << 0;
/// `modify_enable_mask` bit: update the flow tag.
pub const SET_FTE_MODIFY_FLOW_TAG: u8 = 1 << 1;
/// `modify_enable_mask` bit: update the destination list.
pub const SET_FTE_MODIFY_DESTINATION_LIST: u8 = 1 << 2;
/// `modify_enable_mask` bit: update the flow counter list.
pub const SET_FTE_MODIFY_FLOW_COUNTERS: u8 = 1 << 3;

/// Size in bytes of one destination list entry ([`DestFormatStruct`]).
pub const DEST_FORMAT_SIZE: usize = 8;

/// A destination list entry as the 64-bit big-endian value [`FlowContext::set_destination`]
/// takes: `destination_type` in bits 63:56, `destination_id` (24 bits) in bits 55:32.
pub const fn dest_format_entry(destination_type: u8, destination_id: u32) -> u64 {
    ((destination_type as u64) << 56) | (((destination_id & 0x00ff_ffff) as u64) << 32)
}

layout! {
    /// An IPv4 address in the 128-bit address slot of a match set: the last dword.
    pub struct Ipv4Layout("ipv4_layout", 0x10) {
        /// IPv4 address, in network order as a big-endian dword.
        ipv4: u32 @ 0x60 [0x20],
    }
}

layout! {
    /// An IPv6 address in the 128-bit address slot of a match set: 16 bytes in network order.
    pub struct Ipv6Layout("ipv6_layout", 0x10) {}
    arrays {
        /// Byte `index` (0..16) of the IPv6 address, in network order.
        ipv6: u8 @ 0x0 [0x8],
    }
}

impl<T: AsRef<[u8]>> Ipv6Layout<T> {
    /// The 16 address bytes in network order.
    pub fn addr(&self) -> [u8; 16] {
        let mut out = [0u8; 16];
        out.copy_from_slice(&self.buf.as_ref()[..16]);
        out
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Layout<T> {
    /// Writes the 16 address bytes in network order.
    pub fn set_addr(&mut self, addr: [u8; 16]) -> &mut Self {
        self.buf.as_mut()[..16].copy_from_slice(&addr);
        self
    }
}

layout! {
    /// The 128-bit source or destination address slot of a match set, read as IPv6 or IPv4 (a
    /// union in the header: both views cover the same 16 bytes).
    pub struct Ipv6LayoutIpv4LayoutAuto("ipv6_layout_ipv4_layout_auto", 0x10) {}
    nested {
        /// The slot as an IPv6 address.
        ipv6_layout: Ipv6Layout @ 0x0,
        /// The slot as an IPv4 address (in its last dword).
        ipv4_layout: Ipv4Layout @ 0x0,
    }
}

layout! {
    /// Layer 2 to 4 header fields of a match set (outer or inner headers): as mask in a flow
    /// group's criteria, as value in a flow table entry.
    pub struct FteMatchSetLyr24("fte_match_set_lyr_2_4", 0x40) {
        /// Source MAC address bits 47:16.
        smac_47_16: u32 @ 0x0 [0x20],
        /// Source MAC address bits 15:0.
        smac_15_0: u16 @ 0x20 [0x10],
        /// Ethertype of the (innermost VLAN's) payload.
        ethertype: u16 @ 0x30 [0x10],
        /// Destination MAC address bits 47:16.
        dmac_47_16: u32 @ 0x40 [0x20],
        /// Destination MAC address bits 15:0.
        dmac_15_0: u16 @ 0x60 [0x10],
        /// Priority (PCP) of the first VLAN tag.
        first_prio: u8 @ 0x70 [0x3],
        /// CFI/DEI bit of the first VLAN tag.
        first_cfi: bool @ 0x73 [0x1],
        /// VLAN id of the first VLAN tag.
        first_vid: u16 @ 0x74 [0xc],
        /// IP protocol (next header) number.
        ip_protocol: u8 @ 0x80 [0x8],
        /// IP DSCP.
        ip_dscp: u8 @ 0x88 [0x6],
        /// IP ECN.
        ip_ecn: u8 @ 0x8e [0x2],
        /// The packet carries a customer VLAN (0x8100) tag.
        cvlan_tag: bool @ 0x90 [0x1],
        /// The packet carries a service VLAN (0x88a8) tag.
        svlan_tag: bool @ 0x91 [0x1],
        /// The packet is an IP fragment.
        frag: bool @ 0x92 [0x1],
        /// IP version (4 or 6).
        ip_version: u8 @ 0x93 [0x4],
        /// TCP flags.
        tcp_flags: u16 @ 0x97 [0x9],
        /// TCP source port.
        tcp_sport: u16 @ 0xa0 [0x10],
        /// TCP destination port.
        tcp_dport: u16 @ 0xb0 [0x10],
        /// L4 header kind: 0 none, 1 TCP, 2 UDP (`MLX5_PACKET_L4_TYPE_*`).
        l4_type: u8 @ 0xc0 [0x2],
        /// IPv4 header length in 4-byte words (5..=15); 0 for other packets.
        ipv4_ihl: u8 @ 0xd0 [0x4],
        /// Integrity bits (DPDK's `mlx5_prm.h`; reserved in Linux's `mlx5_ifc.h`), offered by
        /// `ft_field_support_2`: the L3 header is good.
        l3_ok: bool @ 0xd4 [0x1],
        /// The L4 header is good.
        l4_ok: bool @ 0xd5 [0x1],
        /// The IPv4 header checksum is right.
        ipv4_checksum_ok: bool @ 0xd6 [0x1],
        /// The TCP or UDP checksum is right.
        l4_checksum_ok: bool @ 0xd7 [0x1],
        /// IPv4 TTL or IPv6 hop limit.
        ttl_hoplimit: u8 @ 0xd8 [0x8],
        /// UDP source port.
        udp_sport: u16 @ 0xe0 [0x10],
        /// UDP destination port.
        udp_dport: u16 @ 0xf0 [0x10],
    }
    nested {
        /// Source IP address (IPv4 in the last dword, or IPv6).
        src_ipv4_src_ipv6: Ipv6LayoutIpv4LayoutAuto @ 0x100,
        /// Destination IP address (IPv4 in the last dword, or IPv6).
        dst_ipv4_dst_ipv6: Ipv6LayoutIpv4LayoutAuto @ 0x180,
    }
}

impl<T: AsRef<[u8]>> FteMatchSetLyr24<T> {
    /// The source MAC address (48 bits, most significant byte first on the wire).
    pub fn smac(&self) -> u64 {
        (u64::from(self.smac_47_16()) << 16) | u64::from(self.smac_15_0())
    }

    /// The destination MAC address (48 bits).
    pub fn dmac(&self) -> u64 {
        (u64::from(self.dmac_47_16()) << 16) | u64::from(self.dmac_15_0())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> FteMatchSetLyr24<T> {
    /// Sets the source MAC address from its 48 low bits.
    pub fn set_smac(&mut self, mac: u64) -> &mut Self {
        self.set_smac_47_16((mac >> 16) as u32)
            .set_smac_15_0(mac as u16)
    }

    /// Sets the destination MAC address from its 48 low bits.
    pub fn set_dmac(&mut self, mac: u64) -> &mut Self {
        self.set_dmac_47_16((mac >> 16) as u32)
            .set_dmac_15_0(mac as u16)
    }
}

layout! {
    /// Miscellaneous match parameters: source vport and SQ, second VLAN tags, tunnel keys and
    /// ids, IPv6 flow labels, BTH destination QP, ESP SPIs.
    pub struct FteMatchSetMisc("fte_match_set_misc", 0x40) {
        /// The GRE header has its checksum word (C flag).
        gre_c_present: bool @ 0x0 [0x1],
        /// The GRE header has its key word (K flag).
        gre_k_present: bool @ 0x2 [0x1],
        /// The GRE header has its sequence number word (S flag).
        gre_s_present: bool @ 0x3 [0x1],
        /// Send queue the packet was sent from (loopback / e-switch).
        source_sqn: u32 @ 0x8 [0x18],
        /// Vport the packet came from (e-switch tables).
        source_port: u16 @ 0x30 [0x10],
        /// Priority of the outer headers' second VLAN tag.
        outer_second_prio: u8 @ 0x40 [0x3],
        /// CFI of the outer headers' second VLAN tag.
        outer_second_cfi: bool @ 0x43 [0x1],
        /// VLAN id of the outer headers' second VLAN tag.
        outer_second_vid: u16 @ 0x44 [0xc],
        /// Priority of the inner headers' second VLAN tag.
        inner_second_prio: u8 @ 0x50 [0x3],
        /// CFI of the inner headers' second VLAN tag.
        inner_second_cfi: bool @ 0x53 [0x1],
        /// VLAN id of the inner headers' second VLAN tag.
        inner_second_vid: u16 @ 0x54 [0xc],
        /// The outer headers' second VLAN tag is a customer tag.
        outer_second_cvlan_tag: bool @ 0x60 [0x1],
        /// The inner headers' second VLAN tag is a customer tag.
        inner_second_cvlan_tag: bool @ 0x61 [0x1],
        /// The outer headers' second VLAN tag is a service tag.
        outer_second_svlan_tag: bool @ 0x62 [0x1],
        /// The inner headers' second VLAN tag is a service tag.
        inner_second_svlan_tag: bool @ 0x63 [0x1],
        /// The outer headers carry an EMD tag.
        outer_emd_tag: bool @ 0x64 [0x1],
        /// GRE protocol field.
        gre_protocol: u16 @ 0x70 [0x10],
        /// GRE key bits 31:8.
        gre_key_h: u32 @ 0x80 [0x18],
        /// GRE key bits 7:0.
        gre_key_l: u8 @ 0x98 [0x8],
        /// VXLAN network identifier.
        vxlan_vni: u32 @ 0xa0 [0x18],
        /// GENEVE virtual network identifier.
        geneve_vni: u32 @ 0xc0 [0x18],
        /// GENEVE's O flag (an OAM frame).
        geneve_oam: bool @ 0xdf [0x1],
        /// Flow label of the outer IPv6 header.
        outer_ipv6_flow_label: u32 @ 0xec [0x14],
        /// Flow label of the inner IPv6 header.
        inner_ipv6_flow_label: u32 @ 0x10c [0x14],
        /// GENEVE's option length, in 4-byte words.
        geneve_opt_len: u8 @ 0x12a [0x6],
        /// GENEVE's protocol type (the inner frame's ethertype).
        geneve_protocol_type: u16 @ 0x130 [0x10],
        /// Destination QP of the InfiniBand BTH (RoCE).
        bth_dst_qp: u32 @ 0x148 [0x18],
        /// SPI of the inner ESP header.
        inner_esp_spi: u32 @ 0x160 [0x20],
        /// SPI of the outer ESP header.
        outer_esp_spi: u32 @ 0x180 [0x20],
    }
    arrays {
        /// Byte `index` of the outer EMD tag data (6 bytes, `index` 0..6; the array accessor
        /// reaches two reserved bytes past them).
        outer_emd_tag_data: u8 @ 0x1c0 [0x8],
    }
}

layout! {
    /// The second set of miscellaneous match parameters (`fte_match_set_misc2`): the first
    /// MPLS label stack entries and the metadata registers a packet carries through steering,
    /// which modify-header actions set and copy.
    pub struct FteMatchSetMisc2("fte_match_set_misc2", 0x40) {
        /// The outer frame's first MPLS label stack entry (`outer_first_mpls`: label 20 bits,
        /// exp 3, bottom of stack 1, TTL 8, as on the wire).
        outer_first_mpls: u32 @ 0x0 [0x20],
        /// The first MPLS entry of the frame an L2 tunnel carries (`inner_first_mpls`).
        inner_first_mpls: u32 @ 0x20 [0x20],
        /// The first MPLS entry after a GRE header (`outer_first_mpls_over_gre`; a ConnectX
        /// reads it with its flex parser).
        outer_first_mpls_over_gre: u32 @ 0x40 [0x20],
        /// The first MPLS entry after a UDP header (`outer_first_mpls_over_udp`; flex parser).
        outer_first_mpls_over_udp: u32 @ 0x60 [0x20],
        /// Metadata register C7.
        metadata_reg_c_7: u32 @ 0x80 [0x20],
        /// Metadata register C6.
        metadata_reg_c_6: u32 @ 0xa0 [0x20],
        /// Metadata register C5.
        metadata_reg_c_5: u32 @ 0xc0 [0x20],
        /// Metadata register C4.
        metadata_reg_c_4: u32 @ 0xe0 [0x20],
        /// Metadata register C3.
        metadata_reg_c_3: u32 @ 0x100 [0x20],
        /// Metadata register C2.
        metadata_reg_c_2: u32 @ 0x120 [0x20],
        /// Metadata register C1.
        metadata_reg_c_1: u32 @ 0x140 [0x20],
        /// Metadata register C0.
        metadata_reg_c_0: u32 @ 0x160 [0x20],
        /// Metadata register A.
        metadata_reg_a: u32 @ 0x180 [0x20],
    }
}

layout! {
    /// The third set of miscellaneous match parameters (`fte_match_set_misc3`): TCP sequence
    /// and acknowledgement numbers, the VXLAN-GPE header, ICMP fields, the GENEVE option data
    /// a flex parser samples, and the GTP-U header and the dwords flex parsers sample of it.
    pub struct FteMatchSetMisc3("fte_match_set_misc3", 0x40) {
        /// The tunnelled packet's TCP sequence number.
        inner_tcp_seq_num: u32 @ 0x0 [0x20],
        /// The outer TCP sequence number.
        outer_tcp_seq_num: u32 @ 0x20 [0x20],
        /// The tunnelled packet's TCP acknowledgement number.
        inner_tcp_ack_num: u32 @ 0x40 [0x20],
        /// The outer TCP acknowledgement number.
        outer_tcp_ack_num: u32 @ 0x60 [0x20],
        /// The outer VXLAN-GPE header's VNI (its bytes 4..7).
        outer_vxlan_gpe_vni: u32 @ 0x88 [0x18],
        /// The outer VXLAN-GPE header's next protocol (byte 3: 1 IPv4, 2 IPv6, 3 Ethernet).
        outer_vxlan_gpe_next_protocol: u8 @ 0xa0 [0x8],
        /// The outer VXLAN-GPE header's flags (byte 0: version, I, P, B and O bits).
        outer_vxlan_gpe_flags: u8 @ 0xa8 [0x8],
        /// ICMPv4 header bytes 4..8 (`icmp_header_data`: an echo's identifier and sequence).
        icmp_header_data: u32 @ 0xc0 [0x20],
        /// ICMPv6 header bytes 4..8.
        icmpv6_header_data: u32 @ 0xe0 [0x20],
        /// ICMPv4 type.
        icmp_type: u8 @ 0x100 [0x8],
        /// ICMPv4 code.
        icmp_code: u8 @ 0x108 [0x8],
        /// ICMPv6 type.
        icmpv6_type: u8 @ 0x110 [0x8],
        /// ICMPv6 code.
        icmpv6_code: u8 @ 0x118 [0x8],
        /// The GTP-U header's TEID (its bytes 4..8).
        gtpu_teid: u32 @ 0x140 [0x20],
        /// The GTP-U header's message type (byte 1; 0xff a G-PDU).
        gtpu_msg_type: u8 @ 0x160 [0x8],
        /// The GTP-U header's flags (byte 0: version, PT, E, S and PN).
        gtpu_msg_flags: u8 @ 0x168 [0x8],
        /// GTP-U's third dword (sequence number, N-PDU number, next extension type), 0 when
        /// none of E, S and PN is set.
        gtpu_dw_2: u32 @ 0x180 [0x20],
        /// The first dword of GTP-U's first extension header (a PDU session container's
        /// length, PDU type and QFI), 0 without one.
        gtpu_first_ext_dw_0: u32 @ 0x1a0 [0x20],
        /// GTP-U's first dword (flags, message type, length).
        gtpu_dw_0: u32 @ 0x1c0 [0x20],
    }
}

layout! {
    /// A complete match: outer headers, misc parameters, inner headers, the second and third
    /// misc sets (the header reserves 0xc0 bytes after them for later match sets).
    pub struct FteMatchParam("fte_match_param", 0x200) {}
    nested {
        /// Outer (or only) L2-L4 headers; enabled by [`MATCH_OUTER_HEADERS`].
        outer_headers: FteMatchSetLyr24 @ 0x0,
        /// Miscellaneous parameters; enabled by [`MATCH_MISC_PARAMETERS`].
        misc_parameters: FteMatchSetMisc @ 0x200,
        /// Inner (tunnelled) L2-L4 headers; enabled by [`MATCH_INNER_HEADERS`].
        inner_headers: FteMatchSetLyr24 @ 0x400,
        /// Metadata registers and MPLS labels; enabled by [`MATCH_MISC_PARAMETERS_2`].
        misc_parameters_2: FteMatchSetMisc2 @ 0x600,
        /// TCP sequence numbers, VXLAN-GPE, ICMP; enabled by [`MATCH_MISC_PARAMETERS_3`].
        misc_parameters_3: FteMatchSetMisc3 @ 0x800,
    }
}

layout! {
    /// Flow table context, given at CREATE_FLOW_TABLE.
    pub struct FlowTableContext("flow_table_context", 0x28) {
        /// Encapsulation allowed in this table (FDB only).
        encap_en: bool @ 0x0 [0x1],
        /// Decapsulation allowed in this table (FDB only).
        decap_en: bool @ 0x1 [0x1],
        /// The table's entries are written by software into ICM (software steering): the
        /// device walks them from `sw_owner_icm_root_0` (rdma-core's
        /// `dr_devx_create_flow_table`).
        sw_owner: bool @ 0x2 [0x1],
        /// A termination table: its entries end the packet's walk (e-switch tables forwarding
        /// to vports; rdma-core sets it on a flow sampler's sample table,
        /// `dr_action_create_sampler_term_tbl`).
        termination_table: bool @ 0x3 [0x1],
        /// What a miss does: [`FLOW_TABLE_MISS_ACTION_DEFAULT`] or [`FLOW_TABLE_MISS_ACTION_FWD`].
        table_miss_action: u8 @ 0x4 [0x4],
        /// Level of the table; a table may forward only to tables of a higher level.
        level: u8 @ 0x8 [0x8],
        /// Log2 of the number of entries.
        log_size: u8 @ 0x18 [0x8],
        /// Table that misses go to when `table_miss_action` is [`FLOW_TABLE_MISS_ACTION_FWD`].
        table_miss_id: u32 @ 0x28 [0x18],
        /// Next table of the LAG master (LAG demux tables).
        lag_master_next_table_id: u32 @ 0x48 [0x18],
        /// ICM address of a software-owned FDB table's transmit root entry.
        sw_owner_icm_root_1: u64 @ 0xc0 [0x40],
        /// ICM address of a software-owned table's first steering entry (the receive root in
        /// FDB tables).
        sw_owner_icm_root_0: u64 @ 0x100 [0x40],
    }
}

layout! {
    /// CREATE_FLOW_TABLE input.
    pub struct CreateFlowTableIn("create_flow_table_in", 0x40) {
        /// Command opcode: [`Opcode::CreateFlowTable`](crate::cmd::Opcode::CreateFlowTable).
        opcode: u16 @ 0x0 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// Act on the vport in `vport_number` rather than the caller's own (e-switch manager).
        other_vport: bool @ 0x40 [0x1],
        /// Vport acted on when `other_vport` is set.
        vport_number: u16 @ 0x50 [0x10],
        /// Table type: `FLOW_TABLE_TYPE_*`.
        table_type: u8 @ 0x80 [0x8],
    }
    nested {
        /// The new table's context.
        flow_table_context: FlowTableContext @ 0xc0,
    }
}

layout! {
    /// CREATE_FLOW_TABLE output.
    pub struct CreateFlowTableOut("create_flow_table_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x0 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
        /// Id of the new flow table.
        table_id: u32 @ 0x48 [0x18],
    }
}

layout! {
    /// QUERY_FLOW_TABLE input (the same fields as DESTROY_FLOW_TABLE's).
    pub struct QueryFlowTableIn("query_flow_table_in", 0x40) {
        /// Command opcode: [`Opcode::QueryFlowTable`](crate::cmd::Opcode::QueryFlowTable).
        opcode: u16 @ 0x0 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// Act on the vport in `vport_number` rather than the caller's own.
        other_vport: bool @ 0x40 [0x1],
        /// Vport acted on when `other_vport` is set.
        vport_number: u16 @ 0x50 [0x10],
        /// Type of the table: `FLOW_TABLE_TYPE_*`.
        table_type: u8 @ 0x80 [0x8],
        /// The table to query.
        table_id: u32 @ 0xa8 [0x18],
    }
}

layout! {
    /// QUERY_FLOW_TABLE output: the table's context, whose `sw_owner_icm_root_0` names where a
    /// software steering entry goes on into the table (rdma-core's `dr_devx_query_flow_table`,
    /// for firmware tables too).
    pub struct QueryFlowTableOut("query_flow_table_out", 0x40) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x0 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
    }
    nested {
        /// The table's context.
        flow_table_context: FlowTableContext @ 0xc0,
    }
}

layout! {
    /// DESTROY_FLOW_TABLE input.
    pub struct DestroyFlowTableIn("destroy_flow_table_in", 0x40) {
        /// Command opcode: [`Opcode::DestroyFlowTable`](crate::cmd::Opcode::DestroyFlowTable).
        opcode: u16 @ 0x0 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// Act on the vport in `vport_number` rather than the caller's own.
        other_vport: bool @ 0x40 [0x1],
        /// Vport acted on when `other_vport` is set.
        vport_number: u16 @ 0x50 [0x10],
        /// Type of the table: `FLOW_TABLE_TYPE_*`.
        table_type: u8 @ 0x80 [0x8],
        /// The table to destroy.
        table_id: u32 @ 0xa8 [0x18],
    }
}

layout! {
    /// CREATE_FLOW_GROUP input: the group's entry range and the mask its entries match under.
    pub struct CreateFlowGroupIn("create_flow_group_in", 0x400) {
        /// Command opcode: [`Opcode::CreateFlowGroup`](crate::cmd::Opcode::CreateFlowGroup).
        opcode: u16 @ 0x0 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// Act on the vport in `vport_number` rather than the caller's own.
        other_vport: bool @ 0x40 [0x1],
        /// Vport acted on when `other_vport` is set.
        vport_number: u16 @ 0x50 [0x10],
        /// Type of the table: `FLOW_TABLE_TYPE_*`.
        table_type: u8 @ 0x80 [0x8],
        /// The table the group is created in.
        table_id: u32 @ 0xa8 [0x18],
        /// First entry index owned by the group.
        start_flow_index: u32 @ 0xe0 [0x20],
        /// Last entry index owned by the group (inclusive).
        end_flow_index: u32 @ 0x120 [0x20],
        /// Which parts of `match_criteria` apply: `MATCH_*` bits.
        match_criteria_enable: u8 @ 0x1f8 [0x8],
    }
    nested {
        /// The mask: bits set here are compared against each entry's `match_value`.
        match_criteria: FteMatchParam @ 0x200,
    }
}

layout! {
    /// CREATE_FLOW_GROUP output.
    pub struct CreateFlowGroupOut("create_flow_group_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x0 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
        /// Id of the new flow group.
        group_id: u32 @ 0x48 [0x18],
    }
}

layout! {
    /// DESTROY_FLOW_GROUP input.
    pub struct DestroyFlowGroupIn("destroy_flow_group_in", 0x40) {
        /// Command opcode: [`Opcode::DestroyFlowGroup`](crate::cmd::Opcode::DestroyFlowGroup).
        opcode: u16 @ 0x0 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// Act on the vport in `vport_number` rather than the caller's own.
        other_vport: bool @ 0x40 [0x1],
        /// Vport acted on when `other_vport` is set.
        vport_number: u16 @ 0x50 [0x10],
        /// Type of the table: `FLOW_TABLE_TYPE_*`.
        table_type: u8 @ 0x80 [0x8],
        /// The table holding the group.
        table_id: u32 @ 0xa8 [0x18],
        /// The group to destroy.
        group_id: u32 @ 0xc0 [0x20],
    }
}

layout! {
    /// One destination of a flow table entry's forward action.
    pub struct DestFormatStruct("dest_format_struct", 0x8) {
        /// Destination type: `FLOW_DESTINATION_TYPE_*`.
        destination_type: u8 @ 0x0 [0x8],
        /// Vport number, flow table id, TIR number or QP number, per `destination_type`.
        destination_id: u32 @ 0x8 [0x18],
    }
}

layout! {
    /// One entry of a flow table entry's counter list.
    pub struct FlowCounterList("flow_counter_list", 0x8) {
        /// Flow counter id (from ALLOC_FLOW_COUNTER).
        flow_counter_id: u32 @ 0x0 [0x20],
    }
}

layout! {
    /// One 64-bit slot of the list after a flow context: a destination (the first
    /// `destination_list_size` slots) or a flow counter (the next `flow_counter_list_size`).
    pub struct DestFormatStructFlowCounterListAuto("dest_format_struct_flow_counter_list_auto", 0x8) {}
    nested {
        /// The slot as a destination.
        dest_format_struct: DestFormatStruct @ 0x0,
        /// The slot as a flow counter.
        flow_counter_list: FlowCounterList @ 0x0,
    }
}

layout! {
    /// Flow table entry context: the values to match and what to do with a matching packet.
    /// The destination and counter lists follow it, 64 bits per entry.
    pub struct FlowContext("flow_context", 0x300) {
        /// VLAN TPID pushed by [`FLOW_CONTEXT_ACTION_PUSH_VLAN`].
        tpid: u16 @ 0x0 [0x10],
        /// VLAN priority pushed by [`FLOW_CONTEXT_ACTION_PUSH_VLAN`].
        vlan_pcp: u8 @ 0x10 [0x3],
        /// VLAN DEI pushed by [`FLOW_CONTEXT_ACTION_PUSH_VLAN`].
        vlan_dei: bool @ 0x13 [0x1],
        /// VLAN id pushed by [`FLOW_CONTEXT_ACTION_PUSH_VLAN`].
        vlan_id: u16 @ 0x14 [0xc],
        /// The flow group the entry belongs to.
        group_id: u32 @ 0x20 [0x20],
        /// Tag reported in the CQE of packets matching this entry.
        flow_tag: u32 @ 0x48 [0x18],
        /// What to do with a match: `FLOW_CONTEXT_ACTION_*` bits.
        action: u16 @ 0x70 [0x10],
        /// Number of destinations in the list after the context.
        destination_list_size: u32 @ 0x88 [0x18],
        /// Number of flow counters in the list, after the destinations.
        flow_counter_list_size: u32 @ 0xa8 [0x18],
        /// Encapsulation header id for [`FLOW_CONTEXT_ACTION_ENCAP`].
        encap_id: u32 @ 0xc0 [0x20],
        /// Header modification id for [`FLOW_CONTEXT_ACTION_MOD_HDR`].
        modify_header_id: u32 @ 0xe0 [0x20],
    }
    nested {
        /// The values matched, under the group's criteria.
        match_value: FteMatchParam @ 0x200,
    }
    arrays {
        /// Entry `index` of the destination (then counter) list, as a 64-bit big-endian value:
        /// see [`dest_format_entry`] and [`DestFormatStruct`].
        destination: u64 @ 0x1800 [0x40],
    }
}

layout! {
    /// SET_FLOW_TABLE_ENTRY input: the entry index and its context (followed by its lists).
    pub struct SetFteIn("set_fte_in", 0x340) {
        /// Command opcode: [`Opcode::SetFlowTableEntry`](crate::cmd::Opcode::SetFlowTableEntry).
        opcode: u16 @ 0x0 [0x10],
        /// Operation modifier: 0 to create the entry, 1 to modify an existing one.
        op_mod: u16 @ 0x30 [0x10],
        /// Act on the vport in `vport_number` rather than the caller's own.
        other_vport: bool @ 0x40 [0x1],
        /// Vport acted on when `other_vport` is set.
        vport_number: u16 @ 0x50 [0x10],
        /// Type of the table: `FLOW_TABLE_TYPE_*`.
        table_type: u8 @ 0x80 [0x8],
        /// The table holding the entry.
        table_id: u32 @ 0xa8 [0x18],
        /// On modify (`op_mod` 1): which parts to change, `SET_FTE_MODIFY_*` bits.
        modify_enable_mask: u8 @ 0xd8 [0x8],
        /// Index of the entry, within its group's range.
        flow_index: u32 @ 0x100 [0x20],
    }
    nested {
        /// The entry's context (fixed part; see [`SetFteIn::flow_context_all`] for the lists).
        flow_context: FlowContext @ 0x200,
    }
}

/// Byte offset of `flow_context` in [`SetFteIn`].
const SET_FTE_FLOW_CONTEXT: usize = 0x200 / 8;

impl<T: AsRef<[u8]>> SetFteIn<T> {
    /// The flow context with everything after it in the buffer, so that its destination list
    /// ([`FlowContext::destination`]) is reachable.
    pub fn flow_context_all(&self) -> FlowContext<&[u8]> {
        FlowContext {
            buf: &self.buf.as_ref()[SET_FTE_FLOW_CONTEXT..],
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> SetFteIn<T> {
    /// Writable [`SetFteIn::flow_context_all`].
    pub fn flow_context_all_mut(&mut self) -> FlowContext<&mut [u8]> {
        FlowContext {
            buf: &mut self.buf.as_mut()[SET_FTE_FLOW_CONTEXT..],
        }
    }
}

layout! {
    /// DELETE_FLOW_TABLE_ENTRY input.
    pub struct DeleteFteIn("delete_fte_in", 0x40) {
        /// Command opcode:
        /// [`Opcode::DeleteFlowTableEntry`](crate::cmd::Opcode::DeleteFlowTableEntry).
        opcode: u16 @ 0x0 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// Act on the vport in `vport_number` rather than the caller's own.
        other_vport: bool @ 0x40 [0x1],
        /// Vport acted on when `other_vport` is set.
        vport_number: u16 @ 0x50 [0x10],
        /// Type of the table: `FLOW_TABLE_TYPE_*`.
        table_type: u8 @ 0x80 [0x8],
        /// The table holding the entry.
        table_id: u32 @ 0xa8 [0x18],
        /// Index of the entry to delete.
        flow_index: u32 @ 0x100 [0x20],
    }
}

layout! {
    /// SET_FLOW_TABLE_ROOT input: makes a table the root (first looked up) of its type.
    pub struct SetFlowTableRootIn("set_flow_table_root_in", 0x40) {
        /// Command opcode: [`Opcode::SetFlowTableRoot`](crate::cmd::Opcode::SetFlowTableRoot).
        opcode: u16 @ 0x0 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// Act on the vport in `vport_number` rather than the caller's own.
        other_vport: bool @ 0x40 [0x1],
        /// Vport acted on when `other_vport` is set.
        vport_number: u16 @ 0x50 [0x10],
        /// Type of the table: `FLOW_TABLE_TYPE_*`.
        table_type: u8 @ 0x80 [0x8],
        /// The new root table.
        table_id: u32 @ 0xa8 [0x18],
        /// Underlay QP whose traffic the root applies to (IPoIB enhanced mode), 0 otherwise.
        underlay_qpn: u32 @ 0xc8 [0x18],
    }
}

/// `modify_flow_table_in.modify_field_select` bit: change the table's miss action and miss
/// table (`MLX5_MODIFY_FLOW_TABLE_MISS_TABLE_ID`).
pub const MODIFY_FLOW_TABLE_MISS_TABLE_ID: u16 = 1 << 0;
/// `modify_field_select` bit: change a LAG demux table's `lag_master_next_table_id`
/// (`MLX5_MODIFY_FLOW_TABLE_LAG_NEXT_TABLE_ID`).
pub const MODIFY_FLOW_TABLE_LAG_NEXT_TABLE_ID: u16 = 1 << 15;

layout! {
    /// MODIFY_FLOW_TABLE input: changes the context fields `modify_field_select` names of an
    /// existing table (Linux's fs_core re-points a table's miss at the next priority's first
    /// table when a table is created in front of it or destroyed).
    pub struct ModifyFlowTableIn("modify_flow_table_in", 0x40) {
        /// Command opcode: [`Opcode::ModifyFlowTable`](crate::cmd::Opcode::ModifyFlowTable).
        opcode: u16 @ 0x0 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// Act on the vport in `vport_number` rather than the caller's own.
        other_vport: bool @ 0x40 [0x1],
        /// Vport acted on when `other_vport` is set.
        vport_number: u16 @ 0x50 [0x10],
        /// Which fields to change: `MODIFY_FLOW_TABLE_*` bits.
        modify_field_select: u16 @ 0x70 [0x10],
        /// Type of the table: `FLOW_TABLE_TYPE_*`.
        table_type: u8 @ 0x80 [0x8],
        /// The table changed.
        table_id: u32 @ 0xa8 [0x18],
    }
    nested {
        /// The new values of the selected fields.
        flow_table_context: FlowTableContext @ 0xc0,
    }
}

impl<T: AsRef<[u8]>> FlowContext<T> {
    /// Destination list entry `index` viewed as a [`DestFormatStruct`]; fails past the end of
    /// the buffer.
    pub fn destination_entry(&self, index: usize) -> Result<DestFormatStruct<&[u8]>, LayoutError> {
        let buf = self.buf.as_ref();
        let start = 0x1800 / 8 + index * DEST_FORMAT_SIZE;
        if start + DEST_FORMAT_SIZE > buf.len() {
            return Err(LayoutError::IndexOutOfRange {
                layout: "flow_context",
                field: "destination",
                index,
                len: buf.len(),
            });
        }
        Ok(DestFormatStruct {
            buf: &buf[start..start + DEST_FORMAT_SIZE],
        })
    }
}

layout! {
    /// ALLOC_FLOW_COUNTER input: one counter, or a bulk of them (`flow_counter_bulk`, a
    /// bitmask of 128-counter units, or `flow_counter_bulk_log_size`), as Linux's
    /// `mlx5_cmd_fc_bulk_alloc` and rdma-core's DEVX tests send it.
    pub struct AllocFlowCounterIn("alloc_flow_counter_in", 0x10) {
        /// Command opcode: [`Opcode::AllocFlowCounter`](crate::cmd::Opcode::AllocFlowCounter).
        opcode: u16 @ 0x0 [0x10],
        /// User context id of the issuer (0 = the function itself).
        uid: u16 @ 0x10 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// Log2 of a bulk's size, in counters (0 = see `flow_counter_bulk`).
        flow_counter_bulk_log_size: u8 @ 0x73 [0x5],
        /// Bulk size as a bitmask of 128-counter units (0 = one counter).
        flow_counter_bulk: u8 @ 0x78 [0x8],
    }
}

layout! {
    /// ALLOC_FLOW_COUNTER output.
    pub struct AllocFlowCounterOut("alloc_flow_counter_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x0 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
        /// The counter's id (the first of a bulk).
        flow_counter_id: u32 @ 0x40 [0x20],
    }
}

layout! {
    /// DEALLOC_FLOW_COUNTER input.
    pub struct DeallocFlowCounterIn("dealloc_flow_counter_in", 0x10) {
        /// Command opcode:
        /// [`Opcode::DeallocFlowCounter`](crate::cmd::Opcode::DeallocFlowCounter).
        opcode: u16 @ 0x0 [0x10],
        /// The counter (or the first of the bulk) to release.
        flow_counter_id: u32 @ 0x40 [0x20],
    }
}

layout! {
    /// QUERY_FLOW_COUNTER input: `num_of_counters` counters from `flow_counter_id` (0 reads
    /// one), each written to the output's [`QueryFlowCounterOut`] statistics.
    pub struct QueryFlowCounterIn("query_flow_counter_in", 0x20) {
        /// Command opcode:
        /// [`Opcode::QueryFlowCounter`](crate::cmd::Opcode::QueryFlowCounter).
        opcode: u16 @ 0x0 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// Zero the counters after reading them.
        clear: bool @ 0xc0 [0x1],
        /// How many consecutive counters to read (a bulk query); 0 reads one.
        num_of_counters: u16 @ 0xd0 [0x10],
        /// The first counter read.
        flow_counter_id: u32 @ 0xe0 [0x20],
    }
}

layout! {
    /// QUERY_FLOW_COUNTER output: its statistics follow at byte
    /// [`QUERY_FLOW_COUNTER_STATISTICS_BYTE`], one [`TrafficCounter`](crate::vport::TrafficCounter)
    /// (packets, octets) per counter read.
    pub struct QueryFlowCounterOut("query_flow_counter_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x0 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
    }
}

/// Byte of QUERY_FLOW_COUNTER's output where its `flow_statistics` array starts.
pub const QUERY_FLOW_COUNTER_STATISTICS_BYTE: usize = 0x10;
/// Counters one `flow_counter_bulk` unit allocates (Linux's `MLX5_FC_BULK_SIZE_FACTOR`).
pub const FLOW_COUNTER_BULK_UNIT: u32 = 128;
