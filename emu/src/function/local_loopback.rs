//! The queue of frames a function sent to itself (see `engine::loopback` for which frames loop
//! and when the queue is drained): the function's state, reset with it.

use std::collections::VecDeque;

/// What sent a frame the function looped to itself: the receive path's loopback checks
/// compare it with the receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sender {
    /// An SQ whose TIS is of this transport domain (Ethernet): a TIR of the same domain takes
    /// the frame only as self loopback.
    Sq(u32),
    /// The RoCE QP of this number: a multicast datagram is not delivered back to it when it
    /// blocks multicast loopback.
    Qp(u32),
}

/// Frames looped inside the device and not yet received, each with its sender when known,
/// with their buffers kept for reuse.
#[derive(Debug, Default)]
pub(crate) struct LocalLoopback {
    queue: VecDeque<(Vec<u8>, Option<Sender>)>,
    free: Vec<Vec<u8>>,
}

impl LocalLoopback {
    /// Whether a frame waits.
    pub fn pending(&self) -> bool {
        !self.queue.is_empty()
    }

    /// Drops every waiting frame (a function reset).
    pub fn clear(&mut self) {
        while let Some((buf, _)) = self.queue.pop_front() {
            self.free.push(buf);
        }
    }

    /// Queues a copy of `frame`, sent by `from`.
    pub fn push(&mut self, frame: &[u8], from: Option<Sender>) {
        let mut buf = self.free.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(frame);
        self.queue.push_back((buf, from));
    }

    /// Takes the oldest waiting frame and its sender.
    pub fn pop(&mut self) -> Option<(Vec<u8>, Option<Sender>)> {
        self.queue.pop_front()
    }

    /// Keeps a received frame's buffer for a later frame.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        self.free.push(buf);
    }
}
