//! Signature (T10-DIF integrity) offload: PSVs (protection signature variables, CREATE_PSV /
//! DESTROY_PSV), the SET_PSV WQE segment, the block signature format (BSF) a signature UMR
//! attaches to a KLM key, the strided block list of a signature key's memory, and the SIG_ERR
//! CQE. Linux's mlx5_ib drives them for `IB_MR_TYPE_INTEGRITY` keys: `mlx5_alloc_integrity_descs`
//! (mr.c), `set_sig_umr_wr` / `mlx5_set_bsf` / `set_psv_wr` (wr.c), `get_sig_err_item` (cq.c);
//! the C structures are in `include/linux/mlx5/qp.h` and `device.h`.

use crate::layout;

/// BSF size in octowords a signature key carries (`MLX5_MKEY_BSF_OCTO_SIZE`): basic,
/// extended and the two inline sections, 64 bytes.
pub const BSF_OCTOWORDS: u32 = 4;
/// Bytes of a [`Bsf`].
pub const BSF_SIZE: usize = 64;
/// Bytes of a T10-DIF protection field (`MLX5_DIF_SIZE`): guard (2), application tag (2),
/// reference tag (4).
pub const DIF_SIZE: usize = 8;
/// [`StrideBlockCtrl::op`] of a strided block list (`MLX5_STRIDE_BLOCK_OP`).
pub const STRIDE_BLOCK_OP: u32 = 0x400;
/// PSVs one CREATE_PSV makes at most (`MLX5_MAX_PSVS`).
pub const MAX_PSVS: u8 = 4;

/// [`Bsf::bsf_size_sbs`] bits.
pub mod bsf_flags {
    /// Basic, extended and inline sections (`1 << 7`, "Basic + Extended + Inline").
    pub const FULL: u8 = 1 << 7;
    /// Memory and wire share one block structure (`1 << 4`, "Same block structure"): the
    /// wire byte is [`copy`](super::copy) mask, not a block size selector.
    pub const SAME_BLOCKS: u8 = 1 << 4;
}

/// Protection field bytes, one bit per byte (the guard's first byte is the most significant):
/// [`Bsf::check_byte_mask`] and the wire copy mask (`MLX5_CPY_*_MASK`, `IB_SIG_CHECK_*`).
pub mod copy {
    /// The two guard bytes.
    pub const GUARD: u8 = 0xc0;
    /// The two application tag bytes.
    pub const APP_TAG: u8 = 0x30;
    /// The four reference tag bytes.
    pub const REF_TAG: u8 = 0x0f;
}

/// Block size selectors (`bs_selector` in wr.c): 512, 520, 4096, 4160 bytes, 1 GiB.
pub fn block_size(selector: u8) -> Option<u32> {
    match selector {
        1 => Some(512),
        2 => Some(520),
        3 => Some(4096),
        4 => Some(4160),
        5 => Some(1 << 30),
        _ => None,
    }
}

/// [`BsfInl`] values.
pub mod inl {
    /// `vld_refresh`: the inline section is valid (`MLX5_BSF_INL_VALID`).
    pub const VALID: u16 = 1 << 15;
    /// `vld_refresh`: the tags refresh per transfer (`MLX5_BSF_REFRESH_DIF`).
    pub const REFRESH_DIF: u16 = 1 << 14;
    /// `rp_inv_seed`: the block repeats (`MLX5_BSF_REPEAT_BLOCK`).
    pub const REPEAT_BLOCK: u8 = 1 << 7;
    /// `rp_inv_seed`: the guard is seeded with all ones (`MLX5_BSF_SEED`, libmlx5's
    /// `mlx5_umr_fill_inl_bsf_t10dif` when `bg` is not 0; `bg` is 0 or 0xffff).
    pub const SEED: u8 = 1 << 3;
    /// `sig_type`: a CRC16 T10-DIF guard (`MLX5_DIF_CRC`).
    pub const DIF_CRC: u8 = 0x1;
    /// `sig_type`: an IP checksum guard (`MLX5_DIF_IPCS`).
    pub const DIF_IPCS: u8 = 0x2;
    /// `dif_inc_ref_guard_check`: the reference tag grows by one a block
    /// (`MLX5_BSF_INC_REFTAG`, `ref_remap`).
    pub const INC_REFTAG: u8 = 1 << 6;
    /// `dif_inc_ref_guard_check`: no check of a block whose application tag is 0xffff
    /// (`MLX5_BSF_APPTAG_ESCAPE`).
    pub const APPTAG_ESCAPE: u8 = 0x1;
    /// `dif_inc_ref_guard_check`: no check of a block whose application tag is 0xffff and
    /// reference tag 0xffffffff (`MLX5_BSF_APPREF_ESCAPE`).
    pub const APPREF_ESCAPE: u8 = 0x2;
}

