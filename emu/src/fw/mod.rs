//! The model's firmware: the command interface, the HCA life cycle, firmware pages and the
//! commands that create, modify, query and destroy objects (whose tables live in
//! [`objects`](crate::objects)).
//!
//! Every command handler reads the driver's input through `cxdirect-hw` layouts, checks every
//! value before it touches model state, and fails with a command status and a syndrome (see
//! [`Syndrome`]) — never a panic, whatever the bytes.
//!
//! The firmware never calls the queue engines by name: what it needs of them (events, writing
//! held completions, landing receives in flight) it asks through [`EngineRequests`], which the
//! engines implement for [`Core`]. The dependency runs one way, engines to firmware.

pub(crate) mod caps;
pub(crate) mod cmdif;
pub(crate) mod hca;
pub mod mkey;
pub(crate) mod pages;
pub(crate) mod qcounters;
pub(crate) mod qp;
pub(crate) mod qp_datagram;
pub(crate) mod queues;
pub(crate) mod roce;
pub(crate) mod steering;
pub(crate) mod transport;
pub(crate) mod xrc;

use crate::config::EmuConfig;
use crate::counters::{add, Counters, QueueCounterTable};
use crate::dma::{DmaError, Iommu};
use crate::irq::InterruptSink;
use crate::objects::queue_state::{LateWrite, ReceiveScratch, SendScratch};
use crate::objects::{Resources, WorkQueue};
use crate::wire::Wire;
use cxdirect_hw::cmd::{CmdIn, CmdStatus, Opcode, CMD_STATUS_BYTES};
use cxdirect_hw::eqe::EventType;
use std::sync::Arc;

/// Syndromes the model reports with failed commands: which check failed. The values are the
/// model's own (real firmware syndromes are undocumented); each names one rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Syndrome {
    /// The opcode is unknown or not implemented by the model.
    UnknownOpcode = 0x0c0d_0001,
    /// The input is shorter than the command's layout.
    InputTooShort = 0x0c0d_0002,
    /// The output buffer is shorter than the command's output layout.
    OutputTooShort = 0x0c0d_0003,
    /// The command is not allowed in the HCA's current state (e.g. before ENABLE_HCA).
    WrongHcaState = 0x0c0d_0010,
    /// INIT_HCA before all boot and init pages were given.
    PagesMissing = 0x0c0d_0011,
    /// An op_mod value the command does not define.
    BadOpMod = 0x0c0d_0012,
    /// ISSI not supported.
    BadIssi = 0x0c0d_0013,
    /// A function id other than 0 (this function).
    BadFunctionId = 0x0c0d_0014,
    /// A page address that is not 4 KiB aligned.
    PageMisaligned = 0x0c0d_0020,
    /// A page that was already given.
    PageDuplicate = 0x0c0d_0021,
    /// A page the device cannot reach through the IOMMU.
    PageUnreachable = 0x0c0d_0022,
    /// More page entries than the input carries.
    PageCountTooLarge = 0x0c0d_0023,
    /// SET_HCA_CAP asked for a value above the maximum capability.
    CapAboveMax = 0x0c0d_0030,
    /// SET_HCA_CAP changed a read-only capability.
    CapReadOnly = 0x0c0d_0031,
    /// A referenced object (UAR, PD, EQ, CQ, ...) does not exist.
    NoSuchObject = 0x0c0d_0040,
    /// The object is still referenced by another object.
    ObjectInUse = 0x0c0d_0041,
    /// The object table is full (log_max_* reached).
    TableFull = 0x0c0d_0042,
    /// Firmware context space ran out: more pages are needed.
    NoContextSpace = 0x0c0d_0043,
    /// A queue size above the capability, or zero.
    BadQueueSize = 0x0c0d_0050,
    /// The page list does not cover the queue buffer.
    PasTooShort = 0x0c0d_0051,
    /// A page list entry or doorbell record address that is misaligned.
    BadAddress = 0x0c0d_0052,
    /// An MSI-X vector beyond the function's table.
    BadVector = 0x0c0d_0053,
    /// A queue state transition the manual does not allow.
    BadStateTransition = 0x0c0d_0054,
    /// The current state named by a MODIFY does not match the queue's state.
    StateMismatch = 0x0c0d_0055,
    /// A WQ type, stride or mode the model does not support.
    BadWqParams = 0x0c0d_0056,
    /// A TIR, RQT or flow steering parameter out of range.
    BadSteeringParams = 0x0c0d_0060,
    /// A flow index outside every group of the table.
    FlowIndexOutOfRange = 0x0c0d_0061,
    /// A flow entry whose match value sets bits outside its group's criteria.
    MatchOutsideCriteria = 0x0c0d_0062,
    /// An unsupported register or register field.
    BadRegister = 0x0c0d_0070,
    /// A memory key parameter out of range (access mode, page size, length, translations).
    BadMkeyParams = 0x0c0d_0080,
    /// A vport other than this function's own.
    BadVport = 0x0c0d_0090,
    /// A QP service type other than RC.
    UnsupportedServiceType = 0x0c0d_00a0,
    /// A QP transition from a state that does not allow it.
    BadQpTransition = 0x0c0d_00a1,
    /// A mandatory attribute of a QP transition is missing (zero where zero is not allowed).
    MissingQpAttribute = 0x0c0d_00a2,
    /// An `opt_param_mask` bit the transition does not take.
    BadQpOptParam = 0x0c0d_00a3,
    /// A path MTU that is no MTU code or above what the port carries.
    BadPathMtu = 0x0c0d_00a4,
    /// A P_Key index past the port's P_Key table.
    BadPkeyIndex = 0x0c0d_00a8,
    /// A RoCE address (GID) index past the port's table, or one that holds no address.
    BadGidIndex = 0x0c0d_00a5,
    /// RoCE is not supported, or not enabled on the vport.
    RoceDisabled = 0x0c0d_00a6,
    /// A QP attribute out of range (sizes, RDMA limits, receive queue kind).
    BadQpParams = 0x0c0d_00a7,
    /// Refused on purpose: [`crate::Fault::RefuseCommand`], [`crate::Fault::RefuseCommandAfter`].
    Refused = 0x0c0d_00f0,
}

