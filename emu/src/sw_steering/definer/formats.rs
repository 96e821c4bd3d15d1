//! A packet's 32-byte tag in each predefined definer format, as rdma-core's
//! `dr_ste_v1_build_def*_tag` fills a rule's (fields at bit offsets from the tag's start,
//! most significant bit first).
//!
//! Format 22 (`ste_def22_v1`, `dr_ste_v1_build_def22_tag`):
//!
//! | bits | field |
//! |---|---|
//! | 0x00..0x20 | outer IPv4 source address |
//! | 0x20..0x40 | outer IPv4 destination address |
//! | 0x40..0x50, 0x50..0x60 | outer TCP/UDP source and destination ports |
//! | 0x63 | outer IP fragment |
//! | 0x6a..0x6c | outer L3 type (`STE_IPV4` 1, `STE_IPV6` 2) |
//! | 0x6c..0x6e | outer L4 type (`STE_TCP` 1, `STE_UDP` 2) |
//! | 0x6e..0x70 | first VLAN qualifier (`DR_STE_SVLAN` 1, `DR_STE_CVLAN` 2) |
//! | 0x70..0x80 | first VLAN priority, CFI, VLAN ID |
//! | 0x80..0xa0 | `metadata_reg_c_0` |
//! | 0xa0..0xc0, 0xf0..0x100 | outer destination MAC bits 47:16 and 15:0 |
//! | 0xc0..0xe0, 0xe0..0xf0 | outer source MAC bits 47:16 and 15:0 |
//!
//! Format 24 (`ste_def24_v1`, `dr_ste_v1_build_def24_tag`):
//!
//! | bits | field |
//! |---|---|
//! | 0x00..0x80 | `metadata_reg_c_2`, `_3`, `_0`, `_1` |
//! | 0x80..0xc0 | outer IPv4 source and destination addresses |
//! | 0xc0..0xe0 | outer TCP/UDP source and destination ports |
//! | 0xe0..0xef | inner IP protocol, L3 type, L4 type, first VLAN type, fragment bit |
//! | 0xf0..0xff | outer IP protocol, L3 type, L4 type, first VLAN type, fragment bit |
//!
//! The IPv6 pair, format 26 (`ste_def26_v1`: source address 0x00..0x80, fragment bit 0x83,
//! L3 and L4 types 0x8a..0x8e, first VLAN 0x8e..0xa0, second VLAN 0xae..0xc0, source MAC
//! 0xc0..0xf0, IP protocol 0xf0, TCP flags CWR..FIN 0xf8..0x100) and format 6
//! (`ste_def6_v1`: destination address 0x00..0x80, L4 ports 0xc0..0xe0, fragment bit 0xe6,
//! TCP flags NS..FIN 0xe7..0xf0).
//!
//! Formats 25 (`ste_def25_v1`: inner IPv4 addresses 0x00..0x40 and L4 ports 0x40..0x60, the
//! tunnel header's first two words 0x60..0xa0, inner L3, L4 and first VLAN types 0xc2..0xc8,
//! outer ones 0xca..0xd0, outer L4 destination port 0xd0..0xe0) and 28 (`ste_def28_v1`: inner L4 ports 0x00..0x20, a GTP-U TEID
//! 0x20..0x40, inner IPv4 addresses 0x40..0x80, outer IPv4 addresses 0x80..0xc0 and L4 ports 0xc0..0xe0, then format 24's
//! protocol, type and fragment bits of both header sets) place the tunnelled packet's fields
//! beside the outer ones.
//!
//! Formats 0 (`ste_def0_v1`: `metadata_reg_c_0`, `_1` 0x00..0x40, destination MAC and
//! ethertype 0x40..0x80, fragment bit 0x83, L3 and L4 types and first VLAN 0x8a..0xa0, second
//! VLAN 0xae..0xc0, source MAC 0xc0..0xf0, TCP flags CWR..FIN 0xf8..0x100), 2 (`ste_def2_v1`:
//! `metadata_reg_a` 0x00..0x20, the IP header's version, IHL, DSCP, ECN, TTL, protocol 0x20..0x40,
//! IPv4 identification, flags, fragment offset, total length and checksum 0x40..0x80, IPv6 flow
//! label 0x8c..0xa0, L4 ports 0xc0..0xe0, TCP data offset 0xe0, fragment bit 0xe6, TCP flags
//! NS..FIN 0xe7..0xf0, first-fragment bit 0xf0), 16 (`ste_def16_v1`: `metadata_reg_a`
//! 0xa0..0xc0, L3, L4 and first VLAN types 0xc8..0xce, fragment bit 0xe1) and 33
//! (`ste_def33_v1`: format 22's first 0x80 bits, then IP version, IHL 0xe0..0xe8, TTL and
//! protocol 0xf0..0x100).
//!
//! Formats 0, 2, 33, 26 and 6 also carry integrity bits (`l3_ok` and the rest), filled only
//! for a definer whose mask selects one (`super::integrity_bits`).

