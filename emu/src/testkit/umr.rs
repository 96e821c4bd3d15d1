//! Memory registration WQEs for the test host, as Linux's mlx5_ib lays them out in
//! `drivers/infiniband/hw/mlx5/wr.c`: the UMR WQE (control segment, UMR control segment,
//! memory key segment, translation list inline or by pointer), the fast-registration key of
//! `ib_alloc_mr` (`_mlx5_alloc_mkey_descs`), IB_WR_REG_MR (`set_reg_wr`) and IB_WR_LOCAL_INV
//! (`set_linv_wr`), and the one-WQEBB RC WQE that moves data through such keys.

use super::rc::{RcPath, RemoteRights, GID_B, MAC_B};
use super::rc_pair::RcPair;
use super::{Cq, Host, Sq, IOVA_BASE};
use crate::EmuConfig;
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::mkey::{mkey_from_index, CreateMkeyIn, CreateMkeyOut, Mkc, MKC_ACCESS_MODE_MTT};
use cxdirect_hw::umr::{flags, mkey_mask, UmrCtrlSeg};
use cxdirect_hw::wqe::{self, opcode, CtrlSeg, DataSeg, RaddrSeg};

/// `MLX5_IB_MTT_PRESENT`: what Linux ORs into every MTT entry it loads by UMR (read and
/// write enabled).
pub const MTT_PRESENT: u64 = 3;

/// CQE opcode of a requester completion (`MLX5_CQE_REQ`).
pub const CQE_REQ: u8 = 0x0;

/// `frwr_mkey_mask(false)`: the memory key fields IB_WR_REG_MR sets.
pub const FRWR_MASK: u64 = mkey_mask::LEN
    | mkey_mask::PAGE_SIZE
    | mkey_mask::START_ADDR
    | mkey_mask::EN_RINVAL
    | mkey_mask::KEY
    | mkey_mask::LR
    | mkey_mask::LW
    | mkey_mask::RR
    | mkey_mask::RW
    | mkey_mask::SMALL_FENCE
    | mkey_mask::FREE;

/// Bytes of host memory each side of [`pair_without_pg`] has, from [`IOVA_BASE`].
pub const PAIR_MEM: usize = 8 << 20;

/// Two functions of 8 MiB of host memory each on a pair wire with one connected RC QP each,
/// without `pg` (`EmuConfig::odp` off): mlx5_ib builds its keys then with bare page
/// addresses (`reg_create`), and registers through UMR WQEs on its own QPs.
pub fn pair_without_pg() -> RcPair {
    RcPair::new(
        EmuConfig {
            odp: false,
            ..EmuConfig::default()
        },
        PAIR_MEM,
        8,
        6,
        4,
        RcPath::to(GID_B, MAC_B, 0),
    )
}

/// Every CQE waiting on `cq` of host `h`, oldest first.
pub fn drain(h: &Host, cq: &mut Cq) -> Vec<Vec<u8>> {
    std::iter::from_fn(|| h.poll_cq(cq)).collect()
}

/// A 64-byte CQE's opcode (the high nibble of `op_own`).
pub fn cqe_opcode(cqe: &[u8]) -> u8 {
    cqe[63] >> 4
}

/// A send queue standing in for one taken out of its QP while both are borrowed; it is
/// never posted to.
pub fn placeholder_sq() -> Sq {
    Sq {
        sqn: 0,
        buf: 0,
        dbr: 0,
        log: 0,
        pi: 0,
        bf_toggle: false,
    }
}

