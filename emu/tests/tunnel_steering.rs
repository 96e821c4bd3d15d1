//! Steering on tunnel fields: a frame's GENEVE, VXLAN or GRE header in a flow entry's `misc`
//! match (GENEVE's VNI and O flag as rdma-core's `test_geneve_match_tx` matches them on its
//! transmit root, through mlx5_ib's `mlx5dv_create_flow`) and its VXLAN-GPE header in the
//! third misc set (as DPDK's mlx5 PMD writes a `vxlan-gpe` item), GENEVE's and VXLAN-GPE's
//! header in a steering entry's flex parser lookup (`FLEX_PARSER_TNL_HEADER`,
//! `ste_flex_parser_tnl_geneve` and `_vxlan_gpe`; GTP-U's in `gtpu_steering.rs`), with
//! the field capabilities rdma-core's GENEVE tests ask of the receive tables; the headers a
//! tunnel carries in a flow entry's `inner_headers` (as mlx5_ib fills them for a flow spec
//! with `IB_FLOW_SPEC_INNER`) and in a steering entry's inner lookups (`ETHL2_SRC_I`, which
//! rdma-core's `dr_ste_v1_build_eth_l2_src_init` makes from a matcher's inner criteria). The
//! frames go out of an SQ through the transmit tables and come back on a loopback plug.

use cxdirect_emu::testkit::dr::drop_by_lookup;
use cxdirect_emu::testkit::flow_tables::{
    create_table_of, entry_matching, group_matching, misc3_drop_in_tx_root, set_root_of,
};
use cxdirect_emu::testkit::plug::Plug;
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
/// `FLEX_PARSER_TNL_HEADER`: the tunnel header as the flex parser reads it.
const FLEX_PARSER_TNL_HEADER: u16 = 0x000e;

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
    p.drops_only(
        &geneve(GENEVE_VNI, true),
        [
            geneve(GENEVE_VNI, false),
            geneve(GENEVE_VNI + 1, true),
            gre(GENEVE_VNI),
        ],
    );
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
    misc3_drop_in_tx_root(
        &mut p.h,
        |m| {
            m.set_outer_vxlan_gpe_vni(0x00ff_ffff)
                .set_outer_vxlan_gpe_next_protocol(0xff)
                .set_outer_vxlan_gpe_flags(0xff);
        },
        |v| {
            v.set_outer_vxlan_gpe_vni(GENEVE_VNI)
                .set_outer_vxlan_gpe_next_protocol(3)
                .set_outer_vxlan_gpe_flags(0x0c);
        },
    );
    p.drops_only(
        &vxlan_gpe(GENEVE_VNI, 3),
        [
            vxlan_gpe(GENEVE_VNI + 1, 3),
            vxlan_gpe(GENEVE_VNI, 1),
            vxlan(GENEVE_VNI),
            geneve(GENEVE_VNI, false),
        ],
    );
}

/// rdma-core's software steering matches VXLAN-GPE through the flex parser's tunnel header
/// lookup on a ConnectX-6 Dx (`dr_matcher_supp_vxlan_gpe`, then
/// `dr_ste_v1_build_flex_parser_tnl_vxlan_gpe_tag`); the model projected zeros there before.
#[test]
fn a_steering_entry_s_vxlan_gpe_lookup_drops_only_its_vni_and_next_protocol() {
    let mut p = Plug::new(EmuConfig::default());
    // ste_flex_parser_tnl_vxlan_gpe: the next protocol in byte 3, the VNI in bytes 4..7.
    let mut mask = [0u8; 16];
    mask[3] = 0xff;
    mask[4..7].fill(0xff);
    let mut tag = [0u8; 16];
    tag[3] = 1;
    tag[4..7].copy_from_slice(&GENEVE_VNI.to_be_bytes()[1..]);
    drop_by_lookup(&mut p, FLEX_PARSER_TNL_HEADER, 0x1e00, mask, tag);
    p.drops_only(
        &vxlan_gpe(GENEVE_VNI, 1),
        [
            vxlan_gpe(GENEVE_VNI ^ 0x10, 1),
            vxlan_gpe(GENEVE_VNI, 3),
            vxlan(GENEVE_VNI),
        ],
    );
    assert_eq!(p.h.dev.counters().tx_sw_steering_errors, 0);
}

#[test]
fn a_steering_entry_s_geneve_lookup_drops_only_its_vni() {
    let mut p = Plug::new(EmuConfig::default());
    // ste_flex_parser_tnl_geneve: the VNI in bytes 4..7, the O flag at bit 8.
    let mut mask = [0u8; 16];
    mask[1] = 0x80;
    mask[4..7].fill(0xff);
    let mut tag = [0u8; 16];
    tag[4..7].copy_from_slice(&GENEVE_VNI.to_be_bytes()[1..]);
    drop_by_lookup(&mut p, FLEX_PARSER_TNL_HEADER, 0x4e00, mask, tag);
    p.drops_only(
        &geneve(GENEVE_VNI, false),
        [geneve(GENEVE_VNI ^ 0x10, false), gre(GRE_KEY)],
    );
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
    misc3_drop_in_tx_root(
        &mut p.h,
        |m| {
            m.set_inner_tcp_seq_num(0xffff_ffff);
        },
        |v| {
            v.set_inner_tcp_seq_num(0xabc);
        },
    );
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
