//! The RC requester's send side: on a send doorbell for an RC QP, fetch each new WQE from the
//! QP's send ring, gather its message (data segments through memory keys, or inline bytes),
//! and cut it into packets of at most the path MTU (FIRST/MIDDLE/LAST/ONLY), sent only while
//! the peer's port has room (the rest continued on later device passes); a READ or an
//! atomic goes as one request packet with the PSNs of its responses reserved.

use super::completion::{complete_local, expects_response, fail_in_order, flush};
use super::qp_error::enter_error;
use super::requester_message::{
    gather, local_bytes, send_atomic, send_message, send_read, Request,
};
use super::responder_pace::room;
use super::send_ring::{read_bb, span};
use crate::counters::add;
use crate::engine::gather::GatherFault;
use crate::engine::send_counter::posted;
use crate::function::Core;
use crate::objects::limits::LOG_MAX_RA_QP;
use crate::objects::queue_state::RcScratch;
use crate::Fault;
use cxdirect_hw::cqe::CqeSyndrome;
use cxdirect_hw::eqe::EventType;
use cxdirect_hw::qp::{service_type, state};
use cxdirect_hw::wqe::{self, opcode, AtomicSeg, CtrlSeg, RaddrSeg, WQE_BB, WQE_DS};

/// Send doorbell for RC QP `qpn` on UAR `uar`: executes every WQE posted since the last one.
pub(crate) fn doorbell(core: &mut Core, uar: u32, qpn: u32) {
    let Some(qp) = core.res.qps.get(qpn) else {
        add(&core.counters.bad_doorbells, 1);
        return;
    };
    if qp.log_sq_size.is_none() || qp.uar != uar {
        add(&core.counters.bad_doorbells, 1);
        return;
    }
    if qp.state == state::ERR {
        flush(core, qpn);
        return;
    }
    if qp.state == state::SQD {
        // Drained after a signature error: what was posted runs after SQD_RTS_QP.
        return;
    }
    if qp.state != state::RTS {
        add(&core.counters.bad_doorbells, 1);
        return;
    }
    if core
        .faults
        .take(|f| matches!(f, Fault::RcQpFatal { qpn: q } if *q == qpn).then_some(()))
        .is_some()
    {
        enter_error(core, qpn, Some(EventType::WqCatastrophicError));
        flush(core, qpn);
        return;
    }
    run_posted(core, qpn);
}

