//! devbind: list NVIDIA ConnectX PCI functions and move them between their kernel driver and
//! `vfio-pci`, the way DPDK's `dpdk-devbind.py` does, restricted to ConnectX.
//!
//! Everything goes through sysfs, reached from a root directory (`/sys` on a real
//! host). Tests build a fake tree with the same shape in a temporary directory and point a
//! `Sysfs` at it. The facts this module relies on:
//!
//! - a PCI function lives in `bus/pci/devices/<BDF>/`, with the files `vendor`, `device` and
//!   `class` (hexadecimal, such as `0x15b3`), and the symbolic links `driver` (to
//!   `bus/pci/drivers/<name>`, absent when no driver is bound) and `iommu_group` (to
//!   `kernel/iommu_groups/<N>`, absent when the IOMMU is off);
//! - network interfaces a function carries appear as `<dev>/net/<ifname>/`, with `operstate`;
//! - a function is bound to `vfio-pci` by writing its address to `<dev>/driver/unbind` (when it
//!   has a driver), `vfio-pci` to `<dev>/driver_override` and its address to
//!   `bus/pci/drivers_probe`; it is unbound by writing its address to `<dev>/driver/unbind` and
//!   clearing `driver_override` (writing a newline);
//! - the `vfio-pci` module is loaded when `bus/pci/drivers/vfio-pci` exists, and the IOMMU is on
//!   when `kernel/iommu_groups` holds any group.

use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// Where sysfs is mounted on a real host.
pub const DEFAULT_SYSFS_ROOT: &str = "/sys";

/// The name of the kernel's generic VFIO PCI driver.
pub const VFIO_PCI_DRIVER: &str = "vfio-pci";

/// The PCI vendor id of NVIDIA networking (formerly Mellanox), shared by every ConnectX.
pub const CONNECTX_VENDOR_ID: u16 = cxdirect::backend::vfio::pci::MELLANOX_VENDOR_ID;

/// The ConnectX model name of a PCI vendor/device id pair, or `None` when the pair is not a
/// ConnectX the driver knows (the driver's own table, so the tool and the driver agree).
pub fn connectx_model(vendor: u16, device: u16) -> Option<&'static str> {
    cxdirect::backend::vfio::pci::connectx_model(vendor, device)
}

/// Drivers that may hold a function sharing an IOMMU group with one used through VFIO: the kernel
/// lets VFIO open the group when every other member has no driver, a VFIO driver, `pci-stub`, or
/// (for bridges) `pcieport`.
fn driver_allows_vfio_group(driver: &str) -> bool {
    driver.contains("vfio") || driver == "pci-stub" || driver == "pcieport"
}

/// A PCI address: domain, bus, device and function (`0000:06:00.0`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Bdf {
    /// PCI domain (segment); `0` on most hosts.
    pub domain: u32,
    /// Bus number.
    pub bus: u8,
    /// Device number, `0..=0x1f`.
    pub device: u8,
    /// Function number, `0..=7`.
    pub function: u8,
}

impl Bdf {
    /// Parses `DOMAIN:BUS:DEVICE.FUNCTION` (`0000:06:00.0`) or `BUS:DEVICE.FUNCTION` (`06:00.0`,
    /// domain 0), in hexadecimal, either case.
    pub fn parse(text: &str) -> Result<Self, DevbindError> {
        // One parser for PCI addresses: the driver's, so both accept exactly the same spellings.
        match cxdirect::backend::vfio::PciAddress::parse(text) {
            Ok(a) => Ok(Self {
                domain: a.domain(),
                bus: a.bus(),
                device: a.device(),
                function: a.function(),
            }),
            Err(cxdirect::backend::vfio::VfioError::BadAddress { reason, .. }) => {
                Err(DevbindError::BadBdf {
                    input: text.to_string(),
                    reason: reason.to_string(),
                })
            }
            Err(other) => Err(DevbindError::BadBdf {
                input: text.to_string(),
                reason: other.to_string(),
            }),
        }
    }
}

