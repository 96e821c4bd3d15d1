//! Reading an RC QP's send ring: the WQEBBs the requester executes, and what a flush or
//! completion reads back.

use crate::function::Core;
use cxdirect_hw::wqe::{self, WQE_BB};

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
