//! Completion queues and their poll into `struct cxd_wc` arrays (numbered as libibverbs
//! numbers `ibv_wc_status` and `ibv_wc_opcode`).

use super::{kind, rdma, release_child, RdmaState};
use crate::boundary::array;
use crate::boundary::handle::{self, Handle, Kind};
use crate::boundary::write_out;
use crate::error::{guard, Error, Failure};
use driver::rdma::{CompletionQueue, WcOpcode, WcStatus, WorkCompletion};
use std::ffi::c_int;

/// Most completions one `cxd_cq_poll` call returns.
pub const CXD_MAX_POLL: u32 = 256;

/// Work completion status: success (`IBV_WC_SUCCESS`).
pub const CXD_WC_SUCCESS: u32 = 0;
/// Receive buffer too small or message too long (`IBV_WC_LOC_LEN_ERR`).
pub const CXD_WC_LOC_LEN_ERR: u32 = 1;
/// Malformed work request (`IBV_WC_LOC_QP_OP_ERR`).
pub const CXD_WC_LOC_QP_OP_ERR: u32 = 2;
/// A local key that does not cover the buffer (`IBV_WC_LOC_PROT_ERR`).
pub const CXD_WC_LOC_PROT_ERR: u32 = 4;
/// Flushed: the queue pair was in error (`IBV_WC_WR_FLUSH_ERR`).
pub const CXD_WC_WR_FLUSH_ERR: u32 = 5;
/// Memory window bind error (`IBV_WC_MW_BIND_ERR`).
pub const CXD_WC_MW_BIND_ERR: u32 = 6;
/// Unexpected response (`IBV_WC_BAD_RESP_ERR`).
pub const CXD_WC_BAD_RESP_ERR: u32 = 7;
/// Local access error on the responder (`IBV_WC_LOC_ACCESS_ERR`).
pub const CXD_WC_LOC_ACCESS_ERR: u32 = 8;
/// The peer refused the request as invalid (`IBV_WC_REM_INV_REQ_ERR`).
pub const CXD_WC_REM_INV_REQ_ERR: u32 = 9;
/// The peer refused the key, its rights or its range (`IBV_WC_REM_ACCESS_ERR`).
pub const CXD_WC_REM_ACCESS_ERR: u32 = 10;
/// The peer failed the operation (`IBV_WC_REM_OP_ERR`).
pub const CXD_WC_REM_OP_ERR: u32 = 11;
/// No acknowledgement after every retry (`IBV_WC_RETRY_EXC_ERR`).
pub const CXD_WC_RETRY_EXC_ERR: u32 = 12;
/// The peer had no receive posted after every RNR retry (`IBV_WC_RNR_RETRY_EXC_ERR`).
pub const CXD_WC_RNR_RETRY_EXC_ERR: u32 = 13;
/// The peer aborted (`IBV_WC_REM_ABORT_ERR`).
pub const CXD_WC_REM_ABORT_ERR: u32 = 16;
/// Any other error; `vendor_err` has the device's syndrome (`IBV_WC_GENERAL_ERR`).
pub const CXD_WC_GENERAL_ERR: u32 = 21;

/// Completed operation: SEND (`IBV_WC_SEND`).
pub const CXD_WC_SEND: u32 = 0;
/// Completed operation: RDMA WRITE.
pub const CXD_WC_RDMA_WRITE: u32 = 1;
/// Completed operation: RDMA READ.
pub const CXD_WC_RDMA_READ: u32 = 2;
/// Completed operation: atomic compare and swap.
pub const CXD_WC_COMP_SWAP: u32 = 3;
/// Completed operation: atomic fetch and add.
pub const CXD_WC_FETCH_ADD: u32 = 4;
/// Completed operation: a receive a SEND filled (`IBV_WC_RECV`).
pub const CXD_WC_RECV: u32 = 128;
/// Completed operation: a receive an RDMA WRITE with immediate consumed.
pub const CXD_WC_RECV_RDMA_WITH_IMM: u32 = 129;

/// Work completion flag: `imm_data` is valid (`IBV_WC_WITH_IMM`).
pub const CXD_WC_WITH_IMM: u32 = 1 << 1;
/// Work completion flag: the receive came from a shared receive queue (`srq_num` valid).
pub const CXD_WC_FROM_SRQ: u32 = 1 << 8;

