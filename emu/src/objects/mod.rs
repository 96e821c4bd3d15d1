//! Object tables and the objects the firmware creates: UARs, PDs, transport domains, EQs, CQs,
//! SQs, RQs, RMPs, TISs, TIRs, RQTs, flow tables and memory keys.
//!
//! The firmware (`fw`) creates, modifies and destroys these objects; the queue engines
//! (`engine`) run them. Both read this room; it reads neither.

pub(crate) mod av_qp_mapping;
pub(crate) mod context;
pub(crate) mod dc;
pub(crate) mod devx;
pub(crate) mod icm;
pub(crate) mod ksm;
pub(crate) mod limits;
pub(crate) mod match_parts;
pub(crate) mod mcg;
pub(crate) mod memic;
pub(crate) mod meter;
pub(crate) mod pacing;
pub(crate) mod queue_state;
pub(crate) mod rc;
pub(crate) mod repeat;
pub(crate) mod reserved_qpn;
pub(crate) mod scheduling;
pub(crate) mod signature;
pub(crate) mod steering;
pub(crate) mod table;
pub(crate) mod tm;

use crate::config::EmuConfig;
pub(crate) use context::Slot;
use cxdirect_hw::doorbell::UAR_PAGE_SIZE;
use queue_state::{Compression, Fetched};
pub(crate) use steering::{
    FlowCounter, FlowEntry, FlowGroup, FlowSampler, FlowTable, MatchDefiner, ModifyHeader,
    PacketReformat, Rqt, Tir, TirDispatch, Tis, MATCH_WORDS,
};
pub(crate) use table::Table;

/// A queue buffer described by a page list: the device resolves byte offsets to bus addresses.
#[derive(Debug, Clone)]
pub(crate) struct QueueBuffer {
    pub pas: Vec<u64>,
    /// Absolute log2 of the page size.
    pub log_page: u32,
    /// Offset of the buffer's start in its first page, in bytes.
    pub offset: u64,
    /// Size of the buffer in bytes.
    pub size: u64,
}

impl QueueBuffer {
    /// Bus address of byte `offset` of the buffer; `None` past the end.
    pub fn addr(&self, offset: u64) -> Option<u64> {
        if offset >= self.size {
            return None;
        }
        let at = self.offset + offset;
        let page = (at >> self.log_page) as usize;
        let base = *self.pas.get(page)?;
        Some(base + (at & ((1u64 << self.log_page) - 1)))
    }

    /// Bytes from `offset` on that are contiguous in bus addresses: to the end of its page or
    /// of the buffer, whichever comes first (0 past the end).
    pub fn contiguous(&self, offset: u64) -> u64 {
        if offset >= self.size {
            return 0;
        }
        let page = 1u64 << self.log_page;
        let in_page = (self.offset + offset) & (page - 1);
        (page - in_page).min(self.size - offset)
    }
}

/// Queue state as the manual numbers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum QState {
    Rst = 0,
    Rdy = 1,
    Err = 3,
}

impl QState {
    pub fn from_raw(raw: u8) -> Option<Self> {
        match raw {
            0 => Some(Self::Rst),
            1 => Some(Self::Rdy),
            3 => Some(Self::Err),
            _ => None,
        }
    }
}

