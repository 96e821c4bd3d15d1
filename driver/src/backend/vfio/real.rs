//! [`RealSys`]: the seam forwarded to Linux with `libc` and `nix`.

use std::ffi::CString;
use std::fs::OpenOptions;
use std::io;
use std::mem::size_of;
use std::num::NonZeroUsize;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;

use cxdirect_dma::IovaRange;
use nix::sys::mman::{MapFlags, ProtFlags};
use vfio_bindings::bindings::vfio as k;

use super::sys::{
    Access, DeviceInfo, DmaMap, IoasMap, IovaRangesReply, IrqInfo, IrqSet, RegionInfo, VfioSys,
};

/// `_IO(';', nr)`: VFIO and iommufd requests carry no size or direction in their number.
const fn io(nr: u32) -> u32 {
    ((k::VFIO_TYPE as u32) << 8) | nr
}

const VFIO_GET_API_VERSION: u32 = io(k::VFIO_BASE);
const VFIO_CHECK_EXTENSION: u32 = io(k::VFIO_BASE + 1);
const VFIO_SET_IOMMU: u32 = io(k::VFIO_BASE + 2);
const VFIO_GROUP_GET_STATUS: u32 = io(k::VFIO_BASE + 3);
const VFIO_GROUP_SET_CONTAINER: u32 = io(k::VFIO_BASE + 4);
const VFIO_GROUP_GET_DEVICE_FD: u32 = io(k::VFIO_BASE + 6);
const VFIO_DEVICE_GET_INFO: u32 = io(k::VFIO_BASE + 7);
const VFIO_DEVICE_GET_REGION_INFO: u32 = io(k::VFIO_BASE + 8);
const VFIO_DEVICE_GET_IRQ_INFO: u32 = io(k::VFIO_BASE + 9);
const VFIO_DEVICE_SET_IRQS: u32 = io(k::VFIO_BASE + 10);
const VFIO_DEVICE_RESET: u32 = io(k::VFIO_BASE + 11);
const VFIO_IOMMU_GET_INFO: u32 = io(k::VFIO_BASE + 12);
const VFIO_IOMMU_MAP_DMA: u32 = io(k::VFIO_BASE + 13);
const VFIO_IOMMU_UNMAP_DMA: u32 = io(k::VFIO_BASE + 14);
const VFIO_DEVICE_FEATURE: u32 = io(k::VFIO_BASE + 17);
const VFIO_DEVICE_BIND_IOMMUFD: u32 = io(k::VFIO_BASE + 18);
const VFIO_DEVICE_ATTACH_IOMMUFD_PT: u32 = io(k::VFIO_BASE + 19);
const IOMMU_IOAS_ALLOC: u32 = io(0x81);
const IOMMU_IOAS_IOVA_RANGES: u32 = io(0x84);
const IOMMU_IOAS_MAP: u32 = io(0x85);
const IOMMU_IOAS_MAP_FILE: u32 = io(0x8f);
const IOMMU_IOAS_UNMAP: u32 = io(0x86);

/// `struct iommu_ioas_alloc` (include/uapi/linux/iommufd.h).
#[repr(C)]
#[derive(Default)]
struct IommuIoasAlloc {
    size: u32,
    flags: u32,
    out_ioas_id: u32,
}

/// `struct iommu_iova_range`: `[start, last]` inclusive.
#[repr(C)]
#[derive(Default, Clone, Copy)]
struct IommuIovaRange {
    start: u64,
    last: u64,
}

/// `struct iommu_ioas_iova_ranges`.
#[repr(C)]
#[derive(Default)]
struct IommuIoasIovaRanges {
    size: u32,
    ioas_id: u32,
    num_iovas: u32,
    reserved: u32,
    allowed_iovas: u64,
    out_iova_alignment: u64,
}

/// `struct iommu_ioas_map`.
#[repr(C)]
#[derive(Default)]
struct IommuIoasMap {
    size: u32,
    flags: u32,
    ioas_id: u32,
    reserved: u32,
    user_va: u64,
    length: u64,
    iova: u64,
}

