//! A frame an SQ sends, at a software-owned NIC transmit table: the walk from the table's root
//! through the entries software wrote into ICM, to the allow address (out on the wire, or into
//! the function's own receive path when it loops), the drop address, or a firmware transmit
//! table. rdma-core points a transmit domain's misses and its default-miss action at the allow
//! address and its drop action at the drop address (`dr_domain_caps_init`,
//! `nic_tx_allow_address`, `nic_tx_drop_address`).
//!
//! The hits' counters count the frame; VLAN pushes and pops and header modifications rewrite a
//! copy of it, as do encapsulation and decapsulation, which is what leaves (or goes on to the
//! firmware table the walk ends at). A frame whose walk asks for an action the model does not
//! apply is dropped and counted in `tx_sw_steering_errors`, never sent unmodified.

use super::decide::walk_and_apply;
use super::lookup::Metadata;
use super::terminals::{TransmitTerminal, TransmitTerminals};
use crate::counters::add;
use crate::function::Core;
use crate::packet::Parsed;

/// Where the walk sent a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Out of the function.
    Allow,
    /// Dropped.
    Drop,
    /// On to this firmware transmit table.
    Table(u32),
    /// To this flow meter, which colors the frame and hands it on to its destination table.
    Meter(u32),
}

/// What the walk decided for a frame an SQ sends.
#[derive(Debug)]
pub(crate) struct Decision {
    /// Where the frame goes.
    pub(crate) next: Next,
    /// Flow counter numbers (`counter_id`) of the entries that hit, in walk order.
    pub(crate) counters: Vec<u32>,
    /// The frame as the entries' actions left it, when one touched it.
    pub(crate) rewritten: Option<Vec<u8>>,
    /// The metadata registers as the entries' actions left them.
    pub(crate) meta: Metadata,
}

/// Where software steering sends `frame` (parsed as `parsed`, carrying the metadata registers
/// `meta`), sent by an SQ, that reached a software-owned transmit table whose first entry is at
/// ICM address `root`.
pub(crate) fn transmit(core: &Core, root: u64, packet: (&Parsed, &[u8], Metadata)) -> Decision {
    let walked = walk_and_apply(core, &TransmitTerminals { core }, root, packet);
    let next = match walked.terminal {
        Some(TransmitTerminal::Allow) => Next::Allow,
        Some(TransmitTerminal::Table(id)) => Next::Table(id),
        Some(TransmitTerminal::Meter(id)) => Next::Meter(id),
        Some(TransmitTerminal::Drop) => Next::Drop,
        None => {
            add(&core.counters.tx_sw_steering_errors, 1);
            Next::Drop
        }
    };
    Decision {
        next,
        counters: walked.counters,
        rewritten: if next == Next::Drop {
            None
        } else {
            walked.rewritten
        },
        meta: walked.meta,
    }
}
