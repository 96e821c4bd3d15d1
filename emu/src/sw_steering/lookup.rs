//! A packet's 16-byte tag per lookup type: the packet projected into the layout an entry of
//! that lookup type compares under its bit mask. Layouts are rdma-core mlx5_ifc.h's
//! `ste_*_v1` structures (bit offsets counted from the start, most significant bit first), the
//! fields those the `dr_ste_v1_build_*_tag` functions fill from a rule's match value; the model
//! fills each from the parsed packet and its metadata registers. Lookup type numbers are
//! dr_ste_v1.h `enum dr_ste_v1_lu_type`.
//!
//! Inner lookup types (`_I`) project the packet a tunnel the model knows carries (GRE, VXLAN,
//! GENEVE: `crate::tunnel`) through the same layouts as the outer ones (rdma-core builds both
//! with one function, taking the rule's inner or outer header set); a packet without such a
//! tunnel projects to an all-zero tag (inferred: a rule on inner fields then matches only zero
//! values). Fields the model does not track (port, QP type, checksum-ok bits, loopback flags)
//! stay 0.

use super::hash::TAG_SIZE;
use crate::packet::{IpAddrs, L3Kind, L4Kind, Parsed, TPID_8021AD};
use crate::tunnel::Kind;

/// The metadata registers a packet carries through steering (reg_c_0..7, reg_a, reg_b).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Metadata {
    /// reg_c_0..reg_c_7 (`metadata_reg_c_*` in misc2).
    pub(crate) reg_c: [u32; 8],
    /// reg_a (`metadata_reg_a`; modify field `GNRL_PURPOSE`).
    pub(crate) reg_a: u32,
    /// reg_b (`metadata_reg_b`; modify field `METADATA_2_CQE`).
    pub(crate) reg_b: u32,
}

/// What a lookup reads of a packet: its parse, its bytes (for the fields the parse does not
/// keep: DSCP, ECN, TTL, IPv6 flow label, the TCP NS bit) and its metadata.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PacketView<'a> {
    /// The parse of `frame`.
    pub(crate) parsed: &'a Parsed,
    /// The frame's bytes.
    pub(crate) frame: &'a [u8],
    /// The metadata registers.
    pub(crate) meta: &'a Metadata,
}

