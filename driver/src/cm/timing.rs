//! The times ib_cm and rdma_cm compute (`drivers/infiniband/core/cm.c`, `cma.c`). IBTA encodes a
//! time `t` as 4.096 us x 2^t.

/// `cm_convert_to_ms`: 4.096 us x 2^t, approximated as 2^(t-8) ms (at least 1 ms).
pub const fn convert_to_ms(t: u8) -> u64 {
    let shift = t.saturating_sub(8);
    // t is a 5-bit field on the wire; past 31 the shift is clamped so it cannot overflow.
    1u64 << (if shift > 40 { 40 } else { shift })
}

/// `cm_ack_timeout`: the local ACK timeout for a path of packet lifetime `packet_life_time`
/// to a CA whose ACK delay is `ca_ack_delay`: 4.096 us x 2^ack_timeout covers the ACK delay
/// plus twice the packet lifetime; rounded up only when the smaller term is within 50%.
pub const fn ack_timeout(ca_ack_delay: u8, packet_life_time: u8) -> u8 {
    let ca = ca_ack_delay as i32;
    let mut t = packet_life_time as i32 + 1;
    if t >= ca {
        t += (ca >= t - 1) as i32;
    } else {
        t = ca + (t >= ca - 1) as i32;
    }
    if t > 31 {
        31
    } else {
        t as u8
    }
}

/// `CMA_CM_RESPONSE_TIMEOUT` (upstream `cma.c`): the CM response timeouts rdma_cm puts in a
/// REQ (4.096 us x 2^20, about 4 s).
pub const CM_RESPONSE_TIMEOUT: u8 = 20;
/// `CMA_MAX_CM_RETRIES`: retries of a REQ, REP or DREQ.
pub const MAX_CM_RETRIES: u8 = 15;
/// `CMA_IBOE_PACKET_LIFETIME`: the packet lifetime rdma_cm assumes on RoCE.
pub const IBOE_PACKET_LIFETIME: u8 = 16;
/// The service timeout rdma_cm's delayed MRA carries (`CMA_CM_MRA_SETTING` =
/// `IB_CM_MRA_FLAG_DELAY | 24`; the flag is not part of the 5-bit field).
pub const MRA_SERVICE_TIMEOUT: u8 = 24;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cm_convert_to_ms_as_linux() {
        assert_eq!(convert_to_ms(0), 1);
        assert_eq!(convert_to_ms(8), 1);
        assert_eq!(convert_to_ms(16), 256);
        assert_eq!(convert_to_ms(20), 4096);
        assert_eq!(convert_to_ms(22), 16384);
        // The REQ timeout of the reference: 2 * 256 + 4096 ms.
        assert_eq!(2 * convert_to_ms(16) + convert_to_ms(20), 4608);
    }

    #[test]
    fn cm_ack_timeout_as_linux() {
        // life 16 -> 17; ack delay 16 is within one of 17 -> 18.
        assert_eq!(ack_timeout(16, 16), 18);
        // ack delay far below: stays at life + 1.
        assert_eq!(ack_timeout(0, 16), 17);
        // ack delay far above: the ack delay.
        assert_eq!(ack_timeout(25, 16), 25);
        // ack delay one above life + 1: rounded up.
        assert_eq!(ack_timeout(18, 16), 19);
        assert_eq!(ack_timeout(31, 31), 31);
    }
}
