//! Packet pacing of Ethernet send queues: an SQ whose context names a rate table entry
//! (`packet_pacing_rate_limit_index`, CREATE_SQ or MODIFY_SQ) sends at most at that entry's
//! rate, through its own bucket ([`crate::objects::pacing::Pacer`]). Linux's mlx5e names an
//! entry for a queue's `tx_maxrate` (`mlx5e_set_sq_maxrate`: `mlx5_rl_add_rate`, then
//! MODIFY_SQ with the rate limit bit), libmlx5 for `mlx5dv_pp_alloc` and
//! `ibv_modify_qp_rate_limit` on raw packet QPs. An SQ in a queue group
//! (`qos_queue_group_id`) also sends within the `max_average_bw` of that group and of every
//! TSAR above it, each element one bucket that all the SQs under it share (mlx5e's HTB
//! offload and mqprio rate limits, libmlx5's `mlx5dv_sched_*`). While such a limit holds the
//! children of a TSAR back, they send in proportion to their `bw_share` (a deficit weighted
//! round robin over the children still asking to send, [`held_by_shares`]): how mlx5e's HTB
//! offload divides a class's ceiling among its children by their rates
//! (`mlx5e_htb_convert_rate`), and libmlx5's man page describes the weights
//! (`mlx5dv_sched_node_create`: "shared between all elements connected to the same parent
//! element, relatively to their bw_share").
//!
//! The port's traffic classes (QTCT maps a priority to one) may each have a rate limit
//! (QETCR, mlx5e's `dcb maxrate`): the SQs (by their TIS's priority), connected QP sides (by
//! their path's) and UD datagrams (by their address vector's) in a limited class share its
//! bucket. Below its fastest speed the link itself is asked after the class's limit
//! ([`link`]: one bucket at the link's speed, the classes ordered by their ETS groups and
//! shares).
//!
//! The send engine asks [`admit`] before each WQE, and before each later frame of a WQE that
//! makes several (LSO, multi-packet), since the device schedules packets, not WQEs; it charges
//! every frame it sends ([`charge`]). An SQ in debt stops where it is, between WQEs or between
//! the frames of one (`objects::PartlySent`), and is listed in `Core::paced` with the time its
//! debt is paid, when the device's timers run it again (`engine::sq::resume_paced`). The
//! bytes counted are the frame's, as it leaves the SQ (before transmit steering).
//!
//! An RC, UC or DC QP that names queue groups (`qos_queue_group_id_requester` and
//! `_responder`: libmlx5's `mlx5dv_modify_qp_sched_elem`), or whose path priority is in a
//! rate limited traffic class, sends within the same rates ([`qp_admits`] before each packet,
//! [`qp_charge`] after it): its requester the
//! packets of its SENDs and WRITEs and its READ and atomic requests, its responder every
//! response and acknowledgement. One in debt stops where it is, as when the wire has no room,
//! and the RC timers continue it. A UD QP in a requester group asks [`ud_admits`] before each
//! WQE and stops there while in debt, listed in `Core::paced_ud` until the device's timers run
//! it again (`engine::ud::send::resume_paced`).

use super::link;
use crate::function::Core;
use crate::objects::pacing::Rate;
use crate::objects::scheduling::{CONTENDED_BELOW, SHARE_RETRY};
use std::time::Instant;

/// Most scheduling elements from a queue group up to its root that pacing follows: deeper
/// trees than any driver builds (mlx5e's HTB offload nests a few levels) end the walk there.
const MAX_TREE_DEPTH: usize = 16;

/// Whether SQ `sqn` may take its next WQE now: when neither its rate table entry (if it names
/// one in use), nor any scheduling element with a rate limit above its queue group, nor its
/// traffic class ([`class_wait`]: the class's rate limit, and the link when it runs below
/// its fastest) holds it back. An SQ that must wait is listed in `core.paced` with the time
/// it may go on (the latest of its buckets').
pub(crate) fn admit(core: &mut Core, sqn: u32) -> bool {
    let Some(sq) = core.res.sqs.get(sqn) else {
        return true;
    };
    let entry = match sq.rate_index {
        0 => None,
        index => core.res.rates.get(index).map(|e| e.rate()),
    };
    let group = core.res.sched.sq(sqn);
    let class = sq_class(core, sqn);
    if entry.is_none() && group == 0 && class.is_none() {
        return true;
    }
    let now = Instant::now();
    let mut until = match (entry, core.res.sqs.get_mut(sqn)) {
        (Some(rate), Some(sq)) => sq.pacer.admit(rate, now).err(),
        _ => None,
    };
    if let Some(at) = group_wait(core, group, now) {
        until = Some(until.map_or(at, |u| u.max(at)));
    }
    if let Some(tc) = class {
        if let Some(at) = class_wait(core, tc, until.is_none(), now) {
            until = Some(until.map_or(at, |u| u.max(at)));
        }
    }
    let Some(at) = until else {
        return true;
    };
    match core.paced.iter_mut().find(|(s, _)| *s == sqn) {
        Some(waiting) => waiting.1 = at,
        None => core.paced.push((sqn, at)),
    }
    false
}

