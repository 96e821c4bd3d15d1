//! A hostile peer's script against a pair of CMs, with the invariants a CM must keep whatever it
//! is sent. Shared by the `cm_sequence` fuzz target and the deterministic tests, so that both
//! check the same rules.
//!
//! A client CM and a server CM (listening on [`PORT`]) first connect once over a clean wire;
//! every MAD they exchange is recorded as a template. The script (any bytes) is then read as a
//! sequence of operations: raw MADs, recorded MADs replayed or edited, messages forged with
//! communication IDs picked from those either side issued (and 0, and arbitrary ones), MRA
//! and REJ floods, DREQs for any QP, time passing (by steps or past every timer, or stepping
//! back), consumer
//! calls (connect, accept, reject, disconnect, unlisten, listen again), and deliveries of what
//! the two sides sent over a wire that loses what the script says.
//!
//! After every step, [`run`] checks:
//! - a connection is established only on a REP (active side) or RTU (passive side) naming it
//!   by its communication ID, the passive side only after its consumer accepted, and at most
//!   once;
//! - every event names a communication ID that side issued (a [`Cm::connect`] return or a
//!   [`Event::ConnectRequest`](crate::cm::Event::ConnectRequest)), and a connect request names a fresh one;
//! - a disconnect is reported only for a connection that was established or accepted; timers report only
//!   timeouts and unanswered DREQs;
//! - the connection table, the answers queued and the MADs one poll hands out stay within
//!   [`Limits`](super::Limits); every MAD a side sends parses as a CM message.
//!
//! Nothing here panics on its own input; a broken rule is returned as a [`Violation`].

use super::wire::{parse, IdPair, Mad, Message, Mra, PrivateData, Rej};
use super::{Cm, CmAddress, ConnId, Identity, QpParams};
use cxdirect_hw::cm::attr;
use std::collections::{HashSet, VecDeque};
use std::net::Ipv4Addr;
use std::time::Duration;

/// The client's address.
pub const CLIENT: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
/// The server's address.
pub const SERVER: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
/// A third party on the link.
pub const EVIL: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 66);
/// The port the server listens on.
pub const PORT: u16 = 7174;
/// Connection slots of each side.
pub const MAX_CONNS: usize = 8;
/// One-shot answers each side may queue.
pub const MAX_SENDS: usize = 16;
/// MADs in flight on the wire at most (older ones are lost).
const WIRE_DEPTH: usize = 64;
/// Templates kept.
const MAX_RECORDED: usize = 64;
/// Operations run at most, whatever the script's length.
const MAX_OPS: usize = 4096;

/// A broken invariant: which side, at which operation, and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Index of the operation that broke it (`None`: during the clean setup).
    pub op: Option<usize>,
    /// What was seen.
    pub what: String,
}

impl core::fmt::Display for Violation {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.op {
            Some(i) => write!(f, "operation {i}: {}", self.what),
            None => write!(f, "setup: {}", self.what),
        }
    }
}

/// What a script did, for tests that want to see it reached the states it aimed at.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Operations run.
    pub ops: usize,
    /// Connections established (both sides together).
    pub established: u64,
    /// Disconnects reported.
    pub disconnected: u64,
    /// Rejections reported.
    pub rejected: u64,
    /// Timeouts reported.
    pub timed_out: u64,
    /// MADs the sides refused (malformed, unknown, duplicate, refused).
    pub refused: u64,
}

/// What one side issued and saw.
struct Track {
    /// IDs this side issued: `connect` returns (active) and connect requests (passive).
    issued: HashSet<u32>,
    /// IDs of connections this side started.
    active: HashSet<u32>,
    /// Passive IDs the consumer accepted.
    accepted: HashSet<u32>,
    /// Connect requests not yet accepted or rejected.
    pending: Vec<ConnId>,
    /// IDs ever established.
    established: HashSet<u32>,
}

impl Track {
    fn new() -> Self {
        Self {
            issued: HashSet::new(),
            active: HashSet::new(),
            accepted: HashSet::new(),
            pending: Vec::new(),
            established: HashSet::new(),
        }
    }
}

struct Side {
    cm: Cm,
    ip: Ipv4Addr,
    track: Track,
    name: &'static str,
}

struct Pair {
    sides: [Side; 2],
    now: Duration,
    /// MADs sent and not yet delivered: (to the server?, bytes).
    wire: VecDeque<(bool, Mad)>,
    recorded: Vec<Mad>,
    op: Option<usize>,
    outcome: Outcome,
    next_qpn: u32,
    next_src_port: u16,
}

const C: usize = 0;
const S: usize = 1;

