//! General objects: CREATE_GENERAL_OBJECT, MODIFY_GENERAL_OBJECT, QUERY_GENERAL_OBJECT and
//! DESTROY_GENERAL_OBJECT, dispatched by the header's `obj_type`. The model offers three types
//! (the bits of `general_obj_types`): RESERVED_QPN, blocks of QP numbers no QP or DCT is
//! given ([`crate::objects::reserved_qpn`]), NIC scheduling elements (`fw::scheduling`) and
//! AV-to-QP mappings (`fw::av_qp_mapping`);
//! with `EmuConfig::sw_steering`, more: pieces of SW ICM (`fw::sw_icm`), flow samplers
//! (`fw::sampler`), flow meters (`fw::meter`) and match definers (`fw::definer`), which only
//! software steering entries reach or name. Any other type is
//! refused with [`Syndrome::UnknownObjType`].
//!
//! Read from rdma-core's libmlx5 (`providers/mlx5/mlx5.c`): `reserved_qpn_blk_alloc` sends
//! CREATE_GENERAL_OBJECT through DEVX with `obj_type` 0x2c and `log_obj_range` equal to
//! HCA_CAP_2's `log_reserved_qpn_granularity` (a 0x20-byte input: the header and an empty
//! `reserved_qpn` body) and takes the output's `obj_id` as the block's first QP number
//! (`set_devx_obj_info` in verbs.c); `reserved_qpn_blk_dealloc` destroys the DEVX object,
//! for which Linux 6.12's mlx5_ib sends DESTROY_GENERAL_OBJECT with the creating header's
//! type, the object's number and the context's uid (`devx_obj_build_destroy_cmd`). Neither
//! modifies or queries one; QUERY_GENERAL_OBJECT answers the header of a live block, and
//! MODIFY_GENERAL_OBJECT finds nothing to change in one.
//!
//! Ownership by uid is `fw::devx`'s, as for every object: a block belongs to the context that
//! created it.

use super::{bad_param, bad_res, input_as, output_as, table_full, CmdResult, Core, Syndrome};
use cxdirect_hw::general_obj::{
    general_obj_types_bit, obj_type, GeneralObjInCmdHdr, GeneralObjOutCmdHdr,
};

/// The header's object type, if the model offers it (its `general_obj_types` bit is set).
fn offered(core: &Core, ty: u16) -> Result<u16, super::CmdError> {
    let bit = general_obj_types_bit(ty);
    if bit == 0 || core.hca.caps.general().general_obj_types() & bit == 0 {
        return Err(bad_param(
            Syndrome::UnknownObjType,
            "general object type not offered in general_obj_types",
        ));
    }
    Ok(ty)
}

/// CREATE_GENERAL_OBJECT.
pub(crate) fn create(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let hdr = input_as!(GeneralObjInCmdHdr<&[u8]>, input);
    let (ty, log) = (hdr.obj_type(), hdr.log_obj_range());
    match offered(core, ty)? {
        obj_type::RESERVED_QPN => {
            let first = reserve_qpns(core, log)?;
            output_as!(GeneralObjOutCmdHdr<&mut [u8]>, output).set_obj_id(first);
            Ok(())
        }
        obj_type::SCHEDULING_ELEMENT => {
            super::scheduling::create_general_object(core, input, output)
        }
        obj_type::SW_ICM => super::sw_icm::create(core, input, output),
        obj_type::FLOW_SAMPLER => super::sampler::create(core, input, output),
        obj_type::FLOW_METER => super::meter::create(core, input, output),
        obj_type::MATCH_DEFINER => super::definer::create(core, input, output),
        obj_type::AV_QP_MAPPING => super::av_qp_mapping::create(core, input, output),
        _ => Err(unknown_type()),
    }
}

