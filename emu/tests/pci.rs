//! Configuration space and MSI-X behaviour of the modelled PCI function, driven the way a guest's
//! PCI core and a vfio-user client would.

use cxdirect_emu::pci::*;
use cxdirect_emu::pci_vsc::*;

fn cfg() -> ConfigSpace {
    ConfigSpace::new(FunctionLayout::default()).expect("default layout is valid")
}

fn cfg_with(layout: FunctionLayout) -> ConfigSpace {
    ConfigSpace::new(layout).expect("test layout is valid")
}

#[test]
fn ids_and_class_read_back() {
    let c = cfg();
    assert_eq!(c.read_u16(REG_VENDOR_ID).unwrap(), 0x15b3);
    assert_eq!(c.read_u16(REG_DEVICE_ID).unwrap(), 0x101d);
    assert_eq!(c.read_u32(0x00).unwrap(), 0x101d_15b3);
    assert_eq!(c.read_u8(REG_REVISION_ID).unwrap(), 0);
    // Revision in byte 8, class code 0x020000 above it.
    assert_eq!(c.read_u32(0x08).unwrap(), 0x0200_0000);
    assert_eq!(c.read_u8(REG_HEADER_TYPE).unwrap(), 0);
    assert_eq!(c.read_u16(REG_SUBSYSTEM_VENDOR_ID).unwrap(), 0x15b3);
    assert_eq!(c.read_u16(REG_SUBSYSTEM_ID).unwrap(), 0x0016);
    assert_eq!(c.read_u8(REG_INTERRUPT_PIN).unwrap(), 0);
    assert_eq!(c.read_u16(REG_STATUS).unwrap(), STATUS_CAPABILITIES_LIST);
    assert_eq!(c.read_u8(REG_CAPABILITIES_POINTER).unwrap(), 0x40);
    assert_eq!(c.command(), 0);
    assert!(!c.memory_enabled() && !c.bus_master_enabled());
}

#[test]
fn bar0_sizing_returns_32mib_mask_and_64bit_upper() {
    let mut c = cfg();
    assert_eq!(
        c.read_u32(REG_BAR0).unwrap(),
        0x0000_000c,
        "64-bit prefetchable type bits"
    );
    c.write_u32(REG_BAR0, 0xffff_ffff).unwrap();
    c.write_u32(REG_BAR0_HIGH, 0xffff_ffff).unwrap();
    assert_eq!(c.read_u32(REG_BAR0).unwrap(), 0xfe00_000c);
    assert_eq!(c.read_u32(REG_BAR0_HIGH).unwrap(), 0xffff_ffff);
    let mask = (u64::from(c.read_u32(REG_BAR0_HIGH).unwrap()) << 32)
        | u64::from(c.read_u32(REG_BAR0).unwrap() & !0xf);
    assert_eq!(!mask + 1, DEFAULT_BAR0_SIZE);
}

#[test]
fn bar0_address_round_trip() {
    let mut c = cfg();
    let addr = 0x0000_0012_3400_0000u64; // 32 MiB aligned
    c.write_u32(REG_BAR0, addr as u32).unwrap();
    c.write_u32(REG_BAR0_HIGH, (addr >> 32) as u32).unwrap();
    assert_eq!(c.bar0_address(), addr);
    assert_eq!(c.read_u32(REG_BAR0).unwrap(), 0x3400_000c);
    assert_eq!(c.read_u32(REG_BAR0_HIGH).unwrap(), 0x12);
    // Address bits below the BAR size are read-only zero.
    c.write_u32(REG_BAR0, 0x1234_5678).unwrap();
    assert_eq!(c.read_u32(REG_BAR0).unwrap(), 0x1200_000c);
    assert_eq!(c.bar0_address(), 0x12_1200_0000);
}

