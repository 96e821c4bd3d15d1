//! Memory key translation: turning a key-relative address into IOVAs, with protection-domain,
//! bounds and access checks, and the geometry of a key's translation table. The data path
//! (`engine`) translates every gather, scatter and remote access through it; the firmware's
//! CREATE_MKEY (`fw::mkey`) checks the tables it is given against the same geometry.

use crate::function::Core;
use crate::objects::repeat::RepeatBlock;
use crate::objects::Mkey;
use crate::objects::{icm, memic};
use cxdirect_hw::mkey::{
    MKC_ACCESS_MODE_KLM, MKC_ACCESS_MODE_KSM, MKC_ACCESS_MODE_MEMIC, MKC_ACCESS_MODE_PA,
    MKC_ACCESS_MODE_SW_ICM, MTT_READ, MTT_WRITE,
};

/// The reserved lkey the model reports in QUERY_SPECIAL_CONTEXTS: addresses through it are
/// IOVAs, checked only by the IOMMU. Memory key index 2 is never handed out, and the value differs
/// from the invalid lkey (0x100) that ends receive scatter lists.
pub const RESERVED_LKEY: u32 = 0x200;

pub use crate::objects::ksm::NULL_MKEY;

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
    /// An MTT entry of a key whose entries carry present bits lacks the read or write bit the
    /// access needs: a page fault where the function resolves them
    /// (`engine::rc::page_fault`), an access error elsewhere.
    NotPresent,
}

/// Translation entries an MTT or KLM key may hold at most: 2^22 MTT entries map 16 GiB in
/// 4 KiB pages. A larger table is refused rather than allocated on a driver's word. A KSM key
/// stores at most this many entries naming a key other than the null key.
pub(crate) const MAX_XLT_ENTRIES: usize = 1 << 22;

/// Blocks a KSM key's table may have: all that `translations_octword_size` (32 bits, one
/// entry an octoword, rounded up to 64 bytes) can say. Its entries are stored sparsely
/// ([`KsmTable`](crate::objects::ksm::KsmTable)), so only the entries naming a key cost
/// memory: Linux's implicit ODP key under 5-level paging has 2^26 blocks
/// (`mlx5_imr_ksm_entries` in odp.c), nearly all naming the null key.
pub(crate) const MAX_KSM_BLOCKS: usize = 1 << 32;

/// Translation entries per octoword: two MTT entries, or one KLM or KSM entry (16 bytes).
pub(crate) fn entries_per_octoword(mode: u8) -> usize {
    if is_indirect(mode) {
        1
    } else {
        2
    }
}

/// Whether access mode `mode` reaches memory through other keys (KLM, KSM): its entries are
/// 16 bytes (byte count or reserved, key, address), as `struct mlx5_klm` / `mlx5_ksm`.
pub(crate) fn is_indirect(mode: u8) -> bool {
    mode == MKC_ACCESS_MODE_KLM || mode == MKC_ACCESS_MODE_KSM
}

/// Translation entries a key of `octowords` (`translations_octword_size`) holds in `mode`,
/// rounded up to the 64-byte unit UMR writes in (`MLX5_UMR_FLEX_ALIGNMENT`: Linux's
/// `mlx5r_umr_update_mr_pas` pads the list it loads into a key `reg_create` sized by
/// `get_octo_len` to 64 bytes, so a one-page key takes a four-octoword write).
pub(crate) fn xlt_capacity(mode: u8, octowords: u32) -> Option<usize> {
    let octowords = (octowords as usize).checked_next_multiple_of(4)?;
    let entries = octowords.checked_mul(entries_per_octoword(mode))?;
    let limit = if mode == MKC_ACCESS_MODE_KSM {
        MAX_KSM_BLOCKS
    } else {
        MAX_XLT_ENTRIES
    };
    (entries <= limit).then_some(entries)
}

/// Whether MTT page size `log_page` (absolute log2) is one a key can have: 4 KiB up to the 2^31
/// the five-bit `log_page_size` field reaches (Linux's `mlx5_umem_find_best_pgsz` picks any of
/// them, up to the largest the region's alignment allows).
pub(crate) fn mtt_page_ok(log_page: u32) -> bool {
    (12..=31).contains(&log_page)
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
    let origin = origin(key);
    if !key.length64 && (addr < origin || end > origin + key.len) {
        return Err(KeyFault::Bounds);
    }
    walk(core, key, addr, len, write, each)
}

