//! Completion queues: writing CQEs with the right owner bit, overrun detection through the
//! doorbell record, arming and completion events.

use crate::counters::add;
use crate::faults::Fault;
use crate::fw::objects::CqArm;
use crate::fw::Core;
use cxdirect_hw::eqe::{cq_error, EventType};

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

/// Writes `cqe` (opcode and fields set; the owner bit is filled in here) to CQ `cqn`.
pub(crate) fn post(core: &mut Core, cqn: u32, cqe: &mut [u8; 64]) -> Result<(), CqFault> {
    let Some(cq) = core.res.cqs.get(cqn) else {
        return Err(CqFault::Missing);
    };
    if cq.in_error {
        return Err(CqFault::Overrun);
    }
    let size = 1u32 << cq.log_size;
    let pi = cq.pi;
    let (dbr, eqn, overrun_ignore) = (cq.dbr, cq.eqn, cq.overrun_ignore);
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
        let outstanding = (pi & 0x00ff_ffff).wrapping_sub(ci) & 0x00ff_ffff;
        let forced = core
            .faults
            .take(|f| matches!(f, Fault::CqOverrun { cqn: c } if *c == cqn).then_some(()))
            .is_some();
        if forced || outstanding >= size {
            add(&core.counters.cq_overruns, 1);
            enter_error(core, cqn, cq_error::OVERRUN);
            return Err(CqFault::Overrun);
        }
    }
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
    let owner = ((pi >> core.res.cqs.get(cqn).map(|c| c.log_size).unwrap_or(0)) & 1) as u8;
    cqe[63] = (cqe[63] & !1) | (owner ^ u8::from(wrong_owner));
    let addr = core
        .res
        .cqs
        .get(cqn)
        .and_then(|c| c.buf.addr(u64::from(pi & (size - 1)) * 64))
        .ok_or(CqFault::Dma)?;
    if core.dma_write(addr, &cqe[..]).is_err() {
        enter_error(core, cqn, cq_error::ACCESS_VIOLATION);
        return Err(CqFault::Dma);
    }
    add(&core.counters.cqes, 1);
    let Some(cq) = core.res.cqs.get_mut(cqn) else {
        return Ok(());
    };
    cq.pi = pi.wrapping_add(1);
    let solicited = cqe[63] & 2 != 0;
    let fire = match cq.arm {
        CqArm::Next => true,
        CqArm::Solicited => solicited,
        CqArm::Disarmed => false,
    };
    if fire {
        cq.arm = CqArm::Disarmed;
        completion_event(core, eqn, cqn);
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
    if (cq.pi & 0x00ff_ffff) != ci && cq.arm == CqArm::Next {
        cq.arm = CqArm::Disarmed;
        let eqn = cq.eqn;
        completion_event(core, eqn, cqn);
    }
}
