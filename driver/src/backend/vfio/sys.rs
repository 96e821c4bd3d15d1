//! The syscall seam: every file, ioctl and mapping the VFIO layer asks of the kernel goes through
//! one trait, [`VfioSys`]. [`RealSys`](super::RealSys) forwards to Linux;
//! `testing::FakeSys` plays a scripted kernel so the whole open sequence and
//! every error path can be tested without a device.
//!
//! The methods are typed per request (one method per VFIO or iommufd ioctl the driver uses), so a
//! fake never has to decode raw ioctl numbers. Where the kernel protocol itself is a byte layout
//! the driver must parse (the `VFIO_IOMMU_GET_INFO` capability chain) the seam hands over the raw
//! bytes, so the parser is exercised by tests too.

use std::fmt;
use std::io;
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;

use cxdirect_dma::IovaRange;
use vfio_bindings::bindings::vfio as k;

/// The VFIO container device node.
pub const VFIO_CONTAINER_PATH: &str = "/dev/vfio/vfio";
/// The iommufd device node.
pub const IOMMUFD_PATH: &str = "/dev/iommu";
/// Where sysfs lists PCI functions by address.
pub const SYSFS_PCI_DEVICES: &str = "/sys/bus/pci/devices";
/// Where sysfs lists IOMMU groups by number.
pub const SYSFS_IOMMU_GROUPS: &str = "/sys/kernel/iommu_groups";
/// The vfio module parameter that allows no-IOMMU groups.
pub const NOIOMMU_PARAM_PATH: &str = "/sys/module/vfio/parameters/enable_unsafe_noiommu_mode";
/// The process's page map (virtual page → physical frame), used in no-IOMMU mode.
pub const PAGEMAP_PATH: &str = "/proc/self/pagemap";
/// The process's status file (capabilities are read from its `CapEff:` line).
pub const PROC_STATUS_PATH: &str = "/proc/self/status";

/// Byte offset of region `index` in a vfio-pci device file (the kernel's fixed layout: the region
/// index in bits 40 and up). Real offsets always come from `VFIO_DEVICE_GET_REGION_INFO`; this is
/// only what a fake uses to look like the kernel.
pub const fn vfio_pci_region_offset(index: u32) -> u64 {
    (index as u64) << 40
}

/// How a path is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// `O_RDONLY`.
    ReadOnly,
    /// `O_RDWR`.
    ReadWrite,
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Access::ReadOnly => "ro",
            Access::ReadWrite => "rw",
        })
    }
}

/// What `VFIO_DEVICE_GET_INFO` reports about a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DeviceInfo {
    /// `VFIO_DEVICE_FLAGS_*` (`PCI`, `RESET`, ...).
    pub flags: u32,
    /// Number of regions (9 for vfio-pci: six BARs, ROM, config space, VGA).
    pub num_regions: u32,
    /// Number of interrupt indexes (5 for vfio-pci: INTx, MSI, MSI-X, error, request).
    pub num_irqs: u32,
}

/// What `VFIO_DEVICE_GET_REGION_INFO` reports about one region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RegionInfo {
    /// Region index (`VFIO_PCI_BAR0_REGION_INDEX`, `VFIO_PCI_CONFIG_REGION_INDEX`, ...).
    pub index: u32,
    /// `VFIO_REGION_INFO_FLAG_*` (`READ`, `WRITE`, `MMAP`, `CAPS`).
    pub flags: u32,
    /// Region size in bytes; 0 when the region is absent (an unimplemented BAR).
    pub size: u64,
    /// Offset of the region in the device file, for `pread`, `pwrite` and `mmap`.
    pub offset: u64,
}

/// What `VFIO_DEVICE_GET_IRQ_INFO` reports about one interrupt index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IrqInfo {
    /// Interrupt index (`VFIO_PCI_MSIX_IRQ_INDEX`, ...).
    pub index: u32,
    /// `VFIO_IRQ_INFO_*` (`EVENTFD`, `MASKABLE`, `AUTOMASKED`, `NORESIZE`).
    pub flags: u32,
    /// Number of vectors behind the index.
    pub count: u32,
}

/// A `VFIO_IOMMU_MAP_DMA` request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DmaMap {
    /// Process virtual address of the memory.
    pub vaddr: u64,
    /// I/O virtual address the device will use.
    pub iova: u64,
    /// Length in bytes.
    pub size: u64,
    /// `VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE` (device may read and write).
    pub flags: u32,
}

