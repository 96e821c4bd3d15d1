//! Steering on tunnel fields: a frame's GENEVE, VXLAN or GRE header in a flow entry's `misc`
//! match (GENEVE's VNI and O flag as rdma-core's `test_geneve_match_tx` matches them on its
//! transmit root, through mlx5_ib's `mlx5dv_create_flow`) and its VXLAN-GPE header in the
//! third misc set (as DPDK's mlx5 PMD writes a `vxlan-gpe` item), likewise its GTP-U header
//! (a `gtp` item), GENEVE's, VXLAN-GPE's and GTP-U's header in a steering entry's flex parser
//! lookup (`FLEX_PARSER_TNL_HEADER`, `ste_flex_parser_tnl_geneve`, `_vxlan_gpe`, `_gtpu`),
//! with
//! the field capabilities rdma-core's GENEVE tests ask of the receive tables; the headers a
//! tunnel carries in a flow entry's `inner_headers` (as mlx5_ib fills them for a flow spec
//! with `IB_FLOW_SPEC_INNER`) and in a steering entry's inner lookups (`ETHL2_SRC_I`, which
//! rdma-core's `dr_ste_v1_build_eth_l2_src_init` makes from a matcher's inner criteria). The
//! frames go out of an SQ through the transmit tables and come back on a loopback plug.

use cxdirect_emu::testkit::dr::domain;
use cxdirect_emu::testkit::flow_tables::{
    create_table_of, entry_matching, group_matching, set_root_of,
};
use cxdirect_emu::testkit::plug::Plug;
use cxdirect_emu::testkit::ste::Builder;
use cxdirect_emu::testkit::tunnel_frame::tunnelled_frame;
use cxdirect_emu::testkit::{CmdFail, Host};
use cxdirect_emu::EmuConfig;
use cxdirect_hw::caps::FlowTableNicCap;
use cxdirect_hw::flow::{self, FLOW_TABLE_TYPE_NIC_TX};
use cxdirect_hw::hca::cap_type;

const GENEVE_VNI: u32 = 0x00ab_cdef;
/// The source MAC of the frame every test frame carries inside its tunnel (`udp_frame`'s).
const INNER_SMAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x09];
/// Where a tunnelled frame's inner source MAC starts: Ethernet 14, IPv4 20, then the tunnel.
fn inner_smac_at(tunnel_len: usize) -> usize {
    14 + 20 + tunnel_len + 6
}
const GRE_KEY: u32 = 0x1234_5678;

/// An IPv4/UDP frame of 64 payload bytes inside `tunnel` (the UDP and GENEVE headers, or the
/// GRE header) of IP protocol `proto`.
fn tunnelled(proto: u8, tunnel: &[u8]) -> Vec<u8> {
    tunnelled_frame(proto, tunnel, &cxdirect_emu::testkit::udp_frame(64, 9))
}

/// A GENEVE frame (UDP port 6081, no options, protocol TEB) with `vni` and the O flag `oam`.
fn geneve(vni: u32, oam: bool) -> Vec<u8> {
    let udp_len = (8 + 8 + 106) as u16;
    let mut t = vec![
        0x30,
        0x39,
        0x17,
        0xc1,
        (udp_len >> 8) as u8,
        udp_len as u8,
        0,
        0,
    ];
    t.extend_from_slice(&[0, u8::from(oam) << 7, 0x65, 0x58]);
    t.extend_from_slice(&(vni << 8).to_be_bytes());
    tunnelled(17, &t)
}

/// A VXLAN-GPE frame (UDP port 4790, flags 0x0c: version 0, I and P set) with `vni`,
/// carrying by `next` the IPv4/UDP packet of [`tunnelled`]'s frame (1) or the whole frame (3).
fn vxlan_gpe(vni: u32, next: u8) -> Vec<u8> {
    let inner = cxdirect_emu::testkit::udp_frame(64, 9);
    let inner = if next == 3 { &inner[..] } else { &inner[14..] };
    let udp_len = (8 + 8 + inner.len()) as u16;
    let mut t = vec![0x30, 0x39, 0x12, 0xb6];
    t.extend_from_slice(&udp_len.to_be_bytes());
    t.extend_from_slice(&[0, 0, 0x0c, 0, 0, next]);
    t.extend_from_slice(&(vni << 8).to_be_bytes());
    tunnelled_frame(17, &t, inner)
}

