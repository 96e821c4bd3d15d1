//! Importing and mapping dmabufs (and memfds) against a fake IOMMU that records mappings, can
//! refuse host memory the way VFIO refuses `VM_PFNMAP` mappings, and plays the device.

use std::collections::BTreeMap;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use cxdirect_dma::{
    export, DmaBuf, DmaBufError, DmaBufKind, DmaBufMode, Iommu, IommuError, IovaAllocator,
    IovaRange,
};

struct FakeIommu {
    /// IOVA -> (host address, length).
    mapped: Mutex<BTreeMap<u64, (usize, usize)>>,
    /// Host-memory maps to refuse before accepting one.
    refuse_host: AtomicU32,
    /// Accept `map_file`.
    files: bool,
    file_maps: AtomicU32,
}

impl FakeIommu {
    fn new(refuse_host: u32, files: bool) -> Arc<Self> {
        Arc::new(Self {
            mapped: Mutex::new(BTreeMap::new()),
            refuse_host: AtomicU32::new(refuse_host),
            files,
            file_maps: AtomicU32::new(0),
        })
    }

    fn host_of(&self, iova: u64, len: usize) -> *mut u8 {
        let mapped = self.mapped.lock().unwrap();
        let (&base, &(host, map_len)) = mapped.range(..=iova).next_back().expect("unmapped");
        let off = (iova - base) as usize;
        assert!(off + len <= map_len, "device access past the mapping");
        assert!(host != 0, "descriptor mappings have no host address here");
        (host + off) as *mut u8
    }

    fn device_write(&self, iova: u64, data: &[u8]) {
        let host = self.host_of(iova, data.len());
        // SAFETY: `host_of` found a live mapping of `data.len()` bytes.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), host, data.len()) };
    }

    fn device_read(&self, iova: u64, len: usize) -> Vec<u8> {
        let host = self.host_of(iova, len);
        let mut out = vec![0; len];
        // SAFETY: as above.
        unsafe { std::ptr::copy_nonoverlapping(host, out.as_mut_ptr(), len) };
        out
    }

    fn live(&self) -> usize {
        self.mapped.lock().unwrap().len()
    }
}

// SAFETY: the fake touches memory only through live mappings and forgets a mapping before
// `unmap` returns `Ok`.
unsafe impl Iommu for FakeIommu {
    fn iova_ranges(&self) -> Vec<IovaRange> {
        vec![IovaRange {
            start: 0x1_0000_0000,
            end: 0x1_ffff_ffff,
        }]
    }

    unsafe fn map(&self, iova: u64, host: *mut u8, len: usize) -> Result<(), IommuError> {
        if self
            .refuse_host
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(IommuError::MapRefused {
                iova,
                len: len as u64,
                reason: "Bad address (cannot pin a VM_PFNMAP mapping)".into(),
            });
        }
        self.mapped
            .lock()
            .unwrap()
            .insert(iova, (host as usize, len));
        Ok(())
    }

    fn map_file(
        &self,
        iova: u64,
        _fd: BorrowedFd<'_>,
        _offset: u64,
        len: usize,
    ) -> Result<(), IommuError> {
        if !self.files {
            return Err(IommuError::FileMapUnsupported {
                reason: "IOMMU_IOAS_MAP_FILE: Inappropriate ioctl for device".into(),
            });
        }
        self.file_maps.fetch_add(1, Ordering::Relaxed);
        self.mapped.lock().unwrap().insert(iova, (0, len));
        Ok(())
    }

    fn unmap(&self, iova: u64, len: usize) -> Result<(), IommuError> {
        match self.mapped.lock().unwrap().remove(&iova) {
            Some((_, l)) if l == len => Ok(()),
            _ => Err(IommuError::UnmapRefused {
                iova,
                len: len as u64,
                reason: "not mapped".into(),
            }),
        }
    }
}

fn allocator(iommu: &FakeIommu) -> Arc<IovaAllocator> {
    Arc::new(IovaAllocator::new(&iommu.iova_ranges()).unwrap())
}

#[test]
fn a_range_inside_a_memfd_maps_to_its_trimmed_pages_and_reaches_the_device() {
    let iommu = FakeIommu::new(0, false);
    let iovas = allocator(&iommu);
    let buf = DmaBuf::from_memfd(export::memfd("rx", 16 * 4096).unwrap()).unwrap();
    assert_eq!(buf.kind(), DmaBufKind::Memfd);
    assert_eq!(buf.size(), 16 * 4096);
    let (offset, len) = (4096 + 100, 3 * 4096 + 50);
    let mapping = buf
        .map(iommu.clone(), &iovas, offset, len, DmaBufMode::Pinned)
        .unwrap();
    let pages = mapping.pages();
    // Bytes 4196..16534 touch pages 1..=4: four pages, 100 bytes in, 4096 - 150 left over.
    assert_eq!(pages.iovas.len(), 4);
    assert_eq!(pages.first_offset, 100);
    assert_eq!(pages.last_tail, 4 * 4096 - 100 - len as usize);
    assert_eq!(pages.len(), len as usize);
    assert_eq!(pages.start_iova(), Some(mapping.iova()));
    for pair in pages.iovas.windows(2) {
        assert_eq!(pair[1] - pair[0], 4096);
    }
    assert_eq!(mapping.attached_by(), "host mapping");

    iommu.device_write(mapping.iova() + 10, b"from the device");
    let mut back = [0u8; 15];
    mapping.read(10, &mut back).unwrap();
    assert_eq!(&back, b"from the device");
    mapping.write(len as usize - 4, b"tail").unwrap();
    assert_eq!(iommu.device_read(mapping.iova() + len - 4, 4), b"tail");
    assert!(matches!(
        mapping.read(len as usize - 3, &mut [0u8; 4]),
        Err(DmaBufError::OutOfBounds { .. })
    ));

    drop(mapping);
    assert_eq!(iommu.live(), 0);
    assert_eq!(iovas.allocated_bytes(), 0);
}

