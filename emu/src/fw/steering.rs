//! NIC flow steering, receive and transmit: flow tables, groups (a match mask over an index
//! range), entries (a match value and an action; [`super::flow_entry`]) and each direction's
//! root table: the commands that build them. Received frames are matched against the receive
//! tables in [`steering`](crate::steering), frames the SQs send against the transmit tables in
//! [`transmit_steering`](crate::transmit_steering).

use super::table_full;
use super::Syndrome;
use super::{bad_param, bad_res, bad_state, input_as, output_as, CmdError, CmdResult, Core};
use crate::objects::match_parts::MatchParts;
use crate::objects::{FlowGroup, FlowTable};
use cxdirect_hw::flow::{
    CreateFlowGroupIn, CreateFlowGroupOut, CreateFlowTableIn, CreateFlowTableOut,
    DestroyFlowGroupIn, DestroyFlowTableIn, ModifyFlowTableIn, QueryFlowTableIn, QueryFlowTableOut,
    SetFlowTableRootIn, FLOW_TABLE_MISS_ACTION_DEFAULT, FLOW_TABLE_MISS_ACTION_FWD,
    FLOW_TABLE_TYPE_NIC_RX, FLOW_TABLE_TYPE_NIC_TX, MODIFY_FLOW_TABLE_MISS_TABLE_ID,
};

use super::match_criteria::MATCH_PARAM_SIZE;
pub(crate) use crate::objects::limits::LOG_MAX_FT_SIZE;

/// The tables the model builds: NIC receive and NIC transmit, of the function's own vport.
pub(super) fn check_table_type(table_type: u8, other_vport: bool, vport: u16) -> CmdResult {
    if other_vport || vport != 0 {
        return Err(bad_param(
            Syndrome::BadVport,
            "only the function's own vport (0) is modelled",
        ));
    }
    if table_type != FLOW_TABLE_TYPE_NIC_RX && table_type != FLOW_TABLE_TYPE_NIC_TX {
        return Err(bad_param(
            Syndrome::BadSteeringParams,
            "only NIC receive (0) and NIC transmit (1) flow tables are modelled",
        ));
    }
    Ok(())
}

/// Flow table `id`, which the command names as of type `table_type`: table numbers are one
/// space, and a table of the other direction is no table of this one.
pub(super) fn table_of(core: &Core, id: u32, table_type: u8) -> Result<&FlowTable, CmdError> {
    core.res
        .flow_tables
        .get(id)
        .filter(|t| t.table_type == table_type)
        .ok_or(bad_res(
            "no flow table of that table_type has that table_id",
        ))
}