/// Whether SQ `sqn` names a rate table entry or a queue group, or its traffic class is
/// scheduled ([`classes_scheduled`]), so that [`admit`] has rates to ask: a WQE of several
/// frames asks between them only then (`engine::sq`).
pub(crate) fn sq_is_paced(core: &Core, sqn: u32) -> bool {
    core.res.sqs.get(sqn).is_some_and(|sq| sq.rate_index != 0)
        || core.res.sched.sq(sqn) != 0
        || sq_class(core, sqn).is_some()
}

/// Whether the port schedules its traffic classes: one has a rate limit (QETCR, mlx5e's `dcb
/// maxrate`), or the link runs below its fastest protocol, where the classes share it by ETS
/// ([`link`]). A port doing neither asks nothing of a sender's class (one test per WQE).
pub(crate) fn classes_scheduled(core: &Core) -> bool {
    core.port.limited_classes != 0 || link::paced(core)
}

/// The traffic class SQ `sqn` sends in while the port schedules its classes: the SQ's TIS
/// priority, mapped by QTCT (`PortState::prio_tc`).
fn sq_class(core: &Core, sqn: u32) -> Option<usize> {
    if !classes_scheduled(core) {
        return None;
    }
    let tisn = core.res.sqs.get(sqn)?.tisn;
    class_of_prio(core, core.res.tises.get(tisn)?.prio)
}

/// The traffic class QTCT gives priority `prio`, while the port schedules its classes.
fn class_of_prio(core: &Core, prio: u8) -> Option<usize> {
    if !classes_scheduled(core) {
        return None;
    }
    Some(usize::from(*core.port.prio_tc.get(usize::from(prio))?))
}

/// When a frame of traffic class `tc` may go: `None` now, else when to ask again: the class's
/// rate limit (QETCR `max_bw_value`, one bucket the class's senders share), then, when
/// `ask_link` (nothing else holds the sender back, so that a sender which cannot go does not
/// count as asking for the link), the link ([`link::wait`]).
fn class_wait(core: &mut Core, tc: usize, ask_link: bool, now: Instant) -> Option<Instant> {
    let mut until = None;
    let rate = core.port.ets.get(tc).and_then(|class| class.rate());
    if let (Some(rate), Some(pacer)) = (rate, core.port.class_pacers.get_mut(tc)) {
        until = pacer.admit(rate, now).err();
    }
    if ask_link && until.is_none() {
        until = link::wait(core, tc, now);
    }
    until
}

/// Charges a frame of `bytes` that traffic class `tc` sent to the class's rate limit, if it
/// has one, and to the link.
fn class_charge(core: &mut Core, tc: usize, bytes: usize) {
    let limited = core
        .port
        .limited_classes
        .checked_shr(tc as u32)
        .unwrap_or(0)
        & 1
        != 0;
    if let (true, Some(pacer)) = (limited, core.port.class_pacers.get_mut(tc)) {
        pacer.charge(bytes);
    }
    link::charge(core, tc, bytes);
}

/// Charges a frame of `bytes` that SQ `sqn` sent to its bucket, to those of the rate
/// limited scheduling elements above its queue group and to its traffic class's
/// ([`class_charge`]).
pub(crate) fn charge(core: &mut Core, sqn: u32, bytes: usize) {
    let Some(sq) = core.res.sqs.get_mut(sqn) else {
        return;
    };
    if sq.rate_index != 0 {
        sq.pacer.charge(bytes);
    }
    let group = core.res.sched.sq(sqn);
    charge_group(core, group, bytes);
    if let Some(tc) = sq_class(core, sqn) {
        class_charge(core, tc, bytes);
    }
}

