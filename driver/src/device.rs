//! A ConnectX function brought up and owned by the driver: the bring-up sequence (wait for
//! firmware, command interface, ENABLE_HCA, ISSI, boot pages, capabilities, init pages,
//! INIT_HCA, UAR, PD, transport domain, async EQ on MSI-X vector 0), firmware page requests,
//! health monitoring, and teardown.

use crate::backend::{Backend, Interrupt};
use crate::cmd::{input, CmdQueue};
use crate::eq::{Event, EventQueue};
use crate::error::{DriverError, HealthFailure};
use crate::pages::FwPages;
use cxdirect_dma::{DmaRegion, Iommu, IovaAllocator, PageKind};
use cxdirect_hw::caps::{port_type, CmdHcaCap, PerProtocolNetworkingOffloadCaps};
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::eq::{CreateEqIn, CreateEqOut};
use cxdirect_hw::eqe::{event_bit, EventType};
use cxdirect_hw::hca::{
    self, cap_type, query_cap_op_mod, QueryHcaCapOut, QueryIssiOut, QueryPagesOut,
};
use cxdirect_hw::init_seg;
use cxdirect_hw::reg::{self, AccessRegisterIn, PaosReg, PmtuReg};
use cxdirect_hw::vport::{QueryNicVportContextOut, QueryVportStateOut, VPORT_STATE_UP};
use cxdirect_hw::wq::{QueryRmpOut, RmpState};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod reset;
pub use reset::DeviceRecovery;

/// Bring-up and runtime settings.
#[derive(Debug, Clone)]
pub struct Options {
    /// How long to wait for firmware to clear `initializing` (default 120 s, as Linux waits).
    pub init_timeout: Duration,
    /// Default time a command may take before it is reported as timed out (default 60 s).
    pub cmd_timeout: Duration,
    /// MSI-X vectors to enable (1..=2048; vector 0 carries async events; default 1).
    pub msix_vectors: u16,
    /// A health counter unchanged for longer than this marks the device failed (default 6 s).
    pub health_stall: Duration,
    /// Log2 of the async EQ's size (default 7: 128 entries).
    pub async_eq_log_size: u8,
    /// Most firmware pages (4 KiB each) the driver gives the device in all (default 262,144:
    /// 1 GiB). Requests past it are refused and counted in [`DeviceInfo::pages_refused`], so a
    /// device asking for absurd amounts cannot exhaust host memory.
    pub max_firmware_pages: usize,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            init_timeout: Duration::from_secs(120),
            cmd_timeout: Duration::from_secs(60),
            msix_vectors: 1,
            health_stall: Duration::from_secs(6),
            async_eq_log_size: 7,
            max_firmware_pages: 1 << 18,
        }
    }
}

/// What bring-up learned and did, for tools such as `cxdirect-info`.
#[derive(Debug, Clone, Default)]
pub struct DeviceInfo {
    /// Firmware version (major, minor, subminor).
    pub fw_version: (u16, u16, u16),
    /// Command interface revision (always 5 once up).
    pub cmdif_rev: u16,
    /// Pages given at boot.
    pub pages_boot: usize,
    /// Pages given before INIT_HCA.
    pub pages_init: usize,
    /// Pages given later on firmware request.
    pub pages_regular: usize,
    /// Pages taken back on firmware request.
    pub pages_returned: usize,
    /// Pages the firmware asked for past [`Options::max_firmware_pages`], not given.
    pub pages_refused: usize,
    /// Pages offered by a MANAGE_PAGES give that failed after reaching the device (a timeout,
    /// or an answer that failed a check or said it failed, which a damaged answer can say
    /// wrongly): the device may hold them, so they stay counted in [`Device::pages_held`] and
    /// are freed only once the device returns them or a function reset takes them back.
    pub pages_in_doubt: usize,
    /// Wall time of the bring-up sequence.
    pub bringup: Duration,
    /// Function resets done by [`Device::recover`] (and by a teardown that had to reset the
    /// function to get its pages back).
    pub resets: u64,
    /// Permanent MAC address of the port.
    pub mac: [u8; 6],
    /// Port operational state.
    pub link_up: bool,
    /// Port MTU in bytes (PMTU oper_mtu: L2 header and FCS included).
    pub port_mtu: u16,
    /// Interrupts seen on the async EQ's vector.
    pub async_interrupts: u64,
}

/// Counts of async events handled.
#[derive(Debug, Clone, Copy, Default)]
pub struct EventCounts {
    /// Command completion events.
    pub cmd: u64,
    /// Page requests served (give or take).
    pub page_requests: u64,
    /// Port state changes.
    pub port_changes: u64,
    /// CQ errors.
    pub cq_errors: u64,
    /// Queue errors.
    pub queue_errors: u64,
    /// Limit events.
    pub limits: u64,
    /// Events with invalid contents (skipped).
    pub invalid: u64,
}

