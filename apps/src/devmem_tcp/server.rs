//! The receiving side: one port serving an IPv4 address (ARP and ICMP echo on its plain queue,
//! [`PortAddress`]), a split receive queue that TCP to the listening port is steered to
//! (headers into host memory, payload into the dmabuf), a [`TcpReceiver`] for one connection,
//! and a send queue for its SYN-ACK and ACKs.
//!
//! The handshake is taken on a plain queue by default ([`Handshake::Plain`], `handshake`): the
//! SYN lands whole in host memory, so every option is agreed, and the flow moves to the split
//! queue once established, where a 66-byte split is exactly a data segment's headers. With
//! [`Handshake::Split`] it is taken on the split queue, whose split point must then hold a Linux
//! SYN's 74 bytes of headers; each data segment (66 bytes of headers) then leaves 8 payload
//! bytes in host memory, handed out as linear bytes (`docs/devmem-tcp.md` §2, §3, §7). The
//! payload in the dmabuf is read by the CPU only to check it against the pattern (`-v`),
//! counted apart from delivery, which copies none of it.

mod counts;
mod handshake;

pub use counts::{mac_text, ServerCounts};
pub use handshake::Handshake;
use handshake::PlainQueue;

use super::pattern::Checker;
use crate::dmabuf::Imported;
use crate::rdma::port_address::{self, PortAddress};
use cxdirect::devmem_tcp::{
    parse_split, write_reply, Endpoints, Event, FrameTail, Outcome, Reply, RxConfig, RxStats,
    SplitSegment, TcpReceiver, TcpState, MAX_REPLY_FRAME,
};
use cxdirect::{
    Backend, Device, Mbuf, Mempool, Options, PayloadToken, Port, PortConfig, Queues, SplitPacket,
    SplitRxConfig, SplitRxQueue, Started, TxQueue,
};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Split packets taken per burst.
const BURST: usize = 32;

/// Bursts taken per turn at most.
const BURSTS_PER_TURN: usize = 16;

/// How long the last ACK of our FIN is waited for before the connection counts as done.
const LAST_ACK_WAIT: Duration = Duration::from_millis(500);

/// The MSS we announce: a 1500-byte MTU less IPv4 and TCP fixed headers.
const MSS: u16 = 1460;

/// Our window scale shift: windows up to 2^30 bytes.
const WINDOW_SCALE: u8 = 14;

/// The receiving side's shape.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The IPv4 address served (ARP, ICMP echo, TCP).
    pub ip: Ipv4Addr,
    /// The TCP port listened on.
    pub port: u16,
    /// The split point: frame bytes into host memory, 14..=1024 (74: a Linux SYN whole).
    pub header_bytes: u32,
    /// Bytes of one payload buffer in the dmabuf (a multiple of 64, 2048..=65536).
    pub payload_bytes: u32,
    /// Receive WQEs of the split queue (a power of two, 2..=32768).
    pub ring: u32,
    /// The pattern's modulus to check the payload against (ncdevmem's `-v`), or none.
    pub validate: Option<u8>,
    /// Stream bytes expected: once they all arrived, we close our side (FIN) ourselves, so a
    /// sender that never shuts its side down (a netcat waiting for the other end) finishes.
    pub expect: Option<u64>,
    /// Where the handshake is taken.
    pub handshake: Handshake,
}

/// The receiving side of one connection.
pub struct Server<B: Backend> {
    cfg: ServerConfig,
    port: Option<Port<B>>,
    address: PortAddress<B>,
    split: SplitRxQueue<B>,
    /// The handshake's plain queue ([`Handshake::Plain`]).
    plain: Option<PlainQueue<B>>,
    tx: TxQueue<B>,
    pool: Mempool,
    memory: Imported,
    rx: TcpReceiver,
    local_mac: [u8; 6],
    ends: Option<Endpoints>,
    queue_tokens: Vec<Option<PayloadToken>>,
    app_tokens: Vec<u32>,
    checker: Option<Checker>,
    counts: ServerCounts,
    epoch: Instant,
    first_data: Option<Instant>,
    last_data: Option<Instant>,
    fin_sent: Option<Instant>,
    /// In-order data arrived that no ACK sent yet covers.
    ack_due: bool,
    packets: Vec<SplitPacket>,
    /// The receiver's events of one call, reused.
    events: Vec<Event>,
    replies: Vec<Mbuf>,
    /// Where the check reads a fragment (at most a payload buffer).
    check_buf: Vec<u8>,
    error: Option<String>,
}

