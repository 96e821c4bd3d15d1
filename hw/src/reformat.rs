//! Packet reformat contexts (ALLOC_PACKET_REFORMAT_CONTEXT, DEALLOC_PACKET_REFORMAT_CONTEXT):
//! a header the device inserts (encapsulation) or writes after removing a tunnel's
//! (decapsulation to L2), named by the returned `packet_reformat_id` in flow entries and in
//! software steering entries' INSERT_POINTER actions (rdma-core's `dr_devx_create_reformat_ctx`
//! allocates one for every transmit encapsulation action).

use crate::layout;

/// `reformat_type`: Ethernet frame into VXLAN (`MLX5_REFORMAT_TYPE_L2_TO_VXLAN`).
pub const REFORMAT_TYPE_L2_TO_VXLAN: u8 = 0x0;
/// `reformat_type`: Ethernet frame into NVGRE (`MLX5_REFORMAT_TYPE_L2_TO_NVGRE`).
pub const REFORMAT_TYPE_L2_TO_NVGRE: u8 = 0x1;
/// `reformat_type`: Ethernet frame into an L2 tunnel, the data the whole outer header
/// (`MLX5_REFORMAT_TYPE_L2_TO_L2_TUNNEL`).
pub const REFORMAT_TYPE_L2_TO_L2_TUNNEL: u8 = 0x2;
/// `reformat_type`: an L3 tunnel's outer headers removed and the data, an Ethernet header,
/// put before the inner IP packet (`MLX5_REFORMAT_TYPE_L3_TUNNEL_TO_L2`).
pub const REFORMAT_TYPE_L3_TUNNEL_TO_L2: u8 = 0x3;
/// `reformat_type`: the frame's Ethernet header replaced by an L3 tunnel's outer headers
/// (`MLX5_REFORMAT_TYPE_L2_TO_L3_TUNNEL`).
pub const REFORMAT_TYPE_L2_TO_L3_TUNNEL: u8 = 0x4;

/// Byte offset of the reformat data in ALLOC_PACKET_REFORMAT_CONTEXT's input (the context at
/// bit 0xe0, its data at bit 0x30 of it).
pub const REFORMAT_DATA_BYTE: usize = 0x22;

layout! {
    /// ALLOC_PACKET_REFORMAT_CONTEXT input, up to the first two bytes of the data (the rest
    /// follows from [`REFORMAT_DATA_BYTE`] + 2).
    pub struct AllocPacketReformatContextIn("alloc_packet_reformat_context_in", 0x24) {
        /// Command opcode:
        /// [`Opcode::AllocPacketReformatContext`](crate::cmd::Opcode::AllocPacketReformatContext).
        opcode: u16 @ 0x0 [0x10],
        /// User context (DEVX).
        uid: u16 @ 0x10 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
    }
    nested {
        /// The context: type, size and data.
        packet_reformat_context: PacketReformatContextIn @ 0xe0,
    }
}

layout! {
    /// A packet reformat context's type and data size; the data follows at bit 0x30.
    pub struct PacketReformatContextIn("packet_reformat_context_in", 0x8) {
        /// `REFORMAT_TYPE_*`.
        reformat_type: u8 @ 0x0 [0x8],
        /// Type-specific parameter (0 for the tunnel types).
        reformat_param_0: u8 @ 0xc [0x4],
        /// Bytes of data (10 bits; at most the capability `max_encap_header_size`).
        reformat_data_size: u16 @ 0x16 [0xa],
        /// Type-specific parameter (0 for the tunnel types).
        reformat_param_1: u8 @ 0x20 [0x8],
    }
}

layout! {
    /// ALLOC_PACKET_REFORMAT_CONTEXT output.
    pub struct AllocPacketReformatContextOut("alloc_packet_reformat_context_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x0 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
        /// The new context's id.
        packet_reformat_id: u32 @ 0x40 [0x20],
    }
}

layout! {
    /// DEALLOC_PACKET_REFORMAT_CONTEXT input.
    pub struct DeallocPacketReformatContextIn("dealloc_packet_reformat_context_in", 0x10) {
        /// Command opcode:
        /// [`Opcode::DeallocPacketReformatContext`](crate::cmd::Opcode::DeallocPacketReformatContext).
        opcode: u16 @ 0x0 [0x10],
        /// User context (DEVX).
        uid: u16 @ 0x10 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The context to release.
        packet_reformat_id: u32 @ 0x40 [0x20],
    }
}