/// What teardown returned.
#[derive(Debug, Clone, Copy, Default)]
pub struct TeardownReport {
    /// Firmware pages reclaimed.
    pub pages_reclaimed: usize,
    /// Firmware pages the device did not return that a function reset then took back (freed
    /// once the reset returned).
    pub pages_released_by_reset: usize,
    /// Firmware pages the device never returned and no reset could take back (the function
    /// has no reset method): their memory and mappings are leaked on purpose so the device
    /// cannot write freed memory.
    pub pages_kept: usize,
    /// Commands the device took and never answered, ended by that same function reset (their
    /// slots and mailboxes freed once it returned); with no reset they are leaked on purpose,
    /// as the pages are.
    pub commands_unanswered: usize,
}

/// A shared receive ring as the device reports it (QUERY_RMP).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RmpStatus {
    /// Ready or in error.
    pub state: RmpState,
    /// The armed low watermark in buffers; 0 when disarmed (after it fired).
    pub limit: u32,
    /// Buffers posted and not yet consumed by the device.
    pub posted: u32,
}

struct Health {
    last_counter: u32,
    last_change: Instant,
    failed: Option<HealthFailure>,
}

/// A ConnectX function, brought up and owned by the driver.
pub struct Device<B: Backend> {
    backend: Arc<B>,
    iommu: Arc<dyn Iommu>,
    iovas: Arc<IovaAllocator>,
    cmd: CmdQueue,
    pages: FwPages,
    options: Options,
    caps_general: [u8; 0x100],
    caps_ethernet: [u8; 0x100],
    uar: u32,
    pd: u32,
    td: u32,
    eq: Option<EventQueue>,
    interrupts: Vec<Interrupt>,
    health: Health,
    pending_pages: Vec<i32>,
    /// Events seen but not yet returned by `poll_events` (bounded).
    unreported: Vec<Event>,
    events: EventCounts,
    info: DeviceInfo,
    /// Shared receive rings (RMP number, entries) whose limit events the driver reports.
    shared_rings: Vec<(u32, u32)>,
    /// Memory keys the device translates through.
    keys: Vec<crate::mkey::RegisteredKey>,
    /// CQs a CQ error event named (number, syndrome), until the port takes them; bounded by
    /// [`MAX_FAILED_CQS`] so a device naming CQs at random cannot grow it.
    failed_cqs: Vec<(u32, u8)>,
    /// Shared rings (RMP numbers) an SRQ catastrophic error event named, until the port takes
    /// them; only rings this driver registered, so it stays as short as their list.
    failed_rings: Vec<u32>,
    torn_down: bool,
}

/// Most CQ errors remembered until the port takes them.
const MAX_FAILED_CQS: usize = 64;

/// The event types the driver's async EQ subscribes to.
pub const ASYNC_EVENTS: [EventType; 10] = [
    EventType::Cmd,
    EventType::PageRequest,
    EventType::PortChange,
    EventType::CqError,
    EventType::WqCatastrophicError,
    EventType::WqInvalidRequestError,
    EventType::WqAccessError,
    EventType::SrqCatastrophicError,
    EventType::SrqRqLimit,
    EventType::InternalError,
];

impl<B: Backend> Device<B> {
    /// Brings the function up.
    pub fn bring_up(backend: B, options: Options) -> Result<Self, DriverError> {
        let started = Instant::now();
        let backend = Arc::new(backend);
        let cmdif = wake_firmware(&*backend, options.init_timeout)?;
        let cmdif_rev = (cmdif >> 16) as u16;
        let fw_rev = u32::from_be_bytes(backend.read32(init_seg::FW_REV));
        let iommu = backend.iommu();
        let iovas = Arc::new(
            IovaAllocator::new(&iommu.iova_ranges()).map_err(cxdirect_dma::DmaError::from)?,
        );
        let cmd = CmdQueue::new(&*backend, iommu.clone(), iovas.clone())?;
        let counter = health_counter(&*backend);
        let mut dev = Self {
            pages: FwPages::new(iommu.clone(), iovas.clone()),
            backend,
            iommu,
            iovas,
            cmd,
            options,
            caps_general: [0; 0x100],
            caps_ethernet: [0; 0x100],
            uar: 0,
            pd: 0,
            td: 0,
            eq: None,
            interrupts: Vec::new(),
            health: Health {
                last_counter: counter,
                last_change: Instant::now(),
                failed: None,
            },
            pending_pages: Vec::new(),
            unreported: Vec::new(),
            events: EventCounts::default(),
            info: DeviceInfo {
                fw_version: (
                    (fw_rev & 0xffff) as u16,
                    (fw_rev >> 16) as u16,
                    (cmdif & 0xffff) as u16,
                ),
                cmdif_rev,
                ..DeviceInfo::default()
            },
            shared_rings: Vec::new(),
            failed_cqs: Vec::new(),
            failed_rings: Vec::new(),
            keys: Vec::new(),
            torn_down: false,
        };
        dev.setup_function()?;
        dev.info.bringup = started.elapsed();
        Ok(dev)
    }

