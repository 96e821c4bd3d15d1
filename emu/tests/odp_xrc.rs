//! On-demand paging of XRC QPs as Linux 6.12's mlx5_ib reads it: `internal_fill_odp_caps`
//! (odp.c) turns the ODP page's `xrc_odp_caps` into the XRC transport's `IB_ODP_SUPPORT_*`;
//! an initiator's page faults are WQE faults naming the initiator QP, whose WQE
//! `mlx5_ib_mr_initiator_pfault_handler` parses past its XRC segment; a target's remote
//! accesses are RDMA faults whose token is the target QP; a target's receive from the XRC SRQ
//! the request names is `MLX5_WQE_PF_TYPE_RMP` naming that SRQ, which `odp_get_rsc` finds by
//! number (an `MLX5_RES_XSRQ`) and `mlx5_ib_mr_responder_pfault_handler_srq` parses past its
//! next segment.

mod odp_kit;
mod xrc_kit;

use odp_kit::{
    cap_type, drain, page_faults, pattern, pfault_flags, pfault_subtype, resume, wqe_pf_type,
    EqePageFaultRdma, EqePageFaultWqe, OdpCap, OdpMr, RaddrSeg, CQE_REQ, CQE_REQ_ERR,
    SYND_LOCAL_PROT,
};
use xrc_kit::*;

/// The error CQE opcode of a receive.
const CQE_RESP_ERR: u8 = 0xe;

/// An XRC WRITE or READ WQE as libmlx5 builds it: control, XRC segment (`srqn`), remote
/// address, one data segment.
fn xrc_rdma(sq: &Sq, op: u8, srqn: u32, remote: (u64, u32), local: (u64, u32, u32)) -> [u8; 64] {
    let mut w = [0u8; 64];
    w[16..20].copy_from_slice(&srqn.to_be_bytes());
    RaddrSeg::new(&mut w[32..48])
        .unwrap()
        .set_raddr(remote.0)
        .set_rkey(remote.1);
    DataSeg::new(&mut w[48..64])
        .unwrap()
        .set_byte_count(local.2)
        .set_lkey(local.1)
        .set_addr(local.0);
    CtrlSeg::new(&mut w[..16])
        .unwrap()
        .set_opcode(op)
        .set_wqe_index(sq.pi)
        .set_qpn_or_sqn(sq.sqn)
        .set_ds(4)
        .set_ce(2);
    w
}

fn one_wqe_fault(h: &mut Host) -> Vec<u8> {
    let faults = page_faults(h);
    assert_eq!(faults.len(), 1, "one fault reported: {faults:?}");
    assert_eq!(faults[0].0, pfault_subtype::WQE);
    faults[0].1.clone()
}

fn one_rdma_fault(h: &mut Host) -> Vec<u8> {
    let faults = page_faults(h);
    assert_eq!(faults.len(), 1, "one fault reported: {faults:?}");
    assert_eq!(faults[0].0, pfault_subtype::RDMA);
    faults[0].1.clone()
}

#[test]
fn internal_fill_odp_caps_reads_xrc_send_write_read_atomic_and_srq_receive() {
    let mut r = rig_with(true);
    for current in [false, true] {
        let page = r.a.query_cap(cap_type::ODP, current);
        let odp = OdpCap::new(&page[0x10..0x110]).expect("layout");
        assert!(odp.xrc_send() && odp.xrc_write() && odp.xrc_read() && odp.xrc_atomic());
        assert!(odp.xrc_srq_receive(), "IB_ODP_SUPPORT_SRQ_RECV of XRC");
        assert!(
            !odp.xrc_receive(),
            "an XRC target has no receive queue of its own"
        );
    }
}

