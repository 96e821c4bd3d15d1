//! Protection checked through a signature key as Linux 6.12's mlx5_ib reads the outcome: a
//! peer's WRITE checked in the wire domain and split into data and protection apart in
//! memory (one buffer, or a pi_mr's data and metadata pages), memory's protection checked
//! when the peer reads the key, a READ response checked and stripped, and a bad block
//! reported as the SIG_ERR CQE `get_sig_err_item` reads, once a registration.

use cxdirect_emu::testkit::pattern::pattern;
use cxdirect_emu::testkit::rc_pair::RcPair;
use cxdirect_emu::testkit::signature::{
    create_psv, pi_of, protection_of, reg_mr_integrity, trans_sig, with_dif, Integrity, SigMemory,
    CQE_SIG_ERR, TYPE1,
};
use cxdirect_emu::testkit::signature_pair::{post_on, register_apart, register_data, sig_key};
use cxdirect_emu::testkit::umr::{
    alloc_mr, b_plain_rkey, cqe_opcode, drain, local_inv_wqe, pair_without_pg, rdma_from_a,
    reg_mr_wqe_with, unsignalled, write_data_from_a, CQE_REQ,
};
use cxdirect_emu::testkit::Sq;
use cxdirect_hw::sig::{copy, crc16_t10dif, sig_err, SigErrCqe};
use cxdirect_hw::wqe::opcode;

const BLOCK: usize = 512;
const UNIT: usize = BLOCK + 8;

/// B's signature key over data and protection apart in B's memory (`SigMemory::Apart`), T10-DIF
/// type 1 in both domains checking all eight bytes: (key, data address, protection address).
fn b_key_apart(p: &mut RcPair, blocks: usize) -> (u32, u64, u64) {
    let (key, data, prot, _) = b_key_apart_psvs(p, blocks);
    (key, data, prot)
}

/// [`b_key_apart`], with the key's (memory, wire) PSVs.
fn b_key_apart_psvs(p: &mut RcPair, blocks: usize) -> (u32, u64, u64, (u32, u32)) {
    let (key, data, prot, psvs) = register_apart(p, true, blocks * BLOCK, TYPE1, TYPE1);
    assert_eq!(
        p.b.dev.psv(psvs.0),
        Some((0, TYPE1.ref_tag)),
        "SET_PSV seeded the memory PSV"
    );
    (key, data, prot, psvs)
}

/// A's WRITE of `wire` to offset 0 of B's key `rkey`: A's completion opcode.
fn write_from_a(p: &mut RcPair, rkey: u32, wire: &[u8]) -> u8 {
    let done = write_data_from_a(p, (0, rkey), wire);
    assert_eq!(done.len(), 1);
    cqe_opcode(&done[0])
}

#[test]
fn a_peer_write_into_a_signature_key_is_checked_and_split_into_data_and_protection() {
    let mut p = pair_without_pg();
    let blocks = 4;
    let (key, data_at, prot_at, psvs) = b_key_apart_psvs(&mut p, blocks);
    let data = pattern(blocks * BLOCK, 3);
    let wire = with_dif(&data, TYPE1);
    assert_eq!(write_from_a(&mut p, key, &wire), CQE_REQ);
    // Both PSVs end at the last block: its guard and tags.
    let last = pi_of(&data[(blocks - 1) * BLOCK..], TYPE1, blocks - 1);
    let sig = trans_sig(last);
    let reference = TYPE1.ref_tag + blocks as u32 - 1;
    assert_eq!(p.b.dev.psv(psvs.0), Some((sig, reference)));
    assert_eq!(p.b.dev.psv(psvs.1), Some((sig, reference)));
    assert!(
        drain(&p.b, &mut p.cq_b).is_empty(),
        "no signature error at B"
    );
    assert_eq!(
        p.b.read(data_at, blocks * BLOCK),
        data,
        "the data, stripped"
    );
    let prot = protection_of(&data, TYPE1);
    assert_eq!(p.b.read(prot_at, blocks * 8), prot, "the protection, apart");
}

