//! Sending: the [`TxQueue`], WQE composition, doorbell and BlueFlame, the buffers in flight,
//! and the sources a burst is sent from.

mod inflight;
mod queue;
mod source;

pub use queue::{InlineMode, TxQueue, TxSource};

pub(crate) use queue::SendQueueParts;
