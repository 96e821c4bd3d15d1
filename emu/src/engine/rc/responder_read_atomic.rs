//! The RC responder's RDMA READ and atomic requests: checked against the rkey, answered from
//! memory in path-MTU response packets or with an atomic acknowledgement. Each one answered is
//! remembered (`Responder::answered`), so that a duplicate of it (its responses were lost, or
//! the requester timed out) is answered again as IBA 9.9.2 and Linux rxe do: a READ from
//! memory, from the duplicate's PSN; an atomic with the value its first execution found,
//! never executed twice. A duplicate READ whose source was paged out since (on-demand paging)
//! faults as a first READ does: reported, RNR NAKs until PAGE_FAULT_RESUME.

use super::count;
use super::packet::{aeth, bth_opcode, mtu_bytes, ATOMIC_ETH_LEN, PSN_MASK, RETH_LEN};
use super::qp_error::enter_error;
use super::responder::{message_done, rnr, send_ack, Outcome};
use super::responder_pace::owe;
use crate::counters::add;
use crate::function::Core;
use crate::objects::rc::{Answered, Owed, ResponderFaultKind};
use crate::translate::{check_remote_on, translate_remote, KeyFault, RemoteAccess};
use cxdirect_hw::eqe::EventType;

/// The RETH of a READ request: virtual address, rkey, DMA length.
fn reth(rest: &[u8]) -> Option<(u64, u32, u32)> {
    let reth = rest.get(..RETH_LEN)?;
    let va = u64::from_be_bytes(reth[..8].try_into().ok()?);
    let rkey = u32::from_be_bytes([reth[8], reth[9], reth[10], reth[11]]);
    let len = u32::from_be_bytes([reth[12], reth[13], reth[14], reth[15]]);
    Some((va, rkey, len))
}

/// An RDMA READ request: checked against the rkey (remote read), answered with the data in
/// path-MTU response packets carrying the request's PSN onwards, as the wire takes them.
pub(super) fn read(core: &mut Core, qpn: u32, psn: u32, rest: &[u8]) -> Outcome {
    let Some((va, rkey, len)) = reth(rest) else {
        return Outcome::Nak(aeth::NAK_INVALID_REQUEST);
    };
    if let Err(syndrome) = check_read(core, qpn, va, rkey, len) {
        return Outcome::Nak(syndrome);
    }
    let Some(qp) = core.res.qps.get(qpn) else {
        return Outcome::Nak(aeth::NAK_INVALID_REQUEST);
    };
    // Every page of the source present before the first response goes (on-demand paging): a
    // page not present is a page fault, the READ answered by an RNR NAK until it is resumed.
    let pd = qp.responder_pd();
    let first_response = (len as usize).min(mtu_bytes(qp.mtu));
    let walked = translate_remote(
        core,
        rkey,
        pd,
        va,
        u64::from(len),
        RemoteAccess::Read,
        |_, _, _| Ok(()),
    );
    if walked == Err(KeyFault::NotPresent) {
        if super::page_fault::responder_read(core, qpn, (va, rkey, len), first_response) {
            return rnr(core, qpn);
        }
        return Outcome::Nak(aeth::NAK_REMOTE_ACCESS);
    }
    let Some(qp) = core.res.qps.get(qpn) else {
        return Outcome::Nak(aeth::NAK_INVALID_REQUEST);
    };
    if qp.resp.owed.is_full() {
        // More READs than the responder's resources: dropped unanswered, the PSN not
        // consumed, so that the requester sends it again once the others are answered.
        add(&core.counters.roce_rx_drops, 1);
        return Outcome::Dropped;
    }
    let packets = (len as usize).div_ceil(mtu_bytes(qp.mtu)).max(1) as u32;
    message_done(core, qpn);
    let Some(qp) = core.res.qps.get_mut(qpn) else {
        return Outcome::Nak(aeth::NAK_INVALID_REQUEST);
    };
    qp.resp.remember(Answered::Read {
        first_psn: psn,
        last_psn: (psn + packets - 1) & PSN_MASK,
    });
    let msn = qp.resp.msn;
    owe(core, qpn, owed_read(psn, (va, rkey, len), msn, false));
    Outcome::Responded(packets)
}

/// The responses of a READ checked already (`reth`: address, rkey, length) from `psn` on,
/// carrying `msn`; `replay` for the answer to a duplicate.
fn owed_read(psn: u32, (va, rkey, len): (u64, u32, u32), msn: u32, replay: bool) -> Owed {
    Owed::Read {
        next_psn: psn,
        va,
        rkey,
        len,
        offset: 0,
        msn,
        replay,
    }
}

/// A duplicate READ request at `psn`: when it falls within a READ answered before, and its
/// responses within that READ's PSNs, it is answered again from memory (the data may have
/// changed since: the responder reads it again, as the standard has it); otherwise dropped.
/// The expected PSN does not move. What the QP still owes from `psn` on is dropped first:
/// the requester sends again everything after the duplicate, and is answered again.
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
    if replay_paged(core, qpn, psn, (va, rkey, len)) {
        return;
    }
    let Some(qp) = core.res.qps.get_mut(qpn) else {
        return;
    };
    // PSNs from `psn` up to the expected one are those the duplicate and what follows it
    // take again.
    let expected = qp.next_rcv_psn & PSN_MASK;
    let behind = |at: u32| expected.wrapping_sub(at) & PSN_MASK;
    while qp
        .resp
        .owed
        .back_mut()
        .is_some_and(|back| behind(back.psn()) <= behind(psn))
    {
        qp.resp.owed.pop_back();
    }
    let msn = qp.resp.msn;
    if !owe(core, qpn, owed_read(psn, (va, rkey, len), msn, true)) {
        add(&core.counters.roce_rx_drops, 1);
    }
}

