//! CM messages as typed values: parsing a received 256-byte MAD, and building one byte for byte
//! as Linux's ib_cm does (`drivers/infiniband/core/cm.c`: `cm_format_mad_hdr`, `cm_format_req`,
//! `cm_format_rep`, `cm_format_rtu`, `cm_format_rej`, `cm_format_mra`, `cm_format_dreq`,
//! `cm_format_drep`). The field positions are the `hw::cm` layouts.
//!
//! Parsing never panics: every field is read through a layout over exactly 256 bytes, and what
//! IBTA calls reserved is refused with a [`ParseError`] rather than carried along.

use cxdirect_hw::cm::{
    self as hw, attr, CmDrep, CmDreq, CmMra, CmRej, CmRep, CmReq, CmRtu, MadHdr, MAD_SIZE,
};
use std::net::Ipv4Addr;
use thiserror::Error;

/// A MAD as it travels: 256 bytes.
pub type Mad = [u8; MAD_SIZE];

/// Why a received MAD is not a CM message this module takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum ParseError {
    /// Not 256 bytes.
    #[error("a MAD is 256 bytes, not {0}")]
    BadLength(usize),
    /// Base version other than 1 (`mad.c: validate_mad` drops it).
    #[error("MAD base version {0}, not 1")]
    BaseVersion(u8),
    /// Management class other than CM (0x07).
    #[error("management class {0:#04x} is not CM")]
    Class(u8),
    /// Class version other than 2 (no agent registered for it in ib_cm).
    #[error("CM class version {0}, not 2")]
    ClassVersion(u8),
    /// Method other than SEND (`validate_mad` drops CM MADs with another method).
    #[error("CM method {0:#04x} is not SEND")]
    Method(u8),
    /// An attribute this CM does not speak (SIDR, LAP, APR: not used by rdma_cm on RoCE).
    #[error("CM attribute {0:#06x} not handled")]
    UnsupportedAttribute(u16),
    /// An attribute ID no CM message has.
    #[error("unknown CM attribute {0:#06x}")]
    UnknownAttribute(u16),
    /// A field holds a value IBTA reserves.
    #[error("reserved value {value} in {field}")]
    Reserved {
        /// The field, as named in `ibta_vol1_c12.h` (lower case).
        field: &'static str,
        /// What it held.
        value: u32,
    },
    /// A length field larger than its room.
    #[error("{field} of {len} bytes exceeds its {max}")]
    BadLength2 {
        /// The field.
        field: &'static str,
        /// The length read.
        len: usize,
        /// The room it describes.
        max: usize,
    },
}

/// Private data carried by a CM message: up to 224 bytes (RTU, DREP), fewer for the others.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PrivateData {
    len: u8,
    bytes: [u8; 224],
}

impl PrivateData {
    /// Largest private data of any CM message (RTU and DREP: 224 bytes).
    pub const MAX: usize = 224;

    /// No private data.
    pub const EMPTY: Self = Self {
        len: 0,
        bytes: [0; 224],
    };

    /// Copies `data`; `None` when it is longer than [`Self::MAX`].
    pub fn new(data: &[u8]) -> Option<Self> {
        if data.len() > Self::MAX {
            return None;
        }
        let mut bytes = [0; 224];
        bytes[..data.len()].copy_from_slice(data);
        Some(Self {
            len: data.len() as u8,
            bytes,
        })
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl core::fmt::Debug for PrivateData {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "PrivateData({} bytes)", self.len)
    }
}

impl Default for PrivateData {
    fn default() -> Self {
        Self::EMPTY
    }
}

/// Private-data room of each message (`include/rdma/ib_cm.h`: `IB_CM_*_PRIVATE_DATA_SIZE`).
pub mod pd_size {
    /// REQ.
    pub const REQ: usize = 92;
    /// MRA.
    pub const MRA: usize = 222;
    /// REJ.
    pub const REJ: usize = 148;
    /// REP.
    pub const REP: usize = 196;
    /// RTU.
    pub const RTU: usize = 224;
    /// DREQ.
    pub const DREQ: usize = 220;
    /// DREP.
    pub const DREP: usize = 224;
}

/// A GID, 16 bytes in network order.
pub type Gid = [u8; 16];

