//! Enhanced transmission selection as Linux's mlx5 port functions drive it (port.c): at probe
//! mlx5e's `mlx5e_ets_init` writes QTCT once per priority with `port_number` 0
//! (`mlx5_set_port_prio_tc`: priority 0 in class 1, 1 in 0, the rest in their own), then two
//! whole QETCR registers with `port_number` 0, one with every class's `g` bit and group 7
//! (`mlx5_set_port_tc_group`), one with every `b` bit and 100 percent
//! (`mlx5_set_port_tc_bw_alloc`); `dcb ets show` reads QTCT with `port_number` 1 per priority
//! and QETCR with 0 (`mlx5_query_port_prio_tc`, `mlx5_query_port_qetcr_reg`); `dcb maxrate`
//! writes the `r` bits with `port_number` 1 (`mlx5_modify_port_ets_rate_limit`). Before, the
//! general page's `ets` was 0 and both registers were refused as not modelled.

use cxdirect_emu::testkit::port::{qtct, QETC_BYTES};
use cxdirect_emu::testkit::rc::{rc_wqe, RcPath, RemoteRights, GID_B, MAC_B};
use cxdirect_emu::testkit::rc_pair::RcPair;
use cxdirect_emu::testkit::ud::{ud_wqe, UdAv, UdPair, UD_QKEY};
use cxdirect_emu::testkit::{refused, CmdFail, Host, Sq};
use cxdirect_emu::EmuConfig;
use cxdirect_emu::Syndrome;
use cxdirect_hw::caps::CmdHcaCap;
use cxdirect_hw::cmd::{CmdStatus, Opcode};
use cxdirect_hw::hca::cap_type;
use cxdirect_hw::reg::{
    ets_bw_units, EtsTcnConfigReg, QtctReg, ETS_TCS, ETS_TC_ENTRY_BYTES,
    QETC_TC_CONFIGURATION_BYTE, REG_QETCR, REG_QTCT,
};
use cxdirect_hw::tir::ModifyTisIn;
use cxdirect_hw::wqe::opcode;

const QTCT_BYTES: usize = QtctReg::<&[u8]>::SIZE;

fn host() -> Host {
    Host::roce_loopback(1 << 20)
}

/// Each class's (group, share, rate unit, rate value) as a QETCR read returns them.
fn classes(h: &mut Host) -> Vec<(u8, u8, u8, u8)> {
    let out = h
        .access_register(REG_QETCR, false, &[0u8; QETC_BYTES])
        .expect("QETCR read");
    (0..ETS_TCS)
        .map(|tc| {
            let at = QETC_TC_CONFIGURATION_BYTE + tc * ETS_TC_ENTRY_BYTES;
            let e = EtsTcnConfigReg::new(&out[at..at + ETS_TC_ENTRY_BYTES]).expect("layout");
            (
                e.group(),
                e.bw_allocation(),
                e.max_bw_units(),
                e.max_bw_value(),
            )
        })
        .collect()
}

fn prio_map(h: &mut Host) -> Vec<u8> {
    (0..8)
        .map(|prio| {
            let out = h
                .access_register(REG_QTCT, false, &qtct(1, prio, 0))
                .expect("QTCT read");
            QtctReg::new(&out[..]).expect("layout").tclass()
        })
        .collect()
}

#[test]
fn the_general_page_offers_ets_over_eight_classes() {
    let mut h = host();
    let out = h.query_cap(cap_type::GENERAL_DEVICE, true);
    let g = CmdHcaCap::new(&out[0x10..]).expect("layout");
    assert!(g.ets());
    assert_eq!(g.max_tc(), 8, "mlx5_max_tc: 7");
}