/// Parses `frame` and hands `look` its view with `meta`: what the tests of lookups and
/// definers project.
#[cfg(test)]
pub(crate) fn viewed<R>(
    frame: &[u8],
    meta: &Metadata,
    look: impl FnOnce(&PacketView<'_>) -> R,
) -> R {
    let parsed = crate::packet::parse(frame);
    look(&PacketView {
        parsed: &parsed,
        frame,
        meta,
    })
}

/// The lookup types the model projects packets for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LookupType {
    /// 0x000f (`DR_STE_LU_TYPE_DONT_CARE`): table anchors and always-hit/miss entries, which
    /// carry zero mask; numerically also `ETHL3_IPV4_MISC_I`, which the model projects to
    /// zeros (it cannot tell the two apart).
    DontCare,
    /// 0x0003 / 0x0004 (`ETHL2_O/_I`, `ste_eth_l2_dst_v1`): destination MAC and L2 fields.
    Ethl2Dst { inner: bool },
    /// 0x0005 / 0x0006 (`ETHL2_SRC_O/_I`, `ste_eth_l2_src_v1`): source MAC and L2 fields.
    Ethl2Src { inner: bool },
    /// 0x000b / 0x000c (`ETHL2_SRC_DST_O/_I`, `ste_eth_l2_src_dst_v1`).
    Ethl2SrcDst { inner: bool },
    /// 0x0007 / 0x0008 (`ETHL3_IPV4_5_TUPLE_O/_I`, `ste_eth_l3_ipv4_5_tuple_v1`).
    Ipv4FiveTuple { inner: bool },
    /// 0x0009 / 0x000a (`ETHL4_O/_I`, `ste_eth_l4_v1`).
    Ethl4 { inner: bool },
    /// 0x000e (`FLEX_PARSER_TNL_HEADER`): the tunnel header as the flex parser reads it; for
    /// GENEVE `ste_flex_parser_tnl_geneve` (option length, O flag, protocol type, VNI), for
    /// VXLAN-GPE `ste_flex_parser_tnl_vxlan_gpe` (flags, next protocol, VNI), for GTP-U
    /// `ste_flex_parser_tnl_gtpu` (flags, message type, TEID), the layouts the model projects
    /// (a ConnectX-6 Dx parses the first two natively: rdma-core's
    /// `dr_matcher_supp_tnl_geneve` and `dr_matcher_supp_vxlan_gpe` for format 1; GTP-U with
    /// the flex parser the model reports, `dr_matcher_supp_tnl_gtpu`); other packets project
    /// to zeros.
    FlexParserTunnel,
    /// 0x0113 / 0x0114 (`ETHL4_MISC_O/_I`): for a TCP or UDP packet `ste_eth_l4_misc_v1`
    /// (window, urgent pointer, acknowledgement and sequence numbers, UDP length, checksum;
    /// rdma-core fills the two numbers, `dr_ste_v1_build_eth_l4_misc_tag`), for an ICMP or
    /// ICMPv6 packet `ste_icmp_v1` (first payload word, header data, type, code;
    /// `dr_ste_v1_build_icmp_tag`, which rdma-core writes with the same lookup type, so the
    /// device's projection follows the packet's L4 protocol: an inference).
    Ethl4Misc { inner: bool },
    /// 0x010b / 0x010c (`MPLS_O/_I`, `ste_mpls_v1`): the first MPLS label stack entry
    /// (`mpls0_label`, `_exp`, `_s_bos`, `_ttl`), all rdma-core's `DR_STE_SET_MPLS` fills; the
    /// qualifier and `mpls_ok` bits and the later labels stay 0.
    Mpls { inner: bool },
    /// 0x010f (`STEERING_REGISTERS_0`, `ste_register_0`): reg_c_0..3.
    Registers0,
    /// 0x0110 (`STEERING_REGISTERS_1`, `ste_register_1`): reg_c_4..7.
    Registers1,
    /// 0x0111 / 0x0112 (`FLEX_PARSER_0` / `_1`, `ste_flex_parser_0` / `_1`): the dwords flex
    /// parsers 0..=3 / 4..=7 sample (`crate::flex_parser`), parser 3 (7) first and 0 (4) last
    /// (rdma-core's `dr_ste_calc_flex_parser_offset`).
    FlexParsers { second: bool },
    /// 0x040f (`DR_STE_V1_LU_TYPE_MATCH | DONT_CARE`): rdma-core's action-only extension
    /// entries (`dr_ste_v1_arr_init_next_match`), which match everything.
    MatchExtension,
}

/// A lookup type the model cannot project a packet for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("unsupported STE lookup type {0:#06x}")]
pub(crate) struct LookupError(pub(crate) u16);

impl LookupType {
    /// The lookup type with number `raw`.
    pub(crate) fn from_raw(raw: u16) -> Result<Self, LookupError> {
        Ok(match raw {
            0x000f => Self::DontCare,
            0x0003 | 0x0004 => Self::Ethl2Dst {
                inner: raw == 0x0004,
            },
            0x0005 | 0x0006 => Self::Ethl2Src {
                inner: raw == 0x0006,
            },
            0x000b | 0x000c => Self::Ethl2SrcDst {
                inner: raw == 0x000c,
            },
            0x0007 | 0x0008 => Self::Ipv4FiveTuple {
                inner: raw == 0x0008,
            },
            0x0009 | 0x000a => Self::Ethl4 {
                inner: raw == 0x000a,
            },
            0x000e => Self::FlexParserTunnel,
            0x0113 | 0x0114 => Self::Ethl4Misc {
                inner: raw == 0x0114,
            },
            0x010b | 0x010c => Self::Mpls {
                inner: raw == 0x010c,
            },
            0x010f => Self::Registers0,
            0x0110 => Self::Registers1,
            0x0111 | 0x0112 => Self::FlexParsers {
                second: raw == 0x0112,
            },
            0x040f => Self::MatchExtension,
            other => return Err(LookupError(other)),
        })
    }