impl FromStr for Bdf {
    type Err = DevbindError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for Bdf {
    /// The kernel's spelling: `0000:06:00.0`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

/// A network interface the kernel driver of a PCI function created (`<dev>/net/<name>`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetInterface {
    /// Interface name, such as `ens1f0np0`.
    pub name: String,
    /// Contents of `operstate` (`up`, `down`, ...), or `None` when it could not be read.
    pub operstate: Option<String>,
}

impl NetInterface {
    /// Whether the interface is up, and so possibly carrying traffic.
    pub fn is_up(&self) -> bool {
        self.operstate.as_deref() == Some("up")
    }
}

impl fmt::Display for NetInterface {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({})",
            self.name,
            self.operstate.as_deref().unwrap_or("state unknown")
        )
    }
}

/// What sysfs says about one PCI function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PciFunction {
    /// Its address.
    pub bdf: Bdf,
    /// PCI vendor id.
    pub vendor: u16,
    /// PCI device id.
    pub device: u16,
    /// PCI class code (base class, subclass, programming interface), when sysfs has it.
    pub class: Option<u32>,
    /// The bound driver's name, or `None` when no driver is bound.
    pub driver: Option<String>,
    /// The IOMMU group number, or `None` when the function has none (IOMMU off).
    pub iommu_group: Option<u32>,
    /// Network interfaces the function carries, sorted by name.
    pub interfaces: Vec<NetInterface>,
}

impl PciFunction {
    /// The ConnectX model name, or `None` when the function is not a ConnectX.
    pub fn model(&self) -> Option<&'static str> {
        connectx_model(self.vendor, self.device)
    }

    /// Whether the function is bound to `vfio-pci`.
    pub fn is_bound_to_vfio_pci(&self) -> bool {
        self.driver.as_deref() == Some(VFIO_PCI_DRIVER)
    }

    /// The names of its network interfaces that are up.
    pub fn active_interfaces(&self) -> Vec<String> {
        self.interfaces
            .iter()
            .filter(|i| i.is_up())
            .map(|i| i.name.clone())
            .collect()
    }

    /// A short description: the model name for a ConnectX, else class and vendor.
    pub fn describe(&self) -> String {
        match self.model() {
            Some(model) => model.to_string(),
            None => describe_other(self.vendor, self.device, self.class),
        }
    }
}

/// Describes a function that is not a ConnectX: "a network controller from Intel (vendor 0x8086,
/// device 0x15b7)".
fn describe_other(vendor: u16, device: u16, class: Option<u32>) -> String {
    let what = class
        .and_then(|c| class_name((c >> 16) as u8))
        .unwrap_or("PCI function");
    let article = if what.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    };
    let from = match vendor_name(vendor) {
        Some(name) if vendor == CONNECTX_VENDOR_ID => {
            format!(" from {name}, but not a ConnectX model this tool knows")
        }
        Some(name) => format!(" from {name}"),
        None => String::new(),
    };
    format!("{article} {what}{from} (vendor {vendor:#06x}, device {device:#06x})")
}

/// Names of PCI base classes.
fn class_name(base: u8) -> Option<&'static str> {
    Some(match base {
        0x01 => "mass storage controller",
        0x02 => "network controller",
        0x03 => "display controller",
        0x04 => "multimedia controller",
        0x05 => "memory controller",
        0x06 => "bridge",
        0x07 => "communication controller",
        0x08 => "system peripheral",
        0x09 => "input device controller",
        0x0b => "processor",
        0x0c => "serial bus controller",
        0x0d => "wireless controller",
        0x10 => "encryption controller",
        0x11 => "signal processing controller",
        0x12 => "processing accelerator",
        _ => return None,
    })
}

/// Names of a few common PCI vendors.
fn vendor_name(vendor: u16) -> Option<&'static str> {
    Some(match vendor {
        0x8086 => "Intel",
        0x1022 => "AMD",
        0x10de => "NVIDIA",
        CONNECTX_VENDOR_ID => "NVIDIA networking (Mellanox)",
        0x14e4 => "Broadcom",
        0x1af4 => "Red Hat (virtio)",
        0x144d => "Samsung",
        _ => return None,
    })
}

/// What `--status` reports: the ConnectX functions, the IOMMU and the `vfio-pci` module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    /// Every ConnectX function, sorted by address.
    pub functions: Vec<PciFunction>,
    /// How many IOMMU groups exist; `0` means the IOMMU is off.
    pub iommu_groups: usize,
    /// Whether the `vfio-pci` driver is loaded.
    pub vfio_pci_loaded: bool,
}

