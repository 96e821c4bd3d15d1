//! How a signature key is reached beyond RDMA WRITE and READ: a receive WQE whose scatter
//! entry names it (the SEND's payload lands through the signature, as `ib_post_recv` with the
//! integrity key's lkey would have it), and the PSV WQEs the model leaves out: GET_PSV and
//! CHECK_PSV (Linux's qp.h declares their segments, `mlx5_seg_get_psv` and
//! `mlx5_seg_check_psv`, but neither mlx5_ib nor libmlx5 posts them, and what they do with a
//! signature PSV is not public), refused as mlx5_ib reads a refused local operation: an error
//! CQE with the local QP operation syndrome.

use cxdirect_emu::testkit::pattern::pattern_by;
use cxdirect_emu::testkit::rc::{rc_wqe, GID_B, MAC_B};
use cxdirect_emu::testkit::rc_pair::RcPair;
use cxdirect_emu::testkit::signature::{
    pi_of, protection_of, trans_sig, with_dif, Dif, CQE_SIG_ERR, TYPE1,
};
use cxdirect_emu::testkit::signature_pair::register_apart;
use cxdirect_emu::testkit::ud::{ud_wqe, UdAv, UD_QKEY};
use cxdirect_emu::testkit::umr::{cqe_opcode, drain, pair_without_pg, staged_on_a, CQE_REQ};
use cxdirect_hw::qp::service_type;
use cxdirect_hw::sig::{crc16_t10dif, sig_err, SigErrCqe};
use cxdirect_hw::wqe::{opcode, CtrlSeg};

/// CQE opcode of a receive completion for a SEND (`MLX5_CQE_RESP_SEND`).
const CQE_RESP_SEND: u8 = 0x2;
/// CQE opcode of a requester error (`MLX5_CQE_REQ_ERR`).
const CQE_REQ_ERR: u8 = 0xd;
/// CQE opcode of a responder error (`MLX5_CQE_RESP_ERR`).
const CQE_RESP_ERR: u8 = 0xe;
/// `MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR`.
const SYND_LOCAL_QP_OP: u8 = 0x02;
/// `MLX5_CQE_SYNDROME_LOCAL_PROT_ERR`.
const SYND_LOCAL_PROT: u8 = 0x04;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    pattern_by(len, 41, seed)
}

/// A's SEND of `payload` from A's memory: A's CQEs.
fn send_from_a(p: &mut RcPair, payload: &[u8]) -> Vec<Vec<u8>> {
    let (src, lkey) = staged_on_a(p, payload);
    let w = rc_wqe(
        &p.qp_a.sq,
        opcode::SEND,
        0,
        None,
        None,
        (src, lkey, payload.len() as u32),
    );
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    drain(&p.a, &mut p.cq_a)
}

#[test]
fn a_send_into_a_receive_naming_a_signature_key_lands_through_its_signature() {
    let mut p = pair_without_pg();
    // 512-byte wire blocks over 4 KiB memory blocks, the payload over several packets.
    let (mem, wire) = (
        Dif {
            pi_interval: 4096,
            ref_tag: 0x80,
            ..TYPE1
        },
        TYPE1,
    );
    let data_len = 8192;
    let (key, data_at, prot_at, psvs) = register_apart(&mut p, true, data_len, mem, wire);
    let data = pattern(data_len, 6);
    let mut sent = with_dif(&data, wire);
    p.b.post_rc_recv(&mut p.qp_b, 0, sent.len() as u32, key);
    let done = send_from_a(&mut p, &sent);
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ, "the SEND completes");
    let at_b = drain(&p.b, &mut p.cq_b);
    assert_eq!(at_b.len(), 1, "the receive, no signature error");
    assert_eq!(cqe_opcode(&at_b[0]), CQE_RESP_SEND);
    assert_eq!(p.b.read(data_at, data_len), data, "the data, stripped");
    assert_eq!(
        p.b.read(prot_at, 16),
        protection_of(&data, mem),
        "memory's protection, generated in its own blocks"
    );
    let last = pi_of(&data[data_len - 512..], wire, 15);
    assert_eq!(
        p.b.dev.psv(psvs.1),
        Some((trans_sig(last), TYPE1.ref_tag + 15)),
        "the wire PSV at the last block received"
    );
    // A bad guard in wire block 9: the SIG_ERR CQE on B's receive CQ, then the receive.
    sent[9 * 520 + 512] ^= 0x04;
    p.b.post_rc_recv(&mut p.qp_b, 0, sent.len() as u32, key);
    let done = send_from_a(&mut p, &sent);
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ);
    let at_b = drain(&p.b, &mut p.cq_b);
    assert_eq!(at_b.len(), 2, "SIG_ERR, then the receive");
    assert_eq!(cqe_opcode(&at_b[0]), CQE_SIG_ERR);
    let e = SigErrCqe::new(&at_b[0][..64]).expect("layout");
    let want = crc16_t10dif(&data[9 * 512..10 * 512]);
    assert_eq!(e.syndrome(), sig_err::GUARD);
    assert_eq!(e.expected_trans_sig() >> 16, u32::from(want));
    assert_eq!(e.actual_trans_sig() >> 16, u32::from(want ^ 0x0400));
    assert_eq!(e.err_offset(), 9 * 520, "wire block 9's offset in the key");
    assert_eq!((e.mkey(), e.qpn()), (key, p.qp_b.qpn));
    assert_eq!(cqe_opcode(&at_b[1]), CQE_RESP_SEND);
}

