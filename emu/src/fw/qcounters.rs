//! Q counter sets: ALLOC_Q_COUNTER, QUERY_Q_COUNTER, DEALLOC_Q_COUNTER. An RQ names its set in
//! `rqc.counter_set_id`; the receive engine counts `out_of_buffer` there.

use super::transport::{in_use, table_full};
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
    let set = core
        .res
        .q_counters
        .get(id)
        .ok_or(bad_res("no such Q counter set"))?;
    if set.rq_users > 0 {
        return Err(in_use("Q counter set still named by an RQ"));
    }
    core.res.q_counters.remove(id);
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
    output_as!(QueryQCounterOut<&mut [u8]>, output).set_out_of_buffer(set.out_of_buffer);
    if cmd.clear() {
        set.out_of_buffer = 0;
    }
    Ok(())
}

/// Checks that an RQ context's counter set exists (0 = none) and takes a reference on it.
pub(crate) fn attach(core: &mut Core, id: u32) -> CmdResult {
    if id == 0 {
        return Ok(());
    }
    let set = core
        .res
        .q_counters
        .get_mut(id)
        .ok_or(bad_res("RQ's Q counter set does not exist"))?;
    set.rq_users += 1;
    Ok(())
}

/// Drops an RQ's reference on its counter set.
pub(crate) fn detach(core: &mut Core, id: u32) {
    if let Some(set) = core.res.q_counters.get_mut(id) {
        set.rq_users = set.rq_users.saturating_sub(1);
    }
}
