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
//! A datagram scattering into a receive WQE of the UD QP's own ring whose memory is not
//! present is dropped (UD has no retransmission) and the fault reported as
//! `MLX5_WQE_PF_TYPE_RESP` naming the QP with the WQE's index (mlx5_ib reads it with
//! `mlx5_ib_read_wqe_rq`, `mlx5_ib_mr_responder_pfault_handler_rq`); the WQE stays posted for
//! the next datagram, and datagrams meanwhile are dropped without another report. The ODP
//! page has no bit for it (`ud_odp_caps` has `send` and `srq_receive` only; perftest, noting
//! that the device pages UD receives without a cap saying so, checks none). Resumed with an
//! error, the next datagram for that WQE fails it (a local protection error CQE). A UD QP on
//! an SRQ is not resolved (`ud_odp_caps.srq_receive` 0): an access error.

use crate::engine::eq;
use crate::engine::rc::page_fault::{odp_reported, post_wqe_fault, ResumeError, WqeFault};
use crate::function::Core;
use crate::objects::rc::{RcReceive, RequesterFault, ResponderFault, ResponderFaultKind};
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

/// A datagram of `packet_len` payload bytes for receive WQE `index` of datagram QP `qpn` (its
/// own ring) found a page not present: reports the fault (once until it is resumed) and puts
/// the WQE back, true; or false (no EQ takes page faults, an SRQ's WQE, the GSI QP, or a fault
/// resumed with an error, whose record this clears: the caller fails the WQE).
pub(super) fn receive(core: &mut Core, qpn: u32, index: u16, packet_len: usize) -> bool {
    if !odp_reported(core) || !eq::subscribed(core, EventType::PageFault) {
        return false;
    }
    let Some(qp) = core.res.ud_qps.get_mut(qpn) else {
        return false;
    };
    if qp.service != service_type::UD || !matches!(qp.receive, RcReceive::Own { .. }) {
        return false;
    }
    let waiting = match qp.resp.page_fault {
        Some(f) if f.failed => {
            qp.resp.page_fault = None;
            return false;
        }
        Some(_) => true,
        None => false,
    };
    // The WQE stays posted: the next datagram takes it again.
    qp.resp.rq_consumed = index;
    if waiting {
        return true;
    }
    qp.resp.page_fault = Some(ResponderFault {
        kind: ResponderFaultKind::Receive { wq: qpn },
        failed: false,
    });
    let fault = WqeFault {
        wq: qpn,
        index,
        pf_type: wqe_pf_type::RESP,
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
    if pf_type == wqe_pf_type::RESP {
        // A receive's fault: the WQE waits posted; with an error the next datagram fails it.
        return match qp.resp.page_fault.as_mut() {
            Some(f) if !f.failed && wq == token => {
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
