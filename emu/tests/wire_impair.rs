//! Tests of a wire's seeded impairments: drop, duplicate, reorder, corrupt, delay.

use std::io;
use std::sync::{Arc, Mutex};

use cxdirect_emu::pcap::{PcapReader, PcapWriter};
use cxdirect_emu::wire::{
    ImpairmentCounters, Impairments, PortId, Wire, WireConfig, WireError, DEFAULT_FIFO_CAPACITY,
};

const SEED: u64 = 0x5eed_0fc0_ffee;

/// An Ethernet frame of 64..=1063 bytes carrying `seq` right after the header, its other bytes
/// a pattern of `seq`, so every frame differs from every other.
fn frame(seq: u32) -> Vec<u8> {
    let len = 64 + (seq as usize * 37) % 1000;
    let mut f = vec![0u8; len];
    f[..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x02]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x01]);
    f[12..14].copy_from_slice(&[0x88, 0xb5]);
    f[14..18].copy_from_slice(&seq.to_be_bytes());
    for (i, b) in f.iter_mut().enumerate().skip(18) {
        *b = (i as u32).wrapping_mul(31).wrapping_add(seq) as u8;
    }
    f
}

fn seq_of(f: &[u8]) -> u32 {
    u32::from_be_bytes(f[14..18].try_into().expect("4 bytes"))
}

fn impaired(impairments: Impairments) -> Wire {
    Wire::pair_with(WireConfig {
        // Large enough that no test frame is lost to a full FIFO.
        fifo_capacity: 4 * 10_000,
        impairments,
    })
    .expect("valid impairments")
}

fn drain(wire: &Wire, port: PortId) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = Vec::new();
    while wire.receive(port, &mut buf).expect("port") {
        out.push(buf.clone());
    }
    out
}

/// Sends frames `0..n` from A, releases what is still held, and returns what reached B.
fn send_all(wire: &Wire, n: u32) -> Vec<Vec<u8>> {
    for seq in 0..n {
        wire.transmit(PortId::A, &frame(seq)).expect("transmit");
    }
    wire.release_held(PortId::A).expect("port");
    drain(wire, PortId::B)
}

fn counters(wire: &Wire) -> ImpairmentCounters {
    wire.impairment_counters(PortId::A).expect("port")
}

fn everything(seed: u64) -> Impairments {
    Impairments {
        seed,
        drop_probability: 0.05,
        drop_every: 50,
        duplicate_probability: 0.05,
        reorder_probability: 0.05,
        reorder_window: 4,
        corrupt_probability: 0.05,
        delay_frames: 1,
        delay_jitter_frames: 2,
    }
}

#[test]
fn same_seed_gives_the_same_outcomes() {
    let run = |seed| {
        let wire = impaired(everything(seed));
        let delivered = send_all(&wire, 2_000);
        (delivered, counters(&wire))
    };
    let (first, first_counters) = run(SEED);
    let (second, second_counters) = run(SEED);
    assert_eq!(first, second, "same seed, same frames: same delivery");
    assert_eq!(first_counters, second_counters);
    // Every impairment did something, so the comparison covered them all.
    let c = first_counters;
    assert_eq!(c.frames, 2_000);
    for (name, n) in [
        ("dropped", c.dropped),
        ("duplicated", c.duplicated),
        ("reordered", c.reordered),
        ("corrupted", c.corrupted),
        ("delayed", c.delayed),
    ] {
        assert!(n > 0, "{name} is zero: {c:?}");
    }
    assert_eq!(c.held, 0, "all released");
    assert_eq!(first.len() as u64, c.frames - c.dropped + c.duplicated);

    let (other, _) = run(SEED + 1);
    assert_ne!(first, other, "another seed gives other outcomes");
}

#[test]
fn directions_are_independent_of_each_other() {
    let config = everything(SEED);
    let alone = impaired(config);
    let a_alone = send_all(&alone, 1_000);

    // The same frames from A, with B sending between them: A's outcomes do not change.
    let busy = impaired(config);
    for seq in 0..1_000 {
        busy.transmit(PortId::A, &frame(seq)).expect("A");
        busy.transmit(PortId::B, &frame(seq + 7)).expect("B");
    }
    busy.release_held(PortId::A).expect("A");
    assert_eq!(drain(&busy, PortId::B), a_alone);
    assert!(busy.impairment_counters(PortId::B).expect("B").frames == 1_000);
}

