//! NIC receive flow steering: flow tables, groups (a match mask over an index range), entries
//! (a match value and an action) and the root table: the commands that build them. Received
//! frames are matched against them in [`steering`](crate::steering).

use super::table_full;
use super::{bad_param, bad_res, bad_state, input_as, output_as, CmdResult, Core, Syndrome};
use crate::objects::{FlowEntry, FlowGroup, FlowTable};
use cxdirect_hw::flow::{
    CreateFlowGroupIn, CreateFlowGroupOut, CreateFlowTableIn, CreateFlowTableOut, DeleteFteIn,
    DestroyFlowGroupIn, DestroyFlowTableIn, ModifyFlowTableIn, QueryFlowTableIn, QueryFlowTableOut,
    SetFlowTableRootIn, SetFteIn, FLOW_CONTEXT_ACTION_ALLOW, FLOW_CONTEXT_ACTION_COUNT,
    FLOW_CONTEXT_ACTION_DROP, FLOW_CONTEXT_ACTION_FWD_DEST, FLOW_DESTINATION_TYPE_FLOW_TABLE,
    FLOW_DESTINATION_TYPE_TIR, FLOW_TABLE_MISS_ACTION_DEFAULT, FLOW_TABLE_MISS_ACTION_FWD,
    FLOW_TABLE_TYPE_NIC_RX, MODIFY_FLOW_TABLE_MISS_TABLE_ID, SET_FTE_MODIFY_ACTION,
    SET_FTE_MODIFY_DESTINATION_LIST, SET_FTE_MODIFY_FLOW_COUNTERS, SET_FTE_MODIFY_FLOW_TAG,
};

const MATCH_PARAM_SIZE: usize = 0x200;
pub(crate) use crate::objects::limits::LOG_MAX_FT_SIZE;

fn check_table_type(table_type: u8, other_vport: bool, vport: u16) -> CmdResult {
    if other_vport || vport != 0 {
        return Err(bad_param(
            Syndrome::BadVport,
            "only the function's own vport (0) is modelled",
        ));
    }
    if table_type != FLOW_TABLE_TYPE_NIC_RX {
        return Err(bad_param(
            Syndrome::BadSteeringParams,
            "only NIC receive flow tables are modelled",
        ));
    }
    Ok(())
}

pub(crate) fn create_flow_table(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let cmd = input_as!(CreateFlowTableIn<&[u8]>, input);
    check_table_type(cmd.table_type(), cmd.other_vport(), cmd.vport_number())?;
    let ctx = cmd.flow_table_context();
    if ctx.log_size() > LOG_MAX_FT_SIZE {
        return Err(bad_param(
            Syndrome::BadSteeringParams,
            "flow table log_size above 16",
        ));
    }
    if ctx.level() > super::caps::MAX_FT_LEVEL {
        return Err(bad_param(
            Syndrome::BadSteeringParams,
            "flow table level above max_ft_level",
        ));
    }
    let miss_action = ctx.table_miss_action();
    let miss_table = ctx.table_miss_id();
    check_miss(core, ctx.level(), miss_action, miss_table)?;
    let sw_root = if ctx.sw_owner() {
        Some(check_sw_owner_root(core, ctx.sw_owner_icm_root_0())?)
    } else {
        None
    };
    let table = FlowTable {
        level: ctx.level(),
        log_size: ctx.log_size(),
        miss_action,
        miss_table,
        groups: Default::default(),
        entries: Default::default(),
        referenced: 0,
        sw_root,
    };
    let id = core
        .res
        .flow_tables
        .insert(table)
        .ok_or(table_full("flow table table full"))?;
    if miss_action == FLOW_TABLE_MISS_ACTION_FWD {
        if let Some(t) = core.res.flow_tables.get_mut(miss_table) {
            t.referenced += 1;
        }
    }
    output_as!(CreateFlowTableOut<&mut [u8]>, output).set_table_id(id);
    Ok(())
}

