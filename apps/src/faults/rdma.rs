//! The RDMA classes of the fault matrix: faults of the RoCE v2 reliable-connection transport,
//! each met under krping-style traffic between two emulated functions (one RC queue pair on
//! each, every byte checked).
//!
//! Each iteration is krping's exchange for one ping: the client fills its source buffer
//! (rping's ping data) and SENDs its advertisement; the server RDMA READs the source and checks
//! every byte, SENDs a go-ahead; the client SENDs its sink's advertisement; the server RDMA
//! WRITEs the ping into the sink, which is checked byte for byte, and SENDs the last go-ahead.
//! That is six messages per iteration (four SENDs, a READ, a WRITE). Every SEND carries an
//! immediate naming its iteration attempt and message, so a message delivered twice, late or
//! into the wrong receive is seen.
//!
//! Faults the transport must hide (lost, duplicated, reordered and corrupted frames, a receiver
//! without receives for a while) must deliver every message once and intact. Faults that end
//! the connection (retries exhausted under a cut wire, a QP's fatal error) fail the attempt:
//! the application resets both queue pairs, collects every posted request's flush completion,
//! connects them again and sends the attempt's messages again.
//!
//! Accounting, per message posted: `received` when its delivery was checked (the receiver's
//! completion for a SEND, the bytes for a READ or WRITE); `accounted` (recovered) when it was
//! not delivered and its work request completed in error or flushed, and was sent again;
//! `lost_beyond_flushed` when neither. `duplicates` are deliveries beyond the first (and
//! completions of requests not outstanding), `corrupt` deliveries with wrong bytes or a wrong
//! immediate, `leaked` work requests (sends and receives) posted and never completed.

use super::{ClassReport, FaultClass};
use crate::emulated::EmuBackend;
use crate::krping::fill_ping;
use crate::rdma::verbs::{local_endpoint, RdmaBuffer, RdmaPort, REMOTE_READ_WRITE};
use crate::rdma::{MemoryKind, BUFFER_INFO_LEN};
use cxdirect::control::KeyAccess;
use cxdirect::rdma::{
    ConnectParams, Payload, QpCaps, RcQueuePair, RecvRequest, SendOp, SendRequest, WcOpcode,
    WcStatus, WorkCompletion,
};
use cxdirect::Event;
use cxdirect_emu::counters::CountersSnapshot;
use cxdirect_emu::wire::{ImpairmentCounters, Impairments, PortId, Wire, WireConfig};
use cxdirect_emu::{Device as Model, EmuConfig, ExecMode, Fault};
use cxdirect_hw::eqe::EventType;
use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes of the ping buffers: three packets at the 1,024-byte path MTU.
const SIZE: usize = 3000;
/// How long nothing may complete before the class is declared stalled.
const PATIENCE: Duration = Duration::from_secs(5);
/// Attempts of one iteration before the class gives up.
const MAX_ATTEMPTS: u32 = 4;
/// Clean iterations before the first injection.
const WARM_UP: u64 = 4;
/// Iterations an impairment class may take per injection asked for before it gives up.
const ITERATIONS_PER_INJECTION: u64 = 200;
/// Empty polls between two looks at the clock and at the async events.
const POLLS_PER_LOOK: u32 = 64;
/// How long a wait sleeps after [`POLLS_PER_LOOK`] empty polls.
const IDLE_NAP: Duration = Duration::from_micros(20);
/// Messages of one iteration.
const MESSAGES: usize = 6;
/// The go-ahead the server SENDs (krping's: its never-filled advertisement, all zeros).
const GO_AHEAD: [u8; BUFFER_INFO_LEN] = [0; BUFFER_INFO_LEN];
/// Work request ids of receives have this bit set (sends do not).
const RECV_BIT: u64 = 0x80;
/// The message index in a work request id or an immediate.
const MSG_MASK: u64 = 0x7f;

/// The messages of one iteration, in the order they are sent.
mod msg {
    /// Client → server SEND: the source buffer's advertisement.
    pub const SOURCE_AD: usize = 0;
    /// Server RDMA READ of the client's source buffer.
    pub const READ: usize = 1;
    /// Server → client SEND: go-ahead after the READ.
    pub const READ_GO_AHEAD: usize = 2;
    /// Client → server SEND: the sink buffer's advertisement.
    pub const SINK_AD: usize = 3;
    /// Server RDMA WRITE into the client's sink buffer.
    pub const WRITE: usize = 4;
    /// Server → client SEND: go-ahead after the WRITE.
    pub const WRITE_GO_AHEAD: usize = 5;
}