impl Status {
    /// Whether the IOMMU is on (any IOMMU group exists).
    pub fn iommu_enabled(&self) -> bool {
        self.iommu_groups > 0
    }
}

impl fmt::Display for Status {
    /// A table with one row per function (address, model, driver, IOMMU group, interfaces), then
    /// one line on the IOMMU and one on `vfio-pci`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.functions.is_empty() {
            writeln!(
                f,
                "No ConnectX functions found (vendor {CONNECTX_VENDOR_ID:#06x} with a known ConnectX device id)."
            )?;
        } else {
            let header = ["BDF", "MODEL", "DRIVER", "IOMMU GROUP", "INTERFACES"];
            let rows: Vec<[String; 5]> = self
                .functions
                .iter()
                .map(|func| {
                    let interfaces = if func.interfaces.is_empty() {
                        "-".to_string()
                    } else {
                        func.interfaces
                            .iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join(", ")
                    };
                    [
                        func.bdf.to_string(),
                        func.describe(),
                        func.driver.clone().unwrap_or_else(|| "none".to_string()),
                        func.iommu_group
                            .map_or_else(|| "none".to_string(), |g| g.to_string()),
                        interfaces,
                    ]
                })
                .collect();
            let mut widths = header.map(str::len);
            for row in &rows {
                for (width, cell) in widths.iter_mut().zip(row) {
                    *width = (*width).max(cell.len());
                }
            }
            let mut write_row = |cells: [&str; 5]| -> fmt::Result {
                let mut line = String::new();
                for (i, cell) in cells.iter().enumerate() {
                    if i + 1 == cells.len() {
                        line.push_str(cell);
                    } else {
                        line.push_str(&format!("{cell:<width$}  ", width = widths[i]));
                    }
                }
                writeln!(f, "{}", line.trim_end())
            };
            write_row(header)?;
            for row in &rows {
                write_row([&row[0], &row[1], &row[2], &row[3], &row[4]])?;
            }
        }
        if self.iommu_enabled() {
            let s = if self.iommu_groups == 1 { "" } else { "s" };
            writeln!(f, "IOMMU: on ({} group{s})", self.iommu_groups)?;
        } else {
            writeln!(
                f,
                "IOMMU: off (no IOMMU groups); VFIO needs it: enable VT-d or AMD-Vi in the firmware \
                 setup and boot with intel_iommu=on or amd_iommu=on"
            )?;
        }
        if self.vfio_pci_loaded {
            write!(f, "vfio-pci: loaded")
        } else {
            write!(
                f,
                "vfio-pci: not loaded (load it with `sudo modprobe vfio-pci`)"
            )
        }
    }
}

/// Another function in the same IOMMU group, bound to a driver that keeps VFIO from opening the
/// group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupMember {
    /// Its address.
    pub bdf: Bdf,
    /// The driver it is bound to.
    pub driver: String,
    /// Its ConnectX model name, when it is a ConnectX (so it can be bound with this tool).
    pub model: Option<&'static str>,
}

/// Something the user should know that did not stop the operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Warning {
    /// Other functions in the function's IOMMU group are bound to drivers other than VFIO's, so
    /// VFIO will refuse to open the group until they are bound to `vfio-pci` or unbound.
    SharedIommuGroup {
        /// The group number.
        group: u32,
        /// The functions in the way, sorted by address.
        others: Vec<GroupMember>,
    },
    /// The function has no IOMMU group: the IOMMU is off and `vfio-pci` will not take it.
    NoIommuGroup {
        /// The function.
        bdf: Bdf,
    },
    /// `--force` took a function away from its driver while these interfaces were up.
    ActiveInterfaceForced {
        /// The function.
        bdf: Bdf,
        /// The interfaces that were up.
        interfaces: Vec<String>,
    },
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warning::SharedIommuGroup { group, others } => {
                writeln!(
                    f,
                    "IOMMU group {group} also holds functions bound to other drivers; VFIO will refuse \
                     to open the group until each is bound to vfio-pci or unbound:"
                )?;
                for other in others {
                    match other.model {
                        Some(model) => {
                            writeln!(f, "  {} ({model}) bound to {}", other.bdf, other.driver)?
                        }
                        None => writeln!(f, "  {} bound to {}", other.bdf, other.driver)?,
                    }
                }
                write!(
                    f,
                    "Bind or unbind those too (`cxdirect-devbind --bind BDF` for a ConnectX), or move \
                     the card to a slot with its own IOMMU group."
                )
            }
            Warning::NoIommuGroup { bdf } => write!(
                f,
                "{bdf} has no IOMMU group: the IOMMU is off, and vfio-pci will not take the \
                 function; enable VT-d or AMD-Vi in the firmware setup and boot with \
                 intel_iommu=on or amd_iommu=on"
            ),
            Warning::ActiveInterfaceForced { bdf, interfaces } => write!(
                f,
                "--force: took {bdf} from its driver while {} {} up; traffic over {} has stopped",
                interfaces.join(", "),
                if interfaces.len() == 1 { "was" } else { "were" },
                if interfaces.len() == 1 { "it" } else { "them" },
            ),
        }
    }
}

