//! Modify-header contexts: ALLOC_MODIFY_HEADER_CONTEXT and DEALLOC_MODIFY_HEADER_CONTEXT, as
//! mlx5_core's `mlx5_cmd_modify_header_alloc` sends them (for mlx5_ib's flow actions:
//! rdma-core's root-level `mlx5dv_dr_action_create_modify_header`). A context keeps its table
//! type and actions; the flow entries of that type that name it (`FLOW_CONTEXT_ACTION_MOD_HDR`,
//! `fw::flow_entry`) apply them (`crate::header_modify`). Every action is checked here: SET,
//! ADD or COPY on a field the model places, inside the field's bits.

use super::Syndrome;
use super::{bad_param, bad_res, bad_state, input_as, output_as, table_full, CmdResult, Core};
use crate::objects::limits::MAX_MODIFY_HEADER_ACTIONS;
use crate::objects::ModifyHeader;
use cxdirect_hw::flow::{FLOW_TABLE_TYPE_NIC_RX, FLOW_TABLE_TYPE_NIC_TX};
use cxdirect_hw::modify_header::{
    AllocModifyHeaderContextIn, AllocModifyHeaderContextOut, DeallocModifyHeaderContextIn,
    ACTIONS_BYTE, ACTION_SIZE,
};

pub(crate) fn alloc(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let cmd = input_as!(AllocModifyHeaderContextIn<&[u8]>, input);
    let table_type = cmd.table_type();
    if table_type != FLOW_TABLE_TYPE_NIC_RX && table_type != FLOW_TABLE_TYPE_NIC_TX {
        return Err(bad_param(
            Syndrome::BadSteeringParams,
            "modify-header contexts are modelled for NIC receive and transmit tables only",
        ));
    }
    let n = cmd.num_of_actions();
    if n == 0 || n > MAX_MODIFY_HEADER_ACTIONS {
        return Err(bad_param(
            Syndrome::BadSteeringParams,
            "num_of_actions must be 1..=max_modify_header_actions",
        ));
    }
    let bytes = input
        .get(ACTIONS_BYTE..ACTIONS_BYTE + usize::from(n) * ACTION_SIZE)
        .ok_or(bad_param(
            Syndrome::InputTooShort,
            "the input ends before num_of_actions actions",
        ))?;
    let mut actions = Vec::with_capacity(usize::from(n));
    for chunk in bytes.chunks_exact(ACTION_SIZE) {
        let mut raw = [0u8; ACTION_SIZE];
        raw.copy_from_slice(chunk);
        crate::header_modify::check(&raw).map_err(|_| {
            bad_param(
                Syndrome::BadSteeringParams,
                "a modify-header action is not SET, ADD or COPY on a field the model places, \
                 inside the field's bits",
            )
        })?;
        actions.push(raw);
    }
    let id = core
        .res
        .modify_headers
        .insert(ModifyHeader {
            table_type,
            actions,
            fte_users: 0,
        })
        .ok_or(table_full("modify-header contexts"))?;
    output_as!(AllocModifyHeaderContextOut<&mut [u8]>, output).set_modify_header_id(id);
    Ok(())
}

pub(crate) fn dealloc(core: &mut Core, input: &[u8]) -> CmdResult {
    let cmd = input_as!(DeallocModifyHeaderContextIn<&[u8]>, input);
    let id = cmd.modify_header_id();
    let context = core
        .res
        .modify_headers
        .get(id)
        .ok_or(bad_res("no such modify-header context"))?;
    if context.fte_users > 0 {
        return Err(bad_state(
            Syndrome::ObjectInUse,
            "modify-header context still named by a flow entry",
        ));
    }
    core.res.modify_headers.remove(id);
    Ok(())
}
