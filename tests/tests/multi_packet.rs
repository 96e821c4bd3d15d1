//! Enhanced multi-packet send WQEs through the driver: runs of a burst share one WQE, every
//! packet arrives intact and in order, and every buffer goes back to its pool.

use cxdirect::{InlineMode, Mbuf, PortConfig};
use cxdirect_emu::counters::QueueKind;
use cxdirect_emu::EmuConfig;
use cxdirect_tests::setup::started_sides as pair;

/// How packet `i` of the mixed burst is sent.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    Plain,
    /// Checksums left blank for the device to fill in (a run breaks where this changes).
    Checksums,
    /// A VLAN tag to insert (never in a run).
    Vlan,
    /// Two chained buffers (never in a run).
    Chained,
}

fn shape(i: usize) -> Shape {
    if i % 13 == 5 {
        Shape::Vlan
    } else if i % 17 == 9 {
        Shape::Chained
    } else if (i / 7) % 3 == 1 {
        Shape::Checksums
    } else {
        Shape::Plain
    }
}

const SIZES: [usize; 6] = [60, 64, 150, 300, 1000, 1514];
const VLAN_TCI: u16 = 0x2007;

/// Packet `i` as the application hands it over, and the frame that must arrive.
fn packet(pool: &cxdirect::Mempool, i: usize) -> (Mbuf, Vec<u8>) {
    let good = cxdirect_tests::udp_frame_sized(SIZES[i % SIZES.len()], i as u32, 4000, 9000);
    let mut m = pool.alloc().expect("tx buffer");
    match shape(i) {
        Shape::Plain => {
            m.set_data(&good).unwrap();
            (m, good)
        }
        Shape::Checksums => {
            let mut blank = good.clone();
            blank[24..26].copy_from_slice(&[0, 0]);
            blank[40..42].copy_from_slice(&[0, 0]);
            m.set_data(&blank).unwrap();
            m.flags.tx_ip_csum = true;
            m.flags.tx_l4_csum = true;
            (m, good)
        }
        Shape::Vlan => {
            m.set_data(&good).unwrap();
            m.flags.tx_vlan = Some(VLAN_TCI);
            let mut tagged = good[..12].to_vec();
            tagged.extend_from_slice(&[0x81, 0x00]);
            tagged.extend_from_slice(&VLAN_TCI.to_be_bytes());
            tagged.extend_from_slice(&good[12..]);
            (m, tagged)
        }
        Shape::Chained => {
            m.set_data(&good[..30]).unwrap();
            let mut rest = pool.alloc().expect("tx buffer");
            rest.set_data(&good[30..]).unwrap();
            m.chain(rest);
            (m, good)
        }
    }
}

#[test]
fn runs_of_a_burst_share_multi_packet_wqes_in_every_inline_mode() {
    for inline in [InlineMode::None, InlineMode::Headers, InlineMode::Full] {
        let config = PortConfig {
            inline,
            inline_max: 200,
            ring_size: 64,
            pool_buffers: 1024,
            // A completion for every WQE, so that every buffer is back once the sends end.
            cqe_every: 1,
            tx_multi_packet: true,
            ..PortConfig::default()
        };
        let ((pa, mut txa, rxa), (pb, txb, mut rxb), [model_a, _]) =
            pair(EmuConfig::default(), config);
        let pool = pa.pool().clone();
        let idle = pool.available();
        let before = model_a.counters();
        let count = 600;
        let mut expected = Vec::new();
        let mut got: Vec<Mbuf> = Vec::new();
        for burst in 0..count / 30 {
            let mut batch = Vec::new();
            for i in burst * 30..(burst + 1) * 30 {
                let (m, frame) = packet(&pool, i);
                batch.push(m);
                expected.push(frame);
            }
            cxdirect_tests::send_all(&mut txa[0], &mut batch);
            while rxb[0].rx_burst(&mut got, 256).unwrap() > 0 {}
        }
        assert_eq!(got.len(), count, "{inline:?}: every packet arrived");
        for (i, m) in got.iter().enumerate() {
            assert_eq!(
                m.to_vec(),
                expected[i],
                "{inline:?}: packet {i} intact, in order"
            );
            assert!(
                m.flags.rx_ip_csum_good && m.flags.rx_l4_csum_good,
                "{inline:?}: packet {i} checksums"
            );
        }
        let stats = txa[0].stats();
        let wqes = model_a
            .queue_counters(QueueKind::Sq, txa[0].sqn())
            .unwrap()
            .wqes;
        let singles = (0..count)
            .filter(|&i| matches!(shape(i), Shape::Vlan | Shape::Chained))
            .count() as u64;
        assert!(
            stats.multi_packet_wqes > 0 && wqes < count as u64 / 2,
            "{inline:?}: {wqes} WQEs for {count} packets, {} of several",
            stats.multi_packet_wqes
        );
        assert!(
            wqes >= stats.multi_packet_wqes + singles,
            "{inline:?}: VLAN and chained packets went alone"
        );
        let spent = model_a.counters().since(&before);
        assert_eq!(spent.tx_frames, count as u64);
        if inline == InlineMode::Full {
            // Every single-segment packet within inline_max went whole in its WQE (a run or
            // its own); the device read none of their bytes.
            let short = |i: &usize| SIZES[i % SIZES.len()] <= 200;
            let inlined = (0..count)
                .filter(short)
                .filter(|&i| matches!(shape(i), Shape::Plain | Shape::Checksums))
                .count() as u64;
            assert_eq!(stats.inline_packets, inlined);
            let long_bytes: u64 = (0..count)
                .filter(|i| !short(i) || matches!(shape(*i), Shape::Vlan | Shape::Chained))
                .map(|i| SIZES[i % SIZES.len()] as u64)
                .sum();
            assert!(
                spent.payload_read_bytes <= long_bytes,
                "{} payload bytes read, {long_bytes} not inline",
                spent.payload_read_bytes
            );
        }
        drop(got);
        for _ in 0..10_000 {
            txa[0].tx_burst(&mut Vec::new());
            if txa[0].in_flight() == 0 {
                break;
            }
        }
        assert_eq!(txa[0].in_flight(), 0, "{inline:?}: every send completed");
        assert_eq!(pool.available(), idle, "{inline:?}: every buffer is back");
        drop((txa, rxa, txb, rxb));
        pa.close().unwrap().teardown().unwrap();
        pb.close().unwrap().teardown().unwrap();
    }
}

