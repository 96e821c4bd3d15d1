//! Memory keys: CREATE/QUERY/DESTROY_MKEY and the translation the engines use to turn a
//! key-relative address into IOVAs, with protection-domain, bounds and access checks.

use super::pages::{release_context, store_new_context};
use super::transport::table_full;
use super::{bad_param, bad_res, input_as, output_as, CmdError, CmdResult, Core, Syndrome};
use crate::objects::Mkey;
use cxdirect_hw::mkey::{
    CreateMkeyIn, CreateMkeyOut, DestroyMkeyIn, QueryMkeyIn, QueryMkeyOut, QuerySpecialContextsOut,
    MKC_ACCESS_MODE_KLM, MKC_ACCESS_MODE_MTT, MKC_ACCESS_MODE_PA, MTT_ADDR_MASK, MTT_READ,
    MTT_WRITE,
};

/// The reserved lkey the model reports in QUERY_SPECIAL_CONTEXTS: addresses through it are
/// IOVAs, checked only by the IOMMU. Memory key index 2 is never handed out, and the value differs
/// from the invalid lkey (0x100) that ends receive scatter lists.
pub const RESERVED_LKEY: u32 = 0x200;

/// QUERY_SPECIAL_CONTEXTS: the reserved lkey (no dump-fill or null key is modelled: 0).
pub(crate) fn query_special_contexts(output: &mut [u8]) -> CmdResult {
    output_as!(QuerySpecialContextsOut<&mut [u8]>, output).set_resd_lkey(RESERVED_LKEY);
    Ok(())
}

/// Why a memory access through a key was refused: the engines turn this into an error CQE
/// with the local protection syndrome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyFault {
    /// No key with that index and variant.
    NoKey,
    /// The key belongs to another protection domain.
    WrongPd,
    /// The key does not grant the access.
    Access,
    /// The range is outside the key.
    Bounds,
}

/// Translation entries a key may hold at most (MTT entries or KLMs): 2^22 MTT entries map
/// 16 GiB in 4 KiB pages. A larger table is refused rather than allocated on a driver's word.
pub(crate) const MAX_XLT_ENTRIES: usize = 1 << 22;

/// Translation entries per octoword: two MTT entries, or one KLM.
pub(crate) fn entries_per_octoword(mode: u8) -> usize {
    if mode == MKC_ACCESS_MODE_KLM {
        1
    } else {
        2
    }
}

/// Translation entries a key of `octowords` (`translations_octword_size`) holds in `mode`,
/// rounded up to the 64-byte unit UMR writes in (`MLX5_UMR_FLEX_ALIGNMENT`: Linux's
/// `mlx5r_umr_update_mr_pas` pads the list it loads into a key `reg_create` sized by
/// `get_octo_len` to 64 bytes, so a one-page key takes a four-octoword write).
pub(crate) fn xlt_capacity(mode: u8, octowords: u32) -> Option<usize> {
    let octowords = (octowords as usize).checked_next_multiple_of(4)?;
    let entries = octowords.checked_mul(entries_per_octoword(mode))?;
    (entries <= MAX_XLT_ENTRIES).then_some(entries)
}

/// Whether MTT page size `log_page` (absolute log2) is one a key can have: 4 KiB up to the 2^31
/// the five-bit `log_page_size` field reaches (Linux's `mlx5_umem_find_best_pgsz` picks any of
/// them, up to the largest the region's alignment allows).
pub(crate) fn mtt_page_ok(log_page: u32) -> bool {
    (12..=31).contains(&log_page)
}

