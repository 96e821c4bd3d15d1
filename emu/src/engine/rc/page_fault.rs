//! On-demand paging on RC QPs: a page behind a memory key not present (its MTT entry lacks
//! the read or write bit the access needs, `translate::KeyFault::NotPresent`) is a page fault
//! when an EQ takes page-fault events (Linux's mlx5_ib opens one, `mlx5r_odp_create_eq` in
//! odp.c, before it registers its first ODP memory region). The device then
//!
//! - reports the fault on that EQ as mlx5_ib's `mlx5_ib_eq_pf_process` reads it. A responder's
//!   remote access with the RDMA sub type (its rkey, address and length, the bytes landed
//!   before, the packet's size; token the QP), which `mlx5_ib_mr_rdma_pfault_handler` maps:
//!   an RDMA WRITE (type `MLX5_PFAULT_RDMA | MLX5_PFAULT_WRITE`, the RETH's range), an RDMA
//!   READ's source (`MLX5_PFAULT_RDMA`, the RETH's range, checked whole before the first
//!   response), an atomic's target (`MLX5_PFAULT_RDMA | MLX5_PFAULT_WRITE`, 8 bytes). A WQE's
//!   own buffers with the WQE sub type, which `mlx5_ib_mr_wqe_pfault_handler` reads back from
//!   the queue `wq_num` names: a SEND's scatter into the receive WQE in progress
//!   (`MLX5_WQE_PF_TYPE_RESP` naming the QP, or `MLX5_WQE_PF_TYPE_RMP` naming the SRQ, with
//!   the WQE's index and the bytes it holds), a send WQE's gather
//!   (`MLX5_WQE_PF_TYPE_REQ_SEND_OR_WRITE`; a retransmission's too, the message being read
//!   again from memory where a page may have gone since the first transmission), a READ
//!   response's or atomic acknowledgement's scatter into a send WQE's local buffers
//!   (`MLX5_WQE_PF_TYPE_REQ_READ_OR_ATOMIC`, the bytes of the response landed before); the
//!   token names the QP;
//! - stops the faulting side: the responder answers every request in sequence with an RNR
//!   NAK (the PSN is not consumed, and the requester sends again after its RNR timer), the
//!   requester sends nothing from the faulting WQE on (a response fault: it drops the
//!   responses, and its ACK timer waits);
//! - resumes at PAGE_FAULT_RESUME (`mlx5_ib_page_fault_resume`: the type, the queue and the
//!   token as reported): the responder takes the next retransmission, the requester gathers
//!   the WQE again (a response fault or a retransmission's gather fault: sends again from the
//!   oldest unacknowledged WQE, go-back-N, its timers having waited without spending retries,
//!   taking the responses from where they stopped; an atomic is answered by the responder from
//!   its first execution). With the error bit the fault is final: the responder refuses the next
//!   request in sequence (a remote access NAK for a WRITE, READ or atomic, a local protection
//!   error CQE on the receive WQE and a remote operational error NAK for a SEND) and goes to
//!   error, the requester completes the WQE with a local protection error and the QP goes to
//!   error.
//!
//! Without an EQ taking page faults nothing could resolve one: the access fails as any other
//! refused access does (the model's choice; Linux never has ODP memory without that EQ).
//! XRC QPs are resolved as RC ones (the ODP page's `xrc_odp_caps`): an initiator's gather and
//! response scatter (mlx5_ib's `mlx5_ib_mr_initiator_pfault_handler` skips the WQE's XRC
//! segment), a target's remote accesses, and its receives from the XRC SRQ the request names
//! (`MLX5_WQE_PF_TYPE_RMP` naming that SRQ). DC is resolved too (the ODP page's
//! `dc_odp_caps`): a DC initiator as an RC requester (mlx5_ib skips its WQEs' address vector;
//! an atomic's result buffer as `MLX5_WQE_PF_TYPE_REQ_READ_OR_ATOMIC`), a DCT's responder
//! context as an RC responder (an atomic's target too), its faults carrying the DCT's number
//! as their token (the context is the device's own), which PAGE_FAULT_RESUME names back; a
//! DCT's receives come from its SRQ (`MLX5_WQE_PF_TYPE_RMP`). UC QPs are not (the page
//! reports no UC caps): their faults are access errors. A UD QP's send gather and receive scatter are
//! (`engine::ud::page_fault`), with [`post_wqe_fault`].

use super::packet::PSN_MASK;
use crate::engine::eq;
use crate::function::Core;
use crate::objects::rc::{RcReceive, RequesterFault, ResponderFault, ResponderFaultKind};
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

