//! NIC scheduling elements on the model, as rdma-core and Linux 6.12 drive them.
//!
//! - libmlx5 (`providers/mlx5/mlx5.c`): `get_qos_caps` reads the QoS page;
//!   `mlx5dv_sched_node_create` / `_leaf_create` send CREATE_GENERAL_OBJECT of type 0x26
//!   (`mlx5dv_sched_nic_create`), `_modify` MODIFY_GENERAL_OBJECT (`mlx5dv_sched_nic_modify`);
//!   `mlx5dv_modify_qp_sched_elem` sends INIT2INIT_QP / RTS2RTS_QP with the QP context
//!   extension for RC, UC and UD QPs (`modify_ib_qp_sched_elem_init` / `_rts`) and MODIFY_SQ
//!   with the queue group bit for raw packet QPs (`modify_raw_qp_sched_elem`). rdma-core's
//!   `tests/test_mlx5_sched.py` builds a tree (`test_create_sched_tree`) and attaches an RC QP
//!   to a leaf before traffic (`test_sched_per_qp_traffic`).
//! - mlx5_core (`qos.c`, mlx5e's HTB offload): CREATE / MODIFY / DESTROY_SCHEDULING_ELEMENT
//!   with hierarchy NIC, and SQs opened in a queue group (`qos_queue_group_id`).

use cxdirect_emu::testkit::rc::{rc_wqe, RcPath, RemoteRights, GID_B, MAC_B};
use cxdirect_emu::testkit::rc_pair::RcPair;
use cxdirect_emu::testkit::ud::{ud_wqe, UdAv, UdPair, UD_QKEY};
use cxdirect_emu::testkit::{refused, CmdFail, Cq, Host};
use cxdirect_emu::{EmuConfig, Syndrome};
use cxdirect_hw::caps::CmdHcaCap;
use cxdirect_hw::cmd::{CmdStatus, Opcode};
use cxdirect_hw::general_obj::{GeneralObjInCmdHdr, GeneralObjOutCmdHdr};
use cxdirect_hw::hca::cap_type;
use cxdirect_hw::qos::{
    element_type, element_type_cap, hierarchy, sched_modify, tsar_type, tsar_type_cap,
    CreateSchedulingElementIn, CreateSchedulingElementOut, DestroySchedulingElementIn,
    ModifySchedulingElementIn, QosCap, QuerySchedulingElementIn, QuerySchedulingElementOut,
    SchedElemObjIn, SchedElemObjOut, OBJ_TYPE_SCHEDULING_ELEMENT,
};
use cxdirect_hw::qp::{qpc_opt_mask_32, Init2initQpIn, QpcExt, Rts2rtsQpIn, RTS2RTS_QPC_EXT_BYTE};
use cxdirect_hw::wq::{DestroySqIn, ModifySqIn, MODIFY_SQ_BITMASK_QOS_QUEUE_GROUP_ID};
use cxdirect_hw::wqe::opcode;

const MEM: usize = 8 << 20;
/// libmlx5's `MLX5DV_SCHED_ELEM_ATTR_FLAGS_BW_SHARE` / `_MAX_AVG_BW`.
const BW_SHARE: u64 = sched_modify::BW_SHARE as u64;
const MAX_AVG_BW: u64 = sched_modify::MAX_AVERAGE_BW as u64;
const SIZE_IN: usize = SchedElemObjIn::<&[u8]>::SIZE;

fn host() -> Host {
    Host::roce_loopback(MEM)
}

/// What a libmlx5 `struct mlx5dv_sched_attr` carries, less the parent's object.
#[derive(Clone, Copy, Default)]
struct Attr {
    parent: u32,
    flags: u64,
    bw_share: u32,
    max_avg_bw: u32,
}

/// The general object body as `mlx5dv_sched_nic_create` / `_modify` fill it: the flags in
/// `modify_field_select`, hierarchy NIC, the element type, the parent (create only), the
/// flagged values, and `tsar_type` DWRR whatever the type.
fn sched_input(opcode: Opcode, uid: u16, id: u32, kind: u8, attr: Attr) -> Vec<u8> {
    let mut input = Host::input(opcode, 0, SIZE_IN);
    let mut cmd = SchedElemObjIn::new(&mut input[..]).expect("layout");
    cmd.set_uid(uid)
        .set_obj_type(OBJ_TYPE_SCHEDULING_ELEMENT)
        .set_obj_id(id)
        .set_modify_field_select(attr.flags)
        .set_scheduling_hierarchy(hierarchy::NIC);
    let mut ctx = cmd.sched_context_mut();
    ctx.set_element_type(kind).set_tsar_type(tsar_type::DWRR);
    if opcode == Opcode::CreateGeneralObject {
        ctx.set_parent_element_id(attr.parent);
    }
    if attr.flags & BW_SHARE != 0 {
        ctx.set_bw_share(attr.bw_share);
    }
    if attr.flags & MAX_AVG_BW != 0 {
        ctx.set_max_average_bw(attr.max_avg_bw);
    }
    input
}

fn create(h: &mut Host, uid: u16, kind: u8, attr: Attr) -> Result<u32, CmdFail> {
    let input = sched_input(Opcode::CreateGeneralObject, uid, 0, kind, attr);
    let out = h.exec(&input, 0x10)?;
    Ok(GeneralObjOutCmdHdr::new(&out[..]).expect("layout").obj_id())
}

/// `mlx5dv_sched_node_create`: a DWRR TSAR.
fn node(h: &mut Host, uid: u16, attr: Attr) -> Result<u32, CmdFail> {
    create(h, uid, element_type::TSAR, attr)
}

/// `mlx5dv_sched_leaf_create`: a queue group.
fn leaf(h: &mut Host, uid: u16, attr: Attr) -> Result<u32, CmdFail> {
    create(h, uid, element_type::QUEUE_GROUP, attr)
}

fn modify(h: &mut Host, uid: u16, id: u32, kind: u8, attr: Attr) -> Result<(), CmdFail> {
    let input = sched_input(Opcode::ModifyGeneralObject, uid, id, kind, attr);
    h.exec(&input, 0x10).map(|_| ())
}

