//! Property tests of the driver's decoding of values a device writes: any 64 bytes are a CQE the
//! driver must read without panicking, every accessor agreeing with the `hw` layout views (the
//! register layouts both the driver and the model are checked against), every decoded field
//! inside its width, and the completion kind (send, receive, error, or none) consistent with
//! the opcode.

use cxdirect_hw::cqe::CqeOpcode;
use proptest::prelude::*;

/// 64 bytes, with the opcode nibble (byte 63, bits 7:4) drawn from the known opcodes most of the
/// time so every completion kind is exercised, and anything otherwise.
fn cqe_bytes() -> impl Strategy<Value = [u8; 64]> {
    let opcode = prop_oneof![
        3 => prop::sample::select(vec![
            CqeOpcode::Req as u8,
            CqeOpcode::RespSend as u8,
            CqeOpcode::ReqErr as u8,
            CqeOpcode::RespErr as u8,
            CqeOpcode::Invalid as u8,
        ]),
        1 => 0u8..16,
    ];
    (
        prop::array::uniform32(any::<u8>()),
        prop::array::uniform32(any::<u8>()),
        opcode,
    )
        .prop_map(|(lo, hi, opcode)| {
            let mut bytes = [0u8; 64];
            bytes[..32].copy_from_slice(&lo);
            bytes[32..].copy_from_slice(&hi);
            bytes[63] = (opcode << 4) | (bytes[63] & 0x0f);
            bytes
        })
}

mod support;

/// Every invariant of one decoded CQE ([`support::cqe_invariants`]), as a property-test result.
fn check(bytes: [u8; 64]) -> Result<(), TestCaseError> {
    support::cqe_invariants(bytes).map_err(TestCaseError::fail)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    /// Uniformly random bytes.
    #[test]
    fn any_64_bytes_decode_consistently(bytes in prop::collection::vec(any::<u8>(), 64)) {
        check(bytes.try_into().expect("64 bytes"))?;
    }

    /// Bytes whose opcode is mostly a known one.
    #[test]
    fn cqes_of_every_kind_decode_consistently(bytes in cqe_bytes()) {
        check(bytes)?;
    }
}

/// The extreme patterns proptest may not draw: all zeroes, all ones, each single bit.
#[test]
fn extreme_patterns_decode_consistently() {
    check([0; 64]).unwrap();
    check([0xff; 64]).unwrap();
    for bit in 0..512 {
        let mut bytes = [0u8; 64];
        bytes[bit / 8] = 1 << (bit % 8);
        check(bytes).unwrap();
        let mut inverted = [0xffu8; 64];
        inverted[bit / 8] = !(1 << (bit % 8));
        check(inverted).unwrap();
    }
}

/// A pattern with every byte different, with and without an RSS hash type.
#[test]
fn a_patterned_cqe_decodes_consistently_with_and_without_a_hash() {
    let mut bytes = [0u8; 64];
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(37).wrapping_add(11);
    }
    for rss_type in [0u8, 0x22] {
        bytes[0x10] = rss_type;
        check(bytes).unwrap();
    }
}