/// What a bind did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BindOutcome {
    /// The function was already bound to `vfio-pci`; nothing was written.
    AlreadyBound,
    /// The function is now bound to `vfio-pci`.
    Bound {
        /// The driver it was taken from, if any.
        previous_driver: Option<String>,
    },
    /// The bind requests were written but the kernel did not hand the function to `vfio-pci`
    /// (the kernel log says why).
    NotTaken {
        /// The driver it was bound to before, if any.
        previous_driver: Option<String>,
        /// The driver it is bound to now, if any.
        driver_now: Option<String>,
    },
}

/// The result of [`Sysfs::bind_vfio`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use = "a bind may not have taken: check `outcome` and show the warnings"]
pub struct BindReport {
    /// The function as it was before the bind.
    pub function: PciFunction,
    /// What happened.
    pub outcome: BindOutcome,
    /// Things the user should know.
    pub warnings: Vec<Warning>,
}

impl BindReport {
    /// Whether the function is bound to `vfio-pci` now.
    pub fn is_bound(&self) -> bool {
        matches!(
            self.outcome,
            BindOutcome::AlreadyBound | BindOutcome::Bound { .. }
        )
    }
}

impl fmt::Display for BindReport {
    /// One line saying what happened.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let func = &self.function;
        let device_file = match func.iommu_group {
            Some(group) => format!("; its VFIO group is /dev/vfio/{group}"),
            None => String::new(),
        };
        write!(f, "{} ({}): ", func.bdf, func.describe())?;
        match &self.outcome {
            BindOutcome::AlreadyBound => write!(f, "already bound to vfio-pci{device_file}"),
            BindOutcome::Bound { previous_driver } => {
                write!(f, "bound to vfio-pci")?;
                if let Some(previous) = previous_driver {
                    write!(f, " (was {previous})")?;
                }
                write!(f, "{device_file}")
            }
            BindOutcome::NotTaken { driver_now, .. } => write!(
                f,
                "the bind request was written but the function is bound to {} afterwards, not \
                 vfio-pci; the kernel log (`sudo dmesg | tail`) says why",
                driver_now.as_deref().unwrap_or("no driver")
            ),
        }
    }
}

/// What an unbind did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UnbindOutcome {
    /// The function was taken from this driver.
    Unbound {
        /// The driver it was bound to.
        previous_driver: String,
    },
    /// The function had no driver; only its `driver_override` was cleared.
    NotBound,
}

/// The result of [`Sysfs::unbind`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnbindReport {
    /// The function as it was before the unbind.
    pub function: PciFunction,
    /// What happened.
    pub outcome: UnbindOutcome,
    /// Things the user should know.
    pub warnings: Vec<Warning>,
}

impl fmt::Display for UnbindReport {
    /// What happened, and how to hand the function back to its kernel driver.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let func = &self.function;
        write!(f, "{} ({}): ", func.bdf, func.describe())?;
        match &self.outcome {
            UnbindOutcome::Unbound { previous_driver } => {
                write!(f, "unbound from {previous_driver}")?
            }
            UnbindOutcome::NotBound => write!(f, "was not bound to any driver")?,
        }
        write!(
            f,
            "; driver_override cleared. To hand it back to its kernel driver: \
             `echo {} | sudo tee /sys/bus/pci/drivers_probe`",
            func.bdf
        )
    }
}

