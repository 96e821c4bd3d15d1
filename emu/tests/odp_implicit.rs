//! Implicit on-demand paging (`IB_ODP_SUPPORT_IMPLICIT`, `ibv_reg_mr(pd, NULL, SIZE_MAX,
//! IBV_ACCESS_ON_DEMAND)`) as Linux 6.12's mlx5_ib builds it (odp.c, umr.c):
//! `mlx5_ib_internal_fill_odp_caps` reports it with `fixed_buffer_size`, `null_mkey` and
//! `umr_extended_translation_offset`; `mlx5r_cmd_query_special_mkeys` (cmd.c) reads the null
//! key with QUERY_SPECIAL_CONTEXTS when `null_mkey` is set; `mlx5_ib_alloc_implicit_mr` takes a KSM key
//! of `mlx5_imr_ksm_entries` (2^17 on x86-64: TASK_SIZE in 1 GiB blocks) from the mkey cache
//! and loads every entry with the null key (`mlx5r_umr_update_xlt` with
//! `MLX5_IB_UPD_XLT_INDIRECT | ZAP | ENABLE`, `MLX5_KSM_PAGE_SHIFT` 30, `length64` for a key
//! of no length). An access through it faults; `pagefault_implicit_mr` makes the 1 GiB child
//! (`implicit_get_child_mr`: an MTT key of 2^18 entries from the cache, zapped and enabled by
//! UMR), maps the pages into it (`pagefault_real_mr`) and points the parent's entry at it
//! (`populate_klm`), then resumes.

mod odp_kit;

use cxdirect_emu::testkit::{Cq, Host, Sq};
use cxdirect_emu::NULL_MKEY;
use cxdirect_hw::mkey::{QuerySpecialContextsOut, MKC_ACCESS_MODE_KSM};
use odp_kit::*;

/// `mlx5_imr_ksm_entries` on x86-64: `TASK_SIZE` (2^47) in 1 GiB blocks.
const KSM_ENTRIES: usize = 1 << 17;
/// `MLX5_IMR_MTT_ENTRIES`: the 4 KiB pages of one 1 GiB child.
const CHILD_ENTRIES: usize = 1 << 18;
/// `MLX5_IMR_MTT_SHIFT` (`MLX5_KSM_PAGE_SHIFT`).
const BLOCK_SHIFT: u32 = 30;
/// Entries a UMR here loads at a time (32,768 octowords of KSM entries, 16,384 of MTT).
const CHUNK_BYTES: usize = 512 << 10;
/// `mlx5_imr_ksm_entries` under 5-level paging (QEMU's `-cpu max` has LA57): `TASK_SIZE`
/// (2^56) in 1 GiB blocks.
const KSM_ENTRIES_LA57: usize = 1 << 26;
/// `MLX5_MAX_UMR_CHUNK` (umr.c): the most list bytes one UMR of `mlx5r_umr_update_xlt`
/// carries, 1 MiB less `MLX5_UMR_FLEX_ALIGNMENT`.
const MAX_UMR_CHUNK: usize = (1 << 20) - 64;

/// The REG_UMR QP mlx5_ib posts its UMRs on, with the UMR PD's key for the lists.
struct Umr {
    sq: Sq,
    cq: Cq,
    lkey: u32,
    pd: u32,
    buf: u64,
}

impl Umr {
    fn new(h: &mut Host) -> Self {
        let pd = h.alloc_pd();
        let cq = h.create_cq(6);
        let sq = h.create_reg_umr_qp(&cq, 7);
        let saved = h.pd;
        h.pd = pd;
        let lkey = h.create_mkey(false, true);
        h.pd = saved;
        let buf = h.alloc(MAX_UMR_CHUNK as u64, 4096);
        Self {
            sq,
            cq,
            lkey,
            pd,
            buf,
        }
    }

