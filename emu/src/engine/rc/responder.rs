//! The RC responder: a UDP 4791 frame reaching a function with RoCE enabled goes to the QP its
//! BTH names, not through Ethernet steering. The ICRC is checked (a bad one is dropped and
//! counted), then the PSN: a duplicate is answered by an ACK, the first packet out of sequence
//! by a sequence-error NAK (later ones are dropped silently until the expected PSN arrives). A
//! SEND scatters into a receive WQE (no WQE: an RNR NAK); a WRITE lands through the rkey after
//! [`check_remote`] (refused: a remote access NAK, nothing written). A packet asking for an
//! acknowledgement gets an ACK carrying the MSN; packets that do not ask are acknowledged with
//! the next one that does (coalesced). ACKs, NAKs and responses arriving for the QP go to the
//! requester ([`super::requester_ack`]).

use super::count;
use super::dc::Admission;
use super::packet::{
    aeth, bth_opcode, icrc, roce_offsets, ACKNOWLEDGE, BTH_LEN, DCETH_LEN, ICRC_LEN, IMM_LEN,
    PSN_MASK, RETH_LEN,
};
use super::qp_error::enter_error;
use super::requester_ack::{acknowledge, response};
use super::responder_pace::owe;
use super::responder_read_atomic::{atomic, read, replay_atomic, replay_read};
use super::responder_recv::{
    receive_available, responder_cqe, responder_error, scatter, take_receive, Scattered,
};
use super::responder_write::{clear_write, set_write, write_data, Landing};
use crate::counters::add;
use crate::function::Core;
use crate::objects::rc::Owed;
use crate::objects::tm::TmLanding;
use crate::objects::UNBOUND_QPN;
use crate::translate::{check_remote_on, KeyFault, RemoteAccess};
use cxdirect_hw::cqe::{CqeOpcode, CqeSyndrome};
use cxdirect_hw::eqe::EventType;
use cxdirect_hw::qp::service_type;
use cxdirect_hw::xrq::TMH_LEN;

