//! The send WQE template: what every one-basic-block SEND WQE of a queue shares (opcode, SQ
//! number, segment count, the inlined-header size), worked out once per queue, and the shape a
//! burst's plain packets take, worked out once per burst. A packet then costs only the words
//! that differ: its WQE index, checksum requests, completion request, the two header words and
//! its data segment, each composed in a register and written with the others as eight stores.

use super::{InlineMode, TxQueue, ETH_HEADER, ETH_INLINE};
use crate::backend::Backend;
use crate::mem::{BurstEntry, PoolShared};
use crate::ring::MAX_BURST;
use crate::ring::{be_u64, be_word};
use crate::tx::source::SendPacket;
use crate::tx::source::KEPT;
use cxdirect_hw::wqe::{self, WQE_BB};

/// The 16-byte segments of a SEND WQE with its 18 header bytes inline: control, Ethernet, the
/// 16 header bytes past the Ethernet segment's two, one data segment.
const HEADERS_DS: u32 = 4;
/// The 16-byte segments of a SEND WQE with nothing inline: control, Ethernet, data.
const BARE_DS: u32 = 3;

/// The one-basic-block WQE shape a burst's plain packets (one segment, no VLAN tag to insert,
/// no TSO) take, decided once per burst from the queue's inline mode.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum BbShape {
    /// The 18 header bytes inline, the rest by one data segment (`InlineMode::Headers`).
    Headers,
    /// Nothing inline, the whole packet by one data segment (`InlineMode::None`).
    Bare,
    /// No template shape: every packet goes through the general builders (`InlineMode::Full`,
    /// where a packet's length decides its shape).
    General,
}

/// The words of a queue's one-basic-block SEND WQEs that do not depend on the packet, in
/// memory order (as [`crate::ring::words_from_bytes`] reads bytes).
#[derive(Clone, Copy)]
pub(crate) struct SendTemplate {
    /// Control segment word 0 without the WQE index: opcode, SQ number and segment count, with
    /// headers inline and with nothing inline.
    ctrl_headers: u64,
    ctrl_bare: u64,
    /// Ethernet segment word 1 with 18 header bytes inline (`inline_hdr_sz`), before the
    /// first two header bytes go in.
    eth_headers: u64,
}

/// The word of bytes `a[k..8]` then `b[0..k]` (both words in memory order): `k` bytes along a
/// stretch of packet bytes held as consecutive words.
#[inline(always)]
fn splice<const K: u32>(a: u64, b: u64) -> u64 {
    const { assert!(K > 0 && K < 8) };
    if cfg!(target_endian = "little") {
        (a >> (8 * K)) | (b << (64 - 8 * K))
    } else {
        (a << (8 * K)) | (b >> (64 - 8 * K))
    }
}

/// Control segment word 1 asking for a completion (`fm_ce_se`, byte 11 of the WQE, as
/// [`wqe::encode_ctrl`] puts it).
pub(crate) const CE_WORD: u64 = ce_word();

const fn ce_word() -> u64 {
    let b = ((wqe::completion::ALWAYS & 0x3) << 2) as u32;
    let a = b.to_be_bytes();
    u64::from_ne_bytes([a[0], a[1], a[2], a[3], 0, 0, 0, 0])
}

impl SendTemplate {
    /// The template of send queue `sqn`.
    pub(crate) fn new(sqn: u32) -> Self {
        let qpn = (sqn & 0x00ff_ffff) << 8;
        Self {
            ctrl_headers: be_word(u32::from(wqe::opcode::SEND), qpn | HEADERS_DS),
            ctrl_bare: be_word(u32::from(wqe::opcode::SEND), qpn | BARE_DS),
            eth_headers: be_word(0, (ETH_INLINE as u32) << 16),
        }
    }
}

impl SendTemplate {
    /// The eight words of the one-basic-block WQE at WQE index `pi` of a packet of `len` bytes
    /// (more than 18 with `shape` `Headers`) whose first 24 bytes are `head`, in a buffer at
    /// device address `iova` under `lkey`, with checksum requests `csum` (IPv4 header, L4) and
    /// control segment word 1 `ce` ([`CE_WORD`] or 0). `shape` is not `General`.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn compose(
        &self,
        shape: BbShape,
        pi: u16,
        head: [u64; 3],
        len: usize,
        lkey: u32,
        iova: u64,
        csum: (bool, bool),
        ce: u64,
    ) -> [u64; WQE_BB / 8] {
        let csum = be_word(
            0,
            u32::from(u8::from(csum.1) << 7 | u8::from(csum.0) << 6) << 24,
        );
        let index = be_word(u32::from(pi) << 8, 0);
        let [h0, h1, h2] = head;
        if shape == BbShape::Headers {
            [
                self.ctrl_headers | index,
                ce,
                csum,
                self.eth_headers | splice::<2>(0, h0),
                splice::<2>(h0, h1),
                splice::<2>(h1, h2),
                be_word((len - ETH_INLINE) as u32, lkey),
                be_u64(iova + ETH_INLINE as u64),
            ]
        } else {
            [
                self.ctrl_bare | index,
                ce,
                csum,
                0,
                be_word(len as u32, lkey),
                be_u64(iova),
                0,
                0,
            ]
        }
    }
}