#[test]
fn buffers_of_runs_in_flight_when_the_queue_goes_are_all_returned() {
    let config = PortConfig {
        ring_size: 256,
        pool_buffers: 2048,
        cqe_every: 256,
        tx_multi_packet: true,
        ..PortConfig::default()
    };
    let ((pa, mut txa, rxa), (pb, txb, rxb), _) = pair(EmuConfig::default(), config);
    let pool = pa.pool().clone();
    let idle = pool.available();
    let frame = cxdirect_tests::udp_frame_sized(64, 1, 4000, 9000);
    let mut batch: Vec<Mbuf> = (0..200)
        .map(|_| {
            let mut m = pool.alloc().unwrap();
            m.set_data(&frame).unwrap();
            m
        })
        .collect();
    cxdirect_tests::send_all(&mut txa[0], &mut batch);
    assert!(txa[0].stats().multi_packet_wqes > 0);
    assert!(
        txa[0].in_flight() > 100,
        "completions are rare: most still in flight"
    );
    assert_eq!(pool.available(), idle - txa[0].in_flight() as u32);
    drop((txa, rxa, txb, rxb));
    pa.close().unwrap().teardown().unwrap();
    assert_eq!(
        pool.available(),
        2048,
        "the dropped queue's runs (and the receive ring's buffers) went back after teardown"
    );
    pb.close().unwrap().teardown().unwrap();
}

#[test]
fn without_the_device_capability_each_packet_gets_its_own_wqe() {
    let config = PortConfig {
        ring_size: 64,
        pool_buffers: 1024,
        tx_multi_packet: true,
        ..PortConfig::default()
    };
    let model = EmuConfig {
        multi_packet_send: false,
        ..EmuConfig::default()
    };
    let ((pa, mut txa, rxa), (pb, txb, mut rxb), [model_a, _]) = pair(model, config);
    let pool = pa.pool().clone();
    let mut batch = Vec::new();
    let mut expected = Vec::new();
    for i in 0..48 {
        let frame = cxdirect_tests::udp_frame_sized(SIZES[i % SIZES.len()], i as u32, 1, 2);
        let mut m = pool.alloc().unwrap();
        m.set_data(&frame).unwrap();
        batch.push(m);
        expected.push(frame);
    }
    cxdirect_tests::send_all(&mut txa[0], &mut batch);
    let mut got = Vec::new();
    while rxb[0].rx_burst(&mut got, 64).unwrap() > 0 {}
    let got: Vec<Vec<u8>> = got.iter().map(Mbuf::to_vec).collect();
    assert_eq!(got, expected);
    assert_eq!(txa[0].stats().multi_packet_wqes, 0);
    let q = model_a.queue_counters(QueueKind::Sq, txa[0].sqn()).unwrap();
    assert_eq!(q.wqes, 48, "one SEND WQE per packet");
    drop((txa, rxa, txb, rxb));
    pa.close().unwrap().teardown().unwrap();
    pb.close().unwrap().teardown().unwrap();
}
