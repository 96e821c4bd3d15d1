//! Memory registration as Linux 6.12's mlx5_ib performs it: CREATE_MKEY as `reg_create` and
//! `_mlx5_alloc_mkey_descs` build it, the REG_UMR QP `mlx5r_umr_resource_init` opens, the
//! UMR WQEs `mlx5r_umr_post_send` posts on it (`mlx5r_umr_revoke_mr`,
//! `mlx5r_umr_update_mr_pas`, `mlx5r_umr_rereg_pd_access`), and fast registration, local
//! invalidation and remote invalidation as kernel ULPs post them on their own RC QPs
//! (`set_reg_wr`, `set_linv_wr` in `drivers/infiniband/hw/mlx5/wr.c`; `umr_fast_reg.rs` has
//! the fast-registration tests).

use cxdirect_emu::testkit::pattern::pattern_by;
use cxdirect_emu::testkit::rc_pair::RcPair;
use cxdirect_emu::testkit::umr::{
    alloc_mr, cqe_opcode, drain, mtt_list, pair_without_pg, rdma_wqe, read_from_a, read_through,
    reg_mr_wqe, scattered_pages, umr_wqe, write_from_a, List, CQE_REQ,
};
use cxdirect_emu::testkit::Host;
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::mkey::{mkey_from_index, CreateMkeyIn, CreateMkeyOut, Mkc, MKC_ACCESS_MODE_MTT};
use cxdirect_hw::umr::{flags, mkey_mask, UmrCtrlSeg};
use cxdirect_hw::wqe::{self, opcode};

const CQE_REQ_ERR: u8 = 0xd;

/// A pair of functions without `pg` (`EmuConfig::odp` off): the keys here are built as
/// mlx5_ib builds them then (bare page addresses from `reg_create`); `odp.rs` has the keys of
/// a device with `pg`.
fn pair() -> RcPair {
    pair_without_pg()
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    pattern_by(len, 29, seed)
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
