//! The port's speed as Linux sets it and the link's bandwidth as ETS divides it. mlx5e's
//! `ethtool -s DEV speed 1000` writes PTYS's legacy admin mask with the protocols of that speed
//! the port offers (`mlx5e_ethtool_set_link_ksettings`, `mlx5_port_set_eth_ptys`) and reads
//! the speed back from the oper mask (`mlx5_port_ptys2speed`). Before, the port offered only
//! 100GBASE-CR4 and refused any other admin mask, and nothing it sent waited for its link.
//! Below its fastest protocol the link paces every frame, and while it is contended the
//! traffic classes share it by QETCR's groups and shares as mlx5e's `dcb ets` writes them
//! (`mlx5e_build_tc_group`: strict classes in groups above the ETS ones; `bw_allocation` the
//! ETS share); before, groups and shares were kept and reported only.

use cxdirect_emu::testkit::{refused, Host, Sq};
use cxdirect_emu::Syndrome;
use cxdirect_hw::cmd::CmdStatus;
use cxdirect_hw::reg::{self, PmtuReg, PtysReg, REG_PMTU};
use std::time::{Duration, Instant};

/// Bytes of each frame the tests send (the port's MTU raised to 9000 first).
const FRAME_BYTES: usize = 8000;
/// The link's speed the tests set, in bytes a second: 1 Gb/s.
const LINK_BYTES_PER_SECOND: f64 = 1e9 / 8.0;
/// The model's burst for the link's bucket (`DEFAULT_BURST_BYTES`).
const BURST_BYTES: usize = 64 * 1024;

/// A host whose port carries frames of [`FRAME_BYTES`] (PMTU `admin_mtu` 9000, as
/// `mlx5_set_port_mtu` writes it for `ip link set DEV mtu`).
fn host() -> Host {
    let mut h = Host::roce_loopback(8 << 20);
    let mut pmtu = PmtuReg::zeroed();
    pmtu.set_local_port(1).set_admin_mtu(9000);
    h.access_register(REG_PMTU, true, pmtu.as_bytes())
        .expect("PMTU write");
    h
}

/// `ethtool -s DEV speed 1000 autoneg off`: the 1 Gb/s protocols the port offers.
fn one_gigabit(h: &mut Host) {
    h.set_eth_protocols(reg::ETH_PROTO_1000BASE_KX, true)
        .expect("PTYS write");
}

/// PTYS's (capability, admin, oper, an_disable_admin, an_disable_cap).
fn protocols(h: &mut Host) -> (u32, u32, u32, bool, bool) {
    let out = h.eth_protocols();
    let r = PtysReg::new(&out[..]).expect("layout");
    (
        r.eth_proto_capability(),
        r.eth_proto_admin(),
        r.eth_proto_oper(),
        r.an_disable_admin(),
        r.an_disable_cap(),
    )
}

