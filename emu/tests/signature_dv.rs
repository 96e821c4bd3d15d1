//! Signature keys as rdma-core's libmlx5 configures them (`mlx5dv_wr_mkey_configure`,
//! `mlx5dv_wr_set_mkey_layout_list` / `_interleaved`, `mlx5dv_wr_set_mkey_sig_block`, its
//! pyverbs tests in `tests/test_mlx5_mkey.py`): the BSF's `raw_data_size` all ones, CRC32
//! and CRC32C block signatures beside T10-DIF, and a bad block reported in the SIG_ERR CQE
//! `mlx5_parse_cqe` stores for `_mlx5dv_mkey_check` (no command: libmlx5 reads the CQE).

use cxdirect_emu::testkit::pattern::pattern_by;
use cxdirect_emu::testkit::rc_pair::RcPair;
use cxdirect_emu::testkit::signature::{with_dif, Dif, CQE_SIG_ERR};
use cxdirect_emu::testkit::signature_dv::{
    crc_field, mkey_configure, CrcKind, DvConfigure, DvDomain, DvLayout, DvSig,
};
use cxdirect_emu::testkit::signature_pair::{a_crc32_in_memory_key, post_on, sig_key};
use cxdirect_emu::testkit::umr::{
    b_plain_rkey, cqe_opcode, drain, pair_without_pg, rdma_from_a, write_data_from_a, CQE_REQ,
};
use cxdirect_hw::cqe::ErrCqe;
use cxdirect_hw::sig::{sig_err, sig_err_domain, SigErrCqe};
use cxdirect_hw::wqe::opcode;

const BLOCK: usize = 512;
/// CQE opcode of a requester error (`MLX5_CQE_REQ_ERR`).
const CQE_REQ_ERR: u8 = 0xd;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    pattern_by(len, 29, seed)
}

/// The T10-DIF of `reg_mr_sig_t10dif` in test_mlx5_mkey.py: CRC guard seeded with 0xffff,
/// application tag 0xabcd, reference tags from 0x01234567, remapped.
const PY_T10DIF: DvSig = DvSig::T10Dif {
    crc: true,
    bg: 0xffff,
    app_tag: 0xabcd,
    ref_tag: 0x0123_4567,
    ref_remap: true,
};

/// A's libmlx5 signature key (`mlx5dv_create_mkey` with BLOCK_SIGNATURE: two PSVs, a free
/// `bsf_en` KLM key of variant 0) over `mem_bytes` of A's memory holding `content`,
/// configured with `mem` / `wire` and `check_mask`. Returns the key and the completions of
/// the configure chain.
fn a_configure(
    p: &mut RcPair,
    content: &[u8],
    layout: impl FnOnce(u64, u32) -> DvLayout,
    mem: Option<DvDomain>,
    wire: Option<DvDomain>,
    check_mask: u8,
) -> (u32, Vec<Vec<u8>>) {
    let dma = p.a.create_mkey(false, true);
    let buf = p.a.alloc(content.len() as u64, 4096);
    p.a.write(buf, content);
    let (key, psvs) = sig_key(&mut p.a, 0);
    let wqes = mkey_configure(
        &mut p.qp_a.sq,
        &DvConfigure {
            key,
            psvs,
            access: (true, true, true, false),
            layout: layout(buf, dma),
            mem,
            wire,
            check_mask,
            err_count: Some(1),
            keep_signature: false,
        },
    );
    (key, post_on(p, false, &wqes))
}

/// A's WRITE of `len` bytes from offset 0 of its key `key` into B's memory: A's completions
/// and the bytes B got.
fn write_to_b(p: &mut RcPair, key: u32, len: usize) -> (Vec<Vec<u8>>, Vec<u8>) {
    let rkey = b_plain_rkey(p, 0x31);
    let dst = p.b.alloc(len as u64, 4096);
    let done = rdma_from_a(p, opcode::RDMA_WRITE, (dst, rkey), (0, key), len as u32);
    (done, p.b.read(dst, len))
}

fn one_sge(buf: u64, dma: u32, len: u32) -> DvLayout {
    DvLayout::List(vec![(buf, len, dma)])
}

