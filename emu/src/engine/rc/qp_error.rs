//! An RC QP entering the error state, and the affiliated asynchronous events it raises (IBA
//! 11.6.3; mlx5_ib turns them into QP events): a WQ catastrophic error when a completion
//! cannot be written (or the responder cannot execute a granted request), an invalid request
//! error when the responder refuses a malformed request, an access violation when it refuses
//! a remote access, and the last WQE reached of a QP taking its receives from an SRQ once it
//! will consume no more of them. In error, every receive WQE posted on the QP's own ring
//! completes flushed and no timer runs.

use crate::counters::add;
use crate::fw::Core;
use crate::objects::rc::RcReceive;
use cxdirect_hw::eqe::{EqeQpSrq, EventType};
use cxdirect_hw::qp::state;

/// Queue kind of a QP in a QP event's data (`MLX5_EVENT_QUEUE_TYPE_QP`).
const EVENT_QUEUE_TYPE_QP: u8 = 0;

/// Posts `event` for QP `qpn` to the EQ subscribed to it, if any.
fn post_qp_event(core: &mut Core, qpn: u32, event: EventType) {
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
    if crate::engine::cq::post(core, cqn, cqe).is_err() {
        add(&core.counters.completions_lost, 1);
        enter_error(core, qpn, Some(EventType::WqCatastrophicError));
    }
}
