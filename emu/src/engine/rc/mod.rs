//! The RoCE v2 reliable-connection (RC) transport: the requester sends WQEs as packets and
//! retires them by ACKs and responses, retransmitting on timeouts and NAKs; the responder
//! checks PSNs, scatters SENDs into receive WQEs, lands WRITEs and answers READs and atomics
//! through remote keys.
//!
//! The rooms: [`packet`] (the engine's RoCE v2 framing, shared with UD) builds and parses
//! frames; [`requester`] segments WQEs into packets
//! and sends them as the wire takes them;
//! [`requester_ack`] retires them and writes their completions; [`retransmit`] runs the
//! timers; [`responder`] takes received frames in PSN order; [`responder_recv`] owns the
//! receive WQEs; [`responder_read_atomic`] answers READs and atomics; [`responder_pace`]
//! transmits responses and acknowledgements as the wire takes them; [`qp_error`] takes a
//! QP to error and raises its asynchronous events; [`unreliable`] is the UC responder (the
//! requester sends UC through the same rooms, under the UC opcodes and without waiting for
//! acknowledgements); [`xrc`] is the XRC target's side of the responder (the requester sends
//! XRC through the same rooms, an XRCETH after each request's BTH); [`dc`] is the DC
//! transport (a DC initiator's connections, a DCT's admission of requests into responder
//! contexts, the rest being RC) and [`dc_streams`] a DC initiator's streams; [`page_fault`] stops and
//! resumes either side at a page not present (on-demand paging).

pub(crate) mod completion;
pub(crate) mod dc;
pub(crate) mod dc_streams;
pub(crate) mod page_fault;
pub(crate) mod qp_error;
pub(crate) mod requester;
pub(crate) mod requester_ack;
pub(crate) mod requester_message;
pub(crate) mod responder;
pub(crate) mod responder_pace;
pub(crate) mod responder_read_atomic;
pub(crate) mod responder_recv;
pub(crate) mod responder_write;
pub(crate) mod retransmit;
pub(crate) mod send_ring;
pub(crate) mod sq_drain;
pub(crate) mod tag_matching;
pub(crate) mod tag_rendezvous;
pub(crate) mod timer;
pub(crate) mod unreliable;
pub(crate) mod xrc;

/// RoCE v2 framing lives below both transports; the RC rooms name it as their own.
pub(crate) use super::roce as packet;

use crate::function::Core;
use crate::objects::rc::RcQCounters;

pub(crate) use completion::flush_on_error;
pub(crate) use requester::doorbell;
pub(crate) use responder::receive;
pub(crate) use retransmit::{next_deadline, run_timers};

/// PAGE_FAULT_RESUME ([`page_fault::resume`]): a requester's send queue, stopped at the
/// faulting WQE, goes on, or (resumed with an error) that WQE completes with a local
/// protection error and the QP fails. A READ or atomic whose response faulted is on the wire
/// already: its QP sends again from the oldest WQE not acknowledged (go-back-N), the responder
/// answering the duplicates (an atomic from its first execution).
pub(crate) fn resume_page_fault(
    core: &mut Core,
    pf_type: u8,
    wq: u32,
    token: u32,
    error: bool,
) -> Result<(), page_fault::ResumeError> {
    let Some(fault) = page_fault::resume(core, pf_type, wq, token, error)? else {
        return Ok(());
    };
    let qpn = token;
    let response = fault.pf_type == cxdirect_hw::odp::wqe_pf_type::REQ_READ_OR_ATOMIC;
    // A retransmission's gather faulted: the WQE went out before and is outstanding.
    let resent = core
        .res
        .qps
        .get(qpn)
        .is_some_and(|qp| qp.req.outstanding.iter().any(|o| o.index == fault.index));
    // A retransmission's WQE an ACK retired meanwhile (its first transmission arrived after
    // all) has completed: nothing waits on the fault any more.
    let at_head = core
        .res
        .qps
        .get(qpn)
        .is_some_and(|qp| qp.sq_consumed == fault.index);
    if !response && !resent && !at_head {
        requester::resume(core, qpn);
        return Ok(());
    }
    if error {
        if !response && !resent {
            requester::consume_failed(core, qpn, fault.index);
        }
        completion::fail_in_order(
            core,
            qpn,
            fault.index,
            fault.opcode,
            cxdirect_hw::cqe::CqeSyndrome::LocalProtection,
        );
    } else if response || resent {
        let sending = core
            .res
            .qps
            .get(qpn)
            .is_some_and(|qp| sq_drain::sends(qp.state));
        if !sending {
            // The QP left RTS meanwhile: nothing goes on.
            return Ok(());
        }
        retransmit::resend_outstanding(core, qpn);
        retransmit::progressed(core, qpn, std::time::Instant::now());
    } else {
        requester::resume(core, qpn);
    }
    Ok(())
}

/// Adds one to `counter` of the Q counter set QP `qpn` names (`counter_set_id`), if any.
fn count(core: &mut Core, qpn: u32, counter: fn(&mut RcQCounters) -> &mut u32) {
    let Some(id) = core.res.qps.get(qpn).map(|qp| qp.counter_set) else {
        return;
    };
    if id == 0 {
        return;
    }
    if let Some(set) = core.res.q_counters.get_mut(id) {
        let value = counter(&mut set.rc);
        *value = value.wrapping_add(1);
    }
}

/// SQD_RTS_QP moved QP `qpn` back to RTS after a drain ([`sq_drain`]): the WQEs posted
/// meanwhile run.
pub(crate) fn resume_after_drain(core: &mut Core, qpn: u32) {
    sq_drain::leave(core, qpn);
    requester::resume(core, qpn);
}
