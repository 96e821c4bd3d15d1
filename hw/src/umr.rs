//! User-mode memory registration (UMR) WQEs: the segments that follow a control segment of
//! opcode [`opcode::UMR`](crate::wqe::opcode::UMR) and change a memory key in place.
//!
//! A UMR WQE is a control segment whose `imm` names the key (`umr_mkey`), then a
//! [`UmrCtrlSeg`] (48 bytes: which key fields change, where the translation list goes), then
//! the new key fields as a memory key context ([`Mkc`](crate::mkey::Mkc), 64 bytes: Linux's
//! `struct mlx5_mkey_seg` is the same bits), then the translation list: inline (padded to a
//! WQEBB) with [`flags::INLINE`], or else one data segment pointing at it. Linux posts them from
//! `mlx5r_umr_post_send` (its own REG_UMR QP: enable, disable, load translations, change PD and
//! access) and from `set_reg_wr` / `set_linv_wr` (fast registration and local invalidation on a
//! ULP's RC QP), `drivers/infiniband/hw/mlx5/umr.c` and `wr.c`.

use crate::layout;

/// Bytes of a [`UmrCtrlSeg`].
pub const UMR_CTRL_SEG_SIZE: usize = 48;
/// Bytes of the memory key segment of a UMR WQE (an [`Mkc`](crate::mkey::Mkc)).
pub const UMR_MKEY_SEG_SIZE: usize = 64;
/// Bytes of one octoword, the unit of translation list sizes and offsets (two MTT entries, or
/// one KLM entry).
pub const OCTOWORD: usize = 16;

/// Values of [`UmrCtrlSeg::flags`] (`MLX5_UMR_*` in Linux `include/linux/mlx5/device.h`).
pub mod flags {
    /// The translation list is written at the octoword offset `xlt_offset` (with
    /// `xlt_offset_47_16`) of the key's table, not at its start.
    pub const TRANSLATION_OFFSET_EN: u8 = 1 << 4;
    /// Fail unless the key is free (`MLX5_UMR_CHECK_NOT_FREE`: "fail if not free").
    pub const CHECK_NOT_FREE: u8 = 1 << 5;
    /// Fail if the key is free (`MLX5_UMR_CHECK_FREE`: "fail if free").
    pub const CHECK_FREE: u8 = 2 << 5;
    /// Mask of the two free-state check bits.
    pub const CHECK_MASK: u8 = 3 << 5;
    /// Fail unless the key is bound to the posting QP (`MLX5_WQE_UMR_CTRL_FLAG_CHECK_QPN` in
    /// rdma-core's `mlx5dv.h`: libmlx5's IBV_WR_LOCAL_INV of a type 2 memory window).
    pub const CHECK_QPN: u8 = 1 << 3;
    /// The translation list follows the memory key segment inline.
    pub const INLINE: u8 = 1 << 7;
}

/// Bits of [`UmrCtrlSeg::mkey_mask`]: which fields of the memory key segment a UMR applies
/// (`MLX5_MKEY_MASK_*` in Linux `include/linux/mlx5/device.h`).
pub mod mkey_mask {
    /// `len` (and `length64`).
    pub const LEN: u64 = 1 << 0;
    /// `log_page_size` (the entity size).
    pub const PAGE_SIZE: u64 = 1 << 1;
    /// The sixth bit of the page size on devices with `umr_log_entity_size_5`.
    pub const PAGE_SIZE_5: u64 = 1 << 42;
    /// `start_addr`.
    pub const START_ADDR: u64 = 1 << 6;
    /// `pd`.
    pub const PD: u64 = 1 << 7;
    /// `en_rinval`.
    pub const EN_RINVAL: u64 = 1 << 8;
    /// `expected_sigerr_count` (signature keys).
    pub const EN_SIGERR: u64 = 1 << 9;
    /// `bsf_en` (signature keys).
    pub const BSF_EN: u64 = 1 << 12;
    /// `mkey_7_0`: the key's variant.
    pub const KEY: u64 = 1 << 13;
    /// `qpn`.
    pub const QPN: u64 = 1 << 14;
    /// `lr`.
    pub const LR: u64 = 1 << 17;
    /// `lw`.
    pub const LW: u64 = 1 << 18;
    /// `rr`.
    pub const RR: u64 = 1 << 19;
    /// `rw`.
    pub const RW: u64 = 1 << 20;
    /// `a` (remote atomics).
    pub const A: u64 = 1 << 21;
    /// `small_fence_on_rdma_read_response`.
    pub const SMALL_FENCE: u64 = 1 << 23;
    /// `relaxed_ordering_write`.
    pub const RELAXED_ORDERING_WRITE: u64 = 1 << 25;
    /// `free`.
    pub const FREE: u64 = 1 << 29;
    /// `relaxed_ordering_read`.
    pub const RELAXED_ORDERING_READ: u64 = 1 << 47;
}

layout! {
    /// The UMR control segment (`struct mlx5_wqe_umr_ctrl_seg`, Linux
    /// `include/linux/mlx5/qp.h`): what a UMR WQE changes in its key.
    pub struct UmrCtrlSeg("mlx5_wqe_umr_ctrl_seg", 48) {
        /// [`flags`] bits: inline list, translation offset, free-state check.
        flags: u8 @ 0x00 [0x8],
        /// Size of the translation list, in octowords (16 bytes).
        xlt_octowords: u16 @ 0x20 [0x10],
        /// Bits 15:0 of the octoword offset at which the list is written (with
        /// [`flags::TRANSLATION_OFFSET_EN`]); `bsf_octowords` for signature keys.
        xlt_offset: u16 @ 0x30 [0x10],
        /// [`mkey_mask`] bits: which fields of the memory key segment apply.
        mkey_mask: u64 @ 0x40 [0x40],
        /// Bits 47:16 of the octoword offset of the list.
        xlt_offset_47_16: u32 @ 0x80 [0x20],
    }
}

impl<T: AsRef<[u8]>> UmrCtrlSeg<T> {
    /// The whole octoword offset of the translation list: `xlt_offset_47_16 << 16 |
    /// xlt_offset`.
    pub fn translation_offset(&self) -> u64 {
        (u64::from(self.xlt_offset_47_16()) << 16) | u64::from(self.xlt_offset())
    }
}

layout! {
    /// A KLM entry (`struct mlx5_klm`): one piece of an indirect (KLM-mode) key, `byte_count`
    /// bytes at `address` through memory key `key`.
    pub struct Klm("mlx5_klm", 16) {
        /// Bytes of the piece.
        byte_count: u32 @ 0x00 [0x20],
        /// The memory key the piece is reached through (the reserved lkey for bus addresses).
        key: u32 @ 0x20 [0x20],
        /// Address of the piece in that key's address space.
        address: u64 @ 0x40 [0x40],
    }
}
