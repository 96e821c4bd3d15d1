//! CM messages as typed values: parsing a received 256-byte MAD, and building one byte for byte
//! as Linux's ib_cm does (`drivers/infiniband/core/cm.c`: `cm_format_mad_hdr`, `cm_format_req`,
//! `cm_format_rep`, `cm_format_rtu`, `cm_format_rej`, `cm_format_mra`, `cm_format_dreq`,
//! `cm_format_drep`). The field positions are the `hw::cm` layouts.
//!
//! Parsing never panics: every field is read through a layout over exactly 256 bytes, and what
//! IBTA calls reserved is refused with a [`ParseError`] rather than carried along.

use cxdirect_hw::cm::MAD_SIZE;
use std::net::Ipv4Addr;
use thiserror::Error;

mod cma;
mod decode;
mod encode;

pub use cma::{CmaError, CmaHeader, CMA_HDR_SIZE};
pub use decode::parse;

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
