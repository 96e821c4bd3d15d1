//! The connection manager's classes of the fault matrix: two emulated functions, each with its
//! QP1 carrying CM MADs ([`cxdirect::cm::Cm`]) and one RC queue pair, on a wire that the class
//! cuts.
//!
//! - `cm_unreachable`: a REQ into a cut wire is sent again on the CM's timers (rdma_cm's
//!   4.6 s, 15 retries) and ends in an error naming the address and port; once the wire is
//!   mended the same client connects.
//! - `cm_peer_vanishes`: an established connection's peer goes away, by a DREQ (even
//!   injections) or silently, its wire cut, so that the client's own DREQ goes unanswered (odd
//!   ones). The client's queue pair is moved to error and every request it had posted comes
//!   back flushed; both queue pairs are reset and connected again through the CM.
//!
//! The CM's clock is the wall clock plus the time skipped: where nothing can happen but a CM
//! timer, the clock jumps to its deadline, so a class waits the CM's minutes in milliseconds
//! while the messages, their number and their order stay what the timers make them.
//!
//! Accounting, per class: `sent` and `received` count CM MADs handed to QP1 and MADs that
//! reached the other CM, `accounted` MADs the cut wire dropped (`cm_unreachable`), or, for
//! `cm_peer_vanishes`, work requests posted, completed, and completed flushed; `leaked` is
//! connections still held once timewait is over, and work requests never completed.

use super::{ClassReport, FaultClass};
use cxdirect::cm::{Cm, ConnId, Event, Identity, QpParams, Stage};
use cxdirect::rdma::WcStatus;
use cxdirect_emu::wire::{Impairments, PortId, Wire, WireConfig};
use cxdirect_emu::{Device as Model, EmuConfig, ExecMode};
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::{Duration, Instant};

const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(192, 168, 36, 2);
const SERVER_IP: Ipv4Addr = Ipv4Addr::new(192, 168, 36, 1);
const SERVER_GUID: u64 = 0x0002_c903_0000_0a02;
/// rping's port.
const PORT: u16 = 7174;
/// Receives the client keeps posted while connected: what a vanished peer leaves to flush.
const RECEIVES: usize = 4;
/// Bytes of one receive slot, and of the one SEND that proves a connection works.
const SLOT: usize = 64;
/// Longest real time a handshake or a flush may take.
const PATIENCE: Duration = Duration::from_secs(10);
/// Longest a clock jump waits for the MADs on the wire to land.
const SETTLE: Duration = Duration::from_millis(200);

mod node;
use node::{Clock, Node};

struct Rig {
    client: Node,
    server: Node,
    models: [Model; 2],
    wire: Arc<Wire>,
    cut: Arc<Wire>,
    clock: Clock,
    /// MADs the two CMs handed to QP1 before the class began.
    base_sent: u64,
    base_received: u64,
}

fn new_wire(impairments: Impairments) -> Result<Arc<Wire>, String> {
    Wire::pair_with(WireConfig {
        impairments,
        ..WireConfig::default()
    })
    .map(Arc::new)
    .map_err(|e| format!("wire: {e}"))
}

impl Rig {
    fn new() -> Result<Self, String> {
        let cfg = EmuConfig {
            roce: true,
            exec: ExecMode::Threaded,
            ..EmuConfig::default()
        };
        let mut cfg_server = cfg.clone();
        cfg_server.mac[5] ^= 1;
        let (mc, ms) = (Model::new(cfg), Model::new(cfg_server));
        let wire = new_wire(Impairments::NONE)?;
        let cut = new_wire(Impairments {
            drop_every: 1,
            ..Impairments::NONE
        })?;
        mc.attach(wire.clone(), PortId::A, &[&ms]);
        ms.attach(wire.clone(), PortId::B, &[&mc]);
        let mut client = Node::open(&mc, "client", CLIENT_IP, 0x0002_c903_0000_0a01)?;
        let mut server = Node::open(&ms, "server", SERVER_IP, SERVER_GUID)?;
        client.peer_mac = server.port.roce.mac();
        server.peer_mac = client.port.roce.mac();
        server
            .cm
            .listen(PORT)
            .map_err(|e| format!("listening on {PORT}: {e}"))?;
        Ok(Self {
            client,
            server,
            models: [mc, ms],
            wire,
            cut,
            clock: Clock {
                start: Instant::now(),
                skipped: Duration::ZERO,
            },
            base_sent: 0,
            base_received: 0,
        })
    }