/// An `IOMMU_IOAS_MAP` request (iommufd).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoasMap {
    /// The IO address space.
    pub ioas_id: u32,
    /// `IOMMU_IOAS_MAP_*` flags.
    pub flags: u32,
    /// Process virtual address of the memory.
    pub user_va: u64,
    /// Length in bytes.
    pub length: u64,
    /// I/O virtual address (used as given with `IOMMU_IOAS_MAP_FIXED_IOVA`).
    pub iova: u64,
}

/// `IOMMU_IOAS_MAP_FIXED_IOVA`: map at the IOVA given instead of letting the kernel choose.
pub const IOMMU_IOAS_MAP_FIXED_IOVA: u32 = 1 << 0;
/// `IOMMU_IOAS_MAP_WRITEABLE`: the device may write.
pub const IOMMU_IOAS_MAP_WRITEABLE: u32 = 1 << 1;
/// `IOMMU_IOAS_MAP_READABLE`: the device may read.
pub const IOMMU_IOAS_MAP_READABLE: u32 = 1 << 2;

/// What `IOMMU_IOAS_IOVA_RANGES` answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IovaRangesReply {
    /// How many ranges the address space has. When this is more than the room given, only the
    /// first ranges were written and the caller should ask again with more room.
    pub total: u32,
    /// Required alignment of IOVAs in bytes.
    pub alignment: u64,
}

/// A `VFIO_DEVICE_SET_IRQS` request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IrqSet {
    /// `VFIO_IRQ_SET_DATA_*` | `VFIO_IRQ_SET_ACTION_*`.
    pub flags: u32,
    /// Interrupt index.
    pub index: u32,
    /// First vector.
    pub start: u32,
    /// Number of vectors.
    pub count: u32,
    /// With `VFIO_IRQ_SET_DATA_EVENTFD`: one eventfd per vector (`-1` leaves a vector unsignalled).
    pub eventfds: Vec<RawFd>,
}

impl IrqSet {
    /// Vectors `start..start + eventfds.len()` of `index` signal the given eventfds
    /// (`DATA_EVENTFD | ACTION_TRIGGER`).
    pub fn trigger_eventfds(index: u32, start: u32, eventfds: Vec<RawFd>) -> Self {
        Self {
            flags: k::VFIO_IRQ_SET_DATA_EVENTFD | k::VFIO_IRQ_SET_ACTION_TRIGGER,
            index,
            start,
            count: u32::try_from(eventfds.len()).unwrap_or(u32::MAX),
            eventfds,
        }
    }

    /// Turns every vector of `index` off (`DATA_NONE | ACTION_TRIGGER` with count 0).
    pub fn disable(index: u32) -> Self {
        Self {
            flags: k::VFIO_IRQ_SET_DATA_NONE | k::VFIO_IRQ_SET_ACTION_TRIGGER,
            index,
            start: 0,
            count: 0,
            eventfds: Vec::new(),
        }
    }

    /// The request as the kernel reads it: `struct vfio_irq_set` (argsz, flags, index, start,
    /// count, native endian) followed by one 32-bit eventfd per vector when the data is eventfds.
    pub fn to_bytes(&self) -> Vec<u8> {
        let data_len = if self.flags & k::VFIO_IRQ_SET_DATA_EVENTFD != 0 {
            self.eventfds.len() * 4
        } else {
            0
        };
        let argsz = std::mem::size_of::<k::vfio_irq_set>() + data_len;
        let mut out = Vec::with_capacity(argsz);
        for word in [
            u32::try_from(argsz).unwrap_or(u32::MAX),
            self.flags,
            self.index,
            self.start,
            self.count,
        ] {
            out.extend_from_slice(&word.to_ne_bytes());
        }
        if data_len != 0 {
            for fd in &self.eventfds {
                out.extend_from_slice(&fd.to_ne_bytes());
            }
        }
        out
    }
}