/// Which function of the pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Who {
    Client,
    Server,
}

/// The side that posts message `m`.
fn poster(m: usize) -> Who {
    if m == msg::SOURCE_AD || m == msg::SINK_AD {
        Who::Client
    } else {
        Who::Server
    }
}

/// The side that receives message `m` (the responder of a READ or WRITE).
fn receiver(m: usize) -> Who {
    match poster(m) {
        Who::Client => Who::Server,
        Who::Server => Who::Client,
    }
}

/// The receive slot (of two) message `m` lands in.
fn slot(m: usize) -> usize {
    usize::from(m >= msg::SINK_AD)
}

/// What one message of the current attempt went through.
#[derive(Debug, Clone, Copy, Default)]
struct MsgState {
    posted: bool,
    /// Deliveries checked intact (more than one is a duplicate).
    verified: u32,
    /// Its work request completed in error or flushed.
    failed: bool,
    /// A delivery with wrong bytes or a wrong immediate.
    corrupt: bool,
}

/// What is done to an iteration, and before which message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Inject {
    /// The wire is cut (every frame dropped) before the message is posted, until its work
    /// request has failed.
    Cut,
    /// The posting QP's next doorbell finds it broken (a WQ catastrophic error).
    Fatal,
    /// The receive for the message (a SEND) is posted only once the responder has answered
    /// it with `naks` RNR NAKs.
    RnrHold { naks: u64 },
}

/// One function: the port with RoCE, its queue pair and buffers.
struct Side {
    port: RdmaPort<EmuBackend>,
    qp: RcQueuePair<EmuBackend>,
    /// The client's source buffer; the server's READ target and WRITE source.
    data: RdmaBuffer,
    /// The client's sink buffer (the server has one it does not use).
    sink: RdmaBuffer,
    /// Two receive slots of [`BUFFER_INFO_LEN`] bytes.
    recv: RdmaBuffer,
}

impl Side {
    fn open(model: &Model, name: &str, address: IpAddr) -> Result<Self, String> {
        let mut port = RdmaPort::open(EmuBackend::new(model.clone(), name), address, 64)?;
        let data = port.buffer(MemoryKind::Host, SIZE, REMOTE_READ_WRITE)?;
        let sink = port.buffer(MemoryKind::Host, SIZE, REMOTE_READ_WRITE)?;
        let recv = port.buffer(MemoryKind::Host, 2 * BUFFER_INFO_LEN, KeyAccess::READ_WRITE)?;
        let qp = port.queue_pair(QpCaps {
            max_send_wr: 16,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: BUFFER_INFO_LEN as u32,
        })?;
        Ok(Self {
            port,
            qp,
            data,
            sink,
            recv,
        })
    }

    fn close(self) -> Result<(), String> {
        self.port
            .close(vec![self.qp], vec![self.data, self.sink, self.recv])
    }
}

/// The emulated pair with a queue pair connected on each side, the wire between them, and the
/// accounting of every message.
struct Rig {
    client: Side,
    server: Side,
    models: [Model; 2],
    /// The wire the pair runs on (impaired for the wire classes).
    wire: Arc<Wire>,
    /// A wire that drops every frame: attached in place of `wire` to cut the link.
    cut: Option<Arc<Wire>>,
    params: ConnectParams,
    /// Attempts begun so far (the current one's number names its messages).
    attempt: u64,
    ping: u64,
    ledger: [MsgState; MESSAGES],
    /// The current ping's bytes.
    expected: Vec<u8>,
    /// Work requests posted and not yet completed, by id.
    outstanding: HashSet<u64>,
    /// When and why the current attempt failed.
    failure: Option<(Instant, String)>,
    /// Completions in error other than flushes (retry exceeded and the like).
    error_completions: u64,
    /// Fatal (WQ catastrophic) events naming one of the two queue pairs.
    fatal_events: u64,
    sent: u64,
    received: u64,
    accounted: u64,
    lost: u64,
    duplicates: u64,
    corrupt: u64,
    scratch: Vec<u8>,
}

