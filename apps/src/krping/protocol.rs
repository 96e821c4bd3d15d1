//! krping's exchange, one side at a time, as state machines that post work and react to
//! completions on any queue pair that implements [`KrpingQp`]:
//!
//! 1. the client fills its start buffer with a ping and SENDs its advertisement
//!    ({address, rkey, size}, big-endian);
//! 2. the server RDMA READs the client's start buffer into its own buffer and SENDs a go-ahead;
//! 3. the client SENDs the advertisement of its sink buffer;
//! 4. the server RDMA WRITEs what it read into the client's sink buffer and SENDs a go-ahead;
//! 5. the client, with `validate`, compares its sink buffer with its start buffer.
//!
//! Each side keeps one receive posted ahead of the message it waits for, and takes a peer's
//! advertisement only after checking its length and that it fits its own buffer.

use super::{fill_ping, ping_text};
use crate::rdma::{BufferInfo, BUFFER_INFO_LEN};
use std::io::Write;
use std::time::{Duration, Instant};

/// A side's registered buffers, by krping's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Buffer {
    /// The client's source buffer (krping's `start_buf`), which the server READs.
    Start,
    /// The client's sink buffer, which the server WRITEs; on the server, the buffer it READs
    /// into and WRITEs from (krping's `rdma_buf` on both sides).
    Rdma,
}

/// A completed work request, as a side is told of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completion {
    /// A SEND completed.
    Sent,
    /// A message arrived: its first `len` bytes (at most [`BUFFER_INFO_LEN`]) are in `bytes`.
    Received {
        /// The message's bytes.
        bytes: [u8; BUFFER_INFO_LEN],
        /// How many bytes arrived (the completion's byte count).
        len: usize,
    },
    /// An RDMA READ completed: the data is in the local buffer.
    Read,
    /// An RDMA WRITE completed: the data is in the peer's buffer.
    Written,
}

/// What krping asks of an RC queue pair, its completion queue and its registered buffers. An
/// error is a failed post or a failed completion (the queue pair is then unusable).
pub trait KrpingQp {
    /// Why a post or a completion failed.
    type Error: std::fmt::Display;

    /// How a peer addresses buffer `buffer`: its address, rkey and full size.
    fn advertise(&self, buffer: Buffer) -> BufferInfo;
    /// Copies `data` into the start of buffer `buffer` (the CPU's store).
    fn store(&mut self, buffer: Buffer, data: &[u8]) -> Result<(), Self::Error>;
    /// Copies the first `out.len()` bytes of buffer `buffer` into `out` (the CPU's load).
    fn load(&mut self, buffer: Buffer, out: &mut [u8]) -> Result<(), Self::Error>;
    /// Posts a signalled SEND of `message`.
    fn post_send(&mut self, message: &[u8; BUFFER_INFO_LEN]) -> Result<(), Self::Error>;
    /// Posts one receive of up to [`BUFFER_INFO_LEN`] bytes.
    fn post_recv(&mut self) -> Result<(), Self::Error>;
    /// Posts a signalled RDMA READ of `from.size` bytes at `from` into the start of `into`.
    fn post_read(&mut self, into: Buffer, from: BufferInfo) -> Result<(), Self::Error>;
    /// Posts a signalled RDMA WRITE of the first `to.size` bytes of `from` to `to`.
    fn post_write(&mut self, from: Buffer, to: BufferInfo) -> Result<(), Self::Error>;
    /// The next completion, if one is there.
    fn poll(&mut self) -> Result<Option<Completion>, Self::Error>;
}

/// Which side a failure happened on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The side that sends pings.
    Client,
    /// The side that READs and WRITEs them.
    Server,
}

impl std::fmt::Display for Side {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Client => "client",
            Self::Server => "server",
        })
    }
}

