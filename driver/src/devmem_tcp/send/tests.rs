//! The sender's state machine: handshake, segmentation within the windows, completions only
//! once acknowledged, retransmission on timeout and on the third duplicate ACK from the same
//! dmabuf ranges, FIN both ways, and hostile peers (ACKs of unsent bytes, window abuse, RST,
//! SYN, bad checksums).

use super::*;
use crate::devmem_tcp::segment::{Segment, TcpFlags, TcpOptions};

const PEER_ISS: u32 = 7000;
const MS: u64 = 1000;

fn cfg(iss: u32) -> TxConfig {
    TxConfig {
        iss,
        mss: 1000,
        rto_min_us: 10 * MS,
        rto_initial_us: 100 * MS,
        cwnd_max_segments: 64,
        cwnd_initial_segments: 4,
        max_ranges: 8,
        lso_max_bytes: 0,
    }
}

fn ack_seg(ack: u32, window: u16) -> Segment {
    Segment {
        seq: PEER_ISS + 1,
        ack,
        flags: TcpFlags::ACK,
        window,
        options: TcpOptions {
            timestamp: Some((100, 0)),
            ..TcpOptions::default()
        },
        checksum_ok: true,
        ..Segment::default()
    }
}

/// A sender through its handshake (peer MSS 1000, window 65535 << 4, timestamps, SACK).
fn established(iss: u32) -> TcpSender {
    let mut s = TcpSender::new(cfg(iss)).unwrap();
    s.connect().unwrap();
    let syn = s.poll_transmit(0).unwrap();
    assert_eq!(syn.header.flags, TcpFlags::SYN);
    assert_eq!(syn.header.seq, iss);
    assert_eq!(syn.header.mss, Some(1000));
    assert_eq!(syn.header.window_scale, Some(0));
    assert!(syn.header.sack_permitted);
    assert_eq!(syn.header.tsecr, Some(0));
    assert_eq!(syn.len, 0);
    assert!(s.poll_transmit(1).is_none(), "one SYN until its timer");
    let syn_ack = Segment {
        seq: PEER_ISS,
        ack: iss.wrapping_add(1),
        flags: TcpFlags::SYN | TcpFlags::ACK,
        window: 65535,
        options: TcpOptions {
            mss: Some(1460),
            window_scale: Some(4),
            sack_permitted: true,
            timestamp: Some((50, 1)),
            truncated: false,
            ..Default::default()
        },
        checksum_ok: true,
        ..Segment::default()
    };
    assert_eq!(s.on_segment(&syn_ack, 2 * MS), TxOutcome::Established);
    assert_eq!(s.state(), TxState::Established);
    assert_eq!(s.mss(), 1000, "the smaller MSS");
    let ack = s.poll_transmit(2 * MS).unwrap();
    assert_eq!(ack.header.flags, TcpFlags::ACK);
    assert_eq!(ack.header.ack, PEER_ISS + 1);
    assert_eq!(ack.header.tsecr, Some(50));
    // A window update opens the scaled window.
    s.on_segment(&ack_seg(iss.wrapping_add(1), 65535), 2 * MS);
    assert_eq!(s.window(), 65535 << 4);
    s
}

/// Every transmit due at `now`.
fn drain(s: &mut TcpSender, now: u64) -> Vec<Transmit> {
    std::iter::from_fn(|| s.poll_transmit(now)).collect()
}