/// On-demand paging of a duplicate READ at `psn` (`reth`: address, rkey, length), whose source
/// may have been paged out since it was first answered: the device takes the fault as for a
/// first READ (mlx5_ib's `mlx5_ib_mr_rdma_pfault_handler` maps the range the RDMA sub type
/// reports, whichever request it came from): reported, the duplicate answered with an RNR NAK
/// at its PSN, as is every request while the responder waits for PAGE_FAULT_RESUME; after a
/// resume with an error the READ is refused (a remote access NAK, the QP in error). True when
/// the duplicate was answered so; false when it is to be answered from memory (every page
/// present, or no EQ takes page faults: a page not present is then an access error when its
/// response is read).
fn replay_paged(core: &mut Core, qpn: u32, psn: u32, (va, rkey, len): (u64, u32, u32)) -> bool {
    let Some(qp) = core.res.qps.get(qpn) else {
        return false;
    };
    let rnr_syndrome = aeth::RNR_NAK | (qp.min_rnr_nak & 0x1f);
    match qp.resp.page_fault {
        Some(f) if !f.failed => {
            add(&core.counters.roce_rnr_naks_sent, 1);
            send_ack(core, qpn, psn, rnr_syndrome);
            return true;
        }
        Some(f) if matches!(f.kind, ResponderFaultKind::Rdma { .. }) => {
            if let Some(qp) = core.res.qps.get_mut(qpn) {
                qp.resp.page_fault = None;
                qp.resp.refirst = false;
            }
            count(core, qpn, |c| &mut c.resp_remote_access_errors);
            send_ack(core, qpn, psn, aeth::NAK_REMOTE_ACCESS);
            enter_error(core, qpn, Some(EventType::WqAccessError));
            return true;
        }
        // A receive's failed fault is the next SEND's to take.
        Some(_) => return false,
        None => {}
    }
    let pd = qp.responder_pd();
    let first_response = (len as usize).min(mtu_bytes(qp.mtu));
    let walked = translate_remote(
        core,
        rkey,
        pd,
        va,
        u64::from(len),
        RemoteAccess::Read,
        |_, _, _| Ok(()),
    );
    if walked == Err(KeyFault::NotPresent)
        && super::page_fault::responder_read(core, qpn, (va, rkey, len), first_response)
    {
        add(&core.counters.roce_rnr_naks_sent, 1);
        send_ack(core, qpn, psn, rnr_syndrome);
        return true;
    }
    false
}

/// Checks a READ of `len` bytes at `va` through `rkey` against the QP (remote read enabled)
/// and the key (its PD, access and range).
fn check_read(core: &Core, qpn: u32, va: u64, rkey: u32, len: u32) -> Result<(), u8> {
    let qp = core.res.qps.get(qpn).ok_or(aeth::NAK_INVALID_REQUEST)?;
    if !qp.rre
        || check_remote_on(
            core,
            rkey,
            qp.responder_pd(),
            qpn,
            va,
            u64::from(len),
            RemoteAccess::Read,
        )
        .is_err()
    {
        return Err(aeth::NAK_REMOTE_ACCESS);
    }
    Ok(())
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
    let pd = qp.responder_pd();
    if qp.resp.owed.is_full() {
        // More atomics and READs than the responder's resources: dropped unexecuted, the
        // PSN not consumed, so that the requester sends it again.
        add(&core.counters.roce_rx_drops, 1);
        return Outcome::Dropped;
    }
    if !qp.rae || check_remote_on(core, rkey, pd, qpn, va, 8, RemoteAccess::Atomic).is_err() {
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
    match done {
        Ok(()) => {}
        // On-demand paging: the atomic waits, unexecuted, for the page (an RNR NAK until
        // PAGE_FAULT_RESUME), or fails as the access error it is where faults are not reported.
        Err(KeyFault::NotPresent) => {
            if super::page_fault::responder_atomic(core, qpn, va, rkey) {
                return rnr(core, qpn);
            }
            return Outcome::Nak(aeth::NAK_REMOTE_ACCESS);
        }
        Err(_) => return Outcome::Nak(aeth::NAK_REMOTE_OPERATION),
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

/// Sends the atomic acknowledgement of `psn` carrying `original`, with the QP's MSN, behind
/// whatever the QP still owes.
fn send_atomic_ack(core: &mut Core, qpn: u32, psn: u32, original: u64) {
    let Some(qp) = core.res.qps.get(qpn) else {
        return;
    };
    let aeth = (u32::from(aeth::ACK) << 24) | (qp.resp.msn & PSN_MASK);
    if !owe(
        core,
        qpn,
        Owed::AtomicAck {
            psn,
            aeth,
            original,
        },
    ) {
        add(&core.counters.roce_rx_drops, 1);
    }
}
