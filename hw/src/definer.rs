//! Match definers: a general object of type
//! [`obj_type::MATCH_DEFINER`](crate::general_obj::obj_type::MATCH_DEFINER) naming which packet
//! fields, under which mask, the software steering entries that name it compare and hash. A
//! predefined format (`format_id`, one of the bits of
//! [`match_definer_format_supported`](crate::caps::CmdHcaCap::match_definer_format_supported))
//! fixes the fields and their places in a 32-byte tag; the object adds the mask.
//!
//! rdma-core's DR builds a matcher on one definer when the capability offers a format that
//! takes the matcher's whole mask (dr_matcher.c `dr_matcher_set_definer_builders`), creates
//! the object with the format and the mask in the format's tag layout
//! (`dr_devx_create_definer`), and writes entries whose lookup type is
//! `DR_STE_V1_LU_TYPE_MATCH | object_id` (`dr_matcher_create_definer_objs`): the object's
//! number is the entry's 8-bit `match_definer_ctx_idx`. Field offsets are rdma-core's
//! `mlx5_ifc_create_definer_in_bits` and `mlx5_ifc_definer_bits` (the definer from bit 0x80);
//! Linux's `mlx5_ifc_match_definer_bits` places `format_id` at the same bit.

use crate::layout;

/// Bytes of a predefined format's tag and of its mask (`DR_STE_SIZE_MATCH_TAG`,
/// `match_mask_dw_7_0`).
pub const DEFINER_TAG_BYTES: usize = 32;

/// The predefined formats the model knows by number (`enum dr_matcher_definer` in rdma-core's
/// dr_ste.h).
pub mod format {
    /// Format 0 (`DR_MATCHER_DEFINER_0`, `ste_def0_v1`): `metadata_reg_c_0` and `_1`, both
    /// MACs, ethertype, fragment bit, L3 and L4 types, both VLANs, TCP flags, checksum and
    /// `*_ok` bits. rdma-core tries it first.
    pub const DEF0: u16 = 0;
    /// Format 2 (`DR_MATCHER_DEFINER_2`, `ste_def2_v1`): `metadata_reg_a`, the outer IP
    /// header's fields, L4 ports, TCP data offset and flags, fragment bits, `*_ok` bits.
    pub const DEF2: u16 = 2;
    /// Format 16 (`DR_MATCHER_DEFINER_16`, `ste_def16_v1`): tunnel header words, a random
    /// number, `metadata_reg_a`, L3, L4 and first VLAN types, fragment bit, source GVMI and
    /// SQ number.
    pub const DEF16: u16 = 16;
    /// Format 33 (`DR_MATCHER_DEFINER_33`, `ste_def33_v1`): outer IPv4 addresses and L4 ports,
    /// fragment bit, L3 and L4 types, first VLAN, IP version, IHL, TTL, protocol, `*_ok` bits.
    pub const DEF33: u16 = 33;
    /// Format 22 (`DR_MATCHER_DEFINER_22`, rdma-core's `ste_def22_v1` layout): outer IPv4
    /// addresses and L4 ports, fragment bit, L3 and L4 types, first VLAN, `metadata_reg_c_0`,
    /// destination and source MACs.
    pub const DEF22: u16 = 22;
    /// Format 24 (`DR_MATCHER_DEFINER_24`, `ste_def24_v1`): `metadata_reg_c_0..3`, outer IPv4
    /// addresses and L4 ports, outer and inner IP protocol, L3 and L4 types, first VLAN type
    /// and fragment bit.
    pub const DEF24: u16 = 24;
    /// Format 25 (`DR_MATCHER_DEFINER_25`, `ste_def25_v1`): the tunnelled packet's IPv4
    /// addresses and L4 ports, both header sets' L3, L4 and first VLAN types, the outer L4
    /// destination port, two tunnel header words.
    pub const DEF25: u16 = 25;
    /// Format 28 (`DR_MATCHER_DEFINER_28`, `ste_def28_v1`): outer and inner IPv4 addresses and
    /// L4 ports, both header sets' protocol, types and fragment bit, a GTP-U TEID.
    pub const DEF28: u16 = 28;
    /// Format 26 (`DR_MATCHER_DEFINER_26`, `ste_def26_v1`): outer IPv6 source address,
    /// fragment bit, L3 and L4 types, both VLANs, source MAC, IP protocol, TCP flags. rdma-core
    /// builds an IPv6 matcher on it, with format 6 after it when the destination is matched
    /// too.
    pub const DEF26: u16 = 26;
    /// Format 6 (`DR_MATCHER_DEFINER_6`, `ste_def6_v1`): outer IPv6 destination address, L4
    /// ports, fragment bit, TCP flags.
    pub const DEF6: u16 = 6;
}

layout! {
    /// CREATE_GENERAL_OBJECT input of a match definer, as rdma-core's `dr_devx_create_definer`
    /// fills it: the general object header, then the definer. DESTROY_GENERAL_OBJECT sends the
    /// header alone.
    pub struct CreateMatchDefinerIn("create_definer_in", 0x90) {
        /// Command opcode:
        /// [`Opcode::CreateGeneralObject`](crate::cmd::Opcode::CreateGeneralObject).
        opcode: u16 @ 0x00 [0x10],
        /// User context the object belongs to (DEVX).
        uid: u16 @ 0x10 [0x10],
        /// Object type: [`obj_type::MATCH_DEFINER`](crate::general_obj::obj_type::MATCH_DEFINER).
        obj_type: u16 @ 0x30 [0x10],
        /// Ignored by CREATE, which hands out the number.
        obj_id: u32 @ 0x40 [0x20],
        /// Fields MODIFY_GENERAL_OBJECT would change (0 at CREATE).
        modify_field_select: u64 @ 0x80 [0x40],
        /// The predefined format (see [`format`](mod@format)).
        format_id: u16 @ 0x110 [0x10],
    }
    arrays {
        /// The definer's control words and the mask's double words 11..8 (`ctrl`,
        /// `match_mask_dw_11_8`), 32 bytes from bit 0x280: selectors of a format built by
        /// the caller, which predefined formats leave zero.
        select_and_high_mask: u8 @ 0x280 [0x8],
        /// The mask over the format's 32-byte tag (`match_mask_dw_7_0`), bytes 0..32 in the
        /// tag's order.
        match_mask: u8 @ 0x380 [0x8],
    }
}
