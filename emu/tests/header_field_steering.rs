//! Firmware flow entries on the header fields past addresses and ports: DSCP and ECN (as
//! mlx5e's TC flower `ip_tos` and mlx5_ib's IPv4 flow spec `tos` fill them, `en_tc.c`
//! `parse_tc_fte`, `fs.c` `set_tos`), TTL and hop limit (`ttl_hoplimit`), the first VLAN tag's
//! kind (`cvlan_tag`, `svlan_tag`, as mlx5e's VLAN table sets them, `mlx5e_add_vlan_rule`), the
//! second tag and the IPv6 flow label in the misc set, and the refusal of criteria on bits no
//! frame's match words carry. Each test drops the frames its entry matches on a transmit root
//! and sends frames out of an SQ to a loopback plug: what comes back was not matched.

use cxdirect_emu::packet::insert_checksums;
use cxdirect_emu::testkit::flow_tables::{
    create_table_of, entry_matching, group_matching, set_root_of,
};
use cxdirect_emu::testkit::plug::Plug;
use cxdirect_emu::testkit::{udp_frame, vlan_tagged, CmdFail, Host};
use cxdirect_emu::{EmuConfig, Syndrome};
use cxdirect_hw::cmd::CmdStatus;
use cxdirect_hw::flow::{self, FteMatchParam, FLOW_TABLE_TYPE_NIC_TX};

/// An IPv4/UDP frame with type of service `tos` and TTL `ttl`, checksums right.
fn v4(tos: u8, ttl: u8) -> Vec<u8> {
    let mut f = udp_frame(64, 1);
    f[15] = tos;
    f[22] = ttl;
    insert_checksums(&mut f, true, true).expect("checksums");
    f
}

