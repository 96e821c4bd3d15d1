//! NIC scheduling elements: the tree of transmit scheduling arbiters (TSARs) and queue
//! groups that send queues and QPs name, reached two ways.
//!
//! - rdma-core's libmlx5 (`providers/mlx5/mlx5.c`): `mlx5dv_sched_node_create` (a DWRR
//!   TSAR) and `mlx5dv_sched_leaf_create` (a queue group) send CREATE_GENERAL_OBJECT with
//!   object type 0x26 through DEVX (`mlx5dv_sched_nic_create`): the attribute flags in
//!   `modify_field_select`, hierarchy NIC, the element type, the parent's object id (0 for a
//!   root), `bw_share` and `max_average_bw` when flagged, and `tsar_type` DWRR for both
//!   kinds. `mlx5dv_sched_node_modify` / `_leaf_modify` send MODIFY_GENERAL_OBJECT with the
//!   same body (`mlx5dv_sched_nic_modify`, no parent); destroy is DESTROY_GENERAL_OBJECT,
//!   which mlx5_ib builds from the create command (`devx_obj_build_destroy_cmd`).
//! - Linux's mlx5_core (`qos.c`, for mlx5e's HTB offload and mqprio rate limits):
//!   CREATE / MODIFY / DESTROY_SCHEDULING_ELEMENT (0x782-0x784) with hierarchy NIC
//!   (`mlx5_qos_create_root_node`: a DWRR TSAR under parent 0; `_inner_node`: a DWRR TSAR;
//!   `_leaf_node`: a queue group; `mlx5_qos_update_node`: `bw_share` and `max_average_bw`
//!   with both modify bits).
//!
//! Both share one id space. A TSAR hangs from parent 0 (a root) or from a TSAR; a queue
//! group hangs from a TSAR. An element with children, or a queue group a send queue or QP
//! still names, cannot be destroyed. Ownership follows `fw::devx`: a user context modifies,
//! queries and destroys only its own elements; naming a parent or a queue group is not
//! checked against the uid.

use super::{bad_param, bad_res, bad_state, input_as, output_as, table_full, CmdError, CmdResult};
use super::{Core, Syndrome};
use crate::objects::scheduling::{Element, ElementKind, LOG_MAX_QUEUE_GROUPS};
use cxdirect_hw::cmd::{CmdStatus, Opcode};
use cxdirect_hw::general_obj::{GeneralObjInCmdHdr, GeneralObjOutCmdHdr};
use cxdirect_hw::layout::Layout;
use cxdirect_hw::qos::{
    element_type, hierarchy, sched_modify, tsar_type, CreateSchedulingElementIn,
    CreateSchedulingElementOut, DestroySchedulingElementIn, ModifySchedulingElementIn,
    QuerySchedulingElementIn, QuerySchedulingElementOut, SchedElemObjIn, SchedElemObjOut,
    SchedulingContext,
};
use cxdirect_hw::qp::{qpc_opt_mask_32, Init2initQpIn, QpcExt, Rts2rtsQpIn, RTS2RTS_QPC_EXT_BYTE};

/// What a create asks for, read from either command's context.
struct NewElement {
    kind: ElementKind,
    parent: u32,
    bw_share: u32,
    max_average_bw: u32,
}

fn check_hierarchy(value: u8) -> CmdResult {
    if value != hierarchy::NIC {
        return Err(bad_param(
            Syndrome::SchedHierarchy,
            "scheduling hierarchy other than the NIC's (the QoS page offers no e-switch \
             scheduling)",
        ));
    }
    Ok(())
}

/// The element a context describes: a DWRR TSAR or a queue group (what `nic_element_type`
/// and `nic_tsar_type` offer). libmlx5 writes `tsar_type` DWRR (0) for a queue group too.
fn read_new(ctx: &SchedulingContext<&[u8]>) -> Result<NewElement, CmdError> {
    let kind = match ctx.element_type() {
        element_type::TSAR if ctx.tsar_type() == tsar_type::DWRR => ElementKind::Tsar,
        element_type::QUEUE_GROUP => ElementKind::QueueGroup,
        _ => {
            return Err(bad_param(
                Syndrome::SchedElementType,
                "scheduling element type or TSAR type not offered",
            ))
        }
    };
    Ok(NewElement {
        kind,
        parent: ctx.parent_element_id(),
        bw_share: ctx.bw_share(),
        max_average_bw: ctx.max_average_bw(),
    })
}