/// The root of a software-owned receive table (rdma-core's `dr_devx_create_flow_table`: a
/// NIC receive table with `sw_owner` and its first entry's ICM address in
/// `sw_owner_icm_root_0`): offered only with `sw_owner_v2` in the receive tables' properties,
/// and the address must be a whole 64-byte entry. Whether entries are there is the walk's
/// concern: software writes them before it points a rule at the table.
fn check_sw_owner_root(core: &Core, root: u64) -> Result<u64, super::CmdError> {
    if !crate::sw_steering::receive_tables_offered(core) {
        return Err(bad_param(
            Syndrome::BadSteeringParams,
            "software-owned (sw_owner) tables are not offered: the receive tables' sw_owner_v2 \
             capability is clear",
        ));
    }
    if root == 0 || root % crate::sw_steering::ENTRY_BYTES != 0 {
        return Err(bad_param(
            Syndrome::BadSteeringParams,
            "sw_owner_icm_root_0 must be the non-zero, 64-byte aligned ICM address of the \
             table's first steering entry",
        ));
    }
    Ok(root)
}

/// Refuses groups and entries in a software-owned table: its entries live in ICM.
fn check_firmware_owned(table: &FlowTable) -> CmdResult {
    if table.sw_root.is_some() {
        return Err(bad_param(
            Syndrome::BadSteeringParams,
            "a software-owned (sw_owner) table takes no flow groups or entries: software \
             writes its steering entries into ICM",
        ));
    }
    Ok(())
}

/// A table miss: the default, or forwarding to an existing table of a deeper level than the
/// table's own `level` (as entries may only forward deeper, so that a frame's walk through
/// the tables always ends).
fn check_miss(core: &Core, level: u8, miss_action: u8, miss_table: u32) -> CmdResult {
    match miss_action {
        FLOW_TABLE_MISS_ACTION_DEFAULT => Ok(()),
        FLOW_TABLE_MISS_ACTION_FWD => match core.res.flow_tables.get(miss_table) {
            Some(t) if t.level > level => Ok(()),
            Some(_) => Err(bad_param(
                Syndrome::BadSteeringParams,
                "a table's miss may only forward to a deeper-level table",
            )),
            None => Err(bad_res("table_miss_id names no flow table")),
        },
        _ => Err(bad_param(
            Syndrome::BadSteeringParams,
            "table_miss_action must be 0 or 1",
        )),
    }
}

/// MODIFY_FLOW_TABLE: changes the fields `modify_field_select` names. Only the miss
/// (`MODIFY_FLOW_TABLE_MISS_TABLE_ID`: `table_miss_action` and `table_miss_id`) is modelled;
/// Linux's fs_core sends exactly that (`mlx5_cmd_modify_flow_table`, from `connect_prev_fts`)
/// to point the tables of the previous priority at a table created in front of their old
/// miss target, and back at the next table when that one is destroyed. The LAG demux table's
/// next table (`MODIFY_FLOW_TABLE_LAG_NEXT_TABLE_ID`) is refused: no LAG demux tables exist.
pub(crate) fn modify_flow_table(core: &mut Core, input: &[u8]) -> CmdResult {
    let cmd = input_as!(ModifyFlowTableIn<&[u8]>, input);
    check_table_type(cmd.table_type(), cmd.other_vport(), cmd.vport_number())?;
    let select = cmd.modify_field_select();
    if select != MODIFY_FLOW_TABLE_MISS_TABLE_ID {
        return Err(bad_param(
            Syndrome::BadSteeringParams,
            "MODIFY_FLOW_TABLE may only change the table's miss",
        ));
    }
    let id = cmd.table_id();
    let level = core
        .res
        .flow_tables
        .get(id)
        .ok_or(bad_res("no such flow table"))?
        .level;
    let ctx = cmd.flow_table_context();
    let (miss_action, miss_table) = (ctx.table_miss_action(), ctx.table_miss_id());
    check_miss(core, level, miss_action, miss_table)?;
    let table = core
        .res
        .flow_tables
        .get_mut(id)
        .ok_or(bad_res("no such flow table"))?;
    let old = (table.miss_action, table.miss_table);
    table.miss_action = miss_action;
    table.miss_table = if miss_action == FLOW_TABLE_MISS_ACTION_FWD {
        miss_table
    } else {
        0
    };
    // The old miss target is released, the new one held (it may be the same table).
    if old.0 == FLOW_TABLE_MISS_ACTION_FWD {
        if let Some(t) = core.res.flow_tables.get_mut(old.1) {
            t.referenced = t.referenced.saturating_sub(1);
        }
    }
    if miss_action == FLOW_TABLE_MISS_ACTION_FWD {
        if let Some(t) = core.res.flow_tables.get_mut(miss_table) {
            t.referenced += 1;
        }
    }
    Ok(())
}

