//! Flow meters: a general object of type
//! [`obj_type::FLOW_METER`](crate::general_obj::obj_type::FLOW_METER) that steering entries
//! reach by its ICM address. The meter colors every packet reaching it by its token buckets
//! (green, yellow or red), writes the color into the metadata register `return_reg_id` names
//! (`reg_c_<return_reg_id>`) and hands the packet on to its destination table, whose entries
//! match the color there.
//!
//! rdma-core's `mlx5dv_dr_action_create_flow_meter` (dr_action.c) creates one for a software
//! steering domain: `dr_devx_create_meter` (dr_devx.c) fills `active`, `return_reg_id`, the
//! destination table's type and number and the caller's `flow_meter_params`, then
//! `dr_devx_query_meter` reads back the ICM addresses its rules hit;
//! `mlx5dv_dr_action_modify_flow_meter` sends MODIFY_GENERAL_OBJECT with a
//! `modify_field_select` naming what changes. Field offsets are rdma-core's
//! `mlx5_ifc_flow_meter_bits` (which places `flow_meter_params` at bit 0x100 of the object and
//! the ICM addresses at 0x380 and 0x3c0, although its reserved field names say otherwise);
//! the parameters' are DPDK's `mlx5_ifc_flow_meter_parameters_bits`
//! (drivers/common/mlx5/mlx5_prm.h: 5-bit exponents, which rdma-core's tests'
//! `FlowMeterParams` write as whole bytes holding the same values).

use crate::layout;

/// Packet colors as a meter writes them into its return register (DPDK's `MLX5_FLOW_COLOR_*`;
/// rdma-core's `tests/test_mlx5_dr.py` matches green as 2 and red as 0).
pub mod color {
    /// Beyond both buckets.
    pub const RED: u32 = 0;
    /// Within the excess bucket only.
    pub const YELLOW: u32 = 1;
    /// Within the committed bucket.
    pub const GREEN: u32 = 2;
    /// No color (a `start_color` that asks the meter to choose).
    pub const UNDEFINED: u32 = 3;
}

/// Bits of a MODIFY_GENERAL_OBJECT's `modify_field_select` for a flow meter (DPDK's
/// `MLX5_FLOW_METER_OBJ_MODIFY_FIELD_*`, as `mlx5dv_dr_action_modify_flow_meter` callers
/// pass them).
pub mod modify_field {
    /// `active`.
    pub const ACTIVE: u64 = 1 << 0;
    /// The committed bucket's size (`cbs_exponent`, `cbs_mantissa`).
    pub const CBS: u64 = 1 << 1;
    /// The committed rate (`cir_exponent`, `cir_mantissa`).
    pub const CIR: u64 = 1 << 2;
    /// The excess bucket's size (`ebs_exponent`, `ebs_mantissa`).
    pub const EBS: u64 = 1 << 3;
    /// The excess rate (`eir_exponent`, `eir_mantissa`).
    pub const EIR: u64 = 1 << 4;
}

