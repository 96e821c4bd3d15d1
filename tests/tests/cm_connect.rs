//! The connection manager end to end against the model: two functions on the pair wire, each
//! with its GSI queue pair (QP1) carrying CM MADs, connect an RC queue pair by IP address and
//! port as rdma_cm does (REQ, REP, RTU), move data over it, and disconnect (DREQ, DREP).
//!
//! The peer's MAC comes from its RoCE address here; resolving it by ARP is tested in
//! `addresses.rs`.
//!
//! The same exchange captured on the pair wire is read back by tshark's InfiniBand dissector
//! (a reader that is not ours): every CM message decoded, rdma_cm's private-data header shown,
//! nothing malformed.

use cxdirect::cm::{Cm, CmAddress, Event, Identity, QpAttributes, QpParams};
use cxdirect::rdma::{
    CompletionQueue, ConnectParams, Endpoint, GsiQueuePair, MadAddress, MadTransport, MemoryRegion,
    PathMtu, Payload, ProtectionDomain, QpCaps, RcQueuePair, RecvRequest, Roce, SendOp,
    SendRequest, WcOpcode, WcStatus, WorkCompletion,
};
use cxdirect::{Device, KeyAccess};
use cxdirect_apps::emulated::EmuBackend;
use cxdirect_emu::pcap::PcapWriter;
use cxdirect_emu::wire::{PortId, Wire};
use cxdirect_emu::{Device as Model, EmuConfig, ExecMode};
use cxdirect_tests::setup::bring_up_patient;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::{Duration, Instant};

const PORT: u16 = 7174;
const A_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const B_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

/// One function: RoCE, a PD, a CQ, QP1 and its connection manager.
struct Side {
    dev: Device<EmuBackend>,
    roce: Roce,
    pd: ProtectionDomain,
    cq: CompletionQueue,
    gsi: GsiQueuePair<EmuBackend>,
    cm: Cm,
    events: Vec<Event>,
    /// The peer's MAC (what ARP would have resolved).
    peer_mac: [u8; 6],
}

impl Side {
    fn new(model: &Model, name: &str, ip: Ipv4Addr, guid: u64) -> Self {
        let mut dev = bring_up_patient(model, name);
        let roce = Roce::enable(&mut dev, ip.into()).expect("RoCE");
        let pd = ProtectionDomain::alloc(&mut dev).expect("PD");
        let cq = CompletionQueue::create(&mut dev, 256).expect("CQ");
        let gsi = GsiQueuePair::create(&mut dev, &pd, &roce, 64).expect("QP1");
        let cm = Cm::new(Identity::new(guid, ip, guid));
        Side {
            dev,
            roce,
            pd,
            cq,
            gsi,
            cm,
            events: Vec::new(),
            peer_mac: [0; 6],
        }
    }

    /// One turn: MADs received go to the CM, the CM's sends go out on QP1.
    fn turn(&mut self, now: Duration) {
        let mut got = Vec::new();
        self.gsi
            .poll_mads(&mut |from, mad| got.push((from.gid, from.qpn, *mad)))
            .expect("poll QP1");
        for (gid, qpn, mad) in got {
            let from = CmAddress { gid, qpn };
            if let Ok(Some(event)) = self.cm.receive(now, from, &mad) {
                self.events.push(event);
            }
        }
        let poll = self.cm.poll(now);
        self.events.extend(poll.events);
        for (to, mad) in poll.sends {
            let address = MadAddress::gsi(self.peer_mac, to.gid);
            self.gsi.send_mad(&address, &mad).expect("send a MAD");
        }
    }

    fn qp(&mut self) -> RcQueuePair<EmuBackend> {
        RcQueuePair::create(
            &mut self.dev,
            &self.pd,
            &mut self.cq,
            None,
            QpCaps::default(),
            &self.roce,
        )
        .expect("QP")
    }

    fn wait(&mut self, n: usize) -> Vec<WorkCompletion> {
        let start = Instant::now();
        let mut got = Vec::new();
        let mut batch = [WorkCompletion::default(); 16];
        while got.len() < n {
            let k = self.cq.poll(&mut batch).expect("poll");
            got.extend_from_slice(&batch[..k]);
            assert!(start.elapsed() < Duration::from_secs(20), "{got:?}");
            if k == 0 {
                std::thread::yield_now();
            }
        }
        got
    }
}

