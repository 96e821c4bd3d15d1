//! Packets through the driver's rings and the model: send on one function, receive on the other.

use cxdirect::{Device, InlineMode, Mbuf, Options, Port, PortConfig, TxQueue};
use cxdirect_apps::emulated::EmuBackend;
use cxdirect_emu::counters::CountersSnapshot;
use cxdirect_emu::{Device as Model, EmuConfig};
use cxdirect_tests::setup::{side, started_sides, Side};
use std::time::Duration;

fn pair(config: PortConfig) -> (Side, Side, Model, Model) {
    let (pa, pb, [a, b]) = started_sides(EmuConfig::default(), config);
    (pa, pb, a, b)
}

/// A UDP/IPv4 frame of `len` bytes carrying `seq` and a pattern, from source port `sport`.
fn frame(len: usize, seq: u32, sport: u16) -> Vec<u8> {
    cxdirect_tests::udp_frame_sized(len, seq, sport, 9000)
}

fn send_all(tx: &mut TxQueue<EmuBackend>, pool: &cxdirect::Mempool, frames: &[Vec<u8>]) {
    let mut batch: Vec<Mbuf> = Vec::with_capacity(frames.len());
    for f in frames {
        let mut m = pool.alloc().expect("tx buffer");
        m.set_data(f).unwrap();
        batch.push(m);
    }
    let mut spins = 0;
    while !batch.is_empty() {
        tx.tx_burst(&mut batch);
        spins += 1;
        assert!(spins < 100_000, "send stalled: {:?}", tx.stats());
    }
}

#[test]
fn frames_cross_the_pair_through_the_driver_in_every_inline_mode() {
    for inline in [InlineMode::None, InlineMode::Headers, InlineMode::Full] {
        let config = PortConfig {
            inline,
            ring_size: 256,
            pool_buffers: 2048,
            ..PortConfig::default()
        };
        let ((pa, mut txa, _rxa), (pb, _txb, mut rxb), model_a, _) = pair(config);
        let sizes = [60usize, 64, 128, 256, 512, 1000, 1514];
        let frames: Vec<Vec<u8>> = (0..300)
            .map(|i| frame(sizes[i % sizes.len()], i as u32, 1000))
            .collect();
        let before = model_a.counters();
        let mut got: Vec<Mbuf> = Vec::new();
        for chunk in frames.chunks(32) {
            send_all(&mut txa[0], pa.pool(), chunk);
            while rxb[0].rx_burst(&mut got, 256).unwrap() > 0 {}
        }
        assert_eq!(got.len(), frames.len(), "{inline:?}: every frame arrived");
        for (i, m) in got.iter().enumerate() {
            assert_eq!(
                m.to_vec(),
                frames[i],
                "{inline:?}: frame {i} byte-identical, in order"
            );
            assert!(m.flags.rx_ip_csum_good && m.flags.rx_l4_csum_good);
        }
        let spent: CountersSnapshot = model_a.counters().since(&before);
        if inline == InlineMode::Full {
            let payload_reads_full = spent.payload_reads;
            // Frames up to inline_max (256) were carried whole in the WQE.
            assert!(
                payload_reads_full < frames.len() as u64,
                "{payload_reads_full} payload reads"
            );
        }
        drop(got);
        drop(txa);
        drop(rxb);
        pa.close().unwrap().teardown().unwrap();
        pb.close().unwrap().teardown().unwrap();
    }
}

/// A frame of `len` bytes (at least an Ethernet header) that needs no IP: broadcast, a local
/// experimental EtherType, then a pattern of `seq`.
fn raw_frame(len: usize, seq: u32) -> Vec<u8> {
    let mut f: Vec<u8> = (0..len)
        .map(|i| (seq as u8).wrapping_mul(7) ^ i as u8)
        .collect();
    f[0..6].copy_from_slice(&[0xff; 6]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x0b]);
    f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
    f
}

