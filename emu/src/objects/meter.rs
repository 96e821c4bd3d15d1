//! Flow meters (CREATE_GENERAL_OBJECT of type FLOW_METER, `fw::meter`): two token buckets
//! that color each packet reaching the meter's ICM address green, yellow or red.
//!
//! The buckets, as RFC 4115 defines a two-rate meter (of which RFC 2697's single-rate meter is
//! the case without an excess rate and with the coupling flag set): the committed bucket fills
//! at the committed rate up to the committed burst size; with `bucket_overflow` (RFC 4115's
//! coupling flag) what overflows it fills the excess bucket, which also fills at the excess
//! rate, up to the excess burst size. Both start full. A packet is green when the committed
//! bucket is not negative (its size comes out of it, and with `both_buckets_on_green` out of
//! the excess bucket too), else yellow when the excess bucket is not negative (its size comes
//! out of that), else red (nothing comes out). A bucket so goes below zero by less than one
//! packet, as NVIDIA's DPDK PMD describes the hardware: "If number of tokens in Meter bucket
//! is zero or above, Meter hardware will use that bucket and can set number of tokens to
//! negative value" (`mlx5_quota_fetch_tokens`, drivers/net/mlx5/mlx5_flow_quota.c, which sets
//! an excess bucket to -1 to keep it out of use); rdma-core's `test_flow_meter` likewise
//! expects green packets from a meter whose committed burst size is 0. A packet whose
//! `start_color` is yellow (color-aware metering) is never green, one that starts red stays
//! red.
//!
//! Units: the fields name a rate as `mantissa * 10^9 / 2^exponent` bytes a second (Linux's
//! `mlx5e_flow_meter_cir_calc`: 8 * 10^9 bits) and a burst as `mantissa * 2^exponent` bytes
//! (`mlx5e_flow_meter_cbs_calc`); a packet counts the bytes of its IP packet, of its L2
//! frame, of the frame with 20 bytes of preamble, delimiter and gap (`meter_mode` 0 to 2; the
//! 20 are the model's reading of "L2_IPG"), or 128 bytes whatever its size (`meter_mode` 3:
//! "HW treats each packet as 128 bytes in PPS mode", `mlx5e_tc_meter_modify`). The buckets
//! keep tokens in 2^-31 bytes, so that every rate adds a whole number of them each
//! nanosecond.

use cxdirect_hw::meter::color;
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

/// Tokens are kept in bytes shifted left by this many bits (the largest rate exponent is
/// 31: one byte every 2^31 ns at mantissa 1).
const FRACTION_BITS: u32 = 31;

/// Bytes of preamble, start delimiter and inter-packet gap counted per frame in
/// `meter_mode` 2.
const PREAMBLE_AND_GAP: u64 = 20;

/// Bytes a packet counts in packet mode (`meter_mode` 3).
const PACKET_MODE_BYTES: u64 = 128;

/// A meter's parameters (`flow_meter_params`), as CREATE and MODIFY set them and QUERY reads
/// them back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct MeterParams {
    pub valid: bool,
    pub bucket_overflow: bool,
    pub start_color: u8,
    pub both_buckets_on_green: bool,
    pub meter_mode: u8,
    pub cbs_exponent: u8,
    pub cbs_mantissa: u8,
    pub cir_exponent: u8,
    pub cir_mantissa: u8,
    pub ebs_exponent: u8,
    pub ebs_mantissa: u8,
    pub eir_exponent: u8,
    pub eir_mantissa: u8,
}

impl MeterParams {
    /// A burst size in tokens (2^-31 bytes).
    fn burst(mantissa: u8, exponent: u8) -> i128 {
        i128::from(mantissa) << (u32::from(exponent) + FRACTION_BITS)
    }

    /// A rate in tokens per nanosecond: `mantissa / 2^exponent` bytes, exactly (the
    /// exponent is at most 31).
    fn rate(mantissa: u8, exponent: u8) -> i128 {
        i128::from(mantissa) << (FRACTION_BITS - u32::from(exponent.min(31)))
    }

