//! Hardware tag matching on an XRQ (`IBV_SRQT_TM`), as libmlx5 drives and reads it.
//!
//! List operations: a TAG_MATCHING WQE (opcode 0x28) on a QP whose SRQ is the XRQ carries a
//! tag-matching segment (`set_tm_seg` in libmlx5's `providers/mlx5/qp.c`): APPEND fills the
//! list's next entry with a tag, a mask and one data segment and names the entry the next
//! APPEND fills; REMOVE empties an entry; NOP changes nothing. With `SW_CNT` the segment's
//! `sw_cnt` becomes the software phase; with `CQE_REQ` the operation completes on the XRQ's CQ
//! as a NO_PACKET CQE (app tag matching, app_op APPEND / REMOVE / NOOP, the device phase in
//! `hw_phase_cnt`, REMOVE's success bit), which libmlx5's `handle_tag_matching` pairs with its
//! operation queue. The WQE itself retires in order without a send CQE (libmlx5 posts it with
//! `fm_ce_se` 0).
//!
//! Receives: every SEND to the XRQ starts with a tag-matching header (`struct ibv_tmh`). A
//! no-tag message, and a tagged one that matches no entry (entries are tried in append order,
//! matching when `tag & mask == entry tag`, ibv_post_srq_ops(3)) or arrives while software
//! and device phases differ, lands whole in an ordinary receive WQE and completes as no-tag or
//! unexpected (the latter with the TMH in the CQE, and counted in the device phase). A matched
//! eager message lands in the entry's buffer without its TMH and completes as CONSUMED_MSG
//! naming the entry in `app_info`, the TMH in the CQE; the entry is released. A matched
//! rendezvous request is served by the device itself (`tag_rendezvous`).

use super::qp_error::post_cqe_as;
use crate::counters::add;
use crate::function::Core;
use crate::objects::rc::{RcReceive, ReceiveInProgress};
use crate::objects::tm::{TagEntry, TmLanding, Xrq};
use crate::translate::{translate, KeyFault};
use cxdirect_hw::cqe::{Cqe64, CqeOpcode, CqeSyndrome};
use cxdirect_hw::wqe::{DataSeg, WQE_DS};
use cxdirect_hw::xrq::{
    cqe_app_op, tm_flags, tm_opcode, tmh_op, TmSeg, CQE_APP_TAG_MATCHING, MAX_RNDV_MSG, RVH_LEN,
    TMH_LEN, TM_CQE_SUCCESS,
};

/// The tag-matching XRQ QP `qpn` takes its receives from.
pub(super) fn xrq_of(core: &Core, qpn: u32) -> Option<u32> {
    let qp = core.res.qps.get(qpn)?;
    let RcReceive::Shared(n) = qp.receive else {
        return None;
    };
    core.res
        .rmps
        .get(n)
        .and_then(|r| r.xrq.as_deref())
        .filter(|x| x.list.is_some())
        .map(|_| n)
}

pub(super) fn xrq_mut(core: &mut Core, xrqn: u32) -> Option<&mut Xrq> {
    core.res
        .rmps
        .get_mut(xrqn)
        .and_then(|r| r.xrq.as_deref_mut())
}

/// Executes the TAG_MATCHING WQE `wqe` (`ds` 16-byte segments) of QP `qpn`. A QP without a
/// tag-matching XRQ, a short WQE, an unknown operation, or an APPEND into an entry that is out
/// of the list or still holds a tag (the list full) is refused: the WQE fails with a local QP
/// operation error.
pub(super) fn list_operation(
    core: &mut Core,
    qpn: u32,
    wqe: &[u8],
    ds: usize,
) -> Result<(), CqeSyndrome> {
    let bad = CqeSyndrome::LocalQpOperation;
    let xrqn = xrq_of(core, qpn).ok_or(bad)?;
    if ds < 3 || wqe.len() < 3 * WQE_DS {
        return Err(bad);
    }
    let seg = TmSeg::new(&wqe[WQE_DS..3 * WQE_DS]).map_err(|_| bad)?;
    let (op, flags, index, sw_cnt) = (seg.opcode(), seg.flags(), seg.index(), seg.sw_cnt());
    let (tag, mask) = (seg.append_tag(), seg.append_mask());
    let buffer = if op == tm_opcode::APPEND {
        if ds < 4 || wqe.len() < 4 * WQE_DS {
            return Err(bad);
        }
        let d = DataSeg::new(&wqe[3 * WQE_DS..4 * WQE_DS]).map_err(|_| bad)?;
        Some((d.addr(), d.lkey(), d.byte_count()))
    } else {
        None
    };
    let x = xrq_mut(core, xrqn).ok_or(bad)?;
    let (cqn, user_index) = (x.cqn, x.user_index);
    let list = x.list.as_mut().ok_or(bad)?;
    let entries = list.entries.len();
    let mut success = 0;
    let app_op = match op {
        tm_opcode::NOP => cqe_app_op::NOOP,
        tm_opcode::APPEND => {
            let slot = list.append_next;
            let free = list
                .entries
                .get(usize::from(slot))
                .is_some_and(|e| e.is_none());
            if !free || usize::from(index) >= entries || index == slot {
                return Err(bad);
            }
            let (addr, lkey, len) = buffer.ok_or(bad)?;
            list.entries[usize::from(slot)] = Some(TagEntry {
                tag,
                mask,
                addr,
                lkey,
                len,
                consumed: false,
            });
            list.order.push(slot);
            list.append_next = index;
            cqe_app_op::APPEND
        }
        tm_opcode::REMOVE => {
            let held = list
                .entries
                .get(usize::from(index))
                .copied()
                .flatten()
                .is_some_and(|e| !e.consumed);
            if usize::from(index) >= entries {
                return Err(bad);
            }
            if held {
                list.entries[usize::from(index)] = None;
                list.unorder(index);
                success = TM_CQE_SUCCESS;
            }
            cqe_app_op::REMOVE
        }
        _ => return Err(bad),
    };
    if flags & tm_flags::SW_CNT != 0 {
        list.sw_phase = sw_cnt;
    }
    let hw_phase = list.hw_phase;
    if flags & tm_flags::CQE_REQ != 0 {
        let mut cqe = [0u8; 64];
        cqe[..4].copy_from_slice(&success.to_be_bytes());
        cqe[4..6].copy_from_slice(&hw_phase.to_be_bytes());
        if let Ok(mut c) = Cqe64::new(&mut cqe[..]) {
            c.set_opcode(CqeOpcode::NoPacket as u8)
                .set_app(CQE_APP_TAG_MATCHING)
                .set_app_op(app_op)
                .set_app_info(index)
                .set_qpn(qpn);
        }
        post_cqe_as(core, qpn, cqn, user_index, &mut cqe);
    }
    Ok(())
}

