//! Fetching WQEs ahead: the WQEs a doorbell (send) or the doorbell record (receive) hands the
//! device are all written before it learns of them, so the engines read several in one DMA
//! read, a read request at a time, and take the next ones from what was read.

use crate::function::Core;
use crate::objects::queue_state::Fetched;
use crate::objects::WorkQueue;

/// Largest WQE fetch, in bytes: one PCIe read request at the usual maximum read request size.
pub(crate) const FETCH_BYTES: usize = 512;

/// Reads WQE `index` of `wq` (a WQE, or a send WQEBB), when [`Fetched::copy_held`] does not
/// hold it, copying its first `out.len()` bytes into `out`: one DMA read of it and of as many of
/// the `ahead - 1` WQEs after it as fit [`FETCH_BYTES`], the ring's page and the ring's end, kept
/// in `fetched`. Returns the bytes read; `Err` when it cannot be read, where a read of several
/// WQEs that failed is tried again for the one alone, so a fault is that WQE's own.
#[inline(never)]
pub(crate) fn read_wqes(
    core: &Core,
    wq: &WorkQueue,
    fetched: &mut Fetched,
    index: u16,
    ahead: u16,
    out: &mut [u8],
) -> Result<u64, ()> {
    fetched.clear();
    let mask = wq.entries() - 1;
    let stride = wq.stride() as usize;
    let offset = u64::from(u32::from(index) & mask) * stride as u64;
    let addr = wq.buf.addr(offset).ok_or(())?;
    let to_ring_end = (mask + 1 - (u32::from(index) & mask)) as usize;
    let in_page = wq.buf.contiguous(offset) as usize / stride.max(1);
    let count = usize::from(ahead)
        .min(FETCH_BYTES / stride.max(1))
        .min(to_ring_end)
        .min(in_page);
    if count < 2 || out.len() != stride {
        core.dma_read(addr, out).map_err(|_| ())?;
        return Ok(out.len() as u64);
    }
    fetched.bytes.resize(FETCH_BYTES, 0);
    let bytes = &mut fetched.bytes[..count * stride];
    if core.dma_read(addr, bytes).is_err() {
        core.dma_read(addr, out).map_err(|_| ())?;
        return Ok(out.len() as u64);
    }
    out.copy_from_slice(&bytes[..stride]);
    fetched.first = index;
    fetched.count = count as u16;
    fetched.stride = stride;
    Ok((count * stride) as u64)
}
