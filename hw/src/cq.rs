//! Completion queues: the CQ context and the CREATE_CQ / MODIFY_CQ / DESTROY_CQ commands.

use crate::layout;

layout! {
    /// Completion queue context (CQC), given at CREATE_CQ and returned by QUERY_CQ.
    pub struct Cqc("cqc", 0x40) {
        /// CQ state: 0 OK, 9 overflow (a CQE arrived with no free entry), 0xa write failure.
        status: u8 @ 0x00 [0x4],
        /// `dbr_umem_id` names the umem holding the doorbell record; `dbr_addr` is then
        /// the record's offset in it.
        dbr_umem_valid: bool @ 0x06 [0x1],
        /// CQE size: 0 = 64 B, 1 = 128 B.
        cqe_sz: u8 @ 0x08 [0x3],
        /// Collapsed CQ: every CQE is written to entry 0.
        cc: bool @ 0x0b [0x1],
        /// Overrun ignore: the device does not check for CQ overflow.
        oi: bool @ 0x0e [0x1],
        /// Moderation period mode: 0 starts the period at the last event, 1 at the last CQE.
        cq_period_mode: u8 @ 0x0f [0x2],
        /// CQE compression enabled.
        cqe_comp_en: bool @ 0x11 [0x1],
        /// Mini-CQE format used when compression is enabled.
        mini_cqe_res_format: u8 @ 0x12 [0x2],
        /// Arm state: 0 not armed, 6 armed for solicited events, 9 armed, 0xa fired.
        st: u8 @ 0x14 [0x4],
        /// Umem holding the doorbell record (with `dbr_umem_valid`).
        dbr_umem_id: u32 @ 0x20 [0x20],
        /// Offset of the CQ buffer in its first page, in 64-byte units.
        page_offset: u8 @ 0x54 [0x6],
        /// Log2 of the number of CQEs (0..=log_max_cq_sz).
        log_cq_size: u8 @ 0x63 [0x5],
        /// UAR page whose CQ doorbell arms this CQ.
        uar_page: u32 @ 0x68 [0x18],
        /// Event moderation period in microseconds (0 = no moderation).
        cq_period: u16 @ 0x84 [0xc],
        /// Event moderation count: CQEs before an event (0 = no moderation).
        cq_max_count: u16 @ 0x90 [0x10],
        /// Event queue that receives this CQ's completion events.
        c_eqn: u8 @ 0xb8 [0x8],
        /// Log2 of the CQ buffer's page size minus 12 (0 = 4 KiB pages).
        log_page_size: u8 @ 0xc3 [0x5],
        /// Index of the last CQE for which an event was generated.
        last_notified_index: u32 @ 0x108 [0x18],
        /// Index of the last solicited CQE for which an event was generated.
        last_solicit_index: u32 @ 0x128 [0x18],
        /// Consumer counter, as last written by software to the doorbell record.
        consumer_counter: u32 @ 0x148 [0x18],
        /// Producer counter: CQEs written by the device.
        producer_counter: u32 @ 0x168 [0x18],
        /// Bus address of the CQ doorbell record (8-byte aligned).
        dbr_addr: u64 @ 0x1c0 [0x40],
    }
}

layout! {
    /// CREATE_CQ input: the context, then the CQ buffer's page addresses.
    pub struct CreateCqIn("create_cq_in", 0x110) {
        /// Command opcode: [`Opcode::CreateCq`](crate::cmd::Opcode::CreateCq).
        opcode: u16 @ 0x00 [0x10],
        /// User context the CQ belongs to (0: the function's own driver).
        uid: u16 @ 0x10 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// Offset of the CQ buffer in its umem, in bytes (with `cq_umem_valid`).
        cq_umem_offset: u64 @ 0x280 [0x40],
        /// Umem holding the CQ buffer (with `cq_umem_valid`).
        cq_umem_id: u32 @ 0x2c0 [0x20],
        /// The CQ buffer is in umem `cq_umem_id` instead of `pas`.
        cq_umem_valid: bool @ 0x2e0 [0x1],
    }
    nested {
        /// The new CQ's context.
        cq_context: Cqc @ 0x80,
    }
    arrays {
        /// Bus addresses of the CQ buffer's pages, in order, each aligned to the page size.
        pas: u64 @ 0x880 [0x40],
    }
}