#[test]
fn drop_every_nth_drops_exactly_those() {
    let wire = impaired(Impairments {
        drop_every: 7,
        ..Impairments::NONE
    });
    let delivered: Vec<u32> = send_all(&wire, 100).iter().map(|f| seq_of(f)).collect();
    // The 7th, 14th... frame sent (seq 6, 13, ...) is dropped; nothing else is touched.
    let expected: Vec<u32> = (0..100).filter(|seq| (seq + 1) % 7 != 0).collect();
    assert_eq!(delivered, expected);
    let c = counters(&wire);
    assert_eq!(c.dropped, 14);
    assert_eq!(
        ImpairmentCounters {
            frames: 0,
            dropped: 0,
            ..c
        },
        ImpairmentCounters::default(),
        "no other impairment acted"
    );
    let b = wire.counters(PortId::B).expect("B");
    assert_eq!(b.rx_frames, 86);
    assert_eq!(b.dropped, 0, "impairment drops are not FIFO drops");
}

/// Over 10,000 frames, a count with probability `p` lands within a wide bound of `p * n`
/// (about seven standard deviations; the seed is fixed, so the result never varies).
fn assert_near(name: &str, count: u64, p: f64) {
    const N: f64 = 10_000.0;
    let expected = p * N;
    let bound = 7.0 * (N * p * (1.0 - p)).sqrt();
    assert!(
        (count as f64 - expected).abs() <= bound,
        "{name}: {count} for p = {p} over {N} frames, expected {expected} ± {bound}"
    );
}

#[test]
fn probabilities_land_near_their_value() {
    for p in [0.01, 0.05, 0.3] {
        let wire = impaired(Impairments {
            seed: SEED,
            drop_probability: p,
            ..Impairments::NONE
        });
        let delivered = send_all(&wire, 10_000);
        let dropped = counters(&wire).dropped;
        assert_near("drop", dropped, p);
        assert_eq!(delivered.len() as u64, 10_000 - dropped);

        let wire = impaired(Impairments {
            seed: SEED,
            duplicate_probability: p,
            ..Impairments::NONE
        });
        let delivered = send_all(&wire, 10_000);
        let duplicated = counters(&wire).duplicated;
        assert_near("duplicate", duplicated, p);
        assert_eq!(delivered.len() as u64, 10_000 + duplicated);

        let wire = impaired(Impairments {
            seed: SEED,
            corrupt_probability: p,
            ..Impairments::NONE
        });
        let delivered = send_all(&wire, 10_000);
        let corrupted = counters(&wire).corrupted;
        assert_near("corrupt", corrupted, p);
        let damaged = (0..10_000u32)
            .zip(&delivered)
            .filter(|(seq, f)| frame(*seq) != **f)
            .count() as u64;
        assert_eq!(damaged, corrupted);

        let wire = impaired(Impairments {
            seed: SEED,
            reorder_probability: p,
            reorder_window: 3,
            ..Impairments::NONE
        });
        send_all(&wire, 10_000);
        assert_near("reorder", counters(&wire).reordered, p);
    }
}

#[test]
fn reorder_keeps_every_frame_and_moves_frames_only_within_the_window() {
    const N: u32 = 10_000;
    const WINDOW: u32 = 4;
    let wire = impaired(Impairments {
        seed: SEED,
        reorder_probability: 0.2,
        reorder_window: WINDOW,
        ..Impairments::NONE
    });
    let delivered = send_all(&wire, N);
    let seqs: Vec<u32> = delivered.iter().map(|f| seq_of(f)).collect();

    let mut sorted = seqs.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..N).collect::<Vec<_>>(), "every frame, once");
    for (f, &seq) in delivered.iter().zip(&seqs) {
        assert_eq!(*f, frame(seq), "bytes intact");
    }
    assert_ne!(seqs, sorted, "the order changed");

    // A frame delivered after another that was sent more than WINDOW frames later would have
    // been held back too far: every frame after position i is at least seq[i] - WINDOW.
    let mut min_after = u32::MAX;
    let mut inversions = 0;
    for &seq in seqs.iter().rev() {
        assert!(
            min_after >= seq.saturating_sub(WINDOW),
            "frame {min_after} delivered after frame {seq}, beyond the window"
        );
        if min_after < seq {
            inversions += 1;
        }
        min_after = min_after.min(seq);
    }
    assert!(inversions > 0);
    let c = counters(&wire);
    assert_near("reorder", c.reordered, 0.2);
    assert_eq!(
        (c.dropped, c.duplicated, c.corrupted, c.delayed),
        (0, 0, 0, 0)
    );
}

