//! Receive flow entries on the integrity bits (`l3_ok`, `l4_ok`, `ipv4_checksum_ok`,
//! `l4_checksum_ok` of the outer or inner headers), as DPDK's mlx5 PMD writes them for its
//! integrity item (`flow_dv_translate_integrity_l3` and `_l4`, mlx5_flow_dv.c: the item's
//! `l3_ok` sets the hardware's `l3_ok` and, over IPv4, `ipv4_checksum_ok`; its `l4_ok` sets
//! `l4_ok` and `l4_checksum_ok`; only positive matches). The PMD offers the item only when
//! the flow table page reports all eight bits (`mlx5_devx_query_pkt_integrity_match`). Each
//! test roots the plug's receive side in a table whose entry 0 drops what its integrity
//! entry matches and whose entry 1 takes the rest to the plug's RQ; the frames go out of the
//! plug's SQ and come back unless dropped.

use cxdirect_emu::packet::{insert_checksums, ones_complement_sum};
use cxdirect_emu::testkit::flow_tables::{
    create_table_of, entry_matching, group_matching, set_entry, set_root_of, smac_group,
};
use cxdirect_emu::testkit::plug::Plug;
use cxdirect_emu::testkit::tunnel_frame::tunnelled_frame;
use cxdirect_emu::testkit::udp_frame;
use cxdirect_emu::EmuConfig;
use cxdirect_hw::caps::FlowTableNicCap;
use cxdirect_hw::flow::{self, FteMatchSetLyr24, FLOW_TABLE_TYPE_NIC_RX};
use cxdirect_hw::hca::cap_type;

/// Which header set an entry matches.
#[derive(Clone, Copy)]
enum Layer {
    Outer,
    Inner,
}

/// A plug whose receive root drops, at entry 0, the frames whose `layer` headers have every
/// integrity bit `bits` sets, and takes the rest to its RQ at entry 1.
fn plug_dropping(layer: Layer, bits: fn(&mut FteMatchSetLyr24<&mut [u8]>)) -> Plug {
    let mut p = Plug::new(EmuConfig::default());
    let tirn = p.tirn;
    let h = &mut p.h;
    let root = create_table_of(h, FLOW_TABLE_TYPE_NIC_RX, 0, 2, None).unwrap();
    let at = (FLOW_TABLE_TYPE_NIC_RX, root, 0);
    let enable = match layer {
        Layer::Outer => flow::MATCH_OUTER_HEADERS,
        Layer::Inner => flow::MATCH_INNER_HEADERS,
    };
    let g = group_matching(h, at, enable, |c| write(layer, c, bits)).expect("integrity criteria");
    entry_matching(h, at, g, flow::FLOW_CONTEXT_ACTION_DROP, |v| {
        write(layer, v, bits)
    })
    .unwrap();
    let rest = smac_group(h, FLOW_TABLE_TYPE_NIC_RX, root, 1, false).unwrap();
    let to_rq = Some((flow::FLOW_DESTINATION_TYPE_TIR, tirn));
    let fwd = flow::FLOW_CONTEXT_ACTION_FWD_DEST;
    set_entry(
        h,
        FLOW_TABLE_TYPE_NIC_RX,
        root,
        (rest, 1),
        None,
        fwd,
        to_rq,
        None,
    )
    .unwrap();
    set_root_of(h, FLOW_TABLE_TYPE_NIC_RX, root).unwrap();
    p
}

/// Writes `bits` into `layer`'s header set of a match parameter.
fn write(
    layer: Layer,
    m: &mut flow::FteMatchParam<&mut [u8]>,
    bits: fn(&mut FteMatchSetLyr24<&mut [u8]>),
) {
    match layer {
        Layer::Outer => bits(&mut m.outer_headers_mut()),
        Layer::Inner => bits(&mut m.inner_headers_mut()),
    }
}

/// DPDK's `l3_ok` over IPv4: the hardware's `l3_ok` and `ipv4_checksum_ok`.
fn l3_bits(s: &mut FteMatchSetLyr24<&mut [u8]>) {
    s.set_l3_ok(true).set_ipv4_checksum_ok(true);
}

/// DPDK's `l4_ok`: the hardware's `l4_ok` and `l4_checksum_ok`.
fn l4_bits(s: &mut FteMatchSetLyr24<&mut [u8]>) {
    s.set_l4_ok(true).set_l4_checksum_ok(true);
}

/// Whether `frame` came back (was not dropped).
fn passes(p: &mut Plug, frame: &[u8]) -> bool {
    p.send(frame).is_some()
}

/// A datagram whose IPv4 header checksum is wrong.
fn bad_ip_checksum(mut f: Vec<u8>) -> Vec<u8> {
    f[24] ^= 0x5a;
    f
}

