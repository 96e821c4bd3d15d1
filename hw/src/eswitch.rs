//! The e-switch as its manager sees it: the two capability pages an e-switch manager reads
//! (`e_switch_cap`, `flow_table_eswitch_cap`), the e-switch context of a vport
//! (QUERY_ESW_VPORT_CONTEXT) and the host functions behind the e-switch (QUERY_ESW_FUNCTIONS).
//!
//! A function is the e-switch manager when its general page's `eswitch_manager` is set
//! ([`crate::caps::CmdHcaCap::eswitch_manager`]); Linux's mlx5_core then queries both pages at
//! probe (`mlx5_query_hca_caps`) and creates its e-switch, and rdma-core's software steering
//! queries the context and the functions when it opens a domain (`dr_domain_query_fdb_caps`,
//! `dr_devx_query_device`).

use crate::caps::FlowTablePropLayout;
use crate::layout;

layout! {
    /// E-switch capabilities (`e_switch_cap`, QUERY_HCA_CAP type
    /// [`ESWITCH`](crate::hca::cap_type::ESWITCH)).
    pub struct ESwitchCap("e_switch_cap", 0x100) {
        /// The e-switch may strip a vport's customer VLAN tag (`vport_cvlan_strip`).
        vport_cvlan_strip: bool @ 0x1 [0x1],
        /// The e-switch may insert a customer VLAN tag where a frame has none.
        vport_cvlan_insert_if_not_exist: bool @ 0x3 [0x1],
        /// An ingress ACL may be set on the uplink vport (with `fdb_to_vport_reg_c_id`, Linux
        /// matches vports by metadata in switchdev mode).
        esw_uplink_ingress_acl: bool @ 0x8 [0x1],
        /// An event tells the manager when the host's functions change (ECPF only).
        esw_functions_changed: bool @ 0x19 [0x1],
        /// An embedded CPU function has a vport of its own (Linux allocates one more vport).
        ecpf_vport_exists: bool @ 0x1b [0x1],
        /// The e-switches of two ports may be merged (switchdev LAG).
        merged_eswitch: bool @ 0x1d [0x1],
        /// Log2 of the scalable functions the e-switch holds.
        log_max_esw_sf: u8 @ 0x4b [0x5],
        /// Function number of the first scalable function.
        esw_sf_base_id: u16 @ 0x50 [0x10],
        /// `esw_manager_vport_number` is valid (else rdma-core asks QUERY_ESW_FUNCTIONS
        /// whether the manager is an embedded CPU).
        esw_manager_vport_number_valid: bool @ 0x60 [0x1],
        /// The manager's vport number (0 a host PF, 0xfffe an embedded CPU).
        esw_manager_vport_number: u16 @ 0x70 [0x10],
    }
}

layout! {
    /// E-switch flow table capabilities (`flow_table_eswitch_cap`, QUERY_HCA_CAP type
    /// [`ESWITCH_FLOW_TABLE`](crate::hca::cap_type::ESWITCH_FLOW_TABLE)).
    pub struct FlowTableESwitchCap("flow_table_eswitch_cap", 0x1000) {
        /// Metadata registers the FDB may copy a vport's number into (a bit per `reg_c`).
        fdb_to_vport_reg_c_id: u8 @ 0x0 [0x8],
        /// Flow entries may say which kind of vport a frame comes from (`flow_source`).
        flow_source: bool @ 0x17 [0x1],
        /// An FDB entry may forward to several tables.
        fdb_multi_path_to_table: bool @ 0x1c [0x1],
        /// ICM address where an FDB software steering entry drops a received frame.
        sw_steering_fdb_action_drop_icm_address_rx: u64 @ 0x1800 [0x40],
        /// ICM address where an FDB software steering entry drops a transmitted frame.
        sw_steering_fdb_action_drop_icm_address_tx: u64 @ 0x1840 [0x40],
        /// ICM address of the uplink's receive side (rdma-core's wire vport).
        sw_steering_uplink_icm_address_rx: u64 @ 0x1880 [0x40],
        /// ICM address of the uplink's transmit side.
        sw_steering_uplink_icm_address_tx: u64 @ 0x18c0 [0x40],
    }
    nested {
        /// FDB tables: `ft_support` 0 means the e-switch forwards by no table of its own (Linux
        /// then creates no FDB namespace and refuses to enable VFs).
        flow_table_properties_nic_esw_fdb: FlowTablePropLayout @ 0x200,
        /// Vports' ingress ACL tables.
        flow_table_properties_esw_acl_ingress: FlowTablePropLayout @ 0x400,
        /// Vports' egress ACL tables.
        flow_table_properties_esw_acl_egress: FlowTablePropLayout @ 0x600,
    }
}

