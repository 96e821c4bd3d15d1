//! A SEND whose receive WQE cannot take it, as rdma-core's `tests/test_mr.py` provokes with
//! `ibv_rereg_mr`: after `test_mr_rereg_addr` moves the server's region elsewhere
//! (IBV_REREG_MR_CHANGE_TRANSLATION) or `test_mr_rereg_pd` moves it to another protection
//! domain (IBV_REREG_MR_CHANGE_PD), the receive WQE's lkey no longer covers its buffer, or is
//! not in the QP's PD. The responder's receive completes with a local protection error and
//! its NAK is the IB spec's remote operational error, which the requester completes with
//! REMOTE_OP_ERR (0x14; mlx5_ib `mlx5_handle_error_cqe` reports IB_WC_REM_OP_ERR, "Remote
//! operation error", what the tests expect). A receive too short for the message stays an
//! invalid request (REMOTE_INVAL_REQ_ERR, 0x12), the responder's CQE a local length error.

use cxdirect_emu::testkit::rc::{rc_wqe, RcPath, RemoteRights, GID_B, MAC_B};
use cxdirect_emu::testkit::rc_pair::RcPair;
use cxdirect_emu::testkit::{Cq, Host, IOVA_BASE};
use cxdirect_emu::EmuConfig;
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::cqe::CqeSyndrome;
use cxdirect_hw::qp::{state, Qpc};
use cxdirect_hw::wqe::opcode;

const MEM: usize = 4 << 20;
const CQE_REQ_ERR: u8 = 13;
const CQE_RESP_ERR: u8 = 14;

fn pair() -> RcPair {
    RcPair::new(
        EmuConfig::default(),
        MEM,
        6,
        4,
        4,
        RcPath::to(GID_B, MAC_B, 0),
    )
}

fn drain(h: &Host, cq: &mut Cq) -> Vec<Vec<u8>> {
    std::iter::from_fn(|| h.poll_cq(cq)).collect()
}

/// (CQE opcode, syndrome) of an error CQE.
fn err(cqe: &[u8]) -> (u8, u8) {
    (cqe[63] >> 4, cqe[0x37])
}

fn qp_state(h: &mut Host, qpn: u32) -> u8 {
    let mut input = Host::input(Opcode::QueryQp, 0, 0x10);
    cxdirect_hw::qp::Qp2errIn::new(&mut input[..])
        .expect("layout")
        .set_qpn(qpn);
    let out = h.exec(&input, 0x1d0).expect("QUERY_QP");
    Qpc::new(&out[0x18..]).expect("layout").state()
}

const LOCAL_ONLY: RemoteRights = RemoteRights {
    read: false,
    write: false,
    atomic: false,
};

/// A's 256-byte SEND to B's receive of `recv_len` bytes at `dst` through `lkey`: the
/// requester's CQE and the responder's.
fn send_into(p: &mut RcPair, dst: u64, recv_len: u32, lkey: u32) -> (Vec<u8>, Vec<u8>) {
    p.b.write(dst, &[0xee; 256]);
    p.b.post_rc_recv(&mut p.qp_b, dst, recv_len, lkey);
    let lkey_a = p.a.create_mkey(false, true);
    let src = p.a.alloc(4096, 4096);
    p.a.write(src, &[0x5a; 256]);
    let w = rc_wqe(&p.qp_a.sq, opcode::SEND, 0, None, None, (src, lkey_a, 256));
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    let req = drain(&p.a, &mut p.cq_a);
    let resp = drain(&p.b, &mut p.cq_b);
    assert_eq!((req.len(), resp.len()), (1, 1), "{req:02x?} {resp:02x?}");
    (req[0].clone(), resp[0].clone())
}

#[test]
fn test_mr_rereg_addr_a_receive_outside_its_moved_key_fails_with_remote_operation_error() {
    let mut p = pair();
    let dst = p.b.alloc(4096, 4096);
    let elsewhere = p.b.alloc(4096, 4096);
    // The key now translates another buffer; the receive still names the old one.
    let pd = p.b.pd;
    let moved =
        p.b.create_remote_mkey(pd, elsewhere, 4096, LOCAL_ONLY, 0x31);
    let (req, resp) = send_into(&mut p, dst, 4096, moved);
    assert_eq!(
        err(&resp),
        (CQE_RESP_ERR, CqeSyndrome::LocalProtection as u8),
        "the receive: local protection"
    );
    assert_eq!(
        err(&req),
        (CQE_REQ_ERR, CqeSyndrome::RemoteOperation as u8),
        "the SEND: remote operation error"
    );
    assert_eq!(p.b.read(dst, 256), vec![0xee; 256], "nothing placed");
    assert_eq!(qp_state(&mut p.b, p.qp_b.qpn), state::ERR);
    assert_eq!(qp_state(&mut p.a, p.qp_a.qpn), state::ERR);
    p.teardown();
}

#[test]
fn test_mr_rereg_pd_a_receive_through_a_key_of_another_pd_fails_with_remote_operation_error() {
    let mut p = pair();
    let dst = p.b.alloc(4096, 4096);
    let other = p.b.alloc_pd();
    let foreign =
        p.b.create_remote_mkey(other, IOVA_BASE, MEM as u64, LOCAL_ONLY, 0x32);
    let (req, resp) = send_into(&mut p, dst, 4096, foreign);
    assert_eq!(
        err(&resp),
        (CQE_RESP_ERR, CqeSyndrome::LocalProtection as u8)
    );
    assert_eq!(err(&req), (CQE_REQ_ERR, CqeSyndrome::RemoteOperation as u8));
    assert_eq!(p.b.read(dst, 256), vec![0xee; 256], "nothing placed");
    p.teardown();
}

#[test]
fn a_receive_shorter_than_the_message_stays_a_remote_invalid_request() {
    let mut p = pair();
    let dst = p.b.alloc(4096, 4096);
    let lkey = p.b.create_mkey(false, true);
    let (req, resp) = send_into(&mut p, dst, 100, lkey);
    assert_eq!(err(&resp), (CQE_RESP_ERR, CqeSyndrome::LocalLength as u8));
    assert_eq!(
        err(&req),
        (CQE_REQ_ERR, CqeSyndrome::RemoteInvalidRequest as u8)
    );
    p.teardown();
}
