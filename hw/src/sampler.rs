//! Flow samplers: a general object of type
//! [`obj_type::FLOW_SAMPLER`](crate::general_obj::obj_type::FLOW_SAMPLER) that steering entries
//! reach by its ICM address. Every packet reaching it goes on to its default table; one in
//! `sample_ratio` is also copied to its sample table.
//!
//! rdma-core's `mlx5dv_dr_action_create_flow_sampler` (dr_action.c) creates one for a NIC
//! receive or FDB domain: the sample table is a firmware table of one always-hit entry holding
//! the sample actions (`dr_action_create_sampler_term_tbl`: flow counters, a TIR, a flow tag),
//! the default table is the domain table the caller named, and `ignore_flow_level` is set
//! because both sit at the sampler's own level (`dr_action_create_sampler`); it then queries
//! the object for the ICM addresses its steering entries hit (`dr_devx_query_flow_sampler`).
//! Linux's mlx5_core creates the same object for e-switch sampling (`sampler_obj_create`,
//! esw/sample.c). Field offsets are rdma-core's `mlx5_ifc_flow_sampler_bits`, which Linux's
//! `mlx5_ifc_sampler_obj_bits` repeats.

use crate::layout;

layout! {
    /// CREATE_GENERAL_OBJECT input of a flow sampler, as rdma-core's
    /// `dr_devx_create_flow_sampler` fills it: the general object header, then the sampler.
    /// DESTROY_GENERAL_OBJECT and QUERY_GENERAL_OBJECT send the header alone.
    pub struct CreateFlowSamplerIn("create_flow_sampler_in", 0x38) {
        /// Command opcode:
        /// [`Opcode::CreateGeneralObject`](crate::cmd::Opcode::CreateGeneralObject).
        opcode: u16 @ 0x00 [0x10],
        /// User context the object belongs to (DEVX).
        uid: u16 @ 0x10 [0x10],
        /// Object type: [`obj_type::FLOW_SAMPLER`](crate::general_obj::obj_type::FLOW_SAMPLER).
        obj_type: u16 @ 0x30 [0x10],
        /// Ignored by CREATE, which hands out the number.
        obj_id: u32 @ 0x40 [0x20],
        /// Fields MODIFY_GENERAL_OBJECT would change (0 at CREATE).
        modify_field_select: u64 @ 0x80 [0x40],
        /// Flow table type of both tables (`FLOW_TABLE_TYPE_*`).
        table_type: u8 @ 0xc0 [0x8],
        /// The sampler's level: the tables it hands packets to must be deeper unless
        /// `ignore_flow_level`.
        level: u8 @ 0xc8 [0x8],
        /// The tables may sit at any level (rdma-core sets it: its tables share the
        /// sampler's level).
        ignore_flow_level: bool @ 0xdf [0x1],
        /// One packet in this many is copied to the sample table (1 and up).
        sample_ratio: u32 @ 0xe0 [0x20],
        /// The table copies go to.
        sample_table_id: u32 @ 0x108 [0x18],
        /// The table every packet goes on to.
        default_table_id: u32 @ 0x128 [0x18],
        /// Where receive steering entries reach the sampler (set by the device; QUERY).
        sw_steering_icm_address_rx: u64 @ 0x140 [0x40],
        /// Where transmit steering entries reach the sampler (set by the device; QUERY).
        sw_steering_icm_address_tx: u64 @ 0x180 [0x40],
    }
}

layout! {
    /// QUERY_GENERAL_OBJECT output of a flow sampler: the general object output header, then
    /// the sampler as CREATE gave it with the ICM addresses its entries hit, which rdma-core
    /// reads (`dr_devx_query_flow_sampler`).
    pub struct QueryFlowSamplerOut("query_flow_sampler_out", 0x38) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x0 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
        /// The object's number.
        obj_id: u32 @ 0x40 [0x20],
        /// Flow table type of both tables.
        table_type: u8 @ 0xc0 [0x8],
        /// The sampler's level.
        level: u8 @ 0xc8 [0x8],
        /// The tables may sit at any level.
        ignore_flow_level: bool @ 0xdf [0x1],
        /// One packet in this many is copied to the sample table.
        sample_ratio: u32 @ 0xe0 [0x20],
        /// The table copies go to.
        sample_table_id: u32 @ 0x108 [0x18],
        /// The table every packet goes on to.
        default_table_id: u32 @ 0x128 [0x18],
        /// Where receive steering entries reach the sampler.
        sw_steering_icm_address_rx: u64 @ 0x140 [0x40],
        /// Where transmit steering entries reach the sampler.
        sw_steering_icm_address_tx: u64 @ 0x180 [0x40],
    }
}
