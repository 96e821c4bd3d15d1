//! TCP segmentation offload through the driver: a 64 KiB TCP packet handed over with an MSS
//! leaves the port as MSS-sized segments that arrive at the peer with their headers rewritten
//! (lengths, sequence numbers, flags) and checksums the receiving device verifies; packets TSO
//! cannot take are refused with a typed reason, and the queue goes on sending.

use cxdirect::tx::TxRefusal;
use cxdirect::{DriverError, Mbuf, Mempool, PortConfig};
use cxdirect_apps::emulated::EmuBackend;
use cxdirect_emu::counters::QueueKind;
use cxdirect_emu::EmuConfig;
use cxdirect_tests::setup::{bring_up, started_sides};

const MSS: u16 = 1448;
const MESSAGE: usize = 64 << 10;
const SEQ: u32 = 0x7fff_f000;
const IP_ID: u16 = 0x1234;
/// Ethernet, IPv4 and TCP with the timestamps option.
const HEADERS: usize = 14 + 20 + 32;

fn tso_port() -> PortConfig {
    PortConfig {
        tx_tso: true,
        // A completion for every WQE, so that every buffer is back once the sends end.
        cqe_every: 1,
        ring_size: 256,
        pool_buffers: 1024,
        ..PortConfig::default()
    }
}

/// The headers of a TCP/IPv4 packet carrying `payload_len` bytes, with ACK, PSH and FIN set,
/// checksums left zero for the device to fill in.
fn tcp_headers(payload_len: usize) -> Vec<u8> {
    let mut h = vec![0u8; HEADERS];
    h[0..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x0b]);
    h[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x0a]);
    h[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    h[14] = 0x45;
    let ip_len = (20 + 32 + payload_len).min(0xffff) as u16;
    h[16..18].copy_from_slice(&ip_len.to_be_bytes());
    h[18..20].copy_from_slice(&IP_ID.to_be_bytes());
    h[20] = 0x40; // don't fragment
    h[22] = 64;
    h[23] = 6;
    h[26..30].copy_from_slice(&[10, 0, 0, 1]);
    h[30..34].copy_from_slice(&[10, 0, 0, 2]);
    let tcp = &mut h[34..];
    tcp[0..2].copy_from_slice(&40_000u16.to_be_bytes());
    tcp[2..4].copy_from_slice(&5201u16.to_be_bytes());
    tcp[4..8].copy_from_slice(&SEQ.to_be_bytes());
    tcp[8..12].copy_from_slice(&0x0a0b_0c0du32.to_be_bytes());
    tcp[12] = 8 << 4;
    tcp[13] = 0x10 | 0x08 | 0x01; // ACK, PSH, FIN
    tcp[14..16].copy_from_slice(&512u16.to_be_bytes());
    // NOP, NOP, timestamps.
    tcp[20..24].copy_from_slice(&[1, 1, 8, 10]);
    h
}

fn payload(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 13 + i / 509) as u8).collect()
}

/// `bytes` as a packet of chained buffers of at most `piece` bytes each.
fn chained(pool: &Mempool, bytes: &[u8], piece: usize) -> Mbuf {
    let mut pieces = bytes.chunks(piece);
    let mut head = pool.alloc().expect("tx buffer");
    head.set_data(pieces.next().unwrap()).unwrap();
    for p in pieces {
        let mut m = pool.alloc().expect("tx buffer");
        m.set_data(p).unwrap();
        head.chain(m);
    }
    head
}

fn receive_all(rx: &mut cxdirect::RxQueue<EmuBackend>) -> Vec<Mbuf> {
    let mut got = Vec::new();
    while rx.rx_burst(&mut got, 256).unwrap() > 0 {}
    got
}

