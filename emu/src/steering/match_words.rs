//! A frame's match words: the fields of `fte_match_param` a received or sent frame carries,
//! as 64-bit words in memory order, which flow groups compare under their criteria
//! (`objects::steering`). The fields no frame carries are refused in a group's criteria
//! (`fw::match_criteria`).

use crate::objects::match_parts::MatchParts;
use crate::objects::MATCH_WORDS;
use crate::packet::{IpAddrs, L3Kind, L4Kind, Parsed, VlanTag, TPID_8021AD, TPID_8021Q};
use crate::tunnel::Kind;
use cxdirect_hw::flow::{FteMatchSetLyr24, FteMatchSetMisc, FteMatchSetMisc2, FteMatchSetMisc3};

/// The match parameter words of a frame ([`match_word`](crate::objects::steering::match_word)
/// order), built for the parts `parts` names and zero elsewhere (a function's flow groups read
/// no other: `Resources::match_parts`): its outer headers; in the misc part the second VLAN
/// tags and IPv6 flow labels ([`layered_misc_fields`]) and, for a tunnel the model knows, the
/// tunnel's fields ([`tunnel_fields`]); the headers a tunnel carries in the inner part (an L3
/// tunnel's inner MACs and ethertype stay zero); the first MPLS entries (`misc_parameters_2`)
/// and the L4 misc fields (`misc_parameters_3`), outer and inner. A frame without a tunnel
/// leaves the tunnel's and the inner fields zero. With [`MatchParts::INTEGRITY`], both header
/// sets carry the packet's integrity bits ([`crate::integrity`]); without, they stay zero: a
/// function none of whose flow groups ever selected one does not checksum every frame it
/// receives for them.
pub(crate) fn frame_match_words(
    parsed: &Parsed,
    frame: &[u8],
    parts: MatchParts,
) -> [u64; MATCH_WORDS] {
    let mut words = [0u64; MATCH_WORDS];
    let put = |words: &mut [u64; MATCH_WORDS], first: usize, bytes: &[u8]| {
        for (word, chunk) in words[first..].iter_mut().zip(bytes.chunks_exact(8)) {
            let mut b = [0u8; 8];
            b.copy_from_slice(chunk);
            *word = u64::from_ne_bytes(b);
        }
    };
    let with_integrity = parts.contains(MatchParts::INTEGRITY);
    if parts.contains(MatchParts::OUTER) {
        put(
            &mut words,
            0,
            headers(parsed, frame, with_integrity).as_bytes(),
        );
    }
    // Everything past the outer headers needs to know the tunnel, if any.
    let past_outer = MatchParts::MISC | MatchParts::INNER | MatchParts::MPLS | MatchParts::MISC3;
    if !parts.intersects(past_outer) {
        return words;
    }
    let kind = crate::tunnel::kind(frame, parsed);
    let inner = kind.and_then(|_| crate::tunnel::inner_packet(frame, parsed));
    let inner = inner.as_ref().map(|(f, p)| (*f, p));
    if parts.contains(MatchParts::MPLS) {
        let (outer_mpls, inner_mpls) = (
            crate::mpls::first_entry(frame, parsed),
            inner.and_then(|(f, p)| crate::mpls::first_entry(f, p)),
        );
        if outer_mpls.is_some() || inner_mpls.is_some() {
            let mut misc2 = FteMatchSetMisc2::zeroed();
            misc2
                .set_outer_first_mpls(outer_mpls.unwrap_or(0))
                .set_inner_first_mpls(inner_mpls.unwrap_or(0));
            put(&mut words, MISC2_WORD, &misc2.as_bytes()[..MPLS_BYTES]);
        }
    }
    if parts.contains(MatchParts::MISC3) {
        let mut misc3 = l4_misc_fields((parsed, frame), inner);
        match kind {
            Some(Kind::VxlanGpe(at)) => vxlan_gpe_fields(&mut misc3, &frame[at..at + 8]),
            Some(Kind::GtpU(_)) => gtpu_fields(&mut misc3, (parsed, frame)),
            _ => {}
        }
        if misc3.as_bytes().iter().any(|&b| b != 0) {
            put(&mut words, MISC3_WORD, misc3.as_bytes());
        }
    }
    if parts.contains(MatchParts::MISC) {
        let mut misc = match kind {
            Some(kind) => tunnel_fields(kind, frame),
            None => FteMatchSetMisc::zeroed(),
        };
        layered_misc_fields(&mut misc, (parsed, frame), inner);
        if misc.as_bytes().iter().any(|&b| b != 0) {
            put(&mut words, MISC_WORD, misc.as_bytes());
        }
    }
    if let Some((inner_frame, inner)) = inner.filter(|_| parts.contains(MatchParts::INNER)) {
        put(
            &mut words,
            INNER_WORD,
            headers(inner, inner_frame, with_integrity).as_bytes(),
        );
    }
    words
}

