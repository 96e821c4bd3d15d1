//! BlueFlame copies that reach the server eight bytes at a time, put back together.
//!
//! A driver with write combining copies a small WQE into a BlueFlame register as one 64-byte
//! burst (Linux's `mlx5_wc_post_nop` in `drivers/net/ethernet/mellanox/mlx5/core/wc.c`,
//! libmlx5's `mlx5_bf_copy`), and the device takes the WQE from that copy instead of fetching
//! it. QEMU forwards the guest's stores to a vfio-user server one message each, so the copy
//! arrives as eight 8-byte writes, and its first eight bytes are indistinguishable from a plain
//! doorbell (the control segment's first two words). Rung on the first store, the device
//! fetches every WQE from memory: mlx5_core's write-combining test then sees no copy taken
//! (`mlx5_core_test_wc`: the CQE of an unsignaled NOP whose copy alone asks for one never
//! comes), reports no write combining, and libmlx5 gets no BlueFlame UARs.
//!
//! This room gives the model what a write-combining bus would have delivered:
//!
//! 1. An 8-byte store at the start of a BlueFlame half (outside device memory) whose control
//!    segment's DS count makes a WQE of at most half a register opens a copy: it is held, and
//!    the copy is expected to run to the WQE's size rounded up to 64 bytes (what
//!    `mlx5_bf_copy` and `mlx5_wc_post_nop` write).
//! 2. Stores that continue it (the next offset, a multiple of 8 bytes, within the expected
//!    size) are added; when the copy is whole it goes to the model as one write, and the model
//!    takes the WQE from it.
//! 3. A copy that comes apart rings as the doorbell its first eight bytes are: when anything
//!    else reaches the server first (any other write, a read, a DMA map, an interrupt set-up:
//!    the caller calls [`Assembly::interrupt`]), or when no store has continued it for the
//!    hold time (a thread of this room rings it). The device then fetches the WQE from memory,
//!    as a ConnectX does when a copy reaches it in pieces. A plain doorbell (mlx5e's
//!    `mlx5e_notify_hw`, mlx5_ib's `mlx5r_ring_db`) is such a copy: it rings when the next
//!    message arrives or the hold time has passed, whichever comes first.
//! 4. The rest of a copy that already rang reaches the model as before: stores past a half's
//!    first eight bytes are ignored there.
//!
//! Order is kept: a held copy rings before anything that reached the server after it, and the
//! hold thread rings under the same lock the server thread takes for every message.
//!
//! The cost: a doorbell nothing follows reaches the model up to the hold time late (the
//! client does not wait for it: vfio-user BAR writes are posted). [`DEFAULT_HOLD`] is long
//! enough for the eight stores of one copy under QEMU's TCG and short beside what a guest's
//! network stack waits for a completion; `cxdirect-emu-server --blueflame-hold-us N` sets it
//! (zero turns assembly off, as does [`Assembly::new`] with a hold of zero).

use super::bar::{self, BarError, MmioTarget, WriteOutcome, FIRST_UAR_OFFSET};
use crate::device::BF_REG_SIZE;
use cxdirect_hw::doorbell::{UAR_BF_OFFSET, UAR_PAGE_SIZE};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a copy's first store is held for the rest: 200 µs.
pub const DEFAULT_HOLD: Duration = Duration::from_micros(200);

/// Size of one half of a BlueFlame register in bytes: the longest copy assembled.
const HALF: usize = BF_REG_SIZE / 2;

/// Size of one store QEMU forwards, and of a copy's first piece.
const STORE: usize = 8;

/// What the assembly has done.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct AssemblyStats {
    /// Copies delivered whole: the model took the WQE from them.
    pub assembled: u64,
    /// Copies rung as doorbells because something else reached the server first.
    pub interrupted: u64,
    /// Copies rung as doorbells because the hold time passed.
    pub expired: u64,
    /// Longest wait between two stores of a copy that was delivered whole, in nanoseconds.
    pub longest_gap_ns: u64,
}

