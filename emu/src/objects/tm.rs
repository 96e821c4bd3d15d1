//! A tag-matching XRQ's own state: its CQ and user index, and its matching list with the phase
//! counters (the device's side of what libmlx5 keeps in `struct mlx5_srq`'s `tm_list`,
//! `unexp_in` and `unexp_out`).

/// Log2 of the largest matching list an XRQ may ask for (`log_tag_matching_list_sz`).
pub(crate) const LOG_TAG_MATCHING_LIST_SZ: u8 = 10;

/// What an XRQ holds beyond the receive ring it shares with RMPs.
#[derive(Debug, Clone)]
pub(crate) struct Xrq {
    /// CQ its receives and list operations complete on (`xrqc.cqn`).
    pub cqn: u32,
    /// Index its CQEs carry in `srqn_uidx` (`xrqc.user_index`).
    pub user_index: u32,
    /// Rendezvous requests are offloaded (`xrqc.offload` RNDV).
    pub rndv: bool,
    /// The matching list (a tag-matching topology), `None` for a plain XRQ.
    pub list: Option<TagList>,
}

/// One tagged buffer of the matching list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TagEntry {
    /// The tag and mask: a message's tag matches when `tag & mask == entry tag`
    /// (ibv_post_srq_ops(3)).
    pub tag: u64,
    pub mask: u64,
    /// The buffer (one data segment; `len` 0: an empty buffer).
    pub addr: u64,
    pub lkey: u32,
    pub len: u32,
    /// A rendezvous matched it: out of the matching order, its READ in flight.
    pub consumed: bool,
}

/// The device's matching list of an XRQ.
#[derive(Debug, Clone)]
pub(crate) struct TagList {
    /// Entries by index (`2^log_matching_list_sz` of them).
    pub entries: Vec<Option<TagEntry>>,
    /// Indices of the entries open for matching, in the order they were appended.
    pub order: Vec<u16>,
    /// The entry the next APPEND fills (`append_next_index`; 0 at creation, as libmlx5's
    /// free list starts at entry 0).
    pub append_next: u16,
    /// Unexpected messages software reported handled (`sw_phase_cnt`).
    pub sw_phase: u16,
    /// Unexpected messages the device delivered (`hw_phase_cnt`).
    pub hw_phase: u16,
}

impl TagList {
    /// An empty list of `2^log_size` entries.
    pub fn new(log_size: u8) -> Self {
        Self {
            entries: vec![None; 1usize << log_size],
            order: Vec::new(),
            append_next: 0,
            sw_phase: 0,
            hw_phase: 0,
        }
    }

    /// Software and device agree on the unexpected messages: matching is on. While they
    /// differ every tagged message is unexpected (Documentation/tag_matching.md: matching is
    /// disabled until software and hardware synchronize).
    pub fn in_sync(&self) -> bool {
        self.sw_phase == self.hw_phase
    }

    /// The first entry, in append order, whose tag `tag` matches; its index.
    pub fn find(&self, tag: u64) -> Option<u16> {
        self.order.iter().copied().find(|&i| {
            self.entries
                .get(usize::from(i))
                .copied()
                .flatten()
                .is_some_and(|e| tag & e.mask == e.tag)
        })
    }

    /// Takes entry `index` out of the matching order (consumed or removed).
    pub fn unorder(&mut self, index: u16) {
        self.order.retain(|&i| i != index);
    }
}

/// Where a SEND received on a tag-matching XRQ lands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TmLanding {
    /// In an ordinary receive WQE, whole (headers included), completing with `app_op`
    /// (unexpected or no-tag) and the TMH `tmh` in the CQE (zero for no-tag).
    Ordinary { app_op: u8, tmh: [u8; 16] },
    /// In tagged buffer `index` (`entry`), without its TMH `tmh`; `split` when the message
    /// spans packets (its match completed already, its data completes apart).
    Tag {
        index: u16,
        entry: TagEntry,
        tmh: [u8; 16],
        split: bool,
    },
    /// A rendezvous request (one packet, its TMH and RVH `headers`) matched tagged buffer
    /// `index`: the device reads the data itself.
    Rendezvous {
        index: u16,
        entry: TagEntry,
        headers: [u8; 32],
    },
}

/// A request the device sends on its own for a rendezvous matched on a tag-matching XRQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rendezvous {
    /// The first PSN the request took (its outstanding entry's).
    pub first_psn: u32,
    /// The XRQ and the tagged buffer (entry `index`) the data lands in.
    pub xrqn: u32,
    pub index: u16,
    pub entry: TagEntry,
    /// The request's TMH and RVH, as they came: the READ's address, key and length, and the
    /// FIN's payload (the same headers, the operation FIN).
    pub headers: [u8; 32],
    /// The FIN (after the READ completed) rather than the READ.
    pub fin: bool,
}
