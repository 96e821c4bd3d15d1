//! Memory another device exported as a dmabuf (GPU memory, udmabuf, a dma-heap), made reachable
//! by the NIC: [`DmaBuf::import`] checks the descriptor and reads what the kernel says about it,
//! [`DmaBuf::map`] attaches a byte range of it to the device's IOMMU and produces the
//! page-granular IOVA list ([`PageList`]) a memory key's MTT is programmed from.
//!
//! # How a dmabuf reaches the IOMMU from userspace
//!
//! The kernel gives userspace two ways:
//! - the host mapping: `mmap` the dmabuf and hand the mapping to the IOMMU backend like any
//!   memory (VFIO type1 `MAP_DMA`, iommufd `IOAS_MAP`, the device model). That needs the
//!   exporter to support `mmap` and the backend to be able to pin what it maps: VFIO type1 and
//!   iommufd refuse `VM_PFNMAP` mappings of ordinary RAM, which is how udmabuf (Linux ≥ 6.11) and
//!   the system dma-heap map their pages;
//! - the file: iommufd's `IOMMU_IOAS_MAP_FILE`, where the kernel accepts the descriptor.
//!
//! [`DmaBuf::map`] tries them in that order and, when neither works, says which kernel feature
//! is missing. The page list trims the covered pages to `[offset, offset + len)`: the offset into
//! the first page and the tail of the last, as Linux's `umem_dmabuf` trims its scatter list.
//!
//! # Pinned and revocable
//!
//! A [`DmaBufMode::Pinned`] mapping lives until it is dropped, which cannot happen while a memory
//! key holds it. A [`DmaBufMode::Revocable`] one may be taken away while keys exist: the exporter
//! announces it ([`DmaBufMapping::request_revoke`]), the importer makes every key over it stop
//! translating and only then calls [`DmaBufMapping::revoke`], which refuses while keys are still
//! counted ([`DmaBufMapping::key_registered`]) and then unmaps the IOMMU range.

use std::fmt;
use std::fs;
use std::io;
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering};
use std::sync::Arc;

use nix::sys::mman::{self, MapFlags, ProtFlags};
use thiserror::Error;

use crate::iommu::{Iommu, IommuError};
use crate::iova::{IovaAllocator, IovaError};
use crate::region::{
    small_page_size, volatile_copy_in, volatile_copy_out, volatile_fill, volatile_read_words,
};

