//! RDMA through the driver's `rdma` room against the model: two functions on the pair wire,
//! RoCE v2 RC queue pairs between them.

use cxdirect::rdma::{
    CompletionQueue, ConnectParams, MemoryRegion, MrSource, PathMtu, Payload, QpCaps, QpState,
    RecvRequest, Roce, SendOp, SendRequest, Sge, SharedReceiveQueue, WcOpcode, WcStatus,
    WorkCompletion,
};
use cxdirect::{Device, DriverError, Event, KeyAccess};
use cxdirect_apps::emulated::EmuBackend;
use cxdirect_emu::{Device as Model, EmuConfig, ExecMode};
use cxdirect_tests::rdma_side::{connect, connect_with, pair, pattern, read, Qp, Side, ALL};
use cxdirect_tests::setup::bring_up_patient;

/// The path MTU the tests connect with.
const MTU: usize = 1024;

/// A pair of functions with one QP each, connected with the default parameters: `caps` sizes
/// a's QP, b's takes the defaults.
fn connected_pair(caps: QpCaps) -> (Side, Qp, Side, Qp, [Model; 2]) {
    let (mut a, mut b, models) = pair();
    let mut qa = a.qp(caps);
    let mut qb = b.qp(QpCaps::default());
    connect(&mut a, &mut qa, &mut b, &mut qb);
    (a, qa, b, qb, models)
}
/// Posts one signalled request of `op` over `list`.
fn post(qp: &mut Qp, wr_id: u64, op: SendOp, list: &[Sge]) {
    qp.post_send(&[SendRequest::new(wr_id, op, Payload::Gather(list))])
        .expect("post_send");
}

const SIZES: [usize; 6] = [0, 1, MTU - 1, MTU, MTU + 1, 1 << 20];

#[test]
fn the_handles_move_between_threads() {
    fn send<T: Send>() {}
    send::<Qp>();
    send::<CompletionQueue>();
    send::<SharedReceiveQueue<EmuBackend>>();
    send::<MemoryRegion>();
}

#[test]
fn every_opcode_at_every_size_moves_the_bytes_it_names() {
    let (mut a, mut qa, mut b, mut qb, _models) = connected_pair(QpCaps::default());
    assert_eq!(qa.state(), QpState::ReadyToSend);
    let len = (1 << 20) + 4096;
    let (src, dst) = (a.mr(len, ALL), b.mr(len, ALL));
    for (round, &size) in SIZES.iter().enumerate() {
        let seed = round as u8 * 7 + 1;
        // RDMA WRITE.
        let data = pattern(size, seed);
        src.write(0, &data).unwrap();
        post(
            &mut qa,
            1,
            SendOp::Write(dst.remote(8)),
            &[src.sge(0, size as u32)],
        );
        let wc = a.wait(1);
        assert_eq!(
            (wc[0].wr_id, wc[0].status, wc[0].opcode),
            (1, WcStatus::Success, WcOpcode::RdmaWrite),
            "{size}"
        );
        assert_eq!(read(&dst, 8, size), data, "WRITE of {size} bytes");

        // RDMA WRITE with immediate: consumes a receive.
        let data = pattern(size, seed + 1);
        src.write(0, &data).unwrap();
        qb.post_recv(&[RecvRequest {
            wr_id: 50,
            sg_list: &[],
        }])
        .unwrap();
        let op = SendOp::WriteImm(dst.remote(16), 0xabcd_0000 + size as u32);
        post(&mut qa, 2, op, &[src.sge(0, size as u32)]);
        assert_eq!(a.wait(1)[0].status, WcStatus::Success);
        let wc = b.wait(1)[0];
        assert_eq!(
            (wc.wr_id, wc.opcode, wc.byte_len, wc.imm, wc.status),
            (
                50,
                WcOpcode::RecvRdmaWithImm,
                size as u32,
                Some(0xabcd_0000 + size as u32),
                WcStatus::Success
            ),
            "{size}"
        );
        assert_eq!(read(&dst, 16, size), data, "WRITE_IMM of {size} bytes");

        // SEND and SEND with immediate.
        for (imm, wr_id) in [(None, 3u64), (Some(0x1234_5678u32), 4)] {
            let data = pattern(size, seed + 2 + wr_id as u8);
            src.write(100, &data).unwrap();
            qb.post_recv(&[RecvRequest {
                wr_id: 60 + wr_id,
                sg_list: &[dst.sge(32, len as u32 - 64)],
            }])
            .unwrap();
            let op = imm.map_or(SendOp::Send, SendOp::SendImm);
            post(&mut qa, wr_id, op, &[src.sge(100, size as u32)]);
            let wc = a.wait(1)[0];
            assert_eq!(
                (wc.wr_id, wc.opcode, wc.status),
                (wr_id, WcOpcode::Send, WcStatus::Success)
            );
            let wc = b.wait(1)[0];
            assert_eq!(
                (wc.wr_id, wc.opcode, wc.byte_len, wc.imm, wc.status, wc.qpn),
                (
                    60 + wr_id,
                    WcOpcode::Recv,
                    size as u32,
                    imm,
                    WcStatus::Success,
                    qb.qpn()
                ),
                "SEND {size}"
            );
            assert_eq!(read(&dst, 32, size), data, "SEND of {size} bytes");
        }

        // RDMA READ: the peer's bytes into local memory.
        let data = pattern(size, seed + 9);
        dst.write(64, &data).unwrap();
        post(
            &mut qa,
            5,
            SendOp::Read(dst.remote(64)),
            &[src.sge(200, size as u32)],
        );
        let wc = a.wait(1)[0];
        assert_eq!(
            (wc.wr_id, wc.opcode, wc.status, wc.byte_len),
            (5, WcOpcode::RdmaRead, WcStatus::Success, size as u32),
            "READ {size}"
        );
        assert_eq!(read(&src, 200, size), data, "READ of {size} bytes");
    }
    // Atomics on an 8-byte word of the peer.
    dst.write(0, &100u64.to_be_bytes()).unwrap();
    let op = SendOp::FetchAdd {
        remote: dst.remote(0),
        add: 5,
    };
    post(&mut qa, 6, op, &[src.sge(0, 8)]);
    let wc = a.wait(1)[0];
    assert_eq!(
        (wc.opcode, wc.status, wc.byte_len),
        (WcOpcode::FetchAdd, WcStatus::Success, 8)
    );
    assert_eq!(
        read(&src, 0, 8),
        100u64.to_be_bytes(),
        "the original value came back"
    );
    let op = SendOp::CompareSwap {
        remote: dst.remote(0),
        compare: 105,
        swap: 7,
    };
    post(&mut qa, 7, op, &[src.sge(8, 8)]);
    let wc = a.wait(1)[0];
    assert_eq!(
        (wc.opcode, wc.status),
        (WcOpcode::CompSwap, WcStatus::Success)
    );
    assert_eq!(read(&src, 8, 8), 105u64.to_be_bytes());
    assert_eq!(read(&dst, 0, 8), 7u64.to_be_bytes(), "swapped");
    a.nothing_more();
    b.nothing_more();
}

