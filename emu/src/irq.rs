//! Where the model's MSI-X messages go. The in-process backend hands the model a sink that
//! signals eventfds (as VFIO does with `VFIO_DEVICE_SET_IRQS`); the vfio-user server hands it
//! the eventfds QEMU passed; tests use [`RecordingSink`].

use std::sync::Mutex;

/// Receives MSI-X messages by vector number.
pub trait InterruptSink: Send + Sync {
    /// Signals vector `vector` (0-based MSI-X table index).
    fn signal(&self, vector: u16);
}

/// A sink that remembers every vector signalled, in order; for tests.
#[derive(Debug, Default)]
pub struct RecordingSink {
    fired: Mutex<Vec<u16>>,
}

impl RecordingSink {
    /// An empty recording.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the vectors signalled so far.
    pub fn take(&self) -> Vec<u16> {
        std::mem::take(&mut *self.fired.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Number of times `vector` was signalled (without consuming the record).
    pub fn count(&self, vector: u16) -> usize {
        self.fired
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|&&v| v == vector)
            .count()
    }
}

impl InterruptSink for RecordingSink {
    fn signal(&self, vector: u16) {
        self.fired
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(vector);
    }
}
