//! Tests of the Ethernet wires between model ports.

use std::io::{self, Write};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cxdirect_emu::pcap::{PcapReader, PcapRecord, PcapWriter};
use cxdirect_emu::wire::{
    PortCounters, PortId, Wire, WireConfig, WireError, DEFAULT_FIFO_CAPACITY, MAX_FRAME_LEN,
    MIN_FRAME_LEN,
};

/// An Ethernet frame of `len` bytes (at least 22) carrying `tag` and `seq` after the header, so
/// every frame in a test is distinguishable.
fn frame(len: usize, tag: u8, seq: u32) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x02]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, tag]);
    f[12..14].copy_from_slice(&[0x88, 0xb5]);
    f[14] = tag;
    f[15..19].copy_from_slice(&seq.to_be_bytes());
    for (i, b) in f.iter_mut().enumerate().skip(19) {
        *b = (i as u8) ^ tag;
    }
    f
}

fn tag_and_seq(f: &[u8]) -> (u8, u32) {
    (
        f[14],
        u32::from_be_bytes(f[15..19].try_into().expect("4 bytes")),
    )
}

fn recv(wire: &Wire, port: PortId) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    wire.receive(port, &mut buf)
        .expect("known port")
        .then_some(buf)
}

#[test]
fn wire_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Wire>();
    assert_send_sync::<Arc<Wire>>();
}

#[test]
fn loopback_delivers_to_itself() {
    let wire = Wire::loopback();
    assert_eq!(wire.port_count(), 1);
    assert_eq!(wire.ports().collect::<Vec<_>>(), vec![PortId::LOOPBACK]);
    assert_eq!(wire.peer(PortId::LOOPBACK).expect("port"), PortId::LOOPBACK);
    assert_eq!(wire.fifo_capacity(), DEFAULT_FIFO_CAPACITY);

    let f = frame(60, 1, 0);
    wire.transmit(PortId::LOOPBACK, &f).expect("transmit");
    assert_eq!(wire.pending(PortId::LOOPBACK).expect("port"), 1);
    assert_eq!(recv(&wire, PortId::LOOPBACK), Some(f));
    assert_eq!(recv(&wire, PortId::LOOPBACK), None);
    assert_eq!(wire.pending(PortId::LOOPBACK).expect("port"), 0);

    let c = wire.counters(PortId::LOOPBACK).expect("port");
    assert_eq!(
        c,
        PortCounters {
            tx_frames: 1,
            tx_bytes: 60,
            rx_frames: 1,
            rx_bytes: 60,
            ..PortCounters::default()
        }
    );
}

#[test]
fn pair_delivers_both_ways_byte_identical() {
    let wire = Wire::pair();
    assert_eq!(wire.peer(PortId::A).expect("A"), PortId::B);
    assert_eq!(wire.peer(PortId::B).expect("B"), PortId::A);

    let from_a = frame(1514, 0xa, 1);
    let from_b = frame(64, 0xb, 2);
    wire.transmit(PortId::A, &from_a).expect("A sends");
    wire.transmit(PortId::B, &from_b).expect("B sends");

    // Neither port hears itself on a pair.
    assert_eq!(wire.pending(PortId::A).expect("A"), 1);
    assert_eq!(wire.pending(PortId::B).expect("B"), 1);
    assert_eq!(recv(&wire, PortId::B), Some(from_a.clone()));
    assert_eq!(recv(&wire, PortId::A), Some(from_b.clone()));
    assert_eq!(recv(&wire, PortId::A), None);
    assert_eq!(recv(&wire, PortId::B), None);

    let a = wire.counters(PortId::A).expect("A");
    let b = wire.counters(PortId::B).expect("B");
    assert_eq!((a.tx_frames, a.tx_bytes), (1, 1514));
    assert_eq!((a.rx_frames, a.rx_bytes), (1, 64));
    assert_eq!((b.tx_frames, b.tx_bytes), (1, 64));
    assert_eq!((b.rx_frames, b.rx_bytes), (1, 1514));
}

#[test]
fn order_is_kept() {
    let wire = Wire::pair();
    for seq in 0..1000 {
        wire.transmit(PortId::A, &frame(64 + (seq as usize % 200), 1, seq))
            .expect("transmit");
    }
    let mut buf = Vec::new();
    for seq in 0..1000 {
        assert!(wire.receive(PortId::B, &mut buf).expect("B"));
        assert_eq!(tag_and_seq(&buf), (1, seq));
        assert_eq!(buf.len(), 64 + (seq as usize % 200));
    }
    assert!(!wire.receive(PortId::B, &mut buf).expect("B"));
}