/// Takes `frame` when it is RoCE v2 and RoCE is enabled on the function; false when it is
/// not RoCE, for Ethernet steering to handle.
pub(crate) fn receive(core: &mut Core, frame: &[u8]) -> bool {
    if !core.cfg.roce || !core.port.roce_en {
        return false;
    }
    let Some(at) = roce_offsets(frame) else {
        return false;
    };
    if at.end > frame.len() || at.end < at.bth + BTH_LEN + ICRC_LEN {
        add(&core.counters.roce_rx_drops, 1);
        return true;
    }
    let body_end = at.end - ICRC_LEN;
    if icrc(&frame[..body_end], at.l3) != frame[body_end..at.end] {
        add(&core.counters.roce_icrc_drops, 1);
        return true;
    }
    let bth = &frame[at.bth..at.bth + BTH_LEN];
    let opcode = bth[0];
    let pad = usize::from((bth[1] >> 4) & 3);
    let qpn = u32::from_be_bytes([bth[4], bth[5], bth[6], bth[7]]) & PSN_MASK;
    let psn_word = u32::from_be_bytes([bth[8], bth[9], bth[10], bth[11]]);
    let (psn, ack_req) = (psn_word & PSN_MASK, psn_word & 0x8000_0000 != 0);
    // A DC request names a DCT: it goes to the responder context carrying its initiator.
    let dc = opcode & 0xe0 == bth_opcode::DC;
    let (qpn, opcode) = if dc {
        match super::dc::admit(core, frame, &at, qpn) {
            Admission::Take(responder) => (responder, opcode & !bth_opcode::DC),
            Admission::WrongKey(responder) => {
                send_ack(core, responder, psn, aeth::NAK_REMOTE_ACCESS);
                return true;
            }
            Admission::Dropped => return true,
        }
    } else {
        (qpn, opcode)
    };
    // The REG_UMR QP shares the RC QPs' numbers but has no peer: nothing arrives for it. A
    // DCT's responder context takes only DC requests; a DC initiator only responses.
    let Some(qp) = core.res.qps.get(qpn).filter(|qp| {
        matches!(
            qp.service,
            service_type::RC | service_type::UC | service_type::XRC | service_type::DCI
        ) && qp.dc_responder.is_some() == dc
    }) else {
        add(&core.counters.roce_rx_drops, 1);
        return true;
    };
    let qp_state = qp.state;
    let qp_service = qp.service;
    let rest_start = at.bth + BTH_LEN + if dc { DCETH_LEN } else { 0 };
    if body_end < rest_start + pad {
        add(&core.counters.roce_rx_drops, 1);
        return true;
    }
    let rest = &frame[rest_start..body_end - pad];
    let (opcode, rest, xrc_srqn) = if qp.service == service_type::XRC {
        let Some(stripped) = super::xrc::strip(opcode, rest) else {
            add(&core.counters.roce_rx_drops, 1);
            return true;
        };
        stripped
    } else {
        (opcode, rest, None)
    };
    if qp.service == service_type::UC {
        use super::unreliable::{admit, settle, Placed};
        if let Some(rc_opcode) = admit(core, qpn, qp_state, opcode, psn) {
            let errors = core
                .counters
                .error_cqes
                .load(std::sync::atomic::Ordering::Relaxed);
            let placed = match packet(core, qpn, rc_opcode, rest) {
                Outcome::Done | Outcome::Responded(_) => Placed::Taken,
                // The receive WQE has its error CQE.
                Outcome::ReceiveNak(_) => Placed::CompletedInError,
                Outcome::Nak(_)
                    if core
                        .counters
                        .error_cqes
                        .load(std::sync::atomic::Ordering::Relaxed)
                        != errors =>
                {
                    Placed::CompletedInError
                }
                Outcome::Nak(_) | Outcome::Dropped => Placed::Refused,
            };
            settle(core, qpn, placed);
        }
        return true;
    }
    if (bth_opcode::READ_RESPONSE_FIRST..=bth_opcode::ATOMIC_ACKNOWLEDGE).contains(&opcode)
        && opcode != ACKNOWLEDGE
    {
        if !super::sq_drain::sends(qp_state) {
            add(&core.counters.roce_rx_drops, 1);
            return true;
        }
        // FIRST, LAST and ONLY carry an AETH before the data; an atomic ACK one before the
        // original value.
        let skip = if opcode == bth_opcode::READ_RESPONSE_MIDDLE {
            0
        } else {
            4
        };
        if rest.len() < skip {
            add(&core.counters.roce_rx_drops, 1);
            return true;
        }
        response(core, qpn, opcode, psn, &rest[skip..]);
        super::sq_drain::drained(core, qpn);
        return true;
    }
    if opcode == ACKNOWLEDGE {
        if rest.len() < 4 || !super::sq_drain::sends(qp_state) {
            add(&core.counters.roce_rx_drops, 1);
            return true;
        }
        let word = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]);
        acknowledge(core, qpn, psn, (word >> 24) as u8);
        super::sq_drain::drained(core, qpn);
        return true;
    }
    if !super::sq_drain::receives(qp_state) || qp_service == service_type::DCI {
        add(&core.counters.roce_rx_drops, 1);
        return true;
    }
    respond(core, qpn, opcode, psn, ack_req, rest, xrc_srqn);
    true
}

/// What a packet did at the responder.
pub(super) enum Outcome {
    /// Taken; acknowledge when asked.
    Done,
    /// Answered with responses taking this many PSNs (a READ, an atomic).
    Responded(u32),
    /// Refused with this NAK syndrome (the PSN is not consumed).
    Nak(u8),
    /// Dropped unanswered (the PSN is not consumed): the requester sends it again.
    Dropped,
    /// A receive WQE failed and has its error CQE: refused with this NAK syndrome, the QP
    /// to error.
    ReceiveNak(u8),
}

