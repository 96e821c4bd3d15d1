//! The port's traffic classes and its link's speed, set on a running port's function: which
//! class each priority's packets go in, how the classes take turns on the link (strict or
//! ETS shares), each class's rate limit, and the speed the link runs at, as Linux's `dcb ets`,
//! `dcb maxrate` and `ethtool -s speed` set them through mlx5e. A port's own packets carry
//! `cxd_port_config.tx_priority`.

use crate::boundary::handle::{self, Exclusive, Kind};
use crate::boundary::{array, slice_in, write_out};
use crate::error::{guard, Error, Failure};
use crate::port::{cxd_port, PortState};
use driver::ClassSelection;
use std::ffi::c_int;

/// `cxd_class_selection.kind`: strict priority, before every ETS class and before the strict
/// classes numbered below it.
pub const CXD_CLASS_STRICT: u8 = 0;
/// `cxd_class_selection.kind`: enhanced transmission selection, `percent` of what the strict
/// classes leave (the ETS classes' percents add up to 100).
pub const CXD_CLASS_ETS: u8 = 1;
/// `cxd_class_selection.kind`: the vendor's selection mlx5e sets at probe (every vendor class
/// in the top group, sharing equally).
pub const CXD_CLASS_VENDOR: u8 = 2;

/// How one traffic class takes its turn on the link (`dcb ets tc-tsa` and `tc-bw`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(non_camel_case_types)]
pub struct cxd_class_selection {
    /// `CXD_CLASS_STRICT`, `CXD_CLASS_ETS` or `CXD_CLASS_VENDOR`.
    pub kind: u8,
    /// For `CXD_CLASS_ETS`: the class's share, percent (0..=100); zero otherwise.
    pub percent: u8,
}

/// One traffic class as the port holds it (what `dcb ets show` and `dcb maxrate show` read).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(non_camel_case_types)]
pub struct cxd_class_settings {
    /// Its group (0..=7): a class in a higher group goes first on a contended link; 7 is the
    /// vendor group.
    pub group: u8,
    /// Its share of its group's bandwidth, percent (0..=100).
    pub percent: u8,
    /// Zero.
    pub reserved: u16,
    /// Its rate limit in Mb/s, 0 for none.
    pub limit_mbps: u32,
}

fn running(ptr: *const cxd_port) -> Result<Exclusive<'static, PortState>, Failure> {
    handle::resolve(ptr)?.exclusive(cxd_port::NAME)
}

/// Puts priority `prio` (0..=7) in traffic class `tc` (below the port's classes, 8 on a
/// ConnectX-6 Dx), as `dcb ets set DEV prio-tc PRIO:TC` does.
///
/// # Safety
///
/// `port` is NULL or a handle this library returned.
#[no_mangle]
pub unsafe extern "C" fn cxd_port_set_priority_class(
    port: *mut cxd_port,
    prio: u8,
    tc: u8,
) -> c_int {
    guard(|| {
        let mut state = running(port)?;
        state
            .get()
            .port_mut()
            .device()
            .set_priority_class(prio, tc)?;
        Ok(0)
    })
}

/// Limits traffic class `tc` to `mbps` Mb/s (0: no limit), as `dcb maxrate set DEV
/// tc-maxrate TC:RATE` does: in units of 100 Mb/s up to 25.5 Gb/s (at least one), whole
/// Gb/s above, at most 255 Gb/s.
///
/// # Safety
///
/// `port` is NULL or a handle this library returned.
#[no_mangle]
pub unsafe extern "C" fn cxd_port_set_class_rate_limit(
    port: *mut cxd_port,
    tc: u8,
    mbps: u32,
) -> c_int {
    guard(|| {
        let mut state = running(port)?;
        let limit = (mbps != 0).then_some(mbps);
        state
            .get()
            .port_mut()
            .device()
            .set_class_rate_limit(tc, limit)?;
        Ok(0)
    })
}

