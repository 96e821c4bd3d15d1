//! Signature keys whose memory and wire domains have different block sizes, as Linux 6.12's
//! `mlx5_set_bsf` builds their BSF when the two `pi_interval`s differ: no same-block-structure
//! bit, no copy mask, each domain's own block size selector (`mem.bs_selector`,
//! `wire.bs_selector`); libmlx5's `mlx5_umr_fill_sig_bsf` does the same. Data crossing the key
//! is checked in its input domain's blocks and given the output domain's protection block by
//! block of the output's size: 512-byte wire blocks over 4 KiB memory blocks and the reverse,
//! both out of the key (an RDMA WRITE gathered from it) and into it (a peer's WRITE, a READ
//! response), a bad guard reported as the SIG_ERR CQE `get_sig_err_item` reads.

use cxdirect_emu::testkit::pattern::pattern_by;
use cxdirect_emu::testkit::rc_pair::RcPair;
use cxdirect_emu::testkit::signature::{
    pi_of, protection_of, trans_sig, with_dif, Dif, SigMemory, CQE_SIG_ERR, TYPE1,
};
use cxdirect_emu::testkit::signature_pair::{register, register_apart};
use cxdirect_emu::testkit::umr::{
    b_plain_rkey, cqe_opcode, drain, pair_without_pg, rdma_from_a, write_data_from_a, CQE_REQ,
};
use cxdirect_hw::sig::{copy, crc16_t10dif, sig_err, SigErrCqe};
use cxdirect_hw::wqe::opcode;

/// CQE opcode of a requester error (`MLX5_CQE_REQ_ERR`).
const CQE_REQ_ERR: u8 = 0xd;
/// Data bytes every test moves: two 4 KiB blocks, sixteen 512-byte blocks.
const DATA: usize = 8192;

/// T10-DIF type 1 over `pi_interval`-byte blocks, reference tags from `ref_tag`.
fn type1(pi_interval: u16, ref_tag: u32) -> Dif {
    Dif {
        pi_interval,
        ref_tag,
        ..TYPE1
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    pattern_by(len, 37, seed)
}

/// [`register_apart`] of [`DATA`] bytes, all eight bytes checked.
fn key_apart(p: &mut RcPair, on_b: bool, mem: Dif, wire: Dif) -> (u32, u64, u64, (u32, u32)) {
    register_apart(p, on_b, DATA, mem, wire)
}

/// A's RDMA WRITE of `len` bytes from A's signature key `key` to `dst` of B: A's CQEs.
fn write_out(p: &mut RcPair, key: u32, dst: u64, len: usize) -> Vec<Vec<u8>> {
    let rkey = b_plain_rkey(p, 0x21);
    rdma_from_a(p, opcode::RDMA_WRITE, (dst, rkey), (0, key), len as u32)
}

/// The SIG_ERR CQE `c`: (syndrome, expected guard, actual guard, offset, key).
fn sig_err_of(c: &[u8]) -> (u16, u16, u16, u64, u32) {
    assert_eq!(cqe_opcode(c), CQE_SIG_ERR);
    let e = SigErrCqe::new(&c[..64]).expect("layout");
    (
        e.syndrome(),
        (e.expected_trans_sig() >> 16) as u16,
        (e.actual_trans_sig() >> 16) as u16,
        e.err_offset(),
        e.mkey(),
    )
}

#[test]
fn a_write_out_of_4k_memory_blocks_carries_512_byte_wire_blocks_and_reports_a_bad_memory_guard() {
    let mut p = pair_without_pg();
    let (mem, wire) = (type1(4096, 0x200), type1(512, 0x1000));
    let (key, data_at, prot_at, psvs) = key_apart(&mut p, false, mem, wire);
    let data = pattern(DATA, 1);
    let mut prot = protection_of(&data, mem);
    p.a.write(data_at, &data);
    p.a.write(prot_at, &prot);
    let wire_len = DATA / 512 * 520;
    let dst = p.b.alloc(wire_len as u64, 4096);
    let done = write_out(&mut p, key, dst, wire_len);
    assert_eq!(
        done.len(),
        1,
        "no signature error: memory's two guards hold"
    );
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ);
    assert_eq!(
        p.b.read(dst, wire_len),
        with_dif(&data, wire),
        "sixteen 512-byte blocks, each with its own DIF"
    );
    // The memory PSV ends at memory's last block as found, the wire PSV at the wire's last.
    let last_mem = pi_of(&data[4096..], mem, 1);
    let last_wire = pi_of(&data[DATA - 512..], wire, 15);
    assert_eq!(p.a.dev.psv(psvs.0), Some((trans_sig(last_mem), 0x201)));
    assert_eq!(p.a.dev.psv(psvs.1), Some((trans_sig(last_wire), 0x100f)));
    // Memory block 1's guard one bit off: a SIG_ERR at A before the WRITE's completion, at
    // the wire offset where that block's data starts (after eight 520-byte wire blocks).
    prot[8] ^= 0x80;
    p.a.write(prot_at, &prot);
    let done = write_out(&mut p, key, dst, wire_len);
    assert_eq!(done.len(), 2, "SIG_ERR, then the WRITE");
    let want = crc16_t10dif(&data[4096..]);
    assert_eq!(
        sig_err_of(&done[0]),
        (sig_err::GUARD, want, want ^ 0x8000, 8 * 520, key)
    );
    assert_eq!(cqe_opcode(&done[1]), CQE_REQ);
    assert_eq!(
        p.b.read(dst, wire_len),
        with_dif(&data, wire),
        "the data still moves, the wire's protection generated"
    );
}