/// A datagram whose UDP checksum is wrong.
fn bad_udp_checksum(mut f: Vec<u8>) -> Vec<u8> {
    f[40] ^= 0x01;
    f
}

#[test]
fn the_flow_table_page_offers_the_eight_bits_dpdk_asks_for() {
    let mut p = Plug::new(EmuConfig::default());
    let page = p.h.query_cap(cap_type::FLOW_TABLE, true);
    let f = FlowTableNicCap::new(&page[0x10..]).unwrap();
    let s = f.ft_field_support_2_nic_receive();
    assert!(
        s.inner_l3_ok()
            && s.inner_l4_ok()
            && s.outer_l3_ok()
            && s.outer_l4_ok()
            && s.inner_ipv4_checksum_ok()
            && s.inner_l4_checksum_ok()
            && s.outer_ipv4_checksum_ok()
            && s.outer_l4_checksum_ok()
    );
}

#[test]
fn an_l3_entry_takes_good_ipv4_headers_and_leaves_a_bad_checksum() {
    let mut p = plug_dropping(Layer::Outer, l3_bits);
    let good = udp_frame(64, 1);
    assert!(
        !passes(&mut p, &good),
        "a good header passed the l3_ok entry"
    );
    assert!(passes(&mut p, &bad_ip_checksum(good.clone())));
    // A bad UDP checksum is not the L3 entry's business.
    assert!(!passes(&mut p, &bad_udp_checksum(good.clone())));
    // A frame without IP has no l3_ok.
    let mut arp = good;
    arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
    assert!(passes(&mut p, &arp));
}

#[test]
fn an_l4_entry_takes_good_segments_and_leaves_bad_checksums_and_lengths() {
    let mut p = plug_dropping(Layer::Outer, l4_bits);
    let good = udp_frame(64, 2);
    assert!(!passes(&mut p, &good));
    assert!(passes(&mut p, &bad_udp_checksum(good.clone())));
    // A UDP length past the IP packet: not l4_ok, whatever the checksum.
    let mut long = good.clone();
    long[38..40].copy_from_slice(&300u16.to_be_bytes());
    assert!(passes(&mut p, &long));
    // A bad IP header checksum leaves the L4 bits as they are.
    assert!(!passes(&mut p, &bad_ip_checksum(good)));
}

#[test]
fn only_ipv4_checksum_ok_masked_takes_a_good_checksum_whatever_the_length() {
    let mut p = plug_dropping(Layer::Outer, |s| {
        s.set_ipv4_checksum_ok(true);
    });
    let good = udp_frame(64, 3);
    assert!(!passes(&mut p, &good));
    assert!(passes(&mut p, &bad_ip_checksum(good.clone())));
    // A total length past the frame, the header's checksum right for it: no l3_ok, but
    // ipv4_checksum_ok.
    let mut long = good;
    long[16..18].copy_from_slice(&400u16.to_be_bytes());
    long[24..26].fill(0);
    let sum = !ones_complement_sum(&long[14..34], 0);
    long[24..26].copy_from_slice(&sum.to_be_bytes());
    assert!(!passes(&mut p, &long));
}

/// A VXLAN frame carrying `inner`, its outer IPv4 checksum right and no outer UDP checksum.
fn vxlan(inner: &[u8]) -> Vec<u8> {
    let udp_len = (8 + 8 + inner.len()) as u16;
    let mut tunnel = vec![0xc0, 0x00, 0x12, 0xb5];
    tunnel.extend_from_slice(&udp_len.to_be_bytes());
    tunnel.extend_from_slice(&[0, 0, 0x08, 0, 0, 0, 0, 0, 0x2a, 0]);
    let mut f = tunnelled_frame(17, &tunnel, inner);
    insert_checksums(&mut f, true, false).expect("outer IPv4 checksum");
    f
}

#[test]
fn an_inner_entry_reads_the_tunnelled_packet_not_the_outer_one() {
    let mut p = plug_dropping(Layer::Inner, l3_bits);
    let inner = udp_frame(64, 4);
    assert!(!passes(&mut p, &vxlan(&inner)));
    assert!(passes(&mut p, &vxlan(&bad_ip_checksum(inner.clone()))));
    // The outer header's checksum broken, the inner one right: the inner entry still takes it.
    let mut outer_bad = vxlan(&inner);
    outer_bad[24] ^= 0x11;
    assert_ne!(ones_complement_sum(&outer_bad[14..34], 0), 0xffff);
    assert!(!passes(&mut p, &outer_bad));
    // A frame without a tunnel has no inner l3_ok.
    assert!(passes(&mut p, &inner));
}
