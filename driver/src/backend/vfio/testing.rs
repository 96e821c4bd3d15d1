//! [`FakeSys`]: a scripted kernel for testing the VFIO layer without a device.
//!
//! A `FakeSys` holds a small world — sysfs files and links, device nodes, what each VFIO and
//! iommufd request answers — and behaves like the kernel where the driver relies on it (a group
//! must be attached before the IOMMU type is set, mappings may not overlap, unmapping part of a
//! mapping is refused). Every call is appended to a log, so a test can assert the exact order in
//! which the driver talks to the kernel, and any call can be made to fail with a chosen errno.
//!
//! `FakeSys` is `Clone`; clones share one world, so a test keeps a clone to inspect the log,
//! the DMA mappings, the interrupt requests and the contents of device regions while a
//! [`VfioDevice`](super::VfioDevice) uses another.
//!
//! ```
//! use cxdirect::backend::vfio::{testing::FakeSys, IommuMode, VfioDevice};
//!
//! let fake = FakeSys::connectx("0000:06:00.0");
//! let dev = VfioDevice::open("06:00.0", IommuMode::Type1, fake.clone()).unwrap();
//! assert!(fake.log().iter().any(|call| call == "VFIO_SET_IOMMU /dev/vfio/vfio 3"));
//! # drop(dev);
//! ```

use std::alloc::{self, Layout};
use std::collections::btree_map::Entry;
use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use cxdirect_dma::IovaRange;
use vfio_bindings::bindings::vfio as k;

use super::sys::{
    vfio_pci_region_offset, Access, DeviceInfo, DmaMap, IoasMap, IovaRangesReply, IrqInfo, IrqSet,
    RegionInfo, VfioSys, IOMMUFD_PATH, IOMMU_IOAS_MAP_FIXED_IOVA, NOIOMMU_PARAM_PATH, PAGEMAP_PATH,
    PROC_STATUS_PATH, SYSFS_IOMMU_GROUPS, SYSFS_PCI_DEVICES, VFIO_CONTAINER_PATH,
};

/// The IOMMU group [`FakeSys::connectx`] puts the function in.
pub const FAKE_GROUP: &str = "12";
/// The device cdev name [`FakeSys::connectx`] gives the function (`/dev/vfio/devices/vfio0`).
pub const FAKE_CDEV: &str = "vfio0";
/// BAR0 size [`FakeSys::connectx`] gives the function (1 MiB).
pub const FAKE_BAR0_LEN: u64 = 1 << 20;
/// MSI-X vectors [`FakeSys::connectx`] gives the function.
pub const FAKE_MSIX_VECTORS: u32 = 64;
/// Device ID [`FakeSys::connectx`] gives the function (ConnectX-6 Dx).
pub const FAKE_DEVICE_ID: u16 = 0x101d;
/// The IOVA ranges [`FakeSys::connectx`] reports through type1 and iommufd.
pub const FAKE_IOVA_RANGES: [IovaRange; 2] = [
    IovaRange {
        start: 0,
        end: 0xfedf_ffff,
    },
    IovaRange {
        start: 0xfef0_0000,
        end: 0x00ff_ffff_ffff,
    },
];
/// Largest region the fake backs with memory (larger regions answer `ENOMEM` on access).
const MAX_BACKED_REGION: u64 = 256 << 20;

/// What a device node in the fake world opens as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FakeNode {
    /// A VFIO container (`/dev/vfio/vfio`).
    Container,
    /// A VFIO group (`/dev/vfio/N`, `/dev/vfio/noiommu-N`).
    Group,
    /// An iommufd (`/dev/iommu`).
    Iommufd,
    /// A VFIO device cdev (`/dev/vfio/devices/vfioN`).
    DeviceCdev,
    /// The page map (`/proc/self/pagemap`).
    Pagemap,
}

/// One live DMA mapping in the fake IOMMU (type1 or iommufd).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FakeDmaMapping {
    /// I/O virtual address.
    pub iova: u64,
    /// Process virtual address.
    pub vaddr: u64,
    /// Length in bytes.
    pub size: u64,
    /// `VFIO_DMA_MAP_FLAG_*` (type1) or `IOMMU_IOAS_MAP_*` (iommufd).
    pub flags: u32,
}

/// What an open fake file is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    Node(FakeNode),
    /// A device file from `VFIO_GROUP_GET_DEVICE_FD`.
    GroupDevice,
    /// A plain file of the fake file system.
    File(PathBuf),
}

/// An open file of a [`FakeSys`]. Dropping it logs `close NAME`.
#[derive(Debug)]
pub struct FakeFd {
    kind: Kind,
    name: String,
    world: Weak<Mutex<World>>,
}

impl FakeFd {
    /// What the log calls this file: its path, or the device name for a group's device file.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for FakeFd {
    fn drop(&mut self) {
        if let Some(world) = self.world.upgrade() {
            let mut w = world.lock().unwrap_or_else(|e| e.into_inner());
            w.open_fds = w.open_fds.saturating_sub(1);
            w.log.push(format!("close {}", self.name));
            // What the kernel undoes when the last reference goes.
            match self.kind {
                GROUP => {
                    w.group_flags &= !k::VFIO_GROUP_FLAGS_CONTAINER_SET;
                    w.container_has_group = false;
                    w.iommu_type = None;
                    w.dma.clear();
                }
                CDEV => {
                    w.bound = false;
                    w.attached = None;
                }
                IOMMUFD => {
                    w.ioas.clear();
                    w.dma.clear();
                }
                _ => {}
            }
        }
    }
}

/// Zeroed memory backing one device region (for `mmap`, `pread` and `pwrite`).
struct Backing {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: the backing is plain heap memory owned by the world; it is only reached through raw
// pointers (volatile or `copy`), never through references, and the world is behind a mutex.
unsafe impl Send for Backing {}

impl Backing {
    fn new(len: u64) -> io::Result<Self> {
        let size = usize::try_from(len.max(1)).map_err(|_| errno(libc::ENOMEM))?;
        let layout = Layout::from_size_align(size, 4096).map_err(|_| errno(libc::ENOMEM))?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc::alloc_zeroed(layout) };
        NonNull::new(ptr)
            .map(|ptr| Self { ptr, layout })
            .ok_or_else(|| errno(libc::ENOMEM))
    }

