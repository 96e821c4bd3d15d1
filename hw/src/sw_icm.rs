//! Software-owned ICM (SW ICM): device memory the driver carves into steering entries and
//! header-modify action lists, written by the host through RDMA and read by the device's
//! steering engine (Linux 6.12 `mlx5_ifc.h` `sw_icm`, `create_sw_icm_in`).
//!
//! The device names three ranges in its device-memory capability page
//! ([`DeviceMemCap`](crate::memic::DeviceMemCap): `steering_sw_icm_start_address` with
//! `log_steering_sw_icm_size`, and the header-modify and header-modify pattern pairs); the
//! driver picks a piece of one (mlx5_core's `mlx5_dm_sw_icm_alloc` keeps the bitmap) and makes
//! it a general object of type [`obj_type::SW_ICM`](crate::general_obj::obj_type::SW_ICM) so
//! that a memory key of access mode
//! [`MKC_ACCESS_MODE_SW_ICM`](crate::mkey::MKC_ACCESS_MODE_SW_ICM) may cover it
//! (mlx5_ib's `mlx5_ib_get_dm_mr`). Every address here is an ICM address, not a bus address.

use crate::layout;

layout! {
    /// CREATE_GENERAL_OBJECT input of an SW ICM object, as mlx5_core's `mlx5_dm_sw_icm_alloc`
    /// fills it: the general object header, then `sw_icm` (a power-of-two piece of one
    /// range). DESTROY_GENERAL_OBJECT (mlx5_core's `mlx5_dm_sw_icm_dealloc`) and
    /// QUERY_GENERAL_OBJECT send the header alone.
    pub struct CreateSwIcmIn("create_sw_icm_in", 0x50) {
        /// Command opcode: [`Opcode::CreateGeneralObject`](crate::cmd::Opcode::CreateGeneralObject).
        opcode: u16 @ 0x00 [0x10],
        /// User context the object belongs to (mlx5_ib passes the DEVX uid of the process).
        uid: u16 @ 0x10 [0x10],
        /// Object type: [`obj_type::SW_ICM`](crate::general_obj::obj_type::SW_ICM).
        obj_type: u16 @ 0x30 [0x10],
        /// Ignored by CREATE, which hands out the number.
        obj_id: u32 @ 0x40 [0x20],
        /// Fields MODIFY_GENERAL_OBJECT would change (none for SW ICM; 0 at CREATE).
        modify_field_select: u64 @ 0x80 [0x40],
        /// log2 of the piece's bytes.
        log_sw_icm_size: u8 @ 0xd8 [0x8],
        /// ICM address of the piece's first byte.
        sw_icm_start_addr: u64 @ 0x100 [0x40],
    }
}

layout! {
    /// QUERY_GENERAL_OBJECT output of an SW ICM object: the general object output header,
    /// then the `sw_icm` body as CREATE gave it.
    pub struct QuerySwIcmOut("query_sw_icm_out", 0x50) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x0 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
        /// The object's number.
        obj_id: u32 @ 0x40 [0x20],
        /// log2 of the piece's bytes.
        log_sw_icm_size: u8 @ 0xd8 [0x8],
        /// ICM address of the piece's first byte.
        sw_icm_start_addr: u64 @ 0x100 [0x40],
    }
}