/// True when a page fault of QP `qpn` is reported (an EQ takes them, and the QP is an RC or
/// XRC one, initiator or target, a DC initiator or a DCT's responder context: the ODP page
/// reports no UC caps) rather than failed.
fn reported(core: &Core, qpn: u32) -> bool {
    odp_reported(core)
        && eq::subscribed(core, EventType::PageFault)
        && core.res.qps.get(qpn).is_some_and(|qp| {
            matches!(
                qp.service,
                service_type::RC | service_type::XRC | service_type::DCI
            ) || qp.dc_responder.is_some()
        })
}

/// True when the function reports on-demand paging (`pg` and the ODP page, with RoCE): a
/// function without it has no page faults, a page not present being an access error.
pub(crate) fn odp_reported(core: &Core) -> bool {
    core.cfg.odp && core.cfg.roce
}

/// The token a fault of QP `qpn` carries: the QP's number, or for a DCT's responder context
/// (a QP of the device's own, which Linux never sees) the DCT's.
fn token_of(core: &Core, qpn: u32) -> u32 {
    core.res
        .qps
        .get(qpn)
        .and_then(|qp| qp.dc_responder)
        .map_or(qpn, |r| r.dct)
        & PSN_MASK
}

/// The QP a PAGE_FAULT_RESUME's token names: the QP of that number, or, for a DCT, its
/// responder context with a fault waiting.
fn qp_of_token(core: &Core, token: u32) -> Option<u32> {
    let Some(dct) = core.res.dcts.get(token) else {
        return Some(token);
    };
    dct.responders.iter().copied().find(|&qpn| {
        core.res
            .qps
            .get(qpn)
            .is_some_and(|qp| qp.resp.page_fault.is_some_and(|f| !f.failed))
    })
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
    let access = RdmaAccess {
        rkey: w.rkey,
        va: w.va,
        len: w.total,
        committed: w.done,
        packet_len,
        pf_type: pfault_flags::RDMA | pfault_flags::WRITE,
    };
    post_rdma_fault(core, qpn, &access);
    let kind = ResponderFaultKind::Rdma {
        pf_type: access.pf_type,
    };
    stop_responder(core, qpn, kind, first);
    true
}

/// A responder's RDMA READ request of QP `qpn` (`len` bytes at `va` through `rkey`) reaches a
/// page not present: reports it with the RDMA sub type (type `MLX5_PFAULT_RDMA`, the READ's
/// whole range, the first response's size as the packet's) and stops the responder, or
/// returns false (no EQ takes page faults: the caller refuses the request).
/// mlx5_ib's `mlx5_ib_mr_rdma_pfault_handler` maps `[va, va + len)` and resumes.
pub(super) fn responder_read(
    core: &mut Core,
    qpn: u32,
    (va, rkey, len): (u64, u32, u32),
    packet_len: usize,
) -> bool {
    if !reported(core, qpn) {
        return false;
    }
    let access = RdmaAccess {
        rkey,
        va,
        len,
        committed: 0,
        packet_len,
        pf_type: pfault_flags::RDMA,
    };
    post_rdma_fault(core, qpn, &access);
    let kind = ResponderFaultKind::Rdma {
        pf_type: access.pf_type,
    };
    stop_responder(core, qpn, kind, false);
    true
}

/// A responder's atomic of QP `qpn` on the 8 bytes at `va` through `rkey` reaches a page not
/// present: reports it with the RDMA sub type (type `MLX5_PFAULT_RDMA | MLX5_PFAULT_WRITE`:
/// the atomic writes the page; length 8) and stops the responder before the atomic runs, or
/// returns false (the caller refuses the request).
pub(super) fn responder_atomic(core: &mut Core, qpn: u32, va: u64, rkey: u32) -> bool {
    if !reported(core, qpn) {
        return false;
    }
    let access = RdmaAccess {
        rkey,
        va,
        len: 8,
        committed: 0,
        packet_len: 8,
        pf_type: pfault_flags::RDMA | pfault_flags::WRITE,
    };
    post_rdma_fault(core, qpn, &access);
    let kind = ResponderFaultKind::Rdma {
        pf_type: access.pf_type,
    };
    stop_responder(core, qpn, kind, false);
    true
}

/// A remote access that faulted, as the RDMA sub type reports it.
struct RdmaAccess {
    rkey: u32,
    /// The request's first virtual address (its RETH or AtomicETH address).
    va: u64,
    /// The request's whole length in bytes.
    len: u32,
    /// Bytes of it already moved.
    committed: u32,
    /// Bytes of the faulting packet.
    packet_len: usize,
    /// `MLX5_PFAULT_*` flags.
    pf_type: u8,
}

fn post_rdma_fault(core: &mut Core, qpn: u32, a: &RdmaAccess) {
    let mut data = [0u8; 28];
    if let Ok(mut e) = EqePageFaultRdma::new(&mut data[..]) {
        e.set_bytes_committed(a.committed)
            .set_r_key(a.rkey)
            .set_packet_length(a.packet_len.min(0xffff) as u16)
            .set_rdma_op_len(a.len)
            .set_rdma_va(a.va)
            .set_pf_type(a.pf_type)
            .set_token(token_of(core, qpn));
    }
    eq::post_subscribed_event(core, EventType::PageFault, pfault_subtype::RDMA, &data);
}