/// What the wire does to frames in the wire classes.
fn impairments(class: FaultClass) -> Impairments {
    let seed = 35;
    match class {
        FaultClass::RdmaFrameLoss => Impairments {
            seed,
            drop_probability: 0.02,
            ..Impairments::NONE
        },
        FaultClass::RdmaDuplicate => Impairments {
            seed,
            duplicate_probability: 0.03,
            ..Impairments::NONE
        },
        FaultClass::RdmaReorder => Impairments {
            seed,
            reorder_probability: 0.03,
            reorder_window: 3,
            ..Impairments::NONE
        },
        FaultClass::RdmaIcrcCorrupt => Impairments {
            seed,
            corrupt_probability: 0.02,
            ..Impairments::NONE
        },
        _ => Impairments::NONE,
    }
}

/// What the wire class's impairment counted on one direction.
fn impaired(class: FaultClass, c: ImpairmentCounters) -> u64 {
    match class {
        FaultClass::RdmaFrameLoss => c.dropped,
        FaultClass::RdmaDuplicate => c.duplicated,
        FaultClass::RdmaReorder => c.reordered,
        FaultClass::RdmaIcrcCorrupt => c.corrupted,
        _ => 0,
    }
}

fn pair_wire(impairments: Impairments) -> Result<Arc<Wire>, String> {
    Wire::pair_with(WireConfig {
        impairments,
        ..WireConfig::default()
    })
    .map(Arc::new)
    .map_err(|e| format!("wire: {e}"))
}

impl Rig {
    fn new(class: FaultClass, params: ConnectParams) -> Result<Self, String> {
        let cfg = EmuConfig {
            roce: true,
            exec: ExecMode::Threaded,
            ..EmuConfig::default()
        };
        let mut cfg_server = cfg.clone();
        cfg_server.mac[5] ^= 1;
        let (mc, ms) = (Model::new(cfg), Model::new(cfg_server));
        let wire = pair_wire(impairments(class))?;
        mc.attach(wire.clone(), PortId::A, &[&ms]);
        ms.attach(wire.clone(), PortId::B, &[&mc]);
        let cut = (class == FaultClass::RdmaRetryExceeded)
            .then(|| {
                pair_wire(Impairments {
                    drop_every: 1,
                    ..Impairments::NONE
                })
            })
            .transpose()?;
        let client = Side::open(&mc, "client", IpAddr::V4(Ipv4Addr::new(192, 168, 35, 2)))?;
        let server = Side::open(&ms, "server", IpAddr::V4(Ipv4Addr::new(192, 168, 35, 1)))?;
        let mut rig = Self {
            client,
            server,
            models: [mc, ms],
            wire,
            cut,
            params,
            attempt: 0,
            ping: 0,
            ledger: [MsgState::default(); MESSAGES],
            expected: vec![0; SIZE],
            outstanding: HashSet::new(),
            failure: None,
            error_completions: 0,
            fatal_events: 0,
            sent: 0,
            received: 0,
            accounted: 0,
            lost: 0,
            duplicates: 0,
            corrupt: 0,
            scratch: vec![0; SIZE],
        };
        rig.connect()?;
        Ok(rig)
    }

    fn side(&mut self, who: Who) -> &mut Side {
        match who {
            Who::Client => &mut self.client,
            Who::Server => &mut self.server,
        }
    }

    fn model(&self, who: Who) -> &Model {
        match who {
            Who::Client => &self.models[0],
            Who::Server => &self.models[1],
        }
    }

    /// Connects both queue pairs (in reset) to each other with the rig's parameters.
    fn connect(&mut self) -> Result<(), String> {
        let (ec, es) = (
            local_endpoint(&self.client.qp),
            local_endpoint(&self.server.qp),
        );
        let params = self.params;
        let Side { port, qp, .. } = &mut self.client;
        port.connect(qp, &es, params)?;
        let Side { port, qp, .. } = &mut self.server;
        port.connect(qp, &ec, params)
    }