/// A copy being put together.
struct OpenCopy {
    /// BAR0 offset of the half it fills.
    offset: u64,
    /// Bytes received so far (`len` of them).
    bytes: [u8; HALF],
    len: usize,
    /// Where the copy ends: the WQE's size rounded up to 64 bytes.
    expected: usize,
    /// When its last store came.
    last: Instant,
    /// The longest wait between two of its stores so far.
    longest_gap: Duration,
}

struct State {
    open: Option<OpenCopy>,
    stats: AssemblyStats,
    stop: bool,
}

struct Shared<T> {
    target: T,
    hold: Duration,
    state: Mutex<State>,
    wake: Condvar,
}

/// BlueFlame copy assembly in front of one function's BAR0 (see the module documentation).
pub struct Assembly<T: MmioTarget + Send + Sync + 'static> {
    shared: Arc<Shared<T>>,
    ringer: Option<JoinHandle<()>>,
}

impl<T: MmioTarget + Send + Sync + 'static> std::fmt::Debug for Assembly<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Assembly")
            .field("hold", &self.shared.hold)
            .field("stats", &self.stats())
            .finish()
    }
}

impl<T: MmioTarget + Send + Sync + 'static> Assembly<T> {
    /// Assembly in front of `target`, holding a copy's first store up to `hold` for the
    /// next (zero: no assembly, every store passes as it comes). Starts the thread that rings
    /// copies whose hold time passed; if it cannot be started, assembly is off.
    pub fn new(target: T, hold: Duration) -> Self {
        let shared = Arc::new(Shared {
            target,
            hold,
            state: Mutex::new(State {
                open: None,
                stats: AssemblyStats::default(),
                stop: false,
            }),
            wake: Condvar::new(),
        });
        let ringer = if hold.is_zero() {
            None
        } else {
            let thread_shared = shared.clone();
            std::thread::Builder::new()
                .name("blueflame-hold".into())
                .spawn(move || ring_late_copies(&thread_shared))
                .map_err(|e| log::warn!("BlueFlame copy assembly off: no thread for it: {e}"))
                .ok()
        };
        Self { shared, ringer }
    }

    /// The target stores go to.
    pub fn target(&self) -> &T {
        &self.shared.target
    }

    /// What the assembly has done so far.
    pub fn stats(&self) -> AssemblyStats {
        self.shared.lock().stats
    }

    /// A BAR0 write from the client: added to the open copy, held as a copy's first store, or
    /// passed to the target as [`bar::write`] passes it (after ringing an open copy it does
    /// not continue). A held store reports no pieces yet.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<WriteOutcome, BarError> {
        let shared = &*self.shared;
        let mut state = shared.lock();
        if let Some(mut copy) = state.open.take_if(|c| continues(c, offset, data.len())) {
            let now = Instant::now();
            copy.longest_gap = copy
                .longest_gap
                .max(now.saturating_duration_since(copy.last));
            copy.bytes[copy.len..copy.len + data.len()].copy_from_slice(data);
            copy.len += data.len();
            copy.last = now;
            if copy.len < copy.expected {
                state.open = Some(copy);
                return Ok(WriteOutcome::default());
            }
            state.stats.assembled += 1;
            let gap_ns = u64::try_from(copy.longest_gap.as_nanos()).unwrap_or(u64::MAX);
            state.stats.longest_gap_ns = state.stats.longest_gap_ns.max(gap_ns);
            return bar::write(&shared.target, copy.offset, &copy.bytes[..copy.expected]);
        }
        let outcome = shared.ring_open(&mut state, Ending::Interrupted);
        if shared.hold.is_zero() || self.ringer.is_none() {
            return bar::write(&shared.target, offset, data).map(|o| outcome.and(o));
        }
        if let Some(expected) = opens_copy(&shared.target, offset, data) {
            let mut bytes = [0u8; HALF];
            bytes[..STORE].copy_from_slice(data);
            state.open = Some(OpenCopy {
                offset,
                bytes,
                len: STORE,
                expected,
                last: Instant::now(),
                longest_gap: Duration::ZERO,
            });
            shared.wake.notify_one();
            return Ok(outcome);
        }
        bar::write(&shared.target, offset, data).map(|o| outcome.and(o))
    }

    /// Something other than a BAR0 write reached the server: an open copy rings first, as the
    /// doorbell its first store is. Returns what ringing it did.
    pub fn interrupt(&self) -> WriteOutcome {
        let shared = &*self.shared;
        let mut state = shared.lock();
        shared.ring_open(&mut state, Ending::Interrupted)
    }
}

