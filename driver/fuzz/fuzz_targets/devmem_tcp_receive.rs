//! A hostile TCP peer (and a careless application) against the devmem TCP receiver: after a
//! handshake, the input is a list of operations: segments built from the input (sequence
//! numbers at, near or far from `rcv_nxt`, any flags, ACK numbers, timestamps, linear and
//! dmabuf payload lengths, a bad checksum now and then, a buffer that is lent or past the
//! count, bytes outside the buffer), token ranges given back (lent or not), and raw frame
//! bytes through the split parser.
//!
//! Invariants: no panic; every fragment and linear run continues the stream where the last
//! one ended; a fragment's dmabuf offset is where the device wrote that stream byte; no token
//! is lent twice; a refused call changes nothing; every buffer is the device's, held or lent
//! (none lost); after an abort and every token given back, all buffers are the device's.

#![no_main]

use cxdirect::devmem_tcp::{
    parse_split, DmabufPart, Event, FrameTail, RxConfig, Segment, TcpFlags, TcpOptions,
    TcpReceiver, BUFFER_BITS,
};
use libfuzzer_sys::fuzz_target;
use std::collections::BTreeMap;

const BUFFERS: u32 = 16;
const BUF: u32 = 2048;
const ISS: u32 = 1;

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
    fn bytes(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.0.len());
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        a
    }
}

/// What the device wrote into a buffer: stream byte `seq` at dmabuf offset `offset`.
#[derive(Clone, Copy)]
struct Written {
    seq: u32,
    offset: u64,
    len: u32,
}

struct World {
    rx: TcpReceiver,
    free: Vec<u32>,
    written: BTreeMap<u32, Written>,
    lent: BTreeMap<u32, u32>,
    next: u32,
}