fn header(opcode: Opcode, uid: u16, id: u32, obj_type: u16) -> Vec<u8> {
    let mut input = Host::input(opcode, 0, 0x10);
    GeneralObjInCmdHdr::new(&mut input[..])
        .expect("layout")
        .set_uid(uid)
        .set_obj_type(obj_type)
        .set_obj_id(id);
    input
}

/// QUERY_GENERAL_OBJECT: (element type, parent, bw_share, max_average_bw, field select).
fn query(h: &mut Host, uid: u16, id: u32) -> Result<(u8, u32, u32, u32, u64), CmdFail> {
    let input = header(
        Opcode::QueryGeneralObject,
        uid,
        id,
        OBJ_TYPE_SCHEDULING_ELEMENT,
    );
    let out = h.exec(&input, SchedElemObjOut::<&[u8]>::SIZE)?;
    let out = SchedElemObjOut::new(&out[..]).expect("layout");
    assert_eq!(out.obj_id(), id);
    assert_eq!(out.scheduling_hierarchy(), hierarchy::NIC);
    let ctx = out.sched_context();
    Ok((
        ctx.element_type(),
        ctx.parent_element_id(),
        ctx.bw_share(),
        ctx.max_average_bw(),
        out.modify_field_select(),
    ))
}

/// DESTROY_GENERAL_OBJECT as mlx5_ib's `devx_obj_build_destroy_cmd` builds it.
fn destroy(h: &mut Host, uid: u16, id: u32) -> Result<(), CmdFail> {
    let input = header(
        Opcode::DestroyGeneralObject,
        uid,
        id,
        OBJ_TYPE_SCHEDULING_ELEMENT,
    );
    h.exec(&input, 0x10).map(|_| ())
}

fn in_use<T: std::fmt::Debug>(result: Result<T, CmdFail>) {
    refused(result, CmdStatus::BadResourceState, Syndrome::ObjectInUse);
}

/// `sched_supported` needs general `qos`, `nic_element_type` with TSAR and queue group and
/// `nic_tsar_type` with DWRR; `attr_supported` needs `nic_bw_share` and `nic_rate_limit`
/// (read only when `nic_sq_scheduling` is set); `_mlx5dv_modify_qp_sched_elem` needs
/// `qpc_extension` and `nic_qp_scheduling` for RC. mlx5_core's `mlx5_qos_is_supported` holds
/// with the same bits, and `mlx5_qos_max_leaf_nodes` reads the queue group count.
#[test]
fn qos_page_offers_nic_scheduling_as_get_qos_caps_reads_it() {
    let mut h = host();
    let general = h.query_cap(cap_type::GENERAL_DEVICE, true);
    let general = CmdHcaCap::new(&general[0x10..]).expect("layout");
    assert!(general.qos() && general.qpc_extension());
    for current in [true, false] {
        let out = h.query_cap(cap_type::QOS, current);
        let qos = QosCap::new(&out[0x10..]).expect("layout");
        assert!(qos.nic_sq_scheduling() && qos.nic_bw_share() && qos.nic_rate_limit());
        assert!(qos.nic_qp_scheduling());
        let types = element_type_cap::TSAR | element_type_cap::QUEUE_GROUP;
        assert_eq!(qos.nic_element_type() & types, types);
        assert_ne!(qos.nic_tsar_type() & tsar_type_cap::DWRR, 0);
        assert_eq!(qos.log_max_qos_nic_queue_group(), 8);
        assert!(!qos.esw_scheduling(), "no e-switch scheduling");
    }
    h.teardown();
}

/// `test_create_sched_tree` under a DEVX context: a root node (no parent, no flags), nodes
/// with a rate limit, a share, and both; a node modified; a leaf under it, modified. QUERY
/// returns what was set; children go before their parents.
#[test]
fn a_sched_tree_as_test_create_sched_tree_builds_it() {
    let mut h = host();
    let uid = h.create_uctx(0).expect("CREATE_UCTX");
    let root = node(&mut h, uid, Attr::default()).expect("root node");
    let max_bw = node(
        &mut h,
        uid,
        Attr {
            parent: root,
            flags: MAX_AVG_BW,
            max_avg_bw: 10,
            ..Attr::default()
        },
    )
    .expect("max_avg_bw node");
    let weighed = node(
        &mut h,
        uid,
        Attr {
            parent: root,
            flags: BW_SHARE,
            bw_share: 10,
            ..Attr::default()
        },
    )
    .expect("bw_share node");
    let both = BW_SHARE | MAX_AVG_BW;
    let mixed = node(
        &mut h,
        uid,
        Attr {
            parent: root,
            flags: both,
            bw_share: 2,
            max_avg_bw: 10,
        },
    )
    .expect("mixed node");
    assert_eq!(
        query(&mut h, uid, max_bw).expect("query"),
        (element_type::TSAR, root, 0, 10, MAX_AVG_BW)
    );
    assert_eq!(
        query(&mut h, uid, weighed).expect("query"),
        (element_type::TSAR, root, 10, 0, BW_SHARE)
    );
    let change = Attr {
        parent: root,
        flags: both,
        bw_share: 1,
        max_avg_bw: 4,
    };
    modify(&mut h, uid, mixed, element_type::TSAR, change).expect("modify node");
    assert_eq!(
        query(&mut h, uid, mixed).expect("query"),
        (element_type::TSAR, root, 1, 4, both)
    );
    let l = leaf(
        &mut h,
        uid,
        Attr {
            parent: mixed,
            ..Attr::default()
        },
    )
    .expect("leaf");
    let change = Attr {
        parent: mixed,
        flags: both,
        bw_share: 3,
        max_avg_bw: 3,
    };
    modify(&mut h, uid, l, element_type::QUEUE_GROUP, change).expect("modify leaf");
    assert_eq!(
        query(&mut h, uid, l).expect("query"),
        (element_type::QUEUE_GROUP, mixed, 3, 3, both)
    );
    // A modify with one flag leaves the other value alone.
    let share_only = Attr {
        parent: mixed,
        flags: BW_SHARE,
        bw_share: 7,
        ..Attr::default()
    };
    modify(&mut h, uid, l, element_type::QUEUE_GROUP, share_only).expect("modify share");
    let (_, _, share, rate, _) = query(&mut h, uid, l).expect("query");
    assert_eq!((share, rate), (7, 3));
    in_use(destroy(&mut h, uid, mixed));
    in_use(destroy(&mut h, uid, root));
    for id in [l, mixed, weighed, max_bw, root] {
        destroy(&mut h, uid, id).expect("destroy, children first");
    }
    refused(
        query(&mut h, uid, root),
        CmdStatus::BadResource,
        Syndrome::NoSuchObject,
    );
    h.destroy_uctx(uid).expect("DESTROY_UCTX");
    h.teardown();
}

