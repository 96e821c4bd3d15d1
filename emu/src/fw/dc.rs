//! DC targets: CREATE_DCT, DRAIN_DCT, QUERY_DCT and DESTROY_DCT, as Linux 6.12's mlx5_ib
//! sends them.
//!
//! mlx5_ib builds a DCT's context over `ib_create_qp` (`create_dct`: PD, SRQ, CQ, access key,
//! user index) and two `ib_modify_qp` calls (`mlx5_ib_modify_dct`), and sends CREATE_DCT at
//! the INIT to RTR one (`mlx5_core_create_dct` in `qpc.c`). To destroy it, it sends DRAIN_DCT
//! and waits for the DCT_DRAINED event before DESTROY_DCT (`_mlx5_core_destroy_dct`): the
//! model drains at once and raises the event on the async EQ.
//!
//! Each DCT gets [`DCT_RESPONDERS`] responder contexts, RC responder QPs of the device's own
//! (no command names them; they take a context slot each, as any QP): the DC transport
//! (`engine::rc::dc`) gives each initiator it hears from one of them.

use super::pages::{release_context, store_new_context};
use super::{bad_param, bad_res, bad_state, input_as, output_as, CmdResult, Core, Syndrome};
use crate::objects::dc::{DcResponder, Dct, DCT_RESPONDERS};
use crate::objects::limits::{LOG_MAX_MSG, LOG_MAX_RA_QP};
use crate::objects::rc::{Qp, RcPath, RcReceive};
use crate::objects::QueueBuffer;
use cxdirect_hw::dct::{
    self, CreateDctIn, CreateDctOut, Dctc, DestroyDctIn, DrainDctIn, QueryDctIn, QueryDctOut,
};
use cxdirect_hw::eqe::{EventType, EQE_DCT_NUMBER_OFFSET};
use cxdirect_hw::qp::{mtu, service_type, state};

pub(crate) fn create_dct(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let cmd = input_as!(CreateDctIn<&[u8]>, input);
    let ctx = cmd.dct_context_entry();
    if !core.res.pds.contains(ctx.pd()) {
        return Err(bad_res("DCT's PD does not exist"));
    }
    if !core.res.cqs.contains(ctx.cqn()) {
        return Err(bad_res("DCT's CQ does not exist"));
    }
    // mlx5_ib names the SRQ the DCT was created with: a basic SRQ is an RMP (`srq_cmd.c`).
    // A DC XRQ (DC tag matching) is not modelled.
    if !core.res.is_rmp(ctx.srqn_xrqn()) {
        return Err(bad_res("DCT's SRQ (RMP) does not exist"));
    }
    let code = ctx.mtu();
    if mtu::bytes(code).is_none() || code > crate::function::hca::port_max_mtu(core) {
        return Err(bad_param(
            Syndrome::BadPathMtu,
            "DCT path MTU unknown or above the port's",
        ));
    }
    if ctx.port() != 1 {
        return Err(bad_param(Syndrome::BadQpParams, "DCT port other than 1"));
    }
    if !core.cfg.roce || !core.port.roce_en {
        return Err(bad_param(
            Syndrome::RoceDisabled,
            "a DCT while RoCE is disabled on the vport",
        ));
    }
    if core
        .res
        .gids
        .valid(usize::from(ctx.my_addr_index()))
        .is_none()
    {
        return Err(bad_param(
            Syndrome::BadGidIndex,
            "DCT source GID index past the table or unset",
        ));
    }
    let mut stored = [0u8; 0x40];
    stored.copy_from_slice(&ctx.as_bytes()[..0x40]);
    let dct = Dct {
        ctx: stored,
        state: dct::state::ACTIVE,
        key: ctx.dc_access_key(),
        cqn: ctx.cqn(),
        srqn: ctx.srqn_xrqn(),
        key_violations: 0,
        armed: false,
        responders: Vec::with_capacity(DCT_RESPONDERS),
    };
    let (cqn, srqn) = (dct.cqn, dct.srqn);
    let dctn = core
        .res
        .dcts
        .insert(dct)
        .ok_or(super::table_full("DCT table full"))?;
    for _ in 0..DCT_RESPONDERS {
        match responder_context(core, dctn, &ctx) {
            Ok(qpn) => {
                if let Some(dct) = core.res.dcts.get_mut(dctn) {
                    dct.responders.push(qpn);
                }
            }
            Err(e) => {
                remove(core, dctn);
                return Err(e);
            }
        }
    }
    if let Some(cq) = core.res.cqs.get_mut(cqn) {
        cq.users += 1;
    }
    if let Some(rmp) = core.res.rmps.get_mut(srqn) {
        rmp.rq_users += 1;
    }
    output_as!(CreateDctOut<&mut [u8]>, output).set_dctn(dctn);
    Ok(())
}

