//! The RoCE v2 RC responder: a UDP 4791 frame reaching a function with RoCE enabled goes to
//! the QP its BTH names, not through Ethernet steering. The ICRC is checked (a bad one is
//! dropped and counted), then the PSN: a duplicate is answered by an ACK, the first packet out
//! of sequence by a sequence-error NAK (later ones are dropped silently until the expected PSN
//! arrives). A SEND scatters into a receive WQE of the QP's own ring through its lkeys (no WQE:
//! an RNR NAK); a WRITE lands through the rkey after [`check_remote`] (refused: a remote access
//! NAK, nothing written). A packet asking for an acknowledgement gets an ACK carrying the MSN;
//! packets that do not ask are acknowledged with the next one that does (coalesced). ACKs and
//! NAKs arriving for the QP go to the requester ([`super::rc::acknowledge`]).

use crate::counters::add;
use crate::engine::rc::{
    self, bth_opcode, Transport, ATOMIC_ETH_LEN, BTH_LEN, ICRC_LEN, IMM_LEN, PSN_MASK, RETH_LEN,
};
use crate::fw::mkey::{check_remote, translate, translate_remote, KeyFault, RemoteAccess};
use crate::fw::Core;
use crate::objects::rc::{RcReceive, ReceiveInProgress, WriteInProgress};
use crate::objects::QState;
use cxdirect_hw::cqe::{Cqe64, CqeOpcode, CqeSyndrome, ErrCqe};
use cxdirect_hw::qp::state;
use cxdirect_hw::roce::ROCE_V2_UDP_DPORT;
use cxdirect_hw::wqe::{DataSeg, SrqNextSeg, INVALID_LKEY, WQE_DS};

/// AETH syndromes (IBA; Linux `rxe_hdr.h`).
pub(crate) mod aeth {
    /// ACK with unlimited credits.
    pub const ACK: u8 = 0x1f;
    /// Receiver not ready; the low five bits are the RNR timer code.
    pub const RNR_NAK: u8 = 0x20;
    /// NAK: PSN sequence error.
    pub const NAK_PSN_SEQ: u8 = 0x60;
    /// NAK: invalid request.
    pub const NAK_INVALID_REQUEST: u8 = 0x61;
    /// NAK: remote access error.
    pub const NAK_REMOTE_ACCESS: u8 = 0x62;
    /// NAK: remote operational error.
    pub const NAK_REMOTE_OPERATION: u8 = 0x63;
    /// The syndrome's type bits.
    pub const TYPE_MASK: u8 = 0xe0;
}

/// BTH opcode of an acknowledgement.
pub(crate) const ACKNOWLEDGE: u8 = 0x11;

/// Where a RoCE v2 frame's headers are.
struct Offsets {
    l3: usize,
    bth: usize,
    /// End of the UDP datagram (Ethernet padding excluded).
    end: usize,
}

/// The offsets of `frame` when it is UDP to port 4791 over IPv4 or IPv6 (untagged).
fn roce_offsets(frame: &[u8]) -> Option<Offsets> {
    let ethertype = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
    let l3 = 14;
    // The IP version must agree with the ethertype, and an IPv4 header carry no options:
    // the ICRC covers exactly the header these offsets name.
    let version = frame.get(l3)? >> 4;
    let udp = match ethertype {
        0x0800 => {
            let ihl = usize::from(frame.get(l3)? & 0x0f) * 4;
            if version != 4 || *frame.get(l3 + 9)? != 17 || ihl != 20 {
                return None;
            }
            l3 + ihl
        }
        0x86dd => {
            if version != 6 || *frame.get(l3 + 6)? != 17 {
                return None;
            }
            l3 + 40
        }
        _ => return None,
    };
    let header = frame.get(udp..udp + 8)?;
    if u16::from_be_bytes([header[2], header[3]]) != ROCE_V2_UDP_DPORT {
        return None;
    }
    let udp_len = usize::from(u16::from_be_bytes([header[4], header[5]]));
    Some(Offsets {
        l3,
        bth: udp + 8,
        end: udp + udp_len,
    })
}

