//! The function's IPv4 address on the emulated pair: function A runs cxdirect's responder at
//! 192.168.77.3; function B plays a Linux host at 192.168.77.1, its frames built by hand here
//! (checksums computed here too) and A's answers checked byte by byte.

use cxdirect::net::{NeighbourConfig, Resolution, ResolveError, Responder, ResponderStats};
use cxdirect::{Mbuf, Mempool, PortConfig, RxQueue, TxQueue};
use cxdirect_apps::emulated::EmuBackend;
use cxdirect_emu::EmuConfig;
use cxdirect_tests::setup::{small_port, started_sides, Side};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

const A_IP: [u8; 4] = [192, 168, 77, 3];
const B_IP: [u8; 4] = [192, 168, 77, 1];

struct Pair {
    a: Side,
    b: Side,
    a_mac: [u8; 6],
    b_mac: [u8; 6],
    responder: Responder,
}

fn pair() -> Pair {
    let config = PortConfig { ..small_port() };
    let (mut a, b, _) = started_sides(EmuConfig::default(), config);
    let mut b = b;
    let a_mac = a.0.device().info().mac;
    let b_mac = b.0.device().info().mac;
    let responder =
        Responder::for_port(&mut a.0, Ipv4Addr::from(A_IP), NeighbourConfig::default()).unwrap();
    Pair {
        a,
        b,
        a_mac,
        b_mac,
        responder,
    }
}

/// The Internet checksum, written out here apart from the driver's.
fn csum(bytes: &[u8]) -> u16 {
    let mut s: u32 = 0;
    for w in bytes.chunks(2) {
        s += u32::from(w[0]) << 8 | u32::from(*w.get(1).unwrap_or(&0));
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

fn send(tx: &mut TxQueue<EmuBackend>, pool: &Mempool, frames: &[Vec<u8>]) {
    let mut batch: Vec<Mbuf> = frames
        .iter()
        .map(|f| {
            let mut m = pool.alloc().unwrap();
            m.set_data(f).unwrap();
            m
        })
        .collect();
    cxdirect_tests::send_all(tx, &mut batch);
}

fn receive(rx: &mut RxQueue<EmuBackend>) -> Vec<Mbuf> {
    let mut got = Vec::new();
    while rx.rx_burst(&mut got, 64).unwrap() > 0 {}
    got
}

impl Pair {
    /// B sends `frames`; A receives them and its responder takes its own at `now`; A sends
    /// what it answered or asked; returns what A handed back and what B received.
    fn round(&mut self, frames: &[Vec<u8>], now: Instant) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
        let (pb, txb, _) = &mut self.b;
        send(&mut txb[0], pb.pool(), frames);
        let (pa, txa, rxa) = &mut self.a;
        let mut got = receive(&mut rxa[0]);
        let mut out = Vec::with_capacity(64);
        self.responder.handle(&mut got, &mut out, now);
        self.responder.poll(pa.pool(), &mut out, now);
        cxdirect_tests::send_all(&mut txa[0], &mut out);
        let kept = got.iter().map(Mbuf::to_vec).collect();
        let at_b = receive(&mut self.b.2[0]).iter().map(Mbuf::to_vec).collect();
        (kept, at_b)
    }

    /// An ARP frame from B, by hand: `op`, the sender fields, and the target IP.
    fn arp_from_b(&self, dst: [u8; 6], op: u16, sip: [u8; 4], tip: [u8; 4]) -> Vec<u8> {
        let mut f = Vec::new();
        f.extend_from_slice(&dst);
        f.extend_from_slice(&self.b_mac);
        f.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, op as u8]);
        f.extend_from_slice(&self.b_mac);
        f.extend_from_slice(&sip);
        f.extend_from_slice(&[0; 6]);
        f.extend_from_slice(&tip);
        f.resize(60, 0);
        f
    }

    fn close(self) {
        let Pair { a, b, .. } = self;
        let (pa, txa, rxa) = a;
        let (pb, txb, rxb) = b;
        drop((txa, rxa, txb, rxb));
        pa.close().unwrap().teardown().unwrap();
        pb.close().unwrap().teardown().unwrap();
    }
}