/// The IPv4-mapped GID `::ffff:a.b.c.d` a RoCE v2 port carries for an IPv4 address
/// (`rdma_ip2gid`, `include/rdma/ib_addr.h`).
pub fn ipv4_gid(ip: Ipv4Addr) -> Gid {
    ip.to_ipv6_mapped().octets()
}

/// The IPv4 address of an IPv4-mapped GID, if it is one.
pub fn gid_ipv4(gid: &Gid) -> Option<Ipv4Addr> {
    std::net::Ipv6Addr::from(*gid).to_ipv4_mapped()
}

/// One path of a REQ (primary or alternate), IBTA table 106.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Path {
    /// The sender's LID (0xffff on RoCE: routed).
    pub local_lid: u16,
    /// The receiver's LID.
    pub remote_lid: u16,
    /// The sender's GID.
    pub local_gid: Gid,
    /// The receiver's GID.
    pub remote_gid: Gid,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Static rate (6 bits; 0 = port current).
    pub packet_rate: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Service level (4 bits).
    pub sl: u8,
    /// Subnet-local.
    pub subnet_local: bool,
    /// Local ACK timeout (5 bits, 4.096 us x 2^n).
    pub local_ack_timeout: u8,
}

/// REQ (IBTA table 106).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Req {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// Service ID.
    pub service_id: u64,
    /// The sender's node GUID.
    pub local_ca_guid: u64,
    /// Q_Key (UD only).
    pub local_q_key: u32,
    /// The sender's QPN (24 bits).
    pub local_qpn: u32,
    /// Responder resources the sender offers (RDMA reads/atomics it will serve).
    pub responder_resources: u8,
    /// Local EECN (24 bits).
    pub local_eecn: u32,
    /// Initiator depth (RDMA reads/atomics the sender will issue).
    pub initiator_depth: u8,
    /// Remote EECN (24 bits).
    pub remote_eecn: u32,
    /// Remote CM response timeout (5 bits).
    pub remote_cm_response_timeout: u8,
    /// Transport service type (0 RC, 1 UC, 3 extended).
    pub transport_service_type: u8,
    /// End-to-end flow control.
    pub flow_control: bool,
    /// The PSN the sender expects first (24 bits).
    pub starting_psn: u32,
    /// Local CM response timeout (5 bits).
    pub local_cm_response_timeout: u8,
    /// Retry count (3 bits).
    pub retry_count: u8,
    /// Partition key.
    pub pkey: u16,
    /// Path MTU (IB enum 1..=5).
    pub path_mtu: u8,
    /// RD context exists.
    pub rdc_exists: bool,
    /// RNR retry count (3 bits).
    pub rnr_retry_count: u8,
    /// Max CM retries (4 bits).
    pub max_cm_retries: u8,
    /// SRQ.
    pub srq: bool,
    /// Extended transport type (3 bits).
    pub extended_transport_type: u8,
    /// Primary path.
    pub primary: Path,
    /// Alternate path (all zero when absent).
    pub alternate: Path,
    /// SAP supported.
    pub sap_supported: bool,
    /// Private data (the whole 92-byte room when parsed).
    pub private_data: PrivateData,
}

/// REP (IBTA table 110).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rep {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The REQ's local communication ID.
    pub remote_comm_id: u32,
    /// Q_Key (UD only).
    pub local_q_key: u32,
    /// The sender's QPN (24 bits).
    pub local_qpn: u32,
    /// Local EE context number (24 bits).
    pub local_eecn: u32,
    /// The PSN the sender expects first (24 bits).
    pub starting_psn: u32,
    /// Responder resources.
    pub responder_resources: u8,
    /// Initiator depth.
    pub initiator_depth: u8,
    /// Target ACK delay (5 bits).
    pub target_ack_delay: u8,
    /// Failover accepted (2 bits).
    pub failover_accepted: u8,
    /// End-to-end flow control.
    pub flow_control: bool,
    /// RNR retry count (3 bits).
    pub rnr_retry_count: u8,
    /// SRQ.
    pub srq: bool,
    /// The sender's node GUID.
    pub local_ca_guid: u64,
    /// Private data.
    pub private_data: PrivateData,
}

/// RTU (IBTA table 111), DREP (table 113): two IDs and private data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdPair {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The receiver's communication ID.
    pub remote_comm_id: u32,
    /// Private data.
    pub private_data: PrivateData,
}

