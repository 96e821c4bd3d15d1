//! Virtual ports: the NIC vport context (MTU, GUIDs, promiscuous modes, MAC addresses, change
//! events) with QUERY/MODIFY_NIC_VPORT_CONTEXT, QUERY_VPORT_STATE, and the HCA vport's P_Key
//! table (QUERY_HCA_VPORT_PKEY).

use crate::layout;

/// Vport state: down (`MLX5_QUERY_VPORT_STATE_OUT_STATE_DOWN`; admin state
/// `MLX5_ESW_VPORT_ADMIN_STATE_DOWN`).
pub const VPORT_STATE_DOWN: u8 = 0x0;
/// Vport state: up (`MLX5_QUERY_VPORT_STATE_OUT_STATE_UP`; `MLX5_ESW_VPORT_ADMIN_STATE_UP`).
pub const VPORT_STATE_UP: u8 = 0x1;
/// Vport admin state: follow the physical port's state (`MLX5_ESW_VPORT_ADMIN_STATE_AUTO`).
pub const VPORT_STATE_FOLLOW: u8 = 0x2;

/// QUERY_VPORT_STATE `op_mod`: a NIC vport (`MLX5_QUERY_VPORT_STATE_IN_OP_MOD_VNIC_VPORT`).
pub const QUERY_VPORT_STATE_OP_MOD_VNIC_VPORT: u16 = 0x0;
/// QUERY_VPORT_STATE `op_mod`: an e-switch vport (`MLX5_QUERY_VPORT_STATE_IN_OP_MOD_ESW_VPORT`).
pub const QUERY_VPORT_STATE_OP_MOD_ESW_VPORT: u16 = 0x1;

/// `allowed_list_type`: unicast MAC addresses (`MLX5_NVPRT_LIST_TYPE_UC`).
pub const NIC_VPORT_LIST_TYPE_UC: u8 = 0x0;
/// `allowed_list_type`: multicast MAC addresses (`MLX5_NVPRT_LIST_TYPE_MC`).
pub const NIC_VPORT_LIST_TYPE_MC: u8 = 0x1;
/// `allowed_list_type`: VLAN ids (`MLX5_NVPRT_LIST_TYPE_VLAN`).
pub const NIC_VPORT_LIST_TYPE_VLAN: u8 = 0x2;

layout! {
    /// A MAC address in a 64-bit slot: 16 reserved bits, then the 48-bit address.
    pub struct MacAddressLayout("mac_address_layout", 0x8) {
        /// Address bits 47:32 (the first two bytes on the wire).
        mac_addr_47_32: u16 @ 0x10 [0x10],
        /// Address bits 31:0 (the last four bytes on the wire).
        mac_addr_31_0: u32 @ 0x20 [0x20],
    }
}