#[derive(Debug)]
pub(crate) struct Eq {
    pub buf: QueueBuffer,
    pub log_size: u8,
    pub uar: u32,
    pub vector: u16,
    pub event_mask: u64,
    /// Producer counter (EQEs written).
    pub pi: u32,
    /// Consumer counter as last reported by the driver's EQ doorbell.
    pub ci: u32,
    pub armed: bool,
    pub overrun: bool,
    pub cq_users: u32,
    pub slot: Slot,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CqArm {
    Disarmed,
    Next,
    Solicited,
}

#[derive(Debug)]
pub(crate) struct Cq {
    pub buf: QueueBuffer,
    pub log_size: u8,
    pub eqn: u32,
    pub uar: u32,
    pub dbr: u64,
    pub pi: u32,
    pub arm: CqArm,
    pub arm_sn: u8,
    pub overrun_ignore: bool,
    pub in_error: bool,
    pub users: u32,
    pub slot: Slot,
    /// Set when created with `cqe_comp_en`.
    pub compression: Option<Compression>,
    /// Bytes of one CQ entry: 64, or 128 (`cqe_sz` 1) with the 64-byte CQE in its second half.
    pub entry_bytes: u64,
    /// Set for 128-byte entries created padded (`cqe_sz` 2): the device writes the whole entry,
    /// its first half as zeros, where an unpadded one leaves the first half alone.
    pub padded: bool,
}

/// The work queue part shared by SQs, RQs and RMPs.
#[derive(Debug)]
pub(crate) struct WorkQueue {
    pub buf: QueueBuffer,
    pub log_stride: u8,
    pub log_size: u8,
    pub dbr: u64,
    pub pd: u32,
    pub uar: u32,
    /// WQEs (receive) or WQEBBs (send) the device has consumed, wrapping at 16 bits as the
    /// doorbell record counters do.
    pub consumed: u16,
    /// Receive queues: the doorbell record counter as last read. WQEs before it are known to
    /// be posted, so the record is read again only when they run out, as a NIC prefetches
    /// receive WQEs rather than reading the record for every frame.
    pub posted_end: u16,
    /// Receive queues: WQEs read ahead of their frames.
    pub fetched: Fetched,
    /// Linked-list RMPs (`wq_type` 0, an RC SRQ): the index of the next WQE the device takes.
    /// Each WQE starts with a next segment naming the WQE after it; its data segments follow.
    /// `None` for a cyclic ring.
    pub linked_head: Option<u16>,
    /// Send queues: what the WQE at `consumed` already put on the wire when a rate limit
    /// stopped the SQ between the frames that WQE makes (an LSO or multi-packet WQE).
    pub partly_sent: PartlySent,
}

/// The frames of a send WQE already on the wire when its SQ's rates stopped it: the device
/// schedules packets, not WQEs, so an LSO or multi-packet WQE may leave in several turns. The
/// WQE goes on from the next frame when the SQ runs again, and completes once, with every
/// frame's bytes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PartlySent {
    /// Frames already sent (0: none, the WQE has not started).
    pub frames: u64,
    /// Their bytes on the wire.
    pub bytes: usize,
}

impl WorkQueue {
    pub fn entries(&self) -> u32 {
        1 << self.log_size
    }

    pub fn stride(&self) -> u64 {
        1 << self.log_stride
    }

    /// Starts the counters over (a reset queue): nothing consumed, nothing known posted.
    pub fn restart(&mut self) {
        self.consumed = 0;
        self.posted_end = 0;
        self.fetched.clear();
        self.partly_sent = PartlySent::default();
        if self.linked_head.is_some() {
            self.linked_head = Some(0);
        }
    }
}

