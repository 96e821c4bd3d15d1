//! Packet memory: the buffer pool, the [`Mbuf`] that carries one packet, the [`PacketBurst`]
//! that carries many by buffer index, and the quarantine that keeps what the device may still
//! touch.

mod buffer;
mod burst;
mod cache;
mod flags;
mod mbuf;
mod pool;
mod quarantine;

pub use buffer::HEADROOM;
pub use burst::{BurstPacket, PacketBurst};
pub use flags::OffloadFlags;
pub use mbuf::Mbuf;
pub use pool::Mempool;

pub(crate) use buffer::{BufferChain, PoolShared, RING_HOLD};
pub(crate) use burst::{release_entries, BurstEntry};
#[cfg(test)]
pub(crate) use cache::CACHE_SIZE;
pub(crate) use cache::{CacheSlots, Fill};
pub(crate) use quarantine::Quarantine;
