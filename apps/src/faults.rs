//! The fault matrix: each class of device or firmware fault injected into the emulated pair
//! under verified traffic (one sequenced flow from port A to port B), recovered from, and
//! accounted for. Used by `cxdirect-faults` and by the tests.
//!
//! Accounting, per class, from the driver's counters and the device's own:
//! - on the send side, frames the driver accepted that never reached the wire must each be
//!   counted by the driver as an error completion or a buffer flushed by recovery;
//! - on the receive side, frames that reached the wire but not the application must each be
//!   counted as dropped by the device (queue in error, without buffers, port down while the
//!   function was reset), completed in error, refused by the driver, drained by recovery, or
//!   completed by the device and discarded by a function reset before the driver took them;
//! - `lost_beyond_flushed` is whatever neither explains; `duplicates` and `corrupt` come from
//!   the verifier; `leaked` is buffers of either pool neither free, posted nor in flight once the
//!   run is over.
//!
//! The RDMA classes (`rdma`) run krping-style traffic over one RC queue pair on each function
//! instead, and account for messages rather than frames.

use crate::emulated::EmuBackend;
use crate::testpmd::{Generator, Verifier};
use cxdirect::{
    Device, DriverError, Mbuf, Mempool, Options, PoolRevocation, Port, PortConfig, PortRecovery,
    QueueStats, Recovery, RxQueue, SharedQueues, SharedRxConfig, SharedRxQueue, SharedRxRing,
    Started, TxQueue,
};
use cxdirect_dma::{export, DmaBuf, DmaBufMapping, DmaBufMode};
use cxdirect_emu::counters::CountersSnapshot;
use cxdirect_emu::{Device as Model, DmaQueue, EmuConfig, Fault};
use cxdirect_hw::cqe::CqeSyndrome;
use cxdirect_hw::init_seg::health_syndrome;
use cxdirect_hw::wq::RqState;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod arp;
mod cm;
mod rdma;

/// One class of injected fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultClass {
    /// Send completions in error, cycling through syndromes.
    TxErrorCqe,
    /// Receive completions in error, cycling through syndromes.
    RxErrorCqe,
    /// Send CQEs with a WQE counter the driver never posted.
    TxCorruptCqe,
    /// Receive CQEs with a wrong WQE counter, queue number, byte count or opcode.
    RxCorruptCqe,
    /// Send doorbells the device never sees.
    DroppedDoorbell,
    /// Commands the firmware never completes, or completes after the driver gave up, in turn.
    CommandTimeout,
    /// Command outputs with a damaged status or data.
    CorruptCommandOutput,
    /// Events of unknown types, and CQ events naming CQs the driver does not have.
    BogusEvent,
    /// A fatal health syndrome, on the sending and the receiving function in turn: the port is
    /// reset and its queues created again ([`Port::recover`]).
    HealthFatal,
    /// The health counter stops (hung firmware), on either function in turn.
    HealthStall,
    /// The function's registers read all-ones (fell off the bus), on either function in turn.
    NotResponding,
    /// A CQ overruns (the device finds it full), on the send CQ and the receive CQ in turn: the
    /// CQ goes to error, its queue stops without an error completion, and the driver learns
    /// of it from the CQ error event; the queue and its CQ are destroyed and created again.
    CqOverrun,
    /// A buffer access to an IOVA the IOMMU does not map, on the send queue (gather) and the
    /// receive queue (scatter) in turn: a local protection error completion, then queue
    /// recovery.
    DmaUnmapped,
    /// The exporter of the receive pool's dmabuf asks for it back under traffic: the driver
    /// stops the port's queues, flushes their buffers and revokes the memory; the application
    /// imports the buffer again and gives the port the new mapping.
    DmabufRevoked,
    /// Port b receives through a shared ring (RMP): receive completions in error on its queue,
    /// cycling through syndromes (the queue alone stops and is reset), alternating with the
    /// device breaking the ring itself (an SRQ catastrophic error: the ring and its queue go
    /// to error, and the ring is created again).
    SharedRingError,
    /// RDMA: frames of the RC transport lost on the wire (2%, seeded): sent again after the
    /// ACK timeout or a sequence NAK.
    RdmaFrameLoss,
    /// RDMA: frames delivered twice by the wire (3%): the responder acknowledges the repeat
    /// and delivers nothing twice.
    RdmaDuplicate,
    /// RDMA: frames held back behind up to three later ones (3%): the requester goes back (on
    /// the responder's sequence NAK, or its ACK timeout when nothing followed the held frame)
    /// and the late copy is dropped as a repeat.
    RdmaReorder,
    /// RDMA: one bit of a frame flipped on the wire (2%): the responder drops it on its
    /// invariant CRC and it is sent again.
    RdmaIcrcCorrupt,
    /// RDMA: a SEND finds no receive posted for a while: RNR NAKs, retried with a finite
    /// `rnr_retry`, then with retries without limit (7), until the receive comes.
    RdmaRnr,
    /// RDMA: the wire is cut until a request exhausts its `retry_count`: it completes with
    /// retry exceeded and the QP goes to error; both QPs are reset and connected again, and
    /// the iteration's messages sent again.
    RdmaRetryExceeded,
    /// RDMA: a QP fails with a WQ catastrophic error (the async QP fatal event) at its next
    /// doorbell: both QPs are reset and connected again, and the iteration's messages sent
    /// again.
    RdmaQpFatal,
    /// Connection manager: a REQ to a peer that never answers is sent again on the CM's
    /// timers, then fails with an error naming the address and port; the same client
    /// connects once the peer is reachable.
    CmUnreachable,
    /// Connection manager: an established connection's peer goes away, by a DREQ or silently
    /// (the client's DREQ unanswered); the client's queue pair is moved to error and every
    /// request it posted completes flushed; both reconnect through the CM.
    CmPeerVanishes,
    /// Addresses: past the neighbour table's locktime, the link carries spoofed ARP replies,
    /// gratuitous ARP and requests giving a resolved peer's address another MAC, claims to
    /// our own address, and garbage; the resolved entry keeps the peer's MAC.
    ArpSpoof,
}