    fn attach(&self, wire: &Arc<Wire>) {
        let [mc, ms] = &self.models;
        mc.attach(wire.clone(), PortId::A, &[ms]);
        ms.attach(wire.clone(), PortId::B, &[mc]);
    }

    fn turn(&mut self) -> Result<(), String> {
        let now = self.clock.now();
        self.client.turn(now).map_err(|e| format!("client: {e}"))?;
        self.server.turn(now).map_err(|e| format!("server: {e}"))
    }

    /// Turns until `found` picks an event of the client or server (true: the server's), or
    /// [`PATIENCE`] passes; with `jump`, an idle CM's clock jumps to its next deadline.
    fn until<T>(
        &mut self,
        jump: bool,
        mut found: impl FnMut(&mut Self) -> Result<Option<T>, String>,
    ) -> Result<T, String> {
        let start = Instant::now();
        loop {
            self.turn()?;
            if let Some(t) = found(self)? {
                return Ok(t);
            }
            if start.elapsed() > PATIENCE {
                return Err(format!(
                    "nothing came in {PATIENCE:?}: client {:?} server {:?}",
                    self.client.events, self.server.events
                ));
            }
            if jump {
                // Let what is on the wire land first (every MAD sent received, or dropped by
                // the cut wire; up to SETTLE on a loaded machine, where the model's thread may
                // not have run for a while), then skip to the next timer: a jump past a MAD
                // still in flight would fire its sender's retry and count it as lost.
                let settle = Instant::now();
                loop {
                    std::thread::sleep(Duration::from_millis(1));
                    self.turn()?;
                    if let Some(t) = found(self)? {
                        return Ok(t);
                    }
                    let (sent, received) = self.mads();
                    if received + self.cut_drops()? >= sent || settle.elapsed() > SETTLE {
                        break;
                    }
                }
                let next = [
                    self.client.cm.next_deadline(),
                    self.server.cm.next_deadline(),
                ];
                if let Some(d) = next.into_iter().flatten().min() {
                    self.clock.jump_to(d);
                }
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Connects the two queue pairs through the CM (the server accepts); returns the
    /// client's and the server's connection.
    fn connect(&mut self) -> Result<(ConnId, ConnId), String> {
        let params = QpParams::rping(self.client.qp.qpn());
        let src_port = 49152 + (self.clock.now().as_micros() % 16000) as u16;
        let id = self
            .client
            .cm
            .connect(SERVER_IP, PORT, src_port, &params, b"")
            .map_err(|e| format!("connect: {e}"))?;
        let qpn = self.server.qp.qpn();
        let (mut client_up, mut server_up) = (false, None);
        let sid = self.until(false, |rig| {
            for e in std::mem::take(&mut rig.server.events) {
                match e {
                    Event::ConnectRequest(req) => {
                        let params = req.negotiate(QpParams::rping(qpn));
                        let attrs = rig
                            .server
                            .cm
                            .accept(req.id, &params, b"")
                            .map_err(|e| format!("accept: {e}"))?;
                        rig.server.program(&attrs)?;
                    }
                    Event::Established { id, .. } => server_up = Some(id),
                    _ => {}
                }
            }
            for e in std::mem::take(&mut rig.client.events) {
                match e {
                    Event::Established { id: c, qp, .. } if c == id => {
                        rig.client.program(&qp)?;
                        client_up = true;
                    }
                    Event::Rejected { id: c, .. } if c == id => {
                        return Err(format!("connect: {e:?}"))
                    }
                    Event::TimedOut(t) if t.id == id => return Err(format!("connect: {t}")),
                    _ => {}
                }
            }
            Ok(server_up.filter(|_| client_up))
        })?;
        Ok((id, sid))
    }

    /// One SEND from the client to the server, checked: both complete successfully.
    fn prove(&mut self) -> Result<(), String> {
        self.server.post_recv(0)?;
        self.client.post_send(b"the connection works")?;
        let (mut sent, mut received) = (false, false);
        let start = Instant::now();
        while !(sent && received) {
            for wc in self.client.completions()? {
                if wc.status != WcStatus::Success {
                    return Err(format!("client: {wc:?}"));
                }
                sent = true;
            }
            for wc in self.server.completions()? {
                if wc.status != WcStatus::Success || wc.byte_len != 20 {
                    return Err(format!("server: {wc:?}"));
                }
                received = true;
            }
            if start.elapsed() > PATIENCE {
                return Err("the SEND over the new connection did not complete".into());
            }
            std::thread::yield_now();
        }
        Ok(())
    }

    /// Both queue pairs back to reset, every posted request's flush taken.
    fn reset_queue_pairs(&mut self) -> Result<u64, String> {
        let mut flushed = 0;
        for node in [&mut self.client, &mut self.server] {
            let Node { port, qp, .. } = node;
            qp.reset(&mut port.dev, &mut port.cq)
                .or_else(|_| qp.reset(&mut port.dev, &mut port.cq))
                .map_err(|e| format!("resetting a queue pair: {e}"))?;
            flushed += node
                .completions()?
                .iter()
                .filter(|wc| wc.status == WcStatus::WrFlushErr)
                .count() as u64;
        }
        Ok(flushed)
    }

    /// Runs every timer out (timewait included) so connection slots are freed.
    fn expire(&mut self) -> Result<(), String> {
        self.clock.skipped += Duration::from_secs(3600);
        self.turn()?;
        self.client.events.clear();
        self.server.events.clear();
        Ok(())
    }

    fn mads(&self) -> (u64, u64) {
        let (c, s) = (self.client.gsi.stats(), self.server.gsi.stats());
        (c.sent + s.sent, c.received + s.received)
    }

    fn cut_drops(&self) -> Result<u64, String> {
        let mut n = 0;
        for port in [PortId::A, PortId::B] {
            n += self
                .cut
                .impairment_counters(port)
                .map_err(|e| e.to_string())?
                .dropped;
        }
        Ok(n)
    }

    fn finish(mut self, report: &mut ClassReport) -> Result<(), String> {
        self.expire()?;
        report.leaked += (self.client.cm.connections() + self.server.cm.connections()) as u64
            + self.client.outstanding
            + self.server.outstanding;
        let closed = self.client.close();
        self.server.close().and(closed)
    }
}

/// `cm_unreachable`: see the module's documentation.
fn unreachable(rig: &mut Rig, report: &mut ClassReport, n: u32) -> Result<(), String> {
    for i in 0..n {
        let cut = rig.cut.clone();
        rig.attach(&cut);
        let params = QpParams::rping(rig.client.qp.qpn());
        let id = rig
            .client
            .cm
            .connect(SERVER_IP, PORT, 50000 + i as u16, &params, b"")
            .map_err(|e| format!("connect: {e}"))?;
        let t = rig.until(true, |rig| {
            Ok(rig.client.events.iter().find_map(|e| match e {
                Event::TimedOut(t) if t.id == id => Some(*t),
                _ => None,
            }))
        })?;
        rig.client.events.clear();
        report.injections += 1;
        report.evidence += u64::from(t.attempts);
        let text = t.to_string();
        let names = format!("{SERVER_IP} port {PORT}");
        if t.stage != Stage::Req || !text.contains(&names) {
            return Err(format!("the error does not name {names}: {text}"));
        }
        // rdma_cm's timers: the REQ and 15 retries, 4.6 s apart.
        if t.attempts != 16 || t.waited_ms < 15 * 4608 {
            return Err(format!("gave up too early: {text}"));
        }
        if rig.client.cm.connections() != 0 {
            return Err("the timed-out connection kept its slot".into());
        }
        let seen = Instant::now();
        let wire = rig.wire.clone();
        rig.attach(&wire);
        rig.reset_queue_pairs()?;
        let (c, _) = rig.connect()?;
        rig.prove()?;
        report.recoveries += 1;
        report.recover_us.push(seen.elapsed().as_secs_f64() * 1e6);
        rig.client
            .cm
            .disconnect(c)
            .map_err(|e| format!("disconnect: {e}"))?;
        rig.until(true, |rig| {
            let down = |n: &Node| {
                n.events
                    .iter()
                    .any(|e| matches!(e, Event::Disconnected { .. }))
            };
            Ok((down(&rig.client) && down(&rig.server)).then_some(()))
        })?;
        rig.expire()?;
    }
    let (sent, received) = rig.mads();
    report.sent = sent - rig.base_sent;
    report.received = received - rig.base_received;
    report.accounted = rig.cut_drops()?;
    report.lost_beyond_flushed = report
        .sent
        .saturating_sub(report.received + report.accounted);
    report.duplicates = report
        .received
        .saturating_sub(report.sent - report.accounted.min(report.sent));
    Ok(())
}

/// `cm_peer_vanishes`: see the module's documentation.
fn peer_vanishes(rig: &mut Rig, report: &mut ClassReport, n: u32) -> Result<(), String> {
    let (mut posted, mut completed, mut flushed) = (0u64, 0u64, 0u64);
    let (mut c, mut s) = rig.connect()?;
    rig.prove()?;
    // Each proof is a receive and a SEND, both completed successfully.
    let mut proofs = 1u64;
    for i in 0..n {
        for slot in 1..=RECEIVES {
            rig.client.post_recv(slot)?;
        }
        posted += RECEIVES as u64;
        let silent = i % 2 == 1;
        if silent {
            // The peer is gone without a word: the wire is cut, a SEND is left retrying, and
            // the client's application hangs up; its DREQ goes unanswered.
            let cut = rig.cut.clone();
            rig.attach(&cut);
            rig.client.post_send(b"into the void")?;
            posted += 1;
            rig.client
                .cm
                .disconnect(c)
                .map_err(|e| format!("disconnect: {e}"))?;
        } else {
            rig.server
                .cm
                .disconnect(s)
                .map_err(|e| format!("server disconnect: {e}"))?;
        }
        let timed_out = rig.until(silent, |rig| {
            let server_down = silent
                || rig
                    .server
                    .events
                    .iter()
                    .any(|e| matches!(e, Event::Disconnected { id, .. } if *id == s));
            Ok(rig
                .client
                .events
                .iter()
                .find_map(|e| match e {
                    Event::Disconnected { id, timed_out } if *id == c => Some(*timed_out),
                    _ => None,
                })
                .filter(|_| server_down))
        })?;
        if timed_out != silent {
            return Err(format!("injection {i}: disconnect timed_out={timed_out}"));
        }
        report.injections += 1;
        let seen = Instant::now();
        // The client's queue pair to error: every request it posted comes back.
        let Node { port, qp, .. } = &mut rig.client;
        qp.to_error(&mut port.dev)
            .map_err(|e| format!("moving the queue pair to error: {e}"))?;
        let start = Instant::now();
        while rig.client.outstanding > 0 {
            for wc in rig.client.completions()? {
                completed += 1;
                if wc.status != WcStatus::Success {
                    flushed += 1;
                }
            }
            if start.elapsed() > PATIENCE {
                return Err(format!(
                    "{} requests never completed after the error",
                    rig.client.outstanding
                ));
            }
            std::thread::yield_now();
        }
        let wire = rig.wire.clone();
        rig.attach(&wire);
        if silent {
            // The peer that vanished comes back as a new process: a new CM, listening again
            // (the old one's connection would make the client's next REQ stale).
            rig.server.cm = Cm::new(Identity::new(SERVER_GUID, SERVER_IP, u64::from(i) + 1));
            rig.server
                .cm
                .listen(PORT)
                .map_err(|e| format!("listening on {PORT}: {e}"))?;
        }
        report.evidence += rig.reset_queue_pairs()?;
        rig.expire()?;
        (c, s) = rig.connect()?;
        rig.prove()?;
        proofs += 1;
        report.recoveries += 1;
        report.recover_us.push(seen.elapsed().as_secs_f64() * 1e6);
    }
    // The last connection ends as any should, so that nothing is held at the end.
    rig.client
        .cm
        .disconnect(c)
        .map_err(|e| format!("disconnect: {e}"))?;
    rig.until(false, |rig| {
        let down = |n: &Node, id: ConnId| {
            n.events
                .iter()
                .any(|e| matches!(e, Event::Disconnected { id: d, .. } if *d == id))
        };
        Ok((down(&rig.client, c) && down(&rig.server, s)).then_some(()))
    })?;
    report.evidence += flushed;
    report.sent = posted + 2 * proofs;
    report.received = completed - flushed + 2 * proofs;
    report.accounted = flushed;
    report.lost_beyond_flushed = posted - completed;
    Ok(())
}

/// Runs CM class `class` with `injections` faults.
pub(super) fn run_class(class: FaultClass, injections: u32) -> Result<ClassReport, String> {
    let mut rig = Rig::new()?;
    let mut report = ClassReport {
        name: class.name(),
        ..ClassReport::default()
    };
    (rig.base_sent, rig.base_received) = rig.mads();
    match class {
        FaultClass::CmUnreachable => unreachable(&mut rig, &mut report, injections)?,
        FaultClass::CmPeerVanishes => peer_vanishes(&mut rig, &mut report, injections)?,
        _ => return Err(format!("{} is not a CM class", class.name())),
    }
    rig.finish(&mut report)?;
    Ok(report)
}
