//! The tunnel a frame carries, as the device's parser finds it: its header (what steering
//! matches of it, `misc` in flow entries and the flex parser lookup in steering entries) and
//! where its inner headers start (the anchors a decapsulation removes up to,
//! `DR_STE_HEADER_ANCHOR_INNER_MAC` and `_INNER_IPV6_IPV4` in rdma-core's dr_ste_v1.h). The
//! tunnels rdma-core's reformat actions build and its tests send: VXLAN (UDP port 4789) and
//! GENEVE (UDP port 6081, with its options) over UDP, and GRE (IP protocol 47, with its
//! checksum, key and sequence words); an inner Ethernet frame (protocol 0x6558, transparent
//! Ethernet bridging, or any VXLAN payload) or an inner IPv4 or IPv6 packet (an L3 tunnel).
//! And VXLAN-GPE (UDP port 4790), which a ConnectX-6 Dx parses natively as it does GENEVE
//! (rdma-core's and Linux's `dr_matcher_supp_vxlan_gpe`: steering format ConnectX-6 Dx or
//! later, or the flex parser bit on older ones), carrying by its next-protocol byte an IPv4
//! (1) or IPv6 (2) packet or an Ethernet frame (3); another payload (NSH, 4) has no inner
//! headers the model parses. And GTP-U (UDP port 2152), which a ConnectX-6 Dx parses when its
//! firmware gives a flex parser to it (the model's, `flex_parser_protocols`): its optional
//! words and extension headers skipped, a G-PDU (message type 0xff) carrying an IPv4 or IPv6
//! packet.

use crate::packet::{L3Kind, L4Kind, Parsed, ETH_HEADER_LEN, TPID_8021AD, TPID_8021Q};

/// IANA: VXLAN's UDP port.
const VXLAN_PORT: u16 = 4789;
/// IANA: GENEVE's UDP port.
const GENEVE_PORT: u16 = 6081;
/// IANA: VXLAN-GPE's UDP port.
const VXLAN_GPE_PORT: u16 = 4790;
/// 3GPP TS 29.281: GTP-U's UDP port.
const GTPU_PORT: u16 = 2152;
/// GTP-U's message type of a G-PDU, the one that carries a user packet.
const GTPU_G_PDU: u8 = 0xff;
/// GTP-U's E flag: extension headers follow the optional word.
const GTPU_E: u8 = 0x04;
/// GTP-U's E, S and PN flags: any of them adds the optional word (sequence number, N-PDU
/// number, next extension type).
const GTPU_E_S_PN: u8 = 0x07;
/// GRE's IP protocol number.
const IPPROTO_GRE: u8 = 47;
/// Transparent Ethernet bridging: an Ethernet frame inside GRE or GENEVE.
const ETHERTYPE_TEB: u16 = 0x6558;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;

/// A tunnel's kind and the byte offset of its header in the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// VXLAN: flags, reserved, the VNI in bytes 4..7.
    Vxlan(usize),
    /// GENEVE: version and option length, O and C flags, protocol, VNI.
    Geneve(usize),
    /// GRE: C, K and S flags, version, protocol, then the optional words.
    Gre(usize),
    /// VXLAN-GPE: flags, two reserved bytes, next protocol, the VNI in bytes 4..7.
    VxlanGpe(usize),
    /// GTP-U: flags (version, PT, E, S, PN), message type, length, TEID; with any of E, S or
    /// PN a word of sequence number, N-PDU number and next extension type, then the
    /// extension headers.
    GtpU(usize),
}

impl Kind {
    /// The byte offset of the tunnel's header in the frame.
    pub(crate) fn offset(self) -> usize {
        match self {
            Kind::Vxlan(at)
            | Kind::Geneve(at)
            | Kind::Gre(at)
            | Kind::VxlanGpe(at)
            | Kind::GtpU(at) => at,
        }
    }
}

/// The inner headers of a tunnelled frame, as byte offsets into it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Inner {
    /// The inner Ethernet header, for an L2 tunnel.
    pub(crate) mac: Option<usize>,
    /// The inner IPv4 or IPv6 header.
    pub(crate) ip: Option<usize>,
}

