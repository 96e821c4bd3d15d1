//! The device's side of a rendezvous matched on a tag-matching XRQ (Documentation/
//! tag_matching.md in rdma-core; the completions libmlx5's `handle_tag_matching` and
//! `mlx5_cq_read_wc_flags` read): the match completes at once as CONSUMED; the device READs the
//! sender's buffer named by the RVH over the same QP (the TM-SRQ owns the QP's send side), lands
//! it in the tagged buffer, completes it as EXPECTED and sends the FIN back. The READ and the
//! FIN take the QP's PSNs and sit among its outstanding requests under opcodes of the model's
//! own ([`RNDV_READ`], [`RNDV_FIN`]): acknowledged, answered and sent again (go-back-N) as the
//! WQEs around them, but with no WQE and no send CQE.

use super::packet::{bth_opcode, build_frame, mtu_bytes, Transport, PSN_MASK};
use super::qp_error::post_cqe_as;
use super::responder_pace::room;
use super::tag_matching::{scatter_tag, xrq_mut, xrq_of};
use super::timer::arm_ack_timer;
use crate::function::Core;
use crate::objects::rc::Outstanding;
use crate::objects::tm::{Rendezvous, TmLanding};
use cxdirect_hw::cqe::{Cqe64, CqeOpcode, CqeSyndrome};
use cxdirect_hw::xrq::{cqe_app_op, tmh_op, CQE_APP_TAG_MATCHING, RVH_LEN, TMH_LEN};

/// Outstanding-entry opcode of the device's rendezvous READ (no WQE opcode: the model's own
/// marker, never written to a CQE).
pub(super) const RNDV_READ: u8 = 0xf1;
/// Outstanding-entry opcode of the device's FIN after a rendezvous READ.
pub(super) const RNDV_FIN: u8 = 0xf2;

/// True for the requests the device sends on its own (they have no WQE and no send CQE).
pub(super) fn is_device_op(op: u8) -> bool {
    op == RNDV_READ || op == RNDV_FIN
}

/// Writes a tag-matching CQE on the XRQ's CQ for QP `qpn`: RESP_SEND, `app_op`, entry
/// `index`, `tmh` (zero: none) and `bytes`.
fn post_tm_cqe(
    core: &mut Core,
    qpn: u32,
    xrqn: u32,
    app_op: u8,
    index: u16,
    tmh: &[u8],
    bytes: u32,
) {
    let Some(x) = core.res.rmps.get(xrqn).and_then(|r| r.xrq.as_deref()) else {
        return;
    };
    let (cqn, user_index) = (x.cqn, x.user_index);
    let mut cqe = [0u8; 64];
    cqe[..tmh.len().min(TMH_LEN)].copy_from_slice(&tmh[..tmh.len().min(TMH_LEN)]);
    if let Ok(mut c) = Cqe64::new(&mut cqe[..]) {
        c.set_opcode(CqeOpcode::RespSend as u8)
            .set_app(CQE_APP_TAG_MATCHING)
            .set_app_op(app_op)
            .set_app_info(index)
            .set_byte_cnt(bytes)
            .set_qpn(qpn);
    }
    post_cqe_as(core, qpn, cqn, user_index, &mut cqe);
}

/// Releases entry `index` of XRQ `xrqn`'s list.
fn release(core: &mut Core, xrqn: u32, index: u16) {
    if let Some(slot) = xrq_mut(core, xrqn)
        .and_then(|x| x.list.as_mut())
        .and_then(|l| l.entries.get_mut(usize::from(index)))
    {
        *slot = None;
    }
}

