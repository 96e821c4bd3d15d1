//! `DmaRegion` against a fake IOMMU that records what it was asked to do and can be told to fail.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use cxdirect_dma::{
    live_regions, DmaError, DmaRegion, Iommu, IommuError, IovaAllocator, IovaError, IovaRange,
    PageKind, HUGE_PAGE_SIZE,
};

const MIB: u64 = 1 << 20;

/// The process-wide counters (`live_regions`, `leaked_bytes`) are shared by every test in this
/// binary; tests that create regions run one at a time so their before/after checks hold.
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[derive(Default)]
struct FakeState {
    /// Live mappings: IOVA -> (host address, length).
    mapped: BTreeMap<u64, (usize, usize)>,
    /// Every `map` call's host address, successful or not.
    map_hosts: Vec<usize>,
    /// Every `unmap` call, successful or not.
    unmaps: Vec<(u64, usize)>,
}

/// A stand-in for a VFIO backend: checks requests like an IOMMU would, records them, and plays
/// the device by copying to and from mapped memory.
struct FakeIommu {
    ranges: Vec<IovaRange>,
    identity: Option<Result<u64, ()>>,
    fail_map: AtomicBool,
    fail_unmap: AtomicBool,
    state: Mutex<FakeState>,
}

impl FakeIommu {
    fn new() -> Arc<Self> {
        Self::with(
            vec![
                IovaRange {
                    start: 0,
                    end: 0xfedf_ffff,
                },
                IovaRange {
                    start: 0xfef0_0000,
                    end: 0xffff_ffff_ffff,
                },
            ],
            None,
        )
    }

    fn with(ranges: Vec<IovaRange>, identity: Option<Result<u64, ()>>) -> Arc<Self> {
        Arc::new(Self {
            ranges,
            identity,
            fail_map: AtomicBool::new(false),
            fail_unmap: AtomicBool::new(false),
            state: Mutex::new(FakeState::default()),
        })
    }

    fn state(&self) -> MutexGuard<'_, FakeState> {
        self.state.lock().unwrap()
    }

    /// Host address and remaining length behind `iova`, if mapped.
    fn translate(&self, iova: u64, len: usize) -> Option<*mut u8> {
        let state = self.state();
        let (&base, &(host, map_len)) = state.mapped.range(..=iova).next_back()?;
        let offset = usize::try_from(iova - base).ok()?;
        (offset.checked_add(len)? <= map_len).then_some((host + offset) as *mut u8)
    }

    /// What a device DMA write does.
    fn device_write(&self, iova: u64, data: &[u8]) {
        let host = self
            .translate(iova, data.len())
            .expect("device wrote unmapped IOVA");
        // SAFETY: `translate` found `data.len()` bytes of a live mapping at `host`; the test owns
        // the region and does not access it concurrently.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), host, data.len()) };
    }

    /// What a device DMA read does.
    fn device_read(&self, iova: u64, len: usize) -> Vec<u8> {
        let host = self
            .translate(iova, len)
            .expect("device read unmapped IOVA");
        let mut out = vec![0u8; len];
        // SAFETY: as in `device_write`.
        unsafe { std::ptr::copy_nonoverlapping(host, out.as_mut_ptr(), len) };
        out
    }
}

// SAFETY: the fake never touches memory outside a live mapping (it only records addresses, and
// the device helpers go through `translate`), and forgets a mapping before `unmap` returns `Ok`.
unsafe impl Iommu for FakeIommu {
    fn iova_ranges(&self) -> Vec<IovaRange> {
        self.ranges.clone()
    }

    unsafe fn map(&self, iova: u64, host: *mut u8, len: usize) -> Result<(), IommuError> {
        let mut state = self.state();
        state.map_hosts.push(host as usize);
        let refuse = |reason: &str| IommuError::MapRefused {
            iova,
            len: len as u64,
            reason: reason.into(),
        };
        if self.fail_map.load(Ordering::Relaxed) {
            return Err(refuse("told to fail"));
        }
        if iova % 4096 != 0 || host as usize % 4096 != 0 || len % 4096 != 0 {
            return Err(refuse("not page aligned"));
        }
        let last = iova + len as u64 - 1;
        let overlaps = state
            .mapped
            .iter()
            .any(|(&start, &(_, l))| start <= last && iova < start + l as u64);
        if overlaps {
            return Err(refuse("overlaps a live mapping"));
        }
        state.mapped.insert(iova, (host as usize, len));
        Ok(())
    }

