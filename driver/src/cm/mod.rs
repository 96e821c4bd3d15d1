//! The InfiniBand connection manager, as Linux's ib_cm and rdma_cm put it on the wire over RoCE
//! v2: REQ, REP, RTU, REJ, MRA, DREQ and DREP in 256-byte MADs on QP1, with rdma_cm's service
//! IDs (`RDMA_PS_TCP` port space) and its IPv4 `cma_hdr` in the REQ's private data.
//!
//! This room is pure protocol: it owns no queue pair and touches no device. It consumes received
//! MADs and the time, and produces MADs to send and [`Event`]s for the caller, which carries the
//! MADs over QP1 and moves its RC queue pairs with the [`QpAttributes`] an event or
//! [`Cm::accept`] hands it. Time is a [`Duration`](std::time::Duration) since any fixed epoch
//! the caller chooses.
//!
//! Behaviour follows `drivers/infiniband/core/cm.c` (timers, retries, duplicate and stale
//! handling, which IDs a message is matched by) and `cma.c` (what rdma_cm asks of ib_cm on
//! RoCE); each place says which function it mirrors. Memory is bounded by [`Limits`]: a full
//! connection table refuses new connections, and a full queue of one-shot answers drops them
//! (counted), so a hostile peer cannot make it grow.

mod engine;
pub mod script;
mod timing;
mod wire;

#[cfg(test)]
mod tests;

pub use engine::{Cm, Poll};
pub use timing::{
    ack_timeout, convert_to_ms, CM_RESPONSE_TIMEOUT, IBOE_PACKET_LIFETIME, MAX_CM_RETRIES,
    MRA_SERVICE_TIMEOUT,
};
pub use wire::{
    gid_ipv4, ipv4_gid, parse, pd_size, CmaError, CmaHeader, Dreq, Gid, IdPair, Mad, Message, Mra,
    ParseError, Parsed, Path, PrivateData, Rej, Rep, Req, CMA_HDR_SIZE,
};

use std::net::Ipv4Addr;
use thiserror::Error;

/// Where a MAD comes from or goes to: the peer port's GID and its QP (1 for every CM MAD).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmAddress {
    /// The peer's GID (`::ffff:a.b.c.d` for an IPv4 RoCE v2 port).
    pub gid: Gid,
    /// The peer's QP number: 1 (`remote_cm_qpn = 1`, `cm.c`).
    pub qpn: u32,
}

impl CmAddress {
    /// The CM (QP1) of the RoCE v2 port holding `ip`.
    pub fn ipv4(ip: Ipv4Addr) -> Self {
        Self {
            gid: ipv4_gid(ip),
            qpn: 1,
        }
    }
}

impl core::fmt::Display for CmAddress {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match gid_ipv4(&self.gid) {
            Some(ip) => write!(f, "{ip}"),
            None => write!(f, "{}", std::net::Ipv6Addr::from(self.gid)),
        }
    }
}

/// A connection's handle: its local communication ID, unique among live connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnId(pub u32);

/// How much the CM may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections in any state, timewait included (each costs one table slot).
    pub max_connections: usize,
    /// One-shot answers (RTU, REJ, MRA, DREP) waiting for [`Cm::poll`].
    pub max_pending_sends: usize,
    /// Listening ports.
    pub max_listeners: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 64,
            max_pending_sends: 128,
            max_listeners: 8,
        }
    }
}