#[derive(Debug)]
pub(crate) struct Sq {
    pub wq: WorkQueue,
    pub cqn: u32,
    pub tisn: u32,
    pub state: QState,
    pub min_inline: u8,
    /// Created with `allow_multi_pkt_send_wqe`: enhanced multi-packet WQEs are accepted.
    pub multi_packet: bool,
    /// Created with `reg_umr`: UMR WQEs are accepted (`engine::sq_umr`).
    pub reg_umr: bool,
    /// `sqc.user_index` (24 bits): written into every CQE of the SQ (`cqe_version` 1), which
    /// is how libmlx5 finds a raw packet QP's send completions.
    pub user_index: u32,
    pub slot: Slot,
    /// `packet_pacing_rate_limit_index`: 0 (unlimited) or the rate table entry it sends at.
    pub rate_index: u16,
    /// Its bucket, while it names an entry (`engine::pacing`).
    pub pacer: pacing::Pacer,
    /// `sqc.flush_in_error_en`: once in error, every WQE posted past the failed one completes
    /// with a flush error CQE (`engine::sq_flush`).
    pub flush_in_error: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RqMemory {
    Own,
    Rmp(u32),
}

#[derive(Debug)]
pub(crate) struct Rq {
    /// The RQ's own ring (absent when it draws from an RMP).
    pub wq: Option<WorkQueue>,
    pub memory: RqMemory,
    pub cqn: u32,
    pub state: QState,
    pub tir_users: u32,
    pub rqt_users: u32,
    /// Q counter set the RQ counts into (0 = none).
    pub counter_set: u32,
    /// `rqc.user_index` (24 bits): written into the CQEs of an RQ with its own ring
    /// (`cqe_version` 1), which is how libmlx5 finds a raw packet QP's receive completions.
    pub user_index: u32,
    pub slot: Slot,
    /// A striding RQ's geometry and place (`None`: one packet per WQE).
    pub striding: Option<Striding>,
    /// Strip a frame's first VLAN tag (802.1Q) into its CQE (`rqc.vsd` clear, as mlx5e asks
    /// while `rxvlan` is on, `mlx5e_build_rq_param`; libmlx5 for a raw packet QP created with
    /// `IBV_QP_CREATE_CVLAN_STRIPPING`).
    pub vlan_strip: bool,
}

/// A striding (multi-packet) RQ: each WQE is one buffer of `2^log_strides` strides of
/// `2^log_stride_bytes` bytes, filled packet after packet.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Striding {
    /// Log2 of the strides per WQE (9..=16).
    pub log_strides: u8,
    /// Log2 of the stride size in bytes (6..=13).
    pub log_stride_bytes: u8,
    /// Each packet starts two bytes into its first stride (`two_byte_shift_en`).
    pub two_byte_shift: bool,
    /// Strides of the current WQE (`consumed`) already taken.
    pub used: u32,
}

impl Striding {
    pub fn strides(&self) -> u32 {
        1 << self.log_strides
    }

    pub fn stride_bytes(&self) -> u32 {
        1 << self.log_stride_bytes
    }
}

/// A Q counter set (ALLOC_Q_COUNTER). Counters wrap at 32 bits as the device's do.
#[derive(Debug, Default)]
pub(crate) struct QCounter {
    pub out_of_buffer: u32,
    /// The RC transport's counters of the QPs naming the set.
    pub rc: rc::RcQCounters,
}

#[derive(Debug)]
pub(crate) struct Rmp {
    pub wq: WorkQueue,
    pub state: QState,
    /// Armed low watermark (0 = disarmed).
    pub lwm: u16,
    pub rq_users: u32,
    pub slot: Slot,
    /// CREATE_XRQ made it: an XRQ (its own CQ, user index and, for tag matching, its
    /// matching list), which RC QPs name as their SRQ.
    pub xrq: Option<Box<tm::Xrq>>,
}

/// An XRC SRQ of one XRC domain: a linked-list receive ring (each WQE a next segment, then
/// data segments) that the XRC target QPs of its domain take SEND receives from, the XRC
/// packet's XRCETH naming it.
#[derive(Debug)]
pub(crate) struct XrcSrq {
    pub xrcd: u32,
    /// The ring; its `pd` is the SRQ's protection domain, which also guards remote accesses
    /// through target QPs naming the SRQ.
    pub wq: WorkQueue,
    /// The CQ its receives complete on.
    pub cqn: u32,
    /// The index its CQEs carry in `srqn_uidx` (`user_index` of the context), by which
    /// libmlx5 finds the SRQ.
    pub user_index: u32,
    /// Armed limit (low watermark) in WQEs, set by ARM_XRC_SRQ (0 = disarmed).
    pub lwm: u16,
    /// The buffer's page size as created (`log_page_size`, log2 less 12), read back by
    /// QUERY_XRC_SRQ.
    pub log_page_size: u8,
    /// The buffer's offset in its first page as created (`page_offset`, 1/64 page units).
    pub page_offset: u8,
}

