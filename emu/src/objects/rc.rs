//! Reliable-connected QPs and the port's RoCE address table: what the RC transport runs on.

use super::{QueueBuffer, Slot};
use crate::objects::limits::{LOG_MAX_RA_QP, ROCE_ADDRESS_TABLE_SIZE};
use cxdirect_hw::roce::RoceAddrLayout;

/// Where an RC QP's receives come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RcReceive {
    /// The QP's own ring: `2^log_size` WQEs of `16 << log_stride` bytes at the buffer's start.
    Own { log_size: u8, log_stride: u8 },
    /// The RMP (SRQ) with this number.
    Shared(u32),
    /// No receive queue: every arriving SEND is refused.
    None,
    /// An XRC QP (service type XRC) of XRC domain `xrcd`: each request's XRCETH names the XRC
    /// SRQ (of that domain) its receives come from. `srqn` is the SRQ number the context
    /// names, kept only for QUERY_QP (Linux's mlx5_ib names its own XRC SRQ there).
    Xrc { xrcd: u32, srqn: u32 },
}

/// The primary address path of an RC QP (RoCE v2).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct RcPath {
    /// Force loopback: packets return to this port.
    pub loopback: bool,
    /// Index of the source GID in the port's RoCE address table.
    pub gid_index: u8,
    /// Destination GID (an IPv6 or IPv4-mapped address).
    pub rgid: [u8; 16],
    /// Peer MAC address.
    pub rmac: [u8; 6],
    /// UDP source port of RoCE v2 packets.
    pub udp_sport: u16,
    pub hop_limit: u8,
    pub tclass: u8,
    pub flow_label: u32,
    /// Ethernet priority (0-7) of its packets: `ads.eth_prio` (mlx5_ib writes the address
    /// handle's SL there, `mlx5_set_path`), a DC initiator's from its vector's SL; 0 for a
    /// DCT (mlx5_ib gives it none). QTCT maps it to the port's traffic class, whose rate
    /// limit the QP's packets count against (`engine::pacing`).
    pub prio: u8,
    /// Port number (1).
    pub port: u8,
    pub pkey_index: u16,
    /// Local ACK timeout: 4.096 us << value (0 = none).
    pub ack_timeout: u8,
}

/// Where the device learns how far software posted a QP's send ring (`qpc.send_dbr_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SendCounter {
    /// The doorbell record's send word (at `dbr + 4`), read when the QP is rung.
    Record,
    /// No record (`NO_DBR_EXT`): the counter the last doorbell announced, past the WQE it
    /// named (0 until the first, and again after the QP's reset).
    Doorbells(u16),
}

