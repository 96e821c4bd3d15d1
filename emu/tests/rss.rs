//! Toeplitz RSS: the published Microsoft verification vectors, field selection against parsed
//! frames, and the indirection step.

use cxdirect_emu::packet::parse;
use cxdirect_emu::rss::{
    indirect, rss_hash, rss_hash_keyed, toeplitz, HashFields, HashOrder, HashSelector, L3Proto,
    L4Proto, ToeplitzKey, MAX_HASH_INPUT_LEN,
};
use cxdirect_hw::tir::{
    RxHashFieldSelect, HASH_FIELD_SEL_DST_IP, HASH_FIELD_SEL_IPSEC_SPI, HASH_FIELD_SEL_L4_DPORT,
    HASH_FIELD_SEL_L4_SPORT, HASH_FIELD_SEL_SRC_IP,
};

/// The key of the Microsoft "Verifying the RSS Hash Calculation" table.
const MS_KEY: [u8; 40] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
    0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
    0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
];

/// One row of the published table. `A` is the address form.
#[derive(Clone, Copy)]
struct Row<A> {
    src: A,
    sport: u16,
    dst: A,
    dport: u16,
    /// Hash of the two addresses.
    ip_only: u32,
    /// Hash of the addresses and ports.
    with_ports: u32,
}

const fn row<A: Copy>(t: (A, u16, A, u16, u32, u32)) -> Row<A> {
    Row {
        src: t.0,
        sport: t.1,
        dst: t.2,
        dport: t.3,
        ip_only: t.4,
        with_ports: t.5,
    }
}

/// IPv4 rows: (source, source port, destination, destination port, addresses-only hash,
/// with-ports hash).
const MS_IPV4: [Row<[u8; 4]>; 5] = [
    row((
        [66, 9, 149, 187],
        2794,
        [161, 142, 100, 80],
        1766,
        0x323e_8fc2,
        0x51cc_c178,
    )),
    row((
        [199, 92, 111, 2],
        14230,
        [65, 69, 140, 83],
        4739,
        0xd718_262a,
        0xc626_b0ea,
    )),
    row((
        [24, 19, 198, 95],
        12898,
        [12, 22, 207, 184],
        38024,
        0xd2d0_a5de,
        0x5c2b_394a,
    )),
    row((
        [38, 27, 205, 30],
        48228,
        [209, 142, 163, 6],
        2217,
        0x8298_9176,
        0xafc7_327f,
    )),
    row((
        [153, 39, 163, 191],
        44251,
        [202, 188, 127, 2],
        1303,
        0x5d18_09c5,
        0x10e8_28a2,
    )),
];

/// IPv6 rows of the same table, addresses written as eight 16-bit groups.
const MS_IPV6: [Row<[u16; 8]>; 3] = [
    row((
        [0x3ffe, 0x2501, 0x0200, 0x1fff, 0, 0, 0, 0x0007],
        2794,
        [0x3ffe, 0x2501, 0x0200, 0x0003, 0, 0, 0, 0x0001],
        1766,
        0x2cc1_8cd5,
        0x4020_7d3d,
    )),
    row((
        [0x3ffe, 0x0501, 0x0008, 0, 0x0260, 0x97ff, 0xfe40, 0xefab],
        14230,
        [0xff02, 0, 0, 0, 0, 0, 0, 0x0001],
        4739,
        0x0f0c_461c,
        0xdde5_1bbf,
    )),
    row((
        [
            0x3ffe, 0x1900, 0x4545, 0x0003, 0x0200, 0xf8ff, 0xfe21, 0x67cf,
        ],
        44251,
        [0xfe80, 0, 0, 0, 0x0200, 0xf8ff, 0xfe21, 0x67cf],
        38024,
        0x4b61_e985,
        0x02d1_feef,
    )),
];

fn v6(groups: [u16; 8]) -> [u8; 16] {
    let mut a = [0u8; 16];
    for (i, g) in groups.iter().enumerate() {
        a[2 * i..2 * i + 2].copy_from_slice(&g.to_be_bytes());
    }
    a
}

/// A plain bit-at-a-time Toeplitz, written from the definition for cross-checking: the key is
/// a bit string, and input bit `i` selects key bits `i..i+32`.
fn reference_toeplitz(key: &[u8; 40], input: &[u8]) -> u32 {
    let key_bit = |i: usize| -> u32 {
        if i / 8 < key.len() {
            u32::from(key[i / 8] >> (7 - i % 8) & 1)
        } else {
            0
        }
    };
    let mut hash = 0;
    for i in 0..input.len() * 8 {
        if input[i / 8] >> (7 - i % 8) & 1 == 1 {
            let sub = (0..32).fold(0u32, |s, j| (s << 1) | key_bit(i + j));
            hash ^= sub;
        }
    }
    hash
}

