//! General objects: CREATE_GENERAL_OBJECT, MODIFY_GENERAL_OBJECT, QUERY_GENERAL_OBJECT and
//! DESTROY_GENERAL_OBJECT share one command header naming the object's type and number
//! (`general_obj_in_cmd_hdr` / `general_obj_out_cmd_hdr` in Linux's and rdma-core's
//! `mlx5_ifc.h`); the type-specific body follows it. The types a device takes are the bits of
//! the general capability [`general_obj_types`](crate::caps::CmdHcaCap::general_obj_types).
//!
//! rdma-core's libmlx5 sends them through DEVX (`reserved_qpn_blk_alloc` in
//! `providers/mlx5/mlx5.c`), and mlx5_ib destroys what a user context created with the
//! DESTROY_GENERAL_OBJECT it builds from the creating header (`devx_obj_build_destroy_cmd`).

use crate::layout;

/// Values of [`GeneralObjInCmdHdr::obj_type`] (`MLX5_OBJ_TYPE_*`) the model knows by name.
pub mod obj_type {
    /// A piece of software-owned ICM (`MLX5_OBJ_TYPE_SW_ICM`): a range of one of the SW ICM
    /// areas of the device-memory capability page, which SW ICM memory keys may cover
    /// ([`crate::sw_icm`]).
    pub const SW_ICM: u16 = 0x8;
    /// A flow meter (`MLX5_OBJ_TYPE_FLOW_METER`): packets steering entries send to it are
    /// colored by its token buckets and go on to its destination table ([`crate::meter`]).
    pub const FLOW_METER: u16 = 0xa;
    /// A match definer (`MLX5_OBJ_TYPE_MATCH_DEFINER`): which packet fields, under which
    /// mask, the steering entries naming it compare and hash ([`crate::definer`]).
    pub const MATCH_DEFINER: u16 = 0x18;
    /// A flow sampler (`MLX5_OBJ_TYPE_FLOW_SAMPLER`): packets steering entries send to it go
    /// on to its default table, one in `sample_ratio` copied to its sample table
    /// ([`crate::sampler`]).
    pub const FLOW_SAMPLER: u16 = 0x20;
    /// A block of reserved QP numbers (`MLX5_OBJ_TYPE_RESERVED_QPN`): QP numbers no QP or DCT
    /// is given while the object lives, which software may hand to a peer (an RDMA CM
    /// connection's QP number) without a QP behind them.
    pub const RESERVED_QPN: u16 = 0x2c;
    /// A NIC scheduling element (`MLX5_OBJ_TYPE_SCHEDULING_ELEMENT`): a TSAR or queue group
    /// as libmlx5's `mlx5dv_sched_node_create` / `_leaf_create` make them.
    pub const SCHEDULING_ELEMENT: u16 = 0x26;
    /// An AV-to-QP mapping (`MLX5_OBJ_TYPE_AV_QP_MAPPING` in rdma-core's `mlx5_ifc.h`): a
    /// destination's address vector tied to the QP whose congestion control settings apply
    /// towards it ([`crate::av_qp_mapping`]).
    pub const AV_QP_MAPPING: u16 = 0x3a;
}

/// The [`general_obj_types`](crate::caps::CmdHcaCap::general_obj_types) bit of object type
/// `ty` (`1ULL << MLX5_OBJ_TYPE_*`); 0 for a type past the mask's 64 bits.
pub const fn general_obj_types_bit(ty: u16) -> u64 {
    if ty < 64 {
        1u64 << ty
    } else {
        0
    }
}

layout! {
    /// The header every general object command's input starts with.
    pub struct GeneralObjInCmdHdr("general_obj_in_cmd_hdr", 0x10) {
        /// Command opcode: one of the four general object opcodes
        /// ([`Opcode::CreateGeneralObject`](crate::cmd::Opcode::CreateGeneralObject) ...).
        opcode: u16 @ 0x00 [0x10],
        /// The user context the command acts for (0: the function's own driver).
        uid: u16 @ 0x10 [0x10],
        /// The object's type: see [`obj_type`].
        obj_type: u16 @ 0x30 [0x10],
        /// The object's number (ignored by CREATE, which hands one out).
        obj_id: u32 @ 0x40 [0x20],
        /// Log2 of the number of objects one CREATE makes (for RESERVED_QPN: of the QP
        /// numbers the object holds).
        log_obj_range: u8 @ 0x63 [0x5],
    }
}

layout! {
    /// The header every general object command's output starts with.
    pub struct GeneralObjOutCmdHdr("general_obj_out_cmd_hdr", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Failure syndrome (0 on success).
        syndrome: u32 @ 0x20 [0x20],
        /// The object's number: CREATE's new object (for RESERVED_QPN, its first QP number,
        /// which libmlx5 takes as the block's first QPN).
        obj_id: u32 @ 0x40 [0x20],
    }
}
