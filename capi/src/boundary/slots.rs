//! Mbuf handles without an allocation per packet.
//!
//! Every pool gets, when its port starts, a table of one slot per buffer (one allocation,
//! kept for the rest of the process like every handle). A buffer the C program holds sits in
//! its buffer's slot as a driver [`Mbuf`]; the handle C sees is the slot's address with the
//! slot's 16-bit generation in the top 16 bits (an opaque token, never to be dereferenced).
//! Each time the program lets go of a buffer (free, or a send taking it) the generation moves
//! on, so a handle used after that no longer matches its slot: a double free, a use after
//! free, or a send of an mbuf already sent is refused with `CXD_ERROR_DOUBLE_FREE` even once the
//! buffer has been handed out again (until the generation wraps, 65,536 uses later).
//!
//! Cost per packet on the burst paths: decoding the token, one compare-and-swap on the slot's
//! state word (uncontended: the slot's cache line is the holder's) and one store, and moving
//! the `Mbuf` (a few words) into or out of the slot. No allocation, no lock.

use super::keep_slice;
use crate::error::{Error, Failure};
use driver::Mbuf;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU32, Ordering};

/// The magic at the start of every slot (see [`super::handle::Handle`]).
pub(crate) const SLOT_MAGIC: u64 = 0x6378_642d_6d62_7566; // "cxd-mbuf"

/// Slot states, in the low 16 bits of the state word; the generation is the high 16.
const FREE: u32 = 0;
/// The C program holds the buffer.
const HELD: u32 = 1;
/// A call is working on the slot right now.
const BUSY: u32 = 2;

const ADDRESS_BITS: u64 = (1 << 48) - 1;

/// The C type behind `cxd_mbuf *`: never defined, handles are tokens naming a slot.
#[allow(non_camel_case_types)]
pub struct cxd_mbuf {
    _opaque: [u8; 0],
}

/// One buffer's slot.
#[repr(C, align(64))]
pub(crate) struct Slot {
    magic: u64,
    /// Generation (high 16 bits) and state (low 16).
    word: AtomicU32,
    /// The pool the slot's table belongs to.
    pool_id: u32,
    mbuf: UnsafeCell<Option<Mbuf>>,
}

// SAFETY: `mbuf` is touched only by the caller that moved the state word to BUSY with a
// compare-and-swap, and released again with a store: one thread at a time; `Mbuf` is `Send`.
unsafe impl Sync for Slot {}

/// A pool's table of slots, one per buffer index.
#[derive(Clone, Copy)]
pub(crate) struct SlotTable {
    slots: &'static [Slot],
    pool_id: u32,
}

/// A slot taken by one call (state BUSY): its buffer, and what the call then does with it.
pub(crate) struct Claim {
    slot: &'static Slot,
    generation: u32,
}

impl SlotTable {
    /// A table of `count` empty slots for pool `pool_id` (one allocation; not on a fast path).
    pub(crate) fn new(count: u32, pool_id: u32) -> Self {
        let slots: Box<[Slot]> = (0..count)
            .map(|_| Slot {
                magic: SLOT_MAGIC,
                word: AtomicU32::new(FREE),
                pool_id,
                mbuf: UnsafeCell::new(None),
            })
            .collect();
        let slots = keep_slice(slots);
        Self { slots, pool_id }
    }

    /// Puts `m`, a buffer of this table's pool with index `index`, in its slot and returns
    /// the handle C gets for it. Fails (dropping `m`, which returns it to its pool) when the
    /// index is out of range or the slot is not free, which would be a bug.
    #[inline]
    pub(crate) fn place(&self, index: usize, m: Mbuf) -> Result<*mut cxd_mbuf, Failure> {
        let Some(slot) = self.slots.get(index) else {
            return Err(internal("a buffer index past the pool's slot table"));
        };
        let word = slot.word.load(Ordering::Relaxed);
        if word & 0xffff != FREE
            || slot
                .word
                .compare_exchange(word, word | BUSY, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            return Err(internal("a pool buffer handed out while its slot was held"));
        }
        let generation = word >> 16;
        // SAFETY: the compare-and-swap to BUSY gave this call the slot alone.
        unsafe { *slot.mbuf.get() = Some(m) };
        slot.word.store(generation << 16 | HELD, Ordering::Release);
        Ok(token(slot, generation))
    }

    /// The pool this table serves.
    pub(crate) fn pool_id(&self) -> u32 {
        self.pool_id
    }
}

fn internal(what: &str) -> Failure {
    Failure::new(
        Error::Device,
        format!("internal error: {what}; this is a bug in cxdirect, please report it"),
    )
}

