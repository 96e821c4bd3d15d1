//! Building and sending one RC request message: SEND and WRITE payloads gathered into
//! packets, READ and atomic requests, each put on the wire by the requester
//! ([`requester`](super::requester)).

use super::packet::{bth_opcode, build_frame, mtu_bytes, Transport, PSN_MASK};
use super::requester_ack::retire_acked;
use super::responder_pace::room;
use super::timer::arm_ack_timer;
use crate::engine::gather::GatherFault;
use crate::engine::pacing::{self, QpSide};
use crate::function::Core;
use crate::objects::queue_state::RcScratch;
use crate::objects::rc::{Outstanding, Sending};
use cxdirect_hw::cqe::CqeSyndrome;
use cxdirect_hw::qp::service_type;
use cxdirect_hw::wqe::{opcode, DataSeg, INLINE_SEG, WQE_DS};

/// What the requester knows of a WQE it is sending.
pub(super) struct Request {
    pub(super) opcode: u8,
    pub(super) index: u16,
    pub(super) bbs: u16,
    pub(super) imm: u32,
    pub(super) solicited: bool,
    pub(super) signaled: bool,
    pub(super) remote: Option<(u64, u32)>,
    /// A retransmission from this PSN (the WQE is already outstanding).
    pub(super) resend_psn: Option<u32>,
    /// The packet of the message to send first (0, or where the wire had no room before).
    pub(super) from_packet: u32,
    /// XRC initiators: the XRC SRQ at the target the WQE's XRC segment names.
    pub(super) xrc_srqn: Option<u32>,
    /// DC initiators: the DCETH (access key, initiator, connection's first PSN).
    pub(super) dceth: Option<(u64, u32, u32)>,
}

/// Gathers the message of the data and inline segments of `wqe` from byte `at` on, through
/// the keys of QP `qpn`'s protection domain and up to its `log_msg_max`; a page not present
/// is told apart (the requester's page fault).
pub(super) fn gather(
    core: &Core,
    qpn: u32,
    wqe: &[u8],
    at: usize,
    message: &mut Vec<u8>,
) -> Result<(), GatherFault> {
    let qp = core.res.qps.get(qpn).ok_or(CqeSyndrome::LocalQpOperation)?;
    let max = 1usize << qp.log_msg_max.min(31);
    crate::engine::gather::gather_paged(core, qp.pd, max, wqe, at, message)
}

