//! Running krping on devices: opening the ports, registering the buffers, connecting the queue
//! pairs and driving [`super::protocol`] over them.

use super::cli::{Cli, Plan};
use super::protocol::{
    run_pair, run_side, Buffer, Client, Completion, KrpingQp, Options, Role, Server,
};
use super::srq::{SrqReceives, SrqStats};
use super::Summary;
use crate::emulated::{open_emulated, Spec};
use crate::rdma::cm_link::{CmLink, Phase};
use crate::rdma::endpoint::{dial, serve, CONNECT_PATIENCE};
use crate::rdma::verbs::{
    emulated_idle_hook, local_endpoint, IdleHook, RdmaBuffer, RdmaPort, REMOTE_READ_WRITE,
};
use crate::rdma::{MemoryKind, BUFFER_INFO_LEN};
use cxdirect::control::KeyAccess;
use cxdirect::rdma::{
    ConnectParams, Payload, QpCaps, RcQueuePair, RecvRequest, SendOp, SendRequest, WcOpcode,
    WcStatus, WorkCompletion,
};
use cxdirect::Backend;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::time::{Duration, Instant};

mod cm;
pub use cm::{run_one_through_cm, run_pair_through_cm};
/// How long neither side may complete anything before the run is declared stalled.
pub const PATIENCE: Duration = Duration::from_secs(5);
/// How long QP1 stays after a disconnect, as a connection's timewait would keep it answering.
const LINGER: Duration = Duration::from_millis(200);
/// How long a server that has served every ping waits for the client's DREQ before it sends
/// its own: the client hangs up once it has taken the last go-ahead, and rping's client, woken
/// by a DREQ before it took it, reports the last ping unfinished.
pub const CLIENT_HANGS_UP_FIRST: Duration = Duration::from_secs(2);
/// How long a server waits for a client's connection request through the connection manager.
pub const LISTEN_PATIENCE: Duration = Duration::from_secs(60);
/// Receive slots of [`BUFFER_INFO_LEN`] bytes each side keeps on its queue pair's own receive
/// queue (it posts at most two at once).
const RECV_SLOTS: u32 = 4;
/// Empty polls of the completion queue between two looks at the async event vector's eventfd
/// (for the SRQ's limit event).
const POLLS_PER_EVENT_LOOK: u32 = 16;

/// How a side is set up besides the protocol's options.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SideSetup {
    /// The memory the buffers are registered from.
    pub memory: MemoryKind,
    /// Receives on the shared receive queue the side takes its messages from (0: the queue
    /// pair's own receive queue).
    pub srq_depth: u32,
}
/// The address the server's port takes (its GID), and the client's.
pub const SERVER_ADDRESS: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 168, 77, 1));
/// See [`SERVER_ADDRESS`].
pub const CLIENT_ADDRESS: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 168, 77, 2));

/// One side's queue pair, buffers and completion queue on a device.
pub struct VerbsSide<B: Backend> {
    port: RdmaPort<B>,
    qp: RcQueuePair<B>,
    start: RdmaBuffer,
    rdma: RdmaBuffer,
    recv: RdmaBuffer,
    recv_posted: u64,
    srq: Option<SrqReceives<B>>,
    empty_polls: u32,
}

impl<B: Backend> VerbsSide<B> {
    /// Opens `backend` with `address` as its GID address and sets up a side with `size`-byte
    /// buffers of `setup.memory` (the client's start buffer, which the CPU fills, stays in host
    /// memory when that is GPU memory), receiving from a shared receive queue of
    /// `setup.srq_depth` receives (none: 0).
    pub fn open(backend: B, address: IpAddr, size: u32, setup: SideSetup) -> Result<Self, String> {
        Self::open_with(RdmaPort::open(backend, address, 64)?, size, setup)
    }

    /// As [`VerbsSide::open`], and the function serves `address` on its Ethernet side (ARP
    /// and ICMP answered, the peer's MAC resolved by ARP: [`RdmaPort::open_serving`]).
    pub fn open_serving(
        backend: B,
        address: Ipv4Addr,
        size: u32,
        setup: SideSetup,
    ) -> Result<Self, String> {
        Self::open_with(RdmaPort::open_serving(backend, address, 64)?, size, setup)
    }

