//! MODIFY_CQ: changing a live CQ's event moderation, as mlx5_core's
//! `mlx5_core_modify_cq_moderation` does for the kernel's adaptive moderation (net DIM in mlx5e,
//! RDMA DIM in ib_core's CQ pools, both when `cq_moderation` is reported).
//!
//! The model keeps the new values in the CQ's context and, as at CREATE_CQ, raises an event for
//! every completion of an armed CQ: moderation only delays events on a ConnectX, so an event per
//! completion is within what a driver must handle. Resizing (op_mod 1, `cq_resize`) and moving
//! the CQ to another EQ (`cq_eq_remap`) are not reported and are refused.

use super::pages::write_context;
use super::{bad_param, bad_res, input_as, CmdResult, Core, Syndrome};
use cxdirect_hw::cq::{modify_cq_select as select, Cqc, ModifyCqIn};

/// Fields a MODIFY_CQ with op_mod 0 may change here.
const MODIFIABLE: u32 = select::PERIOD | select::COUNT | select::OVERRUN | select::PERIOD_MODE;

pub(crate) fn modify_cq(core: &mut Core, input: &[u8]) -> CmdResult {
    let cmd = input_as!(ModifyCqIn<&[u8]>, input);
    if cmd.op_mod() != 0 {
        return Err(bad_param(
            Syndrome::BadOpMod,
            "MODIFY_CQ op_mod 1 resizes a CQ, and cq_resize is not reported",
        ));
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
