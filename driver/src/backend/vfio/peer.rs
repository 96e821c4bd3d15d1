//! [`PeerBar`]: memory another PCI device exposes in one of its BARs (a GPU's frame buffer, an
//! NVMe controller memory buffer, QEMU's `ivshmem-plain`), opened through vfio-pci so the NIC
//! can write into it peer to peer.
//!
//! The function is opened the way the NIC is (its own type1 container, or its own iommufd), the
//! BAR is checked to be memory that can be mapped, and vfio-pci exports the range as a dmabuf
//! (`VFIO_DEVICE_FEATURE_DMA_BUF`, Linux 6.19). The NIC's IOMMU is then given the range either
//! by descriptor (iommufd's `IOMMU_IOAS_MAP_FILE` takes vfio-pci dmabufs) or through the BAR's
//! mapping in this process ([`PeerBar::bar_file`]: VFIO type1 maps the `VM_PFNMAP` mapping of
//! MMIO, as it does for virtual machines' peer-to-peer).

use std::fmt;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use cxdirect_dma::Iommu;
use thiserror::Error;
use vfio_bindings::bindings::vfio as k;

use super::error::VfioError;
use super::pci::{check_vfio_function, is_noiommu_group, PciAddress};
use super::sys::{RegionInfo, VfioSys};
use super::{iommufd, type1, IommuMode, RealSys};

/// PCI config-space offset of BAR0; BAR `n` is the 32-bit register at `0x10 + 4 n`.
const PCI_BASE_ADDRESS_0: u64 = 0x10;
/// Bit 0 of a BAR register: set for an I/O port BAR.
const PCI_BASE_ADDRESS_SPACE_IO: u32 = 1;
/// vfio-pci's BAR regions are indexes 0 to 5.
const MAX_BAR: u32 = 5;

/// Why a peer device's BAR cannot serve as receive memory. Every message says what to do.
#[derive(Debug, Error)]
pub enum PeerBarError {
    /// Opening the function through VFIO failed.
    #[error("peer device: {0}")]
    Vfio(#[from] VfioError),
    /// The BAR number is not one vfio-pci knows.
    #[error("{bdf}: there is no BAR {bar}; a PCI function has BARs 0 to 5 (`lspci -v -s {bdf}` lists them)")]
    NoSuchBar {
        /// The function.
        bdf: PciAddress,
        /// The BAR asked for.
        bar: u32,
    },
    /// The BAR is not memory the NIC can write into.
    #[error("{bdf}: BAR {bar} {why}; choose a memory BAR (`lspci -v -s {bdf}` shows them as \"Memory at\"; for ivshmem-plain it is BAR 2)")]
    NotMemory {
        /// The function.
        bdf: PciAddress,
        /// The BAR.
        bar: u32,
        /// What it is instead.
        why: String,
    },
    /// The BAR is smaller than the memory asked for.
    #[error("{bdf}: BAR {bar} holds {size:#x} bytes, less than the {asked:#x} asked for; ask for at most {size} bytes (--size), or give the device a larger BAR (ivshmem: a larger memory backend)")]
    TooSmall {
        /// The function.
        bdf: PciAddress,
        /// The BAR.
        bar: u32,
        /// Its size in bytes.
        size: u64,
        /// Bytes asked for.
        asked: u64,
    },
    /// vfio-pci refused to export the range as a dmabuf.
    #[error("{bdf}: vfio-pci cannot export BAR {bar} as a dmabuf: VFIO_DEVICE_FEATURE_DMA_BUF failed ({errno}: {source}): {hint}")]
    ExportRefused {
        /// The function.
        bdf: PciAddress,
        /// The BAR.
        bar: u32,
        /// The kernel's errno, as a number.
        errno: i32,
        /// The error.
        #[source]
        source: io::Error,
        /// What the errno means here and what to do.
        hint: &'static str,
    },
    /// The exported dmabuf is smaller than the range asked for.
    #[error("{bdf}: the dmabuf vfio-pci exported for BAR {bar} holds {got:#x} bytes, not the {asked:#x} asked for; the kernel cut the range: ask for less, or check the BAR's size")]
    ShortExport {
        /// The function.
        bdf: PciAddress,
        /// The BAR.
        bar: u32,
        /// Bytes the dmabuf holds.
        got: u64,
        /// Bytes asked for.
        asked: u64,
    },
}

/// What an errno of `VFIO_DEVICE_FEATURE_DMA_BUF` means.
pub fn export_hint(errno: i32) -> &'static str {
    match errno {
        libc::ENOTTY => {
            "this kernel's vfio-pci has no dmabuf export (it came in Linux 6.19, built with \
             CONFIG_VFIO_PCI_DMABUF); boot a newer kernel"
        }
        libc::EOPNOTSUPP => {
            "the function's driver does not allow it (a vfio-pci variant driver with its own \
             region layout), or the kernel has no PCI peer-to-peer support for it \
             (CONFIG_PCI_P2PDMA); bind the function to plain vfio-pci on a kernel with P2PDMA"
        }
        libc::EINVAL => {
            "the range is not inside the BAR in whole pages, or the BAR is not a memory BAR; \
             ask for a page multiple no larger than the BAR"
        }
        libc::ENODEV => {
            "the BAR's memory decoding is off or the device was reset; enable it (the PCI \
             command register's memory bit) and try again"
        }
        _ => "the kernel refused the export",
    }
}