/// A GTP-U G-PDU (UDP port 2152, version 1, PT, no optional word) of `msg_type` with `teid`,
/// carrying the IPv4/UDP packet of [`tunnelled`]'s frame (its UDP destination port 0x5678).
fn gtpu(teid: u32, msg_type: u8) -> Vec<u8> {
    let inner = cxdirect_emu::testkit::udp_frame(64, 9);
    let packet = &inner[14..];
    let udp_len = (8 + 8 + packet.len()) as u16;
    let mut t = vec![0x30, 0x39, 0x08, 0x68];
    t.extend_from_slice(&udp_len.to_be_bytes());
    t.extend_from_slice(&[0, 0, 0x30, msg_type]);
    t.extend_from_slice(&(packet.len() as u16).to_be_bytes());
    t.extend_from_slice(&teid.to_be_bytes());
    tunnelled_frame(17, &t, packet)
}

/// A GTP-U G-PDU with `teid` whose E flag announces a PDU session container (extension type
/// 0x85: length 1, PDU type 1, `qfi`), carrying the packet [`gtpu`]'s does.
fn gtpu_psc(teid: u32, qfi: u8) -> Vec<u8> {
    let inner = cxdirect_emu::testkit::udp_frame(64, 9);
    let packet = &inner[14..];
    let udp_len = (8 + 16 + packet.len()) as u16;
    let mut t = vec![0x30, 0x39, 0x08, 0x68];
    t.extend_from_slice(&udp_len.to_be_bytes());
    t.extend_from_slice(&[0, 0, 0x34, 0xff]);
    t.extend_from_slice(&((8 + packet.len()) as u16).to_be_bytes());
    t.extend_from_slice(&teid.to_be_bytes());
    t.extend_from_slice(&[0, 0, 0, 0x85, 1, 0x10, qfi, 0]);
    tunnelled_frame(17, &t, packet)
}

/// A VXLAN frame (UDP port 4789) with `vni`.
fn vxlan(vni: u32) -> Vec<u8> {
    let mut t = vec![0x30, 0x39, 0x12, 0xb5, 0, 122, 0, 0, 0x08, 0, 0, 0];
    t.extend_from_slice(&(vni << 8).to_be_bytes());
    tunnelled(17, &t)
}

/// A GRE frame with a key (K flag), protocol TEB.
fn gre(key: u32) -> Vec<u8> {
    let mut t = vec![0x20, 0, 0x65, 0x58];
    t.extend_from_slice(&key.to_be_bytes());
    tunnelled(47, &t)
}

/// CREATE_FLOW_GROUP over entry 0 of a transmit table, masking misc fields as `mask` sets
/// them.
fn misc_group(
    h: &mut Host,
    table: u32,
    mask: impl Fn(&mut flow::FteMatchSetMisc<&mut [u8]>),
) -> Result<u32, CmdFail> {
    let at = (FLOW_TABLE_TYPE_NIC_TX, table, 0);
    group_matching(h, at, flow::MATCH_MISC_PARAMETERS, |c| {
        mask(&mut c.misc_parameters_mut())
    })
}

/// A dropping entry 0 in `group` of a transmit table, matching misc fields as `value` sets
/// them.
fn misc_drop(
    h: &mut Host,
    table: u32,
    group: u32,
    value: impl Fn(&mut flow::FteMatchSetMisc<&mut [u8]>),
) -> Result<(), CmdFail> {
    let at = (FLOW_TABLE_TYPE_NIC_TX, table, 0);
    entry_matching(h, at, group, flow::FLOW_CONTEXT_ACTION_DROP, |v| {
        value(&mut v.misc_parameters_mut())
    })
}

#[test]
fn the_receive_and_transmit_tables_match_the_tunnels_the_model_parses() {
    let mut p = Plug::new(EmuConfig::default());
    let page = p.h.query_cap(cap_type::FLOW_TABLE, true);
    let f = FlowTableNicCap::new(&page[0x10..]).unwrap();
    for props in [
        f.flow_table_properties_nic_receive(),
        f.flow_table_properties_nic_transmit(),
    ] {
        let s = props.ft_field_support();
        // What rdma-core's requires_geneve_fields_rx_support reads.
        assert!(s.outer_geneve_vni() && s.outer_geneve_oam());
        assert!(s.outer_geneve_protocol_type() && s.outer_geneve_opt_len());
        assert!(s.outer_vxlan_vni() && s.outer_gre_key() && s.outer_gre_protocol());
    }
}

