//! The transmit steering lookup: a frame one of the function's SQs sends, run through the NIC
//! transmit flow tables the firmware's commands (`fw::steering`) built, before it leaves, to
//! be let out (possibly rewritten) or dropped. The send engine (`engine::sq`) asks it for
//! every frame when a transmit root table is set; without one every frame goes out.
//!
//! Frames of RC, UD and QP1 queue pairs are not steered here: Linux steers RoCE traffic by
//! the RDMA transmit tables (`MLX5_FLOW_NAMESPACE_RDMA_TX`, a table type the model does not
//! build), not the NIC transmit ones.
//!
//! What a transmit table does with a frame: an entry that drops drops it, one that allows lets
//! it out, one that forwards hands it to a deeper transmit table; a miss goes on to the miss
//! table or, by default, lets the frame out (the egress namespace's default, as fs_core
//! builds it with `MLX5_FLOW_TABLE_MISS_ACTION_DEF`). Every entry that counts counts the
//! frame, whatever then becomes of it.

use crate::function::Core;
use crate::objects::MATCH_WORDS;
use crate::packet::Parsed;
use crate::steering::frame_match_words;
use crate::sw_steering::transmit::Next;
use cxdirect_hw::flow::{
    FLOW_CONTEXT_ACTION_DROP, FLOW_CONTEXT_ACTION_FWD_DEST, FLOW_DESTINATION_TYPE_FLOW_TABLE,
    FLOW_TABLE_MISS_ACTION_FWD,
};

/// Longest walk a frame may take through the tables: every hop goes to a deeper level.
const MAX_HOPS: usize = crate::function::caps::MAX_FT_LEVEL as usize + 1;

/// Byte offset of `source_sqn` (bits 23:0 of the first word of `fte_match_set_misc`, which
/// starts at 0x40 of `fte_match_param`).
const SOURCE_SQN_BYTE: usize = 0x41;

/// What transmit steering decided for a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Out, as sent or as software steering entries rewrote it.
    Allow(Option<Vec<u8>>),
    /// Dropped: the WQE still completes, nothing leaves.
    Drop,
}

/// Where NIC transmit steering sends `frame`, sent by SQ `sqn`. Without a transmit root table
/// the answer is [`Verdict::Allow`] at the cost of one check.
pub(crate) fn steer(core: &Core, sqn: u32, frame: &[u8]) -> Verdict {
    let Some(mut table_id) = core.res.tx_root else {
        return Verdict::Allow(None);
    };
    let parsed = crate::packet::parse(frame);
    let words = transmit_match_words(&parsed, frame, sqn);
    for _ in 0..MAX_HOPS {
        let Some(table) = core.res.flow_tables.get(table_id) else {
            return Verdict::Allow(None);
        };
        if let Some(root) = table.sw_root {
            let decision = crate::sw_steering::transmit::transmit(core, root, &parsed, frame);
            crate::steering::count(core, &decision.counters, frame.len());
            match decision.next {
                Next::Allow => return Verdict::Allow(decision.rewritten),
                Next::Table(id) => {
                    table_id = id;
                    continue;
                }
                Next::Drop => return Verdict::Drop,
            }
        }
        let hit = table.entries.values().find(|entry| {
            table
                .groups
                .get(&entry.group)
                .is_some_and(|group| group.matches(&words, &entry.value))
        });
        if let Some(entry) = hit {
            crate::steering::count(core, &entry.counters, frame.len());
        }
        match hit {
            Some(entry) if entry.action & FLOW_CONTEXT_ACTION_DROP != 0 => return Verdict::Drop,
            Some(entry) if entry.action & FLOW_CONTEXT_ACTION_FWD_DEST != 0 => {
                let next = entry
                    .dests
                    .iter()
                    .find(|(kind, _)| *kind == FLOW_DESTINATION_TYPE_FLOW_TABLE);
                match next {
                    Some(&(_, id)) => table_id = id,
                    None => return Verdict::Allow(None),
                }
            }
            Some(_) => return Verdict::Allow(None),
            None if table.miss_action == FLOW_TABLE_MISS_ACTION_FWD => table_id = table.miss_table,
            None => return Verdict::Allow(None),
        }
    }
    Verdict::Drop
}

/// The match words of a frame an SQ sends: its outer headers, and the sending SQ's number in
/// `misc.source_sqn` (what Linux's egress rules match a queue by).
fn transmit_match_words(parsed: &Parsed, frame: &[u8], sqn: u32) -> [u64; MATCH_WORDS] {
    let mut words = frame_match_words(parsed, frame);
    let word = SOURCE_SQN_BYTE / 8;
    let mut bytes = words[word].to_ne_bytes();
    let at = SOURCE_SQN_BYTE % 8;
    bytes[at..at + 3].copy_from_slice(&(sqn & 0x00ff_ffff).to_be_bytes()[1..]);
    words[word] = u64::from_ne_bytes(bytes);
    words
}
