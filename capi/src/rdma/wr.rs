//! The work requests C fills (`struct cxd_sge`, `cxd_send_wr`, `cxd_recv_wr`, numbered as
//! libibverbs numbers `ibv_wr_opcode` and `ibv_send_flags`), and their conversion into the
//! driver's requests without allocating: a call's requests go to the driver in groups of up to
//! [`GROUP_WRS`] requests and [`GROUP_SGES`] list entries, converted into arrays on the stack,
//! one driver call (one doorbell) per group.

use crate::boundary::{bytes_in, slice_in, write_out};
use crate::error::{Error, Failure};
use driver::rdma::{Payload, RecvRequest, RemoteAddr, SendOp, SendRequest, Sge};
use driver::DriverError;
use std::ffi::{c_int, c_void};

/// Send opcode: RDMA WRITE (`IBV_WR_RDMA_WRITE`).
pub const CXD_WR_RDMA_WRITE: u32 = 0;
/// Send opcode: RDMA WRITE with immediate data, which consumes a receive on the peer.
pub const CXD_WR_RDMA_WRITE_WITH_IMM: u32 = 1;
/// Send opcode: SEND, which consumes a receive on the peer.
pub const CXD_WR_SEND: u32 = 2;
/// Send opcode: SEND with immediate data.
pub const CXD_WR_SEND_WITH_IMM: u32 = 3;
/// Send opcode: RDMA READ of the peer's memory into the scatter list.
pub const CXD_WR_RDMA_READ: u32 = 4;
/// Send opcode: atomic compare and swap of the peer's 8-byte word (`compare_add`, `swap`).
pub const CXD_WR_ATOMIC_CMP_AND_SWP: u32 = 5;
/// Send opcode: atomic fetch and add on the peer's 8-byte word (`compare_add` is added).
pub const CXD_WR_ATOMIC_FETCH_AND_ADD: u32 = 6;

/// Send flag: wait for earlier READs and atomics first (`IBV_SEND_FENCE`).
pub const CXD_SEND_FENCE: u32 = 1 << 0;
/// Send flag: ask for a work completion (`IBV_SEND_SIGNALED`).
pub const CXD_SEND_SIGNALED: u32 = 1 << 1;
/// Send flag: set the solicited-event bit (`IBV_SEND_SOLICITED`).
pub const CXD_SEND_SOLICITED: u32 = 1 << 2;
/// Send flag: the message is the `inline_length` bytes at `inline_data`, copied into the work
/// request (`IBV_SEND_INLINE`; SEND and WRITE only); `sg_list` is not read.
pub const CXD_SEND_INLINE: u32 = 1 << 3;

/// Most gather or scatter entries one request takes here (the driver's limits are lower:
/// 29 to send, 32 to receive, and the queue pair's own caps).
pub const CXD_MAX_SGE: u32 = 32;

/// Requests converted per group (one driver call, one doorbell).
pub(crate) const GROUP_WRS: usize = 16;
/// List entries converted per group.
pub(crate) const GROUP_SGES: usize = 64;

/// One gather or scatter entry (`struct ibv_sge`): `length` bytes at device address `addr`
/// of the region whose local key is `lkey` (`struct cxd_mr_info` gives both).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(non_camel_case_types)]
pub struct cxd_sge {
    /// Device address of the first byte (the region's `addr` plus an offset).
    pub addr: u64,
    /// Bytes (0 to 2^31-1; an entry of 0 bytes is skipped).
    pub length: u32,
    /// The region's local key.
    pub lkey: u32,
}

/// A send work request (`struct ibv_send_wr`, flattened: no `next`, an array instead).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
#[allow(non_camel_case_types)]
pub struct cxd_send_wr {
    /// Returned in the work completion.
    pub wr_id: u64,
    /// The gather list (READ and atomics: where the reply lands); `num_sge` entries.
    pub sg_list: *const cxd_sge,
    /// Entries in `sg_list` (0 to `CXD_MAX_SGE`, and at most the QP's `max_send_sge`).
    pub num_sge: u32,
    /// `CXD_WR_*`.
    pub opcode: u32,
    /// `CXD_SEND_*` flags.
    pub send_flags: u32,
    /// Immediate data of the `*_WITH_IMM` opcodes (host order; big-endian on the wire).
    pub imm_data: u32,
    /// The peer's device address (RDMA and atomic opcodes).
    pub remote_addr: u64,
    /// The peer region's remote key (RDMA and atomic opcodes).
    pub rkey: u32,
    /// Bytes at `inline_data` with `CXD_SEND_INLINE` (at most the QP's `max_inline_data`).
    pub inline_length: u32,
    /// The message with `CXD_SEND_INLINE`; not read otherwise.
    pub inline_data: *const c_void,
    /// Atomics: the value compared (compare and swap) or added (fetch and add).
    pub compare_add: u64,
    /// Compare and swap: the value stored when equal.
    pub swap: u64,
}