#[test]
fn a_64_kib_tcp_packet_arrives_as_mss_sized_segments() {
    let (
        (pa, mut txa, _),
        // Held: a dropped port takes its link down.
        (_pb, _, mut rxb),
        [model_a, _],
    ) = started_sides(EmuConfig::default(), tso_port());
    let pool = pa.pool().clone();
    let idle = pool.available();
    let message = payload(MESSAGE);
    let mut packet = tcp_headers(MESSAGE);
    packet.extend_from_slice(&message);
    let mut m = chained(&pool, &packet, 1900);
    assert!(m.segment_count() > 30, "many buffers");
    m.flags.tx_tso_mss = Some(MSS);
    m.flags.tx_ip_csum = true;
    m.flags.tx_l4_csum = true;
    let mut batch = vec![m];
    cxdirect_tests::send_all(&mut txa[0], &mut batch);
    let got = receive_all(&mut rxb[0]);

    let count = MESSAGE.div_ceil(usize::from(MSS));
    assert_eq!(got.len(), count, "one segment per MSS of payload");
    let mut joined = Vec::new();
    for (i, seg) in got.iter().enumerate() {
        let bytes = seg.to_vec();
        let last = i + 1 == count;
        let expected = usize::from(MSS).min(MESSAGE - i * usize::from(MSS));
        assert_eq!(bytes.len(), HEADERS + expected, "segment {i} length");
        assert_eq!(&bytes[..14], &packet[..14], "segment {i} Ethernet header");
        let ip_len = u16::from_be_bytes([bytes[16], bytes[17]]);
        assert_eq!(
            usize::from(ip_len),
            bytes.len() - 14,
            "segment {i} IP length"
        );
        let id = u16::from_be_bytes([bytes[18], bytes[19]]);
        assert_eq!(id, IP_ID.wrapping_add(i as u16), "segment {i} IP ID");
        let seq = u32::from_be_bytes([bytes[38], bytes[39], bytes[40], bytes[41]]);
        assert_eq!(
            seq,
            SEQ.wrapping_add((i * usize::from(MSS)) as u32),
            "segment {i} sequence number"
        );
        let flags = bytes[47];
        assert_eq!(flags & 0x10, 0x10, "segment {i} ACK");
        assert_eq!(
            flags & 0x09 != 0,
            last,
            "segment {i}: PSH and FIN only last"
        );
        assert_eq!(
            &bytes[54..HEADERS],
            &packet[54..HEADERS],
            "segment {i} options"
        );
        assert!(
            seg.flags.rx_ip_csum_good && seg.flags.rx_l4_csum_good,
            "segment {i}: the receiving device found its checksums right"
        );
        joined.extend_from_slice(&bytes[HEADERS..]);
    }
    assert!(
        joined == message,
        "the segments put together give the payload"
    );

    let stats = txa[0].stats();
    assert_eq!((stats.packets, stats.tso_packets, stats.errors), (1, 1, 0));
    let sq = model_a.queue_counters(QueueKind::Sq, txa[0].sqn()).unwrap();
    assert_eq!((sq.wqes, sq.frames), (1, count as u64), "one LSO WQE");
    drop(got);
    // Every buffer of the chain comes back once the device reports the WQE done.
    let mut none: Vec<Mbuf> = Vec::new();
    for _ in 0..100 {
        if pool.available() == idle {
            break;
        }
        txa[0].tx_burst(&mut none);
    }
    assert_eq!(pool.available(), idle, "no buffer kept");
}

#[test]
fn packets_tso_cannot_take_are_refused_with_their_reason_and_the_queue_goes_on() {
    let (
        (pa, mut txa, _),
        // Held: a dropped port takes its link down.
        (_pb, _, mut rxb),
        _,
    ) = started_sides(EmuConfig::default(), tso_port());
    let pool = pa.pool().clone();
    let message = payload(10_000);
    let mut good = tcp_headers(message.len());
    good.extend_from_slice(&message);

    let mut udp = good.clone();
    udp[23] = 17;
    let mut fragment = good.clone();
    fragment[20] = 0x20;
    let cases: [(&str, Vec<u8>, u16, usize, TxRefusal); 5] = [
        ("UDP", udp, MSS, 1900, TxRefusal::TsoNotTcp),
        (
            "an IPv4 fragment",
            fragment,
            MSS,
            1900,
            TxRefusal::TsoNotTcp,
        ),
        (
            "headers split",
            good.clone(),
            MSS,
            40,
            TxRefusal::TsoHeaders,
        ),
        ("MSS 0", good.clone(), 0, 1900, TxRefusal::TsoMss),
        (
            "MSS over the MTU",
            good.clone(),
            1500,
            1900,
            TxRefusal::TsoMss,
        ),
    ];
    for (i, (what, bytes, mss, piece, refusal)) in cases.into_iter().enumerate() {
        let mut m = chained(&pool, &bytes, piece);
        m.flags.tx_tso_mss = Some(mss);
        let mut batch = vec![m];
        assert_eq!(txa[0].tx_burst(&mut batch), 1, "{what}: taken");
        let stats = txa[0].stats();
        assert_eq!(stats.errors, i as u64 + 1, "{what}: counted");
        assert_eq!(stats.last_refusal, Some(refusal), "{what}");
        assert_eq!(stats.packets, 0, "{what}: nothing sent");
        assert!(!txa[0].in_error(), "{what}: the queue is fine");
    }
    assert!(receive_all(&mut rxb[0]).is_empty(), "nothing on the wire");
    assert_eq!(
        pa.xstats().tx[0].last_refusal,
        Some(TxRefusal::TsoMss),
        "the port reads the published reason"
    );

    // A packet TSO can take still goes out whole after them.
    let mut m = chained(&pool, &good, 1900);
    m.flags.tx_tso_mss = Some(MSS);
    cxdirect_tests::send_all(&mut txa[0], &mut vec![m]);
    assert_eq!(
        receive_all(&mut rxb[0]).len(),
        message.len().div_ceil(usize::from(MSS))
    );
    assert_eq!(txa[0].stats().tso_packets, 1);
}