/// REJ (IBTA table 108).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rej {
    /// The sender's communication ID (0 when it rejects a REQ it kept no ID for).
    pub local_comm_id: u32,
    /// The receiver's communication ID.
    pub remote_comm_id: u32,
    /// Which message is rejected (`hw::cm::msg_response`).
    pub message_rejected: u8,
    /// Reason (`hw::cm::rej_reason`).
    pub reason: u16,
    /// Additional rejection information length (0..=72).
    pub ari_len: u8,
    /// Additional rejection information.
    pub ari: [u8; 72],
    /// Private data.
    pub private_data: PrivateData,
}

/// MRA (IBTA table 107).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mra {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The receiver's communication ID.
    pub remote_comm_id: u32,
    /// Which message is acknowledged (`hw::cm::msg_response`).
    pub message_mraed: u8,
    /// Service timeout (5 bits).
    pub service_timeout: u8,
    /// Private data.
    pub private_data: PrivateData,
}

/// DREQ (IBTA table 112).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dreq {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The receiver's communication ID.
    pub remote_comm_id: u32,
    /// The receiver's QPN (24 bits).
    pub remote_qpn: u32,
    /// Private data.
    pub private_data: PrivateData,
}

/// A CM message, typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message {
    /// Connection request.
    Req(Req),
    /// Message receipt acknowledgement.
    Mra(Mra),
    /// Reject.
    Rej(Rej),
    /// Reply.
    Rep(Rep),
    /// Ready to use.
    Rtu(IdPair),
    /// Disconnect request.
    Dreq(Dreq),
    /// Disconnect reply.
    Drep(IdPair),
}

/// A received CM MAD: its transaction ID and message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parsed {
    /// Transaction ID from the MAD header (not checked on receipt for SEND, as in Linux).
    pub tid: u64,
    /// The message.
    pub message: Message,
}

fn pd(mad: &[u8], range: core::ops::Range<usize>) -> PrivateData {
    PrivateData::new(mad.get(range).unwrap_or(&[])).unwrap_or_default()
}

fn gid(mad: &[u8], range: core::ops::Range<usize>) -> Gid {
    let mut g = [0; 16];
    if let Some(src) = mad.get(range) {
        if src.len() == 16 {
            g.copy_from_slice(src);
        }
    }
    g
}

fn check_response(field: &'static str, v: u8) -> Result<u8, ParseError> {
    if v > hw::msg_response::OTHER {
        Err(ParseError::Reserved {
            field,
            value: v.into(),
        })
    } else {
        Ok(v)
    }
}