impl<B: Backend> TxQueue<B> {
    /// The template shape this burst's plain packets take (see [`BbShape`]).
    #[inline(always)]
    pub(crate) fn bb_shape(&self) -> BbShape {
        match self.inline {
            InlineMode::Headers => BbShape::Headers,
            InlineMode::None => BbShape::Bare,
            InlineMode::Full => BbShape::General,
        }
    }

    /// Writes the one-basic-block WQE of `m` (`len` bytes, already checked against the frame
    /// size) at the producer index, from the queue's template, for a burst whose plain packets
    /// take `shape`, as eight word stores straight from registers; false, with nothing
    /// changed, for a packet the template does not fit (chained, a VLAN tag to insert, too
    /// short to inline its headers, not on an 8-byte boundary), in a burst of the general
    /// shape, or with the ring full. Counts the packet towards the next completion request,
    /// which it asks for once `cqe_every` packets have gone without one; the ring running low
    /// is seen once per burst, at its end (see `TxQueue::send`).
    #[inline(always)]
    pub(crate) fn template_bb(&mut self, shape: BbShape, m: &impl SendPacket, len: usize) -> bool {
        let flags = m.flags();
        if shape == BbShape::General
            || (m.is_chained() | flags.tx_vlan.is_some())
            || self.free() == 0
        {
            return false;
        }
        let head = if shape == BbShape::Headers {
            if len <= ETH_INLINE {
                return false;
            }
            let Some(head) = m.head_words::<3>() else {
                return false;
            };
            head
        } else {
            [0; 3]
        };
        let ce = self.completion_word();
        let words = self.template.compose(
            shape,
            self.pi,
            head,
            len,
            m.lkey(),
            m.data_iova(),
            (flags.tx_ip_csum, flags.tx_l4_csum),
            ce,
        );
        self.ring.write_words(u32::from(self.pi), &words);
        true
    }

    /// The burst's template run: sends the packets at the front of `entries` (buffers of
    /// `pool`, kept in flight by index at the pool's `place`) for as long as each is a plain
    /// one the template fits, each in one basic block from the queue's template, and returns
    /// how many (their fates set to [`KEPT`] in `fates`, their bytes added to `bytes`). What
    /// the general loop decides per packet is decided here once: the ring's room (the run
    /// stops there), the memory key, the shape, the in-flight place. The first packet that
    /// does not fit (a VLAN tag or TSO asked for, a length the frame size refuses or too short
    /// to inline its headers, words past its buffer) ends the run: the general loop takes it
    /// and the rest, refusals included.
    #[inline(always)]
    pub(crate) fn template_run(
        &mut self,
        shape: BbShape,
        run: (&PoolShared, &[BurstEntry], u32),
        fates: &mut [u32; MAX_BURST],
        bytes: &mut u64,
    ) -> usize {
        // The shape is decided once, and each shape gets its own loop: neither carries the
        // other's values or tests.
        let sent = match shape {
            BbShape::General => return 0,
            BbShape::Headers => self.template_loop::<true>(run, bytes),
            BbShape::Bare => self.template_loop::<false>(run, bytes),
        };
        // The run's fates in one fill, out of the loop.
        fates[..sent].fill(KEPT);
        sent
    }

