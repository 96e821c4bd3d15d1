//! Where a receive burst puts its packets: a `Vec<Mbuf>` or a [`PacketBurst`], both
//! [`RxSink`]s.

use crate::error::DriverError;
use crate::mem::{BurstEntry, Mbuf, Mempool, OffloadFlags, PacketBurst};

/// What a receive burst ([`crate::RxQueue::rx_burst`], [`crate::SharedRxQueue::rx_burst`])
/// puts its packets into: a `Vec<Mbuf>` (an [`Mbuf`] each, appended) or a [`PacketBurst`]
/// (kept by buffer index, appended up to its room; the burst must be empty or hold packets of
/// the queue's pool).
///
/// Sealed: a receive hands the sink one reference to a pool buffer per packet, by index; a
/// sink implemented outside the crate could keep the index without the reference, or drop the
/// reference twice. Only the driver's own types can promise to return each buffer once.
pub trait RxSink: sealed::Sink {}

impl RxSink for Vec<Mbuf> {}
impl RxSink for PacketBurst {}

mod sealed {
    use super::*;

    /// How a receive fills an [`RxSink`](super::RxSink) (not nameable outside the crate).
    pub trait Sink {
        /// Readies the sink for packets of `pool`; returns how many more it can take.
        fn bind(&mut self, pool: &Mempool) -> Result<usize, DriverError>;
        /// Takes the received packet of `len` bytes at `data_off` in `pool`'s buffer `index`
        /// (holding one reference to it), with `flags`.
        fn accept(
            &mut self,
            pool: &Mempool,
            index: u32,
            data_off: u32,
            len: u32,
            flags: OffloadFlags,
        );
        /// Takes a received packet already held as an [`Mbuf`] of the pool `bind` named.
        fn accept_mbuf(&mut self, m: Mbuf);
    }

    impl Sink for Vec<Mbuf> {
        #[inline(always)]
        fn bind(&mut self, _: &Mempool) -> Result<usize, DriverError> {
            Ok(usize::MAX)
        }
        #[inline(always)]
        fn accept(
            &mut self,
            pool: &Mempool,
            index: u32,
            data_off: u32,
            len: u32,
            flags: OffloadFlags,
        ) {
            self.push(pool.adopt_part(index, data_off, len, flags));
        }
        #[inline(always)]
        fn accept_mbuf(&mut self, m: Mbuf) {
            self.push(m);
        }
    }

    impl Sink for PacketBurst {
        /// Fails, with nothing changed, when the burst holds packets of another pool.
        #[inline(always)]
        fn bind(&mut self, pool: &Mempool) -> Result<usize, DriverError> {
            self.receive_from(pool)?;
            Ok(self.room())
        }
        #[inline(always)]
        fn accept(
            &mut self,
            _: &Mempool,
            index: u32,
            data_off: u32,
            len: u32,
            flags: OffloadFlags,
        ) {
            PacketBurst::accept(self, BurstEntry::new(index, data_off, len, flags));
        }
        #[inline(always)]
        fn accept_mbuf(&mut self, m: Mbuf) {
            // A ring's buffer: one segment, of the pool `bind` checked, with room left; were it
            // refused, dropping it would return the buffer to its pool.
            let pushed = self.push(m);
            debug_assert!(pushed.is_ok(), "a received buffer did not fit the burst");
        }
    }
}
