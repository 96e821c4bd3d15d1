//! Signature (T10-DIF) offload as Linux 6.12's mlx5_ib drives it for NVMe over RDMA and iSER
//! with protection information: CREATE_PSV as `mlx5_core_create_psv` sends it, the integrity
//! key `mlx5_alloc_integrity_descs` creates (`bsf_en`), the WQEs `handle_reg_mr_integrity`
//! posts (the signature UMR of `set_sig_umr_wr` with the BSF of `mlx5_set_bsf`, then two
//! SET_PSV of `set_psv_wr`), and protection inserted on the wire through the key. The checks
//! and the SIG_ERR CQE are in `signature_check.rs`, memory and wire of different block sizes
//! in `signature_blocks.rs`.

use cxdirect_emu::testkit::pattern::pattern;
use cxdirect_emu::testkit::rc_pair::RcPair;
use cxdirect_emu::testkit::signature::{
    create_psv, destroy_psv, integrity_key, reg_mr_integrity, with_dif, Dif, Integrity, SigMemory,
    TYPE1,
};
use cxdirect_emu::testkit::signature_pair::{post_on, register_data, sig_key};
use cxdirect_emu::testkit::umr::{
    b_plain_rkey, cqe_opcode, drain, pair_without_pg, rdma_from_a, rdma_wqe, CQE_REQ,
};
use cxdirect_hw::mkey::MKC_ACCESS_MODE_KLM;
use cxdirect_hw::sig::{crc16_t10dif, ip_checksum, BSF_OCTOWORDS};
use cxdirect_hw::wqe::{self, opcode, CtrlSeg};

const BLOCK: usize = 512;
const UNIT: usize = BLOCK + 8;

#[test]
fn sho_is_reported_so_that_mlx5_ib_reports_integrity_handover() {
    let mut p = pair_without_pg();
    let general =
        p.a.query_cap(cxdirect_hw::hca::cap_type::GENERAL_DEVICE, true);
    let g = cxdirect_hw::caps::CmdHcaCap::new(&general[0x10..0x110]).expect("layout");
    // mlx5_ib_query_device: IBK_INTEGRITY_HANDOVER and the T10-DIF caps on `sho` alone;
    // process_create_flags takes IB_QP_CREATE_INTEGRITY_EN on it too.
    assert!(g.sho());
}

#[test]
fn crc16_t10dif_gives_the_catalogue_check_value() {
    assert_eq!(crc16_t10dif(b"123456789"), 0xd0db);
}

#[test]
fn create_psv_and_destroy_psv_as_mlx5_core_sends_them() {
    let mut p = pair_without_pg();
    let pd = p.b.pd;
    let psvs = create_psv(&mut p.b, pd, 2).expect("two PSVs, memory and wire");
    assert_eq!(psvs.len(), 2);
    assert_ne!(psvs[0], psvs[1]);
    assert!(create_psv(&mut p.b, pd, 0).is_err(), "no PSV is no command");
    assert!(create_psv(&mut p.b, pd, 5).is_err(), "MLX5_MAX_PSVS is 4");
    assert!(
        create_psv(&mut p.b, 0xabcd, 1).is_err(),
        "a PD that does not exist"
    );
    for psv in psvs {
        destroy_psv(&mut p.b, psv).expect("DESTROY_PSV");
        assert!(
            destroy_psv(&mut p.b, psv).is_err(),
            "a PSV is destroyed once"
        );
    }
}

#[test]
fn an_integrity_key_is_created_as_mlx5_alloc_integrity_descs_builds_it() {
    let mut p = pair_without_pg();
    let pd = p.b.pd;
    let key = integrity_key(&mut p.b, pd, MKC_ACCESS_MODE_KLM, BSF_OCTOWORDS)
        .expect("a KLM key with bsf_en and a four-octoword BSF");
    assert!(p.b.dev.memory_key(key).expect("held").free);
    assert!(
        integrity_key(&mut p.b, pd, MKC_ACCESS_MODE_KLM, 2).is_err(),
        "a BSF of another size"
    );
    assert!(
        integrity_key(
            &mut p.b,
            pd,
            cxdirect_hw::mkey::MKC_ACCESS_MODE_MTT,
            BSF_OCTOWORDS
        )
        .is_err(),
        "a BSF on an MTT key"
    );
}

