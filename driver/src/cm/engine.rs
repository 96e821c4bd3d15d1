//! The CM's connections and their state machine (`cm.c`'s `ib_cm_state`, as rdma_cm drives it).

use super::timing::{ack_timeout, convert_to_ms};
use super::wire::{
    parse, pd_size, CmaHeader, Dreq, Mad, Message, Path, PrivateData, Rej, Rep, Req, CMA_HDR_SIZE,
};
use super::{
    CmError, CmStats, ConnId, Event, Identity, MadAddress, QpAttributes, QpParams, ReceiveError,
    Stage, TimedOut,
};
use cxdirect_hw::cm::{msg_response, port_space, rej_reason, service_id};
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
    peer: MadAddress,
    remote_guid: u64,
    remote_qpn: u32,
    local_qpn: u32,
    /// The TID of the exchange in progress (`cm_id_priv->tid`).
    tid: u64,
    /// `cm_id_priv->timeout_ms`: the REQ's, or the passive side's REP/DREQ timeout.
    timeout_ms: u64,
    max_cm_retries: u8,
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
    pub sends: Vec<(MadAddress, Mad)>,
    /// Timer events (timeouts, DREQs given up).
    pub events: Vec<Event>,
}

/// The connection manager of one port.
pub struct Cm {
    me: Identity,
    conns: Vec<Option<Conn>>,
    listeners: Vec<u16>,
    oneshot: VecDeque<(MadAddress, Mad)>,
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

