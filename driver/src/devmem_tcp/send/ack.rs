//! What a segment from the peer does to the sender: the SYN-ACK, ACKs (new data acknowledged,
//! duplicates, partial ACKs in recovery, ACKs of bytes never sent), window updates, the peer's
//! FIN, RST and SYN. Every number in it is the peer's and untrusted.

use super::types::{TxOutcome, TxState};
use super::{TcpSender, MAX_SEND_WINDOW, RTO_MAX_US};
use crate::devmem_tcp::segment::{Segment, TcpFlags};
use crate::devmem_tcp::seq::Seq;

impl TcpSender {
    /// Takes one segment from the peer at time `now_us` (microseconds, the clock
    /// [`TcpSender::poll_transmit`] reads); what it calls for goes out at the next
    /// [`TcpSender::poll_transmit`].
    pub fn on_segment(&mut self, s: &Segment, now_us: u64) -> TxOutcome {
        self.stats.segments_in += 1;
        if !s.checksum_ok {
            self.stats.bad_checksum += 1;
            return TxOutcome::BadChecksum;
        }
        match self.state {
            TxState::Idle | TxState::Reset => TxOutcome::Ignored,
            TxState::SynSent => self.on_syn_sent(s, now_us),
            _ => self.on_synchronised(s, now_us),
        }
    }

    /// RFC 793 §3.9 SYN-SENT: an RST counts only with an ACK of our SYN, the SYN-ACK must
    /// acknowledge exactly our SYN.
    fn on_syn_sent(&mut self, s: &Segment, now_us: u64) -> TxOutcome {
        let syn_acked = s.flags.has(TcpFlags::ACK) && Seq(s.ack) == Seq(self.cfg.iss).plus(1);
        if s.flags.has(TcpFlags::RST) {
            if syn_acked {
                self.reset();
                return TxOutcome::Reset;
            }
            return TxOutcome::ResetIgnored;
        }
        if !(syn_acked && s.flags.has(TcpFlags::SYN)) {
            return TxOutcome::Ignored;
        }
        let o = &s.options;
        // RFC 9293 §3.7.1: without the option the peer takes 536 bytes.
        let peer_mss = u32::from(o.mss.unwrap_or(536)).max(64);
        self.mss = self.mss.min(peer_mss);
        // Scaling holds only when both offered it (RFC 7323 §2.2); we always offer it.
        self.snd_shift = o.window_scale.unwrap_or(0).min(14);
        self.sack_ok = o.sack_permitted;
        self.ts_recent = o.timestamp.map(|(tsval, _)| tsval);
        self.rcv_nxt = Seq(s.seq).plus(1);
        // The window of a SYN is never scaled.
        self.wnd = u64::from(s.window);
        self.wl1 = Seq(s.seq);
        self.wl2 = Seq(s.ack);
        self.cwnd = u64::from(self.cfg.cwnd_initial_segments) * u64::from(self.mss);
        if self.syn_tries == 1 {
            self.rtt_sample(now_us.saturating_sub(self.syn_sent_at));
        }
        self.rto = self.rto_from_srtt();
        self.deadline = None;
        self.state = if self.fin_asked {
            TxState::Closing
        } else {
            TxState::Established
        };
        self.ack_owed = true;
        TxOutcome::Established
    }

