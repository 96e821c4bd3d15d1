//! The FFI boundary: every raw pointer a C caller passes is read or written here and nowhere
//! else, so the crate's `unsafe` lives in this room.
//!
//! How a handle is checked. Handles of devices, ports, queues and pools ([`handle`]) and the
//! slots behind mbuf handles ([`slots`]) are allocated once and never freed while the process
//! runs: closing an object drops what it holds and marks its handle closed, and the handle's
//! memory stays (reachable from a process-wide list, so leak checkers count it as reachable,
//! not lost). A handle therefore always points at readable memory once handed out, and every
//! call reads its magic (the object's kind) and state word before anything else: NULL, the
//! wrong kind, a closed object, a freed or sent mbuf each give their own error code. A pointer
//! this library never handed out cannot be detected, as with any C library.

pub(crate) mod handle;
pub(crate) mod slots;

use crate::error::{Error, Failure};
use std::ffi::{c_char, CStr};
use std::sync::Mutex;

/// Addresses of every handle and slot table ever handed out, so that they stay reachable (and
/// a leak checker sees them as kept, not lost) after their objects close.
static KEPT: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// Keeps `value` for the rest of the process and returns it. Called when objects open, never
/// on the fast path (it takes a lock and allocates).
pub(crate) fn keep<T: Send + Sync>(value: Box<T>) -> &'static T {
    let kept: &'static T = Box::leak(value);
    KEPT.lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(kept as *const T as usize);
    kept
}

/// Like [`keep`], for a slice.
pub(crate) fn keep_slice<T: Send + Sync>(value: Box<[T]>) -> &'static [T] {
    let kept: &'static [T] = Box::leak(value);
    KEPT.lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(kept.as_ptr() as usize);
    kept
}

fn null(what: &str) -> Failure {
    Failure::new(Error::Null, format!("{what} is NULL; pass a valid pointer"))
}

/// Stores `value` through the caller's out-pointer `out`.
pub(crate) fn write_out<T>(out: *mut T, value: T, what: &str) -> Result<(), Failure> {
    if out.is_null() {
        return Err(null(what));
    }
    // SAFETY: non-null; the C contract of every entry point is that an out-pointer points to
    // writable memory for one `T` (a local variable or struct field of the caller's).
    unsafe { out.write(value) };
    Ok(())
}

/// A copy of the caller's `T` at `ptr` (a configuration struct).
pub(crate) fn read_in<T: Copy>(ptr: *const T, what: &str) -> Result<T, Failure> {
    if ptr.is_null() {
        return Err(null(what));
    }
    // SAFETY: non-null; the C contract is that `ptr` points to an initialised `T`. Read
    // unaligned so that a packed caller struct does no harm.
    Ok(unsafe { ptr.read_unaligned() })
}

/// The caller's NUL-terminated string at `ptr`, as UTF-8.
pub(crate) fn string_in(ptr: *const c_char, what: &str) -> Result<String, Failure> {
    if ptr.is_null() {
        return Err(null(what));
    }
    // SAFETY: non-null; the C contract is a NUL-terminated string that lives for the call.
    let text = unsafe { CStr::from_ptr(ptr) };
    text.to_str().map(str::to_owned).map_err(|_| {
        Failure::new(
            Error::InvalidArgument,
            format!("{what} is not UTF-8; give an ASCII string"),
        )
    })
}

/// The caller's `len` bytes at `ptr`, for the call's duration.
pub(crate) fn bytes_in<'a>(ptr: *const u8, len: usize, what: &str) -> Result<&'a [u8], Failure> {
    if len == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(null(what));
    }
    // SAFETY: non-null; the C contract is `len` readable bytes at `ptr`, not written by anyone
    // else during the call (the slice does not outlive the entry point that made it).
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// The caller's `len` writable bytes at `ptr`, for the call's duration.
pub(crate) fn bytes_out<'a>(ptr: *mut u8, len: usize, what: &str) -> Result<&'a mut [u8], Failure> {
    if len == 0 {
        return Ok(&mut []);
    }
    if ptr.is_null() {
        return Err(null(what));
    }
    // SAFETY: non-null; the C contract is `len` writable bytes at `ptr` that nothing else
    // touches during the call.
    Ok(unsafe { std::slice::from_raw_parts_mut(ptr, len) })
}

/// The caller's array of `n` pointer-sized entries at `ptr` (an mbuf handle array), for the
/// call's duration. The caller states `n`; nothing past it is read or written.
pub(crate) fn array<'a, T>(ptr: *mut T, n: usize, what: &str) -> Result<&'a mut [T], Failure> {
    if n == 0 {
        return Ok(&mut []);
    }
    if ptr.is_null() {
        return Err(null(what));
    }
    // SAFETY: non-null; the C contract is an array of at least `n` initialised entries at
    // `ptr` (the count the caller itself passes), untouched by others during the call.
    Ok(unsafe { std::slice::from_raw_parts_mut(ptr, n) })
}

/// The caller's array of `n` `T`s at `ptr` (work requests, gather lists), read-only for the
/// call's duration.
pub(crate) fn slice_in<'a, T>(ptr: *const T, n: usize, what: &str) -> Result<&'a [T], Failure> {
    if n == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(null(what));
    }
    if ptr as usize % std::mem::align_of::<T>() != 0 {
        return Err(Failure::new(
            Error::InvalidArgument,
            format!("{what} is not aligned for its type; pass an array of the header's struct"),
        ));
    }
    // SAFETY: non-null and aligned; the C contract is an array of at least `n` initialised
    // entries at `ptr` (the count the caller itself passes), not written during the call.
    Ok(unsafe { std::slice::from_raw_parts(ptr, n) })
}

/// A descriptor of the library's own, duplicated from the caller's `fd` (which stays the
/// caller's to close).
pub(crate) fn dup_fd(fd: std::ffi::c_int, what: &str) -> Result<std::os::fd::OwnedFd, Failure> {
    if fd < 0 {
        return Err(Failure::new(
            Error::InvalidArgument,
            format!("{what} {fd} is not a file descriptor"),
        ));
    }
    // SAFETY: the C contract is that `fd` is an open descriptor of the caller's for the call;
    // it is only borrowed to duplicate it (a closed one makes the duplication fail, no harm).
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    borrowed.try_clone_to_owned().map_err(|e| {
        Failure::new(
            Error::InvalidArgument,
            format!("{what} {fd} cannot be duplicated ({e}); pass an open descriptor"),
        )
    })
}