/// Why a dmabuf could not be imported, mapped, accessed or revoked.
#[derive(Debug, Error)]
pub enum DmaBufError {
    /// The descriptor is not a dmabuf.
    #[error("descriptor {fd} is not a dmabuf (it is {what}); pass the fd a dmabuf exporter returned (udmabuf, /dev/dma_heap/*, a GPU driver), or use DmaBuf::from_memfd for a memfd")]
    NotADmaBuf {
        /// The descriptor number.
        fd: i32,
        /// What `/proc/self/fd` says it is.
        what: String,
    },
    /// What the kernel says about the descriptor could not be read.
    #[error("cannot read {path}: {source}")]
    Proc {
        /// The file read.
        path: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The requested range does not fit the buffer.
    #[error("range of {len:#x} bytes at offset {offset:#x} does not fit a {size:#x}-byte dmabuf: give a non-empty range inside it")]
    BadRange {
        /// Offset asked for, in bytes.
        offset: u64,
        /// Length asked for, in bytes.
        len: u64,
        /// Size of the dmabuf, in bytes.
        size: u64,
    },
    /// Neither way of attaching the dmabuf to the IOMMU worked.
    #[error("cannot attach the {exporter} dmabuf to the device's IOMMU: mapping its mmap failed ({host}); mapping the descriptor failed ({file}). {hint}")]
    Unmappable {
        /// The exporter's name.
        exporter: String,
        /// Why the host-mapping path failed.
        host: String,
        /// Why the descriptor path failed.
        file: String,
        /// The kernel feature that is missing, and what to do.
        hint: &'static str,
    },
    /// No IOVA range was free for the mapping.
    #[error("cannot give the dmabuf an IOVA: {0}")]
    Iova(#[from] IovaError),
    /// The CPU cannot reach this mapping (it was attached by descriptor, with no host mapping).
    #[error("the {exporter} dmabuf is not mapped in this process (the IOMMU maps it by descriptor); read it through its exporter (cuMemcpyDtoH for CUDA memory)")]
    NoHostAccess {
        /// The exporter's name.
        exporter: String,
    },
    /// An access reaches outside the mapped range.
    #[error("access of {len:#x} bytes at offset {offset:#x} is outside the {mapped:#x}-byte dmabuf mapping")]
    OutOfBounds {
        /// Offset of the access from the mapping's first byte.
        offset: usize,
        /// Length of the access.
        len: usize,
        /// Bytes mapped.
        mapped: usize,
    },
    /// A word access at an address that is not a multiple of the word size.
    #[error("word access at offset {offset:#x} of the dmabuf mapping is not {align}-byte aligned; use the byte copies")]
    Misaligned {
        /// Offset of the access from the mapping's first byte.
        offset: usize,
        /// Alignment the access needs, in bytes.
        align: usize,
    },
    /// The mapping was revoked: neither the CPU nor the device may use it any more.
    #[error("the {exporter} dmabuf mapping was revoked; import the buffer again")]
    Revoked {
        /// The exporter's name.
        exporter: String,
    },
    /// Revocation was asked of a pinned mapping.
    #[error("a pinned dmabuf mapping cannot be revoked; map it with DmaBufMode::Revocable, or deregister its memory keys and drop it")]
    Pinned,
    /// Revocation was asked while memory keys still translate the mapping.
    #[error("{keys} memory key(s) still translate this dmabuf mapping: invalidate them first (Device::revoke_memory does both, in order)")]
    KeysAlive {
        /// Keys still registered.
        keys: u32,
    },
    /// The IOMMU refused to unmap the revoked range; the device may still reach it, so its
    /// IOVA range stays reserved and the descriptor stays open.
    #[error("cannot unmap the revoked dmabuf from the IOMMU: {0}")]
    Unmap(IommuError),
}

/// What kind of memory object a [`DmaBuf`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DmaBufKind {
    /// A dmabuf (the kernel reports an exporter for it in `/proc/self/fdinfo`).
    DmaBuf,
    /// A memfd: shared memory that is not a dmabuf, imported the same way for comparison and on
    /// hosts without a dmabuf exporter.
    Memfd,
}

/// An imported dmabuf (or memfd): the descriptor, kept open while anything maps it.
pub struct DmaBuf {
    fd: OwnedFd,
    size: u64,
    exporter: String,
    name: Option<String>,
    kind: DmaBufKind,
    /// A file holding the same pages, at this offset (udmabuf's memfd), for IOMMU backends that
    /// cannot pin the dmabuf's own mapping.
    backing: Option<(OwnedFd, u64)>,
}

impl fmt::Debug for DmaBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DmaBuf")
            .field("fd", &self.fd.as_raw_fd())
            .field("size", &self.size)
            .field("exporter", &self.exporter)
            .field("name", &self.name)
            .field("kind", &self.kind)
            .finish()
    }
}

/// What `/proc/self/fdinfo/N` says about a dmabuf.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FdInfo {
    /// `size:` in bytes.
    pub size: u64,
    /// `exp_name:`, the exporter.
    pub exporter: String,
    /// `name:`, set by the exporter or `DMA_BUF_SET_NAME` (absent when unset).
    pub name: Option<String>,
}

impl FdInfo {
    /// Parses fdinfo text; `None` when it has no `exp_name:` line (not a dmabuf) or no valid
    /// `size:`.
    pub fn parse(text: &str) -> Option<Self> {
        let mut size = None;
        let mut exporter = None;
        let mut name = None;
        for line in text.lines() {
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim();
            match key.trim() {
                "size" => size = value.parse::<u64>().ok(),
                "exp_name" => exporter = Some(value.to_string()),
                "name" if !value.is_empty() => name = Some(value.to_string()),
                _ => {}
            }
        }
        Some(Self {
            size: size?,
            exporter: exporter?,
            name,
        })
    }
}

fn proc_read(path: String) -> Result<String, DmaBufError> {
    fs::read_to_string(&path).map_err(|source| DmaBufError::Proc { path, source })
}

fn describe_fd(fd: i32) -> String {
    fs::read_link(format!("/proc/self/fd/{fd}"))
        .map(|p| p.display().to_string())
        .unwrap_or_else(|e| format!("unreadable: {e}"))
}

