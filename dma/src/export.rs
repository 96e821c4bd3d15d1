//! Exporters of host memory as dmabufs, for applications and tests that need a real dmabuf:
//! udmabuf (a sealed memfd's pages), a dma-heap (`/dev/dma_heap/system`), and a plain memfd
//! (shared memory that is not a dmabuf).

use std::ffi::CString;
use std::fs::OpenOptions;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use thiserror::Error;

/// Why memory could not be exported.
#[derive(Debug, Error)]
pub enum ExportError {
    /// The exporter's device node is missing or cannot be opened.
    #[error("cannot open {path}: {source}; {hint}")]
    Open {
        /// Device node.
        path: String,
        /// Why.
        #[source]
        source: io::Error,
        /// What to do about it.
        hint: &'static str,
    },
    /// A system call of the export failed.
    #[error("{what} failed for {size} bytes: {source}{hint}")]
    Call {
        /// The call.
        what: &'static str,
        /// Bytes asked for.
        size: u64,
        /// Why.
        #[source]
        source: io::Error,
        /// What to do about it, when known.
        hint: &'static str,
    },
    /// The size is zero or not a whole number of pages.
    #[error(
        "cannot export {size} bytes: give a non-zero multiple of the page size ({page} bytes)"
    )]
    BadSize {
        /// Bytes asked for.
        size: u64,
        /// The page size.
        page: u64,
    },
}

/// `_IOW('u', 0x42, struct udmabuf_create)` (24 bytes).
const UDMABUF_CREATE: u64 = 0x4018_7542;
/// `UDMABUF_FLAGS_CLOEXEC`.
const UDMABUF_FLAGS_CLOEXEC: u32 = 0x1;
/// `_IOWR('H', 0x0, struct dma_heap_allocation_data)` (24 bytes).
const DMA_HEAP_IOCTL_ALLOC: u64 = 0xc018_4800;

#[repr(C)]
struct UdmabufCreate {
    memfd: u32,
    flags: u32,
    offset: u64,
    size: u64,
}

#[repr(C)]
struct DmaHeapAllocationData {
    len: u64,
    fd: u32,
    fd_flags: u32,
    heap_flags: u64,
}

fn check_size(size: u64) -> Result<(), ExportError> {
    let page = crate::region::small_page_size() as u64;
    if size == 0 || size % page != 0 {
        return Err(ExportError::BadSize { size, page });
    }
    Ok(())
}

fn call_error(what: &'static str, size: u64, hint: &'static str) -> ExportError {
    ExportError::Call {
        what,
        size,
        source: io::Error::last_os_error(),
        hint,
    }
}

/// Creates a memfd of `size` bytes named `name`, sealed against shrinking (as udmabuf needs).
///
/// # Errors
///
/// [`ExportError::BadSize`], [`ExportError::Call`].
pub fn memfd(name: &str, size: u64) -> Result<OwnedFd, ExportError> {
    check_size(size)?;
    let cname = CString::new(name.replace('\0', "")).unwrap_or_default();
    // SAFETY: `memfd_create` reads a NUL-terminated name and returns a new descriptor or -1.
    let raw =
        unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if raw < 0 {
        return Err(call_error("memfd_create", size, ""));
    }
    // SAFETY: `raw` is a new descriptor nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let len = libc::off_t::try_from(size).map_err(|_| ExportError::BadSize { size, page: 0 })?;
    // SAFETY: resizes the descriptor just created.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), len) } != 0 {
        return Err(call_error("ftruncate of the memfd", size, ""));
    }
    // SAFETY: adds a seal to our own memfd; no memory is touched.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) } != 0 {
        return Err(call_error("sealing the memfd", size, ""));
    }
    Ok(fd)
}

/// A udmabuf and the memfd whose pages it exports.
#[derive(Debug)]
pub struct Udmabuf {
    /// The dmabuf.
    pub dmabuf: OwnedFd,
    /// The sealed memfd behind it (the same pages from offset 0), for
    /// [`DmaBuf::import_with_backing`](crate::DmaBuf::import_with_backing).
    pub memfd: OwnedFd,
}

