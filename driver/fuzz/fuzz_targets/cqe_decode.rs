//! Any 64 bytes a device writes into a CQ slot: every `Cqe` accessor agrees with the `hw` layout
//! views, every field fits its width, and the completion kind (send, receive, error or none)
//! follows the opcode. The same invariants as `driver/tests/parsers.rs`.

#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/support/mod.rs"]
mod support;

fuzz_target!(|data: &[u8]| {
    let mut bytes = [0u8; 64];
    let n = data.len().min(64);
    bytes[..n].copy_from_slice(&data[..n]);
    if let Err(broken) = support::cqe_invariants(bytes) {
        panic!("{broken}");
    }
});
