//! Event, completion, send and receive queues and shared receive memory pools: their creation
//! (with every parameter checked), state transitions and destruction.

use super::pages::{release_context, store_new_context, write_context};
use super::qcounters;
use super::table_full;
use super::{
    bad_param, bad_res, bad_state, input_as, output_as, CmdError, CmdResult, Core, EngineRequests,
    Syndrome,
};
use crate::objects::devx::Owned;
use crate::objects::queue_state::Compression;
use crate::objects::{
    Cq, CqArm, Eq, QState, QueueBuffer, Rmp, Rq, RqMemory, Sq, Striding, WorkQueue,
};
use cxdirect_hw::cq::{CreateCqIn, CreateCqOut, DestroyCqIn};
use cxdirect_hw::cqe::mini_cqe_res_format;
use cxdirect_hw::eq::{CreateEqIn, CreateEqOut, DestroyEqIn};
use cxdirect_hw::wq::{
    CreateRmpIn, CreateRmpOut, CreateRqIn, CreateRqOut, CreateSqIn, CreateSqOut, DestroyRmpIn,
    DestroyRqIn, DestroySqIn, EndPadMode, ModifyRmpIn, ModifyRqIn, ModifySqIn, QueryRmpIn,
    QueryRmpOut, QueryRqIn, QueryRqOut, Wq, WqType, MODIFY_RQ_BITMASK_RQ_COUNTER_SET_ID,
    MODIFY_RQ_BITMASK_VSD, MODIFY_SQ_BITMASK_PACKET_PACING_RATE_LIMIT_INDEX,
    MODIFY_SQ_BITMASK_QOS_QUEUE_GROUP_ID,
};

/// Builds a queue buffer from a page list, checking alignment and coverage.
///
/// `page_offset` places the buffer's start inside its first page, in quanta of 1/64 of the
/// queue's page size (64 B with 4 KiB pages): mlx5_ib's `mlx5_umem_find_best_quantized_pgoff`
/// (called for the QP, CQ, SRQ and WQ contexts with a scale of 64) picks the largest page
/// size whose offset it can express this way, so a buffer that is only partly inside a large
/// page (a transparent huge page, say) arrives with a non-zero offset.
pub(crate) fn queue_buffer(
    log_page_rel: u8,
    page_offset: u8,
    size: u64,
    capacity: usize,
    pas: impl Fn(usize) -> Option<u64>,
) -> Result<QueueBuffer, CmdError> {
    let log_page = 12 + u32::from(log_page_rel);
    if log_page > 30 {
        return Err(bad_param(
            Syndrome::BadWqParams,
            "queue page size above 1 GiB",
        ));
    }
    let offset = u64::from(page_offset) << (log_page - 6);
    let pages = (offset + size).div_ceil(1 << log_page) as usize;
    if pages > capacity {
        return Err(bad_param(
            Syndrome::PasTooShort,
            "page list shorter than the queue buffer",
        ));
    }
    let mut list = Vec::with_capacity(pages);
    for i in 0..pages {
        let addr = pas(i).ok_or(bad_param(
            Syndrome::PasTooShort,
            "page list shorter than the queue buffer",
        ))?;
        if addr & 0xfff != 0 {
            return Err(bad_param(
                Syndrome::BadAddress,
                "queue page address not 4 KiB aligned",
            ));
        }
        list.push(addr);
    }
    Ok(QueueBuffer {
        pas: list,
        log_page,
        offset,
        size,
    })
}

/// The `uid` in a command input's header (0 when the input is too short to hold one: the
/// handler then refuses it for its length).
fn command_uid(input: &[u8]) -> u16 {
    cxdirect_hw::cmd::CmdIn::new(input).map_or(0, |h| h.uid())
}

pub(crate) fn check_dbr(addr: u64) -> CmdResult {
    if addr == 0 || addr % 8 != 0 {
        return Err(bad_param(
            Syndrome::BadAddress,
            "doorbell record address zero or not 8-byte aligned",
        ));
    }
    Ok(())
}

/// Which queue a work queue context belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WqOf {
    /// An SQ: 64-byte WQEs rung through a UAR page.
    Sq,
    /// An RQ with its own ring: a striding ring, cyclic (`wq_type` 3) or linked list
    /// (`wq_type` 2, as mlx5e opens its multi-packet RQs), is accepted too.
    Rq,
    /// An RMP: a linked list (`wq_type` 0, as Linux creates an RC SRQ) is accepted too.
    Rmp,
}

