//! RC queue pairs: create (in reset), the endpoint a peer is told, connect to a peer's
//! endpoint (RST→INIT→RTR→RTS), post sends and receives, destroy.

use super::cq::{cxd_cq, CqState};
use super::memory::{cxd_pd, PdState};
use super::srq::{cxd_srq, SrqState};
use super::wr::{cxd_recv_wr, cxd_send_wr, post_recvs, post_sends, posted};
use super::{kind, not_ours, release_child, RdmaState};
use crate::backend::AnyBackend;
use crate::boundary::handle::{self, Handle, Kind};
use crate::boundary::{read_in, slice_in, write_out};
use crate::error::{guard, Error, Failure};
use driver::rdma::{ConnectParams, Endpoint, PathMtu, QpCaps, RcQueuePair};
use std::ffi::c_int;

/// Path MTU 256 bytes (`IBV_MTU_256`).
pub const CXD_MTU_256: u8 = 1;
/// Path MTU 512 bytes.
pub const CXD_MTU_512: u8 = 2;
/// Path MTU 1024 bytes.
pub const CXD_MTU_1024: u8 = 3;
/// Path MTU 2048 bytes.
pub const CXD_MTU_2048: u8 = 4;
/// Path MTU 4096 bytes.
pub const CXD_MTU_4096: u8 = 5;

/// Sizes of a queue pair (`struct ibv_qp_cap`). Fill with `cxd_qp_caps_default`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
#[allow(non_camel_case_types)]
pub struct cxd_qp_caps {
    /// Send requests outstanding at once (1 or more).
    pub max_send_wr: u32,
    /// Receives posted at once (ignored with a shared receive queue).
    pub max_recv_wr: u32,
    /// Gather entries per send request (0 to 29).
    pub max_send_sge: u32,
    /// Scatter entries per receive (1 to 32; ignored with a shared receive queue).
    pub max_recv_sge: u32,
    /// Inline bytes per send request (0 to 460).
    pub max_inline_data: u32,
}

/// Where a queue pair is reached: what two sides exchange before connecting.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(non_camel_case_types)]
pub struct cxd_endpoint {
    /// QP number (24 bits).
    pub qpn: u32,
    /// First packet sequence number the QP sends with (24 bits).
    pub psn: u32,
    /// GID (16 bytes, network order).
    pub gid: [u8; 16],
    /// The port's MAC address.
    pub mac: [u8; 6],
    /// Zero.
    pub reserved: [u8; 2],
}

/// Connection attributes (the `ibv_qp_attr` fields of RTR and RTS). Fill with
/// `cxd_connect_params_default`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
#[allow(non_camel_case_types)]
pub struct cxd_connect_params {
    /// Path MTU, `CXD_MTU_*` (at most the port's: `cxd_rdma_info.max_path_mtu`).
    pub mtu: u8,
    /// Local ACK timeout: 4.096 µs × 2^`ack_timeout` (0 to 31; 0 waits for ever).
    pub ack_timeout: u8,
    /// Retransmissions after an ACK timeout (0 to 7).
    pub retry_count: u8,
    /// RNR NAK timer code this side sends as responder (0 to 31).
    pub rnr_timer: u8,
    /// Retries after an RNR NAK (0 to 6; 7 for ever).
    pub rnr_retry: u8,
    /// READs and atomics outstanding as requester.
    pub max_rd_atomic: u8,
    /// READs and atomics served at once as responder.
    pub max_dest_rd_atomic: u8,
    /// IP hop limit (TTL).
    pub hop_limit: u8,
    /// IP traffic class (DSCP and ECN).
    pub traffic_class: u8,
    /// Service level: the Ethernet priority of the QP's packets (0 to 7); the port sends them
    /// in that priority's traffic class.
    pub sl: u8,
}

/// What a queue pair handle holds.
pub(crate) struct QpState {
    qp: RcQueuePair<AnyBackend>,
    rdma: &'static Handle<RdmaState>,
    pd: &'static Handle<PdState>,
    cq: &'static Handle<CqState>,
    srq: Option<&'static Handle<SrqState>>,
}

