//! Flow rules: a TCP, UDP or ICMP flow (IPv4 or IPv6 addresses, ports), or every frame of one
//! EtherType, steered to one receive queue by an entry in the port's root flow table, ahead of
//! the port's own rules. Each rule
//! has a direct TIR to its queue's RQ and a flow group of one entry with the rule's mask; the
//! entries go when the port's steering is taken down (recovery) and come back when it is
//! built again, so a rule outlives a rebuild.

use crate::backend::Backend;
use crate::control::{destroy_input, input, output_too_short, Device};
use crate::error::DriverError;
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::flow::{self, CreateFlowGroupIn, CreateFlowGroupOut, FteMatchSetLyr24, SetFteIn};
use cxdirect_hw::tir::{CreateTirIn, CreateTirOut};
use std::net::IpAddr;

/// The transport protocol a [`FlowMatch`] names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowProtocol {
    /// TCP (IP protocol 6).
    Tcp,
    /// UDP (IP protocol 17).
    Udp,
    /// ICMP over IPv4 (IP protocol 1); a rule for it names no ports and is IPv4 only.
    Icmp,
}

/// The IP version a [`FlowMatch`] names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpVersion {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

/// What a flow rule ([`crate::Port::steer`]) matches in a received frame's outer headers:
/// always the IP version and the transport protocol, and each address and port that is set.
/// Addresses must be of `ip`'s version. Frames of a flow with IP options or fragments match by
/// the same fields (a fragment after the first carries no ports, so it does not match a rule
/// that names ports).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowMatch {
    /// IPv4 or IPv6.
    pub ip: IpVersion,
    /// TCP or UDP.
    pub protocol: FlowProtocol,
    /// The destination address, or any.
    pub dst_addr: Option<IpAddr>,
    /// The source address, or any.
    pub src_addr: Option<IpAddr>,
    /// The destination port, or any.
    pub dst_port: Option<u16>,
    /// The source port, or any.
    pub src_port: Option<u16>,
}

impl FlowMatch {
    /// A UDP flow over IPv4 to destination port `port`, from anywhere.
    pub fn udp4_to_port(port: u16) -> Self {
        Self {
            ip: IpVersion::V4,
            protocol: FlowProtocol::Udp,
            dst_addr: None,
            src_addr: None,
            dst_port: Some(port),
            src_port: None,
        }
    }

    /// Refuses addresses of the other IP version, and ports or IPv6 for ICMP.
    pub(crate) fn validate(&self) -> Result<(), DriverError> {
        if self.protocol == FlowProtocol::Icmp {
            if self.ip != IpVersion::V4 {
                return Err(DriverError::config(
                    "ip",
                    6u32,
                    "ICMP rules match ICMP over IPv4 (IpVersion::V4)",
                ));
            }
            if self.dst_port.is_some() || self.src_port.is_some() {
                return Err(DriverError::config(
                    "dst_port/src_port",
                    u64::from(self.dst_port.or(self.src_port).unwrap_or(0)),
                    "ICMP carries no ports: leave them None",
                ));
            }
        }
        for (field, addr) in [("dst_addr", self.dst_addr), ("src_addr", self.src_addr)] {
            let fits = match (self.ip, addr) {
                (_, None) => true,
                (IpVersion::V4, Some(a)) => a.is_ipv4(),
                (IpVersion::V6, Some(a)) => a.is_ipv6(),
            };
            if !fits {
                return Err(DriverError::config(
                    field,
                    0u32,
                    "give an address of the rule's IP version (FlowMatch::ip)",
                ));
            }
        }
        Ok(())
    }

    /// Writes the rule's mask (`mask`) or value into the outer-header match set.
    fn fill(&self, m: &mut FteMatchSetLyr24<&mut [u8]>, mask: bool) {
        let (version, proto) = match (self.ip, self.protocol) {
            (IpVersion::V4, p) => (4, p),
            (IpVersion::V6, p) => (6, p),
        };
        let proto = match proto {
            FlowProtocol::Tcp => 6,
            FlowProtocol::Udp => 17,
            FlowProtocol::Icmp => 1,
        };
        m.set_ip_version(if mask { 0xf } else { version })
            .set_ip_protocol(if mask { 0xff } else { proto });
        let port = |p: u16| if mask { 0xffff } else { p };
        match self.protocol {
            FlowProtocol::Tcp => {
                if let Some(p) = self.dst_port {
                    m.set_tcp_dport(port(p));
                }
                if let Some(p) = self.src_port {
                    m.set_tcp_sport(port(p));
                }
            }
            FlowProtocol::Udp => {
                if let Some(p) = self.dst_port {
                    m.set_udp_dport(port(p));
                }
                if let Some(p) = self.src_port {
                    m.set_udp_sport(port(p));
                }
            }
            FlowProtocol::Icmp => {}
        }
        if let Some(addr) = self.dst_addr {
            set_addr(&mut m.dst_ipv4_dst_ipv6_mut(), addr, mask);
        }
        if let Some(addr) = self.src_addr {
            set_addr(&mut m.src_ipv4_src_ipv6_mut(), addr, mask);
        }
    }
}

