//! A hostile driver's RC send queue: WQEs of the RC opcodes (and others) with control,
//! remote address, atomic, data and inline segments built from the input (keys, addresses,
//! lengths, `ds`, indexes right or wrong), or raw WQEBBs, under an arbitrary producer index,
//! on a QP connected to a good peer on the pair wire.
//!
//! Invariants: no panic; every WQE accounted: completions come in posting order, one at most
//! per WQE, and once one fails every later one is flushed, so a valid signalled SEND posted
//! after the fuzzed ones completes last (successfully, or flushed when the QP went to error);
//! the peer's memory changes only inside its remote-writable window and its receive buffers,
//! the requester's only inside its local key's region; every CQE on either side is well formed.

#![no_main]

mod rc_common;

use cxdirect_emu::testkit::rc::{rc_wqe, RcPath, RemoteRights, GID_A, MAC_A};
use cxdirect_emu::testkit::rc_pair::RcPair;
use cxdirect_emu::testkit::IOVA_BASE;
use cxdirect_emu::EmuConfig;
use cxdirect_hw::cqe::{Cqe64, CqeOpcode, CqeSyndrome, ErrCqe};
use cxdirect_hw::doorbell::UAR_BF_OFFSET;
use cxdirect_hw::wqe::{opcode, CtrlSeg, INLINE_SEG, INVALID_LKEY};
use libfuzzer_sys::arbitrary::{Result as ArbResult, Unstructured};
use libfuzzer_sys::fuzz_target;
use rc_common::{check_unchanged, Windows};
use std::collections::HashSet;
use std::time::{Duration, Instant};

const MEM: usize = 2 << 20;
const LOG_SQ: u8 = 4;
const RING_BBS: u16 = 1 << LOG_SQ;
/// Receive WQEs the peer posts: more than the send ring can hold messages.
const LOG_RQ: u8 = 5;
const RECV_BYTES: u32 = 4096;
/// The requester's local region (its only local key covers it) and the peer's windows.
const REGION: u64 = 16 << 10;
const WINDOW: u64 = 8192;
/// How long the harness waits for the QP to finish what was posted (only a WQE the peer
/// drops waits for the ACK timeout: about 1 ms, two retries).
const PATIENCE: Duration = Duration::from_secs(2);

struct Setup {
    p: RcPair,
    /// The requester's local region and its key.
    local: u64,
    lkey: u32,
    /// The peer's window with every remote right, its read-only window, and a window whose
    /// key is in another PD.
    windows: Windows,
    writable_a: Vec<(u64, u64)>,
    writable_b: Vec<(u64, u64)>,
}

fn setup(send_psn: u32) -> Setup {
    let path = RcPath {
        send_psn,
        receive_psn: 0x42,
        retry_count: 2,
        rnr_retry: 2,
        ack_timeout: 8,
        ..RcPath::to(GID_A, MAC_A, 0)
    };
    let cfg = EmuConfig {
        init_delay: Some(Duration::ZERO),
        ..EmuConfig::default()
    };
    let mut p = RcPair::new(cfg, MEM, 7, LOG_SQ, LOG_RQ, path);
    let a = &mut p.a;
    let local = a.alloc(REGION, 4096);
    let pd_a = a.pd;
    let lkey = a.create_remote_mkey(pd_a, local, REGION, RemoteRights::default(), 0x11);
    let pattern: Vec<u8> = (0..REGION).map(|i| (i * 7 + 3) as u8).collect();
    a.write(local, &pattern);
    let b = &mut p.b;
    let windows = Windows::new(b, WINDOW, [0x22, 0x33, 0x44]);
    for at in [windows.window, windows.read_only, windows.foreign] {
        b.write(at, &pattern[..WINDOW as usize]);
    }
    let recv_lkey = b.create_mkey(false, true);
    let recv_bufs = b.alloc(u64::from(RECV_BYTES) << LOG_RQ, 4096);
    for i in 0..1u64 << LOG_RQ {
        let buf = recv_bufs + i * u64::from(RECV_BYTES);
        b.post_rc_recv(&mut p.qp_b, buf, RECV_BYTES, recv_lkey);
    }
    let mut writable_a = vec![
        (local, REGION),
        (p.cq_a.buf, 64 << p.cq_a.log),
        (p.cq_a.dbr, 8),
        // Written by the harness: the sentinel WQE and the doorbell record.
        (p.qp_a.sq.buf, 64 << LOG_SQ),
        (p.qp_a.sq.dbr, 8),
        (p.a.eq_buf, 64 << p.a.eq_log),
    ];
    writable_a.extend(p.a.pages.iter().map(|&pg| (pg, 4096)));
    let mut writable_b = vec![
        (windows.window, WINDOW),
        (recv_bufs, u64::from(RECV_BYTES) << LOG_RQ),
        (p.cq_b.buf, 64 << p.cq_b.log),
        (p.cq_b.dbr, 8),
        (p.b.eq_buf, 64 << p.b.eq_log),
    ];
    writable_b.extend(p.b.pages.iter().map(|&pg| (pg, 4096)));
    Setup {
        p,
        local,
        lkey,
        windows,
        writable_a,
        writable_b,
    }
}