#[test]
fn bar0_sizing_follows_constructor_size() {
    let mut small = cfg_with(FunctionLayout {
        bar0_size: 0x4000,
        msix_vectors: 8,
        msix_table_offset: 0x2000,
        msix_pba_offset: 0x3000,
    });
    small.write_u32(REG_BAR0, u32::MAX).unwrap();
    assert_eq!(small.read_u32(REG_BAR0).unwrap(), 0xffff_c00c);

    let mut big = cfg_with(FunctionLayout {
        bar0_size: 8 << 30,
        ..FunctionLayout::default()
    });
    big.write_u32(REG_BAR0, u32::MAX).unwrap();
    big.write_u32(REG_BAR0_HIGH, u32::MAX).unwrap();
    assert_eq!(big.read_u32(REG_BAR0).unwrap(), 0x0000_000c);
    assert_eq!(big.read_u32(REG_BAR0_HIGH).unwrap(), 0xffff_fffe);
}

#[test]
fn absent_bars_and_rom_read_zero_and_ignore_writes() {
    let mut c = cfg();
    for bar in [0x18u64, 0x1c, 0x20, 0x24, REG_EXPANSION_ROM] {
        c.write_u32(bar, u32::MAX).unwrap();
        assert_eq!(c.read_u32(bar).unwrap(), 0, "register {bar:#x}");
    }
}

#[test]
fn read_only_bits_ignore_writes() {
    let mut c = cfg();
    let before: Vec<u8> = {
        let mut b = vec![0; CONFIG_SPACE_SIZE];
        c.read(0, &mut b).unwrap();
        b
    };
    for off in [
        REG_VENDOR_ID,
        REG_DEVICE_ID,
        REG_STATUS,
        0x08,
        0x0e,
        0x2c,
        0x2e,
        REG_CAPABILITIES_POINTER,
    ] {
        c.write_u16(off, 0xffff).unwrap();
    }
    c.write_u8(REG_INTERRUPT_PIN, 0xff).unwrap();
    c.write_u32(PCIE_CAP_OFFSET + PCIE_DEVCAP, 0).unwrap();
    c.write_u32(PCIE_CAP_OFFSET + PCIE_LNKCAP, 0).unwrap();
    c.write_u16(PCIE_CAP_OFFSET + PCIE_LNKSTA, 0).unwrap();
    c.write_u32(MSIX_CAP_OFFSET + MSIX_TABLE, 0xffff_ffff)
        .unwrap();
    c.write_u32(EXT_CAP_OFFSET, 0xffff_ffff).unwrap();
    c.write_u32(0xffc, 0xffff_ffff).unwrap();
    let mut after = vec![0; CONFIG_SPACE_SIZE];
    c.read(0, &mut after).unwrap();
    assert_eq!(before, after);

    // Only memory space, bus master and interrupt disable stick in Command.
    c.write_u16(REG_COMMAND, 0xffff).unwrap();
    assert_eq!(c.command(), 0x0406);
    assert!(c.interrupt_disabled());
    // Table size is read-only even in a write that sets the writable bits.
    c.write_u16(MSIX_CAP_OFFSET + MSIX_MSG_CTRL, 0).unwrap();
    assert_eq!(c.msix_control(), 63);
}

#[test]
fn unaligned_accesses_work_byte_by_byte() {
    let mut c = cfg();
    // A 2-byte write at 0x05 covers the high byte of Command and the low byte of Status.
    c.write(0x05, &[0xff, 0xff]).unwrap();
    assert_eq!(c.command(), COMMAND_INTERRUPT_DISABLE);
    assert_eq!(c.read_u16(REG_STATUS).unwrap(), STATUS_CAPABILITIES_LIST);
    // A 4-byte read straddling vendor/device and command.
    // Bytes 3..7: device ID high, command low and high, status low.
    assert_eq!(c.read_u32(0x03).unwrap(), 0x1004_0010);
    let mut whole = vec![0; CONFIG_SPACE_SIZE];
    c.read(0, &mut whole).unwrap();
    assert_eq!(&whole[..2], &[0xb3, 0x15]);
}

