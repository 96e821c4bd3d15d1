//! Tests of `cxdirect-devbind` against fake sysfs trees built in a temporary directory.

use cxdirect_apps::devbind::{
    connectx_model, Bdf, BindOutcome, DevbindError, GroupMember, Sysfs, UnbindOutcome, Warning,
};
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A fake sysfs tree shaped like the kernel's: function directories under
/// `devices/pci0000:00/`, linked from `bus/pci/devices/`, with `driver` and `iommu_group` links
/// pointing into `bus/pci/drivers/` and `kernel/iommu_groups/`. Removed on drop.
struct FakeSysfs {
    root: PathBuf,
}

impl FakeSysfs {
    /// An empty tree with the PCI bus, `drivers_probe`, the `vfio-pci` driver and an (empty)
    /// IOMMU group directory.
    fn new(name: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let root = std::env::temp_dir().join(format!(
            "cxdirect-devbind-{name}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&root);
        let fake = Self { root };
        fake.mkdir("bus/pci/devices");
        fake.mkdir("devices/pci0000:00");
        fake.mkdir("kernel/iommu_groups");
        fake.write("bus/pci/drivers_probe", "");
        fake.add_driver("vfio-pci");
        fake
    }

    fn sysfs(&self) -> Sysfs {
        Sysfs::new(&self.root)
    }

    fn mkdir(&self, rel: &str) {
        fs::create_dir_all(self.root.join(rel)).unwrap();
    }

    fn write(&self, rel: &str, contents: &str) {
        let path = self.root.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, contents).unwrap();
    }

    fn read(&self, rel: &str) -> String {
        fs::read_to_string(self.root.join(rel)).unwrap()
    }

    fn link(&self, rel: &str, target: &str) {
        let path = self.root.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        symlink(target, path).unwrap();
    }

    fn dev(bdf: &str) -> String {
        format!("devices/pci0000:00/{bdf}")
    }

    /// A driver directory with its `bind` and `unbind` files.
    fn add_driver(&self, name: &str) {
        let dir = format!("bus/pci/drivers/{name}");
        if !self.root.join(&dir).exists() {
            self.write(&format!("{dir}/bind"), "");
            self.write(&format!("{dir}/unbind"), "");
        }
    }

    fn remove_driver(&self, name: &str) {
        fs::remove_dir_all(self.root.join("bus/pci/drivers").join(name)).unwrap();
    }

    /// A PCI function with ids, class and an unset `driver_override`.
    fn add_function(&self, bdf: &str, vendor: u16, device: u16, class: u32) -> &Self {
        let dev = Self::dev(bdf);
        self.write(&format!("{dev}/vendor"), &format!("{vendor:#06x}\n"));
        self.write(&format!("{dev}/device"), &format!("{device:#06x}\n"));
        self.write(&format!("{dev}/class"), &format!("{class:#08x}\n"));
        self.write(&format!("{dev}/driver_override"), "(null)\n");
        self.link(
            &format!("bus/pci/devices/{bdf}"),
            &format!("../../../devices/pci0000:00/{bdf}"),
        );
        self
    }

    fn add_connectx5(&self, bdf: &str) -> &Self {
        self.add_function(bdf, 0x15b3, 0x1017, 0x020000)
    }

    fn bind(&self, bdf: &str, driver: &str) -> &Self {
        self.add_driver(driver);
        self.link(
            &format!("{}/driver", Self::dev(bdf)),
            &format!("../../../bus/pci/drivers/{driver}"),
        );
        self
    }

    fn group(&self, bdf: &str, group: u32) -> &Self {
        self.link(
            &format!("kernel/iommu_groups/{group}/devices/{bdf}"),
            &format!("../../../../devices/pci0000:00/{bdf}"),
        );
        self.link(
            &format!("{}/iommu_group", Self::dev(bdf)),
            &format!("../../../kernel/iommu_groups/{group}"),
        );
        self
    }

    fn interface(&self, bdf: &str, name: &str, operstate: &str) -> &Self {
        self.write(
            &format!("{}/net/{name}/operstate", Self::dev(bdf)),
            &format!("{operstate}\n"),
        );
        self
    }

    /// Every regular file in the tree (links not followed), relative path → contents.
    fn snapshot(&self) -> BTreeMap<String, String> {
        fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
            for entry in fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                let meta = fs::symlink_metadata(&path).unwrap();
                if meta.is_dir() {
                    walk(root, &path, out);
                } else if meta.is_file() {
                    let rel = path
                        .strip_prefix(root)
                        .unwrap()
                        .to_string_lossy()
                        .into_owned();
                    out.insert(rel, fs::read_to_string(&path).unwrap());
                }
            }
        }
        let mut out = BTreeMap::new();
        walk(&self.root, &self.root, &mut out);
        out
    }

    /// The files whose contents differ between two snapshots, with their new contents.
    fn changes(
        before: &BTreeMap<String, String>,
        after: &BTreeMap<String, String>,
    ) -> BTreeMap<String, String> {
        assert_eq!(
            before.keys().collect::<Vec<_>>(),
            after.keys().collect::<Vec<_>>(),
            "files were created or removed"
        );
        after
            .iter()
            .filter(|(path, contents)| before.get(*path) != Some(contents))
            .map(|(path, contents)| (path.clone(), contents.clone()))
            .collect()
    }
}

