//! The function's life-cycle and health state (what the init segment shows) and its port and
//! vport state. The HCA commands that change them are the firmware's (`fw::hca`).

use super::command_error::{bad_sys_state, CmdError, CmdResult};
use super::{Core, EngineRequests};
use crate::config::EmuConfig;
use crate::objects::pacing::{Pacer, Rate};
use crate::objects::scheduling::Share;
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::eqe::{port_change, EventType};
use cxdirect_hw::hca::DRIVER_VERSION_BYTES;
use cxdirect_hw::qp::mtu;
use cxdirect_hw::reg;
use std::time::{Duration, Instant};

/// Bytes of a RoCE v2 packet around its payload on an Ethernet port: Ethernet header, IPv6
/// header (the larger), UDP, BTH and ICRC. A path MTU must fit the port's frame with these.
const ROCE_V2_OVERHEAD: usize = 14 + 40 + 8 + 12 + 4;

/// The Ethernet protocols the port offers in PTYS (legacy mask), those of a 100 Gb/s
/// ConnectX-6 Dx on a copper cable: 1, 10, 25, 40, 50 and 100 Gb/s.
pub(crate) const PORT_PROTOCOLS: u32 = reg::ETH_PROTO_1000BASE_KX
    | reg::ETH_PROTO_10GBASE_KR
    | reg::ETH_PROTO_25GBASE_CR
    | reg::ETH_PROTO_40GBASE_CR4
    | reg::ETH_PROTO_50GBASE_CR2
    | reg::ETH_PROTO_100GBASE_CR4;

/// Where the function is in its life cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HcaState {
    /// After reset: only ENABLE_HCA is accepted.
    Disabled,
    /// Enabled, not yet initialized: ISSI, pages, capabilities, INIT_HCA.
    Enabled,
    /// Initialized: objects may be created.
    Initialized,
    /// Torn down: pages may be reclaimed, then DISABLE_HCA.
    TornDown,
}

/// Life-cycle and health state.
#[derive(Debug)]
pub(crate) struct Hca {
    pub state: HcaState,
    pub issi: u16,
    pub reset_at: Instant,
    init_delay: Option<Duration>,
    health_tick: Duration,
    /// Fatal health syndrome and the health counter value frozen at the failure.
    fatal: Option<(u8, u32)>,
    /// The fatal error asks for the recovery flow ([`Hca::recovery_required`]).
    reset_required: bool,
    /// `nic_interface` as `cmdq_addr_l_sz` shows it (`init_seg::nic_interface`): full driver
    /// from power-on, disabled after a firmware reset until the driver hands the command
    /// queue's address over again.
    pub nic_interface: u8,
    /// The health counter stops advancing (a hung firmware) without a syndrome.
    pub health_stalled: Option<u32>,
    /// Every init-segment read returns all-ones and commands go unanswered (the function fell
    /// off the bus), until a function reset.
    pub unresponsive: bool,
    pub caps: super::caps::CapSet,
    pub cmdq_addr: u64,
    pub last_error: Option<CmdError>,
    /// Pages lost because DISABLE_HCA came before they were reclaimed.
    pub pages_leaked: u64,
    /// The text SET_DRIVER_VERSION gave last (NUL-padded).
    pub driver_version: [u8; DRIVER_VERSION_BYTES],
}

impl Hca {
    pub fn new(cfg: &EmuConfig) -> Self {
        Self {
            state: HcaState::Disabled,
            issi: 0,
            reset_at: Instant::now(),
            init_delay: cfg.init_delay,
            health_tick: cfg.health_tick.max(Duration::from_micros(1)),
            fatal: None,
            reset_required: false,
            nic_interface: cxdirect_hw::init_seg::nic_interface::FULL_DRIVER,
            health_stalled: None,
            unresponsive: false,
            caps: super::caps::CapSet::new(cfg),
            cmdq_addr: 0,
            last_error: None,
            pages_leaked: 0,
            driver_version: [0; DRIVER_VERSION_BYTES],
        }
    }

    /// True while `initializing` reads set.
    pub fn initializing(&self) -> bool {
        match self.init_delay {
            None => true,
            Some(delay) => self.reset_at.elapsed() < delay,
        }
    }

    /// The health counter as the init segment shows it.
    pub fn health_counter(&self) -> u32 {
        if let Some((_, frozen)) = self.fatal {
            return frozen;
        }
        if let Some(frozen) = self.health_stalled {
            return frozen;
        }
        (self.reset_at.elapsed().as_nanos() / self.health_tick.as_nanos()) as u32 & 0x00ff_ffff
    }

    /// Nanoseconds since reset: the internal timer.
    pub fn internal_timer(&self) -> u64 {
        self.reset_at.elapsed().as_nanos() as u64
    }

    pub fn failed(&self) -> bool {
        self.fatal.is_some() || self.unresponsive
    }

