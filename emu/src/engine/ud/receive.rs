//! The UD receive side: a RoCE v2 frame whose BTH opcode is a UD SEND goes to the UD QP its
//! BTH names, or, for destination QP 1, to the function's GSI QP. After the ICRC, the P_Key
//! (only the default one is in the table) and the DETH's Q_Key (the QP's own; for QP1 the
//! well-known `IB_QP1_QKEY`), the next receive WQE of the QP's ring (or its RMP) takes the
//! datagram: the first 40 bytes of its scatter list get the GRH area, then the payload.
//!
//! The GRH area is what Linux's `ib_get_rdma_header_version` and `ib_init_ah_attr_from_wc`
//! (`drivers/infiniband/core/verbs.c`) read: over IPv4, 20 zero bytes then the packet's IPv4
//! header; over IPv6, the packet's IPv6 header. The CQE (`handle_responder` in mlx5_ib
//! `cq.c`, `handle_responder`/`mlx5_parse_cqe` in libmlx5 `cq.c`) carries: the byte count
//! with the 40 bytes; `flags_rqpn` with the source QP (bits 23:0), the RoCE network header
//! type (bits 25:24: 1 IPv6, 2 IPv4) and the GRH-in-buffer flag (bits 29:28 = 1); the
//! immediate, or else the BTH's P_Key, in `imm_inval_pkey`; the L3 and L4 checks good
//! (`hds_ip_ext`); no VLAN; the local QP's own number in `sop_drop_qpn`; the WQE counter, the
//! RMP number, the solicited bit.
//!
//! A datagram to a multicast address (its BTH naming the multicast QP, 0xFFFFFF) goes to each
//! UD QP attached to the group of that address (ATTACH_TO_MCG; rdma_cm's group GID is the IP
//! address, IPv4-mapped for IPv4), each taking its own copy through the same checks, except
//! the QP that sent it when it blocks multicast loopback. One to a group no QP joined is
//! dropped and counted.
//!
//! A datagram with no receive WQE posted, or the wrong Q_Key, is dropped and counted (UD has
//! no RNR). One larger than the WQE's buffers completes the WQE with a local length error;
//! the QP keeps receiving.

use super::completion::{post_cqe, post_error_cqe, Side};
use super::page_fault::ReceiveGate;
use super::{DETH_LEN, GRH_LEN, MULTICAST_QPN, QP1_QKEY, UD_SEND_ONLY, UD_SEND_ONLY_IMM};
use crate::counters::add;
use crate::engine::address::destination_gid;
use crate::engine::roce::{icrc, roce_offsets, Offsets, BTH_LEN, ICRC_LEN, IMM_LEN, PSN_MASK};
use crate::function::Core;
use crate::objects::rc::{RcReceive, ReceiveInProgress};
use crate::objects::QState;
use crate::translate::{translate, KeyFault};
use cxdirect_hw::cqe::{Cqe64, CqeOpcode, CqeSyndrome};
use cxdirect_hw::qp::{service_type, state};
use cxdirect_hw::wqe::{DataSeg, INVALID_LKEY, WQE_DS};

/// RoCE network header types of `flags_rqpn` bits 25:24 (`MLX5_CQE_ROCE_L3_HEADER_TYPE_*`).
const L3_HEADER_IPV6: u32 = 1;
const L3_HEADER_IPV4: u32 = 2;
/// `flags_rqpn` bits 29:28: the GRH is in the receive buffer (`MLX5_GRH_IN_BUFFER`).
const GRH_IN_BUFFER: u32 = 1;
/// Largest receive WQE read (a 2 KiB stride: 128 data segments).
const MAX_RECEIVE_WQE: usize = 2048;

/// A received datagram as each QP it is delivered to takes it.
struct Datagram<'a> {
    /// The 40-byte GRH area written ahead of the payload.
    grh: [u8; GRH_LEN],
    payload: &'a [u8],
    v4: bool,
    q_key: u32,
    source_qpn: u32,
    imm: Option<u32>,
    pkey: u16,
    solicited: bool,
}

