//! Work requests: what [`super::RcQueuePair::post_send`] and `post_recv` take, and how a
//! scatter list is laid into a receive WQE.

use cxdirect_hw::wqe::{INVALID_LKEY, WQE_DS};

/// One entry of a gather or scatter list: `length` bytes at device address `addr` of the
/// memory region whose local key is `lkey` ([`super::MemoryRegion::sge`] builds one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sge {
    /// Device address (IOVA) of the first byte, inside the region of `lkey`.
    pub addr: u64,
    /// Bytes (0 to 2^31-1); an entry of 0 bytes is skipped, as rdma-core skips it.
    pub length: u32,
    /// The region's local key.
    pub lkey: u32,
}

/// A peer's memory: address and remote key, as the peer advertised them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RemoteAddr {
    /// Device address on the peer (its region's [`super::MemoryRegion::addr`] plus an offset).
    pub addr: u64,
    /// The peer region's remote key.
    pub rkey: u32,
}

/// The operation of a send work request (`ibv_wr_opcode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOp {
    /// SEND: consumes a receive on the peer.
    Send,
    /// SEND with immediate data (host order here, big-endian on the wire).
    SendImm(u32),
    /// RDMA WRITE into the peer's memory.
    Write(RemoteAddr),
    /// RDMA WRITE with immediate: also consumes a receive on the peer.
    WriteImm(RemoteAddr, u32),
    /// RDMA READ from the peer's memory into the scatter list.
    Read(RemoteAddr),
    /// Atomic compare and swap of the 8 bytes at the peer's address: if they equal `compare`
    /// they become `swap`; the original value lands in the 8-byte local buffer.
    CompareSwap {
        /// The peer's 8-byte aligned word.
        remote: RemoteAddr,
        /// Value compared.
        compare: u64,
        /// Value stored when equal.
        swap: u64,
    },
    /// Atomic fetch and add of the 8 bytes at the peer's address; the original value lands in
    /// the 8-byte local buffer.
    FetchAdd {
        /// The peer's 8-byte aligned word.
        remote: RemoteAddr,
        /// Value added.
        add: u64,
    },
}

/// Where a send request's bytes come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload<'a> {
    /// A gather list (for READ and atomics, the scatter list the reply lands in), at most
    /// [`super::QpCaps::max_send_sge`] entries.
    Gather(&'a [Sge]),
    /// Bytes copied into the WQE itself (`IBV_SEND_INLINE`), at most
    /// [`super::QpCaps::max_inline_data`]; SEND and WRITE only.
    Inline(&'a [u8]),
}

/// A send work request (`ibv_send_wr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendRequest<'a> {
    /// Returned in the work completion.
    pub wr_id: u64,
    /// What to do.
    pub op: SendOp,
    /// The message bytes.
    pub payload: Payload<'a>,
    /// Ask for a completion (`IBV_SEND_SIGNALED`); an unsignalled request completes silently
    /// with the next signalled one (unless the QP fails: then every request completes, flushed).
    /// However requests are signalled, the driver asks the device for a CQE at least every half
    /// send ring, so the ring is reclaimed by polling even when nothing is signalled; such a
    /// CQE makes no work completion.
    pub signaled: bool,
    /// Wait for every earlier READ and atomic to finish first (`IBV_SEND_FENCE`).
    pub fence: bool,
    /// Set the solicited-event bit (`IBV_SEND_SOLICITED`).
    pub solicited: bool,
}

impl<'a> SendRequest<'a> {
    /// A signalled request of `op` over `payload`, without fence or solicited event.
    pub fn new(wr_id: u64, op: SendOp, payload: Payload<'a>) -> Self {
        Self {
            wr_id,
            op,
            payload,
            signaled: true,
            fence: false,
            solicited: false,
        }
    }
}

