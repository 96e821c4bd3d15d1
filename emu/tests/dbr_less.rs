//! QPs without a send doorbell record (`send_dbr_mode` NO_DBR_EXT), as rdma-core's DevX test
//! `test_devx_rc_qp_send_imm_doorbell_less_traffic` makes and rings one (tests/mlx5_base.py:
//! `check_cap_send_dbr_mode` asks HCA_CAP_2 for `send_dbr_mode_no_dbr_ext`, `create_qp` sets
//! the mode, `post_send` writes no record and rings the UAR page's register at 0x600 with the
//! WQE's first eight bytes). The device runs what each doorbell announces: up to the end of
//! the WQE its control segment names.

use cxdirect_emu::testkit::rc::{RcPath, RcQp, GID_A, GID_B, MAC_A, MAC_B};
use cxdirect_emu::testkit::ud::{ud_wqe, UdAv, UdPair, UD_QKEY};
use cxdirect_emu::testkit::{CmdFail, Cq, Host};
use cxdirect_emu::{Device, EmuConfig, Syndrome};
use cxdirect_hw::caps::CmdHcaCap2;
use cxdirect_hw::cmd::CmdStatus;
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::doorbell::UAR_DBR_LESS_DOORBELL;
use cxdirect_hw::hca::cap_type;
use cxdirect_hw::qp::{rq_type, send_dbr_mode, service_type, QueryQpIn, QueryQpOut};
use cxdirect_hw::wqe::{opcode, CtrlSeg, DataSeg};

const MEM: usize = 4 << 20;
const LEN: usize = 200;

struct Pair {
    a: Host,
    b: Host,
    cq_a: Cq,
    cq_b: Cq,
    /// A's QP, created with `send_dbr_mode` NO_DBR_EXT.
    qp_a: RcQp,
    /// B's QP, with a doorbell record.
    qp_b: RcQp,
    lkey_a: u32,
    lkey_b: u32,
}

fn pair() -> Pair {
    let cfg = |mac| EmuConfig {
        roce: true,
        mac,
        ..EmuConfig::default()
    };
    let (da, db) = Device::pair(cfg(MAC_A), cfg(MAC_B));
    let (mut a, mut b) = (Host::new(da, MEM), Host::new(db, MEM));
    a.bring_up();
    b.bring_up();
    a.enable_roce(GID_A, MAC_A);
    b.enable_roce(GID_B, MAC_B);
    let cq_a = a.create_cq(6);
    let cq_b = b.create_cq(6);
    let qp_a = a
        .try_create_connected_qp(service_type::RC, &cq_a, (5, 5), None, |c| {
            c.set_send_dbr_mode(send_dbr_mode::NO_DBR_EXT);
        })
        .expect("CREATE_QP without a send doorbell record");
    let qp_b = b.create_rc_qp(&cq_b, 5, 5, None);
    let path = RcPath::to(GID_B, MAC_B, qp_b.qpn);
    a.connect_rc(qp_a.qpn, &path);
    let back = RcPath {
        send_psn: path.receive_psn,
        receive_psn: path.send_psn,
        ..RcPath::to(GID_A, MAC_A, qp_a.qpn)
    };
    b.connect_rc(qp_b.qpn, &back);
    let lkey_a = a.create_mkey(false, true);
    let lkey_b = b.create_mkey(false, true);
    Pair {
        a,
        b,
        cq_a,
        cq_b,
        qp_a,
        qp_b,
        lkey_a,
        lkey_b,
    }
}

fn settle(p: &Pair) {
    for _ in 0..6 {
        p.b.dev.poll();
        p.a.dev.poll();
    }
}

/// A signaled SEND with immediate of `len` bytes at `at` (one WQEBB), as the DevX test builds.
fn send_imm(qp: &RcQp, imm: u32, (at, lkey, len): (u64, u32, u32)) -> [u8; 64] {
    let mut w = [0u8; 64];
    DataSeg::new(&mut w[16..32])
        .unwrap()
        .set_addr(at)
        .set_lkey(lkey)
        .set_byte_count(len);
    CtrlSeg::new(&mut w[..16])
        .unwrap()
        .set_opcode(opcode::SEND_IMM)
        .set_wqe_index(qp.sq.pi)
        .set_qpn_or_sqn(qp.qpn)
        .set_ds(2)
        .set_ce(2)
        .set_imm(imm);
    w
}

