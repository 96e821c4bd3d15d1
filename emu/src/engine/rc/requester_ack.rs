//! The RC requester's acknowledgements: ACKs and NAKs retire outstanding WQEs in order, READ
//! responses and atomic acknowledgements land in the WQE's local buffers, and the completions
//! (success, error, flush) are written.

use super::completion::{expects_response, fail, flush, requester_cqe, retire_local};
use super::count;
use super::packet::{aeth, bth_opcode, mtu_bytes, PSN_MASK};
use super::page_fault::response_faulted;
use super::requester::resume;
use super::retransmit::{progressed, resend_outstanding, rnr_nak};
use super::send_ring::read_bb;
use crate::counters::add;
use crate::engine::gather::GatherFault;
use crate::function::Core;
use crate::objects::rc::Outstanding;
use crate::translate::{translate, KeyFault};
use cxdirect_hw::cqe::CqeSyndrome;
use cxdirect_hw::qp::service_type;
use cxdirect_hw::wqe::{self, opcode, CtrlSeg, DataSeg, WQE_BB, WQE_DS};
use std::time::Instant;

/// An ACK or NAK (AETH `syndrome`) for `psn` reached requester QP `qpn`: every WQE whose last
/// packet it acknowledges retires in order, with a CQE when signalled. A NAK for a remote
/// access error, invalid request or remote operational error completes the WQE it names in
/// error, moves the QP to error and flushes every WQE after it.
pub(crate) fn acknowledge(core: &mut Core, qpn: u32, psn: u32, syndrome: u8) {
    let kind = syndrome & aeth::TYPE_MASK;
    let error = match syndrome {
        aeth::NAK_REMOTE_ACCESS => Some(CqeSyndrome::RemoteAccess),
        aeth::NAK_INVALID_REQUEST => Some(CqeSyndrome::RemoteInvalidRequest),
        aeth::NAK_REMOTE_OPERATION => Some(CqeSyndrome::RemoteOperation),
        _ => None,
    };
    // A NAK acknowledges the packets before the PSN it names; an ACK, that PSN too.
    let acked_through = if kind == 0 {
        psn
    } else {
        psn.wrapping_sub(1) & PSN_MASK
    };
    if let Some(qp) = core.res.qps.get_mut(qpn) {
        qp.req.acked_psn = Some(acked_through);
    }
    let blocked = retire_acked(core, qpn, acked_through);
    let now = Instant::now();
    progressed(core, qpn, now);
    if kind == aeth::RNR_NAK {
        rnr_nak(core, qpn, syndrome & 0x1f, now);
        return;
    }
    if syndrome == aeth::NAK_PSN_SEQ {
        // The responder lost a packet: go back to the first unacknowledged one.
        count(core, qpn, |c| &mut c.packet_seq_err);
        resend_outstanding(core, qpn);
        return;
    }
    if kind == 0 && blocked && response_faulted(core, qpn) {
        // The READ or atomic holding the others back waits for its page: its responses are
        // taken again after PAGE_FAULT_RESUME, not before.
        return;
    }
    if kind == 0 && blocked {
        // The responder acknowledged past a READ or atomic whose response never came: the
        // response was lost (an implied NAK). Go back to it.
        add(&core.counters.roce_implied_naks, 1);
        count(core, qpn, |c| &mut c.implied_nak_seq_err);
        resend_outstanding(core, qpn);
        return;
    }
    if let Some(syndrome) = error {
        match syndrome {
            CqeSyndrome::RemoteAccess => count(core, qpn, |c| &mut c.req_remote_access_errors),
            CqeSyndrome::RemoteInvalidRequest => {
                count(core, qpn, |c| &mut c.req_remote_invalid_request)
            }
            _ => count(core, qpn, |c| &mut c.req_remote_operation_errors),
        }
        let front = core
            .res
            .qps
            .get_mut(qpn)
            .and_then(|qp| qp.req.outstanding.pop_front());
        if let Some(front) = front {
            // A DCI with streams: the refused WQE's stream fails, the DCI goes on.
            if super::dc_streams::stream_failed(core, qpn, &front, syndrome) {
                resume(core, qpn);
                return;
            }
            fail(core, qpn, front.index, front.opcode, syndrome);
        }
        flush(core, qpn);
        return;
    }
    // A DC initiator's WQE for another DCT waits for this: its connection is now idle.
    if kind == 0 && super::dc::idle_initiator(core, qpn) {
        resume(core, qpn);
    }
}

