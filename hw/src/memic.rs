//! Device memory (MEMIC): the device-memory capability page (`device_mem_cap`, HCA capability
//! type [`cap_type::DEVICE_MEM`](crate::hca::cap_type::DEVICE_MEM)) and the commands that hand
//! out, take back and add atomic-operation aliases to pieces of it (Linux 6.12 `mlx5_ifc.h`
//! `device_mem_cap`, `alloc_memic_in/out`, `dealloc_memic_in/out`, `modify_memic_in/out`).
//!
//! The device memory sits in BAR0 at `memic_bar_start_addr`; the host reads and writes it with
//! MMIO (mlx5_ib maps it to users: `handle_alloc_dm_memic`), and memory keys of access mode
//! [`MKC_ACCESS_MODE_MEMIC`](crate::mkey::MKC_ACCESS_MODE_MEMIC) let the device's own data
//! path reach it (`mlx5_ib_reg_dm_mr`). Every address the commands carry is a BAR0 offset.

use crate::layout;

/// `memic_operations` bit (and MODIFY_MEMIC `memic_operation_type`) of the atomic increment:
/// a store of N bytes to the operation address adds the stored value to the N bytes of device
/// memory behind it (rdma-core's `MEMIC_ATOMIC_INCREMENT`, tests/test_mlx5_dm_ops.py).
pub const MEMIC_OP_ATOMIC_INCREMENT: u8 = 0x0;
/// `memic_operations` bit of the atomic test-and-set: a load of N bytes from the operation
/// address returns the device memory behind it and sets it to 1 (rdma-core's
/// `MEMIC_ATOMIC_TEST_AND_SET`).
pub const MEMIC_OP_ATOMIC_TEST_AND_SET: u8 = 0x1;

/// MODIFY_MEMIC `op_mod`: map an operation address (`MLX5_MODIFY_MEMIC_OP_MOD_ALLOC`).
pub const MODIFY_MEMIC_OP_MOD_ALLOC: u16 = 0x0;
/// MODIFY_MEMIC `op_mod`: unmap it (`MLX5_MODIFY_MEMIC_OP_MOD_DEALLOC`).
pub const MODIFY_MEMIC_OP_MOD_DEALLOC: u16 = 0x1;

/// log2 of the unit every MEMIC allocation is sized and aligned in: 64 bytes
/// (mlx5_ib's `MLX5_MEMIC_BASE_ALIGN`; `log_memic_addr_alignment` counts from it).
pub const MEMIC_BASE_ALIGN: u8 = 6;

layout! {
    /// The device-memory capability page (`MLX5_CAP_DEV_MEM`), read by mlx5_core's
    /// `mlx5_query_hca_caps` when the general page's `device_memory` is set, then by mlx5_ib
    /// (`mlx5_ib_query_device`'s `max_dm_size`, `mlx5_cmd_alloc_memic`, the DM_MAP_OP_ADDR
    /// method) and by rdma-core's `test_mlx5_dm_ops` through DEVX.
    pub struct DeviceMemCap("device_mem_cap", 0x100) {
        /// Device memory is offered (ALLOC_MEMIC and friends).
        memic: bool @ 0x0 [0x1],
        /// Widths the atomic increment takes, one bit per size (bit 0: 1 byte, bit 1: 2, bit
        /// 2: 4, bit 3: 8). Reserved in Linux's `mlx5_ifc.h`; rdma-core's
        /// `requires_memic_atomic_support` (tests/test_mlx5_dm_ops.py) reads it as the byte at
        /// page offset 4.
        memic_atomic_increment_size: u8 @ 0x20 [0x8],
        /// log2 of the smallest allocation, in bytes.
        log_min_memic_alloc_size: u8 @ 0x2b [0x5],
        /// Widths the atomic test-and-set takes (bits as for the increment). Reserved in
        /// Linux's `mlx5_ifc.h`; rdma-core's test reads it as the byte at page offset 6.
        memic_atomic_test_and_set_size: u8 @ 0x30 [0x8],
        /// Largest `log_memic_addr_alignment` ALLOC_MEMIC takes (alignment 64 << n bytes).
        log_max_memic_addr_alignment: u8 @ 0x38 [0x8],
        /// BAR0 offset of the device memory.
        memic_bar_start_addr: u64 @ 0x40 [0x40],
        /// Bytes of BAR0 the device memory spans (mlx5_ib keeps a page bitmap of it).
        memic_bar_size: u32 @ 0x80 [0x20],
        /// Largest allocation in bytes (mlx5_ib reports it as `max_dm_size`).
        max_memic_size: u32 @ 0xa0 [0x20],
        /// ICM address of the steering SW ICM range (0: none; mlx5_core's `mlx5_dm_create`
        /// then keeps no allocator for it). See [`crate::sw_icm`].
        steering_sw_icm_start_address: u64 @ 0xc0 [0x40],
        /// log2 of the bytes of the header-modify SW ICM range.
        log_header_modify_sw_icm_size: u8 @ 0x108 [0x8],
        /// log2 of the unit SW ICM is handed out in, in bytes (mlx5_core's
        /// `MLX5_LOG_SW_ICM_BLOCK_SIZE`).
        log_sw_icm_alloc_granularity: u8 @ 0x112 [0x6],
        /// log2 of the bytes of the steering SW ICM range.
        log_steering_sw_icm_size: u8 @ 0x118 [0x8],
        /// log2 of the bytes of the indirect-encap SW ICM range (0: none).
        log_indirect_encap_sw_icm_size: u8 @ 0x120 [0x8],
        /// log2 of the bytes of the header-modify pattern SW ICM range.
        log_header_modify_pattern_sw_icm_size: u8 @ 0x138 [0x8],
        /// ICM address of the header-modify SW ICM range.
        header_modify_sw_icm_start_address: u64 @ 0x140 [0x40],
        /// ICM address of the header-modify pattern SW ICM range.
        header_modify_pattern_sw_icm_start_address: u64 @ 0x1c0 [0x40],
        /// Operations MODIFY_MEMIC maps an address for, one bit per `MEMIC_OP_*`.
        memic_operations: u32 @ 0x200 [0x20],
    }
}

