//! The model's IOMMU: accesses across adjacent mappings, holes, read-only mappings.

use cxdirect_emu::dma::{Access, DmaError, HostRegion, Iommu};

#[test]
fn accesses_walk_across_adjacent_pages_mapped_one_at_a_time() {
    let iommu = Iommu::new();
    let pages: Vec<_> = (0..3).map(|_| HostRegion::new(4096).unwrap()).collect();
    for (i, page) in pages.iter().enumerate() {
        iommu
            .map_region(0x10_0000 + i as u64 * 4096, page.clone(), Access::ReadWrite)
            .unwrap();
    }
    // A write spanning all three pages lands in each.
    let data: Vec<u8> = (0..6000u32).map(|i| i as u8).collect();
    iommu.write(0x10_0000 + 2000, &data).unwrap();
    let mut back = vec![0u8; 6000];
    iommu.read(0x10_0000 + 2000, &mut back).unwrap();
    assert_eq!(back, data);
    let mut first = [0u8; 4];
    pages[1].read(0, &mut first).unwrap();
    assert_eq!(first, [data[2096], data[2097], data[2098], data[2099]]);
    assert!(iommu.is_mapped(0x10_0000, 3 * 4096, true));
}

#[test]
fn a_hole_or_a_read_only_page_refuses_the_whole_access() {
    let iommu = Iommu::new();
    let a = HostRegion::new(4096).unwrap();
    let b = HostRegion::new(4096).unwrap();
    let c = HostRegion::new(4096).unwrap();
    iommu
        .map_region(0x20_0000, a.clone(), Access::ReadWrite)
        .unwrap();
    iommu
        .map_region(0x20_2000, b.clone(), Access::ReadWrite)
        .unwrap(); // hole at 0x20_1000
    iommu
        .map_region(0x30_0000, c.clone(), Access::ReadWrite)
        .unwrap();
    let c_ro = HostRegion::new(4096).unwrap();
    iommu
        .map_region(0x30_1000, c_ro.clone(), Access::ReadOnly)
        .unwrap();
    let err = iommu.write(0x20_0f00, &[0xaa; 0x200]).unwrap_err();
    assert!(matches!(err, DmaError::Unmapped { .. }), "{err}");
    let mut byte = [0u8; 1];
    a.read(0xf00, &mut byte).unwrap();
    assert_eq!(byte, [0], "nothing written before the hole");
    let err = iommu.write(0x30_0f00, &[0xbb; 0x200]).unwrap_err();
    assert!(matches!(err, DmaError::ReadOnly { .. }), "{err}");
    c.read(0xf00, &mut byte).unwrap();
    assert_eq!(byte, [0], "nothing written before the read-only page");
    assert_eq!(
        iommu
            .counters
            .faults
            .load(std::sync::atomic::Ordering::Relaxed),
        2
    );
}