/// How the first packet `payload` of a SEND (the whole message when `only`) to QP `qpn` lands,
/// when the QP's SRQ is a tag-matching XRQ; `None` otherwise. Matching consumes the entry;
/// an unexpected message counts in the device phase.
pub(super) fn classify(core: &mut Core, qpn: u32, payload: &[u8], only: bool) -> Option<TmLanding> {
    let xrqn = xrq_of(core, qpn)?;
    // The QP sends the rendezvous READ itself: it must carry the offload and be in RTS.
    let sending = core
        .res
        .qps
        .get(qpn)
        .is_some_and(|qp| qp.rndv_offload && qp.state == cxdirect_hw::qp::state::RTS);
    let offload = core
        .res
        .rmps
        .get(xrqn)
        .and_then(|r| r.xrq.as_deref())
        .is_some_and(|x| x.rndv);
    let mut tmh = [0u8; TMH_LEN];
    let op = if payload.len() < TMH_LEN {
        None
    } else {
        tmh.copy_from_slice(&payload[..TMH_LEN]);
        Some(tmh[0])
    };
    let no_tag = TmLanding::Ordinary {
        app_op: cqe_app_op::NO_TAG,
        tmh: [0; TMH_LEN],
    };
    let matchable = match op {
        Some(tmh_op::NO_TAG) => return Some(no_tag),
        Some(tmh_op::EAGER) => true,
        // A rendezvous request the device can serve: one packet of TMH and RVH within the
        // largest header it takes (`max_rndv_hdr_size`), the offload on, the QP able to send
        // its READ. Any other is handed to software as unexpected, the protocol's own path
        // for one no tag held (Documentation/tag_matching.md).
        Some(tmh_op::RNDV) => {
            only && offload
                && sending
                && (TMH_LEN + RVH_LEN..=MAX_RNDV_MSG).contains(&payload.len())
        }
        _ => {
            // Too short for a TMH, a FIN, or a reserved operation: nothing to match on;
            // software sees the message whole.
            add(&core.counters.tm_malformed, 1);
            return Some(no_tag);
        }
    };
    let tag = u64::from_be_bytes(tmh[8..16].try_into().unwrap_or_default());
    let list = xrq_mut(core, xrqn)?.list.as_mut()?;
    let found = if list.in_sync() && matchable {
        list.find(tag)
    } else {
        None
    };
    match found.and_then(|i| Some((i, list.entries.get(usize::from(i)).copied().flatten()?))) {
        Some((index, entry)) => {
            list.unorder(index);
            if let Some(e) = list
                .entries
                .get_mut(usize::from(index))
                .and_then(|e| e.as_mut())
            {
                e.consumed = true;
            }
            if op == Some(tmh_op::RNDV) {
                let mut headers = [0u8; TMH_LEN + RVH_LEN];
                headers.copy_from_slice(&payload[..TMH_LEN + RVH_LEN]);
                return Some(TmLanding::Rendezvous {
                    index,
                    entry,
                    headers,
                });
            }
            Some(TmLanding::Tag {
                index,
                entry,
                tmh,
                split: !only,
            })
        }
        None => {
            list.hw_phase = list.hw_phase.wrapping_add(1);
            Some(TmLanding::Ordinary {
                app_op: cqe_app_op::UNEXPECTED,
                tmh,
            })
        }
    }
}

