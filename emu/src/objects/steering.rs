//! The steering objects: TISes, TIRs (direct or hashed over an RQ table), RQ tables, and the
//! flow tables with their groups and entries.

use super::match_parts::MatchParts;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug)]
pub(crate) struct Tis {
    pub td: u32,
    pub sq_users: u32,
    /// The priority (0-7) of the packets its SQs send: `tisc.prio` bits 3:1, as mlx5e
    /// (`tc << 1`, `mlx5e_create_tises`) and mlx5_ib (`(sl & 0x7) << 1` by MODIFY_TIS, a raw
    /// packet QP's SL: `modify_raw_packet_eth_prio`) write it. It selects the port's traffic class (QTCT), whose rate limit the SQs share.
    pub prio: u8,
}

#[derive(Debug, Clone)]
pub(crate) enum TirDispatch {
    Direct {
        rqn: u32,
    },
    Indirect {
        rqtn: u32,
        hash_fn: u8,
        /// `rx_hash_toeplitz_key`, its table made.
        key: crate::rss::ToeplitzKey,
        l3: u8,
        l4: u8,
        fields: u32,
        /// `rx_hash_symmetric`: the addresses and ports hashed in sorted order.
        symmetric: bool,
    },
}

#[derive(Debug)]
pub(crate) struct Tir {
    pub td: u32,
    pub dispatch: TirDispatch,
    /// `tirc.self_lb_block`: the kinds of frame (`SELF_LB_BLOCK_*`) the TIR takes from SQs of
    /// its own transport domain; set means allowed, as Linux writes it.
    pub self_lb_block: u8,
    pub flow_users: u32,
}

#[derive(Debug)]
pub(crate) struct Rqt {
    pub rqs: Vec<u32>,
    /// Most entries the table may hold (`rqt_max_size`, fixed at creation).
    pub max: usize,
    pub tir_users: u32,
}

#[derive(Debug)]
pub(crate) struct FlowGroup {
    pub start: u32,
    pub end: u32,
    pub criteria: Box<[u8; 0x200]>,
    /// The criteria's non-zero 64-bit words, so a frame is matched against the few words a
    /// group looks at rather than the whole 512-byte mask.
    pub mask_words: Vec<MaskWord>,
    /// The parts of a frame's match words those words lie in.
    pub parts: MatchParts,
}

/// One 64-bit word a group's criteria select: its index, its mask, and the VLAN alias the
/// group reads it with ([`MaskWord::read`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct MaskWord {
    index: usize,
    mask: u64,
    /// `svlan_tag`'s bit in this word when the group takes `cvlan_tag` for "any VLAN tag",
    /// else 0.
    svlan_alias: u64,
}

/// Byte of `fte_match_set_lyr_2_4` holding `cvlan_tag` (bit 0x90, its top bit) and
/// `svlan_tag` (bit 0x91, the next).
const VLAN_TAG_BYTE: usize = 0x12;
/// Offsets of the outer and inner header sets in `fte_match_param`.
const HEADER_SETS: [usize; 2] = [0x00, 0x80];

impl MaskWord {
    /// The frame's word `param[index]` as the group reads it: a group whose criteria name
    /// `cvlan_tag` and not `svlan_tag` reads `cvlan_tag` as "the frame has a VLAN tag", of
    /// either kind (Linux's mlx5e relies on it: its untagged rule, `cvlan_tag` 0 alone, "means
    /// both S & C tags don't exist", `mlx5e_add_vlan_rule` in en_fs.c).
    #[inline(always)]
    fn read(&self, param: &[u64; MATCH_WORDS]) -> u64 {
        let word = param[self.index];
        // `svlan_tag` is the bit below `cvlan_tag` in the same byte, whatever the byte order.
        let alias = if word & self.svlan_alias != 0 {
            self.svlan_alias << 1
        } else {
            0
        };
        (word | alias) & self.mask
    }
}

/// 64-bit words of a match parameter that criteria can select (outer, misc and inner headers,
/// the second misc set with the MPLS entries and metadata registers, the third with TCP
/// sequence numbers and ICMP: the first 0x140 bytes; the rest is refused when a group's
/// criteria select it, `fw::steering`).
pub(crate) const MATCH_WORDS: usize = 0x140 / 8;

/// The 64-bit word `index` of a match parameter or value, in memory order.
#[inline]
pub(crate) fn match_word(bytes: &[u8; 0x200], index: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[index * 8..index * 8 + 8]);
    u64::from_ne_bytes(word)
}

impl FlowGroup {
    /// A group over `start..=end` matching on `criteria` (bits past the enabled parts clear).
    pub fn new(start: u32, end: u32, criteria: Box<[u8; 0x200]>) -> Self {
        let mut aliases = [0u64; MATCH_WORDS];
        for set in HEADER_SETS {
            let byte = set + VLAN_TAG_BYTE;
            if criteria[byte] & 0xc0 == 0x80 {
                let mut bytes = [0u8; 8];
                bytes[byte % 8] = 0x40;
                aliases[byte / 8] = u64::from_ne_bytes(bytes);
            }
        }
        let mask_words = (0..MATCH_WORDS)
            .map(|index| MaskWord {
                index,
                mask: match_word(&criteria, index),
                svlan_alias: aliases[index],
            })
            .filter(|w| w.mask != 0)
            .collect::<Vec<_>>();
        let parts = mask_words.iter().fold(MatchParts::default(), |parts, w| {
            parts | MatchParts::of_word(w.index)
        });
        Self {
            start,
            end,
            criteria,
            mask_words,
            parts,
        }
    }

