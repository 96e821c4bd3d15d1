//! Send WQE composition: the control, Ethernet and data segments of one packet's WQE, with the
//! common shapes (one basic block; a short packet carried whole in two) built as words in
//! registers and every other shape laid out byte by byte.

use super::{InlineMode, TxQueue, ETH_HEADER, ETH_INLINE, MAX_WQE};
use crate::backend::Backend;
use crate::ring::{bytes_from_words, words_from_bytes};
use crate::tx::inflight::InFlight;
use crate::tx::lso::{tcp_headers_len, TxRefusal, MAX_TSO_HEADERS};
use crate::tx::source::{PacketSource, SendPacket};
use cxdirect_hw::wqe::{self, INLINE_SEG, WQE_BB, WQE_DS};

/// Most 16-byte segments one WQE may have: the control segment's `ds` is six bits.
const MAX_DS: usize = 63;
/// Segments a multi-packet WQE spends before its packets: control and Ethernet.
const MULTI_PACKET_HEAD_DS: usize = 2;

/// Where a full-inline WQE's inline data segment starts: after the control segment, the
/// Ethernet segment and the 16 bytes the 18 inlined header bytes run on into.
const INLINE_DATA_AT: usize = 48;

/// Longest packet [`TxQueue::full_inline_wqe`] builds, in bytes: 18 header bytes, then the rest
/// behind the inline segment's 4-byte header in what is left of two basic blocks.
pub(crate) const FULL_INLINE_WORDS_MAX: usize = ETH_INLINE + 2 * WQE_BB - INLINE_DATA_AT - 4;

/// Writes the Ethernet segment carrying `packet`'s first 18 bytes inline (with `m`'s checksum
/// requests) at bytes 16..48 of `wqe`: two bytes at the segment's end, the other sixteen in the
/// segment after it.
#[inline]
fn put_inline_headers(m: &impl SendPacket, packet: &[u8], wqe: &mut [u8]) {
    wqe[16..32].copy_from_slice(&wqe::encode_eth(
        m.flags().tx_ip_csum,
        m.flags().tx_l4_csum,
        None,
        ETH_INLINE as u16,
        [packet[0], packet[1]],
    ));
    wqe[32..INLINE_DATA_AT].copy_from_slice(&packet[2..ETH_INLINE]);
}

impl<B: Backend> TxQueue<B> {
    /// The WQE for `m` at the producer index as the eight words of one basic block, for the
    /// common shapes that fit one: a single-segment packet without a VLAN tag to insert, sent
    /// with its 18 header bytes inline (longer than that) or with nothing inline. `None` sends
    /// the packet through [`TxQueue::build`] instead (other shapes, a packet not on an 8-byte
    /// boundary, or a full ring); nothing is changed then.
    #[inline]
    pub(crate) fn single_bb_wqe(
        &mut self,
        m: &impl SendPacket,
        len: usize,
    ) -> Option<[u64; WQE_BB / 8]> {
        if m.is_chained() || m.flags().tx_vlan.is_some() || self.free() == 0 {
            return None;
        }
        let headers_inline = match self.inline {
            InlineMode::None => false,
            InlineMode::Headers => true,
            InlineMode::Full if len > self.inline_max => true,
            InlineMode::Full => return None,
        };
        let mut wqe = [0u8; WQE_BB];
        let ds = if headers_inline {
            if len <= ETH_INLINE {
                return None;
            }
            let head: [u64; 3] = m.head_words()?;
            let mut bytes = [0u8; 24];
            bytes_from_words(head, &mut bytes);
            put_inline_headers(m, &bytes, &mut wqe);
            wqe[48..64].copy_from_slice(&wqe::encode_data(
                (len - ETH_INLINE) as u32,
                m.lkey(),
                m.data_iova() + ETH_INLINE as u64,
            ));
            4
        } else {
            wqe[16..32].copy_from_slice(&wqe::encode_eth(
                m.flags().tx_ip_csum,
                m.flags().tx_l4_csum,
                None,
                0,
                [0, 0],
            ));
            wqe[32..48].copy_from_slice(&wqe::encode_data(len as u32, m.lkey(), m.data_iova()));
            3
        };
        wqe[..16].copy_from_slice(&self.send_ctrl(ds, 1));
        Some(words_from_bytes(&wqe))
    }

