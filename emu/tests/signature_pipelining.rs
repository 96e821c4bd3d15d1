//! Signature pipelining as rdma-core's `test_mkey_sig_pipelining_*` (tests/test_mlx5_mkey.py)
//! drives it: libmlx5 gives a MLX5DV_QP_CREATE_SIG_PIPELINING QP `drain_sigerr` by INIT2INIT
//! (`mlx5_modify_qp_drain_sigerr`: `MLX5_QPC_OPT_MASK_INIT2INIT_DRAIN_SIGERR`), which mlx5_ib
//! offers when the general cap `drain_sigerr` is set (`set_ucontext_resp`: SQD2RTS). A WRITE
//! from a signature key whose memory CRC is bad then stops the send queue: the QP is in SQD
//! (`MLX5_QPC_STATE_SQDRAINED`) with the fenced SEND after it unexecuted, SQ_DRAINED is
//! raised, QUERY_QP's `hw_sq_wqebb_counter` names the waiting WQE (`mlx5_qp_query_sqd`),
//! software turns it into a NOP (`mlx5dv_qp_cancel_posted_send_wrs`), posts the SEND again
//! and SQD_RTS_QP resumes the queue.

use cxdirect_emu::testkit::pattern::pattern_by;
use cxdirect_emu::testkit::rc::{rc_wqe, RcPath, GID_B, MAC_B};
use cxdirect_emu::testkit::rc_pair::RcPair;
use cxdirect_emu::testkit::signature::CQE_SIG_ERR;
use cxdirect_emu::testkit::signature_dv::{crc_field, CrcKind};
use cxdirect_emu::testkit::signature_pair::a_crc32_in_memory_key;
use cxdirect_emu::testkit::umr::{
    b_plain_rkey, cqe_opcode, drain, pair_without_pg, rdma_wqe, CQE_REQ,
};
use cxdirect_emu::testkit::CmdFail;
use cxdirect_hw::caps::CmdHcaCap;
use cxdirect_hw::cmd::{CmdStatus, Opcode};
use cxdirect_hw::eqe::EventType;
use cxdirect_hw::hca::cap_type;
use cxdirect_hw::qp::{optpar, state, QueryQpIn, QueryQpOut};
use cxdirect_hw::wqe::{fence_mode, opcode, CtrlSeg};

const BLOCK: usize = 512;

/// A's QP reset and connected again as libmlx5 brings up a SIG_PIPELINING QP: RST2INIT,
/// INIT2INIT with `drain_sigerr`, INIT2RTR, RTR2RTS.
fn reconnect_a_with_drain(p: &mut RcPair) {
    let qpn = p.qp_a.qpn;
    p.a.modify_qp(Opcode::Qp2rstQp, qpn, |_| {});
    p.qp_a.sq.pi = 0;
    let path = RcPath::to(GID_B, MAC_B, p.qp_b.qpn);
    p.a.connect_rc_then(qpn, &path, |h| {
        let mut input = cxdirect_emu::testkit::Host::input(Opcode::Init2initQp, 0, 0x110);
        {
            let mut cmd = cxdirect_hw::qp::Rst2initQpIn::new(&mut input[..]).unwrap();
            cmd.set_qpn(qpn).set_opt_param_mask(optpar::DRAIN_SIGERR);
            cmd.qpc_mut().set_drain_sigerr(true);
        }
        h.exec(&input, 0x10).expect("INIT2INIT with drain_sigerr");
    });
}

/// QUERY_QP of A's QP: (state, `hw_sq_wqebb_counter`).
fn a_state(p: &mut RcPair) -> (u8, u16) {
    let mut input = cxdirect_emu::testkit::Host::input(Opcode::QueryQp, 0, 0x10);
    QueryQpIn::new(&mut input[..]).unwrap().set_qpn(p.qp_a.qpn);
    let out =
        p.a.exec(&input, QueryQpOut::<&[u8]>::SIZE)
            .expect("QUERY_QP");
    let out = QueryQpOut::new(&out[..]).unwrap();
    let ctx = out.qpc();
    (ctx.state(), ctx.hw_sq_wqebb_counter())
}

/// The transaction of `build_traffic_elements_sig_pipelining`: B posts a receive, A posts
/// an unsignalled WRITE of 512 bytes through its signature key and a signalled, fenced SEND
/// of 16 bytes from plain memory. Returns the SEND's WQE index and its WQE.
fn transaction(p: &mut RcPair, key: u32) -> (u16, Vec<u8>) {
    let rkey = b_plain_rkey(p, 0x41);
    let dst = p.b.alloc(BLOCK as u64, 4096);
    let lkey_b = p.b.create_mkey(false, true);
    let resp = p.b.alloc(64, 64);
    p.b.post_rc_recv(&mut p.qp_b, resp, 64, lkey_b);
    let mut write = rdma_wqe(
        &p.qp_a.sq,
        opcode::RDMA_WRITE,
        (dst, rkey),
        (0, key),
        BLOCK as u32,
        0,
    );
    // Unsignalled, as the test posts it.
    CtrlSeg::new(&mut write[..16]).unwrap().set_ce(0);
    p.a.write_wqe(&mut p.qp_a.sq, &write);
    let lkey_a = p.a.create_mkey(false, true);
    let src = p.a.alloc(64, 64);
    let send_index = p.qp_a.sq.pi;
    let mut send = rc_wqe(&p.qp_a.sq, opcode::SEND, 0, None, None, (src, lkey_a, 16));
    CtrlSeg::new(&mut send[..16])
        .unwrap()
        .set_fm(fence_mode::FENCE);
    p.a.post(&mut p.qp_a.sq, &send, false);
    p.settle();
    (send_index, send.to_vec())
}

