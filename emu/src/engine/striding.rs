//! Striding (multi-packet) receive queues: a receive WQE is one buffer cut into strides, and
//! frames fill it one after another, each taking as many whole strides as it needs. Each frame
//! completes with its WQE (`wqe_id`), its first stride (`wqe_counter`) and its stride count
//! (bits 29:16 of `byte_cnt`). A frame that does not fit the strides a WQE has left first
//! closes that WQE with a filler completion for them; a WQE is done when all its strides are
//! taken. A cyclic ring's WQEs are taken in order, a linked list's in the order its next
//! segments give ([`striding_list`](super::striding_list)).

use crate::counters::{add, QueueKind};
use crate::function::Core;
use crate::objects::queue_state::Steered;
use crate::objects::{RqMemory, Striding};
use crate::packet::Parsed;
use cxdirect_hw::cqe::{CqeOpcode, CqeSyndrome};
use cxdirect_hw::wq::striding::{byte_cnt, WQE_HEADER};
use cxdirect_hw::wqe::{DataSeg, INVALID_LKEY, WQE_DS};

use super::rq::{
    available_wqes, complete, read_receive_wqes, receive_faults, receive_ring_mut, write_payload,
    Delivered,
};
use super::striding_list::{advance, current, read_ahead};

/// Puts a striding completion's place into `cqe`: WQE `wqe`, first stride `stride`, `count`
/// strides taken, and whether it is a filler (the length then reads 0).
pub(crate) fn place_in_cqe(cqe: &mut [u8; 64], wqe: u16, stride: u16, count: u32, filler: bool) {
    let Ok(mut c) = cxdirect_hw::cqe::Cqe64::new(&mut cqe[..]) else {
        return;
    };
    let len = if filler { 0 } else { c.byte_cnt() };
    c.set_wqe_id(wqe)
        .set_wqe_counter(stride)
        .set_byte_cnt(byte_cnt(filler, count, len));
}

/// Delivers `frame` to striding RQ `rqn` (ready, with its own ring).
pub(crate) fn deliver(
    core: &mut Core,
    rqn: u32,
    striding: Striding,
    frame: &[u8],
    parsed: &Parsed,
    steered: Steered,
) {
    let shift = if striding.two_byte_shift { 2 } else { 0 };
    let need = (frame.len() as u32 + shift).div_ceil(striding.stride_bytes());
    if need > striding.strides() {
        add(&core.counters.rx_striding_too_long, 1);
        return;
    }
    let Some((cqn, counter_set)) = core.res.rqs.get(rqn).map(|rq| (rq.cqn, rq.counter_set)) else {
        return;
    };
    let Some(mut available) = available_wqes(core, rqn, RqMemory::Own, counter_set) else {
        return;
    };
    let mut used = striding.used;
    if used + need > striding.strides() {
        if !close_with_filler(core, rqn, cqn, used, striding.strides()) {
            return;
        }
        used = 0;
        available -= 1;
        if available == 0 {
            let Some(more) = available_wqes(core, rqn, RqMemory::Own, counter_set) else {
                return;
            };
            available = more;
        }
    }
    let Some(wq) = receive_ring_mut(core, rqn, RqMemory::Own) else {
        return;
    };
    let index = current(wq);
    let ahead = read_ahead(wq, available);
    let pd = wq.pd;
    wq.posted_end = wq.consumed.wrapping_add(available);
    let mut wqe = [0u8; WQE_HEADER + WQE_DS];
    let fetched = wq.fetched.copy_held(index, &mut wqe)
        || read_receive_wqes(core, rqn, RqMemory::Own, index, ahead, &mut wqe);
    let (injected, unmapped) = receive_faults(core, rqn, fetched);
    let offset = u64::from(used * striding.stride_bytes() + shift);
    let written = match injected {
        Some(syndrome) => Err(syndrome),
        None if fetched => write_frame(core, &wqe, pd, striding, offset, frame, unmapped),
        None => Err(CqeSyndrome::LocalProtection),
    };
    let done = Delivered {
        rqn,
        cqn,
        index,
        memory: RqMemory::Own,
        steered,
        strides: Some((used as u16, need)),
    };
    let failed = written.is_err();
    complete(core, &done, frame, parsed, written);
    if failed {
        // The RQ is in error now; recovery resets it, and its place with it.
        return;
    }
    used += need;
    if used == striding.strides() {
        retire(core, rqn);
        used = 0;
    }
    set_used(core, rqn, used);
}

/// Writes `frame` at `offset` into the buffer of the WQE's data segment (after its header);
/// the segment must cover every stride.
fn write_frame(
    core: &Core,
    wqe: &[u8],
    pd: u32,
    striding: Striding,
    offset: u64,
    frame: &[u8],
    unmapped: bool,
) -> Result<(), CqeSyndrome> {
    let seg = DataSeg::new(&wqe[WQE_HEADER..WQE_HEADER + WQE_DS])
        .map_err(|_| CqeSyndrome::LocalQpOperation)?;
    let buffer = u64::from(striding.strides()) * u64::from(striding.stride_bytes());
    if seg.lkey() == INVALID_LKEY || u64::from(seg.byte_count()) < buffer {
        return Err(CqeSyndrome::LocalLength);
    }
    write_payload(
        core,
        seg.lkey(),
        pd,
        seg.addr().wrapping_add(offset),
        frame,
        unmapped,
    )
}

/// Closes the current WQE with a filler completion for its strides from `used` on; false
/// when the completion had nowhere to go (the RQ is then in error).
fn close_with_filler(core: &mut Core, rqn: u32, cqn: u32, used: u32, strides: u32) -> bool {
    let Some(index) = receive_ring_mut(core, rqn, RqMemory::Own).map(|wq| current(wq)) else {
        return false;
    };
    let mut cqe = [0u8; 64];
    if let Ok(mut c) = cxdirect_hw::cqe::Cqe64::new(&mut cqe[..]) {
        // No frame, so no rule's flow tag: `sop_drop_qpn` stays 0.
        c.set_opcode(CqeOpcode::RespSend as u8);
    }
    place_in_cqe(&mut cqe, index, used as u16, strides - used, true);
    crate::engine::rq::stamp_user_index(core, rqn, RqMemory::Own, &mut cqe);
    add(&core.counters.rx_striding_fillers, 1);
    if crate::engine::cq::post_receive(core, cqn, rqn, &mut cqe).is_err() {
        add(&core.counters.completions_lost, 1);
        crate::engine::rq::enter_error(core, rqn);
        return false;
    }
    retire(core, rqn);
    set_used(core, rqn, 0);
    true
}

/// The current WQE is done: the next one becomes current. A linked list whose next segment
/// names no WQE of the ring moves the RQ to error.
fn retire(core: &mut Core, rqn: u32) {
    if let Some(wq) = receive_ring_mut(core, rqn, RqMemory::Own) {
        wq.consumed = wq.consumed.wrapping_add(1);
    }
    core.queue_counters.get_mut(QueueKind::Rq, rqn).wqes += 1;
    if !advance(core, rqn) {
        crate::engine::rq::enter_error(core, rqn);
    }
}

fn set_used(core: &mut Core, rqn: u32, used: u32) {
    if let Some(striding) = core
        .res
        .rqs
        .get_mut(rqn)
        .and_then(|rq| rq.striding.as_mut())
    {
        striding.used = used;
    }
}
