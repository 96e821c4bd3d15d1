//! The initialization segment: the first page of BAR0, through which the driver learns the
//! firmware version, hands the device its command queue, rings command doorbells and watches
//! firmware health (Linux `struct mlx5_init_seg` and `struct health_buffer` in `device.h`).
//!
//! The driver reaches these registers with 32-bit MMIO accesses through the register table at
//! the end of this module (each type below implements [`crate::mmio::Register`] with its BAR0
//! offset); the device model keeps the same bytes in an [`InitSeg`] view.

use crate::layout;
use crate::mmio::registers;
use bitfield_struct::bitfield;

/// BAR0 offset of `fw_rev` (minor in 31:16, major in 15:0).
pub const FW_REV: usize = 0x000;
/// BAR0 offset of `cmdif_rev_fw_sub` (command interface revision in 31:16, subminor in 15:0).
pub const CMDIF_REV_FW_SUB: usize = 0x004;
/// BAR0 offset of the command queue address, high 32 bits.
pub const CMDQ_ADDR_H: usize = 0x010;
/// BAR0 offset of the command queue address low bits with size and stride ([`CmdqAddrLowSize`]).
pub const CMDQ_ADDR_L_SZ: usize = 0x014;
/// BAR0 offset of the command doorbell: write `1 << slot` to post slot `slot`.
pub const CMD_DBELL: usize = 0x018;
/// BAR0 offset of the `initializing` register ([`Initializing`]).
pub const INITIALIZING: usize = 0x1fc;
/// BAR0 offset of the 64-byte health buffer ([`HealthBuffer`]).
pub const HEALTH_BUFFER: usize = 0x200;
/// BAR0 offset of the health buffer's firmware version word; reads 0xffffffff when the device
/// has fallen off the bus or is being reset.
pub const HEALTH_FW_VER: usize = HEALTH_BUFFER + 0x30;
/// BAR0 offset of the health syndrome byte; non-zero means a fatal firmware error.
pub const HEALTH_SYND: usize = HEALTH_BUFFER + 0x3d;
/// BAR0 offset of the free-running internal timer, high 32 bits.
pub const INTERNAL_TIMER_H: usize = 0x1000;
/// BAR0 offset of the free-running internal timer, low 32 bits.
pub const INTERNAL_TIMER_L: usize = 0x1004;
/// BAR0 offset of the health counter; its low 24 bits keep changing while firmware is alive.
pub const HEALTH_COUNTER: usize = 0x1010;
/// BAR0 offset of the legacy-interrupt clear register.
pub const CLR_INTX: usize = 0x200c;
/// The only command interface revision this project speaks.
pub const CMDIF_REV: u16 = 5;
/// Mask of the health counter bits that must keep changing.
pub const HEALTH_COUNTER_MASK: u32 = 0x00ff_ffff;
/// Value a register reads when the function is not answering (surprise removal, reset).
pub const DEAD_READ: u32 = 0xffff_ffff;

/// `cmdq_addr_l_sz`: low command queue address bits with the queue's geometry.
#[bitfield(u32)]
#[derive(PartialEq, Eq)]
pub struct CmdqAddrLowSize {
    /// Log2 of the entry stride in bytes (6 = 64 B), read only.
    #[bits(4)]
    pub log_cmdq_stride: u8,
    /// Log2 of the number of entries (slots), read only.
    #[bits(4)]
    pub log_cmdq_size: u8,
    /// Interface mode: see [`nic_interface`].
    #[bits(3)]
    pub nic_interface: u8,
    #[bits(1)]
    __: u8,
    /// Bits 31:12 of the queue's bus address (the queue is 4 KiB aligned).
    #[bits(20)]
    pub cmdq_addr_l: u32,
}

impl CmdqAddrLowSize {
    /// The low 32 bits of the command queue bus address this word carries.
    pub const fn address_low(self) -> u32 {
        self.cmdq_addr_l() << 12
    }
}

/// Values of [`CmdqAddrLowSize::nic_interface`].
pub mod nic_interface {
    /// Full driver: the normal mode.
    pub const FULL_DRIVER: u8 = 0;
    /// Interface disabled.
    pub const DISABLED: u8 = 1;
    /// No DRAM NIC mode.
    pub const NO_DRAM_NIC: u8 = 2;
    /// Software reset in progress.
    pub const SW_RESET: u8 = 7;
}

/// `cmdif_rev_fw_sub`.
#[bitfield(u32)]
#[derive(PartialEq, Eq)]
pub struct CmdifRevFwSub {
    /// Firmware subminor version.
    #[bits(16)]
    pub fw_rev_subminor: u16,
    /// Command interface revision; must be [`CMDIF_REV`].
    #[bits(16)]
    pub cmdif_rev: u16,
}

/// `fw_rev`.
#[bitfield(u32)]
#[derive(PartialEq, Eq)]
pub struct FwRev {
    /// Firmware major version.
    #[bits(16)]
    pub major: u16,
    /// Firmware minor version.
    #[bits(16)]
    pub minor: u16,
}

