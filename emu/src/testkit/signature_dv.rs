//! Signature key configuration as rdma-core's libmlx5 builds it (`providers/mlx5/qp.c`):
//! `mlx5dv_wr_mkey_configure` (`mlx5_send_wr_mkey_configure`: inline, mask FREE, the key
//! segment's `qpn_mkey` 0xffffff00 | variant), `mlx5dv_wr_set_mkey_access_flags`,
//! `mlx5dv_wr_set_mkey_layout_list` / `_interleaved` (`umr_sg_list_create`,
//! `umr_strided_seg_create`: mask LEN, the list padded to whole WQEBBs) and
//! `mlx5dv_wr_set_mkey_sig_block` (`umr_wqe_finalize`: `mlx5_umr_fill_sig_bsf` with
//! `raw_data_size` 0xffffffff, BSF_ENABLE, the error count of `upd_mkc_sig_err_cnt`, the UMR's
//! completion suppressed and SET_PSV WQEs after it, `umr_finalize_and_set_psvs`).

use super::signature::set_psv_wqe;
use super::Sq;
use cxdirect_hw::mkey::Mkc;
use cxdirect_hw::sig::{
    bfs, bsf_flags, crc32c, inl, Bsf, StrideBlockCtrl, StrideBlockEntry, BSF_OCTOWORDS,
    STRIDE_BLOCK_OP,
};
use cxdirect_hw::umr::{flags, mkey_mask, Klm, UmrCtrlSeg};
use cxdirect_hw::wqe::{self, opcode, CtrlSeg};

/// A CRC kind (`enum mlx5dv_sig_crc_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrcKind {
    /// `MLX5DV_SIG_CRC_TYPE_CRC32`.
    Crc32,
    /// `MLX5DV_SIG_CRC_TYPE_CRC32C`.
    Crc32c,
    /// `MLX5DV_SIG_CRC_TYPE_CRC64_XP10`.
    Crc64Xp10,
}

/// One domain's signature (`struct mlx5dv_sig_block_domain`).
#[derive(Debug, Clone, Copy)]
pub enum DvSig {
    /// `MLX5DV_SIG_TYPE_T10DIF`.
    T10Dif {
        /// CRC guard (`MLX5DV_SIG_T10DIF_CRC`); else IP checksum.
        crc: bool,
        /// Guard seed (`bg`): 0 or 0xffff.
        bg: u16,
        /// Application tag.
        app_tag: u16,
        /// Reference tag of the first block.
        ref_tag: u32,
        /// `MLX5DV_SIG_T10DIF_FLAG_REF_REMAP`.
        ref_remap: bool,
    },
    /// `MLX5DV_SIG_TYPE_CRC`.
    Crc {
        /// Which CRC.
        kind: CrcKind,
        /// Seed: 0 or all ones.
        seed: u64,
    },
}

/// A signature domain with its block size selector (`bs_to_bs_selector`: 512 is 1, 520 is
/// 2, 4048 is 6, 4096 is 3, 4160 is 4).
#[derive(Debug, Clone, Copy)]
pub struct DvDomain {
    /// The signature.
    pub sig: DvSig,
    /// The block size selector.
    pub selector: u8,
}

/// The key's memory (`mlx5dv_wr_set_mkey_layout_*`).
#[derive(Debug, Clone)]
pub enum DvLayout {
    /// `mlx5dv_wr_set_mkey_layout_list`: (address, bytes, lkey) per SGE.
    List(Vec<(u64, u32, u32)>),
    /// `mlx5dv_wr_set_mkey_layout_interleaved`: `repeat` cycles of (address, bytes_count,
    /// bytes_skip, lkey).
    Interleaved(u32, Vec<(u64, u16, u16, u32)>),
}

