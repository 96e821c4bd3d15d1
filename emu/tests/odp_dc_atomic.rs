//! On-demand paging of DC atomics (the ODP page's `dc_odp_caps.atomic`, which Linux 6.12's
//! mlx5_core raises with the other DC caps in `handle_hca_cap_odp`). On the DCI, an atomic's
//! acknowledgement landing in a result buffer not present is a WQE fault
//! (`MLX5_WQE_PF_TYPE_REQ_READ_OR_ATOMIC` naming the DCI), which mlx5_ib's
//! `mlx5_ib_mr_initiator_pfault_handler` parses past the control segment, the address vector
//! (`MLX5_IB_QPT_DCI`), the remote address and the atomic segment to the scatter entry. On
//! the DCT, an atomic's target not present is an RDMA fault (`MLX5_PFAULT_RDMA |
//! MLX5_PFAULT_WRITE`, 8 bytes, the token the DCT), mapped by
//! `mlx5_ib_mr_rdma_pfault_handler`. Both resume by `mlx5_ib_page_fault_resume`; the atomic
//! runs exactly once.

mod dc_kit;
mod odp_kit;

use cxdirect_hw::wqe::AtomicSeg;
use dc_kit::*;
use odp_kit::{
    cap_type, drain, one_fault, pfault_flags, pfault_subtype, resume, wqe_pf_type,
    EqePageFaultRdma, EqePageFaultWqe, OdpCap, OdpMr, CQE_REQ, CQE_REQ_ERR, SYND_LOCAL_PROT,
    SYND_REMOTE_ACCESS,
};

/// A DCI atomic WQE as libmlx5 builds it (`ibv_wr_atomic_fetch_add` /
/// `ibv_wr_atomic_cmp_swp`, `mlx5dv_wr_set_dc_addr`, `ibv_wr_set_sge`): control, address
/// vector, remote address, atomic segment, the 8-byte result's data segment (seven 16-byte
/// units, two WQEBBs).
fn dc_atomic_wqe(
    r: &Rig,
    op: u8,
    remote: (u64, u32),
    (swap_add, compare): (u64, u64),
    result: (u64, u32),
) -> [u8; 128] {
    let mut w = dc_wqe(&r.dci, op, r.to(0), Some(remote), (result.0, result.1, 8));
    // dc_wqe put the data segment right after the remote address: the atomic segment goes
    // between them.
    let data: [u8; 16] = w[80..96].try_into().expect("16 bytes");
    AtomicSeg::new(&mut w[80..96])
        .expect("layout")
        .set_swap_add(swap_add)
        .set_compare(compare);
    w[96..112].copy_from_slice(&data);
    CtrlSeg::new(&mut w[..16]).expect("layout").set_ds(7);
    w
}

/// B's memory open to remote atomics (the rig's own key has none), holding `value`.
fn atomic_target(r: &mut Rig, value: u64) -> (u64, u32) {
    let at = r.b.alloc(4096, 4096);
    r.b.write(at, &value.to_be_bytes());
    let pd = r.b.pd;
    let rights = RemoteRights {
        read: true,
        write: true,
        atomic: true,
    };
    let key = r.b.create_remote_mkey(pd, at, 4096, rights, 0x3c);
    (at, key)
}

#[test]
fn handle_hca_cap_odp_finds_dc_atomic() {
    let mut r = rig_with(true);
    for current in [false, true] {
        let page = r.a.query_cap(cap_type::ODP, current);
        let odp = OdpCap::new(&page[0x10..0x110]).expect("layout");
        assert!(odp.dc_atomic(), "IB_ODP_SUPPORT_ATOMIC of dc_odp_caps");
    }
}

/// A DCI atomic `op` (swap or add, compare) on B's `value`, its result into A's ODP region of
/// one page not present: the rig, the region, the target and the fault's event data.
fn dci_result_fault(op: u8, operands: (u64, u64), value: u64) -> (Rig, OdpMr, u64, Vec<u8>) {
    let mut r = rig_with(true);
    let target = atomic_target(&mut r, value);
    let iova = 0x7f70_0000_0000u64;
    let mr = OdpMr::new(&mut r.a, 1, iova, &[false]);
    let w = dc_atomic_wqe(&r, op, target, operands, (iova + 16, mr.key));
    r.a.post(&mut r.dci, &w, false);
    r.settle();
    assert!(drain(&r.a, &mut r.cq_a).is_empty(), "the atomic waits");
    let event = one_fault(&mut r.a, pfault_subtype::WQE);
    (r, mr, target.0, event)
}

