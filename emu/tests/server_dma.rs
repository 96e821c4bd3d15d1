//! The vfio-user server's guest memory at scale, driven through the backend as QEMU's client
//! drives it: behind a vIOMMU, QEMU sends one `DMA_MAP` per guest page (`vfio_iommu_map_notify`
//! for each leaf `vtd_page_walk_level` finds), at IOVAs unrelated to the pages' places in the
//! guest's memory file. Every file is mapped once, however many maps point into it, so a
//! gigabyte of page maps stays far below the host's `vm.max_map_count` (65,530).
//!
//! The memory files are sparse memfds: a gigabyte costs only the pages a test touches, and the
//! page-by-page test punches out what it has checked as it goes.

use cxdirect_emu::server::backend::EmuBackend;
use cxdirect_emu::{Device, EmuConfig, ExecMode};
use nix::fcntl::{fallocate, FallocateFlags};
use nix::sys::memfd::{memfd_create, MFdFlags};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use vfio_user::{DmaMapFlags, DmaUnmapFlags, ServerBackend};

const PAGE: u64 = 4096;
const GIB: u64 = 1 << 30;

fn backend() -> EmuBackend {
    let cfg = EmuConfig {
        exec: ExecMode::Threaded,
        ..EmuConfig::default()
    };
    EmuBackend::new("test", Device::loopback(cfg))
}

/// A sparse memfd of `len` bytes named `name` (names are unique per test, so that
/// [`maps_of`] counts only this test's mappings).
fn memfd(name: &str, len: u64) -> File {
    let file = File::from(memfd_create(name, MFdFlags::MFD_CLOEXEC).unwrap());
    file.set_len(len).unwrap();
    file
}

/// How many mappings of the memfd `name` this process holds, as `/proc/self/maps` lists them.
fn maps_of(name: &str) -> usize {
    let needle = format!("/memfd:{name} ");
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|l| l.contains(&needle))
        .count()
}

fn read_u64(b: &EmuBackend, iova: u64) -> Result<u64, cxdirect_emu::dma::DmaError> {
    let mut buf = [0u8; 8];
    b.device().iommu().read(iova, &mut buf)?;
    Ok(u64::from_le_bytes(buf))
}

fn file_u64(file: &File, offset: u64) -> u64 {
    let mut buf = [0u8; 8];
    file.read_exact_at(&mut buf, offset).unwrap();
    u64::from_le_bytes(buf)
}

/// The guest page behind IOVA page `i`: a bijection of `0..pages` (7919 is odd, `pages` a power
/// of two), so that neighbouring IOVAs land on pages far apart in the file, as a guest's
/// scattered pages behind one IOVA range do.
fn scatter(i: u64, pages: u64) -> u64 {
    (i * 7919) % pages
}