fn frame_v4(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16, proto: u8) -> Vec<u8> {
    let l4_len = if proto == 6 { 20 } else { 8 };
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00];
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&((20 + l4_len) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0, 0, 0, 64, proto, 0, 0]);
    f.extend_from_slice(&src);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    let mut rest = vec![0u8; l4_len - 4];
    if proto == 6 {
        rest[8] = 0x50;
        rest[9] = 0x10;
    } else {
        rest[0..2].copy_from_slice(&8u16.to_be_bytes());
    }
    f.extend(rest);
    f
}

fn frame_v6(src: [u8; 16], sport: u16, dst: [u8; 16], dport: u16, proto: u8) -> Vec<u8> {
    let l4_len = if proto == 6 { 20 } else { 8 };
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x86, 0xdd];
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&(l4_len as u16).to_be_bytes());
    f.extend_from_slice(&[proto, 64]);
    f.extend_from_slice(&src);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    let mut rest = vec![0u8; l4_len - 4];
    if proto == 6 {
        rest[8] = 0x50;
    } else {
        rest[0..2].copy_from_slice(&8u16.to_be_bytes());
    }
    f.extend(rest);
    f
}

fn sel(l3: L3Proto, l4: L4Proto, fields: HashFields) -> HashSelector {
    HashSelector { l3, l4, fields }
}

#[test]
fn microsoft_ipv4_vectors_raw() {
    for Row {
        src,
        sport,
        dst,
        dport,
        ip_only,
        with_ports,
    } in MS_IPV4
    {
        let mut input = Vec::new();
        input.extend_from_slice(&src);
        input.extend_from_slice(&dst);
        assert_eq!(toeplitz(&MS_KEY, &input), ip_only, "{src:?} -> {dst:?}");
        input.extend_from_slice(&sport.to_be_bytes());
        input.extend_from_slice(&dport.to_be_bytes());
        assert_eq!(toeplitz(&MS_KEY, &input), with_ports, "{src:?} -> {dst:?}");
    }
}

#[test]
fn microsoft_ipv6_vectors_raw() {
    for Row {
        src,
        sport,
        dst,
        dport,
        ip_only,
        with_ports,
    } in MS_IPV6
    {
        let mut input = Vec::new();
        input.extend_from_slice(&v6(src));
        input.extend_from_slice(&v6(dst));
        assert_eq!(toeplitz(&MS_KEY, &input), ip_only, "{src:x?}");
        input.extend_from_slice(&sport.to_be_bytes());
        input.extend_from_slice(&dport.to_be_bytes());
        assert_eq!(input.len(), MAX_HASH_INPUT_LEN);
        assert_eq!(toeplitz(&MS_KEY, &input), with_ports, "{src:x?}");
    }
}

#[test]
fn microsoft_vectors_through_parsed_frames() {
    for Row {
        src,
        sport,
        dst,
        dport,
        ip_only,
        with_ports,
    } in MS_IPV4
    {
        let f = frame_v4(src, sport, dst, dport, 6);
        let p = parse(&f);
        let tcp4 = sel(L3Proto::Ipv4, L4Proto::Tcp, HashFields::IP_AND_PORTS);
        assert_eq!(rss_hash(&MS_KEY, tcp4, &f, &p), Some(with_ports));
        let ip4 = sel(L3Proto::Ipv4, L4Proto::Tcp, HashFields::IP);
        assert_eq!(rss_hash(&MS_KEY, ip4, &f, &p), Some(ip_only));
        // The UDP flavour of the same tuple hashes the same bytes.
        let u = frame_v4(src, sport, dst, dport, 17);
        let udp4 = sel(L3Proto::Ipv4, L4Proto::Udp, HashFields::IP_AND_PORTS);
        assert_eq!(rss_hash(&MS_KEY, udp4, &u, &parse(&u)), Some(with_ports));
    }
    for Row {
        src,
        sport,
        dst,
        dport,
        ip_only,
        with_ports,
    } in MS_IPV6
    {
        let f = frame_v6(v6(src), sport, v6(dst), dport, 6);
        let p = parse(&f);
        let tcp6 = sel(L3Proto::Ipv6, L4Proto::Tcp, HashFields::IP_AND_PORTS);
        assert_eq!(rss_hash(&MS_KEY, tcp6, &f, &p), Some(with_ports));
        let ip6 = sel(L3Proto::Ipv6, L4Proto::Udp, HashFields::IP);
        assert_eq!(rss_hash(&MS_KEY, ip6, &f, &p), Some(ip_only));
        let u = frame_v6(v6(src), sport, v6(dst), dport, 17);
        let udp6 = sel(L3Proto::Ipv6, L4Proto::Udp, HashFields::IP_AND_PORTS);
        assert_eq!(rss_hash(&MS_KEY, udp6, &u, &parse(&u)), Some(with_ports));
    }
}

