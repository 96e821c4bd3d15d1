//! Packet bursts through the driver: io forwarding by `rx_burst` and `tx_burst` with bursts in
//! every send and receive mode delivers every frame intact and in order and loses no buffer; a
//! burst refuses packets it cannot hold and hands them back; a burst of another pool is refused
//! by a receive queue with a reason; unsendable packets are freed.

use cxdirect::{DriverError, InlineMode, Mbuf, PacketBurst, PortConfig, RxStriding};
use cxdirect_emu::EmuConfig;
use cxdirect_tests::setup::started_sides as pair;

fn config(inline: InlineMode, tx_multi_packet: bool, striding: bool) -> PortConfig {
    PortConfig {
        inline,
        ring_size: 256,
        pool_buffers: 4096,
        tx_multi_packet,
        rx_striding: striding.then(RxStriding::default),
        ..PortConfig::default()
    }
}

fn frames(from: usize, count: usize) -> Vec<Vec<u8>> {
    const SIZES: [usize; 6] = [60, 64, 128, 300, 1000, 1514];
    (from..from + count)
        .map(|i| cxdirect_tests::udp_frame_sized(SIZES[i % SIZES.len()], i as u32, 4000, 9000))
        .collect()
}

fn mbufs(pool: &cxdirect::Mempool, frames: &[Vec<u8>]) -> Vec<Mbuf> {
    frames
        .iter()
        .map(|f| {
            let mut m = pool.alloc().expect("tx buffer");
            m.set_data(f).unwrap();
            m
        })
        .collect()
}

#[test]
fn io_forwarding_through_bursts_delivers_every_frame_in_order_in_every_mode() {
    for (inline, mpw, striding) in [
        (InlineMode::Headers, false, false),
        (InlineMode::None, false, false),
        (InlineMode::Full, false, false),
        (InlineMode::Headers, true, false),
        (InlineMode::Full, true, false),
        (InlineMode::Headers, false, true),
        (InlineMode::Headers, true, true),
    ] {
        let mode = format!("{inline:?} mpw={mpw} striding={striding}");
        let ((pa, mut txa, mut rxa), (pb, mut txb, mut rxb), _) =
            pair(EmuConfig::default(), config(inline, mpw, striding));
        let sent = frames(0, 2000);
        let mut burst = PacketBurst::new();
        let mut back: Vec<Mbuf> = Vec::new();
        let mut expected = 0;
        for chunk in sent.chunks(100) {
            cxdirect_tests::send_all(&mut txa[0], &mut mbufs(pa.pool(), chunk));
            expected += chunk.len();
            // Port B sends back out whatever it receives, burst by burst.
            let mut spins = 0;
            while back.len() < expected {
                rxb[0].rx_burst(&mut burst, 64).unwrap();
                txb[0].tx_burst(&mut burst);
                rxa[0].rx_burst(&mut back, 256).unwrap();
                spins += 1;
                assert!(spins < 1_000_000, "{mode}: forwarding stalled");
            }
        }
        assert!(burst.is_empty(), "{mode}: the burst was sent whole");
        assert_eq!(back.len(), sent.len(), "{mode}: every frame came back");
        for (i, (m, f)) in back.iter().zip(&sent).enumerate() {
            assert_eq!(&m.to_vec(), f, "{mode}: frame {i} intact and in order");
        }
        assert_eq!(txb[0].stats().errors, 0, "{mode}");
        assert_eq!(txb[0].stats().packets, sent.len() as u64, "{mode}");
        if mpw {
            assert!(
                txb[0].stats().multi_packet_wqes > 0,
                "{mode}: runs were used"
            );
        }
        if !striding {
            // Every buffer of port B's pool is free, posted, or in flight: none was lost.
            txb[0].tx_burst(&mut Vec::new());
            assert_eq!(
                pb.pool().available() as usize + rxb[0].posted() + txb[0].in_flight(),
                pb.pool().capacity() as usize,
                "{mode}: no buffer lost"
            );
        }
        drop((txa, rxa, txb, rxb, back, burst));
        pa.close().unwrap().teardown().unwrap();
        pb.close().unwrap().teardown().unwrap();
    }
}