    pub fn health_syndrome(&self) -> u8 {
        self.fatal.map(|(s, _)| s).unwrap_or(0)
    }

    /// Enters the fatal state: the health buffer shows `syndrome`, the counter stops, and the
    /// command interface stops answering.
    pub fn set_fatal(&mut self, syndrome: u8) {
        if self.fatal.is_none() {
            let counter = self.health_counter();
            self.fatal = Some((syndrome, counter));
        }
    }

    /// [`Hca::set_fatal`] with the recovery flow required (`rfr`): what a firmware error that
    /// a firmware reset clears reports, and what makes Linux reset the firmware
    /// (`sensor_fw_synd_rfr`, `mlx5_error_sw_reset`).
    pub fn set_fatal_reset_required(&mut self, syndrome: u8) {
        self.set_fatal(syndrome);
        self.reset_required = true;
    }

    /// The health buffer's `rfr`: a fatal error that asks for the recovery flow, in which the
    /// driver resets the firmware through `nic_interface` and loads again.
    pub fn recovery_required(&self) -> bool {
        self.fatal.is_some() && self.reset_required
    }

    /// Refuses commands the current state does not allow.
    pub fn check_allowed(&self, op: Opcode) -> CmdResult {
        use Opcode::*;
        let ok = match self.state {
            HcaState::Disabled => matches!(op, EnableHca | Nop),
            HcaState::Enabled => matches!(
                op,
                DisableHca
                    | QueryIssi
                    | SetIssi
                    | QueryPages
                    | ManagePages
                    | QueryHcaCap
                    | SetHcaCap
                    | AccessReg
                    | InitHca
                    | Nop
            ),
            HcaState::Initialized => !matches!(op, EnableHca | SetIssi | SetHcaCap | InitHca),
            HcaState::TornDown => matches!(op, DisableHca | QueryPages | ManagePages | Nop),
        };
        if ok {
            Ok(())
        } else {
            Err(bad_sys_state(
                "command not allowed in the HCA's current state",
            ))
        }
    }
}

/// Port and vport state.
#[derive(Debug)]
pub(crate) struct PortState {
    pub admin_up: bool,
    pub oper_up: bool,
    pub max_mtu: u16,
    pub admin_mtu: u16,
    pub mac: u64,
    pub vport_mtu: u16,
    pub promisc_uc: bool,
    pub promisc_mc: bool,
    pub promisc_all: bool,
    pub roce_en: bool,
    /// NIC vport `disable_uc_local_lb`: unicast Ethernet the function sends to itself leaves
    /// on the cable instead of looping back. Set at power-on (Linux's mlx5_ib assumes local
    /// loopback starts disabled and enables it with `mlx5_nic_vport_update_local_lb`).
    pub disable_uc_local_lb: bool,
    /// NIC vport `disable_mc_local_lb`: multicast and broadcast Ethernet the function sends
    /// is not looped back to it. Set at power-on.
    pub disable_mc_local_lb: bool,
    /// Global pause settings (PFCC): kept and reported; the wire never sends pause frames.
    pub pause_tx: bool,
    pub pause_rx: bool,
    /// Per-priority flow control settings (PFCC), one bit per priority.
    pub pfc_tx: u8,
    pub pfc_rx: u8,
    /// The traffic class of each priority (QTCT).
    pub prio_tc: [u8; 8],
    /// Each traffic class's ETS configuration (QETCR). A class's rate limit holds the SQs
    /// whose priority is in the class (`engine::pacing`); groups and shares divide a paced
    /// link (`engine::link`).
    pub ets: [EtsClass; 8],
    /// One bucket per traffic class, shared by the class's SQs while it has a rate limit.
    pub class_pacers: [Pacer; 8],
    /// Bit `tc` set: class `tc` has a rate limit (so that a port without one asks nothing per
    /// WQE).
    pub limited_classes: u8,
    /// The Ethernet protocols software allows (PTYS `eth_proto_admin`, a subset of
    /// [`PORT_PROTOCOLS`]): the link runs at the fastest of them.
    pub eth_proto_admin: u32,
    /// Auto-negotiation disabled by software (PTYS `an_disable_admin`): kept and reported.
    pub an_disable: bool,
    /// The link's rate while it runs slower than the port's fastest protocol (`None` at full
    /// speed, which the model's engines never reach, so that the port asks nothing per
    /// frame): every frame the port sends then passes [`PortState::link_pacer`], and while
    /// that is contended the classes share it by their ETS groups and shares
    /// (`engine::link`).
    pub link_rate: Option<Rate>,
    /// The link's bucket, while [`PortState::link_rate`] holds.
    pub link_pacer: Pacer,
    /// Each traffic class's service on a contended link, weighed by its `bw_allocation`.
    pub class_shares: [Share; 8],
    /// When the link last refused each traffic class for want of room (`None` once the class
    /// went, or yielded to another class since): a class refused within `ASKING` waits for
    /// the link, and holds back those it goes before.
    pub class_waiting_at: [Option<Instant>; 8],
}