/// One responder context of DCT `dctn`: an RC responder QP in RTS with the DCT's PD, SRQ,
/// CQ, user index, access rights, MTU and response path, carrying no initiator yet.
fn responder_context(
    core: &mut Core,
    dctn: u32,
    ctx: &Dctc<&[u8]>,
) -> Result<u32, super::CmdError> {
    let slot = store_new_context(core, &[0u8; 0x100])?;
    let qp = Qp {
        service: service_type::RC,
        state: state::RTS,
        pd: ctx.pd(),
        uar: 0,
        cqn_snd: ctx.cqn(),
        cqn_rcv: ctx.cqn(),
        buf: QueueBuffer {
            pas: Vec::new(),
            log_page: 12,
            offset: 0,
            size: 0,
        },
        dbr: 0,
        log_sq_size: None,
        send_counter: crate::objects::rc::SendCounter::Record,
        rndv_offload: false,
        receive: RcReceive::Shared(ctx.srqn_xrqn()),
        user_index: ctx.user_index(),
        log_msg_max: LOG_MAX_MSG,
        mtu: ctx.mtu(),
        remote_qpn: 0,
        q_key: 0,
        path: RcPath {
            gid_index: ctx.my_addr_index(),
            hop_limit: ctx.hop_limit(),
            tclass: ctx.tclass(),
            flow_label: ctx.flow_label(),
            port: 1,
            pkey_index: ctx.pkey_index(),
            ..RcPath::default()
        },
        next_send_psn: 0,
        next_rcv_psn: 0,
        retry_count: 0,
        rnr_retry: 0,
        min_rnr_nak: ctx.min_rnr_nak(),
        log_sra_max: 0,
        log_rra_max: LOG_MAX_RA_QP,
        log_ack_req_freq: 0,
        rre: ctx.rre(),
        rwe: ctx.rwe(),
        rae: ctx.rae(),
        sq_consumed: 0,
        resp: Default::default(),
        req: Default::default(),
        counter_set: 0,
        block_lb_mc: false,
        deth_sqpn: 0,
        dci: None,
        dci_streams: None,
        dc_responder: Some(DcResponder {
            dct: dctn,
            peer: None,
            last_used: 0,
        }),
        slot,
    };
    match core.res.qps.insert(qp) {
        Some(qpn) => Ok(qpn),
        None => {
            release_context(core, slot);
            Err(super::table_full("QP table full (DCT responder contexts)"))
        }
    }
}

/// Removes DCT `dctn` and its responder contexts; returns it.
fn remove(core: &mut Core, dctn: u32) -> Option<Dct> {
    let dct = core.res.dcts.remove(dctn)?;
    for &qpn in &dct.responders {
        if let Some(qp) = core.res.qps.remove(qpn) {
            release_context(core, qp.slot);
        }
    }
    Some(dct)
}

/// DRAIN_DCT (`mlx5_core_drain_dct`): the DCT takes no more requests; nothing the model
/// holds is in flight past the command, so it is drained at once and DCT_DRAINED goes to the
/// EQ subscribed to it, which is what mlx5_ib waits for before DESTROY_DCT.
pub(crate) fn drain_dct(core: &mut Core, input: &[u8]) -> CmdResult {
    let dctn = input_as!(DrainDctIn<&[u8]>, input).dctn();
    let dct = core.res.dcts.get_mut(dctn).ok_or(bad_res("no such DCT"))?;
    if dct.state != dct::state::ACTIVE {
        return Err(bad_state(
            Syndrome::BadStateTransition,
            "DCT already draining or drained",
        ));
    }
    dct.state = dct::state::DRAINED;
    let mut data = [0u8; 28];
    data[EQE_DCT_NUMBER_OFFSET..EQE_DCT_NUMBER_OFFSET + 4].copy_from_slice(&dctn.to_be_bytes());
    crate::engine::eq::post_async_event(core, EventType::DctDrained, 0, &data);
    Ok(())
}

/// ARM_DCT_FOR_KEY_VIOLATION: the next request presenting a wrong access key to the DCT
/// raises DCT_KEY_VIOLATION (then the DCT is disarmed). Linux declares the opcode (0x714) and
/// the event (0x1d); its devx.c reads the command's DCT number with `drain_dct_in`'s layout
/// and the event's with `struct mlx5_eqe_dct`'s, as for DCT_DRAINED. Arming an armed DCT
/// leaves it armed once; a DCT draining or drained is refused.
pub(crate) fn arm_dct_for_key_violation(core: &mut Core, input: &[u8]) -> CmdResult {
    let dctn = input_as!(DrainDctIn<&[u8]>, input).dctn();
    let dct = core.res.dcts.get_mut(dctn).ok_or(bad_res("no such DCT"))?;
    if dct.state != dct::state::ACTIVE {
        return Err(bad_state(
            Syndrome::BadStateTransition,
            "DCT draining or drained",
        ));
    }
    dct.armed = true;
    Ok(())
}

/// QUERY_DCT (`mlx5_core_dct_query`, for `ibv_query_qp` on a DCT): the context as created,
/// with its state and key violation count current.
pub(crate) fn query_dct(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let dctn = input_as!(QueryDctIn<&[u8]>, input).dctn();
    let dct = core.res.dcts.get(dctn).ok_or(bad_res("no such DCT"))?;
    let (ctx, state, violations) = (dct.ctx, dct.state, dct.key_violations);
    let mut out = output_as!(QueryDctOut<&mut [u8]>, output);
    let mut entry = out.dct_context_entry_mut();
    entry.as_bytes_mut()[..0x40].copy_from_slice(&ctx);
    entry
        .set_state(state)
        .set_dc_access_key_violation_count(violations);
    Ok(())
}

/// DESTROY_DCT: the DCT and its responder contexts go, whatever they were doing (mlx5_ib
/// drains it first).
pub(crate) fn destroy_dct(core: &mut Core, input: &[u8]) -> CmdResult {
    let dctn = input_as!(DestroyDctIn<&[u8]>, input).dctn();
    let dct = remove(core, dctn).ok_or(bad_res("no such DCT"))?;
    if let Some(cq) = core.res.cqs.get_mut(dct.cqn) {
        cq.users = cq.users.saturating_sub(1);
    }
    if let Some(rmp) = core.res.rmps.get_mut(dct.srqn) {
        rmp.rq_users = rmp.rq_users.saturating_sub(1);
    }
    Ok(())
}
