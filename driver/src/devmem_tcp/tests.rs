//! The receiver's behaviour on well-formed traffic, through a harness that plays the split
//! queue (buffers posted, written, released) and checks every event.

use super::buffers::Place;
use super::*;
use std::collections::{BTreeMap, VecDeque};

pub(super) const ISS: u32 = 7000;
pub(super) const BUF: u32 = 2048;

pub(super) fn config(buffers: u32, ooo: u16) -> RxConfig {
    RxConfig {
        buffers,
        buffer_bytes: BUF,
        ooo_segments: ooo,
        mss: 1448,
        window_scale: 7,
        iss: ISS,
    }
}

/// What a buffer holds: stream byte `seq` at dmabuf offset `offset`, `len` bytes.
#[derive(Clone, Copy, Debug)]
struct Written {
    seq: u32,
    offset: u64,
    len: u32,
}

/// Plays the split queue and checks the receiver's events.
pub(super) struct Harness {
    pub(super) rx: TcpReceiver,
    free: VecDeque<u32>,
    written: BTreeMap<u32, Written>,
    /// Lent tokens: token -> buffer.
    pub(super) lent: BTreeMap<u32, u32>,
    /// The next stream byte the application expects.
    pub(super) next: u32,
    pub(super) delivered: u64,
    pub(super) linear: u64,
    pub(super) fins: u32,
    pub(super) resets: u32,
    pub(super) last: Option<Verdict>,
    /// The peer's first data byte's sequence number.
    pub(super) isn: u32,
    /// The buffer the segment being built was written into.
    pending: Option<u32>,
}

impl Harness {
    pub(super) fn new(cfg: RxConfig) -> Self {
        Self {
            rx: TcpReceiver::new(cfg).unwrap(),
            free: (0..cfg.buffers).collect(),
            written: BTreeMap::new(),
            lent: BTreeMap::new(),
            next: 0,
            delivered: 0,
            linear: 0,
            fins: 0,
            resets: 0,
            last: None,
            isn: 0,
            pending: None,
        }
    }

    /// A SYN (with timestamps, SACK and scaling) from `isn`, then the ACK of the SYN-ACK.
    pub(super) fn established(cfg: RxConfig, isn: u32) -> Self {
        let mut h = Self::new(cfg);
        let syn = Segment {
            seq: isn,
            flags: TcpFlags::SYN,
            window: 65535,
            options: TcpOptions {
                mss: Some(1448),
                window_scale: Some(7),
                sack_permitted: true,
                timestamp: Some((100, 0)),
                truncated: false,
                ..Default::default()
            },
            checksum_ok: true,
            ..Segment::default()
        };
        let v = h.feed(&syn).unwrap();
        let r = v.reply.unwrap();
        assert_eq!(r.flags, TcpFlags::SYN | TcpFlags::ACK);
        assert_eq!((r.seq, r.ack), (ISS, isn.wrapping_add(1)));
        assert_eq!(r.window_scale, Some(7));
        assert!(r.sack_permitted);
        assert_eq!(r.tsecr, Some(100));
        assert_eq!(h.rx.state(), TcpState::SynReceived);
        let v = h.feed(&h.ack_seg(isn.wrapping_add(1))).unwrap();
        assert_eq!(v.reply, None);
        assert_eq!(h.rx.state(), TcpState::Established);
        h.next = isn.wrapping_add(1);
        h.isn = isn.wrapping_add(1);
        h
    }

    pub(super) fn ack_seg(&self, seq: u32) -> Segment {
        Segment {
            seq,
            ack: ISS + 1,
            flags: TcpFlags::ACK,
            window: 1000,
            options: TcpOptions {
                timestamp: Some((200, 1)),
                ..TcpOptions::default()
            },
            checksum_ok: true,
            ..Segment::default()
        }
    }

    /// A data segment of `len` stream bytes from `seq`, the first `linear` of them in host
    /// memory and the rest written into a free buffer (`None` when none is free).
    pub(super) fn data_seg(&mut self, seq: u32, linear: u32, len: u32) -> Option<Segment> {
        let mut s = self.ack_seg(seq);
        s.payload.linear = linear.min(len);
        let d = len - s.payload.linear;
        if d > 0 {
            let b = self.free.pop_front()?;
            self.pending = Some(b);
            // Header bytes first in the buffer, as when options ran past the split.
            let offset = u64::from(b) * u64::from(BUF) + 12;
            self.written.insert(
                b,
                Written {
                    seq: seq.wrapping_add(s.payload.linear),
                    offset,
                    len: d,
                },
            );
            s.payload.dmabuf = Some(DmabufPart {
                buffer: b,
                offset,
                len: d,
            });
        }
        Some(s)
    }

