//! AV-to-QP mappings: CREATE, QUERY and DESTROY_GENERAL_OBJECT of type AV_QP_MAPPING.
//!
//! Read from rdma-core's `_mlx5dv_map_ah_to_qp` (providers/mlx5/verbs.c): for a global
//! address handle, libmlx5 creates the object through DEVX with the QP number it was given and
//! the handle's service level, source GID index and destination GID, once per handle, and
//! destroys it with the handle (`mlx5_destroy_ah`). The QP may belong to another user context
//! of the function (rdma-core's `test_dc_ah_to_qp_mapping` maps the client's handle to the
//! server's DCI), and its later destruction leaves the mapping in place
//! (mlx5dv_map_ah_to_qp(3)). Nothing modifies one.

use super::{bad_param, bad_res, input_as, output_as, table_full, CmdResult, Core, Syndrome};
use crate::objects::av_qp_mapping::AvQpMapping;
use crate::objects::limits::ROCE_ADDRESS_TABLE_SIZE;
use cxdirect_hw::av_qp_mapping::{CreateAvQpMappingIn, QueryAvQpMappingOut};
use cxdirect_hw::general_obj::{GeneralObjInCmdHdr, GeneralObjOutCmdHdr};

/// CREATE_GENERAL_OBJECT of an AV-to-QP mapping: the QP must exist and the source GID index
/// fall within the port's RoCE address table.
pub(crate) fn create(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let cmd = input_as!(CreateAvQpMappingIn<&[u8]>, input);
    let qpn = cmd.qpn();
    if qpn > 0x00ff_ffff {
        return Err(bad_param(
            Syndrome::BadQpParams,
            "AV_QP_MAPPING qpn above 24 bits",
        ));
    }
    if !core.res.qps.contains(qpn) && !core.res.ud_qps.contains(qpn) {
        return Err(bad_res("AV_QP_MAPPING names no QP of that number"));
    }
    let src_addr_index = cmd.src_addr_index();
    if u16::from(src_addr_index) >= ROCE_ADDRESS_TABLE_SIZE {
        return Err(bad_param(
            Syndrome::BadQpParams,
            "AV_QP_MAPPING src_addr_index past the RoCE address table",
        ));
    }
    let mut rgid = [0u8; 16];
    for (i, byte) in rgid.iter_mut().enumerate() {
        *byte = cmd.rgid_or_rip(i).map_err(|_| bad_res("rgid_or_rip"))?;
    }
    let mapping = AvQpMapping {
        qpn,
        sl: cmd.sl_or_eth_prio(),
        src_addr_index,
        rgid,
    };
    let id = core
        .res
        .av_qp_mappings
        .insert(mapping)
        .ok_or(table_full("AV-to-QP mapping table full"))?;
    output_as!(GeneralObjOutCmdHdr<&mut [u8]>, output).set_obj_id(id);
    Ok(())
}

/// DESTROY_GENERAL_OBJECT of an AV-to-QP mapping.
pub(crate) fn destroy(core: &mut Core, input: &[u8]) -> CmdResult {
    let id = input_as!(GeneralObjInCmdHdr<&[u8]>, input).obj_id();
    core.res
        .av_qp_mappings
        .remove(id)
        .map(|_| ())
        .ok_or(bad_res("no AV_QP_MAPPING object of that number"))
}

/// QUERY_GENERAL_OBJECT of an AV-to-QP mapping: the mapping as CREATE gave it.
pub(crate) fn query(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let id = input_as!(GeneralObjInCmdHdr<&[u8]>, input).obj_id();
    let mapping = *core
        .res
        .av_qp_mappings
        .get(id)
        .ok_or(bad_res("no AV_QP_MAPPING object of that number"))?;
    let mut out = output_as!(QueryAvQpMappingOut<&mut [u8]>, output);
    out.set_obj_id(id)
        .set_qpn(mapping.qpn)
        .set_sl_or_eth_prio(mapping.sl)
        .set_src_addr_index(mapping.src_addr_index);
    for (i, byte) in mapping.rgid.into_iter().enumerate() {
        out.set_rgid_or_rip(i, byte)
            .map_err(|_| bad_res("rgid_or_rip"))?;
    }
    Ok(())
}
