//! Send and receive queues and their bursts: arrays of mbuf handles, no packet copied.
//!
//! What a burst costs at the boundary, beyond the driver's own burst: one compare-and-swap
//! and one store on the queue's handle (it is one caller's for the burst), and per packet the
//! slot work described in [`crate::boundary::slots`]: a send checks each handle (a
//! compare-and-swap and a store on its slot), a receive places each buffer (a load and a
//! store: the pool handed it over, nothing else can reach its free slot), and each moves the
//! `Mbuf` into or out of its slot. The slot's buffer index comes from the `Mbuf` itself,
//! not from dividing its offset. The queue keeps its scratch vectors
//! (room for [`CXD_MAX_BURST`] packets, made when the port starts), so a burst allocates
//! nothing and takes no lock.

use crate::backend::AnyBackend;
use crate::boundary::array;
use crate::boundary::handle::{self, Handle, Kind};
use crate::boundary::slots::{claim, cxd_mbuf, SlotTable, Taken};
use crate::error::{guard, Error, Failure};
use crate::CXD_MAX_BURST;
use driver::{DriverError, Mbuf, RxQueue, SharedRxQueue, TxQueue};
use std::ffi::c_int;
use std::os::fd::BorrowedFd;
use std::time::Duration;

const MAX: usize = CXD_MAX_BURST as usize;

/// What a send queue handle holds.
pub(crate) struct TxqState {
    q: TxQueue<AnyBackend>,
    /// The burst's buffers, taken from their slots.
    scratch: Vec<Mbuf>,
    /// The slots they came from, in the same order.
    claims: Vec<Taken>,
}

impl TxqState {
    pub(crate) fn new(q: TxQueue<AnyBackend>) -> Self {
        Self {
            q,
            scratch: Vec::with_capacity(MAX),
            claims: Vec::with_capacity(MAX),
        }
    }
}

/// A receive queue of either kind: with a ring of its own, or drawing from the port's shared
/// ring. The two have the same calls; one predictable branch picks the kind.
pub(crate) enum RxSource {
    /// A queue with its own ring.
    Plain(RxQueue<AnyBackend>),
    /// A queue of the port's shared receive ring.
    Shared(SharedRxQueue<AnyBackend>),
}

macro_rules! each_rx {
    ($self:ident, $q:ident => $call:expr) => {
        match $self {
            RxSource::Plain($q) => $call,
            RxSource::Shared($q) => $call,
        }
    };
}

impl RxSource {
    #[inline]
    fn rx_burst(&mut self, sink: &mut Vec<Mbuf>, max: usize) -> Result<usize, DriverError> {
        each_rx!(self, q => q.rx_burst(sink, max))
    }

    /// The queue's RQ number.
    pub(crate) fn rqn(&self) -> u32 {
        each_rx!(self, q => q.rqn())
    }

    /// As the driver's `arm_interrupt`.
    pub(crate) fn arm_interrupt(&mut self) -> Result<(), DriverError> {
        each_rx!(self, q => q.arm_interrupt())
    }

    /// As the driver's `wait_interrupt`.
    pub(crate) fn wait_interrupt(&mut self, timeout: Duration) -> Result<bool, DriverError> {
        each_rx!(self, q => q.wait_interrupt(timeout))
    }

    /// As the driver's `interrupt_fd`.
    pub(crate) fn interrupt_fd(&self) -> Option<BorrowedFd<'_>> {
        each_rx!(self, q => q.interrupt_fd())
    }
}

/// What a receive queue handle holds.
pub(crate) struct RxqState {
    pub(crate) q: RxSource,
    scratch: Vec<Mbuf>,
    table: SlotTable,
}

impl RxqState {
    pub(crate) fn new(q: RxSource, table: SlotTable) -> Self {
        Self {
            q,
            scratch: Vec::with_capacity(MAX),
            table,
        }
    }
}

/// A port's send queue (`struct cxd_txq` in C, opaque).
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct cxd_txq {
    handle: Handle<TxqState>,
}

impl Kind for cxd_txq {
    type Inner = TxqState;
    const MAGIC: u64 = 0x6378_642d_7478_7100; // "cxd-txq"
    const NAME: &'static str = "cxd_txq";
    fn wrap(handle: Handle<TxqState>) -> Self {
        Self { handle }
    }
    fn handle(&self) -> &Handle<TxqState> {
        &self.handle
    }
}

/// A port's receive queue (`struct cxd_rxq` in C, opaque).
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct cxd_rxq {
    handle: Handle<RxqState>,
}