/// One `mlx5dv_wr_mkey_configure` chain.
#[derive(Debug, Clone)]
pub struct DvConfigure {
    /// The key (`dv_mkey->lkey`).
    pub key: u32,
    /// Its (memory, wire) PSVs.
    pub psvs: (u32, u32),
    /// `IBV_ACCESS_*` as (local write, remote read, remote write, atomic).
    pub access: (bool, bool, bool, bool),
    /// The memory.
    pub layout: DvLayout,
    /// Memory domain.
    pub mem: Option<DvDomain>,
    /// Wire domain.
    pub wire: Option<DvDomain>,
    /// `check_mask`.
    pub check_mask: u8,
    /// libmlx5's `err_count` when `err_count_updated` (1 on a new key), else none.
    pub err_count: Option<u32>,
    /// With no domain: the key keeps the signature an earlier configure set (libmlx5's block
    /// state SET: no BSF_EN in the mask). Else a configure without a signature disables the
    /// BSF (BSF_EN in the mask, the key segment's bit clear).
    pub keep_signature: bool,
}

/// `mlx5_umr_crc_bfs`: the block format selector of a CRC, above the PSV index.
pub fn crc_bfs(kind: CrcKind, seed: u64) -> u32 {
    let base = match kind {
        CrcKind::Crc32 => bfs::CRC32_BASE,
        CrcKind::Crc32c => bfs::CRC32C_BASE,
        CrcKind::Crc64Xp10 => bfs::CRC64_XP10_BASE,
    };
    let seed_bit = if seed == 0 { bfs::SEED } else { 0 };
    u32::from(base | seed_bit | bfs::REPEAT) << bfs::SHIFT
}

/// `psv_transient_signature`: what SET_PSV loads for a domain.
pub fn transient_signature(sig: DvSig) -> u64 {
    match sig {
        DvSig::T10Dif {
            bg,
            app_tag,
            ref_tag,
            ..
        } => u64::from(bg) << 48 | u64::from(app_tag) << 32 | u64::from(ref_tag),
        DvSig::Crc {
            kind: CrcKind::Crc64Xp10,
            seed,
        } => seed,
        DvSig::Crc { seed, .. } => seed << 32,
    }
}

/// The translation list and the key length `mlx5_send_wr_set_mkey_layout` gives it.
fn layout_bytes(layout: &DvLayout) -> (Vec<u8>, u64) {
    match layout {
        DvLayout::List(sges) => {
            let mut xlt = vec![0u8; (sges.len() * 16).next_multiple_of(64)];
            let mut len = 0;
            for (i, &(addr, bytes, lkey)) in sges.iter().enumerate() {
                Klm::new(&mut xlt[i * 16..(i + 1) * 16])
                    .expect("layout")
                    .set_byte_count(bytes)
                    .set_key(lkey)
                    .set_address(addr);
                len += u64::from(bytes);
            }
            (xlt, len)
        }
        DvLayout::Interleaved(repeat, entries) => {
            let mut xlt = vec![0u8; ((entries.len() + 1) * 16).next_multiple_of(64)];
            let per_cycle: u32 = entries.iter().map(|e| u32::from(e.1)).sum();
            StrideBlockCtrl::new(&mut xlt[..16])
                .expect("layout")
                .set_bcount_per_cycle(per_cycle)
                .set_op(STRIDE_BLOCK_OP)
                .set_repeat_count(*repeat)
                .set_num_entries(entries.len() as u16);
            for (i, &(addr, count, skip, lkey)) in entries.iter().enumerate() {
                StrideBlockEntry::new(&mut xlt[(i + 1) * 16..(i + 2) * 16])
                    .expect("layout")
                    .set_va(addr)
                    .set_bcount(count)
                    .set_stride(count + skip)
                    .set_key(lkey);
            }
            (xlt, u64::from(per_cycle) * u64::from(*repeat))
        }
    }
}

