//! Completion queues: writing CQEs with the right owner bit, overrun detection through the
//! doorbell record, CQE compression (sessions of receive completions written as a title CQE
//! and mini-CQE arrays), arming and completion events.

use crate::counters::{add, QueueKind};
use crate::faults::Fault;
use crate::function::Core;
use crate::objects::queue_state::{cqe_words, per_completion, Compression, MAX_SESSION};
use crate::objects::CqArm;
use cxdirect_hw::cqe::{
    cqe_format, mini_array_slot, mini_cqe_res_format, Cqe64, CqeOpcode, CqeSyndrome, ErrCqe,
    CQE_SIZE, MINI_CQES_PER_SLOT, MINI_CQE_SIZE,
};
use cxdirect_hw::eqe::{cq_error, EventType};
use cxdirect_hw::wq::striding::{STRIDES_MASK, STRIDES_SHIFT};

/// Why a CQE could not be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CqFault {
    /// No such CQ.
    Missing,
    /// The CQ is full (or was already in error).
    Overrun,
    /// The CQ buffer is not reachable.
    Dma,
}

/// Puts a QP's `user_index` into a CQE's `srqn_uidx` (the low 24 bits of dword 0x20), as a
/// device reporting `cqe_version` 1 does for every completion of a QP, send or receive, error
/// or not: libmlx5 (`get_resp_ctx_v1`, `get_req_ctx_v1`) finds the QP by it, and through the QP
/// the SRQ a receive came from. The byte above it is left as the CQE's writer set it.
pub(crate) fn set_user_index(cqe: &mut [u8; CQE_SIZE], user_index: u32) {
    cqe[0x21..0x24].copy_from_slice(&(user_index & 0x00ff_ffff).to_be_bytes()[1..]);
}

/// An error CQE of `opcode` (REQ_ERR for a send, RESP_ERR for a receive) with `syndrome`, the
/// failed WQE's opcode `wqe_opcode` (0 for a receive), queue number `qpn` and WQE `index`;
/// its user index and owner bit are the poster's to add.
pub(crate) fn error_cqe(
    opcode: CqeOpcode,
    syndrome: CqeSyndrome,
    wqe_opcode: u8,
    qpn: u32,
    index: u16,
) -> [u8; CQE_SIZE] {
    let mut cqe = [0u8; CQE_SIZE];
    if let Ok(mut err) = ErrCqe::new(&mut cqe[..]) {
        err.set_syndrome(syndrome as u8)
            .set_s_wqe_opcode(wqe_opcode)
            .set_qpn(qpn)
            .set_wqe_counter(index)
            .set_opcode(opcode as u8);
    }
    cqe
}

/// Writes `cqe` (opcode and fields set; the owner bit is filled in here) to CQ `cqn`, after
/// any compressed session the CQ holds, so completions keep their order.
pub(crate) fn post(core: &mut Core, cqn: u32, cqe: &mut [u8; CQE_SIZE]) -> Result<(), CqFault> {
    flush(core, cqn);
    post_plain(core, cqn, cqe)
}

/// Posts a successful receive completion: on a CQ with compression it joins the open session
/// when it can share its title (same queue, next WQE, same flags), else the session is written
/// and a new one opens. Sessions close when full, when anything else is posted to the CQ, and
/// when the receive pass that opened them ends ([`flush_all`]), so a lone frame is never
/// held back. A completion written now (no compression) reports its failure; a held one that
/// cannot be written later is counted lost and its RQ moves to error then.
pub(crate) fn post_receive(
    core: &mut Core,
    cqn: u32,
    rqn: u32,
    cqe: &mut [u8; CQE_SIZE],
) -> Result<(), CqFault> {
    let Some(cq) = core.res.cqs.get(cqn) else {
        return Err(CqFault::Missing);
    };
    let Some(compression) = &cq.compression else {
        post_plain(core, cqn, cqe)?;
        core.queue_counters.get_mut(QueueKind::Rq, rqn).cqes += 1;
        return Ok(());
    };
    if core.faults.any(|f| {
        matches!(f, Fault::CorruptCqe { cqn: c, .. } | Fault::WrongOwner { cqn: c } if *c == cqn)
    }) {
        // A fault aimed at one CQE needs that CQE written whole.
        post(core, cqn, cqe)?;
        core.queue_counters.get_mut(QueueKind::Rq, rqn).cqes += 1;
        return Ok(());
    }
    let limit = usize::from(MAX_SESSION).min(1 << cq.log_size);
    let joins = compression
        .held
        .last()
        .is_none_or(|last| same_session(last, cqe, &compression.shared));
    if !joins {
        flush(core, cqn);
    }
    let Some(compression) = compression_of(core, cqn) else {
        return Err(CqFault::Missing);
    };
    compression.held.push(*cqe);
    let held = compression.held.len();
    if held == 1 {
        core.open_sessions.push(cqn);
    }
    if held >= limit {
        flush(core, cqn);
    }
    Ok(())
}

