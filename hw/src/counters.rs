//! Queue counters: a counter set the device keeps for the RQs that name it (ALLOC_Q_COUNTER,
//! QUERY_Q_COUNTER, DEALLOC_Q_COUNTER). `out_of_buffer` is the Ethernet "imissed": frames dropped
//! because no receive WQE was posted.

use crate::layout;

layout! {
    /// ALLOC_Q_COUNTER output.
    pub struct AllocQCounterOut("alloc_q_counter_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x0 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
        /// The new counter set; name it in an RQ context's `counter_set_id`.
        counter_set_id: u8 @ 0x58 [0x8],
    }
}

layout! {
    /// DEALLOC_Q_COUNTER input.
    pub struct DeallocQCounterIn("dealloc_q_counter_in", 0x10) {
        /// Command opcode: [`Opcode::DeallocQCounter`](crate::cmd::Opcode::DeallocQCounter).
        opcode: u16 @ 0x0 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The counter set to free.
        counter_set_id: u8 @ 0x58 [0x8],
    }
}

layout! {
    /// QUERY_Q_COUNTER input.
    pub struct QueryQCounterIn("query_q_counter_in", 0x20) {
        /// Command opcode: [`Opcode::QueryQCounter`](crate::cmd::Opcode::QueryQCounter).
        opcode: u16 @ 0x0 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// Zero the counters after reading them.
        clear: bool @ 0xc0 [0x1],
        /// The counter set to read.
        counter_set_id: u8 @ 0xf8 [0x8],
    }
}

layout! {
    /// QUERY_Q_COUNTER output (the Ethernet-relevant counters; the rest are RDMA's).
    pub struct QueryQCounterOut("query_q_counter_out", 0x100) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x0 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
        /// Frames dropped because the RQ (or its RMP) had no posted WQE.
        out_of_buffer: u32 @ 0x180 [0x20],
        /// Receive completions with a local length error.
        resp_local_length_error: u32 @ 0x3c0 [0x20],
        /// Receive completions with a local protection error.
        resp_local_protection: u32 @ 0x440 [0x20],
        /// Completions the CQ had no room for.
        cq_overflow: u32 @ 0x5c0 [0x20],
    }
}