/// Cuts the gathered message into packets and transmits them.
pub(super) fn send_message(core: &mut Core, qpn: u32, req: &Request, s: &mut RcScratch) {
    let Some(qp) = core.res.qps.get(qpn) else {
        return;
    };
    let mtu = mtu_bytes(qp.mtu);
    let dest_qpn = qp.remote_qpn;
    // UC: the same packets under the UC opcodes, asking for no acknowledgement.
    let unreliable = qp.service == service_type::UC;
    let prefix = if unreliable { bth_opcode::UC } else { 0 };
    let mut psn = req.resend_psn.unwrap_or(qp.next_send_psn) & PSN_MASK;
    let first_psn = psn;
    let total = s.message.len();
    let packets = total.div_ceil(mtu).max(1);
    let write = req.remote.is_some();
    // A SEND with invalidate carries the rkey from the control segment's `imm` in an IETH
    // where a SEND with immediate carries its ImmDt.
    let invalidate = req.opcode == opcode::SEND_INVAL;
    let with_imm = invalidate || matches!(req.opcode, opcode::SEND_IMM | opcode::RDMA_WRITE_IMM);
    let mut paused = None;
    // A requester in a queue group or a rate limited traffic class sends within its rates
    // (`engine::pacing`).
    let paced = pacing::qp_is_paced(core, qpn, QpSide::Requester);
    psn = (psn + req.from_packet) & PSN_MASK;
    for n in req.from_packet as usize..packets {
        if room(core) == 0 || (paced && !pacing::qp_admits(core, qpn, QpSide::Requester)) {
            // The rest waits for room at the peer's port, or for its queue group's rate to
            // pay a debt; later device passes continue it.
            paused = Some(Sending {
                index: req.index,
                first_psn,
                next_packet: n as u32,
            });
            break;
        }
        let first = n == 0;
        let last = n + 1 == packets;
        let bth = match (write, first, last, with_imm) {
            (false, true, true, true) if invalidate => bth_opcode::SEND_ONLY_INV,
            (false, false, true, true) if invalidate => bth_opcode::SEND_LAST_INV,
            (false, true, true, false) => bth_opcode::SEND_ONLY,
            (false, true, true, true) => bth_opcode::SEND_ONLY_IMM,
            (false, true, false, _) => bth_opcode::SEND_FIRST,
            (false, false, false, _) => bth_opcode::SEND_MIDDLE,
            (false, false, true, false) => bth_opcode::SEND_LAST,
            (false, false, true, true) => bth_opcode::SEND_LAST_IMM,
            (true, true, true, false) => bth_opcode::WRITE_ONLY,
            (true, true, true, true) => bth_opcode::WRITE_ONLY_IMM,
            (true, true, false, _) => bth_opcode::WRITE_FIRST,
            (true, false, false, _) => bth_opcode::WRITE_MIDDLE,
            (true, false, true, false) => bth_opcode::WRITE_LAST,
            (true, false, true, true) => bth_opcode::WRITE_LAST_IMM,
        };
        let t = Transport {
            opcode: bth | prefix,
            dest_qpn,
            psn,
            ack_req: last && !unreliable,
            solicited: last && req.solicited,
            xrceth: req.xrc_srqn,
            dceth: req.dceth,
            reth: match req.remote {
                Some((va, rkey)) if first => Some((va, rkey, total as u32)),
                _ => None,
            },
            aeth: None,
            imm: (last && with_imm).then_some(req.imm),
            atomic: None,
            atomic_ack: None,
        };
        let range = (n * mtu).min(total)..((n + 1) * mtu).min(total);
        let mut frame = std::mem::take(&mut s.frame);
        if build_frame(core, qpn, &t, &s.message[range], &mut frame) {
            crate::engine::sq::transmit(core, &frame);
            if paced {
                pacing::qp_charge(core, qpn, QpSide::Requester, frame.len());
            }
        }
        s.frame = frame;
        psn = (psn + 1) & PSN_MASK;
    }
    if !unreliable {
        arm_ack_timer(core, qpn);
    }
    let Some(qp) = core.res.qps.get_mut(qpn) else {
        return;
    };
    let last_psn = (first_psn + packets as u32 - 1) & PSN_MASK;
    let done = paused.is_none();
    qp.req.sending = paused;
    if req.resend_psn.is_none() {
        let psn = (first_psn + packets as u32) & PSN_MASK;
        qp.next_send_psn = psn;
        qp.req.outstanding.push_back(Outstanding {
            index: req.index,
            opcode: req.opcode,
            first_psn,
            last_psn: psn.wrapping_sub(1) & PSN_MASK,
            signaled: req.signaled,
            bytes: total as u32,
            responses: 0,
        });
    }
    if unreliable && done {
        // No acknowledgement comes on UC: a WQE is complete once its last packet is out.
        retire_acked(core, qpn, last_psn);
    }
}

/// Bytes of the local data segments of `wqe` from byte `at` on (where a READ or atomic
/// response lands); `None` for an inline segment there.
pub(super) fn local_bytes(wqe: &[u8], mut at: usize) -> Option<u32> {
    let mut total = 0u32;
    while at + WQE_DS <= wqe.len() {
        let seg = DataSeg::new(&wqe[at..at + WQE_DS]).ok()?;
        if seg.byte_count() & INLINE_SEG != 0 {
            return None;
        }
        total = total.checked_add(seg.byte_count())?;
        at += WQE_DS;
    }
    Some(total)
}

