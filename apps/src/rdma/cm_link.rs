//! Connecting one RC queue pair through the connection manager, as rdma_cm applications
//! (rping, krping) do: the function's QP1 carries the CM MADs, [`cxdirect::cm::Cm`] speaks the
//! protocol, and the queue pair is programmed from what the handshake negotiated.
//!
//! The server listens on a port of the RDMA connection manager's TCP port space and accepts the
//! first REQ; the client sends a REQ to the server's IP address and port. Both offer rping's
//! parameters ([`QpParams::rping`]: one RDMA READ each way, 7 retries, 7 RNR retries). Either
//! side ends with a DREQ answered by a DREP.
//!
//! RoCE frames need the peer's MAC address and QP1's completions do not carry it: it is either
//! given, or resolved by ARP from the peer's IP address through the function's
//! [`PortAddress`] (the client before its REQ, the server before its REP; a Linux client
//! ARPs for the server before its REQ, which teaches the server its MAC already).

use super::port_address::PortAddress;
use cxdirect::cm::{
    gid_ipv4, Cm, CmAddress, ConnId, ConnectRequest, Event, Gid, Identity, QpAttributes, QpParams,
};
use cxdirect::rdma::{
    ConnectParams, Endpoint, GsiQueuePair, MadAddress, MadTransport, PathMtu, ProtectionDomain,
    RcQueuePair, Roce,
};
use cxdirect::{Backend, Device};
use std::fmt;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

/// The port rping listens on and connects to by default (`DEFAULT_PORT` in librdmacm's
/// `examples/rping.c`).
pub const RPING_PORT: u16 = 7174;

/// Receive and send slots of the function's QP1.
const GSI_DEPTH: u32 = 64;

/// Lowest and one past the highest source port a client takes (the IANA dynamic range rdma_cm
/// binds an unbound ID into, `cma_alloc_any_port`).
const EPHEMERAL_PORTS: (u16, u16) = (49152, 65535);

/// RNR NAK timer the queue pair is programmed with: the CM hands 0 (`cm_init_qp_rtr_attr`),
/// and rdma_cm keeps what the consumer set; 12 (0.64 ms) is the value the verbs programs use.
const MIN_RNR_TIMER: u8 = 12;

/// Where the handshake stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// The server waits for a REQ.
    Listening,
    /// The peer's MAC address is being resolved by ARP: the client's REQ, or the server's
    /// accept of a REQ, waits for it.
    Resolving,
    /// A REQ was sent (client) or accepted (server); the queue pair is programmed once the REP
    /// arrives (client) or was at the accept (server).
    Connecting,
    /// The connection is established (REP taken by the client, RTU by the server).
    Up,
    /// A DREQ was sent and no DREP has come yet.
    Disconnecting,
    /// Disconnected: a DREP answered our DREQ, or the peer's DREQ was answered.
    Down,
}

/// Which side of a [`CmLink`] this is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Server { port: u16 },
    Client { peer: Ipv4Addr, port: u16 },
}

/// What waits for the peer's MAC address.
#[derive(Clone, Debug)]
enum Waiting {
    /// The client's REQ for QP `qpn`, from source port `src_port`.
    Connect { qpn: u32, src_port: u16 },
    /// The server's accept of this REQ.
    Accept(Box<ConnectRequest>),
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Side::Server { port } => write!(f, "listening on port {port}"),
            Side::Client { peer, port } => write!(f, "connecting to {peer} port {port}"),
        }
    }
}

/// One side's connection manager: the function's QP1, the CM speaking over it, and the one
/// connection it makes or accepts for an RC queue pair.
pub struct CmLink<B: Backend> {
    gsi: GsiQueuePair<B>,
    cm: Cm,
    ip: Ipv4Addr,
    /// The MAC address the peer was given by (every MAD and the queue pair use it).
    given_mac: Option<[u8; 6]>,
    /// The connected peer's GID and MAC, once known.
    peer: Option<(Gid, [u8; 6])>,
    /// What waits for the peer's MAC address, while [`Phase::Resolving`].
    waiting: Option<Waiting>,
    side: Side,
    id: Option<ConnId>,
    phase: Phase,
    epoch: Instant,
    /// The QP programmed (the client's on its REP, the server's at its accept).
    programmed: bool,
    /// The queue pair receives from a shared receive queue (the REQ and REP say so).
    srq: bool,
}