#[test]
fn inline_data_lands_as_gathered_data_does_and_bad_requests_post_nothing() {
    let caps = QpCaps {
        max_inline_data: 256,
        ..QpCaps::default()
    };
    let (mut a, mut qa, mut b, mut qb, _models) = connected_pair(caps);
    let (src, dst) = (a.mr(8192, ALL), b.mr(8192, ALL));
    for (round, size) in [0usize, 1, 12, 60, 61, 200, 256].into_iter().enumerate() {
        let data = pattern(size, round as u8 + 3);
        // Inline WRITE to offset 0, the same bytes gathered to offset 4096.
        src.write(0, &data).unwrap();
        let inline = SendRequest::new(1, SendOp::Write(dst.remote(0)), Payload::Inline(&data));
        let sge = [src.sge(0, size as u32)];
        let gather = SendRequest::new(2, SendOp::Write(dst.remote(4096)), Payload::Gather(&sge));
        qa.post_send(&[inline, gather]).unwrap();
        let wcs = a.wait(2);
        assert!(
            wcs.iter().all(|wc| wc.status == WcStatus::Success),
            "{wcs:?}"
        );
        assert_eq!(read(&dst, 0, size), data, "inline WRITE of {size}");
        assert_eq!(read(&dst, 4096, size), data, "gathered WRITE of {size}");
        // An inline SEND fills a receive like a gathered one.
        qb.post_recv(&[RecvRequest {
            wr_id: 9,
            sg_list: &[dst.sge(6000, 2000)],
        }])
        .unwrap();
        qa.post_send(&[SendRequest::new(
            3,
            SendOp::SendImm(7),
            Payload::Inline(&data),
        )])
        .unwrap();
        assert_eq!(a.wait(1)[0].status, WcStatus::Success);
        let wc = b.wait(1)[0];
        assert_eq!((wc.byte_len, wc.imm), (size as u32, Some(7)));
        assert_eq!(read(&dst, 6000, size), data, "inline SEND of {size}");
    }
    // A gather list split over three entries arrives as one message.
    src.write(0, &pattern(3000, 1)).unwrap();
    let sges = [src.sge(0, 1000), src.sge(1000, 0), src.sge(1000, 2000)];
    post(&mut qa, 4, SendOp::Write(dst.remote(100)), &sges[..2]);
    post(&mut qa, 5, SendOp::Write(dst.remote(1100)), &sges[2..]);
    assert_eq!(a.wait(2).len(), 2);
    assert_eq!(read(&dst, 100, 3000), pattern(3000, 1));

    // Requests past the QP's limits, or that do not fit their operation: refused, nothing
    // posted (the ring is untouched: the next good request completes alone).
    let big = vec![0u8; 257];
    let sge = [src.sge(0, 8)];
    let too_many = [src.sge(0, 1); 3];
    let bad: [SendRequest; 4] = [
        SendRequest::new(10, SendOp::Write(dst.remote(0)), Payload::Inline(&big)),
        SendRequest::new(11, SendOp::Read(dst.remote(0)), Payload::Inline(&big[..8])),
        SendRequest::new(12, SendOp::Send, Payload::Gather(&too_many)),
        SendRequest::new(
            13,
            SendOp::FetchAdd {
                remote: dst.remote(0),
                add: 1,
            },
            Payload::Gather(&sge[..0]),
        ),
    ];
    for wr in bad {
        let good = SendRequest::new(20, SendOp::Write(dst.remote(0)), Payload::Gather(&sge));
        let err = qa.post_send(&[good, wr]).unwrap_err();
        assert!(
            matches!(err, DriverError::BadWorkRequest { index: 1, .. }),
            "{}: {err}",
            wr.wr_id
        );
    }
    assert_eq!(qa.outstanding(), (0, 0), "nothing was posted");
    // One doorbell per call; BlueFlame only for a call of one one-block WQE.
    let before = qa.stats();
    post(&mut qa, 30, SendOp::Write(dst.remote(0)), &sge);
    let two = [
        SendRequest::new(31, SendOp::Write(dst.remote(0)), Payload::Gather(&sge)),
        SendRequest::new(32, SendOp::Write(dst.remote(8)), Payload::Gather(&sge)),
    ];
    qa.post_send(&two).unwrap();
    let long = [5u8; 100];
    qa.post_send(&[SendRequest::new(
        33,
        SendOp::Write(dst.remote(0)),
        Payload::Inline(&long),
    )])
    .unwrap();
    assert_eq!(a.wait(4).len(), 4);
    let after = qa.stats();
    assert_eq!(
        (
            after.sends - before.sends,
            after.doorbells - before.doorbells,
            after.blueflame - before.blueflame
        ),
        (4, 3, 1),
        "a lone one-block WQE by BlueFlame, a pair and a two-block WQE by the doorbell"
    );
    a.nothing_more();
    let too_many_recv = [dst.sge(0, 1); 3];
    let err = qb
        .post_recv(&[RecvRequest {
            wr_id: 1,
            sg_list: &too_many_recv,
        }])
        .unwrap_err();
    assert!(
        matches!(err, DriverError::BadWorkRequest { index: 0, .. }),
        "{err}"
    );
}

