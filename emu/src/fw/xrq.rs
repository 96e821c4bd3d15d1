//! XRQs: CREATE_XRQ, QUERY_XRQ, ARM_XRQ and DESTROY_XRQ, as Linux's mlx5_ib sends them for a
//! tag-matching SRQ (`IBV_SRQT_TM`; `create_xrq_cmd`, `query_xrq_cmd`, `arm_xrq_cmd` and
//! `destroy_xrq_cmd` in `drivers/infiniband/hw/mlx5/srq_cmd.c`).
//!
//! An XRQ is a linked-list receive ring in the SRQ number space, as an RMP is; it keeps its own
//! CQ and user index (its receives and list operations complete there, `srqn_uidx` carrying
//! the user index by which libmlx5 finds the SRQ) and, with the tag-matching topology, a
//! matching list of `2^log_matching_list_sz` entries that the TAG_MATCHING WQEs of a QP naming
//! the XRQ edit (`engine::rc::tag_matching`). mlx5_ib asks for the list size as
//! `ilog2(max_num_tags) + 1` and for the rendezvous offload on every tag-matching SRQ.
//! DC tag matching (`xrqc.dc`, SET_XRQ_DC_PARAMS_ENTRY) is not modelled.

use super::pages::{release_context, store_new_context};
use super::queues::{context_bytes, report_ring, shared_ring};
use super::{bad_param, bad_res, bad_state, input_as, output_as, CmdResult, Core, Syndrome};
use crate::objects::devx::Owned;
use crate::objects::tm::{TagList, Xrq, LOG_TAG_MATCHING_LIST_SZ};
use crate::objects::{QState, Rmp};
use cxdirect_hw::xrq::{
    ArmXrqIn, CreateXrqIn, CreateXrqOut, DestroyXrqIn, QueryXrqIn, QueryXrqOut, ARM_XRQ_OP_MOD_XRQ,
    XRQC_OFFLOAD_RNDV, XRQC_STATE_ERROR, XRQC_STATE_GOOD, XRQC_TOPOLOGY_NO_SPECIAL,
    XRQC_TOPOLOGY_TAG_MATCHING,
};

pub(crate) fn create_xrq(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let cmd = input_as!(CreateXrqIn<&[u8]>, input);
    let ctx = cmd.xrq_context();
    if ctx.dc() {
        return Err(bad_param(
            Syndrome::BadWqParams,
            "DC XRQs (DC tag matching) are not modelled",
        ));
    }
    let list = match ctx.topology() {
        XRQC_TOPOLOGY_TAG_MATCHING => {
            let log = ctx.tag_matching_topology_context().log_matching_list_sz();
            if log == 0 || log > LOG_TAG_MATCHING_LIST_SZ {
                return Err(bad_param(
                    Syndrome::BadWqParams,
                    "log_matching_list_sz outside 1..=log_tag_matching_list_sz",
                ));
            }
            Some(TagList::new(log))
        }
        XRQC_TOPOLOGY_NO_SPECIAL => None,
        _ => return Err(bad_param(Syndrome::BadWqParams, "unknown XRQ topology")),
    };
    let rndv = match ctx.offload() {
        0 => false,
        XRQC_OFFLOAD_RNDV if list.is_some() => true,
        _ => {
            return Err(bad_param(
                Syndrome::BadWqParams,
                "XRQ offload other than rendezvous on a tag-matching XRQ",
            ))
        }
    };
    if !core.res.cqs.contains(ctx.cqn()) {
        return Err(bad_res("XRQ's CQ does not exist"));
    }
    if !core.res.pds.contains(ctx.wq().pd()) {
        return Err(bad_res("XRQ's PD does not exist"));
    }
    // mlx5_ib's `set_wq` makes every XRQ a linked list.
    if ctx.wq().wq_type() != cxdirect_hw::wq::WqType::LinkedList as u8 {
        return Err(bad_param(
            Syndrome::BadWqParams,
            "XRQs are linked lists (wq_type 0)",
        ));
    }
    // A DEVX XRQ may rest on umems of its user context, as an RMP may.
    let mut umems = Vec::new();
    let (wq, lwm) = shared_ring(
        core,
        cmd.uid(),
        ctx.wq(),
        cmd.pas_capacity(),
        |i| cmd.pas(i).ok(),
        &mut umems,
    )?;
    let cqn = ctx.cqn();
    let xrq = Xrq {
        cqn,
        user_index: ctx.user_index(),
        rndv,
        list,
    };
    let slot = store_new_context(core, &context_bytes(ctx.as_bytes()))?;
    let rmp = Rmp {
        wq,
        state: QState::Rdy,
        lwm,
        rq_users: 0,
        slot,
        xrq: Some(Box::new(xrq)),
    };
    let Some(xrqn) = core.res.rmps.insert(rmp) else {
        release_context(core, slot);
        return Err(super::table_full("SRQ table full"));
    };
    if let Some(cq) = core.res.cqs.get_mut(cqn) {
        cq.users += 1;
    }
    super::devx::hold(core, &umems, (Owned::Rmp, xrqn));
    output_as!(CreateXrqOut<&mut [u8]>, output).set_xrqn(xrqn);
    Ok(())
}