/// The responder's handling of an in-sequence check and then the packet (on an XRC target,
/// once the XRC SRQ `xrc_srqn` its XRCETH names is accepted).
fn respond(
    core: &mut Core,
    qpn: u32,
    opcode: u8,
    psn: u32,
    ack_req: bool,
    rest: &[u8],
    xrc_srqn: Option<u32>,
) {
    let Some(qp) = core.res.qps.get(qpn) else {
        return;
    };
    let expected = qp.next_rcv_psn & PSN_MASK;
    let behind = expected.wrapping_sub(psn) & PSN_MASK;
    if psn != expected {
        if behind != 0 && behind < 1 << 23 {
            // A duplicate: the ACK or response for it was lost, or the requester retried.
            // A READ is answered again from memory, an atomic with the value it found; any
            // other request by an ACK of everything received.
            add(&core.counters.roce_duplicates, 1);
            count(core, qpn, |c| &mut c.duplicate_request);
            match opcode {
                bth_opcode::READ_REQUEST => replay_read(core, qpn, psn, rest),
                bth_opcode::COMPARE_SWAP | bth_opcode::FETCH_ADD => replay_atomic(core, qpn, psn),
                _ => send_ack(core, qpn, expected.wrapping_sub(1) & PSN_MASK, aeth::ACK),
            }
        } else {
            add(&core.counters.roce_rx_drops, 1);
            count(core, qpn, |c| &mut c.out_of_sequence);
            let first = core
                .res
                .qps
                .get_mut(qpn)
                .map(|qp| !std::mem::replace(&mut qp.resp.nak_sent, true))
                .unwrap_or(false);
            if first {
                send_ack(core, qpn, expected, aeth::NAK_PSN_SEQ);
            }
        }
        return;
    }
    // A page fault the responder waits on answers the request with an RNR NAK; one resumed
    // with an error refuses it (`page_fault`).
    if let Some(outcome) = faulted(core, qpn) {
        finish(core, qpn, psn, expected, ack_req, outcome);
        return;
    }
    match opcode {
        bth_opcode::READ_REQUEST => count(core, qpn, |c| &mut c.rx_read_requests),
        bth_opcode::COMPARE_SWAP | bth_opcode::FETCH_ADD => {
            count(core, qpn, |c| &mut c.rx_atomic_requests)
        }
        bth_opcode::WRITE_FIRST | bth_opcode::WRITE_ONLY | bth_opcode::WRITE_ONLY_IMM => {
            count(core, qpn, |c| &mut c.rx_write_requests)
        }
        _ => {}
    }
    let selected = xrc_srqn.map_or(Ok(()), |srqn| super::xrc::select(core, qpn, srqn));
    let outcome = match (selected, opcode) {
        (Err(syndrome), _) => Outcome::Nak(syndrome),
        (Ok(()), bth_opcode::READ_REQUEST) => read(core, qpn, psn, rest),
        (Ok(()), bth_opcode::COMPARE_SWAP | bth_opcode::FETCH_ADD) => {
            atomic(core, qpn, opcode, psn, rest)
        }
        (Ok(()), _) => packet(core, qpn, opcode, rest),
    };
    finish(core, qpn, psn, expected, ack_req, outcome);
}

/// The responder's answer to the request `psn` (the one `expected`) by its outcome.
fn finish(core: &mut Core, qpn: u32, psn: u32, expected: u32, ack_req: bool, outcome: Outcome) {
    match outcome {
        Outcome::Done => {
            if let Some(qp) = core.res.qps.get_mut(qpn) {
                qp.next_rcv_psn = (expected + 1) & PSN_MASK;
                qp.resp.nak_sent = false;
                qp.resp.refirst = false;
            }
            if ack_req {
                send_ack(core, qpn, psn, aeth::ACK);
            }
        }
        Outcome::Responded(psns) => {
            if let Some(qp) = core.res.qps.get_mut(qpn) {
                qp.next_rcv_psn = (expected + psns) & PSN_MASK;
                qp.resp.nak_sent = false;
            }
        }
        Outcome::Dropped => {}
        Outcome::ReceiveNak(syndrome) => {
            let event = if syndrome == aeth::NAK_REMOTE_OPERATION {
                // The IB spec's local access violation work queue error (a protection error
                // on the responder's own receive buffer).
                EventType::WqAccessError
            } else {
                count(core, qpn, |c| &mut c.resp_remote_invalid_request);
                EventType::WqInvalidRequestError
            };
            send_ack(core, qpn, psn, syndrome);
            enter_error(core, qpn, Some(event));
        }
        Outcome::Nak(syndrome) => {
            let event = match syndrome {
                aeth::NAK_REMOTE_ACCESS => {
                    count(core, qpn, |c| &mut c.resp_remote_access_errors);
                    Some(EventType::WqAccessError)
                }
                aeth::NAK_INVALID_REQUEST => {
                    count(core, qpn, |c| &mut c.resp_remote_invalid_request);
                    Some(EventType::WqInvalidRequestError)
                }
                aeth::NAK_REMOTE_OPERATION => Some(EventType::WqCatastrophicError),
                _ => {
                    if syndrome & aeth::TYPE_MASK == aeth::RNR_NAK {
                        add(&core.counters.roce_rnr_naks_sent, 1);
                    }
                    None
                }
            };
            send_ack(core, qpn, psn, syndrome);
            // A refused request is fatal to the responder's QP, as on the device.
            if event.is_some() {
                enter_error(core, qpn, event);
            }
        }
    }
}

