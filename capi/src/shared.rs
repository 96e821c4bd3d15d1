//! A port's shared receive ring (`cxd_port_config.shared_ring_size`): one ring of buffers that
//! every receive queue of the port takes from (the driver's `SharedRxRing`, an RMP), refilled
//! by the program, with a limit (low watermark) whose event says when to refill.
//!
//! The cycle: receive on the queues as usual; when `cxd_port_event_fd` polls readable (or now
//! and then), `cxd_port_shared_limit_reached`; when it says 1, receive what the queues hold,
//! `cxd_port_shared_refill`, then `cxd_port_shared_arm_limit` again (the limit is one-shot).

use crate::boundary::handle::{self, Exclusive, Kind};
use crate::boundary::write_out;
use crate::error::{guard, Error, Failure};
use crate::port::{cxd_port, PortState};
use driver::SharedRxRing;
use std::ffi::c_int;
use std::os::fd::AsRawFd;
use std::time::Duration;

fn port(ptr: *const cxd_port) -> Result<Exclusive<'static, PortState>, Failure> {
    handle::resolve(ptr)?.exclusive(cxd_port::NAME)
}

fn ring(state: &mut PortState) -> Result<&mut SharedRxRing<crate::backend::AnyBackend>, Failure> {
    state.shared.as_mut().ok_or_else(|| {
        Failure::new(
            Error::Config,
            "the port was started without a shared receive ring; set shared_ring_size in \
             cxd_port_config",
        )
    })
}

fn count(n: u32) -> c_int {
    c_int::try_from(n).unwrap_or(c_int::MAX)
}

/// Posts buffers from the port's pool on its shared receive ring until the ring is full or the
/// pool is empty; returns how many it posted, or a negative `cxd_error` (`CXD_ERROR_CONFIG` for
/// a port without a shared ring). A buffer is posted again only once the queue that received
/// into it has taken its completion: receive first, then refill.
///
/// # Safety
///
/// `port` is NULL or a handle this library returned.
#[no_mangle]
pub unsafe extern "C" fn cxd_port_shared_refill(port: *mut cxd_port) -> c_int {
    guard(|| {
        let mut p = self::port(port)?;
        Ok(count(ring(p.get())?.refill()))
    })
}

/// Buffers posted on the shared ring whose packets no queue has received yet (the driver's
/// count), or a negative `cxd_error`.
///
/// # Safety
///
/// `port` is NULL or a handle this library returned.
#[no_mangle]
pub unsafe extern "C" fn cxd_port_shared_outstanding(port: *mut cxd_port) -> c_int {
    guard(|| {
        let mut p = self::port(port)?;
        Ok(count(ring(p.get())?.outstanding()))
    })
}

/// Arms the shared ring's limit (MODIFY_RMP `lwm`): once fewer than `limit` buffers are
/// posted, the device raises one limit event. `limit` is 1 to the ring's size - 1; 0 disarms.
/// Returns 0, or a negative `cxd_error` (`CXD_ERROR_CONFIG` for a limit past the ring, with
/// nothing changed).
///
/// # Safety
///
/// `port` is NULL or a handle this library returned.
#[no_mangle]
pub unsafe extern "C" fn cxd_port_shared_arm_limit(port: *mut cxd_port, limit: u32) -> c_int {
    guard(|| {
        let mut p = self::port(port)?;
        let state = p.get();
        ring(state)?;
        // An event of an earlier arming, not yet taken, is not this arming's.
        take_events(state)?;
        state.shared_low = None;
        state.port_mut().set_shared_limit(limit)?;
        Ok(0)
    })
}

/// Whether the shared ring's armed limit was reached: 1 once for each event the device raised
/// (storing in `*posted`, when not NULL, the buffers the device still had posted then), 0 when
/// none came since the last call, or a negative `cxd_error`. Takes the device's pending events
/// and never blocks.
///
/// # Safety
///
/// `port` is NULL or a handle this library returned; `posted` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cxd_port_shared_limit_reached(
    port: *mut cxd_port,
    posted: *mut u32,
) -> c_int {
    guard(|| {
        let mut p = self::port(port)?;
        let state = p.get();
        ring(state)?;
        take_events(state)?;
        match state.shared_low.take() {
            Some(n) => {
                if !posted.is_null() {
                    write_out(posted, n, "posted")?;
                }
                Ok(1)
            }
            None => Ok(0),
        }
    })
}

/// The device's async event descriptor: readable (`POLLIN`) when the device raised an event,
/// such as the shared ring's limit (`cxd_port_shared_limit_reached` then takes it). The
/// descriptor is the device's: do not close or read it; it stays valid until
/// `cxd_port_close`. Returns it, or a negative `cxd_error`.
///
/// # Safety
///
/// `port` is NULL or a handle this library returned.
#[no_mangle]
pub unsafe extern "C" fn cxd_port_event_fd(port: *mut cxd_port) -> c_int {
    guard(|| {
        let mut p = self::port(port)?;
        let fd = p.get().port_mut().device().event_fd().ok_or_else(|| {
            Failure::new(
                Error::Device,
                "the device has no async event interrupt (MSI-X was not enabled)",
            )
        })?;
        Ok(fd.as_raw_fd())
    })
}

/// Takes the device's async events (never blocking), clearing its event descriptor, and keeps
/// the shared ring's limit event for `cxd_port_shared_limit_reached`.
fn take_events(state: &mut PortState) -> Result<(), Failure> {
    let id = state.shared.as_ref().map(SharedRxRing::id);
    let dev = state.port_mut().device();
    dev.wait_event(Duration::ZERO);
    let mut low = None;
    loop {
        for event in dev.poll_events()? {
            if let driver::Event::SharedRingLow { ring, posted } = event {
                if Some(ring) == id {
                    low = Some(posted);
                }
            }
        }
        // Events a command took off the queue while it waited are not in the descriptor.
        if !dev.events_pending() {
            break;
        }
    }
    if low.is_some() {
        state.shared_low = low;
    }
    Ok(())
}