#[test]
fn segments_follow_the_ranges_and_the_windows_and_complete_only_when_acknowledged() {
    let iss = 1000;
    let mut s = established(iss);
    s.queue(4096, 2500).unwrap();
    s.queue(100_000, 3000).unwrap();
    let out = drain(&mut s, 3 * MS);
    // Initial congestion window: 4000 bytes; a segment never spans two ranges.
    let shape: Vec<_> = out
        .iter()
        .map(|t| (t.offset, t.len, t.header.seq))
        .collect();
    assert_eq!(
        shape,
        [
            (4096, 1000, iss + 1),
            (5096, 1000, iss + 1001),
            (6096, 500, iss + 2001),
            (100_000, 1000, iss + 2501),
            (101_000, 500, iss + 3501),
        ]
    );
    assert!(out
        .iter()
        .all(|t| t.header.flags.has(TcpFlags::ACK) && !t.retransmit));
    // Acknowledging part of the first range completes nothing.
    s.on_segment(&ack_seg(iss + 1 + 2000, 65535), 4 * MS);
    assert_eq!(s.take_completion(), None);
    s.on_segment(&ack_seg(iss + 1 + 2500, 65535), 4 * MS);
    assert_eq!(
        s.take_completion(),
        Some(Completion {
            offset: 4096,
            len: 2500
        })
    );
    assert_eq!(s.take_completion(), None);
    // The rest, the last segment with PSH.
    let out = drain(&mut s, 5 * MS);
    assert_eq!(out.iter().map(|t| t.len).sum::<u32>(), 1500);
    assert!(out.last().unwrap().header.flags.has(TcpFlags::PSH));
    s.on_segment(&ack_seg(iss + 1 + 5500, 65535), 6 * MS);
    assert_eq!(s.take_completion().map(|c| c.offset), Some(100_000));
    assert_eq!(s.acked(), 5500);
    assert_eq!(s.deadline(), None, "nothing in flight, no timer");
}

#[test]
fn with_lso_new_data_goes_in_whole_segments_per_transmit_and_retransmissions_in_one() {
    let iss = 300;
    let mut s = TcpSender::new(TxConfig {
        lso_max_bytes: 8500,
        ..cfg(iss)
    })
    .unwrap();
    s.connect().unwrap();
    s.poll_transmit(0).unwrap();
    let mut syn_ack = ack_seg(iss + 1, 65535);
    syn_ack.seq = PEER_ISS;
    syn_ack.flags = TcpFlags::SYN | TcpFlags::ACK;
    syn_ack.options.mss = Some(1000);
    syn_ack.options.window_scale = Some(4);
    s.on_segment(&syn_ack, MS);
    s.poll_transmit(MS).unwrap();
    s.on_segment(&ack_seg(iss + 1, 65535), MS);
    s.queue(0, 30_500).unwrap();
    // The initial congestion window (4000 bytes) in one transmit of four segments.
    let t = drain(&mut s, 2 * MS);
    assert_eq!(
        t.iter().map(|t| (t.len, t.mss)).collect::<Vec<_>>(),
        [(4000, 1000)]
    );
    assert_eq!(s.stats().data_segments, 4);
    // Slow start: two segments more a window (RFC 3465's limit); then the 8500-byte limit
    // rounds down to whole segments.
    s.on_segment(&ack_seg(iss + 1 + 4000, 65535), 3 * MS);
    let t = drain(&mut s, 3 * MS);
    assert_eq!(t.iter().map(|t| t.len).collect::<Vec<_>>(), [6000]);
    for (k, end) in [(0, 10_000), (1, 16_000)] {
        s.on_segment(&ack_seg(iss + 1 + end, 65535), (4 + k) * MS);
        let t = drain(&mut s, (4 + k) * MS);
        assert!(
            t.iter().all(|t| t.len % 1000 == 0 && t.len <= 8000),
            "{t:?}"
        );
    }
    // Three duplicate ACKs: one segment again, not a whole LSO transmit.
    for _ in 0..3 {
        s.on_segment(&ack_seg(iss + 1 + 16_000, 65535), 6 * MS);
    }
    let again = s.poll_transmit(6 * MS).unwrap();
    assert!(again.retransmit);
    assert_eq!((again.offset, again.len), (16_000, 1000));
    // The stream's tail: what is left, one short segment.
    let mut last = None;
    for k in 0..20 {
        let sent = s.seq(s.max).0;
        s.on_segment(&ack_seg(sent, 65535), (7 + k) * MS);
        for t in drain(&mut s, (7 + k) * MS) {
            if t.len > 0 {
                last = Some((t.offset, t.len));
            }
        }
    }
    assert_eq!(last, Some((30_000, 500)));
    assert_eq!(s.acked(), 30_500);
}

