//! Signature (T10-DIF) registration for the test host, as Linux's mlx5_ib builds it for an
//! `IB_MR_TYPE_INTEGRITY` key: CREATE_PSV (`mlx5_core_create_psv`), the `bsf_en` key of
//! `mlx5_alloc_integrity_descs`, and the WQEs of `handle_reg_mr_integrity` in
//! `drivers/infiniband/hw/mlx5/wr.c` (the signature UMR of `set_sig_umr_wr` with the memory of
//! `set_sig_data_segment` and the BSF of `mlx5_set_bsf` / `mlx5_fill_inl_bsf`, then SET_PSV of
//! `set_psv_wr` for memory and wire); and the T10-DIF protection a block carries.

use super::umr::FRWR_MASK;
use super::{CmdFail, Host, Sq};
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::mkey::{mkey_from_index, CreateMkeyIn, CreateMkeyOut, Mkc, MKC_ACCESS_MODE_KLM};
use cxdirect_hw::sig::{
    bsf_flags, copy, crc16_t10dif, inl, ip_checksum, Bsf, CreatePsvIn, CreatePsvOut, DestroyPsvIn,
    SetPsvSeg, StrideBlockCtrl, StrideBlockEntry, BSF_OCTOWORDS, STRIDE_BLOCK_OP,
};
use cxdirect_hw::umr::{flags, mkey_mask, Klm, UmrCtrlSeg};
use cxdirect_hw::wqe::{self, opcode, CtrlSeg};

/// CQE opcode of a signature error (`MLX5_CQE_SIG_ERR`).
pub const CQE_SIG_ERR: u8 = 0xc;

/// CREATE_PSV of `num` PSVs in `pd`, as `mlx5_core_create_psv`: the PSV numbers.
pub fn create_psv(h: &mut Host, pd: u32, num: u8) -> Result<Vec<u32>, CmdFail> {
    let mut input = Host::input(Opcode::CreatePsv, 0, 0x10);
    CreatePsvIn::new(&mut input[..])
        .expect("layout")
        .set_num_psv(num)
        .set_pd(pd);
    let out = h.exec(&input, 0x20)?;
    let out = CreatePsvOut::new(&out[..]).expect("layout");
    let all = [
        out.psv0_index(),
        out.psv1_index(),
        out.psv2_index(),
        out.psv3_index(),
    ];
    Ok(all[..usize::from(num)].to_vec())
}

/// DESTROY_PSV of `psv`, as `mlx5_core_destroy_psv`.
pub fn destroy_psv(h: &mut Host, psv: u32) -> Result<(), CmdFail> {
    let mut input = Host::input(Opcode::DestroyPsv, 0, 0x10);
    DestroyPsvIn::new(&mut input[..])
        .expect("layout")
        .set_psvn(psv);
    h.exec(&input, 0x10).map(|_| ())
}

/// CREATE_MKEY of the signature key as `mlx5_alloc_integrity_descs` builds it through
/// `_mlx5_alloc_mkey_descs` / `mlx5_set_umr_free_mkey`: access `mode` (KLM), four
/// descriptors, free, `umr_en`, lr and relaxed ordering, its PD, `bsf_en` with a BSF of
/// `bsf_octowords` octowords (four).
pub fn integrity_key(h: &mut Host, pd: u32, mode: u8, bsf_octowords: u32) -> Result<u32, CmdFail> {
    let mut input = Host::input(Opcode::CreateMkey, 0, 0x110);
    CreateMkeyIn::new(&mut input[..])
        .expect("layout")
        .memory_key_mkey_entry_mut()
        .set_lr(true)
        .set_relaxed_ordering_write(true)
        .set_relaxed_ordering_read(true)
        .set_pd(pd)
        .set_qpn(0xff_ffff)
        .set_free(true)
        .set_translations_octword_size(4)
        .set_access_mode_1_0(mode)
        .set_umr_en(true)
        .set_bsf_en(true)
        .set_bsf_octword_size(bsf_octowords)
        .set_mkey_7_0(0);
    let out = h.exec(&input, 16)?;
    Ok(mkey_from_index(
        CreateMkeyOut::new(&out[..]).expect("layout").mkey_index(),
        0,
    ))
}

