//! The queue engines: what the device does when a doorbell rings or a frame arrives — fetch
//! and execute send WQEs, steer and scatter received frames, write CQEs and EQEs, raise MSI-X.
//! Every value read from host memory (WQEs, doorbell records) is checked before use; a bad one
//! becomes an error completion, never a model panic.

pub(crate) mod cq;
pub(crate) mod eq;
pub(crate) mod fetch;
pub(crate) mod rq;
pub(crate) mod sq;
pub(crate) mod striding;
