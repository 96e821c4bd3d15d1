//! The address responder of one IPv4 address on a port: it takes ARP and ICMP echo out of
//! received bursts, answers ARP requests for the address and echo requests to it by
//! rewriting the received buffer into the reply (no allocation, lock or formatting per
//! packet), keeps the neighbour table, sends its due ARP requests from the port's pool, and
//! hands every other frame back untouched, in order.

use super::arp::{
    ArpOp, ArpPacket, EthernetHeader, MacAddr, ARP_FRAME_LEN, BROADCAST, ETHERTYPE_ARP,
    ETHERTYPE_IPV4, ETH_HEADER_LEN,
};
use super::checksum::{update, Checksum};
use super::error::ResolveError;
use super::icmp::{
    IcmpEcho, Ipv4Header, DEFAULT_TTL, ICMP_ECHO_HEADER_LEN, ICMP_ECHO_REPLY, ICMP_ECHO_REQUEST,
    IPPROTO_ICMP,
};
use super::neighbour::{ArpVerdict, NeighbourConfig, Neighbours, Resolution};
use crate::backend::Backend;
use crate::error::DriverError;
use crate::mem::{Mbuf, Mempool};
use crate::port::{FlowMatch, FlowProtocol, FlowRule, IpVersion, Port};
use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

/// Bytes of an ARP frame as the responder sends it: padded with zeros to Ethernet's 60-byte
/// minimum (without the FCS), as a NIC pads a short frame.
pub const ARP_SEND_LEN: usize = 60;

/// What a [`Responder`] has counted (its neighbour table counts apart:
/// [`Neighbours::stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResponderStats {
    /// ARP replies written (requests for our address, probes included).
    pub arp_replies: u64,
    /// ARP requests written by [`Responder::poll`].
    pub arp_requests: u64,
    /// ARP frames dropped as malformed (lengths, hardware or protocol type, operation).
    pub arp_malformed: u64,
    /// ARP frames dropped after the neighbour table believed nothing of them.
    pub arp_ignored: u64,
    /// Echo replies written.
    pub echo_replies: u64,
    /// ICMP frames to our address dropped: the ICMP checksum does not verify.
    pub icmp_malformed: u64,
    /// Echo requests to our address dropped: fragments, IP options, or too short a buffer to
    /// answer in (none of which this responder answers).
    pub echo_unsupported: u64,
    /// Frames handed back untouched.
    pub passed: u64,
    /// Requests [`Responder::poll`] could not send: the pool was empty.
    pub no_buffer: u64,
}

/// What becomes of one received frame.
enum Action {
    /// Not ours: handed back untouched.
    Keep,
    /// Rewritten into a reply, to be sent.
    Reply,
    /// Ours, and finished with.
    Drop,
}

/// The responder of one IPv4 address (see the module's documentation).
#[derive(Debug)]
pub struct Responder {
    neighbours: Neighbours,
    stats: ResponderStats,
}

impl Responder {
    /// A responder for `ip` on a port of MAC `mac`, its neighbour table shaped by `config`.
    ///
    /// # Errors
    ///
    /// As [`Neighbours::new`].
    pub fn new(mac: MacAddr, ip: Ipv4Addr, config: NeighbourConfig) -> Result<Self, DriverError> {
        Ok(Self {
            neighbours: Neighbours::new(mac, ip, config)?,
            stats: ResponderStats::default(),
        })
    }

    /// A responder for `ip` on `port`'s function (its MAC).
    ///
    /// # Errors
    ///
    /// As [`Neighbours::new`].
    pub fn for_port<B: Backend>(
        port: &mut Port<B>,
        ip: Ipv4Addr,
        config: NeighbourConfig,
    ) -> Result<Self, DriverError> {
        let mac = port.device().info().mac;
        Self::new(mac, ip, config)
    }

    /// Our MAC address.
    pub fn mac(&self) -> MacAddr {
        self.neighbours.mac()
    }

    /// Our IPv4 address.
    pub fn ip(&self) -> Ipv4Addr {
        self.neighbours.ip()
    }

    /// The neighbour table.
    pub fn neighbours(&self) -> &Neighbours {
        &self.neighbours
    }

    /// The neighbour table, to resolve or forget addresses.
    pub fn neighbours_mut(&mut self) -> &mut Neighbours {
        &mut self.neighbours
    }

    /// What has been counted.
    pub fn stats(&self) -> ResponderStats {
        self.stats
    }

    /// [`Neighbours::resolve`] on the responder's table; the requests it makes due leave
    /// with the next [`Responder::poll`].
    ///
    /// # Errors
    ///
    /// As [`Neighbours::resolve`].
    pub fn resolve(&mut self, ip: Ipv4Addr, now: Instant) -> Result<Resolution, ResolveError> {
        self.neighbours.resolve(ip, now)
    }