/// A's signature key over `data` in A's memory (no protection in memory), DIF `wire` on the
/// wire, registered on A's RC QP: the key.
fn a_key_inserting(p: &mut RcPair, data: &[u8], wire: Dif) -> u32 {
    let (key, buf, done) = register_data(p, false, data.len(), wire, 0);
    p.a.write(buf, data);
    assert_eq!(done.len(), 1, "the UMR completes; SET_PSV is not signalled");
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ);
    key
}

#[test]
fn a_write_from_a_signature_key_inserts_dif_on_the_wire() {
    let mut p = pair_without_pg();
    let data = pattern(3 * BLOCK, 7);
    let key = a_key_inserting(&mut p, &data, TYPE1);
    let wire_len = 3 * UNIT;
    let rkey = b_plain_rkey(&mut p, 0x11);
    let dst = p.b.alloc(wire_len as u64, 4096);
    let done = rdma_from_a(
        &mut p,
        opcode::RDMA_WRITE,
        (dst, rkey),
        (0, key),
        wire_len as u32,
    );
    assert_eq!(done.len(), 1, "the WRITE completes, no signature error");
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ);
    let got = p.b.read(dst, wire_len);
    assert_eq!(
        got,
        with_dif(&data, TYPE1),
        "8 bytes of DIF after each block"
    );
    // Block 2's field by hand: CRC16 T10-DIF guard, application tag 0, reference 0x1002.
    let pi = &got[2 * UNIT + BLOCK..3 * UNIT];
    assert_eq!(pi[0..2], crc16_t10dif(&data[2 * BLOCK..]).to_be_bytes());
    assert_eq!(pi[2..8], [0, 0, 0, 0, 0x10, 0x02]);
}

#[test]
fn a_send_from_a_signature_key_inserts_ip_checksum_guards() {
    let mut p = pair_without_pg();
    let data = pattern(2 * BLOCK, 9);
    let dif = Dif {
        crc: false,
        app_tag: 0x4242,
        ref_tag: 77,
        ref_remap: false,
        pi_interval: 512,
    };
    let key = a_key_inserting(&mut p, &data, dif);
    let lkey_b = p.b.create_mkey(false, true);
    let dst = p.b.alloc(4096, 4096);
    p.b.post_rc_recv(&mut p.qp_b, dst, 4096, lkey_b);
    let mut w = rdma_wqe(
        &p.qp_a.sq,
        opcode::SEND,
        (0, 0),
        (0, key),
        (2 * UNIT) as u32,
        wqe::fence_mode::INITIATOR_SMALL,
    );
    // A SEND: control and data segment only.
    w.copy_within(32..48, 16);
    w[32..48].fill(0);
    CtrlSeg::new(&mut w[..16]).expect("layout").set_ds(2);
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    assert_eq!(cqe_opcode(&drain(&p.a, &mut p.cq_a)[0]), CQE_REQ);
    let got = p.b.read(dst, 2 * UNIT);
    assert_eq!(got, with_dif(&data, dif));
    assert_eq!(
        got[BLOCK..BLOCK + 2],
        ip_checksum(&data[..BLOCK]).to_be_bytes()
    );
    assert_eq!(
        got[BLOCK + 4..UNIT],
        77u32.to_be_bytes(),
        "type 3: no remap"
    );
}

#[test]
fn a_block_format_selector_in_the_bsf_is_refused() {
    // libmlx5's CRC32 and CRC64 signatures (`mlx5_umr_crc_bfs`) put a block format selector
    // above the PSV index; mlx5_ib's T10-DIF never does, and the model does not model them.
    let mut p = pair_without_pg();
    let pd = p.a.pd;
    let dma = p.a.create_mkey(false, true);
    let buf = p.a.alloc(4096, 4096);
    let (key, psvs) = sig_key(&mut p.a, 1);
    let mut wqes = reg_mr_integrity(
        &mut p.qp_a.sq,
        &Integrity {
            key,
            pd,
            psvs,
            memory: SigMemory::Data { key: dma, va: buf },
            data_len: 4096,
            mem: None,
            wire: Some(TYPE1),
            check_mask: 0,
            sigerr_count: 1,
        },
    );
    // A CRC signature's selector in the memory domain's `m_bfs_psv` (BSF bytes 12 to 15),
    // which has no inline section: not "no protection".
    wqes[0][192 + 12] = 0x20;
    let done = post_on(&mut p, false, &wqes);
    assert_eq!(cqe_opcode(&done[0]), 0xd, "the signature UMR refused");
}