#[test]
fn the_caps_offer_drain_sigerr() {
    let mut p = pair_without_pg();
    let out = p.a.query_cap(cap_type::GENERAL_DEVICE, true);
    assert!(CmdHcaCap::new(&out[0x10..0x110]).unwrap().drain_sigerr());
}

#[test]
fn a_good_signature_lets_the_fenced_send_through() {
    let mut p = pair_without_pg();
    reconnect_a_with_drain(&mut p);
    let data = pattern_by(BLOCK, 29, 3);
    let crc = crc_field(CrcKind::Crc32, 0xffff_ffff, &data);
    let key = a_crc32_in_memory_key(&mut p, &data, &crc);
    transaction(&mut p, key);
    let a: Vec<u8> = drain(&p.a, &mut p.cq_a)
        .iter()
        .map(|c| cqe_opcode(c))
        .collect();
    assert_eq!(
        a,
        vec![CQE_REQ],
        "the SEND completes, the WRITE is unsignalled"
    );
    assert_eq!(drain(&p.b, &mut p.cq_b).len(), 1, "B receives the SEND");
    assert_eq!(a_state(&mut p).0, state::RTS);
}

#[test]
fn a_bad_signature_drains_the_send_queue_until_sqd_rts() {
    let mut p = pair_without_pg();
    reconnect_a_with_drain(&mut p);
    let data = pattern_by(BLOCK, 29, 5);
    let mut crc = crc_field(CrcKind::Crc32, 0xffff_ffff, &data);
    crc[0] ^= 1;
    let key = a_crc32_in_memory_key(&mut p, &data, &crc);
    p.a.drain_eq();
    let (send_index, send) = transaction(&mut p, key);

    // The SIG_ERR CQE (which libmlx5 keeps for mlx5dv_mkey_check), no completion of the
    // SEND, nothing on B's side, the QP in SQD at the SEND, one SQ_DRAINED event naming it.
    let a: Vec<u8> = drain(&p.a, &mut p.cq_a)
        .iter()
        .map(|c| cqe_opcode(c))
        .collect();
    assert_eq!(a, vec![CQE_SIG_ERR]);
    assert!(drain(&p.b, &mut p.cq_b).is_empty(), "the SEND did not go");
    assert_eq!(a_state(&mut p), (state::SQD, send_index));
    let drained: Vec<u32> =
        p.a.drain_eq()
            .into_iter()
            .filter(|(kind, _, _)| *kind == EventType::SqDrained as u8)
            .map(|(_, _, d)| u32::from_be_bytes([d[24], d[25], d[26], d[27]]) & 0xff_ffff)
            .collect();
    assert_eq!(drained, vec![p.qp_a.qpn], "one SQ_DRAINED naming the QP");

    // `mlx5dv_qp_cancel_posted_send_wrs`: the SEND becomes a NOP (index and completion
    // request kept); the SEND is posted again. In SQD nothing runs.
    let mut nop = send.clone();
    nop[3] = opcode::NOP;
    let slot = u64::from(send_index) & ((1 << p.qp_a.sq.log) - 1);
    p.a.write(p.qp_a.sq.buf + slot * 64, &nop);
    let again = rc_wqe(
        &p.qp_a.sq,
        opcode::SEND,
        0,
        None,
        None,
        (
            // The SEND's data segment (after its control segment): address and lkey.
            u64::from_be_bytes(send[24..32].try_into().unwrap()),
            u32::from_be_bytes(send[20..24].try_into().unwrap()),
            16,
        ),
    );
    let lkey_b = p.b.create_mkey(false, true);
    let resp = p.b.alloc(64, 64);
    p.b.post_rc_recv(&mut p.qp_b, resp, 64, lkey_b);
    p.a.post(&mut p.qp_a.sq, &again, false);
    p.settle();
    assert!(drain(&p.a, &mut p.cq_a).is_empty(), "nothing runs in SQD");
    assert_eq!(a_state(&mut p).0, state::SQD);

    p.a.modify_qp(Opcode::SqdRtsQp, p.qp_a.qpn, |_| {});
    p.settle();
    assert_eq!(a_state(&mut p).0, state::RTS);
    let a: Vec<(u8, u8)> = drain(&p.a, &mut p.cq_a)
        .iter()
        .map(|c| (cqe_opcode(c), c[56]))
        .collect();
    assert_eq!(
        a,
        vec![(CQE_REQ, opcode::NOP), (CQE_REQ, opcode::SEND)],
        "the NOP, then the SEND posted again"
    );
    assert_eq!(drain(&p.b, &mut p.cq_b).len(), 1, "one SEND arrives");
    // SQD_RTS_QP from anywhere but SQD is refused.
    let mut input = cxdirect_emu::testkit::Host::input(Opcode::SqdRtsQp, 0, 0x110);
    cxdirect_hw::qp::Rst2initQpIn::new(&mut input[..])
        .unwrap()
        .set_qpn(p.qp_a.qpn);
    assert!(matches!(
        p.a.exec(&input, 0x10),
        Err(CmdFail::Status { status, .. }) if status == CmdStatus::BadQpState as u8
    ));
}
