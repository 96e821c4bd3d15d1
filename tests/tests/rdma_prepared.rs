//! Prepared send requests (`RcQueuePair::prepare_send`, `post_prepared`,
//! `post_prepared_inline`) against the model: they move the bytes the general `post_send`
//! moves, and a bad per-post value (a range past the region, a length past `log_max_msg`, a
//! full ring, a QP not connected, a deregistered region) is refused with a typed error and
//! posts nothing.

use cxdirect::rdma::{
    MemoryRegion, PreparedFlags, PreparedLocal, PreparedOp, PreparedSend, ProtectionDomain, QpCaps,
    QpState, RecvRequest, WcOpcode, WcStatus, WorkCompletion,
};
use cxdirect::{DriverError, KeyAccess};
use cxdirect_tests::rdma_side::{connect, pair, pattern, read, Qp, ALL};

fn prepare(qp: &Qp, op: PreparedOp, local: PreparedLocal<'_>) -> PreparedSend {
    qp.prepare_send(op, local, PreparedFlags::default())
        .expect("prepare_send")
}

fn is_bad(err: &DriverError, says: &str) -> bool {
    matches!(err, DriverError::BadWorkRequest { index: 0, why } if why.contains(says))
}

#[test]
fn prepared_writes_reads_and_sends_move_the_bytes_they_name_and_complete_in_order() {
    let (mut a, mut b, _models) = pair();
    let caps = QpCaps {
        max_send_wr: 64,
        max_inline_data: 128,
        ..QpCaps::default()
    };
    let (mut qa, mut qb) = (a.qp(caps), b.qp(QpCaps::default()));
    connect(&mut a, &mut qa, &mut b, &mut qb);
    let (src, dst) = (a.mr(1 << 16, ALL), b.mr(1 << 16, ALL));
    src.write(0, &pattern(1 << 16, 9)).unwrap();
    let rkey = dst.rkey();
    let write = prepare(&qa, PreparedOp::Write { rkey }, PreparedLocal::Region(&src));
    let read_back = prepare(&qa, PreparedOp::Read { rkey }, PreparedLocal::Region(&src));
    let send = prepare(&qa, PreparedOp::Send, PreparedLocal::Region(&src));
    let inline = prepare(&qa, PreparedOp::Write { rkey }, PreparedLocal::Inline);
    let inline_send = prepare(&qa, PreparedOp::Send, PreparedLocal::Inline);
    assert!(inline.is_inline() && !write.is_inline());
    assert_eq!((write.qpn(), inline.max_len()), (qa.qpn(), 128));

    // 200 WRITEs of every length up to 1,500 bytes (0 included), one in 16 signalled: more
    // than the ring holds, so the unsignalled ones must be retired by the signalled ones
    // and the CQEs the driver forces every half ring.
    let mut signalled = Vec::new();
    for i in 0..200u64 {
        let len = (i * 7 % 1501) as u32;
        let at = i * 64 % 60_000;
        let sig = i % 16 == 15;
        qa.post_prepared(&write, i, dst.addr() + at, at, len, sig)
            .unwrap();
        if sig {
            let wc = a.wait(1)[0];
            assert_eq!(
                (wc.wr_id, wc.status, wc.opcode),
                (i, WcStatus::Success, WcOpcode::RdmaWrite)
            );
            signalled.push(wc.wr_id);
            assert_eq!(
                read(&dst, at as usize, len as usize),
                read(&src, at as usize, len as usize),
                "WRITE {i}"
            );
        }
    }
    qa.post_prepared(&write, 999, dst.addr() + 100, 100, 3000, true)
        .unwrap();
    assert_eq!(a.wait(1)[0].wr_id, 999);
    assert_eq!(read(&dst, 100, 3000), read(&src, 100, 3000));
    assert_eq!(signalled.len(), 12);
    assert_eq!(qa.outstanding().0, 0, "every WRITE retired");

    // A READ of the peer's bytes into the region.
    dst.write(40_000, &pattern(2000, 77)).unwrap();
    qa.post_prepared(&read_back, 5, dst.addr() + 40_000, 50_000, 2000, true)
        .unwrap();
    let wc = a.wait(1)[0];
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (5, WcStatus::Success, WcOpcode::RdmaRead)
    );
    assert_eq!(read(&src, 50_000, 2000), pattern(2000, 77));

    // SENDs, gathered and inline, fill the peer's receives.
    for (k, len) in [0usize, 1, 64, 128].into_iter().enumerate() {
        qb.post_recv(&[RecvRequest {
            wr_id: 70 + k as u64,
            sg_list: &[dst.sge(8192, 4096)],
        }])
        .unwrap();
        let data = pattern(len, k as u8);
        qa.post_prepared_inline(&inline_send, 80, 0, &data, true)
            .unwrap();
        assert_eq!(a.wait(1)[0].status, WcStatus::Success);
        let wc = b.wait(1)[0];
        assert_eq!((wc.wr_id, wc.byte_len), (70 + k as u64, len as u32));
        assert_eq!(read(&dst, 8192, len), data, "inline SEND of {len}");
        qb.post_recv(&[RecvRequest {
            wr_id: 90,
            sg_list: &[dst.sge(16384, 4096)],
        }])
        .unwrap();
        qa.post_prepared(&send, 81, 0, 1000, len as u32, true)
            .unwrap();
        assert_eq!(a.wait(1)[0].status, WcStatus::Success);
        assert_eq!(b.wait(1)[0].byte_len, len as u32);
        assert_eq!(read(&dst, 16384, len), read(&src, 1000, len), "SEND {len}");
        // Inline WRITEs of one and of two blocks.
        qa.post_prepared_inline(&inline, 82, dst.addr() + 30_000, &data, true)
            .unwrap();
        assert_eq!(a.wait(1)[0].wr_id, 82);
        assert_eq!(read(&dst, 30_000, len), data, "inline WRITE of {len}");
    }
    a.nothing_more();
    let stats = qa.stats();
    assert_eq!(stats.sends, stats.doorbells, "one doorbell per post");
}