/// Which side of a connected QP (RC, UC, XRC, DC) sends a packet: its requester (SENDs,
/// WRITEs, READ and atomic requests) or its responder (responses and acknowledgements), each
/// in its own queue group (`qos_queue_group_id_requester`, `_responder`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum QpSide {
    Requester,
    Responder,
}

/// The queue group of QP `qpn`'s `side` (0: none).
fn qp_group(core: &Core, qpn: u32, side: QpSide) -> u32 {
    let (requester, responder) = core.res.sched.qp(qpn);
    match side {
        QpSide::Requester => requester,
        QpSide::Responder => responder,
    }
}

/// The traffic class of connected QP `qpn`'s packets while the port schedules its classes:
/// the QP's path priority (`RcPath::prio`) mapped by QTCT.
fn qp_class(core: &Core, qpn: u32) -> Option<usize> {
    if !classes_scheduled(core) {
        return None;
    }
    class_of_prio(core, core.res.qps.get(qpn)?.path.prio)
}

/// Whether QP `qpn`'s `side` has rates to ask before each packet ([`qp_admits`]): a queue
/// group, or a scheduled traffic class.
pub(crate) fn qp_is_paced(core: &Core, qpn: u32, side: QpSide) -> bool {
    qp_group(core, qpn, side) != 0 || qp_class(core, qpn).is_some()
}

/// Whether the next packet of QP `qpn`'s `side` may go now: true unless a rate limited
/// scheduling element at or above its queue group, or its traffic class ([`class_wait`]),
/// holds it back.
pub(crate) fn qp_admits(core: &mut Core, qpn: u32, side: QpSide) -> bool {
    let now = Instant::now();
    if group_wait(core, qp_group(core, qpn, side), now).is_some() {
        return false;
    }
    match qp_class(core, qpn) {
        Some(tc) => class_wait(core, tc, true, now).is_none(),
        None => true,
    }
}

/// Charges a packet of `bytes` that QP `qpn`'s `side` sent to the rate limited elements from
/// its queue group up and to its traffic class ([`class_charge`]).
pub(crate) fn qp_charge(core: &mut Core, qpn: u32, side: QpSide, bytes: usize) {
    charge_group(core, qp_group(core, qpn, side), bytes);
    if let Some(tc) = qp_class(core, qpn) {
        class_charge(core, tc, bytes);
    }
}

/// One element on the path from a queue group up: its id, whether its own bucket admits now,
/// and the bytes in that bucket (`i64::MAX` without a rate limit).
type PathStep = (u32, bool, i64);

/// When the rate limited elements from `group` up to its root are all out of debt and no
/// TSAR's weighting holds the group back ([`held_by_shares`]): `None` when that is so at
/// `now`, else when to ask again (the latest time a bucket is out of debt, or
/// [`SHARE_RETRY`] from now).
fn group_wait(core: &mut Core, group: u32, now: Instant) -> Option<Instant> {
    let mut until: Option<Instant> = None;
    let mut path = [(0, true, i64::MAX); MAX_TREE_DEPTH];
    let mut len = 0;
    let mut id = group;
    while len < MAX_TREE_DEPTH {
        let Some(element) = core.res.sched.get_mut(id) else {
            break;
        };
        let mut step = (id, true, i64::MAX);
        if element.max_average_bw != 0 {
            let rate = Rate::from_mbps(element.max_average_bw);
            if let Err(at) = element.pacer.admit(rate, now) {
                until = Some(until.map_or(at, |u| u.max(at)));
                step.1 = false;
            }
            step.2 = element.pacer.tokens();
        }
        path[len] = step;
        len += 1;
        id = element.parent;
    }
    let held = held_by_shares(core, &path[..len], now);
    until.or(held.then(|| now + SHARE_RETRY))
}

