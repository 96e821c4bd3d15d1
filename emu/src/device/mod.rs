//! A modelled ConnectX-6 Dx PCI function: config space, BAR0 (initialization segment, MSI-X
//! table and PBA, UAR pages with CQ/EQ doorbells and BlueFlame registers), the firmware and the
//! queue engines, connected to a wire.
//!
//! MMIO is expressed as byte slices at BAR0 offsets, exactly the bytes a CPU load or store would
//! move: the device's registers are big-endian, so a driver converts with `u32::from_be_bytes`.

use crate::config::{EmuConfig, ExecMode};
use crate::counters::{Counters, CountersSnapshot, QueueCountersSnapshot, QueueKind};
use crate::dma::Iommu;
use crate::engine;
use crate::function::Core;
use crate::fw::cmdif;
use crate::irq::InterruptSink;
use crate::objects::memic::DeviceMemory;
use crate::pci::{ConfigSpace, FunctionLayout, MsixTable};
use crate::wire::{PortId, Wire};
use cxdirect_hw::doorbell::{
    UAR_BF_OFFSET, UAR_CQ_DOORBELL, UAR_DBR_LESS_DOORBELL, UAR_EQ_UPDATE_CI, UAR_EQ_UPDATE_CI_ARM,
    UAR_PAGE_SIZE,
};
use cxdirect_hw::init_seg;
use engine::send_counter::Register;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use thiserror::Error;
use thread::{Engine, EngineState};

mod thread;

/// BAR0 offset of the MSI-X table.
pub const MSIX_TABLE_OFFSET: u64 = 0x2000;
/// BAR0 offset of the MSI-X pending bit array.
pub const MSIX_PBA_OFFSET: u64 = 0x3000;
/// Size of one BlueFlame register in bytes (two halves used alternately).
pub const BF_REG_SIZE: usize = 1 << crate::objects::limits::LOG_BF_REG_SIZE;

/// An MMIO access the model refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum MmioError {
    /// Offset and length fall outside BAR0.
    #[error("MMIO access of {len} bytes at BAR0 offset {offset:#x} is outside the {bar_size:#x}-byte BAR")]
    OutOfRange {
        /// BAR0 offset.
        offset: u64,
        /// Access length in bytes.
        len: usize,
        /// BAR0 size.
        bar_size: u64,
    },
    /// An access width the register does not take.
    #[error("MMIO access of {len} bytes at BAR0 offset {offset:#x} has a width this register does not accept")]
    BadWidth {
        /// BAR0 offset.
        offset: u64,
        /// Access length in bytes.
        len: usize,
    },
}

/// A send doorbell waiting for the device thread; held in place, so queueing one allocates
/// nothing.
struct PendingDoorbell {
    uar: u32,
    first8: [u8; 8],
    /// The BlueFlame copy of the WQE is `bf[..bf_len]` (`bf_len` 0: the doorbell had none).
    bf: [u8; BF_REG_SIZE / 2],
    bf_len: usize,
    /// The register written: a BlueFlame register, or the doorbell-less one.
    register: Register,
}

struct Link {
    wire: Arc<Wire>,
    port: PortId,
    peers: Vec<Weak<Shared>>,
}

struct Shared {
    core: Mutex<Core>,
    config: Mutex<ConfigSpace>,
    msix: Mutex<MsixTable>,
    iommu: Arc<Iommu>,
    counters: Arc<Counters>,
    exec: ExecMode,
    /// The device thread running this function's work (threaded execution).
    engine: Option<Arc<EngineState>>,
    bar_size: u64,
    /// Device memory (MEMIC), shared with the function's core: BAR0 accesses inside its
    /// window reach it without the function's lock.
    memic: Option<Arc<DeviceMemory>>,
    /// Shared out (an `Arc` clone) to each send and pump, so they hold no lock while working.
    link: Mutex<Option<Arc<Link>>>,
    /// CQ doorbell high words written as 32-bit halves, per UAR.
    cq_db_high: Mutex<std::collections::HashMap<u32, u32>>,
    pending: Mutex<VecDeque<PendingDoorbell>>,
    /// Where arriving frames are taken from the wire, reused for every frame.
    rx_frame: Mutex<Vec<u8>>,
}

