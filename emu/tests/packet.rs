//! Frame parsing, checksum verification and insertion, and VLAN insertion, on hand-built frames
//! and on hostile bytes.

use cxdirect_emu::packet::{
    insert_checksums, insert_vlan, ipv4_header_checksum_ok, l4_checksum_ok, ones_complement_sum,
    parse, IpAddrs, L3Kind, L4Kind, PacketError, Parsed, VlanTag, TCP_ACK, TCP_PSH, TCP_SYN,
};

const DST_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x01];
const SRC_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x02];
const SRC4: [u8; 4] = [192, 168, 0, 1];
const DST4: [u8; 4] = [10, 1, 2, 3];
const SRC6: [u8; 16] = [
    0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01,
];
const DST6: [u8; 16] = [
    0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02,
];

/// Reference checksum for the tests, written independently of the crate: plain 32-bit sum of
/// big-endian words with carries folded at the end, inverted.
fn reference_checksum(pieces: &[&[u8]]) -> u16 {
    let mut bytes = Vec::new();
    for piece in pieces {
        bytes.extend_from_slice(piece);
    }
    if bytes.len() % 2 == 1 {
        bytes.push(0);
    }
    let mut sum: u32 = bytes
        .chunks(2)
        .map(|w| u32::from(w[0]) << 8 | u32::from(w[1]))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

fn eth(ethertype: u16) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&DST_MAC);
    f.extend_from_slice(&SRC_MAC);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f
}

/// IPv4 header with a correct checksum; `options` must be a multiple of 4 bytes.
fn ipv4_header(proto: u8, payload_len: usize, options: &[u8], frag: u16) -> Vec<u8> {
    let hlen = 20 + options.len();
    let total = (hlen + payload_len) as u16;
    let mut h = vec![0x40 | (hlen / 4) as u8, 0];
    h.extend_from_slice(&total.to_be_bytes());
    h.extend_from_slice(&[0x12, 0x34]);
    h.extend_from_slice(&frag.to_be_bytes());
    h.extend_from_slice(&[64, proto, 0, 0]);
    h.extend_from_slice(&SRC4);
    h.extend_from_slice(&DST4);
    h.extend_from_slice(options);
    let c = reference_checksum(&[&h]);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h
}

fn ipv6_header(next: u8, payload_len: usize) -> Vec<u8> {
    let mut h = vec![0x60, 0, 0, 0];
    h.extend_from_slice(&(payload_len as u16).to_be_bytes());
    h.extend_from_slice(&[next, 64]);
    h.extend_from_slice(&SRC6);
    h.extend_from_slice(&DST6);
    h
}

fn pseudo_v4(proto: u8, len: usize) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&SRC4);
    p.extend_from_slice(&DST4);
    p.extend_from_slice(&[0, proto]);
    p.extend_from_slice(&(len as u16).to_be_bytes());
    p
}

fn pseudo_v6(proto: u8, len: usize) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&SRC6);
    p.extend_from_slice(&DST6);
    p.extend_from_slice(&(len as u32).to_be_bytes());
    p.extend_from_slice(&[0, 0, 0, proto]);
    p
}

/// UDP segment with a correct checksum for the given pseudo-header.
fn udp(sport: u16, dport: u16, payload: &[u8], pseudo: &[u8]) -> Vec<u8> {
    let mut s = Vec::new();
    s.extend_from_slice(&sport.to_be_bytes());
    s.extend_from_slice(&dport.to_be_bytes());
    s.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    s.extend_from_slice(&[0, 0]);
    s.extend_from_slice(payload);
    let mut c = reference_checksum(&[pseudo, &s]);
    if c == 0 {
        c = 0xffff;
    }
    s[6..8].copy_from_slice(&c.to_be_bytes());
    s
}

/// TCP segment with a correct checksum; `options` must be a multiple of 4 bytes.
fn tcp(
    sport: u16,
    dport: u16,
    flags: u8,
    options: &[u8],
    payload: &[u8],
    pseudo: &[u8],
) -> Vec<u8> {
    let mut s = Vec::new();
    s.extend_from_slice(&sport.to_be_bytes());
    s.extend_from_slice(&dport.to_be_bytes());
    s.extend_from_slice(&0x0102_0304u32.to_be_bytes());
    s.extend_from_slice(&0x0506_0708u32.to_be_bytes());
    s.push((((20 + options.len()) / 4) as u8) << 4);
    s.push(flags);
    s.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]);
    s.extend_from_slice(options);
    s.extend_from_slice(payload);
    let c = reference_checksum(&[pseudo, &s]);
    s[16..18].copy_from_slice(&c.to_be_bytes());
    s
}

fn ipv4_udp_frame(payload: &[u8]) -> Vec<u8> {
    let seg = udp(5000, 53, payload, &pseudo_v4(17, 8 + payload.len()));
    let mut f = eth(0x0800);
    f.extend(ipv4_header(17, seg.len(), &[], 0));
    f.extend(seg);
    f
}