    /// Feeds a data segment; `None` when no buffer was free (the device would have dropped it).
    pub(super) fn data(&mut self, seq: u32, len: u32) -> Option<Verdict> {
        let s = self.data_seg(seq, 0, len)?;
        Some(self.feed(&s).unwrap())
    }

    /// Feeds `seg`, checking every event against what the buffers hold.
    pub(super) fn feed(&mut self, seg: &Segment) -> Result<Verdict, TcpRxError> {
        let mut events = Vec::new();
        let r = self.rx.on_segment(seg, &mut |e| events.push(e));
        let pending = self.pending.take();
        if r.is_err() {
            assert!(events.is_empty(), "a refused segment has no events");
            // The caller still owns the buffer: the queue takes it back.
            if let Some(b) = pending {
                self.written.remove(&b);
                self.free.push_back(b);
            }
        }
        for e in events {
            self.check(e, Some(seg));
        }
        self.check_invariants();
        if let Ok(v) = r {
            self.last = Some(v);
        }
        r
    }

    fn check(&mut self, e: Event, seg: Option<&Segment>) {
        match e {
            Event::Fragment {
                seq,
                offset,
                len,
                token,
            } => {
                assert!(len > 0);
                assert_eq!(seq, self.next, "fragment out of stream order");
                let b = token & ((1 << BUFFER_BITS) - 1);
                let w = self.written[&b];
                // The fragment's bytes are the stream bytes the buffer holds at that offset.
                let into = seq.wrapping_sub(w.seq);
                assert!(
                    into < w.len && into + len <= w.len,
                    "fragment outside the written bytes"
                );
                assert_eq!(offset, w.offset + u64::from(into), "wrong bytes handed out");
                assert!(self.lent.insert(token, b).is_none(), "token lent twice");
                self.next = seq.wrapping_add(len);
                self.delivered += u64::from(len);
            }
            Event::Linear { seq, skip, len } => {
                let seg = seg.expect("linear bytes only for the segment being fed");
                assert!(len > 0 && skip + len <= seg.payload.linear);
                assert_eq!(seq, self.next);
                assert_eq!(seg.seq.wrapping_add(skip), seq);
                self.next = seq.wrapping_add(len);
                self.linear += u64::from(len);
            }
            Event::Release { buffer } => {
                assert!(
                    !self.free.contains(&buffer),
                    "buffer {buffer} released twice"
                );
                assert_eq!(self.rx.place(buffer), Place::Device);
                self.written.remove(&buffer);
                self.free.push_back(buffer);
            }
            Event::Fin => self.fins += 1,
            Event::Reset => self.resets += 1,
        }
    }

    /// Every buffer is free (device), held, or lent: none lost.
    pub(super) fn check_invariants(&self) {
        assert_eq!(self.rx.tokens_lent() as usize, self.lent.len());
        assert_eq!(
            self.rx.buffers_on_device(),
            self.free.len() as u32,
            "buffers lost or doubled"
        );
        assert_eq!(
            self.free.len() as u32 + self.rx.buffers_held() + self.rx.tokens_lent(),
            self.free.len() as u32 + self.written.len() as u32 - self.free_written(),
        );
    }

    /// Free buffers that still show written bytes (none should).
    fn free_written(&self) -> u32 {
        self.free
            .iter()
            .filter(|b| self.written.contains_key(b))
            .count() as u32
    }

    /// Checks events got outside [`Harness::feed`].
    pub(super) fn take_events(&mut self, events: Vec<Event>) {
        for e in events {
            self.check(e, None);
        }
        self.check_invariants();
    }

    /// Gives back every lent token, one by one.
    pub(super) fn give_all(&mut self) {
        let tokens: Vec<u32> = self.lent.keys().copied().collect();
        for t in tokens {
            let mut ev = Vec::new();
            assert_eq!(self.rx.give_back(t, 1, &mut |e| ev.push(e)), Ok(1));
            self.lent.remove(&t);
            for e in ev {
                self.check(e, None);
            }
        }
        self.check_invariants();
    }
}

