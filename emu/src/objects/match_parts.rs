//! Which parts of a frame's match words (`fte_match_param`) a function's flow groups read: a
//! frame's words are built only for those parts (`steering::frame_match_words`), so a
//! function whose groups match outer headers alone (mlx5e's, testpmd's) does not look for
//! tunnels, MPLS labels, TCP sequence numbers or ICMP fields in every frame it steers.

/// A set of parts of `fte_match_param`, by the 64-byte part each 64-bit match word lies in,
/// and whether the header sets' integrity bits are read (a checksum of the frame).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct MatchParts(u8);

impl MatchParts {
    /// `outer_headers` (bytes 0x00-0x3f).
    pub const OUTER: Self = Self(1 << 0);
    /// `misc_parameters` (0x40-0x7f): tunnel fields, second VLAN tags, IPv6 flow labels
    /// (`source_sqn` of a sent frame is put in whatever the parts).
    pub const MISC: Self = Self(1 << 1);
    /// `inner_headers` (0x80-0xbf).
    pub const INNER: Self = Self(1 << 2);
    /// The first MPLS entries of `misc_parameters_2` (0xc0-0xcf; its metadata registers come
    /// from the steering walk, not the frame, and are put in whatever the parts).
    pub const MPLS: Self = Self(1 << 3);
    /// `misc_parameters_3` (0x100-0x13f): TCP sequence numbers, ICMP fields.
    pub const MISC3: Self = Self(1 << 4);
    /// The integrity bits of both header sets (`l3_ok`, `l4_ok`, `ipv4_checksum_ok`,
    /// `l4_checksum_ok`).
    pub const INTEGRITY: Self = Self(1 << 5);

    /// The part match word `index` (0..40, [`super::steering::MATCH_WORDS`]) lies in; none
    /// for the words of `misc_parameters_2` past its MPLS entries (the registers).
    pub fn of_word(index: usize) -> Self {
        match index {
            0..=7 => Self::OUTER,
            8..=15 => Self::MISC,
            16..=23 => Self::INNER,
            24..=25 => Self::MPLS,
            32..=39 => Self::MISC3,
            _ => Self::default(),
        }
    }

    /// True when every part of `other` is in this set.
    #[inline(always)]
    pub fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// This set less the parts of `other`.
    #[inline(always)]
    pub fn without(self, other: Self) -> Self {
        Self(self.0 & !other.0)
    }

    /// True when any part of `other` is in this set.
    #[inline(always)]
    pub fn intersects(self, other: Self) -> bool {
        self.0 & other.0 != 0
    }
}

impl std::ops::BitOr for MatchParts {
    type Output = Self;
    fn bitor(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }
}

impl std::ops::BitOrAssign for MatchParts {
    fn bitor_assign(&mut self, other: Self) {
        self.0 |= other.0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_word_belongs_to_its_part() {
        assert_eq!(MatchParts::of_word(0x10 / 8), MatchParts::OUTER);
        assert_eq!(MatchParts::of_word(0x48 / 8), MatchParts::MISC);
        assert_eq!(MatchParts::of_word(0x80 / 8), MatchParts::INNER);
        assert_eq!(MatchParts::of_word(0xc8 / 8), MatchParts::MPLS);
        // metadata_reg_c_0 at 0xd0..: the walk's registers, not the frame's.
        assert_eq!(MatchParts::of_word(0xd0 / 8), MatchParts::default());
        assert_eq!(MatchParts::of_word(0x138 / 8), MatchParts::MISC3);
        let both = MatchParts::OUTER | MatchParts::MISC3;
        assert!(both.contains(MatchParts::MISC3) && !both.contains(MatchParts::MISC));
        assert!(both.intersects(MatchParts::MISC | MatchParts::OUTER));
        assert_eq!(both.without(MatchParts::OUTER), MatchParts::MISC3);
    }
}