#[test]
fn every_short_length_goes_whole_in_the_wqe_across_the_ring_s_end() {
    // Lengths around both block counts of a WQE carrying the packet whole (one basic block up
    // to 30 bytes, two up to 94) and past them, in bursts of odd sizes on a small ring, so
    // two-block WQEs keep straddling the ring's end.
    let config = PortConfig {
        inline: InlineMode::Full,
        ring_size: 64,
        pool_buffers: 1024,
        ..PortConfig::default()
    };
    let ((pa, mut txa, _rxa), (pb, _txb, mut rxb), model_a, _) = pair(config);
    let frames: Vec<Vec<u8>> = (0..3)
        .flat_map(|pass| (14..=130).map(move |len| (pass, len)))
        .map(|(pass, len)| raw_frame(len, pass * 1000 + len as u32))
        .collect();
    let before = model_a.counters();
    let inline_before = txa[0].stats().inline_packets;
    let mut got: Vec<Mbuf> = Vec::new();
    for (i, chunk) in frames.chunks(13).enumerate() {
        send_all(&mut txa[0], pa.pool(), chunk);
        let mut idle = 0;
        while got.len() < (i * 13 + chunk.len()).min(frames.len()) {
            if rxb[0].rx_burst(&mut got, 256).unwrap() == 0 {
                idle += 1;
                assert!(idle < 100_000, "frames stopped arriving at {}", got.len());
            }
        }
    }
    assert_eq!(got.len(), frames.len());
    for (m, f) in got.iter().zip(&frames) {
        assert_eq!(
            m.to_vec(),
            *f,
            "{}-byte frame byte-identical, in order",
            f.len()
        );
    }
    let spent = model_a.counters().since(&before);
    assert_eq!(spent.payload_reads, 0, "every frame went whole in its WQE");
    // Frames of more than the 18 inlined header bytes carry inline data.
    let with_data = frames.iter().filter(|f| f.len() > 18).count() as u64;
    assert_eq!(txa[0].stats().inline_packets - inline_before, with_data);
    assert_eq!(txa[0].stats().errors, 0);
    drop(got);
    drop(txa);
    drop(rxb);
    pa.close().unwrap().teardown().unwrap();
    pb.close().unwrap().teardown().unwrap();
}

#[test]
fn a_lone_packet_goes_by_blueflame_and_bursts_ring_one_doorbell() {
    let config = PortConfig {
        ring_size: 256,
        pool_buffers: 2048,
        ..PortConfig::default()
    };
    let ((pa, mut txa, _rxa), (pb, _txb, mut rxb), model_a, _) = pair(config);
    let before = model_a.counters();
    send_all(&mut txa[0], pa.pool(), &[frame(60, 1, 1)]);
    let lone = model_a.counters().since(&before);
    assert_eq!(
        (lone.doorbells, lone.bf_writes, lone.wqe_fetch_reads),
        (1, 1, 0),
        "BlueFlame spared the WQE fetch"
    );
    let before = model_a.counters();
    let burst: Vec<Vec<u8>> = (0..32).map(|i| frame(100, i, 1)).collect();
    send_all(&mut txa[0], pa.pool(), &burst);
    let spent = model_a.counters().since(&before);
    assert_eq!(spent.doorbells, 1, "one doorbell for a burst of 32");
    assert_eq!(spent.bf_writes, 0);
    let mut got = Vec::new();
    while rxb[0].rx_burst(&mut got, 64).unwrap() > 0 {}
    assert_eq!(got.len(), 33);
    assert!(
        txa[0].stats().cqes <= 2,
        "completions requested every 32 packets"
    );
    drop((txa, rxb, got));
    pa.close().unwrap().teardown().unwrap();
    pb.close().unwrap().teardown().unwrap();
}

#[test]
fn rss_spreads_four_flows_over_four_queues() {
    let config = PortConfig {
        rx_queues: 4,
        ring_size: 256,
        pool_buffers: 4096,
        ..PortConfig::default()
    };
    let ((pa, mut txa, _rxa), (pb, _txb, mut rxb), _, _) = pair(config);
    // Eight flows, 50 packets each.
    let mut frames = Vec::new();
    for round in 0..50u32 {
        for sport in [1000u16, 23456, 4242, 61000, 777, 31337, 12000, 50505] {
            frames.push(frame(80, round, sport));
        }
    }
    for chunk in frames.chunks(64) {
        send_all(&mut txa[0], pa.pool(), chunk);
    }
    let mut per_queue = Vec::new();
    for q in rxb.iter_mut() {
        let mut got = Vec::new();
        while q.rx_burst(&mut got, 256).unwrap() > 0 {}
        assert!(got.iter().all(|m| m.flags.rx_rss_hash.is_some()));
        per_queue.push(got.len());
    }
    assert_eq!(per_queue.iter().sum::<usize>(), frames.len());
    assert!(
        per_queue.iter().filter(|&&n| n > 0).count() >= 3,
        "flows spread over the queues: {per_queue:?}"
    );
    drop((txa, rxb));
    pa.close().unwrap().teardown().unwrap();
    pb.close().unwrap().teardown().unwrap();
}