/// Programs `qp` from what the connection manager negotiated: the peer's QPN, PSN and GID,
/// this side's first PSN, and the REQ's path and retry attributes.
fn program(side: &mut Side, qp: &mut RcQueuePair<EmuBackend>, attrs: &QpAttributes) {
    qp.set_send_psn(attrs.sq_psn).expect("own PSN");
    let remote = Endpoint {
        qpn: attrs.remote_qpn,
        psn: attrs.rq_psn,
        gid: attrs.remote_gid,
        mac: side.peer_mac,
    };
    let params = ConnectParams {
        mtu: PathMtu::largest_for(match attrs.path_mtu {
            1 => 256,
            2 => 512,
            3 => 1024,
            4 => 2048,
            _ => 4096,
        })
        .expect("a path MTU"),
        ack_timeout: attrs.timeout,
        retry_count: attrs.retry_count,
        rnr_timer: attrs.min_rnr_timer.max(12),
        rnr_retry: attrs.rnr_retry,
        max_rd_atomic: attrs.max_rd_atomic,
        max_dest_rd_atomic: attrs.max_dest_rd_atomic,
        hop_limit: attrs.hop_limit,
        traffic_class: attrs.traffic_class,
        sl: attrs.sl & 0x7,
    };
    qp.connect(&mut side.dev, &remote, params)
        .expect("program the QP");
}

#[test]
fn an_rc_queue_pair_connects_through_rdma_cm_messages_on_qp1_and_disconnects() {
    let cfg = EmuConfig {
        roce: true,
        exec: ExecMode::Threaded,
        ..EmuConfig::default()
    };
    let (ma, mb) = Model::pair(cfg.clone(), cfg);
    let mut a = Side::new(&ma, "a", A_IP, 0xa);
    let mut b = Side::new(&mb, "b", B_IP, 0xb);
    a.peer_mac = b.roce.mac();
    b.peer_mac = a.roce.mac();
    b.cm.listen(PORT).expect("listen");

    let mut qa = a.qp();
    let mut qb = b.qp();
    let id_a =
        a.cm.connect(
            B_IP,
            PORT,
            40000,
            &QpParams::rping(qa.local_endpoint().qpn),
            b"",
        )
        .expect("connect");

    let start = Instant::now();
    let (mut a_up, mut b_up, mut accepted) = (false, false, false);
    while !(a_up && b_up) {
        let now = start.elapsed();
        assert!(
            now < Duration::from_secs(20),
            "a {:?} b {:?}",
            a.events,
            b.events
        );
        a.turn(now);
        b.turn(now);
        for event in std::mem::take(&mut b.events) {
            match event {
                Event::ConnectRequest(req) if !accepted => {
                    assert_eq!(req.cma.src_ip, A_IP, "rdma_cm's header names the client");
                    assert_eq!(req.cma.dst_ip, B_IP);
                    let params = req.negotiate(QpParams::rping(qb.local_endpoint().qpn));
                    let attrs = b.cm.accept(req.id, &params, b"").expect("accept");
                    assert_eq!(attrs.remote_qpn, qa.local_endpoint().qpn);
                    program(&mut b, &mut qb, &attrs);
                    accepted = true;
                }
                Event::Established { .. } => b_up = true,
                other => panic!("server: {other:?}"),
            }
        }
        for event in std::mem::take(&mut a.events) {
            match event {
                Event::Established { id, qp, .. } => {
                    assert_eq!(id, id_a);
                    assert_eq!(qp.remote_qpn, qb.local_endpoint().qpn);
                    program(&mut a, &mut qa, &qp);
                    a_up = true;
                }
                other => panic!("client: {other:?}"),
            }
        }
        std::thread::yield_now();
    }
    // The RTU may still be on its way; the server's QP is programmed since its accept.
    for _ in 0..50 {
        let now = start.elapsed();
        a.turn(now);
        b.turn(now);
    }

    // Data over the connection the CM set up: a SEND each way.
    let mrb = MemoryRegion::alloc(&mut b.dev, &b.pd, 4096, KeyAccess::READ_WRITE).unwrap();
    qb.post_recv(&[RecvRequest {
        wr_id: 7,
        sg_list: &[mrb.sge(0, 64)],
    }])
    .expect("post a receive");
    let message = *b"connected by the CM, on QP1 over RoCE v2";
    let send = SendRequest::new(1, SendOp::Send, Payload::Inline(&message));
    qa.post_send(&[send]).expect("send");
    let done = b.wait(1);
    assert_eq!(done[0].status, WcStatus::Success, "{done:?}");
    assert_eq!(done[0].opcode, WcOpcode::Recv);
    assert_eq!(done[0].byte_len as usize, message.len());
    let mut got = vec![0u8; message.len()];
    mrb.read(0, &mut got).unwrap();
    assert_eq!(got, message);
    let sent = a.wait(1);
    assert_eq!(sent[0].status, WcStatus::Success, "{sent:?}");

    // Disconnect: DREQ from the client, DREP from the server; both see it.
    a.cm.disconnect(id_a).expect("disconnect");
    let (mut a_down, mut b_down) = (false, false);
    while !(a_down && b_down) {
        let now = start.elapsed();
        assert!(
            now < Duration::from_secs(40),
            "a {:?} b {:?}",
            a.events,
            b.events
        );
        a.turn(now);
        b.turn(now);
        a_down |= a
            .events
            .iter()
            .any(|e| matches!(e, Event::Disconnected { .. }));
        b_down |= b
            .events
            .iter()
            .any(|e| matches!(e, Event::Disconnected { .. }));
        std::thread::yield_now();
    }
    // REQ, RTU, DREQ from the client; REP, DREP from the server (more when one was resent).
    assert!(a.gsi.stats().sent >= 3, "{:?}", a.gsi.stats());
    assert!(b.gsi.stats().sent >= 2, "{:?}", b.gsi.stats());
}

