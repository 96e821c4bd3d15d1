//! On-demand paging of UD QPs as Linux 6.12's mlx5_ib reads it: `internal_fill_odp_caps`
//! (odp.c) turns the ODP page's `ud_odp_caps.send` into `IB_ODP_SUPPORT_SEND` of the UD
//! transport; a UD send WQE's gather from an ODP region reaching a page not present is a WQE
//! page fault (`MLX5_WQE_PF_TYPE_REQ_SEND_OR_WRITE`, the QP), which
//! `mlx5_ib_mr_wqe_pfault_handler` resolves by reading the WQE back and
//! `mlx5_ib_mr_initiator_pfault_handler` parses, skipping the control and the 48-byte
//! datagram segment (`MLX5_EXTENDED_UD_AV`) to the data segments.

mod odp_kit;

use cxdirect_emu::testkit::rc::GID_B;
use cxdirect_emu::testkit::ud::{ud_wqe, UdAv, UdPair, UD_QKEY};
use cxdirect_hw::wqe::{DatagramSeg, WQE_BB};
use odp_kit::*;

fn ud_odp_pair() -> UdPair {
    // The test host's async EQ takes every event, page faults included: it stands for the EQ
    // `mlx5r_odp_create_eq` opens.
    let cfg = EmuConfig {
        odp: true,
        ..EmuConfig::default()
    };
    UdPair::new(cfg, MEM, 6, 4, 4)
}

const WQE_GRH: u32 = 40;

#[test]
fn internal_fill_odp_caps_reads_ud_send() {
    let mut p = ud_odp_pair();
    for current in [false, true] {
        let page = p.a.query_cap(cap_type::ODP, current);
        let odp = OdpCap::new(&page[0x10..0x110]).expect("layout");
        // `srq_receive` too (emu/tests/odp_ud_srq.rs); the own ring's receives are paged
        // without a bit, the page having none.
        assert!(odp.ud_send(), "IB_ODP_SUPPORT_SEND in ud_odp_caps");
    }
    p.teardown();
}

/// A UD SEND of `len` bytes from an ODP region of one page not present, to B's UD QP (one
/// receive posted): returns the pair, the region, B's buffer and the fault's event data.
fn faulting_ud_send(len: u32) -> (UdPair, OdpMr, u64, Vec<u8>, Vec<u8>) {
    let mut p = ud_odp_pair();
    let iova = 0x7f40_0000_0000u64;
    let mr = OdpMr::new(&mut p.a, 1, iova, &[false]);
    let data = pattern(len as usize, 9);
    p.a.write(mr.pages[0], &data);
    let lkey_b = p.b.create_mkey(false, true);
    let dst = p.b.alloc(8192, 4096);
    p.b.post_ud_recv(&mut p.ud_b, dst, 4096, lkey_b);
    let av = UdAv::to(GID_B, MAC_B, p.ud_b.qpn, UD_QKEY);
    let w = ud_wqe(&p.ud_a.sq, opcode::SEND, 0, &av, &[(iova, mr.key, len)]);
    p.a.post(&mut p.ud_a.sq, &w, false);
    p.settle();
    assert!(drain(&p.b, &mut p.cq_b).is_empty(), "nothing was sent");
    assert!(
        drain(&p.a, &mut p.cq_a).is_empty(),
        "the SEND waits at its WQE"
    );
    let faults = page_faults(&mut p.a);
    assert_eq!(faults.len(), 1, "{faults:?}");
    assert_eq!(faults[0].0, pfault_subtype::WQE);
    (p, mr, dst, data, faults[0].1.clone())
}

