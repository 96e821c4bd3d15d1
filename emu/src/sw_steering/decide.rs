//! A frame at a software-owned table, either direction: the walk from the table's root, each
//! hit's actions applied to a copy of the frame as it goes ([`super::rewrite`]). Receive ([`super::receive`])
//! and transmit ([`super::transmit`]) differ only in the terminals the walk ends at and in
//! what they make of them.
//!
//! The walk collects its actions and counters in vectors, and a rewrite copies the frame: an
//! allocation per frame that hits an entry with an action, on the model's path (not the
//! driver's).

use super::lookup::Metadata;
use super::rewrite::Rewriting;
use super::walk::{walk, Terminals};
use crate::function::Core;
use crate::packet::Parsed;

/// What a walk decided for a frame.
#[derive(Debug)]
pub(crate) struct Walked<T> {
    /// Where it ended; `None` when the walk failed (an unreadable or malformed entry, a loop)
    /// or an action could not be applied: the frame is dropped and the failure counted.
    pub(crate) terminal: Option<T>,
    /// The last flow tag an entry that hit set (`FLOW_TAG`), if any.
    pub(crate) flow_tag: Option<u32>,
    /// Flow counter numbers (`counter_id`) of the entries that hit, in walk order: they count
    /// the frame whatever became of it.
    pub(crate) counters: Vec<u32>,
    /// The frame as the entries' actions left it, when one touched it.
    pub(crate) rewritten: Option<Vec<u8>>,
    /// The metadata registers as the entries' actions left them.
    pub(crate) meta: Metadata,
}

/// Walks `frame` (parsed as `parsed`, carrying the metadata registers `meta`) from the entry
/// at ICM address `root` to one of `terminals`, applying the actions of each entry it hits
/// before the next lookup.
pub(crate) fn walk_and_apply<T: Terminals>(
    core: &Core,
    terminals: &T,
    root: u64,
    (parsed, frame, meta): (&Parsed, &[u8], Metadata),
) -> Walked<T::Terminal> {
    let icm = super::icm_reader(core);
    let mut packet = Rewriting::new(frame, parsed, meta, &icm);
    let Ok(result) = walk(&icm, terminals, root, &mut packet) else {
        // The counters of entries hit before the failure are not kept: the frame is dropped
        // as a failed walk, counted in the direction's errors.
        return Walked {
            terminal: None,
            flow_tag: None,
            counters: Vec::new(),
            rewritten: None,
            meta,
        };
    };
    let (rewritten, flow_tag, meta) = packet.finish();
    Walked {
        terminal: Some(result.terminal),
        flow_tag,
        counters: result.counters,
        rewritten,
        meta,
    }
}