fn remote(u: &mut Unstructured, s: &Setup) -> ArbResult<(u64, u32)> {
    let offset = u64::from(u.int_in_range(0..=WINDOW as u32 + 64)?);
    let addr = match u.int_in_range(0..=5u8)? {
        0 | 1 => s.windows.window + offset,
        2 => s
            .windows
            .window
            .wrapping_sub(u64::from(u.int_in_range(1..=64u8)?)),
        3 => s.windows.read_only + offset,
        4 => s.windows.foreign + offset,
        _ => u.arbitrary()?,
    };
    let key = s.windows.pick_key(u)?;
    Ok((addr, key))
}

/// One data segment: address, lkey, byte count.
fn data_seg(u: &mut Unstructured, s: &Setup) -> ArbResult<(u64, u32, u32)> {
    let addr = match u.int_in_range(0..=4u8)? {
        0..=2 => s.local + u64::from(u.int_in_range(0..=REGION as u32)?),
        3 => s.local.wrapping_sub(u64::from(u.int_in_range(1..=64u8)?)),
        _ => u.arbitrary()?,
    };
    let lkey = match u.int_in_range(0..=5u8)? {
        0..=2 => s.lkey,
        3 => INVALID_LKEY,
        4 => s.lkey ^ u32::from(u.int_in_range(1..=255u8)?),
        _ => u.arbitrary()?,
    };
    let bytes = match u.int_in_range(0..=4u8)? {
        0 => 8,
        1 => u.int_in_range(0..=64u32)?,
        2 => u.int_in_range(0..=5000u32)?,
        3 => u.int_in_range(0..=REGION as u32 + 16)?,
        _ => u.arbitrary()?,
    };
    Ok((addr, lkey, bytes))
}

/// One WQE (a whole number of WQEBBs) for index `index` of QP `qpn`.
fn wqe(u: &mut Unstructured, s: &Setup, qpn: u32, index: u16) -> ArbResult<Vec<u8>> {
    if u.ratio(1, 16)? {
        return Ok(u.bytes(64)?.to_vec());
    }
    const OPCODES: [u8; 10] = [
        opcode::SEND,
        opcode::SEND_IMM,
        opcode::RDMA_WRITE,
        opcode::RDMA_WRITE_IMM,
        opcode::RDMA_READ,
        opcode::ATOMIC_CS,
        opcode::ATOMIC_FA,
        opcode::NOP,
        opcode::SEND_INVAL,
        opcode::LSO,
    ];
    let op = if u.ratio(1, 16)? {
        u.arbitrary()?
    } else {
        *u.choose(&OPCODES)?
    };
    let mut body = Vec::with_capacity(256);
    let with_raddr = matches!(
        op,
        opcode::RDMA_WRITE
            | opcode::RDMA_WRITE_IMM
            | opcode::RDMA_READ
            | opcode::ATOMIC_CS
            | opcode::ATOMIC_FA
    );
    if with_raddr != u.ratio(1, 32)? {
        let (addr, key) = remote(u, s)?;
        body.extend_from_slice(&addr.to_be_bytes());
        body.extend_from_slice(&key.to_be_bytes());
        body.extend_from_slice(&[0; 4]);
    }
    if matches!(op, opcode::ATOMIC_CS | opcode::ATOMIC_FA) != u.ratio(1, 32)? {
        body.extend_from_slice(&u.arbitrary::<u64>()?.to_be_bytes());
        body.extend_from_slice(&u.arbitrary::<u64>()?.to_be_bytes());
    }
    let segments = u.int_in_range(0..=4u8)?;
    for _ in 0..segments {
        if u.ratio(1, 4)? {
            let len = match u.int_in_range(0..=2u8)? {
                0 => u.int_in_range(0..=12usize)?,
                1 => u.int_in_range(0..=100usize)?,
                _ => usize::from(u.arbitrary::<u16>()?) & 0x3ff,
            };
            let claimed = if u.ratio(7, 8)? {
                len as u32
            } else {
                u.arbitrary::<u32>()? & !INLINE_SEG
            };
            body.extend_from_slice(&(INLINE_SEG | claimed).to_be_bytes());
            let seed: u8 = u.arbitrary()?;
            body.extend((0..len).map(|i| seed ^ i as u8));
            while body.len() % 16 != 0 {
                body.push(0);
            }
        } else {
            let (addr, lkey, bytes) = data_seg(u, s)?;
            body.extend_from_slice(&bytes.to_be_bytes());
            body.extend_from_slice(&lkey.to_be_bytes());
            body.extend_from_slice(&addr.to_be_bytes());
        }
    }
    let natural_ds = 1 + body.len() / 16;
    let ds = if u.ratio(7, 8)? {
        natural_ds.min(255) as u8
    } else {
        u.arbitrary()?
    };
    let mut w = vec![0u8; (16 + body.len()).next_multiple_of(64)];
    w[16..16 + body.len()].copy_from_slice(&body);
    let ce = if u.ratio(3, 4)? { 2 } else { u.int_in_range(0..=3u8)? };
    let wqe_index = if u.ratio(15, 16)? { index } else { u.arbitrary()? };
    let wqe_qpn = if u.ratio(15, 16)? {
        qpn
    } else {
        u.int_in_range(0..=0xff_ffffu32)?
    };
    CtrlSeg::new(&mut w[..16])
        .expect("layout")
        .set_opcode(op)
        .set_opmod(if u.ratio(15, 16)? { 0 } else { u.arbitrary()? })
        .set_wqe_index(wqe_index)
        .set_qpn_or_sqn(wqe_qpn)
        .set_ds(ds)
        .set_fm(u.int_in_range(0..=7u8)?)
        .set_ce(ce)
        .set_se(u.arbitrary()?)
        .set_imm(u.arbitrary()?);
    Ok(w)
}