#[test]
fn a_completion_every_nth_request_retires_the_unsignalled_ones_before_it() {
    let caps = QpCaps {
        max_send_wr: 64,
        ..QpCaps::default()
    };
    let (mut a, mut qa, mut b, _qb, _models) = connected_pair(caps);
    let (src, dst) = (a.mr(1 << 16, ALL), b.mr(1 << 16, ALL));
    src.write(0, &pattern(1 << 16, 5)).unwrap();
    const EVERY: u64 = 16;
    let mut signalled = Vec::new();
    for round in 0..10u64 {
        let mut wrs = Vec::new();
        let sges: Vec<_> = (0..32u64).map(|i| [src.sge(i * 64, 64)]).collect();
        for i in 0..32u64 {
            let id = round * 32 + i;
            let mut wr = SendRequest::new(
                id,
                SendOp::Write(dst.remote((id % 1000) * 64)),
                Payload::Gather(&sges[i as usize]),
            );
            wr.signaled = id % EVERY == EVERY - 1;
            // Fenced and solicited requests are taken as any other.
            wr.fence = id % 5 == 0;
            wr.solicited = id % 7 == 0;
            wrs.push(wr);
        }
        qa.post_send(&wrs).unwrap();
        let wcs = a.wait(2);
        for wc in &wcs {
            assert_eq!(wc.status, WcStatus::Success);
            signalled.push(wc.wr_id);
        }
        assert_eq!(
            qa.outstanding().0,
            0,
            "the ring is free again after its completions"
        );
    }
    let expect: Vec<u64> = (0..320).filter(|id| id % EVERY == EVERY - 1).collect();
    assert_eq!(
        signalled, expect,
        "one completion per {EVERY} requests, in order"
    );
    a.nothing_more();
}

#[test]
fn four_queue_pairs_share_a_receive_queue_and_its_limit_fires_once_per_arming() {
    let (mut a, mut b, _models) = pair();
    let mut srq = b.srq(64, 1);
    let mut senders = Vec::new();
    let mut receivers = Vec::new();
    for _ in 0..4 {
        let mut qa = a.qp(QpCaps::default());
        let mut qb = b.qp_on(Some(&srq), QpCaps::default());
        connect(&mut a, &mut qa, &mut b, &mut qb);
        senders.push(qa);
        receivers.push(qb);
    }
    // A receive on a QP that uses the SRQ is refused.
    let dst = b.mr(64 * 256, ALL);
    let err = receivers[0]
        .post_recv(&[RecvRequest {
            wr_id: 0,
            sg_list: &[dst.sge(0, 256)],
        }])
        .unwrap_err();
    assert!(matches!(err, DriverError::BadWorkRequest { .. }), "{err}");

    let src = a.mr(4096, ALL);
    src.write(0, &pattern(4096, 9)).unwrap();
    let mut next_wr = 0u64;
    let mut post_recvs = |srq: &mut SharedReceiveQueue<EmuBackend>, n: u64| {
        let sges: Vec<_> = (next_wr..next_wr + n)
            .map(|i| [dst.sge((i % 64) * 256, 256)])
            .collect();
        let wrs: Vec<_> = sges
            .iter()
            .enumerate()
            .map(|(k, sg_list)| RecvRequest {
                wr_id: 1000 + next_wr + k as u64,
                sg_list,
            })
            .collect();
        srq.post_recv(&wrs).unwrap();
        next_wr += n;
    };
    post_recvs(&mut srq, 32);
    srq.arm_limit(&mut b.dev, 8).unwrap();
    let limits = |dev: &mut Device<EmuBackend>| {
        dev.poll_events()
            .unwrap()
            .into_iter()
            .filter(|e| matches!(e, Event::SrqLimit { .. }))
            .collect::<Vec<_>>()
    };
    assert!(
        limits(&mut b.dev).is_empty(),
        "armed above what is posted: no event yet"
    );
    let mut received = Vec::new();
    let mut send =
        |a: &mut Side, b: &mut Side, senders: &mut Vec<Qp>, n: usize, sent: &mut usize| {
            for _ in 0..n {
                let k = *sent % 4;
                post(
                    &mut senders[k],
                    *sent as u64,
                    SendOp::Send,
                    &[src.sge(k as u64, 100)],
                );
                assert_eq!(a.wait(1)[0].status, WcStatus::Success);
                *sent += 1;
            }
            received.extend(b.wait(n));
        };
    let mut sent = 0;
    send(&mut a, &mut b, &mut senders, 25, &mut sent);
    assert_eq!(
        limits(&mut b.dev),
        vec![Event::SrqLimit { srq: srq.srqn() }],
        "one event when fewer than 8 stayed posted"
    );
    send(&mut a, &mut b, &mut senders, 5, &mut sent);
    assert!(
        limits(&mut b.dev).is_empty(),
        "one-shot: no event until armed again"
    );
    // Refill (the completed WQEs are linked back in), arm again, fall below again.
    post_recvs(&mut srq, 40);
    srq.arm_limit(&mut b.dev, 4).unwrap();
    send(&mut a, &mut b, &mut senders, 39, &mut sent);
    assert_eq!(
        limits(&mut b.dev),
        vec![Event::SrqLimit { srq: srq.srqn() }]
    );
    // Every receive: once, from the SRQ, on one of the four QPs, in posting order.
    let qpns: Vec<u32> = receivers.iter().map(|q| q.qpn()).collect();
    let ids: Vec<u64> = received.iter().map(|wc| wc.wr_id).collect();
    assert_eq!(ids, (1000..1000 + 69).collect::<Vec<_>>());
    for wc in &received {
        assert_eq!(
            (wc.status, wc.srqn, wc.byte_len),
            (WcStatus::Success, Some(srq.srqn()), 100)
        );
        assert!(qpns.contains(&wc.qpn));
    }
    for (i, q) in qpns.iter().enumerate() {
        let n = received.iter().filter(|wc| wc.qpn == *q).count();
        assert_eq!(
            n,
            69 / 4 + usize::from(i < 69 % 4),
            "QP {i} received its share"
        );
    }
    // Teardown in order; the receives still posted come back from the SRQ.
    for q in receivers {
        q.destroy(&mut b.dev, &mut b.cq).unwrap();
    }
    let left = srq.destroy(&mut b.dev).unwrap();
    assert_eq!(left.len(), 72 - 69);
    for q in senders {
        q.destroy(&mut a.dev, &mut a.cq).unwrap();
    }
    src.deregister(&mut a.dev).unwrap();
    dst.deregister(&mut b.dev).unwrap();
    for side in [a, b] {
        let Side {
            mut dev, pd, cq, ..
        } = side;
        cq.destroy(&mut dev).unwrap();
        pd.dealloc(&mut dev).unwrap();
        dev.teardown().unwrap();
    }
}

