//! InfiniBand communication management (CM) messages as they travel in a 256-byte MAD on QP1:
//! the common MAD header and the connection messages REQ, MRA, REJ, REP, RTU, DREQ and DREP
//! (IBTA vol. 1 chapter 12, tables 106-113), plus the header rdma_cm puts first in a REQ's
//! private data for IP-addressed connections (`struct cma_hdr`).
//!
//! Bit offsets count from the first bit of the MAD (the MAD header included), in the same
//! MSB-first numbering as every other layout here. Linux spells the same fields in
//! `include/rdma/ibta_vol1_c12.h` as `CM_FIELD*_LOC(struct, byte, bits)` with byte offsets
//! measured after the 24-byte `struct ib_mad_hdr` (`include/rdma/ib_mad.h`): a Linux byte offset
//! `b` with in-byte bit `k` is bit offset `(24 + b) * 8 + k` here. Multi-byte runs (GIDs, the
//! rejection information, private data) are byte ranges given as constants.

use crate::layout;
use core::ops::Range;

/// Bytes in every MAD (`IB_MGMT_MAD_SIZE` = 256, `include/rdma/ib_mad.h`).
pub const MAD_SIZE: usize = 256;
/// Bytes in the common MAD header (`struct ib_mad_hdr`).
pub const MAD_HDR_SIZE: usize = 24;
/// `IB_MGMT_BASE_VERSION`.
pub const BASE_VERSION: u8 = 1;
/// `IB_MGMT_CLASS_CM`.
pub const MGMT_CLASS_CM: u8 = 0x07;
/// `IB_CM_CLASS_VERSION` (`drivers/infiniband/core/cm_msgs.h`).
pub const CM_CLASS_VERSION: u8 = 2;
/// `IB_MGMT_METHOD_SEND`: every CM message (`cm.c: cm_format_mad_hdr`).
pub const METHOD_SEND: u8 = 0x03;
/// Queue key of QP1 (`IB_QP1_QKEY`, `include/rdma/ib_mad.h`).
pub const QP1_QKEY: u32 = 0x8001_0000;

/// CM attribute IDs (`include/rdma/ib_cm.h`: `CM_*_ATTR_ID`).
pub mod attr {
    /// ClassPortInfo.
    pub const CLASS_PORT_INFO: u16 = 0x0001;
    /// Connection request.
    pub const REQ: u16 = 0x0010;
    /// Message receipt acknowledgement.
    pub const MRA: u16 = 0x0011;
    /// Reject.
    pub const REJ: u16 = 0x0012;
    /// Reply to a request.
    pub const REP: u16 = 0x0013;
    /// Ready to use.
    pub const RTU: u16 = 0x0014;
    /// Disconnect request.
    pub const DREQ: u16 = 0x0015;
    /// Disconnect reply.
    pub const DREP: u16 = 0x0016;
    /// Service ID resolution request.
    pub const SIDR_REQ: u16 = 0x0017;
    /// Service ID resolution reply.
    pub const SIDR_REP: u16 = 0x0018;
    /// Load alternate path.
    pub const LAP: u16 = 0x0019;
    /// Alternate path response.
    pub const APR: u16 = 0x001a;
}

/// Which message an MRA or REJ answers (`enum cm_msg_response`, `cm_msgs.h`).
pub mod msg_response {
    /// The REQ.
    pub const REQ: u8 = 0;
    /// The REP.
    pub const REP: u8 = 1;
    /// Another message (LAP, ...).
    pub const OTHER: u8 = 2;
}

/// Reject reasons used on the rdma_cm path (`enum ib_cm_rej_reason`, `include/rdma/ib_cm.h`).
pub mod rej_reason {
    /// No QP available.
    pub const NO_QP: u16 = 1;
    /// Timeout: the sender gave up waiting (ARI = its CA GUID).
    pub const TIMEOUT: u16 = 7;
    /// No listener for the REQ's service ID.
    pub const INVALID_SERVICE_ID: u16 = 8;
    /// The (CA GUID, QPN) pair is still in timewait or already connected.
    pub const STALE_CONN: u16 = 10;
    /// The primary GID could not be used (ARI = the rejecter's GID).
    pub const INVALID_GID: u16 = 12;
    /// The consumer refused (rdma_reject, or the accept path failed).
    pub const CONSUMER_DEFINED: u16 = 28;
}

/// rdma_cm port spaces (`include/uapi/rdma/rdma_user_cm.h`: `RDMA_PS_*`).
pub mod port_space {
    /// `RDMA_PS_TCP`: reliable connected QPs addressed by IP and TCP-style port.
    pub const TCP: u16 = 0x0106;
    /// `RDMA_PS_UDP`.
    pub const UDP: u16 = 0x0111;
    /// `RDMA_PS_IB`.
    pub const IB: u16 = 0x013f;
}

