//! Running one side against perftest on a PCI function, or both sides on emu-pair, each on
//! its own thread over loopback TCP, as two hosts would run them.

use super::session::{run_session, Agreed, Channel, Measured, Outcome, Role, Test};
use super::side::{path_mtu, PerftestSide};
use crate::emulated::{open_emulated, Spec};
use crate::rdma::endpoint::CONNECT_PATIENCE;
use crate::rdma::verbs::{emulated_idle_hook, IdleHook};
use crate::rdma_perf::cli::{Cli, PerftestPlan, PerftestSides, Plan};
use crate::rdma_perf::{bw_summary, lat_summary, BwReport, Op};
use crate::rdma_perf::{BW_HEADER, LAT_HEADER, RESULT_LINE};
use cxdirect::Backend;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The client's port address on emu-pair.
pub const CLIENT_ADDRESS: Ipv4Addr = Ipv4Addr::new(192, 168, 78, 1);
/// The server's port address on emu-pair.
pub const SERVER_ADDRESS: Ipv4Addr = Ipv4Addr::new(192, 168, 78, 2);
/// Longest a side waits for the peer's next message: perftest waits for ever, but a run
/// that long has gone wrong.
const READ_PATIENCE: Duration = Duration::from_secs(300);

/// Runs what `pp` says; returns the lines to print (each side's, client first on emu-pair).
pub fn run(cli: &Cli, plan: &Plan, pp: &PerftestPlan) -> Result<Vec<String>, String> {
    match (pp.sides, cli.devices.devices.as_slice()) {
        (PerftestSides::Pair, _) => {
            let exec = cli.devices.emu_exec;
            let config = cxdirect_emu::EmuConfig {
                roce: true,
                ..cli.devices.emu_config()
            };
            let mut ports = open_emulated(&Spec::EmuPair, config).into_iter();
            let (Some(a), Some(b)) = (ports.next(), ports.next()) else {
                return Err("emu-pair gave fewer than two ports".into());
            };
            let listener = TcpListener::bind((pp.address, 0)).map_err(|e| e.to_string())?;
            let at = listener.local_addr().map_err(|e| e.to_string())?;
            let (to_client, from_server) = mpsc::channel();
            let (to_server, from_client) = mpsc::channel();
            let (plan_s, test) = (*plan, pp.test);
            let server = std::thread::spawn(move || {
                let hook = emulated_idle_hook(&a, exec);
                let listener = Ok(listener);
                let macs = PeerMac::Trade(to_client, from_client);
                one_side(a, hook, SERVER_ADDRESS, macs, listener, at, test, &plan_s)
            });
            let hook = emulated_idle_hook(&b, exec);
            let macs = PeerMac::Trade(to_server, from_server);
            let client = one_side(b, hook, CLIENT_ADDRESS, macs, Err(()), at, test, plan);
            let server = server
                .join()
                .map_err(|_| "the server side panicked".to_string())?;
            let mut lines = client.map_err(|e| format!("client: {e}"))?;
            lines.extend(server.map_err(|e| format!("server: {e}"))?);
            Ok(lines)
        }
        (PerftestSides::One(role), [spec]) => {
            let backend = crate::vfio_open(spec, cli.devices.iommu_mode.as_str())
                .map_err(|e| format!("{spec}: {e}"))?;
            let local = pp.local_address.ok_or("--local-address is needed")?;
            let at = SocketAddr::new(pp.address, pp.port);
            let listener = match role {
                Role::Server => Ok(TcpListener::bind(at).map_err(|e| format!("{at}: {e}"))?),
                Role::Client => Err(()),
            };
            // Without --peer-mac the peer's MAC is resolved by ARP once its keys name it.
            let macs = PeerMac::Given(pp.peer_mac);
            one_side(backend, None, local, macs, listener, at, pp.test, plan)
        }
        _ => Err("--perftest: give emu-pair, or one PCI address".into()),
    }
}

/// How a side learns its peer's MAC address.
enum PeerMac {
    /// Traded with the other side in this process (this side's out, the peer's in).
    Trade(mpsc::Sender<[u8; 6]>, mpsc::Receiver<[u8; 6]>),
    /// Given; `None`: resolved by ARP (the side serves its own address).
    Given(Option<[u8; 6]>),
}

/// One side: opens `backend` as `address`, learns the peer's MAC as `macs` says, accepts on
/// `listener` (server) or connects to `at` (client), runs the session and returns its lines.
#[allow(clippy::too_many_arguments)]
fn one_side<B: Backend>(
    backend: B,
    idle: Option<IdleHook>,
    address: Ipv4Addr,
    macs: PeerMac,
    listener: Result<TcpListener, ()>,
    at: SocketAddr,
    test: Test,
    plan: &Plan,
) -> Result<Vec<String>, String> {
    let role = if listener.is_ok() {
        Role::Server
    } else {
        Role::Client
    };
    let given = match &macs {
        PeerMac::Trade(..) => Some([0; 6]),
        PeerMac::Given(mac) => *mac,
    };
    let mut side = PerftestSide::open(
        backend,
        IpAddr::V4(address),
        (test, role),
        plan,
        given,
        idle,
    )?;
    let peer_mac = match macs {
        PeerMac::Trade(to_peer, from_peer) => {
            let _ = to_peer.send(side.mac());
            from_peer
                .recv()
                .map(|mac| side.set_peer_mac(mac))
                .map_err(|_| "the peer's MAC never came".to_string())
        }
        PeerMac::Given(_) => Ok(()),
    };
    let stream = peer_mac.and_then(|()| match listener {
        Ok(l) => l.accept().map(|(s, _)| s).map_err(|e| format!("{at}: {e}")),
        Err(()) => dial(at),
    });
    let outcome = stream.and_then(|stream| {
        let _ = stream.set_nodelay(true);
        let _ = stream.set_read_timeout(Some(READ_PATIENCE));
        let mut channel = Channel::new(stream, role);
        let mtu = side.ibv_mtu();
        run_session(&mut channel, test, mtu, &mut side).map_err(|e| e.to_string())
    });
    let settings = outcome.as_ref().ok().map(|o| side.settings(&o.agreed));
    let address = side.address_report();
    let closed = side.close();
    let outcome = outcome?;
    closed?;
    let mut lines = report(plan, test, role, &outcome, settings.unwrap_or_default())?;
    lines.extend(address);
    Ok(lines)
}