/// Undoes [`classify`] for a message that found no ordinary receive WQE (an RNR NAK: the
/// requester sends it again): an unexpected one is not counted in the device phase.
pub(super) fn unclassify(core: &mut Core, qpn: u32, landing: Option<TmLanding>) {
    let Some(TmLanding::Ordinary {
        app_op: cqe_app_op::UNEXPECTED,
        ..
    }) = landing
    else {
        return;
    };
    let Some(xrqn) = xrq_of(core, qpn) else {
        return;
    };
    if let Some(list) = xrq_mut(core, xrqn).and_then(|x| x.list.as_mut()) {
        list.hw_phase = list.hw_phase.wrapping_sub(1);
    }
}

/// The receive in progress that stands for tagged buffer `index` (the responder's message
/// state needs one; the bytes land through [`scatter_tag`]).
pub(super) fn tag_receive(core: &Core, qpn: u32, index: u16) -> ReceiveInProgress {
    let pd = xrq_of(core, qpn)
        .and_then(|n| core.res.rmps.get(n))
        .map_or(0, |r| r.wq.pd);
    ReceiveInProgress {
        index,
        addr: 0,
        len: 0,
        data_at: 0,
        pd,
        bytes: 0,
    }
}

/// Writes `data` into tagged buffer `entry` at byte `at` through its lkey in the XRQ's
/// protection domain `pd`; past the buffer is a local length error.
pub(super) fn scatter_tag(
    core: &Core,
    entry: &TagEntry,
    pd: u32,
    at: u32,
    data: &[u8],
) -> Result<(), CqeSyndrome> {
    let end = u64::from(at) + data.len() as u64;
    if end > u64::from(entry.len) {
        return Err(CqeSyndrome::LocalLength);
    }
    if data.is_empty() {
        return Ok(());
    }
    translate(
        core,
        entry.lkey,
        pd,
        entry.addr + u64::from(at),
        data.len() as u64,
        true,
        |iova, offset, bytes| {
            core.dma_write(iova, &data[offset as usize..(offset + bytes) as usize])
                .map_err(|_| KeyFault::Bounds)
        },
    )
    .map_err(|_| CqeSyndrome::LocalProtection)
}

/// The match of a tagged message spanning packets completes at its first packet as CONSUMED
/// (the TMH in the CQE), its data apart at the last (Documentation/tag_matching.md: matching
/// and data transfer are distinct events for larger messages).
pub(super) fn matched(core: &mut Core, qpn: u32, landing: TmLanding) {
    let TmLanding::Tag {
        index,
        tmh,
        split: true,
        ..
    } = landing
    else {
        return;
    };
    let Some(xrqn) = xrq_of(core, qpn) else {
        return;
    };
    let Some(x) = xrq_mut(core, xrqn) else {
        return;
    };
    let (cqn, user_index) = (x.cqn, x.user_index);
    let mut cqe = [0u8; 64];
    cqe[..TMH_LEN].copy_from_slice(&tmh);
    if let Ok(mut c) = Cqe64::new(&mut cqe[..]) {
        c.set_opcode(CqeOpcode::RespSend as u8)
            .set_app(CQE_APP_TAG_MATCHING)
            .set_app_op(cqe_app_op::CONSUMED)
            .set_app_info(index)
            .set_qpn(qpn);
    }
    post_cqe_as(core, qpn, cqn, user_index, &mut cqe);
}

/// Writes the completion of a SEND that landed as `landing` on QP `qpn`: `index` is the
/// ordinary WQE's counter (or the entry), `bytes` what landed. A tagged buffer is released.
pub(super) fn complete(core: &mut Core, qpn: u32, landing: TmLanding, index: u16, bytes: u32) {
    let Some(xrqn) = xrq_of(core, qpn) else {
        return;
    };
    let Some(x) = xrq_mut(core, xrqn) else {
        return;
    };
    let (cqn, user_index) = (x.cqn, x.user_index);
    let (app_op, app_info, tmh) = match landing {
        TmLanding::Ordinary { app_op, tmh } => (app_op, 0, tmh),
        TmLanding::Rendezvous { .. } => return,
        TmLanding::Tag {
            index: e,
            tmh,
            split,
            ..
        } => {
            if let Some(slot) = x
                .list
                .as_mut()
                .and_then(|l| l.entries.get_mut(usize::from(e)))
            {
                *slot = None;
            }
            if split {
                // The data of a message whose match completed at its first packet: the
                // second completion, without the TMH.
                (cqe_app_op::EXPECTED, e, [0; TMH_LEN])
            } else {
                (cqe_app_op::CONSUMED_MSG, e, tmh)
            }
        }
    };
    let mut cqe = [0u8; 64];
    cqe[..TMH_LEN].copy_from_slice(&tmh);
    if let Ok(mut c) = Cqe64::new(&mut cqe[..]) {
        c.set_opcode(CqeOpcode::RespSend as u8)
            .set_app(CQE_APP_TAG_MATCHING)
            .set_app_op(app_op)
            .set_app_info(app_info)
            .set_byte_cnt(bytes)
            .set_qpn(qpn)
            .set_wqe_counter(index);
    }
    post_cqe_as(core, qpn, cqn, user_index, &mut cqe);
}
