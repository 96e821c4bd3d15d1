//! Payloads the tests move: bytes that change from each one to the next, so that a byte
//! dropped, repeated or put in the wrong place shows in the comparison.

/// `len` bytes, byte `i` being `i * step + seed` (each wrapping at 256).
pub fn pattern_by(len: usize, step: u8, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(step).wrapping_add(seed))
        .collect()
}

/// [`pattern_by`] with step 31.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    pattern_by(len, 31, seed)
}
