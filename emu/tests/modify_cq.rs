//! MODIFY_CQ as mlx5_core sends it: `mlx5_core_modify_cq_moderation` (op_mod 0, `cq_period`
//! and `cq_max_count` selected) for adaptive moderation, net DIM in mlx5e and RDMA DIM in
//! ib_core's CQ pools (NVMe over RDMA), both used when `cq_moderation` is reported; and the
//! resize (op_mod 1) mlx5_ib's `mlx5_ib_resize_cq` sends for `ibv_resize_cq` when `cq_resize`
//! is reported (rdma-core's `tests.test_cq.CQTest.test_resize_cq`). Moving a CQ to another EQ
//! is not reported and is refused.

use cxdirect_emu::testkit::{udp_frame, CmdFail, Cq, Host};
use cxdirect_emu::{Device, EmuConfig, Syndrome};
use cxdirect_hw::caps::CmdHcaCap;
use cxdirect_hw::cmd::{CmdStatus, Opcode};
use cxdirect_hw::cq::{
    modify_cq_resize_select as resize_select, modify_cq_select as select, ModifyCqIn,
    MODIFY_CQ_OPMOD_RESIZE,
};
use cxdirect_hw::cqe::CqeOpcode;
use cxdirect_hw::hca;

const MEM: usize = 8 << 20;
/// `MLX5_ST_SZ_BYTES(modify_cq_in)`, what Linux sends.
const MODIFY_CQ_IN_BYTES: usize = 0x110;

fn host() -> Host {
    let mut h = Host::new(Device::loopback(EmuConfig::default()), MEM);
    h.bring_up();
    h
}

fn modify_cq(
    h: &mut Host,
    cqn: u32,
    op_mod: u16,
    fields: u32,
    period: u16,
    count: u16,
) -> Result<Vec<u8>, CmdFail> {
    let mut input = Host::input(Opcode::ModifyCq, op_mod, MODIFY_CQ_IN_BYTES);
    let mut cmd = ModifyCqIn::new(&mut input[..]).expect("layout");
    cmd.set_cqn(cqn).set_modify_field_select(fields);
    cmd.cq_context_mut()
        .set_cq_period(period)
        .set_cq_max_count(count);
    h.exec(&input, 16)
}

#[test]
fn the_model_reports_cq_moderation_which_dim_needs() {
    let mut h = host();
    let general = h.query_cap(hca::cap_type::GENERAL_DEVICE, true);
    assert!(CmdHcaCap::new(&general[0x10..])
        .expect("layout")
        .cq_moderation());
}

#[test]
fn mlx5_core_modify_cq_moderation_sets_period_and_count_of_a_live_cq() {
    let mut h = host();
    let cq = h.create_cq(6);
    modify_cq(&mut h, cq.cqn, 0, select::PERIOD | select::COUNT, 8, 64)
        .expect("MODIFY_CQ of the moderation, as net DIM and RDMA DIM send it");
    // Again, as DIM moves between its profiles.
    modify_cq(&mut h, cq.cqn, 0, select::PERIOD | select::COUNT, 256, 128)
        .expect("a second MODIFY_CQ");
}

#[test]
fn modify_cq_of_no_cq_is_refused() {
    let mut h = host();
    let err = modify_cq(&mut h, 0x3ff, 0, select::PERIOD | select::COUNT, 8, 64).unwrap_err();
    assert!(matches!(err, CmdFail::Status { .. }), "{err:?}");
    assert_ne!(
        err,
        CmdFail::status(CmdStatus::BadOpcode, Syndrome::UnknownOpcode),
        "the opcode is implemented; the CQ is what is missing"
    );
}

#[test]
fn moving_to_another_eq_is_refused_as_not_reported() {
    let mut h = host();
    let cq = h.create_cq(6);
    let eqn = modify_cq(&mut h, cq.cqn, 0, select::EQN, 0, 0).unwrap_err();
    assert_eq!(
        eqn,
        CmdFail::status(CmdStatus::BadParameter, Syndrome::BadOpMod)
    );
    let op_mod = modify_cq(&mut h, cq.cqn, 2, 0, 0, 0).unwrap_err();
    assert_eq!(
        op_mod,
        CmdFail::status(CmdStatus::BadParameter, Syndrome::BadOpMod)
    );
    // The refusals changed nothing: the moderation still takes a MODIFY_CQ.
    modify_cq(&mut h, cq.cqn, 0, select::PERIOD, 16, 0).expect("MODIFY_CQ after refusals");
}