impl DmaBuf {
    /// Imports a dmabuf descriptor: checks with `/proc/self/fdinfo` that it is one and reads its
    /// size and exporter. The descriptor is owned from here on and stays open while mapped.
    ///
    /// # Errors
    ///
    /// [`DmaBufError::NotADmaBuf`] (the descriptor is dropped, so closed), [`DmaBufError::Proc`].
    pub fn import(fd: OwnedFd) -> Result<Arc<Self>, DmaBufError> {
        Self::read_fdinfo(fd).map(Arc::new)
    }

    fn read_fdinfo(fd: OwnedFd) -> Result<Self, DmaBufError> {
        let raw = fd.as_raw_fd();
        let text = proc_read(format!("/proc/self/fdinfo/{raw}"))?;
        let Some(info) = FdInfo::parse(&text) else {
            return Err(DmaBufError::NotADmaBuf {
                fd: raw,
                what: describe_fd(raw),
            });
        };
        Ok(Self {
            fd,
            size: info.size,
            exporter: info.exporter,
            name: info.name,
            kind: DmaBufKind::DmaBuf,
            backing: None,
        })
    }

    /// Imports a dmabuf whose pages are also those of `backing` from byte `backing_offset`
    /// (a udmabuf and the memfd it was made from). Mapping falls back to the backing file where
    /// the IOMMU backend cannot pin the dmabuf's own mapping (VFIO type1 and iommufd refuse the
    /// `VM_PFNMAP` mapping udmabuf gives since Linux 6.11); the CPU still reads through the
    /// dmabuf, or through the backing file where the dmabuf has no mapping of its own and the
    /// IOMMU took it by descriptor (a peer BAR's dmabuf under iommufd). The caller vouches that
    /// the pages are the same.
    ///
    /// # Errors
    ///
    /// As [`DmaBuf::import`].
    pub fn import_with_backing(
        fd: OwnedFd,
        backing: OwnedFd,
        backing_offset: u64,
    ) -> Result<Arc<Self>, DmaBufError> {
        let mut buf = Self::read_fdinfo(fd)?;
        buf.backing = Some((backing, backing_offset));
        Ok(Arc::new(buf))
    }

    /// Imports a memfd (shared memory that is not a dmabuf) to be mapped the same way; its size
    /// is the file's size now.
    ///
    /// # Errors
    ///
    /// [`DmaBufError::NotADmaBuf`] when the descriptor is not a memfd, [`DmaBufError::Proc`].
    pub fn from_memfd(fd: OwnedFd) -> Result<Arc<Self>, DmaBufError> {
        let raw = fd.as_raw_fd();
        let what = describe_fd(raw);
        if !what.starts_with("/memfd:") {
            return Err(DmaBufError::NotADmaBuf { fd: raw, what });
        }
        let meta = fs::File::from(fd.try_clone().map_err(|source| DmaBufError::Proc {
            path: format!("/proc/self/fd/{raw}"),
            source,
        })?)
        .metadata()
        .map_err(|source| DmaBufError::Proc {
            path: format!("/proc/self/fd/{raw}"),
            source,
        })?;
        let name = what
            .trim_start_matches("/memfd:")
            .trim_end_matches(" (deleted)")
            .to_string();
        Ok(Arc::new(Self {
            fd,
            size: meta.len(),
            exporter: "memfd".into(),
            name: Some(name),
            kind: DmaBufKind::Memfd,
            backing: None,
        }))
    }

    /// Size in bytes, as the kernel reported it at import.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The exporter's name (`udmabuf`, `system`, the GPU driver's...; `memfd` for a memfd).
    pub fn exporter(&self) -> &str {
        &self.exporter
    }

    /// The buffer's name, when the exporter or the application set one.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// Dmabuf or memfd.
    pub fn kind(&self) -> DmaBufKind {
        self.kind
    }

