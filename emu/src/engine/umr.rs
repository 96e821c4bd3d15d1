//! UMR (user-mode memory registration) WQEs: a send WQE of opcode `UMR` that changes a memory
//! key in place, posted on the REG_UMR QP Linux's mlx5_ib opens for itself (enable, disable,
//! load translations, change PD and access: `mlx5r_umr_post_send` in
//! `drivers/infiniband/hw/mlx5/umr.c`) and on a kernel ULP's RC QP (fast registration and
//! local invalidation: `set_reg_wr`, `set_linv_wr` in `wr.c`), and on a user's QP by libmlx5
//! (a memory window's bind, unbind and local invalidation, `set_bind_wr` in rdma-core's
//! `providers/mlx5/qp.c`, held to the bind rules of [`window`](super::window); the layout of
//! an mlx5dv indirect key, `_mlx5dv_wr_mkey_configure`, as a KLM list or a repeated block,
//! [`repeat`](crate::objects::repeat)).
//!
//! The WQE is a control segment (its `imm` names the key), a [`UmrCtrlSeg`], the new key fields
//! as a memory key context, then the translation list, inline or through one data segment.
//! Every check runs before anything changes: a refused UMR leaves the key as it was, and the
//! requester reports it with an error CQE.

use crate::function::Core;
use crate::objects::UNBOUND_QPN;
use crate::translate::{entries_per_octoword, mtt_page_ok, translate};
use cxdirect_hw::cqe::CqeSyndrome;
use cxdirect_hw::mkey::{
    Mkc, MKC_ACCESS_MODE_KLM, MKC_ACCESS_MODE_KSM, MKC_ACCESS_MODE_MTT, MKC_ACCESS_MODE_PA,
};
use cxdirect_hw::umr::{
    flags, mkey_mask, UmrCtrlSeg, OCTOWORD, UMR_CTRL_SEG_SIZE, UMR_MKEY_SEG_SIZE,
};
use cxdirect_hw::wqe::{DataSeg, WQE_DS};

/// Where a UMR WQE's segments start: after the control segment.
const UMR_CTRL_AT: usize = WQE_DS;
/// Where the memory key segment starts.
const MKEY_AT: usize = UMR_CTRL_AT + UMR_CTRL_SEG_SIZE;
/// Where the translation list (inline) or its data segment starts.
const XLT_AT: usize = MKEY_AT + UMR_MKEY_SEG_SIZE;

/// Mask bits the model applies; the others are refused.
const APPLIED: u64 = mkey_mask::LEN
    | mkey_mask::EN_SIGERR
    | mkey_mask::BSF_EN
    | mkey_mask::PAGE_SIZE
    | mkey_mask::START_ADDR
    | mkey_mask::PD
    | mkey_mask::EN_RINVAL
    | mkey_mask::KEY
    | mkey_mask::QPN
    | mkey_mask::LR
    | mkey_mask::LW
    | mkey_mask::RR
    | mkey_mask::RW
    | mkey_mask::A
    | mkey_mask::SMALL_FENCE
    | mkey_mask::RELAXED_ORDERING_WRITE
    | mkey_mask::FREE
    | mkey_mask::RELAXED_ORDERING_READ;

/// Who posts the UMR: the REG_UMR QP may change any key (Linux's own, on keys of every PD);
/// an RC QP only keys of its own protection domain.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Poster {
    /// The posting QP's protection domain (the data segment's lkey is checked in it).
    pub pd: u32,
    /// The REG_UMR QP: no PD check on the key.
    pub privileged: bool,
    /// The posting QP's number: what a type 2 window's bind names (`qpn` with the QPN mask
    /// bit) and its invalidation checks (`flags::CHECK_QPN`).
    pub qpn: u32,
}

/// The translation entries a UMR writes: MTT entries, KLMs, or KSM entries as the list's
/// bytes (read in place: a zap of an implicit ODP key is many megabytes of null entries).
enum Entries {
    Mtt(Vec<u64>),
    Klm(Vec<(u32, u32, u64)>),
    Ksm(Vec<u8>),
    /// A KLM key's repeated block layout (`mlx5dv_wr_mr_interleaved`), written from entry 0.
    Repeat(crate::objects::repeat::RepeatBlock),
}

