//! Impairments of a wire: frames dropped, duplicated, reordered, corrupted or delayed on
//! request, driven by a seeded generator so that a run repeats exactly.
//!
//! Impairments apply to every direction of a wire alike (both directions of a pair, the one
//! direction of a loopback), each direction with its own generator, seeded from
//! [`Impairments::seed`] and the sending port. What happens to the frames one port sends thus
//! depends only on the seed and on the sequence of frames that port sends, not on what the other
//! port does or on thread timing.
//!
//! The wire has no clock: a frame crosses when it is sent. Delays and reordering are therefore
//! counted in frames. A held frame is released once a given number of later frames have been put
//! on the wire by the same port (every frame counts, including those the impairments drop), or
//! when [`crate::wire::Wire::release_held`] is called; a sender that falls silent leaves its held
//! frames on the wire until then.

use std::sync::atomic::Ordering;
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::{Port, PortId, Wire, WireError};

/// What a wire does wrong on purpose. The default, [`Impairments::NONE`], is a perfect wire.
///
/// For each frame a port sends, in this order: the frame may be dropped (every
/// [`drop_every`](Self::drop_every)-th frame, and at random with
/// [`drop_probability`](Self::drop_probability)); a frame not dropped may have one bit of one
/// byte flipped ([`corrupt_probability`](Self::corrupt_probability)), may be marked to arrive
/// twice ([`duplicate_probability`](Self::duplicate_probability), both copies identical and
/// back to back), and may be held back by a delay and by a reordering hold, which add up.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Impairments {
    /// Seed of the generator behind every random choice. The same seed, configuration and
    /// frames give the same outcomes.
    pub seed: u64,
    /// Probability (0.0..=1.0) that a frame is dropped.
    pub drop_probability: f64,
    /// Drop the N-th, 2N-th, 3N-th... frame each port sends (counting from 1); 0 turns this
    /// off, 1 drops every frame.
    pub drop_every: u32,
    /// Probability (0.0..=1.0) that a frame is delivered twice.
    pub duplicate_probability: f64,
    /// Probability (0.0..=1.0) that a frame is held back behind later frames.
    pub reorder_probability: f64,
    /// How far a reordered frame is held back: behind 1..=`reorder_window` later frames of the
    /// same port, chosen at random. At least 1 when `reorder_probability` is above zero.
    pub reorder_window: u32,
    /// Probability (0.0..=1.0) that one byte of a frame is corrupted: one bit flipped, the
    /// byte (anywhere in the frame, header included) and the bit chosen at random.
    pub corrupt_probability: f64,
    /// Every frame is held until this many later frames of the same port have been sent
    /// (the wire has no clock: a delay is counted in frames). 0 turns the fixed delay off.
    pub delay_frames: u32,
    /// A random extra delay, 0..=`delay_jitter_frames` later frames, added to every frame's
    /// [`delay_frames`](Self::delay_frames). Frames with different delays change order.
    pub delay_jitter_frames: u32,
}

impl Impairments {
    /// No impairment: every frame crosses once, intact, in order, at once.
    pub const NONE: Impairments = Impairments {
        seed: 0,
        drop_probability: 0.0,
        drop_every: 0,
        duplicate_probability: 0.0,
        reorder_probability: 0.0,
        reorder_window: 0,
        corrupt_probability: 0.0,
        delay_frames: 0,
        delay_jitter_frames: 0,
    };

    /// Whether no impairment is set (the seed aside): the wire is perfect.
    pub fn is_none(&self) -> bool {
        self.drop_probability == 0.0
            && self.drop_every == 0
            && self.duplicate_probability == 0.0
            && self.reorder_probability == 0.0
            && self.corrupt_probability == 0.0
            && self.delay_frames == 0
            && self.delay_jitter_frames == 0
    }

    /// Checks the configuration, naming the first field that is out of range.
    pub(super) fn validate(&self) -> Result<(), &'static str> {
        let probabilities = [
            (self.drop_probability, "drop_probability"),
            (self.duplicate_probability, "duplicate_probability"),
            (self.reorder_probability, "reorder_probability"),
            (self.corrupt_probability, "corrupt_probability"),
        ];
        for (p, name) in probabilities {
            if !(0.0..=1.0).contains(&p) {
                return Err(name);
            }
        }
        if self.reorder_probability > 0.0 && self.reorder_window == 0 {
            return Err("reorder_window");
        }
        if self
            .delay_frames
            .checked_add(self.delay_jitter_frames)
            .and_then(|d| d.checked_add(self.reorder_window))
            .and_then(|d| d.checked_add(1))
            .is_none()
        {
            return Err("delay_frames");
        }
        Ok(())
    }
}

