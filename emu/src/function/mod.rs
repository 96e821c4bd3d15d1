//! The PCI function's whole state behind its lock ([`Core`]): the firmware's life-cycle, page
//! and capability state, the object tables, and the queue engines' scratch and held work.
//!
//! Both the firmware (`fw`, the commands) and the queue engines (`engine`, the data path) work
//! on this state; it names neither. The engines never name the firmware; the firmware drives
//! the engines where a command must (flushing a QP it moves to the error state), and asks the
//! rest of them through [`EngineRequests`], which the engines implement for [`Core`].

pub(crate) mod caps;
pub(crate) mod command_error;
mod flow_table_caps;
pub(crate) mod hca;
pub(crate) mod local_loopback;
pub(crate) mod pages;
pub(crate) mod pending_answer;

use crate::config::EmuConfig;
use crate::counters::{add, Counters, QueueCounterTable};
use crate::dma::{DmaError, Iommu};
use crate::irq::InterruptSink;
use crate::objects::icm::{self, IcmStore};
use crate::objects::memic::{self, DeviceMemory};
use crate::objects::queue_state::{LateWrite, RcScratch, ReceiveScratch, SendScratch, UdScratch};
use crate::objects::{Resources, WorkQueue};
use crate::wire::Wire;
use cxdirect_hw::eqe::EventType;
use std::sync::Arc;

/// What the firmware asks of the queue engines while it executes a command. The engines
/// implement it for [`Core`], so the firmware reaches them without naming them.
pub(crate) trait EngineRequests {
    /// Posts an event to the EQ subscribed to its type (the async EQ), if any.
    fn post_async_event(&mut self, event: EventType, sub_type: u8, data: &[u8; 28]);

    /// Writes every compressed session the receive pass left open, so that a command sees, and
    /// may destroy, CQs with every completion taken so far written.
    fn flush_completions(&mut self);

    /// Lands the receive writes still in flight for RQ `rqn` (every RQ when `None`), with their
    /// completions, as hardware finishes in-flight DMA before a queue changes state or goes
    /// away. Returns how many landed.
    fn land_late_writes(&mut self, rqn: Option<u32>) -> usize;

    /// Moves every RQ that draws from RMP `rmpn` to the error state.
    fn rmp_rqs_enter_error(&mut self, rmpn: u32);

    /// Posted receive WQEs of `wq`: its doorbell record counter less what the device took;
    /// `None` when the record cannot be read or claims more than the ring holds.
    fn posted_wqes(&self, wq: &WorkQueue) -> Option<u16>;

    /// Resumes the page fault of type `pf_type` and `token` that stopped queue `wq`
    /// (PAGE_FAULT_RESUME); `error`: the fault is final. False when no such fault waits.
    fn page_fault_resume(&mut self, pf_type: u8, wq: u32, token: u32, error: bool) -> bool;
}