/// The first address of `key`'s range: its `start_addr`, but 0 for a device-memory or SW ICM
/// key, which is zero-based (the RDMA core registers device memory only with IB_ZERO_BASED,
/// `UVERBS_METHOD_DM_MR_REG`, while mlx5_ib's `mlx5_ib_reg_dm_mr` puts the memory's BAR0
/// offset, or the ICM address, in `start_addr`; rdma-core's dr_send.c then addresses an SW ICM
/// key from 0, `dr_icm_pool_get_chunk_mr_addr`).
fn origin(key: &Mkey) -> u64 {
    if key.access_mode == MKC_ACCESS_MODE_MEMIC || key.access_mode == MKC_ACCESS_MODE_SW_ICM {
        0
    } else {
        key.start
    }
}

/// The bus address of byte `addr` (zero-based) of device-memory key `key`: the byte at BAR0
/// offset `start_addr + addr`, which must lie in the function's device memory.
fn memic_address(core: &Core, key: &Mkey, addr: u64, len: u64) -> Result<u64, KeyFault> {
    let memory = core.memic.as_deref().ok_or(KeyFault::Bounds)?;
    let offset = key
        .start
        .checked_add(addr)
        .and_then(|a| a.checked_sub(memory.base()))
        .filter(|o| {
            o.checked_add(len)
                .is_some_and(|end| end <= memic::MEMIC_SIZE)
        })
        .ok_or(KeyFault::Bounds)?;
    Ok(memic::bus_address(offset))
}

/// The bus address of byte `addr` (zero-based) of SW ICM key `key`: ICM address
/// `start_addr + addr`, whose `len` bytes must lie in one live SW_ICM object (the key was made
/// over one, which may have been destroyed since).
fn sw_icm_address(core: &Core, key: &Mkey, addr: u64, len: u64) -> Result<u64, KeyFault> {
    let store = core.icm.as_ref().ok_or(KeyFault::Bounds)?;
    let at = key.start.checked_add(addr).ok_or(KeyFault::Bounds)?;
    if !store.covered(at, len) {
        return Err(KeyFault::Bounds);
    }
    Ok(icm::bus_address(at))
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
    if key.access_mode == MKC_ACCESS_MODE_MEMIC {
        return each(memic_address(core, key, addr, len)?, 0, len);
    }
    if key.access_mode == MKC_ACCESS_MODE_SW_ICM {
        return each(sw_icm_address(core, key, addr, len)?, 0, len);
    }
    if key.access_mode == MKC_ACCESS_MODE_KLM {
        return walk_klm(core, key, addr, len, write, each);
    }
    if key.access_mode == MKC_ACCESS_MODE_KSM {
        return walk_ksm(core, key, addr, len, write, each);
    }
    walk_mtt(key, addr, len, write, each)
}

/// Walks `[addr, addr + len)` of KSM key `key`: its address space is blocks of
/// `2^log_page_size` bytes from `start` (Linux's implicit ODP keys use 2^30,
/// `MLX5_KSM_PAGE_SHIFT`), block `i` reached at entry `i`'s address through the key it names,
/// as for a KLM. A block within the key's table without an entry (never loaded, or loaded with
/// the null key) is a page not present; a block past the table is out of bounds.
fn walk_ksm(
    core: &Core,
    key: &Mkey,
    addr: u64,
    len: u64,
    write: bool,
    mut each: impl FnMut(u64, u64, u64) -> Result<(), KeyFault>,
) -> Result<(), KeyFault> {
    let block = 1u64 << key.log_page;
    let mut done = 0u64;
    while done < len {
        // A key spanning the address space from `start` (`length64`) is not bounds-checked
        // before the walk: an address below its start is out of bounds here.
        let offset = addr
            .checked_sub(key.start)
            .and_then(|o| o.checked_add(done))
            .ok_or(KeyFault::Bounds)?;
        let index = offset >> key.log_page;
        if usize::try_from(index).map_or(true, |i| i >= key.xlt_capacity) {
            return Err(KeyFault::Bounds);
        }
        let (inner, address) = key.ksm.get(index).ok_or(KeyFault::NotPresent)?;
        let in_block = offset & (block - 1);
        let piece = (block - in_block).min(len - done);
        let at = address.checked_add(in_block).ok_or(KeyFault::Bounds)?;
        through(core, key, inner, at, piece, done, write, &mut each)?;
        done += piece;
    }
    Ok(())
}