/// Takes `frame` when it is RoCE v2 and RoCE is enabled on the function; false when it is
/// not RoCE, for Ethernet steering to handle.
pub(crate) fn receive(core: &mut Core, frame: &[u8]) -> bool {
    if !core.cfg.roce || !core.port.roce_en {
        return false;
    }
    let Some(at) = roce_offsets(frame) else {
        return false;
    };
    if at.end > frame.len() || at.end < at.bth + BTH_LEN + ICRC_LEN {
        add(&core.counters.roce_rx_drops, 1);
        return true;
    }
    let body_end = at.end - ICRC_LEN;
    if rc::icrc(&frame[..body_end], at.l3) != frame[body_end..at.end] {
        add(&core.counters.roce_icrc_drops, 1);
        return true;
    }
    let bth = &frame[at.bth..at.bth + BTH_LEN];
    let opcode = bth[0];
    let pad = usize::from((bth[1] >> 4) & 3);
    let qpn = u32::from_be_bytes([bth[4], bth[5], bth[6], bth[7]]) & PSN_MASK;
    let psn_word = u32::from_be_bytes([bth[8], bth[9], bth[10], bth[11]]);
    let (psn, ack_req) = (psn_word & PSN_MASK, psn_word & 0x8000_0000 != 0);
    let Some(qp) = core.res.qps.get(qpn) else {
        add(&core.counters.roce_rx_drops, 1);
        return true;
    };
    let qp_state = qp.state;
    let rest_start = at.bth + BTH_LEN;
    if body_end < rest_start + pad {
        add(&core.counters.roce_rx_drops, 1);
        return true;
    }
    let rest = &frame[rest_start..body_end - pad];
    if (bth_opcode::READ_RESPONSE_FIRST..=bth_opcode::ATOMIC_ACKNOWLEDGE).contains(&opcode)
        && opcode != ACKNOWLEDGE
    {
        if qp_state != state::RTS {
            add(&core.counters.roce_rx_drops, 1);
            return true;
        }
        // FIRST, LAST and ONLY carry an AETH before the data; an atomic ACK one before the
        // original value.
        let skip = if opcode == bth_opcode::READ_RESPONSE_MIDDLE {
            0
        } else {
            4
        };
        if rest.len() < skip {
            add(&core.counters.roce_rx_drops, 1);
            return true;
        }
        rc::response(core, qpn, opcode, psn, &rest[skip..]);
        return true;
    }
    if opcode == ACKNOWLEDGE {
        if rest.len() < 4 || qp_state != state::RTS {
            add(&core.counters.roce_rx_drops, 1);
            return true;
        }
        let word = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]);
        rc::acknowledge(core, qpn, psn, (word >> 24) as u8);
        return true;
    }
    if qp_state != state::RTR && qp_state != state::RTS {
        add(&core.counters.roce_rx_drops, 1);
        return true;
    }
    respond(core, qpn, opcode, psn, ack_req, rest);
    true
}

/// What a packet did at the responder.
enum Outcome {
    /// Taken; acknowledge when asked.
    Done,
    /// Answered with responses taking this many PSNs (a READ, an atomic).
    Responded(u32),
    /// Refused with this NAK syndrome (the PSN is not consumed).
    Nak(u8),
}

/// The responder's handling of an in-sequence check and then the packet.
fn respond(core: &mut Core, qpn: u32, opcode: u8, psn: u32, ack_req: bool, rest: &[u8]) {
    let Some(qp) = core.res.qps.get(qpn) else {
        return;
    };
    let expected = qp.next_rcv_psn & PSN_MASK;
    let behind = expected.wrapping_sub(psn) & PSN_MASK;
    if psn != expected {
        if behind != 0 && behind < 1 << 23 {
            // A duplicate: the ACK for it was lost, or the requester retried.
            add(&core.counters.roce_duplicates, 1);
            send_ack(core, qpn, expected.wrapping_sub(1) & PSN_MASK, aeth::ACK);
        } else {
            add(&core.counters.roce_rx_drops, 1);
            let first = core
                .res
                .qps
                .get_mut(qpn)
                .map(|qp| !std::mem::replace(&mut qp.resp.nak_sent, true))
                .unwrap_or(false);
            if first {
                send_ack(core, qpn, expected, aeth::NAK_PSN_SEQ);
            }
        }
        return;
    }
    let outcome = match opcode {
        bth_opcode::READ_REQUEST => read(core, qpn, psn, rest),
        bth_opcode::COMPARE_SWAP | bth_opcode::FETCH_ADD => atomic(core, qpn, opcode, psn, rest),
        _ => packet(core, qpn, opcode, rest),
    };
    match outcome {
        Outcome::Done => {
            if let Some(qp) = core.res.qps.get_mut(qpn) {
                qp.next_rcv_psn = (expected + 1) & PSN_MASK;
                qp.resp.nak_sent = false;
            }
            if ack_req {
                send_ack(core, qpn, psn, aeth::ACK);
            }
        }
        Outcome::Responded(psns) => {
            if let Some(qp) = core.res.qps.get_mut(qpn) {
                qp.next_rcv_psn = (expected + psns) & PSN_MASK;
                qp.resp.nak_sent = false;
            }
        }
        Outcome::Nak(syndrome) => {
            if syndrome & aeth::TYPE_MASK == aeth::RNR_NAK {
                add(&core.counters.roce_rnr_naks_sent, 1);
            }
            send_ack(core, qpn, psn, syndrome);
        }
    }
}