#[test]
fn test_resize_cq_the_model_reports_cq_resize_which_mlx5_ib_resize_cq_needs() {
    let mut h = host();
    let general = h.query_cap(hca::cap_type::GENERAL_DEVICE, true);
    let caps = CmdHcaCap::new(&general[0x10..]).expect("layout");
    assert!(
        caps.cq_resize(),
        "without it mlx5_ib_resize_cq returns -ENOSYS"
    );
}

/// A CQ buffer of `2^log` 64-byte entries as libmlx5's `mlx5_alloc_cq_buf` leaves it: every
/// entry invalid, hardware owned.
fn cq_buffer(h: &mut Host, log: u8) -> u64 {
    let buf = h.alloc((64u64 << log).max(4096), 4096);
    for i in 0..(1u64 << log) {
        h.write(buf + i * 64 + 63, &[0xf1]);
    }
    buf
}

/// MODIFY_CQ op_mod 1 as `mlx5_ib_resize_cq` fills it: the three resize fields selected,
/// `log_cq_size`, 4 KiB pages at offset 0, 64-byte CQEs, the new buffer's page list.
fn resize_cq(h: &mut Host, cqn: u32, log: u8, buf: u64) -> Result<Vec<u8>, CmdFail> {
    let pages = (64u64 << log).div_ceil(4096) as usize;
    let mut input = Host::input(Opcode::ModifyCq, MODIFY_CQ_OPMOD_RESIZE, 0x110 + 8 * pages);
    let mut cmd = ModifyCqIn::new(&mut input[..]).expect("layout");
    cmd.set_cqn(cqn).set_modify_field_select(
        resize_select::LOG_SIZE | resize_select::PG_OFFSET | resize_select::PG_SIZE,
    );
    cmd.cq_context_mut()
        .set_log_cq_size(log)
        .set_log_page_size(0)
        .set_page_offset(0)
        .set_cqe_sz(0);
    for i in 0..pages {
        cmd.set_pas(i, buf + i as u64 * 4096).expect("room");
    }
    h.exec(&input, 16)
}

/// Sends `n` frames through an SQ completing on `cq` (one send CQE each), polling nothing.
fn send_frames(h: &mut Host, cq: &Cq, n: usize) {
    let key = h.create_mkey(true, true);
    let tisn = h.create_tis();
    let mut sq = h.create_sq(cq.cqn, tisn, 4);
    for i in 0..n {
        let frame = udp_frame(60, i as u8);
        let payload = h.alloc(frame.len() as u64, 64);
        let wqe = h.build_send(&sq, &frame, payload, key, true);
        h.post(&mut sq, &wqe, false);
    }
}

/// What libmlx5's `mlx5_cq_resize_copy_cqes` (and mlx5_ib's `copy_resize_cqes`) do after the
/// command: from the consumer index, copy each software-owned CQE one slot further into the
/// new buffer with the new buffer's owner bit, until the RESIZE_CQ CQE, then step the
/// consumer index once. Returns the CQ as it now reads, and the CQEs copied.
fn copy_resize_cqes(h: &Host, old: &Cq, new_buf: u64, new_log: u8) -> (Cq, usize) {
    let mut i = old.ci;
    let mut copied = 0;
    loop {
        let slot = i & ((1 << old.log) - 1);
        let mut cqe = h.read(old.buf + u64::from(slot) * 64, 64);
        assert!(
            cxdirect_hw::cqe::sw_owns(cqe[63], i, old.log),
            "index {i}: a CQE in software ownership up to the resize CQE"
        );
        if cqe[63] >> 4 == CqeOpcode::ResizeCq as u8 {
            break;
        }
        let to = i + 1;
        let owner = ((to >> new_log) & 1) as u8;
        cqe[63] = (cqe[63] & !1) | owner;
        let dest = u64::from(to & ((1 << new_log) - 1)) * 64;
        h.write(new_buf + dest, &cqe);
        copied += 1;
        i += 1;
        assert!(copied <= 1 << old.log, "no resize CQE in the old buffer");
    }
    let cq = Cq {
        cqn: old.cqn,
        buf: new_buf,
        dbr: old.dbr,
        log: new_log,
        ci: old.ci + 1,
    };
    h.write_be32(cq.dbr, cq.ci & 0xff_ffff);
    (cq, copied)
}

