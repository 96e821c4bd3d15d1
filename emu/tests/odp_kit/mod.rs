//! What the on-demand paging tests share: two functions reporting ODP with the page-fault EQ
//! mlx5_ib opens, ODP memory regions as mlx5_ib makes and loads them, and PAGE_FAULT_RESUME
//! as it sends it. Each test file uses part of it.
#![allow(dead_code, unused_imports)]

pub use cxdirect_emu::testkit::pattern::pattern;
pub use cxdirect_emu::testkit::rc::{RcPath, GID_B, MAC_A, MAC_B};
pub use cxdirect_emu::testkit::rc_pair::RcPair;
pub use cxdirect_emu::testkit::{Cq, Host, Sq};
pub use cxdirect_emu::{Device, EmuConfig};
pub use cxdirect_hw::caps::CmdHcaCap;
pub use cxdirect_hw::cmd::Opcode;
pub use cxdirect_hw::eqe::EventType;
pub use cxdirect_hw::hca::cap_type;
pub use cxdirect_hw::mkey::{
    mkey_from_index, CreateMkeyIn, CreateMkeyOut, Mkc, MKC_ACCESS_MODE_MTT,
};
pub use cxdirect_hw::odp::{
    pfault_flags, pfault_subtype, wqe_pf_type, EqePageFaultRdma, EqePageFaultWqe, OdpCap,
    PageFaultResumeIn,
};
pub use cxdirect_hw::umr::{flags, mkey_mask, UmrCtrlSeg};
pub use cxdirect_hw::wqe::{self, opcode, CtrlSeg, DataSeg, RaddrSeg};
pub use std::time::Duration;

pub const MEM: usize = 8 << 20;
/// `MLX5_IB_MTT_READ | MLX5_IB_MTT_WRITE`: a page mapped for reading and writing.
pub const MTT_RW: u64 = 3;
pub const CQE_REQ: u8 = 0x0;
pub const CQE_RESP_SEND: u8 = 0x2;
pub const CQE_REQ_ERR: u8 = 0xd;
pub const SYND_LOCAL_PROT: u8 = 0x04;
pub const SYND_REMOTE_ACCESS: u8 = 0x13;
use cxdirect_emu::testkit::poll::settle_until;
pub use cxdirect_emu::testkit::poll::PAST_RNR;

/// Two functions reporting ODP, their async EQs taking every event but page faults (as
/// mlx5_core's do); with `pf_eq`, each opens the page-fault EQ mlx5_ib's
/// `mlx5r_odp_create_eq` opens (which the test kit's `drain_eq` then reads).
pub fn odp_pair(pf_eq: bool) -> RcPair {
    odp_pair_with_rmp_b(pf_eq, |_| None)
}

/// [`odp_pair`], B's QP taking its receives from the RMP (SRQ) `make_rmp` creates on B.
pub fn odp_pair_with_rmp_b(pf_eq: bool, make_rmp: impl FnOnce(&mut Host) -> Option<u32>) -> RcPair {
    let side = |mac| EmuConfig {
        roce: true,
        odp: true,
        mac,
        ..EmuConfig::default()
    };
    let (da, db) = Device::pair(side(MAC_A), side(MAC_B));
    let (wire, _) = da.wire().expect("a pair is wired");
    let mask = !(1u64 << EventType::PageFault as u8);
    let (mut a, mut b) = (Host::new(da, MEM), Host::new(db, MEM));
    a.async_event_mask = mask;
    b.async_event_mask = mask;
    let mut p =
        RcPair::on_hosts_with_rmp_b(a, b, wire, 8, 6, 4, RcPath::to(GID_B, MAC_B, 0), make_rmp);
    if pf_eq {
        p.a.create_async_eq(6, 1 << EventType::PageFault as u8);
        p.b.create_async_eq(6, 1 << EventType::PageFault as u8);
    }
    p
}

pub fn drain(h: &Host, cq: &mut Cq) -> Vec<Vec<u8>> {
    std::iter::from_fn(|| h.poll_cq(cq)).collect()
}

pub fn cqe_opcode(cqe: &[u8]) -> u8 {
    cqe[63] >> 4
}