/// A modelled PCI function. Cloning shares the same function.
#[derive(Clone)]
pub struct Device {
    shared: Arc<Shared>,
    /// The device thread (threaded execution); the last handle of the last function it serves
    /// stops it.
    _engine: Option<Arc<Engine>>,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("exec", &self.shared.exec)
            .field("bar_size", &self.shared.bar_size)
            .finish()
    }
}

/// A memory key as the model holds it ([`Device::memory_key`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryKeyView {
    /// `access_mode` (1 = MTT).
    pub access_mode: u8,
    /// First address the key translates.
    pub start: u64,
    /// Bytes it translates.
    pub len: u64,
    /// log2 of the MTT page size.
    pub log_page_size: u32,
    /// The translation entries as programmed (address with the read/write bits).
    pub mtt: Vec<u64>,
    /// Local read allowed.
    pub local_read: bool,
    /// Local write allowed.
    pub local_write: bool,
    /// Remote read allowed.
    pub remote_read: bool,
    /// Remote write allowed.
    pub remote_write: bool,
    /// Protection domain.
    pub pd: u32,
    /// The key is free (not valid for any access).
    pub free: bool,
    /// Created in page-access mode: the MTT entries' rd_en/wr_en bits are access control.
    pub pg_access: bool,
    /// The QP the key is bound to (a type 2 memory window's), 0xffffff when none.
    pub qpn: u32,
    /// Remote atomics allowed.
    pub atomic: bool,
}

impl Device {
    /// A new function, not connected to any wire, in its power-on state.
    pub fn new(cfg: EmuConfig) -> Self {
        let engine = (cfg.exec == ExecMode::Threaded).then(Engine::start);
        Self::on_engine(cfg, engine)
    }

    /// A new function whose work runs on `engine` (threaded execution) or inline (`None`).
    fn on_engine(cfg: EmuConfig, engine: Option<Arc<Engine>>) -> Self {
        let iommu = Arc::new(Iommu::new());
        let counters = Arc::new(Counters::default());
        let layout = FunctionLayout {
            bar0_size: cfg.bar0_size,
            msix_vectors: cfg.msix_vectors,
            msix_table_offset: MSIX_TABLE_OFFSET as u32,
            msix_pba_offset: MSIX_PBA_OFFSET as u32,
        };
        let config = ConfigSpace::new(layout).unwrap_or_default();
        let msix = MsixTable::new(cfg.msix_vectors).unwrap_or_default();
        let exec = if engine.is_some() {
            ExecMode::Threaded
        } else {
            ExecMode::Inline
        };
        let poll_window = cfg.poll_window;
        let bar_size = cfg.bar0_size;
        let core = Core::new(cfg, iommu.clone(), counters.clone());
        let memic = core.memic.clone();
        let shared = Arc::new(Shared {
            core: Mutex::new(core),
            memic,
            config: Mutex::new(config),
            msix: Mutex::new(msix),
            iommu,
            counters,
            exec,
            engine: engine.as_ref().map(|e| e.state()),
            bar_size,
            link: Mutex::new(None),
            cq_db_high: Mutex::new(Default::default()),
            pending: Mutex::new(VecDeque::new()),
            rx_frame: Mutex::new(Vec::with_capacity(crate::wire::MAX_FRAME_LEN)),
        });
        if let Some(engine) = &engine {
            engine.serve(&shared, poll_window);
        }
        Self {
            shared,
            _engine: engine,
        }
    }

    /// One function whose port receives its own frames.
    pub fn loopback(cfg: EmuConfig) -> Self {
        let device = Self::new(cfg);
        device.attach(Arc::new(Wire::loopback()), PortId::LOOPBACK, &[]);
        device
    }

    /// Two functions wired back to back: what one sends, the other receives. When both run
    /// threaded, one device thread serves both (as one adapter's engines serve its two ports),
    /// unless either asks for two ([`EmuConfig::device_threads`]): then each has its own.
    pub fn pair(a: EmuConfig, mut b: EmuConfig) -> (Self, Self) {
        if a.mac == b.mac {
            b.mac[5] ^= 0x01;
        }
        let wire = Arc::new(Wire::pair());
        let one_thread = a.device_threads.max(b.device_threads) <= 1;
        let (da, db) = if a.exec == ExecMode::Threaded && b.exec == ExecMode::Threaded && one_thread
        {
            let engine = Engine::start();
            (
                Self::on_engine(a, Some(engine.clone())),
                Self::on_engine(b, Some(engine)),
            )
        } else {
            (Self::new(a), Self::new(b))
        };
        da.attach(wire.clone(), PortId::A, &[&db]);
        db.attach(wire, PortId::B, &[&da]);
        (da, db)
    }

