//! PCI addresses, the ConnectX device list, and what sysfs says about a function: its IDs, its
//! driver and its IOMMU group.

use std::io;
use std::path::Path;

use super::error::{hex, VfioError};
pub use super::error::{GroupMember, PciAddress};
use super::sys::{VfioSys, SYSFS_IOMMU_GROUPS};

/// PCI vendor ID of Mellanox Technologies (NVIDIA networking).
pub const MELLANOX_VENDOR_ID: u16 = 0x15b3;

/// ConnectX functions cxdirect drives: (PCI device ID, product).
pub const CONNECTX_DEVICES: &[(u16, &str)] = &[
    (0x1013, "ConnectX-4"),
    (0x1014, "ConnectX-4 virtual function"),
    (0x1015, "ConnectX-4 Lx"),
    (0x1016, "ConnectX-4 Lx virtual function"),
    (0x1017, "ConnectX-5"),
    (0x1018, "ConnectX-5 virtual function"),
    (0x1019, "ConnectX-5 Ex"),
    (0x101a, "ConnectX-5 Ex virtual function"),
    (0x101b, "ConnectX-6"),
    (0x101c, "ConnectX-6 virtual function"),
    (0x101d, "ConnectX-6 Dx"),
    (0x101e, "ConnectX family virtual function"),
    (0x101f, "ConnectX-6 Lx"),
    (0x1021, "ConnectX-7"),
    (0x1023, "ConnectX-8"),
];

/// The product name of a ConnectX function, or `None` when the IDs are not one cxdirect drives.
pub fn connectx_model(vendor: u16, device: u16) -> Option<&'static str> {
    if vendor != MELLANOX_VENDOR_ID {
        return None;
    }
    CONNECTX_DEVICES
        .iter()
        .find(|(id, _)| *id == device)
        .map(|(_, name)| *name)
}

/// Drivers that expose the vfio-pci interface: vfio-pci itself and the mlx5 variant driver.
pub const VFIO_PCI_DRIVERS: &[&str] = &["vfio-pci", "mlx5_vfio_pci"];

/// Drivers that leave a function harmless to its IOMMU group's other members.
const GROUP_FRIENDLY_DRIVERS: &[&str] = &["vfio-pci", "mlx5_vfio_pci", "pci-stub"];

/// The shell commands that hand `bdf`, now bound to `driver`, to vfio-pci.
pub fn bind_commands(bdf: PciAddress, driver: Option<&str>) -> String {
    let dir = bdf.sysfs_path();
    let dir = dir.display();
    let mut out = String::from("  modprobe vfio-pci\n");
    if driver.is_some() {
        out.push_str(&format!("  echo {bdf} > {dir}/driver/unbind\n"));
    }
    out.push_str(&format!("  echo vfio-pci > {dir}/driver_override\n"));
    out.push_str(&format!("  echo {bdf} > /sys/bus/pci/drivers_probe\n"));
    out
}

