//! Two CMs connect, survive a lossy wire, reject, time out and disconnect.

use super::*;
use cxdirect_hw::cm::{attr, rej_reason};

fn established_of(events: &[Event]) -> Vec<(ConnId, QpAttributes, PrivateData)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Established {
                id,
                qp,
                private_data,
            } => Some((*id, *qp, *private_data)),
            _ => None,
        })
        .collect()
}

#[test]
fn client_and_server_connect_and_disconnect() {
    let mut net = Net::new();
    let c = net.connect();
    assert_eq!(net.client.state(c), Some("REQ_SENT"));
    net.run(|_, _| false);
    let Some(Event::ConnectRequest(req)) = net.server_events.first().copied() else {
        panic!("no connect request: {:?}", net.server_events);
    };
    assert_eq!(req.port, PORT);
    assert_eq!(req.from, CmAddress::ipv4(CLIENT_IP));
    assert_eq!(req.cma.src_ip, CLIENT_IP);
    assert_eq!(req.cma.dst_ip, SERVER_IP);
    assert_eq!(req.cma.src_port, SRC_PORT);
    assert_eq!(req.remote_qpn, 0x11);
    assert_eq!(&req.private_data.as_slice()[..5], b"hello");
    assert_eq!(req.private_data.as_slice().len(), 56);
    assert_eq!((req.responder_resources, req.initiator_depth), (1, 1));

    let (s, server_qp) = net.accept();
    assert_eq!(s, req.id);
    assert_eq!(net.server.state(s), Some("REP_SENT"));
    net.run(|_, _| false);

    let client_up = established_of(&net.client_events);
    let server_up = established_of(&net.server_events);
    assert_eq!(client_up.len(), 1);
    assert_eq!(server_up.len(), 1);
    let (cid, client_qp, rep_pd) = client_up[0];
    assert_eq!(cid, c);
    assert_eq!(&rep_pd.as_slice()[..7], b"welcome");
    assert_eq!(server_up[0].1, server_qp);
    // Each side's send PSN is the PSN the other expects (ib_cm's convention).
    assert_eq!(client_qp.sq_psn, server_qp.rq_psn);
    assert_eq!(server_qp.sq_psn, client_qp.rq_psn);
    assert_eq!(client_qp.remote_qpn, 0x22);
    assert_eq!(server_qp.remote_qpn, 0x11);
    assert_eq!(client_qp.remote_gid, ipv4_gid(SERVER_IP));
    assert_eq!(server_qp.remote_gid, ipv4_gid(CLIENT_IP));
    assert_eq!(client_qp.path_mtu, 3);
    assert_eq!(
        (client_qp.max_rd_atomic, client_qp.max_dest_rd_atomic),
        (1, 1)
    );
    assert_eq!((client_qp.retry_count, client_qp.rnr_retry), (7, 7));
    assert_eq!((server_qp.retry_count, server_qp.rnr_retry), (7, 7));
    // Active: cm_ack_timeout(REP target ACK delay 16, life 16); passive: the REQ's.
    assert_eq!(client_qp.timeout, 18);
    assert_eq!(server_qp.timeout, 18);
    // The wire carried REQ, REP, RTU and nothing else.
    let attrs: Vec<u16> = net.log.iter().map(|(_, m)| attr_of(m)).collect();
    assert_eq!(attrs, [attr::REQ, attr::REP, attr::RTU]);

    net.client.disconnect(c).unwrap();
    net.run(|_, _| false);
    assert!(net.server_events.contains(&Event::Disconnected {
        id: s,
        timed_out: false
    }));
    assert!(net.client_events.contains(&Event::Disconnected {
        id: c,
        timed_out: false
    }));
    assert_eq!(net.client.state(c), Some("TIMEWAIT"));
    assert_eq!(net.server.state(s), Some("TIMEWAIT"));
    // Timewait lasts cm_convert_to_ms(av.timeout) = 2^(18-8) ms.
    net.advance(ms(1023), |_, _| false);
    assert_eq!(net.client.connections(), 1);
    net.advance(ms(1), |_, _| false);
    assert_eq!(net.client.connections(), 0);
    assert_eq!(net.server.connections(), 0);
}