/// An RC QP: its queues, state and every attribute the transport needs.
#[derive(Debug)]
pub(crate) struct Qp {
    /// Service type (`cxdirect_hw::qp::service_type`): RC, UC, XRC, DCI, or QP1 for a GSI QP.
    pub service: u8,
    /// QP state (`cxdirect_hw::qp::state`).
    pub state: u8,
    pub pd: u32,
    pub uar: u32,
    pub cqn_snd: u32,
    pub cqn_rcv: u32,
    /// Work queue buffer: the receive ring first, then the send ring.
    pub buf: QueueBuffer,
    /// Doorbell record: receive counter at +0, send counter at +4.
    pub dbr: u64,
    /// Log2 of the send ring's WQEBBs; `None` without a send queue.
    pub log_sq_size: Option<u8>,
    /// Where the send ring's producer counter comes from (`send_dbr_mode`).
    pub send_counter: SendCounter,
    /// `offload_type` RNDV: the QP's send side belongs to its tag-matching XRQ, which sends
    /// rendezvous READs on it (mlx5_ib's `create_qp_common` sets it for a QP without a send
    /// queue whose SRQ is a TM SRQ).
    pub rndv_offload: bool,
    pub receive: RcReceive,
    pub user_index: u32,
    pub log_msg_max: u8,
    /// Path MTU code (`cxdirect_hw::qp::mtu`; 0 until INIT2RTR).
    pub mtu: u8,
    pub remote_qpn: u32,
    pub q_key: u32,
    pub path: RcPath,
    pub next_send_psn: u32,
    pub next_rcv_psn: u32,
    pub retry_count: u8,
    pub rnr_retry: u8,
    pub min_rnr_nak: u8,
    pub log_sra_max: u8,
    pub log_rra_max: u8,
    pub log_ack_req_freq: u8,
    /// Remote read, write and atomic enables.
    pub rre: bool,
    pub rwe: bool,
    pub rae: bool,
    /// Send WQEBB counter the requester has executed up to (wraps at 16 bits).
    pub sq_consumed: u16,
    /// Responder state.
    pub resp: Responder,
    /// Requester state: WQEs sent and not yet acknowledged.
    pub req: Requester,
    /// The Q counter set the QP counts in (`counter_set_id`; 0: none).
    pub counter_set: u32,
    /// Multicast loopback blocked (`block_lb_mc`, set by mlx5_ib for
    /// `IB_QP_CREATE_BLOCK_MULTICAST_LOOPBACK`, which rdma-core names
    /// `IBV_QP_CREATE_BLOCK_SELF_MCAST_LB`): the QP does not receive the multicast datagrams
    /// it sent itself; the group's other members on the function still do.
    pub block_lb_mc: bool,
    /// A UD QP's DETH source QP number (`deth_sqpn`; 0: the QP's own number). mlx5_ib's GSI
    /// transmit QPs set 1 (`MLX5_IB_QP_CREATE_SQPN_QP1` in `create_kernel_qp`).
    pub deth_sqpn: u32,
    /// A DC initiator (service type DCI): the connection it carries now (`None` before its
    /// first WQE).
    pub dci: Option<super::dc::DciConnection>,
    /// A DC initiator's streams (`None`: an ordinary DCI, or not a DCI).
    pub dci_streams: Option<super::dc::DciStreams>,
    /// One of a DCT's responder contexts: a QP of the device's own, which no command names.
    pub dc_responder: Option<super::dc::DcResponder>,
    pub slot: Slot,
}

impl Qp {
    /// The protection domain remote accesses to this QP are checked in: an XRC target's is
    /// the named XRC SRQ's, any other QP's its own.
    pub fn responder_pd(&self) -> u32 {
        self.resp.xrc.map_or(self.pd, |x| x.pd)
    }
}

impl RcReceive {
    /// Bytes of the QP's own receive ring at the start of its buffer (0 without one).
    pub fn ring_bytes(self) -> u64 {
        match self {
            RcReceive::Own {
                log_size,
                log_stride,
            } => (1u64 << log_size) * (16u64 << log_stride),
            _ => 0,
        }
    }
}

/// One RoCE address table entry, as SET_ROCE_ADDRESS gave it (`roce_addr_layout` bytes; all
/// zero when unset).
pub(crate) type GidEntry = [u8; 0x20];

/// The port's RoCE address (GID) table.
#[derive(Debug)]
pub(crate) struct GidTable {
    /// Written only by [`GidTable::set`], which keeps `held` true to it.
    entries: Vec<GidEntry>,
    /// The addresses and source MACs of the entries holding one, in table order: a frame's
    /// destination checks look through these (a few, as Linux sets one per IP address and
    /// RoCE version) rather than the whole table, and a function without RoCE addresses pays
    /// nothing per frame for it. Made again by [`GidTable::set`], a command.
    held: Vec<([u8; 16], [u8; 6])>,
}

impl GidTable {
    pub fn new() -> Self {
        Self {
            entries: vec![[0; 0x20]; usize::from(ROCE_ADDRESS_TABLE_SIZE)],
            held: Vec::new(),
        }
    }

    /// Sets entry `index` (all zero: unset); false when the table has no such entry.
    pub fn set(&mut self, index: usize, entry: GidEntry) -> bool {
        let Some(slot) = self.entries.get_mut(index) else {
            return false;
        };
        *slot = entry;
        self.held = self
            .entries
            .iter()
            .filter(|e| holds_address(e))
            .map(|e| {
                let mut gid = [0u8; 16];
                gid.copy_from_slice(&e[..16]);
                let mac = RoceAddrLayout::new(&e[..]).map_or([0; 6], |l| l.source_mac());
                (gid, mac)
            })
            .collect();
        true
    }