/// Checks a work queue context and builds the model's work queue, for a command under `uid`.
/// A DEVX queue (`devx_set_umem_valid` sets both bits for CREATE_SQ, CREATE_RQ and
/// CREATE_RMP) has its ring at `wq_umem_offset` of umem `wq_umem_id` and its doorbell record
/// at offset `dbr_addr` of umem `dbr_umem_id`; the umems it rests on are added to `umems`.
pub(crate) fn work_queue(
    core: &Core,
    uid: u16,
    wq: Wq<&[u8]>,
    of: WqOf,
    capacity: usize,
    pas: impl Fn(usize) -> Option<u64>,
    umems: &mut Vec<u32>,
) -> Result<WorkQueue, CmdError> {
    let (send, may_stride, may_link) = (of == WqOf::Sq, of == WqOf::Rq, of == WqOf::Rmp);
    let linked_striding = wq.wq_type() == WqType::LinkedListStridingRq as u8 && may_stride;
    let striding = wq.wq_type() == WqType::StridingCyclic as u8 && may_stride || linked_striding;
    let linked = wq.wq_type() == WqType::LinkedList as u8 && may_link || linked_striding;
    if wq.wq_type() != WqType::Cyclic as u8 && !striding && !linked {
        return Err(bad_param(
            Syndrome::BadWqParams,
            "only cyclic work queues (wq_type 1), striding RQs (wq_type 3 cyclic, 2 linked \
             list) and linked-list RMPs (wq_type 0) are modelled",
        ));
    }
    // End padding: none or to a cache line (MLX5_WQ_END_PAD_MODE_NONE / _ALIGN, the latter
    // what mlx5e_build_rq_param asks of every RQ and what the end_pad capability offers); the
    // field's other two values are reserved.
    if wq.end_padding_mode() > EndPadMode::Align as u8 {
        return Err(bad_param(
            Syndrome::BadWqParams,
            "end_padding_mode reserved: 0 (none) or 1 (cache-line align)",
        ));
    }
    let log_size = wq.log_wq_sz();
    if log_size > super::caps::LOG_MAX_WQ_SZ {
        return Err(bad_param(
            Syndrome::BadQueueSize,
            "log_wq_sz above log_max_wq_sz",
        ));
    }
    let log_stride = wq.log_wq_stride();
    let stride_ok = if send {
        log_stride == 6
    } else if striding {
        (5..=10).contains(&log_stride)
    } else {
        (4..=10).contains(&log_stride)
    };
    if !stride_ok {
        return Err(bad_param(
            Syndrome::BadWqParams,
            "WQE stride must be 64 B (send), 16..1024 B (receive) or 32..1024 B (striding \
             receive: a 16-byte header and a data segment)",
        ));
    }
    // PD 0 names no domain: accepted (Linux's drop RQ sets none), but no memory key matches
    // it, so the queue can carry nothing.
    if wq.pd() != 0 && !core.res.pds.contains(wq.pd()) {
        return Err(bad_res("work queue protection domain does not exist"));
    }
    if send && !core.res.uars.contains(wq.uar_page()) {
        return Err(bad_res("send queue UAR page not allocated"));
    }
    let dbr = if wq.dbr_umem_valid() {
        umems.push(wq.dbr_umem_id());
        super::devx::umem_dbr(core, uid, wq.dbr_umem_id(), wq.dbr_addr())?
    } else {
        check_dbr(wq.dbr_addr())?;
        wq.dbr_addr()
    };
    let size = (1u64 << log_size) << log_stride;
    let buf = if wq.wq_umem_valid() {
        umems.push(wq.wq_umem_id());
        super::devx::umem_buffer(core, uid, wq.wq_umem_id(), wq.wq_umem_offset(), size, false)?
    } else {
        queue_buffer(wq.log_wq_pg_sz(), wq.page_offset(), size, capacity, pas)?
    };
    Ok(WorkQueue {
        buf,
        log_stride,
        log_size,
        dbr,
        pd: wq.pd(),
        uar: wq.uar_page(),
        consumed: 0,
        posted_end: 0,
        fetched: Default::default(),
        // The device starts at WQE 0, as software builds the free list from there.
        linked_head: linked.then_some(0),
        partly_sent: Default::default(),
    })
}

/// Context bytes an object keeps in firmware pages: its context layout as created.
pub(crate) fn context_bytes(bytes: &[u8]) -> Vec<u8> {
    bytes[..bytes.len().min(super::pages::SLOT_SIZE as usize)].to_vec()
}

pub(crate) fn create_eq(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let cmd = input_as!(CreateEqIn<&[u8]>, input);
    let ctx = cmd.eq_context_entry();
    let log_size = ctx.log_eq_size();
    if log_size > super::caps::LOG_MAX_EQ_SZ {
        return Err(bad_param(
            Syndrome::BadQueueSize,
            "log_eq_size above log_max_eq_sz",
        ));
    }
    if !core.res.uars.contains(ctx.uar_page()) {
        return Err(bad_res("EQ UAR page not allocated"));
    }
    let vector = u16::from(ctx.intr());
    if vector >= core.cfg.msix_vectors {
        return Err(bad_param(
            Syndrome::BadVector,
            "EQ interrupt vector beyond the MSI-X table",
        ));
    }
    let size = 64u64 << log_size;
    let buf = queue_buffer(
        ctx.log_page_size(),
        ctx.page_offset(),
        size,
        cmd.pas_capacity(),
        |i| cmd.pas(i).ok(),
    )?;
    let slot = store_new_context(core, &context_bytes(ctx.as_bytes()))?;
    let eq = Eq {
        buf,
        log_size,
        uar: ctx.uar_page(),
        vector,
        event_mask: cmd.event_bitmask(),
        pi: 0,
        ci: 0,
        armed: false,
        overrun: false,
        cq_users: 0,
        slot,
    };
    let Some(eqn) = core.res.eqs.insert(eq) else {
        release_context(core, slot);
        return Err(table_full("EQ table full"));
    };
    output_as!(CreateEqOut<&mut [u8]>, output).set_eq_number(eqn as u8);
    Ok(())
}