#[test]
fn rkey_abuse_fails_with_a_remote_access_error_flushes_the_rest_and_reset_reconnects() {
    let (mut a, mut qa, mut b, mut qb, _models) = connected_pair(QpCaps::default());
    let src = a.mr(8192, ALL);
    let dst = b.mr(8192, ALL);
    // Readable by peers, not writable.
    let read_only = KeyAccess {
        remote_write: false,
        ..ALL
    };
    let guarded = b.mr(4096, read_only);
    guarded.write(0, &[0x5a; 64]).unwrap();
    src.write(0, &pattern(4096, 4)).unwrap();
    // Receives posted on A: the QP's error must return them too.
    let recv_sge = [src.sge(4096, 512)];
    let recvs: Vec<_> = (0..3)
        .map(|i| RecvRequest {
            wr_id: 500 + i,
            sg_list: &recv_sge,
        })
        .collect();
    qa.post_recv(&recvs).unwrap();
    let sge = [src.sge(0, 64)];
    let wr = |id: u64, remote, signaled: bool| SendRequest {
        signaled,
        ..SendRequest::new(id, SendOp::Write(remote), Payload::Gather(&sge))
    };
    let bad_key = cxdirect::rdma::RemoteAddr {
        rkey: dst.rkey() ^ 0x0000_0100,
        ..dst.remote(0)
    };
    let wrs = [
        wr(1, dst.remote(0), true),
        wr(2, dst.remote(64), false),
        wr(3, guarded.remote(0), true),
        wr(4, dst.remote(128), true),
        wr(5, dst.remote(192), false),
        wr(6, bad_key, true),
    ];
    qa.post_send(&wrs).unwrap();
    // The QP in error flushes its receive queue as well as its send queue; the two queues'
    // completions may interleave, each queue's in posting order.
    let wcs = a.wait(8);
    let sends: Vec<(u64, WcStatus)> = wcs
        .iter()
        .filter(|wc| wc.opcode != WcOpcode::Recv)
        .map(|wc| (wc.wr_id, wc.status))
        .collect();
    assert_eq!(
        sends,
        vec![
            (1, WcStatus::Success),
            (3, WcStatus::RemAccessErr),
            (4, WcStatus::WrFlushErr),
            (5, WcStatus::WrFlushErr),
            (6, WcStatus::WrFlushErr),
        ],
        "the refused WRITE fails, every later request is flushed (signalled or not)"
    );
    let refused = wcs
        .iter()
        .find(|wc| wc.wr_id == 3)
        .expect("the refused WRITE");
    assert_eq!(refused.opcode, WcOpcode::RdmaWrite);
    let receives: Vec<(u64, WcStatus)> = wcs
        .iter()
        .filter(|wc| wc.opcode == WcOpcode::Recv)
        .map(|wc| (wc.wr_id, wc.status))
        .collect();
    assert_eq!(
        receives,
        (500..503)
            .map(|id| (id, WcStatus::WrFlushErr))
            .collect::<Vec<_>>(),
        "the posted receives come back flushed"
    );
    assert_eq!(qa.state(), QpState::Error);
    assert_eq!(
        read(&guarded, 0, 64),
        vec![0x5a; 64],
        "the guarded memory is untouched"
    );
    assert_eq!(read(&dst, 0, 128), pattern(4096, 4)[..64].repeat(2));

    // Reset: nothing is handed out twice, then the QP connects again.
    qa.reset(&mut a.dev, &mut a.cq).unwrap();
    a.nothing_more();
    assert_eq!(qa.state(), QpState::Reset);
    assert_eq!(qa.outstanding(), (0, 0));
    qb.reset(&mut b.dev, &mut b.cq).unwrap();
    b.nothing_more();
    connect(&mut a, &mut qa, &mut b, &mut qb);
    for round in 0..3u8 {
        let data = pattern(3000, 40 + round);
        src.write(0, &data).unwrap();
        qb.post_recv(&[RecvRequest {
            wr_id: 7,
            sg_list: &[dst.sge(4096, 4096)],
        }])
        .unwrap();
        post(&mut qa, 8, SendOp::Send, &[src.sge(0, 3000)]);
        assert_eq!(a.wait(1)[0].status, WcStatus::Success);
        let wc = b.wait(1)[0];
        assert_eq!(
            (wc.wr_id, wc.byte_len, wc.status),
            (7, 3000, WcStatus::Success)
        );
        assert_eq!(
            read(&dst, 4096, 3000),
            data,
            "after reconnect, round {round}"
        );
    }
}

#[test]
fn a_region_deregistered_under_a_peers_writes_refuses_them_and_its_memory_stays_untouched() {
    let (mut a, mut qa, mut b, _qb, _models) = connected_pair(QpCaps::default());
    let src = a.mr(8192, ALL);
    // The peer writes into a memfd dmabuf on B.
    const LEN: u64 = 16 * 4096;
    let fd = cxdirect_dma::export::memfd("rdma-target", LEN).unwrap();
    let exporter = std::fs::File::from(fd.try_clone().unwrap());
    let buf = cxdirect_dma::DmaBuf::from_memfd(fd).unwrap();
    let (iommu, iovas) = b.dev.dma();
    let mapping = std::sync::Arc::new(
        buf.map(iommu, &iovas, 0, LEN, cxdirect_dma::DmaBufMode::Pinned)
            .unwrap(),
    );
    let mr = MemoryRegion::register(&mut b.dev, &b.pd, MrSource::DmaBuf(&mapping), ALL).unwrap();
    let exporter_bytes = |offset: u64, len: usize| {
        use std::os::unix::fs::FileExt;
        let mut out = vec![0u8; len];
        exporter.read_exact_at(&mut out, offset).unwrap();
        out
    };
    // WRITEs land in the exporter's own memory.
    let data = pattern(LEN as usize / 2, 11);
    src.write(0, &data[..8192]).unwrap();
    for k in 0..4u64 {
        post(
            &mut qa,
            k,
            SendOp::Write(mr.remote(k * 8192)),
            &[src.sge(0, 8192)],
        );
    }
    assert!(a.wait(4).iter().all(|wc| wc.status == WcStatus::Success));
    for k in 0..4u64 {
        assert_eq!(
            exporter_bytes(k * 8192, 8192),
            data[..8192],
            "block {k} in the memfd"
        );
    }
    // Deregistered: the peer's next WRITEs are refused and nothing reaches the memory.
    let remote = mr.remote(0);
    mr.deregister(&mut b.dev).unwrap();
    let before = exporter_bytes(0, LEN as usize);
    src.write(0, &[0xee; 8192]).unwrap();
    for k in 0..3u64 {
        let at = cxdirect::rdma::RemoteAddr {
            addr: remote.addr + k * 4096,
            ..remote
        };
        post(&mut qa, 10 + k, SendOp::Write(at), &[src.sge(0, 4096)]);
    }
    let got: Vec<WcStatus> = a.wait(3).iter().map(|wc| wc.status).collect();
    assert_eq!(
        got,
        [
            WcStatus::RemAccessErr,
            WcStatus::WrFlushErr,
            WcStatus::WrFlushErr
        ]
    );
    assert_eq!(
        exporter_bytes(0, LEN as usize),
        before,
        "the freed range is untouched"
    );
    qa.reset(&mut a.dev, &mut a.cq).unwrap();
    a.nothing_more();
}

