//! Memory registration as Linux 6.12's mlx5_ib performs it: CREATE_MKEY as `reg_create` and
//! `_mlx5_alloc_mkey_descs` build it, the REG_UMR QP `mlx5r_umr_resource_init` opens, the
//! UMR WQEs `mlx5r_umr_post_send` posts on it (`mlx5r_umr_revoke_mr`,
//! `mlx5r_umr_update_mr_pas`, `mlx5r_umr_rereg_pd_access`), and fast registration, local
//! invalidation and remote invalidation as kernel ULPs post them on their own RC QPs
//! (`set_reg_wr`, `set_linv_wr` in `drivers/infiniband/hw/mlx5/wr.c`).

use cxdirect_emu::testkit::rc::RcPair;
use cxdirect_emu::testkit::umr::{
    alloc_mr, cqe_opcode, drain, local_inv_wqe, mtt_list, pair_without_pg, placeholder_sq,
    rdma_wqe, umr_wqe, List, CQE_REQ,
};
use cxdirect_emu::testkit::{Host, Sq};
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::mkey::{mkey_from_index, CreateMkeyIn, CreateMkeyOut, Mkc, MKC_ACCESS_MODE_MTT};
use cxdirect_hw::umr::{flags, mkey_mask, UmrCtrlSeg};
use cxdirect_hw::wqe::{self, opcode, CtrlSeg};

const CQE_REQ_ERR: u8 = 0xd;
const CQE_RESP_SEND_INV: u8 = 0x4;
const SYND_LOCAL_PROT: u8 = 0x04;
const SYND_REMOTE_ACCESS: u8 = 0x13;

/// A pair of functions without `pg` (`EmuConfig::odp` off): the keys here are built as
/// mlx5_ib builds them then (bare page addresses from `reg_create`); `odp.rs` has the keys of
/// a device with `pg`.
fn pair() -> RcPair {
    pair_without_pg()
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed))
        .collect()
}

/// IB access flags as mlx5_ib's `set_mkc_access_pd_addr_fields` maps them.
#[derive(Clone, Copy)]
struct Access {
    remote_read: bool,
    remote_write: bool,
    local_write: bool,
}

const ALL: Access = Access {
    remote_read: true,
    remote_write: true,
    local_write: true,
};

/// `set_mkc_access_pd_addr_fields`: lr always, the rest from the access flags, `qpn`
/// 0xffffff, the PD and the start address.
fn set_access_pd_addr(mkc: &mut Mkc<&mut [u8]>, acc: Access, start: u64, pd: u32) {
    mkc.set_a(false)
        .set_rw(acc.remote_write)
        .set_rr(acc.remote_read)
        .set_lw(acc.local_write)
        .set_lr(true)
        .set_pd(pd)
        .set_qpn(0xff_ffff)
        .set_start_addr(start);
}

/// `get_octo_len`: octowords of an MTT list for `[addr, addr + len)` in pages of
/// `2^page_shift`.
fn octo_len(addr: u64, len: u64, page_shift: u32) -> u32 {
    let page = 1u64 << page_shift;
    let npages = (len + (addr & (page - 1))).div_ceil(page);
    npages.div_ceil(2) as u32
}

/// CREATE_MKEY as Linux 6.12's `reg_create` builds it on a device without the `pg`
/// capability: `pg_access` 0, bare page addresses in the MTT (`mlx5_ib_populate_pas` with no
/// access bits), `umr_en` 1, `free` = !populate, `translations_octword_size` and (when
/// populating) `translations_octword_actual_size` from `get_octo_len`, the input sized for
/// the pages rounded up to two. `pages` are the DMA addresses of the region's pages.
#[allow(clippy::too_many_arguments)]
fn reg_create(
    h: &mut Host,
    pd: u32,
    iova: u64,
    len: u64,
    pages: &[u64],
    acc: Access,
    populate: bool,
    variant: u8,
) -> Result<u32, cxdirect_emu::testkit::CmdFail> {
    let page_shift = 12;
    let entries = if populate {
        pages.len().next_multiple_of(2)
    } else {
        0
    };
    let mut input = Host::input(Opcode::CreateMkey, 0, 0x110 + 8 * entries);
    let mut cmd = CreateMkeyIn::new(&mut input[..]).expect("layout");
    if populate {
        for (i, &page) in pages.iter().enumerate() {
            cmd.set_mtt(i, page).expect("room");
        }
    }
    cmd.set_pg_access(false);
    {
        let mut mkc = cmd.memory_key_mkey_entry_mut();
        set_access_pd_addr(&mut mkc, acc, iova, pd);
        mkc.set_free(!populate)
            .set_access_mode_1_0(MKC_ACCESS_MODE_MTT)
            .set_umr_en(true)
            .set_len(len)
            .set_bsf_octword_size(0)
            .set_translations_octword_size(octo_len(iova, len, page_shift))
            .set_log_page_size(page_shift as u8)
            .set_mkey_7_0(variant);
    }
    if populate {
        cmd.set_translations_octword_actual_size(octo_len(iova, len, page_shift));
    }
    let out = h.exec(&input, 16)?;
    let index = CreateMkeyOut::new(&out[..]).expect("layout").mkey_index();
    Ok(mkey_from_index(index, variant))
}

