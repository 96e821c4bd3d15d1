//! [`VfioDevice`]: one ConnectX function opened through VFIO, and its [`Backend`] implementation.

use std::fmt;
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use cxdirect_dma::{Iommu, IovaRange};
use vfio_bindings::bindings::vfio as k;

use super::bar::{Bar0, MappedBar, MmioAccess};
use super::error::VfioError;
use super::pci::{check_function, is_noiommu_group, PciAddress};
use super::sys::{DeviceInfo, IrqInfo, IrqSet, RegionInfo, VfioSys, PROC_STATUS_PATH};
use super::{iommufd, noiommu, type1, IommuKind, IommuMode, RealSys};
use crate::backend::{Backend, BackendError, Interrupt};

/// Least BAR0 size accepted: the initialization segment, the internal timer, the health counter
/// and the interrupt-clear register at 0x200c all live in the first 16 KiB.
pub const MIN_BAR0_LEN: u64 = 0x4000;

/// Least locked-memory limit accepted when the process cannot lock memory freely
/// (`CAP_IPC_LOCK`): command queue, firmware pages and queues need tens of MiB pinned.
pub const MIN_MEMLOCK_BYTES: u64 = 64 << 20;

/// `CAP_IPC_LOCK`, whose holder may pin memory beyond `RLIMIT_MEMLOCK`.
const CAP_IPC_LOCK: u32 = 14;

/// PCI Command register offset and its Bus Master Enable bit.
const PCI_COMMAND: u16 = 0x04;
const PCI_COMMAND_MASTER: u16 = 1 << 2;

/// A ConnectX function opened through VFIO. Implements [`Backend`]; generic over the syscall
/// seam so the whole open sequence can run against `testing::FakeSys`.
pub struct VfioDevice<S: VfioSys = RealSys> {
    bdf: PciAddress,
    kind: IommuKind,
    info: DeviceInfo,
    bar0: Bar0<S>,
    config: RegionInfo,
    msix: IrqInfo,
    ranges: Vec<IovaRange>,
    bad_mmio: AtomicU64,
    device: S::Fd,
    iommu: Arc<dyn Iommu>,
    sys: Arc<S>,
}

impl<S: VfioSys> fmt::Debug for VfioDevice<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VfioDevice")
            .field("bdf", &self.bdf)
            .field("kind", &self.kind)
            .field("bar0_len", &self.bar0.len)
            .field("mmio", &self.mmio_access())
            .field("msix_vectors", &self.msix.count)
            .finish_non_exhaustive()
    }
}

impl<S: VfioSys> VfioDevice<S> {
    /// Opens the ConnectX function at `bdf` (`0000:06:00.0`, or `06:00.0` for domain 0).
    ///
    /// Checks in sysfs that the function exists, is a ConnectX and is bound to vfio-pci; sets
    /// up the IOMMU as `mode` says (with [`IommuMode::Auto`], iommufd when the kernel offers
    /// it and the nodes can be opened, else type1); checks the locked-memory limit; gets the
    /// device file; maps BAR0 when VFIO allows it (else MMIO goes through `pread`/`pwrite`);
    /// and reads the config space and MSI-X descriptions. Every failure says what to do.
    pub fn open(bdf: &str, mode: IommuMode, sys: S) -> Result<Self, VfioError> {
        let sys = Arc::new(sys);
        let bdf = PciAddress::parse(bdf)?;
        let func = check_function(&*sys, bdf)?;

        let (device, iommu, kind, ranges): (S::Fd, Arc<dyn Iommu>, IommuKind, Vec<IovaRange>) =
            if mode == IommuMode::NoIommu {
                let group = noiommu::check_allowed(&*sys, bdf, func.group.as_deref())?;
                noiommu::warn(bdf);
                check_memlock(&*sys, bdf)?;
                let open = noiommu::open_noiommu(&sys, bdf, &group)?;
                let ranges = open.map.iova_ranges();
                (open.device, open.map, IommuKind::NoIommu, ranges)
            } else {
                let group = match func.group {
                    Some(g) if !is_noiommu_group(&*sys, &g) => g,
                    _ => return Err(VfioError::NoIommu { bdf }),
                };
                let cdev = match mode {
                    IommuMode::Type1 => None,
                    IommuMode::Iommufd => Some(
                        iommufd::cdev_path(&*sys, bdf)
                            .map_err(|reason| VfioError::NoIommufd { bdf, reason })?,
                    ),
                    _ => iommufd::cdev_path(&*sys, bdf).ok(),
                };
                check_memlock(&*sys, bdf)?;
                let via_iommufd = match cdev {
                    Some(cdev) => match iommufd::open_iommufd(&sys, bdf, &group, &cdev) {
                        Ok(open) => Some(open),
                        // Auto: nodes set up for type1 only (say, chowned /dev/vfio/N).
                        Err(VfioError::PermissionDenied { .. }) if mode == IommuMode::Auto => None,
                        Err(e) => return Err(e),
                    },
                    None => None,
                };
                match via_iommufd {
                    Some(open) => (open.device, open.ioas, IommuKind::Iommufd, open.ranges),
                    None => {
                        let open = type1::open_type1(&sys, bdf, &group)?;
                        (open.device, open.container, open.kind, open.ranges)
                    }
                }
            };
        Self::setup(sys, bdf, kind, device, iommu, ranges)
    }

