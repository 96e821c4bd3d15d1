//! Striding receive queues through the driver: packets land in strides of shared buffers and
//! arrive intact and in order, one receive WQE serves hundreds of them, a buffer goes back to
//! its pool only when its last packet is dropped, forwarding such packets works, a completion
//! out of step is refused and recovered from, and a device without the capability falls back.

use cxdirect::{
    ConfigError, Device, DriverError, Mbuf, Options, Port, PortConfig, RxStriding, SharedRxConfig,
};
use cxdirect_apps::emulated::EmuBackend;
use cxdirect_emu::counters::QueueKind;
use cxdirect_emu::{Device as Model, EmuConfig, Fault};
use cxdirect_tests::setup::started_sides as pair;
use std::time::Duration;

fn striding_config() -> PortConfig {
    PortConfig {
        ring_size: 256,
        pool_buffers: 4096,
        rx_striding: Some(RxStriding::default()),
        ..PortConfig::default()
    }
}

const SIZES: [usize; 5] = [60, 64, 200, 1000, 1514];

fn frames(from: usize, count: usize) -> Vec<Vec<u8>> {
    (from..from + count)
        .map(|i| cxdirect_tests::udp_frame_sized(SIZES[i % SIZES.len()], i as u32, 4000, 9000))
        .collect()
}

fn send(pool: &cxdirect::Mempool, tx: &mut cxdirect::TxQueue<EmuBackend>, frames: &[Vec<u8>]) {
    let mut batch: Vec<Mbuf> = frames
        .iter()
        .map(|f| {
            let mut m = pool.alloc().expect("tx buffer");
            m.set_data(f).unwrap();
            m
        })
        .collect();
    cxdirect_tests::send_all(tx, &mut batch);
}

#[test]
fn packets_fill_strides_arrive_intact_and_buffers_return_with_their_last_packet() {
    let ((pa, mut txa, _rxa), (pb, _txb, mut rxb), [_, model_b]) =
        pair(EmuConfig::default(), striding_config());
    assert!(rxb[0].is_striding());
    let stride_pool = pb.striding_pool().expect("striding pool").clone();
    let idle = stride_pool.available();
    let sent = frames(0, 3000);
    let mut got: Vec<Mbuf> = Vec::new();
    for chunk in sent.chunks(30) {
        send(pa.pool(), &mut txa[0], chunk);
        while rxb[0].rx_burst(&mut got, 64).unwrap() > 0 {}
    }
    assert_eq!(got.len(), sent.len(), "every packet arrived");
    for (i, (m, f)) in got.iter().zip(&sent).enumerate() {
        assert_eq!(&m.to_vec(), f, "packet {i}");
        assert!(m.flags.rx_ip_csum_good && m.flags.rx_l4_csum_good);
    }
    let stats = rxb[0].stats();
    assert_eq!((stats.packets, stats.bad_cqes), (3000, 0));
    let wqes = model_b
        .queue_counters(QueueKind::Rq, rxb[0].rqn())
        .expect("counted")
        .wqes;
    // 3000 packets of 1..24 strides of 64 bytes fill WQEs of 512 strides, each closed with
    // a filler of fewer than 24 strides at most.
    let strides: u64 = sent.iter().map(|f| f.len().div_ceil(64) as u64).sum();
    assert!(
        (strides / 512..=strides / (512 - 23) + 1).contains(&wqes),
        "{wqes} receive WQEs for {strides} strides"
    );
    // The held packets keep their buffers out of the pool, besides those posted.
    assert!(u64::from(idle - stride_pool.available()) >= wqes);
    // A received packet can be rewritten and shrunk, never grown into its neighbour.
    let mut first = got.remove(0);
    assert!(matches!(
        first.set_data(&[0u8; 61]),
        Err(DriverError::BufferTooSmall { need: 61, capacity, .. }) if capacity == first.len()
    ));
    first.set_data(&[7u8; 42]).unwrap();
    assert_eq!(got[0].to_vec(), sent[1], "the next packet is untouched");
    drop(first);
    drop(got);
    assert_eq!(stride_pool.available(), idle, "every buffer is back");
}