/// An echo request from B to A, by hand: 20-byte IP header, ICMP id 0x4242, seq `seq`.
fn echo_request(b_mac: [u8; 6], a_mac: [u8; 6], seq: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&a_mac);
    f.extend_from_slice(&b_mac);
    f.extend_from_slice(&[0x08, 0x00]);
    let total = (20 + 8 + payload.len()) as u16;
    let mut ip = vec![
        0x45,
        0,
        (total >> 8) as u8,
        total as u8,
        0x12,
        0x34,
        0x40,
        0,
        64,
        1,
        0,
        0,
    ];
    ip.extend_from_slice(&B_IP);
    ip.extend_from_slice(&A_IP);
    let c = csum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    let mut icmp = vec![8, 0, 0, 0, 0x42, 0x42, (seq >> 8) as u8, seq as u8];
    icmp.extend_from_slice(payload);
    let c = csum(&icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&icmp);
    f
}

#[test]
fn an_arp_request_and_an_echo_request_are_answered_byte_by_byte_through_the_flow_rules() {
    let mut p = pair();
    let rqn = p.a.2[0].rqn();
    let rules = p.responder.steer(&mut p.a.0, rqn).unwrap();
    let now = Instant::now();
    let request = p.arp_from_b([0xff; 6], 1, B_IP, A_IP);
    let payload: Vec<u8> = (0..56u8).collect();
    let echo = echo_request(p.b_mac, p.a_mac, 7, &payload);
    let other = cxdirect_tests::udp_frame(1, 9000);
    let (kept, at_b) = p.round(&[request, echo.clone(), other.clone()], now);
    assert_eq!(kept, vec![other], "the UDP frame is handed back untouched");
    assert_eq!(at_b.len(), 2, "an ARP reply and an echo reply");

    let mut want = Vec::new();
    want.extend_from_slice(&p.b_mac);
    want.extend_from_slice(&p.a_mac);
    want.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 2]);
    want.extend_from_slice(&p.a_mac);
    want.extend_from_slice(&A_IP);
    want.extend_from_slice(&p.b_mac);
    want.extend_from_slice(&B_IP);
    want.resize(60, 0);
    assert_eq!(at_b[0], want, "the ARP reply");

    let mut want = Vec::new();
    want.extend_from_slice(&p.b_mac);
    want.extend_from_slice(&p.a_mac);
    want.extend_from_slice(&[0x08, 0x00]);
    let mut ip = echo[14..34].to_vec();
    ip[8] = 64;
    ip[10..12].fill(0);
    ip[12..16].copy_from_slice(&A_IP);
    ip[16..20].copy_from_slice(&B_IP);
    let c = csum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    want.extend_from_slice(&ip);
    let mut icmp = echo[34..].to_vec();
    icmp[0] = 0;
    icmp[2..4].fill(0);
    let c = csum(&icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    want.extend_from_slice(&icmp);
    assert_eq!(at_b[1], want, "the echo reply");
    assert_eq!(csum(&at_b[1][14..34]), 0, "IP header checksum verifies");
    assert_eq!(csum(&at_b[1][34..]), 0, "ICMP checksum verifies");

    let s = p.responder.stats();
    assert_eq!((s.arp_replies, s.echo_replies, s.passed), (1, 1, 1));
    assert_eq!(
        p.responder.neighbours().lookup(Ipv4Addr::from(B_IP), now),
        Some(p.b_mac),
        "a request for our address teaches its sender"
    );
    for rule in rules {
        p.a.0.remove_flow(rule).unwrap();
    }
    p.close();
}

#[test]
fn a_peer_that_answers_is_resolved_and_re_resolved_after_expiry() {
    let mut p = pair();
    let t = Instant::now();
    let b_ip = Ipv4Addr::from(B_IP);
    assert_eq!(p.responder.resolve(b_ip, t), Ok(Resolution::Pending));
    let (_, at_b) = p.round(&[], t);
    let mut want = Vec::new();
    want.extend_from_slice(&[0xff; 6]);
    want.extend_from_slice(&p.a_mac);
    want.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
    want.extend_from_slice(&p.a_mac);
    want.extend_from_slice(&A_IP);
    want.extend_from_slice(&[0; 6]);
    want.extend_from_slice(&B_IP);
    want.resize(60, 0);
    assert_eq!(at_b, vec![want], "one broadcast request");
    let reply = p.arp_from_b(p.a_mac, 2, B_IP, A_IP);
    p.round(std::slice::from_ref(&reply), t);
    assert_eq!(p.responder.resolve(b_ip, t), Ok(Resolution::Known(p.b_mac)));

    let later = t + NeighbourConfig::default().reachable;
    assert_eq!(p.responder.resolve(b_ip, later), Ok(Resolution::Pending));
    let (_, at_b) = p.round(&[], later);
    assert_eq!(at_b.len(), 1, "the expired entry is asked for again");
    p.round(&[reply], later);
    assert_eq!(
        p.responder.resolve(b_ip, later),
        Ok(Resolution::Known(p.b_mac))
    );
    p.close();
}

