//! The RC requester's send side: on a send doorbell for an RC QP, fetch each new WQE from the
//! QP's send ring, gather its message (data segments through memory keys, or inline bytes),
//! and cut it into packets of at most the path MTU (FIRST/MIDDLE/LAST/ONLY), sent only while
//! the peer's port has room (the rest continued on later device passes); a READ or an
//! atomic goes as one request packet with the PSNs of its responses reserved.

use super::packet::{bth_opcode, build_frame, mtu_bytes, Transport, PSN_MASK};
use super::qp_error::enter_error;
use super::requester_ack::{complete_local, expects_response, fail_in_order, flush};
use super::responder_pace::room;
use super::retransmit::arm_ack_timer;
use crate::counters::add;
use crate::function::Core;
use crate::objects::limits::LOG_MAX_RA_QP;
use crate::objects::queue_state::RcScratch;
use crate::objects::rc::{Outstanding, Sending};
use crate::Fault;
use cxdirect_hw::cqe::CqeSyndrome;
use cxdirect_hw::eqe::EventType;
use cxdirect_hw::qp::{service_type, state};
use cxdirect_hw::wqe::{
    self, opcode, AtomicSeg, CtrlSeg, DataSeg, RaddrSeg, INLINE_SEG, WQE_BB, WQE_DS,
};

/// What the requester knows of a WQE it is sending.
struct Request {
    opcode: u8,
    index: u16,
    bbs: u16,
    imm: u32,
    solicited: bool,
    signaled: bool,
    remote: Option<(u64, u32)>,
    /// A retransmission from this PSN (the WQE is already outstanding).
    resend_psn: Option<u32>,
    /// The packet of the message to send first (0, or where the wire had no room before).
    from_packet: u32,
}

/// Send doorbell for RC QP `qpn` on UAR `uar`: executes every WQE posted since the last one.
pub(crate) fn doorbell(core: &mut Core, uar: u32, qpn: u32) {
    let Some(qp) = core.res.qps.get(qpn) else {
        add(&core.counters.bad_doorbells, 1);
        return;
    };
    if qp.log_sq_size.is_none() || qp.uar != uar {
        add(&core.counters.bad_doorbells, 1);
        return;
    }
    if qp.state == state::ERR {
        flush(core, qpn);
        return;
    }
    if qp.state != state::RTS {
        add(&core.counters.bad_doorbells, 1);
        return;
    }
    if core
        .faults
        .take(|f| matches!(f, Fault::RcQpFatal { qpn: q } if *q == qpn).then_some(()))
        .is_some()
    {
        enter_error(core, qpn, Some(EventType::WqCatastrophicError));
        flush(core, qpn);
        return;
    }
    run_posted(core, qpn);
}

/// Executes the WQEs posted on RC QP `qpn` in RTS since the last one executed, stopping at a
/// READ or atomic while `2^log_sra_max` of those wait for their responses, and at a WQE the
/// wire had no room for (continued by [`continue_sending`]).
fn run_posted(core: &mut Core, qpn: u32) {
    let Some(qp) = core.res.qps.get(qpn) else {
        return;
    };
    let (Some(log_sq), true) = (qp.log_sq_size, qp.state == state::RTS) else {
        return;
    };
    if qp.req.sending.is_some() {
        return;
    }
    let Ok(word) = core.dma_read_be32(qp.dbr + 4) else {
        return;
    };
    let pi = word as u16;
    let entries = 1u32 << log_sq;
    if u32::from(pi.wrapping_sub(qp.sq_consumed)) > entries {
        add(&core.counters.bad_doorbells, 1);
        return;
    }
    let mut scratch = std::mem::take(&mut core.rc_scratch);
    while let Some(qp) = core.res.qps.get(qpn) {
        let index = qp.sq_consumed;
        if index == pi || qp.state != state::RTS {
            break;
        }
        // A WQE whose `ds` runs past the producer index was never wholly posted: it fails as
        // malformed instead of running WQEBBs the driver has not written.
        let outcome = match wqe_head(core, qpn, index) {
            Some((op, ds)) if wqe::wqebbs(ds) > usize::from(pi.wrapping_sub(index)) => {
                Err((op, CqeSyndrome::LocalQpOperation))
            }
            _ => execute(core, qpn, index, None, &mut scratch),
        };
        match outcome {
            Ok(Some(bbs)) => {
                let Some(qp) = core.res.qps.get_mut(qpn) else {
                    break;
                };
                qp.sq_consumed = index.wrapping_add(bbs);
                if qp.req.sending.is_some() {
                    break;
                }
            }
            // Resumed when a response retires one of the READs or atomics outstanding.
            Ok(None) => break,
            Err((opcode, syndrome)) => {
                let bbs = wqe_span(core, qpn, index, pi);
                if let Some(qp) = core.res.qps.get_mut(qpn) {
                    qp.sq_consumed = index.wrapping_add(bbs);
                }
                fail_in_order(core, qpn, index, opcode, syndrome);
                break;
            }
        }
    }
    core.rc_scratch = scratch;
}