/// `mlx5_umr_fill_inl_bsf_t10dif` into the inline section at byte `at` of `bsf`.
fn fill_t10dif(bsf: &mut [u8], at: usize, sig: DvSig) {
    let DvSig::T10Dif {
        crc,
        bg,
        app_tag,
        ref_tag,
        ref_remap,
    } = sig
    else {
        return;
    };
    let s = &mut bsf[at..at + 16];
    s[0..2].copy_from_slice(&(inl::VALID | inl::REFRESH_DIF).to_be_bytes());
    s[2..4].copy_from_slice(&app_tag.to_be_bytes());
    s[4..8].copy_from_slice(&ref_tag.to_be_bytes());
    s[9] = inl::REPEAT_BLOCK | if bg != 0 { inl::SEED } else { 0 };
    s[8] = if crc { inl::DIF_CRC } else { inl::DIF_IPCS };
    s[0xd] = if ref_remap { inl::INC_REFTAG } else { 0 };
    s[0xe..0x10].copy_from_slice(&0xffffu16.to_be_bytes());
}

/// The WQEs of one configure chain posted on `sq` (`sq.pi` moves past them): the UMR
/// (unsignalled when SET_PSVs follow) and, with a signature, SET_PSV of memory then wire,
/// the last one signalled.
pub fn mkey_configure(sq: &mut Sq, c: &DvConfigure) -> Vec<Vec<u8>> {
    let (xlt, len) = layout_bytes(&c.layout);
    let signed = c.mem.is_some() || c.wire.is_some();
    let bsf_len = if signed { 64 } else { 0 };
    let size = 16 + 48 + 64 + xlt.len() + bsf_len;
    let mut w = vec![0u8; size.next_multiple_of(64)];
    let mut mask = mkey_mask::FREE | mkey_mask::LEN;
    let (lw, rr, rw, atomic) = c.access;
    mask |= mkey_mask::LW | mkey_mask::RR | mkey_mask::RW | mkey_mask::A;
    if signed || !c.keep_signature {
        mask |= mkey_mask::BSF_EN;
    }
    if c.err_count.is_some() {
        mask |= mkey_mask::EN_SIGERR;
    }
    CtrlSeg::new(&mut w[..16])
        .expect("layout")
        .set_opcode(opcode::UMR)
        .set_wqe_index(sq.pi)
        .set_qpn_or_sqn(sq.sqn)
        .set_ds((size / 16) as u8)
        .set_ce(if signed { 0 } else { wqe::completion::ALWAYS })
        .set_fm(wqe::fence_mode::INITIATOR_SMALL)
        .set_imm(c.key);
    UmrCtrlSeg::new(&mut w[16..64])
        .expect("layout")
        .set_flags(flags::INLINE)
        .set_xlt_octowords((xlt.len() / 16) as u16)
        .set_xlt_offset(if signed { BSF_OCTOWORDS as u16 } else { 0 })
        .set_mkey_mask(mask);
    {
        let mut mk = Mkc::new(&mut w[64..128]).expect("layout");
        mk.set_qpn(0xff_ffff)
            .set_mkey_7_0(c.key as u8)
            .set_lw(lw)
            .set_rr(rr)
            .set_rw(rw)
            .set_a(atomic)
            .set_len(len)
            .set_bsf_en(signed);
        if let Some(count) = c.err_count {
            mk.set_expected_sigerr_count(count & 1 != 0);
        }
    }
    w[128..128 + xlt.len()].copy_from_slice(&xlt);
    if signed {
        let at = 128 + xlt.len();
        let bsf = &mut w[at..at + 64];
        fill_bsf(bsf, c);
    }
    let span = (w.len() / 64) as u16;
    sq.pi = sq.pi.wrapping_add(span);
    let mut out = vec![w];
    if !signed {
        return out;
    }
    let domains: Vec<(u32, DvSig)> = [(c.psvs.0, c.mem), (c.psvs.1, c.wire)]
        .into_iter()
        .filter_map(|(psv, d)| d.map(|d| (psv, d.sig)))
        .collect();
    let last = domains.len() - 1;
    for (i, (psv, sig)) in domains.into_iter().enumerate() {
        let ce = if i == last {
            wqe::completion::ALWAYS
        } else {
            0
        };
        let ts = transient_signature(sig);
        let seed = ((ts >> 32) as u32, ts as u32);
        out.push(set_psv_wqe(
            sq,
            psv,
            seed,
            ce,
            wqe::fence_mode::INITIATOR_SMALL,
        ));
    }
    out
}

