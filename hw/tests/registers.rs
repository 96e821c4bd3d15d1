//! The register tables: every register's offset against Linux `device.h` (`struct
//! mlx5_init_seg`, `struct health_buffer`, the UAR doorbell macros), and every register's
//! fields against the byte layout of the initialization segment (itself checked field by field
//! against the reference in `layouts.rs`).

use cxdirect_hw::doorbell::{
    self, CqArm, CqDoorbell, EqDoorbell, EqUpdateCi, EqUpdateCiArm, UAR_PAGE_SIZE,
};
use cxdirect_hw::init_seg::{
    CmdDoorbell, CmdifRevFwSub, CmdqAddrHigh, CmdqAddrLowSize, FwRev, HealthCounter, HealthFwVer,
    HealthRfrSeverity, HealthSyndrome, InitSeg, Initializing, InternalTimerHigh, InternalTimerLow,
};
use cxdirect_hw::mmio::{Register, RegisterWord};

/// `R`'s offset, width and name, for the table checks.
fn row<R: Register>() -> (&'static str, usize, usize) {
    (R::NAME, R::OFFSET, <R::Word as RegisterWord>::BYTES)
}

#[test]
fn init_segment_registers_sit_where_linux_puts_them() {
    // Byte offsets of struct mlx5_init_seg (health at 0x200) and struct health_buffer.
    let want = [
        ("fw_rev", 0x000, 4),
        ("cmdif_rev_fw_sub", 0x004, 4),
        ("cmdq_addr_h", 0x010, 4),
        ("cmdq_addr_l_sz", 0x014, 4),
        ("cmd_dbell", 0x018, 4),
        ("initializing", 0x1fc, 4),
        ("health.fw_ver", 0x200 + 0x30, 4),
        ("health.rfr_severity", 0x200 + 0x38, 4),
        ("health.irisc_index/synd/ext_synd", 0x200 + 0x3c, 4),
        ("internal_timer_h", 0x1000, 4),
        ("internal_timer_l", 0x1004, 4),
        ("health_counter", 0x1010, 4),
    ];
    let have = [
        row::<FwRev>(),
        row::<CmdifRevFwSub>(),
        row::<CmdqAddrHigh>(),
        row::<CmdqAddrLowSize>(),
        row::<CmdDoorbell>(),
        row::<Initializing>(),
        row::<HealthFwVer>(),
        row::<HealthRfrSeverity>(),
        row::<HealthSyndrome>(),
        row::<InternalTimerHigh>(),
        row::<InternalTimerLow>(),
        row::<HealthCounter>(),
    ];
    assert_eq!(have, want);
}

#[test]
fn uar_registers_sit_where_linux_puts_them() {
    // MLX5_CQ_DOORBELL 0x20; MLX5_EQ_DOORBEL_OFFSET 0x40, and two dwords on without the arm.
    assert_eq!(
        [
            row::<CqDoorbell>(),
            row::<EqUpdateCiArm>(),
            row::<EqUpdateCi>()
        ],
        [
            ("MLX5_CQ_DOORBELL", 0x20, 8),
            ("MLX5_EQ_DOORBEL_OFFSET", 0x40, 4),
            ("MLX5_EQ_DOORBEL_OFFSET + 8", 0x48, 4),
        ]
    );
    // BlueFlame registers from UAR offset 0x800, each of two 256-byte buffers.
    assert_eq!(
        doorbell::bf_buffer_offset(3, false),
        3 * UAR_PAGE_SIZE + 0x800
    );
    assert_eq!(
        doorbell::bf_buffer_offset(3, true),
        3 * UAR_PAGE_SIZE + 0x900
    );
}

/// The big-endian dword of `seg` at register `R`'s offset, decoded as `R`.
fn read<R: Register<Word = u32>>(seg: &InitSeg) -> R {
    let at = R::OFFSET;
    let bytes = seg.as_bytes()[at..at + 4].try_into().unwrap();
    R::from_raw(u32::from_be_bytes(bytes))
}

/// Stores `value` into `seg` as the device would present register `R`.
fn write<R: Register<Word = u32>>(seg: &mut InitSeg, value: R) {
    let at = R::OFFSET;
    seg.as_bytes_mut()[at..at + 4].copy_from_slice(&value.to_raw().to_be_bytes());
}