/// A rendezvous request `message` (its `headers`) matched entry `index` on QP `qpn`'s XRQ.
/// With room for the data, the match completes as CONSUMED (the TMH in the CQE) and the
/// device READs the RVH's `len` bytes at `va` through `rkey` from the sender on the same QP;
/// its landing completes as EXPECTED and a FIN (the headers again, operation FIN) goes back
/// to the sender. A buffer too small takes the request's headers and completes at once as
/// CONSUMED_MSG_SW_RNDV, software finishing the transfer (Documentation/tag_matching.md,
/// libmlx5's IBV_WC_TM_RNDV_INCOMPLETE).
pub(super) fn rendezvous(core: &mut Core, qpn: u32, landing: TmLanding, message: &[u8]) {
    let TmLanding::Rendezvous {
        index,
        entry,
        headers,
    } = landing
    else {
        return;
    };
    let Some(xrqn) = xrq_of(core, qpn) else {
        return;
    };
    let pd = core.res.rmps.get(xrqn).map_or(0, |r| r.wq.pd);
    let rvh = &headers[TMH_LEN..];
    let va = u64::from_be_bytes(rvh[..8].try_into().unwrap_or_default());
    let rkey = u32::from_be_bytes(rvh[8..12].try_into().unwrap_or_default());
    let len = u32::from_be_bytes(rvh[12..16].try_into().unwrap_or_default());
    if len > entry.len {
        let n = message.len().min(entry.len as usize);
        let _ = scatter_tag(core, &entry, pd, 0, &message[..n]);
        release(core, xrqn, index);
        let op = cqe_app_op::CONSUMED_MSG_SW_RNDV;
        post_tm_cqe(core, qpn, xrqn, op, index, &headers[..TMH_LEN], n as u32);
        return;
    }
    post_tm_cqe(
        core,
        qpn,
        xrqn,
        cqe_app_op::CONSUMED,
        index,
        &headers[..TMH_LEN],
        0,
    );
    let Some(qp) = core.res.qps.get(qpn) else {
        return;
    };
    let psn = qp.next_send_psn & PSN_MASK;
    let responses = (len as usize).div_ceil(mtu_bytes(qp.mtu)).max(1) as u32;
    let op = Rendezvous {
        first_psn: psn,
        xrqn,
        index,
        entry,
        headers,
        fin: false,
    };
    transmit(core, qpn, &op, va, rkey, len);
    record(core, qpn, op, RNDV_READ, responses, len);
}

/// Records device request `op` (`opcode`, taking `psns` PSNs) outstanding on QP `qpn`.
fn record(core: &mut Core, qpn: u32, op: Rendezvous, opcode: u8, psns: u32, bytes: u32) {
    let Some(qp) = core.res.qps.get_mut(qpn) else {
        return;
    };
    let outstanding: Vec<u32> = qp
        .req
        .outstanding
        .iter()
        .filter(|o| is_device_op(o.opcode))
        .map(|o| o.first_psn)
        .collect();
    qp.req
        .rendezvous
        .retain(|r| outstanding.contains(&r.first_psn));
    qp.req.rendezvous.push(op);
    qp.req.outstanding.push_back(Outstanding {
        index: op.index,
        opcode,
        first_psn: op.first_psn,
        last_psn: (op.first_psn + psns - 1) & PSN_MASK,
        signaled: false,
        bytes,
        responses: 0,
    });
    qp.next_send_psn = (op.first_psn + psns) & PSN_MASK;
    arm_ack_timer(core, qpn);
}

/// Puts device request `op` of QP `qpn` on the wire (the READ of `len` bytes at `va` through
/// `rkey`, or the FIN). Without room on the wire the packet is not sent: the ACK timer sends
/// it again, as a lost one.
fn transmit(core: &mut Core, qpn: u32, op: &Rendezvous, va: u64, rkey: u32, len: u32) {
    if room(core) == 0 {
        return;
    }
    let Some(qp) = core.res.qps.get(qpn) else {
        return;
    };
    let mut fin = op.headers;
    fin[0] = tmh_op::FIN;
    let t = Transport {
        opcode: if op.fin {
            bth_opcode::SEND_ONLY
        } else {
            bth_opcode::READ_REQUEST
        },
        dest_qpn: qp.remote_qpn,
        psn: op.first_psn,
        ack_req: true,
        solicited: false,
        xrceth: None,
        dceth: None,
        reth: (!op.fin).then_some((va, rkey, len)),
        aeth: None,
        imm: None,
        atomic: None,
        atomic_ack: None,
    };
    let payload: &[u8] = if op.fin { &fin } else { &[] };
    let mut frame = std::mem::take(&mut core.rc_scratch.frame);
    if build_frame(core, qpn, &t, payload, &mut frame) {
        crate::engine::sq::transmit(core, &frame);
    }
    core.rc_scratch.frame = frame;
}