/// `struct iommu_ioas_map_file`.
#[repr(C)]
#[derive(Default)]
struct IommuIoasMapFile {
    size: u32,
    flags: u32,
    ioas_id: u32,
    fd: i32,
    start: u64,
    length: u64,
    iova: u64,
}

/// `VFIO_DEVICE_FEATURE_GET` (include/uapi/linux/vfio.h).
const VFIO_DEVICE_FEATURE_GET: u32 = 1 << 16;
/// `VFIO_DEVICE_FEATURE_DMA_BUF`, the feature index (Linux 6.19).
const VFIO_DEVICE_FEATURE_DMA_BUF: u32 = 11;

/// `struct vfio_device_feature` followed by a `struct vfio_device_feature_dma_buf` with one
/// `struct vfio_region_dma_range`.
#[repr(C)]
#[derive(Default)]
struct DeviceFeatureDmaBuf {
    argsz: u32,
    flags: u32,
    region_index: u32,
    open_flags: u32,
    dma_buf_flags: u32,
    nr_ranges: u32,
    range_offset: u64,
    range_length: u64,
}

/// `struct iommu_ioas_unmap`.
#[repr(C)]
#[derive(Default)]
struct IommuIoasUnmap {
    size: u32,
    ioas_id: u32,
    iova: u64,
    length: u64,
}

const _: () = {
    assert!(size_of::<IommuIoasAlloc>() == 12);
    assert!(size_of::<IommuIovaRange>() == 16);
    assert!(size_of::<IommuIoasIovaRanges>() == 32);
    assert!(size_of::<IommuIoasMap>() == 40);
    assert!(size_of::<IommuIoasUnmap>() == 24);
    assert!(size_of::<IommuIoasMapFile>() == 40);
    assert!(size_of::<DeviceFeatureDmaBuf>() == 8 + 16 + 16);
};

/// `argsz`/`size` of a kernel structure. All of them are a few dozen bytes.
fn argsz<T>() -> u32 {
    size_of::<T>() as u32
}

/// Minimum `argsz` of `VFIO_DEVICE_BIND_IOMMUFD` (argsz, flags, iommufd, out_devid): newer
/// kernels append a token pointer that is read only with a flag we never set.
const BIND_IOMMUFD_ARGSZ: u32 = 16;
/// Minimum `argsz` of `VFIO_DEVICE_ATTACH_IOMMUFD_PT` (argsz, flags, pt_id).
const ATTACH_IOMMUFD_PT_ARGSZ: u32 = 12;