/// Why a krping run stopped.
#[derive(Debug, thiserror::Error)]
pub enum KrpingError {
    /// The queue pair refused a post, or a work request completed in error.
    #[error("{side}: {message}")]
    Qp {
        /// The side it happened on.
        side: Side,
        /// What the queue pair reported.
        message: String,
    },
    /// The peer sent what krping never sends (a malformed advertisement, one larger than this
    /// side's buffer, a message out of turn).
    #[error("{side}: {message}")]
    Protocol {
        /// The side that received it.
        side: Side,
        /// What was wrong.
        message: String,
    },
    /// Nothing completed on either side for the patience given.
    #[error("no completion for {0:?}: the peer stopped answering")]
    Stalled(Duration),
    /// Writing the verbose output failed.
    #[error("writing output: {0}")]
    Output(#[from] std::io::Error),
}

fn qp_error(side: Side) -> impl Fn(&dyn std::fmt::Display) -> KrpingError {
    move |e| KrpingError::Qp {
        side,
        message: e.to_string(),
    }
}

fn protocol_error(side: Side, message: impl Into<String>) -> KrpingError {
    KrpingError::Protocol {
        side,
        message: message.into(),
    }
}

/// Posts one SEND of `message` and counts it in `sends_in_flight` until its completion.
fn post_send_counted<Q: KrpingQp>(
    qp: &mut Q,
    message: &[u8; BUFFER_INFO_LEN],
    side: Side,
    sends_in_flight: &mut u32,
) -> Result<(), KrpingError> {
    qp.post_send(message).map_err(|e| qp_error(side)(&e))?;
    *sends_in_flight += 1;
    Ok(())
}

/// Counts one SEND completion off `sends_in_flight`; one more than were posted is a protocol
/// error, never a wrapped count.
fn send_completed(side: Side, sends_in_flight: &mut u32) -> Result<(), KrpingError> {
    *sends_in_flight = sends_in_flight
        .checked_sub(1)
        .ok_or_else(|| protocol_error(side, "a SEND completed twice"))?;
    Ok(())
}

/// The go-ahead the server SENDs: krping's server sends its (never filled) advertisement, all
/// zeros.
const GO_AHEAD: [u8; BUFFER_INFO_LEN] = [0; BUFFER_INFO_LEN];

/// What both sides are told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// Buffer size in bytes ([`super::MIN_SIZE`]..=[`super::MAX_SIZE`]).
    pub size: u32,
    /// Pings to run (at least one).
    pub count: u64,
    /// Whether the client compares each sink buffer with its start buffer.
    pub validate: bool,
    /// Whether each side prints each ping's data.
    pub verbose: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ClientState {
    /// About to fill and advertise the next ping.
    Start,
    /// The start buffer is advertised; waiting for the go-ahead after the server's READ.
    AwaitReadGoAhead,
    /// The sink buffer is advertised; waiting for the go-ahead after the server's WRITE.
    AwaitWriteGoAhead,
}

/// The client: fills pings, advertises its buffers, validates what comes back.
pub struct Client {
    options: Options,
    state: ClientState,
    ping: u64,
    sends_in_flight: u32,
    errors: u64,
    source: Vec<u8>,
    sink: Vec<u8>,
}

impl Client {
    /// A client that will run `options.count` pings of `options.size` bytes.
    pub fn new(options: Options) -> Self {
        let size = options.size as usize;
        Self {
            options,
            state: ClientState::Start,
            ping: 0,
            sends_in_flight: 0,
            errors: 0,
            source: vec![0; size],
            sink: vec![0; size],
        }
    }

    /// Posts the receive for the first go-ahead: before the queue pair is connected.
    pub fn start<Q: KrpingQp>(&mut self, qp: &mut Q) -> Result<(), KrpingError> {
        qp.post_recv().map_err(|e| qp_error(Side::Client)(&e))
    }

    /// Pings completed so far.
    pub fn pings(&self) -> u64 {
        self.ping
    }

    /// Pings whose sink buffer differed from the start buffer.
    pub fn errors(&self) -> u64 {
        self.errors
    }

    /// Whether every ping has completed and every SEND with it.
    pub fn done(&self) -> bool {
        self.ping == self.options.count
            && self.state == ClientState::Start
            && self.sends_in_flight == 0
    }

    /// Does the next thing there is to do: starts a ping, or takes one completion. Returns
    /// whether anything happened.
    pub fn step<Q: KrpingQp>(
        &mut self,
        qp: &mut Q,
        out: &mut dyn Write,
    ) -> Result<bool, KrpingError> {
        let fail = qp_error(Side::Client);
        if self.state == ClientState::Start && self.ping < self.options.count {
            fill_ping(&mut self.source, self.ping);
            qp.store(Buffer::Start, &self.source)
                .map_err(|e| fail(&e))?;
            self.send(qp, &qp.advertise(Buffer::Start).to_wire())?;
            self.state = ClientState::AwaitReadGoAhead;
            return Ok(true);
        }
        let Some(completion) = qp.poll().map_err(|e| fail(&e))? else {
            return Ok(false);
        };
        match (completion, self.state) {
            (Completion::Sent, _) => {
                send_completed(Side::Client, &mut self.sends_in_flight)?;
            }
            (Completion::Received { .. }, ClientState::AwaitReadGoAhead) => {
                qp.post_recv().map_err(|e| fail(&e))?;
                self.send(qp, &qp.advertise(Buffer::Rdma).to_wire())?;
                self.state = ClientState::AwaitWriteGoAhead;
            }
            (Completion::Received { .. }, ClientState::AwaitWriteGoAhead) => {
                if self.ping + 1 < self.options.count {
                    qp.post_recv().map_err(|e| fail(&e))?;
                }
                self.finish_ping(qp, out)?;
            }
            (other, state) => {
                return Err(protocol_error(
                    Side::Client,
                    format!("{other:?} while {state:?}"),
                ))
            }
        }
        Ok(true)
    }