/// Executes one in-sequence request packet.
pub(super) fn packet(core: &mut Core, qpn: u32, opcode: u8, rest: &[u8]) -> Outcome {
    use bth_opcode::*;
    let (first, last, imm, write) = match opcode {
        // The IETH takes the ImmDt's place; `invalidate` below tells them apart.
        SEND_LAST_INV => (false, true, true, false),
        SEND_ONLY_INV => (true, true, true, false),
        SEND_FIRST => (true, false, false, false),
        SEND_MIDDLE => (false, false, false, false),
        SEND_LAST => (false, true, false, false),
        SEND_LAST_IMM => (false, true, true, false),
        SEND_ONLY => (true, true, false, false),
        SEND_ONLY_IMM => (true, true, true, false),
        WRITE_FIRST => (true, false, false, true),
        WRITE_MIDDLE => (false, false, false, true),
        WRITE_LAST => (false, true, false, true),
        WRITE_LAST_IMM => (false, true, true, true),
        WRITE_ONLY => (true, true, false, true),
        WRITE_ONLY_IMM => (true, true, true, true),
        _ => return Outcome::Nak(aeth::NAK_INVALID_REQUEST),
    };
    let mut rest = rest;
    let mut reth = None;
    if write && first {
        if rest.len() < RETH_LEN {
            return Outcome::Nak(aeth::NAK_INVALID_REQUEST);
        }
        let va = u64::from_be_bytes(rest[..8].try_into().unwrap_or_default());
        let rkey = u32::from_be_bytes([rest[8], rest[9], rest[10], rest[11]]);
        let len = u32::from_be_bytes([rest[12], rest[13], rest[14], rest[15]]);
        reth = Some((va, rkey, len));
        rest = &rest[RETH_LEN..];
    }
    let mut imm_data = 0;
    if imm {
        if rest.len() < IMM_LEN {
            return Outcome::Nak(aeth::NAK_INVALID_REQUEST);
        }
        imm_data = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]);
        rest = &rest[IMM_LEN..];
    }
    let Some(qp) = core.res.qps.get(qpn) else {
        return Outcome::Nak(aeth::NAK_INVALID_REQUEST);
    };
    // The retransmitted first packet of a message whose first packet faulted opens it again.
    let reopen = first && qp.resp.refirst;
    let in_send = qp.resp.recv.is_some() && !reopen;
    let in_write = qp.resp.write.is_some() && !reopen;
    // A FIRST or ONLY while a message is open, or a MIDDLE or LAST of none, is out of order.
    if first == (in_send || in_write) || (!first && write != in_write) {
        return Outcome::Nak(aeth::NAK_INVALID_REQUEST);
    }
    let kept_receive = reopen && !write && qp.resp.recv.is_some();
    if write {
        if let Some((va, rkey, len)) = reth {
            if !qp.rwe
                || check_remote_on(
                    core,
                    rkey,
                    qp.responder_pd(),
                    qpn,
                    va,
                    u64::from(len),
                    RemoteAccess::Write,
                )
                .is_err()
            {
                return Outcome::Nak(aeth::NAK_REMOTE_ACCESS);
            }
            set_write(core, qpn, va, rkey, len);
        }
        // With immediate, the receive WQE must be there before the last data lands.
        if imm && !receive_available(core, qpn) {
            if first {
                clear_write(core, qpn);
            }
            return rnr(core, qpn);
        }
        match write_data(core, qpn, rest, last) {
            Ok(()) => {}
            Err(Landing::NotPresent)
                if super::page_fault::responder_write(core, qpn, first, rest.len()) =>
            {
                return rnr(core, qpn);
            }
            Err(refused) => {
                clear_write(core, qpn);
                return Outcome::Nak(match refused {
                    Landing::Nak(syndrome) => syndrome,
                    Landing::NotPresent => aeth::NAK_REMOTE_ACCESS,
                });
            }
        }
        if last {
            let total = core
                .res
                .qps
                .get_mut(qpn)
                .and_then(|qp| qp.resp.write.take())
                .map_or(0, |w| w.total);
            if imm {
                let Some(recv) = take_receive(core, qpn) else {
                    return rnr(core, qpn);
                };
                responder_cqe(core, qpn, CqeOpcode::RespWrImm, recv.index, total, imm_data);
            }
            message_done(core, qpn);
        }
        return Outcome::Done;
    }
    if first && !kept_receive {
        // A tag-matching XRQ decides where the message lands from its first bytes.
        let landing = super::tag_matching::classify(core, qpn, rest, last);
        if let Some(l @ TmLanding::Rendezvous { .. }) = landing {
            // The request is taken whole; the device goes on with its READ.
            super::tag_rendezvous::rendezvous(core, qpn, l, rest);
            message_done(core, qpn);
            return Outcome::Done;
        }
        let recv = match landing {
            Some(l @ TmLanding::Tag { index, .. }) => {
                rest = &rest[TMH_LEN..];
                super::tag_matching::matched(core, qpn, l);
                super::tag_matching::tag_receive(core, qpn, index)
            }
            _ => {
                let Some(recv) = take_receive(core, qpn) else {
                    super::tag_matching::unclassify(core, qpn, landing);
                    return rnr(core, qpn);
                };
                recv
            }
        };
        if let Some(qp) = core.res.qps.get_mut(qpn) {
            qp.resp.recv = Some(recv);
            qp.resp.tm = landing;
        }
    }
    if let Err(fault) = scatter(core, qpn, rest) {
        if fault == Scattered::NotPresent
            && super::page_fault::responder_receive(core, qpn, first, rest.len())
        {
            return rnr(core, qpn);
        }
        let syndrome = match fault {
            Scattered::Error(syndrome) => syndrome,
            Scattered::NotPresent => CqeSyndrome::LocalProtection,
        };
        return receive_failed(core, qpn, syndrome);
    }
    if last {
        let invalidate = matches!(opcode, SEND_LAST_INV | SEND_ONLY_INV);
        let Some(recv) = core.res.qps.get_mut(qpn).and_then(|qp| qp.resp.recv.take()) else {
            message_done(core, qpn);
            return Outcome::Done;
        };
        if invalidate && invalidate_rkey(core, qpn, imm_data).is_err() {
            responder_error(core, qpn, recv.index, CqeSyndrome::RemoteInvalidRequest);
            return Outcome::Nak(aeth::NAK_INVALID_REQUEST);
        }
        let op = match (imm, invalidate) {
            (_, true) => CqeOpcode::RespSendInv,
            (true, false) => CqeOpcode::RespSendImm,
            (false, false) => CqeOpcode::RespSend,
        };
        responder_cqe(core, qpn, op, recv.index, recv.bytes, imm_data);
        message_done(core, qpn);
    }
    Outcome::Done
}

