//! The model's firmware: the command interface, the HCA life cycle, firmware pages and the
//! commands that create, modify, query and destroy objects (whose tables live in
//! [`objects`](crate::objects)).
//!
//! Every command handler reads the driver's input through `cxdirect-hw` layouts, checks every
//! value before it touches model state, and fails with a command status and a syndrome (see
//! [`Syndrome`]) — never a panic, whatever the bytes.
//!
//! The commands sit above the data path: the function's state they change lives in
//! [`function`](crate::function) and the queue engines never name the firmware. A command
//! drives an engine by name where it must (a QP moved to the error state flushes its work);
//! the rest (events, writing held completions, landing receives in flight) it asks through
//! [`EngineRequests`], which the engines implement for [`Core`].

mod av_qp_mapping;
pub(crate) mod caps;
pub(crate) mod cmdif;
pub(crate) mod cq;
pub(crate) mod dc;
mod dci;
pub(crate) mod definer;
pub(crate) mod devx;
pub(crate) mod eswitch;
mod ets;
mod flow_counter;
pub(crate) mod flow_entry;
pub(crate) mod general_object;
pub(crate) mod hca;
mod match_criteria;
pub(crate) mod mcg;
pub(crate) mod memic;
pub(crate) mod meter;
pub mod mkey;
pub(crate) mod modify_header;
pub(crate) mod pacing;
pub(crate) mod pages;
mod port_speed;
pub(crate) mod qcounters;
pub(crate) mod qp;
pub(crate) mod qp_datagram;
pub(crate) mod queues;
pub(crate) mod reformat;
pub(crate) mod roce;
pub(crate) mod sampler;
pub(crate) mod scheduling;
mod send_dbr_mode;
pub(crate) mod sig;
pub(crate) mod steering;
pub(crate) mod sw_icm;
pub(crate) mod transport;
mod udp_sport;
pub(crate) mod xrc;
pub(crate) mod xrq;

use crate::counters::add;
pub(crate) use crate::function::command_error::{
    bad_param, bad_res, bad_state, bad_sys_state, table_full, CmdResult,
};
pub use crate::function::command_error::{CmdError, Syndrome};
pub(crate) use crate::function::{Core, EngineRequests};
use cxdirect_hw::cmd::{CmdIn, CmdStatus, Opcode, CMD_STATUS_BYTES};

/// Executes one command: `input` is the whole input (inline part and mailbox data), `output`
/// the whole output buffer (`outlen` bytes). The status and syndrome are written here; the
/// handler writes the rest.
pub(crate) fn execute(core: &mut Core, input: &[u8], output: &mut [u8]) {
    add(&core.counters.commands, 1);
    output.fill(0);
    // A command sees, and may destroy, CQs with every completion taken so far written.
    core.flush_completions();
    let result = dispatch(core, input, output);
    if let Err(err) = result {
        add(&core.counters.command_errors, 1);
        output.fill(0);
        let opcode = CmdIn::new(input).map(|h| h.opcode()).unwrap_or(0);
        let op_mod = CmdIn::new(input).map(|h| h.op_mod()).unwrap_or(0);
        log::info!(
            "function {}: command {} ({opcode:#x}) op_mod {op_mod:#x} refused: {} ({:#x}), {}",
            core.port_name(),
            Opcode::try_from(opcode)
                .map(Opcode::name)
                .unwrap_or("unknown"),
            err.status.name(),
            err.syndrome as u32,
            err.what
        );
    }
    // Status and syndrome go where every output has them, whatever the output's layout:
    // a command refused for its output length still says so.
    let (status, syndrome) = match result {
        Ok(()) => (CmdStatus::Ok as u8, 0),
        Err(err) => (err.status as u8, err.syndrome as u32),
    };
    if let Some(head) = output.get_mut(..CMD_STATUS_BYTES) {
        head[0] = status;
        head[4..8].copy_from_slice(&syndrome.to_be_bytes());
    }
    if let Some(trace) = &core.cfg.command_trace {
        trace.record(&core.port_name(), input, status, syndrome);
    }
    core.hca.last_error = result.err();
    pages::verify_contexts(core);
}