/// Why a devbind operation failed, with what the user can do about it.
#[derive(Debug)]
pub enum DevbindError {
    /// The text given as a PCI address is not one.
    BadBdf {
        /// What was given.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The sysfs root has no `bus/pci/devices` directory.
    NoPciBus {
        /// The directory that is missing.
        path: PathBuf,
    },
    /// No PCI function has this address.
    NoSuchFunction {
        /// The address asked for.
        bdf: Bdf,
        /// The directory that is missing.
        path: PathBuf,
    },
    /// The function is not a ConnectX; this tool manages only ConnectX functions.
    NotConnectX {
        /// The function, as found.
        function: PciFunction,
    },
    /// The `vfio-pci` driver is not loaded.
    VfioPciNotLoaded {
        /// The driver directory that is missing.
        path: PathBuf,
    },
    /// The function carries network interfaces that are up, and `--force` was not given.
    ActiveInterface {
        /// The function.
        bdf: Bdf,
        /// Its current driver.
        driver: String,
        /// The interfaces that are up.
        interfaces: Vec<String>,
    },
    /// A sysfs file held something unexpected.
    Malformed {
        /// The file.
        path: PathBuf,
        /// What it held.
        content: String,
        /// What was expected.
        expected: &'static str,
    },
    /// Reading or writing sysfs failed.
    Io {
        /// What was being done ("read", "write 0000:06:00.0 to", ...).
        action: String,
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        source: io::Error,
    },
}

impl fmt::Display for DevbindError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DevbindError::BadBdf { input, reason } => write!(
                f,
                "'{input}' is not a PCI address: {reason}; write it as 0000:06:00.0 or 06:00.0 \
                 (`cxdirect-devbind --status` lists the ConnectX functions)"
            ),
            DevbindError::NoPciBus { path } => write!(
                f,
                "{} does not exist; is the sysfs root right? (it is /sys on a real host; pass \
                 --sysfs PATH for another)",
                path.display()
            ),
            DevbindError::NoSuchFunction { bdf, path } => write!(
                f,
                "there is no PCI function {bdf} ({} does not exist); `cxdirect-devbind --status` \
                 lists the ConnectX functions and `lspci -D` all of them",
                path.display()
            ),
            DevbindError::NotConnectX { function } => {
                write!(
                    f,
                    "{} is not a ConnectX function: it is {}",
                    function.bdf,
                    describe_other(function.vendor, function.device, function.class)
                )?;
                match &function.driver {
                    Some(driver) => write!(f, ", bound to {driver}")?,
                    None => write!(f, ", with no driver")?,
                }
                write!(
                    f,
                    ". cxdirect-devbind manages only NVIDIA ConnectX functions; \
                     `cxdirect-devbind --status` lists them"
                )
            }
            DevbindError::VfioPciNotLoaded { path } => write!(
                f,
                "the vfio-pci driver is not loaded ({} does not exist); load it with \
                 `sudo modprobe vfio-pci` and try again",
                path.display()
            ),
            DevbindError::ActiveInterface {
                bdf,
                driver,
                interfaces,
            } => {
                write!(
                f,
                "{bdf} carries network interface{s} {list} that {is} up; taking it from {driver} \
                 would cut {their} traffic (and any SSH session over {it}). Take {it} down first \
                 (`sudo ip link set {first} down`) or pass --force",
                s = if interfaces.len() == 1 { "" } else { "s" },
                list = interfaces.join(", "),
                is = if interfaces.len() == 1 { "is" } else { "are" },
                their = if interfaces.len() == 1 { "its" } else { "their" },
                it = if interfaces.len() == 1 { "it" } else { "them" },
                first = interfaces.first().map_or("IFNAME", String::as_str),
            )
            }
            DevbindError::Malformed {
                path,
                content,
                expected,
            } => write!(
                f,
                "{} holds {content:?}, expected {expected}; is the sysfs root right?",
                path.display()
            ),
            DevbindError::Io {
                action,
                path,
                source,
            } => {
                write!(f, "could not {action} {}: {source}", path.display())?;
                if source.kind() == io::ErrorKind::PermissionDenied {
                    write!(f, "; run as root (for example with sudo)")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for DevbindError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DevbindError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// A sysfs tree: `/sys` on a real host, or a fake one in tests. Every read and write of this
/// module goes through it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sysfs {
    root: PathBuf,
}

impl Default for Sysfs {
    /// The host's sysfs, [`DEFAULT_SYSFS_ROOT`].
    fn default() -> Self {
        Self::new(DEFAULT_SYSFS_ROOT)
    }
}

impl Sysfs {
    /// A sysfs tree rooted at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn devices_dir(&self) -> PathBuf {
        self.root.join("bus/pci/devices")
    }

    fn device_dir(&self, bdf: Bdf) -> PathBuf {
        self.devices_dir().join(bdf.to_string())
    }

    fn vfio_pci_dir(&self) -> PathBuf {
        self.root.join("bus/pci/drivers").join(VFIO_PCI_DRIVER)
    }

    fn iommu_groups_dir(&self) -> PathBuf {
        self.root.join("kernel/iommu_groups")
    }

    /// Whether the `vfio-pci` driver is loaded.
    pub fn vfio_pci_loaded(&self) -> bool {
        self.vfio_pci_dir().is_dir()
    }

    /// How many IOMMU groups exist (`0` when the IOMMU is off).
    pub fn iommu_group_count(&self) -> Result<usize, DevbindError> {
        let dir = self.iommu_groups_dir();
        match fs::read_dir(&dir) {
            Ok(entries) => Ok(entries.filter_map(Result::ok).count()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(0),
            Err(source) => Err(io_error("list", &dir, source)),
        }
    }

    /// Everything `--status` reports.
    pub fn status(&self) -> Result<Status, DevbindError> {
        Ok(Status {
            functions: self.connectx_functions()?,
            iommu_groups: self.iommu_group_count()?,
            vfio_pci_loaded: self.vfio_pci_loaded(),
        })
    }

    /// Every ConnectX function, sorted by address. Entries whose vendor or device id cannot be
    /// read are skipped; errors reading a ConnectX function are returned.
    pub fn connectx_functions(&self) -> Result<Vec<PciFunction>, DevbindError> {
        let dir = self.devices_dir();
        let entries = fs::read_dir(&dir).map_err(|source| {
            if source.kind() == io::ErrorKind::NotFound {
                DevbindError::NoPciBus { path: dir.clone() }
            } else {
                io_error("list", &dir, source)
            }
        })?;
        let mut functions = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|source| io_error("list", &dir, source))?;
            let Some(bdf) = entry.file_name().to_str().and_then(|n| Bdf::parse(n).ok()) else {
                continue;
            };
            let path = entry.path();
            let ids = (
                read_hex_u16(&path.join("vendor")),
                read_hex_u16(&path.join("device")),
            );
            let (Ok(vendor), Ok(device)) = ids else {
                continue;
            };
            if connectx_model(vendor, device).is_some() {
                functions.push(self.function(bdf)?);
            }
        }
        functions.sort_by_key(|f| f.bdf);
        Ok(functions)
    }

