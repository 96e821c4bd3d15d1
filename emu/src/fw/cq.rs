//! MODIFY_CQ: changing a live CQ's event moderation, as mlx5_core's
//! `mlx5_core_modify_cq_moderation` does for the kernel's adaptive moderation (net DIM in mlx5e,
//! RDMA DIM in ib_core's CQ pools, both when `cq_moderation` is reported), and resizing it
//! (op_mod 1, `cq_resize`), as mlx5_ib's `mlx5_ib_resize_cq` does for `ibv_resize_cq`.
//!
//! The model keeps the new values in the CQ's context and, as at CREATE_CQ, raises an event for
//! every completion of an armed CQ: moderation only delays events on a ConnectX, so an event per
//! completion is within what a driver must handle. Moving the CQ to another EQ
//! (`cq_eq_remap`) is not reported and is refused.

use super::pages::write_context;
use super::queues::queue_buffer;
use super::{bad_param, bad_res, bad_state, input_as, CmdError, CmdResult, Core, Syndrome};
use crate::engine::cq::ResizeRefused;
use cxdirect_hw::cmd::CmdStatus;
use cxdirect_hw::cq::{
    modify_cq_resize_select as resize_select, modify_cq_select as select, Cqc, ModifyCqIn,
    MODIFY_CQ_OPMOD_RESIZE,
};

/// Fields a MODIFY_CQ with op_mod 0 may change here.
const MODIFIABLE: u32 = select::PERIOD | select::COUNT | select::OVERRUN | select::PERIOD_MODE;

pub(crate) fn modify_cq(core: &mut Core, input: &[u8]) -> CmdResult {
    let cmd = input_as!(ModifyCqIn<&[u8]>, input);
    match cmd.op_mod() {
        0 => {}
        MODIFY_CQ_OPMOD_RESIZE => return resize(core, &cmd),
        _ => {
            return Err(bad_param(
                Syndrome::BadOpMod,
                "MODIFY_CQ op_mod is 0 (modify) or 1 (resize)",
            ))
        }
    }
    let fields = cmd.modify_field_select();
    if fields & select::EQN != 0 {
        return Err(bad_param(
            Syndrome::BadOpMod,
            "moving a CQ to another EQ needs cq_eq_remap, which is not reported",
        ));
    }
    if fields & !MODIFIABLE != 0 {
        return Err(bad_param(
            Syndrome::BadOpMod,
            "modify_field_select names a field MODIFY_CQ does not change",
        ));
    }
    let new = cmd.cq_context();
    if fields & select::PERIOD_MODE != 0 && new.cq_period_mode() != 0 {
        return Err(bad_param(
            Syndrome::BadOpMod,
            "cq_period_mode 1 (from the last CQE) needs cq_period_start_from_cqe, which is not reported",
        ));
    }
    let cqn = cmd.cqn();
    let cq = core.res.cqs.get_mut(cqn).ok_or(bad_res("no such CQ"))?;
    if fields & select::OVERRUN != 0 {
        cq.overrun_ignore = new.oi();
    }
    let slot = cq.slot;
    let Some(mut context) = core.pages.live.get(&slot.addr()).cloned() else {
        return Err(bad_res("the CQ's context is not in the firmware's pages"));
    };
    if let Ok(mut ctx) = Cqc::new(&mut context[..]) {
        if fields & select::PERIOD != 0 {
            ctx.set_cq_period(new.cq_period());
        }
        if fields & select::COUNT != 0 {
            ctx.set_cq_max_count(new.cq_max_count());
        }
        if fields & select::OVERRUN != 0 {
            ctx.set_oi(new.oi());
        }
        if fields & select::PERIOD_MODE != 0 {
            ctx.set_cq_period_mode(new.cq_period_mode());
        }
    }
    write_context(core, slot, &context);
    Ok(())
}

/// MODIFY_CQ with op_mod 1, as `mlx5_ib_resize_cq` sends it: `resize_field_select` names
/// `log_cq_size`, `page_offset` and `log_page_size` of the context (a field not named keeps
/// its value), `pas` lists the new buffer's pages. The entry size stays (mlx5_ib and libmlx5
/// never change it). The device writes the resize CQE in the old buffer, then uses the new
/// one ([`crate::engine::cq::resize`]).
fn resize(core: &mut Core, cmd: &ModifyCqIn<&[u8]>) -> CmdResult {
    let fields = cmd.modify_field_select();
    let known = resize_select::LOG_SIZE | resize_select::PG_OFFSET | resize_select::PG_SIZE;
    if fields & !known != 0 {
        return Err(bad_param(
            Syndrome::BadOpMod,
            "resize_field_select names a field a resize does not change",
        ));
    }
    let cqn = cmd.cqn();
    let cq = core.res.cqs.get(cqn).ok_or(bad_res("no such CQ"))?;
    let (slot, entry_bytes, old_log_size) = (cq.slot, cq.entry_bytes, cq.log_size);
    if cq.compression.is_some() {
        // A compressed session's title and mini-CQE arrays cannot be copied slot by slot as
        // libmlx5 copies CQEs; mlx5_ib creates compressed CQs only on request (mlx5dv).
        return Err(bad_param(
            Syndrome::BadWqParams,
            "resizing a CQ with CQE compression is not modelled",
        ));
    }
    let Some(mut context) = core.pages.live.get(&slot.addr()).cloned() else {
        return Err(bad_res("the CQ's context is not in the firmware's pages"));
    };
    let new = cmd.cq_context();
    let (log_size, page_offset, log_page_size) = {
        let old = Cqc::new(&context[..]).map_err(|_| bad_res("the CQ's context is unreadable"))?;
        let pick = |bit: u32, new: u8, old: u8| if fields & bit != 0 { new } else { old };
        (
            pick(resize_select::LOG_SIZE, new.log_cq_size(), old_log_size),
            pick(
                resize_select::PG_OFFSET,
                new.page_offset(),
                old.page_offset(),
            ),
            pick(
                resize_select::PG_SIZE,
                new.log_page_size(),
                old.log_page_size(),
            ),
        )
    };
    if log_size > super::caps::LOG_MAX_CQ_SZ {
        return Err(bad_param(
            Syndrome::BadQueueSize,
            "log_cq_size above log_max_cq_sz",
        ));
    }
    let buf = queue_buffer(
        log_page_size,
        page_offset,
        entry_bytes << log_size,
        cmd.pas_capacity(),
        |i| cmd.pas(i).ok(),
    )?;
    crate::engine::cq::resize(core, cqn, buf, log_size).map_err(|refused| match refused {
        ResizeRefused::Unusable => bad_state(Syndrome::StateMismatch, "the CQ is in error"),
        ResizeRefused::Dma => bad_state(
            Syndrome::BadAddress,
            "the CQ's doorbell record or buffer cannot be reached",
        ),
        // mlx5_core's `cmd_status_to_err` makes this -EINVAL.
        ResizeRefused::TooManyOutstanding => CmdError::new(
            CmdStatus::BadSize,
            Syndrome::BadQueueSize,
            "more completions outstanding than the new size holds",
        ),
    })?;
    if let Ok(mut ctx) = Cqc::new(&mut context[..]) {
        ctx.set_log_cq_size(log_size)
            .set_page_offset(page_offset)
            .set_log_page_size(log_page_size);
    }
    write_context(core, slot, &context);
    Ok(())
}