/// A READ or atomic of QP `qpn` completed: WQEs held back by the limit on outstanding ones
/// go now.
pub(super) fn resume(core: &mut Core, qpn: u32) {
    run_posted(core, qpn);
}

/// Sends again, from their first packets, the outstanding WQEs of QP `qpn` from the `n`th on
/// (go-back-N), stopping where the wire has no room; returns whether all went. Counted as
/// retransmissions.
pub(super) fn resend_from(core: &mut Core, qpn: u32, mut n: usize) -> bool {
    let mut scratch = std::mem::take(&mut core.rc_scratch);
    let mut all = true;
    while let Some(o) = core
        .res
        .qps
        .get(qpn)
        .and_then(|qp| qp.req.outstanding.get(n).copied())
    {
        if o.opcode == opcode::UMR {
            // A local operation took effect once; only its completion waits.
            n += 1;
            continue;
        }
        add(&core.counters.roce_retransmits, 1);
        if let Err((opcode, syndrome)) =
            execute(core, qpn, o.index, Some(o.first_psn), &mut scratch)
        {
            fail_in_order(core, qpn, o.index, opcode, syndrome);
            all = false;
            break;
        }
        if core
            .res
            .qps
            .get(qpn)
            .is_none_or(|qp| qp.req.sending.is_some())
        {
            all = false;
            break;
        }
        n += 1;
    }
    core.rc_scratch = scratch;
    all
}

/// Continues every RC QP's WQE the wire had no room for, in PSN order: the rest of its
/// packets as far as the wire takes them, then (once it is all sent) the outstanding WQEs
/// after it that a go-back-N retransmission still owes, then the WQEs posted behind it.
/// Returns whether anything went out.
pub(crate) fn continue_sending(core: &mut Core) -> bool {
    let mut sent = false;
    let mut after = None;
    loop {
        let next = core.res.qps.iter().find_map(|(qpn, qp)| {
            (after.is_none_or(|a| qpn > a) && qp.req.sending.is_some()).then_some(qpn)
        });
        let Some(qpn) = next else {
            return sent;
        };
        after = Some(qpn);
        let Some(qp) = core.res.qps.get_mut(qpn) else {
            continue;
        };
        let Some(at) = qp.req.sending.take() else {
            continue;
        };
        if qp.state != state::RTS {
            continue;
        }
        let position = qp.req.outstanding.iter().position(|o| o.index == at.index);
        let Some(position) = position else {
            continue;
        };
        if room(core) == 0 {
            if let Some(qp) = core.res.qps.get_mut(qpn) {
                qp.req.sending = Some(at);
            }
            continue;
        }
        sent = true;
        let mut scratch = std::mem::take(&mut core.rc_scratch);
        let outcome = execute_from(
            core,
            qpn,
            at.index,
            Some(at.first_psn),
            at.next_packet,
            &mut scratch,
        );
        core.rc_scratch = scratch;
        if let Err((opcode, syndrome)) = outcome {
            fail_in_order(core, qpn, at.index, opcode, syndrome);
            continue;
        }
        let paused = core
            .res
            .qps
            .get(qpn)
            .is_none_or(|qp| qp.req.sending.is_some());
        if !paused && resend_from(core, qpn, position + 1) {
            run_posted(core, qpn);
        }
    }
}