/// Adds an element after checking its place in the tree; returns its id.
fn create(core: &mut Core, uid: u16, new: NewElement, field_select: u64) -> Result<u32, CmdError> {
    match (new.kind, new.parent) {
        (ElementKind::QueueGroup, 0) => {
            return Err(bad_param(
                Syndrome::SchedBadParent,
                "a queue group needs a TSAR as its parent",
            ))
        }
        (ElementKind::Tsar, 0) => {}
        (_, parent) => match core.res.sched.get(parent) {
            Some(p) if p.kind == ElementKind::Tsar => {}
            Some(_) => {
                return Err(bad_param(
                    Syndrome::SchedBadParent,
                    "scheduling element's parent is a queue group",
                ))
            }
            None => return Err(bad_res("scheduling element's parent does not exist")),
        },
    }
    if new.kind == ElementKind::QueueGroup
        && core.res.sched.queue_groups() >= 1 << LOG_MAX_QUEUE_GROUPS
    {
        return Err(table_full("queue groups past log_max_qos_nic_queue_group"));
    }
    core.res
        .sched
        .insert(Element {
            kind: new.kind,
            parent: new.parent,
            bw_share: new.bw_share,
            max_average_bw: new.max_average_bw,
            field_select,
            uid,
            pacer: Default::default(),
            share: Default::default(),
        })
        .ok_or(table_full("scheduling element table full"))
}

/// The element `id` as a command under `uid` may touch it.
fn owned(core: &Core, uid: u16, id: u32) -> Result<&Element, CmdError> {
    let element = core
        .res
        .sched
        .get(id)
        .ok_or(bad_res("no such scheduling element"))?;
    if !super::devx::may_touch(element.uid, uid) {
        return Err(CmdError::new(
            CmdStatus::BadParameter,
            Syndrome::UidMismatch,
            "scheduling element belongs to another user context",
        ));
    }
    Ok(element)
}

/// Applies the fields `select` names (see [`sched_modify`]); any other bit is refused.
fn modify(
    core: &mut Core,
    uid: u16,
    id: u32,
    select: u64,
    ctx: &SchedulingContext<&[u8]>,
) -> CmdResult {
    owned(core, uid, id)?;
    let known = u64::from(sched_modify::BW_SHARE | sched_modify::MAX_AVERAGE_BW);
    if select & !known != 0 {
        return Err(bad_param(
            Syndrome::SchedModifyField,
            "scheduling element MODIFY names a field other than bw_share or max_average_bw",
        ));
    }
    let element = core
        .res
        .sched
        .get_mut(id)
        .ok_or(bad_res("no such scheduling element"))?;
    if select & u64::from(sched_modify::BW_SHARE) != 0 {
        element.bw_share = ctx.bw_share();
    }
    if select & u64::from(sched_modify::MAX_AVERAGE_BW) != 0 {
        element.max_average_bw = ctx.max_average_bw();
        element.pacer.reset();
    }
    Ok(())
}

/// Removes element `id`: refused while an element hangs from it or a queue names it.
fn destroy(core: &mut Core, uid: u16, id: u32) -> CmdResult {
    owned(core, uid, id)?;
    if core.res.sched.has_children(id) {
        return Err(bad_state(
            Syndrome::ObjectInUse,
            "scheduling element still has children",
        ));
    }
    if core.res.sched.has_queues(id) {
        return Err(bad_state(
            Syndrome::ObjectInUse,
            "queue group still named by a send queue or QP",
        ));
    }
    core.res.sched.remove(id);
    Ok(())
}

