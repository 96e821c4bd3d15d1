//! The self-test's sender on the other port of an emulated pair: a small TCP sender that
//! frames its segments as Linux does ([`super::frame`]), finds the receiver's MAC by ARP
//! through its own [`PortAddress`], reads the receiver's replies with the driver's own parser
//! (`parse_split` on a whole frame), honours the advertised window, and retransmits: the
//! segment at the oldest unacknowledged byte after three duplicate ACKs, and everything from
//! it (go-back-N) when no ACK moved it for a while.

use super::frame::{self, End, Fields};
use super::pattern;
use crate::rdma::port_address::{self, PortAddress};
use cxdirect::devmem_tcp::parse_split;
use cxdirect::{
    Backend, Device, FlowMatch, FlowProtocol, IpVersion, Mbuf, Mempool, Options, Port, PortConfig,
    Queues, RxQueue, Started, TxQueue,
};
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

/// Segments in flight at most (the sender's own congestion window, fixed).
const CWND_SEGMENTS: u32 = 128;

/// No ACK progress for this long: everything from the oldest unacknowledged byte again.
const RTO: Duration = Duration::from_millis(50);

/// The sender's source port.
const SOURCE_PORT: u16 = 40000;

/// Frames taken per burst.
const BURST: usize = 32;

/// How long the sender waits for the receiver's FIN once its own was acknowledged.
const FIN_WAIT: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Resolving,
    SynSent,
    Established,
    /// All data and our FIN acknowledged: waiting for the peer's FIN.
    FinAcked,
    Done,
}

/// What the sender counted.
#[derive(Debug, Clone, Default)]
pub struct SenderCounts {
    /// Data segments sent, retransmissions included.
    pub segments: u64,
    /// Segments sent again.
    pub retransmitted: u64,
    /// Go-back-N rounds after a timeout.
    pub timeouts: u64,
    /// Fast retransmissions after three duplicate ACKs.
    pub fast_retransmits: u64,
    /// The receiver's SYN-ACK carried a window scale option (the receiver read ours).
    pub window_scaling: bool,
    /// The receiver's SYN-ACK carried timestamps (the receiver read ours).
    pub timestamps: bool,
}

/// The sender's side of the self-test.
pub struct Sender<B: Backend> {
    port: Option<Port<B>>,
    address: PortAddress<B>,
    rx: RxQueue<B>,
    tx: TxQueue<B>,
    pool: Mempool,
    modulus: u8,
    /// The last segment carries our FIN (false: as a netcat that never shuts its side).
    fin: bool,
    me: End,
    peer: End,
    state: State,
    total: u64,
    iss: u32,
    /// Stream offsets: oldest unacknowledged, next to send, highest sent.
    una: u64,
    nxt: u64,
    high: u64,
    mss: usize,
    wnd: u64,
    shift: u8,
    tsecr: u32,
    /// The receiver's next sequence number (what our ACK field says).
    peer_next: u32,
    dupacks: u32,
    /// In recovery until `una` passes this.
    recover: u64,
    last_progress: Instant,
    fin_acked_at: Option<Instant>,
    epoch: Instant,
    got: Vec<Mbuf>,
    out: Vec<Mbuf>,
    frame: Vec<u8>,
    payload: Vec<u8>,
    counts: SenderCounts,
}

impl<B: Backend> Sender<B> {
    /// Brings `backend` up, serves `ip` on its port and prepares `total` stream bytes of the
    /// pattern with modulus `modulus` for `peer_ip:peer_port`, ending with a FIN when `fin`.
    ///
    /// # Errors
    ///
    /// A bring-up, port or steering step failed.
    pub fn open(
        backend: B,
        ip: Ipv4Addr,
        peer_ip: Ipv4Addr,
        peer_port: u16,
        total: u64,
        modulus: u8,
        fin: bool,
    ) -> Result<Self, String> {
        let name = backend.name();
        let dev = Device::bring_up(backend, Options::default())
            .map_err(|e| format!("{name}: bring-up failed: {e}"))?;
        let mac = dev.info().mac;
        let Started {
            mut port,
            queues: Queues { mut tx, mut rx },
        } = Port::start(
            dev,
            PortConfig {
                rx_queues: 2,
                tx_queues: 2,
                // A whole congestion window fits the send ring.
                ring_size: 2 * CWND_SEGMENTS,
                pool_buffers: 2048,
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
                dst_addr: Some(IpAddr::V4(ip)),
                src_addr: None,
                dst_port: Some(SOURCE_PORT),
                src_port: None,
            },
            acks.rqn(),
        )
        .map_err(|e| format!("{name}: steering the replies: {e}"))?;
        let address = PortAddress::serve(&mut port, Queues { tx, rx }, ip)?;
        let now = Instant::now();
        Ok(Self {
            pool: port.pool().clone(),
            port: Some(port),
            address,
            rx: acks,
            tx: data_tx,
            modulus,
            fin,
            me: End {
                mac,
                ip,
                port: SOURCE_PORT,
            },
            peer: End {
                mac: [0; 6],
                ip: peer_ip,
                port: peer_port,
            },
            state: State::Resolving,
            total,
            iss: 0xffff_f000,
            una: 0,
            nxt: 0,
            high: 0,
            mss: 536,
            wnd: 0,
            shift: 0,
            tsecr: 0,
            peer_next: 0,
            dupacks: 0,
            recover: 0,
            last_progress: now,
            fin_acked_at: None,
            epoch: now,
            got: Vec::with_capacity(BURST),
            out: Vec::with_capacity(CWND_SEGMENTS as usize),
            frame: Vec::with_capacity(2048),
            payload: vec![0; 65536],
            counts: SenderCounts::default(),
        })
    }

