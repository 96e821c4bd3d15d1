//! Flow counters: ALLOC_FLOW_COUNTER, DEALLOC_FLOW_COUNTER and QUERY_FLOW_COUNTER, and the
//! counter list of a flow entry whose action counts (`FLOW_CONTEXT_ACTION_COUNT`). Received
//! frames an entry matches are counted in [`steering`](crate::steering).
//!
//! What Linux sends: mlx5_core's `mlx5_cmd_fc_alloc` / `mlx5_cmd_fc_bulk_alloc` (one counter,
//! or a bulk when `flow_counter_bulk_alloc` is reported, which this device does not), its
//! `mlx5_cmd_fc_query` and `mlx5_cmd_fc_bulk_query` (`num_of_counters` consecutive counters)
//! and `mlx5_cmd_set_fte`, which writes the counters' ids after the destinations and sets
//! `flow_counter_list_size`, at most `2^log_max_flow_counter` of them. rdma-core allocates
//! them through DEVX (`Mlx5DevxObj(ctx, AllocFlowCounterIn())` in tests/test_mlx5_dr.py) and
//! attaches them to a rule on a root table (mlx5_ib's `MLX5_IB_ATTR_CREATE_FLOW_ARR_COUNTERS_DEVX`).

use super::{bad_param, bad_res, bad_state, input_as, output_as, table_full, CmdResult, Core};
use super::{CmdError, Syndrome};
use crate::objects::FlowCounter;
use cxdirect_hw::cmd::CmdStatus;
use cxdirect_hw::flow::{
    AllocFlowCounterIn, AllocFlowCounterOut, DeallocFlowCounterIn, FlowContext, QueryFlowCounterIn,
    QUERY_FLOW_COUNTER_STATISTICS_BYTE,
};
use cxdirect_hw::vport::TrafficCounter;
use std::sync::atomic::Ordering;

use crate::objects::limits::LOG_MAX_FLOW_COUNTERS_PER_ENTRY;

pub(crate) fn alloc(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let cmd = input_as!(AllocFlowCounterIn<&[u8]>, input);
    if cmd.flow_counter_bulk() != 0 || cmd.flow_counter_bulk_log_size() != 0 {
        return Err(bad_param(
            Syndrome::BadSteeringParams,
            "bulk flow counter allocation is not supported (flow_counter_bulk_alloc is 0)",
        ));
    }
    let id = core
        .res
        .flow_counters
        .insert(FlowCounter::default())
        .ok_or(table_full("flow counters"))?;
    output_as!(AllocFlowCounterOut<&mut [u8]>, output).set_flow_counter_id(id);
    Ok(())
}

pub(crate) fn dealloc(core: &mut Core, input: &[u8]) -> CmdResult {
    let cmd = input_as!(DeallocFlowCounterIn<&[u8]>, input);
    let id = cmd.flow_counter_id();
    let counter = core
        .res
        .flow_counters
        .get(id)
        .ok_or(bad_res("no such flow counter"))?;
    if counter.fte_users > 0 {
        return Err(bad_state(
            Syndrome::ObjectInUse,
            "flow counter still counted by a flow entry",
        ));
    }
    core.res.flow_counters.remove(id);
    Ok(())
}

/// QUERY_FLOW_COUNTER: `num_of_counters` counters from `flow_counter_id` (0 means one), each
/// a (packets, octets) pair in the output's statistics; with `clear`, zeroed after reading.
pub(crate) fn query(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let cmd = input_as!(QueryFlowCounterIn<&[u8]>, input);
    let count = u32::from(cmd.num_of_counters()).max(1);
    let first = cmd.flow_counter_id();
    let size = <TrafficCounter as cxdirect_hw::layout::Layout>::SIZE;
    let need = QUERY_FLOW_COUNTER_STATISTICS_BYTE + count as usize * size;
    if output.len() < need {
        return Err(CmdError::new(
            CmdStatus::BadOutputLength,
            Syndrome::OutputTooShort,
            "output shorter than the counters asked for",
        ));
    }
    for i in 0..count {
        let id = first
            .checked_add(i)
            .ok_or(bad_res("no such flow counter"))?;
        if !core.res.flow_counters.contains(id) {
            return Err(bad_res("no such flow counter"));
        }
    }
    for i in 0..count {
        let Some(counter) = core.res.flow_counters.get(first + i) else {
            continue;
        };
        let (packets, octets) = if cmd.clear() {
            (
                counter.packets.swap(0, Ordering::Relaxed),
                counter.octets.swap(0, Ordering::Relaxed),
            )
        } else {
            (
                counter.packets.load(Ordering::Relaxed),
                counter.octets.load(Ordering::Relaxed),
            )
        };
        let at = QUERY_FLOW_COUNTER_STATISTICS_BYTE + i as usize * size;
        TrafficCounter::new(&mut output[at..at + size])
            .map_err(|_| bad_res("statistics past the output"))?
            .set_packets(packets)
            .set_octets(octets);
    }
    Ok(())
}

/// The counters a flow entry's context `ctx` lists after its `dests` destinations, when its
/// `action` counts: each must exist, and there must be one at least and no more than
/// `2^log_max_flow_counter`. An entry that does not count may list none.
pub(super) fn entry_counters(
    core: &Core,
    ctx: &FlowContext<&[u8]>,
    dests: usize,
    counts: bool,
) -> Result<Vec<u32>, CmdError> {
    let listed = ctx.flow_counter_list_size() as usize;
    if !counts {
        if listed != 0 {
            return Err(bad_param(
                Syndrome::BadSteeringParams,
                "flow counters listed without the count action",
            ));
        }
        return Ok(Vec::new());
    }
    if listed == 0 || listed > 1 << LOG_MAX_FLOW_COUNTERS_PER_ENTRY {
        return Err(bad_param(
            Syndrome::BadSteeringParams,
            "a counting entry lists between 1 and 2^log_max_flow_counter counters",
        ));
    }
    let mut counters = Vec::with_capacity(listed);
    for i in dests..dests + listed {
        let raw = ctx.destination(i).map_err(|_| {
            bad_param(
                Syndrome::BadSteeringParams,
                "flow counter list past the input",
            )
        })?;
        let id = (raw >> 32) as u32;
        if !core.res.flow_counters.contains(id) {
            return Err(bad_res("flow entry names no flow counter"));
        }
        counters.push(id);
    }
    Ok(counters)
}

/// Counts `counters` as used by one more flow entry.
pub(super) fn hold(core: &mut Core, counters: &[u32]) {
    for &id in counters {
        if let Some(c) = core.res.flow_counters.get_mut(id) {
            c.fte_users += 1;
        }
    }
}

/// Lets go of `counters` for an entry removed or replaced.
pub(super) fn release(core: &mut Core, counters: &[u32]) {
    for &id in counters {
        if let Some(c) = core.res.flow_counters.get_mut(id) {
            c.fte_users = c.fte_users.saturating_sub(1);
        }
    }
}
