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

use crate::counters::add;
use crate::function::Core;
use crate::objects::match_parts::MatchParts;
use crate::steering::{count, match_words, Steered};
use crate::sw_steering::transmit::Next;
use cxdirect_hw::flow::{
    FLOW_CONTEXT_ACTION_DROP, FLOW_CONTEXT_ACTION_FWD_DEST, FLOW_DESTINATION_TYPE_FLOW_TABLE,
    FLOW_TABLE_MISS_ACTION_FWD,
};

/// Longest walk a frame may take through the tables: every hop goes to a deeper level.
const MAX_HOPS: usize = crate::function::caps::MAX_FT_LEVEL as usize + 1;

/// What transmit steering decided for a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Out, as sent or as software steering entries rewrote it.
    Allow(Option<Vec<u8>>),
    /// Dropped: the WQE still completes, nothing leaves.
    Drop,
}

/// Where NIC transmit steering sends `frame`, sent by SQ `sqn`. Without a transmit root table
/// the answer is [`Verdict::Allow`] at the cost of one check. Entries' rewrites (a firmware
/// entry's modify-header context, a walk's actions) change the frame the next tables see and
/// the one that leaves.
pub(crate) fn steer(core: &Core, sqn: u32, frame: &[u8]) -> Verdict {
    let Some(mut table_id) = core.res.tx_root else {
        return Verdict::Allow(None);
    };
    let parsed = crate::packet::parse(frame);
    // Transmit tables match no integrity bits (`fw::match_criteria` refuses them there), so
    // the words are built for the parts the function's groups select, less those.
    let parts = core.res.match_parts.without(MatchParts::INTEGRITY);
    let words = match_words(&parsed, frame, Some(sqn), parts);
    let mut now = Steered::new(frame, &parsed, &words, Some(sqn), parts);
    for _ in 0..MAX_HOPS {
        let Some(table) = core.res.flow_tables.get(table_id) else {
            return Verdict::Allow(now.into_rewritten());
        };
        if let Some(root) = table.sw_root {
            let decision = crate::sw_steering::transmit::transmit(core, root, now.packet());
            count(core, &decision.counters, frame.len());
            now.set_meta(decision.meta);
            if let Some(bytes) = decision.rewritten {
                now.replace(bytes);
            }
            match decision.next {
                Next::Allow => return Verdict::Allow(now.into_rewritten()),
                Next::Table(id) => {
                    table_id = id;
                    continue;
                }
                Next::Meter(id) => {
                    let Some(meter) = core.res.meters.get(id) else {
                        return Verdict::Drop;
                    };
                    now.meter(meter, std::time::Instant::now());
                    table_id = meter.destination_table;
                    continue;
                }
                Next::Drop => return Verdict::Drop,
            }
        }
        let hit = table.hit(now.words());
        if let Some(entry) = hit {
            count(core, &entry.counters, frame.len());
            if now.apply_entry(core, entry).is_err() {
                add(&core.counters.tx_sw_steering_errors, 1);
                return Verdict::Drop;
            }
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
                    None => return Verdict::Allow(now.into_rewritten()),
                }
            }
            Some(_) => return Verdict::Allow(now.into_rewritten()),
            None if table.miss_action == FLOW_TABLE_MISS_ACTION_FWD => table_id = table.miss_table,
            None => return Verdict::Allow(now.into_rewritten()),
        }
    }
    Verdict::Drop
}
