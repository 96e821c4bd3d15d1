//! The Internet checksum (RFC 1071): the ones'-complement sum of 16-bit big-endian words,
//! complemented, as IPv4 headers and ICMP messages carry it; and its incremental update
//! (RFC 1624) for a reply that changes a few words of a verified message.

/// A running ones'-complement sum of 16-bit big-endian words. Bytes may come in pieces of any
/// length: an odd byte left at the end of one piece pairs with the first of the next.
#[derive(Debug, Clone, Copy, Default)]
pub struct Checksum {
    sum: u32,
    /// The high byte of a word whose low byte has not come yet.
    odd: Option<u8>,
}

impl Checksum {
    /// An empty sum.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `bytes` to the sum.
    pub fn add(&mut self, mut bytes: &[u8]) {
        if let (Some(hi), Some((&lo, rest))) = (self.odd, bytes.split_first()) {
            self.add_word(u16::from_be_bytes([hi, lo]));
            self.odd = None;
            bytes = rest;
        }
        let mut words = bytes.chunks_exact(2);
        for w in &mut words {
            self.add_word(u16::from_be_bytes([w[0], w[1]]));
        }
        if let [last] = words.remainder() {
            self.odd = Some(*last);
        }
    }

    fn add_word(&mut self, w: u16) {
        self.sum += u32::from(w);
        // Fold now and then so the 32-bit sum never overflows.
        if self.sum > 0xffff_0000 {
            self.sum = (self.sum & 0xffff) + (self.sum >> 16);
        }
    }

    /// The ones'-complement sum, folded to 16 bits (a trailing odd byte padded with zero).
    pub fn sum(&self) -> u16 {
        let mut s = self.sum;
        if let Some(hi) = self.odd {
            s += u32::from(hi) << 8;
        }
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        s as u16
    }

    /// The checksum to write in the field (the sum's complement), when the field was summed
    /// as zero.
    pub fn finish(&self) -> u16 {
        !self.sum()
    }

    /// True when the bytes summed, checksum field included, verify: their sum is all ones.
    pub fn verifies(&self) -> bool {
        self.sum() == 0xffff
    }
}

/// The checksum of `bytes` (the field summed as zero).
pub fn checksum(bytes: &[u8]) -> u16 {
    let mut c = Checksum::new();
    c.add(bytes);
    c.finish()
}

/// The checksum after one 16-bit word of the summed bytes changes from `old` to `new`
/// (RFC 1624, eqn. 3: `HC' = ~(~HC + ~m + m')`), without summing the message again.
pub fn update(check: u16, old: u16, new: u16) -> u16 {
    let mut s = u32::from(!check) + u32::from(!old) + u32::from(new);
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1071_example_sums_as_the_rfc_shows() {
        // RFC 1071 section 3: the words 0001 f203 f4f5 f6f7 sum to ddf2.
        let bytes = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        let mut c = Checksum::new();
        c.add(&bytes);
        assert_eq!(c.sum(), 0xddf2);
        assert_eq!(checksum(&bytes), !0xddf2);
    }

    #[test]
    fn pieces_of_odd_lengths_sum_as_the_whole() {
        let bytes: Vec<u8> = (0..301u32).map(|i| (i * 37 + 11) as u8).collect();
        for split in [1, 2, 3, 150, 299, 300] {
            let mut c = Checksum::new();
            let (a, b) = bytes.split_at(split);
            let (b, d) = b.split_at(b.len() / 2);
            c.add(a);
            c.add(b);
            c.add(d);
            assert_eq!(c.finish(), checksum(&bytes), "split at {split}");
        }
    }

    #[test]
    fn incremental_update_matches_a_full_recompute() {
        let mut msg: Vec<u8> = (0..64u32).map(|i| (i * 91 + 7) as u8).collect();
        msg[2] = 0;
        msg[3] = 0;
        for (old, new) in [(0x0800u16, 0x0000u16), (0xffff, 0x0000), (0x1234, 0xfedc)] {
            msg[0..2].copy_from_slice(&old.to_be_bytes());
            let before = checksum(&msg);
            msg[0..2].copy_from_slice(&new.to_be_bytes());
            let after = checksum(&msg);
            let up = update(before, old, new);
            // 0x0000 and 0xffff are the same value in ones' complement.
            assert!(up == after || (up ^ after) == 0xffff && (up == 0 || after == 0));
        }
    }
}