/// Every kernel service the VFIO layer uses, one method per request.
///
/// Errors are `std::io::Error`s carrying the errno, so the layer above can turn `EACCES`,
/// `EBUSY` or `ENOMEM` into advice.
///
/// # Safety
///
/// The VFIO layer builds memory safety on these promises, so implementations must keep them:
/// - [`mmap`](VfioSys::mmap) returns a pointer to `len` bytes that may be read and written with
///   volatile loads and stores of up to 8 bytes from any thread, and that stay valid until
///   [`munmap`](VfioSys::munmap) is called with the same pointer and length.
/// - [`map_dma`](VfioSys::map_dma) and [`ioas_map`](VfioSys::ioas_map) make only the memory
///   described by the request reachable by the device.
/// - When [`unmap_dma`](VfioSys::unmap_dma) or [`ioas_unmap`](VfioSys::ioas_unmap) returns
///   `Ok(n)`, the device can no longer reach the `n` bytes unmapped.
pub unsafe trait VfioSys: Send + Sync + 'static {
    /// An open file (a container, group, device, iommufd or ordinary file). Dropping it closes it.
    type Fd: Send + Sync + fmt::Debug + 'static;

    /// Whether `path` exists (following symbolic links).
    fn exists(&self, path: &Path) -> bool;
    /// Reads a whole (small) file such as a sysfs attribute.
    fn read_to_string(&self, path: &Path) -> io::Result<String>;
    /// Reads a symbolic link (sysfs `driver` and `iommu_group` links).
    fn read_link(&self, path: &Path) -> io::Result<PathBuf>;
    /// Names of the entries of a directory, sorted.
    fn read_dir(&self, path: &Path) -> io::Result<Vec<String>>;
    /// Opens a file or device node (close-on-exec).
    fn open(&self, path: &Path, access: Access) -> io::Result<Self::Fd>;
    /// The soft `RLIMIT_MEMLOCK` in bytes (`u64::MAX` when unlimited).
    fn memlock_limit(&self) -> io::Result<u64>;
    /// The CPU page size in bytes.
    fn page_size(&self) -> usize;

    /// `VFIO_GET_API_VERSION` on a container.
    fn get_api_version(&self, container: &Self::Fd) -> io::Result<i32>;
    /// `VFIO_CHECK_EXTENSION`: whether the container supports `extension` (an IOMMU type).
    fn check_extension(&self, container: &Self::Fd, extension: u32) -> io::Result<bool>;
    /// `VFIO_SET_IOMMU`: chooses the container's IOMMU driver.
    fn set_iommu(&self, container: &Self::Fd, iommu_type: u32) -> io::Result<()>;
    /// `VFIO_IOMMU_GET_INFO`: writes `buf.len()` as `argsz` and lets the kernel fill `buf` with
    /// `struct vfio_iommu_type1_info` and its capability chain. When the answer needs more room,
    /// the `argsz` the kernel wrote back (the first four bytes) is larger than `buf.len()` and the
    /// capabilities are left out.
    fn iommu_get_info(&self, container: &Self::Fd, buf: &mut [u8]) -> io::Result<()>;
    /// `VFIO_IOMMU_MAP_DMA`.
    ///
    /// # Safety
    ///
    /// The memory at `map.vaddr..map.vaddr + map.size` must stay allocated until it is unmapped:
    /// the device may read and write it at any time until then.
    unsafe fn map_dma(&self, container: &Self::Fd, map: &DmaMap) -> io::Result<()>;
    /// `VFIO_IOMMU_UNMAP_DMA`: returns the number of bytes unmapped.
    fn unmap_dma(&self, container: &Self::Fd, iova: u64, size: u64) -> io::Result<u64>;

    /// `VFIO_GROUP_GET_STATUS`: the group's `VFIO_GROUP_FLAGS_*`.
    fn group_get_status(&self, group: &Self::Fd) -> io::Result<u32>;
    /// `VFIO_GROUP_SET_CONTAINER`.
    fn group_set_container(&self, group: &Self::Fd, container: &Self::Fd) -> io::Result<()>;
    /// `VFIO_GROUP_GET_DEVICE_FD` for the device named `name` (its PCI address).
    fn group_get_device_fd(&self, group: &Self::Fd, name: &str) -> io::Result<Self::Fd>;

    /// `VFIO_DEVICE_GET_INFO`.
    fn device_get_info(&self, device: &Self::Fd) -> io::Result<DeviceInfo>;
    /// `VFIO_DEVICE_GET_REGION_INFO` for region `index`.
    fn device_get_region_info(&self, device: &Self::Fd, index: u32) -> io::Result<RegionInfo>;
    /// `VFIO_DEVICE_GET_IRQ_INFO` for interrupt index `index`.
    fn device_get_irq_info(&self, device: &Self::Fd, index: u32) -> io::Result<IrqInfo>;
    /// `VFIO_DEVICE_SET_IRQS`.
    fn device_set_irqs(&self, device: &Self::Fd, set: &IrqSet) -> io::Result<()>;
    /// `VFIO_DEVICE_RESET`.
    fn device_reset(&self, device: &Self::Fd) -> io::Result<()>;
    /// `VFIO_DEVICE_BIND_IOMMUFD`: binds a device cdev to an iommufd; returns the device id.
    fn device_bind_iommufd(&self, device: &Self::Fd, iommufd: &Self::Fd) -> io::Result<u32>;
    /// `VFIO_DEVICE_ATTACH_IOMMUFD_PT`: attaches a bound device to an IO address space.
    fn device_attach_iommufd_pt(&self, device: &Self::Fd, pt_id: u32) -> io::Result<()>;

    /// `IOMMU_IOAS_ALLOC`: a new IO address space; returns its id.
    fn ioas_alloc(&self, iommufd: &Self::Fd) -> io::Result<u32>;
    /// `IOMMU_IOAS_IOVA_RANGES`: fills `out` with up to `out.len()` usable ranges.
    fn ioas_iova_ranges(
        &self,
        iommufd: &Self::Fd,
        ioas_id: u32,
        out: &mut [IovaRange],
    ) -> io::Result<IovaRangesReply>;
    /// `IOMMU_IOAS_MAP`: returns the IOVA mapped at.
    ///
    /// # Safety
    ///
    /// The memory at `map.user_va..map.user_va + map.length` must stay allocated until it is
    /// unmapped: the device may read and write it at any time until then.
    unsafe fn ioas_map(&self, iommufd: &Self::Fd, map: &IoasMap) -> io::Result<u64>;
    /// `IOMMU_IOAS_MAP_FILE` (Linux ≥ 6.13): maps `map.length` bytes of the file `file` from byte
    /// `map.user_va` (the file offset here); returns the IOVA mapped at. The kernel pins the
    /// file's pages itself, so no process memory is involved.
    fn ioas_map_file(
        &self,
        iommufd: &Self::Fd,
        file: std::os::fd::BorrowedFd<'_>,
        map: &IoasMap,
    ) -> io::Result<u64>;
    /// `IOMMU_IOAS_UNMAP`: returns the number of bytes unmapped.
    fn ioas_unmap(
        &self,
        iommufd: &Self::Fd,
        ioas_id: u32,
        iova: u64,
        length: u64,
    ) -> io::Result<u64>;

    /// `VFIO_DEVICE_FEATURE` with `GET | VFIO_DEVICE_FEATURE_DMA_BUF` (Linux ≥ 6.19, vfio-pci
    /// built with `CONFIG_VFIO_PCI_DMABUF`): exports `length` bytes of region `region_index`
    /// from byte `offset` as a dmabuf, opened read-write and close-on-exec; returns its
    /// descriptor.
    fn device_feature_dma_buf(
        &self,
        device: &Self::Fd,
        region_index: u32,
        offset: u64,
        length: u64,
    ) -> io::Result<std::os::fd::OwnedFd>;

    /// Maps `len` bytes of `fd` at `offset`, shared, readable and writable.
    fn mmap(&self, fd: &Self::Fd, offset: u64, len: usize) -> io::Result<NonNull<u8>>;
    /// Undoes [`mmap`](VfioSys::mmap).
    ///
    /// # Safety
    ///
    /// `ptr` and `len` must come from one earlier `mmap` of this object, and nothing may use the
    /// mapping afterwards.
    unsafe fn munmap(&self, ptr: NonNull<u8>, len: usize) -> io::Result<()>;
    /// Reads from `fd` at `offset`; returns the bytes read.
    fn pread(&self, fd: &Self::Fd, offset: u64, buf: &mut [u8]) -> io::Result<usize>;
    /// Writes to `fd` at `offset`; returns the bytes written.
    fn pwrite(&self, fd: &Self::Fd, offset: u64, data: &[u8]) -> io::Result<usize>;
}