#[test]
fn in_order_segments_are_fragments_with_tokens() {
    let mut h = Harness::established(config(8, 4), 1000);
    let v = h.data(1001, 1000).unwrap();
    assert_eq!(v.outcome, Outcome::InOrder);
    let r = v.reply.unwrap();
    assert_eq!(r.ack, 2001);
    assert_eq!(r.tsecr, Some(200));
    assert!(r.sack.as_slice().is_empty());
    h.data(2001, 1448).unwrap();
    assert_eq!(h.delivered, 2448);
    assert_eq!(h.rx.tokens_lent(), 2);
    assert_eq!(h.rx.stats().fragments, 2);
    h.give_all();
    assert_eq!(h.rx.tokens_lent(), 0);
    assert_eq!(h.rx.stats().tokens_returned, 2);
}

#[test]
fn out_of_order_is_held_sacked_and_delivered_when_the_hole_fills() {
    let mut h = Harness::established(config(8, 4), 5000);
    let base = 5001;
    assert_eq!(
        h.data(base + 1000, 1000).unwrap().outcome,
        Outcome::OutOfOrder
    );
    let v = h.data(base + 3000, 1000).unwrap();
    assert_eq!(v.outcome, Outcome::OutOfOrder);
    let sack = v.reply.unwrap().sack;
    assert_eq!(
        sack.as_slice(),
        &[
            SackBlock {
                left: base + 3000,
                right: base + 4000
            },
            SackBlock {
                left: base + 1000,
                right: base + 2000
            },
        ],
        "the newest block first (RFC 2018 §4)"
    );
    assert_eq!(h.rx.buffers_held(), 2);
    let v = h.data(base, 1000).unwrap();
    assert_eq!(v.outcome, Outcome::InOrder);
    assert_eq!(v.reply.unwrap().ack, base + 2000);
    assert_eq!(h.delivered, 2000);
    h.data(base + 2000, 1000).unwrap();
    assert_eq!(h.delivered, 4000);
    assert_eq!(h.rx.buffers_held(), 0);
    assert!(h.rx.sack_blocks().as_slice().is_empty());
}

#[test]
fn overlapping_retransmits_are_trimmed_by_offset() {
    let mut h = Harness::established(config(8, 4), 0);
    h.data(1, 1000).unwrap();
    // 500 old bytes and 500 new ones: the fragment starts 500 bytes into the buffer.
    assert_eq!(h.data(501, 1000).unwrap().outcome, Outcome::InOrder);
    assert_eq!(h.delivered, 1500);
    assert_eq!(h.rx.stats().duplicate_bytes, 500);
    // Wholly old: dropped, its buffer released at once.
    assert_eq!(h.data(1, 1500).unwrap().outcome, Outcome::Duplicate);
    assert_eq!(h.rx.tokens_lent(), 2);
    // Out of order pieces that overlap each other are trimmed against what is stored.
    h.data(3001, 1000).unwrap();
    h.data(2501, 1000).unwrap(); // overlaps the front of the stored piece
    h.data(3501, 1000).unwrap(); // overlaps its back
    h.data(2801, 300).unwrap(); // inside: duplicate
    assert_eq!(h.rx.ooo_bytes(), 2000);
    h.data(1501, 1000).unwrap();
    assert_eq!(h.delivered, 4500);
    assert_eq!(h.rx.buffers_held(), 0);
}

#[test]
fn a_piece_covering_stored_ones_replaces_them() {
    let mut h = Harness::established(config(8, 4), 0);
    h.data(1101, 100).unwrap();
    h.data(1301, 100).unwrap();
    assert_eq!(h.rx.buffers_held(), 2);
    h.data(1001, 1000).unwrap();
    assert_eq!(h.rx.buffers_held(), 1, "the two covered pieces gave way");
    h.data(1, 1000).unwrap();
    assert_eq!(h.delivered, 2000);
}

#[test]
fn sequence_numbers_wrap() {
    let isn = u32::MAX - 2500;
    let mut h = Harness::established(config(16, 8), isn);
    let mut seq = isn.wrapping_add(1);
    // Out of order across the wrap first, then in order.
    h.data(seq.wrapping_add(2000), 1000).unwrap();
    h.data(seq.wrapping_add(4000), 1000).unwrap();
    for _ in 0..6 {
        h.data(seq, 1000).unwrap();
        seq = seq.wrapping_add(1000);
    }
    assert_eq!(h.delivered, 6000);
    assert_eq!(h.rx.rcv_nxt(), isn.wrapping_add(6001));
}

