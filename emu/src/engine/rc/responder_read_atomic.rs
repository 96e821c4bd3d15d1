//! The RC responder's RDMA READ and atomic requests: checked against the rkey, answered from
//! memory in path-MTU response packets or with an atomic acknowledgement.

use super::packet::{
    aeth, bth_opcode, build_frame, mtu_bytes, Transport, ATOMIC_ETH_LEN, PSN_MASK, RETH_LEN,
};
use super::responder::{message_done, Outcome};
use crate::fw::mkey::{check_remote, translate_remote, KeyFault, RemoteAccess};
use crate::fw::Core;
/// An RDMA READ request: checked against the rkey (remote read), answered with the data in
/// path-MTU response packets carrying the request's PSN onwards.
pub(super) fn read(core: &mut Core, qpn: u32, psn: u32, rest: &[u8]) -> Outcome {
    if rest.len() < RETH_LEN {
        return Outcome::Nak(aeth::NAK_INVALID_REQUEST);
    }
    let va = u64::from_be_bytes(rest[..8].try_into().unwrap_or_default());
    let rkey = u32::from_be_bytes([rest[8], rest[9], rest[10], rest[11]]);
    let len = u32::from_be_bytes([rest[12], rest[13], rest[14], rest[15]]);
    let Some(qp) = core.res.qps.get(qpn) else {
        return Outcome::Nak(aeth::NAK_INVALID_REQUEST);
    };
    let (pd, mtu) = (qp.pd, mtu_bytes(qp.mtu));
    if !qp.rre || check_remote(core, rkey, pd, va, u64::from(len), RemoteAccess::Read).is_err() {
        return Outcome::Nak(aeth::NAK_REMOTE_ACCESS);
    }
    message_done(core, qpn);
    let packets = (len as usize).div_ceil(mtu).max(1);
    let mut data = std::mem::take(&mut core.rc_scratch.response);
    let mut frame = std::mem::take(&mut core.rc_scratch.ack);
    for n in 0..packets {
        let start = n * mtu;
        let bytes = (len as usize - start).min(mtu);
        data.clear();
        data.resize(bytes, 0);
        let read = bytes == 0
            || translate_remote(
                core,
                rkey,
                pd,
                va + start as u64,
                bytes as u64,
                RemoteAccess::Read,
                |iova, offset, piece| {
                    core.dma_read(iova, &mut data[offset as usize..(offset + piece) as usize])
                        .map_err(|_| KeyFault::Bounds)
                },
            )
            .is_ok();
        if !read {
            // The key granted the range but the memory behind it cannot be read.
            core.rc_scratch.response = data;
            core.rc_scratch.ack = frame;
            return Outcome::Nak(aeth::NAK_REMOTE_OPERATION);
        }
        let (first, last) = (n == 0, n + 1 == packets);
        let opcode = match (first, last) {
            (true, true) => bth_opcode::READ_RESPONSE_ONLY,
            (true, false) => bth_opcode::READ_RESPONSE_FIRST,
            (false, false) => bth_opcode::READ_RESPONSE_MIDDLE,
            (false, true) => bth_opcode::READ_RESPONSE_LAST,
        };
        let Some(qp) = core.res.qps.get(qpn) else {
            break;
        };
        let t = Transport {
            opcode,
            dest_qpn: qp.remote_qpn,
            psn: (psn + n as u32) & PSN_MASK,
            ack_req: false,
            solicited: false,
            reth: None,
            aeth: (first || last)
                .then_some((u32::from(aeth::ACK) << 24) | (qp.resp.msn & PSN_MASK)),
            imm: None,
            atomic: None,
            atomic_ack: None,
        };
        if build_frame(core, qpn, &t, &data, &mut frame) {
            crate::engine::sq::transmit(core, &frame);
        }
    }
    core.rc_scratch.response = data;
    core.rc_scratch.ack = frame;
    Outcome::Responded(packets as u32)
}

/// A compare-and-swap or fetch-and-add on the 8 bytes at the AtomicETH's address, taken as a
/// big-endian value (the device's default atomic endianness); answered with an atomic ACK
/// carrying the value found.
pub(super) fn atomic(core: &mut Core, qpn: u32, opcode: u8, psn: u32, rest: &[u8]) -> Outcome {
    if rest.len() < ATOMIC_ETH_LEN {
        return Outcome::Nak(aeth::NAK_INVALID_REQUEST);
    }
    let be64 = |at: usize| u64::from_be_bytes(rest[at..at + 8].try_into().unwrap_or_default());
    let va = be64(0);
    let rkey = u32::from_be_bytes([rest[8], rest[9], rest[10], rest[11]]);
    let (swap_add, compare) = (be64(12), be64(20));
    let Some(qp) = core.res.qps.get(qpn) else {
        return Outcome::Nak(aeth::NAK_INVALID_REQUEST);
    };
    let pd = qp.pd;
    if !qp.rae || check_remote(core, rkey, pd, va, 8, RemoteAccess::Atomic).is_err() {
        return Outcome::Nak(aeth::NAK_REMOTE_ACCESS);
    }
    let mut original = 0u64;
    let done = translate_remote(core, rkey, pd, va, 8, RemoteAccess::Atomic, |iova, _, _| {
        let mut word = [0u8; 8];
        core.dma_read(iova, &mut word)
            .map_err(|_| KeyFault::Bounds)?;
        original = u64::from_be_bytes(word);
        let new = if opcode == bth_opcode::COMPARE_SWAP {
            if original == compare {
                swap_add
            } else {
                original
            }
        } else {
            original.wrapping_add(swap_add)
        };
        core.dma_write(iova, &new.to_be_bytes())
            .map_err(|_| KeyFault::Bounds)
    });
    if done.is_err() {
        return Outcome::Nak(aeth::NAK_REMOTE_OPERATION);
    }
    message_done(core, qpn);
    let Some(qp) = core.res.qps.get(qpn) else {
        return Outcome::Responded(1);
    };
    let t = Transport {
        opcode: bth_opcode::ATOMIC_ACKNOWLEDGE,
        dest_qpn: qp.remote_qpn,
        psn,
        ack_req: false,
        solicited: false,
        reth: None,
        aeth: Some((u32::from(aeth::ACK) << 24) | (qp.resp.msn & PSN_MASK)),
        imm: None,
        atomic: None,
        atomic_ack: Some(original),
    };
    let mut frame = std::mem::take(&mut core.rc_scratch.ack);
    if build_frame(core, qpn, &t, &[], &mut frame) {
        crate::engine::sq::transmit(core, &frame);
    }
    core.rc_scratch.ack = frame;
    Outcome::Responded(1)
}