/// A SEND packet of `packet_len` bytes faulted scattering into the receive WQE in progress of
/// QP `qpn`: reports it and stops the responder, or returns false (no EQ takes page faults:
/// the caller fails the receive). A WQE of the QP's own ring is reported as
/// `MLX5_WQE_PF_TYPE_RESP` naming the QP (mlx5_ib reads it with `mlx5_ib_read_wqe_rq` and
/// parses it in `mlx5_ib_mr_responder_pfault_handler_rq`); one of an SRQ as
/// `MLX5_WQE_PF_TYPE_RMP` naming the SRQ (`odp_get_rsc` finds it by that number,
/// `mlx5_ib_read_wqe_srq` reads the WQE at its slot, `mlx5_ib_mr_responder_pfault_handler_srq`
/// skips its next segment), the token naming the QP.
pub(super) fn responder_receive(core: &mut Core, qpn: u32, first: bool, packet_len: usize) -> bool {
    if !reported(core, qpn) {
        return false;
    }
    let Some(qp) = core.res.qps.get(qpn) else {
        return false;
    };
    let Some(recv) = qp.resp.recv else {
        return false;
    };
    let (pf_type, wq, index) = match qp.receive {
        RcReceive::Own { .. } => (wqe_pf_type::RESP, qpn, recv.index),
        RcReceive::Shared(rmpn) => {
            let Some(rmp) = core.res.rmps.get(rmpn) else {
                return false;
            };
            // The WQE's slot in the SRQ's buffer: mlx5_ib reads it at `index << wqe_shift`.
            let slot = u32::from(recv.index) & (rmp.wq.entries() - 1);
            (wqe_pf_type::RMP, rmpn, slot as u16)
        }
        // An XRC target's receive comes from the XRC SRQ the request named: reported as an
        // SRQ's (`odp_get_rsc` finds XRC SRQs by number too, `MLX5_RES_XSRQ`).
        RcReceive::Xrc { .. } => {
            let Some(srqn) = qp.resp.xrc.map(|x| x.srqn) else {
                return false;
            };
            let Some(srq) = core.res.xrc_srqs.get(srqn) else {
                return false;
            };
            let slot = u32::from(recv.index) & (srq.wq.entries() - 1);
            (wqe_pf_type::RMP, srqn, slot as u16)
        }
        RcReceive::None => return false,
    };
    let fault = WqeFault {
        wq,
        index,
        pf_type,
        committed: recv.bytes,
        packet_len,
    };
    post_wqe_fault(core, qpn, &fault);
    stop_responder(core, qpn, ResponderFaultKind::Receive { wq }, first);
    true
}

fn stop_responder(core: &mut Core, qpn: u32, kind: ResponderFaultKind, first: bool) {
    if let Some(qp) = core.res.qps.get_mut(qpn) {
        qp.resp.page_fault = Some(ResponderFault {
            kind,
            failed: false,
        });
        qp.resp.refirst = first;
    }
}

/// Send WQE `index` (opcode `opcode`) of QP `qpn` faulted gathering its message: reports it
/// and stops the requester at it, or returns false (no EQ takes page faults: the caller fails
/// the WQE).
pub(super) fn requester_gather(core: &mut Core, qpn: u32, index: u16, opcode: u8) -> bool {
    requester_fault(core, qpn, index, opcode, wqe_pf_type::REQ_SEND_OR_WRITE, 0)
}

/// A READ response or atomic acknowledgement for send WQE `index` (opcode `opcode`) of QP
/// `qpn` faulted scattering into the WQE's local buffers, `committed` bytes of the response
/// landed before: reports it as `MLX5_WQE_PF_TYPE_REQ_READ_OR_ATOMIC` (mlx5_ib reads the
/// WQE back and `mlx5_ib_mr_initiator_pfault_handler` skips its remote address and atomic
/// segments to the scatter list) and stops the requester, which drops the responses until
/// PAGE_FAULT_RESUME; or returns false (the caller fails the WQE).
pub(super) fn requester_response(
    core: &mut Core,
    qpn: u32,
    index: u16,
    opcode: u8,
    committed: u32,
) -> bool {
    let pf_type = wqe_pf_type::REQ_READ_OR_ATOMIC;
    requester_fault(core, qpn, index, opcode, pf_type, committed)
}