#[test]
fn a_write_out_of_512_byte_memory_blocks_carries_4k_wire_blocks() {
    let mut p = pair_without_pg();
    let (mem, wire) = (type1(512, 0x10), type1(4096, 0x7000));
    let (key, data_at, prot_at, _) = key_apart(&mut p, false, mem, wire);
    let data = pattern(DATA, 2);
    p.a.write(data_at, &data);
    p.a.write(prot_at, &protection_of(&data, mem));
    let wire_len = 2 * 4104;
    let dst = p.b.alloc(wire_len as u64, 4096);
    let done = write_out(&mut p, key, dst, wire_len);
    assert_eq!(done.len(), 1, "no signature error");
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ);
    let got = p.b.read(dst, wire_len);
    assert_eq!(
        got,
        with_dif(&data, wire),
        "two 4 KiB blocks, each with its DIF"
    );
    assert_eq!(got[4096..4104], pi_of(&data[..4096], wire, 0));
}

#[test]
fn a_peer_write_of_4k_wire_blocks_lands_as_512_byte_memory_blocks_and_a_bad_guard_is_reported() {
    let mut p = pair_without_pg();
    let (mem, wire) = (type1(512, 0x40), type1(4096, 0x9000));
    let (key, data_at, prot_at, _) = key_apart(&mut p, true, mem, wire);
    let data = pattern(DATA, 3);
    let mut sent = with_dif(&data, wire);
    let write_in = |p: &mut RcPair, sent: &[u8]| {
        let done = write_data_from_a(p, (0, key), sent);
        assert_eq!(done.len(), 1);
        assert_eq!(cqe_opcode(&done[0]), CQE_REQ, "the WRITE itself completes");
        drain(&p.b, &mut p.cq_b)
    };
    assert!(
        write_in(&mut p, &sent).is_empty(),
        "no signature error at B"
    );
    assert_eq!(p.b.read(data_at, DATA), data, "the data, stripped");
    assert_eq!(
        p.b.read(prot_at, DATA / 512 * 8),
        protection_of(&data, mem),
        "sixteen DIFs of 512-byte blocks generated in memory"
    );
    // Wire block 1's guard one bit off: B reports it at the block's wire offset.
    sent[4104 + 4096] ^= 0x01;
    let at_b = write_in(&mut p, &sent);
    assert_eq!(at_b.len(), 1, "one SIG_ERR CQE at B");
    let want = crc16_t10dif(&data[4096..]);
    assert_eq!(
        sig_err_of(&at_b[0]),
        (sig_err::GUARD, want, want ^ 0x0100, 4104, key)
    );
    assert_eq!(
        SigErrCqe::new(&at_b[0][..64]).expect("layout").qpn(),
        p.qp_b.qpn
    );
}

#[test]
fn a_read_response_of_512_byte_wire_blocks_lands_as_4k_memory_blocks() {
    let mut p = pair_without_pg();
    let (mem, wire) = (type1(4096, 0x300), type1(512, 0x5000));
    let (key, data_at, prot_at, psvs) = key_apart(&mut p, false, mem, wire);
    let data = pattern(DATA, 4);
    let mut sent = with_dif(&data, wire);
    let src = p.b.alloc(sent.len() as u64, 4096);
    let rkey = b_plain_rkey(&mut p, 0x21);
    let read_in = |p: &mut RcPair, sent: &[u8]| {
        p.b.write(src, sent);
        rdma_from_a(
            p,
            opcode::RDMA_READ,
            (src, rkey),
            (0, key),
            sent.len() as u32,
        )
    };
    let done = read_in(&mut p, &sent);
    assert_eq!(done.len(), 1, "no signature error");
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ);
    assert_eq!(p.a.read(data_at, DATA), data);
    assert_eq!(
        p.a.read(prot_at, 16),
        protection_of(&data, mem),
        "two DIFs of 4 KiB blocks generated in memory"
    );
    let last = pi_of(&data[DATA - 512..], wire, 15);
    assert_eq!(
        p.a.dev.psv(psvs.1),
        Some((trans_sig(last), 0x500f)),
        "the wire PSV at the last wire block checked"
    );
    // Wire block 3's guard off: a SIG_ERR at A, then the READ.
    sent[3 * 520 + 512] ^= 0x10;
    let done = read_in(&mut p, &sent);
    assert_eq!(done.len(), 2, "SIG_ERR, then the READ");
    let want = crc16_t10dif(&data[3 * 512..4 * 512]);
    assert_eq!(
        sig_err_of(&done[0]),
        (sig_err::GUARD, want, want ^ 0x1000, 3 * 520, key)
    );
    assert_eq!(cqe_opcode(&done[1]), CQE_REQ);
}

#[test]
fn data_that_is_not_whole_blocks_of_both_domains_is_refused() {
    let mut p = pair_without_pg();
    let dma = p.b.create_mkey(false, true);
    let (data, prot) = (p.b.alloc(4096, 4096), p.b.alloc(4096, 4096));
    let memory = SigMemory::Apart {
        key: dma,
        data,
        prot,
    };
    // 1 KiB: two 512-byte memory blocks, a quarter of a 4 KiB wire block.
    let domains = (Some(type1(512, 0)), Some(type1(4096, 0)));
    let (_, _, done) = register(&mut p, true, memory, 1024, domains, copy::GUARD);
    assert_eq!(
        cqe_opcode(&done[0]),
        CQE_REQ_ERR,
        "the signature UMR refused"
    );
}