impl FaultClass {
    /// Every class, in the order the matrix runs them: the device classes, then the RDMA ones.
    pub const ALL: [FaultClass; 25] = {
        assert!(Self::DEVICE.len() + Self::RDMA.len() == 25);
        let mut all = [FaultClass::TxErrorCqe; 25];
        let mut i = 0;
        while i < all.len() {
            all[i] = if i < Self::DEVICE.len() {
                Self::DEVICE[i]
            } else {
                Self::RDMA[i - Self::DEVICE.len()]
            };
            i += 1;
        }
        all
    };

    /// The device classes: faults of the NIC itself, its commands, events and memory.
    const DEVICE: [FaultClass; 15] = [
        FaultClass::TxErrorCqe,
        FaultClass::RxErrorCqe,
        FaultClass::TxCorruptCqe,
        FaultClass::RxCorruptCqe,
        FaultClass::DroppedDoorbell,
        FaultClass::CommandTimeout,
        FaultClass::CorruptCommandOutput,
        FaultClass::BogusEvent,
        FaultClass::HealthFatal,
        FaultClass::HealthStall,
        FaultClass::NotResponding,
        FaultClass::CqOverrun,
        FaultClass::DmaUnmapped,
        FaultClass::DmabufRevoked,
        FaultClass::SharedRingError,
    ];

    /// The RDMA classes: faults of the RC transport under krping-style traffic, then those
    /// of the connection manager ([`FaultClass::CM`]).
    pub const RDMA: [FaultClass; 10] = [
        FaultClass::RdmaFrameLoss,
        FaultClass::RdmaDuplicate,
        FaultClass::RdmaReorder,
        FaultClass::RdmaIcrcCorrupt,
        FaultClass::RdmaRnr,
        FaultClass::RdmaRetryExceeded,
        FaultClass::RdmaQpFatal,
        FaultClass::CmUnreachable,
        FaultClass::CmPeerVanishes,
        FaultClass::ArpSpoof,
    ];

    /// The classes of the connection manager and of addresses (among [`FaultClass::RDMA`]):
    /// peers unreachable or gone, on the emulated pair's QP1, and hostile ARP.
    pub const CM: [FaultClass; 3] = [
        FaultClass::CmUnreachable,
        FaultClass::CmPeerVanishes,
        FaultClass::ArpSpoof,
    ];

    /// Whether this is one of the [`FaultClass::RDMA`] classes.
    pub fn is_rdma(self) -> bool {
        Self::RDMA.contains(&self)
    }

    /// Name as printed.
    pub fn name(self) -> &'static str {
        match self {
            FaultClass::TxErrorCqe => "tx_error_cqe",
            FaultClass::RxErrorCqe => "rx_error_cqe",
            FaultClass::TxCorruptCqe => "tx_corrupt_cqe",
            FaultClass::RxCorruptCqe => "rx_corrupt_cqe",
            FaultClass::DroppedDoorbell => "dropped_doorbell",
            FaultClass::CommandTimeout => "command_timeout",
            FaultClass::CorruptCommandOutput => "corrupt_command_output",
            FaultClass::BogusEvent => "bogus_event",
            FaultClass::HealthFatal => "health_fatal",
            FaultClass::HealthStall => "health_stall",
            FaultClass::NotResponding => "not_responding",
            FaultClass::CqOverrun => "cq_overrun",
            FaultClass::DmaUnmapped => "dma_unmapped",
            FaultClass::DmabufRevoked => "dmabuf_revoked",
            FaultClass::SharedRingError => "shared_ring_error",
            FaultClass::RdmaFrameLoss => "rdma_frame_loss",
            FaultClass::RdmaDuplicate => "rdma_duplicate",
            FaultClass::RdmaReorder => "rdma_reorder",
            FaultClass::RdmaIcrcCorrupt => "rdma_icrc_corrupt",
            FaultClass::RdmaRnr => "rdma_rnr",
            FaultClass::RdmaRetryExceeded => "rdma_retry_exceeded",
            FaultClass::RdmaQpFatal => "rdma_qp_fatal",
            FaultClass::CmUnreachable => "cm_unreachable",
            FaultClass::CmPeerVanishes => "cm_peer_vanishes",
            FaultClass::ArpSpoof => "arp_spoof",
        }
    }
}

/// Fault classes by name on a command line (`--class`).
impl clap::ValueEnum for FaultClass {
    fn value_variants<'a>() -> &'a [Self] {
        &Self::ALL
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.name()))
    }
}