/// The tree's rules: a queue group hangs from a TSAR, a parent exists and is a TSAR, only the
/// NIC hierarchy, DWRR TSARs and the two offered element types; a MODIFY names the element's
/// own type and only the share and the rate; other general object types are not offered.
#[test]
fn a_bad_tree_or_a_foreign_field_is_refused() {
    let mut h = host();
    let root = node(&mut h, 0, Attr::default()).expect("root");
    let under = |parent| Attr {
        parent,
        ..Attr::default()
    };
    let group = leaf(&mut h, 0, under(root)).expect("leaf");
    refused(
        leaf(&mut h, 0, Attr::default()),
        CmdStatus::BadParameter,
        Syndrome::SchedBadParent,
    );
    refused(
        node(&mut h, 0, under(group)),
        CmdStatus::BadParameter,
        Syndrome::SchedBadParent,
    );
    refused(
        leaf(&mut h, 0, under(group)),
        CmdStatus::BadParameter,
        Syndrome::SchedBadParent,
    );
    refused(
        node(&mut h, 0, under(0xbeef)),
        CmdStatus::BadResource,
        Syndrome::NoSuchObject,
    );
    // The e-switch hierarchy, an ETS TSAR and a vport element are not offered.
    let mut esw = sched_input(Opcode::CreateGeneralObject, 0, 0, 0, under(root));
    SchedElemObjIn::new(&mut esw[..])
        .expect("layout")
        .set_scheduling_hierarchy(hierarchy::E_SWITCH);
    refused(
        h.exec(&esw, 0x10),
        CmdStatus::BadParameter,
        Syndrome::SchedHierarchy,
    );
    let mut ets = sched_input(Opcode::CreateGeneralObject, 0, 0, 0, under(root));
    SchedElemObjIn::new(&mut ets[..])
        .expect("layout")
        .sched_context_mut()
        .set_tsar_type(2);
    refused(
        h.exec(&ets, 0x10),
        CmdStatus::BadParameter,
        Syndrome::SchedElementType,
    );
    refused(
        create(&mut h, 0, 1, under(root)),
        CmdStatus::BadParameter,
        Syndrome::SchedElementType,
    );
    refused(
        modify(&mut h, 0, group, element_type::TSAR, under(root)),
        CmdStatus::BadParameter,
        Syndrome::SchedElementType,
    );
    let parent_change = Attr {
        parent: root,
        flags: 1 << 2,
        ..Attr::default()
    };
    refused(
        modify(&mut h, 0, group, element_type::QUEUE_GROUP, parent_change),
        CmdStatus::BadParameter,
        Syndrome::SchedModifyField,
    );
    refused(
        h.exec(&header(Opcode::CreateGeneralObject, 0, 0, 0x27), 0x10),
        CmdStatus::BadParameter,
        Syndrome::UnknownObjType,
    );
    destroy(&mut h, 0, group).expect("leaf");
    destroy(&mut h, 0, root).expect("root");
    h.teardown();
}

/// DEVX ownership: another context may not modify, query or destroy a context's element (it
/// may name it as a parent); the driver may; a closed context's elements pass to the driver.
#[test]
fn an_element_belongs_to_its_user_context() {
    let mut h = host();
    let a = h.create_uctx(0).expect("CREATE_UCTX a");
    let b = h.create_uctx(0).expect("CREATE_UCTX b");
    let root = node(&mut h, a, Attr::default()).expect("a's root");
    let mismatch = |r| refused(r, CmdStatus::BadParameter, Syndrome::UidMismatch);
    mismatch(query(&mut h, b, root).map(|_| ()));
    mismatch(modify(&mut h, b, root, element_type::TSAR, Attr::default()));
    mismatch(destroy(&mut h, b, root));
    query(&mut h, 0, root).expect("the driver queries any element");
    refused(
        node(&mut h, 0x1234, Attr::default()),
        CmdStatus::BadParameter,
        Syndrome::UnknownUid,
    );
    h.destroy_uctx(a).expect("DESTROY_UCTX a");
    mismatch(destroy(&mut h, b, root));
    destroy(&mut h, 0, root).expect("the driver destroys it");
    h.destroy_uctx(b).expect("DESTROY_UCTX b");
    h.teardown();
}

fn sched_cmd(opcode: Opcode, size: usize, fill: impl FnOnce(&mut [u8])) -> Vec<u8> {
    let mut input = Host::input(opcode, 0, size);
    fill(&mut input[..]);
    input
}

/// mlx5_core's `mlx5_create_scheduling_element_cmd` for a NIC element: (element type,
/// parent, bw_share, max_average_bw), `tsar_type` DWRR for a TSAR.
fn create_se(h: &mut Host, kind: u8, parent: u32, share: u32, rate: u32) -> Result<u32, CmdFail> {
    let input = sched_cmd(Opcode::CreateSchedulingElement, 0x80, |b| {
        let mut cmd = CreateSchedulingElementIn::new(b).expect("layout");
        cmd.set_scheduling_hierarchy(hierarchy::NIC);
        let mut ctx = cmd.scheduling_context_mut();
        ctx.set_element_type(kind)
            .set_parent_element_id(parent)
            .set_bw_share(share)
            .set_max_average_bw(rate);
    });
    let out = h.exec(&input, 0x40)?;
    Ok(CreateSchedulingElementOut::new(&out[..])
        .expect("layout")
        .scheduling_element_id())
}