/// QUERY_FLOW_TABLE: the table's context as created (or modified), and in
/// `sw_owner_icm_root_0` where a software steering entry goes on into it: a software-owned
/// table's first entry, or for a firmware table the ICM address the device answers for it
/// (`sw_steering::terminals`). rdma-core queries the firmware tables it builds for its
/// destination arrays and root-table actions that way (`dr_devx_query_flow_table`).
pub(crate) fn query_flow_table(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let cmd = input_as!(QueryFlowTableIn<&[u8]>, input);
    check_table_type(cmd.table_type(), cmd.other_vport(), cmd.vport_number())?;
    let id = cmd.table_id();
    let table = core
        .res
        .flow_tables
        .get(id)
        .ok_or(bad_res("no such flow table"))?;
    let root = table
        .sw_root
        .unwrap_or_else(|| crate::sw_steering::terminals::table_address(id));
    let mut out = output_as!(QueryFlowTableOut<&mut [u8]>, output);
    out.flow_table_context_mut()
        .set_level(table.level)
        .set_log_size(table.log_size)
        .set_table_miss_action(table.miss_action)
        .set_table_miss_id(table.miss_table)
        .set_sw_owner(table.sw_root.is_some())
        .set_sw_owner_icm_root_0(root);
    Ok(())
}

/// SYNC_STEERING (rdma-core's `dr_devx_sync_steering`, before it reuses ICM it freed): the
/// model keeps no copy of steering entries (each frame reads them from ICM under the
/// function's lock), so there is nothing to drop. Offered with software steering only.
pub(crate) fn sync_steering(core: &Core) -> CmdResult {
    if !crate::sw_steering::receive_tables_offered(core) {
        return Err(super::CmdError::new(
            cxdirect_hw::cmd::CmdStatus::BadOpcode,
            Syndrome::UnknownOpcode,
            "SYNC_STEERING without software steering",
        ));
    }
    Ok(())
}

pub(crate) fn destroy_flow_table(core: &mut Core, input: &[u8]) -> CmdResult {
    let cmd = input_as!(DestroyFlowTableIn<&[u8]>, input);
    check_table_type(cmd.table_type(), cmd.other_vport(), cmd.vport_number())?;
    let id = cmd.table_id();
    let table = core
        .res
        .flow_tables
        .get(id)
        .ok_or(bad_res("no such flow table"))?;
    if !table.groups.is_empty() || table.referenced > 0 {
        return Err(bad_state(
            Syndrome::ObjectInUse,
            "flow table still has groups or is forwarded to",
        ));
    }
    // Destroying the root leaves the port without receive steering: frames are dropped.
    if core.res.rx_root == Some(id) {
        core.res.rx_root = None;
    }
    let table = core
        .res
        .flow_tables
        .remove(id)
        .ok_or(bad_res("no such flow table"))?;
    if table.miss_action == FLOW_TABLE_MISS_ACTION_FWD {
        if let Some(t) = core.res.flow_tables.get_mut(table.miss_table) {
            t.referenced = t.referenced.saturating_sub(1);
        }
    }
    Ok(())
}

pub(crate) fn create_flow_group(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let cmd = input_as!(CreateFlowGroupIn<&[u8]>, input);
    check_table_type(cmd.table_type(), cmd.other_vport(), cmd.vport_number())?;
    let (start, end) = (cmd.start_flow_index(), cmd.end_flow_index());
    let group_id = core.res.next_group;
    let table = core
        .res
        .flow_tables
        .get_mut(cmd.table_id())
        .ok_or(bad_res("no such flow table"))?;
    check_firmware_owned(table)?;
    if start > end || u64::from(end) >= 1u64 << table.log_size {
        return Err(bad_param(
            Syndrome::BadSteeringParams,
            "flow group range outside the table",
        ));
    }
    if table
        .groups
        .values()
        .any(|g| start <= g.end && g.start <= end)
    {
        return Err(bad_param(
            Syndrome::BadSteeringParams,
            "flow group range overlaps another group",
        ));
    }
    let mut criteria = Box::new([0u8; MATCH_PARAM_SIZE]);
    criteria.copy_from_slice(cmd.match_criteria().as_bytes());
    mask_disabled_parts(&mut criteria, cmd.match_criteria_enable());
    table
        .groups
        .insert(group_id, FlowGroup::new(start, end, criteria));
    core.res.next_group += 1;
    output_as!(CreateFlowGroupOut<&mut [u8]>, output).set_group_id(group_id);
    Ok(())
}