use crate::packet::{IpAddrs, L3Kind, L4Kind, Parsed};
use crate::sw_steering::lookup::{
    ip_extras, l3_type, l4_type, ports, put, tcp_flags9, vlans, PacketView,
};
use cxdirect_hw::definer::{format, DEFINER_TAG_BYTES};

/// A 32-byte definer tag.
pub(crate) type DefinerTag = [u8; DEFINER_TAG_BYTES];

/// The packet's tag in `format`; all zeros for a format the model does not project.
pub(super) fn tag(format: u16, pkt: &PacketView<'_>) -> DefinerTag {
    match format {
        format::DEF0 => def0(pkt),
        format::DEF2 => def2(pkt),
        format::DEF6 => def6(pkt),
        format::DEF16 => def16(pkt),
        format::DEF22 => def22(pkt),
        format::DEF24 => def24(pkt),
        format::DEF25 => def25(pkt),
        format::DEF26 => def26(pkt),
        format::DEF28 => def28(pkt),
        format::DEF33 => def33(pkt),
        _ => [0u8; DEFINER_TAG_BYTES],
    }
}

/// The packet's tag in format 22.
fn def22(pkt: &PacketView<'_>) -> DefinerTag {
    let p = pkt.parsed;
    let mut t = [0u8; DEFINER_TAG_BYTES];
    t[0..8].copy_from_slice(&ipv4_addrs(p));
    let (sport, dport) = ports(p);
    put(&mut t, 0x40, 16, sport);
    put(&mut t, 0x50, 16, dport);
    put(&mut t, 0x63, 1, u32::from(p.is_fragment()));
    put(&mut t, 0x6a, 2, l3_type(p));
    put(&mut t, 0x6c, 2, l4_type(p));
    let [first, _] = vlans(p);
    put(&mut t, 0x6e, 2, first.0);
    put(&mut t, 0x70, 3, first.1);
    put(&mut t, 0x73, 1, first.2);
    put(&mut t, 0x74, 12, first.3);
    t[16..20].copy_from_slice(&pkt.meta.reg_c[0].to_be_bytes());
    t[20..24].copy_from_slice(&p.dst_mac[..4]);
    t[24..28].copy_from_slice(&p.src_mac[..4]);
    t[28..30].copy_from_slice(&p.src_mac[4..]);
    t[30..32].copy_from_slice(&p.dst_mac[4..]);
    t
}

/// The outer IPv4 addresses of a packet, zeros for other packets.
fn ipv4_addrs(p: &Parsed) -> [u8; 8] {
    let mut a = [0u8; 8];
    if let Some(IpAddrs::V4 { src, dst }) = p.addrs {
        a[..4].copy_from_slice(&src);
        a[4..].copy_from_slice(&dst);
    }
    a
}

