//! The VFIO layer against `FakeSys`: open sequences for type1, iommufd and no-IOMMU, every error
//! path with its advice, BAR0 access mapped and through pread/pwrite, config space, MSI-X, reset,
//! DMA mapping, IOVA ranges from the kernel's capability chain, and PCI address parsing.

use std::os::fd::AsRawFd;

use cxdirect::backend::vfio::pci::{connectx_model, CONNECTX_DEVICES};
use cxdirect::backend::vfio::sys::{DeviceInfo, IrqInfo, IrqSet, RegionInfo};
use cxdirect::backend::vfio::testing::{
    type1_info_bytes, FakeSys, FAKE_BAR0_LEN, FAKE_IOVA_RANGES, FAKE_MSIX_VECTORS,
};
use cxdirect::backend::vfio::{
    IommuKind, IommuMode, MmioAccess, PciAddress, VfioDevice, VfioError, MIN_BAR0_LEN,
};
use cxdirect::Backend;
use cxdirect_dma::{IommuError, IovaRange};
use vfio_bindings::bindings::vfio as k;

const BDF: &str = "0000:06:00.0";

fn open(fake: &FakeSys, mode: IommuMode) -> Result<VfioDevice<FakeSys>, VfioError> {
    VfioDevice::open(BDF, mode, fake.clone())
}

fn open_err(fake: &FakeSys, mode: IommuMode) -> VfioError {
    match open(fake, mode) {
        Ok(dev) => panic!("open succeeded unexpectedly: {dev:?}"),
        Err(e) => e,
    }
}

fn lines(expected: &[&str]) -> Vec<String> {
    expected.iter().map(|s| s.to_string()).collect()
}

/// A page-aligned window of `len` bytes inside an owned buffer, for DMA mapping tests.
struct Pages {
    _buf: Vec<u8>,
    ptr: *mut u8,
}

impl Pages {
    fn new(len: usize) -> Self {
        let mut buf = vec![0u8; len + 4096];
        let base = buf.as_mut_ptr();
        let ptr = base.wrapping_add(base.align_offset(4096));
        Self { _buf: buf, ptr }
    }
}

// ----- open sequences -----

#[test]
fn type1_open_runs_the_exact_call_sequence() {
    let fake = FakeSys::connectx(BDF);
    let dev = open(&fake, IommuMode::Type1).unwrap();
    assert_eq!(
        fake.log(),
        lines(&[
            "exists /sys/bus/pci/devices/0000:06:00.0",
            "read /sys/bus/pci/devices/0000:06:00.0/vendor",
            "read /sys/bus/pci/devices/0000:06:00.0/device",
            "readlink /sys/bus/pci/devices/0000:06:00.0/driver",
            "readlink /sys/bus/pci/devices/0000:06:00.0/iommu_group",
            "read /sys/kernel/iommu_groups/12/name",
            "read /proc/self/status",
            "open /dev/vfio/vfio rw",
            "VFIO_GET_API_VERSION /dev/vfio/vfio",
            "VFIO_CHECK_EXTENSION /dev/vfio/vfio 3",
            "open /dev/vfio/12 rw",
            "VFIO_GROUP_GET_STATUS /dev/vfio/12",
            "VFIO_GROUP_SET_CONTAINER /dev/vfio/12 /dev/vfio/vfio",
            "VFIO_SET_IOMMU /dev/vfio/vfio 3",
            "VFIO_IOMMU_GET_INFO /dev/vfio/vfio argsz=24",
            "VFIO_IOMMU_GET_INFO /dev/vfio/vfio argsz=88",
            "VFIO_GROUP_GET_DEVICE_FD /dev/vfio/12 0000:06:00.0",
            "VFIO_DEVICE_GET_INFO 0000:06:00.0",
            "VFIO_DEVICE_GET_REGION_INFO 0000:06:00.0 0",
            "mmap 0000:06:00.0 offset=0x0 len=0x100000",
            "VFIO_DEVICE_GET_REGION_INFO 0000:06:00.0 7",
            "VFIO_DEVICE_GET_IRQ_INFO 0000:06:00.0 2",
        ])
    );
    assert_eq!(dev.iommu_kind(), IommuKind::Type1v2);
    assert_eq!(dev.mmio_access(), MmioAccess::Mapped);
    assert_eq!(dev.bar0_len() as u64, FAKE_BAR0_LEN);
    assert_eq!(dev.msix_vectors(), FAKE_MSIX_VECTORS);
    assert_eq!(dev.iova_ranges(), &FAKE_IOVA_RANGES);
    assert_eq!(dev.iommu().iova_ranges(), FAKE_IOVA_RANGES.to_vec());
    assert_eq!(dev.bdf().to_string(), BDF);
    assert_eq!(dev.name(), "0000:06:00.0 (VFIO type1v2)");
}

#[test]
fn short_address_means_domain_zero() {
    let fake = FakeSys::connectx(BDF);
    let dev = VfioDevice::open("06:00.0", IommuMode::Type1, fake.clone()).unwrap();
    assert_eq!(dev.bdf().to_string(), BDF);
    assert!(fake
        .log()
        .contains(&"VFIO_GROUP_GET_DEVICE_FD /dev/vfio/12 0000:06:00.0".to_string()));
}

#[test]
fn type1_falls_back_to_v1_when_v2_is_missing() {
    let fake = FakeSys::connectx(BDF);
    fake.set_extensions(&[k::VFIO_TYPE1_IOMMU]);
    let dev = open(&fake, IommuMode::Type1).unwrap();
    assert_eq!(dev.iommu_kind(), IommuKind::Type1);
    let log = fake.log();
    assert!(log.contains(&"VFIO_CHECK_EXTENSION /dev/vfio/vfio 3".to_string()));
    assert!(log.contains(&"VFIO_CHECK_EXTENSION /dev/vfio/vfio 1".to_string()));
    assert!(log.contains(&"VFIO_SET_IOMMU /dev/vfio/vfio 1".to_string()));
}

#[test]
fn iommufd_open_runs_the_exact_call_sequence() {
    let fake = FakeSys::connectx(BDF);
    let dev = open(&fake, IommuMode::Iommufd).unwrap();
    assert_eq!(
        fake.log(),
        lines(&[
            "exists /sys/bus/pci/devices/0000:06:00.0",
            "read /sys/bus/pci/devices/0000:06:00.0/vendor",
            "read /sys/bus/pci/devices/0000:06:00.0/device",
            "readlink /sys/bus/pci/devices/0000:06:00.0/driver",
            "readlink /sys/bus/pci/devices/0000:06:00.0/iommu_group",
            "read /sys/kernel/iommu_groups/12/name",
            "exists /dev/iommu",
            "readdir /sys/bus/pci/devices/0000:06:00.0/vfio-dev",
            "exists /dev/vfio/devices/vfio0",
            "read /proc/self/status",
            "open /dev/iommu rw",
            "open /dev/vfio/devices/vfio0 rw",
            "VFIO_DEVICE_BIND_IOMMUFD /dev/vfio/devices/vfio0 /dev/iommu",
            "IOMMU_IOAS_ALLOC /dev/iommu",
            "VFIO_DEVICE_ATTACH_IOMMUFD_PT /dev/vfio/devices/vfio0 2",
            "IOMMU_IOAS_IOVA_RANGES /dev/iommu ioas=2 room=8",
            "VFIO_DEVICE_GET_INFO /dev/vfio/devices/vfio0",
            "VFIO_DEVICE_GET_REGION_INFO /dev/vfio/devices/vfio0 0",
            "mmap /dev/vfio/devices/vfio0 offset=0x0 len=0x100000",
            "VFIO_DEVICE_GET_REGION_INFO /dev/vfio/devices/vfio0 7",
            "VFIO_DEVICE_GET_IRQ_INFO /dev/vfio/devices/vfio0 2",
        ])
    );
    assert_eq!(dev.iommu_kind(), IommuKind::Iommufd);
    assert_eq!(dev.iova_ranges(), &FAKE_IOVA_RANGES);
    assert_eq!(dev.name(), "0000:06:00.0 (VFIO iommufd)");
}