#[test]
fn test_resize_cq_grows_a_cq_with_completions_outstanding_as_libmlx5_mlx5_resize_cq_reads_it() {
    let mut h = host();
    let cq = h.create_cq(2);
    send_frames(&mut h, &cq, 3);
    let new_buf = cq_buffer(&mut h, 4);
    resize_cq(&mut h, cq.cqn, 4, new_buf).expect("MODIFY_CQ resize");
    // The resize CQE sits at the producer index in the old buffer, software owned.
    let marker = h.cq_slot(&cq, 3);
    assert_eq!(marker[63] >> 4, CqeOpcode::ResizeCq as u8);
    let (mut cq, copied) = copy_resize_cqes(&h, &cq, new_buf, 4);
    assert_eq!(copied, 3);
    // Later completions land in the new buffer after the copies, past where the old one
    // would have wrapped.
    send_frames(&mut h, &cq, 10);
    let got: Vec<Vec<u8>> = std::iter::from_fn(|| h.poll_cq(&mut cq)).collect();
    assert_eq!(got.len(), 13, "three copied, ten new");
    assert!(got.iter().all(|c| c[63] >> 4 == CqeOpcode::Req as u8));
    // The producer index ran on: the next wrap of the new buffer flips the owner bit.
    send_frames(&mut h, &cq, 6);
    assert_eq!(std::iter::from_fn(|| h.poll_cq(&mut cq)).count(), 6);
}

#[test]
fn test_resize_cq_shrinks_an_empty_cq_and_keeps_completing() {
    let mut h = host();
    let mut cq = h.create_cq(3);
    send_frames(&mut h, &cq, 5);
    assert_eq!(std::iter::from_fn(|| h.poll_cq(&mut cq)).count(), 5);
    let new_buf = cq_buffer(&mut h, 1);
    resize_cq(&mut h, cq.cqn, 1, new_buf).expect("MODIFY_CQ resize to two entries");
    let (mut cq, copied) = copy_resize_cqes(&h, &cq, new_buf, 1);
    assert_eq!(copied, 0, "nothing outstanding: the resize CQE first");
    for round in 0..3 {
        send_frames(&mut h, &cq, 2);
        assert_eq!(
            std::iter::from_fn(|| h.poll_cq(&mut cq)).count(),
            2,
            "round {round}"
        );
    }
}

#[test]
fn test_resize_cq_below_the_completions_outstanding_is_refused_and_changes_nothing() {
    let mut h = host();
    let mut cq = h.create_cq(3);
    send_frames(&mut h, &cq, 6);
    let new_buf = cq_buffer(&mut h, 1);
    let err = resize_cq(&mut h, cq.cqn, 1, new_buf).unwrap_err();
    // BAD_SIZE_OUTS_CQES: mlx5_core's `cmd_status_to_err` makes it -EINVAL, what the test
    // expects of `ibv_resize_cq` below the unpolled completions.
    assert_eq!(
        err,
        CmdFail::status(CmdStatus::BadSize, Syndrome::BadQueueSize)
    );
    let got: Vec<Vec<u8>> = std::iter::from_fn(|| h.poll_cq(&mut cq)).collect();
    assert_eq!(got.len(), 6, "the completions stay where they were");
    assert!(got.iter().all(|c| c[63] >> 4 == CqeOpcode::Req as u8));
    assert_eq!(h.read(new_buf + 63, 1), [0xf1], "the new buffer untouched");
}
