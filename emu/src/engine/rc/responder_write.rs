//! An RDMA WRITE landing at the responder: the WRITE in progress (the first packet's RETH:
//! address, rkey, length) and each packet's data through the rkey, a signature key's view
//! included; the bytes must add up to the RETH length by the last packet.

use super::packet::aeth;
use crate::function::Core;
use crate::objects::rc::WriteInProgress;
use crate::translate::{translate_remote, KeyFault, RemoteAccess};

/// Starts the WRITE whose RETH named `va`, `rkey` and `total` bytes on QP `qpn`.
pub(super) fn set_write(core: &mut Core, qpn: u32, va: u64, rkey: u32, total: u32) {
    if let Some(qp) = core.res.qps.get_mut(qpn) {
        qp.resp.write = Some(WriteInProgress {
            va,
            rkey,
            total,
            done: 0,
        });
    }
}

/// Forgets QP `qpn`'s WRITE in progress.
pub(super) fn clear_write(core: &mut Core, qpn: u32) {
    if let Some(qp) = core.res.qps.get_mut(qpn) {
        qp.resp.write = None;
    }
}

/// Why a WRITE packet's data did not land.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Landing {
    /// Refused with this NAK syndrome.
    Nak(u8),
    /// A page behind the rkey is not present (a page fault where they are reported).
    NotPresent,
}

/// Lands `data` of the WRITE in progress through its rkey; on `last` the bytes must add up
/// to the RETH length.
pub(super) fn write_data(
    core: &mut Core,
    qpn: u32,
    data: &[u8],
    last: bool,
) -> Result<(), Landing> {
    let invalid = Landing::Nak(aeth::NAK_INVALID_REQUEST);
    let qp = core.res.qps.get(qpn).ok_or(invalid)?;
    let w = qp.resp.write.ok_or(invalid)?;
    let len = data.len() as u32;
    // The peer chose `total` (the RETH length, up to 2^32 - 1): add without wrapping.
    let landed = w.done.checked_add(len).ok_or(invalid)?;
    if landed > w.total || (last && landed != w.total) {
        return Err(invalid);
    }
    if len > 0 && crate::signature::is_signature_key(core, w.rkey) {
        let va = w.va.wrapping_add(u64::from(w.done));
        let pd = qp.responder_pd();
        let landed = crate::signature::write(core, w.rkey, pd, va, data, Some(RemoteAccess::Write));
        let cqn = qp.cqn_rcv;
        crate::signature::report(core, qpn, cqn);
        landed.map_err(|_| Landing::Nak(aeth::NAK_REMOTE_ACCESS))?;
    } else if len > 0 {
        translate_remote(
            core,
            w.rkey,
            qp.responder_pd(),
            w.va.wrapping_add(u64::from(w.done)),
            u64::from(len),
            RemoteAccess::Write,
            |iova, offset, bytes| {
                core.dma_write(iova, &data[offset as usize..(offset + bytes) as usize])
                    .map_err(|_| KeyFault::Bounds)
            },
        )
        .map_err(|fault| match fault {
            KeyFault::NotPresent => Landing::NotPresent,
            _ => Landing::Nak(aeth::NAK_REMOTE_ACCESS),
        })?;
    }
    if let Some(w) = core
        .res
        .qps
        .get_mut(qpn)
        .and_then(|qp| qp.resp.write.as_mut())
    {
        w.done += len;
    }
    Ok(())
}
