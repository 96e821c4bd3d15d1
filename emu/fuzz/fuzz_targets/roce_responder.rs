//! A hostile RoCE peer: frames delivered to a function with two RC QPs in RTS (one with its
//! own receive ring, one on an SRQ), receive WQEs posted, memory keys with remote access, and
//! a SEND, an RDMA READ and an atomic outstanding at the first QP's requester. Frames are
//! arbitrary bytes, arbitrary transport bytes behind valid Ethernet/IP/UDP headers, or
//! structured: BTH/RETH/AETH/AtomicETH/ImmDt built from the input with PSNs near the expected
//! ones, QPNs of the real QPs, valid and invalid rkeys and addresses, correct or wrong ICRC and
//! pad, and a byte damaged here and there.
//!
//! Invariants: no panic; no byte of host memory changes outside what the device may write
//! (the remote-writable window, the receive buffers, the requester's local READ and atomic
//! targets, the CQ and EQ rings and the firmware pages); every CQE is well formed (a known
//! opcode, one of the QPs, a posted WQE completed at most once, a byte count that fits); and
//! afterwards the function still takes a valid SEND on a new QP, acknowledges it and
//! completes it.

#![no_main]

mod rc_common;

use cxdirect_emu::testkit::rc::{lone_host, take_frames, RcPath, GID_A, GID_B, MAC_A, MAC_B};
use cxdirect_emu::testkit::{Cq, Host, IOVA_BASE};
use cxdirect_emu::wire::{PortId, Wire};
use cxdirect_emu::EmuConfig;
use cxdirect_hw::cqe::{Cqe64, CqeOpcode, CqeSyndrome, ErrCqe};
use cxdirect_hw::wqe::opcode;
use libfuzzer_sys::arbitrary::{Result as ArbResult, Unstructured};
use libfuzzer_sys::fuzz_target;
use rc_common::{check_unchanged, Windows};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

const MEM: usize = 2 << 20;
const MTU: usize = 1024;
/// The first QP's requester starts at this PSN.
const SEND_PSN: u32 = 0x100;
/// Remote QPNs of the two fuzzed QPs' paths.
const REMOTE_QPNS: [u32; 2] = [0x4abc, 0x4abd];
/// Receive WQEs posted on the QP's own ring and on the SRQ.
const RECEIVES: u16 = 6;
const RECV_BYTES: u32 = 2048;
/// Bytes of the remote-writable window, of the read-only window and of the window whose key
/// is in another PD.
const WINDOW: u64 = 8192;
/// Frames at most per input.
const FRAMES: usize = 48;

/// BTH opcodes (IBA 9.2).
mod bth {
    pub const SEND_ONLY: u8 = 0x04;
    pub const WRITE_FIRST: u8 = 0x06;
    pub const READ_REQUEST: u8 = 0x0c;
    pub const READ_RESPONSE_FIRST: u8 = 0x0d;
    pub const READ_RESPONSE_MIDDLE: u8 = 0x0e;
    pub const ACKNOWLEDGE: u8 = 0x11;
    pub const ATOMIC_ACKNOWLEDGE: u8 = 0x12;
    pub const COMPARE_SWAP: u8 = 0x13;
    pub const FETCH_ADD: u8 = 0x14;
}

/// What the function under test holds, as the harness knows it.
struct Setup {
    host: Host,
    wire: Arc<Wire>,
    cq: Cq,
    qpns: [u32; 2],
    /// The QPs' user indexes, which every CQE of theirs carries.
    user_indexes: [u32; 2],
    /// The remote-writable window, the read-only one and the one in another PD.
    windows: Windows,
    /// Regions the device may write.
    writable: Vec<(u64, u64)>,
}

