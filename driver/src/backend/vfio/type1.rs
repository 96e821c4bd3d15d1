//! The VFIO container/group path (`/dev/vfio/vfio` + `/dev/vfio/N`) with the type1 IOMMU driver,
//! and the container object that maps DMA memory through `VFIO_IOMMU_MAP_DMA`.

use std::io;
use std::mem::size_of;
use std::path::Path;
use std::sync::Arc;

use cxdirect_dma::{Iommu, IommuError, IovaRange};
use vfio_bindings::bindings::vfio as k;

use super::error::{open_node, VfioError};
use super::pci::{blocking_members, PciAddress};
use super::sys::{DmaMap, VfioSys, VFIO_CONTAINER_PATH};
use super::IommuKind;

/// Largest `VFIO_IOMMU_GET_INFO` answer accepted (a few hundred ranges at most in practice).
const MAX_INFO_LEN: usize = 1 << 20;

/// Where IOVAs may go when the kernel is too old (before 5.4) to report its ranges: the low
/// 39 bits (512 GiB), the narrowest address width of current x86 IOMMUs, without the x86
/// interrupt window at 0xfee00000 where device writes become MSIs.
const FALLBACK_RANGES: [IovaRange; 2] = [
    IovaRange {
        start: 0,
        end: 0xfedf_ffff,
    },
    IovaRange {
        start: 0xfef0_0000,
        end: (1 << 39) - 1,
    },
];

/// A VFIO container with one group attached and the type1 IOMMU set: what DMA memory is
/// mapped through. It keeps the group open, so mappings live as long as this object does.
pub(crate) struct Type1Container<S: VfioSys> {
    sys: Arc<S>,
    container: S::Fd,
    /// Held so the group stays attached (and the mappings alive) while the object lives.
    _group: S::Fd,
    ranges: Vec<IovaRange>,
}

/// A freshly opened type1 function: its container, its device file, which type1 flavour.
pub(crate) struct Type1Open<S: VfioSys> {
    pub container: Arc<Type1Container<S>>,
    pub device: S::Fd,
    pub kind: IommuKind,
    pub ranges: Vec<IovaRange>,
}

/// Opens `/dev/vfio/vfio` and checks the VFIO API version.
pub(crate) fn open_container<S: VfioSys>(sys: &S, bdf: PciAddress) -> Result<S::Fd, VfioError> {
    let container = open_node(sys, bdf, Path::new(VFIO_CONTAINER_PATH))?;
    let version = sys
        .get_api_version(&container)
        .map_err(|e| VfioError::os(bdf, "VFIO_GET_API_VERSION", e))?;
    if version != k::VFIO_API_VERSION as i32 {
        return Err(VfioError::UnsupportedApi {
            bdf,
            reason: format!(
                "the kernel speaks VFIO API version {version}, this driver version {}",
                k::VFIO_API_VERSION
            ),
        });
    }
    Ok(container)
}

/// Opens group node `path`, checks the group is viable and attaches it to `container`.
pub(crate) fn attach_group<S: VfioSys>(
    sys: &S,
    bdf: PciAddress,
    group: &str,
    path: &Path,
    container: &S::Fd,
) -> Result<S::Fd, VfioError> {
    let group_fd = open_node(sys, bdf, path)?;
    let flags = sys
        .group_get_status(&group_fd)
        .map_err(|e| VfioError::os(bdf, "VFIO_GROUP_GET_STATUS", e))?;
    if flags & k::VFIO_GROUP_FLAGS_VIABLE == 0 {
        let others = blocking_members(sys, bdf, group);
        return Err(VfioError::GroupNotViable {
            bdf,
            group: group.to_string(),
            others,
        });
    }
    sys.group_set_container(&group_fd, container).map_err(|e| {
        if e.raw_os_error() == Some(libc::EBUSY) {
            VfioError::Busy {
                bdf,
                path: path.display().to_string(),
            }
        } else {
            VfioError::os(bdf, "VFIO_GROUP_SET_CONTAINER", e)
        }
    })?;
    Ok(group_fd)
}

/// Gets the device file of `bdf` from its group.
pub(crate) fn group_device<S: VfioSys>(
    sys: &S,
    bdf: PciAddress,
    group: &S::Fd,
    group_path: &Path,
) -> Result<S::Fd, VfioError> {
    sys.group_get_device_fd(group, &bdf.to_string())
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::EBUSY) {
                VfioError::Busy {
                    bdf,
                    path: group_path.display().to_string(),
                }
            } else {
                VfioError::os(bdf, "VFIO_GROUP_GET_DEVICE_FD", e)
            }
        })
}