#[test]
fn lost_req_is_retried_after_the_cm_timeout() {
    let mut net = Net::new();
    net.connect();
    net.run(lose(attr::REQ, 1));
    assert!(net.server_events.is_empty());
    // 2 * 2^(16-8) + 2^(20-8) ms.
    net.advance(ms(4607), |_, _| false);
    assert!(net.server_events.is_empty());
    net.advance(ms(1), |_, _| false);
    assert_eq!(net.server_events.len(), 1);
    net.accept();
    net.run(|_, _| false);
    assert_eq!(established_of(&net.client_events).len(), 1);
    assert_eq!(net.client.stats().retransmits, 1);
}

#[test]
fn lost_rep_is_retried_and_the_duplicate_req_is_not_answered_twice() {
    let mut net = Net::new();
    let c = net.connect();
    net.run(|_, _| false);
    net.accept();
    net.run(lose(attr::REP, 1));
    assert!(established_of(&net.client_events).is_empty());
    // The passive REP timer is the REQ's local CM response timeout: 2^(20-8) ms, before the
    // client's REQ timer (4608 ms).
    net.advance(ms(4096), |_, _| false);
    assert_eq!(established_of(&net.client_events).len(), 1);
    assert_eq!(established_of(&net.server_events).len(), 1);
    // The client's REQ timer was cancelled by the REP: nothing more on the wire.
    let before = net.log.len();
    net.advance(ms(10_000), |_, _| false);
    assert_eq!(net.log.len(), before);
    assert_eq!(net.client.state(c), Some("ESTABLISHED"));
}

#[test]
fn duplicate_req_before_accept_gets_the_delayed_mra_which_extends_the_timer() {
    let mut net = Net::new();
    let c = net.connect();
    net.run(|_, _| false);
    // The server's consumer is slow: the client retries the REQ.
    net.advance(ms(4608), |_, _| false);
    let attrs: Vec<u16> = net.log.iter().map(|(_, m)| attr_of(m)).collect();
    assert_eq!(attrs, [attr::REQ, attr::REQ, attr::MRA]);
    assert_eq!(net.client.state(c), Some("MRA_REQ_RCVD"));
    assert_eq!(
        net.server_events.len(),
        1,
        "a duplicate is not a new request"
    );
    // The MRA asks for 2^(24-8) + 2^(17-8) ms more.
    net.advance(ms(65536 + 512 - 1), |_, _| false);
    assert_eq!(net.log.len(), 3);
    net.accept();
    net.run(|_, _| false);
    assert_eq!(net.client.state(c), Some("ESTABLISHED"));
}

#[test]
fn lost_rtu_is_recovered_by_the_rep_retry() {
    let mut net = Net::new();
    net.connect();
    net.run(|_, _| false);
    let (s, _) = net.accept();
    net.run(lose(attr::RTU, 1));
    assert_eq!(net.server.state(s), Some("REP_SENT"));
    // REP again; the established client answers the duplicate with the RTU
    // (`cm_dup_rep_handler`).
    net.advance(ms(4096), |_, _| false);
    assert_eq!(net.server.state(s), Some("ESTABLISHED"));
}

#[test]
fn lost_dreq_is_retried_and_lost_drep_is_answered_again() {
    let (mut net, c, s) = Net::established();
    net.client.disconnect(c).unwrap();
    net.run(lose(attr::DREQ, 1));
    assert_eq!(net.client.state(c), Some("DREQ_SENT"));
    net.advance(ms(4608), lose(attr::DREP, 1));
    assert_eq!(net.server.state(s), Some("TIMEWAIT"));
    assert_eq!(net.client.state(c), Some("DREQ_SENT"));
    net.advance(ms(4608), |_, _| false);
    assert_eq!(net.client.state(c), Some("TIMEWAIT"));
    assert!(net.client_events.contains(&Event::Disconnected {
        id: c,
        timed_out: false
    }));
}

#[test]
fn server_side_disconnect() {
    let (mut net, c, s) = Net::established();
    net.server.disconnect(s).unwrap();
    net.run(|_, _| false);
    assert!(net.client_events.contains(&Event::Disconnected {
        id: c,
        timed_out: false
    }));
    assert_eq!(net.server.state(s), Some("TIMEWAIT"));
}

#[test]
fn unreachable_peer_times_out_after_max_retries_naming_it() {
    let mut net = Net::new();
    let c = net.connect();
    net.run(|_, _| true);
    for _ in 0..15 {
        net.advance(ms(4608), |_, _| true);
        assert!(net.client_events.is_empty());
    }
    net.advance(ms(4608), |_, _| true);
    let [Event::TimedOut(t)] = net.client_events[..] else {
        panic!("{:?}", net.client_events);
    };
    assert_eq!(t.id, c);
    assert_eq!(t.stage, Stage::Req);
    assert_eq!(t.attempts, 16);
    assert_eq!(t.port, PORT);
    let text = t.to_string();
    assert!(text.contains("10.0.0.2 port 7174"), "{text}");
    assert!(text.contains("REQ"), "{text}");
    assert_eq!(net.client.state(c), None);
    assert_eq!(net.client.connections(), 0);
}