    /// The descriptor.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Attaches `[offset, offset + len)` of the buffer to the device's IOMMU (see the
    /// [module documentation](self) for how) and returns the mapping, which holds the buffer
    /// open. The IOVA range covers the whole pages the range touches; [`DmaBufMapping::pages`]
    /// trims them.
    ///
    /// # Errors
    ///
    /// [`DmaBufError::BadRange`], [`DmaBufError::Iova`], [`DmaBufError::Unmappable`]. Nothing
    /// stays mapped or reserved after a failure.
    pub fn map(
        self: &Arc<Self>,
        iommu: Arc<dyn Iommu>,
        iovas: &Arc<IovaAllocator>,
        offset: u64,
        len: u64,
        mode: DmaBufMode,
    ) -> Result<DmaBufMapping, DmaBufError> {
        let end = offset
            .checked_add(len)
            .filter(|&end| len != 0 && end <= self.size)
            .ok_or_else(|| bad_range(self, offset, len))?;
        let page = small_page_size() as u64;
        let span_start = offset & !(page - 1);
        let span_end = end.next_multiple_of(page);
        let span_len =
            usize::try_from(span_end - span_start).map_err(|_| bad_range(self, offset, len))?;
        let iova = iovas.alloc(span_len as u64, page)?;

        let attached = match self.attach(&iommu, iova, span_start, span_len) {
            Ok(attached) => attached,
            Err(err) => {
                // Cannot fail: allocated just above and never given to the device.
                let _ = iovas.free(iova, span_len as u64);
                return Err(err);
            }
        };
        Ok(DmaBufMapping {
            dmabuf: Arc::clone(self),
            host: attached.cpu,
            device_view: attached.device,
            span_start,
            span_len,
            page: page as usize,
            iova,
            first_offset: (offset - span_start) as usize,
            len: len as usize,
            mode,
            how: attached.how,
            state: AtomicU8::new(STATE_MAPPED),
            keys: AtomicU32::new(0),
            revoke_requested: AtomicBool::new(false),
            iommu,
            iovas: Arc::clone(iovas),
        })
    }

    /// Gives the IOMMU the span's pages, trying each way the kernel may allow (see the module
    /// documentation); returns the CPU's view of the span, when it has one.
    fn attach(
        &self,
        iommu: &Arc<dyn Iommu>,
        iova: u64,
        span_start: u64,
        span_len: usize,
    ) -> Result<Attached, DmaBufError> {
        let own_view = HostView::new(self.fd.as_fd(), span_start, span_len);
        let mut host_err = match &own_view {
            Ok(view) => match view.give_to(iommu, iova) {
                Ok(()) => {
                    return Ok(Attached {
                        cpu: own_view.ok(),
                        device: None,
                        how: "host mapping",
                    })
                }
                Err(e) => e,
            },
            Err(e) => e.clone(),
        };
        // The backing file's view when the IOMMU would not take it (iommufd refuses a
        // `VM_PFNMAP` mapping such as a BAR's): the CPU still reads the pages through it once the
        // descriptor is mapped.
        let mut backing_cpu_view = None;
        if let Some((backing, at)) = &self.backing {
            match HostView::new(backing.as_fd(), at + span_start, span_len) {
                Ok(view) => match view.give_to(iommu, iova) {
                    // The CPU keeps the dmabuf's own view when it has one (the same pages).
                    Ok(()) => {
                        return Ok(match own_view {
                            Ok(own) => Attached {
                                cpu: Some(own),
                                device: Some(view),
                                how: "backing file mapping",
                            },
                            Err(_) => Attached {
                                cpu: Some(view),
                                device: None,
                                how: "backing file mapping",
                            },
                        })
                    }
                    Err(e) => {
                        host_err = format!("{host_err}; backing file: {e}");
                        backing_cpu_view = Some(view);
                    }
                },
                Err(e) => host_err = format!("{host_err}; backing file: {e}"),
            }
        }
        match iommu.map_file(iova, self.fd(), span_start, span_len) {
            Ok(()) => Ok(Attached {
                cpu: own_view.ok().or(backing_cpu_view),
                device: None,
                how: "descriptor",
            }),
            Err(file_err) => Err(DmaBufError::Unmappable {
                exporter: self.exporter.clone(),
                host: host_err,
                file: file_err.to_string(),
                hint: UNMAPPABLE_HINT,
            }),
        }
    }
}

/// How [`DmaBuf::attach`] gave the IOMMU a span.
struct Attached {
    /// The CPU's view of the span.
    cpu: Option<HostView>,
    /// The mapping the IOMMU was given, when it is not `cpu` (kept until the IOMMU unmaps it).
    device: Option<HostView>,
    how: &'static str,
}

fn bad_range(buf: &DmaBuf, offset: u64, len: u64) -> DmaBufError {
    DmaBufError::BadRange {
        offset,
        len,
        size: buf.size,
    }
}