/// Writes element `id` into a context.
fn fill(element: &Element, ctx: &mut SchedulingContext<&mut [u8]>) {
    let kind = match element.kind {
        ElementKind::Tsar => element_type::TSAR,
        ElementKind::QueueGroup => element_type::QUEUE_GROUP,
    };
    ctx.set_element_type(kind)
        .set_tsar_type(tsar_type::DWRR)
        .set_parent_element_id(element.parent)
        .set_bw_share(element.bw_share)
        .set_max_average_bw(element.max_average_bw);
}

/// CREATE_SCHEDULING_ELEMENT (mlx5_core's `mlx5_create_scheduling_element_cmd`).
pub(crate) fn create_scheduling_element(
    core: &mut Core,
    input: &[u8],
    output: &mut [u8],
) -> CmdResult {
    let cmd = input_as!(CreateSchedulingElementIn<&[u8]>, input);
    check_hierarchy(cmd.scheduling_hierarchy())?;
    let new = read_new(&cmd.scheduling_context())?;
    let id = create(core, cmd.uid(), new, 0)?;
    output_as!(CreateSchedulingElementOut<&mut [u8]>, output).set_scheduling_element_id(id);
    Ok(())
}

/// MODIFY_SCHEDULING_ELEMENT (`mlx5_modify_scheduling_element_cmd`): the fields
/// `modify_bitmask` names; the element type is not sent (mlx5_core's `mlx5_qos_update_node`
/// leaves it 0).
pub(crate) fn modify_scheduling_element(core: &mut Core, input: &[u8]) -> CmdResult {
    let cmd = input_as!(ModifySchedulingElementIn<&[u8]>, input);
    check_hierarchy(cmd.scheduling_hierarchy())?;
    let select = u64::from(cmd.modify_bitmask());
    modify(
        core,
        cmd.uid(),
        cmd.scheduling_element_id(),
        select,
        &cmd.scheduling_context(),
    )
}

/// QUERY_SCHEDULING_ELEMENT: the element as it stands.
pub(crate) fn query_scheduling_element(
    core: &mut Core,
    input: &[u8],
    output: &mut [u8],
) -> CmdResult {
    let cmd = input_as!(QuerySchedulingElementIn<&[u8]>, input);
    check_hierarchy(cmd.scheduling_hierarchy())?;
    let element = *owned(core, cmd.uid(), cmd.scheduling_element_id())?;
    let mut out = output_as!(QuerySchedulingElementOut<&mut [u8]>, output);
    fill(&element, &mut out.scheduling_context_mut());
    Ok(())
}

/// DESTROY_SCHEDULING_ELEMENT (`mlx5_destroy_scheduling_element_cmd`).
pub(crate) fn destroy_scheduling_element(core: &mut Core, input: &[u8]) -> CmdResult {
    let cmd = input_as!(DestroySchedulingElementIn<&[u8]>, input);
    check_hierarchy(cmd.scheduling_hierarchy())?;
    destroy(core, cmd.uid(), cmd.scheduling_element_id())
}

/// CREATE_GENERAL_OBJECT of a scheduling element (`mlx5dv_sched_nic_create`), as
/// [`super::general_object`] dispatches it by type.
pub(crate) fn create_general_object(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let cmd = input_as!(SchedElemObjIn<&[u8]>, input);
    check_hierarchy(cmd.scheduling_hierarchy())?;
    let new = read_new(&cmd.sched_context())?;
    let id = create(core, cmd.uid(), new, cmd.modify_field_select())?;
    output_as!(GeneralObjOutCmdHdr<&mut [u8]>, output).set_obj_id(id);
    Ok(())
}