    fn on_synchronised(&mut self, s: &Segment, now_us: u64) -> TxOutcome {
        // This side takes no data, so its window is a fixed 64 KiB for RST checks.
        if s.flags.has(TcpFlags::RST) {
            let seq = Seq(s.seq);
            if seq == self.rcv_nxt {
                self.reset();
                return TxOutcome::Reset;
            }
            if seq.within(self.rcv_nxt, 65535) {
                self.challenge();
                return TxOutcome::ResetChallenged;
            }
            return TxOutcome::ResetIgnored;
        }
        if s.flags.has(TcpFlags::SYN) {
            self.challenge();
            return TxOutcome::SynChallenged;
        }
        if !s.flags.has(TcpFlags::ACK) {
            return TxOutcome::Ignored;
        }
        if let (Some(recent), Some((tsval, _))) = (self.ts_recent, s.options.timestamp) {
            if Seq(recent).le(Seq(tsval)) {
                self.ts_recent = Some(tsval);
            }
        }
        let outcome = self.on_ack(s, now_us);
        if outcome == TxOutcome::AckBeyondSent {
            return outcome;
        }
        let len = s.payload.len();
        if len > 0 {
            // Nothing is received on this side: the bytes are left unacknowledged.
            self.ack_owed = true;
            return TxOutcome::DataRefused;
        }
        if s.flags.has(TcpFlags::FIN) {
            if Seq(s.seq) == self.rcv_nxt && !self.peer_fin {
                self.rcv_nxt = self.rcv_nxt.plus(1);
                self.peer_fin = true;
                self.ack_owed = true;
                return TxOutcome::PeerFin;
            }
            if self.peer_fin && Seq(s.seq).plus(1) == self.rcv_nxt {
                // The FIN again: our ACK of it was lost.
                self.ack_owed = true;
            }
        }
        outcome
    }

    /// The ACK field and window of a synchronised segment (RFC 793 §3.9, RFC 5681, RFC 6582).
    fn on_ack(&mut self, s: &Segment, now_us: u64) -> TxOutcome {
        let ack = Seq(s.ack);
        let una = self.seq(self.una);
        let diff = ack.diff(una);
        let outstanding = self.max - self.una;
        if diff < 0 {
            return TxOutcome::Old;
        }
        if diff as u64 > outstanding {
            self.stats.acks_beyond_sent += 1;
            self.ack_owed = true;
            return TxOutcome::AckBeyondSent;
        }
        let window = (u64::from(s.window) << self.snd_shift).min(MAX_SEND_WINDOW);
        let seq = Seq(s.seq);
        let window_changed = window != self.wnd;
        if self.wl1.lt(seq) || (self.wl1 == seq && self.wl2.le(ack)) {
            self.wnd = window;
            self.wl1 = seq;
            self.wl2 = ack;
        }
        if diff == 0 {
            if outstanding == 0 || !s.payload.is_empty() || s.flags.has(TcpFlags::FIN) {
                return TxOutcome::Old;
            }
            // What the peer holds past the hole (RFC 6675's IsLost: more than DupThresh - 1
            // segments SACKed above it), counted even when the window moved with the ACK.
            let sacked = self.sacked_above_una(s);
            let mss = u64::from(self.mss);
            if window_changed && sacked == 0 {
                return TxOutcome::Old;
            }
            self.stats.duplicate_acks += 1;
            self.dupacks += 1;
            if self.recover.is_some() {
                // Each further duplicate: a segment left the network (RFC 5681 §3.2 step 4).
                self.cwnd = (self.cwnd + mss).min(self.cwnd_max());
                return TxOutcome::Duplicate;
            }
            if self.dupacks >= 3 || sacked >= 3 * mss {
                self.ssthresh = (self.flight() / 2).max(2 * mss);
                self.cwnd = (self.ssthresh + 3 * mss).min(self.cwnd_max());
                self.recover = Some(self.max);
                self.retransmit_una = true;
                self.stats.fast_retransmits += 1;
                return TxOutcome::FastRetransmit;
            }
            return TxOutcome::Duplicate;
        }
        let acked = diff as u64;
        let old_una = self.una;
        self.una += acked;
        if self.nxt < self.una {
            self.nxt = self.una;
        }
        self.stats.acked_bytes += self.una.min(self.end) - old_una.min(self.end);
        self.dupacks = 0;
        self.probe = false;
        let mss = u64::from(self.mss);
        match self.recover {
            Some(recover) if self.una < recover => {
                // A partial ACK: the next hole goes at once, the window deflates by what left.
                self.retransmit_una = true;
                self.stats.partial_ack_retransmits += 1;
                self.cwnd = self.cwnd.saturating_sub(acked).max(mss) + mss;
            }
            Some(_) => {
                self.recover = None;
                self.cwnd = self.ssthresh.min(self.flight().max(mss) + mss);
            }
            None if self.cwnd < self.ssthresh => {
                // Slow start counting bytes acknowledged, at most two segments an ACK
                // (RFC 3465, L = 2 SMSS), so a delayed ACK of two segments grows it by two.
                self.cwnd = (self.cwnd + acked.min(2 * mss)).min(self.cwnd_max());
            }
            None => {
                let grow = (mss * mss / self.cwnd.max(1)).max(1);
                self.cwnd = (self.cwnd + grow).min(self.cwnd_max());
            }
        }
        if let Some((_, tsecr)) = s.options.timestamp.filter(|_| self.ts_recent.is_some()) {
            let now_ms = super::transmit::ts_clock(now_us);
            let rtt_ms = now_ms.wrapping_sub(tsecr);
            // A TSecr from the future, or older than the longest timeout, is no sample.
            if tsecr != 0 && u64::from(rtt_ms) * 1000 <= RTO_MAX_US {
                self.rtt_sample(u64::from(rtt_ms) * 1000);
            }
        }
        self.rto = self.rto_from_srtt();
        self.deadline = (self.una < self.max).then_some(now_us + self.rto);
        self.complete_acked();
        if self.fin_end().is_some_and(|fin| self.una >= fin) {
            self.state = TxState::FinAcked;
            self.deadline = None;
        }
        TxOutcome::Acked
    }

