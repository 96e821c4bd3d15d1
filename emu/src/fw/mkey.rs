//! Memory keys: CREATE/QUERY/DESTROY_MKEY and the translation the engines use to turn a
//! key-relative address into IOVAs, with protection-domain, bounds and access checks.

use super::pages::{release_context, store_new_context};
use super::transport::table_full;
use super::{bad_param, bad_res, input_as, output_as, CmdResult, Core, Syndrome};
use crate::objects::Mkey;
use cxdirect_hw::mkey::{
    CreateMkeyIn, CreateMkeyOut, DestroyMkeyIn, QueryMkeyIn, QueryMkeyOut, QuerySpecialContextsOut,
    MKC_ACCESS_MODE_MTT, MKC_ACCESS_MODE_PA, MTT_READ, MTT_WRITE,
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

pub(crate) fn create_mkey(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let cmd = input_as!(CreateMkeyIn<&[u8]>, input);
    let mkc = cmd.memory_key_mkey_entry();
    let mode = mkc.access_mode();
    if mode != MKC_ACCESS_MODE_MTT && mode != MKC_ACCESS_MODE_PA {
        return Err(bad_param(
            Syndrome::BadMkeyParams,
            "only PA and MTT access modes are modelled",
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
    let log_page = u32::from(mkc.log_page_size());
    let (start, len, length64) = (mkc.start_addr(), mkc.len(), mkc.length64());
    if !length64 && (len == 0 || len >> super::caps::LOG_MAX_MRW_SZ != 0) {
        return Err(bad_param(
            Syndrome::BadMkeyParams,
            "memory key length zero or above 2^log_max_mrw_sz",
        ));
    }
    if start.checked_add(len).is_none() {
        return Err(bad_param(
            Syndrome::BadMkeyParams,
            "memory key range wraps the address space",
        ));
    }
    let mut mtt = Vec::new();
    if mode == MKC_ACCESS_MODE_MTT {
        if length64 {
            return Err(bad_param(
                Syndrome::BadMkeyParams,
                "an MTT key cannot span the whole address space",
            ));
        }
        if !(12..=30).contains(&log_page) {
            return Err(bad_param(
                Syndrome::BadMkeyParams,
                "MTT page size must be 4 KiB to 1 GiB",
            ));
        }
        let page = 1u64 << log_page;
        let needed = ((start & (page - 1)) + len).div_ceil(page) as usize;
        let octwords = cmd.translations_octword_actual_size() as usize;
        if octwords * 2 < needed || mkc.translations_octword_size() as usize * 2 < needed {
            return Err(bad_param(
                Syndrome::BadMkeyParams,
                "fewer translation entries than the key's pages",
            ));
        }
        if needed > cmd.mtt_capacity() {
            return Err(bad_param(
                Syndrome::BadMkeyParams,
                "translation entries run past the input",
            ));
        }
        mtt.reserve_exact(needed);
        for i in 0..needed {
            let entry = cmd.mtt(i).map_err(|_| {
                bad_param(Syndrome::BadMkeyParams, "translation entry past the input")
            })?;
            if entry & (page - 1) & !(MTT_READ | MTT_WRITE) != 0 {
                return Err(bad_param(
                    Syndrome::BadMkeyParams,
                    "translation entry not aligned to the key's page size",
                ));
            }
            mtt.push(entry);
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
        local_read: mkc.lr(),
        local_write: mkc.lw(),
        remote_read: mkc.rr(),
        remote_write: mkc.rw(),
        atomic: mkc.a(),
        free: mkc.free(),
        slot,
    };
    let Some(index) = core.res.mkeys.insert(key) else {
        release_context(core, slot);
        return Err(table_full("memory key table full"));
    };
    output_as!(CreateMkeyOut<&mut [u8]>, output).set_mkey_index(index);
    Ok(())
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
        .set_translations_octword_size(key.mtt.len().div_ceil(2) as u32)
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
    walk(key, addr, len, write, each)
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
    walk(key, addr, len, access != RemoteAccess::Read, each)
}

/// Walks `[addr, addr + len)` of `key` (its range already checked), page by page.
#[inline(always)]
fn walk(
    key: &Mkey,
    addr: u64,
    len: u64,
    write: bool,
    mut each: impl FnMut(u64, u64, u64) -> Result<(), KeyFault>,
) -> Result<(), KeyFault> {
    if key.access_mode == MKC_ACCESS_MODE_PA {
        return each(addr, 0, len);
    }
    let page = 1u64 << key.log_page;
    let base = key.start & !(page - 1);
    let mut done = 0u64;
    while done < len {
        let at = addr + done;
        let index = ((at - base) >> key.log_page) as usize;
        let entry = *key.mtt.get(index).ok_or(KeyFault::Bounds)?;
        let allowed = if write {
            entry & MTT_WRITE != 0
        } else {
            entry & MTT_READ != 0
        };
        if !allowed {
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
