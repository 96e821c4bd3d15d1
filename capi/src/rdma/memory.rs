//! Protection domains and memory regions: host memory the library allocates, or a memfd or
//! dmabuf descriptor the program gives. A region's bytes are reached by copy
//! (`cxd_mr_write`, `cxd_mr_read`): the device may write them at any time, so the library
//! gives no pointer into them (the rule on device-visible memory the driver keeps).

use super::{kind, rdma, release_child, RdmaState};
use crate::boundary::handle::{self, Handle, Kind};
use crate::boundary::{bytes_in, bytes_out, dup_fd, write_out};
use crate::error::{guard, Error, Failure};
use cxdirect_dma::{DmaBuf, DmaBufError, DmaBufMode};
use driver::rdma::{MemoryRegion, MrSource, ProtectionDomain};
use driver::KeyAccess;
use std::ffi::{c_int, c_void};
use std::sync::Arc;

/// Access flag: the device may write the region locally (receives, READ replies), as
/// `IBV_ACCESS_LOCAL_WRITE`. Local read is always granted.
pub const CXD_ACCESS_LOCAL_WRITE: u32 = 1 << 0;
/// Access flag: a peer may RDMA WRITE the region (needs `CXD_ACCESS_LOCAL_WRITE`).
pub const CXD_ACCESS_REMOTE_WRITE: u32 = 1 << 1;
/// Access flag: a peer may RDMA READ the region.
pub const CXD_ACCESS_REMOTE_READ: u32 = 1 << 2;
/// Access flag: a peer may run atomics on the region (needs `CXD_ACCESS_LOCAL_WRITE`).
pub const CXD_ACCESS_REMOTE_ATOMIC: u32 = 1 << 3;

/// What a protection domain handle holds.
pub(crate) struct PdState {
    pub(crate) pd: ProtectionDomain,
    pub(crate) rdma: &'static Handle<RdmaState>,
    /// Regions, queue pairs and shared receive queues made in it and alive.
    pub(crate) users: u32,
}

/// A protection domain (`struct cxd_pd` in C, opaque).
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct cxd_pd {
    handle: Handle<PdState>,
}
kind!(cxd_pd, PdState, 0x6378_642d_7064_0000); // "cxd-pd"

/// What a memory region handle holds.
pub(crate) struct MrState {
    mr: MemoryRegion,
    pd: &'static Handle<PdState>,
    rdma: &'static Handle<RdmaState>,
}

/// A registered memory region (`struct cxd_mr` in C, opaque).
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct cxd_mr {
    handle: Handle<MrState>,
}
kind!(cxd_mr, MrState, 0x6378_642d_6d72_0000); // "cxd-mr"

/// A region's keys and extent: what gather lists (`lkey`) and peers (`addr`, `rkey`) name.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(non_camel_case_types)]
pub struct cxd_mr_info {
    /// Device address of the region's first byte: gather entries and a peer's RDMA start
    /// from it (it is not a CPU pointer).
    pub addr: u64,
    /// Bytes covered (whole pages).
    pub length: u64,
    /// Local key (`struct cxd_sge`'s `lkey`).
    pub lkey: u32,
    /// Remote key a peer names.
    pub rkey: u32,
}

/// Allocates a protection domain on `rdma`.
///
/// # Safety
///
/// `rdma` is NULL or a handle this library returned; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cxd_pd_alloc(rdma: *mut super::cxd_rdma, out: *mut *mut cxd_pd) -> c_int {
    guard(|| {
        let (owner, mut r) = self::rdma(rdma)?;
        if out.is_null() {
            return Err(Failure::new(Error::Null, "out is NULL; pass &pd"));
        }
        let state = r.get();
        let pd = ProtectionDomain::alloc(&mut state.dev)?;
        state.children += 1;
        let h = handle::open::<cxd_pd>(PdState {
            pd,
            rdma: owner,
            users: 0,
        });
        write_out(out, h as *const cxd_pd as *mut cxd_pd, "out")?;
        Ok(0)
    })
}

