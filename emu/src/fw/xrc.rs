//! XRC SRQs: CREATE_XRC_SRQ, ARM_XRC_SRQ, QUERY_XRC_SRQ and DESTROY_XRC_SRQ.
//!
//! Linux's mlx5_ib makes one XRC SRQ (and one basic SRQ, an RMP) before its first QP, and
//! names the XRC one in every XRC QP it creates (`create_xrc_tgt_qp`, and `create_user_qp`
//! for XRC_INI). An XRC SRQ is a linked-list receive ring in the SRQ number space: the XRC
//! target QPs of its XRC domain take SEND receives from it when a request's XRCETH names it
//! (`engine::rc::xrc`), and those complete on its CQ with its user index (what Linux's
//! `create_xrc_srq_cmd` writes from the SRQ's user index; libmlx5 finds the SRQ by it).

use super::queues::{check_dbr, queue_buffer};
use super::{bad_param, bad_res, input_as, output_as, CmdResult, Core, Syndrome};
use crate::objects::limits::LOG_MAX_QP_SZ;
use crate::objects::rc::RcReceive;
use crate::objects::{WorkQueue, XrcSrq};
use cxdirect_hw::qp::{CreateXrcSrqIn, CreateXrcSrqOut, DestroyXrcSrqIn};
use cxdirect_hw::srq::{ArmXrcSrqIn, QueryXrcSrqIn, QueryXrcSrqOut, ARM_XRC_SRQ_OP_MOD_XRC_SRQ};

/// Largest receive WQE (`max_wqe_sz_rq`), in bytes.
const MAX_WQE_BYTES: u32 = crate::objects::limits::MAX_WQE_SZ_RQ as u32;

pub(crate) fn create_xrc_srq(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let cmd = input_as!(CreateXrcSrqIn<&[u8]>, input);
    let ctx = cmd.xrc_srq_context_entry();
    if cmd.xrc_srq_umem_valid() || ctx.dbr_umem_valid() {
        return Err(bad_param(
            Syndrome::BadWqParams,
            "umem-backed XRC SRQ buffers are not modelled",
        ));
    }
    if ctx.basic_cyclic_rcv_wqe() {
        return Err(bad_param(
            Syndrome::BadWqParams,
            "cyclic XRC SRQs are not modelled",
        ));
    }
    if !core.res.xrcds.contains(ctx.xrcd()) {
        return Err(bad_res("XRC SRQ's XRC domain does not exist"));
    }
    if !core.res.pds.contains(ctx.pd()) {
        return Err(bad_res("XRC SRQ's PD does not exist"));
    }
    if !core.res.cqs.contains(ctx.cqn()) {
        return Err(bad_res("XRC SRQ's CQ does not exist"));
    }
    let log_size = ctx.log_xrc_srq_size();
    let stride = 16u32 << ctx.log_rq_stride();
    if log_size > LOG_MAX_QP_SZ || stride > MAX_WQE_BYTES {
        return Err(bad_param(
            Syndrome::BadQueueSize,
            "XRC SRQ size or stride above the caps",
        ));
    }
    if u32::from(ctx.lwm()) > 1 << log_size {
        return Err(bad_param(
            Syndrome::BadWqParams,
            "XRC SRQ limit above the ring size",
        ));
    }
    let dbr = (u64::from(ctx.db_record_addr_h()) << 32) | (u64::from(ctx.db_record_addr_l()) << 2);
    check_dbr(dbr)?;
    let buf = queue_buffer(
        ctx.log_page_size(),
        ctx.page_offset(),
        u64::from(stride) << log_size,
        cmd.pas_capacity(),
        |i| cmd.pas(i).ok(),
    )?;
    let srq = XrcSrq {
        xrcd: ctx.xrcd(),
        wq: WorkQueue {
            buf,
            log_stride: ctx.log_rq_stride() + 4,
            log_size,
            dbr,
            pd: ctx.pd(),
            uar: 0,
            consumed: 0,
            posted_end: 0,
            fetched: Default::default(),
            // A linked list: the device starts at WQE 0, as libmlx5 builds its free list.
            linked_head: Some(0),
            partly_sent: Default::default(),
        },
        cqn: ctx.cqn(),
        // With `user_index_equal_xrc_srqn` the CQEs carry the SRQ number instead.
        user_index: ctx.user_index(),
        lwm: ctx.lwm(),
        log_page_size: ctx.log_page_size(),
        page_offset: ctx.page_offset(),
    };
    let cqn = srq.cqn;
    let srqn = core
        .res
        .xrc_srqs
        .insert(srq)
        .ok_or(super::table_full("XRC SRQ table full"))?;
    if let Some(cq) = core.res.cqs.get_mut(cqn) {
        cq.users += 1;
    }
    if ctx.user_index_equal_xrc_srqn() {
        if let Some(srq) = core.res.xrc_srqs.get_mut(srqn) {
            srq.user_index = srqn;
        }
    }
    output_as!(CreateXrcSrqOut<&mut [u8]>, output).set_xrc_srqn(srqn);
    Ok(())
}