/// Block format selectors: the top byte of a BSF's `m_bfs_psv` / `w_bfs_psv` above the PSV
/// index, naming a CRC signature (libmlx5's `mlx5_umr_crc_bfs`; 0 for T10-DIF, whose inline
/// section describes it).
pub mod bfs {
    /// Bit where the selector starts (`MLX5_BFS_SHIFT`).
    pub const SHIFT: u32 = 24;
    /// The PSV index below it (`MLX5_BSF_PSV_INDEX_MASK`).
    pub const PSV_MASK: u32 = 0x00ff_ffff;
    /// CRC32 (`MLX5_BFS_CRC32_BASE`).
    pub const CRC32_BASE: u8 = 0x20;
    /// CRC32C (`MLX5_BFS_CRC32C_BASE`).
    pub const CRC32C_BASE: u8 = 0x40;
    /// CRC64-XP10 (`MLX5_BFS_CRC64_XP10_BASE`).
    pub const CRC64_XP10_BASE: u8 = 0x50;
    /// The CRC starts over each block (`MLX5_BFS_CRC_REPEAT_BIT`; libmlx5 always sets it).
    pub const REPEAT: u8 = 0x2;
    /// The seed is zero (`MLX5_BFS_CRC_SEED_BIT`); clear: all ones.
    pub const SEED: u8 = 0x1;
}

/// [`SigErrCqe::domain`] values (`MLX5_SIGERR_CQE_DOMAIN_*` of libmlx5's verbs.c).
pub mod sig_err_domain {
    /// The wire domain failed its check.
    pub const WIRE: u8 = 0;
    /// The memory domain failed its check.
    pub const MEMORY: u8 = 1;
}

/// [`SigErrCqe::syndrome`] bits (`GUARD_ERR`, `APPTAG_ERR`, `REFTAG_ERR` in cq.c).
pub mod sig_err {
    /// The guard did not match.
    pub const GUARD: u16 = 1 << 13;
    /// The application tag did not match.
    pub const APP_TAG: u16 = 1 << 12;
    /// The reference tag did not match.
    pub const REF_TAG: u16 = 1 << 11;
}

layout! {
    /// CREATE_PSV input: `num_psv` PSVs in protection domain `pd` (`mlx5_core_create_psv`).
    pub struct CreatePsvIn("create_psv_in", 0x10) {
        /// Command opcode: [`Opcode::CreatePsv`](crate::cmd::Opcode::CreatePsv).
        opcode: u16 @ 0x0 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// PSVs to create, 1 to [`MAX_PSVS`].
        num_psv: u8 @ 0x40 [0x4],
        /// Their protection domain.
        pd: u32 @ 0x48 [0x18],
    }
}

layout! {
    /// CREATE_PSV output: the new PSVs' numbers, in order.
    pub struct CreatePsvOut("create_psv_out", 0x20) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x0 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
        /// First PSV.
        psv0_index: u32 @ 0x88 [0x18],
        /// Second PSV.
        psv1_index: u32 @ 0xa8 [0x18],
        /// Third PSV.
        psv2_index: u32 @ 0xc8 [0x18],
        /// Fourth PSV.
        psv3_index: u32 @ 0xe8 [0x18],
    }
}

layout! {
    /// DESTROY_PSV input (`mlx5_core_destroy_psv`).
    pub struct DestroyPsvIn("destroy_psv_in", 0x10) {
        /// Command opcode: [`Opcode::DestroyPsv`](crate::cmd::Opcode::DestroyPsv).
        opcode: u16 @ 0x0 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The PSV.
        psvn: u32 @ 0x48 [0x18],
    }
}

