//! The messages against the bytes perftest's `sprintf` formats make, and hostile input.

use super::*;

fn sample(gid: bool) -> Keys {
    Keys {
        lid: 0,
        out_reads: 0x10,
        qpn: 0x00_0123,
        psn: 0xab_cdef,
        rkey: 0x0000_1234,
        vaddr: 0x0000_7f00_0000_1000,
        gid: gid.then_some([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 168, 78, 1]),
        srqn: 0,
    }
}

/// What `sprintf(KEY_PRINT_FMT_GID, …)` makes of [`sample`]: 107 characters and a NUL.
const GID_MSG: &[u8; 108] = b"0000:0010:000123:abcdef:00001234:00007f0000001000:\
00:00:00:00:00:00:00:00:00:00:ff:ff:c0:a8:4e:01:00000000:\0";
/// What `sprintf(KEY_PRINT_FMT, …)` makes of it: 58 characters and a NUL.
const PLAIN_MSG: &[u8; 59] = b"0000:0010:000123:abcdef:00001234:00007f0000001000:00000000\0";

#[test]
fn key_messages_are_perftests_bytes() {
    assert_eq!(sample(true).to_wire(), GID_MSG.to_vec());
    assert_eq!(sample(false).to_wire(), PLAIN_MSG.to_vec());
    assert_eq!(sample(true).wire_len(), KEY_LEN_GID);
    assert_eq!(sample(false).wire_len(), KEY_LEN);
    assert_eq!(Keys::from_wire(GID_MSG), Ok(sample(true)));
    assert_eq!(Keys::from_wire(PLAIN_MSG), Ok(sample(false)));
    // Upper-case hex is hex (strtol takes it).
    let upper = GID_MSG.to_ascii_uppercase();
    assert_eq!(Keys::from_wire(&upper), Ok(sample(true)));
}

#[test]
fn full_width_values_fill_their_fields() {
    let k = Keys {
        lid: 0xffff,
        out_reads: 0xffff,
        qpn: 0xff_ffff,
        psn: 0xff_ffff,
        rkey: u32::MAX,
        vaddr: u64::MAX,
        gid: Some([0xff; 16]),
        srqn: u32::MAX,
    };
    let w = k.to_wire();
    assert_eq!(w.len(), KEY_LEN_GID);
    assert_eq!(Keys::from_wire(&w), Ok(k));
    // Bits above 24 of a QPN or PSN are not sent.
    let wide = Keys {
        qpn: 0x1ff_ffff,
        ..k
    };
    assert_eq!(wide.to_wire(), w);
}