    /// Connects the function's port to `port` of `wire`; `peers` are the functions on the other
    /// ports, pumped after this function sends when work runs inline.
    pub fn attach(&self, wire: Arc<Wire>, port: PortId, peers: &[&Device]) {
        let peers = peers.iter().map(|d| Arc::downgrade(&d.shared)).collect();
        *lock(&self.shared.link) = Some(Arc::new(Link {
            wire: wire.clone(),
            port,
            peers,
        }));
        lock(&self.shared.core).wire = Some((wire, port));
    }

    /// The wire the port is connected to, if any.
    pub fn wire(&self) -> Option<(Arc<Wire>, PortId)> {
        lock(&self.shared.link)
            .as_ref()
            .map(|l| (l.wire.clone(), l.port))
    }

    /// The function's IOMMU: the backend maps host memory here for the device to reach.
    pub fn iommu(&self) -> &Iommu {
        &self.shared.iommu
    }

    /// Where MSI-X messages go.
    pub fn set_interrupt_sink(&self, sink: Arc<dyn InterruptSink>) {
        lock(&self.shared.core).sink = Some(sink);
    }

    /// Size of BAR0 in bytes.
    pub fn bar0_size(&self) -> u64 {
        self.shared.bar_size
    }

    /// Function-wide counters.
    pub fn counters(&self) -> CountersSnapshot {
        self.shared.counters.snapshot()
    }

    /// Counters of one queue.
    pub fn queue_counters(&self, kind: QueueKind, number: u32) -> Option<QueueCountersSnapshot> {
        lock(&self.shared.core).queue_counters.get(kind, number)
    }

    /// Firmware pages the device holds now.
    pub fn firmware_pages_held(&self) -> usize {
        lock(&self.shared.core).pages.held()
    }

    /// The text the driver gave with SET_DRIVER_VERSION, up to its first NUL.
    pub fn driver_version(&self) -> String {
        let text = lock(&self.shared.core).hca.driver_version;
        let end = text.iter().position(|&b| b == 0).unwrap_or(text.len());
        String::from_utf8_lossy(&text[..end]).into_owned()
    }

    /// Pages the device still held when DISABLE_HCA or reset dropped them (a driver leak).
    pub fn firmware_pages_leaked(&self) -> u64 {
        lock(&self.shared.core).hca.pages_leaked
    }

    /// The health syndrome (0 while healthy).
    pub fn health_syndrome(&self) -> u8 {
        lock(&self.shared.core).hca.health_syndrome()
    }

    /// Fails the firmware with a health syndrome (fault injection).
    pub fn inject_fatal(&self, syndrome: u8) {
        lock(&self.shared.core).hca.set_fatal(syndrome);
    }

    /// Fails the firmware with a health syndrome and the recovery flow required (`rfr`): a
    /// firmware reset (`nic_interface` SW_RESET) clears it (fault injection).
    pub fn inject_fatal_reset_required(&self, syndrome: u8) {
        lock(&self.shared.core)
            .hca
            .set_fatal_reset_required(syndrome);
    }

    /// Arms `fault`: the engine it belongs to takes it at the first matching event.
    /// A [`crate::Fault::RawEvent`] is posted at once.
    pub fn inject(&self, fault: crate::Fault) {
        let mut core = lock(&self.shared.core);
        match fault {
            crate::Fault::RawEvent {
                event_type,
                sub_type,
                data,
            } => {
                core.faults.taken += 1;
                crate::engine::eq::post_subscribed_raw(&mut core, event_type, sub_type, &data);
            }
            other => core.faults.arm(other),
        }
    }

    /// Faults armed and not yet taken.
    pub fn faults_pending(&self) -> usize {
        lock(&self.shared.core).faults.pending()
    }

    /// Lands every receive write held in flight by [`crate::Fault::LateReceive`]; returns how
    /// many landed.
    pub fn land_late_writes(&self) -> usize {
        crate::engine::rq::land_late_writes(&mut lock(&self.shared.core), None)
    }