    /// Bytes of SACK blocks of `s` that lie between the oldest unacknowledged byte and the
    /// highest sent (blocks outside, or reversed, count nothing: the peer's numbers).
    fn sacked_above_una(&self, s: &Segment) -> u64 {
        let (una, top) = (self.seq(self.una), self.seq(self.max));
        let span = (self.max - self.una) as u32;
        s.options
            .sack
            .as_slice()
            .iter()
            .map(|b| {
                let (left, right) = (Seq(b.left), Seq(b.right));
                let inside = |x: Seq| x.diff(una) > 0 && x.le(top);
                if left.lt(right) && inside(left) && inside(right) && right.diff(una) as u32 <= span
                {
                    u64::from(right.diff(left) as u32)
                } else {
                    0
                }
            })
            .sum()
    }

    /// RFC 6298 §2.2-2.3, with `rtt_us` measured.
    fn rtt_sample(&mut self, rtt_us: u64) {
        match self.srtt {
            None => {
                self.srtt = Some(rtt_us);
                self.rttvar = rtt_us / 2;
            }
            Some(srtt) => {
                self.rttvar = (3 * self.rttvar + srtt.abs_diff(rtt_us)) / 4;
                self.srtt = Some((7 * srtt + rtt_us) / 8);
            }
        }
    }

    /// The timeout the estimate gives (RFC 6298 §2.3, clock granularity 1 ms), within
    /// `rto_min_us..=60 s`; the initial one before any sample.
    pub(super) fn rto_from_srtt(&self) -> u64 {
        match self.srtt {
            Some(srtt) => {
                (srtt + (4 * self.rttvar).max(1000)).clamp(self.cfg.rto_min_us, RTO_MAX_US)
            }
            None => self.cfg.rto_initial_us,
        }
    }

    /// Bytes sent and not acknowledged (RFC 5681's FlightSize), whatever went back since.
    pub(super) fn flight(&self) -> u64 {
        self.max - self.una
    }

    pub(super) fn cwnd_max(&self) -> u64 {
        u64::from(self.cfg.cwnd_max_segments) * u64::from(self.mss)
    }

    fn challenge(&mut self) {
        self.stats.challenge_acks += 1;
        self.ack_owed = true;
    }

    fn reset(&mut self) {
        self.state = TxState::Reset;
        self.deadline = None;
        self.ack_owed = false;
        self.retransmit_una = false;
    }
}
