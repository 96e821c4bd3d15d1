//! Completion and event queues, driver side: the CQ ring software reads by owner bit, CQE
//! decoding, compressed sessions, and the event queue ring.

mod compressed;
mod cqe;
mod eq;
mod ring;

pub use cqe::Cqe;
pub use eq::Event;

pub(crate) use cqe::rx_flags;
pub(crate) use eq::EventQueue;
pub(crate) use ring::CqRing;
