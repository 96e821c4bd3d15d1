//! MPLS label stack entries as the device's parser finds them: after an Ethernet header whose
//! ethertype (past its VLAN tags) is MPLS unicast (0x8847) or multicast (0x8848). Each entry
//! is one big-endian 32-bit word: label (20 bits), traffic class (`exp`, 3), bottom of stack
//! (`s_bos`, 1), TTL (8), the layout of Linux's `fte_match_mpls` and of rdma-core's
//! `mpls0_label` .. `mpls0_ttl` in `ste_mpls_v1`, so a match takes the word as it stands.
//!
//! The first entry of the outer frame is `misc_parameters_2.outer_first_mpls` and the
//! MPLS_O steering lookup's `mpls0`; the first entry of the frame an L2 tunnel carries is
//! `inner_first_mpls` and MPLS_I's. MPLS over GRE or UDP (`outer_first_mpls_over_gre`,
//! `_over_udp`) is read by a ConnectX's flex parser, which the model does not offer.

use crate::packet::Parsed;

/// Ethertype of MPLS unicast.
pub(crate) const ETHERTYPE_MPLS_UC: u16 = 0x8847;
/// Ethertype of MPLS multicast.
pub(crate) const ETHERTYPE_MPLS_MC: u16 = 0x8848;

/// The first label stack entry of `frame` (parsed as `parsed`), when its ethertype is MPLS and
/// the entry is whole.
pub(crate) fn first_entry(frame: &[u8], parsed: &Parsed) -> Option<u32> {
    match parsed.ethertype? {
        ETHERTYPE_MPLS_UC | ETHERTYPE_MPLS_MC => {}
        _ => return None,
    }
    let at = parsed.l3_offset;
    let bytes = frame.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
}

/// The first label stack entry of the Ethernet frame an L2 tunnel (VXLAN, GENEVE, GRE with
/// transparent Ethernet bridging) in `frame` carries.
pub(crate) fn inner_first_entry(frame: &[u8], parsed: &Parsed) -> Option<u32> {
    let (inner, inner_parsed) = crate::tunnel::inner_packet(frame, parsed)?;
    first_entry(inner, &inner_parsed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::parse;

    /// An Ethernet frame of `ethertype` with `entries` after it.
    fn frame(ethertype: u16, entries: &[u32]) -> Vec<u8> {
        let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
        f.extend_from_slice(&ethertype.to_be_bytes());
        for e in entries {
            f.extend_from_slice(&e.to_be_bytes());
        }
        f
    }

    #[test]
    fn the_first_entry_follows_an_mpls_ethertype() {
        // Label 0x12345, exp 5, bottom of stack, TTL 64.
        let entry = 0x12345 << 12 | 5 << 9 | 1 << 8 | 64;
        let f = frame(ETHERTYPE_MPLS_UC, &[entry]);
        assert_eq!(first_entry(&f, &parse(&f)), Some(entry));
        let f = frame(ETHERTYPE_MPLS_MC, &[7 << 12, entry]);
        assert_eq!(first_entry(&f, &parse(&f)), Some(7 << 12));
        // Not MPLS, or cut short.
        let f = frame(0x0800, &[entry]);
        assert_eq!(first_entry(&f, &parse(&f)), None);
        let mut f = frame(ETHERTYPE_MPLS_UC, &[entry]);
        f.truncate(16);
        assert_eq!(first_entry(&f, &parse(&f)), None);
    }
}
