//! The receiver under an impaired channel (loss, reordering, duplication, resegmented
//! retransmits) and under hostile segments and token returns: no panic, every byte handed out
//! once and from the right place, no buffer lost; and the split parser's cases.

use super::parse::{parse_split, FrameTail, ParseError, SplitFit};
use super::tests::{config, Harness, BUF, ISS};
use super::*;
use crate::test_rng::TestRng;

/// A sender that keeps retransmitting from the last ACK with random segment sizes, through
/// a channel that loses, duplicates and reorders; the application gives tokens back late.
fn impaired_run(seed: u64, isn: u32, total: u32, ooo: u16) {
    let mut rng = TestRng(seed | 1);
    let mut h = Harness::established(config(32, ooo), isn);
    let start = isn.wrapping_add(1);
    let mut in_flight: Vec<(u32, u32)> = Vec::new();
    for _round in 0..20_000 {
        let acked = h.rx.rcv_nxt().wrapping_sub(start);
        if acked >= total {
            break;
        }
        // Send a burst from a random point at or after what was acknowledged (resegmented).
        let mut at = acked.saturating_sub(rng.below(600) as u32);
        for _ in 0..1 + rng.below(6) {
            if at >= total {
                break;
            }
            let len = (1 + rng.below(1448) as u32).min(total - at);
            in_flight.push((at, len));
            at += len
                + if rng.below(8) == 0 {
                    rng.below(3000) as u32
                } else {
                    0
                };
        }
        // Reorder, duplicate, lose.
        while !in_flight.is_empty() {
            let i = rng.below(in_flight.len() as u64) as usize;
            let (off, len) = in_flight.swap_remove(i);
            if rng.below(100) < 10 {
                continue;
            }
            let copies = if rng.below(100) < 5 { 2 } else { 1 };
            for _ in 0..copies {
                let _ = h.data(start.wrapping_add(off), len);
            }
        }
        if rng.below(3) == 0 {
            h.give_all();
        }
    }
    h.give_all();
    assert_eq!(h.delivered, u64::from(total), "every byte once");
    assert_eq!(h.rx.rcv_nxt(), start.wrapping_add(total));
    let mut ev = Vec::new();
    h.rx.abort(&mut |e| ev.push(e));
    for e in ev {
        if let Event::Release { .. } = e {
        } else {
            panic!("unexpected {e:?}");
        }
    }
}

#[test]
fn impaired_channel_delivers_every_byte_once() {
    for seed in 1..12 {
        impaired_run(seed * 7919, seed as u32 * 0x1357_9bdf, 200_000, 16);
    }
    // Across the sequence wrap, and with no out-of-order store at all.
    impaired_run(99, u32::MAX - 50_000, 200_000, 16);
    impaired_run(5, u32::MAX - 1000, 100_000, 0);
}