/// An RC queue pair (`struct cxd_qp` in C, opaque).
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct cxd_qp {
    handle: Handle<QpState>,
}
kind!(cxd_qp, QpState, 0x6378_642d_7170_0000); // "cxd-qp"

/// Fills `*caps` with the defaults: 128 sends and 128 receives, 2 entries each, 64 inline
/// bytes.
///
/// # Safety
///
/// `caps` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cxd_qp_caps_default(caps: *mut cxd_qp_caps) -> c_int {
    guard(|| {
        let d = QpCaps::default();
        let c = cxd_qp_caps {
            max_send_wr: d.max_send_wr,
            max_recv_wr: d.max_recv_wr,
            max_send_sge: d.max_send_sge,
            max_recv_sge: d.max_recv_sge,
            max_inline_data: d.max_inline_data,
        };
        write_out(caps, c, "caps")?;
        Ok(0)
    })
}

/// Fills `*params` with `ibv_rc_pingpong`'s values: MTU 1024, ACK timeout 14, 7 retries, RNR
/// timer 12, RNR retry 7, one READ outstanding each way, hop limit 64.
///
/// # Safety
///
/// `params` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cxd_connect_params_default(params: *mut cxd_connect_params) -> c_int {
    guard(|| {
        let d = ConnectParams::default();
        let p = cxd_connect_params {
            mtu: d.mtu as u8,
            ack_timeout: d.ack_timeout,
            retry_count: d.retry_count,
            rnr_timer: d.rnr_timer,
            rnr_retry: d.rnr_retry,
            max_rd_atomic: d.max_rd_atomic,
            max_dest_rd_atomic: d.max_dest_rd_atomic,
            hop_limit: d.hop_limit,
            traffic_class: d.traffic_class,
            sl: d.sl,
        };
        write_out(params, p, "params")?;
        Ok(0)
    })
}

/// Creates an RC queue pair in `pd`, its sends and receives completing on `cq`, receiving from
/// `srq` when it is not NULL (from its own receive queue otherwise). It starts in reset:
/// `cxd_qp_connect` next (receives may be posted before).
///
/// # Safety
///
/// `pd` and `cq` are NULL or handles this library returned; `srq` is NULL or one; `caps` is
/// NULL or points to a `struct cxd_qp_caps`; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cxd_qp_create(
    pd: *mut cxd_pd,
    cq: *mut cxd_cq,
    srq: *mut cxd_srq,
    caps: *const cxd_qp_caps,
    out: *mut *mut cxd_qp,
) -> c_int {
    guard(|| {
        let pd_h = handle::resolve(pd)?;
        let cq_h = handle::resolve(cq)?;
        let srq_h = if srq.is_null() {
            None
        } else {
            Some(handle::resolve(srq)?)
        };
        let c = read_in(caps, "caps")?;
        if out.is_null() {
            return Err(Failure::new(Error::Null, "out is NULL; pass &qp"));
        }
        let mut p = pd_h.exclusive(cxd_pd::NAME)?;
        let mut q = cq_h.exclusive(cxd_cq::NAME)?;
        let mut s = match srq_h {
            Some(h) => Some(h.exclusive(cxd_srq::NAME)?),
            None => None,
        };
        let owner = p.get().rdma;
        if !std::ptr::eq(q.get().rdma, owner) {
            return Err(not_ours("completion queue", "protection domain"));
        }
        if let Some(s) = s.as_mut() {
            if !std::ptr::eq(s.get().rdma, owner) {
                return Err(not_ours("shared receive queue", "protection domain"));
            }
        }
        let mut r = owner.exclusive(super::cxd_rdma::NAME)?;
        let caps = QpCaps {
            max_send_wr: c.max_send_wr,
            max_recv_wr: c.max_recv_wr,
            max_send_sge: c.max_send_sge,
            max_recv_sge: c.max_recv_sge,
            max_inline_data: c.max_inline_data,
        };
        let state = r.get();
        let qp = RcQueuePair::create(
            &mut state.dev,
            &p.get().pd,
            &mut q.get().cq,
            s.as_mut().map(|s| &s.get().srq),
            caps,
            &state.roce,
        )?;
        state.children += 1;
        p.get().users += 1;
        if let Some(s) = s.as_mut() {
            s.get().users += 1;
        }
        let h = handle::open::<cxd_qp>(QpState {
            qp,
            rdma: owner,
            pd: pd_h,
            cq: cq_h,
            srq: srq_h,
        });
        write_out(out, h as *const cxd_qp as *mut cxd_qp, "out")?;
        Ok(0)
    })
}

