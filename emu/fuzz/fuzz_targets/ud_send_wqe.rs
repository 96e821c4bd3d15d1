//! A hostile driver's UD and GSI send queues: WQEs with control, datagram (address vector)
//! and data or inline segments built from the input (opcodes, `ds`, indexes, Q_Keys,
//! destination QPs, GID indexes, MACs, keys, addresses and lengths right or wrong), or raw
//! WQEBBs, under an arbitrary producer index, on a QP of a function wired to a good peer.
//!
//! Invariants: no panic; completions come in posting order, at most one per WQE, and after an
//! error only flushes; the send queue, in error or not, is brought back to RTS by SQERR2RTS,
//! after which a valid signalled datagram completes successfully and reaches the peer; the
//! peer's memory changes only in its receive buffers, CQ and EQ, the sender's (until the
//! harness's own commands) only where the device or the harness writes; every CQE is well
//! formed.

#![no_main]

#[allow(dead_code)]
mod rc_common;

use cxdirect_emu::testkit::rc::{GID_B, MAC_B};
use cxdirect_emu::testkit::ud::{ud_wqe, UdAv, UdPair, UdQp, QKEY_FROM_QP, QP1_QKEY, UD_QKEY};
use cxdirect_emu::testkit::{Host, Sq, IOVA_BASE};
use cxdirect_emu::EmuConfig;
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::cqe::{Cqe64, CqeOpcode, CqeSyndrome, ErrCqe};
use cxdirect_hw::doorbell::UAR_BF_OFFSET;
use cxdirect_hw::qp::{state, Qp2errIn, Qpc};
use cxdirect_hw::wqe::{opcode, CtrlSeg, INLINE_SEG, INVALID_LKEY};
use libfuzzer_sys::arbitrary::{Result as ArbResult, Unstructured};
use libfuzzer_sys::fuzz_target;
use rc_common::check_unchanged;
use std::time::Duration;

const MEM: usize = 2 << 20;
const LOG_SQ: u8 = 4;
const RING_BBS: u16 = 1 << LOG_SQ;
const LOG_RQ: u8 = 5;
const RECV_BYTES: u32 = 4096 + 40;
const REGION: u64 = 16 << 10;

struct Setup {
    p: UdPair,
    gsi: bool,
    local: u64,
    lkey: u32,
    writable_a: Vec<(u64, u64)>,
    writable_b: Vec<(u64, u64)>,
}

fn qp(s: &Setup) -> &UdQp {
    if s.gsi {
        &s.p.gsi_a
    } else {
        &s.p.ud_a
    }
}

fn setup(gsi: bool) -> Setup {
    let cfg = EmuConfig {
        init_delay: Some(Duration::ZERO),
        ..EmuConfig::default()
    };
    let mut p = UdPair::new(cfg, MEM, 7, LOG_SQ, LOG_RQ);
    let local = p.a.alloc(REGION, 4096);
    let lkey = p.a.create_mkey(false, true);
    let pattern: Vec<u8> = (0..REGION).map(|i| (i * 7 + 3) as u8).collect();
    p.a.write(local, &pattern);
    let recv_lkey = p.b.create_mkey(false, true);
    let bufs = p.b.alloc(2 * u64::from(RECV_BYTES) << LOG_RQ, 4096);
    for i in 0..1u64 << LOG_RQ {
        let at = bufs + 2 * i * u64::from(RECV_BYTES);
        p.b.post_ud_recv(&mut p.ud_b, at, RECV_BYTES, recv_lkey);
        p.b.post_ud_recv(
            &mut p.gsi_b,
            at + u64::from(RECV_BYTES),
            RECV_BYTES,
            recv_lkey,
        );
    }
    let mut writable_a = vec![
        (p.cq_a.buf, 64 << p.cq_a.log),
        (p.cq_a.dbr, 8),
        (p.ud_a.sq.buf, 64 << LOG_SQ),
        (p.ud_a.sq.dbr, 8),
        (p.gsi_a.sq.buf, 64 << LOG_SQ),
        (p.gsi_a.sq.dbr, 8),
        (p.a.eq_buf, 64 << p.a.eq_log),
    ];
    writable_a.extend(p.a.pages.iter().map(|&pg| (pg, 4096)));
    let mut writable_b = vec![
        (bufs, 2 * u64::from(RECV_BYTES) << LOG_RQ),
        (p.cq_b.buf, 64 << p.cq_b.log),
        (p.cq_b.dbr, 8),
        (p.b.eq_buf, 64 << p.b.eq_log),
    ];
    writable_b.extend(p.b.pages.iter().map(|&pg| (pg, 4096)));
    Setup {
        p,
        gsi,
        local,
        lkey,
        writable_a,
        writable_b,
    }
}

