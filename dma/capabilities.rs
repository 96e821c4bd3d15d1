//! CAP_IPC_LOCK, shared by the host probe (`build.rs`) and the test that needs RLIMIT_MEMLOCK to
//! bind (`tests/memlock.rs`): both include this file by path.

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

/// Makes RLIMIT_MEMLOCK bind this thread: removes CAP_IPC_LOCK from its effective set where it
/// is there. True when the capability is absent or now removed; false when capget or capset
/// fails.
pub fn drop_ipc_lock() -> bool {
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
