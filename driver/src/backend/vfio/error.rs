//! [`VfioError`]: why a function could not be opened through VFIO, and what to do about it;
//! and the [`PciAddress`] and [`GroupMember`] its messages name.

use std::fmt::{self, Write as _};
use std::io;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use thiserror::Error;

use super::sys::SYSFS_PCI_DEVICES;

/// Why opening a PCI function through VFIO failed. Every message names the function and says
/// what the user can do.
#[derive(Debug, Error)]
pub enum VfioError {
    /// The PCI address could not be parsed.
    #[error(
        "bad PCI address {input:?}: {reason}; write it as DOMAIN:BUS:DEVICE.FUNCTION, e.g. \
         0000:06:00.0 (or 06:00.0 for domain 0), as `lspci -D` prints it"
    )]
    BadAddress {
        /// What was given.
        input: String,
        /// What is wrong with it.
        reason: &'static str,
    },

    /// A device spec option was not recognised.
    #[error(
        "bad device spec {input:?}: {reason}; write it as [pci:]DOMAIN:BUS:DEVICE.FUNCTION \
         optionally followed by ,iommu=auto|type1|iommufd|noiommu"
    )]
    BadSpec {
        /// What was given.
        input: String,
        /// What is wrong with it.
        reason: String,
    },

    /// An IOMMU mode name was not recognised.
    #[error("unknown IOMMU mode {input:?}: use auto, type1, iommufd or noiommu")]
    BadMode {
        /// What was given.
        input: String,
    },

    /// No such PCI function in sysfs.
    #[error(
        "no PCI function {bdf}: {path} does not exist; list ConnectX functions with \
         `lspci -D -d 15b3:`"
    )]
    NoSuchDevice {
        /// The function asked for.
        bdf: PciAddress,
        /// The sysfs path looked at.
        path: String,
    },

    /// The function is not an NVIDIA/Mellanox ConnectX.
    #[error(
        "{bdf} is not a ConnectX function (vendor {vendor:#06x}, device {device:#06x}); \
         cxdirect drives NVIDIA/Mellanox ConnectX-4 to ConnectX-8 functions (vendor 0x15b3), \
         find them with `lspci -D -d 15b3:`"
    )]
    NotConnectX {
        /// The function.
        bdf: PciAddress,
        /// Its vendor ID.
        vendor: u16,
        /// Its device ID.
        device: u16,
    },

    /// The function is bound to another driver (or to none), not vfio-pci.
    #[error(
        "{bdf} is {current}, not to vfio-pci; hand it to VFIO by running, as root:\n\
         {commands}or simply `cxdirect-devbind --bind {bdf}`",
        current = describe_driver(.driver.as_deref())
    )]
    NotBoundToVfio {
        /// The function.
        bdf: PciAddress,
        /// The driver it is bound to, if any.
        driver: Option<String>,
        /// The shell commands that bind it to vfio-pci, one per line.
        commands: String,
    },

    /// The function has no IOMMU group: the kernel runs without an IOMMU.
    #[error(
        "{bdf} has no IOMMU group, so the kernel has no IOMMU for it: enable the IOMMU \
         (intel_iommu=on or amd_iommu=on on the kernel command line, VT-d/AMD-Vi in the \
         firmware setup), or use --iommu-mode noiommu (unsafe: the device can then DMA to all \
         memory)"
    )]
    NoIommu {
        /// The function.
        bdf: PciAddress,
    },

    /// Other devices share the function's IOMMU group and are bound to host drivers.
    #[error(
        "IOMMU group {group} of {bdf} is not viable: {others} must be bound to vfio-pci or \
         unbound from their drivers (echo ADDRESS > /sys/bus/pci/devices/ADDRESS/driver/unbind) \
         before {bdf} can be used",
        others = describe_members(.others)
    )]
    GroupNotViable {
        /// The function.
        bdf: PciAddress,
        /// The IOMMU group number.
        group: String,
        /// The other devices in the group and their drivers.
        others: Vec<GroupMember>,
    },

    /// A device node could not be opened for lack of permission.
    #[error(
        "no permission on {path} (needed for {bdf}): run as root, or give your user the node \
         (chown $USER {path})"
    )]
    PermissionDenied {
        /// The function.
        bdf: PciAddress,
        /// The node that could not be opened.
        path: String,
    },

    /// Another process holds the group or device.
    #[error(
        "{path} is busy: another process (a virtual machine, or another cxdirect program) has \
         {bdf} open; stop it first"
    )]
    Busy {
        /// The function.
        bdf: PciAddress,
        /// The node or request that reported it.
        path: String,
    },

    /// iommufd was asked for but this kernel or function cannot use it.
    #[error("iommufd was asked for {bdf}, but {reason}; use --iommu-mode type1 (or auto)")]
    NoIommufd {
        /// The function.
        bdf: PciAddress,
        /// What is missing.
        reason: String,
    },

    /// No-IOMMU mode was asked for but cannot be used.
    #[error("no-IOMMU mode was asked for {bdf}, but {reason}")]
    NoIommuUnavailable {
        /// The function.
        bdf: PciAddress,
        /// What is missing, and what to do.
        reason: String,
    },

    /// The locked-memory limit is too low to pin the driver's DMA memory.
    #[error(
        "the locked-memory limit is {limit} bytes, but cxdirect pins at least {needed} bytes for \
         DMA: raise it (`ulimit -l unlimited`, or a memlock line in \
         /etc/security/limits.conf) or run as root"
    )]
    MemlockTooLow {
        /// The current soft `RLIMIT_MEMLOCK` in bytes.
        limit: u64,
        /// The least the driver needs.
        needed: u64,
    },

    /// The kernel's VFIO interface is one this driver does not speak.
    #[error("{bdf}: unsupported VFIO interface: {reason}")]
    UnsupportedApi {
        /// The function.
        bdf: PciAddress,
        /// What was found.
        reason: String,
    },

    /// The function has no BAR0.
    #[error(
        "{bdf} exposes no BAR0 through VFIO; a ConnectX function always has one: check \
         `lspci -vv -s {bdf}` and the firmware"
    )]
    Bar0Missing {
        /// The function.
        bdf: PciAddress,
    },

    /// BAR0 is too small to hold the ConnectX initialization segment.
    #[error(
        "BAR0 of {bdf} is {size:#x} bytes, smaller than the {min:#x} bytes of registers the \
         driver needs; check `lspci -vv -s {bdf}`"
    )]
    Bar0TooSmall {
        /// The function.
        bdf: PciAddress,
        /// BAR0 size in bytes.
        size: u64,
        /// The least the driver needs.
        min: u64,
    },

    /// A system call failed.
    #[error("{bdf}: {what} failed: {source}{hint}")]
    Os {
        /// The function.
        bdf: PciAddress,
        /// The call (ioctl name, or the operation and path).
        what: String,
        /// The error the kernel returned.
        #[source]
        source: io::Error,
        /// Advice, starting with "; ", or empty.
        hint: String,
    },
}