/// Executes one in-sequence request packet.
fn packet(core: &mut Core, qpn: u32, opcode: u8, rest: &[u8]) -> Outcome {
    use bth_opcode::*;
    let (first, last, imm, write) = match opcode {
        SEND_FIRST => (true, false, false, false),
        SEND_MIDDLE => (false, false, false, false),
        SEND_LAST => (false, true, false, false),
        SEND_LAST_IMM => (false, true, true, false),
        SEND_ONLY => (true, true, false, false),
        SEND_ONLY_IMM => (true, true, true, false),
        WRITE_FIRST => (true, false, false, true),
        WRITE_MIDDLE => (false, false, false, true),
        WRITE_LAST => (false, true, false, true),
        WRITE_LAST_IMM => (false, true, true, true),
        WRITE_ONLY => (true, true, false, true),
        WRITE_ONLY_IMM => (true, true, true, true),
        _ => return Outcome::Nak(aeth::NAK_INVALID_REQUEST),
    };
    let mut rest = rest;
    let mut reth = None;
    if write && first {
        if rest.len() < RETH_LEN {
            return Outcome::Nak(aeth::NAK_INVALID_REQUEST);
        }
        let va = u64::from_be_bytes(rest[..8].try_into().unwrap_or_default());
        let rkey = u32::from_be_bytes([rest[8], rest[9], rest[10], rest[11]]);
        let len = u32::from_be_bytes([rest[12], rest[13], rest[14], rest[15]]);
        reth = Some((va, rkey, len));
        rest = &rest[RETH_LEN..];
    }
    let mut imm_data = 0;
    if imm {
        if rest.len() < IMM_LEN {
            return Outcome::Nak(aeth::NAK_INVALID_REQUEST);
        }
        imm_data = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]);
        rest = &rest[IMM_LEN..];
    }
    let Some(qp) = core.res.qps.get(qpn) else {
        return Outcome::Nak(aeth::NAK_INVALID_REQUEST);
    };
    let in_send = qp.resp.recv.is_some();
    let in_write = qp.resp.write.is_some();
    // A FIRST or ONLY while a message is open, or a MIDDLE or LAST of none, is out of order.
    if first == (in_send || in_write) || (!first && write != in_write) {
        return Outcome::Nak(aeth::NAK_INVALID_REQUEST);
    }
    if write {
        if let Some((va, rkey, len)) = reth {
            if !qp.rwe
                || check_remote(core, rkey, qp.pd, va, u64::from(len), RemoteAccess::Write).is_err()
            {
                return Outcome::Nak(aeth::NAK_REMOTE_ACCESS);
            }
            set_write(core, qpn, va, rkey, len);
        }
        // With immediate, the receive WQE must be there before the last data lands.
        if imm && !receive_available(core, qpn) {
            if first {
                clear_write(core, qpn);
            }
            return rnr(core, qpn);
        }
        if let Err(syndrome) = write_data(core, qpn, rest, last) {
            clear_write(core, qpn);
            return Outcome::Nak(syndrome);
        }
        if last {
            let total = core
                .res
                .qps
                .get_mut(qpn)
                .and_then(|qp| qp.resp.write.take())
                .map_or(0, |w| w.total);
            if imm {
                let Some(recv) = take_receive(core, qpn) else {
                    return rnr(core, qpn);
                };
                responder_cqe(core, qpn, CqeOpcode::RespWrImm, recv.index, total, imm_data);
            }
            message_done(core, qpn);
        }
        return Outcome::Done;
    }
    if first {
        let Some(recv) = take_receive(core, qpn) else {
            return rnr(core, qpn);
        };
        if let Some(qp) = core.res.qps.get_mut(qpn) {
            qp.resp.recv = Some(recv);
        }
    }
    if let Err(syndrome) = scatter(core, qpn, rest) {
        let index = core
            .res
            .qps
            .get_mut(qpn)
            .and_then(|qp| qp.resp.recv.take())
            .map_or(0, |r| r.index);
        responder_error(core, qpn, index, syndrome);
        return Outcome::Nak(aeth::NAK_INVALID_REQUEST);
    }
    if last {
        if let Some(recv) = core.res.qps.get_mut(qpn).and_then(|qp| qp.resp.recv.take()) {
            let op = if imm {
                CqeOpcode::RespSendImm
            } else {
                CqeOpcode::RespSend
            };
            responder_cqe(core, qpn, op, recv.index, recv.bytes, imm_data);
        }
        message_done(core, qpn);
    }
    Outcome::Done
}