fn identity(guid: u64, ip: Ipv4Addr, seed: u64) -> Identity {
    let mut me = Identity::new(guid, ip, seed);
    me.limits.max_connections = MAX_CONNS;
    me.limits.max_pending_sends = MAX_SENDS;
    me.limits.max_listeners = 2;
    me
}

fn attr_of(mad: &Mad) -> u16 {
    u16::from_be_bytes([mad[16], mad[17]])
}

/// Reads the script.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }

    fn word(&mut self) -> u32 {
        u32::from_le_bytes([self.byte(), self.byte(), self.byte(), self.byte()])
    }

    fn bytes(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.0.len());
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        head
    }
}

impl Pair {
    fn new() -> Self {
        let client = Cm::new(identity(0x0002_c903_0000_0001, CLIENT, 0x1234));
        let mut server = Cm::new(identity(0x0002_c903_0000_0002, SERVER, 0x9876));
        // Two listener slots, one free: the script may listen on another port.
        let _ = server.listen(PORT);
        Self {
            sides: [
                Side {
                    cm: client,
                    ip: CLIENT,
                    track: Track::new(),
                    name: "client",
                },
                Side {
                    cm: server,
                    ip: SERVER,
                    track: Track::new(),
                    name: "server",
                },
            ],
            now: Duration::ZERO,
            wire: VecDeque::new(),
            recorded: Vec::new(),
            op: None,
            outcome: Outcome::default(),
            next_qpn: 0x100,
            next_src_port: 40000,
        }
    }

    fn violation(&self, side: usize, what: impl core::fmt::Display) -> Violation {
        Violation {
            op: self.op,
            what: format!("{}: {what}", self.sides[side].name),
        }
    }

    fn connect(&mut self, port: u16) -> Result<(), Violation> {
        let (qpn, src) = (self.next_qpn, self.next_src_port);
        self.next_qpn = (self.next_qpn + 1) & 0x00ff_ffff;
        self.next_src_port = self.next_src_port.wrapping_add(1);
        if let Ok(id) = self.sides[C]
            .cm
            .connect(SERVER, port, src, &QpParams::rping(qpn), b"hello")
        {
            let t = &mut self.sides[C].track;
            if !t.issued.insert(id.0) {
                return Err(self.violation(C, format_args!("connect reused live ID {id:?}")));
            }
            t.active.insert(id.0);
        }
        Ok(())
    }

    /// `mad` reaches `side` from `from`.
    fn deliver(&mut self, side: usize, from: Ipv4Addr, mad: &Mad) -> Result<(), Violation> {
        let r = self.sides[side]
            .cm
            .receive(self.now, CmAddress::ipv4(from), mad);
        match r {
            Ok(Some(event)) => self.check(side, event, Some(mad))?,
            Ok(None) => {}
            Err(_) => self.outcome.refused += 1,
        }
        self.bounds(side)
    }

    fn bounds(&self, side: usize) -> Result<(), Violation> {
        let n = self.sides[side].cm.connections();
        if n > MAX_CONNS {
            return Err(self.violation(side, format_args!("{n} connections held")));
        }
        let s = self.sides[side].cm.stats();
        if s.malformed + s.unknown + s.duplicates > s.received {
            return Err(self.violation(side, format_args!("counters disagree: {s:?}")));
        }
        Ok(())
    }

    /// Runs both sides' timers and puts what they send on the wire.
    fn poll(&mut self) -> Result<(), Violation> {
        for side in [C, S] {
            let p = self.sides[side].cm.poll(self.now);
            if p.sends.len() > MAX_SENDS + MAX_CONNS {
                return Err(
                    self.violation(side, format_args!("{} MADs in one poll", p.sends.len()))
                );
            }
            for event in p.events {
                self.check(side, event, None)?;
            }
            for (to, mad) in p.sends {
                if let Err(e) = parse(&mad) {
                    return Err(self.violation(side, format_args!("sent an unparsable MAD: {e}")));
                }
                let to_server = to == CmAddress::ipv4(SERVER);
                if to == CmAddress::ipv4(self.sides[side].ip) {
                    return Err(self.violation(side, format_args!("sent a MAD to itself")));
                }
                if self.recorded.len() < MAX_RECORDED {
                    self.recorded.push(mad);
                }
                // Answers to the third party go nowhere.
                if to == CmAddress::ipv4(CLIENT) || to_server {
                    if self.wire.len() >= WIRE_DEPTH {
                        self.wire.pop_front();
                    }
                    self.wire.push_back((to_server, mad));
                }
            }
            self.bounds(side)?;
        }
        Ok(())
    }