/// What one class's run found.
#[derive(Debug, Clone, Default)]
pub struct ClassReport {
    /// Class name.
    pub name: &'static str,
    /// Faults the model took.
    pub injections: u64,
    /// Faults after which traffic (or the command interface) worked again.
    pub recoveries: u64,
    /// Time from detecting each fault to the queue or interface working again, in µs.
    pub recover_us: Vec<f64>,
    /// Frames the driver accepted for sending (RDMA classes: messages posted, SEND, READ or
    /// WRITE).
    pub sent: u64,
    /// Frames the verifier saw intact and in order (RDMA: messages whose delivery was checked).
    pub received: u64,
    /// Frames lost and accounted for by a counter (flushed, errored, dropped, drained); RDMA:
    /// messages whose request completed in error or flushed, sent again by the application.
    pub accounted: u64,
    /// Frames lost that no counter explains (must be 0).
    pub lost_beyond_flushed: u64,
    /// Frames delivered twice (must be 0).
    pub duplicates: u64,
    /// Frames delivered with wrong content (must be 0).
    pub corrupt: u64,
    /// Buffers neither free, posted nor in flight at the end (must be 0).
    pub leaked: u64,
    /// What the device side shows of the class's faults, where it has a counter of its own:
    /// CQ overruns (`cq_overrun`), buffer accesses the IOMMU refused (`dma_unmapped`), memory
    /// keys destroyed by revocation (`dmabuf_revoked`); for the RDMA classes, retransmissions
    /// (`rdma_frame_loss`, `rdma_reorder`), repeated PSNs received (`rdma_duplicate`), packets dropped on a bad ICRC (`rdma_icrc_corrupt`), RNR NAKs sent
    /// (`rdma_rnr`), completions in error other than flushes (`rdma_retry_exceeded`), QP fatal
    /// events seen (`rdma_qp_fatal`); for the connection manager's, REQs sent before giving
    /// up (`cm_unreachable`) and work requests completed flushed (`cm_peer_vanishes`); ARP
    /// packets ignored or refused (`arp_spoof`); 0 for the other classes.
    pub evidence: u64,
}

impl ClassReport {
    /// Median and 99th percentile of the recovery times, in µs (0 when none).
    pub fn recover_p50_p99(&self) -> (f64, f64) {
        let mut v = self.recover_us.clone();
        if v.is_empty() {
            return (0.0, 0.0);
        }
        v.sort_by(f64::total_cmp);
        let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
        (at(0.5), at(0.99))
    }
}

type Side = Started<EmuBackend>;

/// Frames sent between injections.
const FRAMES_PER_ROUND: u64 = 256;
const BURST: usize = 32;
const FRAME_LEN: usize = 128;
/// Command timeout on the faulted side (the command-timeout class waits this long each time).
const CMD_TIMEOUT: Duration = Duration::from_millis(100);
/// A health counter unchanged this long marks the function failed.
const HEALTH_STALL: Duration = Duration::from_millis(20);

/// What the queues a port recovery replaced had counted, so that the accounting spans them.
#[derive(Debug, Default)]
struct Retired {
    tx_packets: u64,
    /// Send errors, plus the frames still in flight when the function was reset.
    tx_errors: u64,
    rx_errors: u64,
    rx_bad_cqes: u64,
    rx_cqes: u64,
    /// Receive completions the device wrote that the reset discarded before the driver took
    /// them.
    rx_lost_to_reset: u64,
}

struct Rig {
    a: Side,
    b: Side,
    model_a: Model,
    model_b: Model,
    generator: Generator,
    verifier: Verifier,
    rx_drained: u64,
    /// Check both functions' health as traffic runs, and recover a failed port.
    watch_health: bool,
    port_recoveries: Vec<PortRecovery>,
    retired: Retired,
    a_start: CountersSnapshot,
    b_start: CountersSnapshot,
    /// The dmabuf port b's pool lives in, when the rig runs one.
    dmabuf: Option<Arc<DmaBuf>>,
    /// Pools port b gave up (their memory was revoked): every buffer must come back to them.
    retired_pools: Vec<Mempool>,
    /// Revocations done since the last look, and the time each took to the queues stopped.
    revocations: Vec<PoolRevocation>,
    /// Port b's shared ring and its queue, when the rig receives through one.
    shared: Option<SharedQueues<EmuBackend>>,
}

/// Bytes of the dmabuf behind port b's pool in the `dmabuf_revoked` class (1,024 buffers).
const DMABUF_BYTES: u64 = 1024 * 2048;

fn start(model: &Model, name: &str) -> Result<Side, String> {
    start_with(model, name, None, false)
}

fn start_with(
    model: &Model,
    name: &str,
    pool_memory: Option<&Arc<DmaBuf>>,
    shared: bool,
) -> Result<Side, String> {
    let options = Options {
        cmd_timeout: CMD_TIMEOUT,
        health_stall: HEALTH_STALL,
        ..Options::default()
    };
    let dev = Device::bring_up(EmuBackend::new(model.clone(), name), options)
        .map_err(|e| format!("bring-up of {name}: {e}"))?;
    let pool_memory = pool_memory
        .map(|buf| map_revocable(&dev, buf))
        .transpose()?;
    let config = PortConfig {
        ring_size: 256,
        pool_memory,
        shared_rx: shared.then_some(SharedRxConfig {
            ring_size: 256,
            limit: 0,
        }),
        ..PortConfig::default()
    };
    Port::start(dev, config).map_err(|e| format!("port {name}: {e}"))
}