/// Whether any RC QP waits for room on the wire to send a WQE's packets.
pub(crate) fn any_sending(core: &Core) -> bool {
    core.res.qps.iter().any(|(_, qp)| qp.req.sending.is_some())
}

/// Whether a WQE of fence mode `fm` waits for every earlier READ and atomic to complete (the
/// PRM's fence, strong ordering, and small-and-fence modes; the initiator small fence orders
/// only local memory operations, which this model runs in order anyway).
fn fenced(fm: u8) -> bool {
    matches!(
        fm,
        wqe::fence_mode::FENCE
            | wqe::fence_mode::STRONG_ORDERING
            | wqe::fence_mode::SMALL_AND_FENCE
    )
}

/// Whether QP `qpn` has any READ or atomic still awaiting its response.
fn awaiting_responses(core: &Core, qpn: u32) -> bool {
    core.res.qps.get(qpn).is_some_and(|qp| {
        qp.req
            .outstanding
            .iter()
            .any(|o| expects_response(o.opcode))
    })
}

/// Whether QP `qpn` has as many READs and atomics awaiting responses as `log_sra_max` allows.
fn at_read_limit(core: &Core, qpn: u32) -> bool {
    core.res.qps.get(qpn).is_none_or(|qp| {
        let waiting = qp
            .req
            .outstanding
            .iter()
            .filter(|o| expects_response(o.opcode))
            .count();
        waiting >= 1 << qp.log_sra_max.min(LOG_MAX_RA_QP)
    })
}

/// The opcode and `ds` of the WQE at `index`, from its control segment; `None` when that
/// cannot be read.
fn wqe_head(core: &Core, qpn: u32, index: u16) -> Option<(u8, usize)> {
    let mut bb = [0u8; WQE_BB];
    read_bb(core, qpn, index, &mut bb).ok()?;
    let ctrl = CtrlSeg::new(&bb[..16]).ok()?;
    Some((ctrl.opcode(), usize::from(ctrl.ds())))
}

/// WQEBBs the WQE at `index` takes by its control segment's `ds` (1 when that cannot be
/// read), ending no later than the producer index `pi`.
fn wqe_span(core: &Core, qpn: u32, index: u16, pi: u16) -> u16 {
    let ds = wqe_head(core, qpn, index).map_or(0, |(_, ds)| ds);
    span(ds, index, pi)
}

/// WQEBBs of a WQE of `ds` 16-byte units at `index`: at least 1, and no further than the
/// producer index `pi` (a malformed `ds` never skips past what was posted).
pub(super) fn span(ds: usize, index: u16, pi: u16) -> u16 {
    let bbs = u16::try_from(wqe::wqebbs(ds)).unwrap_or(u16::MAX);
    bbs.clamp(1, pi.wrapping_sub(index).max(1))
}

/// Reads WQEBB `bb` of QP `qpn`'s send ring into `out` (one WQEBB).
pub(super) fn read_bb(core: &Core, qpn: u32, bb: u16, out: &mut [u8]) -> Result<(), ()> {
    let qp = core.res.qps.get(qpn).ok_or(())?;
    let log_sq = qp.log_sq_size.ok_or(())?;
    let slot = u64::from(bb) & ((1u64 << log_sq) - 1);
    let offset = qp.receive.ring_bytes() + slot * WQE_BB as u64;
    let addr = qp.buf.addr(offset).ok_or(())?;
    core.dma_read(addr, out).map_err(|_| ())
}

type WqeError = (u8, CqeSyndrome);

/// Executes the WQE at `index`; returns its WQEBBs, or `None` for a new READ or atomic held
/// back by the limit on outstanding ones, or a fenced WQE held back until the READs and
/// atomics before it complete (a retransmission, `resend_psn`, never is). Packets the wire
/// has no room for are left to [`continue_sending`] (the QP's `req.sending`).
pub(super) fn execute(
    core: &mut Core,
    qpn: u32,
    index: u16,
    resend_psn: Option<u32>,
    s: &mut RcScratch,
) -> Result<Option<u16>, WqeError> {
    execute_from(core, qpn, index, resend_psn, 0, s)
}