    /// Resets both queue pairs, taking every flush completion, and connects them again with
    /// `params`.
    fn reconnect(&mut self, params: ConnectParams) -> Result<(), String> {
        for who in [Who::Client, Who::Server] {
            let side = self.side(who);
            let name = side.port.name().to_string();
            let Side { port, qp, .. } = side;
            // A flush still on its way is waited for once more.
            let reset = qp
                .reset(&mut port.dev, &mut port.cq)
                .or_else(|_| qp.reset(&mut port.dev, &mut port.cq));
            reset.map_err(|e| format!("{name}: resetting the queue pair: {e}"))?;
        }
        // The flush completions the resets collected.
        while self.poll_both()? > 0 {}
        self.params = params;
        self.connect()
    }

    fn wr_id(&self, m: usize) -> u64 {
        self.attempt << 8 | m as u64
    }

    fn post_recv(&mut self, m: usize) -> Result<(), String> {
        let id = self.wr_id(m) | RECV_BIT;
        let side = self.side(receiver(m));
        let sge = [side
            .recv
            .mr
            .sge((slot(m) * BUFFER_INFO_LEN) as u64, BUFFER_INFO_LEN as u32)];
        let posted = side.qp.post_recv(&[RecvRequest {
            wr_id: id,
            sg_list: &sge,
        }]);
        match posted {
            Ok(()) => {
                self.outstanding.insert(id);
                Ok(())
            }
            Err(e) => Err(format!("posting the receive of message {m}: {e}")),
        }
    }

    /// Posts message `m` (its immediate names the attempt and the message). A post the queue
    /// pair refuses fails the attempt (nothing was posted).
    fn post_message(&mut self, m: usize, op: SendOp, payload: Payload<'_>) {
        let id = self.wr_id(m);
        match self
            .side(poster(m))
            .qp
            .post_send(&[SendRequest::new(id, op, payload)])
        {
            Ok(()) => {
                self.outstanding.insert(id);
                self.ledger[m].posted = true;
                self.sent += 1;
            }
            Err(e) => self.fail(format!("posting message {m}: {e}")),
        }
    }

    fn send_message(&mut self, m: usize, bytes: [u8; BUFFER_INFO_LEN]) {
        let imm = self.wr_id(m) as u32;
        self.post_message(m, SendOp::SendImm(imm), Payload::Inline(&bytes));
    }

    fn fail(&mut self, why: String) {
        if self.failure.is_none() {
            self.failure = Some((Instant::now(), why));
        }
    }

    /// Polls both completion queues once; returns how many completions came.
    fn poll_both(&mut self) -> Result<usize, String> {
        let mut wcs = [WorkCompletion::default(); 8];
        let mut total = 0;
        for who in [Who::Client, Who::Server] {
            let side = self.side(who);
            let n = side
                .port
                .cq
                .poll(&mut wcs)
                .map_err(|e| format!("{who:?}: polling: {e}"))?;
            for wc in &wcs[..n] {
                self.complete(who, wc)?;
            }
            total += n;
        }
        Ok(total)
    }

    /// Takes one completion: checks what it delivered against the ledger.
    fn complete(&mut self, who: Who, wc: &WorkCompletion) -> Result<(), String> {
        if !self.outstanding.remove(&wc.wr_id) {
            // A request completed twice, or one never posted.
            self.duplicates += 1;
            return Ok(());
        }
        let current = wc.wr_id >> 8 == self.attempt;
        let m = (wc.wr_id & MSG_MASK) as usize;
        if wc.status != WcStatus::Success {
            if wc.status != WcStatus::WrFlushErr {
                self.error_completions += 1;
            }
            if current && wc.opcode != WcOpcode::Recv && m < MESSAGES {
                self.ledger[m].failed = true;
            }
            self.fail(format!(
                "{who:?}: {:?} completed {:?}",
                wc.opcode, wc.status
            ));
            return Ok(());
        }
        if !current || m >= MESSAGES {
            // A request of an attempt already closed completed after all.
            self.duplicates += 1;
            return Ok(());
        }
        let intact = match wc.opcode {
            WcOpcode::Recv => match self.check_received(who, wc, m)? {
                Some(intact) => intact,
                None => return Ok(()),
            },
            WcOpcode::RdmaRead if m == msg::READ => {
                let got = &mut self.scratch;
                self.server.data.load(0, got)?;
                *got == self.expected
            }
            WcOpcode::RdmaWrite if m == msg::WRITE => {
                let got = &mut self.scratch;
                self.client.sink.load(0, got)?;
                *got == self.expected
            }
            // A SEND's delivery is checked where it is received.
            WcOpcode::Send => return Ok(()),
            other => return Err(format!("{who:?}: an unexpected {other:?} completion")),
        };
        if intact {
            self.ledger[m].verified += 1;
        } else {
            self.ledger[m].corrupt = true;
            self.corrupt += 1;
        }
        Ok(())
    }