fn set_addr(field: &mut flow::Ipv6LayoutIpv4LayoutAuto<&mut [u8]>, addr: IpAddr, mask: bool) {
    match addr {
        IpAddr::V4(a) => {
            field
                .ipv4_layout_mut()
                .set_ipv4(if mask { u32::MAX } else { u32::from(a) });
        }
        IpAddr::V6(a) => {
            field
                .ipv6_layout_mut()
                .set_addr(if mask { [0xff; 16] } else { a.octets() });
        }
    }
}

/// A flow rule installed by [`crate::Port::steer`]; give it to [`crate::Port::remove_flow`]
/// to remove it.
#[derive(Debug, PartialEq, Eq)]
pub struct FlowRule {
    /// The root table entry the rule holds (0..[`FLOW_RULE_LIMIT`]).
    index: u32,
    /// The RQ it steered to when installed.
    rqn: u32,
    /// Which port's rules it belongs to.
    owner: u64,
    /// Which rule of that port (a slot is reused after a removal).
    serial: u64,
}

impl FlowRule {
    /// The RQ number the rule steered to when installed (a receive queue rebuilt after a
    /// failed CQ gets a new RQ number, and its rules follow it).
    pub fn rqn(&self) -> u32 {
        self.rqn
    }

    /// The rule's entry in the port's root flow table (lower entries match first).
    pub fn index(&self) -> u32 {
        self.index
    }
}

/// Most flow rules a port holds at once.
pub const FLOW_RULE_LIMIT: u32 = super::steering::FLOW_RULE_SLOTS;

/// What a rule matches in a frame's outer headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RuleMatch {
    /// An IP flow.
    Flow(FlowMatch),
    /// Every frame of one EtherType (after no VLAN tag).
    Ethertype(u16),
}

impl RuleMatch {
    fn validate(&self) -> Result<(), DriverError> {
        match self {
            RuleMatch::Flow(f) => f.validate(),
            RuleMatch::Ethertype(_) => Ok(()),
        }
    }

    fn fill(&self, m: &mut FteMatchSetLyr24<&mut [u8]>, mask: bool) {
        match self {
            RuleMatch::Flow(f) => f.fill(m, mask),
            RuleMatch::Ethertype(t) => {
                m.set_ethertype(if mask { 0xffff } else { *t });
            }
        }
    }
}

/// One rule: what it matches, its TIR (while it has one: a rule whose RQ is being rebuilt
/// has none until the new RQ exists), and its group while installed.
struct Rule {
    flow: RuleMatch,
    rqn: u32,
    tirn: Option<u32>,
    group: Option<u32>,
    entry: bool,
    serial: u64,
}

/// A port's flow rules, by root table index.
pub(super) struct FlowRules {
    rules: Vec<Option<Rule>>,
    owner: u64,
    next_serial: u64,
}

impl Default for FlowRules {
    fn default() -> Self {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT_OWNER: AtomicU64 = AtomicU64::new(1);
        Self {
            rules: Vec::new(),
            owner: NEXT_OWNER.fetch_add(1, Ordering::Relaxed),
            next_serial: 0,
        }
    }
}

impl FlowRules {
    /// Adds a rule steering `flow` to RQ `rqn` in transport domain `td`, installed in `root`
    /// when the steering is built (`None`: installed at the next build).
    pub(super) fn add<B: Backend>(
        &mut self,
        dev: &mut Device<B>,
        flow: RuleMatch,
        rqn: u32,
        td: u32,
        root: Option<u32>,
    ) -> Result<FlowRule, DriverError> {
        flow.validate()?;
        let index = match self.rules.iter().position(Option::is_none) {
            Some(i) => i,
            None if (self.rules.len() as u32) < FLOW_RULE_LIMIT => {
                self.rules.push(None);
                self.rules.len() - 1
            }
            None => {
                return Err(DriverError::config(
                    "flow rules",
                    FLOW_RULE_LIMIT + 1,
                    format!("a port holds at most {FLOW_RULE_LIMIT} flow rules"),
                ))
            }
        };
        let tirn = create_tir(dev, td, rqn)?;
        self.next_serial += 1;
        let mut rule = Rule {
            flow,
            rqn,
            tirn: Some(tirn),
            group: None,
            entry: false,
            serial: self.next_serial,
        };
        if let Some(root) = root {
            if let Err(e) = install(dev, &mut rule, root, index as u32, td) {
                let _ = uninstall(dev, &mut rule, root, index as u32);
                let _ = dev.exec(&destroy_input(Opcode::DestroyTir, tirn, 8), 16);
                return Err(e);
            }
        }
        self.rules[index] = Some(rule);
        Ok(FlowRule {
            index: index as u32,
            rqn,
            owner: self.owner,
            serial: self.next_serial,
        })
    }