pub(crate) fn destroy_eq(core: &mut Core, input: &[u8]) -> CmdResult {
    let eqn = u32::from(input_as!(DestroyEqIn<&[u8]>, input).eq_number());
    let eq = core.res.eqs.get(eqn).ok_or(bad_res("no such EQ"))?;
    if eq.cq_users > 0 {
        return Err(bad_state(
            Syndrome::ObjectInUse,
            "EQ still has CQs attached",
        ));
    }
    let eq = core.res.eqs.remove(eqn).ok_or(bad_res("no such EQ"))?;
    release_context(core, eq.slot);
    Ok(())
}

/// Bytes of one entry of a CQ created with `cqe_sz` (cqc bits 0x08..0x0b), and whether the
/// device pads it, as mlx5_ib's `cqe_sz_to_mlx_sz` encodes the CQE size libmlx5 asks for
/// (`get_cqe_size`: 64, or 128 with `MLX5_CQE_SIZE=128` or `MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE`;
/// the kernel's own CQs are 128 bytes where the cache line is): 0 is 64 bytes; 1 is 128 bytes
/// whose second half holds the 64-byte CQE (libmlx5's `get_sw_cqe` and mlx5_ib's `get_sw_cqe`
/// look there); 2 (`CQE_STRIDE_128_PAD`, asked for with `MLX5DV_CQ_INIT_ATTR_FLAGS_CQE_PAD`
/// where `cqe_128_always` is reported) is the same stride and place, the device writing the
/// whole 128 bytes (Linux's `mlx5_cqwq_create` takes 1 and 2 alike as a 128-byte stride).
/// Compression (`cqe_compression_128`) lays a session out in 128-byte entries as in 64-byte
/// ones, each title and mini-CQE array in its entry's second half. Refused: a collapsed CQ
/// (`cc`), which this device does not write.
fn cqe_stride(cqe_sz: u8, collapsed: bool) -> Result<(u64, bool), CmdError> {
    if collapsed {
        return Err(bad_param(
            Syndrome::BadWqParams,
            "collapsed CQs (cc) are not supported",
        ));
    }
    match cqe_sz {
        0 => Ok((64, false)),
        1 => Ok((128, false)),
        2 => Ok((128, true)),
        _ => Err(bad_param(
            Syndrome::BadWqParams,
            "cqe_sz must be 0 (64 bytes), 1 (128 bytes) or 2 (128 bytes padded)",
        )),
    }
}

pub(crate) fn create_cq(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let cmd = input_as!(CreateCqIn<&[u8]>, input);
    let ctx = cmd.cq_context();
    let (entry_bytes, padded) = cqe_stride(ctx.cqe_sz(), ctx.cc())?;
    let format = ctx.mini_cqe_res_format();
    if ctx.cqe_comp_en()
        && ![
            mini_cqe_res_format::HASH,
            mini_cqe_res_format::CSUM,
            mini_cqe_res_format::CSUM_STRIDX,
        ]
        .contains(&format)
    {
        return Err(bad_param(
            Syndrome::BadWqParams,
            "mini_cqe_res_format must be 0 (hash), 1 (checksum) or 3 (checksum and stride index)",
        ));
    }
    let log_size = ctx.log_cq_size();
    if log_size > super::caps::LOG_MAX_CQ_SZ {
        return Err(bad_param(
            Syndrome::BadQueueSize,
            "log_cq_size above log_max_cq_sz",
        ));
    }
    let eqn = u32::from(ctx.c_eqn());
    if !core.res.eqs.contains(eqn) {
        return Err(bad_res("CQ's EQ does not exist"));
    }
    if !core.res.uars.contains(ctx.uar_page()) {
        return Err(bad_res("CQ UAR page not allocated"));
    }
    let size = entry_bytes << log_size;
    // A DEVX CQ (`devx_set_umem_valid`) names umems of its user context instead of a page
    // list and a doorbell address: the buffer at `cq_umem_offset` of `cq_umem_id` (its page
    // size the umem's; the context's `log_page_size` and `page_offset` then say nothing), the
    // doorbell record at offset `dbr_addr` of `dbr_umem_id`.
    let uid = cmd.uid();
    let mut umems = Vec::new();
    let dbr = if ctx.dbr_umem_valid() {
        umems.push(ctx.dbr_umem_id());
        super::devx::umem_dbr(core, uid, ctx.dbr_umem_id(), ctx.dbr_addr())?
    } else {
        check_dbr(ctx.dbr_addr())?;
        ctx.dbr_addr()
    };
    let buf = if cmd.cq_umem_valid() {
        umems.push(cmd.cq_umem_id());
        super::devx::umem_buffer(
            core,
            uid,
            cmd.cq_umem_id(),
            cmd.cq_umem_offset(),
            size,
            true,
        )?
    } else {
        queue_buffer(
            ctx.log_page_size(),
            ctx.page_offset(),
            size,
            cmd.pas_capacity(),
            |i| cmd.pas(i).ok(),
        )?
    };
    let slot = store_new_context(core, &context_bytes(ctx.as_bytes()))?;
    let cq = Cq {
        entry_bytes,
        padded,
        buf,
        log_size,
        eqn,
        uar: ctx.uar_page(),
        dbr,
        pi: 0,
        arm: CqArm::Disarmed,
        arm_sn: 0,
        overrun_ignore: ctx.oi(),
        in_error: false,
        users: 0,
        slot,
        compression: ctx.cqe_comp_en().then(|| Compression::new(format)),
    };
    let Some(cqn) = core.res.cqs.insert(cq) else {
        release_context(core, slot);
        return Err(table_full("CQ table full"));
    };
    if let Some(eq) = core.res.eqs.get_mut(eqn) {
        eq.cq_users += 1;
    }
    super::devx::hold(core, &umems, (Owned::Cq, cqn));
    output_as!(CreateCqOut<&mut [u8]>, output).set_cqn(cqn);
    Ok(())
}

