//! On-demand paging on RC QPs: a page behind a memory key not present (its MTT entry lacks
//! the read or write bit the access needs, `translate::KeyFault::NotPresent`) is a page fault
//! when an EQ takes page-fault events (Linux's mlx5_ib opens one, `mlx5r_odp_create_eq` in
//! odp.c, before it registers its first ODP memory region). The device then
//!
//! - reports the fault on that EQ as mlx5_ib's `mlx5_ib_eq_pf_process` reads it: a responder's
//!   RDMA WRITE with the RDMA sub type (its rkey, RETH address and length, the bytes landed
//!   before, the packet's size; type `MLX5_PFAULT_RDMA | MLX5_PFAULT_WRITE`, token the QP); a
//!   SEND's scatter into the receive WQE in progress, or a send WQE's gather, with the WQE sub
//!   type (`MLX5_WQE_PF_TYPE_RESP` with the receive WQE's index, `MLX5_WQE_PF_TYPE_REQ_SEND_OR_WRITE`
//!   with the send WQE's; the QP as `wq_num` and token), which mlx5_ib's
//!   `mlx5_ib_mr_wqe_pfault_handler` reads back from the QP's rings;
//! - stops the faulting side: the responder answers every request in sequence with an RNR
//!   NAK (the PSN is not consumed, and the requester sends again after its RNR timer), the
//!   requester sends nothing from the faulting WQE on;
//! - resumes at PAGE_FAULT_RESUME (`mlx5_ib_page_fault_resume`: the type, the queue and the
//!   token as reported): the responder takes the next retransmission, the requester gathers
//!   the WQE again. With the error bit the fault is final: the responder refuses the next
//!   request in sequence (a remote access NAK for a WRITE, a local protection error CQE on the
//!   receive WQE and an invalid request NAK for a SEND) and goes to error, the requester
//!   completes the WQE with a local protection error and the QP goes to error.
//!
//! Without an EQ taking page faults nothing could resolve one: the access fails as any other
//! refused access does (the model's choice; Linux never has ODP memory without that EQ).
//! READ requests and responses, atomics, receives from an SRQ, and UC and XRC QPs are not
//! resolved (the ODP capability page reports none of them): their faults are access errors.

use super::packet::PSN_MASK;
use crate::engine::eq;
use crate::function::Core;
use crate::objects::rc::{RcReceive, RequesterFault, ResponderFault};
use cxdirect_hw::eqe::EventType;
use cxdirect_hw::odp::{
    pfault_flags, pfault_subtype, wqe_pf_type, EqePageFaultRdma, EqePageFaultWqe,
};
use cxdirect_hw::qp::service_type;

/// Why PAGE_FAULT_RESUME was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResumeError {
    /// No such QP.
    NoQueue,
    /// The QP has no fault of that type and token waiting.
    NotFaulted,
}

/// True when a page fault of QP `qpn` is reported (an EQ takes them, and the QP is an RC
/// one: the ODP page reports no UC or XRC caps) rather than failed.
fn reported(core: &Core, qpn: u32) -> bool {
    eq::subscribed(core, EventType::PageFault)
        && core
            .res
            .qps
            .get(qpn)
            .is_some_and(|qp| qp.service == service_type::RC)
}

/// A responder's RDMA WRITE packet of `packet_len` bytes faulted on QP `qpn`: reports it and
/// stops the responder, or returns false (no EQ takes page faults: the caller refuses the
/// request). `first`: the packet opened the message.
pub(super) fn responder_write(core: &mut Core, qpn: u32, first: bool, packet_len: usize) -> bool {
    if !reported(core, qpn) {
        return false;
    }
    let Some(w) = core.res.qps.get(qpn).and_then(|qp| qp.resp.write) else {
        return false;
    };
    let mut data = [0u8; 28];
    if let Ok(mut e) = EqePageFaultRdma::new(&mut data[..]) {
        e.set_bytes_committed(w.done)
            .set_r_key(w.rkey)
            .set_packet_length(packet_len.min(0xffff) as u16)
            .set_rdma_op_len(w.total)
            .set_rdma_va(w.va)
            .set_pf_type(pfault_flags::RDMA | pfault_flags::WRITE)
            .set_token(qpn & PSN_MASK);
    }
    eq::post_subscribed_event(core, EventType::PageFault, pfault_subtype::RDMA, &data);
    stop_responder(core, qpn, true, first);
    true
}

