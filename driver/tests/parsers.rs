//! Property tests of the driver's decoding of values a device writes: any 64 bytes are a CQE the
//! driver must read without panicking, every accessor agreeing with the `hw` layout views (the
//! register layouts both the driver and the model are checked against), every decoded field
//! inside its width, and the completion kind (send, receive, error, or none) consistent with
//! the opcode.

use cxdirect::Cqe;
use cxdirect_hw::cqe::{Cqe64, CqeOpcode, ErrCqe};
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

/// Checks every invariant of one decoded CQE; shared by the two property tests.
fn check(bytes: [u8; 64]) -> Result<(), TestCaseError> {
    let c = Cqe::from_bytes(bytes);
    prop_assert_eq!(c.to_bytes(), bytes, "the copy is the bytes given");
    let view = Cqe64::new(&bytes[..]).expect("64 bytes fit the CQE layout");
    let err = ErrCqe::new(&bytes[..]).expect("64 bytes fit the error CQE layout");

    // Every accessor agrees with the layout views.
    prop_assert_eq!(c.opcode(), view.opcode());
    prop_assert_eq!(c.opcode(), err.opcode());
    prop_assert_eq!(c.wqe_counter(), view.wqe_counter());
    prop_assert_eq!(c.wqe_counter(), err.wqe_counter());
    prop_assert_eq!(c.qpn(), view.qpn());
    prop_assert_eq!(c.qpn(), err.qpn());
    prop_assert_eq!(c.srqn(), view.srqn());
    prop_assert_eq!(c.byte_cnt(), view.byte_cnt());
    prop_assert_eq!(c.syndrome(), err.syndrome());
    prop_assert_eq!(c.l3_type(), view.l3_hdr_type());
    prop_assert_eq!(c.l4_type(), view.l4_hdr_type());
    prop_assert_eq!(c.l3_ok(), view.l3_ok());
    prop_assert_eq!(c.l4_ok(), view.l4_ok());
    prop_assert_eq!(
        c.rss_hash(),
        (view.rss_hash_type() != 0).then(|| view.rss_hash_result())
    );

    // Every field inside its width.
    prop_assert!(c.opcode() < 16);
    prop_assert!(c.qpn() < 1 << 24, "qpn {:#x}", c.qpn());
    prop_assert!(c.srqn() < 1 << 24, "srqn {:#x}", c.srqn());
    prop_assert!(c.l3_type() < 4);
    prop_assert!(c.l4_type() < 8);

    // The completion kind follows the opcode, and at most one kind holds.
    let op = c.opcode();
    prop_assert_eq!(c.is_send_ok(), op == CqeOpcode::Req as u8);
    prop_assert_eq!(c.is_receive_ok(), op == CqeOpcode::RespSend as u8);
    prop_assert_eq!(
        c.is_error(),
        op == CqeOpcode::ReqErr as u8 || op == CqeOpcode::RespErr as u8
    );
    let kinds = [c.is_send_ok(), c.is_receive_ok(), c.is_error()];
    prop_assert!(kinds.iter().filter(|&&k| k).count() <= 1, "{:?}", kinds);
    let known = [
        CqeOpcode::Req as u8,
        CqeOpcode::RespSend as u8,
        CqeOpcode::ReqErr as u8,
        CqeOpcode::RespErr as u8,
    ];
    prop_assert_eq!(kinds.iter().any(|&k| k), known.contains(&op));

    // Debug output reads only decoded fields and never panics.
    let _ = format!("{c:?}");
    Ok(())
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
