//! MODIFY_CQ as mlx5_core sends it: `mlx5_core_modify_cq_moderation` (op_mod 0, `cq_period`
//! and `cq_max_count` selected) for adaptive moderation, net DIM in mlx5e and RDMA DIM in
//! ib_core's CQ pools (NVMe over RDMA), both used when `cq_moderation` is reported. Resizing
//! (op_mod 1) and moving a CQ to another EQ are not reported and are refused.

use cxdirect_emu::testkit::{CmdFail, Host};
use cxdirect_emu::{Device, EmuConfig, Syndrome};
use cxdirect_hw::caps::CmdHcaCap;
use cxdirect_hw::cmd::{CmdStatus, Opcode};
use cxdirect_hw::cq::{modify_cq_select as select, ModifyCqIn};
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
fn resizing_and_moving_to_another_eq_are_refused_as_not_reported() {
    let mut h = host();
    let cq = h.create_cq(6);
    let resize = modify_cq(&mut h, cq.cqn, 1, 0, 0, 0).unwrap_err();
    assert_eq!(
        resize,
        CmdFail::status(CmdStatus::BadParameter, Syndrome::BadOpMod)
    );
    let eqn = modify_cq(&mut h, cq.cqn, 0, select::EQN, 0, 0).unwrap_err();
    assert_eq!(
        eqn,
        CmdFail::status(CmdStatus::BadParameter, Syndrome::BadOpMod)
    );
    // The refusals changed nothing: the moderation still takes a MODIFY_CQ.
    modify_cq(&mut h, cq.cqn, 0, select::PERIOD, 16, 0).expect("MODIFY_CQ after refusals");
}