/// First match word of `misc_parameters` (byte 0x40 of `fte_match_param`).
const MISC_WORD: usize = 0x40 / 8;
/// First match word of `inner_headers` (byte 0x80 of `fte_match_param`).
const INNER_WORD: usize = 0x80 / 8;
/// First match word of `misc_parameters_3` (byte 0x100 of `fte_match_param`).
const MISC3_WORD: usize = 0x100 / 8;

/// The third misc set of a frame (`parsed`, `frame`): the outer and, for the packet a tunnel
/// carries (`inner`, its bytes and parse), inner TCP sequence and acknowledgement numbers,
/// and the ICMP or ICMPv6 type, code and header data.
fn l4_misc_fields(
    (parsed, frame): (&Parsed, &[u8]),
    inner: Option<(&[u8], &Parsed)>,
) -> FteMatchSetMisc3<[u8; 0x40]> {
    use crate::l4_fields::{icmp, tcp_seq_ack};
    let mut misc3 = FteMatchSetMisc3::zeroed();
    if let Some((seq, ack)) = tcp_seq_ack(frame, parsed) {
        misc3.set_outer_tcp_seq_num(seq).set_outer_tcp_ack_num(ack);
    }
    if let Some((seq, ack)) = inner.and_then(|(f, p)| tcp_seq_ack(f, p)) {
        misc3.set_inner_tcp_seq_num(seq).set_inner_tcp_ack_num(ack);
    }
    match icmp(frame, parsed) {
        Some(i) if i.v6 => {
            misc3
                .set_icmpv6_type(i.icmp_type)
                .set_icmpv6_code(i.code)
                .set_icmpv6_header_data(i.header_data);
        }
        Some(i) => {
            misc3
                .set_icmp_type(i.icmp_type)
                .set_icmp_code(i.code)
                .set_icmp_header_data(i.header_data);
        }
        None => {}
    }
    misc3
}

/// The third misc set's VXLAN-GPE fields from the header's first eight bytes `h` (whole, as
/// `crate::tunnel::kind` found it): flags, next protocol, VNI.
fn vxlan_gpe_fields(misc3: &mut FteMatchSetMisc3<[u8; 0x40]>, h: &[u8]) {
    misc3
        .set_outer_vxlan_gpe_flags(h[0])
        .set_outer_vxlan_gpe_next_protocol(h[3])
        .set_outer_vxlan_gpe_vni(u32::from_be_bytes([0, h[4], h[5], h[6]]));
}

/// The third misc set's GTP-U fields of a GTP-U frame: flags, message type, TEID, and the
/// dwords the flex parsers sample (`crate::tunnel::GtpuWords`).
fn gtpu_fields(misc3: &mut FteMatchSetMisc3<[u8; 0x40]>, (parsed, frame): (&Parsed, &[u8])) {
    let Some(w) = crate::tunnel::gtpu_words(frame, parsed) else {
        return;
    };
    misc3
        .set_gtpu_msg_flags((w.dw_0 >> 24) as u8)
        .set_gtpu_msg_type((w.dw_0 >> 16) as u8)
        .set_gtpu_teid(w.teid)
        .set_gtpu_dw_0(w.dw_0)
        .set_gtpu_dw_2(w.dw_2)
        .set_gtpu_first_ext_dw_0(w.first_ext_dw_0);
}