/// Parses a received MAD. Checks what `mad.c: validate_mad` and ib_cm's agent registration
/// check (base version, class, class version, method), then the attribute and its fields.
pub fn parse(mad: &[u8]) -> Result<Parsed, ParseError> {
    if mad.len() != MAD_SIZE {
        return Err(ParseError::BadLength(mad.len()));
    }
    let hdr = MadHdr::new(mad).map_err(|_| ParseError::BadLength(mad.len()))?;
    if hdr.base_version() != hw::BASE_VERSION {
        return Err(ParseError::BaseVersion(hdr.base_version()));
    }
    if hdr.mgmt_class() != hw::MGMT_CLASS_CM {
        return Err(ParseError::Class(hdr.mgmt_class()));
    }
    if hdr.class_version() != hw::CM_CLASS_VERSION {
        return Err(ParseError::ClassVersion(hdr.class_version()));
    }
    if hdr.method() != hw::METHOD_SEND {
        return Err(ParseError::Method(hdr.method()));
    }
    let tid = hdr.tid();
    let bad = |_| ParseError::BadLength(mad.len());
    let message = match hdr.attr_id() {
        attr::REQ => Message::Req(parse_req(mad)?),
        attr::REP => {
            let m = CmRep::new(mad).map_err(bad)?;
            Message::Rep(Rep {
                local_comm_id: m.local_comm_id(),
                remote_comm_id: m.remote_comm_id(),
                local_q_key: m.local_q_key(),
                local_qpn: m.local_qpn(),
                local_eecn: m.local_ee_context_number(),
                starting_psn: m.starting_psn(),
                responder_resources: m.responder_resources(),
                initiator_depth: m.initiator_depth(),
                target_ack_delay: m.target_ack_delay(),
                failover_accepted: m.failover_accepted(),
                flow_control: m.end_to_end_flow_control(),
                rnr_retry_count: m.rnr_retry_count(),
                srq: m.srq(),
                local_ca_guid: m.local_ca_guid(),
                private_data: pd(mad, CmRep::<()>::PRIVATE_DATA),
            })
        }
        attr::RTU => {
            let m = CmRtu::new(mad).map_err(bad)?;
            Message::Rtu(IdPair {
                local_comm_id: m.local_comm_id(),
                remote_comm_id: m.remote_comm_id(),
                private_data: pd(mad, CmRtu::<()>::PRIVATE_DATA),
            })
        }
        attr::DREP => {
            let m = CmDrep::new(mad).map_err(bad)?;
            Message::Drep(IdPair {
                local_comm_id: m.local_comm_id(),
                remote_comm_id: m.remote_comm_id(),
                private_data: pd(mad, CmDrep::<()>::PRIVATE_DATA),
            })
        }
        attr::DREQ => {
            let m = CmDreq::new(mad).map_err(bad)?;
            Message::Dreq(Dreq {
                local_comm_id: m.local_comm_id(),
                remote_comm_id: m.remote_comm_id(),
                remote_qpn: m.remote_qpn_eecn(),
                private_data: pd(mad, CmDreq::<()>::PRIVATE_DATA),
            })
        }
        attr::REJ => {
            let m = CmRej::new(mad).map_err(bad)?;
            let ari_len = m.rejected_info_length();
            if usize::from(ari_len) > CmRej::<()>::ARI.len() {
                return Err(ParseError::BadLength2 {
                    field: "rejected_info_length",
                    len: ari_len.into(),
                    max: CmRej::<()>::ARI.len(),
                });
            }
            let mut ari = [0; 72];
            if let Some(src) = mad.get(CmRej::<()>::ARI) {
                ari.copy_from_slice(src);
            }
            Message::Rej(Rej {
                local_comm_id: m.local_comm_id(),
                remote_comm_id: m.remote_comm_id(),
                message_rejected: check_response("message_rejected", m.message_rejected())?,
                reason: m.reason(),
                ari_len,
                ari,
                private_data: pd(mad, CmRej::<()>::PRIVATE_DATA),
            })
        }
        attr::MRA => {
            let m = CmMra::new(mad).map_err(bad)?;
            Message::Mra(Mra {
                local_comm_id: m.local_comm_id(),
                remote_comm_id: m.remote_comm_id(),
                message_mraed: check_response("message_mraed", m.message_mraed())?,
                service_timeout: m.service_timeout(),
                private_data: pd(mad, CmMra::<()>::PRIVATE_DATA),
            })
        }
        a @ (attr::SIDR_REQ | attr::SIDR_REP | attr::LAP | attr::APR | attr::CLASS_PORT_INFO) => {
            return Err(ParseError::UnsupportedAttribute(a))
        }
        a => return Err(ParseError::UnknownAttribute(a)),
    };
    Ok(Parsed { tid, message })
}