    fn send<Q: KrpingQp>(
        &mut self,
        qp: &mut Q,
        message: &[u8; BUFFER_INFO_LEN],
    ) -> Result<(), KrpingError> {
        post_send_counted(qp, message, Side::Client, &mut self.sends_in_flight)
    }

    fn finish_ping<Q: KrpingQp>(
        &mut self,
        qp: &mut Q,
        out: &mut dyn Write,
    ) -> Result<(), KrpingError> {
        if self.options.validate {
            qp.load(Buffer::Rdma, &mut self.sink)
                .map_err(|e| qp_error(Side::Client)(&e))?;
            if self.sink != self.source {
                self.errors += 1;
                writeln!(out, "data mismatch! (ping {})", self.ping)?;
            }
        }
        if self.options.verbose {
            writeln!(out, "ping data (64B max): |{}|", ping_text(&self.source))?;
        }
        self.ping += 1;
        self.state = ClientState::Start;
        Ok(())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ServerState {
    /// Waiting for the advertisement of the client's start buffer.
    AwaitSource,
    /// The READ of the client's start buffer is posted.
    AwaitRead,
    /// Waiting for the advertisement of the client's sink buffer.
    AwaitSink,
    /// The WRITE into the client's sink buffer is posted.
    AwaitWrite,
    /// Every ping is done.
    Finished,
}

/// The server: READs each ping from the client and WRITEs it back.
pub struct Server {
    options: Options,
    state: ServerState,
    pings: u64,
    read_len: u32,
    sends_in_flight: u32,
    staging: Vec<u8>,
}

impl Server {
    /// A server that will serve `options.count` pings into a buffer of `options.size` bytes.
    pub fn new(options: Options) -> Self {
        Self {
            options,
            state: ServerState::AwaitSource,
            pings: 0,
            read_len: 0,
            sends_in_flight: 0,
            staging: vec![0; options.size as usize],
        }
    }

    /// Posts the receive for the client's first advertisement: before the queue pair is
    /// connected.
    pub fn start<Q: KrpingQp>(&mut self, qp: &mut Q) -> Result<(), KrpingError> {
        qp.post_recv().map_err(|e| qp_error(Side::Server)(&e))
    }

    /// Pings served so far.
    pub fn pings(&self) -> u64 {
        self.pings
    }

    /// Whether every ping has been served and every SEND has completed.
    pub fn done(&self) -> bool {
        self.state == ServerState::Finished && self.sends_in_flight == 0
    }

    /// Takes one completion and answers it. Returns whether anything happened.
    pub fn step<Q: KrpingQp>(
        &mut self,
        qp: &mut Q,
        out: &mut dyn Write,
    ) -> Result<bool, KrpingError> {
        let fail = qp_error(Side::Server);
        let Some(completion) = qp.poll().map_err(|e| fail(&e))? else {
            return Ok(false);
        };
        match (completion, self.state) {
            (Completion::Sent, _) => {
                send_completed(Side::Server, &mut self.sends_in_flight)?;
            }
            (Completion::Received { bytes, len }, ServerState::AwaitSource) => {
                let source = self.advertisement(&bytes, len)?;
                qp.post_recv().map_err(|e| fail(&e))?;
                qp.post_read(Buffer::Rdma, source).map_err(|e| fail(&e))?;
                self.read_len = source.size;
                self.state = ServerState::AwaitRead;
            }
            (Completion::Read, ServerState::AwaitRead) => {
                if self.options.verbose {
                    let shown = &mut self.staging[..self.read_len as usize];
                    qp.load(Buffer::Rdma, shown).map_err(|e| fail(&e))?;
                    writeln!(out, "server ping data (64B max): |{}|", ping_text(shown))?;
                }
                self.send_go_ahead(qp)?;
                self.state = ServerState::AwaitSink;
            }
            (Completion::Received { bytes, len }, ServerState::AwaitSink) => {
                let sink = self.advertisement(&bytes, len)?;
                if self.pings + 1 < self.options.count {
                    qp.post_recv().map_err(|e| fail(&e))?;
                }
                let to = BufferInfo {
                    size: sink.size.min(self.read_len),
                    ..sink
                };
                qp.post_write(Buffer::Rdma, to).map_err(|e| fail(&e))?;
                self.state = ServerState::AwaitWrite;
            }
            (Completion::Written, ServerState::AwaitWrite) => {
                self.send_go_ahead(qp)?;
                self.pings += 1;
                self.state = if self.pings == self.options.count {
                    ServerState::Finished
                } else {
                    ServerState::AwaitSource
                };
            }
            (other, state) => {
                return Err(protocol_error(
                    Side::Server,
                    format!("{other:?} while {state:?}"),
                ))
            }
        }
        Ok(true)
    }

    /// Checks a client's advertisement: exactly [`BUFFER_INFO_LEN`] bytes, a size from 1 to
    /// this side's buffer size.
    fn advertisement(&self, bytes: &[u8], len: usize) -> Result<BufferInfo, KrpingError> {
        let info = bytes
            .get(..len)
            .and_then(BufferInfo::from_wire)
            .ok_or_else(|| {
                protocol_error(
                    Side::Server,
                    format!("an advertisement of {len} bytes, not {BUFFER_INFO_LEN}"),
                )
            })?;
        if info.size == 0 || info.size > self.options.size {
            return Err(protocol_error(
                Side::Server,
                format!(
                    "the client advertised {} bytes; this side's buffer has {}",
                    info.size, self.options.size
                ),
            ));
        }
        Ok(info)
    }

    fn send_go_ahead<Q: KrpingQp>(&mut self, qp: &mut Q) -> Result<(), KrpingError> {
        post_send_counted(qp, &GO_AHEAD, Side::Server, &mut self.sends_in_flight)
    }
}

/// Empty steps between two looks at the clock while waiting.
const STEPS_PER_CLOCK_READ: u32 = 1024;

/// Empty steps between two yields of the CPU in [`run_side`].
const EMPTY_STEPS_PER_YIELD: u32 = 16;

/// Declares a run stalled once no step has made progress for its patience; reads the clock only
/// every [`STEPS_PER_CLOCK_READ`] empty steps.
struct Watchdog {
    patience: Duration,
    idle: u32,
    idle_since: Instant,
}

impl Watchdog {
    fn new(patience: Duration) -> Self {
        Self {
            patience,
            idle: 0,
            idle_since: Instant::now(),
        }
    }

    fn observe(&mut self, progressed: bool) -> Result<(), KrpingError> {
        if progressed {
            self.idle = 0;
            return Ok(());
        }
        self.idle = self.idle.wrapping_add(1);
        if self.idle == STEPS_PER_CLOCK_READ {
            self.idle_since = Instant::now();
        } else if self.idle % STEPS_PER_CLOCK_READ == 0 && self.idle_since.elapsed() > self.patience
        {
            return Err(KrpingError::Stalled(self.patience));
        }
        Ok(())
    }
}

/// Runs both sides in one thread, alternating, until both are done; `patience` is how long
/// neither may make progress before the run is declared stalled.
pub fn run_pair<C: KrpingQp, S: KrpingQp>(
    client: &mut Client,
    client_qp: &mut C,
    server: &mut Server,
    server_qp: &mut S,
    out: &mut dyn Write,
    patience: Duration,
) -> Result<(), KrpingError> {
    let mut watchdog = Watchdog::new(patience);
    while !(client.done() && server.done()) {
        let mut progressed = false;
        if !client.done() {
            progressed |= client.step(client_qp, out)?;
        }
        if !server.done() {
            progressed |= server.step(server_qp, out)?;
        }
        watchdog.observe(progressed)?;
    }
    Ok(())
}

/// One side of a run, for [`run_side`].
pub enum Role<'a> {
    /// The client.
    Client(&'a mut Client),
    /// The server.
    Server(&'a mut Server),
}

/// Runs one side alone (the other is in another process) until it is done; `patience` as in
/// [`run_pair`]. While it waits, it yields the CPU every `EMPTY_STEPS_PER_YIELD` empty steps.
pub fn run_side<Q: KrpingQp>(
    mut role: Role<'_>,
    qp: &mut Q,
    out: &mut dyn Write,
    patience: Duration,
) -> Result<(), KrpingError> {
    let mut watchdog = Watchdog::new(patience);
    loop {
        let progressed = match &mut role {
            Role::Client(c) if c.done() => return Ok(()),
            Role::Server(s) if s.done() => return Ok(()),
            Role::Client(c) => c.step(qp, out)?,
            Role::Server(s) => s.step(qp, out)?,
        };
        watchdog.observe(progressed)?;
        // The peer is another process, perhaps on this very CPU: while this side waits for it,
        // let it run rather than spin out the time slice.
        if !progressed && watchdog.idle % EMPTY_STEPS_PER_YIELD == 0 {
            std::thread::yield_now();
        }
    }
}

#[cfg(test)]
mod fake;
#[cfg(test)]
mod tests;
