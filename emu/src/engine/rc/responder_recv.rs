//! The RC responder's receive WQEs: taken in order from the QP's own ring or its shared
//! receive queue (cyclic or linked list), filled through their lkeys, completed with responder
//! CQEs, flushed when the QP goes to error.

use super::count;
use super::qp_error::{post_cqe, post_cqe_as, post_error_cqe, ErrorSide};
use crate::counters::add;
use crate::engine::rq::SharedRing;
use crate::function::Core;
use crate::objects::rc::{RcReceive, ReceiveInProgress};
use crate::objects::tm::TmLanding;
use crate::objects::QState;
use crate::translate::{translate, KeyFault};
use cxdirect_hw::cqe::{Cqe64, CqeOpcode, CqeSyndrome};
use cxdirect_hw::wqe::{DataSeg, INVALID_LKEY, WQE_DS};

/// Receive WQEs posted and not yet taken, on the QP's own ring or its RMP (0 without either,
/// with the RMP not ready, or when the doorbell record cannot be read or claims more than the
/// ring holds).
/// True when QP `qpn` has receive WQEs of its own ring posted and not yet taken.
pub(super) fn has_posted_receives(core: &Core, qpn: u32) -> bool {
    core.res
        .qps
        .get(qpn)
        .is_some_and(|qp| matches!(qp.receive, RcReceive::Own { .. }))
        && posted_receives(core, qpn) > 0
}

fn posted_receives(core: &Core, qpn: u32) -> u16 {
    let Some(qp) = core.res.qps.get(qpn) else {
        return 0;
    };
    match qp.receive {
        RcReceive::Own { log_size, .. } => {
            let Ok(word) = core.dma_read_be32(qp.dbr) else {
                return 0;
            };
            let posted = (word as u16).wrapping_sub(qp.resp.rq_consumed);
            if u32::from(posted) > 1 << log_size {
                return 0;
            }
            posted
        }
        RcReceive::Shared(rmpn) => core
            .res
            .rmps
            .get(rmpn)
            .filter(|rmp| rmp.state == QState::Rdy)
            .and_then(|rmp| crate::engine::rq::posted(core, &rmp.wq))
            .unwrap_or(0),
        // The XRC SRQ the request names.
        RcReceive::Xrc { .. } => qp
            .resp
            .xrc
            .and_then(|x| core.res.xrc_srqs.get(x.srqn))
            .and_then(|srq| crate::engine::rq::posted(core, &srq.wq))
            .unwrap_or(0),
        RcReceive::None => 0,
    }
}

pub(super) fn receive_available(core: &Core, qpn: u32) -> bool {
    posted_receives(core, qpn) > 0
}

/// Takes the next receive WQE of the QP's own ring or RMP (a linked-list RMP's list head);
/// where it is. `None` when none is posted.
pub(super) fn take_receive(core: &mut Core, qpn: u32) -> Option<ReceiveInProgress> {
    if let Some(parked) = core
        .res
        .qps
        .get_mut(qpn)
        .and_then(|qp| qp.resp.parked.take())
    {
        return Some(parked);
    }
    let posted = posted_receives(core, qpn);
    if posted == 0 {
        return None;
    }
    let qp = core.res.qps.get_mut(qpn)?;
    match qp.receive {
        RcReceive::Own {
            log_size,
            log_stride,
        } => {
            let index = qp.resp.rq_consumed;
            qp.resp.rq_consumed = index.wrapping_add(1);
            let stride = 16usize << log_stride;
            let slot = u64::from(index) & ((1u64 << log_size) - 1);
            let addr = qp.buf.addr(slot * stride as u64)?;
            Some(ReceiveInProgress {
                index,
                addr,
                len: stride,
                data_at: 0,
                pd: qp.pd,
                bytes: 0,
            })
        }
        RcReceive::Shared(_) | RcReceive::Xrc { .. } => {
            let ring = match (qp.receive, qp.resp.xrc) {
                (RcReceive::Shared(rmpn), _) => SharedRing::Rmp(rmpn),
                (_, Some(x)) => SharedRing::XrcSrq(x.srqn),
                _ => return None,
            };
            let w = crate::engine::rq::take_limited_wqe(core, ring, posted)?;
            Some(ReceiveInProgress {
                index: w.index,
                addr: w.addr,
                len: w.len,
                data_at: w.data_at,
                pd: w.pd,
                bytes: 0,
            })
        }
        RcReceive::None => None,
    }
}