/// Runs both functions, past RNR timers, until A's CQ (`on_a`) or B's has completions (at
/// most a second): the requester sends again after each RNR NAK on its own timer.
pub fn completions_after_rnr(p: &mut RcPair, on_a: bool) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    settle_until(
        p,
        |p| p.settle(),
        |p| {
            got = if on_a {
                drain(&p.a, &mut p.cq_a)
            } else {
                drain(&p.b, &mut p.cq_b)
            };
            !got.is_empty()
        },
    );
    got
}

/// The page-fault events on `h`'s page-fault EQ: (sub type, data).
pub fn page_faults(h: &mut Host) -> Vec<(u8, Vec<u8>)> {
    h.drain_eq()
        .into_iter()
        .filter(|(t, _, _)| *t == EventType::PageFault as u8)
        .map(|(_, sub, data)| (sub, data))
        .collect()
}

/// The one page-fault event `h` reported, of sub type `subtype`: its data.
pub fn one_fault(h: &mut Host, subtype: u8) -> Vec<u8> {
    let faults = page_faults(h);
    assert_eq!(faults.len(), 1, "one fault reported: {faults:?}");
    assert_eq!(faults[0].0, subtype);
    faults[0].1.clone()
}

/// An ODP memory region of `pages.len()` 4 KiB pages at `iova`, as mlx5_ib makes one: a key
/// from the mkey cache (`mlx5r_create_mkeys` / `set_cache_mkc`: free, `umr_en`, MTT, the UMR
/// PD, no `pg_access`), then `mlx5_ib_init_odp_mr`'s UMR with `MLX5_IB_UPD_XLT_ENABLE`
/// loading the pages present (`present[i]`) with read and write, the others 0.
pub struct OdpMr {
    pub key: u32,
    pub iova: u64,
    pub pages: Vec<u64>,
    umr_sq: Sq,
    umr_cq: Cq,
    umr_lkey: u32,
}

impl OdpMr {
    pub fn new(h: &mut Host, npages: usize, iova: u64, present: &[bool]) -> Self {
        let user_pd = h.pd;
        let umr_pd = h.alloc_pd();
        let umr_cq = h.create_cq(6);
        let umr_sq = h.create_reg_umr_qp(&umr_cq, 7);
        let saved = h.pd;
        h.pd = umr_pd;
        let umr_lkey = h.create_mkey(false, true);
        h.pd = saved;
        let pages: Vec<u64> = (0..npages).map(|_| h.alloc(4096, 4096)).collect();
        for &page in &pages {
            h.write(page, &[0; 4096]);
        }
        let variant = 0x5a;
        let mut input = Host::input(Opcode::CreateMkey, 0, 0x110);
        {
            let mut cmd = CreateMkeyIn::new(&mut input[..]).expect("layout");
            let mut mkc = cmd.memory_key_mkey_entry_mut();
            mkc.set_lr(true)
                .set_pd(umr_pd)
                .set_qpn(0xff_ffff)
                .set_free(true)
                .set_umr_en(true)
                .set_access_mode_1_0(MKC_ACCESS_MODE_MTT)
                .set_translations_octword_size(npages.div_ceil(2) as u32)
                .set_log_page_size(12)
                .set_mkey_7_0(variant);
        }
        let out = h
            .exec(&input, 16)
            .expect("CREATE_MKEY as set_cache_mkc builds it");
        let index = CreateMkeyOut::new(&out[..]).expect("layout").mkey_index();
        let key = mkey_from_index(index, variant);
        let mut mr = Self {
            key,
            iova,
            pages,
            umr_sq,
            umr_cq,
            umr_lkey,
        };
        let len = (npages * 4096) as u64;
        mr.update_xlt(h, present, true, user_pd, len);
        mr
    }