    fn setup_function(&mut self) -> Result<(), DriverError> {
        self.exec(&input(Opcode::EnableHca, 0, 16), 16)?;
        let out = self.exec(
            &input(Opcode::QueryIssi, 0, 16),
            QueryIssiOut::<&[u8]>::SIZE,
        )?;
        if QueryIssiOut::new(&out[..])
            .map(|o| o.supported_issi_dw0() & 0b10 != 0)
            .unwrap_or(false)
        {
            let mut set = input(Opcode::SetIssi, 0, 16);
            hca::SetIssiIn::new(&mut set[..])
                .map(|mut s| {
                    s.set_current_issi(1);
                })
                .ok();
            self.exec(&set, 16)?;
        }
        self.info.pages_boot = self.satisfy_startup_pages(hca::query_pages_op_mod::BOOT)?;
        self.caps_general = self.query_caps(cap_type::GENERAL_DEVICE, true)?;
        let general = CmdHcaCap::new(&self.caps_general[..]).map_err(|_| bad_caps())?;
        if general.port_type() != port_type::ETHERNET {
            return Err(DriverError::Invalid(
                "the port is not Ethernet (port_type InfiniBand): set LINK_TYPE to ETH with mlxconfig".into(),
            ));
        }
        self.set_caps()?;
        self.caps_ethernet = self.query_caps(cap_type::ETHERNET_OFFLOADS, true)?;
        self.info.pages_init = self.satisfy_startup_pages(hca::query_pages_op_mod::INIT)?;
        self.exec(&input(Opcode::InitHca, 0, 16), 16)?;
        self.uar = self.alloc_id(Opcode::AllocUar, |o| {
            hca::AllocUarOut::new(o).map(|o| o.uar())
        })?;
        self.pd = self.alloc_id(Opcode::AllocPd, |o| hca::AllocPdOut::new(o).map(|o| o.pd()))?;
        self.td = self.alloc_id(Opcode::AllocTransportDomain, |o| {
            hca::AllocTransportDomainOut::new(o).map(|o| o.transport_domain())
        })?;
        self.interrupts = self.backend.enable_msix(self.options.msix_vectors.max(1))?;
        self.create_async_eq()?;
        self.serve_page_requests()?;
        self.refresh_port()?;
        Ok(())
    }

    fn alloc_id(
        &mut self,
        op: Opcode,
        get: impl Fn(&[u8]) -> Result<u32, cxdirect_hw::LayoutError>,
    ) -> Result<u32, DriverError> {
        let out = self.exec(&input(op, 0, 16), 16)?;
        get(&out).map_err(|_| DriverError::BadDeviceValue {
            what: "allocation output",
            value: out.len() as u64,
        })
    }

    fn query_caps(&mut self, kind: u16, current: bool) -> Result<[u8; 0x100], DriverError> {
        let out = self.exec(
            &input(Opcode::QueryHcaCap, query_cap_op_mod(kind, current), 16),
            QueryHcaCapOut::<&[u8]>::SIZE,
        )?;
        let mut caps = [0u8; 0x100];
        caps.copy_from_slice(&out[0x10..0x110]);
        Ok(caps)
    }

    fn set_caps(&mut self) -> Result<(), DriverError> {
        let mut set = input(
            Opcode::SetHcaCap,
            hca::set_cap_op_mod(cap_type::GENERAL_DEVICE),
            hca::SetHcaCapIn::<&[u8]>::SIZE,
        );
        set[0x10..0x110].copy_from_slice(&self.caps_general);
        if let Ok(mut caps) = CmdHcaCap::new(&mut set[0x10..0x110]) {
            // Checksums cost a pass over every command; the PCIe link already protects it.
            caps.set_cmdif_checksum(0).set_log_uar_page_sz(0);
        }
        self.exec(&set, 16)?;
        self.caps_general.copy_from_slice(&set[0x10..0x110]);
        Ok(())
    }

    /// QUERY_PAGES for boot or init pages and gives them; returns the count.
    fn satisfy_startup_pages(&mut self, op_mod: u16) -> Result<usize, DriverError> {
        let out = self.exec(&input(Opcode::QueryPages, op_mod, 16), 16)?;
        let pages = QueryPagesOut::new(&out[..])
            .map(|o| o.num_pages_signed())
            .unwrap_or(-1);
        if pages < 0 || pages as usize > self.options.max_firmware_pages {
            return Err(DriverError::BadDeviceValue {
                what: "startup page count (negative, or past Options::max_firmware_pages)",
                value: pages as u64,
            });
        }
        self.give_pages(pages as usize)?;
        Ok(pages as usize)
    }

    fn give_pages(&mut self, count: usize) -> Result<(), DriverError> {
        if count == 0 {
            return Ok(());
        }
        let pages = self.pages.alloc(count)?;
        let mut cmd = input(
            Opcode::ManagePages,
            hca::manage_pages_op_mod::GIVE,
            16 + 8 * count,
        );
        {
            let mut m = hca::ManagePagesIn::new(&mut cmd[..])
                .map_err(|_| DriverError::Invalid("page list".into()))?;
            m.set_input_num_entries(count as u32);
            for (i, &p) in pages.iter().enumerate() {
                let _ = m.set_pas(i, p);
            }
        }
        if let Err(e) = self.exec(&cmd, 16) {
            if matches!(&e, DriverError::Command(c) if c.failure.reached_device()) {
                self.info.pages_in_doubt += count;
            } else {
                // Never posted: the device cannot have them.
                self.pages.release(&pages);
            }
            return Err(e);
        }
        Ok(())
    }

