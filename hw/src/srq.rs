//! XRC SRQ commands past creation: ARM_XRC_SRQ (setting the limit that raises the SRQ limit
//! event) and QUERY_XRC_SRQ (reading the context back), as Linux's mlx5_ib sends them
//! (`arm_xrc_srq_cmd` and `query_xrc_srq_cmd` in `drivers/infiniband/hw/mlx5/srq_cmd.c`; the
//! layouts from `mlx5_ifc.h`). The context itself is [`XrcSrqc`].

use crate::layout;
use crate::qp::XrcSrqc;

/// ARM_XRC_SRQ's one opcode modifier (`MLX5_ARM_XRC_SRQ_IN_OP_MOD_XRC_SRQ`).
pub const ARM_XRC_SRQ_OP_MOD_XRC_SRQ: u16 = 1;

layout! {
    /// ARM_XRC_SRQ input: arms the XRC SRQ's limit (low watermark).
    pub struct ArmXrcSrqIn("arm_xrc_srq_in", 0x10) {
        /// Command opcode: [`Opcode::ArmXrcSrq`](crate::cmd::Opcode::ArmXrcSrq).
        opcode: u16 @ 0x00 [0x10],
        /// User context id of the issuer (0 = the function itself).
        uid: u16 @ 0x10 [0x10],
        /// Opcode modifier: [`ARM_XRC_SRQ_OP_MOD_XRC_SRQ`].
        op_mod: u16 @ 0x30 [0x10],
        /// The XRC SRQ's number.
        xrc_srqn: u32 @ 0x48 [0x18],
        /// The limit, in WQEs: the event fires once when fewer are posted (0 disarms).
        lwm: u16 @ 0x70 [0x10],
    }
}

layout! {
    /// ARM_XRC_SRQ output.
    pub struct ArmXrcSrqOut("arm_xrc_srq_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Failure syndrome (0 on success).
        syndrome: u32 @ 0x20 [0x20],
    }
}

layout! {
    /// QUERY_XRC_SRQ input.
    pub struct QueryXrcSrqIn("query_xrc_srq_in", 0x10) {
        /// Command opcode: [`Opcode::QueryXrcSrq`](crate::cmd::Opcode::QueryXrcSrq).
        opcode: u16 @ 0x00 [0x10],
        /// User context id of the issuer (0 = the function itself).
        uid: u16 @ 0x10 [0x10],
        /// Opcode modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The XRC SRQ's number.
        xrc_srqn: u32 @ 0x48 [0x18],
    }
}

layout! {
    /// QUERY_XRC_SRQ output: the context (its `state` 0 while good, `lwm` the armed limit),
    /// then room for the buffer's page addresses.
    pub struct QueryXrcSrqOut("query_xrc_srq_out", 0x110) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Failure syndrome (0 on success).
        syndrome: u32 @ 0x20 [0x20],
    }
    nested {
        /// The XRC SRQ's context.
        xrc_srq_context_entry: XrcSrqc @ 0x80,
    }
}