    /// `mlx5r_umr_update_xlt` over the whole (small) region: the entries of the pages
    /// `present` with read and write, the others 0, through the UMR PD's DMA key; with
    /// `enable` (`MLX5_IB_UPD_XLT_ENABLE`) the key's PD, access, start, length and page size
    /// too.
    pub fn update_xlt(&mut self, h: &mut Host, present: &[bool], enable: bool, pd: u32, len: u64) {
        let list: Vec<u8> = self
            .pages
            .iter()
            .zip(present)
            .flat_map(|(&p, &on)| if on { p | MTT_RW } else { 0 }.to_be_bytes())
            .collect();
        let padded = list.len().next_multiple_of(64);
        let buf = h.alloc(padded as u64, 64);
        h.write(buf, &[list.clone(), vec![0; padded - list.len()]].concat());
        let mut w = vec![0u8; 192];
        CtrlSeg::new(&mut w[..16])
            .expect("layout")
            .set_opcode(opcode::UMR)
            .set_wqe_index(self.umr_sq.pi)
            .set_qpn_or_sqn(self.umr_sq.sqn)
            .set_ds(9)
            .set_ce(wqe::completion::ALWAYS)
            .set_fm(wqe::fence_mode::INITIATOR_SMALL)
            .set_imm(self.key);
        let mask = if enable {
            mkey_mask::KEY
                | mkey_mask::FREE
                | mkey_mask::LR
                | mkey_mask::LW
                | mkey_mask::RR
                | mkey_mask::RW
                | mkey_mask::A
                | mkey_mask::PD
                | mkey_mask::LEN
                | mkey_mask::PAGE_SIZE
                | mkey_mask::START_ADDR
        } else {
            0
        };
        // mlx5r_umr_set_update_xlt_ctrl_seg: fail if not free when enabling, if free otherwise.
        let check = if enable {
            flags::CHECK_NOT_FREE
        } else {
            flags::CHECK_FREE
        };
        UmrCtrlSeg::new(&mut w[16..64])
            .expect("layout")
            .set_flags(check | flags::TRANSLATION_OFFSET_EN)
            .set_xlt_octowords((padded / 16) as u16)
            .set_xlt_offset(0)
            .set_mkey_mask(mask);
        Mkc::new(&mut w[64..128])
            .expect("layout")
            .set_lr(true)
            .set_lw(true)
            .set_rr(true)
            .set_rw(true)
            .set_a(true)
            .set_pd(pd)
            .set_start_addr(self.iova)
            .set_len(len)
            .set_log_page_size(12)
            .set_qpn(0xff_ffff)
            .set_mkey_7_0(self.key as u8);
        DataSeg::new(&mut w[128..144])
            .expect("layout")
            .set_byte_count(padded as u32)
            .set_lkey(self.umr_lkey)
            .set_addr(buf);
        h.post(&mut self.umr_sq, &w, false);
        h.dev.poll();
        let done = drain(h, &mut self.umr_cq);
        assert_eq!(done.len(), 1, "the UMR completed");
        assert_eq!(
            cqe_opcode(&done[0]),
            CQE_REQ,
            "the UMR succeeded (syndrome {:#x})",
            done[0][0x37]
        );
    }

    pub fn read(&self, h: &Host, len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(len);
        for &page in &self.pages {
            let n = (len - out.len()).min(4096);
            out.extend(h.read(page, n));
        }
        out
    }
}

/// PAGE_FAULT_RESUME as `mlx5_ib_page_fault_resume` fills it.
pub fn resume(h: &mut Host, pf_type: u8, wq: u32, token: u32, error: bool) -> Result<(), ()> {
    let mut input = Host::input(Opcode::PageFaultResume, 0, 0x10);
    PageFaultResumeIn::new(&mut input[..])
        .expect("layout")
        .set_page_fault_type(pf_type)
        .set_token(token)
        .set_wq_number(wq)
        .set_error(error);
    h.exec(&input, 16).map(|_| ()).map_err(|_| ())
}

/// A one-WQEBB WRITE or SEND WQE of `len` bytes from `local` (address, lkey), to `remote`
/// (address, rkey) for a WRITE, signalled.
pub fn wqe_of(sq: &Sq, op: u8, remote: (u64, u32), local: (u64, u32), len: u32) -> Vec<u8> {
    let mut w = vec![0u8; 64];
    let write = op == opcode::RDMA_WRITE;
    CtrlSeg::new(&mut w[..16])
        .expect("layout")
        .set_opcode(op)
        .set_wqe_index(sq.pi)
        .set_qpn_or_sqn(sq.sqn)
        .set_ds(if write { 3 } else { 2 })
        .set_ce(wqe::completion::ALWAYS);
    let at = if write {
        RaddrSeg::new(&mut w[16..32])
            .expect("layout")
            .set_raddr(remote.0)
            .set_rkey(remote.1);
        32
    } else {
        16
    };
    DataSeg::new(&mut w[at..at + 16])
        .expect("layout")
        .set_byte_count(len)
        .set_lkey(local.1)
        .set_addr(local.0);
    w
}