const UNMAPPABLE_HINT: &str = "VFIO type1 and iommufd pin user memory and cannot pin a \
    VM_PFNMAP mapping of RAM (udmabuf since Linux 6.11, dma-heaps, GPU exporters); attaching a \
    dmabuf by descriptor needs iommufd with IOMMU_IOAS_MAP_FILE accepting that exporter's \
    dmabufs. Run with --iommu-mode iommufd on a kernel that has it (built with CONFIG_IOMMUFD and \
    CONFIG_VFIO_DEVICE_CDEV), or use a memfd source";

/// Whether a mapping may be taken away while memory keys use it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DmaBufMode {
    /// The pages stay mapped until the mapping is dropped (the default).
    #[default]
    Pinned,
    /// The exporter may revoke: keys are invalidated, then the IOMMU range is unmapped.
    Revocable,
}

/// The page-granular IOVAs that cover a byte range, trimmed to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageList {
    /// Bytes per page (a power of two; 4 KiB for dmabuf mappings).
    pub page_size: usize,
    /// Page-aligned IOVA of every page the range touches, in order.
    pub iovas: Vec<u64>,
    /// Bytes of the first page before the range starts (0..page_size).
    pub first_offset: usize,
    /// Bytes of the last page after the range ends (0..page_size).
    pub last_tail: usize,
}

impl PageList {
    /// Bytes the list covers after trimming.
    pub fn len(&self) -> usize {
        (self.iovas.len() * self.page_size).saturating_sub(self.first_offset + self.last_tail)
    }

    /// True when the list covers nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// IOVA of the range's first byte.
    pub fn start_iova(&self) -> Option<u64> {
        self.iovas
            .first()
            .map(|page| page + self.first_offset as u64)
    }
}

const STATE_MAPPED: u8 = 0;
const STATE_REVOKED: u8 = 1;
const STATE_LEAKED: u8 = 2;

/// A shared mapping of part of a dmabuf in this process, unmapped when dropped.
struct HostView {
    ptr: NonNull<u8>,
    len: usize,
}

impl HostView {
    /// Maps without `MAP_POPULATE`: VFIO and iommufd fault pages in as they pin them, and a
    /// large range the device model reaches by pointer costs memory only where it is touched.
    fn new(fd: BorrowedFd<'_>, offset: u64, len: usize) -> Result<Self, String> {
        let size = NonZeroUsize::new(len).ok_or("empty span")?;
        let offset = libc::off_t::try_from(offset).map_err(|_| "offset past off_t")?;
        // SAFETY: a new shared mapping at an address the kernel chooses overlaps nothing this
        // process uses; the pointer is kept only while the mapping exists (`HostView::drop`).
        let ptr = unsafe {
            mman::mmap(
                None,
                size,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED,
                fd,
                offset,
            )
        }
        .map_err(|e| format!("mmap: {}", errno_text(e)))?;
        Ok(Self {
            ptr: ptr.cast(),
            len,
        })
    }

    fn give_to(&self, iommu: &Arc<dyn Iommu>, iova: u64) -> Result<(), String> {
        // SAFETY: the view stays mapped until it drops, which its owner lets happen only after
        // the IOMMU range is unmapped (or never, when that fails).
        unsafe { iommu.map(iova, self.ptr.as_ptr(), self.len) }.map_err(|e| e.to_string())
    }
}

impl Drop for HostView {
    fn drop(&mut self) {
        // SAFETY: `ptr..ptr + len` is a mapping this value created and owns; the owner drops it
        // only once no IOMMU mapping of it remains.
        let _ = unsafe { mman::munmap(self.ptr.cast(), self.len) };
    }
}

/// A byte range of a dmabuf attached to the device's IOMMU.
///
/// The device reaches byte `i` of the range at `iova() + i`. When the buffer was attached
/// through a host mapping, the CPU reaches it with [`read`](Self::read) and
/// [`write`](Self::write) (copies with volatile accesses, as for [`crate::DmaRegion`]).
pub struct DmaBufMapping {
    dmabuf: Arc<DmaBuf>,
    host: Option<HostView>,
    device_view: Option<HostView>,
    span_start: u64,
    span_len: usize,
    page: usize,
    iova: u64,
    first_offset: usize,
    len: usize,
    mode: DmaBufMode,
    how: &'static str,
    state: AtomicU8,
    keys: AtomicU32,
    revoke_requested: AtomicBool,
    iommu: Arc<dyn Iommu>,
    iovas: Arc<IovaAllocator>,
}

