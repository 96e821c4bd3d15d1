//! User contexts (DEVX) and the memory they register (umems).
//!
//! A user context is a `uid` CREATE_UCTX hands out. Linux's mlx5_ib opens one at probe (the
//! whitelist uid of `mlx5_ib_devx_init`) and one per user context that asks for DEVX (libmlx5
//! asks on every `ibv_open_device`), and writes that uid into the header of every command it
//! sends for the context's objects (`devx_obj_create` and the verbs paths that read
//! `devx_uid` / `pd->uid`). The objects a uid creates belong to it ([`Ownership`]). Commands
//! under uid 0 (the function's own driver) or the shared uid 0xffff
//! (`MLX5_SHARED_RESOURCE_UID`, which mlx5_core writes on its completion EQs and mlx5_ib on
//! its counter sets once the device has user contexts) may touch any object; objects created
//! under the shared uid any context may touch; a user context may touch only its own.

use super::QueueBuffer;
use std::collections::{BTreeMap, HashMap};

/// The uid of resources shared by every user context (`MLX5_SHARED_RESOURCE_UID`).
pub(crate) const SHARED_UID: u16 = 0xffff;

/// Whether `uid` is the function's own (0) or the shared one: neither is a user context, and
/// a command under either is not held to ownership.
pub(crate) fn privileged(uid: u16) -> bool {
    uid == 0 || uid == SHARED_UID
}

/// The kinds of object a user context may own, each numbered in its own space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Owned {
    Pd,
    Uar,
    Td,
    Xrcd,
    Cq,
    Qp,
    Sq,
    Rq,
    Rmp,
    Tir,
    Tis,
    Rqt,
    Mkey,
    Psv,
    XrcSrq,
    Dct,
    QCounter,
    Umem,
    FlowCounter,
    /// A RESERVED_QPN general object, by its first QP number.
    ReservedQpn,
    /// An SW_ICM general object, by its number.
    SwIcm,
    /// A packet reformat context (ALLOC_PACKET_REFORMAT_CONTEXT).
    PacketReformat,
    /// A modify-header context (ALLOC_MODIFY_HEADER_CONTEXT).
    ModifyHeader,
    /// A FLOW_SAMPLER general object, by its number.
    FlowSampler,
    /// A MATCH_DEFINER general object, by its number.
    MatchDefiner,
    /// A FLOW_METER general object, by its number.
    FlowMeter,
    /// An AV_QP_MAPPING general object, by its number.
    AvQpMapping,
}

/// The live user contexts and who owns which object.
#[derive(Debug, Default)]
pub(crate) struct Ownership {
    /// Each open user context's uid and the capabilities it was created with (`uctx.cap`).
    live: BTreeMap<u16, u32>,
    owners: HashMap<(Owned, u32), u16>,
}

impl Ownership {
    /// Opens a user context; `None` when `max` are open. Uids start at 1 and skip the shared
    /// uid (`mlx5_ib_devx_init` takes a uid of 0 or less as "no DEVX").
    pub fn open(&mut self, cap: u32, max: usize) -> Option<u16> {
        if self.live.len() >= max {
            return None;
        }
        let uid = (1..SHARED_UID).find(|uid| !self.live.contains_key(uid))?;
        self.live.insert(uid, cap);
        Some(uid)
    }

    /// Whether `uid` names an open user context.
    pub fn is_open(&self, uid: u16) -> bool {
        self.live.contains_key(&uid)
    }

    /// Closes user context `uid`; what it still owns passes to the driver (uid 0).
    pub fn close(&mut self, uid: u16) {
        self.live.remove(&uid);
        for owner in self.owners.values_mut() {
            if *owner == uid {
                *owner = 0;
            }
        }
    }

    /// The uid that created object `id` of `kind` (0 for the driver, [`SHARED_UID`] for a
    /// shared one); `None` for an object no command created (none such exists).
    pub fn owner(&self, kind: Owned, id: u32) -> Option<u16> {
        self.owners.get(&(kind, id)).copied()
    }

    /// Records that `uid` created object `id` of `kind`.
    pub fn record(&mut self, kind: Owned, id: u32, uid: u16) {
        self.owners.insert((kind, id), uid);
    }

    /// Forgets object `id` of `kind` (destroyed).
    pub fn forget(&mut self, kind: Owned, id: u32) {
        self.owners.remove(&(kind, id));
    }
}

/// A registered range of user memory (CREATE_UMEM): a page list, like a memory key's MTT,
/// that queues of the same user context name instead of a page list of their own.
#[derive(Debug)]
pub(crate) struct Umem {
    /// The user context it belongs to.
    pub uid: u16,
    /// Absolute log2 of its page size.
    pub log_page: u32,
    /// Offset of its first byte in its first page, in bytes.
    pub page_offset: u64,
    /// Bus address of each page (the permission bits cleared).
    pub pages: Vec<u64>,
    /// Every page was registered writable (`MLX5_IB_MTT_WRITE`).
    pub writable: bool,
    /// The objects built on it (a CQ, a QP): it cannot be destroyed while any is.
    pub holders: Vec<(Owned, u32)>,
}

impl Umem {
    /// Bytes the umem spans, from its first byte to the end of its last page.
    pub fn bytes(&self) -> u64 {
        ((self.pages.len() as u64) << self.log_page).saturating_sub(self.page_offset)
    }

    /// The queue buffer of `size` bytes at byte `offset` of the umem; `None` when it does not
    /// fit.
    pub fn buffer(&self, offset: u64, size: u64) -> Option<QueueBuffer> {
        if offset.checked_add(size)? > self.bytes() {
            return None;
        }
        Some(QueueBuffer {
            pas: self.pages.clone(),
            log_page: self.log_page,
            offset: self.page_offset + offset,
            size,
        })
    }
}
