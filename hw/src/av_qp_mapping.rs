//! AV-to-QP mappings: a general object of type
//! [`obj_type::AV_QP_MAPPING`](crate::general_obj::obj_type::AV_QP_MAPPING) that ties a
//! destination's address vector to a QP, whose congestion control settings (its ECE) the
//! device then applies to traffic towards that destination from DC and UD QPs. It is a hint:
//! it changes no packet's contents.
//!
//! rdma-core's `mlx5dv_map_ah_to_qp` (`_mlx5dv_map_ah_to_qp`, providers/mlx5/verbs.c) creates
//! one through DEVX for a global address handle: the QP number it is given, and from the
//! handle's address vector the service level byte, the source GID index and the destination
//! GID. The handle keeps the object and destroys it with itself. Field offsets are rdma-core's
//! `mlx5_ifc_av_qp_mapping_bits` and `mlx5_ifc_ud_av_bits`; Linux 6.12's header has neither.

use crate::layout;

layout! {
    /// CREATE_GENERAL_OBJECT input of an AV-to-QP mapping, as libmlx5 fills it: the general
    /// object header, then the mapping. DESTROY_GENERAL_OBJECT and QUERY_GENERAL_OBJECT send
    /// the header alone.
    pub struct CreateAvQpMappingIn("create_av_qp_mapping_in", 0x50) {
        /// Command opcode:
        /// [`Opcode::CreateGeneralObject`](crate::cmd::Opcode::CreateGeneralObject).
        opcode: u16 @ 0x00 [0x10],
        /// User context the object belongs to (DEVX).
        uid: u16 @ 0x10 [0x10],
        /// Object type:
        /// [`obj_type::AV_QP_MAPPING`](crate::general_obj::obj_type::AV_QP_MAPPING).
        obj_type: u16 @ 0x30 [0x10],
        /// Ignored by CREATE, which hands out the number.
        obj_id: u32 @ 0x40 [0x20],
        /// Fields MODIFY_GENERAL_OBJECT would change (0 at CREATE; libmlx5 never modifies).
        modify_field_select: u64 @ 0x80 [0x40],
        /// The QP whose congestion control settings apply towards the destination.
        qpn: u32 @ 0xe0 [0x20],
        /// Service level (Ethernet priority on RoCE) of the address vector: libmlx5 writes
        /// the low four bits of its AV's `stat_rate_sl`.
        sl_or_eth_prio: u8 @ 0x164 [0x4],
        /// Index of the source GID in the port's RoCE address table.
        src_addr_index: u8 @ 0x1e4 [0x8],
    }
    arrays {
        /// Byte `index` (0..16) of the destination GID (RoCE: an IPv6 or IPv4-mapped
        /// address), in network order.
        rgid_or_rip: u8 @ 0x200 [0x8],
    }
}

layout! {
    /// QUERY_GENERAL_OBJECT output of an AV-to-QP mapping: the general object output header,
    /// then the mapping as CREATE gave it.
    pub struct QueryAvQpMappingOut("query_av_qp_mapping_out", 0x50) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x0 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
        /// The object's number.
        obj_id: u32 @ 0x40 [0x20],
        /// The QP the mapping names.
        qpn: u32 @ 0xe0 [0x20],
        /// Service level (Ethernet priority) of the address vector.
        sl_or_eth_prio: u8 @ 0x164 [0x4],
        /// Index of the source GID.
        src_addr_index: u8 @ 0x1e4 [0x8],
    }
    arrays {
        /// Byte `index` (0..16) of the destination GID, in network order.
        rgid_or_rip: u8 @ 0x200 [0x8],
    }
}