/// Random segments of every kind (flags, sequence numbers near and far, linear bytes,
/// options, buffers free or not, bad checksums), tokens returned right and wrong.
fn hostile_run(seed: u64) {
    let mut rng = TestRng(seed | 1);
    let isn = rng.next() as u32;
    let mut h = Harness::established(config(16, 8), isn);
    for _ in 0..3000 {
        let near = h.rx.rcv_nxt();
        let seq = match rng.below(4) {
            0 => near.wrapping_add(rng.below(40_000) as u32),
            1 => near.wrapping_sub(rng.below(40_000) as u32),
            2 => rng.next() as u32,
            _ => near,
        };
        let len = rng.below(2000) as u32;
        let linear = if rng.below(5) == 0 {
            rng.below(100) as u32
        } else {
            0
        };
        let Some(mut s) = h.data_seg(seq, linear, len) else {
            h.give_all();
            continue;
        };
        s.flags = TcpFlags(rng.next() as u8 & 0x1f);
        if rng.below(4) != 0 {
            s.flags = s.flags | TcpFlags::ACK;
        }
        s.ack = match rng.below(3) {
            0 => ISS + 1,
            1 => ISS.wrapping_add(rng.next() as u32),
            _ => ISS,
        };
        s.checksum_ok = rng.below(20) != 0;
        s.options.timestamp = match rng.below(3) {
            0 => None,
            1 => Some((rng.next() as u32, 0)),
            _ => Some((1000 + rng.below(100) as u32, 0)),
        };
        s.options.truncated = rng.below(10) == 0;
        // Now and then name a buffer that is not the device's (lent, or past the count), or
        // bytes outside the buffer named.
        let lent = h.lent.values().next().copied();
        if let (Some(d), 0) = (s.payload.dmabuf.as_mut(), rng.below(10)) {
            match (rng.below(3), lent) {
                (0, Some(b)) => d.buffer = b,
                (0, None) => d.buffer = 16 + rng.below(40) as u32,
                (1, _) => d.offset = u64::from(d.buffer + 1) * u64::from(BUF) + rng.below(1 << 20),
                _ => d.len = BUF + rng.next() as u32 % (u32::MAX - BUF),
            }
        }
        let before = (h.rx.buffers_held(), h.rx.tokens_lent(), h.rx.rcv_nxt());
        if h.feed(&s).is_err() {
            assert_eq!(
                before,
                (h.rx.buffers_held(), h.rx.tokens_lent(), h.rx.rcv_nxt())
            );
        }
        match rng.below(6) {
            0 => h.give_all(),
            1 => {
                let t = rng.next() as u32;
                let n = rng.below(2000) as u32;
                let mut ev = Vec::new();
                if h.rx.give_back(t, n, &mut |e| ev.push(e)).is_ok() {
                    // Only a range of tokens all lent can pass.
                    for i in 0..n {
                        assert!(h.lent.remove(&t.wrapping_add(i)).is_some());
                    }
                    h.take_events(ev);
                } else {
                    assert!(ev.is_empty());
                }
            }
            _ => {}
        }
        h.check_invariants();
        if h.rx.state() == TcpState::Closed {
            break;
        }
    }
    h.give_all();
    let mut ev = Vec::new();
    h.rx.abort(&mut |e| ev.push(e));
    h.take_events(ev);
    assert_eq!(h.rx.buffers_on_device(), 16, "no buffer lost");
}

#[test]
fn hostile_segments_never_panic_misdeliver_or_leak() {
    for seed in 1..40 {
        hostile_run(seed * 104_729);
    }
}

#[test]
fn refused_segments_and_tokens_change_nothing() {
    let mut h = Harness::established(config(4, 2), 0);
    h.data(1, 100).unwrap();
    let token = *h.lent.keys().next().unwrap();
    let lent_buffer = h.lent[&token];
    // A segment naming the lent buffer, one past the count, bytes outside the buffer, too long.
    let mut s = h.data_seg(101, 0, 100).unwrap();
    let own = s.payload.dmabuf.unwrap();
    let cases = [
        (
            DmabufPart {
                buffer: lent_buffer,
                ..own
            },
            TcpRxError::BufferNotPosted {
                buffer: lent_buffer,
            },
        ),
        (
            DmabufPart { buffer: 9, ..own },
            TcpRxError::NoSuchBuffer {
                buffer: 9,
                count: 4,
            },
        ),
        (
            DmabufPart {
                offset: own.offset + u64::from(BUF),
                ..own
            },
            TcpRxError::OutsideBuffer {
                buffer: own.buffer,
                offset: own.offset + u64::from(BUF),
                len: 100,
            },
        ),
        (
            DmabufPart {
                len: u32::MAX,
                ..own
            },
            TcpRxError::OutsideBuffer {
                buffer: own.buffer,
                offset: own.offset,
                len: u32::MAX,
            },
        ),
    ];
    for (part, err) in cases {
        s.payload.dmabuf = Some(part);
        assert_eq!(h.feed(&s), Err(err));
    }
    s.payload.dmabuf = Some(own);
    s.payload.linear = MAX_LINEAR + 1;
    assert!(matches!(h.feed(&s), Err(TcpRxError::SegmentTooLong { .. })));
    assert_eq!(h.rx.rcv_nxt(), 101);
    // Tokens: one not lent, a range running past the lent one, too many, twice.
    let mut sink = |_e: Event| panic!("a refused give-back releases nothing");
    assert_eq!(
        h.rx.give_back(token ^ 1, 1, &mut sink),
        Err(TcpRxError::TokenNotLent { token: token ^ 1 })
    );
    assert_eq!(
        h.rx.give_back(token, 2, &mut sink),
        Err(TcpRxError::TokenNotLent { token: token + 1 })
    );
    assert!(matches!(
        h.rx.give_back(token, 1025, &mut sink),
        Err(TcpRxError::TooManyTokens { .. })
    ));
    assert_eq!(h.rx.tokens_lent(), 1);
    h.give_all();
    let mut sink = |_e: Event| panic!("a refused give-back releases nothing");
    assert_eq!(
        h.rx.give_back(token, 1, &mut sink),
        Err(TcpRxError::TokenNotLent { token })
    );
    // The same buffer lent again: the old token (earlier lap) is still refused.
    for i in 0..4 {
        h.data(101 + i * 10, 10).unwrap();
    }
    assert_eq!(
        h.rx.give_back(token, 1, &mut sink),
        Err(TcpRxError::TokenNotLent { token })
    );
    assert_eq!(h.rx.stats().bad_token_returns, 5);
}

