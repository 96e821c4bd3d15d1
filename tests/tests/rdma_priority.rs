//! RoCE traffic in the traffic class of the queue pair's SL, through the driver against the
//! model: `ConnectParams::sl` reaches the QP path's `eth_prio`, which the port maps to a
//! traffic class (QTCT) whose rate limit (QETCR) holds the QP's packets, as mlx5e's
//! `dcb ets` and `dcb maxrate` set them on a ConnectX.

use cxdirect::rdma::{ConnectParams, Payload, QpCaps, SendOp, SendRequest, WcStatus};
use cxdirect_tests::rdma_side::{connect_with, pair, pattern, read, ALL};
use cxdirect_tests::traffic_class::{limit_priority, LIMIT_BYTES_PER_SECOND};
use std::time::{Duration, Instant};

/// Two RC QPs connected at SL 3 while A's port limits priority 3's class to 100 Mb/s: A's
/// 1 MiB RDMA WRITE (1,024 packets of about 1,080 bytes on the wire at path MTU 1024) takes at
/// least what passes the class's 64 KiB burst at 12.5 MB/s, about 83 ms, and lands whole;
/// a second pair at SL 0 (class 0, unlimited) on the same ports is not held. An SL above 7 is
/// refused before any command. Before, the driver wrote no priority and the limit held
/// nothing.
#[test]
fn an_rc_qps_sl_puts_its_packets_in_that_prioritys_class() {
    const LEN: usize = 1 << 20;
    let (mut a, mut b, _models) = pair();
    limit_priority(&mut a.dev, 3, 5);
    let (src, dst) = (a.mr(LEN, ALL), b.mr(LEN, ALL));
    let data = pattern(LEN, 9);
    src.write(0, &data).expect("write the source");

    let mut write_at = |sl: u8| {
        let (mut qa, mut qb) = (a.qp(QpCaps::default()), b.qp(QpCaps::default()));
        let params = ConnectParams {
            sl,
            ..ConnectParams::default()
        };
        connect_with(&mut a, &mut qa, &mut b, &mut qb, params);
        let start = Instant::now();
        qa.post_send(&[SendRequest::new(
            1,
            SendOp::Write(dst.remote(0)),
            Payload::Gather(&[src.sge(0, LEN as u32)]),
        )])
        .expect("post_send");
        let wc = a.wait(1);
        assert_eq!(wc[0].status, WcStatus::Success, "SL {sl}");
        assert_eq!(read(&dst, 0, LEN), data, "SL {sl}: every byte in place");
        start.elapsed()
    };
    let held = write_at(3);
    let least = Duration::from_secs_f64((1024.0 * 1080.0 - 66.0 * 1024.0) / LIMIT_BYTES_PER_SECOND);
    assert!(
        held >= least,
        "SL 3: 1 MiB at 100 Mb/s takes at least {least:?}: {held:?}"
    );
    let free = write_at(0);
    assert!(
        free < held,
        "SL 0 is in an unlimited class: {free:?} against {held:?} at SL 3"
    );

    let mut qa = a.qp(QpCaps::default());
    let qb = b.qp(QpCaps::default());
    let refused = qa.connect(
        &mut a.dev,
        &qb.local_endpoint(),
        ConnectParams {
            sl: 8,
            ..ConnectParams::default()
        },
    );
    assert!(
        matches!(&refused, Err(cxdirect::DriverError::Config(e)) if e.field == "sl" && e.value == 8),
        "{refused:?}"
    );
}
