//! A hostile or confused peer: random bytes, forged IDs, replays and floods change no
//! connection they do not name exactly.

use super::*;
use cxdirect_hw::cm::{attr, msg_response, rej_reason};

const EVIL: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 66);

fn evil() -> CmAddress {
    CmAddress::ipv4(EVIL)
}

/// Asserts both sides of an established pair are untouched and the wire is quiet.
fn still_established(net: &mut Net, c: ConnId, s: ConnId) {
    assert_eq!(net.client.state(c), Some("ESTABLISHED"));
    assert_eq!(net.server.state(s), Some("ESTABLISHED"));
    let cp = net.client.poll(net.now);
    assert!(cp.events.is_empty(), "{:?}", cp.events);
    let sp = net.server.poll(net.now);
    assert!(sp.events.is_empty(), "{:?}", sp.events);
}

#[test]
fn random_bytes_change_nothing() {
    let (mut net, c, s) = Net::established();
    let mut rng = Rng(0xfeed_f00d);
    for i in 0..20_000u32 {
        let mut mad = random_mad(&mut rng);
        if i % 2 == 0 {
            mad[..4].copy_from_slice(&[1, 0x07, 2, 0x03]);
            mad[16] = 0;
            mad[17] = 0x10 + (i % 7) as u8;
        }
        let target = if i % 3 == 0 {
            &mut net.client
        } else {
            &mut net.server
        };
        if let Ok(Some(e)) = target.receive(net.now, evil(), &mad) {
            // A random REQ may look like one; it never reaches a listener with a valid
            // cma_hdr and our GID by chance.
            panic!("random MAD {i} produced {e:?}");
        }
        // Answers (REJ, DREP) go only to the sender.
        for (to, _) in net.server.poll(net.now).sends {
            assert_eq!(to, evil());
        }
        for (to, _) in net.client.poll(net.now).sends {
            assert_eq!(to, evil());
        }
    }
    still_established(&mut net, c, s);
    assert!(net.server.stats().malformed > 0);
}

#[test]
fn forged_ids_are_ignored_and_unknown_dreq_gets_a_drep() {
    let (mut net, c, s) = Net::established();
    let mut rng = Rng(77);
    for _ in 0..1000 {
        let (l, r) = (rng.next() as u32, rng.next() as u32);
        let pair = IdPair {
            local_comm_id: l,
            remote_comm_id: r,
            private_data: PrivateData::EMPTY,
        };
        for m in [
            Message::Rtu(pair),
            Message::Drep(pair),
            Message::Mra(Mra {
                local_comm_id: l,
                remote_comm_id: r,
                message_mraed: msg_response::REP,
                service_timeout: 31,
                private_data: PrivateData::EMPTY,
            }),
        ] {
            let mad = m.encode(rng.next());
            assert!(matches!(
                net.server.receive(net.now, evil(), &mad),
                Err(ReceiveError::UnknownConnection { .. })
            ));
        }
    }
    still_established(&mut net, c, s);

    // A DREQ for an unknown pair is answered (`cm_issue_drep`): IDs swapped, TID echoed.
    let dreq = Message::Dreq(Dreq {
        local_comm_id: 0x1111,
        remote_comm_id: 0x2222,
        remote_qpn: 0x22,
        private_data: PrivateData::EMPTY,
    })
    .encode(0xabcd);
    assert!(net.server.receive(net.now, evil(), &dreq).is_err());
    let sends = net.server.poll(net.now).sends;
    assert_eq!(sends.len(), 1);
    assert_eq!(sends[0].0, evil());
    let Ok(Parsed {
        tid,
        message: Message::Drep(d),
    }) = parse(&sends[0].1)
    else {
        panic!()
    };
    assert_eq!(
        (tid, d.local_comm_id, d.remote_comm_id),
        (0xabcd, 0x2222, 0x1111)
    );

    // A DREQ with the right IDs but another QPN is ignored (`cm_dreq_handler`).
    let wrong_qpn = Message::Dreq(Dreq {
        local_comm_id: c.0,
        remote_comm_id: s.0,
        remote_qpn: 0x999,
        private_data: PrivateData::EMPTY,
    })
    .encode(1);
    assert!(matches!(
        net.server.receive(net.now, evil(), &wrong_qpn),
        Err(ReceiveError::QpnMismatch { .. })
    ));
    still_established(&mut net, c, s);
}