/// The tunnel `frame` (parsed as `p`) carries, when it is one the model knows and its header
/// is whole.
pub(crate) fn kind(frame: &[u8], p: &Parsed) -> Option<Kind> {
    if p.l3 == L3Kind::None {
        return None;
    }
    let kind = if p.l4 == L4Kind::Udp && p.dst_port == VXLAN_PORT {
        Kind::Vxlan(p.l4_offset + 8)
    } else if p.l4 == L4Kind::Udp && p.dst_port == GENEVE_PORT {
        Kind::Geneve(p.l4_offset + 8)
    } else if p.l4 == L4Kind::Udp && p.dst_port == VXLAN_GPE_PORT {
        Kind::VxlanGpe(p.l4_offset + 8)
    } else if p.l4 == L4Kind::Udp && p.dst_port == GTPU_PORT {
        Kind::GtpU(p.l4_offset + 8)
    } else if p.ip_proto == Some(IPPROTO_GRE) && !p.is_fragment() {
        Kind::Gre(p.l3_offset + p.l3_len)
    } else {
        return None;
    };
    (header_end(frame, kind)? <= frame.len()).then_some(kind)
}

/// One past the last byte of the tunnel header, and the protocol it carries.
fn header_end(frame: &[u8], kind: Kind) -> Option<usize> {
    Some(match kind {
        Kind::Vxlan(at) | Kind::VxlanGpe(at) => at + 8,
        Kind::GtpU(at) => gtpu_header_end(frame, at)?,
        Kind::Geneve(at) => at + 8 + usize::from(*frame.get(at)? & 0x3f) * 4,
        Kind::Gre(at) => {
            let flags = *frame.get(at)?;
            // Checksum, key and sequence number words when their flags (C, K, S) are set.
            let words = [0x80u8, 0x20, 0x10]
                .iter()
                .filter(|&&bit| flags & bit != 0)
                .count();
            at + 4 + 4 * words
        }
    })
}

/// One past the last byte of the GTP-U header at `at`: eight bytes, four more when any of the
/// E, S and PN flags is set, then each extension header (its first byte its length in 4-byte
/// words, its last the next one's type, 0 ending the chain) while E is set. `None` for an
/// extension header of length 0 or one running past the frame.
fn gtpu_header_end(frame: &[u8], at: usize) -> Option<usize> {
    let flags = *frame.get(at)?;
    if flags & GTPU_E_S_PN == 0 {
        return Some(at + 8);
    }
    let mut end = at + 12;
    let mut next = if flags & GTPU_E != 0 {
        *frame.get(at + 11)?
    } else {
        0
    };
    while next != 0 {
        let words = usize::from(*frame.get(end)?);
        if words == 0 {
            return None;
        }
        end += 4 * words;
        next = *frame.get(end - 1)?;
    }
    Some(end)
}

/// The dwords of a GTP-U header that flow entries and flex parsers read, each big-endian.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct GtpuWords {
    /// Flags, message type, length.
    pub(crate) dw_0: u32,
    /// The TEID.
    pub(crate) teid: u32,
    /// Sequence number, N-PDU number, next extension type; 0 when none of E, S and PN is set.
    pub(crate) dw_2: u32,
    /// The first dword of the first extension header (a PDU session container's length, PDU
    /// type and QFI); 0 without one.
    pub(crate) first_ext_dw_0: u32,
}

/// The GTP-U dwords of `frame` (parsed as `p`), when it carries a whole GTP-U header.
pub(crate) fn gtpu_words(frame: &[u8], p: &Parsed) -> Option<GtpuWords> {
    let Kind::GtpU(at) = kind(frame, p)? else {
        return None;
    };
    let be32 = |at: usize| {
        frame
            .get(at..at + 4)
            .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    };
    let flags = frame[at];
    let optional = flags & GTPU_E_S_PN != 0;
    // With E set, a non-zero next extension type says an extension header follows (`kind`
    // found the header whole, so its optional word is in the frame).
    let extension = flags & GTPU_E != 0 && frame[at + 11] != 0;
    Some(GtpuWords {
        dw_0: be32(at),
        teid: be32(at + 4),
        dw_2: if optional { be32(at + 8) } else { 0 },
        first_ext_dw_0: if extension { be32(at + 12) } else { 0 },
    })
}