/// Runs `count` generated packets from port A to port B through a threaded model, paced so the
/// receive ring never overflows, and returns the verifier.
fn verified_run(
    config: PortConfig,
    count: u64,
    sizes: Vec<usize>,
) -> (cxdirect_apps::testpmd::Verifier, u64) {
    use cxdirect_apps::testpmd::{generate, Generator, Verifier};
    let cfg = EmuConfig {
        exec: cxdirect_emu::ExecMode::Threaded,
        ..EmuConfig::default()
    };
    let (a, b) = Model::pair(cfg.clone(), cfg);
    let opts = Options {
        cmd_timeout: Duration::from_secs(5),
        ..Options::default()
    };
    let ring = u64::from(config.ring_size);
    let da = Device::bring_up(EmuBackend::new(a, "a"), opts.clone()).unwrap();
    let db = Device::bring_up(EmuBackend::new(b, "b"), opts).unwrap();
    let (pa, mut txa, rxa) = side(Port::start(da, config.clone()).unwrap());
    let (pb, txb, mut rxb) = side(Port::start(db, config).unwrap());
    let mut generator = Generator::new(sizes, 1).unwrap();
    let mut verifier = Verifier::default();
    let mut pending = Vec::new();
    let mut got = Vec::new();
    let mut received = 0u64;
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while received < count && std::time::Instant::now() < deadline {
        if generator.generated() - received + 32 <= ring && generator.generated() < count {
            generate(&mut generator, pa.pool(), &mut pending, 32, Some(count));
        }
        if !pending.is_empty() {
            txa[0].tx_burst(&mut pending);
        }
        got.clear();
        received += rxb[0].rx_burst(&mut got, 64).unwrap() as u64;
        for m in &got {
            verifier.check(m);
        }
        if got.is_empty() {
            std::thread::yield_now();
        }
    }
    let sent = txa[0].stats().packets;
    drop((txa, rxa, txb, rxb, pending, got));
    pa.close().unwrap().teardown().unwrap();
    pb.close().unwrap().teardown().unwrap();
    (verifier, sent)
}

#[test]
fn rings_wrap_a_thousand_times_and_cross_the_16_bit_index() {
    // A 64-entry ring and 70,000 packets: the rings wrap over a thousand times and the 16-bit
    // WQE index wraps once; every packet must arrive once, in order, intact.
    let config = PortConfig {
        ring_size: 64,
        pool_buffers: 1024,
        ..PortConfig::default()
    };
    let (v, sent) = verified_run(config, 70_000, vec![64]);
    assert_eq!(sent, 70_000);
    assert_eq!((v.good, v.corrupt, v.duplicate, v.gaps), (70_000, 0, 0, 0));
}

#[test]
fn multi_packet_wqes_wrap_the_ring_and_the_16_bit_index() {
    // Runs of inline and pointer packets in WQEs of up to 14 basic blocks, over a 64-entry
    // ring: 70,000 packets take over 100,000 basic blocks, so WQEs straddle the ring's end and
    // the 16-bit WQE index wraps.
    let config = PortConfig {
        ring_size: 64,
        pool_buffers: 1024,
        inline: InlineMode::Full,
        tx_multi_packet: true,
        ..PortConfig::default()
    };
    let (v, sent) = verified_run(config, 70_000, vec![200, 64, 1000]);
    assert_eq!(sent, 70_000);
    assert_eq!((v.good, v.corrupt, v.duplicate, v.gaps), (70_000, 0, 0, 0));
}

