//! The sending side (`--connect IP:PORT`): a stream of ncdevmem's pattern sent from dmabuf
//! memory. The pattern is written into the dmabuf once (the only CPU touch of payload memory,
//! counted as `pattern_fill_bytes`); the driver's [`TcpSender`] cuts the queued dmabuf ranges
//! into segments, and [`DevmemTx`] posts each as a WQE that gathers the headers from host
//! memory and the payload by memory key from the dmabuf. Ranges are queued again as their
//! completions come (every byte acknowledged), so a stream longer than the memory reuses it.
//! Replies arrive on their own receive queue (a flow rule on our address and source port);
//! ARP and ICMP are served on another ([`PortAddress`]).

use super::pattern;
use crate::dmabuf::Imported;
use crate::rdma::port_address::{self, PortAddress};
use cxdirect::devmem_tcp::{
    parse_split, DevmemTx, Endpoints, FrameTail, PathStats, SendMemory, TcpSender, TcpTxError,
    TxConfig, TxState, TxStats, MAX_LSO_PAYLOAD,
};
use cxdirect::{
    Backend, Device, FlowMatch, FlowProtocol, IpVersion, KeyAccess, Mbuf, MemoryKey, Mempool,
    Options, Port, PortConfig, Queues, RxQueue, Started, TxQueue,
};
use std::net::{IpAddr, Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

/// Frames taken per receive burst.
const BURST: usize = 64;

/// Our source port.
pub const SOURCE_PORT: u16 = 40001;

/// Frames waiting for the send ring at most before no more transmits are taken.
const WAITING_MAX: usize = 256;

/// Dmabuf pieces the memory is cut into (each queued again once its bytes are acknowledged).
const PIECES: u64 = 8;

/// How long we wait for the peer's FIN once ours was acknowledged.
const FIN_WAIT: Duration = Duration::from_secs(5);

/// A SYN refused (RST: nothing listens yet) is tried again after this long, this many times.
const REFUSED_RETRY: Duration = Duration::from_secs(1);
const REFUSED_TRIES: u32 = 60;

/// What a `--connect` run does.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Our address (served: ARP, ICMP echo).
    pub ip: Ipv4Addr,
    /// Where to connect.
    pub peer: SocketAddrV4,
    /// Stream bytes to send.
    pub bytes: u64,
    /// The pattern's modulus (ncdevmem's `-v`).
    pub modulus: u8,
    /// Smallest retransmission timeout.
    pub rto_min: Duration,
    /// Let the device segment (LSO) where the port offers it.
    pub lso: bool,
}

/// What the sending side counted.
#[derive(Debug, Clone, Default)]
pub struct ClientCounts {
    /// Bytes the CPU wrote into the dmabuf: the pattern, once, before sending.
    pub pattern_fill_bytes: u64,
    /// Payload bytes the CPU copied or read to send them: 0, the device gathers them.
    pub cpu_payload_copied: u64,
    /// Completions taken (ranges acknowledged whole).
    pub completions: u64,
    /// Transmits the send path dropped (no pool buffer).
    pub dropped: u64,
    /// Frames from the peer that did not parse.
    pub unparsed: u64,
}

/// One `--connect` side on a port.
pub struct Client<B: Backend> {
    port: Option<Port<B>>,
    address: PortAddress<B>,
    rx: RxQueue<B>,
    tx: TxQueue<B>,
    key: Option<MemoryKey>,
    memory: SendMemory,
    chunk: u64,
    piece: u64,
    cfg: ClientConfig,
    sender: TcpSender,
    tx_config: TxConfig,
    /// The handshake completed (a reset after it ends the run; before it, the SYN was refused).
    established: bool,
    /// After a refused SYN: when to try again, and how many refusals so far.
    retry_at: Option<Instant>,
    refusals: u32,
    path: Option<DevmemTx>,
    local_mac: [u8; 6],
    /// Stream bytes queued so far.
    queued: u64,
    /// The FIN is asked for.
    closed: bool,
    pool: Mempool,
    epoch: Instant,
    first_send: Option<Instant>,
    last_ack: Option<Instant>,
    fin_acked_at: Option<Instant>,
    got: Vec<Mbuf>,
    counts: ClientCounts,
}