/// Writes `n` SENDs with immediate on `qp` (its record untouched) and returns the last WQE.
fn write_sends(h: &mut Host, qp: &mut RcQp, lkey: u32, first_imm: u32, n: u32) -> [u8; 64] {
    let mut last = [0u8; 64];
    for i in 0..n {
        let at = h.alloc(LEN as u64, 64);
        h.write(at, &[(first_imm + i) as u8; LEN]);
        last = send_imm(qp, first_imm + i, (at, lkey, LEN as u32));
        h.write_wqe(&mut qp.sq, &last);
    }
    last
}

/// Rings the UAR page's doorbell-less register with `wqe`'s first eight bytes.
fn ring_dbr_less(h: &Host, wqe: &[u8]) {
    h.dev
        .mmio_write(h.uar_base() + UAR_DBR_LESS_DOORBELL as u64, &wqe[..8])
        .expect("the doorbell-less register takes an 8-byte write");
}

fn post_receives(p: &mut Pair, n: usize) {
    for _ in 0..n {
        let r = p.b.alloc(4096, 64);
        p.b.post_rc_recv(&mut p.qp_b, r, 4096, p.lkey_b);
    }
}

fn received_imms(p: &mut Pair) -> Vec<u32> {
    std::iter::from_fn(|| p.b.poll_cq(&mut p.cq_b))
        .map(|cqe| {
            assert_eq!(cqe[63] >> 4, 3, "a receive with immediate: {cqe:02x?}");
            u32::from_be_bytes(cqe[0x24..0x28].try_into().unwrap())
        })
        .collect()
}

fn send_completions(p: &mut Pair) -> Vec<u16> {
    std::iter::from_fn(|| p.a.poll_cq(&mut p.cq_a))
        .map(|cqe| {
            assert_eq!(cqe[63] >> 4, 0, "a send completion: {cqe:02x?}");
            u16::from_be_bytes([cqe[0x3c], cqe[0x3d]])
        })
        .collect()
}

/// HCA_CAP_2 offers the doorbell-less register, not the counter kept inside the device, and
/// QUERY_QP reads the mode back.
#[test]
fn hca_cap_2_offers_qps_without_a_send_doorbell_record() {
    let mut p = pair();
    let page = p.a.query_cap(cap_type::GENERAL_DEVICE_2, true);
    let cap = CmdHcaCap2::new(&page[0x10..0x110]).unwrap();
    assert!(cap.send_dbr_mode_no_dbr_ext());
    assert!(!cap.send_dbr_mode_no_dbr_int());
    assert!(cap.log_max_send_dbr_less_qp_sq() > 0);
    let mut input = Host::input(Opcode::QueryQp, 0, 0x10);
    QueryQpIn::new(&mut input[..]).unwrap().set_qpn(p.qp_a.qpn);
    let out = p.a.exec(&input, 0x110 + 0x800).expect("QUERY_QP");
    assert_eq!(
        QueryQpOut::new(&out[..]).unwrap().qpc().send_dbr_mode(),
        send_dbr_mode::NO_DBR_EXT
    );
}

/// Three WQEs written and one doorbell naming the last: all three run, with no record ever
/// written; then one more WQE and its doorbell. Each SEND lands at B in order.
#[test]
fn a_qp_without_a_record_runs_up_to_the_wqe_its_doorbell_names() {
    let mut p = pair();
    post_receives(&mut p, 8);
    let last = write_sends(&mut p.a, &mut p.qp_a, p.lkey_a, 0x100, 3);
    assert_eq!(p.a.read(p.qp_a.sq.dbr + 4, 4), [0; 4], "no send record");
    ring_dbr_less(&p.a, &last);
    settle(&p);
    assert_eq!(send_completions(&mut p), [0, 1, 2]);
    assert_eq!(received_imms(&mut p), [0x100, 0x101, 0x102]);
    let last = write_sends(&mut p.a, &mut p.qp_a, p.lkey_a, 0x103, 1);
    ring_dbr_less(&p.a, &last);
    settle(&p);
    assert_eq!(send_completions(&mut p), [3]);
    assert_eq!(received_imms(&mut p), [0x103]);
    assert_eq!(p.a.dev.counters().bad_doorbells, 0);
}