    /// What sysfs says about the function at `bdf`, ConnectX or not.
    pub fn function(&self, bdf: Bdf) -> Result<PciFunction, DevbindError> {
        let dev = self.device_dir(bdf);
        if !dev.is_dir() {
            let devices = self.devices_dir();
            return Err(if devices.is_dir() {
                DevbindError::NoSuchFunction { bdf, path: dev }
            } else {
                DevbindError::NoPciBus { path: devices }
            });
        }
        let vendor = read_hex_u16(&dev.join("vendor"))?;
        let device = read_hex_u16(&dev.join("device"))?;
        let class = match read_hex(&dev.join("class")) {
            Ok(class) => Some(class),
            Err(DevbindError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                None
            }
            Err(e) => return Err(e),
        };
        let driver = link_name(&dev.join("driver"))?;
        let iommu_group = match link_name(&dev.join("iommu_group"))? {
            None => None,
            Some(name) => Some(name.parse().map_err(|_| DevbindError::Malformed {
                path: dev.join("iommu_group"),
                content: name,
                expected: "a link to an IOMMU group directory named by its number",
            })?),
        };
        let interfaces = read_interfaces(&dev.join("net"))?;
        Ok(PciFunction {
            bdf,
            vendor,
            device,
            class,
            driver,
            iommu_group,
            interfaces,
        })
    }