fn setup(receive_psn: u32) -> Setup {
    let cfg = EmuConfig {
        mac: MAC_A,
        init_delay: Some(Duration::ZERO),
        ..EmuConfig::default()
    };
    let (mut h, wire) = lone_host(cfg, MEM, GID_A, MAC_A);
    let cq = h.create_cq(7);
    let (rmpn, mut srq) = h.create_rmp(3, 2);
    let first_user_index = h.next_user_index;
    let mut qp0 = h.create_rc_qp(&cq, 4, 3, None);
    let qp1 = h.create_rc_qp(&cq, 4, 3, Some(rmpn));
    for (qp, remote) in [(qp0.qpn, REMOTE_QPNS[0]), (qp1.qpn, REMOTE_QPNS[1])] {
        let path = RcPath {
            send_psn: SEND_PSN,
            receive_psn,
            ..RcPath::to(GID_B, MAC_B, remote)
        };
        h.connect_rc(qp, &path);
    }
    let windows = Windows::new(&mut h, WINDOW, [0x5a, 0x6b, 0x7c]);
    let lkey = h.create_mkey(false, true);
    let recv_bufs = h.alloc(u64::from(RECV_BYTES) * 2 * u64::from(RECEIVES), 4096);
    for i in 0..RECEIVES {
        let own = recv_bufs + u64::from(i) * u64::from(RECV_BYTES);
        h.post_rc_recv(&mut qp0, own, RECV_BYTES, lkey);
        let shared = own + u64::from(RECEIVES) * u64::from(RECV_BYTES);
        h.post_recv(&mut srq, shared, RECV_BYTES, lkey);
    }
    // Outstanding at the first QP's requester, so ACKs and responses find work: a SEND, a
    // READ of three MTUs and a fetch-and-add, their frames left on the wire.
    let source = h.alloc(4096, 64);
    h.write(source, &[0x5e; 4096]);
    let read_target = h.alloc(4096, 64);
    let atomic_target = h.alloc(64, 64);
    let remote = (0x1000_0000, 0x1234);
    let wqes = [
        (opcode::SEND, None, None, (source, lkey, 100)),
        (opcode::RDMA_READ, Some(remote), None, (read_target, lkey, 3000)),
        (opcode::ATOMIC_FA, Some(remote), Some((1, 0)), (atomic_target, lkey, 8)),
    ];
    for (op, remote, atomic, local) in wqes {
        let w = cxdirect_emu::testkit::rc::rc_wqe(&qp0.sq, op, 0, remote, atomic, local);
        h.post(&mut qp0.sq, &w, false);
    }
    take_frames(&wire);
    let mut writable = vec![
        (windows.window, WINDOW),
        (recv_bufs, u64::from(RECV_BYTES) * 2 * u64::from(RECEIVES)),
        (read_target, 4096),
        (atomic_target, 8),
        (cq.buf, 64 << cq.log),
        // Written by the harness as it takes CQEs.
        (cq.dbr, 8),
        (h.eq_buf, 64 << h.eq_log),
    ];
    writable.extend(h.pages.iter().map(|&p| (p, 4096)));
    Setup {
        host: h,
        wire,
        cq,
        qpns: [qp0.qpn, qp1.qpn],
        user_indexes: [first_user_index, first_user_index + 1],
        windows,
        writable,
    }
}

/// The ICRC of RoCE v2 frame `frame` (untagged IPv4 or IPv6; its last four bytes are where
/// the ICRC goes), from the IBA rules: eight bytes of ones for the absent LRH, then the IP,
/// UDP and transport headers with their variant fields set to ones, then payload and pad.
fn icrc(frame: &[u8]) -> [u8; 4] {
    let v4 = frame.get(12..14) == Some(&[0x08, 0x00][..]);
    let l4 = if v4 { 34 } else { 54 };
    // Too short to carry a UDP header and an ICRC: nothing to compute.
    if frame.len() < l4 + 8 + 4 {
        return [0; 4];
    }
    let mut masked = vec![0xff; 8];
    let mut ip = frame[14..l4].to_vec();
    let variant: &[usize] = if v4 { &[1, 8, 10, 11] } else { &[1, 2, 3, 7] };
    if !v4 {
        ip[0] |= 0x0f;
    }
    for &i in variant {
        ip[i] = 0xff;
    }
    masked.extend_from_slice(&ip);
    let mut rest = frame[l4..frame.len() - 4].to_vec();
    for i in [6, 7, 12] {
        if let Some(b) = rest.get_mut(i) {
            *b = 0xff;
        }
    }
    masked.extend_from_slice(&rest);
    crc32fast::hash(&masked).to_le_bytes()
}

