//! Signature (T10-DIF) offload as Linux 6.12's mlx5_ib drives it for NVMe over RDMA and iSER
//! with protection information: CREATE_PSV as `mlx5_core_create_psv` sends it, the integrity
//! key `mlx5_alloc_integrity_descs` creates (`bsf_en`), the WQEs `handle_reg_mr_integrity`
//! posts (the signature UMR of `set_sig_umr_wr` with the BSF of `mlx5_set_bsf`, then two
//! SET_PSV of `set_psv_wr`), and the data moving through the key: protection inserted on the
//! wire, checked and stripped into memory, a bad block reported as the SIG_ERR CQE
//! `get_sig_err_item` reads.

use cxdirect_emu::testkit::rc::{RcPair, RcPath, RemoteRights};
use cxdirect_emu::testkit::rc::{GID_B, MAC_B};
use cxdirect_emu::testkit::{Cq, Host, Sq};
use cxdirect_emu::EmuConfig;
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::mkey::{mkey_from_index, CreateMkeyIn, CreateMkeyOut, Mkc, MKC_ACCESS_MODE_KLM};
use cxdirect_hw::sig::{
    bsf_flags, copy, crc16_t10dif, inl, ip_checksum, sig_err, Bsf, CreatePsvIn, CreatePsvOut,
    DestroyPsvIn, SetPsvSeg, SigErrCqe, StrideBlockCtrl, StrideBlockEntry, BSF_OCTOWORDS,
    STRIDE_BLOCK_OP,
};
use cxdirect_hw::umr::{flags, mkey_mask, Klm, UmrCtrlSeg};
use cxdirect_hw::wqe::{self, opcode, CtrlSeg, DataSeg, RaddrSeg};

const MEM: usize = 8 << 20;
const CQE_REQ: u8 = 0x0;
const CQE_SIG_ERR: u8 = 0xc;
const BLOCK: usize = 512;
const UNIT: usize = BLOCK + 8;

