//! Q counter sets: ALLOC_Q_COUNTER, QUERY_Q_COUNTER, DEALLOC_Q_COUNTER. An RQ names its set in
//! `rqc.counter_set_id`, an RC QP in `qpc.counter_set_id`; the receive engine counts
//! `out_of_buffer` there, the RC transport its own counters.

use super::table_full;
use super::{bad_res, input_as, output_as, CmdResult, Core};
use crate::objects::QCounter;
use cxdirect_hw::counters::{
    AllocQCounterOut, DeallocQCounterIn, QueryQCounterIn, QueryQCounterOut,
};

pub(crate) fn alloc_q_counter(core: &mut Core, output: &mut [u8]) -> CmdResult {
    let id = core
        .res
        .q_counters
        .insert(QCounter::default())
        .ok_or(table_full("no free Q counter set"))?;
    // Table numbers start at 1 and stay under MAX_Q_COUNTERS, so they fit the 8-bit field.
    output_as!(AllocQCounterOut<&mut [u8]>, output).set_counter_set_id(id as u8);
    Ok(())
}

pub(crate) fn dealloc_q_counter(core: &mut Core, input: &[u8]) -> CmdResult {
    let id = u32::from(input_as!(DeallocQCounterIn<&[u8]>, input).counter_set_id());
    if core.res.q_counters.remove(id).is_none() {
        return Err(bad_res("no such Q counter set"));
    }
    // Linux frees a set that a QP still names: at a QP's destruction the kernel unbinds it
    // from its counter first (`rdma_counter_unbind_qp`, forced), and mlx5_ib sends nothing for
    // a QP neither in RESET nor in RTS (`mlx5_ib_qp_set_counter`), then frees the counter
    // (`mlx5_ib_counter_dealloc`) before DESTROY_QP. Those QPs (and RQs) count nowhere from
    // now on, never in a set allocated later under the number. The QPs and RQs naming a set
    // are found by their own `counter_set` (a rare command, so a scan, not a count kept in
    // step with every QP and RQ command).
    for (_, qp) in core.res.qps.iter_mut() {
        if qp.counter_set == id {
            qp.counter_set = 0;
        }
    }
    for (_, rq) in core.res.rqs.iter_mut() {
        if rq.counter_set == id {
            rq.counter_set = 0;
        }
    }
    Ok(())
}

pub(crate) fn query_q_counter(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let cmd = input_as!(QueryQCounterIn<&[u8]>, input);
    let id = u32::from(cmd.counter_set_id());
    let set = core
        .res
        .q_counters
        .get_mut(id)
        .ok_or(bad_res("no such Q counter set"))?;
    let rc = set.rc;
    output_as!(QueryQCounterOut<&mut [u8]>, output)
        .set_out_of_buffer(set.out_of_buffer)
        .set_rx_write_requests(rc.rx_write_requests)
        .set_rx_read_requests(rc.rx_read_requests)
        .set_rx_atomic_requests(rc.rx_atomic_requests)
        .set_out_of_sequence(rc.out_of_sequence)
        .set_duplicate_request(rc.duplicate_request)
        .set_rnr_nak_retry_err(rc.rnr_nak_retry_err)
        .set_packet_seq_err(rc.packet_seq_err)
        .set_implied_nak_seq_err(rc.implied_nak_seq_err)
        .set_local_ack_timeout_err(rc.local_ack_timeout_err)
        .set_resp_local_length_error(rc.resp_local_length_error)
        .set_req_local_length_error(rc.req_local_length_error)
        .set_resp_local_protection(rc.resp_local_protection)
        .set_req_local_protection(rc.req_local_protection)
        .set_resp_cqe_error(rc.resp_cqe_error)
        .set_req_cqe_error(rc.req_cqe_error)
        .set_req_remote_invalid_request(rc.req_remote_invalid_request)
        .set_resp_remote_invalid_request(rc.resp_remote_invalid_request)
        .set_req_remote_access_errors(rc.req_remote_access_errors)
        .set_resp_remote_access_errors(rc.resp_remote_access_errors)
        .set_req_remote_operation_errors(rc.req_remote_operation_errors)
        .set_req_transport_retries_exceeded(rc.req_transport_retries_exceeded)
        .set_resp_cqe_flush_error(rc.resp_cqe_flush_error)
        .set_req_cqe_flush_error(rc.req_cqe_flush_error);
    if cmd.clear() {
        set.out_of_buffer = 0;
        set.rc = Default::default();
    }
    Ok(())
}

/// Checks that the counter set an RQ or QP context names exists (0 = none).
pub(crate) fn check_named(core: &Core, id: u32) -> CmdResult {
    if id != 0 && core.res.q_counters.get(id).is_none() {
        return Err(bad_res("the Q counter set named does not exist"));
    }
    Ok(())
}