/// A receive work request (`struct ibv_recv_wr`, flattened).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
#[allow(non_camel_case_types)]
pub struct cxd_recv_wr {
    /// Returned in the work completion.
    pub wr_id: u64,
    /// Where an arriving SEND's bytes land; `num_sge` entries.
    pub sg_list: *const cxd_sge,
    /// Entries in `sg_list` (0 to `CXD_MAX_SGE`, and at most the queue's own limit).
    pub num_sge: u32,
    /// Zero.
    pub reserved: u32,
}

fn bad(index: usize, why: impl std::fmt::Display) -> Failure {
    Failure::new(Error::InvalidArgument, format!("wrs[{index}]: {why}"))
}

fn sges_of<'a>(list: *const cxd_sge, n: u32, index: usize) -> Result<&'a [cxd_sge], Failure> {
    if n > CXD_MAX_SGE {
        return Err(bad(
            index,
            format!("num_sge {n}: at most CXD_MAX_SGE ({CXD_MAX_SGE})"),
        ));
    }
    slice_in(list, n as usize, "sg_list").map_err(|e| bad(index, e.message))
}

/// Copies the scatter/gather lists of the first requests of `wrs` (at most [`GROUP_WRS`],
/// as many as fit [`GROUP_SGES`] entries) into `sges`, request `i`'s at `ranges[i]` (first,
/// count); returns how many requests the group holds. `list_of(i, wr)` gives request `i`'s list.
fn gather_group<'w, W>(
    wrs: &'w [W],
    sges: &mut [Sge; GROUP_SGES],
    ranges: &mut [(usize, usize); GROUP_WRS],
    list_of: impl Fn(usize, &'w W) -> Result<&'w [cxd_sge], Failure>,
) -> Result<usize, Failure> {
    let (mut n, mut used) = (0, 0);
    for (i, wr) in wrs.iter().enumerate().take(GROUP_WRS) {
        let list = list_of(i, wr)?;
        if used + list.len() > GROUP_SGES {
            break;
        }
        for (k, s) in list.iter().enumerate() {
            sges[used + k] = Sge {
                addr: s.addr,
                length: s.length,
                lkey: s.lkey,
            };
        }
        ranges[i] = (used, list.len());
        used += list.len();
        n += 1;
    }
    Ok(n)
}

fn op_of(wr: &cxd_send_wr, index: usize) -> Result<SendOp, Failure> {
    let remote = RemoteAddr {
        addr: wr.remote_addr,
        rkey: wr.rkey,
    };
    Ok(match wr.opcode {
        CXD_WR_RDMA_WRITE => SendOp::Write(remote),
        CXD_WR_RDMA_WRITE_WITH_IMM => SendOp::WriteImm(remote, wr.imm_data),
        CXD_WR_SEND => SendOp::Send,
        CXD_WR_SEND_WITH_IMM => SendOp::SendImm(wr.imm_data),
        CXD_WR_RDMA_READ => SendOp::Read(remote),
        CXD_WR_ATOMIC_CMP_AND_SWP => SendOp::CompareSwap {
            remote,
            compare: wr.compare_add,
            swap: wr.swap,
        },
        CXD_WR_ATOMIC_FETCH_AND_ADD => SendOp::FetchAdd {
            remote,
            add: wr.compare_add,
        },
        other => return Err(bad(index, format!("opcode {other}: give a CXD_WR_* value"))),
    })
}

/// Where a failed group leaves the call: the driver's error, with the index of the first
/// request not posted written for the caller.
pub(crate) struct PostFailure {
    pub(crate) failure: Failure,
    pub(crate) first_unposted: usize,
}

fn driver_failure(e: DriverError, start: usize) -> PostFailure {
    let (first, mut failure) = match &e {
        DriverError::BadWorkRequest { index, .. } => (start + index, Failure::from(e)),
        _ => (start, Failure::from(e)),
    };
    if first > 0 {
        failure.message = format!(
            "{} (requests 0..{first} were posted; request {first} and the rest were not)",
            failure.message
        );
    }
    PostFailure {
        failure,
        first_unposted: first,
    }
}