#[test]
fn tso_needs_the_port_to_ask_and_the_device_to_offer_it() {
    // A port started without tx_tso refuses TSO packets.
    let (
        (pa, mut txa, _),
        // Held: a dropped port takes its link down.
        (_pb, _, mut rxb),
        _,
    ) = started_sides(EmuConfig::default(), PortConfig::default());
    let pool = pa.pool().clone();
    let mut packet = tcp_headers(5000);
    packet.extend_from_slice(&payload(5000));
    let mut m = chained(&pool, &packet, 1900);
    m.flags.tx_tso_mss = Some(MSS);
    let mut batch = vec![m];
    txa[0].tx_burst(&mut batch);
    assert_eq!(txa[0].stats().last_refusal, Some(TxRefusal::TsoOff));
    assert!(receive_all(&mut rxb[0]).is_empty());

    // A device without LSO: the port does not start with tx_tso.
    let model = cxdirect_emu::Device::new(EmuConfig {
        lso: false,
        ..EmuConfig::default()
    });
    let dev = bring_up(&model, "no-lso");
    match cxdirect::Port::start(dev, tso_port()) {
        Err(e @ DriverError::Unsupported { what, .. }) => {
            assert!(what.contains("tx_tso"), "{what}");
            assert!(e.to_string().contains("max_lso_cap"), "{e}");
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("a port with TSO started on a device without LSO"),
    }
}

#[test]
fn a_vlan_tag_to_insert_rides_in_every_segment() {
    let ((pa, mut txa, _), (_pb, _, mut rxb), _) = started_sides(EmuConfig::default(), tso_port());
    let pool = pa.pool().clone();
    let message = payload(3000);
    let mut packet = tcp_headers(message.len());
    packet.extend_from_slice(&message);
    let mut m = chained(&pool, &packet, 1900);
    m.flags.tx_tso_mss = Some(MSS);
    m.flags.tx_vlan = Some(0x2007);
    m.flags.tx_ip_csum = true;
    m.flags.tx_l4_csum = true;
    cxdirect_tests::send_all(&mut txa[0], &mut vec![m]);
    let got = receive_all(&mut rxb[0]);
    assert_eq!(got.len(), 3);
    let mut joined = Vec::new();
    for (i, seg) in got.iter().enumerate() {
        let bytes = seg.to_vec();
        assert_eq!(&bytes[12..16], &[0x81, 0x00, 0x20, 0x07], "segment {i} tag");
        assert_eq!(
            &bytes[16..18],
            &[0x08, 0x00],
            "segment {i} EtherType after it"
        );
        let seq = u32::from_be_bytes([bytes[42], bytes[43], bytes[44], bytes[45]]);
        assert_eq!(seq, SEQ.wrapping_add(i as u32 * u32::from(MSS)));
        assert!(seg.flags.rx_ip_csum_good && seg.flags.rx_l4_csum_good);
        joined.extend_from_slice(&bytes[HEADERS + 4..]);
    }
    assert!(joined == message);
}