    fn unmap(&self, iova: u64, len: usize) -> Result<(), IommuError> {
        let mut state = self.state();
        state.unmaps.push((iova, len));
        let refuse = |reason: &str| IommuError::UnmapRefused {
            iova,
            len: len as u64,
            reason: reason.into(),
        };
        if self.fail_unmap.load(Ordering::Relaxed) {
            return Err(refuse("told to fail"));
        }
        match state.mapped.get(&iova) {
            Some(&(_, l)) if l == len => {
                state.mapped.remove(&iova);
                Ok(())
            }
            _ => Err(refuse("not mapped with that length")),
        }
    }

    fn identity_iova(&self, host: *mut u8, _len: usize) -> Option<Result<u64, IommuError>> {
        self.identity.map(|identity| {
            identity.map_err(|()| IommuError::NoPhysicalAddress {
                addr: host as usize,
                reason: "told to fail".into(),
            })
        })
    }
}

fn allocator(iommu: &FakeIommu) -> Arc<IovaAllocator> {
    Arc::new(IovaAllocator::from_iommu(iommu).unwrap())
}

/// Whether any page of `[addr, addr + len)` is mapped in this process (`mincore` fails with
/// ENOMEM on unmapped ranges).
fn is_mapped(addr: usize, len: usize) -> bool {
    let mut residency = vec![0u8; len.div_ceil(4096)];
    // SAFETY: mincore only reads page tables and writes one byte per page into `residency`,
    // which has room for every page of the range.
    let rc = unsafe { libc::mincore(addr as *mut libc::c_void, len, residency.as_mut_ptr()) };
    rc == 0
}

#[test]
fn region_is_mapped_while_alive_and_unmapped_on_drop() {
    let _serial = serial();
    let iommu = FakeIommu::new();
    let iovas = allocator(&iommu);
    let free_before = iovas.free_bytes();
    let live_before = live_regions();

    let region = DmaRegion::new(iommu.clone(), &iovas, 10_000, PageKind::Small).unwrap();
    assert_eq!(region.len(), 12_288, "rounded up to whole 4 KiB pages");
    assert!(!region.is_empty());
    assert_eq!(region.page_kind(), PageKind::Small);
    assert_eq!(region.page_size(), 4096);
    assert_eq!(region.iova() % 4096, 0);
    assert!(region.iova() >= MIB, "low 1 MiB kept out");
    assert_eq!(region.as_ptr() as usize % 4096, 0);
    assert_eq!(live_regions(), live_before + 1);
    assert_eq!(iovas.allocated_bytes(), 12_288);
    {
        let state = iommu.state();
        assert_eq!(
            state.mapped.get(&region.iova()),
            Some(&(region.as_ptr() as usize, 12_288))
        );
    }
    let (iova, host) = (region.iova(), region.as_ptr() as usize);
    assert!(format!("{region:?}").contains("DmaRegion"));

    drop(region);
    let state = iommu.state();
    assert!(state.mapped.is_empty());
    assert_eq!(state.unmaps, vec![(iova, 12_288)]);
    assert_eq!(iovas.free_bytes(), free_before);
    assert_eq!(iovas.allocation_count(), 0);
    assert_eq!(live_regions(), live_before);
    // Whether `host` is still mapped cannot be checked reliably: any other thread may map the
    // freed range again at once. The fake IOMMU's record above shows the unmap order.
    let _ = host;
}

#[test]
fn new_regions_are_zeroed() {
    let _serial = serial();
    let iommu = FakeIommu::new();
    let iovas = allocator(&iommu);
    // Reuse of freed memory must not show old contents.
    for _ in 0..3 {
        let region = DmaRegion::new(iommu.clone(), &iovas, 64 << 10, PageKind::Small).unwrap();
        let mut all = vec![0xffu8; region.len()];
        region.read(0, &mut all).unwrap();
        assert!(all.iter().all(|&b| b == 0));
        region.fill(0, region.len(), 0xa5).unwrap();
    }
}

