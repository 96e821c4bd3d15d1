//! Work queue fields shared by a cyclic RQ and a shared receive ring (RMP).

use cxdirect_dma::DmaRegion;
use cxdirect_hw::wq::Wq;

/// The IOVA of each page of a work queue's ring, in order (the `pas` list of CREATE_RQ and
/// CREATE_RMP).
pub(crate) fn ring_pages(ring: &DmaRegion) -> impl ExactSizeIterator<Item = u64> + '_ {
    let page = ring.page_size();
    (0..ring.len().div_ceil(page)).map(move |i| ring.iova() + (i * page) as u64)
}

/// The work queue fields a cyclic RQ and an RMP share: 16-byte WQEs, `2^log` of them in
/// `ring`'s pages, doorbell record `dbr`, protection domain `pd`.
pub(crate) fn fill_cyclic_wq(
    mut wq: Wq<&mut [u8]>,
    pd: u32,
    ring: &DmaRegion,
    dbr: &DmaRegion,
    log: u8,
) {
    wq.set_wq_type(1)
        .set_pd(pd)
        .set_dbr_addr(dbr.iova())
        .set_log_wq_stride(4)
        .set_log_wq_pg_sz((ring.page_size().trailing_zeros() - 12) as u8)
        .set_log_wq_sz(log);
}