#[test]
fn a_gigabyte_of_page_maps_lives_in_one_host_mapping() {
    const NAME: &str = "dma-pages-1g";
    const PAGES: u64 = GIB / PAGE;
    const IOVA: u64 = 0x40_0000_0000;
    let mut b = backend();
    let file = memfd(NAME, GIB);
    for i in 0..PAGES {
        let offset = scatter(i, PAGES) * PAGE;
        b.dma_map(
            DmaMapFlags::READ_WRITE,
            offset,
            IOVA + i * PAGE,
            PAGE,
            Some(file.try_clone().unwrap()),
        )
        .unwrap_or_else(|e| panic!("DMA map {i} of {PAGES}: {e}"));
    }
    // 262,144 maps, one host mapping (one `mmap` each would be past vm.max_map_count).
    assert_eq!(b.memory().len(), PAGES as usize);
    assert_eq!(b.memory().bytes(), GIB);
    assert_eq!(b.memory().host_mappings(), 1);
    assert_eq!(maps_of(NAME), 1);
    assert_eq!(b.device().iommu().mapping_count(), PAGES as usize);

    // Every page, through the model's DMA path, at the right place in the file: the device's
    // writes land at the page's file offset, and the client's writes there reach the device.
    // Walked file chunk by file chunk, each punched out once checked, to keep the test's memory
    // at one chunk.
    let mut iova_page = vec![0u64; PAGES as usize];
    for i in 0..PAGES {
        iova_page[scatter(i, PAGES) as usize] = i;
    }
    const CHUNK: u64 = 16384;
    let iommu = b.device().iommu();
    for chunk in (0..PAGES).step_by(CHUNK as usize) {
        for page in chunk..chunk + CHUNK {
            let i = iova_page[page as usize];
            let iova = IOVA + i * PAGE;
            iommu.write(iova + 8, &i.to_le_bytes()).unwrap();
            assert_eq!(file_u64(&file, page * PAGE + 8), i, "IOVA page {i}");
            file.write_all_at(&(!i).to_le_bytes(), page * PAGE + PAGE - 8)
                .unwrap();
            assert_eq!(read_u64(&b, iova + PAGE - 8).unwrap(), !i, "IOVA page {i}");
        }
        fallocate(
            &file,
            FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE,
            (chunk * PAGE) as i64,
            (CHUNK * PAGE) as i64,
        )
        .unwrap();
    }
    // An access spanning neighbouring IOVA pages reaches both pages, scattered as they are.
    let across = IOVA + 100 * PAGE - 4;
    iommu.write(across, &[0xab; 8]).unwrap();
    let mut half = [0u8; 4];
    file.read_exact_at(&mut half, scatter(99, PAGES) * PAGE + PAGE - 4)
        .unwrap();
    assert_eq!(half, [0xab; 4]);
    file.read_exact_at(&mut half, scatter(100, PAGES) * PAGE)
        .unwrap();
    assert_eq!(half, [0xab; 4]);

    // Unmapping one window in the middle leaves the others.
    let middle = IOVA + (PAGES / 2) * PAGE;
    b.dma_unmap(DmaUnmapFlags::empty(), middle, PAGE).unwrap();
    assert!(read_u64(&b, middle).is_err());
    assert!(read_u64(&b, middle - PAGE).is_ok());
    assert!(read_u64(&b, middle + PAGE).is_ok());
    assert_eq!(b.memory().host_mappings(), 1);

    // The last window going takes the host mapping with it.
    b.dma_unmap(DmaUnmapFlags::empty(), IOVA, GIB).unwrap();
    assert!(b.memory().is_empty());
    assert_eq!(b.memory().host_mappings(), 0);
    assert_eq!(b.device().iommu().mapping_count(), 0);
    assert_eq!(maps_of(NAME), 0);
}

#[test]
fn unmapping_a_window_in_the_middle_leaves_the_rest_reachable() {
    const NAME: &str = "dma-middle";
    const PAGES: u64 = 64;
    const IOVA: u64 = 0x10_0000_0000;
    let mut b = backend();
    let file = memfd(NAME, PAGES * PAGE);
    for i in 0..PAGES {
        let offset = scatter(i, PAGES) * PAGE;
        file.write_all_at(&i.to_le_bytes(), offset).unwrap();
        b.dma_map(
            DmaMapFlags::READ_WRITE,
            offset,
            IOVA + i * PAGE,
            PAGE,
            Some(file.try_clone().unwrap()),
        )
        .unwrap();
    }
    assert_eq!(b.memory().host_mappings(), 1);
    // Pages 20..24 go in one unmap, page 40 in another.
    b.dma_unmap(DmaUnmapFlags::empty(), IOVA + 20 * PAGE, 4 * PAGE)
        .unwrap();
    b.dma_unmap(DmaUnmapFlags::empty(), IOVA + 40 * PAGE, PAGE)
        .unwrap();
    assert_eq!(b.memory().len(), PAGES as usize - 5);
    let gone = |i: u64| (20..24).contains(&i) || i == 40;
    for i in 0..PAGES {
        let iova = IOVA + i * PAGE;
        if gone(i) {
            assert!(read_u64(&b, iova).is_err(), "page {i} was unmapped");
            assert!(b.device().iommu().write(iova, b"x").is_err());
        } else {
            assert_eq!(read_u64(&b, iova).unwrap(), i, "page {i}");
        }
    }
    // An access reaching into the hole is refused as a whole.
    assert!(b
        .device()
        .iommu()
        .read(IOVA + 20 * PAGE - 4, &mut [0u8; 8])
        .is_err());
    assert_eq!(b.memory().host_mappings(), 1);
    assert_eq!(maps_of(NAME), 1);
    // Mapping the hole again reuses the host mapping.
    b.dma_map(
        DmaMapFlags::READ_WRITE,
        scatter(40, PAGES) * PAGE,
        IOVA + 40 * PAGE,
        PAGE,
        Some(file.try_clone().unwrap()),
    )
    .unwrap();
    assert_eq!(read_u64(&b, IOVA + 40 * PAGE).unwrap(), 40);
    assert_eq!(b.memory().host_mappings(), 1);
    b.dma_unmap(DmaUnmapFlags::UNMAP_ALL, 0, 0).unwrap();
    assert_eq!(b.memory().host_mappings(), 0);
    assert_eq!(maps_of(NAME), 0);
}

