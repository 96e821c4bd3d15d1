//! The UD send side: on a send doorbell for a UD or GSI QP in RTS, each WQE posted since the
//! last one is one datagram. The WQE is a control segment, a datagram segment (the address
//! vector: Linux mlx5_ib `wr.c` `handle_qpt_ud`/`handle_qpt_hw_gsi` and libmlx5 `qp.c`
//! `mlx5_post_send` both write it with `set_datagram_seg`), then data or inline segments.
//!
//! The packet: Ethernet to the vector's `rmac`, IPv4 when its `rgid` is IPv4-mapped (else
//! IPv6) from the RoCE address table entry `sgid_index` to `rgid`, with the vector's traffic
//! class, hop limit, flow label and UDP source port; BTH `SEND_ONLY` (0x64) or
//! `SEND_ONLY_WITH_IMMEDIATE` (0x65) to the vector's QP with P_Key 0xffff; a DETH with the
//! WQE's Q_Key (the QP's own when its bit 31 is set, IBA 10.2.5) and the source QP (1 for
//! QP1); the immediate; the payload; the ICRC. A signalled WQE then completes on the send
//! CQ. A WQE that cannot be sent (malformed, a key that does not cover its data, a datagram
//! above the path MTU) completes in error and puts the send queue in the send queue error
//! state (IBA 10.3.1 for UD): the WQEs after it are flushed, receives go on. A page not
//! present behind a data segment's key stops the send queue at its WQE as a page fault
//! ([`super::page_fault`]) where the function reports them.

use super::completion::{flush_sends, post_cqe, post_error_cqe, read_bb, span, Side};
use super::{DETH_LEN, UD_SEND_ONLY, UD_SEND_ONLY_IMM};
use crate::counters::add;
use crate::engine::gather::GatherFault;
use crate::engine::roce::{
    build_routed, mtu_bytes, source, Route, Transport, BTH_LEN, ICRC_LEN, PSN_MASK,
};
use crate::engine::send_counter::posted;
use crate::function::Core;
use crate::objects::queue_state::UdScratch;
use cxdirect_hw::cqe::{Cqe64, CqeOpcode, CqeSyndrome};
use cxdirect_hw::qp::{service_type, state};
use cxdirect_hw::wqe::{self, opcode, CtrlSeg, DatagramSeg, QKEY_FROM_QP, WQE_BB, WQE_DS};

/// Bytes of the datagram segment.
const AV_LEN: usize = 48;
/// UDP source port used when the address vector gives none (the bottom of the RoCE range).
const DEFAULT_UDP_SPORT: u16 = 0xc000;
/// Bytes of a RoCE v2 UD packet around its payload on an Ethernet port: Ethernet, IPv6 (the
/// larger), UDP, BTH, DETH, immediate and ICRC.
const UD_OVERHEAD: usize = 14 + 40 + 8 + BTH_LEN + DETH_LEN + 4 + ICRC_LEN;

/// Send doorbell for datagram QP `qpn` on UAR `uar`: executes every WQE posted since the last
/// one (a QP in error, or whose send queue is, flushes them instead).
pub(crate) fn doorbell(core: &mut Core, uar: u32, qpn: u32) {
    let Some(qp) = core.res.ud_qps.get(qpn) else {
        add(&core.counters.bad_doorbells, 1);
        return;
    };
    if qp.log_sq_size.is_none() || qp.uar != uar {
        add(&core.counters.bad_doorbells, 1);
        return;
    }
    match qp.state {
        state::RTS => run_posted(core, qpn),
        state::ERR | state::SQER => flush_sends(core, qpn),
        _ => add(&core.counters.bad_doorbells, 1),
    }
}

/// A WQE that failed: its opcode and the syndrome of its error CQE.
type WqeError = (u8, CqeSyndrome);

/// Executes the WQEs posted on QP `qpn` since the last one, in order.
fn run_posted(core: &mut Core, qpn: u32) {
    let Some(qp) = core.res.ud_qps.get(qpn) else {
        return;
    };
    let Some(log_sq) = qp.log_sq_size else {
        return;
    };
    let Ok(pi) = posted(core, qp) else {
        return;
    };
    if u32::from(pi.wrapping_sub(qp.sq_consumed)) > 1u32 << log_sq {
        add(&core.counters.bad_doorbells, 1);
        return;
    }
    let mut s = std::mem::take(&mut core.ud_scratch);
    while let Some(qp) = core.res.ud_qps.get(qpn) {
        let index = qp.sq_consumed;
        // A send queue stopped at a page fault waits for PAGE_FAULT_RESUME; one whose queue
        // group is in debt, for the device's timers.
        if index == pi || qp.state != state::RTS || qp.req.page_fault.is_some() {
            break;
        }
        // While the port schedules its classes (a class rate limit, or a link below its
        // fastest speed), the WQE's priority (its address vector's SL) decides which class
        // it waits for.
        let prio = if crate::engine::pacing::classes_scheduled(core) {
            wqe_prio(core, qpn, index, &mut s)
        } else {
            None
        };
        if !crate::engine::pacing::ud_admits(core, qpn, prio) {
            break;
        }
        match execute(core, qpn, index, pi, &mut s) {
            Ok(bbs) => {
                if let Some(qp) = core.res.ud_qps.get_mut(qpn) {
                    qp.sq_consumed = index.wrapping_add(bbs);
                }
            }
            Err(((op, _), _))
                if std::mem::take(&mut s.page_fault)
                    && super::page_fault::send_gather(core, qpn, index, op) =>
            {
                break;
            }
            Err(((op, syndrome), ds)) => {
                fail(core, qpn, (index, pi), (op, syndrome), ds);
                break;
            }
        }
    }
    core.ud_scratch = s;
}