    /// [`TxQueue::template_run`]'s loop for one shape (`HEADERS`: the 18 header bytes inline).
    /// Where the pool's buffers live is decided once too: in driver memory, each packet's
    /// header words are read straight from the region, at the offset its device address is
    /// computed from; a dmabuf pool's packets are read through the pool.
    #[inline(always)]
    fn template_loop<const HEADERS: bool>(
        &mut self,
        (pool, entries, place): (&PoolShared, &[BurstEntry], u32),
        bytes: &mut u64,
    ) -> usize {
        let shape = if HEADERS {
            BbShape::Headers
        } else {
            BbShape::Bare
        };
        let room = usize::from(self.free());
        let lkey = pool.lkey();
        let shortest = if HEADERS { ETH_INLINE + 1 } else { ETH_HEADER };
        let (longest, mask, every) = (self.max_frame, self.mask(), self.cqe_every);
        let (base_iova, buf_size) = (pool.base_iova(), pool.buf_size() as usize);
        let region = pool.memory().region();
        let (mut pi, mut since) = (self.pi, self.since_cqe);
        let mut sent = 0;
        let mut total = 0u64;
        for e in entries.iter().take(room) {
            let (len, flags) = (e.len() as usize, e.flags());
            // One test for both offloads that change a WQE's shape.
            if (flags.tx_vlan.is_some() | flags.tx_tso_mss.is_some())
                || !(shortest..=longest).contains(&len)
            {
                break;
            }
            let data_off = e.data_off() as usize;
            let offset = e.index() as usize * buf_size + data_off;
            let head = if HEADERS {
                // The words must lie within the packet's buffer.
                if data_off + 24 > buf_size {
                    break;
                }
                let words = match region {
                    Some(region) => region.read_words::<3>(offset).ok(),
                    None => pool.head_words::<3>(e.index(), e.data_off()),
                };
                let Some(head) = words else {
                    break;
                };
                head
            } else {
                [0; 3]
            };
            since += 1;
            let ce = if since >= every {
                since = 0;
                CE_WORD
            } else {
                0
            };
            let words = self.template.compose(
                shape,
                pi,
                head,
                len,
                lkey,
                base_iova + offset as u64,
                (flags.tx_ip_csum, flags.tx_l4_csum),
                ce,
            );
            self.ring.write_words(u32::from(pi), &words);
            self.inflight
                .keep_index(usize::from(pi & mask), place, e.index());
            total += len as u64;
            pi = pi.wrapping_add(1);
            sent += 1;
        }
        *bytes += total;
        self.pi = pi;
        self.since_cqe = since;
        sent
    }

    /// Counts one more packet towards the next completion request; control segment word 1
    /// asking for one ([`CE_WORD`]) once `cqe_every` packets have gone without, else 0.
    #[inline(always)]
    fn completion_word(&mut self) -> u64 {
        self.since_cqe += 1;
        if self.since_cqe >= self.cqe_every {
            self.since_cqe = 0;
            CE_WORD
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::words_from_bytes;

    #[test]
    fn template_words_are_the_encoders_bytes() {
        let t = SendTemplate::new(0x12_3456);
        let mut ctrl = wqe::encode_ctrl(wqe::opcode::SEND, 0xbeef, 0x12_3456, 4, 0);
        let words: [u64; 2] = words_from_bytes(&ctrl);
        assert_eq!(words[0], t.ctrl_headers | be_word(0xbeef << 8, 0));
        assert_eq!(words[1], 0);
        ctrl = wqe::encode_ctrl(wqe::opcode::SEND, 7, 0x12_3456, 3, wqe::completion::ALWAYS);
        let words: [u64; 2] = words_from_bytes(&ctrl);
        assert_eq!(words[0], t.ctrl_bare | be_word(7 << 8, 0));
        assert_eq!(words[1], CE_WORD);
        let eth = wqe::encode_eth(true, false, None, ETH_INLINE as u16, [0xaa, 0xbb]);
        let words: [u64; 2] = words_from_bytes(&eth);
        let head = u64::from_ne_bytes([0xaa, 0xbb, 1, 2, 3, 4, 5, 6]);
        assert_eq!(words[0], be_word(0, u32::from(1u8 << 6) << 24));
        assert_eq!(words[1], t.eth_headers | splice::<2>(0, head));
    }

    #[test]
    fn a_data_segment_is_two_composed_words() {
        let seg = wqe::encode_data(1500, 0x0102_0304, 0x1122_3344_5566_7788);
        let words: [u64; 2] = words_from_bytes(&seg);
        assert_eq!(
            words,
            [be_word(1500, 0x0102_0304), be_u64(0x1122_3344_5566_7788)]
        );
    }

    #[test]
    fn splice_takes_bytes_across_words() {
        let a = u64::from_ne_bytes([0, 1, 2, 3, 4, 5, 6, 7]);
        let b = u64::from_ne_bytes([8, 9, 10, 11, 12, 13, 14, 15]);
        assert_eq!(splice::<2>(a, b).to_ne_bytes(), [2, 3, 4, 5, 6, 7, 8, 9]);
        assert_eq!(splice::<2>(0, a).to_ne_bytes(), [0, 0, 0, 0, 0, 0, 0, 1]);
    }
}
