//! The model's flex parsers, as a ConnectX-6 Dx's firmware configuration assigns them: all to
//! GTP-U (`FLEX_PARSER_PROFILE_ENABLE=3`, which DPDK's mlx5 guide names for GTP matching),
//! each sampling one dword of a GTP-U header. What `flex_parser_protocols` and the
//! `flex_parser_id_gtpu_*` fields of the general capabilities report, and a packet's samples,
//! which steering entries' flex parser lookups (`FLEX_PARSER_0` for parsers 0..=3,
//! `FLEX_PARSER_1` for 4..=7: rdma-core's `dr_ste_v1_build_tnl_gtpu_flex_parser_0_tag`) and
//! flow entries' `misc_parameters_3` GTP-U dwords read. Which parser samples which dword is the
//! configuration's choice (the model's: 0 to 3 in `flex_parser_id_gtpu_*` order below);
//! parsers 4..=7 sample nothing. GENEVE, VXLAN-GPE and ICMP a ConnectX-6 Dx parses without a
//! flex parser (rdma-core's `dr_matcher_supp_*` for its steering format); what other profiles
//! give (MPLS over GRE or UDP, GENEVE options, eCPRI) this configuration does not.

use crate::packet::Parsed;
use cxdirect_hw::caps::{
    FLEX_PARSER_GTPU_DW_0_ENABLED, FLEX_PARSER_GTPU_DW_2_ENABLED, FLEX_PARSER_GTPU_ENABLED,
    FLEX_PARSER_GTPU_FIRST_EXT_DW_0_ENABLED, FLEX_PARSER_GTPU_TEID_ENABLED,
};

/// `flex_parser_protocols`: GTP-U's header (through the tunnel header lookup) and the four
/// dwords the parsers sample.
pub(crate) const PROTOCOLS: u32 = FLEX_PARSER_GTPU_ENABLED
    | FLEX_PARSER_GTPU_DW_0_ENABLED
    | FLEX_PARSER_GTPU_TEID_ENABLED
    | FLEX_PARSER_GTPU_DW_2_ENABLED
    | FLEX_PARSER_GTPU_FIRST_EXT_DW_0_ENABLED;
/// The parser sampling GTP-U's first dword (flags, message type, length).
pub(crate) const ID_GTPU_DW_0: u8 = 0;
/// The parser sampling GTP-U's TEID.
pub(crate) const ID_GTPU_TEID: u8 = 1;
/// The parser sampling GTP-U's third dword (sequence number, N-PDU number, next extension
/// type).
pub(crate) const ID_GTPU_DW_2: u8 = 2;
/// The parser sampling the first dword of GTP-U's first extension header.
pub(crate) const ID_GTPU_FIRST_EXT_DW_0: u8 = 3;
/// Flex parsers: eight, each one dword.
pub(crate) const PARSERS: usize = 8;

/// The dword each parser samples of `frame` (parsed as `p`), by parser id: 0 for a parser
/// assigned nothing, and for a packet without the dword (not GTP-U, no optional word, no
/// extension header).
pub(crate) fn samples(frame: &[u8], p: &Parsed) -> [u32; PARSERS] {
    let mut s = [0; PARSERS];
    if let Some(w) = crate::tunnel::gtpu_words(frame, p) {
        s[usize::from(ID_GTPU_DW_0)] = w.dw_0;
        s[usize::from(ID_GTPU_TEID)] = w.teid;
        s[usize::from(ID_GTPU_DW_2)] = w.dw_2;
        s[usize::from(ID_GTPU_FIRST_EXT_DW_0)] = w.first_ext_dw_0;
    }
    s
}
