//! DC initiator streams (DCI streams) in the requester: each WQE of a DCI with streams names
//! one in its control segment (`dci_stream_channel_id`, libmlx5's
//! `mlx5_send_wr_set_dc_addr_stream`), any 16-bit identifier: rdma-core's
//! `test_dc_rdma_write_stream` cycles identifiers past the DCI's channel count and expects
//! every WQE to complete.
//!
//! The model carries a DCI's streams in posting order on its one connection at a time (a
//! ConnectX may interleave streams; what it keeps is each stream's order, which posting order
//! keeps too, and completions in posting order, which libmlx5's send CQ needs). What the
//! streams change is the error behaviour of mlx5dv_dci_stream_id_reset(3):
//!
//! - an error of a WQE's own stream leaves the DCI in RTS: the WQE completes in error and
//!   its stream is in error. Stream errors are the responder's refusals (a remote access,
//!   remote invalid request or remote operational error NAK: the WQEs sent after it on the
//!   same connection are sent again on a new connection, the responder having dropped them
//!   after its NAK) and the WQE's own buffers failing their keys (a local protection or
//!   length error: rdma-core's `test_dc_send_stream_bad_flow_qp` moves the sender's region to
//!   another PD and counts one local protection error per stream, `bad_flow_handler_qp`);
//! - each WQE of a stream in error completes flushed, in posting order (after the WQEs before
//!   it complete), until RTS2RTS_QP resets the stream (`fw::dci`);
//! - once `2^log_num_dci_errored_streams` distinct streams are in error, the DCI goes to
//!   error as an ordinary DCI does on any error: the WQE that reached the limit completes with
//!   its error, every later one flushed (the count the test checks when it sees the flush).
//!
//! The DCI's other errors (a malformed WQE, retries exhausted, a page fault resumed with an
//! error) move it to error as on an ordinary DCI. A DCI without streams ignores the control
//! segment's stream field.

use super::completion::{is_local, report_failure};
use super::send_ring::read_bb;
use crate::function::Core;
use crate::objects::dc::DciStreams;
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
}

/// The gate of DCI `qpn`'s new WQE on `stream`.
pub(super) fn gate(core: &Core, qpn: u32, stream: u16) -> Gate {
    let Some(qp) = core.res.qps.get(qpn) else {
        return Gate::Go;
    };
    let Some(streams) = qp.dci_streams else {
        return Gate::Go;
    };
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
    let Some(streams) = streams_mut(core, qpn) else {
        return false;
    };
    streams.mark_errored(stream);
    if streams.at_limit() {
        return false;
    }
    report_failure(core, qpn, failed.index, failed.opcode, syndrome);
    rewind(core, qpn);
    true
}

/// What became of a DCI's WQE that failed locally ([`local_failure`]).
pub(super) enum Local {
    /// Not a stream's error: the caller fails the QP.
    NotStream,
    /// A stream's error behind WQEs still outstanding: the WQE waits, unconsumed, and fails
    /// again when they have completed, so that its completion follows theirs.
    Wait,
    /// Its stream is in error and the WQE completed with `syndrome`; the DCI goes on.
    Failed,
}

/// WQE `index` (opcode `opcode`) of DCI `qpn` failed before anything of it was sent, with
/// `syndrome`: a local protection or length error of its own buffers is its stream's error
/// (see the module); counted against the DCI's limit first, a WQE reaching it fails the DCI
/// (`Local::NotStream`).
pub(super) fn local_failure(
    core: &mut Core,
    qpn: u32,
    index: u16,
    opcode: u8,
    syndrome: CqeSyndrome,
) -> Local {
    if !matches!(
        syndrome,
        CqeSyndrome::LocalProtection | CqeSyndrome::LocalLength
    ) {
        return Local::NotStream;
    }
    let Some(qp) = core.res.qps.get(qpn) else {
        return Local::NotStream;
    };
    if qp.dci_streams.is_none() || qp.req.page_fault.is_some() {
        return Local::NotStream;
    }
    if !qp.req.outstanding.is_empty() || qp.req.sending.is_some() {
        return Local::Wait;
    }
    let Some(stream) = stream_of(core, qpn, index) else {
        return Local::NotStream;
    };
    let Some(streams) = streams_mut(core, qpn) else {
        return Local::NotStream;
    };
    streams.mark_errored(stream);
    if streams.at_limit() {
        return Local::NotStream;
    }
    report_failure(core, qpn, index, opcode, syndrome);
    Local::Failed
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

/// DCI `qpn`'s streams, if it has them.
fn streams_mut(core: &mut Core, qpn: u32) -> Option<&mut DciStreams> {
    core.res
        .qps
        .get_mut(qpn)
        .and_then(|qp| qp.dci_streams.as_mut())
}
