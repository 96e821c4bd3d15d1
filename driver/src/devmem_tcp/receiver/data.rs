//! Payload delivery: an acceptable segment's bytes handed out in order (linear, then dmabuf),
//! stored out of order, or dropped as duplicates; stored pieces handed out as the hole before
//! them fills; the peer's FIN noted where the stream ends.

use super::TcpReceiver;
use crate::devmem_tcp::ooo::{Piece, Stored};
use crate::devmem_tcp::segment::{Segment, TcpFlags};
use crate::devmem_tcp::seq::Seq;
use crate::devmem_tcp::types::{Event, Outcome};

impl TcpReceiver {
    /// The payload and FIN of an acceptable segment.
    pub(super) fn data(
        &mut self,
        seg: &Segment,
        sink: &mut impl FnMut(Event),
        taken: &mut bool,
    ) -> Outcome {
        let seq = Seq(seg.seq);
        let linear = seg.payload.linear;
        let len = seg.payload.len() as u32;
        // Where the stream may end: the window's right edge, or the peer's FIN.
        let mut limit = self.right_edge;
        if let Some(fin) = self.fin_seq {
            if fin.lt(limit) {
                limit = fin;
            }
        }
        let room = limit.diff(seq).max(0) as u32;
        let keep = len.min(room);
        self.stats.past_window_bytes += u64::from(len - keep);
        if len > keep && self.fin_seq.is_some() && room == 0 {
            return Outcome::AfterFin;
        }
        if seg.flags.has(TcpFlags::FIN) && keep == len && self.fin_seq.is_none() {
            self.fin_seq = Some(seq.plus(len));
        }
        if len == 0 {
            return Outcome::NoData;
        }
        if seq.le(self.rcv_nxt) {
            let skip = self.rcv_nxt.diff(seq) as u32;
            if skip >= keep {
                self.stats.duplicate_bytes += u64::from(len);
                return Outcome::Duplicate;
            }
            self.stats.duplicate_bytes += u64::from(skip);
            if linear > 0 {
                self.stats.linear_segments += 1;
            }
            if skip < linear {
                let n = linear.min(keep) - skip;
                sink(Event::Linear {
                    seq: self.rcv_nxt.0,
                    skip,
                    len: n,
                });
                self.stats.linear_bytes += u64::from(n);
                self.rcv_nxt = self.rcv_nxt.plus(n);
            }
            if let Some(d) = seg.payload.dmabuf {
                let d_keep = keep.saturating_sub(linear).min(d.len);
                let d_skip = skip.saturating_sub(linear);
                if d_skip < d_keep {
                    let piece = Piece {
                        seq: seq.plus(linear),
                        len: d_keep,
                        buffer: d.buffer,
                        offset: d.offset,
                    }
                    .trim_front(d_skip);
                    *taken = true;
                    self.hand_out(piece, sink);
                }
            }
            self.drain(sink);
            return Outcome::InOrder;
        }
        // Host-memory bytes are handed out only in order (the header buffer goes when this
        // call returns): out of order they are dropped and the sender sends them again; the
        // dmabuf part is kept behind the hole they leave.
        if linear > 0 {
            self.stats.linear_dropped_bytes += u64::from(linear.min(keep));
        }
        let Some(d) = seg.payload.dmabuf.filter(|d| d.len > 0 && keep > linear) else {
            return if linear > 0 {
                Outcome::LinearOutOfOrder
            } else {
                Outcome::NoData
            };
        };
        let piece = Piece {
            seq: seq.plus(linear),
            len: (keep - linear).min(d.len),
            buffer: d.buffer,
            offset: d.offset,
        };
        if piece.len == 0 {
            return Outcome::OutsideWindow;
        }
        let buffers = &mut self.buffers;
        let stats = &mut self.stats;
        let stored = self.ooo.insert(self.rcv_nxt, piece, &mut |b| {
            buffers.release(b);
            stats.ooo_dropped += 1;
            sink(Event::Release { buffer: b });
        });
        match stored {
            Stored::Kept(n) => {
                self.stats.duplicate_bytes += u64::from(piece.len - n);
                self.buffers.hold(d.buffer);
                *taken = true;
                self.stats.ooo_stored += 1;
                self.latest = Some(seq);
                Outcome::OutOfOrder
            }
            Stored::Duplicate => {
                self.stats.duplicate_bytes += u64::from(piece.len);
                Outcome::Duplicate
            }
            Stored::Full => {
                self.stats.ooo_dropped += 1;
                Outcome::StoreFull
            }
        }
    }

    /// Lends `piece`'s buffer (device-owned or held) and hands the piece out.
    fn hand_out(&mut self, piece: Piece, sink: &mut impl FnMut(Event)) {
        let token = self.buffers.lend(piece.buffer);
        self.stats.fragments += 1;
        self.stats.fragment_bytes += u64::from(piece.len);
        sink(Event::Fragment {
            seq: piece.seq.0,
            offset: piece.offset,
            len: piece.len,
            token,
        });
        self.rcv_nxt = piece.end();
    }

    /// Hands out stored pieces that became in order; drops those wholly received.
    fn drain(&mut self, sink: &mut impl FnMut(Event)) {
        while let Some(mut p) = self.ooo.pop_ready(self.rcv_nxt) {
            // Bytes stored before the FIN was known may run past it: never handed out.
            if let Some(fin) = self.fin_seq {
                p.len = p.len.min(fin.diff(p.seq).max(0) as u32);
            }
            let skip = self.rcv_nxt.diff(p.seq) as u32;
            if skip >= p.len {
                self.stats.duplicate_bytes += u64::from(p.len);
                self.buffers.release(p.buffer);
                sink(Event::Release { buffer: p.buffer });
                continue;
            }
            self.stats.duplicate_bytes += u64::from(skip);
            self.hand_out(p.trim_front(skip), sink);
        }
        if self.ooo.len() == 0 {
            self.latest = None;
        }
    }
}
