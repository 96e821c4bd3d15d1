//! Flow rules: a TCP, UDP or ICMP flow, or every frame of one EtherType, steered to one of a
//! port's receive queues ahead of RSS (the driver's `Port::steer` and `Port::steer_ethertype`),
//! each behind an opaque `cxd_flow` handle that `cxd_flow_destroy` removes.

use crate::boundary::handle::{self, Exclusive, Handle, Kind};
use crate::boundary::{read_in, write_out};
use crate::error::{guard, Error, Failure};
use crate::port::{cxd_port, PortState};
use driver::{FlowMatch, FlowProtocol, FlowRule, IpVersion};
use std::ffi::c_int;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Flow kind: an IP flow (`ip_version`, `protocol`, and the addresses and ports `fields` names).
pub const CXD_FLOW_IP: u8 = 0;
/// Flow kind: every untagged frame of EtherType `ethertype`.
pub const CXD_FLOW_ETHERTYPE: u8 = 1;

/// Flow protocol: TCP (IP protocol 6).
pub const CXD_FLOW_TCP: u8 = 6;
/// Flow protocol: UDP (IP protocol 17).
pub const CXD_FLOW_UDP: u8 = 17;
/// Flow protocol: ICMP over IPv4 (IP protocol 1); names no ports.
pub const CXD_FLOW_ICMP: u8 = 1;

/// Match field: `dst_addr` is matched.
pub const CXD_FLOW_DST_ADDR: u8 = 1 << 0;
/// Match field: `src_addr` is matched.
pub const CXD_FLOW_SRC_ADDR: u8 = 1 << 1;
/// Match field: `dst_port` is matched.
pub const CXD_FLOW_DST_PORT: u8 = 1 << 2;
/// Match field: `src_port` is matched.
pub const CXD_FLOW_SRC_PORT: u8 = 1 << 3;

/// What a flow rule matches in a received frame's outer headers. Zero it, then set `kind` and
/// the fields that kind reads.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(non_camel_case_types)]
pub struct cxd_flow_match {
    /// `CXD_FLOW_IP` or `CXD_FLOW_ETHERTYPE`.
    pub kind: u8,
    /// 4 or 6 (`CXD_FLOW_IP`).
    pub ip_version: u8,
    /// `CXD_FLOW_TCP`, `CXD_FLOW_UDP` or `CXD_FLOW_ICMP` (`CXD_FLOW_IP`).
    pub protocol: u8,
    /// `CXD_FLOW_DST_ADDR`, `_SRC_ADDR`, `_DST_PORT`, `_SRC_PORT`: which of the fields below
    /// are matched; the others match anything.
    pub fields: u8,
    /// The EtherType, host byte order (`CXD_FLOW_ETHERTYPE`; 0x0806 is ARP).
    pub ethertype: u16,
    /// Destination port, host byte order.
    pub dst_port: u16,
    /// Source port, host byte order.
    pub src_port: u16,
    /// Zero.
    pub reserved: u16,
    /// Destination address in network byte order: an IPv4 address in its first 4 bytes.
    pub dst_addr: [u8; 16],
    /// Source address, as `dst_addr`.
    pub src_addr: [u8; 16],
}

/// What a flow handle holds: the installed rule and the port it belongs to.
pub(crate) struct FlowState {
    rule: FlowRule,
    port: &'static Handle<PortState>,
}

/// An installed flow rule (`struct cxd_flow` in C, opaque).
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct cxd_flow {
    handle: Handle<FlowState>,
}

impl Kind for cxd_flow {
    type Inner = FlowState;
    const MAGIC: u64 = 0x6378_642d_666c_6f77; // "cxd-flow"
    const NAME: &'static str = "cxd_flow";
    fn wrap(handle: Handle<FlowState>) -> Self {
        Self { handle }
    }
    fn handle(&self) -> &Handle<FlowState> {
        &self.handle
    }
}

/// A rule the driver takes: a flow, or an EtherType.
enum Rule {
    Flow(FlowMatch),
    Ethertype(u16),
}

fn refused(message: String) -> Failure {
    Failure::new(Error::InvalidArgument, message)
}