#[test]
fn register_fields_agree_with_the_init_segment_layout() {
    let mut seg = InitSeg::zeroed();
    seg.set_fw_rev_major(22)
        .set_fw_rev_minor(39)
        .set_cmdif_rev(5)
        .set_fw_rev_subminor(1010)
        .set_cmdq_addr_h(0x1234_5678)
        .set_cmdq_addr_l(0xabcde)
        .set_nic_interface(2)
        .set_log_cmdq_size(5)
        .set_log_cmdq_stride(6)
        .set_cmd_dbell(0x8000_0001)
        .set_initializing(true)
        .set_fw_reset_supported(true)
        .set_internal_timer_h(0xdead_beef)
        .set_internal_timer_l(0x0bad_cafe)
        .set_health_counter(0xff12_3456);
    seg.health_mut()
        .set_fw_ver(0x1600_27f2)
        .set_rfr(true)
        .set_irisc_index(3)
        .set_synd(0x09)
        .set_ext_synd(0xbeef);

    let rev: FwRev = read(&seg);
    assert_eq!((rev.major(), rev.minor()), (22, 39));
    let sub: CmdifRevFwSub = read(&seg);
    assert_eq!((sub.cmdif_rev(), sub.fw_rev_subminor()), (5, 1010));
    assert_eq!(read::<CmdqAddrHigh>(&seg).address_high(), 0x1234_5678);
    let low: CmdqAddrLowSize = read(&seg);
    assert_eq!(
        (
            low.cmdq_addr_l(),
            low.nic_interface(),
            low.log_cmdq_size(),
            low.log_cmdq_stride()
        ),
        (0xabcde, 2, 5, 6)
    );
    assert_eq!(read::<CmdDoorbell>(&seg).slots(), 0x8000_0001);
    let init: Initializing = read(&seg);
    assert!(init.initializing() && init.fw_reset_supported());
    assert_eq!(read::<HealthFwVer>(&seg).fw_ver(), 0x1600_27f2);
    assert!(read::<HealthRfrSeverity>(&seg).rfr());
    let synd: HealthSyndrome = read(&seg);
    assert_eq!(
        (synd.irisc_index(), synd.synd(), synd.ext_synd()),
        (3, 0x09, 0xbeef)
    );
    assert_eq!(read::<InternalTimerHigh>(&seg).ticks_high(), 0xdead_beef);
    assert_eq!(read::<InternalTimerLow>(&seg).ticks_low(), 0x0bad_cafe);
    assert_eq!(read::<HealthCounter>(&seg).counter(), 0x12_3456);

    // And the other way: a register written as the driver does lands in the layout's fields.
    let mut seg = InitSeg::zeroed();
    write(
        &mut seg,
        CmdqAddrLowSize::new()
            .with_cmdq_addr_l(0x54321)
            .with_log_cmdq_size(3),
    );
    write(&mut seg, CmdDoorbell::slot(7));
    write(&mut seg, HealthSyndrome::new().with_synd(0x07));
    assert_eq!(seg.cmdq_addr_l(), 0x54321);
    assert_eq!(seg.log_cmdq_size(), 3);
    assert_eq!(seg.cmd_dbell(), 1 << 7);
    assert_eq!(seg.health().synd(), 0x07);
    assert_eq!(seg.health().irisc_index(), 0);
}

#[test]
fn dead_reads_are_recognised() {
    assert!(HealthFwVer::from_raw(0xffff_ffff).is_dead_read());
    assert!(!HealthFwVer::from_raw(0x1600_27f2).is_dead_read());
}

#[test]
fn uar_doorbell_words_match_the_manual() {
    let arm = CqArm::new().with_sn(1).with_cmd(0).with_ci(0xab_cdef);
    let db = CqDoorbell::new().with_arm(arm).with_cqn(0x42);
    // sn << 28 | cmd << 24 | ci in the high word, cqn in the low word.
    assert_eq!(db.to_raw(), arm.doorbell(0x42));
    assert_eq!(db.to_raw(), 0x10ab_cdef_0000_0042);
    let eq = EqDoorbell::new().with_eqn(5).with_ci(0x12_3456);
    assert_eq!(EqUpdateCiArm::new().with_word(eq).to_raw(), 0x0512_3456);
    assert_eq!(EqUpdateCi::new().with_word(eq).to_raw(), 0x0512_3456);
}