fn pair() -> RcPair {
    RcPair::new(
        EmuConfig {
            odp: false,
            ..EmuConfig::default()
        },
        MEM,
        8,
        6,
        4,
        RcPath::to(GID_B, MAC_B, 0),
    )
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn drain(h: &Host, cq: &mut Cq) -> Vec<Vec<u8>> {
    std::iter::from_fn(|| h.poll_cq(cq)).collect()
}

fn cqe_opcode(cqe: &[u8]) -> u8 {
    cqe[63] >> 4
}

/// CREATE_PSV of `num` PSVs in `pd`, as `mlx5_core_create_psv`: the PSV numbers.
fn create_psv(h: &mut Host, pd: u32, num: u8) -> Result<Vec<u32>, cxdirect_emu::testkit::CmdFail> {
    let mut input = Host::input(Opcode::CreatePsv, 0, 0x10);
    CreatePsvIn::new(&mut input[..])
        .expect("layout")
        .set_num_psv(num)
        .set_pd(pd);
    let out = h.exec(&input, 0x20)?;
    let out = CreatePsvOut::new(&out[..]).expect("layout");
    let all = [
        out.psv0_index(),
        out.psv1_index(),
        out.psv2_index(),
        out.psv3_index(),
    ];
    Ok(all[..usize::from(num)].to_vec())
}

fn destroy_psv(h: &mut Host, psv: u32) -> Result<(), cxdirect_emu::testkit::CmdFail> {
    let mut input = Host::input(Opcode::DestroyPsv, 0, 0x10);
    DestroyPsvIn::new(&mut input[..])
        .expect("layout")
        .set_psvn(psv);
    h.exec(&input, 0x10).map(|_| ())
}

/// CREATE_MKEY of the signature key as `mlx5_alloc_integrity_descs` builds it through
/// `_mlx5_alloc_mkey_descs` / `mlx5_set_umr_free_mkey`: KLM, four descriptors, free, `umr_en`,
/// lr and relaxed ordering, its PD, `bsf_en` with a four-octoword BSF.
fn integrity_key(
    h: &mut Host,
    pd: u32,
    mode: u8,
    bsf_octowords: u32,
) -> Result<u32, cxdirect_emu::testkit::CmdFail> {
    let mut input = Host::input(Opcode::CreateMkey, 0, 0x110);
    CreateMkeyIn::new(&mut input[..])
        .expect("layout")
        .memory_key_mkey_entry_mut()
        .set_lr(true)
        .set_relaxed_ordering_write(true)
        .set_relaxed_ordering_read(true)
        .set_pd(pd)
        .set_qpn(0xff_ffff)
        .set_free(true)
        .set_translations_octword_size(4)
        .set_access_mode_1_0(mode)
        .set_umr_en(true)
        .set_bsf_en(true)
        .set_bsf_octword_size(bsf_octowords)
        .set_mkey_7_0(0);
    let out = h.exec(&input, 16)?;
    Ok(mkey_from_index(
        CreateMkeyOut::new(&out[..]).expect("layout").mkey_index(),
        0,
    ))
}

/// One domain's T10-DIF attributes (`struct ib_t10_dif_domain`).
#[derive(Clone, Copy)]
struct Dif {
    crc: bool,
    app_tag: u16,
    ref_tag: u32,
    ref_remap: bool,
}

const TYPE1: Dif = Dif {
    crc: true,
    app_tag: 0,
    ref_tag: 0x1000,
    ref_remap: true,
};

/// Where the signature key's memory lies (`set_sig_data_segment`).
enum Memory {
    /// No protection in memory: one KLM over the data.
    Data { key: u32, va: u64 },
    /// Protection apart: the strided block list over data and protection.
    Apart { key: u32, data: u64, prot: u64 },
}

/// `mlx5_fill_inl_bsf` into the inline section at byte `at` of the BSF.
fn fill_inl(bsf: &mut [u8], at: usize, d: Dif) {
    let s = &mut bsf[at..at + 16];
    s[0..2].copy_from_slice(&(inl::VALID | inl::REFRESH_DIF).to_be_bytes());
    s[2..4].copy_from_slice(&d.app_tag.to_be_bytes());
    s[4..8].copy_from_slice(&d.ref_tag.to_be_bytes());
    s[8] = if d.crc { inl::DIF_CRC } else { inl::DIF_IPCS };
    s[9] = inl::REPEAT_BLOCK;
    s[0xd] = if d.ref_remap { inl::INC_REFTAG } else { 0 };
    s[0xe..0x10].copy_from_slice(&0xffffu16.to_be_bytes());
}

/// The WQEs `handle_reg_mr_integrity` posts when the data is one buffer (no pi_mr: the PD's
/// DMA key): the signature UMR (`set_sig_umr_wr`: CHECK_FREE ("fail if not free") and inline,
/// `sig_mkey_mask`, the key segment of `set_sig_mkey_segment`, the KLM or strided list, the
/// BSF of `mlx5_set_bsf`), then SET_PSV for memory and for wire (`set_psv_wr`).
#[allow(clippy::too_many_arguments)]
fn reg_mr_integrity(
    sq: &mut Sq,
    key: u32,
    pd: u32,
    psvs: (u32, u32),
    memory: &Memory,
    blocks: usize,
    mem: Option<Dif>,
    wire: Option<Dif>,
    check_mask: u8,
) -> Vec<Vec<u8>> {
    // sigerr_count & 1: one after `mlx5_alloc_integrity_descs` armed the first error.
    reg_mr_integrity_counted(sq, key, pd, psvs, memory, blocks, mem, wire, check_mask, 1)
}

/// [`reg_mr_integrity`] once mlx5_ib has counted `sigerr_count` signature errors (plus the
/// one it starts from): its parity goes to `expected_sigerr_count`.
#[allow(clippy::too_many_arguments)]
fn reg_mr_integrity_counted(
    sq: &mut Sq,
    key: u32,
    pd: u32,
    psvs: (u32, u32),
    memory: &Memory,
    blocks: usize,
    mem: Option<Dif>,
    wire: Option<Dif>,
    check_mask: u8,
    sigerr_count: u32,
) -> Vec<Vec<u8>> {
    let data_len = (blocks * BLOCK) as u32;
    let region = match memory {
        Memory::Data { .. } => data_len,
        Memory::Apart { .. } => data_len + blocks as u32 * 8,
    };
    let mut w = vec![0u8; 256 + 64];
    CtrlSeg::new(&mut w[..16])
        .expect("layout")
        .set_opcode(opcode::UMR)
        .set_wqe_index(sq.pi)
        .set_qpn_or_sqn(sq.sqn)
        .set_ds(((16 + 48 + 64 + 64 + 64) / 16) as u8)
        .set_ce(wqe::completion::ALWAYS)
        .set_imm(key);
    UmrCtrlSeg::new(&mut w[16..64])
        .expect("layout")
        .set_flags(flags::INLINE | flags::CHECK_NOT_FREE)
        .set_xlt_octowords(4)
        .set_xlt_offset(BSF_OCTOWORDS as u16)
        .set_mkey_mask(
            mkey_mask::LEN
                | mkey_mask::PAGE_SIZE
                | mkey_mask::START_ADDR
                | mkey_mask::EN_SIGERR
                | mkey_mask::EN_RINVAL
                | mkey_mask::KEY
                | mkey_mask::LR
                | mkey_mask::LW
                | mkey_mask::RR
                | mkey_mask::RW
                | mkey_mask::SMALL_FENCE
                | mkey_mask::FREE
                | mkey_mask::BSF_EN,
        );
    Mkc::new(&mut w[64..128])
        .expect("layout")
        .set_lr(true)
        .set_lw(true)
        .set_rr(true)
        .set_rw(true)
        .set_umr_en(true)
        .set_access_mode_1_0(MKC_ACCESS_MODE_KLM)
        .set_qpn(0xff_ffff)
        .set_mkey_7_0(key as u8)
        .set_en_rinval(true)
        .set_expected_sigerr_count(sigerr_count & 1 != 0)
        .set_bsf_en(true)
        .set_pd(pd)
        .set_len(u64::from(region))
        .set_translations_octword_size(4)
        .set_bsf_octword_size(BSF_OCTOWORDS);
    match *memory {
        Memory::Data { key, va } => {
            Klm::new(&mut w[128..144])
                .expect("layout")
                .set_byte_count(data_len)
                .set_key(key)
                .set_address(va);
        }
        Memory::Apart { key, data, prot } => {
            StrideBlockCtrl::new(&mut w[128..144])
                .expect("layout")
                .set_bcount_per_cycle(UNIT as u32)
                .set_op(STRIDE_BLOCK_OP)
                .set_repeat_count(blocks as u32)
                .set_num_entries(2);
            StrideBlockEntry::new(&mut w[144..160])
                .expect("layout")
                .set_bcount(BLOCK as u16)
                .set_key(key)
                .set_va(data)
                .set_stride(BLOCK as u16);
            StrideBlockEntry::new(&mut w[160..176])
                .expect("layout")
                .set_bcount(8)
                .set_key(key)
                .set_va(prot)
                .set_stride(8);
        }
    }
    {
        let bsf = &mut w[192..256];
        let mut b = Bsf::new(&mut bsf[..]).expect("layout");
        b.set_bsf_size_sbs(bsf_flags::FULL)
            .set_check_byte_mask(check_mask)
            .set_raw_data_size(data_len);
        if mem.is_some() {
            b.set_mem_bs_selector(1).set_m_bfs_psv(psvs.0);
        }
        if let Some(wd) = wire {
            b.set_w_bfs_psv(psvs.1);
            match mem {
                Some(md) => {
                    let mut copy_mask = 0;
                    if md.crc == wd.crc {
                        copy_mask |= copy::GUARD;
                    }
                    if md.app_tag == wd.app_tag {
                        copy_mask |= copy::APP_TAG;
                    }
                    if md.ref_tag == wd.ref_tag {
                        copy_mask |= copy::REF_TAG;
                    }
                    b.set_bsf_size_sbs(bsf_flags::FULL | bsf_flags::SAME_BLOCKS)
                        .set_wire_flags(copy_mask);
                }
                None => {
                    b.set_wire_flags(1);
                }
            }
        }
        if let Some(md) = mem {
            fill_inl(bsf, 48, md);
        }
        if let Some(wd) = wire {
            fill_inl(bsf, 32, wd);
        }
    }
    w.truncate(256);
    sq.pi = sq.pi.wrapping_add(4);
    let mut out = vec![w];
    for (psv, d) in [(psvs.0, mem), (psvs.1, wire)] {
        let mut p = vec![0u8; 64];
        CtrlSeg::new(&mut p[..16])
            .expect("layout")
            .set_opcode(opcode::SET_PSV)
            .set_wqe_index(sq.pi)
            .set_qpn_or_sqn(sq.sqn)
            .set_ds(2)
            .set_ce(0);
        let mut seg = SetPsvSeg::new(&mut p[16..32]).expect("layout");
        seg.set_psv_num(psv);
        if let Some(d) = d {
            seg.set_transient_sig(u32::from(d.app_tag))
                .set_ref_tag(d.ref_tag);
        }
        sq.pi = sq.pi.wrapping_add(1);
        out.push(p);
    }
    out
}

/// Posts `wqes` (already indexed) on `sq` of host `h` with one doorbell.
fn post_all(h: &Host, sq: &mut Sq, wqes: &[Vec<u8>]) {
    let pi = sq.pi;
    sq.pi = pi.wrapping_sub(wqes.iter().map(|w| (w.len() / 64) as u16).sum::<u16>());
    for w in wqes {
        h.post(sq, w, false);
    }
    assert_eq!(sq.pi, pi);
}

/// The wire view of `data`: each 512-byte block followed by its T10-DIF field in `d`.
fn with_dif(data: &[u8], d: Dif) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, block) in data.chunks(BLOCK).enumerate() {
        out.extend_from_slice(block);
        out.extend_from_slice(&pi_of(block, d, i));
    }
    out
}

