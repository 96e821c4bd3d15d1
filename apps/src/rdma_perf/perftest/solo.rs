//! The measuring loops of one side facing a perftest peer, as perftest's own run them
//! (`perftest_resources.c`):
//!
//! - a bandwidth client (`run_iter_bw`) keeps up to [`TX_DEPTH`] messages in flight per queue
//!   pair, signals one in [`CQ_MOD`] and the last, and steps its remote address through the
//!   peer's cycle buffer by the message size rounded up to a cache line, back to the start
//!   after a cycle buffer's worth (`increase_rem_addr`; only for messages of at most half a
//!   cycle buffer, larger ones all go to the start);
//! - `ib_send_bw`'s server (`run_iter_bw_server`) takes the SENDs into its posted receives and
//!   keeps them topped up until every message has arrived;
//! - `ib_write_lat` (`run_iter_lat_write`) is a ping-pong through memory: each side WRITEs its
//!   count, one byte wide, into the last byte of the message at the peer's address and waits
//!   for the peer's count in its own; the server writes first. Every WRITE is signalled and
//!   its completion taken before the next. Each iteration's time is the time between two
//!   posts, halved when reported.

use super::super::engine::{
    nanos, Done, Stalled, Watchdog, CQ_MOD, POLL_BATCH, RX_DEPTH, TX_DEPTH,
};
use super::super::{BwReport, LatReport, Op};
use std::fmt::Display;
use std::time::{Duration, Instant};

/// One side's queue pairs and buffer, as the loops drive them.
pub trait Solo {
    /// Why a post or a poll failed.
    type Error: Display;
    /// Posts one `op` message on queue pair `qp`, from `offset` bytes into its source slot to
    /// `offset` bytes past the peer's address (READ: the other way), signalled or not. With
    /// `stamp`, that byte is first stored in the last byte of the message's source.
    fn post(
        &mut self,
        qp: usize,
        op: Op,
        offset: u64,
        signaled: bool,
        stamp: Option<u8>,
    ) -> Result<(), Self::Error>;
    /// Posts `n` receives on queue pair `qp`.
    fn post_recv(&mut self, qp: usize, n: u32) -> Result<(), Self::Error>;
    /// Takes up to `out.len()` completions; a completion in error is an error.
    fn poll(&mut self, out: &mut [Done]) -> Result<usize, Self::Error>;
    /// The last byte of a message at queue pair `qp`'s own advertised address.
    fn last_byte(&mut self, qp: usize) -> Result<u8, Self::Error>;
    /// Runs what a side runs while it waits on memory (a model executing inline delivers
    /// frames there).
    fn idle(&mut self);
}

/// Where messages land in the peer's cycle buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cycle {
    /// Message size in bytes.
    pub size: u64,
    /// The agreed cycle buffer, in bytes.
    pub cycle_buffer: u64,
    /// The agreed cache line, in bytes.
    pub cache_line: u64,
}

impl Cycle {
    /// The message size rounded up to a cache line, at least one (perftest's `INC`).
    pub fn step(&self) -> u64 {
        self.size.max(1).next_multiple_of(self.cache_line.max(1))
    }

    /// Bytes a queue pair's slot takes: a cycle buffer or a message, whichever is larger,
    /// rounded up to a cache line (`INC(BUFF_SIZE(size, cycle_buffer))`).
    pub fn slot(&self) -> u64 {
        self.size
            .max(self.cycle_buffer)
            .max(1)
            .next_multiple_of(self.cache_line.max(1))
    }

    /// The offset of message `k` (from 0) of a queue pair.
    pub fn offset(&self, k: u64) -> u64 {
        if self.size > self.cycle_buffer / 2 {
            return 0;
        }
        let per_cycle = (self.cycle_buffer / self.step()).max(1);
        (k % per_cycle) * self.step()
    }
}

