//! What the sender transmits next: the SYN (again on its timer), a retransmission of the
//! oldest unacknowledged segment (timeout, third duplicate ACK, partial ACK), a zero-window
//! probe (an ACK one byte behind), new segments within the peer's and the congestion window (the FIN riding on the
//! last), or a bare ACK when one is owed.

use super::types::{Transmit, TxState};
use super::{TcpSender, RTO_MAX_US};
use crate::devmem_tcp::ooo::SackBlocks;
use crate::devmem_tcp::segment::TcpFlags;
use crate::devmem_tcp::types::Reply;

/// The window we announce: this side receives no data, 64 KiB is room for the peer's FIN.
const OUR_WINDOW: u16 = 65535;

/// Our timestamp clock: milliseconds from `now_us`, never 0 (a TSecr of 0 reads as none).
pub(super) fn ts_clock(now_us: u64) -> u32 {
    ((now_us / 1000) as u32).wrapping_add(1)
}

impl TcpSender {
    /// The next segment to send at time `now_us` (microseconds, from any fixed origin; the
    /// same clock as [`TcpSender::on_segment`]), or `None` when nothing is due. Call until
    /// `None` after each segment taken and whenever [`TcpSender::deadline`] passes.
    pub fn poll_transmit(&mut self, now_us: u64) -> Option<Transmit> {
        match self.state {
            TxState::Idle | TxState::Reset => return None,
            TxState::SynSent => return self.poll_syn(now_us),
            _ => {}
        }
        self.check_timer(now_us);
        if self.retransmit_una {
            self.retransmit_una = false;
            if let Some(t) = self.segment(self.una, self.mss, now_us) {
                return Some(t);
            }
        }
        if self.probe {
            // A zero-window probe as Linux's `tcp_xmit_probe_skb` sends it: no data, the
            // sequence number one before the oldest unacknowledged byte, so the peer answers
            // with its window and nothing sent needs sending again.
            self.probe = false;
            self.ack_owed = false;
            self.stats.window_probes += 1;
            let seq = self.seq(self.una).0.wrapping_sub(1);
            return Some(self.bare(TcpFlags::ACK, seq, now_us));
        }
        if let Some(t) = self.next_new(now_us) {
            return Some(t);
        }
        if self.ack_owed {
            self.ack_owed = false;
            return Some(self.bare(TcpFlags::ACK, self.seq(self.nxt).0, now_us));
        }
        None
    }

    fn poll_syn(&mut self, now_us: u64) -> Option<Transmit> {
        let due = self.syn_tries == 0 || self.deadline.is_some_and(|d| now_us >= d);
        if !due {
            return None;
        }
        if self.syn_tries > 0 {
            self.rto = (self.rto * 2).min(RTO_MAX_US);
        }
        self.syn_tries += 1;
        self.syn_sent_at = now_us;
        self.deadline = Some(now_us + self.rto);
        let mut t = self.bare(TcpFlags::SYN, self.cfg.iss, now_us);
        t.header.ack = 0;
        t.header.mss = Some(self.cfg.mss);
        // Shift 0: we scale nothing, but the offer lets the peer scale its window.
        t.header.window_scale = Some(0);
        t.header.sack_permitted = true;
        t.header.tsecr = Some(0);
        Some(t)
    }

    /// Fires the retransmission or persist timer when `now_us` passed it.
    fn check_timer(&mut self, now_us: u64) {
        let waiting = self.nxt < self.end || (self.fin_end().is_some() && self.nxt <= self.end);
        if self.deadline.is_none() && self.wnd == 0 && self.una == self.max && waiting {
            // Persist timer: nothing in flight and a closed window.
            self.deadline = Some(now_us + self.rto);
        }
        let Some(deadline) = self.deadline else {
            return;
        };
        if now_us < deadline {
            return;
        }
        let mss = u64::from(self.mss);
        if self.una < self.max {
            self.stats.timeouts += 1;
            self.ssthresh = (self.flight() / 2).max(2 * mss);
            self.cwnd = mss;
            self.nxt = self.una;
            self.recover = None;
            self.dupacks = 0;
        }
        if self.wnd == 0 {
            self.probe = true;
        }
        self.rto = (self.rto * 2).min(RTO_MAX_US);
        self.deadline = Some(now_us + self.rto);
    }

