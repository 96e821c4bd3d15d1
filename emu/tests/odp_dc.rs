//! On-demand paging of the DC transport. Linux 6.12's mlx5_core raises the ODP page's
//! `dc_odp_caps` to their maximum (`handle_hca_cap_odp`); mlx5_ib then resolves a DC
//! initiator's WQE faults as an RC requester's (`mlx5_ib_mr_initiator_pfault_handler` skips a
//! DCI WQE's address vector, `MLX5_IB_QPT_DCI`), a DCT's remote accesses by their rkey
//! (`mlx5_ib_mr_rdma_pfault_handler`, which needs no resource: the token goes back in
//! PAGE_FAULT_RESUME, here the DCT's number), and a DCT's receives from its SRQ
//! (`MLX5_WQE_PF_TYPE_RMP` naming the SRQ, `odp_get_rsc`,
//! `mlx5_ib_mr_responder_pfault_handler_srq`).

mod dc_kit;
mod odp_kit;

use dc_kit::*;
use odp_kit::{
    cap_type, drain, one_fault, pattern, pfault_flags, pfault_subtype, resume, wqe_pf_type,
    EqePageFaultRdma, EqePageFaultWqe, OdpCap, OdpMr, CQE_REQ, CQE_REQ_ERR, SYND_REMOTE_ACCESS,
};

#[test]
fn handle_hca_cap_odp_finds_dc_send_write_read_and_srq_receive() {
    let mut r = rig_with(true);
    for current in [false, true] {
        let page = r.a.query_cap(cap_type::ODP, current);
        let odp = OdpCap::new(&page[0x10..0x110]).expect("layout");
        assert!(odp.dc_send() && odp.dc_write() && odp.dc_read() && odp.dc_srq_receive());
        assert!(!odp.dc_receive(), "a DCT has no receive queue of its own");
        // `atomic` too (emu/tests/odp_dc_atomic.rs).
    }
}

#[test]
fn mlx5_ib_mr_initiator_pfault_handler_skips_a_dci_wqe_address_vector_to_its_data() {
    let mut r = rig_with(true);
    let iova = 0x7f90_0000_0000u64;
    let mut mr = OdpMr::new(&mut r.a, 1, iova, &[false]);
    let data = pattern(1800, 7);
    r.a.write(mr.pages[0], &data);
    let dst = r.post_recv(4096);
    let to = r.to(0);
    let w = dc_wqe(&r.dci, opcode::SEND, to, None, (iova, mr.key, 1800));
    r.a.post(&mut r.dci, &w, false);
    r.settle();
    assert!(
        drain(&r.a, &mut r.cq_a).is_empty(),
        "the SEND waits at its WQE"
    );
    assert!(drain(&r.b, &mut r.cq_b).is_empty(), "nothing was sent");
    let event = one_fault(&mut r.a, pfault_subtype::WQE);
    let e = EqePageFaultWqe::new(&event[..]).expect("layout");
    assert_eq!(e.pf_type(), wqe_pf_type::REQ_SEND_OR_WRITE);
    assert_eq!(
        (e.wq_num(), e.token(), e.wqe_index()),
        (r.dci.sqn, r.dci.sqn, 0)
    );
    // What the handler reads: control, the extended address vector (MLX5_EXTENDED_UD_AV),
    // the data segment.
    let wqe = r.a.read(r.dci.buf, 128);
    assert!(DatagramSeg::new(&wqe[16..64]).expect("layout").extended());
    let d = DataSeg::new(&wqe[64..80]).expect("layout");
    assert_eq!((d.addr(), d.lkey()), (iova, mr.key));
    mr.update_xlt(&mut r.a, &[true], false, 0, 0);
    resume(&mut r.a, e.pf_type(), e.wq_num(), e.token(), false).expect("PAGE_FAULT_RESUME");
    let got = r.completions_after_rnr(false);
    assert_eq!(got.len(), 1, "the DCT's receive completed");
    assert_eq!(r.b.read(dst, 1800), data);
    r.settle();
    let done = drain(&r.a, &mut r.cq_a);
    assert_eq!(done.len(), 1);
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ);
}

#[test]
fn mlx5_ib_mr_responder_pfault_handler_srq_reads_a_dct_srq_wqe_and_the_send_lands_after_resume() {
    let mut r = rig_with(true);
    let iova = 0x7fa0_0000_0000u64;
    let mut mr = OdpMr::new(&mut r.b, 1, iova, &[false]);
    let lkey = mr.key;
    r.b.post_recv(&mut r.rmp, iova, 4096, lkey);
    let data = pattern(2200, 5);
    let to = r.to(0);
    r.post(opcode::SEND, to, None, &data);
    r.settle();
    assert!(drain(&r.b, &mut r.cq_b).is_empty(), "the receive waits");
    let event = one_fault(&mut r.b, pfault_subtype::WQE);
    let e = EqePageFaultWqe::new(&event[..]).expect("layout");
    // The SRQ by number; the token is the DCT.
    assert_eq!(e.pf_type(), wqe_pf_type::RMP);
    assert_eq!(
        (e.wq_num(), e.token(), e.wqe_index()),
        (r.rmp.rqn, r.dcts[0], 0)
    );
    let wqe = r.b.read(r.rmp.buf, 16);
    let d = DataSeg::new(&wqe[..]).expect("layout");
    assert_eq!((d.addr(), d.lkey()), (iova, mr.key));
    mr.update_xlt(&mut r.b, &[true], false, 0, 0);
    resume(&mut r.b, e.pf_type(), e.wq_num(), e.token(), false).expect("PAGE_FAULT_RESUME");
    let got = r.completions_after_rnr(false);
    assert_eq!(got.len(), 1);
    assert_eq!(cqe_opcode(&got[0]), RESP_SEND);
    assert_eq!(mr.read(&r.b, 2200), data);
    assert!(resume(&mut r.b, e.pf_type(), e.wq_num(), e.token(), false).is_err());
}

