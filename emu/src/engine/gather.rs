//! Gathering a send WQE's message: its data segments read through memory keys and its inline
//! segments copied, as both RDMA transports (RC and UD) send them.

use crate::function::Core;
use crate::translate::{translate, KeyFault};
use cxdirect_hw::cqe::CqeSyndrome;
use cxdirect_hw::wqe::{self, DataSeg, INLINE_SEG, WQE_DS};

/// Bytes a gather reads (and its message grows by) at a time.
const GATHER_PIECE: u64 = 64 << 10;

/// Why a gather stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GatherFault {
    /// The WQE fails with this syndrome.
    Error(CqeSyndrome),
    /// A page behind a key is not present (its MTT entry lacks the read bit): a page fault
    /// where the transport resolves them, a local protection error elsewhere.
    NotPresent,
}

impl From<CqeSyndrome> for GatherFault {
    fn from(syndrome: CqeSyndrome) -> Self {
        GatherFault::Error(syndrome)
    }
}

/// Gathers the message of the data and inline segments of `wqe` from byte `at` on into
/// `message` (cleared first): data segments read through their lkeys in protection domain
/// `pd`, inline segments copied. A message above `max` bytes, or an inline segment running
/// past the WQE, is a local length error; a key that does not cover its segment a local
/// protection error; a page not present behind a key
/// [`GatherFault::NotPresent`] (a page fault where the function reports them).
pub(crate) fn gather_paged(
    core: &Core,
    pd: u32,
    max: usize,
    wqe: &[u8],
    mut at: usize,
    message: &mut Vec<u8>,
) -> Result<(), GatherFault> {
    message.clear();
    while at + 4 <= wqe.len() {
        let head = u32::from_be_bytes([wqe[at], wqe[at + 1], wqe[at + 2], wqe[at + 3]]);
        if head & INLINE_SEG != 0 {
            let len = (head & !INLINE_SEG) as usize;
            let end = at + 4 + len;
            if end > wqe.len() {
                return Err(CqeSyndrome::LocalLength.into());
            }
            message.extend_from_slice(&wqe[at + 4..end]);
            at += wqe::inline_seg_ds(len) * WQE_DS;
        } else {
            if at + WQE_DS > wqe.len() {
                break;
            }
            let seg = DataSeg::new(&wqe[at..at + WQE_DS])
                .map_err(|_| GatherFault::Error(CqeSyndrome::LocalLength))?;
            let len = seg.byte_count() as usize;
            at += WQE_DS;
            if len == 0 {
                continue;
            }
            if message.len() + len > max {
                return Err(CqeSyndrome::LocalLength.into());
            }
            let start = message.len();
            if crate::signature::is_signature_key(core, seg.lkey()) {
                // A signature key's bytes are its wire view, protection inserted or checked.
                message.resize(start + len, 0);
                crate::signature::read(
                    core,
                    seg.lkey(),
                    pd,
                    seg.addr(),
                    &mut message[start..],
                    None,
                )
                .map_err(|_| GatherFault::Error(CqeSyndrome::LocalProtection))?;
                continue;
            }
            translate(
                core,
                seg.lkey(),
                pd,
                seg.addr(),
                len as u64,
                false,
                |iova, offset, bytes| {
                    // The message grows as its bytes are read, a piece at a time: a segment
                    // claiming more than the memory behind its key costs no more than that
                    // memory, not an allocation of the claimed length.
                    let mut done = 0;
                    while done < bytes {
                        let piece = (bytes - done).min(GATHER_PIECE);
                        let at = start + (offset + done) as usize;
                        message.resize(at + piece as usize, 0);
                        core.dma_read(iova + done, &mut message[at..])
                            .map_err(|_| KeyFault::Bounds)?;
                        done += piece;
                    }
                    Ok(())
                },
            )
            .map_err(|fault| match fault {
                KeyFault::NotPresent => GatherFault::NotPresent,
                _ => GatherFault::Error(CqeSyndrome::LocalProtection),
            })?;
        }
    }
    if message.len() > max {
        return Err(CqeSyndrome::LocalLength.into());
    }
    Ok(())
}
