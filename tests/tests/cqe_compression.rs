//! CQE compression end to end: the model writes runs of receive completions as a title CQE and
//! mini-CQE arrays, and the driver hands every completion out intact, in order, whatever the
//! burst size, across many passes of the ring; it refuses a session whose title or mini-CQEs
//! carry values it cannot trust, and recovery puts the queue back in step.

use cxdirect::{Mbuf, Port, PortConfig, Recovery, Started};
use cxdirect_apps::emulated::EmuBackend;
use cxdirect_emu::{Device as Model, EmuConfig, ExecMode, Fault};
use cxdirect_tests::setup::{bring_up, small_port};
use cxdirect_tests::udp_frame_sized;

type Side = Started<EmuBackend>;

/// Ports a (sending) and b (receiving), 64-entry rings, on an inline-executing model pair.
fn pair(b_config: PortConfig) -> (Side, Side, Model) {
    pair_on(EmuConfig::default(), small_port(), b_config)
}

fn pair_on(cfg: EmuConfig, a_config: PortConfig, b_config: PortConfig) -> (Side, Side, Model) {
    let (ma, mb) = Model::pair(cfg.clone(), cfg);
    let a = Port::start(bring_up(&ma, "a"), a_config).unwrap();
    let b = Port::start(bring_up(&mb, "b"), b_config).unwrap();
    (a, b, mb)
}

/// The frame with sequence number `seq`: sizes vary so every mini-CQE's byte count differs
/// from its neighbours'.
fn frame(seq: u32) -> Vec<u8> {
    udp_frame_sized(64 + (seq as usize * 7) % 900, seq, 4000, 9000)
}

/// Sends frames `first..first + count` from a in one burst (retrying what the ring refuses).
fn send(a: &mut Side, first: u32, count: u32) {
    let mut batch: Vec<Mbuf> = (first..first + count)
        .map(|seq| {
            let mut m = a.port.pool().alloc().unwrap();
            m.set_data(&frame(seq)).unwrap();
            m
        })
        .collect();
    cxdirect_tests::send_all(&mut a.queues.tx[0], &mut batch);
}

/// Receives on b with bursts of `burst` until nothing more comes.
fn receive(b: &mut Side, burst: usize) -> Vec<Mbuf> {
    let mut got = Vec::new();
    while b.queues.rx[0].rx_burst(&mut got, burst).unwrap() > 0 {}
    got
}

fn check_frames(got: &[Mbuf], first: u32) {
    for (i, m) in got.iter().enumerate() {
        assert_eq!(
            m.to_vec(),
            frame(first + i as u32),
            "frame {}",
            first + i as u32
        );
    }
}

fn close_balanced(a: Side, b: Side) {
    let pool = b.port.pool().clone();
    for Started { port, queues } in [b, a] {
        drop(queues);
        port.close().unwrap().teardown().unwrap();
    }
    assert_eq!(
        pool.available(),
        pool.capacity(),
        "no buffer lost or doubled"
    );
}

/// Recovers b's stopped receive queue, which must get a new CQ (where the device writes next
/// was unknown); returns what recovery did.
fn recover_with_new_cq(b: &mut Side) -> Recovery {
    let r = b.port.recover_rx(&mut b.queues.rx[0]).unwrap();
    assert!(
        r.cq_recreated,
        "where the device writes next is unknown: {r:?}"
    );
    r
}

/// Sends frames `first..first + count` and checks they all arrive intact.
fn frames_arrive(a: &mut Side, b: &mut Side, first: u32, count: u32) {
    send(a, first, count);
    let got = receive(b, 64);
    assert_eq!(got.len(), count as usize, "{:?}", b.queues.rx[0].stats());
    check_frames(&got, first);
}

/// CQE slots the model writes for bursts of `sizes` frames, each burst one session.
fn slots_for(sizes: &[u32]) -> u64 {
    sizes
        .iter()
        .map(|&n| {
            if n == 1 {
                1
            } else {
                1 + u64::from(n.div_ceil(8))
            }
        })
        .sum()
}

#[test]
fn compressed_sessions_arrive_intact_across_bursts_and_ring_passes() {
    let (mut a, mut b, mb) = pair(small_port());
    let sizes = [1u32, 2, 5, 8, 9, 16, 17, 31, 32, 33, 40, 63, 64];
    let bursts = [1usize, 3, 7, 32, 64];
    let mut seq = 0u32;
    let mut sent_sizes = Vec::new();
    for round in 0..4 {
        for (i, &n) in sizes.iter().enumerate() {
            send(&mut a, seq, n);
            let got = receive(&mut b, bursts[(round + i) % bursts.len()]);
            assert_eq!(got.len(), n as usize, "burst of {n} from frame {seq}");
            check_frames(&got, seq);
            seq += n;
            sent_sizes.push(n);
        }
    }
    let stats = b.queues.rx[0].stats();
    assert_eq!(stats.packets, u64::from(seq));
    assert_eq!(stats.bad_cqes, 0);
    let c = mb.counters();
    assert_eq!(c.cqes, u64::from(seq), "one completion per frame");
    assert_eq!(
        c.compressed_sessions,
        sent_sizes.iter().filter(|&&n| n > 1).count() as u64
    );
    assert_eq!(c.cqe_slot_writes, slots_for(&sent_sizes));
    assert_eq!(
        stats.compressed_cqes,
        u64::from(seq) - sent_sizes.iter().filter(|&&n| n == 1).count() as u64,
        "every completion of a session came from a mini-CQE"
    );
    // 1,036 completions through a 64-entry CQ: the slots sessions skipped were given back on
    // every pass, or a later pass would have read a stale one.
    assert!(seq > 64 * 15, "{seq}");
    close_balanced(a, b);
}