/// Doorbells that cannot ring such a QP change nothing and are counted: one naming an earlier
/// WQE than the last (the counter never goes back), and one on the doorbell-less register for
/// a QP that has a record (B's). A doorbell of the QP's own then runs what was posted.
#[test]
fn doorbells_that_cannot_ring_are_counted_and_run_nothing() {
    let mut p = pair();
    post_receives(&mut p, 8);
    let first = write_sends(&mut p.a, &mut p.qp_a, p.lkey_a, 0x200, 1);
    let last = write_sends(&mut p.a, &mut p.qp_a, p.lkey_a, 0x201, 1);
    ring_dbr_less(&p.a, &last);
    settle(&p);
    assert_eq!(send_completions(&mut p), [0, 1]);
    assert_eq!(received_imms(&mut p), [0x200, 0x201]);
    ring_dbr_less(&p.a, &first);
    settle(&p);
    assert_eq!(
        p.a.dev.counters().bad_doorbells,
        1,
        "a doorbell behind the last"
    );
    assert!(send_completions(&mut p).is_empty());
    assert!(received_imms(&mut p).is_empty());

    // B's QP keeps a record: the doorbell-less register does not ring it.
    let lkey_b = p.lkey_b;
    let at = p.b.alloc(64, 64);
    let w = send_imm(&p.qp_b, 7, (at, lkey_b, 64));
    p.b.write_wqe(&mut p.qp_b.sq, &w);
    p.b.write_be32(p.qp_b.sq.dbr + 4, u32::from(p.qp_b.sq.pi));
    let r = p.a.alloc(4096, 64);
    p.a.post_rc_recv(&mut p.qp_a, r, 4096, p.lkey_a);
    ring_dbr_less(&p.b, &w);
    settle(&p);
    assert_eq!(p.b.dev.counters().bad_doorbells, 1);
    assert!(p.b.poll_cq(&mut p.cq_b).is_none(), "nothing ran");
    // Its BlueFlame register does.
    let bf = p.b.uar_base() + cxdirect_hw::doorbell::UAR_BF_OFFSET as u64;
    p.b.dev.mmio_write(bf, &w[..8]).unwrap();
    settle(&p);
    let cqe = p.b.poll_cq(&mut p.cq_b).expect("B's SEND completes");
    assert_eq!(cqe[63] >> 4, 0);
}

/// CREATE_QP refuses the counter kept inside the device (not offered), the reserved mode, and
/// a doorbell-less QP without a send queue.
#[test]
fn create_qp_refuses_what_is_not_offered() {
    let mut p = pair();
    let bad_param = Err(CmdFail::status(
        CmdStatus::BadParameter,
        Syndrome::BadQpParams,
    ));
    for mode in [send_dbr_mode::NO_DBR_INT, 3] {
        let got =
            p.a.try_create_connected_qp(service_type::RC, &p.cq_a, (5, 5), None, |c| {
                c.set_send_dbr_mode(mode);
            })
            .map(|qp| qp.qpn);
        assert_eq!(got, bad_param, "send_dbr_mode {mode}");
    }
    let got =
        p.a.try_create_connected_qp(service_type::RC, &p.cq_a, (5, 5), None, |c| {
            c.set_send_dbr_mode(send_dbr_mode::NO_DBR_EXT)
                .set_no_sq(true)
                .set_log_sq_size(0)
                .set_rq_type(rq_type::REGULAR);
        })
        .map(|qp| qp.qpn);
    assert_eq!(got, bad_param, "no send queue");
}

