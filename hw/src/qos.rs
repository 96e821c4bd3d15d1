//! Quality of service: the QoS capability page (`qos_cap`, HCA capability type
//! [`cap_type::QOS`](crate::hca::cap_type::QOS)) and the packet pacing rate table that
//! SET_PP_RATE_LIMIT writes (Linux 6.12 `mlx5_ifc.h` `qos_cap`, `set_pp_rate_limit_in`,
//! `set_pp_rate_limit_context`).
//!
//! A send queue paced by the device names an entry of the rate table by its index; index 0 is
//! reserved for "unlimited" and is never written. mlx5_core's `mlx5_init_rl_table` reads the
//! table size and the rate range from the page at probe; `mlx5_rl_add_rate_raw` fills entry
//! 1 and up, and writes an entry's context back as zeros (rate 0) when it lets go of it.

use crate::layout;

layout! {
    /// The QoS capability page (`MLX5_CAP_QOS`), read by mlx5_core (`mlx5_init_rl_table`,
    /// `mlx5_qos_is_supported`, the e-switch's QoS) and by mlx5_ib's `pp_is_supported`.
    pub struct QosCap("qos_cap", 0x100) {
        /// Send queues may be paced through the rate table (SET_PP_RATE_LIMIT).
        packet_pacing: bool @ 0x0 [0x1],
        /// E-switch scheduling elements (vport rate limits and shares).
        esw_scheduling: bool @ 0x1 [0x1],
        /// A rate table entry's `burst_upper_bound` is honoured.
        packet_pacing_burst_bound: bool @ 0x5 [0x1],
        /// A rate table entry's `typical_packet_size` is honoured.
        packet_pacing_typical_size: bool @ 0x6 [0x1],
        /// NIC send queue scheduling elements (mlx5e's HTB offload).
        nic_sq_scheduling: bool @ 0x8 [0x1],
        /// SET_PP_RATE_LIMIT carries a user context's uid (DEVX-owned entries).
        packet_pacing_uid: bool @ 0xb [0x1],
        /// Highest rate an entry may hold, in kb/s.
        packet_pacing_max_rate: u32 @ 0x40 [0x20],
        /// Lowest non-zero rate an entry may hold, in kb/s.
        packet_pacing_min_rate: u32 @ 0x60 [0x20],
        /// Entries in the rate table, index 0 (unlimited) included.
        packet_pacing_rate_table_size: u16 @ 0x90 [0x10],
    }
}

layout! {
    /// One rate table entry as SET_PP_RATE_LIMIT carries it (and as mlx5dv_pp_alloc passes it
    /// through mlx5_ib untouched).
    pub struct SetPpRateLimitContext("set_pp_rate_limit_context", 0x30) {
        /// The rate, in kb/s (0 = the entry is unused).
        rate_limit: u32 @ 0x0 [0x20],
        /// Largest burst, in bytes (0 = the device's default).
        burst_upper_bound: u32 @ 0x20 [0x20],
        /// Typical packet size, in bytes (0 = the device's default).
        typical_packet_size: u16 @ 0x50 [0x10],
    }
}

layout! {
    /// SET_PP_RATE_LIMIT input: writes one entry of the rate table.
    pub struct SetPpRateLimitIn("set_pp_rate_limit_in", 0x40) {
        /// Command opcode: [`Opcode::SetPpRateLimit`](crate::cmd::Opcode::SetPpRateLimit).
        opcode: u16 @ 0x00 [0x10],
        /// User context that owns the entry (0 or 0xffff: shared by the function).
        uid: u16 @ 0x10 [0x10],
        /// Opcode modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The entry written, 1 to `packet_pacing_rate_table_size - 1`.
        rate_limit_index: u16 @ 0x50 [0x10],
    }
    nested {
        /// The entry's new value (all zero releases it).
        ctx: SetPpRateLimitContext @ 0x80,
    }
}

layout! {
    /// SET_PP_RATE_LIMIT output.
    pub struct SetPpRateLimitOut("set_pp_rate_limit_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x0 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
    }
}