    fn open_with(mut port: RdmaPort<B>, size: u32, setup: SideSetup) -> Result<Self, String> {
        let memory = setup.memory;
        let size = size as usize;
        let start_kind = if memory == MemoryKind::Cuda {
            MemoryKind::Host
        } else {
            memory
        };
        let start = port.buffer(start_kind, size, REMOTE_READ_WRITE)?;
        let rdma = port.buffer(memory, size, REMOTE_READ_WRITE)?;
        let recv = port.buffer(
            MemoryKind::Host,
            RECV_SLOTS as usize * BUFFER_INFO_LEN,
            KeyAccess::READ_WRITE,
        )?;
        let srq = match setup.srq_depth {
            0 => None,
            depth => Some(SrqReceives::create(&mut port, depth)?),
        };
        let caps = QpCaps {
            max_send_wr: 16,
            max_recv_wr: RECV_SLOTS,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: BUFFER_INFO_LEN as u32,
        };
        let qp = port.queue_pair_on(caps, srq.as_ref().map(SrqReceives::srq))?;
        Ok(Self {
            port,
            qp,
            start,
            rdma,
            recv,
            recv_posted: 0,
            srq,
            empty_polls: 0,
        })
    }

    /// What the side's shared receive queue went through (`None` without one).
    pub fn srq_stats(&self) -> Option<SrqStats> {
        self.srq.as_ref().map(SrqReceives::stats)
    }

    /// Connects the queue pair to the peer's endpoint with `ibv_rc_pingpong`'s attributes.
    pub fn connect(&mut self, remote: &crate::rdma::endpoint::Endpoint) -> Result<(), String> {
        self.port
            .connect(&mut self.qp, remote, ConnectParams::default())
    }

    /// The server's connection manager on this side: QP1, listening on `port` for a client
    /// at `peer_mac` (resolved by ARP when `None`).
    pub fn listen(
        &mut self,
        ip: Ipv4Addr,
        port: u16,
        peer_mac: Option<[u8; 6]>,
    ) -> Result<CmLink<B>, String> {
        let p = &mut self.port;
        CmLink::listen(
            &mut p.dev,
            &p.pd,
            &p.roce,
            ip,
            port,
            peer_mac,
            self.srq.is_some(),
        )
    }

    /// The client's connection manager on this side: QP1, and a REQ for the queue pair to
    /// `server` port `port` at `peer_mac` (resolved by ARP when `None`).
    pub fn dial_cm(
        &mut self,
        ip: Ipv4Addr,
        server: Ipv4Addr,
        port: u16,
        peer_mac: Option<[u8; 6]>,
    ) -> Result<CmLink<B>, String> {
        let p = &mut self.port;
        let srq = self.srq.is_some();
        CmLink::connect(
            &mut p.dev, &p.pd, &p.roce, ip, server, port, peer_mac, &self.qp, srq,
        )
    }

    /// One turn of `link` (the queue pair programmed when the handshake says), then the idle
    /// hook.
    pub fn turn(&mut self, link: &mut CmLink<B>) -> Result<Phase, String> {
        let phase = link.progress(&mut self.port.dev, self.port.address.as_mut(), &mut self.qp)?;
        self.port.idle();
        Ok(phase)
    }

    /// Turns `link` until `done` holds of its phase, for at most `patience`.
    pub fn wait(
        &mut self,
        link: &mut CmLink<B>,
        done: impl Fn(Phase) -> bool,
        patience: Duration,
    ) -> Result<(), String> {
        let deadline = Instant::now() + patience;
        while !done(self.turn(link)?) {
            if Instant::now() >= deadline {
                return Err(link.stalled(patience));
            }
            std::thread::yield_now();
        }
        Ok(())
    }

    /// Waits up to `grace` for the peer's DREQ, then disconnects `link` (a DREQ unless the
    /// peer's came first), waits for it to be down, keeps QP1 for `LINGER` more (the DREP
    /// just posted goes out, a resent DREQ is answered), and destroys QP1.
    pub fn hang_up(&mut self, mut link: CmLink<B>, grace: Duration) -> Result<(), String> {
        // The peer's DREQ, if it comes within `grace`, leaves nothing to send (a stall here is
        // no error: this side hangs up itself then).
        let _ = self.wait(&mut link, |p| p == Phase::Down, grace);
        let mut down = link
            .disconnect()
            .and_then(|()| self.wait(&mut link, |p| p == Phase::Down, CONNECT_PATIENCE));
        let lingered = Instant::now();
        while down.is_ok() && lingered.elapsed() < LINGER {
            down = self.turn(&mut link).map(|_| ());
            std::thread::yield_now();
        }
        let closed = link.close(&mut self.port.dev);
        down.and(closed)
    }