    fn read(&self, at: usize, buf: &mut [u8]) {
        // SAFETY: callers check `at + buf.len()` against the region size, which the layout
        // covers; the destination is a distinct Rust buffer.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(at), buf.as_mut_ptr(), buf.len())
        }
    }

    fn write(&self, at: usize, data: &[u8]) {
        // SAFETY: as in `read`, with the copy going the other way.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(at), data.len())
        }
    }
}

impl Drop for Backing {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

fn errno(code: i32) -> io::Error {
    io::Error::from_raw_os_error(code)
}

/// The fake world.
struct World {
    files: BTreeMap<PathBuf, String>,
    links: BTreeMap<PathBuf, PathBuf>,
    dirs: BTreeMap<PathBuf, Vec<String>>,
    nodes: BTreeMap<PathBuf, FakeNode>,
    failures: BTreeMap<String, i32>,
    memlock: u64,
    page_size: usize,
    pagemap: BTreeMap<u64, u64>,

    api_version: i32,
    extensions: Vec<u32>,
    group_flags: u32,
    device_name: String,
    iommu_info: Vec<u8>,
    ioas_ranges: Vec<IovaRange>,
    ioas_alignment: u64,
    device_info: DeviceInfo,
    regions: BTreeMap<u32, RegionInfo>,
    irqs: BTreeMap<u32, IrqInfo>,
    backing: BTreeMap<u32, Backing>,

    container_has_group: bool,
    iommu_type: Option<u32>,
    bound: bool,
    ioas: Vec<u32>,
    attached: Option<u32>,
    dma: BTreeMap<u64, FakeDmaMapping>,
    irq_sets: Vec<IrqSet>,
    resets: usize,
    mmaps: usize,

    log: Vec<String>,
    open_fds: usize,
}

impl World {
    fn empty() -> Self {
        Self {
            files: BTreeMap::new(),
            links: BTreeMap::new(),
            dirs: BTreeMap::new(),
            nodes: BTreeMap::new(),
            failures: BTreeMap::new(),
            memlock: u64::MAX,
            page_size: 4096,
            pagemap: BTreeMap::new(),
            api_version: k::VFIO_API_VERSION as i32,
            extensions: Vec::new(),
            group_flags: 0,
            device_name: String::new(),
            iommu_info: Vec::new(),
            ioas_ranges: Vec::new(),
            ioas_alignment: 4096,
            device_info: DeviceInfo::default(),
            regions: BTreeMap::new(),
            irqs: BTreeMap::new(),
            backing: BTreeMap::new(),
            container_has_group: false,
            iommu_type: None,
            bound: false,
            ioas: Vec::new(),
            attached: None,
            dma: BTreeMap::new(),
            irq_sets: Vec::new(),
            resets: 0,
            mmaps: 0,
            log: Vec::new(),
            open_fds: 0,
        }
    }

    /// Logs a call and fails it when a failure is scripted for `op` or for `op target`.
    fn call(&mut self, op: &str, target: &str, detail: &str) -> io::Result<()> {
        let mut line = format!("{op} {target}");
        if !detail.is_empty() {
            line.push(' ');
            line.push_str(detail);
        }
        self.log.push(line);
        let code = self
            .failures
            .get(&format!("{op} {target}"))
            .or_else(|| self.failures.get(op))
            .copied();
        match code {
            Some(code) => Err(errno(code)),
            None => Ok(()),
        }
    }

    /// The region holding device-file offset `offset`, with the offset inside it.
    fn region_at(&self, offset: u64, len: usize) -> io::Result<(RegionInfo, u64)> {
        let region = self
            .regions
            .values()
            .find(|r| r.size > 0 && offset >= r.offset && offset - r.offset < r.size)
            .copied()
            .ok_or_else(|| errno(libc::EINVAL))?;
        let inside = offset - region.offset;
        if inside
            .checked_add(len as u64)
            .is_none_or(|end| end > region.size)
        {
            return Err(errno(libc::EINVAL));
        }
        Ok((region, inside))
    }

    fn backing(&mut self, region: &RegionInfo) -> io::Result<&Backing> {
        if region.size > MAX_BACKED_REGION {
            return Err(errno(libc::ENOMEM));
        }
        match self.backing.entry(region.index) {
            Entry::Occupied(slot) => Ok(slot.into_mut()),
            Entry::Vacant(slot) => {
                let mut mem = Backing::new(region.size)?;
                if region.index == k::VFIO_PCI_CONFIG_REGION_INDEX {
                    fill_config(&mut mem, region.size);
                }
                Ok(slot.insert(mem))
            }
        }
    }

    fn map(&mut self, m: FakeDmaMapping) -> io::Result<()> {
        let ps = self.page_size as u64;
        if m.size == 0 || m.iova % ps != 0 || m.vaddr % ps != 0 || m.size % ps != 0 {
            return Err(errno(libc::EINVAL));
        }
        let end = m
            .iova
            .checked_add(m.size)
            .ok_or_else(|| errno(libc::EINVAL))?;
        if self
            .dma
            .values()
            .any(|o| o.iova < end && m.iova < o.iova + o.size)
        {
            return Err(errno(libc::EEXIST));
        }
        self.dma.insert(m.iova, m);
        Ok(())
    }