impl Default for Impairments {
    fn default() -> Self {
        Self::NONE
    }
}

/// What the impairments did to the frames one port sent. Counts since the wire was created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImpairmentCounters {
    /// Frames the port sent that the impairments saw (every frame accepted by `transmit`).
    pub frames: u64,
    /// Frames dropped, by [`Impairments::drop_every`] or [`Impairments::drop_probability`].
    pub dropped: u64,
    /// Frames delivered twice.
    pub duplicated: u64,
    /// Frames held back by a reordering hold.
    pub reordered: u64,
    /// Frames with one byte corrupted.
    pub corrupted: u64,
    /// Frames held back by a delay of at least one frame.
    pub delayed: u64,
    /// Frames held on the wire right now, waiting for later frames or
    /// [`crate::wire::Wire::release_held`].
    pub held: u64,
}

/// SplitMix64: small, fast, and fully determined by its seed.
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// True with probability `p`. Certain outcomes draw nothing, so turning an impairment off
    /// or fully on does not shift the others' draws.
    fn chance(&mut self, p: f64) -> bool {
        if p <= 0.0 {
            return false;
        }
        if p >= 1.0 {
            return true;
        }
        // 53 random bits make an exact f64 in [0, 1).
        ((self.next_u64() >> 11) as f64) * (1.0 / (1u64 << 53) as f64) < p
    }

    /// A number in `0..n` (`n` at least 1), by multiply-shift: the bias is below 2^-32.
    fn below(&mut self, n: u32) -> u32 {
        let wide = u64::from(self.next_u64() as u32) * u64::from(n);
        (wide >> 32) as u32
    }
}

#[derive(Debug)]
struct HeldFrame {
    frame: Vec<u8>,
    /// Later frames still to be sent before this one crosses.
    remaining: u32,
    /// 1, or 2 for a duplicated frame.
    copies: u8,
}

#[derive(Debug)]
struct ImpairState {
    rng: SplitMix64,
    held: Vec<HeldFrame>,
    /// Empty buffers for frames that must be copied (corrupted or held).
    spare: Vec<Vec<u8>>,
    counters: ImpairmentCounters,
}

impl ImpairState {
    fn take_buffer(&mut self, frame: &[u8]) -> Vec<u8> {
        let mut buf = self.spare.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(frame);
        buf
    }

    fn deliver_and_recycle(&mut self, held: HeldFrame, deliver: &mut impl FnMut(&[u8])) {
        for _ in 0..held.copies {
            deliver(&held.frame);
        }
        self.spare.push(held.frame);
    }
}

/// The impairments of one direction of a wire: those of the frames one port sends.
#[derive(Debug)]
pub(super) struct Impairer {
    config: Impairments,
    state: Mutex<ImpairState>,
}