/// Clears the parts of a match mask whose enable bit is off: they take no part in matching.
fn mask_disabled_parts(criteria: &mut [u8; MATCH_PARAM_SIZE], enable: u8) {
    // fte_match_param: outer headers 0x000, misc 0x040, inner headers 0x080, the rest after.
    for (bit, range) in [(0u8, 0x00..0x40), (1, 0x40..0x80), (2, 0x80..0xc0)] {
        if enable & (1 << bit) == 0 {
            criteria[range].fill(0);
        }
    }
    criteria[0xc0..].fill(0);
}

pub(crate) fn destroy_flow_group(core: &mut Core, input: &[u8]) -> CmdResult {
    let cmd = input_as!(DestroyFlowGroupIn<&[u8]>, input);
    check_table_type(cmd.table_type(), cmd.other_vport(), cmd.vport_number())?;
    let group_id = cmd.group_id();
    let table = core
        .res
        .flow_tables
        .get_mut(cmd.table_id())
        .ok_or(bad_res("no such flow table"))?;
    if !table.groups.contains_key(&group_id) {
        return Err(bad_res("no such flow group"));
    }
    if table.entries.values().any(|e| e.group == group_id) {
        return Err(bad_state(
            Syndrome::ObjectInUse,
            "flow group still has entries",
        ));
    }
    table.groups.remove(&group_id);
    Ok(())
}

pub(crate) fn set_fte(core: &mut Core, input: &[u8]) -> CmdResult {
    let cmd = input_as!(SetFteIn<&[u8]>, input);
    check_table_type(cmd.table_type(), cmd.other_vport(), cmd.vport_number())?;
    let table_id = cmd.table_id();
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
        | FLOW_CONTEXT_ACTION_COUNT;
    // Counting alone decides nothing about the frame (Linux's `counter_is_valid`).
    if action & !known != 0 || action & !FLOW_CONTEXT_ACTION_COUNT == 0 {
        return Err(bad_param(
            Syndrome::BadSteeringParams,
            "flow action must be allow, drop or forward, and may count",
        ));
    }
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
    let level = core
        .res
        .flow_tables
        .get(table_id)
        .ok_or(bad_res("no such flow table"))?
        .level;
    let mut dests = Vec::with_capacity(count.min(64));
    for i in 0..count {
        let raw = ctx.destination(i).map_err(|_| {
            bad_param(
                Syndrome::BadSteeringParams,
                "destination list past the input",
            )
        })?;
        let (kind, id) = ((raw >> 56) as u8, (raw >> 32) as u32 & 0x00ff_ffff);
        match kind {
            FLOW_DESTINATION_TYPE_TIR if core.res.tirs.contains(id) => {}
            FLOW_DESTINATION_TYPE_FLOW_TABLE
                if core
                    .res
                    .flow_tables
                    .get(id)
                    .is_some_and(|t| t.level > level) => {}
            FLOW_DESTINATION_TYPE_FLOW_TABLE if core.res.flow_tables.contains(id) => {
                return Err(bad_param(
                    Syndrome::BadSteeringParams,
                    "a flow entry may only forward to a deeper-level table",
                ))
            }
            FLOW_DESTINATION_TYPE_TIR | FLOW_DESTINATION_TYPE_FLOW_TABLE => {
                return Err(bad_res("flow destination names no TIR or flow table"))
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
    let table = core
        .res
        .flow_tables
        .get(table_id)
        .ok_or(bad_res("no such flow table"))?;
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
    }
    super::flow_counter::hold(core, &counters);
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
            },
        );
    }
    Ok(())
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
    let table = core
        .res
        .flow_tables
        .get_mut(cmd.table_id())
        .ok_or(bad_res("no such flow table"))?;
    let entry = table
        .entries
        .remove(&cmd.flow_index())
        .ok_or(bad_res("no flow entry at that index"))?;
    release_dests(core, &entry.dests);
    super::flow_counter::release(core, &entry.counters);
    Ok(())
}

pub(crate) fn set_root(core: &mut Core, input: &[u8]) -> CmdResult {
    let cmd = input_as!(SetFlowTableRootIn<&[u8]>, input);
    check_table_type(cmd.table_type(), cmd.other_vport(), cmd.vport_number())?;
    let id = cmd.table_id();
    if !core.res.flow_tables.contains(id) {
        return Err(bad_res("root flow table does not exist"));
    }
    core.res.rx_root = Some(id);
    Ok(())
}