/// Sends the READ request of `req` for `bytes` at `va` through `rkey`: one packet, the PSNs
/// of all its response packets reserved.
pub(super) fn send_read(core: &mut Core, qpn: u32, req: &Request, va: u64, rkey: u32, bytes: u32) {
    let Some(qp) = core.res.qps.get(qpn) else {
        return;
    };
    let mtu = mtu_bytes(qp.mtu);
    let psn = req.resend_psn.unwrap_or(qp.next_send_psn) & PSN_MASK;
    let responses = (bytes as usize).div_ceil(mtu).max(1) as u32;
    let t = Transport {
        opcode: bth_opcode::READ_REQUEST,
        dest_qpn: qp.remote_qpn,
        psn,
        ack_req: true,
        solicited: false,
        xrceth: req.xrc_srqn,
        dceth: req.dceth,
        reth: Some((va, rkey, bytes)),
        aeth: None,
        imm: None,
        atomic: None,
        atomic_ack: None,
    };
    transmit_request(core, qpn, &t, req, psn, responses, bytes);
}

/// Sends the atomic request of `req` (AtomicETH `eth`).
pub(super) fn send_atomic(core: &mut Core, qpn: u32, req: &Request, eth: (u64, u32, u64, u64)) {
    let Some(qp) = core.res.qps.get(qpn) else {
        return;
    };
    let psn = req.resend_psn.unwrap_or(qp.next_send_psn) & PSN_MASK;
    let t = Transport {
        opcode: if req.opcode == opcode::ATOMIC_CS {
            bth_opcode::COMPARE_SWAP
        } else {
            bth_opcode::FETCH_ADD
        },
        dest_qpn: qp.remote_qpn,
        psn,
        ack_req: true,
        solicited: false,
        xrceth: req.xrc_srqn,
        dceth: req.dceth,
        reth: None,
        aeth: None,
        imm: None,
        atomic: Some(eth),
        atomic_ack: None,
    };
    transmit_request(core, qpn, &t, req, psn, 1, 8);
}

/// Transmits a one-packet request taking `psns` PSNs from `psn` on, and records it outstanding.
/// A requester in a queue group sends it within the group's rates, as its SEND and WRITE
/// packets (`engine::pacing`); a request that must wait waits as for room at the peer's port.
pub(super) fn transmit_request(
    core: &mut Core,
    qpn: u32,
    t: &Transport,
    req: &Request,
    psn: u32,
    psns: u32,
    bytes: u32,
) {
    let paced = pacing::qp_is_paced(core, qpn, QpSide::Requester);
    let paused = room(core) == 0 || (paced && !pacing::qp_admits(core, qpn, QpSide::Requester));
    if !paused {
        let mut frame = std::mem::take(&mut core.rc_scratch.frame);
        if build_frame(core, qpn, t, &[], &mut frame) {
            crate::engine::sq::transmit(core, &frame);
            if paced {
                pacing::qp_charge(core, qpn, QpSide::Requester, frame.len());
            }
        }
        core.rc_scratch.frame = frame;
    }
    arm_ack_timer(core, qpn);
    let Some(qp) = core.res.qps.get_mut(qpn) else {
        return;
    };
    // Without room the request waits at the head of the QP's send queue.
    qp.req.sending = paused.then_some(Sending {
        index: req.index,
        first_psn: psn,
        next_packet: 0,
    });
    if req.resend_psn.is_some() {
        return;
    }
    {
        qp.next_send_psn = (psn + psns) & PSN_MASK;
        qp.req.outstanding.push_back(Outstanding {
            index: req.index,
            opcode: req.opcode,
            first_psn: psn,
            last_psn: (psn + psns - 1) & PSN_MASK,
            signaled: req.signaled,
            bytes,
            responses: 0,
        });
    }
}
