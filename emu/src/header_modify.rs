//! Modify-header contexts (`fw::modify_header`) applied to the frames firmware flow entries
//! match (`FLOW_CONTEXT_ACTION_MOD_HDR`). A context's actions name fields by the firmware's
//! numbers (`MLX5_ACTION_IN_FIELD_OUT_*`) and a bit range inside each; each becomes the device
//! field and shifter software steering entries carry, as rdma-core converts them
//! (dr_action.c `dr_action_modify_sw_to_hw_set` with dr_ste_v1.c's
//! `dr_ste_v1_action_modify_field_arr`), and [`crate::sw_steering::modify`] applies it, the
//! checksums computed again after an IP or TCP/UDP field changed.

use crate::sw_steering::action::Action;
use crate::sw_steering::lookup::Metadata;
use crate::sw_steering::modify::{ModifyError, Target};
use cxdirect_hw::modify_header::{
    field as f, CopyActionIn, SetActionIn, ACTION_TYPE_ADD, ACTION_TYPE_COPY, ACTION_TYPE_SET,
};

/// `MLX5_MODIFY_HEADER_V1_QW_OFFSET`: added to a device shifter.
const SHIFT_BASE: u8 = 0x20;

/// A firmware field's device field, and the first and last bit it takes there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct DeviceField {
    field: u8,
    start: u8,
    end: u8,
}

/// `dr_ste_v1_action_modify_field_arr`: firmware field number to device field and bits.
fn device_field(sw: u16) -> Option<DeviceField> {
    let d = |field, start, end| Some(DeviceField { field, start, end });
    match sw {
        f::SMAC_47_16 => d(0x08, 0, 31),
        f::SMAC_15_0 => d(0x09, 16, 31),
        f::ETHERTYPE => d(0x01, 0, 15),
        f::DMAC_47_16 => d(0x00, 0, 31),
        f::DMAC_15_0 => d(0x01, 16, 31),
        f::IP_DSCP => d(0x0e, 18, 23),
        f::IP_ECN => d(0x0e, 16, 17),
        f::TCP_FLAGS => d(0x19, 16, 24),
        f::TCP_SPORT | f::UDP_SPORT => d(0x18, 16, 31),
        f::TCP_DPORT | f::UDP_DPORT => d(0x18, 0, 15),
        f::IP_TTL | f::IPV6_HOPLIMIT => d(0x0e, 8, 15),
        n @ f::SIPV6_127_96..=0x10 => d(0x4c + (n - f::SIPV6_127_96) as u8, 0, 31),
        n @ f::DIPV6_127_96..=0x14 => d(0x44 + (n - f::DIPV6_127_96) as u8, 0, 31),
        f::SIPV4 => d(0x40, 0, 31),
        f::DIPV4 => d(0x41, 0, 31),
        f::FIRST_VID => d(0x02, 0, 15),
        f::METADATA_REGA => d(0x7c, 0, 31),
        f::METADATA_REGB => d(0x7b, 0, 31),
        // reg_c_0 and 1 are REGISTER_0_0 and _0_1, 2 and 3 REGISTER_1_*, 4 and 5 REGISTER_2_*.
        n @ f::METADATA_REGC_0..=0x56 => {
            let c = (n - f::METADATA_REGC_0) as u8;
            d(0x90 - 2 * (c / 2) + c % 2, 0, 31)
        }
        f::TCP_SEQ_NUM => d(0x5e, 0, 31),
        f::TCP_ACK_NUM => d(0x5f, 0, 31),
        _ => None,
    }
}

/// Why an action of a context is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// An action type other than SET, ADD and COPY.
    Type(u8),
    /// A field the model does not place.
    Field(u16),
    /// Offset and length run past the field.
    Bits,
}

/// The device field and shifter of bits `offset..offset + len` (0 standing for 32) of
/// firmware field `sw`.
fn place(sw: u16, offset: u8, len: u8) -> Result<(u8, u8), Refused> {
    let d = device_field(sw).ok_or(Refused::Field(sw))?;
    let len = if len == 0 { 32 } else { len };
    if u32::from(offset) + u32::from(len) > u32::from(d.end - d.start) + 1 {
        return Err(Refused::Bits);
    }
    Ok((d.field, SHIFT_BASE + d.start + offset))
}