fn destroy_se(h: &mut Host, id: u32) -> Result<(), CmdFail> {
    let input = sched_cmd(Opcode::DestroySchedulingElement, 0x40, |b| {
        DestroySchedulingElementIn::new(b)
            .expect("layout")
            .set_scheduling_hierarchy(hierarchy::NIC)
            .set_scheduling_element_id(id);
    });
    h.exec(&input, 0x10).map(|_| ())
}

fn destroy_sq(h: &mut Host, sqn: u32) {
    let mut input = Host::input(Opcode::DestroySq, 0, 0x10);
    DestroySqIn::new(&mut input[..])
        .expect("layout")
        .set_sqn(sqn);
    h.exec(&input, 0x10).expect("DESTROY_SQ");
}

/// MODIFY_SQ RDY -> RDY naming queue group `group`, as libmlx5's `modify_raw_qp_sched_elem`
/// and mlx5e's `mlx5e_modify_sq` (`qos_update`) send it.
fn sq_to_group(h: &mut Host, sqn: u32, group: u32) -> Result<(), CmdFail> {
    let mut input = Host::input(Opcode::ModifySq, 0, 0x110);
    let mut m = ModifySqIn::new(&mut input[..]).expect("layout");
    m.set_sq_state(1)
        .set_sqn(sqn)
        .set_modify_bitmask(MODIFY_SQ_BITMASK_QOS_QUEUE_GROUP_ID);
    m.ctx_mut()
        .set_state(1)
        .set_qos_queue_group_id(group as u16);
    h.exec(&input, 0x10).map(|_| ())
}

/// mlx5e's HTB offload: a root DWRR TSAR under parent 0 (`mlx5_qos_create_root_node`), a
/// leaf queue group (`mlx5_qos_create_leaf_node`), `mlx5_qos_update_node` with both modify
/// bits, an SQ opened in the group; the leaf goes only after its SQ, the root after its leaf.
#[test]
fn scheduling_element_commands_as_mlx5e_htb_sends_them() {
    let mut h = host();
    let root = create_se(&mut h, element_type::TSAR, 0, 0, 0).expect("root");
    let group = create_se(&mut h, element_type::QUEUE_GROUP, root, 50, 1000).expect("leaf");
    let mut input = Host::input(Opcode::ModifySchedulingElement, 0, 0x80);
    let mut cmd = ModifySchedulingElementIn::new(&mut input[..]).expect("layout");
    cmd.set_scheduling_hierarchy(hierarchy::NIC)
        .set_scheduling_element_id(group)
        .set_modify_bitmask(sched_modify::BW_SHARE | sched_modify::MAX_AVERAGE_BW);
    cmd.scheduling_context_mut()
        .set_bw_share(20)
        .set_max_average_bw(2000);
    h.exec(&input, 0x10).expect("MODIFY_SCHEDULING_ELEMENT");
    let mut input = Host::input(Opcode::QuerySchedulingElement, 0, 0x40);
    QuerySchedulingElementIn::new(&mut input[..])
        .expect("layout")
        .set_scheduling_hierarchy(hierarchy::NIC)
        .set_scheduling_element_id(group);
    let out = h
        .exec(&input, QuerySchedulingElementOut::<&[u8]>::SIZE)
        .expect("QUERY_SCHEDULING_ELEMENT");
    let out = QuerySchedulingElementOut::new(&out[..]).expect("layout");
    let ctx = out.scheduling_context();
    assert_eq!(
        (
            ctx.element_type(),
            ctx.parent_element_id(),
            ctx.bw_share(),
            ctx.max_average_bw()
        ),
        (element_type::QUEUE_GROUP, root, 20, 2000)
    );
    // The same element is a general object to a DEVX user (one id space).
    assert_eq!(
        query(&mut h, 0, group).expect("query").0,
        element_type::QUEUE_GROUP
    );

    let cq = h.create_cq(6);
    let tis = h.create_tis();
    refused(
        h.try_create_sq_in_group(cq.cqn, tis, 6, root),
        CmdStatus::BadParameter,
        Syndrome::NoSuchQueueGroup,
    );
    let sq = h
        .try_create_sq_in_group(cq.cqn, tis, 6, group)
        .expect("SQ in the group");
    in_use(destroy_se(&mut h, group));
    in_use(destroy_se(&mut h, root));
    destroy_sq(&mut h, sq);
    destroy_se(&mut h, group).expect("leaf after its SQ");
    destroy_se(&mut h, root).expect("root after its leaf");
    h.teardown();
}

/// `modify_raw_qp_sched_elem`: MODIFY_SQ with `MLX5_MODIFY_SQ_BITMASK_QOS_QUEUE_GROUP_ID`
/// moves an SQ into a queue group and out (0); a TSAR or a missing group is refused.
#[test]
fn modify_sq_moves_a_send_queue_into_a_queue_group_and_out() {
    let mut h = host();
    let root = node(&mut h, 0, Attr::default()).expect("root");
    let under = Attr {
        parent: root,
        ..Attr::default()
    };
    let group = leaf(&mut h, 0, under).expect("leaf");
    let cq = h.create_cq(6);
    let tis = h.create_tis();
    let sq = h.create_sq(cq.cqn, tis, 6);
    let missing = |r| refused(r, CmdStatus::BadParameter, Syndrome::NoSuchQueueGroup);
    missing(sq_to_group(&mut h, sq.sqn, root));
    missing(sq_to_group(&mut h, sq.sqn, 0x777));
    sq_to_group(&mut h, sq.sqn, group).expect("into the group");
    in_use(destroy(&mut h, 0, group));
    sq_to_group(&mut h, sq.sqn, 0).expect("out of it");
    destroy(&mut h, 0, group).expect("leaf");
    destroy(&mut h, 0, root).expect("root");
    h.teardown();
}