/// Two functions on a wire of their own (so that it can be tapped), with RoCE.
fn pair_on(wire: &Arc<Wire>) -> (Model, Model) {
    let cfg = EmuConfig {
        roce: true,
        exec: ExecMode::Threaded,
        ..EmuConfig::default()
    };
    let mut cfg_b = cfg.clone();
    cfg_b.mac[5] ^= 1;
    let (ma, mb) = (Model::new(cfg), Model::new(cfg_b));
    ma.attach(wire.clone(), PortId::A, &[&mb]);
    mb.attach(wire.clone(), PortId::B, &[&ma]);
    (ma, mb)
}

/// Runs both sides' turns until `done` holds (at most 20 s), answering connect requests with
/// an accept for `qpn_b`.
fn exchange(a: &mut Side, b: &mut Side, qpn_b: u32, done: impl Fn(&Side, &Side) -> bool) {
    let start = Instant::now();
    while !done(a, b) {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "a {:?} b {:?}",
            a.events,
            b.events
        );
        let now = start.elapsed();
        a.turn(now);
        b.turn(now);
        let requests: Vec<_> = b
            .events
            .iter()
            .filter_map(|e| match e {
                Event::ConnectRequest(r) => Some(*r),
                _ => None,
            })
            .collect();
        b.events.retain(|e| !matches!(e, Event::ConnectRequest(_)));
        for req in requests {
            let params = req.negotiate(QpParams::rping(qpn_b));
            b.cm.accept(req.id, &params, b"accepted").expect("accept");
        }
        std::thread::yield_now();
    }
}

