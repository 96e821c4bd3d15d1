//! Probes the host for the tools some tests need (see `build-support/host_tools.rs`):
//!
//! - `has_tshark`: an executable `tshark` in a `PATH` directory (the CM capture's decode).

include!("../build-support/host_tools.rs");

fn main() {
    probe_host_tools(&[("has_tshark", "tshark")]);
}