    /// Whether a receive completion brought message `m` intact: the immediate names this
    /// attempt's message `m`, 16 bytes, the bytes the sender advertised (or a go-ahead).
    /// `None` for a message of an earlier attempt delivered again (counted as a duplicate).
    fn check_received(
        &mut self,
        who: Who,
        wc: &WorkCompletion,
        m: usize,
    ) -> Result<Option<bool>, String> {
        let Some(imm) = wc.imm else {
            return Ok(Some(false));
        };
        if u64::from(imm) >> 8 != self.attempt & 0x00ff_ffff {
            self.duplicates += 1;
            return Ok(None);
        }
        if u64::from(imm) & MSG_MASK != m as u64 || wc.byte_len as usize != BUFFER_INFO_LEN {
            return Ok(Some(false));
        }
        let expected = match m {
            msg::SOURCE_AD => self.client.data.advertise().to_wire(),
            msg::SINK_AD => self.client.sink.advertise().to_wire(),
            _ => GO_AHEAD,
        };
        let mut got = [0u8; BUFFER_INFO_LEN];
        self.side(who)
            .recv
            .load(slot(m) * BUFFER_INFO_LEN, &mut got)?;
        Ok(Some(got == expected && receiver(m) == who))
    }

    /// Polls both sides until `done` holds or the attempt fails; an error when nothing
    /// completes for [`PATIENCE`].
    fn wait(&mut self, done: impl Fn(&Self) -> bool) -> Result<(), String> {
        let mut idle_since = Instant::now();
        let mut idle = 0u32;
        while self.failure.is_none() && !done(self) {
            if self.poll_both()? > 0 {
                idle = 0;
                idle_since = Instant::now();
                continue;
            }
            idle = idle.wrapping_add(1);
            if idle % POLLS_PER_LOOK == 0 {
                // Waiting on timers (ACK timeout, RNR delay): leave the CPU to the model.
                std::thread::sleep(IDLE_NAP);
                self.look_at_events()?;
                if idle_since.elapsed() > PATIENCE {
                    return Err(format!(
                        "ping {}: nothing completed for {PATIENCE:?}: {:?}",
                        self.ping, self.ledger
                    ));
                }
            }
            std::thread::yield_now();
        }
        Ok(())
    }

    /// Takes both functions' async events: a QP's fatal error fails the attempt.
    fn look_at_events(&mut self) -> Result<(), String> {
        let qpns = [self.client.qp.qpn(), self.server.qp.qpn()];
        for who in [Who::Client, Who::Server] {
            let events = self
                .side(who)
                .port
                .dev
                .poll_events()
                .map_err(|e| format!("{who:?}: events: {e}"))?;
            for event in events {
                if let Event::QueueError { kind, number } = event {
                    if qpns.contains(&number) {
                        if kind == EventType::WqCatastrophicError {
                            self.fatal_events += 1;
                        }
                        self.fail(format!("{who:?}: {kind:?} on QP {number:#x}"));
                    }
                }
            }
        }
        Ok(())
    }

    fn delivered(&self, m: usize) -> bool {
        self.ledger[m].verified > 0 || self.ledger[m].corrupt
    }

    /// Waits until the responder of the SEND `m` has sent `naks` more RNR NAKs than before,
    /// then posts its receive.
    fn release_after_rnr(&mut self, m: usize, naks: u64, before: u64) -> Result<(), String> {
        let responder = receiver(m);
        let start = Instant::now();
        while self.model(responder).counters().roce_rnr_naks_sent < before + naks {
            self.poll_both()?;
            if self.failure.is_some() {
                return Ok(());
            }
            if start.elapsed() > PATIENCE {
                return Err(format!("message {m}: {naks} RNR NAKs did not come"));
            }
            std::thread::sleep(IDLE_NAP);
        }
        self.post_recv(m)
    }