/// The whole of `buf` mapped for the device, revocable.
fn map_revocable(
    dev: &Device<EmuBackend>,
    buf: &Arc<DmaBuf>,
) -> Result<Arc<DmaBufMapping>, String> {
    let (iommu, iovas) = dev.dma();
    buf.map(iommu, &iovas, 0, buf.size(), DmaBufMode::Revocable)
        .map(Arc::new)
        .map_err(|e| format!("mapping the dmabuf: {e}"))
}

/// A dmabuf for a pool: a udmabuf where the host can export one, else a memfd (the import,
/// mapping, key and revocation paths are the same).
fn pool_dmabuf() -> Result<Arc<DmaBuf>, String> {
    match export::udmabuf(DMABUF_BYTES) {
        Ok(u) => DmaBuf::import_with_backing(u.dmabuf, u.memfd, 0),
        Err(_) => DmaBuf::from_memfd(
            export::memfd("cxdirect-faults", DMABUF_BYTES).map_err(|e| e.to_string())?,
        ),
    }
    .map_err(|e| format!("importing the pool's dmabuf: {e}"))
}

impl Rig {
    /// The emulated pair; with `dmabuf`, port b's pool is carved from a revocable dmabuf; with
    /// `shared`, port b receives through a shared ring.
    fn new(dmabuf: bool, shared: bool) -> Result<Self, String> {
        let (model_a, model_b) = Model::pair(EmuConfig::default(), EmuConfig::default());
        let buf = dmabuf.then(pool_dmabuf).transpose()?;
        let a = start(&model_a, "a")?;
        let mut b = start_with(&model_b, "b", buf.as_ref(), shared)?;
        let shared = b.port.take_shared_rx();
        Ok(Self {
            a_start: model_a.counters(),
            b_start: model_b.counters(),
            a,
            b,
            model_a,
            model_b,
            generator: Generator::new(vec![FRAME_LEN], 1)?,
            verifier: Verifier::default(),
            rx_drained: 0,
            watch_health: false,
            port_recoveries: Vec::new(),
            retired: Retired::default(),
            dmabuf: buf,
            retired_pools: Vec::new(),
            revocations: Vec::new(),
            shared,
        })
    }

    fn tx(&mut self) -> &mut TxQueue<EmuBackend> {
        &mut self.a.queues.tx[0]
    }

    fn rx(&mut self) -> &mut RxQueue<EmuBackend> {
        &mut self.b.queues.rx[0]
    }

    /// Sends `count` frames in bursts, receiving as they arrive, recovering a queue that stops;
    /// returns the recoveries done.
    fn traffic(&mut self, count: u64) -> Result<Vec<Recovery>, String> {
        let mut recoveries = Vec::new();
        let target = self.generator.generated() + count;
        let mut batch: Vec<Mbuf> = Vec::with_capacity(BURST);
        let mut received: Vec<Mbuf> = Vec::with_capacity(BURST);
        let mut idle_since = Instant::now();
        while self.generator.generated() < target || !batch.is_empty() {
            crate::testpmd::generate(
                &mut self.generator,
                self.a.port.pool(),
                &mut batch,
                BURST,
                Some(target),
            );
            let before = batch.len();
            self.tx().tx_burst(&mut batch);
            if batch.len() != before {
                idle_since = Instant::now();
            }
            recoveries.extend(self.recover_if_needed()?);
            self.receive(&mut received);
            recoveries.extend(self.recover_if_needed()?);
            if idle_since.elapsed() > Duration::from_secs(5) {
                return Err(format!(
                    "send stalled for 5 s with {} frames queued: {:?}",
                    batch.len(),
                    self.tx().stats()
                ));
            }
        }
        self.settle(&mut received)?;
        recoveries.extend(self.recover_if_needed()?);
        Ok(recoveries)
    }

    /// Sends one burst of new frames (whatever the ring takes); returns how many it took.
    fn send_burst(&mut self) -> u64 {
        let mut batch: Vec<Mbuf> = Vec::with_capacity(BURST);
        crate::testpmd::generate(
            &mut self.generator,
            self.a.port.pool(),
            &mut batch,
            BURST,
            None,
        );
        let before = batch.len();
        self.tx().tx_burst(&mut batch);
        // Frames the ring did not take go back to the pool unsent (and were never counted).
        (before - batch.len()) as u64
    }

    /// Waits (receiving meanwhile) until the device has put `frames` on the wire in all, for at
    /// most a second; true when it did.
    fn wait_for_wire(&mut self, frames: u64) -> bool {
        let start = Instant::now();
        let mut received = Vec::with_capacity(BURST);
        while start.elapsed() < Duration::from_secs(1) {
            if self.model_a.counters().tx_frames >= frames {
                return true;
            }
            self.receive(&mut received);
            std::hint::spin_loop();
        }
        false
    }

    fn receive(&mut self, received: &mut Vec<Mbuf>) {
        received.clear();
        match self.shared.as_mut() {
            Some(SharedQueues { ring, rx: queues }) => {
                for q in queues.iter_mut() {
                    q.rx_burst(received, BURST)
                        .expect(crate::testpmd::VEC_TAKES_ANY_POOL);
                }
                ring.refill();
            }
            None => {
                self.rx()
                    .rx_burst(received, BURST)
                    .expect(crate::testpmd::VEC_TAKES_ANY_POOL);
            }
        }
        for m in received.drain(..) {
            self.verifier.check(&m);
        }
    }

