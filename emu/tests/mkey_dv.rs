//! Indirect keys as rdma-core's libmlx5 creates them (`_mlx5dv_create_mkey` in
//! `providers/mlx5/verbs.c`: CREATE_MKEY of a free KLM key with `umr_en`, `lr`, `qpn`
//! 0xffffff, `translations_octword_size` the entries rounded up to four, `bsf_en` for a
//! signature key), lays out on the user's QP (`_mlx5dv_wr_mkey_configure` and
//! `mlx5_send_wr_set_mkey_layout` in `providers/mlx5/qp.c`, behind `mlx5dv_wr_mr_list`,
//! `mlx5dv_wr_mr_interleaved` and the `mlx5dv_wr_set_mkey_layout_*` setters) and invalidates
//! with IBV_WR_LOCAL_INV (`set_bind_wr` of an empty type 2 bind, with
//! `MLX5_WQE_UMR_CTRL_FLAG_CHECK_QPN`): what pyverbs' `tests/test_mlx5_mkey.py` drives.
//! A holds the key over its own memory; its WRITE from the key shows the layout.

use cxdirect_emu::testkit::rc_pair::RcPair;
use cxdirect_emu::testkit::signature_dv::{
    mkey_configure, CrcKind, DvConfigure, DvDomain, DvLayout, DvSig,
};
use cxdirect_emu::testkit::signature_pair::{post_on, sig_key};
use cxdirect_emu::testkit::umr::{b_plain_rkey, cqe_opcode, pair_without_pg, rdma_from_a, CQE_REQ};
use cxdirect_emu::testkit::window::{local_inv_wqe, UNBOUND};
use cxdirect_emu::testkit::Host;
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::mkey::{mkey_from_index, CreateMkeyIn, CreateMkeyOut, MKC_ACCESS_MODE_KLM};
use cxdirect_hw::wqe::opcode;

const CQE_REQ_ERR: u8 = 0xd;

/// CREATE_MKEY as `_mlx5dv_create_mkey` sends it for `max_entries` 4 without a signature:
/// variant 0.
fn dv_create_mkey(h: &mut Host) -> u32 {
    let pd = h.pd;
    let mut input = Host::input(Opcode::CreateMkey, 0, 0x110);
    CreateMkeyIn::new(&mut input[..])
        .expect("layout")
        .memory_key_mkey_entry_mut()
        .set_access_mode_1_0(MKC_ACCESS_MODE_KLM)
        .set_free(true)
        .set_umr_en(true)
        .set_pd(pd)
        .set_translations_octword_size(4)
        .set_lr(true)
        .set_qpn(UNBOUND)
        .set_mkey_7_0(0);
    let out = h
        .exec(&input, 16)
        .expect("CREATE_MKEY of _mlx5dv_create_mkey");
    mkey_from_index(
        CreateMkeyOut::new(&out[..]).expect("layout").mkey_index(),
        0,
    )
}

/// A's memory of 128 bytes (byte i holds i) under a physical key: (address, lkey).
fn a_memory(p: &mut RcPair) -> (u64, u32) {
    let dma = p.a.create_mkey(false, true);
    let buf = p.a.alloc(128, 4096);
    p.a.write(buf, &(0..128u8).collect::<Vec<_>>());
    (buf, dma)
}

/// The configure chain of `reg_mr_list` / `reg_mr_interleaved` (local write, no signature)
/// on A's QP: A's completions.
fn a_configure(p: &mut RcPair, key: u32, layout: DvLayout) -> Vec<Vec<u8>> {
    let wqes = mkey_configure(
        &mut p.qp_a.sq,
        &DvConfigure {
            key,
            psvs: (0, 0),
            access: (true, false, false, false),
            layout,
            mem: None,
            wire: None,
            check_mask: 0,
            err_count: None,
            keep_signature: true,
        },
    );
    post_on(p, false, &wqes)
}

/// A's WRITE of `len` bytes from offset 0 of its key `key` into B's memory: A's completions
/// and the bytes B got.
fn write_to_b(p: &mut RcPair, key: u32, len: usize) -> (Vec<Vec<u8>>, Vec<u8>) {
    let rkey = b_plain_rkey(p, 0x31);
    let dst = p.b.alloc(len as u64, 4096);
    let done = rdma_from_a(p, opcode::RDMA_WRITE, (dst, rkey), (0, key), len as u32);
    (done, p.b.read(dst, len))
}

/// IBV_WR_LOCAL_INV of `key` on A's QP (`invalidate_mkeys`): A's completions.
fn a_local_inv(p: &mut RcPair, key: u32) -> Vec<Vec<u8>> {
    let w = local_inv_wqe(&p.qp_a.sq, p.qp_a.qpn, key);
    p.qp_a.sq.pi = p.qp_a.sq.pi.wrapping_add((w.len() / 64) as u16);
    post_on(p, false, &[w])
}