#[test]
fn mlx5e_ets_init_and_dcb_ets_read_back_what_they_wrote() {
    let mut h = host();
    // mlx5e_ets_init: QTCT per priority with port_number 0.
    let map = [1u8, 0, 2, 3, 4, 5, 6, 7];
    for (prio, &tc) in map.iter().enumerate() {
        h.access_register(REG_QTCT, true, &qtct(0, prio as u8, tc))
            .expect("QTCT write");
    }
    h.write_qetcr(0, |_, e| {
        e.set_g(true).set_group(7);
    })
    .expect("QETCR groups");
    h.write_qetcr(0, |_, e| {
        e.set_b(true).set_bw_allocation(100);
    })
    .expect("QETCR shares");
    assert_eq!(prio_map(&mut h), map);
    assert_eq!(classes(&mut h), vec![(7, 100, 0, 0); 8]);

    // `dcb ets set ... tc-tsa 0:ets 1:ets 2:strict ... tc-bw 0:70 1:30`: the ETS classes in
    // group 0, the strict ones in groups 1 up (mlx5e_build_tc_group), each write changing
    // only the fields its bits name.
    h.write_qetcr(0, |tc, e| {
        e.set_g(true)
            .set_group(if tc < 2 { 0 } else { tc as u8 - 1 });
    })
    .expect("groups");
    h.write_qetcr(0, |tc, e| {
        e.set_b(true)
            .set_bw_allocation([70, 30, 100, 100, 100, 100, 100, 100][tc]);
    })
    .expect("shares");
    // `dcb maxrate set ... tc-maxrate 0:1gbit 1:500mbit`: port_number 1, every `r` bit.
    h.write_qetcr(1, |tc, e| {
        let (units, value) = match tc {
            0 => (ets_bw_units::GBPS, 1),
            1 => (ets_bw_units::HUNDRED_MBPS, 5),
            _ => (ets_bw_units::NO_LIMIT, 0),
        };
        e.set_r(true)
            .set_max_bw_units(units)
            .set_max_bw_value(value);
    })
    .expect("rate limits");
    let got = classes(&mut h);
    assert_eq!(got[0], (0, 70, ets_bw_units::GBPS, 1));
    assert_eq!(got[1], (0, 30, ets_bw_units::HUNDRED_MBPS, 5));
    assert_eq!(got[2], (1, 100, 0, 0));
    assert_eq!(got[7], (6, 100, 0, 0));
}

#[test]
fn a_bad_ets_write_is_refused_and_changes_nothing() {
    let mut h = host();
    let before = (prio_map(&mut h), classes(&mut h));
    let bad =
        |r: Result<Vec<u8>, CmdFail>| refused(r, CmdStatus::BadParameter, Syndrome::BadRegister);
    // A port the function does not have, a short register.
    bad(h.access_register(REG_QTCT, true, &qtct(2, 3, 1)));
    bad(h.access_register(REG_QTCT, true, &[0u8; QTCT_BYTES - 4]));
    // A share above 100 percent in the last class: the whole write is refused, the classes
    // before it unchanged.
    bad(h.write_qetcr(0, |tc, e| {
        e.set_b(true)
            .set_bw_allocation(if tc == 7 { 101 } else { 10 });
    }));
    bad(h.write_qetcr(0, |_, e| {
        e.set_r(true).set_max_bw_units(5).set_max_bw_value(1);
    }));
    bad(h.write_qetcr(0, |_, e| {
        e.set_g(true).set_group(8);
    }));
    bad(h.write_qetcr(3, |_, e| {
        e.set_g(true).set_group(1);
    }));
    bad(h.access_register(REG_QETCR, true, &[0u8; 0x20]));
    assert_eq!((prio_map(&mut h), classes(&mut h)), before);
}

/// Frames each batch sends, and their size: 600 KiB, about nine times the class bucket's
/// 64 KiB burst.
const FRAMES: usize = 600;
const FRAME_BYTES: usize = 1024;
/// `dcb maxrate ... 1:100mbit` (the least Linux can ask, one 100 Mb/s unit), in bytes a second.
const LIMIT_BYTES_PER_SECOND: f64 = 100e6 / 8.0;
/// The model's burst for a class's bucket (its default, `DEFAULT_BURST_BYTES`).
const BURST_BYTES: usize = 64 * 1024;