    /// Asks for `count` pages back; returns how many came back. Refuses (and takes none of) an
    /// answer that claims more pages than asked or pages never given.
    fn take_pages(&mut self, count: usize) -> Result<usize, DriverError> {
        let mut cmd = input(Opcode::ManagePages, hca::manage_pages_op_mod::TAKE, 16);
        hca::ManagePagesIn::new(&mut cmd[..])
            .map(|mut m| {
                m.set_input_num_entries(count as u32);
            })
            .ok();
        let out = self.exec(&cmd, 16 + 8 * count)?;
        let out = hca::ManagePagesOut::new(&out[..])
            .map_err(|_| DriverError::Invalid("page list".into()))?;
        let returned = out.output_num_entries() as usize;
        if returned > count {
            return Err(DriverError::BadDeviceValue {
                what: "page count returned (more than asked)",
                value: returned as u64,
            });
        }
        let mut pages = Vec::with_capacity(returned);
        for i in 0..returned {
            pages.push(out.pas(i).map_err(|_| DriverError::BadDeviceValue {
                what: "page list length",
                value: i as u64,
            })?);
        }
        self.pages.check_returned(&pages)?;
        self.pages.release(&pages);
        Ok(returned)
    }

    fn create_async_eq(&mut self) -> Result<(), DriverError> {
        let bitmask = ASYNC_EVENTS.iter().fold(0, |m, e| m | event_bit(*e));
        let log = self.options.async_eq_log_size;
        let mut eq = self.create_eq(log, bitmask, 0)?;
        eq.arm(&*self.backend);
        self.eq = Some(eq);
        Ok(())
    }

    /// Creates an EQ of 2^`log_size` entries (clamped to 16..=4096) taking the events in
    /// `bitmask` (completion events need none: CQs name their EQ) and signalling MSI-X `vector`.
    /// The caller arms it.
    pub(crate) fn create_eq(
        &mut self,
        log_size: u8,
        bitmask: u64,
        vector: u16,
    ) -> Result<EventQueue, DriverError> {
        if usize::from(vector) >= self.interrupts.len() || vector > 255 {
            return Err(DriverError::Invalid(format!(
                "MSI-X vector {vector} is not enabled ({} are): raise Options::msix_vectors",
                self.interrupts.len()
            )));
        }
        let log = log_size.clamp(4, 12);
        let len = (64usize << log).max(4096);
        let region = DmaRegion::new(self.iommu.clone(), &self.iovas, len, PageKind::Small)?;
        // Every entry starts owned by hardware: owner bit set, so the first pass reads none.
        for i in 0..(1usize << log) {
            region.write(i * 64 + 63, &[1])?;
        }
        let mut cmd = input(Opcode::CreateEq, 0, CreateEqIn::<&[u8]>::SIZE + 8);
        {
            let mut c =
                CreateEqIn::new(&mut cmd[..]).map_err(|_| DriverError::Invalid("EQ".into()))?;
            c.set_event_bitmask(bitmask);
            c.eq_context_entry_mut()
                .set_log_eq_size(log)
                .set_uar_page(self.uar)
                .set_intr(vector as u8)
                .set_log_page_size((len.trailing_zeros() - 12) as u8);
            let _ = c.set_pas(0, region.iova());
        }
        let out = self.exec(&cmd, 16)?;
        let eqn = CreateEqOut::new(&out[..])
            .map(|o| u32::from(o.eq_number()))
            .map_err(|_| DriverError::BadDeviceValue {
                what: "CREATE_EQ output length",
                value: out.len() as u64,
            })?;
        Ok(EventQueue::new(region, log, eqn, self.uar))
    }

    /// DESTROY_EQ.
    pub(crate) fn destroy_eq(&mut self, eqn: u32) -> Result<(), DriverError> {
        let mut cmd = input(Opcode::DestroyEq, 0, 16);
        cmd[0xb] = eqn as u8;
        self.exec(&cmd, 16).map(|_| ())
    }

    /// A second handle on MSI-X `vector`'s eventfd (`None` when the vector is not enabled).
    pub(crate) fn interrupt(&self, vector: u16) -> Result<Option<Interrupt>, DriverError> {
        match self.interrupts.get(usize::from(vector)) {
            Some(irq) => Ok(Some(irq.try_clone()?)),
            None => Ok(None),
        }
    }

    /// MSI-X vectors enabled (vector 0 carries async events, the rest are free for receive
    /// interrupts).
    pub fn msix_vectors(&self) -> usize {
        self.interrupts.len()
    }

