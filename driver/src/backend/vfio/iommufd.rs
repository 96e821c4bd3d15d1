//! The iommufd path (`/dev/iommu` + `/dev/vfio/devices/vfioN`): the device cdev is bound to an
//! iommufd, attached to a fresh IO address space (IOAS), and DMA memory is mapped with
//! `IOMMU_IOAS_MAP`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cxdirect_dma::{Iommu, IommuError, IovaRange};

use super::error::{open_node, VfioError};
use super::pci::{blocking_members, PciAddress};
use super::sys::{
    IoasMap, VfioSys, IOMMUFD_PATH, IOMMU_IOAS_MAP_FIXED_IOVA, IOMMU_IOAS_MAP_READABLE,
    IOMMU_IOAS_MAP_WRITEABLE,
};
use super::type1::{map_error, refuse_empty, unmap_outcome};

/// What an errno of `IOMMU_IOAS_MAP_FILE` means, and what to do.
pub(crate) fn map_file_hint(errno: i32) -> &'static str {
    match errno {
        libc::EINVAL => {
            "this kernel cannot map that kind of file: it takes memfds and hugetlbfs files (Linux \
             6.13) and, from Linux 6.19, dmabufs whose exporter gives iommufd their physical \
             ranges (vfio-pci's); attach another exporter through its backing memfd, or use a \
             memfd source"
        }
        libc::EOPNOTSUPP | libc::ENODEV => {
            "the dmabuf's exporter does not let iommufd map it (from Linux 6.19 only vfio-pci's \
             dmabufs are taken), or it was revoked; use a memfd source or a vfio-bar source"
        }
        libc::ENOMEM => "the pinned-memory limit is too low: raise it with `ulimit -l unlimited`",
        _ => "the kernel maps memfds and hugetlbfs files, and dmabufs only from exporters iommufd supports",
    }
}

/// Most IOVA ranges accepted from the kernel.
const MAX_RANGES: usize = 4096;

/// An iommufd with one IO address space the function is attached to.
pub(crate) struct IommufdIoas<S: VfioSys> {
    sys: Arc<S>,
    iommufd: S::Fd,
    ioas_id: u32,
    ranges: Vec<IovaRange>,
}

/// A freshly opened iommufd function.
pub(crate) struct IommufdOpen<S: VfioSys> {
    pub ioas: Arc<IommufdIoas<S>>,
    pub device: S::Fd,
    pub ranges: Vec<IovaRange>,
}

/// Why iommufd cannot be used for `bdf`, or the path of its device cdev.
pub(crate) fn cdev_path<S: VfioSys>(sys: &S, bdf: PciAddress) -> Result<PathBuf, String> {
    if !sys.exists(Path::new(IOMMUFD_PATH)) {
        return Err(format!(
            "this kernel has no {IOMMUFD_PATH} (built without CONFIG_IOMMUFD, or the iommufd \
             module is not loaded: modprobe iommufd)"
        ));
    }
    let dir = bdf.sysfs_path().join("vfio-dev");
    let name = sys
        .read_dir(&dir)
        .ok()
        .and_then(|names| names.into_iter().find(|n| n.starts_with("vfio")))
        .ok_or_else(|| {
            format!(
                "{bdf} has no VFIO device node ({} is missing or empty: the kernel lacks \
                 CONFIG_VFIO_DEVICE_CDEV)",
                dir.display()
            )
        })?;
    let node = Path::new("/dev/vfio/devices").join(&name);
    if !sys.exists(&node) {
        return Err(format!(
            "{} does not exist (is udev running?)",
            node.display()
        ));
    }
    Ok(node)
}

/// The iommufd sequence: open iommufd and the cdev, bind, allocate an IOAS, attach, read the
/// IOVA ranges.
pub(crate) fn open_iommufd<S: VfioSys>(
    sys: &Arc<S>,
    bdf: PciAddress,
    group: &str,
    cdev: &Path,
) -> Result<IommufdOpen<S>, VfioError> {
    let iommufd = open_node(&**sys, bdf, Path::new(IOMMUFD_PATH))?;
    let device = open_node(&**sys, bdf, cdev)?;
    sys.device_bind_iommufd(&device, &iommufd).map_err(|e| {
        let others = blocking_members(&**sys, bdf, group);
        if others.iter().any(|m| m.driver.is_some()) {
            VfioError::GroupNotViable {
                bdf,
                group: group.to_string(),
                others,
            }
        } else if e.raw_os_error() == Some(libc::EBUSY) {
            VfioError::Busy {
                bdf,
                path: cdev.display().to_string(),
            }
        } else {
            VfioError::os(bdf, "VFIO_DEVICE_BIND_IOMMUFD", e)
        }
    })?;
    let ioas_id = sys
        .ioas_alloc(&iommufd)
        .map_err(|e| VfioError::os(bdf, "IOMMU_IOAS_ALLOC", e))?;
    sys.device_attach_iommufd_pt(&device, ioas_id)
        .map_err(|e| VfioError::os(bdf, "VFIO_DEVICE_ATTACH_IOMMUFD_PT", e))?;
    let ranges = ioas_ranges(&**sys, bdf, &iommufd, ioas_id)?;
    let ioas = Arc::new(IommufdIoas {
        sys: Arc::clone(sys),
        iommufd,
        ioas_id,
        ranges: ranges.clone(),
    });
    Ok(IommufdOpen {
        ioas,
        device,
        ranges,
    })
}