/// ARM_XRC_SRQ as mlx5_ib's `arm_xrc_srq_cmd` sends it (for `ibv_modify_srq` with
/// IBV_SRQ_LIMIT): op_mod [`ARM_XRC_SRQ_OP_MOD_XRC_SRQ`], the SRQ, the limit in `lwm`. The
/// limit is one-shot, as an RMP's: the receive path raises the SRQ limit event once when the
/// posted WQEs fall below it and disarms it (`engine::rq::check_limit`).
pub(crate) fn arm_xrc_srq(core: &mut Core, input: &[u8]) -> CmdResult {
    let cmd = input_as!(ArmXrcSrqIn<&[u8]>, input);
    if cmd.op_mod() != ARM_XRC_SRQ_OP_MOD_XRC_SRQ {
        return Err(bad_param(
            Syndrome::BadOpMod,
            "ARM_XRC_SRQ op_mod other than XRC_SRQ",
        ));
    }
    let lwm = cmd.lwm();
    let srq = core
        .res
        .xrc_srqs
        .get_mut(cmd.xrc_srqn())
        .ok_or(bad_res("no such XRC SRQ"))?;
    if u32::from(lwm) > srq.wq.entries() {
        return Err(bad_param(
            Syndrome::BadWqParams,
            "XRC SRQ limit above the ring size",
        ));
    }
    srq.lwm = lwm;
    Ok(())
}

/// QUERY_XRC_SRQ as mlx5_ib's `query_xrc_srq_cmd` reads it (`get_srqc`): the context as
/// created, `state` good, `lwm` the limit still armed (0 once its event fired), `wqe_cnt`
/// the WQEs the device has consumed (modulo 2^16).
pub(crate) fn query_xrc_srq(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let srqn = input_as!(QueryXrcSrqIn<&[u8]>, input).xrc_srqn();
    let srq = core
        .res
        .xrc_srqs
        .get(srqn)
        .ok_or(bad_res("no such XRC SRQ"))?;
    let mut out = output_as!(QueryXrcSrqOut<&mut [u8]>, output);
    out.xrc_srq_context_entry_mut()
        .set_state(0)
        .set_log_xrc_srq_size(srq.wq.log_size)
        .set_log_rq_stride(srq.wq.log_stride - 4)
        .set_xrcd(srq.xrcd)
        .set_page_offset(srq.page_offset)
        .set_cqn(srq.cqn)
        .set_log_page_size(srq.log_page_size)
        .set_user_index(srq.user_index)
        .set_pd(srq.wq.pd)
        .set_lwm(srq.lwm)
        .set_wqe_cnt(srq.wq.consumed)
        .set_db_record_addr_h((srq.wq.dbr >> 32) as u32)
        .set_db_record_addr_l((srq.wq.dbr as u32) >> 2);
    Ok(())
}

pub(crate) fn destroy_xrc_srq(core: &mut Core, input: &[u8]) -> CmdResult {
    let srqn = input_as!(DestroyXrcSrqIn<&[u8]>, input).xrc_srqn();
    let srq = core
        .res
        .xrc_srqs
        .remove(srqn)
        .ok_or(bad_res("no such XRC SRQ"))?;
    if let Some(cq) = core.res.cqs.get_mut(srq.cqn) {
        cq.users = cq.users.saturating_sub(1);
    }
    Ok(())
}

/// True when an XRC SRQ or an XRC QP names XRC domain `xrcd`.
pub(crate) fn xrcd_in_use(core: &Core, xrcd: u32) -> bool {
    core.res.xrc_srqs.iter().any(|(_, s)| s.xrcd == xrcd)
        || core
            .res
            .qps
            .iter()
            .any(|(_, qp)| matches!(qp.receive, RcReceive::Xrc { xrcd: x, .. } if x == xrcd))
}
