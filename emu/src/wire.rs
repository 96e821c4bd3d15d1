//! Ethernet wires between model ports.
//!
//! A [`Wire`] carries whole Ethernet frames (destination MAC first, no FCS) as bytes between
//! ports identified by [`PortId`]. Each port owns a bounded FIFO of received frames. Like a real
//! cable, a wire never pushes back on the sender: when the receiving FIFO is full the frame is
//! dropped and counted, and `transmit` still succeeds.
//!
//! Two shapes exist: [`Wire::loopback`] (one port that receives its own frames, like a loopback
//! plug) and [`Wire::pair`] (ports [`PortId::A`] and [`PortId::B`] cabled back to back).
//!
//! Frame buffers are recycled per port, so once a wire has warmed up, transmit and receive copy
//! bytes without allocating. Locks are per port and held only for a copy and a queue operation; a
//! pcap tap ([`Wire::set_pcap`]) has its own lock, which is not touched while no tap is set.
//!
//! A wire is perfect unless [`WireConfig::impairments`] asks otherwise: then frames are dropped,
//! duplicated, reordered, corrupted or delayed, reproducibly from a seed (see [`Impairments`]).
//! A perfect wire pays one branch per frame for the feature.

use std::collections::VecDeque;
use std::fmt;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::pcap::{PcapError, PcapWriter};

mod impair;

use impair::Impairer;
pub use impair::{ImpairmentCounters, Impairments};

/// Length of an Ethernet II header (two MAC addresses and the EtherType), in bytes.
pub const ETHERNET_HEADER_LEN: usize = 14;

/// Length of one 802.1Q VLAN tag, in bytes.
pub const VLAN_TAG_LEN: usize = 4;

/// Largest payload (bytes after the Ethernet header and VLAN tags) a wire carries: 16 KiB, above
/// the ConnectX-6 Dx's largest MTU (9978 bytes), so no frame the device can legally send is
/// refused by the wire.
pub const MAX_PAYLOAD_LEN: usize = 16 * 1024;

/// Shortest frame a wire accepts, in bytes: a bare Ethernet header. Frames are not padded to the
/// 60-byte Ethernet minimum, so the receiver sees exactly what the sender put on the wire.
pub const MIN_FRAME_LEN: usize = ETHERNET_HEADER_LEN;

/// Longest frame a wire accepts, in bytes: [`MAX_PAYLOAD_LEN`] plus an Ethernet header and two
/// VLAN tags (802.1ad QinQ), 16 406 bytes.
pub const MAX_FRAME_LEN: usize = MAX_PAYLOAD_LEN + ETHERNET_HEADER_LEN + 2 * VLAN_TAG_LEN;

/// Receive FIFO depth used when none is configured, in frames per port.
pub const DEFAULT_FIFO_CAPACITY: usize = 4096;

/// Capacity given to a freshly allocated frame buffer, in bytes: a standard 1500-byte-MTU frame
/// fits, so most buffers never regrow; larger frames grow a buffer once and recycling keeps it.
const INITIAL_BUFFER_CAPACITY: usize = 2048;

/// A port of a wire. Ports are numbered from 0; a loopback wire has port 0 only, a pair has ports
/// 0 ([`PortId::A`]) and 1 ([`PortId::B`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PortId(pub u16);

impl PortId {
    /// The only port of a loopback wire.
    pub const LOOPBACK: PortId = PortId(0);
    /// First port of a pair.
    pub const A: PortId = PortId(0);
    /// Second port of a pair.
    pub const B: PortId = PortId(1);

    /// The port number as an index (0-based).
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for PortId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Errors from wire operations.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The port number is not one of this wire's ports.
    #[error("port {port} is not on this wire, which has ports 0..{ports}")]
    UnknownPort {
        /// The port asked for.
        port: PortId,
        /// Number of ports the wire has.
        ports: usize,
    },
    /// The frame is shorter than an Ethernet header; it was not sent.
    #[error(
        "frame of {len} bytes from port {port} is shorter than the {MIN_FRAME_LEN}-byte \
         Ethernet header; not sent"
    )]
    FrameTooShort {
        /// The sending port.
        port: PortId,
        /// The frame's length, in bytes.
        len: usize,
    },
    /// The frame is longer than [`MAX_FRAME_LEN`]; it was not sent.
    #[error(
        "frame of {len} bytes from port {port} exceeds the wire's {MAX_FRAME_LEN}-byte limit; \
         not sent"
    )]
    FrameTooLong {
        /// The sending port.
        port: PortId,
        /// The frame's length, in bytes.
        len: usize,
    },
    /// A FIFO capacity of zero frames was configured.
    #[error("a wire's receive FIFO must hold at least one frame")]
    InvalidFifoCapacity,
    /// An impairment is out of range: a probability outside 0.0..=1.0 (or NaN), a reordering
    /// without a window, or holds whose sum overflows.
    #[error("wire impairment `{field}` is out of range")]
    InvalidImpairment {
        /// The [`Impairments`] field at fault.
        field: &'static str,
    },
    /// The pcap tap failed to write or flush; it has been removed and the wire runs on without it.
    #[error("pcap tap failed and was removed: {0}")]
    Pcap(#[from] PcapError),
}