    /// Faults taken so far.
    pub fn faults_taken(&self) -> u64 {
        lock(&self.shared.core).faults.taken
    }

    /// Stops answering (fault injection: the function fell off the bus): every read of the
    /// initialization segment returns all-ones and commands go unanswered, until a function
    /// reset.
    pub fn inject_unresponsive(&self) {
        lock(&self.shared.core).hca.unresponsive = true;
    }

    /// Stops the health counter without a syndrome (fault injection: hung firmware).
    pub fn stall_health_counter(&self) {
        let mut core = lock(&self.shared.core);
        let now = core.hca.health_counter();
        core.hca.health_stalled = Some(now);
    }

    /// Number of live objects of each kind: (EQs, CQs, SQs, RQs, RMPs, memory keys).
    pub fn object_counts(&self) -> [usize; 6] {
        let core = lock(&self.shared.core);
        let r = &core.res;
        [
            r.eqs.len(),
            r.cqs.len(),
            r.sqs.len(),
            r.rqs.len(),
            r.rmps.len(),
            r.mkeys.len(),
        ]
    }

    /// The check an RC responder makes before a peer's RDMA READ, WRITE or atomic touches
    /// memory: key `rkey` exists, belongs to `pd`, grants `access` and covers
    /// `[addr, addr + len)`. A refusal is the remote access error the requester completes with.
    pub fn check_remote_access(
        &self,
        rkey: u32,
        pd: u32,
        addr: u64,
        len: u64,
        access: crate::RemoteAccess,
    ) -> Result<(), cxdirect_hw::cqe::CqeSyndrome> {
        let core = lock(&self.shared.core);
        crate::translate::check_remote(&core, rkey, pd, addr, len, access)
            .map_err(|_| cxdirect_hw::cqe::CqeSyndrome::RemoteAccess)
    }

    /// Number of live QPs: RC and GSI (QP1).
    pub fn qp_count(&self) -> usize {
        let core = lock(&self.shared.core);
        core.res.qps.len() + core.res.ud_qps.len()
    }

    /// What the model holds for memory key `lkey` (index and variant), or `None` when there
    /// is no such key: for tests that check what the driver programmed.
    pub fn memory_key(&self, lkey: u32) -> Option<MemoryKeyView> {
        let core = lock(&self.shared.core);
        let key = core.res.mkeys.get(lkey >> 8)?;
        (key.variant == (lkey & 0xff) as u8).then(|| MemoryKeyView {
            access_mode: key.access_mode,
            start: key.start,
            len: key.len,
            log_page_size: key.log_page,
            mtt: key.mtt.clone(),
            local_read: key.local_read,
            local_write: key.local_write,
            remote_read: key.remote_read,
            remote_write: key.remote_write,
            pd: key.pd,
            free: key.free,
            pg_access: key.pg_access,
            qpn: key.qpn,
            atomic: key.atomic,
        })
    }

    /// `len` bytes of SW ICM at ICM address `icm` as the device holds them (bytes never
    /// written read as zero), or `None` without SW ICM ([`EmuConfig::sw_steering`]) or when the
    /// range is not inside one live SW_ICM object: for tests that check what reached ICM.
    pub fn sw_icm_read(&self, icm: u64, len: usize) -> Option<Vec<u8>> {
        let core = lock(&self.shared.core);
        let mut buf = vec![0u8; len];
        core.icm.as_ref()?.read(icm, &mut buf).ok()?;
        Some(buf)
    }

    /// The 64-byte steering entry at ICM address `icm`, as [`Device::sw_icm_read`].
    pub fn sw_icm_entry(&self, icm: u64) -> Option<[u8; 64]> {
        let core = lock(&self.shared.core);
        core.icm.as_ref()?.read_entry(icm).ok()
    }

    /// How many 4 KiB pages of SW ICM are backed (written since their object was created);
    /// 0 without SW ICM.
    pub fn sw_icm_backed_pages(&self) -> usize {
        let core = lock(&self.shared.core);
        core.icm.as_ref().map_or(0, |s| s.backed_pages())
    }

