//! The action words of an STEv1 entry (rdma-core mlx5_ifc.h `ste_single_action_*_v1` and
//! `ste_double_action_*_v1`; ids in dr_ste_v1.h `enum dr_ste_v1_action_id`). The first byte of
//! each word is the action id; single actions take 4 bytes, double actions 8. rdma-core packs
//! them from the start of the area (`dr_ste_v1_set_actions_rx/tx`) and leaves the rest zero,
//! which reads as NOPs.
//!
//! The walker records the actions for the caller, which owns the packet and applies them.
//! Header-modify actions keep the device's field codes (`DR_STE_V1_ACTION_MDFY_FLD_*`) and raw
//! shifter values (rdma-core adds `MLX5_MODIFY_HEADER_V1_QW_OFFSET`, 0x20, to the bit offset).

/// Action ids (dr_ste_v1.h).
mod id {
    pub(super) const NOP: u8 = 0x00;
    pub(super) const COPY: u8 = 0x05;
    pub(super) const SET: u8 = 0x06;
    pub(super) const ADD: u8 = 0x07;
    pub(super) const REMOVE_BY_SIZE: u8 = 0x08;
    pub(super) const REMOVE_HEADER_TO_HEADER: u8 = 0x09;
    pub(super) const INSERT_INLINE: u8 = 0x0a;
    pub(super) const INSERT_POINTER: u8 = 0x0b;
    pub(super) const FLOW_TAG: u8 = 0x0c;
    pub(super) const MODIFY_LIST: u8 = 0x0f;
}

/// One action an entry asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// Report `tag` (24 bits) in the receive CQE's flow tag (`single_action_flow_tag_v1`).
    FlowTag(u32),
    /// Write `data` into a header field (`double_action_set_v1`).
    Set {
        /// Destination field code (`destination_dw_offset`).
        field: u8,
        /// Destination left shifter (6 bits, bit offset + 0x20).
        shift: u8,
        /// Bits to write (6 bits; 0 stands for 32).
        len: u8,
        /// Value, right-aligned.
        data: u32,
    },
    /// Add `data` to a header field (`double_action_add_v1`).
    Add {
        /// Destination field code.
        field: u8,
        /// Destination left shifter (6 bits, bit offset + 0x20).
        shift: u8,
        /// Bits the field has (6 bits; 0 stands for 32).
        len: u8,
        /// Addend.
        data: u32,
    },
    /// Copy bits between header fields (`double_action_copy_v1`).
    Copy {
        /// Destination field code.
        dst_field: u8,
        /// Destination left shifter (6 bits, bit offset + 0x20).
        dst_shift: u8,
        /// Bits to copy (6 bits; 0 stands for 32).
        len: u8,
        /// Source field code (`source_dw_offset`).
        src_field: u8,
        /// Source right shifter (6 bits, bit offset + 0x20).
        src_shift: u8,
    },
    /// Run `count` 8-byte modify actions stored in the header-modify ICM at `index` × 64 bytes
    /// from its start (`single_action_modify_list_v1`; dr_ste.c `dr_ste_alloc_modify_hdr_chunk`).
    ModifyList {
        /// Number of actions (8 bits).
        count: u8,
        /// Index of the 64-byte block (16 bits).
        index: u16,
    },
    /// Insert 4 bytes (`double_action_insert_with_inline_v1`; push VLAN writes anchor 0,
    /// offset 6 words: after the MAC addresses).
    InsertInline {
        /// Start anchor (6 bits, `enum dr_ste_v1_header_anchors`).
        anchor: u8,
        /// Offset from the anchor in 2-byte words (7 bits).
        offset_words: u8,
        /// The bytes to insert, in network order.
        data: u32,
    },
    /// Remove bytes (`single_action_remove_header_size_v1`; pop VLAN writes anchor 2, the first
    /// VLAN, and 2 words per tag).
    RemoveBySize {
        /// Start anchor (6 bits).
        anchor: u8,
        /// Offset from the anchor in 2-byte words (7 bits).
        offset_words: u8,
        /// Bytes to remove in 2-byte words (6 bits).
        size_words: u8,
        /// Also remove the outer L4 header.
        outer_l4_remove: bool,
    },
    /// Remove from one anchor to another (`single_action_remove_header_v1`: decap).
    RemoveHeaderToHeader {
        /// Start anchor (6 bits).
        start_anchor: u8,
        /// End anchor (6 bits).
        end_anchor: u8,
        /// Decapsulation.
        decap: bool,
        /// Report the VNI in the CQE.
        vni_to_cqe: bool,
    },
    /// Insert a header from the reformat object `pointer` (`double_action_insert_with_ptr_v1`).
    InsertPointer {
        /// Start anchor (6 bits).
        anchor: u8,
        /// Offset from the anchor in 2-byte words (7 bits).
        offset_words: u8,
        /// Header size in 2-byte words (6 bits).
        size_words: u8,
        /// Attributes (3 bits): 0 push header, 1 encapsulation, 2 IPsec.
        attributes: u8,
        /// Reformat id.
        pointer: u32,
    },
}