    /// One attempt at the current ping, with `inject` before message `at`; returns whether it
    /// completed (else it failed, and [`Rig::recover`] is next).
    fn attempt_once(&mut self, inject: Option<(usize, Inject)>) -> Result<bool, String> {
        self.attempt += 1;
        self.ledger = [MsgState::default(); MESSAGES];
        self.failure = None;
        fill_ping(&mut self.expected, self.ping);
        self.client.data.store(&self.expected)?;
        self.client.sink.store(&vec![0; SIZE])?;
        let hold = match inject {
            Some((m, Inject::RnrHold { naks })) => Some((m, naks)),
            _ => None,
        };
        let held = |m: usize| hold.is_some_and(|(h, _)| h == m);
        let before = |rig: &Self, m: usize| rig.model(receiver(m)).counters().roce_rnr_naks_sent;
        for m in 0..MESSAGES {
            if let Some((at, what)) = inject {
                if at == m {
                    self.inject(m, what);
                }
            }
            let naks_before = before(self, m);
            match m {
                msg::SOURCE_AD => {
                    if !held(msg::SOURCE_AD) {
                        self.post_recv(msg::SOURCE_AD)?;
                    }
                    if !held(msg::READ_GO_AHEAD) {
                        self.post_recv(msg::READ_GO_AHEAD)?;
                    }
                    let ad = self.client.data.advertise().to_wire();
                    self.send_message(m, ad);
                }
                msg::READ => {
                    let sge = [self.server.data.mr.sge(0, SIZE as u32)];
                    let remote = self.client.data.advertise().remote();
                    self.post_message(m, SendOp::Read(remote), Payload::Gather(&sge));
                }
                msg::READ_GO_AHEAD => {
                    if !held(msg::SINK_AD) {
                        self.post_recv(msg::SINK_AD)?;
                    }
                    self.send_message(m, GO_AHEAD);
                }
                msg::SINK_AD => {
                    self.post_recv(msg::WRITE_GO_AHEAD)?;
                    let ad = self.client.sink.advertise().to_wire();
                    self.send_message(m, ad);
                }
                msg::WRITE => {
                    let sge = [self.server.data.mr.sge(0, SIZE as u32)];
                    let remote = self.client.sink.advertise().remote();
                    self.post_message(m, SendOp::Write(remote), Payload::Gather(&sge));
                }
                _ => self.send_message(m, GO_AHEAD),
            }
            if let Some((h, naks)) = hold.filter(|&(h, _)| h == m) {
                self.release_after_rnr(h, naks, naks_before)?;
            }
            self.wait(|rig| rig.delivered(m))?;
            if let Some((Inject::Cut, true)) = inject.map(|(at, what)| (what, at == m)) {
                // Restored once the cut has failed the message.
                self.wait(|rig| rig.failure.is_some())?;
            }
            if self.failure.is_some() {
                return Ok(false);
            }
        }
        // Every send completion too: nothing of the attempt is left outstanding.
        self.wait(|rig| rig.outstanding.is_empty())?;
        if self.failure.is_some() {
            return Ok(false);
        }
        // krping's own check: the sink holds what the source held.
        let mut sink = vec![0u8; SIZE];
        self.client.sink.load(0, &mut sink)?;
        if sink != self.expected {
            self.corrupt += 1;
        }
        self.close_attempt();
        Ok(true)
    }

    fn inject(&mut self, m: usize, what: Inject) {
        match what {
            Inject::Cut => {
                if let Some(cut) = &self.cut {
                    let [mc, ms] = &self.models;
                    mc.attach(cut.clone(), PortId::A, &[ms]);
                    ms.attach(cut.clone(), PortId::B, &[mc]);
                }
            }
            Inject::Fatal => {
                let qpn = self.side(poster(m)).qp.qpn();
                self.model(poster(m)).inject(Fault::RcQpFatal { qpn });
            }
            Inject::RnrHold { .. } => {}
        }
    }

