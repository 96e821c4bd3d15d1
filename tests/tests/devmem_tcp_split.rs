//! Devmem TCP receive end to end on the emulated pair: one port sends a TCP stream (built here
//! as a Linux sender frames it: timestamps on every segment, checksums right, segments reordered
//! and repeated); the other steers the flow to a split queue whose header buffers are 64 or 128
//! bytes, parses each split frame (`devmem_tcp::parse_split`) and runs `TcpReceiver` on it. The
//! stream is checked where it landed: fragments read back from the dmabuf (the test's eyes, not
//! the receiver's), linear bytes from the header buffers. With 66-byte headers, a 64-byte split
//! leaves two option bytes in the dmabuf and a 128-byte split puts 62 payload bytes in host
//! memory (`docs/devmem-tcp.md` §3); both deliver every byte once.

use cxdirect::devmem_tcp::{
    parse_split, write_reply, Endpoints, Event, FrameTail, Reply, RxConfig, SplitFit, TcpFlags,
    TcpReceiver, TcpState, MAX_REPLY_FRAME,
};
use cxdirect::{
    FlowMatch, FlowProtocol, IpVersion, Mbuf, PayloadToken, Port, PortConfig, Queues, RxQueue,
    SplitRxConfig, SplitRxQueue, Started, TxQueue,
};
use cxdirect_apps::emulated::EmuBackend;
use cxdirect_dma::{DmaBufMapping, DmaBufMode};
use cxdirect_emu::{Device as Model, EmuConfig};
use cxdirect_tests::send_all;
use cxdirect_tests::setup::bring_up_patient;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

const PORT: u16 = 5201;
const PAYLOAD_BYTES: u32 = 2048;
const BUFFERS: u32 = 128;
const ISN: u32 = 0xffff_f000; // the stream's sequence numbers wrap
const ISS: u32 = 77;
const MSS: usize = 1448;

/// ncdevmem's `-v 7` pattern: stream byte i is (i % 7) + 1, with 7 written as '\n'.
fn pattern(i: u64) -> u8 {
    match (i % 7) as u8 + 1 {
        7 => b'\n',
        v => v,
    }
}

/// A TCP/IPv4 frame to `PORT` with `flags`, sequence `seq`, the timestamp option (or, on a
/// SYN, MSS, SACK permitted, timestamps and window scale as Linux orders them) and `payload`.
fn tcp_frame(seq: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
    let syn = flags & 0x02 != 0;
    let opts: Vec<u8> = if syn {
        let mut o = vec![
            2, 4, 0x05, 0xa8, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7,
        ];
        o[4] = 4;
        o
    } else {
        vec![1, 1, 8, 10, 0, 0, 0, 2, 0, 0, 0, 1]
    };
    let tcp_len = 20 + opts.len();
    let total = 20 + tcp_len + payload.len();
    let mut f = vec![0u8; 14 + total];
    f[0..6].copy_from_slice(&[0xff; 6]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x0a]);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    f[14] = 0x45;
    f[16..18].copy_from_slice(&(total as u16).to_be_bytes());
    f[20] = 0x40;
    f[22] = 64;
    f[23] = 6;
    f[26..30].copy_from_slice(&[10, 0, 0, 1]);
    f[30..34].copy_from_slice(&[10, 0, 0, 2]);
    let t = 34;
    f[t..t + 2].copy_from_slice(&40000u16.to_be_bytes());
    f[t + 2..t + 4].copy_from_slice(&PORT.to_be_bytes());
    f[t + 4..t + 8].copy_from_slice(&seq.to_be_bytes());
    f[t + 8..t + 12].copy_from_slice(&(ISS + 1).to_be_bytes());
    f[t + 12] = ((tcp_len / 4) as u8) << 4;
    f[t + 13] = flags;
    f[t + 14..t + 16].copy_from_slice(&502u16.to_be_bytes());
    f[t + 20..t + 20 + opts.len()].copy_from_slice(&opts);
    f[t + tcp_len..].copy_from_slice(payload);
    cxdirect_emu::packet::insert_checksums(&mut f, true, true).unwrap();
    f
}