fn set_write(core: &mut Core, qpn: u32, va: u64, rkey: u32, total: u32) {
    if let Some(qp) = core.res.qps.get_mut(qpn) {
        qp.resp.write = Some(WriteInProgress {
            va,
            rkey,
            total,
            done: 0,
        });
    }
}

fn clear_write(core: &mut Core, qpn: u32) {
    if let Some(qp) = core.res.qps.get_mut(qpn) {
        qp.resp.write = None;
    }
}

fn message_done(core: &mut Core, qpn: u32) {
    if let Some(qp) = core.res.qps.get_mut(qpn) {
        qp.resp.msn = (qp.resp.msn + 1) & PSN_MASK;
    }
}

/// The RNR NAK of `qpn`: its RNR timer code in the syndrome's low five bits.
fn rnr(core: &Core, qpn: u32) -> Outcome {
    let timer = core.res.qps.get(qpn).map_or(0, |qp| qp.min_rnr_nak & 0x1f);
    Outcome::Nak(aeth::RNR_NAK | timer)
}

/// Lands `data` of the WRITE in progress through its rkey; on `last` the bytes must add up
/// to the RETH length.
fn write_data(core: &mut Core, qpn: u32, data: &[u8], last: bool) -> Result<(), u8> {
    let qp = core.res.qps.get(qpn).ok_or(aeth::NAK_INVALID_REQUEST)?;
    let w = qp.resp.write.ok_or(aeth::NAK_INVALID_REQUEST)?;
    let len = data.len() as u32;
    if w.done + len > w.total || (last && w.done + len != w.total) {
        return Err(aeth::NAK_INVALID_REQUEST);
    }
    if len > 0 {
        translate_remote(
            core,
            w.rkey,
            qp.pd,
            w.va + u64::from(w.done),
            u64::from(len),
            RemoteAccess::Write,
            |iova, offset, bytes| {
                core.dma_write(iova, &data[offset as usize..(offset + bytes) as usize])
                    .map_err(|_| KeyFault::Bounds)
            },
        )
        .map_err(|_| aeth::NAK_REMOTE_ACCESS)?;
    }
    if let Some(w) = core
        .res
        .qps
        .get_mut(qpn)
        .and_then(|qp| qp.resp.write.as_mut())
    {
        w.done += len;
    }
    Ok(())
}

/// Receive WQEs posted and not yet taken, on the QP's own ring or its RMP (0 without either,
/// with the RMP not ready, or when the doorbell record cannot be read or claims more than the
/// ring holds).
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
        RcReceive::None => 0,
    }
}

fn receive_available(core: &Core, qpn: u32) -> bool {
    posted_receives(core, qpn) > 0
}