/// A SEND packet of `packet_len` bytes faulted scattering into the receive WQE in progress of
/// QP `qpn`: reports it and stops the responder, or returns false (no EQ takes page faults, or
/// the WQE is an SRQ's: the caller fails the receive).
pub(super) fn responder_receive(core: &mut Core, qpn: u32, first: bool, packet_len: usize) -> bool {
    if !reported(core, qpn) {
        return false;
    }
    let Some(qp) = core.res.qps.get(qpn) else {
        return false;
    };
    let (RcReceive::Own { .. }, Some(recv)) = (qp.receive, qp.resp.recv) else {
        return false;
    };
    post_wqe_fault(
        core,
        qpn,
        recv.index,
        wqe_pf_type::RESP,
        recv.bytes,
        packet_len,
    );
    stop_responder(core, qpn, false, first);
    true
}

fn stop_responder(core: &mut Core, qpn: u32, rdma: bool, first: bool) {
    if let Some(qp) = core.res.qps.get_mut(qpn) {
        qp.resp.page_fault = Some(ResponderFault {
            rdma,
            failed: false,
        });
        qp.resp.refirst = first;
    }
}

/// Send WQE `index` (opcode `opcode`) of QP `qpn` faulted gathering its message: reports it
/// and stops the requester at it, or returns false (no EQ takes page faults: the caller fails
/// the WQE).
pub(super) fn requester_gather(core: &mut Core, qpn: u32, index: u16, opcode: u8) -> bool {
    if !reported(core, qpn) {
        return false;
    }
    let pf_type = wqe_pf_type::REQ_SEND_OR_WRITE;
    post_wqe_fault(core, qpn, index, pf_type, 0, 0);
    if let Some(qp) = core.res.qps.get_mut(qpn) {
        qp.req.page_fault = Some(RequesterFault {
            index,
            opcode,
            pf_type,
        });
    }
    true
}

fn post_wqe_fault(
    core: &mut Core,
    qpn: u32,
    index: u16,
    pf_type: u8,
    committed: u32,
    packet_len: usize,
) {
    let mut data = [0u8; 28];
    if let Ok(mut e) = EqePageFaultWqe::new(&mut data[..]) {
        e.set_bytes_committed(committed)
            .set_wqe_index(index)
            .set_packet_length(packet_len.min(0xffff) as u16)
            .set_token(qpn & PSN_MASK)
            .set_pf_type(pf_type)
            .set_wq_num(qpn & PSN_MASK);
    }
    eq::post_subscribed_event(core, EventType::PageFault, pfault_subtype::WQE, &data);
}

/// The responder of QP `qpn` waits for a fault to be resumed: the request in sequence gets an
/// RNR NAK (`Some(false)`); or its fault was resumed with an error: the request is refused
/// (`Some(true)`, the fault's record cleared, `rdma` telling which kind it was). `None`: no
/// fault.
pub(super) fn responder_gate(core: &mut Core, qpn: u32) -> Option<(bool, bool)> {
    let qp = core.res.qps.get_mut(qpn)?;
    let fault = qp.resp.page_fault?;
    if fault.failed {
        qp.resp.page_fault = None;
        qp.resp.refirst = false;
    }
    Some((fault.failed, fault.rdma))
}

/// PAGE_FAULT_RESUME as mlx5_ib's `mlx5_ib_page_fault_resume` sends it: `pf_type` and `token`
/// as the event reported them, `wq` the QP (an RDMA fault's token, a WQE fault's `wq_num`).
/// A responder's fault is resumed here (`Ok(None)`); a requester's is taken off its QP and
/// returned, for its send queue to go on or fail.
pub(crate) fn resume(
    core: &mut Core,
    pf_type: u8,
    wq: u32,
    token: u32,
    error: bool,
) -> Result<Option<RequesterFault>, ResumeError> {
    let qp = core.res.qps.get_mut(wq).ok_or(ResumeError::NoQueue)?;
    if token != wq {
        return Err(ResumeError::NotFaulted);
    }
    // An RDMA fault's type has MLX5_PFAULT_RDMA (bit 2); a WQE fault's is a queue kind.
    let responder = pf_type & pfault_flags::RDMA != 0 || pf_type == wqe_pf_type::RESP;
    if responder {
        let rdma = pf_type & pfault_flags::RDMA != 0;
        match qp.resp.page_fault.as_mut() {
            Some(f) if f.rdma == rdma && !f.failed => {
                if error {
                    f.failed = true;
                } else {
                    qp.resp.page_fault = None;
                }
                Ok(None)
            }
            _ => Err(ResumeError::NotFaulted),
        }
    } else {
        // The requester's fault: the caller resumes or fails its send queue (`super::resume_page_fault`).
        let fault = match qp.req.page_fault {
            Some(f) if f.pf_type == pf_type => f,
            _ => return Err(ResumeError::NotFaulted),
        };
        qp.req.page_fault = None;
        Ok(Some(fault))
    }
}
