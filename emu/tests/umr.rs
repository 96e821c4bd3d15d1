//! Memory registration as Linux 6.12's mlx5_ib performs it: CREATE_MKEY as `reg_create` and
//! `_mlx5_alloc_mkey_descs` build it, the REG_UMR QP `mlx5r_umr_resource_init` opens, the
//! UMR WQEs `mlx5r_umr_post_send` posts on it (`mlx5r_umr_revoke_mr`,
//! `mlx5r_umr_update_mr_pas`, `mlx5r_umr_rereg_pd_access`), and fast registration, local
//! invalidation and remote invalidation as kernel ULPs post them on their own RC QPs
//! (`set_reg_wr`, `set_linv_wr` in `drivers/infiniband/hw/mlx5/wr.c`).

use cxdirect_emu::testkit::rc::{RcPair, RcPath};
use cxdirect_emu::testkit::rc::{GID_B, MAC_B};
use cxdirect_emu::testkit::{Cq, Host, Sq};
use cxdirect_emu::EmuConfig;
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::mkey::{mkey_from_index, CreateMkeyIn, CreateMkeyOut, Mkc, MKC_ACCESS_MODE_MTT};
use cxdirect_hw::wqe::{self, opcode, CtrlSeg, DataSeg, RaddrSeg};

const MEM: usize = 8 << 20;
/// CQE opcodes.
const CQE_REQ: u8 = 0x0;

fn pair() -> RcPair {
    RcPair::new(
        EmuConfig::default(),
        MEM,
        8,
        6,
        4,
        RcPath::to(GID_B, MAC_B, 0),
    )
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed))
        .collect()
}

fn drain(h: &Host, cq: &mut Cq) -> Vec<Vec<u8>> {
    std::iter::from_fn(|| h.poll_cq(cq)).collect()
}

fn cqe_opcode(cqe: &[u8]) -> u8 {
    cqe[63] >> 4
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

/// A one-WQEBB RC WQE of `op` (WRITE or READ) moving `len` bytes between `local` (address,
/// lkey) and `remote` (address, rkey), signalled, with fence mode `fm`.
fn rdma_wqe(sq: &Sq, op: u8, remote: (u64, u32), local: (u64, u32), len: u32, fm: u8) -> Vec<u8> {
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

/// Three pages of B's memory, in reverse order of their addresses so that the key's
/// translation is no identity, filled with zeros.
fn scattered_pages(h: &mut Host) -> Vec<u64> {
    let mut pages: Vec<u64> = (0..3).map(|_| h.alloc(4096, 4096)).collect();
    pages.reverse();
    for &p in &pages {
        h.write(p, &[0; 4096]);
    }
    pages
}

/// Reads `len` bytes at key offset `offset` of a region whose pages are `pages`, starting
/// `first` bytes into the first page.
fn read_through(h: &Host, pages: &[u64], first: u64, offset: u64, len: usize) -> Vec<u8> {
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