/// Everything behind the function's lock: firmware state, objects and engine state.
pub(crate) struct Core {
    pub cfg: EmuConfig,
    pub iommu: Arc<Iommu>,
    pub counters: Arc<Counters>,
    pub queue_counters: QueueCounterTable,
    pub hca: hca::Hca,
    pub pages: pages::Pages,
    pub res: Resources,
    pub port: hca::PortState,
    pub bus_master: bool,
    pub sink: Option<Arc<dyn InterruptSink>>,
    pub msix_enabled: bool,
    pub wire: Option<(Arc<Wire>, crate::wire::PortId)>,
    /// Scratch buffers of the send engine, reused for every WQE.
    pub send_scratch: SendScratch,
    /// Scratch buffers of the RC requester and responder, reused for every message.
    pub rc_scratch: RcScratch,
    /// Reusable buffers of the UD transport.
    pub ud_scratch: UdScratch,
    /// Where the receive engine reads each WQE, reused so a frame costs no zeroing.
    pub receive_scratch: ReceiveScratch,
    /// Faults armed by tests and the fault matrix.
    pub faults: crate::faults::Faults,
    /// Receives whose payload write is still in flight ([`crate::Fault::LateReceive`]).
    pub late_writes: Vec<LateWrite>,
    /// Signature errors and PSV values the data path left for `crate::signature::report`.
    pub sig_pending: crate::objects::signature::PendingCell,
    /// Commands whose answer is held back ([`crate::Fault::LateCommand`]).
    pub late_commands: Vec<pending_answer::PendingAnswer>,
    /// The entry last handed back in each command slot, by slot number
    /// ([`crate::Fault::StaleCommandEntry`] writes it again).
    pub last_answers: Vec<(u32, cxdirect_hw::cmd::CmdLayout)>,
    /// CQs holding an open compressed session, written when the receive pass ends.
    pub open_sessions: Vec<u32>,
    /// Frames the function sent to itself, waiting for its next receive pass.
    pub local_loopback: local_loopback::LocalLoopback,
    /// The function's device memory (MEMIC), where BAR0 is large enough to hold it; BAR0's
    /// MMIO shares it.
    pub memic: Option<Arc<DeviceMemory>>,
    /// The function's SW ICM, with [`EmuConfig::sw_steering`]: its SW_ICM objects and the bytes
    /// SW ICM keys reach. Readers (the steering engine) take bytes with
    /// [`IcmStore::read`] / [`IcmStore::read_entry`] at ICM addresses.
    pub icm: Option<IcmStore>,
    /// Paced SQs waiting for their rate to pay a debt, with when it is paid
    /// (`engine::pacing`).
    pub paced: Vec<(u32, std::time::Instant)>,
    /// UD QPs whose requester queue group's or next datagram's traffic class's rates stopped
    /// them, with when they may go on (`engine::pacing`).
    pub paced_ud: Vec<(u32, std::time::Instant)>,
}

impl Core {
    pub fn new(cfg: EmuConfig, iommu: Arc<Iommu>, counters: Arc<Counters>) -> Self {
        let port = hca::PortState::new(&cfg);
        let memic =
            memic::window_start(cfg.bar0_size).map(|base| Arc::new(DeviceMemory::new(base)));
        let icm = cfg.sw_steering.then(IcmStore::new);
        Self {
            memic,
            icm,
            hca: hca::Hca::new(&cfg),
            pages: pages::Pages::default(),
            res: Resources::new(&cfg),
            port,
            cfg,
            iommu,
            counters,
            queue_counters: QueueCounterTable::default(),
            bus_master: false,
            sink: None,
            msix_enabled: false,
            wire: None,
            send_scratch: Default::default(),
            rc_scratch: Default::default(),
            ud_scratch: Default::default(),
            receive_scratch: Default::default(),
            faults: Default::default(),
            late_writes: Vec::new(),
            sig_pending: Default::default(),
            late_commands: Vec::new(),
            paced: Vec::new(),
            paced_ud: Vec::new(),
            last_answers: Vec::new(),
            open_sessions: Vec::new(),
            local_loopback: Default::default(),
        }
    }