/// Three pages of B's memory, in reverse order of their addresses so that the key's
/// translation is no identity, filled with zeros.
fn scattered_pages(h: &mut Host) -> Vec<u64> {
    let mut pages: Vec<u64> = (0..3).map(|_| h.alloc(4096, 4096)).collect();
    pages.reverse();
    for &p in &pages {
        h.write(p, &[0; 4096]);
    }
    pages
}

/// Reads `len` bytes at key offset `offset` of a region whose pages are `pages`, starting
/// `first` bytes into the first page.
fn read_through(h: &Host, pages: &[u64], first: u64, offset: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    let mut at = first + offset;
    while out.len() < len {
        let page = pages[(at / 4096) as usize];
        let n = (4096 - at % 4096).min((len - out.len()) as u64);
        out.extend(h.read(page + at % 4096, n as usize));
        at += n;
    }
    out
}

#[test]
fn a_key_as_reg_create_builds_it_without_pg_carries_rc_write_and_read() {
    let mut p = pair();
    let lkey_a = p.a.create_mkey(false, true);
    let pd_b = p.b.pd;
    let pages = scattered_pages(&mut p.b);
    // A user buffer 0x234 bytes into its first page, as `ibv_reg_mr` of a malloc'd buffer.
    let iova = 0x7f12_3456_7234u64;
    let len = 2 * 4096 + 100;
    let rkey = reg_create(&mut p.b, pd_b, iova, len, &pages, ALL, true, 0x17)
        .expect("CREATE_MKEY as reg_create builds it");
    let src = p.a.alloc(len, 4096);
    let data = pattern(len as usize, 3);
    p.a.write(src, &data);
    let w = rdma_wqe(
        &p.qp_a.sq,
        opcode::RDMA_WRITE,
        (iova, rkey),
        (src, lkey_a),
        len as u32,
        0,
    );
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    let done = drain(&p.a, &mut p.cq_a);
    assert_eq!(done.len(), 1);
    assert_eq!(
        cqe_opcode(&done[0]),
        CQE_REQ,
        "the WRITE through the bare MTT completed"
    );
    assert_eq!(read_through(&p.b, &pages, 0x234, 0, len as usize), data);
    // READ the middle back, across a page boundary.
    let dst = p.a.alloc(4096, 4096);
    let w = rdma_wqe(
        &p.qp_a.sq,
        opcode::RDMA_READ,
        (iova + 4000, rkey),
        (dst, lkey_a),
        300,
        0,
    );
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    let done = drain(&p.a, &mut p.cq_a);
    assert_eq!(done.len(), 1);
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ, "the READ completed");
    assert_eq!(p.a.read(dst, 300), data[4000..4300].to_vec());
}

/// `mlx5r_umr_set_access_flags` / `set_mkc_access_pd_addr_fields` for UMR segments.
fn set_access(seg: &mut Mkc<&mut [u8]>, acc: Access) {
    seg.set_a(false)
        .set_rw(acc.remote_write)
        .set_rr(acc.remote_read)
        .set_lw(acc.local_write)
        .set_lr(true);
}

/// `get_umr_update_access_mask` on a device without atomics through UMR or relaxed-ordering
/// UMR caps: lr, lw, rr, rw.
const ACCESS_MASK: u64 = mkey_mask::LR | mkey_mask::LW | mkey_mask::RR | mkey_mask::RW;

