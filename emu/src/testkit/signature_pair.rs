//! Signature keys made and registered on one side of an [`RcPair`], as mlx5_ib's
//! `mlx5_alloc_integrity_descs` makes one (two PSVs and a free `bsf_en` key) and
//! `handle_reg_mr_integrity` registers it on the QP that will use it.

use super::rc_pair::RcPair;
use super::signature::{
    create_psv, integrity_key, post_all, reg_mr_integrity, Dif, Integrity, SigMemory,
};
use super::signature_dv::{mkey_configure, CrcKind, DvConfigure, DvDomain, DvLayout, DvSig};
use super::umr::{cqe_opcode, drain, CQE_REQ};
use super::{Host, Sq};
use cxdirect_hw::mkey::MKC_ACCESS_MODE_KLM;
use cxdirect_hw::sig::{copy, BSF_OCTOWORDS};

/// Side B (`on_b`) or A of `p`: its host and its RC QP's send queue.
fn side(p: &mut RcPair, on_b: bool) -> (&mut Host, &mut Sq) {
    if on_b {
        (&mut p.b, &mut p.qp_b.sq)
    } else {
        (&mut p.a, &mut p.qp_a.sq)
    }
}

/// A fresh signature key of `h`: CREATE_PSV of two PSVs in `h`'s PD, then the KLM integrity
/// key of [`integrity_key`] with `variant` in its low byte (1 for mlx5_ib's first
/// registration, 0 for libmlx5's `mlx5dv_create_mkey`): (key, (memory PSV, wire PSV)).
pub fn sig_key(h: &mut Host, variant: u8) -> (u32, (u32, u32)) {
    let pd = h.pd;
    let psvs = create_psv(h, pd, 2).expect("PSVs");
    let key = integrity_key(h, pd, MKC_ACCESS_MODE_KLM, BSF_OCTOWORDS).expect("key");
    (key | u32::from(variant), (psvs[0], psvs[1]))
}

/// Posts `wqes` (built against side B's (`on_b`) or A's RC send queue, its `pi` already
/// past them) with one doorbell and settles the pair: that side's CQEs.
pub fn post_on(p: &mut RcPair, on_b: bool, wqes: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let (h, sq) = side(p, on_b);
    post_all(h, sq, wqes);
    p.settle();
    if on_b {
        drain(&p.b, &mut p.cq_b)
    } else {
        drain(&p.a, &mut p.cq_a)
    }
}

/// A fresh signature key ([`sig_key`], variant 1) registered on side B's (`on_b`) or A's RC
/// QP of `p` as a first `IB_WR_REG_MR_INTEGRITY`: over `memory` of that side, `data_len`
/// data bytes, the (memory, wire) `domains`, the bytes of `check_mask` checked. The pair
/// settled: (key, (memory PSV, wire PSV), that side's CQEs).
pub fn register(
    p: &mut RcPair,
    on_b: bool,
    memory: SigMemory,
    data_len: usize,
    (mem, wire): (Option<Dif>, Option<Dif>),
    check_mask: u8,
) -> (u32, (u32, u32), Vec<Vec<u8>>) {
    let (h, sq) = side(p, on_b);
    let pd = h.pd;
    let (key, psvs) = sig_key(h, 0x01);
    let wqes = reg_mr_integrity(
        sq,
        &Integrity {
            key,
            pd,
            psvs,
            memory,
            data_len: data_len as u32,
            mem,
            wire,
            check_mask,
            sigerr_count: 1,
        },
    );
    let done = post_on(p, on_b, &wqes);
    (key, psvs, done)
}

/// A signature key on side B (`on_b`) or A of `p` over `data_len` bytes of data and their
/// protection apart in that side's memory ([`SigMemory::Apart`], blocks of
/// `mem.pi_interval`), zeroed, `wire` on the wire, all eight bytes checked, registered on
/// that side's RC QP through its DMA key: (key, data address, protection address, (memory
/// PSV, wire PSV)).
pub fn register_apart(
    p: &mut RcPair,
    on_b: bool,
    data_len: usize,
    mem: Dif,
    wire: Dif,
) -> (u32, u64, u64, (u32, u32)) {
    let (h, _) = side(p, on_b);
    let dma = h.create_mkey(false, true);
    let prot_len = data_len / usize::from(mem.pi_interval) * 8;
    let data = h.alloc(data_len as u64, 4096);
    let prot = h.alloc(prot_len as u64, 4096);
    h.write(data, &vec![0; data_len]);
    h.write(prot, &vec![0; prot_len]);
    let memory = SigMemory::Apart {
        key: dma,
        data,
        prot,
    };
    let all = copy::GUARD | copy::APP_TAG | copy::REF_TAG;
    let (key, psvs, done) = register(p, on_b, memory, data_len, (Some(mem), Some(wire)), all);
    assert_eq!(done.len(), 1, "the signature UMR is taken");
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ, "the signature UMR is taken");
    (key, data, prot, psvs)
}

/// A signature key on side B (`on_b`) or A of `p` over `data_len` bytes of that side's
/// memory with no protection there ([`SigMemory::Data`] through its DMA key), `wire` on the
/// wire, the bytes of `check_mask` checked, registered on that side's RC QP: (key, data
/// address, that side's CQEs after the registration).
pub fn register_data(
    p: &mut RcPair,
    on_b: bool,
    data_len: usize,
    wire: Dif,
    check_mask: u8,
) -> (u32, u64, Vec<Vec<u8>>) {
    let (h, _) = side(p, on_b);
    let dma = h.create_mkey(false, true);
    let va = h.alloc(data_len as u64, 4096);
    let memory = SigMemory::Data { key: dma, va };
    let (key, _, done) = register(p, on_b, memory, data_len, (None, Some(wire)), check_mask);
    (key, va, done)
}

/// A's libmlx5 signature key ([`sig_key`], variant 0) over `data` followed by its 4-byte
/// CRC32 `crc` in A's memory, one SGE of both (as rdma-core's `reg_mr_sig_err` and
/// `reg_mr_sig_pipelining_client` lay it out): CRC32 in the memory domain, checked
/// (`check_mask` 0xf0), nothing on the wire. Panics unless the configure chain completes.
pub fn a_crc32_in_memory_key(p: &mut RcPair, data: &[u8], crc: &[u8]) -> u32 {
    let mut memory = data.to_vec();
    memory.extend_from_slice(crc);
    let dma = p.a.create_mkey(false, true);
    let buf = p.a.alloc(memory.len() as u64, 4096);
    p.a.write(buf, &memory);
    let (key, psvs) = sig_key(&mut p.a, 0);
    let mem = DvDomain {
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
            access: (true, true, true, false),
            layout: DvLayout::List(vec![(buf, memory.len() as u32, dma)]),
            mem: Some(mem),
            wire: None,
            check_mask: 0xf0,
            err_count: Some(1),
            keep_signature: false,
        },
    );
    let done = post_on(p, false, &wqes);
    assert_eq!(
        cqe_opcode(&done[0]),
        CQE_REQ,
        "the configure chain is taken"
    );
    key
}
