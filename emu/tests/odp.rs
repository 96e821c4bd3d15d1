//! On-demand paging as Linux 6.12's mlx5_ib and mlx5_core use it: the capabilities
//! `mlx5_ib_internal_fill_odp_caps` (odp.c) and `handle_hca_cap_odp` (main.c) read, ODP memory
//! regions as `alloc_cacheable_mr` takes them from the mkey cache (`set_cache_mkc`: free,
//! `umr_en`, no `pg_access`) and `mlx5r_umr_update_xlt` loads them (the pages mapped with
//! `MLX5_IB_MTT_READ | MLX5_IB_MTT_WRITE`, the rest 0), the page-fault events
//! `mlx5_ib_eq_pf_process` parses from the EQ `mlx5r_odp_create_eq` opens (mask
//! `1 << MLX5_EVENT_TYPE_PAGE_FAULT`), and PAGE_FAULT_RESUME as `mlx5_ib_page_fault_resume`
//! sends it.

use cxdirect_emu::testkit::rc::{RcPair, RcPath, GID_B, MAC_A, MAC_B};
use cxdirect_emu::testkit::{Cq, Host, Sq};
use cxdirect_emu::{Device, EmuConfig};
use cxdirect_hw::caps::CmdHcaCap;
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::eqe::EventType;
use cxdirect_hw::hca::cap_type;
use cxdirect_hw::mkey::{mkey_from_index, CreateMkeyIn, CreateMkeyOut, Mkc, MKC_ACCESS_MODE_MTT};
use cxdirect_hw::odp::{
    pfault_flags, pfault_subtype, wqe_pf_type, EqePageFaultRdma, EqePageFaultWqe, OdpCap,
    PageFaultResumeIn,
};
use cxdirect_hw::umr::{flags, mkey_mask, UmrCtrlSeg};
use cxdirect_hw::wqe::{self, opcode, CtrlSeg, DataSeg, RaddrSeg};
use std::time::Duration;

const MEM: usize = 8 << 20;
/// `MLX5_IB_MTT_READ | MLX5_IB_MTT_WRITE`: a page mapped for reading and writing.
const MTT_RW: u64 = 3;
const CQE_REQ: u8 = 0x0;
const CQE_RESP_SEND: u8 = 0x2;
const CQE_REQ_ERR: u8 = 0xd;
const SYND_LOCAL_PROT: u8 = 0x04;
const SYND_REMOTE_ACCESS: u8 = 0x13;
/// Longer than the RNR timer every QP here asks for (code 1: 0.01 ms).
const PAST_RNR: Duration = Duration::from_millis(5);

/// Two functions reporting ODP, their async EQs taking every event but page faults (as
/// mlx5_core's do); with `pf_eq`, each opens the page-fault EQ mlx5_ib's
/// `mlx5r_odp_create_eq` opens (which the test kit's `drain_eq` then reads).
fn odp_pair(pf_eq: bool) -> RcPair {
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
    let mut p = RcPair::on_hosts(a, b, wire, 8, 6, 4, RcPath::to(GID_B, MAC_B, 0));
    if pf_eq {
        p.a.create_async_eq(6, 1 << EventType::PageFault as u8);
        p.b.create_async_eq(6, 1 << EventType::PageFault as u8);
    }
    p
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

/// Runs both functions, past RNR timers, until A's CQ (`on_a`) or B's has completions (at
/// most a second): the requester sends again after each RNR NAK on its own timer.
fn completions_after_rnr(p: &mut RcPair, on_a: bool) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    for _ in 0..200 {
        std::thread::sleep(PAST_RNR);
        p.settle();
        got = if on_a {
            drain(&p.a, &mut p.cq_a)
        } else {
            drain(&p.b, &mut p.cq_b)
        };
        if !got.is_empty() {
            break;
        }
    }
    got
}

/// The page-fault events on `h`'s page-fault EQ: (sub type, data).
fn page_faults(h: &mut Host) -> Vec<(u8, Vec<u8>)> {
    h.drain_eq()
        .into_iter()
        .filter(|(t, _, _)| *t == EventType::PageFault as u8)
        .map(|(_, sub, data)| (sub, data))
        .collect()
}

