//! Quality of service: the QoS capability page (`qos_cap`, HCA capability type
//! [`cap_type::QOS`](crate::hca::cap_type::QOS)) and the packet pacing rate table that
//! SET_PP_RATE_LIMIT writes (Linux 6.12 `mlx5_ifc.h` `qos_cap`, `set_pp_rate_limit_in`,
//! `set_pp_rate_limit_context`).
//!
//! A send queue paced by the device names an entry of the rate table by its index; index 0 is
//! reserved for "unlimited" and is never written. mlx5_core's `mlx5_init_rl_table` reads the
//! table size and the rate range from the page at probe; `mlx5_rl_add_rate_raw` fills entry
//! 1 and up, and writes an entry's context back as zeros (rate 0) when it lets go of it.

use crate::layout;

layout! {
    /// The QoS capability page (`MLX5_CAP_QOS`), read by mlx5_core (`mlx5_init_rl_table`,
    /// `mlx5_qos_is_supported`, the e-switch's QoS) and by mlx5_ib's `pp_is_supported`.
    pub struct QosCap("qos_cap", 0x100) {
        /// Send queues may be paced through the rate table (SET_PP_RATE_LIMIT).
        packet_pacing: bool @ 0x0 [0x1],
        /// E-switch scheduling elements (vport rate limits and shares).
        esw_scheduling: bool @ 0x1 [0x1],
        /// A rate table entry's `burst_upper_bound` is honoured.
        packet_pacing_burst_bound: bool @ 0x5 [0x1],
        /// A rate table entry's `typical_packet_size` is honoured.
        packet_pacing_typical_size: bool @ 0x6 [0x1],
        /// Flow meter objects (`MLX5_OBJ_TYPE_FLOW_METER`) that software steering entries
        /// reach (the older meter, before ASO meters; DPDK's `qos.flow_meter_old`).
        flow_meter_old: bool @ 0x7 [0x1],
        /// NIC send queue scheduling elements (mlx5e's HTB offload; libmlx5 reads
        /// `nic_bw_share` and `nic_rate_limit` only when it is set).
        nic_sq_scheduling: bool @ 0x8 [0x1],
        /// A NIC scheduling element's `bw_share` is honoured.
        nic_bw_share: bool @ 0x9 [0x1],
        /// A NIC scheduling element's `max_average_bw` is honoured.
        nic_rate_limit: bool @ 0xa [0x1],
        /// SET_PP_RATE_LIMIT carries a user context's uid (DEVX-owned entries).
        packet_pacing_uid: bool @ 0xb [0x1],
        /// Log2 of the most flow meter objects.
        log_max_flow_meter: u8 @ 0x10 [0x8],
        /// The metadata registers a meter may write its color into: bit `n` for `reg_c_n`
        /// (rdma-core's tests take the lowest, `get_first_flow_meter_reg_id`).
        flow_meter_reg_id: u8 @ 0x18 [0x8],
        /// QPs may name NIC queue groups (rdma-core's `qos_cap.nic_qp_scheduling`; Linux
        /// 6.12's header leaves the bit unnamed).
        nic_qp_scheduling: bool @ 0x21 [0x1],
        /// Flow meters (rdma-core's tests' `QosCaps.flow_meter`).
        flow_meter: bool @ 0x28 [0x1],
        /// Log2 of the most NIC queue groups (mlx5e's HTB leaves, `mlx5_qos_max_leaf_nodes`).
        log_max_qos_nic_queue_group: u8 @ 0x2b [0x5],
        /// Highest rate an entry may hold, in kb/s.
        packet_pacing_max_rate: u32 @ 0x40 [0x20],
        /// Lowest non-zero rate an entry may hold, in kb/s.
        packet_pacing_min_rate: u32 @ 0x60 [0x20],
        /// Entries in the rate table, index 0 (unlimited) included.
        packet_pacing_rate_table_size: u16 @ 0x90 [0x10],
        /// NIC scheduling element types offered (see [`element_type_cap`]).
        nic_element_type: u16 @ 0x100 [0x10],
        /// NIC TSAR types offered (see [`tsar_type_cap`]).
        nic_tsar_type: u16 @ 0x110 [0x10],
    }
}

