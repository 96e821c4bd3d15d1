//! Event queue entries (Linux `device.h` `struct mlx5_eqe`) and event types.
//!
//! An EQE is 64 bytes: the event type at byte 1, a sub type at byte 3, 28 bytes of event data
//! from byte 0x20 whose layout depends on the type, and the owner bit in the last byte.

use crate::cmd::device_codes;
use crate::layout;

/// Size of an EQE in bytes.
pub const EQE_SIZE: usize = 64;
/// Byte offset of the event data within an EQE.
pub const EQE_DATA_OFFSET: usize = 0x20;

device_codes! {
    /// Event types (`MLX5_EVENT_TYPE_*`).
    pub enum EventType: u8, "event type" {
        /// A CQ has a new completion (data: [`EqeComp`]).
        Completion = 0x00 => "COMP",
        /// Path migrated.
        PathMigrated = 0x01 => "PATH_MIG",
        /// Communication established.
        CommEstablished = 0x02 => "COMM_EST",
        /// Send queue drained.
        SqDrained = 0x03 => "SQ_DRAINED",
        /// A CQ overran or failed (data: [`EqeCqErr`]).
        CqError = 0x04 => "CQ_ERROR",
        /// A work queue hit a catastrophic error (data: [`EqeQpSrq`]).
        WqCatastrophicError = 0x05 => "WQ_CATAS_ERROR",
        /// Path migration failed.
        PathMigrationFailed = 0x07 => "PATH_MIG_FAILED",
        /// Internal device error.
        InternalError = 0x08 => "INTERNAL_ERROR",
        /// Port state changed (data: [`EqePortState`], sub type: [`port_change`]).
        PortChange = 0x09 => "PORT_CHANGE",
        /// Commands completed (data: [`EqeCmd`]).
        Cmd = 0x0a => "CMD",
        /// Firmware wants pages given or taken (data: [`EqePageReq`]).
        PageRequest = 0x0b => "PAGE_REQUEST",
        /// Page fault.
        PageFault = 0x0c => "PAGE_FAULT",
        /// NIC vport context changed.
        NicVportChange = 0x0d => "NIC_VPORT_CHANGE",
        /// A WQ got an invalid request.
        WqInvalidRequestError = 0x10 => "WQ_INVAL_REQ_ERROR",
        /// A WQ hit an access violation.
        WqAccessError = 0x11 => "WQ_ACCESS_ERROR",
        /// An SRQ hit a catastrophic error.
        SrqCatastrophicError = 0x12 => "SRQ_CATAS_ERROR",
        /// Last WQE of an SRQ-attached queue reached.
        SrqLastWqe = 0x13 => "SRQ_LAST_WQE",
        /// An SRQ, RMP or RQ fell below its armed limit (data: [`EqeQpSrq`]).
        SrqRqLimit = 0x14 => "SRQ_RQ_LIMIT",
        /// GPIO event.
        Gpio = 0x15 => "GPIO_EVENT",
        /// Port module event.
        PortModule = 0x16 => "PORT_MODULE_EVENT",
        /// Temperature warning.
        TempWarning = 0x17 => "TEMP_WARN_EVENT",
        /// Doorbell/BlueFlame congestion.
        DbBfCongestion = 0x1a => "DB_BF_CONGESTION",
        /// Stall event.
        Stall = 0x1b => "STALL_EVENT",
        /// A DCT finished draining after DRAIN_DCT (data: [`EQE_DCT_NUMBER_OFFSET`]).
        DctDrained = 0x1c => "DCT_DRAINED",
        /// A request presented a wrong DC access key to an armed DCT.
        DctKeyViolation = 0x1d => "DCT_KEY_VIOLATION",
        /// General event.
        General = 0x22 => "GENERAL_EVENT",
    }
}

/// Offset of the DCT number (24 bits, big-endian word) in the data of a DCT event (Linux
/// `struct mlx5_eqe_dct`: six reserved words, then `dctn`).
pub const EQE_DCT_NUMBER_OFFSET: usize = 0x18;