/// One domain's T10-DIF attributes (`struct ib_t10_dif_domain`).
#[derive(Debug, Clone, Copy)]
pub struct Dif {
    /// CRC16 guard (`IB_T10DIF_CRC`); else IP checksum.
    pub crc: bool,
    /// Application tag.
    pub app_tag: u16,
    /// Reference tag of the first block.
    pub ref_tag: u32,
    /// The reference tag grows by one a block (types 1 and 2).
    pub ref_remap: bool,
    /// Data bytes a block (512 or 4096).
    pub pi_interval: u16,
}

/// T10-DIF type 1 over 512-byte blocks, CRC guards, reference tags from 0x1000.
pub const TYPE1: Dif = Dif {
    crc: true,
    app_tag: 0,
    ref_tag: 0x1000,
    ref_remap: true,
    pi_interval: 512,
};

/// Where the signature key's memory lies (`set_sig_data_segment`).
#[derive(Debug, Clone, Copy)]
pub enum SigMemory {
    /// No protection in memory: one KLM over the data.
    Data {
        /// The key the KLM names.
        key: u32,
        /// The data's address.
        va: u64,
    },
    /// Protection apart: the strided block list over data and protection.
    Apart {
        /// The key both entries name.
        key: u32,
        /// The data's address.
        data: u64,
        /// The protection's address (8 bytes a memory block).
        prot: u64,
    },
}

/// `bs_selector` of wr.c: the BSF's code for a block size.
pub fn bs_selector(block_size: u16) -> u8 {
    match block_size {
        512 => 1,
        520 => 2,
        4096 => 3,
        4160 => 4,
        _ => 0,
    }
}

/// `mlx5_fill_inl_bsf` into the inline section at byte `at` of the BSF.
pub fn fill_inl(bsf: &mut [u8], at: usize, d: Dif) {
    let s = &mut bsf[at..at + 16];
    s[0..2].copy_from_slice(&(inl::VALID | inl::REFRESH_DIF).to_be_bytes());
    s[2..4].copy_from_slice(&d.app_tag.to_be_bytes());
    s[4..8].copy_from_slice(&d.ref_tag.to_be_bytes());
    s[8] = if d.crc { inl::DIF_CRC } else { inl::DIF_IPCS };
    s[9] = inl::REPEAT_BLOCK;
    s[0xd] = if d.ref_remap { inl::INC_REFTAG } else { 0 };
    s[0xe..0x10].copy_from_slice(&0xffffu16.to_be_bytes());
}

/// What one `IB_WR_REG_MR_INTEGRITY` registers.
#[derive(Debug, Clone, Copy)]
pub struct Integrity {
    /// The signature key, its new variant in the low byte.
    pub key: u32,
    /// The QP's protection domain.
    pub pd: u32,
    /// The key's (memory, wire) PSVs.
    pub psvs: (u32, u32),
    /// Where its memory lies.
    pub memory: SigMemory,
    /// Data bytes (`data_len`, the BSF's `raw_data_size`).
    pub data_len: u32,
    /// The memory domain (none: data alone in memory).
    pub mem: Option<Dif>,
    /// The wire domain (none: data alone on the wire).
    pub wire: Option<Dif>,
    /// `check_mask` of the signature attributes.
    pub check_mask: u8,
    /// mlx5_ib's `sigerr_count`: its parity is the UMR's `expected_sigerr_count` (1 once
    /// `mlx5_alloc_integrity_descs` armed the first error).
    pub sigerr_count: u32,
}

