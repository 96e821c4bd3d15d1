//! An Ethernet SQ created with `flush_in_error_en` (as mlx5e, mlx5_ib and DPDK create every
//! SQ) flushes what is posted past a failed WQE: each later WQE completes with a flush error
//! CQE (WR_FLUSH_ERR), those posted before the failure and those a later doorbell announces,
//! until the SQ is taken back through reset. mlx5e's recovery depends on it:
//! `mlx5e_wait_for_sq_flush` (en/reporter_tx.c) waits for its consumer counter to reach the
//! producer counter before it resets the SQ, and times out otherwise.

use cxdirect_emu::testkit::{udp_frame, Cq, Host, Sq};
use cxdirect_emu::{Device, EmuConfig};
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::cqe::{Cqe64, CqeOpcode, CqeSyndrome, ErrCqe};
use cxdirect_hw::wq::ModifySqIn;

/// A host on a loopback wire with a send key, a CQ and an SQ (flushing or not).
fn setup(flush: bool) -> (Host, u32, Cq, Sq) {
    let mut h = Host::new(Device::loopback(EmuConfig::default()), 16 << 20);
    h.bring_up();
    let key = h.create_mkey(true, true);
    let cq = h.create_cq(6);
    let tisn = h.create_tis();
    let sq = if flush {
        h.create_flushing_sq(cq.cqn, tisn, 6)
    } else {
        h.create_sq(cq.cqn, tisn, 6)
    };
    (h, key, cq, sq)
}

/// Writes a SEND WQE of a 100-byte frame with `lkey` (a bad key fails it) without ringing;
/// returns the WQE and its index.
fn write_send(h: &mut Host, sq: &mut Sq, lkey: u32) -> (Vec<u8>, u16) {
    let buf = h.alloc(128, 64);
    let wqe = h.build_send(sq, &udp_frame(58, 1), buf, lkey, true);
    let index = sq.pi;
    h.write_wqe(sq, &wqe);
    (wqe, index)
}

/// The CQEs on `cq` now: (opcode, syndrome of an error CQE, WQE counter).
fn cqes(h: &mut Host, cq: &mut Cq) -> Vec<(u8, Option<u8>, u16)> {
    let mut out = Vec::new();
    while let Some(cqe) = h.poll_cq(cq) {
        let c = Cqe64::new(&cqe[..]).unwrap();
        let opcode = c.opcode();
        let syndrome =
            (opcode == CqeOpcode::ReqErr as u8).then(|| ErrCqe::new(&cqe[..]).unwrap().syndrome());
        out.push((opcode, syndrome, c.wqe_counter()));
    }
    out
}

/// MODIFY_SQ from `from` to `to`.
fn modify_sq(h: &mut Host, sqn: u32, from: u8, to: u8) {
    let mut input = Host::input(Opcode::ModifySq, 0, 0x110);
    let mut m = ModifySqIn::new(&mut input[..]).unwrap();
    m.set_sq_state(from).set_sqn(sqn);
    m.ctx_mut().set_state(to);
    h.exec(&input, 16).expect("MODIFY_SQ");
}

const ERR: u8 = CqeOpcode::ReqErr as u8;
const FLUSH: Option<u8> = Some(CqeSyndrome::WrFlushed as u8);
const PROTECTION: Option<u8> = Some(CqeSyndrome::LocalProtection as u8);

#[test]
fn the_wqes_after_a_failed_one_complete_as_flushed_and_so_do_later_ones() {
    let (mut h, key, mut cq, mut sq) = setup(true);
    let (_, bad) = write_send(&mut h, &mut sq, 0xdead_0000);
    let (_, second) = write_send(&mut h, &mut sq, key);
    let (last, third) = write_send(&mut h, &mut sq, key);
    h.ring(&mut sq, &last, false);
    assert_eq!(
        cqes(&mut h, &mut cq),
        [
            (ERR, PROTECTION, bad),
            (ERR, FLUSH, second),
            (ERR, FLUSH, third)
        ]
    );
    // Posted in error: flushed at its doorbell, nothing sent.
    let (wqe, fourth) = write_send(&mut h, &mut sq, key);
    h.ring(&mut sq, &wqe, false);
    assert_eq!(cqes(&mut h, &mut cq), [(ERR, FLUSH, fourth)]);
    assert_eq!(h.dev.counters().tx_frames, 0);
    // The driver's recovery: ERR to RST to RDY, then the ring starts again from 0.
    modify_sq(&mut h, sq.sqn, 3, 0);
    modify_sq(&mut h, sq.sqn, 0, 1);
    sq.pi = 0;
    let (wqe, first) = write_send(&mut h, &mut sq, key);
    h.ring(&mut sq, &wqe, false);
    let after = cqes(&mut h, &mut cq);
    assert_eq!(after.len(), 1);
    assert_eq!((after[0].1, after[0].2), (None, first));
    assert_eq!(h.dev.counters().tx_frames, 1);
}

#[test]
fn an_sq_without_flush_in_error_writes_only_the_error_cqe() {
    let (mut h, key, mut cq, mut sq) = setup(false);
    let (_, bad) = write_send(&mut h, &mut sq, 0xdead_0000);
    let (last, _) = write_send(&mut h, &mut sq, key);
    h.ring(&mut sq, &last, false);
    assert_eq!(cqes(&mut h, &mut cq), [(ERR, PROTECTION, bad)]);
    let (wqe, _) = write_send(&mut h, &mut sq, key);
    h.ring(&mut sq, &wqe, false);
    assert!(cqes(&mut h, &mut cq).is_empty());
}