/// A node GUID from the port's MAC, as an EUI-64 (what mlx5 devices report as their GUID).
fn guid_of(mac: [u8; 6]) -> u64 {
    let eui = [
        mac[0] ^ 2,
        mac[1],
        mac[2],
        0xff,
        0xfe,
        mac[3],
        mac[4],
        mac[5],
    ];
    u64::from_be_bytes(eui)
}

/// Entropy for the communication IDs and starting PSNs: the clock, the process and the port.
fn seed(mac: [u8; 6], ip: Ipv4Addr) -> u64 {
    let clock = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut s = clock ^ u64::from(std::process::id()).rotate_left(32);
    s ^= guid_of(mac).rotate_left(17) ^ u64::from(u32::from(ip));
    // splitmix64's finaliser, so that close seeds give unrelated values.
    s = (s ^ (s >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    s = (s ^ (s >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    s ^ (s >> 31)
}

impl<B: Backend> CmLink<B> {
    fn open(
        dev: &mut Device<B>,
        pd: &ProtectionDomain,
        roce: &Roce,
        ip: Ipv4Addr,
        peer_mac: Option<[u8; 6]>,
        side: Side,
        srq: bool,
    ) -> Result<Self, String> {
        let gsi = GsiQueuePair::create(dev, pd, roce, GSI_DEPTH)
            .map_err(|e| format!("{ip}: the general services queue pair (QP1): {e}"))?;
        let cm = Cm::new(Identity::new(guid_of(roce.mac()), ip, seed(roce.mac(), ip)));
        Ok(Self {
            gsi,
            cm,
            ip,
            given_mac: peer_mac,
            peer: None,
            waiting: None,
            side,
            id: None,
            phase: Phase::Listening,
            epoch: Instant::now(),
            programmed: false,
            srq,
        })
    }

    /// The server's side: QP1 on the function whose RoCE address is `ip`, listening on CM port
    /// `port` for a client at `peer_mac` (resolved by ARP when `None`), for a queue pair that
    /// receives from a shared receive queue when `srq`.
    pub fn listen(
        dev: &mut Device<B>,
        pd: &ProtectionDomain,
        roce: &Roce,
        ip: Ipv4Addr,
        port: u16,
        peer_mac: Option<[u8; 6]>,
        srq: bool,
    ) -> Result<Self, String> {
        let mut link = Self::open(dev, pd, roce, ip, peer_mac, Side::Server { port }, srq)?;
        if let Err(e) = link.cm.listen(port) {
            let _ = link.gsi.destroy(dev);
            return Err(format!("{ip}: listening on port {port}: {e}"));
        }
        Ok(link)
    }

    /// The client's side: QP1 on the function whose RoCE address is `ip`, and a REQ for `qp`
    /// (with rping's parameters) to `peer` port `port` at `peer_mac`, sent at the first
    /// [`CmLink::progress`] (after the peer's MAC is resolved by ARP when `peer_mac` is
    /// `None`); `srq` as for [`CmLink::listen`].
    #[allow(clippy::too_many_arguments)]
    pub fn connect(
        dev: &mut Device<B>,
        pd: &ProtectionDomain,
        roce: &Roce,
        ip: Ipv4Addr,
        peer: Ipv4Addr,
        port: u16,
        peer_mac: Option<[u8; 6]>,
        qp: &RcQueuePair<B>,
        srq: bool,
    ) -> Result<Self, String> {
        let side = Side::Client { peer, port };
        let mut link = Self::open(dev, pd, roce, ip, peer_mac, side, srq)?;
        let (low, high) = EPHEMERAL_PORTS;
        let src_port = low + (seed(roce.mac(), ip) % u64::from(high - low)) as u16;
        link.waiting = Some(Waiting::Connect {
            qpn: qp.qpn(),
            src_port,
        });
        link.phase = Phase::Resolving;
        if let Some(mac) = peer_mac {
            if let Err(e) = link.send_req(mac) {
                let _ = link.gsi.destroy(dev);
                return Err(e);
            }
        }
        Ok(link)
    }

    /// The client's REQ, once the server's MAC address is `mac`.
    fn send_req(&mut self, mac: [u8; 6]) -> Result<(), String> {
        let (Some(Waiting::Connect { qpn, src_port }), Side::Client { peer, port }) =
            (&self.waiting, self.side)
        else {
            return Ok(());
        };
        let id = self
            .cm
            .connect(peer, port, *src_port, &self.qp_params(*qpn), b"")
            .map_err(|e| self.fail(e))?;
        self.peer = Some((CmAddress::ipv4(peer).gid, mac));
        self.waiting = None;
        self.id = Some(id);
        self.phase = Phase::Connecting;
        Ok(())
    }

    /// The MAC address MADs and RoCE frames to `gid` go to: the given one, the connected
    /// peer's, or what ARP knows (`None` while it resolves).
    fn mac_for(
        &self,
        address: &mut Option<&mut PortAddress<B>>,
        gid: &Gid,
        now: Instant,
    ) -> Result<Option<[u8; 6]>, String> {
        if let Some(mac) = self.given_mac {
            return Ok(Some(mac));
        }
        if let Some((peer, mac)) = self.peer {
            if peer == *gid {
                return Ok(Some(mac));
            }
        }
        let Some(ip) = gid_ipv4(gid) else {
            return Err(self.fail(format_args!(
                "{} is not an IPv4 address: ARP cannot resolve it",
                std::net::Ipv6Addr::from(*gid)
            )));
        };
        match address {
            Some(address) => address.mac_of(ip, now),
            None => Err(self.fail(format_args!(
                "{ip}'s MAC address: give it, or serve this function's address so ARP resolves it"
            ))),
        }
    }

    /// rping's parameters for QP `qpn` ([`QpParams::rping`]), with the SRQ flag.
    fn qp_params(&self, qpn: u32) -> QpParams {
        QpParams {
            srq: self.srq,
            ..QpParams::rping(qpn)
        }
    }

    /// Where the handshake stands.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// The connection manager's counters and QP1's, for a report line.
    pub fn describe(&self) -> String {
        let cm = self.cm.stats();
        let gsi = self.gsi.stats();
        format!(
            "cm: {} mads_sent={} mads_received={} retransmits={} qp1_dropped={}",
            self.ip, cm.sent, cm.received, cm.retransmits, gsi.dropped
        )
    }

    fn fail(&self, what: impl fmt::Display) -> String {
        format!("{} {}: {what}", self.ip, self.side)
    }

    /// One turn: the MADs QP1 received go to the CM and its events are acted on (a REQ
    /// accepted and `qp` programmed, a REP's attributes programmed into `qp`), then the CM's
    /// sends (the RTU among them) go out on QP1. Returns the phase after it.
    ///
    /// # Errors
    ///
    /// A rejection, a handshake that went unanswered after the CM's retries (naming the peer),
    /// a REQ from a second client while the first is served is refused and is no error; QP1
    /// or the queue pair failing.
    pub fn progress(
        &mut self,
        dev: &mut Device<B>,
        mut address: Option<&mut PortAddress<B>>,
        qp: &mut RcQueuePair<B>,
    ) -> Result<Phase, String> {
        let instant = Instant::now();
        if let Some(address) = address.as_deref_mut() {
            address.turn(instant)?;
        }
        self.resolve_waiting(dev, &mut address, qp, instant)?;
        let now = self.epoch.elapsed();
        let mut got = Vec::new();
        self.gsi
            .poll_mads(&mut |from, mad| got.push((from.gid, from.qpn, *mad)))
            .map_err(|e| self.fail(format_args!("QP1: {e}")))?;
        for (gid, qpn, mad) in got {
            let from = CmAddress { gid, qpn };
            // A MAD that changes nothing (duplicate, stale, malformed) is counted by the CM.
            if let Ok(Some(event)) = self.cm.receive(now, from, &mad) {
                self.on_event(dev, qp, event)?;
            }
        }
        let poll = self.cm.poll(now);
        for (to, mad) in poll.sends {
            // A MAD to a peer whose MAC is not known yet (a REJ to a second client) is
            // dropped: its sender retries.
            let Some(mac) = self.mac_for(&mut address, &to.gid, instant)? else {
                continue;
            };
            let destination = MadAddress::gsi(mac, to.gid);
            self.gsi
                .send_mad(&destination, &mad)
                .map_err(|e| self.fail(format_args!("sending a CM MAD to {to}: {e}")))?;
        }
        for event in poll.events {
            self.on_event(dev, qp, event)?;
        }
        self.resolve_waiting(dev, &mut address, qp, instant)?;
        Ok(self.phase)
    }

    /// Sends the client's REQ or the server's accept when the peer's MAC address became known.
    fn resolve_waiting(
        &mut self,
        dev: &mut Device<B>,
        address: &mut Option<&mut PortAddress<B>>,
        qp: &mut RcQueuePair<B>,
        now: Instant,
    ) -> Result<(), String> {
        let gid = match &self.waiting {
            None => return Ok(()),
            Some(Waiting::Connect { .. }) => match self.side {
                Side::Client { peer, .. } => CmAddress::ipv4(peer).gid,
                Side::Server { .. } => return Ok(()),
            },
            Some(Waiting::Accept(req)) => req.from.gid,
        };
        let Some(mac) = self.mac_for(address, &gid, now)? else {
            return Ok(());
        };
        match self.waiting.take() {
            Some(Waiting::Accept(req)) => self.accept(dev, qp, *req, mac),
            waiting => {
                self.waiting = waiting;
                self.send_req(mac)
            }
        }
    }

    /// Accepts `req` from the peer at `mac`, and programs `qp` for it.
    fn accept(
        &mut self,
        dev: &mut Device<B>,
        qp: &mut RcQueuePair<B>,
        req: ConnectRequest,
        mac: [u8; 6],
    ) -> Result<(), String> {
        let params = req.negotiate(self.qp_params(qp.qpn()));
        let attrs = self
            .cm
            .accept(req.id, &params, b"")
            .map_err(|e| self.fail(format_args!("accepting {}: {e}", req.from)))?;
        self.peer = Some((req.from.gid, mac));
        self.phase = Phase::Connecting;
        self.program(dev, qp, &attrs)
    }

    fn on_event(
        &mut self,
        dev: &mut Device<B>,
        qp: &mut RcQueuePair<B>,
        event: Event,
    ) -> Result<(), String> {
        match event {
            Event::ConnectRequest(req) => {
                if self.id.is_some() {
                    // One connection per run, as rping serves one client at a time.
                    let _ = self.cm.reject(req.id, b"");
                    return Ok(());
                }
                self.id = Some(req.id);
                // Accepted once the client's MAC address is known (at once when given).
                self.waiting = Some(Waiting::Accept(Box::new(req)));
                self.phase = Phase::Resolving;
                Ok(())
            }
            Event::Established { id, qp: attrs, .. } if Some(id) == self.id => {
                if !self.programmed {
                    self.program(dev, qp, &attrs)?;
                }
                self.phase = Phase::Up;
                Ok(())
            }
            Event::Rejected { id, reason, .. } if Some(id) == self.id => Err(self.fail(
                format_args!("the peer rejected the connection (reason {reason})"),
            )),
            Event::TimedOut(t) if Some(t.id) == self.id => Err(self.fail(t)),
            Event::Disconnected { id, timed_out } if Some(id) == self.id => {
                self.phase = Phase::Down;
                if timed_out {
                    return Err(self.fail("the peer did not answer the DREQ"));
                }
                Ok(())
            }
            // Events of a connection this link refused.
            _ => Ok(()),
        }
    }

    /// Programs `qp` from what the CM negotiated: its own first PSN, then RTR and RTS with
    /// the peer's QPN, PSN and GID and the REQ's path and retry attributes.
    fn program(
        &mut self,
        dev: &mut Device<B>,
        qp: &mut RcQueuePair<B>,
        attrs: &QpAttributes,
    ) -> Result<(), String> {
        qp.set_send_psn(attrs.sq_psn)
            .map_err(|e| self.fail(format_args!("the queue pair's first PSN: {e}")))?;
        let Some((_, mac)) = self.peer else {
            return Err(self.fail("programming the queue pair before the peer's MAC is known"));
        };
        let remote = Endpoint {
            qpn: attrs.remote_qpn,
            psn: attrs.rq_psn,
            gid: attrs.remote_gid,
            mac,
        };
        // The IB enum: 1 = 256 bytes .. 5 = 4096.
        let bytes = 128u32 << attrs.path_mtu.clamp(1, 5);
        let mtu = PathMtu::largest_for(bytes)
            .ok_or_else(|| self.fail(format_args!("path MTU {}", attrs.path_mtu)))?;
        let params = ConnectParams {
            mtu,
            ack_timeout: attrs.timeout,
            retry_count: attrs.retry_count,
            rnr_timer: attrs.min_rnr_timer.max(MIN_RNR_TIMER),
            rnr_retry: attrs.rnr_retry,
            max_rd_atomic: attrs.max_rd_atomic,
            max_dest_rd_atomic: attrs.max_dest_rd_atomic,
            hop_limit: attrs.hop_limit,
            traffic_class: attrs.traffic_class,
            // An Ethernet priority is 3 bits; mlx5_ib's `mlx5_set_path` keeps `sl & 0x7`.
            sl: attrs.sl & 0x7,
        };
        qp.connect(dev, &remote, params).map_err(|e| {
            self.fail(format_args!(
                "programming QPN {:#x} for the peer's QPN {:#x}: {e}",
                qp.qpn(),
                attrs.remote_qpn
            ))
        })?;
        self.programmed = true;
        Ok(())
    }

    /// Starts the disconnect: a DREQ, retried until the peer's DREP. Nothing to do once the
    /// link is down (the peer's DREQ came first) or was never up.
    pub fn disconnect(&mut self) -> Result<(), String> {
        let (Some(id), Phase::Up) = (self.id, self.phase) else {
            return Ok(());
        };
        self.cm
            .disconnect(id)
            .map_err(|e| self.fail(format_args!("disconnecting: {e}")))?;
        self.phase = Phase::Disconnecting;
        Ok(())
    }

    /// The error for a link that did not reach the phase it was waited for within
    /// `patience`: it names the peer (or the port listened on) and where the handshake stood.
    pub fn stalled(&self, patience: Duration) -> String {
        self.fail(format_args!(
            "nothing answered within {} ms ({:?})",
            patience.as_millis(),
            self.phase
        ))
    }

    /// Destroys QP1 (its MADs in flight flushed).
    pub fn close(self, dev: &mut Device<B>) -> Result<(), String> {
        let ip = self.ip;
        self.gsi
            .destroy(dev)
            .map_err(|e| format!("{ip}: closing QP1: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_guid_is_the_macs_eui64() {
        assert_eq!(
            guid_of([0x02, 0x11, 0x22, 0x33, 0x44, 0x55]),
            0x0011_22ff_fe33_4455
        );
    }

    #[test]
    fn seeds_of_two_ports_differ() {
        let ip = Ipv4Addr::new(10, 0, 0, 1);
        assert_ne!(seed([2, 0, 0, 0, 0, 1], ip), seed([2, 0, 0, 0, 0, 2], ip));
    }
}