#[test]
fn capability_chain_walk() {
    let c = cfg();
    let mut seen = Vec::new();
    let mut ptr = c.read_u8(REG_CAPABILITIES_POINTER).unwrap();
    while ptr != 0 {
        assert!(seen.len() < 16, "capability chain does not end");
        assert!(ptr >= 0x40 && ptr % 4 == 0, "pointer {ptr:#x}");
        let id = c.read_u8(u64::from(ptr)).unwrap();
        seen.push((id, u64::from(ptr)));
        ptr = c.read_u8(u64::from(ptr) + 1).unwrap();
    }
    assert_eq!(
        seen,
        vec![
            (CAP_ID_PM, PM_CAP_OFFSET),
            (CAP_ID_PCIE, PCIE_CAP_OFFSET),
            (CAP_ID_MSIX, MSIX_CAP_OFFSET),
            (CAP_ID_VENDOR, VSC_CAP_OFFSET)
        ]
    );
    assert_eq!(
        c.read_u32(EXT_CAP_OFFSET).unwrap(),
        0,
        "no extended capabilities"
    );

    assert_eq!(c.read_u16(PM_CAP_OFFSET + PM_PMC).unwrap() & 0x7, 3);
    let flags = c.read_u16(PCIE_CAP_OFFSET + PCIE_FLAGS).unwrap();
    assert_eq!(flags & 0xf, 2, "capability version");
    assert_eq!((flags >> 4) & 0xf, 0, "PCIe endpoint");
    let devcap = c.read_u32(PCIE_CAP_OFFSET + PCIE_DEVCAP).unwrap();
    assert_ne!(devcap & PCIE_DEVCAP_FLR, 0);
    let lnkcap = c.read_u32(PCIE_CAP_OFFSET + PCIE_LNKCAP).unwrap();
    assert_eq!(lnkcap & 0xf, 4, "16 GT/s");
    assert_eq!((lnkcap >> 4) & 0x3f, 16, "x16");
    let lnksta = c.read_u16(PCIE_CAP_OFFSET + PCIE_LNKSTA).unwrap();
    assert_eq!(lnksta & 0xf, 4);
    assert_eq!((lnksta >> 4) & 0x3f, 16);
}

#[test]
fn msix_capability_fields() {
    let c = cfg();
    assert_eq!(c.msix_control() & MSIX_CTRL_TABLE_SIZE_MASK, 63);
    assert_eq!(c.read_u32(MSIX_CAP_OFFSET + MSIX_TABLE).unwrap(), 0x2000);
    assert_eq!(c.read_u32(MSIX_CAP_OFFSET + MSIX_PBA).unwrap(), 0x3000);

    let big = cfg_with(FunctionLayout {
        msix_vectors: 2048,
        msix_table_offset: 0x10000,
        msix_pba_offset: 0x8000,
        ..FunctionLayout::default()
    });
    assert_eq!(big.msix_control() & MSIX_CTRL_TABLE_SIZE_MASK, 2047);
    assert_eq!(big.read_u32(MSIX_CAP_OFFSET + MSIX_TABLE).unwrap(), 0x10000);
    assert_eq!(big.read_u32(MSIX_CAP_OFFSET + MSIX_PBA).unwrap(), 0x8000);

    let one = cfg_with(FunctionLayout {
        msix_vectors: 1,
        ..FunctionLayout::default()
    });
    assert_eq!(one.msix_control() & MSIX_CTRL_TABLE_SIZE_MASK, 0);
}