    fn unmap(&mut self, iova: u64, size: u64) -> io::Result<u64> {
        let end = iova.checked_add(size).ok_or_else(|| errno(libc::EINVAL))?;
        let touched: Vec<FakeDmaMapping> = self
            .dma
            .values()
            .filter(|o| o.iova < end && iova < o.iova + o.size)
            .copied()
            .collect();
        if touched
            .iter()
            .any(|o| o.iova < iova || o.iova + o.size > end)
        {
            return Err(errno(libc::EINVAL));
        }
        let mut done = 0;
        for o in touched {
            self.dma.remove(&o.iova);
            done += o.size;
        }
        Ok(done)
    }
}

/// Vendor and device IDs, and a Capabilities-less header, in a fresh config space.
fn fill_config(mem: &mut Backing, size: u64) {
    if size < 64 {
        return;
    }
    mem.write(0, &0x15b3u16.to_le_bytes());
    mem.write(2, &FAKE_DEVICE_ID.to_le_bytes());
    mem.write(8, &[0x00, 0x00, 0x00, 0x02]); // revision 0, class 0x020000 (Ethernet)
}

/// The `VFIO_IOMMU_GET_INFO` answer for `ranges`: header (PGSIZES | CAPS), a DMA-available
/// capability, then the IOVA-range capability, so the chain has two links to walk.
pub fn type1_info_bytes(ranges: &[IovaRange]) -> Vec<u8> {
    let header = 24usize;
    let avail_at = header;
    let iova_at = avail_at + 16;
    let total = iova_at + 16 + 16 * ranges.len();
    let mut out = vec![0u8; total];
    put32(&mut out, 0, total as u32);
    put32(
        &mut out,
        4,
        k::VFIO_IOMMU_INFO_PGSIZES | k::VFIO_IOMMU_INFO_CAPS,
    );
    put64(&mut out, 8, 0x4020_1000); // 4 KiB, 2 MiB and 1 GiB pages
    put32(&mut out, 16, avail_at as u32);
    // DMA-available capability (id 3): header, avail.
    put16(
        &mut out,
        avail_at,
        k::VFIO_IOMMU_TYPE1_INFO_DMA_AVAIL as u16,
    );
    put16(&mut out, avail_at + 2, 1);
    put32(&mut out, avail_at + 4, iova_at as u32);
    put32(&mut out, avail_at + 8, 65535);
    // IOVA-range capability (id 1): header, nr_iovas, reserved, ranges.
    put16(
        &mut out,
        iova_at,
        k::VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE as u16,
    );
    put16(&mut out, iova_at + 2, 1);
    put32(&mut out, iova_at + 4, 0);
    put32(&mut out, iova_at + 8, ranges.len() as u32);
    for (i, r) in ranges.iter().enumerate() {
        put64(&mut out, iova_at + 16 + 16 * i, r.start);
        put64(&mut out, iova_at + 24 + 16 * i, r.end);
    }
    out
}

fn put16(buf: &mut [u8], at: usize, v: u16) {
    buf[at..at + 2].copy_from_slice(&v.to_ne_bytes());
}

fn put32(buf: &mut [u8], at: usize, v: u32) {
    buf[at..at + 4].copy_from_slice(&v.to_ne_bytes());
}

fn put64(buf: &mut [u8], at: usize, v: u64) {
    buf[at..at + 8].copy_from_slice(&v.to_ne_bytes());
}

/// A scripted stand-in for the kernel: see the [module documentation](self).
#[derive(Clone)]
pub struct FakeSys {
    world: Arc<Mutex<World>>,
}

impl std::fmt::Debug for FakeSys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeSys")
            .field("calls", &self.lock().log.len())
            .finish_non_exhaustive()
    }
}

impl Default for FakeSys {
    fn default() -> Self {
        Self::new()
    }
}

impl FakeSys {
    /// An empty world: no files, no devices; every request fails as the kernel would.
    pub fn new() -> Self {
        Self {
            world: Arc::new(Mutex::new(World::empty())),
        }
    }

    /// A healthy host with one ConnectX-6 Dx function at `bdf`, bound to vfio-pci, alone in IOMMU
    /// group [`FAKE_GROUP`], reachable through type1 (v2 and v1) and iommufd (cdev
    /// [`FAKE_CDEV`]), with a mappable BAR0 of [`FAKE_BAR0_LEN`] bytes, a 4 KiB config space,
    /// [`FAKE_MSIX_VECTORS`] MSI-X vectors, function reset, the IOVA ranges
    /// [`FAKE_IOVA_RANGES`], and a process that may lock memory (root's capabilities).
    pub fn connectx(bdf: &str) -> Self {
        let name = super::PciAddress::parse(bdf)
            .map(|a| a.to_string())
            .unwrap_or_else(|_| bdf.to_string());
        let fake = Self::new();
        let dev = Path::new(SYSFS_PCI_DEVICES).join(&name);
        let group_dir = Path::new(SYSFS_IOMMU_GROUPS).join(FAKE_GROUP);
        {
            let mut w = fake.lock();
            w.dirs.insert(
                dev.clone(),
                ["device", "driver", "iommu_group", "vendor", "vfio-dev"]
                    .map(String::from)
                    .to_vec(),
            );
            w.files.insert(dev.join("vendor"), "0x15b3\n".into());
            w.files
                .insert(dev.join("device"), format!("{FAKE_DEVICE_ID:#06x}\n"));
            w.links.insert(
                dev.join("driver"),
                "../../../bus/pci/drivers/vfio-pci".into(),
            );
            w.links.insert(
                dev.join("iommu_group"),
                format!("../../../kernel/iommu_groups/{FAKE_GROUP}").into(),
            );
            w.dirs
                .insert(dev.join("vfio-dev"), vec![FAKE_CDEV.to_string()]);
            w.dirs.insert(group_dir.join("devices"), vec![name.clone()]);
            w.links.insert(
                group_dir.join("devices").join(&name).join("driver"),
                "../../../bus/pci/drivers/vfio-pci".into(),
            );
            w.files.insert(
                PROC_STATUS_PATH.into(),
                "Name:\tfake\nCapEff:\t000001ffffffffff\n".into(),
            );
            w.files.insert(NOIOMMU_PARAM_PATH.into(), "N\n".into());
            w.nodes
                .insert(VFIO_CONTAINER_PATH.into(), FakeNode::Container);
            w.nodes
                .insert(Path::new("/dev/vfio").join(FAKE_GROUP), FakeNode::Group);
            w.nodes.insert(IOMMUFD_PATH.into(), FakeNode::Iommufd);
            w.nodes.insert(
                Path::new("/dev/vfio/devices").join(FAKE_CDEV),
                FakeNode::DeviceCdev,
            );
            w.nodes.insert(PAGEMAP_PATH.into(), FakeNode::Pagemap);

            w.extensions = vec![k::VFIO_TYPE1_IOMMU, k::VFIO_TYPE1v2_IOMMU];
            w.group_flags = k::VFIO_GROUP_FLAGS_VIABLE;
            w.device_name = name;
            w.iommu_info = type1_info_bytes(&FAKE_IOVA_RANGES);
            w.ioas_ranges = FAKE_IOVA_RANGES.to_vec();
            w.device_info = DeviceInfo {
                flags: k::VFIO_DEVICE_FLAGS_PCI | k::VFIO_DEVICE_FLAGS_RESET,
                num_regions: k::VFIO_PCI_NUM_REGIONS,
                num_irqs: k::VFIO_PCI_NUM_IRQS,
            };
            let rw = k::VFIO_REGION_INFO_FLAG_READ | k::VFIO_REGION_INFO_FLAG_WRITE;
            for index in 0..k::VFIO_PCI_NUM_REGIONS {
                let (flags, size) = match index {
                    k::VFIO_PCI_BAR0_REGION_INDEX => {
                        (rw | k::VFIO_REGION_INFO_FLAG_MMAP, FAKE_BAR0_LEN)
                    }
                    k::VFIO_PCI_CONFIG_REGION_INDEX => (rw, 4096),
                    _ => (0, 0),
                };
                w.regions.insert(
                    index,
                    RegionInfo {
                        index,
                        flags,
                        size,
                        offset: vfio_pci_region_offset(index),
                    },
                );
            }
            for index in 0..k::VFIO_PCI_NUM_IRQS {
                let (flags, count) = match index {
                    k::VFIO_PCI_INTX_IRQ_INDEX => {
                        (k::VFIO_IRQ_INFO_EVENTFD | k::VFIO_IRQ_INFO_MASKABLE, 1)
                    }
                    k::VFIO_PCI_MSIX_IRQ_INDEX => (
                        k::VFIO_IRQ_INFO_EVENTFD | k::VFIO_IRQ_INFO_NORESIZE,
                        FAKE_MSIX_VECTORS,
                    ),
                    _ => (k::VFIO_IRQ_INFO_EVENTFD, 0),
                };
                w.irqs.insert(
                    index,
                    IrqInfo {
                        index,
                        flags,
                        count,
                    },
                );
            }
        }
        fake
    }