/// This port's identity and the path parameters rdma_cm would resolve for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    /// The node GUID (`device->node_guid`); distinct per function.
    pub node_guid: u64,
    /// The port's IPv4 address; its GID is `::ffff:ip`.
    pub ip: Ipv4Addr,
    /// The CA's ACK delay (`local_ca_ack_delay`, 5 bits), the REP's target ACK delay.
    pub ack_delay: u8,
    /// High half of every transaction ID this CM forms (the MAD agent's `hi_tid`).
    pub tid_high: u32,
    /// Seed of the generator of communication IDs and starting PSNs (give it entropy).
    pub seed: u64,
    /// Path MTU (IB enum: 1 = 256 .. 5 = 4096); `iboe_get_mtu(1500)` = 3 (1024).
    pub path_mtu: u8,
    /// Hop limit of the path (64 through an IP route).
    pub hop_limit: u8,
    /// Traffic class (the ToS; 0 by default).
    pub traffic_class: u8,
    /// Service level (`iboe_tos_to_sl`, 0 without priority mapping).
    pub sl: u8,
    /// Packet lifetime of the path (`CMA_IBOE_PACKET_LIFETIME`).
    pub packet_life_time: u8,
    /// CM response timeout put in a REQ, both remote and local (`CMA_CM_RESPONSE_TIMEOUT`).
    pub cm_response_timeout: u8,
    /// Max CM retries put in a REQ (`CMA_MAX_CM_RETRIES`).
    pub max_cm_retries: u8,
    /// Bounds.
    pub limits: Limits,
}

impl Identity {
    /// An identity with rdma_cm's defaults on a 1500-byte RoCE v2 netdev.
    pub fn new(node_guid: u64, ip: Ipv4Addr, seed: u64) -> Self {
        Self {
            node_guid,
            ip,
            ack_delay: 16,
            tid_high: 1,
            seed,
            path_mtu: 3,
            hop_limit: 64,
            traffic_class: 0,
            sl: 0,
            packet_life_time: IBOE_PACKET_LIFETIME,
            cm_response_timeout: CM_RESPONSE_TIMEOUT,
            max_cm_retries: MAX_CM_RETRIES,
            limits: Limits::default(),
        }
    }

    /// The port's GID.
    pub fn gid(&self) -> Gid {
        ipv4_gid(self.ip)
    }
}

/// The local RC queue pair's side of a connection (`struct rdma_conn_param`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpParams {
    /// The QP number (24 bits).
    pub qpn: u32,
    /// RDMA reads/atomics this side serves at once (`responder_resources`).
    pub responder_resources: u8,
    /// RDMA reads/atomics this side issues at once (`initiator_depth`).
    pub initiator_depth: u8,
    /// Transport retries (clamped to 7 as `cma_connect_ib` does).
    pub retry_count: u8,
    /// RNR retries (clamped to 7; 7 = infinite).
    pub rnr_retry_count: u8,
    /// The QP takes receives from an SRQ.
    pub srq: bool,
}

impl QpParams {
    /// rping's and krping's parameters: one read each way, 7 retries, 7 RNR retries.
    pub fn rping(qpn: u32) -> Self {
        Self {
            qpn,
            responder_resources: 1,
            initiator_depth: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            srq: false,
        }
    }
}

/// What the caller programs into its RC QP: INIT->RTR (`remote_qpn`, path, `rq_psn`,
/// `path_mtu`, `max_dest_rd_atomic`, `min_rnr_timer`) and RTR->RTS (`sq_psn`, `timeout`,
/// `retry_count`, `rnr_retry`, `max_rd_atomic`), as `ib_cm_init_qp_attr` hands them to rdma_cm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpAttributes {
    /// The peer's QP number.
    pub remote_qpn: u32,
    /// The peer's GID (destination of the address vector).
    pub remote_gid: Gid,
    /// This port's GID (source).
    pub local_gid: Gid,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Service level.
    pub sl: u8,
    /// Path MTU (IB enum 1..=5).
    pub path_mtu: u8,
    /// First PSN expected from the peer (the Starting PSN this side sent).
    pub rq_psn: u32,
    /// First PSN to send (the Starting PSN the peer sent).
    pub sq_psn: u32,
    /// RTR `max_dest_rd_atomic` (this side's responder resources).
    pub max_dest_rd_atomic: u8,
    /// RTS `max_rd_atomic` (this side's initiator depth).
    pub max_rd_atomic: u8,
    /// RTR `min_rnr_timer` (0, as `cm_init_qp_rtr_attr` sets it).
    pub min_rnr_timer: u8,
    /// RTS local ACK timeout (4.096 us x 2^n).
    pub timeout: u8,
    /// RTS retry count.
    pub retry_count: u8,
    /// RTS RNR retry.
    pub rnr_retry: u8,
}

