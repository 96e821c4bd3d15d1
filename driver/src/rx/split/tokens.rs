//! The payload buffers of a split receive queue: fixed-size pieces of a dmabuf range, each
//! free, posted in a receive WQE, or lent to the application as a [`PayloadToken`] until it is
//! given back. A buffer is posted again only after its token came back; a token given back
//! twice, or to another queue, is refused with nothing changed.

use crate::error::DriverError;

/// A received payload in dmabuf memory, lent to the application (devmem's `dmabuf_cmsg`):
/// where it is in the split queue's dmabuf range and how long it is. Give it back with
/// [`crate::SplitRxQueue::give_back`]; until then its buffer is not posted again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PayloadToken {
    queue: u32,
    buffer: u32,
    lap: u32,
    len: u32,
    offset: u64,
}

impl PayloadToken {
    /// Byte offset of the payload in the queue's dmabuf range
    /// ([`crate::SplitRxConfig::payload_memory`]).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Payload bytes at [`PayloadToken::offset`] (1 up to the queue's payload buffer size).
    pub fn len(&self) -> u32 {
        self.len
    }

    /// Always false: a token is lent only for a payload of at least one byte.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The payload buffer's number in the queue's dmabuf range (offset / buffer size).
    pub fn buffer(&self) -> u32 {
        self.buffer
    }
}

/// A buffer's state. `Lent` carries the lap the token was lent in.
#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Free,
    Posted,
    Lent,
    /// Being given back by the call in progress (undone if a later token is refused).
    Returning,
}

/// Counts of a split queue's tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TokenCounts {
    pub(super) outstanding: u64,
    pub(super) highest: u64,
    pub(super) lent: u64,
    pub(super) given_back: u64,
}

/// The payload buffers of one split queue.
pub(crate) struct PayloadBuffers {
    queue: u32,
    buffer_bytes: u32,
    state: Box<[State]>,
    lap: Box<[u32]>,
    /// Free buffers, a stack (capacity: every buffer; never grows).
    free: Vec<u32>,
    counts: TokenCounts,
}

impl PayloadBuffers {
    /// `count` buffers of `buffer_bytes` each, all free, for queue `queue` (its token tag).
    pub(crate) fn new(queue: u32, count: u32, buffer_bytes: u32) -> Self {
        Self {
            queue,
            buffer_bytes,
            state: vec![State::Free; count as usize].into_boxed_slice(),
            lap: vec![0; count as usize].into_boxed_slice(),
            // Lowest first out, so a fresh queue posts buffers in offset order.
            free: (0..count).rev().collect(),
            counts: TokenCounts::default(),
        }
    }

    /// Buffers free to post.
    #[inline]
    pub(crate) fn free(&self) -> usize {
        self.free.len()
    }

    /// Buffer size in bytes.
    #[inline]
    pub(crate) fn buffer_bytes(&self) -> u32 {
        self.buffer_bytes
    }

    /// Offset of buffer `buffer` in the range.
    #[inline]
    pub(crate) fn offset(&self, buffer: u32) -> u64 {
        u64::from(buffer) * u64::from(self.buffer_bytes)
    }

    /// Takes a free buffer to post.
    #[inline]
    pub(crate) fn take(&mut self) -> Option<u32> {
        let buffer = self.free.pop()?;
        self.state[buffer as usize] = State::Posted;
        Some(buffer)
    }

    /// A posted buffer the device did not write (the frame ended in the header buffer, or the
    /// queue was flushed) is free again.
    #[inline]
    pub(crate) fn unpost(&mut self, buffer: u32) {
        if let Some(s @ State::Posted) = self.state.get_mut(buffer as usize) {
            *s = State::Free;
            self.free.push(buffer);
        }
    }

    /// Lends posted buffer `buffer`, holding `len` payload bytes, as a token.
    #[inline]
    pub(crate) fn lend(&mut self, buffer: u32, len: u32) -> PayloadToken {
        let i = buffer as usize;
        self.state[i] = State::Lent;
        self.lap[i] = self.lap[i].wrapping_add(1);
        let c = &mut self.counts;
        c.outstanding += 1;
        c.lent += 1;
        c.highest = c.highest.max(c.outstanding);
        PayloadToken {
            queue: self.queue,
            buffer,
            lap: self.lap[i],
            len,
            offset: self.offset(buffer),
        }
    }

    /// Gives `tokens` back: each buffer becomes free to post. All or nothing: a token this
    /// queue did not lend, or lent and already got back (also twice in `tokens`), refuses the
    /// whole call and changes nothing.
    ///
    /// # Errors
    ///
    /// [`DriverError::BadToken`] naming the first refused token.
    pub(crate) fn give_back(&mut self, tokens: &[PayloadToken]) -> Result<usize, DriverError> {
        for (at, t) in tokens.iter().enumerate() {
            let why = if t.queue != self.queue {
                Some("lent by another queue")
            } else {
                match self.state.get(t.buffer as usize) {
                    None => Some("names no buffer of this queue"),
                    Some(State::Lent) if self.lap[t.buffer as usize] == t.lap => None,
                    Some(State::Returning) => Some("given twice in one call"),
                    Some(_) => Some("already given back"),
                }
            };
            if let Some(why) = why {
                // Undo the marks of the tokens before this one.
                for done in &tokens[..at] {
                    self.state[done.buffer as usize] = State::Lent;
                }
                return Err(DriverError::BadToken {
                    queue: t.queue,
                    buffer: t.buffer,
                    why,
                });
            }
            self.state[t.buffer as usize] = State::Returning;
        }
        for t in tokens {
            self.state[t.buffer as usize] = State::Free;
            self.free.push(t.buffer);
        }
        let n = tokens.len() as u64;
        self.counts.outstanding -= n;
        self.counts.given_back += n;
        Ok(tokens.len())
    }

    /// The token counts.
    pub(crate) fn counts(&self) -> TokenCounts {
        self.counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_comes_back_once_and_only_to_its_queue() {
        let mut a = PayloadBuffers::new(1, 4, 4096);
        let mut b = PayloadBuffers::new(2, 4, 4096);
        let (x, y) = (a.take().unwrap(), a.take().unwrap());
        assert_eq!((x, y), (0, 1));
        let tx = a.lend(x, 100);
        let ty = a.lend(y, 200);
        assert_eq!((tx.offset(), ty.offset()), (0, 4096));
        assert_eq!(a.counts().outstanding, 2);
        assert!(matches!(
            b.give_back(&[tx]),
            Err(DriverError::BadToken { queue: 1, .. })
        ));
        // A duplicate in one call is refused and leaves both lent.
        assert!(a.give_back(&[tx, ty, tx]).is_err());
        assert_eq!(a.counts().outstanding, 2);
        assert_eq!(a.free(), 2);
        assert_eq!(a.give_back(&[tx, ty]).unwrap(), 2);
        assert_eq!(a.free(), 4);
        let c = a.counts();
        assert_eq!((c.outstanding, c.highest, c.given_back), (0, 2, 2));
        assert!(matches!(
            a.give_back(&[ty]),
            Err(DriverError::BadToken {
                why: "already given back",
                ..
            })
        ));
        // Lent again: the old token of the same buffer is stale.
        let again = a.take().unwrap();
        let fresh = a.lend(again, 10);
        let stale = if again == tx.buffer() { tx } else { ty };
        assert_eq!(fresh.buffer(), stale.buffer());
        assert!(a.give_back(&[stale]).is_err());
        assert_eq!(a.give_back(&[fresh]).unwrap(), 1);
    }
}
