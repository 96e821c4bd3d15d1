//! The engine of `cxdirect-testpmd`: forwarding modes over one or two ports, a traffic
//! generator whose packets carry a flow id, a sequence number and a pattern, and a verifier that
//! checks every received packet for order, content and duplicates.

use cxdirect::{Backend, Mbuf, Mempool, Port, Queues, Recovery, RxQueue, TxQueue};

/// Bytes of generated packet headers: Ethernet, IPv4, UDP.
pub const HEADER_LEN: usize = 42;
/// Marks a generated payload.
pub const MAGIC: [u8; 4] = *b"cxdt";
/// Smallest packet the generator builds (headers plus the verification stamp).
pub const MIN_LEN: usize = HEADER_LEN + 10;

/// What a port does with packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForwardMode {
    /// Forward received packets unchanged to the other port.
    Io,
    /// Only send generated packets.
    TxOnly,
    /// Only receive.
    RxOnly,
    /// Forward with source and destination MAC swapped.
    MacSwap,
    /// Send generated packets over many flows (UDP source ports).
    FlowGen,
}

impl std::str::FromStr for ForwardMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "io" => Ok(Self::Io),
            "txonly" => Ok(Self::TxOnly),
            "rxonly" => Ok(Self::RxOnly),
            "macswap" => Ok(Self::MacSwap),
            "flowgen" => Ok(Self::FlowGen),
            other => Err(format!(
                "unknown forward mode `{other}`: use io, txonly, rxonly, macswap or flowgen"
            )),
        }
    }
}

/// Builds generated packets: flows `0..flows`, sizes cycling through `sizes`.
pub struct Generator {
    sizes: Vec<usize>,
    flows: u16,
    next_seq: Vec<u32>,
    turn: usize,
    frame: Vec<u8>,
    dst_port_base: Option<u16>,
}

impl Generator {
    /// A generator of packets of `sizes` bytes (each at least [`MIN_LEN`]) over `flows` flows.
    pub fn new(sizes: Vec<usize>, flows: u16) -> Result<Self, String> {
        if sizes.is_empty() || sizes.iter().any(|&s| s < MIN_LEN) {
            return Err(format!(
                "--txpkts: every size must be at least {MIN_LEN} bytes"
            ));
        }
        let flows = flows.max(1);
        Ok(Self {
            sizes,
            flows,
            next_seq: vec![0; usize::from(flows)],
            turn: 0,
            frame: Vec::with_capacity(16 * 1024),
            dst_port_base: None,
        })
    }

    /// Sends flow `f` to UDP destination port `base + f` (instead of port 9), so a port's
    /// per-UDP-port steering can put each flow on its own queue.
    pub fn with_dst_port_base(mut self, base: u16) -> Self {
        self.dst_port_base = Some(base);
        self
    }

    /// Packets generated so far.
    pub fn generated(&self) -> u64 {
        self.next_seq.iter().map(|&s| u64::from(s)).sum()
    }

    /// Fills `m` with the next packet.
    pub fn fill(&mut self, m: &mut Mbuf) -> Result<(), cxdirect::DriverError> {
        let len = self.sizes[self.turn % self.sizes.len()];
        let flow = (self.turn % usize::from(self.flows)) as u16;
        self.turn = self.turn.wrapping_add(1);
        let seq = self.next_seq[usize::from(flow)];
        let dport = self
            .dst_port_base
            .map_or(DISCARD_PORT, |b| b.wrapping_add(flow));
        build_to(&mut self.frame, len, flow, seq, dport);
        m.set_data(&self.frame)?;
        m.flags.tx_ip_csum = false;
        m.flags.tx_l4_csum = false;
        self.next_seq[usize::from(flow)] = seq.wrapping_add(1);
        Ok(())
    }
}

/// The pattern byte at payload offset `i` of packet `seq` of `flow`.
fn pattern(flow: u16, seq: u32, i: usize) -> u8 {
    (seq as u8)
        .wrapping_mul(31)
        .wrapping_add(flow as u8)
        .wrapping_add(i as u8)
}

/// UDP destination port of generated packets unless told otherwise (discard).
const DISCARD_PORT: u16 = 9;

/// Writes a generated packet of `len` bytes into `out`.
pub fn build(out: &mut Vec<u8>, len: usize, flow: u16, seq: u32) {
    build_to(out, len, flow, seq, DISCARD_PORT);
}