    /// The steps common to every path, on the device file.
    fn setup(
        sys: Arc<S>,
        bdf: PciAddress,
        kind: IommuKind,
        device: S::Fd,
        iommu: Arc<dyn Iommu>,
        ranges: Vec<IovaRange>,
    ) -> Result<Self, VfioError> {
        let info = sys
            .device_get_info(&device)
            .map_err(|e| VfioError::os(bdf, "VFIO_DEVICE_GET_INFO", e))?;
        if info.flags & k::VFIO_DEVICE_FLAGS_PCI == 0 {
            return Err(VfioError::UnsupportedApi {
                bdf,
                reason: format!(
                    "the device is not a vfio-pci device (flags {:#x})",
                    info.flags
                ),
            });
        }
        if info.num_regions <= k::VFIO_PCI_CONFIG_REGION_INDEX {
            return Err(VfioError::UnsupportedApi {
                bdf,
                reason: format!(
                    "the device has {} regions; a vfio-pci device has BAR0 to BAR5, ROM and \
                     config space",
                    info.num_regions
                ),
            });
        }
        if info.num_irqs <= k::VFIO_PCI_MSIX_IRQ_INDEX {
            return Err(VfioError::UnsupportedApi {
                bdf,
                reason: format!(
                    "the device has {} interrupt indexes, none for MSI-X",
                    info.num_irqs
                ),
            });
        }
        let region = |index: u32| {
            sys.device_get_region_info(&device, index)
                .map_err(|e| VfioError::os(bdf, format!("VFIO_DEVICE_GET_REGION_INFO({index})"), e))
        };
        let bar = region(k::VFIO_PCI_BAR0_REGION_INDEX)?;
        if bar.size == 0 {
            return Err(VfioError::Bar0Missing { bdf });
        }
        if bar.size < MIN_BAR0_LEN {
            return Err(VfioError::Bar0TooSmall {
                bdf,
                size: bar.size,
                min: MIN_BAR0_LEN,
            });
        }
        if bar.offset.checked_add(bar.size).is_none() {
            return Err(VfioError::UnsupportedApi {
                bdf,
                reason: format!("BAR0 is said to sit at file offset {:#x}", bar.offset),
            });
        }
        let len = usize::try_from(bar.size).map_err(|_| VfioError::UnsupportedApi {
            bdf,
            reason: format!(
                "BAR0 of {:#x} bytes does not fit the address space",
                bar.size
            ),
        })?;
        let map = if bar.flags & k::VFIO_REGION_INFO_FLAG_MMAP != 0 {
            match sys.mmap(&device, bar.offset, len) {
                Ok(ptr) => Some(MappedBar {
                    sys: Arc::clone(&sys),
                    ptr,
                    len,
                }),
                Err(e) => {
                    eprintln!(
                        "cxdirect: {bdf}: mapping BAR0 failed ({e}); register accesses will be \
                         system calls, which is slow"
                    );
                    None
                }
            }
        } else {
            None
        };
        let bar0 = Bar0 {
            len,
            offset: bar.offset,
            map,
        };
        let config = region(k::VFIO_PCI_CONFIG_REGION_INDEX)?;
        if config.size < 64 || config.offset.checked_add(config.size).is_none() {
            return Err(VfioError::UnsupportedApi {
                bdf,
                reason: format!(
                    "the config space region is {} bytes at file offset {:#x}",
                    config.size, config.offset
                ),
            });
        }
        let msix = sys
            .device_get_irq_info(&device, k::VFIO_PCI_MSIX_IRQ_INDEX)
            .map_err(|e| VfioError::os(bdf, "VFIO_DEVICE_GET_IRQ_INFO(MSI-X)", e))?;
        Ok(Self {
            bdf,
            kind,
            info,
            bar0,
            config,
            msix,
            ranges,
            bad_mmio: AtomicU64::new(0),
            device,
            iommu,
            sys,
        })
    }

