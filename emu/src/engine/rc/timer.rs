//! The requester's ACK and RNR timer values, and arming the ACK timer when a request goes
//! out. The retransmission that runs when they expire is [`retransmit`](super::retransmit).

use crate::function::Core;
use std::time::{Duration, Instant};

/// The local ACK timeout of code `code`: 4.096 us << code.
pub(crate) fn ack_timeout(code: u8) -> Duration {
    Duration::from_nanos(4096u64 << code.min(31))
}

/// The RNR timer of code `code` (IBA table 45): 0 is 655.36 ms, 1..=31 run from 0.01 ms to
/// 491.52 ms.
pub(crate) fn rnr_delay(code: u8) -> Duration {
    const MICROS: [u32; 32] = [
        655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840,
        5120, 7680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840,
        245_760, 327_680, 491_520,
    ];
    Duration::from_micros(u64::from(MICROS[usize::from(code & 0x1f)]))
}

/// Starts the ACK timer of QP `qpn` (a QP with `ack_timeout` 0 has none).
pub(super) fn arm_ack_timer(core: &mut Core, qpn: u32) {
    if let Some(qp) = core.res.qps.get_mut(qpn) {
        if qp.path.ack_timeout != 0 {
            qp.req.ack_deadline = Some(Instant::now() + ack_timeout(qp.path.ack_timeout));
        }
        if qp.req.outstanding.is_empty() {
            qp.req.retries_left = qp.retry_count;
            qp.req.rnr_retries_left = qp.rnr_retry;
        }
    }
}