    /// Removes `rule` from `root` (when installed) and destroys its TIR.
    pub(super) fn remove<B: Backend>(
        &mut self,
        dev: &mut Device<B>,
        rule: &FlowRule,
        root: Option<u32>,
    ) -> Result<(), DriverError> {
        let held = self
            .rules
            .get_mut(rule.index as usize)
            .filter(|_| rule.owner == self.owner);
        let Some(slot) = held.filter(|r| r.as_ref().is_some_and(|r| r.serial == rule.serial))
        else {
            return Err(DriverError::WrongHandles {
                needed: "a flow rule this port's Port::steer returned and not yet removed".into(),
            });
        };
        if let (Some(r), Some(root)) = (slot.as_mut(), root) {
            uninstall(dev, r, root, rule.index)?;
        }
        if let Some(tirn) = slot.as_ref().and_then(|r| r.tirn) {
            dev.exec(&destroy_input(Opcode::DestroyTir, tirn, 8), 16)?;
        }
        *slot = None;
        Ok(())
    }

    /// Before RQ `rqn` is destroyed to be rebuilt (the rules are out of the root table):
    /// destroys the TIRs of the rules steering to it, which the device would otherwise hold
    /// against the RQ's destruction. The first refusal is returned (that TIR is kept).
    pub(super) fn release_tirs<B: Backend>(
        &mut self,
        dev: &mut Device<B>,
        rqn: u32,
    ) -> Result<(), DriverError> {
        for rule in self.rules.iter_mut().flatten() {
            if rule.rqn == rqn {
                if let Some(tirn) = rule.tirn {
                    dev.exec(&destroy_input(Opcode::DestroyTir, tirn, 8), 16)?;
                    rule.tirn = None;
                }
            }
        }
        Ok(())
    }

    /// After RQ `old` was rebuilt as `new`: its rules steer to `new` (their TIRs are made
    /// when they are installed again).
    pub(super) fn retarget(&mut self, old: u32, new: u32) {
        for rule in self.rules.iter_mut().flatten() {
            if rule.rqn == old {
                rule.rqn = new;
            }
        }
    }

    /// True when a rule steers to RQ `rqn`.
    pub(super) fn steers_to(&self, rqn: u32) -> bool {
        self.rules.iter().flatten().any(|r| r.rqn == rqn)
    }

    /// Installs every rule in the freshly built `root` table.
    pub(super) fn install_all<B: Backend>(
        &mut self,
        dev: &mut Device<B>,
        root: u32,
        td: u32,
    ) -> Result<(), DriverError> {
        for (index, rule) in self.rules.iter_mut().enumerate() {
            if let Some(rule) = rule {
                install(dev, rule, root, index as u32, td)?;
            }
        }
        Ok(())
    }

    /// Takes every rule's entry and group out of `root` (their TIRs stay); the first refusal is
    /// returned, with the rest still tried.
    pub(super) fn uninstall_all<B: Backend>(
        &mut self,
        dev: &mut Device<B>,
        root: u32,
    ) -> Result<(), DriverError> {
        let mut first = Ok(());
        for (index, rule) in self.rules.iter_mut().enumerate() {
            if let Some(rule) = rule {
                if let Err(e) = uninstall(dev, rule, root, index as u32) {
                    if first.is_ok() {
                        first = Err(e);
                    }
                }
            }
        }
        first
    }

    /// Destroys every rule's TIR (after [`FlowRules::uninstall_all`]) and forgets the rules.
    pub(super) fn destroy_all<B: Backend>(
        &mut self,
        dev: &mut Device<B>,
    ) -> Result<(), DriverError> {
        let mut first = Ok(());
        for slot in self.rules.iter_mut() {
            if let Some(tirn) = slot.take().and_then(|rule| rule.tirn) {
                if let Err(e) = dev.exec(&destroy_input(Opcode::DestroyTir, tirn, 8), 16) {
                    if first.is_ok() {
                        first = Err(e);
                    }
                }
            }
        }
        self.rules.clear();
        first
    }

    /// After a function reset: the device holds none of the rules' objects any more.
    pub(super) fn forget(&mut self) {
        self.rules.clear();
    }
}