    /// The functions that share `function`'s IOMMU group and are bound to a driver that keeps
    /// VFIO from opening it, sorted by address; empty when it has no group or is alone in it.
    pub fn group_conflicts(
        &self,
        function: &PciFunction,
    ) -> Result<Vec<GroupMember>, DevbindError> {
        let Some(group) = function.iommu_group else {
            return Ok(Vec::new());
        };
        let dir = self
            .iommu_groups_dir()
            .join(group.to_string())
            .join("devices");
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(io_error("list", &dir, source)),
        };
        let mut others = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|source| io_error("list", &dir, source))?;
            let Some(bdf) = entry.file_name().to_str().and_then(|n| Bdf::parse(n).ok()) else {
                continue;
            };
            if bdf == function.bdf {
                continue;
            }
            let dev = self.device_dir(bdf);
            let Some(driver) = link_name(&dev.join("driver"))? else {
                continue;
            };
            if driver_allows_vfio_group(&driver) {
                continue;
            }
            let model = match (
                read_hex_u16(&dev.join("vendor")),
                read_hex_u16(&dev.join("device")),
            ) {
                (Ok(vendor), Ok(device)) => connectx_model(vendor, device),
                _ => None,
            };
            others.push(GroupMember { bdf, driver, model });
        }
        others.sort_by_key(|m| m.bdf);
        Ok(others)
    }

    /// Binds the ConnectX function at `bdf` to `vfio-pci`: writes its address to its driver's
    /// `unbind` (when it has a driver), `vfio-pci` to its `driver_override` and its address to
    /// `bus/pci/drivers_probe`, then reads back which driver holds it.
    ///
    /// Refuses a function that is not a ConnectX, and one carrying a network interface that is
    /// up unless `force` is set. Nothing is written when the function is already bound to
    /// `vfio-pci`. Warns when other functions in its IOMMU group are bound to other drivers.
    pub fn bind_vfio(&self, bdf: Bdf, force: bool) -> Result<BindReport, DevbindError> {
        let function = self.function(bdf)?;
        if function.model().is_none() {
            return Err(DevbindError::NotConnectX { function });
        }
        let mut warnings = Vec::new();
        match function.iommu_group {
            None => warnings.push(Warning::NoIommuGroup { bdf }),
            Some(group) => {
                let others = self.group_conflicts(&function)?;
                if !others.is_empty() {
                    warnings.push(Warning::SharedIommuGroup { group, others });
                }
            }
        }
        if function.is_bound_to_vfio_pci() {
            return Ok(BindReport {
                function,
                outcome: BindOutcome::AlreadyBound,
                warnings,
            });
        }
        if !self.vfio_pci_loaded() {
            return Err(DevbindError::VfioPciNotLoaded {
                path: self.vfio_pci_dir(),
            });
        }
        self.check_interfaces(&function, force, &mut warnings)?;

        let dev = self.device_dir(bdf);
        let address = bdf.to_string();
        if function.driver.is_some() {
            write_attr(&dev.join("driver/unbind"), &address)?;
        }
        write_attr(&dev.join("driver_override"), VFIO_PCI_DRIVER)?;
        write_attr(&self.root.join("bus/pci/drivers_probe"), &address)?;

        let driver_now = link_name(&dev.join("driver"))?;
        let previous_driver = function.driver.clone();
        let outcome = if driver_now.as_deref() == Some(VFIO_PCI_DRIVER) {
            BindOutcome::Bound { previous_driver }
        } else {
            BindOutcome::NotTaken {
                previous_driver,
                driver_now,
            }
        };
        Ok(BindReport {
            function,
            outcome,
            warnings,
        })
    }

    /// Unbinds the ConnectX function at `bdf` from its driver (writing its address to the
    /// driver's `unbind`) and clears its `driver_override` (writing a newline), so that the next
    /// probe picks its usual driver.
    ///
    /// Refuses a function that is not a ConnectX, and one carrying a network interface that is
    /// up unless `force` is set.
    pub fn unbind(&self, bdf: Bdf, force: bool) -> Result<UnbindReport, DevbindError> {
        let function = self.function(bdf)?;
        if function.model().is_none() {
            return Err(DevbindError::NotConnectX { function });
        }
        let mut warnings = Vec::new();
        self.check_interfaces(&function, force, &mut warnings)?;
        let dev = self.device_dir(bdf);
        let outcome = match &function.driver {
            Some(driver) => {
                write_attr(&dev.join("driver/unbind"), &bdf.to_string())?;
                UnbindOutcome::Unbound {
                    previous_driver: driver.clone(),
                }
            }
            None => UnbindOutcome::NotBound,
        };
        write_attr(&dev.join("driver_override"), "\n")?;
        Ok(UnbindReport {
            function,
            outcome,
            warnings,
        })
    }

    /// Refuses to take a function carrying up interfaces from its driver unless `force` is set,
    /// in which case it adds a warning.
    fn check_interfaces(
        &self,
        function: &PciFunction,
        force: bool,
        warnings: &mut Vec<Warning>,
    ) -> Result<(), DevbindError> {
        let Some(driver) = &function.driver else {
            return Ok(());
        };
        let interfaces = function.active_interfaces();
        if interfaces.is_empty() {
            return Ok(());
        }
        if !force {
            return Err(DevbindError::ActiveInterface {
                bdf: function.bdf,
                driver: driver.clone(),
                interfaces,
            });
        }
        warnings.push(Warning::ActiveInterfaceForced {
            bdf: function.bdf,
            interfaces,
        });
        Ok(())
    }
}

