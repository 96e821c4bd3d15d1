//! Tests of the krping runs: both sides in one process, the sides apart over TCP and through the
//! connection manager.

use super::*;
use crate::cli::EmuExec;
use crate::rdma::report_count as count;

fn pair(exec: EmuExec) -> (crate::emulated::EmuBackend, crate::emulated::EmuBackend) {
    let config = cxdirect_emu::EmuConfig {
        roce: true,
        ..exec.config()
    };
    let mut ports = open_emulated(&Spec::EmuPair, config).into_iter();
    (ports.next().unwrap(), ports.next().unwrap())
}

const SHALLOW_SRQ: SideSetup = SideSetup {
    memory: MemoryKind::Host,
    srq_depth: 16,
};

fn options(count: u64) -> Options {
    Options {
        size: 256,
        count,
        validate: true,
        verbose: false,
    }
}

/// Each side on its own thread, as two processes would run them, trading endpoints over
/// loopback TCP.
#[test]
fn two_sides_apart_trade_endpoints_over_tcp_and_run() {
    let (a, b) = pair(EmuExec::Threaded);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let tcp = (IpAddr::V4(Ipv4Addr::LOCALHOST), port);
    let server = std::thread::spawn(move || {
        let mut out = Vec::new();
        let exchange = Exchange {
            via: Rendezvous::Tcp(tcp.0, tcp.1),
            server: true,
        };
        let s = run_one(a, None, exchange, options(200), SHALLOW_SRQ, &mut out);
        (s, String::from_utf8(out).unwrap())
    });
    let mut out = Vec::new();
    let exchange = Exchange {
        via: Rendezvous::Tcp(tcp.0, tcp.1),
        server: false,
    };
    let client = run_one(b, None, exchange, options(200), SHALLOW_SRQ, &mut out).unwrap();
    let (server, server_out) = server.join().unwrap();
    let server = server.unwrap();
    assert_eq!(
        (client.count, client.errors, client.validated),
        (200, 0, true)
    );
    assert_eq!((server.count, server.validated), (200, false));
    // 400 messages into each side's SRQ of 16, refilled to 16 after each limit event: at
    // most 16 messages from one refill to the next.
    assert!(client.srq_limit_events >= (400 - 16) / 16, "{client:?}");
    assert!(server.srq_limit_events >= (400 - 16) / 16, "{server:?}");
    let client_out = String::from_utf8(out).unwrap();
    assert!(
        client_out.contains("srq: depth=16 limit=4 "),
        "{client_out}"
    );
    // Each side printed its own endpoint and the other's, the same QPN seen from both.
    let qpn = |text: &str, which: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(which))
            .and_then(|l| l.split("QPN ").nth(1))
            .map(|q| q[..8].to_string())
            .unwrap()
    };
    assert_eq!(qpn(&client_out, "remote"), qpn(&server_out, "local"));
    assert_eq!(qpn(&server_out, "remote"), qpn(&client_out, "local"));
}

fn cm_settings(port: u16) -> CmSettings {
    let v4 = |ip| match ip {
        IpAddr::V4(v4) => v4,
        IpAddr::V6(_) => unreachable!(),
    };
    CmSettings {
        server_ip: v4(SERVER_ADDRESS),
        client_ip: v4(CLIENT_ADDRESS),
        port,
        peer_mac: None,
    }
}

/// Both sides in one process connect through the connection manager (REQ, REP, RTU on
/// each port's QP1), run 100 validated pings over the RC queue pairs it programmed, and
/// disconnect (DREQ, DREP).
#[test]
fn both_sides_connect_through_the_cm_and_ping() {
    let (a, b) = pair(EmuExec::Threaded);
    let mut out = Vec::new();
    let s = run_pair_through_cm(
        a,
        b,
        [None, None],
        options(100),
        SHALLOW_SRQ,
        cm_settings(7174),
        &mut out,
    )
    .unwrap();
    assert_eq!((s.count, s.errors, s.validated), (100, 0, true));
    let out = String::from_utf8(out).unwrap();
    // Each CM sent and received: REQ, RTU, DREQ from the client; REP, DREP from the server.
    let cm_lines: Vec<&str> = out.lines().filter(|l| l.starts_with("cm: ")).collect();
    assert_eq!(cm_lines.len(), 2, "{out}");
    assert!(cm_lines[0].starts_with("cm: 192.168.77.1 "), "{out}");
    assert!(cm_lines.iter().all(|l| !l.contains("mads_sent=0")), "{out}");
}