#[test]
fn rej_storm_changes_no_unrelated_connection() {
    let (mut net, c, s) = Net::established();
    // A second connection, still waiting for its REP.
    let pending = net
        .client
        .connect(SERVER_IP, PORT, SRC_PORT + 1, &QpParams::rping(0x33), &[])
        .unwrap();
    let _ = net.client.poll(net.now);
    let mut rng = Rng(99);
    for i in 0..5000u32 {
        let rej = Message::Rej(Rej {
            local_comm_id: rng.next() as u32,
            // Never the pending connection's ID, which a blind attacker cannot know.
            remote_comm_id: (rng.next() as u32) | 1,
            message_rejected: (i % 3) as u8,
            reason: (i % 40) as u16,
            ari_len: 0,
            ari: [0; 72],
            private_data: PrivateData::EMPTY,
        })
        .encode(i.into());
        let mut mad = rej;
        if u32::from_be_bytes([mad[28], mad[29], mad[30], mad[31]]) == pending.0 {
            mad[31] ^= 0x80;
        }
        let _ = net.client.receive(net.now, evil(), &mad);
        let _ = net.server.receive(net.now, evil(), &mad);
    }
    still_established(&mut net, c, s);
    assert_eq!(net.client.state(pending), Some("REQ_SENT"));
}

#[test]
fn replays_are_duplicates() {
    let mut net = Net::new();
    let c = net.connect();
    net.run(|_, _| false);
    let (s, _) = net.accept();
    net.run(|_, _| false);
    let log = net.log.clone();
    let from_client = CmAddress::ipv4(CLIENT_IP);
    let from_server = CmAddress::ipv4(SERVER_IP);
    // Replayed REQ: the server knows its (comm ID, GUID); no second connection.
    let req = log.iter().find(|(_, m)| attr_of(m) == attr::REQ).unwrap().1;
    assert!(matches!(
        net.server.receive(net.now, from_client, &req),
        Err(ReceiveError::Duplicate { .. })
    ));
    assert_eq!(net.server.connections(), 1);
    // Replayed RTU: ignored (`cm_rtu_handler` counts a duplicate).
    let rtu = log.iter().find(|(_, m)| attr_of(m) == attr::RTU).unwrap().1;
    assert!(matches!(
        net.server.receive(net.now, from_client, &rtu),
        Err(ReceiveError::Duplicate { .. })
    ));
    // Replayed REP: the client sends its RTU again, nothing else.
    let rep = log.iter().find(|(_, m)| attr_of(m) == attr::REP).unwrap().1;
    assert!(net.client.receive(net.now, from_server, &rep).is_err());
    let sends = net.client.poll(net.now).sends;
    assert_eq!(sends.len(), 1);
    assert_eq!(attr_of(&sends[0].1), attr::RTU);
    assert!(net
        .server
        .receive(net.now, from_client, &sends[0].1)
        .is_err());
    still_established(&mut net, c, s);

    // After a disconnect, a replayed DREQ is answered from timewait with the DREP again.
    net.client.disconnect(c).unwrap();
    net.log.clear();
    net.run(|_, _| false);
    let dreq = net
        .log
        .iter()
        .find(|(_, m)| attr_of(m) == attr::DREQ)
        .unwrap()
        .1;
    assert!(matches!(
        net.server.receive(net.now, from_client, &dreq),
        Err(ReceiveError::Duplicate { .. })
    ));
    let sends = net.server.poll(net.now).sends;
    assert_eq!(sends.len(), 1);
    assert_eq!(attr_of(&sends[0].1), attr::DREP);
    // `cm_enter_timewait` took the connection out of the remote tables: as in Linux, the
    // old REQ replayed now reads as a new request, for the consumer to refuse.
    let Ok(Some(Event::ConnectRequest(again))) = net.server.receive(net.now, from_client, &req)
    else {
        panic!("a REQ replayed in timewait is a new request");
    };
    assert_ne!(again.id, s);
    net.server.reject(again.id, &[]).unwrap();
    let sends = net.server.poll(net.now).sends;
    let Ok(Parsed {
        message: Message::Rej(rej),
        ..
    }) = parse(&sends[0].1)
    else {
        panic!()
    };
    assert_eq!(rej.reason, rej_reason::CONSUMER_DEFINED);
}