/// [`execute`] from packet `from_packet` of the message on (the earlier ones were sent).
fn execute_from(
    core: &mut Core,
    qpn: u32,
    index: u16,
    resend_psn: Option<u32>,
    from_packet: u32,
    s: &mut RcScratch,
) -> Result<Option<u16>, WqeError> {
    s.wqe.resize(WQE_BB, 0);
    read_bb(core, qpn, index, &mut s.wqe[..WQE_BB])
        .map_err(|_| (0, CqeSyndrome::LocalProtection))?;
    let ctrl = CtrlSeg::new(&s.wqe[..16]).map_err(|_| (0, CqeSyndrome::LocalQpOperation))?;
    let (op, ds) = (ctrl.opcode(), usize::from(ctrl.ds()));
    let (imm, solicited, fence) = (ctrl.imm(), ctrl.se(), fenced(ctrl.fm()));
    let ctrl_imm = imm;
    let signaled = ctrl.ce() >= wqe::completion::ALWAYS;
    let (ctrl_qpn, ctrl_index) = (ctrl.qpn_or_sqn(), ctrl.wqe_index());
    let bad = (op, CqeSyndrome::LocalQpOperation);
    if ds == 0 || ctrl_qpn != qpn || ctrl_index != index {
        return Err(bad);
    }
    let bbs = wqe::wqebbs(ds) as u16;
    s.wqe.resize(usize::from(bbs) * WQE_BB, 0);
    for i in 1..bbs {
        let range = usize::from(i) * WQE_BB..usize::from(i + 1) * WQE_BB;
        read_bb(core, qpn, index.wrapping_add(i), &mut s.wqe[range])
            .map_err(|_| (op, CqeSyndrome::LocalProtection))?;
    }
    let mut req = Request {
        opcode: op,
        index,
        bbs,
        imm,
        solicited,
        signaled,
        remote: None,
        resend_psn,
        from_packet,
    };
    if resend_psn.is_none()
        && ((expects_response(op) && at_read_limit(core, qpn))
            || (fence && awaiting_responses(core, qpn)))
    {
        return Ok(None);
    }
    let Some(service) = core.res.qps.get(qpn).map(|qp| qp.service) else {
        return Err(bad);
    };
    if op == opcode::UMR {
        // A local operation, in order with the rest: the key changes now, the completion
        // waits for the WQEs before it.
        let poster = crate::engine::umr::Poster {
            pd: core.res.qps.get(qpn).map_or(0, |qp| qp.pd),
            privileged: service == service_type::REG_UMR,
        };
        crate::engine::umr::execute(core, poster, &s.wqe[..ds * WQE_DS], ctrl_imm)
            .map_err(|syn| (op, syn))?;
        complete_local(core, qpn, index, op, signaled);
        return Ok(Some(req.bbs));
    }
    if service != service_type::RC {
        // The REG_UMR QP carries UMR WQEs only.
        return Err(bad);
    }
    let mut at = WQE_DS;
    match op {
        opcode::SEND | opcode::SEND_IMM | opcode::SEND_INVAL => {}
        opcode::RDMA_WRITE | opcode::RDMA_WRITE_IMM => {
            if ds < 2 {
                return Err(bad);
            }
            let raddr = RaddrSeg::new(&s.wqe[at..at + WQE_DS]).map_err(|_| bad)?;
            req.remote = Some((raddr.raddr(), raddr.rkey()));
            at += WQE_DS;
        }
        opcode::RDMA_READ => {
            if ds < 2 {
                return Err(bad);
            }
            let raddr = RaddrSeg::new(&s.wqe[at..at + WQE_DS]).map_err(|_| bad)?;
            let (va, rkey) = (raddr.raddr(), raddr.rkey());
            let bytes = local_bytes(&s.wqe[..ds * WQE_DS], at + WQE_DS).ok_or(bad)?;
            send_read(core, qpn, &req, va, rkey, bytes);
            return Ok(Some(req.bbs));
        }
        opcode::ATOMIC_CS | opcode::ATOMIC_FA => {
            if ds < 4 {
                return Err(bad);
            }
            let raddr = RaddrSeg::new(&s.wqe[at..at + WQE_DS]).map_err(|_| bad)?;
            let atomic = AtomicSeg::new(&s.wqe[at + WQE_DS..at + 2 * WQE_DS]).map_err(|_| bad)?;
            let bytes = local_bytes(&s.wqe[..ds * WQE_DS], at + 2 * WQE_DS).ok_or(bad)?;
            if bytes != 8 {
                return Err((op, CqeSyndrome::LocalLength));
            }
            let eth = (
                raddr.raddr(),
                raddr.rkey(),
                atomic.swap_add(),
                atomic.compare(),
            );
            send_atomic(core, qpn, &req, eth);
            return Ok(Some(req.bbs));
        }
        _ => return Err(bad),
    }
    gather(core, qpn, &s.wqe[..ds * WQE_DS], at, &mut s.message).map_err(|syn| (op, syn))?;
    send_message(core, qpn, &req, s);
    Ok(Some(req.bbs))
}

