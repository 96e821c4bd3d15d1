//! `RealSys` against the local kernel, on ordinary files: the file-system lookups, `pread`,
//! `pwrite`, `mmap`, the resource queries, and how a VFIO request on a file that is not a VFIO
//! node fails (with an errno, never a crash). Needs no VFIO device.

use std::path::PathBuf;
use std::ptr;

use cxdirect::backend::vfio::sys::{Access, VfioSys};
use cxdirect::backend::vfio::RealSys;

/// A scratch directory removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("cxdirect-vfio-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn file_system_lookups() {
    let s = Scratch::new("fs");
    std::fs::write(s.0.join("vendor"), "0x15b3\n").unwrap();
    std::fs::create_dir(s.0.join("vfio-dev")).unwrap();
    std::os::unix::fs::symlink("../../bus/pci/drivers/vfio-pci", s.0.join("driver")).unwrap();
    let sys = RealSys;
    assert!(sys.exists(&s.0.join("vendor")));
    assert!(!sys.exists(&s.0.join("device")));
    assert_eq!(sys.read_to_string(&s.0.join("vendor")).unwrap(), "0x15b3\n");
    assert_eq!(
        sys.read_link(&s.0.join("driver")).unwrap(),
        PathBuf::from("../../bus/pci/drivers/vfio-pci")
    );
    assert_eq!(
        sys.read_dir(&s.0).unwrap(),
        vec!["driver", "vendor", "vfio-dev"]
    );
    let e = sys.read_link(&s.0.join("iommu_group")).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
    assert!(sys.page_size() >= 4096 && sys.page_size().is_power_of_two());
    assert!(sys.memlock_limit().unwrap() > 0);
}

#[test]
fn pread_pwrite_and_mmap_on_a_file() {
    let s = Scratch::new("io");
    let path = s.0.join("region");
    std::fs::write(&path, vec![0u8; 8192]).unwrap();
    let sys = RealSys;
    let fd = sys.open(&path, Access::ReadWrite).unwrap();
    assert_eq!(sys.pwrite(&fd, 4100, &[1, 2, 3, 4]).unwrap(), 4);
    let mut buf = [0u8; 4];
    assert_eq!(sys.pread(&fd, 4100, &mut buf).unwrap(), 4);
    assert_eq!(buf, [1, 2, 3, 4]);

    let map = sys.mmap(&fd, 4096, 4096).unwrap();
    // SAFETY: `map` is a live shared mapping of 4096 bytes; offset 4 is inside and aligned.
    let word = unsafe { ptr::read_volatile(map.as_ptr().add(4).cast::<u32>()) };
    assert_eq!(word.to_ne_bytes(), [1, 2, 3, 4]);
    // SAFETY: as above, offset 8 is inside and aligned.
    unsafe {
        ptr::write_volatile(
            map.as_ptr().add(8).cast::<u32>(),
            u32::from_ne_bytes([5, 6, 7, 8]),
        )
    };
    // SAFETY: the mapping came from `mmap` above and is not used afterwards.
    unsafe { sys.munmap(map, 4096) }.unwrap();
    assert_eq!(sys.pread(&fd, 4104, &mut buf).unwrap(), 4);
    assert_eq!(buf, [5, 6, 7, 8]);

    assert!(sys.mmap(&fd, 0, 0).is_err());
    assert!(sys.mmap(&fd, 123, 4096).is_err());
    let ro = sys.open(&path, Access::ReadOnly).unwrap();
    assert!(sys.pwrite(&ro, 0, &[1]).is_err());
}

#[test]
fn vfio_requests_on_a_plain_file_fail_cleanly() {
    let s = Scratch::new("ioctl");
    let path = s.0.join("not-vfio");
    std::fs::write(&path, b"x").unwrap();
    let sys = RealSys;
    let fd = sys.open(&path, Access::ReadWrite).unwrap();
    let enotty = Some(libc::ENOTTY);
    assert_eq!(sys.get_api_version(&fd).unwrap_err().raw_os_error(), enotty);
    assert_eq!(
        sys.check_extension(&fd, 3).unwrap_err().raw_os_error(),
        enotty
    );
    assert_eq!(
        sys.group_get_status(&fd).unwrap_err().raw_os_error(),
        enotty
    );
    assert_eq!(sys.device_get_info(&fd).unwrap_err().raw_os_error(), enotty);
    assert_eq!(
        sys.device_get_region_info(&fd, 0)
            .unwrap_err()
            .raw_os_error(),
        enotty
    );
    assert_eq!(sys.device_reset(&fd).unwrap_err().raw_os_error(), enotty);
    let mut info = vec![0u8; 24];
    assert_eq!(
        sys.iommu_get_info(&fd, &mut info)
            .unwrap_err()
            .raw_os_error(),
        enotty
    );
    assert!(sys.iommu_get_info(&fd, &mut [0u8; 8]).is_err());
    assert_eq!(sys.ioas_alloc(&fd).unwrap_err().raw_os_error(), enotty);
    assert!(sys.group_get_device_fd(&fd, "0000:06:00.0").is_err());
    assert!(sys.group_get_device_fd(&fd, "bad\0name").is_err());
    assert!(sys.unmap_dma(&fd, 0, 4096).is_err());
}
