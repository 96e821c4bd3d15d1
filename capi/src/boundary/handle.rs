//! Handles of long-lived objects (devices, ports, queues, pools): a magic number naming the
//! kind, a state word, and the object. The state word lets one caller at a time have the
//! object mutably (a queue's burst, a port's close), several at once have it shared (a pool's
//! allocation), and marks it closed for good; a call that finds it taken gets
//! `CXD_ERROR_BUSY` at once, never waits.

use super::keep;
use crate::error::{Error, Failure};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU32, Ordering};

/// The object is closed: its handle answers `CXD_ERROR_CLOSED` for good.
const CLOSED: u32 = 1 << 31;
/// One caller has the object mutably.
const EXCLUSIVE: u32 = 1 << 30;
/// The rest of the word counts callers sharing it.
const READERS: u32 = EXCLUSIVE - 1;

/// Addresses whose top 16 bits are set are not user-space pointers on the platforms the
/// driver runs on (x86-64, AArch64 with 48-bit addresses); mbuf handles carry their
/// generation there, so an mbuf handle passed as another kind is refused without a read.
const TAG_BITS: usize = 0xffff << 48;

/// One object behind a C handle. `repr(C)` with the magic first: every kind of handle, and
/// an mbuf slot, starts with its magic at offset 0, so any handle can be asked its kind.
#[repr(C)]
pub(crate) struct Handle<T> {
    magic: u64,
    state: AtomicU32,
    inner: UnsafeCell<Option<T>>,
}

// SAFETY: the object is reached only through `exclusive` (one caller, and `T: Send` lets it be
// another thread than the one that made it) or `shared` (which asks `T: Sync`); the state word
// keeps the two apart.
unsafe impl<T: Send> Sync for Handle<T> {}

/// A kind of handle C sees as an opaque struct: its magic, its name in messages, and the
/// object it holds.
pub(crate) trait Kind: Sized + Send + Sync + 'static {
    /// What the handle holds.
    type Inner: Send;
    /// The kind's magic number.
    const MAGIC: u64;
    /// The C type's name, for messages.
    const NAME: &'static str;
    /// Wraps a handle (the C struct is `repr(C)` with the handle as its only field).
    fn wrap(handle: Handle<Self::Inner>) -> Self;
    /// The handle inside.
    fn handle(&self) -> &Handle<Self::Inner>;
}

/// Makes a handle of kind `K` holding `value`, kept for the rest of the process.
pub(crate) fn open<K: Kind>(value: K::Inner) -> &'static K {
    keep(Box::new(K::wrap(Handle {
        magic: K::MAGIC,
        state: AtomicU32::new(0),
        inner: UnsafeCell::new(Some(value)),
    })))
}

/// The handle of kind `K` at `ptr`, checked: NULL and other kinds are refused.
pub(crate) fn resolve<K: Kind>(ptr: *const K) -> Result<&'static Handle<K::Inner>, Failure> {
    if ptr.is_null() {
        return Err(Failure::new(
            Error::Null,
            format!(
                "the {} handle is NULL; pass one this library returned",
                K::NAME
            ),
        ));
    }
    if ptr as usize & TAG_BITS != 0 || ptr as usize % std::mem::align_of::<u64>() != 0 {
        return Err(wrong_kind::<K>());
    }
    // SAFETY: every handle of any kind this library hands out starts with its `u64` magic and
    // is never freed (see the module `boundary`); the C contract is that `ptr` is one of them.
    let magic = unsafe { ptr.cast::<u64>().read() };
    if magic != K::MAGIC {
        return Err(wrong_kind::<K>());
    }
    // SAFETY: the magic says this is a `K`, which lives for the rest of the process.
    let kind: &'static K = unsafe { &*ptr };
    Ok(kind.handle())
}

fn wrong_kind<K: Kind>() -> Failure {
    Failure::new(
        Error::InvalidHandle,
        format!(
            "the pointer passed as a {} is not one (another kind of handle, or not a handle \
             this library returned)",
            K::NAME
        ),
    )
}

impl<T> Handle<T> {
    fn closed(name: &str) -> Failure {
        Failure::new(
            Error::Closed,
            format!("the {name} was closed; its handle may not be used again"),
        )
    }

    fn busy(name: &str) -> Failure {
        Failure::new(
            Error::Busy,
            format!(
                "the {name} is in use by another call right now (another thread?); use each \
                 queue from one thread at a time, and close objects when no call is using them"
            ),
        )
    }

    /// The object, for this caller alone until the guard drops; `CXD_ERROR_BUSY` when another
    /// call has it, `CXD_ERROR_CLOSED` when closed.
    pub(crate) fn exclusive(&self, name: &'static str) -> Result<Exclusive<'_, T>, Failure> {
        match self
            .state
            .compare_exchange(0, EXCLUSIVE, Ordering::Acquire, Ordering::Relaxed)
        {
            Ok(_) => Ok(Exclusive {
                handle: self,
                close: false,
            }),
            Err(state) if state & CLOSED != 0 => Err(Self::closed(name)),
            Err(_) => Err(Self::busy(name)),
        }
    }

    /// Runs `f` on the object shared with other callers doing the same.
    pub(crate) fn shared<R>(
        &self,
        name: &'static str,
        f: impl FnOnce(&T) -> R,
    ) -> Result<R, Failure>
    where
        T: Sync,
    {
        let before = self.state.fetch_add(1, Ordering::Acquire);
        if before & (CLOSED | EXCLUSIVE) != 0 || before & READERS == READERS {
            self.state.fetch_sub(1, Ordering::Release);
            return Err(if before & CLOSED != 0 {
                Self::closed(name)
            } else {
                Self::busy(name)
            });
        }
        // SAFETY: the reader count is raised and no caller holds the object exclusively (which
        // needs the count at 0), so only shared references exist while `f` runs; `T: Sync`.
        let inner = unsafe { &*self.inner.get() };
        let result = inner.as_ref().map(f);
        self.state.fetch_sub(1, Ordering::Release);
        result.ok_or_else(|| Self::closed(name))
    }
}

/// A handle's object held by one caller; the handle is released (or closed) on drop.
pub(crate) struct Exclusive<'a, T> {
    handle: &'a Handle<T>,
    close: bool,
}

impl<T> Exclusive<'_, T> {
    /// The object.
    pub(crate) fn get(&mut self) -> &mut T {
        // SAFETY: the state word's EXCLUSIVE bit, set by this guard's making, keeps every other
        // caller away until the guard drops.
        let inner = unsafe { &mut *self.handle.inner.get() };
        match inner {
            Some(value) => value,
            // A live handle always holds its object: only `close` takes it, and then marks it.
            None => unreachable!("a live handle without its object"),
        }
    }

    /// Takes the object out and marks the handle closed for good.
    pub(crate) fn close(mut self) -> Option<T> {
        self.close = true;
        // SAFETY: as in `get`.
        unsafe { &mut *self.handle.inner.get() }.take()
    }
}

impl<T> Drop for Exclusive<'_, T> {
    fn drop(&mut self) {
        let state = if self.close { CLOSED } else { 0 };
        self.handle.state.store(state, Ordering::Release);
    }
}