/// Posts `w` on `sq` of host `h`, settles the pair, and returns the CQEs on `cq`.
fn run(p: &mut RcPair, on_b: bool, sq: &mut Sq, w: &[u8]) -> Vec<Vec<u8>> {
    if on_b {
        p.b.post(sq, w, false);
    } else {
        p.a.post(sq, w, false);
    }
    p.settle();
    if on_b {
        drain(&p.b, &mut p.cq_b)
    } else {
        drain(&p.a, &mut p.cq_a)
    }
}

/// A's WRITE of `data` at `iova` through `rkey`; the requester CQE's opcode and syndrome.
fn write_from_a(p: &mut RcPair, iova: u64, rkey: u32, data: &[u8]) -> (u8, u8) {
    let lkey = p.a.create_mkey(false, true);
    let src = p.a.alloc(data.len() as u64, 4096);
    p.a.write(src, data);
    let w = rdma_wqe(
        &p.qp_a.sq,
        opcode::RDMA_WRITE,
        (iova, rkey),
        (src, lkey),
        data.len() as u32,
        0,
    );
    let mut sq = std::mem::replace(&mut p.qp_a.sq, placeholder_sq());
    let done = run(p, false, &mut sq, &w);
    p.qp_a.sq = sq;
    assert_eq!(done.len(), 1, "one completion for the WRITE");
    (cqe_opcode(&done[0]), done[0][0x37])
}

/// A's READ of `len` bytes at `iova` through `rkey`: the completion and the bytes.
fn read_from_a(p: &mut RcPair, iova: u64, rkey: u32, len: usize) -> (u8, Vec<u8>) {
    let lkey = p.a.create_mkey(false, true);
    let dst = p.a.alloc(len as u64, 4096);
    let w = rdma_wqe(
        &p.qp_a.sq,
        opcode::RDMA_READ,
        (iova, rkey),
        (dst, lkey),
        len as u32,
        0,
    );
    let mut sq = std::mem::replace(&mut p.qp_a.sq, placeholder_sq());
    let done = run(p, false, &mut sq, &w);
    p.qp_a.sq = sq;
    assert_eq!(done.len(), 1, "one completion for the READ");
    (cqe_opcode(&done[0]), p.a.read(dst, len))
}

/// B's posting of UMR WQE `w` on its RC QP: the completions.
fn umr_on_b(p: &mut RcPair, w: &[u8]) -> Vec<Vec<u8>> {
    let mut sq = std::mem::replace(&mut p.qp_b.sq, placeholder_sq());
    let done = run(p, true, &mut sq, w);
    p.qp_b.sq = sq;
    done
}

