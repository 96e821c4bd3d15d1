//! A port's Q counter set: the device counts, per set, the frames it dropped because an RQ
//! naming the set had no posted receive WQE (`out_of_buffer`, DPDK's `imissed`). The device
//! keeps 32-bit counters that wrap; this widens them to 64 bits by reading often enough.

use super::cmd::input;
use super::device::Device;
use crate::backend::Backend;
use crate::error::DriverError;
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::counters::{
    AllocQCounterOut, DeallocQCounterIn, QueryQCounterIn, QueryQCounterOut,
};

/// One allocated counter set and the 64-bit total read from it so far.
#[derive(Debug)]
pub(crate) struct QCounterSet {
    id: u8,
    last_out_of_buffer: u32,
    total_out_of_buffer: u64,
}

impl QCounterSet {
    /// Allocates a set, or returns `None` when the device has none to give (`max_qp_cnt` 0):
    /// the port then runs without a drop counter rather than failing.
    pub(crate) fn alloc<B: Backend>(dev: &mut Device<B>) -> Result<Option<Self>, DriverError> {
        if dev.caps().max_qp_cnt() == 0 {
            return Ok(None);
        }
        let out = dev.exec(
            &input(Opcode::AllocQCounter, 0, 16),
            AllocQCounterOut::<&[u8]>::SIZE,
        )?;
        let id = AllocQCounterOut::new(&out[..])
            .map_err(|_| DriverError::Invalid("ALLOC_Q_COUNTER output too short".into()))?
            .counter_set_id();
        if id == 0 {
            return Err(DriverError::Invalid(
                "device returned Q counter set 0, which means \"none\"; the firmware is misbehaving"
                    .into(),
            ));
        }
        Ok(Some(Self {
            id,
            last_out_of_buffer: 0,
            total_out_of_buffer: 0,
        }))
    }

    /// The set's id, for `rqc.counter_set_id`.
    pub(crate) fn id(&self) -> u8 {
        self.id
    }

    /// Reads the set and returns the frames dropped for want of a receive WQE since allocation.
    /// Call it at least once per 2^32 drops so no wrap is missed.
    pub(crate) fn out_of_buffer<B: Backend>(
        &mut self,
        dev: &mut Device<B>,
    ) -> Result<u64, DriverError> {
        let mut cmd = input(Opcode::QueryQCounter, 0, QueryQCounterIn::<&[u8]>::SIZE);
        QueryQCounterIn::new(&mut cmd[..])
            .map(|mut c| {
                c.set_counter_set_id(self.id);
            })
            .ok();
        let out = dev.exec(&cmd, QueryQCounterOut::<&[u8]>::SIZE)?;
        let now = QueryQCounterOut::new(&out[..])
            .map_err(|_| DriverError::Invalid("QUERY_Q_COUNTER output too short".into()))?
            .out_of_buffer();
        self.total_out_of_buffer += u64::from(now.wrapping_sub(self.last_out_of_buffer));
        self.last_out_of_buffer = now;
        Ok(self.total_out_of_buffer)
    }

    /// Frees the set on the device (after every RQ naming it is destroyed).
    pub(crate) fn free<B: Backend>(self, dev: &mut Device<B>) -> Result<(), DriverError> {
        let mut cmd = input(Opcode::DeallocQCounter, 0, DeallocQCounterIn::<&[u8]>::SIZE);
        DeallocQCounterIn::new(&mut cmd[..])
            .map(|mut c| {
                c.set_counter_set_id(self.id);
            })
            .ok();
        dev.exec(&cmd, 16).map(|_| ())
    }
}
