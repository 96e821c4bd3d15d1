//! NIC flow tables (receive unless a function's name ends in `_of`, which takes the table
//! type) as Linux's fs_core builds them through its commands
//! (`mlx5_cmd_create_flow_table`, `mlx5_cmd_modify_flow_table`, `mlx5_cmd_create_flow_group`,
//! `mlx5_cmd_delete_fte`, ...), for the tests of steering and what hangs off it.

use super::{CmdFail, Host};
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::flow;
use cxdirect_hw::vport::TrafficCounter;

/// `mlx5_cmd_create_flow_table`: level, log size, and the miss to the next chained table
/// when there is one (`table_miss_action` FWD, `table_miss_id`), else the namespace's default.
pub fn create_table(
    h: &mut Host,
    level: u8,
    log_size: u8,
    miss: Option<u32>,
) -> Result<u32, CmdFail> {
    create_table_of(h, flow::FLOW_TABLE_TYPE_NIC_RX, level, log_size, miss)
}

/// [`create_table`] of `table_type` (`FLOW_TABLE_TYPE_NIC_RX` or `_NIC_TX`).
pub fn create_table_of(
    h: &mut Host,
    table_type: u8,
    level: u8,
    log_size: u8,
    miss: Option<u32>,
) -> Result<u32, CmdFail> {
    let mut input = Host::input(Opcode::CreateFlowTable, 0, 0x40);
    {
        let mut cmd = flow::CreateFlowTableIn::new(&mut input[..]).unwrap();
        cmd.set_table_type(table_type);
        let mut ctx = cmd.flow_table_context_mut();
        ctx.set_level(level).set_log_size(log_size);
        if let Some(next) = miss {
            ctx.set_table_miss_action(flow::FLOW_TABLE_MISS_ACTION_FWD)
                .set_table_miss_id(next);
        }
    }
    let out = h.exec(&input, 16)?;
    Ok(flow::CreateFlowTableOut::new(&out[..]).unwrap().table_id())
}

/// `mlx5_cmd_modify_flow_table`: only the miss selected, FWD to `next` or the default.
pub fn modify_miss(h: &mut Host, table: u32, next: Option<u32>) -> Result<(), CmdFail> {
    let mut input = Host::input(Opcode::ModifyFlowTable, 0, 0x40);
    {
        let mut cmd = flow::ModifyFlowTableIn::new(&mut input[..]).unwrap();
        cmd.set_table_type(flow::FLOW_TABLE_TYPE_NIC_RX)
            .set_table_id(table)
            .set_modify_field_select(flow::MODIFY_FLOW_TABLE_MISS_TABLE_ID);
        let mut ctx = cmd.flow_table_context_mut();
        match next {
            Some(next) => {
                ctx.set_table_miss_action(flow::FLOW_TABLE_MISS_ACTION_FWD)
                    .set_table_miss_id(next);
            }
            None => {
                ctx.set_table_miss_action(flow::FLOW_TABLE_MISS_ACTION_DEFAULT);
            }
        }
    }
    h.exec(&input, 16).map(|_| ())
}

/// SET_FLOW_TABLE_ROOT: `table` becomes the NIC receive root.
pub fn set_root(h: &mut Host, table: u32) {
    set_root_of(h, flow::FLOW_TABLE_TYPE_NIC_RX, table).expect("SET_FLOW_TABLE_ROOT");
}

/// SET_FLOW_TABLE_ROOT of `table_type`: `table` becomes that direction's root.
pub fn set_root_of(h: &mut Host, table_type: u8, table: u32) -> Result<(), CmdFail> {
    let mut input = Host::input(Opcode::SetFlowTableRoot, 0, 0x40);
    flow::SetFlowTableRootIn::new(&mut input[..])
        .unwrap()
        .set_table_type(table_type)
        .set_table_id(table);
    h.exec(&input, 16).map(|_| ())
}

/// One catch-all group and entry in `table` forwarding to destination (`kind`, `id`) with
/// `flow_tag` (0: Linux's default tag), as fs_core's `mlx5_cmd_set_fte` writes it.
pub fn catch_all(h: &mut Host, table: u32, kind: u8, id: u32, flow_tag: u32) {
    let group = create_group(h, table, 0, 0, false);
    let mut input = Host::input(Opcode::SetFlowTableEntry, 0, 0x340 + 8);
    {
        let mut cmd = flow::SetFteIn::new(&mut input[..]).unwrap();
        cmd.set_table_type(flow::FLOW_TABLE_TYPE_NIC_RX)
            .set_table_id(table)
            .set_flow_index(0);
        let mut ctx = cmd.flow_context_all_mut();
        ctx.set_group_id(group)
            .set_action(flow::FLOW_CONTEXT_ACTION_FWD_DEST)
            .set_flow_tag(flow_tag)
            .set_destination_list_size(1);
        ctx.set_destination(0, flow::dest_format_entry(kind, id))
            .unwrap();
    }
    h.exec(&input, 16).expect("SET_FLOW_TABLE_ENTRY");
}