impl<B: Backend> Server<B> {
    /// Brings `backend` up, starts its port, serves `cfg.ip` and listens on `cfg.port` with the
    /// payload landing in `memory` (which the device maps through the port's IOMMU).
    ///
    /// # Errors
    ///
    /// A bring-up, port, queue, steering or receiver step failed (the message names it).
    pub fn open(
        backend: B,
        cfg: ServerConfig,
        import: impl FnOnce(&Device<B>) -> Result<Imported, String>,
    ) -> Result<Self, String> {
        let name = backend.name();
        let dev = Device::bring_up(backend, Options::default())
            .map_err(|e| format!("{name}: bring-up failed: {e}"))?;
        let memory = import(&dev)?;
        let local_mac = dev.info().mac;
        let plain = cfg.handshake == Handshake::Plain;
        let Started {
            mut port,
            queues: Queues { mut tx, mut rx },
        } = Port::start(
            dev,
            PortConfig {
                tx_queues: 2,
                rx_queues: if plain { 2 } else { 1 },
                // An ACK per segment of a burst, and room for the ones in flight.
                ring_size: 256,
                pool_buffers: 1024,
                ..port_address::port_config()
            },
        )
        .map_err(|e| format!("{name}: port start failed: {e}"))?;
        let reply_tx = tx.pop().ok_or("no send queue for the replies")?;
        let plain_rx = if plain {
            Some(rx.pop().ok_or("no receive queue for the handshake")?)
        } else {
            None
        };
        let address = PortAddress::serve(&mut port, Queues { tx, rx }, cfg.ip)?;
        let buffers = (memory.mapping.len() / cfg.payload_bytes as usize) as u32;
        let split = port
            .create_split_rx(&SplitRxConfig {
                ring_size: cfg.ring,
                header_bytes: cfg.header_bytes,
                // Header buffers go back as soon as a burst was parsed.
                header_buffers: cfg.ring + 256,
                payload_memory: Arc::clone(&memory.mapping),
                payload_bytes: cfg.payload_bytes,
            })
            .map_err(|e| format!("{name}: split queue: {e}"))?;
        let listen = handshake::flow(IpAddr::V4(cfg.ip), cfg.port, None);
        let plain = match plain_rx {
            Some(q) => {
                let rule = port.steer(listen, q.rqn()).map_err(|e| {
                    format!(
                        "{name}: steering tcp:{} to the handshake's queue: {e}",
                        cfg.port
                    )
                })?;
                Some(PlainQueue::new(q, rule))
            }
            None => {
                port.steer(listen, split.rqn()).map_err(|e| {
                    format!("{name}: steering tcp:{} to the split queue: {e}", cfg.port)
                })?;
                None
            }
        };
        let rx = TcpReceiver::new(RxConfig {
            buffers,
            buffer_bytes: cfg.payload_bytes,
            ooo_segments: cfg.ring.min(1024) as u16,
            mss: MSS,
            window_scale: WINDOW_SCALE,
            iss: 0x1000_0000 ^ u32::from(cfg.port),
        })
        .map_err(|e| format!("receiver: {e}"))?;
        println!(
            "listening: {}:{} on {name} mac={} split at {} bytes, {buffers} payload buffers of {} bytes ({} exporter), ring {}, handshake on the {} queue",
            cfg.ip,
            cfg.port,
            mac_text(&local_mac),
            cfg.header_bytes,
            cfg.payload_bytes,
            memory.mapping.dmabuf().exporter(),
            cfg.ring,
            if plain.is_some() { "plain" } else { "split" }
        );
        Ok(Self {
            checker: cfg.validate.map(Checker::new),
            pool: port.pool().clone(),
            port: Some(port),
            address,
            split,
            plain,
            tx: reply_tx,
            memory,
            rx,
            local_mac,
            ends: None,
            queue_tokens: vec![None; buffers as usize],
            app_tokens: Vec::with_capacity(BURST * 2),
            counts: ServerCounts::default(),
            epoch: Instant::now(),
            first_data: None,
            last_data: None,
            fin_sent: None,
            ack_due: false,
            packets: Vec::with_capacity(BURST),
            events: Vec::with_capacity(BURST * 2),
            replies: Vec::with_capacity(BURST * 4),
            check_buf: vec![0; cfg.payload_bytes as usize],
            error: None,
            cfg,
        })
    }