    /// The function's PCI address.
    pub fn bdf(&self) -> PciAddress {
        self.bdf
    }

    /// The IOMMU arrangement in use.
    pub fn iommu_kind(&self) -> IommuKind {
        self.kind
    }

    /// How BAR0 is reached.
    pub fn mmio_access(&self) -> MmioAccess {
        if self.bar0.map.is_some() {
            MmioAccess::Mapped
        } else {
            MmioAccess::ReadWrite
        }
    }

    /// What `VFIO_DEVICE_GET_INFO` reported.
    pub fn device_info(&self) -> DeviceInfo {
        self.info
    }

    /// The config space region.
    pub fn config_region(&self) -> RegionInfo {
        self.config
    }

    /// How many MSI-X vectors the function offers.
    pub fn msix_vectors(&self) -> u32 {
        self.msix.count
    }

    /// The IOVA ranges DMA may use (from the IOMMU; the whole space in no-IOMMU mode).
    pub fn iova_ranges(&self) -> &[IovaRange] {
        &self.ranges
    }

    /// BAR0 accesses refused so far because they were outside BAR0, misaligned, or their
    /// system call failed (reads then return all ones, writes are dropped).
    pub fn bad_mmio_accesses(&self) -> u64 {
        self.bad_mmio.load(Ordering::Relaxed)
    }

    /// Sets or clears Bus Master Enable in the PCI Command register (read-modify-write of
    /// config offset 4, bit 2): the function can DMA only while it is set.
    pub fn set_bus_master(&self, enable: bool) -> Result<(), BackendError> {
        let mut cmd = [0u8; 2];
        self.config_read(PCI_COMMAND, &mut cmd)?;
        let old = u16::from_le_bytes(cmd);
        let new = if enable {
            old | PCI_COMMAND_MASTER
        } else {
            old & !PCI_COMMAND_MASTER
        };
        if new != old {
            self.config_write(PCI_COMMAND, &new.to_le_bytes())?;
        }
        Ok(())
    }

    #[cold]
    fn refuse_mmio(&self) {
        self.bad_mmio.fetch_add(1, Ordering::Relaxed);
    }

    /// BAR0 read through the device file; `false` (counted) when refused or failed.
    #[cold]
    fn bar_pread(&self, offset: usize, buf: &mut [u8]) -> bool {
        let ok = offset % buf.len() == 0
            && offset
                .checked_add(buf.len())
                .is_some_and(|end| end <= self.bar0.len)
            && self
                .sys
                .pread(
                    &self.device,
                    self.bar0.offset.wrapping_add(offset as u64),
                    buf,
                )
                .is_ok_and(|n| n == buf.len());
        if !ok {
            self.refuse_mmio();
        }
        ok
    }

    /// BAR0 write through the device file; counted when refused or failed.
    #[cold]
    fn bar_pwrite(&self, offset: usize, data: &[u8]) {
        let ok = offset % data.len() == 0
            && offset
                .checked_add(data.len())
                .is_some_and(|end| end <= self.bar0.len)
            && self
                .sys
                .pwrite(
                    &self.device,
                    self.bar0.offset.wrapping_add(offset as u64),
                    data,
                )
                .is_ok_and(|n| n == data.len());
        if !ok {
            self.refuse_mmio();
        }
    }

