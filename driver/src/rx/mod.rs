//! Receiving: the [`RxQueue`] and its refill, the sinks a burst is received into, striding
//! rings, queues drawing from a shared ring, and completion interrupts.

mod irq;
mod queue;
mod shared;
mod sink;
mod striding;

pub use queue::RxQueue;
pub use shared::{SharedRingStats, SharedRxConfig, SharedRxQueue, SharedRxRing};
pub use sink::RxSink;
pub use striding::RxStriding;

pub(crate) use irq::CompletionInterrupt;
pub(crate) use queue::ReceiveQueueParts;
pub(crate) use shared::SharedRing;
pub(crate) use striding::{StridingRx, WQE_BYTES};