#[test]
fn iommufd_ranges_are_asked_again_with_more_room() {
    let fake = FakeSys::connectx(BDF);
    let ranges: Vec<IovaRange> = (0..10u64)
        .map(|i| IovaRange {
            start: i << 32,
            end: (i << 32) + 0xffff_ffff,
        })
        .collect();
    fake.set_ioas_ranges(&ranges, 4096);
    let dev = open(&fake, IommuMode::Iommufd).unwrap();
    assert_eq!(dev.iova_ranges(), ranges.as_slice());
    let log = fake.log();
    assert!(log.contains(&"IOMMU_IOAS_IOVA_RANGES /dev/iommu ioas=2 room=8".to_string()));
    assert!(log.contains(&"IOMMU_IOAS_IOVA_RANGES /dev/iommu ioas=2 room=10".to_string()));
}

#[test]
fn iommufd_refuses_inverted_or_empty_ranges() {
    let fake = FakeSys::connectx(BDF);
    fake.set_ioas_ranges(
        &[IovaRange {
            start: 0x2000,
            end: 0x1000,
        }],
        4096,
    );
    assert!(matches!(
        open_err(&fake, IommuMode::Iommufd),
        VfioError::UnsupportedApi { .. }
    ));
    let fake = FakeSys::connectx(BDF);
    fake.set_ioas_ranges(&[], 4096);
    assert!(matches!(
        open_err(&fake, IommuMode::Iommufd),
        VfioError::UnsupportedApi { .. }
    ));
}

#[test]
fn auto_chooses_iommufd_when_the_kernel_offers_it() {
    let fake = FakeSys::connectx(BDF);
    let dev = open(&fake, IommuMode::Auto).unwrap();
    assert_eq!(dev.iommu_kind(), IommuKind::Iommufd);
    assert!(!fake
        .log()
        .iter()
        .any(|l| l.starts_with("open /dev/vfio/vfio")));
}

#[test]
fn auto_chooses_type1_without_iommufd() {
    let fake = FakeSys::connectx(BDF);
    fake.remove_iommufd(BDF);
    let dev = open(&fake, IommuMode::Auto).unwrap();
    assert_eq!(dev.iommu_kind(), IommuKind::Type1v2);
    assert!(!fake.log().iter().any(|l| l.starts_with("IOMMU_IOAS")));

    // The kernel has /dev/iommu but the function has no cdev (CONFIG_VFIO_DEVICE_CDEV off).
    let fake = FakeSys::connectx(BDF);
    fake.remove("/sys/bus/pci/devices/0000:06:00.0/vfio-dev");
    assert_eq!(
        open(&fake, IommuMode::Auto).unwrap().iommu_kind(),
        IommuKind::Type1v2
    );
}

#[test]
fn auto_chooses_type1_when_iommufd_nodes_are_not_ours() {
    let fake = FakeSys::connectx(BDF);
    fake.fail("open /dev/iommu", libc::EACCES);
    let dev = open(&fake, IommuMode::Auto).unwrap();
    assert_eq!(dev.iommu_kind(), IommuKind::Type1v2);
    // Explicit iommufd reports the permission problem instead.
    let e = open_err(&fake, IommuMode::Iommufd);
    assert!(matches!(e, VfioError::PermissionDenied { ref path, .. } if path == "/dev/iommu"));
}

#[test]
fn iommufd_asked_for_but_missing() {
    let fake = FakeSys::connectx(BDF);
    fake.remove_iommufd(BDF);
    let e = open_err(&fake, IommuMode::Iommufd);
    assert!(matches!(e, VfioError::NoIommufd { .. }));
    let msg = e.to_string();
    assert!(msg.contains("/dev/iommu"), "{msg}");
    assert!(msg.contains("--iommu-mode type1"), "{msg}");

    let fake = FakeSys::connectx(BDF);
    fake.remove("/sys/bus/pci/devices/0000:06:00.0/vfio-dev");
    let msg = open_err(&fake, IommuMode::Iommufd).to_string();
    assert!(msg.contains("CONFIG_VFIO_DEVICE_CDEV"), "{msg}");
}

// ----- no-IOMMU -----

#[test]
fn noiommu_group_is_refused_unless_asked_for() {
    for mode in [IommuMode::Auto, IommuMode::Type1, IommuMode::Iommufd] {
        let fake = FakeSys::connectx(BDF);
        fake.make_noiommu();
        let e = open_err(&fake, mode);
        assert!(matches!(e, VfioError::NoIommu { .. }), "{mode}: {e}");
        assert!(
            !fake.log().iter().any(|l| l.starts_with("open /dev/vfio")),
            "{mode}"
        );
    }
}

#[test]
fn no_iommu_group_at_all_is_refused_with_advice() {
    let fake = FakeSys::connectx(BDF);
    fake.remove_iommu_group(BDF);
    let e = open_err(&fake, IommuMode::Auto);
    assert!(matches!(e, VfioError::NoIommu { .. }));
    let msg = e.to_string();
    assert!(msg.contains("intel_iommu=on"), "{msg}");
    assert!(msg.contains("amd_iommu=on"), "{msg}");
    assert!(msg.contains("--iommu-mode noiommu"), "{msg}");
    assert!(msg.contains(BDF), "{msg}");
}

#[test]
fn noiommu_when_asked_for() {
    let fake = FakeSys::connectx(BDF);
    fake.make_noiommu();
    let dev = open(&fake, IommuMode::NoIommu).unwrap();
    assert_eq!(dev.iommu_kind(), IommuKind::NoIommu);
    let log = fake.log();
    let start = log
        .iter()
        .position(|l| l == "open /dev/vfio/vfio rw")
        .unwrap();
    assert_eq!(
        log[start..start + 10].to_vec(),
        lines(&[
            "open /dev/vfio/vfio rw",
            "VFIO_GET_API_VERSION /dev/vfio/vfio",
            "VFIO_CHECK_EXTENSION /dev/vfio/vfio 8",
            "open /dev/vfio/noiommu-12 rw",
            "VFIO_GROUP_GET_STATUS /dev/vfio/noiommu-12",
            "VFIO_GROUP_SET_CONTAINER /dev/vfio/noiommu-12 /dev/vfio/vfio",
            "VFIO_SET_IOMMU /dev/vfio/vfio 8",
            "VFIO_GROUP_GET_DEVICE_FD /dev/vfio/noiommu-12 0000:06:00.0",
            "open /proc/self/pagemap ro",
            "VFIO_DEVICE_GET_INFO 0000:06:00.0",
        ])
    );
    assert!(
        log.contains(&"read /sys/module/vfio/parameters/enable_unsafe_noiommu_mode".to_string())
    );
    assert_eq!(
        dev.iommu().iova_ranges(),
        vec![IovaRange {
            start: 0,
            end: u64::MAX
        }]
    );
}

