//! XRC (extended reliable connection) at the responder: an XRC target QP answers RC requests
//! sent under the XRC opcodes (the RC opcodes with the 0xa0 prefix), each carrying an XRCETH
//! after the BTH that names an XRC SRQ. The SRQ must exist and belong to the target QP's XRC
//! domain, else the request is refused with an invalid-request NAK and nothing is placed; a
//! SEND takes its receive WQE from that SRQ and completes on the SRQ's CQ with the SRQ's user
//! index, and remote keys are checked in the SRQ's protection domain (IBA 9.8.3.2: an XRC
//! target QP takes its protection domain from the XRC SRQ). Acknowledgements and READ
//! responses go back under the XRC opcodes, without an XRCETH (IBA 9.2).

use super::packet::{aeth, bth_opcode, PSN_MASK, XRCETH_LEN};
use crate::function::Core;
use crate::objects::rc::{RcReceive, XrcTarget};

/// Takes the XRC prefix off `opcode` and, for a request, the XRCETH off `rest`: the RC
/// opcode, the bytes after the XRCETH, and the XRC SRQ number it names (`None` for an
/// acknowledgement or READ response). `None` for a packet that is not XRC, or a request too
/// short for its XRCETH.
pub(super) fn strip(opcode: u8, rest: &[u8]) -> Option<(u8, &[u8], Option<u32>)> {
    use bth_opcode::*;
    if opcode & 0xe0 != XRC || opcode - XRC > SEND_ONLY_INV {
        return None;
    }
    let rc = opcode - XRC;
    let request = rc <= READ_REQUEST
        || matches!(rc, COMPARE_SWAP | FETCH_ADD)
        || matches!(rc, SEND_LAST_INV | SEND_ONLY_INV);
    if !request {
        return Some((rc, rest, None));
    }
    let eth = rest.get(..XRCETH_LEN)?;
    let srqn = u32::from_be_bytes([eth[0], eth[1], eth[2], eth[3]]) & PSN_MASK;
    Some((rc, &rest[XRCETH_LEN..], Some(srqn)))
}

/// Selects XRC SRQ `srqn` for the request QP `qpn` is about to execute: it must exist and
/// belong to the QP's XRC domain, and a message in progress must continue on the SRQ it
/// started on. Refused with the NAK syndrome to answer.
pub(super) fn select(core: &mut Core, qpn: u32, srqn: u32) -> Result<(), u8> {
    let refuse = aeth::NAK_INVALID_REQUEST;
    let qp = core.res.qps.get(qpn).ok_or(refuse)?;
    let RcReceive::Xrc { xrcd, .. } = qp.receive else {
        return Err(refuse);
    };
    let srq = core
        .res
        .xrc_srqs
        .get(srqn)
        .filter(|srq| srq.xrcd == xrcd)
        .ok_or(refuse)?;
    let target = XrcTarget {
        srqn,
        pd: srq.wq.pd,
        cqn: srq.cqn,
        user_index: srq.user_index,
    };
    let open = qp.resp.recv.is_some() || qp.resp.write.is_some();
    if open && qp.resp.xrc.is_some_and(|x| x.srqn != srqn) {
        return Err(refuse);
    }
    if let Some(qp) = core.res.qps.get_mut(qpn) {
        qp.resp.xrc = Some(target);
    }
    Ok(())
}