// SAFETY: the host view is owned by this object alone and only ever accessed through
// bounds-checked volatile copies (no references), exactly as `DmaRegion` does; the other fields
// are `Send + Sync`.
unsafe impl Send for DmaBufMapping {}
// SAFETY: as for `Send`: every `&self` access to the memory is a volatile copy.
unsafe impl Sync for DmaBufMapping {}

impl fmt::Debug for DmaBufMapping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DmaBufMapping")
            .field("dmabuf", &self.dmabuf)
            .field("offset", &(self.span_start + self.first_offset as u64))
            .field("len", &self.len)
            .field("iova", &format_args!("{:#x}", self.iova()))
            .field("mode", &self.mode)
            .field("attached_by", &self.how)
            .field("revoked", &self.is_revoked())
            .finish()
    }
}

impl DmaBufMapping {
    /// The imported buffer.
    pub fn dmabuf(&self) -> &Arc<DmaBuf> {
        &self.dmabuf
    }

    /// Offset of the range in the buffer, in bytes.
    pub fn offset(&self) -> u64 {
        self.span_start + self.first_offset as u64
    }

    /// Length of the range in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty range (never: mapping refuses one).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// IOVA of the range's first byte.
    pub fn iova(&self) -> u64 {
        self.iova + self.first_offset as u64
    }

    /// Pinned or revocable.
    pub fn mode(&self) -> DmaBufMode {
        self.mode
    }