/// One work completion (`struct ibv_wc`, the fields RC uses).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(non_camel_case_types)]
pub struct cxd_wc {
    /// The work request's id, as posted.
    pub wr_id: u64,
    /// `CXD_WC_SUCCESS` or an error status (`CXD_WC_*_ERR`).
    pub status: u32,
    /// `CXD_WC_SEND` .. `CXD_WC_RECV_RDMA_WITH_IMM`; for an error completion of a send, the
    /// request's own operation.
    pub opcode: u32,
    /// Bytes received (receives), read (RDMA READ) or 8 (atomics); 0 for SEND and WRITE.
    pub byte_len: u32,
    /// Immediate data (host order) when `wc_flags` has `CXD_WC_WITH_IMM`.
    pub imm_data: u32,
    /// The local queue pair's number.
    pub qp_num: u32,
    /// The shared receive queue's number when `wc_flags` has `CXD_WC_FROM_SRQ`.
    pub srq_num: u32,
    /// `CXD_WC_*` flags.
    pub wc_flags: u32,
    /// The device's error syndrome (0 on success).
    pub vendor_err: u32,
}

/// What a completion queue handle holds.
pub(crate) struct CqState {
    pub(crate) cq: CompletionQueue,
    pub(crate) rdma: &'static Handle<RdmaState>,
    /// The driver's completions of one poll, before they are written for C.
    scratch: Box<[WorkCompletion]>,
    /// The emulated function's model, run when a poll finds nothing.
    model: Option<cxdirect_emu::Device>,
}

/// A completion queue (`struct cxd_cq` in C, opaque).
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct cxd_cq {
    handle: Handle<CqState>,
}
kind!(cxd_cq, CqState, 0x6378_642d_6371_0000); // "cxd-cq"

/// Creates a completion queue of at least `entries` (1 to the device's maximum) on `rdma`.
/// Any number of queue pairs may complete on it, their sends and receives both.
///
/// # Safety
///
/// `rdma` is NULL or a handle this library returned; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cxd_cq_create(
    rdma: *mut super::cxd_rdma,
    entries: u32,
    out: *mut *mut cxd_cq,
) -> c_int {
    guard(|| {
        let (owner, mut r) = self::rdma(rdma)?;
        if out.is_null() {
            return Err(Failure::new(Error::Null, "out is NULL; pass &cq"));
        }
        let state = r.get();
        let cq = CompletionQueue::create(&mut state.dev, entries)?;
        state.children += 1;
        let h = handle::open::<cxd_cq>(CqState {
            cq,
            rdma: owner,
            scratch: vec![WorkCompletion::default(); CXD_MAX_POLL as usize].into_boxed_slice(),
            model: state.model.clone(),
        });
        write_out(out, h as *const cxd_cq as *mut cxd_cq, "out")?;
        Ok(0)
    })
}

fn status_of(s: WcStatus) -> u32 {
    match s {
        WcStatus::Success => CXD_WC_SUCCESS,
        WcStatus::LocLenErr => CXD_WC_LOC_LEN_ERR,
        WcStatus::LocQpOpErr => CXD_WC_LOC_QP_OP_ERR,
        WcStatus::LocProtErr => CXD_WC_LOC_PROT_ERR,
        WcStatus::WrFlushErr => CXD_WC_WR_FLUSH_ERR,
        WcStatus::MwBindErr => CXD_WC_MW_BIND_ERR,
        WcStatus::BadRespErr => CXD_WC_BAD_RESP_ERR,
        WcStatus::LocAccessErr => CXD_WC_LOC_ACCESS_ERR,
        WcStatus::RemInvReqErr => CXD_WC_REM_INV_REQ_ERR,
        WcStatus::RemAccessErr => CXD_WC_REM_ACCESS_ERR,
        WcStatus::RemOpErr => CXD_WC_REM_OP_ERR,
        WcStatus::RetryExcErr => CXD_WC_RETRY_EXC_ERR,
        WcStatus::RnrRetryExcErr => CXD_WC_RNR_RETRY_EXC_ERR,
        WcStatus::RemAbortErr => CXD_WC_REM_ABORT_ERR,
        WcStatus::GeneralErr => CXD_WC_GENERAL_ERR,
    }
}

