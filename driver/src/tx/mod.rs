//! Sending: the [`TxQueue`], WQE composition, doorbell and BlueFlame, the buffers in flight,
//! and the sources a burst is sent from.

mod gather;
mod inflight;
mod lso;
mod queue;
mod source;

pub use lso::{TxRefusal, MAX_TSO_HEADERS};
pub use queue::{InlineMode, TxQueue, TxSource};

pub(crate) use gather::{GatheredFrame, KeyedStretch};
pub(crate) use queue::SendQueueParts;
