//! Fast registration as kernel ULPs post it on their own RC QPs (`set_reg_wr`, `set_linv_wr`
//! in Linux 6.12's `drivers/infiniband/hw/mlx5/wr.c`): IB_WR_REG_MR opening a key of
//! `ib_alloc_mr` to the peer, IB_WR_LOCAL_INV and a SEND with invalidate closing it, a new
//! variant honoured and the old one refused, and hostile UMR WQEs completing in error.

use cxdirect_emu::testkit::pattern::pattern_by;
use cxdirect_emu::testkit::rc_pair::RcPair;
use cxdirect_emu::testkit::umr::{
    alloc_mr, cqe_opcode, drain, local_inv_wqe, pair_without_pg, placeholder_sq, post_and_drain,
    rdma_wqe, read_from_a, read_through, reg_mr_wqe, scattered_pages, umr_on_b, write_from_a,
    CQE_REQ,
};
use cxdirect_hw::umr::UmrCtrlSeg;
use cxdirect_hw::wqe::{opcode, CtrlSeg};

const CQE_REQ_ERR: u8 = 0xd;
const CQE_RESP_SEND_INV: u8 = 0x4;
const SYND_LOCAL_PROT: u8 = 0x04;
const SYND_REMOTE_ACCESS: u8 = 0x13;

/// A pair of functions without `pg`, as in `umr.rs`.
fn pair() -> RcPair {
    pair_without_pg()
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    pattern_by(len, 29, seed)
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
    let done = post_and_drain(&mut p, false, &mut sq, &w);
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