/// Executes the WQEs posted on RC QP `qpn` in RTS since the last one executed, stopping at a
/// READ or atomic while `2^log_sra_max` of those wait for their responses, and at a WQE the
/// wire had no room for (continued by [`continue_sending`]).
fn run_posted(core: &mut Core, qpn: u32) {
    let Some(qp) = core.res.qps.get(qpn) else {
        return;
    };
    let (Some(log_sq), true) = (qp.log_sq_size, qp.state == state::RTS) else {
        return;
    };
    // A page fault stopped the ring at a WQE: nothing goes until it is resumed.
    if qp.req.sending.is_some() || qp.req.page_fault.is_some() {
        return;
    }
    let Ok(pi) = posted(core, qp) else {
        return;
    };
    let entries = 1u32 << log_sq;
    if u32::from(pi.wrapping_sub(qp.sq_consumed)) > entries {
        add(&core.counters.bad_doorbells, 1);
        return;
    }
    let mut scratch = std::mem::take(&mut core.rc_scratch);
    loop {
        // A WQE before this one failed its signature check on a `drain_sigerr` QP (its last
        // packet gone, if the wire had to wait for room): the QP drains here.
        if super::sq_drain::enter_if_asked(core, qpn) {
            break;
        }
        let Some(qp) = core.res.qps.get(qpn) else {
            break;
        };
        let index = qp.sq_consumed;
        if index == pi || qp.state != state::RTS {
            break;
        }
        // A WQE whose `ds` runs past the producer index was never wholly posted: it fails as
        // malformed instead of running WQEBBs the driver has not written.
        let outcome = match wqe_head(core, qpn, index) {
            Some((op, ds)) if wqe::wqebbs(ds) > usize::from(pi.wrapping_sub(index)) => {
                Err((op, CqeSyndrome::LocalQpOperation))
            }
            _ => execute(core, qpn, index, None, &mut scratch),
        };
        match outcome {
            Ok(Some(bbs)) => {
                let Some(qp) = core.res.qps.get_mut(qpn) else {
                    break;
                };
                qp.sq_consumed = index.wrapping_add(bbs);
                if qp.req.sending.is_some() {
                    break;
                }
            }
            // Resumed when a response retires one of the READs or atomics outstanding.
            Ok(None) => break,
            Err((opcode, _))
                if std::mem::take(&mut scratch.page_fault)
                    && super::page_fault::requester_gather(core, qpn, index, opcode) =>
            {
                break;
            }
            Err((opcode, syndrome)) => {
                use super::dc_streams::{local_failure, Local};
                let local = local_failure(core, qpn, index, opcode, syndrome);
                if matches!(local, Local::Wait) {
                    break;
                }
                let bbs = wqe_span(core, qpn, index, pi);
                if let Some(qp) = core.res.qps.get_mut(qpn) {
                    qp.sq_consumed = index.wrapping_add(bbs);
                }
                if matches!(local, Local::Failed) {
                    // A DCI stream's error: the DCI goes on with the next WQE.
                    continue;
                }
                fail_in_order(core, qpn, index, opcode, syndrome);
                break;
            }
        }
    }
    core.rc_scratch = scratch;
}

/// A READ or atomic of QP `qpn` completed: WQEs held back by the limit on outstanding ones
/// go now.
pub(super) fn resume(core: &mut Core, qpn: u32) {
    run_posted(core, qpn);
}

/// Sends again, from their first packets, the outstanding WQEs of QP `qpn` from the `n`th on
/// (go-back-N), stopping where the wire has no room; returns whether all went. Counted as
/// retransmissions.
fn resend_from(core: &mut Core, qpn: u32, mut n: usize) -> bool {
    let mut scratch = std::mem::take(&mut core.rc_scratch);
    let mut all = true;
    while let Some(o) = core
        .res
        .qps
        .get(qpn)
        .and_then(|qp| qp.req.outstanding.get(n).copied())
    {
        if super::completion::is_local(o.opcode) {
            // A local operation took effect once; only its completion waits.
            n += 1;
            continue;
        }
        add(&core.counters.roce_retransmits, 1);
        if super::tag_rendezvous::is_device_op(o.opcode) {
            super::tag_rendezvous::resend(core, qpn, &o);
            n += 1;
            continue;
        }
        if let Err((opcode, syndrome)) =
            execute(core, qpn, o.index, Some(o.first_psn), &mut scratch)
        {
            // A page gone since the first transmission (Linux zaps an ODP region's entries in
            // `mlx5_ib_invalidate_range` whenever the kernel unmaps or moves a page) faults as
            // on the first transmission: the message is read again from memory, and the
            // retransmission waits for PAGE_FAULT_RESUME.
            if std::mem::take(&mut scratch.page_fault)
                && super::page_fault::requester_gather(core, qpn, o.index, opcode)
            {
                all = false;
                break;
            }
            fail_in_order(core, qpn, o.index, opcode, syndrome);
            all = false;
            break;
        }
        if core
            .res
            .qps
            .get(qpn)
            .is_none_or(|qp| qp.req.sending.is_some())
        {
            all = false;
            break;
        }
        n += 1;
    }
    core.rc_scratch = scratch;
    all
}

