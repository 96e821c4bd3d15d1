//! The requester's completions outside an acknowledgement: local WQEs completed at once,
//! failed WQEs, and flushes when the QP enters the error state.

use super::count;
use super::qp_error::{enter_error, errored, post_cqe, post_error_cqe, ErrorSide};
use super::send_ring::{read_bb, span};
use crate::counters::add;
use crate::engine::send_counter::posted;
use crate::function::Core;
use crate::objects::rc::Outstanding;
use cxdirect_hw::cqe::{Cqe64, CqeOpcode, CqeSyndrome};
use cxdirect_hw::wqe::{opcode, CtrlSeg, WQE_BB};

/// A local WQE (a UMR) at `index` of QP `qpn` took effect: it completes now when nothing
/// before it waits for the peer, else once those before it complete (it waits in the
/// outstanding list without PSNs of its own, behind the last one's).
pub(super) fn complete_local(core: &mut Core, qpn: u32, index: u16, opcode: u8, signaled: bool) {
    let Some(qp) = core.res.qps.get_mut(qpn) else {
        return;
    };
    let done = Outstanding {
        index,
        opcode,
        first_psn: 0,
        last_psn: 0,
        signaled,
        bytes: 0,
        responses: 0,
    };
    match qp.req.outstanding.back() {
        None => {
            if signaled {
                requester_cqe(core, qpn, &done);
            }
        }
        Some(back) => {
            let psn = back.last_psn;
            qp.req.outstanding.push_back(Outstanding {
                first_psn: psn,
                last_psn: psn,
                ..done
            });
        }
    }
}

/// Whether send opcode `op` is a local operation (UMR, SET_PSV): it takes effect when
/// executed and completes in order with the WQEs before it, sending nothing.
pub(super) fn is_local(op: u8) -> bool {
    op == opcode::UMR || op == opcode::SET_PSV
}

/// Completes the local WQEs at the front of QP `qpn`'s outstanding list.
pub(super) fn retire_local(core: &mut Core, qpn: u32) {
    while let Some(qp) = core.res.qps.get_mut(qpn) {
        match qp.req.outstanding.front() {
            Some(front) if is_local(front.opcode) => {
                let front = *front;
                qp.req.outstanding.pop_front();
                if front.signaled {
                    requester_cqe(core, qpn, &front);
                }
            }
            _ => return,
        }
    }
}

/// Writes the requester CQE of a WQE that completed.
pub(super) fn requester_cqe(core: &mut Core, qpn: u32, done: &Outstanding) {
    let Some(qp) = core.res.qps.get(qpn) else {
        return;
    };
    let cqn = qp.cqn_snd;
    let mut cqe = [0u8; 64];
    if let Ok(mut c) = Cqe64::new(&mut cqe[..]) {
        c.set_opcode(CqeOpcode::Req as u8)
            .set_sop_drop(done.opcode)
            .set_qpn(qpn)
            .set_wqe_counter(done.index)
            .set_byte_cnt(done.bytes);
    }
    post_cqe(core, qpn, cqn, &mut cqe);
}

/// QP `qpn` went to error by command (2ERR_QP): every send WQE outstanding or posted and
/// every receive WQE posted complete with the flush syndrome, and no timer runs for it.
pub(crate) fn flush_on_error(core: &mut Core, qpn: u32) {
    flush(core, qpn);
    errored(core, qpn);
}