fn pi_of(block: &[u8], d: Dif, i: usize) -> [u8; 8] {
    let guard = if d.crc {
        crc16_t10dif(block)
    } else {
        ip_checksum(block)
    };
    let reference = if d.ref_remap {
        d.ref_tag + i as u32
    } else {
        d.ref_tag
    };
    let mut pi = [0u8; 8];
    pi[0..2].copy_from_slice(&guard.to_be_bytes());
    pi[2..4].copy_from_slice(&d.app_tag.to_be_bytes());
    pi[4..8].copy_from_slice(&reference.to_be_bytes());
    pi
}

/// A one-WQEBB RC WQE of `op` moving `len` bytes between `local` and `remote`, signalled.
fn rdma_wqe(sq: &Sq, op: u8, remote: (u64, u32), local: (u64, u32), len: u32) -> Vec<u8> {
    let mut w = vec![0u8; 64];
    CtrlSeg::new(&mut w[..16])
        .expect("layout")
        .set_opcode(op)
        .set_wqe_index(sq.pi)
        .set_qpn_or_sqn(sq.sqn)
        .set_ds(3)
        .set_ce(wqe::completion::ALWAYS)
        .set_fm(wqe::fence_mode::INITIATOR_SMALL);
    RaddrSeg::new(&mut w[16..32])
        .expect("layout")
        .set_raddr(remote.0)
        .set_rkey(remote.1);
    DataSeg::new(&mut w[32..48])
        .expect("layout")
        .set_byte_count(len)
        .set_lkey(local.1)
        .set_addr(local.0);
    w
}

