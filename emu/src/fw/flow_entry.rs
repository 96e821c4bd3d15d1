//! NIC flow table entries (SET_FLOW_TABLE_ENTRY, DELETE_FLOW_TABLE_ENTRY): a match value in
//! one of the table's groups, an action (allow, drop, forward, and count), the destinations
//! and the counters. Receive entries forward to TIRs and deeper receive tables; transmit
//! entries to deeper transmit tables only (a frame an SQ sends has no TIR to go to: it leaves
//! or is dropped).

use super::match_criteria::MATCH_PARAM_SIZE;
use super::steering::{check_table_type, table_of};
use super::{bad_param, bad_res, input_as, CmdError, CmdResult, Core, Syndrome};
use crate::objects::FlowEntry;
use cxdirect_hw::flow::{
    DeleteFteIn, FlowContext, SetFteIn, FLOW_CONTEXT_ACTION_ALLOW, FLOW_CONTEXT_ACTION_COUNT,
    FLOW_CONTEXT_ACTION_DECAP, FLOW_CONTEXT_ACTION_DROP, FLOW_CONTEXT_ACTION_ENCAP,
    FLOW_CONTEXT_ACTION_FWD_DEST, FLOW_CONTEXT_ACTION_MOD_HDR, FLOW_DESTINATION_TYPE_FLOW_TABLE,
    FLOW_DESTINATION_TYPE_TIR, FLOW_TABLE_TYPE_NIC_RX, SET_FTE_MODIFY_ACTION,
    SET_FTE_MODIFY_DESTINATION_LIST, SET_FTE_MODIFY_FLOW_COUNTERS, SET_FTE_MODIFY_FLOW_TAG,
};
use cxdirect_hw::reformat::REFORMAT_TYPE_L3_TUNNEL_TO_L2;