/// The `qpn` of a memory key bound to no QP (all ones in the 24-bit field).
pub(crate) const UNBOUND_QPN: u32 = 0x00ff_ffff;

/// A memory key: its context as CREATE_MKEY gave it and UMR WQEs changed it since.
#[derive(Debug)]
pub(crate) struct Mkey {
    pub variant: u8,
    pub access_mode: u8,
    pub pd: u32,
    pub start: u64,
    pub len: u64,
    pub length64: bool,
    pub log_page: u32,
    /// MTT mode: the page addresses loaded so far (CREATE_MKEY's list, then UMR writes); an
    /// index past the end is a page never loaded, and an access through it fails.
    pub mtt: Vec<u64>,
    /// KLM mode: the pieces loaded so far, each (bytes, key, address).
    pub klm: Vec<(u32, u32, u64)>,
    /// KLM mode: a repeated block layout a UMR wrote instead of a list of pieces
    /// (`mlx5dv_wr_mr_interleaved`); while set, [`Mkey::klm`] is empty.
    pub repeat: Option<Box<repeat::RepeatBlock>>,
    /// KSM mode: the blocks whose entry names a key other than the null key; a block without
    /// one maps nothing.
    pub ksm: ksm::KsmTable,
    /// Translation entries the key holds at most (MTT entries, KLMs or KSM blocks), from
    /// `translations_octword_size`.
    pub xlt_capacity: usize,
    /// The key's MTT entries' rd_en/wr_en bits are present bits (a missing one a page fault
    /// or an access error): the key was created with `pg_access`, or with `umr_en` while the
    /// function reports `pg` (Linux's UMR writes every entry with `MLX5_IB_MTT_PRESENT` or,
    /// for ODP, with the bits of the pages mapped). Otherwise an entry is a bare page address
    /// (Linux's `reg_create` with `pg` off).
    pub pg_access: bool,
    /// UMR WQEs may change the key (`umr_en`).
    pub umr_en: bool,
    /// A SEND with invalidate may free the key (`en_rinval`).
    pub remote_invalidate: bool,
    /// The QP the key is bound to (`qpn`; [`UNBOUND_QPN`] when none): a type 2 memory window
    /// bound by libmlx5's IBV_WR_BIND_MW names the posting QP, and only requests arriving on
    /// that QP may then use it (IBA 10.6.7.2).
    pub qpn: u32,
    pub local_read: bool,
    pub local_write: bool,
    pub remote_read: bool,
    pub remote_write: bool,
    pub atomic: bool,
    pub free: bool,
    pub slot: Slot,
    /// Created with `bsf_en` (mlx5_ib's integrity key, `mlx5_alloc_integrity_descs`): a
    /// signature UMR may attach a BSF to it.
    pub bsf_en: bool,
    /// The signature a UMR attached (`set_sig_umr_wr`): how memory and wire protect each
    /// block, and where the memory lies.
    pub sig: Option<Box<signature::SigKey>>,
    /// `expected_sigerr_count` as the last signature UMR set it: a signature error is
    /// reported while the parity of [`Mkey::sigerr_count`] differs from it (mlx5_ib arms the
    /// next error by counting the ones it saw).
    pub sigerr_expected: bool,
    /// Signature errors reported through the key.
    pub sigerr_count: u32,
}