/// The last component of a symbolic link's target (`../../bus/pci/drivers/vfio-pci` →
/// `vfio-pci`), or `None` when the link does not exist.
pub(crate) fn link_name<S: VfioSys>(sys: &S, link: &Path) -> io::Result<Option<String>> {
    match sys.read_link(link) {
        Ok(target) => Ok(target.file_name().map(|n| n.to_string_lossy().into_owned())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Reads a sysfs ID attribute such as `0x15b3`.
pub(crate) fn read_id<S: VfioSys>(sys: &S, bdf: PciAddress, attr: &str) -> Result<u16, VfioError> {
    let path = bdf.sysfs_path().join(attr);
    let text = sys
        .read_to_string(&path)
        .map_err(|e| VfioError::os(bdf, format!("reading {}", path.display()), e))?;
    let t = text.trim();
    let digits = t
        .strip_prefix("0x")
        .or_else(|| t.strip_prefix("0X"))
        .unwrap_or(t);
    hex(digits, 4).map(|v| v as u16).ok_or_else(|| {
        VfioError::os(
            bdf,
            format!("parsing {}", path.display()),
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{t:?} is not a 16-bit hex ID"),
            ),
        )
    })
}

/// What sysfs says about a function that matters before VFIO is touched.
#[derive(Debug, Clone)]
pub(crate) struct SysfsFunction {
    /// The IOMMU group number, if it has one.
    pub group: Option<String>,
}

/// Checks that `bdf` exists, is a ConnectX and is bound to a vfio-pci driver; returns its IOMMU
/// group.
pub(crate) fn check_function<S: VfioSys>(
    sys: &S,
    bdf: PciAddress,
) -> Result<SysfsFunction, VfioError> {
    check_vfio_function(sys, bdf, true)
}

/// Checks that `bdf` exists, is a ConnectX when `connectx_only`, and is bound to a vfio-pci
/// driver; returns its IOMMU group. Peer devices (memory another device exposes in a BAR) may
/// be anything vfio-pci drives.
pub(crate) fn check_vfio_function<S: VfioSys>(
    sys: &S,
    bdf: PciAddress,
    connectx_only: bool,
) -> Result<SysfsFunction, VfioError> {
    let dir = bdf.sysfs_path();
    if !sys.exists(&dir) {
        return Err(VfioError::NoSuchDevice {
            bdf,
            path: dir.display().to_string(),
        });
    }
    let vendor = read_id(sys, bdf, "vendor")?;
    let device = read_id(sys, bdf, "device")?;
    if connectx_only && connectx_model(vendor, device).is_none() {
        return Err(VfioError::NotConnectX {
            bdf,
            vendor,
            device,
        });
    }
    let driver_link = dir.join("driver");
    let driver = link_name(sys, &driver_link)
        .map_err(|e| VfioError::os(bdf, format!("reading {}", driver_link.display()), e))?;
    if !driver
        .as_deref()
        .is_some_and(|d| VFIO_PCI_DRIVERS.contains(&d))
    {
        let commands = bind_commands(bdf, driver.as_deref());
        return Err(VfioError::NotBoundToVfio {
            bdf,
            driver,
            commands,
        });
    }
    let group_link = dir.join("iommu_group");
    let group = link_name(sys, &group_link)
        .map_err(|e| VfioError::os(bdf, format!("reading {}", group_link.display()), e))?;
    Ok(SysfsFunction { group })
}

/// Whether IOMMU group `group` is the kernel's no-IOMMU stand-in (named `vfio-noiommu`).
pub(crate) fn is_noiommu_group<S: VfioSys>(sys: &S, group: &str) -> bool {
    let path = Path::new(SYSFS_IOMMU_GROUPS).join(group).join("name");
    sys.read_to_string(&path)
        .is_ok_and(|name| name.trim() == "vfio-noiommu")
}

/// The devices of IOMMU group `group` other than `bdf` that keep the group from being viable
/// (bound to a host driver); when none is found that way, all the others.
pub(crate) fn blocking_members<S: VfioSys>(
    sys: &S,
    bdf: PciAddress,
    group: &str,
) -> Vec<GroupMember> {
    let dir = Path::new(SYSFS_IOMMU_GROUPS).join(group).join("devices");
    let me = bdf.to_string();
    let names = sys.read_dir(&dir).unwrap_or_default();
    let others: Vec<GroupMember> = names
        .into_iter()
        .filter(|n| *n != me)
        .map(|address| {
            let driver = link_name(sys, &dir.join(&address).join("driver"))
                .ok()
                .flatten();
            GroupMember { address, driver }
        })
        .collect();
    let blocking: Vec<GroupMember> = others
        .iter()
        .filter(|m| {
            m.driver
                .as_deref()
                .is_some_and(|d| !GROUP_FRIENDLY_DRIVERS.contains(&d))
        })
        .cloned()
        .collect();
    if blocking.is_empty() {
        others
    } else {
        blocking
    }
}