/// Sub types of [`EventType::PortChange`].
pub mod port_change {
    /// The port went down.
    pub const DOWN: u8 = 1;
    /// The port became active.
    pub const ACTIVE: u8 = 4;
    /// The port initialized.
    pub const INITIALIZED: u8 = 5;
}

/// Bitmask of event types for CREATE_EQ's `event_bitmask`.
pub const fn event_bit(event: EventType) -> u64 {
    1u64 << (event as u8)
}

layout! {
    /// A 64-byte event queue entry.
    pub struct Eqe("mlx5_eqe", 64) {
        /// Event type (see [`EventType`]).
        event_type: u8 @ 0x08 [0x8],
        /// Event sub type (meaning depends on the type).
        sub_type: u8 @ 0x18 [0x8],
        /// EQE signature when enabled.
        signature: u8 @ 0x1f0 [0x8],
        /// Ownership bit: flips on each pass of the device around the ring.
        owner: bool @ 0x1ff [0x1],
    }
    nested {
        /// Data of a completion event.
        comp: EqeComp @ 0x100,
        /// Data of a command completion event.
        cmd: EqeCmd @ 0x100,
        /// Data of a page request event.
        page_req: EqePageReq @ 0x100,
        /// Data of a queue event (limit, last WQE, catastrophic error).
        qp_srq: EqeQpSrq @ 0x100,
        /// Data of a CQ error event.
        cq_err: EqeCqErr @ 0x100,
        /// Data of a port change event.
        port: EqePortState @ 0x100,
    }
}

layout! {
    /// Event data of [`EventType::Completion`].
    pub struct EqeComp("mlx5_eqe_comp", 28) {
        /// The CQ with new completions.
        cqn: u32 @ 0xc8 [0x18],
    }
}

layout! {
    /// Event data of [`EventType::Cmd`].
    pub struct EqeCmd("mlx5_eqe_cmd", 28) {
        /// Bitmask of command queue slots that completed.
        vector: u32 @ 0x00 [0x20],
    }
}

layout! {
    /// Event data of [`EventType::PageRequest`].
    pub struct EqePageReq("mlx5_eqe_page_req", 28) {
        /// Function the pages are for (0 = this function).
        func_id: u16 @ 0x10 [0x10],
        /// Pages wanted: positive = give this many, negative (two's complement) = take back.
        num_pages: u32 @ 0x20 [0x20],
    }
}

impl<T: AsRef<[u8]>> EqePageReq<T> {
    /// `num_pages` as the signed count it is.
    pub fn num_pages_signed(&self) -> i32 {
        self.num_pages() as i32
    }
}

layout! {
    /// Event data of queue events ([`EventType::SrqRqLimit`], [`EventType::SrqLastWqe`],
    /// [`EventType::WqCatastrophicError`], ...).
    pub struct EqeQpSrq("mlx5_eqe_qp_srq", 28) {
        /// Kind of queue the number names (0 QP/SQ/RQ, 1 SRQ/RMP, per the event).
        kind: u8 @ 0xa0 [0x8],
        /// The queue's number.
        qp_srq_n: u32 @ 0xc8 [0x18],
    }
}

layout! {
    /// Event data of [`EventType::CqError`].
    pub struct EqeCqErr("mlx5_eqe_cq_err", 28) {
        /// The failed CQ.
        cqn: u32 @ 0x08 [0x18],
        /// Why: 1 = overrun, 2 = access violation.
        syndrome: u8 @ 0x58 [0x8],
    }
}

/// Values of [`EqeCqErr::syndrome`].
pub mod cq_error {
    /// The CQ overran: the device had a CQE to write and no free entry.
    pub const OVERRUN: u8 = 1;
    /// The device could not write the CQ buffer.
    pub const ACCESS_VIOLATION: u8 = 2;
}

layout! {
    /// Event data of [`EventType::PortChange`].
    pub struct EqePortState("mlx5_eqe_port_state", 28) {
        /// The port number (1-based), in the byte's upper four bits.
        port: u8 @ 0x40 [0x4],
    }
}