impl cxd_flow_match {
    /// The driver's rule; refuses unknown kinds, versions, protocols and field bits (the
    /// driver refuses what it cannot steer: ports with ICMP, addresses of the other version).
    fn to_rule(self) -> Result<Rule, Failure> {
        if self.reserved != 0 {
            return Err(refused(format!(
                "reserved is {:#x}; zero the struct before filling it",
                self.reserved
            )));
        }
        match self.kind {
            CXD_FLOW_IP => {}
            CXD_FLOW_ETHERTYPE => {
                if self.fields != 0 {
                    return Err(refused(format!(
                        "fields {:#x} with CXD_FLOW_ETHERTYPE, which matches the EtherType \
                         alone; clear fields",
                        self.fields
                    )));
                }
                return Ok(Rule::Ethertype(self.ethertype));
            }
            other => {
                return Err(refused(format!(
                    "kind {other}: give CXD_FLOW_IP or CXD_FLOW_ETHERTYPE"
                )))
            }
        }
        let known = CXD_FLOW_DST_ADDR | CXD_FLOW_SRC_ADDR | CXD_FLOW_DST_PORT | CXD_FLOW_SRC_PORT;
        if self.fields & !known != 0 {
            return Err(refused(format!(
                "fields {:#x} has bits no CXD_FLOW_* field names ({:#x}); clear them",
                self.fields,
                self.fields & !known
            )));
        }
        let ip = match self.ip_version {
            4 => IpVersion::V4,
            6 => IpVersion::V6,
            other => return Err(refused(format!("ip_version {other}: give 4 or 6"))),
        };
        let protocol = match self.protocol {
            CXD_FLOW_TCP => FlowProtocol::Tcp,
            CXD_FLOW_UDP => FlowProtocol::Udp,
            CXD_FLOW_ICMP => FlowProtocol::Icmp,
            other => {
                return Err(refused(format!(
                    "protocol {other}: give CXD_FLOW_TCP (6), CXD_FLOW_UDP (17) or \
                     CXD_FLOW_ICMP (1)"
                )))
            }
        };
        let addr = |bytes: [u8; 16]| -> IpAddr {
            match ip {
                IpVersion::V4 => Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3]).into(),
                IpVersion::V6 => Ipv6Addr::from(bytes).into(),
            }
        };
        let has = |bit: u8| self.fields & bit != 0;
        Ok(Rule::Flow(FlowMatch {
            ip,
            protocol,
            dst_addr: has(CXD_FLOW_DST_ADDR).then(|| addr(self.dst_addr)),
            src_addr: has(CXD_FLOW_SRC_ADDR).then(|| addr(self.src_addr)),
            dst_port: has(CXD_FLOW_DST_PORT).then_some(self.dst_port),
            src_port: has(CXD_FLOW_SRC_PORT).then_some(self.src_port),
        }))
    }
}

/// Steers the frames `*rule` names to receive queue `rxq_index` (0..rx_queues) of the port,
/// ahead of its RSS, and stores the rule's handle in `*out`. Rules match in the order they
/// were made; a port holds at most 62.
///
/// Returns 0, or a negative `cxd_error` with nothing installed: `CXD_ERROR_INVALID_ARGUMENT`
/// for a match the struct cannot mean (unknown kind, version, protocol or field bits) or a
/// queue the port does not have, `CXD_ERROR_CONFIG` for one the port refuses (ports or IPv6
/// with ICMP, an address of the other IP version, the rule limit reached), with
/// `cxd_last_error` naming the field.
///
/// # Safety
///
/// `port` is NULL or a handle this library returned; `rule` is NULL or points to a
/// `struct cxd_flow_match`; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cxd_flow_create(
    port: *mut cxd_port,
    rule: *const cxd_flow_match,
    rxq_index: u16,
    out: *mut *mut cxd_flow,
) -> c_int {
    guard(|| {
        let port_h = handle::resolve(port)?;
        let rule = read_in(rule, "rule")?.to_rule()?;
        if out.is_null() {
            return Err(Failure::new(Error::Null, "out is NULL; pass &flow"));
        }
        let mut p = port_h.exclusive(cxd_port::NAME)?;
        let state = p.get();
        let rqn = state.rqn(rxq_index)?;
        let installed = match rule {
            Rule::Flow(flow) => state.port_mut().steer(flow, rqn),
            Rule::Ethertype(ethertype) => state.port_mut().steer_ethertype(ethertype, rqn),
        }?;
        let flow = handle::open::<cxd_flow>(FlowState {
            rule: installed,
            port: port_h,
        });
        state.flows.push(flow);
        write_out(out, flow as *const cxd_flow as *mut cxd_flow, "out")?;
        Ok(0)
    })
}

/// Removes the rule: its frames go to the port's usual queues again. The handle may not be
/// used afterwards (`CXD_ERROR_CLOSED`); a port's rules close with it (`cxd_port_close`).
///
/// # Safety
///
/// `flow` is NULL or a handle this library returned.
#[no_mangle]
pub unsafe extern "C" fn cxd_flow_destroy(flow: *mut cxd_flow) -> c_int {
    guard(|| {
        let mut f = handle::resolve(flow)?.exclusive(cxd_flow::NAME)?;
        let mut p = f.get().port.exclusive(cxd_port::NAME)?;
        let Some(FlowState { rule, .. }) = f.close() else {
            return Err(Failure::new(Error::Closed, "the cxd_flow was closed"));
        };
        let state = p.get();
        state
            .flows
            .retain(|&h| !std::ptr::eq(h, flow as *const cxd_flow));
        state.port_mut().remove_flow(rule)?;
        Ok(0)
    })
}

/// The handles of a closing port's rules, taken before anything closes (`CXD_ERROR_BUSY`
/// when a call uses one); close them once the port closes (its teardown removes the rules).
pub(crate) fn take_all(
    flows: &[&'static cxd_flow],
) -> Result<Vec<Exclusive<'static, FlowState>>, Failure> {
    flows
        .iter()
        .map(|f| f.handle().exclusive(cxd_flow::NAME))
        .collect()
}