/// A BAR of a PCI function bound to vfio-pci, opened for peer-to-peer DMA. Holds the device
/// and its IOMMU context open; export the memory with [`PeerBar::export`].
pub struct PeerBar<S: VfioSys = RealSys> {
    bdf: PciAddress,
    bar: u32,
    region: RegionInfo,
    device: S::Fd,
    /// The function's own IOMMU context (container or IOAS), held so its device file stays
    /// usable.
    _iommu: Arc<dyn Iommu>,
    sys: Arc<S>,
}

impl<S: VfioSys> fmt::Debug for PeerBar<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PeerBar")
            .field("bdf", &self.bdf)
            .field("bar", &self.bar)
            .field("size", &self.region.size)
            .finish_non_exhaustive()
    }
}

impl<S: VfioSys> PeerBar<S> {
    /// Opens BAR `bar` of the function at `bdf` (any vendor, bound to vfio-pci) through VFIO in
    /// `mode` (auto: iommufd when the kernel offers it, else type1), and checks that it is a
    /// memory BAR that can be mapped and holds at least `len` bytes.
    ///
    /// # Errors
    ///
    /// [`PeerBarError::Vfio`] (not bound, no IOMMU, group not viable...),
    /// [`PeerBarError::NoSuchBar`], [`PeerBarError::NotMemory`], [`PeerBarError::TooSmall`].
    pub fn open(
        bdf: &str,
        bar: u32,
        len: u64,
        mode: IommuMode,
        sys: S,
    ) -> Result<Self, PeerBarError> {
        let sys = Arc::new(sys);
        let bdf = PciAddress::parse(bdf)?;
        if bar > MAX_BAR {
            return Err(PeerBarError::NoSuchBar { bdf, bar });
        }
        let func = check_vfio_function(&*sys, bdf, false)?;
        let group = match func.group {
            Some(g) if !is_noiommu_group(&*sys, &g) => g,
            _ => return Err(VfioError::NoIommu { bdf }.into()),
        };
        let cdev = match mode {
            IommuMode::Type1 => None,
            IommuMode::Iommufd => Some(
                iommufd::cdev_path(&*sys, bdf)
                    .map_err(|reason| VfioError::NoIommufd { bdf, reason })?,
            ),
            IommuMode::NoIommu => return Err(VfioError::NoIommu { bdf }.into()),
            IommuMode::Auto => iommufd::cdev_path(&*sys, bdf).ok(),
        };
        let (device, iommu): (S::Fd, Arc<dyn Iommu>) = match cdev {
            Some(cdev) => {
                let open = iommufd::open_iommufd(&sys, bdf, &group, &cdev)?;
                (open.device, open.ioas)
            }
            None => {
                let open = type1::open_type1(&sys, bdf, &group)?;
                (open.device, open.container)
            }
        };
        let region = sys
            .device_get_region_info(&device, k::VFIO_PCI_BAR0_REGION_INDEX + bar)
            .map_err(|e| VfioError::os(bdf, format!("VFIO_DEVICE_GET_REGION_INFO({bar})"), e))?;
        let not_memory = |why: String| PeerBarError::NotMemory { bdf, bar, why };
        if region.size == 0 {
            return Err(not_memory("is not implemented (size 0)".into()));
        }
        let config = sys
            .device_get_region_info(&device, k::VFIO_PCI_CONFIG_REGION_INDEX)
            .map_err(|e| VfioError::os(bdf, "VFIO_DEVICE_GET_REGION_INFO(config)", e))?;
        let mut word = [0u8; 4];
        let at = config.offset + PCI_BASE_ADDRESS_0 + 4 * u64::from(bar);
        match sys.pread(&device, at, &mut word) {
            Ok(4) => {}
            Ok(n) => {
                return Err(VfioError::os(
                    bdf,
                    "reading the BAR register",
                    io::Error::new(io::ErrorKind::UnexpectedEof, format!("{n} of 4 bytes")),
                )
                .into())
            }
            Err(e) => return Err(VfioError::os(bdf, "reading the BAR register", e).into()),
        }
        if u32::from_le_bytes(word) & PCI_BASE_ADDRESS_SPACE_IO != 0 {
            return Err(not_memory("is an I/O port BAR, not memory".into()));
        }
        if region.flags & k::VFIO_REGION_INFO_FLAG_MMAP == 0 {
            return Err(not_memory(format!(
                "cannot be mapped (vfio-pci region flags {:#x}: a BAR smaller than a page, or \
                 one vfio-pci keeps to itself)",
                region.flags
            )));
        }
        if len > region.size {
            return Err(PeerBarError::TooSmall {
                bdf,
                bar,
                size: region.size,
                asked: len,
            });
        }
        Ok(Self {
            bdf,
            bar,
            region,
            device,
            _iommu: iommu,
            sys,
        })
    }

