//! MSI-X through the client's eventfds, with the `VFIO_DEVICE_SET_IRQS` semantics of the MSI-X
//! index.
//!
//! The model raises a vector through its [`InterruptSink`]; [`MsixEventfds`] is that sink. Each
//! vector has a trigger eventfd (given by the client), a mask bit and a pending bit:
//!
//! | `SET_IRQS` flags | effect on vectors `start..start + count` |
//! |---|---|
//! | `DATA_EVENTFD \| ACTION_TRIGGER`, `count` fds | each vector signals its fd from now on |
//! | `DATA_EVENTFD \| ACTION_TRIGGER`, no fds | the vectors lose their fds (QEMU sends this for fd -1, which cannot travel as `SCM_RIGHTS`) |
//! | `DATA_NONE \| ACTION_TRIGGER`, `count` 0 | the whole index is disabled: every fd dropped, masks and pending bits cleared |
//! | `DATA_NONE \| ACTION_TRIGGER`, `count` > 0 | the vectors fire now, as if the device raised them (a loopback test of the path) |
//! | `DATA_NONE \| ACTION_MASK` | the vectors are masked: firing one sets its pending bit instead of signalling |
//! | `DATA_NONE \| ACTION_UNMASK` | the vectors are unmasked; a pending one signals now |
//!
//! A vector with no fd drops what it fires, as VFIO does. `DATA_BOOL` (refused by the `vfio_user`
//! crate before it reaches us) and `DATA_EVENTFD` with MASK/UNMASK (irqfd-style unmasking) are
//! refused with `EINVAL`, as are ranges past the vector count. The other indices (INTx, MSI, ERR,
//! REQ) have no vectors: disabling them is accepted, anything else is refused.
//!
//! The pending bits are what the client reads from the PBA page of BAR0 (QEMU forwards PBA reads
//! to the server); see [`MsixEventfds::pba_qword`].

use crate::irq::InterruptSink;
use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use thiserror::Error;
use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_SET_ACTION_MASK, VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_ACTION_TYPE_MASK,
    VFIO_IRQ_SET_ACTION_UNMASK, VFIO_IRQ_SET_DATA_BOOL, VFIO_IRQ_SET_DATA_EVENTFD,
    VFIO_IRQ_SET_DATA_NONE, VFIO_IRQ_SET_DATA_TYPE_MASK, VFIO_PCI_MSIX_IRQ_INDEX,
};

/// A `SET_IRQS` request the server refuses.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum IrqError {
    /// The flags do not name exactly one data type and one action.
    #[error("SET_IRQS flags {flags:#x} must name exactly one data type and one action")]
    BadFlags {
        /// The flags received.
        flags: u32,
    },
    /// The vector range runs past the index's vector count.
    #[error(
        "SET_IRQS on index {index} for vectors {start}..{start}+{count}: the index has {vectors} \
         vectors"
    )]
    OutOfRange {
        /// IRQ index.
        index: u32,
        /// First vector.
        start: u32,
        /// Number of vectors.
        count: u32,
        /// Vectors the index has.
        vectors: u32,
    },
    /// A combination VFIO defines but this server does not offer.
    #[error("SET_IRQS on index {index} with flags {flags:#x} is not supported: {why}")]
    Unsupported {
        /// IRQ index.
        index: u32,
        /// The flags received.
        flags: u32,
        /// What is missing.
        why: &'static str,
    },
    /// The number of file descriptors does not match the vector count.
    #[error("SET_IRQS with DATA_EVENTFD for {count} vectors carried {fds} file descriptors")]
    FdCount {
        /// Vectors named.
        count: u32,
        /// File descriptors received.
        fds: usize,
    },
    /// A file descriptor that is not an eventfd.
    #[error("file descriptor for MSI-X vector {vector} is not an eventfd (it is {what})")]
    NotEventfd {
        /// The vector it was meant for.
        vector: u32,
        /// What `/proc/self/fd` says it is.
        what: String,
    },
}