/// Every object table of the function.
#[derive(Debug)]
pub(crate) struct Resources {
    pub uars: Table<()>,
    pub pds: Table<u32>,
    /// XRC domains (ALLOC_XRCD): numbers XRC SRQs and XRC QPs name.
    pub xrcds: Table<()>,
    /// XRC SRQs, numbered apart from the RMPs (one SRQ number space, as Linux keeps it).
    pub xrc_srqs: Table<XrcSrq>,
    pub tds: Table<u32>,
    pub eqs: Table<Eq>,
    pub cqs: Table<Cq>,
    pub sqs: Table<Sq>,
    pub rqs: Table<Rq>,
    pub rmps: Table<Rmp>,
    pub tises: Table<Tis>,
    pub tirs: Table<Tir>,
    pub rqts: Table<Rqt>,
    pub flow_tables: Table<FlowTable>,
    /// Flow counters (ALLOC_FLOW_COUNTER).
    pub flow_counters: Table<FlowCounter>,
    /// Packet reformat contexts (ALLOC_PACKET_REFORMAT_CONTEXT).
    pub reformats: Table<PacketReformat>,
    /// Modify-header contexts (ALLOC_MODIFY_HEADER_CONTEXT).
    pub modify_headers: Table<ModifyHeader>,
    /// Flow samplers (general objects of type FLOW_SAMPLER).
    pub samplers: Table<FlowSampler>,
    /// Flow meters (general objects of type FLOW_METER).
    pub meters: Table<meter::FlowMeter>,
    /// Match definers (general objects of type MATCH_DEFINER), numbered as steering entries
    /// name them.
    pub definers: Table<MatchDefiner>,
    /// AV-to-QP mappings (general objects of type AV_QP_MAPPING).
    pub av_qp_mappings: Table<av_qp_mapping::AvQpMapping>,
    pub mkeys: Table<Mkey>,
    /// Protection signature variables (CREATE_PSV).
    pub psvs: Table<signature::Psv>,
    pub q_counters: Table<QCounter>,
    pub qps: Table<rc::Qp>,
    /// Datagram QPs: unreliable datagram (UD, `st` 0x2) QPs and general services QPs (QP1,
    /// `st` 0x8, the one Linux's MAD layer opens per RoCE port). Numbered apart from the RC
    /// QPs so that the RC transport never takes one for its own; the UD transport
    /// (`engine::ud`) carries their datagrams.
    pub ud_qps: Table<rc::Qp>,
    /// DC targets (CREATE_DCT), numbered apart from the QPs: a DC request names its DCT
    /// under the DC opcodes, never an RC QP.
    pub dcts: Table<dc::Dct>,
    /// A DC request counter: [`dc::DcResponder::last_used`] takes its value.
    pub dc_clock: u64,
    /// The port's RoCE address (GID) table.
    pub gids: rc::GidTable,
    /// Multicast groups: the UD QPs ATTACH_TO_MCG attached to each multicast GID.
    pub mcgs: mcg::McastGroups,
    /// Flow group numbers are global; they map to their table.
    pub next_group: u32,
    /// The parts of the match words any flow group of this function has selected since it
    /// was reset (integrity bits included: only NIC receive groups may select them): frames'
    /// match words are built for these parts alone (`steering::frame_match_words`), so a
    /// function whose groups never asked for a tunnel's fields or an integrity bit (a
    /// checksum of every frame) does not pay for them. It only grows: a group destroyed
    /// leaves its parts in, which costs work, never a match.
    pub match_parts: match_parts::MatchParts,
    /// Root table of NIC receive steering.
    pub rx_root: Option<u32>,
    /// Root table of NIC transmit steering: frames the function's SQs send walk it before
    /// they leave (`crate::transmit_steering`); none lets every frame out.
    pub tx_root: Option<u32>,
    /// User contexts (CREATE_UCTX) and the objects each owns.
    pub uctxs: devx::Ownership,
    /// Registered user memory (CREATE_UMEM).
    pub umems: Table<devx::Umem>,
    /// The packet pacing rate table (SET_PP_RATE_LIMIT).
    pub rates: pacing::RateTable,
    /// NIC scheduling elements and the queues that name them.
    pub sched: scheduling::SchedTable,
    /// Blocks of reserved QP numbers (RESERVED_QPN general objects).
    pub reserved_qpns: reserved_qpn::ReservedQpns,
}

/// First number of a datagram (UD or GSI) QP: past every RC QP number
/// (`0x4000 + 2^log_max_qp`).
pub(crate) const UD_QPN_BASE: u32 = 0x40_0000;