    /// The function.
    pub fn bdf(&self) -> PciAddress {
        self.bdf
    }

    /// The BAR number.
    pub fn bar(&self) -> u32 {
        self.bar
    }

    /// The BAR's size in bytes.
    pub fn size(&self) -> u64 {
        self.region.size
    }

    /// Exports bytes `[offset, offset + len)` of the BAR as a dmabuf (vfio-pci's
    /// `VFIO_DEVICE_FEATURE_DMA_BUF`) and returns its descriptor. `size_of` reads a dmabuf's
    /// size (from `/proc/self/fdinfo`); an export smaller than asked is refused.
    ///
    /// # Errors
    ///
    /// [`PeerBarError::ExportRefused`] with the kernel's errno and what it means,
    /// [`PeerBarError::ShortExport`], [`PeerBarError::TooSmall`] for a range past the BAR.
    pub fn export(
        &self,
        offset: u64,
        len: u64,
        size_of: impl FnOnce(&OwnedFd) -> Option<u64>,
    ) -> Result<OwnedFd, PeerBarError> {
        let (bdf, bar) = (self.bdf, self.bar);
        if offset
            .checked_add(len)
            .is_none_or(|end| end > self.region.size)
        {
            return Err(PeerBarError::TooSmall {
                bdf,
                bar,
                size: self.region.size,
                asked: offset.saturating_add(len),
            });
        }
        let fd = self
            .sys
            .device_feature_dma_buf(
                &self.device,
                k::VFIO_PCI_BAR0_REGION_INDEX + bar,
                offset,
                len,
            )
            .map_err(|source| {
                let errno = source.raw_os_error().unwrap_or(0);
                PeerBarError::ExportRefused {
                    bdf,
                    bar,
                    errno,
                    source,
                    hint: export_hint(errno),
                }
            })?;
        match size_of(&fd) {
            Some(got) if got < len => Err(PeerBarError::ShortExport {
                bdf,
                bar,
                got,
                asked: len,
            }),
            _ => Ok(fd),
        }
    }
}

impl PeerBar<RealSys> {
    /// A second descriptor of the device file and the file offset of the BAR in it: mapping
    /// that file range gives the BAR's memory (a `VM_PFNMAP` mapping of MMIO, which VFIO type1
    /// maps for a device as it does for virtual machines' peer-to-peer).
    ///
    /// # Errors
    ///
    /// The `dup` failing.
    pub fn bar_file(&self) -> io::Result<(OwnedFd, u64)> {
        Ok((
            self.device.as_fd().try_clone_to_owned()?,
            self.region.offset,
        ))
    }
}
