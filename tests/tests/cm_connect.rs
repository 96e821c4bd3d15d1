//! The connection manager end to end against the model: two functions on the pair wire, each
//! with its GSI queue pair (QP1) carrying CM MADs, connect an RC queue pair by IP address and
//! port as rdma_cm does (REQ, REP, RTU), move data over it, and disconnect (DREQ, DREP).
//!
//! The peer's MAC comes from its RoCE address here; resolving it by ARP is tested in
//! `addresses.rs`.

use cxdirect::cm::{Cm, CmAddress, Event, Identity, QpAttributes, QpParams};
use cxdirect::rdma::{
    CompletionQueue, ConnectParams, Endpoint, GsiQueuePair, MadAddress, MadTransport, MemoryRegion,
    PathMtu, Payload, ProtectionDomain, QpCaps, RcQueuePair, RecvRequest, Roce, SendOp,
    SendRequest, WcOpcode, WcStatus, WorkCompletion,
};
use cxdirect::{Device, KeyAccess};
use cxdirect_apps::emulated::EmuBackend;
use cxdirect_emu::{Device as Model, EmuConfig, ExecMode};
use cxdirect_tests::setup::bring_up_patient;
use std::net::Ipv4Addr;
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
