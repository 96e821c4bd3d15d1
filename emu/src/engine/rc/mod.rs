//! The RoCE v2 reliable-connection (RC) transport: the requester sends WQEs as packets and
//! retires them by ACKs and responses, retransmitting on timeouts and NAKs; the responder
//! checks PSNs, scatters SENDs into receive WQEs, lands WRITEs and answers READs and atomics
//! through remote keys.
//!
//! The rooms: [`packet`] builds and parses frames; [`requester`] segments WQEs into packets;
//! [`requester_ack`] retires them and writes their completions; [`retransmit`] runs the
//! timers; [`responder`] takes received frames in PSN order; [`responder_recv`] owns the
//! receive WQEs; [`responder_read_atomic`] answers READs and atomics.

pub(crate) mod packet;
pub(crate) mod requester;
pub(crate) mod requester_ack;
pub(crate) mod responder;
pub(crate) mod responder_read_atomic;
pub(crate) mod responder_recv;
pub(crate) mod retransmit;

pub(crate) use requester::{doorbell, RcScratch};
pub(crate) use requester_ack::flush_on_error;
pub(crate) use responder::receive;
pub(crate) use retransmit::run_timers;
