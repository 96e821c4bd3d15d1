//! TCP sequence numbers: 32-bit values compared modulo 2^32 (RFC 793 §3.3), so a window that
//! straddles the wrap compares as it does anywhere else.

/// A TCP sequence number. Ordering is circular: `a` is before `b` when `b - a` (mod 2^32),
/// read as signed, is positive; only numbers less than 2^31 apart compare meaningfully, which
/// the receiver's window (at most 2^30 bytes, RFC 7323 §2.3) guarantees for what it keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Seq(pub u32);

impl Seq {
    /// The number `n` bytes on.
    #[inline]
    pub fn plus(self, n: u32) -> Seq {
        Seq(self.0.wrapping_add(n))
    }

    /// Signed distance from `other` to `self` (`self - other`), modulo 2^32.
    #[inline]
    pub fn diff(self, other: Seq) -> i32 {
        self.0.wrapping_sub(other.0) as i32
    }

    /// Whether `self` comes strictly before `other`.
    #[inline]
    pub fn lt(self, other: Seq) -> bool {
        self.diff(other) < 0
    }

    /// Whether `self` comes before or is `other`.
    #[inline]
    pub fn le(self, other: Seq) -> bool {
        self.diff(other) <= 0
    }

    /// Whether `self` lies in `[start, start + len)`.
    #[inline]
    pub fn within(self, start: Seq, len: u32) -> bool {
        self.0.wrapping_sub(start.0) < len
    }
}

#[cfg(test)]
mod tests {
    use super::Seq;

    #[test]
    fn comparisons_hold_across_the_wrap() {
        let a = Seq(u32::MAX - 10);
        let b = a.plus(20);
        assert_eq!(b, Seq(9));
        assert!(a.lt(b));
        assert!(!b.lt(a));
        assert_eq!(b.diff(a), 20);
        assert_eq!(a.diff(b), -20);
        assert!(Seq(3).within(a, 20));
        assert!(!Seq(9).within(a, 20));
        assert!(a.le(a));
    }
}