#[test]
fn mixed_sizes_up_to_jumbo_arrive_verified() {
    let config = PortConfig {
        ring_size: 256,
        mtu: 9000,
        buf_size: 9216 + 128,
        pool_buffers: 2048,
        ..PortConfig::default()
    };
    let sizes = vec![60, 64, 128, 256, 512, 1024, 1500, 4096, 9000];
    let (v, sent) = verified_run(config, 100_000, sizes);
    assert_eq!(sent, 100_000);
    assert_eq!((v.good, v.corrupt, v.duplicate, v.gaps), (100_000, 0, 0, 0));
}

#[test]
fn an_oversized_packet_is_refused_and_counted() {
    let config = PortConfig {
        ring_size: 64,
        pool_buffers: 4096,
        buf_size: 4096,
        ..PortConfig::default()
    };
    let ((pa, mut txa, _rxa), (pb, _txb, mut rxb), model_a, _) = pair(config);
    let before = model_a.counters();
    let mut batch = Vec::new();
    let mut big = pa.pool().alloc().unwrap();
    big.set_data(&frame(1600, 0, 1)).unwrap(); // above a 1500-byte MTU
    batch.push(big);
    let mut ok = pa.pool().alloc().unwrap();
    ok.set_data(&frame(100, 1, 1)).unwrap();
    batch.push(ok);
    assert_eq!(
        txa[0].tx_burst(&mut batch),
        2,
        "both taken: one refused, one sent"
    );
    assert_eq!(txa[0].stats().errors, 1, "the refusal shows in oerrors");
    assert_eq!(txa[0].stats().packets, 1);
    assert_eq!(
        model_a.counters().since(&before).tx_frames,
        1,
        "the oversized packet never reached the device"
    );
    let mut got = Vec::new();
    while rxb[0].rx_burst(&mut got, 8).unwrap() > 0 {}
    assert_eq!(got.len(), 1);
    drop((txa, rxb, got));
    pa.close().unwrap().teardown().unwrap();
    pb.close().unwrap().teardown().unwrap();
}

#[test]
fn an_empty_pool_shows_in_rx_nombuf_and_recovers() {
    // 64-entry ring, 128-buffer pool: holding what arrives drains the pool.
    let config = PortConfig {
        ring_size: 64,
        pool_buffers: 128,
        ..PortConfig::default()
    };
    let ((pa, mut txa, _rxa), (mut pb, _txb, mut rxb), _, model_b) = pair(config);
    let tx_pool = pa.pool().clone();
    let mut held = Vec::new();
    let mut sent = 0u32;
    for _ in 0..6 {
        let frames: Vec<Vec<u8>> = (0..32).map(|i| frame(80, sent + i, 1)).collect();
        sent += 32;
        send_all(&mut txa[0], &tx_pool, &frames);
        while rxb[0].rx_burst(&mut held, 64).unwrap() > 0 {}
    }
    assert!(rxb[0].stats().nombuf > 0, "refill found the pool empty");
    assert!(
        model_b.counters().rx_out_of_buffer > 0,
        "frames with no posted buffer were dropped (imissed)"
    );
    let received = held.len();
    let missed = pb
        .rx_missed()
        .unwrap()
        .expect("the model has Q counter sets");
    assert_eq!(
        missed + received as u64,
        u64::from(sent),
        "the port's Q counter accounts for every frame not received"
    );
    assert_eq!(missed, model_b.counters().rx_out_of_buffer);
    // Give the buffers back: the ring refills and traffic flows again.
    held.clear();
    rxb[0].rx_burst(&mut held, 64).unwrap();
    assert_eq!(rxb[0].posted(), 64, "ring full again");
    let frames: Vec<Vec<u8>> = (0..32).map(|i| frame(80, 10_000 + i, 1)).collect();
    send_all(&mut txa[0], &tx_pool, &frames);
    while rxb[0].rx_burst(&mut held, 64).unwrap() > 0 {}
    assert_eq!(
        held.len(),
        32,
        "after recovery every frame arrives ({received} before)"
    );
    assert_eq!(
        pb.rx_missed().unwrap(),
        Some(missed),
        "nothing missed since"
    );
    drop((txa, rxb, held));
    pa.close().unwrap().teardown().unwrap();
    pb.close().unwrap().teardown().unwrap();
}