    /// `"host mapping"` or `"descriptor"`: how the IOMMU was given the pages.
    pub fn attached_by(&self) -> &'static str {
        self.how
    }

    /// True when the CPU can read and write the range through this mapping.
    pub fn host_accessible(&self) -> bool {
        self.host.is_some() && !self.is_revoked()
    }

    /// The trimmed page list of the range (the MTT a memory key over it is programmed with).
    pub fn pages(&self) -> PageList {
        let count = self.span_len / self.page;
        let covered = self.first_offset + self.len;
        PageList {
            page_size: self.page,
            iovas: (0..count)
                .map(|i| self.iova + (i * self.page) as u64)
                .collect(),
            first_offset: self.first_offset,
            last_tail: self.span_len - covered,
        }
    }

    /// True once revoked: the device can no longer reach the pages.
    pub fn is_revoked(&self) -> bool {
        self.state.load(Ordering::Acquire) != STATE_MAPPED
    }

    /// Counts a memory key that translates this range (the driver calls it on registration).
    pub fn key_registered(&self) {
        self.keys.fetch_add(1, Ordering::AcqRel);
    }

    /// Uncounts a memory key that no longer translates this range (destroyed by the device).
    pub fn key_released(&self) {
        let _ = self
            .keys
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |k| k.checked_sub(1));
    }

    /// Memory keys translating this range now.
    pub fn keys(&self) -> u32 {
        self.keys.load(Ordering::Acquire)
    }

    /// The exporter's side of revocation: announces that the memory goes away. The importer
    /// sees it in [`revoke_requested`](Self::revoke_requested) and revokes.
    pub fn request_revoke(&self) {
        self.revoke_requested.store(true, Ordering::Release);
    }

    /// True once [`request_revoke`](Self::request_revoke) was called.
    pub fn revoke_requested(&self) -> bool {
        self.revoke_requested.load(Ordering::Acquire)
    }

    /// Takes the range away from the device: unmaps the IOMMU range. Only for revocable
    /// mappings and only once no memory key translates them. Revoking twice is a no-op.
    ///
    /// # Errors
    ///
    /// [`DmaBufError::Pinned`], [`DmaBufError::KeysAlive`], [`DmaBufError::Unmap`] (the range
    /// then stays reserved until the process ends).
    pub fn revoke(&self) -> Result<(), DmaBufError> {
        if self.mode == DmaBufMode::Pinned {
            return Err(DmaBufError::Pinned);
        }
        let keys = self.keys();
        if keys != 0 {
            return Err(DmaBufError::KeysAlive { keys });
        }
        if self
            .state
            .compare_exchange(
                STATE_MAPPED,
                STATE_REVOKED,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_err()
        {
            return Ok(());
        }
        if let Err(e) = self.iommu.unmap(self.iova, self.span_len) {
            self.state.store(STATE_LEAKED, Ordering::Release);
            return Err(DmaBufError::Unmap(e));
        }
        // Cannot fail: the range was allocated by `map` and is given back only here or in drop.
        let _ = self.iovas.free(self.iova, self.span_len as u64);
        Ok(())
    }

    /// Copies `buf.len()` bytes from offset `offset` of the range.
    ///
    /// # Errors
    ///
    /// [`DmaBufError::NoHostAccess`], [`DmaBufError::Revoked`], [`DmaBufError::OutOfBounds`].
    pub fn read(&self, offset: usize, buf: &mut [u8]) -> Result<(), DmaBufError> {
        let at = self.host_ptr(offset, buf.len())?;
        // SAFETY: `host_ptr` checked the range lies inside the live host mapping.
        unsafe { volatile_copy_out(at, buf) };
        Ok(())
    }

    /// Copies `data` to offset `offset` of the range.
    ///
    /// # Errors
    ///
    /// As [`read`](Self::read).
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), DmaBufError> {
        let at = self.host_ptr(offset, data.len())?;
        // SAFETY: `host_ptr` checked the range lies inside the live host mapping.
        unsafe { volatile_copy_in(at, data) };
        Ok(())
    }

    /// Reads `N` 64-bit words from offset `offset` of the range, one volatile load each, as the
    /// bytes sit in memory (see [`crate::DmaRegion::read_words`]).
    ///
    /// # Errors
    ///
    /// As [`read`](Self::read), and [`DmaBufError::Misaligned`] when the address is not 8-byte
    /// aligned.
    #[inline]
    pub fn read_words<const N: usize>(&self, offset: usize) -> Result<[u64; N], DmaBufError> {
        let at = self.host_ptr(offset, N * 8)?;
        if at as usize % 8 != 0 {
            return Err(DmaBufError::Misaligned { offset, align: 8 });
        }
        // SAFETY: `host_ptr` checked the range lies inside the live host mapping; the address
        // is 8-byte aligned (checked above).
        Ok(unsafe { volatile_read_words(at) })
    }

    /// Sets `len` bytes from offset `offset` of the range to `byte`.
    ///
    /// # Errors
    ///
    /// As [`read`](Self::read).
    pub fn fill(&self, offset: usize, len: usize, byte: u8) -> Result<(), DmaBufError> {
        let at = self.host_ptr(offset, len)?;
        // SAFETY: `host_ptr` checked the range lies inside the live host mapping.
        unsafe { volatile_fill(at, len, byte) };
        Ok(())
    }

    fn host_ptr(&self, offset: usize, len: usize) -> Result<*mut u8, DmaBufError> {
        let Some(host) = &self.host else {
            return Err(DmaBufError::NoHostAccess {
                exporter: self.dmabuf.exporter.clone(),
            });
        };
        if self.is_revoked() {
            return Err(DmaBufError::Revoked {
                exporter: self.dmabuf.exporter.clone(),
            });
        }
        if offset.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(DmaBufError::OutOfBounds {
                offset,
                len,
                mapped: self.len,
            });
        }
        // SAFETY: `first_offset + offset + len <= first_offset + self.len <= span_len`, the
        // length of the host view.
        Ok(unsafe { host.ptr.as_ptr().add(self.first_offset + offset) })
    }
}

impl Drop for DmaBufMapping {
    fn drop(&mut self) {
        let unmapped = match self.state.load(Ordering::Acquire) {
            STATE_MAPPED => self.iommu.unmap(self.iova, self.span_len).is_ok(),
            STATE_REVOKED => return,
            _ => false,
        };
        if !unmapped {
            // The device may still reach the pages: keep them mapped here (so they stay
            // allocated) and the IOVA range reserved, as a failed `DmaRegion` unmap does.
            std::mem::forget(self.host.take());
            std::mem::forget(self.device_view.take());
            return;
        }
        // Cannot fail: allocated by `map`, given back only here.
        let _ = self.iovas.free(self.iova, self.span_len as u64);
    }
}