    fn queue(&mut self, to: MadAddress, mad: Mad) {
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

    /// Starts a connection to `dest_ip`:`dest_port` from `src_port`: builds the REQ as
    /// `cma_connect_ib` and `cm_format_req` do and sends it at the next [`Cm::poll`].
    /// `private_data` follows the 36-byte `cma_hdr` (at most 56 bytes).
    pub fn connect(
        &mut self,
        dest_ip: std::net::Ipv4Addr,
        dest_port: u16,
        src_port: u16,
        qp: &QpParams,
        private_data: &[u8],
    ) -> Result<ConnId, CmError> {
        let room = pd_size::REQ - CMA_HDR_SIZE;
        if private_data.len() > room {
            return Err(CmError::PrivateDataTooLong {
                len: private_data.len(),
                max: room,
            });
        }
        if qp.qpn > QPN_MASK {
            return Err(CmError::BadQpn(qp.qpn));
        }
        let slot = self.free_slot().ok_or(CmError::TableFull {
            max: self.me.limits.max_connections,
        })?;
        let local_id = self.new_comm_id();
        let psn = (self.next_rand() >> 40) as u32 & QPN_MASK;
        let me = self.me;
        let peer = MadAddress::ipv4(dest_ip);
        let mut pd = [0u8; pd_size::REQ];
        pd[..CMA_HDR_SIZE].copy_from_slice(
            &CmaHeader {
                src_ip: me.ip,
                dst_ip: dest_ip,
                src_port,
            }
            .encode(),
        );
        pd[CMA_HDR_SIZE..CMA_HDR_SIZE + private_data.len()].copy_from_slice(private_data);
        let routed = me.hop_limit > 1;
        let req = Req {
            local_comm_id: local_id,
            service_id: service_id(port_space::TCP, dest_port),
            local_ca_guid: me.node_guid,
            local_q_key: 0,
            local_qpn: qp.qpn,
            responder_resources: qp.responder_resources,
            local_eecn: 0,
            initiator_depth: qp.initiator_depth,
            remote_eecn: 0,
            remote_cm_response_timeout: me.cm_response_timeout,
            transport_service_type: 0,
            flow_control: false,
            starting_psn: psn,
            local_cm_response_timeout: me.cm_response_timeout,
            retry_count: qp.retry_count.min(7),
            pkey: 0xffff,
            path_mtu: me.path_mtu,
            rdc_exists: false,
            rnr_retry_count: qp.rnr_retry_count.min(7),
            max_cm_retries: me.max_cm_retries,
            srq: qp.srq,
            extended_transport_type: 0,
            primary: Path {
                // `cm_format_req`: permissive LIDs when the path is routed (hop limit > 1).
                local_lid: if routed { 0xffff } else { 0 },
                remote_lid: if routed { 0xffff } else { 0 },
                local_gid: me.gid(),
                remote_gid: peer.gid,
                // `cma_get_roce_udp_flow_label` for IPv4: sport * 31 + dport, 20 bits.
                flow_label: (u32::from(src_port) * 31 + u32::from(dest_port)) & 0x000f_ffff,
                packet_rate: 0,
                traffic_class: me.traffic_class,
                hop_limit: me.hop_limit,
                sl: me.sl,
                subnet_local: !routed,
                local_ack_timeout: ack_timeout(me.ack_delay, me.packet_life_time),
            },
            alternate: Path::default(),
            sap_supported: false,
            private_data: PrivateData::new(&pd).unwrap_or_default(),
        };
        let tid = self.form_tid(local_id);
        // `ib_send_cm_req`: 2 x packet lifetime + the remote's response time.
        let timeout_ms =
            2 * convert_to_ms(me.packet_life_time) + convert_to_ms(me.cm_response_timeout);
        let qp_attrs = QpAttributes {
            remote_qpn: 0,
            remote_gid: peer.gid,
            local_gid: me.gid(),
            hop_limit: me.hop_limit,
            traffic_class: me.traffic_class,
            flow_label: req.primary.flow_label,
            sl: me.sl,
            path_mtu: me.path_mtu,
            rq_psn: psn,
            sq_psn: 0,
            max_dest_rd_atomic: 0,
            max_rd_atomic: 0,
            min_rnr_timer: 0,
            timeout: 0,
            retry_count: req.retry_count,
            rnr_retry: 0,
        };
        self.conns[slot] = Some(Conn {
            local_id,
            remote_id: 0,
            state: State::ReqSent,
            peer,
            remote_guid: 0,
            remote_qpn: 0,
            local_qpn: qp.qpn,
            tid,
            timeout_ms,
            max_cm_retries: me.max_cm_retries,
            // `cm_init_av_by_path`: packet lifetime + 1 until the REP's ACK delay refines it.
            av_timeout: me.packet_life_time + 1,
            qp: qp_attrs,
            retx: Some(Retx {
                mad: Message::Req(req).encode(tid),
                stage: Stage::Req,
                timeout_ms,
                retries_left: me.max_cm_retries,
                attempts: 0,
                first_sent: None,
                deadline: None,
            }),
            timewait_until: None,
        });
        Ok(ConnId(local_id))
    }

    /// Accepts a [`ConnectRequest`]: the REP (built as `cma_accept_ib` / `cm_format_rep`
    /// do) goes out at the next [`Cm::poll`] and is retried until the RTU. Returns the QP
    /// attributes to program now (RTR, then RTS), before the peer starts sending.
    pub fn accept(
        &mut self,
        id: ConnId,
        qp: &QpParams,
        private_data: &[u8],
    ) -> Result<QpAttributes, CmError> {
        if private_data.len() > pd_size::REP {
            return Err(CmError::PrivateDataTooLong {
                len: private_data.len(),
                max: pd_size::REP,
            });
        }
        if qp.qpn > QPN_MASK {
            return Err(CmError::BadQpn(qp.qpn));
        }
        let i = self.find_id(id).ok_or(CmError::UnknownConnection(id))?;
        let state = self.slot(i).state;
        if state != State::ReqRcvd {
            return Err(CmError::InvalidState {
                id,
                op: "accept",
                state: state.name(),
            });
        }
        let psn = (self.next_rand() >> 40) as u32 & QPN_MASK;
        let me = self.me;
        let c = self.slot_mut(i);
        let rep = Rep {
            local_comm_id: c.local_id,
            remote_comm_id: c.remote_id,
            local_q_key: 0,
            local_qpn: qp.qpn,
            local_eecn: 0,
            starting_psn: psn,
            responder_resources: qp.responder_resources,
            initiator_depth: qp.initiator_depth,
            target_ack_delay: me.ack_delay,
            failover_accepted: 0,
            flow_control: false,
            rnr_retry_count: qp.rnr_retry_count.min(7),
            srq: qp.srq,
            local_ca_guid: me.node_guid,
            private_data: PrivateData::new(private_data).unwrap_or_default(),
        };
        c.local_qpn = qp.qpn;
        c.qp.rq_psn = psn;
        c.qp.max_dest_rd_atomic = qp.responder_resources;
        c.qp.max_rd_atomic = qp.initiator_depth;
        c.state = State::RepSent;
        c.retx = Some(Retx {
            mad: Message::Rep(rep).encode(c.tid),
            stage: Stage::Rep,
            timeout_ms: c.timeout_ms,
            retries_left: c.max_cm_retries,
            attempts: 0,
            first_sent: None,
            deadline: None,
        });
        Ok(c.qp)
    }

    /// Refuses a [`ConnectRequest`] with REJ CONSUMER_DEFINED (`rdma_reject`), and forgets it.
    pub fn reject(&mut self, id: ConnId, private_data: &[u8]) -> Result<(), CmError> {
        if private_data.len() > pd_size::REJ {
            return Err(CmError::PrivateDataTooLong {
                len: private_data.len(),
                max: pd_size::REJ,
            });
        }
        let i = self.find_id(id).ok_or(CmError::UnknownConnection(id))?;
        let c = *self.slot(i);
        if c.state != State::ReqRcvd {
            return Err(CmError::InvalidState {
                id,
                op: "reject",
                state: c.state.name(),
            });
        }
        // `cm_format_rej` from MRA_REQ_SENT: our local ID, message REJected = REQ.
        let rej = Rej {
            local_comm_id: c.local_id,
            remote_comm_id: c.remote_id,
            message_rejected: msg_response::REQ,
            reason: rej_reason::CONSUMER_DEFINED,
            ari_len: 0,
            ari: [0; 72],
            private_data: PrivateData::new(private_data).unwrap_or_default(),
        };
        self.queue(c.peer, Message::Rej(rej).encode(c.tid));
        // `cm_reset_to_idle`: no timewait for a connection that never was.
        self.conns[i] = None;
        Ok(())
    }

    /// Disconnects an established connection: a DREQ naming the peer's QP, retried until a
    /// DREP (`ib_send_cm_dreq`); [`Event::Disconnected`] follows.
    pub fn disconnect(&mut self, id: ConnId) -> Result<(), CmError> {
        let i = self.find_id(id).ok_or(CmError::UnknownConnection(id))?;
        let c = *self.slot(i);
        if c.state != State::Established {
            return Err(CmError::InvalidState {
                id,
                op: "disconnect",
                state: c.state.name(),
            });
        }
        let dreq = Dreq {
            local_comm_id: c.local_id,
            remote_comm_id: c.remote_id,
            remote_qpn: c.remote_qpn,
            private_data: PrivateData::EMPTY,
        };
        let tid = self.form_tid(c.local_id);
        let c = self.slot_mut(i);
        c.state = State::DreqSent;
        c.retx = Some(Retx {
            mad: Message::Dreq(dreq).encode(tid),
            stage: Stage::Dreq,
            timeout_ms: c.timeout_ms,
            retries_left: c.max_cm_retries,
            attempts: 0,
            first_sent: None,
            deadline: None,
        });
        Ok(())
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
                        let (id, peer) = (ConnId(c.local_id), c.peer);
                        // `cm_process_send_error`: REQ and REP go back to idle (freed),
                        // DREQ to timewait; rdma_cm reports UNREACHABLE or DISCONNECTED.
                        match r.stage {
                            Stage::Req | Stage::Rep => {
                                self.conns[i] = None;
                                out.events.push(Event::TimedOut(TimedOut {
                                    id,
                                    peer,
                                    stage: r.stage,
                                    attempts: r.attempts,
                                    waited_ms: r
                                        .first_sent
                                        .map_or(0, |f| (now - f).as_millis() as u64),
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
        from: MadAddress,
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

mod handlers;
