//! Completions of datagram QPs: requester and responder CQEs, error CQEs, and the flush of a
//! QP's posted WQEs when it goes to error (by command) or its send queue to the send queue
//! error state (a send WQE failed).

use crate::counters::add;
use crate::engine::send_counter::posted;
use crate::function::Core;
use crate::objects::rc::RcReceive;
use cxdirect_hw::cqe::{CqeOpcode, CqeSyndrome};
use cxdirect_hw::qp::state;
use cxdirect_hw::wqe::{self, CtrlSeg, WQE_BB};

/// Writes `cqe` to CQ `cqn` for datagram QP `qpn`; a completion that cannot be written is
/// lost, and the QP goes to error.
pub(super) fn post_cqe(core: &mut Core, qpn: u32, cqn: u32, cqe: &mut [u8; 64]) {
    if let Some(qp) = core.res.ud_qps.get(qpn) {
        crate::engine::cq::set_user_index(cqe, qp.user_index);
    }
    if crate::engine::cq::post(core, cqn, cqe).is_err() {
        add(&core.counters.completions_lost, 1);
        if let Some(qp) = core.res.ud_qps.get_mut(qpn) {
            qp.state = state::ERR;
        }
    }
}

/// Which queue of a datagram QP an error CQE is for.
#[derive(Clone, Copy)]
pub(super) enum Side {
    /// A send WQE of this opcode, on the send CQ.
    Send(u8),
    /// A receive WQE, on the receive CQ.
    Receive,
}

/// Writes the error CQE (`syndrome`) of WQE `index` of datagram QP `qpn`.
pub(super) fn post_error_cqe(
    core: &mut Core,
    qpn: u32,
    index: u16,
    syndrome: CqeSyndrome,
    side: Side,
) {
    let Some(qp) = core.res.ud_qps.get(qpn) else {
        return;
    };
    if syndrome != CqeSyndrome::WrFlushed {
        add(&core.counters.error_cqes, 1);
    }
    let (cqn, opcode, wqe_opcode) = match side {
        Side::Send(op) => (qp.cqn_snd, CqeOpcode::ReqErr, op),
        Side::Receive => (qp.cqn_rcv, CqeOpcode::RespErr, 0),
    };
    let mut cqe = crate::engine::cq::error_cqe(opcode, syndrome, wqe_opcode, qpn, index);
    post_cqe(core, qpn, cqn, &mut cqe);
}

/// Datagram QP `qpn` went to error by command (2ERR_QP): every send WQE posted and not yet
/// executed, then the SRQ WQE a receive page fault held for the QP, then every receive WQE
/// posted on its own ring, completes with the flush syndrome. A shared receive queue's other
/// WQEs belong to no QP and stay posted.
pub(crate) fn flush_on_error(core: &mut Core, qpn: u32) {
    flush_sends(core, qpn);
    let Some(qp) = core.res.ud_qps.get_mut(qpn) else {
        return;
    };
    if let Some(held) = qp.resp.recv.take() {
        qp.resp.page_fault = None;
        post_error_cqe(core, qpn, held.index, CqeSyndrome::WrFlushed, Side::Receive);
    }
    let Some(qp) = core.res.ud_qps.get(qpn) else {
        return;
    };
    let RcReceive::Own { log_size, .. } = qp.receive else {
        return;
    };
    let Ok(word) = core.dma_read_be32(qp.dbr) else {
        return;
    };
    let posted = (word as u16).wrapping_sub(qp.resp.rq_consumed);
    if u32::from(posted) > 1 << log_size {
        add(&core.counters.bad_doorbells, 1);
        return;
    }
    for _ in 0..posted {
        let Some(qp) = core.res.ud_qps.get_mut(qpn) else {
            return;
        };
        let index = qp.resp.rq_consumed;
        qp.resp.rq_consumed = index.wrapping_add(1);
        post_error_cqe(core, qpn, index, CqeSyndrome::WrFlushed, Side::Receive);
    }
}

/// Completes every send WQE posted on datagram QP `qpn` and not executed with the flush
/// syndrome (the QP, or its send queue, is in error).
pub(super) fn flush_sends(core: &mut Core, qpn: u32) {
    let Some(qp) = core.res.ud_qps.get(qpn) else {
        return;
    };
    let Some(log_sq) = qp.log_sq_size else {
        return;
    };
    let Ok(pi) = posted(core, qp) else {
        return;
    };
    let mut index = qp.sq_consumed;
    if u32::from(pi.wrapping_sub(index)) > 1u32 << log_sq {
        add(&core.counters.bad_doorbells, 1);
        return;
    }
    while index != pi {
        let mut bb = [0u8; WQE_BB];
        if read_bb(core, qpn, index, &mut bb).is_err() {
            break;
        }
        let (op, ds) = CtrlSeg::new(&bb[..16]).map_or((0, 0), |c| (c.opcode(), c.ds()));
        post_error_cqe(core, qpn, index, CqeSyndrome::WrFlushed, Side::Send(op));
        index = index.wrapping_add(span(usize::from(ds), index, pi));
    }
    if let Some(qp) = core.res.ud_qps.get_mut(qpn) {
        qp.sq_consumed = pi;
    }
}

/// WQEBBs of a WQE of `ds` 16-byte units at `index`: at least 1, and no further than the
/// producer index `pi` (a malformed `ds` never skips past what was posted).
pub(super) fn span(ds: usize, index: u16, pi: u16) -> u16 {
    let bbs = u16::try_from(wqe::wqebbs(ds)).unwrap_or(u16::MAX);
    bbs.clamp(1, pi.wrapping_sub(index).max(1))
}

/// Reads WQEBB `bb` of datagram QP `qpn`'s send ring into `out` (one WQEBB).
pub(super) fn read_bb(core: &Core, qpn: u32, bb: u16, out: &mut [u8]) -> Result<(), ()> {
    let qp = core.res.ud_qps.get(qpn).ok_or(())?;
    let log_sq = qp.log_sq_size.ok_or(())?;
    let slot = u64::from(bb) & ((1u64 << log_sq) - 1);
    let offset = qp.receive.ring_bytes() + slot * WQE_BB as u64;
    let addr = qp.buf.addr(offset).ok_or(())?;
    core.dma_read(addr, out).map_err(|_| ())
}