/// Configuration of a new wire.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WireConfig {
    /// Receive FIFO depth per port, in frames (at least 1). Frames arriving at a full FIFO are
    /// dropped and counted.
    pub fifo_capacity: usize,
    /// What the wire does wrong on purpose, in every direction; [`Impairments::NONE`] (the
    /// default) for a perfect wire.
    pub impairments: Impairments,
}

impl Default for WireConfig {
    fn default() -> Self {
        Self {
            fifo_capacity: DEFAULT_FIFO_CAPACITY,
            impairments: Impairments::NONE,
        }
    }
}

/// A snapshot of one port's counters. Each field is exact, but while traffic flows the fields may
/// be read at slightly different instants.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortCounters {
    /// Frames this port put on the wire (accepted by [`Wire::transmit`]).
    pub tx_frames: u64,
    /// Bytes in those frames.
    pub tx_bytes: u64,
    /// Frames that arrived at this port and were queued in its FIFO (whether or not taken yet).
    pub rx_frames: u64,
    /// Bytes in those frames.
    pub rx_bytes: u64,
    /// Frames that arrived at this port while its FIFO was full, and were discarded.
    pub dropped: u64,
    /// Bytes in those frames.
    pub dropped_bytes: u64,
    /// Frames this port tried to send that were refused for their size (never on the wire).
    pub rejected: u64,
}

#[derive(Debug, Default)]
struct AtomicCounters {
    /// Frames (and bytes) sent on an impaired wire, counted before the impairments; on a
    /// perfect wire the receiving port's FIFO counts them ([`QueueCounts::peer_tx_frames`]).
    tx_frames: AtomicU64,
    tx_bytes: AtomicU64,
    rejected: AtomicU64,
}

impl AtomicCounters {
    fn add(counter: &AtomicU64, n: u64) {
        // Counters are statistics, not synchronisation: the FIFO's mutex orders the frames.
        counter.fetch_add(n, Ordering::Relaxed);
    }

    fn snapshot(&self) -> PortCounters {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        PortCounters {
            tx_frames: get(&self.tx_frames),
            tx_bytes: get(&self.tx_bytes),
            rejected: get(&self.rejected),
            ..PortCounters::default()
        }
    }
}

/// A port's counts kept under its FIFO's lock, which every frame arriving there takes anyway
/// (atomic additions per frame cost the model more than the lock they would spare).
#[derive(Debug, Default, Clone, Copy)]
struct QueueCounts {
    /// Frames (and bytes) that arrived and were queued.
    rx_frames: u64,
    rx_bytes: u64,
    /// Frames (and bytes) that arrived while the FIFO was full.
    dropped: u64,
    dropped_bytes: u64,
    /// Frames (and bytes) the peer port put on a perfect wire towards this one: the peer's
    /// `tx_frames` and `tx_bytes` (an impaired wire counts them at the sender, before the
    /// impairments).
    peer_tx_frames: u64,
    peer_tx_bytes: u64,
}

#[derive(Debug)]
struct PortQueue {
    frames: VecDeque<Vec<u8>>,
    counts: QueueCounts,
    /// Empty buffers ready for the next arriving frame.
    free: Vec<Vec<u8>>,
    /// Bumped by [`Wire::wake`] so sleepers can tell a deliberate wake-up from a spurious one.
    wake_epoch: u64,
    /// Threads sleeping in [`Wire::wait_for_frames`] on this port.
    sleepers: usize,
}

impl PortQueue {
    /// Keeps `buf` for reuse unless the pool is already as large as the FIFO can ever need.
    fn recycle(&mut self, mut buf: Vec<u8>, limit: usize) {
        if buf.capacity() > 0 && self.free.len() < limit {
            buf.clear();
            self.free.push(buf);
        }
    }
}

