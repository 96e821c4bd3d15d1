//! The measuring loops, perftest's, over any pair of sides that implement [`PerfSide`]:
//!
//! - bandwidth: the requester keeps up to [`TX_DEPTH`] messages in flight per queue pair,
//!   signals one in [`CQ_MOD`] (and the last), and stamps each message's posting and, when the
//!   completion that covers it arrives, its completion; for SEND the responder keeps receives
//!   posted and re-posts each one it consumes;
//! - latency: one message at a time. WRITE is a ping-pong through memory: each side WRITEs the
//!   iteration's stamp into the last byte of the other's buffer and waits to see the other's
//!   stamp land in its own. SEND is a ping-pong through receives. Both signal one message in
//!   [`CQ_MOD`] (and the last). READ is one request and its response.
//!
//! Both sides are driven from one thread, which polls whichever side has work.

use super::Op;
use std::fmt::Display;
use std::time::{Duration, Instant};

/// Messages in flight per queue pair in bandwidth runs (perftest's `DEF_TX_BW`).
pub const TX_DEPTH: u32 = 128;
/// One message in this many is signalled in bandwidth runs (perftest's `DEF_CQ_MOD`).
pub const CQ_MOD: u32 = 100;
/// Receives the responder keeps posted per queue pair for SEND bandwidth runs (perftest's
/// `DEF_RX_SEND`).
pub const RX_DEPTH: u32 = 512;
/// Most completions taken in one poll.
pub const POLL_BATCH: usize = 16;

/// A completion as the loops need it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Done {
    /// Which queue pair it belongs to.
    pub qp: usize,
    /// Whether it completes a receive (else a signalled send-side message).
    pub recv: bool,
}

/// Polls up to `out.len()` (at most [`POLL_BATCH`]) completions of `port`'s completion queue
/// into `wcs` and reads each into `out` (the queue pair is the work request's ID); runs the
/// port's idle hook when none came. A completion in error ends the run with its status named.
pub fn poll_completions<B: cxdirect::Backend>(
    port: &mut crate::rdma::verbs::RdmaPort<B>,
    wcs: &mut [cxdirect::rdma::WorkCompletion; POLL_BATCH],
    out: &mut [Done],
) -> Result<usize, String> {
    use cxdirect::rdma::{WcOpcode, WcStatus};
    let want = out.len().min(POLL_BATCH);
    let n = port.cq.poll(&mut wcs[..want]).map_err(|e| e.to_string())?;
    if n == 0 {
        port.idle();
    }
    for (done, wc) in out.iter_mut().zip(&wcs[..n]) {
        if wc.status != WcStatus::Success {
            return Err(format!(
                "{:?} on queue pair {} completed with {:?} (vendor syndrome {:#x})",
                wc.opcode, wc.wr_id, wc.status, wc.vendor_err
            ));
        }
        *done = Done {
            qp: wc.wr_id as usize,
            recv: matches!(wc.opcode, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm),
        };
    }
    Ok(n)
}

/// One side of a run: its queue pairs (connected to the other side's, pair by pair), their
/// completion queue and their buffers. Every message is `size` bytes from the local buffer to
/// the peer's (READ: from the peer's into the local one).
pub trait PerfSide {
    /// Why a post or a completion failed.
    type Error: Display;

    /// Posts one `op` message on queue pair `qp`, signalled or not. With `stamp`, that byte is
    /// first stored in the last byte of the message's source.
    fn post(
        &mut self,
        qp: usize,
        op: Op,
        signaled: bool,
        stamp: Option<u8>,
    ) -> Result<(), Self::Error>;
    /// Posts `n` receives on queue pair `qp`.
    fn post_recv(&mut self, qp: usize, n: u32) -> Result<(), Self::Error>;
    /// Takes up to `out.len()` completions; a completion in error is an error.
    fn poll(&mut self, out: &mut [Done]) -> Result<usize, Self::Error>;
    /// The last byte of queue pair `qp`'s target buffer, where a peer's WRITE lands (the CPU
    /// load that WRITE latency polls).
    fn last_byte(&mut self, qp: usize) -> Result<u8, Self::Error>;
}