/// Bits of [`QosCap::nic_element_type`] (`ELEMENT_TYPE_CAP_MASK_*`): one per
/// [`element_type`] value.
pub mod element_type_cap {
    /// Transmit scheduling arbiters (inner nodes).
    pub const TSAR: u16 = 1 << 0;
    /// Queue groups (leaves that send queues and QPs name).
    pub const QUEUE_GROUP: u16 = 1 << 4;
}

/// Bits of [`QosCap::nic_tsar_type`] (`TSAR_TYPE_CAP_MASK_*`): one per [`tsar_type`] value.
pub mod tsar_type_cap {
    /// Deficit weighted round robin among the children.
    pub const DWRR: u16 = 1 << 0;
}

/// Values of a scheduling element command's `scheduling_hierarchy` (`SCHEDULING_HIERARCHY_*`).
pub mod hierarchy {
    /// The e-switch's hierarchy (vport rates; `esw_scheduling`).
    pub const E_SWITCH: u8 = 0x2;
    /// The NIC's own send queues and QPs (`nic_sq_scheduling`).
    pub const NIC: u8 = 0x3;
}

/// Values of [`SchedulingContext::element_type`] (`SCHEDULING_CONTEXT_ELEMENT_TYPE_*`).
pub mod element_type {
    /// A transmit scheduling arbiter: an inner node with children.
    pub const TSAR: u8 = 0x0;
    /// A queue group: a leaf that send queues and QPs name.
    pub const QUEUE_GROUP: u8 = 0x4;
}

/// Values of [`SchedulingContext::tsar_type`] (`TSAR_ELEMENT_TSAR_TYPE_*`).
pub mod tsar_type {
    /// Deficit weighted round robin.
    pub const DWRR: u8 = 0x0;
}

/// Bits of MODIFY_SCHEDULING_ELEMENT's `modify_bitmask`, and of the scheduling element
/// general object's `modify_field_select` (libmlx5's `MLX5DV_SCHED_ELEM_ATTR_FLAGS_*`).
pub mod sched_modify {
    /// `bw_share`.
    pub const BW_SHARE: u32 = 1 << 0;
    /// `max_average_bw`.
    pub const MAX_AVERAGE_BW: u32 = 1 << 1;
}

/// The general object type of a scheduling element (`MLX5_OBJ_TYPE_SCHEDULING_ELEMENT`),
/// as libmlx5's `mlx5dv_sched_node_create` and `mlx5dv_sched_leaf_create` create it.
pub const OBJ_TYPE_SCHEDULING_ELEMENT: u16 = crate::general_obj::obj_type::SCHEDULING_ELEMENT;

layout! {
    /// One scheduling element (Linux's `scheduling_context`, rdma-core's `sched_context`).
    pub struct SchedulingContext("scheduling_context", 0x40) {
        /// The element's kind (see [`element_type`]).
        element_type: u8 @ 0x0 [0x8],
        /// A TSAR's arbitration (see [`tsar_type`]); the first byte of
        /// `element_attributes` past its reserved bits.
        tsar_type: u8 @ 0x28 [0x8],
        /// The TSAR this element hangs from (0: none, a root).
        parent_element_id: u32 @ 0x40 [0x20],
        /// Relative weight among the parent's children (0: the default share).
        bw_share: u32 @ 0xa0 [0x20],
        /// Rate limit, in Mb/s (0: unlimited).
        max_average_bw: u32 @ 0xc0 [0x20],
    }
}