/// Limits class `tc` of `h`'s port to one 100 Mb/s unit and puts priority `prio` in it.
fn limit_class(h: &mut Host, prio: u8, tc: u8) {
    h.access_register(REG_QTCT, true, &qtct(1, prio, tc))
        .expect("QTCT write");
    h.write_qetcr(1, |class, e| {
        let (units, value) = if class == usize::from(tc) {
            (ets_bw_units::HUNDRED_MBPS, 1)
        } else {
            (ets_bw_units::NO_LIMIT, 0)
        };
        e.set_r(true)
            .set_max_bw_units(units)
            .set_max_bw_value(value);
    })
    .expect("dcb maxrate");
}

/// Writes [`FRAMES`] signalled sends of [`FRAME_BYTES`] on `sq` and rings its doorbell once.
fn post_batch(h: &mut Host, sq: &mut Sq, key: u32, buf: u64) {
    h.send_batch(sq, FRAMES, FRAME_BYTES, key, buf);
}

/// `dcb maxrate set ... tc-maxrate 1:100mbit` after `mlx5e_ets_init`'s mapping (priority 0 in
/// class 1, priority 1 in class 0): the SQs on a TIS of priority 0 (mlx5e's only one without
/// mqprio) share class 1's 100 Mb/s, while an SQ of priority 1 (class 0, unlimited) sends its
/// batch at once; QTCT moving priority 0 to class 2 frees it. Before, QETCR's rate limit was
/// kept and reported only, and every batch went at once.
#[test]
fn a_class_rate_limit_holds_the_sqs_whose_priority_is_in_the_class() {
    let mut h = Host::roce_loopback(8 << 20);
    for (prio, &tc) in [1u8, 0, 2, 3, 4, 5, 6, 7].iter().enumerate() {
        h.access_register(REG_QTCT, true, &qtct(0, prio as u8, tc))
            .expect("QTCT write");
    }
    limit_class(&mut h, 0, 1);
    let key = h.create_mkey(false, false);
    let buf = h.alloc(FRAME_BYTES as u64, 64);
    let mut cq_held = h.create_cq(10);
    let mut cq_free = h.create_cq(10);
    let (tis_held, tis_free) = (h.tis_with_prio(0), h.tis_with_prio(1));
    let mut held = h.create_sq(cq_held.cqn, tis_held, 10);
    let mut free = h.create_sq(cq_free.cqn, tis_free, 10);

    let start = std::time::Instant::now();
    post_batch(&mut h, &mut held, key, buf);
    let at_once = h.take_completions(&mut cq_held);
    // The burst goes at once (the frame that empties the bucket too), then only what the rate
    // earned while the batch was taken.
    let earned = start.elapsed().as_secs_f64() * LIMIT_BYTES_PER_SECOND;
    let most = (BURST_BYTES as f64 + earned) / FRAME_BYTES as f64 + 1.0;
    assert!(
        at_once >= BURST_BYTES / FRAME_BYTES && (at_once as f64) <= most,
        "class 1's SQ sends its burst, then waits: {at_once} of {FRAMES} at once (at most {most:.0})"
    );

    post_batch(&mut h, &mut free, key, buf);
    assert_eq!(
        h.take_completions(&mut cq_free),
        FRAMES,
        "class 0 has no limit: its SQ is not held by class 1's"
    );

    let mut sent = at_once;
    while sent < FRAMES && start.elapsed() < std::time::Duration::from_secs(20) {
        std::thread::sleep(std::time::Duration::from_millis(5));
        h.dev.poll();
        sent += h.take_completions(&mut cq_held);
    }
    assert_eq!(sent, FRAMES, "the held frames go as the rate allows");
    let least = (FRAMES * FRAME_BYTES - BURST_BYTES - FRAME_BYTES) as f64 / LIMIT_BYTES_PER_SECOND;
    assert!(
        start.elapsed().as_secs_f64() >= least,
        "{FRAMES} frames of {FRAME_BYTES} bytes at 100 Mb/s take at least {:.1} ms: {:?}",
        least * 1e3,
        start.elapsed()
    );

    // Priority 0 moved to class 2 (no limit): its SQ's next batch goes at once.
    h.access_register(REG_QTCT, true, &qtct(1, 0, 2))
        .expect("QTCT write");
    post_batch(&mut h, &mut held, key, buf);
    assert_eq!(h.take_completions(&mut cq_held), FRAMES);
}