/// Why a measuring loop stopped.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The requester's queue pair or completion queue failed.
    #[error("requester: {0}")]
    Requester(String),
    /// The responder's queue pair or completion queue failed.
    #[error("responder: {0}")]
    Responder(String),
    /// Nothing happened for the patience given.
    #[error("nothing completed for {0:?}")]
    Stalled(Duration),
    /// A side reported a completion it was not waiting for.
    #[error("{0}")]
    Unexpected(String),
}

fn req<E: Display>(e: E) -> EngineError {
    EngineError::Requester(e.to_string())
}

fn resp<E: Display>(e: E) -> EngineError {
    EngineError::Responder(e.to_string())
}

/// The times of a bandwidth run, in nanoseconds from its start: `posted[k]` is when the k-th
/// message was posted, `completed[k]` when the k-th message's completion was seen.
#[derive(Debug, Default)]
pub struct BwTimes {
    /// Posting times, in posting order.
    pub posted: Vec<u64>,
    /// Completion times, in completion order.
    pub completed: Vec<u64>,
}

/// Polls without progress between two looks at the clock.
const POLLS_PER_CLOCK_READ: u32 = 1024;

/// A loop polled without progress for longer than its patience.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stalled(pub Duration);

impl From<Stalled> for EngineError {
    fn from(s: Stalled) -> Self {
        EngineError::Stalled(s.0)
    }
}

/// Declares a loop stalled once it has polled without progress for its patience.
pub struct Watchdog {
    patience: Duration,
    idle: u32,
    since: Instant,
}

impl Watchdog {
    /// A watchdog of `patience`, its clock started at the first poll without progress.
    pub fn new(patience: Duration) -> Self {
        Self {
            patience,
            idle: 0,
            since: Instant::now(),
        }
    }

    /// Notes one poll; a stall once polls have gone without progress for the patience.
    pub fn tick(&mut self, progressed: bool) -> Result<(), Stalled> {
        if progressed {
            self.idle = 0;
            return Ok(());
        }
        self.idle = self.idle.wrapping_add(1);
        if self.idle == 1 {
            self.since = Instant::now();
        } else if self.idle % POLLS_PER_CLOCK_READ == 0 && self.since.elapsed() > self.patience {
            return Err(Stalled(self.patience));
        }
        Ok(())
    }
}

/// Nanoseconds since `since`.
pub fn nanos(since: Instant) -> u64 {
    since.elapsed().as_nanos() as u64
}