#[test]
fn roce_is_refused_clearly_without_the_capability_and_runs_over_ipv6_gids() {
    let model = Model::new(EmuConfig {
        roce: false,
        ..EmuConfig::default()
    });
    let mut dev = bring_up_patient(&model, "no-roce");
    let err = Roce::enable(&mut dev, "10.0.0.9".parse().unwrap()).unwrap_err();
    assert!(
        matches!(err, DriverError::Unsupported { what: "RoCE", .. }),
        "{err}"
    );
    dev.teardown().unwrap();

    let cfg = EmuConfig {
        roce: true,
        exec: ExecMode::Threaded,
        ..EmuConfig::default()
    };
    let (ma, mb) = Model::pair(cfg.clone(), cfg);
    let mut a = Side::new(&ma, "a6", "fd00::1");
    let mut b = Side::new(&mb, "b6", "fd00::2");
    assert_eq!(
        a.roce.gid(),
        "fd00::1".parse::<std::net::Ipv6Addr>().unwrap().octets()
    );
    assert_eq!(
        a.roce.gid_index(),
        1,
        "the RoCE v2 entry of the address after the link-local one, as Linux places them on \
         a function whose RoCE caps list v2 alone"
    );
    // Bring-up let software choose the QPs' UDP source ports (SET_HCA_CAP of the RoCE page).
    let mut query = [0u8; 16];
    query[0..2].copy_from_slice(&(cxdirect_hw::cmd::Opcode::QueryHcaCap as u16).to_be_bytes());
    let op_mod = cxdirect_hw::hca::query_cap_op_mod(cxdirect_hw::hca::cap_type::ROCE, true);
    query[6..8].copy_from_slice(&op_mod.to_be_bytes());
    let out = a.dev.exec(&query, 0x1010).unwrap();
    let caps = cxdirect_hw::roce::RoceCap::new(&out[0x10..0x110]).unwrap();
    assert!(caps.sw_r_roce_src_udp_port());
    let mut qa = a.qp(QpCaps::default());
    let mut qb = b.qp(QpCaps::default());
    connect(&mut a, &mut qa, &mut b, &mut qb);
    let (src, dst) = (a.mr(4096, ALL), b.mr(4096, ALL));
    src.write(0, &pattern(2000, 6)).unwrap();
    qb.post_recv(&[RecvRequest {
        wr_id: 1,
        sg_list: &[dst.sge(0, 4096)],
    }])
    .unwrap();
    post(&mut qa, 2, SendOp::Send, &[src.sge(0, 2000)]);
    assert_eq!(a.wait(1)[0].status, WcStatus::Success);
    assert_eq!(b.wait(1)[0].byte_len, 2000);
    assert_eq!(read(&dst, 0, 2000), pattern(2000, 6));
    // Remote rights without local write are refused, as ibv_reg_mr refuses them.
    let no_local_write = KeyAccess {
        write: false,
        ..ALL
    };
    let err = MemoryRegion::alloc(&mut a.dev, &a.pd, 4096, no_local_write).unwrap_err();
    assert!(matches!(err, DriverError::Config(_)), "{err}");
}

#[test]
fn destroying_a_queue_pair_returns_its_posted_receives_through_flush_completions() {
    let (mut a, _qa, mut b, mut qb, models) = connected_pair(QpCaps::default());
    let dst = b.mr(4096, ALL);
    let sges: Vec<_> = (0..5u64).map(|i| [dst.sge(i * 512, 512)]).collect();
    let recvs: Vec<_> = sges
        .iter()
        .enumerate()
        .map(|(i, sg_list)| RecvRequest {
            wr_id: 70 + i as u64,
            sg_list,
        })
        .collect();
    qb.post_recv(&recvs).unwrap();
    // Another QP on the same CQ keeps its completion through the drain.
    let mut qc = b.qp(QpCaps::default());
    let mut qd = a.qp(QpCaps::default());
    connect(&mut b, &mut qc, &mut a, &mut qd);
    let (src, far) = (b.mr(4096, ALL), a.mr(4096, ALL));
    post(&mut qc, 99, SendOp::Write(far.remote(0)), &[src.sge(0, 16)]);
    std::thread::sleep(std::time::Duration::from_millis(20));
    let qps_before = models[1].qp_count();
    qb.destroy(&mut b.dev, &mut b.cq).unwrap();
    assert_eq!(
        models[1].qp_count(),
        qps_before - 1,
        "the QP is gone from the device"
    );
    let mut wcs = b.wait(6);
    wcs.sort_by_key(|wc| wc.wr_id);
    let got: Vec<(u64, WcStatus)> = wcs.iter().map(|wc| (wc.wr_id, wc.status)).collect();
    let mut want: Vec<(u64, WcStatus)> = (70..75).map(|id| (id, WcStatus::WrFlushErr)).collect();
    want.push((99, WcStatus::Success));
    assert_eq!(
        got, want,
        "every receive flushed once, the other QP's completion kept"
    );
    b.nothing_more();
}

#[test]
fn a_connection_to_a_qp_that_does_not_exist_fails_its_send_with_retries_exceeded() {
    let (mut a, mut b, _models) = pair();
    let mut qa = a.qp(QpCaps::default());
    let qb = b.qp(QpCaps::default());
    let nowhere = cxdirect::rdma::Endpoint {
        qpn: qb.qpn() + 0x100,
        ..qb.local_endpoint()
    };
    let params = ConnectParams {
        ack_timeout: 8,
        retry_count: 1,
        ..ConnectParams::default()
    };
    qa.connect(&mut a.dev, &nowhere, params).unwrap();
    let src = a.mr(4096, ALL);
    post(&mut qa, 1, SendOp::Send, &[src.sge(0, 64)]);
    let wc = a.wait(1)[0];
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::RetryExcErr));
    assert_eq!(qa.state(), QpState::Error);
    // Out-of-range connection parameters are refused before anything is sent.
    qa.reset(&mut a.dev, &mut a.cq).unwrap();
    for bad in [
        ConnectParams {
            retry_count: 8,
            ..params
        },
        ConnectParams {
            ack_timeout: 32,
            ..params
        },
        ConnectParams {
            mtu: PathMtu::Mtu4096,
            ..params
        },
    ] {
        let err = qa.connect(&mut a.dev, &nowhere, bad).unwrap_err();
        assert!(matches!(err, DriverError::Config(_)), "{err}");
        assert_eq!(qa.state(), QpState::Reset);
    }
}