impl World {
    fn event(&mut self, e: Event, linear: u32, seg_seq: u32) {
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
                let into = seq.wrapping_sub(w.seq);
                assert!(
                    into < w.len && len <= w.len - into,
                    "fragment past the written bytes"
                );
                assert_eq!(offset, w.offset + u64::from(into), "wrong bytes handed out");
                assert!(self.lent.insert(token, b).is_none(), "token lent twice");
                self.next = seq.wrapping_add(len);
            }
            Event::Linear { seq, skip, len } => {
                assert!(len > 0 && skip + len <= linear);
                assert_eq!(seq, self.next);
                assert_eq!(seg_seq.wrapping_add(skip), seq);
                self.next = seq.wrapping_add(len);
            }
            Event::Release { buffer } => {
                assert!(!self.free.contains(&buffer), "released twice");
                self.written.remove(&buffer);
                self.free.push(buffer);
            }
            Event::Fin | Event::Reset => {}
        }
    }

    fn check(&self) {
        assert_eq!(self.rx.buffers_on_device(), self.free.len() as u32);
        assert_eq!(self.rx.tokens_lent() as usize, self.lent.len());
        assert_eq!(
            self.free.len() as u32 + self.rx.buffers_held() + self.rx.tokens_lent(),
            BUFFERS
        );
    }

    fn give_all(&mut self) {
        let tokens: Vec<u32> = self.lent.keys().copied().collect();
        for t in tokens {
            let mut ev = Vec::new();
            assert_eq!(self.rx.give_back(t, 1, &mut |e| ev.push(e)), Ok(1));
            self.lent.remove(&t);
            for e in ev {
                self.event(e, 0, 0);
            }
        }
    }

    fn segment(&mut self, inp: &mut Input) {
        let near = self.rx.rcv_nxt();
        let kind = inp.u8();
        let seq = match kind & 3 {
            0 => near,
            1 => near.wrapping_add(u32::from(inp.u16())),
            2 => near.wrapping_sub(u32::from(inp.u16())),
            _ => inp.u32(),
        };
        let mut s = Segment {
            seq,
            ack: if kind & 4 == 0 { ISS + 1 } else { inp.u32() },
            flags: TcpFlags(inp.u8() & 0x1f),
            window: inp.u16(),
            options: TcpOptions {
                timestamp: (kind & 8 != 0).then(|| (inp.u32(), 0)),
                truncated: kind & 16 != 0,
                ..TcpOptions::default()
            },
            checksum_ok: kind & 32 == 0,
            ..Segment::default()
        };
        s.payload.linear = if kind & 64 != 0 {
            u32::from(inp.u16()) % 1100
        } else {
            0
        };
        let dlen = u32::from(inp.u16()) % (BUF + 1);
        let mut taken = None;
        if dlen > 0 || kind & 128 != 0 {
            let Some(b) = self.free.pop() else {
                self.give_all();
                return;
            };
            taken = Some(b);
            let skip = u32::from(inp.u8()) % 64;
            let len = dlen.min(BUF - skip);
            let offset = u64::from(b) * u64::from(BUF) + u64::from(skip);
            self.written.insert(
                b,
                Written {
                    seq: seq.wrapping_add(s.payload.linear),
                    offset,
                    len,
                },
            );
            let mut part = DmabufPart {
                buffer: b,
                offset,
                len,
            };
            match inp.u8() % 16 {
                0 => part.buffer = self.lent.values().next().copied().unwrap_or(BUFFERS + 3),
                1 => part.offset += u64::from(BUF),
                // One byte past the buffer's end (a length the device could not have written).
                2 => part.len = BUF + 1 - skip,
                _ => {}
            }
            s.payload.dmabuf = Some(part);
        }
        let before = (
            self.rx.buffers_held(),
            self.rx.tokens_lent(),
            self.rx.rcv_nxt(),
        );
        let mut ev = Vec::new();
        let r = self.rx.on_segment(&s, &mut |e| ev.push(e));
        if r.is_err() {
            assert!(ev.is_empty());
            assert_eq!(
                before,
                (
                    self.rx.buffers_held(),
                    self.rx.tokens_lent(),
                    self.rx.rcv_nxt()
                )
            );
            if let Some(b) = taken {
                self.written.remove(&b);
                self.free.push(b);
            }
        }
        for e in ev {
            self.event(e, s.payload.linear, s.seq);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut inp = Input(data);
    let cfg = RxConfig {
        buffers: BUFFERS,
        buffer_bytes: BUF,
        ooo_segments: u16::from(inp.u8()) % 9,
        mss: 1448,
        window_scale: inp.u8() % 15,
        iss: ISS,
    };
    let mut w = World {
        rx: TcpReceiver::new(cfg).unwrap(),
        free: (0..BUFFERS).collect(),
        written: BTreeMap::new(),
        lent: BTreeMap::new(),
        next: 0,
    };
    let isn = inp.u32();
    let syn = Segment {
        seq: isn,
        flags: TcpFlags::SYN,
        options: TcpOptions {
            window_scale: Some(7),
            sack_permitted: true,
            timestamp: Some((1, 0)),
            ..TcpOptions::default()
        },
        checksum_ok: true,
        ..Segment::default()
    };
    let mut sink = |_e: Event| {};
    w.rx.on_segment(&syn, &mut sink).unwrap();
    let ack = Segment {
        seq: isn.wrapping_add(1),
        ack: ISS + 1,
        flags: TcpFlags::ACK,
        checksum_ok: true,
        ..Segment::default()
    };
    w.rx.on_segment(&ack, &mut sink).unwrap();
    w.next = isn.wrapping_add(1);
    for _ in 0..256 {
        if inp.0.is_empty() {
            break;
        }
        match inp.u8() % 8 {
            0 => w.give_all(),
            1 => {
                let start = inp.u32();
                let count = u32::from(inp.u16()) % 1100;
                let mut ev = Vec::new();
                match w.rx.give_back(start, count, &mut |e| ev.push(e)) {
                    Ok(n) => {
                        for i in 0..n {
                            assert!(w.lent.remove(&start.wrapping_add(i)).is_some());
                        }
                        for e in ev {
                            w.event(e, 0, 0);
                        }
                    }
                    Err(_) => assert!(ev.is_empty()),
                }
            }
            2 => {
                let n = usize::from(inp.u8());
                let at = usize::from(inp.u8());
                let frame = inp.bytes(n).to_vec();
                let cut = at.min(frame.len());
                let tail = (frame.len() > cut).then(|| FrameTail {
                    buffer: 0,
                    offset: 4096,
                    len: (frame.len() - cut) as u32,
                });
                if let Ok(s) = parse_split(&frame[..cut], tail, true) {
                    if let (Some(d), Some(t)) = (s.segment.payload.dmabuf, tail) {
                        assert!(d.offset >= t.offset);
                        assert!(d.offset + u64::from(d.len) <= t.offset + u64::from(t.len));
                    }
                    assert!(s.segment.payload.linear as usize <= cut);
                }
            }
            _ => w.segment(&mut inp),
        }
        w.check();
    }
    w.give_all();
    let mut ev = Vec::new();
    w.rx.abort(&mut |e| ev.push(e));
    for e in ev {
        w.event(e, 0, 0);
    }
    w.check();
    assert_eq!(w.rx.buffers_on_device(), BUFFERS, "a buffer was lost");
});
