//! The receive state machine (see the module documentation of [`super`]): the connection's
//! states, acceptability, RST/SYN/ACK handling and replies here; payload delivery in
//! [`data`].

mod data;

use super::buffers::Buffers;
use super::error::TcpRxError;
use super::ooo::{OooStore, SackBlocks};
use super::segment::{Segment, TcpFlags};
use super::seq::Seq;
use super::types::{Event, Outcome, Reply, RxStats, TcpState, Verdict};

/// Most tokens one [`TcpReceiver::give_back`] takes (Linux's `SO_DEVMEM_DONTNEED` frees at
/// most 1024 frags a call).
pub const MAX_TOKENS_PER_CALL: u32 = 1024;

/// Most linear (host memory) payload bytes one segment may carry: a split queue's header
/// buffer is at most 1024 bytes.
pub const MAX_LINEAR: u32 = 1024;

/// The largest window, 2^30 bytes (RFC 7323 §2.3).
const MAX_WINDOW: u64 = 1 << 30;

/// A receiver's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxConfig {
    /// Payload buffers of the split queue, 1..=2^20. Buffer `b` is dmabuf bytes
    /// `b * buffer_bytes .. (b + 1) * buffer_bytes`.
    pub buffers: u32,
    /// Bytes of one payload buffer, 64..=65536.
    pub buffer_bytes: u32,
    /// Out-of-order pieces kept at most, 0..=buffers (0: out-of-order data is dropped).
    pub ooo_segments: u16,
    /// The MSS we announce, 88..=65495 bytes; a buffer holds at most this much payload.
    pub mss: u16,
    /// Our window scale shift, 0..=14 (used when the peer offers scaling).
    pub window_scale: u8,
    /// Our initial sequence number.
    pub iss: u32,
}

impl RxConfig {
    fn validate(&self) -> Result<(), TcpRxError> {
        let bad = |what, value: u64, hint| Err(TcpRxError::Config { what, value, hint });
        if !(1..=1 << super::buffers::BUFFER_BITS).contains(&self.buffers) {
            return bad("buffers", self.buffers.into(), "give 1 to 2^20");
        }
        if !(64..=65536).contains(&self.buffer_bytes) {
            return bad("buffer_bytes", self.buffer_bytes.into(), "give 64 to 65536");
        }
        if u32::from(self.ooo_segments) > self.buffers {
            return bad(
                "ooo_segments",
                self.ooo_segments.into(),
                "give at most buffers",
            );
        }
        if !(88..=65495).contains(&self.mss) {
            return bad("mss", self.mss.into(), "give 88 to 65495");
        }
        if self.window_scale > 14 {
            return bad("window_scale", self.window_scale.into(), "give 0 to 14");
        }
        Ok(())
    }
}

/// What the handshake agreed.
#[derive(Debug, Clone, Copy, Default)]
struct Agreed {
    /// Our shift when the peer offered scaling, else 0.
    rcv_shift: u8,
    scaling: bool,
    sack: bool,
    timestamps: bool,
}

/// A devmem TCP receiver for one connection: parsed segments in, [`Event`]s and [`Reply`]s
/// out. Allocates only in [`TcpReceiver::new`].
pub struct TcpReceiver {
    cfg: RxConfig,
    state: TcpState,
    agreed: Agreed,
    buffers: Buffers,
    ooo: OooStore,
    irs: Seq,
    rcv_nxt: Seq,
    /// Right edge of the window last advertised (never moved left).
    right_edge: Seq,
    snd_una: Seq,
    snd_nxt: Seq,
    /// Sequence number of the peer's FIN, once seen.
    fin_seq: Option<Seq>,
    ts_recent: Option<u32>,
    /// Start of the piece stored last (the first SACK block holds it).
    latest: Option<Seq>,
    stats: RxStats,
}

impl TcpReceiver {
    /// A receiver in LISTEN.
    ///
    /// # Errors
    ///
    /// [`TcpRxError::Config`] for a value out of range.
    pub fn new(cfg: RxConfig) -> Result<Self, TcpRxError> {
        cfg.validate()?;
        Ok(Self {
            cfg,
            state: TcpState::Listen,
            agreed: Agreed::default(),
            buffers: Buffers::new(cfg.buffers, cfg.buffer_bytes),
            ooo: OooStore::new(cfg.ooo_segments),
            irs: Seq(0),
            rcv_nxt: Seq(0),
            right_edge: Seq(0),
            snd_una: Seq(cfg.iss),
            snd_nxt: Seq(cfg.iss),
            fin_seq: None,
            ts_recent: None,
            latest: None,
            stats: RxStats::default(),
        })
    }

    /// The connection state.
    pub fn state(&self) -> TcpState {
        self.state
    }

    /// The next sequence number expected (meaningful once a SYN arrived).
    pub fn rcv_nxt(&self) -> u32 {
        self.rcv_nxt.0
    }