    /// The WQE for `m` carried whole (headers and data inline), as two basic blocks of words
    /// and how many of them it fills (1 or 2), for a single-segment packet of more than 18 and at
    /// most [`FULL_INLINE_WORDS_MAX`] bytes without a VLAN tag to insert, in full-inline mode
    /// and within `inline_max`. `None` sends the packet through [`TxQueue::build`] instead
    /// (other shapes, a packet not on an 8-byte boundary, or a full ring); nothing is changed
    /// then. The bytes of the blocks past the packet are zero.
    #[inline]
    pub(crate) fn full_inline_wqe(
        &mut self,
        m: &impl SendPacket,
        len: usize,
    ) -> Option<([[u64; WQE_BB / 8]; 2], u16)> {
        if self.inline != InlineMode::Full
            || len > self.inline_max
            || len <= ETH_INLINE
            || len > FULL_INLINE_WORDS_MAX
            || m.is_chained()
            || m.flags().tx_vlan.is_some()
        {
            return None;
        }
        let data = len - ETH_INLINE;
        let size = INLINE_DATA_AT + (4 + data).div_ceil(WQE_DS) * WQE_DS;
        let bbs = size.div_ceil(WQE_BB) as u16;
        if bbs > self.free() {
            return None;
        }
        let head: [u64; FULL_INLINE_WORDS_MAX.div_ceil(8)] = m.head_words()?;
        let mut packet = [0u8; FULL_INLINE_WORDS_MAX.div_ceil(8) * 8];
        bytes_from_words(head, &mut packet);
        let mut wqe = [0u8; 2 * WQE_BB];
        put_inline_headers(m, &packet, &mut wqe);
        wqe[INLINE_DATA_AT..INLINE_DATA_AT + 4]
            .copy_from_slice(&(INLINE_SEG | data as u32).to_be_bytes());
        wqe[INLINE_DATA_AT + 4..INLINE_DATA_AT + 4 + data]
            .copy_from_slice(&packet[ETH_INLINE..len]);
        wqe[..16].copy_from_slice(&self.send_ctrl((size / WQE_DS) as u8, bbs));
        self.stats.inline_packets += 1;
        let words: [u64; 2 * WQE_BB / 8] = words_from_bytes(&wqe);
        let blocks = std::array::from_fn(|bb| std::array::from_fn(|i| words[bb * WQE_BB / 8 + i]));
        Some((blocks, bbs))
    }

    /// The control segment of a SEND WQE of `ds` 16-byte segments and `bbs` basic blocks at the
    /// producer index, asking for a completion when [`TxQueue::completion_request`] says so.
    #[inline]
    pub(crate) fn send_ctrl(&mut self, ds: u8, bbs: u16) -> [u8; 16] {
        let ce = self.completion_request(bbs, 1);
        wqe::encode_ctrl(wqe::opcode::SEND, self.pi, self.sqn, ds, ce)
    }

    /// Counts one more WQE of `bbs` basic blocks carrying `packets` towards the next completion
    /// request and says whether this one asks for a CQE: once `cqe_every` packets have gone
    /// without one, and always when the ring is nearly full, so the space is reported back
    /// before the driver runs out of it.
    #[inline]
    pub(crate) fn completion_request(&mut self, bbs: u16, packets: u16) -> u8 {
        // Reset at `cqe_every` (at most the ring size, 32768): adding a WQE's packets (at most
        // 61) cannot overflow.
        self.since_cqe += packets;
        let free_after = self.free().saturating_sub(bbs);
        if self.since_cqe >= self.cqe_every || free_after < super::LOW_RING_BBS {
            self.since_cqe = 0;
            wqe::completion::ALWAYS
        } else {
            0
        }
    }

