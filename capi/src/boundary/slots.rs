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
//! state word when a call takes a handle from the program (uncontended: the slot's cache line
//! is the holder's) and one store, a plain load and store when a receive places a buffer the
//! pool has just handed over (no other call can reach a free slot), and moving the `Mbuf` (a
//! few words) into or out of the slot, which holds it uninitialised-or-not as its state word
//! says (no discriminant to test, no old value to drop). No allocation, no lock.

use super::keep_slice;
use crate::error::{Error, Failure};
use driver::Mbuf;
use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
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
    /// The buffer: initialised while the state is HELD, and while BUSY until the call holding
    /// the slot takes it out; uninitialised while FREE. Never dropped in place (a slot lives
    /// for the rest of the process; a buffer leaves it only by being moved out).
    mbuf: UnsafeCell<MaybeUninit<Mbuf>>,
}

// SAFETY: `mbuf` is touched only by the caller that moved the state word to BUSY with a
// compare-and-swap (or, for a FREE slot, by the receive placing the buffer the pool handed it
// alone), and released again with a store: one thread at a time; `Mbuf` is `Send`.
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
                mbuf: UnsafeCell::new(MaybeUninit::uninit()),
            })
            .collect();
        let slots = keep_slice(slots);
        Self { slots, pool_id }
    }

    /// Puts `m`, a buffer of this table's pool with index `index`, in its slot and returns
    /// the handle C gets for it. Fails (dropping `m`, which returns it to its pool) when the
    /// index is out of range or the slot is not free, which would be a bug.
    ///
    /// No compare-and-swap: the pool has just handed `m` to this call alone, and a free slot
    /// is reached by no other call ([`claim`] takes only HELD slots; only `place` fills a FREE
    /// one, and only for the buffer of its index, which the pool hands out once).
    #[inline]
    pub(crate) fn place(&self, index: usize, m: Mbuf) -> Result<*mut cxd_mbuf, Failure> {
        let Some(slot) = self.slots.get(index) else {
            return Err(internal("a buffer index past the pool's slot table"));
        };
        let word = slot.word.load(Ordering::Acquire);
        if word & 0xffff != FREE {
            return Err(internal("a pool buffer handed out while its slot was held"));
        }
        let generation = word >> 16;
        // SAFETY: the slot is FREE (its buffer uninitialised) and this call alone holds the
        // buffer of its index, so no other call touches the slot until the store below.
        unsafe { (*slot.mbuf.get()).write(m) };
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

/// Why [`claim`] refused a handle, kept small so that the accepted path returns two words.
#[derive(Clone, Copy)]
enum Refusal {
    Null,
    NotAnMbuf,
    Busy,
    NotHeld,
}

/// Takes the slot the mbuf handle `m` names, checking that the C program holds it.
#[inline(always)]
pub(crate) fn claim(m: *const cxd_mbuf) -> Result<Claim, Failure> {
    try_claim(m).map_err(refused)
}

#[inline(always)]
fn try_claim(m: *const cxd_mbuf) -> Result<Claim, Refusal> {
    if m.is_null() {
        return Err(Refusal::Null);
    }
    let raw = m as usize as u64;
    let address = (raw & ADDRESS_BITS) as usize;
    let generation = (raw >> 48) as u32;
    if address % std::mem::align_of::<Slot>() != 0 {
        return Err(Refusal::NotAnMbuf);
    }
    // SAFETY: the C contract is that `m` is a handle this library returned, whose slot (the
    // address bits) is never freed; every slot and handle starts with its `u64` magic.
    let magic = unsafe { (address as *const u64).read() };
    if magic != SLOT_MAGIC {
        return Err(Refusal::NotAnMbuf);
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
        Err(word) if word == generation << 16 | BUSY => Err(Refusal::Busy),
        Err(_) => Err(Refusal::NotHeld),
    }
}

#[cold]
#[inline(never)]
fn refused(why: Refusal) -> Failure {
    match why {
        Refusal::Null => Failure::new(
            Error::Null,
            "the mbuf handle is NULL; pass one cxd_mbuf_alloc or cxd_rx_burst returned",
        ),
        Refusal::NotAnMbuf => Failure::new(
            Error::InvalidHandle,
            "the pointer passed as a cxd_mbuf is not one (another kind of handle, or not a \
             handle this library returned)",
        ),
        Refusal::Busy => Failure::new(
            Error::Busy,
            "the mbuf is in use by another call right now (another thread?), or was passed \
             twice in one burst",
        ),
        Refusal::NotHeld => Failure::new(
            Error::DoubleFree,
            "the mbuf is no longer yours: it was freed, or a send took it (the send owns what \
             it accepts); use each handle once and drop it after cxd_mbuf_free or a send",
        ),
    }
}

impl Claim {
    /// The buffer.
    #[inline]
    pub(crate) fn mbuf(&mut self) -> &mut Mbuf {
        // SAFETY: this claim set the slot BUSY from HELD: the call holding it is the slot's
        // only user, and a HELD slot's buffer is initialised (nothing took it out yet).
        unsafe { (*self.slot.mbuf.get()).assume_init_mut() }
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
        let (m, taken) = self.take_keeping();
        taken.release();
        m
    }

    /// Takes the buffer out but leaves the slot BUSY, for a send that may hand some buffers
    /// back: the [`Taken`] slot then gets it back ([`Taken::put_back`]) or is freed
    /// ([`Taken::release`]).
    #[inline]
    pub(crate) fn take_keeping(self) -> (Mbuf, Taken) {
        // SAFETY: as in `mbuf`. The claim is consumed, so the buffer is moved out once; the
        // slot stays BUSY, and `Taken` only writes it again or frees it.
        let m = unsafe { (*self.slot.mbuf.get()).assume_init_read() };
        (
            m,
            Taken {
                slot: self.slot,
                generation: self.generation,
            },
        )
    }
}

/// A slot whose buffer a call took out (state BUSY, buffer uninitialised).
pub(crate) struct Taken {
    slot: &'static Slot,
    generation: u32,
}

impl Taken {
    /// Puts `m` (the buffer taken out) back: the C program holds it again under the same
    /// handle.
    #[inline]
    pub(crate) fn put_back(self, m: Mbuf) {
        // SAFETY: the slot is BUSY under this call, its buffer taken out: writing it again
        // overwrites nothing live.
        unsafe { (*self.slot.mbuf.get()).write(m) };
        self.slot
            .word
            .store(self.generation << 16 | HELD, Ordering::Release);
    }

    /// The buffer is gone for good (sent, or freed): the slot is free and the handle no
    /// longer matches.
    #[inline]
    pub(crate) fn release(self) {
        let next = (self.generation + 1) & 0xffff;
        self.slot.word.store(next << 16 | FREE, Ordering::Release);
    }
}
