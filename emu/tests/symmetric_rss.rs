//! A TIR's symmetric hash (`tirc.rx_hash_symmetric`), which mlx5e sets on every Toeplitz TIR
//! (`mlx5e_tir_builder_build_rss`): addresses and ports sorted before the Toeplitz hash, so both
//! directions of a flow hash alike (DPDK's `RTE_ETH_HASH_FUNCTION_SYMMETRIC_TOEPLITZ_SORT`, which
//! its mlx5 PMD maps to the same bit). The frames go out of the plug's SQ and come back through
//! an indirect TIR over the plug's RQ, whose CQE carries the hash.

use cxdirect_emu::packet::{insert_checksums, parse};
use cxdirect_emu::rss::{rss_hash, HashFields, HashSelector, L3Proto, L4Proto};
use cxdirect_emu::testkit::flow_tables::{catch_all, create_table, set_root};
use cxdirect_emu::testkit::plug::Plug;
use cxdirect_emu::EmuConfig;
use cxdirect_hw::cqe::Cqe64;
use cxdirect_hw::flow::FLOW_DESTINATION_TYPE_TIR;

const KEY: [u8; 40] = [
    0x2c, 0xc6, 0x81, 0xd1, 0x5b, 0xdb, 0xf4, 0xf7, 0xfc, 0xa2, 0x83, 0x19, 0xdb, 0x1a, 0x3e, 0x94,
    0x6b, 0x9e, 0x38, 0xd9, 0x2c, 0x9c, 0x03, 0xd1, 0xad, 0x99, 0x44, 0xa7, 0xd9, 0x56, 0x3d, 0x59,
    0x06, 0x3c, 0x25, 0xf3, 0xfc, 0x1f, 0xdc, 0x2a,
];

/// An IPv4/UDP frame from `src`:`sport` to `dst`:`dport`.
fn udp(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00];
    f.extend_from_slice(&[0x45, 0, 0, 28 + 16, 0, 0, 0, 0, 64, 17, 0, 0]);
    f.extend_from_slice(&src);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&[0, 8 + 16, 0, 0]);
    f.extend_from_slice(&[0x5a; 16]);
    insert_checksums(&mut f, true, true).expect("checksums");
    f
}

/// Makes an indirect TIR over the plug's RQ hashing IPv4/UDP 4-tuples under [`KEY`],
/// symmetric or not, the receive root's only destination.
fn hash_through_tir(p: &mut Plug, symmetric: bool) {
    let rqn = p.rqn();
    let tirn = p.h.create_udp_rss_tir(&[rqn], &KEY, symmetric);
    let root = create_table(&mut p.h, 0, 2, None).unwrap();
    catch_all(&mut p.h, root, FLOW_DESTINATION_TYPE_TIR, tirn, 0);
    set_root(&mut p.h, root);
}

/// The hash the receive CQE of `frame` carries.
fn cqe_hash(p: &mut Plug, frame: &[u8]) -> u32 {
    let (_, cqe) = p.send_for_cqe(frame).expect("frame back");
    Cqe64::new(&cqe[..]).unwrap().rss_hash_result()
}

/// The plain Toeplitz hash of `frame`'s 4-tuple.
fn toeplitz(frame: &[u8]) -> u32 {
    let sel = HashSelector {
        l3: L3Proto::Ipv4,
        l4: L4Proto::Udp,
        fields: HashFields::IP_AND_PORTS,
    };
    rss_hash(&KEY, sel, frame, &parse(frame)).expect("hashed")
}

const A: [u8; 4] = [10, 0, 0, 1];
const B: [u8; 4] = [192, 168, 7, 2];

#[test]
fn both_directions_of_a_flow_hash_alike_as_the_sorted_tuple_hashes() {
    let mut p = Plug::new(EmuConfig::default());
    hash_through_tir(&mut p, true);
    for (sport, dport) in [(40000, 5201), (5201, 40000), (7, 7), (1, 65535)] {
        let there = udp(A, sport, B, dport);
        let back = udp(B, dport, A, sport);
        let sorted = udp(A, sport.min(dport), B, sport.max(dport));
        assert_eq!(
            cqe_hash(&mut p, &there),
            toeplitz(&sorted),
            "{sport}->{dport}"
        );
        assert_eq!(
            cqe_hash(&mut p, &back),
            toeplitz(&sorted),
            "{dport}<-{sport}"
        );
    }
}

#[test]
fn without_the_symmetric_bit_the_two_directions_hash_as_carried() {
    let mut p = Plug::new(EmuConfig::default());
    hash_through_tir(&mut p, false);
    let there = udp(B, 40000, A, 5201);
    let back = udp(A, 5201, B, 40000);
    assert_eq!(cqe_hash(&mut p, &there), toeplitz(&there));
    assert_eq!(cqe_hash(&mut p, &back), toeplitz(&back));
    assert_ne!(toeplitz(&there), toeplitz(&back));
}