#[test]
fn a_firmware_entry_on_the_geneve_vni_and_o_flag_drops_only_those_frames() {
    let mut p = Plug::new(EmuConfig::default());
    let h = &mut p.h;
    let root = create_table_of(h, FLOW_TABLE_TYPE_NIC_TX, 0, 2, None).unwrap();
    let g = misc_group(h, root, |m| {
        m.set_geneve_vni(0x00ff_ffff).set_geneve_oam(true);
    })
    .unwrap();
    misc_drop(h, root, g, |m| {
        m.set_geneve_vni(GENEVE_VNI).set_geneve_oam(true);
    })
    .unwrap();
    set_root_of(h, FLOW_TABLE_TYPE_NIC_TX, root).unwrap();
    assert_eq!(p.send(&geneve(GENEVE_VNI, true)), None);
    for other in [
        geneve(GENEVE_VNI, false),
        geneve(GENEVE_VNI + 1, true),
        gre(GENEVE_VNI),
    ] {
        assert_eq!(p.send(&other), Some(other.clone()));
    }
}

#[test]
fn a_firmware_entry_on_the_gre_key_drops_only_that_key() {
    let mut p = Plug::new(EmuConfig::default());
    let h = &mut p.h;
    let root = create_table_of(h, FLOW_TABLE_TYPE_NIC_TX, 0, 2, None).unwrap();
    let g = misc_group(h, root, |m| {
        m.set_gre_k_present(true)
            .set_gre_protocol(0xffff)
            .set_gre_key_h(0x00ff_ffff)
            .set_gre_key_l(0xff);
    })
    .unwrap();
    misc_drop(h, root, g, |m| {
        m.set_gre_k_present(true)
            .set_gre_protocol(0x6558)
            .set_gre_key_h(GRE_KEY >> 8)
            .set_gre_key_l(GRE_KEY as u8);
    })
    .unwrap();
    set_root_of(h, FLOW_TABLE_TYPE_NIC_TX, root).unwrap();
    assert_eq!(p.send(&gre(GRE_KEY)), None);
    let other = gre(GRE_KEY ^ 1);
    assert_eq!(p.send(&other), Some(other.clone()));
}

#[test]
fn a_group_on_tunnel_fields_made_after_outer_header_groups_sees_the_next_frames_tunnels() {
    // A function's frames are matched on the parts of the match words its groups have
    // selected so far: a later group on another part must see it in the very next frame.
    let mut p = Plug::new(EmuConfig::default());
    let h = &mut p.h;
    let root = create_table_of(h, FLOW_TABLE_TYPE_NIC_TX, 0, 2, None).unwrap();
    let at = (FLOW_TABLE_TYPE_NIC_TX, root, 0);
    let ethertype = group_matching(h, at, flow::MATCH_OUTER_HEADERS, |c| {
        c.outer_headers_mut().set_ethertype(0xffff);
    })
    .unwrap();
    entry_matching(h, at, ethertype, flow::FLOW_CONTEXT_ACTION_DROP, |v| {
        v.outer_headers_mut().set_ethertype(0x86dd);
    })
    .unwrap();
    set_root_of(h, FLOW_TABLE_TYPE_NIC_TX, root).unwrap();
    let keyed = gre(GRE_KEY);
    assert_eq!(p.send(&keyed), Some(keyed.clone()));
    let h = &mut p.h;
    let at = (FLOW_TABLE_TYPE_NIC_TX, root, 1);
    let key = group_matching(h, at, flow::MATCH_MISC_PARAMETERS, |c| {
        c.misc_parameters_mut()
            .set_gre_key_h(0x00ff_ffff)
            .set_gre_key_l(0xff);
    })
    .unwrap();
    entry_matching(h, at, key, flow::FLOW_CONTEXT_ACTION_DROP, |v| {
        v.misc_parameters_mut()
            .set_gre_key_h(GRE_KEY >> 8)
            .set_gre_key_l(GRE_KEY as u8);
    })
    .unwrap();
    assert_eq!(p.send(&keyed), None);
    let other = gre(GRE_KEY ^ 1);
    assert_eq!(p.send(&other), Some(other.clone()));
}