const ALL: RemoteRights = RemoteRights {
    read: true,
    write: true,
    atomic: false,
};

#[test]
fn sho_is_reported_so_that_mlx5_ib_reports_integrity_handover() {
    let mut p = pair();
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
    let mut p = pair();
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
    let mut p = pair();
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
    let pd = p.a.pd;
    let dma = p.a.create_mkey(false, true);
    let buf = p.a.alloc(data.len() as u64, 4096);
    p.a.write(buf, data);
    let psvs = create_psv(&mut p.a, pd, 2).expect("PSVs");
    let key = integrity_key(&mut p.a, pd, MKC_ACCESS_MODE_KLM, BSF_OCTOWORDS).expect("key");
    let key = key | 0x01;
    let blocks = data.len() / BLOCK;
    let wqes = reg_mr_integrity(
        &mut p.qp_a.sq,
        key,
        pd,
        (psvs[0], psvs[1]),
        &Memory::Data { key: dma, va: buf },
        blocks,
        None,
        Some(wire),
        0,
    );
    post_all(&p.a, &mut p.qp_a.sq, &wqes);
    p.settle();
    let done = drain(&p.a, &mut p.cq_a);
    assert_eq!(done.len(), 1, "the UMR completes; SET_PSV is not signalled");
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ);
    key
}