/// CREATE_MKEY, accepting what Linux 6.12's mlx5_ib sends: `reg_create` (an MTT key with its
/// list, or free and empty for a UMR to load, `umr_en`, `pg_access` as the `pg` capability says,
/// `ma_translation_mode`, relaxed ordering), `mlx5_ib_get_dma_mr` (PA, `length64`),
/// `_mlx5_alloc_mkey_descs` (a free, empty MTT or KLM key for fast registration, length 0,
/// `log_page_size` 0 for KLM) and the mkey cache's `set_cache_mkc`.
pub(crate) fn create_mkey(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let cmd = input_as!(CreateMkeyIn<&[u8]>, input);
    let mkc = cmd.memory_key_mkey_entry();
    let mode = mkc.access_mode();
    if ![MKC_ACCESS_MODE_MTT, MKC_ACCESS_MODE_PA, MKC_ACCESS_MODE_KLM].contains(&mode) {
        return Err(bad_param(
            Syndrome::BadMkeyParams,
            "only PA, MTT and KLM access modes are modelled",
        ));
    }
    if !core.res.pds.contains(mkc.pd()) {
        return Err(bad_res("memory key protection domain does not exist"));
    }
    if mkc.qpn() != 0x00ff_ffff {
        return Err(bad_param(
            Syndrome::BadMkeyParams,
            "memory key qpn must be 0xffffff (not bound to a QP)",
        ));
    }
    if mkc.bsf_en() {
        return Err(bad_param(
            Syndrome::BadMkeyParams,
            "signature (BSF) keys are not modelled",
        ));
    }
    let log_page = u32::from(mkc.log_page_size());
    let (start, len, length64) = (mkc.start_addr(), mkc.len(), mkc.length64());
    if !length64 && len >> super::caps::LOG_MAX_MRW_SZ != 0 {
        return Err(bad_param(
            Syndrome::BadMkeyParams,
            "memory key length above 2^log_max_mrw_sz",
        ));
    }
    if start.checked_add(len).is_none() {
        return Err(bad_param(
            Syndrome::BadMkeyParams,
            "memory key range wraps the address space",
        ));
    }
    let (free, actual) = (mkc.free(), cmd.translations_octword_actual_size());
    let mut mtt = Vec::new();
    let mut klm = Vec::new();
    let mut capacity = 0;
    if mode != MKC_ACCESS_MODE_PA {
        if length64 {
            return Err(bad_param(
                Syndrome::BadMkeyParams,
                "a translated key cannot span the whole address space",
            ));
        }
        if mode == MKC_ACCESS_MODE_MTT && !mtt_page_ok(log_page) {
            return Err(bad_param(
                Syndrome::BadMkeyParams,
                "MTT page size must be 4 KiB to 2 GiB",
            ));
        }
        let size = mkc.translations_octword_size();
        capacity = xlt_capacity(mode, size).ok_or(bad_param(
            Syndrome::BadMkeyParams,
            "translation table above the model's limit",
        ))?;
        if actual > size {
            return Err(bad_param(
                Syndrome::BadMkeyParams,
                "more translation entries given than the key's table holds",
            ));
        }
        let given = actual as usize * entries_per_octoword(mode);
        if mode == MKC_ACCESS_MODE_MTT {
            let page = 1u64 << log_page;
            let needed = ((start & (page - 1)) + len).div_ceil(page) as usize;
            // A valid key must have every page; a free one is loaded later by UMR.
            if !free && given < needed {
                return Err(bad_param(
                    Syndrome::BadMkeyParams,
                    "fewer translation entries than the key's pages",
                ));
            }
            mtt = read_mtt(&cmd, given, page)?;
        } else {
            klm = read_klms(&cmd, given)?;
        }
    }
    let slot = store_new_context(core, mkc.as_bytes())?;
    let key = Mkey {
        variant: mkc.mkey_7_0(),
        access_mode: mode,
        pd: mkc.pd(),
        start,
        len,
        length64,
        log_page,
        mtt,
        klm,
        xlt_capacity: capacity,
        pg_access: cmd.pg_access(),
        umr_en: mkc.umr_en(),
        remote_invalidate: mkc.en_rinval(),
        local_read: mkc.lr(),
        local_write: mkc.lw(),
        remote_read: mkc.rr(),
        remote_write: mkc.rw(),
        atomic: mkc.a(),
        free,
        slot,
    };
    let Some(index) = core.res.mkeys.insert(key) else {
        release_context(core, slot);
        return Err(table_full("memory key table full"));
    };
    output_as!(CreateMkeyOut<&mut [u8]>, output).set_mkey_index(index);
    Ok(())
}

