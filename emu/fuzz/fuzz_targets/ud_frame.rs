//! A hostile RoCE peer against datagram QPs: frames delivered to a function with a UD QP and
//! a GSI QP in RTS, receive WQEs posted on both. Frames are structured UD SENDs (opcode,
//! destination QP, P_Key, Q_Key, source QP, immediate, payload length and pad from the input,
//! the ICRC right or wrong, IPv4 or IPv6) or arbitrary transport bytes behind valid headers.
//!
//! Invariants: no panic; no byte of host memory changes outside the receive buffers, the CQ
//! and EQ rings and the firmware pages; every CQE is well formed (a receive opcode or a
//! receive error, one of the two QPs, a posted WQE completed at most once, a byte count that
//! fits); and afterwards a valid datagram still reaches the UD QP.

#![no_main]

#[allow(dead_code)]
mod rc_common;

use cxdirect_emu::testkit::rc::{lone_host, GID_A, MAC_A};
use cxdirect_emu::testkit::ud::{UdQp, QP1_QKEY};
use cxdirect_emu::testkit::{Cq, Host, IOVA_BASE};
use cxdirect_emu::wire::{PortId, Wire};
use cxdirect_emu::EmuConfig;
use cxdirect_hw::cqe::{Cqe64, CqeOpcode, CqeSyndrome, ErrCqe};
use cxdirect_hw::qp::service_type;
use libfuzzer_sys::arbitrary::{Result as ArbResult, Unstructured};
use libfuzzer_sys::fuzz_target;
use rc_common::check_unchanged;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

const MEM: usize = 2 << 20;
const Q_KEY: u32 = 0x1111_1111;
const LOG_RQ: u8 = 4;
const RECEIVES: u16 = 12;
const RECV_BYTES: u32 = 1024;
const FRAMES: usize = 32;
/// The peer's GID and MAC.
const PEER_GID: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2];
const PEER_MAC: [u8; 6] = [0x02, 0xcd, 0, 0, 0, 2];

struct Setup {
    host: Host,
    wire: Arc<Wire>,
    cq: Cq,
    ud: UdQp,
    gsi: UdQp,
    lkey: u32,
    bufs: u64,
    writable: Vec<(u64, u64)>,
}

fn setup() -> Setup {
    let cfg = EmuConfig {
        mac: MAC_A,
        init_delay: Some(Duration::ZERO),
        ..EmuConfig::default()
    };
    let (mut h, wire) = lone_host(cfg, MEM, GID_A, MAC_A);
    let cq = h.create_cq(7);
    let mut ud = h.create_ud_qp(&cq, service_type::UD, 2, LOG_RQ);
    let mut gsi = h.create_ud_qp(&cq, service_type::QP1, 2, LOG_RQ);
    h.activate_ud(ud.qpn, service_type::UD, Q_KEY);
    h.activate_ud(gsi.qpn, service_type::QP1, QP1_QKEY);
    let lkey = h.create_mkey(false, true);
    let bufs = h.alloc(2 * u64::from(RECEIVES + 1) * u64::from(RECV_BYTES), 4096);
    for i in 0..RECEIVES {
        let at = bufs + 2 * u64::from(i) * u64::from(RECV_BYTES);
        h.post_ud_recv(&mut ud, at, RECV_BYTES, lkey);
        h.post_ud_recv(&mut gsi, at + u64::from(RECV_BYTES), RECV_BYTES, lkey);
    }
    let mut writable = vec![
        (bufs, 2 * u64::from(RECEIVES + 1) * u64::from(RECV_BYTES)),
        (cq.buf, 64 << cq.log),
        (cq.dbr, 8),
        (h.eq_buf, 64 << h.eq_log),
    ];
    writable.extend(h.pages.iter().map(|&pg| (pg, 4096)));
    Setup {
        host: h,
        wire,
        cq,
        ud,
        gsi,
        lkey,
        bufs,
        writable,
    }
}