struct Rig {
    _tx_port: Port<EmuBackend>,
    tx_pool: cxdirect::Mempool,
    tx: TxQueue<EmuBackend>,
    /// The sender's plain queue: the receiver's replies arrive there.
    sender_rx: RxQueue<EmuBackend>,
    _rx_port: Port<EmuBackend>,
    rx_pool: cxdirect::Mempool,
    /// The receiver's send queue, for its replies.
    reply_tx: TxQueue<EmuBackend>,
    ends: Endpoints,
    split: SplitRxQueue<EmuBackend>,
    mapping: Arc<DmaBufMapping>,
}

fn rig(header_bytes: u32) -> Rig {
    let (a, b) = Model::pair(EmuConfig::default(), EmuConfig::default());
    let base = PortConfig {
        ring_size: 64,
        pool_buffers: 1024,
        ..PortConfig::default()
    };
    let Started {
        port: mut tx_port,
        queues: Queues {
            tx: mut a_tx,
            rx: mut a_rx,
        },
    } = Port::start(bring_up_patient(&a, "tx"), base.clone()).unwrap();
    let Started {
        port: mut rx_port,
        queues: Queues { tx: mut b_tx, .. },
    } = Port::start(bring_up_patient(&b, "rx"), base).unwrap();
    let a_mac = tx_port.device().info().mac;
    let b_mac = rx_port.device().info().mac;
    let size = u64::from(BUFFERS * PAYLOAD_BYTES);
    let buf = cxdirect_tests::dmabuf(size, "devmem-tcp");
    let mapping = {
        let (iommu, iovas) = rx_port.device().dma();
        Arc::new(
            buf.map(iommu, &iovas, 0, size, DmaBufMode::Revocable)
                .unwrap(),
        )
    };
    let split = rx_port
        .create_split_rx(&SplitRxConfig {
            ring_size: 64,
            header_bytes,
            header_buffers: 256,
            payload_memory: Arc::clone(&mapping),
            payload_bytes: PAYLOAD_BYTES,
        })
        .unwrap();
    let flow = FlowMatch {
        ip: IpVersion::V4,
        protocol: FlowProtocol::Tcp,
        dst_addr: None,
        src_addr: None,
        dst_port: Some(PORT),
        src_port: None,
    };
    rx_port.steer(flow, split.rqn()).unwrap();
    let ends = Endpoints {
        local_mac: b_mac,
        peer_mac: a_mac,
        local_ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
        peer_ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        local_port: PORT,
        peer_port: 40000,
    };
    Rig {
        tx_pool: tx_port.pool().clone(),
        _tx_port: tx_port,
        tx: a_tx.remove(0),
        sender_rx: a_rx.remove(0),
        rx_pool: rx_port.pool().clone(),
        reply_tx: b_tx.remove(0),
        ends,
        _rx_port: rx_port,
        split,
        mapping,
    }
}

/// The receiving side: the TCP receiver, the split queue's tokens by buffer, and the checks.
struct Receiver {
    rx: TcpReceiver,
    queue_tokens: HashMap<u32, PayloadToken>,
    app_tokens: Vec<u32>,
    /// Stream bytes checked so far.
    checked: u64,
    fragment_bytes: u64,
    linear_bytes: u64,
    fits: HashMap<&'static str, u64>,
    /// Go-back-N rounds the sender needed after the stream.
    retransmits: u32,
    last_reply: Option<Reply>,
}