    /// One turn at `now`: ARP and ICMP served, split frames taken through the receiver, the
    /// application's fragments checked and their tokens given back, replies sent. Returns the
    /// frames taken from the split queue.
    ///
    /// # Errors
    ///
    /// The plain queue failed, or the split queue stopped (an error completion).
    pub fn turn(&mut self, now: Instant) -> Result<usize, String> {
        let taken = self.take_frames(now)?;
        if taken > 0 {
            self.counts.turn_frames += taken as u64;
            self.counts.turn_ns += now.elapsed().as_nanos() as u64;
        }
        Ok(taken)
    }

    /// The work of a turn; returns the frames it took.
    fn take_frames(&mut self, now: Instant) -> Result<usize, String> {
        self.address.turn(now)?;
        let mut taken = self.plain_turn()?;
        // A bounded number of bursts, so ARP and the caller's other work keep their turns.
        for _ in 0..BURSTS_PER_TURN {
            if self.split.rx_burst(&mut self.packets, BURST) == 0 {
                break;
            }
            taken += self.packets.len();
            let started = Instant::now();
            let packets = std::mem::take(&mut self.packets);
            for pkt in &packets {
                self.take(pkt);
            }
            self.counts.split_frames += packets.len() as u64;
            self.packets = packets;
            self.packets.clear();
            self.return_tokens();
            self.counts.receiver_ns += started.elapsed().as_nanos() as u64;
            self.flush();
        }
        if self.fin_sent.is_none()
            && self.rx.state() == TcpState::Established
            && self.cfg.expect.is_some_and(|n| self.counts.bytes >= n)
        {
            println!(
                "complete: {} bytes arrived; closing our side",
                self.counts.bytes
            );
            if let Some(r) = self.rx.close() {
                self.fin_sent = Some(now);
                self.reply(&r);
                self.flush();
            }
        }
        if self.split.in_error() {
            return Err(format!(
                "split queue stopped: syndrome {:#x}",
                self.split.stats().last_error_syndrome
            ));
        }
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        Ok(taken)
    }

    /// True once both sides closed (the peer's FIN after all its data, ours acknowledged), or
    /// our FIN went out half a second ago (its ACK or the peer's FIN may be lost), or the
    /// connection was reset.
    pub fn done(&self, now: Instant) -> bool {
        match self.rx.state() {
            TcpState::Closed => self.ends.is_some(),
            TcpState::LastAck | TcpState::FinWait => self
                .fin_sent
                .is_some_and(|t| now.duration_since(t) > LAST_ACK_WAIT),
            _ => false,
        }
    }

    /// True once a connection was accepted.
    pub fn connected(&self) -> bool {
        self.ends.is_some()
    }

    /// What was counted so far.
    pub fn counts(&self) -> &ServerCounts {
        &self.counts
    }

    /// The receiver's counters.
    pub fn rx_stats(&self) -> RxStats {
        self.rx.stats()
    }

    /// The pattern check, when one runs.
    pub fn checker(&self) -> Option<&Checker> {
        self.checker.as_ref()
    }

    /// Seconds from the first payload byte to the last.
    pub fn data_seconds(&self) -> f64 {
        match (self.first_data, self.last_data) {
            (Some(a), Some(z)) => z.duration_since(a).as_secs_f64(),
            _ => 0.0,
        }
    }

    /// The address's report line.
    pub fn describe_address(&self) -> String {
        self.address.describe()
    }

    /// Payload tokens the application holds (0 once every fragment went back).
    pub fn tokens_lent(&self) -> u32 {
        self.rx.tokens_lent()
    }

    /// Payload buffers neither posted nor free in the split queue: lent to the receiver (held
    /// out of order, or under the application's tokens). 0 at the end: none was lost.
    pub fn queue_tokens_outstanding(&self) -> u64 {
        self.split.stats().tokens_outstanding
    }

    /// Closes the port (the flow rule, the split queue and its keys, the address's queues).
    ///
    /// # Errors
    ///
    /// A destroy command failed.
    pub fn close(mut self) -> Result<(), String> {
        let port = self.port.take().ok_or("already closed")?;
        drop(self.split);
        drop(self.plain);
        drop(self.tx);
        drop(self.address);
        port.close()
            .and_then(|d| d.teardown())
            .map_err(|e| format!("receiver: close failed: {e}"))?;
        drop(self.memory);
        Ok(())
    }