    /// The async event queue's eventfd (MSI-X vector 0): readable when the device has posted an
    /// event — a shared ring's low watermark, a page request, a port change, an error. Wait on
    /// it (poll, epoll), then call [`Device::poll_events`].
    pub fn event_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        self.interrupts.first().map(|irq| irq.as_fd())
    }

    /// Sleeps until the async event queue's vector fires or `timeout` passes; returns the
    /// interrupts taken (0 on timeout). Then call [`Device::poll_events`].
    pub fn wait_event(&mut self, timeout: Duration) -> u64 {
        let fired = self.interrupts.first().map_or(0, |irq| irq.wait(timeout));
        self.info.async_interrupts += fired;
        fired
    }

    /// Starts reporting limit events of the shared ring `rmpn` (of `entries` buffers).
    pub(crate) fn register_shared_ring(&mut self, rmpn: u32, entries: u32) {
        self.shared_rings.push((rmpn, entries));
    }

    /// Stops reporting limit events of the shared ring `rmpn`.
    pub(crate) fn unregister_shared_ring(&mut self, rmpn: u32) {
        self.shared_rings.retain(|&(n, _)| n != rmpn);
        self.failed_rings.retain(|&n| n != rmpn);
    }

    /// QUERY_RMP: the ring's state, armed limit and posted buffers as the device sees them,
    /// checked against the ring's size.
    pub(crate) fn query_rmp(&mut self, rmpn: u32) -> Result<RmpStatus, DriverError> {
        let entries = self
            .shared_rings
            .iter()
            .find(|&&(n, _)| n == rmpn)
            .map(|&(_, e)| e)
            .ok_or_else(|| DriverError::Invalid(format!("no shared ring {rmpn} on this device")))?;
        let mut cmd = input(Opcode::QueryRmp, 0, 16);
        cmd[8..12].copy_from_slice(&rmpn.to_be_bytes());
        let out = self.exec(&cmd, QueryRmpOut::<&[u8]>::SIZE)?;
        let out = QueryRmpOut::new(&out[..]).map_err(|_| DriverError::BadDeviceValue {
            what: "QUERY_RMP output length",
            value: out.len() as u64,
        })?;
        let ctx = out.rmp_context();
        let wq = ctx.wq();
        let posted = u32::from((wq.sw_counter() as u16).wrapping_sub(wq.hw_counter() as u16));
        if posted > entries {
            return Err(DriverError::BadDeviceValue {
                what: "shared ring posted count (QUERY_RMP counters)",
                value: u64::from(posted),
            });
        }
        let limit = u32::from(wq.lwm());
        if limit > entries {
            return Err(DriverError::BadDeviceValue {
                what: "shared ring limit (QUERY_RMP lwm)",
                value: u64::from(limit),
            });
        }
        let state = match RmpState::try_from(ctx.state()) {
            Ok(state) => state,
            Err(_) => {
                return Err(DriverError::BadDeviceValue {
                    what: "shared ring state (QUERY_RMP)",
                    value: u64::from(ctx.state()),
                })
            }
        };
        Ok(RmpStatus {
            state,
            limit,
            posted,
        })
    }

    /// Reads the port's MAC, state and MTU.
    fn refresh_port(&mut self) -> Result<(), DriverError> {
        let out = self.exec(
            &input(Opcode::QueryNicVportContext, 0, 16),
            QueryNicVportContextOut::<&[u8]>::SIZE,
        )?;
        if let Ok(o) = QueryNicVportContextOut::new(&out[..]) {
            let mac = o.nic_vport_context().permanent_address().mac();
            self.info.mac.copy_from_slice(&mac.to_be_bytes()[2..]);
        }
        let out = self.exec(&input(Opcode::QueryVportState, 0, 16), 16)?;
        self.info.link_up = QueryVportStateOut::new(&out[..])
            .map(|o| o.state() == VPORT_STATE_UP)
            .unwrap_or(false);
        let reply = self.access_reg(reg::REG_PMTU, false, &[0u8; 16])?;
        self.info.port_mtu = PmtuReg::new(&reply[..]).map(|r| r.oper_mtu()).unwrap_or(0);
        Ok(())
    }

    /// ACCESS_REG: reads or writes a port register; returns the register's contents.
    pub fn access_reg(
        &mut self,
        register: u16,
        write: bool,
        data: &[u8; 16],
    ) -> Result<[u8; 16], DriverError> {
        let op_mod = if write {
            reg::ACCESS_REG_OP_MOD_WRITE
        } else {
            reg::ACCESS_REG_OP_MOD_READ
        };
        let mut cmd = input(Opcode::AccessReg, op_mod, 0x20);
        AccessRegisterIn::new(&mut cmd[..])
            .map(|mut a| {
                a.set_register_id(register);
            })
            .ok();
        cmd[0x10..0x20].copy_from_slice(data);
        let out = self.exec(&cmd, 0x20)?;
        let mut reply = [0u8; 16];
        reply.copy_from_slice(&out[0x10..0x20]);
        Ok(reply)
    }

    /// Sets the port administratively up or down (PAOS).
    pub fn set_port_admin(&mut self, up: bool) -> Result<(), DriverError> {
        let mut data = [0u8; 16];
        if let Ok(mut paos) = PaosReg::new(&mut data[..]) {
            paos.set_local_port(1)
                .set_ase(true)
                .set_admin_status(if up {
                    reg::PORT_STATUS_UP
                } else {
                    reg::PORT_STATUS_DOWN
                });
        }
        self.access_reg(reg::REG_PAOS, true, &data)?;
        self.refresh_port()
    }

    /// Runs a command: input bytes in, output bytes (`outlen`) out, after checking the device's
    /// health. Async events seen while waiting are handled; page requests are served afterwards.
    pub fn exec(&mut self, input: &[u8], outlen: usize) -> Result<Vec<u8>, DriverError> {
        self.exec_with_timeout(input, outlen, self.options.cmd_timeout)
    }

    /// As [`Device::exec`] with an explicit timeout.
    pub fn exec_with_timeout(
        &mut self,
        input: &[u8],
        outlen: usize,
        timeout: Duration,
    ) -> Result<Vec<u8>, DriverError> {
        self.ensure_healthy()?;
        let result = {
            let Self {
                cmd,
                eq,
                backend,
                interrupts,
                events,
                pending_pages,
                info,
                ..
            } = self;
            let backend_ref: &B = backend;
            let mut seen = Vec::new();
            let mut idle = || -> bool {
                let (Some(eq), Some(irq)) = (eq.as_mut(), interrupts.first()) else {
                    return false;
                };
                // Event mode: sleep until the EQ's vector fires (briefly: polling covers a lost
                // interrupt), then take the events.
                let fired = irq.wait(Duration::from_millis(1));
                info.async_interrupts += fired;
                seen.clear();
                eq.poll(backend_ref, &mut seen);
                for ev in &seen {
                    record(events, pending_pages, *ev);
                }
                true
            };
            cmd.exec(backend_ref, input, outlen, timeout, &mut idle)
        };
        // Completion events of commands that finished before any wait, and anything else the
        // EQ gathered, are taken now so the EQ never fills.
        self.drain_events();
        if let Err(DriverError::Command(e)) = &result {
            if matches!(e.failure, crate::error::CmdFailure::Timeout(_)) {
                self.check_health()?;
            }
        }
        result
    }

    /// Handles pending async events: page requests (give or take), port changes, errors.
    /// Returns the events seen since the last call.
    pub fn poll_events(&mut self) -> Result<Vec<Event>, DriverError> {
        self.ensure_healthy()?;
        self.drain_events();
        self.serve_page_requests()?;
        let mut events = std::mem::take(&mut self.unreported);
        for ev in &mut events {
            if let Event::SharedRingLow { ring, posted } = ev {
                *posted = self.query_rmp(*ring)?.posted;
            }
        }
        Ok(events)
    }

    /// True when events were taken from the async EQ (while a command waited) but not yet
    /// returned by [`Device::poll_events`]: their interrupt has already been consumed, so call
    /// `poll_events` before sleeping on [`Device::event_fd`] again.
    pub fn events_pending(&self) -> bool {
        !self.unreported.is_empty()
    }

    /// Takes the async EQ's entries (without commands or a health check, so that a port can
    /// look for failed CQs on every burst) and returns, once, each CQ a CQ error event named
    /// since the last call: (CQ number, syndrome). The numbers are the device's word: the
    /// caller acts only on CQs it created.
    pub(crate) fn take_failed_cqs(&mut self) -> Vec<(u32, u8)> {
        self.drain_events();
        std::mem::take(&mut self.failed_cqs)
    }

    /// As [`Device::take_failed_cqs`], for the shared rings (RMP numbers) an SRQ catastrophic
    /// error event named; only rings this driver registered are kept.
    pub(crate) fn take_failed_rings(&mut self) -> Vec<u32> {
        self.drain_events();
        std::mem::take(&mut self.failed_rings)
    }

    /// Takes the async EQ's entries and interrupt count, recording the events.
    fn drain_events(&mut self) {
        let Some(eq) = self.eq.as_mut() else { return };
        if let Some(irq) = self.interrupts.first() {
            self.info.async_interrupts += irq.take();
        }
        let start = self.unreported.len();
        eq.poll(&*self.backend, &mut self.unreported);
        for ev in &mut self.unreported[start..] {
            if let Event::SharedRingLow { ring, .. } = *ev {
                // Only a ring this driver created may be named.
                if !self.shared_rings.iter().any(|&(n, _)| n == ring) {
                    *ev = Event::Invalid {
                        raw_type: EventType::SrqRqLimit as u8,
                    };
                }
            }
            record(&mut self.events, &mut self.pending_pages, *ev);
            if let Event::CqError { cqn, syndrome } = *ev {
                // Kept apart from `unreported`: whoever polls events, the port that owns the
                // CQ must still learn that it failed.
                if !self.failed_cqs.iter().any(|&(n, _)| n == cqn)
                    && self.failed_cqs.len() < MAX_FAILED_CQS
                {
                    self.failed_cqs.push((cqn, syndrome));
                }
            }
            if let Event::QueueError {
                kind: EventType::SrqCatastrophicError,
                number,
            } = *ev
            {
                if self.shared_rings.iter().any(|&(n, _)| n == number)
                    && !self.failed_rings.contains(&number)
                {
                    self.failed_rings.push(number);
                }
            }
            if let Event::PortChange { up } = ev {
                self.info.link_up = *up;
            }
        }
        // Command completions are bookkeeping, not news for the caller.
        self.unreported.retain(|e| !matches!(e, Event::Cmd { .. }));
        if self.unreported.len() > 4096 {
            self.unreported.drain(..self.unreported.len() - 4096);
        }
    }

    fn serve_page_requests(&mut self) -> Result<(), DriverError> {
        while let Some(pages) = self.pending_pages.pop() {
            if pages > 0 {
                let room = self
                    .options
                    .max_firmware_pages
                    .saturating_sub(self.pages.held());
                let give = (pages as usize).min(room);
                self.info.pages_refused += pages as usize - give;
                self.give_pages(give)?;
                self.info.pages_regular += give;
            } else if pages < 0 {
                let count = pages.unsigned_abs() as usize;
                self.info.pages_returned += self.take_pages(count.min(self.pages.held()))?;
            }
        }
        Ok(())
    }

    /// Checks the health buffer and counter; a failure is sticky until recovery.
    pub fn check_health(&mut self) -> Result<(), DriverError> {
        if let Some(f) = self.health.failed {
            return Err(DriverError::Failed(f));
        }
        let fw = u32::from_be_bytes(self.backend.read32(init_seg::HEALTH_FW_VER));
        let failure = if fw == init_seg::DEAD_READ {
            Some(HealthFailure::NotResponding)
        } else {
            let synd_word = u32::from_be_bytes(self.backend.read32(init_seg::HEALTH_SYND & !3));
            let synd = (synd_word >> 16) as u8;
            let counter = health_counter(&*self.backend);
            if synd != 0 {
                Some(HealthFailure::Syndrome(synd))
            } else if counter != self.health.last_counter {
                self.health.last_counter = counter;
                self.health.last_change = Instant::now();
                None
            } else if self.health.last_change.elapsed() > self.options.health_stall {
                Some(HealthFailure::CounterStalled)
            } else {
                None
            }
        };
        if let Some(f) = failure {
            self.health.failed = Some(f);
            return Err(DriverError::Failed(f));
        }
        Ok(())
    }

    fn ensure_healthy(&self) -> Result<(), DriverError> {
        match self.health.failed {
            Some(f) => Err(DriverError::Failed(f)),
            None => Ok(()),
        }
    }

    /// What bring-up learned, and page counts so far.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// Async events handled so far.
    pub fn event_counts(&self) -> EventCounts {
        self.events
    }

    /// The general device capabilities in force.
    pub fn caps(&self) -> CmdHcaCap<&[u8]> {
        CmdHcaCap::new(&self.caps_general[..]).expect("capability page has the layout's size")
    }

    /// The Ethernet offload capabilities.
    pub fn eth_caps(&self) -> PerProtocolNetworkingOffloadCaps<&[u8]> {
        PerProtocolNetworkingOffloadCaps::new(&self.caps_ethernet[..])
            .expect("capability page has the layout's size")
    }

    /// Firmware pages the device holds now.
    pub fn pages_held(&self) -> usize {
        self.pages.held()
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    pub(crate) fn backend_arc(&self) -> &Arc<B> {
        &self.backend
    }

    /// The IOMMU and IOVA allocator DMA memory for this function comes from.
    pub fn dma(&self) -> (Arc<dyn Iommu>, Arc<IovaAllocator>) {
        (self.iommu.clone(), self.iovas.clone())
    }

    /// The UAR page, protection domain and transport domain allocated at bring-up.
    pub fn resources(&self) -> (u32, u32, u32) {
        (self.uar, self.pd, self.td)
    }

    pub(crate) fn keys_mut(&mut self) -> &mut Vec<crate::mkey::RegisteredKey> {
        &mut self.keys
    }

    /// Tears the function down: destroys memory keys still registered and the async EQ, frees
    /// UAR, PD and transport domain, TEARDOWN_HCA, reclaims every firmware page, DISABLE_HCA,
    /// disables MSI-X.
    ///
    /// # Errors
    ///
    /// The failing command's error. The device is then dropped, which resets the function so
    /// that nothing it held is freed while it could still reach it.
    pub fn teardown(mut self) -> Result<TeardownReport, DriverError> {
        self.ensure_healthy()?;
        if let Some(eq) = self.eq.take() {
            // Commands now complete by polling.
            self.destroy_eq(eq.eqn)?;
        }
        self.destroy_all_keys()?;
        let (uar, pd, td) = (self.uar, self.pd, self.td);
        for (op, id) in [
            (Opcode::DeallocTransportDomain, td),
            (Opcode::DeallocPd, pd),
            (Opcode::DeallocUar, uar),
        ] {
            let mut cmd = input(op, 0, 16);
            cmd[8..12].copy_from_slice(&id.to_be_bytes());
            self.exec(&cmd, 16)?;
        }
        let mut teardown = input(Opcode::TeardownHca, 0, 16);
        hca::TeardownHcaIn::new(&mut teardown[..])
            .map(|mut t| {
                t.set_profile(hca::teardown_profile::GRACEFUL_CLOSE);
            })
            .ok();
        self.exec(&teardown, 16)?;
        let mut report = TeardownReport::default();
        while self.pages.held() > 0 {
            let want = self.pages.held().min(4096);
            let got = self.take_pages(want)?;
            report.pages_reclaimed += got;
            if got == 0 {
                break;
            }
        }
        report.pages_kept = self.pages.held();
        let mut disable = input(Opcode::DisableHca, 0, 16);
        hca::DisableHcaIn::new(&mut disable[..])
            .map(|mut d| {
                d.set_function_id(0);
            })
            .ok();
        self.exec(&disable, 16)?;
        self.interrupts.clear();
        self.backend.disable_msix()?;
        report.commands_unanswered = self.cmd.unanswered();
        if report.pages_kept > 0 || report.commands_unanswered > 0 {
            // The device still owns them: a function reset takes them back, after which they
            // are freed and their IOVAs unmapped. Without a reset, never free memory the device
            // may write: keep it (and its mappings) for good.
            if self.reset_function().is_ok() {
                report.pages_released_by_reset = report.pages_kept;
                report.pages_kept = 0;
                self.forget_after_reset();
                self.info.resets += 1;
            } else {
                self.pages.leak();
                self.cmd.leak();
            }
        }
        self.torn_down = true;
        Ok(report)
    }

    /// Commands the device took but has not answered (each holds a command slot until it
    /// does, or until a function reset).
    pub fn commands_unanswered(&self) -> usize {
        self.cmd.unanswered()
    }

    /// Timed-out commands the device answered later, since bring-up or the last reset.
    pub fn commands_answered_late(&self) -> u64 {
        self.cmd.late_answers
    }
}

