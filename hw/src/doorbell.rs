//! Doorbell encodings: UAR registers (CQ arm, EQ consumer index, send doorbell / BlueFlame) and
//! doorbell records in host memory (rdma-core `mlx5dv.h`, Linux `cq.h`, `eq.c`).
//!
//! Ordering the driver must keep: write WQEs, store fence, update the doorbell record, store
//! fence, then write the UAR register.

use crate::mmio::registers;
use bitfield_struct::bitfield;

/// Size of a UAR page in bytes; UAR page `n` sits at BAR0 + `n * UAR_PAGE_SIZE`.
pub const UAR_PAGE_SIZE: usize = 4096;
/// UAR offset of the 64-bit CQ doorbell (arm request).
pub const UAR_CQ_DOORBELL: usize = 0x20;
/// UAR offset of the EQ doorbell that updates the consumer index and re-arms the EQ.
pub const UAR_EQ_UPDATE_CI_ARM: usize = 0x40;
/// UAR offset of the EQ doorbell that only updates the consumer index.
pub const UAR_EQ_UPDATE_CI: usize = 0x48;
/// UAR offset of the send doorbell of QPs without a doorbell record (`send_dbr_mode`
/// [`NO_DBR_EXT`](crate::qp::send_dbr_mode::NO_DBR_EXT)): eight bytes, the first eight of the
/// last posted WQE's control segment (rdma-core's tests, `DB_BF_DBR_LESS_BUF_OFFSET`).
pub const UAR_DBR_LESS_DOORBELL: usize = 0x600;
/// UAR offset of the first BlueFlame / send doorbell register.
pub const UAR_BF_OFFSET: usize = 0x800;
/// Bytes of one BlueFlame buffer: each BlueFlame register (`bf_reg_size`, 512 bytes with the
/// `log_bf_reg_size` of 9 every ConnectX reports) is double-buffered, and successive doorbells
/// alternate between its two halves.
pub const BF_BUFFER_SIZE: usize = 256;

/// Byte offset in BAR0 of BlueFlame buffer `odd` (0 or 1, alternating) of the first BlueFlame
/// register of UAR page `uar_page`: where a send doorbell (the first 8 bytes of the last WQE) or
/// a whole BlueFlame WQE is written.
pub const fn bf_buffer_offset(uar_page: u32, odd: bool) -> usize {
    uar_page as usize * UAR_PAGE_SIZE + UAR_BF_OFFSET + if odd { BF_BUFFER_SIZE } else { 0 }
}

/// How many consumed EQEs software may leave unreported before it must write the EQ doorbell.
pub const EQ_CI_UPDATE_INTERVAL: u32 = 128;

/// Index (in 32-bit words) of the receive counter in a WQ doorbell record.
pub const DBR_RCV: usize = 0;
/// Index (in 32-bit words) of the send counter in a WQ doorbell record.
pub const DBR_SND: usize = 1;
/// Index (in 32-bit words) of the consumer index in a CQ doorbell record.
pub const DBR_CQ_SET_CI: usize = 0;
/// Index (in 32-bit words) of the arm word in a CQ doorbell record.
pub const DBR_CQ_ARM: usize = 1;
/// Size of a doorbell record in bytes (two big-endian 32-bit words).
pub const DBR_SIZE: usize = 8;

/// Values of [`CqArm::cmd`].
pub mod cq_arm_cmd {
    /// Request an event for the next completion.
    pub const NEXT: u8 = 0;
    /// Request an event only for the next solicited completion.
    pub const SOLICITED: u8 = 1;
}

/// The CQ arm word: the high half of the CQ doorbell and the arm word of the CQ doorbell record.
#[bitfield(u32)]
#[derive(PartialEq, Eq)]
pub struct CqArm {
    /// Consumer index (low 24 bits).
    #[bits(24)]
    pub ci: u32,
    /// Arm command (see [`cq_arm_cmd`]).
    #[bits(4)]
    pub cmd: u8,
    /// Arm sequence number (2 bits), incremented each time an armed CQ fires.
    #[bits(2)]
    pub sn: u8,
    #[bits(2)]
    __: u8,
}

impl CqArm {
    /// The 64-bit value written to [`UAR_CQ_DOORBELL`] (big-endian: arm word, then `cqn`).
    pub const fn doorbell(self, cqn: u32) -> u64 {
        (self.into_bits() as u64) << 32 | (cqn & 0x00ff_ffff) as u64
    }
}

/// The EQ doorbell word written to [`UAR_EQ_UPDATE_CI_ARM`] or [`UAR_EQ_UPDATE_CI`].
#[bitfield(u32)]
#[derive(PartialEq, Eq)]
pub struct EqDoorbell {
    /// Consumer index (low 24 bits).
    #[bits(24)]
    pub ci: u32,
    /// The EQ's number.
    #[bits(8)]
    pub eqn: u8,
}

/// Writes `counter` (16-bit, wrapping) into a WQ doorbell record word: the value stored is
/// big-endian, as the device reads it.
pub const fn wq_dbrec_value(counter: u16) -> [u8; 4] {
    (counter as u32).to_be_bytes()
}

/// The value of a CQ doorbell record's consumer-index word.
pub const fn cq_dbrec_ci(ci: u32) -> [u8; 4] {
    (ci & 0x00ff_ffff).to_be_bytes()
}

/// The 64-bit CQ doorbell at [`UAR_CQ_DOORBELL`]: the arm word in the high half, the CQ number
/// in the low half (the value [`CqArm::doorbell`] computes).
#[bitfield(u64)]
#[derive(PartialEq, Eq)]
pub struct CqDoorbell {
    /// The CQ's number.
    #[bits(24)]
    pub cqn: u32,
    #[bits(8)]
    __: u8,
    /// The arm request, as written to the CQ doorbell record's arm word.
    #[bits(32)]
    pub arm: CqArm,
}

/// The EQ doorbell at [`UAR_EQ_UPDATE_CI_ARM`]: reports the consumer index and re-arms the EQ.
#[bitfield(u32)]
#[derive(PartialEq, Eq)]
pub struct EqUpdateCiArm {
    /// Consumer index and EQ number.
    #[bits(32)]
    pub word: EqDoorbell,
}

/// The EQ doorbell at [`UAR_EQ_UPDATE_CI`]: reports the consumer index only.
#[bitfield(u32)]
#[derive(PartialEq, Eq)]
pub struct EqUpdateCi {
    /// Consumer index and EQ number.
    #[bits(32)]
    pub word: EqDoorbell,
}

// The UAR page's registers: type, width, offset in the page, Linux name.
registers! {
    CqDoorbell: u64 @ UAR_CQ_DOORBELL => "MLX5_CQ_DOORBELL",
    EqUpdateCiArm: u32 @ UAR_EQ_UPDATE_CI_ARM => "MLX5_EQ_DOORBEL_OFFSET",
    EqUpdateCi: u32 @ UAR_EQ_UPDATE_CI => "MLX5_EQ_DOORBEL_OFFSET + 8",
}
