//! Signature (T10-DIF and CRC) offload, as Linux's mlx5_ib drives it for
//! `IB_MR_TYPE_INTEGRITY` keys (NVMe over RDMA and iSER with protection information) and
//! rdma-core's libmlx5 for `mlx5dv_wr_mkey_configure` with `mlx5dv_wr_set_mkey_sig_block`
//! (qp.c: `raw_data_size` all ones, CRC32 / CRC32C block signatures named above the PSV
//! index, SIG_ERR CQEs read for the failing domain):
//!
//! - the signature UMR (`set_sig_umr_wr` in wr.c) attaches to a `bsf_en` KLM key its memory
//!   (one KLM, or a strided block list of data and protection apart) and a BSF (`mlx5_set_bsf`);
//! - SET_PSV WQEs (`set_psv_wr`) load the two PSVs the BSF names;
//! - when the device reads the key (a SEND or WRITE gathered from it, a peer's READ served
//!   through it) the memory domain is the input and the wire domain the output; when it writes
//!   the key (a peer's WRITE, a READ response) the wire is the input. The input's protection is
//!   checked (`check_byte_mask`), the output's generated or copied (insert, strip, pass). The
//!   two domains may have different block sizes (512-byte wire blocks over 4 KiB memory
//!   blocks, or the reverse): each is then checked or generated in its own blocks, and
//!   nothing is copied;
//! - a failed check is reported as mlx5_ib's `mlx5_poll_one` expects it: a SIG_ERR CQE naming
//!   the key, which `get_sig_err_item` turns into what `ib_check_mr_status` returns. The data
//!   still moves; the ULP's check of the key refuses it.

mod dif;
mod guard;

pub(crate) use dif::{read, write};

use crate::engine::cq;
use crate::function::Core;
use crate::objects::signature::{Domain, Guard, Memory, SigKey};
pub(crate) use crate::objects::signature::{Pending, SigError};
use cxdirect_hw::cqe::{CqeOpcode, CQE_SIZE};
use cxdirect_hw::sig::{
    bfs, block_size, bsf_flags, inl, Bsf, BsfInl, SetPsvSeg, SigErrCqe, StrideBlockCtrl,
    StrideBlockEntry, BSF_OCTOWORDS, BSF_SIZE, DIF_SIZE, STRIDE_BLOCK_OP,
};
use cxdirect_hw::umr::{Klm, OCTOWORD};
use cxdirect_hw::wqe::WQE_DS;

/// Largest block the model protects (4160 bytes: `bs_selector` 4).
const MAX_BLOCK: u32 = 4160;

/// `raw_data_size` libmlx5 writes (`mlx5_umr_fill_sig_bsf`): the data is as long as the
/// memory the key's layout gives.
const RAW_SIZE_UNBOUNDED: u32 = u32::MAX;