    /// True when a frame whose match parameter words are `param` matches `value` under this
    /// group's criteria.
    #[inline]
    pub fn matches(&self, param: &[u64; MATCH_WORDS], value: &[u8; 0x200]) -> bool {
        self.mask_words
            .iter()
            .all(|w| w.read(param) == match_word(value, w.index))
    }
}

#[derive(Debug)]
pub(crate) struct FlowEntry {
    pub group: u32,
    pub action: u16,
    pub dests: Vec<(u8, u32)>,
    /// Flow counters the entry counts its frames in (`FLOW_CONTEXT_ACTION_COUNT`).
    pub counters: Vec<u32>,
    pub value: Box<[u8; 0x200]>,
    /// The tag the receive CQEs of frames it forwards carry (`flow_tag`, 24 bits; 0 is
    /// Linux's `MLX5_FS_DEFAULT_FLOW_TAG`).
    pub flow_tag: u32,
    /// The modify-header context applied to the frames it matches
    /// (`FLOW_CONTEXT_ACTION_MOD_HDR`), if any.
    pub modify_header: Option<u32>,
    /// The packet reformat context applied to them (`FLOW_CONTEXT_ACTION_ENCAP`, its
    /// `packet_reformat_id`), if any.
    pub reformat: Option<u32>,
}

#[derive(Debug)]
pub(crate) struct FlowTable {
    /// NIC receive (`FLOW_TABLE_TYPE_NIC_RX`) or NIC transmit (`FLOW_TABLE_TYPE_NIC_TX`):
    /// every command naming the table names its type, and entries forward only to tables of
    /// the same type.
    pub table_type: u8,
    pub level: u8,
    pub log_size: u8,
    pub miss_action: u8,
    pub miss_table: u32,
    pub groups: BTreeMap<u32, FlowGroup>,
    pub entries: BTreeMap<u32, FlowEntry>,
    pub referenced: u32,
    /// For a software-owned table (`sw_owner`), the ICM address of its first steering entry
    /// (`sw_owner_icm_root_0`): frames reaching the table walk the entries software wrote
    /// there ([`crate::sw_steering`]) instead of its groups, which it has none of.
    pub sw_root: Option<u64>,
}

impl FlowTable {
    /// The entry a frame with match parameter words `words` hits: the first, in index order,
    /// whose group's mask and value it matches.
    pub fn hit(&self, words: &[u64; MATCH_WORDS]) -> Option<&FlowEntry> {
        self.entries.values().find(|entry| {
            self.groups
                .get(&entry.group)
                .is_some_and(|group| group.matches(words, &entry.value))
        })
    }
}

/// A modify-header context (ALLOC_MODIFY_HEADER_CONTEXT): the table type whose entries may
/// name it and its 8-byte actions as the command gave them (`set_action_in`,
/// `copy_action_in`), checked when allocated.
#[derive(Debug)]
pub(crate) struct ModifyHeader {
    pub table_type: u8,
    pub actions: Vec<[u8; 8]>,
    /// Flow entries naming it.
    pub fte_users: u32,
}

/// A packet reformat context (ALLOC_PACKET_REFORMAT_CONTEXT): its type
/// (`cxdirect_hw::reformat::REFORMAT_TYPE_*`) and data, the header it inserts or writes.
#[derive(Debug)]
pub(crate) struct PacketReformat {
    pub reformat_type: u8,
    pub data: Vec<u8>,
    /// Flow entries naming it.
    pub fte_users: u32,
}

/// A match definer (CREATE_GENERAL_OBJECT of type MATCH_DEFINER, `fw::definer`): a predefined
/// format (which packet fields, where in a 32-byte tag) and the mask over that tag. Steering
/// entries name it by its number (`match_definer_ctx_idx`, `hash_definer_ctx_idx`);
/// `sw_steering::definer` projects packets through it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MatchDefiner {
    /// The predefined format (`cxdirect_hw::definer::format`).
    pub format: u16,
    /// The mask over the format's tag.
    pub mask: [u8; cxdirect_hw::definer::DEFINER_TAG_BYTES],
}

/// A flow sampler (CREATE_GENERAL_OBJECT of type FLOW_SAMPLER, `fw::sampler`): a packet
/// reaching its ICM address goes on to `default_table`; one in `sample_ratio` is also copied
/// to `sample_table`. Both tables are held (`FlowTable::referenced`) while it lives.
#[derive(Debug)]
pub(crate) struct FlowSampler {
    /// The tables' type (the model takes NIC receive).
    pub table_type: u8,
    /// The table every packet goes on to.
    pub default_table: u32,
    /// The table copies go to.
    pub sample_table: u32,
    /// One packet in this many is copied (1 and up).
    pub sample_ratio: u32,
    /// As CREATE gave them, for QUERY.
    pub level: u8,
    pub ignore_flow_level: bool,
    /// Packets that reached it.
    pub seen: AtomicU64,
}

impl FlowSampler {
    /// Counts a packet reaching the sampler; whether it is the one in `sample_ratio` that is
    /// copied (the `sample_ratio`-th, then every `sample_ratio` after it). A device picks
    /// copies at random at that rate; the model picks them by count, so that a test knows
    /// which.
    pub fn take(&self) -> bool {
        let n = self.seen.fetch_add(1, Ordering::Relaxed) + 1;
        n % u64::from(self.sample_ratio.max(1)) == 0
    }
}

/// A flow counter (ALLOC_FLOW_COUNTER): the frames and bytes the entries naming it matched.
/// Atomic, because steering counts through a shared view of the tables.
#[derive(Debug, Default)]
pub(crate) struct FlowCounter {
    pub packets: AtomicU64,
    pub octets: AtomicU64,
    /// Flow entries that list it; DEALLOC_FLOW_COUNTER is refused while any does.
    pub fte_users: u32,
}