/// CQ `cqn`'s compression state, when it exists and compresses.
fn compression_of(core: &mut Core, cqn: u32) -> Option<&mut Compression> {
    core.res
        .cqs
        .get_mut(cqn)
        .and_then(|cq| cq.compression.as_mut())
}

/// Writes every session the receive pass left open (call when a pass ends, before a command
/// runs, before a CQ is armed).
pub(crate) fn flush_all(core: &mut Core) {
    while let Some(cqn) = core.open_sessions.pop() {
        flush(core, cqn);
    }
}

/// Writes CQ `cqn`'s open session, if any: one completion as a plain CQE; more as a title CQE
/// followed by mini-CQE arrays.
pub(crate) fn flush(core: &mut Core, cqn: u32) {
    let Some(compression) = compression_of(core, cqn) else {
        return;
    };
    if compression.held.is_empty() {
        return;
    }
    let format = compression.format;
    let mut held = std::mem::take(&mut compression.held);
    core.open_sessions.retain(|&c| c != cqn);
    let count = held.len();
    let written = if count == 1 {
        post_plain(core, cqn, &mut held[0])
    } else {
        write_session(core, cqn, &held, format)
    };
    let qpn = Cqe64::new(&held[0][..]).map_or(0, |c| c.qpn());
    match written {
        Ok(()) => core.queue_counters.get_mut(QueueKind::Rq, qpn).cqes += count as u64,
        Err(_) => {
            // The frames are in their buffers but their completions have nowhere to go.
            add(&core.counters.completions_lost, count as u64);
            crate::engine::rq::enter_error(core, qpn);
        }
    }
    held.clear();
    if let Some(compression) = compression_of(core, cqn) {
        compression.held = held;
    }
}

/// Whether `next` may follow `last` in one session: a plain receive completion of the next
/// WQE whose every shared field matches.
fn same_session(
    last: &[u8; CQE_SIZE],
    next: &[u8; CQE_SIZE],
    shared: &[u64; CQE_SIZE / 8],
) -> bool {
    let plain_receive = next[0x3f] >> 4 == CqeOpcode::RespSend as u8 && next[0x3f] & 0x0c == 0;
    let counter = |c: &[u8; CQE_SIZE]| u16::from_be_bytes([c[0x3c], c[0x3d]]);
    // A striding RQ's completion counts strides in byte_cnt bits 29:16 and the next one starts
    // after them; a cyclic RQ's byte count never reaches those bits, and its next completion
    // is the next WQE.
    let last_bytes = u32::from_be_bytes([last[0x2c], last[0x2d], last[0x2e], last[0x2f]]);
    let step = ((last_bytes >> STRIDES_SHIFT) & STRIDES_MASK).max(1) as u16;
    if !plain_receive || counter(next) != counter(last).wrapping_add(step) {
        return false;
    }
    let (last, next) = (cqe_words(last), cqe_words(next));
    last.iter()
        .zip(&next)
        .zip(shared)
        .all(|((a, b), mask)| (a ^ b) & mask == 0)
}