/// One header set (`fte_match_set_lyr_2_4`) of a packet (`frame`, parsed as `parsed`): MACs,
/// ethertype, the first VLAN tag and whether it is a customer (802.1Q) or service (802.1ad)
/// tag, IP version, protocol, DSCP, ECN, TTL or hop limit, IPv4 header length, fragment bit and
/// addresses, the L4 type, TCP or UDP ports and TCP flags; with `with_integrity` the integrity
/// bits (`l3_ok` and the rest), else zero.
fn headers(parsed: &Parsed, frame: &[u8], with_integrity: bool) -> FteMatchSetLyr24<[u8; 0x40]> {
    let mut set = FteMatchSetLyr24::zeroed();
    if with_integrity {
        let bits = crate::integrity::of(frame, parsed);
        set.set_l3_ok(bits.l3_ok)
            .set_l4_ok(bits.l4_ok)
            .set_ipv4_checksum_ok(bits.ipv4_checksum_ok)
            .set_l4_checksum_ok(bits.l4_checksum_ok);
    }
    let mac = |b: [u8; 6]| u64::from_be_bytes([0, 0, b[0], b[1], b[2], b[3], b[4], b[5]]);
    set.set_dmac(mac(parsed.dst_mac))
        .set_smac(mac(parsed.src_mac))
        .set_ethertype(parsed.ethertype.unwrap_or(0));
    // The first tag is the outermost: a service tag when the frame has one.
    if let Some(tag) = parsed.outer_vlan.or(parsed.vlan) {
        set.set_cvlan_tag(tag.tpid == TPID_8021Q)
            .set_svlan_tag(tag.tpid == TPID_8021AD)
            .set_first_vid(tag.vid())
            .set_first_prio(tag.pcp())
            .set_first_cfi(tag.dei());
    }
    let at = |o: usize| frame.get(parsed.l3_offset + o).copied().unwrap_or(0);
    let (tos, ttl) = match parsed.l3 {
        L3Kind::Ipv4 => {
            set.set_ip_version(4)
                .set_ipv4_ihl((parsed.l3_len / 4) as u8);
            (at(1), at(8))
        }
        L3Kind::Ipv6 => {
            set.set_ip_version(6);
            ((at(0) << 4) | (at(1) >> 4), at(7))
        }
        L3Kind::None => (0, 0),
    };
    set.set_ip_dscp(tos >> 2)
        .set_ip_ecn(tos & 0x3)
        .set_ttl_hoplimit(ttl);
    if let Some(proto) = parsed.ip_proto {
        set.set_ip_protocol(proto);
    }
    set.set_frag(parsed.is_fragment());
    match parsed.l4 {
        L4Kind::Tcp => {
            set.set_l4_type(L4_TYPE_TCP)
                .set_tcp_sport(parsed.src_port)
                .set_tcp_dport(parsed.dst_port)
                .set_tcp_flags(u16::from(parsed.tcp_flags));
        }
        L4Kind::Udp => {
            set.set_l4_type(L4_TYPE_UDP)
                .set_udp_sport(parsed.src_port)
                .set_udp_dport(parsed.dst_port);
        }
        _ => {}
    }
    match parsed.addrs {
        Some(IpAddrs::V4 { src, dst }) => {
            set.src_ipv4_src_ipv6_mut()
                .ipv4_layout_mut()
                .set_ipv4(u32::from_be_bytes(src));
            set.dst_ipv4_dst_ipv6_mut()
                .ipv4_layout_mut()
                .set_ipv4(u32::from_be_bytes(dst));
        }
        Some(IpAddrs::V6 { src, dst }) => {
            set.src_ipv4_src_ipv6_mut().ipv6_layout_mut().set_addr(src);
            set.dst_ipv4_dst_ipv6_mut().ipv6_layout_mut().set_addr(dst);
        }
        None => {}
    }
    set
}