/// Reaches `[at, at + piece)` through `inner`, an entry's key of indirect key `key`: the
/// reserved lkey (bus addresses) or a PA or MTT key of the same PD that covers the range; the
/// pieces are reported at `base` onward in the access.
#[allow(clippy::too_many_arguments)]
fn through(
    core: &Core,
    key: &Mkey,
    inner: u32,
    at: u64,
    piece: u64,
    base: u64,
    write: bool,
    each: &mut impl FnMut(u64, u64, u64) -> Result<(), KeyFault>,
) -> Result<(), KeyFault> {
    if inner == RESERVED_LKEY {
        return each(at, base, piece);
    }
    if inner == NULL_MKEY {
        return Err(KeyFault::NotPresent);
    }
    let target = core.res.mkeys.get(inner >> 8).ok_or(KeyFault::NoKey)?;
    if target.variant != inner as u8 || target.free {
        return Err(KeyFault::NoKey);
    }
    if target.pd != key.pd || is_indirect(target.access_mode) {
        return Err(KeyFault::WrongPd);
    }
    let end = at.checked_add(piece).ok_or(KeyFault::Bounds)?;
    let origin = origin(target);
    if !target.length64 && (at < origin || end > origin + target.len) {
        return Err(KeyFault::Bounds);
    }
    let mut inner_each = |iova, off, n| each(iova, base + off, n);
    match target.access_mode {
        MKC_ACCESS_MODE_PA => inner_each(at, 0, piece),
        MKC_ACCESS_MODE_MEMIC => inner_each(memic_address(core, target, at, piece)?, 0, piece),
        MKC_ACCESS_MODE_SW_ICM => inner_each(sw_icm_address(core, target, at, piece)?, 0, piece),
        _ => walk_mtt(target, at, piece, write, &mut inner_each),
    }
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
    let mut offset = addr.checked_sub(key.start).ok_or(KeyFault::Bounds)?;
    if let Some(block) = key.repeat.as_deref() {
        return walk_repeat(core, key, block, offset, len, write, each);
    }
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
        through(core, key, inner, at, piece, done, write, &mut each)?;
        done += piece;
        offset = 0;
    }
    if done < len {
        return Err(KeyFault::Bounds);
    }
    Ok(())
}

/// Walks `len` bytes from `offset` of KLM key `key` laid out as the repeated block `block`:
/// each piece reached through its entry's key as a KLM's is.
fn walk_repeat(
    core: &Core,
    key: &Mkey,
    block: &RepeatBlock,
    offset: u64,
    len: u64,
    write: bool,
    mut each: impl FnMut(u64, u64, u64) -> Result<(), KeyFault>,
) -> Result<(), KeyFault> {
    let mut done = 0u64;
    while done < len {
        let at_offset = offset.checked_add(done).ok_or(KeyFault::Bounds)?;
        let (inner, at, bytes) = block.locate(at_offset).ok_or(KeyFault::Bounds)?;
        let piece = bytes.min(len - done);
        through(core, key, inner, at, piece, done, write, &mut each)?;
        done += piece;
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
        let index = at
            .checked_sub(base)
            .and_then(|rel| usize::try_from(rel >> key.log_page).ok())
            .ok_or(KeyFault::Bounds)?;
        // In page-access mode an entry of the key's table not loaded yet is a page not
        // present (the table starts zeroed), not one past the key.
        let entry = match key.mtt.get(index) {
            Some(&entry) => entry,
            None if key.pg_access && index < key.xlt_capacity => 0,
            None => return Err(KeyFault::Bounds),
        };
        // rd_en/wr_en are the page's present bits only in page-access mode; otherwise the
        // entry is a bare address, as Linux writes it when the device reports no `pg`
        // capability.
        let bit = if write { MTT_WRITE } else { MTT_READ };
        if key.pg_access && entry & bit == 0 {
            return Err(KeyFault::NotPresent);
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

/// [`check_remote`] for a request arriving on QP `qpn`: a key bound to a QP (a type 2 memory
/// window, `engine::window`) serves requests on that QP only (IBA 10.6.7.2: the window's QP
/// must be the one the request targets); one bound to none serves every QP of its PD.
pub(crate) fn check_remote_on(
    core: &Core,
    rkey: u32,
    pd: u32,
    qpn: u32,
    addr: u64,
    len: u64,
    access: RemoteAccess,
) -> Result<(), KeyFault> {
    check_remote(core, rkey, pd, addr, len, access)?;
    let key = core.res.mkeys.get(rkey >> 8).ok_or(KeyFault::NoKey)?;
    if key.qpn != crate::objects::UNBOUND_QPN && key.qpn != qpn {
        return Err(KeyFault::Access);
    }
    Ok(())
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
    // A signature key's wire view may be longer than its memory (protection inserted).
    let span = key
        .sig
        .as_ref()
        .map_or(key.len, |s| key.len.max(s.wire_span()));
    let origin = origin(key);
    if !key.length64 && (addr < origin || end > origin.saturating_add(span)) {
        return Err(KeyFault::Bounds);
    }
    Ok(())
}