impl Drop for FakeSysfs {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}

fn bdf(text: &str) -> Bdf {
    Bdf::parse(text).unwrap()
}

fn expected(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

const PF0: &str = "0000:06:00.0";
const PF1: &str = "0000:06:00.1";

#[test]
fn bdf_accepts_both_spellings_and_prints_the_kernels() {
    let full = bdf("0000:06:00.0");
    assert_eq!(full, bdf("06:00.0"));
    assert_eq!(full.to_string(), "0000:06:00.0");
    let upper = bdf("0001:AF:1F.7");
    assert_eq!(
        (upper.domain, upper.bus, upper.device, upper.function),
        (1, 0xaf, 0x1f, 7)
    );
    assert_eq!(upper.to_string(), "0001:af:1f.7");
    assert_eq!(
        "10000:e1:00.0".parse::<Bdf>().unwrap().to_string(),
        "10000:e1:00.0"
    );
}

#[test]
fn bad_bdf_says_what_is_wrong_and_how_to_write_one() {
    for (input, reason) in [
        ("", "it is empty"),
        ("06:00", "\".FUNCTION\" part is missing"),
        ("06.0", "two or three"),
        ("0:0:06:00.0", "two or three"),
        ("06:zz.0", "the device is not 1 or 2 hex digits"),
        ("06:20.0", "the device number is above 1f"),
        ("06:00.8", "the function number is above 7"),
        ("106:00.0", "the bus is not 1 or 2 hex digits"),
        ("06:00.", "the function is not one hex digit"),
        ("eth0", "\".FUNCTION\" part is missing"),
    ] {
        let err = Bdf::parse(input).unwrap_err();
        assert!(
            matches!(err, DevbindError::BadBdf { .. }),
            "{input}: {err:?}"
        );
        let message = err.to_string();
        assert!(
            message.contains(&format!("'{input}' is not a PCI address")),
            "{message}"
        );
        assert!(message.contains(reason), "{input}: {message}");
        assert!(message.contains("0000:06:00.0 or 06:00.0"), "{message}");
    }
}

#[test]
fn model_table() {
    assert_eq!(connectx_model(0x15b3, 0x1017), Some("ConnectX-5"));
    assert_eq!(connectx_model(0x15b3, 0x101d), Some("ConnectX-6 Dx"));
    assert_eq!(
        connectx_model(0x15b3, 0x101e),
        Some("ConnectX family virtual function")
    );
    assert_eq!(connectx_model(0x15b3, 0x1023), Some("ConnectX-8"));
    assert_eq!(connectx_model(0x15b3, 0xa2d6), None);
    assert_eq!(connectx_model(0x8086, 0x1017), None);
}

/// Two ConnectX-5 ports (one in use by the kernel with an interface up, one on vfio-pci), a
/// ConnectX-6 Dx VF with no driver and no group, and an Intel NIC that must not be listed.
fn mixed_host() -> FakeSysfs {
    let fake = FakeSysfs::new("status");
    fake.add_connectx5(PF0)
        .bind(PF0, "mlx5_core")
        .group(PF0, 14)
        .interface(PF0, "ens1f0np0", "up");
    fake.add_connectx5(PF1).bind(PF1, "vfio-pci").group(PF1, 15);
    fake.add_function("0000:06:00.2", 0x15b3, 0x101e, 0x020000);
    fake.add_function("0000:00:1f.6", 0x8086, 0x15b7, 0x020000)
        .bind("0000:00:1f.6", "e1000e")
        .group("0000:00:1f.6", 3);
    fake
}

#[test]
fn status_lists_connectx_functions_with_driver_and_group() {
    let fake = mixed_host();
    let status = fake.sysfs().status().unwrap();
    let listed: Vec<_> = status
        .functions
        .iter()
        .map(|f| {
            (
                f.bdf.to_string(),
                f.model(),
                f.driver.clone(),
                f.iommu_group,
            )
        })
        .collect();
    assert_eq!(
        listed,
        vec![
            (
                PF0.to_string(),
                Some("ConnectX-5"),
                Some("mlx5_core".to_string()),
                Some(14)
            ),
            (
                PF1.to_string(),
                Some("ConnectX-5"),
                Some("vfio-pci".to_string()),
                Some(15)
            ),
            (
                "0000:06:00.2".to_string(),
                Some("ConnectX family virtual function"),
                None,
                None
            ),
        ]
    );
    assert_eq!(status.functions[0].active_interfaces(), vec!["ens1f0np0"]);
    assert_eq!(status.iommu_groups, 3);
    assert!(status.iommu_enabled());
    assert!(status.vfio_pci_loaded);

    let text = status.to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 6, "{text}");
    let words = |line: &str| {
        line.split_whitespace()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        words(lines[0]),
        ["BDF", "MODEL", "DRIVER", "IOMMU", "GROUP", "INTERFACES"]
    );
    assert_eq!(
        words(lines[1]),
        [PF0, "ConnectX-5", "mlx5_core", "14", "ens1f0np0", "(up)"]
    );
    assert_eq!(words(lines[2]), [PF1, "ConnectX-5", "vfio-pci", "15", "-"]);
    assert_eq!(
        words(lines[3]),
        [
            "0000:06:00.2",
            "ConnectX",
            "family",
            "virtual",
            "function",
            "none",
            "none",
            "-"
        ]
    );
    assert_eq!(lines[4], "IOMMU: on (3 groups)");
    assert_eq!(lines[5], "vfio-pci: loaded");
    assert!(
        !text.contains("1f.6"),
        "the Intel NIC is not listed:\n{text}"
    );
    // Columns line up.
    let column = lines[0].find("DRIVER").unwrap();
    assert!(lines[1..4].iter().all(|l| l[column - 2..column] == *"  "));
}