    /// A UMR of `key` loading `list` from octoword `offset` on (`mlx5r_umr_update_offset`).
    /// Every UMR of an update with `MLX5_IB_UPD_XLT_ENABLE` (`enabling`) fails unless the key
    /// is free (CHECK_NOT_FREE), any other unless it is not (CHECK_FREE); the last one of an
    /// enabling update (`enable`: PD, start, log page size) enables the key
    /// (`mlx5r_umr_final_update_xlt`: KEY, FREE, access, PD and translation in the mask,
    /// `length64` for a key of no length).
    fn post(
        &mut self,
        h: &mut Host,
        key: u32,
        list: &[u8],
        offset: u64,
        enabling: bool,
        enable: Option<(u32, u64, u8)>,
    ) {
        assert!(list.len() <= MAX_UMR_CHUNK && list.len() % 64 == 0);
        h.write(self.buf, list);
        let mut w = vec![0u8; 192];
        CtrlSeg::new(&mut w[..16])
            .expect("layout")
            .set_opcode(opcode::UMR)
            .set_wqe_index(self.sq.pi)
            .set_qpn_or_sqn(self.sq.sqn)
            .set_ds(9)
            .set_ce(wqe::completion::ALWAYS)
            .set_fm(wqe::fence_mode::INITIATOR_SMALL)
            .set_imm(key);
        let check = if enabling {
            flags::CHECK_NOT_FREE
        } else {
            flags::CHECK_FREE
        };
        let mask = match enable {
            Some(_) => {
                mkey_mask::KEY
                    | mkey_mask::FREE
                    | mkey_mask::LR
                    | mkey_mask::LW
                    | mkey_mask::RR
                    | mkey_mask::RW
                    | mkey_mask::A
                    | mkey_mask::PD
                    | mkey_mask::LEN
                    | mkey_mask::PAGE_SIZE
                    | mkey_mask::START_ADDR
            }
            None => 0,
        };
        UmrCtrlSeg::new(&mut w[16..64])
            .expect("layout")
            .set_flags(check | flags::TRANSLATION_OFFSET_EN)
            .set_xlt_octowords((list.len() / 16) as u16)
            .set_xlt_offset(offset as u16)
            .set_xlt_offset_47_16((offset >> 16) as u32)
            .set_mkey_mask(mask);
        let (pd, start, log_page) = enable.unwrap_or((0, 0, 0));
        Mkc::new(&mut w[64..128])
            .expect("layout")
            .set_lr(true)
            .set_lw(true)
            .set_rr(true)
            .set_rw(true)
            .set_a(true)
            .set_pd(pd)
            .set_start_addr(start)
            .set_len(0)
            .set_length64(enable.is_some())
            .set_log_page_size(log_page)
            .set_qpn(0xff_ffff)
            .set_mkey_7_0(key as u8);
        DataSeg::new(&mut w[128..144])
            .expect("layout")
            .set_byte_count(list.len() as u32)
            .set_lkey(self.lkey)
            .set_addr(self.buf);
        h.post(&mut self.sq, &w, false);
        h.dev.poll();
        let done = drain(h, &mut self.cq);
        assert_eq!(done.len(), 1, "the UMR completed");
        assert_eq!(
            cqe_opcode(&done[0]),
            CQE_REQ,
            "the UMR succeeded (syndrome {:#x})",
            done[0][0x37]
        );
    }

    /// A key from the mkey cache as `set_cache_mkc` creates it: free, `umr_en`, access mode
    /// `mode`, in the UMR PD, `octowords` of translations, 4 KiB pages, no length.
    fn cache_key(&self, h: &mut Host, mode: u8, octowords: u32, variant: u8) -> u32 {
        let mut input = Host::input(Opcode::CreateMkey, 0, 0x110);
        {
            let mut cmd = CreateMkeyIn::new(&mut input[..]).expect("layout");
            let mut mkc = cmd.memory_key_mkey_entry_mut();
            mkc.set_lr(true)
                .set_lw(true)
                .set_rr(true)
                .set_rw(true)
                .set_a(true)
                .set_pd(self.pd)
                .set_qpn(0xff_ffff)
                .set_free(true)
                .set_umr_en(true)
                .set_access_mode_1_0(mode & 3)
                .set_translations_octword_size(octowords)
                .set_log_page_size(12)
                .set_mkey_7_0(variant);
        }
        let out = h.exec(&input, 16).expect("CREATE_MKEY from the cache");
        let index = CreateMkeyOut::new(&out[..]).expect("layout").mkey_index();
        mkey_from_index(index, variant)
    }
}