#[test]
fn a_single_one_gigabyte_map() {
    const NAME: &str = "dma-single-1g";
    const IOVA: u64 = 0x80_0000_0000;
    let mut b = backend();
    let file = memfd(NAME, GIB);
    b.dma_map(
        DmaMapFlags::READ_WRITE,
        0,
        IOVA,
        GIB,
        Some(file.try_clone().unwrap()),
    )
    .unwrap();
    assert_eq!(b.memory().host_mappings(), 1);
    assert_eq!(maps_of(NAME), 1);
    let iommu = b.device().iommu();
    for at in [0, 2 << 20, GIB / 2 - 4, GIB - 8] {
        iommu
            .write(IOVA + at, &(at ^ 0x5a5a).to_le_bytes())
            .unwrap();
        assert_eq!(file_u64(&file, at), at ^ 0x5a5a, "offset {at:#x}");
        file.write_all_at(&at.to_le_bytes(), at).unwrap();
        assert_eq!(read_u64(&b, IOVA + at).unwrap(), at);
    }
    // One byte past the end is outside the map.
    assert!(iommu.read(IOVA + GIB - 4, &mut [0u8; 8]).is_err());
    // Half of it cannot be unmapped.
    assert!(b.dma_unmap(DmaUnmapFlags::empty(), IOVA, GIB / 2).is_err());
    assert!(read_u64(&b, IOVA).is_ok());
    b.dma_unmap(DmaUnmapFlags::empty(), IOVA, GIB).unwrap();
    assert_eq!(b.memory().host_mappings(), 0);
    assert_eq!(maps_of(NAME), 0);
}

#[test]
fn hostile_maps_and_unmaps_are_refused_and_leak_nothing() {
    const NAME: &str = "dma-hostile";
    const IOVA: u64 = 0x20_0000_0000;
    let rw = DmaMapFlags::READ_WRITE;
    let mut b = backend();
    let file = memfd(NAME, 16 * PAGE);
    let fd = || Some(file.try_clone().unwrap());
    // An offset beyond the file, a range reaching past it, offsets and IOVAs that wrap.
    assert!(b.dma_map(rw, 16 * PAGE, IOVA, PAGE, fd()).is_err());
    assert!(b.dma_map(rw, 15 * PAGE, IOVA, 2 * PAGE, fd()).is_err());
    assert!(b.dma_map(rw, u64::MAX - 10, IOVA, PAGE, fd()).is_err());
    assert!(b.dma_map(rw, 0, u64::MAX - 10, PAGE, fd()).is_err());
    assert!(b.dma_map(rw, 0, IOVA, 0, fd()).is_err());
    assert!(b
        .dma_map(DmaMapFlags::empty(), 0, IOVA, PAGE, fd())
        .is_err());
    assert_eq!(b.memory().host_mappings(), 0);
    assert_eq!(maps_of(NAME), 0);

    // A good map, then maps overlapping it.
    b.dma_map(rw, 0, IOVA, 4 * PAGE, fd()).unwrap();
    assert!(b
        .dma_map(rw, 8 * PAGE, IOVA + 3 * PAGE, 2 * PAGE, fd())
        .is_err());
    assert!(b
        .dma_map(rw, 8 * PAGE, IOVA - PAGE, 2 * PAGE, fd())
        .is_err());
    assert!(b.dma_map(rw, 8 * PAGE, IOVA + PAGE, PAGE, fd()).is_err());
    assert_eq!(b.memory().len(), 1);
    assert_eq!(b.memory().host_mappings(), 1);

    // Unmaps that cut the window, are empty or wrap: refused, the window stays.
    assert!(b
        .dma_unmap(DmaUnmapFlags::empty(), IOVA + PAGE, PAGE)
        .is_err());
    assert!(b
        .dma_unmap(DmaUnmapFlags::empty(), IOVA - PAGE, 2 * PAGE)
        .is_err());
    assert!(b.dma_unmap(DmaUnmapFlags::empty(), IOVA, 0).is_err());
    assert!(b.dma_unmap(DmaUnmapFlags::empty(), IOVA, u64::MAX).is_err());
    assert!(read_u64(&b, IOVA + 3 * PAGE).is_ok());
    // A range holding no window removes nothing and is not an error: QEMU's vIOMMU unmaps
    // whole address spaces that way (vtd_address_space_unmap).
    b.dma_unmap(DmaUnmapFlags::empty(), 0, IOVA).unwrap();
    b.dma_unmap(DmaUnmapFlags::empty(), 1 << 63, 1 << 63)
        .unwrap();
    assert_eq!(b.memory().len(), 1);

    b.dma_unmap(DmaUnmapFlags::empty(), IOVA, 4 * PAGE).unwrap();
    assert_eq!(b.memory().host_mappings(), 0);
    assert_eq!(maps_of(NAME), 0);
    assert_eq!(b.stats().refused, 13);
}

