//! krping on cxdirect: the ping data rping and krping write, the `summary:` line, and
//! ([`protocol`]) the two sides of krping's exchange as state machines over any RC queue pair
//! that can SEND, RDMA READ and RDMA WRITE.

pub mod cli;
pub mod protocol;
pub mod run;
pub mod srq;

use std::fmt;

/// The first character of the rotating pattern (`A`).
const PATTERN_FIRST: u8 = 65;
/// The last character of the rotating pattern (`z`).
const PATTERN_LAST: u8 = 122;
/// How many characters the pattern rotates through.
const PATTERN_LEN: u64 = (PATTERN_LAST - PATTERN_FIRST + 1) as u64;

/// Default buffer size in bytes, rping's.
pub const DEFAULT_SIZE: u32 = 64;
/// Smallest buffer krping moves, in bytes: the ping's header and its terminating NUL fit.
pub const MIN_SIZE: u32 = 16;
/// Largest buffer krping moves, in bytes (16 MiB).
pub const MAX_SIZE: u32 = 16 << 20;

/// Fills `buf` with ping number `ping` as krping and rping write it: `rdma-ping-<ping>: `, then
/// ASCII `A`..=`z` repeating from a start character that advances by one each ping (`A` for
/// ping 0), and a NUL in the last byte. A buffer shorter than the header gets as much of it as
/// fits.
pub fn fill_ping(buf: &mut [u8], ping: u64) {
    let Some(last) = buf.len().checked_sub(1) else {
        return;
    };
    let header = format!("rdma-ping-{ping}: ");
    let header_len = header.len().min(buf.len());
    buf[..header_len].copy_from_slice(&header.as_bytes()[..header_len]);
    let mut c = PATTERN_FIRST + (ping % PATTERN_LEN) as u8;
    for byte in &mut buf[header_len..] {
        *byte = c;
        c = if c == PATTERN_LAST {
            PATTERN_FIRST
        } else {
            c + 1
        };
    }
    buf[last] = 0;
}

/// What `--verbose` prints of a buffer: its first 64 bytes up to the first NUL, as krping's
/// `ping data (64B max): |%.64s|`.
pub fn ping_text(buf: &[u8]) -> String {
    let shown = &buf[..buf.len().min(64)];
    let end = shown.iter().position(|&b| b == 0).unwrap_or(shown.len());
    String::from_utf8_lossy(&shown[..end]).into_owned()
}

/// The last line a krping run prints.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    /// Pings completed.
    pub count: u64,
    /// Buffer size in bytes.
    pub size: u32,
    /// Whether each ping's sink buffer was compared with its source buffer.
    pub validated: bool,
    /// Pings whose sink buffer differed from the source.
    pub errors: u64,
    /// Wall-clock time per ping, in microseconds.
    pub usec_per_iter: f64,
    /// Limit events of the shared receive queues the sides this process ran received from
    /// (0 when they received on their queue pairs' own receive queues).
    pub srq_limit_events: u64,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "summary: count={} size={} validated={} errors={} usec_per_iter={:.2} \
             srq_limit_events={}",
            self.count,
            self.size,
            if self.validated { "yes" } else { "no" },
            self.errors,
            self.usec_per_iter,
            self.srq_limit_events
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ping_zero_starts_its_pattern_at_a() {
        let mut buf = [0xeeu8; 24];
        fill_ping(&mut buf, 0);
        assert_eq!(&buf, b"rdma-ping-0: ABCDEFGHIJ\0");
    }

    #[test]
    fn each_ping_advances_the_start_and_the_pattern_wraps_after_z() {
        let mut buf = [0u8; 20];
        fill_ping(&mut buf, 1);
        assert_eq!(&buf, b"rdma-ping-1: BCDEFG\0");
        // Ping 57 starts at `z` (65 + 57 = 122) and wraps to `A`; ping 58 starts at `A` again.
        fill_ping(&mut buf, 57);
        assert_eq!(&buf, b"rdma-ping-57: zABCD\0");
        fill_ping(&mut buf, 58);
        assert_eq!(&buf, b"rdma-ping-58: ABCDE\0");
    }

    #[test]
    fn the_pattern_covers_a_to_z_in_order() {
        let mut buf = vec![0u8; 13 + 58 + 2];
        fill_ping(&mut buf, 0);
        let pattern: Vec<u8> = (65..=122).collect();
        assert_eq!(&buf[13..13 + 58], pattern.as_slice());
        assert_eq!(buf[13 + 58], b'A');
        assert_eq!(*buf.last().unwrap(), 0);
    }

    #[test]
    fn a_short_buffer_gets_what_fits() {
        let mut buf = [0xeeu8; 5];
        fill_ping(&mut buf, 3);
        assert_eq!(&buf, b"rdma\0");
        fill_ping(&mut [], 3);
    }

    #[test]
    fn ping_text_stops_at_nul_and_64_bytes() {
        let mut buf = vec![0u8; 200];
        fill_ping(&mut buf, 0);
        let text = ping_text(&buf);
        assert_eq!(text.len(), 64);
        assert!(text.starts_with("rdma-ping-0: ABC"));
        assert_eq!(ping_text(b"rdma-ping-0: A\0zz"), "rdma-ping-0: A");
    }

    #[test]
    fn the_summary_line() {
        let s = Summary {
            count: 1000,
            size: 64,
            validated: true,
            errors: 0,
            usec_per_iter: 12.345,
            srq_limit_events: 7,
        };
        assert_eq!(
            s.to_string(),
            "summary: count=1000 size=64 validated=yes errors=0 usec_per_iter=12.35 \
             srq_limit_events=7"
        );
        let s = Summary {
            validated: false,
            errors: 3,
            ..s
        };
        assert!(s.to_string().contains("validated=no errors=3 "));
    }
}