fn ipv4_tcp_frame(flags: u8, payload: &[u8]) -> Vec<u8> {
    let len = 20 + payload.len();
    let seg = tcp(40000, 80, flags, &[], payload, &pseudo_v4(6, len));
    let mut f = eth(0x0800);
    f.extend(ipv4_header(6, seg.len(), &[], 0));
    f.extend(seg);
    f
}

fn ipv6_udp_frame(payload: &[u8]) -> Vec<u8> {
    let seg = udp(1234, 4321, payload, &pseudo_v6(17, 8 + payload.len()));
    let mut f = eth(0x86dd);
    f.extend(ipv6_header(17, seg.len()));
    f.extend(seg);
    f
}

fn ipv6_tcp_frame(flags: u8, payload: &[u8]) -> Vec<u8> {
    let seg = tcp(
        443,
        55555,
        flags,
        &[],
        payload,
        &pseudo_v6(6, 20 + payload.len()),
    );
    let mut f = eth(0x86dd);
    f.extend(ipv6_header(6, seg.len()));
    f.extend(seg);
    f
}

/// Inserts a tag with `tpid` after the MAC addresses.
fn tagged(frame: &[u8], tpid: u16, tci: u16) -> Vec<u8> {
    let mut f = frame[..12].to_vec();
    f.extend_from_slice(&tpid.to_be_bytes());
    f.extend_from_slice(&tci.to_be_bytes());
    f.extend_from_slice(&frame[12..]);
    f
}

fn pad_to_60(mut f: Vec<u8>) -> Vec<u8> {
    if f.len() < 60 {
        f.resize(60, 0);
    }
    f
}

#[test]
fn ipv4_udp_every_field() {
    let f = ipv4_udp_frame(b"hello");
    let p = parse(&f);
    let want = Parsed {
        frame_len: 14 + 20 + 8 + 5,
        dst_mac: DST_MAC,
        src_mac: SRC_MAC,
        outer_vlan: None,
        vlan: None,
        ethertype: Some(0x0800),
        l3: L3Kind::Ipv4,
        l3_offset: 14,
        l3_len: 20,
        ip_end: 14 + 20 + 8 + 5,
        ip_proto: Some(17),
        addrs: Some(IpAddrs::V4 {
            src: SRC4,
            dst: DST4,
        }),
        frag_offset: 0,
        more_fragments: false,
        l4: L4Kind::Udp,
        l4_offset: 34,
        l4_len: 8,
        src_port: 5000,
        dst_port: 53,
        tcp_flags: 0,
        l4_payload_len: 5,
    };
    assert_eq!(p, want);
    assert_eq!(p.l3_hdr_type(), 2);
    assert_eq!(p.l4_hdr_type(), 2);
    assert!(!p.is_fragment());
    assert!(!p.ip_truncated());
    assert!(!p.ipv4_has_options());
    assert!(!p.tcp_ack());
    assert!(ipv4_header_checksum_ok(&f, &p));
    assert!(l4_checksum_ok(&f, &p));
}

#[test]
fn ipv4_tcp_ack_without_payload_ignores_ethernet_padding() {
    let f = pad_to_60(ipv4_tcp_frame(TCP_ACK, &[]));
    assert_eq!(f.len(), 60);
    let p = parse(&f);
    assert_eq!(p.l3, L3Kind::Ipv4);
    assert_eq!(p.ip_end, 54);
    assert_eq!(p.l4, L4Kind::Tcp);
    assert_eq!((p.l4_offset, p.l4_len), (34, 20));
    assert_eq!((p.src_port, p.dst_port), (40000, 80));
    assert_eq!(p.tcp_flags, TCP_ACK);
    assert!(p.tcp_ack());
    assert!(!p.tcp_has_payload());
    assert_eq!(p.l4_payload_len, 0);
    assert_eq!(p.l4_hdr_type(), 3);
    assert!(ipv4_header_checksum_ok(&f, &p));
    assert!(
        l4_checksum_ok(&f, &p),
        "padding must not enter the checksum"
    );
}

#[test]
fn ipv4_tcp_ack_with_payload_and_syn() {
    let f = ipv4_tcp_frame(TCP_ACK | TCP_PSH, b"GET / HTTP/1.0\r\n\r\n");
    let p = parse(&f);
    assert_eq!(p.l4, L4Kind::Tcp);
    assert_eq!(p.tcp_flags, TCP_ACK | TCP_PSH);
    assert!(p.tcp_has_payload());
    assert_eq!(p.l4_payload_len, 18);
    assert_eq!(p.l4_hdr_type(), 4);
    assert!(l4_checksum_ok(&f, &p));

    let syn = ipv4_tcp_frame(TCP_SYN, &[]);
    let p = parse(&syn);
    assert_eq!(p.l4_hdr_type(), 1);
    assert!(!p.tcp_ack());
    assert!(l4_checksum_ok(&syn, &p));

    // A SYN with data is still "TCP without ACK".
    let syn_data = ipv4_tcp_frame(TCP_SYN, b"x");
    assert_eq!(parse(&syn_data).l4_hdr_type(), 1);
}