/// Why a SEND packet did not scatter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scattered {
    /// The receive fails with this syndrome.
    Error(CqeSyndrome),
    /// A page behind a key is not present (a page fault where they are reported); the bytes
    /// the receive holds are as before the packet.
    NotPresent,
}

impl From<CqeSyndrome> for Scattered {
    fn from(syndrome: CqeSyndrome) -> Self {
        Scattered::Error(syndrome)
    }
}

/// Scatters `data` into the receive WQE in progress, after the bytes it already holds.
pub(super) fn scatter(core: &mut Core, qpn: u32, data: &[u8]) -> Result<(), Scattered> {
    let qp = core.res.qps.get(qpn).ok_or(CqeSyndrome::LocalQpOperation)?;
    let recv = qp.resp.recv.ok_or(CqeSyndrome::LocalQpOperation)?;
    if let Some(TmLanding::Tag { entry, .. }) = qp.resp.tm {
        // A matched message lands in its tagged buffer.
        super::tag_matching::scatter_tag(core, &entry, recv.pd, recv.bytes, data)?;
        count_received(core, qpn, data.len());
        return Ok(());
    }
    // Signature errors go to the receive CQ, before the receive's own completion.
    let cqn = qp.resp.xrc.map_or(qp.cqn_rcv, |x| x.cqn);
    let mut wqe = [0u8; MAX_RECEIVE_WQE];
    let wqe = &mut wqe[..recv.len.min(MAX_RECEIVE_WQE)];
    core.dma_read(recv.addr, wqe)
        .map_err(|_| CqeSyndrome::LocalProtection)?;
    let mut signed = false;
    let landed = scatter_segments(core, &recv, wqe, data, &mut signed);
    if signed {
        crate::signature::report(core, qpn, cqn);
    }
    landed?;
    count_received(core, qpn, data.len());
    Ok(())
}

/// Adds `len` bytes to what QP `qpn`'s receive in progress has taken.
fn count_received(core: &mut Core, qpn: u32, len: usize) {
    if let Some(r) = core
        .res
        .qps
        .get_mut(qpn)
        .and_then(|qp| qp.resp.recv.as_mut())
    {
        r.bytes += len as u32;
    }
}

/// Writes `data` through the data segments of receive WQE `wqe`, past the bytes `recv`
/// already holds; `signed` is set once a segment naming a signature key took bytes.
fn scatter_segments(
    core: &Core,
    recv: &ReceiveInProgress,
    wqe: &[u8],
    data: &[u8],
    signed: &mut bool,
) -> Result<(), Scattered> {
    let mut skip = recv.bytes as usize;
    let mut left = data;
    for seg in wqe[recv.data_at.min(wqe.len())..].chunks_exact(WQE_DS) {
        if left.is_empty() {
            break;
        }
        let seg = DataSeg::new(seg).map_err(|_| CqeSyndrome::LocalLength)?;
        let (cap, lkey) = (seg.byte_count() as usize, seg.lkey());
        if lkey == INVALID_LKEY || cap == 0 {
            break;
        }
        if skip >= cap {
            skip -= cap;
            continue;
        }
        let n = (cap - skip).min(left.len());
        let (now, later) = left.split_at(n);
        let addr = seg.addr() + skip as u64;
        if crate::signature::is_signature_key(core, lkey) {
            // The payload lands through the key's signature: the wire domain checked, memory
            // given its own protection, as for a READ response scattered into it.
            *signed = true;
            crate::signature::write(core, lkey, recv.pd, addr, now, None)
                .map_err(|_| Scattered::Error(CqeSyndrome::LocalProtection))?;
        } else {
            translate(
                core,
                lkey,
                recv.pd,
                addr,
                n as u64,
                true,
                |iova, offset, bytes| {
                    core.dma_write(iova, &now[offset as usize..(offset + bytes) as usize])
                        .map_err(|_| KeyFault::Bounds)
                },
            )
            .map_err(|fault| match fault {
                KeyFault::NotPresent => Scattered::NotPresent,
                _ => Scattered::Error(CqeSyndrome::LocalProtection),
            })?;
        }
        left = later;
        skip = 0;
    }
    if !left.is_empty() {
        return Err(CqeSyndrome::LocalLength.into());
    }
    Ok(())
}

