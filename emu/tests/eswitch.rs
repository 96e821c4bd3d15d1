//! The function as its port's e-switch manager, read as Linux and rdma-core read it: the
//! general page names it manager (`eswitch_manager`, `vport_group_manager`: mlx5_core's
//! `MLX5_ESWITCH_MANAGER`, `MLX5_VPORT_MANAGER`), mlx5_core then reads both e-switch pages
//! with the current-value op_mods 0x11 and 0x13 (`mlx5_query_hca_caps`), and rdma-core's
//! software steering, opening a domain, queries the manager's own e-switch vport context
//! (`dr_domain_query_esw_mgr`: other_vport 0, vport 0), the e-switch flow table page
//! (`dr_devx_query_esw_caps`) and the host functions (`dr_devx_query_esw_func`, with an
//! output 8 bytes short of the layout). Before, every one of these was refused (the pages as
//! not modelled, the two commands as unknown opcodes) and Linux kept no e-switch.

use cxdirect_emu::testkit::{refused, Host};
use cxdirect_emu::Syndrome;
use cxdirect_hw::caps::{CmdHcaCap, FlowTablePropLayout};
use cxdirect_hw::cmd::{CmdStatus, Opcode};
use cxdirect_hw::eswitch::{
    ESwitchCap, FlowTableESwitchCap, HostParamsContext, QueryEswFunctionsOut,
    QueryEswVportContextIn, QueryEswVportContextOut,
};
use cxdirect_hw::hca::cap_type;

const MEM: usize = 4 << 20;
/// `query_hca_cap_out.capability`.
const CAPABILITY: usize = 0x10;

fn host() -> Host {
    Host::roce_loopback(MEM)
}

#[test]
fn the_function_is_the_e_switch_manager_of_its_port() {
    let mut h = host();
    for current in [false, true] {
        let out = h.query_cap(cap_type::GENERAL_DEVICE, current);
        let g = CmdHcaCap::new(&out[CAPABILITY..]).expect("layout");
        assert!(g.eswitch_manager(), "current={current}");
        assert!(g.vport_group_manager(), "current={current}");
    }
}

#[test]
fn both_e_switch_pages_answer_as_mlx5_core_queries_them_and_offer_no_fdb() {
    let mut h = host();
    // mlx5_core's op_mods: (8 << 1) | 1 and (9 << 1) | 1.
    for (op_mod, kind) in [
        (0x11, cap_type::ESWITCH_FLOW_TABLE),
        (0x13, cap_type::ESWITCH),
    ] {
        assert_eq!(op_mod, cxdirect_hw::hca::query_cap_op_mod(kind, true));
    }
    for current in [false, true] {
        let out = h.query_cap(cap_type::ESWITCH_FLOW_TABLE, current);
        let page = FlowTableESwitchCap::new(&out[CAPABILITY..]).expect("layout");
        let fdb: FlowTablePropLayout<&[u8]> = page.flow_table_properties_nic_esw_fdb();
        assert!(!fdb.ft_support(), "no FDB tables");
        assert!(
            !fdb.sw_owner() && !fdb.sw_owner_v2(),
            "no FDB software steering"
        );
        assert!(
            !fdb.reformat() || !fdb.decap(),
            "devlink's encap mode reads none"
        );
        assert!(!page.flow_table_properties_esw_acl_ingress().ft_support());
        assert!(!page.flow_table_properties_esw_acl_egress().ft_support());
        assert_eq!(page.sw_steering_uplink_icm_address_rx(), 0);

        let out = h.query_cap(cap_type::ESWITCH, current);
        let esw = ESwitchCap::new(&out[CAPABILITY..]).expect("layout");
        assert!(
            !esw.ecpf_vport_exists(),
            "no embedded CPU vport for Linux to allocate"
        );
        assert_eq!(esw.log_max_esw_sf(), 0);
        assert!(!esw.esw_manager_vport_number_valid());
    }
}

fn esw_vport_context(other_vport: bool, vport: u16) -> Vec<u8> {
    let mut input = Host::input(Opcode::QueryEswVportContext, 0, 0x10);
    QueryEswVportContextIn::new(&mut input[..])
        .expect("layout")
        .set_other_vport(other_vport)
        .set_vport_number(vport);
    input
}

#[test]
fn the_managers_own_e_switch_vport_context_answers_as_rdma_core_asks_it() {
    let mut h = host();
    let out = h
        .exec(
            &esw_vport_context(false, 0),
            QueryEswVportContextOut::<&[u8]>::SIZE,
        )
        .expect("QUERY_ESW_VPORT_CONTEXT of the own vport");
    let ctx = QueryEswVportContextOut::new(&out[..]).expect("layout");
    let ctx = ctx.esw_vport_context();
    assert!(!ctx.vport_cvlan_strip() && ctx.vport_cvlan_insert() == 0);
    // No FDB: no software steering entry point into the vport.
    assert_eq!(ctx.sw_steering_vport_icm_address_rx(), 0);
    assert_eq!(ctx.sw_steering_vport_icm_address_tx(), 0);
}

#[test]
fn another_vports_e_switch_context_is_refused_as_there_is_none() {
    let mut h = host();
    let size = QueryEswVportContextOut::<&[u8]>::SIZE;
    for (other, vport) in [(true, 1), (true, 0xffff), (false, 1)] {
        refused(
            h.exec(&esw_vport_context(other, vport), size),
            CmdStatus::BadParameter,
            Syndrome::BadVport,
        );
    }
}

#[test]
fn the_host_functions_answer_in_the_output_rdma_core_sizes_with_no_scalable_functions() {
    let mut h = host();
    let input = Host::input(Opcode::QueryEswFunctions, 0, 0x10);
    // `dr_devx_query_esw_func` with `max_sfs` 0: the layout's 0x80 bytes less one 8-byte
    // `host_sf_enable` word.
    let short = QueryEswFunctionsOut::<&[u8]>::SIZE - 8;
    for outlen in [short, QueryEswFunctionsOut::<&[u8]>::SIZE, 0x100] {
        let out = h.exec(&input, outlen).expect("QUERY_ESW_FUNCTIONS");
        let at = QueryEswFunctionsOut::<()>::HOST_PARAMS_CONTEXT_BYTE;
        let host = HostParamsContext::new(&out[at..]).expect("layout");
        assert!(
            !host.host_pf_vhca_id_valid(),
            "this function is the host PF"
        );
        assert_eq!(host.host_total_vfs(), 0);
        assert!(out[at + HostParamsContext::<()>::SIZE..]
            .iter()
            .all(|&b| b == 0));
    }
    // Shorter than the context itself: refused, not cut.
    refused(
        h.exec(&input, 0x40),
        CmdStatus::BadOutputLength,
        Syndrome::OutputTooShort,
    );
}