/// Completes every WQE still outstanding, then every WQE posted and not executed, with the
/// flush syndrome (the QP is in error).
pub(super) fn flush(core: &mut Core, qpn: u32) {
    while let Some(front) = core
        .res
        .qps
        .get_mut(qpn)
        .and_then(|qp| qp.req.outstanding.pop_front())
    {
        flushed(core, qpn, front.index, front.opcode);
    }
    let Some(qp) = core.res.qps.get(qpn) else {
        return;
    };
    let Ok(pi) = posted(core, qp) else {
        return;
    };
    let entries = qp.log_sq_size.map_or(0, |log| 1u32 << log);
    let mut index = qp.sq_consumed;
    if u32::from(pi.wrapping_sub(index)) > entries {
        return;
    }
    let mut ctrl = [0u8; 16];
    while index != pi {
        let mut bb = [0u8; WQE_BB];
        if read_bb(core, qpn, index, &mut bb).is_err() {
            break;
        }
        ctrl.copy_from_slice(&bb[..16]);
        let Ok(seg) = CtrlSeg::new(&ctrl[..]) else {
            break;
        };
        let (op, ds) = (seg.opcode(), usize::from(seg.ds()));
        flushed(core, qpn, index, op);
        index = index.wrapping_add(span(ds, index, pi));
    }
    if let Some(qp) = core.res.qps.get_mut(qpn) {
        qp.sq_consumed = pi;
    }
}

/// The flush-error CQE of one WQE.
pub(super) fn flushed(core: &mut Core, qpn: u32, index: u16, opcode: u8) {
    if super::tag_rendezvous::is_device_op(opcode) {
        // The device's own request has no WQE to complete; its tag does.
        super::tag_rendezvous::failed(core, qpn, index, opcode);
        return;
    }
    count(core, qpn, |c| &mut c.req_cqe_flush_error);
    let side = ErrorSide::Requester { wqe_opcode: opcode };
    post_error_cqe(core, qpn, index, CqeSyndrome::WrFlushed, side);
}

/// WQE `index` failed with `syndrome` while WQEs before it (and perhaps it, on a
/// retransmission) still await acknowledgement: those before it are flushed first, so that
/// completions keep posting order; then it completes in error, once, the QP goes to error and
/// every WQE after it is flushed. The consumer index must already be past it.
pub(super) fn fail_in_order(
    core: &mut Core,
    qpn: u32,
    index: u16,
    opcode: u8,
    syndrome: CqeSyndrome,
) {
    while let Some(front) = core
        .res
        .qps
        .get_mut(qpn)
        .and_then(|qp| qp.req.outstanding.pop_front())
    {
        if front.index == index {
            break;
        }
        flushed(core, qpn, front.index, front.opcode);
    }
    fail(core, qpn, index, opcode, syndrome);
    flush(core, qpn);
}

/// Writes an error CQE for the WQE at `index` and moves the QP to error.
pub(super) fn fail(core: &mut Core, qpn: u32, index: u16, opcode: u8, syndrome: CqeSyndrome) {
    report_failure(core, qpn, index, opcode, syndrome);
    enter_error(core, qpn, None);
}

/// Writes an error CQE for the WQE at `index`, counted, leaving the QP's state as it is (a
/// DCI stream's error).
pub(super) fn report_failure(
    core: &mut Core,
    qpn: u32,
    index: u16,
    opcode: u8,
    syndrome: CqeSyndrome,
) {
    if super::tag_rendezvous::is_device_op(opcode) {
        // The device's own request has no WQE to complete; its tag does, and the QP still
        // fails.
        super::tag_rendezvous::failed(core, qpn, index, opcode);
        return;
    }
    add(&core.counters.error_cqes, 1);
    count(core, qpn, |c| &mut c.req_cqe_error);
    match syndrome {
        CqeSyndrome::LocalLength => count(core, qpn, |c| &mut c.req_local_length_error),
        CqeSyndrome::LocalProtection => count(core, qpn, |c| &mut c.req_local_protection),
        CqeSyndrome::RetryExceeded => count(core, qpn, |c| &mut c.req_transport_retries_exceeded),
        _ => {}
    }
    let side = ErrorSide::Requester { wqe_opcode: opcode };
    post_error_cqe(core, qpn, index, syndrome, side);
}

/// WQEs a response (READ data, atomic original value) completes, rather than an ACK.
pub(super) fn expects_response(opcode: u8) -> bool {
    matches!(
        opcode,
        opcode::RDMA_READ
            | opcode::ATOMIC_CS
            | opcode::ATOMIC_FA
            | super::tag_rendezvous::RNDV_READ
    )
}