    /// The transient signature (guard << 16 | application tag) and reference tag PSV `index`
    /// holds (SET_PSV's seed, then the last block the data path protected in its domain), or
    /// `None` when there is no such PSV.
    pub fn psv(&self, index: u32) -> Option<(u32, u32)> {
        let core = lock(&self.shared.core);
        core.res
            .psvs
            .get(index)
            .map(|p| (p.transient_sig, p.ref_tag))
    }

    /// Function-level reset: every object and page dropped, back to initializing.
    pub fn reset(&self) {
        let mut core = lock(&self.shared.core);
        core.hca.pages_leaked += core.pages.held() as u64;
        core.reset();
        drop(core);
        lock(&self.shared.config).reset();
        lock(&self.shared.msix).reset();
        lock(&self.shared.pending).clear();
        self.sync_config();
    }

    /// Reads PCI configuration space.
    pub fn config_read(&self, offset: u64, buf: &mut [u8]) -> Result<(), crate::pci::ConfigError> {
        lock(&self.shared.config).read(offset, buf)
    }

    /// Writes PCI configuration space (Command register, MSI-X control, FLR, BARs...).
    pub fn config_write(&self, offset: u64, data: &[u8]) -> Result<(), crate::pci::ConfigError> {
        let flr = {
            let mut config = lock(&self.shared.config);
            config.write(offset, data)?;
            config.take_flr_request()
        };
        if flr {
            self.reset();
        }
        self.sync_config();
        Ok(())
    }

    fn sync_config(&self) {
        let (bus_master, msix) = {
            let config = lock(&self.shared.config);
            (
                config.bus_master_enabled(),
                config.msix_enabled() && !config.msix_function_masked(),
            )
        };
        let mut core = lock(&self.shared.core);
        core.bus_master = bus_master;
        core.msix_enabled = msix;
    }

    fn memory_enabled(&self) -> bool {
        lock(&self.shared.config).memory_enabled()
    }

    fn check(&self, offset: u64, len: usize) -> Result<(), MmioError> {
        match offset.checked_add(len as u64) {
            Some(end) if end <= self.shared.bar_size => Ok(()),
            _ => Err(MmioError::OutOfRange {
                offset,
                len,
                bar_size: self.shared.bar_size,
            }),
        }
    }

    /// An MMIO read of `buf.len()` bytes (4 or 8) at BAR0 `offset`.
    pub fn mmio_read(&self, offset: u64, buf: &mut [u8]) -> Result<(), MmioError> {
        self.check(offset, buf.len())?;
        crate::counters::add_shared(&self.shared.counters.mmio_reads, 1);
        if !self.memory_enabled() {
            buf.fill(0xff);
            return Ok(());
        }
        if (MSIX_TABLE_OFFSET..MSIX_PBA_OFFSET).contains(&offset) {
            let _ = lock(&self.shared.msix).read(offset - MSIX_TABLE_OFFSET, buf);
            return Ok(());
        }
        if (MSIX_PBA_OFFSET..MSIX_PBA_OFFSET + 0x1000).contains(&offset) {
            let _ = lock(&self.shared.msix).read_pba(offset - MSIX_PBA_OFFSET, buf);
            return Ok(());
        }
        if let Some(memic) = self.memic_at(offset) {
            memic.mmio_read(offset, buf);
            return Ok(());
        }
        if offset < MSIX_TABLE_OFFSET {
            let core = lock(&self.shared.core);
            for (i, byte) in buf.iter_mut().enumerate() {
                *byte = init_seg_byte(&core, offset + i as u64);
            }
            return Ok(());
        }
        // UAR pages read as zero.
        buf.fill(0);
        Ok(())
    }

    /// An MMIO write at BAR0 `offset`: 4 or 8 bytes, or a whole BlueFlame WQE (a multiple of 8
    /// bytes, up to half a BlueFlame register) written at once.
    pub fn mmio_write(&self, offset: u64, data: &[u8]) -> Result<(), MmioError> {
        self.check(offset, data.len())?;
        crate::counters::add_shared(&self.shared.counters.mmio_writes, 1);
        if !self.memory_enabled() {
            return Ok(());
        }
        if (MSIX_TABLE_OFFSET..MSIX_PBA_OFFSET + 0x1000).contains(&offset) {
            if offset < MSIX_PBA_OFFSET {
                let _ = lock(&self.shared.msix).write(offset - MSIX_TABLE_OFFSET, data);
            }
            return Ok(());
        }
        if offset < MSIX_TABLE_OFFSET {
            return self.init_seg_write(offset, data);
        }
        if let Some(memic) = self.memic_at(offset) {
            memic.mmio_write(offset, data);
            return Ok(());
        }
        let uar = (offset / UAR_PAGE_SIZE as u64) as u32;
        let in_page = (offset % UAR_PAGE_SIZE as u64) as usize;
        self.uar_write(uar, in_page, data)
    }