#[test]
fn copies_and_words_round_trip_big_endian() {
    let _serial = serial();
    let iommu = FakeIommu::new();
    let iovas = allocator(&iommu);
    let region = DmaRegion::new(iommu.clone(), &iovas, 8192, PageKind::Small).unwrap();

    region.write_u32_be(0x40, 0x1122_3344).unwrap();
    let mut bytes = [0u8; 4];
    region.read(0x40, &mut bytes).unwrap();
    assert_eq!(bytes, [0x11, 0x22, 0x33, 0x44]);
    assert_eq!(region.read_u32_be(0x40).unwrap(), 0x1122_3344);
    // The device sees the same big-endian bytes at the IOVA.
    assert_eq!(
        iommu.device_read(region.iova_of(0x40).unwrap(), 4),
        vec![0x11, 0x22, 0x33, 0x44]
    );

    region.write_u64_be(0x1ff8, 0x0102_0304_0506_0708).unwrap();
    let mut bytes = [0u8; 8];
    region.read(0x1ff8, &mut bytes).unwrap();
    assert_eq!(bytes, [1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(region.read_u64_be(0x1ff8).unwrap(), 0x0102_0304_0506_0708);

    // A CQE-like record written by the device reads back as big-endian words.
    let cqe_iova = region.iova_of(0x1000).unwrap();
    iommu.device_write(cqe_iova, &[0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 0x2a]);
    assert_eq!(region.read_u32_be(0x1000).unwrap(), 0xdead_beef);
    assert_eq!(region.read_u64_be(0x1000).unwrap(), 0xdead_beef_0000_002a);

    // Unaligned byte copies of odd lengths across word boundaries.
    let data: Vec<u8> = (0..77u8).collect();
    region.write(0x203, &data).unwrap();
    let mut back = vec![0u8; 77];
    region.read(0x203, &mut back).unwrap();
    assert_eq!(back, data);
    assert_eq!(iommu.device_read(region.iova_of(0x203).unwrap(), 77), data);

    region.fill(0x301, 13, 0x7e).unwrap();
    let mut around = [0u8; 15];
    region.read(0x300, &mut around).unwrap();
    assert_eq!(around[0], 0);
    assert!(around[1..14].iter().all(|&b| b == 0x7e));
    assert_eq!(around[14], 0);

    assert_eq!(region.iova_of(0), Some(region.iova()));
    assert_eq!(region.iova_of(8191), Some(region.iova() + 8191));
    assert_eq!(region.iova_of(8192), None);
}

#[test]
fn out_of_bounds_and_misaligned_accesses_are_errors() {
    let _serial = serial();
    let iommu = FakeIommu::new();
    let iovas = allocator(&iommu);
    let region = DmaRegion::new(iommu.clone(), &iovas, 4096, PageKind::Small).unwrap();

    let mut four = [0u8; 4];
    assert!(matches!(
        region.read(4094, &mut four),
        Err(DmaError::OutOfBounds {
            offset: 4094,
            len: 4,
            region_len: 4096
        })
    ));
    assert!(matches!(
        region.write(usize::MAX, &four),
        Err(DmaError::OutOfBounds { .. })
    ));
    assert!(matches!(
        region.fill(4000, 97, 0),
        Err(DmaError::OutOfBounds { .. })
    ));
    assert!(matches!(
        region.read_u32_be(4096),
        Err(DmaError::OutOfBounds { .. })
    ));
    assert!(matches!(
        region.write_u64_be(4092, 0),
        Err(DmaError::OutOfBounds { .. })
    ));
    assert!(matches!(
        region.read_u32_be(2),
        Err(DmaError::Misaligned {
            offset: 2,
            align: 4
        })
    ));
    assert!(matches!(
        region.write_u32_be(4093, 0),
        Err(DmaError::OutOfBounds { .. })
    ));
    assert!(matches!(
        region.read_u64_be(4),
        Err(DmaError::Misaligned {
            offset: 4,
            align: 8
        })
    ));
    assert!(matches!(
        region.write_u64_be(12, 1),
        Err(DmaError::Misaligned { .. })
    ));
    // Refused writes wrote nothing; empty accesses at the end are fine.
    let mut all = vec![0u8; 4096];
    region.read(0, &mut all).unwrap();
    assert!(all.iter().all(|&b| b == 0));
    region.read(4096, &mut []).unwrap();
    region.write(4096, &[]).unwrap();

    let msg = region.read(4094, &mut four).unwrap_err().to_string();
    assert!(msg.contains("0xffe") && msg.contains("0x1000"), "{msg}");
}

#[test]
fn strided_byte_stores_touch_exactly_their_bytes_or_nothing() {
    let _serial = serial();
    let iommu = FakeIommu::new();
    let iovas = allocator(&iommu);
    let region = DmaRegion::new(iommu.clone(), &iovas, 4096, PageKind::Small).unwrap();

    // The last byte of slots 2..=5 of 64 bytes, as a CQ's ownership bytes.
    region.write_byte_strided(2 * 64 + 63, 64, 4, 0xf1).unwrap();
    let mut all = vec![0u8; 4096];
    region.read(0, &mut all).unwrap();
    for (at, &b) in all.iter().enumerate() {
        let expected = if (2..=5).contains(&(at / 64)) && at % 64 == 63 {
            0xf1
        } else {
            0
        };
        assert_eq!(b, expected, "byte {at}");
    }
    // Ending on the region's last byte is fine; one stride further is refused whole.
    region
        .write_byte_strided(4095 - 64 * 3, 64, 4, 0xaa)
        .unwrap();
    assert!(matches!(
        region.write_byte_strided(4095 - 64 * 3, 64, 5, 0xbb),
        Err(DmaError::OutOfBounds { .. })
    ));
    assert!(matches!(
        region.write_byte_strided(0, usize::MAX, 3, 0xbb),
        Err(DmaError::OutOfBounds { .. })
    ));
    assert!(matches!(
        region.write_byte_strided(0, 0, 2, 0xbb),
        Err(DmaError::OutOfBounds { .. })
    ));
    region.write_byte_strided(4096, 64, 0, 0xbb).unwrap();
    region.read(0, &mut all).unwrap();
    assert!(!all.contains(&0xbb), "refused stores wrote nothing");
    assert_eq!(all.iter().filter(|&&b| b == 0xaa).count(), 4);
}

#[test]
fn zero_length_is_refused() {
    let _serial = serial();
    let iommu = FakeIommu::new();
    let iovas = allocator(&iommu);
    let live_before = live_regions();
    let err = DmaRegion::new(iommu.clone(), &iovas, 0, PageKind::Auto).unwrap_err();
    assert!(matches!(err, DmaError::InvalidLength { len: 0 }));
    let err = DmaRegion::new(iommu.clone(), &iovas, usize::MAX, PageKind::Small).unwrap_err();
    assert!(matches!(err, DmaError::InvalidLength { .. }));
    assert_eq!(live_regions(), live_before);
    assert!(iommu.state().map_hosts.is_empty());
}

#[test]
fn map_failure_gives_back_the_iova_and_the_memory() {
    let _serial = serial();
    let iommu = FakeIommu::new();
    let iovas = allocator(&iommu);
    let free_before = iovas.free_bytes();
    let live_before = live_regions();
    iommu.fail_map.store(true, Ordering::Relaxed);

    let err = DmaRegion::new(iommu.clone(), &iovas, 256 << 10, PageKind::Small).unwrap_err();
    assert!(
        matches!(err, DmaError::Iommu(IommuError::MapRefused { .. })),
        "{err}"
    );
    assert!(err.to_string().contains("told to fail"));
    assert_eq!(iovas.free_bytes(), free_before);
    assert_eq!(iovas.allocation_count(), 0);
    assert_eq!(live_regions(), live_before);
    let state = iommu.state();
    assert!(state.mapped.is_empty());
    assert!(
        state.unmaps.is_empty(),
        "nothing was mapped, so nothing to unmap"
    );
    assert!(state.map_hosts.last().is_some(), "the map was attempted");
}

#[test]
fn unmap_failure_leaks_the_memory_and_retires_the_iova() {
    let _serial = serial();
    let iommu = FakeIommu::new();
    let iovas = allocator(&iommu);
    let leaked_before = DmaRegion::leaked_bytes();
    let live_before = live_regions();

    let region = DmaRegion::new(iommu.clone(), &iovas, 16 << 10, PageKind::Small).unwrap();
    let (iova, host, len) = (region.iova(), region.as_ptr() as usize, region.len());
    iommu.fail_unmap.store(true, Ordering::Relaxed);
    drop(region);

    assert!(DmaRegion::leaked_bytes() >= leaked_before + len as u64);
    assert_eq!(live_regions(), live_before);
    assert_eq!(iommu.state().unmaps, vec![(iova, len)]);
    // The device may still reach it: still mapped there, and still in our address space.
    assert!(iommu.state().mapped.contains_key(&iova));
    assert!(is_mapped(host, len));
    iommu.device_write(iova, &[1, 2, 3, 4]);
    // The IOVA range stays allocated, so nothing else is ever put there.
    assert_eq!(iovas.allocation_count(), 1);
    assert_eq!(iovas.allocated_bytes(), len as u64);
    iommu.fail_unmap.store(false, Ordering::Relaxed);
    let next = DmaRegion::new(iommu.clone(), &iovas, 16 << 10, PageKind::Small).unwrap();
    assert!(next.iova() >= iova + len as u64 || next.iova() + (next.len() as u64) <= iova);
}

#[test]
fn auto_uses_whichever_pages_the_machine_has() {
    let _serial = serial();
    let iommu = FakeIommu::new();
    let iovas = allocator(&iommu);

    let region = DmaRegion::new(iommu.clone(), &iovas, 3 << 20, PageKind::Auto).unwrap();
    match region.page_kind() {
        PageKind::Huge2M => {
            assert_eq!(region.len(), 4 << 20);
            assert_eq!(region.iova() % HUGE_PAGE_SIZE as u64, 0);
            assert_eq!(region.page_size(), HUGE_PAGE_SIZE);
        }
        PageKind::Small => assert_eq!(region.len(), 3 << 20),
        PageKind::Auto => panic!("a region reports the pages it got, never Auto"),
    }
    let mut tail = [0xffu8; 64];
    region.read(region.len() - 64, &mut tail).unwrap();
    assert_eq!(tail, [0u8; 64]);

    // Small requests are not worth a whole huge page.
    let small = DmaRegion::new(iommu.clone(), &iovas, 8192, PageKind::Auto).unwrap();
    assert_eq!(small.page_kind(), PageKind::Small);
    assert_eq!(small.len(), 8192);
}

#[test]
fn huge_pages_either_work_or_say_how_to_get_them() {
    let _serial = serial();
    let iommu = FakeIommu::new();
    let iovas = allocator(&iommu);
    let live_before = live_regions();
    match DmaRegion::new(iommu.clone(), &iovas, 100, PageKind::Huge2M) {
        Ok(region) => {
            assert_eq!(region.page_kind(), PageKind::Huge2M);
            assert_eq!(region.len(), HUGE_PAGE_SIZE);
            assert_eq!(region.iova() % HUGE_PAGE_SIZE as u64, 0);
            region.write_u64_be(HUGE_PAGE_SIZE - 8, 42).unwrap();
            assert_eq!(region.read_u64_be(HUGE_PAGE_SIZE - 8).unwrap(), 42);
        }
        Err(err) => {
            assert!(
                matches!(err, DmaError::HugePages { len, .. } if len == HUGE_PAGE_SIZE),
                "{err}"
            );
            assert!(err.to_string().contains("nr_hugepages"), "{err}");
            assert_eq!(iovas.allocation_count(), 0);
            assert!(iommu.state().map_hosts.is_empty());
        }
    }
    assert_eq!(live_regions(), live_before);
}

#[test]
fn identity_mode_takes_the_backends_iova() {
    let _serial = serial();
    let phys = 0x1_2340_0000;
    let iommu = FakeIommu::with(
        vec![IovaRange {
            start: 0,
            end: u64::MAX,
        }],
        Some(Ok(phys)),
    );
    let iovas = allocator(&iommu);
    let free_before = iovas.free_bytes();

    let region = DmaRegion::new(iommu.clone(), &iovas, 4096, PageKind::Small).unwrap();
    assert_eq!(region.iova(), phys);
    assert_eq!(region.iova_of(0x10), Some(phys + 0x10));
    assert_eq!(iovas.allocation_count(), 0, "the allocator is not used");
    assert!(iommu.state().mapped.contains_key(&phys));
    drop(region);
    assert_eq!(iommu.state().unmaps, vec![(phys, 4096)]);
    assert!(iommu.state().mapped.is_empty());
    assert_eq!(iovas.free_bytes(), free_before);
}

#[test]
fn identity_failure_gives_back_the_memory() {
    let _serial = serial();
    let iommu = FakeIommu::with(
        vec![IovaRange {
            start: 0,
            end: u64::MAX,
        }],
        Some(Err(())),
    );
    let iovas = allocator(&iommu);
    let live_before = live_regions();
    let err = DmaRegion::new(iommu.clone(), &iovas, 4096, PageKind::Small).unwrap_err();
    assert!(
        matches!(err, DmaError::Iommu(IommuError::NoPhysicalAddress { .. })),
        "{err}"
    );
    assert!(iommu.state().map_hosts.is_empty(), "map is never tried");
    assert_eq!(live_regions(), live_before);
}

#[test]
fn exhausted_iova_space_gives_back_the_memory() {
    let _serial = serial();
    let iommu = FakeIommu::with(
        vec![IovaRange {
            start: MIB,
            end: MIB + 0x1_ffff,
        }],
        None,
    );
    let iovas = allocator(&iommu);
    let live_before = live_regions();
    let err = DmaRegion::new(iommu.clone(), &iovas, 256 << 10, PageKind::Small).unwrap_err();
    assert!(
        matches!(
            err,
            DmaError::Iova(IovaError::OutOfSpace {
                len: 0x4_0000,
                largest_free: 0x2_0000,
                ..
            })
        ),
        "{err}"
    );
    assert!(err.to_string().contains("out of IOVA space"));
    assert!(iommu.state().map_hosts.is_empty());
    assert_eq!(live_regions(), live_before);
}

#[test]
fn regions_are_shared_between_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<DmaRegion>();

    let _serial = serial();
    let iommu = FakeIommu::new();
    let iovas = allocator(&iommu);
    let region = Arc::new(DmaRegion::new(iommu.clone(), &iovas, 4096, PageKind::Small).unwrap());
    let workers: Vec<_> = (0..8u32)
        .map(|t| {
            let region = Arc::clone(&region);
            std::thread::spawn(move || {
                for i in 0..128u32 {
                    let offset = (t as usize * 128 + i as usize) * 4;
                    region.write_u32_be(offset, t << 16 | i).unwrap();
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    for t in 0..8u32 {
        for i in 0..128u32 {
            let offset = (t as usize * 128 + i as usize) * 4;
            assert_eq!(region.read_u32_be(offset).unwrap(), t << 16 | i);
        }
    }
    // The last owner to drop unmaps, from whichever thread.
    let region = Arc::try_unwrap(region).unwrap();
    std::thread::spawn(move || drop(region)).join().unwrap();
    assert!(iommu.state().mapped.is_empty());
}

#[test]
fn memlock_error_message_tells_the_user_what_to_do() {
    let msg = DmaError::Memlock {
        len: 0x10_0000,
        limit: 8 << 20,
    }
    .to_string();
    assert!(msg.contains("0x100000"), "{msg}");
    assert!(msg.contains("8388608 bytes"), "{msg}");
    assert!(msg.contains("ulimit -l"), "{msg}");
    assert!(msg.contains("RLIMIT_MEMLOCK"), "{msg}");
}