#[test]
fn status_says_when_iommu_is_off_and_vfio_pci_missing() {
    let fake = FakeSysfs::new("status-off");
    fake.remove_driver("vfio-pci");
    fake.add_connectx5(PF0).bind(PF0, "mlx5_core");
    let status = fake.sysfs().status().unwrap();
    assert!(!status.iommu_enabled());
    let text = status.to_string();
    assert!(text.contains("IOMMU: off"), "{text}");
    assert!(text.contains("intel_iommu=on"), "{text}");
    assert!(text.contains("vfio-pci: not loaded"), "{text}");
    assert!(text.contains("modprobe vfio-pci"), "{text}");
}

#[test]
fn status_with_no_connectx_and_a_wrong_root() {
    let fake = FakeSysfs::new("status-empty");
    let text = fake.sysfs().status().unwrap().to_string();
    assert!(text.starts_with("No ConnectX functions found"), "{text}");

    let err = Sysfs::new(fake.root.join("nowhere")).status().unwrap_err();
    assert!(matches!(err, DevbindError::NoPciBus { .. }), "{err:?}");
    assert!(err.to_string().contains("--sysfs"), "{err}");
}

#[test]
fn bind_writes_unbind_override_and_probe() {
    let fake = FakeSysfs::new("bind");
    fake.add_connectx5(PF0)
        .bind(PF0, "mlx5_core")
        .group(PF0, 14);
    let before = fake.snapshot();
    let report = fake.sysfs().bind_vfio(bdf("06:00.0"), false).unwrap();
    let changes = FakeSysfs::changes(&before, &fake.snapshot());
    assert_eq!(
        changes,
        expected(&[
            ("bus/pci/drivers/mlx5_core/unbind", PF0),
            (
                "devices/pci0000:00/0000:06:00.0/driver_override",
                "vfio-pci"
            ),
            ("bus/pci/drivers_probe", PF0),
        ])
    );
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    // No kernel moves the fake's driver link, so the tool sees the bind did not take.
    assert_eq!(
        report.outcome,
        BindOutcome::NotTaken {
            previous_driver: Some("mlx5_core".to_string()),
            driver_now: Some("mlx5_core".to_string()),
        }
    );
    assert!(!report.is_bound());
    assert!(report.to_string().contains("dmesg"), "{report}");
}