/// The WQEs `handle_reg_mr_integrity` posts when the data is one buffer (no pi_mr: the PD's
/// DMA key) or a pi_mr's: the signature UMR (`set_sig_umr_wr`: CHECK_FREE ("fail if not
/// free") and inline, `sig_mkey_mask`, the key segment of `set_sig_mkey_segment`, the KLM or
/// strided list, the BSF of `mlx5_set_bsf`: same block structure with copy masks when both
/// domains have the same `pi_interval`, else each domain's own block size selector), then
/// SET_PSV for memory and for wire (`set_psv_wr`). `sq.pi` moves past them.
pub fn reg_mr_integrity(sq: &mut Sq, r: &Integrity) -> Vec<Vec<u8>> {
    let data_len = r.data_len;
    let mem_block = r.mem.map_or(512, |d| u32::from(d.pi_interval));
    let region = match r.memory {
        SigMemory::Data { .. } => data_len,
        SigMemory::Apart { .. } => data_len + data_len / mem_block * 8,
    };
    let mut w = vec![0u8; 256 + 64];
    CtrlSeg::new(&mut w[..16])
        .expect("layout")
        .set_opcode(opcode::UMR)
        .set_wqe_index(sq.pi)
        .set_qpn_or_sqn(sq.sqn)
        .set_ds(((16 + 48 + 64 + 64 + 64) / 16) as u8)
        .set_ce(wqe::completion::ALWAYS)
        .set_imm(r.key);
    UmrCtrlSeg::new(&mut w[16..64])
        .expect("layout")
        .set_flags(flags::INLINE | flags::CHECK_NOT_FREE)
        .set_xlt_octowords(4)
        .set_xlt_offset(BSF_OCTOWORDS as u16)
        .set_mkey_mask(
            // `sig_mkey_mask`: `frwr_mkey_mask(false)` and the signature bits.
            FRWR_MASK | mkey_mask::EN_SIGERR | mkey_mask::BSF_EN,
        );
    Mkc::new(&mut w[64..128])
        .expect("layout")
        .set_lr(true)
        .set_lw(true)
        .set_rr(true)
        .set_rw(true)
        .set_umr_en(true)
        .set_access_mode_1_0(MKC_ACCESS_MODE_KLM)
        .set_qpn(0xff_ffff)
        .set_mkey_7_0(r.key as u8)
        .set_en_rinval(true)
        .set_expected_sigerr_count(r.sigerr_count & 1 != 0)
        .set_bsf_en(true)
        .set_pd(r.pd)
        .set_len(u64::from(region))
        .set_translations_octword_size(4)
        .set_bsf_octword_size(BSF_OCTOWORDS);
    match r.memory {
        SigMemory::Data { key, va } => {
            Klm::new(&mut w[128..144])
                .expect("layout")
                .set_byte_count(data_len)
                .set_key(key)
                .set_address(va);
        }
        SigMemory::Apart { key, data, prot } => {
            StrideBlockCtrl::new(&mut w[128..144])
                .expect("layout")
                .set_bcount_per_cycle(mem_block + 8)
                .set_op(STRIDE_BLOCK_OP)
                .set_repeat_count(data_len / mem_block)
                .set_num_entries(2);
            StrideBlockEntry::new(&mut w[144..160])
                .expect("layout")
                .set_bcount(mem_block as u16)
                .set_key(key)
                .set_va(data)
                .set_stride(mem_block as u16);
            StrideBlockEntry::new(&mut w[160..176])
                .expect("layout")
                .set_bcount(8)
                .set_key(key)
                .set_va(prot)
                .set_stride(8);
        }
    }
    {
        let bsf = &mut w[192..256];
        let mut b = Bsf::new(&mut bsf[..]).expect("layout");
        b.set_bsf_size_sbs(bsf_flags::FULL)
            .set_check_byte_mask(r.check_mask)
            .set_raw_data_size(data_len);
        if let Some(md) = r.mem {
            b.set_mem_bs_selector(bs_selector(md.pi_interval))
                .set_m_bfs_psv(r.psvs.0);
        }
        if let Some(wd) = r.wire {
            b.set_w_bfs_psv(r.psvs.1);
            match r.mem {
                Some(md) if md.pi_interval == wd.pi_interval => {
                    let mut copy_mask = 0;
                    if md.crc == wd.crc {
                        copy_mask |= copy::GUARD;
                    }
                    if md.app_tag == wd.app_tag {
                        copy_mask |= copy::APP_TAG;
                    }
                    if md.ref_tag == wd.ref_tag {
                        copy_mask |= copy::REF_TAG;
                    }
                    b.set_bsf_size_sbs(bsf_flags::FULL | bsf_flags::SAME_BLOCKS)
                        .set_wire_flags(copy_mask);
                }
                _ => {
                    b.set_wire_flags(bs_selector(wd.pi_interval));
                }
            }
        }
        if let Some(md) = r.mem {
            fill_inl(bsf, 48, md);
        }
        if let Some(wd) = r.wire {
            fill_inl(bsf, 32, wd);
        }
    }
    w.truncate(256);
    sq.pi = sq.pi.wrapping_add(4);
    let mut out = vec![w];
    for (psv, d) in [(r.psvs.0, r.mem), (r.psvs.1, r.wire)] {
        let seed = d.map_or((0, 0), |d| (u32::from(d.app_tag), d.ref_tag));
        out.push(set_psv_wqe(sq, psv, seed, 0, 0));
    }
    out
}

