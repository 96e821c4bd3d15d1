//! The integrity bits a ConnectX's parser sets for each packet it receives, which flow groups
//! match in `fte_match_set_lyr_2_4` (`l3_ok`, `l4_ok`, `ipv4_checksum_ok`, `l4_checksum_ok`;
//! DPDK's integrity item, `flow_dv_translate_integrity_l3` and `_l4` in mlx5_flow_dv.c) and
//! match definers carry in their tags (`crate::sw_steering::definer`). What
//! each bit says is NVIDIA's DPDK guide's ("Steering by Integrity Check Flags"): `l3_ok`, an
//! IPv4 or IPv6 header whose length field does not claim more than the packet holds;
//! `l4_ok`, a UDP length or TCP data offset within the packet; `ipv4_checksum_ok` and
//! `l4_checksum_ok`, the checksums right. The lengths and the checksums are separate bits:
//! DPDK asks for both when its item says `l3_ok` or `l4_ok`.

use crate::packet::{self, L3Kind, L4Kind, Parsed};

/// The four integrity bits of one packet (outer or inner).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Integrity {
    /// An IP header whose length field fits the packet (IPv4: the total length covers the
    /// header and does not pass the frame's end; IPv6: the payload length does not).
    pub l3_ok: bool,
    /// `l3_ok`, and an unfragmented TCP or UDP header whose length (UDP's length field, TCP's
    /// data offset) fits within the IP packet.
    pub l4_ok: bool,
    /// An IPv4 header whose checksum is right.
    pub ipv4_checksum_ok: bool,
    /// A TCP or UDP segment whose checksum, pseudo-header included, is right (UDP over IPv4
    /// without a checksum counts as right).
    pub l4_checksum_ok: bool,
}

/// The integrity bits of `frame`, parsed as `parsed`.
pub(crate) fn of(frame: &[u8], parsed: &Parsed) -> Integrity {
    let l3_ok = match parsed.l3 {
        L3Kind::Ipv4 => {
            parsed.ip_end >= parsed.l3_offset.saturating_add(parsed.l3_len)
                && parsed.ip_end <= frame.len()
        }
        L3Kind::Ipv6 => parsed.ip_end <= frame.len(),
        L3Kind::None => false,
    };
    let is_l4 = matches!(parsed.l4, L4Kind::Tcp | L4Kind::Udp);
    Integrity {
        l3_ok,
        l4_ok: l3_ok && is_l4 && packet::l4_lengths_ok(frame, parsed),
        ipv4_checksum_ok: parsed.l3 == L3Kind::Ipv4 && ipv4_header_sums_right(frame, parsed),
        l4_checksum_ok: is_l4 && packet::l4_checksum_ok(frame, parsed),
    }
}

/// Whether the IPv4 header's one's-complement sum is all ones, whatever its total length says
/// (that is `l3_ok`'s).
fn ipv4_header_sums_right(frame: &[u8], parsed: &Parsed) -> bool {
    let end = parsed.l3_offset.saturating_add(parsed.l3_len);
    frame
        .get(parsed.l3_offset..end)
        .is_some_and(|header| packet::ones_complement_sum(header, 0) == 0xffff)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::udp_frame;

    fn bits(frame: &[u8]) -> Integrity {
        of(frame, &packet::parse(frame))
    }

    #[test]
    fn a_good_datagram_has_all_four_bits() {
        let f = udp_frame(40, 7);
        let want = Integrity {
            l3_ok: true,
            l4_ok: true,
            ipv4_checksum_ok: true,
            l4_checksum_ok: true,
        };
        assert_eq!(bits(&f), want);
    }

    #[test]
    fn each_fault_clears_its_own_bit() {
        let good = udp_frame(40, 7);
        // The IPv4 header checksum (bytes 24-25).
        let mut f = good.clone();
        f[24] ^= 0xff;
        let b = bits(&f);
        assert!(!b.ipv4_checksum_ok && b.l3_ok && b.l4_ok && b.l4_checksum_ok);
        // The UDP checksum (bytes 40-41).
        let mut f = good.clone();
        f[40] ^= 0x01;
        let b = bits(&f);
        assert!(!b.l4_checksum_ok && b.l3_ok && b.l4_ok && b.ipv4_checksum_ok);
        // A UDP length past the IP packet (bytes 38-39).
        let mut f = good.clone();
        f[38..40].copy_from_slice(&200u16.to_be_bytes());
        let b = bits(&f);
        assert!(!b.l4_ok && b.l3_ok && b.ipv4_checksum_ok);
        // An IPv4 total length past the frame (bytes 16-17), its checksum made right again.
        let mut f = good;
        f[16..18].copy_from_slice(&400u16.to_be_bytes());
        f[24..26].fill(0);
        let sum = !packet::ones_complement_sum(&f[14..34], 0);
        f[24..26].copy_from_slice(&sum.to_be_bytes());
        let b = bits(&f);
        assert!(!b.l3_ok && !b.l4_ok && b.ipv4_checksum_ok);
    }

    #[test]
    fn a_frame_without_ip_has_none() {
        let mut f = udp_frame(8, 0);
        f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
        assert_eq!(bits(&f), Integrity::default());
    }
}