/// Retires, in order, every outstanding WQE whose last packet is at or before `acked_through`
/// and that an ACK completes (on UC, that its last packet went out); true when a READ or atomic, which only its response completes,
/// stops that before the acknowledged PSN.
pub(super) fn retire_acked(core: &mut Core, qpn: u32, acked_through: u32) -> bool {
    loop {
        let Some(qp) = core.res.qps.get_mut(qpn) else {
            return false;
        };
        let Some(&front) = qp.req.outstanding.front() else {
            return false;
        };
        if super::completion::is_local(front.opcode) {
            // A local operation at the front: everything before it has completed.
            retire_local(core, qpn);
            continue;
        }
        // `front.last_psn` at or before `acked_through`, in 24-bit sequence space.
        if acked_through.wrapping_sub(front.last_psn) & PSN_MASK >= 1 << 23 {
            return false;
        }
        // A READ or atomic completes by its response, never by a later ACK.
        if expects_response(front.opcode) {
            return true;
        }
        qp.req.outstanding.pop_front();
        if front.signaled {
            requester_cqe(core, qpn, &front);
        }
    }
}

/// A READ response packet (`opcode`, `psn`, payload `data`) or an atomic acknowledgement
/// (`data` the original value) reached requester QP `qpn`. It must be the next response the
/// first WQE awaiting one expects: a duplicate (a replay of what landed already), a response
/// past a lost one, or one of the wrong kind is dropped, and the ACK timer asks again. Earlier
/// WQEs are acknowledged by it, the data lands in the WQE's local buffers, and the last packet
/// completes the WQE.
pub(crate) fn response(core: &mut Core, qpn: u32, opcode: u8, psn: u32, data: &[u8]) {
    use bth_opcode::*;
    let (first, last) = match opcode {
        READ_RESPONSE_ONLY | ATOMIC_ACKNOWLEDGE => (true, true),
        READ_RESPONSE_FIRST => (true, false),
        READ_RESPONSE_MIDDLE => (false, false),
        READ_RESPONSE_LAST => (false, true),
        _ => return,
    };
    let Some(awaited) = first_awaiting_response(core, qpn) else {
        add(&core.counters.roce_rx_drops, 1);
        return;
    };
    if response_faulted(core, qpn) {
        // A page fault of a response waits for PAGE_FAULT_RESUME: the responses that follow
        // are dropped, and taken again after the resume's retransmission.
        add(&core.counters.roce_rx_drops, 1);
        return;
    }
    let expected = (awaited.first_psn + awaited.responses) & PSN_MASK;
    let rendezvous = awaited.opcode == super::tag_rendezvous::RNDV_READ;
    let is_atomic = awaited.opcode != opcode::RDMA_READ && !rendezvous;
    if psn != expected
        || is_atomic != (opcode == ATOMIC_ACKNOWLEDGE)
        || first != (awaited.responses == 0)
        || last != (psn == awaited.last_psn)
    {
        add(&core.counters.roce_rx_drops, 1);
        return;
    }
    // Everything before the response's WQE is acknowledged by it.
    acknowledge_before(core, qpn, awaited.first_psn);
    let Some(qp) = core.res.qps.get(qpn) else {
        return;
    };
    let offset = awaited.responses as usize * mtu_bytes(qp.mtu);
    // An atomic's original value travels big-endian; the requester writes it in the order the
    // driver chose with SET_HCA_CAP (`atomic_req_8B_endianness_mode`).
    let mut original = [0u8; 8];
    let data = if is_atomic && data.len() == 8 && core.hca.caps.atomic_result_host_order() {
        original.copy_from_slice(data);
        original = u64::from_be_bytes(original).to_le_bytes();
        &original[..]
    } else {
        data
    };
    let scattered = if rendezvous {
        super::tag_rendezvous::land(core, qpn, awaited.first_psn, offset, data)
            .map_err(GatherFault::Error)
    } else {
        scatter_local(core, qpn, awaited.index, offset, data)
    };
    let cqn = core.res.qps.get(qpn).map_or(0, |qp| qp.cqn_snd);
    crate::signature::report(core, qpn, cqn);
    if let Err(fault) = scattered {
        let committed = offset.min(u32::MAX as usize) as u32;
        if fault == GatherFault::NotPresent
            && super::page_fault::requester_response(
                core,
                qpn,
                awaited.index,
                awaited.opcode,
                committed,
            )
        {
            add(&core.counters.roce_rx_drops, 1);
            return;
        }
        let syndrome = match fault {
            GatherFault::Error(syndrome) => syndrome,
            GatherFault::NotPresent => CqeSyndrome::LocalProtection,
        };
        if let Some(qp) = core.res.qps.get_mut(qpn) {
            qp.req.outstanding.pop_front();
        }
        fail(core, qpn, awaited.index, awaited.opcode, syndrome);
        flush(core, qpn);
        return;
    }
    let Some(qp) = core.res.qps.get_mut(qpn) else {
        return;
    };
    if last {
        qp.req.outstanding.pop_front();
        if awaited.signaled {
            requester_cqe(core, qpn, &awaited);
        }
        if rendezvous {
            super::tag_rendezvous::read_done(core, qpn, awaited.first_psn, awaited.bytes);
        }
        retire_local(core, qpn);
        // WQEs after it that an ACK covered already retire now.
        if let Some(acked) = core.res.qps.get(qpn).and_then(|qp| qp.req.acked_psn) {
            retire_acked(core, qpn, acked);
        }
        progressed(core, qpn, Instant::now());
        resume(core, qpn);
        return;
    }
    if let Some(front) = qp.req.outstanding.front_mut() {
        front.responses += 1;
    }
    progressed(core, qpn, Instant::now());
}

