//! Packet pacing on the model, as Linux 6.12 and rdma-core drive it: the QoS capability page
//! as mlx5_ib's `pp_is_supported` and mlx5_core's `mlx5_init_rl_table` (rl.c) read it, and
//! SET_PP_RATE_LIMIT as `mlx5_set_pp_rate_limit_cmd` sends it for `mlx5_rl_add_rate_raw`
//! (libmlx5's `mlx5dv_pp_alloc`, rdma-core's `test_pp_alloc` in `tests/test_mlx5_pp.py`):
//! a shared entry under the shared uid, a dedicated one under the DEVX context's uid, each let
//! go of by writing its context as zeros; an index out of range refused. An SQ naming an entry
//! sends at its rate, as mlx5e's `tx_maxrate` (`mlx5e_set_sq_maxrate`) expects.

use cxdirect_emu::testkit::{self, CmdFail, Host};
use cxdirect_emu::Syndrome;
use cxdirect_hw::caps::CmdHcaCap;
use cxdirect_hw::cmd::CmdStatus;
use cxdirect_hw::hca::cap_type;
use cxdirect_hw::qos::QosCap;

const MEM: usize = 8 << 20;
/// `MLX5_SHARED_RESOURCE_UID`: mlx5_ib's uid for an entry without DEDICATED_INDEX.
const SHARED_UID: u16 = 0xffff;
/// The rate `test_pp_alloc` asks for, in kb/s.
const TEST_RATE_KBPS: u32 = 100;

fn host() -> Host {
    Host::roce_loopback(MEM)
}

/// SET_PP_RATE_LIMIT as `mlx5_set_pp_rate_limit_cmd` lays it out: the entry's uid and index,
/// and the raw context (rate in kb/s; burst and typical size left 0 as the test leaves them).
fn set_rate(h: &mut Host, uid: u16, index: u16, rate_kbps: u32) -> Result<Vec<u8>, CmdFail> {
    h.set_pp_rate(uid, index, rate_kbps, 0)
}

/// MODIFY_SQ RDY to RDY naming rate table entry `index`, as `mlx5e_modify_sq` sends it for
/// `mlx5e_set_sq_maxrate` (`rl_update`).
fn modify_rate(sqn: u32, index: u16) -> Vec<u8> {
    Host::sq_rate_input(sqn, index)
}

fn refused<T: std::fmt::Debug>(result: Result<T, CmdFail>, syndrome: Syndrome) {
    testkit::refused(result, CmdStatus::BadParameter, syndrome);
}

/// `pp_is_supported` needs general `qos`, `packet_pacing` and `packet_pacing_uid`;
/// `mlx5_init_rl_table` takes the table size less entry 0 and the rate range; no e-switch
/// scheduling is offered.
#[test]
fn qos_page_offers_packet_pacing_as_mlx5_ib_reads_it() {
    let mut h = host();
    let general = h.query_cap(cap_type::GENERAL_DEVICE, true);
    assert!(CmdHcaCap::new(&general[0x10..]).expect("layout").qos());
    for current in [true, false] {
        let out = h.query_cap(cap_type::QOS, current);
        let qos = QosCap::new(&out[0x10..]).expect("layout");
        assert!(qos.packet_pacing() && qos.packet_pacing_uid());
        assert!(qos.packet_pacing_burst_bound() && qos.packet_pacing_typical_size());
        // NIC scheduling is offered too (tests/scheduling_elements.rs); the e-switch's not.
        assert!(!qos.esw_scheduling());
        let (min, max) = (qos.packet_pacing_min_rate(), qos.packet_pacing_max_rate());
        assert!(min <= TEST_RATE_KBPS && TEST_RATE_KBPS <= max && min > 0);
        assert_eq!(max, 100_000_000, "100 Gb/s in kb/s");
        // mlx5_init_rl_table: "127 rates are supported".
        assert_eq!(qos.packet_pacing_rate_table_size() - 1, 127);
    }
    h.teardown();
}

/// `test_pp_alloc`: two entries of the same rate, the second dedicated (its own index under
/// the context's uid), both released by a zero context under their own uid.
#[test]
fn set_pp_rate_limit_as_mlx5_rl_add_rate_raw_sends_it() {
    let mut h = host();
    let user = h.create_uctx(0).expect("CREATE_UCTX");
    set_rate(&mut h, SHARED_UID, 1, TEST_RATE_KBPS).expect("shared entry");
    set_rate(&mut h, user, 2, TEST_RATE_KBPS).expect("dedicated entry");
    // The kernel's own entries (mlx5e's tx max rate) when the caps offer `packet_pacing_uid`.
    set_rate(&mut h, SHARED_UID, 3, 1_000_000).expect("another rate");
    // The highest index mlx5_core hands out.
    set_rate(&mut h, SHARED_UID, 127, 100_000_000).expect("last entry");
    for (uid, index) in [
        (SHARED_UID, 1),
        (user, 2),
        (SHARED_UID, 3),
        (SHARED_UID, 127),
    ] {
        set_rate(&mut h, uid, index, 0).expect("release");
    }
    h.destroy_uctx(user).expect("DESTROY_UCTX");
    h.teardown();
}

