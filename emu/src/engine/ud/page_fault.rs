//! On-demand paging of a UD QP's send gather (the ODP page's `ud_odp_caps.send`, which
//! mlx5_ib's `internal_fill_odp_caps` in odp.c turns into `IB_ODP_SUPPORT_SEND` of
//! `ud_odp_caps`): a page not present behind a data segment's key stops the send queue at its
//! WQE and is reported, when an EQ takes page faults, with the WQE sub type as
//! `MLX5_WQE_PF_TYPE_REQ_SEND_OR_WRITE`, `wq_num` and the token naming the QP and the WQE's
//! index. mlx5_ib's `mlx5_ib_mr_wqe_pfault_handler` finds the QP by that number
//! (`odp_get_rsc`), reads the WQE back from the send queue (`mlx5_ib_read_wqe_sq`), and
//! `mlx5_ib_mr_initiator_pfault_handler` skips the control segment and, for a UD QP, the
//! datagram segment (48 bytes with `MLX5_EXTENDED_UD_AV`, as mlx5_ib and libmlx5 always
//! write it) to the data segments it maps; then PAGE_FAULT_RESUME (type, QP, token as
//! reported): the send queue gathers the WQE again, or, with the error bit, the WQE completes
//! with a local protection error and the send queue goes to the send queue error state (as any
//! failed UD send WQE does: nothing of it is sent).
//!
//! A datagram scattering into a receive WQE whose memory is not present is dropped (UD has no
//! retransmission) and the fault reported with the WQE's index, the token naming the QP: for
//! a WQE of the UD QP's own ring as `MLX5_WQE_PF_TYPE_RESP` naming the QP (mlx5_ib reads it
//! with `mlx5_ib_read_wqe_rq`, `mlx5_ib_mr_responder_pfault_handler_rq`), the WQE staying
//! posted; for one taken from an SRQ (the ODP page's `ud_odp_caps.srq_receive`,
//! `IB_ODP_SUPPORT_SRQ_RECV` of the UD transport) as `MLX5_WQE_PF_TYPE_RMP` naming the SRQ
//! and the WQE's slot (`odp_get_rsc` finds the SRQ, `mlx5_ib_read_wqe_srq` reads the WQE,
//! `mlx5_ib_mr_responder_pfault_handler_srq` skips its next segment), the QP holding that WQE
//! for its next datagram while the SRQ's others go on to other QPs. Until PAGE_FAULT_RESUME
//! (that type, queue and token) datagrams for the QP are dropped without another report; the
//! resume lets the next one take the WQE, or, with the error bit, fail it (a local protection
//! error CQE, nothing written). A WQE an SRQ fault held is flushed when the QP goes to error.
//! The ODP page has no bit for the own ring's receives (`ud_odp_caps` has `send` and
//! `srq_receive` only; perftest, noting that the device pages UD receives without a cap saying
//! so, checks none).

use crate::engine::eq;
use crate::engine::rc::page_fault::{odp_reported, post_wqe_fault, ResumeError, WqeFault};
use crate::function::Core;
use crate::objects::rc::{
    RcReceive, ReceiveInProgress, RequesterFault, ResponderFault, ResponderFaultKind,
};
use cxdirect_hw::cqe::CqeSyndrome;
use cxdirect_hw::eqe::EventType;
use cxdirect_hw::odp::wqe_pf_type;
use cxdirect_hw::qp::service_type;

/// Send WQE `index` (opcode `opcode`) of datagram QP `qpn` faulted gathering its message:
/// reports it and stops the send queue at it, or returns false (no EQ takes page faults, or
/// the QP is the GSI QP, whose MADs mlx5_ib never sends from ODP memory: the caller fails the
/// WQE).
pub(super) fn send_gather(core: &mut Core, qpn: u32, index: u16, opcode: u8) -> bool {
    let ud = core
        .res
        .ud_qps
        .get(qpn)
        .is_some_and(|qp| qp.service == service_type::UD && qp.req.page_fault.is_none());
    if !ud || !odp_reported(core) || !eq::subscribed(core, EventType::PageFault) {
        return false;
    }
    let pf_type = wqe_pf_type::REQ_SEND_OR_WRITE;
    let fault = WqeFault {
        wq: qpn,
        index,
        pf_type,
        committed: 0,
        packet_len: 0,
    };
    post_wqe_fault(core, qpn, &fault);
    if let Some(qp) = core.res.ud_qps.get_mut(qpn) {
        qp.req.page_fault = Some(RequesterFault {
            index,
            opcode,
            pf_type,
        });
    }
    true
}

/// Whether a datagram for datagram QP `qpn` may take a receive WQE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ReceiveGate {
    /// No receive fault: the datagram takes the next WQE.
    Open,
    /// A receive fault waits for PAGE_FAULT_RESUME: the datagram is dropped, unreported.
    Waiting,
    /// The fault was resumed with an error: the datagram fails the WQE it named (the record
    /// is cleared here).
    Failed,
}

/// The state of datagram QP `qpn`'s receive fault, as a datagram for it finds it.
pub(super) fn receive_gate(core: &mut Core, qpn: u32) -> ReceiveGate {
    let Some(qp) = core.res.ud_qps.get_mut(qpn) else {
        return ReceiveGate::Open;
    };
    match qp.resp.page_fault {
        Some(f) if f.failed => {
            qp.resp.page_fault = None;
            ReceiveGate::Failed
        }
        Some(_) => ReceiveGate::Waiting,
        None => ReceiveGate::Open,
    }
}