#[test]
fn bind_of_a_function_without_driver_skips_unbind() {
    let fake = FakeSysfs::new("bind-unbound");
    fake.add_connectx5(PF0).group(PF0, 14);
    let before = fake.snapshot();
    let report = fake.sysfs().bind_vfio(bdf(PF0), false).unwrap();
    let changes = FakeSysfs::changes(&before, &fake.snapshot());
    assert_eq!(
        changes,
        expected(&[
            (
                "devices/pci0000:00/0000:06:00.0/driver_override",
                "vfio-pci"
            ),
            ("bus/pci/drivers_probe", PF0),
        ])
    );
    assert_eq!(
        report.outcome,
        BindOutcome::NotTaken {
            previous_driver: None,
            driver_now: None
        }
    );
}

#[test]
fn bind_warns_without_iommu_group() {
    let fake = FakeSysfs::new("bind-nogroup");
    fake.add_connectx5(PF0).bind(PF0, "mlx5_core");
    let report = fake.sysfs().bind_vfio(bdf(PF0), false).unwrap();
    assert_eq!(
        report.warnings,
        vec![Warning::NoIommuGroup { bdf: bdf(PF0) }]
    );
    assert!(report.warnings[0].to_string().contains("IOMMU is off"));
}

#[test]
fn already_bound_writes_nothing_and_is_no_error() {
    let fake = FakeSysfs::new("already");
    fake.add_connectx5(PF0).bind(PF0, "vfio-pci").group(PF0, 14);
    let before = fake.snapshot();
    let report = fake.sysfs().bind_vfio(bdf(PF0), false).unwrap();
    assert_eq!(fake.snapshot(), before);
    assert_eq!(report.outcome, BindOutcome::AlreadyBound);
    assert!(report.is_bound());
    assert_eq!(
        report.to_string(),
        "0000:06:00.0 (ConnectX-5): already bound to vfio-pci; its VFIO group is /dev/vfio/14"
    );
}

#[test]
fn non_connectx_is_refused_and_named() {
    let fake = mixed_host();
    let before = fake.snapshot();
    let err = fake.sysfs().bind_vfio(bdf("00:1f.6"), false).unwrap_err();
    assert_eq!(fake.snapshot(), before);
    let DevbindError::NotConnectX { function } = &err else {
        panic!("expected NotConnectX, got {err:?}");
    };
    assert_eq!((function.vendor, function.device), (0x8086, 0x15b7));
    let message = err.to_string();
    for part in [
        "0000:00:1f.6 is not a ConnectX function",
        "a network controller from Intel",
        "vendor 0x8086, device 0x15b7",
        "bound to e1000e",
    ] {
        assert!(message.contains(part), "missing {part:?} in: {message}");
    }
    let err = fake.sysfs().unbind(bdf("00:1f.6"), false).unwrap_err();
    assert!(matches!(err, DevbindError::NotConnectX { .. }));
    assert_eq!(fake.snapshot(), before);
}