#[test]
fn ptys_offers_a_connectx6_dxs_speeds_and_runs_the_fastest_admin_allows() {
    let mut h = host();
    let (cap, admin, oper, an_disable, an_disable_cap) = protocols(&mut h);
    let offered = [
        reg::ETH_PROTO_1000BASE_KX,
        reg::ETH_PROTO_10GBASE_KR,
        reg::ETH_PROTO_25GBASE_CR,
        reg::ETH_PROTO_40GBASE_CR4,
        reg::ETH_PROTO_50GBASE_CR2,
        reg::ETH_PROTO_100GBASE_CR4,
    ];
    assert_eq!(cap, offered.iter().fold(0, |m, b| m | b));
    assert_eq!(admin, cap, "every protocol allowed at power-on");
    assert_eq!(oper, reg::ETH_PROTO_100GBASE_CR4, "the fastest runs");
    assert!(!an_disable && an_disable_cap, "mlx5e may disable autoneg");
    assert_eq!(reg::eth_proto_fastest(oper), Some((oper, 100_000)));

    // `ethtool -s DEV speed 1000 autoneg off`.
    let reply = h
        .set_eth_protocols(reg::ETH_PROTO_1000BASE_KX, true)
        .expect("PTYS write");
    let r = PtysReg::new(&reply[..]).expect("layout");
    assert_eq!(r.eth_proto_oper(), reg::ETH_PROTO_1000BASE_KX);
    let (_, admin, oper, an_disable, _) = protocols(&mut h);
    assert_eq!(
        (admin, oper, an_disable),
        (reg::ETH_PROTO_1000BASE_KX, oper, true)
    );
    assert_eq!(
        reg::eth_proto_fastest(oper),
        Some((oper, 1_000)),
        "ethtool shows 1000Mb/s"
    );

    // `ethtool -s DEV autoneg on` with 10, 25 and 40 Gb/s advertised: the fastest runs.
    let some = reg::ETH_PROTO_10GBASE_KR | reg::ETH_PROTO_25GBASE_CR | reg::ETH_PROTO_40GBASE_CR4;
    h.set_eth_protocols(some, false).expect("PTYS write");
    assert_eq!(
        protocols(&mut h),
        (cap, some, reg::ETH_PROTO_40GBASE_CR4, false, true)
    );

    // A protocol the port lacks (56GBASE-R4, bit 8), or none, is refused and changes nothing.
    for bad in [1u32 << 8 | reg::ETH_PROTO_1000BASE_KX, 0] {
        refused(
            h.set_eth_protocols(bad, true),
            CmdStatus::BadParameter,
            Syndrome::BadRegister,
        );
        assert_eq!(protocols(&mut h).1, some, "admin unchanged after {bad:#x}");
    }
}

/// Writes `n` signalled sends of [`FRAME_BYTES`] on `sq` and rings its doorbell once.
fn post(h: &mut Host, sq: &mut Sq, n: usize, key: u32, buf: u64) {
    h.send_batch(sq, n, FRAME_BYTES, key, buf);
}

/// At 1 Gb/s, 300 frames of 8,000 bytes go out as the link allows: the first burst at once,
/// the rest on the device's timers, all of them after 2.4 MB less the burst at 125 MB/s.
/// Before, the port sent all 300 at once whatever PTYS said.
#[test]
fn a_link_below_its_fastest_paces_what_the_port_sends() {
    const FRAMES: usize = 300;
    let mut h = host();
    one_gigabit(&mut h);
    let key = h.create_mkey(false, false);
    let buf = h.alloc(FRAME_BYTES as u64, 64);
    let mut cq = h.create_cq(10);
    let tis = h.tis_with_prio(0);
    let mut sq = h.create_sq(cq.cqn, tis, 12);

    let start = Instant::now();
    post(&mut h, &mut sq, FRAMES, key, buf);
    let at_once = h.take_completions(&mut cq);
    let earned = start.elapsed().as_secs_f64() * LINK_BYTES_PER_SECOND;
    let most = (BURST_BYTES as f64 + earned) / FRAME_BYTES as f64 + 1.0;
    assert!(
        (at_once as f64) <= most,
        "the link's burst goes at once, then the rest waits: {at_once} of {FRAMES} (at most {most:.0})"
    );
    let mut sent = at_once;
    while sent < FRAMES && start.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(2));
        h.dev.poll();
        sent += h.take_completions(&mut cq);
    }
    assert_eq!(sent, FRAMES, "every frame goes, as the link allows");
    // The last frame waits for what the others took beyond the burst.
    let least = ((FRAMES - 1) * FRAME_BYTES - BURST_BYTES) as f64 / LINK_BYTES_PER_SECOND;
    assert!(
        start.elapsed().as_secs_f64() >= least,
        "{FRAMES} frames of {FRAME_BYTES} bytes at 1 Gb/s take at least {:.1} ms: {:?}",
        least * 1e3,
        start.elapsed()
    );
}

