//! A port's traffic classes for tests that send in one, set through the driver as Linux's
//! `dcb ets` and `dcb maxrate` set them through mlx5e (QTCT and QETCR).

use cxdirect::Device;
use cxdirect_apps::emulated::EmuBackend;

/// The rate [`limit_priority`] gives a class: one 100 Mb/s unit, in bytes a second.
pub const LIMIT_BYTES_PER_SECOND: f64 = 12.5e6;

/// Puts priority `prio` in class `tc` and limits class `tc` to 100 Mb/s.
pub fn limit_priority(dev: &mut Device<EmuBackend>, prio: u8, tc: u8) {
    dev.set_priority_class(prio, tc).expect("QTCT");
    dev.set_class_rate_limit(tc, Some(100)).expect("QETCR");
}