fn requester_fault(
    core: &mut Core,
    qpn: u32,
    index: u16,
    opcode: u8,
    pf_type: u8,
    committed: u32,
) -> bool {
    if !reported(core, qpn) {
        return false;
    }
    if core
        .res
        .qps
        .get(qpn)
        .is_some_and(|qp| qp.req.page_fault.is_some())
    {
        // One fault waits already (a response arriving behind a gather fault): this one is
        // not reported yet, its response is dropped and asked for again after that resume.
        return true;
    }
    let fault = WqeFault {
        wq: qpn,
        index,
        pf_type,
        committed,
        packet_len: 0,
    };
    post_wqe_fault(core, qpn, &fault);
    if let Some(qp) = core.res.qps.get_mut(qpn) {
        qp.req.page_fault = Some(RequesterFault {
            index,
            opcode,
            pf_type,
        });
    }
    true
}

/// A WQE's fault, as the WQE sub type reports it.
pub(crate) struct WqeFault {
    /// The queue holding the WQE (`wq_num`): the QP, or the SRQ.
    pub wq: u32,
    /// The WQE's index in that queue.
    pub index: u16,
    /// `MLX5_WQE_PF_TYPE_*`.
    pub pf_type: u8,
    /// Bytes of the WQE's data already moved.
    pub committed: u32,
    /// Bytes of the faulting packet (a responder's).
    pub packet_len: usize,
}

/// Posts a WQE fault of QP `qpn` (its token).
pub(crate) fn post_wqe_fault(core: &mut Core, qpn: u32, f: &WqeFault) {
    let token = token_of(core, qpn);
    let mut data = [0u8; 28];
    if let Ok(mut e) = EqePageFaultWqe::new(&mut data[..]) {
        e.set_bytes_committed(f.committed)
            .set_wqe_index(f.index)
            .set_packet_length(f.packet_len.min(0xffff) as u16)
            .set_token(token)
            .set_pf_type(f.pf_type)
            .set_wq_num(f.wq & PSN_MASK);
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
    let rdma = matches!(fault.kind, ResponderFaultKind::Rdma { .. });
    Some((fault.failed, rdma))
}

/// PAGE_FAULT_RESUME as mlx5_ib's `mlx5_ib_page_fault_resume` sends it: `pf_type` and `token`
/// as the event reported them, `wq` the event's queue (an RDMA fault's token, a WQE fault's
/// `wq_num`: the QP, or for `MLX5_WQE_PF_TYPE_RMP` the SRQ). The token names the QP.
/// A responder's fault is resumed here (`Ok(None)`); a requester's is taken off its QP and
/// returned, for its send queue to go on or fail.
pub(crate) fn resume(
    core: &mut Core,
    pf_type: u8,
    wq: u32,
    token: u32,
    error: bool,
) -> Result<Option<RequesterFault>, ResumeError> {
    let qpn = qp_of_token(core, token).ok_or(ResumeError::NotFaulted)?;
    let qp = core.res.qps.get_mut(qpn).ok_or(ResumeError::NoQueue)?;
    // An RDMA fault's type has MLX5_PFAULT_RDMA (bit 2); a WQE fault's is a queue kind.
    let rdma = pf_type & pfault_flags::RDMA != 0;
    let kind = match pf_type {
        _ if rdma => Some(ResponderFaultKind::Rdma { pf_type }),
        wqe_pf_type::RESP | wqe_pf_type::RMP => Some(ResponderFaultKind::Receive { wq }),
        _ => None,
    };
    if kind != Some(ResponderFaultKind::Receive { wq }) && wq != token {
        // Only an SRQ's fault names a queue other than the QP.
        return Err(ResumeError::NotFaulted);
    }
    if let Some(kind) = kind {
        let own = pf_type == wqe_pf_type::RESP;
        match qp.resp.page_fault.as_mut() {
            // A receive fault's type tells the QP's own ring from an SRQ.
            Some(f)
                if f.kind == kind
                    && !f.failed
                    && (rdma || own == matches!(qp.receive, RcReceive::Own { .. })) =>
            {
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

/// Whether QP `qpn`'s requester waits for PAGE_FAULT_RESUME before it may send its
/// outstanding WQEs again: a response's scatter faulted, or the gather of a retransmission
/// (a WQE already outstanding). Its ACK and RNR timers wait too, spending no retries.
pub(super) fn outstanding_faulted(core: &Core, qpn: u32) -> bool {
    core.res.qps.get(qpn).is_some_and(|qp| {
        qp.req.page_fault.is_some_and(|f| {
            f.pf_type == wqe_pf_type::REQ_READ_OR_ATOMIC
                || qp.req.outstanding.iter().any(|o| o.index == f.index)
        })
    })
}

/// Whether QP `qpn`'s requester waits for PAGE_FAULT_RESUME of a response's scatter.
pub(super) fn response_faulted(core: &Core, qpn: u32) -> bool {
    core.res.qps.get(qpn).is_some_and(|qp| {
        qp.req
            .page_fault
            .is_some_and(|f| f.pf_type == wqe_pf_type::REQ_READ_OR_ATOMIC)
    })
}
