//! ncdevmem's validation pattern (`-v N`), as Linux's selftest
//! `tools/testing/selftests/drivers/net/hw/ncdevmem.c` checks it in `validate_buffer`: a seed
//! starting at 1 counts up and wraps to 0 when it reaches `N`; each stream byte is the seed,
//! with 0 written as `'\n'`. With `-v 7` the stream is `1 2 3 4 5 6 '\n' 1 2 ...`.

use std::io::Write;

/// Stream byte `i` of the pattern with modulus `modulus` (2..=255).
pub fn byte(modulus: u8, i: u64) -> u8 {
    match ((i + 1) % u64::from(modulus)) as u8 {
        0 => b'\n',
        v => v,
    }
}

/// Fills `out` with the pattern from stream byte `start`.
pub fn fill(modulus: u8, start: u64, out: &mut [u8]) {
    for (k, b) in out.iter_mut().enumerate() {
        *b = byte(modulus, start + k as u64);
    }
}

/// Writes `bytes` stream bytes of the pattern to `to` (`--emit-pattern`: a sender such as
/// `nc` reads them from a pipe).
///
/// # Errors
///
/// The writer failed (a closed pipe included).
pub fn emit(modulus: u8, bytes: u64, to: &mut impl Write) -> std::io::Result<()> {
    // A whole number of periods per block, so every block is the same.
    let period = usize::from(modulus);
    let mut block = vec![0u8; period * (65536 / period)];
    fill(modulus, 0, &mut block);
    let mut left = bytes;
    while left > 0 {
        let n = left.min(block.len() as u64) as usize;
        to.write_all(&block[..n])?;
        left -= n as u64;
    }
    to.flush()
}

/// Checks a stream against the pattern, piece by piece in stream order.
#[derive(Debug, Clone)]
pub struct Checker {
    modulus: u8,
    next: u64,
    errors: u64,
    first_error: Option<u64>,
}

impl Checker {
    /// A checker at stream byte 0 for modulus `modulus` (2..=255).
    pub fn new(modulus: u8) -> Self {
        Self {
            modulus,
            next: 0,
            errors: 0,
            first_error: None,
        }
    }

    /// Checks `data` as the next stream bytes.
    pub fn check(&mut self, data: &[u8]) {
        for (k, &b) in data.iter().enumerate() {
            let at = self.next + k as u64;
            if b != byte(self.modulus, at) {
                self.errors += 1;
                self.first_error.get_or_insert(at);
            }
        }
        self.next += data.len() as u64;
    }

    /// Stream bytes checked.
    pub fn checked(&self) -> u64 {
        self.next
    }

    /// Bytes that did not match.
    pub fn errors(&self) -> u64 {
        self.errors
    }

    /// The stream offset of the first byte that did not match.
    pub fn first_error(&self) -> Option<u64> {
        self.first_error
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seven_counts_one_to_six_then_a_newline_as_ncdevmem_validates() {
        let mut b = [0u8; 15];
        fill(7, 0, &mut b);
        assert_eq!(b, [1, 2, 3, 4, 5, 6, b'\n', 1, 2, 3, 4, 5, 6, b'\n', 1]);
    }

    #[test]
    fn emitted_bytes_pass_the_checker_and_a_wrong_byte_is_found() {
        let mut out = Vec::new();
        emit(7, 200_000, &mut out).unwrap();
        assert_eq!(out.len(), 200_000);
        let mut c = Checker::new(7);
        c.check(&out[..1000]);
        c.check(&out[1000..]);
        assert_eq!((c.checked(), c.errors()), (200_000, 0));
        out[123_457] ^= 1;
        let mut c = Checker::new(7);
        c.check(&out);
        assert_eq!((c.errors(), c.first_error()), (1, Some(123_457)));
    }
}
