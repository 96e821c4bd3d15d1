//! rdma-perf on cxdirect: perftest's (`ib_write_bw`, `ib_read_lat`, …) reports computed from
//! the times a run records, printed in perftest's columns, and the `summary:` line.
//!
//! Bandwidth runs record, for every message, when it was posted and when its completion was
//! seen (an unsignalled message takes the time of the completion that covers it); latency runs
//! record each iteration's time. The statistics are perftest's: a bandwidth's average over the
//! whole run and its peak over the best window; a latency's minimum, median ("typical"), mean,
//! standard deviation and 99th / 99.9th percentiles after the two largest samples are set
//! aside, halved for the operations timed as round trips (WRITE and SEND ping-pong).
//!
//! By default both sides run in this process, one port each ([`run`], [`engine`]). With
//! `--perftest` a side speaks perftest's out-of-band TCP exchange instead ([`perftest`]), so
//! that Linux's `ib_write_bw`, `ib_read_bw`, `ib_send_bw` and `ib_write_lat` run against it in
//! either role; on emu-pair both such sides run in this process over loopback TCP.

pub mod cli;
pub mod engine;
pub mod perftest;
pub mod run;

use clap::ValueEnum;
use std::fmt;

/// The rule perftest prints above and below its reports.
pub const RESULT_LINE: &str =
    "---------------------------------------------------------------------------------------";

/// perftest's bandwidth header, in Gb/s (`RESULT_FMT_G`).
pub const BW_HEADER: &str =
    " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]";

/// perftest's latency header (`RESULT_FMT_LAT`).
pub const LAT_HEADER: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";

/// Largest samples a latency report sets aside before its statistics (perftest's
/// `LAT_MEASURE_TAIL`).
pub const LAT_MEASURE_TAIL: usize = 2;

/// Longest window of messages, in messages, over which the peak bandwidth is sought: perftest
/// tries every window, which is quadratic in the run's length.
pub const PEAK_WINDOW: usize = 1024;

/// Bits per second in a Gb/s, over 8 (perftest's `format_factor` for Gb/s, bytes per second).
const BYTES_PER_GBIT: f64 = 125_000_000.0;

/// The RDMA operation a run measures.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// RDMA WRITE.
    Write,
    /// RDMA READ.
    Read,
    /// SEND into posted receives.
    Send,
}

impl Op {
    /// Its name on the command line and in the summary.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Write => "write",
            Self::Read => "read",
            Self::Send => "send",
        }
    }

    /// What a latency iteration's time is divided by: WRITE and SEND are timed as ping-pongs
    /// (there and back), READ as one request and its response (perftest's `rtt_factor`).
    pub fn rtt_factor(self) -> u32 {
        match self {
            Self::Write | Self::Send => 2,
            Self::Read => 1,
        }
    }
}

/// What a run measures.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Bandwidth and message rate: many messages in flight.
    Bw,
    /// Latency: one message at a time.
    Lat,
}

impl Mode {
    /// Its name on the command line and in the summary.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Bw => "bw",
            Self::Lat => "lat",
        }
    }
}

/// A bandwidth report.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BwReport {
    /// Message size in bytes.
    pub size: u64,
    /// Messages per queue pair.
    pub iters: u64,
    /// Best bandwidth over a window of messages, in Gb/s.
    pub peak_gbps: f64,
    /// Bandwidth over the whole run, in Gb/s.
    pub avg_gbps: f64,
    /// Messages per second over the whole run, in millions.
    pub msg_rate_mpps: f64,
}

/// Why no report could be made.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    /// No samples.
    #[error("no messages were timed")]
    Empty,
    /// The posted and completed times do not pair up.
    #[error("{posted} posting times but {completed} completion times")]
    Mismatch {
        /// Posting times given.
        posted: usize,
        /// Completion times given.
        completed: usize,
    },
    /// A completion was stamped before its message was posted, or the run took no time.
    #[error("the clock went backwards or stood still")]
    Clock,
}