impl<T: MmioTarget + Send + Sync + 'static> Drop for Assembly<T> {
    fn drop(&mut self) {
        {
            let shared = &*self.shared;
            let mut state = shared.lock();
            state.stop = true;
            shared.ring_open(&mut state, Ending::Interrupted);
            shared.wake.notify_one();
        }
        if let Some(ringer) = self.ringer.take() {
            let _ = ringer.join();
        }
    }
}

/// Why an open copy rang as a doorbell.
#[derive(Clone, Copy)]
enum Ending {
    Interrupted,
    Expired,
}

impl<T: MmioTarget> Shared<T> {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Rings the open copy, if any, as the doorbell its first store is.
    fn ring_open(&self, state: &mut State, why: Ending) -> WriteOutcome {
        let Some(copy) = state.open.take() else {
            return WriteOutcome::default();
        };
        match why {
            Ending::Interrupted => state.stats.interrupted += 1,
            Ending::Expired => state.stats.expired += 1,
        }
        let mut outcome = WriteOutcome::default();
        // Stores already added past the first go too, as they came: the model ignores them.
        for (i, store) in copy.bytes[..copy.len].chunks_exact(STORE).enumerate() {
            let at = copy.offset + (i * STORE) as u64;
            if let Ok(o) = bar::write(&self.target, at, store) {
                outcome = outcome.and(o);
            }
        }
        outcome
    }
}

/// The hold thread: rings each copy no store has continued for the hold time, until the
/// assembly is dropped.
fn ring_late_copies<T: MmioTarget>(shared: &Shared<T>) {
    let mut state = shared.lock();
    loop {
        if state.stop {
            return;
        }
        let due = state.open.as_ref().map(|copy| copy.last + shared.hold);
        state = match due {
            None => shared.wake.wait(state).unwrap_or_else(|e| e.into_inner()),
            Some(due) => {
                let now = Instant::now();
                if now >= due {
                    let outcome = shared.ring_open(&mut state, Ending::Expired);
                    if let Some(e) = outcome.first_refusal {
                        log::warn!("the model dropped a held BlueFlame doorbell: {e}");
                    }
                    state
                } else {
                    shared
                        .wake
                        .wait_timeout(state, due - now)
                        .map(|(s, _)| s)
                        .unwrap_or_else(|e| e.into_inner().0)
                }
            }
        };
    }
}

/// Whether a store of `len` bytes at `offset` continues `copy`.
fn continues(copy: &OpenCopy, offset: u64, len: usize) -> bool {
    len > 0
        && len % STORE == 0
        && offset == copy.offset + copy.len as u64
        && copy.len + len <= copy.expected
}

/// The expected size of the copy a store opens: an 8-byte store at the start of a BlueFlame
/// half, outside device memory, whose DS count (the low six bits of the control segment's
/// second word, in 16-byte units) makes a WQE of at most half a register. `None`: the store
/// opens no copy.
fn opens_copy<T: MmioTarget>(target: &T, offset: u64, data: &[u8]) -> Option<usize> {
    if data.len() != STORE || offset < FIRST_UAR_OFFSET || target.is_memory(offset) {
        return None;
    }
    let in_page = (offset % UAR_PAGE_SIZE as u64) as usize;
    if in_page < UAR_BF_OFFSET || (in_page - UAR_BF_OFFSET) % HALF != 0 {
        return None;
    }
    let end = offset.checked_add(HALF as u64)?;
    if end > target.bar_size() {
        return None;
    }
    let ds = usize::from(data[7] & 0x3f);
    let expected = (ds * 16).div_ceil(bar::BF_CHUNK) * bar::BF_CHUNK;
    (ds > 0 && expected <= HALF).then_some(expected)
}