/// A TSAR's weighting of its children (`bw_share`, [`Share`]): for each element of `path`
/// (from a queue group up) that nothing below its parent holds back, records that it asks
/// to send now (one that had stopped asking starts level with its least served sibling, so
/// that idling saves it nothing); true when one of them, while a rate limit at or above its
/// parent is contended (its bucket below [`CONTENDED_BELOW`]), is ahead of the least served
/// sibling still asking by more than its quantum. Without contention every child goes, so the
/// weighting never slows a tree its limits do not hold back. Finding the siblings walks the
/// function's elements (at most `MAX_ELEMENTS`, a few under mlx5e's HTB offload); a path with
/// no rate limit above its queue group skips all of it.
fn held_by_shares(core: &mut Core, path: &[PathStep], now: Instant) -> bool {
    // No rate limit above the queue group: no level of the path can be contended, for it or
    // for any sibling (they share those ancestors), so neither the siblings nor the record of
    // asking matter (mlx5e's mqprio shaper and most HTB trees of one class per level).
    if path
        .iter()
        .skip(1)
        .all(|&(_, _, tokens)| tokens == i64::MAX)
    {
        return false;
    }
    let mut held = false;
    for (i, &(id, admits, _)) in path.iter().enumerate() {
        if !admits {
            break;
        }
        let Some(parent) = core.res.sched.get(id).map(|e| e.parent) else {
            break;
        };
        if parent == 0 {
            continue;
        }
        let least = core
            .res
            .sched
            .siblings(parent, id)
            .filter(|(_, s)| s.share.asking(now))
            .map(|(_, s)| s.share.served)
            .min();
        let contended = path[i + 1..]
            .iter()
            .any(|&(_, _, tokens)| tokens < CONTENDED_BELOW);
        let Some(element) = core.res.sched.get_mut(id) else {
            break;
        };
        element.share.ask(now, least);
        if contended && element.share.ahead_of(least, element.bw_share) {
            held = true;
        }
    }
    held
}

/// Charges a packet of `bytes` sent from queue group `group` to every rate limited element
/// from the group up to its root.
pub(crate) fn charge_group(core: &mut Core, group: u32, bytes: usize) {
    let mut id = group;
    for _ in 0..MAX_TREE_DEPTH {
        let Some(element) = core.res.sched.get_mut(id) else {
            break;
        };
        if element.max_average_bw != 0 {
            element.pacer.charge(bytes);
        }
        element.share.charge(bytes, element.bw_share);
        id = element.parent;
    }
}

/// Whether UD QP `qpn` may send its next WQE now, that WQE's address vector giving priority
/// `prio` (`None`: not read, the port not scheduling its classes): true unless a rate limited
/// element at or above its requester queue group, or the class QTCT gives `prio`
/// ([`class_wait`]), holds it back; a QP that must wait is listed in `core.paced_ud` with the
/// time it may go on.
pub(crate) fn ud_admits(core: &mut Core, qpn: u32, prio: Option<u8>) -> bool {
    let group = core.res.sched.qp(qpn).0;
    let class = prio.and_then(|prio| class_of_prio(core, prio));
    if group == 0 && class.is_none() {
        return true;
    }
    let now = Instant::now();
    let mut until = group_wait(core, group, now);
    if let Some(tc) = class {
        if let Some(at) = class_wait(core, tc, until.is_none(), now) {
            until = Some(until.map_or(at, |u| u.max(at)));
        }
    }
    let Some(at) = until else {
        return true;
    };
    match core.paced_ud.iter_mut().find(|(q, _)| *q == qpn) {
        Some(waiting) => waiting.1 = at,
        None => core.paced_ud.push((qpn, at)),
    }
    false
}

/// Charges a datagram of `bytes` that UD QP `qpn` sent at priority `prio` (its address
/// vector's) to the rate limited elements from its requester group up and to the class QTCT
/// gives `prio` ([`class_charge`]).
pub(crate) fn ud_charge(core: &mut Core, qpn: u32, prio: u8, bytes: usize) {
    charge_group(core, core.res.sched.qp(qpn).0, bytes);
    if let Some(tc) = class_of_prio(core, prio) {
        class_charge(core, tc, bytes);
    }
}

/// When the first paced SQ or UD QP may go on, if any waits.
pub(crate) fn next_deadline(core: &Core) -> Option<Instant> {
    core.paced
        .iter()
        .chain(&core.paced_ud)
        .map(|&(_, at)| at)
        .min()
}

/// Takes one paced UD QP whose wait is over at `now` off the list; `None` when none is due.
pub(crate) fn take_due_ud(core: &mut Core, now: Instant) -> Option<u32> {
    let at = core.paced_ud.iter().position(|&(_, at)| at <= now)?;
    Some(core.paced_ud.swap_remove(at).0)
}

/// Takes one paced SQ whose wait is over at `now` off the list; `None` when none is due.
pub(crate) fn take_due(core: &mut Core, now: Instant) -> Option<u32> {
    let at = core.paced.iter().position(|&(_, at)| at <= now)?;
    Some(core.paced.swap_remove(at).0)
}