    /// Entries in the table (`ROCE_ADDRESS_TABLE_SIZE`).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Entry `index` as last set (all zero when unset); `None` past the table.
    pub fn entry(&self, index: usize) -> Option<&GidEntry> {
        self.entries.get(index)
    }

    /// Whether `mac` is the source MAC of an entry holding an address.
    pub fn has_mac(&self, mac: &[u8]) -> bool {
        self.held.iter().any(|(_, m)| m[..] == *mac)
    }

    /// Whether `gid` (16 bytes) is the address of an entry.
    pub fn has_gid(&self, gid: &[u8]) -> bool {
        self.held.iter().any(|(g, _)| g[..] == *gid)
    }

    /// The entry at `index` if it holds an address.
    pub fn valid(&self, index: usize) -> Option<&GidEntry> {
        self.entries.get(index).filter(|entry| holds_address(entry))
    }
}

/// Whether a RoCE address table entry holds an address (its GID is not all zero).
fn holds_address(entry: &GidEntry) -> bool {
    entry[..16].iter().any(|&b| b != 0)
}

/// What the responder of an RC QP is in the middle of.
#[derive(Debug, Clone, Default)]
pub(crate) struct Responder {
    /// Receive WQEs consumed from the QP's own ring (wraps at 16 bits).
    pub rq_consumed: u16,
    /// Message sequence number: messages completed, mod 2^24.
    pub msn: u32,
    /// A sequence-error NAK was sent and no packet in sequence arrived since.
    pub nak_sent: bool,
    /// The receive WQE a multi-packet SEND scatters into, and the bytes it took so far.
    pub recv: Option<ReceiveInProgress>,
    /// The RDMA WRITE in progress: next virtual address, rkey, bytes in all, bytes so far.
    pub write: Option<WriteInProgress>,
    /// UC: the receive WQE of a SEND abandoned after a lost packet, emptied; the next SEND
    /// takes it before any other.
    pub parked: Option<ReceiveInProgress>,
    /// The READ and atomic requests answered last, oldest overwritten first: a duplicate of
    /// one is answered again from them (a READ from memory, an atomic with the value it
    /// found), never executed twice.
    pub answered: [Option<Answered>; RESPONDER_RESOURCES],
    /// Slot of `answered` the next request takes.
    pub answered_next: usize,
    /// Responses and acknowledgements owed to the requester and not yet on the wire, in PSN
    /// order: the device transmits them as the link takes them.
    pub owed: OwedQueue,
    /// XRC target QPs: the XRC SRQ the request being executed names (its XRCETH), as it was
    /// when the request arrived.
    pub xrc: Option<XrcTarget>,
    /// A page fault of the responder reported and not yet resumed, or resumed with an error
    /// (`engine::rc::page_fault`).
    pub page_fault: Option<ResponderFault>,
    /// The first packet of the open message faulted: its retransmission opens the message
    /// again (a SEND keeps the receive WQE it took, a WRITE starts over).
    pub refirst: bool,
    /// A SEND on a tag-matching XRQ: where the open message lands and how it completes
    /// (`engine::rc::tag_matching`).
    pub tm: Option<crate::objects::tm::TmLanding>,
}

/// A responder page fault waiting for PAGE_FAULT_RESUME, or resumed with an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ResponderFault {
    /// What faulted.
    pub kind: ResponderFaultKind,
    /// PAGE_FAULT_RESUME came with its error bit: the next request in sequence is refused.
    pub failed: bool,
}