#[test]
fn hostile_key_messages_are_errors_not_panics() {
    // Short, long, empty.
    for n in [0, 1, 58, 60, 107, 109, 4096] {
        let msg = vec![b'0'; n];
        assert!(Keys::from_wire(&msg).is_err(), "{n}");
    }
    // No NUL at the end.
    let mut m = GID_MSG.to_vec();
    m[107] = b':';
    assert_eq!(Keys::from_wire(&m), Err(WireError::NotText(108)));
    // A NUL inside, or a byte that is not text.
    let mut m = GID_MSG.to_vec();
    m[20] = 0;
    assert!(matches!(Keys::from_wire(&m), Err(WireError::NotText(_))));
    let mut m = GID_MSG.to_vec();
    m[20] = 0xc3;
    assert!(matches!(Keys::from_wire(&m), Err(WireError::NotText(_))));
    // Bad hex in each kind of field names the field.
    for (at, field) in [
        (0, "LID"),
        (5, "out_reads"),
        (10, "QPN"),
        (17, "PSN"),
        (24, "RKey"),
        (33, "VAddr"),
        (50, "GID byte"),
        (98, "SRQN"),
    ] {
        let mut m = GID_MSG.to_vec();
        m[at] = b'z';
        match Keys::from_wire(&m) {
            Err(WireError::Field { field: f, .. }) => assert_eq!(f, field, "{at}"),
            other => panic!("{at}: {other:?}"),
        }
    }
    // A field one digit short, the next one digit long: same length, wrong layout.
    let mut m = GID_MSG.to_vec();
    m.copy_within(5..9, 4);
    m[8] = b':';
    m[9] = b'0';
    assert!(Keys::from_wire(&m).is_err());
    // The last `:` of the GID form missing, or a field too many.
    let mut m = GID_MSG.to_vec();
    m[106] = b'0';
    assert!(matches!(Keys::from_wire(&m), Err(WireError::Fields { .. })));
    let mut m = PLAIN_MSG.to_vec();
    m[50] = b':';
    assert!(Keys::from_wire(&m).is_err());
    // Every single-byte corruption and every random message: an error or a message, never
    // a panic.
    for msg in [GID_MSG.to_vec(), PLAIN_MSG.to_vec()] {
        for i in 0..msg.len() {
            for b in [0u8, b':', b'f', b'G', 0x80, 0xff] {
                let mut m = msg.clone();
                m[i] = b;
                let _ = Keys::from_wire(&m);
            }
        }
    }
    let mut x = 0x1234_5678u32;
    for len in [KEY_LEN, KEY_LEN_GID] {
        for _ in 0..2000 {
            let m: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    b"0123456789abcdef:\0"[(x % 18) as usize]
                })
                .collect();
            let _ = Keys::from_wire(&m);
        }
    }
}

#[test]
fn versions_are_read_as_atof_reads_them() {
    let msg = |t: &[u8]| {
        let mut m = [0u8; VERSION_LEN];
        m[..t.len()].copy_from_slice(t);
        m
    };
    assert_eq!(&version_message(), b"6.24\0\0\0\0\0\0\0\0\0\0\0\0");
    assert_eq!(parse_version(&version_message()).unwrap().number, 6.24);
    assert_eq!(parse_version(&msg(b"5.70")).unwrap().number, 5.70);
    assert_eq!(parse_version(&msg(b"6.29")).unwrap().text, "6.29");
    // Trailing text after the number, as atof ignores it.
    assert_eq!(parse_version(&msg(b"6.10-rc1")).unwrap().number, 6.10);
    // 16 bytes with no NUL.
    assert_eq!(parse_version(b"6.2400000000000a").unwrap().number, 6.24);
    assert_eq!(
        parse_version(&msg(b"5.69")),
        Err(WireError::TooOld("5.69".into()))
    );
    for bad in [&b""[..], b"v6.24", b"\xff\xfe", b"..", b"."] {
        assert!(
            matches!(parse_version(&msg(bad)), Err(WireError::Version(_))),
            "{bad:?}"
        );
    }
}

#[test]
fn mtu_messages() {
    assert_eq!(mtu_message(3), *b"3\0");
    assert_eq!(mtu_message(5), *b"5\0");
    assert_eq!(parse_mtu(b"3\0"), Ok(Some(3)));
    assert_eq!(parse_mtu(b"0\0"), Ok(None));
    assert_eq!(parse_mtu(b"6\0"), Ok(None));
    assert_eq!(parse_mtu(b"12"), Err(WireError::Mtu(*b"12")));
    assert_eq!(parse_mtu(b"\0\0"), Err(WireError::Mtu([0, 0])));
}

#[test]
fn reports_are_big_endian_fields() {
    let r = WireReport {
        size: 65536,
        iters: 5000,
        bw_peak: 1.5,
        bw_avg: 1.25,
        msg_rate: 0.5,
    };
    let f = r.fields();
    assert_eq!(f[0], [0, 0, 0, 0, 0, 1, 0, 0]);
    assert_eq!(f[1], [0, 0, 0, 0, 0, 0, 0x13, 0x88]);
    // 1.5 is 0x3ff8000000000000.
    assert_eq!(f[2], [0x3f, 0xf8, 0, 0, 0, 0, 0, 0]);
    assert_eq!(WireReport::from_fields(&f), r);
}
