//! Probes the host for the tools some tests need (see `build-support/host_tools.rs`):
//!
//! - `has_valgrind`: `valgrind` (the C program run under it);
//! - `has_pkg_config`: `pkg-config` (the C program linked with the flags it gives).

include!("../build-support/host_tools.rs");

fn main() {
    probe_host_tools(&[
        ("has_valgrind", "valgrind"),
        ("has_pkg_config", "pkg-config"),
    ]);
}
