//! Where each payload buffer is, from the receiver's side: the device's (posted, or free for
//! the caller to post), held in the out-of-order store, or lent to the application under a
//! token. Each buffer is in exactly one place; a buffer moves back to the device only through
//! [`Buffers::release`], reported to the caller, so none is lost and none is handed out twice.
//!
//! A token is the buffer number in its low [`BUFFER_BITS`] bits and the buffer's lap (how many
//! times it was lent, modulo 2^11) above them, so a token kept after its buffer was given back
//! and lent again is refused. Tokens fit in 31 bits, as Linux's do (`xa_limit_31b`).

use super::error::TcpRxError;

/// Bits of a token that name the buffer; at most 2^20 buffers.
pub const BUFFER_BITS: u32 = 20;
const LAP_MASK: u32 = (1 << (31 - BUFFER_BITS)) - 1;

/// Where a buffer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Place {
    /// The device's: posted in a receive WQE or about to be.
    Device,
    /// In the out-of-order store.
    Held,
    /// Lent to the application under a token.
    Lent,
}

/// The buffers of one receiver (sized at creation; nothing allocates afterwards).
pub(super) struct Buffers {
    place: Box<[Place]>,
    lap: Box<[u16]>,
    buffer_bytes: u32,
    device: u32,
    lent: u32,
}

impl Buffers {
    pub(super) fn new(count: u32, buffer_bytes: u32) -> Self {
        Self {
            place: vec![Place::Device; count as usize].into_boxed_slice(),
            lap: vec![0; count as usize].into_boxed_slice(),
            buffer_bytes,
            device: count,
            lent: 0,
        }
    }

    pub(super) fn count(&self) -> u32 {
        self.place.len() as u32
    }

    /// Buffers the device has (or will have once the caller posts them).
    pub(super) fn on_device(&self) -> u32 {
        self.device
    }

    /// Buffers lent under tokens.
    pub(super) fn lent(&self) -> u32 {
        self.lent
    }

    /// Checks that `buffer` is the device's and `[offset, offset + len)` lies inside it.
    pub(super) fn check_posted(
        &self,
        buffer: u32,
        offset: u64,
        len: u32,
    ) -> Result<(), TcpRxError> {
        let Some(place) = self.place.get(buffer as usize) else {
            return Err(TcpRxError::NoSuchBuffer {
                buffer,
                count: self.count(),
            });
        };
        if *place != Place::Device {
            return Err(TcpRxError::BufferNotPosted { buffer });
        }
        let start = u64::from(buffer) * u64::from(self.buffer_bytes);
        let end = start + u64::from(self.buffer_bytes);
        let inside =
            offset >= start && offset.checked_add(u64::from(len)).is_some_and(|e| e <= end);
        if !inside {
            return Err(TcpRxError::OutsideBuffer {
                buffer,
                offset,
                len,
            });
        }
        Ok(())
    }

    /// A device buffer (checked) goes into the out-of-order store.
    pub(super) fn hold(&mut self, buffer: u32) {
        debug_assert_eq!(self.place[buffer as usize], Place::Device);
        self.place[buffer as usize] = Place::Held;
        self.device -= 1;
    }

    /// A device or held buffer is lent: returns its token.
    pub(super) fn lend(&mut self, buffer: u32) -> u32 {
        let b = buffer as usize;
        if self.place[b] == Place::Device {
            self.device -= 1;
        }
        debug_assert_ne!(self.place[b], Place::Lent);
        self.place[b] = Place::Lent;
        self.lent += 1;
        let lap = (u32::from(self.lap[b]) + 1) & LAP_MASK;
        self.lap[b] = lap as u16;
        (lap << BUFFER_BITS) | buffer
    }

    /// A held or lent buffer goes back to the device (the caller re-posts it).
    pub(super) fn release(&mut self, buffer: u32) {
        let b = buffer as usize;
        match self.place[b] {
            Place::Device => return,
            Place::Lent => self.lent -= 1,
            Place::Held => {}
        }
        self.place[b] = Place::Device;
        self.device += 1;
    }

    /// The buffer `token` names, if it is lent in the token's lap.
    pub(super) fn lent_buffer(&self, token: u32) -> Option<u32> {
        let buffer = token & ((1 << BUFFER_BITS) - 1);
        let lap = token >> BUFFER_BITS;
        let b = buffer as usize;
        (token >> 31 == 0
            && self.place.get(b) == Some(&Place::Lent)
            && u32::from(self.lap[b]) == lap)
            .then_some(buffer)
    }

    /// Where `buffer` is (tests).
    #[cfg(test)]
    pub(super) fn place(&self, buffer: u32) -> Place {
        self.place[buffer as usize]
    }
}