#[test]
fn noiommu_iova_is_the_physical_address_from_pagemap() {
    let fake = FakeSys::connectx(BDF);
    fake.make_noiommu();
    let dev = open(&fake, IommuMode::NoIommu).unwrap();
    let iommu = dev.iommu();
    let host = 0x7f12_3456_7010usize as *mut u8;
    let page = 0x7f12_3456_7010u64 / 4096;
    let present = 1u64 << 63;
    for i in 0..3 {
        fake.set_pagemap_entry(page + i, present | (0x12345 + i));
    }
    let phys = iommu.identity_iova(host, 0x2000).unwrap().unwrap();
    assert_eq!(phys, 0x12345 * 4096 + 0x10);
    assert!(fake
        .log()
        .contains(&"pread /proc/self/pagemap offset=0x3f891a2b38 len=24".to_string()));
    // SAFETY: no-IOMMU `map` dereferences nothing; it only checks the translation.
    unsafe { iommu.map(phys, host, 0x2000) }.unwrap();
    // SAFETY: as above.
    let wrong = unsafe { iommu.map(phys + 0x1000, host, 0x2000) };
    assert!(matches!(wrong, Err(IommuError::MapRefused { .. })));
    iommu.unmap(phys, 0x2000).unwrap();

    // A page frame that does not follow: not physically contiguous.
    fake.set_pagemap_entry(page + 2, present | 0x99999);
    let e = iommu.identity_iova(host, 0x2000).unwrap().unwrap_err();
    assert!(matches!(e, IommuError::NoPhysicalAddress { .. }));
    assert!(e.to_string().contains("contiguous"), "{e}");
    // A page not present.
    fake.set_pagemap_entry(page + 1, 0);
    let e = iommu.identity_iova(host, 0x2000).unwrap().unwrap_err();
    assert!(e.to_string().contains("not in memory"), "{e}");
    // Frame numbers hidden (no CAP_SYS_ADMIN): present but zero.
    fake.set_pagemap_entry(page, present);
    let e = iommu.identity_iova(host, 16).unwrap().unwrap_err();
    assert!(e.to_string().contains("hides page frame numbers"), "{e}");
    assert!(iommu.identity_iova(host, 0).unwrap().is_err());
}

#[test]
fn other_modes_have_no_identity_iova() {
    let fake = FakeSys::connectx(BDF);
    let dev = open(&fake, IommuMode::Type1).unwrap();
    assert!(dev
        .iommu()
        .identity_iova(std::ptr::null_mut(), 4096)
        .is_none());
}

#[test]
fn noiommu_refused_when_the_kernel_does_not_allow_it() {
    let fake = FakeSys::connectx(BDF);
    fake.make_noiommu();
    fake.set_file(
        "/sys/module/vfio/parameters/enable_unsafe_noiommu_mode",
        "N\n",
    );
    let e = open_err(&fake, IommuMode::NoIommu);
    assert!(matches!(e, VfioError::NoIommuUnavailable { .. }));
    assert!(e.to_string().contains("enable_unsafe_noiommu_mode"), "{e}");

    let fake = FakeSys::connectx(BDF);
    fake.make_noiommu();
    fake.remove("/sys/module/vfio/parameters/enable_unsafe_noiommu_mode");
    let e = open_err(&fake, IommuMode::NoIommu);
    assert!(e.to_string().contains("CONFIG_VFIO_NOIOMMU"), "{e}");
}

#[test]
fn noiommu_refused_behind_a_real_iommu() {
    let fake = FakeSys::connectx(BDF);
    fake.set_file(
        "/sys/module/vfio/parameters/enable_unsafe_noiommu_mode",
        "Y\n",
    );
    let e = open_err(&fake, IommuMode::NoIommu);
    assert!(matches!(e, VfioError::NoIommuUnavailable { .. }));
    assert!(e.to_string().contains("real IOMMU"), "{e}");
    assert!(!fake.log().iter().any(|l| l.starts_with("open /dev/vfio")));
}

// ----- sysfs errors -----

#[test]
fn missing_function() {
    let e = VfioDevice::open(BDF, IommuMode::Auto, FakeSys::new()).unwrap_err();
    assert!(matches!(e, VfioError::NoSuchDevice { .. }));
    let msg = e.to_string();
    assert!(msg.contains(BDF) && msg.contains("lspci"), "{msg}");
}

#[test]
fn not_a_connectx() {
    let fake = FakeSys::connectx(BDF);
    fake.set_ids(BDF, 0x8086, 0x1572);
    let e = open_err(&fake, IommuMode::Auto);
    assert!(matches!(
        e,
        VfioError::NotConnectX {
            vendor: 0x8086,
            device: 0x1572,
            ..
        }
    ));
    let msg = e.to_string();
    assert!(msg.contains("not a ConnectX function"), "{msg}");
    assert!(msg.contains("0x8086") && msg.contains("0x1572"), "{msg}");

    // Mellanox, but not an mlx5 ConnectX (ConnectX-3).
    fake.set_ids(BDF, 0x15b3, 0x1007);
    assert!(matches!(
        open_err(&fake, IommuMode::Auto),
        VfioError::NotConnectX { .. }
    ));
    // Unparsable IDs are an error, not a panic.
    fake.set_file("/sys/bus/pci/devices/0000:06:00.0/vendor", "garbage");
    assert!(matches!(
        open_err(&fake, IommuMode::Auto),
        VfioError::Os { .. }
    ));
}

#[test]
fn every_connectx_id_is_accepted() {
    let ids = [
        0x1013, 0x1015, 0x1017, 0x1019, 0x101b, 0x101d, 0x101f, 0x1021, 0x1023, 0x1014, 0x1016,
        0x1018, 0x101a, 0x101c, 0x101e,
    ];
    assert_eq!(CONNECTX_DEVICES.len(), ids.len());
    for id in ids {
        assert!(connectx_model(0x15b3, id).is_some(), "{id:#x}");
        let fake = FakeSys::connectx(BDF);
        fake.set_ids(BDF, 0x15b3, id);
        open(&fake, IommuMode::Type1).unwrap();
    }
    assert_eq!(connectx_model(0x15b3, 0x101d), Some("ConnectX-6 Dx"));
    assert_eq!(connectx_model(0x15b4, 0x101d), None);
    assert_eq!(connectx_model(0x15b3, 0x1011), None);
}