/// Sets how every traffic class takes its turn on the link: `classes` holds `n` selections,
/// one per class of the port (8 on a ConnectX-6 Dx), as `dcb ets set DEV tc-tsa ... tc-bw
/// ...` does. The groups and shares divide the link where it is the bottleneck
/// (`cxd_port_set_link_speed`).
///
/// # Safety
///
/// `port` is NULL or a handle this library returned; `classes` is NULL or points to `n`
/// readable `struct cxd_class_selection`.
#[no_mangle]
pub unsafe extern "C" fn cxd_port_set_class_selection(
    port: *mut cxd_port,
    classes: *const cxd_class_selection,
    n: u8,
) -> c_int {
    guard(|| {
        let given = slice_in(classes, usize::from(n), "classes")?;
        let mut selections = Vec::with_capacity(given.len());
        for (tc, c) in given.iter().enumerate() {
            selections.push(match (c.kind, c.percent) {
                (CXD_CLASS_STRICT, 0) => ClassSelection::Strict,
                (CXD_CLASS_ETS, percent) => ClassSelection::Ets(percent),
                (CXD_CLASS_VENDOR, 0) => ClassSelection::Vendor,
                (kind, percent) => {
                    return Err(Failure::new(
                        Error::Config,
                        format!(
                            "class {tc}: kind {kind} with percent {percent}; give \
                             CXD_CLASS_STRICT or CXD_CLASS_VENDOR with percent 0, or \
                             CXD_CLASS_ETS with its share"
                        ),
                    ))
                }
            });
        }
        let mut state = running(port)?;
        state
            .get()
            .port_mut()
            .device()
            .set_class_selection(&selections)?;
        Ok(0)
    })
}

/// Runs the link at `mbps` Mb/s with auto-negotiation off (`ethtool -s DEV speed S autoneg
/// off`), or with 0 at any speed the port offers, auto-negotiated. A speed the port does not
/// offer is refused with `CXD_ERROR_CONFIG`, whose message lists those it does.
///
/// # Safety
///
/// `port` is NULL or a handle this library returned.
#[no_mangle]
pub unsafe extern "C" fn cxd_port_set_link_speed(port: *mut cxd_port, mbps: u32) -> c_int {
    guard(|| {
        let mut state = running(port)?;
        let speed = (mbps != 0).then_some(mbps);
        state.get().port_mut().device().set_link_speed(speed)?;
        Ok(0)
    })
}

/// Stores the speed the link runs at, in Mb/s (0 while it is down), in `*mbps`.
///
/// # Safety
///
/// `port` is NULL or a handle this library returned; `mbps` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cxd_port_link_speed(port: *mut cxd_port, mbps: *mut u32) -> c_int {
    guard(|| {
        let mut state = running(port)?;
        let speeds = state.get().port_mut().device().link_speeds()?;
        write_out(mbps, speeds.running_mbps, "mbps")?;
        Ok(0)
    })
}

/// Stores the traffic class of priorities 0 to 7 in `classes[0..8]` (`dcb ets show ...
/// prio-tc`).
///
/// # Safety
///
/// `port` is NULL or a handle this library returned; `classes` is NULL or points to 8
/// writable bytes.
#[no_mangle]
pub unsafe extern "C" fn cxd_port_priority_classes(port: *mut cxd_port, classes: *mut u8) -> c_int {
    guard(|| {
        let out = array(classes, 8, "classes")?;
        let mut state = running(port)?;
        let read = state.get().port_mut().device().priority_classes()?;
        out.copy_from_slice(&read);
        Ok(0)
    })
}

/// Stores each traffic class's group, share and rate limit in `out[0..]`, at most `n` of
/// them; returns how many classes the port has (8 on a ConnectX-6 Dx), which may be more than
/// `n`.
///
/// # Safety
///
/// `port` is NULL or a handle this library returned; `out` is NULL or points to `n` writable
/// `struct cxd_class_settings`.
#[no_mangle]
pub unsafe extern "C" fn cxd_port_class_settings(
    port: *mut cxd_port,
    out: *mut cxd_class_settings,
    n: u8,
) -> c_int {
    guard(|| {
        let out = array(out, usize::from(n), "out")?;
        let mut state = running(port)?;
        let held = state.get().port_mut().device().class_settings()?;
        for (slot, class) in out.iter_mut().zip(&held) {
            *slot = cxd_class_settings {
                group: class.group,
                percent: class.percent,
                reserved: 0,
                limit_mbps: class.limit_mbps.unwrap_or(0),
            };
        }
        Ok(held.len() as c_int)
    })
}