#[test]
fn a_corrupted_guard_is_reported_as_the_sig_err_cqe_mlx5_ib_reads() {
    let mut p = pair_without_pg();
    let blocks = 3;
    let (key, _, _) = b_key_apart(&mut p, blocks);
    let data = pattern(blocks * BLOCK, 5);
    let mut wire = with_dif(&data, TYPE1);
    // Block 1's guard, one bit off.
    wire[UNIT + BLOCK] ^= 0x01;
    assert_eq!(
        write_from_a(&mut p, key, &wire),
        CQE_REQ,
        "the transfer itself completes"
    );
    let at_b = drain(&p.b, &mut p.cq_b);
    assert_eq!(at_b.len(), 1, "one SIG_ERR CQE at B");
    assert_eq!(cqe_opcode(&at_b[0]), CQE_SIG_ERR);
    let e = SigErrCqe::new(&at_b[0][..64]).expect("layout");
    let want = crc16_t10dif(&data[BLOCK..2 * BLOCK]);
    assert_eq!(
        e.syndrome(),
        sig_err::GUARD,
        "get_sig_err_item: IB_SIG_BAD_GUARD"
    );
    assert_eq!(
        e.mkey(),
        key,
        "the signature key mlx5_ib looks up in sig_mrs"
    );
    assert_eq!(e.expected_trans_sig() >> 16, u32::from(want));
    assert_eq!(e.actual_trans_sig() >> 16, u32::from(want ^ 0x0100));
    assert_eq!(
        e.err_offset(),
        UNIT as u64,
        "block 1 starts 520 bytes into the wire"
    );
    assert_eq!(e.qpn(), p.qp_b.qpn);
    // Reported once a registration: a second bad write before the next UMR is not.
    assert_eq!(write_from_a(&mut p, key, &wire), CQE_REQ);
    assert!(drain(&p.b, &mut p.cq_b).is_empty());
    // mlx5_poll_one counted the error (sigerr_count 2): after LOCAL_INV the next registration
    // carries parity 0 and arms the key again.
    let (data_at, prot_at) = (p.b.alloc(4096, 4096), p.b.alloc(4096, 4096));
    let dma = p.b.create_mkey(false, true);
    let pd = p.b.pd;
    let psvs = create_psv(&mut p.b, pd, 2).expect("PSVs");
    // `set_linv_wr`, unsignalled.
    let inv = unsignalled(local_inv_wqe(&p.qp_b.sq, key));
    p.qp_b.sq.pi = p.qp_b.sq.pi.wrapping_add(2);
    let next = (key & !0xff) | 0x02;
    let mut wqes = vec![inv];
    wqes.extend(reg_mr_integrity(
        &mut p.qp_b.sq,
        &Integrity {
            key: next,
            pd,
            psvs: (psvs[0], psvs[1]),
            memory: SigMemory::Apart {
                key: dma,
                data: data_at,
                prot: prot_at,
            },
            data_len: (blocks * BLOCK) as u32,
            mem: Some(TYPE1),
            wire: Some(TYPE1),
            check_mask: copy::GUARD | copy::APP_TAG | copy::REF_TAG,
            sigerr_count: 2,
        },
    ));
    let done = post_on(&mut p, true, &wqes);
    assert_eq!(
        done.len(),
        1,
        "LOCAL_INV unsignalled, the signature UMR signalled"
    );
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ);
    assert_eq!(write_from_a(&mut p, next, &wire), CQE_REQ);
    let at_b = drain(&p.b, &mut p.cq_b);
    assert_eq!(at_b.len(), 1, "armed again");
    assert_eq!(cqe_opcode(&at_b[0]), CQE_SIG_ERR);
    assert_eq!(SigErrCqe::new(&at_b[0][..64]).expect("layout").mkey(), next);
}

#[test]
fn a_bad_reference_tag_in_memory_is_reported_when_the_peer_reads_the_key() {
    let mut p = pair_without_pg();
    let blocks = 2;
    let (key, data_at, prot_at) = b_key_apart(&mut p, blocks);
    let data = pattern(blocks * BLOCK, 11);
    p.b.write(data_at, &data);
    let mut prot = protection_of(&data, TYPE1);
    p.b.write(prot_at, &prot);
    // A READs the wire view (nvmet reading a host's WRITE data): memory's protection, checked.
    let lkey = p.a.create_mkey(false, true);
    let dst = p.a.alloc((blocks * UNIT) as u64, 4096);
    let read = |p: &mut RcPair| {
        rdma_from_a(
            p,
            opcode::RDMA_READ,
            (0, key),
            (dst, lkey),
            (blocks * UNIT) as u32,
        )
    };
    assert_eq!(cqe_opcode(&read(&mut p)[0]), CQE_REQ);
    assert_eq!(p.a.read(dst, blocks * UNIT), with_dif(&data, TYPE1));
    assert!(drain(&p.b, &mut p.cq_b).is_empty());
    // Block 1's reference tag wrong in memory: B reports it.
    prot[8 + 7] ^= 0x40;
    p.b.write(prot_at, &prot);
    assert_eq!(cqe_opcode(&read(&mut p)[0]), CQE_REQ);
    let at_b = drain(&p.b, &mut p.cq_b);
    assert_eq!(at_b.len(), 1);
    assert_eq!(cqe_opcode(&at_b[0]), CQE_SIG_ERR);
    let e = SigErrCqe::new(&at_b[0][..64]).expect("layout");
    assert_eq!(e.syndrome(), sig_err::REF_TAG, "IB_SIG_BAD_REFTAG");
    assert_eq!(e.expected_reftag(), 0x1001);
    assert_eq!(e.actual_reftag(), 0x1001 ^ 0x40);
}