/// `modify_ib_qp_sched_elem_rts` / `_init`: the transition with `qpc_ext`,
/// `MLX5_QPC_OPT_MASK_32_QOS_QUEUE_GROUP_ID` and the groups in the context extension.
fn qp_groups(
    h: &mut Host,
    opcode: Opcode,
    qpn: u32,
    req: u32,
    resp: u32,
    ext: bool,
) -> Result<(), CmdFail> {
    let mut input = Host::input(opcode, 0, RTS2RTS_QPC_EXT_BYTE + QpcExt::<&[u8]>::SIZE);
    if opcode == Opcode::Init2initQp {
        Init2initQpIn::new(&mut input[..])
            .expect("layout")
            .set_qpn(qpn)
            .set_qpc_ext(ext)
            .set_opt_param_mask_95_32(qpc_opt_mask_32::QOS_QUEUE_GROUP_ID);
    } else {
        Rts2rtsQpIn::new(&mut input[..])
            .expect("layout")
            .set_qpn(qpn)
            .set_qpc_ext(ext)
            .set_opt_param_mask_95_32(qpc_opt_mask_32::QOS_QUEUE_GROUP_ID);
    }
    QpcExt::new(&mut input[RTS2RTS_QPC_EXT_BYTE..])
        .expect("layout")
        .set_qos_queue_group_id_requester(req)
        .set_qos_queue_group_id_responder(resp);
    h.exec(&input, 0x10).map(|_| ())
}

fn drain(h: &Host, cq: &mut Cq) -> Vec<Vec<u8>> {
    std::iter::from_fn(|| h.poll_cq(cq)).collect()
}

/// `test_sched_per_qp_traffic`: an RC QP in RTS attached to a leaf as requester and
/// responder, then traffic. The leaf cannot go while the QP names it; detaching (0) or
/// destroying the QP lets it go. A TSAR, or groups without the extension, are refused.
#[test]
fn an_rc_qp_attached_to_a_leaf_as_modify_qp_sched_elem_sends_it_still_carries_traffic() {
    let mut p = RcPair::new(
        EmuConfig::default(),
        MEM,
        6,
        6,
        4,
        RcPath::to(GID_B, MAC_B, 0),
    );
    let uid = p.b.create_uctx(0).expect("CREATE_UCTX");
    let root = node(&mut p.b, uid, Attr::default()).expect("root");
    let attr = Attr {
        parent: root,
        flags: BW_SHARE | MAX_AVG_BW,
        bw_share: 2,
        max_avg_bw: 10,
    };
    let group = leaf(&mut p.b, uid, attr).expect("leaf");
    let qpn = p.qp_b.qpn;
    let bad = |r| refused(r, CmdStatus::BadParameter, Syndrome::NoSuchQueueGroup);
    bad(qp_groups(&mut p.b, Opcode::Rts2rtsQp, qpn, root, 0, true));
    refused(
        qp_groups(&mut p.b, Opcode::Rts2rtsQp, qpn, group, group, false),
        CmdStatus::BadParameter,
        Syndrome::BadQpParams,
    );
    qp_groups(&mut p.b, Opcode::Rts2rtsQp, qpn, group, group, true).expect("attach");
    in_use(destroy(&mut p.b, uid, group));

    // Traffic from the attached QP: an RDMA WRITE from B into A.
    let lkey = p.b.create_mkey(false, true);
    let src = p.b.alloc(256, 64);
    p.b.write(src, &[0x5a; 256]);
    let pd_a = p.a.pd;
    let target = p.a.alloc(256, 64);
    let rights = RemoteRights {
        write: true,
        ..Default::default()
    };
    let rkey = p.a.create_remote_mkey(pd_a, target, 256, rights, 0x31);
    let w = rc_wqe(
        &p.qp_b.sq,
        opcode::RDMA_WRITE,
        0,
        Some((target, rkey)),
        None,
        (src, lkey, 256),
    );
    p.b.post(&mut p.qp_b.sq, &w, false);
    p.settle();
    assert_eq!(drain(&p.b, &mut p.cq_b).len(), 1, "the WRITE completes");
    assert_eq!(p.a.read(target, 256), vec![0x5a; 256]);

    qp_groups(&mut p.b, Opcode::Rts2rtsQp, qpn, 0, 0, true).expect("detach");
    destroy(&mut p.b, uid, group).expect("leaf once detached");
    let group = leaf(&mut p.b, uid, attr).expect("another leaf");
    qp_groups(&mut p.b, Opcode::Rts2rtsQp, qpn, group, 0, true).expect("requester only");
    in_use(destroy(&mut p.b, uid, group));
    // A QP in INIT takes its groups by INIT2INIT_QP.
    let cq = p.b.create_cq(4);
    let other = p.b.create_rc_qp(&cq, 4, 4, None);
    p.b.modify_qp(Opcode::Rst2initQp, other.qpn, |c| {
        c.primary_address_path_mut().set_vhca_port_num(1);
    });
    qp_groups(&mut p.b, Opcode::Init2initQp, other.qpn, group, group, true).expect("INIT");
    p.b.destroy_qp(other.qpn);
    in_use(destroy(&mut p.b, uid, group));
    p.b.destroy_qp(qpn);
    destroy(&mut p.b, uid, group).expect("leaf once its QPs are gone");
    destroy(&mut p.b, uid, root).expect("root");
    p.b.destroy_uctx(uid).expect("DESTROY_UCTX");
    p.a.destroy_qp(p.qp_a.qpn);
    p.a.teardown();
    p.b.teardown();
}