fn av(u: &mut Unstructured, s: &Setup) -> ArbResult<UdAv> {
    let dest = match u.int_in_range(0..=3u8)? {
        0 => s.p.ud_b.qpn,
        1 => 1,
        _ => u.arbitrary()?,
    };
    let q_key = match u.int_in_range(0..=4u8)? {
        0 => QKEY_FROM_QP,
        1 => UD_QKEY,
        2 => QP1_QKEY,
        _ => u.arbitrary()?,
    };
    let mut av = UdAv::to(GID_B, MAC_B, dest, q_key);
    if u.ratio(1, 8)? {
        av.sgid_index = u.arbitrary()?;
    }
    if u.ratio(1, 8)? {
        av.dgid = u.arbitrary()?;
    }
    if u.ratio(1, 8)? {
        av.rmac = u.arbitrary()?;
    }
    av.udp_sport = u.arbitrary()?;
    av.hop_limit = u.arbitrary()?;
    av.tclass = u.arbitrary()?;
    av.flow_label = u.arbitrary::<u32>()? & 0xf_ffff;
    Ok(av)
}

fn data_seg(u: &mut Unstructured, s: &Setup) -> ArbResult<(u64, u32, u32)> {
    let addr = match u.int_in_range(0..=3u8)? {
        0..=2 => s.local + u64::from(u.int_in_range(0..=REGION as u32)?),
        _ => u.arbitrary()?,
    };
    let lkey = match u.int_in_range(0..=4u8)? {
        0..=2 => s.lkey,
        3 => INVALID_LKEY,
        _ => u.arbitrary()?,
    };
    let bytes = match u.int_in_range(0..=3u8)? {
        0 => u.int_in_range(0..=64u32)?,
        1 => u.int_in_range(0..=1100u32)?,
        2 => u.int_in_range(0..=REGION as u32 + 16)?,
        _ => u.arbitrary()?,
    };
    Ok((addr, lkey, bytes))
}

/// One WQE (whole WQEBBs) for `index`.
fn wqe(u: &mut Unstructured, s: &Setup, index: u16) -> ArbResult<Vec<u8>> {
    let sq = &qp(s).sq;
    if u.ratio(1, 16)? {
        return Ok(u.bytes(64)?.to_vec());
    }
    let op = match u.int_in_range(0..=9u8)? {
        0..=5 => opcode::SEND,
        6..=7 => opcode::SEND_IMM,
        8 => opcode::RDMA_WRITE,
        _ => u.arbitrary()?,
    };
    let segments = u.int_in_range(0..=3u8)?;
    let mut locals = Vec::new();
    for _ in 0..segments {
        locals.push(data_seg(u, s)?);
    }
    let a = av(u, s)?;
    let mut w = ud_wqe(sq, op, u.arbitrary()?, &a, &locals);
    if u.ratio(1, 4)? {
        // An inline segment in place of the last WQEBB's data.
        let len = u.int_in_range(0..=40usize)?;
        let claimed = if u.ratio(3, 4)? {
            len as u32
        } else {
            u.arbitrary::<u32>()? & !INLINE_SEG
        };
        let at = w.len();
        w.extend_from_slice(&(INLINE_SEG | claimed).to_be_bytes());
        w.extend((0..len).map(|i| i as u8));
        w.resize((at + 4 + len).next_multiple_of(64), 0);
        let ds = (at + 4 + len).div_ceil(16) as u8;
        CtrlSeg::new(&mut w[..16]).expect("layout").set_ds(ds);
    }
    let mut ctrl = CtrlSeg::new(&mut w[..16]).expect("layout");
    if u.ratio(1, 8)? {
        ctrl.set_ds(u.arbitrary()?);
    }
    if u.ratio(1, 16)? {
        ctrl.set_wqe_index(u.arbitrary()?);
    } else {
        ctrl.set_wqe_index(index);
    }
    if u.ratio(1, 16)? {
        ctrl.set_qpn_or_sqn(u.int_in_range(0..=0xff_ffffu32)?);
    }
    ctrl.set_ce(if u.ratio(3, 4)? {
        2
    } else {
        u.int_in_range(0..=3u8)?
    });
    Ok(w)
}