    /// Puts the pair back on its own wire after a cut.
    fn mend(&self) {
        let [mc, ms] = &self.models;
        mc.attach(self.wire.clone(), PortId::A, &[ms]);
        ms.attach(self.wire.clone(), PortId::B, &[mc]);
    }

    /// Counts the attempt's messages (see the module's accounting).
    fn close_attempt(&mut self) {
        for state in self.ledger.iter().filter(|s| s.posted) {
            if state.verified > 0 {
                self.received += 1;
                self.duplicates += u64::from(state.verified - 1);
            } else if state.corrupt {
                // Counted in `corrupt` when it was seen.
            } else if state.failed {
                self.accounted += 1;
            } else {
                self.lost += 1;
            }
        }
        self.ledger = [MsgState::default(); MESSAGES];
    }

    /// After a failed attempt: both queue pairs reset (every posted request returned through
    /// its flush completion) and connected again. Returns the time from the failure being
    /// seen to the pair being ready again.
    fn recover(&mut self) -> Result<Duration, String> {
        let seen = self.failure.as_ref().map_or_else(Instant::now, |f| f.0);
        self.mend();
        self.reconnect(self.params)?;
        // The failed QP's event, when it raised one, is taken before the pair runs again.
        self.look_at_events()?;
        if !self.outstanding.is_empty() {
            return Err(format!(
                "{} work requests not returned by the reset: {:?}",
                self.outstanding.len(),
                self.outstanding
            ));
        }
        self.close_attempt();
        Ok(seen.elapsed())
    }

    /// Runs the current ping to its end, with `inject` on its first attempt, recovering from
    /// failed attempts; returns the recoveries' times.
    fn run_ping(&mut self, inject: Option<(usize, Inject)>) -> Result<Vec<Duration>, String> {
        let mut inject = inject;
        let mut recoveries = Vec::new();
        for _ in 0..MAX_ATTEMPTS {
            if self.attempt_once(inject.take())? {
                self.ping += 1;
                return Ok(recoveries);
            }
            recoveries.push(self.recover()?);
        }
        Err(format!(
            "ping {}: {MAX_ATTEMPTS} attempts failed; the last: {:?}",
            self.ping, self.failure
        ))
    }

    fn counters(&self) -> [CountersSnapshot; 2] {
        [self.models[0].counters(), self.models[1].counters()]
    }

    /// The wire class's impairments counted so far, both directions.
    fn impaired(&self, class: FaultClass) -> Result<u64, String> {
        let mut total = 0;
        for port in [PortId::A, PortId::B] {
            let c = self
                .wire
                .impairment_counters(port)
                .map_err(|e| e.to_string())?;
            total += impaired(class, c);
        }
        Ok(total)
    }

    /// Fills in the accounting and closes both functions.
    fn finish(self, report: &mut ClassReport) -> Result<(), String> {
        report.sent = self.sent;
        report.received = self.received;
        report.accounted = self.accounted;
        report.lost_beyond_flushed = self.lost;
        report.duplicates = self.duplicates;
        report.corrupt = self.corrupt;
        report.leaked = self.outstanding.len() as u64;
        let closed = self.client.close();
        self.server.close().and(closed)
    }
}

/// The transport's defaults for the classes: a lost frame is sent again after about 17 ms,
/// seven times (a model thread that a loaded machine keeps off the CPU for a few time slices
/// must not exhaust the retries).
fn base_params() -> ConnectParams {
    ConnectParams {
        ack_timeout: 12,
        ..ConnectParams::default()
    }
}

