//! Probes the host for what some tests need, so that those tests are ignored, with the reason,
//! where it is missing, and run where it is present, rather than passing having checked nothing.
//!
//! - `memlock_limit_applies`: RLIMIT_MEMLOCK binds a process of this user: it lacks
//!   CAP_IPC_LOCK, or it may drop the capability (as `tests/memlock.rs` does). A sandbox that
//!   refuses `capset` to a privileged process leaves the limit without effect there.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(memlock_limit_applies)");
    println!("cargo::rerun-if-changed=build.rs");
    if ipc_lock_droppable() {
        println!("cargo::rustc-cfg=memlock_limit_applies");
    }
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
const CAP_IPC_LOCK: u32 = 14;

/// Whether this process lacks CAP_IPC_LOCK in its effective set, or can remove it from there.
/// Only this short-lived build script process loses the capability.
fn ipc_lock_droppable() -> bool {
    let mut header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: capget writes one header and two data structs (version 3), which these are.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_capget,
            &mut header as *mut CapHeader,
            data.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return false;
    }
    if data[0].effective & (1 << CAP_IPC_LOCK) == 0 {
        return true;
    }
    data[0].effective &= !(1 << CAP_IPC_LOCK);
    // SAFETY: capset reads one header and two data structs (version 3), which these are.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_capset,
            &mut header as *mut CapHeader,
            data.as_ptr(),
        )
    };
    rc == 0
}