/// Where a delivered frame is counted in its sender's `tx_frames`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TxCount {
    /// At the sender, already (an impaired wire counts before the impairments).
    AtSender,
    /// By the receiving FIFO, under its lock, as the frame joins it.
    ByReceiver,
}

#[derive(Debug)]
struct Port {
    /// Index of the port that receives what this port sends.
    peer: usize,
    queue: Mutex<PortQueue>,
    arrived: Condvar,
    counters: AtomicCounters,
    /// The impairments of the frames this port sends; `None` on a perfect wire.
    impairer: Option<Box<Impairer>>,
}

impl Port {
    fn new(peer: usize, fifo_capacity: usize, impairer: Option<Box<Impairer>>) -> Self {
        Self {
            peer,
            queue: Mutex::new(PortQueue {
                // Preallocate the usual depth, not a huge configured one: the deque grows if
                // ever needed, and a large capacity must not cost memory up front.
                frames: VecDeque::with_capacity(fifo_capacity.min(DEFAULT_FIFO_CAPACITY)),
                counts: QueueCounts::default(),
                free: Vec::new(),
                wake_epoch: 0,
                sleepers: 0,
            }),
            arrived: Condvar::new(),
            counters: AtomicCounters::default(),
            impairer,
        }
    }

    fn lock(&self) -> MutexGuard<'_, PortQueue> {
        // Every critical section leaves the queue consistent (single push/pop/swap), so a panic
        // elsewhere while holding the lock cannot have broken it: keep going.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    // Inlined into `transmit` as it was before the impaired path became a second caller.
    #[inline(always)]
    fn deliver(&self, frame: &[u8], fifo_capacity: usize, tx: TxCount) {
        let len = frame.len() as u64;
        let mut queue = self.lock();
        if tx == TxCount::ByReceiver {
            queue.counts.peer_tx_frames += 1;
            queue.counts.peer_tx_bytes += len;
        }
        if queue.frames.len() >= fifo_capacity {
            queue.counts.dropped += 1;
            queue.counts.dropped_bytes += len;
            return;
        }
        let mut buf = queue
            .free
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(frame.len().max(INITIAL_BUFFER_CAPACITY)));
        buf.extend_from_slice(frame);
        queue.frames.push_back(buf);
        // Counted under the lock so a receiver can never see more pending frames than rx_frames.
        queue.counts.rx_frames += 1;
        queue.counts.rx_bytes += len;
        // A wake-up is a system call: only when someone sleeps in `wait_for_frames`.
        let sleepers = queue.sleepers > 0;
        drop(queue);
        if sleepers {
            self.arrived.notify_all();
        }
    }
}

/// Where a wire's tap sends frames: a pcap writer of any output type, behind one object type so
/// the wire itself is not generic.
trait FrameSink: Send {
    fn record(&mut self, timestamp: Duration, frame: &[u8]) -> Result<(), PcapError>;
    fn flush(&mut self) -> Result<(), PcapError>;
}

impl<W: Write + Send> FrameSink for PcapWriter<W> {
    fn record(&mut self, timestamp: Duration, frame: &[u8]) -> Result<(), PcapError> {
        self.write_frame(timestamp, frame)
    }

    fn flush(&mut self) -> Result<(), PcapError> {
        PcapWriter::flush(self)
    }
}

#[derive(Default)]
struct Tap {
    sink: Option<Box<dyn FrameSink>>,
    /// The error that made the tap remove itself, kept until someone asks.
    failure: Option<PcapError>,
}

/// An Ethernet wire connecting model ports. `Send + Sync`: share it through an `Arc` between the
/// threads that play each port.
pub struct Wire {
    ports: Box<[Port]>,
    fifo_capacity: usize,
    created: Instant,
    /// Wall-clock time at creation, since the UNIX epoch; capture timestamps count from here on
    /// the monotonic clock so they never run backwards.
    created_wall: Duration,
    /// Lets `transmit` skip the tap's lock entirely while no tap is set.
    tap_enabled: AtomicBool,
    tap: Mutex<Tap>,
}