/// One header set's IP protocol, L3 type, L4 type, first VLAN type and fragment bit, as
/// format 24 places them in 15 bits from `off`.
fn l3_l4_kinds(t: &mut DefinerTag, off: usize, p: &Parsed) {
    put(t, off, 8, u32::from(p.ip_proto.unwrap_or(0)));
    put(t, off + 8, 2, l3_type(p));
    put(t, off + 10, 2, l4_type(p));
    put(t, off + 12, 2, vlans(p)[0].0);
    put(t, off + 14, 1, u32::from(p.is_fragment()));
}

/// The packet's tag in format 24.
fn def24(pkt: &PacketView<'_>) -> DefinerTag {
    let p = pkt.parsed;
    let mut t = [0u8; DEFINER_TAG_BYTES];
    let c = &pkt.meta.reg_c;
    for (at, reg) in [(0, c[2]), (4, c[3]), (8, c[0]), (12, c[1])] {
        t[at..at + 4].copy_from_slice(&reg.to_be_bytes());
    }
    t[16..24].copy_from_slice(&ipv4_addrs(p));
    let (sport, dport) = ports(p);
    put(&mut t, 0xc0, 16, sport);
    put(&mut t, 0xd0, 16, dport);
    if let Some((_, inner)) = inner_of(pkt) {
        l3_l4_kinds(&mut t, 0xe0, &inner);
    }
    l3_l4_kinds(&mut t, 0xf0, p);
    t
}

/// The fields formats 0 and 26 place alike: the fragment bit (0x83), L3 and L4 types
/// (0x8a..0x8e), the first and second VLAN (qualifier, priority, CFI, ID: 0x8e..0xa0 and
/// 0xae..0xc0) and the source MAC (0xc0..0xf0).
fn l2_fields(t: &mut DefinerTag, p: &Parsed) {
    put(t, 0x83, 1, u32::from(p.is_fragment()));
    put(t, 0x8a, 2, l3_type(p));
    put(t, 0x8c, 2, l4_type(p));
    let [first, second] = vlans(p);
    for (at, vlan) in [(0x8e, first), (0xae, second)] {
        put(t, at, 2, vlan.0);
        put(t, at + 2, 3, vlan.1);
        put(t, at + 5, 1, vlan.2);
        put(t, at + 6, 12, vlan.3);
    }
    t[24..30].copy_from_slice(&p.src_mac);
}

/// The packet's tag in format 0.
fn def0(pkt: &PacketView<'_>) -> DefinerTag {
    let p = pkt.parsed;
    let mut t = [0u8; DEFINER_TAG_BYTES];
    t[0..4].copy_from_slice(&pkt.meta.reg_c[0].to_be_bytes());
    t[4..8].copy_from_slice(&pkt.meta.reg_c[1].to_be_bytes());
    t[8..14].copy_from_slice(&p.dst_mac);
    put(&mut t, 0x70, 16, u32::from(p.ethertype.unwrap_or(0)));
    l2_fields(&mut t, p);
    if p.l4 == L4Kind::Tcp {
        put(&mut t, 0xf8, 8, u32::from(p.tcp_flags));
    }
    t
}

/// The big-endian half-word at byte `at` of the frame, 0 past its end.
fn be16_at(frame: &[u8], at: usize) -> u32 {
    frame
        .get(at..at + 2)
        .map_or(0, |b| u32::from(u16::from_be_bytes([b[0], b[1]])))
}