pub(crate) fn destroy_cq(core: &mut Core, input: &[u8]) -> CmdResult {
    let cqn = input_as!(DestroyCqIn<&[u8]>, input).cqn();
    let cq = core.res.cqs.get(cqn).ok_or(bad_res("no such CQ"))?;
    if cq.users > 0 {
        return Err(bad_state(
            Syndrome::ObjectInUse,
            "CQ still used by a send or receive queue",
        ));
    }
    let cq = core.res.cqs.remove(cqn).ok_or(bad_res("no such CQ"))?;
    if let Some(eq) = core.res.eqs.get_mut(cq.eqn) {
        eq.cq_users = eq.cq_users.saturating_sub(1);
    }
    release_context(core, cq.slot);
    Ok(())
}

fn initial_state(raw: u8) -> CmdResult {
    if raw != QState::Rst as u8 {
        return Err(bad_param(
            Syndrome::BadStateTransition,
            "queues are created in the RST state",
        ));
    }
    Ok(())
}

/// The transitions allowed for SQs and RQs: the manual's, and the ones mlx5_ib's
/// `modify_raw_packet_qp` asks for when it moves a raw packet QP's SQ and RQ with the QP:
/// RST2INIT leaves the SQ in RST (RST to RST), 2ERR from RST or INIT moves a queue still in
/// RST to ERR, and 2ERR from ERR asks for ERR again.
fn transition(from: QState, to_raw: u8) -> Result<QState, CmdError> {
    let to = QState::from_raw(to_raw).ok_or(bad_param(
        Syndrome::BadStateTransition,
        "unknown queue state",
    ))?;
    let ok = matches!(
        (from, to),
        (QState::Rst, QState::Rst)
            | (QState::Rst, QState::Rdy)
            | (QState::Rst, QState::Err)
            | (QState::Rdy, QState::Rdy)
            | (QState::Rdy, QState::Err)
            | (QState::Rdy, QState::Rst)
            | (QState::Err, QState::Err)
            | (QState::Err, QState::Rst)
    );
    if ok {
        Ok(to)
    } else {
        Err(bad_state(
            Syndrome::BadStateTransition,
            "queue state transition not allowed",
        ))
    }
}