    /// The counters.
    pub fn stats(&self) -> RxStats {
        self.stats
    }

    /// Buffers held in the out-of-order store.
    pub fn buffers_held(&self) -> u32 {
        self.ooo.len() as u32
    }

    /// Buffers lent under tokens.
    pub fn tokens_lent(&self) -> u32 {
        self.buffers.lent()
    }

    /// Buffers the device has (neither held nor lent).
    pub fn buffers_on_device(&self) -> u32 {
        self.buffers.on_device()
    }

    /// Payload bytes held out of order.
    pub fn ooo_bytes(&self) -> u64 {
        self.ooo.bytes()
    }

    /// The window now, in bytes: the right edge last advertised, or further right if more
    /// buffers are free.
    pub fn window(&self) -> u32 {
        let (_, edge) = self.next_edge();
        edge.diff(self.rcv_nxt).max(0) as u32
    }

    /// SACK blocks for the data held out of order (empty without SACK agreed).
    pub fn sack_blocks(&self) -> SackBlocks {
        if !self.agreed.sack {
            return SackBlocks::default();
        }
        let most = if self.agreed.timestamps { 3 } else { 4 };
        self.ooo.sack_blocks(self.latest, most)
    }

    /// Takes one segment. Every payload buffer the segment names ends up lent
    /// ([`Event::Fragment`]), held out of order, or released ([`Event::Release`]).
    ///
    /// # Errors
    ///
    /// A refused segment changes nothing and its buffer stays the caller's:
    /// [`TcpRxError::NoSuchBuffer`], [`TcpRxError::BufferNotPosted`],
    /// [`TcpRxError::OutsideBuffer`], [`TcpRxError::SegmentTooLong`].
    pub fn on_segment(
        &mut self,
        seg: &Segment,
        sink: &mut impl FnMut(Event),
    ) -> Result<Verdict, TcpRxError> {
        if seg.payload.linear > MAX_LINEAR {
            return Err(TcpRxError::SegmentTooLong {
                len: seg.payload.len(),
                most: u64::from(MAX_LINEAR) + u64::from(self.cfg.buffer_bytes),
            });
        }
        if let Some(d) = seg.payload.dmabuf {
            self.buffers.check_posted(d.buffer, d.offset, d.len)?;
        }
        self.stats.segments += 1;
        if seg.options.truncated {
            self.stats.options_in_dmabuf += 1;
        }
        let buffer = seg.payload.dmabuf.map(|d| d.buffer);
        let mut taken = false;
        let outcome = self.dispatch(seg, sink, &mut taken);
        if let (Some(b), false) = (buffer, taken) {
            sink(Event::Release { buffer: b });
        }
        Ok(outcome)
    }

    /// Gives back `count` tokens from `start` (devmem's `struct dmabuf_token`): each buffer is
    /// released ([`Event::Release`]) and the window may open. Returns how many.
    ///
    /// # Errors
    ///
    /// [`TcpRxError::TooManyTokens`] past [`MAX_TOKENS_PER_CALL`]; [`TcpRxError::TokenNotLent`]
    /// when any token of the range is not lent (then none is given back).
    pub fn give_back(
        &mut self,
        start: u32,
        count: u32,
        sink: &mut impl FnMut(Event),
    ) -> Result<u32, TcpRxError> {
        if count > MAX_TOKENS_PER_CALL {
            self.stats.bad_token_returns += 1;
            return Err(TcpRxError::TooManyTokens {
                count,
                most: MAX_TOKENS_PER_CALL,
            });
        }
        for i in 0..count {
            let token = start.wrapping_add(i);
            if self.buffers.lent_buffer(token).is_none() {
                self.stats.bad_token_returns += 1;
                return Err(TcpRxError::TokenNotLent { token });
            }
        }
        for i in 0..count {
            if let Some(b) = self.buffers.lent_buffer(start.wrapping_add(i)) {
                self.buffers.release(b);
                sink(Event::Release { buffer: b });
            }
        }
        self.stats.tokens_returned += u64::from(count);
        Ok(count)
    }

    /// An ACK to send now (a window update after tokens came back), in a synchronised state.
    pub fn ack(&mut self) -> Option<Reply> {
        self.synchronised().then(|| self.reply(TcpFlags::ACK))
    }

    /// Closes our direction: FIN to send (from ESTABLISHED or CLOSE-WAIT); `None` in other
    /// states.
    pub fn close(&mut self) -> Option<Reply> {
        let next = match self.state {
            TcpState::Established => TcpState::FinWait,
            TcpState::CloseWait => TcpState::LastAck,
            _ => return None,
        };
        self.state = next;
        let r = self.reply(TcpFlags::FIN | TcpFlags::ACK);
        self.snd_nxt = self.snd_nxt.plus(1);
        Some(r)
    }