impl fmt::Debug for Wire {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Wire")
            .field("ports", &self.ports.len())
            .field("fifo_capacity", &self.fifo_capacity)
            .field("pcap_tap", &self.tap_enabled.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Wire {
    /// A one-port wire ([`PortId::LOOPBACK`]) whose port receives its own frames, with the
    /// default FIFO depth of [`DEFAULT_FIFO_CAPACITY`] frames.
    pub fn loopback() -> Wire {
        Self::build(&[0], WireConfig::default())
    }

    /// Two ports, [`PortId::A`] and [`PortId::B`], back to back: A's frames arrive at B and B's
    /// at A. Default FIFO depth of [`DEFAULT_FIFO_CAPACITY`] frames.
    pub fn pair() -> Wire {
        Self::build(&[1, 0], WireConfig::default())
    }

    /// Like [`Wire::loopback`] with the given configuration.
    pub fn loopback_with(config: WireConfig) -> Result<Wire, WireError> {
        Self::check(&config)?;
        Ok(Self::build(&[0], config))
    }

    /// Like [`Wire::pair`] with the given configuration.
    pub fn pair_with(config: WireConfig) -> Result<Wire, WireError> {
        Self::check(&config)?;
        Ok(Self::build(&[1, 0], config))
    }

    fn check(config: &WireConfig) -> Result<(), WireError> {
        if config.fifo_capacity == 0 {
            return Err(WireError::InvalidFifoCapacity);
        }
        config
            .impairments
            .validate()
            .map_err(|field| WireError::InvalidImpairment { field })
    }

    fn build(peers: &[usize], config: WireConfig) -> Wire {
        let WireConfig {
            fifo_capacity,
            impairments,
        } = config;
        let created = Instant::now();
        // A clock set before 1970 only makes capture dates wrong, not the wire: start from zero.
        let created_wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        Wire {
            ports: peers
                .iter()
                .enumerate()
                .map(|(index, &peer)| {
                    let impairer = (!impairments.is_none())
                        .then(|| Box::new(Impairer::new(impairments, index)));
                    Port::new(peer, fifo_capacity, impairer)
                })
                .collect(),
            fifo_capacity,
            created,
            created_wall,
            tap_enabled: AtomicBool::new(false),
            tap: Mutex::new(Tap::default()),
        }
    }

    /// Number of ports on this wire (1 for a loopback, 2 for a pair).
    pub fn port_count(&self) -> usize {
        self.ports.len()
    }

    /// The wire's ports, in order.
    pub fn ports(&self) -> impl Iterator<Item = PortId> {
        // Port counts are 1 or 2, far below u16::MAX, so the conversion never fails.
        (0..self.ports.len()).filter_map(|i| u16::try_from(i).ok().map(PortId))
    }

    /// Receive FIFO depth per port, in frames.
    pub fn fifo_capacity(&self) -> usize {
        self.fifo_capacity
    }

    /// The port that receives what `port` sends (`port` itself on a loopback wire).
    pub fn peer(&self, port: PortId) -> Result<PortId, WireError> {
        let peer = self.port(port)?.peer;
        u16::try_from(peer)
            .map(PortId)
            .map_err(|_| self.unknown(port))
    }

    fn port(&self, port: PortId) -> Result<&Port, WireError> {
        self.ports
            .get(port.index())
            .ok_or_else(|| self.unknown(port))
    }

    fn unknown(&self, port: PortId) -> WireError {
        WireError::UnknownPort {
            port,
            ports: self.ports.len(),
        }
    }

    /// Puts `frame` (an Ethernet frame, destination MAC first, no FCS, [`MIN_FRAME_LEN`] to
    /// [`MAX_FRAME_LEN`] bytes) on the wire from port `from`.
    ///
    /// The bytes are copied; the caller keeps its buffer. The frame is queued at the peer port,
    /// or dropped and counted there if its FIFO is full: a wire does not block, so a drop is
    /// still `Ok`. Frames of a bad size are refused with an error and counted as `rejected` on
    /// the sending port.
    ///
    /// A pcap tap, if set, records what arrives at the far end of the cable: every frame that
    /// reaches the peer port, whether its FIFO then takes it or drops it. On an impaired wire the
    /// tap sits after the impairments: it shows frames as they crossed (corrupted, duplicated,
    /// reordered, when released from a hold) and never shows frames the impairments dropped.
    pub fn transmit(&self, from: PortId, frame: &[u8]) -> Result<(), WireError> {
        let sender = self.port(from)?;
        let len = frame.len();
        if len < MIN_FRAME_LEN {
            AtomicCounters::add(&sender.counters.rejected, 1);
            return Err(WireError::FrameTooShort { port: from, len });
        }
        if len > MAX_FRAME_LEN {
            AtomicCounters::add(&sender.counters.rejected, 1);
            return Err(WireError::FrameTooLong { port: from, len });
        }
        let receiver = self
            .ports
            .get(sender.peer)
            .ok_or_else(|| self.unknown(from))?;
        if let Some(impairer) = &sender.impairer {
            AtomicCounters::add(&sender.counters.tx_frames, 1);
            AtomicCounters::add(&sender.counters.tx_bytes, len as u64);
            self.transmit_impaired(impairer, receiver, frame);
            return Ok(());
        }
        if self.tap_enabled.load(Ordering::Acquire) {
            self.record(frame);
        }
        // The sender's counts go with the frame, under the receiving FIFO's lock.
        receiver.deliver(frame, self.fifo_capacity, TxCount::ByReceiver);
        Ok(())
    }

    /// Takes the oldest frame queued at `port` into `buf`, returning `Ok(false)` if none is
    /// queued.
    ///
    /// `buf`'s previous contents are discarded. Its allocation is swapped with the wire's frame
    /// buffer rather than copied into, and the wire keeps the old allocation for a later frame,
    /// so passing the same `Vec` every time allocates nothing.
    pub fn receive(&self, port: PortId, buf: &mut Vec<u8>) -> Result<bool, WireError> {
        Ok(self.receive_next(port, buf)?.is_some())
    }

    /// As [`Wire::receive`], returning how many frames are still queued after the one taken
    /// (`Ok(None)` if none was queued), so a receiver knows a burst has ended without asking
    /// again.
    pub fn receive_next(
        &self,
        port: PortId,
        buf: &mut Vec<u8>,
    ) -> Result<Option<usize>, WireError> {
        let p = self.port(port)?;
        let mut queue = p.lock();
        let Some(mut frame) = queue.frames.pop_front() else {
            return Ok(None);
        };
        std::mem::swap(buf, &mut frame);
        queue.recycle(frame, self.fifo_capacity);
        Ok(Some(queue.frames.len()))
    }

    /// Takes the oldest frame queued at `port`, copying it into `out`, and returns the frame's
    /// full length in bytes, or `Ok(None)` if none is queued.
    ///
    /// If the frame is longer than `out`, only `out.len()` bytes are copied and the rest is lost;
    /// the returned length exceeds `out.len()` so the caller can tell (as with a receive buffer
    /// too small for the packet on a real NIC).
    pub fn receive_into(&self, port: PortId, out: &mut [u8]) -> Result<Option<usize>, WireError> {
        let p = self.port(port)?;
        let mut queue = p.lock();
        let Some(frame) = queue.frames.pop_front() else {
            return Ok(None);
        };
        let len = frame.len();
        let n = len.min(out.len());
        if let (Some(dst), Some(src)) = (out.get_mut(..n), frame.get(..n)) {
            dst.copy_from_slice(src);
        }
        queue.recycle(frame, self.fifo_capacity);
        Ok(Some(len))
    }

    /// Number of frames queued at `port`, waiting to be received.
    pub fn pending(&self, port: PortId) -> Result<usize, WireError> {
        Ok(self.port(port)?.lock().frames.len())
    }

    /// Sleeps until at least one frame is queued at `port`, `timeout` passes, or [`Wire::wake`]
    /// is called for the port. Returns whether frames are queued; returns at once if some
    /// already are. A `timeout` too large to represent waits without limit.
    pub fn wait_for_frames(&self, port: PortId, timeout: Duration) -> Result<bool, WireError> {
        let p = self.port(port)?;
        let mut queue = p.lock();
        let epoch = queue.wake_epoch;
        let deadline = Instant::now().checked_add(timeout);
        queue.sleepers += 1;
        // Condvars wake spuriously; loop until there is a reason to return.
        while queue.frames.is_empty() && queue.wake_epoch == epoch {
            queue = match deadline {
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    p.arrived
                        .wait_timeout(queue, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
                None => p
                    .arrived
                    .wait(queue)
                    .unwrap_or_else(PoisonError::into_inner),
            };
        }
        queue.sleepers -= 1;
        Ok(!queue.frames.is_empty())
    }

    /// Wakes every thread sleeping in [`Wire::wait_for_frames`] on `port` even though no frame
    /// arrived, e.g. so a device thread can notice it is being stopped.
    pub fn wake(&self, port: PortId) -> Result<(), WireError> {
        let p = self.port(port)?;
        let mut queue = p.lock();
        queue.wake_epoch = queue.wake_epoch.wrapping_add(1);
        drop(queue);
        p.arrived.notify_all();
        Ok(())
    }

    /// A snapshot of `port`'s counters.
    pub fn counters(&self, port: PortId) -> Result<PortCounters, WireError> {
        let p = self.port(port)?;
        let mut counters = p.counters.snapshot();
        let own = p.lock().counts;
        counters.rx_frames += own.rx_frames;
        counters.rx_bytes += own.rx_bytes;
        counters.dropped += own.dropped;
        counters.dropped_bytes += own.dropped_bytes;
        if let Some(peer) = self.ports.get(p.peer) {
            let sent = peer.lock().counts;
            counters.tx_frames += sent.peer_tx_frames;
            counters.tx_bytes += sent.peer_tx_bytes;
        }
        Ok(counters)
    }

    /// Records every frame that crosses the wire from now on into `writer`, replacing any tap
    /// already set. Safe to call while other threads transmit.
    ///
    /// The tap sits at the far end of the cable: on an impaired wire it records frames after
    /// the impairments, as they reached the peer port (see [`Wire::transmit`]).
    ///
    /// Timestamps are wall-clock times since the UNIX epoch: the wall clock when the wire was
    /// created plus the monotonic time elapsed since, so they never run backwards. Frames from
    /// all ports go to the one file, in the order they were put on the wire.
    ///
    /// The previous tap, if any, is flushed and dropped; an error from that flush, or from an
    /// earlier tap that failed and removed itself, is returned, with the new tap installed
    /// regardless.
    pub fn set_pcap<W: Write + Send + 'static>(
        &self,
        writer: PcapWriter<W>,
    ) -> Result<(), WireError> {
        let mut tap = self.lock_tap();
        let old = tap.sink.replace(Box::new(writer));
        let failure = tap.failure.take();
        self.tap_enabled.store(true, Ordering::Release);
        drop(tap);
        Self::finish(old, failure)
    }

    /// Flushes the pcap tap's buffered records to its output. Returns the error that made an
    /// earlier tap remove itself, if any (reported once).
    pub fn flush_pcap(&self) -> Result<(), WireError> {
        let mut tap = self.lock_tap();
        if let Some(failure) = tap.failure.take() {
            return Err(failure.into());
        }
        let Some(sink) = tap.sink.as_mut() else {
            return Ok(());
        };
        if let Err(e) = sink.flush() {
            tap.sink = None;
            self.tap_enabled.store(false, Ordering::Release);
            return Err(e.into());
        }
        Ok(())
    }

    /// Stops recording: flushes and drops the pcap tap. Returns whether a tap was set; an error
    /// from the final flush, or from an earlier tap failure, is returned instead.
    pub fn clear_pcap(&self) -> Result<bool, WireError> {
        let mut tap = self.lock_tap();
        let old = tap.sink.take();
        let failure = tap.failure.take();
        self.tap_enabled.store(false, Ordering::Release);
        drop(tap);
        let had_tap = old.is_some();
        Self::finish(old, failure)?;
        Ok(had_tap)
    }

    /// Whether a pcap tap is currently recording.
    pub fn has_pcap(&self) -> bool {
        self.tap_enabled.load(Ordering::Acquire)
    }

    fn finish(
        old: Option<Box<dyn FrameSink>>,
        failure: Option<PcapError>,
    ) -> Result<(), WireError> {
        if let Some(failure) = failure {
            return Err(failure.into());
        }
        if let Some(mut old) = old {
            old.flush()?;
        }
        Ok(())
    }

    fn lock_tap(&self) -> MutexGuard<'_, Tap> {
        // The tap's state is an Option swap at worst; a poisoned lock leaves it usable.
        self.tap.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Writes one frame to the tap. A capture failure must not disturb the traffic, so the tap
    /// removes itself and keeps the error for `flush_pcap`/`clear_pcap`/`set_pcap` to report.
    fn record(&self, frame: &[u8]) {
        let mut tap = self.lock_tap();
        // Timestamp under the lock, so file order and timestamp order agree across threads.
        let timestamp = self.created_wall.saturating_add(self.created.elapsed());
        let Some(sink) = tap.sink.as_mut() else {
            return;
        };
        if let Err(e) = sink.record(timestamp, frame) {
            tap.sink = None;
            tap.failure = Some(e);
            self.tap_enabled.store(false, Ordering::Release);
        }
    }
}
