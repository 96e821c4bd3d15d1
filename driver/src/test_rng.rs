//! The pseudo-random inputs of the unit tests that play a hostile peer: xorshift64, seeded per
//! test so that every run (and every failure) repeats.

/// A xorshift64 generator; its seed must not be 0 (it would stay 0).
pub(crate) struct TestRng(pub u64);

impl TestRng {
    /// The next 64 pseudo-random bits.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A value in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// Fills `bytes` with pseudo-random bytes.
    pub fn fill(&mut self, bytes: &mut [u8]) {
        for chunk in bytes.chunks_mut(8) {
            let word = self.next().to_le_bytes();
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
    }
}
