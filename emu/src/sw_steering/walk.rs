//! The walk a packet takes through steering entries: from a table's root entry, compare, on a
//! hit collect the actions and follow the hit address (hashing into the next table), on a miss
//! follow the miss address, until an address the caller knows as a terminal.
//!
//! rdma-core builds the chain this walks (dr_table.c, dr_matcher.c `dr_matcher_connect`,
//! dr_rule.c, dr_ste.c): a table's root is a one-entry anchor (lookup type DONT_CARE) that
//! always hits into the first matcher's hash table or always misses to the domain default;
//! each rule is one entry per match builder, each pointing with the next builder's lookup type
//! and byte mask at that builder's hash table; a rule's last entry (or the action-only MATCH
//! entries after it) holds the actions and hits the destination; collisions chain through miss
//! addresses to the matcher's end anchor and on to the next matcher or the table default.

use super::action::{self, Action, ActionError};
use super::definer;
use super::entry::{self, EntryError, EntryFormat, Ste, STE_SIZE};
use super::hash::hash_index;
use super::lookup::{LookupError, LookupType, PacketView};
use super::IcmRead;
use crate::objects::MatchDefiner;

/// Most entries one walk may visit before it is taken for a loop. rdma-core's deepest chains
/// (a few tables of a few matchers, each rule a handful of entries, plus collision chains)
/// stay far below it.
pub(crate) const MAX_WALK_ENTRIES: usize = 4096;

/// The addresses the device recognises as the end of a walk: the domain's drop and
/// transmit-allow addresses, TIRs' `icm_address`, other flow tables' roots.
pub(crate) trait Terminals {
    /// What a terminal address means to the caller.
    type Terminal;
    /// The terminal at ICM address `addr` (bits 39:0 of an entry's hit or miss address), if
    /// any.
    fn terminal(&self, addr: u64) -> Option<Self::Terminal>;
}

/// The packet a walk steers: what the next lookup sees, and where a hit entry's actions go.
pub(crate) trait WalkPacket {
    /// Why actions could not be applied.
    type Refused;
    /// The packet as the next lookup sees it: its parse, bytes and metadata.
    fn view(&self) -> PacketView<'_>;
    /// Applies one hit entry's actions (in order) before the walk goes on; an error ends the
    /// walk ([`WalkError::Actions`]).
    fn apply(&mut self, actions: &[Action]) -> Result<(), Self::Refused>;
}

/// A packet only looked at: actions are recorded in the result, nothing applies them.
impl WalkPacket for PacketView<'_> {
    type Refused = std::convert::Infallible;

    fn view(&self) -> PacketView<'_> {
        *self
    }

    fn apply(&mut self, _: &[Action]) -> Result<(), Self::Refused> {
        Ok(())
    }
}

/// How a walk ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WalkResult<T> {
    /// The terminal the walk reached.
    pub(crate) terminal: T,
    /// The actions of every entry that hit, in walk order.
    pub(crate) actions: Vec<Action>,
    /// The non-zero `counter_id` of every entry that hit, in walk order.
    pub(crate) counters: Vec<u32>,
    /// Some entry that hit asked for a re-parse after its actions.
    pub(crate) reparse: bool,
    /// Entries read, 1..=[`MAX_WALK_ENTRIES`].
    pub(crate) visited: usize,
}

impl<T> WalkResult<T> {
    /// The flow tag for the receive CQE: the last FLOW_TAG action, if any.
    #[cfg(test)]
    pub(crate) fn flow_tag(&self) -> Option<u32> {
        self.actions.iter().rev().find_map(|a| match a {
            Action::FlowTag(tag) => Some(*tag),
            _ => None,
        })
    }
}

/// Why a walk stopped without a terminal. The caller counts it and drops the packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum WalkError {
    /// More than [`MAX_WALK_ENTRIES`] entries: a loop.
    #[error("steering walk exceeded {MAX_WALK_ENTRIES} entries (loop)")]
    TooLong,
    /// An address that is not a multiple of 64.
    #[error("steering entry address {0:#x} is not 64-byte aligned")]
    Misaligned(u64),
    /// An address outside the steering ICM, or not backed.
    #[error("steering entry address {0:#x} cannot be read")]
    Unreadable(u64),
    /// A hash table whose slot address overflows.
    #[error("steering hash table at {0:#x} runs past the address space")]
    AddressOverflow(u64),
    /// A malformed entry.
    #[error("steering entry at {addr:#x}: {err}")]
    Entry {
        /// Its address.
        addr: u64,
        /// What is wrong.
        err: EntryError,
    },
    /// An entry or a hash table with a lookup type the model does not project.
    #[error("steering entry at {addr:#x}: {err}")]
    Lookup {
        /// Address of the entry naming it.
        addr: u64,
        /// The lookup type.
        err: LookupError,
    },
    /// A mask-and-match entry, or an action-only MATCH entry (definer index 0x0f) with a
    /// non-zero match area: formats rdma-core writes only with definers the model does not
    /// offer.
    #[error("steering entry at {0:#x} matches through a definer format the model does not take")]
    DefinerMatch(u64),
    /// An entry naming a match definer the function does not have (never created, or
    /// destroyed while entries still named it).
    #[error("steering entry at {addr:#x} names match definer {index:#x}, which does not exist")]
    NoDefiner {
        /// Address of the entry.
        addr: u64,
        /// The 8-bit definer index.
        index: u16,
    },
    /// An action the model does not know.
    #[error("steering entry at {addr:#x}: {err}")]
    Action {
        /// Address of the entry.
        addr: u64,
        /// What is wrong.
        err: ActionError,
    },
    /// Actions the model knows but cannot apply to this packet (reformat, an anchor or field
    /// it does not place, an unreadable modify list).
    #[error("steering entry at {0:#x}: its actions cannot be applied to the packet")]
    Actions(u64),
}