/// Runs both functions' timers every 5 ms until `done` says so or 20 s have passed.
fn settle_until(a: &Host, b: &Host, mut done: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !done() && start.elapsed() < std::time::Duration::from_secs(20) {
        std::thread::sleep(std::time::Duration::from_millis(5));
        for _ in 0..4 {
            b.dev.poll();
            a.dev.poll();
        }
    }
}

/// RDMA traffic counts against the class of its QP's priority: both RC QPs at priority 3
/// (`ads.eth_prio`, where mlx5_ib writes the address handle's SL), QTCT putting priority 3 in
/// class 5, class 5 limited to 100 Mb/s. B's 1 MiB RDMA WRITE (1,024 packets at path MTU
/// 1024, about 1,080 bytes each on the wire) goes out at once only as far as B's class bucket
/// holds, the rest within the rate on the RC timers; then A's responses to B's 1 MiB RDMA READ
/// likewise under A's class. Each completes whole, every packet sent once. Before, the
/// class limit changed nothing an RC QP sent.
#[test]
fn rc_requests_and_responses_count_against_the_class_of_the_qps_priority() {
    const BYTES: u64 = 1 << 20;
    const PACKETS: u64 = BYTES / 1024;
    // What passes the 64 KiB burst, at 1,080 bytes a packet, at 12.5 MB/s.
    let least = std::time::Duration::from_secs_f64((PACKETS * 1080 - 66 * 1024) as f64 / 12.5e6);
    let path = RcPath {
        prio: 3,
        ..RcPath::to(GID_B, MAC_B, 0)
    };
    let mut p = RcPair::new(EmuConfig::default(), 8 << 20, 6, 6, 4, path);
    let pd_a = p.a.pd;
    let remote = p.a.alloc(BYTES, 64);
    let rkey =
        p.a.create_remote_mkey(pd_a, remote, BYTES, RemoteRights::READ_WRITE, 0x35);
    let lkey = p.b.create_mkey(false, true);
    let local = p.b.alloc(BYTES, 64);
    let data: Vec<u8> = (0..BYTES).map(|i| (i * 7 % 251) as u8).collect();

    for (op, on_b) in [(opcode::RDMA_WRITE, true), (opcode::RDMA_READ, false)] {
        let what = if on_b {
            p.b.write(local, &data);
            limit_class(&mut p.b, 3, 5);
            "B's WRITE packets"
        } else {
            p.a.write(remote, &data);
            p.b.write(local, &vec![0; BYTES as usize]);
            limit_class(&mut p.a, 3, 5);
            "A's READ responses"
        };
        let sent = |p: &RcPair| {
            if on_b {
                p.b.dev.counters().tx_frames
            } else {
                p.a.dev.counters().tx_frames
            }
        };
        let before = sent(&p);
        let w = rc_wqe(
            &p.qp_b.sq,
            op,
            0,
            Some((remote, rkey)),
            None,
            (local, lkey, BYTES as u32),
        );
        let start = std::time::Instant::now();
        p.b.post(&mut p.qp_b.sq, &w, false);
        p.settle();
        let at_once = sent(&p) - before;
        // The bucket's 64 KiB, and what the rate earned while the device settled (a loaded
        // machine may take a while), counting every packet as 1,000 bytes (each is more).
        let earned = start.elapsed().as_secs_f64() * LIMIT_BYTES_PER_SECOND / 1_000.0;
        let most = (BURST_BYTES as f64 / 1_000.0 + earned) as u64 + 1;
        assert!(
            at_once >= 60 && at_once <= most && at_once < PACKETS,
            "{what}: the class bucket's worth at once, not all {PACKETS}: {at_once} (at most {most})"
        );
        let mut done = 0;
        let (a, b, cq_b) = (&p.a, &p.b, &mut p.cq_b);
        settle_until(a, b, || {
            done += b.take_completions(cq_b);
            done > 0
        });
        assert_eq!(done, 1, "{what}: the operation completes");
        assert!(
            start.elapsed() >= least,
            "{what}: {PACKETS} packets at 100 Mb/s take at least {least:?}: {:?}",
            start.elapsed()
        );
        assert_eq!(sent(&p) - before, PACKETS, "{what}: each sent once");
        let placed = if on_b {
            p.a.read(remote, BYTES as usize)
        } else {
            p.b.read(local, BYTES as usize)
        };
        assert!(placed == data, "{what}: every byte in place");
    }
    p.teardown();
}