    /// Installs the port's flow rules that bring this responder its frames on receive queue
    /// `rqn` (any of the port's queues): every ARP frame (EtherType 0x0806) and ICMP over
    /// IPv4 to our address. Returns the rules (ARP, ICMP), for [`Port::remove_flow`].
    ///
    /// # Errors
    ///
    /// As [`Port::steer`] and [`Port::steer_ethertype`]; a rule installed before the other
    /// failed is removed again.
    pub fn steer<B: Backend>(
        &self,
        port: &mut Port<B>,
        rqn: u32,
    ) -> Result<[FlowRule; 2], DriverError> {
        let arp = port.steer_ethertype(ETHERTYPE_ARP, rqn)?;
        let icmp = FlowMatch {
            ip: IpVersion::V4,
            protocol: FlowProtocol::Icmp,
            dst_addr: Some(IpAddr::V4(self.ip())),
            src_addr: None,
            dst_port: None,
            src_port: None,
        };
        match port.steer(icmp, rqn) {
            Ok(icmp) => Ok([arp, icmp]),
            Err(e) => {
                let _ = port.remove_flow(arp);
                Err(e)
            }
        }
    }

    /// Takes this responder's frames out of a received burst at `now`: ARP is read (and its
    /// requests for our address answered), echo requests to our address answered, malformed
    /// frames of ours dropped and counted. Replies are the received buffers rewritten, pushed
    /// onto `replies` (send them with [`crate::TxQueue::tx_burst`]; give `replies` room for a
    /// burst so pushing never allocates). Every other frame stays in `rx`, untouched and in
    /// order (the ones after a taken frame move up). Returns the frames taken.
    pub fn handle(&mut self, rx: &mut Vec<Mbuf>, replies: &mut Vec<Mbuf>, now: Instant) -> usize {
        let mut taken = 0;
        let mut i = 0;
        while i < rx.len() {
            match self.take(&mut rx[i], now) {
                Action::Keep => {
                    self.stats.passed += 1;
                    i += 1;
                }
                Action::Reply => {
                    replies.push(rx.remove(i));
                    taken += 1;
                }
                Action::Drop => {
                    drop(rx.remove(i));
                    taken += 1;
                }
            }
        }
        taken
    }

    /// Writes the ARP requests due at `now` ([`Neighbours::next_request`]) into buffers of
    /// `pool`, pushed onto `out` for sending; returns how many. Call it from the polling loop
    /// (at least every `retransmit`), so retries leave on time.
    pub fn poll(&mut self, pool: &Mempool, out: &mut Vec<Mbuf>, now: Instant) -> usize {
        let mut sent = 0;
        loop {
            let Some(mut m) = pool.alloc() else {
                self.stats.no_buffer += 1;
                return sent;
            };
            let Some(ip) = self.neighbours.next_request(now) else {
                return sent;
            };
            let arp = ArpPacket {
                op: ArpOp::Request,
                sender_mac: self.mac(),
                sender_ip: self.ip(),
                target_mac: [0; 6],
                target_ip: ip,
            };
            if write_arp(&mut m, &arp, BROADCAST, self.mac()).is_ok() {
                out.push(m);
                self.stats.arp_requests += 1;
                sent += 1;
            } else {
                self.stats.no_buffer += 1;
            }
        }
    }

    fn take(&mut self, m: &mut Mbuf, now: Instant) -> Action {
        if m.is_chained() {
            return Action::Keep;
        }
        // Ethernet, the longest IPv4 header, and an ICMP echo header.
        let mut head = [0u8; ETH_HEADER_LEN + 60 + ICMP_ECHO_HEADER_LEN];
        let n = m.read(0, &mut head);
        let Ok(eth) = EthernetHeader::parse(&head[..n]) else {
            return Action::Keep;
        };
        match eth.ethertype {
            ETHERTYPE_ARP => self.take_arp(m, &head[..n], now),
            ETHERTYPE_IPV4 if eth.dst == self.mac() => self.take_ipv4(m, &head[..n]),
            _ => Action::Keep,
        }
    }

    fn take_arp(&mut self, m: &mut Mbuf, frame: &[u8], now: Instant) -> Action {
        let arp = match ArpPacket::parse(&frame[ETH_HEADER_LEN..]) {
            Ok(arp) => arp,
            Err(_) => {
                self.stats.arp_malformed += 1;
                return Action::Drop;
            }
        };
        match self.neighbours.receive(&arp, now) {
            ArpVerdict::Answer => {
                // arp_process answers to the sender's MAC, from ours, naming the sender as
                // target: arp_send(REPLY, sip, tip, sha, dev_addr, sha).
                let reply = ArpPacket {
                    op: ArpOp::Reply,
                    sender_mac: self.mac(),
                    sender_ip: self.ip(),
                    target_mac: arp.sender_mac,
                    target_ip: arp.sender_ip,
                };
                match write_arp(m, &reply, arp.sender_mac, self.mac()) {
                    Ok(()) => {
                        self.stats.arp_replies += 1;
                        Action::Reply
                    }
                    Err(_) => Action::Drop,
                }
            }
            ArpVerdict::Learned | ArpVerdict::Updated => Action::Drop,
            ArpVerdict::Ignored(_) => {
                self.stats.arp_ignored += 1;
                Action::Drop
            }
        }
    }