/// Exports `size` bytes of a new memfd as a udmabuf.
///
/// # Errors
///
/// [`ExportError::Open`] when `/dev/udmabuf` is missing, [`ExportError::Call`] when the kernel
/// refuses (sizes over `udmabuf.size_limit_mb`, 64 MiB by default).
pub fn udmabuf(size: u64) -> Result<Udmabuf, ExportError> {
    let backing = memfd("cxdirect-udmabuf", size)?;
    let dev = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/udmabuf")
        .map_err(|source| ExportError::Open {
            path: "/dev/udmabuf".into(),
            source,
            hint: "load the udmabuf module (CONFIG_UDMABUF) or use --source memfd",
        })?;
    let mut arg = UdmabufCreate {
        memfd: backing.as_raw_fd() as u32,
        flags: UDMABUF_FLAGS_CLOEXEC,
        offset: 0,
        size,
    };
    // SAFETY: UDMABUF_CREATE reads one `udmabuf_create` from a live local and returns a new
    // descriptor or -1.
    let raw = unsafe { libc::ioctl(dev.as_raw_fd(), UDMABUF_CREATE as libc::Ioctl, &mut arg) };
    if raw < 0 {
        return Err(call_error(
            "UDMABUF_CREATE",
            size,
            "; udmabuf refuses buffers over its size_limit_mb parameter (64 MiB by default)",
        ));
    }
    // SAFETY: on success the ioctl returns a new descriptor nothing else owns.
    let dmabuf = unsafe { OwnedFd::from_raw_fd(raw) };
    Ok(Udmabuf {
        dmabuf,
        memfd: backing,
    })
}

/// Allocates `size` bytes from the dma-heap `heap` (`system` for the system heap) and returns
/// the dmabuf descriptor.
///
/// # Errors
///
/// [`ExportError::Open`] when the heap is missing, [`ExportError::Call`] when allocation fails.
pub fn dma_heap(heap: &str, size: u64) -> Result<OwnedFd, ExportError> {
    check_size(size)?;
    let path = format!("/dev/dma_heap/{heap}");
    let dev = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|source| ExportError::Open {
            path: path.clone(),
            source,
            hint: "the kernel needs CONFIG_DMABUF_HEAPS and the heap (CONFIG_DMABUF_HEAPS_SYSTEM for `system`)",
        })?;
    let mut arg = DmaHeapAllocationData {
        len: size,
        fd: 0,
        fd_flags: (libc::O_RDWR | libc::O_CLOEXEC) as u32,
        heap_flags: 0,
    };
    // SAFETY: DMA_HEAP_IOCTL_ALLOC reads and writes one `dma_heap_allocation_data` in a live
    // local.
    let rc = unsafe {
        libc::ioctl(
            dev.as_raw_fd(),
            DMA_HEAP_IOCTL_ALLOC as libc::Ioctl,
            &mut arg,
        )
    };
    if rc < 0 {
        return Err(call_error("DMA_HEAP_IOCTL_ALLOC", size, ""));
    }
    // SAFETY: on success the kernel stored a new descriptor nothing else owns in `fd`.
    Ok(unsafe { OwnedFd::from_raw_fd(arg.fd as i32) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioctl_numbers_match_their_encoding() {
        let iow = |ty: u8, nr: u8, size: usize| {
            (1u64 << 30) | (size as u64) << 16 | u64::from(ty) << 8 | u64::from(nr)
        };
        let iowr = |ty: u8, nr: u8, size: usize| {
            (3u64 << 30) | (size as u64) << 16 | u64::from(ty) << 8 | u64::from(nr)
        };
        assert_eq!(
            UDMABUF_CREATE,
            iow(b'u', 0x42, std::mem::size_of::<UdmabufCreate>())
        );
        assert_eq!(
            DMA_HEAP_IOCTL_ALLOC,
            iowr(b'H', 0, std::mem::size_of::<DmaHeapAllocationData>())
        );
    }

    #[test]
    fn odd_sizes_are_refused_before_any_call() {
        assert!(matches!(memfd("x", 0), Err(ExportError::BadSize { .. })));
        assert!(matches!(
            dma_heap("system", 100),
            Err(ExportError::BadSize { .. })
        ));
    }
}
