//! Shared receive queues: one pool of receives that any number of queue pairs take from.

use super::memory::{cxd_pd, PdState};
use super::wr::{cxd_recv_wr, post_recvs, posted};
use super::{kind, release_child, take_events, RdmaState};
use crate::backend::AnyBackend;
use crate::boundary::handle::{self, Handle, Kind};
use crate::boundary::{slice_in, write_out};
use crate::error::{guard, Error, Failure};
use driver::rdma::{SharedReceiveQueue, SrqCaps};
use std::ffi::c_int;

/// What a shared receive queue handle holds.
pub(crate) struct SrqState {
    pub(crate) srq: SharedReceiveQueue<AnyBackend>,
    pub(crate) rdma: &'static Handle<RdmaState>,
    pd: &'static Handle<PdState>,
    /// Queue pairs receiving from it.
    pub(crate) users: u32,
}

/// A shared receive queue (`struct cxd_srq` in C, opaque).
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct cxd_srq {
    handle: Handle<SrqState>,
}
kind!(cxd_srq, SrqState, 0x6378_642d_7372_7100); // "cxd-srq"

/// Creates a shared receive queue in `pd` taking `max_wr` receives of up to `max_sge` scatter
/// entries each (`ibv_create_srq`). Queue pairs created with it receive from it.
///
/// # Safety
///
/// `pd` is NULL or a handle this library returned; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cxd_srq_create(
    pd: *mut cxd_pd,
    max_wr: u32,
    max_sge: u32,
    out: *mut *mut cxd_srq,
) -> c_int {
    guard(|| {
        let pd_h = handle::resolve(pd)?;
        if out.is_null() {
            return Err(Failure::new(Error::Null, "out is NULL; pass &srq"));
        }
        let mut p = pd_h.exclusive(cxd_pd::NAME)?;
        let owner = p.get().rdma;
        let mut r = owner.exclusive(super::cxd_rdma::NAME)?;
        let srq =
            SharedReceiveQueue::create(&mut r.get().dev, &p.get().pd, SrqCaps { max_wr, max_sge })?;
        r.get().children += 1;
        p.get().users += 1;
        let h = handle::open::<cxd_srq>(SrqState {
            srq,
            rdma: owner,
            pd: pd_h,
            users: 0,
        });
        write_out(out, h as *const cxd_srq as *mut cxd_srq, "out")?;
        Ok(0)
    })
}

/// Posts the receives `wrs[0..n]` on the shared receive queue (`ibv_post_srq_recv`), as
/// `cxd_qp_post_recv`: returns `n`, or a negative `cxd_error` with the first request not
/// posted in `*bad` (when not NULL). Nothing is allocated.
///
/// # Safety
///
/// `srq` is NULL or a handle this library returned; `wrs` points to `n` requests whose lists
/// are readable; `bad` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cxd_srq_post_recv(
    srq: *mut cxd_srq,
    wrs: *const cxd_recv_wr,
    n: u32,
    bad: *mut u32,
) -> c_int {
    guard(|| {
        let mut s = handle::resolve(srq)?.exclusive(cxd_srq::NAME)?;
        let wrs = slice_in(wrs, n as usize, "wrs")?;
        let srq = &mut s.get().srq;
        posted(post_recvs(wrs, |g| srq.post_recv(g)), wrs.len(), bad)
    })
}

/// Destroys the shared receive queue; the receives still posted on it are dropped (their
/// buffers are the program's again). Refused with `CXD_ERROR_BUSY` while a queue pair receives
/// from it.
///
/// # Safety
///
/// `srq` is NULL or a handle this library returned.
#[no_mangle]
pub unsafe extern "C" fn cxd_srq_destroy(srq: *mut cxd_srq) -> c_int {
    guard(|| {
        let mut s = handle::resolve(srq)?.exclusive(cxd_srq::NAME)?;
        if s.get().users > 0 {
            return Err(Failure::new(
                Error::Busy,
                format!(
                    "{} queue pairs receive from the shared receive queue; destroy them first",
                    s.get().users
                ),
            ));
        }
        let (owner, pd) = (s.get().rdma, s.get().pd);
        let mut p = pd.exclusive(cxd_pd::NAME)?;
        let mut r = owner.exclusive(super::cxd_rdma::NAME)?;
        let Some(state) = s.close() else {
            return Err(Failure::new(Error::Closed, "the cxd_srq was closed"));
        };
        let srqn = state.srq.srqn();
        let result = state.srq.destroy(&mut r.get().dev);
        // A limit event not taken dies with its queue (a later queue may get its number).
        r.get().srq_limits.retain(|&n| n != srqn);
        release_child(&mut r);
        p.get().users = p.get().users.saturating_sub(1);
        result.map(|_| 0).map_err(Failure::from)
    })
}

/// Arms the shared receive queue's limit (`ibv_modify_srq` with `IBV_SRQ_LIMIT`): once fewer
/// than `limit` receives are posted, the device raises one limit event (the descriptor of
/// `cxd_rdma_event_fd` becomes readable, and `cxd_srq_limit_reached` returns 1). The limit is
/// one-shot: post more receives, then arm it again. `limit` is 1 to `max_wr`; 0 disarms.
///
/// Returns 0, or a negative `cxd_error` (`CXD_ERROR_CONFIG` for a limit past the queue).
///
/// # Safety
///
/// `srq` is NULL or a handle this library returned.
#[no_mangle]
pub unsafe extern "C" fn cxd_srq_arm_limit(srq: *mut cxd_srq, limit: u32) -> c_int {
    guard(|| {
        let mut s = handle::resolve(srq)?.exclusive(cxd_srq::NAME)?;
        let state = s.get();
        let mut r = state.rdma.exclusive(super::cxd_rdma::NAME)?;
        // An event of an earlier arming, not yet taken, is not this arming's.
        let srqn = state.srq.srqn();
        take_events(r.get())?;
        r.get().srq_limits.retain(|&n| n != srqn);
        state.srq.arm_limit(&mut r.get().dev, limit)?;
        Ok(0)
    })
}

/// Whether the shared receive queue's armed limit was reached: 1 once for each event the
/// device raised (the limit is then disarmed), 0 when none came since the last call, or a
/// negative `cxd_error`. Takes the device's pending async events and never blocks: call it
/// when `cxd_rdma_event_fd` polls readable, or now and then.
///
/// # Safety
///
/// `srq` is NULL or a handle this library returned.
#[no_mangle]
pub unsafe extern "C" fn cxd_srq_limit_reached(srq: *mut cxd_srq) -> c_int {
    guard(|| {
        let mut s = handle::resolve(srq)?.exclusive(cxd_srq::NAME)?;
        let srqn = s.get().srq.srqn();
        let mut r = s.get().rdma.exclusive(super::cxd_rdma::NAME)?;
        take_events(r.get())?;
        let pending = &mut r.get().srq_limits;
        let reached = pending.iter().position(|&n| n == srqn).map(|i| {
            pending.remove(i);
        });
        Ok(c_int::from(reached.is_some()))
    })
}