#[test]
fn injected_rsts_with_wrong_sequence_numbers_never_close() {
    let mut h = Harness::established(config(8, 4), 77);
    let mut rng = TestRng(3);
    h.data(78, 500).unwrap();
    for _ in 0..10_000 {
        let mut rst = h.ack_seg(rng.next() as u32);
        if rst.seq == h.rx.rcv_nxt() {
            continue;
        }
        rst.flags = TcpFlags::RST | TcpFlags(rng.next() as u8 & 0x10);
        let v = h.feed(&rst).unwrap();
        assert!(matches!(
            v.outcome,
            Outcome::ResetChallenged | Outcome::ResetIgnored
        ));
    }
    assert_eq!(h.rx.state(), TcpState::Established);
    assert_eq!(h.resets, 0);
}

#[test]
fn many_tiny_out_of_order_pieces_stay_bounded() {
    let mut h = Harness::established(config(64, 8), 0);
    // Every other byte, far ahead: the store keeps 8 pieces and 8 SACK-able runs at most.
    for i in 0..200u32 {
        let _ = h.data(1000 + 2 * i, 1);
        assert!(h.rx.buffers_held() <= 8);
        assert!(h.rx.sack_blocks().as_slice().len() <= 3);
        h.check_invariants();
    }
    // Bytes far past the window are refused.
    let far = h.data(1 + (1 << 30), 100).unwrap();
    assert_eq!(far.outcome, Outcome::OutsideWindow);
    h.data(1, 999).unwrap();
    assert_eq!(h.delivered, 1000);
}

// --- The split parser (docs/devmem-tcp.md §3). ---

/// An IPv4 TCP frame's headers with `opts` option bytes and `payload` payload bytes.
fn frame4(opts: usize, payload: usize) -> Vec<u8> {
    let tcp = 20 + opts;
    let mut f = vec![0u8; 12];
    f.extend_from_slice(&[0x08, 0x00]);
    let total = (20 + tcp + payload) as u16;
    f.extend_from_slice(&[
        0x45,
        0,
        (total >> 8) as u8,
        total as u8,
        0,
        0,
        0x40,
        0,
        64,
        6,
        0,
        0,
    ]);
    f.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
    f.extend_from_slice(&5201u16.to_be_bytes());
    f.extend_from_slice(&40000u16.to_be_bytes());
    f.extend_from_slice(&1000u32.to_be_bytes());
    f.extend_from_slice(&(ISS + 1).to_be_bytes());
    f.extend_from_slice(&[((tcp / 4) as u8) << 4, 0x18, 0x01, 0x00, 0, 0, 0, 0]);
    let mut o = Vec::new();
    if opts >= 12 {
        o.extend_from_slice(&[1, 1, 8, 10, 0, 0, 0, 9, 0, 0, 0, 3]);
    }
    o.resize(opts, 1);
    f.extend_from_slice(&o);
    f.resize(f.len() + payload, 0xee);
    f
}

/// Splits `frame` at `h` as the device does: the header buffer and the tail.
fn split(frame: &[u8], h: usize) -> (&[u8], Option<FrameTail>) {
    let n = h.min(frame.len());
    let tail = (frame.len() > h).then(|| FrameTail {
        buffer: 3,
        offset: 3 * u64::from(BUF),
        len: (frame.len() - h) as u32,
    });
    (&frame[..n], tail)
}