#[test]
fn window_follows_free_buffers_and_never_shrinks() {
    let mut h = Harness::established(config(4, 2), 0);
    // 4 buffers of one MSS each, rounded up to the scale (128 bytes).
    let w0 = h.rx.window();
    assert_eq!(w0, (4 * 1448u32).next_multiple_of(128));
    for i in 0..4 {
        h.data(1 + i * 1448, 1448).unwrap();
    }
    // All buffers lent: the right edge stays where it was advertised; what is left is the
    // scale's rounding (less than one 128-byte unit past the old edge).
    assert!(h.rx.window() <= 128, "{}", h.rx.window());
    let v = h.data(1 + 4 * 1448, 100);
    assert!(v.is_none(), "no buffer: the device drops it");
    h.give_all();
    assert_eq!(h.rx.window(), (4 * 1448u32).next_multiple_of(128));
    let r = h.rx.ack().unwrap();
    let advertised = u32::from(r.window) << 7;
    assert!(
        (4 * 1448..4 * 1448 + 128).contains(&advertised),
        "{advertised}"
    );
}

#[test]
fn linear_payload_is_reported_apart_in_order() {
    let mut h = Harness::established(config(8, 4), 0);
    // 12 bytes in host memory, 988 in the dmabuf.
    let s = h.data_seg(1, 12, 1000).unwrap();
    assert_eq!(h.feed(&s).unwrap().outcome, Outcome::InOrder);
    assert_eq!((h.linear, h.delivered), (12, 988));
    // A whole segment in host memory (a 1-byte write).
    let s = h.data_seg(1001, 1, 1).unwrap();
    h.feed(&s).unwrap();
    assert_eq!(h.linear, 13);
    // Out of order with linear bytes: those are dropped, the dmabuf part kept behind the hole.
    let s = h.data_seg(3000, 12, 500).unwrap();
    let v = h.feed(&s).unwrap();
    assert_eq!(v.outcome, Outcome::OutOfOrder);
    assert_eq!(
        v.reply.unwrap().sack.as_slice(),
        &[SackBlock {
            left: 3012,
            right: 3500
        }]
    );
    assert_eq!(h.rx.buffers_held(), 1);
    // Only linear bytes, out of order: dropped.
    let s = h.data_seg(4000, 20, 20).unwrap();
    assert_eq!(h.feed(&s).unwrap().outcome, Outcome::LinearOutOfOrder);
    // The sender fills the hole: linear bytes in order, then the stored part.
    let s = h.data_seg(1002, 0, 1998).unwrap();
    h.feed(&s).unwrap();
    let s = h.data_seg(3000, 12, 500).unwrap();
    h.feed(&s).unwrap();
    assert_eq!(h.rx.rcv_nxt(), 3500);
    assert_eq!(h.linear + h.delivered, 3499);
    let st = h.rx.stats();
    assert_eq!((st.linear_bytes, st.linear_segments), (25, 3));
    assert_eq!(st.linear_dropped_bytes, 32);
}

#[test]
fn fin_after_all_data_then_close() {
    let mut h = Harness::established(config(8, 4), 0);
    let mut s = h.data_seg(1001, 0, 500).unwrap();
    s.flags = s.flags | TcpFlags::FIN;
    assert_eq!(h.feed(&s).unwrap().outcome, Outcome::OutOfOrder);
    assert_eq!(h.fins, 0);
    h.data(1, 1000).unwrap();
    assert_eq!(h.fins, 1);
    assert_eq!(h.rx.state(), TcpState::CloseWait);
    assert_eq!(h.rx.rcv_nxt(), 1502);
    // Data past the FIN is refused.
    let v = h.data(1502, 10).unwrap();
    assert_ne!(v.outcome, Outcome::InOrder);
    let fin = h.rx.close().unwrap();
    assert_eq!(fin.flags, TcpFlags::FIN | TcpFlags::ACK);
    assert_eq!(h.rx.state(), TcpState::LastAck);
    let mut ack = h.ack_seg(1502);
    ack.ack = ISS + 2;
    h.feed(&ack).unwrap();
    assert_eq!(h.rx.state(), TcpState::Closed);
    // Tokens lent before the close still come back.
    h.give_all();
}