/// [`table_of`], to change it.
pub(super) fn table_of_mut(
    core: &mut Core,
    id: u32,
    table_type: u8,
) -> Result<&mut FlowTable, CmdError> {
    core.res
        .flow_tables
        .get_mut(id)
        .filter(|t| t.table_type == table_type)
        .ok_or(bad_res(
            "no flow table of that table_type has that table_id",
        ))
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
    let table_type = cmd.table_type();
    check_miss(core, table_type, ctx.level(), miss_action, miss_table)?;
    let sw_root = if ctx.sw_owner() {
        Some(check_sw_owner_root(
            core,
            table_type,
            ctx.sw_owner_icm_root_0(),
        )?)
    } else {
        None
    };
    let table = FlowTable {
        table_type,
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

/// The root of a software-owned table (rdma-core's `dr_devx_create_flow_table`: a NIC
/// receive or transmit table with `sw_owner` and its first entry's ICM address in
/// `sw_owner_icm_root_0`): offered only with `sw_owner_v2` in that direction's table
/// properties, and the address must be a whole 64-byte entry. Whether entries are there is
/// the walk's concern: software writes them before it points a rule at the table.
fn check_sw_owner_root(core: &Core, table_type: u8, root: u64) -> Result<u64, CmdError> {
    if !crate::sw_steering::tables_offered(core, table_type) {
        return Err(bad_param(
            Syndrome::BadSteeringParams,
            "software-owned (sw_owner) tables are not offered: this direction's sw_owner_v2 \
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
pub(super) fn check_firmware_owned(table: &FlowTable) -> CmdResult {
    if table.sw_root.is_some() {
        return Err(bad_param(
            Syndrome::BadSteeringParams,
            "a software-owned (sw_owner) table takes no flow groups or entries: software \
             writes its steering entries into ICM",
        ));
    }
    Ok(())
}

/// A table miss: the default, or forwarding to an existing table of the same type and a
/// deeper level than the table's own `level` (as entries may only forward deeper, so that a
/// frame's walk through the tables always ends).
fn check_miss(
    core: &Core,
    table_type: u8,
    level: u8,
    miss_action: u8,
    miss_table: u32,
) -> CmdResult {
    match miss_action {
        FLOW_TABLE_MISS_ACTION_DEFAULT => Ok(()),
        FLOW_TABLE_MISS_ACTION_FWD => match table_of(core, miss_table, table_type) {
            Ok(t) if t.level > level => Ok(()),
            Ok(_) => Err(bad_param(
                Syndrome::BadSteeringParams,
                "a table's miss may only forward to a deeper-level table",
            )),
            Err(_) => Err(bad_res(
                "table_miss_id names no flow table of the same type",
            )),
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
    let (id, table_type) = (cmd.table_id(), cmd.table_type());
    let level = table_of(core, id, table_type)?.level;
    let ctx = cmd.flow_table_context();
    let (miss_action, miss_table) = (ctx.table_miss_action(), ctx.table_miss_id());
    check_miss(core, table_type, level, miss_action, miss_table)?;
    let table = table_of_mut(core, id, table_type)?;
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
    let table = table_of(core, id, cmd.table_type())?;
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
    if !crate::sw_steering::tables_offered(core, FLOW_TABLE_TYPE_NIC_RX) {
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
    let table = table_of(core, id, cmd.table_type())?;
    if !table.groups.is_empty() || table.referenced > 0 {
        return Err(bad_state(
            Syndrome::ObjectInUse,
            "flow table still has groups or is forwarded to",
        ));
    }
    // Destroying the receive root leaves the port without receive steering (frames are
    // dropped); destroying the transmit root lets every frame out.
    if core.res.rx_root == Some(id) {
        core.res.rx_root = None;
    }
    if core.res.tx_root == Some(id) {
        core.res.tx_root = None;
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
    let table = table_of_mut(core, cmd.table_id(), cmd.table_type())?;
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
    let enable = cmd.match_criteria_enable();
    let receive = cmd.table_type() == FLOW_TABLE_TYPE_NIC_RX;
    super::match_criteria::check_modelled(&criteria, enable, receive)?;
    let integrity = super::match_criteria::selects_integrity(&criteria, enable);
    mask_disabled_parts(&mut criteria, enable);
    let group = FlowGroup::new(start, end, criteria);
    let mut parts = group.parts;
    if integrity {
        parts |= MatchParts::INTEGRITY;
    }
    table.groups.insert(group_id, group);
    core.res.next_group += 1;
    core.res.match_parts |= parts;
    output_as!(CreateFlowGroupOut<&mut [u8]>, output).set_group_id(group_id);
    Ok(())
}

/// Clears the parts of a match mask whose enable bit is off: they take no part in matching.
fn mask_disabled_parts(criteria: &mut [u8; MATCH_PARAM_SIZE], enable: u8) {
    // fte_match_param: outer headers 0x000, misc 0x040, inner headers 0x080, misc2 0x0c0,
    // misc3 0x100, the rest after.
    for (bit, range) in [
        (0u8, 0x00..0x40),
        (1, 0x40..0x80),
        (2, 0x80..0xc0),
        (3, 0xc0..0x100),
        (4, 0x100..0x140),
    ] {
        if enable & (1 << bit) == 0 {
            criteria[range].fill(0);
        }
    }
    criteria[0x140..].fill(0);
}

pub(crate) fn destroy_flow_group(core: &mut Core, input: &[u8]) -> CmdResult {
    let cmd = input_as!(DestroyFlowGroupIn<&[u8]>, input);
    check_table_type(cmd.table_type(), cmd.other_vport(), cmd.vport_number())?;
    let group_id = cmd.group_id();
    let table = table_of_mut(core, cmd.table_id(), cmd.table_type())?;
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

pub(crate) fn set_root(core: &mut Core, input: &[u8]) -> CmdResult {
    let cmd = input_as!(SetFlowTableRootIn<&[u8]>, input);
    check_table_type(cmd.table_type(), cmd.other_vport(), cmd.vport_number())?;
    let (id, table_type) = (cmd.table_id(), cmd.table_type());
    table_of(core, id, table_type)?;
    if table_type == FLOW_TABLE_TYPE_NIC_TX {
        core.res.tx_root = Some(id);
    } else {
        core.res.rx_root = Some(id);
    }
    Ok(())
}