/// A UD QP without a record: its datagrams go by what the doorbell-less register announces,
/// as the RC requester's do (the datagram engine reads the same counter).
#[test]
fn a_ud_qp_without_a_record_sends_what_its_doorbell_names() {
    let mut p = UdPair::new(EmuConfig::default(), MEM, 6, 5, 5);
    let mut qp =
        p.a.try_create_ud_qp(&p.cq_a, service_type::UD, 5, 5, |c| {
            c.set_send_dbr_mode(send_dbr_mode::NO_DBR_EXT);
        })
        .expect("CREATE_QP of a UD QP without a send doorbell record");
    p.a.activate_ud(qp.qpn, service_type::UD, UD_QKEY);
    let (lkey_a, lkey_b) = (p.a.create_mkey(false, true), p.b.create_mkey(false, true));
    let dst = p.b.alloc(4096, 64);
    p.b.post_ud_recv(&mut p.ud_b, dst, 4096, lkey_b);
    let src = p.a.alloc(4096, 64);
    p.a.write(src, &[0x5a; LEN]);
    let av = UdAv::to(GID_B, MAC_B, p.ud_b.qpn, UD_QKEY);
    let w = ud_wqe(&qp.sq, opcode::SEND, 0, &av, &[(src, lkey_a, LEN as u32)]);
    p.a.write_wqe(&mut qp.sq, &w);
    ring_dbr_less(&p.a, &w);
    p.settle();
    let sent = p.a.poll_cq(&mut p.cq_a).expect("A's send completion");
    assert_eq!(sent[63] >> 4, 0, "a send completion: {sent:02x?}");
    let got = p.b.poll_cq(&mut p.cq_b).expect("B's receive");
    assert_eq!(got[63] >> 4, 2, "a receive: {got:02x?}");
    // The 40-byte GRH comes first in a UD receive buffer.
    assert_eq!(p.b.read(dst + 40, LEN), [0x5a; LEN]);
    assert_eq!(p.a.dev.counters().bad_doorbells, 0);
}

/// A reset QP starts counting again from WQE 0, as software starts posting again from it
/// (mlx5_ib sets its heads to 0): a doorbell naming WQE 0 after the reset runs it, where a
/// counter kept from before the reset would take it for a doorbell behind the last one.
#[test]
fn a_reset_puts_the_counter_back_to_zero() {
    let mut p = pair();
    post_receives(&mut p, 8);
    let last = write_sends(&mut p.a, &mut p.qp_a, p.lkey_a, 0x300, 2);
    ring_dbr_less(&p.a, &last);
    settle(&p);
    assert_eq!(send_completions(&mut p), [0, 1]);
    assert_eq!(received_imms(&mut p), [0x300, 0x301]);

    // Both QPs to RESET and connected again (B's receive ring and record back at 0 too).
    p.a.modify_qp(Opcode::Qp2rstQp, p.qp_a.qpn, |_| {});
    p.b.modify_qp(Opcode::Qp2rstQp, p.qp_b.qpn, |_| {});
    p.qp_a.sq.pi = 0;
    p.qp_b.sq.pi = 0;
    p.qp_b.rq_pi = 0;
    p.b.write_be32(p.qp_b.sq.dbr, 0);
    p.b.write_be32(p.qp_b.sq.dbr + 4, 0);
    let path = RcPath::to(GID_B, MAC_B, p.qp_b.qpn);
    p.a.connect_rc(p.qp_a.qpn, &path);
    let back = RcPath {
        send_psn: path.receive_psn,
        receive_psn: path.send_psn,
        ..RcPath::to(GID_A, MAC_A, p.qp_a.qpn)
    };
    p.b.connect_rc(p.qp_b.qpn, &back);
    post_receives(&mut p, 1);

    let first = write_sends(&mut p.a, &mut p.qp_a, p.lkey_a, 0x400, 1);
    ring_dbr_less(&p.a, &first);
    settle(&p);
    assert_eq!(p.a.dev.counters().bad_doorbells, 0);
    assert_eq!(send_completions(&mut p), [0]);
    assert_eq!(received_imms(&mut p), [0x400]);
}