impl<B: Backend> Drop for Device<B> {
    /// A device dropped without [`Device::teardown`] (or after one that failed) may still hold
    /// firmware pages, event queues and commands: a function reset makes it let go of them all
    /// before their memory is freed. When the function cannot be reset that memory is leaked,
    /// never freed, since the device could still write it.
    fn drop(&mut self) {
        if self.torn_down {
            return;
        }
        if self.reset_function().is_ok() {
            self.forget_after_reset();
        } else {
            self.pages.leak();
            self.cmd.leak();
            if let Some(eq) = self.eq.take() {
                eq.region.leak();
            }
        }
    }
}

fn record(events: &mut EventCounts, pending_pages: &mut Vec<i32>, ev: Event) {
    match ev {
        Event::Cmd { .. } => events.cmd += 1,
        Event::PageRequest { pages } => {
            events.page_requests += 1;
            pending_pages.push(pages);
        }
        Event::PortChange { .. } => events.port_changes += 1,
        Event::CqError { .. } => events.cq_errors += 1,
        Event::QueueError { .. } => events.queue_errors += 1,
        Event::SharedRingLow { .. } => events.limits += 1,
        Event::Invalid { .. } => events.invalid += 1,
        Event::Completion { .. } | Event::Other(_) => {}
    }
}