/// A rate limit on a TSAR holds every SQ under it together: mlx5e's HTB offload sets a
/// class's ceiling as the element's `max_average_bw` (Mb/s). Two SQs in a queue group under a
/// root TSAR limited to 1 Mb/s (125,000 bytes a second, a 64 KiB bucket): 30 frames of 1,500
/// bytes from the first and 30 from the second; together only the bucket's 44 frames go at
/// once (separate buckets would let all 60), the other 16 over at least 183.7 ms, without
/// another doorbell.
#[test]
fn a_rate_limited_tsar_paces_the_sqs_under_it_together() {
    let mut h = host();
    let root = create_se(&mut h, element_type::TSAR, 0, 0, 1).expect("root, 1 Mb/s");
    let group = create_se(&mut h, element_type::QUEUE_GROUP, root, 0, 0).expect("leaf");
    let mut cq = h.create_cq(7);
    let tis = h.create_tis();
    let mut sqs = [h.create_sq(cq.cqn, tis, 6), h.create_sq(cq.cqn, tis, 6)];
    for sq in &sqs {
        sq_to_group(&mut h, sq.sqn, group).expect("SQ into the group");
    }
    let key = h.create_mkey(false, false);
    let frame = cxdirect_emu::testkit::udp_frame(1500 - 42, 2);
    let sent = |h: &Host| h.dev.counters().tx_frames;
    let before = sent(&h);
    let start = std::time::Instant::now();
    for sq in &mut sqs {
        for _ in 0..30 {
            let buf = h.alloc(1536, 64);
            let wqe = h.build_send(sq, &frame, buf, key, true);
            h.post(sq, &wqe, false);
        }
    }
    // The bucket's 44 frames go at once, and one more for each 1,500 bytes the rate earned
    // while the 60 were posted (12 ms a frame: a loaded machine may take that long).
    let at_once = sent(&h) - before;
    let earned = (start.elapsed().as_secs_f64() * 125_000.0 / 1500.0) as u64;
    assert!(
        (44..=44 + earned).contains(&at_once),
        "one bucket for both SQs: {at_once} frames at once (44, and {earned} the rate earned while posting)"
    );
    while sent(&h) - before < 60 && start.elapsed() < std::time::Duration::from_secs(20) {
        std::thread::sleep(std::time::Duration::from_millis(20));
        h.dev.poll();
    }
    assert_eq!(sent(&h) - before, 60, "the rest go as the rate allows");
    // The 60th frame goes once the bucket has earned what the 59 before it took beyond its
    // 64 KiB: 59 × 1,500 − 65,536 = 22,964 bytes, 183.7 ms at 125,000 bytes a second.
    assert!(
        start.elapsed() >= std::time::Duration::from_micros(183_700),
        "the last frame waits at least 183.7 ms at 125,000 bytes a second: {:?}",
        start.elapsed()
    );
    assert_eq!(std::iter::from_fn(|| h.poll_cq(&mut cq)).count(), 60);
}

/// A leaf under a root TSAR limited to 1 Mb/s (125,000 bytes a second, a 64 KiB bucket),
/// created on `h`: the leaf's id.
fn one_megabit_group(h: &mut Host) -> u32 {
    let root = create_se(h, element_type::TSAR, 0, 0, 1).expect("root, 1 Mb/s");
    create_se(h, element_type::QUEUE_GROUP, root, 0, 0).expect("leaf")
}

/// Two RC QPs, B's targeting A, on a pair wire.
fn rc_pair() -> RcPair {
    RcPair::new(
        EmuConfig::default(),
        MEM,
        6,
        6,
        4,
        RcPath::to(GID_B, MAC_B, 0),
    )
}

/// A deterministic pattern of `bytes` bytes.
fn pattern(bytes: u64, step: u64) -> Vec<u8> {
    (0..bytes).map(|i| (i * step % 251) as u8).collect()
}

/// Lets a paced sender go on: every 20 ms both functions take what reached them and run
/// their timers (the queues whose wait is over go on), until `done` says so or 20 s have
/// passed.
fn settle_until(a: &Host, b: &Host, mut done: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !done() && start.elapsed() < std::time::Duration::from_secs(20) {
        std::thread::sleep(std::time::Duration::from_millis(20));
        for _ in 0..4 {
            b.dev.poll();
            a.dev.poll();
        }
    }
}

/// `at_once` of a paced sender's packets went before the timers ran (the bucket's worth, not
/// all `total`), and all `total` only after `at_least` since `start`.
fn paced(at_once: u64, total: u64, start: std::time::Instant, at_least_ms: u64) {
    assert!(
        (50..70).contains(&at_once),
        "the bucket's worth of packets at once, not all {total}: {at_once}"
    );
    assert!(
        start.elapsed() >= std::time::Duration::from_millis(at_least_ms),
        "what passed the bucket takes at least {at_least_ms} ms at 125,000 bytes a second: {:?}",
        start.elapsed()
    );
}

/// An RC requester in a queue group sends within the rates above it: libmlx5's
/// `mlx5dv_modify_qp_sched_elem` names B's QP's requester group, a leaf under a TSAR limited
/// to 1 Mb/s. A 96 KiB RDMA WRITE (96 packets at path MTU 1024, about 1,080 bytes each on the
/// wire) goes out at once only as far as the bucket holds (about 60 packets); the rest follow
/// within the rate on the RC timers, no other doorbell, and the WRITE completes with every
/// byte in place after at least the 300 ms the remaining 37 KB take, each packet sent once.
#[test]
fn an_rc_requester_in_a_rate_limited_queue_group_sends_within_its_rate() {
    const BYTES: u64 = 96 << 10;
    let mut p = rc_pair();
    let group = one_megabit_group(&mut p.b);
    let qpn = p.qp_b.qpn;
    qp_groups(&mut p.b, Opcode::Rts2rtsQp, qpn, group, 0, true).expect("requester group");

    let lkey = p.b.create_mkey(false, true);
    let src = p.b.alloc(BYTES, 64);
    let data = pattern(BYTES, 7);
    p.b.write(src, &data);
    let pd_a = p.a.pd;
    let target = p.a.alloc(BYTES, 64);
    let rights = RemoteRights {
        write: true,
        ..Default::default()
    };
    let rkey = p.a.create_remote_mkey(pd_a, target, BYTES, rights, 0x37);
    let w = rc_wqe(
        &p.qp_b.sq,
        opcode::RDMA_WRITE,
        0,
        Some((target, rkey)),
        None,
        (src, lkey, BYTES as u32),
    );
    let before = p.b.dev.counters().tx_frames;
    let start = std::time::Instant::now();
    p.b.post(&mut p.qp_b.sq, &w, false);
    p.settle();
    let at_once = p.b.dev.counters().tx_frames - before;
    let mut completions = Vec::new();
    settle_until(&p.a, &p.b, || {
        completions.extend(drain(&p.b, &mut p.cq_b));
        !completions.is_empty()
    });
    assert_eq!(completions.len(), 1, "the WRITE completes");
    assert_eq!(p.a.read(target, BYTES as usize), data);
    paced(at_once, 96, start, 290);
    assert_eq!(
        p.b.dev.counters().tx_frames - before,
        96,
        "no packet sent twice"
    );
    qp_groups(&mut p.b, Opcode::Rts2rtsQp, qpn, 0, 0, true).expect("detach");
    p.teardown();
}

