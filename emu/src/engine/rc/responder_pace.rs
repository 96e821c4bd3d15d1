//! The responder's transmit pacing. A ConnectX responder never drops its own responses for
//! lack of room: its send scheduler transmits them as the link takes them. Here the link is a
//! wire whose far port holds a bounded FIFO, so a READ's responses, and the acknowledgements
//! that follow them, go out only while that FIFO has room; the rest waits on the QP
//! ([`Responder::owed`](crate::objects::rc::Responder)) and is continued, in PSN order, by
//! later device passes ([`pace_all`], run with the RC timers). A QP in a responder queue group
//! likewise sends what it owes only while the group's rates allow (`engine::pacing`).

use super::packet::{aeth, bth_opcode, build_frame, mtu_bytes, Transport, ACKNOWLEDGE, PSN_MASK};
use super::qp_error::enter_error;
use crate::counters::add;
use crate::engine::pacing::{self, QpSide};
use crate::function::Core;
use crate::objects::rc::Owed;
use crate::translate::{translate_remote, KeyFault, RemoteAccess};
use cxdirect_hw::eqe::EventType;
use std::time::Duration;

/// How soon a device thread looks again at a QP whose responses wait for room.
pub(crate) const PACE_RETRY: Duration = Duration::from_micros(20);

/// Frames the far port of the function's wire can still take (unbounded without a wire).
pub(super) fn room(core: &Core) -> usize {
    let Some((wire, port)) = &core.wire else {
        return usize::MAX;
    };
    match wire.peer(*port).and_then(|peer| wire.pending(peer)) {
        Ok(queued) => wire.fifo_capacity().saturating_sub(queued),
        Err(_) => usize::MAX,
    }
}

/// Queues `owed` behind what QP `qpn` owes already (an ACK right behind an ACK replaces it:
/// acknowledgements are cumulative), then transmits what the wire takes. False when the QP
/// owes so much that nothing more fits; `owed` is then not queued.
pub(super) fn owe(core: &mut Core, qpn: u32, owed: Owed) -> bool {
    let Some(qp) = core.res.qps.get_mut(qpn) else {
        return false;
    };
    let queue = &mut qp.resp.owed;
    let is_ack = |word: u32| word >> 24 == u32::from(aeth::ACK);
    let merged = match (queue.back_mut(), owed) {
        (Some(back), Owed::Ack { aeth: new, .. })
            if is_ack(new) && matches!(*back, Owed::Ack { aeth: old, .. } if is_ack(old)) =>
        {
            *back = owed;
            true
        }
        _ => false,
    };
    if !merged && !queue.push_back(owed) {
        return false;
    }
    pace(core, qpn);
    true
}

/// Transmits, oldest first, what QP `qpn` owes while the wire has room; returns whether
/// anything went out.
pub(super) fn pace(core: &mut Core, qpn: u32) -> bool {
    let mut sent = false;
    let paced = pacing::qp_is_paced(core, qpn, QpSide::Responder);
    loop {
        let Some(qp) = core.res.qps.get_mut(qpn) else {
            return sent;
        };
        if !super::sq_drain::receives(qp.state) {
            qp.resp.owed.clear();
            return sent;
        }
        let Some(&mut owed) = qp.resp.owed.front_mut() else {
            return sent;
        };
        if room(core) == 0 || (paced && !pacing::qp_admits(core, qpn, QpSide::Responder)) {
            return sent;
        }
        match owed {
            Owed::Ack { psn, aeth } => {
                pop(core, qpn);
                transmit(core, qpn, ACKNOWLEDGE, psn, Some(aeth), None, 0..0);
            }
            Owed::AtomicAck {
                psn,
                aeth,
                original,
            } => {
                pop(core, qpn);
                transmit(
                    core,
                    qpn,
                    bth_opcode::ATOMIC_ACKNOWLEDGE,
                    psn,
                    Some(aeth),
                    Some(original),
                    0..0,
                );
            }
            Owed::Read { .. } => {
                if !read_response(core, qpn, owed) {
                    return true;
                }
            }
        }
        sent = true;
    }
}

/// Continues every QP's owed responses as far as the wire allows; whether anything went out.
pub(crate) fn pace_all(core: &mut Core) -> bool {
    let mut sent = false;
    let mut after = None;
    loop {
        let next = core.res.qps.iter().find_map(|(qpn, qp)| {
            (after.is_none_or(|a| qpn > a) && !qp.resp.owed.is_empty()).then_some(qpn)
        });
        let Some(qpn) = next else {
            return sent;
        };
        after = Some(qpn);
        sent |= pace(core, qpn);
    }
}

/// Whether any QP waits for room to transmit what it owes.
pub(crate) fn any_owed(core: &Core) -> bool {
    core.res.qps.iter().any(|(_, qp)| !qp.resp.owed.is_empty())
}