/// A one-WQEBB RC WQE of `op` (WRITE, READ) moving `len` bytes between `local` (address,
/// lkey) and `remote` (address, rkey), signalled, with fence mode `fm`.
pub fn rdma_wqe(
    sq: &Sq,
    op: u8,
    remote: (u64, u32),
    local: (u64, u32),
    len: u32,
    fm: u8,
) -> Vec<u8> {
    let mut w = vec![0u8; 64];
    CtrlSeg::new(&mut w[..16])
        .expect("layout")
        .set_opcode(op)
        .set_wqe_index(sq.pi)
        .set_qpn_or_sqn(sq.sqn)
        .set_ds(3)
        .set_ce(wqe::completion::ALWAYS)
        .set_fm(fm);
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

/// Posts a one-WQEBB [`rdma_wqe`] of `op` on A's RC QP of `p` moving `len` bytes between
/// `local` (address, lkey) and `remote` (address, rkey), with the small initiator fence
/// mlx5_ib's `get_fence` gives the WR after a registration, and settles the pair: A's CQEs.
pub fn rdma_from_a(
    p: &mut RcPair,
    op: u8,
    remote: (u64, u32),
    local: (u64, u32),
    len: u32,
) -> Vec<Vec<u8>> {
    let w = rdma_wqe(
        &p.qp_a.sq,
        op,
        remote,
        local,
        len,
        wqe::fence_mode::INITIATOR_SMALL,
    );
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    drain(&p.a, &mut p.cq_a)
}

/// `data` copied into fresh memory of A's under a fresh local key: (address, lkey).
pub fn staged_on_a(p: &mut RcPair, data: &[u8]) -> (u64, u32) {
    let lkey = p.a.create_mkey(false, true);
    let src = p.a.alloc(data.len() as u64, 4096);
    p.a.write(src, data);
    (src, lkey)
}

/// [`rdma_from_a`] of an RDMA WRITE of `data`, copied into fresh memory of A under a fresh
/// key, to `remote` (address, rkey): A's CQEs.
pub fn write_data_from_a(p: &mut RcPair, remote: (u64, u32), data: &[u8]) -> Vec<Vec<u8>> {
    let (src, lkey) = staged_on_a(p, data);
    rdma_from_a(
        p,
        opcode::RDMA_WRITE,
        remote,
        (src, lkey),
        data.len() as u32,
    )
}

/// A plain key of B's over all its [`PAIR_MEM`] bytes from [`IOVA_BASE`], remote read and
/// write, variant `variant`.
pub fn b_plain_rkey(p: &mut RcPair, variant: u8) -> u32 {
    let pd = p.b.pd;
    p.b.create_remote_mkey(
        pd,
        IOVA_BASE,
        PAIR_MEM as u64,
        RemoteRights::READ_WRITE,
        variant,
    )
}

/// Where a UMR WQE's translation list comes from.
pub enum List {
    /// Inline after the memory key segment (`MLX5_UMR_INLINE`), padded to a WQEBB.
    Inline(Vec<u8>),
    /// Through one data segment: address, lkey, bytes.
    Pointer(u64, u32, u32),
}

/// A UMR WQE as mlx5_ib lays it out: control segment (opcode UMR, `imm` the key, fence `fm`,
/// signalled), the UMR control segment (`umr_flags`, `octowords`, `offset` in octowords with
/// `MLX5_UMR_TRANSLATION_OFFSET_EN` when given, `mask`), the memory key segment `fill` writes,
/// then the list.
#[allow(clippy::too_many_arguments)]
pub fn umr_wqe(
    sq: &Sq,
    key: u32,
    fm: u8,
    umr_flags: u8,
    mask: u64,
    octowords: u16,
    offset: Option<u64>,
    fill: impl FnOnce(&mut Mkc<&mut [u8]>),
    list: &List,
) -> Vec<u8> {
    let tail = match list {
        List::Inline(bytes) => bytes.len().next_multiple_of(64),
        List::Pointer(..) => 16,
    };
    let ds = (128 + tail) / 16;
    let mut w = vec![0u8; (128 + tail).next_multiple_of(64)];
    CtrlSeg::new(&mut w[..16])
        .expect("layout")
        .set_opcode(opcode::UMR)
        .set_wqe_index(sq.pi)
        .set_qpn_or_sqn(sq.sqn)
        .set_ds(ds as u8)
        .set_ce(wqe::completion::ALWAYS)
        .set_fm(fm)
        .set_imm(key);
    let mut flags = umr_flags;
    if matches!(list, List::Inline(_)) {
        flags |= flags::INLINE;
    }
    {
        let mut u = UmrCtrlSeg::new(&mut w[16..64]).expect("layout");
        u.set_xlt_octowords(octowords).set_mkey_mask(mask);
        if let Some(offset) = offset {
            flags |= flags::TRANSLATION_OFFSET_EN;
            u.set_xlt_offset(offset as u16)
                .set_xlt_offset_47_16((offset >> 16) as u32);
        }
        u.set_flags(flags);
    }
    fill(&mut Mkc::new(&mut w[64..128]).expect("layout"));
    match list {
        List::Inline(bytes) => w[128..128 + bytes.len()].copy_from_slice(bytes),
        List::Pointer(addr, lkey, bytes) => {
            DataSeg::new(&mut w[128..144])
                .expect("layout")
                .set_byte_count(*bytes)
                .set_lkey(*lkey)
                .set_addr(*addr);
        }
    }
    w
}

/// `w` with its completion request cleared (a WQE mlx5_ib posts unsignalled).
pub fn unsignalled(mut w: Vec<u8>) -> Vec<u8> {
    CtrlSeg::new(&mut w[..16]).expect("layout").set_ce(0);
    w
}

/// MTT entries as a UMR list: big-endian, each with [`MTT_PRESENT`].
pub fn mtt_list(pages: &[u64]) -> Vec<u8> {
    pages
        .iter()
        .flat_map(|p| (p | MTT_PRESENT).to_be_bytes())
        .collect()
}

/// CREATE_MKEY as `_mlx5_alloc_mkey_descs` builds it for `ib_alloc_mr(IB_MR_TYPE_MEM_REG,
/// max_num_sg)` (and `mlx5_ib_alloc_pi_mr` for an integrity key's MTT `pi_mr`): free,
/// `umr_en`, MTT, `translations_octword_size` = ALIGN(max_num_sg, 4), 4 KiB pages, lr only,
/// no start or length; the key with `variant` in its low byte.
pub fn alloc_mr(h: &mut Host, pd: u32, max_num_sg: u32, variant: u8) -> u32 {
    let mut input = Host::input(Opcode::CreateMkey, 0, 0x110);
    let mut cmd = CreateMkeyIn::new(&mut input[..]).expect("layout");
    cmd.memory_key_mkey_entry_mut()
        .set_lr(true)
        .set_relaxed_ordering_write(true)
        .set_pd(pd)
        .set_qpn(0xff_ffff)
        .set_free(true)
        .set_translations_octword_size(max_num_sg.next_multiple_of(4))
        .set_access_mode_1_0(MKC_ACCESS_MODE_MTT)
        .set_umr_en(true)
        .set_log_page_size(12)
        .set_mkey_7_0(variant);
    let out = h.exec(&input, 16).expect("CREATE_MKEY for ib_alloc_mr");
    mkey_from_index(
        CreateMkeyOut::new(&out[..]).expect("layout").mkey_index(),
        variant,
    )
}

/// The IB_WR_REG_MR WQE `set_reg_wr` writes for `key` (its new variant in the low byte) over
/// 4 KiB `pages` at `iova` for `len` bytes: fence `umr_fence` (strong ordering), fail if not
/// free, the list inline (`umr_inline`), all four access rights granted, signalled.
pub fn reg_mr_wqe(sq: &Sq, key: u32, pages: &[u64], iova: u64, len: u64) -> Vec<u8> {
    reg_mr_wqe_with(
        sq,
        key,
        pages,
        iova,
        len,
        wqe::fence_mode::STRONG_ORDERING,
        flags::CHECK_NOT_FREE,
    )
}

/// [`reg_mr_wqe`] with fence mode `fm` and `umr_flags` of the caller's choosing
/// (`MLX5_UMR_CHECK_NOT_FREE` when the key must be free).
pub fn reg_mr_wqe_with(
    sq: &Sq,
    key: u32,
    pages: &[u64],
    iova: u64,
    len: u64,
    fm: u8,
    umr_flags: u8,
) -> Vec<u8> {
    let list = mtt_list(pages);
    let octowords = (list.len().next_multiple_of(64) / 16) as u16;
    umr_wqe(
        sq,
        key,
        fm,
        umr_flags,
        FRWR_MASK,
        octowords,
        None,
        |seg| {
            seg.set_a(false)
                .set_rw(true)
                .set_rr(true)
                .set_lw(true)
                .set_lr(true)
                .set_umr_en(true)
                .set_access_mode_1_0(MKC_ACCESS_MODE_MTT)
                .set_qpn(0xff_ffff)
                .set_mkey_7_0(key as u8)
                .set_en_rinval(true)
                .set_start_addr(iova)
                .set_len(len)
                .set_translations_octword_size((pages.len().next_multiple_of(8) >> 1) as u32)
                .set_log_page_size(12);
        },
        &List::Inline(list),
    )
}

/// The IB_WR_LOCAL_INV WQE `set_linv_wr` writes: mask FREE, the key's status free, inline,
/// signalled.
pub fn local_inv_wqe(sq: &Sq, key: u32) -> Vec<u8> {
    umr_wqe(
        sq,
        key,
        0,
        0,
        mkey_mask::FREE,
        0,
        None,
        |seg| {
            seg.set_free(true);
        },
        &List::Inline(Vec::new()),
    )
}

/// Three pages of B's memory, in reverse order of their addresses so that the key's
/// translation is no identity, filled with zeros.
pub fn scattered_pages(h: &mut Host) -> Vec<u64> {
    let mut pages: Vec<u64> = (0..3).map(|_| h.alloc(4096, 4096)).collect();
    pages.reverse();
    for &p in &pages {
        h.write(p, &[0; 4096]);
    }
    pages
}

/// Reads `len` bytes at key offset `offset` of a region whose pages are `pages`, starting
/// `first` bytes into the first page.
pub fn read_through(h: &Host, pages: &[u64], first: u64, offset: u64, len: usize) -> Vec<u8> {
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

/// Posts `w` on `sq` of side B (`on_b`) or A of `p`, settles the pair, and returns that
/// side's CQEs.
pub fn post_and_drain(p: &mut RcPair, on_b: bool, sq: &mut Sq, w: &[u8]) -> Vec<Vec<u8>> {
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
pub fn write_from_a(p: &mut RcPair, iova: u64, rkey: u32, data: &[u8]) -> (u8, u8) {
    let (src, lkey) = staged_on_a(p, data);
    let w = rdma_wqe(
        &p.qp_a.sq,
        opcode::RDMA_WRITE,
        (iova, rkey),
        (src, lkey),
        data.len() as u32,
        0,
    );
    let mut sq = std::mem::replace(&mut p.qp_a.sq, placeholder_sq());
    let done = post_and_drain(p, false, &mut sq, &w);
    p.qp_a.sq = sq;
    assert_eq!(done.len(), 1, "one completion for the WRITE");
    (cqe_opcode(&done[0]), done[0][0x37])
}

/// A's READ of `len` bytes at `iova` through `rkey`: the completion and the bytes.
pub fn read_from_a(p: &mut RcPair, iova: u64, rkey: u32, len: usize) -> (u8, Vec<u8>) {
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
    let done = post_and_drain(p, false, &mut sq, &w);
    p.qp_a.sq = sq;
    assert_eq!(done.len(), 1, "one completion for the READ");
    (cqe_opcode(&done[0]), p.a.read(dst, len))
}

/// B's posting of UMR WQE `w` on its RC QP: the completions.
pub fn umr_on_b(p: &mut RcPair, w: &[u8]) -> Vec<Vec<u8>> {
    let mut sq = std::mem::replace(&mut p.qp_b.sq, placeholder_sq());
    let done = post_and_drain(p, true, &mut sq, w);
    p.qp_b.sq = sq;
    done
}