/// DPDK's mlx5 PMD matches a `vxlan-gpe` item in the third misc set (mlx5_flow_dv.c
/// `flow_dv_translate_item_vxlan_gpe`: flags, next protocol, VNI), which a ConnectX-6 Dx parses
/// natively; the model refused such a group before (BAD_PARAM, as a flex parser field).
#[test]
fn a_firmware_entry_on_the_vxlan_gpe_vni_and_next_protocol_drops_only_those_frames() {
    let mut p = Plug::new(EmuConfig::default());
    let h = &mut p.h;
    let root = create_table_of(h, FLOW_TABLE_TYPE_NIC_TX, 0, 2, None).unwrap();
    let at = (FLOW_TABLE_TYPE_NIC_TX, root, 0);
    let group = group_matching(h, at, flow::MATCH_MISC_PARAMETERS_3, |c| {
        c.misc_parameters_3_mut()
            .set_outer_vxlan_gpe_vni(0x00ff_ffff)
            .set_outer_vxlan_gpe_next_protocol(0xff)
            .set_outer_vxlan_gpe_flags(0xff);
    })
    .unwrap();
    entry_matching(h, at, group, flow::FLOW_CONTEXT_ACTION_DROP, |v| {
        v.misc_parameters_3_mut()
            .set_outer_vxlan_gpe_vni(GENEVE_VNI)
            .set_outer_vxlan_gpe_next_protocol(3)
            .set_outer_vxlan_gpe_flags(0x0c);
    })
    .unwrap();
    set_root_of(h, FLOW_TABLE_TYPE_NIC_TX, root).unwrap();
    assert_eq!(p.send(&vxlan_gpe(GENEVE_VNI, 3)), None);
    for other in [
        vxlan_gpe(GENEVE_VNI + 1, 3),
        vxlan_gpe(GENEVE_VNI, 1),
        vxlan(GENEVE_VNI),
        geneve(GENEVE_VNI, false),
    ] {
        assert_eq!(p.send(&other), Some(other.clone()));
    }
}

/// rdma-core's software steering matches VXLAN-GPE through the flex parser's tunnel header
/// lookup on a ConnectX-6 Dx (`dr_matcher_supp_vxlan_gpe`, then
/// `dr_ste_v1_build_flex_parser_tnl_vxlan_gpe_tag`); the model projected zeros there before.
#[test]
fn a_steering_entry_s_vxlan_gpe_lookup_drops_only_its_vni_and_next_protocol() {
    const FLEX_PARSER_TNL_HEADER: u16 = 0x000e;
    let mut p = Plug::new(EmuConfig::default());
    // ste_flex_parser_tnl_vxlan_gpe: the next protocol in byte 3, the VNI in bytes 4..7.
    let mut mask = [0u8; 16];
    mask[3] = 0xff;
    mask[4..7].fill(0xff);
    let mut tag = [0u8; 16];
    tag[3] = 1;
    tag[4..7].copy_from_slice(&GENEVE_VNI.to_be_bytes()[1..]);
    drop_by_lookup(&mut p, FLEX_PARSER_TNL_HEADER, 0x1e00, mask, tag);
    assert_eq!(p.send(&vxlan_gpe(GENEVE_VNI, 1)), None);
    for other in [
        vxlan_gpe(GENEVE_VNI ^ 0x10, 1),
        vxlan_gpe(GENEVE_VNI, 3),
        vxlan(GENEVE_VNI),
    ] {
        assert_eq!(p.send(&other), Some(other.clone()));
    }
    assert_eq!(p.h.dev.counters().tx_sw_steering_errors, 0);
}

/// What DPDK's mlx5 PMD and rdma-core's software steering read before they match GTP-U: the
/// PMD takes its `gtp` item only with `tunnel_stateless_gtp` (`flow_dv_validate_item_gtp`),
/// rdma-core builds GTP-U matchers only with `flex_parser_protocols`' GTP-U bit
/// (`dr_matcher_supp_tnl_gtpu`), and matchers on its dwords (DPDK's `gtp_psc` item writes
/// `gtpu_dw_2` and `gtpu_first_ext_dw_0`) only with their bits and parser ids.
#[test]
fn gtpu_is_reported_parsed_where_dpdk_and_rdma_core_look() {
    use cxdirect_hw::caps::*;
    let mut p = Plug::new(EmuConfig::default());
    let general = p.h.query_cap(cap_type::GENERAL_DEVICE, true);
    let g = CmdHcaCap::new(&general[0x10..]).unwrap();
    assert_eq!(
        g.flex_parser_protocols(),
        FLEX_PARSER_GTPU_ENABLED
            | FLEX_PARSER_GTPU_DW_0_ENABLED
            | FLEX_PARSER_GTPU_TEID_ENABLED
            | FLEX_PARSER_GTPU_DW_2_ENABLED
            | FLEX_PARSER_GTPU_FIRST_EXT_DW_0_ENABLED
    );
    // Four parsers, one dword each: distinct ids among the eight.
    let mut ids = [
        g.flex_parser_id_gtpu_dw_0(),
        g.flex_parser_id_gtpu_teid(),
        g.flex_parser_id_gtpu_dw_2(),
        g.flex_parser_id_gtpu_first_ext_dw_0(),
    ];
    ids.sort_unstable();
    assert!(ids.windows(2).all(|w| w[0] < w[1]) && ids[3] < 8, "{ids:?}");
    let ethernet = p.h.query_cap(cap_type::ETHERNET_OFFLOADS, true);
    let e = PerProtocolNetworkingOffloadCaps::new(&ethernet[0x10..]).unwrap();
    assert!(e.tunnel_stateless_gtp());
}