#[test]
fn receives_posted_before_connect_take_the_first_sends_or_come_back_flushed() {
    let (mut a, mut b, _models) = pair();
    let mut qa = a.qp(QpCaps::default());
    let mut qb = b.qp(QpCaps::default());
    let (src, dst) = (a.mr(4096, ALL), b.mr(4096, ALL));
    let sge = [dst.sge(0, 4096)];
    qb.post_recv(&[RecvRequest {
        wr_id: 1,
        sg_list: &sge,
    }])
    .unwrap();
    connect(&mut a, &mut qa, &mut b, &mut qb);
    src.write(0, &pattern(500, 2)).unwrap();
    post(&mut qa, 2, SendOp::Send, &[src.sge(0, 500)]);
    assert_eq!(a.wait(1)[0].status, WcStatus::Success);
    let wc = b.wait(1)[0];
    assert_eq!((wc.wr_id, wc.byte_len), (1, 500));
    assert_eq!(read(&dst, 0, 500), pattern(500, 2));
    // Posted in reset and never connected: destroy returns them flushed.
    let mut qc = b.qp(QpCaps::default());
    qc.post_recv(&[
        RecvRequest {
            wr_id: 3,
            sg_list: &sge,
        },
        RecvRequest {
            wr_id: 4,
            sg_list: &sge,
        },
    ])
    .unwrap();
    qc.destroy(&mut b.dev, &mut b.cq).unwrap();
    let got: Vec<(u64, WcStatus)> = b.wait(2).iter().map(|wc| (wc.wr_id, wc.status)).collect();
    assert_eq!(got, [(3, WcStatus::WrFlushErr), (4, WcStatus::WrFlushErr)]);
    b.nothing_more();
}

#[test]
fn over_a_wire_that_drops_duplicates_and_reorders_every_message_arrives_once_and_intact() {
    use cxdirect_emu::wire::{Impairments, PortId, Wire, WireConfig};
    let cfg = EmuConfig {
        roce: true,
        exec: ExecMode::Threaded,
        ..EmuConfig::default()
    };
    let mut cfg_b = cfg.clone();
    cfg_b.mac[5] ^= 1;
    let (ma, mb) = (Model::new(cfg), Model::new(cfg_b));
    let wire = std::sync::Arc::new(
        Wire::pair_with(WireConfig {
            impairments: Impairments {
                seed: 35,
                drop_probability: 0.01,
                duplicate_probability: 0.01,
                reorder_probability: 0.01,
                reorder_window: 3,
                ..Impairments::NONE
            },
            ..WireConfig::default()
        })
        .unwrap(),
    );
    ma.attach(wire.clone(), PortId::A, &[&mb]);
    mb.attach(wire, PortId::B, &[&ma]);
    let mut a = Side::new(&ma, "lossy-a", "10.0.1.1");
    let mut b = Side::new(&mb, "lossy-b", "10.0.1.2");
    let mut qa = a.qp(QpCaps::default());
    let mut qb = b.qp(QpCaps::default());
    let params = ConnectParams {
        // About 4 ms: a lost packet is sent again soon.
        ack_timeout: 10,
        ..ConnectParams::default()
    };
    connect_with(&mut a, &mut qa, &mut b, &mut qb, params);
    const SIZE: usize = 3000;
    const MESSAGES: u64 = 200;
    let src = a.mr(SIZE * 4, ALL);
    let dst = b.mr(SIZE * 4, ALL);
    let mut received = Vec::new();
    for m in 0..MESSAGES {
        let data = pattern(SIZE, m as u8);
        src.write(0, &data).unwrap();
        if m % 2 == 0 {
            qb.post_recv(&[RecvRequest {
                wr_id: m,
                sg_list: &[dst.sge(0, SIZE as u32)],
            }])
            .unwrap();
            post(&mut qa, m, SendOp::Send, &[src.sge(0, SIZE as u32)]);
        } else {
            post(
                &mut qa,
                m,
                SendOp::Write(dst.remote(SIZE as u64)),
                &[src.sge(0, SIZE as u32)],
            );
        }
        let wc = a.wait(1)[0];
        assert_eq!((wc.wr_id, wc.status), (m, WcStatus::Success), "message {m}");
        if m % 2 == 0 {
            let wc = b.wait(1)[0];
            assert_eq!(
                (wc.wr_id, wc.byte_len, wc.status),
                (m, SIZE as u32, WcStatus::Success)
            );
            received.push(wc.wr_id);
            assert_eq!(read(&dst, 0, SIZE), data, "SEND {m} intact");
        } else {
            assert_eq!(read(&dst, SIZE, SIZE), data, "WRITE {m} intact");
        }
    }
    assert_eq!(
        received,
        (0..MESSAGES).step_by(2).collect::<Vec<_>>(),
        "each SEND once"
    );
    a.nothing_more();
    b.nothing_more();
    let retransmits = ma.counters().roce_retransmits + mb.counters().roce_retransmits;
    assert!(
        retransmits > 0,
        "the wire lost packets and they were sent again"
    );
}