/// The service ID rdma_cm uses for `port` in port space `ps`:
/// `((u64)ps << 16) + port` (`cma.c: rdma_get_service_id`).
pub const fn service_id(ps: u16, port: u16) -> u64 {
    ((ps as u64) << 16) + port as u64
}

layout! {
    /// The common MAD header (`struct ib_mad_hdr`, `include/rdma/ib_mad.h`).
    pub struct MadHdr("ib_mad_hdr", 0x18) {
        /// Base version ([`BASE_VERSION`]).
        base_version: u8 @ 0x00 [0x8],
        /// Management class ([`MGMT_CLASS_CM`]).
        mgmt_class: u8 @ 0x08 [0x8],
        /// Class version ([`CM_CLASS_VERSION`]).
        class_version: u8 @ 0x10 [0x8],
        /// Method ([`METHOD_SEND`]).
        method: u8 @ 0x18 [0x8],
        /// Status (0 for CM sends).
        status: u16 @ 0x20 [0x10],
        /// Class-specific word (0 for CM).
        class_specific: u16 @ 0x30 [0x10],
        /// Transaction ID.
        tid: u64 @ 0x40 [0x40],
        /// Attribute ID (see [`attr`]).
        attr_id: u16 @ 0x80 [0x10],
        /// Reserved (0).
        resv: u16 @ 0x90 [0x10],
        /// Attribute modifier (0 unless ECE).
        attr_mod: u32 @ 0xa0 [0x20],
    }
}

layout! {
    /// REQ, IBTA table 106 (`ibta_vol1_c12.h: CM_REQ_*`), over the whole MAD.
    pub struct CmReq("cm_req_msg", 0x100) {
        /// The sender's communication ID.
        local_comm_id: u32 @ 0xc0 [0x20],
        /// Service ID (rdma_cm: [`service_id`]).
        service_id: u64 @ 0x100 [0x40],
        /// The sender's CA (node) GUID.
        local_ca_guid: u64 @ 0x140 [0x40],
        /// Q_Key (UD only; 0 for RC).
        local_q_key: u32 @ 0x1a0 [0x20],
        /// The sender's QP number.
        local_qpn: u32 @ 0x1c0 [0x18],
        /// RDMA read/atomic requests the sender accepts as responder.
        responder_resources: u8 @ 0x1d8 [0x8],
        /// Local EE context (0).
        local_eecn: u32 @ 0x1e0 [0x18],
        /// RDMA read/atomic requests the sender issues as initiator.
        initiator_depth: u8 @ 0x1f8 [0x8],
        /// Remote EE context (0).
        remote_eecn: u32 @ 0x200 [0x18],
        /// How long the receiver may take to answer (4.096 us x 2^n).
        remote_cm_response_timeout: u8 @ 0x218 [0x5],
        /// Transport service type: 0 RC, 1 UC, 3 extended.
        transport_service_type: u8 @ 0x21d [0x2],
        /// End-to-end flow control.
        end_to_end_flow_control: bool @ 0x21f [0x1],
        /// The PSN the sender expects to receive first.
        starting_psn: u32 @ 0x220 [0x18],
        /// How long the sender takes to answer (4.096 us x 2^n).
        local_cm_response_timeout: u8 @ 0x238 [0x5],
        /// Transport retry count (0..=7).
        retry_count: u8 @ 0x23d [0x3],
        /// Partition key.
        partition_key: u16 @ 0x240 [0x10],
        /// Path MTU (IB enum: 1 = 256 .. 5 = 4096).
        path_packet_payload_mtu: u8 @ 0x250 [0x4],
        /// RD context exists (0).
        rdc_exists: bool @ 0x254 [0x1],
        /// RNR retry count (0..=7, 7 = infinite).
        rnr_retry_count: u8 @ 0x255 [0x3],
        /// CM retries the receiver may assume of the sender.
        max_cm_retries: u8 @ 0x258 [0x4],
        /// The sender's QP takes receives from an SRQ.
        srq: bool @ 0x25c [0x1],
        /// Extended transport type (0; 1 = XRC).
        extended_transport_type: u8 @ 0x25d [0x3],
        /// Primary path: the sender's LID (0xffff permissive when routed, as on RoCE).
        primary_local_port_lid: u16 @ 0x260 [0x10],
        /// Primary path: the receiver's LID.
        primary_remote_port_lid: u16 @ 0x270 [0x10],
        /// Primary path flow label.
        primary_flow_label: u32 @ 0x380 [0x14],
        /// Primary path static rate (0 = port current).
        primary_packet_rate: u8 @ 0x39a [0x6],
        /// Primary path traffic class.
        primary_traffic_class: u8 @ 0x3a0 [0x8],
        /// Primary path hop limit.
        primary_hop_limit: u8 @ 0x3a8 [0x8],
        /// Primary path service level.
        primary_sl: u8 @ 0x3b0 [0x4],
        /// Primary path is subnet-local (hop limit <= 1).
        primary_subnet_local: bool @ 0x3b4 [0x1],
        /// Primary path local ACK timeout (4.096 us x 2^n).
        primary_local_ack_timeout: u8 @ 0x3b8 [0x5],
        /// Alternate path: the sender's LID (0: no alternate path).
        alternate_local_port_lid: u16 @ 0x3c0 [0x10],
        /// Alternate path: the receiver's LID.
        alternate_remote_port_lid: u16 @ 0x3d0 [0x10],
        /// Alternate path flow label.
        alternate_flow_label: u32 @ 0x4e0 [0x14],
        /// Alternate path static rate.
        alternate_packet_rate: u8 @ 0x4fa [0x6],
        /// Alternate path traffic class.
        alternate_traffic_class: u8 @ 0x500 [0x8],
        /// Alternate path hop limit.
        alternate_hop_limit: u8 @ 0x508 [0x8],
        /// Alternate path service level.
        alternate_sl: u8 @ 0x510 [0x4],
        /// Alternate path is subnet-local.
        alternate_subnet_local: bool @ 0x514 [0x1],
        /// Alternate path local ACK timeout.
        alternate_local_ack_timeout: u8 @ 0x518 [0x5],
        /// Service-access-point extensions supported.
        sap_supported: bool @ 0x51d [0x1],
    }
}