#[test]
fn host_mappings_follow_files_not_descriptors() {
    const A: &str = "dma-files-a";
    const B: &str = "dma-files-b";
    const IOVA: u64 = 0x30_0000_0000;
    let rw = DmaMapFlags::READ_WRITE;
    let mut b = backend();
    let a = memfd(A, 2 * PAGE);
    let other = memfd(B, PAGE);
    // Two descriptors of one file share its mapping; another file has its own.
    b.dma_map(rw, 0, IOVA, PAGE, Some(a.try_clone().unwrap()))
        .unwrap();
    b.dma_map(rw, PAGE, IOVA + PAGE, PAGE, Some(a.try_clone().unwrap()))
        .unwrap();
    b.dma_map(
        rw,
        0,
        IOVA + 2 * PAGE,
        PAGE,
        Some(other.try_clone().unwrap()),
    )
    .unwrap();
    assert_eq!(b.memory().host_mappings(), 2);
    assert_eq!((maps_of(A), maps_of(B)), (1, 1));

    // The file grows: a map into the new part needs a new mapping; the old one goes with its
    // last window.
    a.set_len(4 * PAGE).unwrap();
    a.write_all_at(b"grown", 3 * PAGE).unwrap();
    b.dma_map(
        rw,
        3 * PAGE,
        IOVA + 3 * PAGE,
        PAGE,
        Some(a.try_clone().unwrap()),
    )
    .unwrap();
    assert_eq!(maps_of(A), 2);
    b.dma_unmap(DmaUnmapFlags::empty(), IOVA, 2 * PAGE).unwrap();
    assert_eq!(maps_of(A), 1);
    let mut grown = [0u8; 5];
    b.device()
        .iommu()
        .read(IOVA + 3 * PAGE, &mut grown)
        .unwrap();
    assert_eq!(&grown, b"grown");

    // A descriptor opened read-only serves read-only maps, and is refused for write maps.
    let read_only = File::open(format!("/proc/self/fd/{}", other.as_raw_fd())).unwrap();
    assert!(b
        .dma_map(
            rw,
            0,
            IOVA + 8 * PAGE,
            PAGE,
            Some(read_only.try_clone().unwrap())
        )
        .is_err());
    b.dma_map(DmaMapFlags::READ, 0, IOVA + 8 * PAGE, PAGE, Some(read_only))
        .unwrap();
    assert!(b.device().iommu().write(IOVA + 8 * PAGE, b"x").is_err());
    // A read-only window of a writable mapping stays read-only to the device.
    b.dma_map(
        DmaMapFlags::READ,
        0,
        IOVA + 9 * PAGE,
        PAGE,
        Some(a.try_clone().unwrap()),
    )
    .unwrap();
    assert!(b.device().iommu().write(IOVA + 9 * PAGE, b"x").is_err());
    assert!(b.device().iommu().write(IOVA + 3 * PAGE, b"x").is_ok());

    b.dma_unmap(DmaUnmapFlags::UNMAP_ALL, 0, 0).unwrap();
    assert_eq!(b.memory().host_mappings(), 0);
    assert_eq!((maps_of(A), maps_of(B)), (0, 0));
}
