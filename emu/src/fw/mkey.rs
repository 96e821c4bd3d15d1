//! Memory keys: CREATE/QUERY/DESTROY_MKEY and QUERY_SPECIAL_CONTEXTS. The translation the
//! engines use to turn a key-relative address into IOVAs lives below both, in
//! [`translate`](crate::translate).

use super::pages::{release_context, store_new_context};
use super::table_full;
use super::{
    bad_param, bad_res, bad_state, input_as, output_as, CmdError, CmdResult, Core, EngineRequests,
    Syndrome,
};
use crate::objects::ksm::KsmTable;
use crate::objects::{Mkey, UNBOUND_QPN};
pub(crate) use crate::translate::{entries_per_octoword, mtt_page_ok, xlt_capacity};
use crate::translate::{MAX_XLT_ENTRIES, NULL_MKEY, RESERVED_LKEY};
use cxdirect_hw::mkey::{
    CreateMkeyIn, CreateMkeyOut, DestroyMkeyIn, QueryMkeyIn, QueryMkeyOut, QuerySpecialContextsOut,
    MKC_ACCESS_MODE_KLM, MKC_ACCESS_MODE_KSM, MKC_ACCESS_MODE_MEMIC, MKC_ACCESS_MODE_MTT,
    MKC_ACCESS_MODE_PA, MKC_ACCESS_MODE_SW_ICM, MTT_ADDR_MASK,
};
use cxdirect_hw::odp::PageFaultResumeIn;
use cxdirect_hw::sig::BSF_OCTOWORDS;

/// PAGE_FAULT_RESUME as mlx5_ib's `mlx5_ib_page_fault_resume` (odp.c) sends it: the fault's
/// type, token and queue as the page-fault event reported them, and the error bit when the
/// pages could not be mapped. The engine resumes the queue (or fails it with the error bit);
/// a fault not waiting is refused as a bad resource state.
pub(crate) fn page_fault_resume(core: &mut Core, input: &[u8]) -> CmdResult {
    let cmd = input_as!(PageFaultResumeIn<&[u8]>, input);
    let (pf_type, wq, token, error) = (
        cmd.page_fault_type(),
        cmd.wq_number(),
        cmd.token(),
        cmd.error(),
    );
    if !core.page_fault_resume(pf_type, wq, token, error) {
        return Err(bad_state(
            Syndrome::StateMismatch,
            "no page fault of that type and token waits on the queue",
        ));
    }
    Ok(())
}

/// QUERY_SPECIAL_CONTEXTS: the reserved lkey and the null key (mlx5_ib's `mlx5r_cmd_query_special_mkeys` reads it
/// for implicit ODP); no dump-fill key is modelled (0).
pub(crate) fn query_special_contexts(output: &mut [u8]) -> CmdResult {
    output_as!(QuerySpecialContextsOut<&mut [u8]>, output)
        .set_resd_lkey(RESERVED_LKEY)
        .set_null_mkey(NULL_MKEY);
    Ok(())
}

