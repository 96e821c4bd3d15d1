//! The CM's connections and their state machine (`cm.c`'s `ib_cm_state`, as rdma_cm drives it).

use super::timing::convert_to_ms;
use super::wire::{parse, Mad, Message};
use super::{
    CmAddress, CmError, CmStats, ConnId, Event, Identity, QpAttributes, ReceiveError, Stage,
    TimedOut,
};
use std::collections::VecDeque;
use std::time::Duration;

/// Connection states, named after `enum ib_cm_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Active: REQ outstanding (`IB_CM_REQ_SENT`).
    ReqSent,
    /// Active: an MRA extended the REQ's timer (`IB_CM_MRA_REQ_RCVD`).
    MraReqRcvd,
    /// Passive: REQ delivered, waiting for accept or reject. rdma_cm always arms a delayed MRA
    /// here (`ib_send_cm_mra(CMA_CM_MRA_SETTING)`), so this is `IB_CM_MRA_REQ_SENT`.
    ReqRcvd,
    /// Passive: REP outstanding (`IB_CM_REP_SENT`).
    RepSent,
    /// Passive: an MRA extended the REP's timer (`IB_CM_MRA_REP_RCVD`).
    MraRepRcvd,
    /// `IB_CM_ESTABLISHED`.
    Established,
    /// DREQ outstanding (`IB_CM_DREQ_SENT`).
    DreqSent,
    /// `IB_CM_TIMEWAIT`, until the deadline.
    Timewait,
}

impl State {
    fn name(self) -> &'static str {
        match self {
            State::ReqSent => "REQ_SENT",
            State::MraReqRcvd => "MRA_REQ_RCVD",
            State::ReqRcvd => "REQ_RCVD",
            State::RepSent => "REP_SENT",
            State::MraRepRcvd => "MRA_REP_RCVD",
            State::Established => "ESTABLISHED",
            State::DreqSent => "DREQ_SENT",
            State::Timewait => "TIMEWAIT",
        }
    }
}

/// A message under ib_mad's retransmission: resent unchanged every `timeout_ms` until answered
/// or `retries_left` runs out (`ib_post_send_mad` with `retries = max_cm_retries`).
#[derive(Clone, Copy)]
struct Retx {
    mad: Mad,
    stage: Stage,
    timeout_ms: u64,
    retries_left: u8,
    attempts: u32,
    first_sent: Option<Duration>,
    /// `None` until first sent by [`Cm::poll`].
    deadline: Option<Duration>,
}

#[derive(Clone, Copy)]
struct Conn {
    local_id: u32,
    /// 0 until the peer's ID is known (Linux matches `remote_id == 0` the same way).
    remote_id: u32,
    state: State,
    peer: CmAddress,
    remote_guid: u64,
    remote_qpn: u32,
    local_qpn: u32,
    /// The TID of the exchange in progress (`cm_id_priv->tid`).
    tid: u64,
    /// `cm_id_priv->timeout_ms`: the REQ's, or the passive side's REP/DREQ timeout.
    timeout_ms: u64,
    max_cm_retries: u8,
    /// The port of the service ID: connected to (active) or listened on (passive).
    port: u16,
    /// `av.timeout`: the local ACK timeout, also the timewait time.
    av_timeout: u8,
    qp: QpAttributes,
    retx: Option<Retx>,
    timewait_until: Option<Duration>,
}

/// What [`Cm::poll`] hands back.
#[derive(Debug, Default)]
pub struct Poll {
    /// MADs to send on QP1, in order.
    pub sends: Vec<(CmAddress, Mad)>,
    /// Timer events (timeouts, DREQs given up).
    pub events: Vec<Event>,
}

/// The connection manager of one port.
pub struct Cm {
    me: Identity,
    conns: Vec<Option<Conn>>,
    listeners: Vec<u16>,
    oneshot: VecDeque<(CmAddress, Mad)>,
    rng: u64,
    stats: CmStats,
}

const QPN_MASK: u32 = 0x00ff_ffff;

impl Cm {
    /// A CM for the port `me` describes, with room for `me.limits` and nothing else.
    pub fn new(me: Identity) -> Self {
        let mut conns = Vec::with_capacity(me.limits.max_connections);
        conns.resize(me.limits.max_connections, None);
        Self {
            conns,
            listeners: Vec::with_capacity(me.limits.max_listeners),
            oneshot: VecDeque::with_capacity(me.limits.max_pending_sends),
            rng: me.seed | 1,
            stats: CmStats::default(),
            me,
        }
    }