/// Stores where peers reach the queue pair (its QPN, first PSN, GID and MAC) in `*out`.
///
/// # Safety
///
/// `qp` is NULL or a handle this library returned; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cxd_qp_endpoint(qp: *mut cxd_qp, out: *mut cxd_endpoint) -> c_int {
    guard(|| {
        let mut q = handle::resolve(qp)?.exclusive(cxd_qp::NAME)?;
        let e = q.get().qp.local_endpoint();
        let c = cxd_endpoint {
            qpn: e.qpn,
            psn: e.psn,
            gid: e.gid,
            mac: e.mac,
            reserved: [0; 2],
        };
        write_out(out, c, "out")?;
        Ok(0)
    })
}

fn mtu_of(mtu: u8) -> Result<PathMtu, Failure> {
    Ok(match mtu {
        CXD_MTU_256 => PathMtu::Mtu256,
        CXD_MTU_512 => PathMtu::Mtu512,
        CXD_MTU_1024 => PathMtu::Mtu1024,
        CXD_MTU_2048 => PathMtu::Mtu2048,
        CXD_MTU_4096 => PathMtu::Mtu4096,
        other => {
            return Err(Failure::new(
                Error::Config,
                format!("mtu {other}: give CXD_MTU_256 (1) .. CXD_MTU_4096 (5)"),
            ))
        }
    })
}

/// Connects the queue pair (in reset) to the peer at `*remote` with `*params`, or the
/// defaults when `params` is NULL.
///
/// Returns 0, or a negative `cxd_error`: `CXD_ERROR_CONFIG` for a parameter out of range,
/// `CXD_ERROR_WRONG_STATE` unless the QP is in reset, `CXD_ERROR_DEVICE` when the device
/// refused a step (the QP is then in reset again).
///
/// # Safety
///
/// `qp` is NULL or a handle this library returned; `remote` is NULL or points to a
/// `struct cxd_endpoint`; `params` is NULL or points to a `struct cxd_connect_params`.
#[no_mangle]
pub unsafe extern "C" fn cxd_qp_connect(
    qp: *mut cxd_qp,
    remote: *const cxd_endpoint,
    params: *const cxd_connect_params,
) -> c_int {
    guard(|| {
        let remote = read_in(remote, "remote")?;
        let params = if params.is_null() {
            ConnectParams::default()
        } else {
            let p = read_in(params, "params")?;
            ConnectParams {
                mtu: mtu_of(p.mtu)?,
                ack_timeout: p.ack_timeout,
                retry_count: p.retry_count,
                rnr_timer: p.rnr_timer,
                rnr_retry: p.rnr_retry,
                max_rd_atomic: p.max_rd_atomic,
                max_dest_rd_atomic: p.max_dest_rd_atomic,
                hop_limit: p.hop_limit,
                traffic_class: p.traffic_class,
                sl: p.sl,
            }
        };
        let mut q = handle::resolve(qp)?.exclusive(cxd_qp::NAME)?;
        let owner = q.get().rdma;
        let mut r = owner.exclusive(super::cxd_rdma::NAME)?;
        let endpoint = Endpoint {
            qpn: remote.qpn,
            psn: remote.psn,
            gid: remote.gid,
            mac: remote.mac,
        };
        q.get().qp.connect(&mut r.get().dev, &endpoint, params)?;
        Ok(0)
    })
}

