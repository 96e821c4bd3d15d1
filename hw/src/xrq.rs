//! XRQs (extended receive queues) and hardware tag matching: the XRQ context with its
//! tag-matching topology context, CREATE_XRQ / DESTROY_XRQ / QUERY_XRQ / ARM_XRQ as Linux's
//! mlx5_ib sends them for an `IBV_SRQT_TM` SRQ (`create_xrq_cmd`, `destroy_xrq_cmd`,
//! `query_xrq_cmd`, `arm_xrq_cmd` in `drivers/infiniband/hw/mlx5/srq_cmd.c`), the tag-matching
//! WQE segment libmlx5 posts on the SRQ's command QP (`struct mlx5_wqe_tm_seg`, `set_tm_seg` in
//! `providers/mlx5/qp.c`) and the values libmlx5 reads in tag-matching CQEs
//! (`handle_tag_matching` in `providers/mlx5/cq.c`), and the tag-matching header a sender
//! puts first in its SEND (`struct ibv_tmh`, `struct ibv_rvh` of libibverbs' `tm_types.h`).

use crate::layout;
use crate::wq::Wq;

/// `xrqc.topology`: a tag-matching XRQ (`MLX5_XRQC_TOPOLOGY_TAG_MATCHING`).
pub const XRQC_TOPOLOGY_TAG_MATCHING: u8 = 0x1;
/// `xrqc.topology`: no special topology (a plain XRQ).
pub const XRQC_TOPOLOGY_NO_SPECIAL: u8 = 0x0;
/// `xrqc.offload`: the device offloads rendezvous (`MLX5_XRQC_OFFLOAD_RNDV`).
pub const XRQC_OFFLOAD_RNDV: u8 = 0x1;
/// `xrqc.state`: good.
pub const XRQC_STATE_GOOD: u8 = 0x0;
/// `xrqc.state`: error.
pub const XRQC_STATE_ERROR: u8 = 0x1;
/// ARM_XRQ's opcode modifier for an XRQ (`MLX5_ARM_XRQ_IN_OP_MOD_XRQ`).
pub const ARM_XRQ_OP_MOD_XRQ: u16 = 0x1;
/// `qpc.offload_type` of a QP whose SRQ is a tag-matching XRQ (`MLX5_QPC_OFFLOAD_TYPE_RNDV`).
pub const QPC_OFFLOAD_TYPE_RNDV: u8 = 0x1;

layout! {
    /// Tag-matching topology context of an XRQ: the matching list's size and the phase
    /// counters that keep software and device in step over unexpected messages.
    pub struct TagMatchingTopologyContext("tag_matching_topology_context", 0x10) {
        /// Log2 of the matching list's entries.
        log_matching_list_sz: u8 @ 0x00 [0x4],
        /// The list entry the next APPEND fills.
        append_next_index: u16 @ 0x10 [0x10],
        /// Unexpected messages software has reported handled (the last `sw_cnt` given).
        sw_phase_cnt: u16 @ 0x20 [0x10],
        /// Unexpected messages the device has delivered.
        hw_phase_cnt: u16 @ 0x30 [0x10],
    }
}

layout! {
    /// XRQ context: a linked-list receive queue with its own CQ and user index, optionally a
    /// tag-matching list.
    pub struct Xrqc("xrqc", 0x140) {
        /// State: [`XRQC_STATE_GOOD`] or [`XRQC_STATE_ERROR`].
        state: u8 @ 0x00 [0x4],
        /// Reserved lkey allowed in the XRQ's WQEs.
        rlkey: bool @ 0x04 [0x1],
        /// Topology: [`XRQC_TOPOLOGY_TAG_MATCHING`] or none.
        topology: u8 @ 0x14 [0x4],
        /// Offloads: [`XRQC_OFFLOAD_RNDV`] or none.
        offload: u8 @ 0x1c [0x4],
        /// Index written into its CQEs (`srqn_uidx`), by which libmlx5 finds the SRQ.
        user_index: u32 @ 0x28 [0x18],
        /// CQ its receives and list operations complete on.
        cqn: u32 @ 0x48 [0x18],
        /// The XRQ serves DC targets.
        dc: bool @ 0x7f [0x1],
    }
    nested {
        /// The tag-matching list's context.
        tag_matching_topology_context: TagMatchingTopologyContext @ 0x100,
        /// The receive ring.
        wq: Wq @ 0x400,
    }
}

