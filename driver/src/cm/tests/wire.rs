//! Message layouts: every message round-trips, the REQ is byte for byte what Linux builds, and
//! the parser refuses what Linux refuses.

use super::*;
use cxdirect_hw::cm::{attr, rej_reason};

fn full(fill: u8, len: usize) -> PrivateData {
    PrivateData::new(&vec![fill; len]).unwrap()
}

fn path(seed: u8) -> Path {
    Path {
        local_lid: 0xffff,
        remote_lid: 0xfffe,
        local_gid: [seed; 16],
        remote_gid: [seed + 1; 16],
        flow_label: 0xabcde,
        packet_rate: 0x2a,
        traffic_class: 0x12,
        hop_limit: 64,
        sl: 5,
        subnet_local: true,
        local_ack_timeout: 18,
    }
}

#[test]
fn every_message_round_trips() {
    let req = Req {
        local_comm_id: 0xdead_beef,
        service_id: 0x0000_0000_0106_1c06,
        local_ca_guid: 0x0102_0304_0506_0708,
        local_q_key: 0x1111_2222,
        local_qpn: 0xabcdef,
        responder_resources: 4,
        local_eecn: 0x123456,
        initiator_depth: 3,
        remote_eecn: 0x654321,
        remote_cm_response_timeout: 20,
        transport_service_type: 1,
        flow_control: true,
        starting_psn: 0x00fe_dcba,
        local_cm_response_timeout: 22,
        retry_count: 6,
        pkey: 0xffff,
        path_mtu: 5,
        rdc_exists: true,
        rnr_retry_count: 7,
        max_cm_retries: 15,
        srq: true,
        extended_transport_type: 2,
        primary: path(1),
        alternate: path(9),
        sap_supported: true,
        private_data: full(0x5a, pd_size::REQ),
    };
    let rep = Rep {
        local_comm_id: 1,
        remote_comm_id: 2,
        local_q_key: 3,
        local_qpn: 0x777777,
        local_eecn: 0x888888,
        starting_psn: 0x999999,
        responder_resources: 7,
        initiator_depth: 8,
        target_ack_delay: 17,
        failover_accepted: 2,
        flow_control: true,
        rnr_retry_count: 6,
        srq: true,
        local_ca_guid: u64::MAX - 1,
        private_data: full(0xa5, pd_size::REP),
    };
    let pair = |n: u32| IdPair {
        local_comm_id: 0x1000 + n,
        remote_comm_id: 0x2000 + n,
        private_data: full(n as u8, 224),
    };
    let mut ari = [0u8; 72];
    ari[..16].copy_from_slice(&[0xee; 16]);
    let messages = [
        Message::Req(req),
        Message::Rep(rep),
        Message::Rtu(pair(1)),
        Message::Drep(pair(2)),
        Message::Dreq(Dreq {
            local_comm_id: 5,
            remote_comm_id: 6,
            remote_qpn: 0x00ab_cdef,
            private_data: full(3, pd_size::DREQ),
        }),
        Message::Rej(Rej {
            local_comm_id: 7,
            remote_comm_id: 8,
            message_rejected: 1,
            reason: rej_reason::INVALID_GID,
            ari_len: 16,
            ari,
            private_data: full(4, pd_size::REJ),
        }),
        Message::Mra(Mra {
            local_comm_id: 9,
            remote_comm_id: 10,
            message_mraed: 2,
            service_timeout: 24,
            private_data: full(5, pd_size::MRA),
        }),
    ];
    for m in messages {
        let mad = m.encode(0x0000_0001_1122_3344);
        let parsed = parse(&mad).unwrap_or_else(|e| panic!("{m:?}: {e}"));
        assert_eq!(parsed.tid, 0x0000_0001_1122_3344);
        assert_eq!(parsed.message, m);
        // The common header of `cm_format_mad_hdr`.
        assert_eq!(&mad[..4], &[1, 0x07, 2, 0x03]);
        assert_eq!(&mad[4..8], &[0; 4]);
        assert_eq!(&mad[18..24], &[0; 6]);
    }
}