/// Posts the send requests `wrs[0..n]` in order (`ibv_post_send`): each group of up to 16 is
/// one doorbell. Every request is checked before any is posted. Returns `n`, or a negative
/// `cxd_error` with the index of the first request not posted in `*bad` (when not NULL):
/// `CXD_ERROR_INVALID_ARGUMENT` for a request past the QP's limits, `CXD_ERROR_QUEUE_FULL`
/// when the send ring lacks room (poll the CQ), `CXD_ERROR_WRONG_STATE` before connecting.
/// Nothing is allocated.
///
/// # Safety
///
/// `qp` is NULL or a handle this library returned; `wrs` points to `n` requests whose lists
/// and inline data are readable; `bad` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cxd_qp_post_send(
    qp: *mut cxd_qp,
    wrs: *const cxd_send_wr,
    n: u32,
    bad: *mut u32,
) -> c_int {
    guard(|| {
        let mut q = handle::resolve(qp)?.exclusive(cxd_qp::NAME)?;
        let wrs = slice_in(wrs, n as usize, "wrs")?;
        let qp = &mut q.get().qp;
        posted(post_sends(wrs, |g| qp.post_send(g)), wrs.len(), bad)
    })
}

/// Posts the receives `wrs[0..n]` on the queue pair's own receive queue (`ibv_post_recv`),
/// as `cxd_qp_post_send` (a QP on a shared receive queue refuses: post there).
///
/// # Safety
///
/// As `cxd_qp_post_send`.
#[no_mangle]
pub unsafe extern "C" fn cxd_qp_post_recv(
    qp: *mut cxd_qp,
    wrs: *const cxd_recv_wr,
    n: u32,
    bad: *mut u32,
) -> c_int {
    guard(|| {
        let mut q = handle::resolve(qp)?.exclusive(cxd_qp::NAME)?;
        let wrs = slice_in(wrs, n as usize, "wrs")?;
        let qp = &mut q.get().qp;
        posted(post_recvs(wrs, |g| qp.post_recv(g)), wrs.len(), bad)
    })
}

/// Destroys the queue pair: everything it still has posted completes flushed on its CQ (the
/// next `cxd_cq_poll` returns those completions), then it is destroyed. Refused with
/// `CXD_ERROR_BUSY` while another call uses the QP, its CQ or its device. The handle is closed
/// even when the device fails the destroy (the error says why): the QP then stays in the device
/// until `cxd_rdma_close` tears it down.
///
/// # Safety
///
/// `qp` is NULL or a handle this library returned.
#[no_mangle]
pub unsafe extern "C" fn cxd_qp_destroy(qp: *mut cxd_qp) -> c_int {
    guard(|| {
        let mut q = handle::resolve(qp)?.exclusive(cxd_qp::NAME)?;
        let (owner, pd, cq, srq) = {
            let s = q.get();
            (s.rdma, s.pd, s.cq, s.srq)
        };
        let mut c = cq.exclusive(cxd_cq::NAME)?;
        let mut p = pd.exclusive(cxd_pd::NAME)?;
        let mut s = match srq {
            Some(h) => Some(h.exclusive(cxd_srq::NAME)?),
            None => None,
        };
        let mut r = owner.exclusive(super::cxd_rdma::NAME)?;
        let Some(state) = q.close() else {
            return Err(Failure::new(Error::Closed, "the cxd_qp was closed"));
        };
        let result = state.qp.destroy(&mut r.get().dev, &mut c.get().cq);
        // A QP whose destroy failed stays in the device, its rings kept from being freed, until
        // the device's teardown (`cxd_rdma_close`) takes it: it no longer holds its parents.
        release_child(&mut r);
        p.get().users = p.get().users.saturating_sub(1);
        if let Some(s) = s.as_mut() {
            s.get().users = s.get().users.saturating_sub(1);
        }
        result.map(|_| 0).map_err(Failure::from)
    })
}