/// A DCI WRITE of `data` to B's ODP region of one page not present, through DCT 0: the rig,
/// the region and the fault.
fn dct_write_fault(data: &[u8]) -> (Rig, OdpMr, Vec<u8>) {
    let mut r = rig_with(true);
    let iova = 0x7fb0_0000_0000u64;
    let mr = OdpMr::new(&mut r.b, 1, iova, &[false]);
    let to = r.to(0);
    r.post(opcode::RDMA_WRITE, to, Some((iova, mr.key)), data);
    r.settle();
    assert!(drain(&r.a, &mut r.cq_a).is_empty(), "the WRITE waits");
    let event = one_fault(&mut r.b, pfault_subtype::RDMA);
    (r, mr, event)
}

#[test]
fn mlx5_ib_mr_rdma_pfault_handler_maps_a_dct_write_and_read_source() {
    let data = pattern(3000, 9);
    let (mut r, mut mr, event) = dct_write_fault(&data);
    let e = EqePageFaultRdma::new(&event[..]).expect("layout");
    assert_eq!(e.pf_type(), pfault_flags::RDMA | pfault_flags::WRITE);
    assert_eq!((e.token(), e.r_key()), (r.dcts[0], mr.key));
    assert_eq!((e.rdma_va(), e.rdma_op_len()), (mr.iova, 3000));
    mr.update_xlt(&mut r.b, &[true], false, 0, 0);
    resume(&mut r.b, e.pf_type(), e.token(), e.token(), false).expect("PAGE_FAULT_RESUME");
    let done = r.completions_after_rnr(true);
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ, "the WRITE completed");
    assert_eq!(mr.read(&r.b, 3000), data);

    // Paged out again: a READ of it faults, and is answered after the resume.
    mr.update_xlt(&mut r.b, &[false], false, 0, 0);
    let to = r.to(0);
    let dst = r.post(opcode::RDMA_READ, to, Some((mr.iova, mr.key)), &[0; 3000]);
    r.settle();
    let event = one_fault(&mut r.b, pfault_subtype::RDMA);
    let e = EqePageFaultRdma::new(&event[..]).expect("layout");
    assert_eq!(e.pf_type(), pfault_flags::RDMA);
    assert_eq!((e.token(), e.rdma_op_len()), (r.dcts[0], 3000));
    mr.update_xlt(&mut r.b, &[true], false, 0, 0);
    resume(&mut r.b, e.pf_type(), e.token(), e.token(), false).expect("PAGE_FAULT_RESUME");
    let done = r.completions_after_rnr(true);
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ, "the READ completed");
    assert_eq!(r.a.read(dst, 3000), data);
}

#[test]
fn mlx5_ib_page_fault_resume_with_error_refuses_the_dct_write_and_writes_nothing() {
    let (mut r, mr, event) = dct_write_fault(&pattern(500, 1));
    let e = EqePageFaultRdma::new(&event[..]).expect("layout");
    // A token naming the other DCT, which has no fault, is refused.
    let other = r.dcts[1];
    assert!(resume(&mut r.b, e.pf_type(), other, other, true).is_err());
    resume(&mut r.b, e.pf_type(), e.token(), e.token(), true).expect("resume with error");
    let done = r.completions_after_rnr(true);
    assert_eq!(done.len(), 1);
    assert_eq!(
        (cqe_opcode(&done[0]), done[0][0x37]),
        (CQE_REQ_ERR, SYND_REMOTE_ACCESS)
    );
    assert_eq!(mr.read(&r.b, 500), vec![0; 500], "nothing was written");
}

#[test]
fn mlx5_ib_mr_initiator_pfault_handler_reads_a_dci_read_wqe_and_the_response_lands_after_resume() {
    let mut r = rig_with(true);
    let iova = 0x7fc0_0000_0000u64;
    let mut mr = OdpMr::new(&mut r.a, 1, iova, &[false]);
    let data = pattern(2000, 3);
    let (remote, rkey) = r.remote;
    r.b.write(remote, &data);
    let to = r.to(0);
    let w = dc_wqe(
        &r.dci,
        opcode::RDMA_READ,
        to,
        Some((remote, rkey)),
        (iova, mr.key, 2000),
    );
    r.a.post(&mut r.dci, &w, false);
    r.settle();
    assert!(drain(&r.a, &mut r.cq_a).is_empty(), "the READ waits");
    let event = one_fault(&mut r.a, pfault_subtype::WQE);
    let e = EqePageFaultWqe::new(&event[..]).expect("layout");
    assert_eq!(e.pf_type(), wqe_pf_type::REQ_READ_OR_ATOMIC);
    assert_eq!(
        (e.wq_num(), e.token(), e.wqe_index()),
        (r.dci.sqn, r.dci.sqn, 0)
    );
    mr.update_xlt(&mut r.a, &[true], false, 0, 0);
    resume(&mut r.a, e.pf_type(), e.wq_num(), e.token(), false).expect("PAGE_FAULT_RESUME");
    let done = r.completions_after_rnr(true);
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ, "the READ completed");
    assert_eq!(mr.read(&r.a, 2000), data);
}