layout! {
    /// CREATE_SCHEDULING_ELEMENT input, as mlx5_core's `mlx5_create_scheduling_element_cmd`
    /// sends it (HTB: `mlx5_qos_create_root_node`, `_inner_node`, `_leaf_node`).
    pub struct CreateSchedulingElementIn("create_scheduling_element_in", 0x80) {
        /// Command opcode:
        /// [`Opcode::CreateSchedulingElement`](crate::cmd::Opcode::CreateSchedulingElement).
        opcode: u16 @ 0x00 [0x10],
        /// User context that owns the element (0 or 0xffff: the function's own); where every
        /// command carries its uid (Linux's header leaves these bits reserved here; mlx5_core
        /// sends 0).
        uid: u16 @ 0x10 [0x10],
        /// Opcode modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The hierarchy the element joins (see [`hierarchy`]).
        scheduling_hierarchy: u8 @ 0x40 [0x8],
    }
    nested {
        /// The new element.
        scheduling_context: SchedulingContext @ 0x100,
    }
}

layout! {
    /// CREATE_SCHEDULING_ELEMENT output.
    pub struct CreateSchedulingElementOut("create_scheduling_element_out", 0x40) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x0 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
        /// The new element's id.
        scheduling_element_id: u32 @ 0x80 [0x20],
    }
}

layout! {
    /// MODIFY_SCHEDULING_ELEMENT input (`mlx5_modify_scheduling_element_cmd`).
    pub struct ModifySchedulingElementIn("modify_scheduling_element_in", 0x80) {
        /// Command opcode:
        /// [`Opcode::ModifySchedulingElement`](crate::cmd::Opcode::ModifySchedulingElement).
        opcode: u16 @ 0x00 [0x10],
        /// User context of the issuer: where every command carries its uid (Linux's header
        /// leaves these bits reserved here; mlx5_core sends 0).
        uid: u16 @ 0x10 [0x10],
        /// Opcode modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The element's hierarchy (see [`hierarchy`]).
        scheduling_hierarchy: u8 @ 0x40 [0x8],
        /// The element modified.
        scheduling_element_id: u32 @ 0x60 [0x20],
        /// Which context fields change (see [`sched_modify`]).
        modify_bitmask: u32 @ 0xa0 [0x20],
    }
    nested {
        /// The new values of the fields `modify_bitmask` names.
        scheduling_context: SchedulingContext @ 0x100,
    }
}

layout! {
    /// DESTROY_SCHEDULING_ELEMENT input (`mlx5_destroy_scheduling_element_cmd`).
    pub struct DestroySchedulingElementIn("destroy_scheduling_element_in", 0x40) {
        /// Command opcode:
        /// [`Opcode::DestroySchedulingElement`](crate::cmd::Opcode::DestroySchedulingElement).
        opcode: u16 @ 0x00 [0x10],
        /// User context of the issuer: where every command carries its uid (Linux's header
        /// leaves these bits reserved here; mlx5_core sends 0).
        uid: u16 @ 0x10 [0x10],
        /// Opcode modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The element's hierarchy (see [`hierarchy`]).
        scheduling_hierarchy: u8 @ 0x40 [0x8],
        /// The element destroyed.
        scheduling_element_id: u32 @ 0x60 [0x20],
    }
}

layout! {
    /// QUERY_SCHEDULING_ELEMENT input.
    pub struct QuerySchedulingElementIn("query_scheduling_element_in", 0x40) {
        /// Command opcode:
        /// [`Opcode::QuerySchedulingElement`](crate::cmd::Opcode::QuerySchedulingElement).
        opcode: u16 @ 0x00 [0x10],
        /// User context of the issuer: where every command carries its uid (Linux's header
        /// leaves these bits reserved here; mlx5_core sends 0).
        uid: u16 @ 0x10 [0x10],
        /// Opcode modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The element's hierarchy (see [`hierarchy`]).
        scheduling_hierarchy: u8 @ 0x40 [0x8],
        /// The element queried.
        scheduling_element_id: u32 @ 0x60 [0x20],
    }
}

layout! {
    /// QUERY_SCHEDULING_ELEMENT output.
    pub struct QuerySchedulingElementOut("query_scheduling_element_out", 0x80) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x0 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
    }
    nested {
        /// The element as it stands.
        scheduling_context: SchedulingContext @ 0x100,
    }
}