/// The match definer an entry's 8-bit index names.
fn definer_of<I: IcmRead + ?Sized>(
    icm: &I,
    addr: u64,
    index: u16,
) -> Result<MatchDefiner, WalkError> {
    icm.definer(index & 0xff).ok_or(WalkError::NoDefiner {
        addr,
        index: index & 0xff,
    })
}

/// Whether `ste` (read at `addr`) matches the packet: for every tag byte, the packet's byte
/// under the entry's mask equals the entry's tag byte; for a MATCH entry naming a definer, the
/// packet's tag through the definer equals the entry's 32-byte tag. An action-only MATCH entry
/// always hits.
fn hits<I: IcmRead + ?Sized>(
    icm: &I,
    ste: &Ste,
    addr: u64,
    pkt: &PacketView<'_>,
) -> Result<bool, WalkError> {
    if ste.format == EntryFormat::Match && definer::is_definer_index(ste.lookup_type) {
        let definer = definer_of(icm, addr, ste.lookup_type)?;
        return Ok(definer::masked_tag(&definer, pkt) == ste.match_tag);
    }
    let lookup =
        LookupType::from_raw(ste.lookup_type).map_err(|err| WalkError::Lookup { addr, err })?;
    if lookup == LookupType::MatchExtension {
        return if ste.match_area_zero {
            Ok(true)
        } else {
            Err(WalkError::DefinerMatch(addr))
        };
    }
    if !ste.format.is_bwc() {
        return Err(WalkError::DefinerMatch(addr));
    }
    let tag = lookup.tag(pkt);
    Ok(tag
        .iter()
        .zip(&ste.mask)
        .zip(&ste.tag)
        .all(|((&p, &m), &t)| p & m == t))
}

/// The slot of the table `ste` hits into for this packet: 0 for one-slot tables; for a table
/// of entries naming a definer, the hash of the packet's tag through it (no byte mask); else 0
/// for an empty byte mask (no tag needed), or the hash of the packet's tag for the next lookup
/// type.
fn next_slot<I: IcmRead + ?Sized>(
    icm: &I,
    ste: &Ste,
    addr: u64,
    pkt: &PacketView<'_>,
) -> Result<u64, WalkError> {
    if ste.hit.entries <= 1 {
        return Ok(ste.hit.base);
    }
    let index = if definer::is_definer_index(ste.next_lookup_type) {
        let definer = definer_of(icm, addr, ste.next_lookup_type)?;
        definer::slot(&definer, pkt, ste.hit.entries)
    } else if ste.byte_mask == 0 {
        return Ok(ste.hit.base);
    } else {
        let lookup = LookupType::from_raw(ste.next_lookup_type)
            .map_err(|err| WalkError::Lookup { addr, err })?;
        hash_index(&lookup.tag(pkt), ste.byte_mask, ste.hit.entries)
    };
    ste.hit
        .base
        .checked_add(u64::from(index) * STE_SIZE as u64)
        .ok_or(WalkError::AddressOverflow(ste.hit.base))
}

/// Walks the entries from `start` (a table's `sw_owner_icm_root_0`; not itself checked against
/// `terminals`) for the packet `pkt` until a terminal, applying each hit entry's actions to it
/// before the next lookup.
pub(crate) fn walk<I, T, P>(
    icm: &I,
    terminals: &T,
    start: u64,
    pkt: &mut P,
) -> Result<WalkResult<T::Terminal>, WalkError>
where
    I: IcmRead + ?Sized,
    T: Terminals + ?Sized,
    P: WalkPacket + ?Sized,
{
    let mut actions = Vec::new();
    let mut counters = Vec::new();
    let mut reparse = false;
    let mut addr = start;
    for visited in 1..=MAX_WALK_ENTRIES {
        if addr % STE_SIZE as u64 != 0 {
            return Err(WalkError::Misaligned(addr));
        }
        let raw = icm.read_entry(addr).ok_or(WalkError::Unreadable(addr))?;
        let ste = entry::decode(&raw).map_err(|err| WalkError::Entry { addr, err })?;
        let hit = hits(icm, &ste, addr, &pkt.view())?;
        let target = if hit {
            let first = actions.len();
            action::decode(ste.action_area(), &mut actions)
                .map_err(|err| WalkError::Action { addr, err })?;
            pkt.apply(&actions[first..])
                .map_err(|_| WalkError::Actions(addr))?;
            if ste.counter_id != 0 {
                counters.push(ste.counter_id);
            }
            reparse |= ste.reparse;
            ste.hit.base
        } else {
            ste.miss_addr
        };
        if let Some(terminal) = terminals.terminal(target) {
            return Ok(WalkResult {
                terminal,
                actions,
                counters,
                reparse,
                visited,
            });
        }
        // A hit goes on into the hash table at `target`; a miss to the single entry there.
        addr = if hit {
            next_slot(icm, &ste, addr, &pkt.view())?
        } else {
            target
        };
    }
    Err(WalkError::TooLong)
}
