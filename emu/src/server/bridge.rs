//! A cable between two server processes: `--wire pair:OTHER.sock`.
//!
//! Each process puts its function on port A of a private two-port [`Wire`]; port B is this
//! bridge. Frames the function sends arrive at port B and go over a side channel to the other
//! process, which puts them on its own wire from port B, so they arrive at its function's port.
//!
//! **Side channel.** A Unix stream socket next to the vfio-user sockets: the process whose own
//! socket path sorts first (both made absolute) listens on `OWN.sock.wire`; the other connects to
//! `OTHER.sock.wire`, retrying every [`RETRY`] until it appears. Each frame travels as a 4-byte
//! little-endian length and the frame's bytes. When the other process goes away the cable is
//! unplugged: frames sent meanwhile are dropped (and counted), and the bridge waits for the
//! other side to come back (listening again, or reconnecting).
//!
//! Both processes must name the sockets the same way relative to their working directories (the
//! paths are made absolute, not canonical), so that they agree on who listens.

use crate::wire::{PortId, Wire, MAX_FRAME_LEN};
use std::io::{self, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;
use thiserror::Error;

/// How long to wait between attempts to reach the other process, and the longest any bridge
/// thread sleeps before it looks at the stop flag.
pub const RETRY: Duration = Duration::from_millis(100);

/// How long a frame may take to go out before the other process counts as stuck and the cable
/// is unplugged.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(2);

/// Suffix added to a vfio-user socket path to name its side channel.
pub const WIRE_SUFFIX: &str = ".wire";

/// Why the cable could not be set up.
#[derive(Debug, Error)]
pub enum BridgeError {
    /// A socket path could not be made absolute.
    #[error("{path}: {source}")]
    Path {
        /// The path.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: io::Error,
    },
    /// The side channel could not be listened on.
    #[error(transparent)]
    Bind(#[from] super::session::BindError),
    /// A bridge thread could not be started.
    #[error("cannot start a bridge thread: {0}")]
    Thread(#[source] io::Error),
}

/// Totals of the side channel.
#[derive(Debug, Default)]
pub struct BridgeCounters {
    /// Frames sent to the other process.
    pub sent: AtomicU64,
    /// Frames received from it and put on the wire.
    pub received: AtomicU64,
    /// Frames dropped because the other process was not connected.
    pub unplugged_drops: AtomicU64,
    /// Times the other process connected.
    pub connections: AtomicU64,
}

/// The side-channel path for the vfio-user socket `socket`.
pub fn wire_path(socket: &Path) -> PathBuf {
    let mut s = socket.as_os_str().to_owned();
    s.push(WIRE_SUFFIX);
    PathBuf::from(s)
}

enum Role {
    Listen(UnixListener, PathBuf),
    Connect(PathBuf),
}

struct Shared {
    wire: Arc<Wire>,
    port: PortId,
    stop: AtomicBool,
    /// The connection's sending half, while the other process is connected.
    out: Mutex<Option<UnixStream>>,
    counters: BridgeCounters,
}

impl Shared {
    fn out(&self) -> MutexGuard<'_, Option<UnixStream>> {
        self.out.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A running cable to another process.
pub struct Bridge {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    listen_path: Option<PathBuf>,
}

impl std::fmt::Debug for Bridge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bridge")
            .field("listen_path", &self.listen_path)
            .finish()
    }
}

impl Bridge {
    /// Starts carrying frames between `port` of `wire` and the process serving `other_socket`.
    /// `own_socket` is this process's vfio-user socket; the two paths decide who listens.
    pub fn start(
        wire: Arc<Wire>,
        port: PortId,
        own_socket: &Path,
        other_socket: &Path,
    ) -> Result<Bridge, BridgeError> {
        let absolute = |p: &Path| {
            std::path::absolute(p).map_err(|source| BridgeError::Path {
                path: p.to_path_buf(),
                source,
            })
        };
        let own = absolute(own_socket)?;
        let other = absolute(other_socket)?;
        let role = if own < other {
            let path = wire_path(&own);
            Role::Listen(super::session::bind(&path)?, path)
        } else {
            Role::Connect(wire_path(&other))
        };
        let listen_path = match &role {
            Role::Listen(_, p) => Some(p.clone()),
            Role::Connect(_) => None,
        };
        match &role {
            Role::Listen(_, p) => {
                log::info!("cable: waiting for the other server on {}", p.display())
            }
            Role::Connect(p) => log::info!("cable: reaching the other server on {}", p.display()),
        }
        let shared = Arc::new(Shared {
            wire,
            port,
            stop: AtomicBool::new(false),
            out: Mutex::new(None),
            counters: BridgeCounters::default(),
        });
        let mut threads = Vec::new();
        let s = shared.clone();
        threads.push(
            std::thread::Builder::new()
                .name("cable-tx".into())
                .spawn(move || send_loop(&s))
                .map_err(BridgeError::Thread)?,
        );
        let s = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("cable-rx".into())
            .spawn(move || link_loop(&s, role));
        match spawned {
            Ok(t) => threads.push(t),
            Err(e) => {
                let bridge = Bridge {
                    shared,
                    threads,
                    listen_path,
                };
                bridge.stop();
                return Err(BridgeError::Thread(e));
            }
        }
        Ok(Bridge {
            shared,
            threads,
            listen_path,
        })
    }

    /// The side channel's totals.
    pub fn counters(&self) -> &BridgeCounters {
        &self.shared.counters
    }

    /// Whether the other process is connected now.
    pub fn is_connected(&self) -> bool {
        self.shared.out().is_some()
    }

    /// Unplugs the cable and stops the bridge threads.
    pub fn stop(self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        let _ = self.shared.wire.wake(self.shared.port);
        if let Some(stream) = self.shared.out().take() {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
        for t in self.threads {
            let _ = t.join();
        }
        if let Some(path) = &self.listen_path {
            let _ = std::fs::remove_file(path);
        }
        let c = &self.shared.counters;
        log::info!(
            "cable: {} frames sent, {} received, {} dropped while unplugged",
            c.sent.load(Ordering::Relaxed),
            c.received.load(Ordering::Relaxed),
            c.unplugged_drops.load(Ordering::Relaxed)
        );
    }
}

/// Wire → other process: every frame reaching the bridge's port goes out on the connection, or
/// is dropped while there is none.
fn send_loop(shared: &Shared) {
    let mut frame = Vec::with_capacity(MAX_FRAME_LEN);
    while !shared.stop.load(Ordering::Relaxed) {
        if !matches!(shared.wire.wait_for_frames(shared.port, RETRY), Ok(true)) {
            continue;
        }
        while let Ok(true) = shared.wire.receive(shared.port, &mut frame) {
            let mut out = shared.out();
            let Some(stream) = out.as_mut() else {
                shared
                    .counters
                    .unplugged_drops
                    .fetch_add(1, Ordering::Relaxed);
                continue;
            };
            let len = (frame.len() as u32).to_le_bytes();
            let sent = stream
                .write_all(&len)
                .and_then(|()| stream.write_all(&frame));
            match sent {
                Ok(()) => {
                    shared.counters.sent.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    log::warn!("cable: sending to the other server failed ({e}); unplugged");
                    if let Some(s) = out.take() {
                        let _ = s.shutdown(std::net::Shutdown::Both);
                    }
                }
            }
        }
    }
}

/// Keeps a connection to the other process and puts what it sends on the wire.
fn link_loop(shared: &Shared, role: Role) {
    while !shared.stop.load(Ordering::Relaxed) {
        let stream = match &role {
            Role::Listen(listener, _) => accept(shared, listener),
            Role::Connect(path) => connect(shared, path),
        };
        let Some(stream) = stream else { continue };
        let (Ok(reader), Ok(())) = (
            stream.try_clone(),
            stream.set_write_timeout(Some(SEND_TIMEOUT)),
        ) else {
            continue;
        };
        if reader.set_read_timeout(Some(RETRY)).is_err() {
            continue;
        }
        shared.counters.connections.fetch_add(1, Ordering::Relaxed);
        log::info!("cable: the other server is connected");
        *shared.out() = Some(stream);
        let why = receive_frames(shared, reader);
        if let Some(s) = shared.out().take() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        if !shared.stop.load(Ordering::Relaxed) {
            log::info!("cable: the other server went away ({why}); unplugged");
        }
    }
}

fn accept(shared: &Shared, listener: &UnixListener) -> Option<UnixStream> {
    match super::session::wait_for_client(listener, &shared.stop) {
        Ok(true) => listener.accept().ok().map(|(s, _)| s),
        Ok(false) => None,
        Err(_) => {
            std::thread::sleep(RETRY);
            None
        }
    }
}

fn connect(shared: &Shared, path: &Path) -> Option<UnixStream> {
    match UnixStream::connect(path) {
        Ok(s) => Some(s),
        Err(_) => {
            if !shared.stop.load(Ordering::Relaxed) {
                std::thread::sleep(RETRY);
            }
            None
        }
    }
}

/// Reads length-prefixed frames until the connection ends; says why it ended.
fn receive_frames(shared: &Shared, mut stream: UnixStream) -> String {
    let mut buf: Vec<u8> = Vec::with_capacity(2 * MAX_FRAME_LEN);
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        if shared.stop.load(Ordering::Relaxed) {
            return "stopping".into();
        }
        match stream.read(&mut chunk) {
            Ok(0) => return "connection closed".into(),
            Ok(n) => buf.extend_from_slice(chunk.get(..n).unwrap_or_default()),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return e.to_string(),
        }
        let mut used = 0;
        while let Some(header) = buf.get(used..used + 4) {
            let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
            if len > MAX_FRAME_LEN {
                return format!("it sent a {len}-byte frame, more than {MAX_FRAME_LEN}");
            }
            let Some(frame) = buf.get(used + 4..used + 4 + len) else {
                break;
            };
            // A frame of a bad size is refused and counted by the wire; nothing else to do.
            if shared.wire.transmit(shared.port, frame).is_ok() {
                shared.counters.received.fetch_add(1, Ordering::Relaxed);
            }
            used += 4 + len;
        }
        buf.drain(..used);
    }
}