/// Posts `wrs` through `post`, group by group; every request is checked before any is posted.
pub(crate) fn post_sends(
    wrs: &[cxd_send_wr],
    mut post: impl FnMut(&[SendRequest<'_>]) -> Result<(), DriverError>,
) -> Result<(), PostFailure> {
    let early = |failure| PostFailure {
        failure,
        first_unposted: 0,
    };
    const KNOWN: u32 = CXD_SEND_FENCE | CXD_SEND_SIGNALED | CXD_SEND_SOLICITED | CXD_SEND_INLINE;
    for (i, wr) in wrs.iter().enumerate() {
        op_of(wr, i).map_err(early)?;
        if wr.send_flags & !KNOWN != 0 {
            return Err(early(bad(
                i,
                format!("send_flags {:#x}: only CXD_SEND_* flags", wr.send_flags),
            )));
        }
        if wr.send_flags & CXD_SEND_INLINE != 0 {
            bytes_in(
                wr.inline_data.cast(),
                wr.inline_length as usize,
                "inline_data",
            )
            .map_err(|e| early(bad(i, e.message)))?;
        } else {
            sges_of(wr.sg_list, wr.num_sge, i).map_err(early)?;
        }
    }
    let mut start = 0;
    while start < wrs.len() {
        let mut sges = [Sge::default(); GROUP_SGES];
        let mut ranges = [(0usize, 0usize); GROUP_WRS];
        let n = gather_group(&wrs[start..], &mut sges, &mut ranges, |i, wr| {
            if wr.send_flags & CXD_SEND_INLINE != 0 {
                Ok(&[][..])
            } else {
                sges_of(wr.sg_list, wr.num_sge, start + i)
            }
        })
        .map_err(early)?;
        let mut reqs = [SendRequest::new(0, SendOp::Send, Payload::Inline(&[])); GROUP_WRS];
        for (i, wr) in wrs[start..start + n].iter().enumerate() {
            let payload = if wr.send_flags & CXD_SEND_INLINE != 0 {
                Payload::Inline(
                    bytes_in(
                        wr.inline_data.cast(),
                        wr.inline_length as usize,
                        "inline_data",
                    )
                    .map_err(early)?,
                )
            } else {
                let (first, len) = ranges[i];
                Payload::Gather(&sges[first..first + len])
            };
            reqs[i] = SendRequest {
                wr_id: wr.wr_id,
                op: op_of(wr, start + i).map_err(early)?,
                payload,
                signaled: wr.send_flags & CXD_SEND_SIGNALED != 0,
                fence: wr.send_flags & CXD_SEND_FENCE != 0,
                solicited: wr.send_flags & CXD_SEND_SOLICITED != 0,
            };
        }
        post(&reqs[..n]).map_err(|e| driver_failure(e, start))?;
        start += n;
    }
    Ok(())
}

/// Posts receives `wrs` through `post`, group by group; every request is checked first.
pub(crate) fn post_recvs(
    wrs: &[cxd_recv_wr],
    mut post: impl FnMut(&[RecvRequest<'_>]) -> Result<(), DriverError>,
) -> Result<(), PostFailure> {
    let early = |failure| PostFailure {
        failure,
        first_unposted: 0,
    };
    for (i, wr) in wrs.iter().enumerate() {
        sges_of(wr.sg_list, wr.num_sge, i).map_err(early)?;
    }
    let mut start = 0;
    while start < wrs.len() {
        let mut sges = [Sge::default(); GROUP_SGES];
        let mut ranges = [(0usize, 0usize); GROUP_WRS];
        let n = gather_group(&wrs[start..], &mut sges, &mut ranges, |i, wr| {
            sges_of(wr.sg_list, wr.num_sge, start + i)
        })
        .map_err(early)?;
        let mut reqs = [RecvRequest {
            wr_id: 0,
            sg_list: &[],
        }; GROUP_WRS];
        for (i, wr) in wrs[start..start + n].iter().enumerate() {
            let (first, len) = ranges[i];
            reqs[i] = RecvRequest {
                wr_id: wr.wr_id,
                sg_list: &sges[first..first + len],
            };
        }
        post(&reqs[..n]).map_err(|e| driver_failure(e, start))?;
        start += n;
    }
    Ok(())
}

/// A post's outcome as the C call returns it: `n` when every request went, else the failure,
/// with the index of the first request not posted written to `*bad` (when not NULL).
pub(crate) fn posted(
    result: Result<(), PostFailure>,
    n: usize,
    bad: *mut u32,
) -> Result<c_int, Failure> {
    match result {
        Ok(()) => Ok(c_int::try_from(n).unwrap_or(c_int::MAX)),
        Err(PostFailure {
            failure,
            first_unposted,
        }) => {
            if !bad.is_null() {
                // Best effort: the failure is what the caller gets either way.
                let _ = write_out(bad, first_unposted as u32, "bad");
            }
            Err(failure)
        }
    }
}
