//! Devmem-style receive through the driver and the model: a flow steered to a split receive
//! queue lands its headers in host memory and its payload in a dmabuf, delivered as tokens
//! that must come back before their buffers are posted again.
//!
//! The dmabuf is a udmabuf where the host has `/dev/udmabuf`, and a memfd otherwise.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use cxdirect::{
    Device, DriverError, FlowMatch, FlowProtocol, FlowRule, IpVersion, Mbuf, PayloadToken, Port,
    PortConfig, Queues, RxQueue, SplitPacket, SplitRxConfig, SplitRxQueue, Started, TxQueue,
};
use cxdirect_apps::emulated::EmuBackend;
use cxdirect_dma::{DmaBufMapping, DmaBufMode};
use cxdirect_emu::{Device as Model, EmuConfig};
use cxdirect_tests::setup::bring_up_patient;
use cxdirect_tests::{send_all, udp_frame_sized};

const FLOW_PORT: u16 = 7000;
const OTHER_PORT: u16 = 9000;
const PAYLOAD_BYTES: u32 = 2048;

fn payload_memory(dev: &Device<EmuBackend>, buffers: u32) -> Arc<DmaBufMapping> {
    let size = (u64::from(buffers * PAYLOAD_BYTES)).next_multiple_of(4096);
    let buf = cxdirect_tests::dmabuf(size, "devmem");
    let (iommu, iovas) = dev.dma();
    Arc::new(
        buf.map(iommu, &iovas, 0, size, DmaBufMode::Revocable)
            .unwrap(),
    )
}

struct Rig {
    tx_port: Port<EmuBackend>,
    tx: TxQueue<EmuBackend>,
    rx_port: Port<EmuBackend>,
    /// The receiving port's plain queue: everything no flow rule takes.
    plain: RxQueue<EmuBackend>,
    split: SplitRxQueue<EmuBackend>,
    rx_model: Model,
    mapping: Arc<DmaBufMapping>,
    header_bytes: u32,
    /// The rule steering UDP port 7000 to the split queue.
    rule: Option<FlowRule>,
}

/// Two ports on a wire; the receiver has a split queue of `ring` WQEs with `header_bytes`
/// headers over `buffers` payload buffers, and UDP port 7000 steered to it.
fn rig(header_bytes: u32, ring: u32, buffers: u32) -> Rig {
    rig_with(header_bytes, ring, buffers, PAYLOAD_BYTES)
}

/// As [`rig`], with payload buffers of `payload_bytes` carved from the same memory.
fn rig_with(header_bytes: u32, ring: u32, buffers: u32, payload_bytes: u32) -> Rig {
    let (a, b) = Model::pair(EmuConfig::default(), EmuConfig::default());
    let base = PortConfig {
        ring_size: 64,
        pool_buffers: 1024,
        ..PortConfig::default()
    };
    let Started {
        port: tx_port,
        queues: Queues { tx: mut a_tx, .. },
    } = Port::start(bring_up_patient(&a, "tx"), base.clone()).unwrap();
    let Started {
        port: mut rx_port,
        queues: Queues { rx: mut b_rx, .. },
    } = Port::start(bring_up_patient(&b, "rx"), base).unwrap();
    let mapping = payload_memory(rx_port.device(), buffers);
    // A sentinel everywhere, so a byte the device wrote where it should not shows.
    mapping
        .write(0, &vec![0xee; mapping.len()])
        .expect("host-accessible");
    let split = rx_port
        .create_split_rx(&SplitRxConfig {
            ring_size: ring,
            header_bytes,
            header_buffers: 256,
            payload_memory: Arc::clone(&mapping),
            payload_bytes,
        })
        .unwrap();
    let rule = rx_port
        .steer(FlowMatch::udp4_to_port(FLOW_PORT), split.rqn())
        .unwrap();
    assert_eq!(rule.rqn(), split.rqn());
    Rig {
        tx_port,
        tx: a_tx.remove(0),
        rx_port,
        plain: b_rx.remove(0),
        split,
        rx_model: b,
        mapping,
        header_bytes,
        rule: Some(rule),
    }
}