#[test]
fn a_peer_that_never_answers_gets_three_requests_then_a_clear_error() {
    let mut p = pair();
    let t = Instant::now();
    let silent = Ipv4Addr::new(192, 168, 77, 9);
    let mut requests = 0;
    for ms in (0..=3000).step_by(250) {
        let now = t + Duration::from_millis(ms);
        match p.responder.resolve(silent, now) {
            Ok(Resolution::Pending) => {}
            Err(e) => {
                assert_eq!(ms, 3000, "given up after the last request's wait: {e}");
                assert!(e.to_string().contains("192.168.77.9"), "{e}");
                assert!(matches!(e, ResolveError::Unreachable { requests: 3, .. }));
                break;
            }
            other => panic!("{other:?}"),
        }
        let (_, at_b) = p.round(&[], now);
        requests += at_b.len();
    }
    assert_eq!(requests, 3, "one request a second, three in all");
    assert_eq!(p.responder.neighbours().stats().failed, 1);
    p.close();
}

#[test]
fn garbage_arp_is_counted_and_ignored_without_touching_the_table() {
    let mut p = pair();
    let t = Instant::now();
    // A known neighbour first.
    p.round(&[p.arp_from_b([0xff; 6], 1, B_IP, A_IP)], t);
    let b_ip = Ipv4Addr::from(B_IP);
    assert_eq!(p.responder.neighbours().lookup(b_ip, t), Some(p.b_mac));
    let base = p.responder.stats();

    let good = p.arp_from_b(p.a_mac, 2, B_IP, A_IP);
    let with = |at: usize, v: u8| {
        let mut f = good.clone();
        f[at] = v;
        f
    };
    let malformed = vec![
        with(18, 8),         // hardware address length 8
        with(19, 16),        // protocol address length 16
        with(15, 0x20),      // hardware type 32
        with(17, 0xdd),      // protocol type 0x08dd
        with(21, 3),         // operation 3
        good[..30].to_vec(), // cut short
    ];
    let other = [192, 168, 77, 20];
    let mut unasked = p.arp_from_b(p.a_mac, 2, other, A_IP);
    unasked[22..28].copy_from_slice(&[2, 0xee, 0, 0, 0, 20]);
    let mut own = p.arp_from_b(p.a_mac, 2, A_IP, A_IP);
    own[22..28].copy_from_slice(&[2, 0xee, 0, 0, 0, 3]);
    let mut spoof = good.clone();
    spoof[22..28].copy_from_slice(&[2, 0xee, 0, 0, 0, 1]);
    let (kept, at_b) = p.round(&[malformed.concat(), unasked, own, spoof], t);
    // The malformed frames went as one here; send them one by one too.
    let (kept2, at_b2) = p.round(&malformed, t);
    assert!(
        kept.is_empty() && kept2.is_empty(),
        "ARP is never handed back"
    );
    assert!(at_b.is_empty() && at_b2.is_empty(), "nothing answered");

    let s = p.responder.stats();
    let n = p.responder.neighbours().stats();
    assert_eq!(s.arp_malformed - base.arp_malformed, 6 + 1, "{s:?}");
    assert_eq!(s.arp_ignored - base.arp_ignored, 3, "{s:?}");
    assert_eq!((n.unsolicited, n.own_address, n.locked), (1, 1, 1), "{n:?}");
    assert_eq!(p.responder.neighbours().len(), 1);
    assert_eq!(
        p.responder.neighbours().lookup(b_ip, t),
        Some(p.b_mac),
        "the spoofed reply changed nothing"
    );
    assert_eq!(
        p.responder.neighbours().lookup(Ipv4Addr::from(other), t),
        None
    );
    let _: ResponderStats = s;
    p.close();
}