#[test]
fn req_flood_is_bounded() {
    let mut me = Identity::new(2, SERVER_IP, 5);
    me.limits.max_connections = 4;
    me.limits.max_pending_sends = 8;
    let mut server = Cm::new(me);
    server.listen(PORT).unwrap();
    let mut client = Cm::new(Identity::new(1, CLIENT_IP, 6));
    // Valid REQs from a peer that never finishes: four fill the table, the rest are dropped
    // without an answer so a real peer's retry can still succeed later.
    for i in 0..100 {
        client
            .connect(SERVER_IP, PORT, i, &QpParams::rping(u32::from(i) + 1), &[])
            .unwrap_or_else(|_| {
                client = Cm::new(Identity::new(1, CLIENT_IP, u64::from(i) + 7));
                client
                    .connect(SERVER_IP, PORT, i, &QpParams::rping(u32::from(i) + 1), &[])
                    .unwrap()
            });
        for (_, mad) in client.poll(Duration::ZERO).sends {
            let _ = server.receive(Duration::ZERO, CmAddress::ipv4(CLIENT_IP), &mad);
        }
    }
    assert_eq!(server.connections(), 4);
    // REQs for a port nobody listens on are each answered with a REJ, but the queue of
    // answers is bounded.
    let mut other = Cm::new(Identity::new(3, EVIL, 8));
    for i in 0..50 {
        other
            .connect(SERVER_IP, PORT + 1, i, &QpParams::rping(1), &[])
            .unwrap_or_else(|_| {
                other = Cm::new(Identity::new(3, EVIL, u64::from(i) + 100));
                other
                    .connect(SERVER_IP, PORT + 1, i, &QpParams::rping(1), &[])
                    .unwrap()
            });
        for (_, mad) in other.poll(Duration::ZERO).sends {
            let _ = server.receive(Duration::ZERO, evil(), &mad);
        }
    }
    let sent = server.poll(Duration::ZERO).sends;
    assert_eq!(sent.len(), 8);
    assert!(server.stats().send_queue_full > 0);
}

#[test]
fn req_for_another_gid_is_rejected_with_ours() {
    let mut server = Cm::new(Identity::new(2, SERVER_IP, 5));
    server.listen(PORT).unwrap();
    let mut client = Cm::new(Identity::new(1, CLIENT_IP, 6));
    client
        .connect(
            Ipv4Addr::new(10, 0, 0, 9),
            PORT,
            1,
            &QpParams::rping(1),
            &[],
        )
        .unwrap();
    let req = client.poll(Duration::ZERO).sends[0].1;
    assert_eq!(
        server.receive(Duration::ZERO, CmAddress::ipv4(CLIENT_IP), &req),
        Err(ReceiveError::Refused(rej_reason::INVALID_GID))
    );
    let rej = server.poll(Duration::ZERO).sends[0].1;
    let Ok(Parsed {
        message: Message::Rej(r),
        ..
    }) = parse(&rej)
    else {
        panic!()
    };
    assert_eq!(r.ari_len, 16);
    assert_eq!(&r.ari[..16], &ipv4_gid(SERVER_IP));
    assert_eq!(server.connections(), 0);
}

#[test]
fn a_clock_that_steps_back_panics_nothing() {
    // The caller's clock goes back between the REQ's first send and an MRA (two clocks, or a
    // clock set back): the MRA's deadline falls before the first send, and giving up must
    // not subtract past zero.
    let mut me = Identity::new(1, CLIENT_IP, 6);
    me.max_cm_retries = 0;
    let mut client = Cm::new(me);
    let id = client
        .connect(SERVER_IP, PORT, SRC_PORT, &QpParams::rping(1), &[])
        .unwrap();
    assert_eq!(client.poll(ms(10_000)).sends.len(), 1);
    let mra = Message::Mra(Mra {
        local_comm_id: 0x77,
        remote_comm_id: id.0,
        message_mraed: msg_response::REQ,
        service_timeout: 0,
        private_data: PrivateData::EMPTY,
    })
    .encode(1);
    assert_eq!(
        client.receive(Duration::ZERO, CmAddress::ipv4(SERVER_IP), &mra),
        Ok(None)
    );
    let p = client.poll(ms(1_000));
    let [Event::TimedOut(t)] = p.events.as_slice() else {
        panic!("{:?}", p.events)
    };
    assert_eq!((t.id, t.waited_ms), (id, 0));
    assert_eq!(client.connections(), 0);
}