#[test]
fn bound_to_another_driver_prints_the_bind_commands() {
    let fake = FakeSys::connectx(BDF);
    fake.bind_driver(BDF, Some("mlx5_core"));
    let e = open_err(&fake, IommuMode::Auto);
    assert!(matches!(e, VfioError::NotBoundToVfio { driver: Some(ref d), .. } if d == "mlx5_core"));
    let msg = e.to_string();
    for want in [
        "bound to mlx5_core",
        "modprobe vfio-pci",
        "echo 0000:06:00.0 > /sys/bus/pci/devices/0000:06:00.0/driver/unbind",
        "echo vfio-pci > /sys/bus/pci/devices/0000:06:00.0/driver_override",
        "echo 0000:06:00.0 > /sys/bus/pci/drivers_probe",
        "cxdirect-devbind --bind 0000:06:00.0",
    ] {
        assert!(msg.contains(want), "missing {want:?} in:\n{msg}");
    }
    // Nothing was opened.
    assert!(!fake.log().iter().any(|l| l.starts_with("open")));
}

#[test]
fn unbound_function_needs_no_unbind() {
    let fake = FakeSys::connectx(BDF);
    fake.bind_driver(BDF, None);
    let e = open_err(&fake, IommuMode::Auto);
    let msg = e.to_string();
    assert!(msg.contains("not bound to any driver"), "{msg}");
    assert!(!msg.contains("/unbind"), "{msg}");
    assert!(
        msg.contains("driver_override") && msg.contains("drivers_probe"),
        "{msg}"
    );
}

#[test]
fn the_mlx5_vfio_variant_driver_is_accepted() {
    let fake = FakeSys::connectx(BDF);
    fake.bind_driver(BDF, Some("mlx5_vfio_pci"));
    open(&fake, IommuMode::Type1).unwrap();
}

// ----- VFIO errors -----

#[test]
fn group_not_viable_names_the_other_devices() {
    let fake = FakeSys::connectx(BDF);
    fake.set_group_flags(0);
    fake.add_group_member("0000:06:00.1", Some("mlx5_core"));
    fake.add_group_member("0000:06:00.2", Some("vfio-pci"));
    let e = open_err(&fake, IommuMode::Type1);
    match &e {
        VfioError::GroupNotViable { group, others, .. } => {
            assert_eq!(group, "12");
            assert_eq!(others.len(), 1);
            assert_eq!(others[0].address, "0000:06:00.1");
            assert_eq!(others[0].driver.as_deref(), Some("mlx5_core"));
        }
        other => panic!("unexpected {other}"),
    }
    let msg = e.to_string();
    assert!(msg.contains("0000:06:00.1 (bound to mlx5_core)"), "{msg}");
    assert!(msg.contains("vfio-pci or unbound"), "{msg}");
    assert!(!msg.contains("0000:06:00.2"), "{msg}");
    assert!(!fake
        .log()
        .iter()
        .any(|l| l.starts_with("VFIO_GROUP_SET_CONTAINER")));
}

#[test]
fn group_not_viable_through_iommufd() {
    let fake = FakeSys::connectx(BDF);
    fake.set_group_flags(0);
    fake.add_group_member("0000:06:00.1", Some("mlx5_core"));
    let e = open_err(&fake, IommuMode::Iommufd);
    assert!(matches!(e, VfioError::GroupNotViable { .. }), "{e}");
    assert!(e.to_string().contains("0000:06:00.1"), "{e}");
}

#[test]
fn permission_denied_names_the_node() {
    for (node, mode) in [
        ("/dev/vfio/12", IommuMode::Type1),
        ("/dev/vfio/vfio", IommuMode::Type1),
        ("/dev/vfio/devices/vfio0", IommuMode::Iommufd),
    ] {
        let fake = FakeSys::connectx(BDF);
        fake.fail(&format!("open {node}"), libc::EACCES);
        let e = open_err(&fake, mode);
        assert!(
            matches!(e, VfioError::PermissionDenied { ref path, .. } if path == node),
            "{e}"
        );
        let msg = e.to_string();
        assert!(msg.contains(&format!("no permission on {node}")), "{msg}");
        assert!(
            msg.contains("run as root") && msg.contains("chown"),
            "{msg}"
        );
    }
}

#[test]
fn busy_group_says_another_process_has_it() {
    let fake = FakeSys::connectx(BDF);
    fake.fail("open /dev/vfio/12", libc::EBUSY);
    let e = open_err(&fake, IommuMode::Type1);
    assert!(matches!(e, VfioError::Busy { .. }));
    assert!(e.to_string().contains("another process"), "{e}");
}

#[test]
fn memlock_too_low_without_cap_ipc_lock() {
    let fake = FakeSys::connectx(BDF);
    fake.set_capabilities(0);
    fake.set_memlock_limit(8 << 20);
    let e = open_err(&fake, IommuMode::Type1);
    assert!(matches!(e, VfioError::MemlockTooLow { limit, .. } if limit == 8 << 20));
    assert!(e.to_string().contains("ulimit -l"), "{e}");
    assert!(fake.log().contains(&"getrlimit RLIMIT_MEMLOCK".to_string()));
    assert!(!fake.log().iter().any(|l| l.starts_with("open")));

    fake.set_memlock_limit(u64::MAX);
    open(&fake, IommuMode::Type1).unwrap();
    // CAP_IPC_LOCK makes the limit irrelevant.
    fake.set_capabilities(1 << 14);
    fake.set_memlock_limit(64 << 10);
    open(&fake, IommuMode::Type1).unwrap();
}

#[test]
fn unsupported_vfio_api() {
    let fake = FakeSys::connectx(BDF);
    fake.set_api_version(1);
    let e = open_err(&fake, IommuMode::Type1);
    assert!(matches!(e, VfioError::UnsupportedApi { .. }));
    assert!(e.to_string().contains("API version 1"), "{e}");

    let fake = FakeSys::connectx(BDF);
    fake.set_extensions(&[]);
    let e = open_err(&fake, IommuMode::Type1);
    assert!(e.to_string().contains("vfio_iommu_type1"), "{e}");

    let fake = FakeSys::connectx(BDF);
    fake.set_device_info(DeviceInfo {
        flags: k::VFIO_DEVICE_FLAGS_PLATFORM,
        num_regions: 9,
        num_irqs: 5,
    });
    let e = open_err(&fake, IommuMode::Type1);
    assert!(e.to_string().contains("not a vfio-pci device"), "{e}");

    let fake = FakeSys::connectx(BDF);
    fake.set_device_info(DeviceInfo {
        flags: k::VFIO_DEVICE_FLAGS_PCI,
        num_regions: 1,
        num_irqs: 5,
    });
    assert!(matches!(
        open_err(&fake, IommuMode::Type1),
        VfioError::UnsupportedApi { .. }
    ));
}

#[test]
fn bar0_missing_or_too_small() {
    let rw = k::VFIO_REGION_INFO_FLAG_READ | k::VFIO_REGION_INFO_FLAG_WRITE;
    let fake = FakeSys::connectx(BDF);
    fake.set_region(RegionInfo {
        index: 0,
        flags: 0,
        size: 0,
        offset: 0,
    });
    let e = open_err(&fake, IommuMode::Type1);
    assert!(matches!(e, VfioError::Bar0Missing { .. }));
    assert!(e.to_string().contains("BAR0"), "{e}");

    let fake = FakeSys::connectx(BDF);
    fake.set_region(RegionInfo {
        index: 0,
        flags: rw,
        size: 0x1000,
        offset: 0,
    });
    let e = open_err(&fake, IommuMode::Type1);
    assert!(matches!(
        e,
        VfioError::Bar0TooSmall {
            size: 0x1000,
            min: MIN_BAR0_LEN,
            ..
        }
    ));
    assert!(e.to_string().contains("0x1000"), "{e}");
}