/// Ends in RTS (or fails the run if it cannot).
fn recover(s: &mut Setup) {
    let qpn = qp(s).qpn;
    let mut input = Host::input(Opcode::QueryQp, 0, 16);
    Qp2errIn::new(&mut input[..]).expect("layout").set_qpn(qpn);
    let out = s.p.a.exec(&input, 0x1d0).expect("QUERY_QP");
    let st = Qpc::new(&out[0x18..]).expect("layout").state();
    match st {
        state::RTS => {}
        state::SQER => s.p.a.modify_qp(Opcode::Sqerr2rtsQp, qpn, |_| {}),
        other => panic!("the QP ended in state {other}"),
    }
}

fn ring(s: &Setup, pi: u16, first8: [u8; 8]) {
    let h = &s.p.a;
    h.write_be32(qp(s).sq.dbr + 4, u32::from(pi));
    let reg = h.uar_base() + UAR_BF_OFFSET as u64;
    let _ = h.dev.mmio_write(reg, &first8);
}

/// Checks A's CQEs: in order, well formed, only flushes after an error. Returns how many.
fn check_a(s: &mut Setup, last: &mut Option<u16>, failed: &mut bool) -> Vec<Vec<u8>> {
    let mut all = Vec::new();
    let qpn = qp(s).qpn;
    while let Some(cqe) = s.p.a.poll_cq(&mut s.p.cq_a) {
        let view = Cqe64::new(&cqe[..]).expect("layout");
        assert_eq!(view.qpn(), qpn, "requester CQE's QP: {cqe:02x?}");
        let index = view.wqe_counter();
        if let Some(l) = *last {
            assert!(index > l, "completions in posting order: {index} after {l}");
        }
        *last = Some(index);
        let op = view.opcode();
        if op == CqeOpcode::Req as u8 {
            assert!(!*failed, "a success after an error: {cqe:02x?}");
        } else {
            assert_eq!(op, CqeOpcode::ReqErr as u8, "{cqe:02x?}");
            let syndrome = ErrCqe::new(&cqe[..]).expect("layout").syndrome();
            assert!(CqeSyndrome::try_from(syndrome).is_ok(), "{cqe:02x?}");
            if syndrome != CqeSyndrome::WrFlushed as u8 {
                assert!(!*failed, "a second error: {cqe:02x?}");
            }
            *failed = true;
        }
        all.push(cqe);
    }
    all
}

fn check_b(s: &mut Setup) {
    while let Some(cqe) = s.p.b.poll_cq(&mut s.p.cq_b) {
        let view = Cqe64::new(&cqe[..]).expect("layout");
        let op = view.opcode();
        if op == CqeOpcode::RespSend as u8 || op == CqeOpcode::RespSendImm as u8 {
            assert!(view.byte_cnt() <= RECV_BYTES, "byte count: {cqe:02x?}");
        } else {
            assert_eq!(op, CqeOpcode::RespErr as u8, "{cqe:02x?}");
        }
    }
}