    /// Receives until the wire has been quiet for a while.
    fn settle(&mut self, received: &mut Vec<Mbuf>) -> Result<(), String> {
        let mut last = (u64::MAX, u64::MAX);
        let mut quiet = Instant::now();
        while quiet.elapsed() < Duration::from_millis(30) {
            self.receive(received);
            if self.recover_if_needed()?.is_empty() {
                let now = (self.model_b.counters().rx_frames, self.verifier.good);
                if now != last {
                    last = now;
                    quiet = Instant::now();
                }
            }
            std::thread::yield_now();
        }
        Ok(())
    }

    fn recover_if_needed(&mut self) -> Result<Vec<Recovery>, String> {
        if self.watch_health {
            self.recover_failed_ports()?;
        }
        let mut done = crate::testpmd::recover_stopped(&mut self.a.port, &mut self.a.queues)
            .map_err(|e| format!("recovery on port a: {e}"))?;
        if self.b.port.pool_revoke_requested() {
            // The exporter wants its memory back: stop using it before anything else.
            let r = self
                .b
                .port
                .revoke_pool(&mut self.b.queues)
                .map_err(|e| format!("revoking port b's pool: {e}"))?;
            self.rx_drained += r.drained_cqes as u64;
            self.revocations.push(r);
        }
        if self.b.port.pool_revoked() {
            // Port b's queues wait for the application to give it memory again.
            return Ok(done);
        }
        let mut on_b = crate::testpmd::recover_stopped(&mut self.b.port, &mut self.b.queues)
            .map_err(|e| format!("recovery on port b: {e}"))?;
        if let Some(SharedQueues { ring, rx: queues }) = self.shared.as_mut() {
            on_b.extend(
                recover_shared(&mut self.b.port, ring, queues)
                    .map_err(|e| format!("shared ring recovery on port b: {e}"))?,
            );
        }
        // Port b only receives: what its recoveries drained were frames that had arrived.
        self.rx_drained += on_b.iter().map(|r| r.drained_cqes as u64).sum::<u64>();
        done.extend(on_b);
        Ok(done)
    }

    /// Resets and rebuilds a port whose function is marked failed.
    fn recover_failed_ports(&mut self) -> Result<(), String> {
        for on_b in [false, true] {
            let side = if on_b { &mut self.b } else { &mut self.a };
            match side.port.device().check_health() {
                Ok(()) => continue,
                Err(DriverError::Failed(_)) => {}
                Err(e) => return Err(format!("health check: {e}")),
            }
            // Port a only sends and port b only receives: keep what the old queues counted.
            if on_b {
                let driver_cqes: u64 = side.queues.rx.iter().map(|q| q.stats().cqes).sum();
                for q in &side.queues.rx {
                    let s = q.stats();
                    self.retired.rx_errors += s.errors;
                    self.retired.rx_bad_cqes += s.bad_cqes;
                }
                let written = self.model_b.counters().since(&self.b_start).cqes;
                self.retired.rx_lost_to_reset +=
                    written.saturating_sub(self.retired.rx_cqes + driver_cqes + self.rx_drained);
                self.retired.rx_cqes += driver_cqes;
            } else {
                for q in &side.queues.tx {
                    let s = q.stats();
                    self.retired.tx_packets += s.packets;
                    self.retired.tx_errors += s.errors + q.in_flight() as u64;
                }
            }
            let name = if on_b { "b" } else { "a" };
            let recovery = side
                .port
                .recover(&mut side.queues)
                .map_err(|e| format!("recovering port {name}: {e}"))?;
            self.port_recoveries.push(recovery);
        }
        Ok(())
    }