/// The type1 sequence: container, API version, IOMMU type, group, viability, container set,
/// IOMMU set, IOVA ranges, device file.
pub(crate) fn open_type1<S: VfioSys>(
    sys: &Arc<S>,
    bdf: PciAddress,
    group: &str,
) -> Result<Type1Open<S>, VfioError> {
    let container = open_container(&**sys, bdf)?;
    let (iommu_type, kind) = if has_extension(&**sys, bdf, &container, k::VFIO_TYPE1v2_IOMMU)? {
        (k::VFIO_TYPE1v2_IOMMU, IommuKind::Type1v2)
    } else if has_extension(&**sys, bdf, &container, k::VFIO_TYPE1_IOMMU)? {
        (k::VFIO_TYPE1_IOMMU, IommuKind::Type1)
    } else {
        return Err(VfioError::UnsupportedApi {
            bdf,
            reason: "the VFIO container offers neither the type1v2 nor the type1 IOMMU driver \
                     (modprobe vfio_iommu_type1)"
                .to_string(),
        });
    };
    let group_path = Path::new("/dev/vfio").join(group);
    let group_fd = attach_group(&**sys, bdf, group, &group_path, &container)?;
    sys.set_iommu(&container, iommu_type).map_err(|e| {
        if e.raw_os_error() == Some(libc::EPERM) {
            VfioError::os_hint(
                bdf,
                "VFIO_SET_IOMMU",
                e,
                "the IOMMU may lack interrupt remapping; if you trust the devices, load \
                 vfio_iommu_type1 with allow_unsafe_interrupts=1",
            )
        } else {
            VfioError::os(bdf, "VFIO_SET_IOMMU", e)
        }
    })?;
    let ranges = iova_ranges(&**sys, bdf, &container)?;
    let device = group_device(&**sys, bdf, &group_fd, &group_path)?;
    let container = Arc::new(Type1Container {
        sys: Arc::clone(sys),
        container,
        _group: group_fd,
        ranges: ranges.clone(),
    });
    Ok(Type1Open {
        container,
        device,
        kind,
        ranges,
    })
}

fn has_extension<S: VfioSys>(
    sys: &S,
    bdf: PciAddress,
    container: &S::Fd,
    ext: u32,
) -> Result<bool, VfioError> {
    sys.check_extension(container, ext)
        .map_err(|e| VfioError::os(bdf, "VFIO_CHECK_EXTENSION", e))
}

/// `VFIO_IOMMU_GET_INFO`, asked again with more room when the capability chain does not fit.
fn iova_ranges<S: VfioSys>(
    sys: &S,
    bdf: PciAddress,
    container: &S::Fd,
) -> Result<Vec<IovaRange>, VfioError> {
    let mut len = size_of::<k::vfio_iommu_type1_info>();
    for _ in 0..4 {
        let mut buf = vec![0u8; len];
        sys.iommu_get_info(container, &mut buf)
            .map_err(|e| VfioError::os(bdf, "VFIO_IOMMU_GET_INFO", e))?;
        let want = read_u32(&buf, 0).unwrap_or(0) as usize;
        if want > len && want <= MAX_INFO_LEN {
            len = want;
            continue;
        }
        let info = parse_type1_info(&buf).map_err(|reason| VfioError::UnsupportedApi {
            bdf,
            reason: format!("malformed VFIO_IOMMU_GET_INFO answer: {reason}"),
        })?;
        return match info {
            Some(ranges) if ranges.is_empty() => Err(VfioError::UnsupportedApi {
                bdf,
                reason: "the IOMMU reports no usable IOVA range".to_string(),
            }),
            Some(ranges) => Ok(ranges),
            None => Ok(FALLBACK_RANGES.to_vec()),
        };
    }
    Err(VfioError::UnsupportedApi {
        bdf,
        reason: "VFIO_IOMMU_GET_INFO keeps asking for a larger buffer".to_string(),
    })
}

fn read_u16(buf: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(
        buf.get(at..at.checked_add(2)?)?.try_into().ok()?,
    ))
}