/// An IPv6/UDP frame with traffic class `tc`, flow label `label` and hop limit `hops`.
fn v6(tc: u8, label: u32, hops: u8) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x09, 0x86, 0xdd]);
    let first = 6u32 << 28 | u32::from(tc) << 20 | (label & 0x000f_ffff);
    f.extend_from_slice(&first.to_be_bytes());
    f.extend_from_slice(&(8u16 + 64).to_be_bytes());
    f.extend_from_slice(&[17, hops]);
    f.extend_from_slice(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    f.extend_from_slice(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    f.extend_from_slice(&[0x12, 0x34, 0x56, 0x78, 0, 72, 0, 0]);
    f.extend((0..64u8).map(|i| i.wrapping_mul(3)));
    insert_checksums(&mut f, true, true).expect("checksums");
    f
}

const C_TAG: u16 = 0x8100;
const S_TAG: u16 = 0x88a8;

/// A transmit root whose entry 0 drops the frames `value` matches under `mask`, the parts
/// `enable` turns on.
fn dropping_root(
    p: &mut Plug,
    enable: u8,
    mask: impl FnOnce(&mut FteMatchParam<&mut [u8]>),
    value: impl FnOnce(&mut FteMatchParam<&mut [u8]>),
) {
    let h = &mut p.h;
    let root = create_table_of(h, FLOW_TABLE_TYPE_NIC_TX, 0, 2, None).unwrap();
    let at = (FLOW_TABLE_TYPE_NIC_TX, root, 0);
    let g = group_matching(h, at, enable, mask).unwrap();
    entry_matching(h, at, g, flow::FLOW_CONTEXT_ACTION_DROP, value).unwrap();
    set_root_of(h, FLOW_TABLE_TYPE_NIC_TX, root).unwrap();
}

/// Whether `frame` came back through the loopback plug (was not dropped).
fn passes(p: &mut Plug, frame: &[u8]) -> bool {
    p.send(frame).is_some()
}

#[test]
fn an_entry_on_dscp_drops_that_class_whatever_its_ecn_and_ip_version() {
    let mut p = Plug::new(EmuConfig::default());
    // TC flower `ip_tos 0x10/0xfc`: DSCP 4 under a full DSCP mask, ECN not masked.
    dropping_root(
        &mut p,
        flow::MATCH_OUTER_HEADERS,
        |c| {
            c.outer_headers_mut().set_ip_dscp(0x3f);
        },
        |v| {
            v.outer_headers_mut().set_ip_dscp(0x10 >> 2);
        },
    );
    for dropped in [v4(0x10, 64), v4(0x13, 64), v6(0x10, 0, 64)] {
        assert!(!passes(&mut p, &dropped), "DSCP 4 passed");
    }
    for kept in [v4(0, 64), v4(0x20, 64), v4(0x11 << 2, 64), v6(0x20, 0, 64)] {
        assert!(passes(&mut p, &kept), "another DSCP was dropped");
    }
}

#[test]
fn entries_on_ecn_and_on_ttl_or_hop_limit_drop_only_those_values() {
    let mut p = Plug::new(EmuConfig::default());
    dropping_root(
        &mut p,
        flow::MATCH_OUTER_HEADERS,
        |c| {
            c.outer_headers_mut().set_ip_ecn(0x3).set_ttl_hoplimit(0xff);
        },
        |v| {
            v.outer_headers_mut().set_ip_ecn(0x3).set_ttl_hoplimit(1);
        },
    );
    assert!(!passes(&mut p, &v4(0x03, 1)));
    assert!(!passes(&mut p, &v6(0x03, 0, 1)));
    assert!(passes(&mut p, &v4(0x03, 64)));
    assert!(passes(&mut p, &v4(0x02, 1)));
    assert!(passes(&mut p, &v6(0x01, 0, 1)));
}

#[test]
fn an_untagged_rule_on_cvlan_tag_alone_takes_neither_a_customer_nor_a_service_tag() {
    // mlx5e's untagged rule: `cvlan_tag` 0 under a mask of `cvlan_tag` alone, "both S & C
    // tags don't exist" (en_fs.c).
    let mut p = Plug::new(EmuConfig::default());
    dropping_root(
        &mut p,
        flow::MATCH_OUTER_HEADERS,
        |c| {
            c.outer_headers_mut().set_cvlan_tag(true);
        },
        |_| {},
    );
    let plain = v4(0, 64);
    assert!(!passes(&mut p, &plain));
    assert!(passes(&mut p, &vlan_tagged(&plain, &[(C_TAG, 5)])));
    assert!(passes(&mut p, &vlan_tagged(&plain, &[(S_TAG, 5)])));
}

#[test]
fn a_service_tag_rule_takes_the_first_tag_of_kind_s_and_its_vid() {
    // mlx5e's MATCH_STAG_VID rule: `svlan_tag` 1 and `first_vid`.
    let mut p = Plug::new(EmuConfig::default());
    dropping_root(
        &mut p,
        flow::MATCH_OUTER_HEADERS,
        |c| {
            c.outer_headers_mut()
                .set_svlan_tag(true)
                .set_cvlan_tag(true)
                .set_first_vid(0xfff);
        },
        |v| {
            v.outer_headers_mut().set_svlan_tag(true).set_first_vid(7);
        },
    );
    let plain = v4(0, 64);
    assert!(!passes(&mut p, &vlan_tagged(&plain, &[(S_TAG, 7)])));
    assert!(!passes(
        &mut p,
        &vlan_tagged(&plain, &[(S_TAG, 7), (C_TAG, 9)])
    ));
    assert!(passes(&mut p, &vlan_tagged(&plain, &[(C_TAG, 7)])));
    assert!(passes(&mut p, &vlan_tagged(&plain, &[(S_TAG, 8)])));
    assert!(passes(&mut p, &plain));
}

#[test]
fn misc_entries_take_the_second_vlan_tag_and_the_ipv6_flow_label() {
    let mut p = Plug::new(EmuConfig::default());
    dropping_root(
        &mut p,
        flow::MATCH_MISC_PARAMETERS,
        |c| {
            c.misc_parameters_mut()
                .set_outer_second_cvlan_tag(true)
                .set_outer_second_vid(0xfff);
        },
        |v| {
            v.misc_parameters_mut()
                .set_outer_second_cvlan_tag(true)
                .set_outer_second_vid(9);
        },
    );
    let plain = v4(0, 64);
    assert!(!passes(
        &mut p,
        &vlan_tagged(&plain, &[(S_TAG, 7), (C_TAG, 9)])
    ));
    assert!(passes(
        &mut p,
        &vlan_tagged(&plain, &[(S_TAG, 7), (C_TAG, 10)])
    ));
    // One tag is a first tag, not a second.
    assert!(passes(&mut p, &vlan_tagged(&plain, &[(C_TAG, 9)])));

    let mut p = Plug::new(EmuConfig::default());
    dropping_root(
        &mut p,
        flow::MATCH_MISC_PARAMETERS,
        |c| {
            c.misc_parameters_mut()
                .set_outer_ipv6_flow_label(0x000f_ffff);
        },
        |v| {
            v.misc_parameters_mut().set_outer_ipv6_flow_label(0x1_2345);
        },
    );
    assert!(!passes(&mut p, &v6(0, 0x1_2345, 64)));
    assert!(passes(&mut p, &v6(0, 0x1_2346, 64)));
    assert!(passes(&mut p, &v4(0, 64)));
}

/// Writes a group's criteria.
type Criteria = Box<dyn FnOnce(&mut FteMatchParam<&mut [u8]>)>;

/// CREATE_FLOW_GROUP of a transmit table with criteria `mask` in the parts `enable` turns on.
fn group(
    h: &mut Host,
    enable: u8,
    mask: impl FnOnce(&mut FteMatchParam<&mut [u8]>),
) -> Result<u32, CmdFail> {
    let root = create_table_of(h, FLOW_TABLE_TYPE_NIC_TX, 0, 2, None).unwrap();
    group_matching(h, (FLOW_TABLE_TYPE_NIC_TX, root, 0), enable, mask)
}

#[test]
fn criteria_on_bits_no_frame_carries_are_refused_not_ignored() {
    let mut p = Plug::new(EmuConfig::default());
    let h = &mut p.h;
    let outer = flow::MATCH_OUTER_HEADERS;
    let misc = flow::MATCH_MISC_PARAMETERS;
    let inner = flow::MATCH_INNER_HEADERS;
    let refused: [(&str, u8, Criteria); 6] = [
        (
            "l3_ok in a transmit table",
            outer,
            Box::new(|c| {
                c.outer_headers_mut().set_l3_ok(true);
            }),
        ),
        (
            "inner l4_checksum_ok in a transmit table",
            inner,
            Box::new(|c| {
                c.inner_headers_mut().set_l4_checksum_ok(true);
            }),
        ),
        (
            "source_port",
            misc,
            Box::new(|c| {
                c.misc_parameters_mut().set_source_port(0xffff);
            }),
        ),
        (
            "outer_emd_tag",
            misc,
            Box::new(|c| {
                c.misc_parameters_mut().set_outer_emd_tag(true);
            }),
        ),
        (
            "a reserved byte of the misc set",
            misc,
            Box::new(|c| {
                c.misc_parameters_mut().as_bytes_mut()[0x3f] = 1;
            }),
        ),
        (
            "a reserved bit of the headers",
            outer,
            Box::new(|c| {
                c.outer_headers_mut().as_bytes_mut()[0x19] = 1;
            }),
        ),
    ];
    for (what, enable, mask) in refused {
        assert_eq!(
            group(h, enable, mask).expect_err(what),
            CmdFail::status(CmdStatus::BadParameter, Syndrome::BadSteeringParams),
            "{what}"
        );
    }
    // The same bits in a part the group does not enable take no part, and the fields the
    // frames carry are taken.
    group(h, misc, |c| {
        c.outer_headers_mut().set_l3_ok(true);
    })
    .expect("outer bits with only misc enabled");
    group(h, outer, |c| {
        c.outer_headers_mut()
            .set_ipv4_ihl(0xf)
            .set_l4_type(0x3)
            .set_ip_dscp(0x3f)
            .set_ttl_hoplimit(0xff)
            .set_svlan_tag(true);
    })
    .expect("projected header fields");
}

#[test]
fn entries_on_ihl_and_l4_type_take_those_frames() {
    let mut p = Plug::new(EmuConfig::default());
    // `l4_type` UDP (Linux's MLX5_PACKET_L4_TYPE_UDP, 2) with an IPv4 header of 5 words.
    dropping_root(
        &mut p,
        flow::MATCH_OUTER_HEADERS,
        |c| {
            c.outer_headers_mut().set_l4_type(0x3).set_ipv4_ihl(0xf);
        },
        |v| {
            v.outer_headers_mut().set_l4_type(2).set_ipv4_ihl(5);
        },
    );
    assert!(!passes(&mut p, &v4(0, 64)));
    // IPv6 has no IHL.
    assert!(passes(&mut p, &v6(0, 0, 64)));
}