    /// The outer lookup type of the same layout (itself for the others).
    fn outer(self) -> Self {
        match self {
            Self::Ethl2Dst { .. } => Self::Ethl2Dst { inner: false },
            Self::Ethl2Src { .. } => Self::Ethl2Src { inner: false },
            Self::Ethl2SrcDst { .. } => Self::Ethl2SrcDst { inner: false },
            Self::Ipv4FiveTuple { .. } => Self::Ipv4FiveTuple { inner: false },
            Self::Ethl4 { .. } => Self::Ethl4 { inner: false },
            Self::Ethl4Misc { .. } => Self::Ethl4Misc { inner: false },
            other => other,
        }
    }

    /// The packet's tag for this lookup type.
    pub(crate) fn tag(self, pkt: &PacketView<'_>) -> [u8; TAG_SIZE] {
        let mut t = [0u8; TAG_SIZE];
        match self {
            Self::DontCare | Self::MatchExtension => {}
            Self::Ethl2Dst { inner: true }
            | Self::Ethl2Src { inner: true }
            | Self::Ethl2SrcDst { inner: true }
            | Self::Ipv4FiveTuple { inner: true }
            | Self::Ethl4 { inner: true }
            | Self::Ethl4Misc { inner: true } => {
                if let Some((frame, parsed)) = crate::tunnel::inner_packet(pkt.frame, pkt.parsed) {
                    let inner = PacketView {
                        parsed: &parsed,
                        frame,
                        meta: pkt.meta,
                    };
                    t = self.outer().tag(&inner);
                }
            }
            Self::Ethl2Dst { inner: false } => l2_one_mac(&mut t, pkt.parsed, pkt.parsed.dst_mac),
            Self::Ethl2Src { inner: false } => l2_one_mac(&mut t, pkt.parsed, pkt.parsed.src_mac),
            Self::Ethl2SrcDst { inner: false } => l2_src_dst(&mut t, pkt.parsed),
            Self::Ipv4FiveTuple { inner: false } => ipv4_five_tuple(&mut t, pkt),
            Self::Ethl4 { inner: false } => eth_l4(&mut t, pkt),
            Self::Ethl4Misc { inner: false } => eth_l4_misc(&mut t, pkt),
            Self::FlexParserTunnel => tunnel_header(&mut t, pkt),
            Self::Mpls { inner } => {
                let entry = if inner {
                    crate::mpls::inner_first_entry(pkt.frame, pkt.parsed)
                } else {
                    crate::mpls::first_entry(pkt.frame, pkt.parsed)
                };
                t[4..8].copy_from_slice(&entry.unwrap_or(0).to_be_bytes());
            }
            Self::FlexParsers { second } => {
                let samples = crate::flex_parser::samples(pkt.frame, pkt.parsed);
                let four = if second { &samples[4..] } else { &samples[..4] };
                for (id, sample) in four.iter().enumerate() {
                    let at = 4 * (3 - id);
                    t[at..at + 4].copy_from_slice(&sample.to_be_bytes());
                }
            }
            Self::Registers0 => registers(&mut t, &pkt.meta.reg_c[..4]),
            Self::Registers1 => registers(&mut t, &pkt.meta.reg_c[4..]),
        }
        t
    }
}

/// Writes `value`'s low `width` bits at bit `off` (from the tag's start, most significant bit
/// first, as mlx5_ifc.h counts). Widths up to 32; fields never cross the tag's end.
pub(super) fn put(t: &mut [u8], off: usize, width: usize, value: u32) {
    for i in 0..width {
        let bit = (value >> (width - 1 - i)) & 1;
        let pos = off + i;
        let mask = 0x80u8 >> (pos % 8);
        if bit != 0 {
            t[pos / 8] |= mask;
        } else {
            t[pos / 8] &= !mask;
        }
    }
}