#[inline]
fn token(slot: &'static Slot, generation: u32) -> *mut cxd_mbuf {
    ((slot as *const Slot as u64) | u64::from(generation) << 48) as usize as *mut cxd_mbuf
}

/// Takes the slot the mbuf handle `m` names, checking that the C program holds it.
#[inline]
pub(crate) fn claim(m: *const cxd_mbuf) -> Result<Claim, Failure> {
    if m.is_null() {
        return Err(Failure::new(
            Error::Null,
            "the mbuf handle is NULL; pass one cxd_mbuf_alloc or cxd_rx_burst returned",
        ));
    }
    let raw = m as usize as u64;
    let address = (raw & ADDRESS_BITS) as usize;
    let generation = (raw >> 48) as u32;
    if address % std::mem::align_of::<Slot>() != 0 {
        return Err(not_an_mbuf());
    }
    // SAFETY: the C contract is that `m` is a handle this library returned, whose slot (the
    // address bits) is never freed; every slot and handle starts with its `u64` magic.
    let magic = unsafe { (address as *const u64).read() };
    if magic != SLOT_MAGIC {
        return Err(not_an_mbuf());
    }
    // SAFETY: the magic says a slot lives there, for the rest of the process.
    let slot: &'static Slot = unsafe { &*(address as *const Slot) };
    let held = generation << 16 | HELD;
    match slot.word.compare_exchange(
        held,
        generation << 16 | BUSY,
        Ordering::Acquire,
        Ordering::Relaxed,
    ) {
        Ok(_) => Ok(Claim { slot, generation }),
        Err(word) if word == generation << 16 | BUSY => Err(Failure::new(
            Error::Busy,
            "the mbuf is in use by another call right now (another thread?), or was passed \
             twice in one burst",
        )),
        Err(_) => Err(Failure::new(
            Error::DoubleFree,
            "the mbuf is no longer yours: it was freed, or a send took it (the send owns what \
             it accepts); use each handle once and drop it after cxd_mbuf_free or a send",
        )),
    }
}

fn not_an_mbuf() -> Failure {
    Failure::new(
        Error::InvalidHandle,
        "the pointer passed as a cxd_mbuf is not one (another kind of handle, or not a handle \
         this library returned)",
    )
}

impl Claim {
    /// The buffer.
    #[inline]
    pub(crate) fn mbuf(&mut self) -> &mut Mbuf {
        // SAFETY: this claim set the slot BUSY: the call holding it is the slot's only user.
        let inner = unsafe { &mut *self.slot.mbuf.get() };
        match inner {
            Some(m) => m,
            None => unreachable!("a held slot without its buffer"),
        }
    }

    /// The pool whose table the slot is in.
    #[inline]
    pub(crate) fn pool_id(&self) -> u32 {
        self.slot.pool_id
    }

    /// The C program still holds the buffer: the slot goes back to HELD, the handle stays
    /// good.
    #[inline]
    pub(crate) fn keep(self) {
        self.slot
            .word
            .store(self.generation << 16 | HELD, Ordering::Release);
    }

    /// Takes the buffer out: the C program no longer holds it, and its handle no longer
    /// matches (the generation moves on).
    #[inline]
    pub(crate) fn take(self) -> Mbuf {
        // SAFETY: as in `mbuf`.
        let inner = unsafe { &mut *self.slot.mbuf.get() };
        let m = inner.take();
        let next = (self.generation + 1) & 0xffff;
        self.slot.word.store(next << 16 | FREE, Ordering::Release);
        match m {
            Some(m) => m,
            None => unreachable!("a held slot without its buffer"),
        }
    }

    /// Puts `m` (the buffer taken with [`Claim::take_keeping`]) back: the C program holds it
    /// again under the same handle.
    #[inline]
    pub(crate) fn put_back(self, m: Mbuf) {
        // SAFETY: as in `mbuf`.
        unsafe { *self.slot.mbuf.get() = Some(m) };
        self.keep();
    }

    /// Takes the buffer out but leaves the slot BUSY, for a send that may hand some buffers
    /// back: finish with [`Claim::put_back`] or [`Claim::release`].
    #[inline]
    pub(crate) fn take_keeping(&mut self) -> Mbuf {
        // SAFETY: as in `mbuf`.
        let inner = unsafe { &mut *self.slot.mbuf.get() };
        match inner.take() {
            Some(m) => m,
            None => unreachable!("a held slot without its buffer"),
        }
    }

    /// The buffer, taken with [`Claim::take_keeping`], is gone for good (sent): the slot is
    /// free and the handle no longer matches.
    #[inline]
    pub(crate) fn release(self) {
        let next = (self.generation + 1) & 0xffff;
        self.slot.word.store(next << 16 | FREE, Ordering::Release);
    }
}