/// Go-back-N from the `n`th outstanding WQE of QP `qpn`: sends those again, from their first
/// packets, then the WQEs posted behind them, as far as the wire takes them (the rest is
/// continued by [`continue_sending`]). A requester that resent all it owed goes on with
/// what was posted while it waited for room: no doorbell comes again for those.
pub(super) fn go_back_from(core: &mut Core, qpn: u32, n: usize) {
    if resend_from(core, qpn, n) {
        run_posted(core, qpn);
    }
}

/// Continues every RC QP's WQE the wire had no room for, in PSN order: the rest of its
/// packets as far as the wire takes them, then (once it is all sent) the outstanding WQEs
/// after it that a go-back-N retransmission still owes, then the WQEs posted behind it.
/// Returns whether anything went out.
pub(crate) fn continue_sending(core: &mut Core) -> bool {
    let mut sent = false;
    let mut after = None;
    loop {
        let next = core.res.qps.iter().find_map(|(qpn, qp)| {
            (after.is_none_or(|a| qpn > a) && qp.req.sending.is_some()).then_some(qpn)
        });
        let Some(qpn) = next else {
            return sent;
        };
        after = Some(qpn);
        let Some(qp) = core.res.qps.get_mut(qpn) else {
            continue;
        };
        let Some(at) = qp.req.sending.take() else {
            continue;
        };
        if !super::sq_drain::sends(qp.state) {
            continue;
        }
        let position = qp.req.outstanding.iter().position(|o| o.index == at.index);
        let Some(position) = position else {
            // An ACK retired the WQE while its retransmission waited for room (its original
            // arrived after all), and every WQE before it: the go-back-N goes on with the
            // outstanding WQEs after it, then with those posted behind them.
            sent = true;
            go_back_from(core, qpn, 0);
            continue;
        };
        if room(core) == 0 {
            if let Some(qp) = core.res.qps.get_mut(qpn) {
                qp.req.sending = Some(at);
            }
            continue;
        }
        sent = true;
        let mut scratch = std::mem::take(&mut core.rc_scratch);
        let outcome = execute_from(
            core,
            qpn,
            at.index,
            Some(at.first_psn),
            at.next_packet,
            &mut scratch,
        );
        let faulted = std::mem::take(&mut scratch.page_fault);
        core.rc_scratch = scratch;
        if let Err((opcode, syndrome)) = outcome {
            // As in `resend_from`: a page gone since the first transmission faults.
            if faulted && super::page_fault::requester_gather(core, qpn, at.index, opcode) {
                continue;
            }
            fail_in_order(core, qpn, at.index, opcode, syndrome);
            continue;
        }
        let paused = core
            .res
            .qps
            .get(qpn)
            .is_none_or(|qp| qp.req.sending.is_some());
        if !paused {
            go_back_from(core, qpn, position + 1);
        }
    }
}

/// Whether any RC QP waits for room on the wire to send a WQE's packets.
pub(crate) fn any_sending(core: &Core) -> bool {
    core.res.qps.iter().any(|(_, qp)| qp.req.sending.is_some())
}

/// Whether a WQE of fence mode `fm` waits for every earlier READ and atomic to complete (the
/// PRM's fence, strong ordering, and small-and-fence modes; the initiator small fence orders
/// only local memory operations, which this model runs in order anyway).
fn fenced(fm: u8) -> bool {
    matches!(
        fm,
        wqe::fence_mode::FENCE
            | wqe::fence_mode::STRONG_ORDERING
            | wqe::fence_mode::SMALL_AND_FENCE
    )
}

/// Whether QP `qpn` has any READ or atomic still awaiting its response.
fn awaiting_responses(core: &Core, qpn: u32) -> bool {
    core.res.qps.get(qpn).is_some_and(|qp| {
        qp.req
            .outstanding
            .iter()
            .any(|o| expects_response(o.opcode))
    })
}

/// Whether QP `qpn` has as many READs and atomics awaiting responses as `log_sra_max` allows.
fn at_read_limit(core: &Core, qpn: u32) -> bool {
    core.res.qps.get(qpn).is_none_or(|qp| {
        let waiting = qp
            .req
            .outstanding
            .iter()
            .filter(|o| expects_response(o.opcode))
            .count();
        waiting >= 1 << qp.log_sra_max.min(LOG_MAX_RA_QP)
    })
}