    /// Resets the connection: out-of-order buffers released, an RST to send (`None` when
    /// nothing was synchronised). Lent tokens stay valid for [`TcpReceiver::give_back`].
    pub fn abort(&mut self, sink: &mut impl FnMut(Event)) -> Option<Reply> {
        let had = self.synchronised();
        let r = self.reply(TcpFlags::RST);
        self.shut(sink);
        had.then_some(r)
    }

    fn synchronised(&self) -> bool {
        !matches!(self.state, TcpState::Listen | TcpState::Closed)
    }

    /// To Closed, every held buffer released.
    fn shut(&mut self, sink: &mut impl FnMut(Event)) {
        self.state = TcpState::Closed;
        while let Some(p) = self.ooo.pop_last() {
            self.buffers.release(p.buffer);
            sink(Event::Release { buffer: p.buffer });
        }
        self.latest = None;
    }

    fn dispatch(
        &mut self,
        seg: &Segment,
        sink: &mut impl FnMut(Event),
        taken: &mut bool,
    ) -> Verdict {
        let drop = |outcome| Verdict {
            outcome,
            reply: None,
        };
        if !seg.checksum_ok {
            self.stats.bad_checksum += 1;
            return drop(Outcome::BadChecksum);
        }
        match self.state {
            TcpState::Closed => drop(Outcome::NotSynchronised),
            TcpState::Listen => self.listen(seg),
            _ => self.synchronised_segment(seg, sink, taken),
        }
    }

    fn listen(&mut self, seg: &Segment) -> Verdict {
        let f = seg.flags;
        if f.has(TcpFlags::RST) || f.has(TcpFlags::ACK) || !f.has(TcpFlags::SYN) {
            return Verdict {
                outcome: Outcome::NotSynchronised,
                reply: None,
            };
        }
        let o = seg.options;
        self.irs = Seq(seg.seq);
        self.rcv_nxt = self.irs.plus(1);
        self.agreed = Agreed {
            scaling: o.window_scale.is_some(),
            rcv_shift: if o.window_scale.is_some() {
                self.cfg.window_scale
            } else {
                0
            },
            sack: o.sack_permitted,
            timestamps: o.timestamp.is_some(),
        };
        self.ts_recent = o.timestamp.map(|(v, _)| v);
        self.state = TcpState::SynReceived;
        // Our SYN takes one sequence number.
        self.snd_nxt = Seq(self.cfg.iss).plus(1);
        // Data on a SYN is not taken (no TCP Fast Open): its buffer goes back.
        Verdict {
            outcome: Outcome::SynAccepted,
            reply: Some(self.syn_ack()),
        }
    }

    fn syn_ack(&mut self) -> Reply {
        let free = self.free_bytes().min(65535) as u32;
        self.right_edge = self.rcv_nxt.plus(free);
        Reply {
            flags: TcpFlags::SYN | TcpFlags::ACK,
            seq: self.cfg.iss,
            ack: self.rcv_nxt.0,
            window: free as u16,
            mss: Some(self.cfg.mss),
            window_scale: self.agreed.scaling.then_some(self.cfg.window_scale),
            sack_permitted: self.agreed.sack,
            tsecr: self.ts_recent.filter(|_| self.agreed.timestamps),
            sack: SackBlocks::default(),
        }
    }

    /// Bytes the free buffers take: one segment per buffer, each at most one MSS.
    fn free_bytes(&self) -> u64 {
        let per = u64::from(self.cfg.buffer_bytes.min(u32::from(self.cfg.mss)));
        (u64::from(self.buffers.on_device()) * per).min(MAX_WINDOW)
    }

    /// The window field and right edge an ACK sent now would carry.
    fn next_edge(&self) -> (u16, Seq) {
        let shift = u32::from(self.agreed.rcv_shift);
        let mut edge = self.right_edge;
        let candidate = self.rcv_nxt.plus(self.free_bytes() as u32);
        if edge.lt(candidate) {
            edge = candidate;
        }
        let bytes = edge.diff(self.rcv_nxt).max(0) as u64;
        // Rounded up so the right edge never moves left through the scaling.
        let field = bytes.div_ceil(1 << shift).min(65535);
        let advertised = self.rcv_nxt.plus((field << shift) as u32);
        if edge.lt(advertised) {
            edge = advertised;
        }
        (field as u16, edge)
    }

    fn reply(&mut self, flags: TcpFlags) -> Reply {
        let (window, edge) = self.next_edge();
        self.right_edge = edge;
        Reply {
            flags,
            seq: self.snd_nxt.0,
            ack: self.rcv_nxt.0,
            window,
            mss: None,
            window_scale: None,
            sack_permitted: false,
            tsecr: self.ts_recent.filter(|_| self.agreed.timestamps),
            sack: self.sack_blocks(),
        }
    }