#[test]
fn unknown_nvidia_networking_device_is_refused() {
    let fake = FakeSysfs::new("bluefield");
    fake.add_function("0000:03:00.0", 0x15b3, 0xa2d6, 0x020000);
    let err = fake.sysfs().bind_vfio(bdf("03:00.0"), false).unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("not a ConnectX model this tool knows"),
        "{message}"
    );
    assert!(message.contains("device 0xa2d6"), "{message}");
    assert!(message.contains("with no driver"), "{message}");
}

#[test]
fn missing_function_is_reported() {
    let fake = FakeSysfs::new("missing");
    let err = fake.sysfs().bind_vfio(bdf("07:00.0"), false).unwrap_err();
    assert!(
        matches!(err, DevbindError::NoSuchFunction { .. }),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(
        message.contains("no PCI function 0000:07:00.0"),
        "{message}"
    );
    assert!(message.contains("--status"), "{message}");
}

#[test]
fn shared_group_warning_lists_the_functions_in_the_way() {
    let fake = FakeSysfs::new("group");
    fake.add_connectx5(PF0)
        .bind(PF0, "mlx5_core")
        .group(PF0, 14);
    // In the way: the other port on its kernel driver, and a USB controller.
    fake.add_connectx5(PF1)
        .bind(PF1, "mlx5_core")
        .group(PF1, 14);
    fake.add_function("0000:00:14.0", 0x8086, 0xa36d, 0x0c0330)
        .bind("0000:00:14.0", "xhci_hcd")
        .group("0000:00:14.0", 14);
    // Not in the way: a bridge on pcieport, a function with no driver, one on vfio-pci.
    fake.add_function("0000:00:1c.0", 0x8086, 0xa338, 0x060400)
        .bind("0000:00:1c.0", "pcieport")
        .group("0000:00:1c.0", 14);
    fake.add_function("0000:07:00.0", 0x1af4, 0x1000, 0x020000)
        .group("0000:07:00.0", 14);
    fake.add_connectx5("0000:08:00.0")
        .bind("0000:08:00.0", "vfio-pci")
        .group("0000:08:00.0", 14);

    let report = fake.sysfs().bind_vfio(bdf(PF0), false).unwrap();
    assert_eq!(
        report.warnings,
        vec![Warning::SharedIommuGroup {
            group: 14,
            others: vec![
                GroupMember {
                    bdf: bdf("00:14.0"),
                    driver: "xhci_hcd".to_string(),
                    model: None
                },
                GroupMember {
                    bdf: bdf(PF1),
                    driver: "mlx5_core".to_string(),
                    model: Some("ConnectX-5")
                },
            ],
        }]
    );
    let text = report.warnings[0].to_string();
    assert!(text.contains("IOMMU group 14"), "{text}");
    assert!(text.contains("VFIO will refuse"), "{text}");
    assert!(text.contains("0000:00:14.0 bound to xhci_hcd"), "{text}");
    assert!(
        text.contains("0000:06:00.1 (ConnectX-5) bound to mlx5_core"),
        "{text}"
    );
    for absent in ["1c.0", "07:00.0", "08:00.0", PF0] {
        assert!(!text.contains(absent), "{absent} listed in: {text}");
    }
}

#[test]
fn active_interface_needs_force() {
    let fake = FakeSysfs::new("active");
    fake.add_connectx5(PF0)
        .bind(PF0, "mlx5_core")
        .group(PF0, 14)
        .interface(PF0, "ens1f0np0", "up")
        .interface(PF0, "ens1f0v1", "down");
    let before = fake.snapshot();
    let err = fake.sysfs().bind_vfio(bdf(PF0), false).unwrap_err();
    assert_eq!(fake.snapshot(), before, "nothing written without --force");
    let DevbindError::ActiveInterface { interfaces, .. } = &err else {
        panic!("expected ActiveInterface, got {err:?}");
    };
    assert_eq!(interfaces, &vec!["ens1f0np0".to_string()]);
    let message = err.to_string();
    assert!(message.contains("ens1f0np0 that is up"), "{message}");
    assert!(!message.contains("ens1f0v1"), "{message}");
    assert!(message.contains("--force"), "{message}");
    assert!(message.contains("ip link set ens1f0np0 down"), "{message}");

    let err = fake.sysfs().unbind(bdf(PF0), false).unwrap_err();
    assert!(
        matches!(err, DevbindError::ActiveInterface { .. }),
        "{err:?}"
    );
    assert_eq!(fake.snapshot(), before);

    let report = fake.sysfs().bind_vfio(bdf(PF0), true).unwrap();
    assert_eq!(
        report.warnings,
        vec![Warning::ActiveInterfaceForced {
            bdf: bdf(PF0),
            interfaces: vec!["ens1f0np0".to_string()],
        }]
    );
    assert_eq!(fake.read("bus/pci/drivers_probe"), PF0);
}

#[test]
fn interface_that_is_down_needs_no_force() {
    let fake = FakeSysfs::new("down");
    fake.add_connectx5(PF0)
        .bind(PF0, "mlx5_core")
        .group(PF0, 14)
        .interface(PF0, "ens1f0np0", "down");
    let report = fake.sysfs().bind_vfio(bdf(PF0), false).unwrap();
    assert!(report.warnings.is_empty());
    assert_eq!(fake.read("bus/pci/drivers_probe"), PF0);
}

#[test]
fn missing_vfio_pci_says_modprobe() {
    let fake = FakeSysfs::new("nomod");
    fake.remove_driver("vfio-pci");
    fake.add_connectx5(PF0)
        .bind(PF0, "mlx5_core")
        .group(PF0, 14);
    let before = fake.snapshot();
    let err = fake.sysfs().bind_vfio(bdf(PF0), false).unwrap_err();
    assert_eq!(fake.snapshot(), before);
    assert!(
        matches!(err, DevbindError::VfioPciNotLoaded { .. }),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(
        message.contains("vfio-pci driver is not loaded"),
        "{message}"
    );
    assert!(message.contains("modprobe vfio-pci"), "{message}");
}

#[test]
fn unbind_writes_unbind_and_clears_override() {
    let fake = FakeSysfs::new("unbind");
    fake.add_connectx5(PF0).bind(PF0, "vfio-pci").group(PF0, 14);
    fake.write(
        &format!("{}/driver_override", FakeSysfs::dev(PF0)),
        "vfio-pci\n",
    );
    let before = fake.snapshot();
    let report = fake.sysfs().unbind(bdf(PF0), false).unwrap();
    let changes = FakeSysfs::changes(&before, &fake.snapshot());
    assert_eq!(
        changes,
        expected(&[
            ("bus/pci/drivers/vfio-pci/unbind", PF0),
            ("devices/pci0000:00/0000:06:00.0/driver_override", "\n"),
        ])
    );
    assert_eq!(
        report.outcome,
        UnbindOutcome::Unbound {
            previous_driver: "vfio-pci".to_string()
        }
    );
    assert!(
        report.to_string().contains("unbound from vfio-pci"),
        "{report}"
    );
}

#[test]
fn unbind_of_an_unbound_function_only_clears_override() {
    let fake = FakeSysfs::new("unbind-none");
    fake.add_connectx5(PF0).group(PF0, 14);
    fake.write(
        &format!("{}/driver_override", FakeSysfs::dev(PF0)),
        "vfio-pci\n",
    );
    let before = fake.snapshot();
    let report = fake.sysfs().unbind(bdf(PF0), false).unwrap();
    let changes = FakeSysfs::changes(&before, &fake.snapshot());
    assert_eq!(
        changes,
        expected(&[("devices/pci0000:00/0000:06:00.0/driver_override", "\n")])
    );
    assert_eq!(report.outcome, UnbindOutcome::NotBound);
}

#[test]
fn malformed_ids_are_reported() {
    let fake = FakeSysfs::new("malformed");
    fake.add_connectx5(PF0);
    fake.write(&format!("{}/vendor", FakeSysfs::dev(PF0)), "mellanox\n");
    let err = fake.sysfs().function(bdf(PF0)).unwrap_err();
    assert!(matches!(err, DevbindError::Malformed { .. }), "{err:?}");
    assert!(err.to_string().contains("\"mellanox\\n\""), "{err}");
}

fn run_tool(args: &[&str]) -> (i32, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_cxdirect-devbind"))
        .args(args)
        .output()
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn binary_end_to_end() {
    let fake = mixed_host();
    let root = fake.root.to_str().unwrap();

    // The listing: the default command and --status.
    for args in [vec!["--sysfs", root], vec!["--status", "--sysfs", root]] {
        let (code, stdout, stderr) = run_tool(&args);
        assert_eq!(code, 0, "{stderr}");
        assert_eq!(stdout, format!("{}\n", fake.sysfs().status().unwrap()));
        assert!(stdout.contains("0000:06:00.0  ConnectX-5"), "{stdout}");
        assert!(stdout.contains("IOMMU: on (3 groups)"), "{stdout}");
    }

    // Unbinding the vfio-pci port, spelled without its domain.
    let (code, stdout, stderr) = run_tool(&["--sysfs", root, "--unbind", "06:00.1"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.starts_with("0000:06:00.1 (ConnectX-5): unbound from vfio-pci"),
        "{stdout}"
    );
    assert_eq!(fake.read("bus/pci/drivers/vfio-pci/unbind"), PF1);

    // Errors: exit 1 with the message on stderr.
    let (code, stdout, stderr) = run_tool(&["--sysfs", root, "--bind", "00:1f.6"]);
    assert_eq!((code, stdout.as_str()), (1, ""));
    assert!(
        stderr.contains("error: 0000:00:1f.6 is not a ConnectX function"),
        "{stderr}"
    );
    let (code, _, stderr) = run_tool(&["--sysfs", root, "--bind", "06:00.0"]);
    assert_eq!(code, 1);
    assert!(stderr.contains("--force"), "{stderr}");
    // A malformed address is refused while the command line is read: a usage error naming
    // the flag, before sysfs is touched.
    let before = fake.snapshot();
    let (code, stdout, stderr) = run_tool(&["--sysfs", root, "--bind", "6-0-0"]);
    assert_eq!((code, stdout.as_str()), (2, ""));
    assert!(
        stderr.contains("for '--bind <BDF>': '6-0-0' is not a PCI address"),
        "{stderr}"
    );
    assert_eq!(fake.snapshot(), before);

    // Usage errors: exit 2, naming the flag and what is wrong.
    for (args, why) in [
        (vec!["--frobnicate"], "unexpected argument '--frobnicate'"),
        (vec!["--bind"], "a value is required for '--bind <BDF>'"),
        (
            vec!["--bind", "--force"],
            "a value is required for '--bind <BDF>'",
        ),
        (
            vec!["--bind", PF0, "--unbind", PF0],
            "'--bind <BDF>' cannot be used with '--unbind <BDF>'",
        ),
        (vec!["--force"], "required arguments were not provided"),
    ] {
        let (code, stdout, stderr) = run_tool(&args);
        assert_eq!((code, stdout.as_str()), (2, ""), "{args:?}");
        assert!(stderr.contains(why), "{args:?}: {stderr}");
        assert!(stderr.contains("try '--help'"), "{args:?}: {stderr}");
    }
    let (code, stdout, _) = run_tool(&["--help"]);
    assert_eq!(code, 0);
    assert!(stdout.contains("Usage: cxdirect-devbind"), "{stdout}");
    assert!(stdout.contains("-b, --bind <BDF>"), "{stdout}");
}