/// Deallocates a protection domain. Refused with `CXD_ERROR_BUSY` while a region, queue pair
/// or shared receive queue made in it is left.
///
/// # Safety
///
/// `pd` is NULL or a handle this library returned.
#[no_mangle]
pub unsafe extern "C" fn cxd_pd_dealloc(pd: *mut cxd_pd) -> c_int {
    guard(|| {
        let mut p = handle::resolve(pd)?.exclusive(cxd_pd::NAME)?;
        if p.get().users > 0 {
            return Err(Failure::new(
                Error::Busy,
                format!(
                    "{} regions, queue pairs or shared receive queues use the protection \
                     domain; destroy them first",
                    p.get().users
                ),
            ));
        }
        let owner = p.get().rdma;
        let mut r = owner.exclusive(super::cxd_rdma::NAME)?;
        let Some(state) = p.close() else {
            return Err(Failure::new(Error::Closed, "the cxd_pd was closed"));
        };
        let result = state.pd.dealloc(&mut r.get().dev);
        release_child(&mut r);
        result.map(|_| 0).map_err(Failure::from)
    })
}

fn access_of(flags: u32) -> Result<KeyAccess, Failure> {
    let known = CXD_ACCESS_LOCAL_WRITE
        | CXD_ACCESS_REMOTE_WRITE
        | CXD_ACCESS_REMOTE_READ
        | CXD_ACCESS_REMOTE_ATOMIC;
    if flags & !known != 0 {
        return Err(Failure::new(
            Error::InvalidArgument,
            format!("access {flags:#x} has bits no CXD_ACCESS_* flag names"),
        ));
    }
    Ok(KeyAccess {
        read: true,
        write: flags & CXD_ACCESS_LOCAL_WRITE != 0,
        remote_read: flags & CXD_ACCESS_REMOTE_READ != 0,
        remote_write: flags & CXD_ACCESS_REMOTE_WRITE != 0,
        remote_atomic: flags & CXD_ACCESS_REMOTE_ATOMIC != 0,
    })
}

/// Registers what `register` makes in `pd` and stores the region's handle in `out`.
fn register_in(
    pd: *mut cxd_pd,
    out: *mut *mut cxd_mr,
    register: impl FnOnce(
        &mut driver::Device<crate::backend::AnyBackend>,
        &ProtectionDomain,
    ) -> Result<MemoryRegion, Failure>,
) -> Result<c_int, Failure> {
    let pd_handle = handle::resolve(pd)?;
    let mut p = pd_handle.exclusive(cxd_pd::NAME)?;
    if out.is_null() {
        return Err(Failure::new(Error::Null, "out is NULL; pass &mr"));
    }
    let owner = p.get().rdma;
    let mut r = owner.exclusive(super::cxd_rdma::NAME)?;
    let mr = register(&mut r.get().dev, &p.get().pd)?;
    r.get().children += 1;
    p.get().users += 1;
    let h = handle::open::<cxd_mr>(MrState {
        mr,
        pd: pd_handle,
        rdma: owner,
    });
    write_out(out, h as *const cxd_mr as *mut cxd_mr, "out")?;
    Ok(0)
}

/// Allocates `length` bytes (at least 1; whole pages) of zeroed host memory the device reaches
/// and registers them in `pd` with `access` (`CXD_ACCESS_*` flags).
///
/// Returns 0 and stores the region in `*out`, or a negative `cxd_error` (`CXD_ERROR_CONFIG` for
/// remote write or atomics without local write, as `ibv_reg_mr` refuses).
///
/// # Safety
///
/// `pd` is NULL or a handle this library returned; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cxd_mr_alloc(
    pd: *mut cxd_pd,
    length: usize,
    access: u32,
    out: *mut *mut cxd_mr,
) -> c_int {
    guard(|| {
        let access = access_of(access)?;
        register_in(pd, out, |dev, pd| {
            Ok(MemoryRegion::alloc(dev, pd, length.max(1), access)?)
        })
    })
}