    /// The MAC address of the side's port.
    pub fn mac(&self) -> [u8; 6] {
        self.port.roce.mac()
    }

    /// The report line of the address the side serves, when it serves one.
    pub fn address_report(&self) -> Option<String> {
        self.port.address.as_ref().map(|a| a.describe())
    }

    /// The endpoint the peer connects to.
    pub fn endpoint(&self) -> crate::rdma::endpoint::Endpoint {
        local_endpoint(&self.qp)
    }

    /// Destroys everything (the queue pair before its SRQ) and closes the device; the first
    /// failure is returned after everything has been tried.
    pub fn close(mut self) -> Result<(), String> {
        let mut first = self.port.destroy_queue_pair(self.qp).err();
        if let Some(srq) = self.srq {
            if let Err(e) = srq.destroy(&mut self.port.dev) {
                first.get_or_insert(format!("{}: closing: {e}", self.port.name()));
            }
        }
        let closed = self
            .port
            .close(Vec::new(), vec![self.start, self.rdma, self.recv]);
        first.map_or(closed, Err)
    }

    fn buffer(&self, buffer: Buffer) -> &RdmaBuffer {
        match buffer {
            Buffer::Start => &self.start,
            Buffer::Rdma => &self.rdma,
        }
    }

    fn post_one(&mut self, op: SendOp, payload: Payload<'_>) -> Result<(), String> {
        self.qp
            .post_send(&[SendRequest::new(0, op, payload)])
            .map_err(|e| e.to_string())
    }
}

impl<B: Backend> KrpingQp for VerbsSide<B> {
    type Error = String;

    fn advertise(&self, buffer: Buffer) -> crate::rdma::BufferInfo {
        self.buffer(buffer).advertise()
    }

    fn store(&mut self, buffer: Buffer, data: &[u8]) -> Result<(), String> {
        self.buffer(buffer).store(data)
    }

    fn load(&mut self, buffer: Buffer, out: &mut [u8]) -> Result<(), String> {
        self.buffer(buffer).load(0, out)
    }

    fn post_send(&mut self, message: &[u8; BUFFER_INFO_LEN]) -> Result<(), String> {
        self.post_one(SendOp::Send, Payload::Inline(message))
    }

    fn post_recv(&mut self) -> Result<(), String> {
        if let Some(srq) = self.srq.as_mut() {
            // The SRQ is refilled on its limit event only; the message needs one receive posted.
            return srq.ensure_posted(&mut self.port.dev, self.qp.qpn(), PATIENCE);
        }
        let slot = self.recv_posted % u64::from(RECV_SLOTS);
        let sge = [self
            .recv
            .mr
            .sge(slot * BUFFER_INFO_LEN as u64, BUFFER_INFO_LEN as u32)];
        self.qp
            .post_recv(&[RecvRequest {
                wr_id: slot,
                sg_list: &sge,
            }])
            .map_err(|e| e.to_string())?;
        self.recv_posted += 1;
        Ok(())
    }

    fn post_read(&mut self, into: Buffer, from: crate::rdma::BufferInfo) -> Result<(), String> {
        let sge = [self.buffer(into).mr.sge(0, from.size)];
        let remote = from.remote();
        self.post_one(SendOp::Read(remote), Payload::Gather(&sge))
    }

    fn post_write(&mut self, from: Buffer, to: crate::rdma::BufferInfo) -> Result<(), String> {
        let sge = [self.buffer(from).mr.sge(0, to.size)];
        let remote = to.remote();
        self.post_one(SendOp::Write(remote), Payload::Gather(&sge))
    }