    /// The identity it was made with.
    pub fn identity(&self) -> &Identity {
        &self.me
    }

    /// Counters.
    pub fn stats(&self) -> CmStats {
        self.stats
    }

    /// Live connections (timewait included).
    pub fn connections(&self) -> usize {
        self.conns.iter().flatten().count()
    }

    /// The state of a connection, as `ib_cm_state` names it (`None` once freed).
    pub fn state(&self, id: ConnId) -> Option<&'static str> {
        self.find_id(id).map(|i| self.slot(i).state.name())
    }

    fn next_rand(&mut self) -> u64 {
        // xorshift64*: IDs and PSNs need only be unpredictable to an off-path peer and
        // distinct; the seed carries the entropy.
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A fresh local communication ID: nonzero and unique among live connections.
    fn new_comm_id(&mut self) -> u32 {
        loop {
            let id = (self.next_rand() >> 32) as u32;
            if id != 0 && !self.conns.iter().flatten().any(|c| c.local_id == id) {
                return id;
            }
        }
    }

    /// `cm_form_tid`: the agent's `hi_tid` above the local ID. Linux ORs the `__be32` ID in
    /// as a host integer and stores the whole as big-endian, so on a little-endian host (what
    /// peers run) the low word carries the ID's bytes reversed; copied so TIDs read the same.
    fn form_tid(&self, local_id: u32) -> u64 {
        (u64::from(self.me.tid_high) << 32) | u64::from(local_id.swap_bytes())
    }

    fn free_slot(&self) -> Option<usize> {
        self.conns.iter().position(Option::is_none)
    }

    fn find_id(&self, id: ConnId) -> Option<usize> {
        self.conns
            .iter()
            .position(|c| c.is_some_and(|c| c.local_id == id.0))
    }

    /// `cm_acquire_id(local_id, remote_id)`: both must match exactly (remote 0 = not yet known).
    fn acquire(&self, local: u32, remote: u32) -> Option<usize> {
        self.conns
            .iter()
            .position(|c| c.is_some_and(|c| c.local_id == local && c.remote_id == remote))
    }

    fn slot(&self, i: usize) -> &Conn {
        // Callers pass indices found by the lookups above, in the same call.
        self.conns[i].as_ref().unwrap_or_else(|| unreachable!())
    }

    fn slot_mut(&mut self, i: usize) -> &mut Conn {
        self.conns[i].as_mut().unwrap_or_else(|| unreachable!())
    }

    fn queue(&mut self, to: CmAddress, mad: Mad) {
        if self.oneshot.len() >= self.me.limits.max_pending_sends {
            self.stats.send_queue_full += 1;
            return;
        }
        self.oneshot.push_back((to, mad));
    }

    /// Answers REQs for `port` in the TCP port space (service ID `0x0106_0000 | port`).
    pub fn listen(&mut self, port: u16) -> Result<(), CmError> {
        if self.listeners.contains(&port) {
            return Err(CmError::AlreadyListening(port));
        }
        if self.listeners.len() >= self.me.limits.max_listeners {
            return Err(CmError::ListenersFull {
                max: self.me.limits.max_listeners,
            });
        }
        self.listeners.push(port);
        Ok(())
    }

    /// Stops answering REQs for `port` (they get REJ INVALID_SERVICE_ID); returns whether it
    /// was listened on.
    pub fn unlisten(&mut self, port: u16) -> bool {
        let before = self.listeners.len();
        self.listeners.retain(|&p| p != port);
        before != self.listeners.len()
    }

    /// Enters timewait (`cm_enter_timewait`): the slot stays for `cm_convert_to_ms(av.timeout)`
    /// so late messages are recognised, then is freed.
    fn enter_timewait(&mut self, i: usize, now: Duration) {
        let c = self.slot_mut(i);
        c.state = State::Timewait;
        c.retx = None;
        c.timewait_until = Some(now + Duration::from_millis(convert_to_ms(c.av_timeout)));
    }

    /// Runs the timers and hands out what is to be sent now: first sends of REQ/REP/DREQ,
    /// their retransmissions, and the one-shot answers queued since the last poll.
    pub fn poll(&mut self, now: Duration) -> Poll {
        let mut out = Poll::default();
        for i in 0..self.conns.len() {
            let Some(c) = self.conns[i].as_mut() else {
                continue;
            };
            if let Some(until) = c.timewait_until {
                if now >= until {
                    self.conns[i] = None;
                }
                continue;
            }
            let Some(r) = c.retx.as_mut() else { continue };
            match r.deadline {
                None => {
                    r.deadline = Some(now + Duration::from_millis(r.timeout_ms));
                    r.first_sent = Some(now);
                    r.attempts = 1;
                    out.sends.push((c.peer, r.mad));
                }
                Some(d) if now >= d => {
                    if r.retries_left > 0 {
                        r.retries_left -= 1;
                        r.attempts += 1;
                        r.deadline = Some(now + Duration::from_millis(r.timeout_ms));
                        out.sends.push((c.peer, r.mad));
                        self.stats.retransmits += 1;
                    } else {
                        let r = *r;
                        let (id, peer, port) = (ConnId(c.local_id), c.peer, c.port);
                        // `cm_process_send_error`: REQ and REP go back to idle (freed),
                        // DREQ to timewait; rdma_cm reports UNREACHABLE or DISCONNECTED.
                        match r.stage {
                            Stage::Req | Stage::Rep => {
                                self.conns[i] = None;
                                out.events.push(Event::TimedOut(TimedOut {
                                    id,
                                    peer,
                                    port,
                                    stage: r.stage,
                                    attempts: r.attempts,
                                    // The caller's clock may step back (an MRA taken
                                    // at an earlier `now`): never subtract past zero.
                                    waited_ms: r
                                        .first_sent
                                        .map_or(0, |f| now.saturating_sub(f).as_millis() as u64),
                                }));
                            }
                            Stage::Dreq => {
                                self.enter_timewait(i, now);
                                out.events.push(Event::Disconnected {
                                    id,
                                    timed_out: true,
                                });
                            }
                        }
                    }
                }
                Some(_) => {}
            }
        }
        out.sends.extend(self.oneshot.drain(..));
        self.stats.sent += out.sends.len() as u64;
        out
    }

    /// The earliest time [`Cm::poll`] has timer work (`None`: only queued answers, if any).
    pub fn next_deadline(&self) -> Option<Duration> {
        self.conns
            .iter()
            .flatten()
            .filter_map(|c| {
                c.timewait_until
                    .or_else(|| c.retx.as_ref().and_then(|r| r.deadline))
            })
            .min()
    }

    /// Takes one received MAD from `from` (the sender's GID and QPN, from the receive
    /// completion). Answers go out at the next [`Cm::poll`]. `Ok(None)`: accepted, nothing to
    /// report; `Err`: the MAD changed no connection.
    pub fn receive(
        &mut self,
        now: Duration,
        from: CmAddress,
        mad: &Mad,
    ) -> Result<Option<Event>, ReceiveError> {
        self.stats.received += 1;
        let parsed = match parse(mad) {
            Ok(p) => p,
            Err(e) => {
                self.stats.malformed += 1;
                return Err(e.into());
            }
        };
        let r = match parsed.message {
            Message::Req(req) => {
                // The word where other messages carry the remote ID, which `cm_issue_rej`
                // echoes as the REJ's local ID.
                let rcv_remote = u32::from_be_bytes([mad[28], mad[29], mad[30], mad[31]]);
                self.on_req(from, parsed.tid, rcv_remote, &req)
            }
            Message::Rep(rep) => self.on_rep(from, parsed.tid, &rep),
            Message::Rtu(rtu) => self.on_rtu(&rtu),
            Message::Rej(rej) => self.on_rej(now, &rej),
            Message::Mra(mra) => self.on_mra(now, &mra),
            Message::Dreq(dreq) => self.on_dreq(now, from, parsed.tid, &dreq),
            Message::Drep(drep) => self.on_drep(now, &drep),
        };
        match &r {
            Err(ReceiveError::UnknownConnection { .. }) => self.stats.unknown += 1,
            Err(ReceiveError::Duplicate { .. } | ReceiveError::Unexpected { .. }) => {
                self.stats.duplicates += 1
            }
            _ => {}
        }
        r
    }
}

mod calls;
mod handlers;