/// CREATE_FLOW_GROUP over `start..=end`, masking the destination MAC or (None) nothing.
pub fn create_group(h: &mut Host, table: u32, start: u32, end: u32, dmac: bool) -> u32 {
    let mut input = Host::input(Opcode::CreateFlowGroup, 0, 0x400);
    {
        let mut cmd = flow::CreateFlowGroupIn::new(&mut input[..]).unwrap();
        cmd.set_table_type(flow::FLOW_TABLE_TYPE_NIC_RX)
            .set_table_id(table)
            .set_start_flow_index(start)
            .set_end_flow_index(end);
        if dmac {
            cmd.set_match_criteria_enable(flow::MATCH_OUTER_HEADERS);
            cmd.match_criteria_mut()
                .outer_headers_mut()
                .set_dmac(0xffff_ffff_ffff);
        }
    }
    let out = h.exec(&input, 16).expect("CREATE_FLOW_GROUP");
    flow::CreateFlowGroupOut::new(&out[..]).unwrap().group_id()
}

/// DELETE_FLOW_TABLE_ENTRY of entry `index`.
pub fn delete_fte(h: &mut Host, table: u32, index: u32) {
    let mut input = Host::input(Opcode::DeleteFlowTableEntry, 0, 0x40);
    flow::DeleteFteIn::new(&mut input[..])
        .unwrap()
        .set_table_type(flow::FLOW_TABLE_TYPE_NIC_RX)
        .set_table_id(table)
        .set_flow_index(index);
    h.exec(&input, 16).expect("DELETE_FLOW_TABLE_ENTRY");
}

/// DESTROY_FLOW_GROUP.
pub fn destroy_group(h: &mut Host, table: u32, group: u32) {
    let mut input = Host::input(Opcode::DestroyFlowGroup, 0, 0x40);
    flow::DestroyFlowGroupIn::new(&mut input[..])
        .unwrap()
        .set_table_type(flow::FLOW_TABLE_TYPE_NIC_RX)
        .set_table_id(table)
        .set_group_id(group);
    h.exec(&input, 16).expect("DESTROY_FLOW_GROUP");
}

/// DESTROY_FLOW_TABLE.
pub fn destroy_table(h: &mut Host, table: u32) -> Result<(), CmdFail> {
    let mut input = Host::input(Opcode::DestroyFlowTable, 0, 0x40);
    flow::DestroyFlowTableIn::new(&mut input[..])
        .unwrap()
        .set_table_type(flow::FLOW_TABLE_TYPE_NIC_RX)
        .set_table_id(table);
    h.exec(&input, 16).map(|_| ())
}

/// CREATE_FLOW_GROUP in a table of `table_type` over `index..=index`, masking the source
/// MAC (or nothing).
pub fn smac_group(
    h: &mut Host,
    table_type: u8,
    table: u32,
    index: u32,
    smac: bool,
) -> Result<u32, CmdFail> {
    let enable = if smac { flow::MATCH_OUTER_HEADERS } else { 0 };
    group_matching(h, (table_type, table, index), enable, |c| {
        if smac {
            c.outer_headers_mut().set_smac(0xffff_ffff_ffff);
        }
    })
}

/// SET_FLOW_TABLE_ENTRY as `mlx5_cmd_set_fte` writes it: `action`, at most one destination,
/// at most one counter, the source MAC matched when given.
#[allow(clippy::too_many_arguments)]
pub fn set_entry(
    h: &mut Host,
    table_type: u8,
    table: u32,
    (group, index): (u32, u32),
    smac: Option<[u8; 6]>,
    action: u16,
    dest: Option<(u8, u32)>,
    counter: Option<u32>,
) -> Result<(), CmdFail> {
    let mut input = Host::input(Opcode::SetFlowTableEntry, 0, 0x340 + 16);
    {
        let mut cmd = flow::SetFteIn::new(&mut input[..]).unwrap();
        cmd.set_table_type(table_type)
            .set_table_id(table)
            .set_flow_index(index);
        let mut ctx = cmd.flow_context_all_mut();
        ctx.set_group_id(group).set_action(action);
        if let Some(mac) = smac {
            let mut b = [0u8; 8];
            b[2..].copy_from_slice(&mac);
            ctx.match_value_mut()
                .outer_headers_mut()
                .set_smac(u64::from_be_bytes(b));
        }
        let mut n = 0;
        if let Some((kind, id)) = dest {
            ctx.set_destination(n, flow::dest_format_entry(kind, id))
                .unwrap();
            n += 1;
            ctx.set_destination_list_size(1);
        }
        if let Some(id) = counter {
            ctx.set_destination(n, u64::from(id) << 32).unwrap();
            ctx.set_flow_counter_list_size(1);
        }
    }
    h.exec(&input, 16).map(|_| ())
}