/// A responder in a queue group answers within the rates above it: A's QP names a responder
/// group under a TSAR limited to 1 Mb/s, and B reads 96 KiB from A. A's READ responses go out
/// at once only as far as the bucket holds; the rest follow within the rate on the RC timers,
/// and the READ completes with every byte in place after at least 290 ms, each response sent
/// once.
#[test]
fn an_rc_responder_in_a_rate_limited_queue_group_answers_within_its_rate() {
    const BYTES: u64 = 96 << 10;
    let mut p = rc_pair();
    let group = one_megabit_group(&mut p.a);
    let qpn_a = p.qp_a.qpn;
    qp_groups(&mut p.a, Opcode::Rts2rtsQp, qpn_a, 0, group, true).expect("responder group");

    let pd_a = p.a.pd;
    let source = p.a.alloc(BYTES, 64);
    let data = pattern(BYTES, 13);
    p.a.write(source, &data);
    let rights = RemoteRights {
        read: true,
        ..Default::default()
    };
    let rkey = p.a.create_remote_mkey(pd_a, source, BYTES, rights, 0x39);
    let lkey = p.b.create_mkey(false, true);
    let sink = p.b.alloc(BYTES, 64);
    let w = rc_wqe(
        &p.qp_b.sq,
        opcode::RDMA_READ,
        0,
        Some((source, rkey)),
        None,
        (sink, lkey, BYTES as u32),
    );
    let before = p.a.dev.counters().tx_frames;
    let start = std::time::Instant::now();
    p.b.post(&mut p.qp_b.sq, &w, false);
    p.settle();
    let at_once = p.a.dev.counters().tx_frames - before;
    let mut completions = Vec::new();
    settle_until(&p.a, &p.b, || {
        completions.extend(drain(&p.b, &mut p.cq_b));
        !completions.is_empty()
    });
    assert_eq!(completions.len(), 1, "the READ completes");
    assert_eq!(p.b.read(sink, BYTES as usize), data);
    paced(at_once, 96, start, 290);
    assert_eq!(
        p.a.dev.counters().tx_frames - before,
        96,
        "every response sent once"
    );
    qp_groups(&mut p.a, Opcode::Rts2rtsQp, qpn_a, 0, 0, true).expect("detach");
    p.teardown();
}

/// A UD QP in a queue group sends within the rates above it: A's UD QP names a requester
/// group under a TSAR limited to 1 Mb/s, and posts 100 datagrams of 1,000 bytes (about 1,070
/// bytes each on the wire). The bucket lets about 61 go at once; the rest wait at their WQE
/// and go on the device's timers, no other doorbell, after at least the 330 ms their 41 KB
/// take, each datagram sent once and completed.
#[test]
fn a_ud_qp_in_a_rate_limited_queue_group_sends_within_its_rate() {
    const DATAGRAMS: u64 = 100;
    let mut p = UdPair::new(EmuConfig::default(), MEM, 7, 8, 4);
    let group = one_megabit_group(&mut p.a);
    let qpn = p.ud_a.qpn;
    qp_groups(&mut p.a, Opcode::Rts2rtsQp, qpn, group, 0, true).expect("requester group");

    let lkey = p.a.create_mkey(false, true);
    let src = p.a.alloc(1000, 64);
    p.a.write(src, &[0x6b; 1000]);
    let av = UdAv::to(GID_B, MAC_B, p.ud_b.qpn, UD_QKEY);
    let before = p.a.dev.counters().ud_sent;
    let start = std::time::Instant::now();
    for _ in 0..DATAGRAMS {
        let w = ud_wqe(&p.ud_a.sq, opcode::SEND, 0, &av, &[(src, lkey, 1000)]);
        p.a.post(&mut p.ud_a.sq, &w, false);
    }
    p.settle();
    let at_once = p.a.dev.counters().ud_sent - before;
    let mut completed = 0;
    settle_until(&p.a, &p.b, || {
        completed += drain(&p.a, &mut p.cq_a).len() as u64;
        completed == DATAGRAMS
    });
    assert_eq!(completed, DATAGRAMS, "every datagram completes");
    paced(at_once, DATAGRAMS, start, 300);
    assert_eq!(
        p.a.dev.counters().ud_sent - before,
        DATAGRAMS,
        "each sent once"
    );
    qp_groups(&mut p.a, Opcode::Rts2rtsQp, qpn, 0, 0, true).expect("detach");
    p.teardown();
}