/// Index 0 is "unlimited" and fixed; indexes past the table, and rates past the range, are
/// refused.
#[test]
fn set_pp_rate_limit_refuses_an_index_out_of_range() {
    let mut h = host();
    refused(
        set_rate(&mut h, SHARED_UID, 128, TEST_RATE_KBPS),
        Syndrome::RateIndexOutOfRange,
    );
    refused(
        set_rate(&mut h, SHARED_UID, 0xffff, TEST_RATE_KBPS),
        Syndrome::RateIndexOutOfRange,
    );
    refused(
        set_rate(&mut h, SHARED_UID, 0, TEST_RATE_KBPS),
        Syndrome::RateIndexOutOfRange,
    );
    refused(
        set_rate(&mut h, SHARED_UID, 1, 100_000_001),
        Syndrome::RateOutOfRange,
    );
    h.teardown();
}

/// The uid rules of DEVX: a context's dedicated entry is its own until it lets go of it; an
/// unknown uid is refused; a closed context's entries pass to the driver.
#[test]
fn a_dedicated_entry_belongs_to_its_user_context() {
    let mut h = host();
    let a = h.create_uctx(0).expect("CREATE_UCTX a");
    let b = h.create_uctx(0).expect("CREATE_UCTX b");
    set_rate(&mut h, a, 5, TEST_RATE_KBPS).expect("a's entry");
    refused(set_rate(&mut h, b, 5, 200), Syndrome::UidMismatch);
    refused(set_rate(&mut h, b, 5, 0), Syndrome::UidMismatch);
    set_rate(&mut h, a, 5, 0).expect("a lets go");
    set_rate(&mut h, b, 5, 200).expect("b takes the free entry");
    // A shared entry any context may write, as DEVX's shared objects.
    set_rate(&mut h, SHARED_UID, 6, TEST_RATE_KBPS).expect("shared entry");
    set_rate(&mut h, a, 6, 0).expect("shared entry released by a context");
    refused(
        set_rate(&mut h, 0x1234, 7, TEST_RATE_KBPS),
        Syndrome::UnknownUid,
    );
    // b closes with its entry still written: it passes to the driver, which may release it.
    h.destroy_uctx(b).expect("DESTROY_UCTX b");
    refused(set_rate(&mut h, a, 5, 0), Syndrome::UidMismatch);
    set_rate(&mut h, 0, 5, 0).expect("the driver releases it");
    h.destroy_uctx(a).expect("DESTROY_UCTX a");
    h.teardown();
}

/// A send queue names an entry by index (mlx5e's `mlx5e_modify_sq` with
/// `MODIFY_SQ_BITMASK_PACKET_PACING_RATE_LIMIT_INDEX`, mlx5_ib's `modify_raw_packet_qp_sq`):
/// an entry of the table or 0 is taken, an index past the table refused.
#[test]
fn modify_sq_takes_a_rate_index_inside_the_table_only() {
    let mut h = host();
    let cq = h.create_cq(6);
    let tis = h.create_tis();
    let sq = h.create_sq(cq.cqn, tis, 6);
    set_rate(&mut h, SHARED_UID, 1, TEST_RATE_KBPS).expect("entry 1");
    let modify = |index: u16| modify_rate(sq.sqn, index);
    h.exec(&modify(1), 0x10).expect("SQ paced by entry 1");
    h.exec(&modify(0), 0x10).expect("SQ back to unlimited");
    refused(h.exec(&modify(128), 0x10), Syndrome::RateIndexOutOfRange);
    h.teardown();
}

/// An SQ naming an entry sends at its rate: the entry's burst at once, then a frame each time
/// the rate has paid for the one before; the rest wait in the ring and go without another
/// doorbell. 10 frames of 500 bytes at 80 kb/s (10,000 bytes a second) with a 1,000-byte
/// burst: 3 at once (the third leaves the bucket in debt), the other 7 over at least 350 ms.
#[test]
fn an_sq_naming_an_entry_sends_at_its_rate() {
    let mut h = host();
    let mut cq = h.create_cq(6);
    let tis = h.create_tis();
    let mut sq = h.create_sq(cq.cqn, tis, 6);
    let key = h.create_mkey(false, false);
    h.set_pp_rate(0, 1, 80, 1000).expect("SET_PP_RATE_LIMIT");
    h.exec(&modify_rate(sq.sqn, 1), 0x10)
        .expect("SQ paced by entry 1");

    let sent = |h: &Host| h.dev.counters().tx_frames;
    let before = sent(&h);
    let start = std::time::Instant::now();
    let frame = testkit::udp_frame(500 - 42, 1);
    assert_eq!(frame.len(), 500);
    for _ in 0..10 {
        let buf = h.alloc(512, 64);
        let wqe = h.build_send(&sq, &frame, buf, key, true);
        h.post(&mut sq, &wqe, false);
    }
    assert_eq!(
        sent(&h) - before,
        3,
        "the burst goes at once, the rest waits"
    );
    while sent(&h) - before < 10 && start.elapsed() < std::time::Duration::from_secs(20) {
        std::thread::sleep(std::time::Duration::from_millis(20));
        h.dev.poll();
    }
    assert_eq!(
        sent(&h) - before,
        10,
        "the waiting frames go as the rate allows"
    );
    assert!(
        start.elapsed() >= std::time::Duration::from_millis(340),
        "7 frames of 500 bytes take at least 350 ms at 10,000 bytes a second: {:?}",
        start.elapsed()
    );
    // Unlimited again: the next frames go at once.
    h.exec(&modify_rate(sq.sqn, 0), 0x10).expect("SQ unlimited");
    for _ in 0..5 {
        let buf = h.alloc(512, 64);
        let wqe = h.build_send(&sq, &frame, buf, key, true);
        h.post(&mut sq, &wqe, false);
    }
    assert_eq!(sent(&h) - before, 15);
    let completions = std::iter::from_fn(|| h.poll_cq(&mut cq)).count();
    assert_eq!(completions, 15, "every send completes");
}