#[test]
fn the_reg_umr_qp_enables_reloads_rereg_and_revokes_a_key_as_mlx5_ib_does() {
    let mut p = pair();
    let user_pd = p.b.pd;
    let umr_pd = p.b.alloc_pd();
    let umr_cq = p.b.create_cq(6);
    let mut umr_cq = umr_cq;
    let mut umr_sq = p.b.create_reg_umr_qp(&umr_cq, 7);
    // reg_create with populate false: free, no list, in the UMR PD (create_real_mr's cache
    // miss when UMR can load the list).
    let pages = scattered_pages(&mut p.b);
    let iova = 0x5500_0000_0100u64;
    let len = 3 * 4096 - 0x100;
    let key = reg_create(&mut p.b, umr_pd, iova, len, &[], ALL, false, 0x31).expect("free key");
    assert!(p.b.dev.memory_key(key).expect("held").free);
    // mlx5r_umr_update_mr_pas(MLX5_IB_UPD_XLT_ENABLE): the list through the UMR PD's
    // `local_dma_lkey`, padded to 64 bytes, translation offset 0, enable + access + PD +
    // translation masks. mlx5 gives kernel PDs no reserved lkey (`local_dma_lkey = 0 /* not
    // supported */`): ib_alloc_pd makes each a DMA key (mlx5_ib_get_dma_mr) in that PD, while
    // the REG_UMR QP itself has no PD. The model once checked that key against the QP's PD 0
    // and refused every user registration Linux made by UMR.
    let saved_pd = p.b.pd;
    p.b.pd = umr_pd;
    let umr_dma_lkey = p.b.create_mkey(false, true);
    p.b.pd = saved_pd;
    let list = mtt_list(&pages);
    let list_buf = p.b.alloc(64, 64);
    p.b.write(list_buf, &[list.clone(), vec![0; 64 - list.len()]].concat());
    let enable = umr_wqe(
        &umr_sq,
        key,
        wqe::fence_mode::INITIATOR_SMALL,
        flags::CHECK_NOT_FREE,
        mkey_mask::KEY
            | mkey_mask::FREE
            | ACCESS_MASK
            | mkey_mask::PD
            | mkey_mask::LEN
            | mkey_mask::PAGE_SIZE
            | mkey_mask::START_ADDR,
        4,
        Some(0),
        |seg| {
            set_access(seg, ALL);
            seg.set_pd(user_pd)
                .set_start_addr(iova)
                .set_len(len)
                .set_log_page_size(12)
                .set_qpn(0xff_ffff)
                .set_mkey_7_0(key as u8);
        },
        &List::Pointer(list_buf, umr_dma_lkey, 64),
    );
    p.b.post(&mut umr_sq, &enable, false);
    p.settle();
    let done = drain(&p.b, &mut umr_cq);
    assert_eq!(done.len(), 1, "the UMR completed");
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ);
    assert_eq!(
        done[0][0x38],
        opcode::UMR,
        "sop_drop carries the UMR opcode"
    );
    let seen = p.b.dev.memory_key(key).expect("held");
    assert!(!seen.free && seen.pd == user_pd && seen.remote_write);
    // The peer writes and reads through it.
    let data = pattern(len as usize, 9);
    assert_eq!(write_from_a(&mut p, iova, key, &data), (CQE_REQ, 0));
    assert_eq!(read_through(&p.b, &pages, 0x100, 0, len as usize), data);
    // mlx5r_umr_rereg_pd_access: remote read only, same PD, fail if free.
    let rereg = umr_wqe(
        &umr_sq,
        key,
        wqe::fence_mode::INITIATOR_SMALL,
        flags::CHECK_FREE,
        ACCESS_MASK | mkey_mask::PD,
        0,
        None,
        |seg| {
            let ro = Access {
                remote_write: false,
                ..ALL
            };
            set_access(seg, ro);
            seg.set_pd(user_pd)
                .set_qpn(0xff_ffff)
                .set_mkey_7_0(key as u8);
        },
        &List::Inline(Vec::new()),
    );
    p.b.post(&mut umr_sq, &rereg, false);
    p.settle();
    assert_eq!(cqe_opcode(&drain(&p.b, &mut umr_cq)[0]), CQE_REQ);
    assert!(!p.b.dev.memory_key(key).expect("held").remote_write);
    let (op, bytes) = read_from_a(&mut p, iova + 4000, key, 500);
    assert_eq!(op, CQE_REQ);
    assert_eq!(bytes, data[4000..4500].to_vec());
    // mlx5r_umr_revoke_mr: free, back to the UMR PD; the peer's READ is refused.
    let revoke = umr_wqe(
        &umr_sq,
        key,
        wqe::fence_mode::INITIATOR_SMALL,
        0,
        mkey_mask::PD | mkey_mask::FREE,
        0,
        None,
        |seg| {
            seg.set_free(true)
                .set_pd(umr_pd)
                .set_qpn(0xff_ffff)
                .set_mkey_7_0(key as u8);
        },
        &List::Inline(Vec::new()),
    );
    p.b.post(&mut umr_sq, &revoke, false);
    p.settle();
    assert_eq!(cqe_opcode(&drain(&p.b, &mut umr_cq)[0]), CQE_REQ);
    let (op, _) = read_from_a(&mut p, iova, key, 64);
    assert_eq!(op, CQE_REQ_ERR, "no access through a revoked key");
    // The QP goes back to reset and away.
    p.b.destroy_qp(umr_sq.sqn);
}

/// The IB_WR_REG_MR WQE `set_reg_wr` writes for `key` (its new variant in the low byte) over
/// `pages` at `iova` for `len` bytes: fence `umr_fence` (strong ordering), fail if not free,
/// the list inline (`umr_inline`).
fn reg_mr_wqe(sq: &Sq, key: u32, pages: &[u64], iova: u64, len: u64) -> Vec<u8> {
    cxdirect_emu::testkit::umr::reg_mr_wqe(
        sq,
        key,
        pages,
        iova,
        len,
        wqe::fence_mode::STRONG_ORDERING,
        flags::CHECK_NOT_FREE,
    )
}