#[test]
fn port_stats_sum_queues_running_on_their_own_threads() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    const COUNT: u64 = 3000;
    const LEN: usize = 100;
    let config = PortConfig {
        ring_size: 128,
        pool_buffers: 1024,
        ..PortConfig::default()
    };
    let ((mut pa, mut txa, _rxa), (mut pb, _txb, mut rxb), _, model_b) = pair(config);
    let tx_pool = pa.pool().clone();
    let mut tx = txa.remove(0);
    let mut rx = rxb.remove(0);
    let sender_done = Arc::new(AtomicBool::new(false));
    let sender = {
        let done = sender_done.clone();
        std::thread::spawn(move || {
            for chunk in (0..COUNT).collect::<Vec<_>>().chunks(32) {
                let frames: Vec<Vec<u8>> = chunk.iter().map(|&i| frame(LEN, i as u32, 7)).collect();
                send_all(&mut tx, &tx_pool, &frames);
            }
            done.store(true, Ordering::Release);
            tx
        })
    };
    let receiver = {
        let done = sender_done.clone();
        std::thread::spawn(move || {
            let mut got = Vec::new();
            let mut received = 0u64;
            let mut idle_since_done = 0;
            while idle_since_done < 1000 {
                got.clear();
                let n = rx.rx_burst(&mut got, 64).unwrap();
                received += n as u64;
                if n == 0 && done.load(Ordering::Acquire) {
                    idle_since_done += 1;
                    std::thread::yield_now();
                }
            }
            (rx, received)
        })
    };
    // The port reads what the queues publish while they run elsewhere; it only grows.
    let mut last = 0;
    while !sender.is_finished() {
        let now = pa.xstats().tx[0].packets;
        assert!(now >= last, "published counters never go back");
        last = now;
        std::thread::yield_now();
    }
    let tx = sender.join().unwrap();
    let (rx, received) = receiver.join().unwrap();
    let a = pa.stats().unwrap();
    assert_eq!(
        (a.opackets, a.obytes, a.oerrors),
        (COUNT, COUNT * LEN as u64, 0)
    );
    assert!(pa.xstats().tx[0].doorbells > 0);
    let b = pb.stats().unwrap();
    eprintln!("receiving port: {b:?}");
    assert_eq!(b.ipackets, received);
    assert_eq!(b.ibytes, received * LEN as u64);
    assert_eq!(
        b.ipackets + b.imissed,
        COUNT,
        "every frame was received or counted missed: {b:?}"
    );
    assert_eq!(b.imissed, model_b.counters().rx_out_of_buffer);
    assert_eq!(b.ierrors, 0);
    drop((tx, rx, txa, rxb));
    pa.close().unwrap().teardown().unwrap();
    pb.close().unwrap().teardown().unwrap();
}

#[test]
fn checksum_offload_and_vlan_insertion_are_done_by_the_device() {
    let config = PortConfig {
        ring_size: 64,
        pool_buffers: 1024,
        ..PortConfig::default()
    };
    let ((pa, mut txa, _rxa), (pb, _txb, mut rxb), _, _) = pair(config);
    let good = frame(200, 7, 4242);
    let mut blank = good.clone();
    blank[24..26].copy_from_slice(&[0, 0]); // IPv4 header checksum
    blank[40..42].copy_from_slice(&[0, 0]); // UDP checksum
    let mut m = pa.pool().alloc().unwrap();
    m.set_data(&blank).unwrap();
    m.flags.tx_ip_csum = true;
    m.flags.tx_l4_csum = true;
    let mut tagged = pa.pool().alloc().unwrap();
    tagged.set_data(&good).unwrap();
    tagged.flags.tx_vlan = Some(0x2005);
    let mut batch = vec![m, tagged];
    while !batch.is_empty() {
        txa[0].tx_burst(&mut batch);
    }
    let mut got = Vec::new();
    while rxb[0].rx_burst(&mut got, 8).unwrap() > 0 {}
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].to_vec(), good, "the device filled in both checksums");
    assert!(got[0].flags.rx_ip_csum_good && got[0].flags.rx_l4_csum_good);
    let vlan = got[1].to_vec();
    assert_eq!(vlan.len(), good.len() + 4);
    assert_eq!(
        &vlan[12..16],
        &[0x81, 0x00, 0x20, 0x05],
        "802.1Q tag inserted after the MACs"
    );
    assert_eq!(&vlan[16..], &good[12..]);
    drop((txa, rxb, got));
    pa.close().unwrap().teardown().unwrap();
    pb.close().unwrap().teardown().unwrap();
}