    /// The function's name in the model's log: its MAC address.
    pub fn port_name(&self) -> String {
        let m = self.cfg.mac;
        format!(
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }

    /// Function-level reset: every object and page dropped, back to initializing.
    pub fn reset(&mut self) {
        // What leaked before stays counted: the count is the function's history, not state.
        let pages_leaked = self.hca.pages_leaked;
        self.hca = hca::Hca::new(&self.cfg);
        self.hca.pages_leaked = pages_leaked;
        self.pages = pages::Pages::default();
        self.res = Resources::new(&self.cfg);
        self.port = hca::PortState::new(&self.cfg);
        self.queue_counters.clear();
        self.faults.clear();
        // A reset stops the function's DMA: writes still in flight never land.
        self.late_writes.clear();
        self.late_commands.clear();
        self.last_answers.clear();
        self.open_sessions.clear();
        self.local_loopback.clear();
        if let Some(memic) = &self.memic {
            memic.clear();
        }
        if let Some(icm) = &self.icm {
            icm.clear();
        }
        self.bus_master = false;
        self.msix_enabled = false;
    }

    /// The firmware reset a driver asks for by writing `nic_interface` SW_RESET (Linux's
    /// `reset_fw_if_needed`): every object and page dropped and the health buffer cleared, as
    /// in [`Core::reset`], then the interface reads disabled until the driver gives the
    /// command queue's address again. The PCI function is not reset: bus mastering and MSI-X
    /// stay as configuration space has them.
    pub fn firmware_reset(&mut self) {
        let (bus_master, msix_enabled) = (self.bus_master, self.msix_enabled);
        self.reset();
        self.bus_master = bus_master;
        self.msix_enabled = msix_enabled;
        self.hca.nic_interface = cxdirect_hw::init_seg::nic_interface::DISABLED;
    }

    /// A device read of host memory: refused while bus mastering is off.
    pub fn dma_read(&self, iova: u64, buf: &mut [u8]) -> Result<(), DmaError> {
        if !self.bus_master {
            add(&self.counters.dma_faults, 1);
            return Err(DmaError::BusMasterDisabled);
        }
        if let Some(offset) = memic::device_offset(iova) {
            let len = buf.len();
            return self.memic_access(("read", iova, len), |m| m.read(offset, buf));
        }
        if let Some((store, at)) = self.icm.as_ref().zip(icm::icm_address(iova)) {
            let len = buf.len();
            return self.icm_access(("read", at, len), store.read(at, buf));
        }
        self.iommu
            .read(iova, buf)
            .inspect_err(|_| add(&self.counters.dma_faults, 1))
    }

    /// A device write to host memory: refused while bus mastering is off.
    pub fn dma_write(&self, iova: u64, data: &[u8]) -> Result<(), DmaError> {
        if !self.bus_master {
            add(&self.counters.dma_faults, 1);
            return Err(DmaError::BusMasterDisabled);
        }
        if let Some(offset) = memic::device_offset(iova) {
            return self.memic_access(("write", iova, data.len()), |m| m.write(offset, data));
        }
        if let Some((store, at)) = self.icm.as_ref().zip(icm::icm_address(iova)) {
            return self.icm_access(("write", at, data.len()), store.write(at, data));
        }
        self.iommu
            .write(iova, data)
            .inspect_err(|_| add(&self.counters.dma_faults, 1))
    }

    /// An access of the data path to device memory (a MEMIC key's bus address) instead of
    /// host memory: refused like an unmapped IOVA where it runs past the memory.
    fn memic_access(
        &self,
        (kind, iova, len): (&'static str, u64, usize),
        access: impl FnOnce(&DeviceMemory) -> bool,
    ) -> Result<(), DmaError> {
        match &self.memic {
            Some(m) if access(m) => Ok(()),
            _ => {
                add(&self.counters.dma_faults, 1);
                Err(DmaError::Unmapped { kind, iova, len })
            }
        }
    }

    /// The outcome of an access of the data path to SW ICM (an SW ICM key's bus address):
    /// refused outside a live object or past the backed-page bound, and its work request
    /// then completes in error as for any DMA the function cannot make.
    fn icm_access(
        &self,
        (kind, icm, len): (&'static str, u64, usize),
        outcome: Result<(), icm::IcmError>,
    ) -> Result<(), DmaError> {
        outcome.map_err(|e| {
            add(&self.counters.dma_faults, 1);
            let why = if e == icm::IcmError::Full {
                "backed-page bound reached"
            } else {
                "outside every SW_ICM object"
            };
            DmaError::SwIcm {
                kind,
                icm,
                len,
                why,
            }
        })
    }

    /// Reads a big-endian 32-bit word of host memory.
    pub fn dma_read_be32(&self, iova: u64) -> Result<u32, DmaError> {
        let mut word = [0u8; 4];
        self.dma_read(iova, &mut word)?;
        Ok(u32::from_be_bytes(word))
    }

    /// Signals MSI-X vector `vector` if MSI-X is enabled and a sink is attached.
    pub fn signal(&self, vector: u16) {
        match (&self.sink, self.msix_enabled) {
            (Some(sink), true) if vector < self.cfg.msix_vectors => {
                add(&self.counters.interrupts, 1);
                sink.signal(vector);
            }
            _ => add(&self.counters.interrupts_suppressed, 1),
        }
    }
}