fn run(data: &[u8]) -> ArbResult<()> {
    let mut u = Unstructured::new(data);
    let mut s = setup(u.arbitrary()?);
    let before_a = s.p.a.read(IOVA_BASE, MEM);
    let before_b = s.p.b.read(IOVA_BASE, MEM);
    let (buf, log) = (qp(&s).sq.buf, qp(&s).sq.log);
    let mut written = 0u16;
    let mut firsts = Vec::new();
    while written < RING_BBS - 2 && !u.is_empty() {
        let w = wqe(&mut u, &s, written)?;
        firsts.push(<[u8; 8]>::try_from(&w[..8]).expect("eight bytes"));
        for bb in w.chunks(64) {
            if written == RING_BBS - 2 {
                break;
            }
            let slot = u64::from(written) & ((1 << log) - 1);
            s.p.a.write(buf + slot * 64, bb);
            written += 1;
        }
    }
    let pi = match u.int_in_range(0..=7u8)? {
        0..=5 => written,
        6 => u.int_in_range(0..=written)?,
        _ => u.arbitrary()?,
    };
    let first8 = firsts.last().copied().unwrap_or_default();
    ring(&s, pi, first8);
    // A doorbell naming another QP (or none) ran nothing: ring the QP's own as well.
    let own = {
        let q = qp(&s);
        let mut b = [0u8; 8];
        b[4..8].copy_from_slice(&((q.qpn << 8) | 4).to_be_bytes());
        b
    };
    ring(&s, pi, own);
    s.p.settle();
    let (mut last, mut failed) = (None, false);
    check_a(&mut s, &mut last, &mut failed);
    check_b(&mut s);
    // A doorbell the device refused (a producer index past the ring) ran nothing: set the
    // record back to what was written, and let that run.
    let accepted = u32::from(pi) <= u32::from(RING_BBS);
    let pi = if accepted { pi } else { 0 };
    if !accepted {
        assert!(last.is_none(), "a refused doorbell completed WQEs");
        ring(&s, 0, own);
    }
    // The sender's memory is checked before the harness issues commands (their mailboxes
    // are host memory too).
    let after_a = s.p.a.read(IOVA_BASE, MEM);
    check_unchanged(&before_a, &after_a, &s.writable_a, "sender");
    recover(&mut s);
    // A valid signalled datagram to the peer's UD QP (or QP 1) after everything.
    let dest = if s.gsi { 1 } else { s.p.ud_b.qpn };
    let good = UdAv::to(GID_B, MAC_B, dest, QKEY_FROM_QP);
    let q = qp(&s);
    let sq = Sq {
        sqn: q.sq.sqn,
        buf: q.sq.buf,
        dbr: q.sq.dbr,
        log: q.sq.log,
        pi,
        bf_toggle: false,
    };
    let sentinel = ud_wqe(&sq, opcode::SEND, 0, &good, &[(s.local, s.lkey, 64)]);
    for (i, bb) in sentinel.chunks(64).enumerate() {
        let slot = u64::from(pi.wrapping_add(i as u16)) & ((1 << log) - 1);
        s.p.a.write(buf + slot * 64, bb);
    }
    ring(
        &s,
        pi.wrapping_add(2),
        <[u8; 8]>::try_from(&sentinel[..8]).expect("eight bytes"),
    );
    s.p.settle();
    // Only the sentinel's completion can come now: the failures before were flushed.
    let mut last_now = None;
    let mut failed_now = false;
    let cqes = check_a(&mut s, &mut last_now, &mut failed_now);
    let done = cqes.last().expect("the sentinel completes");
    let view = Cqe64::new(&done[..]).expect("layout");
    assert_eq!(
        view.opcode(),
        CqeOpcode::Req as u8,
        "the sentinel succeeds: {done:02x?}"
    );
    assert_eq!(view.wqe_counter(), pi);
    check_b(&mut s);
    let after_b = s.p.b.read(IOVA_BASE, MEM);
    check_unchanged(&before_b, &after_b, &s.writable_b, "peer");
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(data);
});