#[test]
fn mlx5_ib_mr_initiator_pfault_handler_skips_an_xrc_wqe_xrc_segment_to_its_data() {
    let mut r = rig_with(true);
    let iova = 0x7f50_0000_0000u64;
    let mut mr = OdpMr::new(&mut r.a, 1, iova, &[false]);
    let data = pattern(1500, 4);
    r.a.write(mr.pages[0], &data);
    let dst = r.b.alloc(4096, 4096);
    let lkey_b = r.lkey_b;
    post_srq_recv(&r.b, &mut r.srqs[0], dst, 4096, lkey_b);
    let srqn = r.srqs[0].srqn;
    let w = xrc_send(&r.ini, srqn, (iova, mr.key, 1500));
    r.a.post(&mut r.ini, &w, false);
    settle(&r);
    assert!(
        drain(&r.a, &mut r.cq_a).is_empty(),
        "the SEND waits at its WQE"
    );
    assert!(drain(&r.b, &mut r.cqs_b[0]).is_empty(), "nothing was sent");
    let event = one_wqe_fault(&mut r.a);
    let e = EqePageFaultWqe::new(&event[..]).expect("layout");
    assert_eq!(e.pf_type(), wqe_pf_type::REQ_SEND_OR_WRITE);
    assert_eq!(
        (e.wq_num(), e.token(), e.wqe_index()),
        (r.ini.sqn, r.ini.sqn, 0)
    );
    // What the handler reads: control, the XRC segment (IB_QPT_XRC_INI), the data segment.
    let wqe = r.a.read(r.ini.buf, 64);
    assert_eq!(u32::from_be_bytes(wqe[16..20].try_into().unwrap()), srqn);
    let d = DataSeg::new(&wqe[32..48]).expect("layout");
    assert_eq!((d.addr(), d.lkey()), (iova, mr.key));
    mr.update_xlt(&mut r.a, &[true], false, 0, 0);
    resume(&mut r.a, e.pf_type(), e.wq_num(), e.token(), false).expect("PAGE_FAULT_RESUME");
    assert!(settle_until(&mut r, |r| !r
        .b
        .read(dst, 4)
        .iter()
        .all(|&b| b == 0)));
    settle(&r);
    let done = drain(&r.a, &mut r.cq_a);
    assert_eq!(done.len(), 1);
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ);
    assert_eq!(drain(&r.b, &mut r.cqs_b[0]).len(), 1);
    assert_eq!(r.b.read(dst, 1500), data);
}

/// A SEND from A landing in an XRC SRQ WQE of B whose buffer is an ODP region not present:
/// the rig, the region, the data and the fault's event data.
fn xrc_srq_receive_fault() -> (Rig, OdpMr, Vec<u8>, Vec<u8>) {
    let mut r = rig_with(true);
    let iova = 0x7f60_0000_0000u64;
    let mr = OdpMr::new(&mut r.b, 1, iova, &[false]);
    post_srq_recv(&r.b, &mut r.srqs[1], iova, 4096, mr.key);
    let data = pattern(2500, 8);
    let srqn = r.srqs[1].srqn;
    send(&mut r, srqn, &data);
    settle(&r);
    assert!(drain(&r.b, &mut r.cqs_b[1]).is_empty(), "the receive waits");
    assert!(
        drain(&r.a, &mut r.cq_a).is_empty(),
        "the SEND waits (RNR NAKs)"
    );
    let event = one_wqe_fault(&mut r.b);
    (r, mr, data, event)
}

#[test]
fn mlx5_ib_mr_responder_pfault_handler_srq_reads_an_xrc_srq_wqe_and_the_send_lands_after_resume() {
    let (mut r, mut mr, data, event) = xrc_srq_receive_fault();
    let e = EqePageFaultWqe::new(&event[..]).expect("layout");
    // odp_get_rsc: MLX5_WQE_PF_TYPE_RMP names the XRC SRQ; the token is the target QP.
    assert_eq!(e.pf_type(), wqe_pf_type::RMP);
    assert_eq!(e.pf_type() & pfault_flags::REQUESTOR, 0);
    assert_eq!(
        (e.wq_num(), e.token(), e.wqe_index(), e.bytes_committed()),
        (r.srqs[1].srqn, r.tgt, 0, 0)
    );
    // mlx5_ib_read_wqe_srq reads the WQE at `wqe_index << wqe_shift`; the handler skips the
    // next segment to the data segment.
    let wqe = r.b.read(r.srqs[1].buf + u64::from(e.wqe_index()) * 32, 32);
    let d = DataSeg::new(&wqe[16..32]).expect("layout");
    assert_eq!((d.addr(), d.lkey()), (mr.iova, mr.key));
    mr.update_xlt(&mut r.b, &[true], false, 0, 0);
    resume(&mut r.b, e.pf_type(), e.wq_num(), e.token(), false).expect("PAGE_FAULT_RESUME");
    let mut got = Vec::new();
    assert!(settle_until(&mut r, |r| {
        got.extend(drain(&r.b, &mut r.cqs_b[1]));
        !got.is_empty()
    }));
    assert_eq!(got.len(), 1);
    assert_eq!(cqe_opcode(&got[0]), 0x2, "a responder SEND completion");
    assert_eq!(mr.read(&r.b, 2500), data);
    settle(&r);
    assert_eq!(drain(&r.a, &mut r.cq_a).len(), 1, "the SEND completed");
}

