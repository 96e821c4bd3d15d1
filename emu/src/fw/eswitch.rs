//! The e-switch as its manager queries it: the two e-switch capability pages, the e-switch
//! context of the function's own vport (QUERY_ESW_VPORT_CONTEXT) and the host functions
//! (QUERY_ESW_FUNCTIONS).
//!
//! The function is its port's e-switch manager (general `eswitch_manager`, as a ConnectX-6 Dx
//! PF) with an e-switch of one vport, its own: no VFs (the function has no SR-IOV capability)
//! and no scalable functions. Linux's mlx5_core reads both pages at probe
//! (`mlx5_query_hca_caps`) and keeps its e-switch in legacy mode without an FDB
//! (`mlx5_sriov_attach` enables it only with VFs); rdma-core's software steering queries the
//! context, the flow table page and the functions when it opens any domain
//! (`dr_domain_query_fdb_caps`, `dr_devx_query_device`). The FDB, the vports' ACLs and
//! e-switch VLAN insertion are not modelled: every bit that would offer them is 0, so neither
//! reader asks for them.

use super::hca::check_own_vport;
use super::{input_as, output_as, CmdError, CmdResult, Core, Syndrome};
use cxdirect_hw::cmd::CmdStatus;
use cxdirect_hw::eswitch::{
    ESwitchCap, FlowTableESwitchCap, HostParamsContext, QueryEswFunctionsOut,
    QueryEswVportContextIn, QueryEswVportContextOut,
};

/// Bytes of the e-switch page (`e_switch_cap`) and of its flow table page.
pub(crate) const ESWITCH_PAGE_BYTES: usize = ESwitchCap::<()>::SIZE;
/// Bytes of the e-switch flow table page (`flow_table_eswitch_cap`).
pub(crate) const FLOW_TABLE_PAGE_BYTES: usize = FlowTableESwitchCap::<()>::SIZE;

/// The e-switch page, maximum and current alike: all 0. No VLAN strip or insert by the
/// e-switch, no uplink ACL, no embedded CPU vport (Linux allocates none), no merged e-switch,
/// no scalable functions (`log_max_esw_sf` 0), and `esw_manager_vport_number_valid` 0, as
/// firmware without the field reports it: rdma-core then asks QUERY_ESW_FUNCTIONS whether the
/// manager is an embedded CPU.
pub(crate) static ESWITCH_PAGE: [u8; ESWITCH_PAGE_BYTES] = [0; ESWITCH_PAGE_BYTES];

/// The e-switch flow table page, maximum and current alike: all 0. The FDB and the vports'
/// ACL tables offer nothing (`ft_support`, `sw_owner`, `sw_owner_v2` 0): Linux creates no FDB
/// namespace and would refuse to enable VFs, rdma-core opens no FDB domain (its NIC domains
/// are unaffected), and no software steering ICM address is named.
pub(crate) static FLOW_TABLE_PAGE: [u8; FLOW_TABLE_PAGE_BYTES] = [0; FLOW_TABLE_PAGE_BYTES];

/// QUERY_ESW_VPORT_CONTEXT of the function's own vport (other vports: BAD_PARAM, there are
/// none): no VLAN strip or insert, and no software steering entry points (the FDB is not
/// modelled), all 0.
pub(crate) fn query_esw_vport_context(
    _core: &mut Core,
    input: &[u8],
    output: &mut [u8],
) -> CmdResult {
    let cmd = input_as!(QueryEswVportContextIn<&[u8]>, input);
    check_own_vport(cmd.other_vport(), cmd.vport_number())?;
    // The output's context is left as the command interface zeroed it; reading it through
    // the layout checks the output holds it.
    let _ = output_as!(QueryEswVportContextOut<&mut [u8]>, output);
    Ok(())
}

/// QUERY_ESW_FUNCTIONS: the host's PF and VFs as an embedded CPU's manager sees them. This
/// function is the host's PF itself, not an embedded CPU, so it names no other host PF
/// (`host_pf_vhca_id_valid` 0), no VFs, and no scalable function enabled (the `host_sf_enable`
/// words past the layout, as many as the output holds, stay 0).
///
/// Only the context must fit in the output, not the whole layout: rdma-core's
/// `dr_devx_query_esw_func` sizes its output as the layout plus `max_sfs - 1` words, which
/// with no scalable functions (`max_sfs` 0) is 8 bytes short of the layout's 0x80.
pub(crate) fn query_esw_functions(_core: &mut Core, _input: &[u8], output: &mut [u8]) -> CmdResult {
    let at = QueryEswFunctionsOut::<()>::HOST_PARAMS_CONTEXT_BYTE;
    let room = output.get_mut(at..at + HostParamsContext::<()>::SIZE);
    let Some(mut host) = room.and_then(|bytes| HostParamsContext::new(bytes).ok()) else {
        return Err(CmdError::new(
            CmdStatus::BadOutputLength,
            Syndrome::OutputTooShort,
            "output shorter than the host parameters context",
        ));
    };
    host.set_host_pf_vhca_id_valid(false)
        .set_host_num_of_vfs(0)
        .set_host_total_vfs(0);
    Ok(())
}