/// A pair whose B holds a fast-registration key registered over three pages by REG_MR on
/// its RC QP: the key (new variant 0x01), its pages, its IOVA and length.
fn fast_registered() -> (RcPair, u32, Vec<u64>, u64, u64) {
    let mut p = pair();
    let pd = p.b.pd;
    let base = alloc_mr(&mut p.b, pd, 32, 0x00);
    let key = (base & !0xff) | 0x01;
    let pages = scattered_pages(&mut p.b);
    let (iova, len) = (0x1_0000_0200u64, 2 * 4096 + 700);
    let w = reg_mr_wqe(&p.qp_b.sq, key, &pages, iova, len);
    let done = umr_on_b(&mut p, &w);
    assert_eq!(done.len(), 1, "REG_MR completes");
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ);
    assert_eq!(
        done[0][0x38],
        opcode::UMR,
        "the requester CQE names the UMR opcode"
    );
    (p, key, pages, iova, len)
}

#[test]
fn reg_mr_on_an_rc_qp_opens_the_key_to_the_peer_and_local_inv_closes_it() {
    let (mut p, key, pages, iova, len) = fast_registered();
    let data = pattern(len as usize, 1);
    assert_eq!(write_from_a(&mut p, iova, key, &data), (CQE_REQ, 0));
    assert_eq!(read_through(&p.b, &pages, 0x200, 0, len as usize), data);
    let (op, bytes) = read_from_a(&mut p, iova + 4090, key, 100);
    assert_eq!((op, bytes), (CQE_REQ, data[4090..4190].to_vec()));
    // The old variant is no key any more.
    let (op, _) = read_from_a(&mut p, iova, key & !0xff, 8);
    assert_eq!(op, CQE_REQ_ERR, "the variant before REG_MR is refused");
    let p = {
        let (mut p, key, _, iova, _) = fast_registered();
        let w = local_inv_wqe(&p.qp_b.sq, key);
        let done = umr_on_b(&mut p, &w);
        assert_eq!(cqe_opcode(&done[0]), CQE_REQ, "LOCAL_INV completes");
        assert!(p.b.dev.memory_key(key).expect("held").free);
        assert_eq!(
            write_from_a(&mut p, iova, key, &[1; 64]),
            (CQE_REQ_ERR, SYND_REMOTE_ACCESS),
            "a remote access error through the invalidated key"
        );
        p
    };
    p.settle();
}

#[test]
fn a_new_variant_by_reg_mr_after_local_inv_is_honoured_and_the_old_one_refused() {
    let (mut p, key, pages, iova, len) = fast_registered();
    let w = local_inv_wqe(&p.qp_b.sq, key);
    assert_eq!(cqe_opcode(&umr_on_b(&mut p, &w)[0]), CQE_REQ);
    let next = (key & !0xff) | 0x02;
    let w = reg_mr_wqe(&p.qp_b.sq, next, &pages, iova, len);
    assert_eq!(cqe_opcode(&umr_on_b(&mut p, &w)[0]), CQE_REQ);
    assert_eq!(write_from_a(&mut p, iova, next, &[7; 100]), (CQE_REQ, 0));
    assert_eq!(
        write_from_a(&mut p, iova, key, &[8; 100]).0,
        CQE_REQ_ERR,
        "the variant before is refused"
    );
}

#[test]
fn a_send_with_invalidate_frees_a_fast_registered_key() {
    let (mut p, key, _, iova, _) = fast_registered();
    let lkey_a = p.a.create_mkey(false, true);
    let lkey_b = p.b.create_mkey(false, true);
    let dst = p.b.alloc(4096, 4096);
    p.b.post_rc_recv(&mut p.qp_b, dst, 4096, lkey_b);
    let src = p.a.alloc(4096, 4096);
    let mut w = rdma_wqe(&p.qp_a.sq, opcode::SEND_INVAL, (0, 0), (src, lkey_a), 64, 0);
    // A SEND's segments: control then data (no remote address segment).
    w.copy_within(32..48, 16);
    w[32..48].fill(0);
    CtrlSeg::new(&mut w[..16])
        .expect("layout")
        .set_ds(2)
        .set_imm(key);
    let mut sq = std::mem::replace(&mut p.qp_a.sq, placeholder_sq());
    let done = run(&mut p, false, &mut sq, &w);
    p.qp_a.sq = sq;
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ);
    let resp = drain(&p.b, &mut p.cq_b);
    assert_eq!(cqe_opcode(&resp[0]), CQE_RESP_SEND_INV);
    assert!(p.b.dev.memory_key(key).expect("held").free);
    assert_eq!(
        write_from_a(&mut p, iova, key, &[1; 64]),
        (CQE_REQ_ERR, SYND_REMOTE_ACCESS)
    );
}