/// `struct mlx5_klm` as `populate_klm` fills it: the block's size, the key, the address.
fn ksm_entry(key: u32, va: u64) -> [u8; 16] {
    let mut e = [0u8; 16];
    e[..4].copy_from_slice(&(1u32 << BLOCK_SHIFT).to_be_bytes());
    e[4..8].copy_from_slice(&key.to_be_bytes());
    e[8..].copy_from_slice(&va.to_be_bytes());
    e
}

/// An implicit ODP region of `h` in its PD, as `mlx5_ib_alloc_implicit_mr` makes it: the KSM
/// key, every block pointing at `null` (the null key).
fn implicit_mr(h: &mut Host, umr: &mut Umr, null: u32) -> u32 {
    let imr = umr.cache_key(h, MKC_ACCESS_MODE_KSM, KSM_ENTRIES as u32, 0x71);
    let zap: Vec<u8> = (0..CHUNK_BYTES / 16)
        .flat_map(|_| ksm_entry(null, 0))
        .collect();
    let per = CHUNK_BYTES / 16;
    for chunk in 0..KSM_ENTRIES / per {
        let last = chunk + 1 == KSM_ENTRIES / per;
        let enable = last.then_some((h.pd, 0, BLOCK_SHIFT as u8));
        umr.post(h, imr, &zap, (chunk * per) as u64, true, enable);
    }
    imr
}

/// `pagefault_implicit_mr` for `[va, va + len)` (within one block): the block's child made and
/// zapped (`implicit_get_child_mr`), the pages loaded (`pagefault_real_mr`), the parent's
/// entries around it pointed at the child (`populate_klm`, four entries: 64 bytes). Returns
/// the child's key and the pages mapped.
fn fault_in(h: &mut Host, umr: &mut Umr, imr: u32, null: u32, va: u64, len: u64) -> Vec<u64> {
    let idx = va >> BLOCK_SHIFT;
    let child_start = idx << BLOCK_SHIFT;
    let child = umr.cache_key(h, MKC_ACCESS_MODE_MTT, (CHILD_ENTRIES / 2) as u32, 0x72);
    let zeros = vec![0u8; CHUNK_BYTES];
    let per = CHUNK_BYTES / 8;
    for chunk in 0..CHILD_ENTRIES / per {
        let last = chunk + 1 == CHILD_ENTRIES / per;
        let enable = last.then_some((h.pd, child_start, 12));
        umr.post(h, child, &zeros, (chunk * per / 2) as u64, true, enable);
    }
    // The pages of the range, loaded in a 64-byte aligned run of eight entries.
    let first = ((va - child_start) >> 12) as usize & !7;
    let last = ((va + len - 1 - child_start) >> 12) as usize;
    let pages: Vec<u64> = (first..=last).map(|_| h.alloc(4096, 4096)).collect();
    let mut list: Vec<u8> = pages
        .iter()
        .flat_map(|&p| (p | MTT_RW).to_be_bytes())
        .collect();
    list.resize(list.len().next_multiple_of(64), 0);
    umr.post(h, child, &list, (first / 2) as u64, false, None);
    let base = (idx as usize) & !3;
    let entries: Vec<u8> = (base..base + 4)
        .flat_map(|i| {
            if i == idx as usize {
                ksm_entry(child, child_start)
            } else {
                ksm_entry(null, 0)
            }
        })
        .collect();
    umr.post(h, imr, &entries, base as u64, false, None);
    // The pages from `va` on.
    pages[((va - child_start) >> 12) as usize - first..].to_vec()
}

fn null_mkey(h: &mut Host) -> u32 {
    let out = h
        .exec(&Host::input(Opcode::QuerySpecialContexts, 0, 16), 0x20)
        .expect("QUERY_SPECIAL_CONTEXTS");
    QuerySpecialContextsOut::new(&out[..])
        .expect("layout")
        .null_mkey()
}