/// DPDK's mlx5 PMD matches a `gtp` item in the third misc set (mlx5_flow_dv.c
/// `flow_dv_translate_item_gtp`: flags, message type, TEID); the model refused such a group
/// before (BAD_PARAM, as a flex parser field). The G-PDU's IPv4 packet is its inner headers.
#[test]
fn firmware_entries_match_the_gtpu_teid_and_the_packet_a_g_pdu_carries() {
    let mut p = Plug::new(EmuConfig::default());
    let h = &mut p.h;
    let root = create_table_of(h, FLOW_TABLE_TYPE_NIC_TX, 0, 2, None).unwrap();
    let at = (FLOW_TABLE_TYPE_NIC_TX, root, 0);
    let group = group_matching(h, at, flow::MATCH_MISC_PARAMETERS_3, |c| {
        c.misc_parameters_3_mut()
            .set_gtpu_teid(0xffff_ffff)
            .set_gtpu_msg_type(0xff);
    })
    .unwrap();
    entry_matching(h, at, group, flow::FLOW_CONTEXT_ACTION_DROP, |v| {
        v.misc_parameters_3_mut()
            .set_gtpu_teid(GENEVE_VNI)
            .set_gtpu_msg_type(0xff);
    })
    .unwrap();
    set_root_of(h, FLOW_TABLE_TYPE_NIC_TX, root).unwrap();
    assert_eq!(p.send(&gtpu(GENEVE_VNI, 0xff)), None);
    for other in [
        gtpu(GENEVE_VNI + 1, 0xff),
        gtpu(GENEVE_VNI, 1),
        vxlan_gpe(GENEVE_VNI, 1),
    ] {
        assert_eq!(p.send(&other), Some(other.clone()));
    }

    // The inner UDP destination port of a G-PDU's packet, in `inner_headers`.
    let mut p = Plug::new(EmuConfig::default());
    let h = &mut p.h;
    let root = create_table_of(h, FLOW_TABLE_TYPE_NIC_TX, 0, 2, None).unwrap();
    let at = (FLOW_TABLE_TYPE_NIC_TX, root, 0);
    let group = group_matching(h, at, flow::MATCH_INNER_HEADERS, |c| {
        c.inner_headers_mut()
            .set_ip_protocol(0xff)
            .set_udp_dport(0xffff);
    })
    .unwrap();
    entry_matching(h, at, group, flow::FLOW_CONTEXT_ACTION_DROP, |v| {
        v.inner_headers_mut()
            .set_ip_protocol(17)
            .set_udp_dport(0x5678);
    })
    .unwrap();
    set_root_of(h, FLOW_TABLE_TYPE_NIC_TX, root).unwrap();
    assert_eq!(p.send(&gtpu(GENEVE_VNI, 0xff)), None, "a G-PDU's inner UDP");
    // An echo request's bytes past the header are no packet; a plain frame has no inner one.
    for other in [gtpu(GENEVE_VNI, 1), cxdirect_emu::testkit::udp_frame(64, 9)] {
        assert_eq!(p.send(&other), Some(other.clone()));
    }
}