/// The same on an inline model, the idle hooks running the model between turns.
#[test]
fn an_inline_model_connects_through_the_cm_on_its_idle_hooks() {
    let (a, b) = pair(EmuExec::Inline);
    let hooks = [
        emulated_idle_hook(&a, EmuExec::Inline),
        emulated_idle_hook(&b, EmuExec::Inline),
    ];
    let own_queue = SideSetup {
        memory: MemoryKind::Host,
        srq_depth: 0,
    };
    let mut out = Vec::new();
    let s = run_pair_through_cm(
        a,
        b,
        hooks,
        options(100),
        own_queue,
        cm_settings(1),
        &mut out,
    )
    .unwrap();
    assert_eq!((s.count, s.errors), (100, 0));
}

/// Each side on its own thread, as two processes run them: the server listens, the client
/// connects by the server's address and port, each names the other's MAC.
#[test]
fn two_sides_apart_connect_through_the_cm() {
    let (a, b) = pair(EmuExec::Threaded);
    // The pair's MACs: the default, and the default with its last bit flipped.
    let a_mac = cxdirect_emu::EmuConfig::default().mac;
    let mut b_mac = a_mac;
    b_mac[5] ^= 1;
    let server = std::thread::spawn(move || {
        let mut out = Vec::new();
        let cm = CmSettings {
            peer_mac: Some(b_mac),
            ..cm_settings(7174)
        };
        let exchange = Exchange {
            via: Rendezvous::Cm(cm),
            server: true,
        };
        let s = run_one(a, None, exchange, options(100), SHALLOW_SRQ, &mut out);
        (s, String::from_utf8(out).unwrap())
    });
    let mut out = Vec::new();
    let cm = CmSettings {
        peer_mac: Some(a_mac),
        ..cm_settings(7174)
    };
    let exchange = Exchange {
        via: Rendezvous::Cm(cm),
        server: false,
    };
    let client = run_one(b, None, exchange, options(100), SHALLOW_SRQ, &mut out).unwrap();
    let (server, server_out) = server.join().unwrap();
    let server = server.unwrap_or_else(|e| panic!("{e}\n{server_out}"));
    assert_eq!(
        (client.count, client.errors, client.validated),
        (100, 0, true)
    );
    assert_eq!(server.count, 100);
    let client_out = String::from_utf8(out).unwrap();
    assert!(client_out.contains("cm: 192.168.77.2 "), "{client_out}");
}

/// Each side on its own thread with no MAC given: each serves its address, the client
/// resolves the server's MAC by ARP before its REQ, the server learns the client's from that
/// ARP request.
#[test]
fn two_sides_apart_find_each_other_by_arp() {
    let (a, b) = pair(EmuExec::Threaded);
    let server = std::thread::spawn(move || {
        let mut out = Vec::new();
        let exchange = Exchange {
            via: Rendezvous::Cm(cm_settings(7174)),
            server: true,
        };
        let s = run_one(a, None, exchange, options(100), SHALLOW_SRQ, &mut out);
        (s, String::from_utf8(out).unwrap())
    });
    let mut out = Vec::new();
    let exchange = Exchange {
        via: Rendezvous::Cm(cm_settings(7174)),
        server: false,
    };
    let client = run_one(b, None, exchange, options(100), SHALLOW_SRQ, &mut out);
    let client_out = String::from_utf8(out).unwrap();
    let client = client.unwrap_or_else(|e| panic!("{e}\n{client_out}"));
    let (server, server_out) = server.join().unwrap();
    let server = server.unwrap_or_else(|e| panic!("{e}\n{server_out}"));
    assert_eq!(
        (client.count, client.errors, client.validated),
        (100, 0, true)
    );
    assert_eq!(server.count, 100);
    // The client asked and was answered; the server answered and learned from it. How many
    // requests the client sent depends on when the server's thread began serving (a request
    // sent before is asked again on the neighbour table's timer), so only "at least one" holds.
    let client_address = address_line(&client_out);
    let server_address = address_line(&server_out);
    assert!(
        client_address.starts_with("address: 192.168.77.2 "),
        "{client_out}"
    );
    assert_eq!(count(client_address, "arp_replies"), 0, "{client_out}");
    assert!(count(client_address, "arp_requests") >= 1, "{client_out}");
    assert_eq!(count(client_address, "neighbours"), 1, "{client_out}");
    assert!(count(server_address, "arp_replies") >= 1, "{server_out}");
    assert_eq!(count(server_address, "arp_requests"), 0, "{server_out}");
    assert_eq!(count(server_address, "echo_replies"), 0, "{server_out}");
    assert_eq!(count(server_address, "neighbours"), 1, "{server_out}");
}

/// A run's `address:` report line.
fn address_line(out: &str) -> &str {
    out.lines()
        .find(|l| l.starts_with("address:"))
        .unwrap_or_else(|| panic!("no address line in {out}"))
}