fn opcode_of(o: WcOpcode) -> u32 {
    match o {
        WcOpcode::Send => CXD_WC_SEND,
        WcOpcode::RdmaWrite => CXD_WC_RDMA_WRITE,
        WcOpcode::RdmaRead => CXD_WC_RDMA_READ,
        WcOpcode::CompSwap => CXD_WC_COMP_SWAP,
        WcOpcode::FetchAdd => CXD_WC_FETCH_ADD,
        WcOpcode::Recv => CXD_WC_RECV,
        WcOpcode::RecvRdmaWithImm => CXD_WC_RECV_RDMA_WITH_IMM,
    }
}

fn to_c(wc: &WorkCompletion) -> cxd_wc {
    let mut flags = 0;
    if wc.imm.is_some() {
        flags |= CXD_WC_WITH_IMM;
    }
    if wc.srqn.is_some() {
        flags |= CXD_WC_FROM_SRQ;
    }
    cxd_wc {
        wr_id: wc.wr_id,
        status: status_of(wc.status),
        opcode: opcode_of(wc.opcode),
        byte_len: wc.byte_len,
        imm_data: wc.imm.unwrap_or(0),
        qp_num: wc.qpn,
        srq_num: wc.srqn.unwrap_or(0),
        wc_flags: flags,
        vendor_err: u32::from(wc.vendor_err),
    }
}

/// Polls up to `n` completions into `wc[0..n]` (`ibv_poll_cq`): returns how many it stored
/// (0 when none waits). Nothing past `wc[n - 1]` is written; nothing is allocated.
///
/// Returns the count, or a negative `cxd_error` with nothing taken:
/// `CXD_ERROR_BURST_TOO_LARGE` when `n` > `CXD_MAX_POLL`, `CXD_ERROR_BUSY` when another thread
/// is polling the queue, `CXD_ERROR_DEVICE` for a completion the device got wrong.
///
/// # Safety
///
/// `cq` is NULL or a handle this library returned; `wc` points to room for `n` entries (or `n`
/// is 0).
#[no_mangle]
pub unsafe extern "C" fn cxd_cq_poll(cq: *mut cxd_cq, wc: *mut cxd_wc, n: u32) -> c_int {
    guard(|| {
        let mut c = handle::resolve(cq)?.exclusive(cxd_cq::NAME)?;
        if n > CXD_MAX_POLL {
            return Err(Failure::new(
                Error::BurstTooLarge,
                format!("n {n}: poll at most CXD_MAX_POLL ({CXD_MAX_POLL}) per call"),
            ));
        }
        let out = array(wc, n as usize, "wc")?;
        let CqState {
            cq, scratch, model, ..
        } = c.get();
        let got = cq.poll(&mut scratch[..out.len()])?;
        for (o, w) in out.iter_mut().zip(&scratch[..got]) {
            *o = to_c(w);
        }
        if got == 0 {
            // A model executing inline delivers frames and runs its transport timers only when
            // asked: an empty poll is where a program waits.
            if let Some(model) = model {
                model.poll();
            }
        }
        Ok(c_int::try_from(got).unwrap_or(c_int::MAX))
    })
}

/// Destroys a completion queue. Refused with `CXD_ERROR_BUSY` while a queue pair completes on
/// it.
///
/// # Safety
///
/// `cq` is NULL or a handle this library returned.
#[no_mangle]
pub unsafe extern "C" fn cxd_cq_destroy(cq: *mut cxd_cq) -> c_int {
    guard(|| {
        let mut c = handle::resolve(cq)?.exclusive(cxd_cq::NAME)?;
        let qps = c.get().cq.queue_pairs();
        if qps > 0 {
            return Err(Failure::new(
                Error::Busy,
                format!("{qps} queue pairs complete on the queue; destroy them first"),
            ));
        }
        let owner = c.get().rdma;
        let mut r = owner.exclusive(super::cxd_rdma::NAME)?;
        let Some(state) = c.close() else {
            return Err(Failure::new(Error::Closed, "the cxd_cq was closed"));
        };
        let result = state.cq.destroy(&mut r.get().dev);
        release_child(&mut r);
        result.map(|_| 0).map_err(Failure::from)
    })
}