/// The inner headers of `frame` (parsed as `p`), when it is a tunnel the model knows.
pub(crate) fn inner(frame: &[u8], p: &Parsed) -> Option<Inner> {
    let kind = kind(frame, p)?;
    let end = header_end(frame, kind)?;
    let protocol = match kind {
        Kind::Vxlan(_) => ETHERTYPE_TEB,
        Kind::Geneve(at) | Kind::Gre(at) => be16(frame, at + 2)?,
        // VXLAN-GPE's next protocol, as the ethertype of what it carries.
        Kind::VxlanGpe(at) => match *frame.get(at + 3)? {
            1 => ETHERTYPE_IPV4,
            2 => ETHERTYPE_IPV6,
            3 => ETHERTYPE_TEB,
            _ => return None,
        },
        // A G-PDU's user packet, by its IP version.
        Kind::GtpU(at) if *frame.get(at + 1)? == GTPU_G_PDU => match *frame.get(end)? >> 4 {
            4 => ETHERTYPE_IPV4,
            6 => ETHERTYPE_IPV6,
            _ => return None,
        },
        Kind::GtpU(_) => return None,
    };
    Some(match protocol {
        ETHERTYPE_TEB => {
            let mut ip = end + ETH_HEADER_LEN;
            let mut ethertype = be16(frame, ip - 2)?;
            while ethertype == TPID_8021Q || ethertype == TPID_8021AD {
                ethertype = be16(frame, ip + 2)?;
                ip += 4;
            }
            let is_ip = ethertype == ETHERTYPE_IPV4 || ethertype == ETHERTYPE_IPV6;
            Inner {
                mac: Some(end),
                ip: is_ip.then_some(ip),
            }
        }
        ETHERTYPE_IPV4 | ETHERTYPE_IPV6 => Inner {
            mac: None,
            ip: Some(end),
        },
        _ => return None,
    })
}

/// The packet a tunnel in `frame` (parsed as `p`) carries, and its parse: an L2 tunnel's
/// inner Ethernet frame, or an L3 tunnel's inner IP packet (its MACs and ethertype zero).
pub(crate) fn inner_packet<'a>(frame: &'a [u8], p: &Parsed) -> Option<(&'a [u8], Parsed)> {
    let inner = inner(frame, p)?;
    match (inner.mac, inner.ip) {
        (Some(mac), _) => {
            let packet = frame.get(mac..)?;
            Some((packet, crate::packet::parse(packet)))
        }
        (None, Some(ip)) => {
            let packet = frame.get(ip..)?;
            Some((packet, crate::packet::parse_ip(packet)))
        }
        (None, None) => None,
    }
}

/// `frame` inside the tunnel whose outer headers are `header`: an L2 tunnel carries the whole
/// frame, an L3 tunnel (`l3`) only its IP packet (the Ethernet header and VLAN tags go). The
/// outer IPv4 header's checksum is computed, as the device does for the header a reformat
/// context gives it without one. `None` for an L3 tunnel over a frame without IP.
pub(crate) fn encapsulate(frame: &[u8], header: &[u8], l3: bool) -> Option<Vec<u8>> {
    let inner = if l3 {
        let p = crate::packet::parse(frame);
        if p.l3 == L3Kind::None {
            return None;
        }
        &frame[p.l3_offset..]
    } else {
        frame
    };
    let mut out = Vec::with_capacity(header.len() + inner.len());
    out.extend_from_slice(header);
    out.extend_from_slice(inner);
    // A header whose lengths do not fit goes out as it came.
    let _ = crate::packet::insert_checksums(&mut out, true, false);
    Some(out)
}

/// The inner Ethernet frame of an L2 tunnel, `None` when `frame` is none.
pub(crate) fn decapsulate_l2(frame: &[u8]) -> Option<Vec<u8>> {
    let p = crate::packet::parse(frame);
    let at = inner(frame, &p)?.mac?;
    Some(frame[at..].to_vec())
}

/// The inner IP packet of a tunnel after the Ethernet header `l2`, `None` when `frame` carries
/// no tunnel with an inner IP packet.
pub(crate) fn decapsulate_l3(frame: &[u8], l2: &[u8]) -> Option<Vec<u8>> {
    let p = crate::packet::parse(frame);
    let at = inner(frame, &p)?.ip?;
    let mut out = Vec::with_capacity(l2.len() + frame.len() - at);
    out.extend_from_slice(l2);
    out.extend_from_slice(&frame[at..]);
    Some(out)
}