#[test]
fn the_peers_window_bounds_what_is_in_flight_and_a_closed_window_is_probed() {
    let mut s = established(1);
    // The peer's window shrinks to 1504 bytes (shift 4: field 94). A 504-byte segment fills
    // it; 488 bytes (field 93) would wait, as silly window avoidance asks.
    s.on_segment(&ack_seg(2, 94), 3 * MS);
    s.queue(0, 10_000).unwrap();
    let out = drain(&mut s, 3 * MS);
    assert_eq!(out.iter().map(|t| t.len).collect::<Vec<_>>(), [1000, 504]);
    // Zero window: nothing more, and the persist timer probes (an ACK one byte behind).
    s.on_segment(&ack_seg(2 + 1504, 0), 4 * MS);
    assert!(drain(&mut s, 4 * MS).is_empty());
    let deadline = s.deadline().expect("persist timer");
    let probe = drain(&mut s, deadline);
    assert_eq!(probe.len(), 1);
    assert_eq!((probe[0].len, probe[0].header.seq), (0, 2 + 1504 - 1));
    assert_eq!(s.stats().window_probes, 1);
    // The window opens: sending resumes where it stopped.
    s.on_segment(&ack_seg(2 + 1504, 1000), deadline + MS);
    let out = drain(&mut s, deadline + MS);
    assert!(!out.is_empty());
    assert_eq!(out[0].offset, 1504);
}

#[test]
fn a_timeout_goes_back_to_the_same_dmabuf_bytes() {
    let mut s = established(50);
    s.queue(8192, 4000).unwrap();
    let first = drain(&mut s, 3 * MS);
    assert_eq!(first.len(), 4);
    // The first segment is acknowledged, the rest lost.
    s.on_segment(&ack_seg(51 + 1000, 65535), 4 * MS);
    assert_eq!(
        drain(&mut s, 4 * MS).len(),
        0,
        "the window holds 3 in flight"
    );
    let deadline = s.deadline().unwrap();
    assert!(drain(&mut s, deadline - 1).is_empty());
    let again = drain(&mut s, deadline);
    assert_eq!(again.len(), 1, "after a timeout the window is one segment");
    assert_eq!(
        (again[0].offset, again[0].len),
        (first[1].offset, first[1].len)
    );
    assert_eq!(again[0].header.seq, first[1].header.seq);
    assert!(again[0].retransmit);
    assert_eq!(s.stats().timeouts, 1);
    assert!(s.rto_us() > 10 * MS, "the timeout backs off");
    // The rest follow in slow start as ACKs come; all of it from the same dmabuf bytes.
    s.on_segment(&ack_seg(51 + 2000, 65535), deadline + MS);
    let more = drain(&mut s, deadline + MS);
    assert_eq!(
        more.iter().map(|t| t.offset).collect::<Vec<_>>(),
        [first[2].offset, first[3].offset]
    );
    s.on_segment(&ack_seg(51 + 4000, 65535), deadline + 2 * MS);
    assert_eq!(
        s.take_completion().map(|c| (c.offset, c.len)),
        Some((8192, 4000))
    );
}

#[test]
fn three_duplicate_acks_retransmit_the_oldest_segment_and_partial_acks_the_next_hole() {
    let iss = u32::MAX - 1500; // across the sequence wrap
    let mut s = established(iss);
    s.queue(0, 20_000).unwrap();
    let mut sent = drain(&mut s, 3 * MS);
    // Grow the window: ACK everything sent so far, twice.
    for round in 0..2 {
        let end = s.seq(s.max).0;
        s.on_segment(&ack_seg(end, 65535), (4 + round) * MS);
        sent = drain(&mut s, (4 + round) * MS);
    }
    assert!(sent.len() >= 6);
    let una = sent[0].header.seq;
    // Segments 0 and 2 lost: duplicate ACKs at the first.
    for k in 0..2 {
        assert_eq!(
            s.on_segment(&ack_seg(una, 65535), 7 * MS),
            TxOutcome::Duplicate,
            "{k}"
        );
    }
    assert_eq!(
        s.on_segment(&ack_seg(una, 65535), 7 * MS),
        TxOutcome::FastRetransmit
    );
    let again = s.poll_transmit(7 * MS).unwrap();
    assert!(again.retransmit);
    assert_eq!((again.offset, again.header.seq), (sent[0].offset, una));
    // A partial ACK up to the second hole: it goes at once.
    let hole = sent[2].header.seq;
    assert_eq!(
        s.on_segment(&ack_seg(hole, 65535), 8 * MS),
        TxOutcome::Acked
    );
    let next = s.poll_transmit(8 * MS).unwrap();
    assert_eq!((next.offset, next.header.seq), (sent[2].offset, hole));
    assert!(next.retransmit);
    let st = s.stats();
    assert_eq!((st.fast_retransmits, st.partial_ack_retransmits), (1, 1));
    assert_eq!(st.duplicate_acks, 3);
}