#[test]
fn mlx5_ib_mr_initiator_pfault_handler_skips_a_ud_wqe_datagram_segment_to_its_data() {
    let (mut p, mut mr, dst, data, event) = faulting_ud_send(1000);
    let e = EqePageFaultWqe::new(&event[..]).expect("layout");
    // odp_get_rsc: a QP resource by wq_num; MLX5_PFAULT_REQUESTOR (bit 0) makes
    // mlx5_ib_mr_wqe_pfault_handler read the WQE from the send queue.
    assert_eq!(e.pf_type(), wqe_pf_type::REQ_SEND_OR_WRITE);
    assert_ne!(e.pf_type() & pfault_flags::REQUESTOR, 0);
    assert_eq!(
        (e.wq_num(), e.token(), e.wqe_index(), e.bytes_committed()),
        (p.ud_a.qpn, p.ud_a.qpn, 0, 0)
    );
    // What mlx5_ib_mr_initiator_pfault_handler reads at that index: the control segment,
    // then (a UD QP) the datagram segment, extended (48 bytes), then the data segment.
    let slot = u64::from(e.wqe_index()) & ((1 << p.ud_a.sq.log) - 1);
    let wqe = p.a.read(p.ud_a.sq.buf + slot * WQE_BB as u64, WQE_BB * 2);
    let ctrl = CtrlSeg::new(&wqe[..16]).expect("layout");
    assert_eq!(ctrl.ds(), 5);
    assert!(DatagramSeg::new(&wqe[16..64]).expect("layout").extended());
    let d = DataSeg::new(&wqe[64..80]).expect("layout");
    assert_eq!(
        (d.addr(), d.lkey(), d.byte_count()),
        (mr.iova, mr.key, 1000)
    );
    // pagefault_single_data_segment loads the page by UMR; then PAGE_FAULT_RESUME.
    mr.update_xlt(&mut p.a, &[true], false, 0, 0);
    resume(&mut p.a, e.pf_type(), e.wq_num(), e.token(), false).expect("PAGE_FAULT_RESUME");
    p.settle();
    let done = drain(&p.a, &mut p.cq_a);
    assert_eq!(done.len(), 1, "the SEND completed");
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ);
    let got = drain(&p.b, &mut p.cq_b);
    assert_eq!(got.len(), 1, "the datagram arrived once");
    assert_eq!(p.b.read(dst + u64::from(WQE_GRH), 1000), data);
    // A second resume finds no fault.
    assert!(resume(&mut p.a, e.pf_type(), e.wq_num(), e.token(), false).is_err());
    p.teardown();
}

#[test]
fn mlx5_ib_page_fault_resume_with_error_fails_the_ud_send_and_sends_nothing() {
    let (mut p, _mr, dst, _data, event) = faulting_ud_send(300);
    let e = EqePageFaultWqe::new(&event[..]).expect("layout");
    // A second WQE behind the faulting one waits too.
    let lkey_a = p.a.create_mkey(false, true);
    let src = p.a.alloc(4096, 4096);
    let av = UdAv::to(GID_B, MAC_B, p.ud_b.qpn, UD_QKEY);
    let w = ud_wqe(&p.ud_a.sq, opcode::SEND, 0, &av, &[(src, lkey_a, 64)]);
    p.a.post(&mut p.ud_a.sq, &w, false);
    p.settle();
    assert!(
        drain(&p.a, &mut p.cq_a).is_empty(),
        "the queue stays stopped"
    );
    // A resume naming another type or queue is refused.
    assert!(resume(&mut p.a, wqe_pf_type::RESP, e.wq_num(), e.token(), true).is_err());
    assert!(resume(&mut p.a, e.pf_type(), e.wq_num() + 1, e.token(), true).is_err());
    // mlx5_ib resumes with the error bit when the handler fails (the WQE's key no longer
    // maps, `resume_with_error`).
    resume(&mut p.a, e.pf_type(), e.wq_num(), e.token(), true).expect("resume with error");
    p.settle();
    let done = drain(&p.a, &mut p.cq_a);
    assert_eq!(
        done.len(),
        2,
        "the WQE failed and the one behind it was flushed"
    );
    assert_eq!(
        (cqe_opcode(&done[0]), done[0][0x37]),
        (CQE_REQ_ERR, SYND_LOCAL_PROT)
    );
    assert_eq!(cqe_opcode(&done[1]), CQE_REQ_ERR);
    assert!(drain(&p.b, &mut p.cq_b).is_empty(), "nothing was sent");
    assert_eq!(p.b.read(dst, 64), vec![0; 64], "nothing was written");
    p.teardown();
}