#[test]
fn split_at_the_header_length_is_exact() {
    let f = frame4(12, 1000);
    let (hdr, tail) = split(&f, 66);
    let s = parse_split(hdr, tail, true).unwrap();
    assert_eq!((s.headers_len, s.fit), (66, SplitFit::Exact));
    assert_eq!(s.segment.payload.linear, 0);
    assert_eq!(
        s.segment.payload.dmabuf,
        Some(DmabufPart {
            buffer: 3,
            offset: 3 * u64::from(BUF),
            len: 1000
        })
    );
    assert_eq!(s.segment.options.timestamp, Some((9, 3)));
    assert_eq!(
        (s.segment.seq, s.segment.flags),
        (1000, TcpFlags::PSH | TcpFlags::ACK)
    );
    assert_eq!((s.src_port, s.dst_port), (5201, 40000));
}

#[test]
fn shorter_headers_leave_linear_payload_and_longer_ones_unread_options() {
    // No timestamps (54-byte headers) on a 66-byte split: 12 payload bytes in host memory.
    let f = frame4(0, 1000);
    let (hdr, tail) = split(&f, 66);
    let s = parse_split(hdr, tail, true).unwrap();
    assert_eq!(s.fit, SplitFit::Linear(12));
    assert_eq!(s.segment.payload.linear, 12);
    assert_eq!(s.segment.payload.dmabuf.unwrap().len, 988);
    // Timestamps plus a SACK block (78-byte headers): 12 option bytes in the dmabuf, unread;
    // the payload starts 12 bytes into the buffer.
    let f = frame4(24, 1000);
    let (hdr, tail) = split(&f, 66);
    let s = parse_split(hdr, tail, true).unwrap();
    assert_eq!(s.fit, SplitFit::OptionsInDmabuf(12));
    assert!(s.segment.options.truncated);
    assert_eq!(
        s.segment.options.timestamp,
        Some((9, 3)),
        "options inside the split are read"
    );
    let d = s.segment.payload.dmabuf.unwrap();
    assert_eq!((d.offset, d.len), (3 * u64::from(BUF) + 12, 1000));
    // A 1-byte segment padded to 60 bytes ends in the header buffer: one linear byte.
    let mut f = frame4(0, 1);
    f.resize(60, 0);
    let (hdr, tail) = split(&f, 66);
    let s = parse_split(hdr, tail, true).unwrap();
    assert_eq!(
        (s.segment.payload.linear, s.segment.payload.dmabuf),
        (1, None)
    );
}

#[test]
fn unreadable_or_inconsistent_headers_are_refused() {
    let f = frame4(12, 100);
    let (hdr, tail) = split(&f, 40);
    assert_eq!(
        parse_split(hdr, tail, true).unwrap_err(),
        ParseError::HeadersPastSplit { need: 54, have: 40 }
    );
    let mut g = f.clone();
    g[16] = 0x7f; // IP length past the frame
    let (hdr, tail) = split(&g, 66);
    assert!(matches!(
        parse_split(hdr, tail, true),
        Err(ParseError::Truncated { .. })
    ));
    let mut g = f.clone();
    g[14 + 20 + 12] = 0x30; // data offset 12
    let (hdr, tail) = split(&g, 66);
    assert_eq!(
        parse_split(hdr, tail, true).unwrap_err(),
        ParseError::BadLength
    );
    let mut g = f.clone();
    g[14 + 6] = 0x20; // more fragments
    let (hdr, tail) = split(&g, 66);
    assert_eq!(
        parse_split(hdr, tail, true).unwrap_err(),
        ParseError::Fragment
    );
    let mut g = f;
    g[14 + 9] = 17;
    let (hdr, tail) = split(&g, 66);
    assert_eq!(
        parse_split(hdr, tail, true).unwrap_err(),
        ParseError::NotTcp
    );
}

#[test]
fn random_header_bytes_never_panic_the_parser() {
    let mut rng = TestRng(11);
    let base = frame4(12, 200);
    for _ in 0..200_000 {
        let mut f = base.clone();
        for _ in 0..1 + rng.below(6) {
            let i = rng.below(f.len() as u64) as usize;
            f[i] = rng.next() as u8;
        }
        let cut = rng.below(f.len() as u64 + 1) as usize;
        let at = rng.below(130) as usize;
        let (hdr, tail) = split(&f[..cut], at);
        if let Ok(s) = parse_split(hdr, tail, true) {
            let p = s.segment.payload;
            // The dmabuf part always lies inside the tail.
            if let (Some(d), Some(t)) = (p.dmabuf, tail) {
                assert!(
                    d.offset >= t.offset
                        && d.offset + u64::from(d.len) <= t.offset + u64::from(t.len)
                );
            }
            assert!(p.linear as usize <= hdr.len());
        }
    }
}
