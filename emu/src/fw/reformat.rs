//! Packet reformat contexts: ALLOC_PACKET_REFORMAT_CONTEXT and DEALLOC_PACKET_REFORMAT_CONTEXT.
//! A context keeps its type and data: the outer headers an encapsulation inserts, or the
//! Ethernet header a decapsulation of an L3 tunnel writes. Software steering entries name one
//! in an INSERT_POINTER action (rdma-core's `dr_devx_create_reformat_ctx` allocates one for
//! every transmit encapsulation action, `dr_ste_v1_set_encap` and `_set_encap_l3` write its id
//! as the pointer; the walk reads it, `sw_steering::rewrite`), firmware flow entries by their
//! `packet_reformat_id` (mlx5_core's `mlx5_cmd_packet_reformat_alloc` for mlx5_ib's flow
//! actions; `crate::steering` applies it).
//!
//! The model takes the tunnel types (L2 into VXLAN, NVGRE or any L2 tunnel, L2 into an L3
//! tunnel, an L3 tunnel to L2) with 1..=`max_encap_header_size` bytes of data; IPsec, MACsec,
//! PSP and the anchor-relative insert and remove types are refused.

use super::Syndrome;
use super::{bad_param, bad_res, bad_state, input_as, output_as, table_full, CmdResult, Core};
use crate::objects::limits::MAX_ENCAP_HEADER_SIZE;
use crate::objects::PacketReformat;
use cxdirect_hw::reformat::{
    AllocPacketReformatContextIn, AllocPacketReformatContextOut, DeallocPacketReformatContextIn,
    REFORMAT_DATA_BYTE, REFORMAT_TYPE_L2_TO_L3_TUNNEL,
};

pub(crate) fn alloc(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let cmd = input_as!(AllocPacketReformatContextIn<&[u8]>, input);
    let ctx = cmd.packet_reformat_context();
    let reformat_type = ctx.reformat_type();
    if reformat_type > REFORMAT_TYPE_L2_TO_L3_TUNNEL {
        return Err(bad_param(
            Syndrome::BadSteeringParams,
            "reformat_type not modelled: only the tunnel types (0 to 4) are",
        ));
    }
    if ctx.reformat_param_0() != 0 || ctx.reformat_param_1() != 0 {
        return Err(bad_param(
            Syndrome::BadSteeringParams,
            "the tunnel reformat types take no reformat_param_0 or reformat_param_1",
        ));
    }
    let size = ctx.reformat_data_size();
    if size == 0 || size > MAX_ENCAP_HEADER_SIZE {
        return Err(bad_param(
            Syndrome::BadSteeringParams,
            "reformat_data_size must be 1..=max_encap_header_size",
        ));
    }
    let data = input
        .get(REFORMAT_DATA_BYTE..REFORMAT_DATA_BYTE + usize::from(size))
        .ok_or(bad_param(
            Syndrome::InputTooShort,
            "the input ends before reformat_data_size bytes of data",
        ))?
        .to_vec();
    let id = core
        .res
        .reformats
        .insert(PacketReformat {
            reformat_type,
            data,
            fte_users: 0,
        })
        .ok_or(table_full("packet reformat contexts"))?;
    output_as!(AllocPacketReformatContextOut<&mut [u8]>, output).set_packet_reformat_id(id);
    Ok(())
}

pub(crate) fn dealloc(core: &mut Core, input: &[u8]) -> CmdResult {
    let cmd = input_as!(DeallocPacketReformatContextIn<&[u8]>, input);
    let id = cmd.packet_reformat_id();
    let context = core
        .res
        .reformats
        .get(id)
        .ok_or(bad_res("no such packet reformat context"))?;
    if context.fte_users > 0 {
        return Err(bad_state(
            Syndrome::ObjectInUse,
            "packet reformat context still named by a flow entry",
        ));
    }
    core.res.reformats.remove(id);
    Ok(())
}