/// An ODP memory region of `pages.len()` 4 KiB pages at `iova`, as mlx5_ib makes one: a key
/// from the mkey cache (`mlx5r_create_mkeys` / `set_cache_mkc`: free, `umr_en`, MTT, the UMR
/// PD, no `pg_access`), then `mlx5_ib_init_odp_mr`'s UMR with `MLX5_IB_UPD_XLT_ENABLE`
/// loading the pages present (`present[i]`) with read and write, the others 0.
struct OdpMr {
    key: u32,
    iova: u64,
    pages: Vec<u64>,
    umr_sq: Sq,
    umr_cq: Cq,
    umr_lkey: u32,
}

impl OdpMr {
    fn new(h: &mut Host, npages: usize, iova: u64, present: &[bool]) -> Self {
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
    fn update_xlt(&mut self, h: &mut Host, present: &[bool], enable: bool, pd: u32, len: u64) {
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

    fn read(&self, h: &Host, len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(len);
        for &page in &self.pages {
            let n = (len - out.len()).min(4096);
            out.extend(h.read(page, n));
        }
        out
    }
}

/// PAGE_FAULT_RESUME as `mlx5_ib_page_fault_resume` fills it.
fn resume(h: &mut Host, pf_type: u8, wq: u32, token: u32, error: bool) -> Result<(), ()> {
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
fn wqe_of(sq: &Sq, op: u8, remote: (u64, u32), local: (u64, u32), len: u32) -> Vec<u8> {
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

#[test]
fn caps_read_as_mlx5_ib_fill_odp_caps_and_handle_hca_cap_odp_read_them() {
    let mut p = odp_pair(false);
    let general = p.a.query_cap(cap_type::GENERAL_DEVICE, true);
    let g = CmdHcaCap::new(&general[0x10..0x110]).expect("layout");
    assert!(g.pg(), "pg: mlx5_ib_internal_fill_odp_caps goes on");
    // mlx5r_umr_can_load_pas(dev, 0): UMR may load translations.
    assert!(!g.umr_modify_entity_size_disabled() && g.umr_extended_translation_offset());
    // IB_ODP_SUPPORT_IMPLICIT needs fixed_buffer_size and null_mkey (KSM keys over a null
    // key): not reported, so mlx5_ib registers explicit ODP regions only.
    assert!(!g.fixed_buffer_size() && !g.null_mkey());
    for current in [false, true] {
        let page = p.a.query_cap(cap_type::ODP, current);
        let odp = OdpCap::new(&page[0x10..0x110]).expect("layout");
        assert!(odp.rc_send() && odp.rc_receive() && odp.rc_write());
        assert!(!odp.rc_read() && !odp.rc_atomic() && !odp.rc_srq_receive());
        assert!(!odp.ud_send() && !odp.ud_srq_receive() && !odp.xrc_send() && !odp.dc_send());
        assert!(!odp.mem_page_fault(), "the memory scheme is ConnectX-7's");
    }
    // handle_hca_cap_odp raises none of the caps it sets (`ODP_CAP_SET_MAX`: SRQ receives,
    // XRC, DC) since none is reported, so it sends no SET_HCA_CAP.
}

#[test]
fn a_responder_write_fault_is_reported_rnr_naked_and_lands_after_umr_and_resume() {
    let mut p = odp_pair(true);
    let iova = 0x7f00_0000_0000u64;
    // Page 0 mapped by the snapshot at registration, page 1 not yet.
    let mut mr = OdpMr::new(&mut p.b, 2, iova, &[true, false]);
    let lkey_a = p.a.create_mkey(false, true);
    let len = 8192usize;
    let data = pattern(len, 7);
    let src = p.a.alloc(len as u64, 4096);
    p.a.write(src, &data);
    let w = wqe_of(
        &p.qp_a.sq,
        opcode::RDMA_WRITE,
        (iova, mr.key),
        (src, lkey_a),
        len as u32,
    );
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    assert!(drain(&p.a, &mut p.cq_a).is_empty(), "the WRITE waits");
    assert!(
        p.b.dev.counters().roce_rnr_naks_sent >= 1,
        "answered by an RNR NAK"
    );
    let faults = page_faults(&mut p.b);
    assert_eq!(faults.len(), 1, "one fault reported: {faults:?}");
    let (sub, data_bytes) = &faults[0];
    assert_eq!(*sub, pfault_subtype::RDMA);
    let e = EqePageFaultRdma::new(&data_bytes[..]).expect("layout");
    // mlx5_ib_eq_pf_process: type = pftype_token >> 24, token = its low 24 bits (the QP).
    assert_eq!(e.pf_type(), pfault_flags::RDMA | pfault_flags::WRITE);
    assert_eq!(e.token(), p.qp_b.qpn);
    assert_eq!(e.r_key(), mr.key);
    assert_eq!((e.rdma_va(), e.rdma_op_len()), (iova, len as u32));
    assert_eq!(e.bytes_committed(), 4096, "the first page's packets landed");
    assert_eq!(
        e.packet_length(),
        1024,
        "the faulting packet at the path MTU"
    );
    // mlx5_ib_mr_rdma_pfault_handler: pagefault_single_data_segment maps the pages (UMR),
    // then resumes with the event's type and token (the QP as the work queue too).
    mr.update_xlt(&mut p.b, &[true, true], false, 0, 0);
    resume(&mut p.b, e.pf_type(), e.token(), e.token(), false).expect("PAGE_FAULT_RESUME");
    assert!(
        resume(&mut p.b, e.pf_type(), e.token(), e.token(), false).is_err(),
        "a fault is resumed once"
    );
    let done = completions_after_rnr(&mut p, true);
    assert_eq!(done.len(), 1, "the retransmitted WRITE completed");
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ);
    assert_eq!(mr.read(&p.b, len), data, "the whole WRITE landed");
    assert!(page_faults(&mut p.b).is_empty());
}

#[test]
fn a_receive_fault_is_reported_with_the_receive_wqe_and_the_send_lands_after_resume() {
    let mut p = odp_pair(true);
    let iova = 0x7f10_0000_0000u64;
    let mut mr = OdpMr::new(&mut p.b, 1, iova, &[false]);
    p.b.post_rc_recv(&mut p.qp_b, iova, 4096, mr.key);
    let lkey_a = p.a.create_mkey(false, true);
    let data = pattern(3000, 11);
    let src = p.a.alloc(4096, 4096);
    p.a.write(src, &data);
    let w = wqe_of(&p.qp_a.sq, opcode::SEND, (0, 0), (src, lkey_a), 3000);
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    assert!(drain(&p.b, &mut p.cq_b).is_empty(), "nothing received yet");
    assert!(drain(&p.a, &mut p.cq_a).is_empty(), "the SEND waits");
    let faults = page_faults(&mut p.b);
    assert_eq!(faults.len(), 1, "{faults:?}");
    assert_eq!(faults[0].0, pfault_subtype::WQE);
    let e = EqePageFaultWqe::new(&faults[0].1[..]).expect("layout");
    // mlx5_ib_mr_wqe_pfault_handler reads the receive WQE at wqe_index of the QP's RQ
    // (odp_get_rsc: MLX5_WQE_PF_TYPE_RESP names a QP).
    assert_eq!(e.pf_type(), wqe_pf_type::RESP);
    assert_eq!((e.wq_num(), e.token()), (p.qp_b.qpn, p.qp_b.qpn));
    assert_eq!(e.wqe_index(), 0);
    assert_eq!(e.bytes_committed(), 0);
    mr.update_xlt(&mut p.b, &[true], false, 0, 0);
    resume(&mut p.b, e.pf_type(), e.wq_num(), e.token(), false).expect("PAGE_FAULT_RESUME");
    let got = completions_after_rnr(&mut p, false);
    assert_eq!(got.len(), 1, "the SEND was received");
    assert_eq!(cqe_opcode(&got[0]), CQE_RESP_SEND);
    assert_eq!(mr.read(&p.b, 3000), data);
    let done = drain(&p.a, &mut p.cq_a);
    assert_eq!(done.len(), 1);
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ);
}

#[test]
fn a_requester_gather_fault_stops_the_send_queue_until_resume() {
    let mut p = odp_pair(true);
    let iova = 0x7f20_0000_0000u64;
    let mut mr = OdpMr::new(&mut p.a, 1, iova, &[false]);
    let data = pattern(2000, 5);
    p.a.write(mr.pages[0], &data);
    let lkey_b = p.b.create_mkey(false, true);
    let dst = p.b.alloc(4096, 4096);
    p.b.post_rc_recv(&mut p.qp_b, dst, 4096, lkey_b);
    let w = wqe_of(&p.qp_a.sq, opcode::SEND, (0, 0), (iova, mr.key), 2000);
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    assert!(drain(&p.b, &mut p.cq_b).is_empty(), "nothing was sent");
    assert!(
        drain(&p.a, &mut p.cq_a).is_empty(),
        "the SEND waits at its WQE"
    );
    let faults = page_faults(&mut p.a);
    assert_eq!(faults.len(), 1, "{faults:?}");
    assert_eq!(faults[0].0, pfault_subtype::WQE);
    let e = EqePageFaultWqe::new(&faults[0].1[..]).expect("layout");
    // MLX5_PFAULT_REQUESTOR is bit 0 of the type: mlx5_ib reads the WQE from the SQ
    // (mlx5_ib_read_user_wqe_sq) and parses it (mlx5_ib_mr_initiator_pfault_handler).
    assert_eq!(e.pf_type(), wqe_pf_type::REQ_SEND_OR_WRITE);
    assert_ne!(e.pf_type() & pfault_flags::REQUESTOR, 0);
    assert_eq!(
        (e.wq_num(), e.token(), e.wqe_index()),
        (p.qp_a.qpn, p.qp_a.qpn, 0)
    );
    mr.update_xlt(&mut p.a, &[true], false, 0, 0);
    resume(&mut p.a, e.pf_type(), e.wq_num(), e.token(), false).expect("PAGE_FAULT_RESUME");
    p.settle();
    let done = drain(&p.a, &mut p.cq_a);
    assert_eq!(done.len(), 1, "the SEND completed");
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ);
    let got = drain(&p.b, &mut p.cq_b);
    assert_eq!(got.len(), 1);
    assert_eq!(p.b.read(dst, 2000), data);
}

#[test]
fn a_fault_resumed_with_an_error_fails_the_queue() {
    // Responder: the WRITE's retransmission is refused; the requester completes with a
    // remote access error.
    let mut p = odp_pair(true);
    let iova = 0x7f30_0000_0000u64;
    let mr = OdpMr::new(&mut p.b, 1, iova, &[false]);
    let lkey_a = p.a.create_mkey(false, true);
    let src = p.a.alloc(4096, 4096);
    let w = wqe_of(
        &p.qp_a.sq,
        opcode::RDMA_WRITE,
        (iova, mr.key),
        (src, lkey_a),
        512,
    );
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    let faults = page_faults(&mut p.b);
    assert_eq!(faults.len(), 1);
    let e = EqePageFaultRdma::new(&faults[0].1[..]).expect("layout");
    resume(&mut p.b, e.pf_type(), e.token(), e.token(), true).expect("resume with error");
    let done = completions_after_rnr(&mut p, true);
    assert_eq!(done.len(), 1);
    assert_eq!(
        (cqe_opcode(&done[0]), done[0][0x37]),
        (CQE_REQ_ERR, SYND_REMOTE_ACCESS)
    );

    // Requester: the faulting WQE completes with a local protection error.
    let mut p = odp_pair(true);
    let mr = OdpMr::new(&mut p.a, 1, iova, &[false]);
    let w = wqe_of(&p.qp_a.sq, opcode::SEND, (0, 0), (iova, mr.key), 100);
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    let faults = page_faults(&mut p.a);
    assert_eq!(faults.len(), 1);
    let e = EqePageFaultWqe::new(&faults[0].1[..]).expect("layout");
    resume(&mut p.a, e.pf_type(), e.wq_num(), e.token(), true).expect("resume with error");
    p.settle();
    let done = drain(&p.a, &mut p.cq_a);
    assert_eq!(done.len(), 1);
    assert_eq!(
        (cqe_opcode(&done[0]), done[0][0x37]),
        (CQE_REQ_ERR, SYND_LOCAL_PROT)
    );
}

#[test]
fn without_a_page_fault_eq_a_page_not_present_is_an_access_error() {
    let mut p = odp_pair(false);
    let iova = 0x7f40_0000_0000u64;
    let mr = OdpMr::new(&mut p.b, 1, iova, &[false]);
    let lkey_a = p.a.create_mkey(false, true);
    let src = p.a.alloc(4096, 4096);
    let w = wqe_of(
        &p.qp_a.sq,
        opcode::RDMA_WRITE,
        (iova, mr.key),
        (src, lkey_a),
        512,
    );
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    let done = drain(&p.a, &mut p.cq_a);
    assert_eq!(done.len(), 1);
    assert_eq!(
        (cqe_opcode(&done[0]), done[0][0x37]),
        (CQE_REQ_ERR, SYND_REMOTE_ACCESS)
    );
    assert!(page_faults(&mut p.b).is_empty(), "no EQ takes page faults");
    assert!(
        resume(
            &mut p.b,
            pfault_flags::RDMA | pfault_flags::WRITE,
            p.qp_b.qpn,
            p.qp_b.qpn,
            false
        )
        .is_err(),
        "nothing to resume"
    );
}

#[test]
fn with_pg_a_key_created_with_its_list_and_without_pg_access_keeps_bare_addresses() {
    // cxdirect's driver (and `reg_create` on a device without `pg`) lists bare page addresses
    // without `pg_access` or `umr_en`: the entries are addresses, not present bits.
    let mut p = odp_pair(true);
    let page = p.b.alloc(4096, 4096);
    let iova = 0x7f50_0000_0000u64;
    let variant = 0x21;
    let mut input = Host::input(Opcode::CreateMkey, 0, 0x110 + 16);
    {
        let mut cmd = CreateMkeyIn::new(&mut input[..]).expect("layout");
        cmd.set_mtt(0, page).expect("room");
        cmd.set_translations_octword_actual_size(1);
        cmd.set_pg_access(false);
        let mut mkc = cmd.memory_key_mkey_entry_mut();
        mkc.set_lr(true)
            .set_lw(true)
            .set_pd(p.b.pd)
            .set_qpn(0xff_ffff)
            .set_access_mode_1_0(MKC_ACCESS_MODE_MTT)
            .set_start_addr(iova)
            .set_len(4096)
            .set_translations_octword_size(1)
            .set_log_page_size(12)
            .set_mkey_7_0(variant);
    }
    let out = p.b.exec(&input, 16).expect("CREATE_MKEY with a bare list");
    let key = mkey_from_index(
        CreateMkeyOut::new(&out[..]).expect("layout").mkey_index(),
        variant,
    );
    p.b.post_rc_recv(&mut p.qp_b, iova, 4096, key);
    let lkey_a = p.a.create_mkey(false, true);
    let data = pattern(1000, 3);
    let src = p.a.alloc(4096, 4096);
    p.a.write(src, &data);
    let w = wqe_of(&p.qp_a.sq, opcode::SEND, (0, 0), (src, lkey_a), 1000);
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    let got = drain(&p.b, &mut p.cq_b);
    assert_eq!(got.len(), 1);
    assert_eq!(cqe_opcode(&got[0]), CQE_RESP_SEND);
    assert_eq!(p.b.read(page, 1000), data);
    assert!(page_faults(&mut p.b).is_empty());
}

#[test]
fn a_receive_fault_resumed_with_an_error_fails_the_receive_and_the_send() {
    let mut p = odp_pair(true);
    let iova = 0x7f60_0000_0000u64;
    let mr = OdpMr::new(&mut p.b, 1, iova, &[false]);
    p.b.post_rc_recv(&mut p.qp_b, iova, 4096, mr.key);
    let lkey_a = p.a.create_mkey(false, true);
    let src = p.a.alloc(4096, 4096);
    let w = wqe_of(&p.qp_a.sq, opcode::SEND, (0, 0), (src, lkey_a), 200);
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    let faults = page_faults(&mut p.b);
    assert_eq!(faults.len(), 1);
    let e = EqePageFaultWqe::new(&faults[0].1[..]).expect("layout");
    assert_eq!(e.pf_type(), wqe_pf_type::RESP);
    resume(&mut p.b, e.pf_type(), e.wq_num(), e.token(), true).expect("resume with error");
    let done = completions_after_rnr(&mut p, true);
    assert_eq!(done.len(), 1);
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ_ERR, "the SEND was refused");
    let got = drain(&p.b, &mut p.cq_b);
    assert_eq!(got.len(), 1, "the receive completed in error");
    assert_eq!(
        got[0][0x37], SYND_LOCAL_PROT,
        "local protection on the receive"
    );
}