#[test]
fn receive_into_copies_and_reports_length() {
    let wire = Wire::loopback();
    let f = frame(100, 3, 7);
    wire.transmit(PortId::LOOPBACK, &f).expect("transmit");
    let mut out = [0u8; 2048];
    assert_eq!(
        wire.receive_into(PortId::LOOPBACK, &mut out).expect("port"),
        Some(100)
    );
    assert_eq!(&out[..100], &f[..]);
    assert_eq!(
        wire.receive_into(PortId::LOOPBACK, &mut out).expect("port"),
        None
    );

    // A short buffer gets the head of the frame, and the length says it was cut.
    wire.transmit(PortId::LOOPBACK, &f).expect("transmit");
    let mut small = [0u8; 40];
    assert_eq!(
        wire.receive_into(PortId::LOOPBACK, &mut small)
            .expect("port"),
        Some(100)
    );
    assert_eq!(&small[..], &f[..40]);
    assert_eq!(wire.pending(PortId::LOOPBACK).expect("port"), 0);
}

#[test]
fn receive_replaces_old_buffer_contents() {
    let wire = Wire::loopback();
    let mut buf = vec![0xee; 5000];
    let f = frame(60, 4, 0);
    wire.transmit(PortId::LOOPBACK, &f).expect("transmit");
    assert!(wire.receive(PortId::LOOPBACK, &mut buf).expect("port"));
    assert_eq!(buf, f);
    // The old 5000-byte buffer went back to the wire; a later frame must not carry its bytes.
    let g = frame(30, 5, 1);
    wire.transmit(PortId::LOOPBACK, &g).expect("transmit");
    assert!(wire.receive(PortId::LOOPBACK, &mut buf).expect("port"));
    assert_eq!(buf, g);
}

#[test]
fn full_fifo_drops_and_counts() {
    let wire = Wire::pair_with(WireConfig {
        fifo_capacity: 8,
        ..WireConfig::default()
    })
    .expect("config");
    assert_eq!(wire.fifo_capacity(), 8);
    for seq in 0..20 {
        // A full FIFO is not the sender's error: a real wire does not push back.
        wire.transmit(PortId::A, &frame(100, 1, seq))
            .expect("transmit");
    }
    assert_eq!(wire.pending(PortId::B).expect("B"), 8);
    let b = wire.counters(PortId::B).expect("B");
    assert_eq!((b.rx_frames, b.rx_bytes), (8, 800));
    assert_eq!((b.dropped, b.dropped_bytes), (12, 1200));
    let a = wire.counters(PortId::A).expect("A");
    assert_eq!(a.tx_frames, 20);
    assert_eq!(a.dropped, 0);

    // The oldest frames were kept; the late ones were lost.
    for seq in 0..8 {
        assert_eq!(
            tag_and_seq(&recv(&wire, PortId::B).expect("frame")),
            (1, seq)
        );
    }
    assert_eq!(recv(&wire, PortId::B), None);

    // Room again after draining.
    wire.transmit(PortId::A, &frame(100, 1, 99))
        .expect("transmit");
    assert_eq!(
        tag_and_seq(&recv(&wire, PortId::B).expect("frame")),
        (1, 99)
    );
    assert_eq!(wire.counters(PortId::B).expect("B").dropped, 12);
}

#[test]
fn zero_capacity_is_refused() {
    let err = Wire::loopback_with(WireConfig {
        fifo_capacity: 0,
        ..WireConfig::default()
    })
    .unwrap_err();
    assert!(matches!(err, WireError::InvalidFifoCapacity), "{err:?}");
    let err = Wire::pair_with(WireConfig {
        fifo_capacity: 0,
        ..WireConfig::default()
    })
    .unwrap_err();
    assert!(matches!(err, WireError::InvalidFifoCapacity), "{err:?}");
    assert_eq!(WireConfig::default().fifo_capacity, DEFAULT_FIFO_CAPACITY);
}