impl BwReport {
    /// The report of a run of `posted.len()` messages of `size` bytes over `qps` queue pairs:
    /// `posted[i]` and `completed[i]` are message `i`'s posting and completion times in
    /// nanoseconds on one clock, messages in posting order.
    pub fn from_times(
        size: u64,
        qps: u64,
        posted: &[u64],
        completed: &[u64],
    ) -> Result<Self, ReportError> {
        if posted.len() != completed.len() {
            return Err(ReportError::Mismatch {
                posted: posted.len(),
                completed: completed.len(),
            });
        }
        let (Some(&first), Some(&last)) = (posted.first(), completed.last()) else {
            return Err(ReportError::Empty);
        };
        if last <= first || posted.iter().zip(completed).any(|(p, c)| c < p) {
            return Err(ReportError::Clock);
        }
        let n = posted.len();
        let seconds = (last - first) as f64 / 1e9;
        // The shortest time per message over any window of up to PEAK_WINDOW messages.
        let mut best_ns_per_msg = f64::INFINITY;
        for (i, &start) in posted.iter().enumerate() {
            for (k, &end) in completed[i..].iter().take(PEAK_WINDOW).enumerate() {
                let span = end.saturating_sub(start);
                if span > 0 {
                    best_ns_per_msg = best_ns_per_msg.min(span as f64 / (k + 1) as f64);
                }
            }
        }
        let peak_gbps = if best_ns_per_msg.is_finite() {
            size as f64 / (best_ns_per_msg / 1e9) / BYTES_PER_GBIT
        } else {
            0.0
        };
        Ok(Self {
            size,
            iters: n as u64 / qps.max(1),
            peak_gbps,
            avg_gbps: (size as f64 * n as f64) / seconds / BYTES_PER_GBIT,
            msg_rate_mpps: n as f64 / seconds / 1e6,
        })
    }
}

impl fmt::Display for BwReport {
    /// perftest's `REPORT_FMT`, or `REPORT_FMT_EXT` (six decimals) below 0.1 Gb/s.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.avg_gbps < 0.1 {
            write!(
                f,
                " {:<7}    {}           {:<7.6}            {:<7.6}            {:<7.6}",
                self.size, self.iters, self.peak_gbps, self.avg_gbps, self.msg_rate_mpps
            )
        } else {
            write!(
                f,
                " {:<7}    {:<10}       {:<7.2}            {:<7.2}\t\t   {:<7.6}",
                self.size, self.iters, self.peak_gbps, self.avg_gbps, self.msg_rate_mpps
            )
        }
    }
}

/// A latency report, in microseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LatReport {
    /// Message size in bytes.
    pub size: u64,
    /// Iterations run.
    pub iters: u64,
    /// Smallest sample.
    pub t_min: f64,
    /// Largest sample kept (the smallest of those set aside, as perftest prints it).
    pub t_max: f64,
    /// The median.
    pub t_typical: f64,
    /// The mean.
    pub t_avg: f64,
    /// The standard deviation.
    pub t_stdev: f64,
    /// The 99th percentile.
    pub t_p99: f64,
    /// The 99.9th percentile.
    pub t_p99_9: f64,
}

impl LatReport {
    /// The report of `samples` (each iteration's time in nanoseconds; sorted in place), each
    /// divided by `rtt_factor` (see [`Op::rtt_factor`]).
    pub fn from_samples(
        size: u64,
        samples: &mut [u64],
        rtt_factor: u32,
    ) -> Result<Self, ReportError> {
        if samples.is_empty() {
            return Err(ReportError::Empty);
        }
        samples.sort_unstable();
        let tail = if samples.len() > LAT_MEASURE_TAIL {
            LAT_MEASURE_TAIL
        } else {
            0
        };
        let measured = samples.len() - tail;
        let usec = |ns: u64| ns as f64 / 1000.0 / f64::from(rtt_factor.max(1));
        let at = |i: usize| usec(samples[i.min(samples.len() - 1)]);
        let median = if measured % 2 == 0 {
            (at(measured / 2) + at(measured / 2 - 1)) / 2.0
        } else {
            at(measured / 2)
        };
        let kept = &samples[..measured];
        let mean = kept.iter().map(|&s| usec(s)).sum::<f64>() / measured as f64;
        let variance =
            kept.iter().map(|&s| (usec(s) - mean).powi(2)).sum::<f64>() / measured as f64;
        let percentile = |p: f64| at((measured as f64 * p).ceil() as usize);
        Ok(Self {
            size,
            iters: samples.len() as u64,
            t_min: at(0),
            t_max: at(measured),
            t_typical: median,
            t_avg: mean,
            t_stdev: variance.sqrt(),
            t_p99: percentile(0.99),
            t_p99_9: percentile(0.999),
        })
    }
}