fn bad_caps() -> DriverError {
    DriverError::BadDeviceValue {
        what: "capability page",
        value: 0,
    }
}

/// Bus mastering on, `initializing` waited out and the command interface revision checked, as
/// every bring-up (first, or after a reset) starts; returns the CMDIF_REV_FW_SUB word.
fn wake_firmware<B: Backend>(backend: &B, timeout: Duration) -> Result<u32, DriverError> {
    enable_bus_master(backend)?;
    wait_for_firmware(backend, timeout)?;
    let cmdif = u32::from_be_bytes(backend.read32(init_seg::CMDIF_REV_FW_SUB));
    let cmdif_rev = (cmdif >> 16) as u16;
    if cmdif_rev != init_seg::CMDIF_REV {
        return Err(DriverError::CmdifRevision(cmdif_rev));
    }
    Ok(cmdif)
}

/// The firmware's health counter as the init segment shows it.
fn health_counter<B: Backend>(backend: &B) -> u32 {
    u32::from_be_bytes(backend.read32(init_seg::HEALTH_COUNTER)) & init_seg::HEALTH_COUNTER_MASK
}

/// Sets memory decoding and bus mastering in the Command register.
fn enable_bus_master<B: Backend>(backend: &B) -> Result<(), DriverError> {
    let mut cmd = [0u8; 2];
    backend.config_read(4, &mut cmd)?;
    let value = u16::from_le_bytes(cmd) | 0b110;
    backend.config_write(4, &value.to_le_bytes())?;
    Ok(())
}

/// Waits for `initializing` to clear.
fn wait_for_firmware<B: Backend>(backend: &B, timeout: Duration) -> Result<(), DriverError> {
    let start = Instant::now();
    loop {
        let word = u32::from_be_bytes(backend.read32(init_seg::INITIALIZING));
        if word == init_seg::DEAD_READ {
            return Err(DriverError::Failed(HealthFailure::NotResponding));
        }
        if word >> 31 == 0 {
            return Ok(());
        }
        if start.elapsed() > timeout {
            return Err(DriverError::InitTimeout(timeout));
        }
        std::thread::sleep(Duration::from_millis(1).min(timeout / 10 + Duration::from_micros(1)));
    }
}
