//! The handshake on a plain receive queue ([`Handshake::Plain`]): TCP to the listening port is
//! first steered to a plain queue, where each frame lands whole in host memory, so the SYN's
//! options are all read whatever the split point; once the SYN was taken, before the SYN-ACK
//! leaves, the peer's flow (its address and port) is steered to the split queue and the first
//! rule removed. Frames that reached the plain queue before the move are whole segments in host
//! memory: linear bytes when the receiver takes them (up to `MAX_LINEAR`), else their payload
//! is dropped and counted (their headers still count: the ACK that ends the handshake may ride
//! on a data segment), and the peer sends it again onto the split queue.

use super::{Server, BURST};
use cxdirect::devmem_tcp::{parse_split, Payload, TcpFlags, TcpState, MAX_LINEAR};
use cxdirect::{Backend, FlowMatch, FlowProtocol, FlowRule, IpVersion, Mbuf, RxQueue};
use std::net::IpAddr;

/// Where the handshake is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Handshake {
    /// On the split queue: the split point must hold the SYN's headers (74 bytes for Linux)
    /// for its options to be read.
    Split,
    /// On a plain queue, the flow moved to the split queue once established.
    #[default]
    Plain,
}

/// The plain queue of [`Handshake::Plain`] and the rule that steers the port's TCP to it.
pub(super) struct PlainQueue<B: Backend> {
    pub(super) rx: RxQueue<B>,
    /// Removed once the flow moved to the split queue.
    pub(super) rule: Option<FlowRule>,
    got: Vec<Mbuf>,
    frame: Vec<u8>,
}

impl<B: Backend> PlainQueue<B> {
    pub(super) fn new(rx: RxQueue<B>, rule: FlowRule) -> Self {
        Self {
            rx,
            rule: Some(rule),
            got: Vec::with_capacity(BURST),
            frame: vec![0; 2048],
        }
    }
}

/// TCP over IPv4 to `ip:port`, from `peer` when given.
pub(super) fn flow(ip: IpAddr, port: u16, peer: Option<(IpAddr, u16)>) -> FlowMatch {
    FlowMatch {
        ip: IpVersion::V4,
        protocol: FlowProtocol::Tcp,
        dst_addr: Some(ip),
        src_addr: peer.map(|p| p.0),
        dst_port: Some(port),
        src_port: peer.map(|p| p.1),
    }
}

impl<B: Backend> Server<B> {
    /// Takes what reached the plain queue through the receiver; moves the flow to the split
    /// queue once the connection is established. Returns the frames taken.
    pub(super) fn plain_turn(&mut self) -> Result<usize, String> {
        let Some(mut plain) = self.plain.take() else {
            return Ok(0);
        };
        let taken = self.plain_frames(&mut plain);
        let moved = match (&plain.rule, &self.ends, self.rx.state()) {
            // As soon as the SYN was taken, before the SYN-ACK leaves: nothing the peer sends
            // after it reaches the plain queue. The ACK that ends the handshake (and a
            // repeated SYN, answered from what the first one agreed) parse on the split queue.
            (
                Some(_),
                Some(ends),
                TcpState::SynReceived | TcpState::Established | TcpState::CloseWait,
            ) => Some((ends.peer_ip, ends.peer_port)),
            _ => None,
        };
        let outcome = match (moved, self.port.as_mut()) {
            (Some(peer), Some(port)) => {
                let ip = IpAddr::V4(self.cfg.ip);
                let to_split = port
                    .steer(flow(ip, self.cfg.port, Some(peer)), self.split.rqn())
                    .map_err(|e| format!("steering the connection to the split queue: {e}"));
                let removed = to_split.and_then(|_| match plain.rule.take() {
                    Some(rule) => port
                        .remove_flow(rule)
                        .map_err(|e| format!("removing the handshake's rule: {e}")),
                    None => Ok(()),
                });
                if removed.is_ok() {
                    println!(
                        "handshake: SYN taken on the plain queue; {}:{} now steered to the split queue",
                        peer.0, peer.1
                    );
                }
                removed
            }
            _ => Ok(()),
        };
        // The replies (the SYN-ACK, ACKs) go now, as after a burst of the split queue.
        self.return_tokens();
        self.flush();
        self.plain = Some(plain);
        outcome.and(taken)
    }

    fn plain_frames(&mut self, plain: &mut PlainQueue<B>) -> Result<usize, String> {
        let n = plain
            .rx
            .rx_burst(&mut plain.got, BURST)
            .map_err(|e| format!("receiving on the handshake's queue: {e}"))?;
        for m in plain.got.drain(..) {
            self.counts.segments += 1;
            let len = m.read(0, &mut plain.frame);
            let ok = m.flags.rx_ip_csum_good && m.flags.rx_l4_csum_good;
            match parse_split(&plain.frame[..len], None, ok) {
                Ok(mut parsed) => {
                    if parsed.segment.payload.linear > MAX_LINEAR {
                        // More host bytes than the receiver takes linear: the payload (and a
                        // FIN behind it) is dropped, sent again onto the split queue; the
                        // headers still count, an ACK that ends the handshake above all.
                        self.counts.plain_dropped += 1;
                        parsed.segment.payload = Payload {
                            linear: 0,
                            dmabuf: None,
                        };
                        parsed.segment.flags.0 &= !TcpFlags::FIN.0;
                    }
                    self.deliver(&parsed, &plain.frame[..len], None, false);
                }
                Err(_) => self.counts.unparsed += 1,
            }
        }
        Ok(n)
    }
}