#[test]
fn a_ud_receive_naming_a_signature_key_completes_with_a_local_protection_error() {
    // No public source says whether a ConnectX serves a signature key behind a UD receive;
    // Linux's integrity users are RC. The model refuses it.
    let mut p = pair_without_pg();
    let (key, _, _, _) = register_apart(&mut p, true, 4096, TYPE1, TYPE1);
    let mut ud_a = p.a.create_ud_qp(&p.cq_a, service_type::UD, 4, 4);
    let mut ud_b = p.b.create_ud_qp(&p.cq_b, service_type::UD, 4, 4);
    p.a.activate_ud(ud_a.qpn, service_type::UD, UD_QKEY);
    p.b.activate_ud(ud_b.qpn, service_type::UD, UD_QKEY);
    // Room for the GRH and the datagram, all through the signature key.
    p.b.post_ud_recv(&mut ud_b, 0, 40 + 520, key);
    let lkey = p.a.create_mkey(false, true);
    let src = p.a.alloc(520, 4096);
    let av = UdAv::to(GID_B, MAC_B, ud_b.qpn, UD_QKEY);
    let w = ud_wqe(&ud_a.sq, opcode::SEND, 0, &av, &[(src, lkey, 520)]);
    p.a.post(&mut ud_a.sq, &w, false);
    p.settle();
    assert_eq!(
        cqe_opcode(&drain(&p.a, &mut p.cq_a)[0]),
        CQE_REQ,
        "the SEND leaves A"
    );
    let at_b = drain(&p.b, &mut p.cq_b);
    assert_eq!(at_b.len(), 1, "the receive's completion");
    assert_eq!(cqe_opcode(&at_b[0]), CQE_RESP_ERR);
    assert_eq!(at_b[0][0x37], SYND_LOCAL_PROT);
}

/// Posts a one-WQEBB WQE of `op` on A's RC QP carrying its segment with one PSV (`num_psv`
/// in its high nibble, as mlx5e's kTLS resync writes GET_PSV's), no key, PSV 0: A's CQEs.
fn post_psv_wqe(p: &mut RcPair, op: u8) -> Vec<Vec<u8>> {
    let mut w = [0u8; 64];
    CtrlSeg::new(&mut w[..16])
        .expect("layout")
        .set_opcode(op)
        .set_wqe_index(p.qp_a.sq.pi)
        .set_qpn_or_sqn(p.qp_a.sq.sqn)
        .set_ds(4)
        .set_ce(cxdirect_hw::wqe::completion::ALWAYS);
    // `num_psv`: byte 19 of `mlx5_seg_get_psv`, byte 15 of `mlx5_seg_check_psv`.
    w[16 + if op == opcode::GET_PSV { 19 } else { 15 }] = 1 << 4;
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    drain(&p.a, &mut p.cq_a)
}

#[test]
fn get_psv_and_check_psv_complete_with_a_local_qp_operation_error() {
    for op in [opcode::GET_PSV, opcode::CHECK_PSV] {
        let mut p = pair_without_pg();
        let done = post_psv_wqe(&mut p, op);
        assert_eq!(done.len(), 1, "one completion for opcode {op:#x}");
        assert_eq!(cqe_opcode(&done[0]), CQE_REQ_ERR, "opcode {op:#x} refused");
        assert_eq!(done[0][0x37], SYND_LOCAL_QP_OP, "opcode {op:#x}");
    }
}