/// The signature a UMR attaches, from its inline translation (`octowords` octowords at `at`
/// of `wqe`) and the BSF after it (`bsf_octowords`), in the key's protection domain `pd`.
/// `None` for anything mlx5_ib and libmlx5 do not build or the model does not model.
pub(crate) fn parse_umr(
    core: &Core,
    pd: u32,
    wqe: &[u8],
    at: usize,
    octowords: usize,
    bsf_octowords: u16,
) -> Option<SigKey> {
    if u32::from(bsf_octowords) != BSF_OCTOWORDS || octowords == 0 {
        return None;
    }
    let xlt = wqe.get(at..at + octowords * OCTOWORD)?;
    let bsf_at = at + octowords * OCTOWORD;
    let bsf = Bsf::new(wqe.get(bsf_at..bsf_at + BSF_SIZE)?).ok()?;
    if bsf.bsf_size_sbs() & bsf_flags::FULL == 0 {
        return None;
    }
    let psv_ok = |psv: u32| core.res.psvs.get(psv).is_some_and(|p| p.pd == pd);
    let mem = domain(&bsf.m_inl(), bsf.mem_bs_selector(), bsf.m_bfs_psv())?;
    let same = bsf.bsf_size_sbs() & bsf_flags::SAME_BLOCKS != 0;
    let wire_block = if same {
        bsf.mem_bs_selector()
    } else {
        bsf.wire_flags()
    };
    let wire = domain(&bsf.w_inl(), wire_block, bsf.w_bfs_psv())?;
    if [mem, wire].iter().flatten().any(|d| !psv_ok(d.psv)) {
        return None;
    }
    // The same-structure bit gives the wire the memory's blocks: it needs a memory domain
    // of the same kind (libmlx5's `mlx5_umr_block_crc_sbs` / `_t10dif_sbs` set it only so).
    if same
        && wire.is_some()
        && mem.is_none_or(|m| Some(m.guard.field()) != wire.map(|w| w.guard.field()))
    {
        return None;
    }
    let data_size = bsf.raw_data_size();
    let memory = memory(xlt)?;
    let data = match (mem, memory) {
        (
            Some(m),
            Memory::Strided {
                repeat,
                data_bytes,
                prot_bytes,
                ..
            },
        ) => {
            let whole = u64::from(repeat) * u64::from(m.block);
            if u32::from(data_bytes) != m.block
                || u64::from(prot_bytes) != m.guard.field()
                || (data_size != RAW_SIZE_UNBOUNDED && whole != u64::from(data_size))
            {
                return None;
            }
            whole
        }
        // A strided list carries protection in memory: it needs a memory domain.
        (None, Memory::Strided { .. }) => return None,
        // One KLM with a memory domain interleaves data and protection.
        (Some(m), Memory::Klm { bytes, .. }) => {
            let unit = u64::from(m.block) + m.guard.field();
            if u64::from(bytes) % unit != 0 {
                return None;
            }
            u64::from(bytes) / unit * u64::from(m.block)
        }
        (None, Memory::Klm { bytes, .. }) => u64::from(bytes),
    };
    // mlx5_ib's `raw_data_size` is the data the memory holds; libmlx5's is all ones.
    if data_size != RAW_SIZE_UNBOUNDED
        && matches!(memory, Memory::Klm { .. })
        && mem.is_some()
        && data != u64::from(data_size)
    {
        return None;
    }
    // Memory and wire may have different block sizes (`mlx5_set_bsf` and libmlx5's
    // `mlx5_umr_fill_sig_bsf` leave the same-structure bit clear and give each domain its own
    // selector): the data is then whole blocks of both.
    if wire.is_some_and(|w| data % u64::from(w.block) != 0) {
        return None;
    }
    Some(SigKey {
        memory,
        mem,
        wire,
        check_mask: bsf.check_byte_mask(),
        copy_mask: if same { bsf.wire_flags() } else { 0 },
        same_blocks: same && mem.is_some() && wire.is_some(),
        data_size,
        data: if mem.is_some() || wire.is_some() {
            data
        } else {
            0
        },
        bsf: wqe.get(bsf_at..bsf_at + BSF_SIZE)?.try_into().ok()?,
    })
}