    /// The next new (or, after going back, next again) segment the windows allow.
    fn next_new(&mut self, now_us: u64) -> Option<Transmit> {
        let fin_pending = self.fin_end().is_some_and(|fin| self.nxt < fin);
        if self.nxt >= self.end && !fin_pending {
            return None;
        }
        if self.nxt >= self.end {
            return self.segment(self.nxt, 0, now_us);
        }
        let in_flight = self.nxt - self.una;
        let room = self.wnd.min(self.cwnd).saturating_sub(in_flight);
        let mss = u64::from(self.mss);
        // With LSO, whole segments up to the limit in one transmit.
        let most = (u64::from(self.cfg.lso_max_bytes) / mss * mss).max(mss);
        let want = (self.end - self.nxt).min(most);
        let mut len = want.min(room);
        if len > mss {
            len -= len % mss;
        }
        // Sender-side silly window avoidance (RFC 1122 §4.2.3.4): a short segment only when
        // it is all there is, or nothing is in flight.
        if len == 0 || (len < want.min(mss) && len < mss / 2 && in_flight > 0) {
            return None;
        }
        self.segment(self.nxt, len as u32, now_us)
    }

    /// The segment at stream offset `off` of at most `most` payload bytes (and the range it
    /// lies in; more than the MSS only for the device to segment), with the FIN when it ends
    /// the stream after close. Advances `nxt` when sent from it, `max`, the counters, and arms
    /// the timer.
    fn segment(&mut self, off: u64, most: u32, now_us: u64) -> Option<Transmit> {
        let (offset, len) = if off < self.end {
            let r = *self.range_at(off)?;
            let len = (r.start + r.len - off).min(u64::from(most.max(1)));
            (r.offset + (off - r.start), len as u32)
        } else {
            (0, 0)
        };
        let end = off + u64::from(len);
        let fin = self.fin_end().is_some_and(|_| end == self.end);
        if len == 0 && !fin {
            return None;
        }
        let mut flags = TcpFlags::ACK;
        if fin {
            flags = flags | TcpFlags::FIN;
        }
        if len > 0 && end == self.end {
            flags = flags | TcpFlags::PSH;
        }
        let mut t = self.bare(flags, self.seq(off).0, now_us);
        t.offset = offset;
        t.len = len;
        let past = end + u64::from(fin);
        t.retransmit = off < self.max;
        if len > 0 {
            let segments = u64::from(len.div_ceil(self.mss));
            self.stats.data_segments += segments;
            self.stats.data_bytes += u64::from(len);
            if t.retransmit {
                self.stats.retransmits += segments;
                self.stats.retransmit_bytes += u64::from(len);
            }
        }
        if off == self.nxt {
            self.nxt = past;
        }
        self.max = self.max.max(past);
        if self.deadline.is_none() {
            self.deadline = Some(now_us + self.rto);
        }
        self.ack_owed = false;
        Some(t)
    }

    /// A segment without payload: `flags`, sequence number `seq`, our ACK and window.
    fn bare(&self, flags: TcpFlags, seq: u32, now_us: u64) -> Transmit {
        let synced = self.state != TxState::SynSent;
        Transmit {
            header: Reply {
                flags,
                seq,
                ack: if synced { self.rcv_nxt.0 } else { 0 },
                window: OUR_WINDOW,
                mss: None,
                window_scale: None,
                sack_permitted: false,
                tsecr: self.ts_recent,
                sack: SackBlocks::default(),
            },
            tsval: ts_clock(now_us),
            offset: 0,
            len: 0,
            mss: self.mss as u16,
            retransmit: false,
        }
    }
}