/// `l4_type` of a TCP segment (Linux's `MLX5_PACKET_L4_TYPE_TCP`).
const L4_TYPE_TCP: u8 = 1;
/// `l4_type` of a UDP datagram (`MLX5_PACKET_L4_TYPE_UDP`).
const L4_TYPE_UDP: u8 = 2;

/// The second VLAN tag of a packet (the customer tag after a service tag), as the misc set's
/// `*_second_*` fields take it: priority, CFI, VLAN id, and whether it is a customer tag.
fn second_vlan(parsed: &Parsed) -> Option<VlanTag> {
    parsed.outer_vlan.and(parsed.vlan)
}

/// The flow label of an IPv6 packet (20 bits); 0 for others.
fn ipv6_flow_label(parsed: &Parsed, frame: &[u8]) -> u32 {
    if parsed.l3 != L3Kind::Ipv6 {
        return 0;
    }
    frame
        .get(parsed.l3_offset..parsed.l3_offset + 4)
        .map_or(0, |b| {
            u32::from_be_bytes([b[0], b[1], b[2], b[3]]) & 0x000f_ffff
        })
}

/// The misc set's fields of the outer packet and, for a tunnel, of the packet it carries
/// (`inner`): the second VLAN tags and the IPv6 flow labels.
fn layered_misc_fields(
    misc: &mut FteMatchSetMisc<[u8; 0x40]>,
    (parsed, frame): (&Parsed, &[u8]),
    inner: Option<(&[u8], &Parsed)>,
) {
    if let Some(tag) = second_vlan(parsed) {
        misc.set_outer_second_cvlan_tag(tag.tpid == TPID_8021Q)
            .set_outer_second_svlan_tag(tag.tpid == TPID_8021AD)
            .set_outer_second_vid(tag.vid())
            .set_outer_second_prio(tag.pcp())
            .set_outer_second_cfi(tag.dei());
    }
    misc.set_outer_ipv6_flow_label(ipv6_flow_label(parsed, frame));
    if let Some((inner_frame, inner)) = inner {
        if let Some(tag) = second_vlan(inner) {
            misc.set_inner_second_cvlan_tag(tag.tpid == TPID_8021Q)
                .set_inner_second_svlan_tag(tag.tpid == TPID_8021AD)
                .set_inner_second_vid(tag.vid())
                .set_inner_second_prio(tag.pcp())
                .set_inner_second_cfi(tag.dei());
        }
        misc.set_inner_ipv6_flow_label(ipv6_flow_label(inner, inner_frame));
    }
}

/// The misc match fields of the tunnel `kind` in `frame` (its header whole): GRE's flags,
/// protocol and key, VXLAN's VNI, GENEVE's VNI, O flag, option length and protocol type.
fn tunnel_fields(kind: Kind, frame: &[u8]) -> FteMatchSetMisc<[u8; 0x40]> {
    let mut misc = FteMatchSetMisc::zeroed();
    let be32 = |at: usize| {
        frame
            .get(at..at + 4)
            .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    };
    let be16 = |at: usize| crate::tunnel::be16(frame, at).unwrap_or(0);
    match kind {
        Kind::Vxlan(at) => {
            misc.set_vxlan_vni(be32(at + 4) >> 8);
        }
        Kind::Geneve(at) => {
            let (b0, b1) = (frame[at], frame[at + 1]);
            misc.set_geneve_vni(be32(at + 4) >> 8)
                .set_geneve_oam(b1 & 0x80 != 0)
                .set_geneve_opt_len(b0 & 0x3f)
                .set_geneve_protocol_type(be16(at + 2));
        }
        // VXLAN-GPE's and GTP-U's fields are in the third misc set (`vxlan_gpe_fields`,
        // `gtpu_fields`).
        Kind::VxlanGpe(_) | Kind::GtpU(_) => {}
        Kind::Gre(at) => {
            let flags = frame[at];
            let (c, k) = (flags & 0x80 != 0, flags & 0x20 != 0);
            misc.set_gre_c_present(c)
                .set_gre_k_present(k)
                .set_gre_s_present(flags & 0x10 != 0)
                .set_gre_protocol(be16(at + 2));
            if k {
                // The key follows the checksum word when there is one.
                let key = be32(at + 4 + if c { 4 } else { 0 });
                misc.set_gre_key_h(key >> 8).set_gre_key_l(key as u8);
            }
        }
    }
    misc
}