/// `mlx5_umr_fill_sig_bsf` (no crypto BSF).
fn fill_bsf(bsf: &mut [u8], c: &DvConfigure) {
    let mut copy_mask = 0u8;
    let mut sbs = false;
    if let (Some(m), Some(wd)) = (c.mem, c.wire) {
        // `mlx5_umr_block_t10dif_sbs` / `mlx5_umr_block_crc_sbs`.
        match (m.sig, wd.sig) {
            (
                DvSig::T10Dif {
                    crc: mc,
                    bg: mb,
                    app_tag: ma,
                    ref_tag: mr,
                    ..
                },
                DvSig::T10Dif {
                    crc: wc,
                    bg: wb,
                    app_tag: wa,
                    ref_tag: wr,
                    ..
                },
            ) if m.selector == wd.selector => {
                sbs = true;
                if mc == wc && mb == wb {
                    copy_mask |= 0xc0;
                }
                if ma == wa {
                    copy_mask |= 0x30;
                }
                if mr == wr {
                    copy_mask |= 0x0f;
                }
            }
            (DvSig::Crc { kind: mk, .. }, DvSig::Crc { kind: wk, .. })
                if m.selector == wd.selector && mk == wk =>
            {
                sbs = true;
                copy_mask = if mk == CrcKind::Crc64Xp10 { 0xff } else { 0xf0 };
            }
            _ => {}
        }
    }
    let mut b = Bsf::new(&mut bsf[..]).expect("layout");
    b.set_bsf_size_sbs(bsf_flags::FULL | if sbs { bsf_flags::SAME_BLOCKS } else { 0 })
        .set_raw_data_size(u32::MAX)
        .set_check_byte_mask(c.check_mask);
    if let Some(m) = c.mem {
        let sel = match m.sig {
            DvSig::Crc { kind, seed } => crc_bfs(kind, seed),
            DvSig::T10Dif { .. } => 0,
        };
        b.set_m_bfs_psv(sel | (c.psvs.0 & 0xff_ffff))
            .set_mem_bs_selector(m.selector);
    }
    if let Some(wd) = c.wire {
        let sel = match wd.sig {
            DvSig::Crc { kind, seed } => crc_bfs(kind, seed),
            DvSig::T10Dif { .. } => 0,
        };
        b.set_w_bfs_psv(sel | (c.psvs.1 & 0xff_ffff))
            .set_wire_flags(if sbs { copy_mask } else { wd.selector });
    }
    if let Some(m) = c.mem {
        fill_t10dif(bsf, 48, m.sig);
    }
    if let Some(wd) = c.wire {
        fill_t10dif(bsf, 32, wd.sig);
    }
}

/// The CRC field a block carries in `kind` with `seed` (0 or all ones): big-endian, as
/// libmlx5's PSV and SIG_ERR CQE carry it. CRC32 is the Ethernet CRC-32 and CRC32C the
/// Castagnoli CRC, each with its register started at the seed and its result inverted.
pub fn crc_field(kind: CrcKind, seed: u64, block: &[u8]) -> Vec<u8> {
    let init = if seed == 0 { 0xffff_ffff } else { 0 };
    match kind {
        CrcKind::Crc32 => {
            let mut h = crc32fast::Hasher::new_with_initial(init);
            h.update(block);
            h.finalize().to_be_bytes().to_vec()
        }
        CrcKind::Crc32c => crc32c(!init, block).to_be_bytes().to_vec(),
        CrcKind::Crc64Xp10 => Vec::new(),
    }
}