layout! {
    /// CREATE_XRQ input: the context, then the ring's page addresses.
    pub struct CreateXrqIn("create_xrq_in", 0x150) {
        /// Command opcode: [`Opcode::CreateXrq`](crate::cmd::Opcode::CreateXrq).
        opcode: u16 @ 0x00 [0x10],
        /// User context id of the issuer (0 = the function itself).
        uid: u16 @ 0x10 [0x10],
        /// Opcode modifier (0).
        op_mod: u16 @ 0x30 [0x10],
    }
    nested {
        /// The new XRQ's context.
        xrq_context: Xrqc @ 0x80,
    }
    arrays {
        /// Bus addresses of the ring's pages (`xrq_context.wq.pas`).
        pas: u64 @ 0xa80 [0x40],
    }
}

layout! {
    /// CREATE_XRQ output.
    pub struct CreateXrqOut("create_xrq_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Failure syndrome (0 on success).
        syndrome: u32 @ 0x20 [0x20],
        /// The new XRQ's number (in the SRQ number space).
        xrqn: u32 @ 0x48 [0x18],
    }
}

layout! {
    /// DESTROY_XRQ input.
    pub struct DestroyXrqIn("destroy_xrq_in", 0x10) {
        /// Command opcode: [`Opcode::DestroyXrq`](crate::cmd::Opcode::DestroyXrq).
        opcode: u16 @ 0x00 [0x10],
        /// User context id of the issuer (0 = the function itself).
        uid: u16 @ 0x10 [0x10],
        /// Opcode modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The XRQ.
        xrqn: u32 @ 0x48 [0x18],
    }
}

layout! {
    /// QUERY_XRQ input.
    pub struct QueryXrqIn("query_xrq_in", 0x10) {
        /// Command opcode: [`Opcode::QueryXrq`](crate::cmd::Opcode::QueryXrq).
        opcode: u16 @ 0x00 [0x10],
        /// User context id of the issuer (0 = the function itself).
        uid: u16 @ 0x10 [0x10],
        /// Opcode modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The XRQ.
        xrqn: u32 @ 0x48 [0x18],
    }
}

layout! {
    /// QUERY_XRQ output: the context as it stands.
    pub struct QueryXrqOut("query_xrq_out", 0x150) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Failure syndrome (0 on success).
        syndrome: u32 @ 0x20 [0x20],
    }
    nested {
        /// The XRQ's context.
        xrq_context: Xrqc @ 0x80,
    }
}

layout! {
    /// ARM_XRQ input: arms the XRQ's limit (low watermark).
    pub struct ArmXrqIn("arm_xrq_in", 0x10) {
        /// Command opcode: [`Opcode::ArmXrq`](crate::cmd::Opcode::ArmXrq).
        opcode: u16 @ 0x00 [0x10],
        /// User context id of the issuer (0 = the function itself).
        uid: u16 @ 0x10 [0x10],
        /// Opcode modifier: [`ARM_XRQ_OP_MOD_XRQ`].
        op_mod: u16 @ 0x30 [0x10],
        /// The XRQ.
        xrqn: u32 @ 0x48 [0x18],
        /// The limit, in WQEs (0 disarms).
        lwm: u16 @ 0x70 [0x10],
    }
}

/// The tag-matching WQE opcode (`MLX5_OPCODE_TAG_MATCHING`) of a QP whose SRQ is a
/// tag-matching XRQ.
pub const WQE_OPCODE_TAG_MATCHING: u8 = 0x28;

/// List operations of [`TmSeg::opcode`] (`MLX5_TM_OPCODE_*`).
pub mod tm_opcode {
    /// No list change: only the flags (a SYNC).
    pub const NOP: u8 = 0x0;
    /// Append a tag at the list's next entry.
    pub const APPEND: u8 = 0x1;
    /// Remove the tag at `index`.
    pub const REMOVE: u8 = 0x2;
}