impl<T: AsRef<[u8]>> MacAddressLayout<T> {
    /// The 48-bit address.
    pub fn mac(&self) -> u64 {
        (u64::from(self.mac_addr_47_32()) << 32) | u64::from(self.mac_addr_31_0())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> MacAddressLayout<T> {
    /// Sets the address from its 48 low bits.
    pub fn set_mac(&mut self, mac: u64) -> &mut Self {
        self.set_mac_addr_47_32((mac >> 32) as u16)
            .set_mac_addr_31_0(mac as u32)
    }
}

layout! {
    /// NIC vport context, returned by QUERY_NIC_VPORT_CONTEXT and written (the parts named in
    /// the field select) by MODIFY_NIC_VPORT_CONTEXT. The allowed address list follows it.
    pub struct NicVportContext("nic_vport_context", 0x100) {
        /// Minimum inline mode of transmitted packets (0 none, 1 L2, 2 IP, 3 TCP/UDP).
        min_wqe_inline_mode: u8 @ 0x5 [0x3],
        /// Do not loop back multicast sent from this vport to it.
        disable_mc_local_lb: bool @ 0x1d [0x1],
        /// Do not loop back unicast sent from this vport to it.
        disable_uc_local_lb: bool @ 0x1e [0x1],
        /// RoCE enabled on this vport.
        roce_en: bool @ 0x1f [0x1],
        /// Arm the change event: the next change of an enabled kind raises
        /// NIC_VPORT_CHANGE_EVENT once.
        arm_change_event: bool @ 0x20 [0x1],
        /// Raise the change event when the MTU changes.
        event_on_mtu: bool @ 0x3b [0x1],
        /// Raise the change event when the promiscuous modes change.
        event_on_promisc_change: bool @ 0x3c [0x1],
        /// Raise the change event when the allowed VLAN list changes.
        event_on_vlan_change: bool @ 0x3d [0x1],
        /// Raise the change event when the allowed multicast list changes.
        event_on_mc_address_change: bool @ 0x3e [0x1],
        /// Raise the change event when the allowed unicast list changes.
        event_on_uc_address_change: bool @ 0x3f [0x1],
        /// MTU of the vport in bytes (Ethernet payload plus L2 header).
        mtu: u16 @ 0x130 [0x10],
        /// System image GUID.
        system_image_guid: u64 @ 0x140 [0x40],
        /// Port GUID.
        port_guid: u64 @ 0x180 [0x40],
        /// Node GUID.
        node_guid: u64 @ 0x1c0 [0x40],
        /// Count of packets dropped for a bad Q_Key.
        qkey_violation_counter: u16 @ 0x340 [0x10],
        /// Receive all unicast traffic.
        promisc_uc: bool @ 0x780 [0x1],
        /// Receive all multicast traffic.
        promisc_mc: bool @ 0x781 [0x1],
        /// Receive all traffic.
        promisc_all: bool @ 0x782 [0x1],
        /// Kind of the list after the context: `NIC_VPORT_LIST_TYPE_*`.
        allowed_list_type: u8 @ 0x785 [0x3],
        /// Number of entries in the list after the context.
        allowed_list_size: u16 @ 0x794 [0xc],
    }
    nested {
        /// The vport's permanent MAC address.
        permanent_address: MacAddressLayout @ 0x7a0,
    }
    arrays {
        /// Entry `index` of the allowed list (a [`MacAddressLayout`] as a 64-bit value: the MAC
        /// in the low 48 bits; or a VLAN id in the low 12 bits for the VLAN list).
        current_uc_mac_address: u64 @ 0x800 [0x40],
    }
}

layout! {
    /// QUERY_NIC_VPORT_CONTEXT input.
    pub struct QueryNicVportContextIn("query_nic_vport_context_in", 0x10) {
        /// Command opcode:
        /// [`Opcode::QueryNicVportContext`](crate::cmd::Opcode::QueryNicVportContext).
        opcode: u16 @ 0x0 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// Query the vport in `vport_number` rather than the caller's own.
        other_vport: bool @ 0x40 [0x1],
        /// Vport queried when `other_vport` is set.
        vport_number: u16 @ 0x50 [0x10],
        /// Which address list to return after the context: `NIC_VPORT_LIST_TYPE_*`.
        allowed_list_type: u8 @ 0x65 [0x3],
    }
}

layout! {
    /// QUERY_NIC_VPORT_CONTEXT output: the context (and its list).
    pub struct QueryNicVportContextOut("query_nic_vport_context_out", 0x110) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x0 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
    }
    nested {
        /// The vport's context (fixed part; see
        /// [`QueryNicVportContextOut::nic_vport_context_all`] for the list).
        nic_vport_context: NicVportContext @ 0x80,
    }
}

impl<T: AsRef<[u8]>> QueryNicVportContextOut<T> {
    /// The context with everything after it in the buffer, so that its address list
    /// ([`NicVportContext::current_uc_mac_address`]) is reachable.
    pub fn nic_vport_context_all(&self) -> NicVportContext<&[u8]> {
        NicVportContext {
            buf: &self.buf.as_ref()[0x80 / 8..],
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> QueryNicVportContextOut<T> {
    /// Writable [`QueryNicVportContextOut::nic_vport_context_all`].
    pub fn nic_vport_context_all_mut(&mut self) -> NicVportContext<&mut [u8]> {
        NicVportContext {
            buf: &mut self.buf.as_mut()[0x80 / 8..],
        }
    }
}

layout! {
    /// Which parts of the NIC vport context MODIFY_NIC_VPORT_CONTEXT writes.
    pub struct ModifyNicVportFieldSelect("modify_nic_vport_field_select", 0x4) {
        /// Write `disable_uc_local_lb`.
        disable_uc_local_lb: bool @ 0x14 [0x1],
        /// Write `disable_mc_local_lb`.
        disable_mc_local_lb: bool @ 0x15 [0x1],
        /// Write `node_guid`.
        node_guid: bool @ 0x16 [0x1],
        /// Write `port_guid`.
        port_guid: bool @ 0x17 [0x1],
        /// Write `min_wqe_inline_mode`.
        min_inline: bool @ 0x18 [0x1],
        /// Write `mtu`.
        mtu: bool @ 0x19 [0x1],
        /// Write `arm_change_event` and the `event_on_*` bits.
        change_event: bool @ 0x1a [0x1],
        /// Write `promisc_uc`, `promisc_mc` and `promisc_all`.
        promisc: bool @ 0x1b [0x1],
        /// Write `permanent_address`.
        permanent_address: bool @ 0x1c [0x1],
        /// Write the address list (`allowed_list_type`, `allowed_list_size` and the list).
        addresses_list: bool @ 0x1d [0x1],
        /// Write `roce_en`.
        roce_en: bool @ 0x1e [0x1],
    }
}

layout! {
    /// MODIFY_NIC_VPORT_CONTEXT input: the field select and the new context (and its list).
    pub struct ModifyNicVportContextIn("modify_nic_vport_context_in", 0x200) {
        /// Command opcode:
        /// [`Opcode::ModifyNicVportContext`](crate::cmd::Opcode::ModifyNicVportContext).
        opcode: u16 @ 0x0 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// Modify the vport in `vport_number` rather than the caller's own.
        other_vport: bool @ 0x40 [0x1],
        /// Vport modified when `other_vport` is set.
        vport_number: u16 @ 0x50 [0x10],
    }
    nested {
        /// Which parts of `nic_vport_context` to write.
        field_select: ModifyNicVportFieldSelect @ 0x60,
        /// The new context (fixed part; see
        /// [`ModifyNicVportContextIn::nic_vport_context_all`] for the list).
        nic_vport_context: NicVportContext @ 0x800,
    }
}

impl<T: AsRef<[u8]>> ModifyNicVportContextIn<T> {
    /// The context with everything after it in the buffer, so that its address list
    /// ([`NicVportContext::current_uc_mac_address`]) is reachable.
    pub fn nic_vport_context_all(&self) -> NicVportContext<&[u8]> {
        NicVportContext {
            buf: &self.buf.as_ref()[0x800 / 8..],
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ModifyNicVportContextIn<T> {
    /// Writable [`ModifyNicVportContextIn::nic_vport_context_all`].
    pub fn nic_vport_context_all_mut(&mut self) -> NicVportContext<&mut [u8]> {
        NicVportContext {
            buf: &mut self.buf.as_mut()[0x800 / 8..],
        }
    }
}

layout! {
    /// QUERY_VPORT_STATE input.
    pub struct QueryVportStateIn("query_vport_state_in", 0x10) {
        /// Command opcode: [`Opcode::QueryVportState`](crate::cmd::Opcode::QueryVportState).
        opcode: u16 @ 0x0 [0x10],
        /// Which kind of vport: `QUERY_VPORT_STATE_OP_MOD_*`.
        op_mod: u16 @ 0x30 [0x10],
        /// Query the vport in `vport_number` rather than the caller's own.
        other_vport: bool @ 0x40 [0x1],
        /// Vport queried when `other_vport` is set.
        vport_number: u16 @ 0x50 [0x10],
    }
}

layout! {
    /// QUERY_VPORT_STATE output.
    pub struct QueryVportStateOut("query_vport_state_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x0 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
        /// State the vport was set to: [`VPORT_STATE_DOWN`], [`VPORT_STATE_UP`] or
        /// [`VPORT_STATE_FOLLOW`].
        admin_state: u8 @ 0x78 [0x4],
        /// Operational state: [`VPORT_STATE_DOWN`] or [`VPORT_STATE_UP`].
        state: u8 @ 0x7c [0x4],
    }
}

layout! {
    /// A packet and octet count pair (`traffic_counter`).
    pub struct TrafficCounter("traffic_counter", 0x10) {
        /// Packets.
        packets: u64 @ 0x0 [0x40],
        /// Octets (bytes) of those packets.
        octets: u64 @ 0x40 [0x40],
    }
}

layout! {
    /// QUERY_VPORT_COUNTER input.
    pub struct QueryVportCounterIn("query_vport_counter_in", 0x20) {
        /// Command opcode:
        /// [`Opcode::QueryVportCounter`](crate::cmd::Opcode::QueryVportCounter).
        opcode: u16 @ 0x0 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// Query another function's vport (e-switch managers only).
        other_vport: bool @ 0x40 [0x1],
        /// Port number (0 or 1 on a single-port function).
        port_num: u8 @ 0x4c [0x4],
        /// The vport, when `other_vport` is set.
        vport_number: u16 @ 0x50 [0x10],
        /// Clear the counters after reading them.
        clear: bool @ 0xc0 [0x1],
    }
}

layout! {
    /// QUERY_VPORT_COUNTER output: the vport's traffic by cast type, and its errors.
    pub struct QueryVportCounterOut("query_vport_counter_out", 0x210) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x0 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
    }
    nested {
        /// Frames received with errors.
        received_errors: TrafficCounter @ 0x80,
        /// Frames that failed to transmit.
        transmit_errors: TrafficCounter @ 0x100,
        /// RDMA (RoCE) unicast packets received: mlx5_ib's `port_rcv_data`/`_packets`.
        received_ib_unicast: TrafficCounter @ 0x180,
        /// RDMA (RoCE) unicast packets transmitted: mlx5_ib's `port_xmit_data`/`_packets`.
        transmitted_ib_unicast: TrafficCounter @ 0x200,
        /// RDMA (RoCE) multicast packets received.
        received_ib_multicast: TrafficCounter @ 0x280,
        /// RDMA (RoCE) multicast packets transmitted.
        transmitted_ib_multicast: TrafficCounter @ 0x300,
        /// Broadcast frames received.
        received_eth_broadcast: TrafficCounter @ 0x380,
        /// Broadcast frames transmitted.
        transmitted_eth_broadcast: TrafficCounter @ 0x400,
        /// Unicast frames received.
        received_eth_unicast: TrafficCounter @ 0x480,
        /// Unicast frames transmitted.
        transmitted_eth_unicast: TrafficCounter @ 0x500,
        /// Multicast frames received.
        received_eth_multicast: TrafficCounter @ 0x580,
        /// Multicast frames transmitted.
        transmitted_eth_multicast: TrafficCounter @ 0x600,
    }
}

/// The default P_Key (full membership of the default partition), the only one an Ethernet port
/// holds: at index 0 of its table.
pub const DEFAULT_PKEY: u16 = 0xffff;

/// `pkey_index` of QUERY_HCA_VPORT_PKEY that asks for the whole table.
pub const PKEY_INDEX_ALL: u16 = 0xffff;

layout! {
    /// QUERY_HCA_VPORT_PKEY input.
    pub struct QueryHcaVportPkeyIn("query_hca_vport_pkey_in", 0x10) {
        /// Command opcode: [`Opcode::QueryHcaVportPkey`](crate::cmd::Opcode::QueryHcaVportPkey).
        opcode: u16 @ 0x00 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// Query the vport named by `vport_number` rather than the function's own.
        other_vport: bool @ 0x40 [0x1],
        /// Port number on a two-port device (0 otherwise).
        port_num: u8 @ 0x4c [0x4],
        /// The vport, with `other_vport`.
        vport_number: u16 @ 0x50 [0x10],
        /// Index of the P_Key, or [`PKEY_INDEX_ALL`] for the whole table.
        pkey_index: u16 @ 0x70 [0x10],
    }
}

layout! {
    /// QUERY_HCA_VPORT_PKEY output: the header, then one dword per P_Key asked for.
    pub struct QueryHcaVportPkeyOut("query_hca_vport_pkey_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Failure syndrome (0 on success).
        syndrome: u32 @ 0x20 [0x20],
    }
    arrays {
        /// The P_Keys (`struct pkey`: the key in the low 16 bits of each dword).
        pkey: u32 @ 0x80 [0x20],
    }
}