impl Kind for cxd_rxq {
    type Inner = RxqState;
    const MAGIC: u64 = 0x6378_642d_7278_7100; // "cxd-rxq"
    const NAME: &'static str = "cxd_rxq";
    fn wrap(handle: Handle<RxqState>) -> Self {
        Self { handle }
    }
    fn handle(&self) -> &Handle<RxqState> {
        &self.handle
    }
}

fn too_large(n: u16) -> Failure {
    Failure::new(
        Error::BurstTooLarge,
        format!("a burst of {n} packets; give at most CXD_MAX_BURST ({CXD_MAX_BURST}) per call"),
    )
}

/// Sends the mbufs `pkts[0..n]` from the front, as DPDK's `rte_eth_tx_burst`: returns how
/// many it took (the first ones; fewer than `n` when the ring is full), which are no longer
/// the caller's (the queue frees them once sent); the rest stay the caller's, to send again
/// or free. A packet the port cannot send (too short, too long) is taken and dropped, counted
/// in `oerrors`. No packet is copied.
///
/// Returns the count, or a negative `cxd_error` with nothing sent and every mbuf still the
/// caller's: `CXD_ERROR_BURST_TOO_LARGE` when `n` > `CXD_MAX_BURST`, `CXD_ERROR_DOUBLE_FREE` (or
/// another handle error) for an mbuf that is not the caller's, `CXD_ERROR_BUSY` when another
/// thread is using the queue.
///
/// # Safety
///
/// `q` is NULL or a handle this library returned; `pkts` points to `n` mbuf handles (or `n`
/// is 0).
#[no_mangle]
pub unsafe extern "C" fn cxd_tx_burst(q: *mut cxd_txq, pkts: *mut *mut cxd_mbuf, n: u16) -> c_int {
    guard(|| {
        let mut q = handle::resolve(q)?.exclusive(cxd_txq::NAME)?;
        if usize::from(n) > MAX {
            return Err(too_large(n));
        }
        let pkts = array(pkts, usize::from(n), "pkts")?;
        let TxqState { q, scratch, claims } = q.get();
        scratch.clear();
        claims.clear();
        for (i, &m) in pkts.iter().enumerate() {
            match claim(m) {
                Ok(c) => {
                    let (m, taken) = c.take_keeping();
                    scratch.push(m);
                    claims.push(taken);
                }
                Err(mut e) => {
                    // Nothing is sent: every mbuf goes back to the caller.
                    for (c, m) in claims.drain(..).zip(scratch.drain(..)) {
                        c.put_back(m);
                    }
                    e.message = format!("pkts[{i}]: {}", e.message);
                    return Err(e);
                }
            }
        }
        let sent = q.tx_burst(scratch);
        // The queue took the first `sent`; the rest are left in `scratch`, in order.
        for c in claims.drain(..sent) {
            c.release();
        }
        for (c, m) in claims.drain(..).zip(scratch.drain(..)) {
            c.put_back(m);
        }
        Ok(c_int::try_from(sent).unwrap_or(c_int::MAX))
    })
}

/// Receives up to `n` packets into `pkts[0..n]`, as DPDK's `rte_eth_rx_burst`: returns how
/// many it stored (0 when none waits); each is a new mbuf of the port's pool, the caller's to
/// free or send. Nothing past `pkts[n - 1]` is written. No packet is copied.
///
/// Returns the count, or a negative `cxd_error` with nothing received:
/// `CXD_ERROR_BURST_TOO_LARGE` when `n` > `CXD_MAX_BURST`, `CXD_ERROR_BUSY` when another thread
/// is using the queue, `CXD_ERROR_DEVICE` when the queue failed.
///
/// # Safety
///
/// `q` is NULL or a handle this library returned; `pkts` points to room for `n` handles (or
/// `n` is 0).
#[no_mangle]
pub unsafe extern "C" fn cxd_rx_burst(q: *mut cxd_rxq, pkts: *mut *mut cxd_mbuf, n: u16) -> c_int {
    guard(|| {
        let mut q = handle::resolve(q)?.exclusive(cxd_rxq::NAME)?;
        if usize::from(n) > MAX {
            return Err(too_large(n));
        }
        let pkts = array(pkts, usize::from(n), "pkts")?;
        let RxqState { q, scratch, table } = q.get();
        scratch.clear();
        let got = q.rx_burst(scratch, pkts.len())?;
        for (i, m) in scratch.drain(..).enumerate() {
            match table.place(m.buffer_index() as usize, m) {
                Ok(token) => pkts[i] = token,
                Err(e) => {
                    // Hand back nothing: free what was placed (the rest drop with `scratch`).
                    for &placed in &pkts[..i] {
                        if let Ok(c) = claim(placed) {
                            drop(c.take());
                        }
                    }
                    return Err(e);
                }
            }
        }
        Ok(c_int::try_from(got).unwrap_or(c_int::MAX))
    })
}