#[test]
fn bad_per_post_values_are_refused_and_post_nothing() {
    let (mut a, mut b, _models) = pair();
    let caps = QpCaps {
        max_send_wr: 16,
        max_inline_data: 64,
        ..QpCaps::default()
    };
    let (mut qa, mut qb) = (a.qp(caps), b.qp(QpCaps::default()));
    let (src, dst) = (a.mr(8192, ALL), b.mr(8192, ALL));
    let rkey = dst.rkey();
    let write = prepare(&qa, PreparedOp::Write { rkey }, PreparedLocal::Region(&src));
    let inline = prepare(&qa, PreparedOp::Write { rkey }, PreparedLocal::Inline);

    // Not connected yet: refused as the QP's state.
    let err = qa
        .post_prepared(&write, 1, dst.addr(), 0, 8, true)
        .unwrap_err();
    assert!(matches!(err, DriverError::WrongState { .. }), "{err}");
    connect(&mut a, &mut qa, &mut b, &mut qb);
    assert_eq!(qa.state(), QpState::ReadyToSend);

    let len = src.len();
    let refusals: [(u64, u32, &str); 5] = [
        (0, len as u32 + 1, "past the end"),
        (1, len as u32, "past the end"),
        (len, 1, "past the end"),
        (u64::MAX, 1, "past the end"),
        (0, write.max_len() + 1, "log_max_msg"),
    ];
    for (offset, n, says) in refusals {
        let err = qa
            .post_prepared(&write, 2, dst.addr(), offset, n, true)
            .unwrap_err();
        assert!(is_bad(&err, says), "{offset}+{n}: {err}");
    }
    let err = qa
        .post_prepared_inline(&inline, 3, dst.addr(), &[0u8; 65], true)
        .unwrap_err();
    assert!(is_bad(&err, "max_inline_data"), "{err}");
    // The wrong form for the prepared request.
    let err = qa
        .post_prepared_inline(&write, 3, dst.addr(), &[0u8; 8], true)
        .unwrap_err();
    assert!(matches!(err, DriverError::BadWorkRequest { .. }), "{err}");
    let err = qa
        .post_prepared(&inline, 3, dst.addr(), 0, 8, true)
        .unwrap_err();
    assert!(matches!(err, DriverError::BadWorkRequest { .. }), "{err}");
    assert_eq!(qa.outstanding(), (0, 0), "nothing was posted");
    assert_eq!(qa.stats().sends, 0);

    // The last byte of the region, and the whole region, are in range.
    src.write(0, &pattern(8192, 3)).unwrap();
    qa.post_prepared(&write, 4, dst.addr() + len - 1, len - 1, 1, true)
        .unwrap();
    qa.post_prepared(&write, 5, dst.addr(), 0, len as u32, true)
        .unwrap();
    let wcs = a.wait(2);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(4, WcStatus::Success), (5, WcStatus::Success)]
    );
    assert_eq!(read(&dst, 0, 8192), pattern(8192, 3));

    // A full ring: refused as QueueFull, nothing more posted; polling makes room.
    let entries = qa.outstanding().0;
    assert_eq!(entries, 0);
    let mut posted = 0u64;
    let err = loop {
        match qa.post_prepared(&write, 100 + posted, dst.addr(), 0, 8, false) {
            Ok(()) => posted += 1,
            Err(e) => break e,
        }
        assert!(posted <= 1024, "the ring never filled");
    };
    assert!(matches!(err, DriverError::QueueFull { .. }), "{err}");
    let held = qa.outstanding().0;
    assert_eq!(u64::from(held), posted, "one block each");
    // The forced CQEs (every half ring) make no work completion but retire the ring.
    let start = std::time::Instant::now();
    let mut batch = [WorkCompletion::default(); 4];
    while qa.outstanding().0 != 0 {
        assert_eq!(a.cq.poll(&mut batch).unwrap(), 0, "{batch:?}");
        assert!(start.elapsed() < std::time::Duration::from_secs(20));
        std::thread::yield_now();
    }
    qa.post_prepared(&write, 200, dst.addr(), 0, 8, true)
        .unwrap();
    assert_eq!(a.wait(1)[0].wr_id, 200);

    // A request prepared for another QP is refused.
    let other = a.qp(caps);
    let foreign = prepare(
        &other,
        PreparedOp::Write { rkey },
        PreparedLocal::Region(&src),
    );
    let err = qa
        .post_prepared(&foreign, 6, dst.addr(), 0, 8, true)
        .unwrap_err();
    assert!(is_bad(&err, "another queue pair"), "{err}");

    // A QP moved to error and reset is not ready to send; connected again, the same
    // prepared request posts.
    qa.reset(&mut a.dev, &mut a.cq).unwrap();
    a.nothing_more();
    qb.reset(&mut b.dev, &mut b.cq).unwrap();
    b.nothing_more();
    let err = qa
        .post_prepared(&write, 7, dst.addr(), 0, 8, true)
        .unwrap_err();
    assert!(matches!(err, DriverError::WrongState { .. }), "{err}");
    connect(&mut a, &mut qa, &mut b, &mut qb);
    qa.post_prepared(&write, 8, dst.addr(), 0, 8, true).unwrap();
    assert_eq!(a.wait(1)[0].wr_id, 8);

    // A deregistered region: its prepared request is refused from then on.
    let src_key_write = write.clone();
    src.deregister(&mut a.dev).unwrap();
    let err = qa
        .post_prepared(&src_key_write, 9, dst.addr(), 0, 8, true)
        .unwrap_err();
    assert!(is_bad(&err, "deregistered"), "{err}");
    assert_eq!(qa.outstanding(), (0, 0), "nothing was posted");
    a.nothing_more();
}

