//! User contexts and user memory (DEVX): CREATE_UCTX / DESTROY_UCTX and CREATE_UMEM /
//! DESTROY_UMEM, as Linux's mlx5_ib sends them (`mlx5_ib_devx_create`,
//! `mlx5_ib_devx_destroy` and `devx_umem_reg_cmd_alloc` in
//! `drivers/infiniband/hw/mlx5/devx.c`; the layouts from `mlx5_ifc.h`, 6.12).
//!
//! A user context is a `uid`: every command input carries one in its header
//! ([`CmdIn::uid`](crate::cmd::CmdIn)), 0 for the function's own driver. A umem is a
//! registered range of user memory, described by a page list like a memory key's MTT, that
//! queues created by the same user context name instead of a page list of their own.

use crate::layout;

/// `uctx.cap` bit: the context may send raw Ethernet frames (`MLX5_UCTX_CAP_RAW_TX`).
pub const UCTX_CAP_RAW_TX: u32 = 1 << 0;
/// `uctx.cap` bit: the context may reach the device's internal resources
/// (`MLX5_UCTX_CAP_INTERNAL_DEV_RES`).
pub const UCTX_CAP_INTERNAL_DEV_RES: u32 = 1 << 1;

/// Bytes of one umem MTT entry (`mlx5_ifc_mtt_bits`).
pub const UMEM_MTT_BYTES: usize = 8;
/// Byte offset of a umem's first MTT entry in CREATE_UMEM's input.
pub const UMEM_MTT_BYTE: usize = 0x30;

layout! {
    /// CREATE_UCTX input: the capabilities the new user context asks for.
    pub struct CreateUctxIn("create_uctx_in", 0x40) {
        /// Command opcode: [`Opcode::CreateUctx`](crate::cmd::Opcode::CreateUctx).
        opcode: u16 @ 0x00 [0x10],
        /// Opcode modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// Capabilities asked for ([`UCTX_CAP_RAW_TX`], [`UCTX_CAP_INTERNAL_DEV_RES`]): a
        /// subset of the general capability `uctx_cap`.
        cap: u32 @ 0x80 [0x20],
    }
}

layout! {
    /// CREATE_UCTX output: the new context's uid.
    pub struct CreateUctxOut("create_uctx_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Failure syndrome (0 on success).
        syndrome: u32 @ 0x20 [0x20],
        /// The new user context's uid (never 0: 0 is the function's own driver).
        uid: u16 @ 0x50 [0x10],
    }
}

layout! {
    /// DESTROY_UCTX input. The uid to destroy sits in the command's body, not its header.
    pub struct DestroyUctxIn("destroy_uctx_in", 0x10) {
        /// Command opcode: [`Opcode::DestroyUctx`](crate::cmd::Opcode::DestroyUctx).
        opcode: u16 @ 0x00 [0x10],
        /// Opcode modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The user context to destroy.
        uid: u16 @ 0x50 [0x10],
    }
}

layout! {
    /// CREATE_UMEM input: the umem's page size, the offset of its start in the first page,
    /// and its page list (`num_of_mtt` entries of [`UMEM_MTT_BYTES`] from [`UMEM_MTT_BYTE`]).
    pub struct CreateUmemIn("create_umem_in", 0x30) {
        /// Command opcode: [`Opcode::CreateUmem`](crate::cmd::Opcode::CreateUmem).
        opcode: u16 @ 0x00 [0x10],
        /// The user context the umem belongs to (never 0).
        uid: u16 @ 0x10 [0x10],
        /// Opcode modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// Reach the memory through PCIe ATS (`mlx5_umem_needs_ats`).
        ats: bool @ 0x100 [0x1],
        /// Log2 of the page size, relative to 4 KiB (0: 4 KiB).
        log_page_size: u8 @ 0x11b [0x5],
        /// Offset of the umem's first byte in its first page, in bytes.
        page_offset: u32 @ 0x120 [0x20],
        /// Number of page list entries that follow.
        num_of_mtt: u64 @ 0x140 [0x40],
    }
    arrays {
        /// The page list: each entry a page's bus address, with read (bit 0) and write
        /// (bit 1) permission bits below the page size (`mlx5_ib_populate_pas`).
        mtt: u64 @ 0x180 [0x40],
    }
}

layout! {
    /// CREATE_UMEM output.
    pub struct CreateUmemOut("create_umem_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Failure syndrome (0 on success).
        syndrome: u32 @ 0x20 [0x20],
        /// The new umem's number.
        umem_id: u32 @ 0x48 [0x18],
    }
}

layout! {
    /// DESTROY_UMEM input.
    pub struct DestroyUmemIn("destroy_umem_in", 0x10) {
        /// Command opcode: [`Opcode::DestroyUmem`](crate::cmd::Opcode::DestroyUmem).
        opcode: u16 @ 0x00 [0x10],
        /// The user context the umem belongs to.
        uid: u16 @ 0x10 [0x10],
        /// Opcode modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The umem to destroy.
        umem_id: u32 @ 0x48 [0x18],
    }
}