/// The first `count` MTT entries of CREATE_MKEY's list, each aligned to `page` bytes (its low
/// eight bits, rd_en/wr_en and reserved, aside).
fn read_mtt(cmd: &CreateMkeyIn<&[u8]>, count: usize, page: u64) -> Result<Vec<u64>, CmdError> {
    if count > cmd.mtt_capacity() {
        return Err(bad_param(
            Syndrome::BadMkeyParams,
            "translation entries run past the input",
        ));
    }
    let mut mtt = Vec::with_capacity(count);
    for i in 0..count {
        let entry = cmd
            .mtt(i)
            .map_err(|_| bad_param(Syndrome::BadMkeyParams, "translation entry past the input"))?;
        if entry & (page - 1) & MTT_ADDR_MASK != 0 {
            return Err(bad_param(
                Syndrome::BadMkeyParams,
                "translation entry not aligned to the key's page size",
            ));
        }
        mtt.push(entry);
    }
    Ok(mtt)
}

/// The first `count` KLMs of CREATE_MKEY's list (16 bytes each where the MTT entries go).
fn read_klms(cmd: &CreateMkeyIn<&[u8]>, count: usize) -> Result<Vec<(u32, u32, u64)>, CmdError> {
    if count * 2 > cmd.mtt_capacity() {
        return Err(bad_param(
            Syndrome::BadMkeyParams,
            "KLM entries run past the input",
        ));
    }
    let mut klm = Vec::with_capacity(count);
    for i in 0..count {
        let (a, b) = (cmd.mtt(2 * i), cmd.mtt(2 * i + 1));
        let (Ok(head), Ok(address)) = (a, b) else {
            return Err(bad_param(Syndrome::BadMkeyParams, "KLM past the input"));
        };
        klm.push(((head >> 32) as u32, head as u32, address));
    }
    Ok(klm)
}

pub(crate) fn query_mkey(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let index = input_as!(QueryMkeyIn<&[u8]>, input).mkey_index();
    let key = core
        .res
        .mkeys
        .get(index)
        .ok_or(bad_res("no such memory key"))?;
    let mut out = output_as!(QueryMkeyOut<&mut [u8]>, output);
    let mut mkc = out.memory_key_mkey_entry_mut();
    mkc.set_access_mode(key.access_mode)
        .set_pd(key.pd)
        .set_qpn(0x00ff_ffff)
        .set_mkey_7_0(key.variant)
        .set_start_addr(key.start)
        .set_len(key.len)
        .set_length64(key.length64)
        .set_log_page_size(key.log_page as u8)
        .set_translations_octword_size(
            (key.xlt_capacity / entries_per_octoword(key.access_mode)) as u32,
        )
        .set_umr_en(key.umr_en)
        .set_en_rinval(key.remote_invalidate)
        .set_lr(key.local_read)
        .set_lw(key.local_write)
        .set_rr(key.remote_read)
        .set_rw(key.remote_write)
        .set_a(key.atomic)
        .set_free(key.free);
    Ok(())
}

pub(crate) fn destroy_mkey(core: &mut Core, input: &[u8]) -> CmdResult {
    let index = input_as!(DestroyMkeyIn<&[u8]>, input).mkey_index();
    let key = core
        .res
        .mkeys
        .remove(index)
        .ok_or(bad_res("no such memory key"))?;
    release_context(core, key.slot);
    Ok(())
}