/// One SET_PSV WQE at `sq.pi` (`sq.pi` moves past it) loading PSV `psv` with (transient
/// signature, reference tag) `seed`, completion mode `ce` and fence mode `fm`: mlx5_ib's
/// `set_psv_wr` posts it unsignalled and unfenced, libmlx5's `umr_finalize_and_set_psvs`
/// with the small initiator fence, the last one signalled.
pub fn set_psv_wqe(sq: &mut Sq, psv: u32, seed: (u32, u32), ce: u8, fm: u8) -> Vec<u8> {
    let mut p = vec![0u8; 64];
    CtrlSeg::new(&mut p[..16])
        .expect("layout")
        .set_opcode(opcode::SET_PSV)
        .set_wqe_index(sq.pi)
        .set_qpn_or_sqn(sq.sqn)
        .set_ds(2)
        .set_ce(ce)
        .set_fm(fm);
    SetPsvSeg::new(&mut p[16..32])
        .expect("layout")
        .set_psv_num(psv)
        .set_transient_sig(seed.0)
        .set_ref_tag(seed.1);
    sq.pi = sq.pi.wrapping_add(1);
    p
}

/// Posts `wqes` (already indexed, `sq.pi` past them) on `sq` of host `h` with one doorbell.
pub fn post_all(h: &Host, sq: &mut Sq, wqes: &[Vec<u8>]) {
    let pi = sq.pi;
    sq.pi = pi.wrapping_sub(wqes.iter().map(|w| (w.len() / 64) as u16).sum::<u16>());
    for w in wqes {
        h.post(sq, w, false);
    }
    assert_eq!(sq.pi, pi);
}

/// The wire view of `data`: each block of `d.pi_interval` bytes followed by its T10-DIF
/// field in `d`.
pub fn with_dif(data: &[u8], d: Dif) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, block) in data.chunks(usize::from(d.pi_interval)).enumerate() {
        out.extend_from_slice(block);
        out.extend_from_slice(&pi_of(block, d, i));
    }
    out
}

/// The T10-DIF field of block `i` (data `block`) in domain `d`: guard, application tag,
/// reference tag, big-endian.
pub fn pi_of(block: &[u8], d: Dif, i: usize) -> [u8; 8] {
    let guard = if d.crc {
        crc16_t10dif(block)
    } else {
        ip_checksum(block)
    };
    let reference = if d.ref_remap {
        d.ref_tag + i as u32
    } else {
        d.ref_tag
    };
    let mut pi = [0u8; 8];
    pi[0..2].copy_from_slice(&guard.to_be_bytes());
    pi[2..4].copy_from_slice(&d.app_tag.to_be_bytes());
    pi[4..8].copy_from_slice(&reference.to_be_bytes());
    pi
}

/// The transient signature a PSV holds after the block whose T10-DIF field is `pi`: its
/// guard and application tag, big-endian (the first word of [`pi_of`]).
pub fn trans_sig(pi: [u8; 8]) -> u32 {
    u32::from_be_bytes([pi[0], pi[1], pi[2], pi[3]])
}

/// The protection of every block of `data` in domain `d`, end to end (a strided list's
/// protection buffer).
pub fn protection_of(data: &[u8], d: Dif) -> Vec<u8> {
    data.chunks(usize::from(d.pi_interval))
        .enumerate()
        .flat_map(|(i, block)| pi_of(block, d, i))
        .collect()
}