    /// The device memory, when BAR0 `offset` is inside its window.
    fn memic_at(&self, offset: u64) -> Option<&DeviceMemory> {
        self.shared.memic.as_deref().filter(|m| m.in_window(offset))
    }

    /// Whether BAR0 `offset` is memory rather than registers: device memory, whose accesses
    /// pass at the width they were made (a 1-byte load of the test-and-set alias is the
    /// operation, not part of a wider read).
    pub fn is_memory(&self, offset: u64) -> bool {
        self.memic_at(offset).is_some()
    }

    fn init_seg_write(&self, offset: u64, data: &[u8]) -> Result<(), MmioError> {
        if data.len() != 4 {
            return Err(MmioError::BadWidth {
                offset,
                len: data.len(),
            });
        }
        let value = u32::from_be_bytes([data[0], data[1], data[2], data[3]]);
        let mut core = lock(&self.shared.core);
        match offset as usize {
            init_seg::CMDQ_ADDR_H => {
                core.hca.cmdq_addr = (core.hca.cmdq_addr & 0xffff_ffff) | u64::from(value) << 32;
            }
            init_seg::CMDQ_ADDR_L_SZ => {
                // The address bits and `nic_interface`: SW_RESET resets the firmware (Linux
                // writes it, with the address bits it read, on a fatal error asking for the
                // recovery flow); any other mode is taken as written.
                let word = init_seg::CmdqAddrLowSize::from_bits(value);
                if word.nic_interface() == init_seg::nic_interface::SW_RESET {
                    core.firmware_reset();
                } else {
                    core.hca.cmdq_addr =
                        (core.hca.cmdq_addr & !0xffff_ffff) | u64::from(word.address_low());
                    core.hca.nic_interface = word.nic_interface();
                }
            }
            init_seg::CMD_DBELL if !core.hca.initializing() => cmdif::ring(&mut core, value),
            _ => {}
        }
        Ok(())
    }

    fn uar_write(&self, uar: u32, in_page: usize, data: &[u8]) -> Result<(), MmioError> {
        let half = BF_REG_SIZE / 2;
        if in_page >= UAR_BF_OFFSET
            && data.len() % 8 == 0
            && (8..=half).contains(&data.len())
            && (in_page - UAR_BF_OFFSET) % half == 0
        {
            // A send doorbell: the send engine refuses it on an unallocated UAR, under the
            // lock it takes anyway (a device thread holds it while it works: checking here
            // would make the doorbell wait for that).
            let mut first8 = [0u8; 8];
            first8.copy_from_slice(&data[..8]);
            let bf = (data.len() >= 64).then_some(data);
            self.send_doorbell(uar, first8, bf, Register::BlueFlame);
            return Ok(());
        }
        if in_page == UAR_DBR_LESS_DOORBELL && data.len() == 8 {
            // A doorbell of a QP without a doorbell record: the send engine checks that the
            // QP is one, under the lock it takes anyway.
            let mut first8 = [0u8; 8];
            first8.copy_from_slice(data);
            self.send_doorbell(uar, first8, None, Register::RecordLess);
            return Ok(());
        }
        {
            let core = lock(&self.shared.core);
            if !core.res.uars.contains(uar) {
                crate::counters::add(&core.counters.bad_doorbells, 1);
                return Ok(());
            }
        }
        match (in_page, data.len()) {
            (UAR_CQ_DOORBELL, 8) => {
                let high = u32::from_be_bytes([data[0], data[1], data[2], data[3]]);
                let low = u32::from_be_bytes([data[4], data[5], data[6], data[7]]);
                engine::cq::arm(&mut lock(&self.shared.core), uar, high, low);
            }
            (UAR_CQ_DOORBELL, 4) => {
                let high = u32::from_be_bytes([data[0], data[1], data[2], data[3]]);
                lock(&self.shared.cq_db_high).insert(uar, high);
            }
            (o, 4) if o == UAR_CQ_DOORBELL + 4 => {
                let low = u32::from_be_bytes([data[0], data[1], data[2], data[3]]);
                if let Some(high) = lock(&self.shared.cq_db_high).remove(&uar) {
                    engine::cq::arm(&mut lock(&self.shared.core), uar, high, low);
                }
            }
            (UAR_EQ_UPDATE_CI_ARM, 4) | (UAR_EQ_UPDATE_CI, 4) => {
                let value = u32::from_be_bytes([data[0], data[1], data[2], data[3]]);
                engine::eq::doorbell(
                    &mut lock(&self.shared.core),
                    uar,
                    value,
                    in_page == UAR_EQ_UPDATE_CI_ARM,
                );
            }
            (o, n) if o >= UAR_BF_OFFSET && n % 8 == 0 && n > 0 => {
                if n > half {
                    return Err(MmioError::BadWidth {
                        offset: u64::from(uar) * UAR_PAGE_SIZE as u64 + o as u64,
                        len: n,
                    });
                }
                // The rest of a WQE written eight bytes at a time: the doorbell already ran on
                // its first eight bytes, fetching the WQE from memory.
            }
            _ => {
                return Err(MmioError::BadWidth {
                    offset: u64::from(uar) * UAR_PAGE_SIZE as u64 + in_page as u64,
                    len: data.len(),
                })
            }
        }
        Ok(())
    }