    /// One turn at `now`: ARP served and the receiver resolved, replies read, segments sent.
    ///
    /// # Errors
    ///
    /// A queue failed, the receiver reset the connection, or its MAC went unresolved.
    pub fn turn(&mut self, now: Instant) -> Result<(), String> {
        self.address.turn(now)?;
        if self.state == State::Resolving {
            if let Some(mac) = self.address.mac_of(self.peer.ip, now)? {
                self.peer.mac = mac;
                self.state = State::SynSent;
                self.send_syn();
                self.last_progress = now;
            }
            return Ok(());
        }
        while self
            .rx
            .rx_burst(&mut self.got, BURST)
            .map_err(|e| format!("sender: receiving: {e}"))?
            > 0
        {
            let got = std::mem::take(&mut self.got);
            for m in &got {
                self.on_frame(m, now)?;
            }
            self.got = got;
            self.got.clear();
        }
        match self.state {
            State::SynSent if now.duration_since(self.last_progress) > RTO * 10 => {
                self.send_syn();
                self.last_progress = now;
            }
            State::Established => {
                if self.una < self.sent_end() && now.duration_since(self.last_progress) > RTO {
                    // Go back N: everything from the oldest unacknowledged byte.
                    self.counts.timeouts += 1;
                    self.nxt = self.una;
                    self.recover = self.high;
                    self.last_progress = now;
                    if self.wnd == 0 {
                        // A window probe: the window update may have been lost.
                        self.nxt = self.send_segment(self.una);
                    }
                }
                self.send_data();
            }
            State::FinAcked
                if self
                    .fin_acked_at
                    .is_some_and(|t| now.duration_since(t) > FIN_WAIT) =>
            {
                self.state = State::Done;
            }
            _ => {}
        }
        self.flush();
        Ok(())
    }

    /// True once every byte (and our FIN) was acknowledged and the receiver's FIN came (or did
    /// not within two seconds).
    pub fn done(&self) -> bool {
        self.state == State::Done
    }

    /// Stream bytes the receiver acknowledged.
    pub fn acked(&self) -> u64 {
        self.una.min(self.total)
    }

    /// What was counted.
    pub fn counts(&self) -> &SenderCounts {
        &self.counts
    }

    /// Closes the port.
    ///
    /// # Errors
    ///
    /// A destroy command failed.
    pub fn close(mut self) -> Result<(), String> {
        let port = self.port.take().ok_or("already closed")?;
        drop(self.rx);
        drop(self.tx);
        drop(self.address);
        port.close()
            .and_then(|d| d.teardown())
            .map_err(|e| format!("sender: close failed: {e}"))?;
        Ok(())
    }

    /// The stream offset just past the last byte and the FIN, if one is sent.
    fn sent_end(&self) -> u64 {
        self.total + u64::from(self.fin)
    }

    fn tsval(&self) -> u32 {
        self.epoch.elapsed().as_millis() as u32 + 1
    }

    fn seq(&self, offset: u64) -> u32 {
        self.iss.wrapping_add(1).wrapping_add(offset as u32)
    }

    fn send_syn(&mut self) {
        let f = Fields {
            seq: self.iss,
            ack: 0,
            flags: 0x02,
            window: 64240,
            tsval: self.tsval(),
            tsecr: 0,
        };
        self.queue(&f, 0);
    }