/// `initializing`.
#[bitfield(u32)]
#[derive(PartialEq, Eq)]
pub struct Initializing {
    #[bits(30)]
    __: u32,
    /// The firmware supports a synchronised firmware reset.
    #[bits(1)]
    pub fw_reset_supported: bool,
    /// Set while firmware initializes; the driver must not touch the command interface until
    /// it reads clear.
    #[bits(1)]
    pub initializing: bool,
}

/// `cmdq_addr_h`: bits 63:32 of the command queue's bus address.
#[bitfield(u32)]
#[derive(PartialEq, Eq)]
pub struct CmdqAddrHigh {
    /// Bits 63:32 of the address.
    #[bits(32)]
    pub address_high: u32,
}

/// `cmd_dbell`: one bit per command queue slot; writing bit `n` posts slot `n`.
#[bitfield(u32)]
#[derive(PartialEq, Eq)]
pub struct CmdDoorbell {
    /// Bit `n` set posts slot `n` (0..32).
    #[bits(32)]
    pub slots: u32,
}

impl CmdDoorbell {
    /// The doorbell value that posts `slot` alone (0..32).
    pub const fn slot(slot: usize) -> Self {
        Self::new().with_slots(1u32 << (slot & 31))
    }
}

/// `health_counter`: advances while firmware is alive.
#[bitfield(u32)]
#[derive(PartialEq, Eq)]
pub struct HealthCounter {
    /// The counter; software watches that it keeps changing ([`HEALTH_COUNTER_MASK`]).
    #[bits(24)]
    pub counter: u32,
    #[bits(8)]
    __: u8,
}

/// `health_buffer.fw_ver`: the firmware version as the health buffer reports it; all ones
/// ([`DEAD_READ`]) when the function is not answering.
#[bitfield(u32)]
#[derive(PartialEq, Eq)]
pub struct HealthFwVer {
    /// The raw version word.
    #[bits(32)]
    pub fw_ver: u32,
}

impl HealthFwVer {
    /// True when the read came back all ones: surprise removal, or a reset in progress.
    pub const fn is_dead_read(self) -> bool {
        self.into_bits() == DEAD_READ
    }
}

/// `health_buffer.rfr_severity` and the three reserved bytes after it.
#[bitfield(u32)]
#[derive(PartialEq, Eq)]
pub struct HealthRfrSeverity {
    #[bits(31)]
    __: u32,
    /// Recovery flow required: the device must be reset and reloaded (Linux
    /// `MLX5_RFR_BIT_OFFSET`, bit 7 of the byte).
    #[bits(1)]
    pub rfr: bool,
}

/// `health_buffer` dword 0x3c: `irisc_index`, `synd` and `ext_synd`.
#[bitfield(u32)]
#[derive(PartialEq, Eq)]
pub struct HealthSyndrome {
    /// Extended syndrome with device-specific detail.
    #[bits(16)]
    pub ext_synd: u16,
    /// Health syndrome: 0 healthy, otherwise the fatal error class (see [`health_syndrome`]).
    #[bits(8)]
    pub synd: u8,
    /// Index of the internal processor that raised the event.
    #[bits(8)]
    pub irisc_index: u8,
}

/// `internal_timer_h`: bits 63:32 of the free-running device clock.
#[bitfield(u32)]
#[derive(PartialEq, Eq)]
pub struct InternalTimerHigh {
    /// Bits 63:32 of the clock, in device ticks.
    #[bits(32)]
    pub ticks_high: u32,
}

/// `internal_timer_l`: bits 31:0 of the free-running device clock.
#[bitfield(u32)]
#[derive(PartialEq, Eq)]
pub struct InternalTimerLow {
    /// Bits 31:0 of the clock, in device ticks.
    #[bits(32)]
    pub ticks_low: u32,
}

// The initialization segment's registers: type, width, BAR0 offset, Linux name.
registers! {
    FwRev: u32 @ FW_REV => "fw_rev",
    CmdifRevFwSub: u32 @ CMDIF_REV_FW_SUB => "cmdif_rev_fw_sub",
    CmdqAddrHigh: u32 @ CMDQ_ADDR_H => "cmdq_addr_h",
    CmdqAddrLowSize: u32 @ CMDQ_ADDR_L_SZ => "cmdq_addr_l_sz",
    CmdDoorbell: u32 @ CMD_DBELL => "cmd_dbell",
    Initializing: u32 @ INITIALIZING => "initializing",
    HealthFwVer: u32 @ HEALTH_FW_VER => "health.fw_ver",
    HealthRfrSeverity: u32 @ HEALTH_BUFFER + 0x38 => "health.rfr_severity",
    HealthSyndrome: u32 @ HEALTH_BUFFER + 0x3c => "health.irisc_index/synd/ext_synd",
    InternalTimerHigh: u32 @ INTERNAL_TIMER_H => "internal_timer_h",
    InternalTimerLow: u32 @ INTERNAL_TIMER_L => "internal_timer_l",
    HealthCounter: u32 @ HEALTH_COUNTER => "health_counter",
}