/// B's one receive WQE into an ODP region of one page not present, and a datagram from A:
/// the pair, the region, what A sends and the fault's event data.
fn faulting_ud_receive() -> (UdPair, OdpMr, Vec<u8>, Vec<u8>) {
    let mut p = ud_odp_pair();
    let iova = 0x7f48_0000_0000u64;
    let mr = OdpMr::new(&mut p.b, 1, iova, &[false]);
    p.b.post_ud_recv(&mut p.ud_b, iova, 4096, mr.key);
    let data = pattern(700, 2);
    send_datagram(&mut p, &data);
    assert!(
        drain(&p.b, &mut p.cq_b).is_empty(),
        "the datagram was dropped"
    );
    let faults = page_faults(&mut p.b);
    assert_eq!(faults.len(), 1, "{faults:?}");
    assert_eq!(faults[0].0, pfault_subtype::WQE);
    (p, mr, data, faults[0].1.clone())
}

fn send_datagram(p: &mut UdPair, data: &[u8]) {
    let qpn = p.ud_b.qpn;
    let sent = p.send_from_a(qpn, data);
    assert_eq!(sent.len(), 1);
    assert_eq!(
        cqe_opcode(&sent[0]),
        CQE_REQ,
        "the sender completes: UD has no ACK"
    );
}

#[test]
fn mlx5_ib_mr_responder_pfault_handler_rq_reads_a_ud_receive_wqe_and_a_later_datagram_lands() {
    let (mut p, mut mr, _first, event) = faulting_ud_receive();
    let e = EqePageFaultWqe::new(&event[..]).expect("layout");
    // MLX5_WQE_PF_TYPE_RESP names the UD QP; mlx5_ib_read_wqe_rq reads its receive WQE.
    assert_eq!(e.pf_type(), wqe_pf_type::RESP);
    assert_eq!(
        (e.wq_num(), e.token(), e.wqe_index(), e.packet_length()),
        (p.ud_b.qpn, p.ud_b.qpn, 0, 700)
    );
    let wqe = p.b.read(p.ud_b.rq_buf, 16);
    let d = DataSeg::new(&wqe[..]).expect("layout");
    assert_eq!((d.addr(), d.lkey()), (mr.iova, mr.key));
    // Another datagram while the fault waits: dropped, not reported again.
    send_datagram(&mut p, &pattern(100, 1));
    assert!(drain(&p.b, &mut p.cq_b).is_empty());
    assert!(page_faults(&mut p.b).is_empty());
    mr.update_xlt(&mut p.b, &[true], false, 0, 0);
    resume(&mut p.b, e.pf_type(), e.wq_num(), e.token(), false).expect("PAGE_FAULT_RESUME");
    let data = pattern(900, 6);
    send_datagram(&mut p, &data);
    let got = drain(&p.b, &mut p.cq_b);
    assert_eq!(got.len(), 1, "the WQE took the next datagram");
    assert_eq!(cqe_opcode(&got[0]), CQE_RESP_SEND);
    assert_eq!(mr.read(&p.b, 40 + 900)[40..], data[..]);
    p.teardown();
}

#[test]
fn mlx5_ib_page_fault_resume_with_error_fails_the_ud_receive_with_the_next_datagram() {
    let (mut p, mr, _first, event) = faulting_ud_receive();
    let e = EqePageFaultWqe::new(&event[..]).expect("layout");
    resume(&mut p.b, e.pf_type(), e.wq_num(), e.token(), true).expect("resume with error");
    send_datagram(&mut p, &pattern(100, 3));
    let got = drain(&p.b, &mut p.cq_b);
    assert_eq!(got.len(), 1);
    assert_eq!(cqe_opcode(&got[0]), 0xe, "a receive error CQE");
    assert_eq!(got[0][0x37], SYND_LOCAL_PROT);
    assert_eq!(mr.read(&p.b, 64), vec![0; 64], "nothing was written");
    p.teardown();
}