#[test]
fn mlx5_ib_mr_initiator_pfault_handler_reads_a_dci_fetch_add_and_it_runs_once() {
    let original = 0x0102_0304_0506_0708u64;
    let (mut r, mut mr, target, event) = dci_result_fault(opcode::ATOMIC_FA, (5, 0), original);
    let e = EqePageFaultWqe::new(&event[..]).expect("layout");
    assert_eq!(e.pf_type(), wqe_pf_type::REQ_READ_OR_ATOMIC);
    assert_eq!(
        (e.wq_num(), e.token(), e.wqe_index(), e.bytes_committed()),
        (r.dci.sqn, r.dci.sqn, 0, 0)
    );
    // What the handler parses: control (ds 7), the extended address vector, the remote
    // address, the atomic segment, then the result's scatter entry.
    let wqe = r.a.read(r.dci.buf, 128);
    assert_eq!(CtrlSeg::new(&wqe[..16]).expect("layout").ds(), 7);
    assert!(DatagramSeg::new(&wqe[16..64]).expect("layout").extended());
    let d = DataSeg::new(&wqe[96..112]).expect("layout");
    assert_eq!(
        (d.addr(), d.lkey(), d.byte_count()),
        (mr.iova + 16, mr.key, 8)
    );
    // The atomic ran at the DCT once; its result waits.
    assert_eq!(r.b.read(target, 8), (original + 5).to_be_bytes().to_vec());
    // Neither another type nor another queue resumes it.
    let (t, q) = (e.pf_type(), e.wq_num());
    assert!(resume(&mut r.a, wqe_pf_type::REQ_SEND_OR_WRITE, q, q, false).is_err());
    assert!(resume(&mut r.a, t, q + 1, q + 1, false).is_err());
    mr.update_xlt(&mut r.a, &[true], false, 0, 0);
    resume(&mut r.a, t, q, e.token(), false).expect("PAGE_FAULT_RESUME");
    assert!(
        resume(&mut r.a, t, q, e.token(), false).is_err(),
        "resumed once"
    );
    let done = r.completions_after_rnr(true);
    assert_eq!(done.len(), 1, "the atomic completed");
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ);
    // The atomic sent again is answered from its first execution, not run again.
    assert_eq!(mr.read(&r.a, 24)[16..], original.to_be_bytes());
    assert_eq!(r.b.read(target, 8), (original + 5).to_be_bytes().to_vec());
    r.settle();
    assert!(drain(&r.a, &mut r.cq_a).is_empty(), "one completion only");
}

#[test]
fn mlx5_ib_mr_initiator_pfault_handler_reads_a_dci_compare_swap_and_it_runs_once() {
    let (mut r, mut mr, target, event) = dci_result_fault(opcode::ATOMIC_CS, (99, 7), 7);
    let e = EqePageFaultWqe::new(&event[..]).expect("layout");
    assert_eq!(e.pf_type(), wqe_pf_type::REQ_READ_OR_ATOMIC);
    assert_eq!((e.wq_num(), e.token()), (r.dci.sqn, r.dci.sqn));
    mr.update_xlt(&mut r.a, &[true], false, 0, 0);
    resume(&mut r.a, e.pf_type(), e.wq_num(), e.token(), false).expect("PAGE_FAULT_RESUME");
    let done = r.completions_after_rnr(true);
    assert_eq!(done.len(), 1);
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ);
    assert_eq!(
        mr.read(&r.a, 24)[16..],
        7u64.to_be_bytes(),
        "the value compared"
    );
    assert_eq!(
        r.b.read(target, 8),
        99u64.to_be_bytes().to_vec(),
        "swapped once"
    );
}

#[test]
fn a_dci_atomic_result_fault_resumed_with_an_error_fails_the_wqe_and_writes_nothing() {
    let (mut r, mr, _target, event) = dci_result_fault(opcode::ATOMIC_FA, (1, 0), 3);
    let e = EqePageFaultWqe::new(&event[..]).expect("layout");
    resume(&mut r.a, e.pf_type(), e.wq_num(), e.token(), true).expect("resume with error");
    let done = r.completions_after_rnr(true);
    assert_eq!(done.len(), 1);
    assert_eq!(
        (cqe_opcode(&done[0]), done[0][0x37]),
        (CQE_REQ_ERR, SYND_LOCAL_PROT)
    );
    assert_eq!(
        r.a.read(mr.pages[0] + 16, 8),
        vec![0; 8],
        "no result written"
    );
}

