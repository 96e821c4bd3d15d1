//! Probes the host for what some tests need, so that those tests are ignored, with the reason,
//! where it is missing, and run where it is present, rather than passing having checked nothing.
//!
//! - `memlock_limit_applies`: RLIMIT_MEMLOCK binds a process of this user: it lacks
//!   CAP_IPC_LOCK, or it may drop the capability (as `tests/memlock.rs` does). A sandbox that
//!   refuses `capset` to a privileged process leaves the limit without effect there.

#[path = "capabilities.rs"]
mod capabilities;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(memlock_limit_applies)");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=capabilities.rs");
    // Only this short-lived build script process loses the capability.
    if capabilities::drop_ipc_lock() {
        println!("cargo::rustc-cfg=memlock_limit_applies");
    }
}
