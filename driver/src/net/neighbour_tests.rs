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

#[test]
fn a_known_entry_keeps_its_mac_against_spoofs_after_locktime_and_learns_a_move_by_asking() {
    let mut n = table(8);
    let t = Instant::now();
    let evil = [2, 0xe, 0xe, 0xe, 0xe, 0xe];
    let req = arp(ArpOp::Request, PEER, PEER_IP, OUR_IP);
    assert_eq!(n.receive(&req, t), ArpVerdict::Answer);
    let later = t + Duration::from_secs(5);
    // Past locktime, Linux would take a reply's new MAC; here nothing unsolicited changes a
    // known entry: not a reply, not gratuitous ARP, not a request for us.
    for p in [
        arp(ArpOp::Reply, evil, PEER_IP, OUR_IP),
        arp(ArpOp::Request, evil, PEER_IP, PEER_IP),
        arp(ArpOp::Reply, evil, PEER_IP, PEER_IP),
    ] {
        assert_eq!(
            n.receive(&p, later),
            ArpVerdict::Ignored(IgnoreReason::Conflict),
            "{p:?}"
        );
        assert_eq!(n.lookup(PEER_IP, later), Some(PEER));
    }
    let spoofed_req = arp(ArpOp::Request, evil, PEER_IP, OUR_IP);
    assert_eq!(n.receive(&spoofed_req, later), ArpVerdict::Answer);
    assert_eq!(n.lookup(PEER_IP, later), Some(PEER));
    assert_eq!(n.stats().conflicts, 4);
    // The genuine MAC still confirms it.
    let confirm = arp(ArpOp::Reply, PEER, PEER_IP, OUR_IP);
    assert_eq!(n.receive(&confirm, later), ArpVerdict::Updated);
    // Expired, the entry is resolved again and the first answer is taken: a host that moved.
    let expired = later + Duration::from_secs(31);
    assert_eq!(n.lookup(PEER_IP, expired), None);
    assert_eq!(n.resolve(PEER_IP, expired), Ok(Resolution::Pending));
    assert_eq!(n.next_request(expired), Some(PEER_IP));
    let moved = [2, 7, 7, 7, 7, 7];
    assert_eq!(
        n.receive(&arp(ArpOp::Reply, moved, PEER_IP, OUR_IP), expired),
        ArpVerdict::Learned
    );
    assert_eq!(n.lookup(PEER_IP, expired), Some(moved));
}
