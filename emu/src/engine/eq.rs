//! Event queues: writing EQEs with the right owner bit, arming, interrupts, overrun.

use crate::counters::add;
use crate::function::Core;
use cxdirect_hw::eqe::{EventType, EQE_SIZE};

/// Writes one EQE to EQ `eqn` and signals its vector if the EQ is armed.
pub(crate) fn post_event(
    core: &mut Core,
    eqn: u32,
    event: EventType,
    sub_type: u8,
    data: &[u8; 28],
) {
    post_raw_event(core, eqn, event as u8, sub_type, data);
}

/// [`post_event`] with any event type byte (fault injection posts types the model never
/// raises on its own).
pub(crate) fn post_raw_event(core: &mut Core, eqn: u32, event: u8, sub_type: u8, data: &[u8; 28]) {
    let Some(eq) = core.res.eqs.get(eqn) else {
        return;
    };
    let size = 1u32 << eq.log_size;
    if eq.pi.wrapping_sub(eq.ci) >= size {
        add(&core.counters.eq_overruns, 1);
        if let Some(eq) = core.res.eqs.get_mut(eqn) {
            eq.overrun = true;
        }
        return;
    }
    let mut eqe = [0u8; EQE_SIZE];
    eqe[1] = event;
    eqe[3] = sub_type;
    eqe[0x20..0x3c].copy_from_slice(data);
    eqe[0x3f] = ((eq.pi >> eq.log_size) & 1) as u8;
    let Some(addr) = eq.buf.addr(u64::from(eq.pi & (size - 1)) * EQE_SIZE as u64) else {
        return;
    };
    if core.dma_write(addr, &eqe).is_err() {
        return;
    }
    add(&core.counters.eqes, 1);
    let Some(eq) = core.res.eqs.get_mut(eqn) else {
        return;
    };
    eq.pi = eq.pi.wrapping_add(1);
    if eq.armed {
        eq.armed = false;
        let vector = eq.vector;
        core.signal(vector);
    }
}

/// Posts an event to the first EQ subscribed to its type (the async EQ), if any.
pub(crate) fn post_subscribed_event(
    core: &mut Core,
    event: EventType,
    sub_type: u8,
    data: &[u8; 28],
) {
    post_subscribed_raw(core, event as u8, sub_type, data);
}

/// [`post_subscribed_event`] with any event type byte; a type no EQ can subscribe to (64 and
/// up) goes to the first EQ subscribed to anything (the async EQ).
pub(crate) fn post_subscribed_raw(core: &mut Core, event: u8, sub_type: u8, data: &[u8; 28]) {
    let target = core
        .res
        .eqs
        .iter()
        .find(|(_, eq)| match event {
            0..=63 => eq.event_mask & (1u64 << event) != 0,
            _ => eq.event_mask != 0,
        })
        .map(|(n, _)| n);
    if let Some(eqn) = target {
        post_raw_event(core, eqn, event, sub_type, data);
    }
}

/// True when some EQ takes events of type `event`.
pub(crate) fn subscribed(core: &Core, event: EventType) -> bool {
    let bit = 1u64 << (event as u8);
    core.res.eqs.iter().any(|(_, eq)| eq.event_mask & bit != 0)
}

/// Same as [`post_subscribed_event`]; named for asynchronous (non-completion) events.
pub(crate) fn post_async_event(core: &mut Core, event: EventType, sub_type: u8, data: &[u8; 28]) {
    post_subscribed_event(core, event, sub_type, data);
}

/// The EQ doorbell: the driver reports its consumer index and (optionally) re-arms.
pub(crate) fn doorbell(core: &mut Core, uar: u32, value: u32, arm: bool) {
    add(&core.counters.eq_doorbells, 1);
    let eqn = value >> 24;
    let ci = value & 0x00ff_ffff;
    let Some(eq) = core.res.eqs.get_mut(eqn) else {
        add(&core.counters.bad_doorbells, 1);
        return;
    };
    if eq.uar != uar {
        add(&core.counters.bad_doorbells, 1);
        return;
    }
    // The driver reports 24 bits; extend to our 32-bit counter near the producer.
    let full = (eq.pi & !0x00ff_ffff) | ci;
    eq.ci = if full > eq.pi {
        full.wrapping_sub(1 << 24)
    } else {
        full
    };
    if eq.pi.wrapping_sub(eq.ci) < (1 << eq.log_size) {
        eq.overrun = false;
    }
    if arm {
        if eq.pi != eq.ci {
            let vector = eq.vector;
            eq.armed = false;
            core.signal(vector);
        } else {
            eq.armed = true;
        }
    }
}