#[test]
fn selector_mismatch_hashes_nothing() {
    let Row {
        src,
        sport,
        dst,
        dport,
        ip_only,
        ..
    } = MS_IPV4[0];
    let tcp = frame_v4(src, sport, dst, dport, 6);
    let udp = frame_v4(src, sport, dst, dport, 17);
    let pt = parse(&tcp);
    let pu = parse(&udp);

    // Wrong IP version.
    let v6_sel = sel(L3Proto::Ipv6, L4Proto::Tcp, HashFields::IP);
    assert_eq!(rss_hash(&MS_KEY, v6_sel, &tcp, &pt), None);
    // Ports selected, wrong L4.
    let udp_sel = sel(L3Proto::Ipv4, L4Proto::Udp, HashFields::IP_AND_PORTS);
    assert_eq!(rss_hash(&MS_KEY, udp_sel, &tcp, &pt), None);
    let tcp_sel = sel(L3Proto::Ipv4, L4Proto::Tcp, HashFields::L4_DPORT);
    assert_eq!(rss_hash(&MS_KEY, tcp_sel, &udp, &pu), None);
    // Addresses only: the L4 selector does not matter.
    let ip_sel = sel(L3Proto::Ipv4, L4Proto::Udp, HashFields::IP);
    assert_eq!(rss_hash(&MS_KEY, ip_sel, &tcp, &pt), Some(ip_only));
    // Nothing selected.
    let none = sel(L3Proto::Ipv4, L4Proto::Tcp, HashFields::empty());
    assert_eq!(rss_hash(&MS_KEY, none, &tcp, &pt), None);
    // Not IP.
    let mut arp = tcp.clone();
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    let ip4 = sel(L3Proto::Ipv4, L4Proto::Tcp, HashFields::IP);
    assert_eq!(rss_hash(&MS_KEY, ip4, &arp, &parse(&arp)), None);
    // A Parsed from another frame is not trusted.
    assert_eq!(rss_hash(&MS_KEY, ip4, &tcp[..tcp.len() - 1], &pt), None);

    // A later IPv4 fragment has no ports: hashed by addresses only.
    let mut frag = udp.clone();
    frag[20..22].copy_from_slice(&0x0010u16.to_be_bytes());
    let pf = parse(&frag);
    assert!(pf.is_fragment());
    let udp4 = sel(L3Proto::Ipv4, L4Proto::Udp, HashFields::IP_AND_PORTS);
    assert_eq!(rss_hash(&MS_KEY, udp4, &frag, &pf), None);
    let ip4u = sel(L3Proto::Ipv4, L4Proto::Udp, HashFields::IP);
    assert_eq!(rss_hash(&MS_KEY, ip4u, &frag, &pf), Some(ip_only));
}

#[test]
fn fields_go_in_standard_order() {
    let Row {
        src,
        sport,
        dst,
        dport,
        ..
    } = MS_IPV4[1];
    let f = frame_v4(src, sport, dst, dport, 17);
    let p = parse(&f);
    let cases: [(HashFields, Vec<u8>); 5] = [
        (HashFields::SRC_IP, src.to_vec()),
        (HashFields::DST_IP, dst.to_vec()),
        (HashFields::L4_SPORT, sport.to_be_bytes().to_vec()),
        (
            HashFields::DST_IP | HashFields::L4_SPORT,
            [&dst[..], &sport.to_be_bytes()].concat(),
        ),
        (
            HashFields::SRC_IP | HashFields::L4_DPORT,
            [&src[..], &dport.to_be_bytes()].concat(),
        ),
    ];
    for (fields, input) in cases {
        let s = sel(L3Proto::Ipv4, L4Proto::Udp, fields);
        assert_eq!(
            rss_hash(&MS_KEY, s, &f, &p),
            Some(toeplitz(&MS_KEY, &input)),
            "{fields:?}"
        );
    }
}