fn read_u32(buf: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(
        buf.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

fn read_u64(buf: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(
        buf.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

/// Parses a `VFIO_IOMMU_GET_INFO` answer: `Some(ranges)` from the IOVA-range capability, `None`
/// when the kernel attached no such capability. Offsets come from the kernel and are checked
/// before use: a chain that points outside the answer or backwards is an error.
fn parse_type1_info(buf: &[u8]) -> Result<Option<Vec<IovaRange>>, String> {
    let header = size_of::<k::vfio_iommu_type1_info>();
    if buf.len() < header {
        return Err(format!(
            "{} bytes, shorter than the {header}-byte header",
            buf.len()
        ));
    }
    let flags = read_u32(buf, 4).unwrap_or(0);
    let mut offset = read_u32(buf, 16).unwrap_or(0) as usize;
    if flags & k::VFIO_IOMMU_INFO_CAPS == 0 || offset == 0 {
        return Ok(None);
    }
    for _ in 0..64 {
        let cap_header = size_of::<k::vfio_info_cap_header>();
        if offset < header
            || offset
                .checked_add(cap_header)
                .is_none_or(|end| end > buf.len())
        {
            return Err(format!(
                "capability at offset {offset} lies outside the {}-byte answer",
                buf.len()
            ));
        }
        let id = read_u16(buf, offset).unwrap_or(0);
        let next = read_u32(buf, offset + 4).unwrap_or(0) as usize;
        if u32::from(id) == k::VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE {
            return parse_iova_cap(buf, offset).map(Some);
        }
        if next == 0 {
            return Ok(None);
        }
        if next <= offset {
            return Err(format!(
                "capability chain goes back from offset {offset} to {next}"
            ));
        }
        offset = next;
    }
    Err("capability chain longer than 64 entries".to_string())
}

/// The `vfio_iommu_type1_info_cap_iova_range` at `offset`: header, `nr_iovas`, reserved, then
/// `nr_iovas` pairs of inclusive `[start, end]`.
fn parse_iova_cap(buf: &[u8], offset: usize) -> Result<Vec<IovaRange>, String> {
    let fixed = size_of::<k::vfio_iommu_type1_info_cap_iova_range>();
    let count = read_u32(buf, offset + 8)
        .ok_or_else(|| format!("IOVA range capability at {offset} is cut short"))?
        as usize;
    let entry = size_of::<k::vfio_iova_range>();
    let end = count
        .checked_mul(entry)
        .and_then(|n| n.checked_add(fixed))
        .and_then(|n| n.checked_add(offset));
    if end.is_none_or(|end| end > buf.len()) {
        return Err(format!(
            "IOVA range capability at {offset} claims {count} ranges, more than the answer holds"
        ));
    }
    (0..count)
        .map(|i| {
            let at = offset + fixed + i * entry;
            let start = read_u64(buf, at).unwrap_or(0);
            let end = read_u64(buf, at + 8).unwrap_or(0);
            if start > end {
                Err(format!(
                    "IOVA range {i} runs backwards ({start:#x} > {end:#x})"
                ))
            } else {
                Ok(IovaRange { start, end })
            }
        })
        .collect()
}

/// Refuses a mapping of no bytes, which the kernel would refuse less clearly.
pub(crate) fn refuse_empty(iova: u64, len: usize) -> Result<(), IommuError> {
    if len == 0 {
        return Err(IommuError::MapRefused {
            iova,
            len: 0,
            reason: "zero length".into(),
        });
    }
    Ok(())
}

/// What the kernel's answer to unmapping `len` bytes at `iova` (the bytes it unmapped) means:
/// anything short of the whole range is a refusal.
pub(crate) fn unmap_outcome(
    iova: u64,
    len: usize,
    done: io::Result<u64>,
) -> Result<(), IommuError> {
    let want = len as u64;
    match done {
        Ok(done) if done == want => Ok(()),
        Ok(done) => Err(IommuError::UnmapRefused {
            iova,
            len: want,
            reason: format!(
                "only {done:#x} bytes were mapped there (nothing in the range is reachable \
                     by the device any more)"
            ),
        }),
        Err(e) => Err(IommuError::UnmapRefused {
            iova,
            len: want,
            reason: e.to_string(),
        }),
    }
}

/// How a refused mapping reads to the user.
pub(crate) fn map_error(iova: u64, len: usize, e: io::Error) -> IommuError {
    let len = len as u64;
    match e.raw_os_error() {
        Some(libc::ENOMEM) => IommuError::MemlockLimit { len },
        Some(libc::EEXIST) => IommuError::MapRefused {
            iova,
            len,
            reason: "the range overlaps an existing mapping".into(),
        },
        Some(libc::ENOSPC) => IommuError::MapRefused {
            iova,
            len,
            reason: "too many mappings (raise vfio_iommu_type1's dma_entry_limit, or map larger \
                     regions)"
                .into(),
        },
        _ => IommuError::MapRefused {
            iova,
            len,
            reason: e.to_string(),
        },
    }
}

// SAFETY: `map` asks the kernel's type1 driver to map exactly `[host, host + len)` at `iova`,
// and `unmap` returns `Ok` only when the kernel reports the whole range unmapped, after which
// the IOMMU no longer translates it. The group stays attached while this object lives, so the
// kernel does not drop mappings behind the allocator's back.
unsafe impl<S: VfioSys> Iommu for Type1Container<S> {
    fn iova_ranges(&self) -> Vec<IovaRange> {
        self.ranges.clone()
    }

    unsafe fn map(&self, iova: u64, host: *mut u8, len: usize) -> Result<(), IommuError> {
        refuse_empty(iova, len)?;
        let map = DmaMap {
            vaddr: host as u64,
            iova,
            size: len as u64,
            flags: k::VFIO_DMA_MAP_FLAG_READ | k::VFIO_DMA_MAP_FLAG_WRITE,
        };
        // SAFETY: the caller keeps `[host, host + len)` allocated until `unmap` succeeds, as
        // `Iommu::map` requires.
        unsafe { self.sys.map_dma(&self.container, &map) }.map_err(|e| map_error(iova, len, e))
    }

    fn unmap(&self, iova: u64, len: usize) -> Result<(), IommuError> {
        unmap_outcome(
            iova,
            len,
            self.sys.unmap_dma(&self.container, iova, len as u64),
        )
    }
}