    fn poll(&mut self) -> Result<Option<Completion>, String> {
        let mut wc = [WorkCompletion::default(); 1];
        if self.port.cq.poll(&mut wc).map_err(|e| e.to_string())? == 0 {
            self.port.idle();
            if let Some(srq) = self.srq.as_mut() {
                self.empty_polls = self.empty_polls.wrapping_add(1);
                if self.empty_polls % POLLS_PER_EVENT_LOOK == 0 {
                    srq.look(&mut self.port.dev, self.qp.qpn())?;
                }
            }
            return Ok(None);
        }
        let wc = wc[0];
        if wc.status != WcStatus::Success {
            return Err(format!(
                "{:?} completed with {:?} (vendor syndrome {:#x})",
                wc.opcode, wc.status, wc.vendor_err
            ));
        }
        Ok(Some(match wc.opcode {
            WcOpcode::Send => Completion::Sent,
            WcOpcode::RdmaRead => Completion::Read,
            WcOpcode::RdmaWrite => Completion::Written,
            WcOpcode::Recv => {
                let len = (wc.byte_len as usize).min(BUFFER_INFO_LEN);
                let mut bytes = [0u8; BUFFER_INFO_LEN];
                match self.srq.as_mut() {
                    Some(srq) => {
                        if wc.srqn != Some(srq.srq().srqn()) {
                            return Err(format!(
                                "a receive completion from SRQ {:?}, not {:#x}",
                                wc.srqn,
                                srq.srq().srqn()
                            ));
                        }
                        srq.take(wc.wr_id, &mut bytes[..len])?;
                    }
                    None => {
                        let slot = wc.wr_id.min(u64::from(RECV_SLOTS) - 1) as usize;
                        self.recv.load(slot * BUFFER_INFO_LEN, &mut bytes[..len])?;
                    }
                }
                Completion::Received {
                    bytes,
                    // A longer message than an advertisement is refused by the protocol.
                    len: wc.byte_len as usize,
                }
            }
            other => return Err(format!("an unexpected {other:?} completion")),
        }))
    }
}

/// Runs what `plan` says and returns the run's summary; an error says what failed.
pub fn run(cli: &Cli, plan: &Plan) -> Result<Summary, String> {
    let options = cli.options();
    let mut out = std::io::stdout();
    match plan {
        Plan::Pair => {
            let config = cxdirect_emu::EmuConfig {
                roce: true,
                ..cli.devices.emu_config()
            };
            let mut backends = open_emulated(&Spec::EmuPair, config).into_iter();
            let (Some(a), Some(b)) = (backends.next(), backends.next()) else {
                return Err("emu-pair gave fewer than two ports".into());
            };
            let exec = cli.devices.emu_exec;
            let hooks = [emulated_idle_hook(&a, exec), emulated_idle_hook(&b, exec)];
            match cli.rendezvous(plan)? {
                Some(Rendezvous::Cm(cm)) => {
                    run_pair_through_cm(a, b, hooks, options, cli.setup(), cm, &mut out)
                }
                _ => run_pair_on(a, b, hooks, options, cli.setup(), &mut out),
            }
        }
        Plan::Server(spec) | Plan::Client(spec) => {
            let via = cli
                .rendezvous(plan)?
                .ok_or("a side alone needs a way to meet its peer")?;
            let backend = crate::vfio_open(spec, cli.devices.iommu_mode.as_str())
                .map_err(|e| format!("{spec}: {e}"))?;
            let exchange = Exchange {
                via,
                server: matches!(plan, Plan::Server(_)),
            };
            run_one(backend, None, exchange, options, cli.setup(), &mut out)
        }
    }
}

/// Both sides in this process: the server on `server_backend`, the client on
/// `client_backend`, each with its idle hook.
pub fn run_pair_on<B: Backend>(
    server_backend: B,
    client_backend: B,
    idle_hooks: [Option<IdleHook>; 2],
    options: Options,
    setup: SideSetup,
    out: &mut dyn Write,
) -> Result<Summary, String> {
    let [server_idle, client_idle] = idle_hooks;
    let mut server_side = VerbsSide::open(server_backend, SERVER_ADDRESS, options.size, setup)?;
    server_side.port.set_idle(server_idle);
    let mut client_side = VerbsSide::open(client_backend, CLIENT_ADDRESS, options.size, setup)?;
    client_side.port.set_idle(client_idle);
    let mut server = Server::new(options);
    let mut client = Client::new(options);
    server.start(&mut server_side).map_err(|e| e.to_string())?;
    client.start(&mut client_side).map_err(|e| e.to_string())?;
    let (s_end, c_end) = (server_side.endpoint(), client_side.endpoint());
    writeln!(out, "server: {}", s_end.describe()).map_err(|e| e.to_string())?;
    writeln!(out, "client: {}", c_end.describe()).map_err(|e| e.to_string())?;
    server_side.connect(&c_end)?;
    client_side.connect(&s_end)?;
    let began = Instant::now();
    let outcome = run_pair(
        &mut client,
        &mut client_side,
        &mut server,
        &mut server_side,
        out,
        PATIENCE,
    );
    let elapsed = began.elapsed();
    let mut limit_events = 0;
    for (who, side) in [("server", &server_side), ("client", &client_side)] {
        if let Some(stats) = side.srq_stats() {
            writeln!(out, "{who} {stats}").map_err(|e| e.to_string())?;
            limit_events += stats.limit_events;
        }
    }
    let closed = server_side.close().and(client_side.close());
    outcome.map_err(|e| e.to_string())?;
    closed?;
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

/// How two sides that run apart meet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rendezvous {
    /// The endpoint exchange over TCP: where the server listens and the client connects.
    Tcp(IpAddr, u16),
    /// The connection manager.
    Cm(CmSettings),
}