/// The packet's tag in format 2.
fn def2(pkt: &PacketView<'_>) -> DefinerTag {
    let p = pkt.parsed;
    let mut t = [0u8; DEFINER_TAG_BYTES];
    t[0..4].copy_from_slice(&pkt.meta.reg_a.to_be_bytes());
    let (tos, ttl, label) = ip_extras(pkt);
    let l3 = p.l3_offset;
    match p.l3 {
        L3Kind::Ipv4 => {
            put(&mut t, 0x20, 4, 4);
            put(&mut t, 0x24, 4, (p.l3_len / 4) as u32 & 0xf);
            // Identification, then flags and fragment offset, total length, checksum.
            put(&mut t, 0x40, 16, be16_at(pkt.frame, l3 + 4));
            put(&mut t, 0x50, 16, be16_at(pkt.frame, l3 + 6));
            put(&mut t, 0x60, 16, be16_at(pkt.frame, l3 + 2));
            put(&mut t, 0x70, 16, be16_at(pkt.frame, l3 + 10));
        }
        L3Kind::Ipv6 => {
            put(&mut t, 0x20, 4, 6);
            put(&mut t, 0x8c, 20, label);
        }
        L3Kind::None => {}
    }
    put(&mut t, 0x28, 8, u32::from(tos));
    put(&mut t, 0x30, 8, u32::from(ttl));
    put(&mut t, 0x38, 8, u32::from(p.ip_proto.unwrap_or(0)));
    let (sport, dport) = ports(p);
    put(&mut t, 0xc0, 16, sport);
    put(&mut t, 0xd0, 16, dport);
    if p.l4 == L4Kind::Tcp {
        put(&mut t, 0xe0, 4, (p.l4_len / 4) as u32 & 0xf);
    }
    put(&mut t, 0xe6, 1, u32::from(p.is_fragment()));
    put(&mut t, 0xe7, 9, tcp_flags9(pkt));
    put(
        &mut t,
        0xf0,
        1,
        u32::from(p.is_fragment() && p.frag_offset == 0),
    );
    t
}

/// The packet's tag in format 16.
fn def16(pkt: &PacketView<'_>) -> DefinerTag {
    let p = pkt.parsed;
    let mut t = [0u8; DEFINER_TAG_BYTES];
    t[20..24].copy_from_slice(&pkt.meta.reg_a.to_be_bytes());
    put(&mut t, 0xc8, 2, l3_type(p));
    put(&mut t, 0xca, 2, l4_type(p));
    put(&mut t, 0xcc, 2, vlans(p)[0].0);
    put(&mut t, 0xe1, 1, u32::from(p.is_fragment()));
    t
}

/// The packet's tag in format 33.
fn def33(pkt: &PacketView<'_>) -> DefinerTag {
    let p = pkt.parsed;
    let mut t = def22(pkt);
    t[16..32].fill(0);
    let (_, ttl, _) = ip_extras(pkt);
    match p.l3 {
        L3Kind::Ipv4 => {
            put(&mut t, 0xe0, 4, 4);
            put(&mut t, 0xe4, 4, (p.l3_len / 4) as u32 & 0xf);
        }
        L3Kind::Ipv6 => put(&mut t, 0xe0, 4, 6),
        L3Kind::None => {}
    }
    put(&mut t, 0xf0, 8, u32::from(ttl));
    put(&mut t, 0xf8, 8, u32::from(p.ip_proto.unwrap_or(0)));
    t
}

/// The packet a tunnel the model parses carries, if any.
pub(super) fn inner_of<'a>(pkt: &PacketView<'a>) -> Option<(&'a [u8], Parsed)> {
    crate::tunnel::inner_packet(pkt.frame, pkt.parsed)
}

/// The packet's tag in format 25.
fn def25(pkt: &PacketView<'_>) -> DefinerTag {
    let p = pkt.parsed;
    let mut t = [0u8; DEFINER_TAG_BYTES];
    if let Some((_, inner)) = inner_of(pkt) {
        t[0..8].copy_from_slice(&ipv4_addrs(&inner));
        let (sport, dport) = ports(&inner);
        put(&mut t, 0x40, 16, sport);
        put(&mut t, 0x50, 16, dport);
        // `tunnel_header_0` and `_1` (rdma-core sets them from `misc5`, as DPDK's mlx5 PMD
        // matches a VXLAN VNI in `tunnel_header_1`): the tunnel header's first eight bytes,
        // as far as the frame has them.
        if let Some(at) = crate::tunnel::kind(pkt.frame, p).map(crate::tunnel::Kind::offset) {
            let header = pkt.frame.get(at..).unwrap_or(&[]);
            let n = header.len().min(8);
            t[12..12 + n].copy_from_slice(&header[..n]);
        }
        put(&mut t, 0xc2, 2, l3_type(&inner));
        put(&mut t, 0xc4, 2, l4_type(&inner));
        put(&mut t, 0xc6, 2, vlans(&inner)[0].0);
    }
    put(&mut t, 0xca, 2, l3_type(p));
    put(&mut t, 0xcc, 2, l4_type(p));
    put(&mut t, 0xce, 2, vlans(p)[0].0);
    put(&mut t, 0xd0, 16, ports(p).1);
    t
}

