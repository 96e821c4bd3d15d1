//! A hostile TCP peer (and an impatient application) against the devmem TCP sender: after a
//! handshake whose options come from the input, the input is a list of operations: segments
//! from the peer (ACK numbers at, near or far from what was sent, any flags, windows,
//! timestamps, SACK blocks, payload, a bad checksum now and then), the clock moving on (timers
//! firing), ranges queued (some refused), completions taken, and close; and raw frame bytes
//! through the parser the sender's replies go through.
//!
//! Invariants: no panic; every transmit's payload lies inside one queued range, at most the MSS
//! unless LSO is on, and names the dmabuf bytes of exactly the stream bytes its sequence number
//! says; nothing counts as acknowledged past what was sent, and acknowledged never goes back;
//! completions come in queue order, each a whole range, only once all of it is acknowledged;
//! the window stays within 2^30.

#![no_main]

use cxdirect::devmem_tcp::{
    parse_split, PeerSack, SackBlock, Segment, TcpFlags, TcpOptions, TcpSender, TxConfig, TxState,
    MAX_SEND_WINDOW,
};
use libfuzzer_sys::fuzz_target;
use std::collections::VecDeque;

const ISS: u32 = 0xffff_f000;
const PEER_ISS: u32 = 5000;

/// Input bytes, read as needed (zeros once used up).
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn u8(&mut self) -> u8 {
        let (b, rest) = self.0.split_first().map_or((0, &[][..]), |(b, r)| (*b, r));
        self.0 = rest;
        b
    }
    fn u16(&mut self) -> u16 {
        u16::from(self.u8()) | u16::from(self.u8()) << 8
    }
    fn u32(&mut self) -> u32 {
        u32::from(self.u16()) | u32::from(self.u16()) << 16
    }
}

/// A queued range as the application sees it: dmabuf `offset`, `len` bytes, stream `start`.
#[derive(Clone, Copy)]
struct Queued {
    offset: u64,
    len: u64,
    start: u64,
}

fuzz_target!(|data: &[u8]| {
    let mut inp = Input(data);
    let lso = inp.u8() & 1 == 1;
    let mut s = TcpSender::new(TxConfig {
        iss: ISS,
        mss: 536 + u16::from(inp.u8()) * 4,
        rto_min_us: 1000,
        rto_initial_us: 10_000,
        cwnd_max_segments: 64,
        cwnd_initial_segments: 4,
        max_ranges: 8,
        lso_max_bytes: if lso { 20_000 } else { 0 },
    })
    .unwrap();
    let mut queued: VecDeque<Queued> = VecDeque::new();
    let mut end = 0u64;
    let mut acked = 0u64;
    let mut sent_top = 0u64;
    let mut now = 0u64;
    s.connect().unwrap();
    let syn = s.poll_transmit(now).unwrap();
    assert!(syn.header.flags.has(TcpFlags::SYN));
    let syn_ack = Segment {
        seq: PEER_ISS,
        ack: ISS.wrapping_add(1),
        flags: TcpFlags::SYN | TcpFlags::ACK,
        window: inp.u16(),
        options: TcpOptions {
            mss: Some(inp.u16()),
            window_scale: Some(inp.u8()),
            sack_permitted: true,
            timestamp: Some((inp.u32(), 1)),
            ..TcpOptions::default()
        },
        checksum_ok: true,
        ..Segment::default()
    };
    s.on_segment(&syn_ack, now);
    while !inp.0.is_empty() {
        match inp.u8() % 8 {
            0 | 1 | 2 => {
                // A segment from the peer, its ACK near what was sent.
                let base = ISS.wrapping_add(1).wrapping_add(sent_top as u32);
                let ack = match inp.u8() % 4 {
                    0 => base.wrapping_sub(u32::from(inp.u16())),
                    1 => base.wrapping_add(u32::from(inp.u8() % 4)),
                    2 => ISS.wrapping_add(1).wrapping_add(acked as u32),
                    _ => inp.u32(),
                };
                let mut sack = PeerSack::default();
                for _ in 0..inp.u8() % 5 {
                    let left = base.wrapping_sub(u32::from(inp.u16()));
                    sack.push(SackBlock {
                        left,
                        right: left.wrapping_add(u32::from(inp.u16())),
                    });
                }
                let kind = inp.u8();
                let mut seg = Segment {
                    seq: PEER_ISS
                        .wrapping_add(1)
                        .wrapping_add(u32::from(inp.u8() % 3)),
                    ack,
                    flags: TcpFlags(inp.u8() & 0x1f | 0x10),
                    window: inp.u16(),
                    options: TcpOptions {
                        timestamp: (kind & 1 == 1).then(|| (inp.u32(), inp.u32())),
                        sack,
                        ..TcpOptions::default()
                    },
                    checksum_ok: kind & 2 == 0,
                    ..Segment::default()
                };
                seg.payload.linear = u32::from(kind >> 6);
                s.on_segment(&seg, now);
            }
            3 => now += u64::from(inp.u16()) * 100,
            4 => {
                let offset = u64::from(inp.u32());
                let len = u64::from(inp.u16());
                if s.queue(offset, len).is_ok() {
                    queued.push_back(Queued {
                        offset,
                        len,
                        start: end,
                    });
                    end += len;
                }
            }
            5 => {
                let _ = s.close();
            }
            6 => {
                // Raw bytes through the parser: no panic.
                let n = usize::from(inp.u8());
                let take = n.min(inp.0.len());
                let (frame, rest) = inp.0.split_at(take);
                inp.0 = rest;
                let _ = parse_split(frame, None, true);
            }
            _ => {}
        }
        while let Some(c) = s.take_completion() {
            let q = queued.pop_front().expect("a completion for a queued range");
            assert_eq!((c.offset, c.len), (q.offset, q.len));
            assert!(s.acked() >= q.start + q.len);
        }
        while let Some(t) = s.poll_transmit(now) {
            if t.len == 0 {
                continue;
            }
            let off = u64::from(t.header.seq.wrapping_sub(ISS.wrapping_add(1)));
            let r = queued
                .iter()
                .find(|q| q.start <= off && off < q.start + q.len)
                .expect("a transmit inside a queued range");
            assert!(off + u64::from(t.len) <= r.start + r.len);
            assert_eq!(t.offset, r.offset + (off - r.start));
            assert!(lso || t.len <= u32::from(t.mss));
            sent_top = sent_top.max(off + u64::from(t.len));
        }
        assert!(s.acked() >= acked);
        acked = s.acked();
        assert!(acked <= sent_top);
        assert!(s.window() <= MAX_SEND_WINDOW);
        if s.state() == TxState::Reset {
            break;
        }
    }
});