layout! {
    /// The SET_PSV segment (`struct mlx5_seg_set_psv`), after the control segment of a
    /// [`SET_PSV`](crate::wqe::opcode::SET_PSV) WQE: the PSV's new transient signature
    /// (guard << 16 | application tag) and reference tag.
    pub struct SetPsvSeg("mlx5_seg_set_psv", 0x10) {
        /// The PSV.
        psv_num: u32 @ 0x0 [0x20],
        /// Syndrome (0 from mlx5_ib).
        syndrome: u16 @ 0x20 [0x10],
        /// Status (0 from mlx5_ib).
        status: u16 @ 0x30 [0x10],
        /// Guard (high 16 bits) and application tag (low 16 bits).
        transient_sig: u32 @ 0x40 [0x20],
        /// Reference tag.
        ref_tag: u32 @ 0x60 [0x20],
    }
}

layout! {
    /// An inline section of a BSF (`struct mlx5_bsf_inl`): one domain's T10-DIF tags, as
    /// `mlx5_fill_inl_bsf` fills it.
    pub struct BsfInl("mlx5_bsf_inl", 0x10) {
        /// [`inl::VALID`] and [`inl::REFRESH_DIF`].
        vld_refresh: u16 @ 0x0 [0x10],
        /// Application tag of the first block.
        dif_apptag: u16 @ 0x10 [0x10],
        /// Reference tag of the first block.
        dif_reftag: u32 @ 0x20 [0x20],
        /// Guard kind: [`inl::DIF_CRC`] or [`inl::DIF_IPCS`].
        sig_type: u8 @ 0x40 [0x8],
        /// [`inl::REPEAT_BLOCK`].
        rp_inv_seed: u8 @ 0x48 [0x8],
        /// [`inl::INC_REFTAG`], [`inl::APPTAG_ESCAPE`], [`inl::APPREF_ESCAPE`].
        dif_inc_ref_guard_check: u8 @ 0x68 [0x8],
        /// Bits of the application tag checked.
        dif_app_bitmask_check: u16 @ 0x70 [0x10],
    }
}

layout! {
    /// The block signature format (`struct mlx5_bsf`) a signature UMR writes after the key's
    /// translation: how memory and wire protect each block, as `mlx5_set_bsf` fills it.
    pub struct Bsf("mlx5_bsf", 0x40) {
        /// [`bsf_flags`].
        bsf_size_sbs: u8 @ 0x0 [0x8],
        /// Protection bytes checked in the input domain ([`copy`] bits).
        check_byte_mask: u8 @ 0x8 [0x8],
        /// Wire: the copy mask ([`copy`] bits) with [`bsf_flags::SAME_BLOCKS`], else its block
        /// size selector ([`block_size`]).
        wire_flags: u8 @ 0x10 [0x8],
        /// Memory: its block size selector ([`block_size`]).
        mem_bs_selector: u8 @ 0x18 [0x8],
        /// Bytes of data (without protection).
        raw_data_size: u32 @ 0x20 [0x20],
        /// The wire domain's PSV.
        w_bfs_psv: u32 @ 0x40 [0x20],
        /// The memory domain's PSV.
        m_bfs_psv: u32 @ 0x60 [0x20],
    }
    nested {
        /// The wire domain's tags.
        w_inl: BsfInl @ 0x100,
        /// The memory domain's tags.
        m_inl: BsfInl @ 0x180,
    }
}

layout! {
    /// The head of a strided block list (`struct mlx5_stride_block_ctrl_seg`): a signature
    /// key's memory as `repeat_count` cycles of its entries, as `set_sig_data_segment` builds
    /// it when data and protection lie apart.
    pub struct StrideBlockCtrl("mlx5_stride_block_ctrl_seg", 0x10) {
        /// Bytes of one cycle (block + protection).
        bcount_per_cycle: u32 @ 0x0 [0x20],
        /// [`STRIDE_BLOCK_OP`].
        op: u32 @ 0x20 [0x20],
        /// Cycles.
        repeat_count: u32 @ 0x40 [0x20],
        /// Entries that follow (2 from mlx5_ib: data, then protection).
        num_entries: u16 @ 0x70 [0x10],
    }
}

layout! {
    /// One entry of a strided block list (`struct mlx5_stride_block_entry`): `bcount` bytes a
    /// cycle at `va` through `key`, `stride` bytes further each cycle.
    pub struct StrideBlockEntry("mlx5_stride_block_entry", 0x10) {
        /// Bytes the address advances a cycle.
        stride: u16 @ 0x0 [0x10],
        /// Bytes taken a cycle.
        bcount: u16 @ 0x10 [0x10],
        /// The memory key the bytes are reached through.
        key: u32 @ 0x20 [0x20],
        /// Address of the first cycle's bytes.
        va: u64 @ 0x40 [0x40],
    }
}