/// Why an action area could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ActionError {
    /// An action id the model does not know or implement (ASO, accelerated lists, ...).
    #[error("unsupported STE action id {0:#04x}")]
    Unknown(u8),
    /// A double action starts in the area's last 4 bytes.
    #[error("STE double action {0:#04x} runs past the action area")]
    Truncated(u8),
}

/// Bits `hi..=lo` of a double word.
fn field(dw: u32, hi: u32, lo: u32) -> u32 {
    (dw >> lo) & ((1u32 << (hi - lo + 1)) - 1)
}

/// Big-endian double word at byte `off` of `area`, if all four bytes are there.
fn dw_at(area: &[u8], off: usize) -> Option<u32> {
    let b = area.get(off..off.checked_add(4)?)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// Decodes an action area (8 or 12 bytes) into `out`, in order, NOPs left out.
pub(crate) fn decode(area: &[u8], out: &mut Vec<Action>) -> Result<(), ActionError> {
    let mut off = 0;
    while let Some(w0) = dw_at(area, off) {
        let action_id = (w0 >> 24) as u8;
        let double = matches!(
            action_id,
            id::COPY | id::SET | id::ADD | id::INSERT_INLINE | id::INSERT_POINTER
        );
        let w1 = if double {
            dw_at(area, off + 4).ok_or(ActionError::Truncated(action_id))?
        } else {
            0
        };
        let action = match action_id {
            id::NOP => None,
            id::FLOW_TAG => Some(Action::FlowTag(field(w0, 23, 0))),
            id::SET | id::ADD => {
                let (field_code, shift, len) = (
                    field(w0, 23, 16) as u8,
                    field(w0, 13, 8) as u8,
                    field(w0, 5, 0) as u8,
                );
                Some(if action_id == id::SET {
                    Action::Set {
                        field: field_code,
                        shift,
                        len,
                        data: w1,
                    }
                } else {
                    Action::Add {
                        field: field_code,
                        shift,
                        len,
                        data: w1,
                    }
                })
            }
            id::COPY => Some(Action::Copy {
                dst_field: field(w0, 23, 16) as u8,
                dst_shift: field(w0, 13, 8) as u8,
                len: field(w0, 5, 0) as u8,
                src_field: field(w1, 23, 16) as u8,
                src_shift: field(w1, 13, 8) as u8,
            }),
            id::MODIFY_LIST => Some(Action::ModifyList {
                count: field(w0, 23, 16) as u8,
                index: field(w0, 15, 0) as u16,
            }),
            id::INSERT_INLINE => Some(Action::InsertInline {
                anchor: field(w0, 21, 16) as u8,
                offset_words: field(w0, 15, 9) as u8,
                data: w1,
            }),
            id::REMOVE_BY_SIZE => Some(Action::RemoveBySize {
                anchor: field(w0, 21, 16) as u8,
                outer_l4_remove: field(w0, 15, 15) != 0,
                offset_words: field(w0, 13, 7) as u8,
                size_words: field(w0, 5, 0) as u8,
            }),
            id::REMOVE_HEADER_TO_HEADER => Some(Action::RemoveHeaderToHeader {
                start_anchor: field(w0, 21, 16) as u8,
                end_anchor: field(w0, 13, 8) as u8,
                decap: field(w0, 3, 3) != 0,
                vni_to_cqe: field(w0, 2, 2) != 0,
            }),
            id::INSERT_POINTER => Some(Action::InsertPointer {
                anchor: field(w0, 21, 16) as u8,
                offset_words: field(w0, 15, 9) as u8,
                size_words: field(w0, 8, 3) as u8,
                attributes: field(w0, 2, 0) as u8,
                pointer: w1,
            }),
            other => return Err(ActionError::Unknown(other)),
        };
        out.extend(action);
        off += if double { 8 } else { 4 };
    }
    Ok(())
}