#[test]
fn ipv4_options_and_tcp_options() {
    let options = [0x01, 0x01, 0x01, 0x00]; // NOP NOP NOP EOL
    let tcp_opts = [0x02, 0x04, 0x05, 0xb4]; // MSS 1460
    let seg = tcp(1, 2, TCP_ACK, &tcp_opts, b"ab", &pseudo_v4(6, 26));
    let mut f = eth(0x0800);
    f.extend(ipv4_header(6, seg.len(), &options, 0));
    f.extend(seg);
    let p = parse(&f);
    assert_eq!(p.l3_len, 24);
    assert!(p.ipv4_has_options());
    assert_eq!(p.l4_offset, 38);
    assert_eq!(p.l4_len, 24);
    assert_eq!(p.l4_payload_len, 2);
    assert_eq!(p.l4_hdr_type(), 4);
    assert!(ipv4_header_checksum_ok(&f, &p));
    assert!(l4_checksum_ok(&f, &p));
}

#[test]
fn ipv6_udp_every_field() {
    let f = ipv6_udp_frame(b"abcdefg");
    let p = parse(&f);
    let want = Parsed {
        frame_len: 14 + 40 + 8 + 7,
        dst_mac: DST_MAC,
        src_mac: SRC_MAC,
        outer_vlan: None,
        vlan: None,
        ethertype: Some(0x86dd),
        l3: L3Kind::Ipv6,
        l3_offset: 14,
        l3_len: 40,
        ip_end: 14 + 40 + 8 + 7,
        ip_proto: Some(17),
        addrs: Some(IpAddrs::V6 {
            src: SRC6,
            dst: DST6,
        }),
        frag_offset: 0,
        more_fragments: false,
        l4: L4Kind::Udp,
        l4_offset: 54,
        l4_len: 8,
        src_port: 1234,
        dst_port: 4321,
        tcp_flags: 0,
        l4_payload_len: 7,
    };
    assert_eq!(p, want);
    assert_eq!(p.l3_hdr_type(), 1);
    assert_eq!(p.l4_hdr_type(), 2);
    assert!(
        !ipv4_header_checksum_ok(&f, &p),
        "IPv6 has no header checksum"
    );
    assert!(l4_checksum_ok(&f, &p));
}

#[test]
fn ipv6_tcp_and_other_next_headers() {
    let f = ipv6_tcp_frame(TCP_ACK, b"data");
    let p = parse(&f);
    assert_eq!(p.l4, L4Kind::Tcp);
    assert_eq!(p.l4_hdr_type(), 4);
    assert!(l4_checksum_ok(&f, &p));

    // Hop-by-hop options (0) are not walked: L4 is "other" at the end of the fixed header.
    let mut hbh = eth(0x86dd);
    hbh.extend(ipv6_header(0, 8));
    hbh.extend_from_slice(&[17, 0, 1, 4, 0, 0, 0, 0]);
    let p = parse(&hbh);
    assert_eq!(p.l3, L3Kind::Ipv6);
    assert_eq!(p.l4, L4Kind::Other);
    assert_eq!(p.l4_offset, 54);
    assert_eq!(p.l4_payload_len, 8);
    assert_eq!(p.l4_hdr_type(), 0);
    assert!(!l4_checksum_ok(&hbh, &p));

    // A fragment header is flagged as a fragment.
    let mut frag = eth(0x86dd);
    frag.extend(ipv6_header(44, 16));
    frag.extend_from_slice(&[17, 0, 0x00, 0xb1, 0, 0, 0, 7]); // offset 22, M = 1
    frag.extend_from_slice(&[0; 8]);
    let p = parse(&frag);
    assert_eq!(p.l4, L4Kind::Other);
    assert_eq!(p.frag_offset, 22);
    assert!(p.more_fragments);
    assert!(p.is_fragment());
}

#[test]
fn vlan_tagged_frames() {
    let inner = ipv4_udp_frame(b"vlan");
    let f = tagged(&inner, 0x8100, 0xa00c); // PCP 5, DEI 0, VID 12
    let p = parse(&f);
    let tag = VlanTag {
        tpid: 0x8100,
        tci: 0xa00c,
    };
    assert_eq!(p.vlan, Some(tag));
    assert_eq!((tag.vid(), tag.pcp(), tag.dei()), (12, 5, false));
    assert_eq!(p.outer_vlan, None);
    assert_eq!(p.ethertype, Some(0x0800));
    assert_eq!(p.l3_offset, 18);
    assert_eq!(p.l4_offset, 38);
    assert_eq!(p.l4, L4Kind::Udp);
    assert!(ipv4_header_checksum_ok(&f, &p));
    assert!(l4_checksum_ok(&f, &p));

    // 802.1ad outer tag followed by an 802.1Q tag.
    let qinq = tagged(&f, 0x88a8, 0x1064);
    let p = parse(&qinq);
    assert_eq!(
        p.outer_vlan,
        Some(VlanTag {
            tpid: 0x88a8,
            tci: 0x1064
        })
    );
    assert!(p.outer_vlan.unwrap().dei());
    assert_eq!(p.vlan, Some(tag));
    assert_eq!(p.l3_offset, 22);
    assert_eq!((p.src_port, p.dst_port), (5000, 53));
    assert!(l4_checksum_ok(&qinq, &p));

    // A lone service tag.
    let s_only = tagged(&inner, 0x88a8, 7);
    let p = parse(&s_only);
    assert_eq!(p.outer_vlan.map(|t| t.vid()), Some(7));
    assert_eq!(p.vlan, None);
    assert_eq!(p.l3, L3Kind::Ipv4);

    // The frame ends right after the tag: the tag is there, the ethertype is not.
    let p = parse(&f[..16]);
    assert_eq!(p.dst_mac, DST_MAC);
    assert_eq!(p.vlan, Some(tag));
    assert_eq!(p.ethertype, None);
    assert_eq!(p.l3, L3Kind::None);
    // The frame ends inside the tag.
    let p = parse(&f[..15]);
    assert_eq!(p.vlan, None);
    assert_eq!(p.ethertype, None);
    let mut cut = f[..15].to_vec();
    assert_eq!(
        insert_checksums(&mut cut, true, true),
        Err(PacketError::Truncated {
            header: "VLAN tag",
            len: 15
        })
    );
}