/// What a responder page fault stopped (`MLX5_PFAULT_SUBTYPE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResponderFaultKind {
    /// A remote access (RDMA WRITE, READ, atomic) through its rkey: the RDMA sub type, with
    /// the `MLX5_PFAULT_*` flags it reported.
    Rdma { pf_type: u8 },
    /// A SEND's scatter into the receive WQE in progress: the WQE sub type, `wq` the queue it
    /// named (the QP for its own ring, `MLX5_WQE_PF_TYPE_RESP`; the SRQ,
    /// `MLX5_WQE_PF_TYPE_RMP`).
    Receive { wq: u32 },
}

/// A send WQE stopped by a page fault, waiting for PAGE_FAULT_RESUME: of its gather
/// (`MLX5_WQE_PF_TYPE_REQ_SEND_OR_WRITE`), or of the scatter of its READ response or atomic
/// acknowledgement (`MLX5_WQE_PF_TYPE_REQ_READ_OR_ATOMIC`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RequesterFault {
    /// The WQE's index (WQE counter).
    pub index: u16,
    /// Its opcode.
    pub opcode: u8,
    /// The fault's `MLX5_WQE_PF_TYPE_*`.
    pub pf_type: u8,
}

/// The XRC SRQ an XRC request names, with what the responder takes from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct XrcTarget {
    pub srqn: u32,
    /// The SRQ's protection domain: remote keys are checked against it.
    pub pd: u32,
    /// The CQ the SRQ's receives complete on.
    pub cqn: u32,
    /// The SRQ's user index, which its CQEs carry.
    pub user_index: u32,
}

/// Something the responder owes its requester and has not transmitted yet, because the
/// wire had no room for it or something before it is still waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owed {
    /// The rest of a READ's responses: the next one takes `next_psn` and carries the bytes
    /// from `offset` (of `len` in all, read at `va` through `rkey`); `msn` is the MSN the
    /// READ completed with. `replay` marks the answer to a duplicate READ.
    Read {
        next_psn: u32,
        va: u64,
        rkey: u32,
        len: u32,
        offset: u32,
        msn: u32,
        replay: bool,
    },
    /// An acknowledgement (or NAK) of `psn` carrying the AETH word `aeth`.
    Ack { psn: u32, aeth: u32 },
    /// The atomic acknowledgement of `psn`, carrying `aeth` and the value `original` found.
    AtomicAck { psn: u32, aeth: u32, original: u64 },
}

impl Owed {
    /// The PSN the next packet of this takes.
    pub fn psn(&self) -> u32 {
        match *self {
            Owed::Read { next_psn, .. } => next_psn,
            Owed::Ack { psn, .. } | Owed::AtomicAck { psn, .. } => psn,
        }
    }
}

/// Entries an [`OwedQueue`] holds: every READ and atomic the QP may have outstanding, each
/// followed by an acknowledgement (consecutive ACKs merge into one), with room to spare.
pub(crate) const OWED_DEPTH: usize = 4 * RESPONDER_RESOURCES;

/// A fixed ring of [`Owed`] entries, oldest first; it never allocates.
#[derive(Debug, Clone)]
pub(crate) struct OwedQueue {
    entries: [Option<Owed>; OWED_DEPTH],
    head: usize,
    len: usize,
}

impl Default for OwedQueue {
    fn default() -> Self {
        Self {
            entries: [None; OWED_DEPTH],
            head: 0,
            len: 0,
        }
    }
}

impl OwedQueue {
    /// Whether nothing is owed.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the ring has no free entry.
    pub fn is_full(&self) -> bool {
        self.len == OWED_DEPTH
    }

    /// Appends `owed`; false (nothing appended) when the ring is full.
    pub fn push_back(&mut self, owed: Owed) -> bool {
        if self.is_full() {
            return false;
        }
        self.entries[(self.head + self.len) % OWED_DEPTH] = Some(owed);
        self.len += 1;
        true
    }

    /// The oldest entry.
    pub fn front_mut(&mut self) -> Option<&mut Owed> {
        if self.len == 0 {
            return None;
        }
        self.entries[self.head].as_mut()
    }

    /// The newest entry.
    pub fn back_mut(&mut self) -> Option<&mut Owed> {
        if self.len == 0 {
            return None;
        }
        self.entries[(self.head + self.len - 1) % OWED_DEPTH].as_mut()
    }