/// A DCI atomic `op` on B's ODP region of one page not present (holding `value` at offset
/// 8), its result into A's plain memory: the rig, the region, the result's address and the
/// fault's event data.
fn dct_target_fault(op: u8, operands: (u64, u64), value: u64) -> (Rig, OdpMr, u64, Vec<u8>) {
    let mut r = rig_with(true);
    let iova = 0x7f80_0000_0000u64;
    let mr = OdpMr::new(&mut r.b, 1, iova, &[false]);
    r.b.write(mr.pages[0] + 8, &value.to_be_bytes());
    let result = r.a.alloc(8, 8);
    r.a.write(result, &[0xee; 8]);
    let lkey = r.lkey_a;
    let w = dc_atomic_wqe(&r, op, (iova + 8, mr.key), operands, (result, lkey));
    r.a.post(&mut r.dci, &w, false);
    r.settle();
    assert!(drain(&r.a, &mut r.cq_a).is_empty(), "the atomic waits");
    let event = one_fault(&mut r.b, pfault_subtype::RDMA);
    (r, mr, result, event)
}

#[test]
fn mlx5_ib_mr_rdma_pfault_handler_maps_a_dct_fetch_add_target_and_it_runs_after_resume() {
    let (mut r, mut mr, result, event) = dct_target_fault(opcode::ATOMIC_FA, (1, 0), 41);
    let e = EqePageFaultRdma::new(&event[..]).expect("layout");
    // The atomic writes its target: MLX5_PFAULT_RDMA | MLX5_PFAULT_WRITE, 8 bytes, the token
    // the DCT.
    assert_eq!(e.pf_type(), pfault_flags::RDMA | pfault_flags::WRITE);
    assert_eq!(
        (e.token(), e.r_key(), e.rdma_va(), e.rdma_op_len()),
        (r.dcts[0], mr.key, mr.iova + 8, 8)
    );
    assert_eq!(mr.read(&r.b, 16)[8..], 41u64.to_be_bytes(), "not run yet");
    // A token naming the other DCT, which has no fault, is refused.
    let other = r.dcts[1];
    assert!(resume(&mut r.b, e.pf_type(), other, other, false).is_err());
    mr.update_xlt(&mut r.b, &[true], false, 0, 0);
    resume(&mut r.b, e.pf_type(), e.token(), e.token(), false).expect("PAGE_FAULT_RESUME");
    assert!(resume(&mut r.b, e.pf_type(), e.token(), e.token(), false).is_err());
    let done = r.completions_after_rnr(true);
    assert_eq!(done.len(), 1, "the atomic completed");
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ);
    assert_eq!(r.a.read(result, 8), 41u64.to_be_bytes().to_vec());
    assert_eq!(mr.read(&r.b, 16)[8..], 42u64.to_be_bytes(), "added once");
}

#[test]
fn mlx5_ib_mr_rdma_pfault_handler_maps_a_dct_compare_swap_target_and_it_runs_after_resume() {
    let (mut r, mut mr, result, event) = dct_target_fault(opcode::ATOMIC_CS, (5, 9), 9);
    let e = EqePageFaultRdma::new(&event[..]).expect("layout");
    assert_eq!(e.pf_type(), pfault_flags::RDMA | pfault_flags::WRITE);
    assert_eq!((e.token(), e.rdma_op_len()), (r.dcts[0], 8));
    mr.update_xlt(&mut r.b, &[true], false, 0, 0);
    resume(&mut r.b, e.pf_type(), e.token(), e.token(), false).expect("PAGE_FAULT_RESUME");
    let done = r.completions_after_rnr(true);
    assert_eq!(done.len(), 1);
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ);
    assert_eq!(r.a.read(result, 8), 9u64.to_be_bytes().to_vec());
    assert_eq!(mr.read(&r.b, 16)[8..], 5u64.to_be_bytes(), "swapped once");
}

#[test]
fn a_dct_atomic_target_fault_resumed_with_an_error_refuses_the_atomic_and_runs_nothing() {
    let (mut r, mr, result, event) = dct_target_fault(opcode::ATOMIC_FA, (1, 0), 7);
    let e = EqePageFaultRdma::new(&event[..]).expect("layout");
    resume(&mut r.b, e.pf_type(), e.token(), e.token(), true).expect("resume with error");
    let done = r.completions_after_rnr(true);
    assert_eq!(done.len(), 1);
    assert_eq!(
        (cqe_opcode(&done[0]), done[0][0x37]),
        (CQE_REQ_ERR, SYND_REMOTE_ACCESS)
    );
    assert_eq!(
        r.b.read(mr.pages[0] + 8, 8),
        7u64.to_be_bytes().to_vec(),
        "not run"
    );
    assert_eq!(r.a.read(result, 8), vec![0xee; 8], "no result written");
}