#[test]
fn a_burst_takes_single_segment_packets_of_one_pool_and_gives_back_the_rest() {
    let ((pa, txa, rxa), (pb, txb, rxb), _) = pair(
        EmuConfig::default(),
        config(InlineMode::Headers, false, false),
    );
    let (pool_a, pool_b) = (pa.pool(), pb.pool());
    let idle_a = pool_a.available();
    let sent = frames(0, 3);
    let mut burst = PacketBurst::new();
    for m in mbufs(pool_a, &sent[..2]) {
        burst.push(m).expect("same pool, one segment");
    }
    assert_eq!(burst.len(), 2);
    assert_eq!(burst.get(1).unwrap().to_vec(), sent[1]);
    assert!(burst.get(2).is_none());

    let other = mbufs(pool_b, &sent[2..]).pop().unwrap();
    let other = burst
        .push(other)
        .expect_err("another pool's packet is refused");
    assert_eq!(other.to_vec(), sent[2], "and handed back unchanged");
    let mut chained = mbufs(pool_a, &sent[..1]).pop().unwrap();
    chained.chain(mbufs(pool_a, &sent[1..2]).pop().unwrap());
    let chained = burst
        .push(chained)
        .expect_err("a chained packet is refused");
    assert_eq!(chained.segment_count(), 2);
    drop((other, chained));

    burst.write(0, 6, &[0xaa; 6]).unwrap();
    let past_end = burst.write(0, sent[0].len() - 2, &[0; 4]).unwrap_err();
    assert!(
        matches!(past_end, DriverError::BufferTooSmall { need, capacity, .. }
            if need == sent[0].len() + 2 && capacity == sent[0].len()),
        "past the end: {past_end}"
    );
    let no_packet = burst.write(5, 0, &[0]).unwrap_err();
    assert!(
        matches!(no_packet, DriverError::NoSuchPacket { index: 5, len: 2 }),
        "no such packet: {no_packet}"
    );
    burst.flags_mut(1).unwrap().tx_l4_csum = true;

    let mut out = Vec::new();
    burst.drain_into(&mut out);
    assert!(burst.is_empty());
    assert_eq!(out.len(), 2);
    assert_eq!(&out[0].to_vec()[6..12], &[0xaa; 6]);
    assert_eq!(out[1].to_vec(), sent[1]);
    assert!(out[1].flags.tx_l4_csum);
    for m in out {
        burst.push(m).unwrap();
    }
    assert!(pool_a.available() < idle_a);
    drop(burst);
    assert_eq!(
        pool_a.available(),
        idle_a,
        "dropping a burst frees its buffers"
    );
    drop((txa, rxa, txb, rxb));
    pa.close().unwrap().teardown().unwrap();
    pb.close().unwrap().teardown().unwrap();
}

#[test]
fn a_receive_queue_refuses_a_burst_of_another_pool_and_loses_nothing() {
    let ((pa, mut txa, rxa), (pb, txb, mut rxb), _) = pair(
        EmuConfig::default(),
        config(InlineMode::Headers, false, false),
    );
    let sent = frames(0, 8);
    cxdirect_tests::send_all(&mut txa[0], &mut mbufs(pa.pool(), &sent));
    let mut burst = PacketBurst::new();
    burst
        .push(mbufs(pa.pool(), &sent[..1]).pop().unwrap())
        .unwrap();
    let err = rxb[0]
        .rx_burst(&mut burst, 64)
        .expect_err("port A's packet in port B's burst");
    assert!(
        matches!(err, DriverError::PoolMismatch { held: 1 }),
        "{err}"
    );
    assert!(
        err.to_string().contains("another pool"),
        "the error says why: {err}"
    );
    assert_eq!(burst.len(), 1, "the burst is unchanged");
    burst.clear();
    let mut spins = 0;
    while burst.len() < sent.len() {
        rxb[0].rx_burst(&mut burst, 64).unwrap();
        spins += 1;
        assert!(spins < 1_000_000, "receive stalled at {}", burst.len());
    }
    for (i, f) in sent.iter().enumerate() {
        assert_eq!(&burst.get(i).unwrap().to_vec(), f, "frame {i}");
        assert!(burst.get(i).unwrap().flags().rx_l4_csum_good);
    }
    drop((txa, rxa, txb, rxb, burst));
    pa.close().unwrap().teardown().unwrap();
    pb.close().unwrap().teardown().unwrap();
}

#[test]
fn unsendable_packets_leave_the_burst_counted_and_freed() {
    let ((pa, mut txa, rxa), (pb, txb, mut rxb), _) = pair(
        EmuConfig::default(),
        config(InlineMode::Headers, false, false),
    );
    let pool = pa.pool();
    let idle = pool.available();
    let mut burst = PacketBurst::new();
    let big = cxdirect_tests::udp_frame_sized(1600, 0, 1, 2); // above the 1500-byte MTU
    let ok = cxdirect_tests::udp_frame_sized(100, 1, 1, 2);
    let mut short = pool.alloc().unwrap();
    short.set_data(&[0u8; 10]).unwrap(); // shorter than an Ethernet header
    burst.push(mbufs(pool, &[big]).pop().unwrap()).unwrap();
    burst.push(short).unwrap();
    burst
        .push(mbufs(pool, std::slice::from_ref(&ok)).pop().unwrap())
        .unwrap();
    assert_eq!(txa[0].tx_burst(&mut burst), 3, "all three taken");
    assert!(burst.is_empty());
    assert_eq!(txa[0].stats().errors, 2, "two refused");
    assert_eq!(txa[0].stats().packets, 1, "one sent");
    assert_eq!(
        pool.available() as usize + txa[0].in_flight(),
        idle as usize,
        "the refused buffers went back at once"
    );
    let mut got = Vec::new();
    let mut spins = 0;
    while got.is_empty() {
        rxb[0].rx_burst(&mut got, 8).unwrap();
        spins += 1;
        assert!(spins < 1_000_000, "the good frame never arrived");
    }
    assert_eq!(got[0].to_vec(), ok);
    drop((txa, rxa, txb, rxb, got));
    pa.close().unwrap().teardown().unwrap();
    pb.close().unwrap().teardown().unwrap();
}
