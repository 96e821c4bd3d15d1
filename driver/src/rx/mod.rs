//! Receiving: the [`RxQueue`] and its refill, the sinks a burst is received into, striding
//! rings, queues drawing from a shared ring, split (header/payload) queues, and completion
//! interrupts.

mod irq;
mod queue;
mod shared;
mod sink;
mod split;
mod striding;

pub use queue::RxQueue;
pub use shared::{SharedRingStats, SharedRxConfig, SharedRxQueue, SharedRxRing};
pub use sink::RxSink;
pub use split::{PayloadToken, SplitPacket, SplitRxQueue, SplitRxStats, SPLIT_HEADER_BYTES};
pub use striding::RxStriding;

pub(crate) use irq::CompletionInterrupt;
pub(crate) use queue::ReceiveQueueParts;
pub(crate) use shared::SharedRing;
pub(crate) use split::{SplitQueueParts, SPLIT_WQE_BYTES};
pub(crate) use striding::{StridingRx, WQE_BYTES};