layout! {
    /// CREATE_CQ output.
    pub struct CreateCqOut("create_cq_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
        /// Number of the new CQ.
        cqn: u32 @ 0x48 [0x18],
    }
}

layout! {
    /// DESTROY_CQ input.
    pub struct DestroyCqIn("destroy_cq_in", 0x10) {
        /// Command opcode: [`Opcode::DestroyCq`](crate::cmd::Opcode::DestroyCq).
        opcode: u16 @ 0x00 [0x10],
        /// User context the CQ belongs to (0: the function's own driver).
        uid: u16 @ 0x10 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The CQ to destroy.
        cqn: u32 @ 0x48 [0x18],
    }
}

layout! {
    /// MODIFY_CQ input (`mlx5_core_modify_cq`): with op_mod 0, the fields of `cq_context` that
    /// `modify_field_select` names ([`modify_cq_select`]) replace the CQ's; with op_mod
    /// [`MODIFY_CQ_OPMOD_RESIZE`] the CQ moves to a new buffer of `log_cq_size` entries
    /// described by the context's page fields (those [`modify_cq_resize_select`] names) and
    /// the page list `pas` (`cq_resize`; mlx5_ib `mlx5_ib_resize_cq`).
    pub struct ModifyCqIn("modify_cq_in", 0x110) {
        /// Command opcode: [`Opcode::ModifyCq`](crate::cmd::Opcode::ModifyCq).
        opcode: u16 @ 0x00 [0x10],
        /// 0 modifies fields, 1 resizes.
        op_mod: u16 @ 0x30 [0x10],
        /// The CQ to modify.
        cqn: u32 @ 0x48 [0x18],
        /// With op_mod 0, the fields to change ([`modify_cq_select`]); with op_mod 1 the same
        /// dword is `resize_field_select` ([`modify_cq_resize_select`]), a union in
        /// `mlx5_ifc.h`.
        modify_field_select: u32 @ 0x60 [0x20],
    }
    nested {
        /// The new values of the selected fields.
        cq_context: Cqc @ 0x80,
    }
    arrays {
        /// Resize: bus addresses of the new buffer's pages, in order, each aligned to the page
        /// size (at the same place as CREATE_CQ's).
        pas: u64 @ 0x880 [0x40],
    }
}

/// MODIFY_CQ's op_mod for a resize (`MLX5_CQ_OPMOD_RESIZE`, Linux `include/linux/mlx5/cq.h`).
pub const MODIFY_CQ_OPMOD_RESIZE: u16 = 1;

/// `resize_field_select` bits of MODIFY_CQ with op_mod [`MODIFY_CQ_OPMOD_RESIZE`]
/// (`MLX5_MODIFY_CQ_MASK_*` in Linux's `include/linux/mlx5/cq.h`; mlx5_ib's
/// `mlx5_ib_resize_cq` sets all three).
pub mod modify_cq_resize_select {
    /// `log_cq_size`.
    pub const LOG_SIZE: u32 = 1 << 0;
    /// `page_offset`.
    pub const PG_OFFSET: u32 = 1 << 1;
    /// `log_page_size`.
    pub const PG_SIZE: u32 = 1 << 2;
}

/// `modify_field_select` bits of MODIFY_CQ with op_mod 0 (`MLX5_CQ_MODIFY_*` in Linux's
/// `include/linux/mlx5/cq.h`).
pub mod modify_cq_select {
    /// `cq_period`.
    pub const PERIOD: u32 = 1 << 0;
    /// `cq_max_count`.
    pub const COUNT: u32 = 1 << 1;
    /// `oi` (overrun ignore).
    pub const OVERRUN: u32 = 1 << 2;
    /// `c_eqn` (the CQ moves to another EQ; `cq_eq_remap`).
    pub const EQN: u32 = 1 << 3;
    /// `cq_period_mode`.
    pub const PERIOD_MODE: u32 = 1 << 4;
}