/// Connects to perftest's server, retrying while nothing listens there yet.
fn dial(at: SocketAddr) -> Result<TcpStream, String> {
    let deadline = Instant::now() + CONNECT_PATIENCE;
    loop {
        match TcpStream::connect(at) {
            Ok(s) => return Ok(s),
            Err(e)
                if e.kind() == std::io::ErrorKind::ConnectionRefused
                    && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => return Err(format!("{at}: {e}")),
        }
    }
}

/// The lines of one side: perftest's title and settings, the addresses, the report in its
/// columns, the summary, and a `perftest:` line naming the exchange.
fn report(
    plan: &Plan,
    test: Test,
    role: Role,
    o: &Outcome,
    settings: Vec<String>,
) -> Result<Vec<String>, String> {
    let mut lines = vec![RESULT_LINE.to_string(), crate::rdma_perf::run::title(plan)];
    lines.extend(settings);
    for (l, r) in o.local.iter().zip(&o.remote) {
        lines.push(format!(" local address: {}", l.describe()));
        lines.push(format!(" remote address: {}", r.describe()));
    }
    lines.push(RESULT_LINE.to_string());
    let qps = u64::from(plan.qps);
    let (header, row, summary) = match (o.measured, o.peer_report) {
        (Some(Measured::Lat(r)), _) => (LAT_HEADER, r.to_string(), lat_summary(Op::Write, 1, &r)),
        (Some(Measured::Bw(r)), _) => (BW_HEADER, r.to_string(), bw_summary(plan.op, qps, &r)),
        (None, Some(w)) => {
            let r = BwReport {
                size: w.size,
                iters: w.iters,
                peak_gbps: w.bw_peak,
                avg_gbps: w.bw_avg,
                msg_rate_mpps: w.msg_rate,
            };
            (BW_HEADER, r.to_string(), bw_summary(plan.op, qps, &r))
        }
        (None, None) => return Err("the run ended with no report".into()),
    };
    lines.extend([
        header.to_string(),
        row,
        RESULT_LINE.to_string(),
        summary,
        exchange_line(test, role, &o.agreed),
    ]);
    Ok(lines)
}

/// `perftest: …`: what the exchange settled, for a script to check.
fn exchange_line(test: Test, role: Role, a: &Agreed) -> String {
    let role = match role {
        Role::Server => "server",
        Role::Client => "client",
    };
    format!(
        "perftest: test={} role={role} peer_version={} mtu={} cycle_buffer={} cache_line={}",
        test.program(),
        a.peer_version.text,
        path_mtu(a.mtu).map_or(0, |m| m.bytes()),
        a.cycle_buffer,
        a.cache_line
    )
}

#[cfg(test)]
mod arp_tests {
    use super::*;
    use crate::cli::EmuExec;
    use crate::rdma::report_count as count;
    use crate::rdma_perf::Mode;

    /// Both sides on emu-pair as on two hosts with no MAC given: each serves its address from
    /// a thread and finds the other's MAC by ARP from the GID in its keys.
    #[test]
    fn sides_find_each_others_mac_by_arp_from_the_keys() {
        let config = cxdirect_emu::EmuConfig {
            roce: true,
            ..EmuExec::Threaded.config()
        };
        let mut ports = open_emulated(&Spec::EmuPair, config).into_iter();
        let (a, b) = (ports.next().unwrap(), ports.next().unwrap());
        let plan = Plan {
            op: Op::Write,
            mode: Mode::Bw,
            size: 4096,
            iters: 200,
            inline: 0,
            qps: 1,
        };
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let at = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let macs = PeerMac::Given(None);
            let (test, listener) = (Test::WriteBw, Ok(listener));
            one_side(a, None, SERVER_ADDRESS, macs, listener, at, test, &plan)
        });
        let client = one_side(
            b,
            None,
            CLIENT_ADDRESS,
            PeerMac::Given(None),
            Err(()),
            at,
            Test::WriteBw,
            &plan,
        );
        let server = server.join().unwrap();
        let client = client.unwrap();
        let server = server.unwrap();
        let client_address = client.iter().find(|l| l.starts_with("address:")).unwrap();
        let server_address = server.iter().find(|l| l.starts_with("address:")).unwrap();
        // The first to resolve asked; the other learned the asker from that request and
        // answered it, so each holds the other and one request was answered.
        for line in [client_address, server_address] {
            assert!(line.contains(" neighbours=1 "), "{line}");
        }
        let requests =
            count(client_address, "arp_requests") + count(server_address, "arp_requests");
        let replies = count(client_address, "arp_replies") + count(server_address, "arp_replies");
        assert!(
            requests >= 1 && replies >= 1,
            "{client_address} / {server_address}"
        );
        assert!(
            client
                .iter()
                .any(|l| l.starts_with("summary: op=write mode=bw size=4096 iters=200")),
            "{client:?}"
        );
    }
}