impl VfioError {
    /// An [`Os`](VfioError::Os) error without advice.
    pub(crate) fn os(bdf: PciAddress, what: impl Into<String>, source: io::Error) -> Self {
        Self::Os {
            bdf,
            what: what.into(),
            source,
            hint: String::new(),
        }
    }

    /// An [`Os`](VfioError::Os) error with advice.
    pub(crate) fn os_hint(
        bdf: PciAddress,
        what: impl Into<String>,
        source: io::Error,
        hint: &str,
    ) -> Self {
        Self::Os {
            bdf,
            what: what.into(),
            source,
            hint: format!("; {hint}"),
        }
    }
}

fn describe_driver(driver: Option<&str>) -> String {
    match driver {
        Some(d) => format!("bound to {d}"),
        None => "not bound to any driver".to_string(),
    }
}

fn describe_members(others: &[GroupMember]) -> String {
    if others.is_empty() {
        return "the other devices in the group (none could be listed from sysfs)".to_string();
    }
    let mut out = String::new();
    for (i, m) in others.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = match &m.driver {
            Some(d) => write!(out, "{} (bound to {d})", m.address),
            None => write!(out, "{} (no driver)", m.address),
        };
    }
    out
}

/// Opens a VFIO or iommufd node for `bdf`, turning the errors users meet into advice.
pub(crate) fn open_node<S: super::sys::VfioSys>(
    sys: &S,
    bdf: PciAddress,
    path: &std::path::Path,
) -> Result<S::Fd, VfioError> {
    sys.open(path, super::sys::Access::ReadWrite).map_err(|e| {
        let shown = path.display().to_string();
        match e.raw_os_error() {
            Some(libc::EACCES) | Some(libc::EPERM) => {
                VfioError::PermissionDenied { bdf, path: shown }
            }
            Some(libc::EBUSY) => VfioError::Busy { bdf, path: shown },
            Some(libc::ENOENT) => VfioError::os_hint(
                bdf,
                format!("open {shown}"),
                e,
                "is the vfio-pci module loaded (modprobe vfio-pci)?",
            ),
            _ => VfioError::os(bdf, format!("open {shown}"), e),
        }
    })
}

