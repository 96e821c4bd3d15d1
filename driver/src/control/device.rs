//! A ConnectX function brought up and owned by the driver: the bring-up sequence (wait for
//! firmware, command interface, ENABLE_HCA, ISSI, boot pages, capabilities, init pages,
//! INIT_HCA, UAR, PD, transport domain, async EQ on MSI-X vector 0), firmware page requests,
//! health monitoring, and teardown.

use super::cmd::{input, CmdQueue};
use super::health::{health_counter, wake_firmware};
use super::pages::FwPages;
use crate::backend::registers::Registers;
use crate::backend::{Backend, Interrupt};
use crate::cq::{Event, EventQueue};
use crate::error::{DriverError, HealthFailure};
use cxdirect_dma::DmaBufMapping;
use cxdirect_dma::{Iommu, IovaAllocator};
use cxdirect_hw::caps::{CmdHcaCap, PerProtocolNetworkingOffloadCaps};
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::eqe::EventType;
use cxdirect_hw::hca::{self};
use cxdirect_hw::init_seg::FwRev;
use cxdirect_hw::reg::{self, PaosReg, PmtuReg};
use cxdirect_hw::vport::{QueryNicVportContextOut, QueryVportStateOut, VPORT_STATE_UP};
use cxdirect_hw::wq::RmpState;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod events;
mod keys;
mod link_speed;
mod open;
mod registers;
mod reset;
mod setup;
mod traffic_class;

pub use link_speed::LinkSpeeds;
pub use traffic_class::{ClassSelection, ClassSettings};

/// What [`Device::recover`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceRecovery {
    /// Why the device was marked failed; `None` when it was reset while healthy.
    pub failure: Option<HealthFailure>,
    /// Firmware pages the device held that the reset took back (freed and unmapped).
    pub pages_released: usize,
    /// Memory keys the reset destroyed: their [`crate::MemoryKey`]s report
    /// `is_valid() == false` and must be registered again.
    pub keys_lost: usize,
    /// Wall time from the reset to the function being initialised again.
    pub took: Duration,
}

/// A key the device translates through, as the device knows it.
pub(crate) struct RegisteredKey {
    pub(super) index: u32,
    pub(super) mapping: Option<Arc<DmaBufMapping>>,
    pub(super) valid: Arc<AtomicBool>,
}

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
    /// Those of the shared rings that are RDMA SRQs (their limit events are
    /// [`Event::SrqLimit`]).
    srqs: Vec<u32>,
    /// Memory keys the device translates through.
    keys: Vec<RegisteredKey>,
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
        let fw_rev = Registers::init_seg(&*backend).read::<FwRev>();
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
                fw_version: (fw_rev.major(), fw_rev.minor(), cmdif.fw_rev_subminor()),
                cmdif_rev: cmdif.cmdif_rev(),
                ..DeviceInfo::default()
            },
            shared_rings: Vec::new(),
            srqs: Vec::new(),
            failed_cqs: Vec::new(),
            failed_rings: Vec::new(),
            keys: Vec::new(),
            torn_down: false,
        };
        dev.setup_function()?;
        dev.info.bringup = started.elapsed();
        Ok(dev)
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
        // The query names port 1, as Linux's mlx5_query_port_pmtu does (the function's one
        // port; local_port 0 names none).
        let mut query = [0u8; 16];
        if let Ok(mut r) = PmtuReg::new(&mut query[..]) {
            r.set_local_port(1);
        }
        let reply = self.access_reg(reg::REG_PMTU, false, &query)?;
        self.info.port_mtu = PmtuReg::new(&reply[..]).map(|r| r.oper_mtu()).unwrap_or(0);
        Ok(())
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

    pub(crate) fn keys_mut(&mut self) -> &mut Vec<RegisteredKey> {
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

    /// Commands posted a second time because the device handed back their slot's previous
    /// answer instead of taking them, since bring-up.
    pub fn commands_posted_again(&self) -> u64 {
        self.cmd.stale_entries
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
        Event::SharedRingLow { .. } | Event::SrqLimit { .. } => events.limits += 1,
        Event::Invalid { .. } => events.invalid += 1,
        Event::Completion { .. } | Event::Other(_) => {}
    }
}