    fn on_frame(&mut self, m: &Mbuf, now: Instant) -> Result<(), String> {
        let mut buf = [0u8; 256];
        let n = m.read(0, &mut buf);
        let ok = m.flags.rx_ip_csum_good && m.flags.rx_l4_csum_good;
        let Ok(p) = parse_split(&buf[..n], None, ok) else {
            return Ok(());
        };
        if p.src != IpAddr::V4(self.peer.ip) || p.src_port != self.peer.port || !ok {
            return Ok(());
        }
        let s = p.segment;
        if s.flags.0 & 0x04 != 0 {
            return Err(format!(
                "sender: the receiver reset the connection after {} acknowledged bytes",
                self.acked()
            ));
        }
        if let Some((tsval, _)) = s.options.timestamp {
            self.tsecr = tsval;
        }
        let ack_off = u64::from(s.ack.wrapping_sub(self.iss.wrapping_add(1)));
        match self.state {
            State::SynSent if s.flags.0 & 0x12 == 0x12 && s.ack == self.iss.wrapping_add(1) => {
                // Within a 1500-byte MTU, less the timestamp option.
                self.mss = usize::from(s.options.mss.unwrap_or(536).clamp(64, 1460)) - 12;
                self.shift = s.options.window_scale.unwrap_or(0);
                self.counts.window_scaling = s.options.window_scale.is_some();
                self.counts.timestamps = s.options.timestamp.is_some();
                self.wnd = u64::from(s.window);
                self.state = State::Established;
                self.last_progress = now;
                // The ACK of the SYN-ACK (our sequence stays at ISS + 1).
                let f = self.fields(0, 0x10, s.seq.wrapping_add(1));
                self.queue(&f, 0);
                self.peer_next = s.seq.wrapping_add(1);
            }
            State::Established | State::FinAcked => {
                let wnd = u64::from(s.window) << self.shift;
                if s.flags.0 & 0x10 != 0 && ack_off <= self.sent_end() && ack_off > self.una {
                    self.una = ack_off;
                    self.dupacks = 0;
                    self.last_progress = now;
                    if self.nxt < self.una {
                        self.nxt = self.una;
                    }
                } else if s.flags.0 & 0x10 != 0 && ack_off == self.una && self.una < self.high {
                    self.dupacks += 1;
                    if self.dupacks == 3 && self.una >= self.recover {
                        self.counts.fast_retransmits += 1;
                        self.recover = self.high;
                        self.send_segment(self.una);
                    }
                }
                self.wnd = wnd;
                if self.una == self.sent_end() && self.state == State::Established {
                    self.state = State::FinAcked;
                    self.fin_acked_at = Some(now);
                }
                if s.flags.0 & 0x01 != 0 {
                    // The receiver's FIN: acknowledge it; the stream is done.
                    let f = self.fields(self.sent_end(), 0x10, s.seq.wrapping_add(1));
                    self.queue(&f, 0);
                    if self.state == State::FinAcked {
                        self.state = State::Done;
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn fields(&self, offset: u64, flags: u8, ack: u32) -> Fields {
        Fields {
            seq: self.seq(offset),
            ack,
            flags,
            window: 64240,
            tsval: self.tsval(),
            tsecr: self.tsecr,
        }
    }

    /// Sends new segments (or again, after going back) while the window and the fixed
    /// congestion window allow.
    fn send_data(&mut self) {
        let cwnd = u64::from(CWND_SEGMENTS) * self.mss as u64;
        while self.nxt < self.sent_end() {
            let in_flight = self.nxt - self.una;
            let room = self.wnd.min(cwnd).saturating_sub(in_flight);
            let len = (self.total.saturating_sub(self.nxt) as usize).min(self.mss);
            if (len as u64) > room {
                break;
            }
            if self.out.len() >= CWND_SEGMENTS as usize {
                break;
            }
            self.nxt = self.send_segment(self.nxt);
        }
    }

    /// Sends the segment at stream offset `at` (with the FIN when it reaches the end);
    /// returns the offset past it.
    fn send_segment(&mut self, at: u64) -> u64 {
        let len = (self.total.saturating_sub(at) as usize).min(self.mss);
        let end = at + len as u64;
        let fin = self.fin && end == self.total;
        let flags = 0x18 | u8::from(fin);
        pattern::fill(self.modulus, at, &mut self.payload[..len]);
        let f = self.fields(at, flags, self.peer_next);
        self.queue(&f, len);
        self.counts.segments += 1;
        if at < self.high {
            self.counts.retransmitted += 1;
        }
        let past = end + u64::from(fin);
        self.high = self.high.max(past);
        past
    }

    /// Builds the frame for `f` with the first `len` bytes of `self.payload` and queues it.
    fn queue(&mut self, f: &Fields, len: usize) {
        frame::write(
            &self.me,
            &self.peer,
            f,
            1460,
            7,
            &self.payload[..len],
            &mut self.frame,
        );
        if let Some(mut m) = self.pool.alloc() {
            if m.set_data(&self.frame).is_ok() {
                self.out.push(m);
            }
        }
    }

    fn flush(&mut self) {
        for _ in 0..64 {
            if self.out.is_empty() {
                return;
            }
            self.tx.tx_burst(&mut self.out);
        }
        // What the ring would not take is lost as on a wire; the timers send it again.
        self.out.clear();
    }
}