/// `l3_type` codes (dr_ste.h `STE_IPV4`, `STE_IPV6`).
pub(super) fn l3_type(p: &Parsed) -> u32 {
    match p.l3 {
        L3Kind::None => 0,
        L3Kind::Ipv4 => 1,
        L3Kind::Ipv6 => 2,
    }
}

/// `l4_type` codes (dr_ste.h `STE_TCP`, `STE_UDP`).
pub(super) fn l4_type(p: &Parsed) -> u32 {
    match p.l4 {
        L4Kind::Tcp => 1,
        L4Kind::Udp => 2,
        L4Kind::None | L4Kind::Other => 0,
    }
}

/// The first and second VLAN tags with their qualifiers (mlx5dv_dr.h `DR_STE_SVLAN` 1,
/// `DR_STE_CVLAN` 2): (qualifier, priority, cfi, vid) each, zeros when absent.
pub(super) fn vlans(p: &Parsed) -> [(u32, u32, u32, u32); 2] {
    let one = |tag: Option<crate::packet::VlanTag>| match tag {
        None => (0, 0, 0, 0),
        Some(v) => (
            if v.tpid == TPID_8021AD { 1 } else { 2 },
            u32::from(v.pcp()),
            u32::from(v.dei()),
            u32::from(v.vid()),
        ),
    };
    match p.outer_vlan {
        Some(_) => [one(p.outer_vlan), one(p.vlan)],
        None => [one(p.vlan), (0, 0, 0, 0)],
    }
}

/// `ste_eth_l2_src_v1` / `ste_eth_l2_dst_v1` (the same layout with the other MAC).
fn l2_one_mac(t: &mut [u8; TAG_SIZE], p: &Parsed, mac: [u8; 6]) {
    let [first, second] = vlans(p);
    put(t, 0x03, 1, u32::from(p.is_fragment()));
    put(t, 0x0a, 2, l3_type(p));
    put(t, 0x0c, 2, l4_type(p));
    put(t, 0x0e, 2, first.0);
    put(t, 0x10, 3, first.1);
    put(t, 0x13, 1, first.2);
    put(t, 0x14, 12, first.3);
    t[4..10].copy_from_slice(&mac);
    put(t, 0x50, 16, u32::from(p.ethertype.unwrap_or(0)));
    let syn = p.l4 == L4Kind::Tcp && p.tcp_flags & crate::packet::TCP_SYN != 0;
    put(t, 0x66, 1, u32::from(syn));
    put(t, 0x6e, 2, second.0);
    put(t, 0x70, 3, second.1);
    put(t, 0x73, 1, second.2);
    put(t, 0x74, 12, second.3);
}

/// `ste_eth_l2_src_dst_v1`: dmac_47_16, smac_47_16, dmac_15_0, l3 type and first VLAN,
/// smac_15_0.
fn l2_src_dst(t: &mut [u8; TAG_SIZE], p: &Parsed) {
    let [first, _] = vlans(p);
    t[0..4].copy_from_slice(&p.dst_mac[..4]);
    t[4..8].copy_from_slice(&p.src_mac[..4]);
    t[8..10].copy_from_slice(&p.dst_mac[4..]);
    put(t, 0x5a, 2, l3_type(p));
    put(t, 0x5e, 2, first.0);
    put(t, 0x60, 3, first.1);
    put(t, 0x63, 1, first.2);
    put(t, 0x64, 12, first.3);
    t[14..16].copy_from_slice(&p.src_mac[4..]);
}

/// The IP header's traffic class byte (IPv4 TOS, IPv6 traffic class), TTL or hop limit, and
/// IPv6 flow label, read from the frame; zeros when absent.
pub(super) fn ip_extras(pkt: &PacketView<'_>) -> (u8, u8, u32) {
    let at = |o: usize| {
        pkt.frame
            .get(pkt.parsed.l3_offset + o)
            .copied()
            .unwrap_or(0)
    };
    match pkt.parsed.l3 {
        L3Kind::None => (0, 0, 0),
        L3Kind::Ipv4 => (at(1), at(8), 0),
        L3Kind::Ipv6 => {
            let tc = (at(0) << 4) | (at(1) >> 4);
            let label = u32::from(at(1) & 0x0f) << 16 | u32::from(at(2)) << 8 | u32::from(at(3));
            (tc, at(7), label)
        }
    }
}

