//! NIC scheduling elements: the transmit scheduling arbiters (TSARs) and queue groups of the
//! NIC hierarchy, and which send queues and QPs name a queue group.
//!
//! The model keeps the tree and answers for it. An element's `max_average_bw` limits what the
//! send queues under it send together (`engine::pacing`, one bucket per element); its
//! `bw_share` weighs it against its siblings when a rate limit at or above their TSAR holds
//! them back ([`Share`], `engine::pacing`).

use super::devx::privileged;
use super::pacing::DEFAULT_BURST_BYTES;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Log2 of the most queue groups (`log_max_qos_nic_queue_group`): 256, as many as mlx5e's
/// HTB offload uses (`MLX5E_QOS_MAX_LEAF_NODES`).
pub(crate) const LOG_MAX_QUEUE_GROUPS: u8 = 8;
/// The most elements of both kinds together.
pub(crate) const MAX_ELEMENTS: usize = 1024;
/// Highest element id: a send queue context names its group in 16 bits (`qos_queue_group_id`).
const MAX_ELEMENT_ID: u32 = 0xffff;

/// What an element is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ElementKind {
    /// A deficit weighted round robin arbiter: an inner node.
    Tsar,
    /// A queue group: a leaf that send queues and QPs name.
    QueueGroup,
}

/// One scheduling element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Element {
    /// Its kind.
    pub kind: ElementKind,
    /// The TSAR it hangs from (0: a root).
    pub parent: u32,
    /// Relative weight among its siblings (0: the default).
    pub bw_share: u32,
    /// Rate limit in Mb/s (0: unlimited).
    pub max_average_bw: u32,
    /// The general object's `modify_field_select` last given (0 for an element made by
    /// CREATE_SCHEDULING_ELEMENT).
    pub field_select: u64,
    /// The uid that created it (0 or 0xffff: the function's own).
    pub uid: u16,
    /// Its bucket, while `max_average_bw` limits it.
    pub pacer: super::pacing::Pacer,
    /// Its standing among its siblings, for their TSAR's weighting.
    pub share: Share,
}

/// What a TSAR's deficit weighted round robin keeps of one child: the bytes the child sent,
/// divided by its weight (its virtual service, in bytes at weight 1 scaled by
/// [`Share::SCALE`]), and when it last asked to send with nothing below its parent holding
/// it back. While a rate limit at or above the parent holds the siblings back, a child whose
/// virtual service is ahead of the least served sibling still asking by more than one
/// quantum waits, so that over time each sends in proportion to its weight.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Share {
    /// Virtual service: bytes sent times [`Share::SCALE`] over the weight.
    pub served: u64,
    /// When it last asked to send, eligible below its parent.
    pub asked_at: Option<std::time::Instant>,
}

/// How long a child that asked to send counts as still asking, for its parent's weighting:
/// a queue held back asks again sooner (at its bucket's time, or [`SHARE_RETRY`] later).
pub(crate) const ASKING: Duration = Duration::from_millis(10);
/// How long a queue its weight holds back waits before it asks again.
pub(crate) const SHARE_RETRY: Duration = Duration::from_millis(1);
/// A round's quantum, in bytes: a child may be this many of its own bytes ahead of its least
/// served sibling still asking (in virtual service, which weighs each byte by the child's
/// weight) before it waits.
const QUANTUM_BYTES: u64 = 2048;
/// A rate limited element (or link) whose bucket holds fewer bytes than this holds its
/// queues back: below it the weights decide which child goes. Above it (a bucket filled by
/// idling) every child goes.
pub(crate) const CONTENDED_BELOW: i64 = DEFAULT_BURST_BYTES as i64 / 2;

impl Share {
    /// Fixed-point scale of [`Share::served`].
    pub const SCALE: u64 = 1 << 16;

    /// Whether it asked to send within [`ASKING`] of `now`.
    pub fn asking(&self, now: Instant) -> bool {
        self.asked_at
            .is_some_and(|at| now.saturating_duration_since(at) < ASKING)
    }

    /// Records that it asks to send at `now`; one that had stopped asking starts level with
    /// `least`, the least served sibling still asking, so that idling saves it nothing.
    pub fn ask(&mut self, now: Instant, least: Option<u64>) {
        if !self.asking(now) {
            self.served = self.served.max(least.unwrap_or(0));
        }
        self.asked_at = Some(now);
    }

    /// Whether, at weight `bw_share`, it is ahead of `least` (the least served sibling still
    /// asking) by more than its quantum, so that it waits while its parent is contended.
    pub fn ahead_of(&self, least: Option<u64>, bw_share: u32) -> bool {
        let quantum = QUANTUM_BYTES * Self::SCALE / Self::weight(bw_share);
        least.is_some_and(|l| self.served > l.saturating_add(quantum))
    }

