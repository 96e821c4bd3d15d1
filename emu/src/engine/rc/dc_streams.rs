//! DC initiator streams (DCI streams) in the requester: each WQE of a DCI with streams names
//! one in its control segment (`dci_stream_channel_id`, libmlx5's
//! `mlx5_send_wr_set_dc_addr_stream`).
//!
//! The model carries a DCI's streams in posting order on its one connection at a time (a
//! ConnectX may interleave streams; what it keeps is each stream's order, which posting order
//! keeps too, and completions in posting order, which libmlx5's send CQ needs). What the
//! streams change is the error behaviour of mlx5dv_dci_stream_id_reset(3):
//!
//! - a responder's refusal of a WQE (a remote access, remote invalid request or remote
//!   operational error NAK) is an error of that WQE's stream: the WQE completes in error, the
//!   DCI stays in RTS, and the WQEs sent after it on the same connection are sent again on a
//!   new connection (the responder dropped them after its NAK);
//! - each WQE of a stream in error completes flushed, in posting order (after the WQEs before
//!   it complete), until RTS2RTS_QP resets the stream (`fw::dci`);
//! - once `2^log_num_dci_errored_streams` streams are in error, the DCI goes to error as an
//!   ordinary DCI does on any error.
//!
//! Which errors a ConnectX counts against a stream is not public; the model counts only the
//! responder's refusals. The DCI's own errors (a malformed WQE, a stream past its channels, a
//! local protection or length error, retries exhausted) move it to error as on an ordinary
//! DCI. A DCI without streams ignores the control segment's stream field.

use super::completion::{is_local, report_failure};
use super::send_ring::read_bb;
use crate::function::Core;
use crate::objects::rc::Outstanding;
use cxdirect_hw::cqe::CqeSyndrome;
use cxdirect_hw::wqe::{CtrlSeg, WQE_BB};

/// What a DCI's new (not retransmitted) WQE may do by its stream.
pub(super) enum Gate {
    /// Go (a DCI without streams, or a stream not in error).
    Go,
    /// Its stream is in error and WQEs before it are outstanding: wait for them, so that its
    /// flush completion follows theirs.
    Wait,
    /// Its stream is in error: complete it flushed now.
    Flush,
    /// Not one of the DCI's streams: a malformed WQE.
    Bad,
}

/// The gate of DCI `qpn`'s new WQE on `stream`.
pub(super) fn gate(core: &Core, qpn: u32, stream: u16) -> Gate {
    let Some(qp) = core.res.qps.get(qpn) else {
        return Gate::Go;
    };
    let Some(streams) = qp.dci_streams else {
        return Gate::Go;
    };
    if !streams.has(stream) {
        return Gate::Bad;
    }
    if !streams.is_errored(stream) {
        return Gate::Go;
    }
    if qp.req.outstanding.is_empty() && qp.req.sending.is_none() {
        Gate::Flush
    } else {
        Gate::Wait
    }
}

/// The responder refused DCI `qpn`'s WQE `failed` (taken off the outstanding ones) with
/// `syndrome`. For a DCI with streams below its limit of errored streams, this is that
/// stream's error: the WQE completes in error, the stream is in error, and the WQEs
/// outstanding after it are rewound to go again on a new connection, which the caller sends
/// by resuming the requester; returns true. Returns false where the
/// caller fails the whole QP: no streams, the limit reached (the stream is counted first),
/// or outstanding work that cannot be sent again (a local operation, a page fault pending).
pub(super) fn stream_failed(
    core: &mut Core,
    qpn: u32,
    failed: &Outstanding,
    syndrome: CqeSyndrome,
) -> bool {
    let Some(qp) = core.res.qps.get(qpn) else {
        return false;
    };
    if qp.dci_streams.is_none()
        || qp.req.page_fault.is_some()
        || qp.req.outstanding.iter().any(|o| is_local(o.opcode))
    {
        return false;
    }
    let Some(stream) = stream_of(core, qpn, failed.index) else {
        return false;
    };
    let Some(streams) = core
        .res
        .qps
        .get_mut(qpn)
        .and_then(|qp| qp.dci_streams.as_mut())
    else {
        return false;
    };
    if !streams.has(stream) {
        return false;
    }
    streams.errored |= 1u32 << stream;
    if streams.at_limit() {
        return false;
    }
    report_failure(core, qpn, failed.index, failed.opcode, syndrome);
    rewind(core, qpn);
    true
}

/// The stream WQE `index` of DCI `qpn` names (`None` when its control segment cannot be read).
fn stream_of(core: &Core, qpn: u32, index: u16) -> Option<u16> {
    let mut bb = [0u8; WQE_BB];
    read_bb(core, qpn, index, &mut bb).ok()?;
    CtrlSeg::new(&bb[..16])
        .ok()
        .map(|c| c.dci_stream_channel_id())
}

/// Takes back every WQE DCI `qpn` has outstanding (or half sent): the send ring goes back to
/// the first, and the next WQE begins a new connection, at the next PSN.
fn rewind(core: &mut Core, qpn: u32) {
    let Some(qp) = core.res.qps.get_mut(qpn) else {
        return;
    };
    let first = qp
        .req
        .outstanding
        .front()
        .map(|o| o.index)
        .or(qp.req.sending.map(|s| s.index));
    qp.req.outstanding.clear();
    qp.req.sending = None;
    qp.req.ack_deadline = None;
    qp.req.rnr_until = None;
    if let Some(first) = first {
        qp.sq_consumed = first;
    }
    qp.dci = None;
}