/// Where the connection manager's two sides are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmSettings {
    /// The server function's address (its GID), which the client's REQ goes to.
    pub server_ip: Ipv4Addr,
    /// The client function's address (its GID).
    pub client_ip: Ipv4Addr,
    /// The CM port the server listens on (rping's 7174 by default).
    pub port: u16,
    /// The peer's MAC address; `None`: resolved by ARP (the function serves its address).
    pub peer_mac: Option<[u8; 6]>,
}

/// How a side that runs alone reaches its peer.
#[derive(Clone, Copy, Debug)]
pub struct Exchange {
    /// How the sides meet.
    pub via: Rendezvous,
    /// Whether this side is the server.
    pub server: bool,
}

/// One side in this process, the other elsewhere: the endpoints are traded over TCP, the
/// server's line sent only once its queue pair is connected.
pub fn run_one<B: Backend>(
    backend: B,
    idle: Option<IdleHook>,
    exchange: Exchange,
    options: Options,
    setup: SideSetup,
    out: &mut dyn Write,
) -> Result<Summary, String> {
    let tcp = match exchange.via {
        Rendezvous::Tcp(ip, port) => (ip, port),
        Rendezvous::Cm(cm) => {
            return run_one_through_cm(backend, idle, exchange.server, cm, options, setup, out)
        }
    };
    let address = if exchange.server {
        SERVER_ADDRESS
    } else {
        CLIENT_ADDRESS
    };
    let mut side = VerbsSide::open(backend, address, options.size, setup)?;
    side.port.set_idle(idle);
    let local = side.endpoint();
    writeln!(out, "  local address: {}", local.describe()).map_err(|e| e.to_string())?;
    // Which memory the remote side READs from and WRITEs into (the rig checks it).
    writeln!(out, "  memory: {}", setup.memory.as_str()).map_err(|e| e.to_string())?;
    let outcome = if exchange.server {
        let mut srv = Server::new(options);
        srv.start(&mut side).map_err(|e| e.to_string())?;
        let listener = TcpListener::bind(tcp).map_err(|e| format!("listening on {tcp:?}: {e}"))?;
        let (remote, _stream) =
            serve(&listener, &local, |remote| side.connect(remote)).map_err(|e| e.to_string())?;
        writeln!(out, " remote address: {}", remote.describe()).map_err(|e| e.to_string())?;
        let began = Instant::now();
        let ran = run_side(Role::Server(&mut srv), &mut side, out, PATIENCE);
        ran.map(|()| summary(options, srv.pings(), 0, false, began.elapsed()))
    } else {
        let mut cl = Client::new(options);
        cl.start(&mut side).map_err(|e| e.to_string())?;
        let (remote, _stream) = dial(tcp, &local, CONNECT_PATIENCE).map_err(|e| e.to_string())?;
        writeln!(out, " remote address: {}", remote.describe()).map_err(|e| e.to_string())?;
        side.connect(&remote)?;
        let began = Instant::now();
        let ran = run_side(Role::Client(&mut cl), &mut side, out, PATIENCE);
        ran.map(|()| {
            summary(
                options,
                cl.pings(),
                cl.errors(),
                options.validate,
                began.elapsed(),
            )
        })
    };
    finish(side, outcome.map_err(|e| e.to_string()), out)
}

/// Prints the side's SRQ line, closes it, and returns the run's summary with its limit events.
fn finish<B: Backend>(
    side: VerbsSide<B>,
    outcome: Result<Summary, String>,
    out: &mut dyn Write,
) -> Result<Summary, String> {
    let stats = side.srq_stats();
    if let Some(stats) = stats {
        writeln!(out, "{stats}").map_err(|e| e.to_string())?;
    }
    let closed = side.close();
    let summary = outcome?;
    closed?;
    Ok(Summary {
        srq_limit_events: stats.map_or(0, |s| s.limit_events),
        ..summary
    })
}

fn summary(options: Options, count: u64, errors: u64, validated: bool, took: Duration) -> Summary {
    Summary {
        count,
        size: options.size,
        validated,
        errors,
        usec_per_iter: took.as_secs_f64() * 1e6 / count.max(1) as f64,
        srq_limit_events: 0,
    }
}

#[cfg(test)]
mod tests;