fn pop(core: &mut Core, qpn: u32) {
    if let Some(qp) = core.res.qps.get_mut(qpn) {
        qp.resp.owed.pop_front();
    }
}

/// Sends the next response of the READ `owed`, at the front of QP `qpn`'s queue, and moves
/// it on (or off the queue after its last). False when the memory behind the key cannot be
/// read: the QP's owed responses are dropped and the READ is NAKed (remote operation error),
/// fatally unless it answered a duplicate.
fn read_response(core: &mut Core, qpn: u32, owed: Owed) -> bool {
    let Owed::Read {
        next_psn,
        va,
        rkey,
        len,
        offset,
        msn,
        replay,
    } = owed
    else {
        return false;
    };
    let Some(qp) = core.res.qps.get(qpn) else {
        return false;
    };
    let (pd, mtu) = (qp.responder_pd(), mtu_bytes(qp.mtu) as u32);
    let bytes = (len - offset).min(mtu);
    let mut data = std::mem::take(&mut core.rc_scratch.response);
    data.clear();
    data.resize(bytes as usize, 0);
    let signed = crate::signature::is_signature_key(core, rkey);
    let read = bytes == 0
        || (signed
            && crate::signature::read(
                core,
                rkey,
                pd,
                va + u64::from(offset),
                &mut data,
                Some(RemoteAccess::Read),
            )
            .is_ok())
        || (!signed
            && translate_remote(
                core,
                rkey,
                pd,
                va + u64::from(offset),
                u64::from(bytes),
                RemoteAccess::Read,
                |iova, at, piece| {
                    core.dma_read(iova, &mut data[at as usize..(at + piece) as usize])
                        .map_err(|_| KeyFault::Bounds)
                },
            )
            .is_ok());
    if signed {
        let cqn = core.res.qps.get(qpn).map_or(0, |qp| qp.cqn_rcv);
        crate::signature::report(core, qpn, cqn);
    }
    if !read {
        core.rc_scratch.response = data;
        // The key granted the range but the memory behind it cannot be read.
        if let Some(qp) = core.res.qps.get_mut(qpn) {
            qp.resp.owed.clear();
        }
        add(&core.counters.roce_naks_sent, 1);
        let nak = (u32::from(aeth::NAK_REMOTE_OPERATION) << 24) | (msn & PSN_MASK);
        transmit(core, qpn, ACKNOWLEDGE, next_psn, Some(nak), None, 0..0);
        if !replay {
            enter_error(core, qpn, Some(EventType::WqCatastrophicError));
        }
        return false;
    }
    let (first, last) = (offset == 0, offset + bytes >= len);
    let opcode = match (first, last) {
        (true, true) => bth_opcode::READ_RESPONSE_ONLY,
        (true, false) => bth_opcode::READ_RESPONSE_FIRST,
        (false, false) => bth_opcode::READ_RESPONSE_MIDDLE,
        (false, true) => bth_opcode::READ_RESPONSE_LAST,
    };
    if let Some(qp) = core.res.qps.get_mut(qpn) {
        if last {
            qp.resp.owed.pop_front();
        } else if let Some(front) = qp.resp.owed.front_mut() {
            *front = Owed::Read {
                next_psn: (next_psn + 1) & PSN_MASK,
                va,
                rkey,
                len,
                offset: offset + bytes,
                msn,
                replay,
            };
        }
    }
    let aeth = (first || last).then_some((u32::from(aeth::ACK) << 24) | (msn & PSN_MASK));
    core.rc_scratch.response = data;
    transmit(core, qpn, opcode, next_psn, aeth, None, 0..bytes as usize);
    true
}

/// Builds and transmits one packet of QP `qpn` to its peer: `opcode` at `psn` with the AETH
/// word `aeth`, an atomic ACK's `original`, and the bytes `payload` of the response scratch.
fn transmit(
    core: &mut Core,
    qpn: u32,
    opcode: u8,
    psn: u32,
    aeth: Option<u32>,
    original: Option<u64>,
    payload: std::ops::Range<usize>,
) {
    let Some(qp) = core.res.qps.get(qpn) else {
        return;
    };
    let t = Transport {
        opcode,
        dest_qpn: qp.remote_qpn,
        psn,
        ack_req: false,
        solicited: false,
        xrceth: None,
        dceth: None,
        reth: None,
        aeth,
        imm: None,
        atomic: None,
        atomic_ack: original,
    };
    let data = std::mem::take(&mut core.rc_scratch.response);
    let mut frame = std::mem::take(&mut core.rc_scratch.ack);
    if build_frame(core, qpn, &t, data.get(payload).unwrap_or(&[]), &mut frame) {
        crate::engine::sq::transmit(core, &frame);
        if pacing::qp_is_paced(core, qpn, QpSide::Responder) {
            pacing::qp_charge(core, qpn, QpSide::Responder, frame.len());
        }
    }
    core.rc_scratch.ack = frame;
    core.rc_scratch.response = data;
}