/// The opcode and `ds` of the WQE at `index`, from its control segment; `None` when that
/// cannot be read.
fn wqe_head(core: &Core, qpn: u32, index: u16) -> Option<(u8, usize)> {
    let mut bb = [0u8; WQE_BB];
    read_bb(core, qpn, index, &mut bb).ok()?;
    let ctrl = CtrlSeg::new(&bb[..16]).ok()?;
    Some((ctrl.opcode(), usize::from(ctrl.ds())))
}

/// Send WQE `index` of QP `qpn`, stopped by a page fault resumed with an error, fails: the
/// ring moves past it (its completion is the caller's).
pub(super) fn consume_failed(core: &mut Core, qpn: u32, index: u16) {
    let Some(qp) = core.res.qps.get(qpn) else {
        return;
    };
    let pi = posted(core, qp).unwrap_or(index.wrapping_add(1));
    let bbs = wqe_span(core, qpn, index, pi);
    if let Some(qp) = core.res.qps.get_mut(qpn) {
        qp.sq_consumed = index.wrapping_add(bbs);
    }
}

/// WQEBBs the WQE at `index` takes by its control segment's `ds` (1 when that cannot be
/// read), ending no later than the producer index `pi`.
fn wqe_span(core: &Core, qpn: u32, index: u16, pi: u16) -> u16 {
    let ds = wqe_head(core, qpn, index).map_or(0, |(_, ds)| ds);
    span(ds, index, pi)
}

type WqeError = (u8, CqeSyndrome);

/// Executes the WQE at `index`; returns its WQEBBs, or `None` for a new READ or atomic held
/// back by the limit on outstanding ones, or a fenced WQE held back until the READs and
/// atomics before it complete (a retransmission, `resend_psn`, never is). Packets the wire
/// has no room for are left to [`continue_sending`] (the QP's `req.sending`).
pub(super) fn execute(
    core: &mut Core,
    qpn: u32,
    index: u16,
    resend_psn: Option<u32>,
    s: &mut RcScratch,
) -> Result<Option<u16>, WqeError> {
    execute_from(core, qpn, index, resend_psn, 0, s)
}