layout! {
    /// CREATE_GENERAL_OBJECT input of a flow meter, as rdma-core's `dr_devx_create_meter`
    /// fills it: the general object header, then the meter. MODIFY_GENERAL_OBJECT sends the
    /// same with `obj_id` and `modify_field_select`; DESTROY_GENERAL_OBJECT and
    /// QUERY_GENERAL_OBJECT send the header alone.
    pub struct CreateFlowMeterIn("create_flow_meter_in", 0x90) {
        /// Command opcode:
        /// [`Opcode::CreateGeneralObject`](crate::cmd::Opcode::CreateGeneralObject).
        opcode: u16 @ 0x00 [0x10],
        /// User context the object belongs to (DEVX).
        uid: u16 @ 0x10 [0x10],
        /// Object type: [`obj_type::FLOW_METER`](crate::general_obj::obj_type::FLOW_METER).
        obj_type: u16 @ 0x30 [0x10],
        /// The meter MODIFY changes (ignored by CREATE, which hands out the number).
        obj_id: u32 @ 0x40 [0x20],
        /// What MODIFY changes (see [`modify_field`]); 0 at CREATE.
        modify_field_select: u64 @ 0x80 [0x40],
        /// The meter colors packets; an inactive one hands them on uncolored.
        active: bool @ 0xc0 [0x1],
        /// The metadata register the color goes into: `reg_c_<return_reg_id>`, 0..=7.
        return_reg_id: u8 @ 0xc4 [0x4],
        /// Flow table type of the destination table (`FLOW_TABLE_TYPE_*`).
        table_type: u8 @ 0xc8 [0x8],
        /// The table packets go on to, colored.
        destination_table_id: u32 @ 0xe8 [0x18],
        /// The parameters are set (`flow_meter_params.valid`).
        valid: bool @ 0x180 [0x1],
        /// The committed bucket's overflow fills the excess bucket (single-rate, RFC 2697).
        bucket_overflow: bool @ 0x181 [0x1],
        /// The color a packet starts with (see [`color`]); 3 (undefined) lets the meter choose.
        start_color: u8 @ 0x182 [0x2],
        /// A green packet takes its bytes out of both buckets.
        both_buckets_on_green: bool @ 0x184 [0x1],
        /// What the buckets count: 0 bytes of the IP packet, 1 bytes of the L2 frame, 2 L2
        /// bytes and the inter-packet gap, 3 packets.
        meter_mode: u8 @ 0x186 [0x2],
        /// Committed burst size: `cbs_mantissa * 2^cbs_exponent` bytes (or packets).
        cbs_exponent: u8 @ 0x1c3 [0x5],
        /// See `cbs_exponent`.
        cbs_mantissa: u8 @ 0x1c8 [0x8],
        /// Committed rate: `10^9 * cir_mantissa / 2^cir_exponent` bytes (or packets) a second.
        cir_exponent: u8 @ 0x1d3 [0x5],
        /// See `cir_exponent`.
        cir_mantissa: u8 @ 0x1d8 [0x8],
        /// Excess burst size, as `cbs_*`.
        ebs_exponent: u8 @ 0x203 [0x5],
        /// See `ebs_exponent`.
        ebs_mantissa: u8 @ 0x208 [0x8],
        /// Excess rate, as `cir_*` (two-rate meters).
        eir_exponent: u8 @ 0x213 [0x5],
        /// See `eir_exponent`.
        eir_mantissa: u8 @ 0x218 [0x8],
        /// Where receive steering entries reach the meter (set by the device; QUERY).
        sw_steering_icm_address_rx: u64 @ 0x400 [0x40],
        /// Where transmit steering entries reach the meter (set by the device; QUERY).
        sw_steering_icm_address_tx: u64 @ 0x440 [0x40],
    }
}

layout! {
    /// QUERY_GENERAL_OBJECT output of a flow meter: the general object output header, then the
    /// meter as CREATE and MODIFY left it, with the ICM addresses its entries hit, which
    /// rdma-core reads (`dr_devx_query_meter`).
    pub struct QueryFlowMeterOut("query_flow_meter_out", 0x90) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x0 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
        /// The object's number.
        obj_id: u32 @ 0x40 [0x20],
        /// The meter colors packets.
        active: bool @ 0xc0 [0x1],
        /// The metadata register the color goes into.
        return_reg_id: u8 @ 0xc4 [0x4],
        /// Flow table type of the destination table.
        table_type: u8 @ 0xc8 [0x8],
        /// The table packets go on to.
        destination_table_id: u32 @ 0xe8 [0x18],
        /// The parameters are set.
        valid: bool @ 0x180 [0x1],
        /// The committed bucket's overflow fills the excess bucket.
        bucket_overflow: bool @ 0x181 [0x1],
        /// The color a packet starts with.
        start_color: u8 @ 0x182 [0x2],
        /// A green packet takes its bytes out of both buckets.
        both_buckets_on_green: bool @ 0x184 [0x1],
        /// What the buckets count.
        meter_mode: u8 @ 0x186 [0x2],
        /// Committed burst size's exponent.
        cbs_exponent: u8 @ 0x1c3 [0x5],
        /// Committed burst size's mantissa.
        cbs_mantissa: u8 @ 0x1c8 [0x8],
        /// Committed rate's exponent.
        cir_exponent: u8 @ 0x1d3 [0x5],
        /// Committed rate's mantissa.
        cir_mantissa: u8 @ 0x1d8 [0x8],
        /// Excess burst size's exponent.
        ebs_exponent: u8 @ 0x203 [0x5],
        /// Excess burst size's mantissa.
        ebs_mantissa: u8 @ 0x208 [0x8],
        /// Excess rate's exponent.
        eir_exponent: u8 @ 0x213 [0x5],
        /// Excess rate's mantissa.
        eir_mantissa: u8 @ 0x218 [0x8],
        /// Where receive steering entries reach the meter.
        sw_steering_icm_address_rx: u64 @ 0x400 [0x40],
        /// Where transmit steering entries reach the meter.
        sw_steering_icm_address_tx: u64 @ 0x440 [0x40],
    }
}
