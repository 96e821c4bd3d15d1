//! The engine of `cxdirect-testpmd`: forwarding modes over one or two ports, a traffic
//! generator whose packets carry a flow id, a sequence number and a pattern, and a verifier that
//! checks every received packet's content and tells duplicates from packets that arrived late.
//!
//! With TCP segmentation offload the generator builds TCP/IPv4 packets larger than the MTU
//! and the device cuts them into segments; every segment names its packet by itself (the TCP
//! acknowledgment number carries the flow and the upper half of the packet's sequence number,
//! the TCP sequence number its lower half and the segment's offset in the payload), so the
//! verifier checks each segment's bytes where they belong and counts a packet once all of its
//! segments arrived in order.

use cxdirect::{Backend, Mbuf, Mempool, Port, Queues, Recovery, TxQueue};

/// Bytes of generated packet headers: Ethernet, IPv4, UDP.
pub const HEADER_LEN: usize = 42;
/// Marks a generated payload.
pub const MAGIC: [u8; 4] = *b"cxdt";
/// Bytes of the verification stamp at the start of a generated payload: [`MAGIC`], the flow
/// (2 bytes) and the sequence number (4 bytes).
const STAMP_LEN: usize = 10;
/// Smallest packet the generator builds (headers plus the verification stamp).
pub const MIN_LEN: usize = HEADER_LEN + STAMP_LEN;
/// Bytes of generated TCP packet headers (with TCP segmentation offload): Ethernet, IPv4, TCP.
pub const TCP_HEADER_LEN: usize = 54;
/// Smallest TCP packet the generator builds.
pub const MIN_TCP_LEN: usize = TCP_HEADER_LEN + STAMP_LEN;
/// TCP destination port of generated TCP packets.
const TCP_PORT: u16 = 5201;
const TCP_ACK: u8 = 0x10;
const TCP_PSH: u8 = 0x08;

/// What a port does with packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ForwardMode {
    /// Forward received packets unchanged to the other port.
    Io,
    /// Only send generated packets.
    #[value(name = "txonly")]
    TxOnly,
    /// Only receive.
    #[value(name = "rxonly")]
    RxOnly,
    /// Forward with source and destination MAC swapped.
    #[value(name = "macswap")]
    MacSwap,
    /// Send generated packets over many flows (UDP source ports).
    #[value(name = "flowgen")]
    FlowGen,
}

