//! The engine of `cxdirect-testpmd`: forwarding modes over one or two ports, a traffic
//! generator whose packets carry a flow id, a sequence number and a pattern, and a verifier that
//! checks every received packet's content and tells duplicates from packets that arrived late.

use cxdirect::{Backend, Mbuf, Mempool, Port, Queues, Recovery, TxQueue};

/// Bytes of generated packet headers: Ethernet, IPv4, UDP.
pub const HEADER_LEN: usize = 42;
/// Marks a generated payload.
pub const MAGIC: [u8; 4] = *b"cxdt";
/// Smallest packet the generator builds (headers plus the verification stamp).
pub const MIN_LEN: usize = HEADER_LEN + 10;

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
    buf: Vec<u8>,
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