/// The priority WQE `index` of QP `qpn` sends at: its address vector's (in its first basic
/// block, after the control segment); `None` when the block cannot be read (the WQE then
/// fails as it runs).
fn wqe_prio(core: &Core, qpn: u32, index: u16, s: &mut UdScratch) -> Option<u8> {
    s.wqe.resize(WQE_BB, 0);
    read_bb(core, qpn, index, &mut s.wqe[..WQE_BB]).ok()?;
    let av = DatagramSeg::new(&s.wqe[WQE_DS..WQE_DS + AV_LEN]).ok()?;
    Some(wqe::roce_av_prio(av.stat_rate_sl()))
}

/// Runs again the UD QPs whose queue group's or traffic class's rates stopped them and whose
/// wait is over at `now`; whether any ran.
pub(crate) fn resume_paced(core: &mut Core, now: std::time::Instant) -> bool {
    let mut ran = false;
    while let Some(qpn) = crate::engine::pacing::take_due_ud(core, now) {
        if core
            .res
            .ud_qps
            .get(qpn)
            .is_some_and(|qp| qp.state == state::RTS)
        {
            run_posted(core, qpn);
            ran = true;
        }
    }
    ran
}

/// Send WQE `index` (producer index `pi`, `ds` its size, 0 when unknown) of QP `qpn` failed:
/// its error CQE, and the send queue error state (the WQEs after it flushed).
fn fail(core: &mut Core, qpn: u32, (index, pi): (u16, u16), (op, syndrome): WqeError, ds: usize) {
    if let Some(qp) = core.res.ud_qps.get_mut(qpn) {
        qp.sq_consumed = index.wrapping_add(span(ds, index, pi));
        qp.state = state::SQER;
    }
    post_error_cqe(core, qpn, index, syndrome, Side::Send(op));
    flush_sends(core, qpn);
}

/// The send queue of QP `qpn` stopped at a page fault of its WQE in progress (opcode `op`)
/// that was resumed with an error: that WQE completes with `syndrome`, and the send queue goes
/// to the send queue error state. Otherwise (resumed) it goes on from that WQE.
pub(crate) fn resume(core: &mut Core, qpn: u32, failed: Option<(u8, CqeSyndrome)>) {
    let Some(qp) = core.res.ud_qps.get(qpn) else {
        return;
    };
    let index = qp.sq_consumed;
    let Some(err) = failed else {
        if qp.state == state::RTS {
            run_posted(core, qpn);
        }
        return;
    };
    let Ok(pi) = posted(core, qp) else {
        return;
    };
    let mut bb = [0u8; WQE_BB];
    let ds = match read_bb(core, qpn, index, &mut bb) {
        Ok(()) => CtrlSeg::new(&bb[..16]).map_or(0, |c| usize::from(c.ds())),
        Err(()) => 0,
    };
    fail(core, qpn, (index, pi), err, ds);
}