#[test]
fn os_errors_name_the_call() {
    for call in [
        "VFIO_GET_API_VERSION",
        "VFIO_GROUP_GET_STATUS",
        "VFIO_GROUP_SET_CONTAINER",
        "VFIO_SET_IOMMU",
        "VFIO_IOMMU_GET_INFO",
        "VFIO_GROUP_GET_DEVICE_FD",
        "VFIO_DEVICE_GET_INFO",
        "VFIO_DEVICE_GET_REGION_INFO",
        "VFIO_DEVICE_GET_IRQ_INFO",
    ] {
        let fake = FakeSys::connectx(BDF);
        fake.fail(call, libc::EIO);
        let e = open_err(&fake, IommuMode::Type1);
        match &e {
            VfioError::Os { what, source, .. } => {
                assert!(what.starts_with(call), "{what}");
                assert_eq!(source.raw_os_error(), Some(libc::EIO));
            }
            other => panic!("{call}: unexpected {other}"),
        }
        assert!(
            e.to_string().contains(call) && e.to_string().contains(BDF),
            "{e}"
        );
        assert!(std::error::Error::source(&e).is_some());
        // Nothing leaks on a failed open.
        assert_eq!(fake.open_fds(), 0, "{call}");
        assert_eq!(fake.live_mmaps(), 0, "{call}");
    }
    for call in [
        "VFIO_DEVICE_BIND_IOMMUFD",
        "IOMMU_IOAS_ALLOC",
        "VFIO_DEVICE_ATTACH_IOMMUFD_PT",
        "IOMMU_IOAS_IOVA_RANGES",
    ] {
        let fake = FakeSys::connectx(BDF);
        fake.fail(call, libc::EIO);
        let e = open_err(&fake, IommuMode::Iommufd);
        assert!(
            matches!(e, VfioError::Os { ref what, .. } if what == call),
            "{call}: {e}"
        );
        assert_eq!(fake.open_fds(), 0, "{call}");
    }
}

#[test]
fn set_iommu_eperm_hints_at_interrupt_remapping() {
    let fake = FakeSys::connectx(BDF);
    fake.fail("VFIO_SET_IOMMU", libc::EPERM);
    let e = open_err(&fake, IommuMode::Type1);
    assert!(e.to_string().contains("allow_unsafe_interrupts"), "{e}");
}

#[test]
fn iommu_mode_names() {
    for (s, m) in [
        ("auto", IommuMode::Auto),
        ("type1", IommuMode::Type1),
        ("iommufd", IommuMode::Iommufd),
        ("noiommu", IommuMode::NoIommu),
        ("No-IOMMU", IommuMode::NoIommu),
    ] {
        assert_eq!(s.parse::<IommuMode>().unwrap(), m);
    }
    assert_eq!(IommuMode::default(), IommuMode::Auto);
    let e = "vfio".parse::<IommuMode>().unwrap_err();
    assert!(
        e.to_string().contains("auto, type1, iommufd or noiommu"),
        "{e}"
    );
}

// ----- BAR0 -----

#[test]
fn mapped_bar0_loads_and_stores_reach_the_region() {
    let fake = FakeSys::connectx(BDF);
    let dev = open(&fake, IommuMode::Type1).unwrap();
    fake.clear_log();

    fake.write_region(0, 0, &[0x00, 0x10, 0x00, 0x16]);
    assert_eq!(dev.read32(0), [0x00, 0x10, 0x00, 0x16]);
    dev.write32(0x18, 1u32.to_be_bytes());
    assert_eq!(fake.region_bytes(0, 0x18, 4), vec![0, 0, 0, 1]);
    dev.write64(0x800, 0x0102_0304_0506_0708u64.to_be_bytes());
    assert_eq!(fake.region_bytes(0, 0x800, 8), vec![1, 2, 3, 4, 5, 6, 7, 8]);
    let wqe: [u8; 64] = std::array::from_fn(|i| i as u8);
    dev.write_bf(0x1000, &wqe);
    assert_eq!(fake.region_bytes(0, 0x1000, 64), wqe.to_vec());
    // Mapped accesses are not system calls.
    assert!(fake.log().is_empty(), "{:?}", fake.log());

    // Bad offsets: outside, misaligned; reads give all ones, writes are dropped, all counted.
    let end = FAKE_BAR0_LEN as usize;
    assert_eq!(dev.read32(end), [0xff; 4]);
    assert_eq!(dev.read32(2), [0xff; 4]);
    dev.write32(end - 2, [1; 4]);
    dev.write64(4, [1; 8]);
    dev.write_bf(32, &wqe);
    dev.write_bf(end - 32, &wqe);
    dev.write32(usize::MAX - 1, [1; 4]);
    assert_eq!(dev.bad_mmio_accesses(), 7);
    assert_eq!(fake.region_bytes(0, 0, 4), vec![0x00, 0x10, 0x00, 0x16]);
}

#[test]
fn bar0_without_mmap_goes_through_pread_and_pwrite() {
    let rw = k::VFIO_REGION_INFO_FLAG_READ | k::VFIO_REGION_INFO_FLAG_WRITE;
    let fake = FakeSys::connectx(BDF);
    fake.set_region(RegionInfo {
        index: 0,
        flags: rw,
        size: FAKE_BAR0_LEN,
        offset: 0,
    });
    let dev = open(&fake, IommuMode::Type1).unwrap();
    assert_eq!(dev.mmio_access(), MmioAccess::ReadWrite);
    assert!(dev.name().contains("pread/pwrite"), "{}", dev.name());
    assert!(!fake.log().iter().any(|l| l.starts_with("mmap")));
    fake.clear_log();

    fake.write_region(0, 0x1fc, &[0x80, 0, 0, 0]);
    assert_eq!(dev.read32(0x1fc), [0x80, 0, 0, 0]);
    dev.write32(0x18, [0, 0, 0, 1]);
    dev.write64(0x808, [9; 8]);
    let wqe: [u8; 64] = std::array::from_fn(|i| 64 - i as u8);
    dev.write_bf(0x1040, &wqe);
    assert_eq!(fake.region_bytes(0, 0x18, 4), vec![0, 0, 0, 1]);
    assert_eq!(fake.region_bytes(0, 0x808, 8), vec![9; 8]);
    assert_eq!(fake.region_bytes(0, 0x1040, 64), wqe.to_vec());
    let mut expected = vec![
        "pread 0000:06:00.0 offset=0x1fc len=4".to_string(),
        "pwrite 0000:06:00.0 offset=0x18 len=4".to_string(),
        "pwrite 0000:06:00.0 offset=0x808 len=8".to_string(),
    ];
    for i in 0..8 {
        expected.push(format!(
            "pwrite 0000:06:00.0 offset={:#x} len=8",
            0x1040 + 8 * i
        ));
    }
    assert_eq!(fake.log(), expected);

    // A failing pread reads as all ones and is counted.
    fake.fail("pread", libc::EIO);
    assert_eq!(dev.read32(0), [0xff; 4]);
    assert_eq!(dev.read32(FAKE_BAR0_LEN as usize), [0xff; 4]);
    assert_eq!(dev.bad_mmio_accesses(), 2);
}

