//! A page of an ODP region that goes between a SEND's first transmission and its
//! retransmission. Linux zaps the region's entries whenever the kernel unmaps or moves the
//! page (`mlx5_ib_invalidate_range`, odp.c), at any time: rdma-core's
//! `tests.test_odp.OdpTestCase.test_odp_implicit_async_prefetch_rc_traffic` runs
//! `madvise(MADV_DONTNEED)`, an asynchronous `ibv_advise_mr` prefetch
//! (`mlx5_ib_advise_mr_prefetch` without `IB_UVERBS_ADVISE_MR_FLAG_FLUSH`: the pages are
//! mapped by a work item, `mlx5_ib_prefetch_mr_work`, while the traffic runs) and SENDs whose
//! receiver itself faults, so the sender sends again after an RNR NAK while its implicit key's
//! blocks are being rebuilt (`pagefault_implicit_mr`, `free_implicit_child_mr_work`). The
//! device reads the message again from memory; a page not present then is a page fault like
//! the first transmission's (`MLX5_WQE_PF_TYPE_REQ_SEND_OR_WRITE` naming the WQE, which
//! `mlx5_ib_mr_wqe_pfault_handler` resolves), not a local protection error.

mod odp_kit;

use odp_kit::*;

#[test]
fn test_odp_implicit_async_prefetch_a_send_whose_page_went_before_its_retransmission_faults() {
    let mut p = odp_pair(true);
    let iova = 0x7f50_0000_0000u64;
    let mut mr = OdpMr::new(&mut p.a, 1, iova, &[true]);
    let data = pattern(300, 7);
    p.a.write(mr.pages[0], &data);
    // B has no receive yet: the first transmission is answered with an RNR NAK.
    let w = wqe_of(&p.qp_a.sq, opcode::SEND, (0, 0), (iova, mr.key), 300);
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    assert!(drain(&p.a, &mut p.cq_a).is_empty(), "the SEND waits");
    assert!(
        page_faults(&mut p.a).is_empty(),
        "the first gather found its page"
    );
    // The page goes (the invalidation's zap), and B posts its receive.
    let pd = p.a.pd;
    mr.update_xlt(&mut p.a, &[false], false, pd, 4096);
    let lkey_b = p.b.create_mkey(false, true);
    let dst = p.b.alloc(4096, 4096);
    p.b.post_rc_recv(&mut p.qp_b, dst, 4096, lkey_b);
    // Past the RNR timer A sends again: its gather faults.
    std::thread::sleep(PAST_RNR);
    p.settle();
    let faults = page_faults(&mut p.a);
    assert_eq!(faults.len(), 1, "{faults:?}");
    assert_eq!(faults[0].0, pfault_subtype::WQE);
    let e = EqePageFaultWqe::new(&faults[0].1[..]).expect("layout");
    assert_eq!(
        (e.pf_type(), e.wq_num(), e.wqe_index()),
        (wqe_pf_type::REQ_SEND_OR_WRITE, p.qp_a.qpn, 0)
    );
    // While the fault waits, the requester's timers send nothing and spend no retries.
    for _ in 0..5 {
        std::thread::sleep(PAST_RNR);
        p.settle();
    }
    assert!(drain(&p.a, &mut p.cq_a).is_empty(), "no completion yet");
    assert!(page_faults(&mut p.a).is_empty(), "one fault, reported once");
    // The page mapped again (`pagefault_real_mr`), PAGE_FAULT_RESUME: the SEND goes.
    mr.update_xlt(&mut p.a, &[true], false, pd, 4096);
    resume(&mut p.a, e.pf_type(), e.wq_num(), e.token(), false).expect("PAGE_FAULT_RESUME");
    let done = completions_after_rnr(&mut p, true);
    assert_eq!(done.len(), 1);
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ, "{:02x?}", done[0]);
    let got = drain(&p.b, &mut p.cq_b);
    assert_eq!(got.len(), 1);
    assert_eq!(cqe_opcode(&got[0]), CQE_RESP_SEND);
    assert_eq!(p.b.read(dst, 300), data);
}

#[test]
fn a_retransmission_fault_resumed_with_an_error_fails_the_send_once() {
    let mut p = odp_pair(true);
    let iova = 0x7f51_0000_0000u64;
    let mut mr = OdpMr::new(&mut p.a, 1, iova, &[true]);
    let w = wqe_of(&p.qp_a.sq, opcode::SEND, (0, 0), (iova, mr.key), 64);
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    let pd = p.a.pd;
    mr.update_xlt(&mut p.a, &[false], false, pd, 4096);
    std::thread::sleep(PAST_RNR);
    p.settle();
    let faults = page_faults(&mut p.a);
    assert_eq!(faults.len(), 1);
    let e = EqePageFaultWqe::new(&faults[0].1[..]).expect("layout");
    resume(&mut p.a, e.pf_type(), e.wq_num(), e.token(), true).expect("resume with error");
    p.settle();
    let done = drain(&p.a, &mut p.cq_a);
    assert_eq!(done.len(), 1, "{done:02x?}");
    assert_eq!(
        (cqe_opcode(&done[0]), done[0][0x37]),
        (CQE_REQ_ERR, SYND_LOCAL_PROT)
    );
    // The ring did not go back: a WQE posted now is flushed, not the failed one again.
    let w = wqe_of(&p.qp_a.sq, opcode::SEND, (0, 0), (iova, mr.key), 64);
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    let flushed = drain(&p.a, &mut p.cq_a);
    assert_eq!(flushed.len(), 1);
    assert_eq!(
        (
            flushed[0][0x37],
            u16::from_be_bytes([flushed[0][0x3c], flushed[0][0x3d]])
        ),
        (0x05, 1)
    );
}