    /// Builds the WQE for `m` at the producer index into `wqe`; returns its size in bytes, or
    /// `None` when the ring has no room for it. Every byte up to the end of the WQE's last
    /// basic block is written (padding zeroed), so nothing stale reaches the ring.
    #[inline]
    pub(crate) fn build(&mut self, m: &impl SendPacket, wqe: &mut [u8; MAX_WQE]) -> Option<usize> {
        let head = m.head_len();
        let chained = m.is_chained();
        let vlan = m.flags().tx_vlan;
        let tail = || m.tail().into_iter().flat_map(|t| t.segments());
        // Inlined bytes always come from the first segment.
        let headers = if vlan.is_some() {
            0
        } else {
            ETH_INLINE.min(head)
        };
        let (eth_inline, data_inline) = match self.inline {
            InlineMode::None => (0, 0),
            InlineMode::Headers => (headers, 0),
            InlineMode::Full if !chained && head <= self.inline_max && vlan.is_none() => {
                (headers, head - headers)
            }
            InlineMode::Full => (headers, 0),
        };
        let rest = head - eth_inline - data_inline;
        // Header bytes past the two the Ethernet segment holds, padded to whole segments.
        let eth_extra = eth_inline.saturating_sub(2).div_ceil(WQE_DS) * WQE_DS;
        let data_inline_room = if data_inline > 0 {
            (4 + data_inline).div_ceil(WQE_DS) * WQE_DS
        } else {
            0
        };
        let extra_segments = tail().filter(|s| !s.is_empty()).count();
        let size =
            32 + eth_extra + data_inline_room + (usize::from(rest > 0) + extra_segments) * WQE_DS;
        let bbs = size.div_ceil(WQE_BB);
        if size > MAX_WQE || bbs as u16 > self.free() {
            return None;
        }
        wqe[..16].copy_from_slice(&self.send_ctrl((size / WQE_DS) as u8, bbs as u16));
        wqe[16..32].copy_from_slice(&wqe::encode_eth(
            m.flags().tx_ip_csum,
            m.flags().tx_l4_csum,
            vlan,
            eth_inline as u16,
            [0, 0],
        ));
        let mut at = 32;
        if eth_inline > 0 {
            // Two header bytes sit at the end of the Ethernet segment, the rest run on after
            // it: one contiguous stretch of the WQE from byte 30.
            wqe[32 + eth_extra - WQE_DS.min(eth_extra)..32 + eth_extra].fill(0);
            m.read(0, &mut wqe[30..30 + eth_inline]);
            at += eth_extra;
        }
        if data_inline > 0 {
            wqe[at + data_inline_room - WQE_DS..at + data_inline_room].fill(0);
            wqe[at..at + 4].copy_from_slice(&(INLINE_SEG | data_inline as u32).to_be_bytes());
            m.read(eth_inline, &mut wqe[at + 4..at + 4 + data_inline]);
            at += data_inline_room;
            self.stats.inline_packets += 1;
        }
        // One data segment per stretch of buffer: the first segment's remainder, then each
        // chained segment.
        if rest > 0 {
            let skip = (eth_inline + data_inline) as u64;
            wqe[at..at + WQE_DS].copy_from_slice(&wqe::encode_data(
                rest as u32,
                m.lkey(),
                m.data_iova() + skip,
            ));
            at += WQE_DS;
        }
        for seg in tail().filter(|s| !s.is_empty()) {
            wqe[at..at + WQE_DS].copy_from_slice(&wqe::encode_data(
                seg.len() as u32,
                seg.lkey(),
                seg.data_iova(),
            ));
            at += WQE_DS;
        }
        wqe[at..bbs * WQE_BB].fill(0);
        Some(size)
    }
}

/// Bytes of an 802.1Q tag.
const VLAN_TAG: usize = 4;