/// Takes the next receive WQE of the QP's own ring or RMP (a linked-list RMP's list head);
/// where it is. `None` when none is posted.
fn take_receive(core: &mut Core, qpn: u32) -> Option<ReceiveInProgress> {
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
        RcReceive::Shared(rmpn) => {
            let rmp = core.res.rmps.get_mut(rmpn)?;
            let wq = &mut rmp.wq;
            let index = wq.linked_head.unwrap_or(wq.consumed);
            wq.consumed = wq.consumed.wrapping_add(1);
            let stride = wq.stride() as usize;
            let slot = u64::from(index) & u64::from(wq.entries() - 1);
            let addr = wq.buf.addr(slot * stride as u64)?;
            let (pd, linked, entries) = (wq.pd, wq.linked_head.is_some(), wq.entries());
            let mut data_at = 0;
            if linked {
                // The WQE's next segment names the new list head.
                let mut next = [0u8; WQE_DS];
                core.dma_read(addr, &mut next).ok()?;
                let next = SrqNextSeg::new(&next[..]).ok()?.next_wqe_index();
                if u32::from(next) >= entries {
                    return None;
                }
                if let Some(rmp) = core.res.rmps.get_mut(rmpn) {
                    rmp.wq.linked_head = Some(next);
                }
                data_at = WQE_DS;
            }
            crate::engine::rq::check_limit(core, rmpn, posted - 1);
            Some(ReceiveInProgress {
                index,
                addr,
                len: stride,
                data_at,
                pd,
                bytes: 0,
            })
        }
        RcReceive::None => None,
    }
}

/// Scatters `data` into the receive WQE in progress, after the bytes it already holds.
fn scatter(core: &mut Core, qpn: u32, data: &[u8]) -> Result<(), CqeSyndrome> {
    let qp = core.res.qps.get(qpn).ok_or(CqeSyndrome::LocalQpOperation)?;
    let recv = qp.resp.recv.ok_or(CqeSyndrome::LocalQpOperation)?;
    let mut wqe = [0u8; MAX_RECEIVE_WQE];
    let wqe = &mut wqe[..recv.len.min(MAX_RECEIVE_WQE)];
    core.dma_read(recv.addr, wqe)
        .map_err(|_| CqeSyndrome::LocalProtection)?;
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
        translate(
            core,
            lkey,
            recv.pd,
            seg.addr() + skip as u64,
            n as u64,
            true,
            |iova, offset, bytes| {
                core.dma_write(iova, &now[offset as usize..(offset + bytes) as usize])
                    .map_err(|_| KeyFault::Bounds)
            },
        )
        .map_err(|_| CqeSyndrome::LocalProtection)?;
        left = later;
        skip = 0;
    }
    if !left.is_empty() {
        return Err(CqeSyndrome::LocalLength);
    }
    if let Some(r) = core
        .res
        .qps
        .get_mut(qpn)
        .and_then(|qp| qp.resp.recv.as_mut())
    {
        r.bytes += data.len() as u32;
    }
    Ok(())
}

/// Largest receive WQE the responder reads (a 2 KiB stride: 128 data segments).
const MAX_RECEIVE_WQE: usize = 2048;