#[test]
fn a_multi_segment_packet_is_gathered_into_one_frame() {
    for inline in [InlineMode::None, InlineMode::Headers, InlineMode::Full] {
        let config = PortConfig {
            inline,
            ring_size: 64,
            pool_buffers: 1024,
            ..PortConfig::default()
        };
        let ((pa, mut txa, _rxa), (pb, _txb, mut rxb), _, _) = pair(config);
        let whole = frame(1400, 3, 777);
        // Headers in one buffer, the payload split over two more.
        let mut head = pa.pool().alloc().unwrap();
        head.set_data(&whole[..42]).unwrap();
        let mut middle = pa.pool().alloc().unwrap();
        middle.set_data(&whole[42..700]).unwrap();
        let mut tail = pa.pool().alloc().unwrap();
        tail.set_data(&whole[700..]).unwrap();
        head.chain(middle);
        head.chain(tail);
        assert_eq!((head.segment_count(), head.pkt_len()), (3, whole.len()));
        assert_eq!(head.to_vec(), whole);
        let mut batch = vec![head];
        while !batch.is_empty() {
            txa[0].tx_burst(&mut batch);
        }
        let mut got = Vec::new();
        while rxb[0].rx_burst(&mut got, 8).unwrap() > 0 {}
        assert_eq!(got.len(), 1, "{inline:?}");
        assert_eq!(
            got[0].to_vec(),
            whole,
            "{inline:?}: segments gathered in order"
        );
        drop((txa, rxb, got));
        pa.close().unwrap().teardown().unwrap();
        pb.close().unwrap().teardown().unwrap();
    }
}

#[test]
fn every_sent_buffer_goes_back_to_the_pool_single_or_chained() {
    // Completions every 128 WQEs free many buffers at once; every fifth packet is three chained
    // buffers.
    let config = PortConfig {
        ring_size: 256,
        pool_buffers: 2048,
        cqe_every: 128,
        ..PortConfig::default()
    };
    let ((pa, mut txa, rxa), (pb, txb, mut rxb), _, _) = pair(config);
    let pool = pa.pool().clone();
    let idle = pool.available();
    let whole = frame(900, 1, 5);
    let mut sent_buffers = 0;
    let mut got = Vec::new();
    for round in 0..20u32 {
        let mut batch = Vec::new();
        for i in 0..100u32 {
            let mut m = pool.alloc().expect("tx buffer");
            if (round * 100 + i) % 5 == 0 {
                m.set_data(&whole[..300]).unwrap();
                for piece in [&whole[300..600], &whole[600..]] {
                    let mut seg = pool.alloc().expect("tx buffer");
                    seg.set_data(piece).unwrap();
                    m.chain(seg);
                }
                sent_buffers += 3;
            } else {
                m.set_data(&whole).unwrap();
                sent_buffers += 1;
            }
            batch.push(m);
        }
        while !batch.is_empty() {
            txa[0].tx_burst(&mut batch);
            rxb[0].rx_burst(&mut got, 64).unwrap();
            got.clear();
        }
    }
    // The last completions are taken by the next burst's reaping (an empty burst reaps too).
    for _ in 0..10_000 {
        txa[0].tx_burst(&mut Vec::new());
        if txa[0].in_flight() == 0 {
            break;
        }
        std::thread::yield_now();
    }
    assert_eq!(txa[0].in_flight(), 0, "every send completed");
    assert!(sent_buffers > 2000, "more buffers sent than the pool holds");
    assert_eq!(pool.available(), idle, "every buffer sent is back");
    // Each one once: the pool hands out exactly as many distinct buffers as it holds.
    let mut all = Vec::new();
    assert_eq!(pool.alloc_bulk(&mut all, idle as usize + 1), idle as usize);
    let mut offsets: Vec<usize> = all.iter().map(Mbuf::memory_offset).collect();
    offsets.sort_unstable();
    offsets.dedup();
    assert_eq!(offsets.len(), idle as usize, "no buffer handed out twice");
    drop(all);
    drop((txa, rxa, txb, rxb, got));
    pa.close().unwrap().teardown().unwrap();
    pb.close().unwrap().teardown().unwrap();
}