/// Byte offset of `source_sqn` (bits 23:0 of the first word of `fte_match_set_misc`, which
/// starts at 0x40 of `fte_match_param`).
const SOURCE_SQN_BYTE: usize = 0x41;

/// The match words of a frame: [`frame_match_words`] of `parts`, and for a frame an SQ sends
/// the SQ's number in `misc.source_sqn` (what Linux's egress rules match a queue by).
pub(crate) fn match_words(
    parsed: &Parsed,
    frame: &[u8],
    sqn: Option<u32>,
    parts: MatchParts,
) -> [u64; MATCH_WORDS] {
    let mut words = frame_match_words(parsed, frame, parts);
    if let Some(sqn) = sqn {
        let word = SOURCE_SQN_BYTE / 8;
        let mut bytes = words[word].to_ne_bytes();
        let at = SOURCE_SQN_BYTE % 8;
        bytes[at..at + 3].copy_from_slice(&(sqn & 0x00ff_ffff).to_be_bytes()[1..]);
        words[word] = u64::from_ne_bytes(bytes);
    }
    words
}

/// First match word of `misc_parameters_2` (byte 0xc0 of `fte_match_param`).
pub(super) const MISC2_WORD: usize = 0xc0 / 8;

/// Bytes of `misc_parameters_2` before the registers: the four MPLS entries, two match words.
pub(super) const MPLS_BYTES: usize = 0x10;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::parse;

    /// GRE with key 7 carrying IPv4/UDP 10.0.0.5:7 -> 10.0.0.6:9 (an L3 tunnel), in IPv4
    /// from 10.0.0.1 to 10.0.0.2.
    fn gre_frame() -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00];
        f.extend_from_slice(&[0x45, 0, 0, 64, 0, 0, 0, 0, 64, 47, 0, 0]);
        f.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
        f.extend_from_slice(&[0x20, 0, 0x08, 0x00, 0, 0, 0, 7]);
        f.extend_from_slice(&[
            0x45, 0, 0, 36, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 5, 10, 0, 0, 6,
        ]);
        f.extend_from_slice(&[0, 7, 0, 9, 0, 16, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]);
        f
    }

    #[test]
    fn each_part_is_built_alone_as_it_is_among_all() {
        let f = gre_frame();
        let p = parse(&f);
        let parts = [
            MatchParts::OUTER,
            MatchParts::MISC,
            MatchParts::INNER,
            MatchParts::MPLS,
            MatchParts::MISC3,
        ];
        let all = parts
            .iter()
            .fold(MatchParts::INTEGRITY, |all, &part| all | part);
        let every = frame_match_words(&p, &f, all);
        // The tunnel's key and the inner ports are there when their parts are asked for.
        assert_ne!(every[MISC_WORD..INNER_WORD], [0; 8]);
        assert_ne!(every[INNER_WORD..INNER_WORD + 8], [0; 8]);
        for part in parts {
            let alone = frame_match_words(&p, &f, part | MatchParts::INTEGRITY);
            for (index, (&a, &e)) in alone.iter().zip(&every).enumerate() {
                let want = if MatchParts::of_word(index) == part {
                    e
                } else {
                    0
                };
                assert_eq!(a, want, "word {index} with {part:?} alone");
            }
        }
        // Without INTEGRITY the outer words are those of every other part's build, and
        // nothing past them is set.
        let outer = frame_match_words(&p, &f, MatchParts::OUTER);
        let rest = frame_match_words(&p, &f, all.without(MatchParts::INTEGRITY));
        assert_eq!(outer[..MISC_WORD], rest[..MISC_WORD]);
        assert!(outer[MISC_WORD..].iter().all(|&w| w == 0));
    }
}