layout! {
    /// The SIG_ERR CQE (`struct mlx5_sig_err_cqe`, opcode
    /// [`CqeOpcode::SigErr`](crate::cqe::CqeOpcode::SigErr)): a signature key's block failed
    /// its check. mlx5_ib's `get_sig_err_item` reads it into the key's error record, which
    /// `ib_check_mr_status` returns.
    pub struct SigErrCqe("mlx5_sig_err_cqe", 0x40) {
        /// Expected guard (high 16 bits) and application tag.
        expected_trans_sig: u32 @ 0x80 [0x20],
        /// Guard and application tag found.
        actual_trans_sig: u32 @ 0xa0 [0x20],
        /// Expected reference tag.
        expected_reftag: u32 @ 0xc0 [0x20],
        /// Reference tag found.
        actual_reftag: u32 @ 0xe0 [0x20],
        /// [`sig_err`] bits.
        syndrome: u16 @ 0x100 [0x10],
        /// Signature type: 0 a block signature (`MLX5_SIGERR_CQE_SIG_TYPE_BLOCK`); libmlx5
        /// reads it (low three bits) where `sigerr_domain_and_sig_type` is offered.
        sig_type: u8 @ 0x110 [0x8],
        /// The failing domain ([`sig_err_domain`], low three bits).
        domain: u8 @ 0x118 [0x8],
        /// The signature key.
        mkey: u32 @ 0x120 [0x20],
        /// Byte offset in the key (wire domain) of the failing block.
        err_offset: u64 @ 0x140 [0x40],
        /// The QP that moved the data.
        qpn: u32 @ 0x1c0 [0x20],
        /// Opcode (high nibble) and owner bit (bit 0).
        op_own: u8 @ 0x1f8 [0x8],
    }
}

/// The CRC16 T10-DIF guard of `data` (polynomial 0x8BB7, initial value 0, not reflected,
/// no final XOR: the crc catalogue's CRC-16/T10-DIF, whose check value over "123456789" is
/// 0xD0DB).
pub fn crc16_t10dif(data: &[u8]) -> u16 {
    crc16_t10dif_from(0, data)
}

/// The CRC16 T10-DIF of `data` with its register started at `initial` instead of 0 (libmlx5's
/// seeded T10-DIF guard, `bg` 0xffff, starts it at all ones); otherwise as [`crc16_t10dif`].
pub fn crc16_t10dif_from(initial: u16, data: &[u8]) -> u16 {
    let mut crc = initial;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x8bb7
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The CRC32C (Castagnoli, RFC 3720: polynomial 0x1EDC6F41, reflected) of `data` with its
/// register started at `seed` and the result inverted: `crc32c(0xffff_ffff, ..)` is the crc
/// catalogue's CRC-32/ISCSI, whose check value over "123456789" is 0xE3069283.
pub fn crc32c(seed: u32, data: &[u8]) -> u32 {
    let mut crc = seed;
    for &byte in data {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82f6_3b78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// The IP checksum guard of `data` (`IB_T10DIF_CSUM`): the ones' complement of the ones'
/// complement sum of its big-endian 16-bit words (an odd last byte padded with zero), as
/// Linux's `ip_compute_csum` the block layer uses for it.
pub fn ip_checksum(data: &[u8]) -> u16 {
    let mut sum = 0u32;
    for pair in data.chunks(2) {
        let word = u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]);
        sum += u32::from(word);
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_t10dif_matches_the_catalogue_check_value() {
        assert_eq!(crc16_t10dif(b"123456789"), 0xd0db);
        assert_eq!(crc16_t10dif(&[]), 0);
    }

    #[test]
    fn crc32c_matches_the_catalogue_check_value() {
        assert_eq!(crc32c(0xffff_ffff, b"123456789"), 0xe306_9283);
    }

    #[test]
    fn ip_checksum_of_zeros_is_all_ones() {
        assert_eq!(ip_checksum(&[0; 512]), 0xffff);
        assert_eq!(ip_checksum(&[0x12, 0x34, 0x56]), !(0x1234u16 + 0x5600));
    }
}