/// A direct TIR to RQ `rqn` in transport domain `td`.
fn create_tir<B: Backend>(dev: &mut Device<B>, td: u32, rqn: u32) -> Result<u32, DriverError> {
    let mut cmd = input(Opcode::CreateTir, 0, CreateTirIn::<&[u8]>::SIZE);
    CreateTirIn::new(&mut cmd[..])
        .map_err(|_| DriverError::layout(Opcode::CreateTir, "input"))?
        .ctx_mut()
        .set_transport_domain(td)
        .set_disp_type(0)
        .set_inline_rqn(rqn);
    let out = dev.exec(&cmd, CreateTirOut::<&[u8]>::SIZE)?;
    Ok(CreateTirOut::new(&out[..])
        .map_err(output_too_short)?
        .tirn())
}

/// The rule's TIR (made first when it has none, in transport domain `td`), a group of one
/// entry at `index` of `root` with the rule's mask, and the entry forwarding to the TIR.
fn install<B: Backend>(
    dev: &mut Device<B>,
    rule: &mut Rule,
    root: u32,
    index: u32,
    td: u32,
) -> Result<(), DriverError> {
    let flow = rule.flow;
    let tirn = match rule.tirn {
        Some(tirn) => tirn,
        None => {
            let tirn = create_tir(dev, td, rule.rqn)?;
            rule.tirn = Some(tirn);
            tirn
        }
    };
    if rule.group.is_none() {
        let mut cmd = input(Opcode::CreateFlowGroup, 0, CreateFlowGroupIn::<&[u8]>::SIZE);
        {
            let mut c = CreateFlowGroupIn::new(&mut cmd[..])
                .map_err(|_| DriverError::layout(Opcode::CreateFlowGroup, "input"))?;
            c.set_table_type(flow::FLOW_TABLE_TYPE_NIC_RX)
                .set_table_id(root)
                .set_start_flow_index(index)
                .set_end_flow_index(index)
                .set_match_criteria_enable(flow::MATCH_OUTER_HEADERS);
            flow.fill(&mut c.match_criteria_mut().outer_headers_mut(), true);
        }
        let out = dev.exec(&cmd, CreateFlowGroupOut::<&[u8]>::SIZE)?;
        rule.group = Some(
            CreateFlowGroupOut::new(&out[..])
                .map_err(output_too_short)?
                .group_id(),
        );
    }
    if !rule.entry {
        let mut cmd = input(Opcode::SetFlowTableEntry, 0, SetFteIn::<&[u8]>::SIZE + 8);
        {
            let mut c = SetFteIn::new(&mut cmd[..])
                .map_err(|_| DriverError::layout(Opcode::SetFlowTableEntry, "input"))?;
            c.set_table_type(flow::FLOW_TABLE_TYPE_NIC_RX)
                .set_table_id(root)
                .set_flow_index(index);
            let mut ctx = c.flow_context_all_mut();
            ctx.set_group_id(rule.group.unwrap_or(0))
                .set_action(flow::FLOW_CONTEXT_ACTION_FWD_DEST)
                .set_destination_list_size(1);
            flow.fill(&mut ctx.match_value_mut().outer_headers_mut(), false);
            ctx.set_destination(
                0,
                flow::dest_format_entry(flow::FLOW_DESTINATION_TYPE_TIR, tirn),
            )
            .map_err(|_| DriverError::layout(Opcode::SetFlowTableEntry, "destination"))?;
        }
        dev.exec(&cmd, 16)?;
        rule.entry = true;
    }
    Ok(())
}

/// Deletes the rule's entry and destroys its group (each only when it exists).
fn uninstall<B: Backend>(
    dev: &mut Device<B>,
    rule: &mut Rule,
    root: u32,
    index: u32,
) -> Result<(), DriverError> {
    if rule.entry {
        let mut cmd = input(
            Opcode::DeleteFlowTableEntry,
            0,
            flow::DeleteFteIn::<&[u8]>::SIZE,
        );
        flow::DeleteFteIn::new(&mut cmd[..])
            .map_err(|_| DriverError::layout(Opcode::DeleteFlowTableEntry, "input"))?
            .set_table_type(flow::FLOW_TABLE_TYPE_NIC_RX)
            .set_table_id(root)
            .set_flow_index(index);
        dev.exec(&cmd, 16)?;
        rule.entry = false;
    }
    if let Some(group) = rule.group {
        let mut cmd = input(
            Opcode::DestroyFlowGroup,
            0,
            flow::DestroyFlowGroupIn::<&[u8]>::SIZE,
        );
        flow::DestroyFlowGroupIn::new(&mut cmd[..])
            .map_err(|_| DriverError::layout(Opcode::DestroyFlowGroup, "input"))?
            .set_table_type(flow::FLOW_TABLE_TYPE_NIC_RX)
            .set_table_id(root)
            .set_group_id(group);
        dev.exec(&cmd, 16)?;
        rule.group = None;
    }
    Ok(())
}