/// `mlx5_cmd_fc_alloc`: one flow counter.
pub fn alloc_counter(h: &mut Host) -> u32 {
    let mut input = Host::input(
        Opcode::AllocFlowCounter,
        0,
        flow::AllocFlowCounterIn::<&[u8]>::SIZE,
    );
    flow::AllocFlowCounterIn::new(&mut input[..]).unwrap();
    let out = h
        .exec(&input, flow::AllocFlowCounterOut::<&[u8]>::SIZE)
        .expect("ALLOC_FLOW_COUNTER");
    flow::AllocFlowCounterOut::new(&out[..])
        .unwrap()
        .flow_counter_id()
}

/// QUERY_FLOW_COUNTER of one counter: (packets, octets).
pub fn query_counter(h: &mut Host, id: u32) -> (u64, u64) {
    let mut input = Host::input(Opcode::QueryFlowCounter, 0, 0x20);
    flow::QueryFlowCounterIn::new(&mut input[..])
        .unwrap()
        .set_flow_counter_id(id);
    let out = h.exec(&input, 0x20).expect("QUERY_FLOW_COUNTER");
    let at = flow::QUERY_FLOW_COUNTER_STATISTICS_BYTE;
    let c = TrafficCounter::new(&out[at..at + 0x10]).unwrap();
    (c.packets(), c.octets())
}

/// A root table of `table_type` whose one catch-all entry goes on to table `table`, as
/// mlx5_ib's rule for a DR "go to table" action on the root level does; made that direction's
/// root. Returns the root.
pub fn root_forwarding_to(h: &mut Host, table_type: u8, table: u32) -> u32 {
    let root = create_table_of(h, table_type, 0, 2, None).expect("CREATE_FLOW_TABLE");
    let g = smac_group(h, table_type, root, 0, false).expect("CREATE_FLOW_GROUP");
    let fwd = Some((flow::FLOW_DESTINATION_TYPE_FLOW_TABLE, table));
    set_entry(
        h,
        table_type,
        root,
        (g, 0),
        None,
        flow::FLOW_CONTEXT_ACTION_FWD_DEST,
        fwd,
        None,
    )
    .expect("SET_FLOW_TABLE_ENTRY");
    set_root_of(h, table_type, root).expect("SET_FLOW_TABLE_ROOT");
    root
}

/// CREATE_FLOW_GROUP over entry `index` of a table of `table_type`, its criteria enabled by
/// `enable` (`MATCH_*` bits) and written by `criteria`.
pub fn group_matching(
    h: &mut Host,
    (table_type, table, index): (u8, u32, u32),
    enable: u8,
    criteria: impl FnOnce(&mut flow::FteMatchParam<&mut [u8]>),
) -> Result<u32, CmdFail> {
    let mut input = Host::input(Opcode::CreateFlowGroup, 0, 0x400);
    {
        let mut cmd = flow::CreateFlowGroupIn::new(&mut input[..]).unwrap();
        cmd.set_table_type(table_type)
            .set_table_id(table)
            .set_start_flow_index(index)
            .set_end_flow_index(index)
            .set_match_criteria_enable(enable);
        criteria(&mut cmd.match_criteria_mut());
    }
    let out = h.exec(&input, 16)?;
    Ok(flow::CreateFlowGroupOut::new(&out[..]).unwrap().group_id())
}

/// SET_FLOW_TABLE_ENTRY of entry `index` in `group` of a table of `table_type`: `action`, no
/// destination, the match value written by `value`.
pub fn entry_matching(
    h: &mut Host,
    (table_type, table, index): (u8, u32, u32),
    group: u32,
    action: u16,
    value: impl FnOnce(&mut flow::FteMatchParam<&mut [u8]>),
) -> Result<(), CmdFail> {
    let mut input = Host::input(Opcode::SetFlowTableEntry, 0, 0x340);
    {
        let mut cmd = flow::SetFteIn::new(&mut input[..]).unwrap();
        cmd.set_table_type(table_type)
            .set_table_id(table)
            .set_flow_index(index);
        let mut ctx = cmd.flow_context_all_mut();
        ctx.set_group_id(group).set_action(action);
        value(&mut ctx.match_value_mut());
    }
    h.exec(&input, 16).map(|_| ())
}

/// A transmit root whose one entry drops the frames whose third misc set matches `value` under
/// `mask`.
pub fn misc3_drop_in_tx_root(
    h: &mut Host,
    mask: impl FnOnce(&mut flow::FteMatchSetMisc3<&mut [u8]>),
    value: impl FnOnce(&mut flow::FteMatchSetMisc3<&mut [u8]>),
) {
    let root = create_table_of(h, flow::FLOW_TABLE_TYPE_NIC_TX, 0, 2, None).unwrap();
    let at = (flow::FLOW_TABLE_TYPE_NIC_TX, root, 0);
    let group = group_matching(h, at, flow::MATCH_MISC_PARAMETERS_3, |c| {
        mask(&mut c.misc_parameters_3_mut())
    })
    .unwrap();
    entry_matching(h, at, group, flow::FLOW_CONTEXT_ACTION_DROP, |v| {
        value(&mut v.misc_parameters_3_mut())
    })
    .unwrap();
    set_root_of(h, flow::FLOW_TABLE_TYPE_NIC_TX, root).unwrap();
}
