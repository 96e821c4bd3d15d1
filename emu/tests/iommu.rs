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

#[test]
fn lookups_at_every_edge_of_many_mappings_find_the_right_one() {
    let iommu = Iommu::new();
    // Mapped out of order, with gaps, as firmware pages and rings are.
    let order = [5u64, 0, 9, 2, 7, 1, 8, 3, 6, 4];
    let mut regions = Vec::new();
    for &i in &order {
        let r = HostRegion::new(4096).unwrap();
        r.write(0, &[i as u8; 4096]).unwrap();
        iommu
            .map_region(0x40_0000 + i * 0x2000, r.clone(), Access::ReadWrite)
            .unwrap();
        regions.push(r);
    }
    for i in 0..10u64 {
        let base = 0x40_0000 + i * 0x2000;
        for at in [base, base + 4095] {
            let mut b = [0u8; 1];
            iommu.read(at, &mut b).unwrap();
            assert_eq!(b[0], i as u8, "byte at {at:#x}");
        }
        // The gap after each mapping, and the byte before the first.
        let mut b = [0u8; 1];
        assert!(iommu.read(base + 4096, &mut b).is_err(), "gap after {i}");
        assert!(
            !iommu.is_mapped(base + 4095, 2, false),
            "across the gap after {i}"
        );
    }
    assert!(iommu.read(0x40_0000 - 1, &mut [0u8; 1]).is_err());
    // Overlaps on either side are refused; a mapping filling a gap exactly is not.
    let extra = HostRegion::new(4096).unwrap();
    assert!(iommu
        .map_region(0x40_0000 + 0x1800, extra.clone(), Access::ReadWrite)
        .is_err());
    assert!(iommu
        .map_region(0x40_0000 + 0x800, extra.clone(), Access::ReadWrite)
        .is_err());
    iommu
        .map_region(0x40_0000 + 0x1000, extra.clone(), Access::ReadWrite)
        .unwrap();
    // Mappings 0, the filler and 1 now touch: one access spans all three.
    assert!(iommu.is_mapped(0x40_0000, 0x3000, true));
    assert!(!iommu.is_mapped(0x40_0000, 0x3001, true));
    assert_eq!(iommu.mapping_count(), 11);
    // Unmapping takes exactly the mapping named.
    assert!(iommu.unmap(0x40_0000 + 0x1000, 4095).is_err());
    iommu.unmap(0x40_0000 + 0x1000, 4096).unwrap();
    assert!(iommu.read(0x40_0000 + 0x1000, &mut [0u8; 1]).is_err());
    assert_eq!(iommu.mapping_count(), 10);
}

#[test]
fn a_remembered_mapping_is_looked_up_again_once_the_table_changes() {
    let iommu = Iommu::new();
    let first = HostRegion::new(4096).unwrap();
    first.write(0, &[1; 4096]).unwrap();
    iommu
        .map_region(0x50_0000, first.clone(), Access::ReadWrite)
        .unwrap();
    let mut byte = [0u8; 1];
    iommu.read(0x50_0010, &mut byte).unwrap();
    assert_eq!(byte, [1]);
    // The table's first entry is now another mapping, lower down: the address the first one
    // covered is a hole.
    iommu.unmap(0x50_0000, 4096).unwrap();
    let second = HostRegion::new(4096).unwrap();
    second.write(0, &[2; 4096]).unwrap();
    iommu
        .map_region(0x40_0000, second.clone(), Access::ReadWrite)
        .unwrap();
    let err = iommu.read(0x50_0010, &mut byte).unwrap_err();
    assert!(matches!(err, DmaError::Unmapped { .. }), "{err}");
    // Mapped again, read-only and with other contents: the new mapping is what counts.
    let third = HostRegion::new(4096).unwrap();
    third.write(0, &[3; 4096]).unwrap();
    iommu
        .map_region(0x50_0000, third.clone(), Access::ReadOnly)
        .unwrap();
    iommu.read(0x50_0010, &mut byte).unwrap();
    assert_eq!(byte, [3]);
    let err = iommu.write(0x50_0010, &[9]).unwrap_err();
    assert!(matches!(err, DmaError::ReadOnly { .. }), "{err}");
    iommu.read(0x40_0010, &mut byte).unwrap();
    assert_eq!(byte, [2]);
}

#[test]
fn many_mappings_go_in_one_unmap_or_none_do() {
    let iommu = Iommu::new();
    for i in 0..8u64 {
        let page = HostRegion::new(4096).unwrap();
        iommu
            .map_region(0x20_0000 + i * 4096, page, Access::ReadWrite)
            .unwrap();
    }
    // One of them is not a mapping (wrong length): nothing goes.
    let wrong = [(0x20_0000, 4096), (0x20_0000 + 4096, 8192)];
    assert!(iommu.unmap_many(&wrong).is_err());
    assert_eq!(iommu.mapping_count(), 8);
    // Pages 1, 2 and 6 (given out of order) go; the rest stay reachable.
    let gone = [
        (0x20_0000 + 6 * 4096, 4096),
        (0x20_1000, 4096),
        (0x20_2000, 4096),
    ];
    iommu.unmap_many(&gone).unwrap();
    assert_eq!(iommu.mapping_count(), 5);
    for i in 0..8u64 {
        let mapped = iommu.is_mapped(0x20_0000 + i * 4096, 4096, true);
        assert_eq!(mapped, ![1, 2, 6].contains(&i), "page {i}");
    }
    iommu.unmap_many(&[(0x20_0000, 4096)]).unwrap();
    assert_eq!(iommu.mapping_count(), 4);
}