    fn lock(&self) -> MutexGuard<'_, World> {
        self.world.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn fd(&self, kind: Kind, name: impl Into<String>) -> FakeFd {
        self.lock().open_fds += 1;
        FakeFd {
            kind,
            name: name.into(),
            world: Arc::downgrade(&self.world),
        }
    }

    // ----- scripting the world -----

    /// Creates or replaces a file.
    pub fn set_file(&self, path: impl AsRef<Path>, contents: &str) {
        self.lock()
            .files
            .insert(path.as_ref().to_path_buf(), contents.to_string());
    }

    /// Creates or replaces a symbolic link.
    pub fn set_link(&self, path: impl AsRef<Path>, target: impl AsRef<Path>) {
        self.lock()
            .links
            .insert(path.as_ref().to_path_buf(), target.as_ref().to_path_buf());
    }

    /// Creates or replaces a directory listing.
    pub fn set_dir(&self, path: impl AsRef<Path>, entries: &[&str]) {
        let entries = entries.iter().map(|e| e.to_string()).collect();
        self.lock()
            .dirs
            .insert(path.as_ref().to_path_buf(), entries);
    }

    /// Creates or replaces a device node.
    pub fn set_node(&self, path: impl AsRef<Path>, node: FakeNode) {
        self.lock().nodes.insert(path.as_ref().to_path_buf(), node);
    }

    /// Removes whatever is at `path` (file, link, directory or node).
    pub fn remove(&self, path: impl AsRef<Path>) {
        let path = path.as_ref();
        let mut w = self.lock();
        w.files.remove(path);
        w.links.remove(path);
        w.dirs.remove(path);
        w.nodes.remove(path);
    }

    /// Makes every later call of `op` fail with `errno`. `op` is a log operation name
    /// (`"VFIO_IOMMU_MAP_DMA"`, `"mmap"`, `"open"`), or an operation and its target as the log
    /// shows them (`"open /dev/vfio/12"`) to fail only that one.
    pub fn fail(&self, op: &str, errno: i32) {
        self.lock().failures.insert(op.to_string(), errno);
    }

    /// Forgets every scripted failure.
    pub fn clear_failures(&self) {
        self.lock().failures.clear();
    }

    /// Binds the main function to `driver` (or unbinds it with `None`).
    pub fn bind_driver(&self, bdf: &str, driver: Option<&str>) {
        let link = Path::new(SYSFS_PCI_DEVICES).join(bdf).join("driver");
        match driver {
            Some(d) => self.set_link(link, format!("../../../bus/pci/drivers/{d}")),
            None => self.remove(link),
        }
    }

    /// Sets the vendor and device IDs sysfs shows for `bdf`.
    pub fn set_ids(&self, bdf: &str, vendor: u16, device: u16) {
        let dir = Path::new(SYSFS_PCI_DEVICES).join(bdf);
        self.set_file(dir.join("vendor"), &format!("{vendor:#06x}\n"));
        self.set_file(dir.join("device"), &format!("{device:#06x}\n"));
    }

    /// Adds another device to group [`FAKE_GROUP`], bound to `driver` (or to none).
    pub fn add_group_member(&self, address: &str, driver: Option<&str>) {
        let devices = Path::new(SYSFS_IOMMU_GROUPS)
            .join(FAKE_GROUP)
            .join("devices");
        {
            let mut w = self.lock();
            let list = w.dirs.entry(devices.clone()).or_default();
            list.push(address.to_string());
            list.sort();
        }
        if let Some(d) = driver {
            self.set_link(
                devices.join(address).join("driver"),
                format!("../../../bus/pci/drivers/{d}"),
            );
        }
    }

    /// Takes the IOMMU away: `bdf` loses its `iommu_group` link.
    pub fn remove_iommu_group(&self, bdf: &str) {
        self.remove(Path::new(SYSFS_PCI_DEVICES).join(bdf).join("iommu_group"));
    }

    /// Turns group [`FAKE_GROUP`] into the kernel's no-IOMMU stand-in: named `vfio-noiommu`,
    /// reached at `/dev/vfio/noiommu-12`, with no-IOMMU mode enabled in the vfio module and the
    /// no-IOMMU driver offered.
    pub fn make_noiommu(&self) {
        let mut w = self.lock();
        w.files.insert(
            Path::new(SYSFS_IOMMU_GROUPS).join(FAKE_GROUP).join("name"),
            "vfio-noiommu\n".into(),
        );
        w.files.insert(NOIOMMU_PARAM_PATH.into(), "Y\n".into());
        w.nodes.remove(&Path::new("/dev/vfio").join(FAKE_GROUP));
        w.nodes.insert(
            Path::new("/dev/vfio").join(format!("noiommu-{FAKE_GROUP}")),
            FakeNode::Group,
        );
        w.extensions = vec![k::VFIO_NOIOMMU_IOMMU];
        w.iommu_info.clear();
    }