layout! {
    /// A scheduling element as a general object (CREATE / MODIFY / QUERY / DESTROY
    /// _GENERAL_OBJECT with `obj_type` [`OBJ_TYPE_SCHEDULING_ELEMENT`]): the general object
    /// header, then rdma-core's `sched_elem` (`create_sched_elem_in` in its `mlx5_ifc.h`, as
    /// `mlx5dv_sched_nic_create` and `mlx5dv_sched_nic_modify` fill it; Linux's header has
    /// no such object). QUERY_GENERAL_OBJECT answers the same body after the output header.
    pub struct SchedElemObjIn("create_sched_elem_in", 0x90) {
        /// Command opcode: CREATE, MODIFY, QUERY or DESTROY_GENERAL_OBJECT.
        opcode: u16 @ 0x00 [0x10],
        /// User context of the issuer (mlx5_ib's DEVX writes it).
        uid: u16 @ 0x10 [0x10],
        /// The object type: [`OBJ_TYPE_SCHEDULING_ELEMENT`].
        obj_type: u16 @ 0x30 [0x10],
        /// The object's id (MODIFY, QUERY, DESTROY).
        obj_id: u32 @ 0x40 [0x20],
        /// The context fields given (see [`sched_modify`]): libmlx5 sends its attribute
        /// flags at both CREATE and MODIFY.
        modify_field_select: u64 @ 0x80 [0x40],
        /// The hierarchy (see [`hierarchy`]; libmlx5 sends NIC).
        scheduling_hierarchy: u8 @ 0xc0 [0x8],
    }
    nested {
        /// The element.
        sched_context: SchedulingContext @ 0x180,
    }
}

layout! {
    /// QUERY_GENERAL_OBJECT output for a scheduling element: the general object output
    /// header, then the `sched_elem` body of [`SchedElemObjIn`] as it stands.
    pub struct SchedElemObjOut("query_sched_elem_out", 0x90) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x0 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
        /// The object's id.
        obj_id: u32 @ 0x40 [0x20],
        /// The context fields last given (see [`sched_modify`]).
        modify_field_select: u64 @ 0x80 [0x40],
        /// The element's hierarchy (see [`hierarchy`]).
        scheduling_hierarchy: u8 @ 0xc0 [0x8],
    }
    nested {
        /// The element.
        sched_context: SchedulingContext @ 0x180,
    }
}

layout! {
    /// One rate table entry as SET_PP_RATE_LIMIT carries it (and as mlx5dv_pp_alloc passes it
    /// through mlx5_ib untouched).
    pub struct SetPpRateLimitContext("set_pp_rate_limit_context", 0x30) {
        /// The rate, in kb/s (0 = the entry is unused).
        rate_limit: u32 @ 0x0 [0x20],
        /// Largest burst, in bytes (0 = the device's default).
        burst_upper_bound: u32 @ 0x20 [0x20],
        /// Typical packet size, in bytes (0 = the device's default).
        typical_packet_size: u16 @ 0x50 [0x10],
    }
}

layout! {
    /// SET_PP_RATE_LIMIT input: writes one entry of the rate table.
    pub struct SetPpRateLimitIn("set_pp_rate_limit_in", 0x40) {
        /// Command opcode: [`Opcode::SetPpRateLimit`](crate::cmd::Opcode::SetPpRateLimit).
        opcode: u16 @ 0x00 [0x10],
        /// User context that owns the entry (0 or 0xffff: shared by the function).
        uid: u16 @ 0x10 [0x10],
        /// Opcode modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The entry written, 1 to `packet_pacing_rate_table_size - 1`.
        rate_limit_index: u16 @ 0x50 [0x10],
    }
    nested {
        /// The entry's new value (all zero releases it).
        ctx: SetPpRateLimitContext @ 0x80,
    }
}

layout! {
    /// SET_PP_RATE_LIMIT output.
    pub struct SetPpRateLimitOut("set_pp_rate_limit_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x0 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
    }
}