pub(crate) fn create_sq(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let cmd = input_as!(CreateSqIn<&[u8]>, input);
    let ctx = cmd.ctx();
    initial_state(ctx.state())?;
    super::pacing::check_sq_rate_index(ctx.packet_pacing_rate_limit_index())?;
    // mlx5e's HTB and mqprio rate limits open an SQ in its queue group (`qos_queue_group_id`).
    let group = u32::from(ctx.qos_queue_group_id());
    super::scheduling::check_queue_group(core, group)?;
    let cqn = ctx.cqn();
    if !core.res.cqs.contains(cqn) {
        return Err(bad_res("SQ's CQ does not exist"));
    }
    // TIS 0 is the function's default transport: Linux's internal SQs (UMR and NOP only)
    // name no TIS of their own.
    let tisn = ctx.tis_num_0();
    if tisn != 0 && !core.res.tises.contains(tisn) {
        return Err(bad_res("SQ's TIS does not exist"));
    }
    let multi_packet = ctx.allow_multi_pkt_send_wqe();
    if multi_packet && !core.cfg.multi_packet_send {
        return Err(bad_param(
            Syndrome::BadWqParams,
            "SQ allows multi-packet send WQEs, which this device does not support \
             (enhanced_multi_pkt_send_wqe is 0)",
        ));
    }
    // An SQ that may post UMR WQEs, as mlx5e opens its ICOSQ (`mlx5e_build_icosq_param`:
    // `reg_umr` = the `reg_umr_sq` capability); refused where the capability is off.
    let reg_umr = ctx.reg_umr();
    if reg_umr && !core.cfg.striding_rq {
        return Err(bad_param(
            Syndrome::BadWqParams,
            "SQ asks for reg_umr, which this device does not support (reg_umr_sq is 0)",
        ));
    }
    let mut umems = Vec::new();
    let wq = work_queue(
        core,
        command_uid(input),
        ctx.wq(),
        WqOf::Sq,
        cmd.pas_capacity(),
        |i| cmd.pas(i).ok(),
        &mut umems,
    )?;
    let slot = store_new_context(core, &context_bytes(ctx.as_bytes()))?;
    let sq = Sq {
        multi_packet,
        reg_umr,
        wq,
        cqn,
        tisn,
        state: QState::Rst,
        min_inline: ctx.min_wqe_inline_mode(),
        user_index: ctx.user_index(),
        slot,
        rate_index: ctx.packet_pacing_rate_limit_index(),
        pacer: Default::default(),
        flush_in_error: ctx.flush_in_error_en(),
    };
    let Some(sqn) = core.res.sqs.insert(sq) else {
        release_context(core, slot);
        return Err(table_full("SQ table full"));
    };
    if let Some(cq) = core.res.cqs.get_mut(cqn) {
        cq.users += 1;
    }
    if let Some(tis) = core.res.tises.get_mut(tisn) {
        tis.sq_users += 1;
    }
    super::devx::hold(core, &umems, (Owned::Sq, sqn));
    core.res.sched.set_sq(sqn, group);
    output_as!(CreateSqOut<&mut [u8]>, output).set_sqn(sqn);
    Ok(())
}

/// A MODIFY command names the state it believes the queue is in; a mismatch is refused.
fn claimed_state_matches(current: QState, claimed: u8, mismatch: &'static str) -> CmdResult {
    if claimed == current as u8 {
        Ok(())
    } else {
        Err(bad_state(Syndrome::StateMismatch, mismatch))
    }
}

pub(crate) fn modify_sq(core: &mut Core, input: &[u8]) -> CmdResult {
    let cmd = input_as!(ModifySqIn<&[u8]>, input);
    let sqn = cmd.sqn();
    let sq = core.res.sqs.get(sqn).ok_or(bad_res("no such SQ"))?;
    claimed_state_matches(
        sq.state,
        cmd.sq_state(),
        "MODIFY_SQ current state does not match the SQ",
    )?;
    let next = transition(sq.state, cmd.ctx().state())?;
    let rate_index = if cmd.modify_bitmask() & MODIFY_SQ_BITMASK_PACKET_PACING_RATE_LIMIT_INDEX != 0
    {
        let index = cmd.ctx().packet_pacing_rate_limit_index();
        super::pacing::check_sq_rate_index(index)?;
        index
    } else {
        sq.rate_index
    };
    // A queue group change (libmlx5's `modify_raw_qp_sched_elem`, mlx5e's `mlx5e_modify_sq`
    // with `qos_update`); without the bit the SQ keeps its group.
    let group = if cmd.modify_bitmask() & MODIFY_SQ_BITMASK_QOS_QUEUE_GROUP_ID != 0 {
        let group = u32::from(cmd.ctx().qos_queue_group_id());
        super::scheduling::check_queue_group(core, group)?;
        group
    } else {
        core.res.sched.sq(sqn)
    };
    let slot = sq.slot;
    let bytes = context_bytes(cmd.ctx().as_bytes());
    let sq = core.res.sqs.get_mut(sqn).ok_or(bad_res("no such SQ"))?;
    if next == QState::Rst || (sq.state == QState::Rst && next == QState::Rdy) {
        sq.wq.restart();
    }
    sq.state = next;
    if sq.rate_index != rate_index {
        sq.rate_index = rate_index;
        sq.pacer.reset();
    }
    write_context(core, slot, &bytes);
    core.res.sched.set_sq(sqn, group);
    Ok(())
}

pub(crate) fn destroy_sq(core: &mut Core, input: &[u8]) -> CmdResult {
    let sqn = input_as!(DestroySqIn<&[u8]>, input).sqn();
    let sq = core.res.sqs.remove(sqn).ok_or(bad_res("no such SQ"))?;
    core.res.sched.set_sq(sqn, 0);
    if let Some(cq) = core.res.cqs.get_mut(sq.cqn) {
        cq.users = cq.users.saturating_sub(1);
    }
    if let Some(tis) = core.res.tises.get_mut(sq.tisn) {
        tis.sq_users = tis.sq_users.saturating_sub(1);
    }
    release_context(core, sq.slot);
    Ok(())
}