/// The ICRC of RoCE v2 frame `frame` (its last four bytes are where it goes), from the IBA
/// rules, computed independently of the model.
fn icrc(frame: &[u8]) -> [u8; 4] {
    let v4 = frame.get(12..14) == Some(&[0x08, 0x00][..]);
    let l4 = if v4 { 34 } else { 54 };
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

/// Ethernet, IPv4 or IPv6 and UDP to 4791 from the peer around `transport`, its ICRC right.
fn wrap(transport: &[u8], v6: bool) -> Vec<u8> {
    let udp_len = 8 + transport.len() + 4;
    let mut f = Vec::with_capacity(54 + udp_len);
    f.extend_from_slice(&MAC_A);
    f.extend_from_slice(&PEER_MAC);
    if v6 {
        f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
        f.extend_from_slice(&(udp_len as u16).to_be_bytes());
        f.extend_from_slice(&[17, 64]);
        f.extend_from_slice(&PEER_GID);
        f.extend_from_slice(&GID_A);
    } else {
        f.extend_from_slice(&[0x08, 0x00, 0x45, 0]);
        f.extend_from_slice(&((20 + udp_len) as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0]);
        f.extend_from_slice(&PEER_GID[12..]);
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
    let n = f.len();
    let sum = icrc(&f);
    f[n - 4..].copy_from_slice(&sum);
    f
}

/// BTH, DETH, optional immediate and payload of a UD SEND.
fn datagram(
    opcode: u8,
    pad: u8,
    pkey: u16,
    dest: u32,
    q_key: u32,
    src: u32,
    body: &[u8],
) -> Vec<u8> {
    let mut t = vec![opcode, pad << 4];
    t.extend_from_slice(&pkey.to_be_bytes());
    t.extend_from_slice(&(dest & 0xff_ffff).to_be_bytes());
    t.extend_from_slice(&0u32.to_be_bytes());
    t.extend_from_slice(&q_key.to_be_bytes());
    t.extend_from_slice(&(src & 0xff_ffff).to_be_bytes());
    t.extend_from_slice(body);
    t
}

fn frame(u: &mut Unstructured, s: &Setup) -> ArbResult<Vec<u8>> {
    let v6 = u.ratio(1, 4)?;
    if u.ratio(1, 8)? {
        let len = u.int_in_range(0..=200usize)?;
        let mut t = u.bytes(len.min(u.len()))?.to_vec();
        if let Some(b) = t.first_mut() {
            *b = if u.arbitrary()? { 0x64 } else { 0x65 };
        }
        return Ok(wrap(&t, v6));
    }
    let opcode = match u.int_in_range(0..=7u8)? {
        0..=3 => 0x64,
        4..=5 => 0x65,
        _ => u.arbitrary()?,
    };
    let dest = match u.int_in_range(0..=4u8)? {
        0 | 1 => s.ud.qpn,
        2 | 3 => 1,
        _ => u.arbitrary()?,
    };
    let q_key = match u.int_in_range(0..=4u8)? {
        0 | 1 if dest == 1 => QP1_QKEY,
        0 | 1 => Q_KEY,
        2 => QP1_QKEY,
        3 => Q_KEY,
        _ => u.arbitrary()?,
    };
    let pkey = if u.ratio(7, 8)? {
        0xffff
    } else {
        u.arbitrary()?
    };
    let len = match u.int_in_range(0..=3u8)? {
        0 => u.int_in_range(0..=16usize)?,
        1 => u.int_in_range(0..=RECV_BYTES as usize)?,
        2 => 256,
        _ => u.int_in_range(0..=4200usize)?,
    };
    let mut body = Vec::with_capacity(len + 4);
    if opcode == 0x65 && u.ratio(7, 8)? {
        body.extend_from_slice(&u.arbitrary::<u32>()?.to_be_bytes());
    }
    let seed: u8 = u.arbitrary()?;
    body.extend((0..len).map(|i| seed ^ i as u8));
    let pad = u.int_in_range(0..=3u8)?;
    let t = datagram(opcode, pad, pkey, dest, q_key, u.arbitrary()?, &body);
    let mut f = wrap(&t, v6);
    if u.ratio(1, 8)? {
        let n = f.len();
        let at = u.int_in_range(0..=n - 1)?;
        f[at] ^= u.int_in_range(1..=255u8)?;
    }
    if u.ratio(1, 16)? {
        let keep = u.int_in_range(0..=f.len())?;
        f.truncate(keep);
    }
    Ok(f)
}

fn check_cqes(s: &mut Setup, seen: &mut HashSet<(u32, u16)>) {
    while let Some(cqe) = s.host.poll_cq(&mut s.cq) {
        let view = Cqe64::new(&cqe[..]).expect("layout");
        let qpn = view.qpn();
        assert!(qpn == s.ud.qpn || qpn == s.gsi.qpn, "CQE's QP: {cqe:02x?}");
        let index = view.wqe_counter();
        assert!(index < RECEIVES + 1, "receive WQE {index}: {cqe:02x?}");
        assert!(seen.insert((qpn, index)), "WQE {index} twice: {cqe:02x?}");
        let op = view.opcode();
        if op == CqeOpcode::RespSend as u8 || op == CqeOpcode::RespSendImm as u8 {
            assert!(view.byte_cnt() <= RECV_BYTES, "byte count: {cqe:02x?}");
            assert!(view.byte_cnt() >= 40, "the GRH area: {cqe:02x?}");
            assert_eq!(view.flags_rqpn() >> 28, 1, "GRH flag: {cqe:02x?}");
        } else {
            assert_eq!(op, CqeOpcode::RespErr as u8, "{cqe:02x?}");
            let syndrome = ErrCqe::new(&cqe[..]).expect("layout").syndrome();
            assert!(CqeSyndrome::try_from(syndrome).is_ok(), "{cqe:02x?}");
        }
    }
}

fn run(data: &[u8]) -> ArbResult<()> {
    let mut u = Unstructured::new(data);
    let mut s = setup();
    let before = s.host.read(IOVA_BASE, MEM);
    let mut seen = HashSet::new();
    for _ in 0..FRAMES {
        if u.is_empty() {
            break;
        }
        let f = frame(&mut u, &s)?;
        let _ = s.wire.transmit(PortId::B, &f);
        s.host.dev.poll();
        check_cqes(&mut s, &mut seen);
    }
    let after = s.host.read(IOVA_BASE, MEM);
    check_unchanged(&before, &after, &s.writable, "receiver");
    // A valid datagram still reaches the UD QP (one more receive posted: the ring holds 16).
    let at = s.bufs + 2 * u64::from(RECEIVES) * u64::from(RECV_BYTES);
    s.host.post_ud_recv(&mut s.ud, at, RECV_BYTES, s.lkey);
    let f = wrap(
        &datagram(0x64, 0, 0xffff, s.ud.qpn, Q_KEY, 7, &[9; 32]),
        false,
    );
    s.wire.transmit(PortId::B, &f).expect("transmit");
    s.host.dev.poll();
    let mut delivered = false;
    while let Some(cqe) = s.host.poll_cq(&mut s.cq) {
        let view = Cqe64::new(&cqe[..]).expect("layout");
        delivered |= view.opcode() == CqeOpcode::RespSend as u8 && view.byte_cnt() == 72;
    }
    assert!(delivered, "a valid datagram after the hostile ones");
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(data);
});
