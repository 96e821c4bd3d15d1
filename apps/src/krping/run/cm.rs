//! The krping runs whose queue pairs connect through the connection manager (CM MADs on QP1),
//! as rping's do.

use super::*;

/// Both sides in this process, connected through the connection manager: the server on
/// `server_backend` at `cm.server_ip` listens on `cm.port`, the client on `client_backend` at
/// `cm.client_ip` sends its REQ there; each side serves its address and resolves the other's
/// MAC by ARP. The client disconnects at the end.
pub fn run_pair_through_cm<B: Backend>(
    server_backend: B,
    client_backend: B,
    idle_hooks: [Option<IdleHook>; 2],
    options: Options,
    setup: SideSetup,
    cm: CmSettings,
    out: &mut dyn Write,
) -> Result<Summary, String> {
    let [server_idle, client_idle] = idle_hooks;
    let mut s_side = VerbsSide::open_serving(server_backend, cm.server_ip, options.size, setup)?;
    s_side.port.set_idle(server_idle);
    let mut c_side = VerbsSide::open_serving(client_backend, cm.client_ip, options.size, setup)?;
    c_side.port.set_idle(client_idle);
    let mut server = Server::new(options);
    let mut client = Client::new(options);
    server.start(&mut s_side).map_err(|e| e.to_string())?;
    client.start(&mut c_side).map_err(|e| e.to_string())?;
    let mut s_link = s_side.listen(cm.server_ip, cm.port, None)?;
    let mut c_link = c_side.dial_cm(cm.client_ip, cm.server_ip, cm.port, None)?;
    // Both links turned in turn until both are up.
    let deadline = Instant::now() + CONNECT_PATIENCE;
    loop {
        let c = c_side.turn(&mut c_link)?;
        let s = s_side.turn(&mut s_link)?;
        if (c, s) == (Phase::Up, Phase::Up) {
            break;
        }
        if Instant::now() >= deadline {
            return Err(c_link.stalled(CONNECT_PATIENCE));
        }
    }
    writeln!(out, "server: {}", s_side.endpoint().describe()).map_err(|e| e.to_string())?;
    writeln!(out, "client: {}", c_side.endpoint().describe()).map_err(|e| e.to_string())?;
    let began = Instant::now();
    let outcome = run_pair(
        &mut client,
        &mut c_side,
        &mut server,
        &mut s_side,
        out,
        PATIENCE,
    );
    let elapsed = began.elapsed();
    // The client's DREQ, the server's DREP.
    c_link.disconnect()?;
    let deadline = Instant::now() + PATIENCE;
    loop {
        let c = c_side.turn(&mut c_link)?;
        let s = s_side.turn(&mut s_link)?;
        if (c, s) == (Phase::Down, Phase::Down) {
            break;
        }
        if Instant::now() >= deadline {
            return Err(c_link.stalled(PATIENCE));
        }
    }
    for link in [&s_link, &c_link] {
        writeln!(out, "{}", link.describe()).map_err(|e| e.to_string())?;
    }
    for side in [&s_side, &c_side] {
        if let Some(address) = side.address_report() {
            writeln!(out, "{address}").map_err(|e| e.to_string())?;
        }
    }
    let mut limit_events = 0;
    for (who, side) in [("server", &s_side), ("client", &c_side)] {
        if let Some(stats) = side.srq_stats() {
            writeln!(out, "{who} {stats}").map_err(|e| e.to_string())?;
            limit_events += stats.limit_events;
        }
    }
    let links = s_link
        .close(&mut s_side.port.dev)
        .and(c_link.close(&mut c_side.port.dev));
    let closed = s_side.close().and(c_side.close());
    outcome.map_err(|e| e.to_string())?;
    links.and(closed)?;
    Ok(Summary {
        srq_limit_events: limit_events,
        ..summary(
            options,
            client.pings(),
            client.errors(),
            options.validate,
            elapsed,
        )
    })
}

/// One side in this process through the connection manager, as rping runs: the server at
/// `cm.server_ip` accepts the first REQ on `cm.port`; the client at `cm.client_ip` connects
/// there. Each disconnects when its pings are done (a DREQ, unless the peer's came first).
pub fn run_one_through_cm<B: Backend>(
    backend: B,
    idle: Option<IdleHook>,
    server: bool,
    cm: CmSettings,
    options: Options,
    setup: SideSetup,
    out: &mut dyn Write,
) -> Result<Summary, String> {
    let peer_mac = cm.peer_mac;
    let own = if server { cm.server_ip } else { cm.client_ip };
    let mut side = match peer_mac {
        Some(_) => VerbsSide::open(backend, own.into(), options.size, setup)?,
        None => VerbsSide::open_serving(backend, own, options.size, setup)?,
    };
    side.port.set_idle(idle);
    writeln!(out, "  memory: {}", setup.memory.as_str()).map_err(|e| e.to_string())?;
    let mut srv = Server::new(options);
    let mut cl = Client::new(options);
    let (link, patience) = if server {
        srv.start(&mut side).map_err(|e| e.to_string())?;
        (side.listen(own, cm.port, peer_mac), LISTEN_PATIENCE)
    } else {
        cl.start(&mut side).map_err(|e| e.to_string())?;
        let link = side.dial_cm(own, cm.server_ip, cm.port, peer_mac);
        (link, CONNECT_PATIENCE)
    };
    let mut link = match link {
        Ok(link) => link,
        Err(e) => return Err(side.close().err().unwrap_or(e)),
    };
    let up = side.wait(&mut link, |p| p == Phase::Up, patience);
    let outcome = up.and_then(|()| {
        writeln!(out, "  local address: {}", side.endpoint().describe())
            .map_err(|e| e.to_string())?;
        let began = Instant::now();
        if server {
            let ran = run_side(Role::Server(&mut srv), &mut side, out, PATIENCE);
            ran.map_err(|e| e.to_string())?;
            Ok(summary(options, srv.pings(), 0, false, began.elapsed()))
        } else {
            let ran = run_side(Role::Client(&mut cl), &mut side, out, PATIENCE);
            ran.map_err(|e| e.to_string())?;
            let took = began.elapsed();
            Ok(summary(
                options,
                cl.pings(),
                cl.errors(),
                options.validate,
                took,
            ))
        }
    });
    let described = link.describe();
    let grace = if server {
        CLIENT_HANGS_UP_FIRST
    } else {
        Duration::ZERO
    };
    let hung_up = side.hang_up(link, grace);
    writeln!(out, "{described}").map_err(|e| e.to_string())?;
    if let Some(address) = side.address_report() {
        writeln!(out, "{address}").map_err(|e| e.to_string())?;
    }
    finish(side, outcome.and_then(|s| hung_up.map(|()| s)), out)
}