/// The nine TCP flag bits (NS, CWR, ECE, URG, ACK, PSH, RST, SYN, FIN), 0 unless TCP.
pub(super) fn tcp_flags9(pkt: &PacketView<'_>) -> u32 {
    if pkt.parsed.l4 != L4Kind::Tcp {
        return 0;
    }
    let ns = pkt
        .frame
        .get(pkt.parsed.l4_offset + 12)
        .map_or(0, |b| b & 1);
    u32::from(ns) << 8 | u32::from(pkt.parsed.tcp_flags)
}

/// TCP/UDP ports, zero for other protocols.
pub(super) fn ports(p: &Parsed) -> (u32, u32) {
    match p.l4 {
        L4Kind::Tcp | L4Kind::Udp => (u32::from(p.src_port), u32::from(p.dst_port)),
        L4Kind::None | L4Kind::Other => (0, 0),
    }
}

/// `ste_eth_l3_ipv4_5_tuple_v1`: addresses (IPv4 only), ports, flags, DSCP/ECN, protocol.
fn ipv4_five_tuple(t: &mut [u8; TAG_SIZE], pkt: &PacketView<'_>) {
    let p = pkt.parsed;
    if let Some(IpAddrs::V4 { src, dst }) = p.addrs {
        t[0..4].copy_from_slice(&src);
        t[4..8].copy_from_slice(&dst);
    }
    let (sport, dport) = ports(p);
    put(t, 0x40, 16, sport);
    put(t, 0x50, 16, dport);
    put(t, 0x66, 1, u32::from(p.is_fragment()));
    put(t, 0x67, 9, tcp_flags9(pkt));
    let (tos, _, _) = ip_extras(pkt);
    put(t, 0x70, 8, u32::from(tos));
    put(t, 0x78, 8, u32::from(p.ip_proto.unwrap_or(0)));
}

/// `ste_eth_l4_v1`: IP version, DSCP/ECN, hop limit, protocol, ports, fragment bits, flow
/// label, TCP data offset and flags, IPv6 payload length.
fn eth_l4(t: &mut [u8; TAG_SIZE], pkt: &PacketView<'_>) {
    let p = pkt.parsed;
    let (tos, ttl, label) = ip_extras(pkt);
    let version = match p.l3 {
        L3Kind::None => 0,
        L3Kind::Ipv4 => 4,
        L3Kind::Ipv6 => 6,
    };
    put(t, 0x00, 4, version);
    put(t, 0x08, 8, u32::from(tos));
    put(t, 0x10, 8, u32::from(ttl));
    put(t, 0x18, 8, u32::from(p.ip_proto.unwrap_or(0)));
    let (sport, dport) = ports(p);
    put(t, 0x20, 16, sport);
    put(t, 0x30, 16, dport);
    put(t, 0x40, 1, u32::from(p.is_fragment() && p.frag_offset == 0));
    put(t, 0x4c, 20, label);
    if p.l4 == L4Kind::Tcp {
        put(t, 0x60, 4, (p.l4_len / 4) as u32 & 0xf);
    }
    put(t, 0x66, 1, u32::from(p.is_fragment()));
    put(t, 0x67, 9, tcp_flags9(pkt));
    if p.l3 == L3Kind::Ipv6 {
        let paylen = p
            .ip_end
            .saturating_sub(p.l3_offset + crate::packet::IPV6_HEADER_LEN);
        put(t, 0x70, 16, paylen.min(0xffff) as u32);
    }
}

