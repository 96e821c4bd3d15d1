//! An RC QP entering the error state, and the affiliated asynchronous events it raises (IBA
//! 11.6.3; mlx5_ib turns them into QP events): a WQ catastrophic error when a completion
//! cannot be written (or the responder cannot execute a granted request), an invalid request
//! error when the responder refuses a malformed request, an access violation when it refuses
//! a remote access, and the last WQE reached of a QP taking its receives from an SRQ once it
//! will consume no more of them. In error, every receive WQE posted on the QP's own ring
//! completes flushed and no timer runs.

use crate::counters::add;
use crate::function::Core;
use crate::objects::rc::RcReceive;
use cxdirect_hw::cqe::{CqeOpcode, CqeSyndrome};
use cxdirect_hw::eqe::{EqeQpSrq, EventType};
use cxdirect_hw::qp::state;

/// Queue kind of a QP in a QP event's data (`MLX5_EVENT_QUEUE_TYPE_QP`).
const EVENT_QUEUE_TYPE_QP: u8 = 0;

/// Posts `event` for QP `qpn` to the EQ subscribed to it, if any.
pub(super) fn post_qp_event(core: &mut Core, qpn: u32, event: EventType) {
    // A DCT's responder context is the device's own: no driver knows its number. A refused
    // request only ends that initiator's connection (its next one starts the context over).
    if core
        .res
        .qps
        .get(qpn)
        .is_some_and(|qp| qp.dc_responder.is_some())
    {
        return;
    }
    let mut data = [0u8; 28];
    if let Ok(mut e) = EqeQpSrq::new(&mut data[..]) {
        e.set_kind(EVENT_QUEUE_TYPE_QP).set_qp_srq_n(qpn);
    }
    crate::engine::eq::post_subscribed_event(core, event, 0, &data);
}

/// QP `qpn` goes to error on its own (not by command), raising `event` if given: the state
/// changes, then [`errored`]. Nothing happens to a QP already in error.
pub(super) fn enter_error(core: &mut Core, qpn: u32, event: Option<EventType>) {
    let Some(qp) = core.res.qps.get_mut(qpn) else {
        return;
    };
    if qp.state == state::ERR {
        return;
    }
    qp.state = state::ERR;
    if let Some(event) = event {
        post_qp_event(core, qpn, event);
    }
    errored(core, qpn);
}

/// QP `qpn` is now in error (by command or on its own): its timers stop, its receive WQEs
/// complete flushed, and a QP on an SRQ reports its last WQE reached.
pub(super) fn errored(core: &mut Core, qpn: u32) {
    let Some(qp) = core.res.qps.get_mut(qpn) else {
        return;
    };
    qp.req.ack_deadline = None;
    qp.req.rnr_until = None;
    let shared = matches!(qp.receive, RcReceive::Shared(_));
    super::responder_recv::flush_receives(core, qpn);
    if shared {
        post_qp_event(core, qpn, EventType::SrqLastWqe);
    }
}

/// Writes `cqe` to CQ `cqn` for QP `qpn`; a completion that cannot be written is lost, and
/// the QP goes to error with a WQ catastrophic error.
pub(super) fn post_cqe(core: &mut Core, qpn: u32, cqn: u32, cqe: &mut [u8; 64]) {
    let Some(user_index) = core.res.qps.get(qpn).map(|qp| qp.user_index) else {
        return;
    };
    post_cqe_as(core, qpn, cqn, user_index, cqe);
}

/// [`post_cqe`] carrying `user_index` rather than the QP's (an XRC SRQ's receives).
pub(super) fn post_cqe_as(
    core: &mut Core,
    qpn: u32,
    cqn: u32,
    user_index: u32,
    cqe: &mut [u8; 64],
) {
    crate::engine::cq::set_user_index(cqe, user_index);
    if crate::engine::cq::post(core, cqn, cqe).is_err() {
        add(&core.counters.completions_lost, 1);
        enter_error(core, qpn, Some(EventType::WqCatastrophicError));
    }
}

/// The side of an RC QP an error CQE reports.
#[derive(Clone, Copy)]
pub(super) enum ErrorSide {
    /// A send WQE of opcode `wqe_opcode`: on the send CQ, as a requester error.
    Requester {
        /// The WQE's opcode (`s_wqe_opcode`).
        wqe_opcode: u8,
    },
    /// A receive WQE: on the receive CQ, as a responder error.
    Responder,
}

/// Writes the error CQE (`syndrome`) of WQE `index` of QP `qpn` to the CQ of `side`, through
/// [`post_cqe`]. Nothing is written for a QP that does not exist.
pub(super) fn post_error_cqe(
    core: &mut Core,
    qpn: u32,
    index: u16,
    syndrome: CqeSyndrome,
    side: ErrorSide,
) {
    let Some(qp) = core.res.qps.get(qpn) else {
        return;
    };
    let (cqn, opcode, wqe_opcode) = match side {
        ErrorSide::Requester { wqe_opcode } => (qp.cqn_snd, CqeOpcode::ReqErr, wqe_opcode),
        ErrorSide::Responder => (
            qp.resp.xrc.map_or(qp.cqn_rcv, |x| x.cqn),
            CqeOpcode::RespErr,
            0,
        ),
    };
    let user_index = match (side, qp.resp.xrc) {
        (ErrorSide::Responder, Some(x)) => x.user_index,
        _ => qp.user_index,
    };
    let mut cqe = crate::engine::cq::error_cqe(opcode, syndrome, wqe_opcode, qpn, index);
    post_cqe_as(core, qpn, cqn, user_index, &mut cqe);
}