/// A block of `2^log` reserved QP numbers, `log` within HCA_CAP_2's granularity and maximum.
fn reserve_qpns(core: &mut Core, log: u8) -> Result<u32, super::CmdError> {
    let caps = core.hca.caps.general_2();
    if log < caps.log_reserved_qpn_granularity() || log > caps.log_reserved_qpn_max_alloc() {
        return Err(bad_param(
            Syndrome::BadObjRange,
            "RESERVED_QPN log_obj_range outside log_reserved_qpn_granularity..=max_alloc",
        ));
    }
    core.res
        .reserved_qpns
        .reserve(log)
        .ok_or(table_full("no free block of reserved QP numbers"))
}

/// DESTROY_GENERAL_OBJECT.
pub(crate) fn destroy(core: &mut Core, input: &[u8]) -> CmdResult {
    let hdr = input_as!(GeneralObjInCmdHdr<&[u8]>, input);
    let (ty, id) = (hdr.obj_type(), hdr.obj_id());
    match offered(core, ty)? {
        obj_type::RESERVED_QPN => core
            .res
            .reserved_qpns
            .release(id)
            .map(|_| ())
            .ok_or(bad_res("no RESERVED_QPN object of that number")),
        obj_type::SCHEDULING_ELEMENT => super::scheduling::destroy_general_object(core, input),
        obj_type::SW_ICM => super::sw_icm::destroy(core, input),
        obj_type::FLOW_SAMPLER => super::sampler::destroy(core, input),
        obj_type::FLOW_METER => super::meter::destroy(core, input),
        obj_type::MATCH_DEFINER => super::definer::destroy(core, input),
        obj_type::AV_QP_MAPPING => super::av_qp_mapping::destroy(core, input),
        _ => Err(unknown_type()),
    }
}

/// QUERY_GENERAL_OBJECT: the header of a live object (a RESERVED_QPN body holds nothing).
pub(crate) fn query(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let hdr = input_as!(GeneralObjInCmdHdr<&[u8]>, input);
    let (ty, id) = (hdr.obj_type(), hdr.obj_id());
    match offered(core, ty)? {
        obj_type::RESERVED_QPN => {
            core.res
                .reserved_qpns
                .get(id)
                .ok_or(bad_res("no RESERVED_QPN object of that number"))?;
            output_as!(GeneralObjOutCmdHdr<&mut [u8]>, output).set_obj_id(id);
            Ok(())
        }
        obj_type::SCHEDULING_ELEMENT => {
            super::scheduling::query_general_object(core, input, output)
        }
        obj_type::SW_ICM => super::sw_icm::query(core, input, output),
        obj_type::FLOW_SAMPLER => super::sampler::query(core, input, output),
        obj_type::FLOW_METER => super::meter::query(core, input, output),
        obj_type::AV_QP_MAPPING => super::av_qp_mapping::query(core, input, output),
        obj_type::MATCH_DEFINER => Err(super::bad_param(
            Syndrome::BadSteeringParams,
            "QUERY_GENERAL_OBJECT of a match definer is not modelled (rdma-core and Linux never send it)",
        )),
        _ => Err(unknown_type()),
    }
}

/// MODIFY_GENERAL_OBJECT: a scheduling element's shares and rates, a flow meter's buckets;
/// nothing of the other types is modifiable.
pub(crate) fn modify(core: &mut Core, input: &[u8]) -> CmdResult {
    let hdr = input_as!(GeneralObjInCmdHdr<&[u8]>, input);
    match offered(core, hdr.obj_type())? {
        obj_type::SCHEDULING_ELEMENT => super::scheduling::modify_general_object(core, input),
        obj_type::FLOW_METER => super::meter::modify(core, input),
        _ => Err(bad_param(
            Syndrome::UnknownObjType,
            "MODIFY_GENERAL_OBJECT: the object type has nothing to modify",
        )),
    }
}

fn unknown_type() -> super::CmdError {
    bad_param(Syndrome::UnknownObjType, "general object type not modelled")
}
