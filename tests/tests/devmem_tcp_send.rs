//! The devmem TCP program's sending side (`cxdirect-devmem-tcp --connect`) on the emulated
//! pair, sending to the program's listener on the other port: the payload is gathered by the
//! device from the dmabuf by memory key (the CPU wrote the pattern once and never touches it
//! again), retransmissions come from the same dmabuf ranges, and a range is reused only after
//! its completion. Over a clean wire and over one that drops, repeats and reorders frames,
//! every byte is delivered once and exact.

use cxdirect_apps::cli::EmuExec;
use cxdirect_apps::devmem_tcp::connect::{self, ConnectReport, ConnectSettings};
use cxdirect_apps::emulated::{wired_pair, EmuBackend};
use cxdirect_emu::wire::Impairments;
use cxdirect_emu::Device as Model;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

fn settings(size: u64, bytes: u64) -> ConnectSettings {
    ConnectSettings {
        peer: SocketAddrV4::new(Ipv4Addr::new(192, 168, 77, 1), 5201),
        address: Ipv4Addr::new(192, 168, 77, 2),
        memory: "memfd".into(),
        size,
        bytes,
        modulus: 7,
        timeout: Duration::from_secs(120),
        rto_min: Duration::from_millis(50),
        lso: true,
    }
}

/// Two modelled functions on a wire with `impairments`: sender first, receiver last.
fn pair(impairments: Impairments) -> Vec<EmuBackend> {
    wired_pair(impairments, ["devmem-tcp-connect", "devmem-tcp-listen"]).unwrap()
}

fn every_byte_once_and_exact(r: &ConnectReport, bytes: u64) {
    assert!(r.finished, "{}", r.summary());
    assert_eq!(r.bytes, bytes);
    assert_eq!(r.tx.acked_bytes, bytes);
    assert_eq!(r.counts.cpu_payload_copied, 0);
    assert_eq!(r.counts.dropped, 0);
    // The device gathered every payload byte sent from the dmabuf, retransmissions included.
    assert_eq!(r.path.gathered_bytes, r.tx.data_bytes);
    assert!(r.tx.data_bytes >= bytes);
    let l = r.listener.as_ref().expect("the listener ran");
    assert!(l.verified, "{}", l.summary(true));
    assert_eq!(l.bytes, bytes);
    assert_eq!(l.pattern_errors, 0);
    assert_eq!(l.counts.fragment_bytes, bytes);
    assert_eq!(l.tokens_outstanding, 0);
    assert!(!r.timed_out && !l.timed_out);
}

#[test]
fn a_stream_sent_from_the_dmabuf_over_a_clean_wire_arrives_exact_from_one_pattern_fill() {
    let bytes = 3 << 20;
    let r = connect::run(pair(Impairments::NONE), &settings(8 << 20, bytes)).unwrap();
    every_byte_once_and_exact(&r, bytes);
    // The CPU wrote the pattern once (the stream fits the memory) and 66 header bytes per frame.
    assert_eq!(r.counts.pattern_fill_bytes, bytes);
    assert!(r.summary().contains(" cpu_payload_copied=0 "));
    assert!(r.tx.data_segments >= bytes.div_ceil(1448));
    // The model offers LSO: new data went in WQEs the device segmented, so fewer header
    // buffers than segments.
    assert!(r.path.lso_frames > 0, "{}", r.summary());
    assert!(r.path.data_frames < r.tx.data_segments);
}

#[test]
fn without_lso_every_segment_is_its_own_wqe() {
    let bytes = 1 << 20;
    let s = ConnectSettings {
        lso: false,
        ..settings(8 << 20, bytes)
    };
    let r = connect::run(pair(Impairments::NONE), &s).unwrap();
    every_byte_once_and_exact(&r, bytes);
    assert_eq!(r.path.lso_frames, 0);
    assert_eq!(r.path.data_frames, r.tx.data_segments);
}

#[test]
fn a_stream_longer_than_the_dmabuf_reuses_ranges_only_after_their_completion() {
    // 1 MiB of memory, 5 MB of stream: each range is queued again once acknowledged whole.
    let bytes = 5_000_000;
    let r = connect::run(pair(Impairments::NONE), &settings(1 << 20, bytes)).unwrap();
    every_byte_once_and_exact(&r, bytes);
    assert!(r.counts.completions > 8, "{}", r.summary());
    assert!(r.counts.pattern_fill_bytes <= 1 << 20);
}

#[test]
fn a_stream_sent_from_the_dmabuf_over_a_lossy_reordering_duplicating_wire_arrives_once_and_exact() {
    let impairments = Impairments {
        seed: 43,
        drop_probability: 0.01,
        duplicate_probability: 0.01,
        reorder_probability: 0.01,
        reorder_window: 3,
        ..Impairments::NONE
    };
    let bytes = 3 << 20;
    let r = connect::run(pair(impairments), &settings(1 << 20, bytes)).unwrap();
    every_byte_once_and_exact(&r, bytes);
    // Losses were repaired from the same dmabuf bytes: retransmissions went out, and the
    // listener trimmed what it had already.
    assert!(r.tx.retransmits > 0, "{}", r.summary());
    assert!(r.tx.fast_retransmits + r.tx.timeouts > 0);
    let l = r.listener.as_ref().unwrap();
    assert!(l.counts.duplicates > 0, "{}", l.summary(true));
}