fn parse_req(mad: &[u8]) -> Result<Req, ParseError> {
    let m = CmReq::new(mad).map_err(|_| ParseError::BadLength(mad.len()))?;
    let tst = m.transport_service_type();
    // IBTA table 106: 2 is reserved; 3 means "see extended transport type", of which only 1
    // (XRC, `cm_req_get_qp_type`) is defined.
    if tst == 2 || (tst == 3 && m.extended_transport_type() != 1) {
        return Err(ParseError::Reserved {
            field: "transport_service_type",
            value: tst.into(),
        });
    }
    let mtu = m.path_packet_payload_mtu();
    if !(1..=5).contains(&mtu) {
        return Err(ParseError::Reserved {
            field: "path_packet_payload_mtu",
            value: mtu.into(),
        });
    }
    let path = |alt: bool| Path {
        local_lid: if alt {
            m.alternate_local_port_lid()
        } else {
            m.primary_local_port_lid()
        },
        remote_lid: if alt {
            m.alternate_remote_port_lid()
        } else {
            m.primary_remote_port_lid()
        },
        local_gid: gid(
            mad,
            if alt {
                CmReq::<()>::ALTERNATE_LOCAL_PORT_GID
            } else {
                CmReq::<()>::PRIMARY_LOCAL_PORT_GID
            },
        ),
        remote_gid: gid(
            mad,
            if alt {
                CmReq::<()>::ALTERNATE_REMOTE_PORT_GID
            } else {
                CmReq::<()>::PRIMARY_REMOTE_PORT_GID
            },
        ),
        flow_label: if alt {
            m.alternate_flow_label()
        } else {
            m.primary_flow_label()
        },
        packet_rate: if alt {
            m.alternate_packet_rate()
        } else {
            m.primary_packet_rate()
        },
        traffic_class: if alt {
            m.alternate_traffic_class()
        } else {
            m.primary_traffic_class()
        },
        hop_limit: if alt {
            m.alternate_hop_limit()
        } else {
            m.primary_hop_limit()
        },
        sl: if alt {
            m.alternate_sl()
        } else {
            m.primary_sl()
        },
        subnet_local: if alt {
            m.alternate_subnet_local()
        } else {
            m.primary_subnet_local()
        },
        local_ack_timeout: if alt {
            m.alternate_local_ack_timeout()
        } else {
            m.primary_local_ack_timeout()
        },
    };
    Ok(Req {
        local_comm_id: m.local_comm_id(),
        service_id: m.service_id(),
        local_ca_guid: m.local_ca_guid(),
        local_q_key: m.local_q_key(),
        local_qpn: m.local_qpn(),
        responder_resources: m.responder_resources(),
        local_eecn: m.local_eecn(),
        initiator_depth: m.initiator_depth(),
        remote_eecn: m.remote_eecn(),
        remote_cm_response_timeout: m.remote_cm_response_timeout(),
        transport_service_type: tst,
        flow_control: m.end_to_end_flow_control(),
        starting_psn: m.starting_psn(),
        local_cm_response_timeout: m.local_cm_response_timeout(),
        retry_count: m.retry_count(),
        pkey: m.partition_key(),
        path_mtu: mtu,
        rdc_exists: m.rdc_exists(),
        rnr_retry_count: m.rnr_retry_count(),
        max_cm_retries: m.max_cm_retries(),
        srq: m.srq(),
        extended_transport_type: m.extended_transport_type(),
        primary: path(false),
        alternate: path(true),
        sap_supported: m.sap_supported(),
        private_data: pd(mad, CmReq::<()>::PRIVATE_DATA),
    })
}

/// The header every CM message starts with (`cm.c: cm_format_mad_hdr`): base version 1,
/// class CM, class version 2, method SEND, status 0, the attribute and the TID.
fn header(mad: &mut Mad, attr_id: u16, tid: u64) {
    let mut h = MadHdr::new(&mut mad[..]).unwrap_or_else(|_| unreachable!("256 >= 24 bytes"));
    h.set_base_version(hw::BASE_VERSION)
        .set_mgmt_class(hw::MGMT_CLASS_CM)
        .set_class_version(hw::CM_CLASS_VERSION)
        .set_method(hw::METHOD_SEND)
        .set_attr_id(attr_id)
        .set_tid(tid);
}

fn put(mad: &mut Mad, range: core::ops::Range<usize>, data: &[u8]) {
    let n = data.len().min(range.len());
    mad[range.start..range.start + n].copy_from_slice(&data[..n]);
}