    /// Takes iommufd away: no `/dev/iommu`, no `vfio-dev` directory for `bdf`.
    pub fn remove_iommufd(&self, bdf: &str) {
        self.remove(IOMMUFD_PATH);
        self.remove(Path::new(SYSFS_PCI_DEVICES).join(bdf).join("vfio-dev"));
    }

    /// Sets the effective capability mask shown in `/proc/self/status`.
    pub fn set_capabilities(&self, cap_eff: u64) {
        self.set_file(
            PROC_STATUS_PATH,
            &format!("Name:\tfake\nCapEff:\t{cap_eff:016x}\n"),
        );
    }

    /// Sets the soft `RLIMIT_MEMLOCK`.
    pub fn set_memlock_limit(&self, bytes: u64) {
        self.lock().memlock = bytes;
    }

    /// Sets what `VFIO_GET_API_VERSION` answers.
    pub fn set_api_version(&self, version: i32) {
        self.lock().api_version = version;
    }

    /// Sets the IOMMU types `VFIO_CHECK_EXTENSION` reports.
    pub fn set_extensions(&self, extensions: &[u32]) {
        self.lock().extensions = extensions.to_vec();
    }

    /// Sets the `VFIO_GROUP_FLAGS_*` `VFIO_GROUP_GET_STATUS` reports.
    pub fn set_group_flags(&self, flags: u32) {
        self.lock().group_flags = flags;
    }

    /// Sets the exact bytes `VFIO_IOMMU_GET_INFO` answers (see [`type1_info_bytes`]). Their
    /// first four bytes are the size the kernel says the full answer needs.
    pub fn set_iommu_info(&self, bytes: Vec<u8>) {
        self.lock().iommu_info = bytes;
    }

    /// Sets the ranges and alignment `IOMMU_IOAS_IOVA_RANGES` answers.
    pub fn set_ioas_ranges(&self, ranges: &[IovaRange], alignment: u64) {
        let mut w = self.lock();
        w.ioas_ranges = ranges.to_vec();
        w.ioas_alignment = alignment;
    }

    /// Sets what `VFIO_DEVICE_GET_INFO` answers.
    pub fn set_device_info(&self, info: DeviceInfo) {
        self.lock().device_info = info;
    }

    /// Sets what `VFIO_DEVICE_GET_REGION_INFO` answers for `info.index`.
    pub fn set_region(&self, info: RegionInfo) {
        let mut w = self.lock();
        w.backing.remove(&info.index);
        w.regions.insert(info.index, info);
    }

    /// Sets what `VFIO_DEVICE_GET_IRQ_INFO` answers for `info.index`.
    pub fn set_irq(&self, info: IrqInfo) {
        self.lock().irqs.insert(info.index, info);
    }

    /// Sets the page-map entry of virtual page `page` (bit 63 present, bits 0-54 the frame).
    pub fn set_pagemap_entry(&self, page: u64, entry: u64) {
        self.lock().pagemap.insert(page, entry);
    }

    // ----- observing -----

    /// Every call so far, in order, one line each: `OP TARGET [DETAILS]`.
    pub fn log(&self) -> Vec<String> {
        self.lock().log.clone()
    }

    /// Forgets the log so far.
    pub fn clear_log(&self) {
        self.lock().log.clear();
    }

    /// The live DMA mappings, by IOVA.
    pub fn dma_mappings(&self) -> Vec<FakeDmaMapping> {
        self.lock().dma.values().copied().collect()
    }

    /// Every `VFIO_DEVICE_SET_IRQS` request accepted, in order.
    pub fn irq_sets(&self) -> Vec<IrqSet> {
        self.lock().irq_sets.clone()
    }

    /// How many `VFIO_DEVICE_RESET`s succeeded.
    pub fn resets(&self) -> usize {
        self.lock().resets
    }

    /// How many fake files are open.
    pub fn open_fds(&self) -> usize {
        self.lock().open_fds
    }

    /// How many `mmap`s are live.
    pub fn live_mmaps(&self) -> usize {
        self.lock().mmaps
    }

    /// Reads `len` bytes of region `index` at `offset` (what the device model holds there).
    /// Empty when the range is outside the region.
    pub fn region_bytes(&self, index: u32, offset: u64, len: usize) -> Vec<u8> {
        let mut w = self.lock();
        let Some(region) = w.regions.get(&index).copied() else {
            return Vec::new();
        };
        if offset
            .checked_add(len as u64)
            .is_none_or(|end| end > region.size)
        {
            return Vec::new();
        }
        let mut buf = vec![0u8; len];
        match w.backing(&region) {
            Ok(mem) => mem.read(offset as usize, &mut buf),
            Err(_) => return Vec::new(),
        }
        buf
    }

    /// Writes `data` into region `index` at `offset` (what the device then shows there).
    /// Ignored when the range is outside the region.
    pub fn write_region(&self, index: u32, offset: u64, data: &[u8]) {
        let mut w = self.lock();
        let Some(region) = w.regions.get(&index).copied() else {
            return;
        };
        if offset
            .checked_add(data.len() as u64)
            .is_none_or(|end| end > region.size)
        {
            return;
        }
        if let Ok(mem) = w.backing(&region) {
            mem.write(offset as usize, data);
        }
    }

    fn expect(fd: &FakeFd, want: &[Kind]) -> io::Result<()> {
        if want.contains(&fd.kind) {
            Ok(())
        } else {
            Err(errno(libc::ENOTTY))
        }
    }
}

const CONTAINER: Kind = Kind::Node(FakeNode::Container);
const GROUP: Kind = Kind::Node(FakeNode::Group);
const IOMMUFD: Kind = Kind::Node(FakeNode::Iommufd);
const CDEV: Kind = Kind::Node(FakeNode::DeviceCdev);
const DEVICES: [Kind; 2] = [Kind::GroupDevice, CDEV];

// SAFETY: `mmap` returns a pointer into a zeroed heap allocation of at least the region's size
// that the world owns and frees only when the last clone of this `FakeSys` (including the one a
// device holds) is dropped, so it outlives every user; `map_dma`/`ioas_map` only record the
// request (no device exists to reach memory), and `unmap` removes the record.
unsafe impl VfioSys for FakeSys {
    type Fd = FakeFd;

