//! Flushing an Ethernet SQ in error (`sqc.flush_in_error_en`, which mlx5e, mlx5_ib and DPDK
//! set on every SQ): after the failed WQE's error CQE, every WQE posted past it completes with
//! a flush error CQE (syndrome `WR_FLUSH_ERR`, opcode REQ_ERR), those posted already and those
//! a later doorbell announces, until the driver takes the SQ back to reset. mlx5e's recovery
//! waits for exactly that: `mlx5e_wait_for_sq_flush` (en/reporter_tx.c) polls until its
//! consumer counter reaches the producer counter, and only then moves the SQ to reset and
//! ready again; an SQ that is not flushed leaves it to time out and the queue stopped.

use crate::counters::{add, QueueKind};
use crate::function::Core;
use crate::objects::QState;
use cxdirect_hw::cqe::{CqeOpcode, CqeSyndrome};
use cxdirect_hw::wqe::{CtrlSeg, WQE_BB, WQE_DS};

/// Bytes of a WQE's control segment.
const CTRL_BYTES: usize = 16;

/// Flushes SQ `sqn` (in error, created with `flush_in_error_en`) up to producer index `pi`:
/// the WQEs from its consumer index on, past the failed one when `failed_first` (it has its
/// error CQE already), each completes with a flush CQE, and they are consumed. A WQE whose
/// control segment cannot be read, or whose size runs past `pi`, ends the walk: its CQE
/// covers it and whatever follows. Nothing is done for an SQ that does not ask for it.
pub(crate) fn flush(core: &mut Core, sqn: u32, pi: u16, failed_first: bool) {
    let Some(sq) = core.res.sqs.get(sqn) else {
        return;
    };
    if !sq.flush_in_error || sq.state != QState::Err {
        return;
    }
    let (cqn, mut index) = (sq.cqn, sq.wq.consumed);
    let mut first = failed_first;
    while index != pi {
        let (opcode, bbs) = wqe_shape(core, sqn, index, pi);
        if !first {
            write_flush_cqe(core, sqn, cqn, index, opcode);
        }
        first = false;
        index = match bbs {
            Some(bbs) => index.wrapping_add(bbs),
            None => pi,
        };
    }
    if let Some(sq) = core.res.sqs.get_mut(sqn) {
        sq.wq.consumed = pi;
    }
}

/// The opcode and size in WQEBBs of the WQE at `index`, when its control segment reads and
/// its size fits before `pi`; the opcode 0 and `None` otherwise.
fn wqe_shape(core: &Core, sqn: u32, index: u16, pi: u16) -> (u8, Option<u16>) {
    let Some(sq) = core.res.sqs.get(sqn) else {
        return (0, None);
    };
    let mask = sq.wq.entries() - 1;
    let offset = u64::from(u32::from(index) & mask) * sq.wq.stride();
    let mut ctrl = [0u8; CTRL_BYTES];
    let read = sq
        .wq
        .buf
        .addr(offset)
        .is_some_and(|addr| core.dma_read(addr, &mut ctrl).is_ok());
    let Some(seg) = read.then(|| CtrlSeg::new(&ctrl[..]).ok()).flatten() else {
        return (0, None);
    };
    let bbs = (usize::from(seg.ds() & 0x3f) * WQE_DS).div_ceil(WQE_BB) as u16;
    let fits = bbs > 0 && bbs <= pi.wrapping_sub(index);
    (seg.opcode(), fits.then_some(bbs))
}

/// Writes the flush CQE of the WQE at `index` (opcode `opcode`) to CQ `cqn`.
fn write_flush_cqe(core: &mut Core, sqn: u32, cqn: u32, index: u16, opcode: u8) {
    post_error_cqe(core, (sqn, cqn), index, opcode, CqeSyndrome::WrFlushed);
    core.queue_counters.get_mut(QueueKind::Sq, sqn).flushed += 1;
}

/// Writes an error CQE (opcode REQ_ERR) for SQ `sqn`'s WQE at `index` (opcode `opcode`) with
/// `syndrome` to its CQ `cqn`, its user index in it; a CQE with nowhere to go is counted lost.
/// The failed WQE's CQE (`engine::sq`) and the flush CQEs after it are written alike.
pub(crate) fn post_error_cqe(
    core: &mut Core,
    (sqn, cqn): (u32, u32),
    index: u16,
    opcode: u8,
    syndrome: CqeSyndrome,
) {
    let mut cqe = crate::engine::cq::error_cqe(CqeOpcode::ReqErr, syndrome, opcode, sqn, index);
    if let Some(sq) = core.res.sqs.get(sqn) {
        crate::engine::cq::set_user_index(&mut cqe, sq.user_index);
    }
    if crate::engine::cq::post(core, cqn, &mut cqe).is_err() {
        add(&core.counters.completions_lost, 1);
    }
}