#[test]
fn packets_received_into_strides_can_be_forwarded_with_and_without_multi_packet_wqes() {
    for tx_multi_packet in [false, true] {
        let config = PortConfig {
            tx_multi_packet,
            cqe_every: 1,
            ..striding_config()
        };
        let ((pa, mut txa, mut rxa), (pb, mut txb, mut rxb), _) =
            pair(EmuConfig::default(), config);
        let stride_pool = pb.striding_pool().expect("striding pool").clone();
        let idle = stride_pool.available();
        let sent = frames(7, 600);
        let mut back: Vec<Mbuf> = Vec::new();
        for chunk in sent.chunks(20) {
            send(pa.pool(), &mut txa[0], chunk);
            let mut got = Vec::new();
            while rxb[0].rx_burst(&mut got, 64).unwrap() > 0 {}
            cxdirect_tests::send_all(&mut txb[0], &mut got);
            while rxa[0].rx_burst(&mut back, 64).unwrap() > 0 {}
        }
        assert_eq!(back.len(), sent.len(), "multi-packet {tx_multi_packet}");
        for (m, f) in back.iter().zip(&sent) {
            assert_eq!(&m.to_vec(), f);
        }
        // Completions return the forwarded packets' references.
        let mut none = Vec::new();
        for _ in 0..100 {
            txb[0].tx_burst(&mut none);
            if stride_pool.available() == idle {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(
            stride_pool.available(),
            idle,
            "multi-packet {tx_multi_packet}"
        );
    }
}

#[test]
fn a_completion_out_of_step_is_refused_and_recovery_reposts_the_ring() {
    let ((pa, mut txa, _rxa), (mut pb, _txb, mut rxb), [_, model_b]) =
        pair(EmuConfig::default(), striding_config());
    let stride_pool = pb.striding_pool().expect("striding pool").clone();
    let idle = stride_pool.available();
    let mut got = Vec::new();
    send(pa.pool(), &mut txa[0], &frames(0, 3));
    while rxb[0].rx_burst(&mut got, 64).unwrap() > 0 {}
    assert_eq!(got.len(), 3);
    // The next completion names stride 0x0100, not where the last one ended.
    model_b.inject(Fault::CorruptCqe {
        cqn: rxb[0].cqn(),
        patch: vec![(0x3c, 0x01), (0x3d, 0x00)],
    });
    send(pa.pool(), &mut txa[0], &frames(3, 1));
    let mut refused = Vec::new();
    for _ in 0..100 {
        rxb[0].rx_burst(&mut refused, 64).unwrap();
        if rxb[0].in_error() {
            break;
        }
    }
    assert!(rxb[0].in_error());
    assert!(refused.is_empty(), "nothing from a refused completion");
    assert_eq!(rxb[0].stats().bad_cqes, 1);
    pb.recover_rx(&mut rxb[0]).expect("recovery");
    assert!(!rxb[0].in_error());
    let sent = frames(10, 40);
    send(pa.pool(), &mut txa[0], &sent);
    let mut after = Vec::new();
    while rxb[0].rx_burst(&mut after, 64).unwrap() > 0 {}
    assert_eq!(after.len(), sent.len());
    for (m, f) in after.iter().zip(&sent) {
        assert_eq!(&m.to_vec(), f);
    }
    drop(got);
    drop(after);
    assert_eq!(
        stride_pool.available(),
        idle,
        "nothing leaked through recovery"
    );
}

#[test]
fn a_device_without_striding_queues_gets_one_buffer_per_packet() {
    let model = EmuConfig {
        striding_rq: false,
        ..EmuConfig::default()
    };
    let ((pa, mut txa, _rxa), (pb, _txb, mut rxb), _) = pair(model, striding_config());
    assert!(!rxb[0].is_striding());
    assert!(pb.striding_pool().is_none());
    let sent = frames(0, 50);
    send(pa.pool(), &mut txa[0], &sent);
    let mut got = Vec::new();
    while rxb[0].rx_burst(&mut got, 64).unwrap() > 0 {}
    assert_eq!(got.len(), sent.len());
}

#[test]
fn bad_geometry_and_combinations_are_refused_with_a_reason() {
    let (a, _b) = Model::pair(EmuConfig::default(), EmuConfig::default());
    for (striding, field, needle) in [
        (
            RxStriding {
                log_strides: 8,
                ..RxStriding::default()
            },
            "rx_striding.log_strides",
            "log_strides",
        ),
        (
            RxStriding {
                ring_wqes: 3,
                ..RxStriding::default()
            },
            "rx_striding.ring_wqes",
            "ring_wqes",
        ),
        (
            RxStriding {
                buffers: 8,
                ..RxStriding::default()
            },
            "rx_striding.buffers",
            "twice",
        ),
        (
            // 2^10 WQEs of 2^16 strides: a CQ of 2^26 entries, past the model's 2^22.
            RxStriding {
                log_strides: 16,
                ring_wqes: 1024,
                buffers: 2048,
                ..RxStriding::default()
            },
            "rx_striding.ring_wqes",
            "more than the device's 2^22",
        ),
    ] {
        let dev = Device::bring_up(EmuBackend::new(a.clone(), "a"), Options::default()).unwrap();
        let config = PortConfig {
            rx_striding: Some(striding),
            ..PortConfig::default()
        };
        let err = Port::start(dev, config).err().expect("refused");
        assert!(
            matches!(&err, DriverError::Config(ConfigError { field: f, .. }) if *f == field),
            "{field}: {err}"
        );
        assert!(err.to_string().contains(needle), "{err}");
    }
    // Striding queues post buffers of their own pool: no shared ring draws from it.
    let dev = Device::bring_up(EmuBackend::new(a.clone(), "a"), Options::default()).unwrap();
    let config = PortConfig {
        rx_striding: Some(RxStriding::default()),
        shared_rx: Some(SharedRxConfig::default()),
        ..PortConfig::default()
    };
    let err = Port::start(dev, config).err().expect("refused");
    assert!(matches!(err, DriverError::Unsupported { .. }), "{err}");
    assert!(err.to_string().contains("shared_rx"), "{err}");
}