#[test]
fn duplicate_delivers_some_frames_twice() {
    let wire = impaired(Impairments {
        seed: SEED,
        duplicate_probability: 0.1,
        ..Impairments::NONE
    });
    let delivered = send_all(&wire, 1_000);
    let c = counters(&wire);
    assert!(c.duplicated > 0);
    assert_eq!(delivered.len() as u64, 1_000 + c.duplicated);
    // In order; a duplicate follows its original at once, byte for byte.
    let mut expected = 0u32;
    let mut twice = 0u64;
    let mut i = 0;
    while i < delivered.len() {
        assert_eq!(delivered[i], frame(expected));
        if delivered.get(i + 1) == Some(&delivered[i]) {
            twice += 1;
            i += 1;
        }
        i += 1;
        expected += 1;
    }
    assert_eq!(expected, 1_000);
    assert_eq!(twice, c.duplicated);
}

#[test]
fn corrupt_changes_exactly_one_byte_of_the_frames_it_hits() {
    let wire = impaired(Impairments {
        seed: SEED,
        corrupt_probability: 0.2,
        ..Impairments::NONE
    });
    let delivered = send_all(&wire, 2_000);
    assert_eq!(delivered.len(), 2_000);
    let mut hit = 0u64;
    for (seq, got) in (0..2_000u32).zip(&delivered) {
        let sent = frame(seq);
        assert_eq!(got.len(), sent.len(), "length kept");
        let diffs: Vec<(u8, u8)> = sent
            .iter()
            .zip(got)
            .filter(|(a, b)| a != b)
            .map(|(a, b)| (*a, *b))
            .collect();
        match diffs.as_slice() {
            [] => {}
            [(a, b)] => {
                assert_eq!((a ^ b).count_ones(), 1, "one bit flipped");
                hit += 1;
            }
            more => panic!("frame {seq}: {} bytes changed", more.len()),
        }
    }
    assert!(hit > 0);
    assert_eq!(hit, counters(&wire).corrupted);
}

#[test]
fn fixed_delay_holds_each_frame_for_n_later_frames() {
    let wire = impaired(Impairments {
        delay_frames: 3,
        ..Impairments::NONE
    });
    for seq in 0..3 {
        wire.transmit(PortId::A, &frame(seq)).expect("transmit");
        assert_eq!(wire.pending(PortId::B).expect("B"), 0, "held");
    }
    assert_eq!(counters(&wire).held, 3);
    for seq in 3..10 {
        wire.transmit(PortId::A, &frame(seq)).expect("transmit");
        let got = drain(&wire, PortId::B);
        assert_eq!(got, vec![frame(seq - 3)], "frame {} crosses now", seq - 3);
    }
    let c = counters(&wire);
    assert_eq!((c.frames, c.delayed, c.held), (10, 10, 3));
    assert_eq!(wire.release_held(PortId::A).expect("A"), 3);
    assert_eq!(drain(&wire, PortId::B), vec![frame(7), frame(8), frame(9)]);
    assert_eq!(counters(&wire).held, 0);
    assert_eq!(wire.release_held(PortId::A).expect("A"), 0);
}

#[test]
fn random_delay_stays_within_its_bounds() {
    const N: u32 = 2_000;
    let wire = impaired(Impairments {
        seed: SEED,
        delay_frames: 2,
        delay_jitter_frames: 3,
        ..Impairments::NONE
    });
    let mut crossed_at = vec![None; N as usize];
    for seq in 0..N {
        wire.transmit(PortId::A, &frame(seq)).expect("transmit");
        for f in drain(&wire, PortId::B) {
            let s = seq_of(&f);
            assert_eq!(f, frame(s));
            assert_eq!(crossed_at[s as usize].replace(seq), None, "once");
        }
    }
    let mut holds = [0u32; 6];
    for (seq, at) in crossed_at.iter().enumerate() {
        if let Some(at) = at {
            let hold = at - seq as u32;
            assert!(
                (2..=5).contains(&hold),
                "frame {seq} held for {hold} frames"
            );
            holds[hold as usize] += 1;
        } else {
            assert!(
                seq as u32 >= N - 5,
                "only the last frames may still be held"
            );
        }
    }
    assert!(
        holds[2..].iter().all(|&n| n > 0),
        "every hold occurs: {holds:?}"
    );
    assert_eq!(counters(&wire).delayed, u64::from(N));
}