#[test]
fn no_listener_is_rejected_with_invalid_service_id() {
    let mut net = Net::new();
    let c = net
        .client
        .connect(SERVER_IP, PORT + 1, SRC_PORT, &QpParams::rping(5), &[])
        .unwrap();
    net.run(|_, _| false);
    assert!(matches!(
        net.client_events[..],
        [Event::Rejected { id, reason: rej_reason::INVALID_SERVICE_ID, .. }] if id == c
    ));
    assert_eq!(net.client.connections(), 0);
    assert_eq!(net.server.connections(), 0);
}

#[test]
fn consumer_reject_reaches_the_client_with_its_private_data() {
    let mut net = Net::new();
    let c = net.connect();
    net.run(|_, _| false);
    let Some(Event::ConnectRequest(req)) = net.server_events.first().copied() else {
        panic!()
    };
    net.server.reject(req.id, b"busy").unwrap();
    assert_eq!(net.server.connections(), 0);
    net.run(|_, _| false);
    let [Event::Rejected {
        id,
        reason,
        private_data,
    }] = net.client_events[..]
    else {
        panic!("{:?}", net.client_events)
    };
    assert_eq!((id, reason), (c, rej_reason::CONSUMER_DEFINED));
    assert_eq!(&private_data.as_slice()[..4], b"busy");
    assert_eq!(net.client.connections(), 0);
}

#[test]
fn calls_in_the_wrong_state_are_refused() {
    let (mut net, c, s) = Net::established();
    assert!(matches!(
        net.server.accept(s, &QpParams::rping(1), &[]),
        Err(CmError::InvalidState { op: "accept", .. })
    ));
    assert!(matches!(
        net.client.reject(c, &[]),
        Err(CmError::InvalidState { .. })
    ));
    assert_eq!(
        net.client.disconnect(ConnId(0x4242)),
        Err(CmError::UnknownConnection(ConnId(0x4242)))
    );
    assert!(matches!(
        net.client
            .connect(SERVER_IP, PORT, 1, &QpParams::rping(1 << 24), &[]),
        Err(CmError::BadQpn(_))
    ));
    assert!(matches!(
        net.client
            .connect(SERVER_IP, PORT, 1, &QpParams::rping(1), &[0; 57]),
        Err(CmError::PrivateDataTooLong { len: 57, max: 56 })
    ));
    assert_eq!(
        net.server.listen(PORT),
        Err(CmError::AlreadyListening(PORT))
    );
}

#[test]
fn connection_table_is_bounded() {
    let mut me = Identity::new(1, CLIENT_IP, 1);
    me.limits.max_connections = 2;
    let mut cm = Cm::new(me);
    for _ in 0..2 {
        cm.connect(SERVER_IP, PORT, 1, &QpParams::rping(1), &[])
            .unwrap();
    }
    assert_eq!(
        cm.connect(SERVER_IP, PORT, 1, &QpParams::rping(1), &[]),
        Err(CmError::TableFull { max: 2 })
    );
}

#[test]
fn req_reusing_a_live_qp_is_stale_and_the_old_connection_is_torn_down() {
    let (mut net, c, s) = Net::established();
    // Same node GUID and QPN, new communication ID: `cm_match_req` finds the pair in use.
    let again = net
        .client
        .connect(SERVER_IP, PORT, SRC_PORT, &QpParams::rping(0x11), &[])
        .unwrap();
    net.run(|_, _| false);
    assert!(net.client_events.iter().any(|e| matches!(
        e,
        Event::Rejected { id, reason: rej_reason::STALE_CONN, .. } if *id == again
    )));
    // The server sent a DREQ on the old connection (`ib_send_cm_dreq`), which the client
    // answered.
    assert!(net.client_events.contains(&Event::Disconnected {
        id: c,
        timed_out: false
    }));
    assert!(net.server_events.contains(&Event::Disconnected {
        id: s,
        timed_out: false
    }));
    assert!(!net
        .server_events
        .iter()
        .any(|e| matches!(e, Event::ConnectRequest(_))));
}