/// Takes `frame` when it is a RoCE v2 UD SEND, or any RoCE packet to a multicast address,
/// and RoCE is enabled on the function; false otherwise (the RC transport or Ethernet
/// steering handles it). `from_qp` is the sending QP of a datagram this function looped to
/// itself.
pub(crate) fn receive(core: &mut Core, frame: &[u8], from_qp: Option<u32>) -> bool {
    if !core.cfg.roce || !core.port.roce_en {
        return false;
    }
    let Some(at) = roce_offsets(frame) else {
        return false;
    };
    let Some(&opcode) = frame.get(at.bth) else {
        return false;
    };
    // The receive path let a multicast MAC through only with a multicast IP: a group's
    // datagram. Only UD is multicast (IBA 10.5): a group's packet of another transport
    // belongs to no QP.
    let multicast = frame[0] & 1 != 0;
    if opcode != UD_SEND_ONLY && opcode != UD_SEND_ONLY_IMM {
        if multicast {
            add(&core.counters.roce_rx_drops, 1);
            return true;
        }
        return false;
    }
    let imm_len = if opcode == UD_SEND_ONLY_IMM {
        IMM_LEN
    } else {
        0
    };
    let headers = at.bth + BTH_LEN + DETH_LEN + imm_len;
    if at.end > frame.len() || at.end < headers + ICRC_LEN {
        add(&core.counters.roce_rx_drops, 1);
        return true;
    }
    let body_end = at.end - ICRC_LEN;
    if icrc(&frame[..body_end], at.l3) != frame[body_end..at.end] {
        add(&core.counters.roce_icrc_drops, 1);
        return true;
    }
    let be32 = |o: usize| u32::from_be_bytes([frame[o], frame[o + 1], frame[o + 2], frame[o + 3]]);
    let bth = &frame[at.bth..at.bth + BTH_LEN];
    let pad = usize::from((bth[1] >> 4) & 3);
    let pkey = u16::from_be_bytes([bth[2], bth[3]]);
    let dest = be32(at.bth + 4) & PSN_MASK;
    // The P_Key table holds the default P_Key alone; its membership bit does not matter.
    if pkey & 0x7fff != 0x7fff || body_end < headers + pad {
        add(&core.counters.roce_rx_drops, 1);
        return true;
    }
    let v4 = frame[at.l3] >> 4 == 4;
    let mut grh = [0u8; GRH_LEN];
    if v4 {
        grh[20..].copy_from_slice(&frame[at.l3..at.l3 + 20]);
    } else {
        grh.copy_from_slice(&frame[at.l3..at.l3 + GRH_LEN]);
    }
    let datagram = Datagram {
        grh,
        payload: &frame[headers..body_end - pad],
        v4,
        q_key: be32(at.bth + BTH_LEN),
        source_qpn: be32(at.bth + BTH_LEN + 4) & PSN_MASK,
        imm: (imm_len != 0).then(|| be32(at.bth + BTH_LEN + DETH_LEN)),
        pkey,
        solicited: bth[1] & 0x80 != 0,
    };
    if multicast {
        deliver_to_group(core, frame, &at, dest, &datagram, from_qp);
        return true;
    }
    let Some(qpn) = target(core, dest) else {
        add(&core.counters.roce_rx_drops, 1);
        return true;
    };
    deliver(core, qpn, &datagram);
    true
}

/// Delivers a multicast datagram (destination QP `dest`, headers at `at`) to every QP of
/// the function attached to the group of its destination address, each its own copy: the
/// sending QP itself is skipped when it blocks multicast loopback (`block_lb_mc`). A datagram
/// whose BTH does not name the multicast QP, or to a group no QP joined, is counted and
/// dropped.
fn deliver_to_group(
    core: &mut Core,
    frame: &[u8],
    at: &Offsets,
    dest: u32,
    datagram: &Datagram,
    from_qp: Option<u32>,
) {
    // Every multicast packet names the multicast QP (`IB_MULTICAST_QPN`, what rdma_cm's join
    // event gives as the remote QPN to send to).
    if dest != MULTICAST_QPN {
        add(&core.counters.roce_rx_drops, 1);
        return;
    }
    let Some((gid, _)) = destination_gid(frame, at) else {
        add(&core.counters.roce_rx_drops, 1);
        return;
    };
    if core.res.mcgs.members(&gid).is_empty() {
        add(&core.counters.ud_mcast_no_group_drops, 1);
        return;
    }
    // By index: a delivery never changes the group, and the list is not copied per datagram.
    let mut i = 0;
    while let Some(&qpn) = core.res.mcgs.members(&gid).get(i) {
        i += 1;
        let blocked =
            from_qp == Some(qpn) && core.res.ud_qps.get(qpn).is_some_and(|qp| qp.block_lb_mc);
        if blocked {
            add(&core.counters.ud_mcast_loopback_blocked, 1);
            continue;
        }
        deliver(core, qpn, datagram);
    }
}