/// A PCI function address: domain, bus, device, function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PciAddress {
    domain: u32,
    bus: u8,
    device: u8,
    function: u8,
}

impl PciAddress {
    /// An address from its parts; `None` when `device` > 31 or `function` > 7.
    pub fn new(domain: u32, bus: u8, device: u8, function: u8) -> Option<Self> {
        (device < 32 && function < 8).then_some(Self {
            domain,
            bus,
            device,
            function,
        })
    }

    /// Parses `DOMAIN:BUS:DEVICE.FUNCTION` (`0000:06:00.0`) or `BUS:DEVICE.FUNCTION` (`06:00.0`,
    /// domain 0), in hexadecimal, either case; surrounding whitespace is ignored.
    pub fn parse(input: &str) -> Result<Self, VfioError> {
        let bad = |reason| VfioError::BadAddress {
            input: input.to_string(),
            reason,
        };
        let s = input.trim();
        if s.is_empty() {
            return Err(bad("it is empty"));
        }
        let (head, function) = s
            .rsplit_once('.')
            .ok_or_else(|| bad("the \".FUNCTION\" part is missing"))?;
        let parts: Vec<&str> = head.split(':').collect();
        let (domain, bus, device) = match parts.as_slice() {
            [bus, device] => ("0", *bus, *device),
            [domain, bus, device] => (*domain, *bus, *device),
            _ => {
                return Err(bad(
                    "it needs two or three ':'-separated fields before the '.'",
                ))
            }
        };
        let domain = hex(domain, 8).ok_or_else(|| bad("the domain is not 1 to 8 hex digits"))?;
        let bus = hex(bus, 2).ok_or_else(|| bad("the bus is not 1 or 2 hex digits"))?;
        let device = hex(device, 2).ok_or_else(|| bad("the device is not 1 or 2 hex digits"))?;
        let function = hex(function, 1).ok_or_else(|| bad("the function is not one hex digit"))?;
        if device > 0x1f {
            return Err(bad("the device number is above 1f"));
        }
        if function > 7 {
            return Err(bad("the function number is above 7"));
        }
        // The range checks above make these conversions lossless.
        Ok(Self {
            domain,
            bus: bus as u8,
            device: device as u8,
            function: function as u8,
        })
    }

    /// PCI domain (segment).
    pub fn domain(&self) -> u32 {
        self.domain
    }

    /// Bus number.
    pub fn bus(&self) -> u8 {
        self.bus
    }

    /// Device number (0..=31).
    pub fn device(&self) -> u8 {
        self.device
    }

    /// Function number (0..=7).
    pub fn function(&self) -> u8 {
        self.function
    }

    /// The function's sysfs directory, `/sys/bus/pci/devices/0000:06:00.0`.
    pub fn sysfs_path(&self) -> PathBuf {
        Path::new(SYSFS_PCI_DEVICES).join(self.to_string())
    }
}

/// `digits` as hexadecimal: 1 to `max` digits, nothing else (no sign, no prefix).
pub(super) fn hex(digits: &str, max: usize) -> Option<u32> {
    if digits.is_empty() || digits.len() > max || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(digits, 16).ok()
}

impl fmt::Display for PciAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

impl FromStr for PciAddress {
    type Err = VfioError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// Another device in a function's IOMMU group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMember {
    /// Its address as sysfs names it (a PCI address for PCI devices).
    pub address: String,
    /// The driver it is bound to, if any.
    pub driver: Option<String>,
}