#[test]
fn rst_only_at_rcv_nxt() {
    let mut h = Harness::established(config(8, 4), 0);
    h.data(2001, 500).unwrap();
    let mut rst = h.ack_seg(101);
    rst.flags = TcpFlags::RST;
    let v = h.feed(&rst).unwrap();
    assert_eq!(v.outcome, Outcome::ResetChallenged);
    assert!(v.reply.is_some());
    rst.seq = 0x8000_0000;
    assert_eq!(h.feed(&rst).unwrap().outcome, Outcome::ResetIgnored);
    assert_eq!(h.rx.state(), TcpState::Established);
    rst.seq = 1;
    assert_eq!(h.feed(&rst).unwrap().outcome, Outcome::Reset);
    assert_eq!((h.resets, h.rx.state()), (1, TcpState::Closed));
    assert_eq!(h.rx.buffers_held(), 0, "held buffers released on reset");
}

#[test]
fn syn_in_established_is_challenged_and_bad_checksums_dropped() {
    let mut h = Harness::established(config(8, 4), 0);
    let mut syn = h.ack_seg(1);
    syn.flags = TcpFlags::SYN;
    assert_eq!(h.feed(&syn).unwrap().outcome, Outcome::SynChallenged);
    let mut s = h.data_seg(1, 0, 100).unwrap();
    s.checksum_ok = false;
    let v = h.feed(&s).unwrap();
    assert_eq!((v.outcome, v.reply), (Outcome::BadChecksum, None));
    assert_eq!(h.delivered, 0);
    assert_eq!(h.rx.stats().challenge_acks, 1);
}

#[test]
fn paws_drops_old_timestamps() {
    let mut h = Harness::established(config(8, 4), 0);
    let mut s = h.data_seg(1, 0, 100).unwrap();
    s.options.timestamp = Some((150, 1));
    assert_eq!(h.feed(&s).unwrap().outcome, Outcome::Paws);
    assert_eq!(h.delivered, 0);
    // A segment whose options were past the split (no timestamp read) is taken.
    let mut s = h.data_seg(1, 0, 100).unwrap();
    s.options = TcpOptions {
        truncated: true,
        ..TcpOptions::default()
    };
    assert_eq!(h.feed(&s).unwrap().outcome, Outcome::InOrder);
    assert_eq!(h.rx.stats().options_in_dmabuf, 1);
}

#[test]
fn full_store_drops_the_furthest_piece() {
    let mut h = Harness::established(config(8, 2), 0);
    h.data(3001, 100).unwrap();
    h.data(5001, 100).unwrap();
    // Nearer than the furthest stored: the furthest goes.
    assert_eq!(h.data(2001, 100).unwrap().outcome, Outcome::OutOfOrder);
    assert_eq!(h.rx.stats().ooo_dropped, 1);
    // Further than all: dropped itself.
    assert_eq!(h.data(6001, 100).unwrap().outcome, Outcome::StoreFull);
    assert_eq!(h.rx.buffers_held(), 2);
}

#[test]
fn config_out_of_range_is_refused() {
    let bad = [
        RxConfig {
            buffers: 0,
            ..config(1, 0)
        },
        RxConfig {
            buffer_bytes: 32,
            ..config(1, 0)
        },
        RxConfig {
            ooo_segments: 2,
            ..config(1, 0)
        },
        RxConfig {
            mss: 10,
            ..config(1, 0)
        },
        RxConfig {
            window_scale: 15,
            ..config(1, 0)
        },
    ];
    for c in bad {
        assert!(matches!(
            TcpReceiver::new(c),
            Err(TcpRxError::Config { .. })
        ));
    }
}

#[test]
fn stored_bytes_past_a_later_fin_are_never_handed_out() {
    let mut h = Harness::established(config(8, 4), 0);
    // 1001..2001 stored, then a FIN claiming the stream ends at 1501.
    h.data(1001, 1000).unwrap();
    let mut fin = h.data_seg(501, 0, 1000).unwrap();
    fin.flags = fin.flags | TcpFlags::FIN;
    fin.payload.dmabuf.as_mut().unwrap().len = 1000;
    h.feed(&fin).unwrap();
    h.data(1, 500).unwrap();
    assert_eq!(h.fins, 1);
    assert_eq!(h.rx.rcv_nxt(), 1502);
    assert!(h.delivered <= 1500, "{}", h.delivered);
    assert_eq!(h.rx.state(), TcpState::CloseWait);
    h.give_all();
    assert_eq!(h.rx.buffers_on_device(), 8);
}