    /// Removes the oldest entry.
    pub fn pop_front(&mut self) -> Option<Owed> {
        if self.len == 0 {
            return None;
        }
        let owed = self.entries[self.head].take();
        self.head = (self.head + 1) % OWED_DEPTH;
        self.len -= 1;
        owed
    }

    /// Removes the newest entry.
    pub fn pop_back(&mut self) -> Option<Owed> {
        if self.len == 0 {
            return None;
        }
        self.len -= 1;
        self.entries[(self.head + self.len) % OWED_DEPTH].take()
    }

    /// Forgets every entry.
    pub fn clear(&mut self) {
        *self = Self::default();
    }
}

/// READ and atomic requests a responder remembers: the most the QP may have outstanding
/// (`2^log_max_ra_res_qp`).
pub(crate) const RESPONDER_RESOURCES: usize = 1 << LOG_MAX_RA_QP;

/// A READ or atomic request the responder answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answered {
    /// An RDMA READ whose responses took PSNs `first_psn..=last_psn` (mod 2^24).
    Read { first_psn: u32, last_psn: u32 },
    /// An atomic at `psn` that found `original` at its target.
    Atomic { psn: u32, original: u64 },
}

impl Responder {
    /// Remembers a READ or atomic request just answered.
    pub fn remember(&mut self, answered: Answered) {
        let slot = self.answered_next % RESPONDER_RESOURCES;
        self.answered[slot] = Some(answered);
        self.answered_next = (slot + 1) % RESPONDER_RESOURCES;
    }
}

/// A receive WQE being filled.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReceiveInProgress {
    /// WQE counter of the receive WQE (its index in the ring or RMP).
    pub index: u16,
    /// Bus address of the WQE.
    pub addr: u64,
    /// Bytes of the WQE, its data segments from `data_at` on.
    pub len: usize,
    /// Offset of the first data segment (16 past a linked-list RMP's next segment).
    pub data_at: usize,
    /// Protection domain of the ring the WQE came from (the QP's, or the RMP's).
    pub pd: u32,
    /// Bytes scattered so far.
    pub bytes: u32,
}

/// An RDMA WRITE being received.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WriteInProgress {
    pub va: u64,
    pub rkey: u32,
    pub total: u32,
    pub done: u32,
}

/// A send WQE on the wire, waiting for its acknowledgement.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Outstanding {
    /// WQE counter (the WQEBB index of its control segment).
    pub index: u16,
    /// The WQE's opcode.
    pub opcode: u8,
    /// PSN of its first packet (a READ's first response).
    pub first_psn: u32,
    /// PSN of its last packet (a READ's last response).
    pub last_psn: u32,
    /// A CQE is asked for on success.
    pub signaled: bool,
    /// Message bytes.
    pub bytes: u32,
    /// READ response packets (or atomic acknowledgements) taken so far, in PSN order.
    pub responses: u32,
}

/// What the requester of an RC QP waits for.
#[derive(Debug, Clone, Default)]
pub(crate) struct Requester {
    /// WQEs sent and not acknowledged, oldest first.
    pub outstanding: std::collections::VecDeque<Outstanding>,
    /// When the oldest outstanding packet times out (no ACK timer: `None`).
    pub ack_deadline: Option<std::time::Instant>,
    /// Retransmissions left after a timeout before the QP fails (from `retry_count`).
    pub retries_left: u8,
    /// When to send again after an RNR NAK.
    pub rnr_until: Option<std::time::Instant>,
    /// RNR NAKs still accepted (from `rnr_retry`; 7 means without limit).
    pub rnr_retries_left: u8,
    /// The PSN the last ACK or NAK acknowledged everything up to (inclusive), for the WQEs
    /// after a READ or atomic that retire once its response comes.
    pub acked_psn: Option<u32>,
    /// The WQE whose packets the wire had no room for yet: later device passes continue it,
    /// and every WQE after it waits.
    pub sending: Option<Sending>,
    /// The WQE a page fault stopped: it and every WQE after it wait for PAGE_FAULT_RESUME.
    pub page_fault: Option<RequesterFault>,
    /// Requests the device sends on its own for a tag-matching XRQ's rendezvous (the READ of
    /// the sender's buffer, the FIN after it), each under the first PSN it took
    /// (`engine::rc::tag_matching`).
    pub rendezvous: Vec<crate::objects::tm::Rendezvous>,
    /// `drain_sigerr`: a signature error in a WQE stops the send queue after it (the QP
    /// goes to SQD) instead of letting the next WQEs run (rdma-core's signature pipelining).
    pub drain_sigerr: bool,
    /// A WQE of a `drain_sigerr` QP met a signature error: the QP drains once it is consumed.
    pub enter_sqd: bool,
    /// SQ_DRAINED is owed once nothing sent is outstanding.
    pub drained_event_owed: bool,
}