impl<B: Backend> TxQueue<B> {
    /// Builds the LSO WQE for `m` (TCP segmentation with `mss` payload bytes per frame) at the
    /// producer index into `wqe`: the packet's Ethernet, IP and TCP headers inline in the
    /// Ethernet segment (with the VLAN tag to insert put in them, as the device takes no
    /// insertion request with LSO), then one data segment per stretch of buffer after them.
    /// Returns the WQE's size in bytes, `Ok(None)` when the ring has no room for it, or why the
    /// packet cannot be sent this way; nothing is changed unless a WQE is built. Every byte up
    /// to the end of the WQE's last basic block is written.
    #[inline]
    pub(crate) fn lso_wqe(
        &mut self,
        m: &impl SendPacket,
        mss: u16,
        wqe: &mut [u8; MAX_WQE],
    ) -> Result<Option<usize>, TxRefusal> {
        if self.max_lso == 0 {
            return Err(TxRefusal::TsoOff);
        }
        let head = m.head_len();
        let mut headers = [0u8; MAX_TSO_HEADERS + VLAN_TAG];
        let read = m.read(0, &mut headers[..head.min(MAX_TSO_HEADERS)]);
        let header_len = tcp_headers_len(&headers[..read])?;
        let vlan = m.flags().tx_vlan;
        let inline_len = match vlan {
            Some(tci) => {
                headers.copy_within(12..header_len, 12 + VLAN_TAG);
                headers[12..14].copy_from_slice(&0x8100u16.to_be_bytes());
                headers[14..16].copy_from_slice(&tci.to_be_bytes());
                header_len + VLAN_TAG
            }
            None => header_len,
        };
        let len = m.pkt_len();
        let payload = len - header_len;
        if mss == 0 || inline_len + usize::from(mss).min(payload) > self.max_frame {
            return Err(TxRefusal::TsoMss);
        }
        if len + (inline_len - header_len) > self.max_lso {
            return Err(TxRefusal::TsoTooLong);
        }
        let rest = head - header_len;
        let tail = || m.tail().into_iter().flat_map(|t| t.segments());
        let extra_segments = tail().filter(|s| !s.is_empty()).count();
        // Header bytes past the two the Ethernet segment holds, padded to whole segments.
        let inline_room = (inline_len - 2).div_ceil(WQE_DS) * WQE_DS;
        let size = 32 + inline_room + (usize::from(rest > 0) + extra_segments) * WQE_DS;
        if size > MAX_WQE {
            return Err(TxRefusal::TsoTooLong);
        }
        let bbs = size.div_ceil(WQE_BB);
        if bbs as u16 > self.free() {
            return Ok(None);
        }
        let ce = self.completion_request(bbs as u16, 1);
        wqe[..16].copy_from_slice(&wqe::encode_ctrl(
            wqe::opcode::LSO,
            self.pi,
            self.sqn,
            (size / WQE_DS) as u8,
            ce,
        ));
        let flags = m.flags();
        wqe[16..32].copy_from_slice(&wqe::encode_eth_lso(
            flags.tx_ip_csum,
            flags.tx_l4_csum,
            mss,
            inline_len as u16,
            [headers[0], headers[1]],
        ));
        wqe[32..32 + inline_room].fill(0);
        wqe[32..30 + inline_len].copy_from_slice(&headers[2..inline_len]);
        let mut at = 32 + inline_room;
        if rest > 0 {
            wqe[at..at + WQE_DS].copy_from_slice(&wqe::encode_data(
                rest as u32,
                m.lkey(),
                m.data_iova() + header_len as u64,
            ));
            at += WQE_DS;
        }
        for seg in tail().filter(|s| !s.is_empty()) {
            wqe[at..at + WQE_DS].copy_from_slice(&wqe::encode_data(
                seg.len() as u32,
                seg.lkey(),
                seg.data_iova(),
            ));
            at += WQE_DS;
        }
        wqe[at..bbs * WQE_BB].fill(0);
        self.stats.tso_packets += 1;
        Ok(Some(size))
    }

    /// The pool place `m` (of `len` bytes) is kept by if it may ride in a multi-packet WQE
    /// whose Ethernet segment asks for checksums `csum` (IPv4 header, L4): a sendable,
    /// single-segment packet without a VLAN tag to insert and with the same checksum requests.
    #[inline]
    fn multi_packet_place<S: PacketSource>(
        max_frame: usize,
        inflight: &mut InFlight,
        pkts: &S,
        m: &S::Packet<'_>,
        len: usize,
        csum: (bool, bool),
    ) -> Option<u32> {
        let flags = m.flags();
        if !(ETH_HEADER..=max_frame).contains(&len)
            // One test for both offloads that change a WQE's shape.
            || (flags.tx_vlan.is_some() | flags.tx_tso_mss.is_some())
            || (flags.tx_ip_csum, flags.tx_l4_csum) != csum
        {
            return None;
        }
        pkts.run_place(m, inflight)
    }

    /// The longest packet a multi-packet WQE carries inline, in bytes: `inline_max` in `Full`
    /// mode, else 0 (none: every packet it takes has at least an Ethernet header).
    #[inline]
    fn run_inline_max(&self) -> usize {
        if self.inline == InlineMode::Full {
            self.inline_max
        } else {
            0
        }
    }