#[test]
fn a_write_from_a_signature_key_inserts_dif_on_the_wire() {
    let mut p = pair();
    let data = pattern(3 * BLOCK, 7);
    let key = a_key_inserting(&mut p, &data, TYPE1);
    let wire_len = 3 * UNIT;
    let rkey = {
        let pd = p.b.pd;
        p.b.create_remote_mkey(pd, cxdirect_emu::testkit::IOVA_BASE, MEM as u64, ALL, 0x11)
    };
    let dst = p.b.alloc(wire_len as u64, 4096);
    let w = rdma_wqe(
        &p.qp_a.sq,
        opcode::RDMA_WRITE,
        (dst, rkey),
        (0, key),
        wire_len as u32,
    );
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    let done = drain(&p.a, &mut p.cq_a);
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
    let mut p = pair();
    let data = pattern(2 * BLOCK, 9);
    let dif = Dif {
        crc: false,
        app_tag: 0x4242,
        ref_tag: 77,
        ref_remap: false,
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

/// B's signature key over data and protection apart in B's memory (`Memory::Apart`), T10-DIF
/// type 1 in both domains checking all eight bytes: (key, data address, protection address).
fn b_key_apart(p: &mut RcPair, blocks: usize) -> (u32, u64, u64) {
    let (key, data, prot, _) = b_key_apart_psvs(p, blocks);
    (key, data, prot)
}

/// [`b_key_apart`], with the key's (memory, wire) PSVs.
fn b_key_apart_psvs(p: &mut RcPair, blocks: usize) -> (u32, u64, u64, (u32, u32)) {
    let pd = p.b.pd;
    let dma = p.b.create_mkey(false, true);
    let data = p.b.alloc((blocks * BLOCK) as u64, 4096);
    let prot = p.b.alloc((blocks * 8) as u64, 4096);
    p.b.write(data, &vec![0; blocks * BLOCK]);
    p.b.write(prot, &vec![0; blocks * 8]);
    let psvs = create_psv(&mut p.b, pd, 2).expect("PSVs");
    let key = integrity_key(&mut p.b, pd, MKC_ACCESS_MODE_KLM, BSF_OCTOWORDS).expect("key") | 0x01;
    let wqes = reg_mr_integrity(
        &mut p.qp_b.sq,
        key,
        pd,
        (psvs[0], psvs[1]),
        &Memory::Apart {
            key: dma,
            data,
            prot,
        },
        blocks,
        Some(TYPE1),
        Some(TYPE1),
        copy::GUARD | copy::APP_TAG | copy::REF_TAG,
    );
    post_all(&p.b, &mut p.qp_b.sq, &wqes);
    p.settle();
    let done = drain(&p.b, &mut p.cq_b);
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ, "B's integrity registration");
    assert_eq!(
        p.b.dev.psv(psvs[0]),
        Some((0, TYPE1.ref_tag)),
        "SET_PSV seeded the memory PSV"
    );
    (key, data, prot, (psvs[0], psvs[1]))
}

/// A's WRITE of `wire` to offset 0 of B's key `rkey`: A's completion opcode.
fn write_from_a(p: &mut RcPair, rkey: u32, wire: &[u8]) -> u8 {
    let lkey = p.a.create_mkey(false, true);
    let src = p.a.alloc(wire.len() as u64, 4096);
    p.a.write(src, wire);
    let w = rdma_wqe(
        &p.qp_a.sq,
        opcode::RDMA_WRITE,
        (0, rkey),
        (src, lkey),
        wire.len() as u32,
    );
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    let done = drain(&p.a, &mut p.cq_a);
    assert_eq!(done.len(), 1);
    cqe_opcode(&done[0])
}

#[test]
fn a_peer_write_into_a_signature_key_is_checked_and_split_into_data_and_protection() {
    let mut p = pair();
    let blocks = 4;
    let (key, data_at, prot_at, psvs) = b_key_apart_psvs(&mut p, blocks);
    let data = pattern(blocks * BLOCK, 3);
    let wire = with_dif(&data, TYPE1);
    assert_eq!(write_from_a(&mut p, key, &wire), CQE_REQ);
    // Both PSVs end at the last block: its guard and tags.
    let last = pi_of(&data[(blocks - 1) * BLOCK..], TYPE1, blocks - 1);
    let sig = u32::from_be_bytes([last[0], last[1], last[2], last[3]]);
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
    let prot: Vec<u8> = (0..blocks)
        .flat_map(|i| pi_of(&data[i * BLOCK..(i + 1) * BLOCK], TYPE1, i))
        .collect();
    assert_eq!(p.b.read(prot_at, blocks * 8), prot, "the protection, apart");
}

#[test]
fn a_corrupted_guard_is_reported_as_the_sig_err_cqe_mlx5_ib_reads() {
    let mut p = pair();
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
    let mut inv = vec![0u8; 128];
    CtrlSeg::new(&mut inv[..16])
        .expect("layout")
        .set_opcode(opcode::UMR)
        .set_wqe_index(p.qp_b.sq.pi)
        .set_qpn_or_sqn(p.qp_b.sq.sqn)
        .set_ds(8)
        .set_imm(key);
    UmrCtrlSeg::new(&mut inv[16..64])
        .expect("layout")
        .set_flags(flags::INLINE)
        .set_mkey_mask(mkey_mask::FREE);
    Mkc::new(&mut inv[64..128]).expect("layout").set_free(true);
    p.qp_b.sq.pi = p.qp_b.sq.pi.wrapping_add(2);
    let next = (key & !0xff) | 0x02;
    let mut wqes = vec![inv];
    wqes.extend(reg_mr_integrity_counted(
        &mut p.qp_b.sq,
        next,
        pd,
        (psvs[0], psvs[1]),
        &Memory::Apart {
            key: dma,
            data: data_at,
            prot: prot_at,
        },
        blocks,
        Some(TYPE1),
        Some(TYPE1),
        copy::GUARD | copy::APP_TAG | copy::REF_TAG,
        2,
    ));
    let mut sq = std::mem::replace(&mut p.qp_b.sq, dummy_sq());
    post_all(&p.b, &mut sq, &wqes);
    p.qp_b.sq = sq;
    p.settle();
    let done = drain(&p.b, &mut p.cq_b);
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

fn dummy_sq() -> Sq {
    Sq {
        sqn: 0,
        buf: 0,
        dbr: 0,
        log: 0,
        pi: 0,
        bf_toggle: false,
    }
}

#[test]
fn a_bad_reference_tag_in_memory_is_reported_when_the_peer_reads_the_key() {
    let mut p = pair();
    let blocks = 2;
    let (key, data_at, prot_at) = b_key_apart(&mut p, blocks);
    let data = pattern(blocks * BLOCK, 11);
    p.b.write(data_at, &data);
    let mut prot: Vec<u8> = (0..blocks)
        .flat_map(|i| pi_of(&data[i * BLOCK..(i + 1) * BLOCK], TYPE1, i))
        .collect();
    p.b.write(prot_at, &prot);
    // A READs the wire view (nvmet reading a host's WRITE data): memory's protection, checked.
    let lkey = p.a.create_mkey(false, true);
    let dst = p.a.alloc((blocks * UNIT) as u64, 4096);
    let w = rdma_wqe(
        &p.qp_a.sq,
        opcode::RDMA_READ,
        (0, key),
        (dst, lkey),
        (blocks * UNIT) as u32,
    );
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    assert_eq!(cqe_opcode(&drain(&p.a, &mut p.cq_a)[0]), CQE_REQ);
    assert_eq!(p.a.read(dst, blocks * UNIT), with_dif(&data, TYPE1));
    assert!(drain(&p.b, &mut p.cq_b).is_empty());
    // Block 1's reference tag wrong in memory: B reports it.
    prot[8 + 7] ^= 0x40;
    p.b.write(prot_at, &prot);
    let w = rdma_wqe(
        &p.qp_a.sq,
        opcode::RDMA_READ,
        (0, key),
        (dst, lkey),
        (blocks * UNIT) as u32,
    );
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    assert_eq!(cqe_opcode(&drain(&p.a, &mut p.cq_a)[0]), CQE_REQ);
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
    let mut p = pair();
    // A's key: data alone in A's memory, DIF on the wire, guards checked (nvmet's RDMA READ
    // of the host's data into its own buffer).
    let pd = p.a.pd;
    let dma = p.a.create_mkey(false, true);
    let blocks = 2;
    let buf = p.a.alloc((blocks * BLOCK) as u64, 4096);
    let psvs = create_psv(&mut p.a, pd, 2).expect("PSVs");
    let key = integrity_key(&mut p.a, pd, MKC_ACCESS_MODE_KLM, BSF_OCTOWORDS).expect("key") | 1;
    // Local write for the READ response scatter: `IB_ACCESS_LOCAL_WRITE` in the reg WR.
    let wqes = reg_mr_integrity(
        &mut p.qp_a.sq,
        key,
        pd,
        (psvs[0], psvs[1]),
        &Memory::Data { key: dma, va: buf },
        blocks,
        None,
        Some(TYPE1),
        copy::GUARD,
    );
    post_all(&p.a, &mut p.qp_a.sq, &wqes);
    p.settle();
    assert_eq!(drain(&p.a, &mut p.cq_a).len(), 1);
    let data = pattern(blocks * BLOCK, 13);
    let mut wire = with_dif(&data, TYPE1);
    let src = p.b.alloc(wire.len() as u64, 4096);
    let rkey = {
        let pd = p.b.pd;
        p.b.create_remote_mkey(pd, cxdirect_emu::testkit::IOVA_BASE, MEM as u64, ALL, 0x12)
    };
    p.b.write(src, &wire);
    let w = rdma_wqe(
        &p.qp_a.sq,
        opcode::RDMA_READ,
        (src, rkey),
        (0, key),
        wire.len() as u32,
    );
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    let done = drain(&p.a, &mut p.cq_a);
    assert_eq!(done.len(), 1);
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ);
    assert_eq!(p.a.read(buf, blocks * BLOCK), data, "protection stripped");
    // Block 0's guard corrupted at the source: a SIG_ERR CQE before the READ's completion.
    wire[BLOCK] ^= 0xff;
    p.b.write(src, &wire);
    let w = rdma_wqe(
        &p.qp_a.sq,
        opcode::RDMA_READ,
        (src, rkey),
        (0, key),
        wire.len() as u32,
    );
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    let done = drain(&p.a, &mut p.cq_a);
    assert_eq!(done.len(), 2, "SIG_ERR, then the READ");
    assert_eq!(cqe_opcode(&done[0]), CQE_SIG_ERR);
    assert_eq!(cqe_opcode(&done[1]), CQE_REQ);
    let e = SigErrCqe::new(&done[0][..64]).expect("layout");
    assert_eq!((e.syndrome(), e.err_offset()), (sig_err::GUARD, 0));
}

/// CREATE_MKEY of the key `mlx5_ib_alloc_pi_mr` makes for the MTT path (`mtt_mr`): free,
/// `umr_en`, MTT, ALIGN(max_num_sg + max_num_meta_sg, 4) descriptors, 4 KiB pages, lr.
fn pi_mtt_key(h: &mut Host, pd: u32, ndescs: u32) -> u32 {
    let mut input = Host::input(Opcode::CreateMkey, 0, 0x110);
    CreateMkeyIn::new(&mut input[..])
        .expect("layout")
        .memory_key_mkey_entry_mut()
        .set_lr(true)
        .set_relaxed_ordering_write(true)
        .set_pd(pd)
        .set_qpn(0xff_ffff)
        .set_free(true)
        .set_translations_octword_size(ndescs.next_multiple_of(4))
        .set_access_mode_1_0(cxdirect_hw::mkey::MKC_ACCESS_MODE_MTT)
        .set_umr_en(true)
        .set_log_page_size(12);
    let out = h.exec(&input, 16).expect("CREATE_MKEY of the pi_mr");
    mkey_from_index(
        CreateMkeyOut::new(&out[..]).expect("layout").mkey_index(),
        0,
    )
}

/// The first UMR of `handle_reg_mr_integrity` with a pi_mr: `set_reg_wr` over the data pages
/// and then the metadata pages (`mlx5_set_page` / `mlx5_set_page_pi`, each entry with
/// `MLX5_EN_RD | MLX5_EN_WR`), no free-state check, the list inline, `frwr_mkey_mask`,
/// `set_reg_mkey_seg` (4 KiB pages, the data IOVA, the length up to the metadata's end).
fn reg_pi_mr_wqe(sq: &mut Sq, key: u32, pages: &[u64], iova: u64, len: u64) -> Vec<u8> {
    let list: Vec<u8> = pages.iter().flat_map(|p| (p | 3).to_be_bytes()).collect();
    let tail = list.len().next_multiple_of(64);
    let mut w = vec![0u8; 128 + tail];
    CtrlSeg::new(&mut w[..16])
        .expect("layout")
        .set_opcode(opcode::UMR)
        .set_wqe_index(sq.pi)
        .set_qpn_or_sqn(sq.sqn)
        .set_ds(((128 + tail) / 16) as u8)
        .set_imm(key);
    UmrCtrlSeg::new(&mut w[16..64])
        .expect("layout")
        .set_flags(flags::INLINE)
        .set_xlt_octowords((tail / 16) as u16)
        .set_mkey_mask(
            mkey_mask::LEN
                | mkey_mask::PAGE_SIZE
                | mkey_mask::START_ADDR
                | mkey_mask::EN_RINVAL
                | mkey_mask::KEY
                | mkey_mask::LR
                | mkey_mask::LW
                | mkey_mask::RR
                | mkey_mask::RW
                | mkey_mask::SMALL_FENCE
                | mkey_mask::FREE,
        );
    Mkc::new(&mut w[64..128])
        .expect("layout")
        .set_lr(true)
        .set_lw(true)
        .set_rr(true)
        .set_rw(true)
        .set_umr_en(true)
        .set_access_mode_1_0(cxdirect_hw::mkey::MKC_ACCESS_MODE_MTT)
        .set_qpn(0xff_ffff)
        .set_mkey_7_0(key as u8)
        .set_en_rinval(true)
        .set_start_addr(iova)
        .set_len(len)
        .set_translations_octword_size((pages.len().next_multiple_of(8) >> 1) as u32)
        .set_log_page_size(12);
    w[128..128 + list.len()].copy_from_slice(&list);
    sq.pi = sq.pi.wrapping_add((w.len() / 64) as u16);
    w
}

#[test]
fn a_pi_mr_of_data_and_metadata_pages_carries_a_peer_write_as_mlx5_ib_maps_it() {
    let mut p = pair();
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
    let pi_mr = pi_mtt_key(&mut p.b, pd, 2 * 33);
    let psvs = create_psv(&mut p.b, pd, 2).expect("PSVs");
    let key = integrity_key(&mut p.b, pd, MKC_ACCESS_MODE_KLM, BSF_OCTOWORDS).expect("key") | 1;
    let mut sq = std::mem::replace(&mut p.qp_b.sq, dummy_sq());
    let mut wqes = vec![reg_pi_mr_wqe(
        &mut sq,
        pi_mr,
        &[data_pages[0], data_pages[1], meta_page],
        iova,
        pi_len,
    )];
    wqes.extend(reg_mr_integrity(
        &mut sq,
        key,
        pd,
        (psvs[0], psvs[1]),
        &Memory::Apart {
            key: pi_mr,
            data: iova,
            prot: pi_iova,
        },
        blocks,
        Some(TYPE1),
        Some(TYPE1),
        copy::GUARD | copy::REF_TAG,
    ));
    post_all(&p.b, &mut sq, &wqes);
    p.qp_b.sq = sq;
    p.settle();
    let done = drain(&p.b, &mut p.cq_b);
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
    let prot: Vec<u8> = (0..blocks)
        .flat_map(|i| pi_of(&data[i * BLOCK..(i + 1) * BLOCK], TYPE1, i))
        .collect();
    assert_eq!(
        p.b.read(meta_page + 0x100, blocks * 8),
        prot,
        "the protection in its page"
    );
}