#[test]
fn failed_bar0_mmap_falls_back_to_pread() {
    let fake = FakeSys::connectx(BDF);
    fake.fail("mmap", libc::EINVAL);
    let dev = open(&fake, IommuMode::Type1).unwrap();
    assert_eq!(dev.mmio_access(), MmioAccess::ReadWrite);
    fake.clear_failures();
    dev.write32(0x14, [1, 2, 3, 4]);
    assert_eq!(fake.region_bytes(0, 0x14, 4), vec![1, 2, 3, 4]);
}

// ----- config space -----

#[test]
fn config_space_and_bus_master() {
    let fake = FakeSys::connectx(BDF);
    let dev = open(&fake, IommuMode::Type1).unwrap();
    let mut ids = [0u8; 4];
    dev.config_read(0, &mut ids).unwrap();
    assert_eq!(u16::from_le_bytes([ids[0], ids[1]]), 0x15b3);
    assert_eq!(u16::from_le_bytes([ids[2], ids[3]]), 0x101d);

    fake.write_region(7, 4, &0x0002u16.to_le_bytes()); // memory space enabled
    fake.clear_log();
    dev.set_bus_master(true).unwrap();
    assert_eq!(fake.region_bytes(7, 4, 2), 0x0006u16.to_le_bytes().to_vec());
    let config = 7u64 << 40;
    assert_eq!(
        fake.log(),
        vec![
            format!("pread 0000:06:00.0 offset={:#x} len=2", config + 4),
            format!("pwrite 0000:06:00.0 offset={:#x} len=2", config + 4),
        ]
    );
    dev.set_bus_master(false).unwrap();
    assert_eq!(fake.region_bytes(7, 4, 2), 0x0002u16.to_le_bytes().to_vec());

    let mut buf = [0u8; 8];
    let e = dev.config_read(4092, &mut buf).unwrap_err();
    assert!(e.to_string().contains("4096-byte config space"), "{e}");
    assert!(dev.config_write(4095, &[0, 0]).is_err());
    fake.fail("pread", libc::EIO);
    let e = dev.config_read(0, &mut buf).unwrap_err();
    assert!(e.to_string().contains("pread"), "{e}");
}

// ----- interrupts and reset -----

#[test]
fn msix_enable_passes_one_eventfd_per_vector() {
    let fake = FakeSys::connectx(BDF);
    let dev = open(&fake, IommuMode::Type1).unwrap();
    let interrupts = dev.enable_msix(4).unwrap();
    assert_eq!(interrupts.len(), 4);
    let sets = fake.irq_sets();
    assert_eq!(sets.len(), 1);
    let set = &sets[0];
    assert_eq!(
        set.flags,
        k::VFIO_IRQ_SET_DATA_EVENTFD | k::VFIO_IRQ_SET_ACTION_TRIGGER
    );
    assert_eq!(set.index, k::VFIO_PCI_MSIX_IRQ_INDEX);
    assert_eq!((set.start, set.count), (0, 4));
    let fds: Vec<i32> = interrupts.iter().map(|i| i.as_raw_fd()).collect();
    assert_eq!(set.eventfds, fds);
    assert!(fake.log().contains(
        &"VFIO_DEVICE_SET_IRQS 0000:06:00.0 index=2 start=0 count=4 flags=0x24".to_string()
    ));

    // The payload the kernel reads: argsz, flags, index, start, count, then the eventfds.
    let bytes = set.to_bytes();
    assert_eq!(bytes.len(), 20 + 4 * 4);
    let word = |i: usize| u32::from_ne_bytes(bytes[4 * i..4 * i + 4].try_into().unwrap());
    assert_eq!(word(0), 36);
    assert_eq!(word(1), 0x24);
    assert_eq!(word(2), 2);
    assert_eq!(word(3), 0);
    assert_eq!(word(4), 4);
    for (i, fd) in fds.iter().enumerate() {
        assert_eq!(word(5 + i) as i32, *fd);
    }

    // Each interrupt is a working eventfd.
    interrupts[2].signal();
    assert_eq!(interrupts[2].take(), 1);

    dev.disable_msix().unwrap();
    let off = &fake.irq_sets()[1];
    assert_eq!(off, &IrqSet::disable(k::VFIO_PCI_MSIX_IRQ_INDEX));
    assert_eq!(
        off.flags,
        k::VFIO_IRQ_SET_DATA_NONE | k::VFIO_IRQ_SET_ACTION_TRIGGER
    );
    assert_eq!(off.count, 0);
    let bytes = off.to_bytes();
    assert_eq!(bytes.len(), 20);
    assert_eq!(u32::from_ne_bytes(bytes[0..4].try_into().unwrap()), 20);
}

#[test]
fn msix_refusals() {
    let fake = FakeSys::connectx(BDF);
    let dev = open(&fake, IommuMode::Type1).unwrap();
    let e = dev.enable_msix(FAKE_MSIX_VECTORS as u16 + 1).unwrap_err();
    assert!(e.to_string().contains("offers only 64"), "{e}");
    assert!(dev.enable_msix(0).is_err());
    fake.fail("VFIO_DEVICE_SET_IRQS", libc::EINVAL);
    let e = dev.enable_msix(2).unwrap_err();
    assert!(e.to_string().contains("VFIO_DEVICE_SET_IRQS"), "{e}");
    assert!(dev.disable_msix().is_err());
    assert!(fake.irq_sets().is_empty());

    let fake = FakeSys::connectx(BDF);
    fake.set_irq(IrqInfo {
        index: k::VFIO_PCI_MSIX_IRQ_INDEX,
        flags: 0,
        count: 8,
    });
    let dev = open(&fake, IommuMode::Type1).unwrap();
    assert!(dev
        .enable_msix(1)
        .unwrap_err()
        .to_string()
        .contains("eventfd"));
}

#[test]
fn reset() {
    let fake = FakeSys::connectx(BDF);
    let dev = open(&fake, IommuMode::Type1).unwrap();
    dev.reset().unwrap();
    assert_eq!(fake.resets(), 1);
    assert!(fake
        .log()
        .contains(&"VFIO_DEVICE_RESET 0000:06:00.0".to_string()));

    let fake = FakeSys::connectx(BDF);
    fake.set_device_info(DeviceInfo {
        flags: k::VFIO_DEVICE_FLAGS_PCI,
        num_regions: 9,
        num_irqs: 5,
    });
    let dev = open(&fake, IommuMode::Type1).unwrap();
    let e = dev.reset().unwrap_err();
    assert!(e.to_string().contains("no reset method"), "{e}");
    assert_eq!(fake.resets(), 0);
}

// ----- DMA -----