#[test]
fn hostile_umr_wqes_complete_in_error_and_change_nothing() {
    type Make = fn(&mut RcPair) -> (Vec<u8>, u32);
    let cases: [(&str, Make); 5] = [
        ("list past the key's table", |p| {
            let pd = p.b.pd;
            let key = alloc_mr(&mut p.b, pd, 4, 0);
            let pages: Vec<u64> = (0..40).map(|i| 0x10_0000 + i * 4096).collect();
            (reg_mr_wqe(&p.qp_b.sq, key | 1, &pages, 0, 40 * 4096), key)
        }),
        ("octowords past the inline list", |p| {
            let pd = p.b.pd;
            let key = alloc_mr(&mut p.b, pd, 4, 0);
            let mut w = reg_mr_wqe(&p.qp_b.sq, key | 1, &[0x10_0000], 0, 4096);
            UmrCtrlSeg::new(&mut w[16..64])
                .expect("layout")
                .set_xlt_octowords(64);
            (w, key)
        }),
        ("a key without umr_en", |p| {
            let key = p.b.create_mkey(false, true);
            (local_inv_wqe(&p.qp_b.sq, key), key)
        }),
        ("a key of another PD", |p| {
            let other = p.b.alloc_pd();
            let key = alloc_mr(&mut p.b, other, 4, 0);
            (reg_mr_wqe(&p.qp_b.sq, key | 1, &[0x10_0000], 0, 4096), key)
        }),
        ("REG_MR on a key in use", |p| {
            let pd = p.b.pd;
            let key = alloc_mr(&mut p.b, pd, 4, 0);
            let w = reg_mr_wqe(&p.qp_b.sq, key | 1, &[0x10_0000], 0, 4096);
            assert_eq!(cqe_opcode(&umr_on_b(p, &w)[0]), CQE_REQ);
            (
                reg_mr_wqe(&p.qp_b.sq, key | 2, &[0x20_0000], 0, 4096),
                key | 1,
            )
        }),
    ];
    for (what, make) in cases {
        let mut p = pair();
        let (w, key) = make(&mut p);
        let before =
            p.b.dev
                .memory_key(key)
                .map(|k| (k.free, k.mtt, k.start, k.len));
        let done = umr_on_b(&mut p, &w);
        assert_eq!(done.len(), 1, "{what}: one completion");
        assert_eq!(cqe_opcode(&done[0]), CQE_REQ_ERR, "{what}: an error CQE");
        assert_eq!(done[0][0x37], SYND_LOCAL_PROT, "{what}: local protection");
        let after =
            p.b.dev
                .memory_key(key)
                .map(|k| (k.free, k.mtt, k.start, k.len));
        assert_eq!(before, after, "{what}: the key is unchanged");
    }
}

#[test]
fn a_reg_umr_qp_takes_no_rc_opcode() {
    let mut p = pair();
    let mut cq = p.b.create_cq(6);
    let mut sq = p.b.create_reg_umr_qp(&cq, 6);
    let w = rdma_wqe(&sq, opcode::RDMA_WRITE, (0, 0), (0, 0), 0, 0);
    p.b.post(&mut sq, &w, false);
    p.settle();
    let done = drain(&p.b, &mut cq);
    assert_eq!(
        cqe_opcode(&done[0]),
        CQE_REQ_ERR,
        "a WRITE on the REG_UMR QP is refused"
    );
}

#[test]
fn a_umr_behind_a_write_awaiting_its_ack_completes_after_it() {
    let mut p = pair();
    let pd_a = p.a.pd;
    let key = alloc_mr(&mut p.a, pd_a, 4, 0) | 1;
    let lkey = p.a.create_mkey(false, true);
    let pd_b = p.b.pd;
    let pages = scattered_pages(&mut p.b);
    let rkey = reg_create(&mut p.b, pd_b, 0x9000, 4096, &pages[..1], ALL, true, 5).expect("rkey");
    let src = p.a.alloc(4096, 4096);
    let write = rdma_wqe(
        &p.qp_a.sq,
        opcode::RDMA_WRITE,
        (0x9000, rkey),
        (src, lkey),
        256,
        0,
    );
    p.a.write_wqe(&mut p.qp_a.sq, &write);
    let reg = reg_mr_wqe(&p.qp_a.sq, key, &[src], src, 4096);
    p.a.write_wqe(&mut p.qp_a.sq, &reg);
    p.a.ring(&mut p.qp_a.sq, &reg, false);
    // Before the peer answers, neither has completed: the UMR waits behind the WRITE.
    assert!(
        drain(&p.a, &mut p.cq_a).is_empty(),
        "nothing completes before the ACK"
    );
    assert!(
        !p.a.dev.memory_key(key).expect("held").free,
        "the key changed at once"
    );
    p.settle();
    let done = drain(&p.a, &mut p.cq_a);
    assert_eq!(done.len(), 2);
    assert_eq!(done[0][0x38], opcode::RDMA_WRITE, "the WRITE first");
    assert_eq!(done[1][0x38], opcode::UMR, "then the UMR");
    assert!(done.iter().all(|c| cqe_opcode(c) == CQE_REQ));
}