/// Largest receive WQE the responder reads (a 2 KiB stride: 128 data segments).
const MAX_RECEIVE_WQE: usize = 2048;

/// Writes a responder CQE to the QP's receive CQ.
pub(super) fn responder_cqe(
    core: &mut Core,
    qpn: u32,
    op: CqeOpcode,
    index: u16,
    bytes: u32,
    imm: u32,
) {
    if let Some(landing) = core.res.qps.get_mut(qpn).and_then(|qp| qp.resp.tm.take()) {
        // A SEND on a tag-matching XRQ completes as tag matching reports it.
        super::tag_matching::complete(core, qpn, landing, index, bytes);
        return;
    }
    let Some(qp) = core.res.qps.get(qpn) else {
        return;
    };
    let xrc = qp.resp.xrc;
    let cqn = xrc.map_or(qp.cqn_rcv, |x| x.cqn);
    // A DCT's receives report the DCT, not the responder context that took them.
    let cqe_qpn = qp.dc_responder.map_or(qpn, |r| r.dct);
    let mut cqe = [0u8; 64];
    if let Ok(mut c) = Cqe64::new(&mut cqe[..]) {
        c.set_opcode(op as u8)
            .set_byte_cnt(bytes)
            .set_qpn(cqe_qpn)
            .set_wqe_counter(index);
        // The immediate, or the rkey a SEND with invalidate invalidated.
        if matches!(
            op,
            CqeOpcode::RespSendImm | CqeOpcode::RespWrImm | CqeOpcode::RespSendInv
        ) {
            c.set_imm_inval_pkey(imm);
        }
    }
    match xrc {
        // An XRC SRQ's receive carries the SRQ's user index, by which libmlx5 finds the
        // SRQ (`get_resp_ctx_v1`, `MLX5_RSC_TYPE_XSRQ`).
        Some(x) => post_cqe_as(core, qpn, cqn, x.user_index, &mut cqe),
        None => post_cqe(core, qpn, cqn, &mut cqe),
    }
}

/// The QP went to error by command: the receive WQE a multi-packet SEND was filling, then
/// every receive WQE posted on the QP's own ring, complete with the flush syndrome. A shared
/// receive queue's WQEs belong to no QP and stay posted.
pub(crate) fn flush_receives(core: &mut Core, qpn: u32) {
    let Some(qp) = core.res.qps.get_mut(qpn) else {
        return;
    };
    qp.resp.write = None;
    if let Some(filling) = qp.resp.recv.take() {
        flushed_receive(core, qpn, filling.index);
    }
    let own = core
        .res
        .qps
        .get(qpn)
        .is_some_and(|qp| matches!(qp.receive, RcReceive::Own { .. }));
    if !own {
        return;
    }
    for _ in 0..posted_receives(core, qpn) {
        let Some(qp) = core.res.qps.get_mut(qpn) else {
            return;
        };
        let index = qp.resp.rq_consumed;
        qp.resp.rq_consumed = index.wrapping_add(1);
        flushed_receive(core, qpn, index);
    }
}

/// The flush-error CQE of receive WQE `index`.
fn flushed_receive(core: &mut Core, qpn: u32, index: u16) {
    count(core, qpn, |c| &mut c.resp_cqe_flush_error);
    post_error_cqe(
        core,
        qpn,
        index,
        CqeSyndrome::WrFlushed,
        ErrorSide::Responder,
    );
}

/// A receive WQE that could not take its message: an error CQE (the responder's NAK then
/// takes the QP to error).
pub(super) fn responder_error(core: &mut Core, qpn: u32, index: u16, syndrome: CqeSyndrome) {
    // A tagged buffer the message was landing in is lost with it.
    if let Some(qp) = core.res.qps.get_mut(qpn) {
        qp.resp.tm = None;
    }
    add(&core.counters.error_cqes, 1);
    count(core, qpn, |c| &mut c.resp_cqe_error);
    match syndrome {
        CqeSyndrome::LocalLength => count(core, qpn, |c| &mut c.resp_local_length_error),
        CqeSyndrome::LocalProtection => count(core, qpn, |c| &mut c.resp_local_protection),
        _ => {}
    }
    post_error_cqe(core, qpn, index, syndrome, ErrorSide::Responder);
}