impl Message {
    /// Builds the MAD, with `tid` in its header. Private data longer than the message's room
    /// is cut to it (the `Cm` API refuses it before it gets here).
    pub fn encode(&self, tid: u64) -> Mad {
        let mut mad = [0u8; MAD_SIZE];
        // Views over a 256-byte array never fail to build.
        macro_rules! view {
            ($l:ident) => {
                $l::new(&mut mad[..]).unwrap_or_else(|_| unreachable!("256-byte MAD"))
            };
        }
        match self {
            Message::Req(r) => {
                header(&mut mad, attr::REQ, tid);
                let mut m = view!(CmReq);
                m.set_local_comm_id(r.local_comm_id)
                    .set_service_id(r.service_id)
                    .set_local_ca_guid(r.local_ca_guid)
                    .set_local_q_key(r.local_q_key)
                    .set_local_qpn(r.local_qpn)
                    .set_responder_resources(r.responder_resources)
                    .set_local_eecn(r.local_eecn)
                    .set_initiator_depth(r.initiator_depth)
                    .set_remote_eecn(r.remote_eecn)
                    .set_remote_cm_response_timeout(r.remote_cm_response_timeout)
                    .set_transport_service_type(r.transport_service_type)
                    .set_end_to_end_flow_control(r.flow_control)
                    .set_starting_psn(r.starting_psn)
                    .set_local_cm_response_timeout(r.local_cm_response_timeout)
                    .set_retry_count(r.retry_count)
                    .set_partition_key(r.pkey)
                    .set_path_packet_payload_mtu(r.path_mtu)
                    .set_rdc_exists(r.rdc_exists)
                    .set_rnr_retry_count(r.rnr_retry_count)
                    .set_max_cm_retries(r.max_cm_retries)
                    .set_srq(r.srq)
                    .set_extended_transport_type(r.extended_transport_type)
                    .set_primary_local_port_lid(r.primary.local_lid)
                    .set_primary_remote_port_lid(r.primary.remote_lid)
                    .set_primary_flow_label(r.primary.flow_label)
                    .set_primary_packet_rate(r.primary.packet_rate)
                    .set_primary_traffic_class(r.primary.traffic_class)
                    .set_primary_hop_limit(r.primary.hop_limit)
                    .set_primary_sl(r.primary.sl)
                    .set_primary_subnet_local(r.primary.subnet_local)
                    .set_primary_local_ack_timeout(r.primary.local_ack_timeout)
                    .set_alternate_local_port_lid(r.alternate.local_lid)
                    .set_alternate_remote_port_lid(r.alternate.remote_lid)
                    .set_alternate_flow_label(r.alternate.flow_label)
                    .set_alternate_packet_rate(r.alternate.packet_rate)
                    .set_alternate_traffic_class(r.alternate.traffic_class)
                    .set_alternate_hop_limit(r.alternate.hop_limit)
                    .set_alternate_sl(r.alternate.sl)
                    .set_alternate_subnet_local(r.alternate.subnet_local)
                    .set_alternate_local_ack_timeout(r.alternate.local_ack_timeout)
                    .set_sap_supported(r.sap_supported);
                put(
                    &mut mad,
                    CmReq::<()>::PRIMARY_LOCAL_PORT_GID,
                    &r.primary.local_gid,
                );
                put(
                    &mut mad,
                    CmReq::<()>::PRIMARY_REMOTE_PORT_GID,
                    &r.primary.remote_gid,
                );
                put(
                    &mut mad,
                    CmReq::<()>::ALTERNATE_LOCAL_PORT_GID,
                    &r.alternate.local_gid,
                );
                put(
                    &mut mad,
                    CmReq::<()>::ALTERNATE_REMOTE_PORT_GID,
                    &r.alternate.remote_gid,
                );
                put(
                    &mut mad,
                    CmReq::<()>::PRIVATE_DATA,
                    r.private_data.as_slice(),
                );
            }
            Message::Rep(r) => {
                header(&mut mad, attr::REP, tid);
                let mut m = view!(CmRep);
                m.set_local_comm_id(r.local_comm_id)
                    .set_remote_comm_id(r.remote_comm_id)
                    .set_local_q_key(r.local_q_key)
                    .set_local_qpn(r.local_qpn)
                    .set_local_ee_context_number(r.local_eecn)
                    .set_starting_psn(r.starting_psn)
                    .set_responder_resources(r.responder_resources)
                    .set_initiator_depth(r.initiator_depth)
                    .set_target_ack_delay(r.target_ack_delay)
                    .set_failover_accepted(r.failover_accepted)
                    .set_end_to_end_flow_control(r.flow_control)
                    .set_rnr_retry_count(r.rnr_retry_count)
                    .set_srq(r.srq)
                    .set_local_ca_guid(r.local_ca_guid);
                put(
                    &mut mad,
                    CmRep::<()>::PRIVATE_DATA,
                    r.private_data.as_slice(),
                );
            }
            Message::Rtu(r) => {
                header(&mut mad, attr::RTU, tid);
                view!(CmRtu)
                    .set_local_comm_id(r.local_comm_id)
                    .set_remote_comm_id(r.remote_comm_id);
                put(
                    &mut mad,
                    CmRtu::<()>::PRIVATE_DATA,
                    r.private_data.as_slice(),
                );
            }
            Message::Drep(r) => {
                header(&mut mad, attr::DREP, tid);
                view!(CmDrep)
                    .set_local_comm_id(r.local_comm_id)
                    .set_remote_comm_id(r.remote_comm_id);
                put(
                    &mut mad,
                    CmDrep::<()>::PRIVATE_DATA,
                    r.private_data.as_slice(),
                );
            }
            Message::Dreq(r) => {
                header(&mut mad, attr::DREQ, tid);
                view!(CmDreq)
                    .set_local_comm_id(r.local_comm_id)
                    .set_remote_comm_id(r.remote_comm_id)
                    .set_remote_qpn_eecn(r.remote_qpn);
                put(
                    &mut mad,
                    CmDreq::<()>::PRIVATE_DATA,
                    r.private_data.as_slice(),
                );
            }
            Message::Rej(r) => {
                header(&mut mad, attr::REJ, tid);
                view!(CmRej)
                    .set_local_comm_id(r.local_comm_id)
                    .set_remote_comm_id(r.remote_comm_id)
                    .set_message_rejected(r.message_rejected)
                    .set_rejected_info_length(r.ari_len.min(72))
                    .set_reason(r.reason);
                let n = usize::from(r.ari_len.min(72));
                put(&mut mad, CmRej::<()>::ARI, &r.ari[..n]);
                put(
                    &mut mad,
                    CmRej::<()>::PRIVATE_DATA,
                    r.private_data.as_slice(),
                );
            }
            Message::Mra(r) => {
                header(&mut mad, attr::MRA, tid);
                view!(CmMra)
                    .set_local_comm_id(r.local_comm_id)
                    .set_remote_comm_id(r.remote_comm_id)
                    .set_message_mraed(r.message_mraed)
                    .set_service_timeout(r.service_timeout);
                put(
                    &mut mad,
                    CmMra::<()>::PRIVATE_DATA,
                    r.private_data.as_slice(),
                );
            }
        }
        mad
    }
}