    /// Waits (receiving meanwhile) for a failed port to be noticed and recovered, for at most a
    /// second; returns the recovery.
    fn wait_for_port_recovery(&mut self) -> Result<Option<PortRecovery>, String> {
        let start = Instant::now();
        let mut received = Vec::with_capacity(BURST);
        while self.port_recoveries.is_empty() && start.elapsed() < Duration::from_secs(1) {
            self.receive(&mut received);
            self.recover_if_needed()?;
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(self.port_recoveries.pop())
    }

    /// The application's side of a revocation: imports the dmabuf again (a new mapping of the
    /// same buffer) and gives port b the new memory; returns how long that took.
    fn reimport_pool(&mut self) -> Result<Duration, String> {
        let buf = self.dmabuf.clone().ok_or("the rig has no dmabuf")?;
        let mapping = map_revocable(self.b.port.device(), &buf)?;
        self.retired_pools.push(self.b.port.pool().clone());
        self.b
            .port
            .replace_pool_memory(&mut self.b.queues, mapping)
            .map_err(|e| format!("giving port b new pool memory: {e}"))
    }

    /// Closes both ports and fills in the accounting.
    fn finish(mut self, report: &mut ClassReport) -> Result<(), String> {
        let mut received = Vec::new();
        self.settle(&mut received)?;
        let tx = self.a.port.xstats().tx[0];
        let rx = self
            .b
            .port
            .xstats()
            .rx
            .iter()
            .fold(QueueStats::default(), |sum, q| QueueStats {
                errors: sum.errors + q.errors,
                bad_cqes: sum.bad_cqes + q.bad_cqes,
                ..sum
            });
        let retired = &self.retired;
        let a = self.model_a.counters().since(&self.a_start);
        let b = self.model_b.counters().since(&self.b_start);
        report.sent = tx.packets + retired.tx_packets;
        report.received = self.verifier.good;
        report.duplicates = self.verifier.duplicate;
        report.corrupt = self.verifier.corrupt;
        let on_wire = a.tx_frames;
        let tx_missing = report.sent.saturating_sub(on_wire);
        let tx_unexplained = tx_missing.saturating_sub(tx.errors + retired.tx_errors);
        let rx_missing = on_wire.saturating_sub(self.verifier.good + self.verifier.corrupt);
        let rx_accounted = b.rx_steer_drops
            + b.rx_out_of_buffer
            + b.rx_port_down_drops
            + rx.errors
            + rx.bad_cqes
            + self.rx_drained
            + retired.rx_errors
            + retired.rx_bad_cqes
            + retired.rx_lost_to_reset
            + b.completions_lost;
        let rx_unexplained = rx_missing.saturating_sub(rx_accounted);
        report.accounted = (tx_missing - tx_unexplained) + (rx_missing - rx_unexplained);
        report.lost_beyond_flushed = tx_unexplained + rx_unexplained;
        let on_shared_ring = self
            .shared
            .as_ref()
            .map_or(0, |shared| u64::from(shared.ring.outstanding()));
        report.leaked = leaked(&self.a)
            + leaked(&self.b).saturating_sub(on_shared_ring)
            + self
                .retired_pools
                .iter()
                .map(|p| u64::from(p.capacity() - p.available()))
                .sum::<u64>();
        self.a.queues.tx.clear();
        self.a.queues.rx.clear();
        self.b.queues.tx.clear();
        self.b.queues.rx.clear();
        self.shared = None;
        for (name, port) in [("a", self.a.port), ("b", self.b.port)] {
            port.close()
                .and_then(|dev| dev.teardown())
                .map_err(|e| format!("closing {name}: {e}"))?;
        }
        Ok(())
    }
}

/// Buffers of a side's pool that are neither free, posted for receive nor in flight.
fn leaked(side: &Side) -> u64 {
    let pool = side.port.pool();
    let posted: usize = side.queues.rx.iter().map(RxQueue::posted).sum();
    let in_flight: usize = side.queues.tx.iter().map(TxQueue::in_flight).sum();
    u64::from(pool.capacity())
        .saturating_sub(u64::from(pool.available()) + (posted + in_flight) as u64)
}

const SYNDROMES: [CqeSyndrome; 4] = [
    CqeSyndrome::LocalLength,
    CqeSyndrome::LocalQpOperation,
    CqeSyndrome::LocalProtection,
    CqeSyndrome::WrFlushed,
];

/// Runs one class: `injections` faults, each followed by a round of verified traffic.
pub fn run_class(class: FaultClass, injections: u32) -> Result<ClassReport, String> {
    if class == FaultClass::ArpSpoof {
        return arp::run_class(class, injections);
    }
    if FaultClass::CM.contains(&class) {
        return cm::run_class(class, injections);
    }
    if class.is_rdma() {
        return rdma::run_class(class, injections);
    }
    let mut rig = Rig::new(
        class == FaultClass::DmabufRevoked,
        class == FaultClass::SharedRingError,
    )?;
    let mut report = ClassReport {
        name: class.name(),
        ..ClassReport::default()
    };
    rig.watch_health = matches!(
        class,
        FaultClass::HealthFatal | FaultClass::HealthStall | FaultClass::NotResponding
    );
    rig.traffic(FRAMES_PER_ROUND)?;
    let (a_before, b_before) = (rig.model_a.counters(), rig.model_b.counters());
    for i in 0..injections as usize {
        let taken_before = rig.model_a.faults_taken() + rig.model_b.faults_taken();
        match class {
            FaultClass::TxErrorCqe
            | FaultClass::TxCorruptCqe
            | FaultClass::RxErrorCqe
            | FaultClass::RxCorruptCqe
            | FaultClass::DmaUnmapped => {
                arm_queue_fault(&mut rig, class, i);
                let recoveries = rig.traffic(FRAMES_PER_ROUND)?;
                report.recoveries += recoveries.len().min(1) as u64;
                report
                    .recover_us
                    .extend(recoveries.iter().map(|r| r.took.as_secs_f64() * 1e6));
            }
            FaultClass::SharedRingError => {
                let fault = match rig.shared.as_ref() {
                    Some(SharedQueues { ring, rx: _ }) if i % 2 == 1 => {
                        Fault::SharedRingError { rmpn: ring.id() }
                    }
                    Some(SharedQueues {
                        ring: _,
                        rx: queues,
                    }) => Fault::ReceiveError {
                        rqn: queues[0].rqn(),
                        syndrome: SYNDROMES[(i / 2) % SYNDROMES.len()],
                    },
                    None => return Err("port b has no shared ring".into()),
                };
                rig.model_b.inject(fault);
                let recoveries = rig.traffic(FRAMES_PER_ROUND)?;
                report.recoveries += recoveries.len().min(1) as u64;
                report
                    .recover_us
                    .extend(recoveries.iter().map(|r| r.took.as_secs_f64() * 1e6));
            }
            FaultClass::CqOverrun => {
                let (model, cqn) = if i % 2 == 0 {
                    (&rig.model_a, rig.a.queues.tx[0].cqn())
                } else {
                    (&rig.model_b, rig.b.queues.rx[0].cqn())
                };
                model.inject(Fault::CqOverrun { cqn });
                let recoveries = rig.traffic(FRAMES_PER_ROUND)?;
                // Only a queue rebuilt with a new CQ counts: a plain reset would leave the
                // failed CQ in place.
                let rebuilt: Vec<_> = recoveries.iter().filter(|r| r.cq_recreated).collect();
                report.recoveries += rebuilt.len().min(1) as u64;
                report
                    .recover_us
                    .extend(rebuilt.iter().map(|r| r.took.as_secs_f64() * 1e6));
            }
            FaultClass::DmabufRevoked => {
                // Frames in the receive ring and on its CQ when the exporter asks.
                for _ in 0..3 {
                    rig.send_burst();
                }
                rig.dmabuf
                    .as_ref()
                    .and_then(|_| rig.b.port.pool().dmabuf())
                    .ok_or("port b's pool is not in a dmabuf")?
                    .request_revoke();
                report.injections += 1;
                // Traffic goes on: port b notices, stops and revokes; what arrives meanwhile
                // is dropped by the device.
                rig.traffic(FRAMES_PER_ROUND / 2)?;
                let revoked: Vec<PoolRevocation> = rig.revocations.drain(..).collect();
                if revoked.len() != 1 || !rig.b.port.pool_revoked() {
                    return Err(format!(
                        "revocation {i}: port b did not revoke ({revoked:?})"
                    ));
                }
                report.evidence += revoked[0].keys as u64;
                let stopped = revoked[0].took;
                let resumed = rig.reimport_pool()?;
                let good_before = rig.verifier.good;
                rig.traffic(FRAMES_PER_ROUND)?;
                if rig.verifier.good > good_before {
                    report.recoveries += 1;
                    report
                        .recover_us
                        .push((stopped + resumed).as_secs_f64() * 1e6);
                }
            }
            FaultClass::DroppedDoorbell => {
                let sqn = rig.tx().sqn();
                rig.model_a.inject(Fault::DropDoorbell { sqn });
                let wire_before = rig.model_a.counters().tx_frames;
                let lost_burst = rig.send_burst();
                let start = Instant::now();
                // The next doorbell carries the producer index past the lost one.
                rig.send_burst();
                if rig.wait_for_wire(wire_before + lost_burst) {
                    report.recoveries += 1;
                    report.recover_us.push(start.elapsed().as_secs_f64() * 1e6);
                }
                rig.traffic(FRAMES_PER_ROUND)?;
            }
            FaultClass::CommandTimeout | FaultClass::CorruptCommandOutput => {
                let fault = if class == FaultClass::CommandTimeout {
                    // A hang, or an answer after the driver gave up, in turn.
                    if i % 2 == 0 {
                        Fault::SwallowCommand
                    } else {
                        Fault::LateCommand
                    }
                } else {
                    // Status byte, syndrome and the counter's data, in turn.
                    let offsets: [&[(u16, u8)]; 3] = [
                        &[(0, 0x05)],
                        &[(4, 0xff), (7, 0x13)],
                        &[(0x30, 0xff), (0x31, 0xff)],
                    ];
                    Fault::CorruptCommandOutput {
                        patch: offsets[i % 3].to_vec(),
                    }
                };
                rig.model_a.inject(fault);
                let start = Instant::now();
                // QUERY_Q_COUNTER: the damaged or missing answer must come back as an error or a
                // value, and the next command must work.
                let _ = rig.a.port.rx_missed();
                let late_before = rig.a.port.device().commands_answered_late();
                // A late answer lands as this command is posted, and its slot comes back
                // at the one after.
                let answered = rig.a.port.rx_missed().is_ok() && rig.a.port.rx_missed().is_ok();
                let slot_back = class != FaultClass::CommandTimeout
                    || i % 2 == 0
                    || rig.a.port.device().commands_answered_late() == late_before + 1;
                if answered && slot_back {
                    report.recoveries += 1;
                    report.recover_us.push(start.elapsed().as_secs_f64() * 1e6);
                }
                rig.traffic(FRAMES_PER_ROUND)?;
            }
            FaultClass::BogusEvent => {
                let mut data = [0u8; 28];
                let (event_type, sub_type) = match i % 3 {
                    0 => (0x7f, 0x01),
                    1 => {
                        // CQ error naming a CQ this driver never created.
                        data[..4].copy_from_slice(&0x00ff_fff0u32.to_be_bytes());
                        (0x04, 0)
                    }
                    _ => {
                        // Completion event for a CQ that does not exist.
                        data[24..28].copy_from_slice(&0x00ab_cdefu32.to_be_bytes());
                        (0x00, 0)
                    }
                };
                rig.model_a.inject(Fault::RawEvent {
                    event_type,
                    sub_type,
                    data,
                });
                let start = Instant::now();
                let polled = rig.a.port.device().poll_events();
                if polled.is_ok() && rig.a.port.rx_missed().is_ok() {
                    report.recoveries += 1;
                    report.recover_us.push(start.elapsed().as_secs_f64() * 1e6);
                }
                rig.traffic(FRAMES_PER_ROUND)?;
            }
            FaultClass::HealthFatal | FaultClass::HealthStall | FaultClass::NotResponding => {
                let model = if i % 2 == 0 {
                    &rig.model_a
                } else {
                    &rig.model_b
                };
                let fatal = [
                    health_syndrome::FW_INTERNAL_ERR,
                    health_syndrome::DEAD_IRISC,
                    health_syndrome::HW_FATAL_ERR,
                    health_syndrome::ICM_PAGE_ERR,
                ];
                match class {
                    FaultClass::HealthFatal => model.inject_fatal(fatal[(i / 2) % fatal.len()]),
                    FaultClass::HealthStall => model.stall_health_counter(),
                    _ => model.inject_unresponsive(),
                }
                report.injections += 1;
                // Traffic goes on until the failure is noticed; then the port is rebuilt.
                rig.traffic(FRAMES_PER_ROUND)?;
                if let Some(r) = rig.wait_for_port_recovery()? {
                    report.recoveries += 1;
                    report.recover_us.push(r.took.as_secs_f64() * 1e6);
                }
                rig.port_recoveries.clear();
                rig.traffic(FRAMES_PER_ROUND)?;
            }
            FaultClass::RdmaFrameLoss
            | FaultClass::RdmaDuplicate
            | FaultClass::RdmaReorder
            | FaultClass::RdmaIcrcCorrupt
            | FaultClass::RdmaRnr
            | FaultClass::RdmaRetryExceeded
            | FaultClass::RdmaQpFatal => return rdma::run_class(class, injections),
            FaultClass::CmUnreachable | FaultClass::CmPeerVanishes => {
                return cm::run_class(class, injections)
            }
            FaultClass::ArpSpoof => return arp::run_class(class, injections),
        }
        report.injections += rig.model_a.faults_taken() + rig.model_b.faults_taken() - taken_before;
    }
    let (a, b) = (
        rig.model_a.counters().since(&a_before),
        rig.model_b.counters().since(&b_before),
    );
    match class {
        FaultClass::CqOverrun => report.evidence = a.cq_overruns + b.cq_overruns,
        FaultClass::DmaUnmapped => report.evidence = a.dma_faults + b.dma_faults,
        _ => {}
    }
    rig.finish(&mut report)?;
    Ok(report)
}

/// Recovers port b's shared ring: created again when the device broke it, else each of its
/// queues that stopped on an error completion is reset.
fn recover_shared(
    port: &mut Port<EmuBackend>,
    ring: &SharedRxRing<EmuBackend>,
    queues: &mut [SharedRxQueue<EmuBackend>],
) -> Result<Vec<Recovery>, DriverError> {
    if port.shared_ring_failed() {
        let r = port.restart_shared_ring(ring, queues)?;
        return Ok(vec![Recovery {
            flushed: r.flushed,
            drained_cqes: r.drained_cqes,
            device_state: RqState::Err,
            took: r.took,
            cq_recreated: false,
        }]);
    }
    let mut done = Vec::new();
    for q in queues.iter_mut().filter(|q| q.in_error()) {
        done.push(port.recover_shared_rx(q)?);
    }
    Ok(done)
}

fn arm_queue_fault(rig: &mut Rig, class: FaultClass, i: usize) {
    let syndrome = SYNDROMES[i % SYNDROMES.len()];
    match class {
        FaultClass::TxErrorCqe => {
            let sqn = rig.tx().sqn();
            rig.model_a.inject(Fault::SendError { sqn, syndrome });
        }
        FaultClass::RxErrorCqe => {
            let rqn = rig.rx().rqn();
            rig.model_b.inject(Fault::ReceiveError { rqn, syndrome });
        }
        FaultClass::DmaUnmapped if i % 2 == 0 => {
            let sqn = rig.tx().sqn();
            rig.model_a.inject(Fault::UnmappedDma {
                queue: DmaQueue::Send(sqn),
            });
        }
        FaultClass::DmaUnmapped => {
            let rqn = rig.rx().rqn();
            rig.model_b.inject(Fault::UnmappedDma {
                queue: DmaQueue::Receive(rqn),
            });
        }
        FaultClass::TxCorruptCqe => {
            // A WQE counter half the ring away from anything posted.
            let cqn = rig.tx().cqn();
            rig.model_a.inject(Fault::CorruptCqe {
                cqn,
                patch: vec![(0x3c, 0x80 ^ i as u8), (0x3d, 0x55)],
            });
        }
        _ => {
            let cqn = rig.rx().cqn();
            let patch = match i % 4 {
                0 => vec![(0x3c, 0xde), (0x3d, 0xad)], // WQE counter
                1 => vec![(0x22, 0x7e)],               // the RQ's user index
                2 => vec![(0x2c, 0x7f)],               // byte count far past the buffer
                _ => vec![(0x3f, 0x90)],               // opcode 9: not a receive completion
            };
            rig.model_b.inject(Fault::CorruptCqe { cqn, patch });
        }
    }
}

/// Runs every class; stops at the first that cannot run at all.
pub fn run_matrix(injections: u32) -> Result<Vec<ClassReport>, String> {
    FaultClass::ALL
        .iter()
        .map(|&class| run_class(class, injections).map_err(|e| format!("{}: {e}", class.name())))
        .collect()
}