/// Delivers `datagram` to datagram QP `qpn`: the QP must be receiving and the Q_Key its own
/// (QP1's the well-known one); then the next receive WQE takes the GRH area and the payload.
fn deliver(core: &mut Core, qpn: u32, datagram: &Datagram) {
    let Some(qp) = core.res.ud_qps.get(qpn) else {
        add(&core.counters.roce_rx_drops, 1);
        return;
    };
    if !matches!(qp.state, state::RTR | state::RTS | state::SQER) {
        add(&core.counters.roce_rx_drops, 1);
        return;
    }
    let wanted = if qp.service == service_type::QP1 {
        QP1_QKEY
    } else {
        qp.q_key
    };
    if datagram.q_key != wanted {
        add(&core.counters.ud_qkey_drops, 1);
        return;
    }
    // A receive page fault waits for PAGE_FAULT_RESUME: the datagram is dropped (`page_fault`).
    let gate = super::page_fault::receive_gate(core, qpn);
    if gate == ReceiveGate::Waiting {
        add(&core.counters.roce_rx_drops, 1);
        return;
    }
    let Some(taken) = take_receive(core, qpn) else {
        add(&core.counters.ud_no_receive_drops, 1);
        return;
    };
    if gate == ReceiveGate::Failed {
        // Resumed with an error: the WQE the fault named fails with this datagram.
        post_error_cqe(
            core,
            qpn,
            taken.index,
            CqeSyndrome::LocalProtection,
            Side::Receive,
        );
        return;
    }
    match scatter(core, &taken, &datagram.grh, datagram.payload) {
        Ok(()) => {}
        // On-demand paging: the datagram is dropped (no retransmission on UD) and the WQE
        // stays the QP's for the next one (`page_fault`).
        Err(Scattered::NotPresent)
            if super::page_fault::receive(core, qpn, taken, datagram.payload.len()) =>
        {
            add(&core.counters.roce_rx_drops, 1);
            return;
        }
        Err(fault) => {
            let syndrome = match fault {
                Scattered::Error(syndrome) => syndrome,
                Scattered::NotPresent => CqeSyndrome::LocalProtection,
            };
            post_error_cqe(core, qpn, taken.index, syndrome, Side::Receive);
            return;
        }
    }
    add(&core.counters.ud_delivered, 1);
    let l3 = if datagram.v4 {
        L3_HEADER_IPV4
    } else {
        L3_HEADER_IPV6
    };
    let done = Delivered {
        index: taken.index,
        bytes: (GRH_LEN + datagram.payload.len()) as u32,
        flags_rqpn: (GRH_IN_BUFFER << 28) | (l3 << 24) | datagram.source_qpn,
        imm: datagram.imm,
        pkey: datagram.pkey,
        solicited: datagram.solicited,
    };
    responder_cqe(core, qpn, &done);
}

/// The datagram QP a packet for destination QP `dest` goes to: for QP 1 the function's GSI
/// QP (its lowest-numbered), otherwise the UD QP of that number.
fn target(core: &Core, dest: u32) -> Option<u32> {
    if dest == 1 {
        return core
            .res
            .ud_qps
            .iter()
            .find(|(_, qp)| qp.service == service_type::QP1)
            .map(|(qpn, _)| qpn);
    }
    core.res
        .ud_qps
        .get(dest)
        .filter(|qp| qp.service == service_type::UD)
        .map(|_| dest)
}

/// Takes the next receive WQE of QP `qpn`'s own ring or RMP (the WQE a page fault held for the
/// QP, or else a linked-list RMP's head);
/// `None` when none is posted, or the doorbell record cannot be read or claims too many.
fn take_receive(core: &mut Core, qpn: u32) -> Option<ReceiveInProgress> {
    let qp = core.res.ud_qps.get(qpn)?;
    match qp.receive {
        RcReceive::Own {
            log_size,
            log_stride,
        } => {
            let word = core.dma_read_be32(qp.dbr).ok()?;
            let posted = (word as u16).wrapping_sub(qp.resp.rq_consumed);
            if posted == 0 || u32::from(posted) > 1 << log_size {
                return None;
            }
            let qp = core.res.ud_qps.get_mut(qpn)?;
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
            // A WQE a page fault held for this QP goes first (`page_fault::receive`).
            if let Some(held) = core.res.ud_qps.get_mut(qpn)?.resp.recv.take() {
                return Some(held);
            }
            let rmp = core.res.rmps.get(rmpn).filter(|r| r.state == QState::Rdy)?;
            let posted = crate::engine::rq::posted(core, &rmp.wq).filter(|&p| p > 0)?;
            let w = crate::engine::rq::take_rmp_wqe(core, rmpn, posted)?;
            Some(ReceiveInProgress {
                index: w.index,
                addr: w.addr,
                len: w.len,
                data_at: w.data_at,
                pd: w.pd,
                bytes: 0,
            })
        }
        // Datagram QPs are never XRC.
        RcReceive::None | RcReceive::Xrc { .. } => None,
    }
}