/// An ioctl whose argument is a pointer to `T`.
///
/// # Safety
///
/// Request `nr` must read and write no more than the `T` (or the `argsz` bytes it declares) that
/// `arg` points to, and `arg` must be valid for that long.
unsafe fn ioctl_ptr<T>(fd: &OwnedFd, nr: u32, arg: *mut T) -> io::Result<libc::c_int> {
    // SAFETY: the caller promises `arg` is what `nr` expects; `fd` is an open descriptor.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), nr as libc::Ioctl, arg) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// An ioctl whose argument is an integer (or absent).
///
/// # Safety
///
/// Request `nr` must take an integer argument (or none), so the kernel dereferences nothing.
unsafe fn ioctl_val(fd: &OwnedFd, nr: u32, arg: libc::c_ulong) -> io::Result<libc::c_int> {
    // SAFETY: the caller promises `nr` reads no memory through `arg`; `fd` is open.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), nr as libc::Ioctl, arg) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// Linux, reached through system calls: what programs use on real hardware.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealSys;

// SAFETY: every promise of the trait is the kernel's: mmap of a device region returns a shared
// mapping of the length asked for that stays until munmap; MAP_DMA/IOAS_MAP map exactly the
// range described; a successful UNMAP returns after the IOMMU no longer translates the range.
unsafe impl VfioSys for RealSys {
    type Fd = OwnedFd;

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn read_to_string(&self, path: &Path) -> io::Result<String> {
        std::fs::read_to_string(path)
    }

    fn read_link(&self, path: &Path) -> io::Result<PathBuf> {
        std::fs::read_link(path)
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(path)? {
            names.push(entry?.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        Ok(names)
    }

    fn open(&self, path: &Path, access: Access) -> io::Result<OwnedFd> {
        let file = OpenOptions::new()
            .read(true)
            .write(access == Access::ReadWrite)
            .open(path)?;
        Ok(file.into())
    }

    fn memlock_limit(&self) -> io::Result<u64> {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes one `struct rlimit` to the pointer given.
        let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(if lim.rlim_cur == libc::RLIM_INFINITY {
            u64::MAX
        } else {
            lim.rlim_cur
        })
    }

    fn page_size(&self) -> usize {
        // SAFETY: sysconf reads a configuration value and touches no memory of ours.
        let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(size)
            .ok()
            .filter(|&s| s > 0)
            .unwrap_or(4096)
    }

    fn get_api_version(&self, container: &OwnedFd) -> io::Result<i32> {
        // SAFETY: VFIO_GET_API_VERSION takes no argument.
        unsafe { ioctl_val(container, VFIO_GET_API_VERSION, 0) }
    }

    fn check_extension(&self, container: &OwnedFd, extension: u32) -> io::Result<bool> {
        // SAFETY: VFIO_CHECK_EXTENSION takes the extension number by value.
        let rc = unsafe { ioctl_val(container, VFIO_CHECK_EXTENSION, extension.into()) }?;
        Ok(rc > 0)
    }

    fn set_iommu(&self, container: &OwnedFd, iommu_type: u32) -> io::Result<()> {
        // SAFETY: VFIO_SET_IOMMU takes the IOMMU type by value.
        unsafe { ioctl_val(container, VFIO_SET_IOMMU, iommu_type.into()) }.map(drop)
    }

    fn iommu_get_info(&self, container: &OwnedFd, buf: &mut [u8]) -> io::Result<()> {
        if buf.len() < size_of::<k::vfio_iommu_type1_info>() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let len =
            u32::try_from(buf.len()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        buf[..4].copy_from_slice(&len.to_ne_bytes());
        // SAFETY: the kernel writes at most `argsz` = `buf.len()` bytes into `buf`.
        unsafe { ioctl_ptr(container, VFIO_IOMMU_GET_INFO, buf.as_mut_ptr()) }.map(drop)
    }

    unsafe fn map_dma(&self, container: &OwnedFd, map: &DmaMap) -> io::Result<()> {
        let mut arg = k::vfio_iommu_type1_dma_map {
            argsz: argsz::<k::vfio_iommu_type1_dma_map>(),
            flags: map.flags,
            vaddr: map.vaddr,
            iova: map.iova,
            size: map.size,
        };
        // SAFETY: the kernel reads one vfio_iommu_type1_dma_map; the caller keeps the memory
        // alive while it is mapped.
        unsafe { ioctl_ptr(container, VFIO_IOMMU_MAP_DMA, &mut arg) }.map(drop)
    }

    fn unmap_dma(&self, container: &OwnedFd, iova: u64, size: u64) -> io::Result<u64> {
        let mut arg = k::vfio_iommu_type1_dma_unmap {
            argsz: argsz::<k::vfio_iommu_type1_dma_unmap>(),
            iova,
            size,
            ..Default::default()
        };
        // SAFETY: without flags the kernel reads and updates only the fixed-size header.
        unsafe { ioctl_ptr(container, VFIO_IOMMU_UNMAP_DMA, &mut arg) }?;
        Ok(arg.size)
    }

    fn group_get_status(&self, group: &OwnedFd) -> io::Result<u32> {
        let mut arg = k::vfio_group_status {
            argsz: argsz::<k::vfio_group_status>(),
            flags: 0,
        };
        // SAFETY: the kernel reads and writes one vfio_group_status.
        unsafe { ioctl_ptr(group, VFIO_GROUP_GET_STATUS, &mut arg) }?;
        Ok(arg.flags)
    }

    fn group_set_container(&self, group: &OwnedFd, container: &OwnedFd) -> io::Result<()> {
        let mut fd: libc::c_int = container.as_raw_fd();
        // SAFETY: VFIO_GROUP_SET_CONTAINER reads one int (the container descriptor).
        unsafe { ioctl_ptr(group, VFIO_GROUP_SET_CONTAINER, &mut fd) }.map(drop)
    }

    fn group_get_device_fd(&self, group: &OwnedFd, name: &str) -> io::Result<OwnedFd> {
        let name = CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: the kernel reads a NUL-terminated string.
        let fd = unsafe { ioctl_ptr(group, VFIO_GROUP_GET_DEVICE_FD, name.as_ptr().cast_mut()) }?;
        // SAFETY: on success the ioctl returns a new descriptor that nothing else owns.
        Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
    }

    fn device_get_info(&self, device: &OwnedFd) -> io::Result<DeviceInfo> {
        let mut arg = k::vfio_device_info {
            argsz: argsz::<k::vfio_device_info>(),
            ..Default::default()
        };
        // SAFETY: the kernel reads and writes one vfio_device_info.
        unsafe { ioctl_ptr(device, VFIO_DEVICE_GET_INFO, &mut arg) }?;
        Ok(DeviceInfo {
            flags: arg.flags,
            num_regions: arg.num_regions,
            num_irqs: arg.num_irqs,
        })
    }

    fn device_get_region_info(&self, device: &OwnedFd, index: u32) -> io::Result<RegionInfo> {
        let mut arg = k::vfio_region_info {
            argsz: argsz::<k::vfio_region_info>(),
            index,
            ..Default::default()
        };
        // SAFETY: with argsz = sizeof the kernel writes only the fixed part (capabilities that do
        // not fit are left out and signalled through argsz).
        unsafe { ioctl_ptr(device, VFIO_DEVICE_GET_REGION_INFO, &mut arg) }?;
        Ok(RegionInfo {
            index,
            flags: arg.flags,
            size: arg.size,
            offset: arg.offset,
        })
    }

    fn device_get_irq_info(&self, device: &OwnedFd, index: u32) -> io::Result<IrqInfo> {
        let mut arg = k::vfio_irq_info {
            argsz: argsz::<k::vfio_irq_info>(),
            index,
            ..Default::default()
        };
        // SAFETY: the kernel reads and writes one vfio_irq_info.
        unsafe { ioctl_ptr(device, VFIO_DEVICE_GET_IRQ_INFO, &mut arg) }?;
        Ok(IrqInfo {
            index,
            flags: arg.flags,
            count: arg.count,
        })
    }

    fn device_set_irqs(&self, device: &OwnedFd, set: &IrqSet) -> io::Result<()> {
        let mut bytes = set.to_bytes();
        // SAFETY: `bytes` holds argsz bytes: the header and one int per eventfd.
        unsafe { ioctl_ptr(device, VFIO_DEVICE_SET_IRQS, bytes.as_mut_ptr()) }.map(drop)
    }

    fn device_reset(&self, device: &OwnedFd) -> io::Result<()> {
        // SAFETY: VFIO_DEVICE_RESET takes no argument.
        unsafe { ioctl_val(device, VFIO_DEVICE_RESET, 0) }.map(drop)
    }

    fn device_bind_iommufd(&self, device: &OwnedFd, iommufd: &OwnedFd) -> io::Result<u32> {
        let mut arg = k::vfio_device_bind_iommufd {
            argsz: BIND_IOMMUFD_ARGSZ,
            iommufd: iommufd.as_raw_fd(),
            ..Default::default()
        };
        // SAFETY: the kernel reads the first argsz bytes and writes out_devid, all inside `arg`.
        unsafe { ioctl_ptr(device, VFIO_DEVICE_BIND_IOMMUFD, &mut arg) }?;
        Ok(arg.out_devid)
    }

    fn device_attach_iommufd_pt(&self, device: &OwnedFd, pt_id: u32) -> io::Result<()> {
        let mut arg = k::vfio_device_attach_iommufd_pt {
            argsz: ATTACH_IOMMUFD_PT_ARGSZ,
            pt_id,
            ..Default::default()
        };
        // SAFETY: the kernel reads the first argsz bytes and may write pt_id back, inside `arg`.
        unsafe { ioctl_ptr(device, VFIO_DEVICE_ATTACH_IOMMUFD_PT, &mut arg) }.map(drop)
    }

    fn ioas_alloc(&self, iommufd: &OwnedFd) -> io::Result<u32> {
        let mut arg = IommuIoasAlloc {
            size: argsz::<IommuIoasAlloc>(),
            ..Default::default()
        };
        // SAFETY: the kernel reads and writes one iommu_ioas_alloc.
        unsafe { ioctl_ptr(iommufd, IOMMU_IOAS_ALLOC, &mut arg) }?;
        Ok(arg.out_ioas_id)
    }

    fn ioas_iova_ranges(
        &self,
        iommufd: &OwnedFd,
        ioas_id: u32,
        out: &mut [IovaRange],
    ) -> io::Result<IovaRangesReply> {
        let mut ranges = vec![IommuIovaRange::default(); out.len()];
        let mut arg = IommuIoasIovaRanges {
            size: argsz::<IommuIoasIovaRanges>(),
            ioas_id,
            num_iovas: u32::try_from(out.len()).unwrap_or(u32::MAX),
            allowed_iovas: ranges.as_mut_ptr() as u64,
            ..Default::default()
        };
        // SAFETY: the kernel writes at most num_iovas ranges into `ranges`, which has that many.
        let rc = unsafe { ioctl_ptr(iommufd, IOMMU_IOAS_IOVA_RANGES, &mut arg) };
        match rc {
            Ok(_) => {}
            // Too little room: num_iovas now holds the count needed.
            Err(e) if e.raw_os_error() == Some(libc::EMSGSIZE) => {}
            Err(e) => return Err(e),
        }
        for (dst, src) in out.iter_mut().zip(&ranges).take(arg.num_iovas as usize) {
            *dst = IovaRange {
                start: src.start,
                end: src.last,
            };
        }
        Ok(IovaRangesReply {
            total: arg.num_iovas,
            alignment: arg.out_iova_alignment,
        })
    }

    unsafe fn ioas_map(&self, iommufd: &OwnedFd, map: &IoasMap) -> io::Result<u64> {
        let mut arg = IommuIoasMap {
            size: argsz::<IommuIoasMap>(),
            flags: map.flags,
            ioas_id: map.ioas_id,
            reserved: 0,
            user_va: map.user_va,
            length: map.length,
            iova: map.iova,
        };
        // SAFETY: the kernel reads and writes one iommu_ioas_map; the caller keeps the memory
        // alive while it is mapped.
        unsafe { ioctl_ptr(iommufd, IOMMU_IOAS_MAP, &mut arg) }?;
        Ok(arg.iova)
    }

    fn ioas_map_file(
        &self,
        iommufd: &OwnedFd,
        file: std::os::fd::BorrowedFd<'_>,
        map: &IoasMap,
    ) -> io::Result<u64> {
        let mut arg = IommuIoasMapFile {
            size: argsz::<IommuIoasMapFile>(),
            flags: map.flags,
            ioas_id: map.ioas_id,
            fd: file.as_raw_fd(),
            start: map.user_va,
            length: map.length,
            iova: map.iova,
        };
        // SAFETY: the kernel reads and writes one iommu_ioas_map_file in a live local; it pins
        // the file's pages itself, so no process memory is handed over.
        unsafe { ioctl_ptr(iommufd, IOMMU_IOAS_MAP_FILE, &mut arg) }?;
        Ok(arg.iova)
    }

    fn device_feature_dma_buf(
        &self,
        device: &OwnedFd,
        region_index: u32,
        offset: u64,
        length: u64,
    ) -> io::Result<OwnedFd> {
        let mut arg = DeviceFeatureDmaBuf {
            argsz: argsz::<DeviceFeatureDmaBuf>(),
            flags: VFIO_DEVICE_FEATURE_GET | VFIO_DEVICE_FEATURE_DMA_BUF,
            region_index,
            open_flags: (libc::O_RDWR | libc::O_CLOEXEC) as u32,
            dma_buf_flags: 0,
            nr_ranges: 1,
            range_offset: offset,
            range_length: length,
        };
        // SAFETY: the kernel reads one vfio_device_feature with its dma_buf payload and one
        // range from a live local of exactly `argsz` bytes.
        let fd = unsafe { ioctl_ptr(device, VFIO_DEVICE_FEATURE, &mut arg) }?;
        // SAFETY: on success the request returns a new descriptor that nothing else owns.
        Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
    }

    fn ioas_unmap(
        &self,
        iommufd: &OwnedFd,
        ioas_id: u32,
        iova: u64,
        length: u64,
    ) -> io::Result<u64> {
        let mut arg = IommuIoasUnmap {
            size: argsz::<IommuIoasUnmap>(),
            ioas_id,
            iova,
            length,
        };
        // SAFETY: the kernel reads and writes one iommu_ioas_unmap.
        unsafe { ioctl_ptr(iommufd, IOMMU_IOAS_UNMAP, &mut arg) }?;
        Ok(arg.length)
    }

    fn mmap(&self, fd: &OwnedFd, offset: u64, len: usize) -> io::Result<NonNull<u8>> {
        let length = NonZeroUsize::new(len).ok_or(io::Error::from_raw_os_error(libc::EINVAL))?;
        let offset = libc::off_t::try_from(offset)
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: a new shared mapping chosen by the kernel (no address hint) cannot overlap
        // anything Rust owns.
        let ptr = unsafe {
            nix::sys::mman::mmap(
                None,
                length,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED,
                fd,
                offset,
            )
        }?;
        Ok(ptr.cast())
    }

    unsafe fn munmap(&self, ptr: NonNull<u8>, len: usize) -> io::Result<()> {
        // SAFETY: the caller passes a mapping from `mmap` that nothing uses any more.
        unsafe { nix::sys::mman::munmap(ptr.cast(), len) }.map_err(io::Error::from)
    }

    fn pread(&self, fd: &OwnedFd, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let offset = libc::off_t::try_from(offset)
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`.
        let n = unsafe { libc::pread(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), offset) };
        usize::try_from(n).map_err(|_| io::Error::last_os_error())
    }

    fn pwrite(&self, fd: &OwnedFd, offset: u64, data: &[u8]) -> io::Result<usize> {
        let offset = libc::off_t::try_from(offset)
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: the kernel reads at most `data.len()` bytes from `data`.
        let n = unsafe { libc::pwrite(fd.as_raw_fd(), data.as_ptr().cast(), data.len(), offset) };
        usize::try_from(n).map_err(|_| io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_numbers_match_the_uapi_headers() {
        // _IO(';', n) with ';' = 0x3b: VFIO_BASE is 100 (0x64), iommufd commands start at 0x80.
        assert_eq!(VFIO_GET_API_VERSION, 0x3b64);
        assert_eq!(VFIO_CHECK_EXTENSION, 0x3b65);
        assert_eq!(VFIO_SET_IOMMU, 0x3b66);
        assert_eq!(VFIO_GROUP_GET_STATUS, 0x3b67);
        assert_eq!(VFIO_GROUP_SET_CONTAINER, 0x3b68);
        assert_eq!(VFIO_GROUP_GET_DEVICE_FD, 0x3b6a);
        assert_eq!(VFIO_DEVICE_GET_INFO, 0x3b6b);
        assert_eq!(VFIO_DEVICE_GET_REGION_INFO, 0x3b6c);
        assert_eq!(VFIO_DEVICE_GET_IRQ_INFO, 0x3b6d);
        assert_eq!(VFIO_DEVICE_SET_IRQS, 0x3b6e);
        assert_eq!(VFIO_DEVICE_RESET, 0x3b6f);
        assert_eq!(VFIO_IOMMU_GET_INFO, 0x3b70);
        assert_eq!(VFIO_IOMMU_MAP_DMA, 0x3b71);
        assert_eq!(VFIO_IOMMU_UNMAP_DMA, 0x3b72);
        assert_eq!(VFIO_DEVICE_BIND_IOMMUFD, 0x3b76);
        assert_eq!(VFIO_DEVICE_ATTACH_IOMMUFD_PT, 0x3b77);
        assert_eq!(IOMMU_IOAS_ALLOC, 0x3b81);
        assert_eq!(IOMMU_IOAS_IOVA_RANGES, 0x3b84);
        assert_eq!(IOMMU_IOAS_MAP, 0x3b85);
        assert_eq!(IOMMU_IOAS_UNMAP, 0x3b86);
    }
}