impl<B: Backend> Client<B> {
    /// Brings `backend` up, serves `cfg.ip`, maps the dmabuf `import` makes, registers it for
    /// sending and writes the pattern into it.
    ///
    /// # Errors
    ///
    /// A bring-up, port, steering, key or fill step failed (the message names it).
    pub fn open(
        backend: B,
        cfg: ClientConfig,
        import: impl FnOnce(&Device<B>) -> Result<Imported, String>,
    ) -> Result<Self, String> {
        let name = backend.name();
        let dev = Device::bring_up(backend, Options::default())
            .map_err(|e| format!("{name}: bring-up failed: {e}"))?;
        let memory = import(&dev)?;
        if memory.gpu.is_some() {
            return Err("--connect writes the pattern with the CPU: give udmabuf or memfd".into());
        }
        let local_mac = dev.info().mac;
        let lso = cfg.lso && dev.eth_caps().max_lso_cap() > 0;
        let Started {
            mut port,
            queues: Queues { mut tx, mut rx },
        } = Port::start(
            dev,
            PortConfig {
                tx_queues: 2,
                rx_queues: 2,
                // Two basic blocks per data frame: room for a window of them.
                ring_size: 1024,
                pool_buffers: 4096,
                tx_tso: lso,
                ..port_address::port_config()
            },
        )
        .map_err(|e| format!("{name}: port start failed: {e}"))?;
        let data_tx = tx.pop().ok_or("no send queue")?;
        let acks = rx.pop().ok_or("no receive queue")?;
        port.steer(
            FlowMatch {
                ip: IpVersion::V4,
                protocol: FlowProtocol::Tcp,
                dst_addr: Some(IpAddr::V4(cfg.ip)),
                src_addr: Some(IpAddr::V4(*cfg.peer.ip())),
                dst_port: Some(SOURCE_PORT),
                src_port: Some(cfg.peer.port()),
            },
            acks.rqn(),
        )
        .map_err(|e| format!("{name}: steering the replies: {e}"))?;
        let address = PortAddress::serve(&mut port, Queues { tx, rx }, cfg.ip)?;
        let key = MemoryKey::register(port.device(), &memory.mapping, KeyAccess::READ_ONLY)
            .map_err(|e| format!("{name}: registering the dmabuf for sending: {e}"))?;
        // A whole number of pattern periods, so stream byte `s` lies at `s % chunk`.
        let period = u64::from(cfg.modulus);
        let len = memory.mapping.len() as u64;
        let chunk = (len / period * period).min(cfg.bytes.max(period));
        if chunk == 0 {
            return Err(format!("{len} bytes of dmabuf hold no pattern period"));
        }
        let mut counts = ClientCounts::default();
        let mut block = vec![0u8; 1 << 20];
        let mut at = 0u64;
        while at < chunk {
            let n = (chunk - at).min(block.len() as u64) as usize;
            pattern::fill(cfg.modulus, at, &mut block[..n]);
            memory
                .mapping
                .write(at as usize, &block[..n])
                .map_err(|e| format!("writing the pattern into the dmabuf: {e}"))?;
            at += n as u64;
        }
        counts.pattern_fill_bytes = chunk;
        let tx_config = TxConfig {
            iss: 0x2000_0000 ^ u32::from(cfg.peer.port()),
            mss: 1448,
            rto_min_us: cfg.rto_min.as_micros() as u64,
            rto_initial_us: (cfg.rto_min.as_micros() as u64).max(1_000_000),
            cwnd_max_segments: 256,
            cwnd_initial_segments: 10,
            max_ranges: (2 * PIECES) as u32,
            // Room for the headers within the device's largest LSO message.
            lso_max_bytes: (data_tx.max_lso().saturating_sub(128) as u32).min(MAX_LSO_PAYLOAD),
        };
        let sender = TcpSender::new(tx_config).map_err(|e| format!("sender: {e}"))?;
        println!(
            "connecting: {} -> {} on {name}, {} bytes of pattern -v {} from {chunk} bytes of dmabuf ({} exporter), LSO {}",
            cfg.ip,
            cfg.peer,
            cfg.bytes,
            cfg.modulus,
            memory.mapping.dmabuf().exporter(),
            if data_tx.max_lso() > 0 { "on" } else { "off" }
        );
        Ok(Self {
            address,
            rx: acks,
            tx: data_tx,
            memory: SendMemory::new(&key),
            key: Some(key),
            chunk,
            piece: chunk.div_ceil(PIECES).max(1),
            sender,
            tx_config,
            established: false,
            retry_at: None,
            refusals: 0,
            path: None,
            local_mac,
            queued: 0,
            closed: false,
            pool: port.pool().clone(),
            epoch: Instant::now(),
            first_send: None,
            last_ack: None,
            fin_acked_at: None,
            got: Vec::with_capacity(BURST),
            counts,
            cfg,
            port: Some(port),
        })
    }