/// Resolves `[addr, addr + len)` through key `lkey` for a queue in protection domain `pd`,
/// calling `each(iova, offset_in_access, bytes)` for every physically contiguous piece.
// Inlined, so that `each` (a DMA copy, on every packet's payload) is inlined into it.
#[inline(always)]
pub(crate) fn translate(
    core: &Core,
    lkey: u32,
    pd: u32,
    addr: u64,
    len: u64,
    write: bool,
    mut each: impl FnMut(u64, u64, u64) -> Result<(), KeyFault>,
) -> Result<(), KeyFault> {
    if lkey == RESERVED_LKEY {
        return each(addr, 0, len);
    }
    let key = core.res.mkeys.get(lkey >> 8).ok_or(KeyFault::NoKey)?;
    if key.variant != (lkey & 0xff) as u8 || key.free {
        return Err(KeyFault::NoKey);
    }
    if key.pd != pd {
        return Err(KeyFault::WrongPd);
    }
    if (write && !key.local_write) || (!write && !key.local_read) {
        return Err(KeyFault::Access);
    }
    let end = addr.checked_add(len).ok_or(KeyFault::Bounds)?;
    if !key.length64 && (addr < key.start || end > key.start + key.len) {
        return Err(KeyFault::Bounds);
    }
    walk(core, key, addr, len, write, each)
}

/// Writes (`write`) or reads `[addr, addr + len)` through `rkey` for a peer of an RC QP in
/// protection domain `pd`, after [`check_remote`] granted the access: `each` as for
/// [`translate`].
#[inline(always)]
pub(crate) fn translate_remote(
    core: &Core,
    rkey: u32,
    pd: u32,
    addr: u64,
    len: u64,
    access: RemoteAccess,
    each: impl FnMut(u64, u64, u64) -> Result<(), KeyFault>,
) -> Result<(), KeyFault> {
    check_remote(core, rkey, pd, addr, len, access)?;
    let key = core.res.mkeys.get(rkey >> 8).ok_or(KeyFault::NoKey)?;
    walk(core, key, addr, len, access != RemoteAccess::Read, each)
}

/// Walks `[addr, addr + len)` of `key` (its range already checked), page by page.
#[inline(always)]
fn walk(
    core: &Core,
    key: &Mkey,
    addr: u64,
    len: u64,
    write: bool,
    mut each: impl FnMut(u64, u64, u64) -> Result<(), KeyFault>,
) -> Result<(), KeyFault> {
    if key.access_mode == MKC_ACCESS_MODE_PA {
        return each(addr, 0, len);
    }
    if key.access_mode == MKC_ACCESS_MODE_KLM {
        return walk_klm(core, key, addr, len, write, each);
    }
    walk_mtt(key, addr, len, write, each)
}

/// Walks `[addr, addr + len)` of KLM key `key`: its address space is its pieces end to end
/// from `start`, each reached through the key it names: the reserved lkey (bus addresses, as
/// kernel ULPs register with their PD's `local_dma_lkey`) or a PA or MTT key of the same PD.
/// An indirect key never names another indirect key here.
fn walk_klm(
    core: &Core,
    key: &Mkey,
    addr: u64,
    len: u64,
    write: bool,
    mut each: impl FnMut(u64, u64, u64) -> Result<(), KeyFault>,
) -> Result<(), KeyFault> {
    let mut offset = addr - key.start;
    let mut done = 0u64;
    for &(bytes, inner, address) in &key.klm {
        if done == len {
            break;
        }
        let bytes = u64::from(bytes);
        if offset >= bytes {
            offset -= bytes;
            continue;
        }
        let piece = (bytes - offset).min(len - done);
        let at = address.checked_add(offset).ok_or(KeyFault::Bounds)?;
        let base = done;
        if inner == RESERVED_LKEY {
            each(at, base, piece)?;
        } else {
            let target = core.res.mkeys.get(inner >> 8).ok_or(KeyFault::NoKey)?;
            if target.variant != inner as u8 || target.free {
                return Err(KeyFault::NoKey);
            }
            if target.pd != key.pd || target.access_mode == MKC_ACCESS_MODE_KLM {
                return Err(KeyFault::WrongPd);
            }
            let end = at.checked_add(piece).ok_or(KeyFault::Bounds)?;
            if !target.length64 && (at < target.start || end > target.start + target.len) {
                return Err(KeyFault::Bounds);
            }
            let mut inner_each = |iova, off, n| each(iova, base + off, n);
            match target.access_mode {
                MKC_ACCESS_MODE_PA => inner_each(at, 0, piece)?,
                _ => walk_mtt(target, at, piece, write, &mut inner_each)?,
            }
        }
        done += piece;
        offset = 0;
    }
    if done < len {
        return Err(KeyFault::Bounds);
    }
    Ok(())
}

