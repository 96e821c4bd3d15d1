//! The queue of frames a function sent to itself (see `engine::loopback` for which frames loop
//! and when the queue is drained): the function's state, reset with it.

use std::collections::VecDeque;

/// Frames looped inside the device and not yet received, each with the transport domain of
/// the SQ that sent it (none for RoCE from a QP), with their buffers kept for reuse.
#[derive(Debug, Default)]
pub(crate) struct LocalLoopback {
    queue: VecDeque<(Vec<u8>, Option<u32>)>,
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

    /// Queues a copy of `frame`, sent by an SQ of transport domain `td` (none for RoCE).
    pub fn push(&mut self, frame: &[u8], td: Option<u32>) {
        let mut buf = self.free.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(frame);
        self.queue.push_back((buf, td));
    }

    /// Takes the oldest waiting frame and the transport domain it was sent from.
    pub fn pop(&mut self) -> Option<(Vec<u8>, Option<u32>)> {
        self.queue.pop_front()
    }

    /// Keeps a received frame's buffer for a later frame.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        self.free.push(buf);
    }
}
