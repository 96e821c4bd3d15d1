//! Which bits of a flow group's match criteria the model matches. A frame's match words
//! ([`crate::steering::frame_match_words`]) project every field of the outer and inner header
//! sets (the integrity bits on receive only), the misc set's tunnel fields, second VLAN tags,
//! IPv6 flow labels and (for frames an SQ sends) source SQ, the second misc set's first MPLS
//! entries and metadata registers, and the third's TCP sequence numbers, VXLAN-GPE and GTP-U
//! headers (with the GTP-U dwords the flex parsers sample) and ICMP fields. A group whose
//! criteria select any other bit is refused, never accepted: an ignored mask would read the
//! field as zero and match frames a ConnectX would not.

use super::{bad_param, CmdResult, Syndrome};
use cxdirect_hw::flow::{MATCH_MISC_PARAMETERS_2, MATCH_MISC_PARAMETERS_3};

/// Bytes of `fte_match_param`: a group's criteria and an entry's value.
pub(super) const MATCH_PARAM_SIZE: usize = 0x200;

const INTEGRITY_ON_TRANSMIT: &str = "match criteria on the integrity bits (l3_ok, l4_ok, \
     ipv4_checksum_ok, l4_checksum_ok) in a transmit table: a ConnectX offers them on receive \
     only (ft_field_support_2_nic_receive; its transmit support is 0)";
const RESERVED: &str = "match criteria on reserved bits";
const ESWITCH_SOURCE: &str = "match criteria on the e-switch's source fields (source_vhca_port, \
     source_eswitch_owner_vhca_id, source_port), which the model's one-vport e-switch does not \
     match";
const BTH_OR_ESP: &str =
    "match criteria on bth_opcode, bth_dst_qp or an ESP SPI, which the model does not match";
const GENEVE_TLV: &str = "match criteria on geneve_tlv_option_0_exist (a flex parser's), which \
     the model does not match";

/// Bits (offset, width, in the PRM's bit order from the start of `fte_match_param`) that no
/// frame's match words carry, with the refusal of criteria that select one.
const UNPROJECTED: &[(usize, usize, &str)] = &[
    // fte_match_set_lyr_2_4, outer (bit 0) and inner (bit 0x400): the bits between `l4_type`
    // and `ipv4_ihl`.
    (0xc2, 0xe, RESERVED),
    (0x400 + 0xc2, 0xe, RESERVED),
    // fte_match_set_misc (bit 0x200).
    (0x200 + 0x1, 0x1, RESERVED),
    (0x200 + 0x4, 0x4, ESWITCH_SOURCE),
    (0x200 + 0x20, 0x20, ESWITCH_SOURCE),
    (0x200 + 0x64, 0xc, RESERVED),
    (0x200 + 0xb8, 0x8, BTH_OR_ESP),
    (0x200 + 0xd8, 0x6, RESERVED),
    (0x200 + 0xde, 0x1, GENEVE_TLV),
    (0x200 + 0xe0, 0xc, RESERVED),
    (0x200 + 0x100, 0xc, RESERVED),
    (0x200 + 0x120, 0xa, RESERVED),
    (0x200 + 0x140, 0x8, RESERVED),
    (0x200 + 0x148, 0x58, BTH_OR_ESP),
    (0x200 + 0x1a0, 0x60, RESERVED),
];

/// Whether `criteria` selects any bit in `offset..offset + width`.
fn selects_bits(criteria: &[u8; MATCH_PARAM_SIZE], offset: usize, width: usize) -> bool {
    (offset..offset + width).any(|bit| criteria[bit / 8] & (0x80 >> (bit % 8)) != 0)
}

/// Refuses criteria the model cannot match (see the module's text) in the parts `enable`
/// turns on (`match_criteria_enable`: bit 0 outer headers, 1 misc, 2 inner headers, 3 the
/// second misc set, 4 the third, 5 and on the fourth and later): in the second misc set MPLS
/// over GRE and over UDP (bytes 0xc8..0xd0, read by a ConnectX's flex parser) and what
/// follows `metadata_reg_a` (0xf4..0x100: Linux's IPsec, MACsec and PSP syndromes, rdma-core's
/// `metadata_reg_b`); in the third the flex parser's GENEVE option data (0x124..0x128: the
/// model's flex parsers sample GTP-U, `crate::flex_parser`) and its reserved bytes (0x12e..0x130,
/// 0x13c..0x140; VXLAN-GPE's fields, 0x111..0x118, and GTP-U's, 0x128..0x13c, are matched);
/// the fourth set and after (from 0x140: programmable
/// samples, MACsec tags, tunnel header words); the bits of [`UNPROJECTED`]; and, unless the
/// group is in a `receive` table, the integrity bits ([`selects_integrity`]).
pub(super) fn check_modelled(
    criteria: &[u8; MATCH_PARAM_SIZE],
    enable: u8,
    receive: bool,
) -> CmdResult {
    if !receive && selects_integrity(criteria, enable) {
        return Err(bad_param(
            Syndrome::BadSteeringParams,
            INTEGRITY_ON_TRANSMIT,
        ));
    }
    let selects = |range: std::ops::Range<usize>| criteria[range].iter().any(|&b| b != 0);
    let misc2 = enable & MATCH_MISC_PARAMETERS_2 != 0;
    let misc3 = enable & MATCH_MISC_PARAMETERS_3 != 0;
    let unmodelled_misc2 = misc2 && (selects(0xc8..0xd0) || selects(0xf4..0x100));
    let unmodelled_misc3 =
        misc3 && (selects(0x124..0x128) || selects(0x12e..0x130) || selects(0x13c..0x140));
    let later = enable >> 5 != 0 && selects(0x140..MATCH_PARAM_SIZE);
    if unmodelled_misc2 || unmodelled_misc3 || later {
        return Err(bad_param(
            Syndrome::BadSteeringParams,
            "match criteria on fields the model does not match: MPLS over GRE or UDP, the \
             syndromes after metadata_reg_a, GENEVE option data (the flex parsers sample \
             GTP-U), reserved bits of misc_parameters_3, or misc_parameters_4 and later",
        ));
    }
    // Each part's enable bit: outer headers 0, misc 1, inner headers 2 (0x200 bits each).
    let enabled = |bit: usize| enable & (1 << (bit / 0x200)) != 0;
    match UNPROJECTED
        .iter()
        .find(|&&(offset, width, _)| enabled(offset) && selects_bits(criteria, offset, width))
    {
        Some(&(_, _, refusal)) => Err(bad_param(Syndrome::BadSteeringParams, refusal)),
        None => Ok(()),
    }
}

/// Whether `criteria` select an integrity bit (`l3_ok`, `l4_ok`, `ipv4_checksum_ok`,
/// `l4_checksum_ok`: bits 0xd4..0xd8 of `fte_match_set_lyr_2_4`, as DPDK's mlx5_prm.h and
/// rdma-core's mlx5_ifc.h place them) of the outer or inner headers that `enable` turns on.
pub(super) fn selects_integrity(criteria: &[u8; MATCH_PARAM_SIZE], enable: u8) -> bool {
    const OUTER: u8 = 1 << 0;
    const INNER: u8 = 1 << 2;
    (enable & OUTER != 0 && selects_bits(criteria, 0xd4, 4))
        || (enable & INNER != 0 && selects_bits(criteria, 0x400 + 0xd4, 4))
}