/// Why a loop stopped.
#[derive(Debug, thiserror::Error)]
pub enum SoloError {
    /// The device failed.
    #[error("{0}")]
    Device(String),
    /// Nothing happened for the patience given.
    #[error("nothing completed for {0:?}")]
    Stalled(Duration),
    /// A completion came that was not waited for.
    #[error("{0}")]
    Unexpected(String),
    /// The run could not be reported.
    #[error("{0}")]
    Report(#[from] super::super::ReportError),
}

impl From<Stalled> for SoloError {
    fn from(s: Stalled) -> Self {
        SoloError::Stalled(s.0)
    }
}

fn dev<E: Display>(e: E) -> SoloError {
    SoloError::Device(e.to_string())
}

/// A bandwidth client: `iters` messages of `op` on each of `qps` queue pairs.
pub fn bw_client<S: Solo>(
    side: &mut S,
    op: Op,
    qps: usize,
    iters: u32,
    cycle: Cycle,
    patience: Duration,
) -> Result<BwReport, SoloError> {
    let total = qps * iters as usize;
    let mut posted = Vec::with_capacity(total);
    let mut completed = Vec::with_capacity(total);
    let (mut sent, mut done) = (vec![0u32; qps], vec![0u32; qps]);
    let mut batch = [Done::default(); POLL_BATCH];
    let mut watchdog = Watchdog::new(patience);
    let start = Instant::now();
    while completed.len() < total {
        let mut progressed = false;
        for qp in 0..qps {
            while sent[qp] < iters && sent[qp] - done[qp] < TX_DEPTH {
                let n = sent[qp] + 1;
                let signaled = n % CQ_MOD == 0 || n == iters;
                posted.push(nanos(start));
                let offset = cycle.offset(u64::from(sent[qp]));
                side.post(qp, op, offset, signaled, None).map_err(dev)?;
                sent[qp] = n;
                progressed = true;
            }
        }
        let n = side.poll(&mut batch).map_err(dev)?;
        for c in &batch[..n] {
            if c.recv || c.qp >= qps {
                return Err(SoloError::Unexpected(format!("a completion for {c:?}")));
            }
            let covered = (done[c.qp] + CQ_MOD).min(iters) - done[c.qp];
            if covered == 0 || done[c.qp] + covered > sent[c.qp] {
                return Err(SoloError::Unexpected(format!(
                    "a completion on queue pair {} for a message not yet posted",
                    c.qp
                )));
            }
            done[c.qp] += covered;
            let now = nanos(start);
            completed.extend(std::iter::repeat_n(now, covered as usize));
            progressed = true;
        }
        watchdog.tick(progressed)?;
    }
    Ok(BwReport::from_times(
        cycle.size, qps as u64, &posted, &completed,
    )?)
}

/// Receives `ib_send_bw`'s server keeps posted per queue pair (`DEF_RX_SEND`, at most the
/// iterations).
pub fn rx_depth(iters: u32) -> u32 {
    RX_DEPTH.min(iters)
}

/// Posts the first receives of `ib_send_bw`'s server, before the trade that starts the run.
pub fn post_first_receives<S: Solo>(side: &mut S, qps: usize, iters: u32) -> Result<(), SoloError> {
    for qp in 0..qps {
        side.post_recv(qp, rx_depth(iters)).map_err(dev)?;
    }
    Ok(())
}

/// `ib_send_bw`'s server, its first receives posted: takes `iters` SENDs on each of `qps`
/// queue pairs; the bandwidth is over the times they arrived, from the first to the last.
pub fn send_server<S: Solo>(
    side: &mut S,
    qps: usize,
    iters: u32,
    size: u64,
    patience: Duration,
) -> Result<BwReport, SoloError> {
    let total = qps * iters as usize;
    let depth = rx_depth(iters);
    let mut arrived = Vec::with_capacity(total);
    let mut received = vec![0u32; qps];
    let mut recv_posted = vec![depth; qps];
    let mut batch = [Done::default(); POLL_BATCH];
    let mut watchdog = Watchdog::new(patience);
    let start = Instant::now();
    while arrived.len() < total {
        let n = side.poll(&mut batch).map_err(dev)?;
        for c in &batch[..n] {
            if !c.recv || c.qp >= qps || received[c.qp] >= iters {
                return Err(SoloError::Unexpected(format!("a completion for {c:?}")));
            }
            received[c.qp] += 1;
            arrived.push(nanos(start));
        }
        for qp in 0..qps {
            let outstanding = recv_posted[qp] - received[qp];
            let left = iters - recv_posted[qp];
            if left > 0 && outstanding + POLL_BATCH as u32 <= depth {
                let k = (depth - outstanding).min(left);
                side.post_recv(qp, k).map_err(dev)?;
                recv_posted[qp] += k;
            }
        }
        watchdog.tick(n > 0)?;
    }
    // perftest measures no peak on a SEND server ("BW peak won't be measured"): it prints 0.
    let report = BwReport::from_times(size, qps as u64, &arrived, &arrived)?;
    Ok(BwReport {
        peak_gbps: 0.0,
        ..report
    })
}

/// `ib_write_lat` on queue pair 0: `iters` WRITEs each way; the server (`first`) writes
/// first.
pub fn write_lat<S: Solo>(
    side: &mut S,
    first: bool,
    iters: u32,
    size: u64,
    patience: Duration,
) -> Result<LatReport, SoloError> {
    let mut posts = Vec::with_capacity(iters as usize);
    let mut batch = [Done::default(); POLL_BATCH];
    let mut watchdog = Watchdog::new(patience);
    let (mut sent, mut seen) = (0u32, 0u32);
    let start = Instant::now();
    let wait = |side: &mut S, count: u32, watchdog: &mut Watchdog| -> Result<(), SoloError> {
        // perftest compares one `char` with its count: the count modulo 256.
        let mut loads = 0u32;
        while side.last_byte(0).map_err(dev)? != count as u8 {
            loads = loads.wrapping_add(1);
            if loads % 64 == 0 {
                side.idle();
            }
            watchdog.tick(false)?;
        }
        Ok(watchdog.tick(true)?)
    };
    while sent < iters || seen < iters {
        if seen < iters && !(first && sent == 0) {
            seen += 1;
            wait(side, seen, &mut watchdog)?;
        }
        if sent < iters {
            posts.push(nanos(start));
            sent += 1;
            side.post(0, Op::Write, 0, true, Some(sent as u8))
                .map_err(dev)?;
            loop {
                let n = side.poll(&mut batch[..1]).map_err(dev)?;
                if n > 0 {
                    if batch[0].recv || batch[0].qp != 0 {
                        return Err(SoloError::Unexpected(format!(
                            "a completion for {:?}",
                            batch[0]
                        )));
                    }
                    break;
                }
                watchdog.tick(false)?;
            }
            watchdog.tick(true)?;
        }
    }
    let mut samples: Vec<u64> = posts.windows(2).map(|w| w[1] - w[0]).collect();
    let mut report = LatReport::from_samples(size, &mut samples, Op::Write.rtt_factor())?;
    report.iters = u64::from(iters);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A side whose peer is scripted as perftest's `run_iter_lat_write`: it answers each of
    /// our WRITEs with its own count (the server's answer is the next count, the client's the
    /// same), and records our posts and what we saw.
    struct PingPeer {
        we_serve: bool,
        iters: u32,
        /// The last byte of our advertised buffer: the peer's latest count, modulo 256.
        ours: u8,
        posts: Vec<(u64, u8)>,
        completions: u32,
        loads_before_first_post: u32,
    }

    impl Solo for PingPeer {
        type Error = String;
        fn post(
            &mut self,
            qp: usize,
            op: Op,
            offset: u64,
            signaled: bool,
            stamp: Option<u8>,
        ) -> Result<(), String> {
            assert_eq!((qp, op, offset, signaled), (0, Op::Write, 0, true));
            let s = stamp.ok_or("no stamp")?;
            self.posts.push((offset, s));
            let n = self.posts.len() as u32;
            // perftest's server writes n + 1 after seeing our n; its client writes n after
            // seeing our n (it went first with 1 when it serves).
            if self.we_serve {
                self.ours = n as u8;
            } else if n < self.iters {
                self.ours = (n + 1) as u8;
            }
            self.completions += 1;
            Ok(())
        }
        fn post_recv(&mut self, _: usize, _: u32) -> Result<(), String> {
            Err("no receives in a WRITE ping-pong".into())
        }
        fn poll(&mut self, out: &mut [Done]) -> Result<usize, String> {
            if self.completions > 0 && !out.is_empty() {
                self.completions -= 1;
                out[0] = Done { qp: 0, recv: false };
                return Ok(1);
            }
            Ok(0)
        }
        fn last_byte(&mut self, qp: usize) -> Result<u8, String> {
            assert_eq!(qp, 0);
            if self.posts.is_empty() {
                self.loads_before_first_post += 1;
            }
            Ok(self.ours)
        }
        fn idle(&mut self) {}
    }

    #[test]
    fn write_latency_is_perftests_ping_pong_the_server_first_counts_modulo_256() {
        for we_serve in [true, false] {
            let iters = 600;
            let mut peer = PingPeer {
                we_serve,
                iters,
                // perftest's server (when we are its client) has already written its 1.
                ours: if we_serve { 0 } else { 1 },
                posts: Vec::new(),
                completions: 0,
                loads_before_first_post: 0,
            };
            let r = write_lat(&mut peer, we_serve, iters, 2, Duration::from_secs(5)).unwrap();
            let want: Vec<(u64, u8)> = (1..=iters).map(|n| (0, n as u8)).collect();
            assert_eq!(peer.posts, want, "serving: {we_serve}");
            // The server posts before it looks; the client looks for the server's 1 first.
            assert_eq!(peer.loads_before_first_post == 0, we_serve);
            assert_eq!(r.iters, u64::from(iters));
            assert_eq!(peer.completions, 0);
        }
    }

    #[test]
    fn messages_step_through_the_cycle_buffer_by_cache_lines() {
        // 64 KiB messages against a 4 KiB cycle buffer: all at the start.
        let big = Cycle {
            size: 65536,
            cycle_buffer: 4096,
            cache_line: 64,
        };
        assert_eq!((big.offset(0), big.offset(7)), (0, 0));
        assert_eq!(big.slot(), 65536);
        // 100-byte messages: 128-byte steps, 32 to a page, then back to the start.
        let small = Cycle { size: 100, ..big };
        assert_eq!(small.step(), 128);
        assert_eq!(small.slot(), 4096);
        assert_eq!(small.offset(1), 128);
        assert_eq!(small.offset(31), 31 * 128);
        assert_eq!(small.offset(32), 0);
        // Half a cycle buffer still steps; more than half does not.
        let half = Cycle { size: 2048, ..big };
        assert_eq!(half.offset(1), 2048);
        assert_eq!(half.offset(2), 0);
        let over = Cycle { size: 2049, ..big };
        assert_eq!(over.offset(1), 0);
        // A message every cycle never leaves its slot.
        for c in [big, small, half, over] {
            for k in 0..100 {
                assert!(c.offset(k) + c.size <= c.slot(), "{c:?} {k}");
            }
        }
    }
}
