//! Error codes, the thread's last error message, and the guard every entry point runs its
//! body in: a panic becomes `CXD_ERROR_PANIC` instead of unwinding into C.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// What went wrong: every entry point returns 0 (or a count) on success and one of these,
/// negative, on failure; `cxd_last_error` then says what was wrong and what to do.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// Success.
    Ok = 0,
    /// A handle or pointer argument was NULL.
    Null = -1,
    /// A handle is not one this library handed out for that kind of object (a device where
    /// a port was expected, a stale mbuf handle from an earlier use of the buffer).
    InvalidHandle = -2,
    /// The object was closed; its handle may not be used again.
    Closed = -3,
    /// The mbuf is not the caller's: already freed, or sent (a send takes the mbufs it
    /// accepts).
    DoubleFree = -4,
    /// The mbuf belongs to another pool than the one named.
    WrongPool = -5,
    /// More packets than one burst takes (`CXD_MAX_BURST`).
    BurstTooLarge = -6,
    /// A configuration value out of range, or one the device does not support.
    Config = -7,
    /// The pool has no free buffer.
    NoBuffers = -8,
    /// The device or driver refused or failed an operation.
    Device = -9,
    /// The device could not be opened (not found, not bound to vfio-pci, no permission).
    Open = -10,
    /// The object is in use: by another thread now, or (a device) by a running port.
    Busy = -11,
    /// An argument other than a handle is out of range.
    InvalidArgument = -12,
    /// The data does not fit the buffer.
    TooLong = -13,
    /// The library panicked inside the call (a bug): the object the call was given may be in
    /// any state; close it.
    Panic = -14,
    /// A work queue has no room for the requests (poll the completion queue, then post
    /// again).
    QueueFull = -15,
    /// The object is not in a state that allows the call (a queue pair posted to before it is
    /// connected, connected twice).
    WrongState = -16,
}

/// A failed call: its code and the message [`cxd_last_error`] will return.
#[derive(Debug)]
pub(crate) struct Failure {
    pub code: Error,
    pub message: String,
}

impl Failure {
    pub(crate) fn new(code: Error, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

impl From<driver::DriverError> for Failure {
    fn from(e: driver::DriverError) -> Self {
        let code = match &e {
            driver::DriverError::Config(_)
            | driver::DriverError::Unsupported { .. }
            | driver::DriverError::NotEnabled { .. } => Error::Config,
            driver::DriverError::BufferTooSmall { .. } => Error::TooLong,
            driver::DriverError::BadWorkRequest { .. }
            | driver::DriverError::WrongHandles { .. } => Error::InvalidArgument,
            driver::DriverError::QueueFull { .. } => Error::QueueFull,
            driver::DriverError::WrongState { .. } => Error::WrongState,
            _ => Error::Device,
        };
        Failure::new(code, e.to_string())
    }
}

/// The result every entry point's body returns: a non-negative value for C, or a failure.
pub(crate) type Outcome = Result<c_int, Failure>;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(message: &str) {
    // An interior NUL would cut the message short: show it instead.
    let text = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
    LAST_ERROR.with(|last| *last.borrow_mut() = text);
}

/// Runs an entry point's body: its value, or its failure's code with the message kept for
/// [`cxd_last_error`]; a panic is caught here and reported as `CXD_ERROR_PANIC`.
pub(crate) fn guard(body: impl FnOnce() -> Outcome) -> c_int {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(value)) => value,
        Ok(Err(failure)) => {
            set_last_error(&failure.message);
            failure.code as c_int
        }
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            set_last_error(&format!(
                "cxdirect panicked inside the call ({what}); this is a bug in cxdirect: report \
                 it, and close the object the call was given"
            ));
            Error::Panic as c_int
        }
    }
}

/// The message of the last call on this thread that failed: what was wrong and what to do.
/// Empty when no call has failed yet. The string stays valid until the next failing call on
/// the same thread; copy it to keep it.
#[no_mangle]
pub extern "C" fn cxd_last_error() -> *const c_char {
    LAST_ERROR.with(|last| last.borrow().as_ptr())
}

/// A short, constant name for an error code (`"CXD_ERROR_DOUBLE_FREE"`), or
/// `"CXD_ERROR_UNKNOWN"` for a value that is none. The string is static.
#[no_mangle]
pub extern "C" fn cxd_error_name(code: c_int) -> *const c_char {
    let name: &'static std::ffi::CStr = match code {
        0 => c"CXD_ERROR_OK",
        -1 => c"CXD_ERROR_NULL",
        -2 => c"CXD_ERROR_INVALID_HANDLE",
        -3 => c"CXD_ERROR_CLOSED",
        -4 => c"CXD_ERROR_DOUBLE_FREE",
        -5 => c"CXD_ERROR_WRONG_POOL",
        -6 => c"CXD_ERROR_BURST_TOO_LARGE",
        -7 => c"CXD_ERROR_CONFIG",
        -8 => c"CXD_ERROR_NO_BUFFERS",
        -9 => c"CXD_ERROR_DEVICE",
        -10 => c"CXD_ERROR_OPEN",
        -11 => c"CXD_ERROR_BUSY",
        -12 => c"CXD_ERROR_INVALID_ARGUMENT",
        -13 => c"CXD_ERROR_TOO_LONG",
        -14 => c"CXD_ERROR_PANIC",
        -15 => c"CXD_ERROR_QUEUE_FULL",
        -16 => c"CXD_ERROR_WRONG_STATE",
        _ => c"CXD_ERROR_UNKNOWN",
    };
    name.as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn last() -> String {
        // SAFETY: the thread's last message, NUL-terminated, alive until the next failure.
        unsafe { CStr::from_ptr(cxd_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn a_panic_is_caught_and_reported() {
        let rc = guard(|| panic!("a test panic"));
        assert_eq!(rc, Error::Panic as c_int);
        assert!(last().contains("a test panic"), "{}", last());
    }

    #[test]
    fn a_failure_keeps_its_message_and_success_leaves_it() {
        assert_eq!(
            guard(|| Err(Failure::new(Error::Busy, "in use\0here"))),
            Error::Busy as c_int
        );
        assert_eq!(last(), "in use\\0here");
        assert_eq!(guard(|| Ok(7)), 7);
        assert_eq!(last(), "in use\\0here");
    }

    #[test]
    fn every_code_has_its_name() {
        for code in 0..=16 {
            // SAFETY: static NUL-terminated strings.
            let name = unsafe { CStr::from_ptr(cxd_error_name(-code)) };
            assert_ne!(name.to_str(), Ok("CXD_ERROR_UNKNOWN"), "code {}", -code);
        }
    }
}