pub(super) fn message_done(core: &mut Core, qpn: u32) {
    if let Some(qp) = core.res.qps.get_mut(qpn) {
        qp.resp.msn = (qp.resp.msn + 1) & PSN_MASK;
    }
}

/// Invalidates `rkey` for a SEND with invalidate received on QP `qpn`: the key must exist
/// (index and variant), be valid, allow remote invalidation (`en_rinval`, which Linux's
/// `set_reg_mkey_seg` sets on every fast-registered key) and belong to the QP's protection
/// domain, and, a type 2 memory window bound to a QP (`mlx5_ib_alloc_mw` sets `en_rinval` for
/// type 2 only), be bound to this one; it is then free and bound to none, and every later
/// access through it fails (a remote one with a remote access NAK).
fn invalidate_rkey(core: &mut Core, qpn: u32, rkey: u32) -> Result<(), KeyFault> {
    let pd = core.res.qps.get(qpn).ok_or(KeyFault::NoKey)?.responder_pd();
    let key = core.res.mkeys.get_mut(rkey >> 8).ok_or(KeyFault::NoKey)?;
    if key.variant != (rkey & 0xff) as u8 || key.free {
        return Err(KeyFault::NoKey);
    }
    if key.pd != pd {
        return Err(KeyFault::WrongPd);
    }
    if !key.remote_invalidate {
        return Err(KeyFault::Access);
    }
    // A type 2 window bound to a QP is invalidated only by a SEND arriving on that QP.
    if key.qpn != UNBOUND_QPN && key.qpn != qpn {
        return Err(KeyFault::Access);
    }
    key.free = true;
    key.qpn = UNBOUND_QPN;
    Ok(())
}