    /// The weight of a `bw_share`: itself, 0 (the device's default weight, whose value no
    /// public source gives) counting as 1, the smallest weight mlx5e writes
    /// (`mlx5e_htb_convert_rate`); the model's choice.
    pub fn weight(bw_share: u32) -> u64 {
        u64::from(bw_share.max(1))
    }

    /// Records `bytes` sent by an element of weight `bw_share`.
    pub fn charge(&mut self, bytes: usize, bw_share: u32) {
        let virtual_bytes = (bytes as u64).saturating_mul(Self::SCALE) / Self::weight(bw_share);
        self.served = self.served.saturating_add(virtual_bytes);
    }
}

/// The elements of the NIC hierarchy and the queues attached to its queue groups.
#[derive(Debug, Default)]
pub(crate) struct SchedTable {
    elements: BTreeMap<u32, Element>,
    /// The last id handed out.
    last_id: u32,
    /// QP number -> (requester group, responder group), 0 for none.
    qps: BTreeMap<u32, (u32, u32)>,
    /// SQ number -> its group.
    sqs: BTreeMap<u32, u32>,
}

impl SchedTable {
    /// The element `id`, if it exists.
    pub fn get(&self, id: u32) -> Option<&Element> {
        self.elements.get(&id)
    }

    /// The element `id`, to modify.
    pub fn get_mut(&mut self, id: u32) -> Option<&mut Element> {
        self.elements.get_mut(&id)
    }

    /// Queue groups in the table.
    pub fn queue_groups(&self) -> usize {
        self.elements
            .values()
            .filter(|e| e.kind == ElementKind::QueueGroup)
            .count()
    }

    /// Adds `element` under a fresh id (1 to 0xffff), or `None` when the table is full.
    pub fn insert(&mut self, element: Element) -> Option<u32> {
        if self.elements.len() >= MAX_ELEMENTS {
            return None;
        }
        // Ids are not reused at once: a stale id a driver still holds names nothing.
        let mut id = self.last_id;
        for _ in 0..MAX_ELEMENT_ID {
            id = if id >= MAX_ELEMENT_ID { 1 } else { id + 1 };
            if let std::collections::btree_map::Entry::Vacant(slot) = self.elements.entry(id) {
                slot.insert(element);
                self.last_id = id;
                return Some(id);
            }
        }
        None
    }

    /// Removes element `id`.
    pub fn remove(&mut self, id: u32) {
        self.elements.remove(&id);
    }

    /// The ids of the elements that hang from `parent`, other than `id`.
    pub fn siblings(&self, parent: u32, id: u32) -> impl Iterator<Item = (u32, &Element)> + '_ {
        self.elements
            .iter()
            .filter(move |(&other, e)| e.parent == parent && other != id)
            .map(|(&other, e)| (other, e))
    }

    /// Whether any element hangs from `id`.
    pub fn has_children(&self, id: u32) -> bool {
        self.elements.values().any(|e| e.parent == id)
    }

    /// Whether a QP or send queue names queue group `id`.
    pub fn has_queues(&self, id: u32) -> bool {
        self.qps
            .values()
            .any(|&(req, resp)| req == id || resp == id)
            || self.sqs.values().any(|&g| g == id)
    }

    /// Whether `id` names a queue group (0, "none", is not one).
    pub fn is_queue_group(&self, id: u32) -> bool {
        self.get(id)
            .is_some_and(|e| e.kind == ElementKind::QueueGroup)
    }

    /// Records QP `qpn`'s requester and responder groups (0: none).
    pub fn set_qp(&mut self, qpn: u32, requester: u32, responder: u32) {
        if requester == 0 && responder == 0 {
            self.qps.remove(&qpn);
        } else {
            self.qps.insert(qpn, (requester, responder));
        }
    }

    /// Records send queue `sqn`'s group (0: none).
    pub fn set_sq(&mut self, sqn: u32, group: u32) {
        if group == 0 {
            self.sqs.remove(&sqn);
        } else {
            self.sqs.insert(sqn, group);
        }
    }

    /// Send queue `sqn`'s group (0: none).
    pub fn sq(&self, sqn: u32) -> u32 {
        self.sqs.get(&sqn).copied().unwrap_or(0)
    }

    /// QP `qpn`'s requester and responder groups (0: none).
    pub fn qp(&self, qpn: u32) -> (u32, u32) {
        self.qps.get(&qpn).copied().unwrap_or((0, 0))
    }

    /// Hands a closed user context's elements to the driver (uid 0), as its other objects are.
    pub fn disown(&mut self, uid: u16) {
        if privileged(uid) {
            return;
        }
        for element in self.elements.values_mut() {
            if element.uid == uid {
                element.uid = 0;
            }
        }
    }
}