/// Where the requester stopped sending a WQE for lack of room on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sending {
    /// The WQE's index in the send ring (WQEBBs).
    pub index: u16,
    /// The PSN of the WQE's first packet.
    pub first_psn: u32,
    /// The packet of the WQE to send next (0 for its first); its PSN is `first_psn` plus it.
    pub next_packet: u32,
}

/// The RC transport's counters in a Q counter set, named as QUERY_Q_COUNTER reports them
/// (`query_q_counter_out`); each wraps at 32 bits.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RcQCounters {
    pub rx_write_requests: u32,
    pub rx_read_requests: u32,
    pub rx_atomic_requests: u32,
    pub out_of_sequence: u32,
    pub duplicate_request: u32,
    pub rnr_nak_retry_err: u32,
    pub packet_seq_err: u32,
    pub implied_nak_seq_err: u32,
    pub local_ack_timeout_err: u32,
    pub resp_local_length_error: u32,
    pub req_local_length_error: u32,
    pub resp_local_protection: u32,
    pub req_local_protection: u32,
    pub resp_cqe_error: u32,
    pub req_cqe_error: u32,
    pub req_remote_invalid_request: u32,
    pub resp_remote_invalid_request: u32,
    pub req_remote_access_errors: u32,
    pub resp_remote_access_errors: u32,
    pub req_remote_operation_errors: u32,
    pub req_transport_retries_exceeded: u32,
    pub resp_cqe_flush_error: u32,
    pub req_cqe_flush_error: u32,
}

#[cfg(test)]
mod tests {
    use super::{GidEntry, GidTable};

    #[test]
    fn the_gid_table_keeps_the_addresses_and_macs_of_its_held_entries() {
        let mut table = GidTable::new();
        let gid = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        let mac = [0x02, 0, 0, 0, 0, 0x0a];
        assert!(!table.has_gid(&gid) && !table.has_mac(&mac));
        let mut entry: GidEntry = [0; 0x20];
        entry[..16].copy_from_slice(&gid);
        // `roce_addr_layout`: source MAC bits 47..32 at byte 0x12, 31..0 at 0x14.
        entry[0x12..0x14].copy_from_slice(&mac[..2]);
        entry[0x14..0x18].copy_from_slice(&mac[2..]);
        assert!(table.set(3, entry));
        assert!(table.set(3, entry), "set again: still one");
        assert!(table.set(7, entry));
        assert!(table.has_gid(&gid) && table.has_mac(&mac));
        assert!(table.set(3, [0; 0x20]));
        assert!(table.has_gid(&gid), "entry 7 still holds it");
        assert!(table.set(7, [0; 0x20]));
        assert!(table.set(7, [0; 0x20]), "cleared twice: still none");
        assert!(!table.has_gid(&gid) && !table.has_mac(&mac));
        // An entry with a MAC but no address holds nothing.
        let mut no_gid: GidEntry = [0; 0x20];
        no_gid[0x14..0x18].copy_from_slice(&mac[2..]);
        assert!(table.set(1, no_gid));
        assert!(!table.has_mac(&mac));
        assert!(!table.set(table.len(), entry), "no such entry");
    }
}