    fn send_doorbell(&self, uar: u32, first8: [u8; 8], bf: Option<&[u8]>, register: Register) {
        match self.shared.exec {
            ExecMode::Inline => {
                {
                    let mut core = lock(&self.shared.core);
                    engine::sq::doorbell(
                        &mut core,
                        uar,
                        first8,
                        bf.map(|bytes| engine::sq::BlueFlame { bytes }),
                        register,
                    );
                }
                self.pump_after_send();
            }
            ExecMode::Threaded => {
                let mut doorbell = PendingDoorbell {
                    uar,
                    first8,
                    bf: [0; BF_REG_SIZE / 2],
                    bf_len: 0,
                    register,
                };
                if let Some(bytes) = bf {
                    // `uar_write` refuses a BlueFlame write longer than half the register.
                    let n = bytes.len().min(doorbell.bf.len());
                    doorbell.bf[..n].copy_from_slice(&bytes[..n]);
                    doorbell.bf_len = n;
                }
                lock(&self.shared.pending).push_back(doorbell);
                if let Some(engine) = &self.shared.engine {
                    engine.kick();
                }
            }
        }
    }

    /// After an inline send: deliver what the function sent itself, what reached this port
    /// (a loopback wire) and the peers' ports.
    fn pump_after_send(&self) {
        pump_local(&self.shared);
        let Some(link) = lock(&self.shared.link).clone() else {
            return;
        };
        pump_rx_from(&self.shared, &link);
        wake_peers(&link);
    }
}

/// Has each peer of `link` take what reached its port and continue the responses it owes
/// (room may have opened at this function's port): at once when it runs inline, else by
/// waking its device thread if it sleeps.
fn wake_peers(link: &Link) {
    for peer in link.peers.iter().filter_map(Weak::upgrade) {
        match peer.exec {
            ExecMode::Inline => {
                pump_rx(&peer);
                // What it sends now waits at this function's port for its next pass.
                run_timers(&peer);
                pump_local(&peer);
            }
            ExecMode::Threaded => {
                if let Some(engine) = &peer.engine {
                    engine.kick();
                }
            }
        }
    }
}

impl Device {
    /// Delivers every frame waiting at this function's port (for inline execution, when frames
    /// were put on the wire by something other than a modelled peer).
    /// Also runs the RC transport's timers (ACK timeout, RNR wait) and paced SQs that are due, delivering
    /// what they send, and has peers run inline continue the responses they had no room for.
    pub fn poll(&self) {
        pump_rx(&self.shared);
        run_timers(&self.shared);
        self.pump_after_send();
    }

    /// Frames the function sent to itself and delivered inside the device (local loopback)
    /// that its receive path has not taken yet: nonzero only between a send and the next
    /// receive pass.
    pub fn local_loopback_pending(&self) -> bool {
        lock(&self.shared.core).local_loopback.pending()
    }
}