#[test]
fn mlx5_ib_page_fault_resume_with_error_fails_the_xrc_srq_receive_and_the_send() {
    let (mut r, mr, _data, event) = xrc_srq_receive_fault();
    let e = EqePageFaultWqe::new(&event[..]).expect("layout");
    // A resume naming the QP's own ring instead of the SRQ is refused.
    assert!(resume(&mut r.b, wqe_pf_type::RESP, r.tgt, r.tgt, true).is_err());
    resume(&mut r.b, e.pf_type(), e.wq_num(), e.token(), true).expect("resume with error");
    let mut got = Vec::new();
    assert!(settle_until(&mut r, |r| {
        got.extend(drain(&r.b, &mut r.cqs_b[1]));
        !got.is_empty()
    }));
    assert_eq!(
        (cqe_opcode(&got[0]), got[0][0x37]),
        (CQE_RESP_ERR, SYND_LOCAL_PROT)
    );
    settle(&r);
    let done = drain(&r.a, &mut r.cq_a);
    assert_eq!(done.len(), 1);
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ_ERR, "the SEND failed");
    assert_eq!(mr.read(&r.b, 64), vec![0; 64], "nothing was written");
}

#[test]
fn mlx5_ib_mr_rdma_pfault_handler_maps_an_xrc_target_write_and_read_source() {
    let mut r = rig_with(true);
    let iova = 0x7f70_0000_0000u64;
    let mut mr = OdpMr::new(&mut r.b, 1, iova, &[false]);
    let data = pattern(3000, 6);
    let src = r.a.alloc(4096, 4096);
    r.a.write(src, &data);
    let srqn = r.srqs[0].srqn;
    let lkey_a = r.lkey_a;
    let w = xrc_rdma(
        &r.ini,
        opcode::RDMA_WRITE,
        srqn,
        (iova, mr.key),
        (src, lkey_a, 3000),
    );
    r.a.post(&mut r.ini, &w, false);
    settle(&r);
    let event = one_rdma_fault(&mut r.b);
    let e = EqePageFaultRdma::new(&event[..]).expect("layout");
    assert_eq!(e.pf_type(), pfault_flags::RDMA | pfault_flags::WRITE);
    assert_eq!((e.token(), e.r_key()), (r.tgt, mr.key));
    assert_eq!((e.rdma_va(), e.rdma_op_len()), (iova, 3000));
    mr.update_xlt(&mut r.b, &[true], false, 0, 0);
    resume(&mut r.b, e.pf_type(), e.token(), e.token(), false).expect("PAGE_FAULT_RESUME");
    let mut done = Vec::new();
    assert!(settle_until(&mut r, |r| {
        done.extend(drain(&r.a, &mut r.cq_a));
        !done.is_empty()
    }));
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ, "the WRITE completed");
    assert_eq!(mr.read(&r.b, 3000), data);

    // The region paged out again (mlx5_ib_invalidate_range): a READ of it faults.
    mr.update_xlt(&mut r.b, &[false], false, 0, 0);
    let dst = r.a.alloc(4096, 4096);
    let w = xrc_rdma(
        &r.ini,
        opcode::RDMA_READ,
        srqn,
        (iova, mr.key),
        (dst, lkey_a, 3000),
    );
    r.a.post(&mut r.ini, &w, false);
    settle(&r);
    let event = one_rdma_fault(&mut r.b);
    let e = EqePageFaultRdma::new(&event[..]).expect("layout");
    assert_eq!(e.pf_type(), pfault_flags::RDMA);
    assert_eq!(
        (e.token(), e.rdma_va(), e.rdma_op_len()),
        (r.tgt, iova, 3000)
    );
    mr.update_xlt(&mut r.b, &[true], false, 0, 0);
    resume(&mut r.b, e.pf_type(), e.token(), e.token(), false).expect("PAGE_FAULT_RESUME");
    let mut done = Vec::new();
    assert!(settle_until(&mut r, |r| {
        done.extend(drain(&r.a, &mut r.cq_a));
        !done.is_empty()
    }));
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ, "the READ completed");
    assert_eq!(r.a.read(dst, 3000), data);
}