#[test]
fn everything_off_is_byte_identical() {
    for impairments in [
        Impairments::NONE,
        Impairments {
            seed: SEED,
            reorder_window: 8,
            ..Impairments::NONE
        },
    ] {
        assert!(impairments.is_none());
        let wire = impaired(impairments);
        for seq in 0..1_000 {
            wire.transmit(PortId::A, &frame(seq)).expect("A");
            wire.transmit(PortId::B, &frame(seq + 1_000)).expect("B");
        }
        let at_b = drain(&wire, PortId::B);
        let at_a = drain(&wire, PortId::A);
        assert_eq!(at_b, (0..1_000).map(frame).collect::<Vec<_>>());
        assert_eq!(at_a, (1_000..2_000).map(frame).collect::<Vec<_>>());
        for port in [PortId::A, PortId::B] {
            assert_eq!(
                wire.impairment_counters(port).expect("port"),
                ImpairmentCounters::default()
            );
            assert_eq!(wire.release_held(port).expect("port"), 0);
        }
    }
    assert_eq!(WireConfig::default().impairments, Impairments::NONE);
    assert_eq!(Impairments::default(), Impairments::NONE);
    assert_eq!(
        Wire::pair().impairment_counters(PortId::A).expect("A"),
        ImpairmentCounters::default()
    );
}

#[test]
fn out_of_range_impairments_are_refused() {
    let bad = [
        (
            Impairments {
                drop_probability: 1.5,
                ..Impairments::NONE
            },
            "drop_probability",
        ),
        (
            Impairments {
                duplicate_probability: -0.1,
                ..Impairments::NONE
            },
            "duplicate_probability",
        ),
        (
            Impairments {
                corrupt_probability: f64::NAN,
                ..Impairments::NONE
            },
            "corrupt_probability",
        ),
        (
            Impairments {
                reorder_probability: 0.1,
                reorder_window: 0,
                ..Impairments::NONE
            },
            "reorder_window",
        ),
        (
            Impairments {
                delay_frames: u32::MAX,
                delay_jitter_frames: 1,
                ..Impairments::NONE
            },
            "delay_frames",
        ),
    ];
    for (impairments, field) in bad {
        let config = WireConfig {
            fifo_capacity: DEFAULT_FIFO_CAPACITY,
            impairments,
        };
        for err in [
            Wire::pair_with(config).unwrap_err(),
            Wire::loopback_with(config).unwrap_err(),
        ] {
            assert!(
                matches!(err, WireError::InvalidImpairment { field: f } if f == field),
                "{impairments:?}: {err:?}"
            );
        }
    }
}

#[derive(Clone, Default)]
struct SharedBuf(Arc<Mutex<Vec<u8>>>);

impl io::Write for SharedBuf {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.0.lock().expect("lock").extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn capture_shows_what_crossed_after_the_impairments() {
    let wire = impaired(Impairments {
        seed: SEED,
        drop_every: 3,
        duplicate_probability: 0.2,
        corrupt_probability: 0.2,
        reorder_probability: 0.2,
        reorder_window: 2,
        ..Impairments::NONE
    });
    let out = SharedBuf::default();
    wire.set_pcap(PcapWriter::new(out.clone()).expect("pcap header"))
        .expect("tap");
    let delivered = send_all(&wire, 300);
    wire.flush_pcap().expect("flush");
    let bytes = out.0.lock().expect("lock").clone();
    let captured: Vec<Vec<u8>> = PcapReader::new(&bytes[..])
        .expect("pcap")
        .map(|r| r.expect("record").data)
        .collect();
    let c = counters(&wire);
    assert!(c.dropped > 0 && c.duplicated > 0 && c.corrupted > 0 && c.reordered > 0);
    assert_eq!(
        captured, delivered,
        "the tap records exactly what reached B"
    );
}

#[test]
fn loopback_impairs_its_one_direction() {
    let wire = Wire::loopback_with(WireConfig {
        impairments: Impairments {
            drop_every: 2,
            ..Impairments::NONE
        },
        ..WireConfig::default()
    })
    .expect("config");
    for seq in 0..10 {
        wire.transmit(PortId::LOOPBACK, &frame(seq))
            .expect("transmit");
    }
    let got: Vec<u32> = drain(&wire, PortId::LOOPBACK)
        .iter()
        .map(|f| seq_of(f))
        .collect();
    assert_eq!(got, vec![0, 2, 4, 6, 8]);
}
