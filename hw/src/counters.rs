//! Queue counters: a counter set the device keeps for the RQs and QPs that name it
//! (ALLOC_Q_COUNTER, QUERY_Q_COUNTER, DEALLOC_Q_COUNTER). `out_of_buffer` is the Ethernet
//! "imissed": frames dropped because no receive WQE was posted; the rest count the RC
//! transport's events.

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
    /// QUERY_Q_COUNTER output: the Ethernet receive drops, and the RC transport's counters of
    /// the QPs that name the set (requester and responder sides).
    pub struct QueryQCounterOut("query_q_counter_out", 0x100) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x0 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
        /// RDMA WRITE requests received by the QPs of the set (responder).
        rx_write_requests: u32 @ 0x80 [0x20],
        /// RDMA READ requests received (responder).
        rx_read_requests: u32 @ 0xc0 [0x20],
        /// Atomic requests received (responder).
        rx_atomic_requests: u32 @ 0x100 [0x20],
        /// Frames dropped because the RQ (or its RMP) had no posted WQE.
        out_of_buffer: u32 @ 0x180 [0x20],
        /// Request packets received out of sequence, past the expected PSN (responder).
        out_of_sequence: u32 @ 0x1c0 [0x20],
        /// Duplicate request packets received: a PSN already executed (responder).
        duplicate_request: u32 @ 0x200 [0x20],
        /// RNR NAKs received while the retry limit was not yet exceeded (requester).
        rnr_nak_retry_err: u32 @ 0x240 [0x20],
        /// PSN sequence error NAKs received while the retry limit was not yet exceeded
        /// (requester).
        packet_seq_err: u32 @ 0x280 [0x20],
        /// ACKs received past an RDMA READ or atomic whose response never came (implied
        /// NAKs; requester).
        implied_nak_seq_err: u32 @ 0x2c0 [0x20],
        /// ACK timer expiries while the retry limit was not yet exceeded (requester).
        local_ack_timeout_err: u32 @ 0x300 [0x20],
        /// Receive completions with a local length error.
        resp_local_length_error: u32 @ 0x3c0 [0x20],
        /// Send completions with a local length error.
        req_local_length_error: u32 @ 0x3e0 [0x20],
        /// Receive completions with a local protection error.
        resp_local_protection: u32 @ 0x440 [0x20],
        /// Send completions with a local protection error.
        req_local_protection: u32 @ 0x460 [0x20],
        /// Receive completions in error, flushes excluded.
        resp_cqe_error: u32 @ 0x480 [0x20],
        /// Send completions in error, flushes excluded.
        req_cqe_error: u32 @ 0x4a0 [0x20],
        /// Invalid request NAKs received (requester).
        req_remote_invalid_request: u32 @ 0x500 [0x20],
        /// Invalid request NAKs sent (responder).
        resp_remote_invalid_request: u32 @ 0x520 [0x20],
        /// Remote access error NAKs received (requester).
        req_remote_access_errors: u32 @ 0x540 [0x20],
        /// Remote access error NAKs sent (responder).
        resp_remote_access_errors: u32 @ 0x560 [0x20],
        /// Remote operational error NAKs received (requester).
        req_remote_operation_errors: u32 @ 0x580 [0x20],
        /// Send WQEs failed for retries exceeded after ACK timeouts (requester).
        req_transport_retries_exceeded: u32 @ 0x5a0 [0x20],
        /// Completions the CQ had no room for.
        cq_overflow: u32 @ 0x5c0 [0x20],
        /// Receive completions flushed (the QP in error).
        resp_cqe_flush_error: u32 @ 0x5e0 [0x20],
        /// Send completions flushed (the QP in error).
        req_cqe_flush_error: u32 @ 0x600 [0x20],
    }
}