pub(crate) fn set_fte(core: &mut Core, input: &[u8]) -> CmdResult {
    let cmd = input_as!(SetFteIn<&[u8]>, input);
    check_table_type(cmd.table_type(), cmd.other_vport(), cmd.vport_number())?;
    let (table_id, table_type) = (cmd.table_id(), cmd.table_type());
    let index = cmd.flow_index();
    // op_mod 0 sets an entry; 1 modifies an existing one in place (the `flow_modify_en`
    // capability), changing only what `modify_enable_mask` selects.
    let modify = match cmd.op_mod() {
        0 => None,
        1 => Some(cmd.modify_enable_mask()),
        _ => {
            return Err(bad_param(
                Syndrome::BadOpMod,
                "SET_FLOW_TABLE_ENTRY op_mod must be 0 or 1",
            ))
        }
    };
    let ctx = cmd.flow_context_all();
    let mut action = ctx.action();
    let mut flow_tag = ctx.flow_tag();
    let known = FLOW_CONTEXT_ACTION_ALLOW
        | FLOW_CONTEXT_ACTION_DROP
        | FLOW_CONTEXT_ACTION_FWD_DEST
        | FLOW_CONTEXT_ACTION_COUNT
        | FLOW_CONTEXT_ACTION_MOD_HDR
        | FLOW_CONTEXT_ACTION_ENCAP
        | FLOW_CONTEXT_ACTION_DECAP;
    let rewrites = FLOW_CONTEXT_ACTION_COUNT
        | FLOW_CONTEXT_ACTION_MOD_HDR
        | FLOW_CONTEXT_ACTION_ENCAP
        | FLOW_CONTEXT_ACTION_DECAP;
    // Counting or rewriting alone decides nothing about the frame (Linux's
    // `counter_is_valid`; mlx5_ib adds ALLOW to a transmit rule without a destination).
    if action & !known != 0 || action & !rewrites == 0 {
        return Err(bad_param(
            Syndrome::BadSteeringParams,
            "flow action must be allow, drop or forward, and may count, modify headers, \
             reformat and decapsulate",
        ));
    }
    if action & FLOW_CONTEXT_ACTION_DECAP != 0 && table_type != FLOW_TABLE_TYPE_NIC_RX {
        return Err(bad_param(
            Syndrome::BadSteeringParams,
            "only a receive entry decapsulates",
        ));
    }
    let mut modify_header = modify_header_of(core, &ctx, action, table_type)?;
    let mut reformat = reformat_of(core, &ctx, action, table_type)?;
    let count = ctx.destination_list_size() as usize;
    if action & FLOW_CONTEXT_ACTION_FWD_DEST != 0 && count == 0 {
        return Err(bad_param(
            Syndrome::BadSteeringParams,
            "forward action with an empty destination list",
        ));
    }
    if count > 1 << super::caps::LOG_MAX_FLOW_DESTINATION {
        return Err(bad_param(
            Syndrome::BadSteeringParams,
            "more destinations than log_max_destination allows",
        ));
    }
    let level = table_of(core, table_id, table_type)?.level;
    let mut dests = Vec::with_capacity(count.min(64));
    for i in 0..count {
        let raw = ctx.destination(i).map_err(|_| {
            bad_param(
                Syndrome::BadSteeringParams,
                "destination list past the input",
            )
        })?;
        let (kind, id) = ((raw >> 56) as u8, (raw >> 32) as u32 & 0x00ff_ffff);
        let deeper = table_of(core, id, table_type).map(|t| t.level > level);
        match kind {
            FLOW_DESTINATION_TYPE_TIR if table_type != FLOW_TABLE_TYPE_NIC_RX => {
                return Err(bad_param(
                    Syndrome::BadSteeringParams,
                    "a transmit flow entry forwards to flow tables only, never to a TIR",
                ))
            }
            FLOW_DESTINATION_TYPE_TIR if core.res.tirs.contains(id) => {}
            FLOW_DESTINATION_TYPE_FLOW_TABLE if deeper == Ok(true) => {}
            FLOW_DESTINATION_TYPE_FLOW_TABLE if deeper.is_ok() => {
                return Err(bad_param(
                    Syndrome::BadSteeringParams,
                    "a flow entry may only forward to a deeper-level table",
                ))
            }
            FLOW_DESTINATION_TYPE_TIR | FLOW_DESTINATION_TYPE_FLOW_TABLE => {
                return Err(bad_res(
                    "flow destination names no TIR or flow table of the entry's table type",
                ))
            }
            _ => {
                return Err(bad_param(
                    Syndrome::BadSteeringParams,
                    "flow destination type not modelled",
                ))
            }
        }
        dests.push((kind, id));
    }
    let mut counters = super::flow_counter::entry_counters(
        core,
        &ctx,
        count,
        action & FLOW_CONTEXT_ACTION_COUNT != 0,
    )?;
    let group_id = ctx.group_id();
    let mut value = Box::new([0u8; MATCH_PARAM_SIZE]);
    value.copy_from_slice(ctx.match_value().as_bytes());
    let table = table_of(core, table_id, table_type)?;
    super::steering::check_firmware_owned(table)?;
    let group = table
        .groups
        .get(&group_id)
        .ok_or(bad_res("flow entry's group does not exist"))?;
    if index < group.start || index > group.end {
        return Err(bad_param(
            Syndrome::FlowIndexOutOfRange,
            "flow index outside its group's range",
        ));
    }
    if value
        .iter()
        .zip(group.criteria.iter())
        .any(|(v, m)| v & !m != 0)
    {
        return Err(bad_param(
            Syndrome::MatchOutsideCriteria,
            "match value sets bits outside the group's criteria",
        ));
    }
    if let Some(mask) = modify {
        // Linux's `mlx5_cmd_update_fte` sends the whole entry with the parts it changed
        // selected: the action and the destination list when a rule is added to or removed
        // from an entry others share (`add_rule_fte`, `del_sw_hw_rule`), and the counter list
        // when a counter is added. The flow tag is not kept by the model.
        let old = table
            .entries
            .get(&index)
            .ok_or(bad_res("no flow entry at that index to modify"))?;
        if old.group != group_id || old.value != value {
            return Err(bad_param(
                Syndrome::BadSteeringParams,
                "a modified flow entry keeps its group and match value",
            ));
        }
        let known = SET_FTE_MODIFY_ACTION
            | SET_FTE_MODIFY_FLOW_TAG
            | SET_FTE_MODIFY_DESTINATION_LIST
            | SET_FTE_MODIFY_FLOW_COUNTERS;
        if mask & !known != 0 {
            return Err(bad_param(
                Syndrome::BadSteeringParams,
                "modify_enable_mask selects a part the model does not keep",
            ));
        }
        if mask & SET_FTE_MODIFY_ACTION == 0 {
            action = old.action;
            modify_header = old.modify_header;
            reformat = old.reformat;
        }
        if mask & SET_FTE_MODIFY_FLOW_TAG == 0 {
            flow_tag = old.flow_tag;
        }
        if mask & SET_FTE_MODIFY_DESTINATION_LIST == 0 {
            dests = old.dests.clone();
        }
        if mask & SET_FTE_MODIFY_FLOW_COUNTERS == 0 {
            counters = old.counters.clone();
        }
        if (action & FLOW_CONTEXT_ACTION_COUNT != 0) == counters.is_empty() {
            return Err(bad_param(
                Syndrome::BadSteeringParams,
                "a counting entry lists counters and only a counting entry does",
            ));
        }
        if action & FLOW_CONTEXT_ACTION_FWD_DEST != 0 && dests.is_empty() {
            return Err(bad_param(
                Syndrome::BadSteeringParams,
                "forward action with an empty destination list",
            ));
        }
    }
    // Replacing an entry releases what the old one referenced.
    if let Some(old) = core
        .res
        .flow_tables
        .get_mut(table_id)
        .and_then(|t| t.entries.remove(&index))
    {
        release_dests(core, &old.dests);
        super::flow_counter::release(core, &old.counters);
        hold_modify_header(core, old.modify_header, false);
        hold_reformat(core, old.reformat, false);
    }
    super::flow_counter::hold(core, &counters);
    hold_modify_header(core, modify_header, true);
    hold_reformat(core, reformat, true);
    for &(kind, id) in &dests {
        match kind {
            FLOW_DESTINATION_TYPE_TIR => {
                if let Some(tir) = core.res.tirs.get_mut(id) {
                    tir.flow_users += 1;
                }
            }
            _ => {
                if let Some(t) = core.res.flow_tables.get_mut(id) {
                    t.referenced += 1;
                }
            }
        }
    }
    if let Some(table) = core.res.flow_tables.get_mut(table_id) {
        table.entries.insert(
            index,
            FlowEntry {
                group: group_id,
                action,
                dests,
                counters,
                value,
                flow_tag,
                modify_header,
                reformat,
            },
        );
    }
    Ok(())
}