#[test]
fn sack_blocks_three_segments_past_the_hole_retransmit_at_the_first_duplicate() {
    use crate::devmem_tcp::segment::SackBlock;
    let iss = 77;
    let mut s = established(iss);
    s.queue(0, 4000).unwrap();
    let sent = drain(&mut s, 3 * MS);
    assert_eq!(sent.len(), 4);
    let una = iss + 1;
    // SACK blocks outside what was sent, or reversed, count nothing.
    let mut dup = ack_seg(una, 65535);
    dup.options.sack.push(SackBlock {
        left: una + 5000,
        right: una + 9000,
    });
    dup.options.sack.push(SackBlock {
        left: una + 4000,
        right: una + 1000,
    });
    assert_eq!(s.on_segment(&dup, 4 * MS), TxOutcome::Duplicate);
    // The first segment lost, the other three held by the peer (a window update rides along).
    let mut dup = ack_seg(una, 60000);
    dup.options.sack.push(SackBlock {
        left: una + 1000,
        right: una + 4000,
    });
    assert_eq!(s.on_segment(&dup, 4 * MS), TxOutcome::FastRetransmit);
    let again = s.poll_transmit(4 * MS).unwrap();
    assert_eq!((again.offset, again.len, again.retransmit), (0, 1000, true));
}

#[test]
fn fin_rides_on_the_last_segment_and_both_fins_end_the_connection() {
    let mut s = established(10);
    s.queue(0, 1500).unwrap();
    s.close().unwrap();
    assert!(s.queue(0, 1).is_err(), "nothing after close");
    let out = drain(&mut s, 3 * MS);
    assert_eq!(out.len(), 2);
    assert!(!out[0].header.flags.has(TcpFlags::FIN));
    assert!(out[1].header.flags.has(TcpFlags::FIN | TcpFlags::PSH));
    assert_eq!(s.state(), TxState::Closing);
    // Data acknowledged but not the FIN.
    s.on_segment(&ack_seg(11 + 1500, 65535), 4 * MS);
    assert_eq!(s.state(), TxState::Closing);
    // The FIN is lost: on the timer it goes alone.
    let due = s.deadline().unwrap();
    let fin = drain(&mut s, due);
    assert_eq!(fin.len(), 1);
    assert_eq!((fin[0].len, fin[0].header.seq), (0, 11 + 1500));
    assert!(fin[0].header.flags.has(TcpFlags::FIN));
    s.on_segment(&ack_seg(11 + 1501, 65535), 500 * MS);
    assert_eq!(s.state(), TxState::FinAcked);
    assert!(!s.finished());
    // The peer's FIN, acknowledged.
    let mut peer_fin = ack_seg(11 + 1501, 65535);
    peer_fin.flags = TcpFlags::ACK | TcpFlags::FIN;
    assert_eq!(s.on_segment(&peer_fin, 501 * MS), TxOutcome::PeerFin);
    let ack = s.poll_transmit(501 * MS).unwrap();
    assert_eq!(ack.header.ack, PEER_ISS + 2);
    assert!(s.finished());
    // The FIN again (our ACK lost): acknowledged again.
    s.on_segment(&peer_fin, 502 * MS);
    assert_eq!(s.poll_transmit(502 * MS).unwrap().header.ack, PEER_ISS + 2);
}