#[test]
fn mlx5_ib_mr_initiator_pfault_handler_reads_an_xrc_read_wqe_and_the_response_lands_after_resume() {
    let mut r = rig_with(true);
    let iova = 0x7f80_0000_0000u64;
    let mut mr = OdpMr::new(&mut r.a, 1, iova, &[false]);
    let data = pattern(2000, 2);
    let remote = r.b.alloc(4096, 4096);
    r.b.write(remote, &data);
    let pd = r.b.pd;
    let rights = cxdirect_emu::testkit::rc::RemoteRights {
        read: true,
        write: false,
        atomic: false,
    };
    let rkey = r.b.create_remote_mkey(pd, remote, 4096, rights, 0x44);
    let srqn = r.srqs[0].srqn;
    let w = xrc_rdma(
        &r.ini,
        opcode::RDMA_READ,
        srqn,
        (remote, rkey),
        (iova, mr.key, 2000),
    );
    r.a.post(&mut r.ini, &w, false);
    settle(&r);
    assert!(drain(&r.a, &mut r.cq_a).is_empty(), "the READ waits");
    let event = one_wqe_fault(&mut r.a);
    let e = EqePageFaultWqe::new(&event[..]).expect("layout");
    assert_eq!(e.pf_type(), wqe_pf_type::REQ_READ_OR_ATOMIC);
    assert_eq!(
        (e.wq_num(), e.token(), e.wqe_index()),
        (r.ini.sqn, r.ini.sqn, 0)
    );
    mr.update_xlt(&mut r.a, &[true], false, 0, 0);
    resume(&mut r.a, e.pf_type(), e.wq_num(), e.token(), false).expect("PAGE_FAULT_RESUME");
    let mut done = Vec::new();
    assert!(settle_until(&mut r, |r| {
        done.extend(drain(&r.a, &mut r.cq_a));
        !done.is_empty()
    }));
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ, "the READ completed");
    assert_eq!(mr.read(&r.a, 2000), data);
}

#[test]
fn mlx5_ib_mr_rdma_pfault_handler_maps_an_xrc_target_atomic_and_it_runs_once_after_resume() {
    let mut r = rig_with(true);
    let iova = 0x7f90_0000_0000u64;
    let mut mr = OdpMr::new(&mut r.b, 1, iova, &[false]);
    r.b.write(mr.pages[0], &40u64.to_be_bytes());
    let result = r.a.alloc(64, 64);
    let srqn = r.srqs[0].srqn;
    // Control, XRC segment, remote address, atomic segment (add 2), the result's data
    // segment: five segments, two WQEBBs.
    let mut w = [0u8; 128];
    w[16..20].copy_from_slice(&srqn.to_be_bytes());
    RaddrSeg::new(&mut w[32..48])
        .unwrap()
        .set_raddr(iova)
        .set_rkey(mr.key);
    w[48..56].copy_from_slice(&2u64.to_be_bytes());
    DataSeg::new(&mut w[64..80])
        .unwrap()
        .set_byte_count(8)
        .set_lkey(r.lkey_a)
        .set_addr(result);
    CtrlSeg::new(&mut w[..16])
        .unwrap()
        .set_opcode(opcode::ATOMIC_FA)
        .set_wqe_index(r.ini.pi)
        .set_qpn_or_sqn(r.ini.sqn)
        .set_ds(5)
        .set_ce(2);
    r.a.post(&mut r.ini, &w, false);
    settle(&r);
    let event = one_rdma_fault(&mut r.b);
    let e = EqePageFaultRdma::new(&event[..]).expect("layout");
    // An atomic writes the page: MLX5_PFAULT_RDMA | MLX5_PFAULT_WRITE, its 8 bytes.
    assert_eq!(e.pf_type(), pfault_flags::RDMA | pfault_flags::WRITE);
    assert_eq!((e.token(), e.rdma_va(), e.rdma_op_len()), (r.tgt, iova, 8));
    assert_eq!(r.b.read(mr.pages[0], 8), 40u64.to_be_bytes(), "not run yet");
    mr.update_xlt(&mut r.b, &[true], false, 0, 0);
    resume(&mut r.b, e.pf_type(), e.token(), e.token(), false).expect("PAGE_FAULT_RESUME");
    let mut done = Vec::new();
    assert!(settle_until(&mut r, |r| {
        done.extend(drain(&r.a, &mut r.cq_a));
        !done.is_empty()
    }));
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ, "the atomic completed");
    assert_eq!(r.b.read(mr.pages[0], 8), 42u64.to_be_bytes(), "run once");
    assert_eq!(r.a.read(result, 8), 40u64.to_be_bytes());
}