impl Rig {
    fn send(&mut self, first: u32, count: u32, len: usize, dport: u16) {
        let mut batch: Vec<Mbuf> = (first..first + count)
            .map(|seq| {
                let mut m = self.tx_port.pool().alloc().unwrap();
                m.set_data(&udp_frame_sized(len, seq, 4000, dport)).unwrap();
                m
            })
            .collect();
        send_all(&mut self.tx, &mut batch);
    }

    fn receive_split(&mut self) -> Vec<SplitPacket> {
        let mut got = Vec::new();
        while self.split.rx_burst(&mut got, 32) > 0 {}
        got
    }

    fn receive_plain(&mut self) -> Vec<Mbuf> {
        let mut got = Vec::new();
        while self.plain.rx_burst(&mut got, 32).unwrap() > 0 {}
        got
    }

    /// The payload bytes of `token`, read through the dmabuf's CPU mapping.
    fn payload(&self, token: &PayloadToken) -> Vec<u8> {
        let mut out = vec![0u8; token.len() as usize];
        self.split.read_payload(token, 0, &mut out).unwrap();
        out
    }

    /// Checks packet `p` against frame `seq` of `len` bytes: headers in host memory, the rest
    /// in the dmabuf at the token.
    fn check(&self, p: &SplitPacket, seq: u32, len: usize) {
        let frame = udp_frame_sized(len, seq, 4000, FLOW_PORT);
        let hb = self.header_bytes as usize;
        assert_eq!(p.header.to_vec(), frame[..hb.min(len)], "header of {seq}");
        match p.payload {
            Some(t) => {
                assert_eq!(self.payload(&t), frame[hb..], "payload of {seq}");
                let mut seen = vec![0u8; t.len() as usize];
                self.mapping.read(t.offset() as usize, &mut seen).unwrap();
                assert_eq!(seen, frame[hb..], "in the dmabuf at the token's offset");
            }
            None => assert!(len <= hb, "frame {seq} of {len} bytes has a token"),
        }
    }

    fn close(self) {
        let Rig {
            tx_port,
            tx,
            rx_port,
            plain,
            split,
            ..
        } = self;
        drop((plain, split, tx));
        rx_port.close().unwrap().teardown().unwrap();
        tx_port.close().unwrap().teardown().unwrap();
    }
}

fn tokens(packets: &[SplitPacket]) -> Vec<PayloadToken> {
    packets.iter().filter_map(|p| p.payload).collect()
}

#[test]
fn headers_land_in_host_memory_and_payloads_in_the_dmabuf() {
    let mut r = rig(128, 64, 256);
    let payload_watch = r
        .rx_model
        .iommu()
        .watch_written(r.mapping.iova(), r.mapping.len() as u64);
    let before = r.rx_model.counters();
    r.send(0, 50, 1000, FLOW_PORT);
    let got = r.receive_split();
    assert_eq!(got.len(), 50);
    for (seq, p) in got.iter().enumerate() {
        r.check(p, seq as u32, 1000);
        assert_eq!(p.header.len(), 128);
        assert_eq!(p.payload.unwrap().len(), 872);
        assert_eq!(p.headers_len(), Some(42));
        assert_eq!(
            p.payload_in_header(),
            86,
            "UDP payload starts in the header"
        );
        assert_eq!(p.frame_len(), 1000);
    }
    let written = r.rx_model.counters().payload_write_bytes - before.payload_write_bytes;
    let into_dmabuf = payload_watch.load(Ordering::Relaxed);
    assert_eq!(into_dmabuf, 50 * 872, "no header byte went into the dmabuf");
    assert_eq!(
        written - into_dmabuf,
        50 * 128,
        "host memory got the headers and no payload byte"
    );
    // Every dmabuf byte outside the tokens still holds the sentinel.
    let mut all = vec![0u8; r.mapping.len()];
    r.mapping.read(0, &mut all).unwrap();
    let mut covered = vec![false; all.len()];
    for t in tokens(&got) {
        covered[t.offset() as usize..][..t.len() as usize].fill(true);
    }
    assert!(all
        .iter()
        .zip(&covered)
        .all(|(&b, &inside)| inside || b == 0xee));
    let s = r.split.stats();
    assert_eq!(
        (s.packets, s.header_bytes, s.payload_bytes),
        (50, 6400, 43600)
    );
    assert_eq!((s.tokens_outstanding, s.tokens_highest), (50, 50));
    assert_eq!(r.split.give_back(&tokens(&got)).unwrap(), 50);
    let s = r.split.stats();
    assert_eq!((s.tokens_outstanding, s.tokens_given_back), (0, 50));
    assert!(
        r.receive_plain().is_empty(),
        "the flow went to the split queue only"
    );
    drop(got);
    r.close();
}