#[test]
fn ranges_outside_the_buffer_are_refused_with_the_sizes() {
    let iommu = FakeIommu::new(0, false);
    let iovas = allocator(&iommu);
    let buf = DmaBuf::from_memfd(export::memfd("small", 4096).unwrap()).unwrap();
    for (offset, len) in [(0, 0), (0, 4097), (4000, 200), (u64::MAX, 2)] {
        let err = buf
            .map(iommu.clone(), &iovas, offset, len, DmaBufMode::Pinned)
            .unwrap_err();
        assert!(matches!(err, DmaBufError::BadRange { .. }), "{err}");
        assert!(err.to_string().contains("0x1000-byte dmabuf"), "{err}");
    }
    assert_eq!(iommu.live(), 0);
}

#[test]
fn a_memfd_is_not_a_dmabuf() {
    let err = DmaBuf::import(export::memfd("plain", 4096).unwrap()).unwrap_err();
    assert!(matches!(err, DmaBufError::NotADmaBuf { .. }), "{err}");
    assert!(err.to_string().contains("/memfd:plain"), "{err}");
}

#[test]
fn an_unpinnable_buffer_falls_back_to_the_descriptor_or_names_the_missing_feature() {
    let buf = DmaBuf::from_memfd(export::memfd("gpu-like", 8 * 4096).unwrap()).unwrap();

    let iommu = FakeIommu::new(u32::MAX, true);
    let iovas = allocator(&iommu);
    let mapping = buf
        .map(iommu.clone(), &iovas, 0, 8 * 4096, DmaBufMode::Pinned)
        .unwrap();
    assert_eq!(mapping.attached_by(), "descriptor");
    assert_eq!(iommu.file_maps.load(Ordering::Relaxed), 1);
    drop(mapping);
    assert_eq!(iommu.live(), 0);

    let iommu = FakeIommu::new(u32::MAX, false);
    let iovas = allocator(&iommu);
    let err = buf
        .map(iommu.clone(), &iovas, 0, 8 * 4096, DmaBufMode::Pinned)
        .unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, DmaBufError::Unmappable { .. }), "{msg}");
    assert!(
        msg.contains("VM_PFNMAP") && msg.contains("IOMMU_IOAS_MAP_FILE"),
        "{msg}"
    );
    assert!(msg.contains("cannot pin a VM_PFNMAP mapping"), "{msg}");
    assert_eq!(iovas.allocated_bytes(), 0, "the IOVA range went back");
}

#[test]
fn revocation_waits_for_the_keys_then_unmaps() {
    let iommu = FakeIommu::new(0, false);
    let iovas = allocator(&iommu);
    let buf = DmaBuf::from_memfd(export::memfd("revocable", 4 * 4096).unwrap()).unwrap();

    let pinned = buf
        .map(iommu.clone(), &iovas, 0, 4096, DmaBufMode::Pinned)
        .unwrap();
    assert!(matches!(pinned.revoke(), Err(DmaBufError::Pinned)));
    drop(pinned);

    let mapping = buf
        .map(iommu.clone(), &iovas, 0, 4 * 4096, DmaBufMode::Revocable)
        .unwrap();
    mapping.key_registered();
    mapping.request_revoke();
    assert!(mapping.revoke_requested());
    let err = mapping.revoke().unwrap_err();
    assert!(matches!(err, DmaBufError::KeysAlive { keys: 1 }), "{err}");
    assert_eq!(iommu.live(), 1, "still mapped while a key translates it");
    mapping.key_released();
    mapping.revoke().unwrap();
    assert!(mapping.is_revoked());
    assert_eq!(iommu.live(), 0);
    assert_eq!(iovas.allocated_bytes(), 0);
    assert!(matches!(
        mapping.read(0, &mut [0u8; 4]),
        Err(DmaBufError::Revoked { .. })
    ));
    mapping.revoke().unwrap();
    drop(mapping);
    assert_eq!(iovas.allocated_bytes(), 0);
}

/// Real udmabufs where the host has `/dev/udmabuf` (the QEMU rig's guest runs the same path
/// through `cxdirect-dmabuf-rx`). Ignored unless asked for (`-- --ignored`, as `.ci/run` does
/// where the device is present) rather than probed at build time: a build script cannot watch
/// for the device appearing without rebuilding the crate on every build (cargo counts a missing
/// path as changed, and `/dev` itself changes all the time).
#[test]
#[ignore = "needs /dev/udmabuf, readable and writable: modprobe udmabuf, then run with --ignored"]
fn a_udmabuf_imports_with_its_exporter_and_falls_back_to_its_memfd() {
    let udmabuf = export::udmabuf(8 * 4096).expect("a udmabuf from /dev/udmabuf");
    let buf = DmaBuf::import_with_backing(udmabuf.dmabuf, udmabuf.memfd, 0).unwrap();
    assert_eq!(buf.exporter(), "udmabuf");
    assert_eq!(buf.size(), 8 * 4096);
    // Refuse the dmabuf's own (VM_PFNMAP) mapping as VFIO does; the memfd's is accepted.
    let iommu = FakeIommu::new(1, false);
    let iovas = allocator(&iommu);
    let mapping = buf
        .map(iommu.clone(), &iovas, 4096, 4096, DmaBufMode::Pinned)
        .unwrap();
    assert_eq!(mapping.attached_by(), "backing file mapping");
    iommu.device_write(mapping.iova(), b"same pages");
    let mut back = [0u8; 10];
    mapping.read(0, &mut back).unwrap();
    assert_eq!(&back, b"same pages");
}