/// [`TmSeg::flags`] bits (`MLX5_SRQ_FLAG_TM_*`).
pub mod tm_flags {
    /// `sw_cnt` carries the unexpected messages software has handled.
    pub const SW_CNT: u8 = 1 << 6;
    /// The operation completes with a CQE.
    pub const CQE_REQ: u8 = 1 << 7;
}

layout! {
    /// Tag-matching segment of a TAG_MATCHING WQE (`struct mlx5_wqe_tm_seg`): after the
    /// control segment; an APPEND is followed by one data segment (the tagged buffer).
    pub struct TmSeg("mlx5_wqe_tm_seg", 0x20) {
        /// List operation ([`tm_opcode`]), in the byte's high nibble.
        opcode: u8 @ 0x00 [0x4],
        /// [`tm_flags`].
        flags: u8 @ 0x08 [0x8],
        /// APPEND: the entry the next APPEND fills; REMOVE: the entry to remove.
        index: u16 @ 0x10 [0x10],
        /// Unexpected messages software has handled (with [`tm_flags::SW_CNT`]).
        sw_cnt: u16 @ 0x30 [0x10],
        /// APPEND: the tag.
        append_tag: u64 @ 0x80 [0x40],
        /// APPEND: the mask (a message matches when its tag and the entry's agree under it).
        append_mask: u64 @ 0xc0 [0x40],
    }
}

/// CQE `app` of a tag-matching completion (`MLX5_CQE_APP_TAG_MATCHING`).
pub const CQE_APP_TAG_MATCHING: u8 = 1;

/// CQE `app_op` of a tag-matching completion (`MLX5_CQE_APP_OP_TM_*`).
pub mod cqe_app_op {
    /// A rendezvous matched; its data comes later.
    pub const CONSUMED: u8 = 0x1;
    /// The rendezvous data of a matched tag has landed.
    pub const EXPECTED: u8 = 0x2;
    /// A tagged message matched no tag: it landed in an ordinary WQE.
    pub const UNEXPECTED: u8 = 0x3;
    /// A message sent without a tag landed in an ordinary WQE.
    pub const NO_TAG: u8 = 0x4;
    /// An APPEND completed.
    pub const APPEND: u8 = 0x5;
    /// A REMOVE completed.
    pub const REMOVE: u8 = 0x6;
    /// A NOP (SYNC) completed.
    pub const NOOP: u8 = 0x7;
    /// A rendezvous matched a buffer too small: the headers landed, software finishes it.
    pub const CONSUMED_SW_RNDV: u8 = 0x9;
    /// An eager message matched and landed whole.
    pub const CONSUMED_MSG: u8 = 0xa;
    /// As [`CONSUMED_SW_RNDV`], in one completion.
    pub const CONSUMED_MSG_SW_RNDV: u8 = 0xb;
    /// A matched message's transfer was abandoned (libmlx5: IBV_WC_TM_RNDV_INCOMPLETE).
    pub const MSG_COMPLETION_CANCELED: u8 = 0xc;
}

/// Bit of the list-operation CQE's first word telling a REMOVE succeeded
/// (`MLX5_TMC_SUCCESS`).
pub const TM_CQE_SUCCESS: u32 = 0x8000_0000;

/// The tag-matching header's operations (`enum ibv_tmh_op`).
pub mod tmh_op {
    /// A message without a tag: always unexpected.
    pub const NO_TAG: u8 = 0;
    /// A rendezvous request: TMH, RVH, optional data.
    pub const RNDV: u8 = 1;
    /// A rendezvous completion notice.
    pub const FIN: u8 = 2;
    /// An eager message: TMH then payload.
    pub const EAGER: u8 = 3;
}

/// Bytes of the tag-matching header (`struct ibv_tmh`: opcode, 3 reserved, app_ctx, tag).
pub const TMH_LEN: usize = 16;
/// Bytes of the rendezvous header (`struct ibv_rvh`: va, rkey, len).
pub const RVH_LEN: usize = 16;
/// Largest rendezvous request the device takes (`max_rndv_hdr_size`, mlx5_ib's
/// `MLX5_TM_MAX_RNDV_MSG_SIZE`).
pub const MAX_RNDV_MSG: usize = 64;