    /// The tokens a packet of `ip_len` IP bytes in a frame of `frame_len` bytes takes.
    fn tokens(&self, ip_len: u64, frame_len: u64) -> i128 {
        let bytes = match self.meter_mode {
            0 => ip_len,
            1 => frame_len,
            2 => frame_len + PREAMBLE_AND_GAP,
            _ => PACKET_MODE_BYTES,
        };
        i128::from(bytes) << FRACTION_BITS
    }
}

/// The two buckets' tokens and when they were last filled.
#[derive(Debug)]
struct Buckets {
    committed: i128,
    excess: i128,
    filled: Instant,
}

/// A flow meter: packets reaching its ICM address are colored and go on to
/// `destination_table` with the color in `reg_c_<return_reg>`. The destination table is held
/// (`FlowTable::referenced`) while the meter lives.
#[derive(Debug)]
pub(crate) struct FlowMeter {
    /// Colors packets; an inactive meter hands them on with no color written.
    pub active: bool,
    /// The metadata register the color goes into (0..=7).
    pub return_reg: u8,
    /// The destination table's type.
    pub table_type: u8,
    /// The table packets go on to.
    pub destination_table: u32,
    /// The buckets' parameters.
    pub params: MeterParams,
    /// The buckets, behind their own lock: steering colors through a shared view of the
    /// tables.
    buckets: Mutex<Buckets>,
}