/// The big-endian 16 bits at `at`.
pub(crate) fn be16(frame: &[u8], at: usize) -> Option<u16> {
    let b = frame.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes([b[0], b[1]]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::parse;

    /// Ethernet, IPv4 (protocol `proto`, no options), then `rest`.
    fn outer(proto: u8, rest: &[u8]) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00];
        let total = (20 + rest.len()) as u16;
        f.extend_from_slice(&[
            0x45,
            0,
            (total >> 8) as u8,
            total as u8,
            0,
            0,
            0,
            0,
            64,
            proto,
        ]);
        f.extend_from_slice(&[0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
        f.extend_from_slice(rest);
        f
    }

    const INNER_ETH: [u8; 14] = [2, 0, 0, 0, 0, 3, 2, 0, 0, 0, 0, 4, 0x08, 0x00];

    #[test]
    fn gre_with_a_key_carries_an_ethernet_frame_or_an_ip_packet() {
        // Flags K (0x20), protocol TEB, the key word.
        let mut gre = vec![0x20, 0, 0x65, 0x58, 0, 0, 0, 7];
        gre.extend_from_slice(&INNER_ETH);
        gre.extend_from_slice(&[0x45; 20]);
        let f = outer(47, &gre);
        let got = inner(&f, &parse(&f)).unwrap();
        assert_eq!(got.mac, Some(14 + 20 + 8));
        assert_eq!(got.ip, Some(14 + 20 + 8 + 14));
        let mut l3 = vec![0x20, 0, 0x08, 0x00, 0, 0, 0, 7];
        l3.extend_from_slice(&[0x45; 20]);
        let f = outer(47, &l3);
        let got = inner(&f, &parse(&f)).unwrap();
        assert_eq!((got.mac, got.ip), (None, Some(14 + 20 + 8)));
    }

    #[test]
    fn an_l3_tunnel_s_inner_packet_is_parsed_from_its_ip_header() {
        // GRE with a key carrying IPv4/UDP 10.0.0.5:7 -> 10.0.0.6:9, no Ethernet header.
        let mut l3 = vec![0x20, 0, 0x08, 0x00, 0, 0, 0, 7];
        l3.extend_from_slice(&[
            0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 5, 10, 0, 0, 6,
        ]);
        l3.extend_from_slice(&[0, 7, 0, 9, 0, 8, 0, 0]);
        let f = outer(47, &l3);
        let (packet, p) = inner_packet(&f, &parse(&f)).unwrap();
        assert_eq!(packet.len(), 28);
        assert_eq!((p.l3, p.l4), (L3Kind::Ipv4, L4Kind::Udp));
        assert_eq!((p.src_port, p.dst_port), (7, 9));
        assert_eq!(
            (p.src_mac, p.dst_mac, p.ethertype),
            ([0; 6], [0; 6], Some(0x0800))
        );
        // An L2 tunnel's inner frame keeps its MACs.
        let mut teb = vec![0x20, 0, 0x65, 0x58, 0, 0, 0, 7];
        teb.extend_from_slice(&INNER_ETH);
        teb.extend_from_slice(&l3[8..]);
        let f = outer(47, &teb);
        let (_, p) = inner_packet(&f, &parse(&f)).unwrap();
        assert_eq!((p.src_mac, p.dst_port), ([2, 0, 0, 0, 0, 4], 9));
        assert!(inner_packet(&f[..14 + 20], &parse(&f[..14 + 20])).is_none());
    }

    #[test]
    fn frames_go_into_tunnels_and_come_back_out() {
        let mut frame = INNER_ETH.to_vec();
        frame.extend_from_slice(&[
            0x45, 0, 0, 24, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ]);
        frame.extend_from_slice(&[0; 4]);
        // GRE, key, TEB; the outer IPv4 lengths as rdma-core writes them, no checksum.
        let header = outer(47, &[0x20, 0, 0x65, 0x58, 0, 0, 0, 7]);
        let mut l2_header = header.clone();
        let total = (20 + 8 + frame.len()) as u16;
        l2_header[16..18].copy_from_slice(&total.to_be_bytes());
        let l2 = encapsulate(&frame, &l2_header, false).unwrap();
        let p = parse(&l2);
        assert!(crate::packet::ipv4_header_checksum_ok(&l2, &p));
        assert_eq!(decapsulate_l2(&l2).unwrap(), frame);
        // An L3 tunnel carries the IP packet only; decapsulation puts a new Ethernet header.
        let mut l3_header = header;
        l3_header[36..38].copy_from_slice(&[0x08, 0x00]);
        let l3 = encapsulate(&frame, &l3_header, true).unwrap();
        assert_eq!(&l3[l3_header.len()..], &frame[14..]);
        let back = decapsulate_l3(&l3, &INNER_ETH).unwrap();
        assert_eq!(back, frame);
        assert_eq!(decapsulate_l2(&l3), None, "no inner Ethernet header");
        assert_eq!(decapsulate_l2(&frame), None, "no tunnel");
    }

    #[test]
    fn geneve_options_are_skipped_and_plain_udp_is_no_tunnel() {
        let mut udp = vec![0x30, 0x39, 0x17, 0xc1, 0, 50, 0, 0];
        // Two option words, protocol TEB, VNI.
        udp.extend_from_slice(&[0x02, 0, 0x65, 0x58, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        udp.extend_from_slice(&INNER_ETH);
        udp.extend_from_slice(&[0x45; 20]);
        let f = outer(17, &udp);
        assert_eq!(
            inner(&f, &parse(&f)).unwrap().mac,
            Some(14 + 20 + 8 + 8 + 8)
        );
        let mut plain = f.clone();
        plain[36..38].copy_from_slice(&53u16.to_be_bytes());
        assert_eq!(inner(&plain, &parse(&plain)), None);
        // A header running past the frame is no tunnel either.
        let cut = &f[..14 + 20 + 8 + 4];
        assert_eq!(inner(cut, &parse(cut)), None);
    }

    #[test]
    fn vxlan_gpe_carries_what_its_next_protocol_names() {
        let gpe = |next: u8| {
            // UDP to port 4790, flags (version 0, I and P), next protocol, VNI 0x2a.
            let mut udp = vec![0x30, 0x39, 0x12, 0xb6, 0, 50, 0, 0];
            udp.extend_from_slice(&[0x0c, 0, 0, next, 0, 0, 0x2a, 0]);
            udp.extend_from_slice(&INNER_ETH);
            udp.extend_from_slice(&[0x45; 20]);
            outer(17, &udp)
        };
        let header = 14 + 20 + 8;
        let f = gpe(3);
        assert_eq!(kind(&f, &parse(&f)), Some(Kind::VxlanGpe(header)));
        let l2 = Inner {
            mac: Some(header + 8),
            ip: Some(header + 8 + 14),
        };
        assert_eq!(inner(&f, &parse(&f)), Some(l2));
        for next in [1, 2] {
            let f = gpe(next);
            let l3 = Inner {
                mac: None,
                ip: Some(header + 8),
            };
            assert_eq!(inner(&f, &parse(&f)), Some(l3), "next protocol {next}");
        }
        // NSH (4): a tunnel whose payload the model does not parse.
        let nsh = gpe(4);
        assert_eq!(kind(&nsh, &parse(&nsh)), Some(Kind::VxlanGpe(header)));
        assert_eq!(inner(&nsh, &parse(&nsh)), None);
    }

    #[test]
    fn gtpu_skips_its_optional_word_and_extension_headers() {
        let header = 14 + 20 + 8;
        let gtpu = |flags: u8, msg_type: u8, extra: &[u8]| {
            let mut udp = vec![0x30, 0x39, 0x08, 0x68, 0, 0, 0, 0];
            udp.extend_from_slice(&[flags, msg_type, 0, 0, 0, 0, 0x04, 0xd2]);
            udp.extend_from_slice(extra);
            udp.extend_from_slice(&[0x45; 20]);
            outer(17, &udp)
        };
        let ip_at = |f: &[u8]| inner(f, &parse(f)).and_then(|i| i.ip);
        // A G-PDU without options: the IPv4 packet right after the eight bytes.
        let plain = gtpu(0x30, 0xff, &[]);
        assert_eq!(kind(&plain, &parse(&plain)), Some(Kind::GtpU(header)));
        assert_eq!(ip_at(&plain), Some(header + 8));
        // The S flag: the sequence number word.
        assert_eq!(ip_at(&gtpu(0x32, 0xff, &[0, 1, 0, 0])), Some(header + 12));
        // The E flag: a PDU session container (type 0x85, one word), then none.
        let ext = gtpu(0x34, 0xff, &[0, 0, 0, 0x85, 1, 0x10, 0x09, 0]);
        assert_eq!(ip_at(&ext), Some(header + 16));
        // An extension header of length 0 makes no header at all.
        let bad = gtpu(0x34, 0xff, &[0, 0, 0, 0x85, 0, 0, 0, 0]);
        assert_eq!(kind(&bad, &parse(&bad)), None);
        let words = gtpu_words(&ext, &parse(&ext)).unwrap();
        assert_eq!(
            (words.teid, words.dw_2, words.first_ext_dw_0),
            (0x4d2, 0x85, 0x0110_0900)
        );
        let plain_words = gtpu_words(&plain, &parse(&plain)).unwrap();
        assert_eq!((plain_words.dw_2, plain_words.first_ext_dw_0), (0, 0));
        // An echo request (type 1) carries no user packet.
        let echo = gtpu(0x30, 1, &[]);
        assert_eq!(kind(&echo, &parse(&echo)), Some(Kind::GtpU(header)));
        assert_eq!(inner(&echo, &parse(&echo)), None);
    }
}