/// `test_mkey_list`: two SGEs of 8 bytes at offsets 0 and 64 of the MR; the key reads
/// them back to back, and IBV_WR_LOCAL_INV (CHECK_QPN on a key bound to no QP) frees it.
#[test]
fn mlx5dv_wr_mr_list_lays_out_the_key_and_ibv_wr_local_inv_frees_it() {
    let mut p = pair_without_pg();
    let (buf, dma) = a_memory(&mut p);
    let key = dv_create_mkey(&mut p.a);
    let done = a_configure(
        &mut p,
        key,
        DvLayout::List(vec![(buf, 8, dma), (buf + 64, 8, dma)]),
    );
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ, "the layout UMR is taken");
    let (done, got) = write_to_b(&mut p, key, 16);
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ);
    let want: Vec<u8> = (0..8).chain(64..72).collect();
    assert_eq!(got, want);
    let done = a_local_inv(&mut p, key);
    assert_eq!(
        cqe_opcode(&done[0]),
        CQE_REQ,
        "IBV_WR_LOCAL_INV of an mlx5dv key"
    );
    let (done, _) = write_to_b(&mut p, key, 16);
    assert_eq!(
        cqe_opcode(&done[0]),
        CQE_REQ_ERR,
        "the freed key gathers nothing"
    );
}

/// `test_mkey_sig_crc`: a signature key (`bsf_en`) configured with a CRC32 wire domain over
/// one SGE of 512 bytes is invalidated by IBV_WR_LOCAL_INV from the QP that configured it.
#[test]
fn ibv_wr_local_inv_frees_an_mlx5dv_signature_key() {
    let mut p = pair_without_pg();
    let dma = p.a.create_mkey(false, true);
    let buf = p.a.alloc(512, 4096);
    let (key, psvs) = sig_key(&mut p.a, 0);
    let wire = DvDomain {
        sig: DvSig::Crc {
            kind: CrcKind::Crc32,
            seed: 0xffff_ffff,
        },
        selector: 1,
    };
    let wqes = mkey_configure(
        &mut p.qp_a.sq,
        &DvConfigure {
            key,
            psvs,
            access: (true, false, false, false),
            layout: DvLayout::List(vec![(buf, 512, dma)]),
            mem: None,
            wire: Some(wire),
            check_mask: 0xff,
            err_count: Some(1),
            keep_signature: false,
        },
    );
    let done = post_on(&mut p, false, &wqes);
    assert_eq!(
        cqe_opcode(&done[0]),
        CQE_REQ,
        "the configure chain is taken"
    );
    let done = a_local_inv(&mut p, key);
    assert_eq!(
        cqe_opcode(&done[0]),
        CQE_REQ,
        "IBV_WR_LOCAL_INV of a signature key"
    );
}

/// `test_mkey_interleaved` / `_new_api`: `mlx5dv_wr_mr_interleaved` with repeat count 3 of
/// two entries (8 bytes of every 10 at offsets 0 and 64 of the MR) writes a repeated block
/// (`umr_strided_seg_create`) with the inline flag alone; the key's 48 bytes are the cycles
/// end to end, gathered and scattered, and IBV_WR_LOCAL_INV frees it (a byte past the last
/// cycle is out of bounds: `objects::repeat`'s own tests).
#[test]
fn mlx5dv_wr_mr_interleaved_lays_out_a_repeated_block() {
    let mut p = pair_without_pg();
    let (buf, dma) = a_memory(&mut p);
    let key = dv_create_mkey(&mut p.a);
    let layout = DvLayout::Interleaved(3, vec![(buf, 8, 2, dma), (buf + 64, 8, 2, dma)]);
    let done = a_configure(&mut p, key, layout);
    assert_eq!(
        cqe_opcode(&done[0]),
        CQE_REQ,
        "the repeated block UMR is taken"
    );
    let (done, got) = write_to_b(&mut p, key, 48);
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ);
    let want: Vec<u8> = (0..3u8)
        .flat_map(|c| (10 * c..10 * c + 8).chain(64 + 10 * c..64 + 10 * c + 8))
        .collect();
    assert_eq!(
        got, want,
        "each cycle takes 8 bytes of each entry, 10 further each cycle"
    );
    // A READ scatters into the key (the server's receive of test_mlx5_mkey.py's traffic).
    let rkey = b_plain_rkey(&mut p, 0x32);
    let src = p.b.alloc(16, 4096);
    p.b.write(src, &[0xee; 16]);
    let done = rdma_from_a(&mut p, opcode::RDMA_READ, (src, rkey), (0, key), 16);
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ);
    assert_eq!(p.a.read(buf, 10), [&[0xee; 8][..], &[8, 9]].concat());
    assert_eq!(p.a.read(buf + 64, 10), [&[0xee; 8][..], &[72, 73]].concat());
    let done = a_local_inv(&mut p, key);
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ);
    let (done, _) = write_to_b(&mut p, key, 16);
    assert_eq!(
        cqe_opcode(&done[0]),
        CQE_REQ_ERR,
        "the freed key gathers nothing"
    );
}