pub(crate) fn create_rq(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let cmd = input_as!(CreateRqIn<&[u8]>, input);
    let ctx = cmd.ctx();
    initial_state(ctx.state())?;
    let cqn = ctx.cqn();
    if !core.res.cqs.contains(cqn) {
        return Err(bad_res("RQ's CQ does not exist"));
    }
    let mut umems = Vec::new();
    let (wq, memory) = match ctx.mem_rq_type() {
        0 => (
            Some(work_queue(
                core,
                command_uid(input),
                ctx.wq(),
                WqOf::Rq,
                cmd.pas_capacity(),
                |i| cmd.pas(i).ok(),
                &mut umems,
            )?),
            RqMemory::Own,
        ),
        1 if is_striding(ctx.wq().wq_type()) => {
            return Err(bad_param(
                Syndrome::BadWqParams,
                "a striding RQ (wq_type 2 or 3) needs its own ring (mem_rq_type 0), not an RMP",
            ))
        }
        1 => {
            let rmpn = ctx.rmpn();
            if !core.res.is_rmp(rmpn) {
                return Err(bad_res("RQ's RMP does not exist"));
            }
            (None, RqMemory::Rmp(rmpn))
        }
        _ => {
            return Err(bad_param(
                Syndrome::BadWqParams,
                "mem_rq_type must be 0 (inline) or 1 (RMP)",
            ))
        }
    };
    let striding = striding_geometry(core, ctx.wq())?;
    let counter_set = u32::from(ctx.counter_set_id());
    qcounters::check_named(core, counter_set)?;
    let slot = store_new_context(core, &context_bytes(ctx.as_bytes()))?;
    let rq = Rq {
        wq,
        memory,
        cqn,
        state: QState::Rst,
        tir_users: 0,
        rqt_users: 0,
        counter_set,
        user_index: ctx.user_index(),
        slot,
        striding,
        vlan_strip: !ctx.vsd(),
    };
    let Some(rqn) = core.res.rqs.insert(rq) else {
        release_context(core, slot);
        return Err(table_full("RQ table full"));
    };
    if let Some(cq) = core.res.cqs.get_mut(cqn) {
        cq.users += 1;
    }
    if let RqMemory::Rmp(rmpn) = memory {
        if let Some(rmp) = core.res.rmps.get_mut(rmpn) {
            rmp.rq_users += 1;
        }
    }
    super::devx::hold(core, &umems, (Owned::Rq, rqn));
    output_as!(CreateRqOut<&mut [u8]>, output).set_rqn(rqn);
    Ok(())
}

/// Whether `wq_type` is a striding RQ's: cyclic (3) or linked list (2, mlx5e's
/// `MLX5_WQ_TYPE_LINKED_LIST_STRIDING_RQ`, whose WQEs are taken in next-segment order:
/// `engine::striding_list`).
fn is_striding(wq_type: u8) -> bool {
    wq_type == WqType::StridingCyclic as u8 || wq_type == WqType::LinkedListStridingRq as u8
}

/// A striding RQ's strides, checked against the capabilities (`None` for a cyclic RQ).
fn striding_geometry(core: &Core, wq: Wq<&[u8]>) -> Result<Option<Striding>, CmdError> {
    use cxdirect_hw::wq::striding::{log_strides, LOG_STRIDE_BYTES_BASE, MAX_LOG_STRIDE_BYTES};
    if !is_striding(wq.wq_type()) {
        return Ok(None);
    }
    if !core.cfg.striding_rq {
        return Err(bad_param(
            Syndrome::BadWqParams,
            "striding RQs are not supported by this device (striding_rq is 0)",
        ));
    }
    // ext_stride_num_range is reported with striding RQs (`function::caps`).
    let log_strides = log_strides(wq.log_wqe_num_of_strides(), true);
    let log_stride_bytes = wq.log_wqe_stride_size() + LOG_STRIDE_BYTES_BASE;
    let Some(log_strides) = log_strides.filter(|_| log_stride_bytes <= MAX_LOG_STRIDE_BYTES) else {
        return Err(bad_param(
            Syndrome::BadWqParams,
            "striding RQ geometry out of range: log_wqe_num_of_strides must be 0..=7 or, \
             signed (ext_stride_num_range), 0xa..=0xf (8..65536 strides), and \
             log_wqe_stride_size 0..=7 (64..8192 bytes)",
        ));
    };
    Ok(Some(Striding {
        log_strides,
        log_stride_bytes,
        two_byte_shift: wq.two_byte_shift_en(),
        used: 0,
    }))
}

pub(crate) fn modify_rq(core: &mut Core, input: &[u8]) -> CmdResult {
    let cmd = input_as!(ModifyRqIn<&[u8]>, input);
    let rqn = cmd.rqn();
    if core.res.rqs.contains(rqn) {
        // Writes in flight land before the queue changes state.
        core.land_late_writes(Some(rqn));
    }
    let rq = core.res.rqs.get(rqn).ok_or(bad_res("no such RQ"))?;
    claimed_state_matches(
        rq.state,
        cmd.rq_state(),
        "MODIFY_RQ current state does not match the RQ",
    )?;
    let next = transition(rq.state, cmd.ctx().state())?;
    let slot = rq.slot;
    let old_set = rq.counter_set;
    let bytes = context_bytes(cmd.ctx().as_bytes());
    let new_set = if cmd.modify_bitmask() & MODIFY_RQ_BITMASK_RQ_COUNTER_SET_ID != 0 {
        let id = u32::from(cmd.ctx().counter_set_id());
        qcounters::check_named(core, id)?;
        id
    } else {
        old_set
    };
    let rq = core.res.rqs.get_mut(rqn).ok_or(bad_res("no such RQ"))?;
    rq.counter_set = new_set;
    // mlx5e's `ethtool -K rxvlan` (`mlx5e_modify_rq_vsd`).
    if cmd.modify_bitmask() & MODIFY_RQ_BITMASK_VSD != 0 {
        rq.vlan_strip = !cmd.ctx().vsd();
    }
    if let Some(wq) = rq.wq.as_mut() {
        if next == QState::Rst || (rq.state == QState::Rst && next == QState::Rdy) {
            wq.restart();
            if let Some(striding) = rq.striding.as_mut() {
                striding.used = 0;
            }
        }
    }
    rq.state = next;
    write_context(core, slot, &bytes);
    Ok(())
}

