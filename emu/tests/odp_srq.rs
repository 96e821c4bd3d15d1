//! On-demand paging of receives from a shared receive queue, as Linux 6.12's mlx5_ib resolves
//! them (odp.c): a SEND scattering into an SRQ's receive WQE whose buffer is not present is
//! reported with the WQE sub type `MLX5_WQE_PF_TYPE_RMP`, `wq_num` the SRQ (`odp_get_rsc`
//! finds it with `mlx5_cmd_get_srq`), `wqe_index` the WQE's slot (`mlx5_ib_read_wqe_srq` reads
//! it at `wqe_index << wqe_shift`; `mlx5_ib_mr_responder_pfault_handler_srq` skips its next
//! segment to the scatter list), and resumed by `mlx5_ib_page_fault_resume` with that type,
//! queue and token.

mod odp_kit;

use cxdirect_emu::testkit::rc_pair::RcPair;
use cxdirect_emu::testkit::Rq;
use cxdirect_hw::wq::WqType;
use odp_kit::*;

/// A next segment and one data segment, as libmlx5's SRQ WQEs with one scatter entry.
const LOG_STRIDE: u8 = 5;
const LOG_SIZE: u8 = 2;

/// An ODP pair whose B QP takes its receives from a linked-list SRQ (the RMP mlx5_ib creates
/// behind an RC SRQ); returns it with the SRQ's number and ring.
fn srq_pair() -> (RcPair, u32, Rq) {
    let mut made = None;
    let p = odp_pair_with_rmp_b(true, |h| {
        let (rmpn, rq) = h.create_rmp_of(WqType::LinkedList, LOG_SIZE, LOG_STRIDE, 0);
        made = Some((rmpn, rq));
        Some(rmpn)
    });
    let (rmpn, rq) = made.expect("the SRQ was made");
    (p, rmpn, rq)
}

/// Posts two receives on the SRQ: WQE 0 into `first` (address, lkey), then WQE 2 into
/// `second` (the list runs 0 → 2), each of 4096 bytes.
fn post_two(p: &RcPair, rq: &Rq, first: (u64, u32), second: (u64, u32)) {
    p.b.write_linked_recv(rq, 0, 2, first.0, 4096, first.1);
    p.b.write_linked_recv(rq, 2, 1, second.0, 4096, second.1);
    p.b.write_be32(rq.dbr, 2);
}

/// Sends `data` from A (a plain buffer) to B.
fn send(p: &mut RcPair, data: &[u8]) {
    let lkey_a = p.a.create_mkey(false, true);
    let src = p.a.alloc(4096, 4096);
    p.a.write(src, data);
    let w = wqe_of(
        &p.qp_a.sq,
        opcode::SEND,
        (0, 0),
        (src, lkey_a),
        data.len() as u32,
    );
    p.a.post(&mut p.qp_a.sq, &w, false);
}

#[test]
fn mlx5_ib_mr_responder_pfault_handler_srq_reads_the_srq_wqe_and_the_send_lands_after_resume() {
    let (mut p, rmpn, rq) = srq_pair();
    let plain_key = p.b.create_mkey(false, true);
    let plain = p.b.alloc(4096, 4096);
    let iova = 0x7d00_0000_0000u64;
    let mut mr = OdpMr::new(&mut p.b, 1, iova, &[false]);
    post_two(&p, &rq, (plain, plain_key), (iova, mr.key));
    let first = pattern(700, 1);
    send(&mut p, &first);
    p.settle();
    let got = drain(&p.b, &mut p.cq_b);
    assert_eq!(got.len(), 1, "the first SEND landed in WQE 0");
    assert_eq!(p.b.read(plain, 700), first);
    assert!(page_faults(&mut p.b).is_empty());

    let second = pattern(3000, 2);
    send(&mut p, &second);
    p.settle();
    assert!(drain(&p.b, &mut p.cq_b).is_empty(), "the second waits");
    let faults = page_faults(&mut p.b);
    assert_eq!(faults.len(), 1, "{faults:?}");
    assert_eq!(faults[0].0, pfault_subtype::WQE);
    let e = EqePageFaultWqe::new(&faults[0].1[..]).expect("layout");
    // MLX5_WQE_PF_TYPE_RMP: no MLX5_PFAULT_REQUESTOR, the SRQ named by wq_num, the WQE by its
    // slot in the list (2, though it is the second taken).
    assert_eq!(e.pf_type(), wqe_pf_type::RMP);
    assert_eq!(e.pf_type() & pfault_flags::REQUESTOR, 0);
    assert_eq!((e.wq_num(), e.wqe_index()), (rmpn, 2));
    assert_eq!(e.token(), p.qp_b.qpn, "the token names the QP");
    assert_eq!(e.bytes_committed(), 0);
    // The fault is the SRQ's: a resume naming the QP as the queue is refused.
    assert!(resume(&mut p.b, e.pf_type(), p.qp_b.qpn, e.token(), false).is_err());
    mr.update_xlt(&mut p.b, &[true], false, 0, 0);
    resume(&mut p.b, e.pf_type(), e.wq_num(), e.token(), false).expect("PAGE_FAULT_RESUME");
    let got = completions_after_rnr(&mut p, false);
    assert_eq!(got.len(), 1, "the SEND was received");
    assert_eq!(cqe_opcode(&got[0]), CQE_RESP_SEND);
    assert_eq!(mr.read(&p.b, 3000), second);
    let done = drain(&p.a, &mut p.cq_a);
    assert_eq!(done.len(), 2, "both SENDs completed");
    assert!(done.iter().all(|c| cqe_opcode(c) == CQE_REQ));
}

#[test]
fn an_srq_receive_fault_resumed_with_an_error_fails_the_receive_and_writes_nothing() {
    let (mut p, _rmpn, rq) = srq_pair();
    let iova = 0x7d10_0000_0000u64;
    let mr = OdpMr::new(&mut p.b, 1, iova, &[false]);
    let spare = p.b.alloc(4096, 4096);
    let spare_key = p.b.create_mkey(false, true);
    post_two(&p, &rq, (iova, mr.key), (spare, spare_key));
    send(&mut p, &pattern(500, 4));
    p.settle();
    let faults = page_faults(&mut p.b);
    assert_eq!(faults.len(), 1);
    let e = EqePageFaultWqe::new(&faults[0].1[..]).expect("layout");
    assert_eq!((e.pf_type(), e.wqe_index()), (wqe_pf_type::RMP, 0));
    resume(&mut p.b, e.pf_type(), e.wq_num(), e.token(), true).expect("resume with error");
    let done = completions_after_rnr(&mut p, true);
    assert_eq!(done.len(), 1);
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ_ERR, "the SEND was refused");
    let got = drain(&p.b, &mut p.cq_b);
    assert_eq!(got.len(), 1, "the receive completed in error");
    assert_eq!(got[0][0x37], SYND_LOCAL_PROT);
    assert_eq!(p.b.read(mr.pages[0], 500), vec![0; 500], "nothing landed");
    assert_eq!(p.b.read(spare, 500), vec![0; 500], "nor in the next WQE");
}