/// Registers bytes `offset..offset + length` of the memory behind `fd` in `pd`: a memfd
/// (`memfd_create`, sized with `ftruncate`) or a dmabuf (udmabuf, a DMA heap). The library
/// keeps its own duplicate of `fd` while the region lives; the caller's stays the caller's.
/// The CPU reaches the region by copy (`cxd_mr_write`, `cxd_mr_read`) or, for a memfd, through
/// the caller's own `mmap` of it.
///
/// Returns 0 and stores the region in `*out`, or a negative `cxd_error`:
/// `CXD_ERROR_INVALID_ARGUMENT` for a descriptor that is neither, or a range outside it.
///
/// # Safety
///
/// `pd` is NULL or a handle this library returned; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cxd_mr_reg_dmabuf(
    pd: *mut cxd_pd,
    fd: c_int,
    offset: u64,
    length: u64,
    access: u32,
    out: *mut *mut cxd_mr,
) -> c_int {
    guard(|| {
        let access = access_of(access)?;
        let bad = |e: DmaBufError| Failure::new(Error::InvalidArgument, format!("fd {fd}: {e}"));
        let buf = match DmaBuf::from_memfd(dup_fd(fd, "fd")?) {
            Ok(buf) => buf,
            Err(DmaBufError::NotADmaBuf { .. }) => {
                DmaBuf::import(dup_fd(fd, "fd")?).map_err(bad)?
            }
            Err(e) => return Err(bad(e)),
        };
        register_in(pd, out, |dev, pd| {
            let (iommu, iovas) = dev.dma();
            let mapping = buf
                .map(iommu, &iovas, offset, length, DmaBufMode::Pinned)
                .map_err(bad)?;
            let mapping = Arc::new(mapping);
            Ok(MemoryRegion::register(
                dev,
                pd,
                MrSource::DmaBuf(&mapping),
                access,
            )?)
        })
    })
}

/// Stores the region's device address, length and keys in `*out`.
///
/// # Safety
///
/// `mr` is NULL or a handle this library returned; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cxd_mr_query(mr: *mut cxd_mr, out: *mut cxd_mr_info) -> c_int {
    guard(|| {
        let mut m = handle::resolve(mr)?.exclusive(cxd_mr::NAME)?;
        let mr = &m.get().mr;
        let info = cxd_mr_info {
            addr: mr.addr(),
            length: mr.len(),
            lkey: mr.lkey(),
            rkey: mr.rkey(),
        };
        write_out(out, info, "out")?;
        Ok(0)
    })
}

/// Copies `length` bytes from `data` into the region at byte `offset`.
///
/// Returns 0, or a negative `cxd_error` (`CXD_ERROR_DEVICE` with nothing written for a range
/// outside the region).
///
/// # Safety
///
/// `mr` is NULL or a handle this library returned; `data` points to `length` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn cxd_mr_write(
    mr: *mut cxd_mr,
    offset: u64,
    data: *const c_void,
    length: usize,
) -> c_int {
    guard(|| {
        let mut m = handle::resolve(mr)?.exclusive(cxd_mr::NAME)?;
        let data = bytes_in(data.cast(), length, "data")?;
        m.get().mr.write(offset_of(offset)?, data)?;
        Ok(0)
    })
}

/// Copies `length` bytes of the region at byte `offset` into `out`.
///
/// # Safety
///
/// `mr` is NULL or a handle this library returned; `out` points to `length` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn cxd_mr_read(
    mr: *mut cxd_mr,
    offset: u64,
    out: *mut c_void,
    length: usize,
) -> c_int {
    guard(|| {
        let mut m = handle::resolve(mr)?.exclusive(cxd_mr::NAME)?;
        let out = bytes_out(out.cast(), length, "out")?;
        m.get().mr.read(offset_of(offset)?, out)?;
        Ok(0)
    })
}

fn offset_of(offset: u64) -> Result<usize, Failure> {
    usize::try_from(offset)
        .map_err(|_| Failure::new(Error::InvalidArgument, "offset past the address space"))
}

/// Deregisters the region: its key is destroyed first (a peer's later access fails), then its
/// memory is freed. Destroy queue pairs whose requests may still name it first.
///
/// # Safety
///
/// `mr` is NULL or a handle this library returned.
#[no_mangle]
pub unsafe extern "C" fn cxd_mr_dereg(mr: *mut cxd_mr) -> c_int {
    guard(|| {
        let mut m = handle::resolve(mr)?.exclusive(cxd_mr::NAME)?;
        let (pd, owner) = (m.get().pd, m.get().rdma);
        let mut p = pd.exclusive(cxd_pd::NAME)?;
        let mut r = owner.exclusive(super::cxd_rdma::NAME)?;
        let Some(state) = m.close() else {
            return Err(Failure::new(Error::Closed, "the cxd_mr was closed"));
        };
        let result = state.mr.deregister(&mut r.get().dev);
        release_child(&mut r);
        p.get().users = p.get().users.saturating_sub(1);
        result.map(|_| 0).map_err(Failure::from)
    })
}