/// rdma-core's software steering matches GTP-U through the flex parser's tunnel header lookup
/// when the device reports GTP-U parsed (`dr_matcher_supp_tnl_gtpu`, then
/// `dr_ste_v1_build_flex_parser_tnl_gtpu_tag`); the model projected zeros there before.
#[test]
fn a_steering_entry_s_gtpu_lookup_drops_only_its_teid() {
    const FLEX_PARSER_TNL_HEADER: u16 = 0x000e;
    let mut p = Plug::new(EmuConfig::default());
    // ste_flex_parser_tnl_gtpu: the message type in byte 1, the TEID in bytes 4..8.
    let mut mask = [0u8; 16];
    mask[1] = 0xff;
    mask[4..8].fill(0xff);
    let mut tag = [0u8; 16];
    tag[1] = 0xff;
    tag[4..8].copy_from_slice(&GENEVE_VNI.to_be_bytes());
    drop_by_lookup(&mut p, FLEX_PARSER_TNL_HEADER, 0x4f00, mask, tag);
    assert_eq!(p.send(&gtpu(GENEVE_VNI, 0xff)), None);
    for other in [gtpu(GENEVE_VNI ^ 0x10, 0xff), gtpu(GENEVE_VNI, 1)] {
        assert_eq!(p.send(&other), Some(other.clone()));
    }
    assert_eq!(p.h.dev.counters().tx_sw_steering_errors, 0);
}

/// DPDK's `gtp_psc` item (`flow_dv_translate_item_gtp_psc`): the E flag in `gtpu_msg_flags`,
/// the next extension type 0x85 in `gtpu_dw_2`, the QFI in `gtpu_first_ext_dw_0`. Before the
/// model's flex parsers sampled GTP-U such a group was refused (BAD_PARAM).
#[test]
fn a_firmware_entry_on_the_gtpu_dwords_matches_a_pdu_session_s_qfi() {
    let mut p = Plug::new(EmuConfig::default());
    let h = &mut p.h;
    let root = create_table_of(h, FLOW_TABLE_TYPE_NIC_TX, 0, 2, None).unwrap();
    let at = (FLOW_TABLE_TYPE_NIC_TX, root, 0);
    let group = group_matching(h, at, flow::MATCH_MISC_PARAMETERS_3, |c| {
        c.misc_parameters_3_mut()
            .set_gtpu_msg_flags(0x04)
            .set_gtpu_dw_2(0xff)
            .set_gtpu_first_ext_dw_0(0x3f00);
    })
    .unwrap();
    entry_matching(h, at, group, flow::FLOW_CONTEXT_ACTION_DROP, |v| {
        v.misc_parameters_3_mut()
            .set_gtpu_msg_flags(0x04)
            .set_gtpu_dw_2(0x85)
            .set_gtpu_first_ext_dw_0(9 << 8);
    })
    .unwrap();
    set_root_of(h, FLOW_TABLE_TYPE_NIC_TX, root).unwrap();
    assert_eq!(p.send(&gtpu_psc(GENEVE_VNI, 9)), None);
    for other in [gtpu_psc(GENEVE_VNI, 10), gtpu(GENEVE_VNI, 0xff)] {
        assert_eq!(p.send(&other), Some(other.clone()));
    }
}

/// rdma-core's software steering matches GTP-U's dwords through the flex parsers the device
/// names for them (`dr_ste_v1_build_tnl_gtpu_flex_parser_0_tag`: each dword at its parser's
/// place in `ste_flex_parser_0`, parser 3 first); the model knew no such lookup before.
#[test]
fn a_steering_entry_s_flex_parser_lookup_reads_the_gtpu_dwords_by_parser() {
    const FLEX_PARSER_0: u16 = 0x0111;
    let mut p = Plug::new(EmuConfig::default());
    let general = p.h.query_cap(cap_type::GENERAL_DEVICE, true);
    let g = cxdirect_hw::caps::CmdHcaCap::new(&general[0x10..]).unwrap();
    let place = |id: u8| 4 * (3 - usize::from(id % 4));
    let (ext, dw_2) = (
        place(g.flex_parser_id_gtpu_first_ext_dw_0()),
        place(g.flex_parser_id_gtpu_dw_2()),
    );
    // The QFI (third byte of the first extension dword), the next extension type (last byte
    // of the third dword).
    let (mut mask, mut tag) = ([0u8; 16], [0u8; 16]);
    mask[ext + 2] = 0x3f;
    tag[ext + 2] = 9;
    mask[dw_2 + 3] = 0xff;
    tag[dw_2 + 3] = 0x85;
    let byte_mask = (0x8000u16 >> (ext + 2)) | (0x8000u16 >> (dw_2 + 3));
    drop_by_lookup(&mut p, FLEX_PARSER_0, byte_mask, mask, tag);
    assert_eq!(p.send(&gtpu_psc(GENEVE_VNI, 9)), None);
    for other in [gtpu_psc(GENEVE_VNI, 10), gtpu(GENEVE_VNI, 0xff)] {
        assert_eq!(p.send(&other), Some(other.clone()));
    }
    assert_eq!(p.h.dev.counters().tx_sw_steering_errors, 0);
}