#[test]
fn enabling_msix_and_bus_master_through_config_writes() {
    let mut c = cfg();
    c.write_u16(REG_COMMAND, COMMAND_MEMORY_SPACE | COMMAND_BUS_MASTER)
        .unwrap();
    assert!(c.memory_enabled());
    assert!(c.bus_master_enabled());
    assert!(!c.interrupt_disabled());

    // Linux enables with the function masked, programs the table, then unmasks; byte writes to
    // the high byte of Message Control are what a 1-byte config access does.
    c.write_u8(MSIX_CAP_OFFSET + MSIX_MSG_CTRL + 1, 0xc0)
        .unwrap();
    assert!(c.msix_enabled());
    assert!(c.msix_function_masked());
    c.write_u8(MSIX_CAP_OFFSET + MSIX_MSG_CTRL + 1, 0x80)
        .unwrap();
    assert!(c.msix_enabled());
    assert!(!c.msix_function_masked());
    c.write_u16(MSIX_CAP_OFFSET + MSIX_MSG_CTRL, 0xffff)
        .unwrap();
    assert_eq!(c.msix_control(), 0xc000 | 63);

    c.write_u16(REG_COMMAND, 0).unwrap();
    assert!(!c.memory_enabled() && !c.bus_master_enabled());
}

#[test]
fn flr_request_seen_once_and_reads_back_zero() {
    let mut c = cfg();
    let devctl = PCIE_CAP_OFFSET + PCIE_DEVCTL;
    assert!(!c.take_flr_request());
    let initial = c.read_u16(devctl).unwrap();
    assert_eq!(
        initial & PCIE_DEVCTL_MPS_MASK,
        0,
        "128-byte payload at power-on"
    );
    assert_eq!(
        initial & PCIE_DEVCTL_MRRS_MASK,
        0b010 << 12,
        "512-byte reads at power-on"
    );

    // Max payload 256 and max read request 4096 are writable fields.
    let programmed =
        (initial & !(PCIE_DEVCTL_MPS_MASK | PCIE_DEVCTL_MRRS_MASK)) | (0b001 << 5) | (0b101 << 12);
    c.write_u16(devctl, programmed).unwrap();
    assert_eq!(c.read_u16(devctl).unwrap(), programmed);
    assert!(!c.take_flr_request());

    c.write_u16(devctl, programmed | PCIE_DEVCTL_INITIATE_FLR)
        .unwrap();
    assert_eq!(
        c.read_u16(devctl).unwrap(),
        programmed,
        "Initiate FLR reads 0"
    );
    assert!(c.take_flr_request());
    assert!(!c.take_flr_request());

    // A single-byte write to the high byte is enough.
    c.write_u8(devctl + 1, 0x80).unwrap();
    assert!(c.take_flr_request());
    assert!(!c.take_flr_request());
}

#[test]
fn reset_restores_power_on_values() {
    let fresh = cfg();
    let mut c = cfg();
    c.write_u16(REG_COMMAND, 0xffff).unwrap();
    c.write_u32(REG_BAR0, 0xfe00_0000).unwrap();
    c.write_u32(REG_BAR0_HIGH, 0x1).unwrap();
    c.write_u8(REG_INTERRUPT_LINE, 11).unwrap();
    c.write_u16(MSIX_CAP_OFFSET + MSIX_MSG_CTRL, 0xc000)
        .unwrap();
    c.write_u16(PCIE_CAP_OFFSET + PCIE_DEVCTL, 0x7fff).unwrap();
    c.write_u16(PCIE_CAP_OFFSET + PCIE_DEVCTL, 0x8000).unwrap();
    c.reset();
    assert!(!c.take_flr_request(), "reset drops a pending FLR request");
    let mut a = vec![0; CONFIG_SPACE_SIZE];
    let mut b = vec![0; CONFIG_SPACE_SIZE];
    c.read(0, &mut a).unwrap();
    fresh.read(0, &mut b).unwrap();
    assert_eq!(a, b);
    assert_eq!(c.bar0_address(), 0);
    assert!(!c.msix_enabled());
}

