//! The RC responder's RDMA READ and atomic requests: checked against the rkey, answered from
//! memory in path-MTU response packets or with an atomic acknowledgement. Each one answered is
//! remembered (`Responder::answered`), so that a duplicate of it (its responses were lost, or
//! the requester timed out) is answered again as IBA 9.9.2 and Linux rxe do: a READ from
//! memory, from the duplicate's PSN; an atomic with the value its first execution found,
//! never executed twice.

use super::packet::{
    aeth, bth_opcode, build_frame, mtu_bytes, Transport, ATOMIC_ETH_LEN, PSN_MASK, RETH_LEN,
};
use super::responder::{message_done, send_ack, Outcome};
use crate::counters::add;
use crate::fw::mkey::{check_remote, translate_remote, KeyFault, RemoteAccess};
use crate::fw::Core;
use crate::objects::rc::Answered;

/// The RETH of a READ request: virtual address, rkey, DMA length.
fn reth(rest: &[u8]) -> Option<(u64, u32, u32)> {
    let reth = rest.get(..RETH_LEN)?;
    let va = u64::from_be_bytes(reth[..8].try_into().ok()?);
    let rkey = u32::from_be_bytes([reth[8], reth[9], reth[10], reth[11]]);
    let len = u32::from_be_bytes([reth[12], reth[13], reth[14], reth[15]]);
    Some((va, rkey, len))
}

/// An RDMA READ request: checked against the rkey (remote read), answered with the data in
/// path-MTU response packets carrying the request's PSN onwards.
pub(super) fn read(core: &mut Core, qpn: u32, psn: u32, rest: &[u8]) -> Outcome {
    let Some((va, rkey, len)) = reth(rest) else {
        return Outcome::Nak(aeth::NAK_INVALID_REQUEST);
    };
    if let Err(syndrome) = check_read(core, qpn, va, rkey, len) {
        return Outcome::Nak(syndrome);
    }
    message_done(core, qpn);
    match read_responses(core, qpn, psn, (va, rkey, len)) {
        Ok(packets) => {
            if let Some(qp) = core.res.qps.get_mut(qpn) {
                qp.resp.remember(Answered::Read {
                    first_psn: psn,
                    last_psn: (psn + packets - 1) & PSN_MASK,
                });
            }
            Outcome::Responded(packets)
        }
        Err(syndrome) => Outcome::Nak(syndrome),
    }
}

/// A duplicate READ request at `psn`: when it falls within a READ answered before, and its
/// responses within that READ's PSNs, it is answered again from memory (the data may have
/// changed since: the responder reads it again, as the standard has it); otherwise dropped.
/// The expected PSN does not move.
pub(super) fn replay_read(core: &mut Core, qpn: u32, psn: u32, rest: &[u8]) {
    let Some((va, rkey, len)) = reth(rest) else {
        add(&core.counters.roce_rx_drops, 1);
        return;
    };
    let Some(qp) = core.res.qps.get(qpn) else {
        return;
    };
    let packets = (len as usize).div_ceil(mtu_bytes(qp.mtu)).max(1) as u32;
    let last = (psn + packets - 1) & PSN_MASK;
    let within = |first: u32, end: u32, at: u32| {
        (at.wrapping_sub(first) & PSN_MASK) <= (end.wrapping_sub(first) & PSN_MASK)
    };
    let known = qp.resp.answered.iter().flatten().any(|a| match *a {
        Answered::Read {
            first_psn,
            last_psn,
        } => within(first_psn, last_psn, psn) && within(first_psn, last_psn, last),
        Answered::Atomic { .. } => false,
    });
    if !known {
        add(&core.counters.roce_rx_drops, 1);
        return;
    }
    if let Err(syndrome) = check_read(core, qpn, va, rkey, len) {
        send_ack(core, qpn, psn, syndrome);
        return;
    }
    if let Err(syndrome) = read_responses(core, qpn, psn, (va, rkey, len)) {
        send_ack(core, qpn, psn, syndrome);
    }
}

/// Checks a READ of `len` bytes at `va` through `rkey` against the QP (remote read enabled)
/// and the key (its PD, access and range).
fn check_read(core: &Core, qpn: u32, va: u64, rkey: u32, len: u32) -> Result<(), u8> {
    let qp = core.res.qps.get(qpn).ok_or(aeth::NAK_INVALID_REQUEST)?;
    if !qp.rre || check_remote(core, rkey, qp.pd, va, u64::from(len), RemoteAccess::Read).is_err() {
        return Err(aeth::NAK_REMOTE_ACCESS);
    }
    Ok(())
}

/// Sends the responses of a READ checked already (`reth`: address, rkey, length) from `psn`
/// on; returns how many. A NAK syndrome when the memory behind the key cannot be read.
fn read_responses(
    core: &mut Core,
    qpn: u32,
    psn: u32,
    (va, rkey, len): (u64, u32, u32),
) -> Result<u32, u8> {
    let Some(qp) = core.res.qps.get(qpn) else {
        return Err(aeth::NAK_INVALID_REQUEST);
    };
    let (pd, mtu) = (qp.pd, mtu_bytes(qp.mtu));
    let packets = (len as usize).div_ceil(mtu).max(1);
    let mut data = std::mem::take(&mut core.rc_scratch.response);
    let mut frame = std::mem::take(&mut core.rc_scratch.ack);
    let mut result = Ok(packets as u32);
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
            result = Err(aeth::NAK_REMOTE_OPERATION);
            break;
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
    result
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
    if let Some(qp) = core.res.qps.get_mut(qpn) {
        qp.resp.remember(Answered::Atomic { psn, original });
    }
    send_atomic_ack(core, qpn, psn, original);
    Outcome::Responded(1)
}

/// A duplicate atomic request at `psn`: answered with the value its first execution found,
/// when the responder still remembers it; dropped otherwise. Never executed again.
pub(super) fn replay_atomic(core: &mut Core, qpn: u32, psn: u32) {
    let original = core.res.qps.get(qpn).and_then(|qp| {
        qp.resp.answered.iter().flatten().find_map(|a| match *a {
            Answered::Atomic { psn: at, original } if at == psn => Some(original),
            _ => None,
        })
    });
    match original {
        Some(original) => send_atomic_ack(core, qpn, psn, original),
        None => add(&core.counters.roce_rx_drops, 1),
    }
}

/// Sends the atomic acknowledgement of `psn` carrying `original`, with the QP's MSN.
fn send_atomic_ack(core: &mut Core, qpn: u32, psn: u32, original: u64) {
    let Some(qp) = core.res.qps.get(qpn) else {
        return;
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
}
