//! What a queue pair's capabilities may ask of the driver and the device.

use super::*;

/// Checks `caps` against the driver's and the device's limits; returns the largest WQE in
/// 64-byte blocks.
pub(super) fn validate<B: Backend>(
    dev: &Device<B>,
    caps: &QpCaps,
    with_srq: bool,
    transport: Transport,
) -> Result<u32, DriverError> {
    if caps.max_send_wr == 0 {
        return Err(DriverError::config("max_send_wr", 0u64, "at least 1"));
    }
    // A datagram segment takes the room of one more segment than RC's remote address and
    // atomic segments.
    let spare = (transport.header_ds() - 3) * WQE_DS as u32;
    let max_sge = MAX_SEND_SGE - spare / WQE_DS as u32;
    let max_inline = MAX_INLINE - spare;
    if caps.max_send_sge > max_sge {
        return Err(DriverError::config(
            "max_send_sge",
            caps.max_send_sge,
            format!("at most {max_sge}"),
        ));
    }
    if caps.max_inline_data > max_inline {
        return Err(DriverError::config(
            "max_inline_data",
            caps.max_inline_data,
            format!("at most {max_inline} bytes"),
        ));
    }
    if !with_srq && !(1..=MAX_RECV_SGE).contains(&caps.max_recv_sge) {
        return Err(DriverError::config(
            "max_recv_sge",
            caps.max_recv_sge,
            format!("1 to {MAX_RECV_SGE}"),
        ));
    }
    if !with_srq && caps.max_recv_wr == 0 {
        return Err(DriverError::config("max_recv_wr", 0u64, "at least 1"));
    }
    // Control, remote address and atomic (or datagram) segments, then the data.
    let data_ds = caps
        .max_send_sge
        .max((4 + caps.max_inline_data).div_ceil(16))
        .max(1);
    let bytes = (transport.header_ds() + data_ds) * WQE_DS as u32;
    let max_wqe = u32::from(dev.caps().max_wqe_sz_sq());
    if max_wqe != 0 && bytes > max_wqe {
        return Err(DriverError::config(
            "max_send_sge",
            caps.max_send_sge,
            format!("a WQE of {bytes} bytes passes the device's {max_wqe}"),
        ));
    }
    Ok(bytes.div_ceil(WQE_BB as u32))
}