impl Receiver {
    fn take(&mut self, rig: &mut Rig) {
        let mut got = Vec::new();
        while rig.split.rx_burst(&mut got, 32) > 0 {}
        for pkt in got {
            let mut hdr = [0u8; 1024];
            let n = pkt.header.read(0, &mut hdr);
            let tail = pkt.payload.map(|t| FrameTail {
                buffer: t.buffer(),
                offset: t.offset(),
                len: t.len(),
            });
            if let Some(t) = pkt.payload {
                assert!(self.queue_tokens.insert(t.buffer(), t).is_none());
            }
            let ok = pkt.header.flags.rx_ip_csum_good && pkt.header.flags.rx_l4_csum_good;
            let parsed = parse_split(&hdr[..n], tail, ok).expect("our frames parse");
            let fit = match parsed.fit {
                SplitFit::Exact => "exact",
                SplitFit::Linear(_) => "linear",
                SplitFit::OptionsInDmabuf(_) => "options",
            };
            if !parsed.segment.payload.is_empty() {
                *self.fits.entry(fit).or_default() += 1;
            }
            let h = parsed.headers_len;
            let mut events = Vec::new();
            let verdict = self
                .rx
                .on_segment(&parsed.segment, &mut |e| events.push(e))
                .unwrap();
            if let Some(r) = verdict.reply {
                self.last_reply = Some(r);
            }
            for e in events {
                self.event(e, rig, &hdr[..n], h);
            }
        }
        // The application gives its tokens back (a range at a time when they run on).
        let tokens = std::mem::take(&mut self.app_tokens);
        for t in tokens {
            let mut events = Vec::new();
            assert_eq!(self.rx.give_back(t, 1, &mut |e| events.push(e)), Ok(1));
            for e in events {
                self.event(e, rig, &[], 0);
            }
        }
    }

    fn event(&mut self, e: Event, rig: &mut Rig, hdr: &[u8], h: usize) {
        let stream = |seq: u32| u64::from(seq.wrapping_sub(ISN.wrapping_add(1)));
        match e {
            Event::Fragment {
                seq,
                offset,
                len,
                token,
            } => {
                assert_eq!(stream(seq), self.checked);
                let mut bytes = vec![0u8; len as usize];
                rig.mapping.read(offset as usize, &mut bytes).unwrap();
                for (i, b) in bytes.iter().enumerate() {
                    assert_eq!(
                        *b,
                        pattern(self.checked + i as u64),
                        "stream byte {}",
                        self.checked + i as u64
                    );
                }
                self.checked += u64::from(len);
                self.fragment_bytes += u64::from(len);
                self.app_tokens.push(token);
            }
            Event::Linear { seq, skip, len } => {
                assert_eq!(stream(seq), self.checked);
                let from = h + skip as usize;
                for (i, b) in hdr[from..from + len as usize].iter().enumerate() {
                    assert_eq!(*b, pattern(self.checked + i as u64));
                }
                self.checked += u64::from(len);
                self.linear_bytes += u64::from(len);
            }
            Event::Release { buffer } => {
                let t = self
                    .queue_tokens
                    .remove(&buffer)
                    .expect("a token the queue lent");
                assert_eq!(rig.split.give_back(&[t]).unwrap(), 1);
            }
            Event::Fin | Event::Reset => {}
        }
    }
}

fn send(rig: &mut Rig, frames: &[Vec<u8>]) {
    let mut batch: Vec<Mbuf> = frames
        .iter()
        .map(|f| {
            let mut m = rig.tx_pool.alloc().unwrap();
            m.set_data(f).unwrap();
            m
        })
        .collect();
    send_all(&mut rig.tx, &mut batch);
}

/// Sends `reply` as a frame from the receiver to the sender's plain queue, where the model
/// verified its checksums; returns it parsed back.
fn reply_through_model(rig: &mut Rig, reply: &Reply) -> cxdirect::devmem_tcp::Segment {
    let mut frame = [0u8; MAX_REPLY_FRAME];
    let n = write_reply(reply, &rig.ends, 1234, &mut frame).unwrap();
    let mut m = rig.rx_pool.alloc().unwrap();
    m.set_data(&frame[..n]).unwrap();
    send_all(&mut rig.reply_tx, &mut vec![m]);
    let mut got = Vec::new();
    for _ in 0..100 {
        rig.sender_rx.rx_burst(&mut got, 8).unwrap();
        if !got.is_empty() {
            break;
        }
    }
    let m = got.pop().expect("the reply arrived");
    assert!(
        m.flags.rx_ip_csum_good && m.flags.rx_l4_csum_good,
        "the model verified both checksums"
    );
    let bytes = m.to_vec();
    assert_eq!(&bytes[..], &frame[..n]);
    let s = parse_split(&bytes, None, true).unwrap().segment;
    // Timestamps only when the SYN's option was read (a 64-byte split cuts it: 74-byte SYN).
    assert_eq!(s.options.timestamp.map(|t| t.0), reply.tsecr.map(|_| 1234));
    s
}

