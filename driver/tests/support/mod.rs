//! The invariants of the driver's CQE decoding, shared by the property tests
//! (`driver/tests/parsers.rs`) and the `cqe_decode` fuzz target.

use cxdirect::Cqe;
use cxdirect_hw::cqe::{Cqe64, CqeOpcode, ErrCqe};

/// Checks that any 64 bytes a device writes decode consistently: the copy is the bytes given,
/// every accessor agrees with the `hw` layout views, every field fits its width, and the
/// completion kind (send, receive, error or none) follows the opcode. The error names the first
/// invariant broken.
pub fn cqe_invariants(bytes: [u8; 64]) -> Result<(), String> {
    let c = Cqe::from_bytes(bytes);
    let view = Cqe64::new(&bytes[..]).map_err(|e| format!("CQE layout: {e:?}"))?;
    let err = ErrCqe::new(&bytes[..]).map_err(|e| format!("error CQE layout: {e:?}"))?;
    let ensure = |holds: bool, what: &str| {
        if holds {
            Ok(())
        } else {
            Err(format!("{what}: {c:?} from {bytes:02x?}"))
        }
    };
    ensure(c.to_bytes() == bytes, "the copy is the bytes given")?;

    // Every accessor agrees with the layout views.
    ensure(c.opcode() == view.opcode(), "opcode")?;
    ensure(c.opcode() == err.opcode(), "opcode (error layout)")?;
    ensure(c.wqe_counter() == view.wqe_counter(), "wqe_counter")?;
    ensure(
        c.wqe_counter() == err.wqe_counter(),
        "wqe_counter (error layout)",
    )?;
    ensure(c.qpn() == view.qpn(), "qpn")?;
    ensure(c.qpn() == err.qpn(), "qpn (error layout)")?;
    ensure(c.srqn() == view.srqn(), "srqn")?;
    ensure(c.byte_cnt() == view.byte_cnt(), "byte_cnt")?;
    ensure(c.syndrome() == err.syndrome(), "syndrome")?;
    ensure(c.l3_type() == view.l3_hdr_type(), "l3 type")?;
    ensure(c.l4_type() == view.l4_hdr_type(), "l4 type")?;
    ensure(c.l3_ok() == view.l3_ok(), "l3 ok")?;
    ensure(c.l4_ok() == view.l4_ok(), "l4 ok")?;
    ensure(
        c.rss_hash() == (view.rss_hash_type() != 0).then(|| view.rss_hash_result()),
        "rss hash",
    )?;

    // Every field inside its width.
    ensure(c.opcode() < 16, "opcode width")?;
    ensure(c.qpn() < 1 << 24, "qpn width")?;
    ensure(c.srqn() < 1 << 24, "srqn width")?;
    ensure(c.l3_type() < 4, "l3 type width")?;
    ensure(c.l4_type() < 8, "l4 type width")?;

    // The completion kind follows the opcode, and at most one kind holds.
    let op = c.opcode();
    ensure(c.is_send_ok() == (op == CqeOpcode::Req as u8), "send kind")?;
    ensure(
        c.is_receive_ok() == (op == CqeOpcode::RespSend as u8),
        "receive kind",
    )?;
    ensure(
        c.is_error() == (op == CqeOpcode::ReqErr as u8 || op == CqeOpcode::RespErr as u8),
        "error kind",
    )?;
    let kinds = [c.is_send_ok(), c.is_receive_ok(), c.is_error()];
    ensure(
        kinds.iter().filter(|&&k| k).count() <= 1,
        "at most one kind",
    )?;
    let known = [
        CqeOpcode::Req as u8,
        CqeOpcode::RespSend as u8,
        CqeOpcode::ReqErr as u8,
        CqeOpcode::RespErr as u8,
    ];
    ensure(
        kinds.iter().any(|&k| k) == known.contains(&op),
        "a kind exactly for the known opcodes",
    )?;

    // Debug output reads only decoded fields and never panics.
    let _ = format!("{c:?}");
    Ok(())
}