    fn config_range(&self, op: &'static str, offset: u16, len: usize) -> Result<u64, BackendError> {
        let end = u64::from(offset) + len as u64;
        if end > self.config.size {
            return Err(BackendError::Config {
                op,
                offset,
                len,
                reason: format!(
                    "beyond the {}-byte config space of {}",
                    self.config.size, self.bdf
                ),
            });
        }
        // `end` is within the region, whose end was checked not to overflow at open.
        Ok(self.config.offset + u64::from(offset))
    }
}

/// Refuses to go on when pinning DMA memory is bound to fail: no `CAP_IPC_LOCK` and a locked-
/// memory limit below [`MIN_MEMLOCK_BYTES`].
fn check_memlock<S: VfioSys>(sys: &S, bdf: PciAddress) -> Result<(), VfioError> {
    let status = sys
        .read_to_string(Path::new(PROC_STATUS_PATH))
        .unwrap_or_default();
    let caps = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    if caps & (1 << CAP_IPC_LOCK) != 0 {
        return Ok(());
    }
    let limit = sys
        .memlock_limit()
        .map_err(|e| VfioError::os(bdf, "getrlimit(RLIMIT_MEMLOCK)", e))?;
    if limit < MIN_MEMLOCK_BYTES {
        return Err(VfioError::MemlockTooLow {
            limit,
            needed: MIN_MEMLOCK_BYTES,
        });
    }
    Ok(())
}

impl<S: VfioSys> Backend for VfioDevice<S> {
    fn name(&self) -> String {
        match self.mmio_access() {
            MmioAccess::Mapped => format!("{} (VFIO {})", self.bdf, self.kind),
            MmioAccess::ReadWrite => {
                format!(
                    "{} (VFIO {}, BAR0 through pread/pwrite)",
                    self.bdf, self.kind
                )
            }
        }
    }

    fn bar0_len(&self) -> usize {
        self.bar0.len
    }

    #[inline]
    fn read32(&self, offset: usize) -> [u8; 4] {
        if let Some(bar) = &self.bar0.map {
            if let Some(p) = bar.at(offset, 4) {
                // SAFETY: `p` is inside the live BAR0 mapping and 4-byte aligned; device memory
                // is only ever reached with volatile accesses.
                return unsafe { ptr::read_volatile(p.cast::<u32>()) }.to_ne_bytes();
            }
            self.refuse_mmio();
            return [0xff; 4];
        }
        let mut buf = [0u8; 4];
        if self.bar_pread(offset, &mut buf) {
            buf
        } else {
            [0xff; 4]
        }
    }

    #[inline]
    fn write32(&self, offset: usize, bytes: [u8; 4]) {
        if let Some(bar) = &self.bar0.map {
            match bar.at(offset, 4) {
                // SAFETY: `p` is inside the live BAR0 mapping and 4-byte aligned.
                Some(p) => unsafe {
                    ptr::write_volatile(p.cast::<u32>(), u32::from_ne_bytes(bytes))
                },
                None => self.refuse_mmio(),
            }
            return;
        }
        self.bar_pwrite(offset, &bytes);
    }

    #[inline]
    fn write64(&self, offset: usize, bytes: [u8; 8]) {
        if let Some(bar) = &self.bar0.map {
            match bar.at(offset, 8) {
                // SAFETY: `p` is inside the live BAR0 mapping and 8-byte aligned, so this is a
                // single 64-bit store.
                Some(p) => unsafe {
                    ptr::write_volatile(p.cast::<u64>(), u64::from_ne_bytes(bytes))
                },
                None => self.refuse_mmio(),
            }
            return;
        }
        self.bar_pwrite(offset, &bytes);
    }