    fn exists(&self, path: &Path) -> bool {
        let mut w = self.lock();
        w.log.push(format!("exists {}", path.display()));
        w.files.contains_key(path)
            || w.links.contains_key(path)
            || w.dirs.contains_key(path)
            || w.nodes.contains_key(path)
    }

    fn read_to_string(&self, path: &Path) -> io::Result<String> {
        let mut w = self.lock();
        w.call("read", &path.display().to_string(), "")?;
        w.files
            .get(path)
            .cloned()
            .ok_or_else(|| errno(libc::ENOENT))
    }

    fn read_link(&self, path: &Path) -> io::Result<PathBuf> {
        let mut w = self.lock();
        w.call("readlink", &path.display().to_string(), "")?;
        w.links
            .get(path)
            .cloned()
            .ok_or_else(|| errno(libc::ENOENT))
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        let mut w = self.lock();
        w.call("readdir", &path.display().to_string(), "")?;
        let mut names = w
            .dirs
            .get(path)
            .cloned()
            .ok_or_else(|| errno(libc::ENOENT))?;
        names.sort();
        Ok(names)
    }

    fn open(&self, path: &Path, access: Access) -> io::Result<FakeFd> {
        let shown = path.display().to_string();
        let kind = {
            let mut w = self.lock();
            w.call("open", &shown, &access.to_string())?;
            if let Some(node) = w.nodes.get(path) {
                Kind::Node(*node)
            } else if w.files.contains_key(path) {
                Kind::File(path.to_path_buf())
            } else {
                return Err(errno(libc::ENOENT));
            }
        };
        Ok(self.fd(kind, shown))
    }

    fn memlock_limit(&self) -> io::Result<u64> {
        let mut w = self.lock();
        w.call("getrlimit", "RLIMIT_MEMLOCK", "")?;
        Ok(w.memlock)
    }

    fn page_size(&self) -> usize {
        self.lock().page_size
    }

    fn get_api_version(&self, container: &FakeFd) -> io::Result<i32> {
        let mut w = self.lock();
        w.call("VFIO_GET_API_VERSION", container.name(), "")?;
        Self::expect(container, &[CONTAINER])?;
        Ok(w.api_version)
    }

    fn check_extension(&self, container: &FakeFd, extension: u32) -> io::Result<bool> {
        let mut w = self.lock();
        w.call(
            "VFIO_CHECK_EXTENSION",
            container.name(),
            &extension.to_string(),
        )?;
        Self::expect(container, &[CONTAINER])?;
        Ok(w.extensions.contains(&extension))
    }

    fn set_iommu(&self, container: &FakeFd, iommu_type: u32) -> io::Result<()> {
        let mut w = self.lock();
        w.call("VFIO_SET_IOMMU", container.name(), &iommu_type.to_string())?;
        Self::expect(container, &[CONTAINER])?;
        if !w.container_has_group || !w.extensions.contains(&iommu_type) || w.iommu_type.is_some() {
            return Err(errno(libc::EINVAL));
        }
        w.iommu_type = Some(iommu_type);
        Ok(())
    }

    fn iommu_get_info(&self, container: &FakeFd, buf: &mut [u8]) -> io::Result<()> {
        let mut w = self.lock();
        w.call(
            "VFIO_IOMMU_GET_INFO",
            container.name(),
            &format!("argsz={}", buf.len()),
        )?;
        Self::expect(container, &[CONTAINER])?;
        if w.iommu_type.is_none() || buf.len() < 24 {
            return Err(errno(libc::EINVAL));
        }
        // The scripted bytes are the full answer; their first four bytes say how much room
        // it needs.
        let mut answer = w.iommu_info.clone();
        if answer.len() < 24 {
            answer.resize(24, 0);
        }
        if answer.len() > buf.len() {
            // Like the kernel: the header only, argsz telling the size needed, no capabilities.
            let needed = answer.len() as u32;
            answer.truncate(24);
            put32(&mut answer, 0, needed);
            put32(&mut answer, 16, 0);
        }
        buf[..answer.len()].copy_from_slice(&answer);
        Ok(())
    }

    unsafe fn map_dma(&self, container: &FakeFd, map: &DmaMap) -> io::Result<()> {
        let mut w = self.lock();
        w.call(
            "VFIO_IOMMU_MAP_DMA",
            container.name(),
            &format!(
                "iova={:#x} size={:#x} vaddr={:#x} flags={:#x}",
                map.iova, map.size, map.vaddr, map.flags
            ),
        )?;
        Self::expect(container, &[CONTAINER])?;
        if w.iommu_type.is_none() {
            return Err(errno(libc::EINVAL));
        }
        w.map(FakeDmaMapping {
            iova: map.iova,
            vaddr: map.vaddr,
            size: map.size,
            flags: map.flags,
        })
    }

    fn unmap_dma(&self, container: &FakeFd, iova: u64, size: u64) -> io::Result<u64> {
        let mut w = self.lock();
        w.call(
            "VFIO_IOMMU_UNMAP_DMA",
            container.name(),
            &format!("iova={iova:#x} size={size:#x}"),
        )?;
        Self::expect(container, &[CONTAINER])?;
        if w.iommu_type.is_none() {
            return Err(errno(libc::EINVAL));
        }
        w.unmap(iova, size)
    }

    fn group_get_status(&self, group: &FakeFd) -> io::Result<u32> {
        let mut w = self.lock();
        w.call("VFIO_GROUP_GET_STATUS", group.name(), "")?;
        Self::expect(group, &[GROUP])?;
        Ok(w.group_flags)
    }

    fn group_set_container(&self, group: &FakeFd, container: &FakeFd) -> io::Result<()> {
        let mut w = self.lock();
        w.call("VFIO_GROUP_SET_CONTAINER", group.name(), container.name())?;
        Self::expect(group, &[GROUP])?;
        Self::expect(container, &[CONTAINER])?;
        if w.group_flags & k::VFIO_GROUP_FLAGS_VIABLE == 0 {
            return Err(errno(libc::EPERM));
        }
        if w.group_flags & k::VFIO_GROUP_FLAGS_CONTAINER_SET != 0 {
            return Err(errno(libc::EBUSY));
        }
        w.group_flags |= k::VFIO_GROUP_FLAGS_CONTAINER_SET;
        w.container_has_group = true;
        Ok(())
    }