/// Receives the frames the function looped to itself; whether there were any.
fn pump_local(shared: &Shared) -> bool {
    let mut core = lock(&shared.core);
    if !core.local_loopback.pending() {
        return false;
    }
    engine::loopback::drain(&mut core)
}

/// Runs the function's due RC timers and the paced SQs and UD QPs whose wait is over; whether
/// they sent anything.
fn run_timers(shared: &Shared) -> bool {
    let mut core = lock(&shared.core);
    let now = std::time::Instant::now();
    let rc = engine::rc::run_timers(&mut core, now);
    let ud = engine::ud::send::resume_paced(&mut core, now);
    engine::sq::resume_paced(&mut core, now) | rc | ud
}

/// When the function's next timer is due: an RC timer or a paced SQ's or UD QP's wait.
fn next_deadline(core: &crate::function::Core) -> Option<std::time::Instant> {
    let rc = engine::rc::next_deadline(core);
    let paced = engine::pacing::next_deadline(core);
    match (rc, paced) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn pump_rx(shared: &Shared) {
    pump_local(shared);
    if let Some(link) = lock(&shared.link).clone() {
        pump_rx_from(shared, &link);
    }
}

/// Runs every frame waiting at the function's port (of `link`) through its receive engine.
fn pump_rx_from(shared: &Shared, link: &Link) {
    // One pump at a time takes the function's frames, so they are received in wire order.
    let mut frame = lock(&shared.rx_frame);
    while let Ok(Some(left)) = link.wire.receive_next(link.port, &mut frame) {
        let mut core = lock(&shared.core);
        // Frames from the cable carry no transport domain: even those a loopback plug brings
        // back left the device, so no TIR's self-loopback check applies to them.
        engine::rq::receive(&mut core, &frame, None);
        if left == 0 {
            // The wire is empty for now: the compressed sessions this pass opened close, as a
            // device's do when no further completion comes soon. A lone frame's completion is
            // thus written as soon as it would be without compression.
            engine::cq::flush_all(&mut core);
        }
    }
}

/// One byte of the initialization segment as the driver reads it.
fn init_seg_byte(core: &Core, offset: u64) -> u8 {
    if core.hca.unresponsive {
        return 0xff;
    }
    let dword = (offset & !3) as usize;
    let value: u32 = match dword {
        init_seg::FW_REV => {
            u32::from(core.cfg.fw_version.1) << 16 | u32::from(core.cfg.fw_version.0)
        }
        init_seg::CMDIF_REV_FW_SUB => {
            u32::from(init_seg::CMDIF_REV) << 16 | u32::from(core.cfg.fw_version.2)
        }
        init_seg::CMDQ_ADDR_H => (core.hca.cmdq_addr >> 32) as u32,
        init_seg::CMDQ_ADDR_L_SZ => init_seg::CmdqAddrLowSize::new()
            .with_cmdq_addr_l((core.hca.cmdq_addr as u32) >> 12)
            .with_nic_interface(core.hca.nic_interface)
            .with_log_cmdq_size(core.cfg.log_cmdq_size)
            .with_log_cmdq_stride(cmdif::LOG_CMDQ_STRIDE)
            .into_bits(),
        // A ConnectX-6 Dx resets its firmware when the driver asks (`nic_interface`).
        init_seg::INITIALIZING => init_seg::Initializing::new()
            .with_initializing(core.hca.initializing())
            .with_fw_reset_supported(true)
            .into_bits(),
        d if d == init_seg::HEALTH_BUFFER + 0x38 => init_seg::HealthRfrSeverity::new()
            .with_rfr(core.hca.recovery_required())
            .into_bits(),
        init_seg::HEALTH_FW_VER => {
            (u32::from(core.cfg.fw_version.0) << 24) | (u32::from(core.cfg.fw_version.1) << 8)
        }
        d if d == init_seg::HEALTH_BUFFER + 0x3c => u32::from(core.hca.health_syndrome()) << 16,
        init_seg::INTERNAL_TIMER_H => (core.hca.internal_timer() >> 32) as u32,
        init_seg::INTERNAL_TIMER_L => core.hca.internal_timer() as u32,
        init_seg::HEALTH_COUNTER => core.hca.health_counter(),
        _ => 0,
    };
    value.to_be_bytes()[(offset & 3) as usize]
}