layout! {
    /// The firmware health buffer at BAR0 + 0x200.
    pub struct HealthBuffer("health_buffer", 0x40) {
        /// Firmware program counter of the failed assertion.
        assert_exit_ptr: u32 @ 0x100 [0x20],
        /// Return address of the failed assertion.
        assert_callra: u32 @ 0x120 [0x20],
        /// Time of the last health event, in seconds.
        time: u32 @ 0x160 [0x20],
        /// Firmware version; 0xffffffff means the function is not answering.
        fw_ver: u32 @ 0x180 [0x20],
        /// Hardware identifier.
        hw_id: u32 @ 0x1a0 [0x20],
        /// Recovery flow required: the device must be reset and reloaded.
        rfr: bool @ 0x1c0 [0x1],
        /// Index of the internal processor that raised the event.
        irisc_index: u8 @ 0x1e0 [0x8],
        /// Health syndrome: 0 healthy, otherwise the fatal error class (see [`health_syndrome`]).
        synd: u8 @ 0x1e8 [0x8],
        /// Extended syndrome with device-specific detail.
        ext_synd: u16 @ 0x1f0 [0x10],
    }
    arrays {
        /// Assertion variables (six 32-bit words).
        assert_var: u32 @ 0x0 [0x20],
    }
}

/// Values of [`HealthBuffer::synd`] (`MLX5_INITIAL_SEG_HEALTH_SYNDROME_*`).
pub mod health_syndrome {
    /// Firmware internal error.
    pub const FW_INTERNAL_ERR: u8 = 0x01;
    /// An internal processor stopped responding.
    pub const DEAD_IRISC: u8 = 0x07;
    /// Fatal hardware error.
    pub const HW_FATAL_ERR: u8 = 0x08;
    /// Firmware image CRC mismatch.
    pub const FW_CRC_ERR: u8 = 0x09;
    /// A PCI read of device context memory (firmware pages) failed.
    pub const ICM_FETCH_PCI_ERR: u8 = 0x0a;
    /// Device context memory page error.
    pub const ICM_PAGE_ERR: u8 = 0x0b;
    /// The asynchronous event queue overran.
    pub const ASYNCHRONOUS_EQ_BUF_OVERRUN: u8 = 0x0c;
    /// An event queue is in error.
    pub const EQ_IN_ERR: u8 = 0x0d;
    /// An event was written to an invalid event queue.
    pub const EQ_INV: u8 = 0x0e;
    /// Flash or firmware storage error.
    pub const FFSER_ERR: u8 = 0x0f;
    /// The device is too hot.
    pub const HIGH_TEMP_ERR: u8 = 0x10;
}

layout! {
    /// The initialization segment as bytes (BAR0 offsets 0 to 0x2010).
    pub struct InitSeg("mlx5_init_seg", 0x2010) {
        /// Firmware minor version.
        fw_rev_minor: u16 @ 0x0 [0x10],
        /// Firmware major version.
        fw_rev_major: u16 @ 0x10 [0x10],
        /// Command interface revision (5).
        cmdif_rev: u16 @ 0x20 [0x10],
        /// Firmware subminor version.
        fw_rev_subminor: u16 @ 0x30 [0x10],
        /// Command queue bus address, high 32 bits.
        cmdq_addr_h: u32 @ 0x80 [0x20],
        /// Command queue bus address bits 31:12.
        cmdq_addr_l: u32 @ 0xa0 [0x14],
        /// Interface mode (see [`nic_interface`]).
        nic_interface: u8 @ 0xb5 [0x3],
        /// Log2 of the number of command queue slots.
        log_cmdq_size: u8 @ 0xb8 [0x4],
        /// Log2 of the command queue entry stride in bytes.
        log_cmdq_stride: u8 @ 0xbc [0x4],
        /// Command doorbell: one bit per slot.
        cmd_dbell: u32 @ 0xc0 [0x20],
        /// Firmware is initializing.
        initializing: bool @ 0xfe0 [0x1],
        /// Synchronised firmware reset is supported.
        fw_reset_supported: bool @ 0xfe1 [0x1],
        /// Internal timer, high 32 bits.
        internal_timer_h: u32 @ 0x8000 [0x20],
        /// Internal timer, low 32 bits.
        internal_timer_l: u32 @ 0x8020 [0x20],
        /// Health counter (low 24 bits advance while firmware is alive).
        health_counter: u32 @ 0x8080 [0x20],
        /// IEEE 1588 clock.
        ieee1588_clk: u64 @ 0x10000 [0x40],
        /// IEEE 1588 clock type.
        ieee1588_clk_type: u32 @ 0x10040 [0x20],
        /// Write to clear a legacy interrupt.
        clr_intx: u32 @ 0x10060 [0x20],
    }
    nested {
        /// The health buffer.
        health: HealthBuffer @ 0x1000,
    }
}