#[test]
fn mlx5r_cmd_query_special_mkeys_reads_the_null_mkey_and_implicit_odp_is_reported() {
    let mut p = odp_pair(false);
    let general = p.a.query_cap(cap_type::GENERAL_DEVICE, true);
    let g = CmdHcaCap::new(&general[0x10..0x110]).expect("layout");
    // IB_ODP_SUPPORT_IMPLICIT: fixed_buffer_size, null_mkey, umr_extended_translation_offset.
    assert!(g.pg() && g.fixed_buffer_size() && g.null_mkey());
    assert!(g.umr_extended_translation_offset());
    assert_eq!(null_mkey(&mut p.a), NULL_MKEY);
}

#[test]
fn pagefault_implicit_mr_backs_a_block_by_a_child_and_the_write_lands_after_resume() {
    let mut p = odp_pair(true);
    let null = null_mkey(&mut p.b);
    let mut umr = Umr::new(&mut p.b);
    let imr = implicit_mr(&mut p.b, &mut umr, null);
    // A WRITE of two pages somewhere in the process's address space.
    let va = 0x7f12_3456_7000u64;
    let len = 8192usize;
    let data = pattern(len, 51);
    let lkey_a = p.a.create_mkey(false, true);
    let src = p.a.alloc(len as u64, 4096);
    p.a.write(src, &data);
    let w = wqe_of(
        &p.qp_a.sq,
        opcode::RDMA_WRITE,
        (va, imr),
        (src, lkey_a),
        len as u32,
    );
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    assert!(drain(&p.a, &mut p.cq_a).is_empty(), "the WRITE waits");
    let faults = page_faults(&mut p.b);
    assert_eq!(faults.len(), 1, "{faults:?}");
    assert_eq!(faults[0].0, pfault_subtype::RDMA);
    let e = EqePageFaultRdma::new(&faults[0].1[..]).expect("layout");
    // The rkey is the implicit key: mlx5_ib's find_odp_mkey finds it, pagefault_mr goes to
    // pagefault_implicit_mr.
    assert_eq!(
        (e.r_key(), e.rdma_va(), e.rdma_op_len()),
        (imr, va, len as u32)
    );
    assert_eq!(e.pf_type(), pfault_flags::RDMA | pfault_flags::WRITE);
    let pages = fault_in(&mut p.b, &mut umr, imr, null, va, len as u64);
    resume(&mut p.b, e.pf_type(), e.token(), e.token(), false).expect("PAGE_FAULT_RESUME");
    let done = completions_after_rnr(&mut p, true);
    assert_eq!(done.len(), 1, "the WRITE completed");
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ);
    assert_eq!(p.b.read(pages[0], 4096), data[..4096].to_vec());
    assert_eq!(p.b.read(pages[1], 4096), data[4096..].to_vec());
    // A SEND gathered from the same key on B's side now needs no fault.
    let lkey_a_dst = p.a.create_mkey(false, true);
    let dst = p.a.alloc(4096, 4096);
    p.a.post_rc_recv(&mut p.qp_a, dst, 4096, lkey_a_dst);
    let w = wqe_of(&p.qp_b.sq, opcode::SEND, (0, 0), (va, imr), 100);
    p.b.post(&mut p.qp_b.sq, &w, false);
    p.settle();
    assert_eq!(drain(&p.b, &mut p.cq_b).len(), 1, "the SEND completed");
    assert_eq!(p.a.read(dst, 100), data[..100].to_vec());
    assert!(page_faults(&mut p.b).is_empty());
}