layout! {
    /// QUERY_ESW_VPORT_CONTEXT input.
    pub struct QueryEswVportContextIn("query_esw_vport_context_in", 0x10) {
        /// Command opcode.
        opcode: u16 @ 0x0 [0x10],
        /// Operation modifier.
        op_mod: u16 @ 0x30 [0x10],
        /// Set to query `vport_number`; clear to query the caller's own vport.
        other_vport: bool @ 0x40 [0x1],
        /// Vport to query when `other_vport` is set.
        vport_number: u16 @ 0x50 [0x10],
    }
}

layout! {
    /// A vport's e-switch context (`esw_vport_context`): VLAN strip and insert, and where
    /// software steering enters the vport.
    pub struct EswVportContext("esw_vport_context", 0x100) {
        /// Strip the service VLAN tag of frames to the vport.
        vport_svlan_strip: bool @ 0x3 [0x1],
        /// Strip the customer VLAN tag of frames to the vport.
        vport_cvlan_strip: bool @ 0x4 [0x1],
        /// Insert `svlan_*` into frames from the vport.
        vport_svlan_insert: bool @ 0x5 [0x1],
        /// Customer VLAN insert mode for frames from the vport (0 none).
        vport_cvlan_insert: u8 @ 0x6 [0x2],
        /// Service VLAN CFI bit to insert.
        svlan_cfi: bool @ 0x40 [0x1],
        /// Service VLAN priority to insert.
        svlan_pcp: u8 @ 0x41 [0x3],
        /// Service VLAN id to insert.
        svlan_id: u16 @ 0x44 [0xc],
        /// Customer VLAN CFI bit to insert.
        cvlan_cfi: bool @ 0x50 [0x1],
        /// Customer VLAN priority to insert.
        cvlan_pcp: u8 @ 0x51 [0x3],
        /// Customer VLAN id to insert.
        cvlan_id: u16 @ 0x54 [0xc],
        /// ICM address where software steering enters the vport's receive side (0: none).
        sw_steering_vport_icm_address_rx: u64 @ 0x780 [0x40],
        /// ICM address where software steering enters the vport's transmit side (0: none).
        sw_steering_vport_icm_address_tx: u64 @ 0x7c0 [0x40],
    }
}

layout! {
    /// QUERY_ESW_VPORT_CONTEXT output.
    pub struct QueryEswVportContextOut("query_esw_vport_context_out", 0x110) {
        /// Command status.
        status: u8 @ 0x0 [0x8],
        /// Command syndrome.
        syndrome: u32 @ 0x20 [0x20],
    }
    nested {
        /// The vport's context.
        esw_vport_context: EswVportContext @ 0x80,
    }
}

layout! {
    /// QUERY_ESW_FUNCTIONS input.
    pub struct QueryEswFunctionsIn("query_esw_functions_in", 0x10) {
        /// Command opcode.
        opcode: u16 @ 0x0 [0x10],
        /// Operation modifier.
        op_mod: u16 @ 0x30 [0x10],
    }
}

layout! {
    /// The host functions behind an e-switch (`host_params_context`), as an embedded CPU's
    /// manager sees the host's PF.
    pub struct HostParamsContext("host_params_context", 0x40) {
        /// Which host.
        host_number: u8 @ 0x0 [0x8],
        /// `host_pf_vhca_id` is valid.
        host_pf_vhca_id_valid: bool @ 0xe [0x1],
        /// The host's PF is disabled.
        host_pf_disabled: bool @ 0xf [0x1],
        /// VFs the host's PF has enabled.
        host_num_of_vfs: u16 @ 0x10 [0x10],
        /// VFs the host's PF may enable.
        host_total_vfs: u16 @ 0x20 [0x10],
        /// The host PF's PCI bus.
        host_pci_bus: u16 @ 0x30 [0x10],
        /// The host PF's virtual HCA id.
        host_pf_vhca_id: u16 @ 0x40 [0x10],
        /// The host PF's PCI device.
        host_pci_device: u16 @ 0x50 [0x10],
        /// The host PF's PCI function.
        host_pci_function: u16 @ 0x70 [0x10],
    }
}

layout! {
    /// QUERY_ESW_FUNCTIONS output: the host's functions, then (past these 0x80 bytes) a
    /// 64-bit `host_sf_enable` word per scalable function, as many as the output holds.
    pub struct QueryEswFunctionsOut("query_esw_functions_out", 0x80) {
        /// Command status.
        status: u8 @ 0x0 [0x8],
        /// Command syndrome.
        syndrome: u32 @ 0x20 [0x20],
    }
    nested {
        /// The host PF and its VFs.
        host_params_context: HostParamsContext @ 0x80,
    }
}

impl QueryEswFunctionsOut<()> {
    /// Byte offset of `host_params_context` in the output.
    pub const HOST_PARAMS_CONTEXT_BYTE: usize = 0x10;
}