#[test]
fn with_compression_off_every_completion_is_a_plain_cqe() {
    let (mut a, mut b, mb) = pair(PortConfig {
        rx_cqe_compression: false,
        ..small_port()
    });
    send(&mut a, 0, 32);
    let got = receive(&mut b, 64);
    check_frames(&got, 0);
    assert_eq!(got.len(), 32);
    let c = mb.counters();
    assert_eq!(
        (c.cqes, c.cqe_slot_writes, c.compressed_sessions),
        (32, 32, 0)
    );
    assert_eq!(b.queues.rx[0].stats().compressed_cqes, 0);
    drop(got);
    close_balanced(a, b);
}

#[test]
fn a_title_claiming_more_completions_than_the_ring_holds_is_refused_and_the_cq_rebuilt() {
    let (mut a, mut b, mb) = pair(small_port());
    let cqn = b.queues.rx[0].cqn();
    // byte_cnt of the title: 4096 completions in a 64-entry CQ.
    mb.inject(Fault::CorruptSession {
        cqn,
        slot: 0,
        patch: vec![(0x2c, 0), (0x2d, 0), (0x2e, 0x10), (0x2f, 0)],
    });
    send(&mut a, 0, 8);
    assert!(
        receive(&mut b, 64).is_empty(),
        "nothing from a session it cannot place"
    );
    let q = &b.queues.rx[0];
    assert!(q.in_error());
    assert_eq!(q.stats().bad_cqes, 1);

    let r = recover_with_new_cq(&mut b);
    assert_eq!(r.flushed, 64, "every posted buffer, the 8 written ones too");
    frames_arrive(&mut a, &mut b, 100, 20);
    close_balanced(a, b);
}

#[test]
fn a_mini_cqe_with_an_impossible_byte_count_stops_the_queue_at_that_completion() {
    let (mut a, mut b, mb) = pair(small_port());
    let cqn = b.queues.rx[0].cqn();
    // The third mini-CQE of the first array (bytes 16..24) says 4 GiB.
    mb.inject(Fault::CorruptSession {
        cqn,
        slot: 1,
        patch: (20..24).map(|at| (at, 0xff)).collect(),
    });
    send(&mut a, 0, 8);
    let got = receive(&mut b, 64);
    assert_eq!(got.len(), 2, "the two completions before it");
    check_frames(&got, 0);
    let q = &b.queues.rx[0];
    assert!(q.in_error());
    assert_eq!(q.stats().bad_cqes, 1);

    // A session with a refused completion may have lied about its size.
    let r = recover_with_new_cq(&mut b);
    assert_eq!(r.drained_cqes, 5, "the rest of the session");
    assert_eq!(
        r.flushed, 62,
        "the refused buffer stayed posted until the RQ stopped"
    );
    drop(got);
    frames_arrive(&mut a, &mut b, 100, 40);
    close_balanced(a, b);
}

#[test]
fn a_receiver_polling_while_the_device_writes_sessions_never_refuses_one() {
    // The model on its own thread writes each session's arrays, then its title, while the
    // driver polls: between the two writes the slot after the consumer index is written and
    // the one at it is not, which must not pass for a skipped entry.
    let cfg = EmuConfig {
        exec: ExecMode::Threaded,
        ..EmuConfig::default()
    };
    let ports = PortConfig {
        ring_size: 1024,
        pool_buffers: 8192,
        ..PortConfig::default()
    };
    let (mut a, mut b, mb) = pair_on(cfg, ports.clone(), ports);
    let mut got = Vec::new();
    let mut seq = 0;
    for _ in 0..100 {
        let start = seq;
        let mut sent = 0;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while got.len() < 256 {
            if sent < 256 {
                send(&mut a, seq, 32);
                seq += 32;
                sent += 32;
            }
            b.queues.rx[0].rx_burst(&mut got, 32).unwrap();
            let q = &b.queues.rx[0];
            assert!(!q.in_error(), "refused a completion: {:?}", q.stats());
            assert!(
                std::time::Instant::now() < deadline,
                "stalled: {:?}",
                q.stats()
            );
        }
        check_frames(&got, start);
        got.clear();
    }
    assert!(mb.counters().compressed_sessions > 0);
    assert_eq!(b.queues.rx[0].stats().bad_cqes, 0);
    close_balanced(a, b);
}