#[test]
fn truncated_frames() {
    let f = ipv4_tcp_frame(TCP_ACK, b"payload");

    // Shorter than an Ethernet header: nothing at all.
    let p = parse(&f[..13]);
    assert_eq!(
        p,
        Parsed {
            frame_len: 13,
            ..Parsed::default()
        }
    );
    assert_eq!(parse(&[]).frame_len, 0);

    // Ethernet header only.
    let p = parse(&f[..14]);
    assert_eq!(p.ethertype, Some(0x0800));
    assert_eq!(p.l3, L3Kind::None);

    // IPv4 header cut.
    let p = parse(&f[..14 + 19]);
    assert_eq!(p.l3, L3Kind::None);
    assert_eq!(p.addrs, None);

    // TCP header cut: IP is there, L4 is not, and the IP length overruns the frame.
    let cut = &f[..14 + 20 + 19];
    let p = parse(cut);
    assert_eq!(p.l3, L3Kind::Ipv4);
    assert_eq!(p.l4, L4Kind::None);
    assert_eq!(p.l4_hdr_type(), 0);
    assert!(p.ip_truncated());
    assert!(!ipv4_header_checksum_ok(cut, &p));
    assert!(!l4_checksum_ok(cut, &p));

    // Payload cut: headers parse, but the checksums cannot be verified.
    let cut = &f[..f.len() - 1];
    let p = parse(cut);
    assert_eq!(p.l4, L4Kind::Tcp);
    assert!(p.ip_truncated());
    assert!(!l4_checksum_ok(cut, &p));
    let mut copy = cut.to_vec();
    assert_eq!(
        insert_checksums(&mut copy, false, true),
        Err(PacketError::Truncated {
            header: "IP packet",
            len: cut.len()
        })
    );
    assert_eq!(copy, cut, "a failed offload leaves the frame alone");

    // IPv6 header cut.
    let f6 = ipv6_udp_frame(b"x");
    let p = parse(&f6[..14 + 39]);
    assert_eq!(p.l3, L3Kind::None);
}