/// rdma_cm's IP header at the start of a REQ's private data (`struct cma_hdr`, `cma.c`), IPv4.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmaHeader {
    /// The active side's address.
    pub src_ip: Ipv4Addr,
    /// The passive side's address.
    pub dst_ip: Ipv4Addr,
    /// The active side's port.
    pub src_port: u16,
}

/// Bytes of [`CmaHeader`] on the wire.
pub const CMA_HDR_SIZE: usize = 36;

/// Why a REQ's private data is not an rdma_cm IPv4 header (`cma.c: cma_save_ip_info` /
/// `cma_get_ip_ver`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum CmaError {
    /// `cma_version` other than 0.
    #[error("cma_hdr version {0}, not 0")]
    Version(u8),
    /// IP version other than 4 (6 is valid for rdma_cm, but this CM speaks IPv4 only).
    #[error("cma_hdr IP version {0}, not 4")]
    IpVersion(u8),
}

impl CmaHeader {
    /// Writes the 36 bytes as `cma_format_hdr` does for AF_INET: version 0, `ip_version`
    /// 0x40, the source port, and each address after 12 zero bytes.
    pub fn encode(&self) -> [u8; CMA_HDR_SIZE] {
        let mut b = [0u8; CMA_HDR_SIZE];
        if let Ok(mut h) = hw::CmaHdr::new(&mut b[..]) {
            h.set_cma_version(hw::CMA_VERSION)
                .set_ip_version(4)
                .set_port(self.src_port)
                .set_src_addr_ip4(u32::from(self.src_ip))
                .set_dst_addr_ip4(u32::from(self.dst_ip));
        }
        b
    }

    /// Reads the header from the start of a REQ's private data.
    pub fn decode(pd: &[u8]) -> Result<Self, CmaError> {
        let h = hw::CmaHdr::new(pd).map_err(|_| CmaError::Version(0xff))?;
        if h.cma_version() != hw::CMA_VERSION {
            return Err(CmaError::Version(h.cma_version()));
        }
        if h.ip_version() != 4 {
            return Err(CmaError::IpVersion(h.ip_version()));
        }
        Ok(Self {
            src_ip: Ipv4Addr::from(h.src_addr_ip4()),
            dst_ip: Ipv4Addr::from(h.dst_addr_ip4()),
            src_port: h.port(),
        })
    }
}