/// A datagram of `packet_len` payload bytes for receive WQE `wqe` of datagram QP `qpn` found a
/// page not present: reports the fault and keeps the WQE for the QP's next datagram, true; or
/// false (no EQ takes page faults, or the GSI QP: the caller fails the WQE). A WQE of the QP's
/// own ring is reported as `MLX5_WQE_PF_TYPE_RESP` naming the QP and stays posted at its
/// index; one of an SRQ as `MLX5_WQE_PF_TYPE_RMP` naming the SRQ and the WQE's slot (as
/// `mlx5_ib_read_wqe_srq` reads it), and the QP holds it until its next datagram, the SRQ's
/// other WQEs going on to other QPs. The token names the QP either way.
pub(super) fn receive(
    core: &mut Core,
    qpn: u32,
    wqe: ReceiveInProgress,
    packet_len: usize,
) -> bool {
    if !odp_reported(core) || !eq::subscribed(core, EventType::PageFault) {
        return false;
    }
    let Some(qp) = core.res.ud_qps.get(qpn) else {
        return false;
    };
    if qp.service != service_type::UD {
        return false;
    }
    let (pf_type, wq, index) = match qp.receive {
        RcReceive::Own { .. } => (wqe_pf_type::RESP, qpn, wqe.index),
        RcReceive::Shared(rmpn) => {
            let Some(rmp) = core.res.rmps.get(rmpn) else {
                return false;
            };
            let slot = u32::from(wqe.index) & (rmp.wq.entries() - 1);
            (wqe_pf_type::RMP, rmpn, slot as u16)
        }
        RcReceive::None | RcReceive::Xrc { .. } => return false,
    };
    let Some(qp) = core.res.ud_qps.get_mut(qpn) else {
        return false;
    };
    match qp.receive {
        // The WQE stays posted: the next datagram takes it again.
        RcReceive::Own { .. } => qp.resp.rq_consumed = wqe.index,
        // Taken off the SRQ already: the QP keeps it.
        _ => qp.resp.recv = Some(wqe),
    }
    qp.resp.page_fault = Some(ResponderFault {
        kind: ResponderFaultKind::Receive { wq },
        failed: false,
    });
    let fault = WqeFault {
        wq,
        index,
        pf_type,
        committed: 0,
        packet_len,
    };
    post_wqe_fault(core, qpn, &fault);
    true
}

/// True when `qpn` names a datagram QP (its PAGE_FAULT_RESUME is taken by
/// [`super::resume_page_fault`]).
pub(crate) fn owns(core: &Core, qpn: u32) -> bool {
    core.res.ud_qps.get(qpn).is_some()
}

/// How a datagram QP's send queue goes on after PAGE_FAULT_RESUME: from the faulting WQE
/// (`None`), or failing it with (opcode, syndrome).
pub(crate) type SendResume = Option<(u8, CqeSyndrome)>;

/// PAGE_FAULT_RESUME for datagram QP `token` as `mlx5_ib_page_fault_resume` sends it: the
/// type and queue as reported (`MLX5_WQE_PF_TYPE_REQ_SEND_OR_WRITE` or `_RESP`, the QP). The
/// send queue goes on from the faulting WQE, or with `error` that WQE fails (the caller,
/// [`super::resume_page_fault`], resumes it as the returned [`SendResume`] says); a receive's
/// WQE takes the next datagram, or with `error` fails with it (`None`).
pub(crate) fn resume(
    core: &mut Core,
    pf_type: u8,
    wq: u32,
    token: u32,
    error: bool,
) -> Result<Option<SendResume>, ResumeError> {
    let qp = core.res.ud_qps.get_mut(token).ok_or(ResumeError::NoQueue)?;
    if pf_type == wqe_pf_type::RESP || pf_type == wqe_pf_type::RMP {
        // A receive's fault: the WQE waits; with an error the next datagram fails it. Its
        // type and queue are the ones reported: the QP's own ring, or its SRQ.
        let reported = match qp.receive {
            RcReceive::Own { .. } => (wqe_pf_type::RESP, token),
            RcReceive::Shared(rmpn) => (wqe_pf_type::RMP, rmpn),
            RcReceive::None | RcReceive::Xrc { .. } => return Err(ResumeError::NotFaulted),
        };
        return match qp.resp.page_fault.as_mut() {
            Some(f)
                if !f.failed
                    && (pf_type, wq) == reported
                    && f.kind == (ResponderFaultKind::Receive { wq }) =>
            {
                if error {
                    f.failed = true;
                } else {
                    qp.resp.page_fault = None;
                }
                Ok(None)
            }
            _ => Err(ResumeError::NotFaulted),
        };
    }
    let fault = match qp.req.page_fault {
        Some(f) if f.pf_type == pf_type && wq == token => f,
        _ => return Err(ResumeError::NotFaulted),
    };
    qp.req.page_fault = None;
    Ok(Some(
        error.then_some((fault.opcode, CqeSyndrome::LocalProtection)),
    ))
}
