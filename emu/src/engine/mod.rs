//! The queue engines: what the device does when a doorbell rings or a frame arrives — fetch
//! and execute send WQEs, steer and scatter received frames, write CQEs and EQEs, raise MSI-X.
//! Every value read from host memory (WQEs, doorbell records) is checked before use; a bad one
//! becomes an error completion, never a model panic.
//!
//! The engines read the firmware's core and object tables; the firmware reaches the engines
//! only through [`EngineRequests`], implemented here.

pub(crate) mod address;
pub(crate) mod cq;
pub(crate) mod eq;
pub(crate) mod fetch;
pub(crate) mod gather;
pub(crate) mod link;
pub(crate) mod loopback;
pub(crate) mod lso;
pub(crate) mod pacing;
pub(crate) mod rc;
pub(crate) mod roce;
pub(crate) mod rq;
pub(crate) mod send_counter;
pub(crate) mod sq;
pub(crate) mod sq_flush;
pub(crate) mod sq_umr;
pub(crate) mod striding;
pub(crate) mod striding_list;
pub(crate) mod ud;
pub(crate) mod umr;
pub(crate) mod vlan_strip;
pub(crate) mod window;

use crate::function::{Core, EngineRequests};
use crate::objects::WorkQueue;
use cxdirect_hw::eqe::EventType;

/// The firmware's requests, answered by the engines that own the work.
impl EngineRequests for Core {
    fn post_async_event(&mut self, event: EventType, sub_type: u8, data: &[u8; 28]) {
        eq::post_async_event(self, event, sub_type, data);
    }

    fn flush_completions(&mut self) {
        cq::flush_all(self);
    }

    fn land_late_writes(&mut self, rqn: Option<u32>) -> usize {
        rq::land_late_writes(self, rqn)
    }

    fn rmp_rqs_enter_error(&mut self, rmpn: u32) {
        rq::rmp_rqs_enter_error(self, rmpn);
    }

    fn posted_wqes(&self, wq: &WorkQueue) -> Option<u16> {
        rq::posted(self, wq)
    }

    fn page_fault_resume(&mut self, pf_type: u8, wq: u32, token: u32, error: bool) -> bool {
        if ud::page_fault::owns(self, token) {
            return ud::resume_page_fault(self, pf_type, wq, token, error).is_ok();
        }
        rc::resume_page_fault(self, pf_type, wq, token, error).is_ok()
    }
}