pub(crate) fn query_sq(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let sqn = input_as!(cxdirect_hw::wq::QuerySqIn<&[u8]>, input).sqn();
    let sq = core.res.sqs.get(sqn).ok_or(bad_res("no such SQ"))?;
    let (state, cqn, tisn, multi) = (sq.state as u8, sq.cqn, sq.tisn, sq.multi_packet);
    let min_inline = sq.min_inline;
    let mut out = output_as!(cxdirect_hw::wq::QuerySqOut<&mut [u8]>, output);
    out.sq_context_mut()
        .set_state(state)
        .set_cqn(cqn)
        .set_tis_num_0(tisn)
        .set_tis_lst_sz(u16::from(tisn != 0))
        .set_min_wqe_inline_mode(min_inline)
        .set_allow_multi_pkt_send_wqe(multi);
    Ok(())
}

pub(crate) fn query_rq(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let rqn = input_as!(QueryRqIn<&[u8]>, input).rqn();
    let rq = core.res.rqs.get(rqn).ok_or(bad_res("no such RQ"))?;
    let (state, cqn, counter_set, memory) = (rq.state as u8, rq.cqn, rq.counter_set, rq.memory);
    let vsd = !rq.vlan_strip;
    let mut out = output_as!(QueryRqOut<&mut [u8]>, output);
    let mut ctx = out.rq_context_mut();
    ctx.set_state(state)
        .set_vsd(vsd)
        .set_cqn(cqn)
        .set_counter_set_id(counter_set as u8);
    match memory {
        RqMemory::Own => {
            ctx.set_mem_rq_type(0);
        }
        RqMemory::Rmp(rmpn) => {
            ctx.set_mem_rq_type(1).set_rmpn(rmpn);
        }
    }
    Ok(())
}

pub(crate) fn destroy_rq(core: &mut Core, input: &[u8]) -> CmdResult {
    let rqn = input_as!(DestroyRqIn<&[u8]>, input).rqn();
    let rq = core.res.rqs.get(rqn).ok_or(bad_res("no such RQ"))?;
    if rq.tir_users > 0 || rq.rqt_users > 0 {
        return Err(bad_state(
            Syndrome::ObjectInUse,
            "RQ still used by a TIR or RQ table",
        ));
    }
    // Writes in flight land before the queue goes away.
    core.land_late_writes(Some(rqn));
    let rq = core.res.rqs.remove(rqn).ok_or(bad_res("no such RQ"))?;
    if let Some(cq) = core.res.cqs.get_mut(rq.cqn) {
        cq.users = cq.users.saturating_sub(1);
    }
    if let RqMemory::Rmp(rmpn) = rq.memory {
        if let Some(rmp) = core.res.rmps.get_mut(rmpn) {
            rmp.rq_users = rmp.rq_users.saturating_sub(1);
        }
    }
    release_context(core, rq.slot);
    Ok(())
}

pub(crate) fn create_rmp(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let cmd = input_as!(CreateRmpIn<&[u8]>, input);
    let ctx = cmd.ctx();
    let state = QState::from_raw(ctx.state())
        .ok_or(bad_param(Syndrome::BadStateTransition, "unknown RMP state"))?;
    if state != QState::Rdy {
        return Err(bad_param(
            Syndrome::BadStateTransition,
            "RMPs are created in the RDY state",
        ));
    }
    let mut umems = Vec::new();
    let (wq, lwm) = shared_ring(
        core,
        command_uid(input),
        ctx.wq(),
        cmd.pas_capacity(),
        |i| cmd.pas(i).ok(),
        &mut umems,
    )?;
    let slot = store_new_context(core, &context_bytes(ctx.as_bytes()))?;
    let rmp = Rmp {
        wq,
        state,
        lwm,
        rq_users: 0,
        slot,
        xrq: None,
    };
    let Some(rmpn) = core.res.rmps.insert(rmp) else {
        release_context(core, slot);
        return Err(table_full("RMP table full"));
    };
    super::devx::hold(core, &umems, (Owned::Rmp, rmpn));
    output_as!(CreateRmpOut<&mut [u8]>, output).set_rmpn(rmpn);
    Ok(())
}

