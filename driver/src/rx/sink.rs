//! Where a receive burst puts its packets.

use crate::mem::{BurstEntry, Mbuf, Mempool, OffloadFlags, PacketBurst};

/// Where a receive burst puts its packets: an [`Mbuf`] each onto a `Vec`, or by buffer index
/// into a [`PacketBurst`] (bound to the queue's pool beforehand).
pub(crate) trait RxSink {
    /// Takes the received packet of `len` bytes at `data_off` in `pool`'s buffer `index`
    /// (holding one reference to it), with `flags`.
    fn accept(&mut self, pool: &Mempool, index: u32, data_off: u32, len: u32, flags: OffloadFlags);
}

impl RxSink for Vec<Mbuf> {
    #[inline(always)]
    fn accept(&mut self, pool: &Mempool, index: u32, data_off: u32, len: u32, flags: OffloadFlags) {
        self.push(pool.adopt_part(index, data_off, len, flags));
    }
}

impl RxSink for PacketBurst {
    #[inline(always)]
    fn accept(&mut self, _: &Mempool, index: u32, data_off: u32, len: u32, flags: OffloadFlags) {
        PacketBurst::accept(self, BurstEntry::new(index, data_off, len, flags));
    }
}
