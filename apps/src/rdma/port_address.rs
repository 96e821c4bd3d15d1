//! The RDMA function's IPv4 address on its Ethernet side, as a Linux host meets it: ARP
//! requests for the address answered, ICMP echo answered, and the MACs of peers (which RoCE
//! frames and QP1's MADs need, and which a completion does not carry) resolved by ARP.
//!
//! One receive and one send queue of a small Ethernet port started on the function serve it;
//! the port's flow rules bring them every ARP frame and ICMP to the address (RoCE frames go
//! to the queue pairs, as on a ConnectX). Frames that are neither are dropped.

use cxdirect::net::{NeighbourConfig, Resolution, Responder, ResponderStats};
use cxdirect::{Backend, Mbuf, Mempool, Port, PortConfig, Queues, RxQueue, TxQueue};
use std::net::Ipv4Addr;
use std::time::Instant;

/// Frames taken from the receive queue per turn.
const BURST: usize = 32;

/// Receive and send slots of the address's queues: ARP and ICMP are a trickle.
const RING_SIZE: u32 = 64;

/// Buffers of the address's pool: both rings full, and room for replies in flight.
const POOL_BUFFERS: u32 = 256;

/// The Ethernet port's configuration for an address: one queue each way, small rings.
pub fn port_config() -> PortConfig {
    PortConfig {
        rx_queues: 1,
        tx_queues: 1,
        ring_size: RING_SIZE,
        pool_buffers: POOL_BUFFERS,
        ..PortConfig::default()
    }
}

/// The function's IPv4 address (see the module's documentation).
pub struct PortAddress<B: Backend> {
    responder: Responder,
    rx: RxQueue<B>,
    tx: TxQueue<B>,
    pool: Mempool,
    received: Vec<Mbuf>,
    replies: Vec<Mbuf>,
}

impl<B: Backend> PortAddress<B> {
    /// Serves `ip` on `port` through `queues` (the port's first receive and send queues; the
    /// rest are dropped): the responder's flow rules are installed on the receive queue.
    ///
    /// # Errors
    ///
    /// The port has no receive or send queue, or its flow rules could not be installed.
    pub fn serve(port: &mut Port<B>, queues: Queues<B>, ip: Ipv4Addr) -> Result<Self, String> {
        let fail = |e: &dyn std::fmt::Display| format!("{ip}: serving the address: {e}");
        let rx = queues.rx.into_iter().next().ok_or("no receive queue")?;
        let tx = queues.tx.into_iter().next().ok_or("no send queue")?;
        let responder =
            Responder::for_port(port, ip, NeighbourConfig::default()).map_err(|e| fail(&e))?;
        responder.steer(port, rx.rqn()).map_err(|e| fail(&e))?;
        Ok(Self {
            responder,
            rx,
            tx,
            pool: port.pool().clone(),
            received: Vec::with_capacity(BURST),
            replies: Vec::with_capacity(BURST),
        })
    }

    /// One turn at `now`: received ARP and echo requests answered, the neighbour table fed,
    /// due ARP requests sent. Frames that are neither ARP nor ICMP to the address are dropped.
    ///
    /// # Errors
    ///
    /// The receive queue failed.
    pub fn turn(&mut self, now: Instant) -> Result<(), String> {
        let ip = self.responder.ip();
        while self
            .rx
            .rx_burst(&mut self.received, BURST)
            .map_err(|e| format!("{ip}: receiving ARP and ICMP: {e}"))?
            > 0
        {
            self.responder
                .handle(&mut self.received, &mut self.replies, now);
            self.received.clear();
            self.send();
        }
        self.responder.poll(&self.pool, &mut self.replies, now);
        self.send();
        Ok(())
    }

    /// Sends what is queued; what the ring cannot take now stays for the next turn, except
    /// that a full ring does not hold back more than a burst (the oldest are dropped: ARP and
    /// echo are retried by their senders).
    fn send(&mut self) {
        if !self.replies.is_empty() {
            self.tx.tx_burst(&mut self.replies);
        }
        if self.replies.len() > BURST {
            let extra = self.replies.len() - BURST;
            self.replies.drain(..extra);
        }
    }

    /// The MAC of `peer` when it is known at `now`; `None` while it is being resolved (the
    /// requests leave with the next [`PortAddress::turn`]).
    ///
    /// # Errors
    ///
    /// The address is not one ARP resolves, or went unanswered after the table's requests.
    pub fn mac_of(&mut self, peer: Ipv4Addr, now: Instant) -> Result<Option<[u8; 6]>, String> {
        match self.responder.resolve(peer, now) {
            Ok(Resolution::Known(mac)) => Ok(Some(mac)),
            Ok(Resolution::Pending) => Ok(None),
            Err(e) => Err(format!(
                "{}: resolving {peer}'s MAC address by ARP: {e}",
                self.responder.ip()
            )),
        }
    }

    /// What the responder counted.
    pub fn stats(&self) -> ResponderStats {
        self.responder.stats()
    }

    /// A report line: ARP and ICMP answered, requests sent, neighbours held.
    pub fn describe(&self) -> String {
        let s = self.responder.stats();
        format!(
            "address: {} arp_replies={} arp_requests={} echo_replies={} neighbours={} arp_ignored={}",
            self.responder.ip(),
            s.arp_replies,
            s.arp_requests,
            s.echo_replies,
            self.responder.neighbours().len(),
            s.arp_ignored
        )
    }
}