pub(crate) fn modify_rmp(core: &mut Core, input: &[u8]) -> CmdResult {
    let cmd = input_as!(ModifyRmpIn<&[u8]>, input);
    let rmpn = cmd.rmpn();
    if !core.res.is_rmp(rmpn) {
        return Err(bad_res("no such RMP"));
    }
    let rmp = core.res.rmps.get(rmpn).ok_or(bad_res("no such RMP"))?;
    claimed_state_matches(
        rmp.state,
        cmd.rmp_state(),
        "MODIFY_RMP current state does not match the RMP",
    )?;
    let next = QState::from_raw(cmd.ctx().state())
        .ok_or(bad_param(Syndrome::BadStateTransition, "unknown RMP state"))?;
    let allowed = matches!(
        (rmp.state, next),
        (QState::Rdy, QState::Rdy) | (QState::Rdy, QState::Err) | (QState::Err, QState::Rdy)
    );
    if !allowed {
        return Err(bad_state(
            Syndrome::BadStateTransition,
            "RMP state transition not allowed",
        ));
    }
    let entries = rmp.wq.entries();
    let set_lwm = cmd.bitmask().lwm();
    let lwm = cmd.ctx().wq().lwm();
    if set_lwm && u32::from(lwm) > entries {
        return Err(bad_param(
            Syndrome::BadWqParams,
            "RMP limit above the ring size",
        ));
    }
    let slot = rmp.slot;
    let bytes = context_bytes(cmd.ctx().as_bytes());
    let rmp = core.res.rmps.get_mut(rmpn).ok_or(bad_res("no such RMP"))?;
    if set_lwm {
        rmp.lwm = lwm;
    }
    let entering_error = rmp.state == QState::Rdy && next == QState::Err;
    rmp.state = next;
    write_context(core, slot, &bytes);
    if entering_error {
        core.rmp_rqs_enter_error(rmpn);
    }
    Ok(())
}

pub(crate) fn query_rmp(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let rmpn = input_as!(QueryRmpIn<&[u8]>, input).rmpn();
    if !core.res.is_rmp(rmpn) {
        return Err(bad_res("no such RMP"));
    }
    let rmp = core.res.rmps.get(rmpn).ok_or(bad_res("no such RMP"))?;
    let mut out = output_as!(QueryRmpOut<&mut [u8]>, output);
    let mut ctx = out.rmp_context_mut();
    ctx.set_state(rmp.state as u8)
        .set_basic_cyclic_rcv_wqe(true);
    report_ring(core, rmp, 1, ctx.wq_mut());
    Ok(())
}

/// Checks and builds the ring of an RMP or an XRQ (a linked list accepted, as Linux creates
/// an RC SRQ) with its limit (`lwm`), which may not exceed the ring; the umems it rests on are
/// added to `umems`.
pub(crate) fn shared_ring(
    core: &Core,
    uid: u16,
    wq: Wq<&[u8]>,
    capacity: usize,
    pas: impl Fn(usize) -> Option<u64>,
    umems: &mut Vec<u32>,
) -> Result<(WorkQueue, u16), CmdError> {
    let lwm = wq.lwm();
    let ring = work_queue(core, uid, wq, WqOf::Rmp, capacity, pas, umems)?;
    if u32::from(lwm) > ring.entries() {
        return Err(bad_param(
            Syndrome::BadWqParams,
            "shared receive queue limit above the ring size",
        ));
    }
    Ok((ring, lwm))
}

/// Writes what QUERY_RMP and QUERY_XRQ report of an RMP's ring into `wq`: its type
/// (`wq_type`), limit, PD, doorbell record, size, stride, and the device's and the software's
/// counters (the posted receives past what the device consumed).
pub(crate) fn report_ring(core: &Core, rmp: &Rmp, wq_type: u8, mut wq: Wq<&mut [u8]>) {
    let posted = core.posted_wqes(&rmp.wq).unwrap_or(0);
    wq.set_wq_type(wq_type)
        .set_lwm(rmp.lwm)
        .set_pd(rmp.wq.pd)
        .set_dbr_addr(rmp.wq.dbr)
        .set_log_wq_sz(rmp.wq.log_size)
        .set_log_wq_stride(rmp.wq.log_stride)
        .set_hw_counter(u32::from(rmp.wq.consumed))
        .set_sw_counter(u32::from(rmp.wq.consumed.wrapping_add(posted)));
}

pub(crate) fn destroy_rmp(core: &mut Core, input: &[u8]) -> CmdResult {
    let rmpn = input_as!(DestroyRmpIn<&[u8]>, input).rmpn();
    // An XRQ shares the number space but is destroyed by DESTROY_XRQ.
    let rmp = core
        .res
        .rmps
        .get(rmpn)
        .filter(|r| r.xrq.is_none())
        .ok_or(bad_res("no such RMP"))?;
    if rmp.rq_users > 0 {
        return Err(bad_state(
            Syndrome::ObjectInUse,
            "RMP still has RQs drawing from it",
        ));
    }
    let rmp = core.res.rmps.remove(rmpn).ok_or(bad_res("no such RMP"))?;
    release_context(core, rmp.slot);
    Ok(())
}