/// First DCT number: past every RC QP number and below the datagram QPs.
pub(crate) const DCT_NUMBER_BASE: u32 = 0x20_0000;

/// First UAR index handed out: BAR0 pages 0 and 1 hold the initialization segment, pages 2 and 3
/// the MSI-X table and PBA.
pub(crate) const FIRST_UAR: u32 = 4;

/// Number of UAR pages BAR0 holds after the init segment and MSI-X pages.
/// Device memory's window ([`memic::window_start`]), where BAR0 has one, ends them.
pub(crate) fn uar_page_count(bar0_size: u64) -> u32 {
    let end = memic::window_start(bar0_size).unwrap_or(bar0_size);
    (end / UAR_PAGE_SIZE as u64).saturating_sub(u64::from(FIRST_UAR)) as u32
}

impl Resources {
    /// True when `n` is an RMP (CREATE_RMP), not an XRQ sharing its number space.
    pub fn is_rmp(&self, n: u32) -> bool {
        self.rmps.get(n).is_some_and(|r| r.xrq.is_none())
    }

    pub fn new(cfg: &EmuConfig) -> Self {
        let uar_pages = uar_page_count(cfg.bar0_size);
        Self {
            uars: Table::new(FIRST_UAR, uar_pages),
            pds: Table::new(1, 1 << 16),
            xrcds: Table::new(1, 1 << limits::LOG_MAX_XRCD),
            tds: Table::new(1, 1 << 16),
            eqs: Table::new(0, 1 << limits::LOG_MAX_EQ),
            cqs: Table::new(0x400, 1 << 16),
            sqs: Table::new(0x800, 1 << 16),
            rqs: Table::new(0x1000, 1 << 16),
            rmps: Table::new(0x1800, 1 << 12),
            xrc_srqs: Table::new(0x3800, 1 << 10),
            tises: Table::new(0x2000, 1 << 12),
            tirs: Table::new(0x2800, 1 << 12),
            rqts: Table::new(0x3000, 1 << 12),
            flow_tables: Table::new(0x10, 1 << 10),
            flow_counters: Table::new(1, limits::MAX_FLOW_COUNTERS),
            reformats: Table::new(1, 1 << limits::LOG_MAX_PACKET_REFORMAT_CONTEXT),
            modify_headers: Table::new(1, 1 << limits::LOG_MAX_MODIFY_HEADER_CONTEXT),
            samplers: Table::new(1, limits::MAX_FLOW_SAMPLERS),
            meters: Table::new(1, 1 << limits::LOG_MAX_FLOW_METER),
            definers: Table::new(limits::FIRST_MATCH_DEFINER, limits::MAX_MATCH_DEFINERS),
            av_qp_mappings: Table::new(1, limits::MAX_AV_QP_MAPPINGS),
            mkeys: Table::new(0x10, 1 << 16),
            psvs: Table::new(0x10, 1 << 16),
            // Set 0 means "no counter set" in an RQ context.
            q_counters: Table::new(1, u32::from(limits::MAX_Q_COUNTERS)),
            qps: Table::new(0x4000, 1 << limits::LOG_MAX_QP),
            ud_qps: Table::new(UD_QPN_BASE, 1 << limits::LOG_MAX_UD_QP),
            dcts: Table::new(DCT_NUMBER_BASE, 1 << limits::LOG_MAX_DCT),
            dc_clock: 0,
            gids: rc::GidTable::new(),
            mcgs: mcg::McastGroups::default(),
            next_group: 1,
            match_parts: match_parts::MatchParts::default(),
            rx_root: None,
            tx_root: None,
            uctxs: devx::Ownership::default(),
            umems: Table::new(1, 1 << limits::LOG_MAX_UMEM),
            rates: pacing::RateTable::default(),
            sched: scheduling::SchedTable::default(),
            reserved_qpns: reserved_qpn::ReservedQpns::default(),
        }
    }
}