    fn group_get_device_fd(&self, group: &FakeFd, name: &str) -> io::Result<FakeFd> {
        {
            let mut w = self.lock();
            w.call("VFIO_GROUP_GET_DEVICE_FD", group.name(), name)?;
            Self::expect(group, &[GROUP])?;
            if w.iommu_type.is_none() {
                return Err(errno(libc::EINVAL));
            }
            if name != w.device_name {
                return Err(errno(libc::ENODEV));
            }
        }
        Ok(self.fd(Kind::GroupDevice, name))
    }

    fn device_get_info(&self, device: &FakeFd) -> io::Result<DeviceInfo> {
        let mut w = self.lock();
        w.call("VFIO_DEVICE_GET_INFO", device.name(), "")?;
        Self::expect(device, &DEVICES)?;
        Ok(w.device_info)
    }

    fn device_get_region_info(&self, device: &FakeFd, index: u32) -> io::Result<RegionInfo> {
        let mut w = self.lock();
        w.call(
            "VFIO_DEVICE_GET_REGION_INFO",
            device.name(),
            &index.to_string(),
        )?;
        Self::expect(device, &DEVICES)?;
        w.regions
            .get(&index)
            .copied()
            .ok_or_else(|| errno(libc::EINVAL))
    }

    fn device_get_irq_info(&self, device: &FakeFd, index: u32) -> io::Result<IrqInfo> {
        let mut w = self.lock();
        w.call(
            "VFIO_DEVICE_GET_IRQ_INFO",
            device.name(),
            &index.to_string(),
        )?;
        Self::expect(device, &DEVICES)?;
        w.irqs
            .get(&index)
            .copied()
            .ok_or_else(|| errno(libc::EINVAL))
    }

    fn device_set_irqs(&self, device: &FakeFd, set: &IrqSet) -> io::Result<()> {
        let mut w = self.lock();
        w.call(
            "VFIO_DEVICE_SET_IRQS",
            device.name(),
            &format!(
                "index={} start={} count={} flags={:#x}",
                set.index, set.start, set.count, set.flags
            ),
        )?;
        Self::expect(device, &DEVICES)?;
        let irq = w
            .irqs
            .get(&set.index)
            .copied()
            .ok_or_else(|| errno(libc::EINVAL))?;
        let eventfds = set.flags & k::VFIO_IRQ_SET_DATA_EVENTFD != 0;
        if set
            .start
            .checked_add(set.count)
            .is_none_or(|end| end > irq.count)
            || (eventfds && set.eventfds.len() != set.count as usize)
        {
            return Err(errno(libc::EINVAL));
        }
        w.irq_sets.push(set.clone());
        Ok(())
    }

    fn device_reset(&self, device: &FakeFd) -> io::Result<()> {
        let mut w = self.lock();
        w.call("VFIO_DEVICE_RESET", device.name(), "")?;
        Self::expect(device, &DEVICES)?;
        if w.device_info.flags & k::VFIO_DEVICE_FLAGS_RESET == 0 {
            return Err(errno(libc::ENOTTY));
        }
        w.resets += 1;
        Ok(())
    }

    fn device_bind_iommufd(&self, device: &FakeFd, iommufd: &FakeFd) -> io::Result<u32> {
        let mut w = self.lock();
        w.call("VFIO_DEVICE_BIND_IOMMUFD", device.name(), iommufd.name())?;
        Self::expect(device, &[CDEV])?;
        Self::expect(iommufd, &[IOMMUFD])?;
        if w.group_flags & k::VFIO_GROUP_FLAGS_VIABLE == 0 {
            return Err(errno(libc::EBUSY));
        }
        if w.bound {
            return Err(errno(libc::EINVAL));
        }
        w.bound = true;
        Ok(1)
    }

    fn device_attach_iommufd_pt(&self, device: &FakeFd, pt_id: u32) -> io::Result<()> {
        let mut w = self.lock();
        w.call(
            "VFIO_DEVICE_ATTACH_IOMMUFD_PT",
            device.name(),
            &pt_id.to_string(),
        )?;
        Self::expect(device, &[CDEV])?;
        if !w.bound {
            return Err(errno(libc::EINVAL));
        }
        if !w.ioas.contains(&pt_id) {
            return Err(errno(libc::ENOENT));
        }
        w.attached = Some(pt_id);
        Ok(())
    }

    fn ioas_alloc(&self, iommufd: &FakeFd) -> io::Result<u32> {
        let mut w = self.lock();
        w.call("IOMMU_IOAS_ALLOC", iommufd.name(), "")?;
        Self::expect(iommufd, &[IOMMUFD])?;
        let id = 2 + w.ioas.len() as u32;
        w.ioas.push(id);
        Ok(id)
    }

    fn ioas_iova_ranges(
        &self,
        iommufd: &FakeFd,
        ioas_id: u32,
        out: &mut [IovaRange],
    ) -> io::Result<IovaRangesReply> {
        let mut w = self.lock();
        w.call(
            "IOMMU_IOAS_IOVA_RANGES",
            iommufd.name(),
            &format!("ioas={ioas_id} room={}", out.len()),
        )?;
        Self::expect(iommufd, &[IOMMUFD])?;
        if !w.ioas.contains(&ioas_id) {
            return Err(errno(libc::ENOENT));
        }
        for (dst, src) in out.iter_mut().zip(&w.ioas_ranges) {
            *dst = *src;
        }
        Ok(IovaRangesReply {
            total: w.ioas_ranges.len() as u32,
            alignment: w.ioas_alignment,
        })
    }

    unsafe fn ioas_map(&self, iommufd: &FakeFd, map: &IoasMap) -> io::Result<u64> {
        let mut w = self.lock();
        w.call(
            "IOMMU_IOAS_MAP",
            iommufd.name(),
            &format!(
                "ioas={} iova={:#x} length={:#x} user_va={:#x} flags={:#x}",
                map.ioas_id, map.iova, map.length, map.user_va, map.flags
            ),
        )?;
        Self::expect(iommufd, &[IOMMUFD])?;
        if !w.ioas.contains(&map.ioas_id) {
            return Err(errno(libc::ENOENT));
        }
        if map.flags & IOMMU_IOAS_MAP_FIXED_IOVA == 0 {
            // The fake does not allocate IOVAs.
            return Err(errno(libc::EOPNOTSUPP));
        }
        w.map(FakeDmaMapping {
            iova: map.iova,
            vaddr: map.user_va,
            size: map.length,
            flags: map.flags,
        })?;
        Ok(map.iova)
    }

