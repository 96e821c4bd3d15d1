//! State the queue engines keep between doorbells and frames, inside objects (a work queue's
//! WQEs read ahead, a CQ's open compressed session) and in the function's core (scratch
//! buffers, receives still in flight). It lives here, beside the objects, because the firmware
//! creates and resets it when it creates and resets the objects.

use super::limits::{MAX_LSO_BYTES, MAX_WQE_SZ_RQ, MAX_WQE_SZ_SQ};
use super::RqMemory;
use cxdirect_hw::cqe::{mini_cqe_res_format, CQE_SIZE};

/// Largest send WQE the model parses (the `max_wqe_sz_sq` capability).
pub(crate) const MAX_WQE: usize = MAX_WQE_SZ_SQ as usize;

/// Largest receive WQE the model reads (the `max_wqe_sz_rq` capability).
pub(crate) const MAX_RX_WQE: usize = MAX_WQE_SZ_RQ as usize;

/// Largest frame the send path assembles, in bytes.
pub(crate) const MAX_FRAME_BYTES: usize = 16 * 1024 + 64;

/// WQEs read from a ring ahead of their use.
#[derive(Debug, Default)]
pub(crate) struct Fetched {
    /// The WQEs held, back to back (room for one fetch).
    pub bytes: Vec<u8>,
    /// Ring counter of the first WQE held.
    pub first: u16,
    /// WQEs held.
    pub count: u16,
    /// Bytes per WQE held.
    pub stride: usize,
}

impl Fetched {
    /// Forgets what was read (the ring was reset, or another ring is fetched from next).
    pub(crate) fn clear(&mut self) {
        self.count = 0;
    }

    /// Copies the first `out.len()` bytes of WQE `index` into `out` when held; false if not.
    #[inline]
    pub(crate) fn copy_held(&self, index: u16, out: &mut [u8]) -> bool {
        let at = usize::from(index.wrapping_sub(self.first));
        if at >= usize::from(self.count) || out.len() > self.stride {
            return false;
        }
        match self
            .bytes
            .get(at * self.stride..at * self.stride + out.len())
        {
            Some(held) => {
                out.copy_from_slice(held);
                true
            }
            None => false,
        }
    }
}

/// Most completions one compressed session holds (the `cqe_compression_max_num` capability);
/// a CQ smaller than this closes its sessions at its own size.
pub(crate) const MAX_SESSION: u16 = 64;

/// CQE compression state of a CQ created with `cqe_comp_en`: receive completions that may
/// share one title are held here until the session closes.
#[derive(Debug)]
pub(crate) struct Compression {
    /// What each mini-CQE carries besides the byte count (`mini_cqe_res_format`).
    pub format: u8,
    /// Completions of the open session, oldest first, as full CQEs (owner bit unset).
    pub held: Vec<[u8; CQE_SIZE]>,
    /// The bytes completions of one session share, as a mask over a CQE's eight 64-bit words.
    pub shared: [u64; CQE_SIZE / 8],
}

impl Compression {
    /// An empty session state for mini-CQEs of `format` (`mini_cqe_res_format`).
    pub(crate) fn new(format: u8) -> Self {
        let mut mask = [0xffu8; CQE_SIZE];
        for range in per_completion(format) {
            mask[range].fill(0);
        }
        // A hash-format mini-CQE has no room for the packet checksum: it is not compared, and
        // every completion of a session reads the title's (Linux turns CHECKSUM_COMPLETE off for
        // such queues, or uses the checksum format).
        if !carries_checksum(format) {
            mask[CHECK_SUM_BYTES].fill(0);
        }
        Self {
            format,
            held: Vec::with_capacity(usize::from(MAX_SESSION)),
            shared: cqe_words(&mask),
        }
    }
}

/// Whether mini-CQEs of `format` carry the packet checksum (both checksum formats).
fn carries_checksum(format: u8) -> bool {
    format == mini_cqe_res_format::CSUM || format == mini_cqe_res_format::CSUM_STRIDX
}

/// Bytes of a CQE holding the packet checksum (`check_sum`).
const CHECK_SUM_BYTES: std::ops::Range<usize> = 0x14..0x16;

/// A CQE's bytes as eight 64-bit words, in memory order.
pub(crate) fn cqe_words(cqe: &[u8; CQE_SIZE]) -> [u64; CQE_SIZE / 8] {
    let mut words = [0u64; CQE_SIZE / 8];
    for (word, bytes) in words.iter_mut().zip(cqe.chunks_exact(8)) {
        let mut b = [0u8; 8];
        b.copy_from_slice(bytes);
        *word = u64::from_ne_bytes(b);
    }
    words
}

/// Byte ranges of a receive CQE that differ within one compressed session: the byte count,
/// the WQE counter and the owner byte always, and what the mini-CQE format carries.
pub(crate) fn per_completion(format: u8) -> [std::ops::Range<usize>; 4] {
    let carried = if carries_checksum(format) {
        CHECK_SUM_BYTES
    } else {
        0x0c..0x10
    };
    [carried, 0x2c..0x30, 0x3c..0x3e, 0x3f..0x40]
}

