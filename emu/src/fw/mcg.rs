//! Multicast groups: ATTACH_TO_MCG and DETACH_FROM_MCG, as Linux's mlx5_ib sends them for
//! `ibv_attach_mcast` / `ibv_detach_mcast` and rdma_cm's multicast joins
//! (`mlx5_ib_mcg_attach` → `mlx5_cmd_attach_mcg`, drivers/infiniband/hw/mlx5/main.c and
//! cmd.c): the QP number and the group's multicast GID, as the RDMA core passed it. On a RoCE
//! port that GID is the group's IP address (IPv4-mapped for IPv4, `cma_iboe_set_mgid` in
//! rdma_cm), so the RoCE receive path finds a datagram's group by its destination IP.
//!
//! Only UD QPs join (the RDMA core's `ib_attach_mcast` takes no other type; raw packet QPs
//! join through flow steering instead, `attach_mcg_fs` in older kernels); the GID must be a
//! multicast one (`rdma_is_multicast_addr`). Attaching a member again changes nothing;
//! detaching a QP that is not a member is refused.

use super::{bad_param, bad_res, input_as, CmdError, CmdResult, Core, Syndrome};
use crate::objects::mcg::AttachError;
use cxdirect_hw::cmd::CmdStatus;
use cxdirect_hw::mcg::{is_multicast_gid, AttachToMcgIn, DetachFromMcgIn};
use cxdirect_hw::qp::service_type;

/// Refuses `qpn` unless it is a UD QP of the function, and `gid` unless it is multicast.
fn check(core: &Core, qpn: u32, gid: &[u8; 16]) -> CmdResult {
    let qp = core.res.ud_qps.get(qpn).ok_or(bad_res("no such QP"))?;
    if qp.service != service_type::UD {
        return Err(bad_param(
            Syndrome::BadMcgParams,
            "only UD QPs join multicast groups",
        ));
    }
    if !is_multicast_gid(gid) {
        return Err(bad_param(
            Syndrome::BadMcgParams,
            "the group's GID is not a multicast address",
        ));
    }
    Ok(())
}

pub(crate) fn attach_to_mcg(core: &mut Core, input: &[u8]) -> CmdResult {
    let cmd = input_as!(AttachToMcgIn<&[u8]>, input);
    let (qpn, gid) = (cmd.qpn(), cmd.gid());
    check(core, qpn, &gid)?;
    core.res.mcgs.attach(gid, qpn).map_err(|e| match e {
        AttachError::TooManyGroups => CmdError::new(
            CmdStatus::NoResources,
            Syndrome::TableFull,
            "log_max_mcg multicast groups exist already",
        ),
        AttachError::GroupFull => CmdError::new(
            CmdStatus::NoResources,
            Syndrome::TableFull,
            "the group holds max_qp_mcg QPs already",
        ),
    })
}

pub(crate) fn detach_from_mcg(core: &mut Core, input: &[u8]) -> CmdResult {
    let cmd = input_as!(DetachFromMcgIn<&[u8]>, input);
    let (qpn, gid) = (cmd.qpn(), cmd.gid());
    check(core, qpn, &gid)?;
    if !core.res.mcgs.detach(&gid, qpn) {
        return Err(bad_param(
            Syndrome::BadMcgParams,
            "the QP is not attached to that group",
        ));
    }
    Ok(())
}