/// With `umr_extended_translation_offset` advertised, mlx5_ib loads a region of 2^16 pages or
/// more by UMR (`mlx5r_umr_can_load_pas`), chunk by chunk, each chunk's octoword offset split
/// into `xlt_offset` and `xlt_offset_47_16` (`mlx5r_umr_update_offset`). A chunk at octoword
/// 0x10000 (MTT entry 0x20000) lands there: the peer's WRITE at that page of the region reaches
/// the chunk's pages.
#[test]
fn a_umr_past_16_bits_of_translation_offset_loads_where_mlx5_ib_means() {
    let mut p = pair();
    let general =
        p.b.query_cap(cxdirect_hw::hca::cap_type::GENERAL_DEVICE, true);
    let general = cxdirect_hw::caps::CmdHcaCap::new(&general[0x10..]).unwrap();
    assert!(general.umr_extended_translation_offset());
    let user_pd = p.b.pd;
    let umr_pd = p.b.alloc_pd();
    let mut umr_cq = p.b.create_cq(6);
    let mut umr_sq = p.b.create_reg_umr_qp(&umr_cq, 7);
    // A free key for 2^17 + 2 pages (512 MiB), from reg_create with populate false.
    let iova = 0x7700_0000_0000u64;
    let npages = (1u64 << 17) + 2;
    let len = npages * 4096;
    let key = reg_create(&mut p.b, umr_pd, iova, len, &[], ALL, false, 0x44).expect("free key");
    let saved_pd = p.b.pd;
    p.b.pd = umr_pd;
    let umr_dma_lkey = p.b.create_mkey(false, true);
    p.b.pd = saved_pd;
    // The last chunk: MTT entries 0x20000 and 0x20001 (two pages), padded to 64 bytes.
    let pages = scattered_pages(&mut p.b);
    let list = mtt_list(&pages[..2]);
    let list_buf = p.b.alloc(64, 64);
    p.b.write(list_buf, &[list.clone(), vec![0; 64 - list.len()]].concat());
    let offset = 0x1_0000u64;
    let enable = umr_wqe(
        &umr_sq,
        key,
        wqe::fence_mode::INITIATOR_SMALL,
        flags::CHECK_NOT_FREE,
        mkey_mask::KEY
            | mkey_mask::FREE
            | ACCESS_MASK
            | mkey_mask::PD
            | mkey_mask::LEN
            | mkey_mask::PAGE_SIZE
            | mkey_mask::START_ADDR,
        4,
        Some(offset),
        |seg| {
            set_access(seg, ALL);
            seg.set_pd(user_pd)
                .set_start_addr(iova)
                .set_len(len)
                .set_log_page_size(12)
                .set_qpn(0xff_ffff)
                .set_mkey_7_0(key as u8);
        },
        &List::Pointer(list_buf, umr_dma_lkey, 64),
    );
    let u = UmrCtrlSeg::new(&enable[16..64]).unwrap();
    assert_eq!((u.xlt_offset(), u.xlt_offset_47_16()), (0, 1));
    p.b.post(&mut umr_sq, &enable, false);
    p.settle();
    let done = drain(&p.b, &mut umr_cq);
    assert_eq!(done.len(), 1, "the UMR completed");
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ, "{:02x?}", &done[0][0x30..]);
    // Page 0x20000 of the region is the chunk's first page, 0x20001 its second.
    let at = iova + (offset * 2) * 4096;
    let data = pattern(4096 + 512, 5);
    assert_eq!(write_from_a(&mut p, at + 0x100, key, &data), (CQE_REQ, 0));
    assert_eq!(read_through(&p.b, &pages[..2], 0, 0x100, data.len()), data);
}