/// Writes a session of `held.len()` (2..) completions: the mini-CQE arrays first, then the
/// title, whose owner bit makes the whole session visible at once.
fn write_session(
    core: &mut Core,
    cqn: u32,
    held: &[[u8; CQE_SIZE]],
    format: u8,
) -> Result<(), CqFault> {
    let count = held.len() as u32;
    let (pi, log_size) = reserve(core, cqn, count)?;
    let mut patch = core.faults.take(|f| match f {
        Fault::CorruptSession {
            cqn: c,
            slot,
            patch,
        } if *c == cqn => Some((*slot, patch.clone())),
        _ => None,
    });
    let carried = per_completion(format)[0].clone();
    for (array, chunk) in held.chunks(MINI_CQES_PER_SLOT as usize).enumerate() {
        let first = array as u32 * MINI_CQES_PER_SLOT;
        let mut slot = [0u8; CQE_SIZE];
        for (mini, cqe) in slot.chunks_exact_mut(MINI_CQE_SIZE).zip(chunk) {
            mini[..carried.len()].copy_from_slice(&cqe[carried.clone()]);
            if format == mini_cqe_res_format::CSUM_STRIDX {
                // The stride index (a striding RQ's first stride; the WQE counter otherwise).
                // The plain checksum format leaves these bytes reserved: Linux then counts the
                // index on from the title's (`mlx5e_decompress_cqe`).
                mini[2..4].copy_from_slice(&cqe[0x3c..0x3e]);
            }
            mini[4..].copy_from_slice(&cqe[0x2c..0x30]);
        }
        let offset = mini_array_slot(first);
        apply_session_patch(&mut patch, offset, &mut slot);
        write_slot(core, cqn, pi.wrapping_add(offset), &slot)?;
    }
    let mut title = held[0];
    title[0x2c..0x30].copy_from_slice(&count.to_be_bytes());
    let owner = ((pi >> log_size) & 1) as u8;
    title[0x3f] = (title[0x3f] & 0xf0) | cqe_format::COMPRESSED << 2 | owner;
    apply_session_patch(&mut patch, 0, &mut title);
    write_slot(core, cqn, pi, &title)?;
    add(&core.counters.cqes, u64::from(count));
    add(
        &core.counters.cqe_slot_writes,
        1 + u64::from(count.div_ceil(MINI_CQES_PER_SLOT)),
    );
    add(&core.counters.compressed_sessions, 1);
    advance(core, cqn, count, false);
    Ok(())
}

/// [`Fault::CorruptSession`]: overwrites bytes of the session slot it names.
fn apply_session_patch(patch: &mut Option<(u32, Vec<(u8, u8)>)>, slot: u32, bytes: &mut [u8]) {
    if let Some((_, changes)) = patch.take_if(|(s, _)| *s == slot) {
        for (offset, value) in changes {
            if let Some(byte) = bytes.get_mut(usize::from(offset)) {
                *byte = value;
            }
        }
    }
}

/// The entries written to a CQ of `2^log_size` entries and not yet consumed, from the
/// producer counter `pi` and the consumer counter `ci` of its doorbell record, compared
/// modulo twice the CQ's size (the counter's bits up to the owner bit). Linux keeps a 24-bit
/// consumer counter there (`mlx5_cq_set_ci`), DPDK's mlx5 PMD a 16-bit one for its send CQs
/// (`uint16_t cq_ci` in mlx5_tx.h, written whole to the 24-bit field) and runs on ConnectX
/// hardware, so a ConnectX cannot compare all 24 bits: every 65,536 completions DPDK's counter
/// would read as 65,536 behind. Within `log_size + 1` bits both readings agree (a CQ holds at
/// most 2^22 entries, so 23 bits at most).
fn outstanding(pi: u32, ci: u32, log_size: u8) -> u32 {
    let mask = (2u32 << log_size.min(22)) - 1;
    pi.wrapping_sub(ci) & mask
}

/// Checks that CQ `cqn` has room for `n` more entries (reading the consumer index from the
/// doorbell record unless the CQ ignores overruns); returns the producer index and the log2
/// size. A CQ without room moves to error.
fn reserve(core: &mut Core, cqn: u32, n: u32) -> Result<(u32, u8), CqFault> {
    let Some(cq) = core.res.cqs.get(cqn) else {
        return Err(CqFault::Missing);
    };
    if cq.in_error {
        return Err(CqFault::Overrun);
    }
    let size = 1u32 << cq.log_size;
    let (pi, log_size, dbr, overrun_ignore) = (cq.pi, cq.log_size, cq.dbr, cq.overrun_ignore);
    if !overrun_ignore {
        // The consumer index lives in the doorbell record (low 24 bits).
        add(&core.counters.dbrec_reads, 1);
        let ci = match core.dma_read_be32(dbr) {
            Ok(word) => word & 0x00ff_ffff,
            Err(_) => {
                enter_error(core, cqn, cq_error::ACCESS_VIOLATION);
                return Err(CqFault::Dma);
            }
        };
        let outstanding = outstanding(pi, ci, log_size);
        let forced = core
            .faults
            .take(|f| matches!(f, Fault::CqOverrun { cqn: c } if *c == cqn).then_some(()))
            .is_some();
        if forced || outstanding + n > size {
            add(&core.counters.cq_overruns, 1);
            enter_error(core, cqn, cq_error::OVERRUN);
            return Err(CqFault::Overrun);
        }
    }
    Ok((pi, log_size))
}