#[test]
fn a_small_srq_recycles_its_wqes_through_the_free_list_for_many_messages() {
    let (mut a, mut b, _models) = pair();
    let mut srq = b.srq(7, 2);
    let mut pairs = Vec::new();
    for _ in 0..2 {
        let mut qa = a.qp(QpCaps::default());
        let mut qb = b.qp_on(Some(&srq), QpCaps::default());
        connect(&mut a, &mut qa, &mut b, &mut qb);
        pairs.push((qa, qb));
    }
    let src = a.mr(4096, ALL);
    let dst = b.mr(8 * 1024, ALL);
    // Two scatter entries per receive: 300 bytes, then the rest of a 1 KiB slot.
    let sges: Vec<[cxdirect::rdma::Sge; 2]> = (0..8u64)
        .map(|k| [dst.sge(k * 1024, 300), dst.sge(k * 1024 + 300, 724)])
        .collect();
    let wrs: Vec<RecvRequest> = (0..7)
        .map(|k| RecvRequest {
            wr_id: k,
            sg_list: &sges[k as usize],
        })
        .collect();
    srq.post_recv(&wrs).unwrap();
    assert_eq!(
        srq.room(),
        0,
        "7 receives fill an SRQ of 8 WQEs (one is the list's tail)"
    );
    let err = srq.post_recv(&wrs[..1]).unwrap_err();
    assert!(matches!(err, DriverError::QueueFull { .. }), "{err}");
    let mut slot_of = std::collections::HashMap::new();
    for k in 0..7u64 {
        slot_of.insert(k, k);
    }
    for m in 0..60u64 {
        let data = pattern(800, m as u8);
        src.write(0, &data).unwrap();
        post(
            &mut pairs[(m % 2) as usize].0,
            m,
            SendOp::Send,
            &[src.sge(0, 800)],
        );
        assert_eq!(a.wait(1)[0].status, WcStatus::Success);
        let wc = b.wait(1)[0];
        assert_eq!(
            (wc.status, wc.byte_len, wc.srqn),
            (WcStatus::Success, 800, Some(srq.srqn()))
        );
        let slot = slot_of.remove(&wc.wr_id).expect("a posted receive, once");
        assert_eq!(read(&dst, slot as usize * 1024, 800), data, "message {m}");
        // Post its replacement into the same memory: the WQE just used is linked back first.
        let next_id = 7 + m;
        srq.post_recv(&[RecvRequest {
            wr_id: next_id,
            sg_list: &sges[slot as usize],
        }])
        .unwrap();
        slot_of.insert(next_id, slot);
    }
    assert_eq!(srq.room(), 0);
    b.nothing_more();
}

#[test]
fn a_queue_pairs_affiliated_async_errors_arrive_as_events_naming_it() {
    use cxdirect_hw::eqe::EventType;
    let (mut a, qa, _b, _qb, models) = connected_pair(QpCaps::default());
    // What a ConnectX writes for a QP's fatal, invalid-request and access errors (the QPN in
    // the last dword of the event data).
    for kind in [
        EventType::WqCatastrophicError,
        EventType::WqInvalidRequestError,
        EventType::WqAccessError,
    ] {
        let mut data = [0u8; 28];
        data[24..28].copy_from_slice(&qa.qpn().to_be_bytes());
        models[0].inject(cxdirect_emu::Fault::RawEvent {
            event_type: kind as u8,
            sub_type: 0,
            data,
        });
        let events = a.dev.poll_events().unwrap();
        assert_eq!(
            events,
            vec![Event::QueueError {
                kind,
                number: qa.qpn()
            }],
            "{kind:?}"
        );
    }
}

#[test]
fn unsignalled_requests_alone_never_fill_the_ring_for_good() {
    let caps = QpCaps {
        max_send_wr: 16,
        ..QpCaps::default()
    };
    let (mut a, mut qa, mut b, _qb, _models) = connected_pair(caps);
    let (src, dst) = (a.mr(4096, ALL), b.mr(4096, ALL));
    let sge = [src.sge(0, 32)];
    let start = std::time::Instant::now();
    let mut batch = [WorkCompletion::default(); 8];
    let mut posted = 0u64;
    while posted < 1000 {
        let mut wr = SendRequest::new(
            posted,
            SendOp::Write(dst.remote(posted % 64 * 32)),
            Payload::Gather(&sge),
        );
        wr.signaled = false;
        match qa.post_send(&[wr]) {
            Ok(()) => posted += 1,
            Err(DriverError::QueueFull { .. }) => {
                assert!(start.elapsed().as_secs() < 20, "the ring stayed full");
                std::thread::yield_now();
            }
            Err(e) => panic!("{e}"),
        }
        assert_eq!(
            a.cq.poll(&mut batch).unwrap(),
            0,
            "an unsignalled request makes no work completion"
        );
    }
    post(&mut qa, 5000, SendOp::Write(dst.remote(0)), &sge);
    let wc = a.wait(1)[0];
    assert_eq!((wc.wr_id, wc.status), (5000, WcStatus::Success));
    assert_eq!(qa.outstanding().0, 0);
    a.nothing_more();
}

#[test]
fn a_qp_failing_on_its_own_raises_its_fatal_event_flushes_everything_and_reconnects() {
    use cxdirect_hw::eqe::EventType;
    let (mut a, mut qa, mut b, mut qb, models) = connected_pair(QpCaps::default());
    let (src, dst) = (a.mr(4096, ALL), b.mr(4096, ALL));
    let recv_sge = [src.sge(2048, 512)];
    qa.post_recv(&[
        RecvRequest {
            wr_id: 70,
            sg_list: &recv_sge,
        },
        RecvRequest {
            wr_id: 71,
            sg_list: &recv_sge,
        },
    ])
    .unwrap();
    models[0].inject(cxdirect_emu::Fault::RcQpFatal { qpn: qa.qpn() });
    // The doorbell of these two finds the QP broken: neither is sent.
    src.write(0, &pattern(64, 9)).unwrap();
    qa.post_send(&[
        SendRequest::new(
            1,
            SendOp::Write(dst.remote(0)),
            Payload::Gather(&[src.sge(0, 64)]),
        ),
        SendRequest::new(2, SendOp::Send, Payload::Gather(&[src.sge(0, 64)])),
    ])
    .unwrap();
    let mut got: Vec<(u64, WcStatus)> = a.wait(4).iter().map(|wc| (wc.wr_id, wc.status)).collect();
    got.sort_unstable_by_key(|&(id, _)| id);
    assert_eq!(
        got,
        [1, 2, 70, 71].map(|id| (id, WcStatus::WrFlushErr)),
        "every posted request flushed once"
    );
    a.nothing_more();
    assert_eq!(qa.state(), QpState::Error);
    assert_eq!(
        a.dev.poll_events().unwrap(),
        vec![Event::QueueError {
            kind: EventType::WqCatastrophicError,
            number: qa.qpn()
        }]
    );
    assert_eq!(
        read(&dst, 0, 64),
        vec![0; 64],
        "nothing of the WRITE landed"
    );
    // Both reset (nothing handed out again) and connected anew: the pair works.
    qa.reset(&mut a.dev, &mut a.cq).unwrap();
    a.nothing_more();
    qb.reset(&mut b.dev, &mut b.cq).unwrap();
    b.nothing_more();
    connect(&mut a, &mut qa, &mut b, &mut qb);
    post(&mut qa, 3, SendOp::Write(dst.remote(0)), &[src.sge(0, 64)]);
    assert_eq!(a.wait(1)[0].status, WcStatus::Success);
    assert_eq!(read(&dst, 0, 64), pattern(64, 9));
}