/// The packet's tag in format 28.
fn def28(pkt: &PacketView<'_>) -> DefinerTag {
    let p = pkt.parsed;
    let mut t = [0u8; DEFINER_TAG_BYTES];
    if let Some((_, inner)) = inner_of(pkt) {
        let (sport, dport) = ports(&inner);
        put(&mut t, 0x00, 16, sport);
        put(&mut t, 0x10, 16, dport);
        t[8..16].copy_from_slice(&ipv4_addrs(&inner));
        l3_l4_kinds(&mut t, 0xe0, &inner);
    }
    // `flex_gtpu_teid`: the TEID the flex parsers sample (`crate::flex_parser`).
    if let Some(w) = crate::tunnel::gtpu_words(pkt.frame, p) {
        put(&mut t, 0x20, 32, w.teid);
    }
    t[16..24].copy_from_slice(&ipv4_addrs(p));
    let (sport, dport) = ports(p);
    put(&mut t, 0xc0, 16, sport);
    put(&mut t, 0xd0, 16, dport);
    l3_l4_kinds(&mut t, 0xf0, p);
    t
}

/// The outer IPv6 source and destination addresses of a packet, zeros for other packets.
fn ipv6_addrs(p: &Parsed) -> ([u8; 16], [u8; 16]) {
    match p.addrs {
        Some(IpAddrs::V6 { src, dst }) => (src, dst),
        _ => ([0; 16], [0; 16]),
    }
}

/// The packet's tag in format 26.
fn def26(pkt: &PacketView<'_>) -> DefinerTag {
    let p = pkt.parsed;
    let mut t = [0u8; DEFINER_TAG_BYTES];
    t[0..16].copy_from_slice(&ipv6_addrs(p).0);
    l2_fields(&mut t, p);
    put(&mut t, 0xf0, 8, u32::from(p.ip_proto.unwrap_or(0)));
    if p.l4 == L4Kind::Tcp {
        put(&mut t, 0xf8, 8, u32::from(p.tcp_flags));
    }
    t
}

/// The packet's tag in format 6.
fn def6(pkt: &PacketView<'_>) -> DefinerTag {
    let p = pkt.parsed;
    let mut t = [0u8; DEFINER_TAG_BYTES];
    t[0..16].copy_from_slice(&ipv6_addrs(p).1);
    let (sport, dport) = ports(p);
    put(&mut t, 0xc0, 16, sport);
    put(&mut t, 0xd0, 16, dport);
    put(&mut t, 0xe6, 1, u32::from(p.is_fragment()));
    put(&mut t, 0xe7, 9, tcp_flags9(pkt));
    t
}