#[test]
fn requests_the_region_or_qp_cannot_take_are_refused_when_prepared() {
    let (mut a, _b, _models) = pair();
    let qa = a.qp(QpCaps::default());
    let no_inline = a.qp(QpCaps {
        max_inline_data: 0,
        ..QpCaps::default()
    });
    let read_only = a.mr(4096, KeyAccess::READ_ONLY);
    let other_pd = ProtectionDomain::alloc(&mut a.dev).expect("PD");
    let theirs = MemoryRegion::alloc(&mut a.dev, &other_pd, 4096, ALL).expect("MR");
    let flags = PreparedFlags::default();
    let cases: [(&Qp, PreparedOp, PreparedLocal<'_>, &str); 4] = [
        (
            &qa,
            PreparedOp::Read { rkey: 1 },
            PreparedLocal::Region(&read_only),
            "local write",
        ),
        (
            &qa,
            PreparedOp::Read { rkey: 1 },
            PreparedLocal::Inline,
            "inline data on a READ",
        ),
        (
            &no_inline,
            PreparedOp::Send,
            PreparedLocal::Inline,
            "max_inline_data",
        ),
        (
            &qa,
            PreparedOp::Write { rkey: 1 },
            PreparedLocal::Region(&theirs),
            "protection domain",
        ),
    ];
    for (qp, op, local, says) in cases {
        let err = qp.prepare_send(op, local, flags).unwrap_err();
        assert!(is_bad(&err, says), "{op:?}: {err}");
    }
    // A WRITE from a read-only region is fine.
    qa.prepare_send(
        PreparedOp::Write { rkey: 1 },
        PreparedLocal::Region(&read_only),
        flags,
    )
    .unwrap();
}