/// Posts `reads` RDMA READs of `size` bytes each at once on a pair connected with 16 READs
/// outstanding each way, and checks they all complete in order with their bytes, with no frame
/// dropped at the requester's port and no READ sent again.
fn reads_at_once_complete_without_a_lost_frame(reads: usize, size: usize, seed: u8) {
    let (mut a, mut b, models) = pair();
    let mut qa = a.qp(QpCaps::default());
    let mut qb = b.qp(QpCaps::default());
    let params = ConnectParams {
        max_rd_atomic: 16,
        max_dest_rd_atomic: 16,
        ..ConnectParams::default()
    };
    connect_with(&mut a, &mut qa, &mut b, &mut qb, params);
    let (dst, src) = (a.mr(reads * size, ALL), b.mr(reads * size, ALL));
    let data = pattern(reads * size, seed);
    src.write(0, &data).unwrap();
    let sges: Vec<[Sge; 1]> = (0..reads)
        .map(|i| [dst.sge((i * size) as u64, size as u32)])
        .collect();
    let wrs: Vec<SendRequest<'_>> = sges
        .iter()
        .enumerate()
        .map(|(i, sge)| {
            SendRequest::new(
                i as u64,
                SendOp::Read(src.remote((i * size) as u64)),
                Payload::Gather(sge),
            )
        })
        .collect();
    qa.post_send(&wrs).expect("post_send");
    let wcs = a.wait(reads);
    assert!(
        wcs.iter()
            .enumerate()
            .all(|(i, wc)| wc.wr_id == i as u64 && wc.status == WcStatus::Success),
        "{wcs:?}"
    );
    assert!(
        read(&dst, 0, reads * size) == data,
        "the READs' bytes differ"
    );
    let (wire, port) = models[0].wire().expect("the pair's wire");
    let counters = wire.counters(port).expect("port counters");
    assert_eq!(
        (counters.dropped, models[0].counters().roce_retransmits),
        (0, 0),
        "frames dropped at the requester's port, READs sent again"
    );
    assert_eq!(counters.rx_frames, (reads * size / MTU) as u64);
}

#[test]
fn seventy_64k_reads_posted_at_once_complete_held_to_the_read_limit_without_a_lost_frame() {
    // The requester keeps 2^log_sra_max READs outstanding (16 here, perftest's), so their
    // responses (64 frames each at MTU 1024) stay well inside the wire's receive FIFO of
    // 4,096 frames; with every READ sent at once the 70 responses overflowed it, and each
    // retransmission overflowed it again.
    reads_at_once_complete_without_a_lost_frame(70, 64 << 10, 5);
}

#[test]
fn twenty_1m_reads_posted_at_once_complete_paced_by_the_responder_without_a_lost_frame() {
    // Sixteen READs outstanding of 1 MiB each are 16,384 response frames at MTU 1024, four
    // times the wire's receive FIFO of 4,096 frames: the responder sends them as the
    // requester's port takes them, never more than it has room for, so none is dropped and
    // no READ is sent again.
    reads_at_once_complete_without_a_lost_frame(20, 1 << 20, 9);
}

/// Posts twenty 1 MiB WRITEs (or SENDs, into receives posted first) at once on a fresh pair
/// and checks that all complete, with their bytes, no frame dropped at the responder's port
/// and no WQE sent again.
fn twenty_1m_messages_posted_at_once(send: bool) {
    // 20,480 frames at MTU 1024, five times the wire's receive FIFO of 4,096 frames: the
    // requester sends them as the responder's port takes them, never more than it has room
    // for, so none is dropped and nothing is sent again.
    const MESSAGES: usize = 20;
    const SIZE: usize = 1 << 20;
    let (mut a, mut b, models) = pair();
    let mut qa = a.qp(QpCaps::default());
    let mut qb = b.qp(QpCaps::default());
    connect(&mut a, &mut qa, &mut b, &mut qb);
    let (src, dst) = (a.mr(MESSAGES * SIZE, ALL), b.mr(MESSAGES * SIZE, ALL));
    let data = pattern(MESSAGES * SIZE, 11);
    src.write(0, &data).unwrap();
    let sges: Vec<[Sge; 1]> = (0..MESSAGES)
        .map(|i| [src.sge((i * SIZE) as u64, SIZE as u32)])
        .collect();
    if send {
        let targets: Vec<[Sge; 1]> = (0..MESSAGES)
            .map(|i| [dst.sge((i * SIZE) as u64, SIZE as u32)])
            .collect();
        let recvs: Vec<RecvRequest<'_>> = targets
            .iter()
            .enumerate()
            .map(|(i, sg_list)| RecvRequest {
                wr_id: 100 + i as u64,
                sg_list,
            })
            .collect();
        qb.post_recv(&recvs).expect("post_recv");
    }
    let wrs: Vec<SendRequest<'_>> = sges
        .iter()
        .enumerate()
        .map(|(i, sge)| {
            let op = if send {
                SendOp::Send
            } else {
                SendOp::Write(dst.remote((i * SIZE) as u64))
            };
            SendRequest::new(i as u64, op, Payload::Gather(sge))
        })
        .collect();
    qa.post_send(&wrs).expect("post_send");
    let wcs = a.wait(MESSAGES);
    assert!(
        wcs.iter()
            .enumerate()
            .all(|(i, wc)| wc.wr_id == i as u64 && wc.status == WcStatus::Success),
        "{wcs:?}"
    );
    if send {
        let wcs = b.wait(MESSAGES);
        assert!(
            wcs.iter()
                .enumerate()
                .all(|(i, wc)| wc.wr_id == 100 + i as u64
                    && wc.status == WcStatus::Success
                    && wc.byte_len == SIZE as u32),
            "{wcs:?}"
        );
    }
    assert!(
        read(&dst, 0, MESSAGES * SIZE) == data,
        "the messages' bytes differ"
    );
    let (wire, port) = models[1].wire().expect("the pair's wire");
    let counters = wire.counters(port).expect("port counters");
    assert_eq!(
        (counters.dropped, models[0].counters().roce_retransmits),
        (0, 0),
        "frames dropped at the responder's port, WQEs sent again"
    );
    assert_eq!(counters.rx_frames, (MESSAGES * SIZE / MTU) as u64);
}

#[test]
fn twenty_1m_writes_posted_at_once_complete_paced_by_the_requester_without_a_lost_frame() {
    twenty_1m_messages_posted_at_once(false);
}

#[test]
fn twenty_1m_sends_posted_at_once_complete_paced_by_the_requester_without_a_lost_frame() {
    twenty_1m_messages_posted_at_once(true);
}