/// A failed command: status, syndrome and what failed (for the model's log and tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmdError {
    /// Command status returned to the driver.
    pub status: CmdStatus,
    /// Syndrome returned to the driver.
    pub syndrome: Syndrome,
    /// Human-readable detail.
    pub what: &'static str,
}

impl CmdError {
    pub(crate) const fn new(status: CmdStatus, syndrome: Syndrome, what: &'static str) -> Self {
        Self {
            status,
            syndrome,
            what,
        }
    }
}

pub(crate) type CmdResult = Result<(), CmdError>;

pub(crate) const fn bad_param(syndrome: Syndrome, what: &'static str) -> CmdError {
    CmdError::new(CmdStatus::BadParameter, syndrome, what)
}

pub(crate) const fn bad_res(what: &'static str) -> CmdError {
    CmdError::new(CmdStatus::BadResource, Syndrome::NoSuchObject, what)
}

pub(crate) const fn bad_state(syndrome: Syndrome, what: &'static str) -> CmdError {
    CmdError::new(CmdStatus::BadResourceState, syndrome, what)
}

pub(crate) const fn bad_sys_state(what: &'static str) -> CmdError {
    CmdError::new(CmdStatus::BadSystemState, Syndrome::WrongHcaState, what)
}

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
    pub rc_scratch: crate::engine::rc::RcScratch,
    /// Reusable buffers of the UD transport.
    pub ud_scratch: crate::engine::ud::UdScratch,
    /// Where the receive engine reads each WQE, reused so a frame costs no zeroing.
    pub receive_scratch: ReceiveScratch,
    /// Faults armed by tests and the fault matrix.
    pub faults: crate::faults::Faults,
    /// Receives whose payload write is still in flight ([`crate::Fault::LateReceive`]).
    pub late_writes: Vec<LateWrite>,
    /// Commands whose answer is held back ([`crate::Fault::LateCommand`]).
    pub late_commands: Vec<cmdif::PendingAnswer>,
    /// CQs holding an open compressed session, written when the receive pass ends.
    pub open_sessions: Vec<u32>,
}