    fn take_ipv4(&mut self, m: &mut Mbuf, frame: &[u8]) -> Action {
        let ip_len = m.len() - ETH_HEADER_LEN;
        // A packet that does not read as IPv4 is not judged here: it goes back as it came.
        let Ok(ip) = Ipv4Header::parse_prefix(&frame[ETH_HEADER_LEN..], ip_len) else {
            return Action::Keep;
        };
        if ip.protocol != IPPROTO_ICMP || ip.dst != self.ip() {
            return Action::Keep;
        }
        let icmp_at = ETH_HEADER_LEN + ip.header_len;
        let Ok(echo) = IcmpEcho::parse_header(frame.get(icmp_at..).unwrap_or(&[])) else {
            if ip.is_fragment() {
                self.stats.echo_unsupported += 1;
                return Action::Drop;
            }
            self.stats.icmp_malformed += 1;
            return Action::Drop;
        };
        if echo.icmp_type != ICMP_ECHO_REQUEST {
            // Replies to the application's own pings, errors: the application's.
            return Action::Keep;
        }
        if ip.is_fragment() || ip.header_len != 20 {
            self.stats.echo_unsupported += 1;
            return Action::Drop;
        }
        let end = ETH_HEADER_LEN + usize::from(ip.total_len);
        // The whole message's checksum, read in pieces through a small buffer on the stack.
        let mut sum = Checksum::new();
        let mut piece = [0u8; 256];
        let mut at = icmp_at;
        while at < end {
            let want = (end - at).min(piece.len());
            let got = m.read(at, &mut piece[..want]);
            if got == 0 {
                break;
            }
            sum.add(&piece[..got]);
            at += got;
        }
        if at != end || !sum.verifies() {
            self.stats.icmp_malformed += 1;
            return Action::Drop;
        }
        match self.write_echo_reply(m, frame, &ip, &echo, end) {
            Ok(()) => {
                self.stats.echo_replies += 1;
                Action::Reply
            }
            Err(_) => {
                self.stats.echo_unsupported += 1;
                Action::Drop
            }
        }
    }

    /// Turns the verified echo request in `m` into its reply in place: MACs and addresses
    /// swapped, TTL 64, header checksum recomputed, type 0 with the ICMP checksum updated
    /// (RFC 1624), the frame cut to the IP packet's length (no trailing padding).
    fn write_echo_reply(
        &self,
        m: &mut Mbuf,
        frame: &[u8],
        ip: &Ipv4Header,
        echo: &IcmpEcho,
        end: usize,
    ) -> Result<(), DriverError> {
        let mut head = [0u8; ETH_HEADER_LEN + 20 + 4];
        let n = head.len();
        head.copy_from_slice(&frame[..n]);
        head[0..6].copy_from_slice(&frame[6..12]);
        head[6..12].copy_from_slice(&self.mac());
        let h = &mut head[ETH_HEADER_LEN..ETH_HEADER_LEN + 20];
        h[8] = DEFAULT_TTL;
        h[10..12].fill(0);
        h[12..16].copy_from_slice(&ip.dst.octets());
        h[16..20].copy_from_slice(&ip.src.octets());
        let mut c = Checksum::new();
        c.add(h);
        let hc = c.finish();
        h[10..12].copy_from_slice(&hc.to_be_bytes());
        let i = &mut head[ETH_HEADER_LEN + 20..];
        let old = u16::from_be_bytes([echo.icmp_type, echo.code]);
        let new = u16::from_be_bytes([ICMP_ECHO_REPLY, echo.code]);
        i[0] = ICMP_ECHO_REPLY;
        i[2..4].copy_from_slice(&update(echo.checksum, old, new).to_be_bytes());
        m.write(0, &head)?;
        // Only shortens (padding off): the packet's bytes stay where they are.
        m.set_len(end as u32);
        Ok(())
    }
}

/// Replaces `m`'s frame with `arp` from `src` to `dst`, zero-padded to [`ARP_SEND_LEN`]
/// bytes when the buffer holds them (else the bare 42).
fn write_arp(m: &mut Mbuf, arp: &ArpPacket, dst: MacAddr, src: MacAddr) -> Result<(), DriverError> {
    let mut frame = [0u8; ARP_SEND_LEN];
    let mut bare = [0u8; ARP_FRAME_LEN];
    arp.write_frame(dst, src, &mut bare)
        .map_err(|_| DriverError::Internal("an ARP frame fits its array"))?;
    frame[..ARP_FRAME_LEN].copy_from_slice(&bare);
    let len = if m.capacity() >= ARP_SEND_LEN {
        ARP_SEND_LEN
    } else {
        ARP_FRAME_LEN
    };
    m.set_data(&frame[..len])
}