/// Builds generated packets: flows `0..flows`, sizes cycling through `sizes`.
pub struct Generator {
    sizes: Vec<usize>,
    flows: u16,
    next_seq: Vec<u32>,
    turn: usize,
    frame: Vec<u8>,
    dst_port_base: Option<u16>,
    /// TCP segmentation offload at this MSS: TCP packets instead of UDP.
    tso_mss: Option<u16>,
    /// Frames the generated packets make on the wire (one each without TSO).
    wire_frames: u64,
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
            tso_mss: None,
            wire_frames: 0,
        })
    }

    /// Generates TCP/IPv4 packets (each size at least [`MIN_TCP_LEN`]) handed over for TCP
    /// segmentation offload at `mss` bytes (1..): each leaves the port as
    /// [`segments`]`(len, mss)` frames.
    pub fn with_tso(mut self, mss: u16) -> Result<Self, String> {
        if mss == 0 {
            return Err("--tso: the MSS must be at least 1 byte".into());
        }
        if self.sizes.iter().any(|&s| s < MIN_TCP_LEN) {
            return Err(format!(
                "--txpkts: with --tso every size must be at least {MIN_TCP_LEN} bytes"
            ));
        }
        if self
            .sizes
            .iter()
            .any(|&s| s - TCP_HEADER_LEN > usize::from(u16::MAX))
        {
            return Err(format!(
                "--txpkts: with --tso no payload may exceed {} bytes",
                u16::MAX
            ));
        }
        self.tso_mss = Some(mss);
        Ok(self)
    }

    /// Frames the packets generated so far put on the wire: [`Generator::generated`] without
    /// TSO, their segments with it.
    pub fn wire_frames(&self) -> u64 {
        self.wire_frames
    }

    /// Sends flow `f` to UDP destination port `base + f` (instead of port 9), so a port's
    /// per-UDP-port steering can put each flow on its own queue.
    pub fn with_dst_port_base(mut self, base: u16) -> Self {
        self.dst_port_base = Some(base);
        self
    }

    /// The flow of the packet [`Generator::fill`] builds next.
    pub fn next_flow(&self) -> u16 {
        (self.turn % usize::from(self.flows)) as u16
    }

    /// Packets generated so far.
    pub fn generated(&self) -> u64 {
        self.next_seq.iter().map(|&s| u64::from(s)).sum()
    }

    /// Fills `m` with the next packet.
    pub fn fill(&mut self, m: &mut Mbuf) -> Result<(), cxdirect::DriverError> {
        let len = self.sizes[self.turn % self.sizes.len()];
        let flow = self.next_flow();
        self.turn = self.turn.wrapping_add(1);
        let seq = self.next_seq[usize::from(flow)];
        let dport = self
            .dst_port_base
            .map_or(DISCARD_PORT, |b| b.wrapping_add(flow));
        match self.tso_mss {
            Some(mss) => {
                build_tcp(&mut self.frame, len, flow, seq);
                m.set_data(&self.frame)?;
                // The device fills in every segment's checksums.
                m.flags.tx_ip_csum = true;
                m.flags.tx_l4_csum = true;
                m.flags.tx_tso_mss = Some(mss);
                self.wire_frames += segments(len, mss);
            }
            None => {
                build_to(&mut self.frame, len, flow, seq, dport);
                m.set_data(&self.frame)?;
                m.flags.tx_ip_csum = false;
                m.flags.tx_l4_csum = false;
                m.flags.tx_tso_mss = None;
                self.wire_frames += 1;
            }
        }
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
    stamp(&mut out[HEADER_LEN..], flow, seq);
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

/// Frames a generated TCP packet of `len` bytes makes with TCP segmentation offload at `mss`.
pub fn segments(len: usize, mss: u16) -> u64 {
    len.saturating_sub(TCP_HEADER_LEN)
        .div_ceil(usize::from(mss.max(1)))
        .max(1) as u64
}

/// Writes a generated TCP/IPv4 packet of `len` bytes (at least [`MIN_TCP_LEN`], payload at
/// most 65,535 bytes) into `out`, checksums and lengths left for the device: the TCP
/// acknowledgment number is `flow << 16` plus the upper half of `seq`, the TCP sequence number
/// the lower half of `seq` shifted up 16 bits (so a segment's sequence number adds its payload
/// offset in the lower half), flags ACK and PSH.
pub fn build_tcp(out: &mut Vec<u8>, len: usize, flow: u16, seq: u32) {
    out.clear();
    out.resize(len, 0);
    out[0..6].copy_from_slice(&[0x02, 0xcd, 0, 0, 0, 0x02]);
    out[6..12].copy_from_slice(&[0x02, 0xcd, 0, 0, 0, 0x01]);
    out[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    out[14] = 0x45;
    let ip_len = (len - 14).min(usize::from(u16::MAX)) as u16;
    out[16..18].copy_from_slice(&ip_len.to_be_bytes());
    out[18..20].copy_from_slice(&(seq as u16).to_be_bytes());
    out[20] = 0x40; // don't fragment
    out[22] = 64;
    out[23] = 6;
    out[26..30].copy_from_slice(&[198, 18, 0, 1]);
    out[30..34].copy_from_slice(&[198, 18, 0, 2]);
    out[34..36].copy_from_slice(&(10_000u16.wrapping_add(flow.wrapping_mul(7919))).to_be_bytes());
    out[36..38].copy_from_slice(&TCP_PORT.to_be_bytes());
    out[38..42].copy_from_slice(&((seq & 0xffff) << 16).to_be_bytes());
    out[42..46].copy_from_slice(&(u32::from(flow) << 16 | seq >> 16).to_be_bytes());
    out[46] = 5 << 4;
    out[47] = TCP_ACK | TCP_PSH;
    out[48..50].copy_from_slice(&u16::MAX.to_be_bytes());
    stamp(&mut out[TCP_HEADER_LEN..], flow, seq);
}

/// Writes the verification stamp and pattern of packet `seq` of `flow` over `payload`.
fn stamp(payload: &mut [u8], flow: u16, seq: u32) {
    payload[0..4].copy_from_slice(&MAGIC);
    payload[4..6].copy_from_slice(&flow.to_be_bytes());
    payload[6..10].copy_from_slice(&seq.to_be_bytes());
    for (i, b) in payload[STAMP_LEN..].iter_mut().enumerate() {
        *b = pattern(flow, seq, i);
    }
}

/// The byte at `offset` of the payload of packet `seq` of `flow`.
fn payload_byte(flow: u16, seq: u32, offset: usize) -> u8 {
    match offset {
        0..4 => MAGIC[offset],
        4..6 => flow.to_be_bytes()[offset - 4],
        6..STAMP_LEN => seq.to_be_bytes()[offset - 6],
        _ => pattern(flow, seq, offset - STAMP_LEN),
    }
}

/// Sequence numbers of a flow the [`Verifier`] remembers below the newest one seen: a packet
/// that far behind is still told apart as a late first copy or a duplicate.
pub const REORDER_WINDOW: u64 = 4096;
const WINDOW_WORDS: usize = (REORDER_WINDOW / 64) as usize;

/// What one packet was to its flow, as [`Verifier::record`] judged it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// The next sequence number, or one further on after `skipped` missing ones (a gap).
    New {
        /// Sequence numbers jumped over, now counted in [`Verifier::gaps`].
        skipped: u64,
    },
    /// Behind the newest, within [`REORDER_WINDOW`], not seen before: it fills a gap.
    Late,
    /// Within [`REORDER_WINDOW`] behind the newest and already seen: it arrived twice.
    Duplicate,
    /// More than [`REORDER_WINDOW`] behind the newest (or before the flow's first sequence
    /// number): whether it is a very late first copy or a duplicate cannot be told any more.
    OutOfWindow,
}

/// One flow's place in the sequence: the newest sequence number seen and which of the
/// [`REORDER_WINDOW`] before it arrived.
#[derive(Debug, Clone)]
struct FlowWindow {
    /// One past the newest sequence number seen, unwrapped to 64 bits (0: none seen yet).
    next: u64,
    /// Bit `s % REORDER_WINDOW` is set when sequence number `s`, one of the
    /// [`REORDER_WINDOW`] up to `next - 1`, arrived.
    seen: [u64; WINDOW_WORDS],
}

impl Default for FlowWindow {
    fn default() -> Self {
        Self {
            next: 0,
            seen: [0; WINDOW_WORDS],
        }
    }
}

impl FlowWindow {
    fn bit(seq: u64) -> (usize, u64) {
        let at = seq % REORDER_WINDOW;
        ((at / 64) as usize, 1 << (at % 64))
    }

    fn is_seen(&self, seq: u64) -> bool {
        let (word, mask) = Self::bit(seq);
        self.seen[word] & mask != 0
    }

    fn mark(&mut self, seq: u64, seen: bool) {
        let (word, mask) = Self::bit(seq);
        if seen {
            self.seen[word] |= mask;
        } else {
            self.seen[word] &= !mask;
        }
    }

    /// Records `seq` (32 bits on the wire, taken as the nearest 64-bit number to `next`).
    fn record(&mut self, seq: u32) -> Arrival {
        let delta = i64::from(seq.wrapping_sub(self.next as u32) as i32);
        let Some(seq) = self.next.checked_add_signed(delta) else {
            return Arrival::OutOfWindow;
        };
        if seq >= self.next {
            let skipped = seq - self.next;
            if skipped >= REORDER_WINDOW {
                self.seen = [0; WINDOW_WORDS];
            } else {
                // The slots the window moves onto still hold sequence numbers a window ago.
                for s in self.next..seq {
                    self.mark(s, false);
                }
            }
            self.mark(seq, true);
            self.next = seq + 1;
            return Arrival::New { skipped };
        }
        if self.next - seq > REORDER_WINDOW {
            return Arrival::OutOfWindow;
        }
        if self.is_seen(seq) {
            return Arrival::Duplicate;
        }
        self.mark(seq, true);
        Arrival::Late
    }
}

/// Checks received packets: content, duplicates and gaps per flow. Packets of a flow may
/// arrive out of order (on different queues, or after a recovery): a late one within
/// [`REORDER_WINDOW`] of the newest fills its gap and is no duplicate.
#[derive(Debug, Default)]
pub struct Verifier {
    flows: Vec<FlowWindow>,
    /// Intact packets that arrived for the first time (in order, ahead or late).
    pub good: u64,
    /// Packets whose content did not match.
    pub corrupt: u64,
    /// Packets that arrived again: their sequence number, within [`REORDER_WINDOW`] of the
    /// newest of their flow, had arrived before.
    pub duplicate: u64,
    /// Sequence numbers jumped over and not (yet) filled by a late packet: at the end, the
    /// packets missing before the newest of each flow.
    pub gaps: u64,
    /// Late packets that filled a gap (counted in `good` too).
    pub reordered: u64,
    /// Packets more than [`REORDER_WINDOW`] behind the newest of their flow: neither `good`
    /// nor `duplicate`, since which they are can no longer be told; `gaps` stays as it was.
    pub out_of_window: u64,
    /// TCP segmentation offload: per flow, the packet whose segments are arriving.
    partial: Vec<Option<Partial>>,
    buf: Vec<u8>,
}

/// A TCP packet of a flow whose segments are arriving: which one, the payload offset the next
/// segment must start at, and whether every segment so far was there and intact.
#[derive(Debug, Clone, Copy)]
struct Partial {
    seq: u32,
    next: usize,
    intact: bool,
}

impl Verifier {
    /// Checks one packet's content, then records its sequence number; returns its flow when
    /// the content was intact.
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
        self.record(flow, seq);
        Some(flow)
    }

    /// Checks one segment of a generated TCP packet sent with TCP segmentation offload (see
    /// [`build_tcp`]): its headers, and its payload bytes against what the packet holds at the
    /// segment's offset. A packet counts (as [`Verifier::check`] counts one) when its last
    /// segment (PSH) arrives and every segment before it arrived intact and in order; returns
    /// its flow then.
    pub fn check_segment(&mut self, m: &Mbuf) -> Option<u16> {
        let mut buf = std::mem::take(&mut self.buf);
        buf.resize(m.len(), 0);
        m.read(0, &mut buf);
        let flow = self.check_segment_bytes(&buf);
        self.buf = buf;
        flow
    }

    /// As [`Verifier::check_segment`], for a segment's bytes `b`.
    pub fn check_segment_bytes(&mut self, b: &[u8]) -> Option<u16> {
        let len = b.len();
        if len < TCP_HEADER_LEN
            || b[12..14] != 0x0800u16.to_be_bytes()
            || b[14] != 0x45
            || b[23] != 6
            || usize::from(u16::from_be_bytes([b[16], b[17]])) != len - 14
        {
            self.corrupt += 1;
            return None;
        }
        let tcp_seq = u32::from_be_bytes([b[38], b[39], b[40], b[41]]);
        let ack = u32::from_be_bytes([b[42], b[43], b[44], b[45]]);
        let flow = (ack >> 16) as u16;
        let seq = (ack & 0xffff) << 16 | tcp_seq >> 16;
        let offset = (tcp_seq & 0xffff) as usize;
        let last = b[47] & TCP_PSH != 0;
        let intact = b[TCP_HEADER_LEN..]
            .iter()
            .enumerate()
            .all(|(i, &byte)| byte == payload_byte(flow, seq, offset + i));
        let payload = len - TCP_HEADER_LEN;
        let f = usize::from(flow);
        if self.partial.len() <= f {
            self.partial.resize(f + 1, None);
        }
        let continues = matches!(self.partial[f], Some(p) if p.seq == seq && p.next == offset);
        let state = match self.partial[f] {
            Some(p) if continues => Partial {
                seq,
                next: offset + payload,
                intact: p.intact && intact,
            },
            // A new packet, or one whose earlier segments went missing.
            _ => Partial {
                seq,
                next: offset + payload,
                intact: offset == 0 && intact,
            },
        };
        if !intact {
            self.corrupt += 1;
        }
        if !last {
            self.partial[f] = Some(state);
            return None;
        }
        self.partial[f] = None;
        if !state.intact {
            return None;
        }
        self.record(flow, seq);
        Some(flow)
    }

    /// Records that packet `seq` of `flow` arrived intact, counts it, and says what it was.
    pub fn record(&mut self, flow: u16, seq: u32) -> Arrival {
        let f = usize::from(flow);
        if self.flows.len() <= f {
            self.flows.resize_with(f + 1, FlowWindow::default);
        }
        let arrival = self.flows[f].record(seq);
        match arrival {
            Arrival::New { skipped } => {
                self.gaps += skipped;
                self.good += 1;
            }
            Arrival::Late => {
                self.gaps -= 1;
                self.reordered += 1;
                self.good += 1;
            }
            Arrival::Duplicate => self.duplicate += 1,
            Arrival::OutOfWindow => self.out_of_window += 1,
        }
        arrival
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

/// Fills `batches` (one per send queue) with up to `burst` generated packets from `pool`,
/// each on the queue of its flow (flow `f` on queue `f % batches.len()`, as DPDK's testpmd
/// pins a flow to a queue), so a flow's packets leave in order; stops early when the next
/// flow's batch already holds `burst`. Returns how many it made.
pub fn generate_pinned(
    generator: &mut Generator,
    pool: &Mempool,
    batches: &mut [Vec<Mbuf>],
    burst: usize,
    limit: Option<u64>,
) -> usize {
    if batches.is_empty() {
        return 0;
    }
    let mut made = 0;
    while made < burst {
        if limit.is_some_and(|l| generator.generated() >= l) {
            break;
        }
        let batch = &mut batches[usize::from(generator.next_flow()) % batches.len()];
        if batch.len() >= burst {
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

/// Why receiving into a `Vec<Mbuf>` cannot fail: only a `PacketBurst` is bound to one pool.
pub const VEC_TAKES_ANY_POOL: &str = "a Vec<Mbuf> takes packets of any pool";

/// Sends as much of each queue's batch (`batches[q]` on `tx[q]`) as the queue takes; returns
/// how many packets left.
pub fn send_batches<B: Backend>(tx: &mut [TxQueue<B>], batches: &mut [Vec<Mbuf>]) -> usize {
    tx.iter_mut()
        .zip(batches.iter_mut())
        .filter(|(_, batch)| !batch.is_empty())
        .map(|(queue, batch)| queue.tx_burst(batch))
        .sum()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(v: &Verifier) -> (u64, u64, u64, u64, u64) {
        (v.good, v.duplicate, v.gaps, v.reordered, v.out_of_window)
    }

    #[test]
    fn in_order_packets_are_all_good() {
        let mut v = Verifier::default();
        for seq in 0..10_000 {
            assert_eq!(v.record(3, seq), Arrival::New { skipped: 0 });
        }
        assert_eq!(counts(&v), (10_000, 0, 0, 0, 0));
    }

    #[test]
    fn a_reorder_fills_its_gap_and_is_no_duplicate() {
        // Two queues' worth of one flow interleaved late: 0 1 4 5 2 3 6 7.
        let mut v = Verifier::default();
        for seq in [0, 1, 4, 5] {
            v.record(0, seq);
        }
        assert_eq!(v.gaps, 2, "2 and 3 are missing so far");
        assert_eq!(v.record(0, 2), Arrival::Late);
        assert_eq!(v.record(0, 3), Arrival::Late);
        for seq in [6, 7] {
            assert_eq!(v.record(0, seq), Arrival::New { skipped: 0 });
        }
        assert_eq!(counts(&v), (8, 0, 0, 2, 0));
    }

    #[test]
    fn flows_keep_their_own_windows() {
        let mut v = Verifier::default();
        v.record(0, 0);
        v.record(1, 5);
        assert_eq!(v.record(0, 1), Arrival::New { skipped: 0 });
        assert_eq!(v.record(1, 0), Arrival::Late);
        assert_eq!(counts(&v), (4, 0, 4, 1, 0), "flow 1 still misses 1..=4");
    }

    #[test]
    fn a_packet_that_arrives_twice_is_a_duplicate_in_order_or_late() {
        let mut v = Verifier::default();
        for seq in 0..100 {
            v.record(7, seq);
        }
        assert_eq!(v.record(7, 99), Arrival::Duplicate, "the newest again");
        assert_eq!(v.record(7, 50), Arrival::Duplicate, "an older one again");
        // A gap filled late, then the late packet once more.
        v.record(7, 102);
        assert_eq!(v.record(7, 100), Arrival::Late);
        assert_eq!(v.record(7, 100), Arrival::Duplicate);
        assert_eq!(counts(&v), (102, 3, 1, 1, 0), "101 is still missing");
    }

    #[test]
    fn the_window_reaches_back_exactly_its_length() {
        let mut v = Verifier::default();
        for seq in 0..10 {
            v.record(0, seq);
        }
        assert_eq!(v.record(0, 4100), Arrival::New { skipped: 4090 });
        // 4096..=4099 share their slots with 0..=3, which arrived: moving onto them cleared them.
        assert_eq!(v.record(0, 4097), Arrival::Late);
        // The newest is 4100: the window reaches back to 4100 + 1 - 4096 = 5.
        assert_eq!(
            v.record(0, 5),
            Arrival::Duplicate,
            "the oldest in the window"
        );
        assert_eq!(v.record(0, 4), Arrival::OutOfWindow, "one further back");
        assert_eq!(counts(&v), (12, 1, 4089, 1, 1));
        // A jump past a whole window forgets everything before it.
        assert_eq!(v.record(0, 8300), Arrival::New { skipped: 4199 });
        assert_eq!(v.record(0, 8196), Arrival::Late, "its slot held 4100, seen");
        assert_eq!(counts(&v), (14, 1, 8287, 2, 1));
    }

    #[test]
    fn a_packet_far_behind_the_window_is_reported_as_out_of_window() {
        let mut v = Verifier::default();
        for seq in 0..10_000 {
            v.record(1, seq);
        }
        let far = 10_000 - REORDER_WINDOW as u32 - 1;
        // Whether it is seen before (it is) can no longer be told: neither good nor duplicate.
        assert_eq!(v.record(1, far), Arrival::OutOfWindow);
        assert_eq!(v.record(1, 0), Arrival::OutOfWindow);
        // Before the flow's first packet: nothing to compare with either.
        let mut fresh = Verifier::default();
        fresh.record(2, 10);
        assert_eq!(fresh.record(2, u32::MAX), Arrival::OutOfWindow);
        assert_eq!(counts(&v), (10_000, 0, 0, 0, 2));
        assert_eq!(counts(&fresh), (1, 0, 10, 0, 1));
    }

    /// `packet` cut into segments of `mss` payload bytes as the device does it (lengths,
    /// sequence numbers, PSH only on the last).
    fn cut(packet: &[u8], mss: usize) -> Vec<Vec<u8>> {
        let payload = &packet[TCP_HEADER_LEN..];
        let chunks: Vec<&[u8]> = payload.chunks(mss).collect();
        let n = chunks.len();
        chunks
            .iter()
            .enumerate()
            .map(|(i, chunk)| {
                let mut s = packet[..TCP_HEADER_LEN].to_vec();
                s.extend_from_slice(chunk);
                let ip_len = (s.len() - 14) as u16;
                s[16..18].copy_from_slice(&ip_len.to_be_bytes());
                let seq = u32::from_be_bytes([s[38], s[39], s[40], s[41]]) + (i * mss) as u32;
                s[38..42].copy_from_slice(&seq.to_be_bytes());
                if i + 1 < n {
                    s[47] &= !TCP_PSH;
                }
                s
            })
            .collect()
    }

    #[test]
    fn tcp_segments_are_checked_where_they_belong_and_count_whole_packets() {
        let mut v = Verifier::default();
        // Flow 3 has reached sequence number 0x1fffe: its packets cross a 16-bit boundary.
        v.flows.resize_with(4, FlowWindow::default);
        v.flows[3].next = 0x0001_fffe;
        let mut packet = Vec::new();
        assert_eq!(segments(9000, 1460), 7);
        assert_eq!(segments(MIN_TCP_LEN, 1460), 1);
        for seq in [0x0001_fffe, 0x0001_ffff, 0x0002_0000] {
            build_tcp(&mut packet, 9000, 3, seq);
            let segs = cut(&packet, 1460);
            assert_eq!(segs.len() as u64, segments(9000, 1460));
            let flows: Vec<_> = segs.iter().map(|s| v.check_segment_bytes(s)).collect();
            assert!(
                flows[..6].iter().all(Option::is_none),
                "not done before the last"
            );
            assert_eq!(flows[6], Some(3), "the last completes it");
        }
        assert_eq!(counts(&v), (3, 0, 0, 0, 0));
        assert_eq!(v.corrupt, 0);

        // A segment lost in the middle: the packet does not count, the next one shows the gap.
        build_tcp(&mut packet, 5000, 3, 0x0002_0001);
        let segs = cut(&packet, 1460);
        for (i, s) in segs.iter().enumerate() {
            if i != 1 {
                assert_eq!(v.check_segment_bytes(s), None);
            }
        }
        build_tcp(&mut packet, 200, 3, 0x0002_0002);
        assert_eq!(cut(&packet, 1460), [packet.clone()], "one segment: itself");
        assert_eq!(v.check_segment_bytes(&packet), Some(3));
        assert_eq!(counts(&v), (4, 0, 1, 0, 0), "one packet missing");

        // A byte changed in a later segment: corrupt, and the packet does not count.
        build_tcp(&mut packet, 5000, 3, 0x0002_0003);
        let mut segs = cut(&packet, 1460);
        segs[2][TCP_HEADER_LEN + 100] ^= 1;
        let done: Vec<_> = segs.iter().map(|s| v.check_segment_bytes(s)).collect();
        assert!(done.iter().all(Option::is_none));
        assert_eq!(v.corrupt, 1, "the segment with the changed byte");
        // The same packet sent again, whole, counts.
        for s in &cut(&packet, 1460) {
            v.check_segment_bytes(s);
        }
        assert_eq!(counts(&v), (5, 0, 1, 0, 0));
    }

    #[test]
    fn sequence_numbers_wrap_at_32_bits() {
        let mut v = Verifier::default();
        v.flows.resize_with(1, FlowWindow::default);
        v.flows[0].next = u64::from(u32::MAX) - 1;
        assert_eq!(v.record(0, u32::MAX - 1), Arrival::New { skipped: 0 });
        assert_eq!(v.record(0, 1), Arrival::New { skipped: 2 });
        assert_eq!(v.record(0, u32::MAX), Arrival::Late);
        assert_eq!(v.record(0, 0), Arrival::Late);
        assert_eq!(v.record(0, 0), Arrival::Duplicate);
        assert_eq!(counts(&v), (4, 1, 0, 2, 0));
    }
}