impl CmReq<()> {
    /// Primary path: the sender's GID (`CM_REQ_PRIMARY_LOCAL_PORT_GID`).
    pub const PRIMARY_LOCAL_PORT_GID: Range<usize> = 80..96;
    /// Primary path: the receiver's GID (`CM_REQ_PRIMARY_REMOTE_PORT_GID`).
    pub const PRIMARY_REMOTE_PORT_GID: Range<usize> = 96..112;
    /// Alternate path: the sender's GID.
    pub const ALTERNATE_LOCAL_PORT_GID: Range<usize> = 124..140;
    /// Alternate path: the receiver's GID.
    pub const ALTERNATE_REMOTE_PORT_GID: Range<usize> = 140..156;
    /// Private data, 92 bytes (`IB_CM_REQ_PRIVATE_DATA_SIZE`).
    pub const PRIVATE_DATA: Range<usize> = 164..256;
}

layout! {
    /// MRA, IBTA table 107 (`CM_MRA_*`).
    pub struct CmMra("cm_mra_msg", 0x100) {
        /// The sender's communication ID.
        local_comm_id: u32 @ 0xc0 [0x20],
        /// The receiver's communication ID.
        remote_comm_id: u32 @ 0xe0 [0x20],
        /// Which message is acknowledged (see [`msg_response`]).
        message_mraed: u8 @ 0x100 [0x2],
        /// Extra time the sender needs (4.096 us x 2^n).
        service_timeout: u8 @ 0x108 [0x5],
    }
}

impl CmMra<()> {
    /// Private data, 222 bytes.
    pub const PRIVATE_DATA: Range<usize> = 34..256;
}

layout! {
    /// REJ, IBTA table 108 (`CM_REJ_*`).
    pub struct CmRej("cm_rej_msg", 0x100) {
        /// The sender's communication ID (0 when rejecting a REQ before an ID exists).
        local_comm_id: u32 @ 0xc0 [0x20],
        /// The receiver's communication ID.
        remote_comm_id: u32 @ 0xe0 [0x20],
        /// Which message is rejected (see [`msg_response`]).
        message_rejected: u8 @ 0x100 [0x2],
        /// Bytes of additional rejection information (0..=72).
        rejected_info_length: u8 @ 0x108 [0x7],
        /// Reason (see [`rej_reason`]).
        reason: u16 @ 0x110 [0x10],
    }
}

impl CmRej<()> {
    /// Additional rejection information, 72 bytes.
    pub const ARI: Range<usize> = 36..108;
    /// Private data, 148 bytes.
    pub const PRIVATE_DATA: Range<usize> = 108..256;
}