/// A bandwidth run: `iters` messages of `op` on each of `qps` queue pairs.
pub fn bandwidth<R: PerfSide, S: PerfSide>(
    requester: &mut R,
    responder: &mut S,
    op: Op,
    qps: usize,
    iters: u32,
    patience: Duration,
) -> Result<BwTimes, EngineError> {
    let total = qps * iters as usize;
    let mut times = BwTimes {
        posted: Vec::with_capacity(total),
        completed: Vec::with_capacity(total),
    };
    let mut sent = vec![0u32; qps];
    let mut done = vec![0u32; qps];
    let mut received = vec![0u32; qps];
    let rx_target = RX_DEPTH.min(iters);
    if op == Op::Send {
        for qp in 0..qps {
            responder.post_recv(qp, rx_target).map_err(resp)?;
        }
    }
    let mut recv_posted = vec![rx_target; qps];
    let mut completions = [Done::default(); POLL_BATCH];
    let mut watchdog = Watchdog::new(patience);
    let start = Instant::now();
    while times.completed.len() < total {
        let mut progressed = false;
        for qp in 0..qps {
            while sent[qp] < iters && sent[qp] - done[qp] < TX_DEPTH {
                let n = sent[qp] + 1;
                let signaled = n % CQ_MOD == 0 || n == iters;
                times.posted.push(nanos(start));
                requester.post(qp, op, signaled, None).map_err(req)?;
                sent[qp] = n;
                progressed = true;
            }
        }
        loop {
            let n = requester.poll(&mut completions).map_err(req)?;
            for c in &completions[..n] {
                if c.recv || c.qp >= qps {
                    return Err(EngineError::Unexpected(format!(
                        "requester: a completion for {c:?}"
                    )));
                }
                // A signalled message completes those before it on its queue pair: the next one
                // in CQ_MOD, or the last.
                let covered = (done[c.qp] + CQ_MOD).min(iters) - done[c.qp];
                if done[c.qp] + covered > sent[c.qp] {
                    return Err(EngineError::Unexpected(format!(
                        "requester: a completion on queue pair {} for a message not yet posted",
                        c.qp
                    )));
                }
                done[c.qp] += covered;
                let now = nanos(start);
                times
                    .completed
                    .extend(std::iter::repeat_n(now, covered as usize));
                progressed = true;
            }
            if n < POLL_BATCH {
                break;
            }
        }
        if op == Op::Send {
            loop {
                let n = responder.poll(&mut completions).map_err(resp)?;
                for c in &completions[..n] {
                    if !c.recv || c.qp >= qps {
                        return Err(EngineError::Unexpected(format!(
                            "responder: a completion for {c:?}"
                        )));
                    }
                    received[c.qp] += 1;
                    progressed = true;
                }
                if n < POLL_BATCH {
                    break;
                }
            }
            for qp in 0..qps {
                // Keep the receives topped up, a batch at a time, never past the last message.
                let outstanding = recv_posted[qp] - received[qp];
                let left = iters - recv_posted[qp];
                if left > 0 && outstanding + POLL_BATCH as u32 <= rx_target {
                    let n = (rx_target - outstanding).min(left);
                    responder.post_recv(qp, n).map_err(resp)?;
                    recv_posted[qp] += n;
                }
            }
        }
        watchdog.tick(progressed)?;
    }
    if op == Op::Send {
        // Every message was received before its SEND completed; take the last receives.
        while received.iter().sum::<u32>() < total as u32 {
            let n = responder.poll(&mut completions).map_err(resp)?;
            for c in &completions[..n] {
                received[c.qp.min(qps - 1)] += 1;
            }
            watchdog.tick(n > 0)?;
        }
    }
    Ok(times)
}

/// Completions a side has reported and the latency loop has not yet consumed.
#[derive(Default)]
struct Tally {
    sends: u32,
    recvs: u32,
}

/// Polls `side` until `ready` holds of its tally, counting every completion it reports on
/// queue pair 0.
fn wait_until<P: PerfSide>(
    side: &mut P,
    tally: &mut Tally,
    ready: fn(&Tally) -> bool,
    watchdog: &mut Watchdog,
    who: fn(P::Error) -> EngineError,
) -> Result<(), EngineError> {
    while !ready(tally) {
        let progressed = poll_into(side, tally, who)?;
        watchdog.tick(progressed)?;
    }
    Ok(())
}

/// Polls `side` once, counting what it reports on queue pair 0 into `tally`; returns whether
/// anything was there.
fn poll_into<P: PerfSide>(
    side: &mut P,
    tally: &mut Tally,
    who: fn(P::Error) -> EngineError,
) -> Result<bool, EngineError> {
    let mut batch = [Done::default(); POLL_BATCH];
    let n = side.poll(&mut batch).map_err(who)?;
    for c in &batch[..n] {
        if c.qp != 0 {
            return Err(EngineError::Unexpected(format!(
                "a completion for {c:?} in a run of one queue pair"
            )));
        }
        if c.recv {
            tally.recvs += 1;
        } else {
            tally.sends += 1;
        }
    }
    Ok(n > 0)
}

/// Waits for one send-side completion of `side` and consumes it.
fn take_send<P: PerfSide>(
    side: &mut P,
    tally: &mut Tally,
    watchdog: &mut Watchdog,
    who: fn(P::Error) -> EngineError,
) -> Result<(), EngineError> {
    wait_until(side, tally, |t| t.sends > 0, watchdog, who)?;
    tally.sends -= 1;
    Ok(())
}

/// Waits for one receive of `side` and consumes it.
fn take_recv<P: PerfSide>(
    side: &mut P,
    tally: &mut Tally,
    watchdog: &mut Watchdog,
    who: fn(P::Error) -> EngineError,
) -> Result<(), EngineError> {
    wait_until(side, tally, |t| t.recvs > 0, watchdog, who)?;
    tally.recvs -= 1;
    Ok(())
}