/// Why a datagram did not scatter.
enum Scattered {
    /// The receive fails with this syndrome.
    Error(CqeSyndrome),
    /// A page behind a key is not present (a page fault where they are reported); nothing
    /// was written.
    NotPresent,
}

impl From<CqeSyndrome> for Scattered {
    fn from(syndrome: CqeSyndrome) -> Self {
        Scattered::Error(syndrome)
    }
}

/// Scatters the GRH area `grh` and then `payload` through the data segments of `taken`, in
/// order, each filled to its byte count. Nothing is written when they do not hold it all, or
/// when a page behind them is not present (every page is looked at first).
fn scatter(
    core: &Core,
    taken: &ReceiveInProgress,
    grh: &[u8],
    payload: &[u8],
) -> Result<(), Scattered> {
    let mut wqe = [0u8; MAX_RECEIVE_WQE];
    let wqe = &mut wqe[..taken.len.min(MAX_RECEIVE_WQE)];
    core.dma_read(taken.addr, wqe)
        .map_err(|_| CqeSyndrome::LocalProtection)?;
    let segments = wqe[taken.data_at.min(wqe.len())..]
        .chunks_exact(WQE_DS)
        .filter_map(|seg| DataSeg::new(seg).ok())
        .take_while(|seg| seg.lkey() != INVALID_LKEY && seg.byte_count() != 0);
    let room: u64 = segments
        .clone()
        .map(|seg| u64::from(seg.byte_count()))
        .sum();
    let total = grh.len() + payload.len();
    if room < total as u64 {
        return Err(CqeSyndrome::LocalLength.into());
    }
    let mut left = total;
    for seg in segments.clone() {
        if left == 0 {
            break;
        }
        let n = (seg.byte_count() as usize).min(left);
        let walked = translate(
            core,
            seg.lkey(),
            taken.pd,
            seg.addr(),
            n as u64,
            true,
            |_, _, _| Ok(()),
        );
        if walked == Err(KeyFault::NotPresent) {
            return Err(Scattered::NotPresent);
        }
        left -= n;
    }
    let mut done = 0usize;
    for seg in segments {
        if done == total {
            break;
        }
        let n = (seg.byte_count() as usize).min(total - done);
        translate(
            core,
            seg.lkey(),
            taken.pd,
            seg.addr(),
            n as u64,
            true,
            |iova, offset, bytes| {
                // The piece `done + offset ..` of the GRH area followed by the payload.
                let mut from = done + offset as usize;
                let end = from + bytes as usize;
                let mut to = iova;
                while from < end {
                    let (src, upto) = if from < grh.len() {
                        (&grh[from..grh.len().min(end)], grh.len().min(end))
                    } else {
                        (&payload[from - grh.len()..end - grh.len()], end)
                    };
                    core.dma_write(to, src).map_err(|_| KeyFault::Bounds)?;
                    to += src.len() as u64;
                    from = upto;
                }
                Ok(())
            },
        )
        .map_err(|_| Scattered::Error(CqeSyndrome::LocalProtection))?;
        done += n;
    }
    Ok(())
}

/// What a responder CQE reports of a delivered datagram.
struct Delivered {
    index: u16,
    bytes: u32,
    flags_rqpn: u32,
    imm: Option<u32>,
    pkey: u16,
    solicited: bool,
}

/// Writes the responder CQE of a delivered datagram to QP `qpn`'s receive CQ.
fn responder_cqe(core: &mut Core, qpn: u32, done: &Delivered) {
    let Some(qp) = core.res.ud_qps.get(qpn) else {
        return;
    };
    let cqn = qp.cqn_rcv;
    let mut cqe = [0u8; 64];
    if let Ok(mut c) = Cqe64::new(&mut cqe[..]) {
        let op = if done.imm.is_some() {
            CqeOpcode::RespSendImm
        } else {
            CqeOpcode::RespSend
        };
        c.set_opcode(op as u8)
            .set_byte_cnt(done.bytes)
            .set_flags_rqpn(done.flags_rqpn)
            .set_imm_inval_pkey(done.imm.unwrap_or(u32::from(done.pkey)))
            .set_l3_ok(true)
            .set_l4_ok(true)
            .set_qpn(qpn)
            .set_wqe_counter(done.index)
            .set_se(done.solicited);
    }
    post_cqe(core, qpn, cqn, &mut cqe);
}