/// Two SQs, at priorities 0 and 3 (classes 0 and 3), each kept with 64 frames posted on a
/// 1 Gb/s link for `run`; the frames each sent after the first 50 ms, and how long that
/// count ran, in seconds.
fn contend(h: &mut Host, run: Duration) -> (usize, usize, f64) {
    let key = h.create_mkey(false, false);
    let buf = h.alloc(FRAME_BYTES as u64, 64);
    let mut cqs = [h.create_cq(10), h.create_cq(10)];
    let (tis0, tis3) = (h.tis_with_prio(0), h.tis_with_prio(3));
    let mut sqs = [
        h.create_sq(cqs[0].cqn, tis0, 10),
        h.create_sq(cqs[1].cqn, tis3, 10),
    ];
    const DEPTH: usize = 64;
    let mut posted = [0usize; 2];
    let mut counted = [0usize; 2];
    let start = Instant::now();
    while start.elapsed() < run {
        h.dev.poll();
        for i in 0..2 {
            let done = h.take_completions(&mut cqs[i]);
            posted[i] -= done;
            if start.elapsed() >= Duration::from_millis(50) {
                counted[i] += done;
            }
            post(h, &mut sqs[i], DEPTH - posted[i], key, buf);
            posted[i] = DEPTH;
        }
        // Polled without pause, as a device thread runs its timers when they are due.
        std::thread::yield_now();
    }
    let window = start.elapsed().as_secs_f64() - 0.05;
    (counted[0], counted[1], window)
}

/// A host at 1 Gb/s with priorities 0 and 3 in classes 0 and 3, each class's (group, share)
/// as `classes` gives it, written as mlx5e writes them (groups, then shares, in one QETCR
/// write each here).
fn contended_classes(classes: impl Fn(usize) -> (u8, u8)) -> Host {
    let mut h = host();
    one_gigabit(&mut h);
    h.set_prio_class(3, 3).expect("QTCT");
    h.set_prio_class(0, 0).expect("QTCT");
    h.write_qetcr(0, |tc, e| {
        let (group, bw) = classes(tc);
        e.set_g(true)
            .set_group(group)
            .set_b(true)
            .set_bw_allocation(bw);
    })
    .expect("QETCR");
    h
}

/// `dcb ets set DEV tc-tsa all:ets tc-bw 0:75 3:25 ...` with priorities 0 and 3 in classes 0
/// and 3, both in the group above the classes at 0% (`mlx5e_build_tc_group`) with shares 75
/// and 25. On a contended 1 Gb/s link, class 0 sends about three frames for each of class
/// 3's; the two together at most the link's rate.
#[test]
fn ets_classes_share_a_contended_link_by_their_bw_allocation() {
    let mut h = contended_classes(|tc| match tc {
        0 => (1, 75),
        3 => (1, 25),
        _ => (0, 0),
    });
    let run = Duration::from_millis(450);
    let (zero, three, window) = contend(&mut h, run);
    let ratio = zero as f64 / three.max(1) as f64;
    let rate = (zero + three) as f64 * FRAME_BYTES as f64 / window;
    println!(
        "class 0 (75%) {zero} frames, class 3 (25%) {three}: ratio {ratio:.2}, together {:.1} MB/s",
        rate / 1e6
    );
    assert!(
        (2.4..=3.75).contains(&ratio),
        "75/25 shares: class 0 sent {zero} frames, class 3 {three} (ratio {ratio:.2})"
    );
    // At most the link (and its burst); how close to it depends on how often this loop runs
    // on a loaded machine, so no lower bound: a link that was not contended would have shown
    // a ratio near 1 above.
    assert!(
        rate <= LINK_BYTES_PER_SECOND * 1.1,
        "together at most the link's 125 MB/s: {:.1} MB/s",
        rate / 1e6
    );
}

/// `dcb ets set DEV tc-tsa 0:ets 3:strict ...`: strict class 3 in a group above ETS class 0
/// (`mlx5e_build_tc_group`): while class 3 asks for the whole contended link, class 0 sends
/// almost nothing.
#[test]
fn a_strict_class_goes_before_the_ets_classes_on_a_contended_link() {
    let mut h = contended_classes(|tc| match tc {
        3 => (1, 100),
        0 => (0, 100),
        _ => (0, 0),
    });
    let (zero, three, _) = contend(&mut h, Duration::from_millis(350));
    println!("strict class 3 {three} frames, ETS class 0 {zero}");
    assert!(
        three > 20 * zero.max(1) && three > 200,
        "strict class 3 first: class 3 sent {three} frames, class 0 {zero}"
    );
}