#[test]
fn frame_size_limits() {
    let wire = Wire::pair();
    let err = wire
        .transmit(PortId::A, &[0u8; MIN_FRAME_LEN - 1])
        .unwrap_err();
    assert!(
        matches!(err, WireError::FrameTooShort { port: PortId::A, len } if len == MIN_FRAME_LEN - 1),
        "{err:?}"
    );
    let err = wire.transmit(PortId::A, &[]).unwrap_err();
    assert!(
        matches!(err, WireError::FrameTooShort { len: 0, .. }),
        "{err:?}"
    );
    let err = wire
        .transmit(PortId::A, &vec![0u8; MAX_FRAME_LEN + 1])
        .unwrap_err();
    assert!(
        matches!(err, WireError::FrameTooLong { port: PortId::A, len } if len == MAX_FRAME_LEN + 1),
        "{err:?}"
    );
    assert!(
        err.to_string().contains(&MAX_FRAME_LEN.to_string()),
        "{err}"
    );

    assert_eq!(wire.pending(PortId::B).expect("B"), 0);
    let a = wire.counters(PortId::A).expect("A");
    assert_eq!(a.rejected, 3);
    assert_eq!(a.tx_frames, 0);

    // The limits themselves are accepted.
    let shortest = vec![0x11; MIN_FRAME_LEN];
    let longest = vec![0x22; MAX_FRAME_LEN];
    wire.transmit(PortId::A, &shortest).expect("shortest");
    wire.transmit(PortId::A, &longest).expect("longest");
    assert_eq!(recv(&wire, PortId::B), Some(shortest));
    assert_eq!(recv(&wire, PortId::B), Some(longest));
    assert_eq!(wire.counters(PortId::A).expect("A").rejected, 3);
}

#[test]
fn unknown_ports_are_errors() {
    let wire = Wire::loopback();
    let f = frame(60, 1, 0);
    let unknown = |e: WireError| {
        matches!(
            e,
            WireError::UnknownPort {
                port: PortId::B,
                ports: 1
            }
        )
    };
    assert!(unknown(wire.transmit(PortId::B, &f).unwrap_err()));
    assert!(unknown(
        wire.receive(PortId::B, &mut Vec::new()).unwrap_err()
    ));
    assert!(unknown(
        wire.receive_into(PortId::B, &mut [0; 64]).unwrap_err()
    ));
    assert!(unknown(wire.pending(PortId::B).unwrap_err()));
    assert!(unknown(wire.counters(PortId::B).unwrap_err()));
    assert!(unknown(wire.peer(PortId::B).unwrap_err()));
    assert!(unknown(wire.wake(PortId::B).unwrap_err()));
    assert!(unknown(
        wire.wait_for_frames(PortId::B, Duration::ZERO).unwrap_err()
    ));
    let err = Wire::pair().pending(PortId(7)).unwrap_err();
    assert!(err.to_string().contains("port 7"), "{err}");
}

#[test]
fn concurrent_transmit_delivers_everything_once() {
    const PER_THREAD: u32 = 20_000;
    let wire = Arc::new(
        Wire::pair_with(WireConfig {
            fifo_capacity: 2 * PER_THREAD as usize,
            ..WireConfig::default()
        })
        .expect("config"),
    );

    // A receiver drains B while two threads transmit from A at once.
    let receiver = {
        let wire = Arc::clone(&wire);
        thread::spawn(move || {
            let mut seen = [
                vec![false; PER_THREAD as usize],
                vec![false; PER_THREAD as usize],
            ];
            let mut next = [0u32; 2];
            let mut buf = Vec::new();
            let mut total = 0;
            while total < 2 * PER_THREAD {
                if !wire.receive(PortId::B, &mut buf).expect("B") {
                    wire.wait_for_frames(PortId::B, Duration::from_millis(100))
                        .expect("B");
                    continue;
                }
                let (tag, seq) = tag_and_seq(&buf);
                let t = usize::from(tag);
                assert!(!seen[t][seq as usize], "frame {tag}/{seq} delivered twice");
                seen[t][seq as usize] = true;
                // Each sender's frames arrive in the order it sent them.
                assert_eq!(seq, next[t], "sender {tag} out of order");
                next[t] += 1;
                assert_eq!(
                    buf,
                    frame(buf.len(), tag, seq),
                    "frame {tag}/{seq} corrupted"
                );
                total += 1;
            }
            seen
        })
    };
    let senders: Vec<_> = (0..2u8)
        .map(|tag| {
            let wire = Arc::clone(&wire);
            thread::spawn(move || {
                for seq in 0..PER_THREAD {
                    let len = 60 + (seq as usize * 7 + usize::from(tag)) % 1400;
                    wire.transmit(PortId::A, &frame(len, tag, seq))
                        .expect("transmit");
                }
            })
        })
        .collect();
    for s in senders {
        s.join().expect("sender");
    }
    let seen = receiver.join().expect("receiver");
    assert!(seen.iter().flatten().all(|&s| s), "every frame delivered");
    assert_eq!(wire.pending(PortId::B).expect("B"), 0);
    let a = wire.counters(PortId::A).expect("A");
    let b = wire.counters(PortId::B).expect("B");
    assert_eq!(a.tx_frames, u64::from(2 * PER_THREAD));
    assert_eq!(b.rx_frames, u64::from(2 * PER_THREAD));
    assert_eq!(b.rx_bytes, a.tx_bytes);
    assert_eq!(b.dropped, 0);
}