#[test]
fn a_syn_is_sent_again_on_its_timer_and_a_stray_segment_does_not_establish() {
    let mut s = TcpSender::new(cfg(5)).unwrap();
    assert!(s.poll_transmit(0).is_none(), "idle sends nothing");
    s.connect().unwrap();
    assert!(s.connect().is_err());
    s.poll_transmit(0).unwrap();
    // A SYN-ACK of another SYN, and an RST not acknowledging ours: ignored.
    let mut wrong = ack_seg(999, 65535);
    wrong.flags = TcpFlags::SYN | TcpFlags::ACK;
    assert_eq!(s.on_segment(&wrong, MS), TxOutcome::Ignored);
    wrong.flags = TcpFlags::RST;
    assert_eq!(s.on_segment(&wrong, MS), TxOutcome::ResetIgnored);
    assert_eq!(s.state(), TxState::SynSent);
    let again = s.poll_transmit(100 * MS).unwrap();
    assert_eq!(again.header.flags, TcpFlags::SYN);
    // An RST acknowledging our SYN: refused connection.
    wrong.flags = TcpFlags::RST | TcpFlags::ACK;
    wrong.ack = 6;
    assert_eq!(s.on_segment(&wrong, 101 * MS), TxOutcome::Reset);
    assert!(s.finished());
    assert!(s.poll_transmit(200 * MS).is_none());
}

#[test]
fn hostile_acks_windows_resets_and_syns_change_nothing_they_should_not() {
    let iss = 0x7fff_fff0;
    let mut s = established(iss);
    s.queue(0, 3000).unwrap();
    let sent = drain(&mut s, 3 * MS);
    assert_eq!(sent.len(), 3);
    let before = (s.acked(), s.stats().completions);
    // ACKs of bytes never sent, just past and far past (and half the sequence space away).
    for ack in [
        iss + 1 + 3001,
        iss.wrapping_add(1 << 30),
        iss.wrapping_add(1 << 31),
    ] {
        assert_eq!(
            s.on_segment(&ack_seg(ack, 65535), 4 * MS),
            TxOutcome::AckBeyondSent
        );
        let reply = s.poll_transmit(4 * MS).unwrap();
        assert_eq!((reply.len, reply.header.flags), (0, TcpFlags::ACK));
    }
    assert_eq!((s.acked(), s.stats().completions), before);
    assert_eq!(s.stats().acks_beyond_sent, 3);
    // An ACK from before the connection: old.
    assert_eq!(
        s.on_segment(&ack_seg(iss - 5000, 65535), 4 * MS),
        TxOutcome::Old
    );
    // The largest window field at the largest shift is capped.
    assert!(s.window() <= MAX_SEND_WINDOW);
    // RST outside the window: ignored; in it but not exact: challenged; bad checksum: dropped.
    let mut rst = ack_seg(iss + 1, 0);
    rst.flags = TcpFlags::RST;
    rst.seq = PEER_ISS.wrapping_add(1 << 20);
    assert_eq!(s.on_segment(&rst, 5 * MS), TxOutcome::ResetIgnored);
    rst.seq = PEER_ISS + 100;
    assert_eq!(s.on_segment(&rst, 5 * MS), TxOutcome::ResetChallenged);
    assert_eq!(s.poll_transmit(5 * MS).unwrap().header.ack, PEER_ISS + 1);
    let mut syn = ack_seg(iss + 1, 65535);
    syn.flags = TcpFlags::SYN;
    assert_eq!(s.on_segment(&syn, 5 * MS), TxOutcome::SynChallenged);
    s.poll_transmit(5 * MS).unwrap();
    let mut bad = ack_seg(iss + 1 + 3000, 65535);
    bad.checksum_ok = false;
    assert_eq!(s.on_segment(&bad, 5 * MS), TxOutcome::BadChecksum);
    assert_eq!(s.acked(), 0);
    // Data from the peer is not taken, and not acknowledged.
    let mut data = ack_seg(iss + 1, 65535);
    data.payload.linear = 10;
    assert_eq!(s.on_segment(&data, 5 * MS), TxOutcome::DataRefused);
    assert_eq!(s.poll_transmit(5 * MS).unwrap().header.ack, PEER_ISS + 1);
    assert_eq!(s.state(), TxState::Established);
    // A TSecr from the future is no RTT sample: the timeout stays sane.
    let mut future = ack_seg(iss + 1 + 1000, 65535);
    future.options.timestamp = Some((101, u32::MAX - 3));
    s.on_segment(&future, 6 * MS);
    assert!(s.rto_us() <= 60_000_000);
    // RST exactly at the peer's next sequence number resets.
    rst.seq = PEER_ISS + 1;
    assert_eq!(s.on_segment(&rst, 7 * MS), TxOutcome::Reset);
    assert_eq!(s.state(), TxState::Reset);
    assert!(s.queue(0, 1).is_err());
    assert!(s.poll_transmit(8 * MS).is_none());
}