    /// One split frame through the parser and the receiver.
    fn take(&mut self, pkt: &SplitPacket) {
        self.counts.segments += 1;
        let mut hdr = [0u8; 1024];
        let n = pkt.header.read(0, &mut hdr);
        let tail = pkt.payload.map(|t| FrameTail {
            buffer: t.buffer(),
            offset: t.offset(),
            len: t.len(),
        });
        if let Some(t) = pkt.payload {
            if let Some(slot) = self.queue_tokens.get_mut(t.buffer() as usize) {
                *slot = Some(t);
            }
        }
        let ok = pkt.header.flags.rx_ip_csum_good && pkt.header.flags.rx_l4_csum_good;
        match parse_split(&hdr[..n], tail, ok) {
            Ok(parsed) => self.deliver(&parsed, &hdr[..n], pkt.payload, true),
            Err(_) => {
                self.counts.unparsed += 1;
                self.release(pkt.payload);
            }
        }
    }

    /// A parsed segment through the receiver, once its peer is the connection's (the first
    /// SYN names the peer). `hdr`: the frame's bytes in host memory; `token`: the split
    /// queue's payload buffer of the frame, if any. `strict`: a segment the receiver refuses is
    /// an error (a split frame: a bug); otherwise a counted drop (a whole frame from the plain
    /// queue, whose payload may be longer than a split frame's host part).
    fn deliver(
        &mut self,
        parsed: &SplitSegment,
        hdr: &[u8],
        token: Option<PayloadToken>,
        strict: bool,
    ) {
        match &self.ends {
            None if parsed.segment.flags.0 & 0x02 != 0 && hdr.len() >= 12 => {
                let mut peer_mac = [0u8; 6];
                peer_mac.copy_from_slice(&hdr[6..12]);
                println!(
                    "connection: from {}:{} mac={}",
                    parsed.src,
                    parsed.src_port,
                    mac_text(&peer_mac)
                );
                self.ends = Some(Endpoints {
                    local_mac: self.local_mac,
                    peer_mac,
                    local_ip: IpAddr::V4(self.cfg.ip),
                    peer_ip: parsed.src,
                    local_port: self.cfg.port,
                    peer_port: parsed.src_port,
                });
            }
            Some(e) if e.peer_ip == parsed.src && e.peer_port == parsed.src_port => {}
            _ => {
                self.counts.foreign += 1;
                self.release(token);
                return;
            }
        }
        let h = parsed.headers_len;
        // The scratch list goes back in place below (on the refusal path too, empty).
        let mut events = std::mem::take(&mut self.events);
        let verdict = match self.rx.on_segment(&parsed.segment, &mut |e| events.push(e)) {
            Ok(v) => v,
            Err(e) => {
                self.events = events;
                if strict {
                    self.error
                        .get_or_insert(format!("receiver refused a segment: {e}"));
                } else {
                    self.counts.unparsed += 1;
                }
                self.release(token);
                return;
            }
        };
        match verdict.outcome {
            Outcome::Duplicate => self.counts.duplicates += 1,
            Outcome::OutOfOrder => self.counts.out_of_order += 1,
            _ => {}
        }
        for e in events.drain(..) {
            self.event(e, hdr, h);
        }
        self.events = events;
        match (verdict.outcome, verdict.reply) {
            // In-order data is acknowledged once per burst (cumulative); anything else (out of
            // order, duplicate, the handshake) at once, so the peer's fast retransmit sees it.
            (Outcome::InOrder, Some(_)) => self.ack_due = true,
            (_, Some(r)) => self.reply(&r),
            (_, None) => {}
        }
    }

    /// Gives a frame's payload buffer straight back to the queue (a frame the receiver never
    /// saw).
    fn release(&mut self, token: Option<PayloadToken>) {
        if let Some(t) = token {
            if let Some(slot) = self.queue_tokens.get_mut(t.buffer() as usize) {
                *slot = None;
            }
            if let Err(e) = self.split.give_back(&[t]) {
                self.error
                    .get_or_insert(format!("split queue refused a token: {e}"));
            }
        }
    }

