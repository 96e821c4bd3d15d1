//! The integrity bits ([`crate::integrity`]) in a packet's definer tag: formats 0, 2 and 33
//! carry eight (the outer and the tunnelled packet's), formats 26 and 6 the outer `l3_ok` and
//! `l4_ok`, at the places rdma-core's mlx5_ifc.h gives them (`ste_def*_v1`).

use super::formats::{inner_of, DefinerTag};
use crate::integrity::Integrity;
use crate::sw_steering::lookup::{put, PacketView};
use cxdirect_hw::definer::format;

/// Where a format's tag carries the integrity bits ([`crate::integrity`]).
#[derive(Debug, Clone, Copy)]
enum IntegrityPlaces {
    /// Eight bits from this one, as `ste_def0_v1` (0xf0), `ste_def2_v1` (0xf8) and
    /// `ste_def33_v1` (0xe8) place them: inner and outer `ipv4_checksum_ok` and
    /// `l4_checksum_ok`, then inner and outer `l3_ok` and `l4_ok`.
    Block(usize),
    /// The outer packet's `l3_ok` and `l4_ok` alone (`ste_def26_v1` 0xac and 0xad,
    /// `ste_def6_v1` 0xe5 and 0xe4; rdma-core's `dr_ste_v1_build_def26_tag` and `_def6_tag`
    /// fill them from the outer headers).
    Outer { l3_ok: usize, l4_ok: usize },
}

/// Where `format` carries integrity bits, if it does.
fn integrity_places(format: u16) -> Option<IntegrityPlaces> {
    Some(match format {
        format::DEF0 => IntegrityPlaces::Block(0xf0),
        format::DEF2 => IntegrityPlaces::Block(0xf8),
        format::DEF33 => IntegrityPlaces::Block(0xe8),
        format::DEF26 => IntegrityPlaces::Outer {
            l3_ok: 0xac,
            l4_ok: 0xad,
        },
        format::DEF6 => IntegrityPlaces::Outer {
            l3_ok: 0xe5,
            l4_ok: 0xe4,
        },
        _ => return None,
    })
}

/// Writes the integrity bits `outer` and `inner` at `places` of `t`.
fn put_integrity_bits(
    t: &mut DefinerTag,
    places: IntegrityPlaces,
    outer: Integrity,
    inner: Integrity,
) {
    match places {
        IntegrityPlaces::Block(at) => {
            let bits = [
                inner.ipv4_checksum_ok,
                inner.l4_checksum_ok,
                outer.ipv4_checksum_ok,
                outer.l4_checksum_ok,
                inner.l3_ok,
                inner.l4_ok,
                outer.l3_ok,
                outer.l4_ok,
            ];
            for (i, bit) in bits.into_iter().enumerate() {
                put(t, at + i, 1, u32::from(bit));
            }
        }
        IntegrityPlaces::Outer { l3_ok, l4_ok } => {
            put(t, l3_ok, 1, u32::from(outer.l3_ok));
            put(t, l4_ok, 1, u32::from(outer.l4_ok));
        }
    }
}

/// Whether `mask` selects one of the bits at `places` (bit `n` of a tag is bit `7 - n % 8` of
/// its byte `n / 8`, most significant first).
fn selects(places: IntegrityPlaces, mask: &DefinerTag) -> bool {
    let bit = |n: usize| mask.get(n / 8).is_some_and(|b| b & (0x80 >> (n % 8)) != 0);
    match places {
        IntegrityPlaces::Block(at) => (at..at + 8).any(bit),
        IntegrityPlaces::Outer { l3_ok, l4_ok } => bit(l3_ok) || bit(l4_ok),
    }
}

/// Puts the packet's integrity bits into its tag `t` in `format`, when the definer's `mask`
/// selects one of them: they cost a checksum of the packet (and of the one a tunnel carries),
/// which a definer that does not ask for them does not pay.
pub(super) fn put_integrity(
    format: u16,
    t: &mut DefinerTag,
    pkt: &PacketView<'_>,
    mask: &DefinerTag,
) {
    let Some(places) = integrity_places(format) else {
        return;
    };
    if !selects(places, mask) {
        return;
    }
    let outer = crate::integrity::of(pkt.frame, pkt.parsed);
    let inner = inner_of(pkt).map_or(Integrity::default(), |(frame, parsed)| {
        crate::integrity::of(frame, &parsed)
    });
    put_integrity_bits(t, places, outer, inner);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sw_steering::lookup::{viewed, Metadata};
    use cxdirect_hw::definer::DEFINER_TAG_BYTES;

    #[test]
    fn integrity_bits_are_filled_only_under_a_mask_that_selects_them() {
        let mut f = super::super::formats::test_frame();
        crate::packet::insert_checksums(&mut f, true, true).expect("checksums");
        let meta = Metadata::default();
        let with = |format: u16, mask: DefinerTag| {
            viewed(&f, &meta, |pkt| {
                let mut t = [0u8; DEFINER_TAG_BYTES];
                put_integrity(format, &mut t, pkt, &mask);
                t
            })
        };
        let mut mask = [0u8; DEFINER_TAG_BYTES];
        mask[29] = 0xff;
        // Format 33 at 0xe8: the outer checksums and the outer l3_ok and l4_ok set, no
        // tunnel so no inner bits.
        assert_eq!(with(format::DEF33, mask)[29], 0b0011_0011);
        // Format 6's outer l4_ok (0xe4) and l3_ok (0xe5) in byte 28.
        let mut mask6 = [0u8; DEFINER_TAG_BYTES];
        mask6[28] = 0x0c;
        assert_eq!(with(format::DEF6, mask6)[28], 0x0c);
        // A mask elsewhere: nothing computed, nothing written.
        let mut other = [0u8; DEFINER_TAG_BYTES];
        other[0] = 0xff;
        assert_eq!(with(format::DEF33, other), [0u8; DEFINER_TAG_BYTES]);
        // A broken IPv4 checksum clears the outer ipv4_checksum_ok (0xea) alone.
        let mut bad = f.clone();
        let l3 = crate::packet::parse(&bad).l3_offset;
        bad[l3 + 10] ^= 0x5a;
        let t = viewed(&bad, &meta, |pkt| {
            let mut t = [0u8; DEFINER_TAG_BYTES];
            put_integrity(format::DEF33, &mut t, pkt, &mask);
            t
        });
        assert_eq!(t[29], 0b0001_0011);
    }
}