/// `e` as text, with the raw number when the C library has no name for it (nix then reports
/// `UnknownErrno` and drops the number): read from `errno` itself, which nothing has touched
/// since the failed call. The kernel's internal `ENOTSUPP` (524), which some drivers return to
/// userspace, is named.
fn errno_text(e: nix::errno::Errno) -> String {
    if e != nix::errno::Errno::UnknownErrno {
        return e.to_string();
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(524) => "errno 524 (ENOTSUPP: the driver does not support this operation)".into(),
        Some(n) => format!("errno {n} (no name in the C library)"),
        None => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fdinfo_of_a_dmabuf_parses() {
        let text = "pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1042\nsize:\t67108864\ncount:\t1\nexp_name:\tudmabuf\nname:\trx-ring\n";
        assert_eq!(
            FdInfo::parse(text),
            Some(FdInfo {
                size: 64 << 20,
                exporter: "udmabuf".into(),
                name: Some("rx-ring".into()),
            })
        );
    }

    #[test]
    fn fdinfo_without_an_exporter_is_not_a_dmabuf() {
        assert_eq!(FdInfo::parse("pos:\t0\nflags:\t02\nmnt_id:\t15\n"), None);
        assert_eq!(FdInfo::parse("size:\tlots\nexp_name:\tsystem\n"), None);
    }

    /// Refuses every host mapping (as iommufd refuses a BAR's `VM_PFNMAP` mapping) and takes
    /// descriptors.
    struct DescriptorOnlyIommu;

    // SAFETY: nothing is ever mapped by address, so no memory is touched.
    unsafe impl Iommu for DescriptorOnlyIommu {
        fn iova_ranges(&self) -> Vec<crate::IovaRange> {
            vec![crate::IovaRange {
                start: 0x1_0000_0000,
                end: 0x1_ffff_ffff,
            }]
        }

        unsafe fn map(&self, iova: u64, _host: *mut u8, len: usize) -> Result<(), IommuError> {
            Err(IommuError::MapRefused {
                iova,
                len: len as u64,
                reason: "Bad address (a VM_PFNMAP mapping)".into(),
            })
        }

        fn map_file(
            &self,
            _iova: u64,
            _fd: BorrowedFd<'_>,
            _offset: u64,
            _len: usize,
        ) -> Result<(), IommuError> {
            Ok(())
        }

        fn unmap(&self, _iova: u64, _len: usize) -> Result<(), IommuError> {
            Ok(())
        }
    }

    #[test]
    fn a_buffer_attached_by_descriptor_is_read_through_its_backing_file() {
        // A descriptor the CPU cannot map shared and writable (a BAR's dmabuf cannot be mapped
        // at all) whose pages are those of a memfd, the BAR's own mapping for a peer.
        let backing = crate::export::memfd("bar", 4 * 4096).unwrap();
        let read_only = fs::File::open(format!("/proc/self/fd/{}", backing.as_raw_fd())).unwrap();
        let buf = Arc::new(DmaBuf {
            fd: OwnedFd::from(read_only),
            size: 4 * 4096,
            exporter: "vfio_pci_core".into(),
            name: None,
            kind: DmaBufKind::DmaBuf,
            backing: Some((backing.try_clone().unwrap(), 0)),
        });
        let iommu: Arc<dyn Iommu> = Arc::new(DescriptorOnlyIommu);
        let iovas = Arc::new(crate::IovaAllocator::new(&iommu.iova_ranges()).unwrap());
        let mapping = buf
            .map(iommu, &iovas, 4096, 4096, DmaBufMode::Pinned)
            .unwrap();
        assert_eq!(mapping.attached_by(), "descriptor");
        assert!(mapping.host_accessible());
        mapping.write(0, b"peer bytes").unwrap();
        let mut back = [0u8; 10];
        mapping.read(0, &mut back).unwrap();
        assert_eq!(&back, b"peer bytes");
        // The write went to the backing file, at the range's offset.
        let mut file = fs::File::from(backing);
        let mut at = [0u8; 10];
        std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(4096)).unwrap();
        std::io::Read::read_exact(&mut file, &mut at).unwrap();
        assert_eq!(&at, b"peer bytes");
    }

    #[test]
    fn page_list_length_is_the_trimmed_range() {
        let list = PageList {
            page_size: 4096,
            iovas: vec![0x10000, 0x11000, 0x12000],
            first_offset: 100,
            last_tail: 4000,
        };
        assert_eq!(list.len(), 3 * 4096 - 4100);
        assert_eq!(list.start_iova(), Some(0x10064));
    }
}