#[test]
fn buffers_of_many_pools_in_flight_at_once_each_go_back_to_their_own_pool() {
    // One send queue carries buffers of six pools (every port's of three pairs) in runs and
    // alternations, some chained: a queue keeps a few pools' buffers by index and the rest
    // whole, and every buffer must return to the pool it came from, whether its send
    // completes, the queue is recovered, or the queue is dropped with sends in flight.
    let config = PortConfig {
        ring_size: 256,
        pool_buffers: 1024,
        cqe_every: 16,
        ..PortConfig::default()
    };
    let (first, second, _, _) = pair(config.clone());
    let (third, fourth, _, _) = pair(config.clone());
    let (fifth, sixth, _, _) = pair(config);
    let ((pa, mut txa, rxa), others) = (first, [second, third, fourth, fifth, sixth]);
    let mut pools = vec![pa.pool().clone()];
    pools.extend(others.iter().map(|(other, _, _)| other.pool().clone()));
    let idle: Vec<u32> = pools.iter().map(cxdirect::Mempool::available).collect();
    let payload = frame(300, 7, 5);
    let packet = |pool: &cxdirect::Mempool, chained: bool| {
        let mut m = pool.alloc().expect("tx buffer");
        if chained {
            m.set_data(&payload[..100]).unwrap();
            let mut tail = pool.alloc().expect("tx buffer");
            tail.set_data(&payload[100..]).unwrap();
            m.chain(tail);
        } else {
            m.set_data(&payload).unwrap();
        }
        m
    };
    let settle = |tx: &mut TxQueue<EmuBackend>| {
        for _ in 0..10_000 {
            tx.tx_burst(&mut Vec::new());
            if tx.in_flight() == 0 {
                break;
            }
            std::thread::yield_now();
        }
    };
    let mut port = pa;
    for round in 0..40usize {
        let mut batch = Vec::new();
        for i in 0..48usize {
            // Runs of one pool early on, every packet from another pool later.
            let which = if round < 20 {
                (i / 8 + round) % 6
            } else {
                (i + round) % 6
            };
            batch.push(packet(&pools[which], (i + round) % 7 == 0));
        }
        while !batch.is_empty() {
            txa[0].tx_burst(&mut batch);
        }
        settle(&mut txa[0]);
        if txa[0].in_error() {
            // The device refused a buffer of another function's pool: recovery flushes what
            // was in flight.
            port.recover_tx(&mut txa[0]).unwrap();
        }
        assert_eq!(
            txa[0].in_flight(),
            0,
            "round {round}: every send completed or flushed"
        );
        let now: Vec<u32> = pools.iter().map(cxdirect::Mempool::available).collect();
        assert_eq!(
            now, idle,
            "round {round}: every buffer back in its own pool"
        );
    }
    // Dropped with sends in flight: the buffers come back once the port is closed.
    let mut batch: Vec<Mbuf> = (0..60).map(|i| packet(&pools[i % 6], i % 9 == 0)).collect();
    while !batch.is_empty() {
        txa[0].tx_burst(&mut batch);
    }
    drop((txa, rxa));
    port.close().unwrap().teardown().unwrap();
    for (other, _, _) in others {
        other.close().unwrap().teardown().unwrap();
    }
    for (i, pool) in pools.iter().enumerate() {
        assert_eq!(
            pool.available(),
            pool.capacity(),
            "pool {i}: every buffer is back after teardown"
        );
    }
}