/// Writes one 64-byte CQE of CQ `cqn` at producer index `index`: the whole entry of a CQ of
/// 64-byte entries, the second half of a 128-byte one (where the owner bit is read). The first
/// half, which would carry data scattered to the CQE, is left alone, unless the CQ was created
/// padded: then the device writes the whole 128 bytes, the first half as zeros (what padding
/// holds is not public; zeros are the model's choice).
fn write_slot(core: &mut Core, cqn: u32, index: u32, bytes: &[u8]) -> Result<(), CqFault> {
    let (addr, padded) = core
        .res
        .cqs
        .get(cqn)
        .and_then(|c| {
            let mask = (1u32 << c.log_size) - 1;
            let entry = u64::from(index & mask) * c.entry_bytes;
            if c.padded {
                c.buf.addr(entry).map(|a| (a, true))
            } else {
                let cqe_in_entry = c.entry_bytes - CQE_SIZE as u64;
                c.buf.addr(entry + cqe_in_entry).map(|a| (a, false))
            }
        })
        .ok_or(CqFault::Dma)?;
    let written = if padded {
        let mut entry = [0u8; 2 * CQE_SIZE];
        let n = bytes.len().min(CQE_SIZE);
        entry[CQE_SIZE..CQE_SIZE + n].copy_from_slice(&bytes[..n]);
        core.dma_write(addr, &entry)
    } else {
        core.dma_write(addr, bytes)
    };
    if written.is_err() {
        enter_error(core, cqn, cq_error::ACCESS_VIOLATION);
        return Err(CqFault::Dma);
    }
    Ok(())
}

/// Moves the producer index past `n` written entries and raises the completion event an armed
/// CQ is owed.
fn advance(core: &mut Core, cqn: u32, n: u32, solicited: bool) {
    let Some(cq) = core.res.cqs.get_mut(cqn) else {
        return;
    };
    cq.pi = cq.pi.wrapping_add(n);
    let fire = match cq.arm {
        CqArm::Next => true,
        CqArm::Solicited => solicited,
        CqArm::Disarmed => false,
    };
    if fire {
        cq.arm = CqArm::Disarmed;
        let eqn = cq.eqn;
        completion_event(core, eqn, cqn);
    }
}

/// Writes one plain CQE now.
fn post_plain(core: &mut Core, cqn: u32, cqe: &mut [u8; CQE_SIZE]) -> Result<(), CqFault> {
    let (pi, log_size) = reserve(core, cqn, 1)?;
    let patch = core.faults.take(|f| match f {
        Fault::CorruptCqe { cqn: c, patch } if *c == cqn => Some(patch.clone()),
        _ => None,
    });
    for (offset, value) in patch.into_iter().flatten() {
        if let Some(byte) = cqe.get_mut(usize::from(offset)) {
            *byte = value;
        }
    }
    let wrong_owner = core
        .faults
        .take(|f| matches!(f, Fault::WrongOwner { cqn: c } if *c == cqn).then_some(()))
        .is_some();
    let owner = ((pi >> log_size) & 1) as u8;
    cqe[63] = (cqe[63] & !1) | (owner ^ u8::from(wrong_owner));
    write_slot(core, cqn, pi, &cqe[..])?;
    add(&core.counters.cqes, 1);
    add(&core.counters.cqe_slot_writes, 1);
    advance(core, cqn, 1, cqe[63] & 2 != 0);
    Ok(())
}

/// Why a resize did not happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResizeRefused {
    /// No such CQ, or it is in error.
    Unusable,
    /// The consumer index cannot be read from the doorbell record.
    Dma,
    /// The completions not yet consumed do not fit the new size, or the old buffer has no
    /// room for the resize CQE.
    TooManyOutstanding,
}