impl Impairer {
    /// Impairs the frames sent by port `port`; `config` must have passed `validate`.
    pub(super) fn new(config: Impairments, port: usize) -> Self {
        // Each direction has its own stream: the seed shifted by a per-port odd constant.
        let stream = (port as u64 + 1).wrapping_mul(0xd1b5_4a32_d192_ed03);
        Self {
            config,
            state: Mutex::new(ImpairState {
                rng: SplitMix64(config.seed ^ stream),
                held: Vec::new(),
                spare: Vec::new(),
                counters: ImpairmentCounters::default(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, ImpairState> {
        // Each critical section leaves the state consistent between frames; keep going.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Passes `frame` through the impairments, calling `deliver` for each frame that crosses
    /// now (this one, its duplicate, held frames now due), in the order they cross. `deliver`
    /// runs under this direction's lock, so frames of one port cross in one order.
    pub(super) fn transmit(&self, frame: &[u8], mut deliver: impl FnMut(&[u8])) {
        let c = &self.config;
        let mut st = self.lock();
        st.counters.frames += 1;
        // This frame is one more later frame for every frame already held.
        for held in st.held.iter_mut() {
            held.remaining = held.remaining.saturating_sub(1);
        }
        let every_nth = c.drop_every != 0 && st.counters.frames % u64::from(c.drop_every) == 0;
        // Always draw for a random drop, so `drop_every` does not shift later draws.
        let random_drop = st.rng.chance(c.drop_probability);
        if every_nth || random_drop {
            st.counters.dropped += 1;
        } else {
            self.impair_one(&mut st, frame, &mut deliver);
        }
        Self::release_due(&mut st, &mut deliver);
        st.counters.held = st.held.len() as u64;
    }

    fn impair_one(&self, st: &mut ImpairState, frame: &[u8], deliver: &mut impl FnMut(&[u8])) {
        let c = &self.config;
        let corrupt = st.rng.chance(c.corrupt_probability);
        let copies = if st.rng.chance(c.duplicate_probability) {
            st.counters.duplicated += 1;
            2
        } else {
            1
        };
        let mut hold = c.delay_frames;
        if c.delay_jitter_frames > 0 {
            hold += st.rng.below(c.delay_jitter_frames + 1);
        }
        if hold > 0 {
            st.counters.delayed += 1;
        }
        if st.rng.chance(c.reorder_probability) {
            st.counters.reordered += 1;
            hold += 1 + st.rng.below(c.reorder_window);
        }
        if !corrupt && hold == 0 {
            for _ in 0..copies {
                deliver(frame);
            }
            return;
        }
        let mut copy = st.take_buffer(frame);
        if corrupt {
            // Frames are at least an Ethernet header long, so `len` is never zero; `below`
            // keeps the index in range, and `get_mut` states it.
            let len = u32::try_from(copy.len()).unwrap_or(u32::MAX);
            let byte = st.rng.below(len) as usize;
            let bit = st.rng.below(8);
            if let Some(b) = copy.get_mut(byte) {
                *b ^= 1 << bit;
                st.counters.corrupted += 1;
            }
        }
        let held = HeldFrame {
            frame: copy,
            remaining: hold,
            copies,
        };
        if hold == 0 {
            st.deliver_and_recycle(held, deliver);
        } else {
            st.held.push(held);
        }
    }

    /// Delivers the held frames no longer waiting for anything, oldest hold first.
    fn release_due(st: &mut ImpairState, deliver: &mut impl FnMut(&[u8])) {
        let mut i = 0;
        while i < st.held.len() {
            if st.held.get(i).is_some_and(|h| h.remaining == 0) {
                let held = st.held.remove(i);
                st.deliver_and_recycle(held, deliver);
            } else {
                i += 1;
            }
        }
    }

    /// Delivers every held frame now, in the order they would have crossed had enough later
    /// frames been sent. Returns how many held frames were released (duplicates count once).
    pub(super) fn release_all(&self, mut deliver: impl FnMut(&[u8])) -> usize {
        let mut st = self.lock();
        let mut released = 0;
        // The earliest due goes first; among equals, the one held first (`min_by_key` keeps
        // the first minimum).
        while let Some((i, _)) = st.held.iter().enumerate().min_by_key(|(_, h)| h.remaining) {
            let held = st.held.remove(i);
            st.deliver_and_recycle(held, &mut deliver);
            released += 1;
        }
        st.counters.held = 0;
        released
    }

    /// A snapshot of this direction's counters.
    pub(super) fn counters(&self) -> ImpairmentCounters {
        self.lock().counters
    }
}

/// The wire's side of the impairments.
impl Wire {
    /// The impaired path of `transmit`, out of line so the perfect wire's path stays as it was.
    #[cold]
    #[inline(never)]
    pub(super) fn transmit_impaired(&self, impairer: &Impairer, receiver: &Port, frame: &[u8]) {
        impairer.transmit(frame, |crossing| self.arrive(receiver, crossing));
    }

    /// A frame reaching the far end of an impaired wire: the tap sees it, then the peer's FIFO.
    fn arrive(&self, receiver: &Port, frame: &[u8]) {
        if self.tap_enabled.load(Ordering::Acquire) {
            self.record(frame);
        }
        receiver.deliver(frame, self.fifo_capacity, super::TxCount::AtSender);
    }

    /// Delivers at once every frame the impairments hold back on the frames `from` sends (see
    /// [`Impairments::delay_frames`], [`Impairments::reorder_probability`]), in the order they
    /// would have crossed had enough later frames been sent. Returns how many were held; 0 on
    /// a perfect wire.
    pub fn release_held(&self, from: PortId) -> Result<usize, WireError> {
        let sender = self.port(from)?;
        let Some(impairer) = &sender.impairer else {
            return Ok(0);
        };
        let receiver = self
            .ports
            .get(sender.peer)
            .ok_or_else(|| self.unknown(from))?;
        Ok(impairer.release_all(|crossing| self.arrive(receiver, crossing)))
    }

    /// What the impairments did to the frames `from` sent; all zero on a perfect wire.
    pub fn impairment_counters(&self, from: PortId) -> Result<ImpairmentCounters, WireError> {
        Ok(self
            .port(from)?
            .impairer
            .as_ref()
            .map(|impairer| impairer.counters())
            .unwrap_or_default())
    }
}
