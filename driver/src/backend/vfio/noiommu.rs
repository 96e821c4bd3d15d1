//! VFIO no-IOMMU mode: the function is reached through a `vfio-noiommu` group and sees host
//! physical addresses, which are read from `/proc/self/pagemap`. Nothing protects the host
//! from the device, so this mode is used only when asked for by name.

use std::path::Path;
use std::sync::Arc;

use cxdirect_dma::{Iommu, IommuError, IovaRange};
use vfio_bindings::bindings::vfio as k;

use super::error::VfioError;
use super::pci::{is_noiommu_group, PciAddress};
use super::sys::{Access, VfioSys, NOIOMMU_PARAM_PATH, PAGEMAP_PATH};
use super::type1::{attach_group, group_device, open_container};

/// Pagemap entry: page present.
const PM_PRESENT: u64 = 1 << 63;
/// Pagemap entry: page frame number (bits 0-54).
const PM_PFN_MASK: u64 = (1 << 55) - 1;
/// Longest range translated at once (pagemap entries read: 8 bytes per page).
const MAX_PAGES: u64 = 1 << 20;

/// The no-IOMMU "IOMMU": translations are physical addresses.
pub(crate) struct NoIommuMap<S: VfioSys> {
    sys: Arc<S>,
    pagemap: S::Fd,
    page_size: u64,
    /// Held so the container and group stay set up while the object lives.
    _container: S::Fd,
    _group: S::Fd,
}

/// A freshly opened no-IOMMU function.
pub(crate) struct NoIommuOpen<S: VfioSys> {
    pub map: Arc<NoIommuMap<S>>,
    pub device: S::Fd,
}

/// Refuses unless the kernel allows no-IOMMU mode and the function sits in a no-IOMMU group.
pub(crate) fn check_allowed<S: VfioSys>(
    sys: &S,
    bdf: PciAddress,
    group: Option<&str>,
) -> Result<String, VfioError> {
    let refuse = |reason: String| VfioError::NoIommuUnavailable { bdf, reason };
    match sys.read_to_string(Path::new(NOIOMMU_PARAM_PATH)) {
        Ok(v) if matches!(v.trim(), "Y" | "y" | "1") => {}
        Ok(_) => {
            return Err(refuse(format!(
                "the vfio module does not allow it: run `echo 1 > {NOIOMMU_PARAM_PATH}` (or load \
                 vfio with enable_unsafe_noiommu_mode=1), then rebind {bdf} to vfio-pci"
            )))
        }
        Err(_) => {
            return Err(refuse(
                "this kernel has no VFIO no-IOMMU support (CONFIG_VFIO_NOIOMMU is off, or the \
                 vfio module is not loaded)"
                    .to_string(),
            ))
        }
    }
    let Some(group) = group else {
        return Err(refuse(format!(
            "{bdf} has no VFIO group yet: unbind it and bind it to vfio-pci again now that \
             no-IOMMU mode is enabled"
        )));
    };
    if !is_noiommu_group(sys, group) {
        return Err(refuse(format!(
            "{bdf} sits behind a real IOMMU (group {group}); use --iommu-mode auto or type1, \
             which keep the host safe"
        )));
    }
    Ok(group.to_string())
}

/// Says, loudly, what no-IOMMU mode means.
pub(crate) fn warn(bdf: PciAddress) {
    eprintln!(
        "cxdirect: WARNING: {bdf} is being used in VFIO no-IOMMU mode. Nothing stops this device \
         from reading or writing ANY host memory: a driver bug or a misbehaving device can \
         corrupt the kernel or other programs, and the kernel is now tainted. Use this only on a \
         dedicated host you trust."
    );
}