#[test]
fn both_ports_transmit_at_once() {
    const N: u32 = 5_000;
    let wire = Arc::new(
        Wire::pair_with(WireConfig {
            fifo_capacity: N as usize,
            ..WireConfig::default()
        })
        .expect("cfg"),
    );
    let threads: Vec<_> = [(PortId::A, 0xa), (PortId::B, 0xb)]
        .into_iter()
        .map(|(port, tag)| {
            let wire = Arc::clone(&wire);
            thread::spawn(move || {
                for seq in 0..N {
                    wire.transmit(port, &frame(64, tag, seq)).expect("transmit");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("sender");
    }
    for (port, tag) in [(PortId::B, 0xa), (PortId::A, 0xb)] {
        for seq in 0..N {
            assert_eq!(tag_and_seq(&recv(&wire, port).expect("frame")), (tag, seq));
        }
        assert_eq!(recv(&wire, port), None);
    }
}

#[test]
fn wait_for_frames_wakes_on_arrival() {
    let wire = Arc::new(Wire::pair());
    let waiter = {
        let wire = Arc::clone(&wire);
        thread::spawn(move || {
            let start = Instant::now();
            let got = wire
                .wait_for_frames(PortId::B, Duration::from_secs(60))
                .expect("B");
            (got, start.elapsed())
        })
    };
    thread::sleep(Duration::from_millis(50));
    wire.transmit(PortId::A, &frame(60, 1, 0))
        .expect("transmit");
    let (got, waited) = waiter.join().expect("waiter");
    assert!(got);
    // Generous bound: only checks it woke on the frame rather than sleeping out the timeout.
    assert!(waited < Duration::from_secs(30), "waited {waited:?}");
    assert_eq!(wire.pending(PortId::B).expect("B"), 1);

    // Frames already queued: returns at once.
    assert!(wire.wait_for_frames(PortId::B, Duration::ZERO).expect("B"));
}

#[test]
fn wait_for_frames_times_out() {
    let wire = Wire::pair();
    let start = Instant::now();
    assert!(!wire
        .wait_for_frames(PortId::B, Duration::from_millis(20))
        .expect("B"));
    assert!(start.elapsed() >= Duration::from_millis(20));
    assert!(!wire.wait_for_frames(PortId::B, Duration::ZERO).expect("B"));
}

#[test]
fn wake_releases_a_waiter_without_frames() {
    let wire = Arc::new(Wire::loopback());
    let waiter = {
        let wire = Arc::clone(&wire);
        // Duration::MAX cannot be added to an Instant: it means "no limit".
        thread::spawn(move || wire.wait_for_frames(PortId::LOOPBACK, Duration::MAX))
    };
    // Keep waking until the waiter has gone to sleep and noticed; a wake before it sleeps is
    // harmlessly missed.
    while !waiter.is_finished() {
        wire.wake(PortId::LOOPBACK).expect("port");
        thread::sleep(Duration::from_millis(5));
    }
    assert!(!waiter.join().expect("waiter").expect("port"));
}

/// A `Write` whose bytes the test can read while the wire owns the writer.
#[derive(Clone, Default)]
struct SharedBuf(Arc<Mutex<Vec<u8>>>);

impl Write for SharedBuf {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().expect("lock").extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl SharedBuf {
    fn records(&self) -> Vec<PcapRecord> {
        let bytes = self.0.lock().expect("lock").clone();
        PcapReader::new(&bytes[..])
            .expect("header")
            .collect::<Result<_, _>>()
            .expect("records")
    }
}

#[test]
fn pcap_tap_records_every_transmitted_frame() {
    let wire = Wire::pair_with(WireConfig {
        fifo_capacity: 1,
        ..WireConfig::default()
    })
    .expect("config");
    let buf = SharedBuf::default();
    assert!(!wire.has_pcap());
    let before = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970");
    wire.set_pcap(PcapWriter::new(buf.clone()).expect("header"))
        .expect("set tap");
    assert!(wire.has_pcap());

    let sent = [
        (PortId::A, frame(60, 0xa, 0)),
        (PortId::B, frame(1514, 0xb, 0)),
        // B's FIFO is full now: dropped at the receiver, but it was on the wire.
        (PortId::A, frame(200, 0xa, 1)),
        (PortId::A, vec![0x33; MAX_FRAME_LEN]),
    ];
    for (port, f) in &sent {
        wire.transmit(*port, f).expect("transmit");
    }
    // Refused frames never reach the wire, so not the capture either.
    assert!(wire.transmit(PortId::A, &[0; 3]).is_err());
    assert_eq!(wire.counters(PortId::B).expect("B").dropped, 2);

    wire.flush_pcap().expect("flush");
    let records = buf.records();
    assert_eq!(records.len(), sent.len());
    let mut last = before.saturating_sub(Duration::from_secs(1));
    for (rec, (_, f)) in records.iter().zip(&sent) {
        assert_eq!(&rec.data, f);
        assert_eq!(rec.orig_len as usize, f.len());
        // Wall-clock timestamps, in order.
        assert!(rec.timestamp >= last, "{:?} < {last:?}", rec.timestamp);
        last = rec.timestamp;
    }
    assert!(last < before + Duration::from_secs(3600));

    assert!(wire.clear_pcap().expect("clear"));
    assert!(!wire.has_pcap());
    wire.transmit(PortId::B, &frame(60, 0xb, 1))
        .expect("transmit");
    assert_eq!(buf.records().len(), sent.len());
    assert!(!wire.clear_pcap().expect("nothing to clear"));
}

#[test]
fn pcap_tap_is_shared_by_threads() {
    const PER_THREAD: u32 = 2_000;
    let wire = Arc::new(Wire::pair());
    let buf = SharedBuf::default();
    wire.set_pcap(PcapWriter::new(buf.clone()).expect("header"))
        .expect("set tap");
    let threads: Vec<_> = [(PortId::A, 0xa), (PortId::B, 0xb)]
        .into_iter()
        .map(|(port, tag)| {
            let wire = Arc::clone(&wire);
            thread::spawn(move || {
                for seq in 0..PER_THREAD {
                    wire.transmit(port, &frame(80, tag, seq)).expect("transmit");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("sender");
    }
    wire.clear_pcap().expect("clear");
    let records = buf.records();
    assert_eq!(records.len(), 2 * PER_THREAD as usize);
    let mut next = [0u32; 2];
    let mut last = Duration::ZERO;
    for rec in &records {
        let (tag, seq) = tag_and_seq(&rec.data);
        let t = usize::from(tag == 0xb);
        assert_eq!(seq, next[t], "capture keeps each sender's order");
        next[t] += 1;
        assert!(rec.timestamp >= last, "timestamps follow file order");
        last = rec.timestamp;
    }
}

/// A writer that accepts the pcap header and then fails.
struct BrokenDisk {
    accepted: usize,
}

impl Write for BrokenDisk {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.accepted >= 24 {
            return Err(io::Error::other("disk on fire"));
        }
        self.accepted += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn failing_tap_does_not_disturb_traffic() {
    let wire = Wire::loopback();
    wire.set_pcap(PcapWriter::new(BrokenDisk { accepted: 0 }).expect("header"))
        .expect("set tap");
    let f = frame(60, 1, 0);
    wire.transmit(PortId::LOOPBACK, &f)
        .expect("traffic goes on");
    assert_eq!(recv(&wire, PortId::LOOPBACK), Some(f.clone()));
    assert!(!wire.has_pcap(), "a failed tap removes itself");

    let err = wire.flush_pcap().unwrap_err();
    assert!(matches!(err, WireError::Pcap(_)), "{err:?}");
    assert!(err.to_string().contains("disk on fire"), "{err}");
    // Reported once.
    wire.flush_pcap().expect("already reported");
    wire.transmit(PortId::LOOPBACK, &f)
        .expect("traffic goes on");
}

#[test]
fn replacing_a_tap_reports_an_earlier_failure() {
    let wire = Wire::loopback();
    wire.set_pcap(PcapWriter::new(BrokenDisk { accepted: 0 }).expect("header"))
        .expect("set tap");
    wire.transmit(PortId::LOOPBACK, &frame(60, 1, 0))
        .expect("transmit");
    let buf = SharedBuf::default();
    let err = wire
        .set_pcap(PcapWriter::new(buf.clone()).expect("header"))
        .unwrap_err();
    assert!(matches!(err, WireError::Pcap(_)), "{err:?}");
    // The new tap is in place regardless.
    assert!(wire.has_pcap());
    wire.transmit(PortId::LOOPBACK, &frame(60, 1, 1))
        .expect("transmit");
    wire.flush_pcap().expect("flush");
    assert_eq!(buf.records().len(), 1);
}