#[test]
fn an_implicit_key_fault_resumed_with_an_error_fails_the_write_and_past_the_key_is_no_fault() {
    let mut p = odp_pair(true);
    let null = null_mkey(&mut p.b);
    let mut umr = Umr::new(&mut p.b);
    let imr = implicit_mr(&mut p.b, &mut umr, null);
    let va = 0x5555_0000_1000u64;
    let lkey_a = p.a.create_mkey(false, true);
    let src = p.a.alloc(4096, 4096);
    p.a.write(src, &[0xab; 4096]);
    let w = wqe_of(
        &p.qp_a.sq,
        opcode::RDMA_WRITE,
        (va, imr),
        (src, lkey_a),
        512,
    );
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    let faults = page_faults(&mut p.b);
    assert_eq!(faults.len(), 1);
    let e = EqePageFaultRdma::new(&faults[0].1[..]).expect("layout");
    assert_eq!(e.r_key(), imr);
    resume(&mut p.b, e.pf_type(), e.token(), e.token(), true).expect("resume with error");
    let done = completions_after_rnr(&mut p, true);
    assert_eq!(done.len(), 1);
    assert_eq!(
        (cqe_opcode(&done[0]), done[0][0x37]),
        (CQE_REQ_ERR, SYND_REMOTE_ACCESS)
    );
    // An address past the key's 2^17 blocks is out of bounds, not a fault.
    let mut p = odp_pair(true);
    let null = null_mkey(&mut p.b);
    let mut umr = Umr::new(&mut p.b);
    let imr = implicit_mr(&mut p.b, &mut umr, null);
    let lkey_a = p.a.create_mkey(false, true);
    let src = p.a.alloc(4096, 4096);
    let w = wqe_of(
        &p.qp_a.sq,
        opcode::RDMA_WRITE,
        (1u64 << 47, imr),
        (src, lkey_a),
        64,
    );
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    let done = drain(&p.a, &mut p.cq_a);
    assert_eq!(done.len(), 1);
    assert_eq!(
        (cqe_opcode(&done[0]), done[0][0x37]),
        (CQE_REQ_ERR, SYND_REMOTE_ACCESS)
    );
    assert!(page_faults(&mut p.b).is_empty());
}

#[test]
fn set_cache_mkc_takes_the_implicit_ksm_key_of_5_level_paging_2_26_entries() {
    let mut p = odp_pair(false);
    let umr = Umr::new(&mut p.b);
    // As the rig's mlx5_ib sends it: KSM, free, umr_en, 2^26 octowords, 4 KiB.
    umr.cache_key(&mut p.b, MKC_ACCESS_MODE_KSM, KSM_ENTRIES_LA57 as u32, 0x71);
}

/// An RDMA WRITE of 512 bytes from A to `va` through B's key `imr`: the page fault B's EQ
/// reports for it (its rkey and address checked), the WRITE waiting.
fn write_faults(p: &mut RcPair, imr: u32, va: u64) -> (u8, u32) {
    let lkey_a = p.a.create_mkey(false, true);
    let src = p.a.alloc(4096, 4096);
    p.a.write(src, &[0x5a; 512]);
    let w = wqe_of(
        &p.qp_a.sq,
        opcode::RDMA_WRITE,
        (va, imr),
        (src, lkey_a),
        512,
    );
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    assert!(drain(&p.a, &mut p.cq_a).is_empty(), "the WRITE waits");
    let faults = page_faults(&mut p.b);
    assert_eq!(faults.len(), 1, "{faults:?}");
    let e = EqePageFaultRdma::new(&faults[0].1[..]).expect("layout");
    assert_eq!((e.r_key(), e.rdma_va()), (imr, va));
    (e.pf_type(), e.token())
}