/// MODIFY_GENERAL_OBJECT of a scheduling element (`mlx5dv_sched_nic_modify`): the fields
/// `modify_field_select` names. libmlx5 sends the element's type (TSAR for a node, queue
/// group for a leaf); another type is refused.
pub(crate) fn modify_general_object(core: &mut Core, input: &[u8]) -> CmdResult {
    let cmd = input_as!(SchedElemObjIn<&[u8]>, input);
    check_hierarchy(cmd.scheduling_hierarchy())?;
    let id = cmd.obj_id();
    let ctx = cmd.sched_context();
    let element = *owned(core, cmd.uid(), id)?;
    let named = read_new(&ctx)?;
    if named.kind != element.kind {
        return Err(bad_param(
            Syndrome::SchedElementType,
            "MODIFY names another element type than the element's",
        ));
    }
    let select = cmd.modify_field_select();
    modify(core, cmd.uid(), id, select, &ctx)?;
    if let Some(element) = core.res.sched.get_mut(id) {
        element.field_select = select;
    }
    Ok(())
}

/// QUERY_GENERAL_OBJECT of a scheduling element: the element as it stands.
pub(crate) fn query_general_object(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let cmd = input_as!(GeneralObjInCmdHdr<&[u8]>, input);
    let id = cmd.obj_id();
    let element = *owned(core, cmd.uid(), id)?;
    let mut out = output_as!(SchedElemObjOut<&mut [u8]>, output);
    out.set_obj_id(id)
        .set_modify_field_select(element.field_select)
        .set_scheduling_hierarchy(hierarchy::NIC);
    fill(&element, &mut out.sched_context_mut());
    Ok(())
}

/// DESTROY_GENERAL_OBJECT of a scheduling element.
pub(crate) fn destroy_general_object(core: &mut Core, input: &[u8]) -> CmdResult {
    let cmd = input_as!(GeneralObjInCmdHdr<&[u8]>, input);
    destroy(core, cmd.uid(), cmd.obj_id())
}

/// The queue groups INIT2INIT_QP or RTS2RTS_QP gives a QP in its context extension
/// (`qpc_ext`, `MLX5_QPC_OPT_MASK_32_QOS_QUEUE_GROUP_ID` in `opt_param_mask_95_32`, the
/// groups in `qos_queue_group_id_requester` / `_responder`), as libmlx5's
/// `modify_ib_qp_sched_elem_init` / `_rts` send them for `mlx5dv_modify_qp_sched_elem`
/// (0 detaches a side). `None` when the command gives none; each given group must be a queue
/// group (naming one is not checked against the uid).
pub(crate) fn qp_queue_groups(
    core: &Core,
    opcode: Opcode,
    input: &[u8],
) -> Result<Option<(u32, u32)>, CmdError> {
    let (ext, mask) = match opcode {
        Opcode::Init2initQp => {
            let cmd = input_as!(Init2initQpIn<&[u8]>, input);
            (cmd.qpc_ext(), cmd.opt_param_mask_95_32())
        }
        Opcode::Rts2rtsQp => {
            let cmd = input_as!(Rts2rtsQpIn<&[u8]>, input);
            (cmd.qpc_ext(), cmd.opt_param_mask_95_32())
        }
        _ => return Ok(None),
    };
    if mask & qpc_opt_mask_32::QOS_QUEUE_GROUP_ID == 0 {
        return Ok(None);
    }
    let bytes = input
        .get(RTS2RTS_QPC_EXT_BYTE..RTS2RTS_QPC_EXT_BYTE + <QpcExt as Layout>::SIZE)
        .filter(|_| ext)
        .ok_or(bad_param(
            Syndrome::BadQpParams,
            "queue groups without the QP context extension",
        ))?;
    let ext =
        QpcExt::new(bytes).map_err(|_| bad_param(Syndrome::BadQpParams, "QP context extension"))?;
    let requester = ext.qos_queue_group_id_requester();
    let responder = ext.qos_queue_group_id_responder();
    check_queue_group(core, requester)?;
    check_queue_group(core, responder)?;
    Ok(Some((requester, responder)))
}

/// A queue naming group `id` (0: none): it must be a queue group of the NIC hierarchy.
pub(crate) fn check_queue_group(core: &Core, id: u32) -> CmdResult {
    if id != 0 && !core.res.sched.is_queue_group(id) {
        return Err(bad_param(
            Syndrome::NoSuchQueueGroup,
            "queue names no queue group",
        ));
    }
    Ok(())
}