/// Executes the UMR WQE `wqe` (its whole bytes, `ds` 16-byte units) whose control segment's
/// `imm` is `mkey`. Returns the error CQE syndrome of a refused one.
pub(crate) fn execute(
    core: &mut Core,
    poster: Poster,
    wqe: &[u8],
    mkey: u32,
) -> Result<(), CqeSyndrome> {
    let malformed = CqeSyndrome::LocalQpOperation;
    let protection = CqeSyndrome::LocalProtection;
    if wqe.len() < XLT_AT {
        return Err(malformed);
    }
    let ctrl = UmrCtrlSeg::new(&wqe[UMR_CTRL_AT..MKEY_AT]).map_err(|_| malformed)?;
    let seg = Mkc::new(&wqe[MKEY_AT..XLT_AT]).map_err(|_| malformed)?;
    let mask = ctrl.mkey_mask();
    if mask & !APPLIED != 0 {
        return Err(malformed);
    }
    let key = core.res.mkeys.get(mkey >> 8).ok_or(protection)?;
    // A window's bind refused for the window's state or PD, or for what it names, completes
    // with the bind error (`engine::window`); other keys' with a protection error.
    let bind = crate::engine::window::is_bind(poster.privileged, ctrl.flags(), key);
    let denied = if bind {
        CqeSyndrome::MwBind
    } else {
        protection
    };
    // With the KEY bit the UMR gives the key its new variant (fast registration names the key
    // by it); without, the WQE must name the key as it is.
    if mask & mkey_mask::KEY == 0 && key.variant != mkey as u8 {
        return Err(protection);
    }
    if !key.umr_en {
        return Err(protection);
    }
    if !poster.privileged && key.pd != poster.pd {
        return Err(denied);
    }
    match ctrl.flags() & flags::CHECK_MASK {
        flags::CHECK_NOT_FREE if !key.free => return Err(denied),
        flags::CHECK_FREE if key.free => return Err(denied),
        flags::CHECK_MASK => return Err(malformed),
        _ => {}
    }
    // libmlx5's IBV_WR_LOCAL_INV (`set_bind_wr` of an empty type 2 bind, for a window and
    // for any other key alike): a key bound to a QP (a type 2 window's bind) is invalidated
    // only from that QP; a key in use bound to none (`qpn` 0xffffff: an mlx5dv indirect or
    // signature key of `_mlx5dv_create_mkey` laid out by `_mlx5dv_wr_mkey_configure`, which
    // never names a QP) from any QP of its PD. A free key bound to none (a window never bound)
    // has nothing to invalidate.
    let bound_elsewhere = if key.qpn == UNBOUND_QPN {
        key.free
    } else {
        key.qpn != poster.qpn
    };
    if ctrl.flags() & flags::CHECK_QPN != 0 && bound_elsewhere {
        return Err(denied);
    }
    let mode = key.access_mode;
    let octowords = usize::from(ctrl.xlt_octowords());
    // A signature UMR (`set_sig_umr_wr`): on a key created with `bsf_en`, its memory and BSF
    // inline, `xlt_offset` holding the BSF's octowords.
    let sig = if mask & mkey_mask::BSF_EN != 0 && seg.bsf_en() {
        if !key.bsf_en || ctrl.flags() & flags::INLINE == 0 {
            return Err(malformed);
        }
        let bsf = ctrl.xlt_offset();
        let parsed = crate::signature::parse_umr(core, key.pd, wqe, XLT_AT, octowords, bsf);
        Some(parsed.ok_or(malformed)?)
    } else if mask & mkey_mask::BSF_EN == 0 && octowords != 0 && key.bsf_en {
        // A new layout on a key that keeps its BSF (libmlx5 reconfiguring a signature key
        // without `mlx5dv_wr_set_mkey_sig_block`): the signature stays, over the new memory.
        match key.sig.as_deref() {
            Some(old) => {
                if ctrl.flags() & flags::INLINE == 0 {
                    return Err(malformed);
                }
                let parsed = crate::signature::relayout(core, key.pd, old, wqe, XLT_AT, octowords);
                Some(parsed.ok_or(malformed)?)
            }
            None => None,
        }
    } else {
        None
    };
    // The key spans its one KLM (mlx5_ib's region, libmlx5's `reglen`): a longer key is a
    // list of several pieces (`mlx5dv_wr_set_mkey_layout_list` of more SGEs), which a
    // signature key does not model.
    if let Some(crate::objects::signature::Memory::Klm { bytes, .. }) = sig.map(|s| s.memory) {
        if mask & mkey_mask::LEN != 0 && seg.len() != u64::from(bytes) {
            return Err(malformed);
        }
    }
    let entries = if octowords == 0 || sig.is_some() {
        None
    } else {
        if mode == MKC_ACCESS_MODE_PA {
            return Err(malformed);
        }
        let offset = if ctrl.flags() & flags::TRANSLATION_OFFSET_EN != 0 {
            usize::try_from(ctrl.translation_offset()).map_err(|_| protection)?
        } else {
            0
        };
        let per = entries_per_octoword(mode);
        let first = offset.checked_mul(per).ok_or(protection)?;
        let count = octowords * per;
        // The list must fit the key's table: a UMR never grows a key.
        if first
            .checked_add(count)
            .is_none_or(|end| end > key.xlt_capacity)
        {
            return Err(protection);
        }
        let bytes = octowords * OCTOWORD;
        let list = read_list(core, poster, wqe, ctrl.flags(), bytes)?;
        if mode == MKC_ACCESS_MODE_KLM && crate::objects::repeat::is_repeat_block(&list) {
            // libmlx5's `umr_strided_seg_create`: the layout replaces the key's whole list.
            let block = crate::objects::repeat::parse(&list).filter(|_| first == 0);
            Some((first, Entries::Repeat(block.ok_or(malformed)?)))
        } else {
            Some((first, decode(mode, list)))
        }
    };
    // The new fields, checked before anything is applied.
    let pd = seg.pd();
    if mask & mkey_mask::PD != 0 && !core.res.pds.contains(pd) {
        return Err(protection);
    }
    let log_page = u32::from(seg.log_page_size());
    let sized = matches!(mode, MKC_ACCESS_MODE_MTT | MKC_ACCESS_MODE_KSM);
    if mask & mkey_mask::PAGE_SIZE != 0 && sized && !mtt_page_ok(log_page) {
        return Err(malformed);
    }
    if mask & mkey_mask::LEN != 0
        && !seg.length64()
        && (seg.len() >> crate::objects::limits::LOG_MAX_MRW_SZ != 0)
    {
        return Err(malformed);
    }
    // A key is bound to no QP, or (a type 2 window's bind, `set_umr_mkey_seg`) to the QP
    // posting the bind; never to another QP.
    let qpn = seg.qpn();
    if mask & mkey_mask::QPN != 0 && qpn != UNBOUND_QPN && (poster.privileged || qpn != poster.qpn)
    {
        return Err(malformed);
    }
    if bind {
        // A window binds one KLM (`set_umr_data_seg`), never a repeated block.
        if let Some((_, Entries::Repeat(_))) = &entries {
            return Err(CqeSyndrome::MwBind);
        }
        if let Some((_, Entries::Klm(list))) = &entries {
            let pick = |bit: u64, new: bool, old: bool| if mask & bit != 0 { new } else { old };
            let rights = crate::engine::window::Rights {
                local_write: pick(mkey_mask::LW, seg.lw(), key.local_write),
                remote_write: pick(mkey_mask::RW, seg.rw(), key.remote_write),
                atomic: pick(mkey_mask::A, seg.a(), key.atomic),
            };
            let window_pd = if mask & mkey_mask::PD != 0 {
                pd
            } else {
                key.pd
            };
            let window_len = if mask & mkey_mask::LEN != 0 {
                seg.len()
            } else {
                key.len
            };
            crate::engine::window::check_klms(core, window_pd, window_len, rights, list)
                .map_err(|_| CqeSyndrome::MwBind)?;
        }
    }
    let key = core.res.mkeys.get_mut(mkey >> 8).ok_or(protection)?;
    let (start, len) = (
        if mask & mkey_mask::START_ADDR != 0 {
            seg.start_addr()
        } else {
            key.start
        },
        if mask & mkey_mask::LEN != 0 {
            seg.len()
        } else {
            key.len
        },
    );
    let length64 = if mask & mkey_mask::LEN != 0 {
        seg.length64()
    } else {
        key.length64
    };
    if !length64 && start.checked_add(len).is_none() {
        return Err(malformed);
    }
    // mlx5_ib enables a key of no length (an implicit ODP key and its children) with
    // `length64` (`mlx5r_umr_final_update_xlt`): it then spans the address space from its
    // start, bounded by its translation table. A KLM key's pieces have lengths of their own.
    if length64 && mode == MKC_ACCESS_MODE_KLM {
        return Err(malformed);
    }
    // Written first: a KSM write past the entries the model stores is refused (an error CQE,
    // as a list past the key's table) before anything else changes.
    if let Some((first, Entries::Ksm(list))) = &entries {
        key.ksm
            .write_bytes(*first as u64, list)
            .map_err(|_| protection)?;
    }
    if let Some(sig) = sig {
        key.sig = Some(Box::new(sig));
        key.klm.clear();
        key.repeat = None;
    } else if mask & mkey_mask::BSF_EN != 0 || entries.is_some() {
        // New translations without a BSF: the key is a plain one again.
        key.sig = None;
    }
    if mask & mkey_mask::EN_SIGERR != 0 {
        key.sigerr_expected = seg.expected_sigerr_count();
    }
    if let Some((first, entries)) = entries {
        match entries {
            Entries::Mtt(list) => write_at(&mut key.mtt, first, &list),
            Entries::Klm(list) => {
                key.repeat = None;
                write_at(&mut key.klm, first, &list);
            }
            Entries::Repeat(block) => {
                key.klm.clear();
                key.repeat = Some(Box::new(block));
            }
            // Written above, before the key changed.
            Entries::Ksm(_) => {}
        }
    }
    (key.start, key.len, key.length64) = (start, len, length64);
    if mask & mkey_mask::PAGE_SIZE != 0 && sized {
        key.log_page = log_page;
    }
    if mask & mkey_mask::PD != 0 {
        key.pd = pd;
    }
    if mask & mkey_mask::EN_RINVAL != 0 {
        key.remote_invalidate = seg.en_rinval();
    }
    if mask & mkey_mask::KEY != 0 {
        key.variant = seg.mkey_7_0();
    }
    if mask & mkey_mask::QPN != 0 {
        key.qpn = qpn;
    }
    let access = [
        (mkey_mask::LR, &mut key.local_read, seg.lr()),
        (mkey_mask::LW, &mut key.local_write, seg.lw()),
        (mkey_mask::RR, &mut key.remote_read, seg.rr()),
        (mkey_mask::RW, &mut key.remote_write, seg.rw()),
        (mkey_mask::A, &mut key.atomic, seg.a()),
        (mkey_mask::FREE, &mut key.free, seg.free()),
    ];
    for (bit, field, value) in access {
        if mask & bit != 0 {
            *field = value;
        }
    }
    Ok(())
}