    fn event(&mut self, e: Event, hdr: &[u8], h: usize) {
        match e {
            Event::Fragment {
                offset, len, token, ..
            } => {
                self.delivered(u64::from(len));
                self.counts.fragment_bytes += u64::from(len);
                if let Some(c) = &mut self.checker {
                    // The CPU reads the dmabuf here only to check what the device wrote.
                    // A fragment lies inside one payload buffer; a longer one is an error.
                    let read = match self.check_buf.get_mut(..len as usize) {
                        Some(bytes) => self
                            .memory
                            .read(offset as usize, bytes)
                            .map(|()| c.check(bytes)),
                        None => Err(format!("a fragment of {len} bytes, past a payload buffer")),
                    };
                    if let Err(e) = read {
                        self.error
                            .get_or_insert(format!("reading the dmabuf to check it: {e}"));
                    }
                    self.counts.validation_read_bytes += u64::from(len);
                }
                self.app_tokens.push(token);
            }
            Event::Linear { skip, len, .. } => {
                self.delivered(u64::from(len));
                self.counts.linear_bytes += u64::from(len);
                let from = h + skip as usize;
                if let (Some(c), Some(bytes)) =
                    (&mut self.checker, hdr.get(from..from + len as usize))
                {
                    c.check(bytes);
                }
            }
            Event::Release { buffer } => {
                let token = self
                    .queue_tokens
                    .get_mut(buffer as usize)
                    .and_then(Option::take);
                match token {
                    Some(t) => {
                        if let Err(e) = self.split.give_back(&[t]) {
                            self.error
                                .get_or_insert(format!("split queue refused a token: {e}"));
                        }
                    }
                    None => {
                        self.error
                            .get_or_insert(format!("released buffer {buffer} was never lent"));
                    }
                }
            }
            Event::Fin => {
                println!("fin: after {} bytes; closing our side", self.counts.bytes);
                if let Some(r) = self.rx.close() {
                    self.fin_sent = Some(Instant::now());
                    self.reply(&r);
                }
            }
            Event::Reset => println!("reset: by the peer after {} bytes", self.counts.bytes),
        }
    }

    fn delivered(&mut self, len: u64) {
        let now = Instant::now();
        self.first_data.get_or_insert(now);
        self.last_data = Some(now);
        self.counts.bytes += len;
    }

    /// The application is done with its fragments: their tokens go back, and their buffers
    /// to the device; one ACK acknowledges the burst's in-order data and tells the peer the
    /// window opened.
    fn return_tokens(&mut self) {
        if self.app_tokens.is_empty() {
            if std::mem::take(&mut self.ack_due) {
                if let Some(r) = self.rx.ack() {
                    self.reply(&r);
                }
            }
            return;
        }
        self.ack_due = false;
        let tokens = std::mem::take(&mut self.app_tokens);
        let mut events = std::mem::take(&mut self.events);
        for &t in &tokens {
            if let Err(e) = self.rx.give_back(t, 1, &mut |e| events.push(e)) {
                self.error
                    .get_or_insert(format!("receiver refused token {t}: {e}"));
            }
        }
        for e in events.drain(..) {
            self.event(e, &[], 0);
        }
        self.events = events;
        self.app_tokens = tokens;
        self.app_tokens.clear();
        if let Some(r) = self.rx.ack() {
            self.reply(&r);
        }
    }

    fn reply(&mut self, r: &Reply) {
        let Some(ends) = &self.ends else { return };
        let mut frame = [0u8; MAX_REPLY_FRAME];
        // TSval: milliseconds since the server started (RFC 7323 allows any monotonic clock).
        let tsval = self.epoch.elapsed().as_millis() as u32;
        let n = match write_reply(r, ends, tsval, &mut frame) {
            Ok(n) => n,
            Err(e) => {
                self.error.get_or_insert(format!("writing a reply: {e}"));
                return;
            }
        };
        let Some(mut m) = self.pool.alloc() else {
            self.counts.replies_dropped += 1;
            return;
        };
        if m.set_data(&frame[..n]).is_err() {
            self.counts.replies_dropped += 1;
            return;
        }
        self.replies.push(m);
        self.counts.replies += 1;
    }

    /// Sends the replies queued; what the ring cannot take now is dropped (ACKs are
    /// cumulative, the peer's timers cover a lost SYN-ACK or FIN).
    fn flush(&mut self) {
        for _ in 0..4 {
            if self.replies.is_empty() {
                return;
            }
            self.tx.tx_burst(&mut self.replies);
        }
        self.counts.replies_dropped += self.replies.len() as u64;
        self.replies.clear();
    }
}