/// CREATE_MKEY, accepting what Linux 6.12's mlx5_ib sends: `reg_create` (an MTT key with its
/// list, or free and empty for a UMR to load, `umr_en`, `pg_access` as the `pg` capability says,
/// `ma_translation_mode`, relaxed ordering), `mlx5_ib_get_dma_mr` (PA, `length64`),
/// `_mlx5_alloc_mkey_descs` (a free, empty MTT or KLM key for fast registration, length 0,
/// `log_page_size` 0 for KLM) and the mkey cache's `set_cache_mkc`; and KSM keys, whose
/// entries each map one block of `2^log_page_size` bytes (mlx5_ib's implicit ODP keys,
/// `MLX5_IMR_KSM_CACHE_ENTRY` in odp.c; UCX's indirect keys through DEVX). A memory window
/// (`mlx5_ib_alloc_mw`) is a free, empty KLM key of `umr_en`, `lr`, four KLMs, and `en_rinval`
/// for type 2, bound later by libmlx5's UMR WQEs (`engine::window`).
pub(crate) fn create_mkey(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let cmd = input_as!(CreateMkeyIn<&[u8]>, input);
    let mkc = cmd.memory_key_mkey_entry();
    let mode = mkc.access_mode();
    // SW_ICM only where SW ICM is offered (`EmuConfig::sw_steering`).
    let sw_icm = mode == MKC_ACCESS_MODE_SW_ICM && core.icm.is_some();
    let known = [
        MKC_ACCESS_MODE_MTT,
        MKC_ACCESS_MODE_PA,
        MKC_ACCESS_MODE_KLM,
        MKC_ACCESS_MODE_KSM,
        MKC_ACCESS_MODE_MEMIC,
    ]
    .contains(&mode);
    if !known && !sw_icm {
        return Err(bad_param(
            Syndrome::BadMkeyParams,
            "only PA, MTT, KLM, KSM and MEMIC access modes are modelled (and SW_ICM with SW ICM)",
        ));
    }
    if mode == MKC_ACCESS_MODE_MEMIC {
        check_memic_key(core, &cmd)?;
    }
    if sw_icm {
        super::sw_icm::check_key(core, &cmd)?;
    }
    if !core.res.pds.contains(mkc.pd()) {
        return Err(bad_res("memory key protection domain does not exist"));
    }
    if mkc.qpn() != UNBOUND_QPN {
        return Err(bad_param(
            Syndrome::BadMkeyParams,
            "memory key qpn must be 0xffffff (not bound to a QP)",
        ));
    }
    // A BSF rides on a KLM key only, of the one size mlx5_ib gives it
    // (`mlx5_alloc_integrity_descs`: `bsf_octword_size` MLX5_MKEY_BSF_OCTO_SIZE).
    if mkc.bsf_en() && (mode != MKC_ACCESS_MODE_KLM || mkc.bsf_octword_size() != BSF_OCTOWORDS) {
        return Err(bad_param(
            Syndrome::BadMkeyParams,
            "a signature key is a KLM key with a four-octoword BSF",
        ));
    }
    let mut log_page = u32::from(mkc.log_page_size());
    let mut umem = None;
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
    let mut ksm = KsmTable::new(MAX_XLT_ENTRIES);
    let mut capacity = 0;
    if ![
        MKC_ACCESS_MODE_PA,
        MKC_ACCESS_MODE_MEMIC,
        MKC_ACCESS_MODE_SW_ICM,
    ]
    .contains(&mode)
    {
        if length64 {
            return Err(bad_param(
                Syndrome::BadMkeyParams,
                "a translated key cannot span the whole address space",
            ));
        }
        // A KSM block is sized as an MTT page is (Linux's `mlx5_umem_mkc_find_best_pgsz`
        // bounds both by the same entity-size caps, 4 KiB to 2 GiB without the second page).
        // A key on a umem takes the umem's page size (its context's says nothing then).
        let on_umem = mode == MKC_ACCESS_MODE_MTT && cmd.mkey_umem_valid();
        if matches!(mode, MKC_ACCESS_MODE_MTT | MKC_ACCESS_MODE_KSM)
            && !on_umem
            && !mtt_page_ok(log_page)
        {
            return Err(bad_param(
                Syndrome::BadMkeyParams,
                "MTT page and KSM block sizes must be 4 KiB to 2 GiB",
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
        if mode == MKC_ACCESS_MODE_MTT && cmd.mkey_umem_valid() {
            let uid = cxdirect_hw::cmd::CmdIn::new(input).map_or(0, |h| h.uid());
            let (umem_log_page, entries) = super::devx::umem_mtt(
                core,
                uid,
                cmd.mkey_umem_id(),
                cmd.mkey_umem_offset(),
                start,
                len,
            )?;
            log_page = umem_log_page;
            capacity = entries.len();
            mtt = entries;
            umem = Some(cmd.mkey_umem_id());
        } else if mode == MKC_ACCESS_MODE_MTT {
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
        } else if mode == MKC_ACCESS_MODE_KSM {
            // A KSM key keeps only the entries naming a key (`objects::ksm`); its table may
            // be as large as Linux's implicit ODP key (2^26 blocks under 5-level paging).
            let list = read_klms(&cmd, given)?;
            ksm.write(0, list.iter().map(|&(_, key, address)| (key, address)))
                .map_err(|_| {
                    bad_param(
                        Syndrome::BadMkeyParams,
                        "more KSM entries naming a key than the model holds",
                    )
                })?;
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
        repeat: None,
        ksm,
        xlt_capacity: capacity,
        pg_access: cmd.pg_access() || (mkc.umr_en() && core.hca.caps.general().pg()),
        umr_en: mkc.umr_en(),
        remote_invalidate: mkc.en_rinval(),
        qpn: UNBOUND_QPN,
        local_read: mkc.lr(),
        local_write: mkc.lw(),
        remote_read: mkc.rr(),
        remote_write: mkc.rw(),
        atomic: mkc.a(),
        free,
        slot,
        bsf_en: mkc.bsf_en(),
        sig: None,
        sigerr_expected: mkc.expected_sigerr_count(),
        sigerr_count: 0,
    };
    let Some(index) = core.res.mkeys.insert(key) else {
        release_context(core, slot);
        return Err(table_full("memory key table full"));
    };
    if let Some(id) = umem {
        super::devx::hold(core, &[id], (crate::objects::devx::Owned::Mkey, index));
    }
    output_as!(CreateMkeyOut<&mut [u8]>, output).set_mkey_index(index);
    Ok(())
}

/// A device-memory key as mlx5_ib's `mlx5_ib_get_dm_mr` creates it for `mlx5_ib_reg_dm_mr`:
/// `start_addr` the BAR0 offset of the registered bytes, `len` their count (0 allowed: the
/// RDMA core registers a zero-length region), no translation table. Its addresses are
/// zero-based (`translate`). Refused: a function without device memory, a range outside it,
/// `length64`, and `umr_en` (mlx5_ib never sets it here; no source says a UMR may load a MEMIC
/// key, and the model's UMRs load MTT and KLM tables).
fn check_memic_key(core: &Core, cmd: &CreateMkeyIn<&[u8]>) -> CmdResult {
    let mkc = cmd.memory_key_mkey_entry();
    let Some(memory) = core.memic.as_deref() else {
        return Err(bad_param(
            Syndrome::BadMkeyParams,
            "a MEMIC key on a function without device memory",
        ));
    };
    let inside = mkc
        .start_addr()
        .checked_sub(memory.base())
        .and_then(|o| o.checked_add(mkc.len()))
        .is_some_and(|end| end <= crate::objects::memic::MEMIC_SIZE);
    if !inside || mkc.length64() {
        return Err(bad_param(
            Syndrome::BadMkeyParams,
            "a MEMIC key's range must lie in the device memory",
        ));
    }
    if mkc.umr_en() || mkc.free() {
        return Err(bad_param(
            Syndrome::BadMkeyParams,
            "a MEMIC key is created whole, without UMR",
        ));
    }
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
        .set_qpn(key.qpn)
        .set_mkey_7_0(key.variant)
        .set_start_addr(key.start)
        .set_len(key.len)
        .set_length64(key.length64)
        .set_log_page_size(key.log_page as u8)
        // A KSM table of 2^32 blocks (the field's largest value rounded up) reads as the
        // largest the field holds.
        .set_translations_octword_size(
            u32::try_from(key.xlt_capacity / entries_per_octoword(key.access_mode))
                .unwrap_or(u32::MAX),
        )
        .set_umr_en(key.umr_en)
        .set_bsf_en(key.bsf_en)
        .set_bsf_octword_size(if key.bsf_en { BSF_OCTOWORDS } else { 0 })
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