#[test]
fn power_state_accepts_d3hot_and_drops_d1_d2() {
    let mut c = cfg();
    let pmcsr = PM_CAP_OFFSET + PM_PMCSR;
    assert_eq!(c.power_state(), PowerState::D0);
    c.write_u16(pmcsr, 3).unwrap();
    assert_eq!(c.power_state(), PowerState::D3Hot);
    c.write_u16(pmcsr, 1).unwrap();
    assert_eq!(
        c.power_state(),
        PowerState::D3Hot,
        "D1 is unsupported: write dropped"
    );
    c.write_u16(pmcsr, 0).unwrap();
    assert_eq!(c.power_state(), PowerState::D0);
    c.write_u16(pmcsr, 2).unwrap();
    assert_eq!(c.power_state(), PowerState::D0);
}

#[test]
fn out_of_range_accesses_are_errors() {
    let mut c = cfg();
    let mut b4 = [0u8; 4];
    assert_eq!(
        c.read(4096, &mut [0u8; 1]),
        Err(ConfigError::OutOfRange {
            offset: 4096,
            len: 1
        })
    );
    assert!(c.read(4094, &mut b4).is_err());
    assert!(c.read(u64::MAX, &mut b4).is_err());
    assert!(c.read(u64::MAX - 1, &mut [0u8; 2]).is_err());
    assert!(c.write(4093, &[0xff; 4]).is_err());
    assert!(c.write(u64::MAX, &[0xff]).is_err());
    // The last dword is still reachable, and a failed access changed nothing.
    assert_eq!(c.read_u32(4092).unwrap(), 0);
    let msg = c.read_u32(4094).unwrap_err().to_string();
    assert!(msg.contains("0xffe") && msg.contains("4096"), "{msg}");
}

#[test]
fn no_access_panics_and_identity_survives() {
    let mut c = cfg();
    for offset in 0..4100u64 {
        for len in [1usize, 2, 3, 4, 8] {
            let mut buf = vec![0; len];
            let fits = offset + len as u64 <= 4096;
            assert_eq!(c.read(offset, &mut buf).is_ok(), fits);
            assert_eq!(c.write(offset, &vec![0xff; len]).is_ok(), fits);
            let _ = c.write(offset, &vec![0x00; len]);
        }
    }
    assert_eq!(c.read_u32(0).unwrap(), 0x101d_15b3);
    assert_eq!(c.read_u8(REG_CAPABILITIES_POINTER).unwrap(), 0x40);
}

#[test]
fn invalid_layouts_are_rejected() {
    let base = FunctionLayout::default();
    let bad = |l: FunctionLayout| ConfigSpace::new(l).unwrap_err();
    assert_eq!(
        bad(FunctionLayout {
            bar0_size: 3 << 20,
            ..base
        }),
        ConfigError::InvalidBar0Size { size: 3 << 20 }
    );
    assert!(matches!(
        bad(FunctionLayout {
            bar0_size: 2048,
            ..base
        }),
        ConfigError::InvalidBar0Size { .. }
    ));
    assert!(matches!(
        bad(FunctionLayout {
            bar0_size: 0,
            ..base
        }),
        ConfigError::InvalidBar0Size { .. }
    ));
    for count in [0, 2049, u16::MAX] {
        assert_eq!(
            bad(FunctionLayout {
                msix_vectors: count,
                ..base
            }),
            ConfigError::InvalidMsixVectors { count }
        );
    }
    assert!(matches!(
        bad(FunctionLayout {
            msix_table_offset: 0x2004,
            ..base
        }),
        ConfigError::MsixRegionMisaligned {
            region: MsixRegion::Table,
            ..
        }
    ));
    assert!(matches!(
        bad(FunctionLayout {
            msix_pba_offset: u32::MAX - 7,
            ..base
        }),
        ConfigError::MsixRegionOutsideBar0 {
            region: MsixRegion::Pba,
            ..
        }
    ));
    // 2048 vectors need 32 KiB of table, which runs into the PBA at 0x3000.
    assert!(matches!(
        bad(FunctionLayout {
            msix_vectors: 2048,
            ..base
        }),
        ConfigError::MsixRegionsOverlap { .. }
    ));
    assert!(ConfigSpace::new(base).is_ok());
}