fn stream_run(header_bytes: u32) -> Receiver {
    const TOTAL: usize = 300_000;
    let mut rig = rig(header_bytes);
    let mut r = Receiver {
        rx: TcpReceiver::new(RxConfig {
            buffers: BUFFERS,
            buffer_bytes: PAYLOAD_BYTES,
            ooo_segments: 32,
            mss: MSS as u16,
            window_scale: 7,
            iss: ISS,
        })
        .unwrap(),
        queue_tokens: HashMap::new(),
        app_tokens: Vec::new(),
        checked: 0,
        fragment_bytes: 0,
        linear_bytes: 0,
        fits: HashMap::new(),
        retransmits: 0,
        last_reply: None,
    };
    send(&mut rig, &[tcp_frame(ISN, 0x02, &[])]);
    r.take(&mut rig);
    assert_eq!(r.rx.state(), TcpState::SynReceived);
    let syn_ack = r.last_reply.take().expect("a SYN-ACK");
    // The SYN's headers are 74 bytes: a 64-byte split leaves its timestamp and window scale
    // options in the dmabuf, so neither is agreed; a 128-byte split reads them all.
    assert_eq!(syn_ack.tsecr.is_some(), header_bytes >= 74);
    assert_eq!(syn_ack.window_scale.is_some(), header_bytes >= 74);
    let seen = reply_through_model(&mut rig, &syn_ack);
    assert_eq!(seen.flags, TcpFlags::SYN | TcpFlags::ACK);
    assert_eq!(seen.ack, ISN.wrapping_add(1));
    send(&mut rig, &[tcp_frame(ISN.wrapping_add(1), 0x10, &[])]);
    r.take(&mut rig);
    assert_eq!(r.rx.state(), TcpState::Established);
    // Segments of the stream in bursts of 16: each burst sent with its halves swapped and one
    // segment repeated, a retransmit overlapping the previous burst now and then.
    let stream: Vec<u8> = (0..TOTAL as u64).map(pattern).collect();
    let seg = |at: usize, len: usize| {
        let end = (at + len).min(TOTAL);
        let flags = if end == TOTAL { 0x19 } else { 0x18 };
        tcp_frame(
            ISN.wrapping_add(1).wrapping_add(at as u32),
            flags,
            &stream[at..end],
        )
    };
    let mut at = 0;
    let mut round = 0;
    while at < TOTAL {
        let mut frames = Vec::new();
        for i in 0..16 {
            let start = at + i * MSS;
            if start >= TOTAL {
                break;
            }
            frames.push(seg(start, MSS));
        }
        let n = frames.len();
        frames.rotate_left(n / 2);
        frames.push(frames[0].clone());
        if round % 3 == 1 && at >= 700 {
            frames.push(seg(at - 700, 1000));
        }
        send(&mut rig, &frames);
        r.take(&mut rig);
        at += n * MSS;
        round += 1;
    }
    r.take(&mut rig);
    // The sender retransmits from the receiver's ACK until it has everything (segments out of
    // order whose payload began in host memory were dropped: linear bytes go only in order).
    let mut retransmits = 0;
    while r.checked < TOTAL as u64 && retransmits < 1000 {
        let from = r.checked as usize;
        let frames: Vec<Vec<u8>> = (0..16)
            .map(|i| from + i * MSS)
            .filter(|&s| s < TOTAL)
            .map(|s| seg(s, MSS))
            .collect();
        send(&mut rig, &frames);
        r.take(&mut rig);
        retransmits += 1;
    }
    assert_eq!(r.checked, TOTAL as u64, "every byte once, in order");
    // The last ACK, through the model, acknowledges the FIN.
    let ack = r.last_reply.take().expect("an ACK");
    let seen = reply_through_model(&mut rig, &ack);
    assert_eq!(
        seen.ack,
        ISN.wrapping_add(1)
            .wrapping_add(TOTAL as u32)
            .wrapping_add(1)
    );
    assert_eq!(
        r.rx.state(),
        TcpState::CloseWait,
        "the FIN came after the last byte"
    );
    assert_eq!(r.rx.tokens_lent(), 0);
    assert_eq!(r.rx.buffers_held(), 0);
    assert!(r.queue_tokens.is_empty(), "every queue token went back");
    let stats = rig.split.stats();
    assert_eq!(stats.tokens_outstanding, 0);
    r.retransmits = retransmits;
    r
}