/// Polls `target`'s buffer until its last byte is `stamp`, the WRITE `writer` posted; polls
/// `writer`'s completions meanwhile (into `writer_tally`), so that a WRITE that failed is
/// reported as its error rather than waited for.
fn wait_stamp<P: PerfSide, W: PerfSide>(
    target: &mut P,
    target_err: fn(P::Error) -> EngineError,
    writer: &mut W,
    writer_tally: &mut Tally,
    writer_err: fn(W::Error) -> EngineError,
    stamp: u8,
    watchdog: &mut Watchdog,
) -> Result<(), EngineError> {
    let mut polls = 0u32;
    loop {
        if target.last_byte(0).map_err(target_err)? == stamp {
            return Ok(watchdog.tick(true)?);
        }
        polls = polls.wrapping_add(1);
        if polls % STAMP_LOADS_PER_POLL == 0 {
            poll_into(writer, writer_tally, writer_err)?;
        }
        watchdog.tick(false)?;
    }
}

/// Loads of the target's last byte between two polls of the writer's completions.
const STAMP_LOADS_PER_POLL: u32 = 64;

/// The stamp of iteration `i`: never 0, the byte a fresh buffer holds.
fn stamp(i: u32) -> u8 {
    (i % 255) as u8 + 1
}

/// A latency run of `iters` iterations of `op` on queue pair 0; returns each iteration's time
/// in nanoseconds (a round trip for WRITE and SEND).
pub fn latency<R: PerfSide, S: PerfSide>(
    requester: &mut R,
    responder: &mut S,
    op: Op,
    iters: u32,
    patience: Duration,
) -> Result<Vec<u64>, EngineError> {
    let mut samples = Vec::with_capacity(iters as usize);
    let mut watchdog = Watchdog::new(patience);
    let (mut mine, mut theirs) = (Tally::default(), Tally::default());
    if op == Op::Send {
        requester.post_recv(0, 1).map_err(req)?;
        responder.post_recv(0, 1).map_err(resp)?;
    }
    for i in 0..iters {
        let start = Instant::now();
        let more = i + 1 < iters;
        // WRITE and SEND signal one message in CQ_MOD, and the last, as perftest's latency
        // tests do: the round trip is the measure, not the completion.
        let signaled = (i + 1) % CQ_MOD == 0 || !more;
        match op {
            Op::Read => {
                requester.post(0, Op::Read, true, None).map_err(req)?;
                take_send(requester, &mut mine, &mut watchdog, req)?;
            }
            Op::Write => {
                let s = stamp(i);
                requester
                    .post(0, Op::Write, signaled, Some(s))
                    .map_err(req)?;
                wait_stamp(responder, resp, requester, &mut mine, req, s, &mut watchdog)?;
                responder
                    .post(0, Op::Write, signaled, Some(s))
                    .map_err(resp)?;
                wait_stamp(
                    requester,
                    req,
                    responder,
                    &mut theirs,
                    resp,
                    s,
                    &mut watchdog,
                )?;
                if signaled {
                    // Both WRITEs have landed; take their completions.
                    take_send(requester, &mut mine, &mut watchdog, req)?;
                    take_send(responder, &mut theirs, &mut watchdog, resp)?;
                }
            }
            Op::Send => {
                requester.post(0, Op::Send, signaled, None).map_err(req)?;
                take_recv(responder, &mut theirs, &mut watchdog, resp)?;
                if more {
                    responder.post_recv(0, 1).map_err(resp)?;
                }
                responder.post(0, Op::Send, signaled, None).map_err(resp)?;
                take_recv(requester, &mut mine, &mut watchdog, req)?;
                if more {
                    requester.post_recv(0, 1).map_err(req)?;
                }
                if signaled {
                    take_send(requester, &mut mine, &mut watchdog, req)?;
                    take_send(responder, &mut theirs, &mut watchdog, resp)?;
                }
            }
        }
        samples.push(nanos(start));
    }
    Ok(samples)
}

#[cfg(test)]
mod tests;