// ---------------------------------------------------------------------------------------------
// MSI-X table
// ---------------------------------------------------------------------------------------------

fn program(t: &mut MsixTable, vector: u16, address: u64, data: u32, masked: bool) {
    let base = u64::from(vector) * MSIX_ENTRY_SIZE;
    t.write(base, &address.to_le_bytes()).unwrap();
    t.write(base + 8, &data.to_le_bytes()).unwrap();
    t.write(base + 12, &u32::from(masked).to_le_bytes())
        .unwrap();
}

fn pba_qword(t: &MsixTable, index: u64) -> u64 {
    let mut b = [0; 8];
    t.read_pba(index * 8, &mut b).unwrap();
    u64::from_le_bytes(b)
}

#[test]
fn msix_power_on_state_is_all_masked() {
    let t = MsixTable::new(64).unwrap();
    assert_eq!(t.vectors(), 64);
    assert_eq!(t.table_len(), 1024);
    assert_eq!(t.pba_len(), 8);
    for v in 0..64u64 {
        let mut b = [0; 4];
        t.read(v * 16 + 12, &mut b).unwrap();
        assert_eq!(u32::from_le_bytes(b), 1, "vector {v} masked");
    }
    assert_eq!(pba_qword(&t, 0), 0);
    assert_eq!(MsixTable::default(), t);
}

#[test]
fn msix_entry_round_trip_with_4_and_8_byte_accesses() {
    let mut t = MsixTable::new(4).unwrap();
    t.write(16, &0xfee0_1003u32.to_le_bytes()).unwrap(); // low two bits are reserved
    t.write(20, &0x1u32.to_le_bytes()).unwrap();
    t.write(24, &(0x4021u64 | (0xffff_fffeu64 << 32)).to_le_bytes())
        .unwrap();
    let mut q = [0; 8];
    t.read(16, &mut q).unwrap();
    assert_eq!(u64::from_le_bytes(q), 0x1_fee0_1000);
    t.read(24, &mut q).unwrap();
    assert_eq!(
        u64::from_le_bytes(q),
        0x4021,
        "only the mask bit of vector control is writable"
    );
    assert_eq!(
        t.entry(1),
        Some(MsixEntry {
            address: 0x1_fee0_1000,
            data: 0x4021,
            masked: false
        })
    );
    assert_eq!(t.entry(4), None);
}

#[test]
fn msix_bad_accesses_are_errors() {
    let mut t = MsixTable::new(4).unwrap();
    let mut b2 = [0; 2];
    let mut b4 = [0; 4];
    let mut b8 = [0; 8];
    assert!(matches!(
        t.read(0, &mut b2),
        Err(MsixError::BadAccess { len: 2, .. })
    ));
    assert!(matches!(
        t.read(2, &mut b4),
        Err(MsixError::BadAccess { .. })
    ));
    assert!(matches!(
        t.read(4, &mut b8),
        Err(MsixError::BadAccess { .. })
    ));
    assert!(matches!(
        t.read(64, &mut b4),
        Err(MsixError::OutOfRange {
            region: MsixRegion::Table,
            region_len: 64,
            ..
        })
    ));
    assert!(t.read(u64::MAX - 7, &mut b8).is_err());
    assert!(t.write(60, &[0; 8]).is_err());
    assert!(t.write(1, &[0; 4]).is_err());
    assert!(t.read_pba(8, &mut b4).is_err());
    assert!(t.read_pba(2, &mut b4).is_err());
    assert!(t.write_pba(0, &[0xff; 8]).is_ok());
    assert!(t.write_pba(8, &[0xff; 8]).is_err());
    assert!(matches!(
        MsixTable::new(0),
        Err(MsixError::InvalidVectorCount { count: 0 })
    ));
    assert!(MsixTable::new(2049).is_err());
    assert!(MsixTable::new(2048).is_ok());
}

