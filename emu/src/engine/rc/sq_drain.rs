//! Signature pipelining: a QP whose context has `drain_sigerr` (libmlx5 sets it by INIT2INIT
//! for MLX5DV_QP_CREATE_SIG_PIPELINING, `mlx5_modify_qp_drain_sigerr`) stops its send queue
//! after a WQE whose signature check failed. The QP moves to SQD (`MLX5_QPC_STATE_SQDRAINED`)
//! with the WQEs after the failed one left unexecuted, raises SQ_DRAINED once every message
//! it sent has been acknowledged, and goes on from the next WQE when SQD_RTS_QP moves it back
//! to RTS. Meanwhile software may rewrite the waiting WQEs (libmlx5's
//! `mlx5dv_qp_cancel_posted_send_wrs` turns them into NOPs, starting at the
//! `hw_sq_wqebb_counter` QUERY_QP reports). In SQD the QP still receives, acknowledges and
//! retransmits what it sent; it only starts no new WQE.

use crate::function::Core;
use cxdirect_hw::eqe::EventType;
use cxdirect_hw::qp::state;

/// Whether a QP in `qp_state` carries on with what it sent: acknowledgements, READ
/// responses, retransmissions (RTS, and SQD while it drains).
pub(crate) fn sends(qp_state: u8) -> bool {
    matches!(qp_state, state::RTS | state::SQD)
}

/// Whether a QP in `qp_state` takes requests from its peer.
pub(crate) fn receives(qp_state: u8) -> bool {
    matches!(qp_state, state::RTR | state::RTS | state::SQD)
}

/// A WQE of QP `qpn` met a signature error: a `drain_sigerr` QP drains after it.
pub(super) fn signature_error(core: &mut Core, qpn: u32) {
    if let Some(qp) = core.res.qps.get_mut(qpn) {
        if qp.req.drain_sigerr {
            qp.req.enter_sqd = true;
        }
    }
}

/// After a WQE of QP `qpn` was consumed: moves the QP to SQD if that WQE asked for it.
/// Returns whether it did (the send queue then starts nothing more).
pub(super) fn enter_if_asked(core: &mut Core, qpn: u32) -> bool {
    let Some(qp) = core.res.qps.get_mut(qpn) else {
        return false;
    };
    if !std::mem::take(&mut qp.req.enter_sqd) {
        return false;
    }
    qp.state = state::SQD;
    qp.req.drained_event_owed = true;
    drained(core, qpn);
    true
}

/// Raises SQ_DRAINED for QP `qpn` when it is owed and nothing the QP sent is outstanding.
pub(crate) fn drained(core: &mut Core, qpn: u32) {
    let Some(qp) = core.res.qps.get_mut(qpn) else {
        return;
    };
    let idle = qp.req.outstanding.is_empty() && qp.req.sending.is_none();
    if qp.state != state::SQD || !qp.req.drained_event_owed || !idle {
        return;
    }
    qp.req.drained_event_owed = false;
    super::qp_error::post_qp_event(core, qpn, EventType::SqDrained);
}

/// SQD_RTS_QP moved QP `qpn` back to RTS: no SQ_DRAINED is owed any more (the requester
/// then runs what was posted meanwhile, [`super::resume_after_drain`]).
pub(super) fn leave(core: &mut Core, qpn: u32) {
    if let Some(qp) = core.res.qps.get_mut(qpn) {
        qp.req.drained_event_owed = false;
    }
}