    /// One turn at `now`: ARP served and the peer resolved, replies taken, completed ranges
    /// queued again, segments sent. Returns the frames taken.
    ///
    /// # Errors
    ///
    /// A queue failed, or the peer reset the connection.
    pub fn turn(&mut self, now: Instant) -> Result<usize, String> {
        self.address.turn(now)?;
        let now_us = now.duration_since(self.epoch).as_micros() as u64;
        if self.path.is_none() {
            let peer_ip = *self.cfg.peer.ip();
            if let Some(mac) = self.address.mac_of(peer_ip, now)? {
                let ends = Endpoints {
                    local_mac: self.local_mac,
                    peer_mac: mac,
                    local_ip: IpAddr::V4(self.cfg.ip),
                    peer_ip: IpAddr::V4(peer_ip),
                    local_port: SOURCE_PORT,
                    peer_port: self.cfg.peer.port(),
                };
                self.path = Some(DevmemTx::new(
                    self.pool.clone(),
                    self.memory,
                    ends,
                    WAITING_MAX * 2,
                ));
                self.sender.connect().map_err(|e| e.to_string())?;
                self.queue_more()?;
            }
            return Ok(0);
        }
        let mut taken = 0;
        while self
            .rx
            .rx_burst(&mut self.got, BURST)
            .map_err(|e| format!("connect: receiving: {e}"))?
            > 0
        {
            let got = std::mem::take(&mut self.got);
            taken += got.len();
            for m in &got {
                self.on_frame(m, now_us, now);
            }
            self.got = got;
            self.got.clear();
        }
        // A reset once every byte was acknowledged ends the run (a listener such as nc that
        // stops reading at the end resets rather than closes); before, it is an error.
        if self.sender.state() == TxState::Reset && !self.established {
            self.refused(now)?;
        }
        if let Some(at) = self.retry_at {
            if now < at {
                return Ok(taken);
            }
            self.retry_at = None;
            self.sender.connect().map_err(|e| e.to_string())?;
        }
        self.established |= self.sender.synchronised() && self.sender.state() != TxState::Reset;
        if self.sender.state() == TxState::Reset && self.sender.acked() < self.cfg.bytes {
            return Err(format!(
                "connect: the peer reset the connection after {} acknowledged bytes",
                self.sender.acked()
            ));
        }
        while let Some(_c) = self.sender.take_completion() {
            self.counts.completions += 1;
        }
        self.queue_more()?;
        self.send(now_us, now);
        if self.sender.state() == TxState::FinAcked && self.fin_acked_at.is_none() {
            self.fin_acked_at = Some(now);
        }
        Ok(taken)
    }

    /// Every byte and our FIN acknowledged, and the peer's FIN taken (or not within 5 s).
    pub fn done(&self, now: Instant) -> bool {
        self.sender.finished()
            || self
                .fin_acked_at
                .is_some_and(|t| now.duration_since(t) > FIN_WAIT)
    }

    /// Stream bytes acknowledged.
    pub fn acked(&self) -> u64 {
        self.sender.acked()
    }

    /// SYNs refused so far (each tried again after a second).
    pub fn refusals(&self) -> u32 {
        self.refusals
    }

    /// The sender's counters.
    pub fn stats(&self) -> TxStats {
        self.sender.stats()
    }

    /// The send path's counters.
    pub fn path_stats(&self) -> PathStats {
        self.path.as_ref().map(|p| p.stats()).unwrap_or_default()
    }

    /// What this side counted.
    pub fn counts(&self) -> &ClientCounts {
        &self.counts
    }

    /// Seconds from the first segment to the last ACK.
    pub fn data_seconds(&self) -> f64 {
        match (self.first_send, self.last_ack) {
            (Some(a), Some(b)) => b.duration_since(a).as_secs_f64(),
            _ => 0.0,
        }
    }