#[test]
fn malformed_headers_stop_the_parse() {
    // IPv4 ethertype with version 6 in the header.
    let mut f = ipv4_udp_frame(b"x");
    f[14] = 0x65;
    assert_eq!(parse(&f).l3, L3Kind::None);
    // IHL below 5.
    f[14] = 0x44;
    assert_eq!(parse(&f).l3, L3Kind::None);
    let mut copy = f.clone();
    assert_eq!(
        insert_checksums(&mut copy, true, false),
        Err(PacketError::BadField {
            field: "IPv4 header length (IHL x 4)",
            value: 16
        })
    );

    // Total length inside the header: IP but no L4, not l3_ok.
    let mut f = ipv4_udp_frame(b"x");
    f[16..18].copy_from_slice(&19u16.to_be_bytes());
    let c = reference_checksum(&[&{
        let mut h = f[14..34].to_vec();
        h[10] = 0;
        h[11] = 0;
        h
    }]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
    let p = parse(&f);
    assert_eq!(p.l3, L3Kind::Ipv4);
    assert_eq!(p.l4, L4Kind::None);
    assert!(!ipv4_header_checksum_ok(&f, &p));

    // TCP data offset below 5.
    let mut f = ipv4_tcp_frame(TCP_ACK, b"abc");
    f[34 + 12] = 0x40;
    let p = parse(&f);
    assert_eq!(p.l4, L4Kind::None);
    assert_eq!(
        insert_checksums(&mut f, false, true),
        Err(PacketError::BadField {
            field: "TCP header length (data offset x 4)",
            value: 16
        })
    );

    // UDP length longer than the IP payload.
    let mut f = ipv4_udp_frame(b"abc");
    f[38..40].copy_from_slice(&100u16.to_be_bytes());
    let p = parse(&f);
    assert_eq!(p.l4, L4Kind::Udp);
    assert!(!l4_checksum_ok(&f, &p));
    assert_eq!(
        insert_checksums(&mut f, false, true),
        Err(PacketError::BadField {
            field: "UDP length",
            value: 100
        })
    );
}

#[test]
fn garbage_and_non_ip() {
    let arp = pad_to_60({
        let mut f = eth(0x0806);
        f.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
        f
    });
    let p = parse(&arp);
    assert_eq!(p.ethertype, Some(0x0806));
    assert_eq!(p.l3, L3Kind::None);
    assert_eq!(p.l4, L4Kind::None);
    assert_eq!((p.l3_hdr_type(), p.l4_hdr_type()), (0, 0));
    assert!(!ipv4_header_checksum_ok(&arp, &p));
    assert!(!l4_checksum_ok(&arp, &p));

    let garbage = [0xffu8; 64];
    let p = parse(&garbage);
    assert_eq!(p.dst_mac, [0xff; 6]);
    assert_eq!(p.ethertype, Some(0xffff));
    assert_eq!(p.l3, L3Kind::None);
}

#[test]
fn ipv4_fragments() {
    // A later fragment (offset 185 x 8 bytes): no L4, whatever the bytes after the header say.
    let mut f = eth(0x0800);
    let payload = [0xabu8; 24];
    f.extend(ipv4_header(17, payload.len(), &[], 185));
    f.extend_from_slice(&payload);
    let p = parse(&f);
    assert_eq!(p.l3, L3Kind::Ipv4);
    assert_eq!(p.ip_proto, Some(17));
    assert_eq!(p.frag_offset, 185);
    assert!(!p.more_fragments);
    assert!(p.is_fragment());
    assert_eq!(p.l4, L4Kind::None);
    assert_eq!((p.src_port, p.dst_port), (0, 0));
    assert_eq!(p.l4_hdr_type(), 0);
    assert!(ipv4_header_checksum_ok(&f, &p));
    assert!(!l4_checksum_ok(&f, &p));
    assert_eq!(
        insert_checksums(&mut f.clone(), false, true),
        Err(PacketError::Fragment {
            offset: 185,
            more: false
        })
    );
    assert_eq!(insert_checksums(&mut f.clone(), true, false), Ok(()));

    // A first fragment (MF, offset 0): the UDP header is there, the checksum is not checkable.
    let seg = udp(7, 9, &[1; 16], &pseudo_v4(17, 24));
    let mut f = eth(0x0800);
    f.extend(ipv4_header(17, 16, &[], 0x2000));
    f.extend_from_slice(&seg[..16]);
    let p = parse(&f);
    assert!(p.more_fragments);
    assert_eq!(p.frag_offset, 0);
    assert_eq!(p.l4, L4Kind::Udp);
    assert_eq!((p.src_port, p.dst_port), (7, 9));
    assert!(!l4_checksum_ok(&f, &p));
}

/// RFC 1071's sum the plain way: 16-bit words, carries folded at the end.
fn word_by_word_sum(data: &[u8], initial: u16) -> u16 {
    let mut acc = u64::from(initial);
    for pair in data.chunks(2) {
        acc += u64::from(pair[0]) << 8 | u64::from(*pair.get(1).unwrap_or(&0));
    }
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

#[test]
fn the_wide_checksum_sum_equals_the_word_by_word_sum() {
    let mut rng = XorShift(0x2545_f491_4f6c_dd1d);
    let mut next = || rng.next();
    for len in 0..200 {
        for fill in [None, Some(0x00), Some(0xff)] {
            let data: Vec<u8> = (0..len)
                .map(|_| fill.unwrap_or_else(|| next() as u8))
                .collect();
            for initial in [0, 1, 0xfffe, 0xffff, next() as u16] {
                assert_eq!(
                    ones_complement_sum(&data, initial),
                    word_by_word_sum(&data, initial),
                    "{len} bytes {data:02x?} from {initial:#06x}"
                );
            }
        }
    }
}

#[test]
fn published_checksum_examples() {
    // RFC 1071 section 3 numerical example: one's-complement sum ddf2.
    let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
    assert_eq!(ones_complement_sum(&data, 0), 0xddf2);
    assert_eq!(!ones_complement_sum(&data, 0), 0x220d);
    // Odd length: the last byte is a high byte.
    assert_eq!(ones_complement_sum(&[0x12, 0x34, 0x56], 0), 0x6834);
    assert_eq!(ones_complement_sum(&[], 0x1234), 0x1234);
    // Carries wrap around.
    assert_eq!(ones_complement_sum(&[0xff, 0xff, 0x00, 0x02], 0), 0x0002);
    assert_eq!(ones_complement_sum(&[0xff, 0xff], 0xffff), 0xffff);

    // The widely quoted IPv4 header example with checksum b861.
    let header = [
        0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8, 0x00,
        0x01, 0xc0, 0xa8, 0x00, 0xc7,
    ];
    assert_eq!(ones_complement_sum(&header, 0), 0xffff);
    let mut f = eth(0x0800);
    f.extend_from_slice(&header);
    f.resize(14 + 0x73, 0);
    let p = parse(&f);
    assert!(ipv4_header_checksum_ok(&f, &p));
    f[24] = 0;
    f[25] = 0;
    insert_checksums(&mut f, true, false).unwrap();
    assert_eq!(&f[24..26], &[0xb8, 0x61]);
}

#[test]
fn bad_checksums_are_detected() {
    for f in [
        ipv4_udp_frame(b"payload!"),
        ipv4_tcp_frame(TCP_ACK, b"payload!"),
        ipv6_udp_frame(b"payload!"),
        ipv6_tcp_frame(TCP_ACK, b"payload!"),
    ] {
        let p = parse(&f);
        assert!(l4_checksum_ok(&f, &p));
        // Any payload bit flip breaks the L4 checksum, not the IPv4 one.
        let mut bad = f.clone();
        *bad.last_mut().unwrap() ^= 0x04;
        let q = parse(&bad);
        assert!(!l4_checksum_ok(&bad, &q));
        assert_eq!(ipv4_header_checksum_ok(&bad, &q), p.l3 == L3Kind::Ipv4);
        // A flipped address breaks both (the pseudo-header covers it).
        let mut bad = f.clone();
        let addr_at = if p.l3 == L3Kind::Ipv4 {
            14 + 12
        } else {
            14 + 8
        };
        bad[addr_at] ^= 1;
        let q = parse(&bad);
        assert!(!l4_checksum_ok(&bad, &q));
        assert!(!ipv4_header_checksum_ok(&bad, &q));
        // A Parsed from another frame is never trusted.
        assert!(!l4_checksum_ok(&f[..f.len() - 1], &p));
    }
}

#[test]
fn zero_udp_checksum() {
    let mut f = ipv4_udp_frame(b"nocsum");
    f[40..42].copy_from_slice(&[0, 0]);
    let p = parse(&f);
    assert!(
        l4_checksum_ok(&f, &p),
        "IPv4 UDP without checksum is accepted"
    );

    let mut f = ipv6_udp_frame(b"nocsum");
    f[60..62].copy_from_slice(&[0, 0]);
    let p = parse(&f);
    assert!(!l4_checksum_ok(&f, &p), "IPv6 UDP must carry a checksum");
}

#[test]
fn insert_checksums_then_verify() {
    let frames = [
        ipv4_udp_frame(b"udp over v4"),
        ipv4_udp_frame(&[]),
        pad_to_60(ipv4_tcp_frame(TCP_ACK, &[])),
        ipv4_tcp_frame(TCP_ACK | TCP_PSH, b"odd"),
        ipv6_udp_frame(b"udp over v6"),
        ipv6_tcp_frame(TCP_SYN, &[]),
        tagged(&ipv4_tcp_frame(TCP_ACK, b"tagged"), 0x8100, 3),
        tagged(&tagged(&ipv6_udp_frame(b"qinq"), 0x8100, 3), 0x88a8, 4),
    ];
    for good in frames {
        let p = parse(&good);
        let l4_at = p.l4_offset + if p.l4 == L4Kind::Tcp { 16 } else { 6 };

        // Scribble over both checksums, then let the "NIC" fill them in.
        let mut f = good.clone();
        if p.l3 == L3Kind::Ipv4 {
            f[p.l3_offset + 10..p.l3_offset + 12].copy_from_slice(&[0xde, 0xad]);
        }
        f[l4_at..l4_at + 2].copy_from_slice(&[0xbe, 0xef]);
        let q = parse(&f);
        assert!(!l4_checksum_ok(&f, &q));

        // L3 only: the L4 field is left as it was.
        let mut l3_only = f.clone();
        insert_checksums(&mut l3_only, true, false).unwrap();
        assert_eq!(&l3_only[l4_at..l4_at + 2], &[0xbe, 0xef]);
        assert_eq!(ipv4_header_checksum_ok(&l3_only, &q), p.l3 == L3Kind::Ipv4);

        insert_checksums(&mut f, true, true).unwrap();
        let q = parse(&f);
        assert!(l4_checksum_ok(&f, &q));
        assert_eq!(ipv4_header_checksum_ok(&f, &q), p.l3 == L3Kind::Ipv4);
        assert_eq!(f, good, "the builder's reference checksums agree");

        // Neither flag: nothing happens, even to a frame that could not be offloaded.
        let mut junk = vec![1, 2, 3];
        insert_checksums(&mut junk, false, false).unwrap();
    }
}

#[test]
fn udp_checksum_that_computes_to_zero_is_sent_as_ffff() {
    for v6 in [false, true] {
        let mut f = if v6 {
            ipv6_udp_frame(&[0, 0])
        } else {
            ipv4_udp_frame(&[0, 0])
        };
        let p = parse(&f);
        let csum_at = p.l4_offset + 6;
        let end = f.len();
        // Pick the payload word so that everything else sums to 0xffff with the checksum
        // field zeroed: then the checksum computes to 0.
        f[csum_at..csum_at + 2].copy_from_slice(&[0, 0]);
        let pseudo = if v6 {
            pseudo_v6(17, 10)
        } else {
            pseudo_v4(17, 10)
        };
        let rest = !reference_checksum(&[&pseudo, &f[p.l4_offset..end]]);
        f[end - 2..].copy_from_slice(&(!rest).to_be_bytes());
        assert_eq!(reference_checksum(&[&pseudo, &f[p.l4_offset..end]]), 0);

        insert_checksums(&mut f, false, true).unwrap();
        assert_eq!(&f[csum_at..csum_at + 2], &[0xff, 0xff]);
        assert!(l4_checksum_ok(&f, &parse(&f)));
    }
}

#[test]
fn insert_checksums_errors() {
    let mut short = vec![0u8; 10];
    assert_eq!(
        insert_checksums(&mut short, true, true),
        Err(PacketError::Truncated {
            header: "Ethernet header",
            len: 10
        })
    );

    let mut arp = pad_to_60(eth(0x0806));
    assert_eq!(
        insert_checksums(&mut arp, true, false),
        Err(PacketError::NotIp { ethertype: 0x0806 })
    );

    let mut icmp = eth(0x0800);
    icmp.extend(ipv4_header(1, 8, &[], 0));
    icmp.extend_from_slice(&[8, 0, 0, 0, 0, 1, 0, 1]);
    let before = icmp.clone();
    assert_eq!(
        insert_checksums(&mut icmp, true, true),
        Err(PacketError::NotTcpOrUdp { protocol: 1 })
    );
    assert_eq!(icmp, before, "L3 is not written when L4 fails");
    assert_eq!(insert_checksums(&mut icmp, true, false), Ok(()));

    // IPv6 has no header checksum: L3 offload is a no-op, not an error.
    let good = ipv6_udp_frame(b"v6");
    let mut f = good.clone();
    assert_eq!(insert_checksums(&mut f, true, false), Ok(()));
    assert_eq!(f, good);

    // The IPv4 header runs past the frame.
    let mut cut = ipv4_udp_frame(b"x")[..20].to_vec();
    assert_eq!(
        insert_checksums(&mut cut, true, false),
        Err(PacketError::Truncated {
            header: "IPv4 header",
            len: 20
        })
    );

    // The UDP header is cut by the IP length.
    let mut f = ipv4_udp_frame(b"");
    f[16..18].copy_from_slice(&24u16.to_be_bytes());
    assert_eq!(
        insert_checksums(&mut f, false, true),
        Err(PacketError::Truncated {
            header: "UDP header",
            len: 4
        })
    );

    let msg = PacketError::NotIp { ethertype: 0x0806 }.to_string();
    assert!(msg.contains("0x0806"), "{msg}");
}

#[test]
fn vlan_insertion() {
    let frame = ipv4_udp_frame(b"tag me");
    let mut out = [0xeeu8; 128];
    let n = insert_vlan(&frame, 0x6005, &mut out).unwrap();
    assert_eq!(n, frame.len() + 4);
    assert_eq!(&out[..12], &frame[..12]);
    assert_eq!(&out[12..16], &[0x81, 0x00, 0x60, 0x05]);
    assert_eq!(&out[16..n], &frame[12..]);
    assert!(out[n..].iter().all(|&b| b == 0xee));
    let p = parse(&out[..n]);
    assert_eq!(p.vlan.map(|t| (t.pcp(), t.vid())), Some((3, 5)));
    assert!(l4_checksum_ok(&out[..n], &p));

    // Exactly big enough.
    let mut exact = vec![0u8; frame.len() + 4];
    assert_eq!(insert_vlan(&frame, 1, &mut exact), Ok(frame.len() + 4));

    let mut small = vec![0u8; frame.len() + 3];
    assert_eq!(
        insert_vlan(&frame, 1, &mut small),
        Err(PacketError::OutputTooSmall {
            len: frame.len() + 3,
            needed: frame.len() + 4
        })
    );
    assert!(small.iter().all(|&b| b == 0));

    assert_eq!(
        insert_vlan(&frame[..13], 1, &mut out),
        Err(PacketError::Truncated {
            header: "Ethernet header",
            len: 13
        })
    );
    // A bare Ethernet header is enough.
    assert_eq!(insert_vlan(&frame[..14], 1, &mut out), Ok(18));
    assert_eq!(&out[16..18], &[0x08, 0x00]);
}

/// xorshift64: a small deterministic generator for the hostile-input loops.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Runs every entry point on `frame` and checks invariants that must hold for any bytes.
fn exercise(frame: &[u8]) {
    let p = parse(frame);
    assert_eq!(p.frame_len, frame.len());
    if p.ethertype.is_some() {
        assert!(p.l3_offset <= frame.len());
    }
    if p.l3 != L3Kind::None {
        assert!(p.l3_offset + p.l3_len <= frame.len());
        assert!(p.addrs.is_some());
    }
    if matches!(p.l4, L4Kind::Tcp | L4Kind::Udp) {
        assert!(p.l4_offset + p.l4_len <= frame.len());
        assert!(p.l4_offset + p.l4_len + p.l4_payload_len == p.ip_end);
    }
    let _ = (p.l3_hdr_type(), p.l4_hdr_type(), p.tcp_has_payload());
    let l3_ok = ipv4_header_checksum_ok(frame, &p);
    let _ = l4_checksum_ok(frame, &p);

    for (l3, l4) in [(true, false), (false, true), (true, true)] {
        let mut copy = frame.to_vec();
        match insert_checksums(&mut copy, l3, l4) {
            Ok(()) => {
                let q = parse(&copy);
                if l3 && q.l3 == L3Kind::Ipv4 {
                    assert!(ipv4_header_checksum_ok(&copy, &q));
                }
                if l4 {
                    assert!(l4_checksum_ok(&copy, &q));
                }
                if !l3 && q.l3 == L3Kind::Ipv4 {
                    assert_eq!(ipv4_header_checksum_ok(&copy, &q), l3_ok);
                }
            }
            Err(e) => {
                assert_eq!(copy, frame, "failed offload wrote to the frame");
                assert!(!e.to_string().is_empty());
            }
        }
    }
    let mut out = [0u8; 96];
    match insert_vlan(frame, 0x1234, &mut out) {
        Ok(n) => assert_eq!(n, frame.len() + 4),
        Err(_) => assert!(frame.len() < 14 || frame.len() + 4 > out.len()),
    }
}

#[test]
fn every_truncation_of_valid_frames() {
    let frames = [
        ipv4_udp_frame(b"truncate me"),
        ipv4_tcp_frame(TCP_ACK | TCP_PSH, b"truncate me"),
        ipv6_udp_frame(b"truncate me"),
        ipv6_tcp_frame(TCP_ACK, b"truncate me"),
        tagged(
            &tagged(&ipv4_tcp_frame(TCP_ACK, b"t"), 0x8100, 9),
            0x88a8,
            1,
        ),
    ];
    for f in &frames {
        for len in 0..=f.len() {
            exercise(&f[..len]);
        }
    }
}

#[test]
fn random_and_mutated_bytes_never_panic() {
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    // Pure noise.
    for _ in 0..3000 {
        let len = rng.below(120);
        let frame: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        exercise(&frame);
    }
    // Noise behind plausible headers, so the deeper parsers see it.
    let prefixes: [&[u8]; 6] = [
        &[0x08, 0x00, 0x45],
        &[0x08, 0x00, 0x4f],
        &[0x86, 0xdd, 0x60],
        &[0x81, 0x00, 0x00, 0x01, 0x08, 0x00, 0x46],
        &[
            0x88, 0xa8, 0x00, 0x01, 0x81, 0x00, 0x00, 0x02, 0x86, 0xdd, 0x60,
        ],
        &[0x88, 0xa8, 0x00, 0x01, 0x08, 0x00, 0x45],
    ];
    for i in 0..6000 {
        let prefix = prefixes[i % prefixes.len()];
        let len = 12 + prefix.len() + rng.below(100);
        let mut frame: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        frame[12..12 + prefix.len()].copy_from_slice(prefix);
        // Steer the protocol byte towards TCP/UDP half the time.
        if rng.next() & 1 == 0 {
            let proto_at = if prefix.ends_with(&[0x60]) {
                12 + prefix.len() - 1 + 6
            } else {
                12 + prefix.len() - 1 + 9
            };
            if let Some(b) = frame.get_mut(proto_at) {
                *b = if rng.next() & 1 == 0 { 6 } else { 17 };
            }
        }
        exercise(&frame);
    }
    // Valid frames with a few bytes flipped.
    let frames = [
        ipv4_udp_frame(b"mutate"),
        pad_to_60(ipv4_tcp_frame(TCP_ACK, &[])),
        ipv6_tcp_frame(TCP_ACK, b"mutate"),
        tagged(&ipv6_udp_frame(b"mutate"), 0x8100, 2),
    ];
    for i in 0..8000 {
        let mut f = frames[i % frames.len()].clone();
        for _ in 0..1 + rng.below(3) {
            let at = rng.below(f.len());
            f[at] = rng.next() as u8;
        }
        exercise(&f);
    }
}

#[test]
fn forged_parse_results_never_panic() {
    // `Parsed` has public fields: a caller could hand in nonsense, which must read as "not OK".
    let frame = ipv4_tcp_frame(TCP_ACK, b"forged");
    let real = parse(&frame);
    let huge = [
        usize::MAX,
        usize::MAX - 1,
        usize::MAX / 2,
        1 << 40,
        0,
        3,
        100,
    ];
    for &a in &huge {
        for &b in &huge {
            for l3 in [L3Kind::Ipv4, L3Kind::Ipv6] {
                for l4 in [L4Kind::Tcp, L4Kind::Udp] {
                    let forged = Parsed {
                        l3,
                        l4,
                        l3_offset: a,
                        l3_len: b,
                        ip_end: a ^ b,
                        l4_offset: b,
                        l4_len: a,
                        ..real
                    };
                    assert!(!ipv4_header_checksum_ok(&frame, &forged) || forged == real);
                    let _ = l4_checksum_ok(&frame, &forged);
                    let _ = forged.l4_hdr_type();
                }
            }
        }
    }
}