#[test]
fn type1_dma_map_and_unmap() {
    let fake = FakeSys::connectx(BDF);
    let dev = open(&fake, IommuMode::Type1).unwrap();
    let iommu = dev.iommu();
    let mem = Pages::new(0x4000);
    // SAFETY: `mem` outlives the mapping, which is removed below.
    unsafe { iommu.map(0x10_0000, mem.ptr, 0x2000) }.unwrap();
    let maps = fake.dma_mappings();
    assert_eq!(maps.len(), 1);
    assert_eq!(maps[0].iova, 0x10_0000);
    assert_eq!(maps[0].vaddr, mem.ptr as u64);
    assert_eq!(maps[0].size, 0x2000);
    assert_eq!(
        maps[0].flags,
        k::VFIO_DMA_MAP_FLAG_READ | k::VFIO_DMA_MAP_FLAG_WRITE
    );
    assert!(fake.log().contains(&format!(
        "VFIO_IOMMU_MAP_DMA /dev/vfio/vfio iova=0x100000 size=0x2000 vaddr={:#x} flags=0x3",
        mem.ptr as u64
    )));

    // Overlap is refused with the reason.
    // SAFETY: as above; the call fails and maps nothing.
    let e = unsafe { iommu.map(0x10_1000, mem.ptr, 0x1000) }.unwrap_err();
    assert!(e.to_string().contains("overlaps"), "{e}");
    // Unmapping part of a mapping is refused, and the mapping stays.
    assert!(matches!(
        iommu.unmap(0x10_0000, 0x1000),
        Err(IommuError::UnmapRefused { .. })
    ));
    assert_eq!(fake.dma_mappings().len(), 1);

    iommu.unmap(0x10_0000, 0x2000).unwrap();
    assert!(fake.dma_mappings().is_empty());
    assert!(fake
        .log()
        .contains(&"VFIO_IOMMU_UNMAP_DMA /dev/vfio/vfio iova=0x100000 size=0x2000".to_string()));
    // Unmapping what is not mapped is reported.
    let e = iommu.unmap(0x10_0000, 0x2000).unwrap_err();
    assert!(e.to_string().contains("only 0x0 bytes"), "{e}");
    // SAFETY: zero length is refused before reaching the kernel.
    assert!(unsafe { iommu.map(0x20_0000, mem.ptr, 0) }.is_err());
}

#[test]
fn enomem_from_map_dma_is_the_memlock_limit() {
    let fake = FakeSys::connectx(BDF);
    let dev = open(&fake, IommuMode::Type1).unwrap();
    fake.fail("VFIO_IOMMU_MAP_DMA", libc::ENOMEM);
    let mem = Pages::new(0x1000);
    // SAFETY: `mem` outlives the call, which maps nothing.
    let e = unsafe { dev.iommu().map(0x1000, mem.ptr, 0x1000) }.unwrap_err();
    assert!(matches!(e, IommuError::MemlockLimit { len: 0x1000 }));
    assert!(e.to_string().contains("ulimit -l"), "{e}");

    fake.fail("VFIO_IOMMU_MAP_DMA", libc::ENOSPC);
    // SAFETY: as above.
    let e = unsafe { dev.iommu().map(0x1000, mem.ptr, 0x1000) }.unwrap_err();
    assert!(e.to_string().contains("dma_entry_limit"), "{e}");
}

#[test]
fn iommufd_dma_map_and_unmap() {
    let fake = FakeSys::connectx(BDF);
    let dev = open(&fake, IommuMode::Iommufd).unwrap();
    let iommu = dev.iommu();
    let mem = Pages::new(0x3000);
    // SAFETY: `mem` outlives the mapping, which is removed below.
    unsafe { iommu.map(0x8000_0000, mem.ptr, 0x3000) }.unwrap();
    let maps = fake.dma_mappings();
    assert_eq!(maps.len(), 1);
    assert_eq!(
        (maps[0].iova, maps[0].vaddr, maps[0].size),
        (0x8000_0000, mem.ptr as u64, 0x3000)
    );
    // FIXED_IOVA | WRITEABLE | READABLE
    assert_eq!(maps[0].flags, 0b111);
    iommu.unmap(0x8000_0000, 0x3000).unwrap();
    assert!(fake.dma_mappings().is_empty());
    assert!(fake
        .log()
        .contains(&"IOMMU_IOAS_UNMAP /dev/iommu ioas=2 iova=0x80000000 length=0x3000".to_string()));
    assert!(iommu.unmap(0x8000_0000, 0x3000).is_err());

    fake.fail("IOMMU_IOAS_MAP", libc::ENOMEM);
    // SAFETY: `mem` outlives the call, which maps nothing.
    let e = unsafe { iommu.map(0x8000_0000, mem.ptr, 0x1000) }.unwrap_err();
    assert!(matches!(e, IommuError::MemlockLimit { .. }));
}

#[test]
fn iommufd_maps_a_file_by_descriptor_and_names_a_kernel_without_it() {
    use std::os::fd::AsFd;
    let fake = FakeSys::connectx(BDF);
    let dev = open(&fake, IommuMode::Iommufd).unwrap();
    let iommu = dev.iommu();
    let file = std::fs::File::open("/dev/null").unwrap();
    iommu
        .map_file(0x9000_0000, file.as_fd(), 0x2000, 0x4000)
        .unwrap();
    let maps = fake.dma_mappings();
    assert_eq!(maps.len(), 1);
    assert_eq!(
        (maps[0].iova, maps[0].size, maps[0].flags),
        (0x9000_0000, 0x4000, 0b111)
    );
    assert!(fake.log().iter().any(|l| l
        .starts_with("IOMMU_IOAS_MAP_FILE /dev/iommu ioas=2 iova=0x90000000 length=0x4000")
        && l.ends_with("start=0x2000 flags=0x7")));
    iommu.unmap(0x9000_0000, 0x4000).unwrap();
    assert!(fake.dma_mappings().is_empty());

    fake.fail("IOMMU_IOAS_MAP_FILE", libc::ENOTTY);
    let e = iommu
        .map_file(0x9000_0000, file.as_fd(), 0, 0x1000)
        .unwrap_err();
    assert!(matches!(e, IommuError::FileMapUnsupported { .. }), "{e}");
    assert!(e.to_string().contains("Linux 6.13"), "{e}");

    // An exporter the kernel refuses: the errno, what it means and what to do.
    for (errno, says) in [
        (libc::EINVAL, "use a memfd source"),
        (libc::EOPNOTSUPP, "only vfio-pci's dmabufs are taken"),
        (libc::ENOMEM, "ulimit -l unlimited"),
    ] {
        fake.fail("IOMMU_IOAS_MAP_FILE", errno);
        let e = iommu
            .map_file(0x9000_0000, file.as_fd(), 0, 0x1000)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!("(os error {errno})")) && e.contains(says),
            "{e}"
        );
    }
}

// ----- IOVA ranges from the type1 capability chain -----