/// A client whose server's address nobody answers by ARP gives up with an error naming it,
/// after the neighbour table's requests, and sends no REQ.
#[test]
fn an_address_no_one_answers_is_named() {
    let (_a, b) = pair(EmuExec::Threaded);
    let cm = CmSettings {
        server_ip: Ipv4Addr::new(192, 168, 77, 9),
        ..cm_settings(7174)
    };
    let mut side = VerbsSide::open_serving(b, cm.client_ip, 64, SHALLOW_SRQ).unwrap();
    let mut link = side
        .dial_cm(cm.client_ip, cm.server_ip, cm.port, None)
        .unwrap();
    let e = side
        .wait(&mut link, |p| p == Phase::Up, Duration::from_secs(10))
        .unwrap_err();
    assert!(
        e.contains("192.168.77.9 did not answer ARP: 3 requests sent"),
        "{e}"
    );
    assert!(
        link.describe().contains("mads_sent=0"),
        "{}",
        link.describe()
    );
    link.close(&mut side.port.dev).unwrap();
    side.close().unwrap();
}

/// A client whose REQ nobody answers gives up with an error naming the address.
#[test]
fn an_unanswered_connection_request_names_the_peer() {
    let (_a, b) = pair(EmuExec::Threaded);
    let cm = CmSettings {
        server_ip: Ipv4Addr::new(192, 168, 77, 9),
        peer_mac: Some([2, 0, 0, 0, 0, 9]),
        ..cm_settings(7174)
    };
    let mut side = VerbsSide::open(b, cm.client_ip.into(), 64, SHALLOW_SRQ).unwrap();
    let mut link = side
        .dial_cm(
            cm.client_ip,
            cm.server_ip,
            cm.port,
            Some([2, 0, 0, 0, 0, 9]),
        )
        .unwrap();
    let e = side
        .wait(&mut link, |p| p == Phase::Up, Duration::from_millis(300))
        .unwrap_err();
    assert!(e.contains("connecting to 192.168.77.9 port 7174"), "{e}");
    assert!(e.contains("nothing answered"), "{e}");
    link.close(&mut side.port.dev).unwrap();
    side.close().unwrap();
}

#[test]
fn an_inline_model_runs_through_its_idle_hooks() {
    let (a, b) = pair(EmuExec::Inline);
    let hooks = [
        emulated_idle_hook(&a, EmuExec::Inline),
        emulated_idle_hook(&b, EmuExec::Inline),
    ];
    assert!(hooks.iter().all(Option::is_some));
    let own_queue = SideSetup {
        memory: MemoryKind::Host,
        srq_depth: 0,
    };
    let mut out = Vec::new();
    let s = run_pair_on(a, b, hooks, options(50), own_queue, &mut out).unwrap();
    assert_eq!((s.count, s.errors, s.srq_limit_events), (50, 0, 0));
    assert!(!String::from_utf8(out).unwrap().contains("srq:"));
}

/// An SRQ of one receive is empty after each message: each receive after the first is
/// refilled on a limit event. On an inline model a message's completion is there at the
/// first poll after the peer's post, before any look at the events, so the side finds the
/// SRQ empty and sleeps on the eventfd until the event.
#[test]
fn an_srq_of_one_receive_waits_for_each_limit_event_on_the_eventfd() {
    let (a, b) = pair(EmuExec::Inline);
    let hooks = [
        emulated_idle_hook(&a, EmuExec::Inline),
        emulated_idle_hook(&b, EmuExec::Inline),
    ];
    let one = SideSetup {
        memory: MemoryKind::Host,
        srq_depth: 1,
    };
    let mut out = Vec::new();
    let s = run_pair_on(a, b, hooks, options(30), one, &mut out).unwrap();
    assert_eq!((s.count, s.errors), (30, 0));
    let out = String::from_utf8(out).unwrap();
    for who in ["server", "client"] {
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("{who} srq: ")))
            .unwrap_or_else(|| panic!("no {who} srq line in {out}"));
        let value = |key: &str| -> u64 {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
                .unwrap()
                .parse()
                .unwrap()
        };
        // 60 messages each way: the first into the first fill, each of the others into a
        // refill of one, after the limit event of the message before (the last message's
        // event may come after the run).
        assert_eq!(value("refilled"), 59, "{line}");
        assert!((59..=60).contains(&value("limit_events")), "{line}");
        assert!(value("dry_waits") > 0, "{line}");
        assert!(value("interrupts") > 0, "{line}");
    }
    assert!(s.srq_limit_events >= 2 * 59, "{s:?}");
}