#[test]
fn a_libmlx5_t10dif_configure_with_raw_size_all_ones_inserts_on_an_rdma_write() {
    let mut p = pair_without_pg();
    let data = pattern(2 * BLOCK, 3);
    let wire = DvDomain {
        sig: PY_T10DIF,
        selector: 1,
    };
    let (key, done) = a_configure(
        &mut p,
        &data,
        |buf, dma| one_sge(buf, dma, (2 * BLOCK) as u32),
        None,
        Some(wire),
        0xff,
    );
    assert_eq!(done.len(), 1, "one completion: the last SET_PSV's");
    assert_eq!(
        cqe_opcode(&done[0]),
        CQE_REQ,
        "the configure chain is taken"
    );
    let (done, got) = write_to_b(&mut p, key, 2 * (BLOCK + 8));
    assert_eq!(done.len(), 1);
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ, "the WRITE completes");
    // bg 0xffff seeds the CRC16 register with all ones (`MLX5_BSF_SEED`).
    let mut want = Vec::new();
    for (i, block) in data.chunks(BLOCK).enumerate() {
        want.extend_from_slice(block);
        let mut crc = 0xffffu16;
        for &b in block {
            crc ^= u16::from(b) << 8;
            for _ in 0..8 {
                crc = if crc & 0x8000 != 0 {
                    (crc << 1) ^ 0x8bb7
                } else {
                    crc << 1
                };
            }
        }
        want.extend_from_slice(&crc.to_be_bytes());
        want.extend_from_slice(&0xabcdu16.to_be_bytes());
        want.extend_from_slice(&(0x0123_4567u32 + i as u32).to_be_bytes());
    }
    assert_eq!(
        got, want,
        "each block followed by its inserted T10-DIF field"
    );
}

#[test]
fn an_interleaved_layout_with_t10dif_in_memory_is_checked_and_passed_plain() {
    let mut p = pair_without_pg();
    let data = pattern(2 * BLOCK, 9);
    let dif = Dif {
        crc: true,
        app_tag: 0x42,
        ref_tag: 7,
        ref_remap: true,
        pi_interval: 512,
    };
    // Data and protection interleaved in one buffer, as the wire would carry them.
    let memory = with_dif(&data, dif);
    let mem = DvDomain {
        sig: DvSig::T10Dif {
            crc: true,
            bg: 0,
            app_tag: 0x42,
            ref_tag: 7,
            ref_remap: true,
        },
        selector: 1,
    };
    let (key, done) = a_configure(
        &mut p,
        &memory,
        |buf, dma| {
            DvLayout::Interleaved(
                2,
                vec![
                    (buf, BLOCK as u16, 8, dma),
                    (buf + BLOCK as u64, 8, 512, dma),
                ],
            )
        },
        Some(mem),
        None,
        0xff,
    );
    assert_eq!(
        cqe_opcode(&done[0]),
        CQE_REQ,
        "the configure chain is taken"
    );
    let (done, got) = write_to_b(&mut p, key, 2 * BLOCK);
    assert_eq!(done.len(), 1, "no signature error");
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ);
    assert_eq!(got, data, "the data, its protection stripped");
}

fn crc_wire_insert(kind: CrcKind, seed: u64) {
    let mut p = pair_without_pg();
    let data = pattern(2 * BLOCK, 5);
    let wire = DvDomain {
        sig: DvSig::Crc { kind, seed },
        selector: 1,
    };
    let (key, done) = a_configure(
        &mut p,
        &data,
        |buf, dma| one_sge(buf, dma, (2 * BLOCK) as u32),
        None,
        Some(wire),
        0xf0,
    );
    assert_eq!(
        cqe_opcode(&done[0]),
        CQE_REQ,
        "the configure chain is taken"
    );
    let (done, got) = write_to_b(&mut p, key, 2 * (BLOCK + 4));
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ);
    let mut want = Vec::new();
    for block in data.chunks(BLOCK) {
        want.extend_from_slice(block);
        want.extend_from_slice(&crc_field(kind, seed, block));
    }
    assert_eq!(
        got, want,
        "each block followed by its 4-byte CRC, big-endian"
    );
}

#[test]
fn a_crc32_wire_signature_is_inserted_as_test_mkey_sig_crc_configures_it() {
    crc_wire_insert(CrcKind::Crc32, 0xffff_ffff);
    // The Ethernet CRC-32 of the block, as crc32fast computes it.
    let block = pattern(BLOCK, 5);
    assert_eq!(
        crc_field(CrcKind::Crc32, 0xffff_ffff, &block),
        crc32fast::hash(&block).to_be_bytes()
    );
}

#[test]
fn a_crc32c_wire_signature_is_inserted_with_either_seed() {
    crc_wire_insert(CrcKind::Crc32c, 0xffff_ffff);
    crc_wire_insert(CrcKind::Crc32c, 0);
}

#[test]
fn a_good_crc32_in_memory_is_checked_and_stripped() {
    let mut p = pair_without_pg();
    let data = pattern(BLOCK, 11);
    let crc = crc_field(CrcKind::Crc32, 0xffff_ffff, &data);
    let key = a_crc32_in_memory_key(&mut p, &data, &crc);
    let (done, got) = write_to_b(&mut p, key, BLOCK);
    assert_eq!(done.len(), 1, "no signature error");
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ);
    assert_eq!(got, data);
}