    #[inline]
    fn write_bf(&self, offset: usize, wqe: &[u8; 64]) {
        if let Some(bar) = &self.bar0.map {
            let Some(base) = bar.at(offset, 64) else {
                self.refuse_mmio();
                return;
            };
            for (i, chunk) in wqe.chunks_exact(8).enumerate() {
                let mut word = [0u8; 8];
                word.copy_from_slice(chunk);
                // SAFETY: `base` is a 64-byte aligned address with 64 bytes of the live BAR0
                // mapping behind it; `base + 8 * i` for i < 8 stays inside and 8-byte aligned.
                unsafe {
                    ptr::write_volatile(base.add(8 * i).cast::<u64>(), u64::from_ne_bytes(word))
                };
            }
            return;
        }
        if offset % 64 != 0 {
            self.refuse_mmio();
            return;
        }
        for (i, chunk) in wqe.chunks_exact(8).enumerate() {
            self.bar_pwrite(offset.saturating_add(8 * i), chunk);
        }
    }

    fn config_read(&self, offset: u16, buf: &mut [u8]) -> Result<(), BackendError> {
        let at = self.config_range("read", offset, buf.len())?;
        match self.sys.pread(&self.device, at, buf) {
            Ok(n) if n == buf.len() => Ok(()),
            Ok(n) => Err(BackendError::Config {
                op: "read",
                offset,
                len: buf.len(),
                reason: format!("short read of {n} bytes"),
            }),
            Err(e) => Err(BackendError::Config {
                op: "read",
                offset,
                len: buf.len(),
                reason: format!("pread on the VFIO device of {}: {e}", self.bdf),
            }),
        }
    }

    fn config_write(&self, offset: u16, data: &[u8]) -> Result<(), BackendError> {
        let at = self.config_range("write", offset, data.len())?;
        match self.sys.pwrite(&self.device, at, data) {
            Ok(n) if n == data.len() => Ok(()),
            Ok(n) => Err(BackendError::Config {
                op: "write",
                offset,
                len: data.len(),
                reason: format!("short write of {n} bytes"),
            }),
            Err(e) => Err(BackendError::Config {
                op: "write",
                offset,
                len: data.len(),
                reason: format!("pwrite on the VFIO device of {}: {e}", self.bdf),
            }),
        }
    }

    fn iommu(&self) -> Arc<dyn Iommu> {
        Arc::clone(&self.iommu)
    }

    fn enable_msix(&self, vectors: u16) -> Result<Vec<Interrupt>, BackendError> {
        let refuse = |reason: String| BackendError::Interrupts { vectors, reason };
        if vectors == 0 {
            return Err(refuse("ask for at least one vector".to_string()));
        }
        if u32::from(vectors) > self.msix.count {
            return Err(refuse(format!(
                "{} offers only {} MSI-X vectors",
                self.bdf, self.msix.count
            )));
        }
        if self.msix.flags & k::VFIO_IRQ_INFO_EVENTFD == 0 {
            return Err(refuse(format!(
                "VFIO cannot signal MSI-X of {} through eventfds",
                self.bdf
            )));
        }
        let interrupts = (0..vectors)
            .map(|_| Interrupt::new())
            .collect::<Result<Vec<_>, _>>()?;
        let fds: Vec<RawFd> = interrupts.iter().map(AsRawFd::as_raw_fd).collect();
        let set = IrqSet::trigger_eventfds(k::VFIO_PCI_MSIX_IRQ_INDEX, 0, fds);
        self.sys
            .device_set_irqs(&self.device, &set)
            .map_err(|e| refuse(format!("VFIO_DEVICE_SET_IRQS on {}: {e}", self.bdf)))?;
        Ok(interrupts)
    }

    fn disable_msix(&self) -> Result<(), BackendError> {
        self.sys
            .device_set_irqs(&self.device, &IrqSet::disable(k::VFIO_PCI_MSIX_IRQ_INDEX))
            .map_err(|e| BackendError::Interrupts {
                vectors: 0,
                reason: format!(
                    "disabling MSI-X of {} (VFIO_DEVICE_SET_IRQS): {e}",
                    self.bdf
                ),
            })
    }

    fn reset(&self) -> Result<(), BackendError> {
        if self.info.flags & k::VFIO_DEVICE_FLAGS_RESET == 0 {
            return Err(BackendError::Reset(format!(
                "VFIO reports no reset method for {} (no FLR or other function reset)",
                self.bdf
            )));
        }
        self.sys
            .device_reset(&self.device)
            .map_err(|e| BackendError::Reset(format!("VFIO_DEVICE_RESET on {}: {e}", self.bdf)))
    }
}