/// The programs' receive poll (`cxdirect_apps::poll_rx`) returns what arrives, and gives up
/// once its deadline has passed with nothing, losing nothing that arrives later.
#[test]
fn poll_rx_returns_what_arrives_and_gives_up_at_its_deadline() {
    let config = PortConfig {
        ring_size: 64,
        pool_buffers: 512,
        ..PortConfig::default()
    };
    let model = EmuConfig {
        exec: cxdirect_emu::ExecMode::Threaded,
        poll_window: Duration::from_millis(5),
        ..EmuConfig::default()
    };
    let ((pa, mut txa, rxa), (pb, txb, mut rxb), _) = started_sides(model, config);
    let mut got: Vec<Mbuf> = Vec::new();
    let start = std::time::Instant::now();
    let none = cxdirect_apps::poll_rx(&mut rxb[0], &mut got, 4, start + Duration::from_millis(20));
    assert_eq!(none, None, "nothing was sent");
    assert!(
        start.elapsed() >= Duration::from_millis(20),
        "gave up only once the deadline had passed"
    );
    assert!(got.is_empty());
    let sent = frame(64, 7, 1000);
    send_all(&mut txa[0], pa.pool(), std::slice::from_ref(&sent));
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let n = cxdirect_apps::poll_rx(&mut rxb[0], &mut got, 4, deadline);
    assert_eq!(n, Some(1), "the frame sent arrived");
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].to_vec(), sent);
    drop(got);
    drop((txa, rxa, txb, rxb));
    pa.close().unwrap().teardown().unwrap();
    pb.close().unwrap().teardown().unwrap();
}

/// A port's `tx_priority` puts its send queues' packets in that priority's traffic class:
/// with A's priority 3 in class 5 limited to 100 Mb/s (`Device::set_priority_class`,
/// `Device::set_class_rate_limit`, as `dcb ets` and `dcb maxrate` set them through mlx5e),
/// 600 frames of 1,024 bytes from a port at priority 3 take at least what passes the class's
/// 64 KiB burst at 12.5 MB/s, about 43 ms, and all arrive; a port at priority 0 (class 0, no
/// limit) is not held. A priority above 7, a class beyond the port's, or a rate of 0 is
/// refused.
#[test]
fn a_ports_tx_priority_puts_its_packets_in_that_prioritys_class() {
    const FRAMES: usize = 600;
    const LEN: usize = 1024;
    let time_to_send = |priority: u8| {
        let config = PortConfig {
            tx_priority: priority,
            ring_size: 1024,
            pool_buffers: 4096,
            ..PortConfig::default()
        };
        // A device thread runs the device's timers, which send what the class held back.
        let model = EmuConfig {
            exec: cxdirect_emu::ExecMode::Threaded,
            ..EmuConfig::default()
        };
        let ((mut pa, mut txa, _rxa), (pb, _txb, mut rxb), _models) = started_sides(model, config);
        cxdirect_tests::traffic_class::limit_priority(pa.device(), 3, 5);
        let frames: Vec<Vec<u8>> = (0..FRAMES).map(|i| frame(LEN, i as u32, 1000)).collect();
        let start = std::time::Instant::now();
        let mut got: Vec<Mbuf> = Vec::new();
        for chunk in frames.chunks(32) {
            send_all(&mut txa[0], pa.pool(), chunk);
            while rxb[0].rx_burst(&mut got, 256).unwrap() > 0 {}
        }
        while got.len() < FRAMES && start.elapsed() < Duration::from_secs(20) {
            rxb[0].rx_burst(&mut got, 256).unwrap();
        }
        let elapsed = start.elapsed();
        assert_eq!(
            got.len(),
            FRAMES,
            "priority {priority}: every frame arrived"
        );
        let dev = pa.device();
        assert!(matches!(
            dev.set_priority_class(8, 0),
            Err(cxdirect::DriverError::Config(_))
        ));
        let classes = dev.traffic_classes();
        assert_eq!(classes, 8, "the model's port: mlx5_max_tc 7");
        assert!(matches!(
            dev.set_class_rate_limit(classes, Some(100)),
            Err(cxdirect::DriverError::Config(_))
        ));
        assert!(matches!(
            dev.set_class_rate_limit(5, Some(0)),
            Err(cxdirect::DriverError::Config(_))
        ));
        drop(got);
        drop(txa);
        drop(rxb);
        pa.close().unwrap().teardown().unwrap();
        pb.close().unwrap().teardown().unwrap();
        elapsed
    };
    let held = time_to_send(3);
    let least = Duration::from_secs_f64(
        ((FRAMES * LEN) as f64 - 66.0 * 1024.0)
            / cxdirect_tests::traffic_class::LIMIT_BYTES_PER_SECOND,
    );
    assert!(
        held >= least,
        "priority 3: at least {least:?} at 100 Mb/s: {held:?}"
    );
    let free = time_to_send(0);
    assert!(
        free < held,
        "priority 0 is not held: {free:?} against {held:?}"
    );
}