/// A transmit table of one rule, as rdma-core lays a one-rule matcher out: its anchor hits
/// (with `byte_mask`) into the rule, an entry of lookup type `lookup` dropping what matches
/// `tag` under `mask`; the rest goes out.
fn drop_by_lookup(p: &mut Plug, lookup: u16, byte_mask: u16, mask: [u8; 16], tag: [u8; 16]) {
    const DONT_CARE: u16 = 0x000f;
    let mut dom = domain(&mut p.h);
    let caps = dom.caps;
    let (anchor, matcher, end) = (dom.base, dom.base + 0x1000, dom.base + 0x2000);
    let mut a = Builder::init(DONT_CARE, 0);
    a.always_hit_htbl(byte_mask, lookup, matcher, 1);
    let mut rule = Builder::init(lookup, 0);
    rule.bit_mask(mask).tag(tag).hit(caps.tx_drop, 1).miss(end);
    let mut e = Builder::init(DONT_CARE, 0);
    e.always_miss(caps.tx_allow);
    dom.write(&mut p.h, vec![(anchor, a), (matcher, rule), (end, e)]);
    dom.transmit_table(&mut p.h);
}

#[test]
fn a_steering_entry_s_geneve_lookup_drops_only_its_vni() {
    const FLEX_PARSER_TNL_HEADER: u16 = 0x000e;
    let mut p = Plug::new(EmuConfig::default());
    // ste_flex_parser_tnl_geneve: the VNI in bytes 4..7, the O flag at bit 8.
    let mut mask = [0u8; 16];
    mask[1] = 0x80;
    mask[4..7].fill(0xff);
    let mut tag = [0u8; 16];
    tag[4..7].copy_from_slice(&GENEVE_VNI.to_be_bytes()[1..]);
    drop_by_lookup(&mut p, FLEX_PARSER_TNL_HEADER, 0x4e00, mask, tag);
    assert_eq!(p.send(&geneve(GENEVE_VNI, false)), None);
    for other in [geneve(GENEVE_VNI ^ 0x10, false), gre(GRE_KEY)] {
        assert_eq!(p.send(&other), Some(other.clone()));
    }
    assert_eq!(p.h.dev.counters().tx_sw_steering_errors, 0);
}

/// A transmit root whose one entry drops frames whose inner source MAC (in `inner_headers`)
/// is [`INNER_SMAC`].
fn inner_smac_drop(h: &mut Host) {
    let root = create_table_of(h, FLOW_TABLE_TYPE_NIC_TX, 0, 2, None).unwrap();
    let at = (FLOW_TABLE_TYPE_NIC_TX, root, 0);
    let group = group_matching(h, at, flow::MATCH_INNER_HEADERS, |c| {
        c.inner_headers_mut().set_smac(0xffff_ffff_ffff);
    })
    .unwrap();
    let mut b = [0u8; 8];
    b[2..].copy_from_slice(&INNER_SMAC);
    entry_matching(h, at, group, flow::FLOW_CONTEXT_ACTION_DROP, |v| {
        v.inner_headers_mut().set_smac(u64::from_be_bytes(b));
    })
    .unwrap();
    set_root_of(h, FLOW_TABLE_TYPE_NIC_TX, root).unwrap();
}

#[test]
fn a_firmware_entry_on_inner_headers_matches_the_frame_inside_the_tunnel() {
    let mut p = Plug::new(EmuConfig::default());
    inner_smac_drop(&mut p.h);
    assert_eq!(
        p.send(&geneve(GENEVE_VNI, false)),
        None,
        "GENEVE, inner smac"
    );
    assert_eq!(p.send(&gre(GRE_KEY)), None, "GRE with TEB, inner smac");
    assert_eq!(
        p.send(&vxlan_gpe(GENEVE_VNI, 3)),
        None,
        "VXLAN-GPE with Ethernet, inner smac"
    );
    let mut other_inner = gre(GRE_KEY);
    other_inner[inner_smac_at(8) + 5] ^= 1;
    // The same MAC outside any tunnel is an outer source MAC, not an inner one.
    let plain = cxdirect_emu::testkit::udp_frame(64, 9);
    assert_eq!(plain[6..12], INNER_SMAC);
    for other in [other_inner, plain] {
        assert_eq!(p.send(&other), Some(other.clone()));
    }
}