/// The XRQ numbered `xrqn` (an RMP is not one).
fn xrq(core: &Core, xrqn: u32) -> Result<&Rmp, super::CmdError> {
    core.res
        .rmps
        .get(xrqn)
        .filter(|r| r.xrq.is_some())
        .ok_or(bad_res("no such XRQ"))
}

/// QUERY_XRQ as `query_xrq_cmd` reads it: the state (error or good), the list's next entry
/// and phase counters, the ring.
pub(crate) fn query_xrq(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let xrqn = input_as!(QueryXrqIn<&[u8]>, input).xrqn();
    let rmp = xrq(core, xrqn)?;
    let Some(x) = rmp.xrq.as_deref() else {
        return Err(bad_res("no such XRQ"));
    };
    let mut out = output_as!(QueryXrqOut<&mut [u8]>, output);
    let mut ctx = out.xrq_context_mut();
    ctx.set_state(if rmp.state == QState::Rdy {
        XRQC_STATE_GOOD
    } else {
        XRQC_STATE_ERROR
    })
    .set_user_index(x.user_index)
    .set_cqn(x.cqn)
    .set_offload(if x.rndv { XRQC_OFFLOAD_RNDV } else { 0 });
    if let Some(list) = &x.list {
        ctx.set_topology(XRQC_TOPOLOGY_TAG_MATCHING);
        let log = list.entries.len().trailing_zeros() as u8;
        ctx.tag_matching_topology_context_mut()
            .set_log_matching_list_sz(log)
            .set_append_next_index(list.append_next)
            .set_sw_phase_cnt(list.sw_phase)
            .set_hw_phase_cnt(list.hw_phase);
    }
    report_ring(
        core,
        rmp,
        cxdirect_hw::wq::WqType::LinkedList as u8,
        ctx.wq_mut(),
    );
    Ok(())
}

/// ARM_XRQ as `arm_xrq_cmd` sends it (ibv_modify_srq with IBV_SRQ_LIMIT): a one-shot limit,
/// as an RMP's.
pub(crate) fn arm_xrq(core: &mut Core, input: &[u8]) -> CmdResult {
    let cmd = input_as!(ArmXrqIn<&[u8]>, input);
    if cmd.op_mod() != ARM_XRQ_OP_MOD_XRQ {
        return Err(bad_param(
            Syndrome::BadOpMod,
            "ARM_XRQ op_mod other than XRQ",
        ));
    }
    let (xrqn, lwm) = (cmd.xrqn(), cmd.lwm());
    let entries = xrq(core, xrqn)?.wq.entries();
    if u32::from(lwm) > entries {
        return Err(bad_param(
            Syndrome::BadWqParams,
            "XRQ limit above the ring size",
        ));
    }
    if let Some(rmp) = core.res.rmps.get_mut(xrqn) {
        rmp.lwm = lwm;
    }
    Ok(())
}

pub(crate) fn destroy_xrq(core: &mut Core, input: &[u8]) -> CmdResult {
    let xrqn = input_as!(DestroyXrqIn<&[u8]>, input).xrqn();
    if xrq(core, xrqn)?.rq_users > 0 {
        return Err(bad_state(
            Syndrome::ObjectInUse,
            "XRQ still has QPs drawing from it",
        ));
    }
    let rmp = core.res.rmps.remove(xrqn).ok_or(bad_res("no such XRQ"))?;
    release_context(core, rmp.slot);
    if let Some(x) = rmp.xrq {
        if let Some(cq) = core.res.cqs.get_mut(x.cqn) {
            cq.users = cq.users.saturating_sub(1);
        }
    }
    Ok(())
}
