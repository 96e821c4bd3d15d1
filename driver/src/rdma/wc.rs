//! Work completions: what [`super::CompletionQueue::poll`] returns, named as libibverbs names
//! them (`ibv_wc`, `ibv_wc_status`, `ibv_wc_opcode`).

use cxdirect_hw::cqe::CqeSyndrome;

/// How a work request ended (`enum ibv_wc_status`), from the error CQE's syndrome as
/// rdma-core maps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WcStatus {
    /// Completed.
    #[default]
    Success,
    /// A receive buffer too small, or a message longer than the QP allows (`LOC_LEN_ERR`).
    LocLenErr,
    /// A malformed work request (`LOC_QP_OP_ERR`).
    LocQpOpErr,
    /// A local key that does not cover the buffer or lacks the right (`LOC_PROT_ERR`).
    LocProtErr,
    /// Flushed: the QP was in error, nothing was done (`WR_FLUSH_ERR`).
    WrFlushErr,
    /// Memory window bind error (`MW_BIND_ERR`).
    MwBindErr,
    /// An unexpected response (`BAD_RESP_ERR`).
    BadRespErr,
    /// A local access error on the responder (`LOC_ACCESS_ERR`).
    LocAccessErr,
    /// The peer refused the request as invalid (`REM_INV_REQ_ERR`).
    RemInvReqErr,
    /// The peer refused the remote key, its rights or its range (`REM_ACCESS_ERR`).
    RemAccessErr,
    /// The peer failed the operation (`REM_OP_ERR`).
    RemOpErr,
    /// No acknowledgement after every retry (`RETRY_EXC_ERR`).
    RetryExcErr,
    /// The peer had no receive posted after every RNR retry (`RNR_RETRY_EXC_ERR`).
    RnrRetryExcErr,
    /// The peer aborted (`REM_ABORT_ERR`).
    RemAbortErr,
    /// Any other syndrome (`GENERAL_ERR`); [`WorkCompletion::vendor_err`] has the raw one.
    GeneralErr,
}

impl WcStatus {
    /// The status of an error CQE with `syndrome`.
    #[inline]
    pub(super) fn from_syndrome(syndrome: u8) -> Self {
        match CqeSyndrome::try_from(syndrome) {
            Ok(CqeSyndrome::LocalLength) => Self::LocLenErr,
            Ok(CqeSyndrome::LocalQpOperation) => Self::LocQpOpErr,
            Ok(CqeSyndrome::LocalProtection) => Self::LocProtErr,
            Ok(CqeSyndrome::WrFlushed) => Self::WrFlushErr,
            Ok(CqeSyndrome::MwBind) => Self::MwBindErr,
            Ok(CqeSyndrome::BadResponse) => Self::BadRespErr,
            Ok(CqeSyndrome::LocalAccess) => Self::LocAccessErr,
            Ok(CqeSyndrome::RemoteInvalidRequest) => Self::RemInvReqErr,
            Ok(CqeSyndrome::RemoteAccess) => Self::RemAccessErr,
            Ok(CqeSyndrome::RemoteOperation) => Self::RemOpErr,
            Ok(CqeSyndrome::RetryExceeded) => Self::RetryExcErr,
            Ok(CqeSyndrome::RnrRetryExceeded) => Self::RnrRetryExcErr,
            Ok(CqeSyndrome::RemoteAborted) => Self::RemAbortErr,
            Err(_) => Self::GeneralErr,
        }
    }
}

/// What completed (`enum ibv_wc_opcode`). For an error completion of a send request it is
/// the request's own operation, as posted (never read from the CQE).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WcOpcode {
    /// A SEND (with or without immediate).
    #[default]
    Send,
    /// An RDMA WRITE (with or without immediate).
    RdmaWrite,
    /// An RDMA READ.
    RdmaRead,
    /// An atomic compare and swap.
    CompSwap,
    /// An atomic fetch and add.
    FetchAdd,
    /// A receive that a SEND filled (or that was flushed).
    Recv,
    /// A receive that an RDMA WRITE with immediate consumed (no bytes land in it).
    RecvRdmaWithImm,
}

/// One completion (`struct ibv_wc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WorkCompletion {
    /// The work request's id, as posted.
    pub wr_id: u64,
    /// How it ended.
    pub status: WcStatus,
    /// What it was.
    pub opcode: WcOpcode,
    /// The error CQE's raw syndrome (0 on success).
    pub vendor_err: u8,
    /// Bytes: received (receives; for a WRITE with immediate, the WRITE's length), read
    /// (RDMA READ), 8 (atomics); 0 for SEND and WRITE completions, as rdma-core reports.
    pub byte_len: u32,
    /// Immediate data of a SEND or WRITE with immediate (host order).
    pub imm: Option<u32>,
    /// The local queue pair.
    pub qpn: u32,
    /// The shared receive queue a receive came from.
    pub srqn: Option<u32>,
    /// What a successful receive on a UD or GSI queue pair reports of the datagram's sender
    /// (`ibv_wc`'s `src_qp`, `IBV_WC_GRH`, `pkey_index`); `None` for RC and for send and error
    /// completions.
    pub datagram: Option<DatagramInfo>,
}

/// The network header in front of a received datagram (mlx5's RoCE L3 header type of the
/// CQE's `flags_rqpn`, Linux `enum rdma_network_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetworkHeader {
    /// An InfiniBand GRH (RoCE v1): the 40 bytes are the GRH.
    Grh,
    /// RoCE v2 over IPv6: the 40 bytes are the IPv6 header.
    Ipv6,
    /// RoCE v2 over IPv4: 20 bytes of no meaning, then the 20-byte IPv4 header.
    Ipv4,
}

/// The sender of a datagram as its receive completion reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DatagramInfo {
    /// The sending QP (24 bits; 1 for a MAD from a GSI QP).
    pub src_qp: u32,
    /// The network header written in the first 40 bytes of the receive buffer (parse it with
    /// [`super::Grh::parse`]); `None` when the device wrote none (`IBV_WC_GRH` clear), then
    /// the payload still starts 40 bytes in.
    pub network: Option<NetworkHeader>,
    /// The BTH's P_Key (`None` for a SEND with immediate, whose CQE carries the immediate in
    /// its place).
    pub pkey: Option<u16>,
}