/// One domain of the BSF: `None` (the outer option) when malformed or not modelled,
/// `Some(None)` when the domain carries no protection. A CRC signature is named by the
/// block format selector above the domain's PSV index (`mlx5_umr_crc_bfs`), T10-DIF by the
/// domain's valid inline section; never both.
fn domain(section: &BsfInl<&[u8]>, selector: u8, bfs_psv: u32) -> Option<Option<Domain>> {
    let format = (bfs_psv >> bfs::SHIFT) as u8;
    let psv = bfs_psv & bfs::PSV_MASK;
    let t10dif = section.vld_refresh() & inl::VALID != 0;
    if format != 0 {
        if t10dif {
            return None;
        }
        // libmlx5 always restarts the CRC each block (`MLX5_BFS_CRC_REPEAT_BIT`); a CRC over
        // the whole transfer is not modelled. CRC64-XP10 (`MLX5_BFS_CRC64_XP10_BASE`) is
        // refused: its polynomial is not public, and the model offers no `sig_crc64_xp10`.
        let guard = match format & !(bfs::REPEAT | bfs::SEED) {
            bfs::CRC32_BASE if format & bfs::REPEAT != 0 => Guard::Crc32,
            bfs::CRC32C_BASE if format & bfs::REPEAT != 0 => Guard::Crc32c,
            _ => return None,
        };
        let block = block_size(selector).filter(|b| *b <= MAX_BLOCK)?;
        return Some(Some(Domain {
            block,
            guard,
            seed_ones: format & bfs::SEED == 0,
            app_tag: 0,
            ref_tag: 0,
            inc_ref: false,
            app_escape: false,
            ref_escape: false,
            app_mask: 0,
            psv,
        }));
    }
    if !t10dif {
        return Some(None);
    }
    let guard = match section.sig_type() {
        inl::DIF_CRC => Guard::Crc,
        inl::DIF_IPCS => Guard::IpChecksum,
        _ => return None,
    };
    // A seeded guard (libmlx5's `bg` 0xffff) starts the CRC16 register at all ones; what a
    // seed does to an IP checksum is not public, so it is refused.
    let seed_ones = section.rp_inv_seed() & inl::SEED != 0;
    if seed_ones && guard == Guard::IpChecksum {
        return None;
    }
    let flags = section.dif_inc_ref_guard_check();
    // The 1 GiB selector names no block a ULP protects; the model works a block at a time.
    // 4048-byte blocks (selector 6, libmlx5's `MLX5DV_BLOCK_SIZE_4048`) are not offered.
    let block = block_size(selector).filter(|b| *b <= MAX_BLOCK)?;
    Some(Some(Domain {
        block,
        guard,
        seed_ones,
        app_tag: section.dif_apptag(),
        ref_tag: section.dif_reftag(),
        inc_ref: flags & inl::INC_REFTAG != 0,
        app_escape: flags & (inl::APPTAG_ESCAPE | inl::APPREF_ESCAPE) != 0,
        ref_escape: flags & inl::APPREF_ESCAPE != 0,
        app_mask: section.dif_app_bitmask_check(),
        psv,
    }))
}

/// The memory of a signature key: a strided block list (its head's `op` is
/// [`STRIDE_BLOCK_OP`], a value no memory key takes) of data then protection, or one KLM.
/// The list is padded to whole WQEBBs (mlx5_ib leaves the padding as the ring held it), so
/// only its first entry is read; the UMR's key length tells one KLM from several
/// (`crate::engine::umr`).
fn memory(xlt: &[u8]) -> Option<Memory> {
    let head = StrideBlockCtrl::new(xlt.get(..OCTOWORD)?).ok()?;
    if head.op() != STRIDE_BLOCK_OP {
        let klm = Klm::new(xlt.get(..OCTOWORD)?).ok()?;
        return Some(Memory::Klm {
            bytes: klm.byte_count(),
            key: klm.key(),
            va: klm.address(),
        });
    }
    if head.num_entries() != 2 {
        return None;
    }
    let data = StrideBlockEntry::new(xlt.get(OCTOWORD..2 * OCTOWORD)?).ok()?;
    let prot = StrideBlockEntry::new(xlt.get(2 * OCTOWORD..3 * OCTOWORD)?).ok()?;
    if !matches!(usize::from(prot.bcount()), 4 | DIF_SIZE)
        || head.bcount_per_cycle() != u32::from(data.bcount()) + u32::from(prot.bcount())
        || data.stride() < data.bcount()
        || prot.stride() < prot.bcount()
    {
        return None;
    }
    Some(Memory::Strided {
        repeat: head.repeat_count(),
        data_key: data.key(),
        data_va: data.va(),
        data_bytes: data.bcount(),
        data_stride: data.stride(),
        prot_key: prot.key(),
        prot_va: prot.va(),
        prot_bytes: prot.bcount(),
        prot_stride: prot.stride(),
    })
}

