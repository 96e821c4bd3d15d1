//! The UC (unreliable connection) responder: the RC responder's SEND and WRITE handling
//! (its `packet`, which the responder runs between [`admit`] and [`settle`]) under the IBA's UC rules (IBA 9.7.5.2 and table 38). Nothing is acknowledged
//! or NAKed. A packet out of sequence means packets were lost: the message in progress is
//! abandoned (a SEND's receive WQE is kept for the next message, nothing completes), the
//! expected PSN moves to the packet's, and only a FIRST or ONLY packet starts a message again;
//! a MIDDLE or LAST with no message open is dropped. A message the responder cannot take (no
//! receive WQE, an rkey refused, a WRITE whose length does not add up) is dropped the same way
//! and the QP stays as it is; a SEND that does not fit its receive WQE completes that WQE in
//! error and takes the QP to error, as on RC.

use super::count;
use super::packet::{bth_opcode, PSN_MASK};
use super::qp_error::enter_error;
use crate::counters::add;
use crate::function::Core;
use cxdirect_hw::eqe::EventType;

/// How the responder's placement of an admitted UC packet ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Placed {
    /// Taken (placed, completed when it ended a message).
    Taken,
    /// A SEND overran its receive WQE (or could not be scattered): the WQE completed in error.
    CompletedInError,
    /// Not taken (no receive WQE, an rkey refused, a length that does not add up).
    Refused,
}

/// A UC packet (`opcode` as on the wire) reached UC QP `qpn`, in state `qp_state`, with PSN
/// `psn`: applies the UC sequence rules and returns the RC opcode to place the packet under,
/// or `None` when the packet is dropped.
pub(super) fn admit(core: &mut Core, qpn: u32, qp_state: u8, opcode: u8, psn: u32) -> Option<u8> {
    use bth_opcode::*;
    let rc_opcode = opcode & !UC;
    if opcode & 0xe0 != UC || rc_opcode > WRITE_ONLY_IMM || !super::sq_drain::receives(qp_state) {
        // Not a UC SEND or WRITE (UC has no READ, atomic or acknowledgement), or the QP is
        // not receiving.
        add(&core.counters.roce_rx_drops, 1);
        return None;
    }
    let first = matches!(
        rc_opcode,
        SEND_FIRST | SEND_ONLY | SEND_ONLY_IMM | WRITE_FIRST | WRITE_ONLY | WRITE_ONLY_IMM
    );
    let qp = core.res.qps.get_mut(qpn)?;
    let open = qp.resp.recv.is_some() || qp.resp.write.is_some();
    let in_sequence = psn == qp.next_rcv_psn & PSN_MASK;
    // Resynchronise on every packet: after a gap the next one expected follows this one.
    qp.next_rcv_psn = (psn + 1) & PSN_MASK;
    if !in_sequence {
        count(core, qpn, |c| &mut c.out_of_sequence);
    }
    if open && (!in_sequence || first) {
        abandon(core, qpn);
    }
    let open = core
        .res
        .qps
        .get(qpn)
        .is_some_and(|qp| qp.resp.recv.is_some() || qp.resp.write.is_some());
    if !first && !open {
        // The rest of a message whose earlier packets were lost (or dropped).
        add(&core.counters.roce_rx_drops, 1);
        return None;
    }
    Some(rc_opcode)
}

/// Ends an admitted packet on UC QP `qpn` by how its placement went: a SEND completed in error
/// takes the QP to error, as on RC; a refused packet abandons its message, the QP staying as
/// it is.
pub(super) fn settle(core: &mut Core, qpn: u32, placed: Placed) {
    match placed {
        Placed::Taken => {}
        Placed::CompletedInError => {
            enter_error(core, qpn, Some(EventType::WqInvalidRequestError));
        }
        Placed::Refused => {
            add(&core.counters.roce_rx_drops, 1);
            abandon(core, qpn);
        }
    }
}

/// Drops the message in progress on QP `qpn`: a WRITE's remaining packets land nowhere, and a
/// SEND's receive WQE, emptied, waits for the next message (the bytes already scattered into
/// it are overwritten by that message).
fn abandon(core: &mut Core, qpn: u32) {
    let Some(qp) = core.res.qps.get_mut(qpn) else {
        return;
    };
    qp.resp.write = None;
    if let Some(mut recv) = qp.resp.recv.take() {
        recv.bytes = 0;
        qp.resp.parked = Some(recv);
    }
}