/// The no-IOMMU sequence: container, the no-IOMMU type, group `noiommu-N`, device file, page map.
pub(crate) fn open_noiommu<S: VfioSys>(
    sys: &Arc<S>,
    bdf: PciAddress,
    group: &str,
) -> Result<NoIommuOpen<S>, VfioError> {
    let container = open_container(&**sys, bdf)?;
    let supported = sys
        .check_extension(&container, k::VFIO_NOIOMMU_IOMMU)
        .map_err(|e| VfioError::os(bdf, "VFIO_CHECK_EXTENSION", e))?;
    if !supported {
        return Err(VfioError::NoIommuUnavailable {
            bdf,
            reason: "the VFIO container does not offer the no-IOMMU driver".to_string(),
        });
    }
    let group_path = Path::new("/dev/vfio").join(format!("noiommu-{group}"));
    let group_fd = attach_group(&**sys, bdf, group, &group_path, &container)?;
    sys.set_iommu(&container, k::VFIO_NOIOMMU_IOMMU)
        .map_err(|e| VfioError::os(bdf, "VFIO_SET_IOMMU", e))?;
    let device = group_device(&**sys, bdf, &group_fd, &group_path)?;
    let pagemap = sys
        .open(Path::new(PAGEMAP_PATH), Access::ReadOnly)
        .map_err(|e| VfioError::os(bdf, format!("open {PAGEMAP_PATH}"), e))?;
    let map = Arc::new(NoIommuMap {
        page_size: sys.page_size() as u64,
        sys: Arc::clone(sys),
        pagemap,
        _container: container,
        _group: group_fd,
    });
    Ok(NoIommuOpen { map, device })
}

impl<S: VfioSys> NoIommuMap<S> {
    /// The physical address of `[host, host + len)`, which must be present and physically
    /// contiguous.
    fn physical(&self, host: *mut u8, len: usize) -> Result<u64, IommuError> {
        let addr = host as usize;
        let fail = |reason: String| IommuError::NoPhysicalAddress { addr, reason };
        let ps = self.page_size.max(1);
        let va = addr as u64;
        if len == 0 {
            return Err(fail("zero length".to_string()));
        }
        let last = va
            .checked_add(len as u64 - 1)
            .ok_or_else(|| fail("the range wraps around the address space".to_string()))?;
        let (first_page, last_page) = (va / ps, last / ps);
        let pages = last_page - first_page + 1;
        if pages > MAX_PAGES {
            return Err(fail(format!(
                "{pages} pages at once is too many to translate"
            )));
        }
        let mut raw = vec![0u8; pages as usize * 8];
        let read = self
            .sys
            .pread(&self.pagemap, first_page * 8, &mut raw)
            .map_err(|e| fail(format!("reading {PAGEMAP_PATH}: {e}")))?;
        if read != raw.len() {
            return Err(fail(format!(
                "{PAGEMAP_PATH} answered {read} of {} bytes",
                raw.len()
            )));
        }
        let mut first_pfn = 0;
        for (i, chunk) in raw.chunks_exact(8).enumerate() {
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(chunk);
            let entry = u64::from_ne_bytes(bytes);
            let pfn = entry & PM_PFN_MASK;
            if entry & PM_PRESENT == 0 {
                return Err(fail(format!(
                    "page {i} of the range is not in memory (DMA memory must be locked)"
                )));
            }
            if pfn == 0 {
                return Err(fail("the kernel hides page frame numbers".to_string()));
            }
            if i == 0 {
                first_pfn = pfn;
            } else if pfn != first_pfn + i as u64 {
                return Err(fail(format!(
                    "the range is not physically contiguous (page {i} jumps away); use \
                     hugepage-backed DMA memory in no-IOMMU mode"
                )));
            }
        }
        first_pfn
            .checked_mul(ps)
            .and_then(|base| base.checked_add(va % ps))
            .ok_or_else(|| fail(format!("page frame {first_pfn:#x} is out of range")))
    }
}

// SAFETY: without an IOMMU nothing can make memory reachable or unreachable: the device sees
// all of physical memory all the time. That breaks the promise `unmap` is meant to keep, which
// is why this mode exists only when the user names it (`IommuMode::NoIommu`), after a loud
// warning. Within that, a correct driver tells the device about memory only between `map` and
// `unmap`, and `identity_iova` hands it the true physical address of locked, contiguous memory.
unsafe impl<S: VfioSys> Iommu for NoIommuMap<S> {
    fn iova_ranges(&self) -> Vec<IovaRange> {
        vec![IovaRange {
            start: 0,
            end: u64::MAX,
        }]
    }

    unsafe fn map(&self, iova: u64, host: *mut u8, len: usize) -> Result<(), IommuError> {
        let phys = self.physical(host, len)?;
        if phys != iova {
            return Err(IommuError::MapRefused {
                iova,
                len: len as u64,
                reason: format!(
                    "no-IOMMU mode cannot translate: the memory is at physical address {phys:#x}"
                ),
            });
        }
        Ok(())
    }

    fn unmap(&self, _iova: u64, _len: usize) -> Result<(), IommuError> {
        Ok(())
    }

    fn identity_iova(&self, host: *mut u8, len: usize) -> Option<Result<u64, IommuError>> {
        Some(self.physical(host, len))
    }
}