#[test]
fn compressed_completions_carry_each_frames_own_hash_and_the_titles_offload_results() {
    // Frames of eight flows spread by RSS over two queues: with compression the hash comes
    // from each mini-CQE and the checksum and header-type results from the title; both must
    // equal what plain CQEs report for the same frames.
    let flow_frame = |seq: u32| {
        udp_frame_sized(
            64 + (seq as usize * 13) % 200,
            seq,
            1000 + (seq % 8) as u16,
            9000,
        )
    };
    let frames: Vec<Vec<u8>> = (0..40).map(flow_frame).collect();
    let mut results = Vec::new();
    for compression in [true, false] {
        let (mut a, mut b, mb) = pair(PortConfig {
            rx_queues: 2,
            rx_cqe_compression: compression,
            ..small_port()
        });
        let mut batch: Vec<Mbuf> = frames
            .iter()
            .map(|f| {
                let mut m = a.port.pool().alloc().unwrap();
                m.set_data(f).unwrap();
                m
            })
            .collect();
        cxdirect_tests::send_all(&mut a.queues.tx[0], &mut batch);
        let mut got = Vec::new();
        for q in b.queues.rx.iter_mut() {
            while q.rx_burst(&mut got, 64).unwrap() > 0 {}
        }
        assert_eq!(got.len(), frames.len());
        let mut by_frame: Vec<_> = got
            .iter()
            .map(|m| {
                let seq = frames.iter().position(|f| *f == m.to_vec()).unwrap();
                (seq, m.flags)
            })
            .collect();
        by_frame.sort_by_key(|&(seq, _)| seq);
        assert!(by_frame.iter().enumerate().all(|(i, &(seq, _))| i == seq));
        let sessions = mb.counters().compressed_sessions;
        assert_eq!(sessions > 0, compression, "{sessions} sessions");
        results.push(by_frame);
        drop(got);
        close_balanced(a, b);
    }
    assert_eq!(results[0], results[1]);
    let hashes: std::collections::HashSet<_> = results[0]
        .iter()
        .map(|(_, f)| f.rx_rss_hash.expect("RSS hashed every frame"))
        .collect();
    assert_eq!(hashes.len(), 8, "one hash per flow");
    assert!(results[0]
        .iter()
        .all(|(_, f)| f.rx_ip_csum_good && f.rx_l4_csum_good && f.rx_l3_type == 2));
}

#[test]
fn a_title_with_the_wrong_owner_bit_is_noticed_and_the_cq_rebuilt() {
    // The title reads as not yet written while a completion behind the session reads as
    // written: after the compressed CQ's patience the slot is called skipped. How many slots
    // the device moved past is then unknown, so recovery must create the CQ again: keeping it,
    // the queue would wait at the slot after the title while the device writes past the
    // session.
    let (mut a, mut b, mb) = pair(small_port());
    let cqn = b.queues.rx[0].cqn();
    let title_op_own = (2u8 << 4) | (3 << 2); // receive, compressed format, first pass
    mb.inject(Fault::CorruptSession {
        cqn,
        slot: 0,
        patch: vec![(63, title_op_own | 1)],
    });
    send(&mut a, 0, 8);
    // Nothing after the title reads as written yet (the array's last byte, a byte count, says
    // owner 1): the queue can only wait. The next frame's completion, written past the
    // session, shows the title was skipped.
    let mut got = Vec::new();
    b.queues.rx[0].rx_burst(&mut got, 64).unwrap();
    send(&mut a, 8, 1);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !b.queues.rx[0].in_error() && std::time::Instant::now() < deadline {
        b.queues.rx[0].rx_burst(&mut got, 64).unwrap();
    }
    assert!(
        got.is_empty(),
        "{} frames from a session it cannot place",
        got.len()
    );
    assert!(
        b.queues.rx[0].in_error(),
        "the skipped title was not noticed"
    );
    recover_with_new_cq(&mut b);
    frames_arrive(&mut a, &mut b, 100, 20);
    close_balanced(a, b);
}

#[test]
fn a_title_overstating_its_session_is_refused_where_its_arrays_run_out_and_the_cq_rebuilt() {
    // A title claiming 44 completions for a session of 8: the ninth reads a mini-CQE array
    // the device never wrote, whose byte count the queue refuses. The device's next entry is
    // at slot 8, the driver's would be at 44: only a new CQ puts them back in step.
    let (mut a, mut b, mb) = pair(small_port());
    let cqn = b.queues.rx[0].cqn();
    mb.inject(Fault::CorruptSession {
        cqn,
        slot: 0,
        patch: vec![(0x2f, 44)],
    });
    send(&mut a, 0, 8);
    let got = receive(&mut b, 64);
    assert_eq!(got.len(), 8, "the eight the device wrote");
    check_frames(&got, 0);
    assert!(b.queues.rx[0].in_error());
    recover_with_new_cq(&mut b);
    drop(got);
    frames_arrive(&mut a, &mut b, 100, 20);
    close_balanced(a, b);
}