    /// Delivers everything on the wire, losing the MADs whose bit in `lose` is set.
    fn pump(&mut self, lose: u8) -> Result<(), Violation> {
        let in_flight: Vec<_> = self.wire.drain(..).collect();
        for (k, (to_server, mad)) in in_flight.into_iter().enumerate() {
            if lose >> (k % 8) & 1 == 1 {
                continue;
            }
            let (to, from) = if to_server { (S, CLIENT) } else { (C, SERVER) };
            self.deliver(to, from, &mad)?;
        }
        Ok(())
    }

    /// The consumer's part: connect requests accepted at once (the clean setup).
    fn accept_all(&mut self) -> Result<(), Violation> {
        while let Some(id) = self.sides[S].track.pending.pop() {
            self.accept(id);
        }
        Ok(())
    }

    fn accept(&mut self, id: ConnId) {
        let qpn = self.next_qpn;
        self.next_qpn = (self.next_qpn + 1) & 0x00ff_ffff;
        if self.sides[S]
            .cm
            .accept(id, &QpParams::rping(qpn), b"welcome")
            .is_ok()
        {
            self.sides[S].track.accepted.insert(id.0);
        }
    }

    /// One connection, set up over a clean wire; every MAD recorded.
    fn setup(&mut self) -> Result<(), Violation> {
        self.connect(PORT)?;
        for _ in 0..8 {
            self.poll()?;
            self.pump(0)?;
            self.accept_all()?;
        }
        if self.outcome.established != 2 {
            return Err(self.violation(C, "the clean setup did not connect"));
        }
        Ok(())
    }

    /// An ID for a forged message: one either side issued, 0, or any.
    fn pick_id(&self, input: &mut Input<'_>) -> u32 {
        let mut ids: Vec<u32> = self.sides[C].track.issued.iter().copied().collect();
        ids.extend(self.sides[S].track.issued.iter().copied());
        ids.sort_unstable();
        let k = usize::from(input.byte());
        match k % (ids.len() + 2) {
            i if i < ids.len() => ids[i],
            i if i == ids.len() => 0,
            _ => input.word(),
        }
    }

    fn target(op: u8) -> usize {
        if op & 0x10 == 0 {
            S
        } else {
            C
        }
    }

    fn sender(&self, op: u8) -> Ipv4Addr {
        match op >> 5 & 3 {
            0 => EVIL,
            _ if Self::target(op) == S => CLIENT,
            _ => SERVER,
        }
    }