    fn ioas_map_file(
        &self,
        iommufd: &FakeFd,
        file: std::os::fd::BorrowedFd<'_>,
        map: &IoasMap,
    ) -> io::Result<u64> {
        use std::os::fd::AsRawFd;
        let mut w = self.lock();
        w.call(
            "IOMMU_IOAS_MAP_FILE",
            iommufd.name(),
            &format!(
                "ioas={} iova={:#x} length={:#x} fd={} start={:#x} flags={:#x}",
                map.ioas_id,
                map.iova,
                map.length,
                file.as_raw_fd(),
                map.user_va,
                map.flags
            ),
        )?;
        Self::expect(iommufd, &[IOMMUFD])?;
        if !w.ioas.contains(&map.ioas_id) {
            return Err(errno(libc::ENOENT));
        }
        w.map(FakeDmaMapping {
            iova: map.iova,
            vaddr: 0,
            size: map.length,
            flags: map.flags,
        })?;
        Ok(map.iova)
    }

    fn ioas_unmap(
        &self,
        iommufd: &FakeFd,
        ioas_id: u32,
        iova: u64,
        length: u64,
    ) -> io::Result<u64> {
        let mut w = self.lock();
        w.call(
            "IOMMU_IOAS_UNMAP",
            iommufd.name(),
            &format!("ioas={ioas_id} iova={iova:#x} length={length:#x}"),
        )?;
        Self::expect(iommufd, &[IOMMUFD])?;
        if !w.ioas.contains(&ioas_id) {
            return Err(errno(libc::ENOENT));
        }
        match w.unmap(iova, length)? {
            0 => Err(errno(libc::ENOENT)),
            done => Ok(done),
        }
    }

    fn device_feature_dma_buf(
        &self,
        device: &FakeFd,
        region_index: u32,
        offset: u64,
        length: u64,
    ) -> io::Result<std::os::fd::OwnedFd> {
        let mut w = self.lock();
        w.call(
            "VFIO_DEVICE_FEATURE_DMA_BUF",
            device.name(),
            &format!("{region_index} {offset:#x}+{length:#x}"),
        )?;
        Self::expect(device, &DEVICES)?;
        let region = w
            .regions
            .get(&region_index)
            .copied()
            .ok_or_else(|| errno(libc::EINVAL))?;
        // As vfio-pci: the range must lie inside the region, in whole pages.
        if region.size == 0
            || offset % 4096 != 0
            || length % 4096 != 0
            || offset
                .checked_add(length)
                .is_none_or(|end| end > region.size)
        {
            return Err(errno(libc::EINVAL));
        }
        // A memfd of the range's size stands in for the dmabuf (only its size is looked at).
        let fd = nix::sys::memfd::memfd_create(
            c"fake-vfio-dmabuf",
            nix::sys::memfd::MFdFlags::MFD_CLOEXEC,
        )
        .map_err(io::Error::from)?;
        nix::unistd::ftruncate(&fd, length as libc::off_t).map_err(io::Error::from)?;
        Ok(fd)
    }

    fn mmap(&self, fd: &FakeFd, offset: u64, len: usize) -> io::Result<NonNull<u8>> {
        let mut w = self.lock();
        w.call(
            "mmap",
            fd.name(),
            &format!("offset={offset:#x} len={len:#x}"),
        )?;
        Self::expect(fd, &DEVICES)?;
        if len == 0 {
            return Err(errno(libc::EINVAL));
        }
        let (region, inside) = w.region_at(offset, len)?;
        if region.flags & k::VFIO_REGION_INFO_FLAG_MMAP == 0 {
            return Err(errno(libc::EINVAL));
        }
        let base = w.backing(&region)?.ptr;
        w.mmaps += 1;
        // `inside + len` is within the region, which the backing covers.
        NonNull::new(base.as_ptr().wrapping_add(inside as usize)).ok_or_else(|| errno(libc::EINVAL))
    }

    unsafe fn munmap(&self, _ptr: NonNull<u8>, len: usize) -> io::Result<()> {
        let mut w = self.lock();
        w.call("munmap", &format!("len={len:#x}"), "")?;
        w.mmaps = w.mmaps.saturating_sub(1);
        Ok(())
    }

    fn pread(&self, fd: &FakeFd, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let mut w = self.lock();
        w.call(
            "pread",
            fd.name(),
            &format!("offset={offset:#x} len={}", buf.len()),
        )?;
        match &fd.kind {
            Kind::Node(FakeNode::Pagemap) => {
                if offset % 8 != 0 || buf.len() % 8 != 0 {
                    return Err(errno(libc::EINVAL));
                }
                for (i, chunk) in buf.chunks_exact_mut(8).enumerate() {
                    let entry = w
                        .pagemap
                        .get(&(offset / 8 + i as u64))
                        .copied()
                        .unwrap_or(0);
                    chunk.copy_from_slice(&entry.to_ne_bytes());
                }
                Ok(buf.len())
            }
            Kind::File(path) => {
                let text = w.files.get(path).cloned().unwrap_or_default();
                let bytes = text.as_bytes();
                let start = usize::try_from(offset)
                    .unwrap_or(usize::MAX)
                    .min(bytes.len());
                let n = buf.len().min(bytes.len() - start);
                buf[..n].copy_from_slice(&bytes[start..start + n]);
                Ok(n)
            }
            kind if DEVICES.contains(kind) => {
                let (region, inside) = w.region_at(offset, buf.len())?;
                if region.flags & k::VFIO_REGION_INFO_FLAG_READ == 0 {
                    return Err(errno(libc::EINVAL));
                }
                w.backing(&region)?.read(inside as usize, buf);
                Ok(buf.len())
            }
            _ => Err(errno(libc::EINVAL)),
        }
    }

    fn pwrite(&self, fd: &FakeFd, offset: u64, data: &[u8]) -> io::Result<usize> {
        let mut w = self.lock();
        w.call(
            "pwrite",
            fd.name(),
            &format!("offset={offset:#x} len={}", data.len()),
        )?;
        Self::expect(fd, &DEVICES)?;
        let (region, inside) = w.region_at(offset, data.len())?;
        if region.flags & k::VFIO_REGION_INFO_FLAG_WRITE == 0 {
            return Err(errno(libc::EINVAL));
        }
        w.backing(&region)?.write(inside as usize, data);
        Ok(data.len())
    }
}
