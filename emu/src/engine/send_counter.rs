//! How far software posted a QP's send ring: the doorbell record's send word, or, for a QP
//! created without one (`send_dbr_mode` NO_DBR_EXT), the counter its doorbells announced.
//!
//! A doorbell names the last WQE posted by the first eight bytes of its control segment (its
//! index and, in `qpn_ds`, its size in 16-byte units), so a QP without a record is posted up to
//! the end of that WQE. rdma-core's DevX test (`post_send` of tests/mlx5_base.py) rings such a
//! QP through the UAR page's doorbell-less register and writes no record.

use crate::dma::DmaError;
use crate::function::Core;
use crate::objects::rc::{Qp, SendCounter};
use cxdirect_hw::wqe;

/// The UAR register a send doorbell was written to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Register {
    /// A BlueFlame register (`UAR_BF_OFFSET` and its alternating halves).
    BlueFlame,
    /// The doorbell-less register (`UAR_DBR_LESS_DOORBELL`), for QPs without a record.
    RecordLess,
}

/// QP `qp`'s send producer counter: its record's send word, or what its doorbells announced.
pub(crate) fn posted(core: &Core, qp: &Qp) -> Result<u16, DmaError> {
    match qp.send_counter {
        SendCounter::Record => core.dma_read_be32(qp.dbr + 4).map(|word| word as u16),
        SendCounter::Doorbells(counter) => Ok(counter),
    }
}

/// Takes a doorbell for QP `qpn` (RC family or datagram) written to `register` of UAR `uar`:
/// for a QP without a record, moves its counter past the WQE `first8` names. False (nothing
/// changed) when the doorbell cannot ring this QP: the doorbell-less register rung for a QP
/// that has a record, another UAR's doorbell, or a WQE that would put the counter behind where
/// it was or more than a ring ahead of what the device executed. The caller counts it.
pub(crate) fn announce(
    core: &mut Core,
    uar: u32,
    qpn: u32,
    first8: [u8; 8],
    register: Register,
) -> bool {
    let qp = if core.res.qps.contains(qpn) {
        core.res.qps.get_mut(qpn)
    } else {
        core.res.ud_qps.get_mut(qpn)
    };
    let Some(qp) = qp else {
        return false;
    };
    let SendCounter::Doorbells(counter) = qp.send_counter else {
        return register == Register::BlueFlame;
    };
    let Some(log_sq) = qp.log_sq_size else {
        return false;
    };
    if qp.uar != uar {
        return false;
    }
    let index = u16::from_be_bytes([first8[1], first8[2]]);
    let ds = usize::from(first8[7]);
    let bbs = u16::try_from(wqe::wqebbs(ds).max(1)).unwrap_or(u16::MAX);
    let end = index.wrapping_add(bbs);
    let consumed = qp.sq_consumed;
    let ahead = u32::from(end.wrapping_sub(consumed));
    if ahead > 1u32 << log_sq || ahead < u32::from(counter.wrapping_sub(consumed)) {
        return false;
    }
    qp.send_counter = SendCounter::Doorbells(end);
    true
}