    /// Deregisters the dmabuf and closes the port.
    ///
    /// # Errors
    ///
    /// A destroy command failed.
    pub fn close(mut self) -> Result<(), String> {
        let mut port = self.port.take().ok_or("already closed")?;
        drop(self.rx);
        drop(self.tx);
        drop(self.path);
        drop(self.address);
        if let Some(key) = self.key.take() {
            key.deregister(port.device())
                .map_err(|e| format!("connect: deregistering the dmabuf: {e}"))?;
        }
        port.close()
            .and_then(|d| d.teardown())
            .map_err(|e| format!("connect: close failed: {e}"))?;
        Ok(())
    }

    /// The SYN was refused (nothing listens yet): a fresh sender tries again after
    /// [`REFUSED_RETRY`], at most [`REFUSED_TRIES`] times.
    fn refused(&mut self, now: Instant) -> Result<(), String> {
        self.refusals += 1;
        if self.refusals > REFUSED_TRIES {
            return Err(format!(
                "connect: {} refused the connection {} times",
                self.cfg.peer, self.refusals
            ));
        }
        // A new initial sequence number, so nothing of the refused attempt matches.
        self.tx_config.iss = self.tx_config.iss.wrapping_add(0x0100_0000);
        self.sender = TcpSender::new(self.tx_config).map_err(|e| format!("sender: {e}"))?;
        self.queued = 0;
        self.closed = false;
        self.queue_more()?;
        self.retry_at = Some(now + REFUSED_RETRY);
        println!(
            "connect: {} refused the connection; trying again",
            self.cfg.peer
        );
        Ok(())
    }

    /// Queues the stream's next ranges, each once the bytes that last used its dmabuf piece
    /// are acknowledged (the device will not read them again), and closes once all is queued.
    fn queue_more(&mut self) -> Result<(), String> {
        let total = self.cfg.bytes;
        while self.queued < total {
            let off = self.queued % self.chunk;
            let piece_end = ((off / self.piece + 1) * self.piece).min(self.chunk);
            let len = (piece_end - off).min(total - self.queued);
            if self.queued + len > self.sender.acked() + self.chunk {
                break;
            }
            match self.sender.queue(off, len) {
                Ok(()) => self.queued += len,
                // Completions not yet taken hold the places: the next turn queues it.
                Err(TcpTxError::TooManyRanges { .. }) => break,
                Err(e) => return Err(format!("connect: queueing: {e}")),
            }
        }
        let connecting = matches!(self.sender.state(), TxState::SynSent | TxState::Established);
        if self.queued == total && !self.closed && connecting {
            self.sender
                .close()
                .map_err(|e| format!("connect: closing: {e}"))?;
            self.closed = true;
        }
        Ok(())
    }

    fn on_frame(&mut self, m: &Mbuf, now_us: u64, now: Instant) {
        let mut buf = [0u8; 256];
        let n = m.read(0, &mut buf);
        let ok = m.flags.rx_ip_csum_good && m.flags.rx_l4_csum_good;
        // Bytes past what was read (a segment with payload) are described, never read.
        let tail = (m.pkt_len() > n).then(|| FrameTail {
            buffer: 0,
            offset: 0,
            len: (m.pkt_len() - n) as u32,
        });
        let Ok(p) = parse_split(&buf[..n], tail, ok) else {
            self.counts.unparsed += 1;
            return;
        };
        if p.src != IpAddr::V4(*self.cfg.peer.ip()) || p.src_port != self.cfg.peer.port() {
            return;
        }
        let before = self.sender.acked();
        self.sender.on_segment(&p.segment, now_us);
        if self.sender.acked() > before {
            self.last_ack = Some(now);
        }
    }

    fn send(&mut self, now_us: u64, now: Instant) {
        let Some(path) = self.path.as_mut() else {
            return;
        };
        while path.waiting() < WAITING_MAX {
            let Some(t) = self.sender.poll_transmit(now_us) else {
                break;
            };
            if t.len > 0 && self.first_send.is_none() {
                self.first_send = Some(now);
            }
            if path.push(&t).is_err() {
                // Lost as on a wire: the sender's timer sends it again.
                self.counts.dropped += 1;
            }
        }
        path.flush(&mut self.tx);
    }
}