impl fmt::Display for LatReport {
    /// perftest's `REPORT_FMT_LAT`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            " {:<7} {}          {:<7.2}        {:<7.2}      {:<7.2}  \t       {:<7.2}     \t{:<7.2}\t\t{:<7.2} \t\t{:<7.2}",
            self.size,
            self.iters,
            self.t_min,
            self.t_max,
            self.t_typical,
            self.t_avg,
            self.t_stdev,
            self.t_p99,
            self.t_p99_9
        )
    }
}

/// The last line of a bandwidth run.
pub fn bw_summary(op: Op, qps: u64, report: &BwReport) -> String {
    format!(
        "summary: op={} mode=bw size={} iters={} qps={qps} bw_peak_gbps={:.3} bw_avg_gbps={:.3} msg_rate_mpps={:.6}",
        op.as_str(),
        report.size,
        report.iters,
        report.peak_gbps,
        report.avg_gbps,
        report.msg_rate_mpps
    )
}

/// The last line of a latency run.
pub fn lat_summary(op: Op, qps: u64, report: &LatReport) -> String {
    format!(
        "summary: op={} mode=lat size={} iters={} qps={qps} t_min_usec={:.2} t_typical_usec={:.2} t_avg_usec={:.2} t_p99_usec={:.2}",
        op.as_str(),
        report.size,
        report.iters,
        report.t_min,
        report.t_typical,
        report.t_avg,
        report.t_p99
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn bandwidth_over_a_steady_run() {
        // 1000 messages of 64 KiB, one completing every 10 µs, each in flight for 40 µs.
        let posted: Vec<u64> = (0..1000).map(|i| i * 10_000).collect();
        let completed: Vec<u64> = posted.iter().map(|p| p + 40_000).collect();
        let r = BwReport::from_times(65536, 1, &posted, &completed).unwrap();
        let seconds = (999.0 * 10_000.0 + 40_000.0) / 1e9;
        assert!(
            close(r.avg_gbps, 65536.0 * 1000.0 / seconds / 125e6),
            "{r:?}"
        );
        assert!(close(r.msg_rate_mpps, 1000.0 / seconds / 1e6), "{r:?}");
        // Every window of k messages takes (k - 1) * 10 µs + 40 µs: the whole run is the best.
        let best_per_msg = (999.0 * 10_000.0 + 40_000.0) / 1000.0;
        assert!(
            close(r.peak_gbps, 65536.0 / (best_per_msg / 1e9) / 125e6),
            "{r:?}"
        );
        assert!(r.peak_gbps >= r.avg_gbps);
        assert_eq!((r.size, r.iters), (65536, 1000));
    }

    #[test]
    fn the_peak_finds_the_fastest_burst() {
        // Ten messages: the middle four, posted together, complete together 1 µs later.
        let posted = [0, 1000, 2000, 3000, 3000, 3000, 3000, 7000, 8000, 9000];
        let completed = [
            50_000, 60_000, 70_000, 4000, 4000, 4000, 4000, 80_000, 90_000, 100_000,
        ];
        let r = BwReport::from_times(1000, 1, &posted, &completed).unwrap();
        // Window 3..=6: 1000 ns for 4 messages → 250 ns per 1000 bytes = 32 Gb/s.
        assert!(close(r.peak_gbps, 32.0), "{r:?}");
    }

    #[test]
    fn iterations_are_per_queue_pair() {
        let posted: Vec<u64> = (0..400).collect();
        let completed: Vec<u64> = (1..401).collect();
        let r = BwReport::from_times(64, 4, &posted, &completed).unwrap();
        assert_eq!(r.iters, 100);
    }

    #[test]
    fn bandwidth_refuses_what_cannot_be_a_run() {
        assert_eq!(
            BwReport::from_times(64, 1, &[], &[]),
            Err(ReportError::Empty)
        );
        assert_eq!(
            BwReport::from_times(64, 1, &[1, 2], &[3]),
            Err(ReportError::Mismatch {
                posted: 2,
                completed: 1
            })
        );
        assert_eq!(
            BwReport::from_times(64, 1, &[5], &[4]),
            Err(ReportError::Clock)
        );
        assert_eq!(
            BwReport::from_times(64, 1, &[5], &[5]),
            Err(ReportError::Clock)
        );
    }

    #[test]
    fn latency_statistics_set_the_two_largest_aside() {
        // 1..=100 µs and two outliers.
        let mut samples: Vec<u64> = (1..=100).map(|us| us * 1000).collect();
        samples.extend([5_000_000, 9_000_000]);
        samples.reverse();
        let r = LatReport::from_samples(64, &mut samples, 1).unwrap();
        assert_eq!(r.iters, 102);
        assert!(close(r.t_min, 1.0));
        // perftest prints the first sample set aside as t_max.
        assert!(close(r.t_max, 5000.0), "{r:?}");
        assert!(close(r.t_typical, 50.5), "{r:?}");
        assert!(close(r.t_avg, 50.5), "{r:?}");
        let stdev = ((1..=100).map(|x| (x as f64 - 50.5).powi(2)).sum::<f64>() / 100.0).sqrt();
        assert!(close(r.t_stdev, stdev), "{r:?}");
        // ceil(100 * 0.99) = 99 → the 100th sample; ceil(99.9) = 100 → the first set aside.
        assert!(close(r.t_p99, 100.0), "{r:?}");
        assert!(close(r.t_p99_9, 5000.0), "{r:?}");
    }

    #[test]
    fn round_trips_are_halved() {
        let mut samples = vec![4000u64; 11];
        let r = LatReport::from_samples(8, &mut samples, Op::Write.rtt_factor()).unwrap();
        assert!(close(r.t_typical, 2.0) && close(r.t_min, 2.0) && close(r.t_stdev, 0.0));
        let mut samples = vec![4000u64; 11];
        let r = LatReport::from_samples(8, &mut samples, Op::Read.rtt_factor()).unwrap();
        assert!(close(r.t_typical, 4.0));
    }

    #[test]
    fn odd_counts_take_the_middle_sample_and_tiny_runs_keep_everything() {
        let mut samples = vec![3000, 1000, 2000, 7000, 8000];
        let r = LatReport::from_samples(1, &mut samples, 1).unwrap();
        // Kept: 1, 2, 3 µs; median 2.
        assert!(close(r.t_typical, 2.0), "{r:?}");
        let mut one = vec![1500];
        let r = LatReport::from_samples(1, &mut one, 1).unwrap();
        assert!(close(r.t_min, 1.5) && close(r.t_max, 1.5) && close(r.t_p99_9, 1.5));
        assert_eq!(
            LatReport::from_samples(1, &mut [], 1),
            Err(ReportError::Empty)
        );
    }

    /// The expected lines are what C's printf makes of perftest's formats with these values.
    #[test]
    fn reports_print_in_perftests_columns() {
        let bw = BwReport {
            size: 65536,
            iters: 5000,
            peak_gbps: 11.734,
            avg_gbps: 11.726,
            msg_rate_mpps: 0.022378,
        };
        assert_eq!(
            bw.to_string(),
            " 65536      5000             11.73              11.73  \t\t   0.022378"
        );
        let slow = BwReport {
            avg_gbps: 0.05,
            peak_gbps: 0.06,
            ..bw
        };
        assert_eq!(
            slow.to_string(),
            " 65536      5000           0.060000            0.050000            0.022378"
        );
        let lat = LatReport {
            size: 2,
            iters: 1000,
            t_min: 0.9,
            t_max: 3.26,
            t_typical: 0.93,
            t_avg: 0.94,
            t_stdev: 0.05,
            t_p99: 1.08,
            t_p99_9: 3.26,
        };
        assert_eq!(
            lat.to_string(),
            " 2       1000          0.90           3.26         0.93     \t       0.94        \t0.05   \t\t1.08    \t\t3.26   "
        );
        assert!(BW_HEADER.contains("BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"));
        assert!(LAT_HEADER.contains("t_typical[usec]") && LAT_HEADER.contains("99% percentile"));
    }

    #[test]
    fn summary_lines() {
        let bw = BwReport {
            size: 64,
            iters: 10,
            peak_gbps: 1.0,
            avg_gbps: 0.5,
            msg_rate_mpps: 0.976562,
        };
        assert_eq!(
            bw_summary(Op::Write, 1, &bw),
            "summary: op=write mode=bw size=64 iters=10 qps=1 bw_peak_gbps=1.000 bw_avg_gbps=0.500 msg_rate_mpps=0.976562"
        );
        let mut samples = vec![2000u64; 5];
        let lat = LatReport::from_samples(64, &mut samples, 1).unwrap();
        assert_eq!(
            lat_summary(Op::Read, 1, &lat),
            "summary: op=read mode=lat size=64 iters=5 qps=1 t_min_usec=2.00 t_typical_usec=2.00 t_avg_usec=2.00 t_p99_usec=2.00"
        );
    }
}