/// Writes `list` into `table` from entry `first`, growing it (with empty entries: pages never
/// loaded) as far as the list reaches; the caller checked the key's capacity.
fn write_at<T: Copy + Default>(table: &mut Vec<T>, first: usize, list: &[T]) {
    let end = first + list.len();
    if table.len() < end {
        table.resize(end, T::default());
    }
    table[first..end].copy_from_slice(list);
}

/// The `bytes` of translation list of `wqe`: inline after the memory key segment, or through
/// the data segment there (read through its lkey in the poster's PD).
fn read_list(
    core: &Core,
    poster: Poster,
    wqe: &[u8],
    umr_flags: u8,
    bytes: usize,
) -> Result<Vec<u8>, CqeSyndrome> {
    if umr_flags & flags::INLINE != 0 {
        let list = wqe
            .get(XLT_AT..XLT_AT + bytes)
            .ok_or(CqeSyndrome::LocalLength)?;
        return Ok(list.to_vec());
    }
    let seg = wqe
        .get(XLT_AT..XLT_AT + WQE_DS)
        .ok_or(CqeSyndrome::LocalQpOperation)?;
    let data = DataSeg::new(seg).map_err(|_| CqeSyndrome::LocalQpOperation)?;
    if (data.byte_count() as usize) < bytes {
        return Err(CqeSyndrome::LocalLength);
    }
    let mut list = vec![0u8; bytes];
    // The REG_UMR QP has no protection domain (Linux leaves its `pd` zero): its list pointer's
    // key is taken in its own PD (mlx5_ib points it through its UMR PD's `local_dma_lkey`).
    let pd = if poster.privileged {
        core.res
            .mkeys
            .get(data.lkey() >> 8)
            .map_or(poster.pd, |key| key.pd)
    } else {
        poster.pd
    };
    translate(
        core,
        data.lkey(),
        pd,
        data.addr(),
        bytes as u64,
        false,
        |iova, offset, n| {
            let at = offset as usize;
            core.dma_read(iova, &mut list[at..at + n as usize])
                .map_err(|_| crate::translate::KeyFault::Bounds)
        },
    )
    .map_err(|_| CqeSyndrome::LocalProtection)?;
    Ok(list)
}

/// The list's entries: big-endian 64-bit MTT entries, 16-byte KLMs, or the bytes of 16-byte
/// KSM entries (decoded as they are stored, `objects::ksm`).
fn decode(mode: u8, list: Vec<u8>) -> Entries {
    let word = |c: &[u8]| u64::from_be_bytes(c.try_into().unwrap_or([0; 8]));
    if mode == MKC_ACCESS_MODE_KSM {
        Entries::Ksm(list)
    } else if mode == MKC_ACCESS_MODE_KLM {
        Entries::Klm(
            list.chunks_exact(16)
                .map(|c| {
                    let head = word(&c[..8]);
                    ((head >> 32) as u32, head as u32, word(&c[8..]))
                })
                .collect(),
        )
    } else {
        Entries::Mtt(list.chunks_exact(8).map(word).collect())
    }
}