    /// The 16-byte segments a packet of `len` bytes takes in a multi-packet WQE: its bytes in
    /// an inline segment when within `inline_max` (from [`TxQueue::run_inline_max`]), else one
    /// data segment.
    #[inline]
    fn run_segment_ds(inline_max: usize, len: usize) -> usize {
        if len <= inline_max {
            wqe::inline_seg_ds(len)
        } else {
            1
        }
    }

    /// Builds an enhanced multi-packet WQE at the producer index into `wqe` from the packets at
    /// the front of `pkts`, as many as qualify in a row and fit one WQE and the ring: each one
    /// 16-byte data segment, or carried whole in an inline segment in `Full` mode when within
    /// `inline_max` (a packet that does not fit ends the WQE). The packets taken are kept in flight by buffer index
    /// (their `Mbuf`s are left empty). Returns the packets taken, their bytes and the WQE's
    /// size in bytes; `None`, with nothing changed, unless at least two packets qualify (one
    /// goes better as a SEND, BlueFlame included).
    #[inline]
    pub(crate) fn multi_packet_wqe<S: PacketSource>(
        &mut self,
        pkts: &mut S,
        from: usize,
        limit: usize,
        wqe: &mut [u8; MAX_WQE],
    ) -> Option<(usize, u64, usize)> {
        if limit < from + 2 {
            return None;
        }
        let room = MAX_DS.min(usize::from(self.free()) * WQE_BB / WQE_DS);
        let max_frame = self.max_frame;
        // Read once: the loop below borrows the queue mutably between packets.
        let inline_max = self.run_inline_max();
        let csum = {
            let (first, second) = (pkts.packet(from), pkts.packet(from + 1));
            let flags = first.flags();
            let csum = (flags.tx_ip_csum, flags.tx_l4_csum);
            let (first_len, second_len) = (first.pkt_len(), second.pkt_len());
            if MULTI_PACKET_HEAD_DS
                + Self::run_segment_ds(inline_max, first_len)
                + Self::run_segment_ds(inline_max, second_len)
                > room
                || Self::multi_packet_place(
                    max_frame,
                    &mut self.inflight,
                    pkts,
                    &first,
                    first_len,
                    csum,
                )
                .is_none()
                || Self::multi_packet_place(
                    max_frame,
                    &mut self.inflight,
                    pkts,
                    &second,
                    second_len,
                    csum,
                )
                .is_none()
            {
                return None;
            }
            csum
        };
        let mut ds = MULTI_PACKET_HEAD_DS;
        let mut taken = 0;
        let mut bytes = 0u64;
        for i in from..limit {
            let (len, place) = {
                let m = pkts.packet(i);
                let len = m.pkt_len();
                let segment_ds = Self::run_segment_ds(inline_max, len);
                if ds + segment_ds > room {
                    break;
                }
                let Some(place) =
                    Self::multi_packet_place(max_frame, &mut self.inflight, pkts, &m, len, csum)
                else {
                    break;
                };
                let at = ds * WQE_DS;
                if segment_ds > 1 {
                    let end = at + segment_ds * WQE_DS;
                    wqe[end - WQE_DS..end].fill(0);
                    wqe[at..at + 4].copy_from_slice(&(INLINE_SEG | len as u32).to_be_bytes());
                    m.read(0, &mut wqe[at + 4..at + 4 + len]);
                    self.stats.inline_packets += 1;
                } else {
                    wqe[at..at + WQE_DS].copy_from_slice(&wqe::encode_data(
                        len as u32,
                        m.lkey(),
                        m.data_iova(),
                    ));
                }
                ds += segment_ds;
                (len, place)
            };
            pkts.keep_in_run(i, place, &mut self.inflight);
            taken += 1;
            bytes += len as u64;
        }
        let size = ds * WQE_DS;
        let bbs = size.div_ceil(WQE_BB);
        wqe[size..bbs * WQE_BB].fill(0);
        let ce = self.completion_request(bbs as u16, taken as u16);
        wqe[..WQE_DS].copy_from_slice(&wqe::encode_ctrl(
            wqe::opcode::ENHANCED_MPSW,
            self.pi,
            self.sqn,
            ds as u8,
            ce,
        ));
        wqe[WQE_DS..2 * WQE_DS].copy_from_slice(&wqe::encode_eth(csum.0, csum.1, None, 0, [0, 0]));
        self.stats.multi_packet_wqes += 1;
        Some((taken, bytes, size))
    }
}