impl FlowMeter {
    /// A meter with both buckets full at `now`.
    pub(crate) fn new(
        active: bool,
        return_reg: u8,
        (table_type, destination_table): (u8, u32),
        params: MeterParams,
        now: Instant,
    ) -> Self {
        Self {
            active,
            return_reg,
            table_type,
            destination_table,
            params,
            buckets: Mutex::new(Buckets {
                committed: MeterParams::burst(params.cbs_mantissa, params.cbs_exponent),
                excess: MeterParams::burst(params.ebs_mantissa, params.ebs_exponent),
                filled: now,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Buckets> {
        self.buckets.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// New parameters (MODIFY): the buckets keep their tokens, within the new sizes.
    pub(crate) fn set_params(&mut self, params: MeterParams) {
        self.params = params;
        let (cbs, ebs) = self.sizes();
        let b = self.buckets.get_mut().unwrap_or_else(|e| e.into_inner());
        b.committed = b.committed.min(cbs);
        b.excess = b.excess.min(ebs);
    }

    fn sizes(&self) -> (i128, i128) {
        let p = &self.params;
        (
            MeterParams::burst(p.cbs_mantissa, p.cbs_exponent),
            MeterParams::burst(p.ebs_mantissa, p.ebs_exponent),
        )
    }

    /// The color of a packet of `ip_len` IP bytes in a frame of `frame_len` bytes reaching
    /// the meter at `now` (see the module's description); `None` when the meter is inactive
    /// or its parameters are not valid, and the packet goes on uncolored.
    pub(crate) fn color(&self, ip_len: u64, frame_len: u64, now: Instant) -> Option<u32> {
        let p = self.params;
        if !self.active || !p.valid {
            return None;
        }
        let (cbs, ebs) = self.sizes();
        let units = p.tokens(ip_len, frame_len);
        let mut b = self.lock();
        // Fill both buckets for the time since the last packet.
        let ns = i128::try_from(now.saturating_duration_since(b.filled).as_nanos())
            .unwrap_or(i128::MAX / 2);
        b.filled = b.filled.max(now);
        let committed = b
            .committed
            .saturating_add(ns.saturating_mul(MeterParams::rate(p.cir_mantissa, p.cir_exponent)));
        let overflow = (committed - cbs).max(0);
        b.committed = committed.min(cbs);
        let mut excess = b
            .excess
            .saturating_add(ns.saturating_mul(MeterParams::rate(p.eir_mantissa, p.eir_exponent)));
        if p.bucket_overflow {
            excess = excess.saturating_add(overflow);
        }
        b.excess = excess.min(ebs);
        let start = u32::from(p.start_color);
        if start != color::RED && start != color::YELLOW && b.committed >= 0 {
            b.committed -= units;
            if p.both_buckets_on_green {
                b.excess -= units;
            }
            return Some(color::GREEN);
        }
        if start != color::RED && b.excess >= 0 {
            b.excess -= units;
            return Some(color::YELLOW);
        }
        Some(color::RED)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn meter(params: MeterParams, now: Instant) -> FlowMeter {
        FlowMeter::new(true, 2, (0, 1), params, now)
    }

    fn single_rate(cbs: (u8, u8), cir: (u8, u8)) -> MeterParams {
        MeterParams {
            valid: true,
            bucket_overflow: true,
            start_color: color::GREEN as u8,
            meter_mode: 1,
            cbs_mantissa: cbs.0,
            cbs_exponent: cbs.1,
            cir_mantissa: cir.0,
            cir_exponent: cir.1,
            ..MeterParams::default()
        }
    }

    #[test]
    fn a_committed_burst_colors_green_until_the_bucket_goes_below_zero() {
        let t = Instant::now();
        // 4096 bytes of burst, a rate of 10^9 / 2^31 bytes a second: no refill to speak of.
        let m = meter(single_rate((1, 12), (1, 31)), t);
        let colors: Vec<_> = (0..6).map(|_| m.color(986, 1000, t).unwrap()).collect();
        // 4096, 3096, 2096, 1096, 96 are not negative: five green. At -904 the sixth goes to
        // the excess bucket, whose size is 0 and which starts full, at 0: yellow; the seventh
        // finds it at -1000: red.
        assert_eq!(&colors[..5], &[color::GREEN; 5]);
        assert_eq!(colors[5], color::YELLOW);
        assert_eq!(m.color(986, 1000, t), Some(color::RED));
    }

    #[test]
    fn the_committed_rate_refills_the_bucket() {
        let t = Instant::now();
        // Burst 0, 10^9 / 2^6 bytes a second (15.625 MB/s): 1000 bytes every 64 us.
        let m = meter(single_rate((0, 0), (1, 6)), t);
        assert_eq!(m.color(986, 1000, t), Some(color::GREEN));
        assert_eq!(m.color(986, 1000, t), Some(color::YELLOW));
        assert_eq!(m.color(986, 1000, t), Some(color::RED));
        // 63 us later the bucket is still below zero; at 64 us it is back at zero.
        assert_eq!(
            m.color(986, 1000, t + Duration::from_micros(63)),
            Some(color::RED)
        );
        assert_eq!(
            m.color(986, 1000, t + Duration::from_micros(64)),
            Some(color::GREEN)
        );
    }

    #[test]
    fn packet_mode_counts_packets_and_start_colors_are_kept() {
        let t = Instant::now();
        // Three packets of burst (3 * 128 bytes): 384, 256, 128 and 0 are not negative.
        let mut p = single_rate((3, 7), (1, 31));
        p.meter_mode = 3;
        let m = meter(p, t);
        for _ in 0..4 {
            assert_eq!(m.color(9000, 9014, t), Some(color::GREEN));
        }
        assert_eq!(m.color(60, 74, t), Some(color::YELLOW));
        assert_eq!(m.color(60, 74, t), Some(color::RED));
        p.start_color = color::RED as u8;
        let red = meter(p, t);
        assert_eq!(red.color(60, 74, t), Some(color::RED));
        p.start_color = color::YELLOW as u8;
        let yellow = meter(p, t);
        assert_eq!(yellow.color(60, 74, t), Some(color::YELLOW));
    }

    #[test]
    fn an_inactive_or_invalid_meter_colors_nothing() {
        let t = Instant::now();
        let mut m = FlowMeter::new(false, 2, (0, 1), single_rate((1, 12), (1, 6)), t);
        assert_eq!(m.color(60, 74, t), None);
        m.active = true;
        m.set_params(MeterParams {
            valid: false,
            ..single_rate((1, 12), (1, 6))
        });
        assert_eq!(m.color(60, 74, t), None);
    }
}