/// One traffic class's ETS configuration, as QETCR carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EtsClass {
    /// Its group (7 the vendor group).
    pub group: u8,
    /// Its share of the group's bandwidth, percent.
    pub bw_allocation: u8,
    /// Its rate limit's unit (`ets_bw_units`) and value.
    pub max_bw_units: u8,
    pub max_bw_value: u8,
}

impl EtsClass {
    /// The class's rate limit, if it has one: `max_bw_value` in units of 100 Mb/s or 1 Gb/s
    /// (`ets_bw_units`); no unit, or a value of 0, is no limit (Linux writes at least 1 with
    /// a unit, `mlx5e_dcbnl_ieee_setmaxrate`). The bucket is the model's default burst.
    pub fn rate(&self) -> Option<Rate> {
        use cxdirect_hw::reg::ets_bw_units::{GBPS, HUNDRED_MBPS};
        let mbps_per_unit = match self.max_bw_units {
            HUNDRED_MBPS => 100,
            GBPS => 1000,
            _ => return None,
        };
        (self.max_bw_value != 0)
            .then(|| Rate::from_mbps(u32::from(self.max_bw_value) * mbps_per_unit))
    }
}

impl Default for EtsClass {
    /// What a port holds before any write (not public): the vendor group, all of its
    /// bandwidth, no rate limit; mlx5e's `mlx5e_ets_init` writes the same at probe.
    fn default() -> Self {
        Self {
            group: 7,
            bw_allocation: 100,
            max_bw_units: 0,
            max_bw_value: 0,
        }
    }
}

impl PortState {
    pub fn new(cfg: &EmuConfig) -> Self {
        let mac = cfg.mac.iter().fold(0u64, |acc, b| acc << 8 | u64::from(*b));
        Self {
            admin_up: true,
            oper_up: false,
            max_mtu: (cfg.max_frame + 4).min(u16::MAX as usize) as u16,
            admin_mtu: 1522,
            mac,
            vport_mtu: 1522,
            promisc_uc: false,
            promisc_mc: false,
            promisc_all: false,
            roce_en: false,
            disable_uc_local_lb: true,
            disable_mc_local_lb: true,
            pause_tx: false,
            pause_rx: false,
            pfc_tx: 0,
            pfc_rx: 0,
            prio_tc: [0, 1, 2, 3, 4, 5, 6, 7],
            ets: [EtsClass::default(); 8],
            class_pacers: [Pacer::default(); 8],
            limited_classes: 0,
            eth_proto_admin: PORT_PROTOCOLS,
            an_disable: false,
            link_rate: None,
            link_pacer: Pacer::default(),
            class_shares: [Share::default(); 8],
            class_waiting_at: [None; 8],
        }
    }

    /// The protocol the link runs (the fastest the admin mask allows) as its one bit, and its
    /// speed in Mb/s.
    pub fn link_protocol(&self) -> (u32, u32) {
        reg::eth_proto_fastest(self.eth_proto_admin)
            .unwrap_or((reg::ETH_PROTO_100GBASE_CR4, 100_000))
    }

    /// Allows the protocols of `admin` (a non-empty subset of [`PORT_PROTOCOLS`]): the link
    /// runs at the fastest, paced at its speed when that is below the port's fastest, its
    /// bucket starting full.
    pub fn set_eth_proto_admin(&mut self, admin: u32) {
        self.eth_proto_admin = admin;
        let (_, mbps) = self.link_protocol();
        let fastest = reg::eth_proto_fastest(PORT_PROTOCOLS).map_or(mbps, |(_, m)| m);
        self.link_rate = (mbps < fastest).then(|| Rate::from_mbps(mbps));
        self.link_pacer.reset();
    }

    /// Largest frame (without FCS) the port sends or accepts now.
    pub fn max_frame(&self) -> usize {
        usize::from(self.admin_mtu).saturating_sub(4)
    }
}

/// The largest path MTU code the port carries.
pub(crate) fn port_max_mtu(core: &Core) -> u8 {
    let frame = core.port.max_frame();
    (mtu::MTU_256..=mtu::MTU_4096)
        .rev()
        .find(|&code| (128usize << code) + ROCE_V2_OVERHEAD <= frame)
        .unwrap_or(0)
}

/// Sets the port's operational state, posting a PORT_CHANGE event on a change.
pub(crate) fn set_oper(core: &mut Core, up: bool) {
    if core.port.oper_up == up {
        return;
    }
    core.port.oper_up = up;
    let mut data = [0u8; 28];
    data[8] = 1 << 4; // port 1, upper nibble
    let sub = if up {
        port_change::ACTIVE
    } else {
        port_change::DOWN
    };
    core.post_async_event(EventType::PortChange, sub, &data);
}
