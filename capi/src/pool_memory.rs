//! A port whose buffers live in memory the program gives: a memfd or a dmabuf (a udmabuf, a
//! DMA heap, a GPU exporter's), imported and mapped for the device (the driver's
//! `PortConfig::pool_memory`). Received packets land there and sends gather from there; the
//! program finds a packet in its own mapping of the memory by `cxd_mbuf_memory_offset`.

use crate::boundary::slots::cxd_mbuf;
use crate::boundary::{dup_fd, write_out};
use crate::device::cxd_device;
use crate::error::{guard, Error, Failure};
use crate::mbuf::with_mbuf;
use crate::port::{cxd_port, cxd_port_config, start};
use cxdirect_dma::{DmaBuf, DmaBufError, DmaBufMode};
use std::ffi::c_int;
use std::sync::Arc;

/// Starts a port as `cxd_port_start` does, with its buffers carved from bytes
/// `offset..offset + length` of the memory behind `fd`: a memfd (`memfd_create`, sized with
/// `ftruncate`) or a dmabuf. The pool holds `length / buf_size` buffers (`pool_buffers` is not
/// used); the library keeps its own duplicate of `fd` while the port runs, the caller's stays
/// the caller's. `cxd_mbuf_data` refuses buffers the CPU does not map (a dmabuf): copy with
/// `cxd_mbuf_read`/`cxd_mbuf_write`, or read the packet through the caller's own mapping at
/// `cxd_mbuf_memory_offset`.
///
/// Returns 0 and stores the port in `*out`, or a negative `cxd_error`:
/// `CXD_ERROR_INVALID_ARGUMENT` for a descriptor that is neither, or a range outside it (the
/// device stays usable), and the codes of `cxd_port_start`.
///
/// # Safety
///
/// As `cxd_port_start`; `fd` is a descriptor of the caller's (or not a descriptor, refused).
#[no_mangle]
pub unsafe extern "C" fn cxd_port_start_on_memory(
    device: *mut cxd_device,
    config: *const cxd_port_config,
    fd: c_int,
    offset: u64,
    length: u64,
    out: *mut *mut cxd_port,
) -> c_int {
    guard(|| {
        let bad = |e: DmaBufError| Failure::new(Error::InvalidArgument, format!("fd {fd}: {e}"));
        let buf = match DmaBuf::from_memfd(dup_fd(fd, "fd")?) {
            Ok(buf) => buf,
            Err(DmaBufError::NotADmaBuf { .. }) => {
                DmaBuf::import(dup_fd(fd, "fd")?).map_err(bad)?
            }
            Err(e) => return Err(bad(e)),
        };
        start(device, config, out, &|dev| {
            let (iommu, iovas) = dev.dma();
            let mapping = buf
                .map(iommu, &iovas, offset, length, DmaBufMode::Pinned)
                .map_err(bad)?;
            Ok(Some(Arc::new(mapping)))
        })
    })
}

/// Stores in `*out` the offset of the packet's first byte from the start of the range the
/// pool was given (`offset` of `cxd_port_start_on_memory`; for a pool the library allocated,
/// from the start of the pool's memory). A program that maps the memfd or dmabuf itself reads
/// the packet at its mapping + `offset` + `*out`, `cxd_mbuf_len` bytes, while it holds the
/// mbuf.
///
/// # Safety
///
/// `m` is NULL or a handle this library returned; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cxd_mbuf_memory_offset(m: *const cxd_mbuf, out: *mut u64) -> c_int {
    guard(|| {
        if out.is_null() {
            return Err(Failure::new(Error::Null, "out is NULL; pass &offset"));
        }
        let offset = with_mbuf(m, |m| Ok(m.memory_offset() as u64))?;
        write_out(out, offset, "out")?;
        Ok(0)
    })
}