/// Resizes CQ `cqn` to `new` (`2^new_log_size` entries): writes the resize CQE (opcode
/// RESIZE_CQ) in the old buffer at the producer index, then takes every later CQE to the new
/// buffer, the producer index running on. That is where the software looks for it: libmlx5's
/// `mlx5_cq_resize_copy_cqes` and mlx5_ib's `copy_resize_cqes` copy the CQEs from their
/// consumer index up to the resize CQE, each one slot further into the new buffer, with the
/// new buffer's owner bit, then move the consumer index past the resize CQE. The model raises
/// no completion event for the resize CQE. Refused, changing nothing, when the completions not
/// yet consumed do not fit the new size (mlx5_core's `BAD_SIZE_OUTS_CQES`, which
/// `cmd_status_to_err` makes -EINVAL, what rdma-core's `test_resize_cq` expects).
pub(crate) fn resize(
    core: &mut Core,
    cqn: u32,
    new: crate::objects::QueueBuffer,
    new_log_size: u8,
) -> Result<(), ResizeRefused> {
    flush(core, cqn);
    let Some(cq) = core.res.cqs.get(cqn) else {
        return Err(ResizeRefused::Unusable);
    };
    if cq.in_error {
        return Err(ResizeRefused::Unusable);
    }
    let (pi, log_size, dbr, overrun_ignore) = (cq.pi, cq.log_size, cq.dbr, cq.overrun_ignore);
    if !overrun_ignore {
        add(&core.counters.dbrec_reads, 1);
        let ci = core.dma_read_be32(dbr).map_err(|_| ResizeRefused::Dma)? & 0x00ff_ffff;
        let outstanding = outstanding(pi, ci, log_size);
        if outstanding >= 1 << log_size || outstanding > 1 << new_log_size {
            return Err(ResizeRefused::TooManyOutstanding);
        }
    }
    let mut cqe = [0u8; CQE_SIZE];
    let owner = ((pi >> log_size) & 1) as u8;
    cqe[63] = (CqeOpcode::ResizeCq as u8) << 4 | owner;
    write_slot(core, cqn, pi, &cqe).map_err(|_| ResizeRefused::Dma)?;
    add(&core.counters.cqe_slot_writes, 1);
    if let Some(cq) = core.res.cqs.get_mut(cqn) {
        cq.pi = pi.wrapping_add(1);
        cq.buf = new;
        cq.log_size = new_log_size;
    }
    Ok(())
}

/// Moves CQ `cqn` to error and posts a CQ error event with `syndrome` to the async EQ: the
/// device writes nothing more to it until the driver destroys it.
fn enter_error(core: &mut Core, cqn: u32, syndrome: u8) {
    if let Some(cq) = core.res.cqs.get_mut(cqn) {
        cq.in_error = true;
    }
    let mut data = [0u8; 28];
    data[..4].copy_from_slice(&cqn.to_be_bytes());
    data[11] = syndrome;
    crate::engine::eq::post_subscribed_event(core, EventType::CqError, 0, &data);
}

fn completion_event(core: &mut Core, eqn: u32, cqn: u32) {
    let mut data = [0u8; 28];
    data[24..28].copy_from_slice(&(cqn & 0x00ff_ffff).to_be_bytes());
    crate::engine::eq::post_event(core, eqn, EventType::Completion, 0, &data);
}

/// The CQ arm doorbell: `high` = `sn << 28 | cmd << 24 | ci`, `low` = cqn.
pub(crate) fn arm(core: &mut Core, uar: u32, high: u32, low: u32) {
    add(&core.counters.cq_arms, 1);
    let cqn = low & 0x00ff_ffff;
    // The consumer index the arm reports is measured against every completion taken so far.
    flush(core, cqn);
    let Some(cq) = core.res.cqs.get_mut(cqn) else {
        add(&core.counters.bad_doorbells, 1);
        return;
    };
    if cq.uar != uar {
        add(&core.counters.bad_doorbells, 1);
        return;
    }
    let ci = high & 0x00ff_ffff;
    cq.arm_sn = ((high >> 28) & 3) as u8;
    cq.arm = if (high >> 24) & 0xf == 1 {
        CqArm::Solicited
    } else {
        CqArm::Next
    };
    // CQEs already written past the reported consumer index fire at once.
    if outstanding(cq.pi, ci, cq.log_size) != 0 && cq.arm == CqArm::Next {
        cq.arm = CqArm::Disarmed;
        let eqn = cq.eqn;
        completion_event(core, eqn, cqn);
    }
}