#[test]
fn msix_deliver_when_enabled_and_unmasked() {
    let mut t = MsixTable::new(64).unwrap();
    program(&mut t, 5, 0xfee0_0000, 0x41, false);
    assert_eq!(
        t.trigger(5, false, true).unwrap(),
        MsixOutcome::Deliver {
            address: 0xfee0_0000,
            data: 0x41
        }
    );
    assert!(!t.is_pending(5));
}

#[test]
fn msix_pending_when_masked_then_delivered_after_unmask() {
    let mut t = MsixTable::new(64).unwrap();
    program(&mut t, 3, 0xfee0_0000, 0x33, true);
    assert_eq!(t.trigger(3, false, true).unwrap(), MsixOutcome::Pending);
    assert!(t.is_pending(3));
    assert_eq!(pba_qword(&t, 0), 1 << 3);
    // Nothing deliverable while the vector stays masked.
    assert_eq!(t.take_pending_deliverable(false).count(), 0);
    assert!(t.is_pending(3));

    // PBA writes are ignored.
    t.write_pba(0, &[0; 8]).unwrap();
    assert!(t.is_pending(3));

    t.write(3 * 16 + 12, &0u32.to_le_bytes()).unwrap();
    let delivered: Vec<_> = t.take_pending_deliverable(false).collect();
    assert_eq!(
        delivered,
        vec![MsixMessage {
            vector: 3,
            address: 0xfee0_0000,
            data: 0x33
        }]
    );
    assert!(!t.is_pending(3));
    assert_eq!(pba_qword(&t, 0), 0);
    assert_eq!(t.take_pending_deliverable(false).count(), 0);
}

#[test]
fn msix_function_mask_holds_messages_until_unmasked() {
    let mut t = MsixTable::new(130).unwrap();
    for v in [0u16, 63, 64, 129] {
        program(
            &mut t,
            v,
            0xfee0_0000 + u64::from(v) * 4,
            u32::from(v),
            false,
        );
        assert_eq!(t.trigger(v, true, true).unwrap(), MsixOutcome::Pending);
    }
    // Vector 64 is also individually masked, so it stays pending after the function unmask.
    t.write(64 * 16 + 12, &1u32.to_le_bytes()).unwrap();
    assert_eq!(pba_qword(&t, 0), (1 << 63) | 1);
    assert_eq!(pba_qword(&t, 1), 1);
    assert_eq!(pba_qword(&t, 2), 1 << 1);

    assert_eq!(
        t.take_pending_deliverable(true).count(),
        0,
        "function still masked"
    );
    let vectors: Vec<u16> = t
        .take_pending_deliverable(false)
        .map(|m| m.vector)
        .collect();
    assert_eq!(vectors, vec![0, 63, 129]);
    assert!(t.is_pending(64));
    assert!(!t.is_pending(0) && !t.is_pending(63) && !t.is_pending(129));
}

#[test]
fn msix_disabled_sends_and_remembers_nothing() {
    let mut t = MsixTable::new(8).unwrap();
    program(&mut t, 1, 0xfee0_0000, 1, false);
    assert_eq!(t.trigger(1, false, false).unwrap(), MsixOutcome::Disabled);
    assert_eq!(t.trigger(1, true, false).unwrap(), MsixOutcome::Disabled);
    assert!(!t.is_pending(1));
}

#[test]
fn msix_out_of_range_vector_is_an_error() {
    let mut t = MsixTable::new(8).unwrap();
    assert_eq!(
        t.trigger(8, false, true),
        Err(MsixError::VectorOutOfRange {
            vector: 8,
            vectors: 8
        })
    );
    assert!(t.trigger(u16::MAX, false, false).is_err());
    assert!(!t.is_pending(8));
    assert!(!t.is_pending(u16::MAX));
}

#[test]
fn msix_reset_masks_everything_and_clears_pba() {
    let mut t = MsixTable::new(16).unwrap();
    program(&mut t, 2, 0xfee0_0000, 7, false);
    program(&mut t, 9, 0xfee0_0000, 9, true);
    assert_eq!(t.trigger(9, false, true).unwrap(), MsixOutcome::Pending);
    t.reset();
    assert_eq!(t, MsixTable::new(16).unwrap());
    assert_eq!(t.trigger(2, false, true).unwrap(), MsixOutcome::Pending);
}

