//! SET_PP_RATE_LIMIT: writes one entry of the packet pacing rate table, as mlx5_core's
//! `mlx5_set_pp_rate_limit_cmd` (rl.c) sends it for `mlx5_rl_add_rate_raw` (mlx5e's
//! `ndo_set_tx_maxrate`, mlx5_ib's raw packet QP rate limits, and mlx5_ib's
//! MLX5_IB_METHOD_PP_OBJ_ALLOC for libmlx5's `mlx5dv_pp_alloc`): the entry's index, the
//! context the caller gave (rate in kb/s, burst bound, typical packet size) and the uid that
//! owns it (the DEVX context's uid for a dedicated entry, the shared uid otherwise). An
//! entry is let go of by writing its context as zeros under the same uid.

use super::{bad_param, input_as, CmdError, CmdResult, Core, Syndrome};
use crate::objects::pacing::{RateEntry, RateTable, MAX_RATE_KBPS, MIN_RATE_KBPS};
use cxdirect_hw::cmd::CmdStatus;
use cxdirect_hw::qos::SetPpRateLimitIn;

/// SET_PP_RATE_LIMIT. Refused: index 0 (unlimited, never written: Linux hands out index 1 and
/// up) or an index past the table; a non-zero rate outside the QoS page's range; an entry
/// another user context owns (the ownership rules of `fw::devx`: uid 0 and the shared uid
/// may write any entry, and an entry written under the shared uid any context may write).
pub(crate) fn set_pp_rate_limit(core: &mut Core, input: &[u8]) -> CmdResult {
    let cmd = input_as!(SetPpRateLimitIn<&[u8]>, input);
    let index = cmd.rate_limit_index();
    let uid = cmd.uid();
    if !RateTable::writable(index) {
        return Err(bad_param(
            Syndrome::RateIndexOutOfRange,
            "rate limit index 0 or past the rate table",
        ));
    }
    let ctx = cmd.ctx();
    let rate = ctx.rate_limit();
    if rate != 0 && !(MIN_RATE_KBPS..=MAX_RATE_KBPS).contains(&rate) {
        return Err(bad_param(
            Syndrome::RateOutOfRange,
            "rate outside the packet pacing range",
        ));
    }
    if let Some(held) = core.res.rates.get(index) {
        if !super::devx::may_touch(held.uid, uid) {
            return Err(CmdError::new(
                CmdStatus::BadParameter,
                Syndrome::UidMismatch,
                "rate table entry belongs to another user context",
            ));
        }
    }
    let entry = (rate != 0).then(|| RateEntry {
        rate_kbps: rate,
        burst_upper_bound: ctx.burst_upper_bound(),
        typical_packet_size: ctx.typical_packet_size(),
        uid,
    });
    core.res.rates.set(index, entry);
    Ok(())
}

/// An SQ context's `packet_pacing_rate_limit_index` (CREATE_SQ, and MODIFY_SQ with
/// `MODIFY_SQ_BITMASK_PACKET_PACING_RATE_LIMIT_INDEX`, as mlx5e's `mlx5e_modify_sq` and
/// mlx5_ib's `modify_raw_packet_qp_sq` send it): 0 (unlimited) or an entry of the table.
pub(crate) fn check_sq_rate_index(index: u16) -> CmdResult {
    if index != 0 && !RateTable::writable(index) {
        return Err(bad_param(
            Syndrome::RateIndexOutOfRange,
            "SQ names a rate limit index past the rate table",
        ));
    }
    Ok(())
}