fn io_error(action: &str, path: &Path, source: io::Error) -> DevbindError {
    DevbindError::Io {
        action: action.to_string(),
        path: path.to_path_buf(),
        source,
    }
}

/// Reads a sysfs file holding one hexadecimal number (`0x15b3\n`).
fn read_hex(path: &Path) -> Result<u32, DevbindError> {
    let text = fs::read_to_string(path).map_err(|source| io_error("read", path, source))?;
    let trimmed = text.trim();
    let digits = trimmed
        .strip_prefix("0x")
        .or_else(|| trimmed.strip_prefix("0X"))
        .unwrap_or(trimmed);
    u32::from_str_radix(digits, 16).map_err(|_| DevbindError::Malformed {
        path: path.to_path_buf(),
        content: text.clone(),
        expected: "a hexadecimal number such as 0x15b3",
    })
}

/// Reads a sysfs file holding a 16-bit hexadecimal id (`vendor`, `device`).
fn read_hex_u16(path: &Path) -> Result<u16, DevbindError> {
    let value = read_hex(path)?;
    u16::try_from(value).map_err(|_| DevbindError::Malformed {
        path: path.to_path_buf(),
        content: format!("{value:#x}"),
        expected: "a 16-bit PCI id such as 0x15b3",
    })
}

/// The last component of a symbolic link's target (`driver` → `mlx5_core`), or `None` when the
/// link does not exist.
fn link_name(path: &Path) -> Result<Option<String>, DevbindError> {
    match fs::read_link(path) {
        Ok(target) => match target.file_name().and_then(|n| n.to_str()) {
            Some(name) => Ok(Some(name.to_string())),
            None => Err(DevbindError::Malformed {
                path: path.to_path_buf(),
                content: target.display().to_string(),
                expected: "a link whose target ends in a name",
            }),
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(io_error("read the link", path, source)),
    }
}

/// The network interfaces under a function's `net` directory, sorted by name.
fn read_interfaces(net: &Path) -> Result<Vec<NetInterface>, DevbindError> {
    let entries = match fs::read_dir(net) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(io_error("list", net, source)),
    };
    let mut interfaces = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| io_error("list", net, source))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let operstate = fs::read_to_string(entry.path().join("operstate"))
            .ok()
            .map(|s| s.trim().to_string());
        interfaces.push(NetInterface { name, operstate });
    }
    interfaces.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(interfaces)
}

/// Writes `value` to an existing sysfs attribute in one write (sysfs files are never created).
fn write_attr(path: &Path, value: &str) -> Result<(), DevbindError> {
    let action = || {
        if value == "\n" {
            "write a newline to".to_string()
        } else {
            format!("write {value:?} to")
        }
    };
    let mut file = fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .map_err(|source| io_error(&action(), path, source))?;
    file.write_all(value.as_bytes())
        .map_err(|source| io_error(&action(), path, source))
}