/// Writes a responder CQE to the QP's receive CQ.
fn responder_cqe(core: &mut Core, qpn: u32, op: CqeOpcode, index: u16, bytes: u32, imm: u32) {
    let Some(qp) = core.res.qps.get(qpn) else {
        return;
    };
    let cqn = qp.cqn_rcv;
    let srqn = match qp.receive {
        RcReceive::Shared(rmpn) => rmpn,
        _ => 0,
    };
    let mut cqe = [0u8; 64];
    if let Ok(mut c) = Cqe64::new(&mut cqe[..]) {
        c.set_opcode(op as u8)
            .set_byte_cnt(bytes)
            .set_qpn(qpn)
            .set_wqe_counter(index)
            .set_srqn(srqn);
        if matches!(op, CqeOpcode::RespSendImm | CqeOpcode::RespWrImm) {
            c.set_imm_inval_pkey(imm);
        }
    }
    if crate::engine::cq::post(core, cqn, &mut cqe).is_err() {
        add(&core.counters.completions_lost, 1);
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
    let Some(qp) = core.res.qps.get(qpn) else {
        return;
    };
    let cqn = qp.cqn_rcv;
    let mut cqe = [0u8; 64];
    if let Ok(mut err) = ErrCqe::new(&mut cqe[..]) {
        err.set_syndrome(CqeSyndrome::WrFlushed as u8)
            .set_qpn(qpn)
            .set_wqe_counter(index)
            .set_opcode(CqeOpcode::RespErr as u8);
    }
    if crate::engine::cq::post(core, cqn, &mut cqe).is_err() {
        add(&core.counters.completions_lost, 1);
    }
}

/// A receive WQE that could not take its message: an error CQE, the QP to error.
fn responder_error(core: &mut Core, qpn: u32, index: u16, syndrome: CqeSyndrome) {
    add(&core.counters.error_cqes, 1);
    let Some(qp) = core.res.qps.get_mut(qpn) else {
        return;
    };
    qp.state = state::ERR;
    let cqn = qp.cqn_rcv;
    let mut cqe = [0u8; 64];
    if let Ok(mut err) = ErrCqe::new(&mut cqe[..]) {
        err.set_syndrome(syndrome as u8)
            .set_qpn(qpn)
            .set_wqe_counter(index)
            .set_opcode(CqeOpcode::RespErr as u8);
    }
    if crate::engine::cq::post(core, cqn, &mut cqe).is_err() {
        add(&core.counters.completions_lost, 1);
    }
}

/// Sends an ACK or NAK (`syndrome`) for `psn` to QP `qpn`'s peer, with the QP's MSN.
pub(crate) fn send_ack(core: &mut Core, qpn: u32, psn: u32, syndrome: u8) {
    let Some(qp) = core.res.qps.get(qpn) else {
        return;
    };
    if syndrome == aeth::ACK {
        add(&core.counters.roce_acks_sent, 1);
    } else if syndrome & aeth::TYPE_MASK != aeth::RNR_NAK {
        add(&core.counters.roce_naks_sent, 1);
    }
    let t = Transport {
        opcode: ACKNOWLEDGE,
        dest_qpn: qp.remote_qpn,
        psn,
        ack_req: false,
        solicited: false,
        reth: None,
        aeth: Some((u32::from(syndrome) << 24) | (qp.resp.msn & PSN_MASK)),
        imm: None,
        atomic: None,
        atomic_ack: None,
    };
    let mut frame = std::mem::take(&mut core.rc_scratch.ack);
    if rc::build_frame(core, qpn, &t, &[], &mut frame) {
        crate::engine::sq::transmit(core, &frame);
    }
    core.rc_scratch.ack = frame;
}

/// An RDMA READ request: checked against the rkey (remote read), answered with the data in
/// path-MTU response packets carrying the request's PSN onwards.
fn read(core: &mut Core, qpn: u32, psn: u32, rest: &[u8]) -> Outcome {
    if rest.len() < RETH_LEN {
        return Outcome::Nak(aeth::NAK_INVALID_REQUEST);
    }
    let va = u64::from_be_bytes(rest[..8].try_into().unwrap_or_default());
    let rkey = u32::from_be_bytes([rest[8], rest[9], rest[10], rest[11]]);
    let len = u32::from_be_bytes([rest[12], rest[13], rest[14], rest[15]]);
    let Some(qp) = core.res.qps.get(qpn) else {
        return Outcome::Nak(aeth::NAK_INVALID_REQUEST);
    };
    let (pd, mtu) = (qp.pd, rc::mtu_bytes(qp.mtu));
    if !qp.rre || check_remote(core, rkey, pd, va, u64::from(len), RemoteAccess::Read).is_err() {
        return Outcome::Nak(aeth::NAK_REMOTE_ACCESS);
    }
    message_done(core, qpn);
    let packets = (len as usize).div_ceil(mtu).max(1);
    let mut data = std::mem::take(&mut core.rc_scratch.response);
    let mut frame = std::mem::take(&mut core.rc_scratch.ack);
    for n in 0..packets {
        let start = n * mtu;
        let bytes = (len as usize - start).min(mtu);
        data.clear();
        data.resize(bytes, 0);
        let read = bytes == 0
            || translate_remote(
                core,
                rkey,
                pd,
                va + start as u64,
                bytes as u64,
                RemoteAccess::Read,
                |iova, offset, piece| {
                    core.dma_read(iova, &mut data[offset as usize..(offset + piece) as usize])
                        .map_err(|_| KeyFault::Bounds)
                },
            )
            .is_ok();
        if !read {
            // The key granted the range but the memory behind it cannot be read.
            core.rc_scratch.response = data;
            core.rc_scratch.ack = frame;
            return Outcome::Nak(aeth::NAK_REMOTE_OPERATION);
        }
        let (first, last) = (n == 0, n + 1 == packets);
        let opcode = match (first, last) {
            (true, true) => bth_opcode::READ_RESPONSE_ONLY,
            (true, false) => bth_opcode::READ_RESPONSE_FIRST,
            (false, false) => bth_opcode::READ_RESPONSE_MIDDLE,
            (false, true) => bth_opcode::READ_RESPONSE_LAST,
        };
        let Some(qp) = core.res.qps.get(qpn) else {
            break;
        };
        let t = Transport {
            opcode,
            dest_qpn: qp.remote_qpn,
            psn: (psn + n as u32) & PSN_MASK,
            ack_req: false,
            solicited: false,
            reth: None,
            aeth: (first || last)
                .then_some((u32::from(aeth::ACK) << 24) | (qp.resp.msn & PSN_MASK)),
            imm: None,
            atomic: None,
            atomic_ack: None,
        };
        if rc::build_frame(core, qpn, &t, &data, &mut frame) {
            crate::engine::sq::transmit(core, &frame);
        }
    }
    core.rc_scratch.response = data;
    core.rc_scratch.ack = frame;
    Outcome::Responded(packets as u32)
}

/// A compare-and-swap or fetch-and-add on the 8 bytes at the AtomicETH's address, taken as a
/// big-endian value (the device's default atomic endianness); answered with an atomic ACK
/// carrying the value found.
fn atomic(core: &mut Core, qpn: u32, opcode: u8, psn: u32, rest: &[u8]) -> Outcome {
    if rest.len() < ATOMIC_ETH_LEN {
        return Outcome::Nak(aeth::NAK_INVALID_REQUEST);
    }
    let be64 = |at: usize| u64::from_be_bytes(rest[at..at + 8].try_into().unwrap_or_default());
    let va = be64(0);
    let rkey = u32::from_be_bytes([rest[8], rest[9], rest[10], rest[11]]);
    let (swap_add, compare) = (be64(12), be64(20));
    let Some(qp) = core.res.qps.get(qpn) else {
        return Outcome::Nak(aeth::NAK_INVALID_REQUEST);
    };
    let pd = qp.pd;
    if !qp.rae || check_remote(core, rkey, pd, va, 8, RemoteAccess::Atomic).is_err() {
        return Outcome::Nak(aeth::NAK_REMOTE_ACCESS);
    }
    let mut original = 0u64;
    let done = translate_remote(core, rkey, pd, va, 8, RemoteAccess::Atomic, |iova, _, _| {
        let mut word = [0u8; 8];
        core.dma_read(iova, &mut word)
            .map_err(|_| KeyFault::Bounds)?;
        original = u64::from_be_bytes(word);
        let new = if opcode == bth_opcode::COMPARE_SWAP {
            if original == compare {
                swap_add
            } else {
                original
            }
        } else {
            original.wrapping_add(swap_add)
        };
        core.dma_write(iova, &new.to_be_bytes())
            .map_err(|_| KeyFault::Bounds)
    });
    if done.is_err() {
        return Outcome::Nak(aeth::NAK_REMOTE_OPERATION);
    }
    message_done(core, qpn);
    let Some(qp) = core.res.qps.get(qpn) else {
        return Outcome::Responded(1);
    };
    let t = Transport {
        opcode: bth_opcode::ATOMIC_ACKNOWLEDGE,
        dest_qpn: qp.remote_qpn,
        psn,
        ack_req: false,
        solicited: false,
        reth: None,
        aeth: Some((u32::from(aeth::ACK) << 24) | (qp.resp.msn & PSN_MASK)),
        imm: None,
        atomic: None,
        atomic_ack: Some(original),
    };
    let mut frame = std::mem::take(&mut core.rc_scratch.ack);
    if rc::build_frame(core, qpn, &t, &[], &mut frame) {
        crate::engine::sq::transmit(core, &frame);
    }
    core.rc_scratch.ack = frame;
    Outcome::Responded(1)
}