/// A UD QP's datagrams count against the class of their address vector's SL: 400 datagrams of
/// 1,000 bytes (1,066 on the wire; 426 KB against the 64 KiB burst) at SL 2, QTCT
/// putting priority 2 in class 6, class 6 limited to 100 Mb/s. About 62 go at once, the rest
/// wait at their WQE and go on the device's timers after at least the 29 ms the rest take,
/// each sent once; then datagrams at SL 1 (class 1, unlimited) go at once. Before, the class
/// limit changed nothing a UD QP sent.
#[test]
fn ud_datagrams_count_against_the_class_of_their_address_vectors_sl() {
    const DATAGRAMS: u64 = 400;
    const BYTES: u32 = 1000;
    let least =
        // The last datagram goes once the bucket has earned what the others took beyond its
        // 64 KiB; each is 1,066 bytes on the wire (Ethernet, IPv4, UDP, BTH, DETH, ICRC).
        std::time::Duration::from_secs_f64(((DATAGRAMS - 1) * 1066 - 64 * 1024) as f64 / 12.5e6);
    let mut p = UdPair::new(EmuConfig::default(), 8 << 20, 10, 10, 4);
    limit_class(&mut p.a, 2, 6);
    let lkey = p.a.create_mkey(false, true);
    let src = p.a.alloc(u64::from(BYTES), 64);
    p.a.write(src, &[0x5a; BYTES as usize]);
    let send = |p: &mut UdPair, sl: u8| {
        let av = UdAv {
            sl,
            ..UdAv::to(GID_B, MAC_B, p.ud_b.qpn, UD_QKEY)
        };
        for _ in 0..DATAGRAMS {
            let w = ud_wqe(&p.ud_a.sq, opcode::SEND, 0, &av, &[(src, lkey, BYTES)]);
            p.a.post(&mut p.ud_a.sq, &w, false);
        }
        p.settle();
    };
    let before = p.a.dev.counters().ud_sent;
    let start = std::time::Instant::now();
    send(&mut p, 2);
    let at_once = p.a.dev.counters().ud_sent - before;
    // The bucket's 64 KiB, and what the rate earned while 400 WQEs were posted (a loaded
    // machine may take a while), counting every datagram as 1,000 bytes (each is more).
    let earned = start.elapsed().as_secs_f64() * LIMIT_BYTES_PER_SECOND / 1_000.0;
    let most = (BURST_BYTES as f64 / 1_000.0 + earned) as u64 + 1;
    assert!(
        at_once >= 60 && at_once <= most && at_once < DATAGRAMS,
        "the class bucket's worth at once, not all {DATAGRAMS}: {at_once} (at most {most})"
    );
    let mut done = 0;
    let (a, b, cq_a) = (&p.a, &p.b, &mut p.cq_a);
    settle_until(a, b, || {
        done += a.take_completions(cq_a) as u64;
        done == DATAGRAMS
    });
    assert_eq!(done, DATAGRAMS, "every datagram completes");
    assert!(
        start.elapsed() >= least,
        "426 KB at 100 Mb/s take at least {least:?}: {:?}",
        start.elapsed()
    );
    assert_eq!(
        p.a.dev.counters().ud_sent - before,
        DATAGRAMS,
        "each sent once"
    );

    send(&mut p, 1);
    assert_eq!(
        p.a.dev.counters().ud_sent - before,
        2 * DATAGRAMS,
        "SL 1's class has no limit: all go at once"
    );
    p.teardown();
}