/// A send work request on a UD or GSI queue pair (`ibv_send_wr` with its `wr.ud` part): one
/// SEND of at most one path MTU to the queue pair `remote_qpn` behind `ah`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdSendRequest<'a> {
    /// Returned in the work completion.
    pub wr_id: u64,
    /// Where the datagram goes.
    pub ah: &'a super::AddressHandle,
    /// The destination QP (24 bits; 1 for a GSI QP).
    pub remote_qpn: u32,
    /// The Q_Key the datagram carries; with bit 31 set ([`QKEY_FROM_QP`]) the queue pair's own
    /// Q_Key instead (IBA 10.2.5, as ib_mad posts every MAD).
    pub remote_qkey: u32,
    /// Immediate data (host order), sent as SEND with immediate.
    pub imm: Option<u32>,
    /// The message bytes (at most the QP's path MTU: 4096 bytes for UD, 256 for GSI, and the
    /// port's).
    pub payload: Payload<'a>,
    /// Ask for a completion (`IBV_SEND_SIGNALED`); as for [`SendRequest::signaled`].
    pub signaled: bool,
    /// Set the solicited-event bit (`IBV_SEND_SOLICITED`).
    pub solicited: bool,
}

/// Bit 31 of a send request's Q_Key: send with the queue pair's own Q_Key instead.
pub const QKEY_FROM_QP: u32 = cxdirect_hw::wqe::QKEY_FROM_QP;

impl<'a> UdSendRequest<'a> {
    /// A signalled SEND of `payload` to `remote_qpn` behind `ah` with `remote_qkey`.
    pub fn new(
        wr_id: u64,
        ah: &'a super::AddressHandle,
        remote_qpn: u32,
        remote_qkey: u32,
        payload: Payload<'a>,
    ) -> Self {
        Self {
            wr_id,
            ah,
            remote_qpn,
            remote_qkey,
            imm: None,
            payload,
            signaled: true,
            solicited: false,
        }
    }
}

/// A receive work request (`ibv_recv_wr`): the scatter list an arriving SEND fills.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvRequest<'a> {
    /// Returned in the work completion.
    pub wr_id: u64,
    /// At most [`super::QpCaps::max_recv_sge`] (or [`super::SrqCaps::max_sge`]) entries.
    pub sg_list: &'a [Sge],
}

/// Path MTU (`enum ibv_mtu`): payload bytes per RoCE packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PathMtu {
    /// 256 bytes.
    Mtu256 = 1,
    /// 512 bytes.
    Mtu512 = 2,
    /// 1,024 bytes.
    Mtu1024 = 3,
    /// 2,048 bytes.
    Mtu2048 = 4,
    /// 4,096 bytes.
    Mtu4096 = 5,
}

impl PathMtu {
    /// Payload bytes per packet.
    pub fn bytes(self) -> u32 {
        128 << (self as u32)
    }

    /// The largest path MTU whose packets fit a port frame of `frame` bytes (the port MTU as
    /// PMTU reports it, L2 header and FCS included: Ethernet 14, IPv6 40, UDP 8, BTH 12,
    /// ICRC 4 and FCS 4 around the payload), if any.
    pub fn largest_for(frame: u32) -> Option<Self> {
        [
            Self::Mtu4096,
            Self::Mtu2048,
            Self::Mtu1024,
            Self::Mtu512,
            Self::Mtu256,
        ]
        .into_iter()
        .find(|m| m.bytes() + 14 + 40 + 8 + 12 + 4 + 4 <= frame)
    }
}

/// Writes a scatter list into the `segs` 16-byte segments from segment `first` (ending it
/// with an invalid-key entry when shorter); returns its bytes.
#[inline]
pub(super) fn write_scatter(
    ring: &crate::ring::SlotRing<WQE_DS>,
    first: u32,
    segs: u32,
    list: &[Sge],
) -> u32 {
    let mut len = 0u32;
    let mut k = 0;
    for sge in list {
        ring.write_words(
            first.wrapping_add(k),
            &data_seg_words(sge.length, sge.lkey, sge.addr),
        );
        len = len.saturating_add(sge.length);
        k += 1;
    }
    if k < segs {
        ring.write_words(first.wrapping_add(k), &data_seg_words(0, INVALID_LKEY, 0));
    }
    len
}

/// A data segment (byte count, key, address) as the two words its slot holds, in memory order.
#[inline(always)]
pub(super) fn data_seg_words(byte_count: u32, lkey: u32, addr: u64) -> [u64; 2] {
    [
        (u64::from(byte_count) << 32 | u64::from(lkey)).to_be(),
        addr.to_be(),
    ]
}