/// A REQ that reached a listener, for the caller to [`Cm::accept`] or [`Cm::reject`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectRequest {
    /// The new connection.
    pub id: ConnId,
    /// The listening port it reached.
    pub port: u16,
    /// Where it came from.
    pub from: CmAddress,
    /// rdma_cm's header: the peer's IP and port, and the address it asked for.
    pub cma: CmaHeader,
    /// The peer's node GUID.
    pub remote_ca_guid: u64,
    /// The peer's QP number.
    pub remote_qpn: u32,
    /// The PSN the peer expects first (this side's `sq_psn`).
    pub starting_psn: u32,
    /// Responder resources the peer wants here: the REQ's initiator depth
    /// (`cm_format_req_event` swaps them).
    pub responder_resources: u8,
    /// Initiator depth the peer allows here: the REQ's responder resources.
    pub initiator_depth: u8,
    /// Path MTU.
    pub path_mtu: u8,
    /// Retry count.
    pub retry_count: u8,
    /// RNR retry count.
    pub rnr_retry_count: u8,
    /// The peer's QP uses an SRQ.
    pub srq: bool,
    /// The consumer's private data: the REQ's private data after `cma_hdr` (56 bytes).
    pub private_data: PrivateData,
}

impl ConnectRequest {
    /// `local` with responder resources and initiator depth limited to what the peer asked
    /// for, as librdmacm's `rdma_accept` does with the device maxima it is given.
    pub fn negotiate(&self, local: QpParams) -> QpParams {
        QpParams {
            responder_resources: local.responder_resources.min(self.responder_resources),
            initiator_depth: local.initiator_depth.min(self.initiator_depth),
            ..local
        }
    }
}

/// The message a timer waited an answer to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// A REQ (no REP, REJ or MRA came).
    Req,
    /// A REP (no RTU came).
    Rep,
    /// A DREQ (no DREP came).
    Dreq,
}

impl core::fmt::Display for Stage {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Stage::Req => "REQ",
            Stage::Rep => "REP",
            Stage::Dreq => "DREQ",
        })
    }
}

/// A connection gave up after its last retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("no answer from {peer} port {port} to the {stage} of connection {id:?} after {attempts} attempts over {waited_ms} ms")]
pub struct TimedOut {
    /// The connection (freed).
    pub id: ConnId,
    /// The destination that did not answer.
    pub peer: CmAddress,
    /// The connection's port in rdma_cm's TCP port space: the port connected to (this side
    /// sent the REQ) or the port listened on (this side sent the REP).
    pub port: u16,
    /// What went unanswered.
    pub stage: Stage,
    /// How many times it was sent.
    pub attempts: u32,
    /// Milliseconds from the first send to giving up.
    pub waited_ms: u64,
}

/// What the CM tells its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A REQ reached a listener: accept or reject it.
    ConnectRequest(ConnectRequest),
    /// The connection is up. Active side: on the REP; program the QP before the next
    /// [`Cm::poll`], which sends the RTU. Passive side: on the RTU (the QP was programmed at
    /// [`Cm::accept`]).
    Established {
        /// The connection.
        id: ConnId,
        /// The QP attributes.
        qp: QpAttributes,
        /// The REP's (active) or RTU's (passive) private data.
        private_data: PrivateData,
    },
    /// The peer rejected (or the connection was refused as stale).
    Rejected {
        /// The connection (freed or in timewait).
        id: ConnId,
        /// `hw::cm::rej_reason`.
        reason: u16,
        /// The REJ's private data.
        private_data: PrivateData,
    },
    /// The connection is down: a DREQ came (a DREP was sent), a DREP answered ours, or our
    /// DREQ went unanswered (`timed_out`).
    Disconnected {
        /// The connection (now in timewait).
        id: ConnId,
        /// The DREQ went unanswered.
        timed_out: bool,
    },
    /// A REQ or REP went unanswered after every retry.
    TimedOut(TimedOut),
}

