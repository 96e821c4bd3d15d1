//! Modify-header contexts (ALLOC_MODIFY_HEADER_CONTEXT, DEALLOC_MODIFY_HEADER_CONTEXT): a list
//! of 8-byte SET, ADD and COPY actions on named header and metadata fields, which a flow entry
//! applies to the packets it matches (`MLX5_FLOW_CONTEXT_ACTION_MOD_HDR` with its
//! `modify_header_id`). mlx5_core's `mlx5_cmd_modify_header_alloc` sends them for mlx5_ib's
//! flow actions (rdma-core's root-level `mlx5dv_dr_action_create_modify_header`).

use crate::layout;

/// `action_type`: write `data` into the field (`MLX5_ACTION_TYPE_SET`).
pub const ACTION_TYPE_SET: u8 = 0x1;
/// `action_type`: add `data` to the field (`MLX5_ACTION_TYPE_ADD`).
pub const ACTION_TYPE_ADD: u8 = 0x2;
/// `action_type`: copy bits from one field to another (`MLX5_ACTION_TYPE_COPY`).
pub const ACTION_TYPE_COPY: u8 = 0x3;

/// Bytes of one action in the list.
pub const ACTION_SIZE: usize = 8;
/// Byte offset of the action list in ALLOC_MODIFY_HEADER_CONTEXT's input.
pub const ACTIONS_BYTE: usize = 0x10;

/// Field numbers of the actions (`MLX5_ACTION_IN_FIELD_OUT_*`).
pub mod field {
    /// Source MAC bits 47:16.
    pub const SMAC_47_16: u16 = 0x1;
    /// Source MAC bits 15:0.
    pub const SMAC_15_0: u16 = 0x2;
    /// Ethertype.
    pub const ETHERTYPE: u16 = 0x3;
    /// Destination MAC bits 47:16.
    pub const DMAC_47_16: u16 = 0x4;
    /// Destination MAC bits 15:0.
    pub const DMAC_15_0: u16 = 0x5;
    /// IP DSCP.
    pub const IP_DSCP: u16 = 0x6;
    /// TCP flags.
    pub const TCP_FLAGS: u16 = 0x7;
    /// TCP source port.
    pub const TCP_SPORT: u16 = 0x8;
    /// TCP destination port.
    pub const TCP_DPORT: u16 = 0x9;
    /// IPv4 TTL.
    pub const IP_TTL: u16 = 0xa;
    /// UDP source port.
    pub const UDP_SPORT: u16 = 0xb;
    /// UDP destination port.
    pub const UDP_DPORT: u16 = 0xc;
    /// IPv6 source address bits 127:96 (then 95:64, 63:32, 31:0 at the next three numbers).
    pub const SIPV6_127_96: u16 = 0xd;
    /// IPv6 destination address bits 127:96 (then the next three numbers).
    pub const DIPV6_127_96: u16 = 0x11;
    /// IPv4 source address.
    pub const SIPV4: u16 = 0x15;
    /// IPv4 destination address.
    pub const DIPV4: u16 = 0x16;
    /// The first VLAN tag's id.
    pub const FIRST_VID: u16 = 0x17;
    /// IPv6 hop limit.
    pub const IPV6_HOPLIMIT: u16 = 0x47;
    /// Metadata register A.
    pub const METADATA_REGA: u16 = 0x49;
    /// Metadata register B.
    pub const METADATA_REGB: u16 = 0x50;
    /// Metadata register C 0 (then C 1 to C 5 at the next five numbers).
    pub const METADATA_REGC_0: u16 = 0x51;
    /// TCP sequence number.
    pub const TCP_SEQ_NUM: u16 = 0x59;
    /// TCP acknowledgement number.
    pub const TCP_ACK_NUM: u16 = 0x5b;
    /// IP ECN.
    pub const IP_ECN: u16 = 0x73;
}

layout! {
    /// ALLOC_MODIFY_HEADER_CONTEXT input; `num_of_actions` 8-byte actions follow from
    /// [`ACTIONS_BYTE`].
    pub struct AllocModifyHeaderContextIn("alloc_modify_header_context_in", 0x10) {
        /// Command opcode:
        /// [`Opcode::AllocModifyHeaderContext`](crate::cmd::Opcode::AllocModifyHeaderContext).
        opcode: u16 @ 0x0 [0x10],
        /// User context (DEVX).
        uid: u16 @ 0x10 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The flow table type whose entries use it (`FLOW_TABLE_TYPE_*`).
        table_type: u8 @ 0x60 [0x8],
        /// Number of actions.
        num_of_actions: u8 @ 0x78 [0x8],
    }
}

layout! {
    /// ALLOC_MODIFY_HEADER_CONTEXT output.
    pub struct AllocModifyHeaderContextOut("alloc_modify_header_context_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x0 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
        /// The new context's id.
        modify_header_id: u32 @ 0x40 [0x20],
    }
}

layout! {
    /// DEALLOC_MODIFY_HEADER_CONTEXT input.
    pub struct DeallocModifyHeaderContextIn("dealloc_modify_header_context_in", 0x10) {
        /// Command opcode:
        /// [`Opcode::DeallocModifyHeaderContext`](crate::cmd::Opcode::DeallocModifyHeaderContext).
        opcode: u16 @ 0x0 [0x10],
        /// User context (DEVX).
        uid: u16 @ 0x10 [0x10],
        /// The context to release.
        modify_header_id: u32 @ 0x40 [0x20],
    }
}

layout! {
    /// One SET or ADD action (`set_action_in`, `add_action_in`: ADD leaves `offset` and
    /// `length` 0).
    pub struct SetActionIn("set_action_in", 0x8) {
        /// `ACTION_TYPE_SET` or `ACTION_TYPE_ADD`.
        action_type: u8 @ 0x0 [0x4],
        /// The field (`field::*`).
        field: u16 @ 0x4 [0xc],
        /// First bit of the field written.
        offset: u8 @ 0x13 [0x5],
        /// Bits written (0 stands for 32).
        length: u8 @ 0x1b [0x5],
        /// The value, right-aligned.
        data: u32 @ 0x20 [0x20],
    }
}

layout! {
    /// One COPY action (`copy_action_in`).
    pub struct CopyActionIn("copy_action_in", 0x8) {
        /// `ACTION_TYPE_COPY`.
        action_type: u8 @ 0x0 [0x4],
        /// The field copied from.
        src_field: u16 @ 0x4 [0xc],
        /// First bit copied from.
        src_offset: u8 @ 0x13 [0x5],
        /// Bits copied (0 stands for 32).
        length: u8 @ 0x1b [0x5],
        /// The field copied to.
        dst_field: u16 @ 0x24 [0xc],
        /// First bit copied to.
        dst_offset: u8 @ 0x33 [0x5],
    }
}