/// The REQ `cm_format_req` builds for `rdma_connect` over RoCE v2 (reference table 1.4),
/// written out byte by byte from the table rather than through the layouts.
#[test]
fn req_is_byte_for_byte_what_linux_builds() {
    let mut me = Identity::new(0x0002_c903_00aa_bb01, CLIENT_IP, 7);
    me.tid_high = 0x0000_0005;
    let mut cm = Cm::new(me);
    let qp = QpParams::rping(0x000123);
    let id = cm
        .connect(SERVER_IP, PORT, SRC_PORT, &qp, &[0xc0, 0xff, 0xee])
        .unwrap();
    let sends = cm.poll(Duration::ZERO).sends;
    assert_eq!(sends.len(), 1);
    let (to, got) = sends[0];
    assert_eq!(to, CmAddress::ipv4(SERVER_IP));
    let psn = u32::from_be_bytes([0, got[68], got[69], got[70]]);

    let mut want = [0u8; 256];
    want[..4].copy_from_slice(&[1, 0x07, 2, 0x03]);
    // TID: hi_tid, then the local ID as a little-endian host ORs its __be32 in.
    want[8..12].copy_from_slice(&5u32.to_be_bytes());
    want[12..16].copy_from_slice(&id.0.to_le_bytes());
    want[16..18].copy_from_slice(&0x0010u16.to_be_bytes());
    want[24..28].copy_from_slice(&id.0.to_be_bytes());
    want[32..40].copy_from_slice(&(0x0106_0000u64 | u64::from(PORT)).to_be_bytes());
    want[40..48].copy_from_slice(&0x0002_c903_00aa_bb01u64.to_be_bytes());
    want[56..59].copy_from_slice(&[0x00, 0x01, 0x23]); // local QPN
    want[59] = 1; // responder resources
    want[63] = 1; // initiator depth
    want[67] = 20 << 3; // remote CM response timeout 20, RC, no flow control
    want[68..71].copy_from_slice(&psn.to_be_bytes()[1..]);
    want[71] = (20 << 3) | 7; // local CM response timeout 20, retry 7
    want[72..74].copy_from_slice(&[0xff, 0xff]); // P_Key
    want[74] = (3 << 4) | 7; // MTU 1024, RNR retry 7
    want[75] = 15 << 4; // max CM retries 15, no SRQ
    want[76..80].copy_from_slice(&[0xff; 4]); // permissive LIDs (hop limit 64)
    want[80..96].copy_from_slice(&CLIENT_IP.to_ipv6_mapped().octets());
    want[96..112].copy_from_slice(&SERVER_IP.to_ipv6_mapped().octets());
    let flow = (u32::from(SRC_PORT) * 31 + u32::from(PORT)) & 0xfffff;
    want[112..116].copy_from_slice(&(flow << 12).to_be_bytes()); // rate 0
    want[116] = 0; // traffic class
    want[117] = 64; // hop limit
    want[118] = 0; // SL 0, not subnet-local
    want[119] = 18 << 3; // cm_ack_timeout(16, 16) = 18
                         // cma_hdr: version 0, IPv4, source port, {0,0,0,ip} twice; then the consumer's bytes.
    want[165] = 0x40;
    want[166..168].copy_from_slice(&SRC_PORT.to_be_bytes());
    want[180..184].copy_from_slice(&CLIENT_IP.octets());
    want[196..200].copy_from_slice(&SERVER_IP.octets());
    want[200..203].copy_from_slice(&[0xc0, 0xff, 0xee]);
    for (i, (g, w)) in got.iter().zip(want.iter()).enumerate() {
        assert_eq!(g, w, "REQ byte {i}: got {g:#04x}, Linux puts {w:#04x}");
    }
}

#[test]
fn parser_refuses_what_linux_refuses() {
    let good = Message::Rtu(IdPair {
        local_comm_id: 1,
        remote_comm_id: 2,
        private_data: PrivateData::EMPTY,
    })
    .encode(1);
    let with = |i: usize, v: u8| {
        let mut m = good;
        m[i] = v;
        m
    };
    assert_eq!(parse(&with(0, 2)), Err(ParseError::BaseVersion(2)));
    assert_eq!(parse(&with(1, 0x04)), Err(ParseError::Class(0x04)));
    assert_eq!(parse(&with(2, 1)), Err(ParseError::ClassVersion(1)));
    assert_eq!(parse(&with(3, 0x01)), Err(ParseError::Method(0x01)));
    assert_eq!(
        parse(&with(17, 0x19)),
        Err(ParseError::UnsupportedAttribute(attr::LAP))
    );
    assert_eq!(
        parse(&with(17, 0x42)),
        Err(ParseError::UnknownAttribute(0x0042))
    );
    assert_eq!(parse(&good[..255]), Err(ParseError::BadLength(255)));

    let mut cm = Cm::new(Identity::new(1, CLIENT_IP, 3));
    cm.connect(SERVER_IP, PORT, 1, &QpParams::rping(1), &[])
        .unwrap();
    let req = cm.poll(Duration::ZERO).sends[0].1;
    let mut bad = req;
    bad[67] = (20 << 3) | (2 << 1); // transport service type 2
    assert!(matches!(
        parse(&bad),
        Err(ParseError::Reserved {
            field: "transport_service_type",
            ..
        })
    ));
    let mut bad = req;
    bad[74] = 7; // MTU 0
    assert!(matches!(
        parse(&bad),
        Err(ParseError::Reserved {
            field: "path_packet_payload_mtu",
            ..
        })
    ));
    let mut rej = Message::Rej(Rej {
        local_comm_id: 1,
        remote_comm_id: 2,
        message_rejected: 0,
        reason: 28,
        ari_len: 0,
        ari: [0; 72],
        private_data: PrivateData::EMPTY,
    })
    .encode(1);
    rej[33] = 73 << 1;
    assert!(matches!(parse(&rej), Err(ParseError::BadLength2 { .. })));
    rej[33] = 0;
    rej[32] = 3 << 6;
    assert!(matches!(parse(&rej), Err(ParseError::Reserved { .. })));
}

#[test]
fn parser_never_panics_on_random_bytes() {
    let mut rng = Rng(0x5eed);
    for i in 0..20_000 {
        let mut mad = random_mad(&mut rng);
        // Half of them get a valid CM header so the attribute parsers see them too.
        if i % 2 == 0 {
            mad[..4].copy_from_slice(&[1, 0x07, 2, 0x03]);
            mad[16] = 0;
            mad[17] = 0x10 + (i % 7) as u8;
        }
        let _ = parse(&mad);
    }
}

#[test]
fn cma_header_as_cma_format_hdr_writes_it() {
    let h = CmaHeader {
        src_ip: CLIENT_IP,
        dst_ip: SERVER_IP,
        src_port: 0x1234,
    };
    let b = h.encode();
    assert_eq!(b[0], 0);
    assert_eq!(b[1], 0x40);
    assert_eq!(&b[2..4], &[0x12, 0x34]);
    assert_eq!(&b[4..16], &[0; 12]);
    assert_eq!(&b[16..20], &CLIENT_IP.octets());
    assert_eq!(&b[32..36], &SERVER_IP.octets());
    assert_eq!(CmaHeader::decode(&b), Ok(h));
    let mut v6 = b;
    v6[1] = 0x60;
    assert_eq!(CmaHeader::decode(&v6), Err(CmaError::IpVersion(6)));
}
