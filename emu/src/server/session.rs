//! One socket, one client: binding the listening socket, waiting for the client, running the
//! connection with the `vfio_user` crate's [`Server`], and saying how it ended.
//!
//! The wait is a `poll` on the listening socket, in slices of [`POLL_SLICE`], so that a socket
//! whose client never comes can be abandoned when the process decides to stop; the connection is
//! then accepted by the crate, which serves it until the client closes it. A panic inside the
//! crate on malformed client input is caught and reported as a protocol error instead of tearing
//! the process down with the other function's client still connected.

use super::backend::EmuBackend;
use super::layout;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use thiserror::Error;
use vfio_user::Server;

/// How long one wait for a client lasts before the stop flag is looked at again.
pub const POLL_SLICE: Duration = Duration::from_millis(100);

/// A socket path the server cannot listen on.
#[derive(Debug, Error)]
pub enum BindError {
    /// Something is already listening there.
    #[error("{path}: another server is listening on this socket")]
    InUse {
        /// The socket path.
        path: PathBuf,
    },
    /// Something that is not a socket is in the way.
    #[error("{path}: exists and is not a socket; remove it or choose another path")]
    NotASocket {
        /// The path.
        path: PathBuf,
    },
    /// Binding failed.
    #[error("{path}: cannot listen: {source}")]
    Bind {
        /// The socket path.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: io::Error,
    },
}

/// Binds a listening Unix socket at `path`. A stale socket left by a server that died (nobody
/// accepts on it) is removed first; a live one or a non-socket file is an error.
pub fn bind(path: &Path) -> Result<UnixListener, BindError> {
    use std::os::unix::fs::FileTypeExt;
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(BindError::NotASocket {
                path: path.to_path_buf(),
            });
        }
        if UnixStream::connect(path).is_ok() {
            return Err(BindError::InUse {
                path: path.to_path_buf(),
            });
        }
        let _ = std::fs::remove_file(path);
    }
    UnixListener::bind(path).map_err(|source| BindError::Bind {
        path: path.to_path_buf(),
        source,
    })
}

/// How a session ended.
#[derive(Debug)]
pub enum Outcome {
    /// The client closed the connection.
    Disconnected,
    /// The connection broke (reset, or a read or write failed): the client is gone all the same.
    ConnectionLost(vfio_user::Error),
    /// The client sent something the `vfio_user` crate could not survive (it panicked).
    ProtocolPanic(String),
    /// Waiting for a client failed.
    WaitFailed(io::Error),
    /// The process stopped before any client came.
    Abandoned,
}

impl Outcome {
    /// Whether the outcome is a normal end (the client went away, or none came).
    pub fn is_clean(&self) -> bool {
        matches!(
            self,
            Outcome::Disconnected | Outcome::ConnectionLost(_) | Outcome::Abandoned
        )
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Disconnected => f.write_str("client disconnected"),
            Outcome::ConnectionLost(e) => write!(f, "connection lost: {e}"),
            Outcome::ProtocolPanic(msg) => {
                write!(f, "protocol error (the vfio_user crate panicked: {msg})")
            }
            Outcome::WaitFailed(e) => write!(f, "waiting for a client failed: {e}"),
            Outcome::Abandoned => f.write_str("no client came"),
        }
    }
}

/// Waits until a client is connecting on `listener` (true) or `stop` is set (false).
pub fn wait_for_client(listener: &UnixListener, stop: &AtomicBool) -> io::Result<bool> {
    let slice = PollTimeout::try_from(POLL_SLICE).unwrap_or(PollTimeout::MAX);
    loop {
        if stop.load(Ordering::Relaxed) {
            return Ok(false);
        }
        let mut fds = [PollFd::new(listener.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, slice) {
            Ok(0) => continue,
            Ok(_) => return Ok(true),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(io::Error::from(e)),
        }
    }
}

/// Serves one client on `listener` with `backend`: waits for it (calling `on_connect` when it
/// arrives), runs the connection to its end, and says how it ended.
pub fn serve(
    listener: UnixListener,
    backend: &mut EmuBackend,
    stop: &AtomicBool,
    on_connect: impl FnOnce(),
) -> Outcome {
    match wait_for_client(&listener, stop) {
        Ok(true) => {}
        Ok(false) => return Outcome::Abandoned,
        Err(e) => return Outcome::WaitFailed(e),
    }
    on_connect();
    let regions = layout::regions(backend.device());
    let irqs = layout::irqs(super::backend::device_msix_vectors(backend.device()));
    let server = Server::from_owned_fd(OwnedFd::from(listener), true, irqs, regions);
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| server.run(backend)));
    match run {
        Ok(Ok(())) => Outcome::Disconnected,
        Ok(Err(e)) => Outcome::ConnectionLost(e),
        Err(panic) => {
            let msg = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_string());
            Outcome::ProtocolPanic(msg)
        }
    }
}