layout! {
    /// REP, IBTA table 110 (`CM_REP_*`).
    pub struct CmRep("cm_rep_msg", 0x100) {
        /// The sender's communication ID.
        local_comm_id: u32 @ 0xc0 [0x20],
        /// The receiver's communication ID (the REQ's local one).
        remote_comm_id: u32 @ 0xe0 [0x20],
        /// Q_Key (UD only).
        local_q_key: u32 @ 0x100 [0x20],
        /// The sender's QP number.
        local_qpn: u32 @ 0x120 [0x18],
        /// Local EE context (XRC target: the SRQ's QPN).
        local_ee_context_number: u32 @ 0x140 [0x18],
        /// The PSN the sender expects to receive first.
        starting_psn: u32 @ 0x160 [0x18],
        /// RDMA read/atomic requests the sender accepts as responder.
        responder_resources: u8 @ 0x180 [0x8],
        /// RDMA read/atomic requests the sender issues as initiator.
        initiator_depth: u8 @ 0x188 [0x8],
        /// The sender's CA ACK delay (4.096 us x 2^n).
        target_ack_delay: u8 @ 0x190 [0x5],
        /// Failover accepted (0).
        failover_accepted: u8 @ 0x195 [0x2],
        /// End-to-end flow control.
        end_to_end_flow_control: bool @ 0x197 [0x1],
        /// RNR retry count the receiver should use (0..=7).
        rnr_retry_count: u8 @ 0x198 [0x3],
        /// The sender's QP takes receives from an SRQ.
        srq: bool @ 0x19b [0x1],
        /// The sender's CA (node) GUID.
        local_ca_guid: u64 @ 0x1a0 [0x40],
    }
}

impl CmRep<()> {
    /// Private data, 196 bytes.
    pub const PRIVATE_DATA: Range<usize> = 60..256;
}

layout! {
    /// RTU, IBTA table 111 (`CM_RTU_*`).
    pub struct CmRtu("cm_rtu_msg", 0x100) {
        /// The sender's communication ID.
        local_comm_id: u32 @ 0xc0 [0x20],
        /// The receiver's communication ID.
        remote_comm_id: u32 @ 0xe0 [0x20],
    }
}

impl CmRtu<()> {
    /// Private data, 224 bytes.
    pub const PRIVATE_DATA: Range<usize> = 32..256;
}

layout! {
    /// DREQ, IBTA table 112 (`CM_DREQ_*`).
    pub struct CmDreq("cm_dreq_msg", 0x100) {
        /// The sender's communication ID.
        local_comm_id: u32 @ 0xc0 [0x20],
        /// The receiver's communication ID.
        remote_comm_id: u32 @ 0xe0 [0x20],
        /// The receiver's QP number (Linux ignores a DREQ naming another).
        remote_qpn_eecn: u32 @ 0x100 [0x18],
    }
}

impl CmDreq<()> {
    /// Private data, 220 bytes.
    pub const PRIVATE_DATA: Range<usize> = 36..256;
}

layout! {
    /// DREP, IBTA table 113 (`CM_DREP_*`).
    pub struct CmDrep("cm_drep_msg", 0x100) {
        /// The sender's communication ID.
        local_comm_id: u32 @ 0xc0 [0x20],
        /// The receiver's communication ID.
        remote_comm_id: u32 @ 0xe0 [0x20],
    }
}

impl CmDrep<()> {
    /// Private data, 224 bytes.
    pub const PRIVATE_DATA: Range<usize> = 32..256;
}

/// `CMA_VERSION` (`cma.c`).
pub const CMA_VERSION: u8 = 0x00;

layout! {
    /// rdma_cm's header at the start of a REQ's private data (`struct cma_hdr`, `cma.c`),
    /// IPv4 form: each address is `{ pad[3] = 0, addr }`, not `::ffff`-mapped.
    pub struct CmaHdr("cma_hdr", 0x24) {
        /// `CMA_VERSION` (0).
        cma_version: u8 @ 0x00 [0x8],
        /// IP version in bits 7:4 (4 or 6).
        ip_version: u8 @ 0x08 [0x4],
        /// The active side's (source) port.
        port: u16 @ 0x10 [0x10],
        /// IPv4 source address (last dword of `src_addr`).
        src_addr_ip4: u32 @ 0x80 [0x20],
        /// IPv4 destination address (last dword of `dst_addr`).
        dst_addr_ip4: u32 @ 0x100 [0x20],
    }
}

impl CmaHdr<()> {
    /// `src_addr` (16 bytes: IPv6, or IPv4 after 12 zero bytes).
    pub const SRC_ADDR: Range<usize> = 4..20;
    /// `dst_addr`.
    pub const DST_ADDR: Range<usize> = 20..36;
}