/// Writes a generated packet of `len` bytes to UDP destination port `dport` into `out`.
pub fn build_to(out: &mut Vec<u8>, len: usize, flow: u16, seq: u32, dport: u16) {
    out.clear();
    out.resize(len, 0);
    out[0..6].copy_from_slice(&[0x02, 0xcd, 0, 0, 0, 0x02]);
    out[6..12].copy_from_slice(&[0x02, 0xcd, 0, 0, 0, 0x01]);
    out[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip_len = (len - 14) as u16;
    out[14] = 0x45;
    out[16..18].copy_from_slice(&ip_len.to_be_bytes());
    out[22] = 64;
    out[23] = 17;
    out[26..30].copy_from_slice(&[198, 18, 0, 1]);
    out[30..34].copy_from_slice(&[198, 18, 0, 2]);
    out[34..36].copy_from_slice(&(10_000u16.wrapping_add(flow.wrapping_mul(7919))).to_be_bytes());
    out[36..38].copy_from_slice(&dport.to_be_bytes());
    out[38..40].copy_from_slice(&(ip_len - 20).to_be_bytes());
    let payload = &mut out[HEADER_LEN..];
    payload[0..4].copy_from_slice(&MAGIC);
    payload[4..6].copy_from_slice(&flow.to_be_bytes());
    payload[6..10].copy_from_slice(&seq.to_be_bytes());
    for (i, b) in payload[10..].iter_mut().enumerate() {
        *b = pattern(flow, seq, i);
    }
    // IPv4 header checksum; UDP checksum 0 (none), valid for IPv4.
    let mut sum = 0u32;
    for chunk in out[14..34].chunks(2) {
        sum += u32::from(u16::from_be_bytes([chunk[0], chunk[1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    out[24..26].copy_from_slice(&(!(sum as u16)).to_be_bytes());
}

/// Checks received packets: per-flow order, content and duplicates.
#[derive(Debug, Default)]
pub struct Verifier {
    expected: Vec<u32>,
    /// Packets that passed.
    pub good: u64,
    /// Packets whose content did not match.
    pub corrupt: u64,
    /// Packets seen again (a sequence number already passed).
    pub duplicate: u64,
    /// Packets missing before one that arrived (a gap in a flow).
    pub gaps: u64,
    buf: Vec<u8>,
}

impl Verifier {
    /// Checks one packet; returns its flow when the content was intact.
    pub fn check(&mut self, m: &Mbuf) -> Option<u16> {
        let len = m.len();
        self.buf.resize(len, 0);
        m.read(0, &mut self.buf);
        if len < MIN_LEN || self.buf[HEADER_LEN..HEADER_LEN + 4] != MAGIC {
            self.corrupt += 1;
            return None;
        }
        let p = &self.buf[HEADER_LEN..];
        let flow = u16::from_be_bytes([p[4], p[5]]);
        let seq = u32::from_be_bytes([p[6], p[7], p[8], p[9]]);
        if p[10..]
            .iter()
            .enumerate()
            .any(|(i, &b)| b != pattern(flow, seq, i))
        {
            self.corrupt += 1;
            return None;
        }
        let f = usize::from(flow);
        if self.expected.len() <= f {
            self.expected.resize(f + 1, 0);
        }
        let want = self.expected[f];
        if seq < want {
            self.duplicate += 1;
            return Some(flow);
        }
        self.gaps += u64::from(seq - want);
        self.expected[f] = seq + 1;
        self.good += 1;
        Some(flow)
    }
}

/// Swaps the source and destination MAC addresses in place.
pub fn mac_swap(m: &mut Mbuf) {
    let mut macs = [0u8; 12];
    if m.read(0, &mut macs) == 12 {
        let mut swapped = [0u8; 12];
        swapped[..6].copy_from_slice(&macs[6..]);
        swapped[6..].copy_from_slice(&macs[..6]);
        let _ = m.write(0, &swapped);
    }
}

/// Fills `batch` with up to `burst` generated packets from `pool`; returns how many it made.
pub fn generate(
    generator: &mut Generator,
    pool: &Mempool,
    batch: &mut Vec<Mbuf>,
    burst: usize,
    limit: Option<u64>,
) -> usize {
    let mut made = 0;
    while batch.len() < burst {
        if limit.is_some_and(|l| generator.generated() >= l) {
            break;
        }
        let Some(mut m) = pool.alloc() else { break };
        if generator.fill(&mut m).is_err() {
            break;
        }
        batch.push(m);
        made += 1;
    }
    made
}

/// Receives from every queue of a port into `out`.
pub fn receive_all<B: Backend>(rx: &mut [RxQueue<B>], out: &mut Vec<Mbuf>, burst: usize) -> usize {
    rx.iter_mut()
        .map(|q| q.rx_burst(out, burst).expect(VEC_TAKES_ANY_POOL))
        .sum()
}

/// Why receiving into a `Vec<Mbuf>` cannot fail: only a `PacketBurst` is bound to one pool.
pub const VEC_TAKES_ANY_POOL: &str = "a Vec<Mbuf> takes packets of any pool";

/// Sends as much of `batch` as the queues take, spreading over them in turn.
pub fn send_some<B: Backend>(
    tx: &mut [TxQueue<B>],
    batch: &mut Vec<Mbuf>,
    turn: &mut usize,
) -> usize {
    if tx.is_empty() {
        return 0;
    }
    let q = *turn % tx.len();
    *turn = turn.wrapping_add(1);
    tx[q].tx_burst(batch)
}

/// Recovers every queue of `port` that stopped (an error completion, one the driver refused, or
/// a CQ the device reported in error); returns what each recovery did (empty, without
/// allocating, when none had stopped).
pub fn recover_stopped<B: Backend>(
    port: &mut Port<B>,
    queues: &mut Queues<B>,
) -> Result<Vec<Recovery>, cxdirect::DriverError> {
    let mut done = Vec::new();
    // A failed CQ stops its queue without an error completion: only the event tells.
    for cqn in port.failed_cqs() {
        if let Some(q) = queues.tx.iter_mut().find(|q| q.cqn() == cqn) {
            done.push(port.recover_tx(q)?);
        } else if let Some(q) = queues.rx.iter_mut().find(|q| q.cqn() == cqn) {
            done.push(port.recover_rx(q)?);
        }
    }
    for q in queues.tx.iter_mut().filter(|q| q.in_error()) {
        done.push(port.recover_tx(q)?);
    }
    for q in queues.rx.iter_mut().filter(|q| q.in_error()) {
        done.push(port.recover_rx(q)?);
    }
    Ok(done)
}