#[test]
fn hash_fields_and_selector_from_context() {
    assert_eq!(HashFields::SRC_IP.bits(), HASH_FIELD_SEL_SRC_IP);
    assert_eq!(HashFields::DST_IP.bits(), HASH_FIELD_SEL_DST_IP);
    assert_eq!(HashFields::L4_SPORT.bits(), HASH_FIELD_SEL_L4_SPORT);
    assert_eq!(HashFields::L4_DPORT.bits(), HASH_FIELD_SEL_L4_DPORT);
    assert_eq!(HashFields::IP_AND_PORTS.bits(), 0xf);
    let mut f = HashFields::SRC_IP;
    f |= HashFields::DST_IP;
    assert_eq!(f, HashFields::IP);
    assert!(f.contains(HashFields::SRC_IP));
    assert!(!f.contains(HashFields::IP_AND_PORTS));
    assert!(!f.intersects(HashFields::L4_PORTS));
    assert!(HashFields::empty().is_empty());
    assert_eq!(
        HashFields::from_bits_truncate(HASH_FIELD_SEL_IPSEC_SPI | HASH_FIELD_SEL_SRC_IP | 1 << 29),
        HashFields::SRC_IP
    );

    assert_eq!(
        HashSelector::from_raw(1, 1, 0xf),
        Some(sel(L3Proto::Ipv6, L4Proto::Udp, HashFields::IP_AND_PORTS))
    );
    assert_eq!(HashSelector::from_raw(2, 0, 3), None);
    assert_eq!(HashSelector::from_raw(0, 7, 3), None);

    let mut raw = [0u8; 4];
    let mut layout = RxHashFieldSelect::new(&mut raw[..]).unwrap();
    layout
        .set_l3_prot_type(0)
        .set_l4_prot_type(1)
        .set_selected_fields(HASH_FIELD_SEL_SRC_IP | HASH_FIELD_SEL_L4_DPORT);
    assert_eq!(
        HashSelector::from_layout(&layout),
        Some(sel(
            L3Proto::Ipv4,
            L4Proto::Udp,
            HashFields::SRC_IP | HashFields::L4_DPORT
        ))
    );
}

#[test]
fn toeplitz_matches_the_definition() {
    assert_eq!(toeplitz(&MS_KEY, &[]), 0);
    // One set bit at position i picks key bits i..i+32.
    assert_eq!(toeplitz(&MS_KEY, &[0x80]), 0x6d5a_56da);
    assert_eq!(toeplitz(&MS_KEY, &[0x00, 0x80]), 0x5a56_da25);
    let mut state = 0x1234_5678_9abc_def0u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..500 {
        let mut key = [0u8; 40];
        key.iter_mut().for_each(|b| *b = next() as u8);
        // Past 36 bytes too: the key's missing tail reads as zeros.
        let len = (next() % 48) as usize;
        let input: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        assert_eq!(toeplitz(&key, &input), reference_toeplitz(&key, &input));
    }
}

#[test]
fn a_keyed_table_hashes_as_the_definition_does() {
    let ms = ToeplitzKey::new(&MS_KEY);
    assert_eq!(ms.hash(&[]), 0);
    assert_eq!(ms.hash(&[0x80]), 0x6d5a_56da);
    assert_eq!(ms.hash(&[0x00, 0x80]), 0x5a56_da25);
    let mut state = 0x0fed_cba9_8765_4321u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..200 {
        let mut key = [0u8; 40];
        key.iter_mut().for_each(|b| *b = next() as u8);
        let table = ToeplitzKey::new(&key);
        // Past the key's 40 bytes too: those input bytes add nothing.
        let len = (next() % 56) as usize;
        let input: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        assert_eq!(
            table.hash(&input),
            reference_toeplitz(&key, &input),
            "{len} bytes"
        );
    }
    // Through the field selection, on the published vectors' frames.
    for row in MS_IPV4 {
        let f = frame_v4(row.src, row.sport, row.dst, row.dport, 6);
        let p = parse(&f);
        let tcp4 = sel(L3Proto::Ipv4, L4Proto::Tcp, HashFields::IP_AND_PORTS);
        assert_eq!(
            rss_hash_keyed(&ms, tcp4, HashOrder::AsCarried, &f, &p),
            Some(row.with_ports)
        );
        let ip4 = sel(L3Proto::Ipv4, L4Proto::Tcp, HashFields::IP);
        assert_eq!(
            rss_hash_keyed(&ms, ip4, HashOrder::AsCarried, &f, &p),
            Some(row.ip_only)
        );
    }
}

#[test]
fn indirection() {
    assert_eq!(indirect(0x51cc_c178, 0), 0);
    assert_eq!(indirect(0x51cc_c178, 1), 0);
    assert_eq!(indirect(0x51cc_c178, 128), 0x78);
    assert_eq!(indirect(10, 3), 1);
    assert_eq!(indirect(u32::MAX, 7), (u32::MAX % 7) as usize);
}

#[test]
fn forged_parse_results_never_panic() {
    let Row {
        src,
        sport,
        dst,
        dport,
        ..
    } = MS_IPV4[2];
    let frame = frame_v4(src, sport, dst, dport, 6);
    let real = parse(&frame);
    let all = sel(L3Proto::Ipv4, L4Proto::Tcp, HashFields::IP_AND_PORTS);
    for &a in &[
        usize::MAX,
        usize::MAX - 1,
        usize::MAX - 13,
        1 << 40,
        0,
        30,
        60,
    ] {
        let forged = cxdirect_emu::packet::Parsed {
            l3_offset: a,
            l4_offset: a,
            ..real
        };
        let h = rss_hash(&MS_KEY, all, &frame, &forged);
        assert!(h.is_none() || a <= frame.len());
    }
}