/// [`execute`] from packet `from_packet` of the message on (the earlier ones were sent).
fn execute_from(
    core: &mut Core,
    qpn: u32,
    index: u16,
    resend_psn: Option<u32>,
    from_packet: u32,
    s: &mut RcScratch,
) -> Result<Option<u16>, WqeError> {
    s.page_fault = false;
    s.wqe.resize(WQE_BB, 0);
    read_bb(core, qpn, index, &mut s.wqe[..WQE_BB])
        .map_err(|_| (0, CqeSyndrome::LocalProtection))?;
    let ctrl = CtrlSeg::new(&s.wqe[..16]).map_err(|_| (0, CqeSyndrome::LocalQpOperation))?;
    let (op, ds) = (ctrl.opcode(), usize::from(ctrl.ds()));
    let (imm, solicited, fence) = (ctrl.imm(), ctrl.se(), fenced(ctrl.fm()));
    let ctrl_imm = imm;
    let signaled = ctrl.ce() >= wqe::completion::ALWAYS;
    let (ctrl_qpn, ctrl_index) = (ctrl.qpn_or_sqn(), ctrl.wqe_index());
    let stream = ctrl.dci_stream_channel_id();
    let bad = (op, CqeSyndrome::LocalQpOperation);
    if ds == 0 || ctrl_qpn != qpn || ctrl_index != index {
        return Err(bad);
    }
    let bbs = wqe::wqebbs(ds) as u16;
    s.wqe.resize(usize::from(bbs) * WQE_BB, 0);
    for i in 1..bbs {
        let range = usize::from(i) * WQE_BB..usize::from(i + 1) * WQE_BB;
        read_bb(core, qpn, index.wrapping_add(i), &mut s.wqe[range])
            .map_err(|_| (op, CqeSyndrome::LocalProtection))?;
    }
    let mut req = Request {
        opcode: op,
        index,
        bbs,
        imm,
        solicited,
        signaled,
        remote: None,
        resend_psn,
        from_packet,
        xrc_srqn: None,
        dceth: None,
    };
    if resend_psn.is_none()
        && ((expects_response(op) && at_read_limit(core, qpn))
            || (fence && awaiting_responses(core, qpn)))
    {
        return Ok(None);
    }
    let Some(service) = core.res.qps.get(qpn).map(|qp| qp.service) else {
        return Err(bad);
    };
    if op == opcode::NOP {
        // Nothing to do but complete in order (libmlx5's `mlx5dv_qp_cancel_posted_send_wrs`
        // turns the WQEs it cancels into NOPs, keeping their completion request).
        complete_local(core, qpn, index, op, signaled);
        return Ok(Some(req.bbs));
    }
    if op == opcode::SET_PSV {
        // A local operation like UMR: the PSV takes its seed now, in order with the rest.
        let pd = core.res.qps.get(qpn).map_or(0, |qp| qp.pd);
        crate::signature::set_psv(core, pd, &s.wqe[..ds * WQE_DS]).map_err(|syn| (op, syn))?;
        complete_local(core, qpn, index, op, signaled);
        return Ok(Some(req.bbs));
    }
    if op == cxdirect_hw::xrq::WQE_OPCODE_TAG_MATCHING {
        // A local operation on the matching list of the QP's XRQ, in order with the rest; it
        // completes on the XRQ's CQ when its segment asks (`tag_matching`).
        super::tag_matching::list_operation(core, qpn, &s.wqe[..ds * WQE_DS], ds)
            .map_err(|syn| (op, syn))?;
        complete_local(core, qpn, index, op, false);
        return Ok(Some(req.bbs));
    }
    if op == opcode::UMR {
        // A local operation, in order with the rest: the key changes now, the completion
        // waits for the WQEs before it.
        let poster = crate::engine::umr::Poster {
            pd: core.res.qps.get(qpn).map_or(0, |qp| qp.pd),
            privileged: service == service_type::REG_UMR,
            qpn,
        };
        crate::engine::umr::execute(core, poster, &s.wqe[..ds * WQE_DS], ctrl_imm)
            .map_err(|syn| (op, syn))?;
        complete_local(core, qpn, index, op, signaled);
        return Ok(Some(req.bbs));
    }
    let unreliable = service == service_type::UC;
    let xrc = service == service_type::XRC;
    let dci = service == service_type::DCI;
    if service != service_type::RC && !unreliable && !xrc && !dci {
        // The REG_UMR QP carries UMR WQEs only.
        return Err(bad);
    }
    if unreliable
        && matches!(
            op,
            opcode::RDMA_READ | opcode::ATOMIC_CS | opcode::ATOMIC_FA | opcode::SEND_INVAL
        )
    {
        // UC carries SENDs and WRITEs only (IBA table 38): the WQE completes with a local
        // QP operation error and the QP goes to error.
        return Err(bad);
    }
    let mut at = WQE_DS;
    if xrc {
        // An XRC initiator's WQE has a 16-byte XRC segment after its control segment, the
        // target's XRC SRQ number first (libmlx5's `_mlx5_post_send`, IBV_QPT_XRC_SEND).
        if ds < 2 {
            return Err(bad);
        }
        let seg = &s.wqe[at..at + 4];
        req.xrc_srqn = Some(u32::from_be_bytes([seg[0], seg[1], seg[2], seg[3]]) & 0x00ff_ffff);
        at += WQE_DS;
    }
    if dci {
        // A DC initiator's WQE has the DCT's address vector after its control segment
        // (libmlx5's `mlx5_send_wr_set_dc_addr`); the initiator connects to that DCT first.
        if ds * WQE_DS < at + super::dc::DC_AV_BYTES {
            return Err(bad);
        }
        if resend_psn.is_none() {
            // A DCI with streams: a stream in error flushes its WQEs, in posting order.
            match super::dc_streams::gate(core, qpn, stream) {
                super::dc_streams::Gate::Go => {}
                super::dc_streams::Gate::Wait => return Ok(None),
                super::dc_streams::Gate::Flush => {
                    super::completion::flushed(core, qpn, index, op);
                    return Ok(Some(req.bbs));
                }
            }
        }
        match super::dc::connect(core, qpn, &s.wqe[..ds * WQE_DS], resend_psn.is_some()) {
            Some(super::dc::Connect::Go(eth)) => req.dceth = Some(eth),
            // Resumed when the last WQE sent on the current connection is acknowledged.
            Some(super::dc::Connect::Wait) => return Ok(None),
            None => return Err(bad),
        }
        at += super::dc::DC_AV_BYTES;
    }
    match op {
        opcode::SEND | opcode::SEND_IMM | opcode::SEND_INVAL => {}
        opcode::RDMA_WRITE | opcode::RDMA_WRITE_IMM => {
            if ds * WQE_DS < at + WQE_DS {
                return Err(bad);
            }
            let raddr = RaddrSeg::new(&s.wqe[at..at + WQE_DS]).map_err(|_| bad)?;
            req.remote = Some((raddr.raddr(), raddr.rkey()));
            at += WQE_DS;
        }
        opcode::RDMA_READ => {
            if ds * WQE_DS < at + WQE_DS {
                return Err(bad);
            }
            let raddr = RaddrSeg::new(&s.wqe[at..at + WQE_DS]).map_err(|_| bad)?;
            let (va, rkey) = (raddr.raddr(), raddr.rkey());
            let bytes = local_bytes(&s.wqe[..ds * WQE_DS], at + WQE_DS).ok_or(bad)?;
            send_read(core, qpn, &req, va, rkey, bytes);
            return Ok(Some(req.bbs));
        }
        opcode::ATOMIC_CS | opcode::ATOMIC_FA => {
            if ds * WQE_DS < at + 3 * WQE_DS {
                return Err(bad);
            }
            let raddr = RaddrSeg::new(&s.wqe[at..at + WQE_DS]).map_err(|_| bad)?;
            let atomic = AtomicSeg::new(&s.wqe[at + WQE_DS..at + 2 * WQE_DS]).map_err(|_| bad)?;
            let bytes = local_bytes(&s.wqe[..ds * WQE_DS], at + 2 * WQE_DS).ok_or(bad)?;
            if bytes != 8 {
                return Err((op, CqeSyndrome::LocalLength));
            }
            let eth = (
                raddr.raddr(),
                raddr.rkey(),
                atomic.swap_add(),
                atomic.compare(),
            );
            send_atomic(core, qpn, &req, eth);
            return Ok(Some(req.bbs));
        }
        _ => return Err(bad),
    }
    let gathered = gather(core, qpn, &s.wqe[..ds * WQE_DS], at, &mut s.message);
    let cqn = core.res.qps.get(qpn).map_or(0, |qp| qp.cqn_snd);
    if crate::signature::report(core, qpn, cqn) {
        super::sq_drain::signature_error(core, qpn);
    }
    match gathered {
        Ok(()) => {}
        Err(GatherFault::Error(syndrome)) => return Err((op, syndrome)),
        // Told apart for the caller: a page fault where the function reports them.
        Err(GatherFault::NotPresent) => {
            s.page_fault = true;
            return Err((op, CqeSyndrome::LocalProtection));
        }
    }
    send_message(core, qpn, &req, s);
    Ok(Some(req.bbs))
}