/// Runs RDMA class `class` with `injections` faults.
pub(super) fn run_class(class: FaultClass, injections: u32) -> Result<ClassReport, String> {
    let n = u64::from(injections);
    let params = match class {
        // Two retries of about 17 ms each: a cut of about 50 ms exhausts them.
        FaultClass::RdmaRetryExceeded => ConnectParams {
            retry_count: 2,
            ..base_params()
        },
        // Finite RNR retries first, 2.56 ms apart (the receive comes after two, with three to
        // spare), then retries without limit, 0.64 ms apart.
        FaultClass::RdmaRnr => ConnectParams {
            rnr_timer: 16,
            rnr_retry: 5,
            ..base_params()
        },
        _ => base_params(),
    };
    let mut rig = Rig::new(class, params)?;
    let mut report = ClassReport {
        name: class.name(),
        ..ClassReport::default()
    };
    let [c0, s0] = rig.counters();
    for _ in 0..WARM_UP {
        rig.run_ping(None)?;
    }
    match class {
        FaultClass::RdmaFrameLoss
        | FaultClass::RdmaDuplicate
        | FaultClass::RdmaReorder
        | FaultClass::RdmaIcrcCorrupt => {
            // Impaired frames met so far, and those after the last iteration that completed:
            // each is recovered once an iteration after it completes, every byte checked.
            let mut counted = rig.impaired(class)?;
            report.injections = counted;
            report.recoveries = counted;
            let limit = WARM_UP + n * ITERATIONS_PER_INJECTION;
            while report.injections < n {
                if rig.ping >= limit {
                    return Err(format!(
                        "{} iterations met {} of {n} impaired frames",
                        rig.ping, report.injections
                    ));
                }
                let began = Instant::now();
                let failed = rig.run_ping(None)?;
                report
                    .recover_us
                    .extend(failed.iter().map(|d| d.as_secs_f64() * 1e6));
                let now = rig.impaired(class)?;
                if now > counted {
                    report.injections += now - counted;
                    report.recoveries += now - counted;
                    report.recover_us.push(began.elapsed().as_secs_f64() * 1e6);
                    counted = now;
                }
            }
        }
        FaultClass::RdmaRnr => {
            let finite = n.div_ceil(2);
            for i in 0..n {
                if i == finite {
                    rig.reconnect(ConnectParams {
                        rnr_timer: 12,
                        rnr_retry: 7,
                        ..rig.params
                    })?;
                }
                // With finite retries, the receive comes after two RNR NAKs; without limit,
                // after more than any finite count (6) would allow.
                let naks = if i < finite { 2 } else { 10 };
                let at = if i % 2 == 0 {
                    msg::SOURCE_AD
                } else {
                    msg::READ_GO_AHEAD
                };
                let began = Instant::now();
                let failed = rig.run_ping(Some((at, Inject::RnrHold { naks })))?;
                if !failed.is_empty() {
                    return Err(format!("RNR hold {i} failed the connection"));
                }
                report.injections += 1;
                report.recoveries += 1;
                report.recover_us.push(began.elapsed().as_secs_f64() * 1e6);
            }
        }
        FaultClass::RdmaRetryExceeded | FaultClass::RdmaQpFatal => {
            let what = if class == FaultClass::RdmaQpFatal {
                Inject::Fatal
            } else {
                Inject::Cut
            };
            for i in 0..n {
                let taken_before = rig.models[0].faults_taken() + rig.models[1].faults_taken();
                let at = i as usize % MESSAGES;
                let failed = rig.run_ping(Some((at, what)))?;
                let taken = rig.models[0].faults_taken() + rig.models[1].faults_taken();
                report.injections += match what {
                    Inject::Fatal => taken - taken_before,
                    _ => 1,
                };
                if failed.len() != 1 {
                    return Err(format!(
                        "injection {i} before message {at}: {} recoveries, not 1",
                        failed.len()
                    ));
                }
                report.recoveries += 1;
                report
                    .recover_us
                    .extend(failed.iter().map(|d| d.as_secs_f64() * 1e6));
            }
        }
        _ => return Err(format!("{} is not an RDMA class", class.name())),
    }
    let [c1, s1] = rig.counters();
    let (c, s) = (c1.since(&c0), s1.since(&s0));
    report.evidence = match class {
        FaultClass::RdmaFrameLoss => c.roce_retransmits + s.roce_retransmits,
        FaultClass::RdmaDuplicate => c.roce_duplicates + s.roce_duplicates,
        FaultClass::RdmaReorder => c.roce_retransmits + s.roce_retransmits,
        FaultClass::RdmaIcrcCorrupt => c.roce_icrc_drops + s.roce_icrc_drops,
        FaultClass::RdmaRnr => c.roce_rnr_naks_sent + s.roce_rnr_naks_sent,
        FaultClass::RdmaRetryExceeded => rig.error_completions,
        _ => rig.fatal_events,
    };
    rig.finish(&mut report)?;
    Ok(report)
}
