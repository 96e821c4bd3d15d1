//! A received frame at a software-owned NIC receive table: the walk from the table's root
//! through the entries software wrote into ICM, to a TIR or a drop.
//!
//! What the walk's hits ask for on receive: their flow counters count the frame (rdma-core
//! writes a counter object's number into the entry's `counter_id`, dr_ste_v1.c
//! `dr_ste_v1_set_counter_id`); a flow tag goes into the receive CQE as a firmware entry's
//! does; VLAN pops and pushes and header modifications rewrite a copy of the frame
//! ([`super::rewrite`]), as do encapsulation and decapsulation; the rewritten frame goes on to
//! the TIR, firmware table or flow sampler the walk ends at. A frame whose walk asks for an action the model
//! does not apply is dropped and counted in `rx_sw_steering_errors`, never delivered
//! unmodified.

use super::decide::walk_and_apply;
use super::lookup::Metadata;
use super::terminals::{ReceiveTerminal, ReceiveTerminals};
use crate::counters::add;
use crate::function::Core;
use crate::packet::Parsed;

/// Where the walk sent a frame.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Dropped.
    #[default]
    Drop,
    /// To this TIR.
    Tir(u32),
    /// On to this firmware flow table (a destination array's or a root-table action's table,
    /// by the address QUERY_FLOW_TABLE gave).
    Table(u32),
    /// To this flow sampler (by the address QUERY_GENERAL_OBJECT gave).
    Sampler(u32),
    /// To this flow meter (by the address QUERY_GENERAL_OBJECT gave), which colors the frame
    /// and hands it on to its destination table.
    Meter(u32),
}

/// What the walk decided for a frame: where it goes, the flow tag its hits set, and the flow
/// counters of the entries it hit, which count it either way.
#[derive(Debug, Default)]
pub(crate) struct Decision {
    /// Where the frame goes.
    pub(crate) next: Next,
    /// The last flow tag an entry that hit set (`FLOW_TAG` action), if any.
    pub(crate) flow_tag: Option<u32>,
    /// Flow counter numbers (`counter_id`) of the entries that hit, in walk order.
    pub(crate) counters: Vec<u32>,
    /// The frame as the entries' actions left it, when one touched it.
    pub(crate) rewritten: Option<Vec<u8>>,
    /// The metadata registers as the entries' actions left them.
    pub(crate) meta: Metadata,
}

/// Where software steering sends `frame` (parsed as `parsed`, carrying the metadata
/// registers `meta`) that reached a software-owned receive table whose first entry is at ICM
/// address `root`.
pub(crate) fn receive(core: &Core, root: u64, packet: (&Parsed, &[u8], Metadata)) -> Decision {
    let walked = walk_and_apply(core, &ReceiveTerminals { core }, root, packet);
    let mut decision = Decision {
        next: Next::Drop,
        flow_tag: walked.flow_tag,
        counters: walked.counters,
        rewritten: None,
        meta: walked.meta,
    };
    let Some(terminal) = walked.terminal else {
        add(&core.counters.rx_sw_steering_errors, 1);
        return decision;
    };
    decision.rewritten = walked.rewritten;
    decision.next = match terminal {
        ReceiveTerminal::Tir(tirn) => Next::Tir(tirn),
        ReceiveTerminal::Table(id) => Next::Table(id),
        ReceiveTerminal::Sampler(id) => Next::Sampler(id),
        ReceiveTerminal::Meter(id) => Next::Meter(id),
        ReceiveTerminal::Drop => Next::Drop,
    };
    decision
}