#[test]
fn a_corrupted_crc32_block_is_reported_as_the_sig_err_cqe_mlx5dv_mkey_check_decodes() {
    let mut p = pair_without_pg();
    let data = pattern(BLOCK, 13);
    let good = crc_field(CrcKind::Crc32, 0xffff_ffff, &data);
    let mut bad = good.clone();
    bad[3] ^= 0x80;
    let key = a_crc32_in_memory_key(&mut p, &data, &bad);
    let (done, got) = write_to_b(&mut p, key, BLOCK);
    assert_eq!(got, data, "the data still moves");
    let ops: Vec<u8> = done.iter().map(|c| cqe_opcode(c)).collect();
    assert!(ops.contains(&CQE_REQ), "the WRITE completes: {ops:?}");
    let sig: Vec<_> = done
        .iter()
        .filter(|c| cqe_opcode(c) == CQE_SIG_ERR)
        .collect();
    assert_eq!(sig.len(), 1, "one SIG_ERR CQE on A's CQ: {ops:?}");
    let e = SigErrCqe::new(&sig[0][..64]).expect("layout");
    // `_mlx5dv_mkey_check`: a guard error (no REFTAG / APPTAG bit) of a block signature in
    // the memory domain; for CRC32 it reports `expected >> 32`, the transient signatures.
    assert_eq!(e.syndrome(), sig_err::GUARD);
    assert_eq!(e.sig_type() & 7, 0, "MLX5_SIGERR_CQE_SIG_TYPE_BLOCK");
    assert_eq!(e.domain() & 7, sig_err_domain::MEMORY);
    assert_eq!(e.mkey(), key, "the key mlx5_find_mkey looks up by index");
    let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    assert_eq!(e.expected_trans_sig(), be(&good));
    assert_eq!(e.actual_trans_sig(), be(&bad));
    assert_eq!(e.err_offset(), 0);
}

/// A configure chain whose BSF names something the model refuses: the UMR ends in an error
/// CQE (local QP operation), never success.
fn refused(mem: Option<DvDomain>, wire: Option<DvDomain>, content_len: usize) {
    let mut p = pair_without_pg();
    let content = pattern(content_len, 1);
    let (_, done) = a_configure(
        &mut p,
        &content,
        |buf, dma| one_sge(buf, dma, content_len as u32),
        mem,
        wire,
        0xff,
    );
    assert!(!done.is_empty(), "the refusal is reported");
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ_ERR, "an error CQE");
    let e = ErrCqe::new(&done[0][..64]).expect("layout");
    assert_ne!(e.syndrome(), 0);
}

#[test]
fn a_crc64_xp10_signature_is_refused_with_an_error_cqe() {
    refused(
        None,
        Some(DvDomain {
            sig: DvSig::Crc {
                kind: CrcKind::Crc64Xp10,
                seed: u64::MAX,
            },
            selector: 1,
        }),
        BLOCK,
    );
}

#[test]
fn a_4048_byte_block_is_refused_with_an_error_cqe() {
    refused(
        None,
        Some(DvDomain {
            sig: PY_T10DIF,
            selector: 6,
        }),
        4048,
    );
}

#[test]
fn an_unknown_block_size_selector_is_refused_with_an_error_cqe() {
    refused(
        None,
        Some(DvDomain {
            sig: DvSig::Crc {
                kind: CrcKind::Crc32,
                seed: 0,
            },
            selector: 9,
        }),
        BLOCK,
    );
}

#[test]
fn an_unknown_block_format_selector_is_refused_with_an_error_cqe() {
    // 0x30 is no base libmlx5 writes; 0x20 without the repeat bit is a CRC over the whole
    // transfer, which is not modelled.
    for selector in [0x32u8, 0x20] {
        let mut p = pair_without_pg();
        let dma = p.a.create_mkey(false, true);
        let buf = p.a.alloc(BLOCK as u64, 4096);
        let (key, psvs) = sig_key(&mut p.a, 0);
        let mut wqes = mkey_configure(
            &mut p.qp_a.sq,
            &DvConfigure {
                key,
                psvs,
                access: (true, true, true, false),
                layout: one_sge(buf, dma, BLOCK as u32),
                mem: None,
                wire: Some(DvDomain {
                    sig: DvSig::Crc {
                        kind: CrcKind::Crc32,
                        seed: 0xffff_ffff,
                    },
                    selector: 1,
                }),
                check_mask: 0xf0,
                err_count: Some(1),
                keep_signature: false,
            },
        );
        // The BSF follows the 64-byte list; `w_bfs_psv` is its third word.
        wqes[0][128 + 64 + 8] = selector;
        let done = post_on(&mut p, false, &wqes);
        assert!(!done.is_empty(), "selector {selector:#x}: reported");
        assert_eq!(cqe_opcode(&done[0]), CQE_REQ_ERR, "selector {selector:#x}");
    }
}