#[test]
fn msix_table_matches_config_layout() {
    let c = cfg();
    let t = MsixTable::new(c.layout().msix_vectors).unwrap();
    assert_eq!(t.table_len(), c.layout().msix_table_len());
    assert_eq!(t.pba_len(), c.layout().msix_pba_len());
    assert_eq!(
        (c.msix_control() & MSIX_CTRL_TABLE_SIZE_MASK) + 1,
        t.vectors()
    );
}

/// The vendor-specific gateway as Linux's mlx5_core reaches it (lib/pci_vsc.c): found by
/// `pci_find_capability(PCI_CAP_ID_VNDR)` (its absence was mlx5_core's "Failed to get valid
/// vendor specific ID" on the model), locked with the counter's ticket, the software-reset
/// semaphore taken and released in the semaphore domain, the gateway unlocked; all through
/// dword configuration accesses.
#[test]
fn linux_takes_the_sw_reset_semaphore_through_the_vendor_gateway() {
    let mut c = cfg();
    let vsc = VSC_CAP_OFFSET;
    assert_eq!(c.read_u8(vsc).unwrap(), CAP_ID_VENDOR);
    assert_eq!(c.read_u8(vsc + 2).unwrap(), VSC_CAP_LEN);
    // mlx5_vsc_gw_lock.
    assert_eq!(c.read_u32(vsc + VSC_SEMAPHORE).unwrap(), 0);
    let ticket = c.read_u32(vsc + VSC_COUNTER).unwrap();
    c.write_u32(vsc + VSC_SEMAPHORE, ticket).unwrap();
    assert_eq!(c.read_u32(vsc + VSC_SEMAPHORE).unwrap(), ticket);
    // mlx5_vsc_sem_set_space(MLX5_SEMAPHORE_SW_RESET, MLX5_VSC_LOCK).
    c.write_u32(vsc + VSC_CTRL, u32::from(SPACE_SEMAPHORE_DOMAIN))
        .unwrap();
    assert_ne!(c.read_u32(vsc + VSC_CTRL).unwrap() >> 29, 0, "space served");
    let id = c.read_u32(vsc + VSC_COUNTER).unwrap();
    c.write_u32(vsc + VSC_DATA, id).unwrap();
    c.write_u32(vsc + VSC_ADDR, 0x20 | ADDR_FLAG).unwrap();
    assert_eq!(c.read_u32(vsc + VSC_ADDR).unwrap() & ADDR_FLAG, 0);
    c.write_u32(vsc + VSC_ADDR, 0x20).unwrap();
    assert_ne!(c.read_u32(vsc + VSC_ADDR).unwrap() & ADDR_FLAG, 0);
    assert_eq!(c.read_u32(vsc + VSC_DATA).unwrap(), id, "semaphore held");
    // Unlock both; a function level reset leaves the gateway free too.
    c.write_u32(vsc + VSC_DATA, 0).unwrap();
    c.write_u32(vsc + VSC_ADDR, 0x20 | ADDR_FLAG).unwrap();
    c.write_u32(vsc + VSC_SEMAPHORE, 0).unwrap();
    assert_eq!(c.read_u32(vsc + VSC_SEMAPHORE).unwrap(), 0);
    c.write_u32(vsc + VSC_SEMAPHORE, 5).unwrap();
    c.reset();
    assert_eq!(c.read_u32(vsc + VSC_SEMAPHORE).unwrap(), 0);
    // The header is read-only.
    c.write_u32(vsc, 0xffff_ffff).unwrap();
    assert_eq!(c.read_u8(vsc).unwrap(), CAP_ID_VENDOR);
    assert_eq!(c.read_u8(vsc + 1).unwrap(), 0);
}