fn dispatch(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let header = CmdIn::new(input).map_err(|_| {
        CmdError::new(
            CmdStatus::BadInputLength,
            Syndrome::InputTooShort,
            "input shorter than a command header",
        )
    })?;
    let opcode = header.opcode();
    if core.faults.refuses(opcode) {
        return Err(CmdError::new(
            CmdStatus::NoResources,
            Syndrome::Refused,
            "refused by an injected fault",
        ));
    }
    if output.len() < CMD_STATUS_BYTES {
        return Err(CmdError::new(
            CmdStatus::BadOutputLength,
            Syndrome::OutputTooShort,
            "output shorter than a command status and syndrome",
        ));
    }
    let opcode = Opcode::try_from(header.opcode()).map_err(|_| {
        CmdError::new(
            CmdStatus::BadOpcode,
            Syndrome::UnknownOpcode,
            "unknown opcode",
        )
    })?;
    let op_mod = header.op_mod();
    let uid = header.uid();
    core.hca.check_allowed(opcode)?;
    devx::check_uid(core, opcode, uid, input)?;
    let result = run(core, opcode, op_mod, input, output);
    if result.is_ok() {
        devx::settle(core, opcode, uid, input, output);
    }
    result
}

/// Runs one command's handler.
fn run(core: &mut Core, opcode: Opcode, op_mod: u16, input: &[u8], output: &mut [u8]) -> CmdResult {
    match opcode {
        Opcode::EnableHca => hca::enable_hca(core, input),
        Opcode::DisableHca => hca::disable_hca(core, input),
        Opcode::QueryIssi => hca::query_issi(core, output),
        Opcode::SetIssi => hca::set_issi(core, input),
        Opcode::QueryPages => hca::query_pages(core, input, output),
        Opcode::ManagePages => pages::manage_pages(core, input, output),
        Opcode::QueryHcaCap => caps::query_hca_cap(core, op_mod, output),
        Opcode::SetPpRateLimit => pacing::set_pp_rate_limit(core, input),
        Opcode::CreateSchedulingElement => {
            scheduling::create_scheduling_element(core, input, output)
        }
        Opcode::ModifySchedulingElement => scheduling::modify_scheduling_element(core, input),
        Opcode::QuerySchedulingElement => scheduling::query_scheduling_element(core, input, output),
        Opcode::DestroySchedulingElement => scheduling::destroy_scheduling_element(core, input),
        Opcode::AllocMemic => memic::alloc_memic(core, input, output),
        Opcode::DeallocMemic => memic::dealloc_memic(core, input),
        Opcode::ModifyMemic => memic::modify_memic(core, input, output),
        Opcode::QueryAdapter => hca::query_adapter(core, input, output),
        Opcode::SetDriverVersion => hca::set_driver_version(core, input),
        Opcode::SetHcaCap => caps::set_hca_cap(core, op_mod, input),
        Opcode::InitHca => hca::init_hca(core),
        Opcode::TeardownHca => hca::teardown_hca(core, output),
        Opcode::AccessReg => hca::access_reg(core, input, output),
        Opcode::QueryNicVportContext => hca::query_nic_vport_context(core, input, output),
        Opcode::ModifyNicVportContext => hca::modify_nic_vport_context(core, input),
        Opcode::QueryHcaVportPkey => hca::query_hca_vport_pkey(core, input, output),
        Opcode::QueryVportState => hca::query_vport_state(core, input, output),
        Opcode::QueryEswVportContext => eswitch::query_esw_vport_context(core, input, output),
        Opcode::QueryEswFunctions => eswitch::query_esw_functions(core, input, output),
        Opcode::QueryVportCounter => hca::query_vport_counter(core, input, output),
        Opcode::AllocUar => transport::alloc_uar(core, output),
        Opcode::DeallocUar => transport::dealloc_uar(core, input),
        Opcode::AllocPd => transport::alloc_pd(core, output),
        Opcode::DeallocPd => transport::dealloc_pd(core, input),
        Opcode::AllocXrcd => transport::alloc_xrcd(core, output),
        Opcode::DeallocXrcd => transport::dealloc_xrcd(core, input),
        Opcode::AllocTransportDomain => transport::alloc_td(core, output),
        Opcode::DeallocTransportDomain => transport::dealloc_td(core, input),
        Opcode::CreateEq => queues::create_eq(core, input, output),
        Opcode::DestroyEq => queues::destroy_eq(core, input),
        Opcode::CreateCq => queues::create_cq(core, input, output),
        Opcode::DestroyCq => queues::destroy_cq(core, input),
        Opcode::ModifyCq => cq::modify_cq(core, input),
        Opcode::CreateSq => queues::create_sq(core, input, output),
        Opcode::ModifySq => queues::modify_sq(core, input),
        Opcode::QuerySq => queues::query_sq(core, input, output),
        Opcode::DestroySq => queues::destroy_sq(core, input),
        Opcode::CreateRq => queues::create_rq(core, input, output),
        Opcode::ModifyRq => queues::modify_rq(core, input),
        Opcode::QueryRq => queues::query_rq(core, input, output),
        Opcode::DestroyRq => queues::destroy_rq(core, input),
        Opcode::CreateRmp => queues::create_rmp(core, input, output),
        Opcode::ModifyRmp => queues::modify_rmp(core, input),
        Opcode::QueryRmp => queues::query_rmp(core, input, output),
        Opcode::DestroyRmp => queues::destroy_rmp(core, input),
        Opcode::CreateTis => transport::create_tis(core, input, output),
        Opcode::DestroyTis => transport::destroy_tis(core, input),
        Opcode::ModifyTis => transport::modify_tis(core, input),
        Opcode::CreateTir => transport::create_tir(core, input, output),
        Opcode::ModifyTir => transport::modify_tir(core, input),
        Opcode::DestroyTir => transport::destroy_tir(core, input),
        Opcode::CreateRqt => transport::create_rqt(core, input, output),
        Opcode::ModifyRqt => transport::modify_rqt(core, input),
        Opcode::DestroyRqt => transport::destroy_rqt(core, input),
        Opcode::CreateFlowTable => steering::create_flow_table(core, input, output),
        Opcode::DestroyFlowTable => steering::destroy_flow_table(core, input),
        Opcode::QueryFlowTable => steering::query_flow_table(core, input, output),
        Opcode::SyncSteering => steering::sync_steering(core),
        Opcode::CreateFlowGroup => steering::create_flow_group(core, input, output),
        Opcode::DestroyFlowGroup => steering::destroy_flow_group(core, input),
        Opcode::SetFlowTableEntry => flow_entry::set_fte(core, input),
        Opcode::DeleteFlowTableEntry => flow_entry::delete_fte(core, input),
        Opcode::AllocModifyHeaderContext => modify_header::alloc(core, input, output),
        Opcode::DeallocModifyHeaderContext => modify_header::dealloc(core, input),
        Opcode::AllocPacketReformatContext => reformat::alloc(core, input, output),
        Opcode::DeallocPacketReformatContext => reformat::dealloc(core, input),
        Opcode::AllocFlowCounter => flow_counter::alloc(core, input, output),
        Opcode::DeallocFlowCounter => flow_counter::dealloc(core, input),
        Opcode::QueryFlowCounter => flow_counter::query(core, input, output),
        Opcode::SetFlowTableRoot => steering::set_root(core, input),
        Opcode::ModifyFlowTable => steering::modify_flow_table(core, input),
        Opcode::CreateMkey => mkey::create_mkey(core, input, output),
        Opcode::QueryMkey => mkey::query_mkey(core, input, output),
        Opcode::DestroyMkey => mkey::destroy_mkey(core, input),
        Opcode::QuerySpecialContexts => mkey::query_special_contexts(output),
        Opcode::PageFaultResume => mkey::page_fault_resume(core, input),
        Opcode::CreatePsv => sig::create_psv(core, input, output),
        Opcode::DestroyPsv => sig::destroy_psv(core, input),
        Opcode::AllocQCounter => qcounters::alloc_q_counter(core, output),
        Opcode::DeallocQCounter => qcounters::dealloc_q_counter(core, input),
        Opcode::QueryQCounter => qcounters::query_q_counter(core, input, output),
        Opcode::CreateQp => qp::create_qp(core, input, output),
        Opcode::Rst2initQp
        | Opcode::Init2initQp
        | Opcode::Init2rtrQp
        | Opcode::Rtr2rtsQp
        | Opcode::Rts2rtsQp
        | Opcode::Sqerr2rtsQp
        | Opcode::SqdRtsQp
        | Opcode::Qp2errQp
        | Opcode::Qp2rstQp => qp::modify_qp(core, opcode, input),
        Opcode::QueryQp => qp::query_qp(core, input, output),
        Opcode::DestroyQp => qp::destroy_qp(core, input),
        Opcode::CreateXrcSrq => xrc::create_xrc_srq(core, input, output),
        Opcode::ArmXrcSrq => xrc::arm_xrc_srq(core, input),
        Opcode::QueryXrcSrq => xrc::query_xrc_srq(core, input, output),
        Opcode::DestroyXrcSrq => xrc::destroy_xrc_srq(core, input),
        Opcode::CreateXrq => xrq::create_xrq(core, input, output),
        Opcode::QueryXrq => xrq::query_xrq(core, input, output),
        Opcode::ArmXrq => xrq::arm_xrq(core, input),
        Opcode::DestroyXrq => xrq::destroy_xrq(core, input),
        Opcode::CreateDct => dc::create_dct(core, input, output),
        Opcode::DrainDct => dc::drain_dct(core, input),
        Opcode::QueryDct => dc::query_dct(core, input, output),
        Opcode::ArmDctForKeyViolation => dc::arm_dct_for_key_violation(core, input),
        Opcode::DestroyDct => dc::destroy_dct(core, input),
        Opcode::SetRoceAddress => roce::set_roce_address(core, input),
        Opcode::QueryRoceAddress => roce::query_roce_address(core, input, output),
        Opcode::AttachToMcg => mcg::attach_to_mcg(core, input),
        Opcode::DetachFromMcg => mcg::detach_from_mcg(core, input),
        Opcode::CreateGeneralObject => general_object::create(core, input, output),
        Opcode::ModifyGeneralObject => general_object::modify(core, input),
        Opcode::QueryGeneralObject => general_object::query(core, input, output),
        Opcode::DestroyGeneralObject => general_object::destroy(core, input),
        Opcode::CreateUctx => devx::create_uctx(core, input, output),
        Opcode::DestroyUctx => devx::destroy_uctx(core, input),
        Opcode::CreateUmem => devx::create_umem(core, input, output),
        Opcode::DestroyUmem => devx::destroy_umem(core, input),
        Opcode::Nop => Ok(()),
        _ => Err(CmdError::new(
            CmdStatus::BadOpcode,
            Syndrome::UnknownOpcode,
            "opcode not implemented by the model",
        )),
    }
}

/// Views `input` as layout `L`, or fails with BAD_INP_LEN.
macro_rules! input_as {
    ($ty:ty, $input:expr) => {
        <$ty>::new($input).map_err(|_| {
            $crate::fw::CmdError::new(
                cxdirect_hw::cmd::CmdStatus::BadInputLength,
                $crate::fw::Syndrome::InputTooShort,
                concat!("input shorter than ", stringify!($ty)),
            )
        })?
    };
}

/// Views `output` as layout `L`, or fails with BAD_OUTP_LEN.
macro_rules! output_as {
    ($ty:ty, $output:expr) => {
        <$ty>::new(&mut $output[..]).map_err(|_| {
            $crate::fw::CmdError::new(
                cxdirect_hw::cmd::CmdStatus::BadOutputLength,
                $crate::fw::Syndrome::OutputTooShort,
                concat!("output shorter than ", stringify!($ty)),
            )
        })?
    };
}
pub(crate) use {input_as, output_as};