    fn step(&mut self, op: u8, input: &mut Input<'_>) -> Result<(), Violation> {
        let (to, from) = (Self::target(op), self.sender(op));
        match op & 0x0f {
            // Raw bytes, with a CM header half the time so the parser goes deeper.
            0 => {
                let mut mad = [0u8; 256];
                let raw = input.bytes(256);
                mad[..raw.len()].copy_from_slice(raw);
                if op & 0x80 != 0 {
                    mad[..4].copy_from_slice(&[1, 0x07, 2, 0x03]);
                    mad[16] = 0;
                    mad[17] = 0x10 + mad[17] % 8;
                }
                self.deliver(to, from, &mad)?;
            }
            // A recorded MAD with bytes replaced.
            1 => {
                let template = self.template(input.byte());
                let mut edits = [(0usize, 0u8); 8];
                let n = usize::from(input.byte() % 8);
                for e in &mut edits[..n] {
                    *e = (usize::from(input.byte()), input.byte());
                }
                if let Some(mut mad) = template {
                    for &(at, value) in &edits[..n] {
                        mad[at] = value;
                    }
                    self.deliver(to, from, &mad)?;
                }
            }
            // A recorded MAD replayed as it was, to either side.
            2 => {
                if let Some(mad) = self.template(input.byte()) {
                    self.deliver(to, from, &mad)?;
                }
            }
            // A recorded message with other communication IDs.
            3 => {
                let template = self.template(input.byte());
                let (local, remote) = (self.pick_id(input), self.pick_id(input));
                if let Some(mut mad) = template {
                    mad[24..28].copy_from_slice(&local.to_be_bytes());
                    if attr_of(&mad) != attr::REQ {
                        mad[28..32].copy_from_slice(&remote.to_be_bytes());
                    }
                    self.deliver(to, from, &mad)?;
                }
            }
            // Time passes: up to 70 s in steps, or past every timer there is.
            4 => self.now += Duration::from_millis(u64::from(input.byte()) * 275),
            // A clock that steps back (a caller mixing clocks) must break nothing either.
            5 if op & 0x80 != 0 => {
                let back = Duration::from_millis(u64::from(input.byte()) * 275);
                self.now = self.now.saturating_sub(back);
            }
            5 => self.now += Duration::from_secs(3600),
            6 | 7 => {
                let side = if op & 1 == 0 { C } else { S };
                let k = usize::from(input.byte());
                let ids = &self.sides[side].track.established;
                if !ids.is_empty() {
                    let mut v: Vec<u32> = ids.iter().copied().collect();
                    v.sort_unstable();
                    let _ = self.sides[side].cm.disconnect(ConnId(v[k % v.len()]));
                }
            }
            8 => {
                let port = if input.byte() % 4 == 0 {
                    PORT + 1
                } else {
                    PORT
                };
                self.connect(port)?;
            }
            9 => {
                let k = usize::from(input.byte());
                let pending = &self.sides[S].track.pending;
                if !pending.is_empty() {
                    let id = pending[k % pending.len()];
                    self.sides[S].track.pending.retain(|&p| p != id);
                    self.accept(id);
                }
            }
            10 => {
                if let Some(id) = self.sides[S].track.pending.pop() {
                    let _ = self.sides[S].cm.reject(id, b"no");
                }
            }
            // The listener goes away, or comes back.
            11 => {
                if !self.sides[S].cm.unlisten(PORT) {
                    let _ = self.sides[S].cm.listen(PORT);
                }
            }
            12 => self.pump(input.byte())?,
            // MRA abuse: the longest service timeout, for any message, any IDs.
            13 => {
                let mra = Message::Mra(Mra {
                    local_comm_id: self.pick_id(input),
                    remote_comm_id: self.pick_id(input),
                    message_mraed: input.byte() % 4,
                    service_timeout: 31,
                    private_data: PrivateData::EMPTY,
                })
                .encode(u64::from(input.word()));
                self.deliver(to, from, &mra)?;
            }
            // A REJ storm with IDs either side issued.
            14 => {
                for _ in 0..input.byte() % 32 {
                    let mut ari = [0u8; 72];
                    ari[..8].copy_from_slice(&0x0002_c903_0000_0001u64.to_be_bytes());
                    if input.byte() & 1 == 0 {
                        ari[..8].copy_from_slice(&0x0002_c903_0000_0002u64.to_be_bytes());
                    }
                    let rej = Message::Rej(Rej {
                        local_comm_id: self.pick_id(input),
                        remote_comm_id: self.pick_id(input),
                        message_rejected: input.byte() % 3,
                        reason: u16::from(input.byte() % 40),
                        ari_len: 8,
                        ari,
                        private_data: PrivateData::EMPTY,
                    })
                    .encode(u64::from(input.word()));
                    self.deliver(to, from, &rej)?;
                }
            }
            // A DREQ for any pair of IDs and QP, or a DREP / RTU.
            _ => {
                let (local, remote) = (self.pick_id(input), self.pick_id(input));
                let mad = match input.byte() % 3 {
                    0 => Message::Dreq(super::Dreq {
                        local_comm_id: local,
                        remote_comm_id: remote,
                        remote_qpn: 0x100 + u32::from(input.byte() % 8),
                        private_data: PrivateData::EMPTY,
                    }),
                    k => {
                        let pair = IdPair {
                            local_comm_id: local,
                            remote_comm_id: remote,
                            private_data: PrivateData::EMPTY,
                        };
                        if k == 1 {
                            Message::Drep(pair)
                        } else {
                            Message::Rtu(pair)
                        }
                    }
                }
                .encode(u64::from(input.word()));
                self.deliver(to, from, &mad)?;
            }
        }
        self.poll()
    }

    fn template(&self, k: u8) -> Option<Mad> {
        (!self.recorded.is_empty()).then(|| self.recorded[usize::from(k) % self.recorded.len()])
    }
}

/// Runs `script` against a freshly connected client/server pair (see the module's
/// documentation); `Err` names the first broken invariant.
pub fn run(script: &[u8]) -> Result<Outcome, Violation> {
    let mut pair = Pair::new();
    pair.setup()?;
    let mut input = Input(script);
    let mut ops = 0;
    while !input.0.is_empty() && ops < MAX_OPS {
        pair.op = Some(ops);
        let op = input.byte();
        pair.step(op, &mut input)?;
        ops += 1;
    }
    // Everything settles: the wire delivers, every timer runs out.
    pair.op = Some(ops);
    for _ in 0..4 {
        pair.pump(0)?;
        pair.now += Duration::from_secs(3600);
        pair.poll()?;
    }
    pair.outcome.ops = ops;
    Ok(pair.outcome)
}

mod invariants;