#[test]
fn a_read_response_into_a_signature_key_is_stripped_and_a_bad_guard_reported() {
    let mut p = pair_without_pg();
    // A's key: data alone in A's memory, DIF on the wire, guards checked (nvmet's RDMA READ
    // of the host's data into its own buffer).
    let blocks = 2;
    // Local write for the READ response scatter: `IB_ACCESS_LOCAL_WRITE` in the reg WR.
    let (key, buf, done) = register_data(&mut p, false, blocks * BLOCK, TYPE1, copy::GUARD);
    assert_eq!(done.len(), 1);
    let data = pattern(blocks * BLOCK, 13);
    let mut wire = with_dif(&data, TYPE1);
    let src = p.b.alloc(wire.len() as u64, 4096);
    let rkey = b_plain_rkey(&mut p, 0x12);
    p.b.write(src, &wire);
    let len = wire.len() as u32;
    let read = |p: &mut RcPair| rdma_from_a(p, opcode::RDMA_READ, (src, rkey), (0, key), len);
    let done = read(&mut p);
    assert_eq!(done.len(), 1);
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ);
    assert_eq!(p.a.read(buf, blocks * BLOCK), data, "protection stripped");
    // Block 0's guard corrupted at the source: a SIG_ERR CQE before the READ's completion.
    wire[BLOCK] ^= 0xff;
    p.b.write(src, &wire);
    let done = read(&mut p);
    assert_eq!(done.len(), 2, "SIG_ERR, then the READ");
    assert_eq!(cqe_opcode(&done[0]), CQE_SIG_ERR);
    assert_eq!(cqe_opcode(&done[1]), CQE_REQ);
    let e = SigErrCqe::new(&done[0][..64]).expect("layout");
    assert_eq!((e.syndrome(), e.err_offset()), (sig_err::GUARD, 0));
}

/// The first UMR of `handle_reg_mr_integrity` with a pi_mr: `set_reg_wr` over the data pages
/// and then the metadata pages (`mlx5_set_page` / `mlx5_set_page_pi`, each entry with
/// `MLX5_EN_RD | MLX5_EN_WR`), no free-state check, the list inline, `frwr_mkey_mask`,
/// `set_reg_mkey_seg` (4 KiB pages, the data IOVA, the length up to the metadata's end).
fn reg_pi_mr_wqe(sq: &mut Sq, key: u32, pages: &[u64], iova: u64, len: u64) -> Vec<u8> {
    let w = unsignalled(reg_mr_wqe_with(sq, key, pages, iova, len, 0, 0));
    sq.pi = sq.pi.wrapping_add((w.len() / 64) as u16);
    w
}

#[test]
fn a_pi_mr_of_data_and_metadata_pages_carries_a_peer_write_as_mlx5_ib_maps_it() {
    let mut p = pair_without_pg();
    let pd = p.b.pd;
    // Two pages of data (16 blocks) and their 128 bytes of protection 0x100 into a third
    // page, as the block layer hands nvme-rdma a bio and its integrity payload.
    let data_pages = [p.b.alloc(4096, 4096), p.b.alloc(4096, 4096)];
    let meta_page = p.b.alloc(4096, 4096);
    for page in data_pages.iter().chain([&meta_page]) {
        p.b.write(*page, &[0; 4096]);
    }
    let blocks = 16;
    // mlx5_ib_map_mtt_mr_sg_pi: the data at its first page's address, the protection at
    // that address plus the data pages plus its offset in its own page.
    let iova = data_pages[0];
    let pi_iova = iova + 2 * 4096 + 0x100;
    let pi_len = pi_iova + (blocks * 8) as u64 - iova;
    let pi_mr = alloc_mr(&mut p.b, pd, 2 * 33, 0);
    let (key, psvs) = sig_key(&mut p.b, 1);
    let mut wqes = vec![reg_pi_mr_wqe(
        &mut p.qp_b.sq,
        pi_mr,
        &[data_pages[0], data_pages[1], meta_page],
        iova,
        pi_len,
    )];
    wqes.extend(reg_mr_integrity(
        &mut p.qp_b.sq,
        &Integrity {
            key,
            pd,
            psvs,
            memory: SigMemory::Apart {
                key: pi_mr,
                data: iova,
                prot: pi_iova,
            },
            data_len: (blocks * BLOCK) as u32,
            mem: Some(TYPE1),
            wire: Some(TYPE1),
            check_mask: copy::GUARD | copy::REF_TAG,
            sigerr_count: 1,
        },
    ));
    let done = post_on(&mut p, true, &wqes);
    assert_eq!(
        done.len(),
        1,
        "the signature UMR's completion (the pi_mr's is unsignalled)"
    );
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ);
    let data = pattern(blocks * BLOCK, 21);
    assert_eq!(write_from_a(&mut p, key, &with_dif(&data, TYPE1)), CQE_REQ);
    assert!(drain(&p.b, &mut p.cq_b).is_empty(), "no signature error");
    let mut got = p.b.read(data_pages[0], 4096);
    got.extend(p.b.read(data_pages[1], 4096));
    assert_eq!(got, data, "the data in its pages");
    let prot = protection_of(&data, TYPE1);
    assert_eq!(
        p.b.read(meta_page + 0x100, blocks * 8),
        prot,
        "the protection in its page"
    );
}
