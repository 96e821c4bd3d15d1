//! Tests of the neighbour table (`super`), kept apart so the table reads on its own.

use super::*;

const US: MacAddr = [2, 0, 0, 0, 0, 3];
const PEER: MacAddr = [2, 0, 0, 0, 0, 1];
const OUR_IP: Ipv4Addr = Ipv4Addr::new(192, 168, 77, 3);
const PEER_IP: Ipv4Addr = Ipv4Addr::new(192, 168, 77, 1);

fn table(capacity: usize) -> Neighbours {
    let config = NeighbourConfig {
        capacity,
        ..NeighbourConfig::default()
    };
    Neighbours::new(US, OUR_IP, config).unwrap()
}

fn arp(op: ArpOp, sha: MacAddr, sip: Ipv4Addr, tip: Ipv4Addr) -> ArpPacket {
    ArpPacket {
        op,
        sender_mac: sha,
        sender_ip: sip,
        target_mac: [0; 6],
        target_ip: tip,
    }
}

#[test]
fn resolving_sends_requests_on_time_then_names_the_silent_address() {
    let mut n = table(8);
    let t = Instant::now();
    assert_eq!(n.resolve(PEER_IP, t), Ok(Resolution::Pending));
    assert_eq!(n.next_request(t), Some(PEER_IP));
    assert_eq!(n.next_request(t), None, "rate-limited");
    let s = Duration::from_secs(1);
    assert_eq!(n.next_request(t + s / 2), None);
    assert_eq!(n.next_request(t + s), Some(PEER_IP));
    assert_eq!(n.next_request(t + 2 * s), Some(PEER_IP));
    assert_eq!(n.next_request(t + 3 * s), None, "three requests at most");
    assert_eq!(n.resolve(PEER_IP, t + 2 * s), Ok(Resolution::Pending));
    let err = n.resolve(PEER_IP, t + 3 * s).unwrap_err();
    assert!(err.to_string().contains("192.168.77.1"), "{err}");
    assert!(matches!(err, ResolveError::Unreachable { requests: 3, .. }));
    assert!(n.is_empty());
}

#[test]
fn a_reply_to_our_request_is_learned_and_expires() {
    let mut n = table(8);
    let t = Instant::now();
    n.resolve(PEER_IP, t).unwrap();
    n.next_request(t);
    let reply = arp(ArpOp::Reply, PEER, PEER_IP, OUR_IP);
    assert_eq!(n.receive(&reply, t), ArpVerdict::Learned);
    assert_eq!(n.resolve(PEER_IP, t), Ok(Resolution::Known(PEER)));
    let later = t + Duration::from_secs(30);
    assert_eq!(n.lookup(PEER_IP, later), None);
    assert_eq!(n.resolve(PEER_IP, later), Ok(Resolution::Pending));
    assert_eq!(n.next_request(later), Some(PEER_IP));
}

#[test]
fn unsolicited_spoofed_and_garbage_arp_teach_nothing() {
    let mut n = table(8);
    let t = Instant::now();
    let other = Ipv4Addr::new(192, 168, 77, 9);
    let cases = [
        (
            arp(ArpOp::Reply, PEER, PEER_IP, OUR_IP),
            IgnoreReason::Unsolicited,
        ),
        (
            arp(ArpOp::Request, PEER, PEER_IP, PEER_IP),
            IgnoreReason::Unsolicited,
        ),
        (
            arp(ArpOp::Request, PEER, PEER_IP, other),
            IgnoreReason::NotForUs,
        ),
        (
            arp(ArpOp::Reply, PEER, OUR_IP, OUR_IP),
            IgnoreReason::OwnAddress,
        ),
        (
            arp(ArpOp::Request, [0xff; 6], PEER_IP, OUR_IP),
            IgnoreReason::BadSender,
        ),
        (
            arp(ArpOp::Request, [0; 6], PEER_IP, OUR_IP),
            IgnoreReason::BadSender,
        ),
        (
            arp(ArpOp::Request, PEER, Ipv4Addr::BROADCAST, OUR_IP),
            IgnoreReason::BadSender,
        ),
        (
            arp(ArpOp::Request, PEER, PEER_IP, Ipv4Addr::new(224, 0, 0, 1)),
            IgnoreReason::BadTarget,
        ),
        (
            arp(ArpOp::Request, PEER, Ipv4Addr::UNSPECIFIED, other),
            IgnoreReason::Probe,
        ),
    ];
    for (p, why) in cases {
        assert_eq!(n.receive(&p, t), ArpVerdict::Ignored(why), "{p:?}");
    }
    assert!(n.is_empty());
    let probe = arp(ArpOp::Request, PEER, Ipv4Addr::UNSPECIFIED, OUR_IP);
    assert_eq!(n.receive(&probe, t), ArpVerdict::Answer);
    assert!(n.is_empty(), "a probe teaches nothing");
}

#[test]
fn a_request_for_us_teaches_the_sender_and_locktime_keeps_the_first_mac() {
    let mut n = table(8);
    let t = Instant::now();
    let req = arp(ArpOp::Request, PEER, PEER_IP, OUR_IP);
    assert_eq!(n.receive(&req, t), ArpVerdict::Answer);
    assert_eq!(n.lookup(PEER_IP, t), Some(PEER));
    let spoof = arp(ArpOp::Reply, [2, 9, 9, 9, 9, 9], PEER_IP, OUR_IP);
    assert_eq!(
        n.receive(&spoof, t + Duration::from_millis(10)),
        ArpVerdict::Ignored(IgnoreReason::Locked)
    );
    assert_eq!(n.lookup(PEER_IP, t), Some(PEER));
}

#[test]
fn the_table_never_grows_past_its_capacity() {
    let mut n = table(4);
    let t = Instant::now();
    for i in 10..14 {
        n.resolve(Ipv4Addr::new(10, 0, 0, i), t).unwrap();
    }
    assert!(matches!(
        n.resolve(Ipv4Addr::new(10, 0, 0, 99), t),
        Err(ResolveError::TableFull { capacity: 4, .. })
    ));
    // Known entries make room, oldest first.
    for i in 10..14u8 {
        let sha = [2, 0, 0, 0, 0, i];
        let r = arp(ArpOp::Reply, sha, Ipv4Addr::new(10, 0, 0, i), OUR_IP);
        n.receive(&r, t + Duration::from_millis(u64::from(i)));
    }
    n.resolve(Ipv4Addr::new(10, 0, 0, 99), t).unwrap();
    assert_eq!(n.len(), 4);
    assert_eq!(
        n.lookup(Ipv4Addr::new(10, 0, 0, 10), t),
        None,
        "oldest gone"
    );
    assert_eq!(n.stats().evicted, 1);
}
