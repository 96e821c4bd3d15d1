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
//! A UD receive scatter into memory not present is not resolved (the page reports no
//! `ud_odp_caps.srq_receive`): it is an access error.

use crate::engine::eq;
use crate::engine::rc::page_fault::{odp_reported, post_wqe_fault, ResumeError, WqeFault};
use crate::function::Core;
use crate::objects::rc::RequesterFault;
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

/// True when `qpn` names a datagram QP (its PAGE_FAULT_RESUME is taken by [`resume`]).
pub(crate) fn owns(core: &Core, qpn: u32) -> bool {
    core.res.ud_qps.get(qpn).is_some()
}

/// PAGE_FAULT_RESUME for datagram QP `token` as `mlx5_ib_page_fault_resume` sends it: the
/// type and queue as reported (`MLX5_WQE_PF_TYPE_REQ_SEND_OR_WRITE`, the QP). The send queue
/// goes on from the faulting WQE, or with `error` that WQE fails.
pub(crate) fn resume(
    core: &mut Core,
    pf_type: u8,
    wq: u32,
    token: u32,
    error: bool,
) -> Result<(), ResumeError> {
    let qp = core.res.ud_qps.get_mut(token).ok_or(ResumeError::NoQueue)?;
    let fault = match qp.req.page_fault {
        Some(f) if f.pf_type == pf_type && wq == token => f,
        _ => return Err(ResumeError::NotFaulted),
    };
    qp.req.page_fault = None;
    let failed = error.then_some((fault.opcode, CqeSyndrome::LocalProtection));
    super::send::resume(core, token, failed);
    Ok(())
}