/// Gathers the message of the data and inline segments of `wqe` from byte `at` on, through
/// the keys of QP `qpn`'s protection domain and up to its `log_msg_max`.
fn gather(
    core: &Core,
    qpn: u32,
    wqe: &[u8],
    at: usize,
    message: &mut Vec<u8>,
) -> Result<(), CqeSyndrome> {
    let qp = core.res.qps.get(qpn).ok_or(CqeSyndrome::LocalQpOperation)?;
    let max = 1usize << qp.log_msg_max.min(31);
    crate::engine::gather::gather(core, qp.pd, max, wqe, at, message)
}

/// Cuts the gathered message into packets and transmits them.
fn send_message(core: &mut Core, qpn: u32, req: &Request, s: &mut RcScratch) {
    let Some(qp) = core.res.qps.get(qpn) else {
        return;
    };
    let mtu = mtu_bytes(qp.mtu);
    let dest_qpn = qp.remote_qpn;
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
    psn = (psn + req.from_packet) & PSN_MASK;
    for n in req.from_packet as usize..packets {
        if room(core) == 0 {
            // The rest waits for room at the peer's port; later device passes continue it.
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
            opcode: bth,
            dest_qpn,
            psn,
            ack_req: last,
            solicited: last && req.solicited,
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
        }
        s.frame = frame;
        psn = (psn + 1) & PSN_MASK;
    }
    arm_ack_timer(core, qpn);
    let Some(qp) = core.res.qps.get_mut(qpn) else {
        return;
    };
    qp.req.sending = paused;
    if req.resend_psn.is_some() {
        return;
    }
    {
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
}

/// Bytes of the local data segments of `wqe` from byte `at` on (where a READ or atomic
/// response lands); `None` for an inline segment there.
fn local_bytes(wqe: &[u8], mut at: usize) -> Option<u32> {
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
fn send_read(core: &mut Core, qpn: u32, req: &Request, va: u64, rkey: u32, bytes: u32) {
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
        reth: Some((va, rkey, bytes)),
        aeth: None,
        imm: None,
        atomic: None,
        atomic_ack: None,
    };
    transmit_request(core, qpn, &t, req, psn, responses, bytes);
}

/// Sends the atomic request of `req` (AtomicETH `eth`).
fn send_atomic(core: &mut Core, qpn: u32, req: &Request, eth: (u64, u32, u64, u64)) {
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
        reth: None,
        aeth: None,
        imm: None,
        atomic: Some(eth),
        atomic_ack: None,
    };
    transmit_request(core, qpn, &t, req, psn, 1, 8);
}

/// Transmits a one-packet request taking `psns` PSNs from `psn` on, and records it outstanding.
fn transmit_request(
    core: &mut Core,
    qpn: u32,
    t: &Transport,
    req: &Request,
    psn: u32,
    psns: u32,
    bytes: u32,
) {
    let paused = room(core) == 0;
    if !paused {
        let mut frame = std::mem::take(&mut core.rc_scratch.frame);
        if build_frame(core, qpn, t, &[], &mut frame) {
            crate::engine::sq::transmit(core, &frame);
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