#[test]
fn frames_shorter_than_the_header_buffer_give_no_token() {
    let mut r = rig(256, 64, 64);
    let payload_watch = r
        .rx_model
        .iommu()
        .watch_written(r.mapping.iova(), r.mapping.len() as u64);
    r.send(0, 10, 200, FLOW_PORT);
    r.send(10, 1, 256, FLOW_PORT);
    let got = r.receive_split();
    assert_eq!(got.len(), 11);
    for (seq, p) in got.iter().enumerate() {
        assert!(
            p.payload.is_none(),
            "frame {seq} ended in the header buffer"
        );
        r.check(p, seq as u32, if seq < 10 { 200 } else { 256 });
    }
    assert_eq!(got[0].header.len(), 200);
    assert_eq!(got[0].payload_in_header(), 158);
    assert_eq!(payload_watch.load(Ordering::Relaxed), 0);
    let s = r.split.stats();
    assert_eq!(
        (s.header_only, s.tokens_outstanding, s.payload_bytes),
        (11, 0, 0)
    );
    // The unused payload buffers were posted again at once.
    assert_eq!(r.split.posted(), 64);
    drop(got);
    r.close();
}

#[test]
fn tokens_not_given_back_run_the_queue_dry_and_traffic_resumes_when_they_return() {
    // 16 payload buffers for a 32-WQE ring: only 16 WQEs can be posted.
    let mut r = rig(128, 32, 16);
    assert_eq!(r.split.posted(), 16);
    let drops_before = r.rx_model.counters().rx_out_of_buffer;
    r.send(0, 40, 600, FLOW_PORT);
    let held = r.receive_split();
    assert_eq!(held.len(), 16, "one packet per payload buffer");
    let s = r.split.stats();
    assert_eq!((s.tokens_outstanding, s.tokens_highest), (16, 16));
    assert!(s.nombuf > 0, "refills found no payload buffer: {s:?}");
    assert_eq!(r.split.posted(), 0, "dry");
    assert_eq!(r.rx_model.counters().rx_out_of_buffer - drops_before, 24);
    assert_eq!(r.rx_port.rx_missed().unwrap(), Some(24));
    // More traffic while dry overwrites nothing the application holds.
    r.send(100, 10, 600, FLOW_PORT);
    assert!(r.receive_split().is_empty());
    for (seq, p) in held.iter().enumerate() {
        r.check(p, seq as u32, 600);
    }
    // Tokens come back: their buffers are posted again and traffic resumes.
    assert_eq!(r.split.give_back(&tokens(&held)).unwrap(), 16);
    assert_eq!(r.split.posted(), 16);
    r.send(200, 8, 600, FLOW_PORT);
    let got = r.receive_split();
    assert_eq!(got.len(), 8);
    for (i, p) in got.iter().enumerate() {
        r.check(p, 200 + i as u32, 600);
    }
    let s = r.split.stats();
    assert_eq!(
        (s.tokens_outstanding, s.tokens_highest, s.tokens_given_back),
        (8, 16, 16)
    );
    drop((held, got));
    r.close();
}