/// RC READ and atomic requests wait for their queue group's rates as SEND and WRITE packets
/// do: an Ethernet SQ of B in the same group (mlx5e's or a raw packet QP's) spends the group's
/// bucket with 100 frames of 1,500 bytes (150 KB against 64 KiB: 44 go, the bucket ends below
/// zero, the rest wait). B's READ and fetch-and-add, posted right after, send no request
/// while the bucket is below zero; they go on the RC timers as it fills (sharing it with the
/// SQ's waiting frames) and complete, the READ with A's bytes, the fetch-and-add with A's
/// word added to.
#[test]
fn rc_read_and_atomic_requests_in_a_spent_queue_group_wait_for_its_rates() {
    let mut p = rc_pair();
    let group = one_megabit_group(&mut p.b);
    let qpn = p.qp_b.qpn;
    qp_groups(&mut p.b, Opcode::Rts2rtsQp, qpn, group, 0, true).expect("requester group");
    let mut eth_cq = p.b.create_cq(7);
    let tis = p.b.create_tis();
    let mut sq = p.b.create_sq(eth_cq.cqn, tis, 7);
    sq_to_group(&mut p.b, sq.sqn, group).expect("SQ into the group");
    let key = p.b.create_mkey(false, false);
    let frame = cxdirect_emu::testkit::udp_frame(1500 - 42, 3);
    for _ in 0..100 {
        let buf = p.b.alloc(1536, 64);
        let wqe = p.b.build_send(&sq, &frame, buf, key, true);
        p.b.post(&mut sq, &wqe, false);
    }

    let pd_a = p.a.pd;
    let source = p.a.alloc(64, 64);
    p.a.write(source, &pattern(56, 5));
    let word = source + 56;
    p.a.write(word, &40u64.to_be_bytes());
    let rights = RemoteRights {
        read: true,
        atomic: true,
        ..Default::default()
    };
    let rkey = p.a.create_remote_mkey(pd_a, source, 64, rights, 0x3b);
    let lkey = p.b.create_mkey(false, true);
    let sink = p.b.alloc(64, 64);
    let read = rc_wqe(
        &p.qp_b.sq,
        opcode::RDMA_READ,
        0,
        Some((source, rkey)),
        None,
        (sink, lkey, 56),
    );
    p.b.post(&mut p.qp_b.sq, &read, false);
    let add = rc_wqe(
        &p.qp_b.sq,
        opcode::ATOMIC_FA,
        0,
        Some((word, rkey)),
        Some((2, 0)),
        (sink + 56, lkey, 8),
    );
    let requests_before = p.a.dev.counters().rx_frames;
    p.b.post(&mut p.qp_b.sq, &add, false);
    p.settle();
    assert!(
        drain(&p.b, &mut p.cq_b).is_empty(),
        "no request goes while the group is in debt"
    );
    assert_eq!(
        p.a.dev.counters().rx_frames,
        requests_before,
        "A received no request"
    );
    let mut completions = Vec::new();
    settle_until(&p.a, &p.b, || {
        completions.extend(drain(&p.b, &mut p.cq_b));
        completions.len() == 2
    });
    assert_eq!(completions.len(), 2, "both complete once the debt is paid");
    assert_eq!(p.b.read(sink, 56), pattern(56, 5));
    assert_eq!(p.a.read(word, 8), 42u64.to_be_bytes());
    let mut sent = 0;
    settle_until(&p.a, &p.b, || {
        sent += drain(&p.b, &mut eth_cq).len();
        sent == 100
    });
    assert_eq!(sent, 100, "the SQ's frames follow within the rate");
    destroy_sq(&mut p.b, sq.sqn);
    qp_groups(&mut p.b, Opcode::Rts2rtsQp, qpn, 0, 0, true).expect("detach");
    p.teardown();
}

/// Siblings under a rate limited TSAR send in proportion to their `bw_share`: mlx5e's HTB
/// offload makes a class with a ceiling a TSAR and its children queue groups whose shares are
/// their rates in percent of that ceiling (`mlx5e_htb_convert_rate`: 75 and 25 for 750 and
/// 250 kbit/s under 1 Mbit/s), each with its SQ. Both SQs keep frames of 1,000 bytes waiting;
/// once the TSAR's bucket is spent, over about 1.2 s (about 150 frames at 125,000 bytes a
/// second) the first sends about three times what the second does.
#[test]
fn siblings_under_a_rate_limited_tsar_send_in_proportion_to_their_shares() {
    let mut h = host();
    let root = create_se(&mut h, element_type::TSAR, 0, 0, 0).expect("root");
    let class = create_se(&mut h, element_type::TSAR, root, 0, 1).expect("class, 1 Mb/s");
    let groups = [
        create_se(&mut h, element_type::QUEUE_GROUP, class, 75, 1).expect("75"),
        create_se(&mut h, element_type::QUEUE_GROUP, class, 25, 1).expect("25"),
    ];
    let tis = h.create_tis();
    let mut cqs = [h.create_cq(8), h.create_cq(8)];
    let mut sqs = [
        h.create_sq(cqs[0].cqn, tis, 8),
        h.create_sq(cqs[1].cqn, tis, 8),
    ];
    for (sq, &group) in sqs.iter().zip(&groups) {
        sq_to_group(&mut h, sq.sqn, group).expect("SQ into its group");
    }
    let key = h.create_mkey(false, false);
    let frame = cxdirect_emu::testkit::udp_frame(1000 - 42, 4);
    for sq in &mut sqs {
        for _ in 0..250 {
            let buf = h.alloc(1024, 64);
            let wqe = h.build_send(sq, &frame, buf, key, true);
            h.post(sq, &wqe, false);
        }
    }
    // The bucket's 64 KiB went to the first SQ's frames at once; count from here.
    let sent = |h: &mut Host, cqs: &mut [Cq; 2]| {
        [
            std::iter::from_fn(|| h.poll_cq(&mut cqs[0])).count(),
            std::iter::from_fn(|| h.poll_cq(&mut cqs[1])).count(),
        ]
    };
    let burst = sent(&mut h, &mut cqs);
    let start = std::time::Instant::now();
    let mut total = [0usize; 2];
    while start.elapsed() < std::time::Duration::from_millis(1200) {
        std::thread::sleep(std::time::Duration::from_millis(1));
        h.dev.poll();
        let [a, b] = sent(&mut h, &mut cqs);
        total[0] += a;
        total[1] += b;
    }
    let ratio = total[0] as f64 / total[1].max(1) as f64;
    assert!(
        total[1] >= 10 && (2.0..=4.5).contains(&ratio),
        "after the burst ({burst:?}), frames sent by the 75 and the 25 share: {total:?}"
    );
    assert!(
        total[0] + total[1] <= 200,
        "within the class's 1 Mb/s: {total:?}"
    );
}