/// The modify-header context an entry with `FLOW_CONTEXT_ACTION_MOD_HDR` names: it must exist
/// and be made for the entry's table type.
fn modify_header_of(
    core: &Core,
    ctx: &FlowContext<&[u8]>,
    action: u16,
    table_type: u8,
) -> Result<Option<u32>, CmdError> {
    if action & FLOW_CONTEXT_ACTION_MOD_HDR == 0 {
        return Ok(None);
    }
    let id = ctx.modify_header_id();
    match core.res.modify_headers.get(id) {
        Some(m) if m.table_type == table_type => Ok(Some(id)),
        _ => Err(bad_res(
            "modify_header_id names no modify-header context of the entry's table type",
        )),
    }
}

/// Counts one more (`hold`) or one fewer flow entry naming modify-header context `id`.
fn hold_modify_header(core: &mut Core, id: Option<u32>, hold: bool) {
    if let Some(m) = id.and_then(|id| core.res.modify_headers.get_mut(id)) {
        m.fte_users = if hold {
            m.fte_users + 1
        } else {
            m.fte_users.saturating_sub(1)
        };
    }
}

fn release_dests(core: &mut Core, dests: &[(u8, u32)]) {
    for &(kind, id) in dests {
        match kind {
            FLOW_DESTINATION_TYPE_TIR => {
                if let Some(tir) = core.res.tirs.get_mut(id) {
                    tir.flow_users = tir.flow_users.saturating_sub(1);
                }
            }
            _ => {
                if let Some(t) = core.res.flow_tables.get_mut(id) {
                    t.referenced = t.referenced.saturating_sub(1);
                }
            }
        }
    }
}

pub(crate) fn delete_fte(core: &mut Core, input: &[u8]) -> CmdResult {
    let cmd = input_as!(DeleteFteIn<&[u8]>, input);
    check_table_type(cmd.table_type(), cmd.other_vport(), cmd.vport_number())?;
    let table = super::steering::table_of_mut(core, cmd.table_id(), cmd.table_type())?;
    let entry = table
        .entries
        .remove(&cmd.flow_index())
        .ok_or(bad_res("no flow entry at that index"))?;
    release_dests(core, &entry.dests);
    super::flow_counter::release(core, &entry.counters);
    hold_modify_header(core, entry.modify_header, false);
    hold_reformat(core, entry.reformat, false);
    Ok(())
}

/// The packet reformat context an entry with `FLOW_CONTEXT_ACTION_ENCAP` names
/// (`packet_reformat_id`): on receive an L3 tunnel's decapsulation to L2, on transmit an
/// encapsulation (mlx5_ib's `mlx5_ib_flow_action_packet_reformat_valid` pairs them so).
fn reformat_of(
    core: &Core,
    ctx: &FlowContext<&[u8]>,
    action: u16,
    table_type: u8,
) -> Result<Option<u32>, CmdError> {
    if action & FLOW_CONTEXT_ACTION_ENCAP == 0 {
        return Ok(None);
    }
    let id = ctx.encap_id();
    let kind = core
        .res
        .reformats
        .get(id)
        .ok_or(bad_res(
            "packet_reformat_id names no packet reformat context",
        ))?
        .reformat_type;
    let fits = if table_type == FLOW_TABLE_TYPE_NIC_RX {
        kind == REFORMAT_TYPE_L3_TUNNEL_TO_L2
    } else {
        kind != REFORMAT_TYPE_L3_TUNNEL_TO_L2
    };
    if !fits {
        return Err(bad_param(
            Syndrome::BadSteeringParams,
            "a receive entry reformats an L3 tunnel to L2 only, a transmit entry encapsulates \
             only",
        ));
    }
    Ok(Some(id))
}

/// Counts one more (`hold`) or one fewer flow entry naming packet reformat context `id`.
fn hold_reformat(core: &mut Core, id: Option<u32>, hold: bool) {
    if let Some(r) = id.and_then(|id| core.res.reformats.get_mut(id)) {
        r.fte_users = if hold {
            r.fte_users + 1
        } else {
            r.fte_users.saturating_sub(1)
        };
    }
}