#[test]
fn a_bad_crc32c_arriving_on_the_wire_is_reported_in_the_wire_domain() {
    let mut p = pair_without_pg();
    // B's key: CRC32C on the wire over 512 plain bytes of B's memory, configured on B's QP.
    let dma = p.b.create_mkey(false, true);
    let buf = p.b.alloc(BLOCK as u64, 4096);
    let (key, psvs) = sig_key(&mut p.b, 0);
    let (kind, seed) = (CrcKind::Crc32c, 0xffff_ffff);
    let wqes = mkey_configure(
        &mut p.qp_b.sq,
        &DvConfigure {
            key,
            psvs,
            access: (true, true, true, false),
            layout: one_sge(buf, dma, BLOCK as u32),
            mem: None,
            wire: Some(DvDomain {
                sig: DvSig::Crc { kind, seed },
                selector: 1,
            }),
            check_mask: 0xf0,
            err_count: Some(1),
            keep_signature: false,
        },
    );
    let done = post_on(&mut p, true, &wqes);
    assert_eq!(
        cqe_opcode(&done[0]),
        CQE_REQ,
        "B's configure chain is taken"
    );
    // A writes the block and a CRC off by one bit through B's key.
    let data = pattern(BLOCK, 17);
    let good = crc_field(kind, seed, &data);
    let mut wire = data.clone();
    wire.extend_from_slice(&good);
    wire[BLOCK] ^= 0x01;
    let at_a = write_data_from_a(&mut p, (0, key), &wire);
    let syn = ErrCqe::new(&at_a[0][..64]).expect("layout").syndrome();
    assert_eq!(
        cqe_opcode(&at_a[0]),
        CQE_REQ,
        "the WRITE completes ({syn:#x})"
    );
    assert_eq!(p.b.read(buf, BLOCK), data, "the data lands, stripped");
    let at_b = drain(&p.b, &mut p.cq_b);
    assert_eq!(at_b.len(), 1, "one SIG_ERR CQE at B");
    assert_eq!(cqe_opcode(&at_b[0]), CQE_SIG_ERR);
    let e = SigErrCqe::new(&at_b[0][..64]).expect("layout");
    assert_eq!(e.syndrome(), sig_err::GUARD);
    assert_eq!(e.domain() & 7, sig_err_domain::WIRE);
    assert_eq!(e.mkey(), key);
    let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    assert_eq!(e.expected_trans_sig(), be(&good));
    assert_eq!(e.actual_trans_sig(), be(&good) ^ 0x0100_0000);
    // The PSV ends at the field found, as libmlx5's next SET_PSV would reset it.
    assert_eq!(p.b.dev.psv(psvs.1), Some((be(&good) ^ 0x0100_0000, 0)));
}

#[test]
fn a_new_layout_without_a_sig_block_keeps_the_signature_over_the_new_memory() {
    let mut p = pair_without_pg();
    let first = pattern(BLOCK, 21);
    let wire = DvDomain {
        sig: DvSig::Crc {
            kind: CrcKind::Crc32,
            seed: 0xffff_ffff,
        },
        selector: 1,
    };
    let (key, done) = a_configure(
        &mut p,
        &first,
        |buf, dma| one_sge(buf, dma, BLOCK as u32),
        None,
        Some(wire),
        0xf0,
    );
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ);
    // `mlx5dv_wr_mkey_configure` again with only a layout: libmlx5's block state is SET, so
    // the UMR carries no BSF_EN and no SET_PSV follows; its own completion is signalled.
    let second = pattern(BLOCK, 77);
    let dma = p.a.create_mkey(false, true);
    let buf = p.a.alloc(BLOCK as u64, 4096);
    p.a.write(buf, &second);
    let wqes = mkey_configure(
        &mut p.qp_a.sq,
        &DvConfigure {
            key,
            psvs: (0, 0),
            access: (true, true, true, false),
            layout: one_sge(buf, dma, BLOCK as u32),
            mem: None,
            wire: None,
            check_mask: 0,
            err_count: None,
            keep_signature: true,
        },
    );
    let done = post_on(&mut p, false, &wqes);
    assert_eq!(done.len(), 1);
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ, "the layout UMR is taken");
    let (done, got) = write_to_b(&mut p, key, BLOCK + 4);
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ);
    let mut want = second.clone();
    want.extend_from_slice(&crc_field(CrcKind::Crc32, 0xffff_ffff, &second));
    assert_eq!(got, want, "the new memory, its CRC32 still inserted");
}