impl Core {
    pub fn new(cfg: EmuConfig, iommu: Arc<Iommu>, counters: Arc<Counters>) -> Self {
        let port = hca::PortState::new(&cfg);
        Self {
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
            late_commands: Vec::new(),
            open_sessions: Vec::new(),
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
        self.hca = hca::Hca::new(&self.cfg);
        self.pages = pages::Pages::default();
        self.res = Resources::new(&self.cfg);
        self.port = hca::PortState::new(&self.cfg);
        self.queue_counters.clear();
        self.faults.clear();
        // A reset stops the function's DMA: writes still in flight never land.
        self.late_writes.clear();
        self.late_commands.clear();
        self.open_sessions.clear();
        self.bus_master = false;
        self.msix_enabled = false;
    }

    /// A device read of host memory: refused while bus mastering is off.
    pub fn dma_read(&self, iova: u64, buf: &mut [u8]) -> Result<(), DmaError> {
        if !self.bus_master {
            add(&self.counters.dma_faults, 1);
            return Err(DmaError::BusMasterDisabled);
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
        self.iommu
            .write(iova, data)
            .inspect_err(|_| add(&self.counters.dma_faults, 1))
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

    /// Executes one command: `input` is the whole input (inline part and mailbox data), `output`
    /// the whole output buffer (`outlen` bytes). The status and syndrome are written here; the
    /// handler writes the rest.
    pub fn execute(&mut self, input: &[u8], output: &mut [u8]) {
        add(&self.counters.commands, 1);
        output.fill(0);
        // A command sees, and may destroy, CQs with every completion taken so far written.
        self.flush_completions();
        let result = self.dispatch(input, output);
        if let Err(err) = result {
            add(&self.counters.command_errors, 1);
            output.fill(0);
            let opcode = CmdIn::new(input).map(|h| h.opcode()).unwrap_or(0);
            let op_mod = CmdIn::new(input).map(|h| h.op_mod()).unwrap_or(0);
            log::info!(
                "function {}: command {} ({opcode:#x}) op_mod {op_mod:#x} refused: {} ({:#x}), {}",
                self.port_name(),
                Opcode::try_from(opcode)
                    .map(Opcode::name)
                    .unwrap_or("unknown"),
                err.status.name(),
                err.syndrome as u32,
                err.what
            );
        }
        // Status and syndrome go where every output has them, whatever the output's layout:
        // a command refused for its output length still says so.
        let (status, syndrome) = match result {
            Ok(()) => (CmdStatus::Ok as u8, 0),
            Err(err) => (err.status as u8, err.syndrome as u32),
        };
        if let Some(head) = output.get_mut(..CMD_STATUS_BYTES) {
            head[0] = status;
            head[4..8].copy_from_slice(&syndrome.to_be_bytes());
        }
        if let Some(trace) = &self.cfg.command_trace {
            trace.record(&self.port_name(), input, status, syndrome);
        }
        self.hca.last_error = result.err();
        pages::verify_contexts(self);
    }

    fn dispatch(&mut self, input: &[u8], output: &mut [u8]) -> CmdResult {
        let header = CmdIn::new(input).map_err(|_| {
            CmdError::new(
                CmdStatus::BadInputLength,
                Syndrome::InputTooShort,
                "input shorter than a command header",
            )
        })?;
        let opcode = header.opcode();
        if self.faults.refuses(opcode) {
            return Err(CmdError::new(
                CmdStatus::NoResources,
                Syndrome::Refused,
                "refused by an injected fault",
            ));
        }
        if output.len() < CMD_STATUS_BYTES {
            return Err(CmdError::new(
                CmdStatus::BadOutputLength,
                Syndrome::OutputTooShort,
                "output shorter than a command status and syndrome",
            ));
        }
        let opcode = Opcode::try_from(header.opcode()).map_err(|_| {
            CmdError::new(
                CmdStatus::BadOpcode,
                Syndrome::UnknownOpcode,
                "unknown opcode",
            )
        })?;
        let op_mod = header.op_mod();
        self.hca.check_allowed(opcode)?;
        match opcode {
            Opcode::EnableHca => hca::enable_hca(self, input),
            Opcode::DisableHca => hca::disable_hca(self, input),
            Opcode::QueryIssi => hca::query_issi(self, output),
            Opcode::SetIssi => hca::set_issi(self, input),
            Opcode::QueryPages => hca::query_pages(self, input, output),
            Opcode::ManagePages => pages::manage_pages(self, input, output),
            Opcode::QueryHcaCap => caps::query_hca_cap(self, op_mod, output),
            Opcode::QueryAdapter => hca::query_adapter(self, input, output),
            Opcode::SetDriverVersion => hca::set_driver_version(self, input),
            Opcode::SetHcaCap => caps::set_hca_cap(self, op_mod, input),
            Opcode::InitHca => hca::init_hca(self),
            Opcode::TeardownHca => hca::teardown_hca(self, output),
            Opcode::AccessReg => hca::access_reg(self, input, output),
            Opcode::QueryNicVportContext => hca::query_nic_vport_context(self, input, output),
            Opcode::ModifyNicVportContext => hca::modify_nic_vport_context(self, input),
            Opcode::QueryHcaVportPkey => hca::query_hca_vport_pkey(self, input, output),
            Opcode::QueryVportState => hca::query_vport_state(self, input, output),
            Opcode::QueryVportCounter => hca::query_vport_counter(self, input, output),
            Opcode::AllocUar => transport::alloc_uar(self, output),
            Opcode::DeallocUar => transport::dealloc_uar(self, input),
            Opcode::AllocPd => transport::alloc_pd(self, output),
            Opcode::DeallocPd => transport::dealloc_pd(self, input),
            Opcode::AllocXrcd => transport::alloc_xrcd(self, output),
            Opcode::DeallocXrcd => transport::dealloc_xrcd(self, input),
            Opcode::AllocTransportDomain => transport::alloc_td(self, output),
            Opcode::DeallocTransportDomain => transport::dealloc_td(self, input),
            Opcode::CreateEq => queues::create_eq(self, input, output),
            Opcode::DestroyEq => queues::destroy_eq(self, input),
            Opcode::CreateCq => queues::create_cq(self, input, output),
            Opcode::DestroyCq => queues::destroy_cq(self, input),
            Opcode::CreateSq => queues::create_sq(self, input, output),
            Opcode::ModifySq => queues::modify_sq(self, input),
            Opcode::QuerySq => queues::query_sq(self, input, output),
            Opcode::DestroySq => queues::destroy_sq(self, input),
            Opcode::CreateRq => queues::create_rq(self, input, output),
            Opcode::ModifyRq => queues::modify_rq(self, input),
            Opcode::QueryRq => queues::query_rq(self, input, output),
            Opcode::DestroyRq => queues::destroy_rq(self, input),
            Opcode::CreateRmp => queues::create_rmp(self, input, output),
            Opcode::ModifyRmp => queues::modify_rmp(self, input),
            Opcode::QueryRmp => queues::query_rmp(self, input, output),
            Opcode::DestroyRmp => queues::destroy_rmp(self, input),
            Opcode::CreateTis => transport::create_tis(self, input, output),
            Opcode::DestroyTis => transport::destroy_tis(self, input),
            Opcode::CreateTir => transport::create_tir(self, input, output),
            Opcode::ModifyTir => transport::modify_tir(self, input),
            Opcode::DestroyTir => transport::destroy_tir(self, input),
            Opcode::CreateRqt => transport::create_rqt(self, input, output),
            Opcode::ModifyRqt => transport::modify_rqt(self, input),
            Opcode::DestroyRqt => transport::destroy_rqt(self, input),
            Opcode::CreateFlowTable => steering::create_flow_table(self, input, output),
            Opcode::DestroyFlowTable => steering::destroy_flow_table(self, input),
            Opcode::CreateFlowGroup => steering::create_flow_group(self, input, output),
            Opcode::DestroyFlowGroup => steering::destroy_flow_group(self, input),
            Opcode::SetFlowTableEntry => steering::set_fte(self, input),
            Opcode::DeleteFlowTableEntry => steering::delete_fte(self, input),
            Opcode::SetFlowTableRoot => steering::set_root(self, input),
            Opcode::CreateMkey => mkey::create_mkey(self, input, output),
            Opcode::QueryMkey => mkey::query_mkey(self, input, output),
            Opcode::DestroyMkey => mkey::destroy_mkey(self, input),
            Opcode::QuerySpecialContexts => mkey::query_special_contexts(output),
            Opcode::AllocQCounter => qcounters::alloc_q_counter(self, output),
            Opcode::DeallocQCounter => qcounters::dealloc_q_counter(self, input),
            Opcode::QueryQCounter => qcounters::query_q_counter(self, input, output),
            Opcode::CreateQp => qp::create_qp(self, input, output),
            Opcode::Rst2initQp
            | Opcode::Init2rtrQp
            | Opcode::Rtr2rtsQp
            | Opcode::Rts2rtsQp
            | Opcode::Sqerr2rtsQp
            | Opcode::Qp2errQp
            | Opcode::Qp2rstQp => qp::modify_qp(self, opcode, input),
            Opcode::QueryQp => qp::query_qp(self, input, output),
            Opcode::DestroyQp => qp::destroy_qp(self, input),
            Opcode::CreateXrcSrq => xrc::create_xrc_srq(self, input, output),
            Opcode::DestroyXrcSrq => xrc::destroy_xrc_srq(self, input),
            Opcode::SetRoceAddress => roce::set_roce_address(self, input),
            Opcode::QueryRoceAddress => roce::query_roce_address(self, input, output),
            Opcode::Nop => Ok(()),
            _ => Err(CmdError::new(
                CmdStatus::BadOpcode,
                Syndrome::UnknownOpcode,
                "opcode not implemented by the model",
            )),
        }
    }
}

/// Views `input` as layout `L`, or fails with BAD_INP_LEN.
macro_rules! input_as {
    ($ty:ty, $input:expr) => {
        <$ty>::new($input).map_err(|_| {
            $crate::fw::CmdError::new(
                cxdirect_hw::cmd::CmdStatus::BadInputLength,
                $crate::fw::Syndrome::InputTooShort,
                concat!("input shorter than ", stringify!($ty)),
            )
        })?
    };
}

/// Views `output` as layout `L`, or fails with BAD_OUTP_LEN.
macro_rules! output_as {
    ($ty:ty, $output:expr) => {
        <$ty>::new(&mut $output[..]).map_err(|_| {
            $crate::fw::CmdError::new(
                cxdirect_hw::cmd::CmdStatus::BadOutputLength,
                $crate::fw::Syndrome::OutputTooShort,
                concat!("output shorter than ", stringify!($ty)),
            )
        })?
    };
}
pub(crate) use {input_as, output_as};