/// Ethernet, IPv4 or IPv6 and UDP to 4791 from the peer around `transport` (BTH onwards,
/// ICRC excluded), with room for the ICRC at the end (zero).
fn wrap(transport: &[u8], v6: bool) -> Vec<u8> {
    let udp_len = 8 + transport.len() + 4;
    let mut f = Vec::with_capacity(54 + udp_len);
    f.extend_from_slice(&MAC_A);
    f.extend_from_slice(&MAC_B);
    if v6 {
        f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
        f.extend_from_slice(&(udp_len as u16).to_be_bytes());
        f.extend_from_slice(&[17, 64]);
        f.extend_from_slice(&GID_B);
        f.extend_from_slice(&GID_A);
    } else {
        f.extend_from_slice(&[0x08, 0x00, 0x45, 0]);
        f.extend_from_slice(&((20 + udp_len) as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0]);
        f.extend_from_slice(&GID_B[12..]);
        f.extend_from_slice(&GID_A[12..]);
        let sum: u32 = f[14..34]
            .chunks(2)
            .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
            .sum();
        let folded = (sum & 0xffff) + (sum >> 16);
        let checksum = !((folded & 0xffff) + (folded >> 16)) as u16;
        f[24..26].copy_from_slice(&checksum.to_be_bytes());
    }
    f.extend_from_slice(&0xc123u16.to_be_bytes());
    f.extend_from_slice(&4791u16.to_be_bytes());
    f.extend_from_slice(&(udp_len as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(transport);
    f.extend_from_slice(&[0; 4]);
    f
}

/// Sets the frame's ICRC right.
fn seal(frame: &mut [u8]) {
    let n = frame.len();
    if n < 4 {
        return;
    }
    let sum = icrc(frame);
    frame[n - 4..].copy_from_slice(&sum);
}

/// What the harness believes each QP expects next, as a requester of it would.
struct Psns {
    /// Next request PSN each QP expects.
    next: [u32; 2],
}

/// An address in or around one of the windows, or anywhere.
fn address(u: &mut Unstructured, s: &Setup) -> ArbResult<u64> {
    let offset = u64::from(u.int_in_range(0..=WINDOW as u32 + 64)?);
    Ok(match u.int_in_range(0..=5u8)? {
        0 => s.windows.window + offset,
        1 => (s.windows.window + WINDOW).wrapping_sub(u64::from(u.int_in_range(0..=64u8)?)),
        2 => s
            .windows
            .window
            .wrapping_sub(u64::from(u.int_in_range(1..=64u8)?)),
        3 => s.windows.read_only + offset,
        4 => s.windows.foreign + offset,
        _ => u.arbitrary()?,
    })
}

fn rkey(u: &mut Unstructured, s: &Setup) -> ArbResult<u32> {
    s.windows.pick_key(u)
}

/// One structured transport packet (BTH onwards, ICRC excluded) from the input.
fn structured(u: &mut Unstructured, s: &Setup, psns: &mut Psns) -> ArbResult<(Vec<u8>, bool)> {
    const OPCODES: [u8; 22] = [
        0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e,
        0x0f, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15,
    ];
    let op = if u.ratio(1, 16)? {
        u.arbitrary()?
    } else {
        *u.choose(&OPCODES)?
    };
    let which = usize::from(u.int_in_range(0..=7u8)? >= 6);
    let qpn = if u.ratio(1, 16)? {
        u.int_in_range(0..=0xff_ffffu32)?
    } else {
        s.qpns[which]
    };
    let response = (bth::READ_RESPONSE_FIRST..=bth::ATOMIC_ACKNOWLEDGE).contains(&op);
    // Requests go near the PSN the responder expects; responses near the requester's.
    let expected = if response {
        SEND_PSN + u32::from(u.int_in_range(0..=5u8)?)
    } else {
        psns.next[which]
    };
    let delta: i32 = match u.int_in_range(0..=7u8)? {
        0..=4 => 0,
        5 | 6 => i32::from(u.int_in_range(-4..=4i8)?),
        _ => u.int_in_range(-(1 << 23)..=(1 << 23))?,
    };
    let psn = expected.wrapping_add_signed(delta) & 0xff_ffff;
    let ack_req = u.ratio(3, 4)?;
    let mut t = Vec::with_capacity(64 + MTU);
    t.push(op);
    let flags_at = t.len();
    t.push(0);
    t.extend_from_slice(&0xffffu16.to_be_bytes());
    t.extend_from_slice(&qpn.to_be_bytes());
    t[4] = if u.ratio(1, 16)? { u.arbitrary()? } else { 0 };
    t.extend_from_slice(&((u32::from(ack_req) << 31) | psn).to_be_bytes());
    let mut request_psns = 1;
    let payload_len = match u.int_in_range(0..=3u8)? {
        0 => 0,
        1 => u.int_in_range(1..=16usize)?,
        2 => MTU,
        _ => u.int_in_range(0..=MTU + 8)?,
    };
    let has_reth = (bth::WRITE_FIRST..=bth::READ_REQUEST).contains(&op)
        && !matches!(op, 0x07..=0x09)
        || u.ratio(1, 32)?;
    if has_reth {
        t.extend_from_slice(&address(u, s)?.to_be_bytes());
        t.extend_from_slice(&rkey(u, s)?.to_be_bytes());
        let len: u32 = match u.int_in_range(0..=3u8)? {
            0 | 1 => payload_len as u32,
            2 => u.int_in_range(0..=3 * MTU as u32)?,
            _ => u.arbitrary()?,
        };
        if op == bth::READ_REQUEST {
            request_psns = (len as usize).div_ceil(MTU).max(1) as u32;
        }
        t.extend_from_slice(&len.to_be_bytes());
    }
    if matches!(op, bth::COMPARE_SWAP | bth::FETCH_ADD) || u.ratio(1, 32)? {
        let va = if u.ratio(3, 4)? {
            s.windows.window + 8 * u64::from(u.int_in_range(0..=(WINDOW / 8) as u32)?)
        } else {
            address(u, s)?
        };
        t.extend_from_slice(&va.to_be_bytes());
        t.extend_from_slice(&rkey(u, s)?.to_be_bytes());
        t.extend_from_slice(&u.arbitrary::<u64>()?.to_be_bytes());
        t.extend_from_slice(&u.arbitrary::<u64>()?.to_be_bytes());
    }
    if response && op != bth::READ_RESPONSE_MIDDLE || u.ratio(1, 32)? {
        // AETH: an ACK, a NAK of some kind, an RNR NAK or anything.
        let syndrome: u8 = match u.int_in_range(0..=3u8)? {
            0 | 1 => 0x1f,
            2 => 0x60 | u.int_in_range(0..=3u8)?,
            _ => u.arbitrary()?,
        };
        let msn = u.int_in_range(0..=8u32)?;
        t.extend_from_slice(&((u32::from(syndrome) << 24) | msn).to_be_bytes());
    }
    if op == bth::ATOMIC_ACKNOWLEDGE {
        t.extend_from_slice(&u.arbitrary::<u64>()?.to_be_bytes());
    }
    if matches!(op, 0x03 | 0x05 | 0x09 | 0x0b) || u.ratio(1, 32)? {
        t.extend_from_slice(&u.arbitrary::<u32>()?.to_be_bytes());
    }
    let seed: u8 = u.arbitrary()?;
    t.extend((0..payload_len).map(|i| (i as u8).wrapping_mul(7) ^ seed));
    let natural_pad = (4 - payload_len % 4) % 4;
    let pad = if u.ratio(7, 8)? {
        natural_pad
    } else {
        usize::from(u.int_in_range(0..=3u8)?)
    };
    t.extend(std::iter::repeat_n(0, pad));
    t[flags_at] = ((pad as u8) << 4) | if u.ratio(1, 16)? { u.int_in_range(0..=15u8)? } else { 0 };
    if !response && qpn == s.qpns[which] && delta == 0 && op <= bth::FETCH_ADD {
        psns.next[which] = (psns.next[which] + request_psns) & 0xff_ffff;
    }
    Ok((t, u.ratio(1, 6)?))
}

/// The next frame of the input.
fn frame(u: &mut Unstructured, s: &Setup, psns: &mut Psns) -> ArbResult<Vec<u8>> {
    let mut f = match u.int_in_range(0..=15u8)? {
        // Anything at all.
        0 => {
            let len = u.int_in_range(0..=1600usize)?;
            u.bytes(len)?.to_vec()
        }
        // Any transport bytes behind valid headers, with a right ICRC.
        1 | 2 => {
            let len = u.int_in_range(0..=1100usize)?;
            let transport = u.bytes(len)?.to_vec();
            let mut f = wrap(&transport, u.ratio(1, 4)?);
            seal(&mut f);
            f
        }
        _ => {
            let (transport, v6) = structured(u, s, psns)?;
            let mut f = wrap(&transport, v6);
            seal(&mut f);
            f
        }
    };
    // Now and then a damaged byte, the ICRC made right again or not; or the frame cut short.
    if !f.is_empty() && u.ratio(1, 8)? {
        let at = u.choose_index(f.len())?;
        f[at] ^= u.int_in_range(1..=255u8)?;
        if u.ratio(1, 2)? {
            seal(&mut f);
        }
    }
    if !f.is_empty() && u.ratio(1, 32)? {
        let keep = u.choose_index(f.len())?;
        f.truncate(keep);
    }
    Ok(f)
}

/// What the CQ has shown so far, to catch a WQE completed twice.
#[derive(Default)]
struct Seen {
    requester: HashSet<u16>,
    receives: HashSet<(u32, u16)>,
}

/// Takes every CQE and checks it is one this setup can produce.
fn check_cqes(s: &mut Setup, seen: &mut Seen) {
    while let Some(cqe) = s.host.poll_cq(&mut s.cq) {
        let view = Cqe64::new(&cqe[..]).expect("layout");
        let op = view.opcode();
        let qpn = view.qpn();
        let index = view.wqe_counter();
        assert!(s.qpns.contains(&qpn), "CQE for QP {qpn:#x}: {cqe:02x?}");
        let receive_key = (qpn, index);
        match op {
            o if o == CqeOpcode::Req as u8 || o == CqeOpcode::ReqErr as u8 => {
                assert_eq!(qpn, s.qpns[0], "only the first QP sends: {cqe:02x?}");
                assert!(index < 3, "requester CQE for WQE {index}: {cqe:02x?}");
                assert!(
                    seen.requester.insert(index),
                    "WQE {index} completed twice: {cqe:02x?}"
                );
            }
            o if o == CqeOpcode::RespSend as u8
                || o == CqeOpcode::RespSendImm as u8
                || o == CqeOpcode::RespWrImm as u8
                || o == CqeOpcode::RespErr as u8 =>
            {
                assert!(index < RECEIVES, "receive CQE for WQE {index}: {cqe:02x?}");
                assert!(
                    seen.receives.insert(receive_key),
                    "receive WQE {index} of QP {qpn:#x} completed twice: {cqe:02x?}"
                );
                if o != CqeOpcode::RespErr as u8 {
                    let want = s.user_indexes[usize::from(qpn == s.qpns[1])];
                    assert_eq!(view.srqn(), want, "user index: {cqe:02x?}");
                }
                if o == CqeOpcode::RespSend as u8 || o == CqeOpcode::RespSendImm as u8 {
                    assert!(view.byte_cnt() <= RECV_BYTES, "byte count: {cqe:02x?}");
                }
            }
            _ => panic!("CQE opcode {op:#x}: {cqe:02x?}"),
        }
        if op == CqeOpcode::ReqErr as u8 || op == CqeOpcode::RespErr as u8 {
            let syndrome = ErrCqe::new(&cqe[..]).expect("layout").syndrome();
            assert!(
                CqeSyndrome::try_from(syndrome).is_ok(),
                "syndrome {syndrome:#x}: {cqe:02x?}"
            );
        }
    }
}

/// A valid SEND to a fresh QP with a fresh CQ: it must land, be acknowledged and complete.
fn still_serves_a_send(s: &mut Setup) {
    let h = &mut s.host;
    let mut cq = h.create_cq(4);
    let mut qp = h.create_rc_qp(&cq, 4, 3, None);
    let remote = 0x777;
    h.connect_rc(
        qp.qpn,
        &RcPath {
            receive_psn: 5,
            ..RcPath::to(GID_B, MAC_B, remote)
        },
    );
    let lkey = h.create_mkey(false, true);
    let buf = h.alloc(4096, 64);
    h.post_rc_recv(&mut qp, buf, 4096, lkey);
    let message: Vec<u8> = (0..777u32).map(|i| (i * 13) as u8).collect();
    let mut t = vec![bth::SEND_ONLY, 3 << 4, 0xff, 0xff];
    t.extend_from_slice(&qp.qpn.to_be_bytes());
    t.extend_from_slice(&(0x8000_0000u32 | 5).to_be_bytes());
    t.extend_from_slice(&message);
    t.extend_from_slice(&[0; 3]);
    let mut f = wrap(&t, false);
    seal(&mut f);
    take_frames(&s.wire);
    s.wire.transmit(PortId::B, &f).expect("transmit");
    h.dev.poll();
    let cqe = h.poll_cq(&mut cq).expect("the SEND completes");
    let view = Cqe64::new(&cqe[..]).expect("layout");
    assert_eq!(view.opcode(), CqeOpcode::RespSend as u8, "{cqe:02x?}");
    assert_eq!(view.qpn(), qp.qpn);
    assert_eq!(view.byte_cnt(), message.len() as u32);
    assert_eq!(h.read(buf, message.len()), message, "the SEND landed");
    // Other QPs may resend on their timers meanwhile: only frames to the new QP's peer count.
    let bth_at = 14 + 20 + 8;
    let acks: Vec<Vec<u8>> = take_frames(&s.wire)
        .into_iter()
        .filter(|f| {
            f.len() > bth_at + 12 && f[bth_at + 5..bth_at + 8] == remote.to_be_bytes()[1..]
        })
        .collect();
    assert_eq!(acks.len(), 1, "one acknowledgement");
    let ack = &acks[0];
    assert_eq!(ack[bth_at], bth::ACKNOWLEDGE);
    assert_eq!(&ack[bth_at + 5..bth_at + 8], &remote.to_be_bytes()[1..]);
    assert_eq!(&ack[bth_at + 9..bth_at + 12], &5u32.to_be_bytes()[1..]);
    assert_eq!(ack[bth_at + 12], 0x1f, "AETH: ACK");
}

fn run(data: &[u8]) -> ArbResult<()> {
    let mut u = Unstructured::new(data);
    let base = if u.arbitrary::<bool>()? { 0xff_fffc } else { 0 };
    let mut s = setup(base);
    let mut psns = Psns { next: [base; 2] };
    let before = s.host.read(IOVA_BASE, MEM);
    let mut seen = Seen::default();
    for _ in 0..FRAMES {
        if u.is_empty() {
            break;
        }
        let Ok(f) = frame(&mut u, &s, &mut psns) else {
            break;
        };
        // The wire refuses frames shorter than a header or longer than its maximum.
        let _ = s.wire.transmit(PortId::B, &f);
        s.host.dev.poll();
        take_frames(&s.wire);
        check_cqes(&mut s, &mut seen);
    }
    let after = s.host.read(IOVA_BASE, MEM);
    check_unchanged(&before, &after, &s.writable, "host");
    still_serves_a_send(&mut s);
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(data);
});