/// A stream sent from the dmabuf to another TCP implementation: smoltcp's socket on the other
/// port (feature `smoltcp`, over a port's queues), which receives it whole, in order, with
/// checksums the device computed; its SHA-256 is the pattern's. The socket listens only after
/// a while: the first SYN is refused (RST) and the sender tries again.
#[test]
fn a_stream_sent_from_the_dmabuf_reaches_a_smoltcp_socket_with_the_patterns_sha256() {
    use cxdirect::smoltcp_phy::smoltcp::iface::{Config, Interface, SocketSet};
    use cxdirect::smoltcp_phy::smoltcp::socket::tcp;
    use cxdirect::smoltcp_phy::smoltcp::time::Instant as SmolInstant;
    use cxdirect::smoltcp_phy::smoltcp::wire::{EthernetAddress, HardwareAddress, IpCidr};
    use cxdirect::smoltcp_phy::CxPhy;
    use cxdirect::{Device, Options, Port, Queues, Started};
    use cxdirect_apps::devmem_tcp::client::{Client, ClientConfig};
    use cxdirect_apps::devmem_tcp::sha256::{pattern_digest, Sha256};
    use cxdirect_tests::setup::small_port;
    use std::time::Instant;

    let bytes: u64 = 2 << 20;
    let peer = SocketAddrV4::new(Ipv4Addr::new(192, 168, 77, 1), 5202);
    let cfg = EmuExec::Threaded.config();
    let (a, b) = Model::pair(cfg.clone(), cfg);
    // The listener: smoltcp over port B's first queues.
    let dev = Device::bring_up(EmuBackend::new(b, "smoltcp"), Options::default()).unwrap();
    let Started {
        port: mut b_port,
        queues: Queues { mut tx, mut rx },
    } = Port::start(dev, small_port()).unwrap();
    let mac = b_port.device().info().mac;
    let mut phy = CxPhy::new(rx.remove(0), tx.remove(0), b_port.pool().clone(), 1500);
    let mut iface = Interface::new(
        Config::new(HardwareAddress::Ethernet(EthernetAddress(mac))),
        &mut phy,
        SmolInstant::from_millis(0),
    );
    iface.update_ip_addrs(|a| a.push(IpCidr::new((*peer.ip()).into(), 24)).unwrap());
    let mut sockets = SocketSet::new(Vec::new());
    let server = sockets.add(tcp::Socket::new(
        tcp::SocketBuffer::new(vec![0; 1 << 18]),
        tcp::SocketBuffer::new(vec![0; 4096]),
    ));
    let mut listening = false;
    // The sender on port A.
    let mut client = Client::open(
        EmuBackend::new(a, "devmem-tcp-connect"),
        ClientConfig {
            ip: Ipv4Addr::new(192, 168, 77, 2),
            peer,
            bytes,
            modulus: 7,
            rto_min: Duration::from_millis(50),
            lso: true,
        },
        |dev| cxdirect_apps::devmem_tcp::import(dev, "memfd", 1 << 20),
    )
    .unwrap();
    let start = Instant::now();
    let (mut received, mut hash) = (0u64, Sha256::new());
    let mut chunk = vec![0u8; 65536];
    loop {
        let now = Instant::now();
        client.turn(now).unwrap();
        let ms = now.duration_since(start).as_millis() as i64;
        if !listening && client.refusals() > 0 {
            sockets
                .get_mut::<tcp::Socket>(server)
                .listen(peer.port())
                .unwrap();
            listening = true;
        }
        iface.poll(SmolInstant::from_millis(ms), &mut phy, &mut sockets);
        let s = sockets.get_mut::<tcp::Socket>(server);
        while s.can_recv() {
            let n = s.recv_slice(&mut chunk).unwrap();
            hash.update(&chunk[..n]);
            received += n as u64;
        }
        // The sender's FIN read: close ours.
        if !s.may_recv() && s.is_open() && received == bytes {
            s.close();
        }
        if client.done(now) && received == bytes {
            break;
        }
        assert!(
            now.duration_since(start) < Duration::from_secs(60),
            "stalled: received {received}, acked {}",
            client.acked()
        );
    }
    assert_eq!(received, bytes);
    assert_eq!(client.refusals(), 1);
    assert_eq!(hash.finish(), pattern_digest(7, bytes));
    assert_eq!(client.acked(), bytes);
    assert_eq!(client.counts().cpu_payload_copied, 0);
    assert_eq!(
        client.path_stats().gathered_bytes,
        client.stats().data_bytes
    );
    client.close().unwrap();
    drop((phy, sockets));
    b_port.close().unwrap().teardown().unwrap();
}