#[test]
fn a_64_byte_split_leaves_options_in_the_dmabuf_and_delivers_every_byte() {
    let r = stream_run(64);
    assert_eq!(r.linear_bytes, 0);
    assert_eq!(r.fragment_bytes, 300_000);
    // Every data segment had its last two option bytes (of the timestamp) past the split.
    assert!(r.fits.get("options").copied().unwrap_or(0) > 200);
    assert_eq!(r.fits.get("linear"), None);
    assert!(r.rx.stats().options_in_dmabuf > 200);
    // Out-of-order segments were kept: no retransmission was needed; repeats were trimmed.
    assert_eq!(r.retransmits, 0);
    assert!(r.rx.stats().duplicate_bytes > 0);
    assert!(r.rx.stats().ooo_stored > 0);
}

#[test]
fn a_128_byte_split_puts_payload_bytes_in_host_memory_and_delivers_every_byte() {
    let r = stream_run(128);
    assert!(r.linear_bytes > 0);
    assert_eq!(r.linear_bytes + r.fragment_bytes, 300_000);
    assert!(r.fits.get("linear").copied().unwrap_or(0) > 200);
    let st = r.rx.stats();
    assert_eq!(st.linear_bytes, r.linear_bytes);
    assert_eq!(st.options_in_dmabuf, 0);
    // Out-of-order segments with host-memory payload were dropped and sent again.
    assert!(r.retransmits > 0);
    assert!(st.linear_segments > 0);
}

#[test]
fn a_66_byte_split_puts_every_data_segment_exactly_at_its_headers() {
    // 14 + 20 + 32: a data segment with timestamps splits between its headers and payload.
    let r = stream_run(66);
    assert_eq!(r.linear_bytes, 0);
    assert_eq!(r.fragment_bytes, 300_000);
    assert!(r.fits.get("exact").copied().unwrap_or(0) > 200);
    assert_eq!(r.fits.get("options"), None);
    // Only the SYN (74 bytes of headers) had options past the split.
    assert_eq!(r.rx.stats().options_in_dmabuf, 1);
}

#[test]
fn a_74_byte_split_reads_the_whole_syn_and_leaves_8_linear_bytes_per_data_segment() {
    let r = stream_run(74);
    assert_eq!(r.linear_bytes + r.fragment_bytes, 300_000);
    assert!(r.fits.get("linear").copied().unwrap_or(0) > 200);
    assert_eq!(r.fits.get("options"), None);
    assert_eq!(r.rx.stats().options_in_dmabuf, 0);
}

#[test]
fn header_bytes_take_any_length_from_14_to_1024() {
    let (_, b) = Model::pair(EmuConfig::default(), EmuConfig::default());
    let Started { mut port, .. } = Port::start(
        bring_up_patient(&b, "rx"),
        PortConfig {
            ring_size: 64,
            pool_buffers: 256,
            ..PortConfig::default()
        },
    )
    .unwrap();
    let size = u64::from(16 * PAYLOAD_BYTES);
    let buf = cxdirect_tests::dmabuf(size, "devmem-tcp-lengths");
    let mapping = {
        let (iommu, iovas) = port.device().dma();
        Arc::new(
            buf.map(iommu, &iovas, 0, size, DmaBufMode::Revocable)
                .unwrap(),
        )
    };
    let config = |header_bytes| SplitRxConfig {
        ring_size: 8,
        header_bytes,
        header_buffers: 16,
        payload_memory: Arc::clone(&mapping),
        payload_bytes: PAYLOAD_BYTES,
    };
    for h in [14, 54, 66, 74, 86, 1023] {
        let q = port.create_split_rx(&config(h)).unwrap();
        assert_eq!(q.header_bytes(), h);
    }
    for h in [0, 13, 1025] {
        assert!(matches!(
            port.create_split_rx(&config(h)),
            Err(cxdirect::DriverError::Config { .. })
        ));
    }
}