layout! {
    /// ALLOC_MEMIC input, as mlx5_ib's `mlx5_cmd_alloc_memic` fills it: a piece of
    /// `memic_size` bytes somewhere in `[range_start_addr, range_start_addr + range_size)`,
    /// aligned to `64 << log_memic_addr_alignment` bytes.
    pub struct AllocMemicIn("alloc_memic_in", 0x20) {
        /// Command opcode: [`Opcode::AllocMemic`](crate::cmd::Opcode::AllocMemic).
        opcode: u16 @ 0x00 [0x10],
        /// Opcode modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// Alignment of the piece: 64 << this many bytes.
        log_memic_addr_alignment: u8 @ 0x78 [0x8],
        /// BAR0 offset of the range the piece must lie in.
        range_start_addr: u64 @ 0x80 [0x40],
        /// Bytes of that range.
        range_size: u32 @ 0xc0 [0x20],
        /// Bytes asked for.
        memic_size: u32 @ 0xe0 [0x20],
    }
}

layout! {
    /// ALLOC_MEMIC output.
    pub struct AllocMemicOut("alloc_memic_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x0 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
        /// BAR0 offset of the piece handed out.
        memic_start_addr: u64 @ 0x40 [0x40],
    }
}

layout! {
    /// DEALLOC_MEMIC input, as mlx5_ib's `mlx5_cmd_dealloc_memic` fills it.
    pub struct DeallocMemicIn("dealloc_memic_in", 0x20) {
        /// Command opcode: [`Opcode::DeallocMemic`](crate::cmd::Opcode::DeallocMemic).
        opcode: u16 @ 0x00 [0x10],
        /// Opcode modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// BAR0 offset of the piece, as ALLOC_MEMIC returned it.
        memic_start_addr: u64 @ 0x80 [0x40],
        /// Bytes of the piece, as ALLOC_MEMIC was asked for.
        memic_size: u32 @ 0xc0 [0x20],
    }
}

layout! {
    /// DEALLOC_MEMIC output.
    pub struct DeallocMemicOut("dealloc_memic_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x0 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
    }
}

layout! {
    /// MODIFY_MEMIC input, as mlx5_ib's `mlx5_cmd_alloc_memic_op` and
    /// `mlx5_cmd_dealloc_memic_op` fill it for the DM_MAP_OP_ADDR method.
    pub struct ModifyMemicIn("modify_memic_in", 0x40) {
        /// Command opcode: [`Opcode::ModifyMemic`](crate::cmd::Opcode::ModifyMemic).
        opcode: u16 @ 0x00 [0x10],
        /// User context the operation address belongs to (0: the function's).
        uid: u16 @ 0x10 [0x10],
        /// [`MODIFY_MEMIC_OP_MOD_ALLOC`] or [`MODIFY_MEMIC_OP_MOD_DEALLOC`].
        op_mod: u16 @ 0x30 [0x10],
        /// The operation, a `MEMIC_OP_*` value.
        memic_operation_type: u8 @ 0x78 [0x8],
        /// BAR0 offset of the piece (as ALLOC_MEMIC returned it).
        memic_start_addr: u64 @ 0x80 [0x40],
    }
}

layout! {
    /// MODIFY_MEMIC output.
    pub struct ModifyMemicOut("modify_memic_out", 0x40) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x0 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
        /// BAR0 offset whose accesses apply the operation to the piece's first byte (the
        /// piece's byte N at this address + N).
        memic_operation_addr: u64 @ 0x80 [0x40],
    }
}
