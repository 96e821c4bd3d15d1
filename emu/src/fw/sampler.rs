//! Flow samplers: CREATE, QUERY and DESTROY_GENERAL_OBJECT of type FLOW_SAMPLER. A sampler
//! names two flow tables of one type: every packet a steering entry sends to the sampler's
//! ICM address goes on to the default table, and one in `sample_ratio` is also copied to the
//! sample table (`crate::steering` carries both on; the ICM address is
//! `sw_steering::terminals`'s).
//!
//! Read from rdma-core's dr_action.c and dr_devx.c: `dr_action_create_sampler_term_tbl` makes
//! the sample table, a firmware table at `max_ft_level - 1` with `termination_table` set and
//! one always-hit entry holding the sample actions (counters, a TIR, a flow tag);
//! `dr_action_create_sampler` creates the object with that table's type and level,
//! `ignore_flow_level` (the default table, a domain table, sits at the same level), the ratio
//! and both table numbers (`dr_devx_create_flow_sampler`), then queries it for
//! `sw_steering_icm_address_rx` and `_tx`, which its entries hit; destroying the action
//! destroys the object before the sample table. Linux's mlx5_core creates the same object for
//! e-switch sampling (`sampler_obj_create`), on FDB tables the model does not have.
//!
//! The model samples on NIC receive tables only; rdma-core offers the action on NIC receive
//! and FDB domains, not on NIC transmit (`mlx5dv_dr_action_create_flow_sampler`).

use super::steering::{table_of, table_of_mut};
use super::{
    bad_param, bad_res, input_as, output_as, table_full, CmdError, CmdResult, Core, Syndrome,
};
use crate::objects::FlowSampler;
use crate::sw_steering::terminals::sampler_address;
use cxdirect_hw::flow::FLOW_TABLE_TYPE_NIC_RX;
use cxdirect_hw::general_obj::{GeneralObjInCmdHdr, GeneralObjOutCmdHdr};
use cxdirect_hw::sampler::{CreateFlowSamplerIn, QueryFlowSamplerOut};
use std::sync::atomic::AtomicU64;

fn steering_param(what: &'static str) -> CmdError {
    bad_param(Syndrome::BadSteeringParams, what)
}

/// CREATE_GENERAL_OBJECT of a flow sampler: both tables must exist with the sampler's type
/// and, unless `ignore_flow_level`, sit deeper than its level; they are held while it lives.
pub(crate) fn create(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let cmd = input_as!(CreateFlowSamplerIn<&[u8]>, input);
    let table_type = cmd.table_type();
    if table_type != FLOW_TABLE_TYPE_NIC_RX {
        return Err(steering_param(
            "flow samplers are modelled on NIC receive tables only (table_type 0)",
        ));
    }
    if cmd.sample_ratio() == 0 {
        return Err(steering_param(
            "a flow sampler's sample_ratio must be 1 or more",
        ));
    }
    if cmd.level() > super::caps::MAX_FT_LEVEL {
        return Err(steering_param("flow sampler level above max_ft_level"));
    }
    let (default_table, sample_table) = (cmd.default_table_id(), cmd.sample_table_id());
    for id in [default_table, sample_table] {
        let table = table_of(core, id, table_type)?;
        if !cmd.ignore_flow_level() && table.level <= cmd.level() {
            return Err(steering_param(
                "a flow sampler's tables must be deeper than its level unless \
                 ignore_flow_level is set",
            ));
        }
    }
    let sampler = FlowSampler {
        table_type,
        default_table,
        sample_table,
        sample_ratio: cmd.sample_ratio(),
        level: cmd.level(),
        ignore_flow_level: cmd.ignore_flow_level(),
        seen: AtomicU64::new(0),
    };
    let id = core
        .res
        .samplers
        .insert(sampler)
        .ok_or(table_full("flow sampler table full"))?;
    for table in [default_table, sample_table] {
        table_of_mut(core, table, table_type)?.referenced += 1;
    }
    output_as!(GeneralObjOutCmdHdr<&mut [u8]>, output).set_obj_id(id);
    Ok(())
}

/// QUERY_GENERAL_OBJECT of a flow sampler: as CREATE gave it, with the ICM address its
/// entries hit (the same address both ways; a transmit walk reaching it drops the packet).
pub(crate) fn query(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let id = input_as!(GeneralObjInCmdHdr<&[u8]>, input).obj_id();
    let sampler = core.res.samplers.get(id).ok_or(no_sampler())?;
    let address = sampler_address(id);
    output_as!(QueryFlowSamplerOut<&mut [u8]>, output)
        .set_obj_id(id)
        .set_table_type(sampler.table_type)
        .set_level(sampler.level)
        .set_ignore_flow_level(sampler.ignore_flow_level)
        .set_sample_ratio(sampler.sample_ratio)
        .set_sample_table_id(sampler.sample_table)
        .set_default_table_id(sampler.default_table)
        .set_sw_steering_icm_address_rx(address)
        .set_sw_steering_icm_address_tx(address);
    Ok(())
}

/// DESTROY_GENERAL_OBJECT of a flow sampler: releases its tables. Entries still hitting its
/// address afterwards drop what reaches it.
pub(crate) fn destroy(core: &mut Core, input: &[u8]) -> CmdResult {
    let id = input_as!(GeneralObjInCmdHdr<&[u8]>, input).obj_id();
    let sampler = core.res.samplers.remove(id).ok_or(no_sampler())?;
    for table in [sampler.default_table, sampler.sample_table] {
        if let Some(t) = core.res.flow_tables.get_mut(table) {
            t.referenced = t.referenced.saturating_sub(1);
        }
    }
    Ok(())
}

fn no_sampler() -> CmdError {
    bad_res("no flow sampler of that number")
}