#[derive(Debug, Default)]
struct Vector {
    trigger: Option<File>,
    masked: bool,
    pending: bool,
}

/// Interrupt totals, for the log.
#[derive(Debug, Default)]
pub struct IrqCounters {
    /// Eventfd signals sent.
    pub signalled: AtomicU64,
    /// Vectors fired while masked (pending bit set).
    pub held_pending: AtomicU64,
    /// Vectors fired with no eventfd (dropped).
    pub dropped: AtomicU64,
    /// Eventfd writes that failed.
    pub write_errors: AtomicU64,
}

/// The MSI-X vectors of one function as the client configured them; the model's interrupt sink.
#[derive(Debug)]
pub struct MsixEventfds {
    vectors: Mutex<Vec<Vector>>,
    /// Interrupt totals.
    pub counters: IrqCounters,
}

impl MsixEventfds {
    /// `count` vectors, none with an eventfd, none masked.
    pub fn new(count: u16) -> Self {
        Self {
            vectors: Mutex::new((0..count).map(|_| Vector::default()).collect()),
            counters: IrqCounters::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Vector>> {
        self.vectors.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Number of vectors.
    pub fn count(&self) -> u32 {
        self.lock().len() as u32
    }

    /// Number of vectors that have an eventfd.
    pub fn armed(&self) -> usize {
        self.lock().iter().filter(|v| v.trigger.is_some()).count()
    }

    /// Whether `vector` is masked by `SET_IRQS` (false past the end).
    pub fn is_masked(&self, vector: u32) -> bool {
        self.lock().get(vector as usize).is_some_and(|v| v.masked)
    }

    /// Whether `vector`'s pending bit is set (false past the end).
    pub fn is_pending(&self, vector: u32) -> bool {
        self.lock().get(vector as usize).is_some_and(|v| v.pending)
    }

    /// Quadword `index` of the pending-bit array: bit `n` is vector `64 * index + n`.
    pub fn pba_qword(&self, index: u64) -> u64 {
        let vectors = self.lock();
        let first = index.saturating_mul(64);
        (0..64u64)
            .filter(|bit| {
                usize::try_from(first + bit)
                    .ok()
                    .and_then(|v| vectors.get(v))
                    .is_some_and(|v| v.pending)
            })
            .fold(0, |word, bit| word | 1 << bit)
    }

    /// Clears every pending bit (device reset); eventfds and masks stay as the client set them.
    pub fn clear_pending(&self) {
        for v in self.lock().iter_mut() {
            v.pending = false;
        }
    }

    /// Fires `vector`: signals its eventfd, or sets its pending bit while it is masked.
    fn fire(&self, vectors: &mut [Vector], vector: usize) {
        let Some(v) = vectors.get_mut(vector) else {
            return;
        };
        if v.masked {
            v.pending = true;
            self.counters.held_pending.fetch_add(1, Ordering::Relaxed);
            return;
        }
        match v.trigger.as_mut() {
            Some(fd) => {
                if fd.write_all(&1u64.to_ne_bytes()).is_ok() {
                    self.counters.signalled.fetch_add(1, Ordering::Relaxed);
                } else {
                    self.counters.write_errors.fetch_add(1, Ordering::Relaxed);
                }
            }
            None => {
                self.counters.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Applies one `VFIO_USER_DEVICE_SET_IRQS` request (see the module documentation).
    pub fn set_irqs(
        &self,
        index: u32,
        flags: u32,
        start: u32,
        count: u32,
        fds: Vec<File>,
    ) -> Result<(), IrqError> {
        let data = flags & VFIO_IRQ_SET_DATA_TYPE_MASK;
        let action = flags & VFIO_IRQ_SET_ACTION_TYPE_MASK;
        let known = VFIO_IRQ_SET_DATA_TYPE_MASK | VFIO_IRQ_SET_ACTION_TYPE_MASK;
        if !data.is_power_of_two() || !action.is_power_of_two() || flags & !known != 0 {
            return Err(IrqError::BadFlags { flags });
        }
        if index != VFIO_PCI_MSIX_IRQ_INDEX {
            // INTx, MSI, ERR and REQ have no vectors here: only "disable" makes sense.
            if data == VFIO_IRQ_SET_DATA_NONE && action == VFIO_IRQ_SET_ACTION_TRIGGER && count == 0
            {
                return Ok(());
            }
            return Err(IrqError::OutOfRange {
                index,
                start,
                count,
                vectors: 0,
            });
        }
        let mut vectors = self.lock();
        let total = vectors.len() as u32;
        if data == VFIO_IRQ_SET_DATA_NONE && action == VFIO_IRQ_SET_ACTION_TRIGGER && count == 0 {
            for v in vectors.iter_mut() {
                *v = Vector::default();
            }
            return Ok(());
        }
        let end = match start.checked_add(count) {
            Some(end) if end <= total => end,
            _ => {
                return Err(IrqError::OutOfRange {
                    index,
                    start,
                    count,
                    vectors: total,
                })
            }
        };
        let range = start as usize..end as usize;
        match (data, action) {
            (VFIO_IRQ_SET_DATA_EVENTFD, VFIO_IRQ_SET_ACTION_TRIGGER) => {
                if fds.is_empty() {
                    for v in &mut vectors[range] {
                        v.trigger = None;
                    }
                    return Ok(());
                }
                if fds.len() != count as usize {
                    return Err(IrqError::FdCount {
                        count,
                        fds: fds.len(),
                    });
                }
                for (i, fd) in fds.iter().enumerate() {
                    check_eventfd(fd, start + i as u32)?;
                }
                for (v, fd) in vectors[range].iter_mut().zip(fds) {
                    v.trigger = Some(fd);
                }
                Ok(())
            }
            (VFIO_IRQ_SET_DATA_NONE, VFIO_IRQ_SET_ACTION_TRIGGER) => {
                for vector in range {
                    self.fire(&mut vectors, vector);
                }
                Ok(())
            }
            (VFIO_IRQ_SET_DATA_NONE, VFIO_IRQ_SET_ACTION_MASK) => {
                for v in &mut vectors[range] {
                    v.masked = true;
                }
                Ok(())
            }
            (VFIO_IRQ_SET_DATA_NONE, VFIO_IRQ_SET_ACTION_UNMASK) => {
                for vector in range {
                    let Some(v) = vectors.get_mut(vector) else {
                        continue;
                    };
                    v.masked = false;
                    if std::mem::take(&mut v.pending) {
                        self.fire(&mut vectors, vector);
                    }
                }
                Ok(())
            }
            (VFIO_IRQ_SET_DATA_BOOL, _) => Err(IrqError::Unsupported {
                index,
                flags,
                why: "DATA_BOOL needs a payload the vfio_user crate does not pass on",
            }),
            (VFIO_IRQ_SET_DATA_EVENTFD, _) => Err(IrqError::Unsupported {
                index,
                flags,
                why: "eventfd-driven mask/unmask is not offered for MSI-X",
            }),
            _ => Err(IrqError::BadFlags { flags }),
        }
    }
}

impl InterruptSink for MsixEventfds {
    fn signal(&self, vector: u16) {
        let mut vectors = self.lock();
        self.fire(&mut vectors, usize::from(vector));
    }
}

/// Refuses a file descriptor that `/proc/self/fd` shows is not an eventfd (a pipe could block
/// the device thread; a regular file would swallow interrupts). Where `/proc` is not mounted
/// the fd is taken on trust.
fn check_eventfd(fd: &File, vector: u32) -> Result<(), IrqError> {
    let link = format!("/proc/self/fd/{}", fd.as_raw_fd());
    match std::fs::read_link(link) {
        Ok(target) => {
            let what = target.to_string_lossy();
            if what == "anon_inode:[eventfd]" {
                Ok(())
            } else {
                Err(IrqError::NotEventfd {
                    vector,
                    what: what.into_owned(),
                })
            }
        }
        Err(_) => Ok(()),
    }
}