/// Scratch space reused for every WQE, so the send path does not allocate.
#[derive(Debug)]
pub(crate) struct SendScratch {
    /// The WQE being executed (up to [`MAX_WQE`] bytes).
    pub wqe: Vec<u8>,
    /// The frame being gathered.
    pub frame: Vec<u8>,
    /// The frame with a VLAN tag inserted.
    pub tagged: Vec<u8>,
    /// An LSO WQE's inlined headers.
    pub lso_headers: Vec<u8>,
    /// An LSO WQE's payload, gathered whole before it is cut into segments (up to
    /// [`MAX_LSO_BYTES`]).
    pub lso_payload: Vec<u8>,
    /// WQEs read ahead of the one being executed.
    pub fetched: Fetched,
}

impl Default for SendScratch {
    fn default() -> Self {
        Self {
            wqe: vec![0; MAX_WQE],
            frame: Vec::with_capacity(16 * 1024),
            tagged: vec![0; MAX_FRAME_BYTES + 4],
            lso_headers: Vec::with_capacity(MAX_WQE),
            lso_payload: Vec::with_capacity(MAX_LSO_BYTES),
            fetched: Fetched::default(),
        }
    }
}

impl SendScratch {
    /// An empty stand-in, holding no memory, while the real scratch is in use.
    pub(crate) fn placeholder() -> Self {
        Self {
            wqe: Vec::new(),
            frame: Vec::new(),
            tagged: Vec::new(),
            lso_headers: Vec::new(),
            lso_payload: Vec::new(),
            fetched: Fetched::default(),
        }
    }
}

/// Where a receive WQE is read, kept by the core between frames.
#[derive(Debug)]
pub(crate) struct ReceiveScratch {
    /// The receive WQE being read (up to [`MAX_RX_WQE`] bytes).
    pub wqe: Vec<u8>,
    /// A frame with its VLAN tag stripped (`engine::vlan_strip`), grown to the largest frame
    /// once and reused.
    pub stripped: Vec<u8>,
}

impl Default for ReceiveScratch {
    /// Room for the largest WQE.
    fn default() -> Self {
        Self {
            wqe: vec![0; MAX_RX_WQE],
            stripped: Vec::new(),
        }
    }
}

/// What steering decided for a received frame beyond the RQ it goes to, for its CQE.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Steered {
    /// The RSS hash and its type, when the frame was hashed.
    pub hash: Option<(u32, u8)>,
    /// The flow tag of the entries that steered it (24 bits, 0 for none), which an Ethernet
    /// receive CQE carries in `sop_drop_qpn`: libmlx5's `ibv_wc_read_flow_tag`, mlx5e's
    /// `get_cqe_flow_tag` and DPDK's mark read it there.
    pub flow_tag: u32,
    /// The tag control information of the VLAN tag the device stripped from the frame
    /// (`has_vlan` and `vlan_info` in the CQE); `None` when the frame arrives whole.
    pub vlan: Option<u16>,
}

/// A receive the device started and has not finished ([`Fault::LateReceive`](crate::Fault::LateReceive)): the WQE is
/// taken; the payload write and the completion are still in flight.
#[derive(Debug)]
pub(crate) struct LateWrite {
    /// The RQ the frame was steered to.
    pub rqn: u32,
    /// Its CQ.
    pub cqn: u32,
    /// Ring counter of the WQE taken.
    pub index: u16,
    /// Protection domain of the ring the WQE came from.
    pub pd: u32,
    /// Where the WQE came from (the RQ's own ring or an RMP).
    pub memory: RqMemory,
    /// What steering decided beyond the RQ (the RSS hash, the flow tag).
    pub steered: Steered,
    /// The WQE's bytes.
    pub wqe: Vec<u8>,
    /// The frame's bytes.
    pub frame: Vec<u8>,
}

/// Reusable buffers of the RC requester.
#[derive(Default)]
pub(crate) struct RcScratch {
    pub wqe: Vec<u8>,
    pub message: Vec<u8>,
    pub frame: Vec<u8>,
    /// The responder's ACK, NAK and response frames.
    pub ack: Vec<u8>,
    /// The responder's READ response payload.
    pub response: Vec<u8>,
    /// The last gather stopped at a page not present (a page fault, not a protection error).
    pub page_fault: bool,
}

/// Reusable buffers of the UD transport.
#[derive(Default)]
pub(crate) struct UdScratch {
    pub wqe: Vec<u8>,
    pub message: Vec<u8>,
    pub payload: Vec<u8>,
    pub frame: Vec<u8>,
    /// The last gather stopped at a page not present (a page fault, not a protection error).
    pub page_fault: bool,
}