#[test]
fn configuration_and_ranges_out_of_bounds_are_refused() {
    assert!(TcpSender::new(TxConfig { mss: 10, ..cfg(0) }).is_err());
    assert!(TcpSender::new(TxConfig {
        rto_min_us: 0,
        ..cfg(0)
    })
    .is_err());
    assert!(TcpSender::new(TxConfig {
        cwnd_initial_segments: 65,
        ..cfg(0)
    })
    .is_err());
    assert!(TcpSender::new(TxConfig {
        max_ranges: 0,
        ..cfg(0)
    })
    .is_err());
    let mut s = TcpSender::new(cfg(0)).unwrap();
    assert_eq!(s.queue(0, 0), Err(TcpTxError::BadRange { len: 0 }));
    assert!(s.queue(u64::MAX, 2).is_err());
    s.queue(0, 1).unwrap();
    assert!(s.queue(0, u64::MAX - 1).is_err(), "a stream past 2^62");
    for k in 1..8 {
        s.queue(k * 10, 10).unwrap();
    }
    assert_eq!(s.queue(0, 10), Err(TcpTxError::TooManyRanges { most: 8 }));
    assert!(s.close().is_err(), "close before connect");
}

#[test]
fn random_hostile_segments_never_break_the_senders_invariants() {
    let mut rng = crate::test_rng::TestRng(0x005e_ed43);
    let (mut acked, mut completed, mut resets) = (0, 0, 0);
    for round in 0..200u64 {
        let iss = rng.next() as u32;
        let mut s = established(iss);
        s.queue(0, 50_000).unwrap();
        let mut now = 3 * MS;
        let mut sent_max = Seq(iss).plus(1);
        for _ in 0..300 {
            now += rng.below(30 * MS);
            while let Some(t) = s.poll_transmit(now) {
                // Every payload lies in the queued range, at most the MSS.
                assert!(t.len <= s.mss());
                assert!(t.offset + u64::from(t.len) <= 50_000);
                let end = Seq(t.header.seq).plus(t.len);
                if sent_max.lt(end) {
                    sent_max = end;
                }
            }
            // A mix of plausible and hostile segments.
            let ack = match rng.below(4) {
                0 => rng.next() as u32,
                1 => sent_max.0.wrapping_sub(rng.below(3000) as u32),
                2 => sent_max.0.wrapping_add(rng.below(3) as u32),
                _ => Seq(iss).plus(1).plus(s.acked() as u32).0,
            };
            let flags = match rng.below(100) {
                0 => TcpFlags::RST,
                1 | 2 => TcpFlags::SYN,
                3 | 4 => TcpFlags::FIN,
                _ => TcpFlags::ACK,
            };
            let seg = Segment {
                seq: PEER_ISS.wrapping_add(1).wrapping_add(rng.below(4) as u32),
                ack,
                flags: flags | TcpFlags::ACK,
                window: rng.next() as u16,
                options: TcpOptions {
                    timestamp: Some((rng.next() as u32, rng.next() as u32)),
                    ..TcpOptions::default()
                },
                checksum_ok: rng.below(10) != 0,
                ..Segment::default()
            };
            let before = s.acked();
            s.on_segment(&seg, now);
            // Nothing acknowledged past what was sent; nothing taken back.
            assert!(s.acked() >= before, "round {round}");
            assert!(
                Seq(iss).plus(1).plus(s.acked() as u32).le(sent_max),
                "round {round}"
            );
            assert!(s.window() <= MAX_SEND_WINDOW);
            assert!(s.rto_us() <= RTO_MAX_US);
            while let Some(c) = s.take_completion() {
                assert_eq!((c.offset, c.len), (0, 50_000));
                assert_eq!(s.acked(), 50_000);
                completed += 1;
            }
            if s.state() == TxState::Reset {
                resets += 1;
                break;
            }
        }
        acked += s.acked();
    }
    // The mix let streams progress, finish and be reset.
    assert!(
        acked > 0 && completed > 0 && resets > 0,
        "{acked} {completed} {resets}"
    );
}