/// The rendezvous READ of QP `qpn` under `first_psn`.
fn read_of(core: &Core, qpn: u32, first_psn: u32) -> Option<Rendezvous> {
    core.res
        .qps
        .get(qpn)?
        .req
        .rendezvous
        .iter()
        .find(|r| r.first_psn == first_psn && !r.fin)
        .copied()
}

/// Lands READ response `data` at byte `offset` of the rendezvous READ under `first_psn`.
pub(super) fn land(
    core: &Core,
    qpn: u32,
    first_psn: u32,
    offset: usize,
    data: &[u8],
) -> Result<(), CqeSyndrome> {
    let r = read_of(core, qpn, first_psn).ok_or(CqeSyndrome::LocalQpOperation)?;
    let pd = core.res.rmps.get(r.xrqn).map_or(0, |x| x.wq.pd);
    let at = u32::try_from(offset).map_err(|_| CqeSyndrome::LocalLength)?;
    scatter_tag(core, &r.entry, pd, at, data)
}

/// The rendezvous READ under `first_psn` landed whole: the tag completes as EXPECTED (no TMH
/// in the CQE, libmlx5 reading the tag's second completion) and is released, and the FIN
/// goes to the sender.
pub(super) fn read_done(core: &mut Core, qpn: u32, first_psn: u32, bytes: u32) {
    let Some(r) = read_of(core, qpn, first_psn) else {
        return;
    };
    release(core, r.xrqn, r.index);
    post_tm_cqe(core, qpn, r.xrqn, cqe_app_op::EXPECTED, r.index, &[], bytes);
    let Some(psn) = core.res.qps.get(qpn).map(|qp| qp.next_send_psn & PSN_MASK) else {
        return;
    };
    let fin = Rendezvous {
        first_psn: psn,
        fin: true,
        ..r
    };
    transmit(core, qpn, &fin, 0, 0, 0);
    record(core, qpn, fin, RNDV_FIN, 1, (TMH_LEN + RVH_LEN) as u32);
}

/// Sends device request `o` of QP `qpn` again (go-back-N).
pub(super) fn resend(core: &mut Core, qpn: u32, o: &Outstanding) {
    let Some(r) = core.res.qps.get(qpn).and_then(|qp| {
        qp.req
            .rendezvous
            .iter()
            .find(|r| r.first_psn == o.first_psn)
            .copied()
    }) else {
        return;
    };
    let rvh = &r.headers[TMH_LEN..];
    let va = u64::from_be_bytes(rvh[..8].try_into().unwrap_or_default());
    let rkey = u32::from_be_bytes(rvh[8..12].try_into().unwrap_or_default());
    transmit(core, qpn, &r, va, rkey, o.bytes);
}

/// Device request `opcode` (tag entry `index`) of QP `qpn` failed or was flushed with the QP:
/// a READ's tag completes as MSG_COMPLETION_CANCELED (libmlx5 reports
/// IBV_WC_TM_RNDV_INCOMPLETE, software finishing the transfer; what the device writes then is
/// not public: the model's choice) and is released; a FIN is dropped.
pub(super) fn failed(core: &mut Core, qpn: u32, index: u16, opcode: u8) {
    let Some(qp) = core.res.qps.get_mut(qpn) else {
        return;
    };
    let Some(at) = qp
        .req
        .rendezvous
        .iter()
        .position(|r| r.index == index && r.fin == (opcode == RNDV_FIN))
    else {
        return;
    };
    let r = qp.req.rendezvous.remove(at);
    if r.fin {
        return;
    }
    release(core, r.xrqn, r.index);
    let op = cqe_app_op::MSG_COMPLETION_CANCELED;
    post_tm_cqe(core, qpn, r.xrqn, op, r.index, &r.headers[..TMH_LEN], 0);
}
