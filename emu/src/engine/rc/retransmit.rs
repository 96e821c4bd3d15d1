//! The RC requester's timers: the local ACK timeout, RNR waits, go-back-N retransmission and
//! what happens when the retries run out.

use super::completion::{fail, flush};
use super::count;
use super::page_fault::outstanding_faulted;
use super::requester::{any_sending, continue_sending, go_back_from};
use super::responder_pace::{any_owed, pace_all, PACE_RETRY};
use super::timer::{ack_timeout, rnr_delay};
use crate::function::Core;
use cxdirect_hw::cqe::CqeSyndrome;
use cxdirect_hw::qp::state;
use std::time::Instant;

/// `rnr_retry` that means retry without limit.
const RNR_RETRY_FOREVER: u8 = 7;

/// The peer answered QP `qpn` at `now` (an ACK, a NAK, a response): the retries start over,
/// and the ACK timer runs again while anything is outstanding.
pub(super) fn progressed(core: &mut Core, qpn: u32, now: Instant) {
    if let Some(qp) = core.res.qps.get_mut(qpn) {
        qp.req.retries_left = qp.retry_count;
        qp.req.ack_deadline = (!qp.req.outstanding.is_empty())
            .then(|| now + ack_timeout(qp.path.ack_timeout))
            .filter(|_| qp.path.ack_timeout != 0);
    }
}

/// An RNR NAK with timer code `code`: wait, then send again from the NAKed WQE; past the
/// QP's `rnr_retry` NAKs, fail it (RNR retry exceeded).
pub(super) fn rnr_nak(core: &mut Core, qpn: u32, code: u8, now: Instant) {
    let Some(qp) = core.res.qps.get_mut(qpn) else {
        return;
    };
    qp.req.ack_deadline = None;
    if qp.rnr_retry != RNR_RETRY_FOREVER {
        if qp.req.rnr_retries_left == 0 {
            exhausted(core, qpn, CqeSyndrome::RnrRetryExceeded);
            return;
        }
        qp.req.rnr_retries_left -= 1;
    }
    qp.req.rnr_until = Some(now + rnr_delay(code));
    count(core, qpn, |c| &mut c.rnr_nak_retry_err);
}

/// Retries ran out: the oldest WQE completes with `syndrome`, the QP goes to error and every
/// other WQE is flushed.
fn exhausted(core: &mut Core, qpn: u32, syndrome: CqeSyndrome) {
    let front = core.res.qps.get_mut(qpn).and_then(|qp| {
        qp.req.ack_deadline = None;
        qp.req.rnr_until = None;
        qp.req.outstanding.pop_front()
    });
    if let Some(front) = front {
        fail(core, qpn, front.index, front.opcode, syndrome);
    }
    flush(core, qpn);
}

/// Go-back-N: sends every outstanding WQE again, with the PSNs it had, then the WQEs posted
/// behind them, as far as the wire takes them (the rest continued by later device passes).
/// Whatever was still owed of an earlier sending is superseded: it is sent again from its
/// first packet in PSN order.
pub(super) fn resend_outstanding(core: &mut Core, qpn: u32) {
    if let Some(qp) = core.res.qps.get_mut(qpn) {
        qp.req.sending = None;
    }
    go_back_from(core, qpn, 0);
}

/// When the earliest RC timer of the function runs out (an ACK timeout or the end of an RNR
/// wait of a QP with WQEs outstanding, or soon when a responder waits for room on the wire);
/// `None` when none is armed. A device thread sleeps no longer than this, so that a lost
/// packet is sent again though nobody polls.
pub(crate) fn next_deadline(core: &Core) -> Option<Instant> {
    let pacing = (any_owed(core) || any_sending(core)).then(|| Instant::now() + PACE_RETRY);
    core.res
        .qps
        .iter()
        .filter(|(qpn, qp)| {
            super::sq_drain::sends(qp.state)
                && !qp.req.outstanding.is_empty()
                && !outstanding_faulted(core, *qpn)
        })
        .flat_map(|(_, qp)| [qp.req.ack_deadline, qp.req.rnr_until])
        .flatten()
        .chain(pacing)
        .min()
}

/// Runs the RC timers of every QP due at `now`: an expired ACK timer sends the outstanding
/// WQEs again (up to `retry_count` times, then retry exceeded); an expired RNR wait sends
/// them again. Responses a responder owes and had no room for are continued first. Returns
/// whether anything was sent.
pub(crate) fn run_timers(core: &mut Core, now: Instant) -> bool {
    if core.res.qps.len() == 0 {
        return false;
    }
    flush_receives_posted_in_error(core);
    let mut sent = pace_all(core);
    sent |= continue_sending(core);
    let mut qpn_due = None;
    loop {
        // One QP at a time: a retransmission changes the table's QPs' state.
        let next = core.res.qps.iter().find_map(|(qpn, qp)| {
            let due = |at: Option<Instant>| at.is_some_and(|t| t <= now);
            // A requester waiting for a page of a response or a retransmission sends nothing.
            (super::sq_drain::sends(qp.state)
                && !qp.req.outstanding.is_empty()
                && !outstanding_faulted(core, qpn)
                && (due(qp.req.ack_deadline) || due(qp.req.rnr_until))
                && Some(qpn) != qpn_due)
                .then_some(qpn)
        });
        let Some(qpn) = next else {
            return sent;
        };
        qpn_due = Some(qpn);
        let Some(qp) = core.res.qps.get_mut(qpn) else {
            continue;
        };
        if qp.req.rnr_until.is_some_and(|t| t <= now) {
            qp.req.rnr_until = None;
        } else {
            if qp.req.retries_left == 0 {
                exhausted(core, qpn, CqeSyndrome::RetryExceeded);
                sent = true;
                continue;
            }
            qp.req.retries_left -= 1;
            count(core, qpn, |c| &mut c.local_ack_timeout_err);
        }
        resend_outstanding(core, qpn);
        sent = true;
    }
}

/// Receive WQEs posted on a QP already in error complete flushed, as a ConnectX completes them:
/// Linux drains a QP by moving it to error, posting one more receive and waiting for its
/// completion (`mlx5_ib_drain_rq`, through `ib_drain_qp` at every rdma_cm disconnect), with no
/// doorbell to announce the post, so the device notices it on its next pass.
fn flush_receives_posted_in_error(core: &mut Core) {
    // Rare (QPs in error with receives posted): the list allocates only then.
    let errored: Vec<u32> = core
        .res
        .qps
        .iter()
        .filter(|(qpn, qp)| {
            qp.state == state::ERR && super::responder_recv::has_posted_receives(core, *qpn)
        })
        .map(|(qpn, _)| qpn)
        .collect();
    for qpn in errored {
        super::responder_recv::flush_receives(core, qpn);
    }
}