    fn ack_verdict(&mut self, outcome: Outcome) -> Verdict {
        Verdict {
            outcome,
            reply: Some(self.reply(TcpFlags::ACK)),
        }
    }

    fn challenge(&mut self, outcome: Outcome) -> Verdict {
        self.stats.challenge_acks += 1;
        self.ack_verdict(outcome)
    }

    fn synchronised_segment(
        &mut self,
        seg: &Segment,
        sink: &mut impl FnMut(Event),
        taken: &mut bool,
    ) -> Verdict {
        let f = seg.flags;
        let seq = Seq(seg.seq);
        let wnd = self.right_edge.diff(self.rcv_nxt).max(0) as u32;
        // RFC 5961 §3.2: only an RST at exactly rcv_nxt is taken.
        if f.has(TcpFlags::RST) {
            if seq == self.rcv_nxt {
                self.stats.resets += 1;
                self.shut(sink);
                sink(Event::Reset);
                return Verdict {
                    outcome: Outcome::Reset,
                    reply: None,
                };
            }
            self.stats.resets_refused += 1;
            if seq.within(self.rcv_nxt, wnd) {
                return self.challenge(Outcome::ResetChallenged);
            }
            return Verdict {
                outcome: Outcome::ResetIgnored,
                reply: None,
            };
        }
        if f.has(TcpFlags::SYN) {
            if self.state == TcpState::SynReceived && seq == self.irs {
                return Verdict {
                    outcome: Outcome::SynRepeated,
                    reply: Some(self.syn_ack()),
                };
            }
            return self.challenge(Outcome::SynChallenged);
        }
        let len = seg.payload.len() as u32;
        let seg_len = len + u32::from(f.has(TcpFlags::FIN));
        let acceptable = match (seg_len, wnd) {
            (0, 0) => seq == self.rcv_nxt,
            (0, _) => seq.within(self.rcv_nxt, wnd),
            (_, 0) => false,
            (_, _) => {
                seq.within(self.rcv_nxt, wnd) || seq.plus(seg_len - 1).within(self.rcv_nxt, wnd)
            }
        };
        if !acceptable {
            if seq.plus(seg_len).le(self.rcv_nxt) && seg_len > 0 {
                self.stats.duplicate_bytes += u64::from(len);
                return self.ack_verdict(Outcome::Duplicate);
            }
            self.stats.out_of_window += 1;
            return self.ack_verdict(Outcome::OutsideWindow);
        }
        if !f.has(TcpFlags::ACK) {
            return Verdict {
                outcome: Outcome::BadAck,
                reply: None,
            };
        }
        let ack = Seq(seg.ack);
        if self.snd_nxt.lt(ack) {
            // RFC 5961 §5.2: an ACK of data never sent.
            return self.challenge(Outcome::BadAck);
        }
        if self.state == TcpState::SynReceived {
            if ack != self.snd_nxt {
                return Verdict {
                    outcome: Outcome::BadAck,
                    reply: None,
                };
            }
            self.state = TcpState::Established;
        }
        if self.snd_una.lt(ack) {
            self.snd_una = ack;
        }
        let our_fin_acked = self.snd_una == self.snd_nxt;
        if self.state == TcpState::LastAck && our_fin_acked {
            self.shut(sink);
            return Verdict {
                outcome: Outcome::NoData,
                reply: None,
            };
        }
        // PAWS (RFC 7323 §5.3): an older timestamp than TS.Recent marks an old duplicate.
        if let (true, Some((tsval, _)), Some(recent)) = (
            self.agreed.timestamps,
            seg.options.timestamp,
            self.ts_recent,
        ) {
            if (tsval.wrapping_sub(recent) as i32) < 0 {
                self.stats.paws += 1;
                return self.ack_verdict(Outcome::Paws);
            }
            if seq.le(self.rcv_nxt) {
                self.ts_recent = Some(tsval);
            }
        }
        let outcome = self.data(seg, sink, taken);
        if self.fin_seq == Some(self.rcv_nxt)
            && matches!(self.state, TcpState::Established | TcpState::FinWait)
        {
            self.rcv_nxt = self.rcv_nxt.plus(1);
            sink(Event::Fin);
            if self.state == TcpState::FinWait {
                // Both directions done (TIME-WAIT's quiet time is the caller's).
                let r = self.reply(TcpFlags::ACK);
                self.shut(sink);
                return Verdict {
                    outcome,
                    reply: Some(r),
                };
            }
            self.state = TcpState::CloseWait;
        }
        if seg_len == 0 {
            return Verdict {
                outcome,
                reply: None,
            };
        }
        self.ack_verdict(outcome)
    }

    /// Where buffer `b` is (tests).
    #[cfg(test)]
    pub(super) fn place(&self, b: u32) -> super::buffers::Place {
        self.buffers.place(b)
    }
}