/// MODIFY_TIS as mlx5_ib's `modify_raw_packet_eth_prio` sends it when a raw packet QP is
/// given an address with SL 3: `bitmask.prio` and `prio` = 3 << 1, under the QP's uid.
fn modify_tis_prio(tisn: u32, prio: u8) -> Vec<u8> {
    let mut input = Host::input(Opcode::ModifyTis, 0, ModifyTisIn::<&[u8]>::SIZE);
    let mut cmd = ModifyTisIn::new(&mut input[..]).expect("layout");
    cmd.set_tisn(tisn);
    cmd.bitmask_mut().set_prio(true);
    cmd.ctx_mut().set_prio(prio << 1);
    input
}

/// A raw packet QP's SL moves its SQ between classes: MODIFY_TIS with the prio bit (mlx5_ib's
/// `modify_raw_packet_eth_prio`) puts the TIS's SQs at priority 3, whose class 5 is limited
/// to 100 Mb/s; before, at priority 0, the same batch went at once. A LAG port affinity
/// beyond the function's one port, or an unknown TIS, is refused and changes nothing.
/// Before, MODIFY_TIS was refused as an unknown command, failing mlx5_ib's modify of a raw
/// packet QP given an address.
#[test]
fn modify_tis_moves_a_raw_packet_qps_sq_to_its_sls_class() {
    let mut h = Host::roce_loopback(8 << 20);
    limit_class(&mut h, 3, 5);
    let key = h.create_mkey(false, false);
    let buf = h.alloc(FRAME_BYTES as u64, 64);
    let mut cq = h.create_cq(11);
    let tis = h.tis_with_prio(0);
    let mut sq = h.create_sq(cq.cqn, tis, 11);
    post_batch(&mut h, &mut sq, key, buf);
    assert_eq!(h.take_completions(&mut cq), FRAMES, "priority 0: no limit");

    let mut far = modify_tis_prio(tis, 3);
    ModifyTisIn::new(&mut far[..])
        .expect("layout")
        .bitmask_mut()
        .set_lag_tx_port_affinity(true);
    ModifyTisIn::new(&mut far[..])
        .expect("layout")
        .ctx_mut()
        .set_lag_tx_port_affinity(2);
    refused(
        h.exec(&far, 0x10),
        CmdStatus::BadParameter,
        Syndrome::BadSteeringParams,
    );
    refused(
        h.exec(&modify_tis_prio(tis + 100, 3), 0x10),
        CmdStatus::BadResource,
        Syndrome::NoSuchObject,
    );
    post_batch(&mut h, &mut sq, key, buf);
    assert_eq!(
        h.take_completions(&mut cq),
        FRAMES,
        "the refused commands left the TIS at priority 0"
    );

    h.exec(&modify_tis_prio(tis, 3), 0x10).expect("MODIFY_TIS");
    post_batch(&mut h, &mut sq, key, buf);
    let at_once = h.take_completions(&mut cq);
    assert!(
        at_once < FRAMES / 2,
        "priority 3's class holds the SQ now: {at_once} of {FRAMES} at once"
    );
}