#[test]
fn a_2_26_block_implicit_key_zapped_in_umr_chunks_faults_until_a_block_is_backed_and_again_once_zapped(
) {
    let mut p = odp_pair(true);
    let null = null_mkey(&mut p.b);
    let mut umr = Umr::new(&mut p.b);
    let imr = umr.cache_key(&mut p.b, MKC_ACCESS_MODE_KSM, KSM_ENTRIES_LA57 as u32, 0x71);
    // `mlx5r_umr_update_xlt` with ZAP: every entry the null key, in chunks of
    // MLX5_MAX_UMR_CHUNK through a data segment, the last one enabling the key. Only the
    // first 2^20 blocks here (Linux zaps all 2^26), to stay quick.
    let zapped = 1usize << 20;
    let per = MAX_UMR_CHUNK / 16;
    let zap: Vec<u8> = (0..per).flat_map(|_| ksm_entry(null, 0)).collect();
    let mut at = 0;
    while at < zapped {
        let n = per.min(zapped - at);
        let enable = (at + n == zapped).then_some((p.b.pd, 0, BLOCK_SHIFT as u8));
        umr.post(&mut p.b, imr, &zap[..n * 16], at as u64, true, enable);
        at += n;
    }
    // A block of the zapped range: a page fault; backed by a child, the WRITE lands.
    let va = (5u64 << BLOCK_SHIFT) + 0x3000;
    let (pf_type, token) = write_faults(&mut p, imr, va);
    let pages = fault_in(&mut p.b, &mut umr, imr, null, va, 512);
    resume(&mut p.b, pf_type, token, token, false).expect("PAGE_FAULT_RESUME");
    let done = completions_after_rnr(&mut p, true);
    assert_eq!(done.len(), 1, "the WRITE completed");
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ);
    assert_eq!(p.b.read(pages[0], 512), vec![0x5a; 512]);
    // `mlx5_odp_populate_xlt` zaps the block again (the child invalidated): a fault again.
    let zap4: Vec<u8> = (0..4).flat_map(|_| ksm_entry(null, 0)).collect();
    umr.post(&mut p.b, imr, &zap4, 4, false, None);
    let (pf_type, token) = write_faults(&mut p, imr, va);
    resume(&mut p.b, pf_type, token, token, true).expect("resume with error");
    let done = completions_after_rnr(&mut p, true);
    assert_eq!(done.len(), 1);
    assert_eq!(
        (cqe_opcode(&done[0]), done[0][0x37]),
        (CQE_REQ_ERR, SYND_REMOTE_ACCESS)
    );
}

#[test]
fn a_2_26_block_implicit_key_faults_on_a_block_never_loaded_and_past_its_table_is_out_of_bounds() {
    let mut p = odp_pair(true);
    let null = null_mkey(&mut p.b);
    let mut umr = Umr::new(&mut p.b);
    let imr = umr.cache_key(&mut p.b, MKC_ACCESS_MODE_KSM, KSM_ENTRIES_LA57 as u32, 0x71);
    let zap4: Vec<u8> = (0..4).flat_map(|_| ksm_entry(null, 0)).collect();
    let enable = Some((p.b.pd, 0, BLOCK_SHIFT as u8));
    umr.post(&mut p.b, imr, &zap4, 0, true, enable);
    // Block 2^25, within the table but never loaded: no entry, a page not present.
    let (pf_type, token) = write_faults(&mut p, imr, 1u64 << (25 + BLOCK_SHIFT));
    resume(&mut p.b, pf_type, token, token, true).expect("resume with error");
    assert_eq!(completions_after_rnr(&mut p, true).len(), 1);
    // Block 2^26 is past the table: out of bounds, no fault.
    let mut p = odp_pair(true);
    let null = null_mkey(&mut p.b);
    let mut umr = Umr::new(&mut p.b);
    let imr = umr.cache_key(&mut p.b, MKC_ACCESS_MODE_KSM, KSM_ENTRIES_LA57 as u32, 0x71);
    let zap4: Vec<u8> = (0..4).flat_map(|_| ksm_entry(null, 0)).collect();
    let enable = Some((p.b.pd, 0, BLOCK_SHIFT as u8));
    umr.post(&mut p.b, imr, &zap4, 0, true, enable);
    let lkey_a = p.a.create_mkey(false, true);
    let src = p.a.alloc(4096, 4096);
    let w = wqe_of(
        &p.qp_a.sq,
        opcode::RDMA_WRITE,
        (1u64 << (26 + BLOCK_SHIFT), imr),
        (src, lkey_a),
        64,
    );
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    let done = drain(&p.a, &mut p.cq_a);
    assert_eq!(done.len(), 1);
    assert_eq!(
        (cqe_opcode(&done[0]), done[0][0x37]),
        (CQE_REQ_ERR, SYND_REMOTE_ACCESS)
    );
    assert!(page_faults(&mut p.b).is_empty());
}