/// The wire and both functions until `done` holds or `PATIENCE` runs out (timers run).
fn settle_until(s: &mut Setup, mut done: impl FnMut(&mut Setup) -> bool) -> bool {
    let start = Instant::now();
    loop {
        s.p.settle();
        if done(s) {
            return true;
        }
        if start.elapsed() > PATIENCE {
            return false;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// What the requester's CQ showed so far.
#[derive(Default)]
struct Requester {
    /// The index of the last WQE completed.
    last: Option<u16>,
    /// An error CQE was seen (the QP is in error): no success follows.
    failed: bool,
    /// The error that moved the QP to error was seen: only flushes follow.
    errored: bool,
    /// The sentinel SEND's completion, when seen: (in error).
    sentinel: Option<bool>,
}

fn check_requester(s: &mut Setup, r: &mut Requester, sentinel: Option<u16>) {
    while let Some(cqe) = s.p.a.poll_cq(&mut s.p.cq_a) {
        assert!(r.sentinel.is_none(), "a CQE after the sentinel's: {cqe:02x?}");
        let view = Cqe64::new(&cqe[..]).expect("layout");
        assert_eq!(view.qpn(), s.p.qp_a.qpn, "requester CQE's QP: {cqe:02x?}");
        let op = view.opcode();
        let index = view.wqe_counter();
        if let Some(last) = r.last {
            assert!(index > last, "completions in posting order: {index} after {last}");
        }
        r.last = Some(index);
        if op == CqeOpcode::Req as u8 {
            assert!(!r.failed, "a success after the QP failed: {cqe:02x?}");
        } else if op == CqeOpcode::ReqErr as u8 {
            let syndrome = ErrCqe::new(&cqe[..]).expect("layout").syndrome();
            assert!(
                CqeSyndrome::try_from(syndrome).is_ok(),
                "syndrome {syndrome:#x}: {cqe:02x?}"
            );
            // WQEs ahead of the failing one may be flushed before its error; after the
            // error itself, only flushes.
            if syndrome != CqeSyndrome::WrFlushed as u8 {
                assert!(!r.errored, "a second error after the QP failed: {cqe:02x?}");
                r.errored = true;
            }
            r.failed = true;
        } else {
            panic!("requester CQE opcode {op:#x}: {cqe:02x?}");
        }
        if Some(index) == sentinel {
            r.sentinel = Some(op == CqeOpcode::ReqErr as u8);
        }
    }
}

fn check_responder(s: &mut Setup, seen: &mut HashSet<u16>) {
    while let Some(cqe) = s.p.b.poll_cq(&mut s.p.cq_b) {
        let view = Cqe64::new(&cqe[..]).expect("layout");
        assert_eq!(view.qpn(), s.p.qp_b.qpn, "responder CQE's QP: {cqe:02x?}");
        let op = view.opcode();
        let index = view.wqe_counter();
        assert!(index < 1 << LOG_RQ, "receive WQE {index}: {cqe:02x?}");
        assert!(seen.insert(index), "receive WQE {index} twice: {cqe:02x?}");
        if op == CqeOpcode::RespSend as u8 || op == CqeOpcode::RespSendImm as u8 {
            assert!(view.byte_cnt() <= RECV_BYTES, "byte count: {cqe:02x?}");
        } else if op == CqeOpcode::RespErr as u8 {
            let syndrome = ErrCqe::new(&cqe[..]).expect("layout").syndrome();
            assert!(CqeSyndrome::try_from(syndrome).is_ok(), "{cqe:02x?}");
        } else {
            assert_eq!(op, CqeOpcode::RespWrImm as u8, "responder CQE: {cqe:02x?}");
        }
    }
}

fn ring(s: &Setup, pi: u16, first8: [u8; 8]) {
    let h = &s.p.a;
    h.write_be32(s.p.qp_a.sq.dbr + 4, u32::from(pi));
    let reg = h.uar_base() + UAR_BF_OFFSET as u64;
    let _ = h.dev.mmio_write(reg, &first8);
}

fn run(data: &[u8]) -> ArbResult<()> {
    let mut u = Unstructured::new(data);
    let send_psn = if u.arbitrary::<bool>()? { 0xff_fffa } else { 0x10 };
    let mut s = setup(send_psn);
    let before_a = s.p.a.read(IOVA_BASE, MEM);
    let before_b = s.p.b.read(IOVA_BASE, MEM);
    let qpn = s.p.qp_a.qpn;
    let sq = (s.p.qp_a.sq.buf, s.p.qp_a.sq.log);
    // WQEs back to back from index 0, leaving the ring's last WQEBB for the sentinel.
    let mut written = 0u16;
    let mut firsts = Vec::new();
    while written < RING_BBS - 1 && !u.is_empty() {
        let w = wqe(&mut u, &s, qpn, written)?;
        firsts.push(<[u8; 8]>::try_from(&w[..8]).expect("eight bytes"));
        for bb in w.chunks(64) {
            if written == RING_BBS - 1 {
                break;
            }
            let slot = u64::from(written) & ((1 << sq.1) - 1);
            s.p.a.write(sq.0 + slot * 64, bb);
            written += 1;
        }
    }
    let pi = match u.int_in_range(0..=7u8)? {
        0..=5 => written,
        6 => u.int_in_range(0..=written)?,
        _ => u.arbitrary()?,
    };
    let first8 = match u.int_in_range(0..=3u8)? {
        0 | 1 => firsts.last().copied().unwrap_or_default(),
        2 => firsts.first().copied().unwrap_or_default(),
        _ => u.arbitrary()?,
    };
    ring(&s, pi, first8);
    // The requester runs what the doorbell announced; wait until nothing is left in flight.
    let mut r = Requester::default();
    let mut seen = HashSet::new();
    let accepted = u32::from(pi) <= u32::from(RING_BBS);
    // Where the sentinel goes: after what was accepted, or at 0 when the doorbell could not be.
    let sentinel_at = if accepted { pi } else { 0 };
    let mut sentinel = rc_wqe(
        &s.p.qp_a.sq,
        opcode::SEND,
        0,
        None,
        None,
        (s.local, s.lkey, 64),
    );
    CtrlSeg::new(&mut sentinel[..16])
        .expect("layout")
        .set_wqe_index(sentinel_at);
    // A doorbell naming another QP (or none) ran nothing: ring the QP's own as well, so
    // that the fuzzed WQEs run up to the fuzzed producer index before the sentinel is
    // posted (a WQE whose size runs past the producer index ends there).
    let own = <[u8; 8]>::try_from(&sentinel[..8]).expect("eight bytes");
    ring(&s, pi, own);
    // Whatever the doorbells started runs now; the sentinel below waits for the rest.
    s.p.settle();
    check_requester(&mut s, &mut r, None);
    check_responder(&mut s, &mut seen);
    if !accepted {
        assert!(r.last.is_none(), "a refused doorbell completed WQE {:?}", r.last);
    }
    // The sentinel: a valid signalled SEND after everything posted. It completes last, in
    // error exactly when the QP failed.
    let slot = u64::from(sentinel_at) & ((1 << sq.1) - 1);
    s.p.a.write(sq.0 + slot * 64, &sentinel);
    let first8 = <[u8; 8]>::try_from(&sentinel[..8]).expect("eight bytes");
    ring(&s, sentinel_at.wrapping_add(1), first8);
    let done = settle_until(&mut s, |s| {
        check_requester(s, &mut r, Some(sentinel_at));
        check_responder(s, &mut seen);
        r.sentinel.is_some()
    });
    assert!(
        done,
        "the sentinel SEND at {sentinel_at} never completed (last CQE {:?}, failed {}, pi {pi})",
        r.last, r.failed
    );
    assert_eq!(r.sentinel, Some(r.failed), "the sentinel fails exactly when the QP did");
    s.p.settle();
    check_requester(&mut s, &mut r, Some(sentinel_at));
    check_responder(&mut s, &mut seen);
    let after_a = s.p.a.read(IOVA_BASE, MEM);
    check_unchanged(&before_a, &after_a, &s.writable_a, "requester");
    let after_b = s.p.b.read(IOVA_BASE, MEM);
    check_unchanged(&before_b, &after_b, &s.writable_b, "peer");
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(data);
});