/// `ste_eth_l4_misc_v1` for TCP and UDP, `ste_icmp_v1` for ICMP and ICMPv6; zeros otherwise.
fn eth_l4_misc(t: &mut [u8; TAG_SIZE], pkt: &PacketView<'_>) {
    use crate::l4_fields::{icmp, tcp_seq_ack, tcp_window_urgent, udp_length_checksum};
    let (frame, p) = (pkt.frame, pkt.parsed);
    if let Some(i) = icmp(frame, p) {
        put(t, 0x00, 32, i.payload_data);
        put(t, 0x20, 32, i.header_data);
        put(t, 0x40, 8, u32::from(i.icmp_type));
        put(t, 0x48, 8, u32::from(i.code));
        return;
    }
    if let Some((window, urgent)) = tcp_window_urgent(frame, p) {
        put(t, 0x00, 16, u32::from(window));
        put(t, 0x10, 16, u32::from(urgent));
    }
    if let Some((seq, ack)) = tcp_seq_ack(frame, p) {
        put(t, 0x20, 32, ack);
        put(t, 0x40, 32, seq);
        let checksum = frame
            .get(p.l4_offset + 16..p.l4_offset + 18)
            .map_or(0, |b| u16::from_be_bytes([b[0], b[1]]));
        put(t, 0x70, 16, u32::from(checksum));
    }
    if let Some((length, checksum)) = udp_length_checksum(frame, p) {
        put(t, 0x60, 16, u32::from(length));
        put(t, 0x70, 16, u32::from(checksum));
    }
}

/// `ste_register_0` / `ste_register_1`: four registers, big-endian, in order.
/// The tunnel header as the flex parser reads it, by the tunnel the frame carries (each
/// layout is the header's first eight bytes with some of its bits left out):
/// - GENEVE, `ste_flex_parser_tnl_geneve`: bits 2..8 the option length, bit 8 the O flag,
///   16..32 the protocol type, 32..56 the VNI (dr_ste_v1.c
///   `dr_ste_v1_build_flex_parser_tnl_geneve_tag`; version and C flag left out);
/// - VXLAN-GPE, `ste_flex_parser_tnl_vxlan_gpe`: bits 0..8 the flags, 24..32 the next
///   protocol, 32..56 the VNI (`dr_ste_v1_build_flex_parser_tnl_vxlan_gpe_tag`);
/// - GTP-U, `ste_flex_parser_tnl_gtpu`: bits 0..8 the flags, 8..16 the message type, 32..64
///   the TEID (`dr_ste_v1_build_flex_parser_tnl_gtpu_tag`; the length left out).
fn tunnel_header(t: &mut [u8; TAG_SIZE], pkt: &PacketView<'_>) {
    match crate::tunnel::kind(pkt.frame, pkt.parsed) {
        Some(Kind::Geneve(at)) => {
            let h = &pkt.frame[at..at + 8];
            put(t, 2, 6, u32::from(h[0] & 0x3f));
            put(t, 8, 1, u32::from(h[1] >> 7));
            put(t, 16, 16, u32::from(u16::from_be_bytes([h[2], h[3]])));
            put(t, 32, 24, u32::from_be_bytes([0, h[4], h[5], h[6]]));
        }
        Some(Kind::VxlanGpe(at)) => {
            let h = &pkt.frame[at..at + 8];
            put(t, 0, 8, u32::from(h[0]));
            put(t, 24, 8, u32::from(h[3]));
            put(t, 32, 24, u32::from_be_bytes([0, h[4], h[5], h[6]]));
        }
        Some(Kind::GtpU(at)) => {
            let h = &pkt.frame[at..at + 8];
            put(t, 0, 8, u32::from(h[0]));
            put(t, 8, 8, u32::from(h[1]));
            put(t, 32, 32, u32::from_be_bytes([h[4], h[5], h[6], h[7]]));
        }
        _ => {}
    }
}

fn registers(t: &mut [u8; TAG_SIZE], regs: &[u32]) {
    for (chunk, r) in t.chunks_exact_mut(4).zip(regs) {
        chunk.copy_from_slice(&r.to_be_bytes());
    }
}
