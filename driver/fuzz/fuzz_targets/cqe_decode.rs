//! Any 64 bytes a device writes into a CQ slot: every `Cqe` accessor agrees with the `hw` layout
//! views, every field fits its width, and the completion kind (send, receive, error or none)
//! follows the opcode. The same invariants as `driver/tests/parsers.rs`.

#![no_main]

use cxdirect::Cqe;
use cxdirect_hw::cqe::{Cqe64, CqeOpcode, ErrCqe};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut bytes = [0u8; 64];
    let n = data.len().min(64);
    bytes[..n].copy_from_slice(&data[..n]);
    let c = Cqe::from_bytes(bytes);
    assert_eq!(c.to_bytes(), bytes);
    let view = Cqe64::new(&bytes[..]).expect("64 bytes fit the CQE layout");
    let err = ErrCqe::new(&bytes[..]).expect("64 bytes fit the error CQE layout");

    assert_eq!(c.opcode(), view.opcode());
    assert_eq!(c.opcode(), err.opcode());
    assert_eq!(c.wqe_counter(), view.wqe_counter());
    assert_eq!(c.wqe_counter(), err.wqe_counter());
    assert_eq!(c.qpn(), view.qpn());
    assert_eq!(c.qpn(), err.qpn());
    assert_eq!(c.srqn(), view.srqn());
    assert_eq!(c.byte_cnt(), view.byte_cnt());
    assert_eq!(c.syndrome(), err.syndrome());
    assert_eq!(c.l3_type(), view.l3_hdr_type());
    assert_eq!(c.l4_type(), view.l4_hdr_type());
    assert_eq!(c.l3_ok(), view.l3_ok());
    assert_eq!(c.l4_ok(), view.l4_ok());
    assert_eq!(
        c.rss_hash(),
        (view.rss_hash_type() != 0).then(|| view.rss_hash_result())
    );

    assert!(c.opcode() < 16);
    assert!(c.qpn() < 1 << 24);
    assert!(c.srqn() < 1 << 24);
    assert!(c.l3_type() < 4);
    assert!(c.l4_type() < 8);

    let op = c.opcode();
    assert_eq!(c.is_send_ok(), op == CqeOpcode::Req as u8);
    assert_eq!(c.is_receive_ok(), op == CqeOpcode::RespSend as u8);
    assert_eq!(
        c.is_error(),
        op == CqeOpcode::ReqErr as u8 || op == CqeOpcode::RespErr as u8
    );
    let kinds = [c.is_send_ok(), c.is_receive_ok(), c.is_error()];
    assert!(kinds.iter().filter(|&&k| k).count() <= 1);
    let known = [
        CqeOpcode::Req as u8,
        CqeOpcode::RespSend as u8,
        CqeOpcode::ReqErr as u8,
        CqeOpcode::RespErr as u8,
    ];
    assert_eq!(kinds.iter().any(|&k| k), known.contains(&op));
    let _ = format!("{c:?}");
});