/// [`walk`] of an MTT key (a KLM's inner key too).
#[inline(always)]
fn walk_mtt(
    key: &Mkey,
    addr: u64,
    len: u64,
    write: bool,
    mut each: impl FnMut(u64, u64, u64) -> Result<(), KeyFault>,
) -> Result<(), KeyFault> {
    let page = 1u64 << key.log_page;
    let base = key.start & !(page - 1);
    let mut done = 0u64;
    while done < len {
        let at = addr + done;
        let index = ((at - base) >> key.log_page) as usize;
        let entry = *key.mtt.get(index).ok_or(KeyFault::Bounds)?;
        // rd_en/wr_en guard the page only in page-access mode; otherwise the entry is a bare
        // address, as Linux writes it when the device reports no `pg` capability.
        let bit = if write { MTT_WRITE } else { MTT_READ };
        if key.pg_access && entry & bit == 0 {
            return Err(KeyFault::Access);
        }
        let in_page = at & (page - 1);
        let piece = (page - in_page).min(len - done);
        each((entry & !(page - 1)) + in_page, done, piece)?;
        done += piece;
    }
    Ok(())
}

/// What a peer asks of a memory key through an RC QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemoteAccess {
    /// RDMA READ: the key must grant remote read.
    Read,
    /// RDMA WRITE (and WRITE with immediate): the key must grant remote write.
    Write,
    /// Compare-and-swap or fetch-and-add on 8 bytes: the key must grant atomics, and the
    /// address must be 8-byte aligned.
    Atomic,
}

/// Checks a peer's access to `[addr, addr + len)` through `rkey` for a QP in protection domain
/// `pd`: the key exists, is of that PD, grants `access` remotely and covers the range (the
/// MTT entries' own read/write bits are checked when the data moves, by [`translate`]). The
/// responder answers a refusal with a remote access error NAK; the requester then completes
/// with [`CqeSyndrome::RemoteAccess`](cxdirect_hw::cqe::CqeSyndrome::RemoteAccess).
pub(crate) fn check_remote(
    core: &Core,
    rkey: u32,
    pd: u32,
    addr: u64,
    len: u64,
    access: RemoteAccess,
) -> Result<(), KeyFault> {
    let key = core.res.mkeys.get(rkey >> 8).ok_or(KeyFault::NoKey)?;
    if key.variant != (rkey & 0xff) as u8 || key.free {
        return Err(KeyFault::NoKey);
    }
    if key.pd != pd {
        return Err(KeyFault::WrongPd);
    }
    let granted = match access {
        RemoteAccess::Read => key.remote_read,
        RemoteAccess::Write => key.remote_write,
        RemoteAccess::Atomic => key.atomic && addr % 8 == 0 && len == 8,
    };
    if !granted {
        return Err(KeyFault::Access);
    }
    let end = addr.checked_add(len).ok_or(KeyFault::Bounds)?;
    if !key.length64 && (addr < key.start || end > key.start + key.len) {
        return Err(KeyFault::Bounds);
    }
    Ok(())
}