/// The first outstanding WQE that waits for a response.
fn first_awaiting_response(core: &Core, qpn: u32) -> Option<Outstanding> {
    let qp = core.res.qps.get(qpn)?;
    qp.req
        .outstanding
        .iter()
        .find(|o| expects_response(o.opcode))
        .copied()
}

/// Retires, in order, every outstanding WQE before the one whose first PSN is `psn`.
fn acknowledge_before(core: &mut Core, qpn: u32, psn: u32) {
    loop {
        let Some(qp) = core.res.qps.get_mut(qpn) else {
            return;
        };
        let Some(&front) = qp.req.outstanding.front() else {
            return;
        };
        if front.first_psn == psn {
            return;
        }
        qp.req.outstanding.pop_front();
        if front.signaled {
            requester_cqe(core, qpn, &front);
        }
    }
}

/// Writes `data` at byte `offset` of the local buffers of the READ or atomic WQE at `index`
/// (re-read from the send ring, which the driver does not reuse before the completion). A page
/// not present behind a local key stops it before any byte of `data` lands in that page.
fn scatter_local(
    core: &Core,
    qpn: u32,
    index: u16,
    offset: usize,
    data: &[u8],
) -> Result<(), GatherFault> {
    let mut wqe = [0u8; 4 * WQE_BB];
    read_bb(core, qpn, index, &mut wqe[..WQE_BB]).map_err(|_| CqeSyndrome::LocalProtection)?;
    let ctrl = CtrlSeg::new(&wqe[..16]).map_err(|_| CqeSyndrome::LocalQpOperation)?;
    let (op, ds) = (ctrl.opcode(), usize::from(ctrl.ds()));
    let bbs = wqe::wqebbs(ds);
    if bbs > 4 {
        return Err(CqeSyndrome::LocalLength.into());
    }
    for i in 1..bbs {
        read_bb(
            core,
            qpn,
            index.wrapping_add(i as u16),
            &mut wqe[i * WQE_BB..(i + 1) * WQE_BB],
        )
        .map_err(|_| CqeSyndrome::LocalProtection)?;
    }
    let (pd, service) = core
        .res
        .qps
        .get(qpn)
        .map_or((0, 0), |qp| (qp.pd, qp.service));
    // An XRC initiator's WQE has its XRC segment, a DC initiator's its address vector,
    // between the control and the remote-address segments.
    let transport = match service {
        service_type::XRC => WQE_DS,
        service_type::DCI => super::dc::DC_AV_BYTES,
        _ => 0,
    };
    let mut at = transport + if op == opcode::RDMA_READ { 2 } else { 3 } * WQE_DS;
    let mut skip = offset;
    let mut left = data;
    while !left.is_empty() && at + WQE_DS <= ds * WQE_DS {
        let seg = DataSeg::new(&wqe[at..at + WQE_DS]).map_err(|_| CqeSyndrome::LocalLength)?;
        at += WQE_DS;
        let cap = seg.byte_count() as usize;
        if skip >= cap {
            skip -= cap;
            continue;
        }
        let n = (cap - skip).min(left.len());
        let (now, later) = left.split_at(n);
        if crate::signature::is_signature_key(core, seg.lkey()) {
            let addr = seg.addr() + skip as u64;
            crate::signature::write(core, seg.lkey(), pd, addr, now, None)
                .map_err(|_| CqeSyndrome::LocalProtection)?;
            left = later;
            skip = 0;
            continue;
        }
        translate(
            core,
            seg.lkey(),
            pd,
            seg.addr() + skip as u64,
            n as u64,
            true,
            |iova, off, bytes| {
                core.dma_write(iova, &now[off as usize..(off + bytes) as usize])
                    .map_err(|_| KeyFault::Bounds)
            },
        )
        .map_err(|fault| match fault {
            KeyFault::NotPresent => GatherFault::NotPresent,
            _ => GatherFault::Error(CqeSyndrome::LocalProtection),
        })?;
        left = later;
        skip = 0;
    }
    if left.is_empty() {
        Ok(())
    } else {
        Err(CqeSyndrome::LocalLength.into())
    }
}