/// A UDP/IPv4 frame with a VLAN tag (priority 5, VLAN 0x123), from 02:00:00:00:00:02 to
/// 02:00:00:00:00:01, 10.0.0.1:0x1234 to 10.0.0.2:0x12b7: the definer tests' packet.
#[cfg(test)]
pub(super) fn test_frame() -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x01]); // dmac
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x02]); // smac
    f.extend_from_slice(&[0x81, 0x00, 0xa1, 0x23, 0x08, 0x00]);
    f.extend_from_slice(&[
        0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ]);
    f.extend_from_slice(&[0x12, 0x34, 0x12, 0xb7, 0, 8, 0, 0]);
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sw_steering::lookup::{viewed, Metadata};

    fn frame() -> Vec<u8> {
        test_frame()
    }

    /// `f`'s tag through `format`, with `reg_c` in its registers.
    fn project(f: &[u8], reg_c: [u32; 8], format: fn(&PacketView<'_>) -> DefinerTag) -> DefinerTag {
        let meta = Metadata {
            reg_c,
            ..Metadata::default()
        };
        viewed(f, &meta, format)
    }

    #[test]
    fn format_22_places_fields_as_rdma_core_writes_them() {
        let t = project(&frame(), [0xdead_beef, 0, 0, 0, 0, 0, 0, 0], def22);
        assert_eq!(&t[0..8], &[10, 0, 0, 1, 10, 0, 0, 2]);
        assert_eq!(&t[8..12], &[0x12, 0x34, 0x12, 0xb7]);
        // Byte 12: reserved, sniffer, loopback, frag 0, qp_type, encap 0. Byte 13: port 00,
        // l3 01 (IPv4), l4 10 (UDP), qualifier 10 (C-VLAN). Bytes 14..16: prio 5, cfi 0, 0x123.
        assert_eq!(&t[12..16], &[0x00, 0b0001_1010, 0xa1, 0x23]);
        assert_eq!(&t[16..20], &[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(&t[20..24], &[0x02, 0, 0, 0]);
        assert_eq!(&t[24..28], &[0x02, 0, 0, 0]);
        assert_eq!(&t[28..32], &[0, 0x02, 0, 0x01]);
    }

    #[test]
    fn format_24_places_registers_and_both_header_sets_as_rdma_core_writes_them() {
        let t = project(&frame(), [0xc0, 0xc1, 0xc2, 0xc3, 0, 0, 0, 0], def24);
        assert_eq!(
            &t[0..16],
            &[0, 0, 0, 0xc2, 0, 0, 0, 0xc3, 0, 0, 0, 0xc0, 0, 0, 0, 0xc1]
        );
        assert_eq!(&t[16..24], &[10, 0, 0, 1, 10, 0, 0, 2]);
        assert_eq!(&t[24..28], &[0x12, 0x34, 0x12, 0xb7]);
        // No tunnel: inner zeros.
        assert_eq!(&t[28..30], &[0, 0]);
        // Outer: protocol 17; l3 01, l4 10, first VLAN type 10 (C-VLAN), frag 0, lb 0.
        assert_eq!(&t[30..32], &[17, 0b0110_1000]);
    }

    #[test]
    fn formats_26_and_6_place_an_ipv6_packet_as_rdma_core_writes_it() {
        // Ethernet, IPv6 (next header TCP), TCP with SYN and ACK.
        let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x86, 0xdd];
        f.extend_from_slice(&[0x60, 0, 0, 0, 0, 20, 6, 64]);
        f.extend_from_slice(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        f.extend_from_slice(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        f.extend_from_slice(&[0x04, 0xd2, 0x00, 0x50, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x12]);
        f.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]);
        let t = project(&f, [0; 8], def26);
        assert_eq!(t[0..2], [0xfe, 0x80]);
        assert_eq!(t[15], 1);
        // Byte 17: reserved 2 bits, l3 10 (IPv6), l4 01 (TCP), first VLAN type 00.
        assert_eq!((t[16], t[17]), (0, 0b0010_0100));
        assert_eq!(&t[24..30], &[0x02, 0, 0, 0, 0, 2]);
        assert_eq!(
            (t[30], t[31]),
            (6, 0x12),
            "protocol, then CWR..FIN (SYN, ACK)"
        );
        let t = project(&f, [0; 8], def6);
        assert_eq!(t[15], 2);
        assert_eq!(&t[24..28], &[0x04, 0xd2, 0x00, 0x50]);
        // Bit 0xe7 NS, then CWR..FIN in byte 29.
        assert_eq!((t[28], t[29]), (0, 0x12));
    }

    #[test]
    fn formats_25_and_28_place_the_tunnelled_packet_beside_the_outer_one() {
        // Ethernet, IPv4 (GRE) 1.1.1.1 -> 2.2.2.2, GRE carrying Ethernet (TEB), then the UDP
        // test frame (10.0.0.1:0x1234 -> 10.0.0.2:0x12b7, C-VLAN).
        let inner = frame();
        let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x08, 0x00];
        let total = (20 + 4 + inner.len()) as u16;
        f.extend_from_slice(&[0x45, 0, (total >> 8) as u8, total as u8, 0, 0, 0, 0, 64, 47]);
        f.extend_from_slice(&[0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 0, 0, 0x65, 0x58]);
        f.extend_from_slice(&inner);
        let t = project(&f, [0; 8], def25);
        assert_eq!(
            &t[0..12],
            &[10, 0, 0, 1, 10, 0, 0, 2, 0x12, 0x34, 0x12, 0xb7]
        );
        // The tunnel header's first two words: GRE's flags and version, then its protocol
        // (TEB), then the first bytes of the inner frame (GRE without optional words).
        assert_eq!(&t[12..20], &[0, 0, 0x65, 0x58, 0x02, 0, 0, 0]);
        // Bits 0xc0..0xd0: port dup 00, inner l3 01, l4 10 (UDP), VLAN type 10 (C-VLAN), port
        // 00, outer l3 01, l4 00 (GRE is neither), VLAN type 00. Then the outer dport: 0.
        assert_eq!(&t[24..28], &[0b0001_1010, 0b0001_0000, 0, 0]);
        let t = project(&f, [0; 8], def28);
        assert_eq!(&t[0..4], &[0x12, 0x34, 0x12, 0xb7]);
        assert_eq!(&t[8..16], &[10, 0, 0, 1, 10, 0, 0, 2]);
        assert_eq!(&t[16..24], &[1, 1, 1, 1, 2, 2, 2, 2]);
        assert_eq!(&t[28..32], &[17, 0b0110_1000, 47, 0b0100_0000]);
    }

    #[test]
    fn formats_0_2_16_33_place_fields_as_rdma_core_writes_them() {
        let f = frame();
        let mut reg_c = [0u32; 8];
        reg_c[0] = 0xc0;
        reg_c[1] = 0xc1;
        // Format 0: registers, dmac, ethertype (past the VLAN tag), types, VLAN, smac.
        let t = project(&f, reg_c, def0);
        assert_eq!(&t[0..8], &[0, 0, 0, 0xc0, 0, 0, 0, 0xc1]);
        assert_eq!(&t[8..16], &[0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00]);
        // Byte 17: port 00, l3 01, l4 10, qualifier 10; bytes 18..20 prio 5, VLAN 0x123.
        assert_eq!(&t[16..20], &[0, 0b0001_1010, 0xa1, 0x23]);
        assert_eq!(&t[24..30], &[0x02, 0, 0, 0, 0, 0x02]);
        // Format 2: version 4, IHL 5, TOS 0, TTL 64, protocol 17, total length 28.
        let t = project(&f, [0; 8], def2);
        assert_eq!(&t[4..8], &[0x45, 0, 64, 17]);
        assert_eq!(&t[12..14], &[0, 28]);
        assert_eq!(&t[24..28], &[0x12, 0x34, 0x12, 0xb7]);
        // Format 16: types and VLAN type at 0xc8.
        let t = project(&f, [0; 8], def16);
        assert_eq!(t[25], 0b0110_1000);
        // Format 33: format 22's first half, then version, IHL, TTL, protocol.
        let t = project(&f, [0; 8], def33);
        assert_eq!(&t[..16], &project(&f, [0; 8], def22)[..16]);
        assert_eq!((t[28], t[30], t[31]), (0x45, 64, 17));
    }
}