/// The outcome of a request in sequence while QP `qpn`'s responder has a page fault: an RNR
/// NAK while it waits for PAGE_FAULT_RESUME; after a resume with an error, the refusal of the
/// faulted access (a WRITE's, READ's or atomic's remote access NAK; a SEND's local protection
/// error on its receive WQE and a remote operational error NAK), which takes the QP to error.
/// `None` without a fault.
fn faulted(core: &mut Core, qpn: u32) -> Option<Outcome> {
    let (failed, rdma) = super::page_fault::responder_gate(core, qpn)?;
    if !failed {
        return Some(rnr(core, qpn));
    }
    if rdma {
        clear_write(core, qpn);
        return Some(Outcome::Nak(aeth::NAK_REMOTE_ACCESS));
    }
    Some(receive_failed(core, qpn, CqeSyndrome::LocalProtection))
}

/// The receive WQE a SEND was filling failed with `syndrome`: its error CQE, then the NAK the
/// requester completes by. A receive buffer too short for the message is the IB spec's
/// invalid request (the requester's REMOTE_INVAL_REQ_ERR); a protection fault on the
/// receive's own lkey (a key re-registered to other memory or another PD, as rdma-core's
/// `test_mr_rereg_addr` and `test_mr_rereg_pd` provoke) is a remote operational error, which
/// the requester completes with REMOTE_OP_ERR (mlx5_ib `mlx5_handle_error_cqe`:
/// IB_WC_REM_OP_ERR).
fn receive_failed(core: &mut Core, qpn: u32, syndrome: CqeSyndrome) -> Outcome {
    let index = core
        .res
        .qps
        .get_mut(qpn)
        .and_then(|qp| qp.resp.recv.take())
        .map_or(0, |r| r.index);
    responder_error(core, qpn, index, syndrome);
    Outcome::ReceiveNak(match syndrome {
        CqeSyndrome::LocalProtection | CqeSyndrome::LocalAccess => aeth::NAK_REMOTE_OPERATION,
        _ => aeth::NAK_INVALID_REQUEST,
    })
}

/// The RNR NAK of `qpn`: its RNR timer code in the syndrome's low five bits.
pub(super) fn rnr(core: &Core, qpn: u32) -> Outcome {
    let timer = core.res.qps.get(qpn).map_or(0, |qp| qp.min_rnr_nak & 0x1f);
    Outcome::Nak(aeth::RNR_NAK | timer)
}

/// Sends an ACK or NAK (`syndrome`) for `psn` to QP `qpn`'s peer, with the QP's MSN, behind
/// the responses the QP still owes (an acknowledgement never overtakes a READ's responses).
pub(crate) fn send_ack(core: &mut Core, qpn: u32, psn: u32, syndrome: u8) {
    let Some(qp) = core.res.qps.get(qpn) else {
        return;
    };
    if syndrome == aeth::ACK {
        add(&core.counters.roce_acks_sent, 1);
    } else if syndrome & aeth::TYPE_MASK != aeth::RNR_NAK {
        add(&core.counters.roce_naks_sent, 1);
    }
    let aeth = (u32::from(syndrome) << 24) | (qp.resp.msn & PSN_MASK);
    if !owe(core, qpn, Owed::Ack { psn, aeth }) {
        add(&core.counters.roce_rx_drops, 1);
    }
}