#[test]
fn a_token_given_back_twice_or_to_another_queue_is_refused_and_changes_nothing() {
    let mut r = rig(128, 16, 32);
    let mapping = payload_memory(r.rx_port.device(), 8);
    let mut other = r
        .rx_port
        .create_split_rx(&SplitRxConfig {
            ring_size: 4,
            header_bytes: 64,
            header_buffers: 16,
            payload_memory: mapping,
            payload_bytes: PAYLOAD_BYTES,
        })
        .unwrap();
    r.send(0, 4, 500, FLOW_PORT);
    let got = r.receive_split();
    let t = tokens(&got);
    assert_eq!(t.len(), 4);
    assert!(matches!(
        other.give_back(&t[..1]),
        Err(DriverError::BadToken { .. })
    ));
    assert_eq!(other.stats().tokens_given_back, 0);
    r.split.give_back(&t[..2]).unwrap();
    let posted = r.split.posted();
    let before = r.split.stats();
    // One fresh token and one given back already: neither is taken.
    let err = r.split.give_back(&[t[2], t[0]]).unwrap_err();
    assert!(
        matches!(
            err,
            DriverError::BadToken {
                why: "already given back",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(r.split.stats(), before, "nothing changed");
    assert_eq!(r.split.posted(), posted);
    assert!(
        r.split.give_back(&[t[3], t[3]]).is_err(),
        "twice in one call"
    );
    assert_eq!(r.split.stats(), before);
    assert_eq!(r.split.give_back(&t[2..]).unwrap(), 2);
    assert_eq!(r.split.stats().tokens_outstanding, 0);
    drop((got, other));
    r.close();
}

#[test]
fn revoking_the_dmabuf_mid_stream_stops_the_queue_cleanly() {
    let mut r = rig(128, 32, 64);
    r.send(0, 10, 800, FLOW_PORT);
    let mut got = Vec::new();
    assert_eq!(r.split.rx_burst(&mut got, 4), 4);
    // The exporter wants its memory back with six frames completed and not yet taken.
    r.mapping.request_revoke();
    let keys_before = r.rx_model.object_counts()[5];
    let rev = r.rx_port.revoke_split_rx(&mut r.split).unwrap();
    assert_eq!(rev.keys, 1, "the payload key");
    assert_eq!(rev.drained_cqes, 6);
    assert_eq!(
        rev.flushed,
        32 - 4 + 4,
        "every posted WQE, refilled after the burst"
    );
    assert_eq!(r.rx_model.object_counts()[5], keys_before - 1);
    assert!(r.split.in_error() && r.mapping.is_revoked());
    assert!(r.rx_port.revoke_split_rx(&mut r.split).is_err());
    let watch = r
        .rx_model
        .iommu()
        .watch(r.mapping.iova(), r.mapping.len() as u64);
    let drops = r.rx_model.counters().rx_steer_drops;
    r.send(10, 5, 800, FLOW_PORT);
    assert!(r.receive_split().is_empty());
    assert_eq!(r.rx_model.counters().rx_steer_drops - drops, 5);
    assert_eq!(
        watch.load(Ordering::Relaxed),
        0,
        "no access to revoked pages"
    );
    // Tokens still out may come back; nothing is posted again.
    assert_eq!(r.split.give_back(&tokens(&got)).unwrap(), 4);
    assert_eq!(r.split.posted(), 0);
    // Other traffic is untouched.
    r.send(0, 3, 300, OTHER_PORT);
    assert_eq!(r.receive_plain().len(), 3);
    drop(got);
    r.close();
}

#[test]
fn other_flows_keep_their_queues_and_removing_the_rule_sends_the_flow_back() {
    let mut r = rig(128, 64, 128);
    let v6 = r
        .rx_port
        .steer(
            FlowMatch {
                ip: IpVersion::V6,
                protocol: FlowProtocol::Tcp,
                dst_addr: Some("fe80::1".parse().unwrap()),
                src_addr: None,
                dst_port: Some(80),
                src_port: Some(1234),
            },
            r.split.rqn(),
        )
        .unwrap();
    let mixed = FlowMatch {
        ip: IpVersion::V6,
        dst_addr: Some("10.0.0.2".parse().unwrap()),
        ..FlowMatch::udp4_to_port(1)
    };
    assert!(matches!(
        r.rx_port.steer(mixed, r.split.rqn()).unwrap_err(),
        DriverError::Config(_)
    ));
    // A number that is none of the port's receive queues (plain queues may be steered to).
    assert!(matches!(
        r.rx_port
            .steer(FlowMatch::udp4_to_port(1), 0x00ff_fff0)
            .unwrap_err(),
        DriverError::NoSuchQueue { .. }
    ));
    for seq in 0..6 {
        let port = if seq % 2 == 0 { FLOW_PORT } else { OTHER_PORT };
        r.send(seq, 1, 700, port);
    }
    let split = r.receive_split();
    let plain = r.receive_plain();
    assert_eq!((split.len(), plain.len()), (3, 3));
    for (i, p) in split.iter().enumerate() {
        r.check(p, 2 * i as u32, 700);
    }
    for (i, m) in plain.iter().enumerate() {
        let seq = 2 * i as u32 + 1;
        assert_eq!(m.to_vec(), udp_frame_sized(700, seq, 4000, OTHER_PORT));
    }
    // Without its rules the flow is the port's usual traffic again.
    r.rx_port.remove_flow(v6).unwrap();
    assert!(r.rx_port.is_steered(r.split.rqn()), "the UDP rule stays");
    let rule = r.rule.take().unwrap();
    r.rx_port.remove_flow(rule).unwrap();
    assert!(!r.rx_port.is_steered(r.split.rqn()));
    r.send(50, 2, 700, FLOW_PORT);
    assert!(r.receive_split().is_empty());
    let back = r.receive_plain();
    assert_eq!(back.len(), 2);
    assert_eq!(back[0].to_vec(), udp_frame_sized(700, 50, 4000, FLOW_PORT));
    drop((split, plain, back));
    r.close();
}

#[test]
fn a_frame_longer_than_both_buffers_stops_the_queue_until_it_is_recovered() {
    // 64 header bytes and 1,024 payload bytes hold frames of up to 1,088 bytes.
    let mut r = rig_with(64, 16, 32, 1024);
    r.send(0, 2, 1000, FLOW_PORT);
    r.send(2, 1, 1400, FLOW_PORT);
    r.send(3, 2, 1000, FLOW_PORT);
    let got = r.receive_split();
    assert_eq!(got.len(), 2, "the frames before the long one");
    assert!(r.split.in_error());
    let s = r.split.stats();
    assert_eq!(
        (s.errors, s.last_error_syndrome),
        (1, 0x01),
        "local length: {s:?}"
    );
    assert_eq!(r.split.give_back(&tokens(&got)).unwrap(), 2);
    let rec = r.rx_port.recover_split_rx(&mut r.split).unwrap();
    assert!(!r.split.in_error());
    assert_eq!(rec.flushed, 16 - 3, "the WQEs still posted after the error");
    assert_eq!(r.split.posted(), 16);
    r.send(10, 3, 1000, FLOW_PORT);
    let again = r.receive_split();
    assert_eq!(again.len(), 3, "traffic resumed on the same rule");
    for (i, p) in again.iter().enumerate() {
        r.check(p, 10 + i as u32, 1000);
    }
    drop((got, again));
    r.close();
}

/// A TCP/IPv6 frame of `len` bytes (at least 74) from `src` port `sport` to `dst` port `dport`.
fn tcp6_frame(len: usize, src: [u8; 16], dst: [u8; 16], sport: u16, dport: u16) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[0..6].copy_from_slice(&[0xff; 6]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x0a]);
    f[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
    f[14] = 0x60;
    f[18..20].copy_from_slice(&((len - 54) as u16).to_be_bytes());
    f[20] = 6;
    f[21] = 64;
    f[22..38].copy_from_slice(&src);
    f[38..54].copy_from_slice(&dst);
    f[54..56].copy_from_slice(&sport.to_be_bytes());
    f[56..58].copy_from_slice(&dport.to_be_bytes());
    f[66] = 0x50; // a 20-byte TCP header
    f[67] = 0x18;
    for (i, b) in f[74..].iter_mut().enumerate() {
        *b = i as u8;
    }
    cxdirect_emu::packet::insert_checksums(&mut f, true, true).unwrap();
    f
}

#[test]
fn ipv6_tcp_and_ipv4_source_rules_match_every_field_they_name() {
    let mut r = rig(128, 64, 128);
    let (a, b): (std::net::Ipv6Addr, std::net::Ipv6Addr) =
        ("fe80::1".parse().unwrap(), "2001:db8::7".parse().unwrap());
    r.rx_port
        .steer(
            FlowMatch {
                ip: IpVersion::V6,
                protocol: FlowProtocol::Tcp,
                dst_addr: Some(a.into()),
                src_addr: Some(b.into()),
                dst_port: Some(80),
                src_port: Some(1234),
            },
            r.split.rqn(),
        )
        .unwrap();
    // IPv4 UDP from 10.0.0.1 port 4000, to any port.
    r.rx_port
        .steer(
            FlowMatch {
                ip: IpVersion::V4,
                protocol: FlowProtocol::Udp,
                dst_addr: None,
                src_addr: Some("10.0.0.1".parse().unwrap()),
                dst_port: None,
                src_port: Some(4000),
            },
            r.split.rqn(),
        )
        .unwrap();
    let frames = [
        (tcp6_frame(400, b.octets(), a.octets(), 1234, 80), true),
        (tcp6_frame(400, b.octets(), a.octets(), 1235, 80), false),
        (tcp6_frame(400, b.octets(), a.octets(), 1234, 81), false),
        (tcp6_frame(400, a.octets(), a.octets(), 1234, 80), false),
        (tcp6_frame(400, b.octets(), b.octets(), 1234, 80), false),
        (udp_frame_sized(400, 1, 4000, 1), true),
        (udp_frame_sized(400, 2, 4001, 1), false),
    ];
    let mut batch: Vec<Mbuf> = frames
        .iter()
        .map(|(f, _)| {
            let mut m = r.tx_port.pool().alloc().unwrap();
            m.set_data(f).unwrap();
            m
        })
        .collect();
    send_all(&mut r.tx, &mut batch);
    let split = r.receive_split();
    let plain = r.receive_plain();
    let want_split: Vec<&Vec<u8>> = frames.iter().filter(|(_, s)| *s).map(|(f, _)| f).collect();
    let want_plain: Vec<&Vec<u8>> = frames.iter().filter(|(_, s)| !*s).map(|(f, _)| f).collect();
    assert_eq!(split.len(), want_split.len());
    for (p, want) in split.iter().zip(want_split) {
        let mut whole = p.header.to_vec();
        whole.extend(r.payload(&p.payload.unwrap()));
        assert_eq!(&whole, want);
    }
    assert_eq!(
        measured_headers(&split),
        [74, 42],
        "TCP/IPv6 and UDP/IPv4 headers measured"
    );
    let got: Vec<Vec<u8>> = plain.iter().map(Mbuf::to_vec).collect();
    assert_eq!(got.iter().collect::<Vec<_>>(), want_plain);
    drop((split, plain));
    r.close();
}

/// Each packet's measured header length ([`SplitPacket::headers_len`]).
fn measured_headers(packets: &[SplitPacket]) -> Vec<usize> {
    packets
        .iter()
        .filter_map(SplitPacket::headers_len)
        .collect()
}