/// One firmware action as the device's SET, ADD or COPY (what a steering entry would carry).
fn decode(raw: &[u8; 8]) -> Result<Action, Refused> {
    let set = SetActionIn::new(&raw[..]).map_err(|_| Refused::Bits)?;
    match set.action_type() {
        ACTION_TYPE_SET => {
            let len = set.length();
            let (field, shift) = place(set.field(), set.offset(), len)?;
            Ok(Action::Set {
                field,
                shift,
                len,
                data: set.data(),
            })
        }
        ACTION_TYPE_ADD => {
            // An ADD has neither offset nor length: the whole field.
            let d = device_field(set.field()).ok_or(Refused::Field(set.field()))?;
            let len = (d.end - d.start + 1) % 32;
            let (field, shift) = place(set.field(), 0, len)?;
            Ok(Action::Add {
                field,
                shift,
                len,
                data: set.data(),
            })
        }
        ACTION_TYPE_COPY => {
            let copy = CopyActionIn::new(&raw[..]).map_err(|_| Refused::Bits)?;
            let len = copy.length();
            let (dst_field, dst_shift) = place(copy.dst_field(), copy.dst_offset(), len)?;
            let (src_field, src_shift) = place(copy.src_field(), copy.src_offset(), len)?;
            Ok(Action::Copy {
                dst_field,
                dst_shift,
                len,
                src_field,
                src_shift,
            })
        }
        other => Err(Refused::Type(other)),
    }
}

/// Checks one action as ALLOC_MODIFY_HEADER_CONTEXT receives it.
pub(crate) fn check(raw: &[u8; 8]) -> Result<(), Refused> {
    decode(raw).map(|_| ())
}

/// Applies `actions` (checked when their context was allocated) to `frame` and the packet's
/// metadata registers `meta` in order, and computes the frame's checksums again where IP or
/// TCP/UDP fields changed.
pub(crate) fn apply(
    actions: &[[u8; 8]],
    frame: &mut [u8],
    meta: &mut Metadata,
) -> Result<(), ModifyError> {
    let mut target = Target::new(frame, meta);
    for raw in actions {
        target.act(&decode(raw).map_err(|_| ModifyError::Bits)?)?;
    }
    target.finish();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(field: u16, offset: u8, len: u8, data: u32) -> [u8; 8] {
        let mut raw = [0u8; 8];
        SetActionIn::new(&mut raw[..])
            .unwrap()
            .set_action_type(ACTION_TYPE_SET)
            .set_field(field)
            .set_offset(offset)
            .set_length(len)
            .set_data(data);
        raw
    }

    /// The device field and shifter a SET decodes to.
    fn dst(raw: [u8; 8]) -> (u8, u8) {
        match decode(&raw) {
            Ok(Action::Set { field, shift, .. }) => (field, shift),
            other => panic!("not a SET: {other:?}"),
        }
    }

    #[test]
    fn the_smac_halves_land_where_rdma_core_puts_them() {
        // test_root_tbl_modify_header_rule: OUT_SMAC_47_16 (32 bits) and OUT_SMAC_15_0 (16).
        assert_eq!(dst(set(f::SMAC_47_16, 0, 32, 1)), (0x08, 0x20));
        assert_eq!(dst(set(f::SMAC_15_0, 0, 16, 1)), (0x09, 0x30));
        let mut frame = vec![0u8; 60];
        frame[12..14].copy_from_slice(&[0x88, 0xb5]);
        apply(
            &[
                set(f::SMAC_47_16, 0, 32, 0x8888_8888),
                set(f::SMAC_15_0, 0, 16, 0x8888),
            ],
            &mut frame,
            &mut Metadata::default(),
        )
        .unwrap();
        assert_eq!(&frame[6..12], &[0x88; 6]);
        assert_eq!(&frame[..6], &[0; 6]);
    }

    #[test]
    fn register_writes_stay_with_the_packet() {
        // SETs of reg_c_0 and reg_c_1 (MLX5_ACTION_IN_FIELD_METADATA_REG_C_0, _1) by two
        // contexts, one after the other: what the first set is still there after the second.
        let mut frame = vec![0u8; 60];
        let mut meta = Metadata::default();
        apply(
            &[set(f::METADATA_REGC_0, 0, 32, 0x1234)],
            &mut frame,
            &mut meta,
        )
        .unwrap();
        apply(
            &[set(f::METADATA_REGC_0 + 1, 0, 16, 0xbeef)],
            &mut frame,
            &mut meta,
        )
        .unwrap();
        assert_eq!(&meta.reg_c[..2], &[0x1234, 0xbeef]);
        assert_eq!(frame, vec![0u8; 60], "the frame is untouched");
    }

    #[test]
    fn unknown_types_fields_and_ranges_are_refused() {
        let mut bad = set(f::SMAC_47_16, 0, 32, 1);
        bad[0] = 0x40;
        assert_eq!(check(&bad), Err(Refused::Type(4)));
        assert_eq!(check(&set(0x6e, 0, 32, 1)), Err(Refused::Field(0x6e)));
        assert_eq!(check(&set(f::SMAC_15_0, 8, 16, 1)), Err(Refused::Bits));
        assert_eq!(dst(set(f::METADATA_REGC_0 + 4, 0, 0, 1)), (0x8c, 0x20));
    }
}