#[test]
fn iova_ranges_come_from_the_capability_chain() {
    let ranges = [
        IovaRange {
            start: 0x1000,
            end: 0xfedf_ffff,
        },
        IovaRange {
            start: 0xfef0_0000,
            end: 0xffff_ffff,
        },
        IovaRange {
            start: 0x1_0000_0000,
            end: 0x7f_ffff_ffff,
        },
    ];
    let fake = FakeSys::connectx(BDF);
    fake.set_iommu_info(type1_info_bytes(&ranges));
    let dev = open(&fake, IommuMode::Type1).unwrap();
    assert_eq!(dev.iova_ranges(), &ranges);
    assert_eq!(dev.iommu().iova_ranges(), ranges.to_vec());
    let info_calls: Vec<String> = fake
        .log()
        .into_iter()
        .filter(|l| l.starts_with("VFIO_IOMMU_GET_INFO"))
        .collect();
    assert_eq!(
        info_calls,
        lines(&[
            "VFIO_IOMMU_GET_INFO /dev/vfio/vfio argsz=24",
            "VFIO_IOMMU_GET_INFO /dev/vfio/vfio argsz=104"
        ])
    );
}

#[test]
fn old_kernels_without_the_capability_get_a_conservative_window() {
    let mut header = vec![0u8; 24];
    header[0..4].copy_from_slice(&24u32.to_ne_bytes());
    header[4..8].copy_from_slice(&k::VFIO_IOMMU_INFO_PGSIZES.to_ne_bytes());
    let fake = FakeSys::connectx(BDF);
    fake.set_iommu_info(header);
    let dev = open(&fake, IommuMode::Type1).unwrap();
    let ranges = dev.iova_ranges();
    assert!(!ranges.is_empty());
    assert!(ranges.iter().all(|r| r.end < 1 << 39));
    // The x86 interrupt window is never handed out.
    assert!(ranges
        .iter()
        .all(|r| r.end < 0xfee0_0000 || r.start > 0xfeef_ffff));
}

#[test]
fn malformed_capability_chains_are_errors_not_panics() {
    let good = type1_info_bytes(&[IovaRange {
        start: 0,
        end: 0xffff_ffff,
    }]);
    let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();

    let mut b = good.clone();
    b[16..20].copy_from_slice(&4096u32.to_ne_bytes()); // first capability past the end
    cases.push(("outside", b));

    let mut b = good.clone();
    b[16..20].copy_from_slice(&8u32.to_ne_bytes()); // capability inside the header
    cases.push(("outside", b));

    let mut b = good.clone();
    b[28..32].copy_from_slice(&24u32.to_ne_bytes()); // DMA-avail cap points back at itself
    cases.push(("goes back", b));

    let mut b = good.clone();
    b[48..52].copy_from_slice(&u32::MAX.to_ne_bytes()); // nr_iovas far beyond the answer
    cases.push(("more than the answer holds", b));

    let mut b = good.clone();
    b[56..64].copy_from_slice(&0x2000u64.to_ne_bytes()); // start
    b[64..72].copy_from_slice(&0x1000u64.to_ne_bytes()); // end < start
    cases.push(("runs backwards", b));

    let mut b = good.clone();
    b[48..52].copy_from_slice(&0u32.to_ne_bytes()); // no range at all
    let len = b.len() - 16;
    b.truncate(len);
    b[0..4].copy_from_slice(&(len as u32).to_ne_bytes());
    cases.push(("no usable IOVA range", b));

    for (want, bytes) in cases {
        let fake = FakeSys::connectx(BDF);
        fake.set_iommu_info(bytes);
        let e = open_err(&fake, IommuMode::Type1);
        assert!(matches!(e, VfioError::UnsupportedApi { .. }), "{want}: {e}");
        assert!(e.to_string().contains(want), "{want}: {e}");
        assert_eq!(fake.open_fds(), 0);
    }
}

// ----- lifetime -----

#[test]
fn drop_unmaps_bar0_and_closes_everything() {
    let fake = FakeSys::connectx(BDF);
    let dev = open(&fake, IommuMode::Type1).unwrap();
    assert_eq!(fake.open_fds(), 3);
    assert_eq!(fake.live_mmaps(), 1);
    let iommu = dev.iommu();
    fake.clear_log();
    drop(dev);
    // BAR0 first, then the device; the container and group stay with the IOMMU handle.
    assert_eq!(
        fake.log(),
        lines(&["munmap len=0x100000", "close 0000:06:00.0"])
    );
    assert_eq!(fake.open_fds(), 2);
    drop(iommu);
    assert_eq!(fake.open_fds(), 0);
    assert_eq!(fake.live_mmaps(), 0);
}

#[test]
fn iommufd_device_drops_cleanly() {
    let fake = FakeSys::connectx(BDF);
    let dev = open(&fake, IommuMode::Iommufd).unwrap();
    assert_eq!(fake.open_fds(), 2);
    drop(dev);
    assert_eq!(fake.open_fds(), 0);
    assert_eq!(fake.live_mmaps(), 0);
}

#[test]
fn backend_is_usable_as_a_trait_object_bound() {
    fn assert_backend<B: Backend>() {}
    assert_backend::<VfioDevice<FakeSys>>();
    assert_backend::<VfioDevice>();
}

// ----- PCI addresses -----

#[test]
fn pci_address_parsing() {
    let ok = |s: &str| PciAddress::parse(s).unwrap().to_string();
    assert_eq!(ok("0000:06:00.0"), "0000:06:00.0");
    assert_eq!(ok("06:00.0"), "0000:06:00.0");
    assert_eq!(ok("6:0.1"), "0000:06:00.1");
    assert_eq!(ok("0000:AF:1F.7"), "0000:af:1f.7");
    assert_eq!(ok("  0001:00:02.3\n"), "0001:00:02.3");
    assert_eq!(ok("10000:e1:00.0"), "10000:e1:00.0");
    let a = PciAddress::parse("0002:81:1e.5").unwrap();
    assert_eq!(
        (a.domain(), a.bus(), a.device(), a.function()),
        (2, 0x81, 0x1e, 5)
    );
    assert_eq!(
        a.sysfs_path().to_str(),
        Some("/sys/bus/pci/devices/0002:81:1e.5")
    );
    assert_eq!(
        "0000:06:00.0".parse::<PciAddress>().unwrap(),
        PciAddress::new(0, 6, 0, 0).unwrap()
    );
    assert!(PciAddress::new(0, 0, 32, 0).is_none());
    assert!(PciAddress::new(0, 0, 0, 8).is_none());

    for bad in [
        "",
        "   ",
        "0000:06:00",
        "06:00",
        "0000:06:00.8",
        "0000:06:20.0",
        "0000:06:00.0.1",
        "0000:006:00.0",
        "0000:06:000.0",
        "000000000:06:00.0",
        "0:0000:06:00.0",
        ":06:00.0",
        "0000::00.0",
        "0000:06:00.",
        "+6:00.0",
        "0x06:00.0",
        "0000:0g:00.0",
        "0000:06:00.a",
        "0000:06:00.00",
        "０6:00.0",
        "0000:06:00.-1",
    ] {
        let e = PciAddress::parse(bad).unwrap_err();
        assert!(matches!(e, VfioError::BadAddress { .. }), "{bad:?}");
        let msg = e.to_string();
        assert!(msg.contains(&format!("{bad:?}")), "{msg}");
        assert!(msg.contains("0000:06:00.0"), "{msg}");
    }
    // Opening with a bad address touches nothing.
    let fake = FakeSys::connectx(BDF);
    assert!(matches!(
        VfioDevice::open("06:00", IommuMode::Auto, fake.clone()).unwrap_err(),
        VfioError::BadAddress { .. }
    ));
    assert!(fake.log().is_empty());
}