/// A refused call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum CmError {
    /// Every connection slot is taken.
    #[error("connection table full ({max} connections)")]
    TableFull {
        /// The limit.
        max: usize,
    },
    /// Every listener slot is taken.
    #[error("listener table full ({max} ports)")]
    ListenersFull {
        /// The limit.
        max: usize,
    },
    /// The port is already listened on.
    #[error("port {0} is already listened on")]
    AlreadyListening(u16),
    /// No such live connection.
    #[error("no connection {0:?}")]
    UnknownConnection(ConnId),
    /// The connection is not in a state that allows the call.
    #[error("connection {id:?} cannot {op} in state {state}")]
    InvalidState {
        /// The connection.
        id: ConnId,
        /// What was asked.
        op: &'static str,
        /// The state it is in.
        state: &'static str,
    },
    /// Private data longer than the message carries.
    #[error("private data of {len} bytes, the message carries {max}")]
    PrivateDataTooLong {
        /// Bytes given.
        len: usize,
        /// Room.
        max: usize,
    },
    /// A QP number wider than 24 bits.
    #[error("QP number {0:#x} is wider than 24 bits")]
    BadQpn(u32),
}

/// Why a received MAD changed no connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum ReceiveError {
    /// Not a CM message this CM takes.
    #[error("malformed CM MAD: {0}")]
    Malformed(#[from] ParseError),
    /// No connection has these communication IDs (a DREQ is answered with a DREP anyway).
    #[error("no connection for attribute {attr:#06x} local {local:#x} remote {remote:#x}")]
    UnknownConnection {
        /// Attribute ID.
        attr: u16,
        /// The message's local communication ID (the sender's).
        local: u32,
        /// The message's remote communication ID (ours, if it were one).
        remote: u32,
    },
    /// The connection is in a state where the message means nothing (a late duplicate).
    #[error("{attr:#06x} for connection {id:?} in state {state} ignored")]
    Unexpected {
        /// The connection.
        id: ConnId,
        /// Attribute ID.
        attr: u16,
        /// Its state.
        state: &'static str,
    },
    /// A duplicate, answered as Linux answers it (MRA, RTU, DREP) or dropped.
    #[error("duplicate {attr:#06x} for connection {id:?}")]
    Duplicate {
        /// The connection.
        id: ConnId,
        /// Attribute ID.
        attr: u16,
    },
    /// A DREQ naming another QP than the connection's (`cm_dreq_handler` ignores it).
    #[error("DREQ for QPN {got:#x}, connection {id:?} has {expected:#x}")]
    QpnMismatch {
        /// The connection.
        id: ConnId,
        /// The DREQ's remote QPN.
        got: u32,
        /// The connection's local QPN.
        expected: u32,
    },
    /// A REQ refused with a REJ of this reason (`hw::cm::rej_reason`).
    #[error("REQ refused with REJ reason {0}")]
    Refused(u16),
    /// No room for a new connection: dropped without a REJ so the peer's retry may succeed
    /// (`cm_destroy_id` does not reject on -ENOMEM).
    #[error("connection table full: REQ dropped")]
    TableFull,
}

/// Counters of what the CM saw and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CmStats {
    /// MADs given to [`Cm::receive`].
    pub received: u64,
    /// MADs refused as malformed.
    pub malformed: u64,
    /// MADs matching no connection.
    pub unknown: u64,
    /// Duplicates and late messages.
    pub duplicates: u64,
    /// MADs handed out by [`Cm::poll`].
    pub sent: u64,
    /// Of those, retransmissions.
    pub retransmits: u64,
    /// One-shot answers dropped because the send queue was full.
    pub send_queue_full: u64,
}
