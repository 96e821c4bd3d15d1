//! Receive interrupts as file descriptors: a receive queue of a port started with
//! `CXD_PORT_RX_INTERRUPTS` has an eventfd that `poll()`, `epoll` or `select` wait on.
//!
//! The cycle, as DPDK's `rte_eth_dev_rx_intr_enable`: receive until a burst comes back empty,
//! `cxd_rxq_interrupt_arm`, receive once more (a packet that came in between the last burst
//! and the arm is not missed: it is received here, or fires the descriptor at once), then
//! sleep in `poll()` on the descriptor; when it is readable, `cxd_rxq_interrupt_ack` and
//! receive again.

use crate::boundary::handle;
use crate::burst::cxd_rxq;
use crate::error::{guard, Error, Failure};
use std::ffi::c_int;
use std::os::fd::AsRawFd;
use std::time::Duration;

use crate::boundary::handle::Kind;

/// The receive queue's interrupt descriptor (`POLLIN` when it fired), or a negative
/// `cxd_error`: `CXD_ERROR_CONFIG` for a port started without `CXD_PORT_RX_INTERRUPTS`. The
/// descriptor is the queue's: do not close or read it; it stays valid until `cxd_port_close`.
///
/// # Safety
///
/// `q` is NULL or a handle this library returned.
#[no_mangle]
pub unsafe extern "C" fn cxd_rxq_interrupt_fd(q: *mut cxd_rxq) -> c_int {
    guard(|| {
        let mut q = handle::resolve(q)?.exclusive(cxd_rxq::NAME)?;
        let fd = q.get().q.interrupt_fd().ok_or_else(not_enabled)?;
        Ok(fd.as_raw_fd())
    })
}

/// Arms the queue's interrupt: its descriptor becomes readable at the next packet received
/// (at once when one came in since the last burst took the queue's completions). One packet
/// fires it once; arm again after each wake-up.
///
/// # Safety
///
/// `q` is NULL or a handle this library returned.
#[no_mangle]
pub unsafe extern "C" fn cxd_rxq_interrupt_arm(q: *mut cxd_rxq) -> c_int {
    guard(|| {
        let mut q = handle::resolve(q)?.exclusive(cxd_rxq::NAME)?;
        q.get().q.arm_interrupt()?;
        Ok(0)
    })
}

/// Takes the queue's interrupt after `poll()` reported its descriptor readable (or to clear
/// it without sleeping): returns 1 when the armed interrupt fired, 0 when it had not, or a
/// negative `cxd_error`. Never blocks. Receive next, then arm again before sleeping.
///
/// # Safety
///
/// `q` is NULL or a handle this library returned.
#[no_mangle]
pub unsafe extern "C" fn cxd_rxq_interrupt_ack(q: *mut cxd_rxq) -> c_int {
    guard(|| {
        let mut q = handle::resolve(q)?.exclusive(cxd_rxq::NAME)?;
        let fired = q.get().q.wait_interrupt(Duration::ZERO)?;
        Ok(c_int::from(fired))
    })
}

fn not_enabled() -> Failure {
    Failure::new(
        Error::Config,
        "the port was started without receive interrupts; set CXD_PORT_RX_INTERRUPTS in \
         cxd_port_config.flags",
    )
}