/// Sends the WQE at `index` (the producer index is `pi`); its WQEBBs, or what failed and the
/// WQE's `ds` (0 when unknown).
fn execute(
    core: &mut Core,
    qpn: u32,
    index: u16,
    pi: u16,
    s: &mut UdScratch,
) -> Result<u16, (WqeError, usize)> {
    s.wqe.resize(WQE_BB, 0);
    read_bb(core, qpn, index, &mut s.wqe[..WQE_BB])
        .map_err(|_| ((0, CqeSyndrome::LocalProtection), 0))?;
    let ctrl = CtrlSeg::new(&s.wqe[..16]).map_err(|_| ((0, CqeSyndrome::LocalQpOperation), 0))?;
    let (op, ds) = (ctrl.opcode(), usize::from(ctrl.ds()));
    let (imm, solicited) = (ctrl.imm(), ctrl.se());
    let signaled = ctrl.ce() >= wqe::completion::ALWAYS;
    let bad = ((op, CqeSyndrome::LocalQpOperation), ds);
    // A WQE must name this QP and its own index, hold at least the control and datagram
    // segments, and have been posted whole.
    if ctrl.qpn_or_sqn() != qpn
        || ctrl.wqe_index() != index
        || ds * WQE_DS < WQE_DS + AV_LEN
        || wqe::wqebbs(ds) > usize::from(pi.wrapping_sub(index))
    {
        return Err(bad);
    }
    if op != opcode::SEND && op != opcode::SEND_IMM {
        return Err(bad);
    }
    let bbs = wqe::wqebbs(ds) as u16;
    s.wqe.resize(usize::from(bbs) * WQE_BB, 0);
    for i in 1..bbs {
        let range = usize::from(i) * WQE_BB..usize::from(i + 1) * WQE_BB;
        read_bb(core, qpn, index.wrapping_add(i), &mut s.wqe[range])
            .map_err(|_| ((op, CqeSyndrome::LocalProtection), ds))?;
    }
    let av = DatagramSeg::new(&s.wqe[WQE_DS..WQE_DS + AV_LEN]).map_err(|_| bad)?;
    let prio = cxdirect_hw::wqe::roce_av_prio(av.stat_rate_sl());
    let qp = core.res.ud_qps.get(qpn).ok_or(bad)?;
    let (pd, service, qp_q_key, psn, deth_sqpn) =
        (qp.pd, qp.service, qp.q_key, qp.next_send_psn, qp.deth_sqpn);
    // mlx5_ib gives UD QPs MTU 4096 and QP1 256 in the context; the port may carry less.
    let port_mtu = crate::function::hca::port_max_mtu(core);
    let max = mtu_bytes(qp.mtu.min(port_mtu).max(1))
        .min(core.port.max_frame().saturating_sub(UD_OVERHEAD));
    let Some((src_gid, src_mac)) = source(core, av.sgid_index()) else {
        return Err(bad);
    };
    let route = Route {
        src_mac,
        dst_mac: av.rmac(),
        src_gid,
        dst_gid: av.dgid(),
        tclass: av.tclass(),
        hop_limit: av.hop_limit(),
        flow_label: av.flow_label(),
        udp_sport: match av.udp_sport() {
            0 => DEFAULT_UDP_SPORT,
            port => port,
        },
    };
    let q_key = if av.q_key() & QKEY_FROM_QP != 0 {
        qp_q_key
    } else {
        av.q_key()
    };
    let dest_qpn = av.dest_qpn();
    crate::engine::gather::gather_paged(
        core,
        pd,
        max,
        &s.wqe[..ds * WQE_DS],
        WQE_DS + AV_LEN,
        &mut s.message,
    )
    .map_err(|fault| match fault {
        GatherFault::Error(syndrome) => ((op, syndrome), ds),
        // Told apart for the caller: a page fault where the function reports them.
        GatherFault::NotPresent => {
            s.page_fault = true;
            ((op, CqeSyndrome::LocalProtection), ds)
        }
    })?;
    // The DETH and the immediate follow the BTH, in that order, before the payload. The GSI
    // QP sends as QP 1; a UD QP created with `deth_sqpn` as that QP (mlx5_ib's GSI transmit
    // QPs give 1, `create_gsi_ud_qp` in gsi.c).
    let source_qpn = if service == service_type::QP1 {
        1
    } else if deth_sqpn != 0 {
        deth_sqpn
    } else {
        qpn
    };
    s.payload.clear();
    s.payload.extend_from_slice(&q_key.to_be_bytes());
    s.payload
        .extend_from_slice(&(source_qpn & PSN_MASK).to_be_bytes());
    if op == opcode::SEND_IMM {
        s.payload.extend_from_slice(&imm.to_be_bytes());
    }
    s.payload.extend_from_slice(&s.message);
    let t = Transport {
        opcode: if op == opcode::SEND_IMM {
            UD_SEND_ONLY_IMM
        } else {
            UD_SEND_ONLY
        },
        dest_qpn,
        psn,
        ack_req: false,
        solicited,
        xrceth: None,
        dceth: None,
        reth: None,
        aeth: None,
        imm: None,
        atomic: None,
        atomic_ack: None,
    };
    build_routed(&route, &t, &s.payload, &mut s.frame);
    crate::engine::sq::transmit_from_qp(core, &s.frame, qpn);
    crate::engine::pacing::ud_charge(core, qpn, prio, s.frame.len());
    add(&core.counters.ud_sent, 1);
    if let Some(qp) = core.res.ud_qps.get_mut(qpn) {
        qp.next_send_psn = (psn + 1) & PSN_MASK;
    }
    if signaled {
        requester_cqe(core, qpn, index, op, s.message.len() as u32);
    }
    Ok(bbs)
}

/// Writes the requester CQE of send WQE `index` (opcode `op`, `bytes` sent) as mlx5_ib's
/// `handle_good_req` and libmlx5's read it: the WQE opcode in `sop_drop_qpn`'s top byte.
fn requester_cqe(core: &mut Core, qpn: u32, index: u16, op: u8, bytes: u32) {
    let Some(qp) = core.res.ud_qps.get(qpn) else {
        return;
    };
    let cqn = qp.cqn_snd;
    let mut cqe = [0u8; 64];
    if let Ok(mut c) = Cqe64::new(&mut cqe[..]) {
        c.set_opcode(CqeOpcode::Req as u8)
            .set_sop_drop(op)
            .set_qpn(qpn)
            .set_wqe_counter(index)
            .set_byte_cnt(bytes);
    }
    post_cqe(core, qpn, cqn, &mut cqe);
}