/// The signature of key `sig` over a new inline layout (`octowords` octowords at `at` of
/// `wqe`) and the BSF it already has: a UMR that loads a layout without BSF_EN on a signature
/// key (libmlx5's `umr_wqe_finalize` when the block state is SET: the configure changes the
/// memory and keeps the signature). `None` when the new memory does not fit the BSF.
pub(crate) fn relayout(
    core: &Core,
    pd: u32,
    sig: &SigKey,
    wqe: &[u8],
    at: usize,
    octowords: usize,
) -> Option<SigKey> {
    let mut buf = wqe.get(at..at + octowords * OCTOWORD)?.to_vec();
    buf.extend_from_slice(&sig.bsf);
    parse_umr(core, pd, &buf, 0, octowords, BSF_OCTOWORDS as u16)
}

/// Executes a SET_PSV WQE (`set_psv_wr`) posted by a QP of protection domain `pd`: the PSV
/// takes its new transient signature and reference tag. A PSV of another PD, or none, is a
/// local protection error.
pub(crate) fn set_psv(
    core: &mut Core,
    pd: u32,
    wqe: &[u8],
) -> Result<(), cxdirect_hw::cqe::CqeSyndrome> {
    let seg = wqe
        .get(WQE_DS..2 * WQE_DS)
        .and_then(|s| SetPsvSeg::new(s).ok())
        .ok_or(cxdirect_hw::cqe::CqeSyndrome::LocalQpOperation)?;
    let psv = core
        .res
        .psvs
        .get_mut(seg.psv_num())
        .filter(|p| p.pd == pd)
        .ok_or(cxdirect_hw::cqe::CqeSyndrome::LocalProtection)?;
    psv.transient_sig = seg.transient_sig();
    psv.ref_tag = seg.ref_tag();
    Ok(())
}

/// Applies what the data path left pending for QP `qpn`: the PSVs' new values, and a SIG_ERR
/// CQE on CQ `cqn` for each key whose error is armed (the parity of the errors it reported
/// differs from the `expected_sigerr_count` its last UMR set: one report a registration, as
/// mlx5_ib counts them in `mlx5_poll_one`). Returns whether the data path had found any
/// signature error, reported or not (a `drain_sigerr` QP drains after one).
pub(crate) fn report(core: &mut Core, qpn: u32, cqn: u32) -> bool {
    let pending = match core.sig_pending.get_mut() {
        Ok(p) => std::mem::take(p),
        Err(poisoned) => std::mem::take(poisoned.into_inner()),
    };
    for (index, sig, ref_tag) in pending.psvs {
        if let Some(psv) = core.res.psvs.get_mut(index) {
            psv.transient_sig = sig;
            psv.ref_tag = ref_tag;
        }
    }
    let found = !pending.errors.is_empty();
    for e in pending.errors {
        let Some(key) = core.res.mkeys.get_mut(e.mkey >> 8) else {
            continue;
        };
        let armed = (key.sigerr_count & 1 != 0) != key.sigerr_expected;
        if !armed {
            continue;
        }
        key.sigerr_count = key.sigerr_count.wrapping_add(1);
        let mut cqe = [0u8; CQE_SIZE];
        if let Ok(mut c) = SigErrCqe::new(&mut cqe[..64]) {
            c.set_expected_trans_sig(e.expected_sig)
                .set_actual_trans_sig(e.actual_sig)
                .set_expected_reftag(e.expected_ref)
                .set_actual_reftag(e.actual_ref)
                .set_syndrome(e.syndrome)
                .set_mkey(e.mkey)
                .set_err_offset(e.offset)
                .set_domain(e.domain)
                .set_qpn(qpn & 0x00ff_ffff)
                .set_op_own((CqeOpcode::SigErr as u8) << 4);
        }
        if cq::post(core, cqn, &mut cqe).is_err() {
            crate::counters::add(&core.counters.completions_lost, 1);
        }
    }
    found
}

/// Whether the key `mkey` names carries a signature (a UMR attached a BSF to it).
pub(crate) fn is_signature_key(core: &Core, mkey: u32) -> bool {
    core.res
        .mkeys
        .get(mkey >> 8)
        .is_some_and(|k| k.sig.is_some() && k.variant == mkey as u8)
}