/// `IOMMU_IOAS_IOVA_RANGES`, asked again with more room when the ranges do not fit.
fn ioas_ranges<S: VfioSys>(
    sys: &S,
    bdf: PciAddress,
    iommufd: &S::Fd,
    ioas_id: u32,
) -> Result<Vec<IovaRange>, VfioError> {
    let mut room = 8;
    for _ in 0..4 {
        let mut out = vec![IovaRange { start: 0, end: 0 }; room];
        let reply = sys
            .ioas_iova_ranges(iommufd, ioas_id, &mut out)
            .map_err(|e| VfioError::os(bdf, "IOMMU_IOAS_IOVA_RANGES", e))?;
        let total = reply.total as usize;
        if total > MAX_RANGES {
            break;
        }
        if total > room {
            room = total;
            continue;
        }
        out.truncate(total);
        if let Some((i, r)) = out.iter().enumerate().find(|(_, r)| r.start > r.end) {
            return Err(VfioError::UnsupportedApi {
                bdf,
                reason: format!(
                    "IOVA range {i} runs backwards ({:#x} > {:#x})",
                    r.start, r.end
                ),
            });
        }
        if out.is_empty() {
            return Err(VfioError::UnsupportedApi {
                bdf,
                reason: "the IO address space has no usable IOVA range".to_string(),
            });
        }
        return Ok(out);
    }
    Err(VfioError::UnsupportedApi {
        bdf,
        reason: "IOMMU_IOAS_IOVA_RANGES reports an implausible number of ranges".to_string(),
    })
}

impl<S: VfioSys> IommufdIoas<S> {
    /// The kernel mapped `len` bytes at `at` rather than the fixed `iova` asked for: cannot
    /// happen with FIXED_IOVA; undoes it rather than leave a stray mapping, and says so.
    fn undo_misplaced(&self, iova: u64, len: usize, at: u64) -> IommuError {
        let _ = self
            .sys
            .ioas_unmap(&self.iommufd, self.ioas_id, at, len as u64);
        IommuError::MapRefused {
            iova,
            len: len as u64,
            reason: format!("the kernel mapped at {at:#x} instead"),
        }
    }
}

// SAFETY: `map` asks iommufd to map exactly `[host, host + len)` at the fixed IOVA `iova`, and
// `unmap` returns `Ok` only when the kernel reports the whole range unmapped, after which the
// IOMMU no longer translates it. The IOAS lives as long as this object holds the iommufd open.
unsafe impl<S: VfioSys> Iommu for IommufdIoas<S> {
    fn iova_ranges(&self) -> Vec<IovaRange> {
        self.ranges.clone()
    }

    unsafe fn map(&self, iova: u64, host: *mut u8, len: usize) -> Result<(), IommuError> {
        refuse_empty(iova, len)?;
        let map = IoasMap {
            ioas_id: self.ioas_id,
            flags: IOMMU_IOAS_MAP_FIXED_IOVA | IOMMU_IOAS_MAP_READABLE | IOMMU_IOAS_MAP_WRITEABLE,
            user_va: host as u64,
            length: len as u64,
            iova,
        };
        // SAFETY: the caller keeps `[host, host + len)` allocated until `unmap` succeeds, as
        // `Iommu::map` requires.
        match unsafe { self.sys.ioas_map(&self.iommufd, &map) } {
            Ok(at) if at == iova => Ok(()),
            Ok(at) => Err(self.undo_misplaced(iova, len, at)),
            Err(e) => Err(map_error(iova, len, e)),
        }
    }

    fn map_file(
        &self,
        iova: u64,
        fd: std::os::fd::BorrowedFd<'_>,
        offset: u64,
        len: usize,
    ) -> Result<(), IommuError> {
        let map = IoasMap {
            ioas_id: self.ioas_id,
            flags: IOMMU_IOAS_MAP_FIXED_IOVA | IOMMU_IOAS_MAP_READABLE | IOMMU_IOAS_MAP_WRITEABLE,
            user_va: offset,
            length: len as u64,
            iova,
        };
        match self.sys.ioas_map_file(&self.iommufd, fd, &map) {
            Ok(at) if at == iova => Ok(()),
            Ok(at) => Err(self.undo_misplaced(iova, len, at)),
            Err(e) if e.raw_os_error() == Some(libc::ENOTTY) => {
                Err(IommuError::FileMapUnsupported {
                    reason: "this kernel has no IOMMU_IOAS_MAP_FILE (added in Linux 6.13)".into(),
                })
            }
            Err(e) => Err(IommuError::FileMapUnsupported {
                reason: format!(
                    "IOMMU_IOAS_MAP_FILE refused the descriptor: {e}: {}",
                    map_file_hint(e.raw_os_error().unwrap_or(0))
                ),
            }),
        }
    }

    fn unmap(&self, iova: u64, len: usize) -> Result<(), IommuError> {
        unmap_outcome(
            iova,
            len,
            self.sys
                .ioas_unmap(&self.iommufd, self.ioas_id, iova, len as u64),
        )
    }
}