#[test]
fn a_steering_entry_s_inner_lookup_reads_the_frame_inside_the_tunnel() {
    const ETHL2_SRC_I: u16 = 0x0006;
    let mut p = Plug::new(EmuConfig::default());
    // ste_eth_l2_src_v1: the source MAC in bytes 4..10.
    let mut mask = [0u8; 16];
    mask[4..10].fill(0xff);
    let mut tag = [0u8; 16];
    tag[4..10].copy_from_slice(&INNER_SMAC);
    drop_by_lookup(&mut p, ETHL2_SRC_I, 0x0fc0, mask, tag);
    assert_eq!(p.send(&geneve(GENEVE_VNI, false)), None);
    let mut other_inner = geneve(GENEVE_VNI, false);
    other_inner[inner_smac_at(16) + 5] ^= 1;
    let plain = cxdirect_emu::testkit::udp_frame(64, 9);
    for other in [other_inner, plain] {
        assert_eq!(p.send(&other), Some(other.clone()));
    }
    assert_eq!(p.h.dev.counters().tx_sw_steering_errors, 0);
}

/// Where the frame a GRE tunnel with a key carries starts: Ethernet 14, IPv4 20, GRE 8.
const GRE_INNER: usize = 14 + 20 + 8;

/// A GRE frame whose inner frame is TCP with sequence number `seq`.
fn gre_tcp(seq: u32) -> Vec<u8> {
    let mut f = gre(GRE_KEY);
    let inner = GRE_INNER;
    f[inner + 23] = 6;
    f[inner + 38..inner + 42].copy_from_slice(&seq.to_be_bytes());
    f[inner + 46] = 5 << 4;
    f
}

/// A GRE frame whose inner frame is MPLS with label `label`.
fn gre_mpls(label: u32) -> Vec<u8> {
    let mut f = gre(GRE_KEY);
    let inner = GRE_INNER;
    f[inner + 12..inner + 14].copy_from_slice(&0x8847u16.to_be_bytes());
    f[inner + 14..inner + 18].copy_from_slice(&(label << 12 | 1 << 8 | 64).to_be_bytes());
    f
}

#[test]
fn firmware_entries_match_the_inner_tcp_sequence_number_and_mpls_label() {
    // Inner TCP sequence number (misc_parameters_3).
    let mut p = Plug::new(EmuConfig::default());
    let h = &mut p.h;
    let root = create_table_of(h, FLOW_TABLE_TYPE_NIC_TX, 0, 2, None).unwrap();
    let at = (FLOW_TABLE_TYPE_NIC_TX, root, 0);
    let group = group_matching(h, at, flow::MATCH_MISC_PARAMETERS_3, |c| {
        c.misc_parameters_3_mut().set_inner_tcp_seq_num(0xffff_ffff);
    })
    .unwrap();
    entry_matching(h, at, group, flow::FLOW_CONTEXT_ACTION_DROP, |v| {
        v.misc_parameters_3_mut().set_inner_tcp_seq_num(0xabc);
    })
    .unwrap();
    set_root_of(h, FLOW_TABLE_TYPE_NIC_TX, root).unwrap();
    assert_eq!(p.send(&gre_tcp(0xabc)), None, "inner sequence 0xabc");
    let other = gre_tcp(0xabd);
    assert_eq!(p.send(&other), Some(other.clone()));

    // Inner first MPLS label (misc_parameters_2).
    let mut p = Plug::new(EmuConfig::default());
    let h = &mut p.h;
    let root = create_table_of(h, FLOW_TABLE_TYPE_NIC_TX, 0, 2, None).unwrap();
    let at = (FLOW_TABLE_TYPE_NIC_TX, root, 0);
    let group = group_matching(h, at, flow::MATCH_MISC_PARAMETERS_2, |c| {
        c.misc_parameters_2_mut().set_inner_first_mpls(0xffff_f000);
    })
    .unwrap();
    entry_matching(h, at, group, flow::FLOW_CONTEXT_ACTION_DROP, |v| {
        v.misc_parameters_2_mut().set_inner_first_mpls(300 << 12);
    })
    .unwrap();
    set_root_of(h, FLOW_TABLE_TYPE_NIC_TX, root).unwrap();
    assert_eq!(p.send(&gre_mpls(300)), None, "inner label 300");
    let other = gre_mpls(301);
    assert_eq!(p.send(&other), Some(other.clone()));
}
