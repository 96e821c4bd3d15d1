//! Steering on GTP-U, which the model's flex parsers are configured for (`FLEX_PARSER_PROFILE_
//! ENABLE=3` on a ConnectX-6 Dx): what DPDK's mlx5 PMD and rdma-core's software steering read
//! of the capabilities, flow entries on its header (a `gtp` item), on the dwords the parsers
//! sample (a `gtp_psc` item's QFI) and on the packet a G-PDU carries, and steering entries'
//! tunnel header and flex parser lookups. The frames go out of an SQ through the transmit
//! tables and come back on a loopback plug.

use cxdirect_emu::testkit::dr::drop_by_lookup;
use cxdirect_emu::testkit::flow_tables::{
    create_table_of, entry_matching, group_matching, misc3_drop_in_tx_root, set_root_of,
};
use cxdirect_emu::testkit::plug::Plug;
use cxdirect_emu::testkit::tunnel_frame::tunnelled_frame;
use cxdirect_emu::EmuConfig;
use cxdirect_hw::flow::{self, FLOW_TABLE_TYPE_NIC_TX};
use cxdirect_hw::hca::cap_type;

const TEID: u32 = 0x00ab_cdef;
/// `FLEX_PARSER_TNL_HEADER`: the tunnel header as the flex parser reads it.
const FLEX_PARSER_TNL_HEADER: u16 = 0x000e;

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
    misc3_drop_in_tx_root(
        &mut p.h,
        |m| {
            m.set_gtpu_teid(0xffff_ffff).set_gtpu_msg_type(0xff);
        },
        |v| {
            v.set_gtpu_teid(TEID).set_gtpu_msg_type(0xff);
        },
    );
    p.drops_only(
        &gtpu(TEID, 0xff),
        [
            gtpu(TEID + 1, 0xff),
            gtpu(TEID, 1),
            cxdirect_emu::testkit::udp_frame(64, 9),
        ],
    );

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
    assert_eq!(p.send(&gtpu(TEID, 0xff)), None, "a G-PDU's inner UDP");
    // An echo request's bytes past the header are no packet; a plain frame has no inner one.
    for other in [gtpu(TEID, 1), cxdirect_emu::testkit::udp_frame(64, 9)] {
        assert_eq!(p.send(&other), Some(other.clone()));
    }
}

/// rdma-core's software steering matches GTP-U through the flex parser's tunnel header lookup
/// when the device reports GTP-U parsed (`dr_matcher_supp_tnl_gtpu`, then
/// `dr_ste_v1_build_flex_parser_tnl_gtpu_tag`); the model projected zeros there before.
#[test]
fn a_steering_entry_s_gtpu_lookup_drops_only_its_teid() {
    let mut p = Plug::new(EmuConfig::default());
    // ste_flex_parser_tnl_gtpu: the message type in byte 1, the TEID in bytes 4..8.
    let mut mask = [0u8; 16];
    mask[1] = 0xff;
    mask[4..8].fill(0xff);
    let mut tag = [0u8; 16];
    tag[1] = 0xff;
    tag[4..8].copy_from_slice(&TEID.to_be_bytes());
    drop_by_lookup(&mut p, FLEX_PARSER_TNL_HEADER, 0x4f00, mask, tag);
    p.drops_only(&gtpu(TEID, 0xff), [gtpu(TEID ^ 0x10, 0xff), gtpu(TEID, 1)]);
    assert_eq!(p.h.dev.counters().tx_sw_steering_errors, 0);
}

/// DPDK's `gtp_psc` item (`flow_dv_translate_item_gtp_psc`): the E flag in `gtpu_msg_flags`,
/// the next extension type 0x85 in `gtpu_dw_2`, the QFI in `gtpu_first_ext_dw_0`. Before the
/// model's flex parsers sampled GTP-U such a group was refused (BAD_PARAM).
#[test]
fn a_firmware_entry_on_the_gtpu_dwords_matches_a_pdu_session_s_qfi() {
    let mut p = Plug::new(EmuConfig::default());
    misc3_drop_in_tx_root(
        &mut p.h,
        |m| {
            m.set_gtpu_msg_flags(0x04)
                .set_gtpu_dw_2(0xff)
                .set_gtpu_first_ext_dw_0(0x3f00);
        },
        |v| {
            v.set_gtpu_msg_flags(0x04)
                .set_gtpu_dw_2(0x85)
                .set_gtpu_first_ext_dw_0(9 << 8);
        },
    );
    p.drops_only(&gtpu_psc(TEID, 9), [gtpu_psc(TEID, 10), gtpu(TEID, 0xff)]);
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
    p.drops_only(&gtpu_psc(TEID, 9), [gtpu_psc(TEID, 10), gtpu(TEID, 0xff)]);
    assert_eq!(p.h.dev.counters().tx_sw_steering_errors, 0);
}