/// `tshark -r capture ARGS`, its standard output.
fn tshark(capture: &std::path::Path, args: &[&str]) -> String {
    let out = std::process::Command::new("tshark")
        .arg("-r")
        .arg(capture)
        .args(args)
        .output()
        .expect("tshark runs");
    assert!(
        out.status.success(),
        "tshark: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// tshark (Wireshark's `packet-infiniband.c`) decodes the capture of a whole CM exchange on the
/// pair wire: REQ, REP, RTU, then DREQ, DREP, each a CM MAD in RoCE v2 on UDP 4791; the REQ's
/// service ID is rdma_cm's TCP port space with the port (`cma_get_service_id`), its private
/// data begins with rdma_cm's IPv4 header (`cma_format_hdr`) naming both addresses and the
/// source port, and no frame is malformed.
#[test]
#[cfg_attr(
    not(has_tshark),
    ignore = "needs tshark on PATH: apt-get install tshark"
)]
fn tshark_decodes_the_cm_exchange_with_rdma_cms_private_data() {
    const SRC_PORT: u16 = 40001;
    let wire = Arc::new(Wire::pair());
    let path = std::env::temp_dir().join(format!("cxdirect-cm-{}.pcap", std::process::id()));
    wire.set_pcap(PcapWriter::create(&path).expect("create the capture"))
        .expect("tap");
    let (ma, mb) = pair_on(&wire);
    let mut a = Side::new(&ma, "a", A_IP, 0xa);
    let mut b = Side::new(&mb, "b", B_IP, 0xb);
    a.peer_mac = b.roce.mac();
    b.peer_mac = a.roce.mac();
    b.cm.listen(PORT).expect("listen");
    let (qa, qb) = (a.qp(), b.qp());
    let id =
        a.cm.connect(
            B_IP,
            PORT,
            SRC_PORT,
            &QpParams::rping(qa.local_endpoint().qpn),
            b"hello from cxdirect",
        )
        .expect("connect");
    let up = |s: &Side| {
        s.events
            .iter()
            .any(|e| matches!(e, Event::Established { .. }))
    };
    exchange(&mut a, &mut b, qb.local_endpoint().qpn, |a, b| {
        up(a) && up(b)
    });
    a.cm.disconnect(id).expect("disconnect");
    let down = |s: &Side| {
        s.events
            .iter()
            .any(|e| matches!(e, Event::Disconnected { .. }))
    };
    exchange(&mut a, &mut b, qb.local_endpoint().qpn, |a, b| {
        down(a) && down(b)
    });
    // The DREP is on the wire once the client has it.
    wire.clear_pcap().expect("flush the capture");

    let fields = tshark(
        &path,
        &[
            "-T",
            "fields",
            "-E",
            "separator=/t",
            "-e",
            "frame.protocols",
            "-e",
            "infiniband.mad.attributeid",
            "-e",
            "infiniband.cm.req.serviceid",
            "-e",
            "infiniband.cm.req.ip_cm.sip4",
            "-e",
            "infiniband.cm.req.ip_cm.dip4",
            "-e",
            "infiniband.cm.req.ip_cm.sport",
            "-e",
            "_ws.malformed",
        ],
    );
    let verbose = tshark(&path, &["-V"]);
    let _ = std::fs::remove_file(&path);
    let rows: Vec<Vec<&str>> = fields.lines().map(|l| l.split('\t').collect()).collect();
    let num = |s: &str| match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).unwrap_or_else(|_| panic!("{s}")),
        None => s.parse().unwrap_or_else(|_| panic!("{s}")),
    };
    let mut attrs = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        assert!(row[0].contains("udp:infiniband"), "frame {i}: {fields}");
        assert!(!row[0].contains("malformed"), "frame {i}: {fields}");
        assert!(
            row.get(6).is_none_or(|m| m.is_empty()),
            "frame {i}: {fields}"
        );
        attrs.push(num(row[1]));
        if num(row[1]) == 0x0010 {
            // rdma_cm's TCP port space (0x0106) with the port in the low 16 bits.
            assert_eq!(
                num(row[2]),
                0x0000_0000_0106_0000 | u64::from(PORT),
                "{fields}"
            );
            assert_eq!(row[3], A_IP.to_string(), "{fields}");
            assert_eq!(row[4], B_IP.to_string(), "{fields}");
            assert_eq!(num(row[5]), u64::from(SRC_PORT), "{fields}");
        }
    }
    // REQ, REP, RTU, DREQ, DREP in that order (a retransmission may repeat one).
    let mut order = attrs.clone();
    order.dedup();
    assert_eq!(order, [0x10, 0x13, 0x14, 0x15, 0x16], "{fields}");
    assert!(!verbose.contains("Malformed"), "{verbose}");
    assert!(verbose.contains("IP CM ServiceID"), "{verbose}");
    assert!(verbose.contains("IP CM Private Data"), "{verbose}");
    // The service ID's port, and the consumer's private data after the header.
    assert!(verbose.contains("Destination Port: 0x1c06"), "{verbose}");
    assert!(verbose.contains("IP CM IP Version: 0x4"), "{verbose}");
    let hello: String = b"hello from cxdirect"
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert!(
        verbose.contains(&format!("IP CM Consumer PrivateData: {hello}")),
        "{verbose}"
    );
}
