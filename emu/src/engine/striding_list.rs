//! Linked-list striding RQs (`wq_type` 2, `MLX5_WQ_TYPE_LINKED_LIST_STRIDING_RQ`), the
//! multi-packet RQs Linux's mlx5e opens: each WQE (`struct mlx5e_rx_wqe_ll`) is a next segment
//! (`mlx5_wqe_srq_next_seg`, its `next_wqe_index`) then one data segment over the WQE's strides,
//! the same layout as a cyclic striding WQE whose header is reserved. The device takes WQE 0
//! first and, each time it finishes a WQE, moves to the one that WQE's next segment names,
//! read from host memory then: software links a finished WQE at the list's tail as it
//! completes (`mlx5_wq_ll_pop` writes its index into the previous tail's next segment) and
//! posts WQEs by moving its head along the list, counting them in the doorbell record
//! (`mlx5_wq_ll_push`, `mlx5_wq_ll_update_db_record`: the record holds how many were posted
//! since the ring's reset). Frames fill the strides as on a cyclic striding RQ
//! (`engine::striding`), whose completions name the WQE by its index in the ring.

use crate::counters::add;
use crate::function::Core;
use crate::objects::{RqMemory, WorkQueue};
use cxdirect_hw::wqe::{SrqNextSeg, WQE_DS};

use super::rq::receive_ring_mut;

/// The WQE the device fills now: the list's head, or for a cyclic ring the next in order.
pub(crate) fn current(wq: &WorkQueue) -> u16 {
    wq.linked_head.unwrap_or(wq.consumed)
}

/// How many WQEs to read at once from the current one on: list order is not index order, so
/// a linked list is read a WQE at a time.
pub(crate) fn read_ahead(wq: &WorkQueue, available: u16) -> u16 {
    if wq.linked_head.is_some() {
        1
    } else {
        available
    }
}

/// The current WQE of RQ `rqn` is finished: for a linked list, the one its next segment names
/// becomes current. False when that index is past the ring (or the segment cannot be read):
/// the caller moves the RQ to error, as nothing the device could take is named.
pub(crate) fn advance(core: &mut Core, rqn: u32) -> bool {
    let Some(wq) = receive_ring_mut(core, rqn, RqMemory::Own) else {
        return false;
    };
    let Some(head) = wq.linked_head else {
        return true;
    };
    // What was read ahead is of WQEs the list may since have relinked.
    wq.fetched.clear();
    let entries = wq.entries();
    let slot = u64::from(head) & u64::from(entries - 1);
    let Some(addr) = wq.buf.addr(slot * wq.stride()) else {
        return false;
    };
    let mut seg = [0u8; WQE_DS];
    let next = core
        .dma_read(addr, &mut seg)
        .ok()
        .and_then(|()| SrqNextSeg::new(&seg[..]).ok().map(|s| s.next_wqe_index()))
        .filter(|&next| u32::from(next) < entries);
    let Some(next) = next else {
        add(&core.counters.rx_striding_bad_links, 1);
        return false;
    };
    if let Some(wq) = receive_ring_mut(core, rqn, RqMemory::Own) {
        wq.linked_head = Some(next);
    }
    true
}
